//! [`McpClient`]: one configured MCP server, reached over its stdio or over streamable HTTP.
//!
//! A stdio server's program is started with tokio's `Command` (its `env` on top of tern's
//! environment less tern's secrets, scrubbed as the agent's commands' is, confined or not;
//! its `cwd`), confined by the sandbox [`ClientOptions::sandbox`] gives unless
//! its `sandbox` says otherwise, and handed to rmcp's child-process transport. An HTTP server
//! is reached at its `url` with its `headers` and the bearer token read from the variable
//! `bearer_token_env` names (read at each start, so a rotated token is picked up by a
//! restart). Either must answer `initialize` within `startup_timeout`. Its stderr is read line by line into tern's log
//! (target `tern_mcp::stderr`, with the server's name), so a server's complaints are where
//! tern's own are. Dropping the client (or [`McpClient::close`]) ends the server: rmcp kills a
//! child whose transport is dropped.
//!
//! A call that outlives `tool_timeout`, or whose future is dropped (an interrupted turn), is
//! abandoned with `notifications/cancelled` sent to the server (by `Abandon`, as the call
//! is sent through rmcp's `Peer` to learn its progress token first).
//!
//! A request the transport cannot carry (the HTTP server is down or no longer knows the
//! session, a response stream stayed broken) ends the session, so [`crate::McpManager`]
//! restarts the server as it does a stdio server that exited; an HTTP 429 or 5xx does not
//! (the server answered). The HTTP client is `http.rs`'s.
//!
//! What the server sends tern during a call — progress, elicitations — goes through the
//! client's handler (`handler.rs`) to the call it is for ([`CallOptions`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientRequest, Implementation, JsonObject, RequestId, ServerResult,
    Tool,
};
use rmcp::service::{
    ClientInitializeError, Peer, PeerRequestOptions, RunningService, ServiceError,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use tern_config::{McpSandbox, McpServerConfig, McpTransport};
use tern_sandbox::{Level, Mode, Sandbox};
use tern_tools::{ProgressSink, ToolImages};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{ChildStderr, Command};
use tokio::sync::watch;

use crate::elicit::{CallScope, Elicitor};
use crate::error::McpError;
use crate::handler::{Calls, Handler};
use crate::result::{push_images, result_text};

/// What tern answers a server with, beyond the requests tern makes: the handlers of the
/// server-to-client requests and notifications (progress, elicitation), filled in by whoever
/// starts the client (the gateway, `tern chat`, `tern mcp call`). `Default`: none of them.
/// (Progress needs no handler here: it goes to each call's own sink, [`CallOptions`].)
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct ClientOptions {
    /// The sandbox stdio servers run in (the agent's, `[sandbox]`), unless a server's
    /// `sandbox` says otherwise; `None`: no sandbox.
    pub sandbox: Option<ServerSandbox>,
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
            .field("sandbox", &self.sandbox)
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
    /// Where the result's images go (besides their description in the text).
    pub images: Option<ToolImages>,
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

    /// The result's images go to `images`.
    pub fn with_images(mut self, images: ToolImages) -> Self {
        self.images = Some(images);
        self
    }
}

impl std::fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field("progress", &self.progress.is_some())
            .field("scope", &self.scope)
            .field("images", &self.images.is_some())
            .finish()
    }
}

/// The sandbox of stdio servers: the agent's policy, and the directory that counts as the
/// workspace of a server without `cwd` (the gateway's or `tern chat`'s working directory).
#[derive(Debug, Clone)]
pub struct ServerSandbox {
    pub sandbox: Arc<Sandbox>,
    pub workspace: PathBuf,
}

