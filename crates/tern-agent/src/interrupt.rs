//! Stopping a turn, with the reason why.
//!
//! An [`Interrupt`] is a cancellation token plus the first reason anyone gave. Whoever stops
//! a turn (the API's stop, a reset, a client that went away, Ctrl-C, shutdown) calls
//! [`Interrupt::trigger`]; the turn notices at its next await point, cleans up, and reports
//! `agent_loop_stopped` once with that reason — only if it was really running.

use std::sync::{Arc, OnceLock};

use tern_hooks::StopReason;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Default, Debug)]
pub struct Interrupt {
    token: CancellationToken,
    reason: Arc<OnceLock<StopReason>>,
}

impl Interrupt {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stops the turn. Returns `true` for the first trigger; later ones change nothing.
    pub fn trigger(&self, reason: StopReason) -> bool {
        let first = self.reason.set(reason).is_ok();
        self.token.cancel();
        first
    }

    pub fn is_triggered(&self) -> bool {
        self.token.is_cancelled()
    }

    pub fn reason(&self) -> Option<StopReason> {
        self.reason.get().copied()
    }

    /// What the interrupt makes stale: see `agent_loop_stopped` in docs/hooks.md.
    pub fn invalidation(&self) -> &'static str {
        match self.reason() {
            Some(StopReason::SessionReset) => "session",
            Some(StopReason::Shutdown) => "process",
            _ => "turn",
        }
    }

    /// The token tools and model calls watch.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_reason_wins() {
        let i = Interrupt::new();
        assert!(!i.is_triggered());
        assert!(i.trigger(StopReason::ClientDisconnect));
        assert!(!i.clone().trigger(StopReason::Shutdown));
        assert_eq!(i.reason(), Some(StopReason::ClientDisconnect));
        assert!(i.token().is_cancelled());
        assert_eq!(i.invalidation(), "turn");
    }
}
