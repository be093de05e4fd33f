//! [`render_masked`]: the effective configuration as `tern config show` prints it.
//!
//! What is printed comes from the types ([`Node::of`]), not from a list kept here, so a key
//! added to a config struct shows up without touching this file. Secrets are masked by their
//! key's name ([`SECRET_KEYS`], [`URL_KEYS`]) wherever they sit; each key of a section says
//! where its value came from. Entries of arrays of tables (`[[hooks]]`, `[[inbox.notify]]`, …)
//! only ever come from the file and are shown with their defaults filled in.

use crate::effective::{Effective, Source};
use crate::home::CONFIG_FILE;
use crate::mask::{mask_secret, mask_url};
use crate::tree::Node;

/// Keys whose string values are secrets: shown as [`mask_secret`] does.
const SECRET_KEYS: &[&str] = &[
    "api_key",
    "key",
    "secret",
    "token",
    "access_token",
    "password",
];
/// Keys whose values are URLs, which may carry a password: shown as [`mask_url`] does.
const URL_KEYS: &[&str] = &["url", "base_url", "public_url", "api_url", "homeserver"];
/// Tables of an MCP server whose every value is masked: a server's `env` and `headers` are
/// where its API keys and tokens go, under names no list here could know.
const SECRET_TABLES: &[&str] = &["env", "headers"];

/// Whether the values of the table at `path` are all secrets (`mcp_servers.NAME.env`).
/// Only under `mcp_servers`: `[sandbox.env]` holds variable names, no values.
fn is_secret_table(path: &str) -> bool {
    let mut parts = path.split('.');
    matches!(
        (parts.next(), parts.next(), parts.next(), parts.next()),
        (Some("mcp_servers"), Some(_), Some(table), None) if SECRET_TABLES.contains(&table)
    )
}

/// Renders the effective configuration as TOML-like text with secrets masked
/// and each value annotated with its source, e.g.
/// `base_url = "http://localhost:11434/v1"   # from OPENAI_BASE_URL`.
pub fn render_masked(eff: &Effective) -> String {
    let mut out = if eff.file_found {
        format!("# config file: {}\n", eff.config_path.display())
    } else {
        format!(
            "# config file: {} (not found; using defaults)\n",
            eff.config_path.display()
        )
    };
    match Node::of(&eff.config) {
        Ok(root) => render_table(eff, "", &root, &mut out),
        // Not expected (the types serialize to JSON); say so rather than print half a config.
        Err(e) => out.push_str(&format!("# cannot show the configuration: {e}\n")),
    }
    out
}

/// Renders the table at `path` (`""` for the root): its own keys, aligned and annotated,
/// then its sub-tables and arrays of tables.
fn render_table(eff: &Effective, path: &str, node: &Node, out: &mut String) {
    let Node::Table(fields) = node else { return };
    let mut lines: Vec<(String, String)> = Vec::new();
    let mut nested: Vec<(String, &Node)> = Vec::new();
    let secret_values = is_secret_table(path);
    for (key, value) in fields {
        let full = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        match value {
            Node::Table(_) => nested.push((full, value)),
            v if v.is_array_of_tables() => nested.push((full, value)),
            // The root holds only tables and arrays of tables: an empty array there is one.
            Node::Array(items) if items.is_empty() && path.is_empty() => {
                nested.push((full, value));
            }
            Node::Unset => lines.push((format!("# {key} is not set"), note(eff, &full))),
            Node::String(s) if secret_values => lines.push((
                format!("{} = {}", table_key(key), quote(&mask_secret(s))),
                note(eff, &full),
            )),
            v => lines.push((format!("{key} = {}", inline(key, v)), note(eff, &full))),
        }
    }
    if !path.is_empty() && (!lines.is_empty() || nested.is_empty()) {
        out.push_str(&format!("\n[{path}]\n"));
    }
    let width = lines
        .iter()
        .map(|(t, _)| t.chars().count())
        .max()
        .unwrap_or(0);
    for (text, note) in lines {
        let pad = width - text.chars().count();
        out.push_str(&format!("{text}{:pad$}   # {note}\n", ""));
    }
    for (full, value) in nested {
        match value {
            Node::Array(items) if items.is_empty() => {
                out.push_str(&format!("\n# no [[{full}]] configured\n"));
            }
            Node::Array(items) => {
                for item in items {
                    out.push_str(&format!("\n[[{full}]]   # from {CONFIG_FILE}\n"));
                    if let Node::Table(fields) = item {
                        for (key, value) in fields.iter().filter(|(_, v)| *v != Node::Unset) {
                            out.push_str(&format!("{key} = {}\n", inline(key, value)));
                        }
                    }
                }
            }
            table => render_table(eff, &full, table, out),
        }
    }
}

