//! The client over streamable HTTP, against the real server-everything in its
//! `streamableHttp` mode (it listens on `$PORT`, path `/mcp`), on a free loopback port: what
//! the stdio tests check, over HTTP. Where a test must see what the server received (a
//! cancel), the client talks to it through [`Proxy`], a loopback reverse proxy that records
//! every JSON-RPC message it forwards and the server's HTTP status for it.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use serde_json::{Value, json};
use tern_config::McpServerConfig;
use tern_mcp::{
    ClientOptions, ElicitError, ElicitationAnswer, ElicitationRequest, Elicitor, McpClient,
    McpError, McpManager, ServerState,
};
use tern_test_support::wait::eventually;
use tern_tools::{BoxFuture, DenyAll, Registry, ToolContext, ToolLimits, ToolProgress, ToolReport};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use crate::common::{config, everything_entry};

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// server-everything over HTTP on a free port; the child is killed when dropped.
async fn serve_http() -> (Child, u16) {
    let port = free_port();
    (serve_http_on(port).await, port)
}

/// server-everything over HTTP on `port`, once it listens.
async fn serve_http_on(port: u16) -> Child {
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
    child
}

/// The `[mcp_servers.remote]` of the server on `port`, with `extra` TOML lines.
fn remote(port: u16, extra: &str) -> McpServerConfig {
    config(&format!("url = \"http://127.0.0.1:{port}/mcp\"\n{extra}"))
}

fn args(v: Value) -> Option<serde_json::Map<String, Value>> {
    v.as_object().cloned()
}

/// A JSON-RPC message the [`Proxy`] forwarded to the server, with the server's status.
#[derive(Debug, Clone)]
struct Forwarded {
    message: Value,
    status: u16,
}

/// A reverse proxy on a loopback port in front of the server at `upstream`: each request
/// goes to the server as it came (SSE responses streamed back as they arrive); each POSTed
/// JSON-RPC message is recorded once the server has answered it.
struct Proxy {
    port: u16,
    seen: Arc<Mutex<Vec<Forwarded>>>,
    /// A status to answer the next `tools/call` with, instead of forwarding it.
    refuse_call: Arc<Mutex<Option<u16>>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct ProxyState {
    upstream: String,
    http: reqwest::Client,
    seen: Arc<Mutex<Vec<Forwarded>>>,
    refuse_call: Arc<Mutex<Option<u16>>>,
}

impl Proxy {
    async fn start(upstream_port: u16) -> Proxy {
        let seen: Arc<Mutex<Vec<Forwarded>>> = Arc::default();
        let refuse_call: Arc<Mutex<Option<u16>>> = Arc::default();
        let state = ProxyState {
            upstream: format!("http://127.0.0.1:{upstream_port}"),
            http: reqwest::Client::new(),
            seen: Arc::clone(&seen),
            refuse_call: Arc::clone(&refuse_call),
        };
        let app = axum::Router::new().fallback(forward).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Proxy {
            port,
            seen,
            refuse_call,
            task,
        }
    }

    /// The messages with `method` the server has answered, in the order they were.
    fn sent(&self, method: &str) -> Vec<Forwarded> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|f| f.message["method"] == method)
            .cloned()
            .collect()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(State(state): State<ProxyState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let is_call = serde_json::from_slice::<Value>(&body).is_ok_and(|m| m["method"] == "tools/call");
    if is_call && let Some(status) = state.refuse_call.lock().unwrap().take() {
        return Response::builder()
            .status(status)
            .header("retry-after", "1")
            .body(Body::from("busy"))
            .unwrap();
    }
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut upstream = state
        .http
        .request(parts.method.clone(), format!("{}{path}", state.upstream))
        .body(body.clone());
    for (name, value) in &parts.headers {
        if name != "host" && name != "content-length" {
            upstream = upstream.header(name, value);
        }
    }
    let Ok(answer) = upstream.send().await else {
        return Response::builder().status(502).body(Body::empty()).unwrap();
    };
    if let Ok(message) = serde_json::from_slice::<Value>(&body) {
        state.seen.lock().unwrap().push(Forwarded {
            message,
            status: answer.status().as_u16(),
        });
    }
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if name != "content-length" && name != "transfer-encoding" {
            response = response.header(name, value);
        }
    }
    response
        .body(Body::from_stream(answer.bytes_stream()))
        .unwrap()
}