/// A running, initialized MCP server.
pub struct McpClient {
    name: String,
    config: McpServerConfig,
    peer: Peer<RoleClient>,
    /// The calls in flight, for the progress and elicitations the server sends about them.
    calls: Arc<Calls>,
    pid: Option<u32>,
    /// Cancels the service (ends the session, closes the transport); taken by `close`.
    stop: Mutex<Option<rmcp::service::RunningServiceCancellationToken>>,
    /// `true` once the service has ended: the server exited, closed its output, or was closed.
    ended: watch::Receiver<bool>,
    /// The task that owns the service until it ends.
    service_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The sandboxed server's private temporary directory, removed with the client.
    _sandbox: Option<tern_sandbox::Prepared>,
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
        let timeout = config.startup_timeout();
        let calls = Arc::new(Calls::default());
        let handler = Handler {
            server: name.to_owned(),
            calls: Arc::clone(&calls),
            elicitor: options.elicitor.clone(),
        };
        // On a timeout the handshake's future is dropped with the transport in it, which
        // kills the child (or drops the HTTP connection).
        let (service, pid, prepared) = match config.transport() {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut cmd = Command::new(command);
                cmd.args(args).kill_on_drop(true);
                if let Some(cwd) = cwd {
                    cmd.current_dir(cwd);
                }
                let prepared = confine(name, config, options, &mut cmd).await?;
                if prepared.is_none() {
                    // Unconfined, the server still gets tern's environment less its secrets
                    // (model keys, channel tokens, `TERN_*`), as confined ones do: a
                    // third-party server, or a model asking it to print its environment,
                    // must not read them.
                    let policy = options
                        .sandbox
                        .as_ref()
                        .map(|b| b.sandbox.policy().env.clone())
                        .unwrap_or_default();
                    cmd.env_clear()
                        .envs(tern_sandbox::env::scrub(std::env::vars_os(), &policy));
                }
                cmd.envs(env);
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
                let service = handshake(name, timeout, handler.serve(transport)).await?;
                (service, pid, prepared)
            }
            McpTransport::Http {
                url,
                headers,
                bearer_token_env,
            } => {
                let mut http = StreamableHttpClientTransportConfig::with_uri(url);
                http.retry_config = crate::http::reconnects();
                if let Some(var) = bearer_token_env {
                    let token = std::env::var(var).map_err(|_| McpError::MissingToken {
                        server: name.to_owned(),
                        variable: var.to_owned(),
                    })?;
                    http = http.auth_header(token);
                }
                http = http.custom_headers(http_headers(name, headers)?);
                let client = crate::http::SessionHttp::new().map_err(|e| McpError::Initialize {
                    server: name.to_owned(),
                    reason: format!("cannot make its HTTP client: {e}"),
                })?;
                let transport = StreamableHttpClientTransport::with_client(client, http);
                let service = handshake(name, timeout, handler.serve(transport)).await?;
                (service, None, None)
            }
        };
        tracing::info!(server = name, pid, "MCP server initialized");
        let peer = service.peer().clone();
        let stop = service.cancellation_token();
        let (ended_tx, ended) = watch::channel(false);
        let server = name.to_owned();
        let service_task = tokio::spawn(async move {
            match service.waiting().await {
                Ok(reason) => tracing::debug!(server, ?reason, "MCP session ended"),
                Err(e) => tracing::warn!(server, error = %e, "MCP session's task failed"),
            }
            let _ = ended_tx.send(true);
        });
        Ok(McpClient {
            name: name.to_owned(),
            config: config.clone(),
            peer,
            calls,
            pid,
            stop: Mutex::new(Some(stop)),
            ended,
            service_task: Mutex::new(Some(service_task)),
            _sandbox: prepared,
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
        self.peer.peer_info().and_then(|i| i.server_info.clone())
    }

    /// Every tool the server offers, all pages of `tools/list` (within `tool_timeout`).
    pub async fn list_tools(&self) -> Result<Vec<Tool>, McpError> {
        let timeout = self.config.tool_timeout();
        match tokio::time::timeout(timeout, self.peer.list_all_tools()).await {
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
        let images = options.images.clone();
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
        if let Some(images) = &images {
            push_images(&result, images);
        }
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
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let (handle, _registration) = {
            // Nothing the server says about this call is looked up before it is registered.
            let _gate = self.calls.gate.lock().await;
            let handle = self
                .peer
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
            peer: Some(self.peer.clone()),
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

    /// Whether the session has ended (the server exited or closed its output, or the
    /// client was closed): no call can succeed any more.
    pub fn is_closed(&self) -> bool {
        // Ended, or being ended (the stop token taken): a session being torn down takes no
        // new call, so a call made meanwhile waits for the manager's restart.
        *self.ended.borrow() || self.stop.lock().map_or(true, |s| s.is_none())
    }

    /// Resolves once the session has ended (see [`McpClient::is_closed`]).
    pub async fn closed(&self) {
        let mut ended = self.ended.clone();
        // An error means the task is gone, so the session has ended too.
        let _ = ended.wait_for(|e| *e).await;
    }

    /// Ends the session and the server (stdin closed, then SIGTERM, then SIGKILL, as the MCP
    /// specification's stdio shutdown says) and waits for that.
    pub async fn close(&self) {
        let stop = self.stop.lock().map(|mut s| s.take()).unwrap_or_default();
        if let Some(stop) = stop {
            stop.cancel();
        }
        let task = self
            .service_task
            .lock()
            .map(|mut t| t.take())
            .unwrap_or_default();
        if let Some(task) = task
            && let Err(e) = task.await
        {
            tracing::warn!(server = self.name, error = %e, "closing the MCP server");
        }
    }

    fn service_error(&self, method: &str, e: ServiceError) -> McpError {
        if let Some(status) = crate::http::busy_status(&e) {
            // The server (or what is in front of it) answered, rate-limited or failing for
            // now: the session may well be fine, so it is kept.
            return McpError::Protocol {
                server: self.name.clone(),
                method: method.to_owned(),
                reason: format!("the server answered HTTP {status}"),
            };
        }
        match e {
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                // Over streamable HTTP nothing else tells tern the server went away: rmcp's
                // HTTP transport keeps its session when a request cannot be sent (the
                // server is down, or restarted and no longer knows the session), so the
                // session would never end, the manager never restart it, and every later
                // call fail the same way. A request the transport could not carry means the
                // session is over: end it, so the manager starts a new one. (Over stdio the
                // child is gone anyway.)
                self.end_session();
                tracing::warn!(server = self.name, method, error = %e, "MCP transport failed; ending the session");
                McpError::Closed {
                    server: self.name.clone(),
                }
            }
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

impl McpClient {
    /// Ends the session without waiting for it to close ([`McpClient::close`] waits).
    fn end_session(&self) {
        if let Ok(mut stop) = self.stop.lock()
            && let Some(stop) = stop.take()
        {
            stop.cancel();
        }
    }
}

impl Drop for McpClient {
    /// A client dropped without [`McpClient::close`] still ends its session, and with it the
    /// server (rmcp kills a child whose transport is dropped).
    fn drop(&mut self) {
        self.end_session();
    }
}

/// Waits for `initialize` within `timeout`.
async fn handshake(
    name: &str,
    timeout: std::time::Duration,
    serve: impl Future<Output = Result<RunningService<RoleClient, Handler>, ClientInitializeError>>,
) -> Result<RunningService<RoleClient, Handler>, McpError> {
    match tokio::time::timeout(timeout, serve).await {
        Ok(Ok(service)) => Ok(service),
        Ok(Err(e)) => Err(McpError::Initialize {
            server: name.to_owned(),
            reason: init_reason(&e),
        }),
        Err(_) => Err(McpError::StartupTimeout {
            server: name.to_owned(),
            timeout,
        }),
    }
}

/// The sandbox of a stdio server: its own `sandbox`, else the one of `options`. A confined
/// server gets the scrubbed environment of the agent's commands (its `env` is added after)
/// and a private `TMPDIR`, and is confined between fork and exec as the `terminal` tool's
/// commands are; its workspace (writable under `workspace-write`) is its `cwd`, else the
/// options' workspace. Returns what must live as long as the server.
async fn confine(
    name: &str,
    config: &McpServerConfig,
    options: &ClientOptions,
    cmd: &mut Command,
) -> Result<Option<tern_sandbox::Prepared>, McpError> {
    let Some(base) = &options.sandbox else {
        return Ok(None);
    };
    let mode = match config.sandbox {
        Some(McpSandbox::None) | Some(McpSandbox::FullAccess) => return Ok(None),
        Some(McpSandbox::ReadOnly) => Mode::ReadOnly,
        Some(McpSandbox::WorkspaceWrite) => Mode::WorkspaceWrite,
        None => base.sandbox.policy().mode,
    };
    if mode == Mode::FullAccess {
        return Ok(None);
    }
    let mut policy = base.sandbox.policy().clone();
    policy.mode = mode;
    let sandbox = Sandbox::with_support(policy, base.sandbox.support().clone());
    let workspace = config
        .cwd
        .as_ref()
        .map_or_else(|| base.workspace.clone(), PathBuf::from);
    let prepared = tokio::task::spawn_blocking(move || {
        sandbox.prepare(&workspace, Level::Sandboxed, std::env::vars_os())
    })
    .await
    .map_err(|e| McpError::Sandbox {
        server: name.to_owned(),
        reason: e.to_string(),
    })?
    .map_err(|e| McpError::Sandbox {
        server: name.to_owned(),
        reason: e.to_string(),
    })?;
    let confinement = prepared.confinement.clone();
    cmd.env_clear()
        .envs(prepared.env.iter().map(|(k, v)| (k, v)));
    // SAFETY: `apply` makes only raw syscalls (no allocation, no locks), as is required
    // between fork and exec.
    unsafe {
        cmd.pre_exec(move || confinement.apply());
    }
    Ok(Some(prepared))
}

/// `headers` as HTTP headers; a bad value is named by its header, never shown.
fn http_headers(
    name: &str,
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<HashMap<reqwest::header::HeaderName, reqwest::header::HeaderValue>, McpError> {
    headers
        .iter()
        .map(|(k, v)| {
            let bad = || McpError::BadHeader {
                server: name.to_owned(),
                header: k.clone(),
            };
            Ok((
                reqwest::header::HeaderName::try_from(k.as_str()).map_err(|_| bad())?,
                reqwest::header::HeaderValue::try_from(v.as_str()).map_err(|_| bad())?,
            ))
        })
        .collect()
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
        // A notification is one write: the task ends at once, or with the transport.
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
