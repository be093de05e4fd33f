//! `[inbox]`: the human inbox — links, uploads, policies, notifications and projects.
//!
//! ```toml
//! [inbox]
//! public_url = "https://inbox.example"   # base of links; default: the gateway's address
//! max_upload_bytes = 26214400             # 25 MiB
//! keep_waits_on_reset = false             # true: a reset session's open waits resume its successor
//! url = "https://inbox.example"          # remote mode: the waits use this inbox (outbound only)
//! key = "…"                               # its agent key (or TERN_INBOX_KEY)
//! poll_interval = "30s"                   # remote: how often to check in (feed long-poll, or polling)
//!
//! [inbox.policy]
//! expires_after = "2h"                    # off unless set
//! expiry_outcome = "REJECT"               # what an expired approval becomes
//! always_review = ["deploy_prod"]         # actions no auto-approve rule covers
//!
//! [[inbox.policy.auto_approve]]
//! project = "default"
//! action = "read_logs"                    # or: summary = "^Read .* logs$"
//! task = "…"                              # optional: only this task (id or externalId)
//!
//! [[inbox.policy.rate_limit]]
//! action = "send_email"
//! max = 10
//! window = "1h"
//!
//! [[inbox.notify]]
//! url = "https://hooks.example/inbox"
//! secret = "at least 16 characters"
//!
//! [[inbox.projects]]
//! name = "refunds"
//! initial_step = "triage"
//! steps = [{ name = "triage", owner = "AGENT", exits = ["review"] }, { name = "review", owner = "HUMAN" }]
//! ```
//!
//! Everything is checked when the file is loaded ([`validate_inbox`]): a bad regex, an
//! unknown outcome, a zero window or an inconsistent project is refused with the key it is
//! at, before the gateway starts.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::address::is_http_url;
use crate::duration::parse_duration;
use crate::error::ConfigError;
use crate::mask::{mask_secret, mask_url};

/// The default of `inbox.max_upload_bytes`: 25 MiB.
pub const DEFAULT_MAX_UPLOAD_BYTES: u64 = 25 * 1024 * 1024;

/// The approval outcomes an expired request may be given (`expiry_outcome`).
pub const EXPIRY_OUTCOMES: &[&str] = &[
    "APPROVE",
    "REJECT",
    "EDIT_AND_APPROVE",
    "ESCALATE",
    "REQUEST_MORE_INFO",
];

/// `[inbox]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct InboxConfig {
    /// Base of the links in notifications and login links, e.g. `https://inbox.example`;
    /// unset: the gateway's listen address.
    pub public_url: Option<String>,
    /// Largest file `POST /api/uploads` accepts (413 past it).
    pub max_upload_bytes: u64,
    pub policy: InboxPolicyConfig,
    /// `[[inbox.notify]]`: URLs told about every new request.
    pub notify: Vec<InboxNotifyConfig>,
    /// `[[inbox.projects]]`: projects the gateway creates at start when missing.
    pub projects: Vec<InboxProjectConfig>,
    /// Whether a session reset keeps its open waits (their decisions then resume the
    /// successor session) instead of cancelling them and withdrawing their requests.
    pub keep_waits_on_reset: bool,
    /// Remote mode: the inbox the waits use (another tern gateway, e.g. one run with
    /// `--inbox-only`, or any Pump Up server), followed through outbound connections only;
    /// unset: this gateway's own inbox.
    pub url: Option<String>,
    /// The agent key for `url` (the environment's `TERN_INBOX_KEY` wins).
    pub key: Option<InboxKey>,
    /// Remote mode: how long one long-poll of the decisions feed lasts (at most 30 s), or,
    /// against a server without the feed, how often each open request's result is read.
    pub poll_interval: String,
}

/// The default of `inbox.poll_interval`.
pub const DEFAULT_POLL_INTERVAL: &str = "30s";

/// An agent key, never shown whole (not in `Debug`, not by `tern config show`).
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct InboxKey(pub String);

impl InboxKey {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for InboxKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&mask_secret(&self.0))
    }
}

/// `[inbox] url`, `key` and `poll_interval` checked for use: the waits' remote inbox.
#[derive(Clone, PartialEq, Eq)]
pub struct RemoteInboxConfig {
    /// Without a trailing slash.
    pub url: String,
    pub key: String,
    pub poll_interval: Duration,
}

