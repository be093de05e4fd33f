//! MCP tool calls in gateway turns, against the real server-everything (Node.js, `npm ci` in
//! `tests/mcp`): a call's progress as `tool_progress` hook events, and an elicitation asked
//! through the inbox, answered or dismissed by a reviewer, with the server seeing the answer.

use crate::common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tern_agent::{Agent, AgentSettings, HookBus};
use tern_fake_model::{FakeModel, Reply};
use tern_gateway::mcp_elicit::InboxElicitor;
use tern_gateway::{GatewaySettings, WaitsSetup, auth};
use tern_inbox::review::{RequestFilter, RequestStatus};
use tern_llm::{Client, ClientConfig, Role};
use tern_mcp::{ClientOptions, McpClient};
use tern_test_support::wait::eventually;
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

/// server-everything's entry point; fails, saying what to install, without it.
fn everything_entry() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp");
    let entry = root.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.is_file(),
        "{} is missing: install Node.js 20 or later and run `npm ci --no-audit --no-fund` in {}",
        entry.display(),
        root.display()
    );
    entry
}

struct Gw {
    _dir: tempfile::TempDir,
    store: tern_store::Store,
    inbox: tern_inbox::Inbox,
    url: String,
    key: String,
    fake: FakeModel,
    rec: Arc<Recorder>,
    http: reqwest::Client,
}

/// A gateway whose agent has server-everything's tools, its elicitations asked through the
/// inbox.
async fn start() -> Gw {
    let dir = tempfile::tempdir().unwrap();
    let (store, work) = common::open(dir.path()).await;
    let key = auth::create_key(&store, "test").await.unwrap();
    let inbox = tern_inbox::Inbox::new(store.clone());
    inbox.ensure_default_project().await.unwrap();
    // As the gateway makes it: from its durable waits' inbox (its own, here).
    let waits = WaitsSetup::embedded(&inbox);
    let elicitor = InboxElicitor::for_gateway(
        waits.client,
        tern_waits::tools::DEFAULT_PROJECT,
        Some(inbox.clone()),
    );
    // `[mcp_servers.everything]`, as the configuration file would give it.
    let config: tern_config::McpServerConfig = serde_json::from_value(json!({
        "command": "node",
        "args": [everything_entry(), "stdio"],
    }))
    .unwrap();
    let client = McpClient::start_with(
        "everything",
        &config,
        &ClientOptions::default().with_elicitor(Arc::new(elicitor)),
    )
    .await
    .unwrap();
    let mut registry = Registry::builtin();
    tern_mcp::register(&mut registry, Arc::new(client))
        .await
        .unwrap();
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
            Arc::new(registry),
            AgentSettings {
                model: "fake-model".into(),
                max_iterations: 10,
                stream: false,
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
            toolsets: vec!["mcp:everything".into()],
            model: "fake-model".into(),
            ..common::settings(work)
        },
    );
    let (url, _) = common::serve(&gw).await;
    Gw {
        _dir: dir,
        store,
        inbox,
        url,
        key,
        fake,
        rec,
        http: reqwest::Client::new(),
    }
}

