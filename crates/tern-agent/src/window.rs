//! Window accounting: how large the prompt of the next model call is, against the model's
//! context window and the compaction threshold.
//!
//! The size is the server's own count where there is one: the `usage.prompt_tokens` it
//! reported for the last answer (stored on each assistant message), plus that answer itself
//! (its `completion_tokens`), plus an **estimate of only what was added since** (tool results,
//! a user message, a decision). Without a usable report — a fresh session, a server that
//! reports no usage, or a report made before the latest compaction (it counted messages that
//! have left the transcript since) — the whole prompt is estimated.
//!
//! The estimator is a plain byte count, one token per [`BYTES_PER_TOKEN`] bytes, plus a few
//! tokens per message for its framing; no tokenizer crate. tern talks to any
//! OpenAI-compatible server, and the model's tokenizer is unknown (Llama, Qwen, Mistral,
//! GPT …); a BPE such as `tiktoken`'s `cl100k` would be exact for one family and off by
//! 10–30 % for the others, at the cost of megabytes of tables. Only the tail added since the
//! last report is estimated, so the error stays small, and three bytes per token
//! over-counts English prose (about four) while matching code, JSON and logs (about three),
//! which is what tool outputs are: erring high compacts a little early, never too late.
//!
//! An image sent to the model (a message's `image_url` part, see [`crate::images`]) counts
//! [`TOKENS_PER_IMAGE`], whatever its size: what an image costs depends on the model (OpenAI
//! tiles it, 85 + 170 tokens per 512-pixel tile, about 765 for a 1024×1024 image; Claude
//! charges about width × height / 750, up to about 1,600; Qwen-VL by 28-pixel patches), and
//! the bytes of its base64 say little about its pixels. The figure errs high, as the rest of
//! the estimate does.

use tern_llm::{ContentPart, Role};
use tern_store::Message;

/// The window when neither the configuration nor the server says (`[model] context_length`,
/// `Client::context_length`).
pub const DEFAULT_CONTEXT_LENGTH: u64 = 128_000;

/// The share of the window a prompt may reach before it is compacted.
pub const DEFAULT_THRESHOLD: f64 = 0.8;

/// Bytes per token of the estimate (see the module docs).
pub const BYTES_PER_TOKEN: u64 = 3;

/// Tokens a message costs beyond its text (role, separators of the chat template).
const PER_MESSAGE: u64 = 4;

/// The estimated cost of one image sent to the model (see the module docs).
pub const TOKENS_PER_IMAGE: u64 = 1_600;

/// Estimated tokens of `text`.
pub fn estimate_text(text: &str) -> u64 {
    (text.len() as u64).div_ceil(BYTES_PER_TOKEN)
}

/// Estimated tokens of one message as sent to the model: its parts when it has them, else
/// its text.
pub fn estimate_message(m: &Message) -> u64 {
    let Some(parts) = &m.parts else {
        return estimate_with_text(m, m.content.as_deref());
    };
    let content: u64 = parts
        .iter()
        .map(|p| match p {
            ContentPart::Text { text } => estimate_text(text),
            ContentPart::ImageUrl { .. } => TOKENS_PER_IMAGE,
        })
        .sum();
    estimate_with_text(m, None) + content
}

/// Estimated tokens of `m` sent with `text` as its content (e.g. a placeholder in place of
/// what it holds).
pub fn estimate_with_text(m: &Message, text: Option<&str>) -> u64 {
    let calls: u64 = m
        .tool_calls
        .iter()
        .map(|c| {
            PER_MESSAGE
                + estimate_text(&c.id)
                + estimate_text(&c.function.name)
                + estimate_text(&c.function.arguments)
        })
        .sum();
    PER_MESSAGE
        + text.map_or(0, estimate_text)
        + m.tool_call_id.as_deref().map_or(0, estimate_text)
        + calls
}

/// Estimated tokens of messages.
pub fn estimate_messages<'a>(ms: impl IntoIterator<Item = &'a Message>) -> u64 {
    ms.into_iter().map(estimate_message).sum()
}

/// Where a session's window figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowSource {
    /// `[model] context_length`.
    Configured,
    /// The model server's metadata (`Client::context_length`).
    Server,
    /// Neither said: [`DEFAULT_CONTEXT_LENGTH`].
    Default,
}

impl WindowSource {
    /// As `tern doctor` and `sessions show` print it.
    pub fn describe(self) -> &'static str {
        match self {
            WindowSource::Configured => "[model] context_length",
            WindowSource::Server => "reported by the model server",
            WindowSource::Default => {
                "the default: the server does not say; set [model] context_length"
            }
        }
    }
}

/// The window: as configured, else as the server reports it, else the default.
pub async fn resolve(
    configured: Option<u64>,
    llm: &tern_llm::Client,
    model: &str,
) -> (u64, WindowSource) {
    if let Some(n) = configured.filter(|n| *n > 0) {
        return (n, WindowSource::Configured);
    }
    match llm.context_length(model).await.filter(|n| *n > 0) {
        Some(n) => (n, WindowSource::Server),
        None => (DEFAULT_CONTEXT_LENGTH, WindowSource::Default),
    }
}

/// How long an unanswered question about the window is not asked again.
const ASK_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// The server's answer about the window, asked when first needed and kept for the agent's
/// life; while the server has not said (it was down, or it does not report it), asked again
/// at most every ten minutes, the default standing in meanwhile.
#[derive(Debug, Default)]
pub(crate) struct Discovery {
    state: std::sync::Mutex<(Option<u64>, Option<std::time::Instant>)>,
}

