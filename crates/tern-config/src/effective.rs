//! [`Effective`]: the configuration in force after every layer, with where each value came
//! from ([`Source`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::config::Config;
use crate::error::ConfigError;
use crate::model::ResolvedModel;

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
