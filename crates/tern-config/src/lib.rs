//! Configuration for tern.
//!
//! Everything tern keeps on disk lives under one home directory, `$TERN_HOME`
//! (default `~/.tern`):
//!
//! - `config.toml` — user settings, see [`Config`];
//! - `tern.db` — the session store;
//! - `logs/` — log files;
//! - `history` — REPL line history.
//!
//! Settings are layered: built-in defaults, then `config.toml`, then the
//! environment (`OPENAI_BASE_URL`, `OPENAI_API_KEY`, `TERN_MODEL`), then
//! command-line flags. [`load`] records where each effective value came from so
//! `tern config show` ([`render_masked`]) can explain it.
//!
//! Environment access goes through a lookup function rather than
//! `std::env::var` so that tests never depend on, or mutate, the process
//! environment. Callers pass `&|k| std::env::var(k).ok()`.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod inbox;
mod sandbox;
mod ssh;
pub use inbox::{
    AutoApproveConfig, DEFAULT_MAX_UPLOAD_BYTES, EXPIRY_OUTCOMES, InboxConfig, InboxKey,
    InboxNotifyConfig, InboxPolicyConfig, InboxProjectConfig, InboxStepConfig, RateLimitConfig,
    RemoteInboxConfig, parse_duration,
};
pub use sandbox::SandboxConfig;
pub use ssh::{ProcessBackend, SshConfig};
pub use tern_sandbox::{EnvPolicy as SandboxEnv, Mode as SandboxMode};

/// Environment variable naming the tern home directory.
pub const ENV_TERN_HOME: &str = "TERN_HOME";
/// Environment variable with the OpenAI-compatible endpoint.
pub const ENV_BASE_URL: &str = "OPENAI_BASE_URL";
/// Environment variable with the API key.
pub const ENV_API_KEY: &str = "OPENAI_API_KEY";
/// Environment variable with the model name.
pub const ENV_MODEL: &str = "TERN_MODEL";
/// The agent key of a remote inbox (`[inbox] key`).
pub const ENV_INBOX_KEY: &str = "TERN_INBOX_KEY";
/// Endpoint used when only an API key is given, matching the OpenAI SDK.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

const CONFIG_FILE: &str = "config.toml";

/// Errors from locating, reading, validating or editing the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Neither an explicit home, `$TERN_HOME` nor `$HOME` is available.
    #[error(
        "cannot find the tern home directory: set TERN_HOME (or HOME, to use $HOME/.tern) or pass an explicit path"
    )]
    NoHome,

    /// A filesystem operation failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being attempted, e.g. "read".
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// `config.toml` is not valid TOML or does not match the schema
    /// (including unknown keys).
    #[error("invalid config file {}{}: {message}", path.display(), location_suffix(*line, *column))]
    Parse {
        path: PathBuf,
        /// 1-based line, when the parser could point at one.
        line: Option<usize>,
        /// 1-based column in characters, when the parser could point at one.
        column: Option<usize>,
        message: String,
    },

    /// A value is well-typed but unusable; the message names where it came
    /// from (a file key or an environment variable).
    #[error("{0}")]
    Invalid(String),

    /// The model endpoint or name is missing.
    #[error("{}", model_not_configured_message(*missing_base_url, *missing_name, config_path))]
    ModelNotConfigured {
        missing_base_url: bool,
        missing_name: bool,
        /// Where the user could set the missing values instead.
        config_path: PathBuf,
    },
}

fn location_suffix(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" at line {l}, column {c}"),
        (Some(l), None) => format!(" at line {l}"),
        _ => String::new(),
    }
}

fn model_not_configured_message(
    missing_base_url: bool,
    missing_name: bool,
    config_path: &Path,
) -> String {
    let base_url_var =
        format!("{ENV_BASE_URL} (the OpenAI-compatible endpoint, e.g. http://localhost:11434/v1)");
    let name_var = format!("{ENV_MODEL} (the model name)");
    let (vars, keys) = match (missing_base_url, missing_name) {
        (true, true) => (
            format!("{base_url_var} and {name_var}"),
            "base_url and name",
        ),
        (true, false) => (base_url_var, "base_url"),
        // Both false cannot come from `resolved_model`; say something sensible anyway.
        (false, _) => (name_var, "name"),
    };
    format!(
        "no model is configured: set {vars}, or set [model] {keys} in {}",
        config_path.display()
    )
}

/// The tern home directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    pub root: PathBuf,
}

impl Home {
    /// From an explicit path, else `$TERN_HOME`, else `$HOME/.tern`. Error if
    /// none can be found. Empty variables count as unset.
    pub fn resolve(
        explicit: Option<PathBuf>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Home, ConfigError> {
        if let Some(root) = explicit.filter(|p| !p.as_os_str().is_empty()) {
            return Ok(Home { root });
        }
        if let Some(root) = env_value(env, ENV_TERN_HOME) {
            return Ok(Home {
                root: PathBuf::from(root),
            });
        }
        if let Some(home) = env_value(env, "HOME") {
            return Ok(Home {
                root: PathBuf::from(home).join(".tern"),
            });
        }
        Err(ConfigError::NoHome)
    }

    pub fn config_path(&self) -> PathBuf {
        self.root.join(CONFIG_FILE)
    }

    pub fn db_path(&self) -> PathBuf {
        self.root.join("tern.db")
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    pub fn history_path(&self) -> PathBuf {
        self.root.join("history")
    }

    /// Creates the directory (mode 0700 on unix) if missing.
    ///
    /// The mode is restrictive because the directory holds the API key,
    /// conversation history and tool output. An existing directory's mode is
    /// left alone: the user may have chosen it deliberately.
    pub fn ensure(&self) -> Result<(), ConfigError> {
        match fs::metadata(&self.root) {
            Ok(meta) if meta.is_dir() => return Ok(()),
            Ok(_) => {
                return Err(ConfigError::Io {
                    action: "use as the tern home directory",
                    path: self.root.clone(),
                    source: io::Error::new(io::ErrorKind::AlreadyExists, "not a directory"),
                });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(ConfigError::Io {
                    action: "access",
                    path: self.root.clone(),
                    source,
                });
            }
        }
        let mut builder = fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        builder
            .create(&self.root)
            .map_err(|source| ConfigError::Io {
                action: "create directory",
                path: self.root.clone(),
                source,
            })?;
        tracing::debug!(path = %self.root.display(), "created tern home directory");
        Ok(())
    }
}

/// The contents of `config.toml`; every key is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub model: ModelConfig,
    pub agent: AgentConfig,
    pub tools: ToolsConfig,
    pub approvals: ApprovalsConfig,
    pub gateway: GatewayConfig,
    /// `[[hooks]]`: commands run on lifecycle events (see `docs/hooks.md`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<CommandHookConfig>,
    /// `[[webhooks]]`: URLs that lifecycle events are POSTed to (see `docs/hooks.md`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<WebhookConfig>,
    /// `[inbox]`: the human inbox (see [`InboxConfig`]).
    pub inbox: InboxConfig,
    /// `[processes]`: background processes the gateway runs for agents.
    pub processes: ProcessesConfig,
    /// `[sandbox]`: what the agent's commands and file tools may do.
    pub sandbox: SandboxConfig,
}

/// `[processes]`: the gateway's background processes (`terminal` with `background: true`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessesConfig {
    /// Processes running at once across the gateway; further starts are refused.
    pub max_running: usize,
    /// How long a finished process (its status and log) is kept: a duration such as
    /// `"30m"` or `"2h"`.
    pub keep_finished: String,
    /// Bytes of output kept on disk per process; older output is rotated out.
    pub log_max_bytes: u64,
    /// Where background processes run: `"local"` or `"ssh"` (on `[processes.ssh]`'s host).
    pub backend: ProcessBackend,
    /// Watch-pattern notifications per process at most one per this duration (`"30s"`);
    /// the matches in between are told together.
    pub watch_interval: String,
    /// `[processes.ssh]`: the host of `backend = "ssh"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssh: Option<SshConfig>,
}

impl Default for ProcessesConfig {
    fn default() -> Self {
        ProcessesConfig {
            max_running: 64,
            keep_finished: "30m".to_owned(),
            log_max_bytes: 64 * 1024 * 1024,
            backend: ProcessBackend::Local,
            watch_interval: "30s".to_owned(),
            ssh: None,
        }
    }
}

impl ProcessesConfig {
    /// `keep_finished` as a duration (checked when the file is loaded).
    pub fn keep_finished(&self) -> std::time::Duration {
        parse_duration(&self.keep_finished).unwrap_or(std::time::Duration::from_secs(30 * 60))
    }

    /// `watch_interval` as a duration (checked when the file is loaded).
    pub fn watch_interval(&self) -> std::time::Duration {
        parse_duration(&self.watch_interval).unwrap_or(std::time::Duration::from_secs(30))
    }
}

/// `[model]`: which OpenAI-compatible endpoint and model to talk to.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub timeout_secs: u64,
    pub max_retries: u32,
    pub stream: bool,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            base_url: None,
            api_key: None,
            name: None,
            timeout_secs: 120,
            max_retries: 3,
            stream: true,
        }
    }
}

// Hand-written so the API key never ends up in logs or panic messages.
impl fmt::Debug for ModelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_deref().map(mask_secret))
            .field("name", &self.name)
            .field("timeout_secs", &self.timeout_secs)
            .field("max_retries", &self.max_retries)
            .field("stream", &self.stream)
            .finish()
    }
}

/// `[agent]`: the agent loop.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    pub max_iterations: u32,
    pub toolsets: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            max_iterations: 60,
            toolsets: vec!["terminal".to_owned(), "file".to_owned()],
            system_prompt: None,
        }
    }
}

/// `[tools]`: limits for the built-in tools.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    pub terminal_timeout_secs: u64,
    pub terminal_max_timeout_secs: u64,
    pub output_limit_chars: usize,
    pub read_limit_bytes: usize,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            terminal_timeout_secs: 180,
            terminal_max_timeout_secs: 3600,
            output_limit_chars: 50_000,
            read_limit_bytes: 262_144,
        }
    }
}

/// `[approvals]`: commands that never need confirmation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalsConfig {
    /// Exact command lines that are always allowed.
    pub allowlist: Vec<String>,
}

/// `[gateway]`: the HTTP API server.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// `HOST:PORT` to listen on. Loopback by default: the API runs agents with tools.
    pub listen: String,
    /// Turns running at once across all sessions; further turns wait.
    pub max_concurrent_turns: usize,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// On shutdown, how long running turns get to finish before they are interrupted.
    pub drain_timeout_secs: u64,
    /// A session idle this long (a duration such as `"24h"`) is reset: finalized, with an
    /// empty successor. `"off"` (the default) never. Sessions with running background
    /// processes, open waits or a running turn are exempt.
    pub idle_reset: String,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            listen: "127.0.0.1:8642".to_owned(),
            max_concurrent_turns: 16,
            max_body_bytes: 1_048_576,
            drain_timeout_secs: 30,
            idle_reset: "off".to_owned(),
        }
    }
}

impl GatewayConfig {
    /// `idle_reset` as a duration; `None` when off (checked when the file is loaded).
    pub fn idle_reset(&self) -> Option<std::time::Duration> {
        if self.idle_reset.trim() == "off" {
            return None;
        }
        parse_duration(&self.idle_reset).ok()
    }
}

