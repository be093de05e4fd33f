//! The inbound loop: long-poll the platform, answer strangers with a pairing code, record the
//! rest with the cursor in one transaction, wake the dispatcher.
//!
//! Failures never end the loop: a refused token, an unreachable API or a 409 from a second
//! poller are logged once per change (and kept for `tern channels status`) and retried with a
//! growing delay; the rest of the gateway carries on.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tern_store::channels::NewChannelEvent;
use tern_util::Backoff;

use super::Inner;
use crate::pairing::CodeRequest;
use crate::platform::{Event, EventKind, OutMessage, PlatformError};

/// Delays between failed polls: from 1 s up to 5 minutes.
const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(300));
/// A refused token is not going to fix itself soon: retry every 10 minutes at most.
const RETRY_UNAUTHORIZED: Backoff = Backoff::new(Duration::from_secs(30), Duration::from_secs(600));

pub(super) async fn run(inner: Arc<Inner>) {
    let channel = inner.settings.name.clone();
    let mut failures: u32 = 0;
    let mut last_error: Option<String> = None;
    loop {
        if inner.stop.is_cancelled() {
            return;
        }
        let cursor = match inner.store.channel_cursor(&channel).await {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(channel, error = %e, "cannot read the channel's cursor");
                if sleep(&inner, RETRY.delay(failures)).await {
                    return;
                }
                failures = failures.saturating_add(1);
                continue;
            }
        };
        let polled = inner.platform.poll(cursor.as_deref(), &inner.stop).await;
        let batch = match polled {
            Ok(b) => b,
            Err(PlatformError::Cancelled) => return,
            Err(e) => {
                let delay = match &e {
                    PlatformError::RetryAfter(d) => *d,
                    PlatformError::Unauthorized(_) => RETRY_UNAUTHORIZED.delay(failures),
                    _ => RETRY.delay(failures),
                };
                let text = e.to_string();
                if last_error.as_deref() != Some(text.as_str()) {
                    tracing::error!(channel, platform = inner.platform_name(), error = %text, retry_in = ?delay, "the channel cannot poll its platform");
                    let _ = inner
                        .store
                        .channel_error(&channel, inner.platform_name(), &text)
                        .await;
                    last_error = Some(text);
                }
                failures = failures.saturating_add(1);
                if sleep(&inner, delay).await {
                    return;
                }
                continue;
            }
        };
        if last_error.take().is_some() {
            tracing::info!(
                channel,
                platform = inner.platform_name(),
                "the channel polls its platform again"
            );
        }
        failures = 0;
        if batch.events.is_empty() && batch.next_cursor.is_none() {
            continue;
        }
        let mut kept = Vec::new();
        let mut strangers = Vec::new();
        let mut checked = Ok(());
        for event in &batch.events {
            match inner.check_allowed(&event.user.id).await {
                Ok(true) => kept.push(event),
                Ok(false) => strangers.push(event.clone()),
                Err(e) => {
                    checked = Err(e);
                    break;
                }
            }
        }
        if let Err(e) = checked {
            // Nothing committed: the same events come again with the next poll.
            tracing::error!(channel, error = %e, "cannot check who may talk to the agent");
            failures = failures.saturating_add(1);
            if sleep(&inner, RETRY.delay(failures)).await {
                return;
            }
            continue;
        }
        for event in strangers {
            answer_stranger(&inner, event);
        }
        let payloads: Vec<(String, &Event)> = kept.iter().map(|e| (payload(&e.kind), *e)).collect();
        let rows: Vec<NewChannelEvent<'_>> = payloads
            .iter()
            .map(|(p, e)| NewChannelEvent {
                key: &e.key,
                chat_id: &e.chat.chat_id,
                thread_id: e.chat.thread_id.as_deref().unwrap_or(""),
                user_id: &e.user.id,
                user_name: &e.user.name,
                kind: kind_name(&e.kind),
                payload: p,
            })
            .collect();
        match inner
            .store
            .channel_record(
                &channel,
                inner.platform_name(),
                &rows,
                batch.next_cursor.as_deref(),
            )
            .await
        {
            Ok(new) if !new.is_empty() => inner.events.notify_one(),
            Ok(_) => {}
            Err(e) => {
                // Nothing was committed: the next poll gets the same events again.
                tracing::error!(channel, error = %e, "cannot record the channel's events");
                failures = failures.saturating_add(1);
                if sleep(&inner, RETRY.delay(failures)).await {
                    return;
                }
            }
        }
    }
}

/// Sleeps `d`; whether the channel was stopped meanwhile.
async fn sleep(inner: &Inner, d: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(d) => false,
        () = inner.stop.cancelled() => true,
    }
}

pub(super) fn kind_name(kind: &EventKind) -> &'static str {
    match kind {
        EventKind::Message { .. } => "message",
        EventKind::Callback { .. } => "callback",
        EventKind::Reaction { .. } => "reaction",
    }
}

