//! [`load`]: `config.toml` and the environment layered over the defaults, then validated.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::Path;

use crate::config::Config;
use crate::effective::{Effective, Source};
use crate::env::{
    ENV_API_KEY, ENV_BASE_URL, ENV_INBOX_KEY, ENV_MODEL, OPENAI_DEFAULT_BASE_URL, env_value,
};
use crate::error::{ConfigError, line_column};
use crate::home::Home;
use crate::inbox::InboxKey;
use crate::tree::Node;
use crate::validate::validate;

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
            (Config::default(), BTreeSet::new(), false)
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

    // Environment and flags are recorded as they are applied; every other key is from the
    // file if the file set it (and it still has a value), else a default.
    let mut overrides: Vec<(&'static str, Source)> = Vec::new();

    warn_if_key_readable(&config, &config_path);

    for (var, key, field) in [
        (ENV_BASE_URL, "model.base_url", &mut config.model.base_url),
        (ENV_API_KEY, "model.api_key", &mut config.model.api_key),
        (ENV_MODEL, "model.name", &mut config.model.name),
    ] {
        if let Some(value) = env_value(env, var) {
            tracing::debug!(variable = var, "environment overrides {key}");
            *field = Some(value);
            overrides.push((key, Source::Env(var)));
        }
    }

    if let Some(key) = env_value(env, ENV_INBOX_KEY) {
        tracing::debug!(variable = ENV_INBOX_KEY, "environment overrides inbox.key");
        config.inbox.key = Some(InboxKey(key));
        overrides.push(("inbox.key", Source::Env(ENV_INBOX_KEY)));
    }

    if config.model.api_key.is_some() && config.model.base_url.is_none() {
        config.model.base_url = Some(OPENAI_DEFAULT_BASE_URL.to_owned());
        overrides.push(("model.base_url", Source::Default));
    }

    if let Some(url) = &mut config.model.base_url {
        let trimmed = url.trim().trim_end_matches('/');
        if trimmed.len() != url.len() {
            *url = trimmed.to_owned();
        }
    }

    let mut sources = file_sources(&config, &present);
    sources.extend(overrides.into_iter().map(|(k, s)| (k.to_owned(), s)));

    let eff = Effective {
        config,
        sources,
        file_found,
        config_path,
    };
    validate(&eff)?;
    Ok(eff)
}

/// The source of every key of `config` ([`Node::leaves`]) before the environment: the file
/// when it set the key to a value, else the default. (An empty string in the file means
/// "not set", so such a key is a default.)
fn file_sources(config: &Config, present: &BTreeSet<String>) -> BTreeMap<String, Source> {
    let leaves = Node::of(config).map(|n| n.leaves()).unwrap_or_else(|e| {
        // Not expected: the types serialize to JSON. Sources are only shown, not acted on.
        tracing::warn!("cannot list the configuration's keys: {e}");
        Vec::new()
    });
    leaves
        .into_iter()
        .map(|(key, unset)| {
            let source = if !unset && present.contains(&key) {
                Source::File
            } else {
                Source::Default
            };
            (key, source)
        })
        .collect()
}

/// Parses the file text into a [`Config`] plus the dotted keys the file sets explicitly
/// (`"sandbox.env.keep"`; tables are walked into, arrays are not), so sources can tell
/// "from file" from "default".
fn parse_config(text: &str, path: &Path) -> Result<(Config, BTreeSet<String>), ConfigError> {
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
    let mut present = BTreeSet::new();
    collect_keys(&table, "", &mut present);
    Ok((config, present))
}

fn collect_keys(table: &toml::Table, prefix: &str, out: &mut BTreeSet<String>) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        if let Some(inner) = value.as_table() {
            collect_keys(inner, &path, out);
        }
        out.insert(path);
    }
}

#[cfg(unix)]
fn warn_if_key_readable(config: &Config, path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if config.model.api_key.is_none()
        && config.inbox.key.is_none()
        && !config.channels.has_inline_secret()
    {
        return;
    }
    if let Ok(meta) = fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            path = %path.display(),
            "config file contains an API key or token and is readable by other users; consider chmod 600"
        );
    }
}

#[cfg(not(unix))]
fn warn_if_key_readable(_config: &Config, _path: &Path) {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use crate::{AgentConfig, GatewayConfig};

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
        assert_eq!(
            c.agent.toolsets,
            vec![
                "terminal",
                "file",
                "todo",
                "memory",
                "session_search",
                "delegate"
            ]
        );
        assert_eq!(c.agent.system_prompt, None);
        assert!(c.agent.loop_guard);
        assert_eq!((c.agent.loop_warn_after, c.agent.loop_stop_after), (3, 5));
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
        // Every key has a source, the ones no hand-kept list named included.
        for key in [
            "model.api_key",
            "gateway.idle_reset",
            "inbox.keep_waits_on_reset",
            "processes.max_running",
            "processes.ssh",
            "inbox.policy.expiry_outcome",
            "sandbox.env.keep",
        ] {
            assert!(eff.sources.contains_key(key), "{key}");
        }
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
context_length = 32768
vision = true

[agent]
max_iterations = 5
toolsets = ["terminal"]
system_prompt = "be brief"
loop_guard = false
loop_warn_after = 2
loop_stop_after = 9

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
        assert!(!c.agent.loop_guard);
        assert_eq!((c.agent.loop_warn_after, c.agent.loop_stop_after), (2, 9));
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
        for (key, source) in &eff.sources {
            // The sections the file sets in full.
            if ["model.", "agent.", "tools.", "approvals."]
                .iter()
                .any(|p| key.starts_with(p))
            {
                assert_eq!(*source, Source::File, "{key}");
            }
        }
        assert_eq!(eff.source("sandbox.env.keep"), Source::File);
        assert_eq!(eff.source("gateway.idle_reset"), Source::Default);
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
}
