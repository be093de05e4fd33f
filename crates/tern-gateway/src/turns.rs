//! The turns running in the gateway: admission (a cap on concurrent turns), interrupts by
//! session, sessions being closed (reset, delete), and draining at shutdown.
//!
//! Each admitted turn registers a [`Slot`] holding its [`Interrupt`]. The agent's events move
//! the slot from queued (waiting behind the session's running turn) to running and to
//! finished, so a stop interrupts only a running turn and says truthfully whether there was
//! one. Admission, the closing marks and draining share one lock, so no turn slips in while
//! a session is being finalized or the gateway is draining.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use tern_agent::{Interrupt, StopReason};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// Turns one session may have admitted at once (one running, the rest queued).
pub const MAX_TURNS_PER_SESSION: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Queued,
    Running(String),
    Finished,
}

/// One admitted turn.
pub struct Slot {
    pub interrupt: Interrupt,
    state: Mutex<State>,
}

impl Slot {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn mark_running(&self, turn_id: &str) {
        *self.state() = State::Running(turn_id.to_owned());
    }

    pub fn mark_finished(&self) {
        *self.state() = State::Finished;
    }

    /// Interrupts the turn if it is running and nobody interrupted it before; its turn id.
    fn stop_running(&self, reason: StopReason) -> Option<String> {
        let st = self.state();
        match &*st {
            State::Running(id) if self.interrupt.trigger(reason) => Some(id.clone()),
            _ => None,
        }
    }
}

#[derive(Default)]
struct Inner {
    slots: HashMap<String, Vec<Arc<Slot>>>,
    closing: HashSet<String>,
    draining: bool,
}

pub struct TurnManager {
    permits: Arc<Semaphore>,
    inner: Mutex<Inner>,
    idle: Notify,
}

/// Keeps a turn registered and admitted; unregisters on drop.
pub struct TurnGuard {
    manager: Arc<TurnManager>,
    session: String,
    pub slot: Arc<Slot>,
    /// The turn's place in the session's queue, taken at admission so that turns run in
    /// the order they were admitted.
    pub ticket: Mutex<Option<tern_agent::QueueTicket>>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        self.manager.unregister(&self.session, &self.slot);
    }
}

/// A session marked as closing: no turn is admitted for it until this is dropped.
pub struct Closing {
    manager: Arc<TurnManager>,
    session: String,
}

impl Drop for Closing {
    fn drop(&mut self) {
        self.manager.inner().closing.remove(&self.session);
    }
}

