//! Jobs as their users see them: what `tern cron add`, `POST /api/cron/jobs` and the `cronjob`
//! tool give ([`JobFields`]), checked and turned into a stored job ([`create`], [`update`]),
//! paused and resumed, and shown the same way everywhere ([`job_view`], [`occurrence_view`]).
//!
//! # At a glance
//!
//! - [`create`]: the schedule is parsed (a clear error says what is wrong), every field is
//!   checked, the first occurrence is computed, and the job is stored.
//! - [`update`]: the given fields replace the job's; a new schedule starts from now; the
//!   history stays.
//! - [`pause`] keeps the job and its next occurrence; [`resume`] starts from the next
//!   occurrence after now (the paused time is not caught up), and a one-shot whose time passed
//!   while it was paused runs at once.
//! - Every caller wakes the scheduler afterwards ([`crate::Scheduler::wake`]), so a job due
//!   sooner than the scheduler's sleep is not late.

use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tern_store::cron::{
    CronCatchUp, CronCreator, CronJob, CronJobKind, CronOccurrence, CronOverlap, CronTarget,
    DeliverTo, NewCronJob, OccurrenceState,
};
use tern_store::{Store, StoreError};

use crate::{Schedule, ScheduleError};

/// The grace window when none is given: a job missed by up to this much while the gateway
/// was down still gets its catch-up run (a 9:00 job runs at 11:00 after a two-hour outage).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(6 * 3600);

/// The per-run timeout of an agent job when none is given.
pub const DEFAULT_AGENT_TIMEOUT: Duration = Duration::from_secs(3600);

/// The per-run timeout of a script job when none is given.
pub const DEFAULT_SCRIPT_TIMEOUT: Duration = Duration::from_secs(600);

/// The shortest interval of a job made by an agent key or the `cronjob` tool: an agent that
/// can schedule should not be able to keep the gateway busy every second.
pub const LIMITED_MIN_INTERVAL: Duration = Duration::from_secs(60);

/// The most jobs one agent API key may own.
pub const LIMITED_MAX_JOBS: usize = 100;

/// Refuses a repeating schedule in `fields` shorter than [`LIMITED_MIN_INTERVAL`] (for agent
/// keys and the agent's tool; a 5-field cron expression is at least a minute apart anyway).
pub fn check_limited_schedule(
    fields: &JobFields,
    now: Timestamp,
    tz: &TimeZone,
) -> Result<(), JobError> {
    let Some(spec) = &fields.schedule else {
        return Ok(());
    };
    let schedule = Schedule::parse(spec, now, tz)?;
    if let crate::ScheduleKind::Every { interval, .. } = schedule.kind()
        && interval.as_secs() < LIMITED_MIN_INTERVAL.as_secs() as i64
    {
        return invalid(format!(
            "{spec:?}: a job made by an agent repeats at most once a minute"
        ));
    }
    Ok(())
}

/// The longest name, prompt and script accepted.
const MAX_NAME: usize = 200;
const MAX_PROMPT: usize = 64 * 1024;
const MAX_SCRIPT: usize = 16 * 1024;

/// A job's fields as a user gives them: all optional, so the same type serves a creation
/// (where `schedule` and a `prompt` or `script` are required) and an update (where what is
/// given replaces the job's). The API's JSON body and the CLI's flags both become this.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct JobFields {
    /// When it runs: `30m`, `every 2h`, `0 9 * * 1-5`, `TZ=Europe/Paris 0 9 * * *`,
    /// `2026-12-01T09:00:00+01:00`.
    pub schedule: Option<String>,
    /// What the agent is asked each run; for a script job, an optional description.
    pub prompt: Option<String>,
    pub name: Option<String>,
    /// A command run with `bash -c` and no model (a script job); its output is delivered.
    pub script: Option<String>,
    /// Run in this session, whose history accumulates; `null` or absent: a new session per
    /// run. In an update, `""` goes back to a new session per run.
    pub session: Option<String>,
    /// The toolsets of its turns; absent: the gateway's.
    pub toolsets: Option<Vec<String>>,
    /// The longest a run may take (`10m`); absent: 1 h for an agent job, 10 min for a script.
    pub timeout: Option<String>,
    /// Where the result goes: `none` (it stays in the session), `chat` (the chat of the job's
    /// session, or of the session that created the job), `CHANNEL:CHAT_ID[:THREAD_ID]`, or an
    /// `http(s)://` URL (a webhook).
    pub deliver: Option<String>,
    pub catch_up: Option<CronCatchUp>,
    /// How late a missed occurrence may still be caught up (`6h`, the default).
    pub grace: Option<String>,
    pub overlap: Option<CronOverlap>,
    /// Run an occurrence cut short by a crash once more at the next start.
    pub retry_interrupted: Option<bool>,
    /// Create the job paused.
    pub paused: Option<bool>,
}

