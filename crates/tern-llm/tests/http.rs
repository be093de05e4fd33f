//! The client against the scripted fake model over real HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on a broken setup.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_fake_model::{FakeModel, Reply};
use tern_llm::{
    ChatRequest, Client, ClientConfig, LlmError, RequestMessage, Role, StreamEvent, ToolCall,
};

fn client(base: &str, retries: u32, timeout: Duration) -> Client {
    let mut cfg = ClientConfig::new(base);
    cfg.max_retries = retries;
    cfg.timeout = timeout;
    cfg.backoff_base = Duration::from_millis(5);
    cfg.api_key = Some("test-key".into());
    Client::new(cfg).unwrap()
}

fn request(stream: bool) -> ChatRequest {
    ChatRequest {
        model: "fake-model".into(),
        messages: vec![RequestMessage::text(Role::User, "hi")],
        tools: vec![],
        stream,
        stream_options: None,
    }
}

#[tokio::test]
async fn streams_text_reasoning_and_several_tool_calls() {
    let fake = FakeModel::start().await.unwrap();
    fake.push(
        Reply::tool_calls([
            ("a", "read_file", r#"{"path":"Cargo.toml"}"#.to_owned()),
            ("b", "terminal", r#"{"command":"ls"}"#.to_owned()),
        ])
        .reasoning("let me look")
        .usage(11, 7),
    );
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let c = client(&fake.base_url(), 0, Duration::from_secs(5));
    let r = c
        .chat(request(true), &move |e| ev.lock().unwrap().push(e))
        .await
        .unwrap();
    assert_eq!(
        r.tool_calls,
        vec![
            ToolCall::new("a", "read_file", r#"{"path":"Cargo.toml"}"#),
            ToolCall::new("b", "terminal", r#"{"command":"ls"}"#),
        ]
    );
    assert_eq!(r.reasoning.as_deref(), Some("let me look"));
    assert_eq!(r.usage.unwrap().prompt_tokens, 11);
    let reasoning: String = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ReasoningDelta(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(reasoning, "let me look");
    let req = &fake.requests()[0];
    assert_eq!(req.body["stream_options"]["include_usage"], true);
    assert_eq!(req.headers["authorization"], "Bearer test-key");
}

#[tokio::test]
async fn honours_retry_after_and_reports_retries() {
    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::rate_limited(1)).push(Reply::text("ok"));
    let retries = Arc::new(Mutex::new(Vec::new()));
    let r2 = retries.clone();
    let c = client(&fake.base_url(), 2, Duration::from_secs(5));
    let t0 = Instant::now();
    let r = c
        .chat(request(false), &move |e| {
            if let StreamEvent::Retrying { delay, .. } = e {
                r2.lock().unwrap().push(delay);
            }
        })
        .await
        .unwrap();
    assert_eq!(r.content.as_deref(), Some("ok"));
    assert_eq!(
        *retries.lock().unwrap(),
        vec![Duration::from_secs(1)],
        "Retry-After, not the 5 ms backoff"
    );
    assert!(t0.elapsed() >= Duration::from_secs(1));
}

#[tokio::test]
async fn a_hanging_server_times_out_and_is_retried() {
    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::hang()).push(Reply::text("second try"));
    let c = client(&fake.base_url(), 1, Duration::from_millis(300));
    let r = c.chat(request(false), &|_| {}).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("second try"));
    fake.push(Reply::hang());
    let c = client(&fake.base_url(), 0, Duration::from_millis(300));
    let e = c.chat(request(false), &|_| {}).await.unwrap_err();
    assert!(matches!(e, LlmError::Timeout { .. }), "{e}");
}

#[tokio::test]
async fn a_refused_connection_is_retried_then_reported() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = client(
        &format!("http://127.0.0.1:{port}/v1"),
        2,
        Duration::from_secs(2),
    );
    let attempts = Arc::new(Mutex::new(0));
    let a2 = attempts.clone();
    let e = c
        .chat(request(false), &move |e| {
            if matches!(e, StreamEvent::Retrying { .. }) {
                *a2.lock().unwrap() += 1;
            }
        })
        .await
        .unwrap_err();
    assert!(matches!(e, LlmError::Connect { .. }), "{e}");
    assert_eq!(*attempts.lock().unwrap(), 2);
}

#[tokio::test]
async fn a_malformed_stream_is_a_decode_error_not_a_panic() {
    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::raw_sse([
        r#"{"choices":[{"delta":{"content":"par"}}]}"#,
        "{not json",
    ]));
    let c = client(&fake.base_url(), 3, Duration::from_secs(5));
    let e = c.chat(request(true), &|_| {}).await.unwrap_err();
    assert!(matches!(e, LlmError::Decode(_)), "{e}");
    assert_eq!(fake.requests().len(), 1, "a decode error is not retried");
}

fn recorder() -> (
    Arc<Mutex<Vec<StreamEvent>>>,
    impl Fn(StreamEvent) + Send + Sync,
) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    (events, move |e| ev.lock().unwrap().push(e))
}

