//! `tern config show`: every key a config file sets is printed, with where it came from, and
//! secrets stay masked; the header lines are printed once.

use std::process::Command;

const CONFIG: &str = r#"
[model]
api_key = "sk-file-secret-0123456789"
name = "llama3"

[gateway]
idle_reset = "24h"

[[hooks]]
name = "argv"
events = ["turn_end"]
command = ["sh", "-c", "echo 'hi there'"]

[[webhooks]]
url = "https://user:webhookpass@ops.example/in"
secret = "webhook-secret-0123456789"

[inbox]
keep_waits_on_reset = true

[processes]
max_running = 3
backend = "ssh"

[processes.ssh]
host = "build-box"
port = 2222

[sandbox]
mode = "read-only"

[sandbox.env]
keep = ["GITHUB_TOKEN"]

[[channels.telegram]]
token = "123456:telegram-bot-token-secret"
allowed_users = [123456789]

[[channels.matrix]]
homeserver = "https://matrix.example.org"
user_id = "@bot:example.org"
access_token_env = "MATRIX_BOT_TOKEN"
"#;

fn config_show(home: &std::path::Path) -> (String, String, bool) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tern"));
    for k in [
        "OPENAI_BASE_URL",
        "TERN_MODEL",
        "TERN_HOME",
        "TERN_LOG",
        "TERN_INBOX_KEY",
    ] {
        c.env_remove(k);
    }
    let o = c
        .env("TERN_HOME", home)
        .env("OPENAI_API_KEY", "sk-env-secret-9876543210")
        .args(["config", "show"])
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        o.status.success(),
    )
}

/// The lines under `[section]` (or `[[section]]`) headers named `header`.
fn section<'a>(out: &'a str, header: &str) -> Vec<&'a str> {
    let mut lines = Vec::new();
    let mut inside = false;
    for line in out.lines() {
        if line.starts_with('[') {
            inside = line.split("   #").next() == Some(header);
        } else if inside {
            lines.push(line);
        }
    }
    lines
}

#[test]
fn config_show_prints_every_key_that_is_set_with_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("config.toml"), CONFIG).unwrap();
    let (out, err, ok) = config_show(&home);
    assert!(ok, "{err}");

    assert_eq!(out.matches("# config file:").count(), 1, "{out}");
    assert_eq!(out.matches("# tern home:").count(), 1, "{out}");
    assert!(
        out.contains(&format!(
            "# config file: {}\n",
            home.join("config.toml").display()
        )),
        "{out}"
    );

    for (header, line, source) in [
        ("[gateway]", "idle_reset = \"24h\"", "# from config.toml"),
        ("[gateway]", "listen = \"127.0.0.1:8642\"", "# default"),
        (
            "[inbox]",
            "keep_waits_on_reset = true",
            "# from config.toml",
        ),
        ("[processes]", "max_running = 3", "# from config.toml"),
        ("[processes]", "backend = \"ssh\"", "# from config.toml"),
        ("[processes]", "keep_finished = \"30m\"", "# default"),
        (
            "[processes.ssh]",
            "host = \"build-box\"",
            "# from config.toml",
        ),
        ("[processes.ssh]", "port = 2222", "# from config.toml"),
        ("[processes.ssh]", "# user is not set", "# default"),
        ("[sandbox]", "mode = \"read-only\"", "# from config.toml"),
        (
            "[sandbox.env]",
            "keep = [\"GITHUB_TOKEN\"]",
            "# from config.toml",
        ),
        ("[sandbox.env]", "remove = []", "# default"),
        ("[model]", "api_key = \"sk-…3210\"", "# from OPENAI_API_KEY"),
        ("[model]", "name = \"llama3\"", "# from config.toml"),
    ] {
        assert!(
            section(&out, header)
                .iter()
                .any(|l| l.starts_with(line) && l.ends_with(source)),
            "no {line:?} ({source}) under {header}:\n{out}"
        );
    }
    assert_eq!(
        section(&out, "[[hooks]]"),
        [
            "name = \"argv\"",
            "events = [\"turn_end\"]",
            "command = [\"sh\", \"-c\", \"echo 'hi there'\"]",
            "timeout_ms = 5000",
            "",
        ],
        "{out}"
    );

    // A channel's inline token is masked; where an indirect one comes from is shown.
    let telegram = section(&out, "[[channels.telegram]]");
    for line in [
        "name = \"telegram\"",
        "token = \"123…cret\"",
        "allowed_users = [\"123456789\"]",
        "poll_timeout = \"50s\"",
    ] {
        assert!(
            telegram.contains(&line),
            "no {line:?} in {telegram:?}:\n{out}"
        );
    }
    let matrix = section(&out, "[[channels.matrix]]");
    assert!(
        matrix.contains(&"access_token_env = \"MATRIX_BOT_TOKEN\""),
        "{out}"
    );

    for secret in [
        "sk-file-secret-0123456789",
        "sk-env-secret-9876543210",
        "webhook-secret-0123456789",
        "webhookpass",
        "telegram-bot-token-secret",
    ] {
        assert!(!out.contains(secret), "{secret}:\n{out}");
    }
    assert!(out.contains("secret = \"web…6789\""), "{out}");
    assert!(
        out.contains("url = \"https://user:****@ops.example/in\""),
        "{out}"
    );
}

#[test]
fn config_show_without_a_file_says_so_once() {
    let dir = tempfile::tempdir().unwrap();
    let (out, err, ok) = config_show(&dir.path().join("nothing-here"));
    assert!(ok, "{err}");
    assert_eq!(out.matches("# config file:").count(), 1, "{out}");
    assert!(out.contains("(not found; using defaults)"), "{out}");
    assert!(out.contains("# no [[hooks]] configured"), "{out}");
}
