//! The events and their payloads. The JSON form is `{"event": NAME, "timestamp": MS, ...}`
//! with the payload's fields at the top level; `docs/hooks.md` documents each.

use serde::Serialize;

/// Token counts of a turn or a model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TokenUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionStart {
    pub session_id: String,
    /// Who created it: `cli`, `api`, `openai` (the `/v1/chat/completions` endpoint), …
    pub source: String,
    pub model: Option<String>,
    /// The session this one continues (after a reset), if any.
    pub parent_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionEndReason {
    /// Finalized by a reset (`/new`); a new session continues.
    NewSession,
    /// The gateway stopped.
    Shutdown,
    /// Ended for inactivity.
    Expired,
    /// Deleted through the API or the CLI.
    Deleted,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionEnd {
    pub session_id: String,
    pub source: String,
    pub reason: SessionEndReason,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionReset {
    pub session_id: String,
    pub source: String,
    pub new_session_id: String,
    /// Whether a running turn was interrupted by the reset.
    pub interrupted: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnStart {
    pub session_id: String,
    pub source: String,
    pub turn_id: String,
    /// The user's input that starts the turn.
    pub input: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnEndStatus {
    Completed,
    Interrupted,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnEnd {
    pub session_id: String,
    pub source: String,
    pub turn_id: String,
    pub status: TurnEndStatus,
    /// Model calls made in the turn.
    pub iterations: u32,
    pub usage: TokenUsage,
    /// Why the turn failed (`failed`), or stopped without an answer (`max_iterations`).
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PreLlmCall {
    pub session_id: String,
    pub source: String,
    pub turn_id: String,
    /// 1 for the first model call of the turn.
    pub iteration: u32,
    pub model: String,
    /// Messages sent, the system prompt included.
    pub message_count: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PostLlmCall {
    pub session_id: String,
    pub source: String,
    pub turn_id: String,
    pub iteration: u32,
    pub model: String,
    pub duration_ms: u64,
    /// Tool calls in the answer (0 for a final answer).
    pub tool_calls: usize,
    pub usage: Option<TokenUsage>,
    /// Set when the call failed after retries.
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PreToolCall {
    pub session_id: String,
    pub source: String,
    pub turn_id: String,
    pub call_id: String,
    pub tool: String,
    /// The arguments exactly as the model sent them (a JSON string, possibly invalid).
    pub arguments: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PostToolCall {
    pub session_id: String,
    pub source: String,
    pub turn_id: String,
    pub call_id: String,
    pub tool: String,
    pub ok: bool,
    pub duration_ms: u64,
    /// The tool message content given to the model, cut to 4,096 characters.
    pub result: String,
}

/// A running tool reported progress (an MCP server's `notifications/progress`). At most one
/// per call per second; the last report before the call ends is always sent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolProgress {
    pub session_id: String,
    pub source: String,
    pub turn_id: String,
    pub call_id: String,
    pub tool: String,
    /// How far it has got; grows with each report.
    pub progress: f64,
    /// Where it ends, when known.
    pub total: Option<f64>,
    /// What the tool said about it.
    pub message: Option<String>,
}

/// Why a running turn was interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `POST /api/sessions/{id}/stop`.
    ApiStop,
    /// `POST /api/sessions/{id}/reset` while a turn ran.
    SessionReset,
    /// The client of a streaming turn went away.
    ClientDisconnect,
    /// Ctrl-C (or SIGTERM) in the CLI.
    UserInterrupt,
    /// The gateway shut down before the turn finished draining.
    Shutdown,
    /// `tern cron stop` (or `POST /api/cron/jobs/{id}/stop`) stopped a scheduled run.
    CronStop,
    /// A scheduled run passed its job's timeout.
    Timeout,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentLoopStopped {
    pub session_id: String,
    pub source: String,
    pub reason: StopReason,
    /// What the interrupt makes stale, for subscribers that hold per-turn resources:
    /// `turn` (only this turn's work), `session` (the session was finalized by a reset),
    /// `process` (the gateway is going away).
    pub invalidation_reason: String,
    pub turn_id: String,
}

/// An agent asked a human through the inbox: a durable wait was recorded and its request
/// created. The session ends its turn and is resumed when the decision lands.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitCreated {
    pub session_id: String,
    pub source: String,
    pub wait_id: String,
    /// The inbox request's id.
    pub request_id: String,
    /// `approval`, `elicitation` or `command` (a dangerous command awaiting approval).
    pub kind: String,
    /// The request's summary, as the reviewer sees it.
    pub summary: String,
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitResolvedStatus {
    /// The decision was appended to the session.
    Delivered,
    /// The session was deleted or reset before a decision was delivered.
    Cancelled,
}

/// A wait ended: its decision was delivered to the session, or it was cancelled.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitResolved {
    pub session_id: String,
    pub source: String,
    pub wait_id: String,
    /// The inbox request's id; `None` when the wait was cancelled before its request was
    /// created.
    pub request_id: Option<String>,
    /// `approval`, `elicitation` or `command`.
    pub kind: String,
    pub status: WaitResolvedStatus,
    /// Who decided (`delivered` only).
    pub decided_by: Option<String>,
    /// The decision in one word (`delivered` only): an approval's outcome (`APPROVE`,
    /// `REJECT`, …), `SUBMITTED` for an answered elicitation, …
    pub outcome: Option<String>,
}

/// A background process was started (`terminal` with `background: true`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessStarted {
    /// The session that started it.
    pub session_id: String,
    /// Who created that session; empty when it no longer exists.
    pub source: String,
    /// The process's id (`proc_…`).
    pub process_id: String,
    pub pid: i32,
    pub command: String,
    pub workdir: String,
    pub pty: bool,
}

/// A background process ended, or its supervisor was lost. Emitted once per process, also
/// for one that ended while the gateway was down (at the next start).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessExited {
    pub session_id: String,
    /// Who created that session; empty when it no longer exists.
    pub source: String,
    pub process_id: String,
    pub pid: i32,
    pub command: String,
    /// `exited`, or `lost` (its supervisor was killed; the exit status is unknown).
    pub state: String,
    /// The exit code, or 128 + the signal that ended it (`exited` only).
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
}

/// A scheduled job's run started (its occurrence claimed, its turn or script about to run).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CronRunStarted {
    /// The session the run goes to.
    pub session_id: String,
    pub job_id: String,
    pub job_name: Option<String>,
    /// The occurrence's id in `tern cron history`.
    pub occurrence_id: i64,
    /// The occurrence's time (ms since the Unix epoch); for a run by hand, when it was asked.
    pub scheduled_at: i64,
    /// `agent` or `script`.
    pub kind: String,
    /// `schedule` or `manual`.
    pub trigger: String,
    /// 1, or 2 for the retry of a run cut short by a crash.
    pub attempt: i64,
}

/// A scheduled job's run ended: the fields of its [`CronRunStarted`], and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CronRunFinished {
    #[serde(flatten)]
    pub run: CronRunStarted,
    /// `completed`, `waiting` (it asked a human), `failed`, `timed_out`, `stopped`.
    pub status: String,
    /// How it ended, in words (the error, the script's exit).
    pub outcome: String,
    pub duration_ms: i64,
}

/// Why a compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactReason {
    /// The next model call would have passed the threshold.
    Auto,
    /// Asked for (`/compact`, the API, `tern sessions compact`).
    Manual,
    /// The model refused a request as over its context window.
    Overflow,
}

/// A compaction of the session's transcript is about to run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PreCompact {
    pub session_id: String,
    pub source: String,
    /// The turn it runs in; `None` for a compaction asked for between turns.
    pub turn_id: Option<String>,
    pub reason: CompactReason,
    /// The estimated prompt size of the next model call before compacting.
    pub tokens_before: u64,
    /// The model's context window.
    pub context_length: u64,
}

/// A compaction ended: applied (`error` unset) or failed (nothing changed).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PostCompact {
    pub session_id: String,
    pub source: String,
    pub turn_id: Option<String>,
    pub reason: CompactReason,
    pub tokens_before: u64,
    /// The estimated prompt size after it (`tokens_before` when it failed).
    pub tokens_after: u64,
    /// Messages taken out of the active transcript (kept in the store).
    pub messages_compacted: u64,
    /// Old tool outputs the model now sees as a placeholder.
    pub outputs_elided: u64,
    /// Why it failed.
    pub error: Option<String>,
}

