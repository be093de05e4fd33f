//! [`McpManager`]: every configured MCP server of one process (the gateway, `tern chat`),
//! started, watched, restarted and stopped.
//!
//! Each enabled server has one task, its runner, that drives its life:
//!
//! - **boot**: the server is started and its tools listed, all servers at once;
//!   [`McpManager::start`] returns when each has booted or failed, so the tools can be added
//!   to the registry (which is fixed once the agent holds it). A server that fails here is
//!   logged and reported as failed; the others work.
//! - **lazy** servers (`startup = "lazy"`) are stopped again right after their tools are
//!   listed, and started again at the first call of one of their tools. Listing at boot
//!   rather than caching the list in `$TERN_HOME` means the tools the model sees are never
//!   stale and nothing is kept on disk for a server; the price is one short start per boot.
//! - **crash**: when a running server's session ends (the process exited, the connection
//!   closed), the runner starts it again after a [`Backoff`] delay (about 1 s, doubling to
//!   1 min), until it runs again or the manager shuts down.
//! - **shutdown**: [`McpManager::shutdown`] stops every runner, which closes its server, and
//!   joins them.
//!
//! A tool holds a [`ServerHandle`], not a client: a call takes the server's current client,
//! waiting for it (within `startup_timeout`) while it starts or restarts, so a restarted
//! server serves the same tools.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::Tool;
use serde::Serialize;
use tern_config::{McpServerConfig, McpStartup, McpTransport};
use tern_util::Backoff;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::client::{ClientOptions, McpClient};
use crate::error::McpError;

/// Delays between restarts of a server that crashed.
const RESTART_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
/// How long [`McpManager::shutdown`] waits for the servers to close.
const SHUTDOWN_JOIN: Duration = Duration::from_secs(10);

/// Where a server is in its life.
#[derive(Clone)]
enum State {
    Disabled,
    /// Lazy, its tools listed, not running: started by the first call.
    Idle,
    Starting,
    Running(Arc<McpClient>),
    Restarting {
        attempt: u32,
        last_error: String,
    },
    Failed(String),
    Stopped,
}

/// A server's state as reported by [`McpManager::status`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ServerState {
    /// `enabled = false`.
    Disabled,
    /// Lazy and not started yet (or not since its tools were listed).
    Idle,
    Starting,
    /// Running; `pid` for a stdio server.
    Running {
        pid: Option<u32>,
    },
    /// Crashed and being restarted: restart attempt `attempt`, after `last_error`.
    Restarting {
        attempt: u32,
        last_error: String,
    },
    /// Failed to start at boot; it is not retried until the process restarts.
    Failed {
        error: String,
    },
    /// Shut down.
    Stopped,
}

impl std::fmt::Display for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerState::Disabled => f.write_str("disabled"),
            ServerState::Idle => f.write_str("idle (lazy: starts at its first call)"),
            ServerState::Starting => f.write_str("starting"),
            ServerState::Running { pid: Some(pid) } => write!(f, "running (pid {pid})"),
            ServerState::Running { pid: None } => f.write_str("running"),
            ServerState::Restarting {
                attempt,
                last_error,
            } => write!(
                f,
                "restarting (attempt {attempt}; last error: {last_error})"
            ),
            ServerState::Failed { error } => write!(f, "failed: {error}"),
            ServerState::Stopped => f.write_str("stopped"),
        }
    }
}

/// One server in [`McpManager::status`].
#[derive(Debug, Clone, Serialize)]
pub struct ServerStatus {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    pub startup: &'static str,
    /// How many of its tools are offered to the model.
    pub tools: usize,
    #[serde(flatten)]
    pub state: ServerState,
}

