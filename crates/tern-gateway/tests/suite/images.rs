//! An image a tool produced, kept in the session: after a gateway restart on the same store
//! the model is shown it again, and the API lists its message as text.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tern_agent::{Agent, AgentSettings};
use tern_fake_model::{FakeModel, Reply};
use tern_gateway::{GatewaySettings, auth};
use tern_llm::{Client, ClientConfig};
use tern_store::Store;
use tern_tools::{
    BoxFuture, DynTool, Registry, ToolContext, ToolImage, ToolLimits, ToolResult, ToolSpec,
};

/// A 1×1 PNG, in base64.
const PIXEL: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// A tool that hands the turn one image, as an MCP server's image content does.
struct Shot(ToolSpec);

impl Shot {
    fn new() -> Self {
        Shot(ToolSpec {
            name: "shot",
            toolset: "test",
            description: "Takes a screenshot.",
            parameters: json!({"type": "object", "properties": {}}),
        })
    }
}

impl DynTool for Shot {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn call(&self, _args: Value, ctx: ToolContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(async move {
            ctx.report.images.push(ToolImage {
                mime_type: "image/png".into(),
                data: PIXEL.into(),
            });
            Ok(Value::String("[image: image/png, 70 bytes]".into()))
        })
    }
}

/// A gateway on `dir`'s store whose model accepts images and whose `test` toolset has
/// [`Shot`]; its base URL, the server's task and the store.
async fn start(
    dir: &std::path::Path,
    fake: &FakeModel,
) -> (String, tokio::task::JoinHandle<()>, Store) {
    let (store, work) = common::open(dir).await;
    let mut registry = Registry::builtin();
    registry.register(Arc::new(Shot::new()));
    let mut cfg = ClientConfig::new(fake.base_url());
    cfg.backoff_base = Duration::from_millis(5);
    cfg.max_retries = 0;
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
    .with_vision(Some(true));
    let gw = common::gateway(
        Arc::new(agent),
        GatewaySettings {
            toolsets: vec!["test".into()],
            model: "fake-model".into(),
            ..common::settings(work)
        },
    );
    let (url, server) = common::serve(&gw).await;
    (url, server, store)
}

async fn chat(http: &reqwest::Client, url: &str, key: &str, id: &str, message: &str) {
    let r = http
        .post(format!("{url}/api/sessions/{id}/chat"))
        .bearer_auth(key)
        .json(&json!({ "message": message }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

fn image_urls(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|p| p["type"] == "image_url")
        .map(|p| p["image_url"]["url"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn an_image_in_a_session_survives_a_gateway_restart() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeModel::start().await.unwrap();
    let http = reqwest::Client::new();
    let (url, server, store) = start(dir.path(), &fake).await;
    let key = auth::create_key(&store, "test").await.unwrap();
    let r = http
        .post(format!("{url}/api/sessions"))
        .bearer_auth(&key)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let id = r.json::<Value>().await.unwrap()["session"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    fake.push(Reply::tool_call("call_1", "shot", "{}"));
    fake.push(Reply::text("a single pixel"));
    chat(&http, &url, &key, &id, "take a screenshot").await;
    let pixel = format!("data:image/png;base64,{PIXEL}");
    let sent = fake.requests().last().unwrap().messages().to_vec();
    assert_eq!(image_urls(&sent), std::slice::from_ref(&pixel));

    // Restart: the server and its store are gone; a new gateway opens the same database.
    server.abort();
    let _ = server.await;
    store.close().await;
    let (url, _server, _store) = start(dir.path(), &fake).await;

    fake.push(Reply::text("still a single pixel"));
    chat(&http, &url, &key, &id, "what did you see?").await;
    let sent = fake.requests().last().unwrap().messages().to_vec();
    assert_eq!(image_urls(&sent), [pixel], "the image was not reloaded");
    let images = sent.iter().find(|m| m["content"].is_array()).unwrap();
    assert_eq!(images["role"], "user");
    assert!(
        images["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("[image from tool call call_1 (shot): image/png, 70 bytes]"),
        "{images}"
    );

    // The API lists the message as its text: the image described, never its data.
    let r = http
        .get(format!("{url}/api/sessions/{id}/messages"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    let body = r.text().await.unwrap();
    assert!(
        body.contains("[image from tool call call_1 (shot): image/png, 70 bytes]"),
        "{body}"
    );
    assert!(!body.contains(PIXEL), "{body}");
}