fn ctx(report: ToolReport, cancel: CancellationToken) -> ToolContext {
    ToolContext {
        session_id: "sess-1".into(),
        call_id: "call-1".into(),
        call_seq: 7,
        workdir: std::env::temp_dir(),
        cancel,
        approver: Arc::new(DenyAll {
            reason: "tests never approve".into(),
        }),
        limits: ToolLimits::default(),
        preapproved: false,
        subagents: None,
        toolsets: Default::default(),
        report,
    }
}

fn toolsets() -> Vec<String> {
    vec!["mcp:remote".to_owned()]
}

/// A registry with the tools of the server at `port`, reached with `options`.
async fn registry(port: u16, options: &ClientOptions) -> Registry {
    let client = McpClient::start_with("remote", &remote(port, ""), options)
        .await
        .unwrap();
    let mut registry = Registry::new();
    tern_mcp::register(&mut registry, Arc::new(client))
        .await
        .unwrap();
    registry
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

#[tokio::test]
async fn structured_content_and_an_image_over_http() {
    let (_server, port) = serve_http().await;
    let client = McpClient::start("remote", &remote(port, "")).await.unwrap();
    let weather = client
        .call_tool(
            "get-structured-content",
            args(json!({"location": "New York"})),
        )
        .await
        .unwrap();
    assert!(weather.contains("\"temperature\""), "{weather}");
    assert!(weather.contains("\"conditions\""), "{weather}");

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
    client.close().await;
}

#[tokio::test]
async fn an_error_result_over_http_is_an_error_with_the_servers_words() {
    let (_server, port) = serve_http().await;
    let client = McpClient::start("remote", &remote(port, "")).await.unwrap();
    let err = client
        .call_tool("get-resource-reference", args(json!({"resourceId": 0})))
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::ToolFailed { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with("tool `get-resource-reference` of MCP server `remote` failed: "),
        "{text}"
    );
    assert!(text.contains("Invalid resourceId: 0"), "{text}");
    // The session goes on.
    assert_eq!(
        client
            .call_tool("echo", args(json!({"message": "x"})))
            .await
            .unwrap(),
        "Echo: x"
    );
    client.close().await;
}

#[tokio::test]
async fn progress_over_http_reaches_the_tool_in_order() {
    let (_server, port) = serve_http().await;
    let registry = registry(port, &ClientOptions::default()).await;
    let seen: Arc<Mutex<Vec<ToolProgress>>> = Arc::default();
    let sink = {
        let seen = Arc::clone(&seen);
        Arc::new(move |p: ToolProgress| seen.lock().unwrap().push(p))
    };
    let r = registry
        .call(
            "mcp__remote__trigger-long-running-operation",
            r#"{"duration": 1, "steps": 4}"#,
            &toolsets(),
            ctx(
                ToolReport::default().with_progress(sink),
                CancellationToken::new(),
            ),
        )
        .await
        .unwrap();
    assert!(
        r.as_str()
            .unwrap()
            .contains("Long running operation completed"),
        "{r}"
    );
    let seen = seen.lock().unwrap().clone();
    let values: Vec<f64> = seen.iter().map(|p| p.progress).collect();
    // Sent on the call's SSE stream before its result: all arrived, in order.
    assert_eq!(values, [1.0, 2.0, 3.0, 4.0], "{seen:?}");
    assert!(seen.iter().all(|p| p.total == Some(4.0)), "{seen:?}");
}

/// An elicitor that records what it was asked and answers as told.
struct Scripted {
    answer: ElicitationAnswer,
    asked: Mutex<Vec<ElicitationRequest>>,
}

impl Elicitor for Scripted {
    fn elicit(
        &self,
        request: ElicitationRequest,
    ) -> BoxFuture<'_, Result<ElicitationAnswer, ElicitError>> {
        self.asked.lock().unwrap().push(request);
        let answer = self.answer.clone();
        Box::pin(async move { Ok(answer) })
    }
}

