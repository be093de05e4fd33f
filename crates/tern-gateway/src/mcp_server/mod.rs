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
//!    naming another key's `Mcp-Session-Id`, or one bound to no key, gets 404 (a 403 would
//!    confirm the id exists; an unbound id fails closed). It holds `initialize` to
//!    [`MAX_SESSIONS_PER_KEY`] and [`MAX_SESSIONS`] (429). [`TrackedSessions`] drops a
//!    binding when rmcp closes its session, and [`close_revoked`] closes the sessions of
//!    keys revoked since.
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
use futures_util::Stream;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::{
    ServerSseMessage, SessionId, SessionManager,
};
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
    /// The `wait_for_decision` calls under way, per key, across every session.
    pub(crate) waits: &'a inbox::Waits,
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
    waits: Arc<inbox::Waits>,
}

impl TernMcp {
    pub(crate) fn new(gw: AppState, waits: Arc<inbox::Waits>) -> Self {
        Self { gw, waits }
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
            waits: &self.waits,
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

/// How long an MCP session may go without a message before rmcp ends it: longer than the
/// longest silent call (`wait_for_decision`, at most 600 s, which sends nothing without a
/// progress token); rmcp's default of 5 minutes would end a session in such a call.
const SESSION_IDLE: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Live MCP sessions one key may hold; its next `initialize` gets 429 (a client that leaks
/// sessions learns it, rather than silently losing its oldest one mid-call).
pub(crate) const MAX_SESSIONS_PER_KEY: usize = 16;

/// Live MCP sessions on the gateway, all keys together; beyond it `initialize` gets 429.
pub(crate) const MAX_SESSIONS: usize = 256;

/// How often the sessions of revoked keys are looked for and closed. Revocation happens
/// in the store (`tern keys revoke`, possibly another process), which tells nobody; a
/// revoked key's requests are refused at once by the key check, and this ends its open
/// sessions (and their waiting calls) soon after.
const REVOCATION_SWEEP: std::time::Duration = std::time::Duration::from_secs(2);

/// The owners of live sessions, and the `initialize` requests under way per key (counted
/// against the caps before rmcp makes their session).
#[derive(Default)]
struct Owners {
    sessions: HashMap<String, String>,
    opening: HashMap<String, usize>,
}

impl Owners {
    fn live_of(&self, key_id: &str) -> usize {
        self.sessions.values().filter(|k| *k == key_id).count()
            + self.opening.get(key_id).copied().unwrap_or(0)
    }

    fn done_opening(&mut self, key_id: &str) {
        if let Some(n) = self.opening.get_mut(key_id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.opening.remove(key_id);
            }
        }
    }
}

/// Which key initialized each live MCP session, beside rmcp's sessions. Shared with
/// [`TrackedSessions`], which forgets a session's owner when rmcp closes it (DELETE, idle,
/// shutdown), so the map holds the live sessions and no more.
#[derive(Clone, Default)]
pub(crate) struct Bindings {
    owners: Arc<Mutex<Owners>>,
}

impl Bindings {
    fn lock(&self) -> std::sync::MutexGuard<'_, Owners> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn owner(&self, session: &str) -> Option<String> {
        self.lock().sessions.get(session).cloned()
    }

    /// Counts an `initialize` of `key_id` against the caps, or says which one it is over.
    /// The count lasts as long as the returned [`Opening`].
    fn open(&self, key_id: &str) -> Result<Opening, &'static str> {
        let mut o = self.lock();
        if o.live_of(key_id) >= MAX_SESSIONS_PER_KEY {
            return Err(
                "this key has too many open MCP sessions; close some (DELETE /mcp) or let them idle out",
            );
        }
        if o.sessions.len() + o.opening.values().sum::<usize>() >= MAX_SESSIONS {
            return Err("the gateway has too many open MCP sessions; try again later");
        }
        *o.opening.entry(key_id.to_owned()).or_default() += 1;
        Ok(Opening {
            bindings: self.clone(),
            key_id: key_id.to_owned(),
        })
    }

    fn forget(&self, session: &str) {
        self.lock().sessions.remove(session);
    }

    /// The sessions whose key is not in `active` (the server key is always active).
    fn orphans(&self, active: &std::collections::HashSet<String>) -> Vec<String> {
        self.lock()
            .sessions
            .iter()
            .filter(|(_, k)| *k != crate::auth::SERVER_KEY_ID && !active.contains(*k))
            .map(|(s, _)| s.clone())
            .collect()
    }
}

/// An `initialize` under way, counted against the caps until it is answered — or dropped,
/// when the client goes away first.
struct Opening {
    bindings: Bindings,
    key_id: String,
}

impl Opening {
    /// Answered: its session, if rmcp made one, is bound to the key (in the same lock as
    /// the count ends, so the caps never miss it).
    fn opened(self, session: Option<String>) {
        if let Some(s) = session {
            self.bindings.lock().sessions.insert(s, self.key_id.clone());
        }
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        self.bindings.lock().done_opening(&self.key_id);
    }
}

