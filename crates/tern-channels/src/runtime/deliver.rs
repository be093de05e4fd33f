//! The outbound task: everything the channel's sessions send to their chats.
//!
//! Woken by the hook subscriber (a turn started, a tool was called, a turn ended, a wait was
//! created or resolved), by the gateway's inbox when a request leaves its pending list (an
//! MCP server's question has no wait whose end would say so), every 4 s while a turn runs or
//! a send waits to be retried, and once a minute otherwise, it:
//!
//! 1. sends the assistant messages after each session's delivery cursor, split at the
//!    platform's limit, and moves the cursor past each one sent — the answer of any turn,
//!    whoever started it (a chat message, a decision, a background process), reaches the
//!    chat, and a restart resends nothing already sent (a crash between a send and its cursor
//!    update sends that one message again: at-least-once, the best a chat API allows);
//! 2. posts the open requests of its sessions (their waits' and their MCP servers'
//!    elicitations), and edits the settled ones ([`super::posts`]);
//! 3. sends tool progress (per [`ProgressMode`]) and keeps "typing…" alive while a turn runs.
//!
//! A platform that asks to wait (429) is waited for; one that is unreachable leaves the
//! rest for the next round.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{Inner, ProgressMode, Signal, posts};
use crate::platform::{ChatRef, OutFile, OutMessage, PlatformError};

/// How often "typing…" is renewed (Telegram shows it for 5 s) and pending work retried.
const TICK: Duration = Duration::from_secs(4);
/// How often an idle channel looks for work no hook event announced.
const IDLE_TICK: Duration = Duration::from_secs(60);
/// The longest wait a platform's 429 is honoured for in one go.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// How much of a tool's arguments a progress line shows.
const PREVIEW_CHARS: usize = 80;

pub(super) async fn run(inner: Arc<Inner>, mut signals: mpsc::UnboundedReceiver<Signal>) {
    // Sessions with a running turn → the last tool announced in it.
    let mut active: HashMap<String, Option<String>> = HashMap::new();
    // Subscribed once, before the first round, so no decision from then on is missed.
    let mut inbox_changes = inner.host.inbox().map(tern_inbox::Inbox::changes);
    // What an earlier run left unsent goes first; then whether a round left something to
    // send again.
    let mut retry = !flush(&inner).await;
    let mut last_round = tokio::time::Instant::now();
    loop {
        // Idle, the task sleeps until woken: a round every few seconds only while a turn
        // runs (typing…) or a send is to be retried, and a slow one otherwise, for waits
        // opened without a hook event (a gateway restarted under them). Counted from the
        // last round, so signals that make none (a turn started, progress) cannot put the
        // next one off.
        let period = if active.is_empty() && !retry {
            IDLE_TICK
        } else {
            TICK
        };
        tokio::select! {
            () = inner.stop.cancelled() => return,
            () = inner.outbound.notified() => {}
            () = request_settled(&mut inbox_changes) => {}
            s = signals.recv() => {
                let Some(s) = s else { return };
                match s {
                    Signal::TurnStarted(session) => {
                        active.insert(session.clone(), None);
                        if let Some(chat) = inner.route(&session) {
                            let _ = inner.platform.typing(&chat).await;
                        }
                        continue;
                    }
                    Signal::Tool { session, tool, arguments } => {
                        // What the model said before calling the tool comes first.
                        retry = !flush(&inner).await;
                        let last = active.entry(session.clone()).or_default();
                        let show = match inner.settings.progress {
                            ProgressMode::Off => false,
                            ProgressMode::All => true,
                            ProgressMode::New => last.as_deref() != Some(tool.as_str()),
                        };
                        *last = Some(tool.clone());
                        if show && let Some(chat) = inner.route(&session) {
                            let _ = send(&inner, &chat, &progress_line(&tool, &arguments)).await;
                        }
                        continue;
                    }
                    Signal::ToolProgress { session, tool, progress, total } => {
                        // Only in `all`: the other modes show a tool once, not as it runs.
                        if inner.settings.progress == ProgressMode::All
                            && let Some(chat) = inner.route(&session)
                        {
                            let line = tool_progress_line(&tool, progress, total);
                            let _ = send(&inner, &chat, &line).await;
                        }
                        continue;
                    }
                    Signal::TurnEnded(session) => {
                        active.remove(&session);
                    }
                    Signal::RoutesChanged => inner.load_routes().await,
                }
            }
            () = tokio::time::sleep_until(last_round + period) => {
                for session in active.keys() {
                    if let Some(chat) = inner.route(session) {
                        let _ = inner.platform.typing(&chat).await;
                    }
                }
            }
        }
        retry = !flush(&inner).await;
        last_round = tokio::time::Instant::now();
    }
}

