//! tern as an MCP server over streamable HTTP (`/mcp`), driven by the official TypeScript
//! SDK's client (`tests/mcp/tern-client.mjs`): initialize, list and call the tools, a
//! decision made in the inbox while `wait_for_decision` waits (with progress), a cancel
//! ending a wait, keys refused, and a second key seeing nothing of the first's.

use crate::common;

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tern_agent::{Agent, AgentSettings};
use tern_fake_model::{FakeModel, Reply};
use tern_gateway::{Gateway, GatewaySettings, auth};
use tern_inbox::Outcome;
use tern_llm::{Client, ClientConfig};
use tern_test_support::mcp_client::McpDriver;
use tern_tools::{Registry, ToolLimits};

struct Gw {
    _dir: tempfile::TempDir,
    gw: Arc<Gateway>,
    url: String,
    key: String,
    fake: FakeModel,
}

async fn start() -> Gw {
    let dir = tempfile::tempdir().unwrap();
    let (store, work) = common::open(dir.path()).await;
    let key = auth::create_key(&store, "first").await.unwrap();
    let fake = FakeModel::start().await.unwrap();
    let agent = Arc::new(Agent::new(
        store.clone(),
        Ok(Client::new(ClientConfig::new(fake.base_url())).unwrap()),
        Arc::new(Registry::builtin()),
        AgentSettings {
            model: "fake-model".into(),
            max_iterations: 5,
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
            max_body_bytes: 64 * 1024,
            ..common::settings(work)
        },
    );
    let (url, _) = common::serve(&gw).await;
    Gw {
        _dir: dir,
        gw,
        url,
        key,
        fake,
    }
}

impl Gw {
    fn mcp(&self) -> String {
        format!("{}/mcp", self.url)
    }

    async fn client(&self, key: &str) -> McpDriver {
        let c = McpDriver::http(&self.mcp(), Some(key)).await;
        assert!(c.connected(), "{}", c.hello);
        c
    }

    async fn approve(&self, request_id: &str) {
        let outcome: Outcome = serde_json::from_value(json!({"type": "APPROVE"})).unwrap();
        self.gw
            .inbox
            .decide_approval(request_id, outcome, "ann")
            .await
            .unwrap();
    }
}

fn id_of(v: &Value, field: &str) -> String {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field}: {v}"))
        .to_owned()
}

