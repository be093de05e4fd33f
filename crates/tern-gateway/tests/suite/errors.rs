//! What the session API tells clients when something is wrong: a type error said as one, the
//! whole cause of a model failure, and no server paths in a 503.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tern_agent::{Agent, AgentSettings};
use tern_gateway::{GatewaySettings, auth};
use tern_llm::{Client, ClientConfig};
use tern_tools::{Registry, ToolLimits};

struct Gw {
    _dir: tempfile::TempDir,
    url: String,
    key: String,
    http: reqwest::Client,
}

/// A gateway whose agent talks to `llm` (or has the configuration error it holds).
async fn start(dir: tempfile::TempDir, llm: Result<Client, String>) -> Gw {
    let (store, work) = common::open(dir.path()).await;
    let key = auth::create_key(&store, "test").await.unwrap();
    let agent = Arc::new(Agent::new(
        store,
        llm,
        Arc::new(Registry::builtin()),
        AgentSettings {
            model: "fake-model".into(),
            max_iterations: 4,
            stream: false,
            system_prompt: None,
            limits: ToolLimits::default(),
            loop_guard: Default::default(),
            context_length: None,
            compaction: Default::default(),
        },
    ));
    let gw = common::gateway(
        agent,
        GatewaySettings {
            model: "fake-model".into(),
            ..common::settings(work)
        },
    );
    let (url, _) = common::serve(&gw).await;
    Gw {
        _dir: dir,
        url,
        key,
        http: reqwest::Client::new(),
    }
}

impl Gw {
    async fn post(&self, path: &str, body: Value) -> (u16, Value, String) {
        let r = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(&self.key)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        // An SSE stream is no JSON: `Null` then.
        let v = serde_json::from_str(&text).unwrap_or(Value::Null);
        (status, v, text)
    }

    async fn new_session(&self) -> String {
        let (s, v, _) = self.post("/api/sessions", json!({})).await;
        assert_eq!(s, 201, "{v}");
        v["session"]["id"].as_str().unwrap().to_owned()
    }
}

/// A loopback port nobody listens on: bound, then released.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn client(base_url: &str, max_retries: u32) -> Client {
    let mut cfg = ClientConfig::new(base_url.to_owned());
    cfg.max_retries = max_retries;
    cfg.backoff_base = Duration::from_millis(5);
    Client::new(cfg).unwrap()
}

#[tokio::test]
async fn a_message_that_is_not_a_string_is_a_type_error() {
    let fake = tern_fake_model::FakeModel::start().await.unwrap();
    let g = start(
        tempfile::tempdir().unwrap(),
        Ok(client(&fake.base_url(), 0)),
    )
    .await;
    let id = g.new_session().await;
    for (body, field, kind) in [
        (json!({"message": 42}), "message", "a number"),
        (json!({"message": ["hi"]}), "message", "an array"),
        (json!({"input": {"text": "hi"}}), "input", "an object"),
    ] {
        for path in ["chat", "chat/stream"] {
            let (s, v, _) = g
                .post(&format!("/api/sessions/{id}/{path}"), body.clone())
                .await;
            assert_eq!(s, 400, "{path} {body}: {v}");
            let err = &v["error"];
            assert_eq!(err["code"], "invalid_type", "{v}");
            assert_eq!(err["param"], field, "{v}");
            let msg = err["message"].as_str().unwrap();
            assert!(
                msg.contains(&format!("\"{field}\" must be a string")) && msg.contains(kind),
                "{msg}"
            );
        }
    }
    // Nothing ran: the model was never called.
    assert!(fake.requests().is_empty());
    // A missing message is still said as missing.
    let (s, v, _) = g.post(&format!("/api/sessions/{id}/chat"), json!({})).await;
    assert_eq!((s, &v["error"]["code"]), (400, &json!("missing_message")));
}

#[tokio::test]
async fn an_unreachable_model_gets_a_502_that_names_the_cause() {
    let url = format!("http://127.0.0.1:{}/v1", closed_port());
    let g = start(tempfile::tempdir().unwrap(), Ok(client(&url, 1))).await;
    let id = g.new_session().await;
    let (s, v, _) = g
        .post(
            &format!("/api/sessions/{id}/chat"),
            json!({"message": "hi"}),
        )
        .await;
    assert_eq!(s, 502, "{v}");
    assert_eq!(v["error"]["code"], "model_error", "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    // The top of the chain says where; only its sources say why.
    assert!(msg.contains("could not reach the model endpoint"), "{msg}");
    assert!(
        msg.to_lowercase().contains("connection refused"),
        "the cause is cut off: {msg}"
    );
}

#[tokio::test]
async fn a_503_for_a_missing_model_shows_no_server_paths() {
    let dir = tempfile::tempdir().unwrap();
    // The error a gateway without a model really has: it names its config file.
    let home = tern_config::Home::resolve(Some(dir.path().join("home")), &|_| None).unwrap();
    let eff = tern_config::load(&home, &|_| None).unwrap();
    let config_error = eff.resolved_model().unwrap_err().to_string();
    let root = home.root.display().to_string();
    assert!(config_error.contains(&root), "{config_error}");

    let g = start(dir, Err(config_error)).await;
    let id = g.new_session().await;
    let (s, v, text) = g
        .post(
            &format!("/api/sessions/{id}/chat"),
            json!({"message": "hi"}),
        )
        .await;
    assert_eq!(s, 503, "{text}");
    assert_eq!(v["error"]["code"], "model_not_configured", "{text}");
    assert!(!text.contains(&root), "a server path in the 503: {text}");
    assert!(!text.contains("/config.toml"), "{text}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("No model is configured"), "{text}");
    // The stream says it in its `error` event: the same text.
    let (_, _, text) = g
        .post(
            &format!("/api/sessions/{id}/chat/stream"),
            json!({"message": "hi"}),
        )
        .await;
    assert!(text.contains("model_not_configured"), "{text}");
    assert!(!text.contains(&root), "a server path in the stream: {text}");
}
