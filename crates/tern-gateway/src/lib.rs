//! The gateway: tern's always-on HTTP daemon.
//!
//! Flow of a request: `/health` answers without a key; every other route passes the bearer
//! check ([`auth::Authenticator`], constant-time against hashed keys) → bodies are read up to
//! the configured limit (413 past it) and parsed (400 with the error envelope) → a chat
//! request is admitted by the [`turns::TurnManager`] (429 past the concurrency cap), runs one
//! agent turn that reads its transcript from the store, and answers when it ends — as JSON,
//! as Hermes SSE events, or as OpenAI chunks. Stop, reset, a client that goes away, and
//! shutdown interrupt turns through their slots' [`tern_agent::Interrupt`].
//!
//! The human inbox's Pump Up agent API (`/api/projects`, `/api/tasks`, approval and
//! elicitation requests, actions, exceptions, notes) sits behind the same key check, which
//! hands the key on as [`CallerKey`]: its id owns what the agent creates; the routes
//! are a thin layer over [`tern_inbox::Inbox`] and answer errors in Pump Up's shapes — also
//! the 404 of an unknown path and the 405 of a wrong method under the inbox's prefixes.
//!
//! `/mcp` is tern as an MCP server (`mcp_server`): rmcp's streamable HTTP service behind
//! the same key check, its tools calling the same services as the routes above.
//!
//! Shutdown ([`Gateway::drain`]): new turns are refused, running ones get the drain timeout
//! to finish, the rest are interrupted (each records its `[interrupted]` marker), then the
//! server stops.

pub mod admin_file;
mod api;
pub mod auth;
pub mod boot;
pub mod channels;
pub mod cron;
mod cron_api;
pub mod error;
mod idle;
mod inbox_api;
mod inbox_settings;
mod inbox_upkeep;
mod mcp_api;
pub mod mcp_elicit;
mod mcp_server;
mod openai;
mod procs;
mod reviewer_api;
mod reviewer_auth;
mod reviewer_router;
mod reviewer_routes;
pub mod turns;
mod uploads_api;
mod waits;
mod web;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRequest, OptionalFromRequest, Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::de::DeserializeOwned;
use serde_json::json;
use tern_agent::{Agent, StopReason};
use tern_hooks::HookBus;
use tern_store::Store;
use tern_tools::Approver;

pub use auth::{Authenticator, CallerKey};
pub use error::ApiError;
pub use inbox_settings::InboxSettings;
pub use reviewer_routes::reviewer_routes;
pub use turns::TurnManager;
pub use waits::{GatewayRunner, WaitsSetup};

/// Settings of a running gateway.
#[derive(Clone, Debug)]
pub struct GatewaySettings {
    pub max_concurrent_turns: usize,
    pub max_body_bytes: usize,
    pub drain_timeout: Duration,
    /// Working directory for tools.
    pub workdir: PathBuf,
    pub toolsets: Vec<String>,
    /// The model name reported by `/v1/models` and in answers.
    pub model: String,
}

/// What every handler shares.
pub struct Gateway {
    pub agent: Arc<Agent>,
    pub store: Store,
    pub hooks: Arc<HookBus>,
    pub turns: Arc<TurnManager>,
    pub auth: Authenticator,
    pub approver: Arc<dyn Approver>,
    pub settings: GatewaySettings,
    /// The human inbox behind the Pump Up agent API (`/api/projects`, `/api/tasks`, …).
    pub inbox: tern_inbox::Inbox,
    /// The inbox's uploads, size limit and links (from `[inbox]`).
    pub inbox_settings: InboxSettings,
    /// Cancelled when the gateway starts shutting down, to end long-lived responses (the web
    /// inbox's event streams) that would otherwise hold the server open.
    pub(crate) closing: tokio_util::sync::CancellationToken,
    /// Durable waits: which inbox they use, and their resumer.
    pub(crate) waits: waits::GatewayWaits,
    /// Background processes, when the gateway runs them.
    pub(crate) procs: Option<procs::GatewayProcs>,
    /// `[gateway] idle_reset`, when on ([`idle`]).
    pub(crate) idle_reset: Option<Duration>,
    /// The address the server is bound to: the base of links (upload URLs) when `[inbox]
    /// public_url` is unset. Links never follow the request's `Host`, which the client
    /// chooses.
    pub(crate) local_addr: Option<std::net::SocketAddr>,
    /// The chat channels, until [`Gateway::spawn_upkeep`] starts them.
    pub(crate) channels: std::sync::Mutex<Option<channels::ChannelsSetup>>,
    /// The MCP servers (`[mcp_servers]`): their status, and their shutdown.
    pub mcp: tern_mcp::McpManager,
    /// Scheduled jobs: the scheduler (started with the upkeep) and its zone.
    pub(crate) cron: cron::CronSetup,
}

