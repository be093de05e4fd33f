//! Compaction through the HTTP API: `POST /api/sessions/{id}/compact`, the session's
//! `context`, and `GET …/messages?all=true` showing what a compaction took out.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tern_agent::{Agent, AgentSettings};
use tern_fake_model::{FakeModel, Gate, Reply};
use tern_gateway::{GatewaySettings, auth};
use tern_llm::{Client, ClientConfig};
use tern_tools::{Registry, ToolLimits};

struct Gw {
    _dir: tempfile::TempDir,
    url: String,
    key: String,
    other_key: String,
    fake: FakeModel,
    http: reqwest::Client,
}

/// A gateway whose model has a 16,384-token window: a few long answers fill it.
async fn start() -> Gw {
    let dir = tempfile::tempdir().unwrap();
    let (store, work) = common::open(dir.path()).await;
    let key = auth::create_key(&store, "test").await.unwrap();
    let other_key = auth::create_key(&store, "other").await.unwrap();
    let fake = FakeModel::start().await.unwrap();
    let mut cfg = ClientConfig::new(fake.base_url());
    cfg.backoff_base = Duration::from_millis(5);
    cfg.max_retries = 0;
    let agent = Arc::new(Agent::new(
        store.clone(),
        Ok(Client::new(cfg).unwrap()),
        Arc::new(Registry::builtin()),
        AgentSettings {
            model: "fake-model".into(),
            max_iterations: 10,
            stream: false,
            system_prompt: None,
            limits: ToolLimits::default(),
            loop_guard: Default::default(),
            context_length: Some(16384),
            compaction: tern_agent::CompactionSettings {
                // Only on demand in these tests.
                threshold: 1.0,
                ..Default::default()
            },
        },
    ));
    let gw = common::gateway(
        agent,
        GatewaySettings {
            toolsets: vec!["terminal".into(), "file".into()],
            model: "fake-model".into(),
            ..common::settings(work)
        },
    );
    let (url, _) = common::serve(&gw).await;
    Gw {
        _dir: dir,
        url,
        key,
        other_key,
        fake,
        http: reqwest::Client::new(),
    }
}

impl Gw {
    async fn send(&self, key: &str, method: reqwest::Method, path: &str) -> (u16, Value) {
        let mut rb = self
            .http
            .request(method.clone(), format!("{}{path}", self.url))
            .bearer_auth(key);
        if method == reqwest::Method::POST {
            rb = rb.json(&json!({}));
        }
        let r = rb.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send(&self.key, reqwest::Method::GET, path).await
    }

    async fn post(&self, path: &str) -> (u16, Value) {
        self.send(&self.key, reqwest::Method::POST, path).await
    }

