//! `[mcp_servers.NAME]`: the MCP servers whose tools tern's agent may use (issue 17), in the
//! shape codex and Hermes read: a stdio server is a `command` with `args`, `env` and `cwd`; a
//! streamable HTTP server is a `url` with `headers` and a bearer token read from
//! `bearer_token_env`. `env` and `headers` often carry credentials, so `tern config show`
//! masks their values (`render.rs`). `sources` keeps a server's tools to some kinds of
//! session ([`McpSource`], matched against the store's `sessions.source`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::address::is_http_url;
use crate::duration::parse_duration;
use crate::error::ConfigError;

/// How long a server has to start and answer `initialize`, by default.
pub const DEFAULT_MCP_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one tool call may take, by default.
pub const DEFAULT_MCP_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// One `[mcp_servers.NAME]` table. Its `Debug` shows the names of `env` and `headers`, never
/// their values, nor a URL's password.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The program of a stdio server (looked up on `PATH`).
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set in its environment, on top of tern's own.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Its working directory; unset: tern's.
    pub cwd: Option<String>,
    /// The endpoint of a streamable HTTP server.
    pub url: Option<String>,
    /// Headers sent with every request to `url`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The environment variable holding a bearer token for `url` (the name, not the token).
    pub bearer_token_env: Option<String>,
    /// How long the server has to start and answer `initialize`.
    #[serde(default = "default_startup_timeout")]
    pub startup_timeout: String,
    /// How long one tool call may take.
    #[serde(default = "default_tool_timeout")]
    pub tool_timeout: String,
    /// Only these of the server's tools are offered; unset: all of them.
    pub enabled_tools: Option<Vec<String>>,
    /// These of the server's tools are never offered.
    #[serde(default)]
    pub disabled_tools: Vec<String>,
    /// `false`: the server is kept in the file but not started.
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// When the server is started: with the gateway (or `tern chat`), or at its first call.
    #[serde(default)]
    pub startup: McpStartup,
    /// The sandbox of a stdio server: unset, the agent's (`[sandbox]`); `"none"` (or
    /// `"full-access"`): none; `"read-only"`/`"workspace-write"`: that mode with the rest of
    /// `[sandbox]`.
    pub sandbox: Option<McpSandbox>,
    /// The sessions whose turns get the server's tools, by where they come from; unset: all.
    pub sources: Option<Vec<McpSource>>,
}

/// Where a session comes from, as `sources` names it: the `source` the gateway and `tern
/// chat` store on the sessions they create, with `chat` for any chat channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum McpSource {
    /// The session API (`/api/sessions`).
    Api,
    /// The OpenAI-compatible endpoint (`/v1/chat/completions`).
    Openai,
    /// Sessions of tern's own MCP server (`session_chat`, `process_start`).
    Mcp,
    /// Any chat channel: `telegram`, `matrix`, and platforms added later.
    Chat,
    Telegram,
    Matrix,
    /// Scheduled jobs' runs.
    Cron,
    /// `tern chat`.
    Cli,
}

/// The chat platforms' session sources, which `chat` stands for.
pub const CHAT_SOURCES: &[&str] = &["telegram", "matrix"];

impl McpSource {
    pub fn as_str(self) -> &'static str {
        match self {
            McpSource::Api => "api",
            McpSource::Openai => "openai",
            McpSource::Mcp => "mcp",
            McpSource::Chat => "chat",
            McpSource::Telegram => "telegram",
            McpSource::Matrix => "matrix",
            McpSource::Cron => "cron",
            McpSource::Cli => "cli",
        }
    }

    /// Whether a session whose stored `source` is `source` is one of these.
    pub fn matches(self, source: &str) -> bool {
        match self {
            McpSource::Chat => CHAT_SOURCES.contains(&source),
            other => other.as_str() == source,
        }
    }
}

/// When a server is started (`startup`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum McpStartup {
    /// With the gateway or `tern chat`, all servers at once.
    #[default]
    Eager,
    /// At the first call of one of its tools.
    Lazy,
}

