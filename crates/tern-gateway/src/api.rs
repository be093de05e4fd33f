//! The Hermes-compatible session API (`/api/sessions…`), plus tern's stop and reset.
//!
//! A session belongs to the key that created it: another agent key gets 404 for it, as for
//! a session that does not exist (a 403 would confirm the id), and does not see it listed.
//! Admin keys see every session, also those no key created (`tern chat`, and sessions from
//! before sessions had owners).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use serde::Deserialize;
use serde_json::{Value, json};
use tern_agent::{AgentEvent, EventSink, StopReason, TurnOutcome, TurnRequest, TurnStatus};
use tern_hooks::{HookEvent, SessionEnd, SessionEndReason, SessionReset, SessionStart};
use tern_store::{Message, NewSession, Session, SessionStatus};
use tokio::sync::mpsc;

use crate::error::ApiError;
use crate::turns::TurnGuard;
use crate::{ApiJson, AppState, CallerKey};

fn secs(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

pub(crate) fn session_json(s: &Session) -> Value {
    json!({
        "id": s.id,
        "object": "hermes.session",
        "title": s.title,
        "source": s.source,
        "model": s.model,
        "parent_session_id": s.parent_id,
        "system_prompt": s.system_prompt,
        "status": s.status,
        "created_at": secs(s.created_at),
        "updated_at": secs(s.updated_at),
        "usage": {
            "input_tokens": s.prompt_tokens,
            "output_tokens": s.completion_tokens,
            "total_tokens": s.prompt_tokens + s.completion_tokens,
        },
    })
}

pub(crate) fn message_json(m: &Message) -> Value {
    json!({
        "id": m.id,
        "session_id": m.session_id,
        "role": m.role,
        "content": m.content,
        "tool_call_id": m.tool_call_id,
        "tool_calls": if m.tool_calls.is_empty() { Value::Null } else { json!(m.tool_calls) },
        "tool_name": m.tool_name,
        "reasoning": m.reasoning,
        "model": m.model,
        "timestamp": secs(m.created_at),
        "seq": m.seq,
        // The summary standing in for compacted messages (it has no row of its own: id 0).
        "compaction_id": m.compaction_id,
        // With `?all=true`: taken out of the active transcript by a compaction.
        "compacted": m.compacted,
        // With `?all=true`: the placeholder the model sees instead of this long output.
        "model_content": m.model_content,
    })
}

/// The session `id` if `key` may use it; 404 alike for a session that does not exist and
/// for another key's.
pub(crate) async fn session_or_404(
    gw: &AppState,
    key: &CallerKey,
    id: &str,
) -> Result<Session, ApiError> {
    gw.store
        .get_session(id)
        .await?
        .filter(|s| key.sees(s))
        .ok_or_else(|| ApiError::session_not_found(id))
}

#[derive(Deserialize)]
pub(crate) struct Page {
    limit: Option<i64>,
    offset: Option<i64>,
}

pub(crate) async fn list_sessions(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Query(p): Query<Page>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = p.limit.unwrap_or(20).clamp(1, 200);
    let offset = p.offset.unwrap_or(0).max(0);
    let mut list = if key.admin {
        gw.store.list_sessions(limit + 1, offset).await?
    } else {
        gw.store
            .list_owned_sessions(&key.id, limit + 1, offset)
            .await?
    };
    let has_more = list.len() as i64 > limit;
    list.truncate(limit as usize);
    Ok(axum::Json(json!({
        "object": "list",
        "data": list.iter().map(session_json).collect::<Vec<_>>(),
        "limit": limit,
        "offset": offset,
        "has_more": has_more,
    })))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct CreateSession {
    id: Option<String>,
    session_id: Option<String>,
    model: Option<String>,
    system_prompt: Option<String>,
    title: Option<String>,
}

fn valid_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

pub(crate) async fn create_session(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    body: Option<ApiJson<CreateSession>>,
) -> Result<impl IntoResponse, ApiError> {
    let body = body.map(|b| b.0).unwrap_or_default();
    let id = body.id.or(body.session_id);
    if let Some(id) = &id
        && !valid_id(id)
    {
        return Err(ApiError::bad_request(
            "invalid_session_id",
            "A session id is 1-128 characters of letters, digits, '-', '_', '.' or ':'",
        )
        .param("id"));
    }
    let s = gw
        .store
        .create_session(NewSession {
            id,
            title: body.title,
            source: "api".into(),
            model: body.model.or_else(|| Some(gw.settings.model.clone())),
            parent_id: None,
            system_prompt: body.system_prompt,
            owner: Some(key.id.clone()),
            toolsets: None,
        })
        .await?;
    gw.hooks.emit(HookEvent::SessionStart(SessionStart {
        session_id: s.id.clone(),
        source: s.source.clone(),
        model: s.model.clone(),
        parent_id: None,
    }));
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({"object": "hermes.session", "session": session_json(&s)})),
    ))
}

