//! The turns running in the gateway: admission (a cap on concurrent turns), interrupts by
//! session, and draining at shutdown.
//!
//! Each turn request registers a [`Slot`] holding its [`Interrupt`]; the slot is marked
//! running when the agent actually starts the turn (after the session's queue), so a stop
//! interrupts the running turn and says whether there was one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tern_agent::{Interrupt, StopReason};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// One turn request, queued or running.
#[derive(Default)]
pub struct Slot {
    pub interrupt: Interrupt,
    running: AtomicBool,
    turn_id: Mutex<Option<String>>,
}

impl Slot {
    pub fn mark_running(&self, turn_id: &str) {
        *self.turn_id.lock().unwrap_or_else(|e| e.into_inner()) = Some(turn_id.to_owned());
        self.running.store(true, Ordering::SeqCst);
    }

    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    pub fn turn_id(&self) -> Option<String> {
        self.turn_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

pub struct TurnManager {
    permits: Arc<Semaphore>,
    slots: Mutex<HashMap<String, Vec<Arc<Slot>>>>,
    draining: AtomicBool,
    idle: Notify,
}

/// Keeps a turn registered and admitted; unregisters on drop.
pub struct TurnGuard {
    manager: Arc<TurnManager>,
    session: String,
    pub slot: Arc<Slot>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        self.manager.unregister(&self.session, &self.slot);
    }
}

impl TurnManager {
    pub fn new(max_concurrent: usize) -> Arc<Self> {
        Arc::new(Self {
            permits: Arc::new(Semaphore::new(max_concurrent.max(1))),
            slots: Mutex::new(HashMap::new()),
            draining: AtomicBool::new(false),
            idle: Notify::new(),
        })
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<String, Vec<Arc<Slot>>>> {
        // Every change to the map is a single call; a panic cannot leave it half-changed.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a turn for `session`, or 429 when the cap is reached (503 while draining).
    pub fn admit(self: &Arc<Self>, session: &str) -> Result<TurnGuard, ApiError> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(ApiError::shutting_down());
        }
        let permit = self
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| ApiError::busy(1))?;
        let slot = Arc::new(Slot::default());
        self.slots()
            .entry(session.to_owned())
            .or_default()
            .push(slot.clone());
        Ok(TurnGuard {
            manager: self.clone(),
            session: session.to_owned(),
            slot,
            _permit: permit,
        })
    }

    fn unregister(&self, session: &str, slot: &Arc<Slot>) {
        let mut map = self.slots();
        if let Some(v) = map.get_mut(session) {
            v.retain(|s| !Arc::ptr_eq(s, slot));
            if v.is_empty() {
                map.remove(session);
            }
        }
        if map.is_empty() {
            self.idle.notify_waiters();
        }
    }

    /// Interrupts the running turn of `session`; its turn id, or `None` if none ran.
    pub fn stop(&self, session: &str, reason: StopReason) -> Option<String> {
        let running: Vec<Arc<Slot>> = self
            .slots()
            .get(session)
            .map(|v| v.iter().filter(|s| s.is_running()).cloned().collect())
            .unwrap_or_default();
        let mut stopped = None;
        for s in running {
            if !s.interrupt.is_triggered() {
                s.interrupt.trigger(reason);
                stopped = s.turn_id();
            }
        }
        stopped
    }

    /// Interrupts every turn of `session`, queued ones included (for a reset).
    pub fn stop_all_of(&self, session: &str, reason: StopReason) -> bool {
        let slots: Vec<Arc<Slot>> = self.slots().get(session).cloned().unwrap_or_default();
        let mut was_running = false;
        for s in slots {
            was_running |= s.is_running() && !s.interrupt.is_triggered();
            s.interrupt.trigger(reason);
        }
        was_running
    }

    /// Whether `session` has a turn registered (queued or running).
    pub fn is_busy(&self, session: &str) -> bool {
        self.slots().contains_key(session)
    }

    /// Sessions with a turn registered.
    pub fn busy_sessions(&self) -> Vec<String> {
        self.slots().keys().cloned().collect()
    }

    /// Refuses new turns from now on.
    pub fn begin_drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Interrupts every turn.
    pub fn stop_everything(&self, reason: StopReason) {
        let all: Vec<Arc<Slot>> = self.slots().values().flatten().cloned().collect();
        for s in all {
            s.interrupt.trigger(reason);
        }
    }

    /// Gives memory freed by a burst of turns back to the OS once the gateway has been idle
    /// for a second. glibc's malloc keeps freed heap pages otherwise, so the resident size
    /// would stay at the burst's high-water mark. Runs until `stop` is cancelled.
    pub async fn trim_when_idle(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        loop {
            tokio::select! {
                () = self.idle.notified() => {}
                () = stop.cancelled() => return,
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            if self.slots().is_empty() {
                let _ = tokio::task::spawn_blocking(release_free_memory).await;
            }
        }
    }

    /// Waits until no turn is registered.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.slots().is_empty() {
                return;
            }
            notified.await;
        }
    }

    pub fn running_count(&self) -> usize {
        self.slots().values().map(Vec::len).sum()
    }
}

/// Waits for a slot's turn to end (for a reset that must see the interrupt recorded).
pub async fn wait_session_idle(turns: &TurnManager, session: &str) {
    while turns.is_busy(session) {
        let notified = turns.idle.notified();
        if !turns.is_busy(session) {
            return;
        }
        // `idle` fires only when every turn has ended; poll as well so one session's end is
        // seen while others keep running.
        let _ = tokio::time::timeout(std::time::Duration::from_millis(20), notified).await;
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_free_memory() {
    // SAFETY: malloc_trim only walks glibc's own heap bookkeeping; it takes the allocator's
    // locks itself and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_memory() {}
