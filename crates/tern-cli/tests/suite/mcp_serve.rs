//! `tern mcp serve` through the real `tern` binary, driven over stdio by the official
//! TypeScript SDK's client (`tests/mcp/tern-client.mjs`), relaying to a real `tern gateway`:
//! every tool, a decision made with `tern inbox approve` while `wait_for_decision` waits
//! (with progress), a real background process, a second key seeing none of the first's
//! requests, processes or sessions — and the bridge refusing to start without a gateway or
//! with a refused key.

use crate::common;

use common::{Env, assert_exit, stderr};
use serde_json::{Value, json};
use tern_fake_model::Reply;
use tern_test_support::eventually;
use tern_test_support::mcp_client::McpDriver;

const TERN: &str = env!("CARGO_BIN_EXE_tern");

async fn serve(e: &Env, key: &str) -> McpDriver {
    let home = e.home().display().to_string();
    let c = McpDriver::stdio(
        std::path::Path::new(TERN),
        &["mcp", "serve"],
        &[("TERN_HOME", home.as_str()), ("TERN_API_KEY", key)],
    )
    .await;
    assert!(c.connected(), "{}", c.hello);
    c
}

fn id_of(v: &Value, field: &str) -> String {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field}: {v}"))
        .to_owned()
}

#[tokio::test]
async fn every_tool_over_stdio_through_the_running_gateway() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let key = e.create_key("claude", false);
    let mut c = serve(&e, &key).await;
    assert_eq!(c.hello["server"]["name"], "tern", "{}", c.hello);
    let tools = c.list_tools().await;
    assert_eq!(tools.len(), 14, "{tools:?}");

    // Ask, wait (with progress), and decide with the reviewers' CLI meanwhile.
    let asked = c
        .ok("request_approval", json!({"summary": "Ship it?"}))
        .await;
    let request = id_of(&asked, "requestId");
    let waiting = c
        .start_call(
            "wait_for_decision",
            json!({"requestId": request.clone(), "timeout": 300}),
        )
        .await;
    let progress = c.progress(waiting).await;
    assert_eq!(progress["total"].as_f64(), Some(300.0), "{progress}");
    let o = e.inbox(&["approve", &request, "--note", "go"]);
    common::assert_ok(&o);
    let decided = c.answer(waiting).await.unwrap();
    let decided = &decided["structuredContent"];
    assert_eq!(decided["status"], "decided", "{decided}");
    assert_eq!(decided["result"]["outcome"]["type"], "APPROVE", "{decided}");

    // A cancel goes through the bridge: the gateway's wait ends (its log says so).
    let again = c
        .ok("request_approval", json!({"summary": "Wait for me?"}))
        .await;
    let waiting = c
        .start_call(
            "wait_for_decision",
            json!({"requestId": again["requestId"], "timeout": 600}),
        )
        .await;
    c.progress(waiting).await;
    c.cancel(waiting).await;
    assert!(c.answer(waiting).await.is_err());
    eventually("the gateway to end the cancelled wait", async || {
        gw.logs()
            .contains("wait_for_decision cancelled by the client")
            .then_some(())
    })
    .await;

    let asked = c
        .ok(
            "request_elicitation",
            json!({"summary": "Region?", "taskId": asked["taskId"],
                   "fields": [{"type": "Text", "id": "region", "label": "Region", "required": true}]}),
        )
        .await;
    let form = id_of(&asked, "requestId");
    common::assert_ok(&e.inbox(&["answer", &form, "--field", "region=eu"]));
    let answered = c.ok("get_decision", json!({"requestId": form})).await;
    assert_eq!(answered["result"]["fields"]["region"], "eu", "{answered}");

    // A real background process: start, list, write to it, poll, read its log, kill it.
    let started = c
        .ok(
            "process_start",
            json!({"command": "echo started; while read -r l; do echo \"got:$l\"; done"}),
        )
        .await;
    let proc_id = id_of(&started, "processId");
    let owner = id_of(&started, "sessionId");
    let listed = c.ok("process_list", json!({})).await;
    assert_eq!(
        listed["processes"][0]["processId"],
        json!(proc_id),
        "{listed}"
    );
    assert_eq!(
        listed["processes"][0]["sessionId"],
        json!(owner),
        "{listed}"
    );
    c.ok(
        "process_write",
        json!({"processId": proc_id.clone(), "data": "hello", "submit": true}),
    )
    .await;
    let mut seen = String::new();
    eventually("the process's answer in its polled output", async || {
        let p = c
            .ok("process_poll", json!({"processId": proc_id.clone()}))
            .await;
        seen.push_str(p["output"].as_str().unwrap_or_default());
        seen.contains("got:hello").then_some(())
    })
    .await;
    let log = c
        .ok("process_log", json!({"processId": proc_id.clone()}))
        .await;
    let text = log["output"].as_str().unwrap_or_default();
    assert!(
        text.contains("started") && text.contains("got:hello"),
        "{log}"
    );
    let killed = c
        .ok("process_kill", json!({"processId": proc_id.clone()}))
        .await;
    assert_eq!(killed["processId"], json!(proc_id), "{killed}");
    assert_ne!(killed["status"], "running", "{killed}");

    // A dangerous command is refused, saying why; a hard-line one too.
    let e1 = c
        .tool_error("process_start", json!({"command": "rm -rf ./build"}))
        .await;
    assert!(e1.contains("approval"), "{e1}");
    let e2 = c
        .tool_error("process_start", json!({"command": "rm -rf /"}))
        .await;
    assert!(e2.contains("hard-line"), "{e2}");
    let listed = c.ok("process_list", json!({})).await;
    assert_eq!(listed["processes"].as_array().unwrap().len(), 1, "{listed}");

    // Sessions: a turn through the gateway's turn manager.
    let created = c.ok("session_create", json!({"title": "mcp"})).await;
    let session = id_of(&created["session"], "id");
    e.fake().push(Reply::text("Hi from the gateway."));
    let chat = c
        .ok(
            "session_chat",
            json!({"sessionId": session.clone(), "message": "hello"}),
        )
        .await;
    assert_eq!(chat["answer"], "Hi from the gateway.", "{chat}");
    // Its own, and the one the started process got (the refused ones left none).
    let listed = c.ok("session_list", json!({})).await;
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{listed}");
    assert!(
        ids.contains(&owner.as_str()) && ids.contains(&session.as_str()),
        "{listed}"
    );
    let msgs = c
        .ok("session_messages", json!({"sessionId": session.clone()}))
        .await;
    assert_eq!(
        msgs["messages"][1]["content"], "Hi from the gateway.",
        "{msgs}"
    );

    // Another key, from a file this time, sees none of it.
    let other = e.create_key("other", false);
    let key_file = e.dir.path().join("other.key");
    std::fs::write(&key_file, format!("{other}\n")).unwrap();
    let home = e.home().display().to_string();
    let mut b = McpDriver::stdio(
        std::path::Path::new(TERN),
        &["mcp", "serve", "--key-file", key_file.to_str().unwrap()],
        &[("TERN_HOME", home.as_str())],
    )
    .await;
    assert!(b.connected(), "{}", b.hello);
    assert_eq!(
        b.ok("process_list", json!({})).await["processes"],
        json!([])
    );
    assert_eq!(b.ok("session_list", json!({})).await["sessions"], json!([]));
    for (tool, args) in [
        ("process_poll", json!({"processId": proc_id.clone()})),
        ("process_log", json!({"processId": proc_id.clone()})),
        ("process_kill", json!({"processId": proc_id.clone()})),
        (
            "process_write",
            json!({"processId": proc_id.clone(), "data": "x"}),
        ),
        (
            "process_start",
            json!({"command": "true", "sessionId": owner.clone()}),
        ),
        ("get_decision", json!({"requestId": request.clone()})),
        ("session_messages", json!({"sessionId": session.clone()})),
    ] {
        let e = b.tool_error(tool, args).await;
        assert!(e.contains("not found"), "{tool}: {e}");
    }
    b.close().await;
    c.close().await;
}

#[tokio::test]
async fn it_refuses_to_start_without_a_key_a_gateway_or_with_a_refused_key() {
    let e = Env::new();
    let run = |key: Option<&str>| {
        let mut cmd = e.tern();
        cmd.args(["mcp", "serve"]);
        if let Some(k) = key {
            cmd.env("TERN_API_KEY", k);
        }
        cmd.output().unwrap()
    };
    let o = run(None);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("no agent key"), "{}", stderr(&o));
    let o = run(Some("tern_whatever"));
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("no gateway is running"),
        "{}",
        stderr(&o)
    );
    let _gw = e.gateway();
    let o = run(Some("tern_not_a_key"));
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("refused the key"), "{}", stderr(&o));
}
