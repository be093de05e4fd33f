//! tern as an MCP server: `/mcp` on the gateway (streamable HTTP, on the official SDK `rmcp`).
//!
//! # Why here
//!
//! The tools are the gateway's HTTP API said in MCP: they call the same services with the
//! same scoping — the inbox's agent API ([`tern_inbox::Inbox`], owner = the key's id), the
//! process manager through the model's own `terminal`/`process` tools (so the sandbox, the
//! hard-line list and the dangerous-command check apply as they do to the agent; a command
//! that would need a human's approval is refused), and the session API's store queries and
//! turn manager. A crate of its own would have to reach
//! into all of the gateway's internals (turn admission, `session_or_404`, the key check), so
//! the server lives beside them: one module per tool group (`inbox`, `procs`, `sessions`).
//!
//! # The flow of a request
//!
//! 1. `/mcp` sits behind the gateway's bearer check ([`crate::require_key`]): no key or a
//!    bad or revoked one is a 401 with the JSON envelope, as anywhere in the API; the body
//!    is held to `[gateway] max_body_bytes` (413).
//! 2. [`bind_sessions`] binds each MCP session to the key that initialized it: a request
//!    naming another key's `Mcp-Session-Id` gets 404, as an unknown session does (a 403
//!    would confirm the id exists).
//! 3. rmcp's [`StreamableHttpService`] runs one [`TernMcp`] per session. Every tool call
//!    reads the key from that very request (the HTTP parts rmcp hands on), never from the
//!    session, and scopes what it touches to it exactly as the HTTP API does.
//!
//! Tool failures (bad arguments, another key's id, a refused command) are tool results with
//! `isError: true` and a message saying what is wrong; protocol errors are kept for an
//! unknown tool.

mod inbox;
mod procs;
mod sessions;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;
use crate::{AppState, CallerKey};

/// The header naming a streamable HTTP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// What the server tells a client it is for, at `initialize`.
const INSTRUCTIONS: &str = "tern's durable human inbox, background processes and agent sessions. \
Ask a human with request_approval or request_elicitation (answered in tern's inbox: web, CLI or \
chat), then wait_for_decision (blocks, with progress) or get_decision. Background commands: \
process_start, then process_poll/process_log/process_write/process_kill. Agent sessions: \
session_create, session_chat (runs one turn and returns the answer), session_list, \
session_messages.";

/// Why a dangerous command (see `tern_tools::danger`) is not run by `process_start`.
const DANGEROUS_OVER_MCP: &str = "process_start does not run commands that need a human's \
approval; an agent session can (session_chat), asking a reviewer in the inbox first";

/// A tool call's failure, as the client reads it (`isError: true`).
#[derive(Debug)]
pub(crate) struct ToolFail(pub(crate) String);

impl ToolFail {
    pub(crate) fn new(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}

impl From<ApiError> for ToolFail {
    fn from(e: ApiError) -> Self {
        ToolFail(e.message)
    }
}

impl From<tern_store::StoreError> for ToolFail {
    fn from(e: tern_store::StoreError) -> Self {
        // Details stay in the log, as the HTTP API keeps them.
        tracing::error!(error = %e, "store error in an MCP tool");
        ToolFail::new("internal error; see the gateway's log")
    }
}

impl From<tern_inbox::InboxError> for ToolFail {
    fn from(e: tern_inbox::InboxError) -> Self {
        match &e {
            tern_inbox::InboxError::Store(inner) => {
                tracing::error!(error = %inner, "inbox store error in an MCP tool");
                ToolFail::new("internal error; see the gateway's log")
            }
            _ => ToolFail(e.to_string()),
        }
    }
}

pub(crate) type ToolOut = Result<Value, ToolFail>;

/// What a tool runs with: the gateway, the calling key, and the MCP request (its
/// cancellation, progress token and peer).
pub(crate) struct Call<'a> {
    pub(crate) gw: &'a AppState,
    pub(crate) key: CallerKey,
    pub(crate) ctx: &'a RequestContext<RoleServer>,
}

/// Parses a tool's arguments into its typed `Args`; a clear message when they do not fit.
pub(crate) fn parse_args<A: DeserializeOwned>(args: Value) -> Result<A, ToolFail> {
    serde_json::from_value(args).map_err(|e| ToolFail(format!("invalid arguments: {e}")))
}

