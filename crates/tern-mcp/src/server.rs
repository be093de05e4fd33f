//! One configured MCP server's life, for [`McpManager`](crate::McpManager): its state, the
//! [`ServerHandle`] its tools call through (a call takes the current client, waiting while
//! the server starts or restarts), and its runner task — boot, lazy start on demand, restart
//! with backoff after a crash, close at shutdown (see the manager's module docs).

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::Tool;
use serde::Serialize;
use tern_config::{McpServerConfig, McpStartup, McpTransport};
use tern_util::Backoff;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::client::{ClientOptions, McpClient};
use crate::error::McpError;

/// Delays between restarts of a server that crashed.
const RESTART_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

/// Where a server is in its life.
#[derive(Clone)]
pub(crate) enum State {
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

/// A server's state as reported by [`McpManager::status`](crate::McpManager::status).
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

/// One server in [`McpManager::status`](crate::McpManager::status).
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

pub(crate) struct Server {
    pub(crate) name: String,
    pub(crate) config: McpServerConfig,
    pub(crate) options: ClientOptions,
    pub(crate) state: watch::Sender<State>,
    /// A call wants an idle (lazy) server started.
    pub(crate) demand: Notify,
    /// The tools it offers, as listed at boot.
    pub(crate) tools: std::sync::OnceLock<Vec<Tool>>,
    /// Those tools as tern tools, made once: a registry made again (`tern chat`'s `/model`)
    /// gets the same ones, so their leaked names are leaked once. They hold this server's
    /// handle, so `shutdown` empties it to end the cycle.
    pub(crate) built: std::sync::Mutex<Option<Vec<Arc<dyn tern_tools::DynTool>>>>,
}

/// A server as its tools see it: calls go to whatever client currently runs it.
#[derive(Clone)]
pub struct ServerHandle(pub(crate) Arc<Server>);

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

    pub(crate) fn status(&self) -> ServerStatus {
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

/// A server's runner (see the module docs).
pub(crate) async fn run(server: Arc<Server>, stop: CancellationToken) {
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
