//! Policies applied when a request is created (`[inbox.policy]` in `config.toml`).
//!
//! # The flow at a glance
//!
//! The service holds a [`Policy`] value ([`crate::Inbox::with_policy`]); it never reads the
//! configuration itself. In the transaction that creates an approval or elicitation request:
//!
//! 1. **Rate limit** — for each [`RateLimit`] that names the request's
//!    `keyValueContext.action`: when `max` requests with that action were created within
//!    `window`, the create fails with [`crate::InboxError::RateLimited`] (HTTP 429 with
//!    `Retry-After`: when the oldest of them leaves the window). Nothing is stored.
//! 2. **Expiry** — with `expires_after`, the request gets an expiry time. A sweeper
//!    ([`crate::Inbox::expire_overdue`]) settles overdue pending requests: status `expired`, a
//!    `TIMEOUT` event; an approval gets `expiry_outcome` (REJECT unless configured) decided
//!    by `PLATFORM`, an elicitation an `ElicitationResult` without `fields`.
//! 3. **Auto-approve** — [`Policy::verdict`]: an approval whose project (and task — its id
//!    or its `externalId` — when the rule names one) and `action` or summary pattern match
//!    an [`AutoApproveRule`] is
//!    approved at once by `PLATFORM`, the rule named in the decision's note and authority
//!    tags — unless its action is on the `always_review` list, which no rule can cover; then
//!    a `NOTE` from `PLATFORM` records that the rule was overridden. Elicitations are never
//!    answered by policy.
//!
//! Every decision the policy takes is on the task's timeline; a rate-limited create leaves
//! no trace because it creates nothing.

use std::time::Duration;

use regex::Regex;
use tern_config::InboxPolicyConfig;

use crate::outcome::OutcomeType;

/// The name policy decisions are recorded under (`decidedBy`, the event source).
pub const PLATFORM: &str = "PLATFORM";

/// A configuration that cannot become a [`Policy`] (normally caught when config.toml loads).
#[derive(Debug, thiserror::Error)]
#[error("inbox.policy: {0}")]
pub struct PolicyError(String);

/// The rules; the default has none (every request waits for a human, forever).
#[derive(Debug, Clone)]
pub struct Policy {
    pub expires_after: Option<Duration>,
    /// What an expired approval becomes.
    pub expiry_outcome: OutcomeType,
    /// Actions no auto-approve rule can cover.
    pub always_review: Vec<String>,
    pub auto_approve: Vec<AutoApproveRule>,
    pub rate_limits: Vec<RateLimit>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            expires_after: None,
            expiry_outcome: OutcomeType::Reject,
            always_review: Vec::new(),
            auto_approve: Vec::new(),
            rate_limits: Vec::new(),
        }
    }
}

/// One auto-approve rule.
#[derive(Debug, Clone)]
pub struct AutoApproveRule {
    /// How the rule is named on the timeline, e.g. `auto_approve[0]`.
    pub name: String,
    pub project: String,
    pub matcher: Matcher,
    /// Only this task, when set: its id, or its `externalId` (what the agent set, e.g. a
    /// session id — the generated id is not known when config.toml is written).
    pub task: Option<String>,
}

/// What an auto-approve rule looks at besides the project.
#[derive(Debug, Clone)]
pub enum Matcher {
    /// `keyValueContext.action` equals this.
    Action(String),
    /// The summary matches this (anywhere, unless anchored).
    Summary(Regex),
}

/// At most `max` requests with `keyValueContext.action` = `action` per `window`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    pub action: String,
    pub max: u32,
    pub window: Duration,
}

/// What the policy looks at in a new request.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    pub is_approval: bool,
    pub project: &'a str,
    pub task_id: &'a str,
    /// The task's `externalId`, when the agent gave it one.
    pub task_external_id: Option<&'a str>,
    pub summary: &'a str,
    /// `keyValueContext.action`.
    pub action: Option<&'a str>,
}

/// What happens to a new request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It waits for a human.
    Review,
    /// Approved at once; `rule` describes the rule that matched.
    AutoApprove { rule: String },
    /// A rule matched, but the action is on the always-review list.
    AlwaysReview { action: String, rule: String },
}