/// Everything a [`Gateway`] is made of. [`GatewayParts::new`] leaves the optional parts off;
/// [`boot::GatewayBuilder`] makes them from the configuration. Nothing is set later: a
/// gateway is whole from the start.
pub struct GatewayParts {
    pub agent: Arc<Agent>,
    pub auth: Authenticator,
    pub approver: Arc<dyn Approver>,
    pub settings: GatewaySettings,
    /// The human inbox, on the agent's store, with its policy and notification targets.
    pub inbox: tern_inbox::Inbox,
    /// The inbox's uploads, size limit and links.
    pub inbox_settings: InboxSettings,
    /// Which inbox durable waits use; `None`: this gateway's own.
    pub waits: Option<WaitsSetup>,
    /// Background processes, and how long finished ones are kept.
    pub procs: Option<(Arc<tern_procs::ProcessManager>, Duration)>,
    /// Reset sessions idle for this long (`[gateway] idle_reset`).
    pub idle_reset: Option<Duration>,
    /// The address the server is bound to.
    pub local_addr: Option<std::net::SocketAddr>,
    /// Chat channels (`[[channels.*]]`), started with the upkeep.
    pub channels: Option<channels::ChannelsSetup>,
    /// Scheduled jobs (`[cron]`); `None`: the defaults ([`cron::CronSetup::system`]).
    pub cron: Option<cron::CronSetup>,
    /// The MCP servers whose tools are in the agent's registry (`[mcp_servers]`).
    pub mcp: tern_mcp::McpManager,
}

impl GatewayParts {
    /// A gateway of `agent` with its own default inbox, and nothing optional.
    pub fn new(
        agent: Arc<Agent>,
        auth: Authenticator,
        approver: Arc<dyn Approver>,
        settings: GatewaySettings,
    ) -> Self {
        let inbox = tern_inbox::Inbox::new(agent.store().clone());
        GatewayParts {
            agent,
            auth,
            approver,
            settings,
            inbox,
            inbox_settings: InboxSettings::default(),
            waits: None,
            procs: None,
            idle_reset: None,
            local_addr: None,
            channels: None,
            mcp: tern_mcp::McpManager::empty(),
            cron: None,
        }
    }
}

/// What a gateway serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Serve {
    /// Agents' sessions, the OpenAI-compatible API and the inbox.
    Everything,
    /// Only the human inbox (`tern gateway --inbox-only`): a remote inbox for agents that
    /// run on other machines.
    InboxOnly,
}

pub type AppState = Arc<Gateway>;

/// The gateway's background tasks ([`Gateway::spawn_upkeep`]): each ends when the stop token
/// is cancelled, and [`Upkeep::stop_and_join`] waits until all have.
pub struct Upkeep {
    tasks: tokio_util::task::TaskTracker,
    stop: tokio_util::sync::CancellationToken,
}

/// Upkeep tasks still running when [`Upkeep::stop_and_join`] gave up waiting.
#[derive(Debug, thiserror::Error)]
#[error("{running} upkeep task(s) still running {timeout:?} after the stop")]
pub struct UpkeepStuck {
    pub running: usize,
    pub timeout: Duration,
}

