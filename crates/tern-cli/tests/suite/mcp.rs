//! `tern mcp` and MCP servers in `tern chat`, as real processes against the real
//! `@modelcontextprotocol/server-everything` (`npm ci` in `tests/mcp`): `list` from the
//! configuration (never a secret), `tools`, `call` with typed `--arg`s or `--json`, errors
//! that say what exists, a `tern chat` turn calling a server's tool, and `sources` keeping a
//! server out of `tern chat`.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tern_fake_model::Reply;

use crate::common::{Env, assert_exit, assert_ok, stderr, stdout};

fn everything_entry() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp");
    let entry = root.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.is_file(),
        "{} is missing: run `npm ci --no-audit --no-fund` in {} (and install Node.js 20 or later)",
        entry.display(),
        root.display()
    );
    entry
}

/// server-everything as `everything` (in the default sandbox where the kernel can enforce
/// it, else without: a sandboxed server would not start), plus `extra` configuration.
fn config(e: &Env, extra: &str) {
    let sandbox = match tern_sandbox::Support::probe() {
        tern_sandbox::Support::Missing { .. } => "sandbox = \"none\"\n",
        tern_sandbox::Support::Landlock { .. } => "",
    };
    e.config(&format!(
        "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n\
         env = {{ SECRET_KEY = \"s3cret-value-do-not-print\" }}\n{sandbox}\n{extra}",
        everything_entry().display().to_string()
    ));
}

#[test]
fn mcp_list_shows_each_server_and_never_a_secret() {
    let e = Env::new();
    config(
        &e,
        "[mcp_servers.remote]\nurl = \"https://user:pw-secret@mcp.example/mcp\"\n\
         headers = { X-Token = \"header-secret\" }\nenabled = false\nstartup = \"lazy\"\n\
         enabled_tools = [\"echo\"]\nsources = [\"cron\", \"chat\"]\n",
    );
    let o = e.run(&["mcp", "list"]);
    assert_ok(&o);
    let text = stdout(&o);
    assert!(text.contains("everything  stdio node "), "{text}");
    assert!(text.contains("remote  http "), "{text}");
    assert!(text.contains("disabled  startup lazy"), "{text}");
    assert!(
        text.contains("tools only echo  sessions cron, chat"),
        "{text}"
    );
    assert!(text.contains("tools all  sessions all"), "{text}");
    for secret in ["s3cret-value", "pw-secret", "header-secret"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    let o = e.run(&["mcp", "list", "--json"]);
    assert_ok(&o);
    let rows: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows[0]["name"], "everything");
    assert_eq!(rows[0]["transport"], "stdio");
    assert_eq!(rows[0]["enabled"], true);
    assert_eq!(rows[0]["startup"], "eager");
    assert_eq!(rows[1]["enabled_tools"], json!(["echo"]));
    assert_eq!(rows[1]["sources"], json!(["cron", "chat"]));
    assert_eq!(rows[0]["sources"], Value::Null);
    assert!(!stdout(&o).contains("secret"), "{}", stdout(&o));
}

#[test]
fn mcp_tools_lists_what_the_server_offers() {
    let e = Env::new();
    config(&e, "");
    let o = e.run(&["mcp", "tools", "everything"]);
    assert_ok(&o);
    let text = stdout(&o);
    assert!(
        text.contains("get-sum\n    Returns the sum of two numbers"),
        "{text}"
    );
    let o = e.run(&["mcp", "tools", "everything", "--json"]);
    assert_ok(&o);
    let tools: Value = serde_json::from_slice(&o.stdout).unwrap();
    let echo = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "echo")
        .unwrap();
    assert_eq!(echo["tern_name"], "mcp__everything__echo");
    assert_eq!(echo["offered"], true);
    assert_eq!(
        echo["input_schema"]["properties"]["message"]["type"],
        "string"
    );
}

