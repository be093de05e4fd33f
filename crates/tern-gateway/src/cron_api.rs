//! The scheduled jobs' API (`/api/cron/jobs…`): a thin layer over `tern_cron::jobs` (the
//! same checks and views as `tern cron` and the `cronjob` tool) and the gateway's scheduler.
//!
//! # Who sees what
//!
//! A job belongs to the key that created it (`owner_key`): another agent key gets 404 for
//! it, as for a job that does not exist (a 403 would confirm the id), and does not see it
//! listed. Admin keys see every job, also the CLI's (which no key owns).
//!
//! # What a key may ask for
//!
//! - Toolsets only among the gateway's own (`[agent] toolsets`, …): a job's runs could not
//!   use any other, so naming one is a mistake said at once rather than at 3 a.m.
//! - A fixed session only if the key may use that session (an agent key: its own).
//! - A script job only with an admin key: a script runs a command with no model in the
//!   loop, so nothing between the agent key and the shell would judge it.
//!
//! After a change that can bring a job's next occurrence closer (create, update, resume),
//! the scheduler is woken, so it does not sleep past it.

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};
use tern_cron::jobs::{self, Creator, JobError, JobFields};
use tern_store::cron::{CronCreator, CronJob};

use crate::error::ApiError;
use crate::{ApiJson, AppState, CallerKey};

/// The most occurrences one history page gives.
const MAX_HISTORY: i64 = 1000;
/// The history page when no `limit` is given.
const DEFAULT_HISTORY: i64 = 50;
/// How many past occurrences `GET /api/cron/jobs/{id}` shows.
const RECENT: i64 = 10;

impl From<JobError> for ApiError {
    fn from(e: JobError) -> Self {
        match e {
            JobError::NotFound(id) => job_not_found(&id),
            JobError::Store(s) => s.into(),
            e => ApiError::bad_request("invalid_job", e.to_string()),
        }
    }
}

fn job_not_found(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "cron_job_not_found",
        format!("Scheduled job not found: {id}"),
    )
}

/// The job `id` if `key` may see it; 404 alike for a job that does not exist and for
/// another key's.
async fn job_or_404(gw: &AppState, key: &CallerKey, id: &str) -> Result<CronJob, ApiError> {
    gw.store
        .cron_job(id)
        .await?
        .filter(|j| key.admin || j.owner_key.as_deref() == Some(key.id.as_str()))
        .ok_or_else(|| job_not_found(id))
}

/// The body as [`JobFields`]: an unknown field or a wrong type is the caller's mistake about
/// a job (`invalid_job`), said with serde's words ("unknown field `colour`, expected one of …").
fn fields(body: Value) -> Result<JobFields, ApiError> {
    serde_json::from_value(body).map_err(|e| {
        ApiError::bad_request(
            "invalid_job",
            format!("The job's fields are not valid: {e}"),
        )
    })
}

/// What only the API checks, on a creation and an update alike: the key's rights and the
/// gateway's toolsets. `tern_cron::jobs` checks the rest.
async fn check_allowed(gw: &AppState, key: &CallerKey, fields: &JobFields) -> Result<(), ApiError> {
    if fields.script.is_some() && !key.admin {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "Only an admin key may create or change a script job: a script runs a command \
             with no model in the loop",
        )
        .param("script"));
    }
    if !key.admin {
        // Where an agent key's results may go: its own sessions, the chat one of them talks
        // to, nowhere else. A webhook would reach any address this machine can (internal
        // services included), another chat would let it post where it pleases.
        if let Some(d) = fields.deliver.as_deref().map(str::trim)
            && !matches!(d, "" | "none" | "chat")
        {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "An agent key's job delivers to \"none\" or \"chat\" (the chat its own \
                 session talks to); webhooks and other chats need an admin key",
            )
            .param("deliver"));
        }
        jobs::check_limited_schedule(fields, gw.cron().scheduler.now(), &gw.cron().tz)
            .map_err(|e| ApiError::bad_request("invalid_job", e.to_string()).param("schedule"))?;
    }
    if let Some(wanted) = &fields.toolsets {
        let allowed = &gw.settings.toolsets;
        if let Some(unknown) = wanted.iter().find(|t| !allowed.contains(t)) {
            return Err(ApiError::bad_request(
                "invalid_job",
                format!(
                    "unknown toolset {unknown:?}: this gateway's toolsets are {}",
                    if allowed.is_empty() {
                        "none".to_owned()
                    } else {
                        allowed.join(", ")
                    }
                ),
            )
            .param("toolsets"));
        }
    }
    if let Some(id) = fields.session.as_deref().map(str::trim)
        && !id.is_empty()
    {
        // Said like `tern_cron::jobs` says a session that does not exist, so another key's
        // session is not confirmed.
        let visible = gw
            .store
            .get_session(id)
            .await?
            .is_some_and(|s| key.sees(&s));
        if !visible {
            return Err(
                ApiError::bad_request("invalid_job", format!("no session {id}")).param("session"),
            );
        }
    }
    Ok(())
}

/// `GET /api/cron/jobs`: the jobs the key sees, oldest first.
pub(crate) async fn list(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
) -> Result<impl IntoResponse, ApiError> {
    let owner = (!key.admin).then_some(key.id.as_str());
    let list = gw.store.list_cron_jobs(owner).await?;
    Ok(axum::Json(json!({
        "object": "list",
        "data": list.iter().map(jobs::job_view).collect::<Vec<_>>(),
    })))
}