/// Returns when a request of the inbox leaves its pending list (or changes were missed);
/// never without an inbox to follow. The changes already queued are taken with it, so a
/// burst of decisions makes one round, not one each.
async fn request_settled(
    changes: &mut Option<tokio::sync::broadcast::Receiver<tern_inbox::review::Change>>,
) {
    use tokio::sync::broadcast::error::RecvError;
    let Some(rx) = changes.as_mut() else {
        return std::future::pending().await;
    };
    loop {
        match rx.recv().await {
            Ok(c) if c.what == tern_inbox::review::ChangeKind::Decided => break,
            Ok(_) => {}
            Err(RecvError::Lagged(_)) => break,
            Err(RecvError::Closed) => {
                *changes = None;
                return std::future::pending().await;
            }
        }
    }
    while rx.try_recv().is_ok() {}
}

/// One round: answers, new requests, settled requests. Whether every answer and file went
/// out (`false`: the platform could not be reached; the rest waits for the next round).
async fn flush(inner: &Inner) -> bool {
    let channel = &inner.settings.name;
    match inner.store.channel_undelivered(channel).await {
        Ok(list) => {
            for m in list {
                let chat = ChatRef {
                    chat_id: m.chat_id.clone(),
                    thread_id: (!m.thread_id.is_empty()).then(|| m.thread_id.clone()),
                };
                match send(inner, &chat, &m.content).await {
                    Ok(()) => {}
                    // The platform will not take it (a deleted chat, a blocked bot): skip it
                    // rather than retry forever.
                    Err(PlatformError::Rejected(e)) => {
                        tracing::warn!(channel, session = %m.session_id, error = %e, "the platform refused a message; skipped");
                    }
                    Err(e) => {
                        tracing::warn!(channel, error = %e, "cannot deliver to the chat; retried later");
                        let _ = inner
                            .store
                            .channel_error(channel, inner.platform_name(), &e.to_string())
                            .await;
                        return false;
                    }
                }
                if let Err(e) = inner.store.channel_delivered(&m.session_id, m.seq).await {
                    tracing::error!(channel, error = %e, "cannot record a delivery");
                    return false;
                }
            }
        }
        Err(e) => tracing::error!(channel, error = %e, "cannot read what to deliver"),
    }
    let files_sent = send_files(inner).await;
    if inner.host.inbox().is_some() {
        match inner.store.channel_posts_unsent(channel).await {
            Ok(list) => {
                for p in list {
                    if posts::is_mcp(&p) {
                        if let (Ok(true), Some(chat)) = (
                            inner.store.mcp_elicitation_pending(&p.request_id).await,
                            inner.route(&p.session_id),
                        ) {
                            posts::post_mcp(inner, &p.session_id, &p.request_id, &chat).await;
                        }
                        continue;
                    }
                    if let (Ok(Some(w)), Some(chat)) = (
                        inner.store.wait(&p.wait_id).await,
                        inner.route(&p.session_id),
                    ) && w.status == tern_store::WaitStatus::Pending
                    {
                        posts::post(inner, &w, &chat).await;
                    }
                }
            }
            Err(e) => tracing::error!(channel, error = %e, "cannot read unsent posts"),
        }
        match inner.store.channel_unposted_waits(channel).await {
            Ok(ids) => {
                for id in ids {
                    if let Ok(Some(w)) = inner.store.wait(&id).await
                        && let Some(chat) = inner.route(&w.session_id)
                    {
                        posts::post(inner, &w, &chat).await;
                    }
                }
            }
            Err(e) => tracing::error!(channel, error = %e, "cannot read the waits to post"),
        }
        match inner.store.channel_unposted_mcp_elicitations(channel).await {
            Ok(list) => {
                for (request_id, session_id) in list {
                    if let Some(chat) = inner.route(&session_id) {
                        posts::post_mcp(inner, &session_id, &request_id, &chat).await;
                    }
                }
            }
            Err(e) => {
                tracing::error!(channel, error = %e, "cannot read the MCP elicitations to post")
            }
        }
    }
    match inner.store.channel_posts_to_settle(channel).await {
        Ok(list) => {
            for p in list {
                posts::settle(inner, &p).await;
            }
        }
        Err(e) => tracing::error!(channel, error = %e, "cannot read the posts to settle"),
    }
    files_sent
}

/// Sends the files `send_file` queued, and removes their copies; whether all went out.
async fn send_files(inner: &Inner) -> bool {
    let channel = &inner.settings.name;
    let files = match inner.store.channel_files_unsent(channel).await {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(channel, error = %e, "cannot read the files to send");
            return false;
        }
    };
    for f in files {
        let chat = ChatRef {
            chat_id: f.chat_id.clone(),
            thread_id: (!f.thread_id.is_empty()).then(|| f.thread_id.clone()),
        };
        let bytes = match tokio::fs::read(&f.path).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(channel, file = f.id, error = %e, "a queued file is gone; skipped");
                let _ = inner.store.channel_file_sent(f.id).await;
                continue;
            }
        };
        let out = OutFile {
            name: f.name.clone(),
            bytes,
            mime_type: None,
            is_image: f.is_image,
            caption: f.caption.clone(),
        };
        match inner.platform.send_file(&chat, &out).await {
            Ok(_) | Err(PlatformError::Rejected(_)) => {
                let _ = inner.store.channel_file_sent(f.id).await;
                let _ = tokio::fs::remove_file(&f.path).await;
            }
            Err(e) => {
                tracing::warn!(channel, error = %e, "cannot send a file to the chat; retried later");
                return false;
            }
        }
    }
    true
}

