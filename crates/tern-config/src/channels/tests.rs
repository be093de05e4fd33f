use std::time::Duration;

use super::*;
use crate::test_support::*;
use crate::{Config, load, render_masked};

fn channels(text: &str) -> ChannelsConfig {
    let (_d, home) = temp_home();
    write_config(&home, text);
    load(&home, &no_env).unwrap().config.channels
}

fn load_error(text: &str) -> String {
    let (_d, home) = temp_home();
    write_config(&home, text);
    let err = load(&home, &no_env).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("config.toml"), "{msg}");
    msg
}

#[test]
fn no_channels_by_default() {
    let c = Config::default().channels;
    assert!(c.telegram.is_empty() && c.matrix.is_empty());
    assert!(!c.has_inline_secret());
}

#[test]
fn a_minimal_entry_gets_the_defaults() {
    let c = channels(
        "[[channels.telegram]]\ntoken_env = \"TG_TOKEN\"\n\n\
         [[channels.matrix]]\nhomeserver = \"https://matrix.example.org/\"\n\
         user_id = \"@bot:example.org\"\naccess_token_file = \"matrix.token\"\n",
    );
    let t = &c.telegram[0];
    assert_eq!(t.name, "telegram");
    assert_eq!(t.api_url, TELEGRAM_API_URL);
    assert_eq!(t.api_url(), "https://api.telegram.org");
    assert_eq!(t.poll_timeout(), Duration::from_secs(50));
    assert_eq!(t.progress, ProgressMode::New);
    assert!(t.enabled);
    assert!(t.allowed_users.is_empty() && t.reviewers.is_empty());
    let m = &c.matrix[0];
    assert_eq!(m.name, "matrix");
    assert_eq!(m.homeserver(), "https://matrix.example.org");
    assert_eq!(m.poll_timeout(), Duration::from_secs(30));
    assert_eq!(m.progress, ProgressMode::New);
    assert!(m.enabled);
    assert!(!c.has_inline_secret());
}

#[test]
fn the_full_file_s_channels_parse() {
    let c = channels(FULL_TOML);
    let names: Vec<&str> = c.telegram.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["home", "work", "telegram"]);
    let names: Vec<&str> = c.matrix.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["synapse", "lab", "matrix"]);
    let t = &c.telegram[0];
    // Numbers and strings alike.
    assert_eq!(t.allowed_users, ["123456789", "987654321"]);
    assert_eq!(
        t.reviewers.get("123456789").map(String::as_str),
        Some("alice")
    );
    assert_eq!(t.progress, ProgressMode::All);
    assert_eq!(t.poll_timeout(), Duration::from_secs(20));
    assert!(!t.enabled);
    assert_eq!(c.matrix[0].progress, ProgressMode::Off);
    assert_eq!(
        c.matrix[0]
            .reviewers
            .get("@alice:example.org")
            .map(String::as_str),
        Some("alice")
    );
    assert!(c.has_inline_secret());
}