/// The lifecycle event names hooks can subscribe to, besides `"*"` (all).
///
/// A copy of `tern_hooks::EVENT_NAMES`: tern-config sits below tern-hooks and cannot depend
/// on it; a test in tern-hooks keeps the two lists equal.
pub const HOOK_EVENT_NAMES: &[&str] = &[
    "session_start",
    "session_end",
    "session_reset",
    "turn_start",
    "turn_end",
    "pre_llm_call",
    "post_llm_call",
    "pre_tool_call",
    "post_tool_call",
    "agent_loop_stopped",
    "wait_created",
    "wait_resolved",
    "process_started",
    "process_exited",
];

/// One `[[hooks]]` entry: a shell command run with the event's JSON on stdin.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CommandHookConfig {
    /// A name for logs; defaults to the command cut to 40 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Event names, or `"*"` for all.
    pub events: Vec<String>,
    /// Run with `sh -c`.
    pub command: String,
    /// After this the hook's process group is killed.
    #[serde(default = "default_hook_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_hook_timeout_ms() -> u64 {
    5000
}

/// One `[[webhooks]]` entry: a URL that events are POSTed to, signed with `secret`.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// A name for logs; defaults to the URL without its query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `http://` or `https://`.
    pub url: String,
    /// The HMAC-SHA256 key for `X-Tern-Signature`; at least 16 characters.
    pub secret: String,
    /// Event names, or `"*"` for all.
    #[serde(default = "default_webhook_events")]
    pub events: Vec<String>,
    /// Per attempt.
    #[serde(default = "default_hook_timeout_ms")]
    pub timeout_ms: u64,
    /// Attempts in all, the first included.
    #[serde(default = "default_webhook_max_attempts")]
    pub max_attempts: u32,
    /// The first retry waits this long; each next one twice as long, at most 30 s.
    #[serde(default = "default_webhook_retry_base_ms")]
    pub retry_base_ms: u64,
}

fn default_webhook_events() -> Vec<String> {
    vec!["*".to_owned()]
}

fn default_webhook_max_attempts() -> u32 {
    5
}

fn default_webhook_retry_base_ms() -> u64 {
    500
}

// Hand-written so the secret never ends up in logs or panic messages.
impl fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("name", &self.name)
            .field("url", &mask_url(&self.url))
            .field("secret", &mask_secret(&self.secret))
            .field("events", &self.events)
            .field("timeout_ms", &self.timeout_ms)
            .field("max_attempts", &self.max_attempts)
            .field("retry_base_ms", &self.retry_base_ms)
            .finish()
    }
}

/// Where an effective value came from, for `tern config show`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    File,
    Env(&'static str),
    Flag,
}

/// Every configuration key, in display order. [`Effective::sources`] has an
/// entry for each.
pub const KEYS: &[&str] = &[
    "model.base_url",
    "model.api_key",
    "model.name",
    "model.timeout_secs",
    "model.max_retries",
    "model.stream",
    "agent.max_iterations",
    "agent.toolsets",
    "agent.system_prompt",
    "tools.terminal_timeout_secs",
    "tools.terminal_max_timeout_secs",
    "tools.output_limit_chars",
    "tools.read_limit_bytes",
    "approvals.allowlist",
    "gateway.listen",
    "gateway.max_concurrent_turns",
    "gateway.max_body_bytes",
    "gateway.drain_timeout_secs",
    "inbox.public_url",
    "inbox.max_upload_bytes",
    "inbox.url",
    "inbox.key",
    "inbox.poll_interval",
    "sandbox.mode",
    "sandbox.network",
    "sandbox.writable_roots",
    "sandbox.protected_paths",
    "sandbox.env.keep",
    "sandbox.env.remove",
];

/// The configuration in force after all layers are applied.
#[derive(Debug, Clone)]
pub struct Effective {
    pub config: Config,
    /// Where each key in [`KEYS`] came from, e.g. `"model.base_url"`.
    pub sources: BTreeMap<&'static str, Source>,
    /// Whether `config.toml` existed.
    pub file_found: bool,
    /// The `config.toml` that was (or would have been) read; error messages
    /// point users at it.
    pub config_path: PathBuf,
}

impl Effective {
    /// Applies the `--model` flag, which beats every other layer. An empty
    /// name is ignored, as empty environment values are.
    pub fn set_model_flag(&mut self, name: String) {
        let name = name.trim();
        if name.is_empty() {
            return;
        }
        self.config.model.name = Some(name.to_owned());
        self.sources.insert("model.name", Source::Flag);
    }

    /// [`Config::resolved_model`] with the path this configuration was loaded from.
    pub fn resolved_model(&self) -> Result<ResolvedModel, ConfigError> {
        self.config.resolved_model_at(&self.config_path)
    }

    /// Where `key` came from; `Default` for keys not recorded.
    pub fn source(&self, key: &str) -> Source {
        self.sources.get(key).cloned().unwrap_or(Source::Default)
    }
}

/// Model settings checked for use.
#[derive(Clone, PartialEq, Eq)]
pub struct ResolvedModel {
    /// Without a trailing slash.
    pub base_url: String,
    pub api_key: Option<String>,
    pub name: String,
    pub timeout_secs: u64,
    pub max_retries: u32,
    pub stream: bool,
}

// Hand-written so the API key never ends up in logs or panic messages.
impl fmt::Debug for ResolvedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedModel")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_deref().map(mask_secret))
            .field("name", &self.name)
            .field("timeout_secs", &self.timeout_secs)
            .field("max_retries", &self.max_retries)
            .field("stream", &self.stream)
            .finish()
    }
}

impl Config {
    /// Checks that a model endpoint and name are configured. The error tells
    /// which environment variables to set, or which keys in `home`'s
    /// `config.toml`.
    pub fn resolved_model(&self, home: &Home) -> Result<ResolvedModel, ConfigError> {
        self.resolved_model_at(&home.config_path())
    }

    fn resolved_model_at(&self, config_path: &Path) -> Result<ResolvedModel, ConfigError> {
        let m = &self.model;
        let base_url = non_empty(m.base_url.as_deref()).map(|u| u.trim_end_matches('/'));
        let name = non_empty(m.name.as_deref());
        match (base_url, name) {
            (Some(base_url), Some(name)) => Ok(ResolvedModel {
                base_url: base_url.to_owned(),
                api_key: non_empty(m.api_key.as_deref()).map(str::to_owned),
                name: name.to_owned(),
                timeout_secs: m.timeout_secs,
                max_retries: m.max_retries,
                stream: m.stream,
            }),
            (base_url, name) => Err(ConfigError::ModelNotConfigured {
                missing_base_url: base_url.is_none(),
                missing_name: name.is_none(),
                config_path: config_path.to_owned(),
            }),
        }
    }
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.map(str::trim).filter(|s| !s.is_empty())
}

/// Reads `key` through `env`, treating empty or blank values as unset:
/// `FOO= tern` is a common way to "unset" a variable for one command.
fn env_value(env: &dyn Fn(&str) -> Option<String>, key: &str) -> Option<String> {
    env(key)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// Loads `config.toml` (a missing file means defaults), then applies the
/// environment: `OPENAI_BASE_URL`, `OPENAI_API_KEY` and `TERN_MODEL` win over
/// the file; empty values are ignored. If an API key is set but no base URL
/// anywhere, the base URL defaults to `https://api.openai.com/v1`, like the
/// OpenAI SDK. The result is validated.
pub fn load(home: &Home, env: &dyn Fn(&str) -> Option<String>) -> Result<Effective, ConfigError> {
    let config_path = home.config_path();
    let (mut config, present, file_found) = match fs::read_to_string(&config_path) {
        Ok(text) => {
            let (config, present) = parse_config(&text, &config_path)?;
            tracing::debug!(path = %config_path.display(), "loaded config file");
            (config, present, true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            tracing::debug!(path = %config_path.display(), "no config file; using defaults");
            (Config::default(), Vec::new(), false)
        }
        Err(source) => {
            return Err(ConfigError::Io {
                action: "read",
                path: config_path,
                source,
            });
        }
    };

    // An empty string in the file means "not set", consistent with the environment.
    for field in [
        &mut config.model.base_url,
        &mut config.model.api_key,
        &mut config.model.name,
    ] {
        if field.as_deref().is_some_and(|s| s.trim().is_empty()) {
            *field = None;
        }
    }

    // A blank hook name means "not set", so logs fall back to the command or URL.
    for name in config
        .hooks
        .iter_mut()
        .map(|h| &mut h.name)
        .chain(config.webhooks.iter_mut().map(|h| &mut h.name))
    {
        if name.as_deref().is_some_and(|s| s.trim().is_empty()) {
            *name = None;
        }
    }

    if let Some(url) = &mut config.inbox.public_url {
        let trimmed = url.trim().trim_end_matches('/');
        if trimmed.is_empty() {
            config.inbox.public_url = None;
        } else if trimmed.len() != url.len() {
            *url = trimmed.to_owned();
        }
    }

    if let Some(url) = &mut config.inbox.url {
        let trimmed = url.trim().trim_end_matches('/');
        if trimmed.is_empty() {
            config.inbox.url = None;
        } else if trimmed.len() != url.len() {
            *url = trimmed.to_owned();
        }
    }
    if config
        .inbox
        .key
        .as_ref()
        .is_some_and(|k| k.expose().trim().is_empty())
    {
        config.inbox.key = None;
    }

    let mut sources: BTreeMap<&'static str, Source> = KEYS
        .iter()
        .map(|&k| {
            let source = if present.contains(&k) {
                Source::File
            } else {
                Source::Default
            };
            (k, source)
        })
        .collect();
    for key in [
        "model.base_url",
        "model.api_key",
        "model.name",
        "inbox.public_url",
        "inbox.url",
        "inbox.key",
    ] {
        if value_is_none(&config, key) {
            sources.insert(key, Source::Default);
        }
    }

    warn_if_key_readable(&config, &config_path);

    for (var, key, field) in [
        (ENV_BASE_URL, "model.base_url", &mut config.model.base_url),
        (ENV_API_KEY, "model.api_key", &mut config.model.api_key),
        (ENV_MODEL, "model.name", &mut config.model.name),
    ] {
        if let Some(value) = env_value(env, var) {
            tracing::debug!(variable = var, "environment overrides {key}");
            *field = Some(value);
            sources.insert(key, Source::Env(var));
        }
    }

    if let Some(key) = env_value(env, ENV_INBOX_KEY) {
        tracing::debug!(variable = ENV_INBOX_KEY, "environment overrides inbox.key");
        config.inbox.key = Some(InboxKey(key));
        sources.insert("inbox.key", Source::Env(ENV_INBOX_KEY));
    }

    if config.model.api_key.is_some() && config.model.base_url.is_none() {
        config.model.base_url = Some(OPENAI_DEFAULT_BASE_URL.to_owned());
        sources.insert("model.base_url", Source::Default);
    }

    if let Some(url) = &mut config.model.base_url {
        let trimmed = url.trim().trim_end_matches('/');
        if trimmed.len() != url.len() {
            *url = trimmed.to_owned();
        }
    }

    let eff = Effective {
        config,
        sources,
        file_found,
        config_path,
    };
    validate(&eff)?;
    Ok(eff)
}

fn value_is_none(config: &Config, key: &str) -> bool {
    match key {
        "model.base_url" => config.model.base_url.is_none(),
        "model.api_key" => config.model.api_key.is_none(),
        "model.name" => config.model.name.is_none(),
        "agent.system_prompt" => config.agent.system_prompt.is_none(),
        "inbox.public_url" => config.inbox.public_url.is_none(),
        "inbox.url" => config.inbox.url.is_none(),
        "inbox.key" => config.inbox.key.is_none(),
        _ => false,
    }
}

/// Parses the file text into a [`Config`] plus the list of [`KEYS`] that the
/// file sets explicitly (so sources can tell "from file" from "default").
fn parse_config(text: &str, path: &Path) -> Result<(Config, Vec<&'static str>), ConfigError> {
    let config: Config = toml::from_str(text).map_err(|e| {
        let (line, column) = e.span().map(|span| line_column(text, span.start)).unzip();
        ConfigError::Parse {
            path: path.to_owned(),
            line,
            column,
            message: e.message().trim().to_owned(),
        }
    })?;
    // The text already deserialized into `Config`, so it is valid TOML; if this
    // second parse failed anyway we would merely report every key as a default.
    let table: toml::Table = toml::from_str(text).unwrap_or_default();
    let present = KEYS
        .iter()
        .copied()
        .filter(|key| {
            // `sandbox.env.keep`: every part but the last names a table.
            let mut parts: Vec<&str> = key.split('.').collect();
            let Some(field) = parts.pop() else {
                return false;
            };
            parts
                .iter()
                .try_fold(&table, |t, part| t.get(*part).and_then(|v| v.as_table()))
                .is_some_and(|t| t.contains_key(field))
        })
        .collect();
    Ok((config, present))
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(unix)]
fn warn_if_key_readable(config: &Config, path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if config.model.api_key.is_none() && config.inbox.key.is_none() {
        return;
    }
    if let Ok(meta) = fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            path = %path.display(),
            "config file contains an API key and is readable by other users; consider chmod 600"
        );
    }
}

