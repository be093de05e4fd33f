//! A scripted OpenAI-compatible model server for tests and benchmarks.
//!
//! Flow: [`FakeModel::start`] binds `127.0.0.1:0` and serves `POST /v1/chat/completions` and
//! `GET /v1/models` over real HTTP (plus, when a test sets them, model metadata in the
//! `/v1/models` entries, llama.cpp's `GET /props` and Ollama's `POST /api/show`, the places
//! servers state a model's context window) → each completion request is recorded (body, headers,
//! arrival time) and answered with the next scripted [`Reply`] (text, tool calls, reasoning,
//! an HTTP error, a delay, a hang, or held at a [`Gate`] the test opens), or by the responder function once the script is empty
//! → a request with `"stream": true` gets the same reply as SSE chunks, tool-call arguments
//! split across chunks the way real servers split them. With neither script nor responder,
//! the server answers 500 with a body that says so, so a test that under-scripts fails loudly.
//!
//! Every request's transcript is checked as a real API checks it ([`check_transcript`]): each
//! tool call of an assistant message answered by exactly one tool result, right after it and
//! in order, and no tool result without its call. A request that breaks this is answered 400
//! (as OpenAI does), and the test fails when the [`FakeModel`] is dropped.
//!
//! With a context window ([`FakeModel::set_context_window`]) every request is also measured
//! with the server's own token count ([`count_tokens`]: its own rule, not tern's estimator, so
//! a test of tern's accounting is honest): a request over the window is answered with
//! OpenAI's real 400 `context_length_exceeded` error and recorded as a violation like a
//! malformed transcript, and answers report that count as `usage.prompt_tokens`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::Notify;

/// A gate that held replies wait at ([`Reply::held`]): the test opens it once it has checked
/// what must hold while the model request is in flight, so no timing decides the outcome.
#[derive(Debug, Clone)]
pub struct Gate(Arc<tokio::sync::watch::Sender<bool>>);

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Gate(Arc::new(tokio::sync::watch::Sender::new(false)))
    }

    /// Lets every reply held at this gate through, now and later.
    pub fn open(&self) {
        self.0.send_replace(true);
    }

    async fn passed(&self) {
        let mut open = self.0.subscribe();
        // The sender lives in `self`: the wait ends only when the gate opens.
        let _ = open.wait_for(|o| *o).await;
    }
}

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    kind: Kind,
    gate: Option<Gate>,
    delay: Duration,
    chunk_delay: Duration,
    usage: Option<(u64, u64)>,
    reasoning: Option<(String, &'static str)>,
}

#[derive(Debug, Clone)]
enum Kind {
    Message {
        content: Option<String>,
        tool_calls: Vec<(String, String, String)>,
    },
    Error {
        status: u16,
        body: String,
        retry_after: Option<u64>,
    },
    /// Raw SSE `data:` payloads, sent as they are.
    RawSse(Vec<String>),
    /// Raw response body with a JSON content type.
    RawJson(String),
    Hang,
}

impl Reply {
    fn new(kind: Kind) -> Self {
        Self {
            kind,
            gate: None,
            delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            usage: None,
            reasoning: None,
        }
    }

    /// A final text answer.
    pub fn text(content: impl Into<String>) -> Self {
        Self::new(Kind::Message {
            content: Some(content.into()),
            tool_calls: Vec::new(),
        })
    }

    /// One tool call; `arguments` is sent verbatim (it need not be valid JSON).
    pub fn tool_call(id: &str, name: &str, arguments: impl Into<String>) -> Self {
        Self::tool_calls([(id, name, arguments.into())])
    }