/// One tool of the catalogue: its name, description and argument schema.
pub(crate) struct ToolDef {
    pub(crate) name: &'static str,
    pub(crate) description: &'static str,
    pub(crate) schema: fn() -> Value,
}

/// A tool whose arguments are `A` (its schema generated from `A`, fit for any client).
pub(crate) fn def<A: JsonSchema>(name: &'static str, description: &'static str) -> ToolDef {
    ToolDef {
        name,
        description,
        schema: tern_tools::tool::parameters_schema::<A>,
    }
}

/// Every tool, in the order `tools/list` gives them.
pub(crate) fn catalogue() -> Vec<ToolDef> {
    let mut all = inbox::tools();
    all.extend(procs::tools());
    all.extend(sessions::tools());
    all
}

/// The MCP server of one session (or one stateless request).
#[derive(Clone)]
pub struct TernMcp {
    gw: AppState,
}

impl TernMcp {
    pub(crate) fn new(gw: AppState) -> Self {
        Self { gw }
    }

    /// The key of the request in `ctx`: put there by the gateway's key check on this very
    /// HTTP request.
    fn key_of(ctx: &RequestContext<RoleServer>) -> Result<CallerKey, ErrorData> {
        ctx.extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<CallerKey>())
            .cloned()
            .ok_or_else(|| ErrorData::internal_error("the request carries no API key", None))
    }

    async fn dispatch(&self, name: &str, args: Value, call: Call<'_>) -> Option<ToolOut> {
        if let Some(out) = inbox::call(name, args.clone(), &call).await {
            return Some(out);
        }
        if let Some(out) = procs::call(name, args.clone(), &call).await {
            return Some(out);
        }
        sessions::call(name, args, &call).await
    }
}

fn to_tool(d: &ToolDef) -> Tool {
    let schema = match (d.schema)() {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    };
    Tool::new(d.name, d.description, Arc::new(schema))
}

impl ServerHandler for TernMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("tern", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            catalogue().iter().map(to_tool).collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        catalogue().iter().find(|d| d.name == name).map(to_tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let key = Self::key_of(&context)?;
        let name = request.name.to_string();
        let args = Value::Object(request.arguments.unwrap_or_default());
        let call = Call {
            gw: &self.gw,
            key,
            ctx: &context,
        };
        tracing::debug!(tool = %name, key = %call.key.name, "MCP tool call");
        let Some(out) = self.dispatch(&name, args, call).await else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool `{name}`"),
                None,
            ));
        };
        Ok(match out {
            Ok(value) => {
                // `structuredContent` must be an object; a list goes under `items`.
                let value = match value {
                    Value::Object(_) => value,
                    other => serde_json::json!({"items": other}),
                };
                CallToolResult::structured(value)
            }
            Err(ToolFail(msg)) => CallToolResult::error(vec![ContentBlock::text(msg)]),
        }
        .into())
    }
}

/// How long an MCP session may go without a message before rmcp ends it. Longer than the
/// longest `wait_for_decision` (which may send nothing without a progress token) and than
/// most turns of `session_chat`: rmcp's default of 5 minutes would end a session in the
/// middle of such a call.
const SESSION_IDLE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Which key initialized each live MCP session, beside rmcp's sessions.
#[derive(Clone)]
pub(crate) struct Bindings {
    owners: Arc<Mutex<HashMap<String, String>>>,
    sessions: Arc<LocalSessionManager>,
}

impl Bindings {
    fn owner(&self, session: &str) -> Option<String> {
        self.owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
            .cloned()
    }

    /// Binds `session` to `key_id`, and forgets the sessions rmcp has ended since (idle,
    /// or closed), so the map stays as small as the live sessions.
    async fn bind(&self, session: String, key_id: String) {
        let live: std::collections::HashSet<String> = self
            .sessions
            .sessions
            .read()
            .await
            .keys()
            .map(|k| k.to_string())
            .collect();
        let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        owners.retain(|s, _| live.contains(s));
        owners.insert(session, key_id);
    }

    fn forget(&self, session: &str) {
        self.owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session);
    }
}

