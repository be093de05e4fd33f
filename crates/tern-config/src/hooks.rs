//! `[[hooks]]` and `[[webhooks]]`: the lifecycle events' subscribers (see `docs/hooks.md`),
//! checked when the file is loaded.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::address::is_http_url;
use crate::error::ConfigError;
use crate::mask::{mask_secret, mask_url};

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
    "tool_progress",
    "agent_loop_stopped",
    "wait_created",
    "wait_resolved",
    "process_started",
    "process_exited",
    "pre_compact",
    "post_compact",
    "cron_run_started",
    "cron_run_finished",
];

/// One `[[hooks]]` entry: a command run with the event's JSON on stdin.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CommandHookConfig {
    /// A name for logs; defaults to the command cut to 40 characters.
    #[serde(default)]
    pub name: Option<String>,
    /// Event names, or `"*"` for all.
    pub events: Vec<String>,
    /// A command line for `sh -c`, or a program and its arguments run directly.
    pub command: HookCommand,
    /// After this the hook's process group is killed.
    #[serde(default = "default_hook_timeout_ms")]
    pub timeout_ms: u64,
}

/// `[[hooks]] command`: `command = "notify-send tern done"` runs through `sh -c`;
/// `command = ["notify-send", "tern", "done"]` runs the program directly, each element one
/// argument as written (no shell: no word splitting, quoting, globbing or `$VARS`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum HookCommand {
    /// A command line for `sh -c`.
    Shell(String),
    /// The program (looked up in `PATH` unless it has a `/`) and its arguments.
    Argv(Vec<String>),
}

impl HookCommand {
    /// The command on one line, for logs and default names: the shell line, or the argv
    /// joined with spaces.
    pub fn display(&self) -> String {
        match self {
            HookCommand::Shell(line) => line.trim().to_owned(),
            HookCommand::Argv(argv) => argv.join(" "),
        }
    }

    /// Why the command cannot run, if it cannot: an empty line, an empty array, an empty
    /// program.
    pub fn problem(&self) -> Option<&'static str> {
        match self {
            HookCommand::Shell(line) if line.trim().is_empty() => Some("must not be empty"),
            HookCommand::Argv(argv) => match argv.first() {
                None => Some(
                    "must not be an empty array: give the program and its arguments, \
                     e.g. [\"notify-send\", \"tern\"]",
                ),
                Some(program) if program.trim().is_empty() => {
                    Some("has an empty program: the array's first element names what to run")
                }
                Some(_) => None,
            },
            HookCommand::Shell(_) => None,
        }
    }
}

impl From<&str> for HookCommand {
    fn from(line: &str) -> Self {
        HookCommand::Shell(line.to_owned())
    }
}

impl From<Vec<String>> for HookCommand {
    fn from(argv: Vec<String>) -> Self {
        HookCommand::Argv(argv)
    }
}

// By hand, so a wrong type's error says what is accepted.
impl<'de> Deserialize<'de> for HookCommand {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct CommandVisitor;
        impl<'de> serde::de::Visitor<'de> for CommandVisitor {
            type Value = HookCommand;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a command line (a string, run with sh -c) or an array of strings \
                     (the program and its arguments, run directly)",
                )
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<HookCommand, E> {
                Ok(HookCommand::Shell(v.to_owned()))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<HookCommand, A::Error> {
                let mut argv = Vec::new();
                while let Some(arg) = seq.next_element::<String>()? {
                    argv.push(arg);
                }
                Ok(HookCommand::Argv(argv))
            }
        }
        d.deserialize_any(CommandVisitor)
    }
}

fn default_hook_timeout_ms() -> u64 {
    5000
}

/// One `[[webhooks]]` entry: a URL that events are POSTed to, signed with `secret`.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// A name for logs; defaults to the URL without its query.
    #[serde(default)]
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

/// Describes entry `index` of an array of tables (`[[hooks]]`, `[[webhooks]]`) and one of
/// its fields, for error messages. Those entries only ever come from the file.
fn entry_origin(config_path: &Path, array: &str, index: usize, field: &str) -> String {
    format!("{array}[{index}].{field} in {}", config_path.display())
}

/// Checks a subscriber's `events`: not empty, each a known event name or `"*"`.
fn validate_events(
    config_path: &Path,
    array: &str,
    index: usize,
    events: &[String],
) -> Result<(), ConfigError> {
    if events.is_empty() {
        return Err(ConfigError::Invalid(format!(
            "{} must not be empty: list event names, or \"*\" for all",
            entry_origin(config_path, array, index, "events")
        )));
    }
    if let Some(bad) = events
        .iter()
        .find(|e| e.as_str() != "*" && !HOOK_EVENT_NAMES.contains(&e.as_str()))
    {
        return Err(ConfigError::Invalid(format!(
            "{}: unknown event {bad:?} (known: {}; or \"*\" for all)",
            entry_origin(config_path, array, index, "events"),
            HOOK_EVENT_NAMES.join(", ")
        )));
    }
    Ok(())
}

