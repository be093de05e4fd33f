//! Requests for a human, posted to the chat of the session that asked, and decided there.
//!
//! # Flow of a decision by tap
//!
//! 1. A session of this channel opens a wait (`request_approval`, a dangerous command, a
//!    sandbox escalation, an elicitation). The delivery task finds it
//!    ([`Store::channel_unposted_waits`]), records a post, and sends the request with one
//!    button per choice. An MCP server's question, asked in the inbox while the session's
//!    tool call waits for it, has no wait: the gateway records it
//!    ([`Store::mcp_elicitation_asked`]) and it is posted the same way ([`post_mcp`]).
//!    Each button's callback data is signed ([`crate::signing`]) over the
//!    channel, the chat, the post and the choice.
//! 2. A tap comes back as a callback event. Its data is verified (a forged or altered one
//!    decides nothing), the tapping user is checked **on every tap** against who may talk to
//!    the agent and who is mapped to an inbox reviewer, and the request is decided **through
//!    the inbox** as that reviewer — the same decide-once path as the web inbox, so a second
//!    tap, or a tap after a decision elsewhere, gets "already decided by …".
//! 3. The inbox's follower sees the decision and the resumer runs the session's turn; the
//!    delivery task edits the post to show the outcome and who decided
//!    ([`Store::channel_posts_to_settle`]) and sends the resumed turn's answer. An MCP
//!    question resumes nothing: the gateway's elicitor sees the decision and answers the
//!    server, and the inbox's change feed wakes the delivery task, which settles the post
//!    the same way (as it does when the elicitor withdraws the question because the turn
//!    was stopped).
//!
//! Where a platform has no buttons (Matrix), a reaction or a reply to the post stands for
//! a tap; the sender is authenticated by the homeserver, and the same checks apply. An
//! elicitation with one simple field is answered with buttons (yes/no, a choice) or a
//! reply (a number, short text); anything else gets a link to the web inbox.
//!
//! [`Store::channel_unposted_waits`]: tern_store::Store::channel_unposted_waits
//! [`Store::mcp_elicitation_asked`]: tern_store::Store::mcp_elicitation_asked
//! [`Store::channel_posts_to_settle`]: tern_store::Store::channel_posts_to_settle

use serde_json::{Map, Value, json};
use tern_inbox::fields::Field;
use tern_inbox::review::{RequestStatus, RequestView};
use tern_inbox::{InboxError, Outcome, OutcomeType};
use tern_store::channels::{ChannelEvent, ChannelPost, MCP_POST_PREFIX};
use tern_store::{Wait, WaitKind};

use super::Inner;
use super::chat::{StoredMessage, StoredTap, chat_of, send_text};
use crate::format::escape_markdown;
use crate::platform::{Button, ChatRef, OutMessage};
use crate::signing::Tap;

/// Most options of a choice shown as buttons; longer lists go to the web inbox.
const MAX_OPTION_BUTTONS: usize = 8;

