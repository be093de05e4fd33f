//! [`Config`]: the whole of `config.toml`, one field per section.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::agent::{AgentConfig, ApprovalsConfig, ToolsConfig};
use crate::channels::ChannelsConfig;
use crate::compaction::CompactionConfig;
use crate::cron::CronConfig;
use crate::delegate::DelegateConfig;
use crate::error::ConfigError;
use crate::gateway::GatewayConfig;
use crate::home::Home;
use crate::hooks::{CommandHookConfig, WebhookConfig};
use crate::inbox::InboxConfig;
use crate::mcp::McpServerConfig;
use crate::memory::MemoryConfig;
use crate::model::{ModelConfig, ResolvedModel};
use crate::processes::ProcessesConfig;
use crate::sandbox::SandboxConfig;

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
    pub hooks: Vec<CommandHookConfig>,
    /// `[[webhooks]]`: URLs that lifecycle events are POSTed to (see `docs/hooks.md`).
    pub webhooks: Vec<WebhookConfig>,
    /// `[inbox]`: the human inbox (see [`InboxConfig`]).
    pub inbox: InboxConfig,
    /// `[processes]`: background processes the gateway runs for agents.
    pub processes: ProcessesConfig,
    /// `[sandbox]`: what the agent's commands and file tools may do.
    pub sandbox: SandboxConfig,
    /// `[delegate]`: the child sessions of `delegate_task`.
    pub delegate: DelegateConfig,
    /// `[compaction]`: keeping a long session within the model's window.
    pub compaction: CompactionConfig,
    /// `[memory]`: the limits of the `memory` tool's stores.
    pub memory: MemoryConfig,
    /// `[channels]`: the chat channels (`[[channels.telegram]]`, `[[channels.matrix]]`).
    pub channels: ChannelsConfig,
    /// `[cron]`: scheduled jobs.
    pub cron: CronConfig,
    /// `[mcp_servers.NAME]`: MCP servers whose tools the agent may use, by name.
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
}

impl Config {
    /// Checks that a model endpoint and name are configured. The error tells
    /// which environment variables to set, or which keys in `home`'s
    /// `config.toml`.
    pub fn resolved_model(&self, home: &Home) -> Result<ResolvedModel, ConfigError> {
        self.resolved_model_at(&home.config_path())
    }

    pub(crate) fn resolved_model_at(
        &self,
        config_path: &Path,
    ) -> Result<ResolvedModel, ConfigError> {
        self.model.resolve(config_path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;

    #[test]
    fn serialize_round_trips() {
        let mut config = Config::default();
        config.model.name = Some("m".to_owned());
        let text = toml::to_string(&config).unwrap();
        let back: Config = toml::from_str(&text).unwrap();
        assert_eq!(back, config);
    }

    #[test]
    fn serialize_round_trips_with_hooks() {
        let config: Config = toml::from_str(HOOKS_TOML).unwrap();
        let text = toml::to_string(&config).unwrap();
        let back: Config = toml::from_str(&text).unwrap();
        assert_eq!(back, config);
    }
}