pub(crate) async fn get_session(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let s = session_or_404(&gw, &key, &id).await?;
    // The open waits (pending or ready): what the session is `waiting` for.
    let waits = gw.store.session_waits(&id, true).await?;
    let mut session = session_json(&s);
    session["waits"] = waits.iter().map(crate::waits::wait_json).collect();
    session["context"] = context_json(&gw, &id).await?;
    Ok(axum::Json(
        json!({"object": "hermes.session", "session": session}),
    ))
}

#[derive(Deserialize)]
pub(crate) struct PatchSession {
    title: Option<String>,
}

pub(crate) async fn patch_session(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PatchSession>,
) -> Result<impl IntoResponse, ApiError> {
    session_or_404(&gw, &key, &id).await?;
    let title = body
        .title
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request("missing_title", "Send a non-empty \"title\"").param("title")
        })?;
    gw.store.set_title(&id, &title).await?;
    let s = session_or_404(&gw, &key, &id).await?;
    Ok(axum::Json(
        json!({"object": "hermes.session", "session": session_json(&s)}),
    ))
}

/// `?keep_processes=true` on a reset or delete: the session's background processes go on
/// (on a reset they move to the successor, with their notifications).
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct EndOptions {
    #[serde(default)]
    keep_processes: bool,
}

pub(crate) async fn delete_session(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
    Query(opts): Query<EndOptions>,
) -> Result<impl IntoResponse, ApiError> {
    let s = session_or_404(&gw, &key, &id).await?;
    let _closing = gw.turns.mark_closing(&id);
    if gw.turns.is_busy(&id) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "session_busy",
            "A turn is running on this session; stop it first (POST /api/sessions/{id}/stop)",
        ));
    }
    // Its waits end with it: cancelled, their requests withdrawn on the inbox's timeline.
    gw.end_waits(&id, &s.source, None, "session deleted")
        .await?;
    // And its background processes, unless they are to go on (without a session to tell).
    if !opts.keep_processes {
        gw.kill_session_procs(&id).await;
    }
    gw.store.delete_session(&id).await?;
    gw.hooks.emit(HookEvent::SessionEnd(SessionEnd {
        session_id: s.id.clone(),
        source: s.source,
        reason: SessionEndReason::Deleted,
    }));
    Ok(axum::Json(
        json!({"object": "hermes.session.deleted", "id": s.id, "deleted": true}),
    ))
}

/// `?all=true`: every stored message, those a compaction took out of the active transcript
/// included (marked `compacted`), and the compactions with their summaries.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct MessagesQuery {
    all: bool,
}