impl McpStartup {
    pub fn as_str(self) -> &'static str {
        match self {
            McpStartup::Eager => "eager",
            McpStartup::Lazy => "lazy",
        }
    }
}

/// A stdio server's sandbox (`sandbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum McpSandbox {
    /// No sandbox (same as `full-access`).
    None,
    ReadOnly,
    WorkspaceWrite,
    FullAccess,
}

impl McpSandbox {
    pub fn as_str(self) -> &'static str {
        match self {
            McpSandbox::None => "none",
            McpSandbox::ReadOnly => "read-only",
            McpSandbox::WorkspaceWrite => "workspace-write",
            McpSandbox::FullAccess => "full-access",
        }
    }
}

fn default_startup_timeout() -> String {
    "10s".to_owned()
}

fn default_tool_timeout() -> String {
    "60s".to_owned()
}

fn default_enabled() -> bool {
    true
}

impl std::fmt::Debug for McpServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let masked =
            |m: &BTreeMap<String, String>| m.keys().map(|k| format!("{k}=***")).collect::<Vec<_>>();
        f.debug_struct("McpServerConfig")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &masked(&self.env))
            .field("cwd", &self.cwd)
            .field("url", &self.url.as_deref().map(crate::mask::mask_url))
            .field("headers", &masked(&self.headers))
            .field("bearer_token_env", &self.bearer_token_env)
            .field("startup_timeout", &self.startup_timeout)
            .field("tool_timeout", &self.tool_timeout)
            .field("enabled_tools", &self.enabled_tools)
            .field("disabled_tools", &self.disabled_tools)
            .field("enabled", &self.enabled)
            .field("startup", &self.startup)
            .field("sandbox", &self.sandbox)
            .field("sources", &self.sources)
            .finish()
    }
}

/// How a server is reached, from a validated [`McpServerConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport<'a> {
    Stdio {
        command: &'a str,
        args: &'a [String],
        env: &'a BTreeMap<String, String>,
        cwd: Option<&'a str>,
    },
    Http {
        url: &'a str,
        headers: &'a BTreeMap<String, String>,
        bearer_token_env: Option<&'a str>,
    },
}

impl McpServerConfig {
    /// The transport; a validated config has exactly one of `command` and `url`.
    pub fn transport(&self) -> McpTransport<'_> {
        match (&self.command, &self.url) {
            (Some(command), _) => McpTransport::Stdio {
                command,
                args: &self.args,
                env: &self.env,
                cwd: self.cwd.as_deref(),
            },
            (None, url) => McpTransport::Http {
                url: url.as_deref().unwrap_or_default(),
                headers: &self.headers,
                bearer_token_env: self.bearer_token_env.as_deref(),
            },
        }
    }

    /// `startup_timeout` as a duration (checked when the file is loaded).
    pub fn startup_timeout(&self) -> Duration {
        parse_duration(&self.startup_timeout).unwrap_or(DEFAULT_MCP_STARTUP_TIMEOUT)
    }

    /// `tool_timeout` as a duration (checked when the file is loaded).
    pub fn tool_timeout(&self) -> Duration {
        parse_duration(&self.tool_timeout).unwrap_or(DEFAULT_MCP_TOOL_TIMEOUT)
    }

    /// Whether the server's tool `name` is offered (`enabled_tools`, then `disabled_tools`).
    pub fn offers_tool(&self, name: &str) -> bool {
        let enabled = self
            .enabled_tools
            .as_ref()
            .is_none_or(|tools| tools.iter().any(|t| t == name));
        enabled && !self.disabled_tools.iter().any(|t| t == name)
    }

    /// Whether turns of a session from `source` (its stored `sessions.source`) get the
    /// server's tools. A source no value of `sources` names — one tern adds later — does not:
    /// a restricted server stays restricted.
    pub fn serves(&self, source: &str) -> bool {
        self.sources
            .as_ref()
            .is_none_or(|sources| sources.iter().any(|s| s.matches(source)))
    }
}

