//! `[mcp_servers.NAME] sources` in the gateway: a server kept to scheduled jobs gives its
//! tools to a cron run's turn and to no API turn — neither in the tools the model is offered
//! nor when the model calls one anyway. Runs the real `@modelcontextprotocol/server-everything`
//! (`npm ci` in `tests/mcp`).

use serde_json::json;
use tern_fake_model::{FakeModel, Reply};
use tern_test_support::{eventually, http_post};

use crate::common::{self, home_for, status_json};
use crate::suite::mcp::{everything_entry, unsandboxed_without_landlock};

const KEY: &str = "mcp-sources-test-server-key-0123456789";

fn mcp_tools(names: &[String]) -> Vec<&String> {
    names.iter().filter(|t| t.starts_with("mcp__")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_kept_to_cron_serves_a_cron_run_and_no_api_turn() {
    let fake = FakeModel::start().await.unwrap();
    let home = home_for(
        &fake,
        &format!(
            "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n\
             sources = [\"cron\"]\n{}\n",
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

    // An API turn: no MCP tool offered, and one called anyway is refused.
    fake.push(Reply::tool_call(
        "call-1",
        "mcp__everything__echo",
        json!({"message": "from an API turn"}).to_string(),
    ))
    .push(Reply::text("api done"));
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
    let requests = fake.requests();
    let offered = requests[0].tool_names();
    assert!(
        offered.iter().any(|t| t == "terminal"),
        "the turn has its other tools: {offered:?}"
    );
    assert!(mcp_tools(&offered).is_empty(), "{offered:?}");
    let refused = requests[1]
        .messages()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap();
    let refused = refused["content"].as_str().unwrap();
    assert!(!refused.contains("Echo: from an API turn"), "{refused}");
    assert!(refused.contains("mcp__everything__echo"), "{refused}");

    // A cron run (by hand) of the same gateway: its turn has the server's tools.
    fake.push(Reply::text("cron done"));
    let client = reqwest::Client::new();
    let (status, job) = status_json(
        client
            .post(format!("{url}/api/cron/jobs"))
            .bearer_auth(KEY)
            .json(&json!({"schedule": "every 1h", "prompt": "the nightly check"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let job_id = job["id"].as_str().unwrap();
    let (status, started) = status_json(
        client
            .post(format!("{url}/api/cron/jobs/{job_id}/run"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 202, "{started}");
    let run = eventually("the cron run's model request", async || {
        fake.requests().into_iter().find(|r| {
            r.messages()
                .iter()
                .any(|m| m["content"].as_str() == Some("the nightly check"))
        })
    })
    .await;
    let offered = run.tool_names();
    assert!(
        offered.iter().any(|t| t == "mcp__everything__echo"),
        "{offered:?}"
    );

    handle.shutdown().await.unwrap();
}