/// What a choice does.
#[derive(Debug, Clone, PartialEq)]
enum Action {
    /// Approve, with the reason code that carries a command's scope.
    Approve(Option<&'static str>),
    Reject,
    /// Answer the elicitation's one field with this value.
    Answer(Value),
}

/// One button of a post.
#[derive(Debug, Clone)]
struct Choice {
    /// In the signed callback data: short, `[a-z0-9_]`.
    token: String,
    label: String,
    reaction: Option<&'static str>,
    /// Replies that stand for this choice (lowercase).
    words: Vec<String>,
    action: Action,
}

fn choice(
    token: &str,
    label: &str,
    reaction: &'static str,
    words: &[&str],
    action: Action,
) -> Choice {
    Choice {
        token: token.to_owned(),
        label: label.to_owned(),
        reaction: Some(reaction),
        words: words.iter().map(|w| (*w).to_owned()).collect(),
        action,
    }
}

/// How a request is answered in the chat.
#[derive(Debug, Clone)]
enum Answering {
    Buttons(Vec<Choice>),
    /// By replying to the post with the value of this field.
    Reply(Field),
    /// Only in the web inbox (or `tern inbox`).
    Elsewhere,
}

fn is_escalation(wait: &Wait) -> bool {
    serde_json::from_str::<Value>(&wait.request)
        .ok()
        .and_then(|v| {
            v.get("patternKey")
                .and_then(Value::as_str)
                .map(|k| k == tern_tools::escalation::PATTERN_KEY)
        })
        .unwrap_or(false)
}

/// Whether a post can show the request whole: nothing cut, nothing that would not show as
/// itself. Only then may it be approved (or answered) from the chat; otherwise the chat may
/// only reject it, and the post says where it is shown whole.
fn shows_whole(wait: Option<&Wait>, view: &RequestView) -> bool {
    let visible =
        |t: &str, max: usize| t.chars().count() <= max && !t.chars().any(crate::format::is_hidden);
    let command = wait
        .and_then(|w| serde_json::from_str::<Value>(&w.request).ok())
        .and_then(|v| v.get("command").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_default();
    visible(&command, MAX_COMMAND_CHARS)
        && visible(&view.summary.summary, MAX_SUMMARY_CHARS)
        && view.key_value_context.as_ref().is_none_or(|c| {
            c.len() <= MAX_CONTEXT_ENTRIES
                && c.iter().all(|(k, v)| {
                    visible(k, MAX_TEXT_CHARS)
                        && (matches!(k.as_str(), "command" | "scope" | "action")
                            || visible(v, MAX_TEXT_CHARS))
                })
        })
}

fn answering(kind: &str, wait: Option<&Wait>, view: &RequestView) -> Answering {
    let escalation = wait.is_some_and(is_escalation);
    if !shows_whole(wait, view) {
        return match kind {
            "approval" | "command" => Answering::Buttons(vec![choice(
                "r",
                "Reject",
                "❌",
                &["reject", "rejected", "deny"],
                Action::Reject,
            )]),
            _ => Answering::Elsewhere,
        };
    }
    let approve = |t, l, r, w: &[&str], code| choice(t, l, r, w, Action::Approve(code));
    let reject = choice(
        "r",
        "Reject",
        "❌",
        &["reject", "rejected", "deny"],
        Action::Reject,
    );
    match kind {
        "approval" => Answering::Buttons(vec![
            approve("a", "Approve", "✅", &["approve", "approved"], None),
            reject,
        ]),
        "command" => {
            let mut v = vec![
                approve("o", "Once", "👍", &["once", "approve"], Some("once")),
                approve(
                    "s",
                    "This session",
                    "🔁",
                    &["session", "this session"],
                    Some("session"),
                ),
            ];
            if !escalation {
                v.push(approve("w", "Always", "⭐", &["always"], Some("always")));
            }
            v.push(reject);
            Answering::Buttons(v)
        }
        _ => match view.fields.as_slice() {
            [Field::Switch(_)] => Answering::Buttons(vec![
                choice(
                    "y",
                    "Yes",
                    "✅",
                    &["yes", "y", "true"],
                    Action::Answer(json!(true)),
                ),
                choice(
                    "n",
                    "No",
                    "❌",
                    &["no", "n", "false"],
                    Action::Answer(json!(false)),
                ),
            ]),
            [Field::Select(s)] if s.options.len() <= MAX_OPTION_BUTTONS => Answering::Buttons(
                s.options
                    .iter()
                    .enumerate()
                    .map(|(i, o)| Choice {
                        token: format!("c{i}"),
                        label: o.clone(),
                        reaction: None,
                        words: vec![o.to_lowercase(), (i + 1).to_string()],
                        action: Action::Answer(json!(o)),
                    })
                    .collect(),
            ),
            [f @ (Field::Text(_) | Field::Number(_) | Field::Slider(_))] => {
                Answering::Reply(f.clone())
            }
            _ => Answering::Elsewhere,
        },
    }
}

fn field_id(f: &Field) -> &str {
    match f {
        Field::Text(x) => &x.id,
        Field::TextArea(x) => &x.id,
        Field::Number(x) => &x.id,
        Field::Slider(x) => &x.id,
        Field::Switch(x) => &x.id,
        Field::Select(x) => &x.id,
        Field::Multiselect(x) => &x.id,
        Field::DateField(x) | Field::DateTime(x) | Field::Time(x) => &x.id,
    }
}

fn field_label(f: &Field) -> &str {
    match f {
        Field::Text(x) => &x.label,
        Field::TextArea(x) => &x.label,
        Field::Number(x) => &x.label,
        Field::Slider(x) => &x.label,
        Field::Switch(x) => &x.label,
        Field::Select(x) => &x.label,
        Field::Multiselect(x) => &x.label,
        Field::DateField(x) | Field::DateTime(x) | Field::Time(x) => &x.label,
    }
}

/// The longest command a post shows whole; a longer one is cut, and the post says so.
const MAX_COMMAND_CHARS: usize = 2500;
/// The longest summary a post shows.
const MAX_SUMMARY_CHARS: usize = 500;
/// The longest context key or value a post shows.
const MAX_TEXT_CHARS: usize = 300;
/// The most context entries a post shows.
const MAX_CONTEXT_ENTRIES: usize = 12;

/// `text` cut to `max` characters, with a mark when cut.
fn cut(text: &str, max: usize) -> (String, bool) {
    if text.chars().count() <= max {
        return (text.to_owned(), false);
    }
    let mut t: String = text.chars().take(max).collect();
    t.push('…');
    (t, true)
}

/// The post's text: what is asked, and how to answer here. Everything the agent wrote (the
/// command, the summary, the context) is shown as exactly its text: escaped markdown, the
/// command in a code block no line of it can close — a reviewer sees all of what they approve.
///
/// `wait` is `None` for an MCP elicitation, which has no wait; `kind` is the post's.
fn render(
    inner: &Inner,
    kind: &str,
    wait: Option<&Wait>,
    view: &RequestView,
    how: &Answering,
) -> String {
    let mut truncated = false;
    let (summary, t) = cut(&view.summary.summary, MAX_SUMMARY_CHARS);
    truncated |= t;
    let mut out = match (kind, wait) {
        ("command", Some(wait)) => {
            let asked: Value = serde_json::from_str(&wait.request).unwrap_or(Value::Null);
            let command = asked.get("command").and_then(Value::as_str).unwrap_or("");
            let (command, t) = cut(command, MAX_COMMAND_CHARS);
            truncated |= t;
            let title = if is_escalation(wait) {
                "Run outside the sandbox?"
            } else {
                "Run a dangerous command?"
            };
            format!("**{title}**\n\n{}", crate::format::code_block(&command))
        }
        ("elicitation", _) => format!("**Question**: {}", escape_markdown(&summary)),
        _ => format!("**Approval needed**: {}", escape_markdown(&summary)),
    };
    if let Some(ctx) = &view.key_value_context {
        truncated |= ctx.len() > MAX_CONTEXT_ENTRIES;
        for (k, v) in ctx.iter().take(MAX_CONTEXT_ENTRIES) {
            if matches!(k.as_str(), "command" | "scope" | "action") {
                continue;
            }
            let (k, t) = cut(k, MAX_TEXT_CHARS);
            truncated |= t;
            let (v, t) = cut(v, MAX_TEXT_CHARS);
            truncated |= t;
            out.push_str(&format!(
                "\n• {}: {}",
                escape_markdown(&k),
                escape_markdown(&v)
            ));
        }
    }
    for f in &view.fields {
        out.push_str(&format!("\n• {}", escape_markdown(field_label(f))));
    }
    if truncated || !shows_whole(wait, view) {
        out.push_str(
            "\n\nPart of this request is not shown here (too long, or characters that do not \
             show): it can only be rejected from this chat; the inbox shows it whole",
        );
        match inner.host.inbox_link(&view.summary.id) {
            Some(link) => out.push_str(&format!(": {link}")),
            None => out.push_str(" (`tern inbox`)."),
        }
    }
    match how {
        Answering::Buttons(_) => {}
        Answering::Reply(f) => out.push_str(&format!(
            "\n\nReply to this message with the {}.",
            escape_markdown(&field_label(f).to_lowercase())
        )),
        Answering::Elsewhere => {
            out.push_str("\n\nAnswer it in the web inbox");
            match inner.host.inbox_link(&view.summary.id) {
                Some(link) => out.push_str(&format!(": {link}")),
                None => out.push_str(" or with `tern inbox`."),
            }
        }
    }
    out
}

/// Posts a wait's request to the chat of its session.
pub(super) async fn post(inner: &Inner, wait: &Wait, chat: &ChatRef) {
    let Some(request_id) = wait.request_id.clone() else {
        return;
    };
    let record = ChannelPost {
        id: 0,
        channel: inner.settings.name.clone(),
        chat_id: chat.chat_id.clone(),
        thread_id: chat.thread_id.clone().unwrap_or_default(),
        session_id: wait.session_id.clone(),
        wait_id: wait.id.clone(),
        request_id,
        kind: wait.kind.as_str().to_owned(),
        message_id: None,
        status: "open".into(),
        created_at: 0,
    };
    post_request(inner, record, Some(wait), chat).await;
}

/// Posts an MCP server's question, asked in the inbox for `session_id` while one of its tool
/// calls waits for the answer (`tern-gateway`'s `InboxElicitor`), to the session's chat.
///
/// Such a question is an inbox elicitation request like an `inbox` tool's, only without a
/// wait (nothing resumes the session later: the answer goes to the call holding it open),
/// so it is posted, answered and settled the same way; the store's `mcp_elicitations`
/// stands in for the wait: the post is open while the gateway still waits for the answer.
pub(super) async fn post_mcp(inner: &Inner, session_id: &str, request_id: &str, chat: &ChatRef) {
    let record = ChannelPost {
        id: 0,
        channel: inner.settings.name.clone(),
        chat_id: chat.chat_id.clone(),
        thread_id: chat.thread_id.clone().unwrap_or_default(),
        session_id: session_id.to_owned(),
        wait_id: format!("{MCP_POST_PREFIX}{request_id}"),
        request_id: request_id.to_owned(),
        kind: WaitKind::Elicitation.as_str().to_owned(),
        message_id: None,
        status: "open".into(),
        created_at: 0,
    };
    post_request(inner, record, None, chat).await;
}

/// Records and sends a post of `record`'s request (of `wait`, when it has one).
async fn post_request(inner: &Inner, record: ChannelPost, wait: Option<&Wait>, chat: &ChatRef) {
    let request_id = record.request_id.clone();
    let Some(inbox) = inner.host.inbox() else {
        return;
    };
    let view = match inbox.request_view(&request_id).await {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(request = %request_id, error = %e, "cannot read a request to post it");
            return;
        }
    };
    let post = match inner.store.channel_post_create(&record).await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(request = %request_id, error = %e, "cannot record a post");
            return;
        }
    };
    if post.message_id.is_some() {
        return;
    }
    let how = answering(&post.kind, wait, &view);
    let buttons = match &how {
        Answering::Buttons(choices) => vec![
            choices
                .iter()
                .map(|c| Button {
                    label: c.label.clone(),
                    data: inner.key.sign(
                        &inner.settings.name,
                        &chat.chat_id,
                        &Tap {
                            post_id: post.id,
                            choice: c.token.clone(),
                        },
                    ),
                    reaction: c.reaction.map(str::to_owned),
                })
                .collect(),
        ],
        _ => Vec::new(),
    };
    let msg = OutMessage {
        markdown: render(inner, &post.kind, wait, &view, &how),
        buttons,
        reply_to: None,
    };
    match inner.platform.send(chat, &msg).await {
        Ok(id) => {
            if let Err(e) = inner.store.channel_post_sent(post.id, &id).await {
                tracing::warn!(post = post.id, error = %e, "cannot record a sent post");
            }
        }
        Err(crate::platform::PlatformError::Rejected(e)) => {
            // Not sent again and again: the request stays in the inbox.
            tracing::warn!(channel = %inner.settings.name, request = %request_id, error = %e, "the platform refused a post; the request is decided in the inbox");
            let _ = inner.store.channel_post_settled(post.id).await;
        }
        Err(e) => {
            tracing::warn!(channel = %inner.settings.name, request = %request_id, error = %e, "cannot post a request to the chat; retried later")
        }
    }
}

