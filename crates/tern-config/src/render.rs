//! [`render_masked`]: the effective configuration as `tern config show` prints it.

use crate::config::Config;
use crate::effective::{Effective, Source};
use crate::home::CONFIG_FILE;
use crate::inbox::InboxConfig;
use crate::mask::{mask_secret, mask_url};

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
    render_inbox_tables(&c.inbox, CONFIG_FILE, &mut out);
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

/// Renders `[inbox.policy]`, `[[inbox.notify]]` (secrets masked) and `[[inbox.projects]]`
/// with their effective values; `public_url` and `max_upload_bytes` are rendered with the
/// other keys, with their sources.
pub(crate) fn render_inbox_tables(c: &InboxConfig, file_name: &str, out: &mut String) {
    let p = &c.policy;
    out.push_str("\n[inbox.policy]\n");
    match &p.expires_after {
        Some(d) => out.push_str(&format!("expires_after = {}\n", quote(d))),
        None => out.push_str("# expires_after is not set: requests wait until decided\n"),
    }
    out.push_str(&format!("expiry_outcome = {}\n", quote(&p.expiry_outcome)));
    out.push_str(&format!(
        "always_review = {}\n",
        quote_array(&p.always_review)
    ));
    for rule in &p.auto_approve {
        out.push_str(&format!(
            "\n[[inbox.policy.auto_approve]]   # from {file_name}\n"
        ));
        out.push_str(&format!("project = {}\n", quote(&rule.project)));
        if let Some(a) = &rule.action {
            out.push_str(&format!("action = {}\n", quote(a)));
        }
        if let Some(s) = &rule.summary {
            out.push_str(&format!("summary = {}\n", quote(s)));
        }
        if let Some(t) = &rule.task {
            out.push_str(&format!("task = {}\n", quote(t)));
        }
    }
    for rule in &p.rate_limit {
        out.push_str(&format!(
            "\n[[inbox.policy.rate_limit]]   # from {file_name}\n"
        ));
        out.push_str(&format!("action = {}\n", quote(&rule.action)));
        out.push_str(&format!("max = {}\n", rule.max));
        out.push_str(&format!("window = {}\n", quote(&rule.window)));
    }
    if c.notify.is_empty() {
        out.push_str("\n# no [[inbox.notify]] configured\n");
    }
    for n in &c.notify {
        out.push_str(&format!("\n[[inbox.notify]]   # from {file_name}\n"));
        out.push_str(&format!("url = {}\n", quote(&mask_url(&n.url))));
        out.push_str(&format!("secret = {}\n", quote(&mask_secret(&n.secret))));
        out.push_str(&format!("max_attempts = {}\n", n.max_attempts));
        out.push_str(&format!("retry_base_ms = {}\n", n.retry_base_ms));
        out.push_str(&format!("timeout_ms = {}\n", n.timeout_ms));
    }
    for project in &c.projects {
        out.push_str(&format!("\n[[inbox.projects]]   # from {file_name}\n"));
        out.push_str(&format!("name = {}\n", quote(&project.name)));
        if let Some(initial) = project.initial_step() {
            out.push_str(&format!("initial_step = {}\n", quote(initial)));
        }
        let steps: Vec<String> = project
            .steps
            .iter()
            .map(|s| {
                let exits = s
                    .exits
                    .as_ref()
                    .map(|e| format!(", exits = {}", quote_array(e)))
                    .unwrap_or_default();
                format!(
                    "{{ name = {}, owner = {}{exits} }}",
                    quote(&s.name),
                    quote(&s.owner)
                )
            })
            .collect();
        out.push_str(&format!("steps = [{}]\n", steps.join(", ")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load;
    use crate::test_support::*;

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
}
