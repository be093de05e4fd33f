//! The `cron` toolset: the `cronjob` tool, with which an agent schedules and manages its own
//! jobs (only with `[cron] allow_agent_scheduling = true`; the gateway registers it then).
//!
//! # Who may do what
//!
//! The adversary is a prompt-injected agent, so the tool enforces, whatever the model asks:
//!
//! - an agent sees and changes only jobs made with this tool (`created_by: agent`) by
//!   sessions of its own owner (the session's API key); others are "no scheduled job";
//! - no script jobs, no webhook or other chats' deliveries (`none` or `chat`, the chat of its
//!   own session), no session but its own (or a new one per run);
//! - a job's toolsets are among the calling turn's ([`tern_tools::ToolContext::toolsets`]);
//!   given none, the job gets exactly the turn's, never the gateway's wider defaults;
//! - a job's own run (a session whose source is [`RUN_SOURCE`]) is refused unless the tool
//!   was made with `allow_runs_to_schedule`, so a job cannot multiply itself;
//! - at most `max_jobs_per_session` jobs made by one session (removing one frees its place).
//!
//! The jobs themselves are made, changed and shown by [`crate::jobs`], as the API and the CLI
//! do; after each change the scheduler is woken, so a job due sooner than its sleep is on time.
//!
//! # Layout
//!
//! One module per tool ([`cronjob`]), listed in [`register`]; their shared state is
//! [`CronTools`].

pub mod cronjob;

use std::sync::Arc;

use jiff::tz::TimeZone;
use tern_store::Store;
use tern_tools::Registry;

pub use cronjob::{Action, CatchUp, Cronjob, CronjobArgs, Deliver, Overlap};

use crate::Scheduler;

/// The toolset of the scheduling tools.
pub const TOOLSET: &str = "cron";

/// The `source` of the sessions a job's runs create: the tool refuses them unless it was
/// made with `allow_runs_to_schedule` (the gateway's runner uses this for its sessions).
pub const RUN_SOURCE: &str = "cron";

/// What the scheduling tools hold: the gateway's scheduler, its store and zone, and the
/// `[cron]` settings they enforce.
pub struct CronTools {
    scheduler: Arc<Scheduler>,
    store: Store,
    tz: TimeZone,
    max_jobs_per_session: u32,
    allow_runs_to_schedule: bool,
    /// Held from counting a session's jobs to storing the new one, so parallel calls of one
    /// answer cannot pass the cap together.
    creating: tokio::sync::Mutex<()>,
}

impl CronTools {
    /// `tz`: the zone of schedules written without one (`[cron] timezone`, else the
    /// machine's); `max_jobs_per_session` and `allow_runs_to_schedule` from `[cron]`.
    pub fn new(
        scheduler: Arc<Scheduler>,
        store: Store,
        tz: TimeZone,
        max_jobs_per_session: u32,
        allow_runs_to_schedule: bool,
    ) -> Self {
        Self {
            scheduler,
            store,
            tz,
            max_jobs_per_session,
            allow_runs_to_schedule,
            creating: tokio::sync::Mutex::new(()),
        }
    }
}

/// Adds the `cron` toolset (`cronjob`) to `registry`.
pub fn register(registry: &mut Registry, tools: CronTools) {
    registry.add(Cronjob(Arc::new(tools)));
}

#[cfg(test)]
mod tests;
