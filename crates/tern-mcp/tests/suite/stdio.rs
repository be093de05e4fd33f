//! The client against the real server-everything over stdio: initialize, tools/list, calls
//! and their results, and servers that fail.

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use tern_mcp::{McpClient, McpError};
use tern_test_support::wait::eventually;

use crate::common::{capture_logs, config, everything, everything_entry, everything_teed, sent};

fn args(v: serde_json::Value) -> Option<serde_json::Map<String, serde_json::Value>> {
    v.as_object().cloned()
}

#[tokio::test]
async fn initializes_and_lists_every_tool() {
    let client = everything("").await;
    let info = client.server_info().unwrap();
    assert!(info.name.contains("everything"), "{info:?}");
    let tools = client.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for expected in [
        "echo",
        "get-sum",
        "get-tiny-image",
        "get-structured-content",
        "trigger-long-running-operation",
    ] {
        assert!(names.contains(&expected), "{expected} not in {names:?}");
    }
    let sum = tools.iter().find(|t| t.name == "get-sum").unwrap();
    assert_eq!(sum.input_schema["properties"]["a"]["type"], "number");
}

#[tokio::test]
async fn calls_echo_and_sum() {
    let client = everything("").await;
    let echoed = client
        .call_tool("echo", args(json!({"message": "hello, tern"})))
        .await
        .unwrap();
    assert_eq!(echoed, "Echo: hello, tern");
    let sum = client
        .call_tool("get-sum", args(json!({"a": 2, "b": 40.5})))
        .await
        .unwrap();
    assert_eq!(sum, "The sum of 2 and 40.5 is 42.5.");
}

#[tokio::test]
async fn an_image_is_described_and_structured_content_shown() {
    let client = everything("").await;
    let image = client.call_tool("get-tiny-image", None).await.unwrap();
    let described = image
        .lines()
        .find(|l| l.starts_with("[image: "))
        .unwrap_or_else(|| panic!("no image in {image:?}"));
    assert!(
        described.starts_with("[image: image/png, ") && described.ends_with(" bytes]"),
        "{described}"
    );
    let bytes: usize = described["[image: image/png, ".len()..described.len() - " bytes]".len()]
        .parse()
        .unwrap();
    assert!(bytes > 1000, "{described}");
    assert!(image.contains("Here's the image you requested:"), "{image}");

    let weather = client
        .call_tool(
            "get-structured-content",
            args(json!({"location": "New York"})),
        )
        .await
        .unwrap();
    assert!(weather.contains("\"temperature\""), "{weather}");
    assert!(weather.contains("\"conditions\""), "{weather}");
}

#[tokio::test]
async fn resource_links_are_named_with_their_uri() {
    let client = everything("").await;
    let links = client
        .call_tool("get-resource-links", args(json!({"count": 2})))
        .await
        .unwrap();
    assert_eq!(links.matches("[resource link: ").count(), 2, "{links}");
    assert!(links.contains("<demo://resource/"), "{links}");
}

#[tokio::test]
async fn an_error_result_is_an_error_with_the_servers_words() {
    let client = everything("").await;
    let err = client
        .call_tool("get-resource-reference", args(json!({"resourceId": 0})))
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::ToolFailed { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with("tool `get-resource-reference` of MCP server `everything` failed: "),
        "{text}"
    );
    assert!(text.contains("Invalid resourceId: 0"), "{text}");
    // The server is still there.
    assert_eq!(
        client
            .call_tool("echo", args(json!({"message": "x"})))
            .await
            .unwrap(),
        "Echo: x"
    );
}