#[tokio::test]
async fn a_real_client_initializes_lists_and_calls_every_tool() {
    let g = start().await;
    let mut c = g.client(&g.key).await;
    assert_eq!(c.hello["server"]["name"], "tern", "{}", c.hello);
    assert!(c.hello["sessionId"].is_string(), "{}", c.hello);
    assert!(
        c.hello["instructions"]
            .as_str()
            .is_some_and(|i| i.contains("wait_for_decision")),
        "{}",
        c.hello
    );

    let tools = c.list_tools().await;
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    for name in [
        "request_approval",
        "request_elicitation",
        "get_decision",
        "wait_for_decision",
        "process_start",
        "process_list",
        "process_poll",
        "process_log",
        "process_kill",
        "process_write",
        "session_create",
        "session_chat",
        "session_list",
        "session_messages",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let approval = tools
        .iter()
        .find(|t| t["name"] == "request_approval")
        .unwrap();
    assert_eq!(approval["inputSchema"]["required"], json!(["summary"]));

    // An approval: pending, then decided in the inbox while wait_for_decision waits.
    let asked = c
        .ok(
            "request_approval",
            json!({"summary": "Deploy v2 to prod?", "keyValueContext": {"env": "prod"}}),
        )
        .await;
    assert_eq!(asked["status"], "pending", "{asked}");
    assert_eq!(asked["kind"], "approval", "{asked}");
    let request = id_of(&asked, "requestId");
    let task = id_of(&asked, "taskId");
    let now = c
        .ok("get_decision", json!({"requestId": request.clone()}))
        .await;
    assert_eq!(now["status"], "pending", "{now}");

    let waiting = c
        .start_call(
            "wait_for_decision",
            json!({"requestId": request.clone(), "timeout": 120}),
        )
        .await;
    let progress = c.progress(waiting).await;
    assert_eq!(progress["total"].as_f64(), Some(120.0), "{progress}");
    assert!(
        progress["message"]
            .as_str()
            .is_some_and(|m| m.contains(&request)),
        "{progress}"
    );
    g.approve(&request).await;
    let decided = c.answer(waiting).await.unwrap();
    assert_ne!(decided["isError"], json!(true), "{decided}");
    let decided = &decided["structuredContent"];
    assert_eq!(decided["status"], "decided", "{decided}");
    assert_eq!(decided["result"]["outcome"]["type"], "APPROVE", "{decided}");
    assert_eq!(decided["result"]["decidedBy"], "ann", "{decided}");

    // The request is where the agent API puts it: on a task of the key's, in a project.
    let detail = g.gw.inbox.task(&key_id(&g, "first").await, &task).await;
    assert!(detail.is_ok(), "{detail:?}");

    // An elicitation on the same task, answered in the inbox.
    let asked = c
        .ok(
            "request_elicitation",
            json!({
                "summary": "Which region?",
                "fields": [{"type": "Text", "id": "region", "label": "Region", "required": true}],
                "taskId": task,
            }),
        )
        .await;
    assert_eq!(asked["taskId"], json!(task), "{asked}");
    let form = id_of(&asked, "requestId");
    let mut answers = Map::new();
    answers.insert("region".into(), json!("eu"));
    g.gw.inbox
        .answer_elicitation(&form, &answers, "ann")
        .await
        .unwrap();
    let answered = c.ok("get_decision", json!({"requestId": form})).await;
    assert_eq!(answered["kind"], "elicitation", "{answered}");
    assert_eq!(answered["result"]["fields"]["region"], "eu", "{answered}");

    // Sessions: create, chat (a turn through the turn manager), list, messages.
    let created = c.ok("session_create", json!({"title": "from MCP"})).await;
    let session = id_of(&created["session"], "id");
    assert_eq!(created["session"]["source"], "mcp", "{created}");
    g.fake.push(Reply::text("Hello from tern."));
    let chat = c
        .ok(
            "session_chat",
            json!({"sessionId": session.clone(), "message": "hi"}),
        )
        .await;
    assert_eq!(chat["answer"], "Hello from tern.", "{chat}");
    assert_eq!(chat["status"], "completed", "{chat}");
    let listed = c.ok("session_list", json!({})).await;
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [session.as_str()], "{listed}");
    let msgs = c
        .ok("session_messages", json!({"sessionId": session.clone()}))
        .await;
    let said: Vec<(&str, &str)> = msgs["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    assert_eq!(
        said,
        [("user", "hi"), ("assistant", "Hello from tern.")],
        "{msgs}"
    );

    // This gateway runs no background processes: every process tool says so, clearly.
    for (tool, args) in [
        (
            "process_start",
            json!({"command": "echo hi", "sessionId": session.clone()}),
        ),
        ("process_list", json!({})),
        ("process_poll", json!({"processId": "proc_x"})),
        ("process_log", json!({"processId": "proc_x"})),
        ("process_kill", json!({"processId": "proc_x"})),
        (
            "process_write",
            json!({"processId": "proc_x", "data": "y", "submit": true}),
        ),
    ] {
        let e = c.tool_error(tool, args).await;
        assert!(e.contains("runs no background processes"), "{tool}: {e}");
    }

    // Bad input: a clear tool error, and nothing stored.
    let e = c.tool_error("request_approval", json!({})).await;
    assert!(e.contains("summary"), "{e}");
    let e = c
        .tool_error(
            "request_approval",
            json!({"summary": "x", "attachments": ["a.txt"]}),
        )
        .await;
    assert!(e.contains("attachments"), "{e}");
    let e = c
        .tool_error(
            "wait_for_decision",
            json!({"requestId": request, "timeout": 601}),
        )
        .await;
    assert!(e.contains("timeout"), "{e}");
    let e = c
        .tool_error(
            "session_chat",
            json!({"sessionId": session, "message": " "}),
        )
        .await;
    assert!(e.contains("message"), "{e}");
    // An unknown tool is a protocol error.
    let e = c.call("no_such_tool", json!({})).await;
    assert!(
        e.as_ref().is_err_and(|m| m.contains("no_such_tool")),
        "{e:?}"
    );
    c.close().await;
}

