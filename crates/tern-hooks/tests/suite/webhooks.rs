//! Webhooks against a real HTTP server on loopback: the signature a receiver can verify,
//! retries with backoff on 5xx, 429, timeouts and refused connections, no retry on other
//! 4xx, and event filtering.

use crate::common;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use common::*;
use hmac::{KeyInit, Mac};
use tern_hooks::*;

const SECRET: &str = "receiver-secret-0123456789";

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
struct Received {
    at: Instant,
    headers: HeaderMap,
    body: Bytes,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap())
            .unwrap_or_default()
    }
}

/// What the receiver answers, in order: a delay, then a status; 200 once the script runs out.
#[derive(Default)]
struct Receiver {
    script: Mutex<VecDeque<(u64, u16)>>,
    received: Mutex<Vec<Received>>,
}

impl Receiver {
    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

async fn receive(State(rx): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    rx.received.lock().unwrap().push(Received {
        at: Instant::now(),
        headers,
        body,
    });
    let (delay_ms, status) = rx.script.lock().unwrap().pop_front().unwrap_or((0, 200));
    tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    StatusCode::from_u16(status).unwrap()
}

/// Starts a receiver on 127.0.0.1:0; returns its URL.
async fn start_receiver(script: &[(u64, u16)]) -> (String, Arc<Receiver>) {
    let rx = Arc::new(Receiver::default());
    rx.script.lock().unwrap().extend(script.iter().copied());
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(receive))
        .with_state(Arc::clone(&rx));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}/hook"), rx)
}

/// What a receiver does to verify a request, written independently of the crate's code.
fn verify(secret: &str, req: &Received) -> bool {
    let Some(hex_sig) = req.header("x-tern-signature").strip_prefix("sha256=") else {
        return false;
    };
    let Ok(sig) = hex::decode(hex_sig) else {
        return false;
    };
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(req.header("x-tern-timestamp").as_bytes());
    mac.update(b".");
    mac.update(&req.body);
    mac.verify_slice(&sig).is_ok()
}

fn session_start() -> HookEvent {
    HookEvent::SessionStart(SessionStart {
        session_id: "sess-9".to_owned(),
        source: "api".to_owned(),
        model: Some("qwen3".to_owned()),
        parent_id: None,
    })
}

#[tokio::test]
async fn receiver_verifies_the_signature_and_gets_the_event() {
    let (url, rx) = start_receiver(&[]).await;
    let bus = HookBus::from_config(&[], &[webhook(&url, SECRET, &["*"])]).unwrap();
    let before = Envelope::now(session_start()).timestamp;
    bus.emit(session_start());
    // emit returned with the delivery still to run (it runs on this thread's runtime, which
    // has not been yielded to yet).
    assert_eq!(bus.in_flight(), 1);
    assert!(bus.flush(PATIENCE).await);

    let got = rx.received();
    assert_eq!(got.len(), 1);
    let req = &got[0];
    assert_eq!(req.header("content-type"), "application/json");
    assert_eq!(req.header("x-tern-event"), "session_start");
    assert!(!req.header("x-tern-delivery").is_empty());
    let ts: i64 = req.header("x-tern-timestamp").parse().unwrap();
    assert!(ts >= before && ts < before + 10_000, "{ts} vs {before}");
    assert!(verify(SECRET, req), "signature does not verify: {req:?}");
    assert_eq!(
        req.header("x-tern-signature"),
        webhook_signature(SECRET, ts, &req.body)
    );

    // Tampering with the body, the timestamp or the secret breaks it.
    let mut tampered = req.clone();
    tampered.body = Bytes::from(
        String::from_utf8(req.body.to_vec())
            .unwrap()
            .replace("sess-9", "sess-8"),
    );
    assert!(!verify(SECRET, &tampered));
    let mut tampered = req.clone();
    tampered
        .headers
        .insert("x-tern-timestamp", (ts + 1).to_string().parse().unwrap());
    assert!(!verify(SECRET, &tampered));
    assert!(!verify("another-secret-0123456789", req));

    // The body is the envelope exactly.
    let json: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
    let envelope = Envelope {
        event: session_start(),
        timestamp: json["timestamp"].as_i64().unwrap(),
    };
    assert_eq!(req.body, envelope.to_json().as_bytes());
    assert_eq!(json["event"], "session_start");
    assert_eq!(json["model"], "qwen3");
    assert_eq!(json["parent_id"], serde_json::Value::Null);
}

#[tokio::test]
async fn server_errors_are_retried_with_backoff() {
    let (logs, _guard) = capture_logs();
    let (url, rx) = start_receiver(&[(0, 500), (0, 503)]).await;
    let mut config = webhook(&url, SECRET, &["turn_end"]);
    config.retry_base_ms = 100;
    let bus = HookBus::from_config(&[], &[config]).unwrap();
    bus.emit(turn_end());
    assert!(bus.flush(PATIENCE).await);

    let got = rx.received();
    assert_eq!(got.len(), 3, "{got:?}");
    // Backoff: 100 ms, then 200 ms, each less up to a quarter of jitter.
    let gap1 = got[1].at - got[0].at;
    let gap2 = got[2].at - got[1].at;
    assert!(gap1 >= Duration::from_millis(70), "{gap1:?}");
    assert!(gap2 >= Duration::from_millis(140), "{gap2:?}");
    // One delivery: the same id, each attempt signed for its own timestamp.
    let id = got[0].header("x-tern-delivery").to_owned();
    for req in &got {
        assert_eq!(req.header("x-tern-delivery"), id);
        assert_eq!(req.body, got[0].body);
        assert!(verify(SECRET, req));
    }
    // Nothing more arrives later: no delivery is left to send it.
    assert_eq!(bus.in_flight(), 0);
    assert_eq!(rx.received().len(), 3);
    assert!(
        !logs.text().contains("WARN"),
        "a delivery that succeeded in the end is no warning: {}",
        logs.text()
    );
}