#[test]
fn mcp_call_types_its_arguments_and_prints_the_result() {
    let e = Env::new();
    config(&e, "");
    let o = e.run(&[
        "mcp",
        "call",
        "everything",
        "echo",
        "--arg",
        "message=hi there",
    ]);
    assert_ok(&o);
    assert_eq!(stdout(&o), "Echo: hi there\n");
    // `a` and `b` are numbers in the schema.
    let o = e.run(&[
        "mcp",
        "call",
        "everything",
        "get-sum",
        "--arg",
        "a=2",
        "--arg",
        "b=40.5",
    ]);
    assert_ok(&o);
    assert_eq!(stdout(&o), "The sum of 2 and 40.5 is 42.5.\n");
    let o = e.run(&[
        "mcp",
        "call",
        "everything",
        "get-sum",
        "--json",
        r#"{"a": 1, "b": 2}"#,
    ]);
    assert_ok(&o);
    assert_eq!(stdout(&o), "The sum of 1 and 2 is 3.\n");
    let o = e.run(&["mcp", "call", "everything", "get-sum", "--arg", "a=two"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("--arg a=two: `a` must be a number"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn mcp_call_errors_say_what_exists() {
    let e = Env::new();
    config(&e, "");
    // An `isError` result: exit 1 with the server's words.
    let o = e.run(&[
        "mcp",
        "call",
        "everything",
        "get-resource-reference",
        "--arg",
        "resourceId=0",
    ]);
    assert_exit(&o, 1);
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(
        err.contains("tool `get-resource-reference` of MCP server `everything` failed: "),
        "{err}"
    );
    assert!(err.contains("Invalid resourceId: 0"), "{err}");

    let o = e.run(&["mcp", "call", "nowhere", "echo"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("no MCP server `nowhere`; the configured servers are: everything"),
        "{}",
        stderr(&o)
    );
    let o = e.run(&["mcp", "call", "everything", "no-such-tool"]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains("MCP server `everything` has no tool `no-such-tool`; its tools are: "),
        "{err}"
    );
    assert!(err.contains("get-sum"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tern_chat_offers_and_calls_the_servers_tools() {
    let e = Env::with_model().await;
    config(&e, "");
    e.fake().push(Reply::tool_call(
        "call-1",
        "mcp__everything__get-sum",
        json!({"a": 20, "b": 22}).to_string(),
    ));
    e.fake().push(Reply::text("it is 42"));
    let o = e.run(&["chat", "-q", "add 20 and 22"]);
    assert_ok(&o);
    assert_eq!(stdout(&o).trim(), "it is 42");
    let requests = e.fake().requests();
    assert!(
        requests[0]
            .tool_names()
            .iter()
            .any(|t| t == "mcp__everything__echo"),
        "{:?}",
        requests[0].tool_names()
    );
    let tool = requests[1]
        .messages()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap();
    assert_eq!(tool["content"], "The sum of 20 and 22 is 42.");
}

/// `sources`: `tern chat`'s sessions are `cli` ones; a server kept to others is not offered
/// there, one that names `cli` is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tern_chat_offers_a_server_only_when_its_sources_name_cli() {
    let e = Env::with_model().await;
    config(&e, "sources = [\"api\", \"cron\", \"chat\"]\n");
    e.fake().push(Reply::text("without it"));
    let o = e.run(&["chat", "-q", "hello"]);
    assert_ok(&o);
    let offered = e.fake().requests()[0].tool_names();
    assert!(offered.iter().any(|t| t == "terminal"), "{offered:?}");
    assert!(
        !offered.iter().any(|t| t.starts_with("mcp__")),
        "{offered:?}"
    );

    config(&e, "sources = [\"cli\"]\n");
    e.fake().push(Reply::text("with it"));
    let o = e.run(&["chat", "-q", "hello again"]);
    assert_ok(&o);
    let offered = e.fake().requests()[1].tool_names();
    assert!(
        offered.iter().any(|t| t == "mcp__everything__echo"),
        "{offered:?}"
    );
}

/// A server gets tern's environment less tern's secrets, sandboxed or not (`sandbox =
/// "none"`): a model asking server-everything's `get-env` for it reads no model key or
/// `TERN_*` variable; the server's own configured `env` is there.
#[test]
fn a_server_never_gets_terns_secrets_in_its_environment() {
    for extra in ["", "sandbox = \"none\"\n"] {
        let e = Env::new();
        config(&e, extra);
        let o = e
            .tern()
            .args(["mcp", "call", "everything", "get-env"])
            .env("OPENAI_API_KEY", "sk-must-not-leak")
            .env("TERN_SERVER_KEY", "tern-must-not-leak")
            .env("HARMLESS_SETTING", "kept")
            .output()
            .unwrap();
        assert_ok(&o);
        let text = stdout(&o);
        assert!(text.contains("HARMLESS_SETTING"), "{extra}: {text}");
        assert!(
            text.contains("s3cret-value-do-not-print"),
            "{extra}: {text}"
        );
        for leak in ["sk-must-not-leak", "tern-must-not-leak", "TERN_HOME"] {
            assert!(!text.contains(leak), "{extra}: {leak} in {text}");
        }
    }
}
