//! Configuration for tern.
//!
//! Everything tern keeps on disk lives under one home directory, `$TERN_HOME`
//! (default `~/.tern`, see [`Home`]):
//!
//! - `config.toml` — user settings, see [`Config`];
//! - `tern.db` — the session store;
//! - `logs/` — log files;
//! - `history` — REPL line history.
//!
//! The flow at a glance:
//!
//! ```text
//! Home::resolve ─▶ load ─┬─ config.toml parsed into Config (defaults fill the gaps)
//!                        ├─ environment layered on top (OPENAI_BASE_URL, OPENAI_API_KEY,
//!                        │  TERN_MODEL, TERN_INBOX_KEY)
//!                        └─ validated ─▶ Effective { config, sources, … }
//!                                         ├─ --model flag: Effective::set_model_flag
//!                                         ├─ Effective::resolved_model ─▶ ResolvedModel
//!                                         └─ render_masked ─▶ `tern config show`
//! add_to_allowlist: the one edit tern makes to config.toml.
//! ```
//!
//! Settings are layered: built-in defaults, then `config.toml`, then the
//! environment, then command-line flags. [`load`] records where each effective
//! value came from so `tern config show` ([`render_masked`]) can explain it.
//!
//! Environment access goes through a lookup function rather than
//! `std::env::var` so that tests never depend on, or mutate, the process
//! environment. Callers pass `&|k| std::env::var(k).ok()`.
//!
//! One module per concept: [`home`](Home), the sections (`model`, `agent`, `gateway`,
//! `hooks`, `inbox`, `processes` with `ssh`, `sandbox`, `delegate`, `memory`, `compaction`, `cron`,
//! `channels`, `mcp`), [`Config`] which holds them,
//! `load` and `validate`, [`Effective`], `tree` (the configuration as keys, from the types'
//! `Serialize`, which `render` prints and `load` records sources for) and `allowlist`.

mod address;
mod agent;
mod allowlist;
mod channels;
mod compaction;
mod config;
mod cron;
mod delegate;
mod duration;
mod effective;
mod env;
mod error;
mod gateway;
mod home;
mod hooks;
mod inbox;
mod load;
mod mask;
mod mcp;
mod memory;
mod model;
mod processes;
mod render;
mod sandbox;
mod ssh;
#[cfg(test)]
mod test_support;
mod tree;
mod validate;

pub use agent::{AgentConfig, ApprovalsConfig, ToolsConfig};
pub use allowlist::add_to_allowlist;
pub use channels::{
    ChannelSecret, ChannelsConfig, MAX_POLL_TIMEOUT, MatrixChannelConfig, ProgressMode,
    TELEGRAM_API_URL, TelegramChannelConfig,
};
pub use compaction::CompactionConfig;
pub use config::Config;
pub use cron::CronConfig;
pub use delegate::DelegateConfig;
pub use duration::parse_duration;
pub use effective::{Effective, Source};
pub use env::{
    ENV_API_KEY, ENV_BASE_URL, ENV_INBOX_KEY, ENV_MODEL, ENV_TERN_HOME, OPENAI_DEFAULT_BASE_URL,
};
pub use error::ConfigError;
pub use gateway::GatewayConfig;
pub use home::Home;
pub use hooks::{CommandHookConfig, HOOK_EVENT_NAMES, HookCommand, WebhookConfig};
pub use inbox::{
    AutoApproveConfig, DEFAULT_MAX_UPLOAD_BYTES, EXPIRY_OUTCOMES, InboxConfig, InboxKey,
    InboxNotifyConfig, InboxPolicyConfig, InboxProjectConfig, InboxStepConfig, RateLimitConfig,
    RemoteInboxConfig,
};
pub use load::load;
pub use mask::{mask_secret, mask_url};
pub use mcp::{
    CHAT_SOURCES, DEFAULT_MCP_STARTUP_TIMEOUT, DEFAULT_MCP_TOOL_TIMEOUT, McpSandbox,
    McpServerConfig, McpSource, McpStartup, McpTransport, is_valid_server_name,
};
pub use memory::{
    DEFAULT_MEMORY_CHAR_LIMIT, DEFAULT_USER_CHAR_LIMIT, MAX_MEMORY_CHAR_LIMIT, MemoryConfig,
};
pub use model::{ModelConfig, ResolvedModel};
pub use processes::ProcessesConfig;
pub use render::render_masked;
pub use sandbox::SandboxConfig;
pub use ssh::{ProcessBackend, SshConfig};
pub use tern_sandbox::{EnvPolicy as SandboxEnv, Mode as SandboxMode};