/// rmcp's in-memory sessions, forgetting a session's owner when it closes: rmcp calls
/// `close_session` on DELETE and when a session's service ends (idle timeout, shutdown).
pub(crate) struct TrackedSessions {
    inner: LocalSessionManager,
    bindings: Bindings,
}

impl SessionManager for TrackedSessions {
    type Error = <LocalSessionManager as SessionManager>::Error;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.inner.create_session().await
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let r = self.inner.close_session(id).await;
        self.bindings.forget(id);
        r
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.create_stream(id, message).await
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.resume(id, last_event_id).await
    }
}

/// What [`bind_sessions`] works with.
#[derive(Clone)]
struct Guard {
    bindings: Bindings,
    sessions: Arc<TrackedSessions>,
}

/// Binds MCP sessions to keys: the `Mcp-Session-Id` a response to `initialize` creates
/// belongs to the request's key; a request naming a session that is not the key's — of
/// another key, or bound to none (fail closed) — gets 404. Holds `initialize` to the
/// session caps (429). Runs after the key check, so the request has a [`CallerKey`].
async fn bind_sessions(State(guard): State<Guard>, req: Request, next: Next) -> Response {
    let Some(key) = req.extensions().get::<CallerKey>().cloned() else {
        return ApiError::unauthorized().into_response();
    };
    let session = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let deleting = req.method() == axum::http::Method::DELETE;
    let Some(session) = session else {
        // No session: an `initialize` (a POST) makes one; anything else rmcp refuses.
        let opening = if req.method() == axum::http::Method::POST {
            match guard.bindings.open(&key.id) {
                Ok(o) => Some(o),
                Err(why) => {
                    tracing::warn!(key = %key.name, "MCP initialize refused: {why}");
                    return ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_sessions", why)
                        .into_response();
                }
            }
        } else {
            None
        };
        let resp = next.run(req).await;
        if let Some(opening) = opening {
            let new = resp
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            opening.opened(new.clone());
            // Closed before it was bound (a failed handshake): `close_session` had nothing
            // to forget yet, so it is forgotten here.
            if let Some(s) = new
                && !guard
                    .sessions
                    .has_session(&SessionId::from(s.clone()))
                    .await
                    .unwrap_or(true)
            {
                guard.bindings.forget(&s);
            }
        }
        return resp;
    };
    if guard.bindings.owner(&session).as_deref() != Some(key.id.as_str()) {
        tracing::warn!(key = %key.name, "an MCP session not of this key was named; refused");
        return session_not_found();
    }
    let resp = next.run(req).await;
    let gone = if deleting {
        resp.status().is_success()
    } else {
        resp.status() == StatusCode::NOT_FOUND
            && !guard
                .sessions
                .has_session(&SessionId::from(session.clone()))
                .await
                .unwrap_or(true)
    };
    if gone {
        guard.bindings.forget(&session);
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

/// Every [`REVOCATION_SWEEP`], closes the MCP sessions whose key was revoked, until the
/// gateway closes.
async fn close_revoked(gw: AppState, guard: Guard) {
    let mut ticks = tokio::time::interval(REVOCATION_SWEEP);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = gw.closing.cancelled() => return,
        }
        if guard.bindings.lock().sessions.is_empty() {
            continue;
        }
        let active = match gw.store.active_keys().await {
            Ok(keys) => keys.into_iter().map(|k| k.id).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the active keys to close revoked keys' MCP sessions");
                continue;
            }
        };
        for s in guard.bindings.orphans(&active) {
            tracing::info!(session = %s, "closing an MCP session: its key was revoked");
            if let Err(e) = guard
                .sessions
                .close_session(&SessionId::from(s.clone()))
                .await
            {
                tracing::warn!(session = %s, error = %e, "cannot close a revoked key's MCP session");
            }
            guard.bindings.forget(&s);
        }
    }
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
    let mut inner = LocalSessionManager::default();
    inner.session_config.keep_alive = Some(SESSION_IDLE);
    let bindings = Bindings::default();
    let sessions = Arc::new(TrackedSessions {
        inner,
        bindings: bindings.clone(),
    });
    let guard = Guard {
        bindings,
        sessions: sessions.clone(),
    };
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(close_revoked(gw.clone(), guard.clone()));
    } else {
        tracing::warn!("no runtime: revoked keys' MCP sessions are not closed until they idle out");
    }
    let gw2 = gw.clone();
    let waits = Arc::new(inbox::Waits::default());
    let service = StreamableHttpService::new(
        move || Ok(TernMcp::new(gw2.clone(), waits.clone())),
        sessions,
        config,
    );
    axum::Router::new()
        .route_service("/mcp", service)
        .route_layer(axum::middleware::from_fn_with_state(guard, bind_sessions))
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