/// Who is creating a job, and what they may do.
#[derive(Debug, Clone)]
pub struct Creator {
    pub created_by: CronCreator,
    /// The API key that will own the job (`None`: the CLI's, seen by admin keys only).
    pub owner_key: Option<String>,
    /// The session of an agent creating it (the `cronjob` tool).
    pub session: Option<String>,
}

/// Why a job could not be made, changed or found.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The caller's input: a 400 with this message.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error("no scheduled job {0}")]
    NotFound(String),
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for JobError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::InvalidCronJob(m) => JobError::Invalid(m),
            e => JobError::Store(e),
        }
    }
}

impl JobError {
    /// Whether the caller's input is at fault (400), rather than the store (500).
    pub fn is_invalid(&self) -> bool {
        matches!(self, JobError::Invalid(_) | JobError::Schedule(_))
    }
}

fn invalid<T>(m: impl Into<String>) -> Result<T, JobError> {
    Err(JobError::Invalid(m.into()))
}

fn ms(t: Timestamp) -> i64 {
    t.as_millisecond()
}

/// A duration as `humantime` reads it (`90s`, `10m`, `1h30m`), named in the error.
fn duration(field: &str, text: &str) -> Result<Duration, JobError> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| {
        JobError::Invalid(format!(
            "{field} {text:?} is not a duration ({e}); write e.g. \"90s\", \"10m\", \"2h\""
        ))
    })?;
    if d.is_zero() {
        return invalid(format!("{field} must be longer than zero"));
    }
    Ok(d)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Where a result goes, from its text. `chat` resolves to the chat of `session` (the job's
/// own session, else the one creating it).
async fn deliver_to(
    store: &Store,
    text: &str,
    sessions: &[Option<&str>],
) -> Result<DeliverTo, JobError> {
    let t = text.trim();
    if t.is_empty() || t == "none" {
        return Ok(DeliverTo::None);
    }
    if t.starts_with("http://") || t.starts_with("https://") {
        let url = reqwest::Url::parse(t)
            .map_err(|e| JobError::Invalid(format!("deliver: {t:?} is not a URL ({e})")))?;
        if url.host_str().is_none() {
            return invalid(format!("deliver: {t:?} has no host"));
        }
        return Ok(DeliverTo::Webhook(t.to_owned()));
    }
    if t == "chat" {
        for s in sessions.iter().flatten() {
            if let Some(route) = store.channel_route(s).await? {
                return Ok(DeliverTo::Chat {
                    channel: route.channel,
                    chat_id: route.chat_id,
                    thread_id: route.thread_id,
                });
            }
        }
        return invalid(
            "deliver \"chat\": neither the job's session nor the session creating it talks to a \
             chat; name the chat as CHANNEL:CHAT_ID (see `tern channels status`)",
        );
    }
    let mut parts = t.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(channel), Some(chat), thread) if !channel.is_empty() && !chat.is_empty() => {
            Ok(DeliverTo::Chat {
                channel: channel.to_owned(),
                chat_id: chat.to_owned(),
                thread_id: thread.unwrap_or_default().to_owned(),
            })
        }
        _ => invalid(format!(
            "deliver {t:?}: write \"none\", \"chat\", CHANNEL:CHAT_ID[:THREAD_ID], or an \
             http(s):// webhook URL"
        )),
    }
}