pub(crate) async fn messages(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
    Query(q): Query<MessagesQuery>,
) -> Result<impl IntoResponse, ApiError> {
    session_or_404(&gw, &key, &id).await?;
    if !q.all {
        let msgs = gw.store.messages(&id).await?;
        return Ok(axum::Json(json!({
            "object": "list",
            "session_id": id,
            "data": msgs.iter().map(message_json).collect::<Vec<_>>(),
        })));
    }
    let msgs = gw.store.messages_all(&id).await?;
    let compactions = gw.store.compactions(&id).await?;
    Ok(axum::Json(json!({
        "object": "list",
        "session_id": id,
        "data": msgs.iter().map(message_json).collect::<Vec<_>>(),
        "compactions": compactions.iter().map(compaction_json).collect::<Vec<_>>(),
    })))
}

fn compaction_json(c: &tern_store::Compaction) -> Value {
    json!({
        "id": c.id,
        "reason": c.reason,
        "summary": c.summary,
        "after_seq": c.after_seq,
        "first_seq": c.first_seq,
        "last_seq": c.last_seq,
        "messages_compacted": c.messages_compacted,
        "outputs_elided": c.outputs_elided,
        "tokens_before": c.tokens_before,
        "tokens_after": c.tokens_after,
        "created_at": secs(c.created_at),
    })
}

/// How full the session's window is, as `GET /api/sessions/{id}` and a compaction report it.
async fn context_json(gw: &AppState, id: &str) -> Result<Value, ApiError> {
    let c = gw.agent.context_status(id, &gw.settings.toolsets).await?;
    Ok(json!({
        "context_length": c.context_length,
        "context_length_source": c.source,
        "compact_at_tokens": c.compact_at_tokens,
        "prompt_tokens": c.prompt_tokens,
        "compactions": c.compactions,
        "active_messages": c.active_messages,
    }))
}

/// `POST /api/sessions/{id}/compact`: compacts the session now. Refused while a turn is
/// queued or running (the turn compacts by itself when its prompt nears the window).
pub(crate) async fn compact(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let s = session_or_404(&gw, &key, &id).await?;
    if s.status == tern_store::SessionStatus::Ended {
        return Err(tern_agent::AgentError::SessionEnded(id).into());
    }
    if gw.turns.is_busy(&id) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "session_busy",
            "A turn is running on this session; it compacts by itself when its prompt nears \
             the window, or compact once it has ended",
        ));
    }
    let outcome = gw.agent.compact(&id, &gw.settings.toolsets).await?;
    let mut body = match outcome {
        tern_agent::CompactOutcome::Failed { error } => {
            return Err(ApiError::new(
                StatusCode::BAD_GATEWAY,
                "compaction_failed",
                format!(
                    "The compaction failed and nothing changed: {}",
                    crate::error::redact_urls(&error)
                ),
            ));
        }
        other => serde_json::to_value(&other).map_err(|e| ApiError::internal(e.to_string()))?,
    };
    body["object"] = json!("hermes.session.compact");
    body["session_id"] = json!(id);
    body["context"] = context_json(&gw, &id).await?;
    Ok(axum::Json(body))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct ChatBody {
    message: Option<Value>,
    input: Option<Value>,
    system_message: Option<String>,
    instructions: Option<String>,
}

impl ChatBody {
    fn input(&self) -> Result<String, ApiError> {
        let given = match (&self.message, &self.input) {
            (Some(v), _) if !v.is_null() => Some(("message", v)),
            (_, Some(v)) if !v.is_null() => Some(("input", v)),
            _ => None,
        };
        let text = match given {
            None => "",
            Some((_, Value::String(s))) => s.trim(),
            // Said as a type error, not as a missing message: the client sent one.
            Some((field, other)) => {
                return Err(ApiError::bad_request(
                    "invalid_type",
                    format!(
                        "\"{field}\" must be a string, not {}",
                        json_type_name(other)
                    ),
                )
                .param(field));
            }
        };
        if text.is_empty() {
            return Err(
                ApiError::bad_request("missing_message", "Send a non-empty \"message\"")
                    .param("message"),
            );
        }
        Ok(text.to_owned())
    }

    fn system(&self) -> Option<String> {
        self.system_message.clone().or(self.instructions.clone())
    }
}