/// Whether the post is of an MCP elicitation (no wait).
pub(super) fn is_mcp(post: &ChannelPost) -> bool {
    post.wait_id.starts_with(MCP_POST_PREFIX)
}

/// The line that says how a settled request ended.
fn outcome_line(view: &RequestView) -> String {
    let by = view.summary.decided_by.as_deref().unwrap_or("someone");
    match view.summary.status {
        RequestStatus::Decided => {
            let scope = view
                .result
                .as_ref()
                .and_then(|r| r.pointer("/outcome/reasonCode"))
                .and_then(Value::as_str)
                .map(|s| format!(" ({s})"))
                .unwrap_or_default();
            match view.summary.outcome {
                Some(OutcomeType::Reject) => format!("❌ Rejected by {by}"),
                Some(_) => format!("✅ Approved by {by}{scope}"),
                None => {
                    let answers = view
                        .result
                        .as_ref()
                        .and_then(|r| r.get("fields"))
                        .map(|f| format!(": {f}"))
                        .unwrap_or_default();
                    format!("✅ Answered by {by}{answers}")
                }
            }
        }
        RequestStatus::Withdrawn => "Withdrawn: no longer needed.".to_owned(),
        RequestStatus::Expired => "⌛ Expired without a decision.".to_owned(),
        RequestStatus::Pending => "Pending.".to_owned(),
    }
}

