//! Durable waits in the gateway: the resumer and the embedded follower run in its upkeep,
//! resume turns run through [`GatewayRunner`], and deleting or resetting a session ends its
//! waits.
//!
//! # At a glance
//!
//! - [`crate::GatewayParts::waits`] says which inbox the waits use ([`WaitsSetup`]); without
//!   it, the gateway's own inbox is used. The [`Resumer`] is made with the gateway.
//! - Upkeep: the [`Resumer`] (recovery first, then ready waits), the embedded [`Follower`]
//!   when the inbox is this gateway's, and the tools' [`InboxTools::send_unsent`] every
//!   minute (requests whose inbox could not be reached when the model asked).
//! - [`GatewayRunner`]: a resume waits for a place under the turn cap (never 429), queues
//!   behind the session's running and admitted turns like any chat, and the decision is
//!   appended only once its turn is at the head of the queue.
//! - [`Gateway::end_waits`]: deleted session → its waits cancelled and their requests
//!   withdrawn ("session deleted"), `wait_resolved` (cancelled); a reset does the same, or
//!   moves the open waits to the successor with `[inbox] keep_waits_on_reset = true`.

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{Value, json};
use tern_agent::{AgentError, AgentEvent, EventSink, StopReason, TurnRequest, TurnStatus};
use tern_hooks::WaitResolvedStatus;
use tern_store::{StoreError, Wait};
use tern_waits::client::{BoxFuture, EmbeddedInbox, InboxClient};
use tern_waits::follow::{Follower, request_kind};
use tern_waits::resume::{
    CommandHook, Deliver, ResumeError, Resumed, Resumer, TurnRunner, Wakeup, emit_resolved,
};
use tern_waits::tools::InboxTools;

use crate::Gateway;

/// How often unsent requests are retried (their inbox was unreachable when asked).
const SEND_UNSENT_EVERY: Duration = Duration::from_secs(60);

/// Which inbox the waits use, and how.
#[derive(Clone)]
pub struct WaitsSetup {
    /// Reads results and withdraws requests.
    pub client: Arc<dyn InboxClient>,
    /// The `inbox` tools, whose unsent requests upkeep retries.
    pub tools: Option<Arc<InboxTools>>,
    /// Follow this gateway's own inbox's change feed (`false` when the inbox is remote: the
    /// remote follower, spawned by its own wiring, calls [`Gateway::resumer`]).
    pub follow_embedded: bool,
    /// `[inbox] keep_waits_on_reset`.
    pub keep_on_reset: bool,
    /// Runs before a dangerous command's decision is delivered.
    pub command_hook: Option<CommandHook>,
    /// Wakes the gateway's resumer; the `tools` and the command approver hold it too (a
    /// request decided inside its create is ready at once).
    pub wakeup: Wakeup,
}

impl WaitsSetup {
    /// The gateway's own inbox, nothing else.
    pub fn embedded(inbox: &tern_inbox::Inbox) -> Self {
        WaitsSetup {
            client: Arc::new(EmbeddedInbox::new(inbox.clone())),
            tools: None,
            follow_embedded: true,
            keep_on_reset: false,
            command_hook: None,
            wakeup: Wakeup::default(),
        }
    }
}

/// The gateway's part of the waits.
pub(crate) struct GatewayWaits {
    setup: WaitsSetup,
    resumer: Arc<Resumer>,
}

impl GatewayWaits {
    /// The waits of the gateway `gw` (being made) and its resumer, which runs its turns.
    pub(crate) fn new(setup: WaitsSetup, gw: Weak<Gateway>, agent: &tern_agent::Agent) -> Self {
        let runner = Arc::new(GatewayRunner { gw });
        let mut resumer = Resumer::new(agent.store().clone(), agent.hooks().clone(), runner)
            .with_wakeup(setup.wakeup.clone());
        if let Some(hook) = setup.command_hook.clone() {
            resumer = resumer.with_command_hook(hook);
        }
        GatewayWaits {
            setup,
            resumer: Arc::new(resumer),
        }
    }

