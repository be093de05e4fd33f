//! [`McpClient`]: one configured MCP server, reached over its stdio.
//!
//! The server's program is started with tokio's `Command` (its `env` on top of tern's
//! environment, its `cwd`), handed to rmcp's child-process transport, and must answer
//! `initialize` within `startup_timeout`. Its stderr is read line by line into tern's log
//! (target `tern_mcp::stderr`, with the server's name), so a server's complaints are where
//! tern's own are. Dropping the client (or [`McpClient::close`]) ends the server: rmcp kills a
//! child whose transport is dropped.
//!
//! A call that outlives `tool_timeout`, or whose future is dropped (an interrupted turn), is
//! abandoned with `notifications/cancelled` sent to the server (by [`Abandon`], as the call
//! is sent through rmcp's `Peer` to learn its progress token first).
//!
//! What the server sends tern during a call — progress, elicitations — goes through the
//! client's handler (`handler.rs`) to the call it is for ([`CallOptions`]).

use std::process::Stdio;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientRequest, Implementation, JsonObject, RequestId, ServerResult,
    Tool,
};
use rmcp::service::{
    ClientInitializeError, Peer, PeerRequestOptions, RunningService, ServiceError,
};
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use tern_config::{McpServerConfig, McpTransport};
use tern_tools::ProgressSink;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{ChildStderr, Command};

use crate::elicit::{CallScope, Elicitor};
use crate::error::McpError;
use crate::handler::{Calls, Handler};
use crate::result::result_text;

/// What tern answers a server with, beyond the requests tern makes: the handlers of the
/// server-to-client requests and notifications (progress, elicitation), filled in by whoever
/// starts the client (the gateway, `tern chat`, `tern mcp call`). `Default`: none of them.
/// (Progress needs no handler here: it goes to each call's own sink, [`CallOptions`].)
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct ClientOptions {
    /// Who answers the server's `elicitation/create`; with one, the client advertises the
    /// `elicitation` capability, without one it does not (and the server cannot ask).
    pub elicitor: Option<Arc<dyn Elicitor>>,
}

impl ClientOptions {
    /// Options whose elicitations `elicitor` answers.
    pub fn with_elicitor(mut self, elicitor: Arc<dyn Elicitor>) -> Self {
        self.elicitor = Some(elicitor);
        self
    }
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("elicitor", &self.elicitor.is_some())
            .finish_non_exhaustive()
    }
}

/// What one call takes besides its arguments: where its progress goes, and the tool call
/// it is made for (the session an elicitation during it asks in). `Default`: neither.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct CallOptions {
    pub progress: Option<ProgressSink>,
    pub scope: Option<CallScope>,
}

impl CallOptions {
    /// Progress reports of the call go to `sink`.
    pub fn with_progress(mut self, sink: ProgressSink) -> Self {
        self.progress = Some(sink);
        self
    }

    /// The call is made for `scope`.
    pub fn with_scope(mut self, scope: CallScope) -> Self {
        self.scope = Some(scope);
        self
    }
}

impl std::fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field("progress", &self.progress.is_some())
            .field("scope", &self.scope)
            .finish()
    }
}

/// A running, initialized MCP server.
pub struct McpClient {
    name: String,
    config: McpServerConfig,
    service: RunningService<RoleClient, Handler>,
    calls: Arc<Calls>,
    pid: Option<u32>,
}

impl std::fmt::Debug for McpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the config: its `env` may hold secrets.
        f.debug_struct("McpClient")
            .field("name", &self.name)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

impl McpClient {
    /// Starts the server `name` as configured and initializes it within its
    /// `startup_timeout`. A server that cannot be started, exits, or stays silent is an error
    /// that names it; its child process is ended.
    pub async fn start(name: &str, config: &McpServerConfig) -> Result<Self, McpError> {
        Self::start_with(name, config, &ClientOptions::default()).await
    }

