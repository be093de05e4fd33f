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

#[tokio::test]
async fn a_stream_interrupted_after_output_is_not_retried() {
    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::raw_sse([
        r#"{"choices":[{"delta":{"content":"half an answer"}}]}"#,
        r#"{"error":{"code":502,"message":"upstream died"}}"#,
    ]));
    let c = client(&fake.base_url(), 3, Duration::from_secs(5));
    let e = c.chat(request(true), &|_| {}).await.unwrap_err();
    assert!(matches!(e, LlmError::Http { status: 502, .. }), "{e}");
    assert_eq!(
        fake.requests().len(),
        1,
        "text already shown must not be produced twice"
    );
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
