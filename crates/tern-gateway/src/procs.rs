//! The gateway's background processes ([`tern_procs::ProcessManager`]).
//!
//! The builder ([`crate::boot`]) opens the manager on `$TERN_HOME/procs` (adopting every live
//! supervisor), registers the `terminal`/`process` tools on it and makes the gateway with it
//! ([`crate::GatewayParts::procs`]). Upkeep then turns the manager's events into the hook events
//! `process_started` and `process_exited` (each exit once, also one that happened while the
//! gateway was down) and removes finished processes after `[processes] keep_finished`. A
//! reset or delete of a session kills its running processes ([`Gateway::kill_session_procs`])
//! unless asked to keep them (`?keep_processes=true`): a reset then moves them, with their
//! pending notifications, to the successor.
//!
//! `watch_patterns`: the manager's output followers hand their (rate-limited) batches of
//! matching lines to [`GatewayWatch`], which records each as a ready durable wait.
//!
//! `notify_on_complete` (see `tern_waits::process`): an exit makes the process's wait ready
//! and wakes the resumer, which resumes the session once; at start and with each retention
//! sweep, a sweep does the same for pending process waits whose process ended while no exit
//! event could be acted on (or acting on it failed).

use std::sync::{Arc, Weak};
use std::time::Duration;

use tern_hooks::{HookEvent, ProcessExited, ProcessStarted};
use tern_procs::{ProcEvent, ProcInfo, ProcStatus, ProcessManager, WatchBatch, WatchSink};
use tern_tools::BoxFuture;
use tern_waits::process::ProcessWaits;

use crate::Gateway;
use crate::error::ApiError;

/// How often finished processes are looked at for removal at most: a quarter of
/// `keep_finished`, between these bounds (a process outlives its retention by at most that).
const PRUNE_EVERY: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(60));

/// The manager and how long finished processes are kept.
pub(crate) struct GatewayProcs {
    pub(crate) manager: Arc<ProcessManager>,
    pub(crate) keep_finished: Duration,
}

impl Gateway {
    /// The process manager, if this gateway runs background processes.
    pub fn procs(&self) -> Option<&Arc<ProcessManager>> {
        self.procs.as_ref().map(|p| &p.manager)
    }

    /// Kills every running process `session_id` started; returns how many.
    pub(crate) async fn kill_session_procs(&self, session_id: &str) -> usize {
        let Some(mgr) = self.procs() else {
            return 0;
        };
        let killed = mgr.kill_session(session_id).await;
        if !killed.is_empty() {
            tracing::info!(
                session = session_id,
                processes = ?killed,
                "the session's background processes were killed"
            );
        }
        killed.len()
    }

    /// Moves `from`'s running processes and their pending notifications to `to` (a reset
    /// with `keep_processes`).
    pub(crate) async fn move_session_procs(&self, from: &str, to: &str) -> Result<(), ApiError> {
        let Some(mgr) = self.procs() else {
            return Ok(());
        };
        let moved = mgr
            .move_session(from, to)
            .await
            .map_err(|e| ApiError::internal(format!("cannot move the session's processes: {e}")))?;
        let waits = self.store.move_process_waits(from, to).await?;
        if !moved.is_empty() || waits > 0 {
            tracing::info!(
                session = from,
                successor = to,
                processes = ?moved,
                waits,
                "background processes kept: they move to the reset session's successor"
            );
        }
        Ok(())
    }