/// Checks the fields every job must satisfy, whoever makes it.
fn check_text(fields: &JobFields) -> Result<(), JobError> {
    if let Some(n) = &fields.name
        && (n.chars().count() > MAX_NAME || n.chars().any(char::is_control))
    {
        return invalid(format!(
            "the name is at most {MAX_NAME} characters, without control characters"
        ));
    }
    if fields.prompt.as_ref().is_some_and(|p| p.len() > MAX_PROMPT) {
        return invalid(format!("the prompt is longer than {MAX_PROMPT} bytes"));
    }
    if fields.script.as_ref().is_some_and(|s| s.len() > MAX_SCRIPT) {
        return invalid(format!("the script is longer than {MAX_SCRIPT} bytes"));
    }
    if let Some(t) = &fields.toolsets
        && t.iter().any(|s| s.trim().is_empty())
    {
        return invalid("a toolset name is empty");
    }
    Ok(())
}

/// Makes a new job from `fields`, as `creator`, at `now`; zone-less schedules are in `tz`.
pub async fn create(
    store: &Store,
    fields: &JobFields,
    creator: &Creator,
    now: Timestamp,
    tz: &TimeZone,
) -> Result<CronJob, JobError> {
    check_text(fields)?;
    let Some(spec) = fields.schedule.as_deref() else {
        return invalid("a job needs a schedule (e.g. \"every 2h\", \"0 9 * * *\", \"30m\")");
    };
    let schedule = Schedule::parse(spec, now, tz)?;
    let kind = if fields.script.is_some() {
        CronJobKind::Script
    } else {
        CronJobKind::Agent
    };
    let prompt = fields.prompt.clone().unwrap_or_default();
    if kind == CronJobKind::Agent && prompt.trim().is_empty() {
        return invalid("a job needs a prompt (or a script)");
    }
    let target = match fields.session.as_deref().map(str::trim) {
        None | Some("") => CronTarget::NewSession,
        Some(id) => {
            if store.get_session(id).await?.is_none() {
                return invalid(format!("no session {id}"));
            }
            CronTarget::Session(id.to_owned())
        }
    };
    let target_session = match &target {
        CronTarget::Session(id) => Some(id.as_str()),
        CronTarget::NewSession => None,
    };
    let deliver = deliver_to(
        store,
        fields.deliver.as_deref().unwrap_or("none"),
        &[target_session, creator.session.as_deref()],
    )
    .await?;
    let timeout = match &fields.timeout {
        Some(t) => duration("timeout", t)?,
        None if kind == CronJobKind::Script => DEFAULT_SCRIPT_TIMEOUT,
        None => DEFAULT_AGENT_TIMEOUT,
    };
    let grace = match &fields.grace {
        Some(g) => humantime::parse_duration(g.trim())
            .map_err(|e| JobError::Invalid(format!("grace {g:?} is not a duration ({e})")))?,
        None => DEFAULT_GRACE,
    };
    let paused = fields.paused.unwrap_or(false);
    let new = NewCronJob {
        name: fields.name.clone().filter(|n| !n.trim().is_empty()),
        schedule: schedule.to_stored(),
        prompt,
        kind,
        script: fields.script.clone(),
        target,
        toolsets: fields.toolsets.clone(),
        timeout_ms: Some(millis(timeout)),
        deliver_to: deliver,
        catch_up: fields.catch_up.unwrap_or_default(),
        grace_ms: millis(grace),
        overlap: fields.overlap.unwrap_or_default(),
        retry_interrupted: fields.retry_interrupted.unwrap_or(false),
        enabled: !paused,
        next_run_at: schedule.next_after(now).map(ms),
        owner_key: creator.owner_key.clone(),
        created_by: creator.created_by,
        created_by_session: creator.session.clone(),
    };
    Ok(store.create_cron_job(&new).await?)
}