impl Gw {
    async fn session(&self) -> String {
        let r = self
            .http
            .post(format!("{}/api/sessions", self.url))
            .bearer_auth(&self.key)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        r.json::<Value>().await.unwrap()["session"]["id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Runs a turn in which the model calls `tool` with `args`, then answers "done".
    fn turn(&self, session: &str, tool: &str, args: Value) -> tokio::task::JoinHandle<u16> {
        self.fake
            .push(Reply::tool_call("call_1", tool, args.to_string()));
        self.fake.push(Reply::text("done"));
        let rb = self
            .http
            .post(format!("{}/api/sessions/{session}/chat", self.url))
            .bearer_auth(&self.key)
            .json(&json!({"message": "go"}));
        tokio::spawn(async move { rb.send().await.unwrap().status().as_u16() })
    }

    fn events(&self, name: &str) -> Vec<Value> {
        let all = self.rec.0.lock().unwrap();
        all.iter().filter(|e| e["event"] == name).cloned().collect()
    }

    /// The tool message the model got for the call.
    async fn tool_result(&self, session: &str) -> String {
        let messages = self.store.messages(session).await.unwrap();
        messages
            .iter()
            .find(|m| m.role == Role::Tool)
            .and_then(|m| m.content.clone())
            .unwrap_or_else(|| panic!("no tool result in {messages:#?}"))
    }

    /// The one pending elicitation request in the inbox, once it is there.
    async fn pending_request(&self) -> tern_inbox::review::RequestView {
        let filter = RequestFilter {
            status: Some(RequestStatus::Pending),
            ..Default::default()
        };
        let id = eventually("the elicitation in the inbox", async || {
            let list = self.inbox.list_requests(&filter).await.ok()?;
            list.items.first().map(|r| r.id.clone())
        })
        .await;
        self.inbox.request_view(&id).await.unwrap()
    }
}

#[tokio::test]
async fn a_calls_progress_is_emitted_as_tool_progress_hook_events() {
    let gw = start().await;
    let session = gw.session().await;
    let status = gw
        .turn(
            &session,
            "mcp__everything__trigger-long-running-operation",
            json!({"duration": 1.5, "steps": 3}),
        )
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(gw.tool_result(&session).await.contains("completed"));
    let progress = gw.events("tool_progress");
    assert!(!progress.is_empty(), "no tool_progress");
    for e in &progress {
        assert_eq!(e["session_id"], session.as_str());
        assert_eq!(e["call_id"], "call_1");
        assert_eq!(e["tool"], "mcp__everything__trigger-long-running-operation");
        assert_eq!(e["total"], 3.0);
    }
    let values: Vec<f64> = progress
        .iter()
        .map(|e| e["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    // The last report always goes out, before the call's result.
    assert_eq!(values.last(), Some(&3.0), "{values:?}");
    let all = gw.rec.0.lock().unwrap().clone();
    let last_progress = all
        .iter()
        .rposition(|e| e["event"] == "tool_progress")
        .unwrap();
    let post = all
        .iter()
        .position(|e| e["event"] == "post_tool_call")
        .unwrap();
    assert!(last_progress < post, "{all:#?}");
}

#[tokio::test]
async fn an_elicitation_is_asked_in_the_inbox_and_the_answer_reaches_the_server() {
    let gw = start().await;
    let session = gw.session().await;
    let turn = gw.turn(
        &session,
        "mcp__everything__trigger-elicitation-request",
        json!({}),
    );
    let view = gw.pending_request().await;
    // In the calling session's task.
    assert_eq!(
        view.summary.task_external_id.as_deref(),
        Some(session.as_str())
    );
    assert!(
        view.summary
            .summary
            .contains("MCP server `everything` asks: Please provide inputs"),
        "{}",
        view.summary.summary
    );
    let fields: Vec<Value> = view
        .fields
        .iter()
        .map(|f| serde_json::to_value(f).unwrap())
        .collect();
    let field = |id: &str| {
        fields
            .iter()
            .find(|f| f["id"] == id)
            .unwrap_or_else(|| panic!("no {id} in {fields:#?}"))
            .clone()
    };
    assert_eq!(field("name")["type"], "Text");
    assert_eq!(field("name")["required"], true);
    assert_eq!(field("check")["type"], "Switch");
    assert_eq!(field("email")["format"], "EMAIL");
    assert_eq!(field("birthdate")["type"], "DateField");
    assert_eq!(field("integer")["type"], "Number");
    assert_eq!(field("integer")["integerOnly"], true);
    assert_eq!(field("integer")["max"], 100.0);
    assert_eq!(
        field("titledSingleSelectEnum")["options"],
        json!(["Superman", "Green Lantern", "Wonder Woman"])
    );
    assert_eq!(field("untitledMultipleSelectEnum")["type"], "Multiselect");
    // The server's defaults are the pre-fills.
    assert!(
        view.field_bids
            .iter()
            .any(|b| b.field_id == "integer" && b.value == json!(42)),
        "{:?}",
        view.field_bids
    );
    let answers = json!({
        "name": "Ada Lovelace",
        "check": true,
        "integer": 7,
        "titledSingleSelectEnum": "Wonder Woman"
    });
    gw.inbox
        .answer_elicitation(&view.summary.id, answers.as_object().unwrap(), "reviewer")
        .await
        .unwrap();
    assert_eq!(turn.await.unwrap(), 200);
    let result = gw.tool_result(&session).await;
    assert!(result.contains("- Name: Ada Lovelace"), "{result}");
    assert!(result.contains("- Agreed to terms: true"), "{result}");
    assert!(result.contains("- Favorite Integer: 7"), "{result}");
    // The choice went back as its value, not its title.
    assert!(result.contains("hero-3"), "{result}");
}

#[tokio::test]
async fn an_elicitation_dismissed_in_the_inbox_is_declined() {
    let gw = start().await;
    let session = gw.session().await;
    let turn = gw.turn(
        &session,
        "mcp__everything__trigger-elicitation-request",
        json!({}),
    );
    let view = gw.pending_request().await;
    gw.inbox
        .dismiss_request(&view.summary.id, "reviewer", Some("not sharing that"))
        .await
        .unwrap();
    assert_eq!(turn.await.unwrap(), 200);
    let result = gw.tool_result(&session).await;
    assert!(result.contains("User declined"), "{result}");
    assert!(result.contains("\"action\": \"decline\""), "{result}");
}

#[tokio::test]
async fn an_interrupted_turn_withdraws_its_elicitation() {
    let gw = start().await;
    let session = gw.session().await;
    let turn = gw.turn(
        &session,
        "mcp__everything__trigger-elicitation-request",
        json!({}),
    );
    let view = gw.pending_request().await;
    let stopped = gw
        .http
        .post(format!("{}/api/sessions/{session}/stop", gw.url))
        .bearer_auth(&gw.key)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(stopped.status(), 200);
    assert_eq!(turn.await.unwrap(), 200);
    let id = view.summary.id.clone();
    eventually("the request withdrawn", async || {
        let v = gw.inbox.request_view(&id).await.ok()?;
        (v.summary.status == RequestStatus::Withdrawn).then_some(())
    })
    .await;
}
