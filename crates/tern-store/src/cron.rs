//! Scheduled jobs' rows (`cron_jobs`, `cron_occurrences`, migration 0021): the jobs, and one
//! row per occurrence that came due, so that each runs at most once and none goes unrecorded.
//!
//! # Exactly once
//!
//! An occurrence is the pair (job, scheduled time), unique in `cron_occurrences`.
//! [`Store::cron_claim`] inserts it as `running` **and** moves the job's `next_run_at` past it
//! in one transaction: a second claim of the same occurrence (a second scheduler, a plan made
//! again after a crash) finds the row and gets [`Claim::Taken`], and a crash before the commit
//! leaves neither, so the occurrence is still due after the restart. [`Store::cron_skip`]
//! records an occurrence not run, with its reason, the same way. A run cut short by a crash is
//! left `running`; [`Store::cron_interrupted_on_start`] marks those `interrupted` when the
//! gateway starts, and [`Store::cron_retry`] runs one again at most once (attempt 2).
//!
//! The scheduler's one query is [`Store::cron_due`]: the enabled jobs whose `next_run_at` has
//! come, through a partial index, so the cost of a pass does not grow with idle jobs; and
//! [`Store::cron_next_wake`] says when to look next (one sleep, not a timer per job).
//!
//! Times are milliseconds since the Unix epoch. Occurrences outlive their job (its history).

use serde::{Deserialize, Serialize};
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use crate::{Result, Store, StoreError, now_ms};

/// What a job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CronJobKind {
    /// An agent turn on the prompt.
    Agent,
    /// A command, with no model; its output is delivered.
    Script,
}

crate::stored_as_text!(CronJobKind, "cron job kind", {
    Agent => "agent",
    Script => "script",
});

/// What to do with occurrences missed while the gateway was down (see `tern_cron::plan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CronCatchUp {
    #[default]
    One,
    All,
    None,
}

crate::stored_as_text!(CronCatchUp, "cron catch-up policy", {
    One => "one",
    All => "all",
    None => "none",
});

/// What to do with an occurrence that comes while the previous run is still going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CronOverlap {
    #[default]
    Skip,
    Queue,
}

crate::stored_as_text!(CronOverlap, "cron overlap policy", {
    Skip => "skip",
    Queue => "queue",
});

/// Who made a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CronCreator {
    Cli,
    Api,
    /// The `cronjob` tool, from a session (`created_by_session`).
    Agent,
}

crate::stored_as_text!(CronCreator, "cron job creator", {
    Cli => "cli",
    Api => "api",
    Agent => "agent",
});

/// Where an occurrence is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OccurrenceState {
    /// Claimed: its run started (or is about to).
    Running,
    /// Its run ended (`outcome` says how).
    Ran,
    /// Not run (`reason` says why).
    Skipped,
    /// Its run was cut short by a crash.
    Interrupted,
}

crate::stored_as_text!(OccurrenceState, "cron occurrence state", {
    Running => "running",
    Ran => "ran",
    Skipped => "skipped",
    Interrupted => "interrupted",
});

/// Where a job's runs happen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CronTarget {
    /// A new session per run.
    NewSession,
    /// One session whose history accumulates.
    Session(String),
}

const NEW_SESSION: &str = "new_session";

impl CronTarget {
    fn to_stored(&self) -> &str {
        match self {
            CronTarget::NewSession => NEW_SESSION,
            CronTarget::Session(id) => id,
        }
    }

    fn from_stored(s: String) -> Self {
        if s == NEW_SESSION {
            CronTarget::NewSession
        } else {
            CronTarget::Session(s)
        }
    }
}

/// Where a run's result goes; stored as JSON (`"none"`, `"session_chat"`,
/// `{"webhook":"https://…"}`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliverTo {
    /// Nowhere: it stays in the session.
    #[default]
    None,
    /// A chat: the run's session is attached to it, so what the run says is sent there.
    Chat {
        channel: String,
        chat_id: String,
        #[serde(default)]
        thread_id: String,
    },
    /// POSTed to this URL.
    Webhook(String),
}