// Hand-written so the key never ends up in logs.
impl fmt::Debug for RemoteInboxConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteInboxConfig")
            .field("url", &mask_url(&self.url))
            .field("key", &mask_secret(&self.key))
            .field("poll_interval", &self.poll_interval)
            .finish()
    }
}

impl InboxConfig {
    /// The remote inbox when `url` is set. Validated at load, so an error here means the
    /// values were changed afterwards.
    pub fn remote(&self) -> Result<Option<RemoteInboxConfig>, String> {
        let Some(url) = &self.url else {
            return Ok(None);
        };
        let key = self
            .key
            .as_ref()
            .map(|k| k.expose().trim())
            .filter(|k| !k.is_empty())
            .ok_or("inbox.key (or TERN_INBOX_KEY) must be set when inbox.url is")?;
        Ok(Some(RemoteInboxConfig {
            url: url.trim().trim_end_matches('/').to_owned(),
            key: key.to_owned(),
            poll_interval: parse_duration(&self.poll_interval)?,
        }))
    }
}

impl Default for InboxConfig {
    fn default() -> Self {
        InboxConfig {
            public_url: None,
            max_upload_bytes: DEFAULT_MAX_UPLOAD_BYTES,
            policy: InboxPolicyConfig::default(),
            notify: Vec::new(),
            projects: Vec::new(),
            keep_waits_on_reset: false,
            url: None,
            key: None,
            poll_interval: DEFAULT_POLL_INTERVAL.to_owned(),
        }
    }
}

/// `[inbox.policy]`: rules applied when a request is created.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct InboxPolicyConfig {
    /// A duration (`"30m"`, `"2h"`, `"1d"`, `"1h30m"`) after which a pending request
    /// expires; unset: requests wait forever.
    pub expires_after: Option<String>,
    /// The outcome an expired approval gets: one of [`EXPIRY_OUTCOMES`].
    pub expiry_outcome: String,
    /// `keyValueContext.action` values that always go to a human.
    pub always_review: Vec<String>,
    pub auto_approve: Vec<AutoApproveConfig>,
    pub rate_limit: Vec<RateLimitConfig>,
}

impl Default for InboxPolicyConfig {
    fn default() -> Self {
        InboxPolicyConfig {
            expires_after: None,
            expiry_outcome: "REJECT".to_owned(),
            always_review: Vec::new(),
            auto_approve: Vec::new(),
            rate_limit: Vec::new(),
        }
    }
}

impl InboxPolicyConfig {
    /// `expires_after` parsed; `None` when unset. Validated at load, so an error here means
    /// the value was changed afterwards.
    pub fn expires_after_duration(&self) -> Result<Option<Duration>, String> {
        self.expires_after
            .as_deref()
            .map(parse_duration)
            .transpose()
    }
}

/// One `[[inbox.policy.auto_approve]]` rule: approval requests in `project` whose
/// `keyValueContext.action` is `action`, or whose summary matches the regex `summary`,
/// are approved at once (only in task `task`, when set: the task's id or its `externalId`,
/// e.g. the session id an agent gave it).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AutoApproveConfig {
    pub project: String,
    #[serde(default)]
    pub action: Option<String>,
    /// A regular expression (Rust `regex` syntax), searched anywhere in the summary; anchor
    /// it with `^…$` to match the whole summary.
    #[serde(default)]
    pub summary: Option<String>,
    #[serde(default)]
    pub task: Option<String>,
}

/// One `[[inbox.policy.rate_limit]]` rule: at most `max` requests with
/// `keyValueContext.action` = `action` per `window`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    pub action: String,
    pub max: u32,
    /// A duration, e.g. `"1h"`.
    pub window: String,
}

/// One `[[inbox.notify]]` entry: a URL every new request is POSTed to, signed with `secret`
/// the way `[[webhooks]]` are.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InboxNotifyConfig {
    /// `http://` or `https://`.
    pub url: String,
    /// The HMAC-SHA256 key for `X-Tern-Signature`; at least 16 characters.
    pub secret: String,
    /// Attempts in all, the first included.
    #[serde(default = "default_notify_max_attempts")]
    pub max_attempts: u32,
    /// The first retry waits this long; each next one twice as long, at most 10 minutes.
    #[serde(default = "default_notify_retry_base_ms")]
    pub retry_base_ms: u64,
    /// Per attempt.
    #[serde(default = "default_notify_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_notify_max_attempts() -> u32 {
    10
}