impl Upkeep {
    /// Runs `task` as one of the upkeep's tasks (joined with them).
    pub fn spawn<F>(&self, task: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.tasks.spawn(task);
    }

    /// Joins a task spawned elsewhere (a follower that spawns itself) with the upkeep's.
    pub fn track<T: Send + 'static>(&self, handle: tokio::task::JoinHandle<T>) {
        self.tasks.spawn(async move {
            if let Err(e) = handle.await
                && e.is_panic()
            {
                tracing::error!(error = %e, "an upkeep task panicked");
            }
        });
    }

    /// The token that stops every upkeep task.
    pub fn stop_token(&self) -> &tokio_util::sync::CancellationToken {
        &self.stop
    }

    /// Tasks not finished yet.
    pub fn running(&self) -> usize {
        self.tasks.len()
    }

    /// Stops every task and waits, at most `timeout`, until all have ended.
    pub async fn stop_and_join(self, timeout: Duration) -> Result<(), UpkeepStuck> {
        self.stop.cancel();
        self.tasks.close();
        match tokio::time::timeout(timeout, self.tasks.wait()).await {
            Ok(()) => Ok(()),
            Err(_) => Err(UpkeepStuck {
                running: self.tasks.len(),
                timeout,
            }),
        }
    }
}

impl Gateway {
    pub fn new(
        agent: Arc<Agent>,
        auth: Authenticator,
        approver: Arc<dyn Approver>,
        settings: GatewaySettings,
    ) -> Arc<Self> {
        Self::from_parts(GatewayParts::new(agent, auth, approver, settings))
    }

    /// [`Gateway::new`] with a configured inbox: `inbox` (on the agent's store) carries the
    /// policy and notification targets, `inbox_settings` the uploads and links.
    pub fn with_inbox(
        agent: Arc<Agent>,
        auth: Authenticator,
        approver: Arc<dyn Approver>,
        settings: GatewaySettings,
        inbox: tern_inbox::Inbox,
        inbox_settings: InboxSettings,
    ) -> Arc<Self> {
        let mut parts = GatewayParts::new(agent, auth, approver, settings);
        parts.inbox = inbox;
        parts.inbox_settings = inbox_settings;
        Self::from_parts(parts)
    }

    /// A whole gateway of `parts`. Its upkeep starts with [`Gateway::spawn_upkeep`].
    pub fn from_parts(parts: GatewayParts) -> Arc<Self> {
        let GatewayParts {
            agent,
            auth,
            approver,
            settings,
            inbox,
            inbox_settings,
            waits,
            procs,
            idle_reset,
            local_addr,
            channels,
            cron,
            mcp,
        } = parts;
        let cron = cron.unwrap_or_else(|| cron::CronSetup::system(agent.store().clone()));
        let waits = waits.unwrap_or_else(|| WaitsSetup::embedded(&inbox));
        // The resumer runs its turns through this gateway, which holds the resumer: a weak
        // reference each way up.
        Arc::new_cyclic(|me| {
            cron.bind(me.clone());
            Self {
                cron,
                store: agent.store().clone(),
                waits: waits::GatewayWaits::new(waits, me.clone(), &agent),
                procs: procs.map(|(manager, keep_finished)| procs::GatewayProcs {
                    manager,
                    keep_finished,
                }),
                idle_reset,
                local_addr,
                mcp,
                channels: std::sync::Mutex::new(channels),
                inbox,
                inbox_settings,
                closing: tokio_util::sync::CancellationToken::new(),
                hooks: agent.hooks().clone(),
                turns: TurnManager::new(settings.max_concurrent_turns),
                agent,
                auth,
                approver,
                settings,
            }
        })
    }