    /// Several tool calls in one answer.
    pub fn tool_calls<'a>(calls: impl IntoIterator<Item = (&'a str, &'a str, String)>) -> Self {
        Self::new(Kind::Message {
            content: None,
            tool_calls: calls
                .into_iter()
                .map(|(i, n, a)| (i.to_owned(), n.to_owned(), a))
                .collect(),
        })
    }

    /// An HTTP error with an OpenAI-style error body.
    pub fn error(status: u16, message: &str) -> Self {
        Self::new(Kind::Error {
            status,
            body: json!({"error": {"message": message, "type": "server_error"}}).to_string(),
            retry_after: None,
        })
    }

    /// An HTTP 429 with a `Retry-After` header.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self::new(Kind::Error {
            status: 429,
            body: json!({"error": {"message": "rate limited", "type": "rate_limit"}}).to_string(),
            retry_after: Some(retry_after_secs),
        })
    }

    /// Raw SSE data payloads (without `data: `), for malformed or unusual streams.
    pub fn raw_sse(chunks: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self::new(Kind::RawSse(chunks.into_iter().map(Into::into).collect()))
    }

    /// OpenAI's real 400 `context_length_exceeded` answer, as if the request had `tokens`
    /// tokens and the window were `window`.
    pub fn context_overflow(window: u64, tokens: u64) -> Self {
        Self::new(Kind::Error {
            status: 400,
            body: overflow_body(window, tokens),
            retry_after: None,
        })
    }

    /// A raw JSON body for a non-streaming request.
    pub fn raw_json(body: impl Into<String>) -> Self {
        Self::new(Kind::RawJson(body.into()))
    }

    /// Never answers (until the client gives up or the server stops).
    pub fn hang() -> Self {
        Self::new(Kind::Hang)
    }

    /// Adds text beside the tool calls (or replaces a text answer's text), as models that
    /// think aloud before calling a tool do.
    pub fn with_text(mut self, text: &str) -> Self {
        if let Kind::Message { content, .. } = &mut self.kind {
            *content = Some(text.to_owned());
        }
        self
    }

    /// Answers only once `gate` is open.
    pub fn held(mut self, gate: &Gate) -> Self {
        self.gate = Some(gate.clone());
        self
    }

    /// Waits before answering.
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }

    /// Waits between streamed chunks.
    pub fn chunk_delay(mut self, d: Duration) -> Self {
        self.chunk_delay = d;
        self
    }

    /// Reports token usage (omitted by default, as several real servers do).
    pub fn usage(mut self, prompt: u64, completion: u64) -> Self {
        self.usage = Some((prompt, completion));
        self
    }

    /// Adds reasoning under `reasoning_content` (DeepSeek, vLLM).
    pub fn reasoning(mut self, text: &str) -> Self {
        self.reasoning = Some((text.to_owned(), "reasoning_content"));
        self
    }

    /// Adds reasoning under `reasoning` (OpenRouter, Ollama).
    pub fn reasoning_as_reasoning(mut self, text: &str) -> Self {
        self.reasoning = Some((text.to_owned(), "reasoning"));
        self
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub body: Value,
    pub headers: HeaderMap,
    pub at: Instant,
}

impl Recorded {
    /// The `messages` array of a completion request.
    pub fn messages(&self) -> &[Value] {
        self.body["messages"].as_array().map_or(&[], Vec::as_slice)
    }

    /// Names of the tools offered.
    pub fn tool_names(&self) -> Vec<String> {
        self.body["tools"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }
}

type Responder = Arc<dyn Fn(&Value) -> Reply + Send + Sync>;

#[derive(Default)]
struct Inner {
    script: VecDeque<Reply>,
    responder: Option<Responder>,
    requests: Vec<Recorded>,
    models: Vec<String>,
    /// Extra fields of a model's `/v1/models` entry, by id.
    model_info: std::collections::HashMap<String, Value>,
    /// The `GET /props` answer (404 when unset).
    props: Option<Value>,
    /// The `POST /api/show` answer (404 when unset).
    ollama_show: Option<Value>,
    required_key: Option<String>,
    /// Keep only arrival times, not bodies (benchmarks send thousands of large requests).
    light: bool,
    /// What was wrong with the transcripts of malformed requests, in arrival order.
    violations: Vec<String>,
    /// The model's context window in tokens, enforced on every request.
    window: Option<u64>,
    /// The largest prompt measured so far ([`count_tokens`]).
    largest_prompt: u64,
}

#[derive(Default)]
struct Shared {
    inner: Mutex<Inner>,
    arrived: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock can only come from a test assertion elsewhere;
        // the data stays usable, so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The running fake server. Stops when dropped.
pub struct FakeModel {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.task.abort();
        let violations = std::mem::take(&mut self.shared.lock().violations);
        // A test that already fails keeps its own message.
        if !violations.is_empty() && !std::thread::panicking() {
            panic!(
                "the fake model received malformed transcripts:\n{}",
                violations.join("\n")
            );
        }
    }
}

/// The fake model's token count of a request: per message, three tokens of framing plus one
/// per four characters (not bytes) of its content, and of each tool call's name and
/// arguments; plus one per four characters of the tool schemas as JSON. Deliberately not
/// tern's estimator (bytes / 3 of the text sent), so that tests of tern's window accounting
/// measure it against another count, as a real server's tokenizer is.
pub fn count_tokens(body: &Value) -> u64 {
    let chars = |v: &Value| {
        v.as_str()
            .map_or(0, |s| s.chars().count() as u64)
            .div_ceil(4)
    };
    let messages: u64 = body["messages"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| {
                    let calls: u64 = m["tool_calls"].as_array().map_or(0, |cs| {
                        cs.iter()
                            .map(|c| {
                                1 + chars(&c["function"]["name"])
                                    + chars(&c["function"]["arguments"])
                            })
                            .sum()
                    });
                    3 + chars(&m["content"]) + calls
                })
                .sum()
        })
        .unwrap_or(0);
    let tools = body["tools"].as_array().map_or(0, |t| {
        (Value::Array(t.clone()).to_string().chars().count() as u64).div_ceil(4)
    });
    messages + tools
}

