//! `cronjob`: the agent creates, lists, changes, pauses, resumes, runs and removes its own
//! scheduled jobs, within the limits the module docs of [`super`] list.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tern_store::Session;
use tern_store::cron::{CronCatchUp, CronCreator, CronJob, CronOverlap};
use tern_tools::{Tool, ToolContext, ToolError, ToolResult};

use super::{CronTools, RUN_SOURCE, TOOLSET};
use crate::jobs::{self, Creator, JobError, JobFields};

/// The `cronjob` tool.
pub struct Cronjob(pub Arc<CronTools>);

/// What `cronjob` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Create,
    List,
    Update,
    Pause,
    Resume,
    Run,
    Remove,
}

impl Action {
    fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::List => "list",
            Action::Update => "update",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Run => "run",
            Action::Remove => "remove",
        }
    }
}

/// Where a run's result goes (the field's doc says what each means: variants' docs would
/// make the schema a `oneOf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Deliver {
    None,
    Chat,
}

/// Missed occurrences (the gateway was down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    One,
    All,
    None,
}

/// An occurrence that comes while the previous run still goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    Skip,
    Queue,
}

/// The arguments of `cronjob`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CronjobArgs {
    pub action: Action,
    /// The job's id (from `create` or `list`): for update, pause, resume, run and remove.
    #[serde(default)]
    #[schemars(length(min = 1, max = 100))]
    pub job_id: Option<String>,
    /// When it runs: a delay (`30m`, once), an interval (`every 2h`), a 5-field cron
    /// expression (`0 9 * * 1-5`, optionally `TZ=Europe/Paris 0 9 * * *`), or a time
    /// (`2026-12-01T09:00:00+01:00`, once). Required for create.
    #[serde(default)]
    #[schemars(length(min = 1, max = 200))]
    pub schedule: Option<String>,
    /// What you will be asked at each run, self-contained (the run may not see this
    /// conversation). Required for create.
    #[serde(default)]
    #[schemars(length(min = 1, max = 65536))]
    pub prompt: Option<String>,
    /// A short name to recognise the job by.
    #[serde(default)]
    #[schemars(length(max = 200))]
    pub name: Option<String>,
    /// `this`: each run continues this session, whose history accumulates; `new` (or left
    /// out at create): a new session per run.
    #[serde(default)]
    pub session: Option<String>,
    /// The toolsets of its runs, among those you have now; left out at create: the ones you
    /// have now.
    #[serde(default)]
    pub toolsets: Option<Vec<String>>,
    /// The longest a run may take (`10m`, `2h`; default 1h).
    #[serde(default)]
    #[schemars(length(min = 1, max = 50))]
    pub timeout: Option<String>,
    /// Where a run's result goes: `none` (default; it stays in the run's session) or `chat`
    /// (the chat this session talks to).
    #[serde(default)]
    pub deliver: Option<Deliver>,
    /// Occurrences missed while the gateway was down: `one` (default: one catch-up run),
    /// `all`, or `none`.
    #[serde(default)]
    pub catch_up: Option<CatchUp>,
    /// An occurrence due while the previous run still goes: `skip` (default) or `queue`.
    #[serde(default)]
    pub overlap: Option<Overlap>,
}

impl CronjobArgs {
    /// The job fields given, by name (for the actions that take none).
    fn given_fields(&self) -> Vec<&'static str> {
        [
            ("schedule", self.schedule.is_some()),
            ("prompt", self.prompt.is_some()),
            ("name", self.name.is_some()),
            ("session", self.session.is_some()),
            ("toolsets", self.toolsets.is_some()),
            ("timeout", self.timeout.is_some()),
            ("deliver", self.deliver.is_some()),
            ("catch_up", self.catch_up.is_some()),
            ("overlap", self.overlap.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
    }
}

fn err(m: impl Into<String>) -> ToolError {
    ToolError::new(m)
}

/// A [`JobError`] as the model reads it: a bad schedule or field in its own words.
fn job_err(e: JobError) -> ToolError {
    match e {
        JobError::Store(e) => err(format!("the job store failed: {e}")),
        e => err(e.to_string()),
    }
}

fn not_found(id: &str) -> ToolError {
    err(format!(
        "no scheduled job {id} of yours (see action `list` for your jobs' ids)"
    ))
}

impl Tool for Cronjob {
    const NAME: &'static str = "cronjob";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = "Schedule work for yourself: a job runs its prompt as a \
        new turn at the times its schedule says, unattended. Actions: `create` (schedule and \
        prompt required; answers the job with its id and next_run_at), `list` (your jobs), \
        `update` (the fields given replace the job's), `pause`, `resume`, `run` (once now), \
        `remove`. A job runs in a new session per run unless `session` is `this`; its result \
        stays there unless `deliver` is `chat`.";
    type Args = CronjobArgs;