#[tokio::test]
async fn a_call_past_tool_timeout_is_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sent.jsonl");
    let client = everything_teed(&log, "tool_timeout = \"1s\"").await;
    let err = client
        .call_tool(
            "trigger-long-running-operation",
            args(json!({"duration": 30, "steps": 3})),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::ToolTimeout { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "tool `trigger-long-running-operation` of MCP server `everything` did not finish within 1s; it was cancelled"
    );
    // The server was told, naming the call.
    let call = sent(&log, "tools/call").pop().unwrap();
    let cancelled = eventually("notifications/cancelled sent", async || {
        sent(&log, "notifications/cancelled").pop()
    })
    .await;
    assert_eq!(cancelled["params"]["requestId"], call["id"], "{cancelled}");
    assert_eq!(
        client
            .call_tool("echo", args(json!({"message": "after"})))
            .await
            .unwrap(),
        "Echo: after"
    );
}

#[tokio::test]
async fn a_server_that_exits_is_a_clear_error() {
    let client = everything("").await;
    let pid = client.pid().unwrap();
    kill(Pid::from_raw(i32::try_from(pid).unwrap()), Signal::SIGKILL).unwrap();
    let err = eventually("the call to fail as the server is gone", async || {
        client
            .call_tool("echo", args(json!({"message": "anyone?"})))
            .await
            .err()
    })
    .await;
    assert!(matches!(err, McpError::Closed { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "MCP server `everything` is not running: its connection closed (see tern's log for its stderr)"
    );
}

#[tokio::test]
async fn a_server_that_exits_at_start_is_a_clear_error() {
    let err = McpClient::start(
        "broken",
        &config("command = \"node\"\nargs = [\"-e\", \"console.error('no config'); process.exit(3)\"]\n"),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, McpError::Initialize { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "MCP server `broken` did not initialize: it exited (or closed its output) before answering `initialize`; its stderr is in tern's log"
    );
}

#[tokio::test]
async fn a_missing_program_and_a_silent_server_are_clear_errors() {
    let err = McpClient::start("ghost", &config("command = \"tern-no-such-program\"\n"))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("cannot start MCP server `ghost` (`tern-no-such-program`): "),
        "{err}"
    );

    let err = McpClient::start(
        "silent",
        &config(
            "command = \"node\"\nargs = [\"-e\", \"setInterval(() => {}, 1000)\"]\nstartup_timeout = \"1s\"\n",
        ),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "MCP server `silent` did not answer `initialize` within 1s; raise startup_timeout in [mcp_servers.silent] if it is slow to start"
    );
}

#[tokio::test]
async fn env_and_cwd_reach_the_server() {
    // A relative script path finds the server only from the configured directory.
    let entry = everything_entry();
    let dir = entry.parent().unwrap().display().to_string();
    let client = McpClient::start(
        "everything",
        &config(&format!(
            "command = \"node\"\nargs = [\"index.js\", \"stdio\"]\ncwd = {dir:?}\nenv = {{ TERN_MCP_TEST = \"from-config\" }}\n"
        )),
    )
    .await
    .unwrap();
    let env = client.call_tool("get-env", None).await.unwrap();
    let env: serde_json::Value = serde_json::from_str(&env).unwrap();
    assert_eq!(env["TERN_MCP_TEST"], "from-config", "{env}");
    // tern's own environment is kept under it.
    assert!(env["PATH"].is_string(), "{env}");
}

#[tokio::test]
async fn the_servers_stderr_goes_to_the_log() {
    let (logs, _guard) = capture_logs();
    let client = everything("").await;
    let line = eventually("the server's stderr in the log", async || {
        logs.text()
            .lines()
            .find(|l| l.contains("Starting default (STDIO) server..."))
            .map(str::to_owned)
    })
    .await;
    assert!(line.contains("tern_mcp::stderr"), "{line}");
    assert!(line.contains("server=\"everything\""), "{line}");
    drop(client);
}

#[tokio::test]
async fn dropping_the_client_ends_the_server() {
    let client = McpClient::start("everything", &crate::common::everything_config(""))
        .await
        .unwrap();
    let pid = client.pid().unwrap();
    drop(client);
    eventually("the server's process to be gone", async || {
        (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    })
    .await;
}