/// Edits a settled post to show the outcome and who decided, without its buttons.
pub(super) async fn settle(inner: &Inner, post: &ChannelPost) {
    let Some(message_id) = &post.message_id else {
        return;
    };
    let Some(inbox) = inner.host.inbox() else {
        let _ = inner.store.channel_post_settled(post.id).await;
        return;
    };
    let view = match inbox.request_view(&post.request_id).await {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(post = post.id, error = %e, "cannot read a settled request");
            let _ = inner.store.channel_post_settled(post.id).await;
            return;
        }
    };
    if view.summary.status == RequestStatus::Pending {
        // An MCP question stays open until its request is answered, dismissed, withdrawn
        // or expired: the inbox's change feed wakes the channel then.
        if !is_mcp(post) {
            // The wait ended without the request (the session was deleted): leave the post.
            let _ = inner.store.channel_post_settled(post.id).await;
        }
        return;
    }
    let wait = inner.store.wait(&post.wait_id).await.ok().flatten();
    let body = if wait.is_some() || is_mcp(post) {
        render(
            inner,
            &post.kind,
            wait.as_ref(),
            &view,
            &Answering::Buttons(Vec::new()),
        )
    } else {
        escape_markdown(&cut(&view.summary.summary, MAX_SUMMARY_CHARS).0)
    };
    let chat = ChatRef {
        chat_id: post.chat_id.clone(),
        thread_id: (!post.thread_id.is_empty()).then(|| post.thread_id.clone()),
    };
    let msg = OutMessage {
        markdown: format!("{body}\n\n{}", outcome_line(&view)),
        buttons: Vec::new(),
        reply_to: None,
    };
    match inner.platform.edit(&chat, message_id, &msg).await {
        Ok(()) => {
            let _ = inner.store.channel_post_settled(post.id).await;
        }
        Err(crate::platform::PlatformError::Rejected(e)) => {
            tracing::warn!(post = post.id, error = %e, "the platform refused to edit a post");
            let _ = inner.store.channel_post_settled(post.id).await;
        }
        Err(e) => tracing::warn!(post = post.id, error = %e, "cannot edit a post; retried later"),
    }
}