/// OpenAI's answer to a request over the model's window.
fn overflow_body(window: u64, tokens: u64) -> String {
    json!({"error": {
        "message": format!(
            "This model's maximum context length is {window} tokens. However, your messages \
             resulted in {tokens} tokens. Please reduce the length of the messages."
        ),
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }})
    .to_string()
}

/// Checks a request's `messages` as a chat-completions API does: every tool call of an
/// assistant message has exactly one tool result, in the messages right after it and in the
/// order of the calls, and no tool result comes without its call. Returns what is wrong.
pub fn check_transcript(messages: &[Value]) -> Result<(), String> {
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        match m["role"].as_str() {
            Some("tool") => {
                return Err(format!(
                    "message {i}: a tool result ({:?}) without its call right before it",
                    m["tool_call_id"].as_str().unwrap_or("")
                ));
            }
            Some("assistant") => {
                let calls = m["tool_calls"].as_array().map_or(&[][..], Vec::as_slice);
                for (k, call) in calls.iter().enumerate() {
                    let id = call["id"].as_str().unwrap_or("");
                    let at = i + 1 + k;
                    match messages.get(at) {
                        Some(r)
                            if r["role"] == "tool" && r["tool_call_id"].as_str() == Some(id) => {}
                        Some(r) => {
                            return Err(format!(
                                "message {at}: expected the result of tool call {id:?} (call {} of \
                                 message {i}), found a {} message{}",
                                k + 1,
                                r["role"].as_str().unwrap_or("?"),
                                r["tool_call_id"]
                                    .as_str()
                                    .map(|c| format!(" for {c:?}"))
                                    .unwrap_or_default()
                            ));
                        }
                        None => {
                            return Err(format!("tool call {id:?} of message {i} has no result"));
                        }
                    }
                }
                i += calls.len();
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

impl FakeModel {
    /// Starts a server on `127.0.0.1` with a random port.
    pub async fn start() -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        shared.lock().models = vec!["fake-model".to_owned()];
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .route("/v1/models", get(models))
            .route("/props", get(props))
            .route("/api/show", post(ollama_show))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(%e, "fake model server stopped");
            }
        });
        Ok(Self { addr, shared, task })
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues a reply; replies are used in order.
    pub fn push(&self, r: Reply) -> &Self {
        self.shared.lock().script.push_back(r);
        self
    }

    /// Answers with `f(request body)` once the script is empty.
    pub fn set_responder(&self, f: impl Fn(&Value) -> Reply + Send + Sync + 'static) {
        self.shared.lock().responder = Some(Arc::new(f));
    }

    /// The model ids `GET /v1/models` lists.
    pub fn set_models(&self, ids: &[&str]) {
        self.shared.lock().models = ids.iter().map(|s| (*s).to_owned()).collect();
    }

    /// Adds `fields` (a JSON object) to model `id`'s `/v1/models` entry, as servers state its
    /// window there: `{"context_length": 131072}` (OpenRouter), `{"max_model_len": 32768}`
    /// (vLLM), `{"meta": {"n_ctx_train": 40960}}` (llama.cpp).
    pub fn set_model_info(&self, id: &str, fields: Value) {
        self.shared.lock().model_info.insert(id.to_owned(), fields);
    }

    /// Serves `body` at `GET /props`, as llama.cpp does at its root, e.g.
    /// `{"default_generation_settings": {"n_ctx": 8192}}`.
    pub fn set_props(&self, body: Value) {
        self.shared.lock().props = Some(body);
    }

    /// Serves `body` at `POST /api/show`, as Ollama does at its root, e.g.
    /// `{"model_info": {"general.architecture": "llama", "llama.context_length": 8192}}`.
    pub fn set_ollama_show(&self, body: Value) {
        self.shared.lock().ollama_show = Some(body);
    }

    /// Requires `Authorization: Bearer KEY` (401 otherwise).
    pub fn require_key(&self, key: &str) {
        self.shared.lock().required_key = Some(key.to_owned());
    }

    /// Records only each request's arrival time and path, not its body or headers: for
    /// benchmarks, where cloning every growing transcript would cost more than the server.
    pub fn record_bodies(&self, on: bool) {
        self.shared.lock().light = !on;
    }

    /// Enforces a context window of `tokens` on every request (see the module docs); `None`
    /// lifts it.
    pub fn set_context_window(&self, tokens: Option<u64>) {
        self.shared.lock().window = tokens;
    }

    /// The largest request measured so far, in the fake model's own count.
    pub fn largest_prompt(&self) -> u64 {
        self.shared.lock().largest_prompt
    }

    /// Scripted replies not used yet.
    pub fn remaining(&self) -> usize {
        self.shared.lock().script.len()
    }

    /// Every completion request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().requests.clone()
    }

    /// What was wrong with each malformed transcript received so far (see
    /// [`check_transcript`]); taken, so that a test that expects one can say so and the drop
    /// does not fail it.
    pub fn take_violations(&self) -> Vec<String> {
        std::mem::take(&mut self.shared.lock().violations)
    }

    /// Waits until at least `n` completion requests arrived; `None` on timeout.
    pub async fn wait_requests(&self, n: usize, timeout: Duration) -> Option<Vec<Recorded>> {
        let deadline = Instant::now() + timeout;
        loop {
            let notified = self.shared.arrived.notified();
            {
                let inner = self.shared.lock();
                if inner.requests.len() >= n {
                    return Some(inner.requests.clone());
                }
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            if tokio::time::timeout(left, notified).await.is_err() {
                let inner = self.shared.lock();
                return (inner.requests.len() >= n).then(|| inner.requests.clone());
            }
        }
    }
}