    /// Starts the background upkeep, which runs until `stop` is cancelled; the returned
    /// [`Upkeep`] joins its tasks.
    pub fn spawn_upkeep(self: &Arc<Self>, stop: tokio_util::sync::CancellationToken) -> Upkeep {
        let upkeep = Upkeep {
            tasks: tokio_util::task::TaskTracker::new(),
            stop,
        };
        // The inbox's notification worker and expiry sweeper (see `inbox_upkeep`).
        inbox_upkeep::spawn(&upkeep, self.inbox.clone());
        // Durable waits: the resumer (recovering decisions a crash left unanswered first)
        // and the follower of decisions.
        self.spawn_waits(&upkeep);
        // Background processes: hook events and the retention of finished ones.
        self.spawn_procs_upkeep(&upkeep);
        // Sessions idle for `[gateway] idle_reset` are reset (see `idle`).
        self.spawn_idle_reset(&upkeep);
        // Chat channels: their long polls, chat queues and deliveries (see `channels`).
        self.spawn_channels(&upkeep);
        // Scheduled jobs: one task that sleeps until the next occurrence (see `cron`).
        self.spawn_cron(&upkeep);
        upkeep
            .tasks
            .spawn(self.turns.clone().trim_when_idle(upkeep.stop.clone()));
        upkeep
    }

    /// The HTTP routes of a full gateway: the agent's and the inbox's.
    pub fn router(self: &Arc<Self>) -> Router {
        self.router_for(Serve::Everything)
    }

    /// The HTTP routes for `serve`: with [`Serve::InboxOnly`] the session and OpenAI routes
    /// are left out (they answer 404) and only the inbox is served.
    pub fn router_for(self: &Arc<Self>, serve: Serve) -> Router {
        let agent_routes = Router::new()
            .route(
                "/api/sessions",
                get(api::list_sessions).post(api::create_session),
            )
            .route(
                "/api/sessions/{id}",
                get(api::get_session)
                    .patch(api::patch_session)
                    .delete(api::delete_session),
            )
            .route("/api/sessions/{id}/messages", get(api::messages))
            .route("/api/sessions/{id}/chat", post(api::chat))
            .route("/api/sessions/{id}/chat/stream", post(api::chat_stream))
            .route("/api/sessions/{id}/stop", post(api::stop))
            .route("/api/sessions/{id}/compact", post(api::compact))
            .route("/api/sessions/{id}/reset", post(api::reset))
            .route("/api/mcp/servers", get(mcp_api::servers))
            .route("/api/cron/jobs", get(cron_api::list).post(cron_api::create))
            .route(
                "/api/cron/jobs/{id}",
                get(cron_api::show)
                    .patch(cron_api::update)
                    .delete(cron_api::delete),
            )
            .route("/api/cron/jobs/{id}/pause", post(cron_api::pause))
            .route("/api/cron/jobs/{id}/resume", post(cron_api::resume))
            .route("/api/cron/jobs/{id}/run", post(cron_api::run))
            .route("/api/cron/jobs/{id}/stop", post(cron_api::stop))
            .route("/api/cron/jobs/{id}/history", get(cron_api::history))
            .route("/v1/chat/completions", post(openai::completions))
            .route("/v1/models", get(openai::models));
        let mut authed = Router::new()
            .route("/api/projects", get(inbox_api::projects))
            .route("/api/projects/{id}", get(inbox_api::project))
            .route(
                "/api/tasks",
                get(inbox_api::tasks).post(inbox_api::create_task),
            )
            .route("/api/tasks/{id}", get(inbox_api::task))
            .route("/api/tasks/{id}/events", get(inbox_api::task_events))
            .route("/api/decisions", get(inbox_api::decisions))
            .route("/api/approval-requests", post(inbox_api::create_approval))
            .route(
                "/api/approval-requests/{id}/result",
                get(inbox_api::approval_result),
            )
            .route(
                "/api/approval-requests/{id}/withdraw",
                post(inbox_api::withdraw_approval),
            )
            .route(
                "/api/elicitation-requests",
                post(inbox_api::create_elicitation),
            )
            .route(
                "/api/elicitation-requests/{id}/result",
                get(inbox_api::elicitation_result),
            )
            .route(
                "/api/elicitation-requests/{id}/withdraw",
                post(inbox_api::withdraw_elicitation),
            )
            .route("/api/agent-actions", post(inbox_api::record_action))
            .route("/api/exceptions", post(inbox_api::report_exception))
            .route("/api/notes", post(inbox_api::add_note))
            .merge(uploads_api::agent_routes(
                self.inbox_settings.max_upload_bytes,
            ));
        if serve == Serve::Everything {
            // MCP (`mcp_server`): its sessions bound to the key that opened them.
            authed = authed.merge(agent_routes).merge(mcp_server::routes(self));
        }
        let authed = authed.route_layer(middleware::from_fn_with_state(self.clone(), require_key));
        let body_limit = DefaultBodyLimit::max(self.settings.max_body_bytes);
        Router::new()
            .route("/health", get(health))
            .route("/v1/health", get(health))
            .merge(authed)
            // The reviewers' routes: outside `require_key`, they check reviewers themselves.
            // Their forms are held to the gateway's body limit like JSON bodies are (axum's
            // `Form` would otherwise allow its default 2 MiB).
            .merge(reviewer_auth::routes().layer(body_limit))
            .merge(reviewer_router::router(uploads_api::reviewer_routes()))
            .merge(reviewer_api::routes().layer(body_limit))
            .merge(web::routes().layer(body_limit))
            .fallback(not_found)
            .layer(middleware::from_fn(json_errors))
            .with_state(self.clone())
    }

