//! The embedded follower: notices decisions in this gateway's own inbox, at once and without
//! polling, and marks their waits ready.
//!
//! # Flow at a glance
//!
//! ```text
//! subscribe to Inbox::changes()        (before the sweep, so nothing falls between)
//! sweep: every pending wait with a request id, once   (decided while the gateway was down)
//! loop: Change { Decided, request_id } ─► Store::wait_by_request ─► settle(wait)
//!       lagged feed ─► sweep again
//! settle(wait): InboxClient::result
//!     decided / answered / expired ─► Store::wait_ready(result, decided_by) ─► notify_ready
//!     withdrawn (409)              ─► Store::cancel_wait ─► `wait_resolved` (cancelled)
//!     still pending                ─► nothing (the feed will say when)
//! ```
//!
//! [`settle`] is shared with the remote follower ([`crate::remote`]), which learns of
//! decisions from another server instead.
//!
//! A decision can come before its wait knows the request's id: an auto-approve policy
//! decides inside the create call, and a crash may come between the create and
//! [`Store::set_wait_request`] (the start-up sweep skips waits without an id). The follower
//! drops such a decision — no wait has its request — so whoever stores a request id calls
//! [`settle_new_request`] right after, which reads the result once.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tern_hooks::{HookBus, WaitResolvedStatus};
use tern_inbox::Inbox;
use tern_inbox::review::ChangeKind;
use tern_store::{Store, Wait, WaitKind, WaitStatus};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::client::{ClientError, InboxClient, RequestKind};
use crate::resume::{Resumer, Wakeup, emit_resolved};

/// What [`settle`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// The wait is ready now (the resumer was woken).
    Ready,
    /// The request is still pending.
    Pending,
    /// The request was withdrawn: the wait is cancelled.
    Cancelled,
    /// The wait was not pending (someone got there first) or has no request yet.
    Nothing,
}

/// The inbox request kind of a wait (a dangerous command is an approval request).
pub fn request_kind(kind: WaitKind) -> RequestKind {
    match kind {
        WaitKind::Elicitation => RequestKind::Elicitation,
        // A process wait has no inbox request: nothing asks the inbox about it.
        WaitKind::Approval | WaitKind::Command | WaitKind::Process => RequestKind::Approval,
    }
}

/// Reads a pending wait's result and moves the wait on: ready (and the resumer woken) when
/// decided or expired, cancelled when the request was withdrawn. Errors are the client's
/// (worth retrying when [`ClientError::is_transient`]).
pub async fn settle(
    store: &Store,
    client: &dyn InboxClient,
    hooks: &HookBus,
    resumer: &Resumer,
    wait: &Wait,
) -> Result<Settled, ClientError> {
    settle_waking(store, client, hooks, Some(resumer.wakeup()), wait).await
}

/// Reads the result of a wait whose request id was just stored ([`Store::set_wait_request`])
/// and settles it: a decision taken before then reached no follower (see the module docs).
/// `wakeup` wakes the resumer when the wait becomes ready; without one (no resumer) a
/// resumer's first scan finds the ready wait. Failures are logged, not returned: the
/// request exists, and a later decision reaches the followers as usual.
pub async fn settle_new_request(
    store: &Store,
    client: &dyn InboxClient,
    hooks: &HookBus,
    wakeup: Option<&Wakeup>,
    wait_id: &str,
) -> Option<Settled> {
    // Read again: the stored id, and a status that may have changed meanwhile.
    let wait = match store.wait(wait_id).await {
        Ok(Some(w)) => w,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(wait = wait_id, error = %e, "cannot read a wait to check its decision");
            return None;
        }
    };
    match settle_waking(store, client, hooks, wakeup, &wait).await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(wait = wait_id, error = %e, "cannot check the decision of a new request");
            None
        }
    }
}