/// The id of the key named `name`.
async fn key_id(g: &Gw, name: &str) -> String {
    g.gw.store
        .active_keys()
        .await
        .unwrap()
        .into_iter()
        .find(|k| k.name == name)
        .unwrap()
        .id
}

#[tokio::test]
async fn a_cancel_ends_a_waiting_call_and_the_session_goes_on() {
    let g = start().await;
    let mut c = g.client(&g.key).await;
    let asked = c.ok("request_approval", json!({"summary": "Wait?"})).await;
    let request = id_of(&asked, "requestId");
    let waiting = c
        .start_call(
            "wait_for_decision",
            json!({"requestId": request.clone(), "timeout": 600}),
        )
        .await;
    // Waiting on the server: it reported progress.
    c.progress(waiting).await;
    c.cancel(waiting).await;
    let ended = c.answer(waiting).await;
    assert!(ended.is_err(), "{ended:?}");
    // The wait's end answered nothing, and the request is still pending for a later look.
    let now = c
        .ok("get_decision", json!({"requestId": request.clone()}))
        .await;
    assert_eq!(now["status"], "pending", "{now}");
    // A wait whose time runs out says so, still pending.
    let out = c
        .ok(
            "wait_for_decision",
            json!({"requestId": request, "timeout": 1}),
        )
        .await;
    assert_eq!(out["status"], "pending", "{out}");
    assert_eq!(out["timedOut"], true, "{out}");
    c.close().await;
}

#[tokio::test]
async fn a_cancelled_session_chat_interrupts_its_turn() {
    let g = start().await;
    let mut c = g.client(&g.key).await;
    let session = id_of(&c.ok("session_create", json!({})).await["session"], "id");
    let gate = tern_fake_model::Gate::new();
    g.fake.push(Reply::text("too late").held(&gate));
    let before = g.fake.requests().len();
    let chat = c
        .start_call(
            "session_chat",
            json!({"sessionId": session.clone(), "message": "take your time"}),
        )
        .await;
    tern_test_support::eventually("the turn to reach the model", async || {
        (g.fake.requests().len() > before).then_some(())
    })
    .await;
    // The running turn reports progress.
    let progress = c.progress(chat).await;
    assert!(
        progress["message"]
            .as_str()
            .is_some_and(|m| m.contains("turn")),
        "{progress}"
    );
    c.cancel(chat).await;
    assert!(c.answer(chat).await.is_err());
    // The turn recorded its interruption and the session takes turns again.
    tern_test_support::eventually("the [interrupted] marker", async || {
        let msgs = g.gw.store.messages(&session).await.unwrap();
        msgs.last()
            .is_some_and(|m| m.content.as_deref() == Some("[interrupted]"))
            .then_some(())
    })
    .await;
    gate.open();
    g.fake.push(Reply::text("Back."));
    let again = c
        .ok(
            "session_chat",
            json!({"sessionId": session, "message": "again"}),
        )
        .await;
    assert_eq!(again["answer"], "Back.", "{again}");
    c.close().await;
}

