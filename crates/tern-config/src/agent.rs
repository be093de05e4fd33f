//! `[agent]`, `[tools]` and `[approvals]`: the agent loop, its built-in tools' limits and
//! the commands that never need confirmation.

use serde::{Deserialize, Serialize};

/// `[agent]`: the agent loop.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    pub max_iterations: u32,
    pub toolsets: Vec<String>,
    pub system_prompt: Option<String>,
    /// Watch for the model repeating the same tool call (same tool, arguments and result).
    pub loop_guard: bool,
    /// Identical calls in a turn after which the model is told it is repeating itself.
    pub loop_warn_after: u32,
    /// Identical calls in a turn after which the turn ends with a message.
    pub loop_stop_after: u32,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            max_iterations: 60,
            // The working agent's tools; the gateway adds `inbox` (see its `gateway_toolsets`).
            toolsets: [
                "terminal",
                "file",
                "todo",
                "memory",
                "session_search",
                "delegate",
            ]
            .map(str::to_owned)
            .to_vec(),
            system_prompt: None,
            loop_guard: true,
            loop_warn_after: 3,
            loop_stop_after: 5,
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