/// Checks `[[hooks]]` and `[[webhooks]]`; errors name the entry, the key and the file.
pub(crate) fn validate_hooks(
    hooks: &[CommandHookConfig],
    webhooks: &[WebhookConfig],
    config_path: &Path,
) -> Result<(), ConfigError> {
    for (i, hook) in hooks.iter().enumerate() {
        validate_events(config_path, "hooks", i, &hook.events)?;
        if let Some(problem) = hook.command.problem() {
            return Err(ConfigError::Invalid(format!(
                "{} {problem}",
                entry_origin(config_path, "hooks", i, "command")
            )));
        }
        if hook.timeout_ms < 1 {
            return Err(ConfigError::Invalid(format!(
                "{} must be at least 1 (got 0)",
                entry_origin(config_path, "hooks", i, "timeout_ms")
            )));
        }
    }
    for (i, hook) in webhooks.iter().enumerate() {
        if !is_http_url(hook.url.trim()) {
            return Err(ConfigError::Invalid(format!(
                "{} is not a URL: {:?} (it must start with http:// or https://)",
                entry_origin(config_path, "webhooks", i, "url"),
                mask_url(&hook.url)
            )));
        }
        let secret_len = hook.secret.chars().count();
        if secret_len < 16 {
            // Never echo the secret itself, not even a short one.
            return Err(ConfigError::Invalid(format!(
                "{} is too short: it must have at least 16 characters (got {secret_len})",
                entry_origin(config_path, "webhooks", i, "secret")
            )));
        }
        validate_events(config_path, "webhooks", i, &hook.events)?;
        for (field, value) in [
            ("timeout_ms", hook.timeout_ms),
            ("max_attempts", u64::from(hook.max_attempts)),
            ("retry_base_ms", hook.retry_base_ms),
        ] {
            if value < 1 {
                return Err(ConfigError::Invalid(format!(
                    "{} must be at least 1 (got 0)",
                    entry_origin(config_path, "webhooks", i, field)
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use crate::{ConfigError, Source, load};

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
                    command: "cat >> /tmp/audit.jsonl".into(),
                    timeout_ms: 250,
                },
                CommandHookConfig {
                    name: None,
                    events: vec!["*".to_owned()],
                    command: "true".into(),
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
                "[[hooks]]\nevents = [\"*\"]\ncommand = []\n".to_owned(),
                "hooks[0].command in ",
            ),
            (
                "[[hooks]]\nevents = [\"*\"]\ncommand = [\"\", \"x\"]\n".to_owned(),
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
    fn a_command_is_a_shell_line_or_an_argv() {
        let (_d, home) = temp_home();
        write_config(
            &home,
            "[[hooks]]\nevents = [\"*\"]\ncommand = [\"sh\", \"-c\", \"echo hi\"]\n\n\
             [[hooks]]\nevents = [\"*\"]\ncommand = \"echo hi\"\n",
        );
        let hooks = load(&home, &no_env).unwrap().config.hooks;
        assert_eq!(
            hooks[0].command,
            HookCommand::Argv(vec!["sh".into(), "-c".into(), "echo hi".into()])
        );
        assert_eq!(hooks[0].command.display(), "sh -c echo hi");
        assert_eq!(hooks[1].command, HookCommand::Shell("echo hi".into()));

        for (command, says) in [
            ("[]", "must not be an empty array"),
            ("[\" \"]", "has an empty program"),
            ("\"\"", "must not be empty"),
        ] {
            write_config(
                &home,
                &format!("[[hooks]]\nevents = [\"*\"]\ncommand = {command}\n"),
            );
            let e = load(&home, &no_env).unwrap_err().to_string();
            assert!(
                e.contains("hooks[0].command in ") && e.contains(says),
                "{command}: {e}"
            );
        }
        for command in ["3", "[1, 2]", "{ program = \"x\" }"] {
            write_config(
                &home,
                &format!("[[hooks]]\nevents = [\"*\"]\ncommand = {command}\n"),
            );
            let e = load(&home, &no_env).unwrap_err();
            assert!(matches!(e, ConfigError::Parse { .. }), "{command}: {e:?}");
        }
        write_config(&home, "[[hooks]]\nevents = [\"*\"]\ncommand = 3\n");
        let e = load(&home, &no_env).unwrap_err().to_string();
        assert!(
            e.contains("a command line (a string, run with sh -c) or an array"),
            "{e}"
        );
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
}
