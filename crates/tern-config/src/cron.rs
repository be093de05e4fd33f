//! `[cron]`: scheduled jobs (see `docs/cron.md`).

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

/// `[cron]`: the scheduler, and what agents may do with it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CronConfig {
    /// Run scheduled jobs in this gateway (`false`: jobs are kept, none runs).
    pub enabled: bool,
    /// The time zone of cron expressions and times written without one (an IANA name such as
    /// `Europe/Paris`); unset: the machine's.
    pub timezone: Option<String>,
    /// Offer agents the `cronjob` tool, to create and manage jobs themselves. Off by default:
    /// a job runs later, unattended, with the tools its creator chose.
    pub allow_agent_scheduling: bool,
    /// Let a job's own runs use the `cronjob` tool (only with `allow_agent_scheduling`), so a
    /// job may create jobs. Off by default, so a run cannot multiply itself.
    pub allow_runs_to_schedule: bool,
    /// The most jobs one agent session may create with the tool.
    pub max_jobs_per_session: u32,
}

impl Default for CronConfig {
    fn default() -> Self {
        CronConfig {
            enabled: true,
            timezone: None,
            allow_agent_scheduling: false,
            allow_runs_to_schedule: false,
            max_jobs_per_session: 10,
        }
    }
}

impl CronConfig {
    pub(crate) fn validate(&self, origin: impl Fn(&str) -> String) -> Result<(), ConfigError> {
        if self.allow_runs_to_schedule && !self.allow_agent_scheduling {
            return Err(ConfigError::Invalid(format!(
                "{} needs {} = true: without the tool, runs cannot schedule anything",
                origin("cron.allow_runs_to_schedule"),
                origin("cron.allow_agent_scheduling")
            )));
        }
        if let Some(tz) = &self.timezone
            && tz.trim().is_empty()
        {
            return Err(ConfigError::Invalid(format!(
                "{} is empty; remove it to use the machine's zone",
                origin("cron.timezone")
            )));
        }
        if self.max_jobs_per_session == 0 || self.max_jobs_per_session > 1000 {
            return Err(ConfigError::Invalid(format!(
                "{} must be between 1 and 1000 (got {})",
                origin("cron.max_jobs_per_session"),
                self.max_jobs_per_session
            )));
        }
        Ok(())
    }
}
