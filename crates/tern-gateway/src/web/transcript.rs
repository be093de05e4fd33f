//! A session's conversation as a reviewer reads it: read-only, oldest first — what the
//! user said, what the agent answered and which tools it called with what, and the tools'
//! results (long ones cut, with a note). The system prompt is left out. Which sessions may
//! be shown is decided by the route (`mod.rs`).

use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use tern_inbox::Timestamp;
use tern_llm::Role;
use tern_store::{Message, Session};

use super::layout::{Nav, Page, when};

/// A tool's result or a call's arguments longer than this are cut in the middle.
const MAX_SHOWN_CHARS: usize = 4000;

/// The session's title, or `Session <first 8 characters of its id>` without one.
pub(super) fn session_title(s: &Session) -> String {
    match s.title.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
        Some(t) => t.to_owned(),
        None => format!("Session {}", s.id.chars().take(8).collect::<String>()),
    }
}

pub(super) fn page(
    session: &Session,
    messages: &[Message],
    pending: u64,
    reviewer: &str,
    csrf: &str,
) -> Response {
    let title = session_title(session);
    let shown: Vec<&Message> = messages.iter().filter(|m| m.role != Role::System).collect();
    let body = html! {
        p.small { a href="/inbox" { "← Inbox" } }
        h1 { (title) }
        p.meta.muted.small {
            "Conversation of session " code { (session.id) }
            " · started " (when(&Timestamp::from_unix_millis(session.created_at)))
            " · read-only"
        }
        @if shown.is_empty() {
            div.card.empty { "No messages yet." }
        } @else {
            ol.transcript {
                @for m in &shown {
                    (message(m))
                }
            }
        }
    };
    Page {
        title: &title,
        nav: Nav::None,
        reviewer: Some(reviewer),
        csrf: Some(csrf),
        pending: Some(pending),
        body,
        script: None,
    }
    .render(StatusCode::OK)
}

fn message(m: &Message) -> Markup {
    let (class, who) = match m.role {
        Role::User => ("user", "User".to_owned()),
        Role::Assistant => ("assistant", "Agent".to_owned()),
        Role::Tool => (
            "tool",
            format!("Result of {}", m.tool_name.as_deref().unwrap_or("a tool")),
        ),
        Role::System => ("system", "System".to_owned()),
    };
    let text = m
        .content
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty());
    html! {
        li.(class) id={"m" (m.seq)} {
            div.head {
                span.who { (who) }
                span.when { (when(&Timestamp::from_unix_millis(m.created_at))) }
            }
            @if let Some(t) = text {
                @if m.role == Role::Tool { pre.said { (cut(t)) } } @else { p.said { (t) } }
            }
            @for call in &m.tool_calls {
                div.call {
                    span.small { "Calls " strong { (call.function.name) } }
                    pre.said { (cut(&call.function.arguments)) }
                }
            }
        }
    }
}

/// `text` cut in the middle when longer than [`MAX_SHOWN_CHARS`], saying how much is left out.
fn cut(text: &str) -> String {
    let n = text.chars().count();
    if n <= MAX_SHOWN_CHARS {
        return text.to_owned();
    }
    let half = MAX_SHOWN_CHARS / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(n - half).collect();
    format!("{head}\n… {} characters left out …\n{tail}", n - 2 * half)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_in_the_middle() {
        let long = "a".repeat(MAX_SHOWN_CHARS) + &"b".repeat(10);
        let c = cut(&long);
        assert!(c.starts_with('a') && c.ends_with('b'), "{c}");
        assert!(c.contains("10 characters left out"), "{c}");
        assert_eq!(cut("short"), "short");
    }
}
