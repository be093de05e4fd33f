//! `POST /v1/chat/completions` and `GET /v1/models`, OpenAI-compatible.
//!
//! The last user message is the turn's input. With `X-Hermes-Session-Id` the turn runs on
//! that stored session (earlier messages in the body are ignored: the store has the
//! history); without it a new session is created from the body's earlier messages. The
//! session's id is returned in the same header. The header obeys the session API's rule:
//! another key's session answers 404. Tools run inside the gateway; the client
//! sees the final answer (streamed as `chat.completion.chunk`s when `stream` is true).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use tern_agent::{AgentEvent, EventSink, TurnStatus};
use tern_hooks::{HookEvent, SessionStart};
use tern_llm::Role;
use tern_store::{NewMessage, NewSession};
use tokio::sync::mpsc;

use crate::api::{disconnect_guard, guarded_stream, run_detached, run_turn};
use crate::error::ApiError;
use crate::{ApiJson, AppState, CallerKey};

pub const SESSION_HEADER: &str = "x-hermes-session-id";

#[derive(Deserialize)]
pub(crate) struct CompletionBody {
    model: Option<String>,
    #[serde(default)]
    messages: Vec<InMessage>,
    #[serde(default)]
    stream: bool,
}

#[derive(Deserialize)]
struct InMessage {
    role: String,
    #[serde(default)]
    content: Value,
}

/// Text of a message's content: a string, or the text parts of an array.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn now_secs() -> i64 {
    tern_store::now_ms() / 1000
}

/// The session `X-Hermes-Session-Id` names (`None` when absent or blank). A value that is not
/// printable ASCII is refused: ignoring it would run the turn on a new session instead of the
/// one the client meant.
fn session_header(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get(SESSION_HEADER) else {
        return Ok(None);
    };
    let id = value.to_str().map_err(|_| {
        ApiError::bad_request(
            "invalid_header",
            "the X-Hermes-Session-Id header must be printable ASCII (a session id)",
        )
        .param("X-Hermes-Session-Id")
    })?;
    Ok(Some(id.trim()).filter(|s| !s.is_empty()))
}

pub(crate) async fn models(State(gw): State<AppState>) -> impl IntoResponse {
    axum::Json(json!({
        "object": "list",
        "data": [{"id": gw.settings.model, "object": "model", "created": 0, "owned_by": "tern"}],
    }))
}