    fn setup(&self) -> &WaitsSetup {
        &self.setup
    }

    /// Whether the waits use this gateway's own inbox.
    pub(crate) fn follows_embedded(&self) -> bool {
        self.setup.follow_embedded
    }
}

impl Gateway {
    /// The resumer of durable waits (remote followers and command approvals wake it).
    pub fn resumer(&self) -> Arc<Resumer> {
        self.waits.resumer.clone()
    }

    /// Starts the resumer (recovery first), the embedded follower and the unsent-request
    /// retries; they stop with the upkeep.
    pub(crate) fn spawn_waits(self: &Arc<Self>, upkeep: &crate::Upkeep) {
        let setup = self.waits.setup().clone();
        let stop = upkeep.stop_token();
        let resumer = self.resumer();
        upkeep.track(resumer.spawn(stop.clone()));
        if setup.follow_embedded {
            upkeep.track(
                Follower::new(
                    self.store.clone(),
                    self.inbox.clone(),
                    setup.client.clone(),
                    self.hooks.clone(),
                    resumer.clone(),
                )
                .spawn(stop.clone()),
            );
        }
        if let Some(tools) = setup.tools {
            let stop = stop.clone();
            upkeep.spawn(async move {
                loop {
                    match tools.send_unsent().await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(requests = n, "sent requests left unsent"),
                        Err(e) => tracing::warn!(error = %e, "cannot send unsent requests"),
                    }
                    tokio::select! {
                        () = tokio::time::sleep(SEND_UNSENT_EVERY) => {}
                        () = stop.cancelled() => return,
                    }
                }
            });
        }
    }

    /// Ends the open waits of a session being deleted or reset: cancelled, their requests
    /// withdrawn with `reason`, `wait_resolved` (cancelled) emitted. With `successor` and
    /// `keep_waits_on_reset`, they move to the successor instead. A failed withdrawal is
    /// logged: the wait is cancelled anyway, and a later decision finds nothing to resume.
    pub(crate) async fn end_waits(
        &self,
        session_id: &str,
        source: &str,
        successor: Option<&str>,
        reason: &str,
    ) -> Result<(), StoreError> {
        let setup = self.waits.setup();
        if let Some(next) = successor
            && setup.keep_on_reset
        {
            // The successor becomes `waiting` for them, as its predecessor was; their
            // requests keep the keys of the session that asked (Wait::origin_session).
            let moved = self.store.move_open_waits(session_id, next).await?;
            if moved > 0 {
                tracing::info!(
                    session = session_id,
                    successor = next,
                    waits = moved,
                    "open waits move to the reset session's successor"
                );
            }
            return Ok(());
        }
        for w in self.store.cancel_waits(session_id).await? {
            if let Some(request_id) = &w.request_id
                && let Err(e) = setup
                    .client
                    .withdraw(request_kind(w.kind), request_id, reason)
                    .await
            {
                tracing::warn!(wait = %w.id, request = %request_id, error = %e, "cannot withdraw the request of a cancelled wait");
            }
            emit_resolved(
                &self.hooks,
                &self.store,
                &w,
                WaitResolvedStatus::Cancelled,
                Some(source),
            )
            .await;
        }
        Ok(())
    }
}

/// A wait as the session API lists it.
pub(crate) fn wait_json(w: &Wait) -> Value {
    let request: Value = serde_json::from_str(&w.request).unwrap_or(Value::Null);
    json!({
        "id": w.id,
        "kind": w.kind,
        "requestId": w.request_id,
        "status": w.status,
        "summary": request.get("summary"),
        "createdAt": w.created_at as f64 / 1000.0,
    })
}

/// Runs the resumer's turns in the gateway.
pub struct GatewayRunner {
    gw: Weak<Gateway>,
}

fn failed(e: crate::ApiError) -> ResumeError {
    ResumeError::Failed(format!("{}: {}", e.code, e.message))
}