/// A JSON value's type, as an error message names it ("a number").
fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Admits and runs one turn; `sink` sees its progress.
pub(crate) async fn run_turn(
    gw: &AppState,
    guard: &TurnGuard,
    session_id: &str,
    input: String,
    system_prompt: Option<String>,
    sink: Option<EventSink>,
) -> Result<TurnOutcome, tern_agent::AgentError> {
    let ticket = guard
        .ticket
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let slot = guard.slot.clone();
    let events: EventSink = Arc::new(move |ev: AgentEvent| {
        match &ev {
            AgentEvent::TurnStarted { turn_id } => slot.mark_running(turn_id),
            AgentEvent::TurnFinished { .. } => slot.mark_finished(),
            _ => {}
        }
        if let Some(s) = &sink {
            s(ev);
        }
    });
    gw.agent
        .run_turn(TurnRequest {
            session_id: session_id.to_owned(),
            input,
            input_appended: false,
            interrupt: guard.slot.interrupt.clone(),
            system_prompt,
            approver: gw.approver.clone(),
            workdir: gw.settings.workdir.clone(),
            toolsets: gw.settings.toolsets.clone(),
            events: Some(events),
            ticket,
        })
        .await
}

/// Runs a turn on a task of its own and waits for it. If the client goes away (the handler
/// is dropped), the turn is interrupted through its slot, records its interruption and
/// reports it, instead of being cut off at whatever await point it had reached.
pub(crate) async fn run_detached(
    gw: &AppState,
    guard: TurnGuard,
    session_id: &str,
    input: String,
    system_prompt: Option<String>,
) -> Result<TurnOutcome, ApiError> {
    let (dguard, finished) = disconnect_guard(guard.slot.interrupt.clone());
    let (gw2, sid) = (gw.clone(), session_id.to_owned());
    let task = tokio::spawn(async move {
        let r = run_turn(&gw2, &guard, &sid, input, system_prompt, None).await;
        drop(guard);
        r
    });
    let r = task.await;
    finished.store(true, Ordering::SeqCst);
    drop(dguard);
    match r {
        Ok(r) => r.map_err(ApiError::from),
        Err(e) => {
            tracing::error!(error = %e, "a turn's task failed");
            Err(ApiError::internal(
                "the turn failed unexpectedly; see the gateway's log",
            ))
        }
    }
}

pub(crate) fn usage_json(o: &TurnOutcome) -> Value {
    json!({
        "input_tokens": o.usage.prompt_tokens,
        "output_tokens": o.usage.completion_tokens,
        "total_tokens": o.usage.prompt_tokens + o.usage.completion_tokens,
    })
}

pub(crate) fn status_str(s: TurnStatus) -> &'static str {
    match s {
        TurnStatus::Completed => "completed",
        TurnStatus::Interrupted => "interrupted",
        TurnStatus::MaxIterations => "max_iterations",
        TurnStatus::LoopDetected => "loop_detected",
        TurnStatus::ContextFull => "context_full",
    }
}

pub(crate) async fn chat(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
    body: Option<ApiJson<ChatBody>>,
) -> Result<impl IntoResponse, ApiError> {
    session_or_404(&gw, &key, &id).await?;
    let body = body.map(|b| b.0).unwrap_or_default();
    let input = body.input()?;
    let guard = gw.turns.admit(&gw.agent, &id)?;
    let o = run_detached(&gw, guard, &id, input, body.system()).await?;
    Ok(axum::Json(json!({
        "object": "hermes.session.chat.completion",
        "session_id": id,
        "turn_id": o.turn_id,
        "status": status_str(o.status),
        "message": {"role": "assistant", "content": o.text},
        "usage": usage_json(&o),
    })))
}