struct Server {
    name: String,
    config: McpServerConfig,
    options: ClientOptions,
    state: watch::Sender<State>,
    /// A call wants an idle (lazy) server started.
    demand: Notify,
    /// The tools it offers, as listed at boot.
    tools: std::sync::OnceLock<Vec<Tool>>,
    /// Those tools as tern tools, made once: a registry made again (`tern chat`'s `/model`)
    /// gets the same ones, so their leaked names are leaked once. They hold this server's
    /// handle, so `shutdown` empties it to end the cycle.
    built: std::sync::Mutex<Option<Vec<Arc<dyn tern_tools::DynTool>>>>,
}

/// A server as its tools see it: calls go to whatever client currently runs it.
#[derive(Clone)]
pub struct ServerHandle(Arc<Server>);

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("name", &self.0.name)
            .finish_non_exhaustive()
    }
}

impl ServerHandle {
    /// A handle on an already running client that nobody restarts (tests, `tern mcp`).
    pub fn fixed(client: Arc<McpClient>) -> Self {
        ServerHandle(Arc::new(Server {
            name: client.name().to_owned(),
            config: client.config().clone(),
            options: ClientOptions::default(),
            state: watch::Sender::new(State::Running(client)),
            demand: Notify::new(),
            tools: std::sync::OnceLock::new(),
            built: std::sync::Mutex::new(None),
        }))
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Its configuration.
    pub fn config(&self) -> &McpServerConfig {
        &self.0.config
    }

    /// The running client: at once while the server runs; while it starts, restarts or (lazy)
    /// has not started, once it runs, within its `startup_timeout`. An error names the
    /// server and why it is not available, in words the model can act on.
    pub async fn client(&self) -> Result<Arc<McpClient>, McpError> {
        let server = &self.0;
        let mut rx = server.state.subscribe();
        let wait = async {
            loop {
                {
                    let state = rx.borrow_and_update();
                    match &*state {
                        State::Running(c) if !c.is_closed() => return Ok(Arc::clone(c)),
                        // Closed but not yet noticed by the runner: it is about to restart.
                        State::Running(_) | State::Starting | State::Restarting { .. } => {}
                        State::Idle => server.demand.notify_one(),
                        State::Failed(e) => {
                            return Err(self.unavailable(format!("it failed to start: {e}")));
                        }
                        State::Disabled => {
                            return Err(self.unavailable("it is disabled (enabled = false)".into()));
                        }
                        State::Stopped => return Err(self.unavailable("it was shut down".into())),
                    }
                }
                if rx.changed().await.is_err() {
                    return Err(self.unavailable("it was shut down".into()));
                }
            }
        };
        let timeout = server.config.startup_timeout();
        match tokio::time::timeout(timeout, wait).await {
            Ok(r) => r,
            Err(_) => {
                let why = match &*server.state.borrow() {
                    State::Restarting {
                        attempt,
                        last_error,
                    } => format!(
                        "it crashed and is being restarted (attempt {attempt}; last error: {last_error})"
                    ),
                    _ => "it is still starting".to_owned(),
                };
                Err(self.unavailable(format!(
                    "{why}; it was not back within {}, try again later",
                    humantime::format_duration(timeout)
                )))
            }
        }
    }

    fn unavailable(&self, reason: String) -> McpError {
        McpError::Unavailable {
            server: self.0.name.clone(),
            reason,
        }
    }

    fn status(&self) -> ServerStatus {
        let server = &self.0;
        let state = match &*server.state.borrow() {
            State::Disabled => ServerState::Disabled,
            State::Idle => ServerState::Idle,
            State::Starting => ServerState::Starting,
            State::Running(c) if c.is_closed() => ServerState::Restarting {
                attempt: 1,
                last_error: "its connection closed".into(),
            },
            State::Running(c) => ServerState::Running { pid: c.pid() },
            State::Restarting {
                attempt,
                last_error,
            } => ServerState::Restarting {
                attempt: *attempt,
                last_error: last_error.clone(),
            },
            State::Failed(e) => ServerState::Failed { error: e.clone() },
            State::Stopped => ServerState::Stopped,
        };
        ServerStatus {
            name: server.name.clone(),
            transport: match server.config.transport() {
                McpTransport::Stdio { .. } => "stdio",
                McpTransport::Http { .. } => "http",
            },
            startup: server.config.startup.as_str(),
            tools: server.tools.get().map_or(0, |t| {
                t.iter()
                    .filter(|t| server.config.offers_tool(&t.name))
                    .count()
            }),
            state,
        }
    }
}

/// Every configured server of this process; see the module docs. Cheap to clone.
#[derive(Clone)]
pub struct McpManager {
    servers: Arc<BTreeMap<String, ServerHandle>>,
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpManager")
            .field("servers", &self.servers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl McpManager {
    /// A manager with no servers.
    pub fn empty() -> Self {
        McpManager {
            servers: Arc::new(BTreeMap::new()),
            stop: CancellationToken::new(),
            tasks: TaskTracker::new(),
        }
    }

    /// Starts every enabled server of `servers` at once and returns when each has booted
    /// (its tools listed) or failed (logged, and reported by [`McpManager::status`]).
    pub async fn start(
        servers: &BTreeMap<String, McpServerConfig>,
        options: ClientOptions,
    ) -> Self {
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        let mut handles = BTreeMap::new();
        for (name, config) in servers {
            let state = if config.enabled {
                State::Starting
            } else {
                State::Disabled
            };
            let handle = ServerHandle(Arc::new(Server {
                name: name.clone(),
                config: config.clone(),
                options: options.clone(),
                state: watch::Sender::new(state),
                demand: Notify::new(),
                tools: std::sync::OnceLock::new(),
                built: std::sync::Mutex::new(None),
            }));
            if config.enabled {
                tasks.spawn(run(handle.0.clone(), stop.clone()));
            }
            handles.insert(name.clone(), handle);
        }
        let booted = handles.values().map(|h| {
            let mut rx = h.0.state.subscribe();
            async move {
                let _ = rx.wait_for(|s| !matches!(s, State::Starting)).await;
            }
        });
        futures_util::future::join_all(booted).await;
        McpManager {
            servers: Arc::new(handles),
            stop,
            tasks,
        }
    }

    /// The server `name`.
    pub fn server(&self, name: &str) -> Option<&ServerHandle> {
        self.servers.get(name)
    }

    /// The names of every configured server, enabled or not.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.servers.keys().map(String::as_str)
    }

    /// Each configured server's state, by name.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.servers.values().map(ServerHandle::status).collect()
    }