pub(crate) async fn completions(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<CompletionBody>,
) -> Result<Response, ApiError> {
    let Some(last_user) = body.messages.iter().rposition(|m| m.role == "user") else {
        return Err(ApiError::bad_request(
            "missing_message",
            "messages must contain a user message",
        )
        .param("messages"));
    };
    let input = text_of(&body.messages[last_user].content);
    if input.trim().is_empty() {
        return Err(
            ApiError::bad_request("missing_message", "the last user message is empty")
                .param("messages"),
        );
    }
    let model = body
        .model
        .clone()
        .unwrap_or_else(|| gw.settings.model.clone());
    let requested = session_header(&headers)?;
    // The place under the cap first: a refused request must not leave a new session behind.
    let permit = gw.turns.permit()?;
    let session_id = match requested {
        // Another key's session is not found, as on the session API.
        Some(id) => crate::api::session_or_404(&gw, &key, id).await?.id,
        None => new_session_from(&gw, &key, &body, last_user).await?,
    };
    let guard = gw
        .turns
        .register(&session_id, permit, gw.agent.enqueue(&session_id))?;
    let id = format!("chatcmpl-{}", uuid::Uuid::now_v7().simple());
    let header =
        HeaderValue::from_str(&session_id).map_err(|e| ApiError::internal(e.to_string()))?;

    if !body.stream {
        let o = run_detached(&gw, guard, &session_id, input, None).await?;
        let finish = match o.status {
            TurnStatus::Completed => "stop",
            TurnStatus::MaxIterations | TurnStatus::ContextFull => "length",
            TurnStatus::Interrupted | TurnStatus::LoopDetected => "stop",
        };
        let mut resp = axum::Json(json!({
            "id": id,
            "object": "chat.completion",
            "created": now_secs(),
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": o.text.unwrap_or_default()},
                "finish_reason": finish,
            }],
            "usage": {
                "prompt_tokens": o.usage.prompt_tokens,
                "completion_tokens": o.usage.completion_tokens,
                "total_tokens": o.usage.prompt_tokens + o.usage.completion_tokens,
            },
        }))
        .into_response();
        resp.headers_mut().insert(SESSION_HEADER, header);
        return Ok(resp);
    }

    let (tx, rx) = mpsc::unbounded_channel::<Event>();
    let (dguard, finished) = disconnect_guard(guard.slot.interrupt.clone());
    let created = now_secs();
    let chunk = {
        let id = id.clone();
        let model = model.clone();
        move |delta: Value, finish: Option<&str>| {
            Event::default().data(
                json!({
                    "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                })
                .to_string(),
            )
        }
    };
    let _ = tx.send(chunk(json!({"role": "assistant", "content": ""}), None));
    // Only the final answer is the client's content. Whether a model call ends in tool calls
    // is known only when it ends, so each call's text is held until then: text written beside
    // tool calls is dropped, the final answer is sent.
    let held = Arc::new(std::sync::Mutex::new(String::new()));
    let (tx2, chunk2) = (tx.clone(), chunk.clone());
    let sink: EventSink = Arc::new(move |ev: AgentEvent| {
        let mut held = held.lock().unwrap_or_else(|e| e.into_inner());
        match ev {
            AgentEvent::AssistantDelta { text } => held.push_str(&text),
            // The model call is retried: what was held of its broken answer is not sent.
            AgentEvent::AnswerDiscarded => held.clear(),
            AgentEvent::AssistantMessage {
                content,
                tool_calls,
            } => {
                let text = std::mem::take(&mut *held);
                if tool_calls == 0 {
                    let text = if text.is_empty() {
                        content.unwrap_or_default()
                    } else {
                        text
                    };
                    if !text.is_empty() {
                        let _ = tx2.send(chunk2(json!({"content": text}), None));
                    }
                }
            }
            _ => {}
        }
    });
    let gw2 = gw.clone();
    let sid = session_id.clone();
    tokio::spawn(async move {
        let result = run_turn(&gw2, &guard, &sid, input, None, Some(sink)).await;
        finished.store(true, Ordering::SeqCst);
        match result {
            Ok(o) => {
                let finish = if o.status == TurnStatus::MaxIterations {
                    "length"
                } else {
                    "stop"
                };
                let _ = tx.send(chunk(json!({}), Some(finish)));
            }
            Err(e) => {
                let e = ApiError::from(e);
                let _ = tx.send(
                    Event::default().data(
                        json!({"error": {"message": e.message, "type": e.kind, "code": e.code}})
                            .to_string(),
                    ),
                );
            }
        }
        let _ = tx.send(Event::default().data("[DONE]"));
        drop(guard);
    });
    let mut resp = Sse::new(guarded_stream(rx, dguard))
        .keep_alive(
            KeepAlive::new()
                .interval(Duration::from_secs(30))
                .text("keepalive"),
        )
        .into_response();
    resp.headers_mut().insert(SESSION_HEADER, header);
    Ok(resp)
}

/// A new session holding the body's messages before the last user message.
async fn new_session_from(
    gw: &AppState,
    key: &CallerKey,
    body: &CompletionBody,
    last_user: usize,
) -> Result<String, ApiError> {
    let system: Vec<String> = body.messages[..last_user]
        .iter()
        .filter(|m| m.role == "system" || m.role == "developer")
        .map(|m| text_of(&m.content))
        .collect();
    let s = gw
        .store
        .create_session(NewSession {
            source: "openai".into(),
            model: Some(
                body.model
                    .clone()
                    .unwrap_or_else(|| gw.settings.model.clone()),
            ),
            system_prompt: (!system.is_empty()).then(|| system.join("\n\n")),
            owner: Some(key.id.clone()),
            ..Default::default()
        })
        .await?;
    let history: Vec<NewMessage> = body.messages[..last_user]
        .iter()
        .filter_map(|m| {
            let role = match m.role.as_str() {
                "user" => Role::User,
                "assistant" => Role::Assistant,
                _ => return None,
            };
            Some(NewMessage::new(role, text_of(&m.content)))
        })
        .collect();
    if !history.is_empty() {
        gw.store.append_messages(&s.id, &history).await?;
    }
    gw.hooks.emit(HookEvent::SessionStart(SessionStart {
        session_id: s.id.clone(),
        source: s.source.clone(),
        model: s.model.clone(),
        parent_id: None,
    }));
    Ok(s.id)
}
