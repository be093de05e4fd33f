//! The client over streamable HTTP, against the real server-everything in its
//! `streamableHttp` mode (it listens on `$PORT`, path `/mcp`), on a free loopback port.

use std::process::Stdio;

use serde_json::json;
use tern_mcp::{McpClient, McpError};
use tern_test_support::wait::eventually;
use tokio::process::{Child, Command};

use crate::common::{config, everything_entry};

/// server-everything over HTTP on a free port; the child is killed when dropped.
async fn serve_http() -> (Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("node")
        .arg(everything_entry())
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    eventually("server-everything to listen", async || {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    (child, port)
}

#[tokio::test]
async fn lists_tools_and_calls_echo_and_sum_over_http() {
    let (_server, port) = serve_http().await;
    // The server takes any token; `PATH` is a variable every environment has.
    let client = McpClient::start(
        "remote",
        &config(&format!(
            "url = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ X-Team = \"blue\" }}\nbearer_token_env = \"PATH\"\n"
        )),
    )
    .await
    .unwrap();
    assert_eq!(client.pid(), None);
    let tools = client.list_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "get-sum"), "{tools:?}");
    let echoed = client
        .call_tool("echo", json!({"message": "over http"}).as_object().cloned())
        .await
        .unwrap();
    assert_eq!(echoed, "Echo: over http");
    let sum = client
        .call_tool("get-sum", json!({"a": 1.5, "b": 2}).as_object().cloned())
        .await
        .unwrap();
    assert_eq!(sum, "The sum of 1.5 and 2 is 3.5.");
    client.close().await;
}

#[tokio::test]
async fn a_missing_token_variable_is_named_and_a_dead_endpoint_is_an_error() {
    let err = McpClient::start(
        "remote",
        &config(
            "url = \"http://127.0.0.1:9/mcp\"\nbearer_token_env = \"TERN_TEST_NO_SUCH_TOKEN\"\n",
        ),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, McpError::MissingToken { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "MCP server `remote`: the environment variable `TERN_TEST_NO_SUCH_TOKEN` (its bearer_token_env) is not set"
    );
    // Nothing listens on port 9: a clear start error naming the server, not a hang.
    let err = McpClient::start(
        "remote",
        &config("url = \"http://127.0.0.1:9/mcp\"\nstartup_timeout = \"5s\"\n"),
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string().starts_with("MCP server `remote` did not"),
        "{err}"
    );
}

#[tokio::test]
async fn headers_and_the_bearer_token_are_sent() {
    // A listener that records the first request's head and hangs up.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let head = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8_lossy(&buf).to_lowercase()
    });
    let _ = McpClient::start(
        "remote",
        &config(&format!(
            "url = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ X-Team = \"blue\" }}\nbearer_token_env = \"PATH\"\nstartup_timeout = \"5s\"\n"
        )),
    )
    .await;
    let head = head.await.unwrap();
    let token = std::env::var("PATH").unwrap().to_lowercase();
    assert!(head.starts_with("post /mcp "), "{head}");
    assert!(head.contains("\r\nx-team: blue\r\n"), "{head}");
    assert!(
        head.contains(&format!("\r\nauthorization: bearer {token}\r\n")),
        "{head}"
    );
}