/// Sends `markdown` split at the platform's limit, waiting out its rate limits.
async fn send(inner: &Inner, chat: &ChatRef, markdown: &str) -> Result<(), PlatformError> {
    // Headroom: the limit counts what the platform shows, which rendering can make a little
    // longer than the markdown (a table's padding, a fallback's "text (url)" links).
    let limit = inner.platform.limits().max_message_chars * 95 / 100;
    for chunk in crate::format::split(markdown, limit) {
        let msg = OutMessage {
            markdown: chunk,
            ..OutMessage::default()
        };
        let mut attempts = 0;
        loop {
            match inner.platform.send(chat, &msg).await {
                Ok(_) => break,
                Err(PlatformError::RetryAfter(d)) if attempts < 5 => {
                    attempts += 1;
                    tracing::info!(channel = %inner.settings.name, retry_after = ?d, "the platform asks to wait");
                    tokio::select! {
                        () = tokio::time::sleep(d.min(MAX_RETRY_AFTER)) => {}
                        () = inner.stop.cancelled() => return Err(PlatformError::Cancelled),
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// "⏳ mcp__srv__build: 3/5" — how far a running tool has got.
fn tool_progress_line(tool: &str, progress: f64, total: Option<f64>) -> String {
    let tool: String = tern_util::text::one_line(tool).chars().take(64).collect();
    let tool = crate::format::escape_markdown(&tool);
    match total {
        Some(t) => format!("⏳ {tool}: {progress}/{t}"),
        None => format!("⏳ {tool}: {progress}"),
    }
}

/// "⚙️ terminal: ls -la" — the tool and the start of its main argument.
fn progress_line(tool: &str, arguments: &str) -> String {
    let args: serde_json::Value = serde_json::from_str(arguments).unwrap_or_default();
    let main = [
        "command", "path", "pattern", "query", "url", "summary", "task",
    ]
    .iter()
    .find_map(|k| args.get(*k).and_then(|v| v.as_str()))
    .map(|s| {
        let line = tern_util::text::one_line(s);
        let mut cut: String = line.chars().take(PREVIEW_CHARS).collect();
        if line.chars().count() > PREVIEW_CHARS {
            cut.push('…');
        }
        cut
    });
    // The tool's name and arguments are the model's: shown as exactly their text.
    let tool: String = tern_util::text::one_line(tool).chars().take(64).collect();
    let tool = crate::format::escape_markdown(&tool);
    match main {
        Some(m) if !m.is_empty() => format!("⚙️ {tool}: {}", crate::format::escape_markdown(&m)),
        _ => format!("⚙️ {tool}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_progress_lines_show_how_far_it_got() {
        assert_eq!(
            crate::format::plain_text(&tool_progress_line("mcp__s__op", 3.0, Some(5.0))),
            "⏳ mcp__s__op: 3/5"
        );
        assert_eq!(
            crate::format::plain_text(&tool_progress_line("op", 0.5, None)),
            "⏳ op: 0.5"
        );
    }

    #[test]
    fn progress_lines_show_the_tool_and_its_main_argument() {
        assert_eq!(
            progress_line("terminal", r#"{"command":"ls -la"}"#),
            "⚙️ terminal: ls \\-la"
        );
        assert_eq!(
            crate::format::plain_text(&progress_line("terminal", r#"{"command":"ls -la"}"#)),
            "⚙️ terminal: ls -la"
        );
        assert_eq!(
            crate::format::plain_text(&progress_line("send_file", r#"{"path":"a_b_c.txt"}"#)),
            "⚙️ send_file: a_b_c.txt"
        );
        assert_eq!(progress_line("todo", "{}"), "⚙️ todo");
        assert_eq!(progress_line("x", "not json"), "⚙️ x");
        let long = progress_line(
            "terminal",
            &format!(r#"{{"command":"{}"}}"#, "a".repeat(500)),
        );
        assert!(long.chars().count() < 100, "{long}");
        let fake_link = progress_line("terminal", r#"{"command":"[click](https://evil.example)"}"#);
        assert!(
            !crate::format::telegram_html(&fake_link).contains("<a "),
            "{fake_link}"
        );
        assert_eq!(
            crate::format::plain_text(&progress_line("a`b\n\n[x](https://e)", "{}")),
            "⚙️ a`b  [x](https://e)"
        );
    }
}