impl TurnManager {
    pub fn new(max_concurrent: usize) -> Arc<Self> {
        Arc::new(Self {
            permits: Arc::new(Semaphore::new(max_concurrent.max(1))),
            inner: Mutex::new(Inner::default()),
            idle: Notify::new(),
        })
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        // Every change under this lock is a single step; a panic cannot leave it half-done.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place under the concurrency cap: 429 past it, 503 while draining. Take it before
    /// creating anything for the turn, so a refused request leaves nothing behind.
    pub fn permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        if self.inner().draining {
            return Err(ApiError::shutting_down());
        }
        self.permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| ApiError::busy(1))
    }

    /// [`TurnManager::permit`] that waits for a place instead of answering 429 (the resumes
    /// of durable waits: a decision is never refused); 503 once draining.
    pub async fn permit_wait(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        if self.inner().draining {
            return Err(ApiError::shutting_down());
        }
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            // The semaphore is never closed.
            .map_err(|_| ApiError::shutting_down())?;
        if self.inner().draining {
            return Err(ApiError::shutting_down());
        }
        Ok(permit)
    }

    /// Registers a turn for `session` with its permit.
    pub fn register(
        self: &Arc<Self>,
        session: &str,
        permit: OwnedSemaphorePermit,
        ticket: tern_agent::QueueTicket,
    ) -> Result<TurnGuard, ApiError> {
        let mut inner = self.inner();
        if inner.draining {
            return Err(ApiError::shutting_down());
        }
        if inner.closing.contains(session) {
            return Err(ApiError::new(
                axum::http::StatusCode::CONFLICT,
                "session_closing",
                "The session is being reset or deleted",
            ));
        }
        let queue = inner.slots.entry(session.to_owned()).or_default();
        if queue.len() >= MAX_TURNS_PER_SESSION {
            let mut e = ApiError::busy(1);
            e.code = "session_queue_full";
            e.message = format!(
                "{MAX_TURNS_PER_SESSION} turns are already queued on this session; retry later"
            );
            return Err(e);
        }
        let slot = Arc::new(Slot {
            interrupt: Interrupt::new(),
            state: Mutex::new(State::Queued),
        });
        queue.push(slot.clone());
        Ok(TurnGuard {
            manager: self.clone(),
            session: session.to_owned(),
            slot,
            ticket: Mutex::new(Some(ticket)),
            _permit: permit,
        })
    }

    /// [`TurnManager::permit`] then [`TurnManager::register`] with a place in `agent`'s
    /// queue for the session.
    pub fn admit(
        self: &Arc<Self>,
        agent: &tern_agent::Agent,
        session: &str,
    ) -> Result<TurnGuard, ApiError> {
        let permit = self.permit()?;
        self.register(session, permit, agent.enqueue(session))
    }

    fn unregister(&self, session: &str, slot: &Arc<Slot>) {
        let mut inner = self.inner();
        if let Some(v) = inner.slots.get_mut(session) {
            v.retain(|s| !Arc::ptr_eq(s, slot));
            if v.is_empty() {
                inner.slots.remove(session);
            }
        }
        drop(inner);
        // Wakes waiters for one session and for the whole gateway alike; they re-check.
        self.idle.notify_waiters();
    }

    /// Interrupts the running turn of `session`; its turn id, or `None` if none ran.
    pub fn stop(&self, session: &str, reason: StopReason) -> Option<String> {
        let slots: Vec<Arc<Slot>> = self.inner().slots.get(session).cloned().unwrap_or_default();
        slots.iter().find_map(|s| s.stop_running(reason))
    }

    /// Marks `session` as closing: no turn is admitted for it until the mark is dropped.
    pub fn mark_closing(self: &Arc<Self>, session: &str) -> Closing {
        self.inner().closing.insert(session.to_owned());
        Closing {
            manager: self.clone(),
            session: session.to_owned(),
        }
    }

    /// Marks `session` as closing and interrupts all its turns, queued ones included.
    /// Returns the mark and whether a running turn was interrupted.
    pub fn close(self: &Arc<Self>, session: &str, reason: StopReason) -> (Closing, bool) {
        let closing = self.mark_closing(session);
        let slots = self.inner().slots.get(session).cloned().unwrap_or_default();
        let mut interrupted = false;
        for s in &slots {
            interrupted |= s.stop_running(reason).is_some();
            s.interrupt.trigger(reason);
        }
        (closing, interrupted)
    }

    /// Whether `session` has a turn registered (queued or running).
    pub fn is_busy(&self, session: &str) -> bool {
        self.inner().slots.contains_key(session)
    }

    /// Sessions with a turn registered.
    pub fn busy_sessions(&self) -> Vec<String> {
        self.inner().slots.keys().cloned().collect()
    }

    /// Refuses new turns from now on, and cancels turns still queued (they never started,
    /// so nothing of them is lost); running turns go on.
    pub fn begin_drain(&self) {
        let queued: Vec<Arc<Slot>> = {
            let mut inner = self.inner();
            inner.draining = true;
            inner.slots.values().flatten().cloned().collect()
        };
        for s in queued {
            if *s.state() == State::Queued {
                s.interrupt.trigger(StopReason::Shutdown);
            }
        }
    }

    /// Interrupts every turn.
    pub fn stop_everything(&self, reason: StopReason) {
        let all: Vec<Arc<Slot>> = self.inner().slots.values().flatten().cloned().collect();
        for s in all {
            s.interrupt.trigger(reason);
        }
    }

    /// Waits until `session` (or, with `None`, every session) has no turn registered.
    pub async fn wait_idle(&self, session: Option<&str>) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let done = match session {
                Some(s) => !self.is_busy(s),
                None => self.inner().slots.is_empty(),
            };
            if done {
                return;
            }
            notified.await;
        }
    }

    pub fn running_count(&self) -> usize {
        self.inner().slots.values().map(Vec::len).sum()
    }

    /// Gives memory freed by a burst of turns back to the OS once the gateway has been idle
    /// for a second. glibc's malloc keeps freed heap pages otherwise, so the resident size
    /// would stay at the burst's high-water mark. Runs until `stop` is cancelled.
    pub async fn trim_when_idle(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        loop {
            tokio::select! {
                () = self.wait_idle_edge() => {}
                () = stop.cancelled() => return,
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            if self.inner().slots.is_empty() {
                let _ = tokio::task::spawn_blocking(release_free_memory).await;
            }
        }
    }

    /// Returns when the last registered turn goes away (not when already idle).
    async fn wait_idle_edge(&self) {
        loop {
            self.idle.notified().await;
            if self.inner().slots.is_empty() {
                return;
            }
        }
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
