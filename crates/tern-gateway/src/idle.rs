//! Idle reset (`[gateway] idle_reset`): a session nobody used for that long is reset — it
//! is finalized and an empty successor takes over, as `POST /api/sessions/{id}/reset` does,
//! with `session_end` reason `expired`.
//!
//! Flow: every min(idle / 4, 1 min) → [`tern_store::Store::idle_sessions`] (idle status,
//! with messages, not updated within the idle time) → skip the exempt: a running turn,
//! an open wait of any kind (a decision or a process's notification is still to come), a
//! running background process → [`crate::Gateway::reset_session`].

use std::sync::Arc;
use std::time::Duration;

use tern_hooks::SessionEndReason;
use tern_store::Session;
use tokio_util::sync::CancellationToken;

use crate::Gateway;
use crate::error::ApiError;

/// Sessions looked at per sweep at most (the rest come next time).
const BATCH: i64 = 100;

impl Gateway {
    /// Resets sessions idle for `after` from now on (call it before
    /// [`Gateway::spawn_upkeep`]).
    pub fn set_idle_reset(&self, after: Duration) {
        if self.idle_reset.set(after).is_err() {
            tracing::warn!("the idle reset was set already; the second one is ignored");
        }
    }

    pub(crate) fn spawn_idle_reset(self: &Arc<Self>, stop: &CancellationToken) {
        let Some(&after) = self.idle_reset.get() else {
            return;
        };
        let every = (after / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let gw = Arc::downgrade(self);
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let Some(gw) = gw.upgrade() else { return };
                if let Err(e) = gw.idle_sweep(after).await {
                    tracing::warn!(error = ?e, "the idle reset failed; tried again later");
                }
            }
        });
    }

    /// Resets every session idle for `after` that is not exempt; returns how many.
    pub(crate) async fn idle_sweep(&self, after: Duration) -> Result<usize, ApiError> {
        let cutoff = tern_procs::layout::now_ms()
            .saturating_sub(i64::try_from(after.as_millis()).unwrap_or(i64::MAX));
        let mut reset = 0;
        for s in self.store.idle_sessions(cutoff, BATCH).await? {
            if let Some(why) = self.exempt(&s).await? {
                tracing::debug!(session = %s.id, why, "idle, but exempt from the idle reset");
                continue;
            }
            let (new, _) = self
                .reset_session(&s, false, SessionEndReason::Expired)
                .await?;
            tracing::info!(session = %s.id, successor = %new.id, idle_for = ?after, "idle session reset");
            reset += 1;
        }
        Ok(reset)
    }

    /// Why `s` must not be reset now, if it must not.
    async fn exempt(&self, s: &Session) -> Result<Option<&'static str>, ApiError> {
        if self.turns.is_busy(&s.id) {
            return Ok(Some("a turn is running"));
        }
        if !self.store.session_waits(&s.id, true).await?.is_empty() {
            return Ok(Some("it has open waits"));
        }
        if let Some(mgr) = self.procs() {
            let procs = mgr
                .list()
                .await
                .map_err(|e| ApiError::internal(format!("cannot list processes: {e}")))?;
            if procs
                .iter()
                .any(|p| p.status.is_running() && p.session_id.as_deref() == Some(s.id.as_str()))
            {
                return Ok(Some("it has running background processes"));
            }
        }
        Ok(None)
    }
}