fn default_notify_retry_base_ms() -> u64 {
    1000
}

fn default_notify_timeout_ms() -> u64 {
    10_000
}

// Hand-written so the secret never ends up in logs or panic messages.
impl fmt::Debug for InboxNotifyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboxNotifyConfig")
            .field("url", &mask_url(&self.url))
            .field("secret", &mask_secret(&self.secret))
            .field("max_attempts", &self.max_attempts)
            .field("retry_base_ms", &self.retry_base_ms)
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

/// One `[[inbox.projects]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InboxProjectConfig {
    pub name: String,
    /// Default: the first step.
    #[serde(default)]
    pub initial_step: Option<String>,
    pub steps: Vec<InboxStepConfig>,
}

impl InboxProjectConfig {
    /// The initial step: `initial_step`, else the first step's name.
    pub fn initial_step(&self) -> Option<&str> {
        self.initial_step
            .as_deref()
            .or_else(|| self.steps.first().map(|s| s.name.as_str()))
    }
}

/// A step of an `[[inbox.projects]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InboxStepConfig {
    pub name: String,
    /// `AGENT` (default) or `HUMAN`: whose move it is in this step.
    #[serde(default = "default_step_owner")]
    pub owner: String,
    /// The steps this one may move to; unset: any.
    #[serde(default)]
    pub exits: Option<Vec<String>>,
}

fn default_step_owner() -> String {
    "AGENT".to_owned()
}

fn at(config_path: &Path, key: &str) -> String {
    format!("{key} in {}", config_path.display())
}

/// Checks `[inbox]`; errors name the key and the file.
pub(crate) fn validate_inbox(c: &InboxConfig, config_path: &Path) -> Result<(), ConfigError> {
    let invalid = |key: &str, problem: String| {
        ConfigError::Invalid(format!("{}: {problem}", at(config_path, key)))
    };
    if let Some(url) = &c.public_url
        && !is_http_url(url.trim())
    {
        return Err(invalid(
            "inbox.public_url",
            format!("{url:?} is not a URL (it must start with http:// or https://)"),
        ));
    }
    if let Some(url) = &c.url
        && !is_http_url(url.trim())
    {
        return Err(invalid(
            "inbox.url",
            format!(
                "{:?} is not a URL (it must start with http:// or https://)",
                mask_url(url)
            ),
        ));
    }
    if c.url.is_some() && c.key.as_ref().is_none_or(|k| k.expose().trim().is_empty()) {
        return Err(invalid(
            "inbox.key",
            "must be set when inbox.url is: the agent key of that inbox (or set TERN_INBOX_KEY)"
                .to_owned(),
        ));
    }
    parse_duration(&c.poll_interval).map_err(|e| invalid("inbox.poll_interval", e))?;
    if c.max_upload_bytes < 1 {
        return Err(invalid(
            "inbox.max_upload_bytes",
            "must be at least 1 (got 0)".to_owned(),
        ));
    }
    let p = &c.policy;
    if let Some(text) = &p.expires_after {
        parse_duration(text).map_err(|e| invalid("inbox.policy.expires_after", e))?;
    }
    if !EXPIRY_OUTCOMES.contains(&p.expiry_outcome.as_str()) {
        return Err(invalid(
            "inbox.policy.expiry_outcome",
            format!(
                "unknown outcome {:?} (known: {})",
                p.expiry_outcome,
                EXPIRY_OUTCOMES.join(", ")
            ),
        ));
    }
    if p.always_review.iter().any(|a| a.trim().is_empty()) {
        return Err(invalid(
            "inbox.policy.always_review",
            "an action must not be empty".to_owned(),
        ));
    }
    for (i, rule) in p.auto_approve.iter().enumerate() {
        let key = |field: &str| format!("inbox.policy.auto_approve[{i}].{field}");
        if rule.project.trim().is_empty() {
            return Err(invalid(&key("project"), "must not be empty".to_owned()));
        }
        match (&rule.action, &rule.summary) {
            (Some(_), Some(_)) | (None, None) => {
                return Err(invalid(
                    &format!("inbox.policy.auto_approve[{i}]"),
                    "set exactly one of `action` and `summary`".to_owned(),
                ));
            }
            (Some(action), None) if action.trim().is_empty() => {
                return Err(invalid(&key("action"), "must not be empty".to_owned()));
            }
            (None, Some(pattern)) => {
                regex::Regex::new(pattern).map_err(|e| {
                    invalid(
                        &key("summary"),
                        format!("not a valid regular expression: {e}"),
                    )
                })?;
            }
            _ => {}
        }
        if rule.task.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err(invalid(&key("task"), "must not be empty".to_owned()));
        }
    }
    for (i, rule) in p.rate_limit.iter().enumerate() {
        let key = |field: &str| format!("inbox.policy.rate_limit[{i}].{field}");
        if rule.action.trim().is_empty() {
            return Err(invalid(&key("action"), "must not be empty".to_owned()));
        }
        if rule.max < 1 {
            return Err(invalid(
                &key("max"),
                "must be at least 1 (got 0)".to_owned(),
            ));
        }
        parse_duration(&rule.window).map_err(|e| invalid(&key("window"), e))?;
    }
    for (i, n) in c.notify.iter().enumerate() {
        let key = |field: &str| format!("inbox.notify[{i}].{field}");
        if !is_http_url(n.url.trim()) {
            return Err(invalid(
                &key("url"),
                format!(
                    "{:?} is not a URL (it must start with http:// or https://)",
                    mask_url(&n.url)
                ),
            ));
        }
        let len = n.secret.chars().count();
        if len < 16 {
            // Never echo the secret, not even a short one.
            return Err(invalid(
                &key("secret"),
                format!("is too short: it must have at least 16 characters (got {len})"),
            ));
        }
        for (field, value) in [
            ("max_attempts", u64::from(n.max_attempts)),
            ("retry_base_ms", n.retry_base_ms),
            ("timeout_ms", n.timeout_ms),
        ] {
            if value < 1 {
                return Err(invalid(
                    &key(field),
                    "must be at least 1 (got 0)".to_owned(),
                ));
            }
        }
    }
    let mut names = std::collections::HashSet::new();
    for (i, project) in c.projects.iter().enumerate() {
        validate_project(project, |field, problem| {
            invalid(&format!("inbox.projects[{i}]{field}"), problem)
        })?;
        if !names.insert(project.name.as_str()) {
            return Err(invalid(
                &format!("inbox.projects[{i}].name"),
                format!("project {:?} is listed twice", project.name),
            ));
        }
    }
    Ok(())
}

