//! Server-everything's image, through `McpTool` and a whole agent turn, to the scripted fake
//! model: sent as an `image_url` part to a model that accepts images, described to one that
//! does not.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tern_agent::{Agent, AgentSettings, Interrupt, TurnRequest, TurnStatus};
use tern_fake_model::{FakeModel, Reply};
use tern_llm::{Client, ClientConfig};
use tern_store::{NewSession, Store};
use tern_tools::{DenyAll, Registry, ToolLimits};

use crate::common::everything;

/// Runs a turn in which the model calls `get-tiny-image`, with `[model] vision = vision`;
/// returns the `messages` of the request that follows the call.
async fn turn_with_the_tiny_image(vision: bool) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("tern.db")).await.unwrap();
    let fake = FakeModel::start().await.unwrap();
    let mut registry = Registry::new();
    tern_mcp::register(&mut registry, everything("").await)
        .await
        .unwrap();
    let mut cfg = ClientConfig::new(fake.base_url());
    cfg.backoff_base = Duration::from_millis(5);
    let agent = Agent::new(
        store.clone(),
        Ok(Client::new(cfg).unwrap()),
        Arc::new(registry),
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
    )
    .with_vision(Some(vision));
    let session = store
        .create_session(NewSession {
            source: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    fake.push(Reply::tool_call(
        "call_img",
        "mcp__everything__get-tiny-image",
        "{}",
    ));
    fake.push(Reply::text("a tiny image"));
    let outcome = agent
        .run_turn(TurnRequest {
            session_id: session,
            input: "show me the tiny image".into(),
            input_appended: false,
            interrupt: Interrupt::new(),
            system_prompt: None,
            approver: Arc::new(DenyAll {
                reason: "tests never approve".into(),
            }),
            workdir: dir.path().to_path_buf(),
            toolsets: vec!["mcp:everything".into()],
            events: None,
            ticket: None,
        })
        .await
        .unwrap();
    assert_eq!(outcome.status, TurnStatus::Completed, "{outcome:?}");
    let requests: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .collect();
    assert_eq!(requests.len(), 2);
    requests[1].messages().to_vec()
}

#[tokio::test]
async fn the_image_goes_to_a_model_that_accepts_images() {
    let messages = turn_with_the_tiny_image(true).await;
    let n = messages.len();
    let tool = &messages[n - 2];
    assert_eq!(tool["role"], "tool");
    assert!(
        tool["content"]
            .as_str()
            .unwrap()
            .contains("[image: image/png, "),
        "{tool}"
    );
    let user = &messages[n - 1];
    assert_eq!(user["role"], "user");
    let parts = user["content"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "{user}");
    let text = parts[0]["text"].as_str().unwrap();
    assert!(
        text.contains("image from tool call call_img (mcp__everything__get-tiny-image): image/png"),
        "{text}"
    );
    assert_eq!(parts[1]["type"], "image_url");
    let url = parts[1]["image_url"]["url"].as_str().unwrap();
    // server-everything's PNG, whole.
    assert!(
        url.starts_with("data:image/png;base64,iVBORw0KGgo"),
        "{url}"
    );
}

#[tokio::test]
async fn a_model_without_vision_reads_only_the_description() {
    let messages = turn_with_the_tiny_image(false).await;
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "tool");
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .contains("[image: image/png, "),
        "{last}"
    );
    let body = Value::Array(messages).to_string();
    assert!(!body.contains("image_url"), "{body}");
    assert!(
        !body.contains("iVBORw0KGgo"),
        "the image's data was sent: {body}"
    );
}
