//! The resumer: a ready wait's decision goes into its session exactly once, and a turn runs
//! on it at least once.
//!
//! # Flow at a glance
//!
//! ```text
//! follower: Store::wait_ready ─► Resumer::notify_ready
//!                                       │
//!   Resumer::run: scan Store::waits_in(Ready) ─► one task per wait:
//!     TurnRunner::run_resume(session, deliver)        (queued behind the session's turns,
//!       └─ at the head of the session's queue:         waiting for capacity, never 429)
//!            deliver = [command hook] → Store::deliver_wait (append + delivered, one
//!                      transaction: exactly once) → `wait_resolved` hook event
//!          → a turn with `input_appended` answers the decision
//!     → Store::wait_answered
//! ```
//!
//! - **Exactly once**: only [`tern_store::Store::deliver_wait`] appends a decision, and it
//!   does so in the transaction that moves the wait `ready → delivered`; a second attempt
//!   (a retry, a race, a restart) finds the wait delivered and appends nothing.
//! - **At least once**: a wait is marked answered only after its turn ran — not when the
//!   turn was cut short by a shutdown ([`ResumeError::ShuttingDown`]) nor when it could not
//!   run because its session ended. When the gateway starts, [`Resumer::run`] first takes
//!   [`tern_store::Store::delivered_unanswered`] (a crash or a shutdown came between the
//!   append and the answer) and runs their turns — unless the transcript shows the turn got
//!   as far as a final answer (the `[interrupted]` marker is not one), the crash having come
//!   just before the mark.
//! - **The session the decision went to**: a reset that keeps its waits moves them to the
//!   successor, possibly while a resume is under way. [`tern_store::Store::deliver_wait`]
//!   appends to the wait's current session and says which; when that is not the session the
//!   turn was queued on, the runner answers [`Resumed::Moved`] and the turn runs there.
//! - **Busy sessions**: the decision is appended only once the resume's turn is at the head
//!   of the session's queue ([`TurnRunner`]), so it never lands between another turn's tool
//!   call and its result, and the turn that answers it follows at once.
//! - **Failures** (the model is down): the turn is retried with exponential backoff (1 s up
//!   to 5 min); the decision, already delivered, is not appended again.
//! - Dangerous commands (`kind = command`): the [`CommandHook`] runs before delivery, so the
//!   grants the decision gives exist when the resumed turn runs.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tern_hooks::{HookBus, HookEvent, WaitResolved, WaitResolvedStatus};
use tern_llm::Role;
use tern_store::waits::INTERRUPTED_MARKER;
use tern_store::{NewMessage, Store, Wait, WaitKind, WaitStatus};
use tern_util::Backoff;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::client::BoxFuture;
use crate::decision::{decided_by, outcome_word, parse_json, render_decision};

/// Appends the decision once the resume's turn is at the head of its session's queue and
/// returns the session it was appended to (the wait's current one: a reset that keeps its
/// waits moves them); `Ok(None)` when there was nothing to append (the wait was cancelled,
/// or delivered by someone else), in which case no turn runs.
pub type Deliver = BoxFuture<'static, Result<Option<String>, DeliverError>>;