fn validate_project(
    project: &InboxProjectConfig,
    invalid: impl Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if project.name.trim().is_empty() {
        return Err(invalid(".name", "must not be empty".to_owned()));
    }
    if project.steps.is_empty() {
        return Err(invalid(".steps", "must list at least one step".to_owned()));
    }
    let mut steps = std::collections::HashSet::new();
    for (j, step) in project.steps.iter().enumerate() {
        if step.name.trim().is_empty() {
            return Err(invalid(
                &format!(".steps[{j}].name"),
                "must not be empty".into(),
            ));
        }
        if !steps.insert(step.name.as_str()) {
            return Err(invalid(
                &format!(".steps[{j}].name"),
                format!("step {:?} is listed twice", step.name),
            ));
        }
        if !matches!(step.owner.as_str(), "AGENT" | "HUMAN") {
            return Err(invalid(
                &format!(".steps[{j}].owner"),
                format!("unknown owner {:?} (AGENT or HUMAN)", step.owner),
            ));
        }
    }
    for (j, step) in project.steps.iter().enumerate() {
        if let Some(bad) = step
            .exits
            .iter()
            .flatten()
            .find(|e| !steps.contains(e.as_str()))
        {
            return Err(invalid(
                &format!(".steps[{j}].exits"),
                format!("{bad:?} is not one of the project's steps"),
            ));
        }
    }
    if let Some(initial) = &project.initial_step
        && !steps.contains(initial.as_str())
    {
        return Err(invalid(
            ".initial_step",
            format!("{initial:?} is not one of the project's steps"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Home, Source, load, render_masked};

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn home_with(text: &str) -> (tempfile::TempDir, Home) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            root: dir.path().join("home"),
        };
        home.ensure().unwrap();
        std::fs::write(home.config_path(), text).unwrap();
        (dir, home)
    }

    fn load_error(text: &str) -> String {
        let (_d, home) = home_with(text);
        load(&home, &no_env).unwrap_err().to_string()
    }

    const INBOX_TOML: &str = r#"
[inbox]
public_url = "https://inbox.example"

[inbox.policy]
expires_after = "1h30m"
always_review = ["deploy_prod"]

[[inbox.policy.auto_approve]]
project = "default"
action = "read_logs"

[[inbox.policy.auto_approve]]
project = "ops"
summary = "^Restart [a-z]+$"
task = "t1"

[[inbox.policy.rate_limit]]
action = "send_email"
max = 10
window = "1h"

[[inbox.notify]]
url = "https://hooks.example/inbox"
secret = "0123456789abcdef-secret"

[[inbox.projects]]
name = "refunds"
steps = [{ name = "triage", exits = ["review"] }, { name = "review", owner = "HUMAN" }]
"#;

    #[test]
    fn the_remote_inbox_is_off_unless_a_url_is_set() {
        let (_d, home) = home_with("");
        let c = load(&home, &no_env).unwrap().config.inbox;
        assert_eq!(c.remote().unwrap(), None);
        assert_eq!(c.poll_interval, "30s");
    }

    #[test]
    fn the_remote_inbox_takes_its_key_from_the_file_or_the_environment() {
        let toml = "[inbox]\nurl = \"http://inbox.example:8642/\"\nkey = \"file-key-0123456789\"\n";
        let (_d, home) = home_with(toml);
        let eff = load(&home, &no_env).unwrap();
        let remote = eff.config.inbox.remote().unwrap().unwrap();
        assert_eq!(remote.url, "http://inbox.example:8642");
        assert_eq!(remote.key, "file-key-0123456789");
        assert_eq!(remote.poll_interval, Duration::from_secs(30));
        assert_eq!(eff.source("inbox.key"), crate::Source::File);
        // Neither Debug nor `tern config show` shows the key.
        assert!(!format!("{:?}", eff.config).contains("file-key-0123456789"));
        assert!(!format!("{remote:?}").contains("file-key-0123456789"));
        let shown = crate::render_masked(&eff);
        assert!(!shown.contains("file-key-0123456789"), "{shown}");
        assert!(shown.contains("key = \"fil…6789\""), "{shown}");
        assert!(
            shown.contains("url = \"http://inbox.example:8642\""),
            "{shown}"
        );
        assert!(shown.contains("poll_interval = \"30s\""), "{shown}");

        let env = |k: &str| (k == crate::ENV_INBOX_KEY).then(|| "env-key-0123456789".to_owned());
        let eff = load(&home, &env).unwrap();
        assert_eq!(
            eff.config.inbox.remote().unwrap().unwrap().key,
            "env-key-0123456789"
        );
        assert_eq!(
            eff.source("inbox.key"),
            crate::Source::Env(crate::ENV_INBOX_KEY)
        );

        // Only the environment's key: fine too.
        let (_d, home) =
            home_with("[inbox]\nurl = \"https://inbox.example\"\npoll_interval = \"1m\"\n");
        let remote = load(&home, &env)
            .unwrap()
            .config
            .inbox
            .remote()
            .unwrap()
            .unwrap();
        assert_eq!(remote.key, "env-key-0123456789");
        assert_eq!(remote.poll_interval, Duration::from_secs(60));
    }

    #[test]
    fn a_bad_remote_inbox_is_refused_with_its_key() {
        let e = load_error("[inbox]\nurl = \"https://inbox.example\"\n");
        assert!(e.contains("inbox.key in "), "{e}");
        assert!(e.contains("TERN_INBOX_KEY"), "{e}");
        let e = load_error("[inbox]\nurl = \"https://inbox.example\"\nkey = \"  \"\n");
        assert!(e.contains("inbox.key in "), "{e}");
        let e = load_error("[inbox]\nurl = \"inbox.example\"\nkey = \"k\"\n");
        assert!(e.contains("inbox.url in "), "{e}");
        let e = load_error("[inbox]\npoll_interval = \"soon\"\n");
        assert!(e.contains("inbox.poll_interval in "), "{e}");
        let e = load_error("[inbox]\npoll_interval = \"0s\"\n");
        assert!(e.contains("inbox.poll_interval in "), "{e}");
        // An empty url means unset.
        let (_d, home) = home_with("[inbox]\nurl = \"\"\n");
        assert_eq!(
            load(&home, &no_env).unwrap().config.inbox.remote().unwrap(),
            None
        );
    }

    #[test]
    fn keep_waits_on_reset_is_off_unless_set() {
        let (_d, home) = home_with("");
        assert!(
            !load(&home, &no_env)
                .unwrap()
                .config
                .inbox
                .keep_waits_on_reset
        );
        let (_d, home) = home_with("[inbox]\nkeep_waits_on_reset = true\n");
        assert!(
            load(&home, &no_env)
                .unwrap()
                .config
                .inbox
                .keep_waits_on_reset
        );
        let e = load_error("[inbox]\nkeep_waits_on_reset = \"yes\"\n");
        assert!(e.contains("invalid type"), "{e}");
    }

    #[test]
    fn defaults_without_an_inbox_section() {
        let (_d, home) = home_with("");
        let eff = load(&home, &no_env).unwrap();
        let c = &eff.config.inbox;
        assert_eq!(c, &InboxConfig::default());
        assert_eq!(c.max_upload_bytes, 25 * 1024 * 1024);
        assert_eq!(c.policy.expiry_outcome, "REJECT");
        assert_eq!(c.policy.expires_after_duration(), Ok(None));
        assert_eq!(eff.source("inbox.max_upload_bytes"), Source::Default);
    }

    #[test]
    fn full_section_parses_with_defaults_filled_in() {
        let (_d, home) = home_with(INBOX_TOML);
        let eff = load(&home, &no_env).unwrap();
        let c = &eff.config.inbox;
        assert_eq!(c.public_url.as_deref(), Some("https://inbox.example"));
        assert_eq!(eff.source("inbox.public_url"), Source::File);
        assert_eq!(
            c.policy.expires_after_duration(),
            Ok(Some(Duration::from_secs(5400)))
        );
        assert_eq!(c.policy.expiry_outcome, "REJECT");
        assert_eq!(c.policy.always_review, vec!["deploy_prod"]);
        assert_eq!(
            c.policy.auto_approve[1],
            AutoApproveConfig {
                project: "ops".into(),
                action: None,
                summary: Some("^Restart [a-z]+$".into()),
                task: Some("t1".into()),
            }
        );
        assert_eq!(
            c.policy.rate_limit,
            vec![RateLimitConfig {
                action: "send_email".into(),
                max: 10,
                window: "1h".into()
            }]
        );
        let n = &c.notify[0];
        assert_eq!(
            (n.max_attempts, n.retry_base_ms, n.timeout_ms),
            (10, 1000, 10_000)
        );
        let p = &c.projects[0];
        assert_eq!(p.initial_step(), Some("triage"));
        assert_eq!(p.steps[0].owner, "AGENT");
        assert_eq!(p.steps[1].exits, None);
    }

    #[test]
    fn validation_names_the_key() {
        for (text, expect) in [
            (
                "[inbox]\npublic_url = \"inbox.example\"\n",
                "inbox.public_url in ",
            ),
            ("[inbox]\nmax_upload_bytes = 0\n", "inbox.max_upload_bytes"),
            (
                "[inbox.policy]\nexpires_after = \"soon\"\n",
                "inbox.policy.expires_after",
            ),
            (
                "[inbox.policy]\nexpiry_outcome = \"MAYBE\"\n",
                "unknown outcome \"MAYBE\" (known: APPROVE, REJECT",
            ),
            (
                "[[inbox.policy.auto_approve]]\nproject = \"p\"\nsummary = \"(unclosed\"\n",
                "inbox.policy.auto_approve[0].summary in ",
            ),
            (
                "[[inbox.policy.auto_approve]]\nproject = \"p\"\nsummary = \"(unclosed\"\n",
                "not a valid regular expression",
            ),
            (
                "[[inbox.policy.auto_approve]]\nproject = \"p\"\n",
                "set exactly one of `action` and `summary`",
            ),
            (
                "[[inbox.policy.auto_approve]]\nproject = \"p\"\naction = \"a\"\nsummary = \"s\"\n",
                "set exactly one of `action` and `summary`",
            ),
            (
                "[[inbox.policy.rate_limit]]\naction = \"a\"\nmax = 1\nwindow = \"0s\"\n",
                "inbox.policy.rate_limit[0].window",
            ),
            (
                "[[inbox.policy.rate_limit]]\naction = \"a\"\nmax = 0\nwindow = \"1h\"\n",
                "inbox.policy.rate_limit[0].max",
            ),
            (
                "[[inbox.notify]]\nurl = \"ftp://x\"\nsecret = \"0123456789abcdef\"\n",
                "inbox.notify[0].url",
            ),
            (
                "[[inbox.notify]]\nurl = \"http://x\"\nsecret = \"short\"\n",
                "inbox.notify[0].secret in ",
            ),
            (
                "[[inbox.projects]]\nname = \"p\"\nsteps = []\n",
                "inbox.projects[0].steps",
            ),
            (
                "[[inbox.projects]]\nname = \"p\"\nsteps = [{ name = \"a\", owner = \"ROBOT\" }]\n",
                "inbox.projects[0].steps[0].owner",
            ),
            (
                "[[inbox.projects]]\nname = \"p\"\nsteps = [{ name = \"a\", exits = [\"b\"] }]\n",
                "\"b\" is not one of the project's steps",
            ),
            (
                "[[inbox.projects]]\nname = \"p\"\ninitial_step = \"z\"\nsteps = [{ name = \"a\" }]\n",
                "inbox.projects[0].initial_step",
            ),
            (
                "[[inbox.projects]]\nname = \"p\"\nsteps = [{ name = \"a\" }]\n\
                 [[inbox.projects]]\nname = \"p\"\nsteps = [{ name = \"a\" }]\n",
                "project \"p\" is listed twice",
            ),
            ("[inbox]\nbogus = 1\n", "unknown field `bogus`"),
        ] {
            let err = load_error(text);
            assert!(err.contains(expect), "{text:?}: {err}");
        }
        // A short secret is never echoed.
        let err = load_error("[[inbox.notify]]\nurl = \"http://x\"\nsecret = \"hunter2\"\n");
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[test]
    fn render_shows_the_section_with_secrets_masked() {
        let (_d, home) = home_with(INBOX_TOML);
        let out = render_masked(&load(&home, &no_env).unwrap());
        assert!(out.contains("\n[inbox]\n"), "{out}");
        assert!(
            out.lines()
                .any(|l| l.starts_with("public_url = \"https://inbox.example\"")
                    && l.ends_with("# from config.toml")),
            "{out}"
        );
        assert!(
            out.lines()
                .any(|l| l.starts_with("max_upload_bytes = 26214400") && l.ends_with("# default")),
            "{out}"
        );
        assert!(
            out.contains("\n[inbox.policy]\nexpires_after = \"1h30m\" "),
            "{out}"
        );
        for (line, note) in [
            ("expires_after = \"1h30m\"", "# from config.toml"),
            ("expiry_outcome = \"REJECT\"", "# default"),
            ("always_review = [\"deploy_prod\"]", "# from config.toml"),
            ("keep_waits_on_reset = false", "# default"),
        ] {
            assert!(
                out.lines()
                    .any(|l| l.starts_with(line) && l.ends_with(note)),
                "{line}: {out}"
            );
        }
        assert_eq!(out.matches("[[inbox.policy.auto_approve]]").count(), 2);
        assert!(
            out.contains("summary = \"^Restart [a-z]+$\"\ntask = \"t1\"\n"),
            "{out}"
        );
        assert!(out.contains("max = 10\nwindow = \"1h\"\n"), "{out}");
        assert!(!out.contains("0123456789abcdef-secret"), "{out}");
        assert!(out.contains("secret = \"012…cret\"\n"), "{out}");
        assert!(out.contains(
            "steps = [{ name = \"triage\", owner = \"AGENT\", exits = [\"review\"] }, { name = \"review\", owner = \"HUMAN\" }]\n"
        ), "{out}");
    }

    #[test]
    fn render_without_a_section() {
        let (_d, home) = home_with("");
        let out = render_masked(&load(&home, &no_env).unwrap());
        assert!(out.contains("# public_url is not set"), "{out}");
        assert!(out.contains("# expires_after is not set"), "{out}");
        assert!(
            out.lines()
                .any(|l| l.starts_with("notify = []") && l.ends_with("# default")),
            "{out}"
        );
    }

    #[test]
    fn notify_debug_masks_the_secret() {
        let n = InboxNotifyConfig {
            url: "https://a:b-password@x.example/".into(),
            secret: "supersecretvalue9876".into(),
            max_attempts: 1,
            retry_base_ms: 1,
            timeout_ms: 1,
        };
        let dbg = format!("{n:?}");
        assert!(
            !dbg.contains("supersecret") && !dbg.contains("b-password"),
            "{dbg}"
        );
    }

    #[test]
    fn serialize_round_trips() {
        let config: crate::Config = toml::from_str(INBOX_TOML).unwrap();
        let text = toml::to_string(&config).unwrap();
        let back: crate::Config = toml::from_str(&text).unwrap();
        assert_eq!(back, config);
    }
}
