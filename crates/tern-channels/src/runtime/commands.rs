//! The chat commands: `/new`, `/stop`, `/status`, `/sessions`, `/resume N`, `/compact`,
//! `/help`. They act at once, even while the chat's turn runs (that is what `/stop` is for).

use jiff::Timestamp;
use tern_agent::CompactOutcome;
use tern_store::channels::ChannelEvent;

use crate::format::escape_markdown;

use super::Inner;
use super::chat::{chat_of, current_session, new_session, send_text};

/// How many sessions `/sessions` lists.
const LIST: i64 = 10;

const HELP: &str = "Commands:\n\
/new — start a new session (the current one stays, see /sessions)\n\
/stop — stop the running turn\n\
/status — this chat's session: messages, context, what it waits for\n\
/sessions — this chat's recent sessions\n\
/resume N — continue session N of /sessions\n\
/compact — summarise the older part of the session to free context\n\
/help — this list\n\n\
Anything else is a message to the agent.";

/// A time as the chat is told it.
pub(super) fn utc(ms: i64) -> String {
    Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|_| ms.to_string())
}

/// Handles `text` when it is a command; whether it was one.
pub(super) async fn handle(inner: &std::sync::Arc<Inner>, ev: &ChannelEvent, text: &str) -> bool {
    let text = text.trim();
    let Some(rest) = text.strip_prefix('/') else {
        return false;
    };
    let mut words = rest.split_whitespace();
    // `/cmd@botname` in groups.
    let cmd = words
        .next()
        .unwrap_or("")
        .split('@')
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    let arg = words.next();
    let chat = chat_of(ev);
    let reply = match cmd.as_str() {
        "help" | "start" => HELP.to_owned(),
        "new" | "reset" => match new_session(inner, &chat, None).await {
            Ok(id) => format!("Started a new session ({}).", short(&id)),
            Err(e) => format!("Could not start a new session: {e}"),
        },
        "stop" => match current(inner, ev).await {
            Some(s) if inner.host.stop(&s) => "Stopped.".to_owned(),
            _ => "Nothing is running.".to_owned(),
        },
        "status" => status(inner, ev).await,
        "sessions" => sessions(inner, ev).await,
        "resume" => resume(inner, ev, arg).await,
        "compact" => {
            // A compaction is a model call: on a task of its own, so the dispatcher (taps,
            // /stop) never waits for it.
            let key = (ev.chat_id.clone(), ev.thread_id.clone());
            let fresh = inner
                .compacting
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key.clone());
            if !fresh {
                "A compaction is already running here.".to_owned()
            } else {
                let inner = inner.clone();
                let ev = ev.clone();
                let chat = chat.clone();
                inner.tasks.clone().spawn(async move {
                    // Ends with the channel: a stopping gateway does not wait for a summary.
                    let reply = tokio::select! {
                        r = compact(&inner, &ev) => Some(r),
                        () = inner.stop.cancelled() => None,
                    };
                    inner
                        .compacting
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&key);
                    if let Some(reply) = reply {
                        send_text(&inner, &chat, &reply).await;
                    }
                });
                return true;
            }
        }
        _ => format!("Unknown command /{cmd}. {HELP}"),
    };
    send_text(inner, &chat, &reply).await;
    true
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

async fn current(inner: &Inner, ev: &ChannelEvent) -> Option<String> {
    inner
        .store
        .channel_current_session(&inner.settings.name, &ev.chat_id, &ev.thread_id)
        .await
        .ok()
        .flatten()
}