/// Why a decision was not delivered (tried again with backoff).
#[derive(Debug, thiserror::Error)]
pub enum DeliverError {
    #[error(transparent)]
    Store(#[from] tern_store::StoreError),
    /// The [`CommandHook`] could not record what the decision grants.
    #[error("recording the command's grant: {0}")]
    CommandHook(HookError),
}

/// A [`CommandHook`]'s own error.
pub type HookError = Box<dyn std::error::Error + Send + Sync>;

/// What a [`TurnRunner`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resumed {
    /// A turn ran on the decision (completed, stopped or out of iterations alike).
    Answered,
    /// `deliver` appended nothing, so no turn ran.
    NotDelivered,
    /// `deliver` appended the decision to this other session (the wait moved to a reset
    /// session's successor); no turn ran: it is to run there.
    Moved(String),
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ResumeError {
    /// The session was deleted or has ended: no turn can ever answer there.
    #[error("the session is gone: {0}")]
    Gone(String),
    /// Worth retrying later (the model is down, the gateway is full).
    #[error("{0}")]
    Failed(String),
    /// The gateway is shutting down: the turn did not run, or was interrupted by the
    /// shutdown. Not answered; the next start runs it.
    #[error("{0}")]
    ShuttingDown(String),
}

/// Runs resume turns; the gateway implements it.
pub trait TurnRunner: Send + Sync {
    /// Runs one turn on `session_id` whose input (`input`, the decision's text) is already
    /// the transcript's last message. The turn queues behind the session's running and
    /// admitted turns and waits for a place under the gateway's cap instead of being
    /// refused. With `deliver`, the runner awaits it once the turn is at the head of the
    /// session's queue, and runs the turn only if it appended the decision to `session_id`
    /// ([`Resumed::NotDelivered`] when it appended nothing, [`Resumed::Moved`] when it
    /// appended to another session).
    fn run_resume(
        &self,
        session_id: String,
        input: String,
        deliver: Option<Deliver>,
    ) -> BoxFuture<'_, Result<Resumed, ResumeError>>;
}

/// Runs before a `kind = command` wait's decision is delivered (dangerous commands, see
/// [`crate::command`]): it records the grants the decision gives. An error delays the
/// delivery (retried with backoff).
pub type CommandHook =
    Arc<dyn Fn(Wait, Value) -> BoxFuture<'static, Result<(), HookError>> + Send + Sync>;

const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(300);

/// Wakes the [`Resumer`] made with it ([`Resumer::with_wakeup`]). Made before the resumer, so
/// that what readies a wait (the `inbox` tools, the command approver) holds it from the start
/// instead of being handed the resumer later.
#[derive(Clone, Debug, Default)]
pub struct Wakeup(Arc<Notify>);

impl Wakeup {
    /// Some wait became ready. Cheap; a wake-up while the resumer is busy is kept and makes
    /// it scan again.
    pub fn notify(&self) {
        self.0.notify_one();
    }
}

/// Delivers ready waits and runs their turns; see the module docs.
pub struct Resumer {
    store: Store,
    hooks: Arc<HookBus>,
    runner: Arc<dyn TurnRunner>,
    command_hook: Option<CommandHook>,
    wake: Wakeup,
    /// Waits a task is handling now, so that a scan does not start a second one.
    active: Mutex<HashSet<String>>,
    first_retry: Duration,
}

impl Resumer {
    pub fn new(store: Store, hooks: Arc<HookBus>, runner: Arc<dyn TurnRunner>) -> Self {
        Resumer {
            store,
            hooks,
            runner,
            command_hook: None,
            wake: Wakeup::default(),
            active: Mutex::new(HashSet::new()),
            first_retry: FIRST_RETRY,
        }
    }

    /// What runs before a dangerous command's decision is delivered.
    pub fn with_command_hook(mut self, hook: CommandHook) -> Self {
        self.command_hook = Some(hook);
        self
    }

    /// Woken by `wakeup` (made beforehand and given to what readies waits).
    pub fn with_wakeup(mut self, wakeup: Wakeup) -> Self {
        self.wake = wakeup;
        self
    }

    /// What wakes this resumer.
    pub fn wakeup(&self) -> &Wakeup {
        &self.wake
    }

    /// The first retry delay after a failed turn (doubling up to 5 min); tests shorten it.
    pub fn with_first_retry(mut self, delay: Duration) -> Self {
        self.first_retry = delay;
        self
    }

    /// Wakes the resumer: some wait became ready. Cheap; a wake-up while it is busy is kept
    /// and makes it scan again.
    pub fn notify_ready(&self) {
        self.wake.notify();
    }

    fn active(&self) -> MutexGuard<'_, HashSet<String>> {
        // One insert or remove under the lock: a panic cannot leave it half-changed.
        self.active.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Spawns [`Resumer::run`].
    pub fn spawn(self: &Arc<Self>, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.clone().run(stop))
    }

