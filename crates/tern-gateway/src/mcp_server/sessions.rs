//! The session tools: `session_create`, `session_chat`, `session_list`, `session_messages` —
//! the Hermes session API (`/api/sessions…`) for MCP clients.
//!
//! Same owners, same answers: a session belongs to the key that created it (an admin key
//! sees all), another key's is "not found"; a chat is admitted by the gateway's turn
//! manager (the concurrency cap, one turn at a time per session) and runs like
//! `POST /api/sessions/{id}/chat`. While the turn runs it reports progress (with a progress
//! token); an MCP cancel of `session_chat` interrupts the turn, as a client going away does
//! over HTTP.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tern_hooks::{HookEvent, SessionStart};
use tern_store::NewSession;

use super::{Call, PROGRESS_EVERY, ToolDef, ToolFail, ToolOut, parse_args, report_progress};
use crate::api;

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CreateArgs {
    /// A title for people.
    #[serde(default)]
    title: Option<String>,
    /// Replaces the gateway's system prompt for this session.
    #[serde(default)]
    system_prompt: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ChatArgs {
    /// One of your sessions (from session_create or session_list).
    session_id: String,
    /// What to tell the agent.
    #[schemars(length(min = 1))]
    message: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ListArgs {
    /// At most this many (default 20, at most 200), newest first.
    #[serde(default)]
    #[schemars(range(min = 1, max = 200))]
    limit: Option<i64>,
    /// Skip this many.
    #[serde(default)]
    #[schemars(range(min = 0))]
    offset: Option<i64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MessagesArgs {
    /// One of your sessions.
    session_id: String,
}

pub(crate) fn tools() -> Vec<ToolDef> {
    vec![
        super::def::<CreateArgs>(
            "session_create",
            "Create an agent session of your own in tern; returns it (its `id`).",
        ),
        super::def::<ChatArgs>(
            "session_chat",
            "Send a message to one of your sessions and run one agent turn on it (the agent's \
             tools, its memory of the session); returns the agent's answer when the turn ends.",
        ),
        super::def::<ListArgs>("session_list", "Your sessions, newest first."),
        super::def::<MessagesArgs>(
            "session_messages",
            "The messages of one of your sessions, oldest first.",
        ),
    ]
}

pub(crate) async fn call(name: &str, args: Value, call: &Call<'_>) -> Option<ToolOut> {
    Some(match name {
        "session_create" => create(call, args).await,
        "session_chat" => chat(call, args).await,
        "session_list" => list(call, args).await,
        "session_messages" => messages(call, args).await,
        _ => return None,
    })
}

async fn create(call: &Call<'_>, args: Value) -> ToolOut {
    let a: CreateArgs = parse_args(args)?;
    let gw = call.gw;
    let s = gw
        .store
        .create_session(NewSession {
            id: None,
            title: a.title.filter(|t| !t.trim().is_empty()),
            source: "mcp".into(),
            model: Some(gw.settings.model.clone()),
            parent_id: None,
            system_prompt: a.system_prompt,
            owner: Some(call.key.id.clone()),
            toolsets: None,
        })
        .await?;
    gw.hooks.emit(HookEvent::SessionStart(SessionStart {
        session_id: s.id.clone(),
        source: s.source.clone(),
        model: s.model.clone(),
        parent_id: None,
    }));
    Ok(json!({"session": api::session_json(&s)}))
}

async fn chat(call: &Call<'_>, args: Value) -> ToolOut {
    let a: ChatArgs = parse_args(args)?;
    let gw = call.gw;
    api::session_or_404(gw, &call.key, &a.session_id).await?;
    let input = a.message.trim().to_owned();
    if input.is_empty() {
        return Err(ToolFail::new("`message` must not be empty"));
    }
    let guard = gw.turns.admit(&gw.agent, &a.session_id)?;
    // Dropping the turn's future (a cancel) interrupts it: it records its interruption.
    let turn = api::run_detached(gw, guard, &a.session_id, input, None);
    tokio::pin!(turn);
    let started = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval(PROGRESS_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let o = loop {
        tokio::select! {
            o = &mut turn => break o?,
            _ = ticks.tick() => {
                let message = format!("the agent's turn on {} is running", a.session_id);
                report_progress(call, started, None, message).await;
            }
            () = call.ctx.ct.cancelled() => {
                return Err(ToolFail::new("cancelled by the client; the turn was interrupted"));
            }
        }
    };
    Ok(json!({
        "sessionId": a.session_id,
        "turnId": o.turn_id,
        "status": api::status_str(o.status),
        "answer": o.text,
        "usage": api::usage_json(&o),
    }))
}

async fn list(call: &Call<'_>, args: Value) -> ToolOut {
    let a: ListArgs = parse_args(args)?;
    let limit = a.limit.unwrap_or(20).clamp(1, 200);
    let offset = a.offset.unwrap_or(0).max(0);
    let store = &call.gw.store;
    let mut list = if call.key.admin {
        store.list_sessions(limit + 1, offset).await?
    } else {
        store
            .list_owned_sessions(&call.key.id, limit + 1, offset)
            .await?
    };
    let has_more = list.len() as i64 > limit;
    list.truncate(limit as usize);
    Ok(json!({
        "sessions": list.iter().map(api::session_json).collect::<Vec<_>>(),
        "hasMore": has_more,
    }))
}

async fn messages(call: &Call<'_>, args: Value) -> ToolOut {
    let a: MessagesArgs = parse_args(args)?;
    api::session_or_404(call.gw, &call.key, &a.session_id).await?;
    let msgs = call.gw.store.messages(&a.session_id).await?;
    Ok(json!({
        "sessionId": a.session_id,
        "messages": msgs.iter().map(api::message_json).collect::<Vec<_>>(),
    }))
}
