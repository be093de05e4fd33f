//! What tern answers a server with: the rmcp [`ClientHandler`] of one client, and the calls
//! in flight on it ([`Calls`]), which its notifications and requests are routed to.
//!
//! Progress: rmcp gives every request a progress token of its own (`_meta.progressToken`),
//! and a server reports a call's progress under that token; [`Calls`] maps each token to
//! its call's sink. A call registers its token under the `gate`, which it holds from before
//! its request is sent until the token is in the map, and the handler passes the gate before
//! looking a token up, so a report that beats the registration waits for it instead of
//! being lost. rmcp handles each notification on a task of its own, so two reports can
//! arrive out of order; progress only grows (the specification says so), so a report that
//! is not ahead of the last one delivered is dropped.
//!
//! Elicitation: over stdio, a server's `elicitation/create` does not say which of its
//! client's requests it serves (streamable HTTP would send it on that request's stream, but
//! rmcp does not tell the handler). It is routed to the call in flight; with several in
//! flight on one server they cannot be told apart, and the oldest is taken (logged).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ErrorData, Implementation, ProgressNotificationParam, ProgressToken,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use tern_tools::{ProgressSink, ToolProgress};
use tokio_util::sync::CancellationToken;

use crate::elicit::{CallScope, ElicitationAnswer, ElicitationRequest, Elicitor, parse_schema};

/// The calls in flight on one client.
#[derive(Default)]
pub(crate) struct Calls {
    /// Held while a call sends its request and registers its token (see the module docs).
    pub(crate) gate: tokio::sync::Mutex<()>,
    map: Mutex<HashMap<ProgressToken, Entry>>,
    next: AtomicU64,
}

struct Entry {
    /// Start order: the oldest call takes an elicitation no call can be told for.
    order: u64,
    tool: String,
    progress: Option<ProgressSink>,
    /// The last progress delivered.
    last: Option<f64>,
    scope: Option<CallScope>,
}

/// A call's place in [`Calls`]; dropping it (the call answered, failed or abandoned)
/// removes it.
pub(crate) struct Registration {
    calls: Arc<Calls>,
    token: ProgressToken,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.calls.lock().remove(&self.token);
    }
}

impl Calls {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ProgressToken, Entry>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers the call whose request carries `token`. Call it with the gate held.
    pub(crate) fn register(
        self: &Arc<Self>,
        token: ProgressToken,
        tool: &str,
        progress: Option<ProgressSink>,
        scope: Option<CallScope>,
    ) -> Registration {
        let order = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(
            token.clone(),
            Entry {
                order,
                tool: tool.to_owned(),
                progress,
                last: None,
                scope,
            },
        );
        Registration {
            calls: Arc::clone(self),
            token,
        }
    }

    /// The sink of the call with `token`, if it is ahead of the last report delivered.
    fn progress_for(&self, p: &ProgressNotificationParam) -> Option<ProgressSink> {
        let mut map = self.lock();
        let entry = map.get_mut(&p.progress_token)?;
        if entry.last.is_some_and(|last| p.progress <= last) {
            return None;
        }
        entry.last = Some(p.progress);
        entry.progress.clone()
    }

    /// The oldest call in flight (its tool and scope), and how many are in flight.
    fn oldest(&self) -> (Option<(String, Option<CallScope>)>, usize) {
        let map = self.lock();
        let oldest = map
            .values()
            .min_by_key(|e| e.order)
            .map(|e| (e.tool.clone(), e.scope.clone()));
        (oldest, map.len())
    }
}

/// The handler of one client.
pub(crate) struct Handler {
    pub(crate) server: String,
    pub(crate) calls: Arc<Calls>,
    pub(crate) elicitor: Option<Arc<dyn Elicitor>>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            capabilities(self.elicitor.is_some()),
            Implementation::new("tern", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        // Wait out a registration under way: this report may be for it.
        drop(self.calls.gate.lock().await);
        if let Some(sink) = self.calls.progress_for(&params) {
            sink(ToolProgress {
                progress: params.progress,
                total: params.total,
                message: params.message,
            });
        }
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let Some(elicitor) = &self.elicitor else {
            // Not advertised, so a server should not ask; if it does, nobody can answer.
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            return Err(ErrorData::invalid_params(
                "tern answers form elicitations only",
                None,
            ));
        };
        let schema = serde_json::to_value(&requested_schema)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let fields =
            parse_schema(&schema).map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        drop(self.calls.gate.lock().await);
        let (oldest, in_flight) = self.calls.oldest();
        if in_flight > 1 {
            tracing::warn!(
                server = self.server,
                in_flight,
                "an elicitation arrived with several calls in flight; it is asked for the oldest"
            );
        }
        let (tool, scope) = oldest.map_or((None, None), |(t, s)| (Some(t), s));
        // Cancelled by the turn's interrupt (through the call's token) or by the server.
        let cancel = scope
            .as_ref()
            .map_or_else(CancellationToken::new, |s| s.cancel.child_token());
        let request = ElicitationRequest {
            server: self.server.clone(),
            tool,
            message,
            fields,
            call: scope,
            cancel: cancel.clone(),
        };
        let answer = elicitor.elicit(request);
        tokio::pin!(answer);
        let answer = tokio::select! {
            a = &mut answer => a,
            () = context.ct.cancelled() => {
                cancel.cancel();
                answer.await
            }
        };
        match answer {
            Ok(ElicitationAnswer::Accept { content }) => {
                Ok(ElicitResult::new(ElicitationAction::Accept)
                    .with_content(serde_json::Value::Object(content)))
            }
            Ok(ElicitationAnswer::Decline) => Ok(ElicitResult::new(ElicitationAction::Decline)),
            Ok(ElicitationAnswer::Cancel) => Ok(ElicitResult::new(ElicitationAction::Cancel)),
            Err(e) => {
                tracing::warn!(server = self.server, error = %e, "elicitation not answered");
                Err(ErrorData::internal_error(e.to_string(), None))
            }
        }
    }
}

/// What tern tells a server it can do: elicitation (form mode) only with an elicitor.
fn capabilities(elicitation: bool) -> ClientCapabilities {
    if !elicitation {
        return ClientCapabilities::default();
    }
    // The builder's elicitation switch is behind rmcp features tern does not need; the
    // capability is this JSON.
    serde_json::from_value(serde_json::json!({"elicitation": {"form": {}}})).unwrap_or_default()
}
