//! Images from tool results to the model, against the scripted fake model over real HTTP: a
//! test tool hands images to its call's report, as an MCP server's image content does.

use super::*;
use crate::images::MAX_IMAGE_BYTES;
use base64::Engine;
use tern_tools::{Tool, ToolImage, ToolResult};

/// A tool that "takes a screenshot": reports its images and describes them in its result.
struct Shot(Vec<ToolImage>);

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

impl Tool for Shot {
    const NAME: &'static str = "shot";
    const TOOLSET: &'static str = "test";
    const DESCRIPTION: &'static str = "Takes a screenshot.";
    type Args = NoArgs;

    async fn run(&self, _args: NoArgs, ctx: ToolContext) -> ToolResult {
        for image in &self.0 {
            ctx.report.images.push(image.clone());
        }
        Ok(Value::String(format!(
            "[image: image/png, {} bytes]",
            self.0.first().map_or(0, ToolImage::decoded_len)
        )))
    }
}

fn png(bytes: usize) -> ToolImage {
    ToolImage {
        mime_type: "image/png".into(),
        data: base64::engine::general_purpose::STANDARD.encode(vec![0x89u8; bytes]),
    }
}

/// An agent whose `test` toolset has [`Shot`] with `images`; `vision` as `[model] vision`.
async fn env_with_shot(images: Vec<ToolImage>, vision: Option<bool>) -> Env {
    let mut e = env().await;
    let mut registry = Registry::builtin();
    registry.add(Shot(images));
    let mut cfg = ClientConfig::new(e.fake.base_url());
    cfg.max_retries = 0;
    e.agent = Arc::new(
        Agent::new(
            e.agent.store().clone(),
            Ok(Client::new(cfg).unwrap()),
            Arc::new(registry),
            e.agent.settings().clone(),
        )
        .with_vision(vision),
    );
    e
}

impl Env {
    /// A turn in which the model calls `shot` once, then answers.
    async fn shot_turn(&self) -> TurnOutcome {
        self.fake.push(Reply::tool_call("call_1", "shot", "{}"));
        self.fake.push(Reply::text("I see it"));
        let outcome = self
            .agent
            .run_turn(TurnRequest {
                toolsets: vec!["test".into()],
                ..self.request("take a screenshot")
            })
            .await
            .unwrap();
        assert_eq!(outcome.status, TurnStatus::Completed);
        outcome
    }

    /// The `messages` of every chat request the model received.
    fn chat_requests(&self) -> Vec<Vec<Value>> {
        self.fake
            .requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/chat/completions"))
            .map(|r| r.messages().to_vec())
            .collect()
    }
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
async fn with_vision_the_next_request_shows_the_image_after_the_tool_messages() {
    let image = png(40);
    let e = env_with_shot(vec![image.clone()], Some(true)).await;
    e.shot_turn().await;
    let requests = e.chat_requests();
    let after = &requests[1];
    let n = after.len();
    // The call, its result (the description), then the images as a user message.
    assert_eq!(after[n - 3]["tool_calls"][0]["id"], "call_1");
    assert_eq!(after[n - 2]["role"], "tool");
    assert_eq!(after[n - 2]["content"], "[image: image/png, 40 bytes]");
    let images = &after[n - 1];
    assert_eq!(images["role"], "user");
    let parts = images["content"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "{images}");
    assert_eq!(parts[0]["type"], "text");
    let text = parts[0]["text"].as_str().unwrap();
    assert!(
        text.contains("[image from tool call call_1 (shot): image/png, 40 bytes]"),
        "{text}"
    );
    assert_eq!(
        image_urls(after),
        [format!("data:image/png;base64,{}", image.data)]
    );
    // Stored: the transcript keeps it as text (described) and as parts, and the next turn
    // sends it again.
    let stored = e.transcript().await;
    let last_user = stored.iter().rev().find(|m| m.role == Role::User).unwrap();
    assert_eq!(last_user.content.as_deref(), Some(text));
    e.fake.push(Reply::text("still there"));
    e.turn("and now?").await;
    assert_eq!(image_urls(&e.chat_requests()[2]).len(), 1);
}

#[tokio::test]
async fn without_vision_only_the_description_goes() {
    let e = env_with_shot(vec![png(40)], Some(false)).await;
    e.shot_turn().await;
    let after = &e.chat_requests()[1];
    let last = after.last().unwrap();
    assert_eq!(last["role"], "tool");
    assert_eq!(last["content"], "[image: image/png, 40 bytes]");
    assert!(image_urls(after).is_empty());
    assert!(
        e.transcript().await.iter().all(|m| m.parts.is_none()),
        "nothing but text stored"
    );
}

#[tokio::test]
async fn an_oversized_image_is_described_not_sent() {
    let e = env_with_shot(vec![png(MAX_IMAGE_BYTES + 1), png(12)], Some(true)).await;
    e.shot_turn().await;
    let after = &e.chat_requests()[1];
    let urls = image_urls(after);
    assert_eq!(urls, [format!("data:image/png;base64,{}", png(12).data)]);
    let text = after.last().unwrap()["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(
        text.contains(&format!(
            "[image from tool call call_1 (shot): image/png, {} bytes; not shown: larger than 4 MiB]",
            MAX_IMAGE_BYTES + 1
        )),
        "{text}"
    );

    // Alone, it is not worth a message: the tool's description is all the model gets.
    let e = env_with_shot(vec![png(MAX_IMAGE_BYTES + 1)], Some(true)).await;
    e.shot_turn().await;
    let after = &e.chat_requests()[1];
    assert_eq!(after.last().unwrap()["role"], "tool");
    assert!(image_urls(after).is_empty());
}

#[tokio::test]
async fn unset_vision_follows_what_the_server_reports() {
    // OpenRouter's metadata says the model takes images.
    let e = env_with_shot(vec![png(40)], None).await;
    e.fake.set_model_info(
        "fake-model",
        serde_json::json!({"architecture": {"input_modalities": ["text", "image"]}}),
    );
    e.shot_turn().await;
    assert_eq!(image_urls(&e.chat_requests()[1]).len(), 1);

    // llama.cpp started with a multimodal projector says so in /props.
    let e = env_with_shot(vec![png(40)], None).await;
    e.fake
        .set_props(serde_json::json!({"modalities": {"vision": true, "audio": false}}));
    e.shot_turn().await;
    assert_eq!(image_urls(&e.chat_requests()[1]).len(), 1);

    // A server that says nothing: no.
    let e = env_with_shot(vec![png(40)], None).await;
    e.shot_turn().await;
    assert!(image_urls(&e.chat_requests()[1]).is_empty());
}