#[tokio::test]
async fn elicitations_over_http_are_answered_accepted_or_declined() {
    let (_server, port) = serve_http().await;
    let content = json!({"name": "Ada Lovelace", "check": true, "integer": 7, "petType": "pet-2"});
    for (answer, said) in [
        (
            ElicitationAnswer::Accept {
                content: content.as_object().cloned().unwrap(),
            },
            "- Name: Ada Lovelace",
        ),
        (ElicitationAnswer::Decline, "\"action\": \"decline\""),
    ] {
        let elicitor = Arc::new(Scripted {
            answer,
            asked: Mutex::default(),
        });
        let registry = registry(
            port,
            &ClientOptions::default().with_elicitor(elicitor.clone()),
        )
        .await;
        let r = registry
            .call(
                "mcp__remote__trigger-elicitation-request",
                "{}",
                &toolsets(),
                ctx(ToolReport::default(), CancellationToken::new()),
            )
            .await
            .unwrap();
        let text = r.as_str().unwrap();
        assert!(text.contains(said), "{text}");
        let asked = elicitor.asked.lock().unwrap();
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert_eq!(asked[0].server, "remote");
        assert_eq!(
            asked[0].tool.as_deref(),
            Some("trigger-elicitation-request")
        );
        // Asked for the call it arrived during.
        let scope = asked[0].call.as_ref().unwrap();
        assert_eq!((scope.call_id.as_str(), scope.call_seq), ("call-1", 7));
        let name = asked[0].fields.iter().find(|f| f.name == "name").unwrap();
        assert!(name.required);
    }
}

#[tokio::test]
async fn an_interrupted_call_over_http_is_cancelled_at_the_server() {
    let (_server, port) = serve_http().await;
    let proxy = Proxy::start(port).await;
    let registry = registry(proxy.port, &ClientOptions::default()).await;
    let seen: Arc<Mutex<Vec<ToolProgress>>> = Arc::default();
    let sink = {
        let seen = Arc::clone(&seen);
        Arc::new(move |p: ToolProgress| seen.lock().unwrap().push(p))
    };
    let interrupt = CancellationToken::new();
    let toolsets = toolsets();
    let call = registry.call(
        "mcp__remote__trigger-long-running-operation",
        r#"{"duration": 60, "steps": 60}"#,
        &toolsets,
        ctx(ToolReport::default().with_progress(sink), interrupt.clone()),
    );
    // Interrupted once the server is at work on it (it has reported progress).
    let (result, ()) = tokio::join!(call, async {
        eventually("the call's first progress", async || {
            (!seen.lock().unwrap().is_empty()).then_some(())
        })
        .await;
        interrupt.cancel();
    });
    let err = result.unwrap_err().to_string();
    assert!(
        err.contains(
            "interrupted: the call to `trigger-long-running-operation` of MCP server `remote` was cancelled"
        ),
        "{err}"
    );
    let call = proxy.sent("tools/call").pop().unwrap();
    let cancelled = eventually("notifications/cancelled to reach the server", async || {
        proxy.sent("notifications/cancelled").pop()
    })
    .await;
    assert_eq!(
        cancelled.message["params"]["requestId"], call.message["id"],
        "{cancelled:?}"
    );
    // The server took it (202 Accepted), in the call's session.
    assert_eq!(cancelled.status, 202, "{cancelled:?}");
}