    /// Shutdown: refuse new turns, give running ones `drain_timeout`, interrupt the rest and
    /// wait (bounded) until they have recorded their interruption.
    pub async fn drain(&self) {
        self.closing.cancel();
        self.turns.begin_drain();
        let busy = self.turns.running_count();
        if busy > 0 {
            tracing::info!(turns = busy, timeout = ?self.settings.drain_timeout, "draining running turns");
        }
        if tokio::time::timeout(self.settings.drain_timeout, self.turns.wait_idle(None))
            .await
            .is_err()
        {
            let sessions = self.turns.busy_sessions();
            tracing::warn!(
                turns = self.turns.running_count(),
                "drain timeout: interrupting the remaining turns"
            );
            self.turns.stop_everything(StopReason::Shutdown);
            if tokio::time::timeout(Duration::from_secs(10), self.turns.wait_idle(None))
                .await
                .is_err()
            {
                tracing::error!("turns did not stop within 10 s of their interrupt");
            }
            for s in sessions {
                if let Ok(Some(sess)) = self.store.get_session(&s).await {
                    self.hooks
                        .emit(tern_hooks::HookEvent::SessionEnd(tern_hooks::SessionEnd {
                            session_id: sess.id,
                            source: sess.source,
                            reason: tern_hooks::SessionEndReason::Shutdown,
                        }));
                }
            }
        }
    }
}

