//! The in-process gateway of the HTTP tests: a store in a test directory, an agent, the
//! gateway serving on loopback. What is not this crate's own (HTTP helpers, temporary homes,
//! waiting) is `tern-test-support`'s. Each test file uses only some of it, hence the
//! `dead_code` allowances.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

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
            loop_guard: Default::default(),
            context_length: None,
            compaction: Default::default(),
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

// The HTTP helpers are the workspace's (`tern-test-support`).
pub use tern_test_support::http::{
    assert_json_error, content_type_starts, json_or_null, no_redirects, status_json,
};

/// A temporary home whose config.toml points at `fake`, listens on any free loopback port,
/// and ends with `extra` (more configuration): what a whole configured gateway boots from.
#[allow(dead_code)]
pub fn home_for(fake: &tern_fake_model::FakeModel, extra: &str) -> tern_test_support::TempHome {
    let home = tern_test_support::TempHome::new();
    home.config(&format!(
        "[model]\nbase_url = \"{}\"\nname = \"fake-model\"\nstream = false\n\n\
         [gateway]\nlisten = \"127.0.0.1:0\"\n\n{extra}",
        fake.base_url()
    ));
    home
}

/// The home as tern-config sees it.
#[allow(dead_code)]
pub fn tern_home(home: &tern_test_support::TempHome) -> tern_config::Home {
    tern_config::Home { root: home.home() }
}

/// A gateway booted as `tern gateway` boots it ([`GatewayBuilder`]): the home's
/// configuration (environment left out), working in the home's `work/`.
#[allow(dead_code)]
pub fn builder(home: &tern_test_support::TempHome) -> tern_gateway::boot::GatewayBuilder {
    let eff = tern_config::load(&tern_home(home), &|_| None).unwrap();
    tern_gateway::boot::GatewayBuilder::new(tern_home(home), eff).workdir(home.work())
}

/// Adds the inbox reviewer `name` to the home's store (before a gateway starts on it).
#[allow(dead_code)]
pub async fn add_reviewer(home: &tern_test_support::TempHome, name: &str) {
    let (store, _) = open(&home.home()).await;
    tern_inbox::Inbox::new(store.clone())
        .reviewers()
        .add(name, false)
        .await
        .unwrap();
    store.close().await;
}
