//! The decisions feed (`GET /api/decisions`, tern's extension) over real HTTP: owner
//! scoping, resuming from a cursor — also after the gateway restarts on the same database —
//! the long-poll answering when a decision lands, and bad parameters.

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tern_gateway::{Gateway, auth};
use tern_inbox::Outcome;

struct Gw {
    gw: Arc<Gateway>,
    url: String,
    http: reqwest::Client,
    server: tokio::task::JoinHandle<()>,
}

async fn start(dir: &Path) -> Gw {
    let gw = common::inbox_gateway(dir).await;
    let (url, server) = common::serve(&gw).await;
    Gw {
        gw,
        url,
        http: reqwest::Client::new(),
        server,
    }
}

impl Gw {
    async fn get(&self, key: &str, path: &str) -> (u16, Value) {
        let r = self
            .http
            .get(format!("{}{path}", self.url))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        common::status_json(r).await
    }

    async fn post(&self, key: &str, path: &str, body: Value) -> Value {
        let r = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
        r.json().await.unwrap()
    }

    /// A task and a pending approval request of `key`; returns the request id.
    async fn ask(&self, key: &str) -> String {
        let task = self
            .post(
                key,
                "/api/tasks",
                json!({"name": "t", "projectName": "default"}),
            )
            .await;
        let created = self
            .post(
                key,
                "/api/approval-requests",
                json!({"projectName": "default", "taskId": task["id"], "summary": "Deploy?"}),
            )
            .await;
        created["eventId"].as_str().unwrap().to_owned()
    }

    async fn decide(&self, request_id: &str) {
        let outcome: Outcome = serde_json::from_value(json!({"type": "APPROVE"})).unwrap();
        self.gw
            .inbox
            .decide_approval(request_id, outcome, "ann")
            .await
            .unwrap();
    }
}

fn ids(page: &Value) -> Vec<&str> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["requestId"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn each_key_sees_its_own_decisions_and_resumes_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let a = start(dir.path()).await;
    let store = a.gw.store.clone();
    let key = auth::create_key(&store, "agent-a").await.unwrap();
    let other = auth::create_key(&store, "agent-b").await.unwrap();

    let first = a.ask(&key).await;
    let theirs = a.ask(&other).await;
    a.decide(&first).await;
    a.decide(&theirs).await;

    let (status, page) = a.get(&key, "/api/decisions").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(ids(&page), [&first]);
    let item = &page["items"][0];
    assert_eq!(item["kind"], "approval");
    assert_eq!(item["status"], "decided");
    assert_eq!(item["result"]["outcome"]["type"], "APPROVE");
    assert_eq!(item["result"]["decidedBy"], "ann");
    let (_, page_b) = a.get(&other, "/api/decisions").await;
    assert_eq!(ids(&page_b), [&theirs]);

    // Another request withdrawn, then the gateway restarts on the same database: the
    // cursor from before still says where to go on.
    let cursor = page["nextCursor"].as_str().unwrap().to_owned();
    let second = a.ask(&key).await;
    a.post(
        &key,
        &format!("/api/approval-requests/{second}/withdraw"),
        json!({"reason": "done another way"}),
    )
    .await;
    a.server.abort();
    drop(a);

    let b = start(dir.path()).await;
    let (status, page) = b.get(&key, &format!("/api/decisions?after={cursor}")).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(ids(&page), [&second]);
    assert_eq!(page["items"][0]["status"], "withdrawn");
    assert_eq!(page["items"][0]["result"]["reason"], "done another way");
    let next = page["nextCursor"].as_str().unwrap();
    let (_, empty) = b.get(&key, &format!("/api/decisions?after={next}")).await;
    assert!(ids(&empty).is_empty());
    assert_eq!(empty["nextCursor"], next);
}

#[tokio::test]
async fn the_long_poll_answers_when_a_decision_lands() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let key = auth::create_key(&gw.gw.store, "agent-a").await.unwrap();
    let request = gw.ask(&key).await;
    let (_, start_page) = gw.get(&key, "/api/decisions").await;
    assert!(ids(&start_page).is_empty());
    let cursor = start_page["nextCursor"].as_str().unwrap().to_owned();

    let url = format!("{}/api/decisions?after={cursor}&wait=60", gw.url);
    let http = gw.http.clone();
    let poll_key = key.clone();
    let mut poll = tokio::spawn(async move {
        let r = http.get(url).bearer_auth(poll_key).send().await.unwrap();
        common::status_json(r).await
    });
    // The poll has not answered: nothing was settled. (It waits up to 60 s; only its
    // answering *before* the decision would be wrong, which this checks for a moment.)
    let early = tokio::time::timeout(Duration::from_millis(300), &mut poll).await;
    assert!(
        early.is_err(),
        "the long-poll answered with nothing settled"
    );
    gw.decide(&request).await;
    let (status, page) = poll.await.unwrap();
    assert_eq!(status, 200, "{page}");
    assert_eq!(ids(&page), [&request]);
}

#[tokio::test]
async fn an_idle_long_poll_ends_with_no_items_and_a_usable_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let key = auth::create_key(&gw.gw.store, "agent-a").await.unwrap();
    let (status, page) = gw.get(&key, "/api/decisions?wait=1").await;
    assert_eq!(status, 200, "{page}");
    assert!(ids(&page).is_empty());
    let cursor = page["nextCursor"].as_str().unwrap();
    let request = gw.ask(&key).await;
    gw.decide(&request).await;
    let (_, page) = gw
        .get(&key, &format!("/api/decisions?after={cursor}&wait=1"))
        .await;
    assert_eq!(ids(&page), [&request]);
}

#[tokio::test]
async fn bad_parameters_and_no_key_answer_in_pump_up_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start(dir.path()).await;
    let key = auth::create_key(&gw.gw.store, "agent-a").await.unwrap();
    for (query, code) in [
        ("after=nonsense", "invalid_cursor"),
        ("wait=soon", "invalid_wait"),
        ("limit=-1", "invalid_limit"),
    ] {
        let (status, body) = gw.get(&key, &format!("/api/decisions?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["code"], code, "{body}");
    }
    let r = gw
        .http
        .get(format!("{}/api/decisions", gw.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    common::assert_json_error(r).await;
}