/// The text a consumer shows when it honours `Discard`.
fn shown(events: &[StreamEvent]) -> String {
    let mut text = String::new();
    for e in events {
        match e {
            StreamEvent::ContentDelta(t) => text.push_str(t),
            StreamEvent::Discard => text.clear(),
            _ => {}
        }
    }
    text
}

/// llama.cpp ends a stream with an error event when the output breaks its tool-call grammar:
/// the call is retried although text was already handed on, and the consumer is told to drop
/// that text first, so nothing is shown twice and no half answer passes for the answer.
#[tokio::test]
async fn a_stream_that_ends_in_an_error_event_is_retried_after_a_discard() {
    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::raw_sse([
        r#"{"choices":[{"delta":{"content":"half an "}}]}"#,
        r#"{"error":{"code":500,"message":"Failed to parse input at pos 12: </tool_call>","type":"server_error"}}"#,
    ]))
    .push(Reply::text("the whole answer"));
    let (events, on_event) = recorder();
    let c = client(&fake.base_url(), 3, Duration::from_secs(5));
    let r = c.chat(request(true), &on_event).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("the whole answer"));
    let events = events.lock().unwrap().clone();
    let discard = events
        .iter()
        .position(|e| *e == StreamEvent::Discard)
        .expect("a discard");
    assert!(
        matches!(
            events[discard + 1],
            StreamEvent::Retrying { attempt: 1, .. }
        ),
        "{events:?}"
    );
    assert_eq!(shown(&events), "the whole answer");
    assert_eq!(fake.requests().len(), 2);
}

/// A stream that stops without `[DONE]` and without a finish reason is cut short, not a short
/// answer: it is retried, and once the retries are spent it is an error.
#[tokio::test]
async fn a_truncated_stream_is_a_retryable_error_not_a_short_answer() {
    let fake = FakeModel::start().await.unwrap();
    let cut = || {
        Reply::raw_sse([
            r#"{"choices":[{"delta":{"content":"I will now"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"terminal","arguments":"{\"comm"}}]}}]}"#,
        ])
    };
    fake.push(cut()).push(Reply::text("done"));
    let (events, on_event) = recorder();
    let c = client(&fake.base_url(), 1, Duration::from_secs(5));
    let r = c.chat(request(true), &on_event).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("done"));
    assert!(r.tool_calls.is_empty(), "{r:?}");
    assert_eq!(shown(&events.lock().unwrap()), "done");

    fake.push(cut());
    let c = client(&fake.base_url(), 0, Duration::from_secs(5));
    let e = c.chat(request(true), &|_| {}).await.unwrap_err();
    assert!(matches!(e, LlmError::Stream { .. }), "{e}");
    assert!(e.to_string().contains("before [DONE]"), "{e}");
    assert_eq!(fake.requests().len(), 3);
}

/// Some servers end with a finish reason and never send `[DONE]`: that answer is whole.
#[tokio::test]
async fn a_finish_reason_without_done_is_a_whole_answer() {
    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::raw_sse([
        r#"{"choices":[{"delta":{"content":"all of it"}}]}"#,
        r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#,
    ]));
    let c = client(&fake.base_url(), 0, Duration::from_secs(5));
    let r = c.chat(request(true), &|_| {}).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("all of it"));
    assert_eq!(fake.requests().len(), 1);
}

/// A 500 saying the output did not parse gets one retry even with `max_retries = 0`; an
/// ordinary 500 does not, and the parse failure gets only the one.
#[tokio::test]
async fn a_parse_failure_500_is_retried_once_even_without_retries() {
    let fake = FakeModel::start().await.unwrap();
    let parse_failure = || Reply::error(500, "Failed to parse input at pos 184: <tool_call>");
    let c = client(&fake.base_url(), 0, Duration::from_secs(5));

    fake.push(parse_failure()).push(Reply::text("parsed"));
    let r = c.chat(request(false), &|_| {}).await.unwrap();
    assert_eq!(r.content.as_deref(), Some("parsed"));
    assert_eq!(fake.requests().len(), 2);

    fake.push(parse_failure()).push(parse_failure());
    let e = c.chat(request(false), &|_| {}).await.unwrap_err();
    assert!(e.is_output_parse_failure(), "{e}");
    assert_eq!(fake.requests().len(), 4, "one retry, not more");

    fake.push(Reply::error(500, "CUDA error: out of memory"))
        .push(Reply::text("never asked"));
    let e = c.chat(request(false), &|_| {}).await.unwrap_err();
    assert!(matches!(e, LlmError::Http { status: 500, .. }), "{e}");
    assert_eq!(
        fake.requests().len(),
        5,
        "an ordinary 500 as max_retries says"
    );
}

