//! A new request's notification survives a `kill -9` of the gateway: the outbox row is
//! committed with the request, and the next gateway on the same `$TERN_HOME` delivers it,
//! signed. Real processes, a real receiver on loopback.

use crate::common;

use std::time::Duration;

use common::{Env, Running, http_post};
use serde_json::{Value, json};

const KEY: &str = "notify-test-key-0123456789";
const SECRET: &str = "notify-secret-0123456789";

/// An inbox-only gateway with the server key [`KEY`], logging each delivery attempt.
fn start(env: &Env) -> Running {
    env.gateway_with(
        &["--inbox-only"],
        &[
            ("TERN_SERVER_KEY", KEY),
            ("TERN_LOG", "info,tern_gateway=debug"),
        ],
    )
}

async fn post(url: &str, body: Value) -> Value {
    let (status, v) = http_post(url, KEY, body).await;
    assert_eq!(status, 201);
    v
}

#[tokio::test]
async fn a_notification_queued_before_a_kill_9_is_delivered_by_the_next_gateway() {
    let env = Env::new();
    // A port with nobody listening yet: every delivery attempt of the first gateway fails.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    env.config(&format!(
        "[[inbox.notify]]\nurl = \"http://127.0.0.1:{port}/hook\"\nsecret = \"{SECRET}\"\n\
         max_attempts = 100\nretry_base_ms = 100\n"
    ));

    let mut first = start(&env);
    let task = post(
        &format!("{}/api/tasks", first.url),
        json!({"name": "deploy", "projectName": "default"}),
    )
    .await;
    let created = post(
        &format!("{}/api/approval-requests", first.url),
        json!({"projectName": "default", "taskId": task["id"], "summary": "Deploy v2?"}),
    )
    .await;
    let request_id = created["eventId"].as_str().unwrap().to_owned();
    // Let the first gateway try (and fail) at least once, then kill it outright.
    tern_test_support::eventually("a failed delivery attempt", async || {
        first
            .logs()
            .contains("inbox notification attempt failed")
            .then_some(())
    })
    .await;
    first.child.kill().unwrap();
    first.child.wait().unwrap();

    // Now a receiver listens on that port.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send((headers, body.to_vec()));
                    axum::http::StatusCode::OK
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let second = start(&env);
    let (headers, body) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("the restarted gateway delivered nothing")
        .unwrap();
    let timestamp: i64 = headers["x-tern-timestamp"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        headers["x-tern-signature"].to_str().unwrap(),
        tern_hooks::webhook_signature(SECRET, timestamp, &body),
        "signed with the configured secret"
    );
    let sent: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(sent["type"], "inbox.request.created");
    assert_eq!(sent["requestId"], request_id.as_str());
    assert_eq!(sent["summary"], "Deploy v2?");
    assert!(
        sent["url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/inbox/requests/{request_id}")),
        "{sent}"
    );
    // Delivered once: no second POST for the same request follows.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(rx.try_recv().is_err(), "delivered twice");
    drop(second);
}