/// Whether `name` may name a server: it becomes part of tool names (`mcp__NAME__tool`), which
/// OpenAI function calling limits to `[a-zA-Z0-9_-]`.
pub fn is_valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

pub(crate) fn validate_mcp_servers(
    servers: &BTreeMap<String, McpServerConfig>,
    config_path: &Path,
) -> Result<(), ConfigError> {
    for (name, server) in servers {
        let invalid = |problem: String| {
            ConfigError::Invalid(format!(
                "[mcp_servers.{name}] in {}: {problem}",
                config_path.display()
            ))
        };
        if !is_valid_server_name(name) {
            return Err(ConfigError::Invalid(format!(
                "[mcp_servers.{name:?}] in {}: a server's name may only have letters, digits, `_` and `-` (it becomes part of its tools' names, mcp__NAME__TOOL)",
                config_path.display()
            )));
        }
        match (&server.command, &server.url) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "set either `command` (a stdio server) or `url` (a streamable HTTP server), not both"
                        .to_owned(),
                ));
            }
            (None, None) => {
                return Err(invalid(
                    "set `command` (a stdio server) or `url` (a streamable HTTP server)".to_owned(),
                ));
            }
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(invalid("`command` is empty".to_owned()));
                }
                let http_only = [
                    ("headers", !server.headers.is_empty()),
                    ("bearer_token_env", server.bearer_token_env.is_some()),
                ];
                if let Some((key, _)) = http_only.iter().find(|(_, set)| *set) {
                    return Err(invalid(format!(
                        "`{key}` is for a `url` server; a `command` server takes `args`, `env` and `cwd`"
                    )));
                }
                if server.cwd.as_deref().is_some_and(|c| c.trim().is_empty()) {
                    return Err(invalid(
                        "`cwd` is empty; remove it to start the server in tern's directory"
                            .to_owned(),
                    ));
                }
            }
            (None, Some(url)) => {
                if !is_http_url(url) {
                    return Err(invalid(format!(
                        "`url` is not a URL: {:?} (it must start with http:// or https://)",
                        crate::mask::mask_url(url)
                    )));
                }
                let stdio_only = [
                    ("args", !server.args.is_empty()),
                    ("env", !server.env.is_empty()),
                    ("cwd", server.cwd.is_some()),
                    ("sandbox", server.sandbox.is_some()),
                ];
                if let Some((key, _)) = stdio_only.iter().find(|(_, set)| *set) {
                    return Err(invalid(format!(
                        "`{key}` is for a `command` server; a `url` server takes `headers` and `bearer_token_env`"
                    )));
                }
                if server
                    .bearer_token_env
                    .as_deref()
                    .is_some_and(|v| v.trim().is_empty())
                {
                    return Err(invalid(
                        "`bearer_token_env` is empty; give the name of the variable holding the token"
                            .to_owned(),
                    ));
                }
                if let Some(header) = server.headers.keys().find(|h| !is_header_name(h)) {
                    return Err(invalid(format!(
                        "`headers` has {header:?}, which is not an HTTP header name"
                    )));
                }
            }
        }
        for (key, value) in [
            ("startup_timeout", &server.startup_timeout),
            ("tool_timeout", &server.tool_timeout),
        ] {
            parse_duration(value).map_err(|e| invalid(format!("`{key}`: {e}")))?;
        }
        if let Some(both) = server
            .enabled_tools
            .iter()
            .flatten()
            .find(|t| server.disabled_tools.contains(t))
        {
            return Err(invalid(format!(
                "{both:?} is in both `enabled_tools` and `disabled_tools`"
            )));
        }
        if server.sources.as_ref().is_some_and(Vec::is_empty) {
            return Err(invalid(
                "`sources` is empty: no session would get the server's tools; remove `sources` for every session, or set `enabled = false` to keep the server off"
                    .to_owned(),
            ));
        }
    }
    Ok(())
}