    async fn run(&self, a: CronjobArgs, ctx: ToolContext) -> ToolResult {
        let t = &self.0;
        let action = a.action;
        let session = t
            .store
            .get_session(&ctx.session_id)
            .await
            .map_err(|e| err(format!("cannot read this session: {e}")))?
            .ok_or_else(|| err("this session is not stored; it cannot schedule jobs"))?;
        if session.source == RUN_SOURCE && !t.allow_runs_to_schedule {
            return Err(err(
                "a scheduled job's run may not create or manage scheduled jobs \
                 ([cron] allow_runs_to_schedule is off)",
            ));
        }
        match action {
            Action::Create => {
                if a.job_id.is_some() {
                    return Err(err("create makes a new job: leave out `job_id`"));
                }
                create(t, &a, &ctx, &session).await
            }
            Action::List => {
                no_fields(action, &a)?;
                let jobs = owned_jobs(t, &session).await?;
                Ok(Value::Array(jobs.iter().map(jobs::job_view).collect()))
            }
            Action::Update => {
                let job = owned_job(t, &a, &session).await?;
                let fields = fields(t, &a, &ctx, &session).await?;
                jobs::check_limited_schedule(&fields, t.scheduler.now(), &t.tz).map_err(job_err)?;
                let job = jobs::update(&t.store, &job.id, &fields, t.scheduler.now(), &t.tz)
                    .await
                    .map_err(job_err)?;
                tracing::info!(job = %job.id, session = %ctx.session_id, "an agent changed a scheduled job");
                t.scheduler.wake();
                Ok(jobs::job_view(&job))
            }
            Action::Pause => {
                no_fields(action, &a)?;
                let job = owned_job(t, &a, &session).await?;
                let job = jobs::pause(&t.store, &job.id).await.map_err(job_err)?;
                t.scheduler.wake();
                Ok(jobs::job_view(&job))
            }
            Action::Resume => {
                no_fields(action, &a)?;
                let job = owned_job(t, &a, &session).await?;
                let job = jobs::resume(&t.store, &job.id, t.scheduler.now())
                    .await
                    .map_err(job_err)?;
                t.scheduler.wake();
                Ok(jobs::job_view(&job))
            }
            Action::Run => {
                no_fields(action, &a)?;
                let job = owned_job(t, &a, &session).await?;
                let occurrence = t.scheduler.run_now(&job.id).await.map_err(job_err)?;
                Ok(json!({
                    "job": jobs::job_view(&job),
                    "occurrence": jobs::occurrence_view(&occurrence),
                }))
            }
            Action::Remove => {
                no_fields(action, &a)?;
                let job = owned_job(t, &a, &session).await?;
                let deleted = t
                    .store
                    .delete_cron_job(&job.id)
                    .await
                    .map_err(|e| err(format!("the job store failed: {e}")))?;
                if !deleted {
                    return Err(not_found(&job.id));
                }
                tracing::info!(job = %job.id, session = %ctx.session_id, "an agent removed a scheduled job");
                t.scheduler.wake();
                Ok(json!({"id": job.id, "deleted": true}))
            }
        }
    }
}

/// Refuses job fields on an action that takes only `job_id` (the model meant something else).
fn no_fields(action: Action, a: &CronjobArgs) -> Result<(), ToolError> {
    let given = a.given_fields();
    if given.is_empty() {
        return Ok(());
    }
    Err(err(format!(
        "{} takes no {}; to change a job use action `update`",
        action.as_str(),
        given.join(", ")
    )))
}

/// The jobs this session may see: made by agents of its owner.
async fn owned_jobs(t: &CronTools, session: &Session) -> Result<Vec<CronJob>, ToolError> {
    let jobs = t
        .store
        .list_cron_jobs(session.owner.as_deref())
        .await
        .map_err(|e| err(format!("the job store failed: {e}")))?;
    Ok(jobs.into_iter().filter(|j| owns(session, j)).collect())
}

fn owns(session: &Session, job: &CronJob) -> bool {
    job.created_by == CronCreator::Agent && job.owner_key == session.owner
}