    /// Recovery, then delivery of ready waits as they come, until `stop` is cancelled.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        self.recover(&stop).await;
        loop {
            // `notify_one` keeps a permit when nobody waits, so a wake-up that comes during
            // the scan is not lost.
            match self.store.waits_in(WaitStatus::Ready).await {
                Ok(ready) => {
                    for w in ready {
                        self.start(w, &stop);
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot list ready waits; retrying in 5 s");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(5)) => continue,
                        () = stop.cancelled() => return,
                    }
                }
            }
            tokio::select! {
                () = self.wake.0.notified() => {}
                () = stop.cancelled() => return,
            }
        }
    }

    /// Runs the turns of decisions a crash left delivered but unanswered.
    async fn recover(self: &Arc<Self>, stop: &CancellationToken) {
        let waits = loop {
            match self.store.delivered_unanswered().await {
                Ok(w) => break w,
                Err(e) => {
                    tracing::error!(error = %e, "cannot list unanswered decisions; retrying in 5 s");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(5)) => {}
                        () = stop.cancelled() => return,
                    }
                }
            }
        };
        if !waits.is_empty() {
            tracing::info!(
                waits = waits.len(),
                "recovering decisions delivered but not answered before a restart"
            );
        }
        for w in waits {
            match self.answered_in_transcript(&w).await {
                Ok(true) => {
                    if let Err(e) = self.store.wait_answered(&w.id).await {
                        tracing::error!(wait = %w.id, error = %e, "cannot mark a wait answered");
                    }
                }
                Ok(false) => self.start(w, stop),
                Err(e) => {
                    tracing::warn!(wait = %w.id, error = %e, "cannot read the transcript; running the turn");
                    self.start(w, stop);
                }
            }
        }
    }

    /// Whether a final answer (an assistant message without tool calls, other than the
    /// `[interrupted]` marker a stopped turn leaves) follows the decision message: its turn
    /// ran to the end and only the mark was lost.
    async fn answered_in_transcript(&self, w: &Wait) -> Result<bool, tern_store::StoreError> {
        let Some(message_id) = w.message_id else {
            return Ok(false);
        };
        let msgs = self.store.messages(&w.session_id).await?;
        let Some(pos) = msgs.iter().position(|m| m.id == message_id) else {
            // The session is gone (or its transcript was replaced): nothing to answer.
            return Ok(true);
        };
        Ok(msgs[pos + 1..].iter().any(|m| {
            m.role == Role::Assistant
                && m.tool_calls.is_empty()
                && m.content.as_deref() != Some(INTERRUPTED_MARKER)
        }))
    }

    fn start(self: &Arc<Self>, wait: Wait, stop: &CancellationToken) {
        if !self.active().insert(wait.id.clone()) {
            return;
        }
        let me = self.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let id = wait.id.clone();
            me.handle(wait, stop).await;
            me.active().remove(&id);
        });
    }

    /// Delivers (if still ready) and answers one wait, retrying failed turns with backoff.
    async fn handle(self: &Arc<Self>, wait: Wait, stop: CancellationToken) {
        let input = render_decision(&wait);
        let mut delivered = wait.status == WaitStatus::Delivered;
        // Where the turn runs: the wait's session, which a reset may change (see Moved).
        let mut session = wait.session_id.clone();
        let backoff = Backoff::new(self.first_retry, LAST_RETRY);
        let mut failures = 0;
        loop {
            let appended_to: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
            let deliver: Option<Deliver> = (!delivered).then(|| {
                let me = self.clone();
                let wait_id = wait.id.clone();
                let slot = appended_to.clone();
                Box::pin(async move {
                    let to = me.deliver(&wait_id).await?;
                    *lock(&slot) = to.clone();
                    Ok(to)
                }) as Deliver
            });
            let run = self
                .runner
                .run_resume(session.clone(), input.clone(), deliver);
            let result = tokio::select! {
                r = run => r,
                // Left as it is: the next start delivers or answers it.
                () = stop.cancelled() => return,
            };
            if let Some(to) = lock(&appended_to).take() {
                delivered = true;
                session = to;
            }
            let delay = match result {
                Ok(Resumed::Answered) => {
                    if let Err(e) = self.store.wait_answered(&wait.id).await {
                        // The next start runs the turn again (at least once).
                        tracing::error!(wait = %wait.id, error = %e, "cannot mark a wait answered");
                    }
                    tracing::info!(wait = %wait.id, session = %session, "resumed");
                    return;
                }
                Ok(Resumed::NotDelivered) => return,
                Ok(Resumed::Moved(to)) => {
                    tracing::info!(wait = %wait.id, session = %to, "the decision went to the reset session's successor; its turn runs there");
                    delivered = true;
                    session = to;
                    continue;
                }
                Err(ResumeError::ShuttingDown(why)) => {
                    tracing::info!(wait = %wait.id, session = %session, %why, "the resume is left for the next start");
                    return;
                }
                Err(ResumeError::Gone(why)) => {
                    // The wait may have moved to a reset session's successor meanwhile: the
                    // turn runs there. Otherwise nothing can answer it now; it is not marked
                    // answered (a turn never ran), so the next start looks at it again.
                    match self.store.wait(&wait.id).await {
                        Ok(Some(w)) if w.session_id != session => {
                            tracing::info!(wait = %wait.id, from = %session, to = %w.session_id, "the wait moved to another session; resuming there");
                            session = w.session_id;
                            continue;
                        }
                        _ => {}
                    }
                    tracing::warn!(wait = %wait.id, session = %session, %why, "no turn can answer this decision");
                    let _ = self.store.wait_attempt_failed(&wait.id, &why).await;
                    return;
                }
                Err(ResumeError::Failed(why)) => {
                    failures += 1;
                    let delay = backoff.delay(failures);
                    tracing::warn!(wait = %wait.id, session = %session, error = %why, retry_in = ?delay, "the resume failed; retrying");
                    let _ = self.store.wait_attempt_failed(&wait.id, &why).await;
                    delay
                }
            };
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = stop.cancelled() => return,
            }
            // A reset that keeps the waits may have moved this one meanwhile.
            if let Ok(Some(w)) = self.store.wait(&wait.id).await {
                session = w.session_id;
            }
        }
    }

    /// The delivery step: the command hook, then the append-and-mark transaction, then the
    /// hook event. The session the decision went to; `Ok(None)`: the wait was no longer
    /// ready.
    async fn deliver(&self, wait_id: &str) -> Result<Option<String>, DeliverError> {
        let w = self.store.wait(wait_id).await?;
        let Some(w) = w.filter(|w| w.status == WaitStatus::Ready) else {
            return Ok(None);
        };
        let result = parse_json(w.result.as_deref());
        if w.kind == WaitKind::Command
            && let Some(hook) = &self.command_hook
        {
            hook(w.clone(), result.clone())
                .await
                .map_err(DeliverError::CommandHook)?;
        }
        let message = NewMessage::new(Role::User, render_decision(&w));
        let appended = self.store.deliver_wait(&w.id, &message).await?;
        let Some(appended) = appended else {
            return Ok(None);
        };
        // The session it went to (a reset may have moved the wait since it was read).
        let w = Wait {
            session_id: appended.session_id.clone(),
            ..w
        };
        emit_resolved(
            &self.hooks,
            &self.store,
            &w,
            WaitResolvedStatus::Delivered,
            None,
        )
        .await;
        Ok(Some(appended.session_id))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Only set or taken whole under the lock: a panic cannot leave it half-changed.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Emits `wait_resolved` for `w` (`source` is the session's, or `gateway` when it is gone).
pub async fn emit_resolved(
    hooks: &HookBus,
    store: &Store,
    w: &Wait,
    status: WaitResolvedStatus,
    source: Option<&str>,
) {
    let source = match source {
        Some(s) => s.to_owned(),
        None => match store.get_session(&w.session_id).await {
            Ok(Some(s)) => s.source,
            _ => "gateway".to_owned(),
        },
    };
    let result = parse_json(w.result.as_deref());
    let delivered = status == WaitResolvedStatus::Delivered;
    hooks.emit(HookEvent::WaitResolved(WaitResolved {
        session_id: w.session_id.clone(),
        source,
        wait_id: w.id.clone(),
        request_id: w.request_id.clone(),
        kind: w.kind.as_str().to_owned(),
        status,
        decided_by: if delivered {
            decided_by(w, &result)
        } else {
            None
        },
        outcome: if delivered {
            outcome_word(w, &result)
        } else {
            None
        },
    }));
}

#[cfg(test)]
mod tests;
