//! Idle reset (`[gateway] idle_reset`): a session nobody used for that long is reset — it
//! is finalized and an empty successor takes over, as `POST /api/sessions/{id}/reset` does,
//! with `session_end` reason `expired`.
//!
//! Flow: every min(idle / 4, 1 min) → [`tern_store::Store::idle_sessions`] (idle status,
//! with messages, not updated within the idle time) → skip the exempt: a running turn,
//! an open wait of any kind (a decision or a process's notification is still to come), a
//! running background process → [`crate::Gateway::reset_session`].

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tern_hooks::SessionEndReason;
use tern_store::Session;

use crate::Gateway;
use crate::error::ApiError;

/// Sessions read from the store at once.
const BATCH: i64 = 100;

impl Gateway {
    pub(crate) fn spawn_idle_reset(self: &Arc<Self>, upkeep: &crate::Upkeep) {
        let Some(after) = self.idle_reset else {
            return;
        };
        let every = (after / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let gw = Arc::downgrade(self);
        let stop = upkeep.stop_token().clone();
        upkeep.spawn(async move {
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

    /// Resets every session idle for `after` that is not exempt; returns how many. Goes
    /// through all candidates page by page, so exempt sessions never hold others back.
    pub(crate) async fn idle_sweep(&self, after: Duration) -> Result<usize, ApiError> {
        let cutoff = tern_util::now_ms()
            .saturating_sub(i64::try_from(after.as_millis()).unwrap_or(i64::MAX));
        let with_procs = self.sessions_with_running_processes().await?;
        let mut reset = 0;
        let mut last: Option<(i64, String)> = None;
        loop {
            let page = self
                .store
                .idle_sessions(
                    cutoff,
                    last.as_ref().map(|(t, id)| (*t, id.as_str())),
                    BATCH,
                )
                .await?;
            for s in &page {
                if let Some(why) = self.exempt(s, &with_procs).await? {
                    tracing::debug!(session = %s.id, why, "idle, but exempt from the idle reset");
                    continue;
                }
                let (new, _) = self
                    .reset_session(s, false, SessionEndReason::Expired)
                    .await?;
                tracing::info!(session = %s.id, successor = %new.id, idle_for = ?after, "idle session reset");
                reset += 1;
            }
            match page.last() {
                Some(s) if page.len() as i64 == BATCH => last = Some((s.updated_at, s.id.clone())),
                _ => return Ok(reset),
            }
        }
    }

    /// The sessions that own a running background process (read once per sweep).
    async fn sessions_with_running_processes(&self) -> Result<HashSet<String>, ApiError> {
        let Some(mgr) = self.procs() else {
            return Ok(HashSet::new());
        };
        let procs = mgr
            .list()
            .await
            .map_err(|e| ApiError::internal(format!("cannot list processes: {e}")))?;
        Ok(procs
            .into_iter()
            .filter(|p| p.status.is_running())
            .filter_map(|p| p.session_id)
            .collect())
    }

    /// Why `s` must not be reset now, if it must not.
    async fn exempt(
        &self,
        s: &Session,
        with_procs: &HashSet<String>,
    ) -> Result<Option<&'static str>, ApiError> {
        if self.turns.is_busy(&s.id) {
            return Ok(Some("a turn is running"));
        }
        if !self.store.session_waits(&s.id, true).await?.is_empty() {
            return Ok(Some("it has open waits"));
        }
        if with_procs.contains(&s.id) {
            return Ok(Some("it has running background processes"));
        }
        Ok(None)
    }
}