#[test]
fn bad_entries_are_refused_naming_the_entry() {
    let tg = |body: &str| {
        format!("[[channels.telegram]]\ntoken_env = \"T\"\n\n[[channels.telegram]]\n{body}\n")
    };
    let mx = |body: &str| {
        format!(
            "[[channels.matrix]]\nhomeserver = \"https://m.example\"\nuser_id = \"@b:m.example\"\n\
             access_token_env = \"M\"\nname = \"one\"\n\n[[channels.matrix]]\n{body}\n"
        )
    };
    let mx_base = "homeserver = \"https://m.example\"\nuser_id = \"@b:m.example\"\n";
    for (text, expect) in [
        (tg("name = \"two\""), "[[channels.telegram]] #2 in "),
        (
            tg("name = \"two\""),
            "set exactly one of token, token_env and token_file (got 0)",
        ),
        (
            tg("name = \"two\"\ntoken = \"x\"\ntoken_env = \"T\""),
            "set exactly one of token, token_env and token_file (got 2)",
        ),
        (
            tg("name = \"two\"\ntoken = \"  \""),
            "[[channels.telegram]] #2 token in ",
        ),
        (tg("name = \"two\"\ntoken_env = \"A B\""), "token_env in"),
        (tg("name = \"two\"\ntoken_file = \"\""), "token_file in"),
        (
            tg("name = \"Two!\"\ntoken_env = \"T\""),
            "[[channels.telegram]] #2 name in",
        ),
        (tg("name = \"\"\ntoken_env = \"T\""), "a-z, 0-9, _ and -"),
        (
            tg("token_env = \"T\""),
            "another channel is already named \"telegram\"",
        ),
        (
            tg("name = \"two\"\ntoken_env = \"T\"\napi_url = \"api.telegram.org\""),
            "#2 api_url in",
        ),
        (
            tg("name = \"two\"\ntoken_env = \"T\"\nallowed_users = [\"alice\"]"),
            "\"alice\" is not a user id (Telegram's are numbers",
        ),
        (
            tg("name = \"two\"\ntoken_env = \"T\"\nallowed_users = [-5]"),
            "\"-5\" is not a user id",
        ),
        (
            tg("name = \"two\"\ntoken_env = \"T\"\nreviewers = { bob = \"bob\" }"),
            "#2 reviewers in",
        ),
        (
            tg("name = \"two\"\ntoken_env = \"T\"\nreviewers = { 42 = \" \" }"),
            "the reviewer of \"42\" is empty",
        ),
        (
            tg("name = \"two\"\ntoken_env = \"T\"\npoll_timeout = \"forever\""),
            "#2 poll_timeout in",
        ),
        (
            tg("name = \"two\"\ntoken_env = \"T\"\npoll_timeout = \"1h\""),
            "must be at most 10m",
        ),
        (
            mx(&format!(
                "{mx_base}access_token_env = \"M\"\nname = \"one\""
            )),
            "[[channels.matrix]] #2 name in",
        ),
        (
            mx(&format!("{mx_base}name = \"two\"")),
            "set exactly one of access_token, access_token_env and access_token_file",
        ),
        (
            mx("homeserver = \"matrix.example\"\nuser_id = \"@b:m\"\naccess_token_env = \"M\""),
            "[[channels.matrix]] #2 homeserver in",
        ),
        (
            mx("homeserver = \"https://m\"\nuser_id = \"bot\"\naccess_token_env = \"M\""),
            "#2 user_id in",
        ),
        (
            mx("homeserver = \"https://m\"\nuser_id = \"@bot\"\naccess_token_env = \"M\""),
            "is not a Matrix user id",
        ),
        (
            mx(&format!(
                "{mx_base}access_token_env = \"M\"\nallowed_users = [\"alice\"]"
            )),
            "(Matrix's are @name:server)",
        ),
        (
            mx(&format!(
                "{mx_base}access_token_env = \"M\"\nreviewers = {{ \"@a\" = \"a\" }}"
            )),
            "#2 reviewers in",
        ),
    ] {
        let msg = load_error(&text);
        assert!(msg.contains(expect), "{text}\n→ {msg}\n(wanted {expect:?})");
    }
    // Across platforms too.
    let msg = load_error(
        "[[channels.telegram]]\nname = \"chat\"\ntoken_env = \"T\"\n\n[[channels.matrix]]\n\
         name = \"chat\"\nhomeserver = \"https://m\"\nuser_id = \"@b:m\"\naccess_token_env = \"M\"\n",
    );
    assert!(msg.contains("[[channels.matrix]] #1 name in"), "{msg}");
    assert!(msg.contains("already named \"chat\""), "{msg}");
}

#[test]
fn wrong_types_and_unknown_keys_are_parse_errors() {
    for (text, expect) in [
        (
            "[[channels.telegram]]\ntoken_env = \"T\"\nallowed_users = [true]\n",
            "a user id (a number, or a string)",
        ),
        (
            "[[channels.telegram]]\ntoken_env = \"T\"\nprogress = \"some\"\n",
            "unknown variant `some`",
        ),
        (
            "[[channels.telegram]]\ntoken_env = \"T\"\ntokn = \"x\"\n",
            "unknown field `tokn`",
        ),
        (
            "[[channels.matrix]]\nuser_id = \"@b:m\"\naccess_token_env = \"M\"\n",
            "missing field `homeserver`",
        ),
        ("[channels]\nslack = []\n", "unknown field `slack`"),
    ] {
        let msg = load_error(text);
        assert!(msg.contains("invalid config file"), "{msg}");
        assert!(msg.contains(expect), "{text}\n→ {msg}");
    }
}

fn telegram(entry: &str) -> TelegramChannelConfig {
    let c = channels(&format!("[[channels.telegram]]\nname = \"bot\"\n{entry}\n"));
    c.telegram[0].clone()
}

