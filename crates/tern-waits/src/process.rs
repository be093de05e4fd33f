//! `notify_on_complete` through durable waits: a background process's exit resumes the
//! session that started it exactly once, with a summary (exit code, last lines).
//!
//! # Flow
//!
//! ```text
//! terminal(background, notify_on_complete) ─► ProcessManager::spawn
//!   └─ ProcessNotifier::armed ─► ProcessWaits::arm: Store::create_wait(kind process,
//!        idem_key "tern-proc:<id>:exit")                       (before the tool answers)
//! ProcEvent::Exited ─► ProcessWaits::exited: arm again (no-op) ─► ExitSummary ─►
//!   Store::wait_ready(pending → ready) ─► Resumer::notify_ready ─► deliver (once) ─► turn
//! gateway start ─► ProcessWaits::sweep: pending process waits whose process has ended
//!   become ready (the exit event was reported before a crash but the wait not marked)
//! watch patterns: tern_procs::follow batch ─► WatchSink (the gateway) ─►
//!   ProcessWaits::watch_matched: create_wait(idem_key "tern-proc:<id>:watch:<offset of the
//!   first match>", the matches in its request) ─► wait_ready at once ─► notify_ready
//! ```
//!
//! - **Exactly once**: one wait per process (its `idem_key`), `wait_ready` moves it only from
//!   `pending` and `deliver_wait` only from `ready`, so an exit seen twice (event and sweep,
//!   two managers) appends one summary. A crash after the spawn but before the arm is
//!   covered by [`ProcessWaits::exited`] arming it itself; a crash after the exit was
//!   reported but before the wait became ready, by [`ProcessWaits::sweep`].
//! - **Watch matches** are rate-limited by the follower (one batch per interval per
//!   process); a batch found again after a restart has the same key, so it is told once.
//! - **Busy sessions**: the resumer's turn queues behind the session's running turn, so an
//!   exit while the launching turn still runs is delivered after it.
//! - **Status**: a process wait does not make its session `waiting` (see `tern_store::waits`):
//!   nobody is asked anything, and the user may chat on meanwhile.

use serde_json::json;
use tern_procs::{
    ArmError, ExitSummary, ProcError, ProcInfo, ProcessManager, ProcessNotifier, WatchBatch,
};
use tern_store::{NewWait, Store, StoreError, Wait, WaitKind, WaitStatus};
use tern_tools::BoxFuture;

use crate::decision::{WATCH_EVENT, is_watch, request_field};
use crate::resume::Resumer;