async fn health() -> impl IntoResponse {
    axum::Json(json!({
        "status": "ok",
        "platform": "tern",
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

async fn not_found(req: Request) -> Response {
    let message = format!("No route for {} {}", req.method(), req.uri().path());
    let page = reviewer_auth::wants_html(req.headers());
    error_response(
        req.uri().path(),
        page,
        axum::http::StatusCode::NOT_FOUND,
        "not_found",
        message,
    )
}

/// The paths whose errors answer in Pump Up's shapes (`{"error": "…"}`, a 400 as
/// `{"code","message"}`), which the Pump Up SDK parses: the inbox's agent API and everything
/// under `/inbox` (the reviewers' routes answer so already). The session and OpenAI routes
/// keep the Hermes envelope.
fn pump_up_path(path: &str) -> bool {
    const PREFIXES: [&str; 10] = [
        "/api/projects",
        "/api/tasks",
        "/api/approval-requests",
        "/api/elicitation-requests",
        "/api/agent-actions",
        "/api/exceptions",
        "/api/notes",
        "/api/uploads",
        "/api/decisions",
        "/inbox",
    ];
    PREFIXES.iter().any(|prefix| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// An error that no handler shaped, in the shape its path's clients read: a page for a
/// browser (`page`: it asked for `text/html`) on the web inbox, Pump Up's shapes on the
/// inbox's APIs, the Hermes envelope elsewhere.
fn error_response(
    path: &str,
    page: bool,
    status: axum::http::StatusCode,
    code: &'static str,
    message: String,
) -> Response {
    if page && web::is_page_path(path) {
        web::error_page(status, &message)
    } else if pump_up_path(path) {
        inbox_api::InboxApiError::Request {
            status,
            code,
            message,
        }
        .into_response()
    } else {
        ApiError::new(status, code, message).into_response()
    }
}

/// Puts error responses that axum or a layer produced in plain text (405, a bad query string,
/// a path that is not UTF-8, a form over the body limit) into JSON — Pump Up's shapes on the
/// inbox's paths, the error envelope elsewhere — or, for a browser on the web inbox's pages
/// (`Accept: text/html`), an error page like the web inbox's own (see [`error_response`]).
async fn json_errors(req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let page = reviewer_auth::wants_html(req.headers());
    let resp = next.run(req).await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/html"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, 16 * 1024)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes).trim().to_owned();
    let code = match status.as_u16() {
        400 => "invalid_request",
        404 => "not_found",
        405 => "method_not_allowed",
        413 => "request_too_large",
        _ => "error",
    };
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let mut out = error_response(&path, page, status, code, message);
    for name in [header::ALLOW, header::RETRY_AFTER] {
        if let Some(v) = parts.headers.get(&name) {
            out.headers_mut().insert(name, v.clone());
        }
    }
    out
}

/// The token of an `Authorization: Bearer …` header (the scheme is case-insensitive).
fn bearer(req: &Request) -> Option<&str> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

async fn require_key(State(gw): State<AppState>, mut req: Request, next: Next) -> Response {
    let key = match bearer(&req) {
        Some(token) => gw.auth.check(token).await,
        None => None,
    };
    match key {
        Some(key) => {
            req.extensions_mut().insert(key);
            next.run(req).await
        }
        // The inbox's agent API answers in Pump Up's shape (`{"error": str}`), the rest in
        // the error envelope.
        None if pump_up_path(req.uri().path()) => error_response(
            req.uri().path(),
            false,
            axum::http::StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "Invalid API key".to_owned(),
        ),
        None => ApiError::unauthorized().into_response(),
    }
}

/// A JSON body read up to the gateway's limit: 413 past it, 400 when it is not the JSON
/// expected, both in the error envelope.
pub struct ApiJson<T>(pub T);

/// Reads a body up to the limit; `None` when it is empty.
pub(crate) async fn read_json<T: DeserializeOwned>(
    req: Request<Body>,
    state: &AppState,
) -> Result<Option<T>, ApiError> {
    let limit = state.settings.max_body_bytes;
    let too_large = || {
        ApiError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            format!("The request body is larger than {limit} bytes"),
        )
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let bytes = axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|e| {
            if is_length_limit(&e) {
                too_large()
            } else {
                ApiError::bad_request("invalid_body", format!("Cannot read the request body: {e}"))
            }
        })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        ApiError::bad_request(
            "invalid_json",
            format!("The request body is not valid JSON for this endpoint: {e}"),
        )
    })
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cur = err.source();
    }
    false
}

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request<Body>, state: &AppState) -> Result<Self, Self::Rejection> {
        read_json(req, state).await?.map(ApiJson).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_json",
                "The request body is empty; send a JSON object",
            )
        })
    }
}

impl<T: DeserializeOwned> OptionalFromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(
        req: Request<Body>,
        state: &AppState,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(read_json(req, state).await?.map(ApiJson))
    }
}