fn sse(name: &str, data: Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

/// Interrupts the turn when the client goes away before it ends.
struct DisconnectGuard {
    interrupt: tern_agent::Interrupt,
    finished: Arc<AtomicBool>,
}

impl Drop for DisconnectGuard {
    fn drop(&mut self) {
        if !self.finished.load(Ordering::SeqCst) {
            self.interrupt.trigger(StopReason::ClientDisconnect);
        }
    }
}

/// Streams `rx` until it closes, holding `guard` so a dropped stream interrupts the turn.
pub(crate) fn guarded_stream(
    mut rx: mpsc::UnboundedReceiver<Event>,
    guard: DisconnectGuardHandle,
) -> impl Stream<Item = Result<Event, Infallible>> {
    futures_util::stream::poll_fn(move |cx| {
        let _keep = &guard;
        rx.poll_recv(cx).map(|o| o.map(Ok))
    })
}

pub(crate) struct DisconnectGuardHandle(#[allow(dead_code)] DisconnectGuard);

pub(crate) fn disconnect_guard(
    interrupt: tern_agent::Interrupt,
) -> (DisconnectGuardHandle, Arc<AtomicBool>) {
    let finished = Arc::new(AtomicBool::new(false));
    (
        DisconnectGuardHandle(DisconnectGuard {
            interrupt,
            finished: finished.clone(),
        }),
        finished,
    )
}

pub(crate) async fn chat_stream(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
    body: Option<ApiJson<ChatBody>>,
) -> Result<Response, ApiError> {
    session_or_404(&gw, &key, &id).await?;
    let body = body.map(|b| b.0).unwrap_or_default();
    let input = body.input()?;
    let guard = gw.turns.admit(&gw.agent, &id)?;
    let (tx, rx) = mpsc::unbounded_channel::<Event>();
    let (dguard, finished) = disconnect_guard(guard.slot.interrupt.clone());
    let sid = id.clone();
    let events_tx = tx.clone();
    let sink: EventSink = Arc::new(move |ev: AgentEvent| {
        let e = match ev {
            AgentEvent::TurnStarted { turn_id } => sse(
                "run.started",
                json!({"session_id": sid, "turn_id": turn_id}),
            ),
            AgentEvent::AssistantDelta { text } => sse("assistant.delta", json!({"delta": text})),
            AgentEvent::AnswerDiscarded => sse("assistant.discarded", json!({})),
            AgentEvent::ToolStarted {
                call_id,
                name,
                arguments,
            } => sse(
                "tool.started",
                json!({"call_id": call_id, "name": name, "arguments": arguments}),
            ),
            AgentEvent::ToolFinished {
                call_id,
                name,
                ok,
                duration_ms,
                content,
            } => sse(
                if ok { "tool.completed" } else { "tool.failed" },
                json!({"call_id": call_id, "name": name, "duration_ms": duration_ms, "result": content}),
            ),
            AgentEvent::ToolProgress {
                call_id,
                name,
                progress,
                total,
                message,
            } => sse(
                "tool.progress",
                json!({"call_id": call_id, "name": name, "progress": progress, "total": total, "message": message}),
            ),
            _ => return,
        };
        let _ = events_tx.send(e);
    });
    let gw2 = gw.clone();
    let sid = id.clone();
    tokio::spawn(async move {
        let result = run_turn(&gw2, &guard, &sid, input, body.system(), Some(sink)).await;
        finished.store(true, Ordering::SeqCst);
        match result {
            Ok(o) => {
                if o.status != TurnStatus::Interrupted {
                    let _ = tx.send(sse("assistant.completed", json!({"content": o.text})));
                }
                let _ = tx.send(sse(
                    "run.completed",
                    json!({"session_id": sid, "turn_id": o.turn_id, "status": status_str(o.status), "usage": usage_json(&o)}),
                ));
            }
            Err(e) => {
                let e = ApiError::from(e);
                let _ = tx.send(sse("error", json!({"message": e.message, "code": e.code})));
            }
        }
        let _ = tx.send(sse("done", json!({})));
        drop(guard);
    });
    Ok(Sse::new(guarded_stream(rx, dguard))
        .keep_alive(
            KeepAlive::new()
                .interval(Duration::from_secs(30))
                .text("keepalive"),
        )
        .into_response())
}

pub(crate) async fn stop(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    session_or_404(&gw, &key, &id).await?;
    let turn = gw.turns.stop(&id, StopReason::ApiStop);
    Ok(axum::Json(json!({
        "object": "hermes.session.stop",
        "session_id": id,
        "stopped": turn.is_some(),
        "turn_id": turn,
    })))
}

pub(crate) async fn reset(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
    Query(opts): Query<EndOptions>,
) -> Result<impl IntoResponse, ApiError> {
    let old = session_or_404(&gw, &key, &id).await?;
    let (new, interrupted) = gw
        .reset_session(&old, opts.keep_processes, SessionEndReason::NewSession)
        .await?;
    Ok(axum::Json(json!({
        "object": "hermes.session.reset",
        "session_id": old.id,
        "new_session_id": new.id,
        "interrupted": interrupted,
        "session": session_json(&new),
    })))
}

impl crate::Gateway {
    /// Finalizes `old` and starts its successor (the API's reset, and the idle reset with
    /// `reason` `Expired`): running turns are interrupted, open waits cancelled or moved
    /// (`[inbox] keep_waits_on_reset`), background processes killed or, with
    /// `keep_processes`, moved to the successor. Returns the successor and whether a turn
    /// was interrupted.
    pub(crate) async fn reset_session(
        &self,
        old: &Session,
        keep_processes: bool,
        reason: SessionEndReason,
    ) -> Result<(Session, bool), ApiError> {
        let gw = self;
        let id = old.id.clone();
        if old.status == SessionStatus::Ended {
            // Its successor exists already; a second one would fork the conversation.
            return Err(tern_agent::AgentError::SessionEnded(id).into());
        }
        let (closing, interrupted) = gw.turns.close(&id, StopReason::SessionReset);
        // The interrupted turns record their interruption before the session is finalized.
        if tokio::time::timeout(Duration::from_secs(15), gw.turns.wait_idle(Some(&id)))
            .await
            .is_err()
        {
            return Err(ApiError::internal(
                "the session's turns did not stop within 15 s",
            ));
        }
        gw.store.set_status(&id, SessionStatus::Ended).await?;
        let new = gw
            .store
            .create_session(NewSession {
                id: None,
                title: None,
                source: old.source.clone(),
                model: old.model.clone(),
                parent_id: Some(old.id.clone()),
                system_prompt: old.system_prompt.clone(),
                // The successor continues the conversation: it stays its key's, and within
                // its toolsets.
                owner: old.owner.clone(),
                toolsets: old.toolsets.clone(),
            })
            .await?;
        // Kept background processes move to the successor with their notifications' waits.
        if keep_processes {
            gw.move_session_procs(&old.id, &new.id).await?;
        }
        // Its open waits are cancelled and withdrawn, or follow it to the successor with
        // `[inbox] keep_waits_on_reset = true`.
        gw.end_waits(&old.id, &old.source, Some(&new.id), "session reset")
            .await?;
        // Its background processes end with it, unless kept.
        if !keep_processes {
            gw.kill_session_procs(&old.id).await;
        }
        // Only now: a resume queued for the old session must not deliver into it meanwhile.
        drop(closing);
        gw.hooks.emit(HookEvent::SessionReset(SessionReset {
            session_id: old.id.clone(),
            source: old.source.clone(),
            new_session_id: new.id.clone(),
            interrupted,
        }));
        gw.hooks.emit(HookEvent::SessionEnd(SessionEnd {
            session_id: old.id.clone(),
            source: old.source.clone(),
            reason,
        }));
        gw.hooks.emit(HookEvent::SessionStart(SessionStart {
            session_id: new.id.clone(),
            source: new.source.clone(),
            model: new.model.clone(),
            parent_id: Some(old.id.clone()),
        }));
        Ok((new, interrupted))
    }
}