#[cfg(not(unix))]
fn warn_if_key_readable(_config: &Config, _path: &Path) {}

/// Describes where `key` came from, for error messages.
fn origin(eff: &Effective, key: &str) -> String {
    match eff.source(key) {
        Source::Env(var) => var.to_owned(),
        Source::File => format!("{key} in {}", eff.config_path.display()),
        Source::Flag => format!("{key} (from the command line)"),
        Source::Default => format!("{key} (default)"),
    }
}

/// Describes entry `index` of an array of tables (`[[hooks]]`, `[[webhooks]]`) and one of
/// its fields, for error messages. Those entries only ever come from the file.
fn entry_origin(eff: &Effective, array: &str, index: usize, field: &str) -> String {
    format!("{array}[{index}].{field} in {}", eff.config_path.display())
}

/// Whether `url` starts with `http://` or `https://` (any case) and has something after it.
fn is_http_url(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
        .is_some_and(|rest| !rest.is_empty())
}

/// Whether `addr` looks like `HOST:PORT` (`[::1]:PORT` for IPv6). Host names are allowed,
/// so this is not a full parse; binding reports anything subtler.
fn is_host_port(addr: &str) -> bool {
    match addr.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok(),
        None => false,
    }
}

/// Checks a subscriber's `events`: not empty, each a known event name or `"*"`.
fn validate_events(
    eff: &Effective,
    array: &str,
    index: usize,
    events: &[String],
) -> Result<(), ConfigError> {
    if events.is_empty() {
        return Err(ConfigError::Invalid(format!(
            "{} must not be empty: list event names, or \"*\" for all",
            entry_origin(eff, array, index, "events")
        )));
    }
    if let Some(bad) = events
        .iter()
        .find(|e| e.as_str() != "*" && !HOOK_EVENT_NAMES.contains(&e.as_str()))
    {
        return Err(ConfigError::Invalid(format!(
            "{}: unknown event {bad:?} (known: {}; or \"*\" for all)",
            entry_origin(eff, array, index, "events"),
            HOOK_EVENT_NAMES.join(", ")
        )));
    }
    Ok(())
}

fn validate_hooks(eff: &Effective) -> Result<(), ConfigError> {
    for (i, hook) in eff.config.hooks.iter().enumerate() {
        validate_events(eff, "hooks", i, &hook.events)?;
        if hook.command.trim().is_empty() {
            return Err(ConfigError::Invalid(format!(
                "{} must not be empty",
                entry_origin(eff, "hooks", i, "command")
            )));
        }
        if hook.timeout_ms < 1 {
            return Err(ConfigError::Invalid(format!(
                "{} must be at least 1 (got 0)",
                entry_origin(eff, "hooks", i, "timeout_ms")
            )));
        }
    }
    for (i, hook) in eff.config.webhooks.iter().enumerate() {
        if !is_http_url(hook.url.trim()) {
            return Err(ConfigError::Invalid(format!(
                "{} is not a URL: {:?} (it must start with http:// or https://)",
                entry_origin(eff, "webhooks", i, "url"),
                mask_url(&hook.url)
            )));
        }
        let secret_len = hook.secret.chars().count();
        if secret_len < 16 {
            // Never echo the secret itself, not even a short one.
            return Err(ConfigError::Invalid(format!(
                "{} is too short: it must have at least 16 characters (got {secret_len})",
                entry_origin(eff, "webhooks", i, "secret")
            )));
        }
        validate_events(eff, "webhooks", i, &hook.events)?;
        for (field, value) in [
            ("timeout_ms", hook.timeout_ms),
            ("max_attempts", u64::from(hook.max_attempts)),
            ("retry_base_ms", hook.retry_base_ms),
        ] {
            if value < 1 {
                return Err(ConfigError::Invalid(format!(
                    "{} must be at least 1 (got 0)",
                    entry_origin(eff, "webhooks", i, field)
                )));
            }
        }
    }
    Ok(())
}

fn validate(eff: &Effective) -> Result<(), ConfigError> {
    let c = &eff.config;
    if let Some(url) = &c.model.base_url
        && !is_http_url(url)
    {
        return Err(ConfigError::Invalid(format!(
            "{} is not a URL: {:?} (it must start with http:// or https://, e.g. http://localhost:11434/v1)",
            origin(eff, "model.base_url"),
            url
        )));
    }
    let at_least_one: [(&str, u64); 7] = [
        ("model.timeout_secs", c.model.timeout_secs),
        ("agent.max_iterations", u64::from(c.agent.max_iterations)),
        ("tools.terminal_timeout_secs", c.tools.terminal_timeout_secs),
        (
            "tools.terminal_max_timeout_secs",
            c.tools.terminal_max_timeout_secs,
        ),
        // usize always fits in u64 on supported targets; saturate rather than panic.
        (
            "tools.output_limit_chars",
            u64::try_from(c.tools.output_limit_chars).unwrap_or(u64::MAX),
        ),
        (
            "tools.read_limit_bytes",
            u64::try_from(c.tools.read_limit_bytes).unwrap_or(u64::MAX),
        ),
        (
            "gateway.max_concurrent_turns",
            u64::try_from(c.gateway.max_concurrent_turns).unwrap_or(u64::MAX),
        ),
    ];
    for (key, value) in at_least_one {
        if value < 1 {
            return Err(ConfigError::Invalid(format!(
                "{} must be at least 1 (got {value})",
                origin(eff, key)
            )));
        }
    }
    if c.tools.terminal_timeout_secs > c.tools.terminal_max_timeout_secs {
        return Err(ConfigError::Invalid(format!(
            "{} ({}) must not exceed tools.terminal_max_timeout_secs ({})",
            origin(eff, "tools.terminal_timeout_secs"),
            c.tools.terminal_timeout_secs,
            c.tools.terminal_max_timeout_secs
        )));
    }
    if !is_host_port(c.gateway.listen.trim()) {
        return Err(ConfigError::Invalid(format!(
            "{} is not HOST:PORT: {:?} (e.g. 127.0.0.1:8642)",
            origin(eff, "gateway.listen"),
            c.gateway.listen
        )));
    }
    if c.gateway.max_body_bytes < 1024 {
        return Err(ConfigError::Invalid(format!(
            "{} must be at least 1024 (got {})",
            origin(eff, "gateway.max_body_bytes"),
            c.gateway.max_body_bytes
        )));
    }
    if c.gateway.idle_reset.trim() != "off"
        && let Err(e) = parse_duration(&c.gateway.idle_reset)
    {
        return Err(ConfigError::Invalid(format!(
            "gateway.idle_reset in {}: {e} (or \"off\")",
            eff.config_path.display()
        )));
    }
    let p = &c.processes;
    if p.max_running < 1 || p.log_max_bytes < 4096 {
        return Err(ConfigError::Invalid(format!(
            "in [processes] of {}: max_running must be at least 1 and log_max_bytes at least 4096",
            eff.config_path.display()
        )));
    }
    for (name, value) in [
        ("keep_finished", &p.keep_finished),
        ("watch_interval", &p.watch_interval),
    ] {
        if let Err(e) = parse_duration(value) {
            return Err(ConfigError::Invalid(format!(
                "processes.{name} in {}: {e}",
                eff.config_path.display()
            )));
        }
    }
    ssh::validate_backend(p.backend, p.ssh.as_ref(), &eff.config_path)?;
    sandbox::validate_sandbox(&c.sandbox, &eff.config_path)?;
    validate_hooks(eff)?;
    inbox::validate_inbox(&c.inbox, &eff.config_path)
}

/// Masks a secret for display: the first 3 and last 4 characters of secrets
/// of 12 or more characters, e.g. `sk-…wxyz`; otherwise `****`, since showing
/// 7 characters of a short secret would reveal most of it.
pub fn mask_secret(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() >= 12 {
        let head: String = chars[..3].iter().collect();
        let tail: String = chars[chars.len() - 4..].iter().collect();
        format!("{head}…{tail}")
    } else {
        "****".to_owned()
    }
}