/// A context overflow is neither retried nor a parse failure: the caller must shorten the
/// prompt.
#[tokio::test]
async fn a_context_overflow_is_reported_at_once() {
    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::error(
        400,
        "request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it",
    ));
    let c = client(&fake.base_url(), 3, Duration::from_secs(5));
    let e = c.chat(request(true), &|_| {}).await.unwrap_err();
    assert!(e.is_context_overflow(), "{e}");
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn plain_json_answer_to_a_stream_request_and_object_arguments() {
    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::raw_json(
        r#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[{"id":"x","type":"function","function":{"name":"list_dir","arguments":{"path":"."}}}]}}]}"#,
    ));
    let c = client(&fake.base_url(), 0, Duration::from_secs(5));
    let r = c.chat(request(true), &|_| {}).await.unwrap();
    assert_eq!(
        r.tool_calls,
        vec![ToolCall::new("x", "list_dir", r#"{"path":"."}"#)]
    );
    assert_eq!(r.usage, None);
}

#[tokio::test]
async fn lists_models() {
    let fake = FakeModel::start().await.unwrap();
    fake.set_models(&["a", "b"]);
    let c = client(&fake.base_url(), 0, Duration::from_secs(5));
    assert_eq!(c.list_models().await.unwrap(), ["a", "b"]);
    fake.require_key("other");
    assert!(matches!(
        c.list_models().await,
        Err(LlmError::Http { status: 401, .. })
    ));
}

/// Each server's way of stating the window, read over real HTTP from the fake model.
#[tokio::test]
async fn context_length_from_each_servers_metadata() {
    let fake = FakeModel::start().await.unwrap();
    fake.set_models(&["openrouter/m", "nested/m", "vllm-m", "bare"]);
    fake.set_model_info(
        "openrouter/m",
        serde_json::json!({"context_length": 131072}),
    );
    fake.set_model_info(
        "nested/m",
        serde_json::json!({"top_provider": {"context_length": 65536}}),
    );
    fake.set_model_info("vllm-m", serde_json::json!({"max_model_len": 32768}));
    let c = client(&fake.base_url(), 0, Duration::from_secs(5));
    assert_eq!(c.context_length("openrouter/m").await, Some(131072));
    assert_eq!(c.context_length("nested/m").await, Some(65536));
    assert_eq!(c.context_length("vllm-m").await, Some(32768));
    assert_eq!(
        c.context_length("bare").await,
        None,
        "nothing stated anywhere"
    );
    assert_eq!(c.context_length("unlisted").await, None);

    // llama.cpp: /props at the root, the window the server allocated, wins over the trained
    // length of its single /models entry (listed under its file name, whatever the request).
    let llama = FakeModel::start().await.unwrap();
    llama.set_models(&["/models/qwen3-8b.gguf"]);
    llama.set_model_info(
        "/models/qwen3-8b.gguf",
        serde_json::json!({"meta": {"n_ctx_train": 40960}}),
    );
    let c = client(&llama.base_url(), 0, Duration::from_secs(5));
    assert_eq!(
        c.context_length("qwen3").await,
        Some(40960),
        "without /props"
    );
    llama.set_props(serde_json::json!({"n_ctx": 4096}));
    assert_eq!(c.context_length("qwen3").await, Some(4096));
    llama.set_props(
        serde_json::json!({"default_generation_settings": {"n_ctx": 8192}, "n_ctx": 4096}),
    );
    assert_eq!(c.context_length("qwen3").await, Some(8192));

    // Ollama: /api/show, a num_ctx parameter before the architecture's context length.
    let ollama = FakeModel::start().await.unwrap();
    ollama.set_models(&["llama3.2", "qwen3"]);
    let c = client(&ollama.base_url(), 0, Duration::from_secs(5));
    ollama.set_ollama_show(serde_json::json!({
        "model_info": {"general.architecture": "llama", "llama.context_length": 131072}
    }));
    assert_eq!(c.context_length("llama3.2").await, Some(131072));
    ollama.set_ollama_show(serde_json::json!({
        "parameters": "stop \"<|eot_id|>\"\nnum_ctx 16384",
        "model_info": {"general.architecture": "llama", "llama.context_length": 131072}
    }));
    assert_eq!(c.context_length("llama3.2").await, Some(16384));
}

/// Best effort: a server that refuses, or refuses the key, means "unknown", not an error.
#[tokio::test]
async fn context_length_is_none_when_the_server_does_not_answer() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = client(
        &format!("http://127.0.0.1:{port}/v1"),
        3,
        Duration::from_secs(2),
    );
    assert_eq!(c.context_length("m").await, None);

    let fake = FakeModel::start().await.unwrap();
    fake.set_model_info("fake-model", serde_json::json!({"context_length": 8192}));
    fake.require_key("another-key");
    let c = client(&fake.base_url(), 0, Duration::from_secs(5));
    assert_eq!(c.context_length("fake-model").await, None);

    // A server that takes the connection and never answers: the lookup gives up.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            open.push(conn);
        }
    });
    let mut cfg = ClientConfig::new(format!("http://{addr}/v1"));
    cfg.discovery_timeout = Duration::from_millis(200);
    let c = Client::new(cfg).unwrap();
    assert_eq!(c.context_length("m").await, None);
    held.abort();
}