fn authorized(shared: &Shared, headers: &HeaderMap) -> bool {
    let Some(key) = shared.lock().required_key.clone() else {
        return true;
    };
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {key}"))
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        axum::Json(json!({"error": {"message": "Invalid API key", "code": "invalid_api_key"}})),
    )
        .into_response()
}

async fn models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if !authorized(&shared, &headers) {
        return unauthorized();
    }
    let inner = shared.lock();
    let data: Vec<Value> = inner
        .models
        .iter()
        .map(|id| {
            let mut entry = json!({"id": id, "object": "model", "owned_by": "fake"});
            if let (Some(Value::Object(extra)), Some(e)) =
                (inner.model_info.get(id), entry.as_object_mut())
            {
                e.extend(extra.clone());
            }
            entry
        })
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

fn set_or_404(body: Option<Value>) -> Response {
    match body {
        Some(v) => axum::Json(v).into_response(),
        None => (StatusCode::NOT_FOUND, "fake model: not set").into_response(),
    }
}

async fn props(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if !authorized(&shared, &headers) {
        return unauthorized();
    }
    let body = shared.lock().props.clone();
    set_or_404(body)
}

async fn ollama_show(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if !authorized(&shared, &headers) {
        return unauthorized();
    }
    let body = shared.lock().ollama_show.clone();
    set_or_404(body)
}