/// A job to create, or the new definition of one ([`Store::update_cron_job`]).
#[derive(Debug, Clone, PartialEq)]
pub struct NewCronJob {
    pub name: Option<String>,
    /// `Schedule::to_stored()`.
    pub schedule: String,
    pub prompt: String,
    pub kind: CronJobKind,
    /// The command of a `script` job; required for those, refused for `agent` jobs.
    pub script: Option<String>,
    pub target: CronTarget,
    /// Toolset names; `None`: the defaults.
    pub toolsets: Option<Vec<String>>,
    pub timeout_ms: Option<i64>,
    pub deliver_to: DeliverTo,
    pub catch_up: CronCatchUp,
    pub grace_ms: i64,
    pub overlap: CronOverlap,
    pub retry_interrupted: bool,
    pub enabled: bool,
    /// The first occurrence; `None` for a schedule with none left.
    pub next_run_at: Option<i64>,
    /// The API key that owns the job (not changed by an update).
    pub owner_key: Option<String>,
    /// Who made it (not changed by an update).
    pub created_by: CronCreator,
    pub created_by_session: Option<String>,
}

/// A stored job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CronJob {
    pub id: String,
    pub name: Option<String>,
    pub schedule: String,
    pub prompt: String,
    pub kind: CronJobKind,
    pub script: Option<String>,
    pub target: CronTarget,
    pub toolsets: Option<Vec<String>>,
    pub timeout_ms: Option<i64>,
    pub deliver_to: DeliverTo,
    pub catch_up: CronCatchUp,
    pub grace_ms: i64,
    pub overlap: CronOverlap,
    pub retry_interrupted: bool,
    pub enabled: bool,
    pub owner_key: Option<String>,
    pub created_by: CronCreator,
    pub created_by_session: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub next_run_at: Option<i64>,
    pub retired_at: Option<i64>,
}

/// One occurrence of a job that came due.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CronOccurrence {
    pub id: i64,
    pub job_id: String,
    pub scheduled_at: i64,
    pub state: OccurrenceState,
    /// Why it was skipped.
    pub reason: Option<String>,
    /// The session the run went to, once known.
    pub session_id: Option<String>,
    /// How the run ended.
    pub outcome: Option<String>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// 1, or 2 for the retry of an interrupted run.
    pub attempt: i64,
    /// Run by hand (`tern cron run`), at the time it was asked.
    pub manual: bool,
    /// What the run produced (its last answer, or the script's output), cut to 64 KiB.
    pub output: Option<String>,
    /// Webhook delivery: `None` until tried, then `delivered` or `failed: …`.
    pub delivery: Option<String>,
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This caller owns the run.
    Claimed(Box<CronOccurrence>),
    /// The occurrence was claimed or skipped before: do not run it.
    Taken,
    /// The job is not due at that occurrence (removed, paused, retired, or its
    /// `next_run_at` moved past it, e.g. by a resume): nothing was written; plan again.
    NotDue,
}

macro_rules! job_cols {
    () => {
        "id, name, schedule, prompt, kind, script, target, toolsets, timeout_ms, deliver_to, \
         catch_up, grace_ms, overlap, retry_interrupted, enabled, owner_key, created_by, \
         created_by_session, created_at, updated_at, next_run_at, retired_at"
    };
}

macro_rules! occurrence_cols {
    () => {
        "id, job_id, scheduled_at, state, reason, session_id, outcome, started_at, \
         finished_at, attempt, trigger, output, delivery"
    };
}

/// The most of a run's output kept with its occurrence.
pub const MAX_OUTPUT: usize = 64 * 1024;

/// `text` cut to [`MAX_OUTPUT`] bytes on a character boundary, saying so.
fn cut_output(text: &str) -> String {
    if text.len() <= MAX_OUTPUT {
        return text.to_owned();
    }
    let mut end = MAX_OUTPUT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[… cut: {} bytes in all]", &text[..end], text.len())
}

fn corrupt(what: &str, e: serde_json::Error) -> StoreError {
    StoreError::Corrupt(format!("cron job {what}: {e}"))
}

fn job_from_row(row: &SqliteRow) -> Result<CronJob> {
    let toolsets: Option<String> = row.try_get("toolsets")?;
    let deliver_to: String = row.try_get("deliver_to")?;
    Ok(CronJob {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        schedule: row.try_get("schedule")?,
        prompt: row.try_get("prompt")?,
        kind: CronJobKind::parse(row.try_get("kind")?)?,
        script: row.try_get("script")?,
        target: CronTarget::from_stored(row.try_get("target")?),
        toolsets: toolsets
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|e| corrupt("toolsets", e))?,
        timeout_ms: row.try_get("timeout_ms")?,
        deliver_to: serde_json::from_str(&deliver_to).map_err(|e| corrupt("deliver_to", e))?,
        catch_up: CronCatchUp::parse(row.try_get("catch_up")?)?,
        grace_ms: row.try_get("grace_ms")?,
        overlap: CronOverlap::parse(row.try_get("overlap")?)?,
        retry_interrupted: row.try_get("retry_interrupted")?,
        enabled: row.try_get("enabled")?,
        owner_key: row.try_get("owner_key")?,
        created_by: CronCreator::parse(row.try_get("created_by")?)?,
        created_by_session: row.try_get("created_by_session")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        next_run_at: row.try_get("next_run_at")?,
        retired_at: row.try_get("retired_at")?,
    })
}