#[tokio::test]
async fn no_key_a_bad_key_or_a_revoked_key_is_refused_with_401() {
    let g = start().await;
    let http = reqwest::Client::new();
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "curl", "version": "1"}}
    });
    for auth in [None, Some("tern_not_a_key")] {
        let mut req = http
            .post(g.mcp())
            .header("Accept", "application/json, text/event-stream")
            .json(&init);
        if let Some(a) = auth {
            req = req.bearer_auth(a);
        }
        let (status, body) = common::status_json(req.send().await.unwrap()).await;
        assert_eq!(status, 401, "{body}");
        assert!(body["error"]["message"].is_string(), "{body}");
    }

    // The real client without a key cannot connect.
    let c = McpDriver::http(&g.mcp(), None).await;
    let (message, code) = c.connect_failure();
    assert!(
        code == json!(401) || message.contains("Invalid API key"),
        "{message} ({code})"
    );

    // A key revoked after its session started: its next request is refused too.
    let second = auth::create_key(&g.gw.store, "second").await.unwrap();
    let mut c = g.client(&second).await;
    c.ok("session_list", json!({})).await;
    assert!(g.gw.store.revoke_key("second").await.unwrap());
    let e = c.call("session_list", json!({})).await;
    assert!(e.is_err(), "a revoked key's call went through: {e:?}");
    let c2 = McpDriver::http(&g.mcp(), Some(&second)).await;
    c2.connect_failure();

    // A body over the API's limit: 413, in JSON.
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                     "params": {"pad": "x".repeat(70 * 1024)}});
    let r = http
        .post(g.mcp())
        .bearer_auth(&g.key)
        .header("Accept", "application/json, text/event-stream")
        .json(&big)
        .send()
        .await
        .unwrap();
    let (status, body) = common::status_json(r).await;
    assert_eq!(status, 413, "{body}");
}

#[tokio::test]
async fn a_second_key_sees_none_of_the_first_keys_requests_sessions_or_mcp_session() {
    let g = start().await;
    let mut a = g.client(&g.key).await;
    let asked = a.ok("request_approval", json!({"summary": "Mine?"})).await;
    let request = id_of(&asked, "requestId");
    let task = id_of(&asked, "taskId");
    let session = id_of(
        &a.ok("session_create", json!({"title": "a's"})).await["session"],
        "id",
    );

    let other = auth::create_key(&g.gw.store, "other").await.unwrap();
    let mut b = g.client(&other).await;
    for (tool, args) in [
        ("get_decision", json!({"requestId": request.clone()})),
        (
            "wait_for_decision",
            json!({"requestId": request.clone(), "timeout": 1}),
        ),
        (
            "request_approval",
            json!({"summary": "on a's task", "taskId": task}),
        ),
        ("session_messages", json!({"sessionId": session.clone()})),
        (
            "session_chat",
            json!({"sessionId": session.clone(), "message": "hi"}),
        ),
    ] {
        let e = b.tool_error(tool, args).await;
        assert!(e.contains("not found"), "{tool}: {e}");
    }
    let listed = b.ok("session_list", json!({})).await;
    assert_eq!(listed["sessions"], json!([]), "{listed}");

    // b presenting a's MCP session is refused as if it did not exist; a's still works.
    let a_session = a.hello["sessionId"].as_str().unwrap().to_owned();
    let r = reqwest::Client::new()
        .post(g.mcp())
        .bearer_auth(&other)
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", &a_session)
        .header("Mcp-Protocol-Version", "2025-06-18")
        .json(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "session_list", "arguments": {}}}))
        .send()
        .await
        .unwrap();
    let (status, body) = common::status_json(r).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "session_not_found", "{body}");
    // Nor can it end it.
    let r = reqwest::Client::new()
        .delete(g.mcp())
        .bearer_auth(&other)
        .header("Mcp-Session-Id", &a_session)
        .send()
        .await
        .unwrap();
    let (status, body) = common::status_json(r).await;
    assert_eq!(status, 404, "{body}");
    let mine = a.ok("session_list", json!({})).await;
    assert_eq!(mine["sessions"][0]["id"], json!(session), "{mine}");

    // Nothing of b's leaked into a's inbox either: the first key's request is intact.
    let now = a.ok("get_decision", json!({"requestId": request})).await;
    assert_eq!(now["status"], "pending", "{now}");
    a.close().await;
    b.close().await;
}