async fn completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !authorized(&shared, &headers) {
        return unauthorized();
    }
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("fake model: body is not JSON: {e}"),
            )
                .into_response();
        }
    };
    if let Err(why) = check_transcript(body["messages"].as_array().map_or(&[], Vec::as_slice)) {
        shared.lock().violations.push(why.clone());
        shared.arrived.notify_waiters();
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": {
                "message": format!("fake model: malformed transcript: {why}"),
                "type": "invalid_request_error",
            }})),
        )
            .into_response();
    }
    let prompt_tokens = count_tokens(&body);
    let over = {
        let mut inner = shared.lock();
        inner.largest_prompt = inner.largest_prompt.max(prompt_tokens);
        match inner.window {
            Some(w) if prompt_tokens > w => {
                inner.violations.push(format!(
                    "a request of {prompt_tokens} tokens, over the context window of {w}"
                ));
                Some(w)
            }
            _ => None,
        }
    };
    if let Some(window) = over {
        shared.arrived.notify_waiters();
        return (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            overflow_body(window, prompt_tokens),
        )
            .into_response();
    }
    let (mut reply, counted) = {
        let mut inner = shared.lock();
        let counted = inner.window.is_some();
        let (recorded_body, headers) = if inner.light {
            (Value::Null, HeaderMap::new())
        } else {
            (body.clone(), headers)
        };
        inner.requests.push(Recorded {
            path: "/v1/chat/completions".into(),
            body: recorded_body,
            headers,
            at: Instant::now(),
        });
        let responder = inner.responder.clone();
        let reply = inner
            .script
            .pop_front()
            .or_else(|| responder.map(|f| f(&body)));
        (reply, counted)
    };
    shared.arrived.notify_waiters();
    // With a window, answers report the server's own count unless the script says otherwise.
    if counted
        && let Some(r) = &mut reply
        && r.usage.is_none()
        && let Kind::Message {
            content,
            tool_calls,
        } = &r.kind
    {
        let completion = content
            .as_deref()
            .map_or(0, |c| c.chars().count() as u64)
            .div_ceil(4)
            + tool_calls
                .iter()
                .map(|(_, n, a)| 1 + (n.chars().count() + a.chars().count()) as u64 / 4)
                .sum::<u64>();
        r.usage = Some((prompt_tokens, completion.max(1)));
    }
    let Some(reply) = reply else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({"error": {"message": "fake model: no scripted reply left"}})),
        )
            .into_response();
    };
    if let Some(gate) = &reply.gate {
        gate.passed().await;
    }
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let stream = body["stream"].as_bool().unwrap_or(false);
    let model = body["model"].as_str().unwrap_or("fake-model").to_owned();
    match &reply.kind {
        Kind::Hang => {
            std::future::pending::<()>().await;
            unreachable!("pending never completes")
        }
        Kind::Error {
            status,
            body,
            retry_after,
        } => {
            let mut resp = (
                StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                [(header::CONTENT_TYPE, "application/json")],
                body.clone(),
            )
                .into_response();
            if let Some(s) = retry_after
                && let Ok(v) = s.to_string().parse()
            {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
            resp
        }
        Kind::RawJson(b) => {
            ([(header::CONTENT_TYPE, "application/json")], b.clone()).into_response()
        }
        Kind::RawSse(chunks) => sse_response(chunks.clone(), reply.chunk_delay),
        Kind::Message { .. } if stream => {
            sse_response(stream_chunks(&reply, &model), reply.chunk_delay)
        }
        Kind::Message { .. } => axum::Json(full_completion(&reply, &model)).into_response(),
    }
}

fn usage_json(u: (u64, u64)) -> Value {
    json!({"prompt_tokens": u.0, "completion_tokens": u.1, "total_tokens": u.0 + u.1})
}

fn full_completion(r: &Reply, model: &str) -> Value {
    let Kind::Message {
        content,
        tool_calls,
    } = &r.kind
    else {
        return Value::Null;
    };
    let mut msg = json!({"role": "assistant", "content": content});
    if let Some((text, field)) = &r.reasoning {
        msg[*field] = json!(text);
    }
    if !tool_calls.is_empty() {
        msg["tool_calls"] = tool_calls
            .iter()
            .map(|(id, name, args)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
            })
            .collect();
    }
    let finish = if tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let mut v = json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
    });
    if let Some(u) = r.usage {
        v["usage"] = usage_json(u);
    }
    v
}

fn split_pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

fn stream_chunks(r: &Reply, model: &str) -> Vec<String> {
    let Kind::Message {
        content,
        tool_calls,
    } = &r.kind
    else {
        return Vec::new();
    };
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({
            "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
        .to_string()
    };
    let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    if let Some((text, field)) = &r.reasoning {
        for p in split_pieces(text, 6) {
            out.push(chunk(json!({ *field: p }), None));
        }
    }
    if let Some(c) = content {
        for p in split_pieces(c, 6) {
            out.push(chunk(json!({"content": p}), None));
        }
    }
    for (i, (id, name, args)) in tool_calls.iter().enumerate() {
        out.push(chunk(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                   "function": {"name": name, "arguments": ""}}]}),
            None,
        ));
        for p in split_pieces(args, args.chars().count().div_ceil(2).max(1)) {
            out.push(chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": p}}]}),
                None,
            ));
        }
    }
    let finish = if tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    out.push(chunk(json!({}), Some(finish)));
    if let Some(u) = r.usage {
        out.push(
            json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model,
                   "choices": [], "usage": usage_json(u)})
            .to_string(),
        );
    }
    out.push("[DONE]".to_owned());
    out
}