    /// [`McpClient::start`] with the handlers of `options`.
    pub async fn start_with(
        name: &str,
        config: &McpServerConfig,
        options: &ClientOptions,
    ) -> Result<Self, McpError> {
        let McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } = config.transport()
        else {
            return Err(McpError::Unsupported {
                server: name.to_owned(),
                what: "a `url` server (streamable HTTP)".to_owned(),
            });
        };
        let mut cmd = Command::new(command);
        cmd.args(args).envs(env).kill_on_drop(true);
        if let Some(cwd) = cwd {
            cmd.current_dir(cwd);
        }
        let (transport, stderr) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| McpError::Spawn {
                server: name.to_owned(),
                command: command.to_owned(),
                source,
            })?;
        let pid = transport.id();
        if let Some(stderr) = stderr {
            tokio::spawn(log_stderr(name.to_owned(), stderr));
        }
        let calls = Arc::new(Calls::default());
        let handler = Handler {
            server: name.to_owned(),
            calls: Arc::clone(&calls),
            elicitor: options.elicitor.clone(),
        };
        let timeout = config.startup_timeout();
        // On a timeout the handshake's future is dropped with the transport in it, which
        // kills the child.
        let service = match tokio::time::timeout(timeout, handler.serve(transport)).await {
            Ok(Ok(service)) => service,
            Ok(Err(e)) => {
                return Err(McpError::Initialize {
                    server: name.to_owned(),
                    reason: init_reason(&e),
                });
            }
            Err(_) => {
                return Err(McpError::StartupTimeout {
                    server: name.to_owned(),
                    timeout,
                });
            }
        };
        tracing::info!(server = name, pid, "MCP server initialized");
        Ok(McpClient {
            name: name.to_owned(),
            config: config.clone(),
            service,
            calls,
            pid,
        })
    }

    /// The server's name (its `[mcp_servers.NAME]`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its configuration.
    pub fn config(&self) -> &McpServerConfig {
        &self.config
    }

    /// The process id of the server, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// What the server said about itself in `initialize`.
    pub fn server_info(&self) -> Option<Implementation> {
        self.service.peer_info().and_then(|i| i.server_info.clone())
    }

    /// Every tool the server offers, all pages of `tools/list` (within `tool_timeout`).
    pub async fn list_tools(&self) -> Result<Vec<Tool>, McpError> {
        let timeout = self.config.tool_timeout();
        match tokio::time::timeout(timeout, self.service.peer().list_all_tools()).await {
            Ok(r) => r.map_err(|e| self.service_error("tools/list", e)),
            Err(_) => Err(McpError::Protocol {
                server: self.name.clone(),
                method: "tools/list".to_owned(),
                reason: format!("no answer within {}", humantime::format_duration(timeout)),
            }),
        }
    }

    /// Calls `tool` with `arguments` within `tool_timeout`; its result as the text the model
    /// reads. A result marked `isError` is [`McpError::ToolFailed`] with the server's text.
    pub async fn call_tool(
        &self,
        tool: &str,
        arguments: Option<JsonObject>,
    ) -> Result<String, McpError> {
        self.call_tool_with(tool, arguments, CallOptions::default())
            .await
    }

    /// [`McpClient::call_tool`] with the progress sink and scope of `options`.
    pub async fn call_tool_with(
        &self,
        tool: &str,
        arguments: Option<JsonObject>,
        options: CallOptions,
    ) -> Result<String, McpError> {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = arguments;
        let timeout = self.config.tool_timeout();
        let call = self.send_call(tool, params, options);
        let result = match tokio::time::timeout(timeout, call).await {
            Ok(r) => r.map_err(|e| self.service_error("tools/call", e))?,
            Err(_) => {
                return Err(McpError::ToolTimeout {
                    server: self.name.clone(),
                    tool: tool.to_owned(),
                    timeout,
                });
            }
        };
        let text = result_text(&result);
        if result.is_error == Some(true) {
            return Err(McpError::ToolFailed {
                server: self.name.clone(),
                tool: tool.to_owned(),
                message: text,
            });
        }
        Ok(text)
    }

    /// Sends `tools/call` and waits for its answer, the call registered for its progress
    /// and elicitations meanwhile. Dropped before the answer, it tells the server to cancel.
    async fn send_call(
        &self,
        tool: &str,
        params: CallToolRequestParams,
        options: CallOptions,
    ) -> Result<CallToolResult, ServiceError> {
        let peer = self.service.peer();
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let (handle, _registration) = {
            // Nothing the server says about this call is looked up before it is registered.
            let _gate = self.calls.gate.lock().await;
            let handle = peer
                .send_request_with_option(request, PeerRequestOptions::no_options())
                .await?;
            let registration = self.calls.register(
                handle.progress_token.clone(),
                tool,
                options.progress,
                options.scope,
            );
            (handle, registration)
        };
        let mut abandon = Abandon {
            peer: Some(peer.clone()),
            id: handle.id.clone(),
        };
        let result = handle.await_response().await;
        abandon.peer = None;
        match result? {
            ServerResult::CallToolResult(r) => Ok(r),
            // A tool with no result to give may answer `{}`.
            ServerResult::EmptyResult(_) => Ok(CallToolResult::success(Vec::new())),
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }

    /// Ends the session and the server (stdin closed, then SIGTERM, then SIGKILL, as the MCP
    /// specification's stdio shutdown says).
    pub async fn close(self) {
        if let Err(e) = self.service.cancel().await {
            tracing::warn!(server = self.name, error = %e, "closing the MCP server");
        }
    }

    fn service_error(&self, method: &str, e: ServiceError) -> McpError {
        match e {
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => McpError::Closed {
                server: self.name.clone(),
            },
            ServiceError::McpError(e) => McpError::Protocol {
                server: self.name.clone(),
                method: method.to_owned(),
                reason: e.message.into_owned(),
            },
            e => McpError::Protocol {
                server: self.name.clone(),
                method: method.to_owned(),
                reason: e.to_string(),
            },
        }
    }
}

/// Armed while a call waits for its answer: dropped armed (a timeout, an interrupted turn),
/// it sends the server `notifications/cancelled` for the call, so the server stops working
/// on an answer nobody will read.
struct Abandon {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
}

impl Drop for Abandon {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let params = CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some("the call was abandoned (timed out or interrupted)".to_owned()),
        );
        runtime.spawn(async move {
            let cancelled = CancelledNotification::new(params);
            if let Err(e) = peer.send_notification(cancelled.into()).await {
                tracing::debug!(error = %e, "notifications/cancelled not sent");
            }
        });
    }
}

/// Why `initialize` failed, in words: a server that exited says so rather than rmcp's
/// "connection closed: initialize response".
fn init_reason(e: &ClientInitializeError) -> String {
    match e {
        ClientInitializeError::ConnectionClosed(_) => {
            "it exited (or closed its output) before answering `initialize`; its stderr is in tern's log".to_owned()
        }
        ClientInitializeError::JsonRpcError(e) => format!("it refused `initialize`: {}", e.message),
        e => e.to_string(),
    }
}

/// Copies the server's stderr into the log, a line at a time, until it closes.
async fn log_stderr(server: String, stderr: ChildStderr) {
    let mut lines = BufReader::new(stderr).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) => tracing::info!(target: "tern_mcp::stderr", server, "{line}"),
            Ok(None) => break,
            Err(e) => {
                tracing::debug!(target: "tern_mcp::stderr", server, error = %e, "stderr unreadable");
                break;
            }
        }
    }
}