/// `POST /api/cron/jobs`: a new job, owned by the key.
pub(crate) async fn create(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    ApiJson(body): ApiJson<Value>,
) -> Result<impl IntoResponse, ApiError> {
    let fields = fields(body)?;
    check_allowed(&gw, &key, &fields).await?;
    if !key.admin && gw.store.list_cron_jobs(Some(&key.id)).await?.len() >= jobs::LIMITED_MAX_JOBS {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "too_many_jobs",
            format!(
                "This key owns {} scheduled jobs, the most an agent key may; remove one first",
                jobs::LIMITED_MAX_JOBS
            ),
        ));
    }
    let cron = gw.cron();
    let creator = Creator {
        created_by: CronCreator::Api,
        owner_key: Some(key.id.clone()),
        session: None,
    };
    let job = jobs::create(&gw.store, &fields, &creator, cron.scheduler.now(), &cron.tz).await?;
    cron.scheduler.wake();
    tracing::info!(job = %job.id, key = %key.name, "scheduled job created");
    Ok((StatusCode::CREATED, axum::Json(jobs::job_view(&job))))
}

/// `GET /api/cron/jobs/{id}`: the job, its runs going now and its latest occurrences.
pub(crate) async fn show(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let job = job_or_404(&gw, &key, &id).await?;
    let running = gw.store.cron_running(&id).await?;
    let recent = gw.store.cron_history(&id, RECENT).await?;
    let mut view = jobs::job_view(&job);
    view["running"] = running.iter().map(jobs::occurrence_view).collect();
    view["recent"] = recent.iter().map(jobs::occurrence_view).collect();
    Ok(axum::Json(view))
}

/// `PATCH /api/cron/jobs/{id}`: the given fields replace the job's.
pub(crate) async fn update(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<Value>,
) -> Result<impl IntoResponse, ApiError> {
    job_or_404(&gw, &key, &id).await?;
    let fields = fields(body)?;
    check_allowed(&gw, &key, &fields).await?;
    let cron = gw.cron();
    let job = jobs::update(&gw.store, &id, &fields, cron.scheduler.now(), &cron.tz).await?;
    cron.scheduler.wake();
    Ok(axum::Json(jobs::job_view(&job)))
}

/// `DELETE /api/cron/jobs/{id}`: the job goes; its history stays, and a run going now goes
/// on to its end (`…/stop` first to end it).
pub(crate) async fn delete(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    job_or_404(&gw, &key, &id).await?;
    if !gw.store.delete_cron_job(&id).await? {
        return Err(job_not_found(&id));
    }
    tracing::info!(job = %id, key = %key.name, "scheduled job removed");
    Ok(axum::Json(json!({"id": id, "deleted": true})))
}

/// `POST /api/cron/jobs/{id}/pause`.
pub(crate) async fn pause(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    job_or_404(&gw, &key, &id).await?;
    let job = jobs::pause(&gw.store, &id).await?;
    Ok(axum::Json(jobs::job_view(&job)))
}

/// `POST /api/cron/jobs/{id}/resume`: from the next occurrence after now.
pub(crate) async fn resume(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    job_or_404(&gw, &key, &id).await?;
    let cron = gw.cron();
    let job = jobs::resume(&gw.store, &id, cron.scheduler.now()).await?;
    cron.scheduler.wake();
    Ok(axum::Json(jobs::job_view(&job)))
}

/// 503 when this gateway's scheduler does not run: nothing would run or stop the job.
fn scheduler_on(gw: &AppState) -> Result<(), ApiError> {
    if gw.cron().enabled {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "cron_disabled",
        "Scheduled jobs are off on this gateway ([cron] enabled = false); nothing runs them",
    ))
}

/// `POST /api/cron/jobs/{id}/run`: a run now, by hand (also of a paused job); it does not
/// move the schedule. 202: the run has started, its outcome comes in the history.
pub(crate) async fn run(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    scheduler_on(&gw)?;
    job_or_404(&gw, &key, &id).await?;
    let occurrence = gw.cron().scheduler.run_now(&id).await?;
    let job = job_or_404(&gw, &key, &id).await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(json!({
            "job": jobs::job_view(&job),
            "occurrence": jobs::occurrence_view(&occurrence),
        })),
    ))
}

/// `POST /api/cron/jobs/{id}/stop`: stops the job's runs going now; how many.
pub(crate) async fn stop(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    scheduler_on(&gw)?;
    job_or_404(&gw, &key, &id).await?;
    let stopped = gw.cron().scheduler.stop(&id);
    Ok(axum::Json(json!({"stopped": stopped})))
}

#[derive(Debug, Deserialize)]
pub(crate) struct HistoryQuery {
    limit: Option<i64>,
}

/// `GET /api/cron/jobs/{id}/history?limit=N`: its occurrences, newest first.
pub(crate) async fn history(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
    Query(q): Query<HistoryQuery>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = q.limit.unwrap_or(DEFAULT_HISTORY);
    if !(1..=MAX_HISTORY).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_limit",
            format!("limit must be between 1 and {MAX_HISTORY} (got {limit})"),
        )
        .param("limit"));
    }
    job_or_404(&gw, &key, &id).await?;
    let list = gw.store.cron_history(&id, limit).await?;
    Ok(axum::Json(json!({
        "object": "list",
        "data": list.iter().map(jobs::occurrence_view).collect::<Vec<_>>(),
    })))
}