async fn status(inner: &Inner, ev: &ChannelEvent) -> String {
    let Some(id) = current(inner, ev).await else {
        return "No session yet: send a message to start one.".to_owned();
    };
    let store = &inner.store;
    let Ok(session) = store.session(&id).await else {
        return "The session is gone: send a message to start a new one.".to_owned();
    };
    let messages = store.message_count(&id).await.unwrap_or(0);
    let waits = store.session_waits(&id, true).await.unwrap_or_default();
    let mut out = format!(
        "Session {} — {}\n{messages} messages; {}",
        short(&id),
        escape_markdown(session.title.as_deref().unwrap_or("untitled")),
        if inner.host.is_busy(&id) {
            "a turn is running"
        } else {
            "idle"
        },
    );
    let toolsets = inner.host.turn_defaults().toolsets;
    if let Ok(c) = inner.host.agent().context_status(&id, &toolsets).await {
        out.push_str(&format!(
            "\nContext: ~{} of {} tokens; compacts at {}; {} compaction(s)",
            c.prompt_tokens, c.context_length, c.compact_at_tokens, c.compactions
        ));
    }
    if !waits.is_empty() {
        out.push_str(&format!("\nWaiting for {} decision(s):", waits.len()));
        for w in &waits {
            let summary = serde_json::from_str::<serde_json::Value>(&w.request)
                .ok()
                .and_then(|v| v.get("summary").and_then(|s| s.as_str()).map(str::to_owned))
                .unwrap_or_default();
            // The agent's words (a command's summary holds the command): exactly as written.
            out.push_str(&format!(
                "\n• {}: {}",
                w.kind.as_str(),
                escape_markdown(&summary)
            ));
        }
    }
    out
}

async fn sessions(inner: &Inner, ev: &ChannelEvent) -> String {
    let list = match inner
        .store
        .channel_chat_sessions(&inner.settings.name, &ev.chat_id, &ev.thread_id, LIST)
        .await
    {
        Ok(l) => l,
        Err(e) => return format!("Cannot list the sessions: {e}"),
    };
    if list.is_empty() {
        return "No sessions yet: send a message to start one.".to_owned();
    }
    let now = current(inner, ev).await;
    let mut out = String::from("This chat's sessions (newest first):");
    for (i, r) in list.iter().enumerate() {
        let s = inner.store.session(&r.session_id).await.ok();
        let n = inner.store.message_count(&r.session_id).await.unwrap_or(0);
        out.push_str(&format!(
            "\n{}. {} — {} ({n} messages, {}){}",
            i + 1,
            short(&r.session_id),
            escape_markdown(
                &s.as_ref()
                    .and_then(|s| s.title.clone())
                    .unwrap_or_else(|| "untitled".into())
            ),
            utc(s.map_or(r.created_at, |s| s.updated_at)),
            if now.as_deref() == Some(r.session_id.as_str()) {
                " ← current"
            } else {
                ""
            }
        ));
    }
    out.push_str("\n\n/resume N continues one.");
    out
}

async fn resume(inner: &Inner, ev: &ChannelEvent, arg: Option<&str>) -> String {
    let Some(n) = arg
        .and_then(|a| a.parse::<usize>().ok())
        .filter(|n| *n >= 1)
    else {
        return "Usage: /resume N, with N from /sessions.".to_owned();
    };
    let list = inner
        .store
        .channel_chat_sessions(&inner.settings.name, &ev.chat_id, &ev.thread_id, LIST)
        .await
        .unwrap_or_default();
    let Some(r) = list.get(n - 1) else {
        return format!("There is no session {n}: /sessions lists {}.", list.len());
    };
    let store = &inner.store;
    let bound = store
        .channel_bind_session(
            &inner.settings.name,
            &ev.chat_id,
            &ev.thread_id,
            &r.session_id,
        )
        .await;
    match bound {
        Ok(()) => format!("Resumed session {}.", short(&r.session_id)),
        Err(e) => format!("Could not resume: {e}"),
    }
}

async fn compact(inner: &Inner, ev: &ChannelEvent) -> String {
    let chat = chat_of(ev);
    let Ok(id) = current_session(inner, &chat, None).await else {
        return "No session to compact.".to_owned();
    };
    if inner.host.is_busy(&id) {
        return "A turn is running; /compact once it has ended.".to_owned();
    }
    let toolsets = inner.host.turn_defaults().toolsets;
    match inner.host.agent().compact(&id, &toolsets).await {
        Ok(CompactOutcome::Compacted(s)) => format!(
            "Compacted {} message(s): ~{} → ~{} tokens.",
            s.messages_compacted, s.tokens_before, s.tokens_after
        ),
        Ok(CompactOutcome::NothingToCompact { tokens }) => {
            format!("Nothing to compact yet (~{tokens} tokens).")
        }
        Ok(CompactOutcome::Failed { error }) => {
            format!("The compaction failed; nothing changed: {error}")
        }
        Err(e) => format!("The compaction failed; nothing changed: {e}"),
    }
}