/// The inbox reviewer a chat user decides as: the channel's `reviewers`, else their pairing's.
async fn reviewer_of(inner: &Inner, user_id: &str) -> Option<String> {
    let name = match inner.settings.reviewers.get(user_id) {
        Some(n) => Some(n.clone()),
        None => inner
            .store
            .pairing_reviewer(inner.platform_name(), user_id)
            .await
            .ok()
            .flatten(),
    }?;
    let inbox = inner.host.inbox()?;
    // A reviewer removed from the inbox decides nothing any more.
    match inbox.reviewers().get(&name).await {
        Ok(Some(_)) => Some(name),
        _ => None,
    }
}

/// A tap on a button, or a reaction to a post.
pub(super) async fn tap(inner: &Inner, ev: &ChannelEvent, stored: &StoredTap) {
    let callback = stored.callback_id.as_deref();
    let answer = |text: String| async move {
        match callback {
            Some(id) => {
                let _ = inner.platform.answer_callback(id, Some(&text)).await;
            }
            None => send_text(inner, &chat_of(ev), &text).await,
        }
    };
    let (post, token) = match (&stored.data, &stored.key) {
        (Some(data), _) => match inner.key.verify(&inner.settings.name, &ev.chat_id, data) {
            Ok(t) => match inner.store.channel_post(t.post_id).await {
                Ok(Some(p)) => (p, t.choice),
                _ => {
                    answer("This request is not known here.".into()).await;
                    return;
                }
            },
            Err(e) => {
                tracing::warn!(channel = %inner.settings.name, user = %ev.user_id, error = %e, "a tap with callback data that does not verify: ignored");
                answer("This button is not valid.".into()).await;
                return;
            }
        },
        (None, Some(key)) => {
            let Ok(Some(post)) = inner
                .store
                .channel_post_by_message(&inner.settings.name, &ev.chat_id, &stored.message_id)
                .await
            else {
                return; // a reaction to any other message
            };
            let Some(how) = how_of(inner, &post).await else {
                return;
            };
            let Answering::Buttons(choices) = how else {
                return;
            };
            let key = key.trim_end_matches('\u{fe0f}');
            let Some(c) = choices
                .iter()
                .find(|c| c.reaction.map(|r| r.trim_end_matches('\u{fe0f}')) == Some(key))
            else {
                return;
            };
            (post, c.token.clone())
        }
        (None, None) => return,
    };
    let notice = decide(inner, ev, &post, Pick::Token(&token)).await;
    answer(notice).await;
}

