//! An OpenAI-compatible chat-completions client.
//!
//! Flow: [`Client::chat`] sends one request (streaming or not) → on 429, 5xx, a timeout or a
//! connection error it retries with exponential backoff (honouring `Retry-After`) up to
//! `max_retries` times, but only until the first streamed byte has been handed on → the
//! answer is assembled into one [`ChatResponse`]: text, reasoning, tool calls (several per
//! response) and token usage when the server reports it.
//!
//! Real servers differ; this client tolerates a missing `usage`, reasoning under either
//! `reasoning_content` or `reasoning`, and tool-call arguments that are not valid JSON (they
//! are kept as the raw string; the agent answers the model with a tool error).

mod client;
mod sse;
mod types;

pub use client::{Client, ClientConfig, StreamEvent};
pub use types::*;

/// Errors of a model call, after retries.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("the model endpoint answered HTTP {status}: {body}")]
    Http { status: u16, body: String },
    /// The text names every cause: reqwest's own says only "error sending request for url
    /// (…)" — the URL again — and leaves "connection refused" or a DNS failure to its sources.
    #[error("could not reach the model endpoint {url}: {}", causes(source))]
    Connect {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the model endpoint did not answer within {secs} s")]
    Timeout { secs: u64 },
    #[error("the model endpoint sent an answer tern cannot read: {0}")]
    Decode(String),
    #[error("invalid model client configuration: {0}")]
    Config(String),
}

/// `e` and its sources, `: `-separated, skipping a source whose text is already in the
/// message (many errors repeat their source in their own text).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}

/// What went wrong under a reqwest error: its sources, or its own text when it has none.
fn causes(e: &reqwest::Error) -> String {
    match std::error::Error::source(e) {
        Some(s) => error_chain(s),
        None => e.to_string(),
    }
}

impl LlmError {
    /// Whether a retry may help.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Http { status, .. } => *status == 429 || *status >= 500,
            LlmError::Connect { .. } | LlmError::Timeout { .. } => true,
            LlmError::Decode(_) | LlmError::Config(_) => false,
        }
    }
}