/// The event's particulars as stored (see [`super::dispatch::Stored`]).
fn payload(kind: &EventKind) -> String {
    let v = match kind {
        EventKind::Message {
            message_id,
            text,
            files,
            reply_to,
        } => json!({
            "message_id": message_id,
            "text": text,
            "reply_to": reply_to,
            "files": files.iter().map(|f| json!({
                "id": f.id, "name": f.name, "mime_type": f.mime_type,
                "is_image": f.is_image, "size": f.size,
            })).collect::<Vec<_>>(),
        }),
        EventKind::Callback {
            callback_id,
            message_id,
            data,
        } => json!({ "callback_id": callback_id, "message_id": message_id, "data": data }),
        EventKind::Reaction { message_id, key } => json!({ "message_id": message_id, "key": key }),
    };
    v.to_string()
}

/// How long a stranger who got no new code is not told so again.
const STRANGER_QUIET_MS: i64 = 10 * 60 * 1000;
/// Strangers remembered at most (the map is cleared past it).
const MAX_STRANGERS: usize = 10_000;

/// Answers a stranger off the poll loop, so a flood of them cannot delay allowed users; with
/// every reply slot taken, the message is dropped unanswered.
fn answer_stranger(inner: &Arc<Inner>, event: Event) {
    let Ok(permit) = inner.stranger_slots.clone().try_acquire_owned() else {
        tracing::debug!(channel = %inner.settings.name, "too many strangers at once; one is not answered");
        return;
    };
    let inner2 = inner.clone();
    inner.tasks.spawn(async move {
        stranger(&inner2, &event).await;
        drop(permit);
    });
}

/// A display name as shown in logs and `tern pairing list`: no control characters (a newline
/// could fake a row) and no bidirectional overrides.
fn clean_name(name: &str) -> String {
    name.chars()
        .filter(|c| {
            !c.is_control()
                && !matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .take(64)
        .collect()
}

/// Whether the stranger was told something in the last window (and marks them told now).
fn told_lately(inner: &Inner, user: &str, now: i64) -> bool {
    let mut map = inner.strangers.lock().unwrap_or_else(|e| e.into_inner());
    if map.len() > MAX_STRANGERS {
        map.clear();
    }
    match map.get(user) {
        Some(at) if now - at < STRANGER_QUIET_MS => true,
        _ => {
            map.insert(user.to_owned(), now);
            false
        }
    }
}

/// Someone who may not talk to the agent: a pairing code (a new one at most every 10 minutes,
/// the pairing rules say), or why none — told once per window, so a flood of messages gets
/// at most two answers in 10 minutes — and nothing stored of what they sent. A tap from them is answered and does nothing.
async fn stranger(inner: &Inner, event: &Event) {
    let platform = inner.platform_name();
    match &event.kind {
        EventKind::Callback { callback_id, .. } => {
            tracing::warn!(channel = %inner.settings.name, user = %event.user.id, "a tap from a user who may not talk to the agent: ignored");
            let _ = inner
                .platform
                .answer_callback(callback_id, Some("You may not decide this."))
                .await;
            return;
        }
        EventKind::Reaction { .. } => return,
        EventKind::Message { .. } => {}
    }
    let now = tern_util::now_ms();
    let name = clean_name(&event.user.name);
    let text = match inner
        .pairing
        .request(platform, &event.user.id, &name, now)
        .await
    {
        Ok(CodeRequest::Issued { code, .. }) => {
            tracing::info!(channel = %inner.settings.name, user = %event.user.id, name = %name, "a pairing code was issued");
            format!(
                "I don't know you yet. Ask the owner to run:\n\n`tern pairing approve {platform} {code}`\n\nThe code is valid for 1 hour."
            )
        }
        Ok(_) if told_lately(inner, &event.user.id, now) => return,
        Ok(CodeRequest::RateLimited { retry_at }) => format!(
            "A pairing code was sent to you already; ask the owner to approve it, or ask for a new one after {}.",
            crate::runtime::commands::utc(retry_at)
        ),
        Ok(CodeRequest::PlatformFull) => {
            "Too many people are waiting to be approved here; try again later.".to_owned()
        }
        Ok(CodeRequest::LockedOut { until }) => format!(
            "Pairing is paused after too many failed approvals; try again after {}.",
            crate::runtime::commands::utc(until)
        ),
        Ok(CodeRequest::AlreadyApproved) => return,
        Err(e) => {
            tracing::warn!(channel = %inner.settings.name, error = %e, "cannot issue a pairing code");
            return;
        }
    };
    let msg = OutMessage {
        markdown: text,
        ..OutMessage::default()
    };
    if let Err(e) = inner.platform.send(&event.chat, &msg).await {
        tracing::warn!(channel = %inner.settings.name, error = %e, "cannot send a pairing code");
    }
}
