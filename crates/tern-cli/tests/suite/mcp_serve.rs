//! `tern mcp serve` through the real `tern` binary, driven over stdio by the official
//! TypeScript SDK's client (`tests/mcp/tern-client.mjs`), relaying to a real `tern gateway`:
//! every tool, a decision made with `tern inbox approve` while `wait_for_decision` waits
//! (with progress), a real background process, a second key seeing none of the first's
//! requests, processes or sessions — and the bridge refusing to start without a gateway or
//! with a refused key. The hardening: operator hooks gate MCP's process tools (a `block`
//! stops them, an `allow` does not preapprove), a dangerous command submitted to a shell's
//! stdin is refused, and the bridge takes no key in argv, no admin key unless told, and no
//! plain `http://` to another host.

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

/// Polls `proc_id` until its output holds `marker`; returns all it printed.
async fn output_until(c: &mut McpDriver, proc_id: &str, marker: &str) -> String {
    let mut seen = String::new();
    eventually(&format!("`{marker}` in the process's output"), async || {
        let p = c.ok("process_poll", json!({"processId": proc_id})).await;
        seen.push_str(p["output"].as_str().unwrap_or_default());
        seen.contains(marker).then_some(())
    })
    .await;
    seen
}

#[tokio::test]
async fn a_block_hook_stops_mcp_process_tools_and_an_allow_does_not_preapprove() {
    let e = Env::with_model().await;
    let record = e.dir.path().join("post.jsonl");
    // One hook blocks every tool call whose arguments mention xyzzy and allows all others
    // (an allow would let the agent run a dangerous command unasked); one records results.
    e.config(&format!(
        r#"[[hooks]]
name = "guard"
events = ["pre_tool_call"]
command = '''if grep -q xyzzy; then echo '{{"action":"block","message":"no xyzzy here"}}'; else echo '{{"action":"allow"}}'; fi'''

[[hooks]]
name = "record"
events = ["post_tool_call"]
command = "cat >> {rec}; echo >> {rec}"
"#,
        rec = record.display()
    ));
    let _gw = e.gateway();
    let key = e.create_key("claude", false);
    let mut c = serve(&e, &key).await;

    let blocked = c
        .tool_error("process_start", json!({"command": "echo xyzzy"}))
        .await;
    assert!(blocked.contains("no xyzzy here"), "{blocked}");
    assert_eq!(
        c.ok("process_list", json!({})).await["processes"],
        json!([])
    );
    // The hook allowed it, and still a dangerous command is not run over MCP.
    let refused = c
        .tool_error("process_start", json!({"command": "rm -rf ./build"}))
        .await;
    assert!(refused.contains("approval"), "{refused}");

    let started = c
        .ok(
            "process_start",
            json!({"command": "while read -r l; do echo \"got:$l\"; done"}),
        )
        .await;
    let proc_id = id_of(&started, "processId");
    let blocked = c
        .tool_error(
            "process_write",
            json!({"processId": proc_id.clone(), "data": "xyzzy", "submit": true}),
        )
        .await;
    assert!(blocked.contains("no xyzzy here"), "{blocked}");
    c.ok(
        "process_write",
        json!({"processId": proc_id.clone(), "data": "fine", "submit": true}),
    )
    .await;
    let out = output_until(&mut c, &proc_id, "got:fine").await;
    assert!(
        !out.contains("xyzzy"),
        "a blocked write reached the process: {out}"
    );

    // Every call that ran was reported to post_tool_call hooks, as from MCP.
    eventually("post_tool_call events from MCP", async || {
        let text = std::fs::read_to_string(&record).unwrap_or_default();
        (text.contains(r#""source":"mcp""#) && text.contains(r#""tool":"process""#)).then_some(())
    })
    .await;
    c.ok("process_kill", json!({"processId": proc_id})).await;
    c.close().await;
}

#[tokio::test]
async fn a_dangerous_command_submitted_to_a_shell_is_refused() {
    let e = Env::with_model().await;
    let _gw = e.gateway();
    let key = e.create_key("claude", false);
    let victim = e.dir.path().join("victim");
    std::fs::create_dir_all(victim.join("inner")).unwrap();
    let mut c = serve(&e, &key).await;
    let shell = c.ok("process_start", json!({"command": "sh"})).await;
    let proc_id = id_of(&shell, "processId");
    for data in [
        format!("rm -rf {}", victim.display()),
        format!("echo ok\nrm -rf {}", victim.display()),
    ] {
        let refused = c
            .tool_error(
                "process_write",
                json!({"processId": proc_id.clone(), "data": data, "submit": true}),
            )
            .await;
        assert!(refused.contains("refused"), "{refused}");
        assert!(refused.contains("approval"), "{refused}");
    }
    // The shell goes on: whatever it was sent before this has run by the time it answers.
    c.ok(
        "process_write",
        json!({"processId": proc_id.clone(), "data": "echo still-here", "submit": true}),
    )
    .await;
    output_until(&mut c, &proc_id, "still-here").await;
    assert!(victim.join("inner").is_dir(), "the refused delete ran");
    // The description promises a check on input, and no more.
    let tools = c.list_tools().await;
    let write = tools.iter().find(|t| t["name"] == "process_write").unwrap();
    assert!(
        write["description"]
            .as_str()
            .is_some_and(|d| d.contains("best effort")),
        "{write}"
    );
    c.ok("process_kill", json!({"processId": proc_id})).await;
    c.close().await;
}

#[tokio::test]
async fn the_bridge_takes_no_key_in_argv_no_admin_key_and_no_cleartext_to_another_host() {
    let e = Env::new();
    let gw = e.gateway();
    let agent = e.create_key("claude", false);
    // `--key` is gone: a key in argv is readable by anyone running `ps`.
    let o = e
        .tern()
        .args(["mcp", "serve", "--key", &agent])
        .output()
        .unwrap();
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("--key"), "{}", stderr(&o));

    // The operator's admin key is refused, saying what to do instead…
    let admin = e.key();
    let o = e
        .tern()
        .args(["mcp", "serve"])
        .env("TERN_API_KEY", &admin)
        .output()
        .unwrap();
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("admin key"), "{}", stderr(&o));
    assert!(stderr(&o).contains("--allow-admin-key"), "{}", stderr(&o));
    // …unless the operator says so.
    let home = e.home().display().to_string();
    let c = McpDriver::stdio(
        std::path::Path::new(TERN),
        &["mcp", "serve", "--allow-admin-key"],
        &[
            ("TERN_HOME", home.as_str()),
            ("TERN_API_KEY", admin.as_str()),
        ],
    )
    .await;
    assert!(c.connected(), "{}", c.hello);
    c.close().await;

    // Plain http to another host would carry the key in the clear: refused before
    // connecting. To loopback it is fine.
    let o = e
        .tern()
        .args(["mcp", "serve", "--url", "http://192.0.2.1:8080"])
        .env("TERN_API_KEY", &agent)
        .output()
        .unwrap();
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("in the clear"), "{}", stderr(&o));
    let c = McpDriver::stdio(
        std::path::Path::new(TERN),
        &["mcp", "serve", "--url", &gw.url],
        &[
            ("TERN_HOME", home.as_str()),
            ("TERN_API_KEY", agent.as_str()),
        ],
    )
    .await;
    assert!(c.connected(), "{}", c.hello);
    c.close().await;
}

#[tokio::test]
async fn revoking_a_key_closes_its_mcp_sessions_and_ends_their_waits() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let key = e.create_key("leaving", false);
    let mut c = serve(&e, &key).await;
    let asked = c.ok("request_approval", json!({"summary": "Later?"})).await;
    let waiting = c
        .start_call(
            "wait_for_decision",
            json!({"requestId": asked["requestId"], "timeout": 600}),
        )
        .await;
    c.progress(waiting).await;
    common::assert_ok(
        &e.tern()
            .args(["keys", "revoke", "leaving"])
            .output()
            .unwrap(),
    );
    // The gateway closes the revoked key's session, which ends its 600 s wait now.
    eventually(
        "the revoked key's session closed and its wait ended",
        async || {
            let logs = gw.logs();
            (logs.contains("closing an MCP session: its key was revoked")
                && logs.contains("wait_for_decision cancelled"))
            .then_some(())
        },
    )
    .await;
}