#[tokio::test]
async fn a_killed_http_server_is_restarted_and_serves_the_same_tool() {
    let port = free_port();
    let mut server = serve_http_on(port).await;
    let servers = BTreeMap::from([("remote".to_owned(), remote(port, ""))]);
    let manager = McpManager::start(&servers, ClientOptions::default()).await;
    let mut registry = Registry::new();
    manager.register(&mut registry);
    let toolsets = manager.expand_toolsets(&["mcp".to_owned()]);
    let echo = async |text: &str| {
        registry
            .call(
                "mcp__remote__echo",
                &json!({ "message": text }).to_string(),
                &toolsets,
                ctx(ToolReport::default(), CancellationToken::new()),
            )
            .await
            .map(|v| v.as_str().unwrap_or_default().to_owned())
            .map_err(|e| e.to_string())
    };
    assert_eq!(echo("one").await.unwrap(), "Echo: one");
    let state = || {
        manager
            .status()
            .into_iter()
            .find(|s| s.name == "remote")
            .unwrap()
            .state
    };
    assert_eq!(state(), ServerState::Running { pid: None });

    // The server dies and comes back on the same port, without the session tern had.
    server.kill().await.unwrap();
    let _server = serve_http_on(port).await;
    // Nothing tells an HTTP client that its server went away: the first request finds out,
    // fails (the server never ran it; tern does not guess whether a call may be sent
    // again), and the session ends, so the manager starts a new one.
    let err = echo("lost").await.unwrap_err();
    assert_eq!(
        err,
        "MCP server `remote` is not running: its connection closed (see tern's log for its stderr)"
    );
    // The next call through the same tool waits for the restart and is served.
    assert_eq!(echo("two").await.unwrap(), "Echo: two");
    assert_eq!(state(), ServerState::Running { pid: None });
    manager.shutdown().await;
    assert_eq!(state(), ServerState::Stopped);
}

#[tokio::test]
async fn a_call_in_flight_when_the_http_server_dies_fails_and_the_next_is_served() {
    let port = free_port();
    let mut server = serve_http_on(port).await;
    let servers = BTreeMap::from([("remote".to_owned(), remote(port, ""))]);
    let manager = McpManager::start(&servers, ClientOptions::default()).await;
    let mut registry = Registry::new();
    manager.register(&mut registry);
    let toolsets = manager.expand_toolsets(&["mcp".to_owned()]);
    let seen: Arc<Mutex<Vec<ToolProgress>>> = Arc::default();
    let sink = {
        let seen = Arc::clone(&seen);
        Arc::new(move |p: ToolProgress| seen.lock().unwrap().push(p))
    };
    let call = registry.call(
        "mcp__remote__trigger-long-running-operation",
        r#"{"duration": 60, "steps": 60}"#,
        &toolsets,
        ctx(
            ToolReport::default().with_progress(sink),
            CancellationToken::new(),
        ),
    );
    // The server dies while it works on the call.
    let (result, ()) = tokio::join!(call, async {
        eventually("the call's first progress", async || {
            (!seen.lock().unwrap().is_empty()).then_some(())
        })
        .await;
        server.kill().await.unwrap();
    });
    // It may have had effects: it fails, and is not sent again.
    let err = result.unwrap_err().to_string();
    assert_eq!(
        err,
        "MCP server `remote` is not running: its connection closed (see tern's log for its stderr)"
    );
    // Back on the same port: the next call waits for the manager's restart and is served.
    let _server = serve_http_on(port).await;
    let echoed = registry
        .call(
            "mcp__remote__echo",
            r#"{"message": "back"}"#,
            &toolsets,
            ctx(ToolReport::default(), CancellationToken::new()),
        )
        .await
        .unwrap();
    assert_eq!(echoed, "Echo: back");
    manager.shutdown().await;
}

#[tokio::test]
async fn a_busy_http_server_fails_the_call_and_keeps_the_session() {
    let (_server, port) = serve_http().await;
    let proxy = Proxy::start(port).await;
    let client = McpClient::start("remote", &remote(proxy.port, ""))
        .await
        .unwrap();
    for status in [429, 503] {
        *proxy.refuse_call.lock().unwrap() = Some(status);
        let err = client
            .call_tool("echo", args(json!({"message": "busy?"})))
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("MCP server `remote` refused `tools/call`: the server answered HTTP {status}")
        );
        // Rate-limited or failing for now is not a lost session: the same one serves the
        // next call.
        assert!(!client.is_closed());
        assert_eq!(
            client
                .call_tool("echo", args(json!({"message": "again"})))
                .await
                .unwrap(),
            "Echo: again"
        );
    }
    let initialized = proxy.sent("initialize");
    assert_eq!(initialized.len(), 1, "{initialized:?}");
    client.close().await;
}
