//! The agent loop: one turn of one session at a time.
//!
//! Flow of a turn ([`Agent::run_turn`]):
//! 1. wait for the session's turn lock (FIFO: an input that arrives during a turn is queued
//!    and runs after it);
//! 2. read the transcript from the store and repair its tail if an earlier run died with tool
//!    calls unanswered (each gets an `interrupted` tool result, then an `[interrupted]`
//!    marker), so the transcript is always valid for the model;
//! 3. append the user's input, then loop: make room in the model's window if the prompt
//!    would pass the threshold ([`compact`], measured by [`window`]) → call the model with
//!    the enabled tools' schemas →
//!    append its answer → run its tool calls concurrently, appending each result as soon as it
//!    and the ones before it are done (the loop guard, `loop_guard.rs`, counts each call and
//!    notes or stops one the model keeps repeating) → for a model that accepts images, a user
//!    message with the images the calls produced ([`images`]) → repeat until the model answers in text,
//!    the loop guard stops the turn, or `max_iterations` is reached;
//! 4. the turn's [`CancellationToken`] can stop it at any await point: the model call is
//!    dropped (aborting the HTTP request), tools are cancelled (the terminal kills its process
//!    group), every open tool call gets a result, and an `[interrupted]` marker is appended.
//!
//! Every message is committed before the next model call, so a `kill -9` loses at most the
//! model answer in flight.

pub mod compact;
pub mod delegate;
pub mod from_config;
pub mod images;
mod interrupt;
mod loop_guard;
mod progress;
mod prompt;
pub mod window;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;
use serde::Serialize;
use tern_hooks::{
    AgentLoopStopped, HookEvent, PostLlmCall, PostToolCall, PreLlmCall, PreToolCall, TokenUsage,
    ToolGate, TurnEnd, TurnEndStatus, TurnStart,
};
use tern_llm::{ChatRequest, Client, LlmError, RequestMessage, Role, StreamEvent, Usage};
use tern_store::{Message, NewMessage, SessionStatus, Store, StoreError};
use tern_tools::{Approver, Registry, ToolContext, ToolLimits, ToolReport, result_to_content};

use crate::loop_guard::LoopGuard;
pub use compact::{CompactOutcome, CompactStats, CompactionSettings, ContextStatus};
pub use delegate::DelegateSettings;
pub use window::WindowSource;

pub use interrupt::Interrupt;
pub use loop_guard::LoopGuardSettings;
pub use progress::PROGRESS_INTERVAL;
pub use prompt::{
    INSTRUCTION_FILES, INSTRUCTIONS_CAP, default_system_prompt, instruction_files,
    project_instructions,
};
pub use tern_hooks::{HookBus, StopReason};

/// The marker appended when a turn is interrupted.
pub const INTERRUPTED_MARKER: &str = "[interrupted]";

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// No usable model configuration; the message says what to set.
    #[error("{0}")]
    ModelNotConfigured(String),
    #[error("the model call failed: {0}")]
    Model(#[from] LlmError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The session was finalized (reset); its successor continues it.
    #[error("session {0} has ended (it was reset); continue in its successor")]
    SessionEnded(String),
}

/// Settings of the loop, from the configuration.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    pub model: String,
    pub max_iterations: u32,
    pub stream: bool,
    /// Replaces the default system prompt when set.
    pub system_prompt: Option<String>,
    pub limits: ToolLimits,
    /// Repeated identical tool calls: when to warn the model, when to end the turn.
    pub loop_guard: LoopGuardSettings,
    /// The model's context window in tokens; `None` (unknown) is
    /// [`window::DEFAULT_CONTEXT_LENGTH`].
    pub context_length: Option<u64>,
    pub compaction: CompactionSettings,
}

/// Live progress of a turn, for display.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    TurnStarted {
        turn_id: String,
    },
    AssistantDelta {
        text: String,
    },
    ReasoningDelta {
        text: String,
    },
    /// The answer streamed so far broke off and is being asked for again: drop the
    /// `AssistantDelta`s (and reasoning) since the last `AssistantMessage`; a `ModelRetry`
    /// follows.
    AnswerDiscarded,
    ModelRetry {
        attempt: u32,
        delay_ms: u64,
        error: String,
    },
    ToolStarted {
        call_id: String,
        name: String,
        arguments: String,
    },
    ToolFinished {
        call_id: String,
        name: String,
        ok: bool,
        duration_ms: u64,
        /// The tool message content given to the model.
        content: String,
    },
    /// A running tool reported how far it has got (an MCP server's progress), at most one
    /// per call per second, the last before `ToolFinished` always.
    ToolProgress {
        call_id: String,
        name: String,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    /// One model answer was stored (text, tool calls, or both).
    AssistantMessage {
        content: Option<String>,
        tool_calls: usize,
    },
    /// The turn's outcome is settled; nothing of it runs any more.
    TurnFinished {
        turn_id: String,
    },
}