impl TurnRunner for GatewayRunner {
    fn run_resume(
        &self,
        session_id: String,
        input: String,
        deliver: Option<Deliver>,
    ) -> BoxFuture<'_, Result<Resumed, ResumeError>> {
        Box::pin(async move {
            let gw = self
                .gw
                .upgrade()
                .ok_or_else(|| ResumeError::Failed("the gateway stopped".into()))?;
            let permit = tokio::select! {
                p = gw.turns.permit_wait() => p.map_err(failed)?,
                () = gw.closing.cancelled() => return Err(ResumeError::ShuttingDown("the gateway is shutting down".into())),
            };
            // A session being reset or deleted, or 8 turns queued on it: retried later.
            let guard = gw
                .turns
                .register(&session_id, permit, gw.agent.enqueue(&session_id))
                .map_err(failed)?;
            let ticket = guard
                .ticket
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .ok_or_else(|| ResumeError::Failed("no place in the session's queue".into()))?;
            let ticket = tokio::select! {
                t = ticket.ready() => t,
                () = guard.slot.interrupt.token().cancelled() => {
                    return Err(ResumeError::Failed("stopped while queued".into()));
                }
            };
            if let Some(deliver) = deliver {
                match deliver
                    .await
                    .map_err(|e| ResumeError::Failed(e.to_string()))?
                {
                    None => return Ok(Resumed::NotDelivered),
                    // The wait moved to a reset session's successor: its turn runs there
                    // (queued on that session), not on this ended one.
                    Some(to) if to != session_id => return Ok(Resumed::Moved(to)),
                    Some(_) => {}
                }
            }
            let slot = guard.slot.clone();
            let events: EventSink = Arc::new(move |ev: AgentEvent| match &ev {
                AgentEvent::TurnStarted { turn_id } => slot.mark_running(turn_id),
                AgentEvent::TurnFinished { .. } => slot.mark_finished(),
                _ => {}
            });
            let interrupt = guard.slot.interrupt.clone();
            let req = TurnRequest {
                session_id: session_id.clone(),
                input,
                input_appended: true,
                interrupt: interrupt.clone(),
                system_prompt: None,
                approver: gw.approver.clone(),
                workdir: gw.settings.workdir.clone(),
                toolsets: gw.settings.toolsets.clone(),
                events: Some(events),
                ticket: Some(ticket),
            };
            // On a task of its own: if the resumer stops waiting, the turn still ends
            // properly (drain interrupts it like any other).
            let agent = gw.agent.clone();
            let task = tokio::spawn(async move {
                let r = agent.run_turn(req).await;
                drop(guard);
                r
            });
            match task.await {
                // Cut short by the shutdown (the drain timeout): not answered, so the next
                // start runs it again, as after a kill -9.
                Ok(Ok(o))
                    if o.status == TurnStatus::Interrupted
                        && interrupt.reason() == Some(StopReason::Shutdown) =>
                {
                    Err(ResumeError::ShuttingDown(
                        "the turn was interrupted by the shutdown".into(),
                    ))
                }
                // Stopped before it ran: nothing answered the decision yet.
                Ok(Ok(o)) if o.status == TurnStatus::Interrupted && o.iterations == 0 => Err(
                    ResumeError::Failed("the turn was stopped before it ran".into()),
                ),
                Ok(Ok(_)) => Ok(Resumed::Answered),
                Ok(Err(AgentError::SessionEnded(s))) => {
                    Err(ResumeError::Gone(format!("session {s} has ended (reset)")))
                }
                Ok(Err(AgentError::Store(StoreError::SessionNotFound(s)))) => {
                    Err(ResumeError::Gone(format!("session {s} was deleted")))
                }
                Ok(Err(e)) => Err(ResumeError::Failed(e.to_string())),
                Err(e) => Err(ResumeError::Failed(format!("the turn's task failed: {e}"))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    /// The store repairs transcripts (before a decision) with the agent's marker.
    #[test]
    fn the_store_and_the_agent_mark_interruptions_alike() {
        assert_eq!(
            tern_store::waits::INTERRUPTED_MARKER,
            tern_agent::INTERRUPTED_MARKER
        );
    }
}