    /// The toolsets of the servers whose tools are registered (`mcp:NAME`), by name.
    pub fn toolsets(&self) -> Vec<String> {
        self.servers
            .values()
            .filter(|h| h.0.tools.get().is_some())
            .map(|h| crate::tools::toolset(&h.0.name))
            .collect()
    }

    /// Adds every booted server's offered tools to `registry`; returns their names.
    pub fn register(&self, registry: &mut tern_tools::Registry) -> Vec<&'static str> {
        let mut added = Vec::new();
        for handle in self.servers.values() {
            if let Some(tools) = handle.0.tools.get() {
                let Ok(mut built) = handle.0.built.lock() else {
                    continue;
                };
                for tool in built.get_or_insert_with(|| crate::tools::build(handle, tools)) {
                    registry.register(Arc::clone(tool));
                    added.push(tool.spec().name);
                }
            }
        }
        added
    }

    /// `toolsets` with `mcp` replaced by every server's toolset (`mcp:NAME`) and the toolsets
    /// of servers that have no tools registered (failed at boot, disabled, unknown) left out
    /// with a warning, so that a broken server does not make every turn fail.
    pub fn expand_toolsets(&self, toolsets: &[String]) -> Vec<String> {
        let available = self.toolsets();
        let mut out: Vec<String> = Vec::new();
        let push = |t: String, out: &mut Vec<String>| {
            if !out.contains(&t) {
                out.push(t);
            }
        };
        for t in toolsets {
            if t == crate::tools::TOOLSET_ALL {
                for a in &available {
                    push(a.clone(), &mut out);
                }
            } else if t.starts_with("mcp:") {
                if available.contains(t) {
                    push(t.clone(), &mut out);
                } else {
                    tracing::warn!(toolset = %t, "toolset left out: its MCP server is not configured, disabled, or failed to start (see `tern mcp list`)");
                }
            } else {
                push(t.clone(), &mut out);
            }
        }
        out
    }