    /// Hook events from the manager's events, and the retention sweep (with a sweep for
    /// exits not yet notified); both end with `stop`.
    pub(crate) fn spawn_procs_upkeep(self: &Arc<Self>, upkeep: &crate::Upkeep) {
        let Some(p) = self.procs.as_ref() else {
            return;
        };
        let stop = upkeep.stop_token();
        p.manager.set_watch_sink(Arc::new(GatewayWatch {
            gw: Arc::downgrade(self),
        }));
        let mut events = p.manager.events();
        let gw = Arc::downgrade(self);
        let stop2 = stop.clone();
        let sweep_mgr = Arc::clone(&p.manager);
        let waits = ProcessWaits::new(self.store.clone());
        upkeep.spawn(async move {
            if let Some(gw) = gw.upgrade() {
                let resumer = gw.resumer();
                if let Err(e) = waits.sweep(&sweep_mgr, Some(&resumer)).await {
                    tracing::error!(error = %e, "cannot look for processes that ended unnotified");
                }
            }
            loop {
                let event = tokio::select! {
                    () = stop2.cancelled() => return,
                    e = events.recv() => match e {
                        Some(e) => e,
                        None => return,
                    },
                };
                let Some(gw) = gw.upgrade() else { return };
                gw.emit_proc_event(event).await;
            }
        });
        let manager = Arc::clone(&p.manager);
        let keep = p.keep_finished;
        let stop = stop.clone();
        let gw = Arc::downgrade(self);
        let waits = ProcessWaits::new(self.store.clone());
        upkeep.spawn(async move {
            let mut tick = tokio::time::interval((keep / 4).clamp(PRUNE_EVERY.0, PRUNE_EVERY.1));
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                // An exit whose notification failed at run time (a store error) is retried
                // here rather than at the next start; before the prune, which would make
                // its process `lost`.
                if let Some(gw) = gw.upgrade() {
                    let resumer = gw.resumer();
                    if let Err(e) = waits.sweep(&manager, Some(&resumer)).await {
                        tracing::warn!(error = %e, "cannot look for processes that ended unnotified");
                    }
                }
                if let Err(e) = manager.prune(keep).await {
                    tracing::warn!(error = %e, "cannot remove finished processes");
                }
            }
        });
    }

    async fn emit_proc_event(&self, event: ProcEvent) {
        let info = match &event {
            ProcEvent::Started(i) | ProcEvent::Exited(i) => i,
        };
        let session_id = info.session_id.clone().unwrap_or_default();
        let source = match self.store.get_session(&session_id).await {
            Ok(Some(s)) => s.source,
            _ => String::new(),
        };
        if let (ProcEvent::Exited(i), Some(mgr)) = (&event, self.procs())
            && i.notify_on_complete
        {
            let resumer = self.resumer();
            if let Err(e) = ProcessWaits::new(self.store.clone())
                .exited(mgr, i, Some(&resumer))
                .await
            {
                // The start-up sweep makes it ready next time.
                tracing::error!(process = %i.id, error = %e, "cannot record a process exit for its notification");
            }
        }
        let hook = match &event {
            ProcEvent::Started(i) => HookEvent::ProcessStarted(ProcessStarted {
                session_id,
                source,
                process_id: i.id.clone(),
                pid: i.pid,
                command: i.command.clone(),
                workdir: i.workdir.display().to_string(),
                pty: i.pty,
            }),
            ProcEvent::Exited(i) => exited(i, session_id, source),
        };
        self.hooks.emit(hook);
    }
}

/// Watch-pattern matches become durable waits that resume the process's session.
struct GatewayWatch {
    gw: Weak<Gateway>,
}

impl WatchSink for GatewayWatch {
    fn matched<'a>(
        &'a self,
        info: &'a ProcInfo,
        batch: &'a WatchBatch,
    ) -> BoxFuture<'a, Result<(), tern_procs::WatchSinkError>> {
        Box::pin(async move {
            let Some(gw) = self.gw.upgrade() else {
                return Err("the gateway is stopping".into());
            };
            let resumer = gw.resumer();
            ProcessWaits::new(gw.store.clone())
                .watch_matched(info, batch, Some(&resumer))
                .await
                .map(|_| ())
                .map_err(Into::into)
        })
    }
}

fn exited(i: &ProcInfo, session_id: String, source: String) -> HookEvent {
    let (state, exit_code, signal) = match &i.status {
        ProcStatus::Exited {
            exit_code, signal, ..
        } => ("exited", *exit_code, *signal),
        ProcStatus::Lost => ("lost", None, None),
        ProcStatus::Running => ("running", None, None),
    };
    HookEvent::ProcessExited(ProcessExited {
        session_id,
        source,
        process_id: i.id.clone(),
        pid: i.pid,
        command: i.command.clone(),
        state: state.to_owned(),
        exit_code,
        signal,
    })
}