/// Every event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum HookEvent {
    SessionStart(SessionStart),
    SessionEnd(SessionEnd),
    SessionReset(SessionReset),
    TurnStart(TurnStart),
    TurnEnd(TurnEnd),
    PreLlmCall(PreLlmCall),
    PostLlmCall(PostLlmCall),
    PreToolCall(PreToolCall),
    PostToolCall(PostToolCall),
    ToolProgress(ToolProgress),
    AgentLoopStopped(AgentLoopStopped),
    WaitCreated(WaitCreated),
    WaitResolved(WaitResolved),
    ProcessStarted(ProcessStarted),
    ProcessExited(ProcessExited),
    PreCompact(PreCompact),
    PostCompact(PostCompact),
    CronRunStarted(CronRunStarted),
    CronRunFinished(CronRunFinished),
}

impl HookEvent {
    /// The event's name, as in `events = [...]` of a hook's configuration.
    pub fn name(&self) -> &'static str {
        match self {
            HookEvent::SessionStart(_) => "session_start",
            HookEvent::SessionEnd(_) => "session_end",
            HookEvent::SessionReset(_) => "session_reset",
            HookEvent::TurnStart(_) => "turn_start",
            HookEvent::TurnEnd(_) => "turn_end",
            HookEvent::PreLlmCall(_) => "pre_llm_call",
            HookEvent::PostLlmCall(_) => "post_llm_call",
            HookEvent::PreToolCall(_) => "pre_tool_call",
            HookEvent::PostToolCall(_) => "post_tool_call",
            HookEvent::ToolProgress(_) => "tool_progress",
            HookEvent::AgentLoopStopped(_) => "agent_loop_stopped",
            HookEvent::WaitCreated(_) => "wait_created",
            HookEvent::WaitResolved(_) => "wait_resolved",
            HookEvent::ProcessStarted(_) => "process_started",
            HookEvent::ProcessExited(_) => "process_exited",
            HookEvent::PreCompact(_) => "pre_compact",
            HookEvent::PostCompact(_) => "post_compact",
            HookEvent::CronRunStarted(_) => "cron_run_started",
            HookEvent::CronRunFinished(_) => "cron_run_finished",
        }
    }

    pub fn session_id(&self) -> &str {
        match self {
            HookEvent::SessionStart(e) => &e.session_id,
            HookEvent::SessionEnd(e) => &e.session_id,
            HookEvent::SessionReset(e) => &e.session_id,
            HookEvent::TurnStart(e) => &e.session_id,
            HookEvent::TurnEnd(e) => &e.session_id,
            HookEvent::PreLlmCall(e) => &e.session_id,
            HookEvent::PostLlmCall(e) => &e.session_id,
            HookEvent::PreToolCall(e) => &e.session_id,
            HookEvent::PostToolCall(e) => &e.session_id,
            HookEvent::ToolProgress(e) => &e.session_id,
            HookEvent::AgentLoopStopped(e) => &e.session_id,
            HookEvent::WaitCreated(e) => &e.session_id,
            HookEvent::WaitResolved(e) => &e.session_id,
            HookEvent::ProcessStarted(e) => &e.session_id,
            HookEvent::ProcessExited(e) => &e.session_id,
            HookEvent::PreCompact(e) => &e.session_id,
            HookEvent::PostCompact(e) => &e.session_id,
            HookEvent::CronRunStarted(e) => &e.session_id,
            HookEvent::CronRunFinished(e) => &e.run.session_id,
        }
    }
}

/// Names of all events, for validating configuration.
/// Names of all events, for validating configuration. One list for the configuration and
/// the bus: a test checks that every [`HookEvent`] is in it.
pub use tern_config::HOOK_EVENT_NAMES as EVENT_NAMES;

/// An event with its time, as delivered to every subscriber.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Envelope {
    #[serde(flatten)]
    pub event: HookEvent,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
}

impl Envelope {
    pub fn now(event: HookEvent) -> Self {
        Self {
            event,
            timestamp: tern_util::now_ms(),
        }
    }

    pub fn to_json(&self) -> String {
        // Serializing plain structs of strings and numbers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}