/// Where the value of `key` came from.
fn note(eff: &Effective, key: &str) -> String {
    match eff.source(key) {
        Source::Default => "default".to_owned(),
        Source::File => format!("from {CONFIG_FILE}"),
        Source::Env(var) => format!("from {var}"),
        Source::Flag if key == "model.name" => "from --model".to_owned(),
        Source::Flag => "from the command line".to_owned(),
    }
}

/// A value on one line; `key` (its own, or its array's) decides the masking.
fn inline(key: &str, value: &Node) -> String {
    match value {
        Node::String(s) if SECRET_KEYS.contains(&key) => quote(&mask_secret(s)),
        Node::String(s) if URL_KEYS.contains(&key) => quote(&mask_url(s)),
        Node::String(s) => quote(s),
        Node::Number(n) => n.clone(),
        Node::Bool(b) => b.to_string(),
        // Only inside arrays: TOML has no null, and the entry it sits in is what matters.
        Node::Unset => "\"\"".to_owned(),
        Node::Array(items) => {
            let items: Vec<String> = items.iter().map(|i| inline(key, i)).collect();
            format!("[{}]", items.join(", "))
        }
        Node::Table(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .filter(|(_, v)| *v != Node::Unset)
                .map(|(k, v)| format!("{} = {}", table_key(k), inline(k, v)))
                .collect();
            if fields.is_empty() {
                "{}".to_owned()
            } else {
                format!("{{ {} }}", fields.join(", "))
            }
        }
    }
}

