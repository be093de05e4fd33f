//! MCP servers in the gateway: `[mcp_servers]` started at boot, their tools in a turn, a
//! failed server in `GET /api/mcp/servers`, and the servers closed by the shutdown. Runs the
//! real `@modelcontextprotocol/server-everything` (`npm ci` in `tests/mcp`).

use std::path::{Path, PathBuf};

use serde_json::json;
use tern_fake_model::{FakeModel, Reply};
use tern_test_support::{http_get, http_post};

use crate::common::{self, home_for};

const KEY: &str = "mcp-test-server-key-0123456789";

/// server-everything's entry point; fails saying what to install when it is missing.
pub(crate) fn everything_entry() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp");
    let entry = root.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.is_file(),
        "{} is missing: run `npm ci --no-audit --no-fund` in {} (and install Node.js 20 or later)",
        entry.display(),
        root.display()
    );
    entry
}

/// Where the kernel cannot enforce the sandbox a sandboxed server does not start (as the
/// agent's commands do not run): there the server runs without one, and the rest is tested.
pub(crate) fn unsandboxed_without_landlock() -> &'static str {
    match tern_sandbox::Support::probe() {
        tern_sandbox::Support::Missing { reason } => {
            eprintln!("no Landlock ({reason}): the MCP server runs unsandboxed");
            "sandbox = \"none\""
        }
        tern_sandbox::Support::Landlock { .. } => "",
    }
}

#[tokio::test]
async fn a_turn_calls_an_mcp_tool_and_a_failed_server_is_reported() {
    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::tool_call(
        "call-1",
        "mcp__everything__echo",
        json!({"message": "through the gateway"}).to_string(),
    ));
    fake.push(Reply::text("done"));
    let home = home_for(
        &fake,
        &format!(
            "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n{}\n\
             [mcp_servers.ghost]\ncommand = \"tern-no-such-program\"\n",
            everything_entry().display().to_string(),
            unsandboxed_without_landlock()
        ),
    );
    let handle = common::builder(&home)
        .server_key(Some(KEY.into()))
        .start()
        .await
        .unwrap()
        .handle;
    let url = handle.url();

    let (status, created) = http_post(&format!("{url}/api/sessions"), KEY, json!({})).await;
    assert_eq!(status, 201, "{created}");
    let id = created["session"]["id"].as_str().unwrap();
    let (status, answer) = http_post(
        &format!("{url}/api/sessions/{id}/chat"),
        KEY,
        json!({"message": "echo something"}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["message"]["content"], "done", "{answer}");
    let requests = fake.requests();
    // Every configured server that started is offered by default; the failed one is not.
    let offered = requests[0].tool_names();
    assert!(
        offered.iter().any(|t| t == "mcp__everything__get-sum"),
        "{offered:?}"
    );
    assert!(
        !offered.iter().any(|t| t.starts_with("mcp__ghost__")),
        "{offered:?}"
    );
    // The model's next request carries the server's answer (a tool's result is JSON).
    let tool_message = requests[1]
        .messages()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap();
    assert_eq!(tool_message["content"], "Echo: through the gateway");

    let (status, servers) = http_get(&format!("{url}/api/mcp/servers"), KEY).await;
    assert_eq!(status, 200, "{servers}");
    let servers = servers["servers"].as_array().unwrap();
    let everything = servers.iter().find(|s| s["name"] == "everything").unwrap();
    assert_eq!(everything["state"], "running", "{everything}");
    let pid = everything["pid"].as_u64().unwrap();
    let ghost = servers.iter().find(|s| s["name"] == "ghost").unwrap();
    assert_eq!(ghost["state"], "failed", "{ghost}");
    assert!(
        ghost["error"]
            .as_str()
            .unwrap()
            .starts_with("cannot start MCP server `ghost` (`tern-no-such-program`): "),
        "{ghost}"
    );
    // Without a key: refused; an agent key: forbidden (the servers are the gateway's).
    let r = reqwest::get(format!("{url}/api/mcp/servers"))
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let agent = tern_gateway::auth::create_key(&handle.gateway().store, "agent")
        .await
        .unwrap();
    let (status, body) = http_get(&format!("{url}/api/mcp/servers"), &agent).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden", "{body}");

    handle.shutdown().await.unwrap();
    tern_test_support::wait::eventually("the MCP server's process to be gone", async || {
        (!Path::new(&format!("/proc/{pid}")).exists()).then_some(())
    })
    .await;
}

/// An MCP server's question asked in the inbox by a gateway that was then killed: its tool
/// call is gone, so the next start withdraws the request (the answer could reach no one) and
/// forgets it; one answered before the restart stays answered.
#[tokio::test]
async fn a_question_a_killed_gateway_asked_is_withdrawn_at_the_next_start() {
    use tern_inbox::review::RequestStatus;
    use tern_waits::client::{EmbeddedInbox, InboxClient, RequestKind};

    let fake = FakeModel::start().await.unwrap();
    let home = home_for(&fake, "");
    let handle = common::builder(&home).start().await.unwrap().handle;
    // What a gateway killed while its elicitor waited leaves behind: pending inbox requests
    // recorded as waited for (made here as the elicitor makes them).
    let gw = handle.gateway();
    let client = EmbeddedInbox::new(gw.inbox.clone());
    let task = client.session_task("s1", "default").await.unwrap();
    let mut ids = Vec::new();
    for n in 0..2 {
        let body = json!({
            "projectName": task.project_name,
            "taskId": task.task_id,
            "summary": format!("MCP server `ask` asks: question {n}"),
            "fields": [{"type": "Switch", "id": "ok", "label": "Go ahead", "required": true}],
        });
        let id = client
            .create_request(RequestKind::Elicitation, body, &format!("q{n}"))
            .await
            .unwrap();
        gw.store.mcp_elicitation_asked(&id, "s1").await.unwrap();
        ids.push(id);
    }
    // The second was answered just before the end.
    gw.inbox
        .answer_elicitation(&ids[1], json!({"ok": true}).as_object().unwrap(), "ann")
        .await
        .unwrap();
    handle.shutdown().await.unwrap();

    let handle = common::builder(&home).start().await.unwrap().handle;
    let gw = handle.gateway();
    let first = gw.inbox.request_view(&ids[0]).await.unwrap();
    assert_eq!(first.summary.status, RequestStatus::Withdrawn, "{first:?}");
    let second = gw.inbox.request_view(&ids[1]).await.unwrap();
    assert_eq!(second.summary.status, RequestStatus::Decided, "{second:?}");
    for id in &ids {
        assert!(!gw.store.mcp_elicitation_pending(id).await.unwrap());
    }
    handle.shutdown().await.unwrap();
}
