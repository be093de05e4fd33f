//! The remote follower against a server whose feed reports a decision without its result:
//! the result is read from `…/result`, and when that read fails the decision is not lost
//! with the cursor moving on — it is kept and read again until the wait is ready. A real
//! store and a real HTTP server on loopback (a scripted stand-in for the remote inbox).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};
use tern_hooks::HookBus;
use tern_store::{NewSession, NewWait, Store, WaitKind, WaitStatus};
use tern_waits::client::BoxFuture;
use tern_waits::remote::{RemoteFollower, RemoteInbox};
use tern_waits::resume::{Deliver, ResumeError, Resumed, Resumer, TurnRunner};
use tokio_util::sync::CancellationToken;

/// Never called: the test stops at the wait becoming ready.
struct NoRunner;

impl TurnRunner for NoRunner {
    fn run_resume(
        &self,
        _session_id: String,
        _input: String,
        _deliver: Option<Deliver>,
    ) -> BoxFuture<'_, Result<Resumed, ResumeError>> {
        Box::pin(async { Err(ResumeError::Failed("no turns in this test".into())) })
    }
}

#[derive(Default)]
struct Remote {
    result_reads: AtomicUsize,
}

/// The feed: the first page reports `req-1` decided but carries no result; every later
/// page is empty.
async fn decisions(Query(q): Query<Vec<(String, String)>>) -> Json<Value> {
    if q.iter().any(|(k, _)| k == "after") {
        // A long-poll that ends without news (short, to keep the test quick).
        tokio::time::sleep(Duration::from_millis(200)).await;
        return Json(json!({"items": [], "nextCursor": "c1"}));
    }
    Json(json!({
        "items": [{"requestId": "req-1", "kind": "approval", "status": "decided"}],
        "nextCursor": "c1",
    }))
}

/// The result read fails the first two times (a flaky link), then answers.
async fn result(State(remote): State<Arc<Remote>>) -> Response {
    if remote.result_reads.fetch_add(1, Ordering::SeqCst) < 2 {
        return (StatusCode::SERVICE_UNAVAILABLE, "try later").into_response();
    }
    Json(json!({
        "requestId": "req-1",
        "outcome": {"type": "APPROVE"},
        "decidedBy": "alice",
    }))
    .into_response()
}

#[tokio::test]
async fn a_decision_whose_result_cannot_be_read_at_first_is_not_skipped() {
    let remote = Arc::new(Remote::default());
    let app = Router::new()
        .route("/api/decisions", get(decisions))
        .route("/api/approval-requests/req-1/result", get(result))
        .with_state(remote.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("tern.db")).await.unwrap();
    store
        .create_session(NewSession {
            id: Some("s1".into()),
            source: "api".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let (wait, _) = store
        .create_wait(&NewWait {
            session_id: "s1",
            idem_key: "tern-wait:s1:call_a",
            tool_call_id: Some("call_a"),
            kind: WaitKind::Approval,
            request: r#"{"kind":"approval","summary":"Deploy"}"#,
        })
        .await
        .unwrap();
    store.set_wait_request(&wait.id, "req-1").await.unwrap();

    let hooks = Arc::new(HookBus::new());
    let resumer = Arc::new(Resumer::new(
        store.clone(),
        hooks.clone(),
        Arc::new(NoRunner),
    ));
    let stop = CancellationToken::new();
    let follower = RemoteFollower::new(
        store.clone(),
        Arc::new(RemoteInbox::new(&url, "remote-key-0123456789").unwrap()),
        hooks,
        resumer,
        Duration::from_secs(1),
    )
    .spawn(stop.clone());

    // The wait must become ready; a bound only so that a broken follower fails instead of
    // hanging (nothing is asserted about how fast).
    let mut ready = None;
    for _ in 0..1200 {
        let w = store.wait(&wait.id).await.unwrap().unwrap();
        if w.status != WaitStatus::Pending {
            ready = Some(w);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.cancel();
    follower.await.unwrap();
    let w = ready.expect("the decision was skipped: the wait is still pending");
    assert_eq!(w.status, WaitStatus::Ready);
    assert_eq!(w.decided_by.as_deref(), Some("alice"));
    let result: Value = serde_json::from_str(w.result.as_deref().unwrap()).unwrap();
    assert_eq!(result["outcome"]["type"], "APPROVE");
    assert_eq!(remote.result_reads.load(Ordering::SeqCst), 3);
    // The feed went on meanwhile (the failed read did not hold the cursor back).
    assert_eq!(
        store.remote_cursor(&url).await.unwrap().as_deref(),
        Some("c1")
    );
    // Nothing is left kept once it landed.
    assert!(store.matched_unmatched().await.unwrap().is_empty());
}