fn sse_response(chunks: Vec<String>, chunk_delay: Duration) -> Response {
    let stream = futures_util::stream::unfold(chunks.into_iter(), move |mut it| async move {
        let c = it.next()?;
        if !chunk_delay.is_zero() {
            tokio::time::sleep(chunk_delay).await;
        }
        Some((
            Ok::<_, std::convert::Infallible>(Bytes::from(format!("data: {c}\n\n"))),
            it,
        ))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": "terminal", "arguments": "{}"}})
    }

    fn result(id: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": "ok"})
    }

    #[test]
    fn well_formed_transcripts_pass() {
        let msgs = [
            json!({"role": "system", "content": "s"}),
            json!({"role": "user", "content": "u"}),
            json!({"role": "assistant", "content": null, "tool_calls": [call("a"), call("b")]}),
            result("a"),
            result("b"),
            json!({"role": "assistant", "content": "done"}),
            json!({"role": "user", "content": "again"}),
        ];
        assert_eq!(check_transcript(&msgs), Ok(()));
    }

    #[test]
    fn each_broken_transcript_is_named() {
        let cases: Vec<(Vec<Value>, &str)> = vec![
            (
                vec![json!({"role": "assistant", "tool_calls": [call("a")]})],
                "\"a\" of message 0 has no result",
            ),
            (
                vec![
                    json!({"role": "assistant", "tool_calls": [call("a"), call("b")]}),
                    result("b"),
                    result("a"),
                ],
                "expected the result of tool call \"a\"",
            ),
            (
                vec![
                    json!({"role": "assistant", "tool_calls": [call("a")]}),
                    json!({"role": "user", "content": "[inbox decision]"}),
                    result("a"),
                ],
                "found a user message",
            ),
            (
                vec![json!({"role": "user", "content": "u"}), result("x")],
                "a tool result (\"x\") without its call",
            ),
            (
                vec![
                    json!({"role": "assistant", "tool_calls": [call("a")]}),
                    result("a"),
                    result("a"),
                ],
                "message 2: a tool result (\"a\") without its call",
            ),
        ];
        for (msgs, want) in cases {
            let err = check_transcript(&msgs).unwrap_err();
            assert!(err.contains(want), "{err:?} should contain {want:?}");
        }
    }

    #[tokio::test]
    async fn a_request_over_the_window_gets_openais_error_and_is_a_violation() {
        let fake = FakeModel::start().await.unwrap();
        fake.set_context_window(Some(100));
        fake.push(Reply::text("fits"));
        let client = reqwest::Client::new();
        let send = |content: String| {
            client
                .post(format!("{}/chat/completions", fake.base_url()))
                .json(&json!({"model": "m", "messages": [{"role": "user", "content": content}]}))
                .send()
        };
        let ok: Value = send("a".repeat(200)).await.unwrap().json().await.unwrap();
        assert_eq!(ok["usage"]["prompt_tokens"], 3 + 50, "{ok}");
        let resp = send("a".repeat(400)).await.unwrap();
        assert_eq!(resp.status(), 400);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("maximum context length is 100 tokens"),
            "{body}"
        );
        assert_eq!(fake.largest_prompt(), 103);
        let v = fake.take_violations();
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("over the context window of 100"), "{v:?}");
    }

    #[tokio::test]
    async fn a_malformed_request_is_refused_and_fails_the_test_on_drop() {
        let fake = FakeModel::start().await.unwrap();
        fake.push(Reply::text("never sent"));
        let resp = reqwest::Client::new()
            .post(format!("{}/chat/completions", fake.base_url()))
            .json(
                &json!({"model": "m", "messages": [{"role": "user", "content": "u"}, result("x")]}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400);
        let body: Value = resp.json().await.unwrap();
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("malformed transcript"),
            "{body}"
        );
        assert_eq!(fake.remaining(), 1, "no scripted reply is used up");
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(fake)));
        let msg = panicked.unwrap_err();
        let msg = msg.downcast_ref::<String>().unwrap();
        assert!(msg.contains("without its call"), "{msg}");
    }
}