/// A raw `initialize` of `key`: its status, its session id if one was made, and its body
/// when it is an error.
async fn initialize(g: &Gw, key: &str) -> (u16, Option<String>, Value) {
    let r = reqwest::Client::new()
        .post(g.mcp())
        .bearer_auth(key)
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "1"}}
        }))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let session = r
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    if status == 200 {
        return (status, session, Value::Null);
    }
    let (_, body) = common::status_json(r).await;
    (status, session, body)
}

#[tokio::test]
async fn a_key_holds_at_most_16_mcp_sessions_and_a_closed_one_frees_its_place() {
    let g = start().await;
    let mut mine = Vec::new();
    for _ in 0..16 {
        let (status, session, body) = initialize(&g, &g.key).await;
        assert_eq!(status, 200, "{body}");
        mine.push(session.expect("a session id"));
    }
    let (status, session, body) = initialize(&g, &g.key).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "too_many_sessions", "{body}");
    assert!(session.is_none());
    // Another key has places of its own.
    let other = auth::create_key(&g.gw.store, "other").await.unwrap();
    let (status, _, body) = initialize(&g, &other).await;
    assert_eq!(status, 200, "{body}");

    // Ending one (DELETE) frees its place for the key.
    let r = reqwest::Client::new()
        .delete(g.mcp())
        .bearer_auth(&g.key)
        .header("Mcp-Session-Id", &mine[0])
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let (status, _, body) = initialize(&g, &g.key).await;
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = initialize(&g, &g.key).await;
    assert_eq!(status, 429, "{body}");
}

#[tokio::test]
async fn a_session_id_bound_to_no_key_is_refused_with_404_in_json() {
    let g = start().await;
    for (method, id) in [
        (reqwest::Method::POST, "no-such-session"),
        (reqwest::Method::GET, "no-such-session"),
        (reqwest::Method::DELETE, "no-such-session"),
    ] {
        let r = reqwest::Client::new()
            .request(method.clone(), g.mcp())
            .bearer_auth(&g.key)
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", id)
            .header("Mcp-Protocol-Version", "2025-06-18")
            .json(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                          "params": {"name": "session_list", "arguments": {}}}))
            .send()
            .await
            .unwrap();
        let (status, body) = common::status_json(r).await;
        assert_eq!(status, 404, "{method}: {body}");
        assert_eq!(
            body["error"]["code"], "session_not_found",
            "{method}: {body}"
        );
    }
}

#[tokio::test]
async fn a_key_has_at_most_32_waits_under_way() {
    let g = start().await;
    let mut c = g.client(&g.key).await;
    let asked = c.ok("request_approval", json!({"summary": "Many?"})).await;
    let request = id_of(&asked, "requestId");
    let mut waits = Vec::new();
    for _ in 0..32 {
        waits.push(
            c.start_call(
                "wait_for_decision",
                json!({"requestId": request.clone(), "timeout": 600}),
            )
            .await,
        );
    }
    // All 32 are waiting on the server (each reported progress).
    for w in &waits {
        c.progress(*w).await;
    }
    let e = c
        .tool_error(
            "wait_for_decision",
            json!({"requestId": request.clone(), "timeout": 1}),
        )
        .await;
    assert!(e.contains("too many wait_for_decision"), "{e}");
    // Another key is not held back by the first's.
    let other = auth::create_key(&g.gw.store, "other").await.unwrap();
    let mut b = g.client(&other).await;
    let theirs = b.ok("request_approval", json!({"summary": "Mine"})).await;
    let out = b
        .ok(
            "wait_for_decision",
            json!({"requestId": id_of(&theirs, "requestId"), "timeout": 1}),
        )
        .await;
    assert_eq!(out["timedOut"], true, "{out}");
    // A decision ends every wait, and frees their places.
    g.approve(&request).await;
    for w in waits {
        let done = c.answer(w).await.unwrap();
        assert_eq!(done["structuredContent"]["status"], "decided", "{done}");
    }
    let out = c
        .ok(
            "wait_for_decision",
            json!({"requestId": request, "timeout": 1}),
        )
        .await;
    assert_eq!(out["status"], "decided", "{out}");
    c.close().await;
    b.close().await;
}