    /// Closes every server and joins every task the manager started (bounded: a server that
    /// does not close within 10 s is left to its kill-on-drop).
    pub async fn shutdown(&self) {
        self.stop.cancel();
        self.tasks.close();
        if tokio::time::timeout(SHUTDOWN_JOIN, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("MCP servers still closing after {SHUTDOWN_JOIN:?}; going on");
        }
        for handle in self.servers.values() {
            if let Ok(mut built) = handle.0.built.lock() {
                built.take();
            }
        }
    }
}

/// A server's runner (see the module docs).
async fn run(server: Arc<Server>, stop: CancellationToken) {
    let name = server.name.clone();
    let lazy = server.config.startup == McpStartup::Lazy;
    // Boot: start and list the tools, once.
    let client = match boot(&server).await {
        Ok(client) => client,
        Err(e) => {
            tracing::error!(server = name, error = %e, "MCP server failed to start; its tools are not offered");
            server.state.send_replace(State::Failed(e.to_string()));
            return;
        }
    };
    let mut current = Some(client);
    if lazy {
        if let Some(c) = current.take() {
            c.close().await;
        }
        server.state.send_replace(State::Idle);
        tokio::select! {
            () = server.demand.notified() => {}
            () = stop.cancelled() => {
                server.state.send_replace(State::Stopped);
                return;
            }
        }
        tracing::info!(server = name, "starting lazy MCP server for its first call");
    }
    let mut attempt: u32 = 0;
    loop {
        let client = match current.take() {
            Some(c) => c,
            None => {
                let started = tokio::select! {
                    r = McpClient::start_with(&name, &server.config, &server.options) => r,
                    () = stop.cancelled() => break,
                };
                match started {
                    Ok(c) => Arc::new(c),
                    Err(e) => {
                        attempt += 1;
                        tracing::warn!(server = name, attempt, error = %e, "MCP server did not restart");
                        if !wait_to_retry(&server, &stop, attempt, e.to_string()).await {
                            break;
                        }
                        continue;
                    }
                }
            }
        };
        attempt = 0;
        server
            .state
            .send_replace(State::Running(Arc::clone(&client)));
        tokio::select! {
            () = client.closed() => {}
            () = stop.cancelled() => {
                client.close().await;
                break;
            }
        }
        attempt += 1;
        let error = "its connection closed (it exited or crashed; its stderr is in tern's log)";
        tracing::warn!(
            server = name,
            pid = client.pid(),
            "MCP server {error}; restarting it"
        );
        client.close().await;
        if !wait_to_retry(&server, &stop, attempt, error.to_owned()).await {
            break;
        }
    }
    server.state.send_replace(State::Stopped);
}

/// The first start of a server: its client and tools.
async fn boot(server: &Server) -> Result<Arc<McpClient>, McpError> {
    let client =
        Arc::new(McpClient::start_with(&server.name, &server.config, &server.options).await?);
    match client.list_tools().await {
        Ok(tools) => {
            let _ = server.tools.set(tools);
            Ok(client)
        }
        Err(e) => {
            client.close().await;
            Err(e)
        }
    }
}

/// Reports restart `attempt` and waits its backoff delay; `false` when the manager stops.
async fn wait_to_retry(
    server: &Server,
    stop: &CancellationToken,
    attempt: u32,
    last_error: String,
) -> bool {
    server.state.send_replace(State::Restarting {
        attempt,
        last_error,
    });
    tokio::select! {
        () = tokio::time::sleep(RESTART_BACKOFF.delay(attempt)) => true,
        () = stop.cancelled() => false,
    }
}