/// Masks the password of a URL's `user:password@` part, if any, for display.
pub fn mask_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => match authority[..at].find(':') {
            Some(colon) => format!(
                "{}{}:****{}",
                &url[..scheme_end],
                &authority[..colon],
                &rest[at..]
            ),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// A key and its rendered value; `None` when unset.
type RenderedValue = (&'static str, Option<String>);

/// Renders the effective configuration as TOML-like text with secrets masked
/// and each value annotated with its source, e.g.
/// `base_url = "http://localhost:11434/v1"   # from OPENAI_BASE_URL`.
pub fn render_masked(eff: &Effective) -> String {
    let c = &eff.config;
    let mut out = String::new();
    if eff.file_found {
        out.push_str(&format!("# config file: {}\n", eff.config_path.display()));
    } else {
        out.push_str(&format!(
            "# config file: {} (not found; using defaults)\n",
            eff.config_path.display()
        ));
    }

    let opt = |v: &Option<String>| v.as_deref().map(quote);
    let paths = |v: &[String]| quote_array(v);
    let sections: [(&str, Vec<RenderedValue>); 7] = [
        (
            "model",
            vec![
                ("model.base_url", opt(&c.model.base_url)),
                (
                    "model.api_key",
                    c.model.api_key.as_deref().map(|k| quote(&mask_secret(k))),
                ),
                ("model.name", opt(&c.model.name)),
                ("model.timeout_secs", Some(c.model.timeout_secs.to_string())),
                ("model.max_retries", Some(c.model.max_retries.to_string())),
                ("model.stream", Some(c.model.stream.to_string())),
            ],
        ),
        (
            "agent",
            vec![
                (
                    "agent.max_iterations",
                    Some(c.agent.max_iterations.to_string()),
                ),
                ("agent.toolsets", Some(quote_array(&c.agent.toolsets))),
                ("agent.system_prompt", opt(&c.agent.system_prompt)),
            ],
        ),
        (
            "tools",
            vec![
                (
                    "tools.terminal_timeout_secs",
                    Some(c.tools.terminal_timeout_secs.to_string()),
                ),
                (
                    "tools.terminal_max_timeout_secs",
                    Some(c.tools.terminal_max_timeout_secs.to_string()),
                ),
                (
                    "tools.output_limit_chars",
                    Some(c.tools.output_limit_chars.to_string()),
                ),
                (
                    "tools.read_limit_bytes",
                    Some(c.tools.read_limit_bytes.to_string()),
                ),
            ],
        ),
        (
            "approvals",
            vec![(
                "approvals.allowlist",
                Some(quote_array(&c.approvals.allowlist)),
            )],
        ),
        (
            "gateway",
            vec![
                ("gateway.listen", Some(quote(&c.gateway.listen))),
                (
                    "gateway.max_concurrent_turns",
                    Some(c.gateway.max_concurrent_turns.to_string()),
                ),
                (
                    "gateway.max_body_bytes",
                    Some(c.gateway.max_body_bytes.to_string()),
                ),
                (
                    "gateway.drain_timeout_secs",
                    Some(c.gateway.drain_timeout_secs.to_string()),
                ),
            ],
        ),
        (
            "inbox",
            vec![
                ("inbox.public_url", opt(&c.inbox.public_url)),
                (
                    "inbox.max_upload_bytes",
                    Some(c.inbox.max_upload_bytes.to_string()),
                ),
                (
                    "inbox.url",
                    c.inbox.url.as_deref().map(|u| quote(&mask_url(u))),
                ),
                (
                    "inbox.key",
                    c.inbox
                        .key
                        .as_ref()
                        .map(|k| quote(&mask_secret(k.expose()))),
                ),
                ("inbox.poll_interval", Some(quote(&c.inbox.poll_interval))),
            ],
        ),
        (
            "sandbox",
            vec![
                ("sandbox.mode", Some(quote(c.sandbox.mode.as_str()))),
                ("sandbox.network", Some(c.sandbox.network().to_string())),
                (
                    "sandbox.writable_roots",
                    Some(paths(&c.sandbox.writable_roots)),
                ),
                (
                    "sandbox.protected_paths",
                    Some(paths(&c.sandbox.protected_paths)),
                ),
                ("sandbox.env.keep", Some(paths(&c.sandbox.env.keep))),
                ("sandbox.env.remove", Some(paths(&c.sandbox.env.remove))),
            ],
        ),
    ];

    for (name, entries) in sections {
        out.push_str(&format!("\n[{name}]\n"));
        let lines: Vec<(String, String)> = entries
            .into_iter()
            .map(|(key, value)| {
                let field = key
                    .strip_prefix(name)
                    .and_then(|k| k.strip_prefix('.'))
                    .unwrap_or(key);
                let text = match value {
                    Some(v) => format!("{field} = {v}"),
                    None => format!("# {field} is not set"),
                };
                let note = match eff.source(key) {
                    Source::Default => "default".to_owned(),
                    Source::File => format!("from {CONFIG_FILE}"),
                    Source::Env(var) => format!("from {var}"),
                    Source::Flag if key == "model.name" => "from --model".to_owned(),
                    Source::Flag => "from the command line".to_owned(),
                };
                (text, note)
            })
            .collect();
        let width = lines
            .iter()
            .map(|(t, _)| t.chars().count())
            .max()
            .unwrap_or(0);
        for (text, note) in lines {
            let pad = width - text.chars().count();
            out.push_str(&format!("{text}{:pad$}   # {note}\n", ""));
        }
    }
    inbox::render_inbox_tables(&c.inbox, CONFIG_FILE, &mut out);
    render_subscribers(c, &mut out);
    out
}

/// Renders `[[hooks]]` and `[[webhooks]]` with their effective values (defaults filled in),
/// webhook secrets masked. Entries only come from the file, so there are no per-key sources.
fn render_subscribers(c: &Config, out: &mut String) {
    let opt_name = |name: &Option<String>| match name {
        Some(n) => format!("name = {}\n", quote(n)),
        None => String::new(),
    };
    if c.hooks.is_empty() {
        out.push_str("\n# no [[hooks]] configured\n");
    }
    for hook in &c.hooks {
        out.push_str(&format!("\n[[hooks]]   # from {CONFIG_FILE}\n"));
        out.push_str(&opt_name(&hook.name));
        out.push_str(&format!("events = {}\n", quote_array(&hook.events)));
        out.push_str(&format!("command = {}\n", quote(&hook.command)));
        out.push_str(&format!("timeout_ms = {}\n", hook.timeout_ms));
    }
    if c.webhooks.is_empty() {
        out.push_str("\n# no [[webhooks]] configured\n");
    }
    for hook in &c.webhooks {
        out.push_str(&format!("\n[[webhooks]]   # from {CONFIG_FILE}\n"));
        out.push_str(&opt_name(&hook.name));
        out.push_str(&format!("url = {}\n", quote(&mask_url(&hook.url))));
        out.push_str(&format!("secret = {}\n", quote(&mask_secret(&hook.secret))));
        out.push_str(&format!("events = {}\n", quote_array(&hook.events)));
        out.push_str(&format!("timeout_ms = {}\n", hook.timeout_ms));
        out.push_str(&format!("max_attempts = {}\n", hook.max_attempts));
        out.push_str(&format!("retry_base_ms = {}\n", hook.retry_base_ms));
    }
}

/// A TOML basic string; always one line, unlike a multi-line string literal,
/// so the source annotation can follow it.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn quote_array(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| quote(s)).collect();
    format!("[{}]", inner.join(", "))
}

/// Appends an exact command to `[approvals] allowlist` in `config.toml`,
/// keeping the file's existing formatting and comments and creating the
/// file, table or array as needed. Does nothing if the command is already
/// there. The file is replaced atomically with mode 0600, since it may hold an
/// API key.
pub fn add_to_allowlist(home: &Home, command: &str) -> Result<(), ConfigError> {
    if command.trim().is_empty() {
        return Err(ConfigError::Invalid(
            "cannot add an empty command to the approvals allowlist".to_owned(),
        ));
    }
    home.ensure()?;
    let path = home.config_path();
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(source) => {
            return Err(ConfigError::Io {
                action: "read",
                path,
                source,
            });
        }
    };
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        let (line, column) = e.span().map(|s| line_column(&text, s.start)).unzip();
        ConfigError::Parse {
            path: path.clone(),
            line,
            column,
            message: e.message().trim().to_owned(),
        }
    })?;

    let approvals = doc
        .entry("approvals")
        .or_insert(toml_edit::table())
        .as_table_like_mut()
        .ok_or_else(|| ConfigError::Parse {
            path: path.clone(),
            line: None,
            column: None,
            message: "`approvals` must be a table".to_owned(),
        })?;
    let allowlist = approvals
        .entry("allowlist")
        .or_insert(toml_edit::value(toml_edit::Array::new()))
        .as_array_mut()
        .ok_or_else(|| ConfigError::Parse {
            path: path.clone(),
            line: None,
            column: None,
            message: "`approvals.allowlist` must be an array of strings".to_owned(),
        })?;
    if allowlist.iter().any(|v| v.as_str() == Some(command)) {
        tracing::debug!(command, "command already in the approvals allowlist");
        return Ok(());
    }
    // Copy the previous element's indentation so one-per-line arrays stay
    // one-per-line, but not any comment in that prefix: toml_edit attaches a
    // comment after `"a",` to the next element's prefix.
    let prefix = allowlist
        .iter()
        .last()
        .and_then(|v| v.decor().prefix())
        .and_then(|p| p.as_str())
        .map(|p| match p.rfind('\n') {
            Some(i) => p[i..].to_owned(),
            None => p.to_owned(),
        });
    let mut value = toml_edit::Value::from(command);
    if let Some(prefix) = prefix {
        value.decor_mut().set_prefix(prefix);
    }
    allowlist.push_formatted(value);

    write_atomic(&path, doc.to_string().as_bytes())?;
    tracing::info!(command, path = %path.display(), "added command to the approvals allowlist");
    Ok(())
}