pub type EventSink = Arc<dyn Fn(AgentEvent) + Send + Sync>;

/// One turn to run.
pub struct TurnRequest {
    pub session_id: String,
    pub input: String,
    /// The input is already the transcript's last message (a decision the resumer of a
    /// durable wait appended, exactly once): the turn appends nothing and answers it.
    pub input_appended: bool,
    /// Stops the turn; the first reason given is reported in `agent_loop_stopped`.
    pub interrupt: Interrupt,
    /// Replaces the system prompt for this turn only.
    pub system_prompt: Option<String>,
    pub approver: Arc<dyn Approver>,
    pub workdir: PathBuf,
    /// Enabled toolsets for this turn.
    pub toolsets: Vec<String>,
    pub events: Option<EventSink>,
    /// A place in the session's queue taken earlier with [`Agent::enqueue`]; without one the
    /// turn queues when `run_turn` is called.
    pub ticket: Option<QueueTicket>,
}

type LockFuture = Pin<Box<dyn Future<Output = tokio::sync::OwnedMutexGuard<()>> + Send + Sync>>;

/// A place in a session's turn queue. Turns run in the order their tickets were taken, which
/// for the gateway is the order requests were admitted, whatever order their tasks reach
/// [`Agent::run_turn`] in.
pub struct QueueTicket {
    session_id: String,
    wait: LockFuture,
}

impl QueueTicket {
    async fn wait(self) -> tokio::sync::OwnedMutexGuard<()> {
        self.wait.await
    }

    /// Waits until this ticket is at the head of its session's queue (the turns admitted
    /// before it have finished) and keeps the place: a turn run with the returned ticket
    /// starts at once, and no other turn of the session runs in between. The resumer of a
    /// durable wait appends its decision there, so that it never lands inside another turn.
    pub async fn ready(self) -> QueueTicket {
        let guard = self.wait.await;
        QueueTicket {
            session_id: self.session_id,
            wait: Box::pin(std::future::ready(guard)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// The model answered in text.
    Completed,
    /// The turn's token was cancelled.
    Interrupted,
    /// `max_iterations` model calls without a final answer.
    MaxIterations,
    /// The loop guard stopped the model repeating the same tool call.
    LoopDetected,
    /// The transcript no longer fits the model's window and compaction could not make room;
    /// the text says so.
    ContextFull,
}

#[derive(Debug, Clone, Serialize)]
pub struct TurnOutcome {
    pub turn_id: String,
    pub status: TurnStatus,
    /// The final answer, or the message that explains why there is none.
    pub text: Option<String>,
    pub usage: Usage,
    pub iterations: u32,
}

/// What stays the same through one turn's model calls.
struct Turn<'a> {
    llm: &'a Client,
    req: &'a TurnRequest,
    turn_id: &'a str,
    source: &'a str,
    system: String,
    tools: Vec<serde_json::Value>,
}

/// The model's answer to one call of a turn, or why the turn ends without one.
enum Answered {
    Answer(tern_llm::ChatResponse),
    /// With the message that says why (stored as the turn's last answer).
    Ended(TurnStatus, String),
    Interrupted,
}

/// The agent: store, model client, tools. Cheap to clone: clones share everything, the
/// turn queues included, so the agent can hand a clone to a tool call that runs child
/// sessions ([`delegate`]).
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Shared>,
}

/// What an [`Agent`] shares between its clones. Its fields are read through `Deref`, so the
/// methods of [`Agent`] read `self.store` as before it was shared.
#[derive(Clone)]
pub struct Shared {
    store: Store,
    llm: Result<Client, String>,
    registry: Arc<Registry>,
    settings: AgentSettings,
    hooks: Arc<HookBus>,
    /// Read `AGENTS.md`/`TERN.md` above the working directory into the system prompt; the
    /// home directory ends the walk outside a repository.
    project_instructions: Option<Option<PathBuf>>,
    /// Shared by every clone: one turn at a time per session, whichever clone runs it.
    locks: Arc<Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>>,
    delegation: DelegateSettings,
    /// Sessions whose last compaction failed, backing off; shared by every clone.
    compact_failures: compact::Failures,
    /// The window as the model server reports it, when `[model] context_length` is unset.
    discovery: Arc<window::Discovery>,
    /// Whether the model accepts images (`[model] vision`, else the server's word).
    vision: Arc<images::Vision>,
    /// Narrows a turn's toolsets by its session's source (`[mcp_servers.NAME] sources`).
    toolset_filter: Option<ToolsetFilter>,
}

/// Takes out of a turn's toolsets (second argument) those a session from the source (first
/// argument, the store's `sessions.source`) may not have, before the model sees any tool.
pub type ToolsetFilter = Arc<dyn Fn(&str, &mut Vec<String>) + Send + Sync>;

impl std::ops::Deref for Agent {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.inner
    }
}