/// A key of an inline table: bare when TOML allows it (`alice`, `12345`), else quoted
/// (`"@alice:example.org"`).
fn table_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare { key.to_owned() } else { quote(key) }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
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
        assert!(
            line("toolsets = [\"terminal\", \"file\", \"todo\", \"memory\", \"session_search\", \"delegate\"]")
                .ends_with("# default")
        );
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

    // ---- derived from the types: nothing set is left out, secrets stay masked ----

    /// Every dotted key a TOML table sets, tables walked into, arrays of tables not (their
    /// paths are returned with their entries' union of keys).
    fn file_keys(
        table: &toml::Table,
        prefix: &str,
        keys: &mut Vec<String>,
        arrays: &mut Vec<(String, Vec<String>)>,
    ) {
        for (key, value) in table {
            let path = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            match value {
                toml::Value::Table(t) => file_keys(t, &path, keys, arrays),
                toml::Value::Array(items) if items.iter().all(toml::Value::is_table) => {
                    let mut fields: Vec<String> = items
                        .iter()
                        .filter_map(toml::Value::as_table)
                        .flat_map(|t| t.keys().cloned())
                        .collect();
                    fields.sort();
                    fields.dedup();
                    arrays.push((path, fields));
                }
                _ => keys.push(path),
            }
        }
    }

    /// The arrays of tables of a serialized config, with their entries' union of keys.
    fn node_arrays(node: &Node, prefix: &str, out: &mut Vec<(String, Vec<String>)>) {
        let Node::Table(fields) = node else { return };
        for (key, value) in fields {
            let path = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            match value {
                Node::Table(_) => node_arrays(value, &path, out),
                Node::Array(items) if value.is_array_of_tables() => {
                    let mut keys: Vec<String> = items
                        .iter()
                        .flat_map(|i| match i {
                            Node::Table(f) => f.iter().map(|(k, _)| k.clone()).collect(),
                            _ => Vec::new(),
                        })
                        .collect();
                    keys.sort();
                    keys.dedup();
                    out.push((path, keys));
                }
                _ => {}
            }
        }
    }

    /// The rendered lines under each `[section]` header (`""` before the first).
    fn sections(out: &str) -> Vec<(String, Vec<String>)> {
        let mut all = vec![(String::new(), Vec::new())];
        for line in out.lines() {
            if let Some(name) = line.strip_prefix("[[").and_then(|l| l.split("]]").next()) {
                all.push((format!("[[{name}]]"), Vec::new()));
            } else if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                all.push((name.to_owned(), Vec::new()));
            } else if let Some(last) = all.last_mut() {
                last.1.push(line.to_owned());
            }
        }
        all
    }

    /// Fails when a field is added to a config struct (or to an entry of an array of
    /// tables) but not to `FULL_TOML`, so the tests below cover it too.
    #[test]
    fn the_full_file_sets_every_key_the_types_have() {
        let table: toml::Table = toml::from_str(FULL_TOML).unwrap();
        let (mut keys, mut arrays) = (Vec::new(), Vec::new());
        file_keys(&table, "", &mut keys, &mut arrays);
        let config: Config = toml::from_str(FULL_TOML).unwrap();

        for (key, _) in Node::of(&Config::default()).unwrap().leaves() {
            let set = keys.contains(&key)
                || arrays.iter().any(|(a, _)| *a == key)
                // An unset table option (`processes.ssh`): its keys are set.
                || keys.iter().any(|k| k.starts_with(&format!("{key}.")));
            assert!(set, "FULL_TOML does not set {key}");
        }
        let mut from_types = Vec::new();
        node_arrays(&Node::of(&config).unwrap(), "", &mut from_types);
        assert_eq!(from_types.len(), arrays.len(), "{from_types:?}");
        for (path, fields) in &from_types {
            let (_, in_file) = arrays.iter().find(|(a, _)| a == path).unwrap();
            assert_eq!(fields, in_file, "FULL_TOML's [[{path}]] entries");
        }
        // And no key is left at its default, so "from config.toml" below means something.
        let defaults = Node::of(&Config::default()).unwrap();
        let full = Node::of(&config).unwrap();
        let leaf = |n: &Node, key: &str| {
            key.split('.').try_fold(n.clone(), |n, part| match n {
                Node::Table(f) => f.into_iter().find(|(k, _)| k == part).map(|(_, v)| v),
                _ => None,
            })
        };
        for (key, _) in full.leaves() {
            assert_ne!(leaf(&full, &key), leaf(&defaults, &key), "{key}");
        }
    }

    #[test]
    fn every_key_of_the_full_file_is_shown_with_its_source() {
        let (_d, home) = temp_home();
        write_config(&home, FULL_TOML);
        let eff = load(&home, &no_env).unwrap();
        let out = render_masked(&eff);
        let shown = sections(&out);
        let table: toml::Table = toml::from_str(FULL_TOML).unwrap();
        let (mut keys, mut arrays) = (Vec::new(), Vec::new());
        file_keys(&table, "", &mut keys, &mut arrays);
        assert!(keys.len() > 40, "{keys:?}");

        for key in &keys {
            let (section, field) = key.rsplit_once('.').unwrap_or(("", key));
            let lines = shown
                .iter()
                .filter(|(s, _)| s == section)
                .flat_map(|(_, l)| l)
                .collect::<Vec<_>>();
            assert!(
                lines
                    .iter()
                    .any(|l| l.starts_with(&format!("{field} = "))
                        && l.ends_with("# from config.toml")),
                "{key} is not shown as set in [{section}]:\n{out}"
            );
        }
        // The ones `tern config show` used to leave out.
        for key in [
            "gateway.idle_reset",
            "inbox.keep_waits_on_reset",
            "processes.backend",
            "processes.ssh.host",
            "sandbox.env.remove",
        ] {
            assert!(keys.iter().any(|k| k == key), "{key}");
        }
        for (path, _) in &arrays {
            let in_file = table_array_len(&table, path);
            let header = format!("[[{path}]]");
            assert_eq!(
                shown.iter().filter(|(s, _)| *s == header).count(),
                in_file,
                "{path}:\n{out}"
            );
        }
        // Entries are shown with their keys; an argv command as an array.
        assert!(
            out.contains(
                "\n[[hooks]]   # from config.toml\nname = \"argv\"\nevents = [\"*\"]\n\
                 command = [\"notify-send\", \"tern\", \"a b\"]\ntimeout_ms = 300\n"
            ),
            "{out}"
        );
        assert!(
            out.contains("initial_step = \"triage\"\nsteps = [{ name = \"triage\""),
            "{out}"
        );
        // User ids as strings, whatever the file wrote; a key TOML cannot leave bare, quoted.
        assert!(
            out.contains(
                "allowed_users = [\"123456789\", \"987654321\"]\n\
                 reviewers = { 123456789 = \"alice\" }\nprogress = \"all\"\n"
            ),
            "{out}"
        );
        assert!(
            out.contains("reviewers = { \"@alice:example.org\" = \"alice\" }\n"),
            "{out}"
        );
        assert!(
            out.contains(
                "token_env = \"WORK_BOT_TOKEN\"\napi_url = \"https://api.telegram.org\"\n\
                 allowed_users = []\nreviewers = {}\nprogress = \"new\"\npoll_timeout = \"50s\"\n\
                 enabled = true\n"
            ),
            "{out}"
        );
    }

    fn table_array_len(table: &toml::Table, path: &str) -> usize {
        let mut parts: Vec<&str> = path.split('.').collect();
        let last = parts.pop().unwrap();
        let t = parts
            .iter()
            .fold(table, |t, p| t.get(*p).unwrap().as_table().unwrap());
        t.get(last).unwrap().as_array().unwrap().len()
    }

    #[test]
    fn secrets_of_the_full_file_stay_masked() {
        let (_d, home) = temp_home();
        write_config(&home, FULL_TOML);
        let eff = load(&home, &no_env).unwrap();
        let out = render_masked(&eff);
        for secret in [
            "sk-model-key-0123456789",
            "modelpass-9876",
            "webhook-secret-0123456789",
            "webhookpass-1234",
            "inbox-agent-key-0123456789",
            "notify-secret-0123456789",
            "telegram-bot-token",
            "matrix-access-token",
            "mcp-env-secret",
            "mcp-header-secret",
        ] {
            assert!(!out.contains(secret), "{secret} shown:\n{out}");
        }
        for masked in [
            "api_key = \"sk-…6789\"",
            "base_url = \"http://user:****@llm.example:11434/v1\"",
            "secret = \"web…6789\"",
            "url = \"https://user:****@ops.example/in\"",
            "key = \"inb…6789\"",
            "secret = \"not…6789\"",
            "token = \"123…6789\"",
            "access_token = \"syt…6789\"",
            // Where a secret comes from is no secret: the names are shown.
            "token_env = \"WORK_BOT_TOKEN\"",
            "token_file = \"secrets/telegram.token\"",
            "access_token_env = \"MATRIX_TOKEN\"",
            "access_token_file = \"/run/secrets/matrix.token\"",
            // An MCP server's env and headers, whatever their names.
            "GITHUB_TOKEN = \"mcp…6789\"",
            "Authorization = \"Bea…6789\"",
            "bearer_token_env = \"MCP_TOKEN\"",
        ] {
            assert!(out.contains(masked), "{masked} not in:\n{out}");
        }
        // From the environment too.
        let env = env_of(&[("OPENAI_API_KEY", "sk-from-the-env-4321")]);
        let out = render_masked(&load(&home, &env).unwrap());
        assert!(!out.contains("sk-from-the-env-4321"), "{out}");
        assert!(
            out.lines()
                .any(|l| l.starts_with("api_key = \"sk-…4321\"")
                    && l.ends_with("# from OPENAI_API_KEY")),
            "{out}"
        );
    }

    /// Serializing the types is what makes the output complete: a field skipped when
    /// serialized would be missing from `tern config show` (and from the tests above).
    #[test]
    fn no_config_type_skips_a_field_when_serialized() {
        for (file, text) in [
            ("agent.rs", include_str!("agent.rs")),
            ("channels.rs", include_str!("channels.rs")),
            ("config.rs", include_str!("config.rs")),
            ("cron.rs", include_str!("cron.rs")),
            ("delegate.rs", include_str!("delegate.rs")),
            ("gateway.rs", include_str!("gateway.rs")),
            ("hooks.rs", include_str!("hooks.rs")),
            ("inbox.rs", include_str!("inbox.rs")),
            ("mcp.rs", include_str!("mcp.rs")),
            ("memory.rs", include_str!("memory.rs")),
            ("model.rs", include_str!("model.rs")),
            ("processes.rs", include_str!("processes.rs")),
            ("sandbox.rs", include_str!("sandbox.rs")),
            ("ssh.rs", include_str!("ssh.rs")),
        ] {
            for attr in ["skip_serializing", "serde(skip", "skip)"] {
                assert!(
                    !text.contains(&format!("#[{attr}")) && !text.contains(&format!("({attr}")),
                    "{file} has a {attr} attribute"
                );
            }
        }
    }
}
