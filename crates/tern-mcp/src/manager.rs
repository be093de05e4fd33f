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
//!   closed), the runner starts it again after a [`Backoff`](tern_util::Backoff) delay (about 1 s, doubling to
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

use tern_config::McpServerConfig;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::client::ClientOptions;
use crate::server::{Server, ServerHandle, ServerStatus, State, run};

/// How long [`McpManager::shutdown`] waits for the servers to close.
const SHUTDOWN_JOIN: Duration = Duration::from_secs(10);

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