/// The job `job_id` names, if this session may touch it; another's is "not found", so an
/// agent learns nothing of jobs that are not its owner's.
async fn owned_job(
    t: &CronTools,
    a: &CronjobArgs,
    session: &Session,
) -> Result<CronJob, ToolError> {
    let Some(id) = a.job_id.as_deref().map(str::trim) else {
        return Err(err("`job_id` is required (see action `list` for the ids)"));
    };
    let job = t
        .store
        .cron_job(id)
        .await
        .map_err(|e| err(format!("the job store failed: {e}")))?;
    match job {
        Some(job) if owns(session, &job) => Ok(job),
        _ => Err(not_found(id)),
    }
}

async fn create(
    t: &CronTools,
    a: &CronjobArgs,
    ctx: &ToolContext,
    session: &Session,
) -> ToolResult {
    let mut fields = fields(t, a, ctx, session).await?;
    jobs::check_limited_schedule(&fields, t.scheduler.now(), &t.tz).map_err(job_err)?;
    // Without toolsets a job's runs get the gateway's defaults, which may be more than this
    // turn has.
    if fields.toolsets.is_none() {
        fields.toolsets = Some(ctx.toolsets.to_vec());
    }
    let creator = Creator {
        created_by: CronCreator::Agent,
        owner_key: session.owner.clone(),
        session: Some(ctx.session_id.clone()),
    };
    let _one_at_a_time = t.creating.lock().await;
    let made = owned_jobs(t, session)
        .await?
        .iter()
        .filter(|j| j.created_by_session.as_deref() == Some(ctx.session_id.as_str()))
        .count();
    if made >= t.max_jobs_per_session as usize {
        return Err(err(format!(
            "this session has made {made} scheduled jobs, the most allowed \
             ([cron] max_jobs_per_session = {}); remove one first",
            t.max_jobs_per_session
        )));
    }
    let job = jobs::create(&t.store, &fields, &creator, t.scheduler.now(), &t.tz)
        .await
        .map_err(job_err)?;
    // Jobs run later and unattended: what an agent scheduled is worth a line in the log.
    tracing::info!(job = %job.id, session = %ctx.session_id, schedule = ?fields.schedule, "an agent scheduled a job");
    t.scheduler.wake();
    Ok(jobs::job_view(&job))
}

/// The model's fields as [`JobFields`], refusing what an agent may not set. Only the fields
/// an agent may set exist in its arguments (no script, webhook, grace or retry); what they
/// may say is checked here.
async fn fields(
    t: &CronTools,
    a: &CronjobArgs,
    ctx: &ToolContext,
    session: &Session,
) -> Result<JobFields, ToolError> {
    let target = match a.session.as_deref().map(str::trim) {
        None => None,
        Some("this") => Some(ctx.session_id.clone()),
        Some(id) if id == ctx.session_id => Some(id.to_owned()),
        // `""` is how an update says "a new session per run" to `jobs::update`.
        Some("new" | "") => Some(String::new()),
        Some(other) => {
            return Err(err(format!(
                "session {other:?}: a job runs in this session (\"this\") or in a new session \
                 per run (\"new\"); no other session"
            )));
        }
    };
    if let Some(sets) = &a.toolsets
        && let Some(extra) = sets.iter().find(|s| !ctx.toolsets.contains(s))
    {
        return Err(err(format!(
            "toolset {extra:?} is not one of yours ({}); a job gets only toolsets you have",
            ctx.toolsets.join(", ")
        )));
    }
    let deliver = match a.deliver {
        None => None,
        Some(Deliver::None) => Some("none".to_owned()),
        Some(Deliver::Chat) => {
            let route = t
                .store
                .channel_route(&session.id)
                .await
                .map_err(|e| err(format!("cannot read this session's chat: {e}")))?;
            if route.is_none() {
                return Err(err(
                    "deliver \"chat\": this session does not talk to a chat; use \"none\" (the \
                     result stays in the run's session)",
                ));
            }
            Some("chat".to_owned())
        }
    };
    Ok(JobFields {
        schedule: a.schedule.clone(),
        prompt: a.prompt.clone(),
        name: a.name.clone(),
        session: target,
        toolsets: a.toolsets.clone(),
        timeout: a.timeout.clone(),
        deliver,
        catch_up: a.catch_up.map(|c| match c {
            CatchUp::One => CronCatchUp::One,
            CatchUp::All => CronCatchUp::All,
            CatchUp::None => CronCatchUp::None,
        }),
        overlap: a.overlap.map(|o| match o {
            Overlap::Skip => CronOverlap::Skip,
            Overlap::Queue => CronOverlap::Queue,
        }),
        ..JobFields::default()
    })
}
