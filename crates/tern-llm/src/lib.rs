//! An OpenAI-compatible chat-completions client.
//!
//! Flow: [`Client::chat`] sends one request (streaming or not) → on 429, 5xx, a timeout, a
//! connection error or a stream the server broke off (an error event, or no `[DONE]` and no
//! finish reason) it retries with exponential backoff (honouring `Retry-After`) up to
//! `max_retries` times; a retry after streamed text was handed on is preceded by
//! [`StreamEvent::Discard`], so the consumer drops the partial answer instead of showing it
//! twice; a 500 that says the model's output did not parse is retried once even with
//! `max_retries = 0` → the answer is assembled into one [`ChatResponse`]: text, reasoning,
//! tool calls (several per response) and token usage when the server reports it.
//!
//! [`LlmError::is_context_overflow`] tells a prompt the model's window cannot hold from other
//! errors (see `classify`), and [`Client::context_length`] asks the server for that window.
//!
//! Real servers differ; this client tolerates a missing `usage`, reasoning under either
//! `reasoning_content` or `reasoning`, and tool-call arguments that are not valid JSON (they
//! are kept as the raw string; the agent answers the model with a tool error).

mod classify;
mod client;
mod discover;
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
    /// The server broke off a streamed answer: an error event in the stream (`data:
    /// {"error": …}`, as llama.cpp sends when the output breaks its tool-call grammar), or
    /// the end of the stream before `[DONE]` and before any finish reason.
    #[error("the model endpoint broke off its answer: {message}")]
    Stream { message: String },
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
            // The same prompt overflows again; anything else that broke a stream may not.
            LlmError::Stream { .. } => !self.is_context_overflow(),
            LlmError::Decode(_) | LlmError::Config(_) => false,
        }
    }

    /// Whether the prompt did not fit the model's context window: a 400 or 413 (or the 500
    /// some Ollama versions send) with the code `context_length_exceeded` or one of the texts
    /// OpenAI, vLLM, llama.cpp, Ollama, OpenRouter and Anthropic-compatible servers use, or
    /// such an error in a stream. The caller can shorten the transcript and try again.
    pub fn is_context_overflow(&self) -> bool {
        match self {
            LlmError::Http {
                status: 400 | 413 | 500,
                body,
            } => classify::says_context_overflow(body),
            LlmError::Stream { message } => classify::says_context_overflow(message),
            _ => false,
        }
    }

    /// Whether the server says the model's output did not parse (llama.cpp's "Failed to
    /// parse input at pos …" when output breaks its tool-call grammar, vLLM's tool parser
    /// errors): a 500 or a stream error. Sampling again usually gives parsable output, so
    /// [`Client::chat`] retries it once even when `max_retries` is 0.
    pub fn is_output_parse_failure(&self) -> bool {
        match self {
            LlmError::Http { status: 500, body } => classify::says_parse_failure(body),
            LlmError::Stream { message } => classify::says_parse_failure(message),
            _ => false,
        }
    }
}
