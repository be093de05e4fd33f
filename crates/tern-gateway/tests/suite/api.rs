//! The gateway's HTTP API over real HTTP: every endpoint and error path, SSE order, stop,
//! reset, client disconnect, the concurrency cap and the body limit.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tern_agent::{Agent, AgentSettings, HookBus};
use tern_fake_model::{FakeModel, Reply};
use tern_gateway::{GatewaySettings, auth};
use tern_llm::{Client, ClientConfig};
use tern_tools::{Registry, ToolLimits};

struct Recorder(Mutex<Vec<Value>>);

impl tern_hooks::Subscriber for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn on_event(&self, e: &tern_hooks::Envelope) {
        self.0
            .lock()
            .unwrap()
            .push(serde_json::to_value(e).unwrap());
    }
}

impl Recorder {
    fn named(&self, name: &str) -> Vec<Value> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e["event"] == name)
            .cloned()
            .collect()
    }
}

struct Gw {
    _dir: tempfile::TempDir,
    store: tern_store::Store,
    url: String,
    key: String,
    fake: FakeModel,
    rec: Arc<Recorder>,
    http: reqwest::Client,
}

async fn start_with(max_turns: usize, body_limit: usize) -> Gw {
    let dir = tempfile::tempdir().unwrap();
    let (store, work) = common::open(dir.path()).await;
    let key = auth::create_key(&store, "test").await.unwrap();
    let fake = FakeModel::start().await.unwrap();
    let mut cfg = ClientConfig::new(fake.base_url());
    cfg.backoff_base = Duration::from_millis(5);
    let rec = Arc::new(Recorder(Mutex::new(Vec::new())));
    let hooks = Arc::new(HookBus::new());
    hooks.subscribe(rec.clone());
    let agent = Arc::new(
        Agent::new(
            store.clone(),
            Ok(Client::new(cfg).unwrap()),
            Arc::new(Registry::builtin()),
            AgentSettings {
                model: "fake-model".into(),
                max_iterations: 10,
                stream: true,
                system_prompt: None,
                limits: ToolLimits::default(),
                loop_guard: Default::default(),
                context_length: None,
                compaction: Default::default(),
            },
        )
        .with_hooks(hooks),
    );
    let gw = common::gateway(
        agent,
        GatewaySettings {
            max_concurrent_turns: max_turns,
            max_body_bytes: body_limit,
            toolsets: vec!["terminal".into(), "file".into()],
            model: "fake-model".into(),
            ..common::settings(work)
        },
    );
    let (url, _) = common::serve(&gw).await;
    Gw {
        _dir: dir,
        store,
        url,
        key,
        fake,
        rec,
        http: reqwest::Client::new(),
    }
}

async fn start() -> Gw {
    start_with(8, 1 << 20).await
}

impl Gw {
    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.req_as(&self.key, method, path)
    }

    fn req_as(&self, key: &str, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(key)
    }

    /// `method path` with `key` and an optional JSON body: the status and the JSON answer.
    async fn send_as(
        &self,
        key: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut rb = self.req_as(key, method, path);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let r = rb.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .req(reqwest::Method::POST, path)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let r = self.req(reqwest::Method::GET, path).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn new_session(&self) -> String {
        let (s, v) = self.post("/api/sessions", json!({})).await;
        assert_eq!(s, 201, "{v}");
        v["session"]["id"].as_str().unwrap().to_owned()
    }

    /// Starts a chat whose tool sleeps 30 s and waits until the tool is about to run.
    async fn start_long_turn(
        &self,
        id: &str,
    ) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
        self.fake.push(Reply::tool_call(
            "long",
            "terminal",
            r#"{"command":"sleep 30"}"#,
        ));
        let before = self.rec.named("pre_tool_call").len();
        let chat = tokio::spawn(
            self.req(reqwest::Method::POST, &format!("/api/sessions/{id}/chat"))
                .json(&json!({"message": "wait"}))
                .send(),
        );
        self.wait_event("pre_tool_call", before + 1).await;
        chat
    }

    async fn wait_event(&self, name: &str, n: usize) {
        tern_test_support::eventually(&format!("{n} {name} events"), async || {
            (self.rec.named(name).len() >= n).then_some(())
        })
        .await
    }
}

