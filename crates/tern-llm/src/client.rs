//! The HTTP side: requests, retries, streaming assembly.

use std::time::Duration;

use futures_util::StreamExt;
use reqwest::StatusCode;
use serde_json::json;
use tern_util::Backoff;

use crate::sse::SseParser;
use crate::types::{
    ChatRequest, ChatResponse, ToolCall, WireCompletion, WireModels, WireToolCall,
    arguments_to_string,
};
use crate::{LlmError, Usage};

/// Connection settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Base URL including the version segment, e.g. `http://localhost:11434/v1`.
    pub base_url: String,
    pub api_key: Option<String>,
    /// Whole-request timeout for non-streaming calls; longest silence between chunks when
    /// streaming.
    pub timeout: Duration,
    pub max_retries: u32,
    /// First backoff delay; doubles on each retry, less up to a quarter of jitter.
    pub backoff_base: Duration,
    /// Longest backoff delay, also the cap on a server's `Retry-After`.
    pub backoff_max: Duration,
    /// Bound on [`Client::context_length`], all its requests together: the window is worth a
    /// short wait at start, never a hang.
    pub discovery_timeout: Duration,
}

impl ClientConfig {
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            timeout: Duration::from_secs(120),
            max_retries: 3,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            discovery_timeout: Duration::from_secs(5),
        }
    }
}

/// Progress of a call, for live output.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    ContentDelta(String),
    ReasoningDelta(String),
    /// The deltas handed on since the call began (or since the last retry) belong to an
    /// answer the server broke off: drop them. Sent just before the [`StreamEvent::Retrying`]
    /// of that attempt; the retry's deltas start the answer afresh.
    Discard,
    /// A failed attempt that will be retried after `delay`.
    Retrying {
        attempt: u32,
        delay: Duration,
        error: String,
    },
}

/// An OpenAI-compatible client. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    cfg: ClientConfig,
}