/// What can fail on the process side of the waits.
#[derive(Debug, thiserror::Error)]
pub enum ProcessWaitError {
    #[error("the store: {0}")]
    Store(#[from] StoreError),
    #[error("the process: {0}")]
    Proc(#[from] ProcError),
}

/// The idempotency key of a process's exit wait.
pub fn idem_key(process_id: &str) -> String {
    format!("tern-proc:{process_id}:exit")
}

/// The idempotency key of a watch-pattern notification: the log offset of its first
/// matching line names it, so a batch found again after a restart is the same wait.
pub fn watch_key(process_id: &str, first_offset: u64) -> String {
    format!("tern-proc:{process_id}:watch:{first_offset}")
}

/// Arms, readies and sweeps process waits on a store.
#[derive(Clone)]
pub struct ProcessWaits {
    store: Store,
}

impl ProcessWaits {
    pub fn new(store: Store) -> Self {
        ProcessWaits { store }
    }

    /// Records the pending exit wait of `info` (once per process id: a second call returns
    /// the first wait). `None` when the process has no session to notify.
    pub async fn arm(
        &self,
        call_id: Option<&str>,
        info: &ProcInfo,
    ) -> Result<Option<Wait>, StoreError> {
        let Some(session) = info.session_id.as_deref() else {
            return Ok(None);
        };
        let key = idem_key(&info.id);
        let request = json!({
            "process_id": info.id,
            "command": info.command,
            "pid": info.pid,
        })
        .to_string();
        let (w, new) = self
            .store
            .create_wait(&NewWait {
                session_id: session,
                idem_key: &key,
                tool_call_id: call_id,
                kind: WaitKind::Process,
                request: &request,
            })
            .await?;
        if new {
            tracing::debug!(process = %info.id, wait = %w.id, session, "completion notification armed");
        }
        Ok(Some(w))
    }

    /// `info` has ended: when it was started with `notify_on_complete`, its wait (armed here
    /// if the start could not) becomes ready with the exit summary, and the resumer is woken.
    /// `true` when this call made it ready.
    pub async fn exited(
        &self,
        mgr: &ProcessManager,
        info: &ProcInfo,
        resumer: Option<&Resumer>,
    ) -> Result<bool, ProcessWaitError> {
        if !info.notify_on_complete {
            return Ok(false);
        }
        let Some(w) = self.arm(None, info).await? else {
            return Ok(false);
        };
        self.make_ready(mgr, &w, Some(info.clone()), resumer).await
    }

    /// `batch` of watch-pattern matches of `info`: a wait that is ready at once (it carries
    /// the matches), once per batch (see [`watch_key`]), and the resumer is woken. `true`
    /// when this call made it ready.
    pub async fn watch_matched(
        &self,
        info: &ProcInfo,
        batch: &WatchBatch,
        resumer: Option<&Resumer>,
    ) -> Result<bool, StoreError> {
        let Some(session) = info.session_id.as_deref() else {
            return Ok(false);
        };
        // A session deleted while its process was kept has nobody to tell.
        if self.store.get_session(session).await?.is_none() {
            tracing::debug!(process = %info.id, session, "watch matches for a deleted session are dropped");
            return Ok(false);
        }
        let request = json!({
            "process_id": info.id,
            "command": info.command,
            "pid": info.pid,
            "event": WATCH_EVENT,
            "state": "matched",
            "batch": batch,
        })
        .to_string();
        let (w, _) = self
            .store
            .create_wait(&NewWait {
                session_id: session,
                idem_key: &watch_key(&info.id, batch.first_offset),
                tool_call_id: None,
                kind: WaitKind::Process,
                request: &request,
            })
            .await?;
        self.ready_watch(&w, resumer).await
    }

    /// A pending watch wait becomes ready with the matches its request carries.
    async fn ready_watch(&self, w: &Wait, resumer: Option<&Resumer>) -> Result<bool, StoreError> {
        if w.status != WaitStatus::Pending {
            return Ok(false);
        }
        if self
            .store
            .wait_ready(&w.id, &w.request, None)
            .await?
            .is_none()
        {
            return Ok(false);
        }
        tracing::info!(wait = %w.id, session = %w.session_id, "watch patterns matched; the session is to be notified");
        if let Some(r) = resumer {
            r.notify_ready();
        }
        Ok(true)
    }

    /// Every pending process wait whose process is no longer running becomes ready (at
    /// gateway start, next to the resumer's recovery, and then now and then). Returns how
    /// many did.
    pub async fn sweep(
        &self,
        mgr: &ProcessManager,
        resumer: Option<&Resumer>,
    ) -> Result<usize, ProcessWaitError> {
        let mut n = 0;
        for w in self.store.waits_in(WaitStatus::Pending).await? {
            if w.kind != WaitKind::Process {
                continue;
            }
            // A watch wait left pending by a crash between its create and ready steps.
            if is_watch(&w) {
                if self.ready_watch(&w, resumer).await? {
                    n += 1;
                }
                continue;
            }
            // An exit the manager has not reported yet is its own to tell: it waits for the
            // process's last watch matches first, and its `Exited` event readies the wait.
            // The sweep is for exits reported without that (a crash or an error between).
            let process_id = request_field(&w, "process_id").unwrap_or_default();
            if !mgr.exit_reported(&process_id).await? {
                continue;
            }
            if self.make_ready(mgr, &w, None, resumer).await? {
                n += 1;
            }
        }
        if n > 0 {
            tracing::info!(
                waits = n,
                "process exits found by the sweep were made ready for delivery"
            );
        }
        Ok(n)
    }

    /// Marks `w` ready with its process's summary, unless the process still runs.
    async fn make_ready(
        &self,
        mgr: &ProcessManager,
        w: &Wait,
        info: Option<ProcInfo>,
        resumer: Option<&Resumer>,
    ) -> Result<bool, ProcessWaitError> {
        if w.status != WaitStatus::Pending {
            return Ok(false);
        }
        let process_id = request_field(w, "process_id").unwrap_or_default();
        let info = match info {
            Some(i) => Some(i),
            None => match mgr.get(&process_id).await {
                Ok(i) => Some(i),
                Err(ProcError::NotFound(_)) => None,
                Err(e) => return Err(e.into()),
            },
        };
        let summary = match &info {
            Some(i) => match ExitSummary::of(mgr, i).await {
                Ok(Some(s)) => s,
                Ok(None) => return Ok(false),
                // The log is unreadable: the exit is still worth telling.
                Err(e) => {
                    tracing::warn!(process = %i.id, error = %e, "cannot read the end of the log");
                    let mut s = ExitSummary::of_status(i);
                    s.last_lines = String::new();
                    s
                }
            },
            // Removed already (retention): it ended, nothing more is known.
            None => ExitSummary {
                process_id: process_id.clone(),
                command: request_field(w, "command").unwrap_or_default(),
                state: "lost".to_owned(),
                exit_code: None,
                signal: None,
                last_lines: String::new(),
            },
        };
        let result = serde_json::to_string(&summary).unwrap_or_else(|_| "null".to_owned());
        let ready = self.store.wait_ready(&w.id, &result, None).await?;
        if ready.is_none() {
            return Ok(false);
        }
        tracing::info!(process = %summary.process_id, wait = %w.id, session = %w.session_id, "process exited; its session is to be notified");
        if let Some(r) = resumer {
            r.notify_ready();
        }
        Ok(true)
    }
}

impl ProcessNotifier for ProcessWaits {
    fn armed<'a>(
        &'a self,
        call_id: &'a str,
        info: &'a ProcInfo,
    ) -> BoxFuture<'a, Result<(), ArmError>> {
        Box::pin(async move {
            self.arm(Some(call_id), info)
                .await
                .map(|_| ())
                .map_err(Into::into)
        })
    }
}