#[tokio::test]
async fn too_many_requests_is_retried() {
    let (url, rx) = start_receiver(&[(0, 429)]).await;
    let bus = HookBus::from_config(&[], &[webhook(&url, SECRET, &["*"])]).unwrap();
    bus.emit(turn_end());
    assert!(bus.flush(PATIENCE).await);
    assert_eq!(rx.received().len(), 2);
}

#[tokio::test]
async fn a_client_error_is_not_retried() {
    let (logs, _guard) = capture_logs();
    let (url, rx) = start_receiver(&[(0, 400)]).await;
    let bus = HookBus::from_config(&[], &[webhook(&url, SECRET, &["*"])]).unwrap();
    bus.emit(turn_end());
    assert!(bus.flush(PATIENCE).await);
    assert_eq!(bus.in_flight(), 0, "no retry is pending");
    assert_eq!(rx.received().len(), 1);
    assert!(
        logs.lines_with("webhook=receiver")
            .iter()
            .any(|l| l.contains("WARN") && l.contains("400") && l.contains("not retried")),
        "{}",
        logs.text()
    );
}

#[tokio::test]
async fn attempts_stop_at_max_attempts() {
    let (logs, _guard) = capture_logs();
    let (url, rx) = start_receiver(&[(0, 500); 10]).await;
    let mut config = webhook(&url, SECRET, &["*"]);
    config.max_attempts = 3;
    let bus = HookBus::from_config(&[], &[config]).unwrap();
    bus.emit(turn_end());
    assert!(bus.flush(PATIENCE).await);
    assert_eq!(bus.in_flight(), 0, "no retry is pending");
    assert_eq!(rx.received().len(), 3);
    assert!(
        logs.lines_with("webhook=receiver")
            .iter()
            .any(|l| l.contains("WARN") && l.contains("giving up") && l.contains("500")),
        "{}",
        logs.text()
    );
}

#[tokio::test]
async fn a_slow_receiver_times_out_and_is_retried() {
    // The first answer would come after ten minutes: only the client's timeout ends that
    // attempt within the flush's bound.
    let (url, rx) = start_receiver(&[(600_000, 200)]).await;
    let mut config = webhook(&url, SECRET, &["*"]);
    config.timeout_ms = 300;
    let bus = HookBus::from_config(&[], &[config]).unwrap();
    bus.emit(turn_end());
    assert_eq!(bus.in_flight(), 1, "emit does not wait for the receiver");
    assert!(
        bus.flush(PATIENCE).await,
        "the slow attempt was never timed out"
    );
    let got = rx.received();
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[0].header("x-tern-delivery"),
        got[1].header("x-tern-delivery")
    );
}

#[tokio::test]
async fn a_refused_connection_is_retried_then_given_up() {
    let (logs, _guard) = capture_logs();
    // A port that was just free: nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let mut config = webhook(&format!("http://{addr}/hook"), SECRET, &["*"]);
    config.max_attempts = 2;
    let bus = HookBus::from_config(&[], &[config]).unwrap();
    bus.emit(turn_end());
    assert!(bus.flush(PATIENCE).await);
    assert!(
        logs.lines_with("webhook=receiver")
            .iter()
            .any(|l| l.contains("WARN") && l.contains("giving up") && l.contains("attempts=2")),
        "{}",
        logs.text()
    );
}

#[tokio::test]
async fn webhooks_get_only_their_events() {
    let (url, rx) = start_receiver(&[]).await;
    let bus = HookBus::from_config(&[], &[webhook(&url, SECRET, &["turn_end"])]).unwrap();
    bus.emit(turn_start("hi"));
    bus.emit(session_start());
    // A webhook subscribed to pre_tool_call gets it but has no say in the verdict.
    assert_eq!(bus.pre_tool_call(pre_tool("ls")).await, ToolGate::Proceed);
    assert!(bus.flush(PATIENCE).await);
    assert!(rx.received().is_empty());
    bus.emit(turn_end());
    assert!(bus.flush(PATIENCE).await);
    let got = rx.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].header("x-tern-event"), "turn_end");
}

#[tokio::test]
async fn pre_tool_call_is_posted_to_subscribed_webhooks() {
    let (url, rx) = start_receiver(&[]).await;
    let bus = HookBus::from_config(&[], &[webhook(&url, SECRET, &["pre_tool_call"])]).unwrap();
    assert_eq!(bus.pre_tool_call(pre_tool("ls")).await, ToolGate::Proceed);
    assert!(bus.flush(PATIENCE).await);
    let got = rx.received();
    assert_eq!(got.len(), 1);
    let json: serde_json::Value = serde_json::from_slice(&got[0].body).unwrap();
    assert_eq!(json["event"], "pre_tool_call");
    assert_eq!(json["call_id"], "call-1");
}

#[tokio::test]
async fn flush_reports_deliveries_still_running() {
    let (url, _rx) = start_receiver(&[(0, 500); 10]).await;
    let mut config = webhook(&url, SECRET, &["*"]);
    config.retry_base_ms = 5_000;
    let bus = HookBus::from_config(&[], &[config]).unwrap();
    bus.emit(turn_end());
    let started = Instant::now();
    assert!(!bus.flush(Duration::from_millis(300)).await);
    // It waited its whole bound before reporting (a lower bound holds however loaded the
    // machine is).
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert_eq!(bus.in_flight(), 1);
}