    async fn chat(&self, id: &str, message: &str) {
        let r = self
            .http
            .post(format!("{}/api/sessions/{id}/chat", self.url))
            .bearer_auth(&self.key)
            .json(&json!({ "message": message }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }

    /// A session with the task and `turns` exchanges of long answers.
    async fn long_session(&self, turns: usize) -> String {
        let r = self
            .http
            .post(format!("{}/api/sessions", self.url))
            .bearer_auth(&self.key)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        let id = r.json::<Value>().await.unwrap()["session"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        for i in 0..turns {
            self.fake.push(Reply::text(format!(
                "answer {i}: {}",
                "lorem ipsum ".repeat(300)
            )));
            let input = if i == 0 {
                "THE TASK: keep the lighthouse running".to_owned()
            } else {
                format!("question {i}")
            };
            self.chat(&id, &input).await;
        }
        id
    }
}

fn summary() -> Reply {
    Reply::text(
        "## Goal\nkeep the lighthouse running\n## Progress\nanswered questions 1-3\n\
         ## Next steps\nanswer the latest message",
    )
}

#[tokio::test]
async fn compact_on_demand_keeps_the_task_and_shows_the_rest_with_all() {
    let g = start().await;
    let id = g.long_session(5).await;
    let (s, v) = g.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(s, 200, "{v}");
    let before = v["session"]["context"].clone();
    assert_eq!(before["context_length"], 16384, "{v}");
    assert_eq!(before["context_length_source"], "configured");
    assert_eq!(before["compactions"], 0);
    let before_tokens = before["prompt_tokens"].as_u64().unwrap();

    g.fake.push(summary());
    let (s, v) = g.post(&format!("/api/sessions/{id}/compact")).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["status"], "compacted", "{v}");
    assert_eq!(v["object"], "hermes.session.compact");
    assert!(v["messages_compacted"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["context"]["compactions"], 1, "{v}");
    assert!(
        v["context"]["prompt_tokens"].as_u64().unwrap() < before_tokens,
        "{v} vs {before_tokens}"
    );

    // What the model sees: the task, the summary marked as such, the latest exchange.
    let (_, active) = g.get(&format!("/api/sessions/{id}/messages")).await;
    let active = active["data"].as_array().unwrap().clone();
    assert_eq!(
        active[0]["content"],
        "THE TASK: keep the lighthouse running"
    );
    let summaries: Vec<&Value> = active
        .iter()
        .filter(|m| m["compaction_id"].is_i64())
        .collect();
    assert_eq!(summaries.len(), 1, "{active:#?}");
    assert!(
        summaries[0]["content"]
            .as_str()
            .unwrap()
            .contains("keep the lighthouse running"),
        "{active:#?}"
    );
    assert!(active.iter().all(|m| m["compacted"] == false));
    assert!(
        active
            .iter()
            .any(|m| m["content"].as_str().unwrap_or("").starts_with("answer 4:")),
        "{active:#?}"
    );
    assert!(
        !active
            .iter()
            .any(|m| m["content"].as_str().unwrap_or("").starts_with("answer 1:")),
        "{active:#?}"
    );

    // Everything stays stored: with ?all=true the compacted messages come back, marked.
    let (s, all) = g
        .get(&format!("/api/sessions/{id}/messages?all=true"))
        .await;
    assert_eq!(s, 200, "{all}");
    let data = all["data"].as_array().unwrap();
    assert_eq!(data.len(), 10, "{all:#?}");
    assert!(
        data.iter().any(|m| m["compacted"] == true
            && m["content"].as_str().unwrap_or("").starts_with("answer 1:")),
        "{all:#?}"
    );
    let compactions = all["compactions"].as_array().unwrap();
    assert_eq!(compactions.len(), 1);
    assert!(
        compactions[0]["summary"]
            .as_str()
            .unwrap()
            .contains("## Goal")
    );
    assert_eq!(compactions[0]["reason"], "manual", "{all}");

    // A bad flag is a clear 400, not a guess.
    let (s, v) = g
        .get(&format!("/api/sessions/{id}/messages?all=maybe"))
        .await;
    assert_eq!(s, 400, "{v}");
}

#[tokio::test]
async fn compact_is_scoped_refused_when_busy_and_a_failure_changes_nothing() {
    let g = start().await;
    let id = g.long_session(4).await;

    // Another key's session is not found, as for every session endpoint.
    let (s, _) = g
        .send(
            &g.other_key,
            reqwest::Method::POST,
            &format!("/api/sessions/{id}/compact"),
        )
        .await;
    assert_eq!(s, 404);
    let (s, v) = g.post("/api/sessions/nope/compact").await;
    assert_eq!(s, 404, "{v}");

    // The summary call fails: 502, and the transcript is as it was.
    let (_, before) = g.get(&format!("/api/sessions/{id}/messages")).await;
    g.fake
        .push(Reply::error(400, "the model does not like this"));
    let (s, v) = g.post(&format!("/api/sessions/{id}/compact")).await;
    assert_eq!(s, 502, "{v}");
    assert_eq!(v["error"]["code"], "compaction_failed", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nothing changed"),
        "{v}"
    );
    let (_, after) = g.get(&format!("/api/sessions/{id}/messages")).await;
    assert_eq!(before, after);

    // While a turn runs: 409, and the turn is not disturbed.
    let gate = Gate::new();
    g.fake.push(Reply::text("held answer").held(&gate));
    let seen = g.fake.requests().len();
    let chat = tokio::spawn({
        let http = g.http.clone();
        let url = format!("{}/api/sessions/{id}/chat", g.url);
        let key = g.key.clone();
        async move {
            http.post(url)
                .bearer_auth(key)
                .json(&json!({"message": "one more"}))
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    g.fake
        .wait_requests(seen + 1, Duration::from_secs(30))
        .await
        .unwrap();
    let (s, v) = g.post(&format!("/api/sessions/{id}/compact")).await;
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["error"]["code"], "session_busy", "{v}");
    gate.open();
    assert_eq!(chat.await.unwrap(), 200);

    // A session that is only the task and one exchange has nothing to compact.
    let short = g.long_session(1).await;
    let (s, v) = g.post(&format!("/api/sessions/{short}/compact")).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["status"], "nothing_to_compact", "{v}");
}