async fn settle_waking(
    store: &Store,
    client: &dyn InboxClient,
    hooks: &HookBus,
    wakeup: Option<&Wakeup>,
    wait: &Wait,
) -> Result<Settled, ClientError> {
    let (Some(request_id), WaitStatus::Pending) = (wait.request_id.as_deref(), wait.status) else {
        return Ok(Settled::Nothing);
    };
    match client.result(request_kind(wait.kind), request_id).await {
        Ok(Some(result)) => {
            let decided_by = ["decidedBy", "answeredBy"]
                .iter()
                .find_map(|k| result.get(*k).and_then(Value::as_str));
            let ready = store
                .wait_ready(&wait.id, &result.to_string(), decided_by)
                .await
                .map_err(|e| ClientError::Unreachable(format!("the store: {e}")))?;
            if ready.is_some() {
                tracing::debug!(wait = %wait.id, request = request_id, "decision landed");
                if let Some(w) = wakeup {
                    w.notify();
                }
                Ok(Settled::Ready)
            } else {
                Ok(Settled::Nothing)
            }
        }
        Ok(None) => Ok(Settled::Pending),
        // A withdrawn request's result read answers 409 (tern's inbox).
        Err(ClientError::Refused { status: 409, .. }) => {
            let cancelled = store
                .cancel_wait(&wait.id)
                .await
                .map_err(|e| ClientError::Unreachable(format!("the store: {e}")))?;
            if let Some(w) = cancelled {
                tracing::info!(wait = %w.id, request = request_id, "the request was withdrawn; the wait is cancelled");
                emit_resolved(hooks, store, &w, WaitResolvedStatus::Cancelled, None).await;
                Ok(Settled::Cancelled)
            } else {
                Ok(Settled::Nothing)
            }
        }
        Err(e) => Err(e),
    }
}

/// Follows this gateway's own inbox; see the module docs.
pub struct Follower {
    store: Store,
    inbox: Inbox,
    client: Arc<dyn InboxClient>,
    hooks: Arc<HookBus>,
    resumer: Arc<Resumer>,
}

impl Follower {
    /// `client` reads results (the [`crate::client::EmbeddedInbox`] of `inbox`).
    pub fn new(
        store: Store,
        inbox: Inbox,
        client: Arc<dyn InboxClient>,
        hooks: Arc<HookBus>,
        resumer: Arc<Resumer>,
    ) -> Self {
        Follower {
            store,
            inbox,
            client,
            hooks,
            resumer,
        }
    }

    pub fn spawn(self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run(stop))
    }

    /// Sweeps once, then follows the change feed until `stop` is cancelled.
    pub async fn run(self, stop: CancellationToken) {
        let mut changes = self.inbox.changes();
        self.sweep(&stop).await;
        loop {
            let change = tokio::select! {
                c = changes.recv() => c,
                () = stop.cancelled() => return,
            };
            match change {
                Ok(c) if c.what == ChangeKind::Decided => self.on_decided(&c.request_id).await,
                Ok(_) => {}
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        missed,
                        "the inbox's change feed lagged; sweeping the pending waits"
                    );
                    self.sweep(&stop).await;
                }
                Err(RecvError::Closed) => return,
            }
        }
    }

    async fn on_decided(&self, request_id: &str) {
        match self.store.wait_by_request(request_id).await {
            Ok(Some(w)) if w.status == WaitStatus::Pending => {
                self.settle_logged(&w).await;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::error!(request = request_id, error = %e, "cannot look up the wait of a decided request")
            }
        }
    }

    async fn settle_logged(&self, w: &Wait) -> bool {
        match settle(&self.store, &*self.client, &self.hooks, &self.resumer, w).await {
            Ok(_) => true,
            Err(e) => {
                tracing::error!(wait = %w.id, error = %e, "cannot read the decision of a wait");
                false
            }
        }
    }

    /// Checks every pending wait with a request once; repeats (after 5 s) while reads fail,
    /// so a decision is not missed because the store was briefly unavailable.
    async fn sweep(&self, stop: &CancellationToken) {
        loop {
            let mut failed = false;
            match self.store.waits_in(WaitStatus::Pending).await {
                Ok(waits) => {
                    for w in waits.iter().filter(|w| w.request_id.is_some()) {
                        failed |= !self.settle_logged(w).await;
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot list the pending waits");
                    failed = true;
                }
            }
            if !failed {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(5)) => {}
                () = stop.cancelled() => return,
            }
        }
    }
}