fn occurrence_from_row(row: &SqliteRow) -> Result<CronOccurrence> {
    Ok(CronOccurrence {
        id: row.try_get("id")?,
        job_id: row.try_get("job_id")?,
        scheduled_at: row.try_get("scheduled_at")?,
        state: OccurrenceState::parse(row.try_get("state")?)?,
        reason: row.try_get("reason")?,
        session_id: row.try_get("session_id")?,
        outcome: row.try_get("outcome")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
        attempt: row.try_get("attempt")?,
        manual: row.try_get::<String, _>("trigger")? == "manual",
        output: row.try_get("output")?,
        delivery: row.try_get("delivery")?,
    })
}

/// The checks the columns cannot make; the caller's input, so a clear error.
fn check(job: &NewCronJob) -> Result<()> {
    let bad = |m: &str| Err(StoreError::InvalidCronJob(m.to_owned()));
    match (job.kind, &job.script) {
        (CronJobKind::Script, None) => return bad("a script job needs a command"),
        (CronJobKind::Script, Some(s)) if s.trim().is_empty() => {
            return bad("a script job needs a command");
        }
        (CronJobKind::Agent, Some(_)) => return bad("only a script job has a command"),
        _ => {}
    }
    if job.kind == CronJobKind::Agent && job.prompt.trim().is_empty() {
        return bad("the prompt is empty");
    }
    if job.grace_ms < 0 {
        return bad("the grace window is negative");
    }
    if job.timeout_ms.is_some_and(|t| t <= 0) {
        return bad("the timeout must be positive");
    }
    if matches!(&job.target, CronTarget::Session(id) if id.is_empty() || id == NEW_SESSION) {
        return bad("the target session id is empty");
    }
    Ok(())
}

fn to_json<T: Serialize>(value: &T) -> String {
    #[expect(
        clippy::expect_used,
        reason = "strings, lists of strings and unit variants always serialize"
    )]
    serde_json::to_string(value).expect("serializable")
}

impl Store {
    /// Records a new job.
    pub async fn create_cron_job(&self, new: &NewCronJob) -> Result<CronJob> {
        check(new)?;
        let id = uuid::Uuid::now_v7().simple().to_string();
        let now = now_ms();
        let row = sqlx::query(concat!(
            "INSERT INTO cron_jobs (id, name, schedule, prompt, kind, script, target, toolsets, \
             timeout_ms, deliver_to, catch_up, grace_ms, overlap, retry_interrupted, enabled, \
             owner_key, created_by, created_by_session, created_at, updated_at, next_run_at, \
             retired_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, \
             CASE WHEN ? IS NULL THEN ? END) RETURNING ",
            job_cols!()
        ))
        .bind(&id)
        .bind(&new.name)
        .bind(&new.schedule)
        .bind(&new.prompt)
        .bind(new.kind.as_str())
        .bind(&new.script)
        .bind(new.target.to_stored())
        .bind(new.toolsets.as_ref().map(to_json))
        .bind(new.timeout_ms)
        .bind(to_json(&new.deliver_to))
        .bind(new.catch_up.as_str())
        .bind(new.grace_ms)
        .bind(new.overlap.as_str())
        .bind(new.retry_interrupted)
        .bind(new.enabled)
        .bind(&new.owner_key)
        .bind(new.created_by.as_str())
        .bind(&new.created_by_session)
        .bind(now)
        .bind(now)
        .bind(new.next_run_at)
        .bind(new.next_run_at)
        .bind(now)
        .fetch_one(&self.pool)
        .await?;
        job_from_row(&row)
    }

