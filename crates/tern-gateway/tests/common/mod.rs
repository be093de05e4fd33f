//! The in-process gateway of the HTTP tests: a store in a test directory, an agent, the
//! gateway serving on loopback, and the small HTTP helpers the test files share. Each test
//! file uses only some of it, hence the `dead_code` allowances.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tern_agent::{Agent, AgentSettings};
use tern_gateway::{Authenticator, Gateway, GatewayParts, GatewaySettings, InboxSettings};
use tern_store::Store;
use tern_tools::{DenyAll, Registry, ToolLimits};

/// The store on `dir`'s `tern.db` and the work directory `dir/work` (created); a second
/// call on the same `dir` opens the same database, as a restart does.
pub async fn open(dir: &Path) -> (Store, PathBuf) {
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let store = Store::open(&dir.join("tern.db")).await.unwrap();
    (store, work)
}

/// An agent that has no model: the inbox tests never run a turn.
#[allow(dead_code)]
pub fn agent_without_model(store: &Store) -> Arc<Agent> {
    Arc::new(Agent::new(
        store.clone(),
        Err("no model in these tests".into()),
        Arc::new(Registry::builtin()),
        AgentSettings {
            model: "none".into(),
            max_iterations: 1,
            stream: false,
            system_prompt: None,
            limits: ToolLimits::default(),
        },
    ))
}

/// The settings a test gateway starts from, working in `work`.
pub fn settings(work: PathBuf) -> GatewaySettings {
    GatewaySettings {
        max_concurrent_turns: 2,
        max_body_bytes: 1 << 20,
        drain_timeout: Duration::from_secs(5),
        workdir: work,
        toolsets: vec![],
        model: "none".into(),
    }
}

fn authenticator(agent: &Agent) -> Authenticator {
    Authenticator::new(agent.store().clone(), None).unwrap()
}

fn deny_all() -> Arc<DenyAll> {
    Arc::new(DenyAll {
        reason: "test".into(),
    })
}

/// A gateway on the agent's store that approves no tool call.
#[allow(dead_code)]
pub fn gateway(agent: Arc<Agent>, settings: GatewaySettings) -> Arc<Gateway> {
    let auth = authenticator(&agent);
    Gateway::new(agent, auth, deny_all(), settings)
}

/// [`gateway`] with a configured inbox, bound to `local_addr` (the base of its links).
#[allow(dead_code)]
pub fn gateway_with_inbox(
    agent: Arc<Agent>,
    settings: GatewaySettings,
    inbox: tern_inbox::Inbox,
    inbox_settings: InboxSettings,
    local_addr: std::net::SocketAddr,
) -> Arc<Gateway> {
    let auth = authenticator(&agent);
    let mut parts = GatewayParts::new(agent, auth, deny_all(), settings);
    parts.inbox = inbox;
    parts.inbox_settings = inbox_settings;
    parts.local_addr = Some(local_addr);
    Gateway::from_parts(parts)
}

/// A gateway for the inbox tests on `dir`'s database, with its default project.
#[allow(dead_code)]
pub async fn inbox_gateway(dir: &Path) -> Arc<Gateway> {
    let (store, work) = open(dir).await;
    let gw = gateway(agent_without_model(&store), settings(work));
    gw.inbox.ensure_default_project().await.unwrap();
    gw
}

/// A loopback port to serve on.
pub async fn listener() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()
}

/// Serves `gw` on a loopback port; returns its base URL and the server's task.
pub async fn serve(gw: &Arc<Gateway>) -> (String, tokio::task::JoinHandle<()>) {
    serve_on(listener().await, gw).await
}

/// Serves `gw` on `listener`; returns its base URL and the server's task.
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    gw: &Arc<Gateway>,
) -> (String, tokio::task::JoinHandle<()>) {
    let addr = listener.local_addr().unwrap();
    let url = format!("http://{addr}");
    let app = gw.router();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, server)
}

/// A client that does not follow redirects, to see the 303s the forms answer.
#[allow(dead_code)]
pub fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The status and JSON body of a response.
#[allow(dead_code)]
pub async fn status_json(r: reqwest::Response) -> (u16, Value) {
    (r.status().as_u16(), r.json().await.unwrap())
}

/// A body as JSON; `Null` when it is empty.
#[allow(dead_code)]
pub fn json_or_null(text: &str) -> Value {
    if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(text).unwrap()
    }
}

/// Whether the response's `content-type` starts with `prefix`.
#[allow(dead_code)]
pub fn content_type_starts(r: &reqwest::Response, prefix: &str) -> bool {
    r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with(prefix)
}

/// Asserts the body is a JSON error with a string `error`; returns the body.
#[allow(dead_code)]
pub async fn assert_json_error(r: reqwest::Response) -> Value {
    let body: Value = r.json().await.unwrap();
    assert!(body["error"].is_string(), "{body}");
    body
}
