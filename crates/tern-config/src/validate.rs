//! The checks of [`crate::load`] across sections: a well-typed but unusable value is refused
//! with the key (or variable) it came from. Sections with their own rules check themselves
//! ([`crate::hooks`], [`crate::inbox`], [`crate::sandbox`], [`crate::ssh`], [`crate::channels`], [`crate::mcp`]).

use crate::address::{is_host_port, is_http_url};
use crate::duration::parse_duration;
use crate::effective::{Effective, Source};
use crate::error::ConfigError;
use crate::{channels, hooks, inbox, mcp, sandbox, ssh};

/// Describes where `key` came from, for error messages.
fn origin(eff: &Effective, key: &str) -> String {
    match eff.source(key) {
        Source::Env(var) => var.to_owned(),
        Source::File => format!("{key} in {}", eff.config_path.display()),
        Source::Flag => format!("{key} (from the command line)"),
        Source::Default => format!("{key} (default)"),
    }
}

pub(crate) fn validate(eff: &Effective) -> Result<(), ConfigError> {
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
    if let Some(n) = c.model.context_length
        && n < 1024
    {
        return Err(ConfigError::Invalid(format!(
            "{} must be at least 1024 tokens (got {n}); leave it unset to use what the server reports",
            origin(eff, "model.context_length")
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
    c.compaction.validate(|key| origin(eff, key))?;
    c.cron.validate(|key| origin(eff, key))?;
    for (key, value) in at_least_one.into_iter().chain(c.delegate.at_least_one()) {
        if value < 1 {
            return Err(ConfigError::Invalid(format!(
                "{} must be at least 1 (got {value})",
                origin(eff, key)
            )));
        }
    }
    if c.agent.loop_warn_after < 1 || c.agent.loop_warn_after >= c.agent.loop_stop_after {
        return Err(ConfigError::Invalid(format!(
            "{} ({}) must be at least 1 and less than agent.loop_stop_after ({})",
            origin(eff, "agent.loop_warn_after"),
            c.agent.loop_warn_after,
            c.agent.loop_stop_after
        )));
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
    let m = &c.memory;
    for (name, limit) in [
        ("memory_char_limit", m.memory_char_limit),
        ("user_char_limit", m.user_char_limit),
    ] {
        if !(1..=crate::memory::MAX_MEMORY_CHAR_LIMIT).contains(&limit) {
            return Err(ConfigError::Invalid(format!(
                "in [memory] of {}: {name} must be between 1 and {}",
                eff.config_path.display(),
                crate::memory::MAX_MEMORY_CHAR_LIMIT
            )));
        }
    }
    ssh::validate_backend(p.backend, p.ssh.as_ref(), &eff.config_path)?;
    sandbox::validate_sandbox(&c.sandbox, &eff.config_path)?;
    hooks::validate_hooks(&c.hooks, &c.webhooks, &eff.config_path)?;
    channels::validate_channels(&c.channels, &eff.config_path)?;
    mcp::validate_mcp_servers(&c.mcp_servers, &eff.config_path)?;
    inbox::validate_inbox(&c.inbox, &eff.config_path)
}

#[cfg(test)]
mod tests {
    use crate::test_support::*;
    use crate::{ConfigError, load};

    #[test]
    fn validation_rejects_bad_values() {
        let (_d, home) = temp_home();
        for (text, expect) in [
            ("[agent]\nmax_iterations = 0\n", "agent.max_iterations"),
            (
                "[agent]\nloop_warn_after = 5\nloop_stop_after = 5\n",
                "agent.loop_warn_after in",
            ),
            (
                "[agent]\nloop_warn_after = 0\n",
                "less than agent.loop_stop_after",
            ),
            (
                "[agent]\nloop_stop_after = 2\nloop_warn_after = 3\n",
                "must be at least 1 and less",
            ),
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
            ("[model]\ncontext_length = 100\n", "model.context_length"),
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
}