impl Client {
    pub fn new(mut cfg: ClientConfig) -> Result<Self, LlmError> {
        while cfg.base_url.ends_with('/') {
            cfg.base_url.pop();
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10).min(cfg.timeout))
            .read_timeout(cfg.timeout)
            // A gateway talks to one model host; a burst of concurrent turns opens many
            // connections, and keeping them all idle afterwards only holds memory.
            .pool_max_idle_per_host(8)
            .user_agent(concat!("tern/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| LlmError::Config(e.to_string()))?;
        Ok(Self { http, cfg })
    }

    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.cfg.base_url)
    }

    /// The server's root: the base URL without its version segment, where llama.cpp serves
    /// `/props` and Ollama `/api/show`.
    pub(crate) fn root_url(&self, path: &str) -> String {
        root_url(&self.cfg.base_url, path)
    }

    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub(crate) fn authed(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.cfg.api_key {
            Some(k) => rb.bearer_auth(k),
            None => rb,
        }
    }

    fn send_error(&self, url: &str, e: reqwest::Error) -> LlmError {
        if e.is_timeout() {
            LlmError::Timeout {
                secs: self.cfg.timeout.as_secs(),
            }
        } else if e.is_decode() {
            LlmError::Decode(crate::error_chain(&e))
        } else {
            LlmError::Connect {
                url: url.to_owned(),
                source: e,
            }
        }
    }

    /// `GET /models`: the ids the endpoint serves.
    pub async fn list_models(&self) -> Result<Vec<String>, LlmError> {
        let url = self.url("models");
        let resp = self
            .authed(self.http.get(&url).timeout(self.cfg.timeout))
            .send()
            .await
            .map_err(|e| self.send_error(&url, e))?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| self.send_error(&url, e))?;
        if !status.is_success() {
            return Err(LlmError::Http {
                status: status.as_u16(),
                body: truncate(&text, 500),
            });
        }
        let models: WireModels = serde_json::from_str(&text)
            .map_err(|e| LlmError::Decode(format!("{e}: {}", truncate(&text, 200))))?;
        Ok(models.data.into_iter().map(|m| m.id).collect())
    }

    /// One chat completion, with retries. Cancel it by dropping the future: the request is
    /// aborted with it.
    pub async fn chat(
        &self,
        mut req: ChatRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
    ) -> Result<ChatResponse, LlmError> {
        if req.stream {
            req.stream_options = Some(json!({ "include_usage": true }));
        }
        let mut attempt = 0;
        loop {
            let mut delivered = false;
            let result = self.attempt(&req, on_event, &mut delivered).await;
            match result {
                Ok(r) => return Ok(r),
                Err((e, retry_after)) if e.is_retryable() && attempt < self.retry_budget(&e) => {
                    attempt += 1;
                    let delay = retry_after
                        .unwrap_or_else(|| self.backoff(attempt))
                        .min(self.cfg.backoff_max);
                    // `e`'s text carries its causes (see `LlmError::Connect`).
                    tracing::warn!(attempt, ?delay, error = %e, "model call failed; retrying");
                    if delivered {
                        on_event(StreamEvent::Discard);
                    }
                    on_event(StreamEvent::Retrying {
                        attempt,
                        delay,
                        error: with_causes(&e),
                    });
                    tokio::time::sleep(delay).await;
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// How many retries `e` may have: `max_retries`, but at least one for output the server
    /// could not parse, which another sample usually fixes.
    fn retry_budget(&self, e: &LlmError) -> u32 {
        if e.is_output_parse_failure() {
            self.cfg.max_retries.max(1)
        } else {
            self.cfg.max_retries
        }
    }

    fn backoff(&self, attempt: u32) -> Duration {
        Backoff::new(self.cfg.backoff_base, self.cfg.backoff_max).delay(attempt)
    }

    async fn attempt(
        &self,
        req: &ChatRequest,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        delivered: &mut bool,
    ) -> Result<ChatResponse, (LlmError, Option<Duration>)> {
        let url = self.url("chat/completions");
        let mut rb = self.authed(self.http.post(&url).json(req));
        if !req.stream {
            rb = rb.timeout(self.cfg.timeout);
        }
        let resp = rb
            .send()
            .await
            .map_err(|e| (self.send_error(&url, e), None))?;
        let status = resp.status();
        if !status.is_success() {
            let retry_after = retry_after(&resp);
            let body = resp.text().await.unwrap_or_default();
            return Err((
                LlmError::Http {
                    status: status.as_u16(),
                    body: truncate(&body, 1000),
                },
                retry_after.filter(|_| {
                    status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
                }),
            ));
        }
        let is_sse = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if req.stream && is_sse {
            self.read_stream(resp, &url, on_event, delivered).await
        } else {
            // Some servers answer a streaming request with a plain JSON body; accept it.
            let text = resp
                .text()
                .await
                .map_err(|e| (self.send_error(&url, e), None))?;
            let r = parse_completion(&text).map_err(|e| (e, None))?;
            if req.stream {
                if let Some(r) = &r.reasoning {
                    on_event(StreamEvent::ReasoningDelta(r.clone()));
                }
                if let Some(c) = &r.content {
                    on_event(StreamEvent::ContentDelta(c.clone()));
                }
            }
            Ok(r)
        }
    }

    async fn read_stream(
        &self,
        resp: reqwest::Response,
        url: &str,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        delivered: &mut bool,
    ) -> Result<ChatResponse, (LlmError, Option<Duration>)> {
        let mut acc = StreamAccumulator::default();
        let mut parser = SseParser::default();
        let mut body = resp.bytes_stream();
        let mut done = false;
        while !done {
            let Some(chunk) = body.next().await else {
                break;
            };
            let chunk = chunk.map_err(|e| (self.send_error(url, e), None))?;
            for data in parser.feed(&chunk) {
                if data.trim() == "[DONE]" {
                    done = true;
                    break;
                }
                acc.apply(&data, on_event, delivered)
                    .map_err(|e| (e, None))?;
            }
        }
        if !done && let Some(data) = parser.finish() {
            if data.trim() == "[DONE]" {
                done = true;
            } else {
                acc.apply(&data, on_event, delivered)
                    .map_err(|e| (e, None))?;
            }
        }
        // A stream cut short would otherwise pass for a short answer, or for tool calls
        // with half their arguments. A finish reason without `[DONE]` is a whole answer
        // (some servers never send `[DONE]`).
        if !done && acc.finish_reason.is_none() {
            return Err((
                LlmError::Stream {
                    message: "the stream ended before [DONE] and before a finish_reason".into(),
                },
                None,
            ));
        }
        Ok(acc.finish())
    }
}

/// `path` at the root of `base`: a trailing `/v1` path segment dropped, never any part of
/// the host (`http://v1` stays that host), so the key goes only where the base URL points.
fn root_url(base: &str, path: &str) -> String {
    match reqwest::Url::parse(base) {
        Ok(mut url) => {
            let kept = url
                .path()
                .trim_end_matches('/')
                .strip_suffix("/v1")
                .map(str::to_owned);
            if let Some(p) = kept {
                url.set_path(&p);
            }
            format!("{}/{path}", url.as_str().trim_end_matches('/'))
        }
        Err(_) => format!("{}/{path}", base.trim_end_matches('/')),
    }
}

fn retry_after(resp: &reqwest::Response) -> Option<Duration> {
    let v = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?;
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// An error and its causes (a refused connection says why only in its innermost cause),
/// skipping a cause whose text is already there.
fn with_causes(e: &LlmError) -> String {
    let mut out = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// An id for a tool call the provider sent without one. It must be unique across answers and
/// sessions, not just within the answer: tools derive idempotency keys from the call id
/// (`tern-req:<session>:<call id>`), so a positional `call_0` in every answer would make a
/// later call look like a retry of an earlier one. The id is made once, when the answer is
/// assembled, so it stays the same wherever the answer is used (transcript, tool results).
fn invented_call_id(index: usize) -> String {
    format!("call_{}_{index}", uuid::Uuid::now_v7().simple())
}

fn convert_calls(calls: Vec<WireToolCall>) -> Vec<ToolCall> {
    calls
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let f = c.function;
            ToolCall::new(
                c.id.filter(|s| !s.is_empty())
                    .unwrap_or_else(|| invented_call_id(i)),
                f.as_ref().and_then(|f| f.name.clone()).unwrap_or_default(),
                arguments_to_string(f.and_then(|f| f.arguments)),
            )
        })
        .collect()
}

/// Parses a non-streaming completion body.
pub(crate) fn parse_completion(text: &str) -> Result<ChatResponse, LlmError> {
    let wire: WireCompletion = serde_json::from_str(text)
        .map_err(|e| LlmError::Decode(format!("{e}: {}", truncate(text, 200))))?;
    let Some(choice) = wire.choices.into_iter().next() else {
        return Err(LlmError::Decode(format!(
            "no choices in the answer: {}",
            truncate(text, 200)
        )));
    };
    let msg = choice.message.or(choice.delta);
    let (content, reasoning, calls) = match msg {
        Some(m) => (
            non_empty(m.content),
            non_empty(m.reasoning_content.or(m.reasoning)),
            m.tool_calls.unwrap_or_default(),
        ),
        None => (None, None, Vec::new()),
    };
    Ok(ChatResponse {
        content,
        reasoning,
        tool_calls: convert_calls(calls),
        usage: wire.usage,
        finish_reason: choice.finish_reason,
        model: wire.model.filter(|m| !m.is_empty()),
    })
}

/// Builds one response out of streamed deltas. Tool calls arrive in pieces keyed by index:
/// the first piece has the id and name, later ones append to the arguments.
#[derive(Default)]
struct StreamAccumulator {
    content: String,
    reasoning: String,
    calls: Vec<(String, String, String)>,
    usage: Option<Usage>,
    finish_reason: Option<String>,
    model: Option<String>,
}

impl StreamAccumulator {
    fn apply(
        &mut self,
        data: &str,
        on_event: &(dyn Fn(StreamEvent) + Send + Sync),
        delivered: &mut bool,
    ) -> Result<(), LlmError> {
        let chunk: serde_json::Value = serde_json::from_str(data).map_err(|e| {
            LlmError::Decode(format!("bad stream chunk ({e}): {}", truncate(data, 200)))
        })?;
        if let Some(err) = chunk.get("error") {
            // Servers such as OpenRouter and llama.cpp report mid-stream failures as a chunk,
            // after a 200 status: whatever its code, the answer so far is not the answer.
            return Err(LlmError::Stream {
                message: truncate(&err.to_string(), 1000),
            });
        }
        let wire: WireCompletion = serde_json::from_value(chunk).map_err(|e| {
            LlmError::Decode(format!("bad stream chunk ({e}): {}", truncate(data, 200)))
        })?;
        if let Some(u) = wire.usage {
            self.usage = Some(u);
        }
        if let Some(m) = wire.model.filter(|m| !m.is_empty()) {
            self.model = Some(m);
        }
        for choice in wire.choices {
            if let Some(fr) = choice.finish_reason {
                self.finish_reason = Some(fr);
            }
            let Some(d) = choice.delta.or(choice.message) else {
                continue;
            };
            if let Some(r) = d
                .reasoning_content
                .or(d.reasoning)
                .filter(|s| !s.is_empty())
            {
                *delivered = true;
                self.reasoning.push_str(&r);
                on_event(StreamEvent::ReasoningDelta(r));
            }
            if let Some(c) = d.content.filter(|s| !s.is_empty()) {
                *delivered = true;
                self.content.push_str(&c);
                on_event(StreamEvent::ContentDelta(c));
            }
            for (pos, tc) in d.tool_calls.unwrap_or_default().into_iter().enumerate() {
                *delivered = true;
                let idx = tc.index.unwrap_or(pos);
                while self.calls.len() <= idx {
                    self.calls.push(Default::default());
                }
                let slot = &mut self.calls[idx];
                if let Some(id) = tc.id.filter(|s| !s.is_empty()) {
                    slot.0 = id;
                }
                if let Some(f) = tc.function {
                    if let Some(n) = f.name.filter(|s| !s.is_empty()) {
                        slot.1.push_str(&n);
                    }
                    slot.2.push_str(&arguments_to_string(f.arguments));
                }
            }
        }
        Ok(())
    }

    fn finish(self) -> ChatResponse {
        ChatResponse {
            content: non_empty(Some(self.content)),
            reasoning: non_empty(Some(self.reasoning)),
            tool_calls: self
                .calls
                .into_iter()
                .enumerate()
                .filter(|(_, c)| !c.1.is_empty())
                .map(|(i, (id, name, args))| {
                    let id = if id.is_empty() {
                        invented_call_id(i)
                    } else {
                        id
                    };
                    ToolCall::new(id, name, args)
                })
                .collect(),
            usage: self.usage,
            finish_reason: self.finish_reason,
            model: self.model,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_reasoning_under_either_name_and_missing_usage() {
        let r = parse_completion(
            r#"{"choices":[{"message":{"role":"assistant","content":"hi","reasoning":"think"}}]}"#,
        )
        .unwrap();
        assert_eq!(r.content.as_deref(), Some("hi"));
        assert_eq!(r.reasoning.as_deref(), Some("think"));
        assert_eq!(r.usage, None);
        let r = parse_completion(
            r#"{"choices":[{"message":{"content":null,"reasoning_content":"rc","tool_calls":[{"id":"a","type":"function","function":{"name":"t","arguments":{"x":1}}}]}}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#,
        )
        .unwrap();
        assert_eq!(r.reasoning.as_deref(), Some("rc"));
        assert_eq!(r.tool_calls, vec![ToolCall::new("a", "t", r#"{"x":1}"#)]);
        assert_eq!(r.usage.unwrap().total_tokens, 7);
    }

    #[test]
    fn accumulates_streamed_tool_calls_by_index() {
        let mut acc = StreamAccumulator::default();
        let mut delivered = false;
        let noop = |_e: StreamEvent| {};
        for d in [
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"read_file","arguments":""}},{"index":1,"id":"c2","function":{"name":"list_dir","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a\"}"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#,
        ] {
            acc.apply(d, &noop, &mut delivered).unwrap();
        }
        let r = acc.finish();
        assert!(delivered);
        assert_eq!(
            r.tool_calls,
            vec![
                ToolCall::new("c1", "read_file", r#"{"path":"a"}"#),
                ToolCall::new("c2", "list_dir", "{}"),
            ]
        );
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(r.usage.unwrap().completion_tokens, 2);
    }

    /// Tools key their idempotency on the call id, so ids made up for a provider that sent
    /// none must differ between answers (a positional `call_0` would repeat every answer).
    #[test]
    fn invented_call_ids_are_unique_across_answers() {
        let body = r#"{"choices":[{"message":{"tool_calls":[{"type":"function","function":{"name":"t","arguments":"{}"}},{"id":"","type":"function","function":{"name":"u","arguments":"{}"}}]}}]}"#;
        let streamed = || {
            let mut acc = StreamAccumulator::default();
            acc.apply(
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"t","arguments":"{}"}}]}}]}"#,
                &|_| {},
                &mut false,
            )
            .unwrap();
            acc.finish()
        };
        let answers = [
            parse_completion(body).unwrap(),
            parse_completion(body).unwrap(),
            streamed(),
            streamed(),
        ];
        let ids: Vec<&str> = answers
            .iter()
            .flat_map(|a| a.tool_calls.iter().map(|c| c.id.as_str()))
            .collect();
        assert_eq!(ids.len(), 6);
        let unique: std::collections::HashSet<&str> = ids.iter().copied().collect();
        assert_eq!(unique.len(), ids.len(), "{ids:?}");
        assert!(ids.iter().all(|id| id.starts_with("call_")), "{ids:?}");
    }

    #[test]
    fn the_root_drops_a_v1_path_segment_never_the_host() {
        assert_eq!(root_url("http://h:8080/v1", "props"), "http://h:8080/props");
        assert_eq!(root_url("http://h/api/v1/", "props"), "http://h/api/props");
        assert_eq!(root_url("http://v1", "props"), "http://v1/props");
        assert_eq!(root_url("http://v1/v1", "api/show"), "http://v1/api/show");
        assert_eq!(root_url("http://h/llm", "props"), "http://h/llm/props");
    }

    #[test]
    fn error_chunk_is_an_error() {
        let mut acc = StreamAccumulator::default();
        let e = acc
            .apply(
                r#"{"error":{"code":502,"message":"upstream"}}"#,
                &|_| {},
                &mut false,
            )
            .unwrap_err();
        assert!(
            matches!(&e, LlmError::Stream { message } if message.contains("upstream")),
            "{e}"
        );
        assert!(e.is_retryable());
    }
}