#[tokio::test]
async fn health_is_open_and_everything_else_needs_a_key() {
    let g = start().await;
    let r = g
        .http
        .get(format!("{}/health", g.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        (v["status"].as_str(), v["platform"].as_str()),
        (Some("ok"), Some("tern"))
    );
    for path in ["/api/sessions", "/v1/models"] {
        let r = g.http.get(format!("{}{path}", g.url)).send().await.unwrap();
        assert_eq!(r.status(), 401);
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            v,
            json!({"error": {"message": "Invalid API key", "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})
        );
        let r = g
            .http
            .get(format!("{}{path}", g.url))
            .bearer_auth("tern_wrong")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
    }
    let (s, v) = g.get("/no/such/route").await;
    assert_eq!((s, v["error"]["code"].as_str()), (404, Some("not_found")));
}

#[tokio::test]
async fn sessions_create_list_get_patch_delete() {
    let g = start().await;
    let (s, v) = g
        .post(
            "/api/sessions",
            json!({"id": "my-session", "title": "First", "system_prompt": "Be brief."}),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    assert_eq!(v["object"], "hermes.session");
    assert_eq!(v["session"]["id"], "my-session");
    let (s, v) = g
        .post("/api/sessions", json!({"session_id": "my-session"}))
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("session_exists"))
    );
    let (s, v) = g.post("/api/sessions", json!({"id": "bad id!"})).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (400, Some("invalid_session_id"))
    );
    g.new_session().await;
    let (_, v) = g.get("/api/sessions?limit=1").await;
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"].as_array().unwrap().len(), 1);
    assert_eq!(v["has_more"], true);
    let (_, v) = g.get("/api/sessions?limit=10&offset=1").await;
    assert_eq!(
        (v["data"].as_array().unwrap().len(), v["has_more"].as_bool()),
        (1, Some(false))
    );

    let r = g
        .req(reqwest::Method::PATCH, "/api/sessions/my-session")
        .json(&json!({"title": "Renamed"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (_, v) = g.get("/api/sessions/my-session").await;
    assert_eq!(v["session"]["title"], "Renamed");
    assert_eq!(v["session"]["system_prompt"], "Be brief.");
    let r = g
        .req(reqwest::Method::PATCH, "/api/sessions/my-session")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    let r = g
        .req(reqwest::Method::DELETE, "/api/sessions/my-session")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (s, v) = g.get("/api/sessions/my-session").await;
    assert_eq!(s, 404);
    assert_eq!(
        v,
        json!({"error": {"message": "Session not found: my-session", "type": "invalid_request_error", "param": null, "code": "session_not_found"}})
    );
    assert_eq!(g.rec.named("session_end")[0]["reason"], "deleted");
}

/// The ids of the sessions `key` gets listed.
async fn listed(g: &Gw, key: &str) -> Vec<String> {
    let (s, v) = g
        .send_as(key, reqwest::Method::GET, "/api/sessions?limit=200", None)
        .await;
    assert_eq!(s, 200, "{v}");
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_session_is_its_keys_alone_and_admin_keys_see_all() {
    use reqwest::Method;
    let g = start().await;
    let other = auth::create_key(&g.store, "agent-b").await.unwrap();
    let admin = auth::create_key_of_kind(&g.store, "ops", tern_store::KeyKind::Admin)
        .await
        .unwrap();
    let (s, v) = g.post("/api/sessions", json!({"id": "a-private"})).await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = g
        .send_as(
            &other,
            Method::POST,
            "/api/sessions",
            Some(json!({"id": "b-own"})),
        )
        .await;
    assert_eq!(s, 201, "{v}");
    // A session no key created: `tern chat`, or one from before sessions had owners.
    g.store
        .create_session(tern_store::NewSession {
            id: Some("from-cli".into()),
            source: "cli".into(),
            ..Default::default()
        })
        .await
        .unwrap();

    assert_eq!(listed(&g, &g.key).await, ["a-private"]);
    assert_eq!(listed(&g, &other).await, ["b-own"]);
    let mut all = listed(&g, &admin).await;
    all.sort();
    assert_eq!(all, ["a-private", "b-own", "from-cli"]);

    // Every route answers another key's session, and a keyless one, as a missing session:
    // 404 session_not_found, which confirms nothing; and nothing changes.
    for id in ["a-private", "from-cli"] {
        let not_found = json!({"error": {"message": format!("Session not found: {id}"),
            "type": "invalid_request_error", "param": null, "code": "session_not_found"}});
        for (method, path, body) in [
            (Method::GET, format!("/api/sessions/{id}"), None),
            (Method::GET, format!("/api/sessions/{id}/messages"), None),
            (
                Method::PATCH,
                format!("/api/sessions/{id}"),
                Some(json!({"title": "mine"})),
            ),
            (
                Method::POST,
                format!("/api/sessions/{id}/chat"),
                Some(json!({"message": "hi"})),
            ),
            (
                Method::POST,
                format!("/api/sessions/{id}/chat/stream"),
                Some(json!({"message": "hi"})),
            ),
            (Method::POST, format!("/api/sessions/{id}/stop"), None),
            (Method::POST, format!("/api/sessions/{id}/reset"), None),
            (Method::DELETE, format!("/api/sessions/{id}"), None),
        ] {
            let (s, v) = g.send_as(&other, method.clone(), &path, body).await;
            assert_eq!((s, &v), (404, &not_found), "{method} {path}");
        }
        let r = g
            .req_as(&other, Method::POST, "/v1/chat/completions")
            .header("X-Hermes-Session-Id", id)
            .json(&json!({"messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{id}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v, not_found);
    }
    assert!(g.fake.requests().is_empty(), "no turn ran");
    let (_, v) = g.get("/api/sessions/a-private").await;
    assert_eq!(v["session"]["title"], Value::Null, "not renamed");
    assert_eq!(v["session"]["status"], "idle", "not reset");

    // The admin key uses any session; a reset's successor stays its owner's.
    let (s, v) = g
        .send_as(
            &admin,
            Method::PATCH,
            "/api/sessions/from-cli",
            Some(json!({"title": "seen by ops"})),
        )
        .await;
    assert_eq!(
        (s, &v["session"]["title"]),
        (200, &json!("seen by ops")),
        "{v}"
    );
    let (s, v) = g.post("/api/sessions/a-private/reset", json!({})).await;
    assert_eq!(s, 200, "{v}");
    let next = v["new_session_id"].as_str().unwrap().to_owned();
    assert_eq!(g.get(&format!("/api/sessions/{next}")).await.0, 200);
    let (s, _) = g
        .send_as(&other, Method::GET, &format!("/api/sessions/{next}"), None)
        .await;
    assert_eq!(s, 404);
    assert_eq!(
        g.send_as(&admin, Method::GET, &format!("/api/sessions/{next}"), None)
            .await
            .0,
        200
    );

    // A session /v1/chat/completions creates is the key's too.
    g.fake.push(Reply::text("Hello."));
    let r = g
        .req_as(&other, Method::POST, "/v1/chat/completions")
        .json(&json!({"messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let made = r.headers()["x-hermes-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(g.get(&format!("/api/sessions/{made}")).await.0, 404);
    let (s, _) = g
        .send_as(&other, Method::GET, &format!("/api/sessions/{made}"), None)
        .await;
    assert_eq!(s, 200);
}

#[tokio::test]
async fn chat_runs_a_turn_with_a_tool_call() {
    let g = start().await;
    let id = g.new_session().await;
    g.fake
        .push(
            Reply::tool_call("c1", "terminal", r#"{"command":"echo from-the-gateway"}"#)
                .usage(10, 2),
        )
        .push(Reply::text("It printed from-the-gateway.").usage(20, 4));
    let (s, v) = g
        .post(
            &format!("/api/sessions/{id}/chat"),
            json!({"message": "run it"}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["object"], "hermes.session.chat.completion");
    assert_eq!(
        v["message"],
        json!({"role": "assistant", "content": "It printed from-the-gateway."})
    );
    assert_eq!(
        v["usage"],
        json!({"input_tokens": 30, "output_tokens": 6, "total_tokens": 36})
    );
    let (_, m) = g.get(&format!("/api/sessions/{id}/messages")).await;
    let data = m["data"].as_array().unwrap();
    assert_eq!(data.len(), 4);
    assert_eq!(data[1]["tool_calls"][0]["function"]["name"], "terminal");
    assert!(
        data[2]["content"]
            .as_str()
            .unwrap()
            .contains("from-the-gateway")
    );
    assert_eq!(data[2]["tool_name"], "terminal");

    let (s, v) = g
        .post("/api/sessions/nope/chat", json!({"message": "x"}))
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (404, Some("session_not_found"))
    );
    let (s, v) = g
        .post(
            &format!("/api/sessions/{id}/chat"),
            json!({"message": "  "}),
        )
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (400, Some("missing_message"))
    );
    let r = g
        .req(reqwest::Method::POST, &format!("/api/sessions/{id}/chat"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn bodies_over_the_limit_get_413() {
    let g = start_with(8, 4096).await;
    let id = g.new_session().await;
    let (s, v) = g
        .post(
            &format!("/api/sessions/{id}/chat"),
            json!({"message": "x".repeat(5000)}),
        )
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (413, Some("request_too_large"))
    );
    assert!(g.fake.requests().is_empty());
    let (_, m) = g.get(&format!("/api/sessions/{id}/messages")).await;
    assert!(m["data"].as_array().unwrap().is_empty(), "nothing stored");
}

#[tokio::test]
async fn over_the_turn_cap_gets_429_with_retry_after() {
    let g = start_with(1, 1 << 20).await;
    let (a, b) = (g.new_session().await, g.new_session().await);
    // Held until the second request has been refused, however slow the machine.
    let gate = tern_fake_model::Gate::new();
    g.fake.push(Reply::text("slow").held(&gate));
    let first = g
        .req(reqwest::Method::POST, &format!("/api/sessions/{a}/chat"))
        .json(&json!({"message": "1"}))
        .send();
    let first = tokio::spawn(first);
    g.fake
        .wait_requests(1, Duration::from_secs(5))
        .await
        .unwrap();
    let r = g
        .req(reqwest::Method::POST, &format!("/api/sessions/{b}/chat"))
        .json(&json!({"message": "2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "too_many_turns");
    gate.open();
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
}

/// Parses an SSE body into (event, data) pairs.
fn sse_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter_map(|block| {
            let mut name = String::new();
            let mut data = String::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event:") {
                    name = n.trim().to_owned();
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push_str(d.trim_start());
                }
            }
            (!data.is_empty()).then(|| {
                (
                    name,
                    serde_json::from_str(&data).unwrap_or(Value::String(data)),
                )
            })
        })
        .collect()
}

#[tokio::test]
async fn chat_stream_sends_events_in_order() {
    let g = start().await;
    let id = g.new_session().await;
    g.fake
        .push(Reply::tool_call("c1", "list_dir", "{}"))
        .push(Reply::text("All listed."));
    let r = g
        .req(
            reqwest::Method::POST,
            &format!("/api/sessions/{id}/chat/stream"),
        )
        .json(&json!({"message": "list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(common::content_type_starts(&r, "text/event-stream"));
    let events = sse_events(&r.text().await.unwrap());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    let mut dedup = names.clone();
    dedup.dedup();
    assert_eq!(
        dedup,
        [
            "run.started",
            "tool.started",
            "tool.completed",
            "assistant.delta",
            "assistant.completed",
            "run.completed",
            "done"
        ]
    );
    let text: String = events
        .iter()
        .filter(|(n, _)| n == "assistant.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "All listed.");
    let completed = &events.iter().find(|(n, _)| n == "run.completed").unwrap().1;
    assert_eq!(completed["status"], "completed");
    assert_eq!(events[1].1["name"], "list_dir");
}

/// A model stream that broke off after some text is retried: the client is told to drop the
/// text so far, and the deltas after that are the whole answer.
#[tokio::test]
async fn chat_stream_says_when_streamed_text_is_discarded() {
    let g = start().await;
    let id = g.new_session().await;
    g.fake
        .push(Reply::raw_sse([
            r#"{"choices":[{"delta":{"content":"Half an ans"}}]}"#,
            r#"{"error":{"code":500,"message":"Failed to parse input at pos 11","type":"server_error"}}"#,
        ]))
        .push(Reply::text("Whole answer."));
    let r = g
        .req(
            reqwest::Method::POST,
            &format!("/api/sessions/{id}/chat/stream"),
        )
        .json(&json!({"message": "answer"}))
        .send()
        .await
        .unwrap();
    let events = sse_events(&r.text().await.unwrap());
    let mut shown = String::new();
    for (name, data) in &events {
        match name.as_str() {
            "assistant.delta" => shown.push_str(data["delta"].as_str().unwrap()),
            "assistant.discarded" => shown.clear(),
            _ => {}
        }
    }
    assert_eq!(shown, "Whole answer.", "{events:?}");
    let discarded = events
        .iter()
        .position(|(n, _)| n == "assistant.discarded")
        .unwrap();
    assert_eq!(events[discarded - 1].0, "assistant.delta", "{events:?}");
    let completed = &events
        .iter()
        .find(|(n, _)| n == "assistant.completed")
        .unwrap()
        .1;
    assert_eq!(completed["content"], "Whole answer.");
}

#[tokio::test]
async fn stop_interrupts_a_long_tool_and_says_so() {
    let g = start().await;
    let id = g.new_session().await;
    let (s, v) = g.post(&format!("/api/sessions/{id}/stop"), json!({})).await;
    assert_eq!(
        (s, v["stopped"].as_bool()),
        (200, Some(false)),
        "nothing runs yet"
    );
    g.fake
        .push(Reply::tool_call(
            "long",
            "terminal",
            r#"{"command":"sleep 30"}"#,
        ))
        .push(Reply::text("never"));
    let chat = tokio::spawn(
        g.req(reqwest::Method::POST, &format!("/api/sessions/{id}/chat"))
            .json(&json!({"message": "wait"}))
            .send(),
    );
    g.wait_event("pre_tool_call", 1).await;
    let (s, v) = g.post(&format!("/api/sessions/{id}/stop"), json!({})).await;
    assert_eq!(s, 200);
    assert_eq!(v["stopped"], true);
    assert!(v["turn_id"].is_string());
    let r = tokio::time::timeout(tern_test_support::PATIENCE, chat)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["status"], "interrupted");
    // turn_end is the turn's last event: after it, the counts are final.
    g.wait_event("turn_end", 1).await;
    let stopped = g.rec.named("agent_loop_stopped");
    assert_eq!(stopped.len(), 1);
    assert_eq!(stopped[0]["reason"], "api_stop");
    assert_eq!(stopped[0]["source"], "api");
    let (_, v) = g.post(&format!("/api/sessions/{id}/stop"), json!({})).await;
    assert_eq!(v["stopped"], false);
    assert_eq!(
        g.rec.named("agent_loop_stopped").len(),
        1,
        "no event when nothing ran"
    );
    let (_, m) = g.get(&format!("/api/sessions/{id}/messages")).await;
    assert_eq!(
        m["data"].as_array().unwrap().last().unwrap()["content"],
        "[interrupted]"
    );
}

#[tokio::test]
async fn reset_while_running_interrupts_and_starts_a_new_session() {
    let g = start().await;
    let id = g.new_session().await;
    let chat = g.start_long_turn(&id).await;
    let (s, v) = g
        .post(&format!("/api/sessions/{id}/reset"), json!({}))
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["interrupted"], true);
    let new_id = v["new_session_id"].as_str().unwrap().to_owned();
    assert_ne!(new_id, id);
    assert_eq!(v["session"]["parent_session_id"], id.as_str());
    chat.await.unwrap().unwrap();
    let (_, old) = g.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(old["session"]["status"], "ended");
    let stopped = g.rec.named("agent_loop_stopped");
    assert_eq!(stopped.len(), 1);
    assert_eq!(stopped[0]["reason"], "session_reset");
    assert_eq!(g.rec.named("session_end")[0]["reason"], "new_session");
    assert_eq!(
        g.rec.named("session_reset")[0]["new_session_id"],
        new_id.as_str()
    );
    // A reset while idle interrupts nothing.
    let (_, v) = g
        .post(&format!("/api/sessions/{new_id}/reset"), json!({}))
        .await;
    assert_eq!(v["interrupted"], false);
    assert_eq!(g.rec.named("agent_loop_stopped").len(), 1);
}

#[tokio::test]
async fn a_stream_client_that_goes_away_interrupts_the_turn() {
    let g = start().await;
    let id = g.new_session().await;
    g.fake.push(Reply::tool_call(
        "long",
        "terminal",
        r#"{"command":"sleep 30"}"#,
    ));
    let mut r = g
        .req(
            reqwest::Method::POST,
            &format!("/api/sessions/{id}/chat/stream"),
        )
        .json(&json!({"message": "wait"}))
        .send()
        .await
        .unwrap();
    let mut seen = String::new();
    tokio::time::timeout(tern_test_support::PATIENCE, async {
        while !seen.contains("tool.started") {
            let chunk = r.chunk().await.unwrap();
            let chunk = chunk.unwrap_or_else(|| panic!("the stream ended: {seen}"));
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .expect("the tool never started");
    drop(r);
    // turn_end is the turn's last event: after it, the count is final.
    g.wait_event("turn_end", 1).await;
    let stopped = g.rec.named("agent_loop_stopped");
    assert_eq!(stopped.len(), 1, "emitted exactly once: {stopped:?}");
    assert_eq!(stopped[0]["reason"], "client_disconnect");
    let (_, m) = g.get(&format!("/api/sessions/{id}/messages")).await;
    assert_eq!(
        m["data"].as_array().unwrap().last().unwrap()["content"],
        "[interrupted]"
    );
}

#[tokio::test]
async fn openai_chat_completions_and_models() {
    let g = start().await;
    let (s, v) = g.get("/v1/models").await;
    assert_eq!(s, 200);
    assert_eq!(v["data"][0]["id"], "fake-model");

    g.fake.push(Reply::text("Hello from tern."));
    let r = g
        .req(reqwest::Method::POST, "/v1/chat/completions")
        .json(&json!({"model": "tern", "messages": [
            {"role": "system", "content": "Be nice."},
            {"role": "user", "content": "earlier"},
            {"role": "assistant", "content": "earlier answer"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]}
        ]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let sid = r.headers()["x-hermes-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from tern.");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let sent = g.fake.requests()[0].messages().to_vec();
    assert_eq!(sent[0]["content"], "Be nice.");
    assert_eq!(sent[1]["content"], "earlier");
    assert_eq!(sent[3]["content"], "hi");

    // Continue the stored session, streaming.
    g.fake.push(Reply::text("Second answer."));
    let r = g
        .req(reqwest::Method::POST, "/v1/chat/completions")
        .header("X-Hermes-Session-Id", &sid)
        .json(&json!({"model": "tern", "stream": true, "messages": [{"role": "user", "content": "again"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body = r.text().await.unwrap();
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    let chunks: Vec<Value> = sse_events(&body)
        .into_iter()
        .map(|(_, d)| d)
        .filter(|d| d.is_object())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Second answer.");
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    assert_eq!(
        g.fake.requests()[1].messages().len(),
        6,
        "system + 3 stored + answer + new input"
    );

    let r = g
        .req(reqwest::Method::POST, "/v1/chat/completions")
        .header("X-Hermes-Session-Id", "missing")
        .json(&json!({"messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let (s, v) = g
        .post(
            "/v1/chat/completions",
            json!({"messages": [{"role": "system", "content": "x"}]}),
        )
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (400, Some("missing_message"))
    );
}

#[tokio::test]
async fn a_session_header_that_is_not_ascii_is_refused_and_starts_nothing() {
    let g = start().await;
    let id = g.new_session().await;
    // `é` in UTF-8: a header value, but not one `to_str` reads.
    let value = reqwest::header::HeaderValue::from_bytes(format!("{id}\u{e9}").as_bytes()).unwrap();
    for stream in [false, true] {
        let r = g
            .req(reqwest::Method::POST, "/v1/chat/completions")
            .header("X-Hermes-Session-Id", value.clone())
            .json(&json!({"stream": stream, "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "invalid_header", "{v}");
        assert_eq!(v["error"]["param"], "X-Hermes-Session-Id", "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains("ASCII"),
            "{v}"
        );
    }
    // Neither a new session nor a turn on the existing one.
    let (_, list) = g.get("/api/sessions").await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1, "{list}");
    let (_, m) = g.get(&format!("/api/sessions/{id}/messages")).await;
    assert_eq!(m["data"], json!([]), "{m}");
    assert!(g.fake.requests().is_empty());
}

#[tokio::test]
async fn a_non_streaming_client_that_goes_away_interrupts_its_turn_cleanly() {
    let g = start().await;
    let id = g.new_session().await;
    g.fake.push(Reply::tool_call(
        "long",
        "terminal",
        r#"{"command":"sleep 30"}"#,
    ));
    let r = g
        .req(reqwest::Method::POST, &format!("/api/sessions/{id}/chat"))
        .timeout(Duration::from_millis(700))
        .json(&json!({"message": "wait"}))
        .send()
        .await;
    assert!(r.is_err(), "the client gave up");
    g.wait_event("turn_end", 1).await;
    let stopped = g.rec.named("agent_loop_stopped");
    assert_eq!(stopped.len(), 1);
    assert_eq!(stopped[0]["reason"], "client_disconnect");
    let (_, s) = g.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(s["session"]["status"], "idle");
    let (_, m) = g.get(&format!("/api/sessions/{id}/messages")).await;
    assert_eq!(
        m["data"].as_array().unwrap().last().unwrap()["content"],
        "[interrupted]"
    );
}

#[tokio::test]
async fn an_ended_session_takes_no_more_turns_and_reset_admits_none_meanwhile() {
    let g = start().await;
    let id = g.new_session().await;
    let chat = g.start_long_turn(&id).await;
    let reset = tokio::spawn(
        g.req(reqwest::Method::POST, &format!("/api/sessions/{id}/reset"))
            .send(),
    );
    // Once the reset has interrupted A, the session is closing: B is refused, whether it
    // arrives while the reset waits or after it.
    g.wait_event("agent_loop_stopped", 1).await;
    let (s, v) = g
        .post(&format!("/api/sessions/{id}/chat"), json!({"message": "B"}))
        .await;
    assert_eq!(s, 409, "{v}");
    assert!(
        ["session_closing", "session_ended"].contains(&v["error"]["code"].as_str().unwrap()),
        "{v}"
    );
    assert_eq!(reset.await.unwrap().unwrap().status(), 200);
    chat.await.unwrap().unwrap();
    let (s, v) = g
        .post(&format!("/api/sessions/{id}/chat"), json!({"message": "C"}))
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("session_ended"))
    );
    let (s, v) = g
        .post(&format!("/api/sessions/{id}/reset"), json!({}))
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (409, Some("session_ended")),
        "no second successor"
    );
    let (_, old) = g.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(
        old["session"]["status"], "ended",
        "a refused turn does not touch the status"
    );
    let (_, m) = g.get(&format!("/api/sessions/{id}/messages")).await;
    assert!(
        m["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["content"] != "B" && m["content"] != "C")
    );
}

#[tokio::test]
async fn refused_openai_requests_leave_no_sessions_behind() {
    let g = start_with(1, 1 << 20).await;
    let id = g.new_session().await;
    // Held until the others have been refused, however slow the machine.
    let gate = tern_fake_model::Gate::new();
    g.fake.push(Reply::text("slow").held(&gate));
    let first = tokio::spawn(
        g.req(reqwest::Method::POST, &format!("/api/sessions/{id}/chat"))
            .json(&json!({"message": "1"}))
            .send(),
    );
    g.fake
        .wait_requests(1, Duration::from_secs(5))
        .await
        .unwrap();
    for _ in 0..3 {
        let (s, _) = g
            .post(
                "/v1/chat/completions",
                json!({"messages": [{"role": "user", "content": "x"}]}),
            )
            .await;
        assert_eq!(s, 429);
    }
    gate.open();
    first.await.unwrap().unwrap();
    let (_, v) = g.get("/api/sessions").await;
    assert_eq!(v["data"].as_array().unwrap().len(), 1);
    assert!(g.rec.named("session_start").len() == 1);
}

#[tokio::test]
async fn openai_streaming_sends_only_the_final_answer() {
    let g = start().await;
    g.fake
        .push(Reply::tool_call("c1", "list_dir", "{}").with_text("Let me look first."))
        .push(Reply::text("Final answer."));
    let r = g
        .req(reqwest::Method::POST, "/v1/chat/completions")
        .json(&json!({"stream": true, "messages": [{"role": "user", "content": "look"}]}))
        .send()
        .await
        .unwrap();
    let body = r.text().await.unwrap();
    let text: String = sse_events(&body)
        .into_iter()
        .filter_map(|(_, d)| {
            d["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(text, "Final answer.");
}

/// A model stream that breaks off after some text is asked for again: the client gets the
/// retried answer once, not the broken text before it.
#[tokio::test]
async fn openai_streaming_drops_an_answer_that_broke_off() {
    let g = start().await;
    g.fake
        .push(Reply::raw_sse([
            r#"{"choices":[{"delta":{"content":"Half an ans"}}]}"#,
            r#"{"error":{"code":500,"message":"Failed to parse input at pos 11","type":"server_error"}}"#,
        ]))
        .push(Reply::text("Whole answer."));
    let r = g
        .req(reqwest::Method::POST, "/v1/chat/completions")
        .json(&json!({"stream": true, "messages": [{"role": "user", "content": "answer"}]}))
        .send()
        .await
        .unwrap();
    let body = r.text().await.unwrap();
    let text: String = sse_events(&body)
        .into_iter()
        .filter_map(|(_, d)| {
            d["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(text, "Whole answer.");
    assert_eq!(g.fake.requests().len(), 2);
}

#[tokio::test]
async fn every_error_is_json_and_the_bearer_scheme_is_case_insensitive() {
    let g = start().await;
    let r = g
        .req(reqwest::Method::PUT, "/api/sessions")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "method_not_allowed");
    let (s, v) = g.get("/api/sessions?limit=abc").await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (400, Some("invalid_request"))
    );
    let r = g
        .http
        .get(format!("{}/api/sessions", g.url))
        .header("Authorization", format!("bearer {}", g.key))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