    pub async fn cron_job(&self, id: &str) -> Result<Option<CronJob>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            job_cols!(),
            " FROM cron_jobs WHERE id = ?"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// The jobs `owner_key` owns, oldest first; `None`: every job (an admin key, the CLI).
    pub async fn list_cron_jobs(&self, owner_key: Option<&str>) -> Result<Vec<CronJob>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            job_cols!(),
            " FROM cron_jobs WHERE ? IS NULL OR owner_key = ? ORDER BY created_at, id"
        ))
        .bind(owner_key)
        .bind(owner_key)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(job_from_row).collect()
    }

    /// Replaces a job's definition (schedule, prompt, policies, `enabled`, `next_run_at`);
    /// its id, owner, creator and history stay. `None`: no such job.
    pub async fn update_cron_job(&self, id: &str, new: &NewCronJob) -> Result<Option<CronJob>> {
        check(new)?;
        let now = now_ms();
        let row = sqlx::query(concat!(
            "UPDATE cron_jobs SET name = ?, schedule = ?, prompt = ?, kind = ?, script = ?, \
             target = ?, toolsets = ?, timeout_ms = ?, deliver_to = ?, catch_up = ?, \
             grace_ms = ?, overlap = ?, retry_interrupted = ?, enabled = ?, updated_at = ?, \
             next_run_at = ?, retired_at = CASE WHEN ? IS NULL THEN COALESCE(retired_at, ?) END \
             WHERE id = ? RETURNING ",
            job_cols!()
        ))
        .bind(&new.name)
        .bind(&new.schedule)
        .bind(&new.prompt)
        .bind(new.kind.as_str())
        .bind(&new.script)
        .bind(new.target.to_stored())
        .bind(new.toolsets.as_ref().map(to_json))
        .bind(new.timeout_ms)
        .bind(to_json(&new.deliver_to))
        .bind(new.catch_up.as_str())
        .bind(new.grace_ms)
        .bind(new.overlap.as_str())
        .bind(new.retry_interrupted)
        .bind(new.enabled)
        .bind(now)
        .bind(new.next_run_at)
        .bind(new.next_run_at)
        .bind(now)
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(job_from_row).transpose()
    }

    /// Pauses (`enabled = false`) or resumes a job. Resuming sets `next_run_at` (the caller
    /// computes the next occurrence from now, so the paused time is not caught up); pausing
    /// keeps it. `false`: no such job.
    pub async fn set_cron_enabled(
        &self,
        id: &str,
        enabled: bool,
        next_run_at: Option<i64>,
    ) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE cron_jobs SET enabled = ?, updated_at = ?, \
             next_run_at = CASE WHEN ? THEN ? ELSE next_run_at END WHERE id = ?",
        )
        .bind(enabled)
        .bind(now_ms())
        .bind(enabled)
        .bind(next_run_at)
        .bind(id)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    /// Removes a job; its occurrences stay as history. `false`: no such job.
    pub async fn delete_cron_job(&self, id: &str) -> Result<bool> {
        let n = sqlx::query("DELETE FROM cron_jobs WHERE id = ?")
            .bind(id)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n == 1)
    }

    /// The enabled jobs whose `next_run_at` is at or before `now`, earliest first, at most
    /// `limit`: the scheduler's one query, answered from the `cron_jobs_due` index.
    pub async fn cron_due(&self, now: i64, limit: i64) -> Result<Vec<CronJob>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            job_cols!(),
            " FROM cron_jobs WHERE enabled AND next_run_at IS NOT NULL AND next_run_at <= ? \
             ORDER BY next_run_at LIMIT ?"
        ))
        .bind(now)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(job_from_row).collect()
    }

    /// The earliest `next_run_at` of the enabled jobs: when the scheduler must look next.
    pub async fn cron_next_wake(&self) -> Result<Option<i64>> {
        Ok(sqlx::query_scalar(
            "SELECT MIN(next_run_at) FROM cron_jobs WHERE enabled AND next_run_at IS NOT NULL",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// Claims occurrence `scheduled_at` of `job_id` for a run, and moves the job's
    /// `next_run_at` to `next_run_at` (`None`: no occurrence left, the job is retired), in one
    /// transaction. [`Claim::Taken`] when the occurrence was claimed or skipped before; nothing
    /// is written then.
    pub async fn cron_claim(
        &self,
        job_id: &str,
        scheduled_at: i64,
        now: i64,
        next_run_at: Option<i64>,
    ) -> Result<Claim> {
        let mut tx = self.begin_write().await?;
        let row = sqlx::query(concat!(
            "INSERT INTO cron_occurrences (job_id, scheduled_at, state, started_at, attempt) \
             VALUES (?, ?, 'running', ?, 1) ON CONFLICT (job_id, scheduled_at) DO NOTHING \
             RETURNING ",
            occurrence_cols!()
        ))
        .bind(job_id)
        .bind(scheduled_at)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            // Accounted for already (a run by hand at the same millisecond, a second
            // scheduler): still move a job left due at it, or it would stay due forever.
            advance(&mut tx, job_id, scheduled_at, now, next_run_at).await?;
            tx.commit().await?;
            return Ok(Claim::Taken);
        };
        if !advance(&mut tx, job_id, scheduled_at, now, next_run_at).await? {
            return Ok(Claim::NotDue);
        }
        let occurrence = occurrence_from_row(&row)?;
        tx.commit().await?;
        Ok(Claim::Claimed(Box::new(occurrence)))
    }

    /// Records occurrence `scheduled_at` of `job_id` as skipped with `reason`, and moves the
    /// job's `next_run_at` like [`Store::cron_claim`], in one transaction. `false`: the
    /// occurrence was claimed or skipped before, or the job is not due at it; nothing was
    /// written.
    pub async fn cron_skip(
        &self,
        job_id: &str,
        scheduled_at: i64,
        reason: &str,
        now: i64,
        next_run_at: Option<i64>,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        let inserted = sqlx::query(
            "INSERT INTO cron_occurrences (job_id, scheduled_at, state, reason, finished_at) \
             VALUES (?, ?, 'skipped', ?, ?) ON CONFLICT (job_id, scheduled_at) DO NOTHING",
        )
        .bind(job_id)
        .bind(scheduled_at)
        .bind(reason)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !inserted {
            advance(&mut tx, job_id, scheduled_at, now, next_run_at).await?;
            tx.commit().await?;
            return Ok(false);
        }
        if !advance(&mut tx, job_id, scheduled_at, now, next_run_at).await? {
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Records the session a claimed run went to.
    pub async fn cron_set_session(&self, occurrence_id: i64, session_id: &str) -> Result<()> {
        sqlx::query("UPDATE cron_occurrences SET session_id = ? WHERE id = ?")
            .bind(session_id)
            .bind(occurrence_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Records how a run ended: `running` → `ran`, with what it produced (cut to
    /// [`MAX_OUTPUT`] bytes). `false`: it was not running (marked interrupted by a restart
    /// meanwhile).
    pub async fn cron_finish(
        &self,
        occurrence_id: i64,
        outcome: &str,
        output: Option<&str>,
    ) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE cron_occurrences SET state = 'ran', outcome = ?, output = ?, finished_at = ? \
             WHERE id = ? AND state = 'running'",
        )
        .bind(outcome)
        .bind(output.map(cut_output))
        .bind(now_ms())
        .bind(occurrence_id)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    /// Claims a run of the job now, by hand (`tern cron run`): an occurrence at `now` (a
    /// later millisecond if one is recorded there), `manual`, that does not move the
    /// schedule; a paused job runs too. `None`: no such job.
    pub async fn cron_claim_manual(
        &self,
        job_id: &str,
        now: i64,
    ) -> Result<Option<CronOccurrence>> {
        let mut tx = self.begin_write().await?;
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM cron_jobs WHERE id = ?)")
                .bind(job_id)
                .fetch_one(&mut *tx)
                .await?;
        if !exists {
            return Ok(None);
        }
        let at: i64 = sqlx::query_scalar(
            "SELECT MAX(?, COALESCE(MAX(scheduled_at) + 1, ?)) FROM cron_occurrences \
             WHERE job_id = ? AND scheduled_at >= ?",
        )
        .bind(now)
        .bind(now)
        .bind(job_id)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        let row = sqlx::query(concat!(
            "INSERT INTO cron_occurrences (job_id, scheduled_at, state, started_at, attempt, \
             trigger) VALUES (?, ?, 'running', ?, 1, 'manual') RETURNING ",
            occurrence_cols!()
        ))
        .bind(job_id)
        .bind(at)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        let occurrence = occurrence_from_row(&row)?;
        tx.commit().await?;
        Ok(Some(occurrence))
    }

    /// Records how the webhook delivery of a run went (`delivered`, `failed: …`).
    pub async fn cron_set_delivery(&self, occurrence_id: i64, delivery: &str) -> Result<()> {
        sqlx::query("UPDATE cron_occurrences SET delivery = ? WHERE id = ?")
            .bind(delivery)
            .bind(occurrence_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Runs that ended but whose webhook delivery was never tried (the gateway stopped
    /// between the two), with their jobs, oldest first.
    pub async fn cron_undelivered(&self) -> Result<Vec<(CronJob, CronOccurrence)>> {
        let rows = sqlx::query(
            "SELECT o.id FROM cron_occurrences o JOIN cron_jobs j ON j.id = o.job_id \
             WHERE o.state IN ('ran', 'interrupted') AND o.delivery IS NULL \
               AND j.deliver_to LIKE '{\"webhook\"%' ORDER BY o.id",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let id: i64 = row.try_get("id")?;
            if let Some(o) = self.cron_occurrence(id).await?
                && let Some(j) = self.cron_job(&o.job_id).await?
            {
                out.push((j, o));
            }
        }
        Ok(out)
    }

    /// One occurrence.
    pub async fn cron_occurrence(&self, id: i64) -> Result<Option<CronOccurrence>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            occurrence_cols!(),
            " FROM cron_occurrences WHERE id = ?"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(occurrence_from_row).transpose()
    }

    /// The job's runs going now.
    pub async fn cron_running(&self, job_id: &str) -> Result<Vec<CronOccurrence>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            occurrence_cols!(),
            " FROM cron_occurrences WHERE state = 'running' AND job_id = ? ORDER BY id"
        ))
        .bind(job_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(occurrence_from_row).collect()
    }

    /// At the gateway's start, before the scheduler runs: every occurrence still `running`
    /// was cut short by the previous process's end, and becomes `interrupted`. Returns them,
    /// for the retry-once policy ([`Store::cron_retry`]).
    pub async fn cron_interrupted_on_start(&self) -> Result<Vec<CronOccurrence>> {
        let rows = sqlx::query(concat!(
            "UPDATE cron_occurrences SET state = 'interrupted', finished_at = ? \
             WHERE state = 'running' RETURNING ",
            occurrence_cols!()
        ))
        .bind(now_ms())
        .fetch_all(&self.pool)
        .await?;
        let mut out = rows
            .iter()
            .map(occurrence_from_row)
            .collect::<Result<Vec<_>>>()?;
        out.sort_by_key(|o| (o.scheduled_at, o.id));
        Ok(out)
    }

    /// Claims an interrupted occurrence again for its one retry: `interrupted` → `running`,
    /// attempt 2. `None` when it is not an interrupted first attempt (already retried, or a
    /// retry that was itself interrupted): a run is retried at most once.
    pub async fn cron_retry(&self, occurrence_id: i64, now: i64) -> Result<Option<CronOccurrence>> {
        let row = sqlx::query(concat!(
            "UPDATE cron_occurrences SET state = 'running', attempt = attempt + 1, \
             started_at = ?, finished_at = NULL, outcome = NULL \
             WHERE id = ? AND state = 'interrupted' AND attempt = 1 RETURNING ",
            occurrence_cols!()
        ))
        .bind(now)
        .bind(occurrence_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(occurrence_from_row).transpose()
    }

    /// Whether a run of the job is going (for the overlap policy).
    pub async fn cron_in_flight(&self, job_id: &str) -> Result<bool> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM cron_occurrences WHERE job_id = ? AND state = 'running')",
        )
        .bind(job_id)
        .fetch_one(&self.pool)
        .await?)
    }

    /// The job's occurrences, newest first, at most `limit`: ran (session, outcome), skipped
    /// (why), interrupted, running.
    pub async fn cron_history(&self, job_id: &str, limit: i64) -> Result<Vec<CronOccurrence>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            occurrence_cols!(),
            " FROM cron_occurrences WHERE job_id = ? ORDER BY scheduled_at DESC LIMIT ?"
        ))
        .bind(job_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(occurrence_from_row).collect()
    }
}

/// Moves a job's `next_run_at` inside the claim's or skip's transaction; `None` retires it.
/// `false` unless the job is enabled and due at `scheduled_at` (its `next_run_at` not past
/// it): a plan made before a pause, a resume or an edit does not move `next_run_at` back.
async fn advance(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
    job_id: &str,
    scheduled_at: i64,
    now: i64,
    next_run_at: Option<i64>,
) -> Result<bool> {
    let n = sqlx::query(
        "UPDATE cron_jobs SET next_run_at = ?, updated_at = ?, \
         retired_at = CASE WHEN ? IS NULL THEN ? END \
         WHERE id = ? AND enabled AND next_run_at IS NOT NULL AND next_run_at <= ?",
    )
    .bind(next_run_at)
    .bind(now)
    .bind(next_run_at)
    .bind(now)
    .bind(job_id)
    .bind(scheduled_at)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(n == 1)
}

#[cfg(test)]
mod tests;