impl Policy {
    /// From `[inbox.policy]`; errors for what config loading would have refused.
    pub fn from_config(c: &InboxPolicyConfig) -> Result<Self, PolicyError> {
        let expires_after = c
            .expires_after
            .as_deref()
            .map(tern_config::parse_duration)
            .transpose()
            .map_err(|e| PolicyError(format!("expires_after: {e}")))?;
        let expiry_outcome: OutcomeType = serde_json::from_value(serde_json::Value::String(
            c.expiry_outcome.clone(),
        ))
        .map_err(|_| PolicyError(format!("unknown expiry_outcome {:?}", c.expiry_outcome)))?;
        let mut auto_approve = Vec::with_capacity(c.auto_approve.len());
        for (i, rule) in c.auto_approve.iter().enumerate() {
            let matcher = match (&rule.action, &rule.summary) {
                (Some(action), None) => Matcher::Action(action.clone()),
                (None, Some(pattern)) => Matcher::Summary(
                    Regex::new(pattern)
                        .map_err(|e| PolicyError(format!("auto_approve[{i}].summary: {e}")))?,
                ),
                _ => {
                    return Err(PolicyError(format!(
                        "auto_approve[{i}]: set exactly one of `action` and `summary`"
                    )));
                }
            };
            auto_approve.push(AutoApproveRule {
                name: format!("auto_approve[{i}]"),
                project: rule.project.clone(),
                matcher,
                task: rule.task.clone(),
            });
        }
        let mut rate_limits = Vec::with_capacity(c.rate_limit.len());
        for (i, rule) in c.rate_limit.iter().enumerate() {
            let window = tern_config::parse_duration(&rule.window)
                .map_err(|e| PolicyError(format!("rate_limit[{i}].window: {e}")))?;
            if rule.max == 0 {
                return Err(PolicyError(format!(
                    "rate_limit[{i}].max must be at least 1"
                )));
            }
            rate_limits.push(RateLimit {
                action: rule.action.clone(),
                max: rule.max,
                window,
            });
        }
        Ok(Policy {
            expires_after,
            expiry_outcome,
            always_review: c.always_review.clone(),
            auto_approve,
            rate_limits,
        })
    }

    /// The rate limits that name `action`; a request must pass all of them.
    pub fn rate_limits_for<'a>(&'a self, action: &'a str) -> impl Iterator<Item = &'a RateLimit> {
        self.rate_limits.iter().filter(move |r| r.action == action)
    }

    /// Whether a new request is decided by the policy; see the module docs.
    pub fn verdict(&self, facts: &RequestFacts<'_>) -> Verdict {
        if !facts.is_approval {
            return Verdict::Review;
        }
        let Some(rule) = self.auto_approve.iter().find(|r| r.matches(facts)) else {
            return Verdict::Review;
        };
        match facts.action {
            Some(action) if self.always_review.iter().any(|a| a == action) => {
                Verdict::AlwaysReview {
                    action: action.to_owned(),
                    rule: rule.describe(),
                }
            }
            _ => Verdict::AutoApprove {
                rule: rule.describe(),
            },
        }
    }
}

impl AutoApproveRule {
    fn matches(&self, facts: &RequestFacts<'_>) -> bool {
        if self.project != facts.project {
            return false;
        }
        if let Some(task) = self.task.as_deref()
            && task != facts.task_id
            && Some(task) != facts.task_external_id
        {
            return false;
        }
        match &self.matcher {
            Matcher::Action(action) => facts.action == Some(action.as_str()),
            Matcher::Summary(re) => re.is_match(facts.summary),
        }
    }