/// The job's definition as a [`NewCronJob`], to change and store again.
fn definition(job: &CronJob) -> NewCronJob {
    NewCronJob {
        name: job.name.clone(),
        schedule: job.schedule.clone(),
        prompt: job.prompt.clone(),
        kind: job.kind,
        script: job.script.clone(),
        target: job.target.clone(),
        toolsets: job.toolsets.clone(),
        timeout_ms: job.timeout_ms,
        deliver_to: job.deliver_to.clone(),
        catch_up: job.catch_up,
        grace_ms: job.grace_ms,
        overlap: job.overlap,
        retry_interrupted: job.retry_interrupted,
        enabled: job.enabled,
        next_run_at: job.next_run_at,
        owner_key: job.owner_key.clone(),
        created_by: job.created_by,
        created_by_session: job.created_by_session.clone(),
    }
}

/// Changes the given fields of job `id`. A new schedule starts from `now` (a retired
/// one-shot given a new schedule is scheduled again); `paused` pauses or resumes.
pub async fn update(
    store: &Store,
    id: &str,
    fields: &JobFields,
    now: Timestamp,
    tz: &TimeZone,
) -> Result<CronJob, JobError> {
    check_text(fields)?;
    let job = store
        .cron_job(id)
        .await?
        .ok_or_else(|| JobError::NotFound(id.to_owned()))?;
    let mut new = definition(&job);
    if let Some(spec) = &fields.schedule {
        let schedule = Schedule::parse(spec, now, tz)?;
        new.schedule = schedule.to_stored();
        new.next_run_at = schedule.next_after(now).map(ms);
    }
    if let Some(p) = &fields.prompt {
        new.prompt = p.clone();
    }
    if let Some(n) = &fields.name {
        new.name = Some(n.clone()).filter(|n| !n.trim().is_empty());
    }
    if let Some(s) = &fields.script {
        if job.kind != CronJobKind::Script {
            return invalid("an agent job cannot become a script job; create a new job");
        }
        new.script = Some(s.clone());
    }
    if let Some(s) = &fields.session {
        new.target = match s.trim() {
            "" => CronTarget::NewSession,
            id => {
                if store.get_session(id).await?.is_none() {
                    return invalid(format!("no session {id}"));
                }
                CronTarget::Session(id.to_owned())
            }
        };
    }
    if let Some(t) = &fields.toolsets {
        new.toolsets = Some(t.clone());
    }
    if let Some(t) = &fields.timeout {
        new.timeout_ms = Some(millis(duration("timeout", t)?));
    }
    if let Some(d) = &fields.deliver {
        let target = match &new.target {
            CronTarget::Session(id) => Some(id.as_str()),
            CronTarget::NewSession => None,
        };
        new.deliver_to = deliver_to(store, d, &[target, job.created_by_session.as_deref()]).await?;
    }
    if let Some(c) = fields.catch_up {
        new.catch_up = c;
    }
    if let Some(g) = &fields.grace {
        new.grace_ms = millis(
            humantime::parse_duration(g.trim())
                .map_err(|e| JobError::Invalid(format!("grace {g:?} is not a duration ({e})")))?,
        );
    }
    if let Some(o) = fields.overlap {
        new.overlap = o;
    }
    if let Some(r) = fields.retry_interrupted {
        new.retry_interrupted = r;
    }
    if let Some(p) = fields.paused {
        if !p && !job.enabled && fields.schedule.is_none() {
            new.next_run_at = resume_at(&job, now)?;
        }
        new.enabled = !p;
    }
    store
        .update_cron_job(id, &new)
        .await?
        .ok_or_else(|| JobError::NotFound(id.to_owned()))
}

/// When a resumed job runs next: the next occurrence after `now` (the paused time is not
/// caught up); a one-shot whose time passed while it was paused, at once.
fn resume_at(job: &CronJob, now: Timestamp) -> Result<Option<i64>, JobError> {
    let schedule = Schedule::from_stored(&job.schedule)?;
    if job.retired_at.is_some() {
        return Ok(None);
    }
    Ok(match schedule.next_after(now) {
        Some(t) => Some(ms(t)),
        None if schedule.is_one_shot() => Some(ms(now)),
        None => None,
    })
}

/// Pauses job `id`: no occurrence comes due until it is resumed.
pub async fn pause(store: &Store, id: &str) -> Result<CronJob, JobError> {
    if !store.set_cron_enabled(id, false, None).await? {
        return Err(JobError::NotFound(id.to_owned()));
    }
    store
        .cron_job(id)
        .await?
        .ok_or_else(|| JobError::NotFound(id.to_owned()))
}

