//! An [`Agent`] from tern's configuration: the model client from `[model]` (or the error a
//! turn reports when none is configured), the tool limits from `[tools]`, the sandbox from
//! `[sandbox]` with tern's home protected, `delegate_task` with its limits from `[delegate]`,
//! MCP servers' toolsets kept to the sessions their `sources` name.
//! `tern chat`, `tern ask` and the gateway's builder all make their agent here.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tern_config::{Effective, Home};
use tern_store::Store;
use tern_tools::{Registry, ToolLimits};

use crate::{Agent, AgentSettings, DelegateSettings, delegate};

/// Why no agent could be made.
#[derive(Debug, thiserror::Error)]
pub enum FromConfigError {
    #[error("the model client: {0}")]
    Llm(#[from] tern_llm::LlmError),
}

/// The sandbox of the agent's commands and file tools, from `[sandbox]`, with `home`
/// protected, and the chat channels' secrets too: their token files protected like `home`,
/// the variables holding their tokens removed from commands whatever their names.
pub fn sandbox(home: &Home, eff: &Effective) -> tern_sandbox::Sandbox {
    let user_home = std::env::var_os("HOME").map(PathBuf::from);
    let mut policy = eff.config.sandbox.policy(home, user_home.as_deref());
    let env = |k: &str| std::env::var(k).ok();
    let channels = &eff.config.channels;
    policy
        .protected_paths
        .extend(channels.secret_files(&home.root, &env));
    policy.env.secrets.extend(channels.secret_env_names());
    tern_sandbox::Sandbox::new(policy)
}

/// The limits of the agent's tools, from `[tools]`, with the sandbox of [`sandbox`].
pub fn tool_limits(home: &Home, eff: &Effective) -> ToolLimits {
    let t = &eff.config.tools;
    ToolLimits {
        sandbox: Arc::new(sandbox(home, eff)),
        terminal_timeout_secs: t.terminal_timeout_secs,
        terminal_max_timeout_secs: t.terminal_max_timeout_secs,
        output_limit_chars: t.output_limit_chars,
        read_limit_bytes: t.read_limit_bytes,
    }
}

/// The limits of `delegate_task`'s child sessions, from `[delegate]`.
pub fn delegation(eff: &Effective) -> DelegateSettings {
    let d = &eff.config.delegate;
    DelegateSettings {
        max_iterations: d.max_iterations,
        max_concurrent: d.max_concurrent,
        max_depth: d.max_depth,
    }
}

/// The agent with the tools of `registry` and `delegate_task` (toolset `delegate`, enabled
/// where a turn's toolsets name it). A missing model configuration is kept as the error
/// message a turn reports, so that what needs no model (the inbox) still runs.
pub fn agent(
    home: &Home,
    eff: &Effective,
    store: Store,
    mut registry: Registry,
) -> Result<Agent, FromConfigError> {
    delegate::register(&mut registry);
    let (llm, model, stream, context_length, vision) = match eff.resolved_model() {
        Ok(m) => {
            let mut cfg = tern_llm::ClientConfig::new(m.base_url.clone());
            cfg.api_key = m.api_key.clone();
            cfg.timeout = Duration::from_secs(m.timeout_secs);
            cfg.max_retries = m.max_retries;
            (
                Ok(tern_llm::Client::new(cfg)?),
                m.name,
                m.stream,
                m.context_length,
                m.vision,
            )
        }
        Err(e) => (Err(e.to_string()), String::new(), false, None, None),
    };
    let agent = Agent::new(
        store,
        llm,
        Arc::new(registry),
        AgentSettings {
            model,
            max_iterations: eff.config.agent.max_iterations,
            stream,
            system_prompt: eff.config.agent.system_prompt.clone(),
            limits: tool_limits(home, eff),
            loop_guard: crate::LoopGuardSettings {
                enabled: eff.config.agent.loop_guard,
                warn_after: eff.config.agent.loop_warn_after,
                stop_after: eff.config.agent.loop_stop_after,
            },
            // As configured; unset, the agent asks the server when it first needs it.
            context_length,
            compaction: compaction(&eff.config.compaction),
        },
    )
    .with_delegation(delegation(eff))
    .with_vision(vision);
    Ok(match mcp_source_filter(eff) {
        Some(filter) => agent.with_toolset_filter(filter),
        None => agent,
    })
}

/// What `[mcp_servers.NAME] sources` asks: a turn of a session from elsewhere goes without the
/// server's toolset, `mcp:NAME` (tern-mcp's name for it). `None` when no server sets `sources`.
pub fn mcp_source_filter(eff: &Effective) -> Option<crate::ToolsetFilter> {
    let restricted: Vec<(String, tern_config::McpServerConfig)> = eff
        .config
        .mcp_servers
        .iter()
        .filter(|(_, server)| server.sources.is_some())
        .map(|(name, server)| (format!("mcp:{name}"), server.clone()))
        .collect();
    if restricted.is_empty() {
        return None;
    }
    Some(Arc::new(move |source: &str, toolsets: &mut Vec<String>| {
        toolsets.retain(|t| {
            restricted
                .iter()
                .all(|(toolset, server)| t != toolset || server.serves(source))
        });
    }))
}

/// `[compaction]` as the agent applies it.
fn compaction(c: &tern_config::CompactionConfig) -> crate::CompactionSettings {
    crate::CompactionSettings {
        threshold: f64::from(c.threshold_percent) / 100.0,
        tail_share: f64::from(c.keep_recent_percent) / 100.0,
        elide_over_chars: c.elide_tool_output_chars,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::path::Path;

    #[test]
    fn the_sandbox_keeps_channel_secrets_from_the_agent() {
        let dir = tempfile::tempdir().unwrap();
        let home = tern_config::Home {
            root: dir.path().to_path_buf(),
        };
        std::fs::write(
            home.config_path(),
            "[[channels.telegram]]\ntoken_file = \"/srv/secrets/tg.token\"\n\n\
             [[channels.matrix]]\nhomeserver = \"https://m.example.org\"\n\
             user_id = \"@bot:example.org\"\naccess_token_env = \"MX_BOT\"\n\n\
             [sandbox.env]\nkeep = [\"MX_*\"]\n",
        )
        .unwrap();
        let eff = tern_config::load(&home, &|_| None).unwrap();
        let sandbox = super::sandbox(&home, &eff);
        let policy = sandbox.policy();
        assert!(
            policy
                .protected_paths
                .iter()
                .any(|p| p == Path::new("/srv/secrets/tg.token")),
            "{:?}",
            policy.protected_paths
        );
        assert!(!policy.env.allows(OsStr::new("MX_BOT")));
        assert!(policy.env.allows(OsStr::new("PATH")));
    }

    #[test]
    fn mcp_sources_take_a_servers_toolset_out_of_other_sessions_turns() {
        let dir = tempfile::tempdir().unwrap();
        let home = tern_config::Home {
            root: dir.path().to_path_buf(),
        };
        let load = |text: &str| {
            std::fs::write(home.config_path(), text).unwrap();
            tern_config::load(&home, &|_| None).unwrap()
        };
        let eff = load("[mcp_servers.everything]\ncommand = \"x\"\n");
        assert!(
            super::mcp_source_filter(&eff).is_none(),
            "nothing to filter"
        );

        let eff = load(
            "[mcp_servers.jobs]\ncommand = \"x\"\nsources = [\"cron\"]\n\n\
             [mcp_servers.chats]\ncommand = \"y\"\nsources = [\"chat\", \"cli\"]\n\n\
             [mcp_servers.all]\ncommand = \"z\"\n",
        );
        let filter = super::mcp_source_filter(&eff).unwrap();
        let turn = |source: &str| {
            let mut t: Vec<String> = ["terminal", "mcp:jobs", "mcp:chats", "mcp:all", "file"]
                .map(String::from)
                .to_vec();
            filter(source, &mut t);
            t
        };
        assert_eq!(turn("cron"), ["terminal", "mcp:jobs", "mcp:all", "file"]);
        assert_eq!(
            turn("telegram"),
            ["terminal", "mcp:chats", "mcp:all", "file"]
        );
        assert_eq!(turn("cli"), ["terminal", "mcp:chats", "mcp:all", "file"]);
        assert_eq!(turn("api"), ["terminal", "mcp:all", "file"]);
    }
}
