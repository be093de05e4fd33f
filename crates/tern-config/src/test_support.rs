//! Helpers shared by the unit tests: a temporary home, a config file, a fake environment.

use std::collections::HashMap;
use std::fs;

use crate::Home;

pub(crate) fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| map.get(k).cloned()
}

pub(crate) fn no_env(_: &str) -> Option<String> {
    None
}

pub(crate) fn temp_home() -> (tempfile::TempDir, Home) {
    let dir = tempfile::tempdir().unwrap();
    let home = Home {
        root: dir.path().join("home"),
    };
    home.ensure().unwrap();
    (dir, home)
}

pub(crate) fn write_config(home: &Home, text: &str) {
    fs::write(home.config_path(), text).unwrap();
}

pub(crate) const HOOKS_TOML: &str = r#"
[gateway]
max_concurrent_turns = 4

[[hooks]]
name = "audit"
events = ["turn_start", "turn_end"]
command = "cat >> /tmp/audit.jsonl"
timeout_ms = 250

[[hooks]]
events = ["*"]
command = "true"

[[webhooks]]
url = "https://hooks.example/tern"
secret = "0123456789abcdef-secret"

[[webhooks]]
name = "ops"
url = "http://user:hunter2pass@ops.example:8080/in?x=1"
secret = "another-secret-of-length"
events = ["agent_loop_stopped"]
timeout_ms = 1000
max_attempts = 2
retry_base_ms = 10
"#;