    /// e.g. `auto_approve[0] (project "default", action "read_logs")`.
    pub fn describe(&self) -> String {
        let what = match &self.matcher {
            Matcher::Action(a) => format!("action {a:?}"),
            Matcher::Summary(re) => format!("summary matching {:?}", re.as_str()),
        };
        let task = self
            .task
            .as_deref()
            .map(|t| format!(", task {t:?}"))
            .unwrap_or_default();
        format!("{} (project {:?}, {what}{task})", self.name, self.project)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_config::{AutoApproveConfig, RateLimitConfig};

    fn config() -> InboxPolicyConfig {
        InboxPolicyConfig {
            expires_after: Some("2h".into()),
            expiry_outcome: "ESCALATE".into(),
            always_review: vec!["deploy_prod".into()],
            auto_approve: vec![
                AutoApproveConfig {
                    project: "default".into(),
                    action: Some("read_logs".into()),
                    summary: None,
                    task: None,
                },
                AutoApproveConfig {
                    project: "ops".into(),
                    action: None,
                    summary: Some("^Restart [a-z]+$".into()),
                    task: Some("t1".into()),
                },
                AutoApproveConfig {
                    project: "default".into(),
                    action: None,
                    summary: Some("(?i)deploy".into()),
                    task: None,
                },
            ],
            rate_limit: vec![
                RateLimitConfig {
                    action: "send_email".into(),
                    max: 10,
                    window: "1h".into(),
                },
                RateLimitConfig {
                    action: "send_email".into(),
                    max: 2,
                    window: "1m".into(),
                },
            ],
        }
    }

    fn facts<'a>(
        project: &'a str,
        task: &'a str,
        summary: &'a str,
        action: Option<&'a str>,
    ) -> RequestFacts<'a> {
        RequestFacts {
            is_approval: true,
            project,
            task_id: task,
            task_external_id: None,
            summary,
            action,
        }
    }

    #[test]
    fn from_config_parses_everything() {
        let p = Policy::from_config(&config()).unwrap();
        assert_eq!(p.expires_after, Some(Duration::from_secs(7200)));
        assert_eq!(p.expiry_outcome, OutcomeType::Escalate);
        assert_eq!(p.auto_approve.len(), 3);
        assert_eq!(
            p.auto_approve[1].describe(),
            "auto_approve[1] (project \"ops\", summary matching \"^Restart [a-z]+$\", task \"t1\")"
        );
        let d = Policy::from_config(&InboxPolicyConfig::default()).unwrap();
        assert_eq!(d.expiry_outcome, OutcomeType::Reject);
        assert_eq!(d.expires_after, None);
    }

    #[test]
    fn bad_config_is_refused() {
        let mut c = config();
        c.auto_approve[0].summary = Some("(".into());
        assert!(
            Policy::from_config(&c)
                .unwrap_err()
                .to_string()
                .contains("auto_approve[0]")
        );
        let mut c = config();
        c.expiry_outcome = "MAYBE".into();
        assert!(
            Policy::from_config(&c)
                .unwrap_err()
                .to_string()
                .contains("MAYBE")
        );
        let mut c = config();
        c.rate_limit[1].window = "0s".into();
        assert!(
            Policy::from_config(&c)
                .unwrap_err()
                .to_string()
                .contains("rate_limit[1]")
        );
    }

    #[test]
    fn auto_approve_by_action_project_summary_and_task() {
        let p = Policy::from_config(&config()).unwrap();
        let v = p.verdict(&facts("default", "t9", "Read the logs", Some("read_logs")));
        assert_eq!(
            v,
            Verdict::AutoApprove {
                rule: "auto_approve[0] (project \"default\", action \"read_logs\")".into()
            }
        );
        // Wrong project, wrong action, no action.
        assert_eq!(
            p.verdict(&facts("ops", "t9", "x", Some("read_logs"))),
            Verdict::Review
        );
        assert_eq!(
            p.verdict(&facts("default", "t9", "x", Some("write_logs"))),
            Verdict::Review
        );
        assert_eq!(
            p.verdict(&facts("default", "t9", "x", None)),
            Verdict::Review
        );
        // The summary rule is limited to task t1 and anchored.
        assert!(matches!(
            p.verdict(&facts("ops", "t1", "Restart nginx", None)),
            Verdict::AutoApprove { .. }
        ));
        assert_eq!(
            p.verdict(&facts("ops", "t2", "Restart nginx", None)),
            Verdict::Review
        );
        assert_eq!(
            p.verdict(&facts("ops", "t1", "Restart nginx now", None)),
            Verdict::Review
        );
        // A task whose externalId is t1 is that task too (agents know their external ids).
        let mut f = facts("ops", "0192aa", "Restart nginx", None);
        f.task_external_id = Some("t1");
        assert!(matches!(p.verdict(&f), Verdict::AutoApprove { .. }));
        f.task_external_id = Some("t2");
        assert_eq!(p.verdict(&f), Verdict::Review);
        // Elicitations are never auto-answered.
        let mut f = facts("default", "t9", "Read", Some("read_logs"));
        f.is_approval = false;
        assert_eq!(p.verdict(&f), Verdict::Review);
    }

    #[test]
    fn always_review_beats_auto_approve() {
        let p = Policy::from_config(&config()).unwrap();
        // The summary rule matches "Deploy", but deploy_prod is always reviewed.
        assert_eq!(
            p.verdict(&facts("default", "t", "Deploy v2", Some("deploy_prod"))),
            Verdict::AlwaysReview {
                action: "deploy_prod".into(),
                rule: "auto_approve[2] (project \"default\", summary matching \"(?i)deploy\")"
                    .into()
            }
        );
        // Another action: the same rule approves.
        assert!(matches!(
            p.verdict(&facts("default", "t", "Deploy v2", Some("deploy_staging"))),
            Verdict::AutoApprove { .. }
        ));
    }

    #[test]
    fn every_rate_limit_naming_the_action_applies() {
        let p = Policy::from_config(&config()).unwrap();
        let limits: Vec<(u32, Duration)> = p
            .rate_limits_for("send_email")
            .map(|r| (r.max, r.window))
            .collect();
        assert_eq!(
            limits,
            vec![
                (10, Duration::from_secs(3600)),
                (2, Duration::from_secs(60))
            ]
        );
        assert_eq!(p.rate_limits_for("read_logs").count(), 0);
    }
}