/// Resumes job `id` from the next occurrence after `now` (see [`resume_at`]).
pub async fn resume(store: &Store, id: &str, now: Timestamp) -> Result<CronJob, JobError> {
    let job = store
        .cron_job(id)
        .await?
        .ok_or_else(|| JobError::NotFound(id.to_owned()))?;
    if !job.enabled {
        let next = resume_at(&job, now)?;
        store.set_cron_enabled(id, true, next).await?;
    }
    store
        .cron_job(id)
        .await?
        .ok_or_else(|| JobError::NotFound(id.to_owned()))
}

/// A time in the store's milliseconds as RFC 3339 (UTC).
pub fn rfc3339(ms: i64) -> Value {
    Timestamp::from_millisecond(ms)
        .map(|t| Value::String(t.to_string()))
        .unwrap_or(Value::Null)
}

fn opt_time(ms: Option<i64>) -> Value {
    ms.map(rfc3339).unwrap_or(Value::Null)
}

/// Where a job's results go, as shown: `none`, `webhook:URL`, `CHANNEL:CHAT_ID[:THREAD]`.
pub fn deliver_text(d: &DeliverTo) -> String {
    match d {
        DeliverTo::None => "none".into(),
        DeliverTo::Webhook(url) => url.clone(),
        DeliverTo::Chat {
            channel,
            chat_id,
            thread_id,
        } if thread_id.is_empty() => format!("{channel}:{chat_id}"),
        DeliverTo::Chat {
            channel,
            chat_id,
            thread_id,
        } => format!("{channel}:{chat_id}:{thread_id}"),
    }
}

/// A job's state in one word: `scheduled`, `paused` or `retired` (a one-shot that ran).
pub fn job_state(job: &CronJob) -> &'static str {
    if job.retired_at.is_some() || (job.enabled && job.next_run_at.is_none()) {
        "retired"
    } else if job.enabled {
        "scheduled"
    } else {
        "paused"
    }
}

/// A job as the API, `tern cron … --json` and the `cronjob` tool show it.
pub fn job_view(job: &CronJob) -> Value {
    let spec = Schedule::from_stored(&job.schedule)
        .map(|s| s.spec().to_owned())
        .unwrap_or_else(|_| job.schedule.clone());
    json!({
        "id": job.id,
        "name": job.name,
        "schedule": spec,
        "kind": job.kind,
        "prompt": job.prompt,
        "script": job.script,
        "session": match &job.target {
            CronTarget::Session(id) => Value::String(id.clone()),
            CronTarget::NewSession => Value::Null,
        },
        "toolsets": job.toolsets,
        "timeout_secs": job.timeout_ms.map(|t| t / 1000),
        "deliver": deliver_text(&job.deliver_to),
        "catch_up": job.catch_up,
        "grace_secs": job.grace_ms / 1000,
        "overlap": job.overlap,
        "retry_interrupted": job.retry_interrupted,
        "state": job_state(job),
        "enabled": job.enabled,
        "next_run_at": opt_time(job.next_run_at.filter(|_| job.enabled)),
        "created_by": job.created_by,
        "created_by_session": job.created_by_session,
        "created_at": rfc3339(job.created_at),
        "updated_at": rfc3339(job.updated_at),
    })
}

/// An occurrence as `tern cron history` and the API show it.
pub fn occurrence_view(o: &CronOccurrence) -> Value {
    json!({
        "id": o.id,
        "job_id": o.job_id,
        "scheduled_at": rfc3339(o.scheduled_at),
        "state": o.state,
        "reason": o.reason,
        "session_id": o.session_id,
        "outcome": o.outcome,
        "trigger": if o.manual { "manual" } else { "schedule" },
        "attempt": o.attempt,
        "started_at": opt_time(o.started_at),
        "finished_at": opt_time(o.finished_at),
        "delivery": o.delivery,
        "output": o.output,
    })
}

/// Whether the occurrence's run is going.
pub fn is_running(o: &CronOccurrence) -> bool {
    o.state == OccurrenceState::Running
}