#[test]
fn the_secret_resolves_from_the_file_the_environment_or_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let t = telegram("token = \"123:inline-token-abcdef\"");
    assert_eq!(
        t.resolve_secret(home, &no_env).unwrap(),
        "123:inline-token-abcdef"
    );

    let t = telegram("token_env = \"BOT_TOKEN\"");
    let env = env_of(&[("BOT_TOKEN", " 123:from-env \n")]);
    assert_eq!(t.resolve_secret(home, &env).unwrap(), "123:from-env");
    for env in [env_of(&[]), env_of(&[("BOT_TOKEN", "  ")])] {
        let msg = t.resolve_secret(home, &env).unwrap_err().to_string();
        assert_eq!(
            msg,
            "[[channels.telegram]] \"bot\": token_env names BOT_TOKEN, which is not set \
             (or is empty) in the environment"
        );
    }

    // A file, relative to tern's home, its trailing newline dropped.
    std::fs::create_dir(home.join("secrets")).unwrap();
    std::fs::write(home.join("secrets/bot.token"), "123:from-file\n").unwrap();
    let t = telegram("token_file = \"secrets/bot.token\"");
    assert_eq!(t.resolve_secret(home, &no_env).unwrap(), "123:from-file");
    // Absolute, and in the user's home.
    let absolute = home.join("secrets/bot.token").display().to_string();
    let t = telegram(&format!("token_file = \"{absolute}\""));
    assert_eq!(
        t.resolve_secret(Path::new("/nonexistent"), &no_env)
            .unwrap(),
        "123:from-file"
    );
    let t = telegram("token_file = \"~/bot.token\"");
    let user_home = env_of(&[("HOME", &home.join("secrets").display().to_string())]);
    assert_eq!(
        t.resolve_secret(Path::new("/nonexistent"), &user_home)
            .unwrap(),
        "123:from-file"
    );

    let t = telegram("token_file = \"missing.token\"");
    let msg = t.resolve_secret(home, &no_env).unwrap_err().to_string();
    assert!(
        msg.starts_with("[[channels.telegram]] \"bot\": cannot read token_file "),
        "{msg}"
    );
    assert!(
        msg.contains(&home.join("missing.token").display().to_string()),
        "{msg}"
    );
    assert!(msg.contains("No such file"), "{msg}");

    std::fs::write(home.join("empty.token"), "\n").unwrap();
    let t = telegram("token_file = \"empty.token\"");
    let msg = t.resolve_secret(home, &no_env).unwrap_err().to_string();
    assert!(
        msg.contains("token_file") && msg.ends_with("is empty"),
        "{msg}"
    );
}

#[test]
fn the_matrix_access_token_resolves_the_same_way() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.token"), "syt_file\r\n").unwrap();
    let c = channels(
        "[[channels.matrix]]\nhomeserver = \"https://m\"\nuser_id = \"@b:m\"\naccess_token_file = \"m.token\"\n\n\
         [[channels.matrix]]\nname = \"two\"\nhomeserver = \"https://m\"\nuser_id = \"@c:m\"\naccess_token_env = \"MX\"\n",
    );
    assert_eq!(
        c.matrix[0].resolve_secret(dir.path(), &no_env).unwrap(),
        "syt_file"
    );
    let msg = c.matrix[1]
        .resolve_secret(dir.path(), &no_env)
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with("[[channels.matrix]] \"two\": access_token_env names MX"),
        "{msg}"
    );
    assert_eq!(
        c.matrix[1]
            .resolve_secret(dir.path(), &env_of(&[("MX", "syt_env")]))
            .unwrap(),
        "syt_env"
    );
}

#[test]
fn inline_secrets_are_never_shown() {
    let (_d, home) = temp_home();
    write_config(
        &home,
        "[[channels.telegram]]\ntoken = \"123456:AAH-very-secret-bot-token\"\n\n\
         [[channels.matrix]]\nhomeserver = \"https://m\"\nuser_id = \"@b:m\"\n\
         access_token = \"syt_very-secret-access-token\"\n",
    );
    let eff = load(&home, &no_env).unwrap();
    let debug = format!("{:?}", eff.config);
    let shown = render_masked(&eff);
    for text in [&debug, &shown] {
        assert!(!text.contains("very-secret"), "{text}");
    }
    assert!(debug.contains("123…oken"), "{debug}");
    assert!(shown.contains("token = \"123…oken\""), "{shown}");
    assert!(shown.contains("access_token = \"syt…oken\""), "{shown}");
    // Nor in a validation error about the entry.
    write_config(
        &home,
        "[[channels.telegram]]\ntoken = \"123456:AAH-very-secret-bot-token\"\napi_url = \"nope\"\n",
    );
    let msg = load(&home, &no_env).unwrap_err().to_string();
    assert!(!msg.contains("very-secret"), "{msg}");
}