/// A reply to a posted request: its answer. Whether the message was one.
pub(super) async fn reply(inner: &Inner, ev: &ChannelEvent, msg: &StoredMessage) -> bool {
    let Some(reply_to) = &msg.reply_to else {
        return false;
    };
    let Ok(Some(post)) = inner
        .store
        .channel_post_by_message(&inner.settings.name, &ev.chat_id, reply_to)
        .await
    else {
        return false;
    };
    let notice = decide(inner, ev, &post, Pick::Text(msg.text.trim())).await;
    send_text(inner, &chat_of(ev), &notice).await;
    true
}

enum Pick<'a> {
    Token(&'a str),
    Text(&'a str),
}

async fn how_of(inner: &Inner, post: &ChannelPost) -> Option<Answering> {
    let view = inner
        .host
        .inbox()?
        .request_view(&post.request_id)
        .await
        .ok()?;
    let wait = inner.store.wait(&post.wait_id).await.ok().flatten();
    Some(answering(&post.kind, wait.as_ref(), &view))
}

/// Decides a post's request as the chat user, through the inbox; what to tell them.
async fn decide(inner: &Inner, ev: &ChannelEvent, post: &ChannelPost, pick: Pick<'_>) -> String {
    if post.channel != inner.settings.name || post.chat_id != ev.chat_id {
        return "This request is not known here.".into();
    }
    if !inner.is_allowed(&ev.user_id).await {
        tracing::warn!(channel = %inner.settings.name, user = %ev.user_id, "a decision from a user who may not talk to the agent: refused");
        return "You may not decide this.".into();
    }
    let Some(reviewer) = reviewer_of(inner, &ev.user_id).await else {
        tracing::warn!(channel = %inner.settings.name, user = %ev.user_id, "a decision from a user who is not mapped to an inbox reviewer: refused");
        return "Only reviewers decide requests. The owner can make you one: `tern pairing approve … --reviewer NAME`, or `reviewers` in the channel's configuration.".into();
    };
    let Some(inbox) = inner.host.inbox() else {
        return "Requests are decided in the inbox this gateway uses.".into();
    };
    let view = match inbox.request_view(&post.request_id).await {
        Ok(v) => v,
        Err(e) => return format!("Cannot read the request: {e}"),
    };
    let wait = inner.store.wait(&post.wait_id).await.ok().flatten();
    let how = answering(&post.kind, wait.as_ref(), &view);
    let action = match (&how, pick) {
        (Answering::Buttons(cs), Pick::Token(t)) => cs.iter().find(|c| c.token == t),
        (Answering::Buttons(cs), Pick::Text(text)) => {
            let text = text.to_lowercase();
            match cs.iter().find(|c| c.words.contains(&text)) {
                Some(c) => Some(c),
                None => {
                    let words: Vec<&str> = cs
                        .iter()
                        .filter_map(|c| c.words.first().map(String::as_str))
                        .collect();
                    return format!("Reply with one of: {}.", words.join(", "));
                }
            }
        }
        (Answering::Reply(f), Pick::Text(text)) => {
            let value = match f {
                Field::Number(_) | Field::Slider(_) => match text.parse::<f64>() {
                    Ok(n) => json!(n),
                    Err(_) => return "Reply with a number.".into(),
                },
                _ => json!(text),
            };
            return answer(inbox, &post.request_id, field_id(f), value, &reviewer).await;
        }
        _ => None,
    };
    let Some(c) = action else {
        return "This button is not valid.".into();
    };
    let result = match &c.action {
        Action::Approve(code) => {
            let mut o = Outcome::new(OutcomeType::Approve);
            o.reason_code = code.map(str::to_owned);
            inbox
                .decide_approval(&post.request_id, o, &reviewer)
                .await
                .map(|_| ())
        }
        Action::Reject => inbox
            .decide_approval(
                &post.request_id,
                Outcome::new(OutcomeType::Reject),
                &reviewer,
            )
            .await
            .map(|_| ()),
        Action::Answer(v) => {
            let Some(f) = view.fields.first() else {
                return "This request has nothing to answer.".into();
            };
            return answer(inbox, &post.request_id, field_id(f), v.clone(), &reviewer).await;
        }
    };
    settled(inner, inbox, &post.request_id, result, &c.label, &reviewer).await
}

async fn answer(
    inbox: &tern_inbox::Inbox,
    request_id: &str,
    field: &str,
    value: Value,
    reviewer: &str,
) -> String {
    let mut answers = Map::new();
    answers.insert(field.to_owned(), value);
    match inbox
        .answer_elicitation(request_id, &answers, reviewer)
        .await
    {
        Ok(_) => {
            tracing::info!(request = %request_id, reviewer, "elicitation answered from a chat");
            "Answered.".into()
        }
        Err(InboxError::InvalidAnswers(problems)) => format!(
            "That answer does not fit: {}",
            serde_json::to_string(&problems).unwrap_or_default()
        ),
        Err(e) => refused(inbox, request_id, e).await,
    }
}

async fn settled(
    inner: &Inner,
    inbox: &tern_inbox::Inbox,
    request_id: &str,
    result: Result<(), InboxError>,
    label: &str,
    reviewer: &str,
) -> String {
    match result {
        Ok(()) => {
            tracing::info!(request = %request_id, reviewer, choice = label, "decided from a chat");
            inner.wake_outbound();
            format!("{label}: done.")
        }
        Err(e) => refused(inbox, request_id, e).await,
    }
}

async fn refused(inbox: &tern_inbox::Inbox, request_id: &str, e: InboxError) -> String {
    match e {
        InboxError::AlreadyDecided => match inbox.request_view(request_id).await {
            Ok(v) => match (v.summary.status, v.summary.decided_by) {
                (RequestStatus::Decided, Some(by)) => format!("Already decided by {by}."),
                (RequestStatus::Expired, _) => "This request has expired.".into(),
                (RequestStatus::Withdrawn, _) => "This request was withdrawn.".into(),
                _ => "Already decided.".into(),
            },
            Err(_) => "Already decided.".into(),
        },
        InboxError::Withdrawn(_) => "This request was withdrawn.".into(),
        other => format!("Could not decide: {other}"),
    }
}