/// Binds MCP sessions to keys: the `Mcp-Session-Id` a response to `initialize` creates
/// belongs to the request's key, and a request of another key naming it gets 404. Runs
/// after the key check, so the request has a [`CallerKey`].
async fn bind_sessions(State(bindings): State<Bindings>, req: Request, next: Next) -> Response {
    let Some(key) = req.extensions().get::<CallerKey>().cloned() else {
        return ApiError::unauthorized().into_response();
    };
    let session = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let deleting = req.method() == axum::http::Method::DELETE;
    if let Some(s) = &session
        && let Some(owner) = bindings.owner(s)
        && owner != key.id
    {
        tracing::warn!(key = %key.name, "an MCP session of another key was named; refused");
        return session_not_found();
    }
    let resp = next.run(req).await;
    match session {
        None => {
            if let Some(new) = resp
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
            {
                bindings.bind(new.to_owned(), key.id).await;
            }
        }
        // Ended (DELETE) or gone (rmcp no longer knows it): nothing left to guard.
        Some(s) if deleting || resp.status() == StatusCode::NOT_FOUND => bindings.forget(&s),
        Some(_) => {}
    }
    resp
}

fn session_not_found() -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "session_not_found",
        "No such MCP session; initialize a new one",
    )
    .into_response()
}

/// `/mcp`: rmcp's streamable HTTP service for `gw` — one [`TernMcp`] per session, sessions
/// ended when the gateway closes, bodies held to the API's limit — behind the binding of
/// sessions to keys. The caller puts it behind the key check.
pub(crate) fn routes(gw: &AppState) -> axum::Router<AppState> {
    let config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(gw.settings.max_body_bytes)
        .with_cancellation_token(gw.closing.child_token())
        // rmcp checks `Host` against loopback names by default, against DNS rebinding of
        // unauthenticated local servers. Every request here carries a bearer key that a
        // rebinding page cannot know, and the gateway may listen on any address
        // (`[gateway] listen`), so the check would only refuse legitimate clients.
        .disable_allowed_hosts();
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(SESSION_IDLE);
    let manager = Arc::new(manager);
    let bindings = Bindings {
        owners: Arc::default(),
        sessions: manager.clone(),
    };
    let gw2 = gw.clone();
    let service =
        StreamableHttpService::new(move || Ok(TernMcp::new(gw2.clone())), manager, config);
    axum::Router::new()
        .route_service("/mcp", service)
        .route_layer(axum::middleware::from_fn_with_state(
            bindings,
            bind_sessions,
        ))
}

/// How often a long call (`wait_for_decision`, `session_chat`) reports progress, when the
/// client gave a progress token: often enough to keep clients that reset their timeout on
/// progress waiting.
pub(crate) const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Tells the client how long the call has been at it (seconds since `started`: it only
/// grows, as the protocol wants), if it asked for progress.
pub(crate) async fn report_progress(
    call: &Call<'_>,
    started: tokio::time::Instant,
    total: Option<f64>,
    message: String,
) {
    let Some(token) = call.ctx.meta.get_progress_token() else {
        return;
    };
    let mut param =
        rmcp::model::ProgressNotificationParam::new(token, started.elapsed().as_secs_f64().floor())
            .with_message(message);
    param.total = total;
    if let Err(e) = call.ctx.peer.notify_progress(param).await {
        tracing::debug!(error = %e, "cannot send an MCP progress notification");
    }
}

/// A `ToolContext` for running one of the agent's tools on `session_id` for an MCP call.
pub(crate) fn tool_context(call: &Call<'_>, session_id: &str) -> tern_tools::ToolContext {
    let gw = call.gw;
    tern_tools::ToolContext {
        session_id: session_id.to_owned(),
        call_id: format!("mcp-{}", uuid::Uuid::new_v4().simple()),
        call_seq: 0,
        workdir: gw.settings.workdir.clone(),
        cancel: call.ctx.ct.child_token(),
        // The gateway's approver would open a durable wait that resumes `session_id` with a
        // model turn once a human decides: nothing an MCP client asked for. Dangerous
        // commands are refused here instead, with the way to have one run.
        approver: Arc::new(tern_tools::DenyAll {
            reason: DANGEROUS_OVER_MCP.to_owned(),
        }),
        limits: gw.agent.settings().limits.clone(),
        preapproved: false,
        subagents: None,
        toolsets: Arc::from(Vec::<String>::new()),
        report: Default::default(),
    }
}

#[cfg(test)]
mod tests;