/// An RFC 9110 token: what a header's name may be.
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load;
    use crate::test_support::*;

    #[test]
    fn debug_never_shows_a_secret() {
        let server: McpServerConfig = toml::from_str(
            "url = \"https://u:pw-secret@mcp.example/mcp\"\nheaders = { X-Token = \"header-secret\" }\n",
        )
        .unwrap();
        let stdio: McpServerConfig =
            toml::from_str("command = \"node\"\nenv = { API_KEY = \"env-secret\" }\n").unwrap();
        let text = format!("{server:?} {stdio:?}");
        for secret in ["pw-secret", "header-secret", "env-secret"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(
            text.contains("X-Token=***") && text.contains("API_KEY=***"),
            "{text}"
        );
    }

    #[test]
    fn a_stdio_server_with_defaults() {
        let (_d, home) = temp_home();
        write_config(
            &home,
            "[mcp_servers.everything]\ncommand = \"node\"\nargs = [\"index.js\", \"stdio\"]\n",
        );
        let eff = load(&home, &no_env).unwrap();
        let server = &eff.config.mcp_servers["everything"];
        assert_eq!(server.startup_timeout(), Duration::from_secs(10));
        assert_eq!(server.tool_timeout(), Duration::from_secs(60));
        assert!(server.enabled);
        assert!(server.offers_tool("echo"));
        assert_eq!(server.startup, McpStartup::Eager);
        assert_eq!(server.sandbox, None);
        assert_eq!(
            server.transport(),
            McpTransport::Stdio {
                command: "node",
                args: &["index.js".to_owned(), "stdio".to_owned()],
                env: &BTreeMap::new(),
                cwd: None,
            }
        );
    }

    #[test]
    fn enabled_and_disabled_tools_filter() {
        let server: McpServerConfig = toml::from_str(
            "command = \"x\"\nenabled_tools = [\"echo\", \"get-sum\"]\ndisabled_tools = [\"get-env\"]\n",
        )
        .unwrap();
        assert!(server.offers_tool("echo"));
        assert!(!server.offers_tool("get-env"));
        assert!(!server.offers_tool("get-tiny-image"));
        let server: McpServerConfig =
            toml::from_str("command = \"x\"\ndisabled_tools = [\"get-env\"]\n").unwrap();
        assert!(server.offers_tool("get-tiny-image"));
        assert!(!server.offers_tool("get-env"));
    }

    #[test]
    fn bad_servers_are_refused_with_what_to_fix() {
        let (_d, home) = temp_home();
        for (text, expect) in [
            ("[mcp_servers.a]\nargs = [\"x\"]\n", "[mcp_servers.a] in"),
            ("[mcp_servers.a]\nargs = [\"x\"]\n", "set `command`"),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nurl = \"http://h/mcp\"\n",
                "not both",
            ),
            (
                "[mcp_servers.\"a.b\"]\ncommand = \"x\"\n",
                "may only have letters, digits",
            ),
            ("[mcp_servers.\"\"]\ncommand = \"x\"\n", "may only have"),
            ("[mcp_servers.a]\ncommand = \" \"\n", "`command` is empty"),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nheaders = { A = \"b\" }\n",
                "`headers` is for a `url` server",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nbearer_token_env = \"T\"\n",
                "`bearer_token_env` is for a `url` server",
            ),
            ("[mcp_servers.a]\nurl = \"ftp://h\"\n", "`url` is not a URL"),
            (
                "[mcp_servers.a]\nurl = \"http://h/mcp\"\nenv = { A = \"b\" }\n",
                "`env` is for a `command` server",
            ),
            (
                "[mcp_servers.a]\nurl = \"http://h/mcp\"\nsandbox = \"none\"\n",
                "`sandbox` is for a `command` server",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nstartup = \"later\"\n",
                "unknown variant `later`",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nsandbox = \"jail\"\n",
                "unknown variant `jail`",
            ),
            (
                "[mcp_servers.a]\nurl = \"http://h/mcp\"\nheaders = { \"a b\" = \"c\" }\n",
                "not an HTTP header name",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nstartup_timeout = \"soon\"\n",
                "`startup_timeout`: \"soon\" is not a duration",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\ntool_timeout = \"0s\"\n",
                "`tool_timeout`: \"0s\" must be longer than zero",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nenabled_tools = [\"e\"]\ndisabled_tools = [\"e\"]\n",
                "in both",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nport = 1\n",
                "unknown field",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nsources = [\"cron\", \"slack\"]\n",
                "unknown variant `slack`, expected one of `api`, `openai`, `mcp`, `chat`, `telegram`, `matrix`, `cron`, `cli`",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nsources = []\n",
                "`sources` is empty",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nsources = \"cron\"\n",
                "invalid type: string \"cron\", expected a sequence",
            ),
        ] {
            write_config(&home, text);
            let err = load(&home, &no_env).unwrap_err().to_string();
            assert!(err.contains(expect), "{text}: {err}");
        }
    }

    #[test]
    fn an_http_server_is_validated() {
        let (_d, home) = temp_home();
        write_config(
            &home,
            "[mcp_servers.remote]\nurl = \"https://mcp.example/mcp\"\nheaders = { X-Team = \"t1\" }\nbearer_token_env = \"MCP_TOKEN\"\nenabled = false\n",
        );
        let eff = load(&home, &no_env).unwrap();
        let server = &eff.config.mcp_servers["remote"];
        assert!(!server.enabled);
        assert!(matches!(
            server.transport(),
            McpTransport::Http {
                url: "https://mcp.example/mcp",
                bearer_token_env: Some("MCP_TOKEN"),
                ..
            }
        ));
    }

    #[test]
    fn sources_keep_a_server_to_some_sessions() {
        let (_d, home) = temp_home();
        write_config(
            &home,
            "[mcp_servers.jobs]\ncommand = \"x\"\nsources = [\"cron\", \"chat\"]\n\n\
             [mcp_servers.all]\ncommand = \"y\"\n",
        );
        let eff = load(&home, &no_env).unwrap();
        let jobs = &eff.config.mcp_servers["jobs"];
        assert_eq!(jobs.sources, Some(vec![McpSource::Cron, McpSource::Chat]));
        for source in ["cron", "telegram", "matrix"] {
            assert!(jobs.serves(source), "{source}");
        }
        // A child session (`delegate`) is none of them: it gets its parent's toolsets, which
        // the agent does not filter again; anything else is left out, unknown sources too.
        for source in [
            "api", "openai", "mcp", "cli", "delegate", "chat", "", "CRON",
        ] {
            assert!(!jobs.serves(source), "{source}");
        }
        let all = &eff.config.mcp_servers["all"];
        assert_eq!(all.sources, None);
        for source in ["api", "cron", "telegram", "cli", "something-new"] {
            assert!(all.serves(source), "{source}");
        }
    }

    #[test]
    fn each_source_matches_its_own_name() {
        let every = [
            McpSource::Api,
            McpSource::Openai,
            McpSource::Mcp,
            McpSource::Chat,
            McpSource::Telegram,
            McpSource::Matrix,
            McpSource::Cron,
            McpSource::Cli,
        ];
        for s in every {
            // The name `sources` is written with is the name serde reads.
            let parsed: McpSource =
                serde_json::from_value(serde_json::Value::String(s.as_str().to_owned())).unwrap();
            assert_eq!(parsed, s);
            if s != McpSource::Chat {
                assert!(s.matches(s.as_str()), "{s:?}");
            }
        }
        assert!(McpSource::Chat.matches("telegram") && McpSource::Chat.matches("matrix"));
        assert!(!McpSource::Telegram.matches("matrix"));
    }
}