impl Agent {
    /// `llm` is `Err(message)` when no model is configured: turns then fail with that message.
    pub fn new(
        store: Store,
        llm: Result<Client, String>,
        registry: Arc<Registry>,
        settings: AgentSettings,
    ) -> Self {
        Self {
            inner: Arc::new(Shared {
                store,
                llm,
                registry,
                settings,
                hooks: Arc::new(HookBus::new()),
                project_instructions: None,
                locks: Arc::new(Mutex::new(HashMap::new())),
                delegation: DelegateSettings::default(),
                compact_failures: compact::Failures::default(),
                discovery: Arc::default(),
                vision: Arc::default(),
                toolset_filter: None,
            }),
        }
    }

    /// This agent with `change` made to its shared part: in place while nothing else holds
    /// it (the builders below, before the agent is shared), on a copy otherwise.
    fn changed(self, change: impl FnOnce(&mut Shared)) -> Self {
        let mut inner = Arc::unwrap_or_clone(self.inner);
        change(&mut inner);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Publishes the turn's lifecycle events on `hooks`.
    pub fn with_hooks(self, hooks: Arc<HookBus>) -> Self {
        self.changed(|i| i.hooks = hooks)
    }

    /// Adds the project instructions (`AGENTS.md`, `TERN.md`) that apply to each turn's
    /// working directory to its system prompt, read afresh every turn (see
    /// [`project_instructions`]); `home` ends the search outside a repository. `tern chat`
    /// turns this on; the gateway, whose sessions are not tied to its own directory, does not.
    pub fn with_project_instructions(self, home: Option<PathBuf>) -> Self {
        self.changed(|i| i.project_instructions = Some(home))
    }

    /// Whether the model accepts images (`[model] vision`): `None` asks its server when a tool
    /// first produces an image, and no when the server does not say ([`images`]).
    pub fn with_vision(self, vision: Option<bool>) -> Self {
        self.changed(|i| i.vision = Arc::new(images::Vision::new(vision)))
    }

    /// Narrows every turn's toolsets by its session's source: API turns, chat turns, cron
    /// runs and resumed waits alike, since all of them run here ([`from_config`] sets it from
    /// `[mcp_servers.NAME] sources`).
    pub fn with_toolset_filter(self, filter: ToolsetFilter) -> Self {
        self.changed(|i| i.toolset_filter = Some(filter))
    }

    /// The limits of `delegate_task`'s child sessions (`[delegate]`).
    pub fn with_delegation(self, delegation: DelegateSettings) -> Self {
        self.changed(|i| i.delegation = delegation)
    }

    /// This agent with another model-call budget per turn: a child session's.
    pub(crate) fn with_max_iterations(&self, max_iterations: u32) -> Self {
        self.clone()
            .changed(|i| i.settings.max_iterations = max_iterations)
    }

    pub fn delegation(&self) -> &DelegateSettings {
        &self.delegation
    }

    pub fn hooks(&self) -> &Arc<HookBus> {
        &self.hooks
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn settings(&self) -> &AgentSettings {
        &self.settings
    }

    /// Takes a place in `session_id`'s turn queue now. tokio's mutex is fair: a waiter's place
    /// is fixed when its lock future is first polled, so the future is polled once here and
    /// kept; `run_turn` awaits it later.
    pub fn enqueue(&self, session_id: &str) -> QueueTicket {
        let mut wait: LockFuture = Box::pin(self.session_lock(session_id).lock_owned());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if let std::task::Poll::Ready(guard) = wait.as_mut().poll(&mut cx) {
            wait = Box::pin(std::future::ready(guard));
        }
        QueueTicket {
            session_id: session_id.to_owned(),
            wait,
        }
    }

    fn session_lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        // Poisoning cannot leave the map inconsistent: every operation on it is one call.
        let mut map = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = map.get(id).and_then(Weak::upgrade) {
            return l;
        }
        if map.len() > 256 {
            map.retain(|_, w| w.strong_count() > 0);
        }
        let l = Arc::new(tokio::sync::Mutex::new(()));
        map.insert(id.to_owned(), Arc::downgrade(&l));
        l
    }

    /// Runs one turn. Waits behind a running turn of the same session.
    pub async fn run_turn(&self, mut req: TurnRequest) -> Result<TurnOutcome, AgentError> {
        let llm = self
            .llm
            .as_ref()
            .map_err(|m| AgentError::ModelNotConfigured(m.clone()))?;
        if req.input.trim().is_empty() {
            return Err(AgentError::InvalidInput("the message is empty".into()));
        }
        if let Some(unknown) = self.registry.unknown_toolsets(&req.toolsets).first() {
            return Err(AgentError::InvalidInput(format!(
                "unknown toolset `{unknown}`; known toolsets: {}",
                self.registry.toolsets().join(", ")
            )));
        }
        let _turn = match req.ticket.take() {
            Some(t) if t.session_id == req.session_id => t.wait().await,
            _ => self.session_lock(&req.session_id).lock_owned().await,
        };
        let session = self.store.session(&req.session_id).await?;
        if session.status == SessionStatus::Ended {
            return Err(AgentError::SessionEnded(session.id));
        }
        // A session limited to some toolsets (a delegated child) keeps to them whoever runs
        // its turn: the resumer of a wait asks for the gateway's whole set.
        if let Some(allowed) = &session.toolsets {
            req.toolsets.retain(|t| allowed.contains(t));
        }
        // A child's toolsets were taken from its parent's turn, already narrowed by the
        // parent's source; its own (`delegate`) says nothing of who started the work.
        if let Some(filter) = &self.toolset_filter
            && session.source != delegate::CHILD_SOURCE
        {
            filter(&session.source, &mut req.toolsets);
        }
        let turn_id = uuid::Uuid::now_v7().simple().to_string();
        if req.interrupt.is_triggered() {
            // Stopped while still queued: nothing ran, nothing is stored, no event fires.
            return Ok(TurnOutcome {
                turn_id,
                status: TurnStatus::Interrupted,
                text: None,
                usage: Usage::default(),
                iterations: 0,
            });
        }
        // Announced before anything is written, so whoever tracks running turns (the
        // gateway's stop) sees this one from its first store write on.
        if let Some(sink) = &req.events {
            sink(AgentEvent::TurnStarted {
                turn_id: turn_id.clone(),
            });
        }
        self.store
            .set_status(&session.id, SessionStatus::Running)
            .await?;
        let source = session.source.clone();
        let result = self
            .turn(
                llm,
                &req,
                &turn_id,
                &source,
                req.system_prompt.clone().or(session.system_prompt.clone()),
                session.title.is_none(),
            )
            .await;
        // The status goes back to idle — or waiting, when the agent asked a human and the
        // answer is still to come — whatever happened; a failure here must not hide the
        // turn's own result. Before the turn is announced finished (its
        // events, the hooks), so whoever hears of its end finds the session no longer running.
        let after = match self.store.has_open_waits(&session.id).await {
            Ok(true) => SessionStatus::Waiting,
            _ => SessionStatus::Idle,
        };
        if let Err(e) = self
            .store
            .set_status_from(&session.id, SessionStatus::Running, after)
            .await
        {
            tracing::error!(session = %session.id, error = %e, "could not mark the session idle");
        }
        if let Some(sink) = &req.events {
            sink(AgentEvent::TurnFinished {
                turn_id: turn_id.clone(),
            });
        }
        if let Ok(o) = &result
            && o.status == TurnStatus::Interrupted
        {
            // Exactly once per real interrupt: only a turn that was running gets here.
            self.hooks
                .emit(HookEvent::AgentLoopStopped(AgentLoopStopped {
                    session_id: req.session_id.clone(),
                    source: source.clone(),
                    reason: req.interrupt.reason().unwrap_or(StopReason::ApiStop),
                    invalidation_reason: req.interrupt.invalidation().to_owned(),
                    turn_id: turn_id.clone(),
                }));
        }
        self.hooks.emit(HookEvent::TurnEnd(TurnEnd {
            session_id: req.session_id.clone(),
            source: source.clone(),
            turn_id: turn_id.clone(),
            status: match &result {
                Ok(o) if o.status == TurnStatus::Interrupted => TurnEndStatus::Interrupted,
                Ok(o) if o.status == TurnStatus::MaxIterations => TurnEndStatus::Failed,
                Ok(o) if o.status == TurnStatus::LoopDetected => TurnEndStatus::Failed,
                Ok(o) if o.status == TurnStatus::ContextFull => TurnEndStatus::Failed,
                Ok(_) => TurnEndStatus::Completed,
                Err(_) => TurnEndStatus::Failed,
            },
            iterations: result.as_ref().map_or(0, |o| o.iterations),
            usage: result
                .as_ref()
                .map_or(TokenUsage::default(), |o| tokens(&o.usage)),
            error: match &result {
                Ok(o) if o.status == TurnStatus::MaxIterations => {
                    Some("max_iterations reached without a final answer".into())
                }
                Ok(o) if o.status == TurnStatus::LoopDetected => o.text.clone(),
                Ok(o) if o.status == TurnStatus::ContextFull => o.text.clone(),
                Ok(_) => None,
                Err(e) => Some(e.to_string()),
            },
        }));
        result
    }

    async fn turn(
        &self,
        llm: &Client,
        req: &TurnRequest,
        turn_id: &str,
        source: &str,
        session_prompt: Option<String>,
        needs_title: bool,
    ) -> Result<TurnOutcome, AgentError> {
        let sid = req.session_id.as_str();
        let emit = |e: AgentEvent| {
            if let Some(sink) = &req.events {
                sink(e);
            }
        };
        let mut transcript = self.store.messages(sid).await?;
        self.repair(sid, &mut transcript).await?;
        if !req.input_appended {
            let user = self
                .store
                .append_message(
                    sid,
                    &NewMessage::new(Role::User, req.input.clone()).turn(turn_id),
                )
                .await?;
            transcript.push(user);
        }
        if needs_title {
            self.store.set_title(sid, &title_from(&req.input)).await?;
        }
        self.hooks.emit(HookEvent::TurnStart(TurnStart {
            session_id: sid.to_owned(),
            source: source.to_owned(),
            turn_id: turn_id.to_owned(),
            input: req.input.clone(),
        }));

        let turn = Turn {
            llm,
            req,
            turn_id,
            source,
            system: self.system_prompt(req, session_prompt).await,
            tools: self.registry.schemas(&req.toolsets),
        };
        let mut usage = Usage::default();
        let on_stream = |e: StreamEvent| match e {
            StreamEvent::ContentDelta(text) => emit(AgentEvent::AssistantDelta { text }),
            StreamEvent::ReasoningDelta(text) => emit(AgentEvent::ReasoningDelta { text }),
            StreamEvent::Discard => emit(AgentEvent::AnswerDiscarded),
            StreamEvent::Retrying {
                attempt,
                delay,
                error,
            } => emit(AgentEvent::ModelRetry {
                attempt,
                delay_ms: delay.as_millis() as u64,
                error,
            }),
        };
        let mut guard = LoopGuard::new(&self.settings.loop_guard);

        for iteration in 1..=self.settings.max_iterations {
            // Room in the window (compacting when needed), then the model's answer.
            let answer = match self
                .answer(&turn, iteration, &mut transcript, &on_stream)
                .await?
            {
                Answered::Answer(a) => a,
                Answered::Ended(status, text) => {
                    return self
                        .ended(sid, turn_id, status, text, usage, iteration)
                        .await;
                }
                Answered::Interrupted => {
                    return self.interrupted(sid, turn_id, &[], usage, iteration).await;
                }
            };
            if let Some(u) = &answer.usage {
                usage.add(u);
            }
            transcript.push(self.store_answer(sid, turn_id, &answer).await?);
            emit(AgentEvent::AssistantMessage {
                content: answer.content.clone(),
                tool_calls: answer.tool_calls.len(),
            });
            if answer.tool_calls.is_empty() {
                return Ok(TurnOutcome {
                    turn_id: turn_id.to_owned(),
                    status: TurnStatus::Completed,
                    text: Some(answer.content.unwrap_or_default()),
                    usage,
                    iterations: iteration,
                });
            }

            let (answered, images) = self
                .run_tools(
                    req,
                    turn_id,
                    source,
                    &answer.tool_calls,
                    &emit,
                    &mut transcript,
                    &mut guard,
                )
                .await?;
            if req.interrupt.is_triggered() {
                let open: Vec<_> = answer.tool_calls[answered..].to_vec();
                return self
                    .interrupted(sid, turn_id, &open, usage, iteration)
                    .await;
            }
            if let Some(stopped) = guard.stopped() {
                return self
                    .loop_detected(sid, turn_id, stopped, usage, iteration)
                    .await;
            }
            // After every call's result: tool messages must follow their calls directly.
            if !images.is_empty()
                && self.vision.accepts_images(llm, &self.settings.model).await
                && let Some(m) = images::message(&images)
            {
                transcript.push(self.store.append_message(sid, &m.turn(turn_id)).await?);
            }
        }

        let text = format!(
            "I stopped: this turn reached the limit of {} model calls (max_iterations) without a \
             final answer. Send another message to let me continue, or raise agent.max_iterations \
             in config.toml.",
            self.settings.max_iterations
        );
        let iterations = self.settings.max_iterations;
        self.ended(
            sid,
            turn_id,
            TurnStatus::MaxIterations,
            text,
            usage,
            iterations,
        )
        .await
    }

    /// Makes room in the window for the next model call (`compact.rs`), then calls the
    /// model; a refusal as over the window compacts and calls once more.
    async fn answer(
        &self,
        turn: &Turn<'_>,
        iteration: u32,
        transcript: &mut Vec<Message>,
        on_stream: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<Answered, AgentError> {
        let call = compact::Call {
            session_id: &turn.req.session_id,
            source: turn.source,
            turn_id: Some(turn.turn_id),
            toolsets: &turn.req.toolsets,
            system: &turn.system,
            tools: &turn.tools,
            interrupt: &turn.req.interrupt,
        };
        let mut overflowed = false;
        loop {
            match self
                .make_room(turn.llm, &call, transcript, overflowed)
                .await?
            {
                compact::Room::Ready => {}
                compact::Room::Full(text) => {
                    return Ok(Answered::Ended(TurnStatus::ContextFull, text));
                }
                compact::Room::Interrupted => return Ok(Answered::Interrupted),
            }
            let Some(answer) = self
                .call_model(turn, iteration, transcript, on_stream)
                .await
            else {
                return Ok(Answered::Interrupted);
            };
            match answer {
                Err(e) if e.is_context_overflow() && !overflowed => {
                    tracing::warn!(session = %turn.req.session_id, error = %e, "the model refused the prompt as too long; compacting");
                    overflowed = true;
                }
                Err(e) if e.is_context_overflow() => {
                    return Ok(Answered::Ended(
                        TurnStatus::ContextFull,
                        compact::refused_again(&e),
                    ));
                }
                other => return Ok(Answered::Answer(other?)),
            }
        }
    }

    /// Stores the model's answer (text, reasoning, tool calls, token usage), committed before
    /// anything else happens.
    async fn store_answer(
        &self,
        sid: &str,
        turn_id: &str,
        answer: &tern_llm::ChatResponse,
    ) -> Result<Message, AgentError> {
        Ok(self
            .store
            .append_message(
                sid,
                &NewMessage {
                    role: Some(Role::Assistant),
                    content: answer.content.clone(),
                    tool_calls: answer.tool_calls.clone(),
                    reasoning: answer.reasoning.clone(),
                    turn_id: Some(turn_id.to_owned()),
                    prompt_tokens: answer.usage.map(|u| u.prompt_tokens as i64),
                    completion_tokens: answer.usage.map(|u| u.completion_tokens as i64),
                    // What answered: the server's name for it, else the one asked for.
                    model: answer
                        .model
                        .clone()
                        .or_else(|| Some(self.settings.model.clone()))
                        .filter(|m| !m.is_empty()),
                    ..Default::default()
                },
            )
            .await?)
    }

    /// One model call with its hook events; `None` when the turn was interrupted.
    async fn call_model(
        &self,
        turn: &Turn<'_>,
        iteration: u32,
        transcript: &[Message],
        on_stream: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Option<Result<tern_llm::ChatResponse, LlmError>> {
        let sid = turn.req.session_id.as_str();
        let mut messages = Vec::with_capacity(transcript.len() + 1);
        messages.push(RequestMessage::text(Role::System, turn.system.as_str()));
        messages.extend(transcript.iter().map(Message::to_request));
        let request = ChatRequest {
            model: self.settings.model.clone(),
            messages,
            tools: turn.tools.clone(),
            stream: self.settings.stream,
            stream_options: None,
        };
        self.hooks.emit(HookEvent::PreLlmCall(PreLlmCall {
            session_id: sid.to_owned(),
            source: turn.source.to_owned(),
            turn_id: turn.turn_id.to_owned(),
            iteration,
            model: self.settings.model.clone(),
            message_count: request.messages.len(),
        }));
        let t0 = Instant::now();
        let answer = tokio::select! {
            r = turn.llm.chat(request, on_stream) => r,
            () = turn.req.interrupt.token().cancelled() => return None,
        };
        self.hooks.emit(HookEvent::PostLlmCall(PostLlmCall {
            session_id: sid.to_owned(),
            source: turn.source.to_owned(),
            turn_id: turn.turn_id.to_owned(),
            iteration,
            model: self.settings.model.clone(),
            duration_ms: t0.elapsed().as_millis() as u64,
            tool_calls: answer.as_ref().map_or(0, |a| a.tool_calls.len()),
            usage: answer
                .as_ref()
                .ok()
                .and_then(|a| a.usage.as_ref())
                .map(tokens),
            error: answer.as_ref().err().map(ToString::to_string),
        }));
        Some(answer)
    }

    /// Ends a turn with a message that says why (the window is full, the iteration limit),
    /// stored as its final answer. An interrupted turn ends through [`Agent::interrupted`].
    async fn ended(
        &self,
        sid: &str,
        turn_id: &str,
        status: TurnStatus,
        text: String,
        usage: Usage,
        iterations: u32,
    ) -> Result<TurnOutcome, AgentError> {
        self.store
            .append_message(
                sid,
                &NewMessage::new(Role::Assistant, text.clone()).turn(turn_id),
            )
            .await?;
        Ok(TurnOutcome {
            turn_id: turn_id.to_owned(),
            status,
            text: Some(text),
            usage,
            iterations,
        })
    }

    /// Runs the calls concurrently and stores each result in call order as soon as it and
    /// those before it are done. Returns how many calls got a stored result, and the images
    /// those calls produced; on cancellation the remaining ones are answered by
    /// [`Agent::interrupted`]. `calls` are those of the transcript's last message, the
    /// assistant answer just stored.
    #[expect(
        clippy::too_many_arguments,
        reason = "the parts of the turn the calls need, each used; a struct would only move the list"
    )]
    async fn run_tools(
        &self,
        req: &TurnRequest,
        turn_id: &str,
        source: &str,
        calls: &[tern_llm::ToolCall],
        emit: &(dyn Fn(AgentEvent) + Send + Sync),
        transcript: &mut Vec<Message>,
        guard: &mut LoopGuard,
    ) -> Result<(usize, Vec<images::CallImages>), AgentError> {
        // Where the calls' message sits: with the call id it tells this occurrence of a call
        // from a later one that reuses the id (see `ToolContext::call_seq`).
        let call_seq = transcript.last().map_or(0, |m| m.seq);
        let subagents = delegate::subagents(self, req);
        let mut pending: FuturesOrdered<_> = calls
            .iter()
            .map(|call| {
                emit(AgentEvent::ToolStarted {
                    call_id: call.id.clone(),
                    name: call.function.name.clone(),
                    arguments: call.function.arguments.clone(),
                });
                let cancel = req.interrupt.token().clone();
                let subagents = subagents.clone();
                let report = ToolReport::default();
                let images = report.images.clone();
                async move {
                    let t0 = Instant::now();
                    let gate = self.hooks.pre_tool_call(PreToolCall {
                        session_id: req.session_id.clone(),
                        source: source.to_owned(),
                        turn_id: turn_id.to_owned(),
                        call_id: call.id.clone(),
                        tool: call.function.name.clone(),
                        arguments: call.function.arguments.clone(),
                    });
                    // An interrupt must not wait for a slow hook's verdict (dropping the
                    // future kills the hooks' processes).
                    let gate = tokio::select! {
                        g = gate => g,
                        () = cancel.cancelled() => return (call, None, t0.elapsed(), images),
                    };
                    let progress = progress::Progress::new(
                        req.events.clone(),
                        Arc::clone(&self.hooks),
                        &req.session_id,
                        source,
                        turn_id,
                        &call.id,
                        &call.function.name,
                    );
                    let ctx = ToolContext {
                        session_id: req.session_id.clone(),
                        call_id: call.id.clone(),
                        call_seq,
                        workdir: req.workdir.clone(),
                        cancel: cancel.child_token(),
                        approver: req.approver.clone(),
                        limits: self.settings.limits.clone(),
                        preapproved: matches!(gate, ToolGate::Allow { .. }),
                        subagents,
                        toolsets: req.toolsets.as_slice().into(),
                        report: report.with_progress(progress.sink()),
                    };
                    let r = match gate {
                        ToolGate::Block { hook, message } => Some(Err(tern_tools::ToolError::new(
                            format!("blocked by the {hook} hook: {message}"),
                        ))),
                        _ => tokio::select! {
                            r = self.registry.call(&call.function.name, &call.function.arguments, &req.toolsets, ctx) => Some(r),
                            // A tool that ignores its token is dropped; its guards clean up.
                            () = async { cancel.cancelled().await; tokio::time::sleep(Duration::from_secs(2)).await } => None,
                        },
                    };
                    // Where the call got to shows before its result.
                    progress.finish();
                    (call, r, t0.elapsed(), images)
                }
            })
            .collect();
        let mut answered = 0;
        let mut produced = Vec::new();
        // Results that finished while an earlier one was being stored, in call order.
        let mut finished = std::collections::VecDeque::new();
        loop {
            let next = match finished.pop_front() {
                Some(done) => Some(done),
                None => pending.next().await,
            };
            let Some((call, r, took, images)) = next else {
                break;
            };
            let Some(r) = r else { break };
            let content = guard.observe(
                &call.function.name,
                &call.function.arguments,
                result_to_content(&r),
            );
            self.hooks.emit(HookEvent::PostToolCall(PostToolCall {
                session_id: req.session_id.clone(),
                source: source.to_owned(),
                turn_id: turn_id.to_owned(),
                call_id: call.id.clone(),
                tool: call.function.name.clone(),
                ok: r.is_ok(),
                duration_ms: took.as_millis() as u64,
                result: content.chars().take(4096).collect(),
            }));
            emit(AgentEvent::ToolFinished {
                call_id: call.id.clone(),
                name: call.function.name.clone(),
                ok: r.is_ok(),
                duration_ms: took.as_millis() as u64,
                content: content.clone(),
            });
            let result =
                NewMessage::tool_result(&call.id, &call.function.name, content).turn(turn_id);
            let append = self.store.append_message(&req.session_id, &result);
            tokio::pin!(append);
            // The other calls keep running while this result is stored: one that is in the
            // middle of a query holds a store connection until it is polled again, and with
            // several such calls the append would wait for a connection that never comes back.
            let m = loop {
                tokio::select! {
                    m = &mut append => break m?,
                    Some(done) = pending.next(), if !pending.is_empty() => finished.push_back(done),
                }
            };
            transcript.push(m);
            answered += 1;
            let images = images.take();
            if !images.is_empty() {
                produced.push(images::CallImages {
                    call: call.clone(),
                    images,
                });
            }
        }
        Ok((answered, produced))
    }

    /// Ends a turn the loop guard stopped, with a message that says why, stored as the
    /// assistant's final answer.
    async fn loop_detected(
        &self,
        sid: &str,
        turn_id: &str,
        stopped: &loop_guard::Stopped,
        usage: Usage,
        iterations: u32,
    ) -> Result<TurnOutcome, AgentError> {
        let text = stopped.message();
        tracing::warn!(session = sid, tool = %stopped.tool, times = stopped.times, "loop guard stopped the turn");
        self.store
            .append_message(
                sid,
                &NewMessage::new(Role::Assistant, text.clone()).turn(turn_id),
            )
            .await?;
        Ok(TurnOutcome {
            turn_id: turn_id.to_owned(),
            status: TurnStatus::LoopDetected,
            text: Some(text),
            usage,
            iterations,
        })
    }

    /// Answers open tool calls and appends the marker.
    async fn interrupted(
        &self,
        sid: &str,
        turn_id: &str,
        open: &[tern_llm::ToolCall],
        usage: Usage,
        iterations: u32,
    ) -> Result<TurnOutcome, AgentError> {
        let mut msgs: Vec<NewMessage> = open
            .iter()
            .map(|c| {
                NewMessage::tool_result(&c.id, &c.function.name, interrupted_result()).turn(turn_id)
            })
            .collect();
        msgs.push(NewMessage::new(Role::Assistant, INTERRUPTED_MARKER).turn(turn_id));
        self.store.append_messages(sid, &msgs).await?;
        Ok(TurnOutcome {
            turn_id: turn_id.to_owned(),
            status: TurnStatus::Interrupted,
            text: None,
            usage,
            iterations,
        })
    }

    /// Makes the stored transcript valid again after a run that died mid-turn: tool calls of
    /// the last assistant message without a result get an interrupted result, then a marker.
    async fn repair(&self, sid: &str, transcript: &mut Vec<Message>) -> Result<(), AgentError> {
        let Some(pos) = transcript
            .iter()
            .rposition(|m| m.role == Role::Assistant && !m.tool_calls.is_empty())
        else {
            return Ok(());
        };
        let answered: Vec<&str> = transcript[pos + 1..]
            .iter()
            .filter_map(|m| m.tool_call_id.as_deref())
            .collect();
        let missing: Vec<NewMessage> = transcript[pos]
            .tool_calls
            .iter()
            .filter(|c| !answered.contains(&c.id.as_str()))
            .map(|c| NewMessage::tool_result(&c.id, &c.function.name, interrupted_result()))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        tracing::warn!(
            session = sid,
            open = missing.len(),
            "repairing a transcript left mid-turn"
        );
        let mut msgs = missing;
        msgs.push(NewMessage::new(Role::Assistant, INTERRUPTED_MARKER));
        let stored = self.store.append_messages(sid, &msgs).await?;
        transcript.extend(stored);
        Ok(())
    }
}

fn tokens(u: &Usage) -> TokenUsage {
    TokenUsage {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
    }
}

fn interrupted_result() -> String {
    serde_json::json!({"error": "interrupted: the turn was stopped before this tool call finished"})
        .to_string()
}

/// A session title from its first message: the first line, at most 60 characters.
fn title_from(input: &str) -> String {
    let line = input.trim().lines().next().unwrap_or_default();
    let mut t: String = line.chars().take(60).collect();
    if line.chars().count() > 60 {
        t.push('…');
    }
    t
}

#[cfg(test)]
mod tests;