/// Writes `contents` to `path` via a temporary file in the same directory and
/// a rename, so a crash never leaves a truncated config behind.
fn write_atomic(path: &Path, contents: &[u8]) -> Result<(), ConfigError> {
    // Write through a symlinked config (e.g. one kept in a dotfiles repo)
    // instead of replacing the link with a regular file.
    let target = match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
        }
        _ => path.to_owned(),
    };
    let dir = target
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file_name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| CONFIG_FILE.to_owned());

    let io_err = |action: &'static str, path: &Path| {
        let path = path.to_owned();
        move |source| ConfigError::Io {
            action,
            path,
            source,
        }
    };

    let mut attempt = 0u32;
    let (tmp_path, mut file) = loop {
        let tmp_path = dir.join(format!(".{file_name}.tmp-{}-{attempt}", std::process::id()));
        let mut options = fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        match options.open(&tmp_path) {
            Ok(file) => break (tmp_path, file),
            // A stale temp file from a crashed run; pick another name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 100 => attempt += 1,
            Err(source) => return Err(io_err("create", &tmp_path)(source)),
        }
    };

    let result = (|| {
        file.write_all(contents)
            .map_err(io_err("write", &tmp_path))?;
        file.sync_all().map_err(io_err("write", &tmp_path))?;
        drop(file);
        fs::rename(&tmp_path, &target).map_err(io_err("replace", &target))
    })();
    if result.is_err() {
        // Best effort: the original error is what matters to the user.
        let _ = fs::remove_file(&tmp_path);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn temp_home() -> (tempfile::TempDir, Home) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            root: dir.path().join("home"),
        };
        home.ensure().unwrap();
        (dir, home)
    }

    fn write_config(home: &Home, text: &str) {
        fs::write(home.config_path(), text).unwrap();
    }

    // ---- Home ----

    #[test]
    fn home_explicit_beats_env() {
        let env = env_of(&[("TERN_HOME", "/from/env"), ("HOME", "/users/me")]);
        let home = Home::resolve(Some(PathBuf::from("/explicit")), &env).unwrap();
        assert_eq!(home.root, PathBuf::from("/explicit"));
    }

    #[test]
    fn home_tern_home_beats_home() {
        let env = env_of(&[("TERN_HOME", "/from/env"), ("HOME", "/users/me")]);
        let home = Home::resolve(None, &env).unwrap();
        assert_eq!(home.root, PathBuf::from("/from/env"));
    }

    #[test]
    fn home_falls_back_to_dot_tern() {
        let env = env_of(&[("HOME", "/users/me")]);
        let home = Home::resolve(None, &env).unwrap();
        assert_eq!(home.root, PathBuf::from("/users/me/.tern"));

        let env = env_of(&[("TERN_HOME", ""), ("HOME", "/users/me")]);
        let home = Home::resolve(None, &env).unwrap();
        assert_eq!(home.root, PathBuf::from("/users/me/.tern"));
    }

    #[test]
    fn home_error_when_nothing_set() {
        let err = Home::resolve(None, &no_env).unwrap_err();
        assert!(matches!(err, ConfigError::NoHome));
        assert!(err.to_string().contains("TERN_HOME"));
        let err = Home::resolve(None, &env_of(&[("HOME", "")])).unwrap_err();
        assert!(matches!(err, ConfigError::NoHome));
    }

    #[test]
    fn home_paths() {
        let home = Home {
            root: PathBuf::from("/h"),
        };
        assert_eq!(home.config_path(), PathBuf::from("/h/config.toml"));
        assert_eq!(home.db_path(), PathBuf::from("/h/tern.db"));
        assert_eq!(home.logs_dir(), PathBuf::from("/h/logs"));
        assert_eq!(home.history_path(), PathBuf::from("/h/history"));
    }

    #[test]
    fn ensure_creates_private_dir_and_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            root: dir.path().join("a/b/.tern"),
        };
        home.ensure().unwrap();
        assert!(home.root.is_dir());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&home.root).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700);
        }
        home.ensure().unwrap();
    }

    #[test]
    fn ensure_rejects_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("file");
        fs::write(&root, "x").unwrap();
        let err = Home { root: root.clone() }.ensure().unwrap_err();
        assert!(err.to_string().contains(&root.display().to_string()));
    }

    // ---- load ----

    #[test]
    fn defaults_without_file() {
        let (_d, home) = temp_home();
        let eff = load(&home, &no_env).unwrap();
        assert!(!eff.file_found);
        assert_eq!(eff.config, Config::default());
        let c = &eff.config;
        assert_eq!(c.model.base_url, None);
        assert_eq!(c.model.api_key, None);
        assert_eq!(c.model.name, None);
        assert_eq!(c.model.timeout_secs, 120);
        assert_eq!(c.model.max_retries, 3);
        assert!(c.model.stream);
        assert_eq!(c.agent.max_iterations, 60);
        assert_eq!(c.agent.toolsets, vec!["terminal", "file"]);
        assert_eq!(c.agent.system_prompt, None);
        assert_eq!(c.tools.terminal_timeout_secs, 180);
        assert_eq!(c.tools.terminal_max_timeout_secs, 3600);
        assert_eq!(c.tools.output_limit_chars, 50_000);
        assert_eq!(c.tools.read_limit_bytes, 262_144);
        assert!(c.approvals.allowlist.is_empty());
        assert_eq!(c.gateway.listen, "127.0.0.1:8642");
        assert_eq!(c.gateway.max_concurrent_turns, 16);
        assert_eq!(c.gateway.max_body_bytes, 1_048_576);
        assert_eq!(c.gateway.drain_timeout_secs, 30);
        assert!(c.hooks.is_empty());
        assert!(c.webhooks.is_empty());
        assert_eq!(eff.sources.len(), KEYS.len());
        assert!(eff.sources.values().all(|s| *s == Source::Default));
        assert_eq!(eff.config_path, home.config_path());
    }

    #[test]
    fn defaults_when_home_dir_missing() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            root: dir.path().join("nope"),
        };
        let eff = load(&home, &no_env).unwrap();
        assert!(!eff.file_found);
    }

    #[test]
    fn file_values() {
        let (_d, home) = temp_home();
        write_config(
            &home,
            r#"
# my config
[model]
base_url = "http://localhost:11434/v1/"
api_key = "sk-file-0123456789"
name = "llama3"
timeout_secs = 30
max_retries = 0
stream = false

[agent]
max_iterations = 5
toolsets = ["terminal"]
system_prompt = "be brief"

[tools]
terminal_timeout_secs = 10
terminal_max_timeout_secs = 20
output_limit_chars = 100
read_limit_bytes = 200

[approvals]
allowlist = ["ls", "git status"]

[gateway]
listen = "0.0.0.0:9000"
max_concurrent_turns = 2
max_body_bytes = 4096
drain_timeout_secs = 0

[inbox]
public_url = "https://inbox.example/"
max_upload_bytes = 1000
url = "http://127.0.0.1:7000/"
key = "tern-inbox-key-0123456789"
poll_interval = "10s"

[sandbox]
mode = "read-only"
network = true
writable_roots = ["/srv/out"]
protected_paths = ["/srv/keys"]
env.keep = ["GITHUB_TOKEN"]
env.remove = ["AWS_*"]
"#,
        );
        let eff = load(&home, &no_env).unwrap();
        assert!(eff.file_found);
        let c = &eff.config;
        // Trailing slash stripped.
        assert_eq!(
            c.model.base_url.as_deref(),
            Some("http://localhost:11434/v1")
        );
        assert_eq!(c.model.api_key.as_deref(), Some("sk-file-0123456789"));
        assert_eq!(c.model.name.as_deref(), Some("llama3"));
        assert_eq!(c.model.timeout_secs, 30);
        assert_eq!(c.model.max_retries, 0);
        assert!(!c.model.stream);
        assert_eq!(c.agent.max_iterations, 5);
        assert_eq!(c.agent.toolsets, vec!["terminal"]);
        assert_eq!(c.agent.system_prompt.as_deref(), Some("be brief"));
        assert_eq!(c.tools.terminal_timeout_secs, 10);
        assert_eq!(c.tools.terminal_max_timeout_secs, 20);
        assert_eq!(c.tools.output_limit_chars, 100);
        assert_eq!(c.tools.read_limit_bytes, 200);
        assert_eq!(c.approvals.allowlist, vec!["ls", "git status"]);
        assert_eq!(
            c.gateway,
            GatewayConfig {
                listen: "0.0.0.0:9000".to_owned(),
                max_concurrent_turns: 2,
                max_body_bytes: 4096,
                drain_timeout_secs: 0,
                idle_reset: "off".to_owned(),
            }
        );
        // Trailing slash stripped.
        assert_eq!(c.inbox.public_url.as_deref(), Some("https://inbox.example"));
        assert_eq!(c.inbox.max_upload_bytes, 1000);
        let remote = c.inbox.remote().unwrap().unwrap();
        assert_eq!(remote.url, "http://127.0.0.1:7000");
        assert_eq!(remote.key, "tern-inbox-key-0123456789");
        assert_eq!(remote.poll_interval, std::time::Duration::from_secs(10));
        assert!(eff.sources.values().all(|s| *s == Source::File));
    }

    #[test]
    fn partial_file_keeps_other_defaults() {
        let (_d, home) = temp_home();
        write_config(&home, "[model]\nname = \"m\"\n");
        let eff = load(&home, &no_env).unwrap();
        assert_eq!(eff.config.model.name.as_deref(), Some("m"));
        assert_eq!(eff.config.model.timeout_secs, 120);
        assert_eq!(eff.config.agent, AgentConfig::default());
        assert_eq!(eff.source("model.name"), Source::File);
        assert_eq!(eff.source("model.timeout_secs"), Source::Default);
        assert_eq!(eff.source("model.base_url"), Source::Default);
    }

    #[test]
    fn env_beats_file() {
        let (_d, home) = temp_home();
        write_config(
            &home,
            "[model]\nbase_url = \"http://file/v1\"\napi_key = \"file-key\"\nname = \"file-model\"\n",
        );
        let env = env_of(&[
            ("OPENAI_BASE_URL", "https://env.example/v1/"),
            ("OPENAI_API_KEY", "env-key"),
            ("TERN_MODEL", "env-model"),
        ]);
        let eff = load(&home, &env).unwrap();
        let m = &eff.config.model;
        assert_eq!(m.base_url.as_deref(), Some("https://env.example/v1"));
        assert_eq!(m.api_key.as_deref(), Some("env-key"));
        assert_eq!(m.name.as_deref(), Some("env-model"));
        assert_eq!(eff.source("model.base_url"), Source::Env("OPENAI_BASE_URL"));
        assert_eq!(eff.source("model.api_key"), Source::Env("OPENAI_API_KEY"));
        assert_eq!(eff.source("model.name"), Source::Env("TERN_MODEL"));
    }

    #[test]
    fn empty_env_ignored() {
        let (_d, home) = temp_home();
        write_config(
            &home,
            "[model]\nbase_url = \"http://file/v1\"\nname = \"file-model\"\n",
        );
        let env = env_of(&[
            ("OPENAI_BASE_URL", ""),
            ("OPENAI_API_KEY", "  "),
            ("TERN_MODEL", ""),
        ]);
        let eff = load(&home, &env).unwrap();
        let m = &eff.config.model;
        assert_eq!(m.base_url.as_deref(), Some("http://file/v1"));
        assert_eq!(m.api_key, None);
        assert_eq!(m.name.as_deref(), Some("file-model"));
        assert_eq!(eff.source("model.base_url"), Source::File);
        assert_eq!(eff.source("model.api_key"), Source::Default);
    }

    #[test]
    fn api_key_alone_defaults_base_url_to_openai() {
        let (_d, home) = temp_home();
        let env = env_of(&[("OPENAI_API_KEY", "sk-abc")]);
        let eff = load(&home, &env).unwrap();
        assert_eq!(
            eff.config.model.base_url.as_deref(),
            Some("https://api.openai.com/v1")
        );
        assert_eq!(eff.source("model.base_url"), Source::Default);

        // But not when a base URL is configured anywhere.
        write_config(&home, "[model]\nbase_url = \"http://local/v1\"\n");
        let eff = load(&home, &env).unwrap();
        assert_eq!(
            eff.config.model.base_url.as_deref(),
            Some("http://local/v1")
        );
    }

    #[test]
    fn no_api_key_no_default_base_url() {
        let (_d, home) = temp_home();
        let eff = load(&home, &env_of(&[("TERN_MODEL", "m")])).unwrap();
        assert_eq!(eff.config.model.base_url, None);
    }

    #[test]
    fn parse_error_names_path_line_and_column() {
        let (_d, home) = temp_home();
        write_config(&home, "[model]\nname = \"ok\"\ntimeout_secs = \"soon\"\n");
        let err = load(&home, &no_env).unwrap_err();
        let msg = err.to_string();
        let path = home.config_path().display().to_string();
        assert!(msg.contains(&path), "{msg}");
        assert!(msg.contains("line 3"), "{msg}");
        assert!(msg.contains("column"), "{msg}");
        match err {
            ConfigError::Parse { line, column, .. } => {
                assert_eq!(line, Some(3));
                assert_eq!(column, Some(16));
            }
            other => panic!("unexpected error: {other:?}"),
        }
    }

    #[test]
    fn syntax_error_is_reported() {
        let (_d, home) = temp_home();
        write_config(&home, "[model\nname = 1\n");
        let err = load(&home, &no_env).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("config.toml"), "{msg}");
        assert!(msg.contains("line 1"), "{msg}");
    }

    #[test]
    fn unknown_key_rejected() {
        let (_d, home) = temp_home();
        write_config(&home, "[model]\nname = \"m\"\ntemperature = 0.5\n");
        let err = load(&home, &no_env).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("temperature"), "{msg}");
        assert!(msg.contains("line 3"), "{msg}");

        write_config(&home, "[modle]\nname = \"m\"\n");
        let msg = load(&home, &no_env).unwrap_err().to_string();
        assert!(msg.contains("modle"), "{msg}");
    }

    #[test]
    fn validation_rejects_bad_values() {
        let (_d, home) = temp_home();
        for (text, expect) in [
            ("[agent]\nmax_iterations = 0\n", "agent.max_iterations"),
            ("[model]\ntimeout_secs = 0\n", "model.timeout_secs"),
            (
                "[tools]\nterminal_timeout_secs = 0\n",
                "tools.terminal_timeout_secs",
            ),
            (
                "[tools]\nterminal_max_timeout_secs = 0\n",
                "tools.terminal_max_timeout_secs",
            ),
            (
                "[tools]\nterminal_timeout_secs = 100\nterminal_max_timeout_secs = 50\n",
                "must not exceed",
            ),
            ("[model]\nbase_url = \"localhost:11434\"\n", "is not a URL"),
        ] {
            write_config(&home, text);
            let err = load(&home, &no_env).unwrap_err();
            assert!(matches!(err, ConfigError::Invalid(_)), "{err:?}");
            let msg = err.to_string();
            assert!(msg.contains(expect), "{text}: {msg}");
            assert!(msg.contains("config.toml"), "{text}: {msg}");
        }
    }

    #[test]
    fn bad_env_url_names_the_variable() {
        let (_d, home) = temp_home();
        let env = env_of(&[("OPENAI_BASE_URL", "ftp://x")]);
        let msg = load(&home, &env).unwrap_err().to_string();
        assert!(msg.starts_with("OPENAI_BASE_URL is not a URL: "), "{msg}");
        assert!(msg.contains("ftp://x"), "{msg}");

        let env = env_of(&[("OPENAI_BASE_URL", "http://")]);
        assert!(load(&home, &env).is_err());
    }

    #[test]
    fn env_url_overrides_invalid_file_url() {
        let (_d, home) = temp_home();
        write_config(&home, "[model]\nbase_url = \"nonsense\"\n");
        let env = env_of(&[("OPENAI_BASE_URL", "HTTPS://ok.example")]);
        let eff = load(&home, &env).unwrap();
        assert_eq!(
            eff.config.model.base_url.as_deref(),
            Some("HTTPS://ok.example")
        );
    }

    #[test]
    fn empty_file_strings_mean_unset() {
        let (_d, home) = temp_home();
        write_config(
            &home,
            "[model]\nbase_url = \"\"\napi_key = \"\"\nname = \"\"\n",
        );
        let eff = load(&home, &no_env).unwrap();
        assert_eq!(eff.config.model.base_url, None);
        assert_eq!(eff.config.model.api_key, None);
        assert_eq!(eff.config.model.name, None);
        assert_eq!(eff.source("model.name"), Source::Default);
    }

    #[test]
    fn model_flag_wins() {
        let (_d, home) = temp_home();
        let mut eff = load(&home, &env_of(&[("TERN_MODEL", "env-model")])).unwrap();
        eff.set_model_flag("flag-model".to_owned());
        assert_eq!(eff.config.model.name.as_deref(), Some("flag-model"));
        assert_eq!(eff.source("model.name"), Source::Flag);
        eff.set_model_flag(String::new());
        assert_eq!(eff.config.model.name.as_deref(), Some("flag-model"));
    }

    // ---- resolved_model ----

    #[test]
    fn resolved_model_ok() {
        let (_d, home) = temp_home();
        let env = env_of(&[
            ("OPENAI_BASE_URL", "http://localhost:11434/v1/"),
            ("TERN_MODEL", "qwen"),
        ]);
        let eff = load(&home, &env).unwrap();
        let m = eff.resolved_model().unwrap();
        assert_eq!(m.base_url, "http://localhost:11434/v1");
        assert_eq!(m.name, "qwen");
        assert_eq!(m.api_key, None);
        assert_eq!(m.timeout_secs, 120);
        assert_eq!(m.max_retries, 3);
        assert!(m.stream);
        assert_eq!(eff.config.resolved_model(&home).unwrap(), m);
    }

    #[test]
    fn missing_model_names_both_variables() {
        let (_d, home) = temp_home();
        let eff = load(&home, &no_env).unwrap();
        let msg = eff.resolved_model().unwrap_err().to_string();
        let path = home.config_path().display().to_string();
        assert_eq!(
            msg,
            format!(
                "no model is configured: set OPENAI_BASE_URL (the OpenAI-compatible endpoint, \
                 e.g. http://localhost:11434/v1) and TERN_MODEL (the model name), \
                 or set [model] base_url and name in {path}"
            )
        );
    }

    #[test]
    fn missing_model_names_only_the_name() {
        let (_d, home) = temp_home();
        // An API key alone yields the OpenAI base URL, so only the name is missing.
        let eff = load(&home, &env_of(&[("OPENAI_API_KEY", "sk-x")])).unwrap();
        let msg = eff.resolved_model().unwrap_err().to_string();
        assert!(msg.contains("TERN_MODEL"), "{msg}");
        assert!(!msg.contains("OPENAI_BASE_URL"), "{msg}");
        assert!(msg.contains("[model] name in"), "{msg}");
        assert!(!msg.contains("base_url"), "{msg}");
    }

    #[test]
    fn missing_model_names_only_the_base_url() {
        let (_d, home) = temp_home();
        let eff = load(&home, &env_of(&[("TERN_MODEL", "m")])).unwrap();
        let err = eff.resolved_model().unwrap_err();
        assert!(matches!(
            err,
            ConfigError::ModelNotConfigured {
                missing_base_url: true,
                missing_name: false,
                ..
            }
        ));
        let msg = err.to_string();
        assert!(msg.contains("OPENAI_BASE_URL"), "{msg}");
        assert!(!msg.contains("TERN_MODEL"), "{msg}");
        assert!(msg.contains("[model] base_url in"), "{msg}");
        assert!(
            msg.contains(&home.config_path().display().to_string()),
            "{msg}"
        );
    }

    // ---- masking and rendering ----

    #[test]
    fn mask_secret_rules() {
        assert_eq!(mask_secret("sk-abcdefghijklmnop1234"), "sk-…1234");
        assert_eq!(mask_secret("abcdefghijkl"), "abc…ijkl");
        assert_eq!(mask_secret("abcdefghijk"), "****");
        assert_eq!(mask_secret(""), "****");
        // Counts characters, not bytes, so multi-byte input cannot split a char.
        assert_eq!(mask_secret("ééééééééééé1234"), "ééé…1234");
    }

    #[test]
    fn debug_does_not_leak_api_key() {
        let model = ModelConfig {
            api_key: Some("sk-supersecretvalue9876".to_owned()),
            ..ModelConfig::default()
        };
        let dbg = format!("{model:?}");
        assert!(!dbg.contains("supersecret"), "{dbg}");
        assert!(dbg.contains("sk-…9876"), "{dbg}");
    }

    #[test]
    fn render_masks_and_annotates() {
        let (_d, home) = temp_home();
        write_config(
            &home,
            "[model]\napi_key = \"sk-supersecretvalue9876\"\n[approvals]\nallowlist = [\"ls\"]\n",
        );
        let env = env_of(&[
            ("OPENAI_BASE_URL", "http://localhost:11434/v1"),
            ("TERN_MODEL", "env-model"),
        ]);
        let mut eff = load(&home, &env).unwrap();
        let out = render_masked(&eff);
        assert!(!out.contains("supersecret"), "{out}");
        assert!(out.contains("[model]"), "{out}");
        let line = |needle: &str| -> String {
            out.lines()
                .find(|l| l.starts_with(needle))
                .unwrap_or_else(|| panic!("no line {needle:?} in\n{out}"))
                .to_owned()
        };
        let base = line("base_url = ");
        assert!(base.contains("\"http://localhost:11434/v1\""), "{base}");
        assert!(base.ends_with("# from OPENAI_BASE_URL"), "{base}");
        let key = line("api_key = ");
        assert!(key.contains("\"sk-…9876\""), "{key}");
        assert!(key.ends_with("# from config.toml"), "{key}");
        assert!(line("name = ").ends_with("# from TERN_MODEL"));
        assert!(line("timeout_secs = 120").ends_with("# default"));
        assert!(line("allowlist = [\"ls\"]").ends_with("# from config.toml"));
        assert!(line("toolsets = [\"terminal\", \"file\"]").ends_with("# default"));
        assert!(out.contains(&home.config_path().display().to_string()));

        eff.set_model_flag("flagged".to_owned());
        let out = render_masked(&eff);
        assert!(
            out.lines()
                .any(|l| l.starts_with("name = \"flagged\"") && l.ends_with("# from --model")),
            "{out}"
        );
    }

    #[test]
    fn render_unset_and_missing_file() {
        let (_d, home) = temp_home();
        let eff = load(&home, &no_env).unwrap();
        let out = render_masked(&eff);
        assert!(out.contains("not found"), "{out}");
        assert!(out.contains("# base_url is not set"), "{out}");
        assert!(out.contains("# api_key is not set"), "{out}");
        assert!(out.contains("# system_prompt is not set"), "{out}");
    }

    #[test]
    fn render_quotes_special_characters_on_one_line() {
        assert_eq!(quote("a\"b\\c\nd"), r#""a\"b\\c\nd""#);
        assert_eq!(quote("\u{1}"), r#""\u0001""#);
        let (_d, home) = temp_home();
        write_config(&home, "[agent]\nsystem_prompt = \"\"\"line1\nline2\"\"\"\n");
        let eff = load(&home, &no_env).unwrap();
        let out = render_masked(&eff);
        assert!(out.contains(r#"system_prompt = "line1\nline2""#), "{out}");
    }

    #[test]
    fn serialize_round_trips() {
        let mut config = Config::default();
        config.model.name = Some("m".to_owned());
        let text = toml::to_string(&config).unwrap();
        let back: Config = toml::from_str(&text).unwrap();
        assert_eq!(back, config);
    }

    // ---- add_to_allowlist ----

    #[test]
    fn allowlist_creates_file_when_absent() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            root: dir.path().join("fresh"),
        };
        add_to_allowlist(&home, "cargo test").unwrap();
        let text = fs::read_to_string(home.config_path()).unwrap();
        let config: Config = toml::from_str(&text).unwrap();
        assert_eq!(config.approvals.allowlist, vec!["cargo test"]);
        let eff = load(&home, &no_env).unwrap();
        assert_eq!(eff.config.approvals.allowlist, vec!["cargo test"]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(home.config_path())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn allowlist_preserves_comments_and_formatting() {
        let (_d, home) = temp_home();
        let original = "\
# tern configuration
[model]
name = \"llama3\"   # the local one

# commands I trust
[approvals]
allowlist = [
    \"ls\",   # listing
    \"pwd\",
]
";
        write_config(&home, original);
        add_to_allowlist(&home, "git status").unwrap();
        let text = fs::read_to_string(home.config_path()).unwrap();
        assert_eq!(
            text,
            "\
# tern configuration
[model]
name = \"llama3\"   # the local one

# commands I trust
[approvals]
allowlist = [
    \"ls\",   # listing
    \"pwd\",
    \"git status\",
]
"
        );
        let eff = load(&home, &no_env).unwrap();
        assert_eq!(
            eff.config.approvals.allowlist,
            vec!["ls", "pwd", "git status"]
        );
    }

    #[test]
    fn allowlist_adds_table_to_existing_file() {
        let (_d, home) = temp_home();
        write_config(&home, "# keep me\n[model]\nname = \"m\" # and me\n");
        add_to_allowlist(&home, "make").unwrap();
        let text = fs::read_to_string(home.config_path()).unwrap();
        assert!(
            text.starts_with("# keep me\n[model]\nname = \"m\" # and me\n"),
            "{text}"
        );
        let eff = load(&home, &no_env).unwrap();
        assert_eq!(eff.config.approvals.allowlist, vec!["make"]);
        assert_eq!(eff.config.model.name.as_deref(), Some("m"));
    }

    #[test]
    fn allowlist_adds_array_to_existing_table() {
        let (_d, home) = temp_home();
        write_config(&home, "[approvals] # trusted\n");
        add_to_allowlist(&home, "ls -la").unwrap();
        let text = fs::read_to_string(home.config_path()).unwrap();
        assert!(text.starts_with("[approvals] # trusted\n"), "{text}");
        assert_eq!(
            load(&home, &no_env).unwrap().config.approvals.allowlist,
            vec!["ls -la"]
        );
    }

    #[test]
    fn allowlist_dedups() {
        let (_d, home) = temp_home();
        add_to_allowlist(&home, "ls").unwrap();
        add_to_allowlist(&home, "ls").unwrap();
        add_to_allowlist(&home, "ls ").unwrap();
        add_to_allowlist(&home, "ls").unwrap();
        let eff = load(&home, &no_env).unwrap();
        // Exact matching: "ls " is a different command from "ls".
        assert_eq!(eff.config.approvals.allowlist, vec!["ls", "ls "]);
    }

    #[test]
    fn allowlist_quotes_awkward_commands() {
        let (_d, home) = temp_home();
        let cmd = r#"echo "hi" 'there' \ done"#;
        add_to_allowlist(&home, cmd).unwrap();
        let eff = load(&home, &no_env).unwrap();
        assert_eq!(eff.config.approvals.allowlist, vec![cmd]);
    }

    #[test]
    fn allowlist_rejects_empty_command() {
        let (_d, home) = temp_home();
        assert!(add_to_allowlist(&home, "  ").is_err());
        assert!(!home.config_path().exists());
    }

    #[test]
    fn allowlist_reports_wrong_types_and_bad_toml() {
        let (_d, home) = temp_home();
        write_config(&home, "approvals = 3\n");
        let msg = add_to_allowlist(&home, "ls").unwrap_err().to_string();
        assert!(
            msg.contains("approvals") && msg.contains("config.toml"),
            "{msg}"
        );

        write_config(&home, "[approvals]\nallowlist = \"ls\"\n");
        let msg = add_to_allowlist(&home, "ls").unwrap_err().to_string();
        assert!(msg.contains("allowlist"), "{msg}");

        write_config(&home, "[approvals\n");
        let msg = add_to_allowlist(&home, "ls").unwrap_err().to_string();
        assert!(msg.contains("line 1"), "{msg}");
        // The broken file is left untouched.
        assert_eq!(
            fs::read_to_string(home.config_path()).unwrap(),
            "[approvals\n"
        );
    }

    #[test]
    fn allowlist_leaves_no_temp_files() {
        let (_d, home) = temp_home();
        add_to_allowlist(&home, "a").unwrap();
        add_to_allowlist(&home, "b").unwrap();
        let names: Vec<String> = fs::read_dir(&home.root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["config.toml"]);
    }

    #[cfg(unix)]
    #[test]
    fn allowlist_writes_through_symlink() {
        let (dir, home) = temp_home();
        let real = dir.path().join("dotfiles-config.toml");
        fs::write(&real, "# linked\n[model]\nname = \"m\"\n").unwrap();
        std::os::unix::fs::symlink(&real, home.config_path()).unwrap();
        add_to_allowlist(&home, "ls").unwrap();
        assert!(
            fs::symlink_metadata(home.config_path())
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let text = fs::read_to_string(&real).unwrap();
        assert!(text.starts_with("# linked\n"), "{text}");
        assert!(text.contains("\"ls\""), "{text}");
    }

    // ---- gateway, hooks, webhooks ----

    const HOOKS_TOML: &str = r#"
[gateway]
max_concurrent_turns = 4

[[hooks]]
name = "audit"
events = ["turn_start", "turn_end"]
command = "cat >> /tmp/audit.jsonl"
timeout_ms = 250

[[hooks]]
events = ["*"]
command = "true"

[[webhooks]]
url = "https://hooks.example/tern"
secret = "0123456789abcdef-secret"

[[webhooks]]
name = "ops"
url = "http://user:hunter2pass@ops.example:8080/in?x=1"
secret = "another-secret-of-length"
events = ["agent_loop_stopped"]
timeout_ms = 1000
max_attempts = 2
retry_base_ms = 10
"#;

    #[test]
    fn hooks_and_webhooks_parse_with_defaults() {
        let (_d, home) = temp_home();
        write_config(&home, HOOKS_TOML);
        let eff = load(&home, &no_env).unwrap();
        let c = &eff.config;
        assert_eq!(c.gateway.max_concurrent_turns, 4);
        assert_eq!(c.gateway.listen, "127.0.0.1:8642");
        assert_eq!(eff.source("gateway.max_concurrent_turns"), Source::File);
        assert_eq!(eff.source("gateway.listen"), Source::Default);
        assert_eq!(
            c.hooks,
            vec![
                CommandHookConfig {
                    name: Some("audit".to_owned()),
                    events: vec!["turn_start".to_owned(), "turn_end".to_owned()],
                    command: "cat >> /tmp/audit.jsonl".to_owned(),
                    timeout_ms: 250,
                },
                CommandHookConfig {
                    name: None,
                    events: vec!["*".to_owned()],
                    command: "true".to_owned(),
                    timeout_ms: 5000,
                },
            ]
        );
        assert_eq!(
            c.webhooks[0],
            WebhookConfig {
                name: None,
                url: "https://hooks.example/tern".to_owned(),
                secret: "0123456789abcdef-secret".to_owned(),
                events: vec!["*".to_owned()],
                timeout_ms: 5000,
                max_attempts: 5,
                retry_base_ms: 500,
            }
        );
        let ops = &c.webhooks[1];
        assert_eq!(ops.name.as_deref(), Some("ops"));
        assert_eq!(ops.events, vec!["agent_loop_stopped"]);
        assert_eq!(
            (ops.timeout_ms, ops.max_attempts, ops.retry_base_ms),
            (1000, 2, 10)
        );
    }

    #[test]
    fn blank_hook_names_mean_unset() {
        let (_d, home) = temp_home();
        write_config(
            &home,
            "[[hooks]]\nname = \" \"\nevents = [\"*\"]\ncommand = \"true\"\n",
        );
        let eff = load(&home, &no_env).unwrap();
        assert_eq!(eff.config.hooks[0].name, None);
    }

    #[test]
    fn hooks_reject_unknown_and_missing_fields() {
        let (_d, home) = temp_home();
        for (text, expect) in [
            (
                "[[hooks]]\nevents = [\"*\"]\ncommand = \"true\"\ntimeout = 5\n",
                "timeout",
            ),
            ("[[hooks]]\nevents = [\"*\"]\n", "command"),
            ("[[hooks]]\ncommand = \"true\"\n", "events"),
            (
                "[[webhooks]]\nurl = \"http://x\"\nsecret = \"0123456789abcdef\"\nretries = 1\n",
                "retries",
            ),
            ("[[webhooks]]\nurl = \"http://x\"\n", "secret"),
            ("[[webhooks]]\nsecret = \"0123456789abcdef\"\n", "url"),
            ("[gateway]\nport = 80\n", "port"),
        ] {
            write_config(&home, text);
            let err = load(&home, &no_env).unwrap_err();
            assert!(matches!(err, ConfigError::Parse { .. }), "{text}: {err:?}");
            let msg = err.to_string();
            assert!(msg.contains(expect), "{text}: {msg}");
        }
    }

    #[test]
    fn hook_validation_names_the_key() {
        let (_d, home) = temp_home();
        let ok_hook = "[[hooks]]\nevents = [\"*\"]\ncommand = \"true\"\n";
        let secret = "secret = \"0123456789abcdef\"\n";
        for (text, expect) in [
            (
                "[[hooks]]\nevents = []\ncommand = \"true\"\n".to_owned(),
                "hooks[0].events in ",
            ),
            (
                format!("{ok_hook}[[hooks]]\nevents = [\"turn_begin\"]\ncommand = \"true\"\n"),
                "hooks[1].events in ",
            ),
            (
                "[[hooks]]\nevents = [\"*\"]\ncommand = \"  \"\n".to_owned(),
                "hooks[0].command in ",
            ),
            (
                "[[hooks]]\nevents = [\"*\"]\ncommand = \"true\"\ntimeout_ms = 0\n".to_owned(),
                "hooks[0].timeout_ms in ",
            ),
            (
                format!("[[webhooks]]\nurl = \"ftp://x\"\n{secret}"),
                "webhooks[0].url in ",
            ),
            (
                "[[webhooks]]\nurl = \"http://x\"\nsecret = \"short-secret\"\n".to_owned(),
                "webhooks[0].secret in ",
            ),
            (
                format!("[[webhooks]]\nurl = \"http://x\"\n{secret}events = [\"nope\"]\n"),
                "webhooks[0].events in ",
            ),
            (
                format!("[[webhooks]]\nurl = \"http://x\"\n{secret}events = []\n"),
                "webhooks[0].events in ",
            ),
            (
                format!("[[webhooks]]\nurl = \"http://x\"\n{secret}timeout_ms = 0\n"),
                "webhooks[0].timeout_ms in ",
            ),
            (
                format!("[[webhooks]]\nurl = \"http://x\"\n{secret}max_attempts = 0\n"),
                "webhooks[0].max_attempts in ",
            ),
            (
                format!("[[webhooks]]\nurl = \"http://x\"\n{secret}retry_base_ms = 0\n"),
                "webhooks[0].retry_base_ms in ",
            ),
            (
                "[gateway]\nmax_concurrent_turns = 0\n".to_owned(),
                "gateway.max_concurrent_turns in ",
            ),
            (
                "[gateway]\nmax_body_bytes = 1023\n".to_owned(),
                "gateway.max_body_bytes in ",
            ),
            (
                "[gateway]\nlisten = \"8642\"\n".to_owned(),
                "gateway.listen in ",
            ),
            (
                "[gateway]\nlisten = \"localhost:http\"\n".to_owned(),
                "gateway.listen in ",
            ),
        ] {
            write_config(&home, &text);
            let err = load(&home, &no_env).unwrap_err();
            assert!(matches!(err, ConfigError::Invalid(_)), "{text}: {err:?}");
            let msg = err.to_string();
            assert!(msg.contains(expect), "{text}: {msg}");
            assert!(msg.contains("config.toml"), "{text}: {msg}");
        }
    }

    #[test]
    fn unknown_event_error_lists_the_known_ones() {
        let (_d, home) = temp_home();
        write_config(
            &home,
            "[[hooks]]\nevents = [\"turn_end\", \"turn_begin\"]\ncommand = \"true\"\n",
        );
        let msg = load(&home, &no_env).unwrap_err().to_string();
        assert!(msg.contains("unknown event \"turn_begin\""), "{msg}");
        for name in HOOK_EVENT_NAMES {
            assert!(msg.contains(name), "{name} missing: {msg}");
        }
    }

    #[test]
    fn short_secret_is_not_echoed() {
        let (_d, home) = temp_home();
        write_config(
            &home,
            "[[webhooks]]\nurl = \"http://x\"\nsecret = \"tiny-s3cret\"\n",
        );
        let msg = load(&home, &no_env).unwrap_err().to_string();
        assert!(!msg.contains("tiny-s3cret"), "{msg}");
        assert!(msg.contains("at least 16 characters (got 11)"), "{msg}");
    }

    #[test]
    fn gateway_listen_accepts_hosts_and_ipv6() {
        let (_d, home) = temp_home();
        for listen in ["localhost:8642", "[::1]:8642", "0.0.0.0:0"] {
            write_config(&home, &format!("[gateway]\nlisten = \"{listen}\"\n"));
            let eff = load(&home, &no_env).unwrap();
            assert_eq!(eff.config.gateway.listen, listen);
        }
    }

    #[test]
    fn render_shows_gateway_hooks_and_masked_webhooks() {
        let (_d, home) = temp_home();
        write_config(&home, HOOKS_TOML);
        let eff = load(&home, &no_env).unwrap();
        let out = render_masked(&eff);
        let line = |needle: &str| -> String {
            out.lines()
                .find(|l| l.starts_with(needle))
                .unwrap_or_else(|| panic!("no line {needle:?} in\n{out}"))
                .to_owned()
        };
        assert!(out.contains("\n[gateway]\n"), "{out}");
        assert!(line("listen = \"127.0.0.1:8642\"").ends_with("# default"));
        assert!(line("max_concurrent_turns = 4").ends_with("# from config.toml"));
        assert!(line("max_body_bytes = 1048576").ends_with("# default"));
        assert!(line("drain_timeout_secs = 30").ends_with("# default"));

        assert_eq!(out.matches("[[hooks]]").count(), 2, "{out}");
        assert!(out.contains("name = \"audit\"\n"), "{out}");
        assert!(
            out.contains(
                "events = [\"turn_start\", \"turn_end\"]\n\
                 command = \"cat >> /tmp/audit.jsonl\"\n\
                 timeout_ms = 250\n"
            ),
            "{out}"
        );
        assert!(
            out.contains("command = \"true\"\ntimeout_ms = 5000\n"),
            "{out}"
        );

        assert_eq!(out.matches("[[webhooks]]").count(), 2, "{out}");
        assert!(!out.contains("0123456789abcdef-secret"), "{out}");
        assert!(!out.contains("another-secret-of-length"), "{out}");
        assert!(!out.contains("hunter2pass"), "{out}");
        assert!(out.contains("secret = \"012…cret\"\n"), "{out}");
        assert!(out.contains("secret = \"ano…ngth\"\n"), "{out}");
        assert!(
            out.contains("url = \"http://user:****@ops.example:8080/in?x=1\"\n"),
            "{out}"
        );
        assert!(
            out.contains(
                "events = [\"*\"]\ntimeout_ms = 5000\nmax_attempts = 5\nretry_base_ms = 500\n"
            ),
            "{out}"
        );
    }

    #[test]
    fn render_says_when_no_hooks_are_configured() {
        let (_d, home) = temp_home();
        let out = render_masked(&load(&home, &no_env).unwrap());
        assert!(out.contains("# no [[hooks]] configured"), "{out}");
        assert!(out.contains("# no [[webhooks]] configured"), "{out}");
        assert!(out.contains("\n[gateway]\n"), "{out}");
    }

    #[test]
    fn webhook_debug_masks_the_secret() {
        let hook = WebhookConfig {
            name: None,
            url: "https://a:b-password@x.example/".to_owned(),
            secret: "supersecretvalue9876".to_owned(),
            events: vec!["*".to_owned()],
            timeout_ms: 1,
            max_attempts: 1,
            retry_base_ms: 1,
        };
        let dbg = format!("{hook:?}");
        assert!(!dbg.contains("supersecret"), "{dbg}");
        assert!(!dbg.contains("b-password"), "{dbg}");
        assert!(dbg.contains("sup…9876"), "{dbg}");
    }

    #[test]
    fn mask_url_rules() {
        assert_eq!(
            mask_url("https://x.example/a?b=c"),
            "https://x.example/a?b=c"
        );
        assert_eq!(mask_url("http://u:p@h/x"), "http://u:****@h/x");
        assert_eq!(mask_url("http://u@h/x"), "http://u@h/x");
        // An @ in the path is not userinfo.
        assert_eq!(mask_url("http://h/a:b@c"), "http://h/a:b@c");
        assert_eq!(mask_url("not a url"), "not a url");
    }

    #[test]
    fn serialize_round_trips_with_hooks() {
        let config: Config = toml::from_str(HOOKS_TOML).unwrap();
        let text = toml::to_string(&config).unwrap();
        let back: Config = toml::from_str(&text).unwrap();
        assert_eq!(back, config);
    }

    #[test]
    fn line_column_counts_chars() {
        assert_eq!(line_column("abc", 0), (1, 1));
        assert_eq!(line_column("a\nbc", 3), (2, 2));
        assert_eq!(line_column("é\né", 5), (2, 2));
        // Inside a multi-byte character: points at that character.
        assert_eq!(line_column("é\né", 4), (2, 1));
        assert_eq!(line_column("ab", 99), (1, 3));
    }

    #[test]
    fn idle_reset_is_off_by_default_and_checked() {
        let (_d, home) = temp_home();
        assert_eq!(
            load(&home, &no_env).unwrap().config.gateway.idle_reset(),
            None
        );
        write_config(&home, "[gateway]\nidle_reset = \"2h\"\n");
        assert_eq!(
            load(&home, &no_env).unwrap().config.gateway.idle_reset(),
            Some(std::time::Duration::from_secs(7200))
        );
        write_config(&home, "[gateway]\nidle_reset = \"sometimes\"\n");
        let e = load(&home, &no_env).unwrap_err().to_string();
        assert!(e.contains("gateway.idle_reset"), "{e}");
    }

    #[test]
    fn processes_have_defaults_and_are_checked() {
        let (_d, home) = temp_home();
        let c = load(&home, &no_env).unwrap().config.processes;
        assert_eq!(c.max_running, 64);
        assert_eq!(c.keep_finished(), std::time::Duration::from_secs(1800));
        write_config(
            &home,
            "[processes]\nmax_running = 3\nkeep_finished = \"2h\"\nwatch_interval = \"5s\"\n",
        );
        let c = load(&home, &no_env).unwrap().config.processes;
        assert_eq!(c.max_running, 3);
        assert_eq!(c.keep_finished(), std::time::Duration::from_secs(7200));
        assert_eq!(c.watch_interval(), std::time::Duration::from_secs(5));
        for bad in [
            "max_running = 0",
            "keep_finished = \"soon\"",
            "watch_interval = \"often\"",
            "log_max_bytes = 1",
        ] {
            write_config(&home, &format!("[processes]\n{bad}\n"));
            let e = load(&home, &no_env).unwrap_err().to_string();
            assert!(e.contains("processes"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_ssh_backend_is_configured_and_checked() {
        let (_d, home) = temp_home();
        let c = load(&home, &no_env).unwrap().config.processes;
        assert_eq!(c.backend, ProcessBackend::Local);
        assert_eq!(c.ssh, None);
        write_config(
            &home,
            "[processes]\nbackend = \"ssh\"\n\n[processes.ssh]\nhost = \"build-box\"\n\
             user = \"deploy\"\nport = 2222\nidentity_file = \"~/.ssh/id_ed25519\"\n\
             options = [\"ServerAliveInterval=30\"]\nworkdir = \"~/app\"\n",
        );
        let c = load(&home, &no_env).unwrap().config.processes;
        assert_eq!(c.backend, ProcessBackend::Ssh);
        assert_eq!(
            c.ssh,
            Some(SshConfig {
                host: Some("build-box".into()),
                user: Some("deploy".into()),
                port: Some(2222),
                identity_file: Some("~/.ssh/id_ed25519".into()),
                options: vec!["ServerAliveInterval=30".into()],
                workdir: Some("~/app".into()),
            })
        );
        // Serialized back (`config show`, the allowlist writer) it reads the same.
        let text = toml::to_string(&load(&home, &no_env).unwrap().config).unwrap();
        let back: Config = toml::from_str(&text).unwrap();
        assert_eq!(back.processes, c);
        // A host kept for later while the backend is local is fine.
        write_config(&home, "[processes.ssh]\nhost = \"later\"\n");
        assert_eq!(
            load(&home, &no_env).unwrap().config.processes.backend,
            ProcessBackend::Local
        );
        for (bad, says) in [
            (
                "[processes]\nbackend = \"ssh\"\n",
                "[processes.ssh] is missing",
            ),
            (
                "[processes]\nbackend = \"ssh\"\n[processes.ssh]\nport = 22\n",
                "processes.ssh.host is not set",
            ),
            ("[processes]\nbackend = \"docker\"\n", "backend"),
            (
                "[processes.ssh]\nhost = \"-oProxyCommand=x\"\n",
                "processes.ssh.host",
            ),
            ("[processes.ssh]\nhost = \"a b\"\n", "processes.ssh.host"),
            (
                "[processes.ssh]\nhost = \"h\"\nuser = \"a@b\"\n",
                "processes.ssh.user",
            ),
            (
                "[processes.ssh]\nhost = \"h\"\nport = 0\n",
                "processes.ssh.port",
            ),
            (
                "[processes.ssh]\nhost = \"h\"\nport = 70000\n",
                "processes.ssh.port",
            ),
            (
                "[processes.ssh]\nhost = \"h\"\noptions = [\"-oProxyCommand=x\"]\n",
                "processes.ssh.options",
            ),
            (
                "[processes.ssh]\nhost = \"h\"\nworkdir = \" \"\n",
                "processes.ssh.workdir",
            ),
            (
                "[processes.ssh]\nhost = \"h\"\nhostname = \"x\"\n",
                "hostname",
            ),
        ] {
            write_config(&home, bad);
            let e = load(&home, &no_env).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn sandbox_defaults_parse_render_and_check() {
        let (_d, home) = temp_home();
        let eff = load(&home, &no_env).unwrap();
        let c = &eff.config.sandbox;
        assert_eq!(c.mode, SandboxMode::WorkspaceWrite);
        assert!(!c.network());
        let p = c.policy(&home, Some(Path::new("/home/u")));
        assert_eq!(p.protected_paths, vec![home.root.clone()]);

        write_config(
            &home,
            "[sandbox]\nmode = \"read-only\"\nnetwork = true\nwritable_roots = [\"~/cache\"]\n\
             protected_paths = [\"/srv/keys\"]\n\n[sandbox.env]\nkeep = [\"GITHUB_TOKEN\"]\n",
        );
        let eff = load(&home, &no_env).unwrap();
        let p = eff.config.sandbox.policy(&home, Some(Path::new("/home/u")));
        assert_eq!(p.mode, SandboxMode::ReadOnly);
        assert!(p.network);
        assert_eq!(p.writable_roots, vec![PathBuf::from("/home/u/cache")]);
        assert_eq!(
            p.protected_paths,
            vec![home.root.clone(), PathBuf::from("/srv/keys")]
        );
        assert_eq!(p.env.keep, vec!["GITHUB_TOKEN".to_owned()]);
        let shown = render_masked(&eff);
        assert!(shown.contains("mode = \"read-only\""), "{shown}");
        assert!(shown.contains("env.keep = [\"GITHUB_TOKEN\"]"), "{shown}");
        assert!(
            shown
                .lines()
                .any(|l| l.starts_with("env.keep") && l.ends_with("from config.toml")),
            "{shown}"
        );

        for (bad, says) in [
            (
                "[sandbox]\nmode = \"yolo\"\n",
                "expected one of `read-only`",
            ),
            (
                "[sandbox]\nwritable_roots = [\"cache\"]\n",
                "not an absolute path",
            ),
            (
                "[sandbox]\nmode = \"full-access\"\nnetwork = false\n",
                "no effect",
            ),
            ("[sandbox.env]\nkeepp = []\n", "keepp"),
        ] {
            write_config(&home, bad);
            let e = load(&home, &no_env).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