impl Discovery {
    pub(crate) async fn window(
        &self,
        configured: Option<u64>,
        llm: &tern_llm::Client,
        model: &str,
    ) -> (u64, WindowSource) {
        if let Some(n) = configured.filter(|n| *n > 0) {
            return (n, WindowSource::Configured);
        }
        {
            // Poisoning cannot leave the pair inconsistent: it is replaced whole.
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(n) = st.0 {
                return (n, WindowSource::Server);
            }
            if st.1.is_some_and(|t| t.elapsed() < ASK_AGAIN_AFTER) {
                return (DEFAULT_CONTEXT_LENGTH, WindowSource::Default);
            }
            st.1 = Some(std::time::Instant::now());
        }
        let (n, source) = resolve(None, llm, model).await;
        if source == WindowSource::Server {
            tracing::info!(
                model,
                context_length = n,
                "the model server reports the window"
            );
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            st.0 = Some(n);
        }
        (n, source)
    }
}

/// The model's window and the compaction threshold, in tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    pub context_length: u64,
    /// The share of the window a prompt may reach (0 < threshold ≤ 1).
    pub threshold: f64,
}

impl Window {
    /// `context_length` `None` (unknown) is [`DEFAULT_CONTEXT_LENGTH`]; a threshold outside
    /// (0, 1] is [`DEFAULT_THRESHOLD`].
    pub fn new(context_length: Option<u64>, threshold: f64) -> Self {
        let threshold = if threshold > 0.0 && threshold <= 1.0 {
            threshold
        } else {
            DEFAULT_THRESHOLD
        };
        Self {
            context_length: context_length
                .filter(|n| *n > 0)
                .unwrap_or(DEFAULT_CONTEXT_LENGTH),
            threshold,
        }
    }

    /// The prompt size past which the next call compacts first.
    pub fn limit(&self) -> u64 {
        (self.context_length as f64 * self.threshold) as u64
    }

    /// `share` of the window, in tokens.
    pub fn share(&self, share: f64) -> u64 {
        (self.context_length as f64 * share) as u64
    }
}

/// How a prompt size was arrived at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptSize {
    /// The best figure: the report plus the estimate of what came after it.
    pub tokens: u64,
    /// The server's count of the last answer's prompt, when it was used.
    pub reported: Option<u64>,
}

/// The prompt size of the next model call on `transcript` (the active transcript, summary
/// included). `fixed` is the estimate of what is sent besides the transcript (system prompt,
/// tool schemas), used only without a report; reports of answers at or before `stale_through`
/// (the seq the latest compaction saw last) are ignored.
pub fn next_prompt(transcript: &[Message], fixed: u64, stale_through: i64) -> PromptSize {
    let reported = transcript.iter().enumerate().rev().find_map(|(i, m)| {
        let p = m.prompt_tokens.filter(|_| {
            m.role == Role::Assistant && m.compaction_id.is_none() && m.seq > stale_through
        })?;
        Some((i, u64::try_from(p).unwrap_or(0)))
    });
    match reported {
        Some((i, prompt)) => {
            let answer = &transcript[i];
            let own = answer
                .completion_tokens
                .and_then(|c| u64::try_from(c).ok())
                .unwrap_or_else(|| estimate_message(answer));
            PromptSize {
                tokens: prompt + own + estimate_messages(&transcript[i + 1..]),
                reported: Some(prompt),
            }
        }
        None => PromptSize {
            tokens: fixed + estimate_messages(transcript),
            reported: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(seq: i64, role: Role, content: &str, prompt: Option<i64>) -> Message {
        Message {
            id: seq,
            session_id: "s".into(),
            seq,
            role,
            content: Some(content.into()),
            parts: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
            reasoning: None,
            turn_id: None,
            prompt_tokens: prompt,
            completion_tokens: prompt.map(|_| 10),
            model: None,
            created_at: 0,
            compacted: false,
            model_content: None,
            compaction_id: None,
        }
    }

    #[test]
    fn an_image_costs_a_fixed_figure_not_its_bytes() {
        let text = "Images from the tool calls above, in order:";
        let mut m = msg(1, Role::User, text, None);
        let as_text = estimate_message(&m);
        m.parts = Some(vec![
            ContentPart::text(text),
            ContentPart::image_data("image/png", &"A".repeat(3_000_000)),
            ContentPart::image_data("image/png", "iVBOR"),
        ]);
        assert_eq!(estimate_message(&m), as_text + 2 * TOKENS_PER_IMAGE);
    }

    #[test]
    fn the_report_counts_and_only_what_came_after_it_is_estimated() {
        let t = vec![
            msg(1, Role::User, &"x".repeat(3000), None),
            msg(2, Role::Assistant, "ok", Some(5000)),
            msg(3, Role::User, &"y".repeat(300), None),
        ];
        let size = next_prompt(&t, 7777, 0);
        assert_eq!(size.reported, Some(5000));
        assert_eq!(size.tokens, 5000 + 10 + 100 + PER_MESSAGE);
        // A report made before the latest compaction is stale: everything is estimated.
        let size = next_prompt(&t, 7777, 2);
        assert_eq!(size.reported, None);
        assert_eq!(size.tokens, 7777 + 1000 + 1 + 100 + 3 * PER_MESSAGE);
    }

    #[test]
    fn the_window_defaults_and_its_threshold() {
        let w = Window::new(None, 0.8);
        assert_eq!(w.context_length, DEFAULT_CONTEXT_LENGTH);
        assert_eq!(w.limit(), 102_400);
        assert_eq!(Window::new(Some(8000), 7.0).limit(), 6400);
    }
}
