//! Server-everything's tools as tern tools (`mcp__everything__…`), called the way the agent
//! calls tools: through `tern_tools::Registry::call` with the model's argument string.

use std::sync::Arc;

use serde_json::{Value, json};
use tern_tools::{DenyAll, Registry, ToolContext, ToolLimits, result_to_content};
use tokio_util::sync::CancellationToken;

use crate::common::{everything, everything_teed, sent};
use tern_test_support::wait::eventually;

fn ctx(cancel: CancellationToken) -> ToolContext {
    ToolContext {
        session_id: "s".into(),
        call_id: "call-1".into(),
        call_seq: 0,
        workdir: std::env::temp_dir(),
        cancel,
        approver: Arc::new(DenyAll {
            reason: "tests never approve".into(),
        }),
        limits: ToolLimits::default(),
        preapproved: false,
        subagents: None,
        toolsets: Default::default(),
        report: Default::default(),
    }
}

fn toolsets() -> Vec<String> {
    vec!["mcp:everything".to_owned()]
}

async fn registry(extra: &str) -> Registry {
    let mut registry = Registry::new();
    let added = tern_mcp::register(&mut registry, everything(extra).await)
        .await
        .unwrap();
    assert!(!added.is_empty());
    registry
}

#[tokio::test]
async fn tools_are_named_for_their_server_with_the_servers_schemas() {
    let registry = registry("").await;
    let schemas = registry.schemas(&toolsets());
    let sum = schemas
        .iter()
        .find(|s| s["function"]["name"] == "mcp__everything__get-sum")
        .unwrap_or_else(|| panic!("no get-sum in {schemas:#?}"));
    assert_eq!(
        sum["function"]["description"],
        "Returns the sum of two numbers"
    );
    let params = &sum["function"]["parameters"];
    assert_eq!(params["type"], "object");
    assert_eq!(params["properties"]["a"]["type"], "number");
    assert_eq!(params["required"], json!(["a", "b"]));
    assert!(params.get("$schema").is_none(), "{params}");
    // A tool without arguments still has an object schema with properties.
    let image = schemas
        .iter()
        .find(|s| s["function"]["name"] == "mcp__everything__get-tiny-image")
        .unwrap();
    assert!(image["function"]["parameters"]["properties"].is_object());
    // Not offered outside its toolset.
    assert!(registry.schemas(&["terminal".to_owned()]).is_empty());
}

#[tokio::test]
async fn enabled_and_disabled_tools_choose_what_is_registered() {
    let registry = registry(
        "enabled_tools = [\"echo\", \"get-sum\", \"get-env\"]\ndisabled_tools = [\"get-env\"]",
    )
    .await;
    let mut names: Vec<String> = registry
        .schemas(&toolsets())
        .iter()
        .map(|s| s["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["mcp__everything__echo", "mcp__everything__get-sum"]);
}

#[tokio::test]
async fn echo_and_sum_through_the_registry() {
    let registry = registry("").await;
    let r = registry
        .call(
            "mcp__everything__echo",
            r#"{"message": "through tern"}"#,
            &toolsets(),
            ctx(CancellationToken::new()),
        )
        .await;
    assert_eq!(r, Ok(Value::String("Echo: through tern".to_owned())));
    let r = registry
        .call(
            "mcp__everything__get-sum",
            r#"{"a": 19, "b": 23}"#,
            &toolsets(),
            ctx(CancellationToken::new()),
        )
        .await;
    // Text reaches the model as text, not as a quoted JSON string.
    assert_eq!(result_to_content(&r), "The sum of 19 and 23 is 42.");
}

#[tokio::test]
async fn arguments_against_the_servers_schema_are_refused_before_the_call() {
    let registry = registry("").await;
    let r = registry
        .call(
            "mcp__everything__get-sum",
            r#"{"a": "two", "b": 2}"#,
            &toolsets(),
            ctx(CancellationToken::new()),
        )
        .await;
    let err = r.unwrap_err().0;
    assert!(
        err.starts_with("invalid arguments for `mcp__everything__get-sum`: "),
        "{err}"
    );
    assert!(err.contains("/a"), "{err}");
}

#[tokio::test]
async fn an_error_result_reaches_the_model_as_an_error() {
    let registry = registry("").await;
    let r = registry
        .call(
            "mcp__everything__get-resource-reference",
            r#"{"resourceId": 0}"#,
            &toolsets(),
            ctx(CancellationToken::new()),
        )
        .await;
    let content: Value = serde_json::from_str(&result_to_content(&r)).unwrap();
    let err = content["error"].as_str().unwrap();
    assert!(err.contains("Invalid resourceId: 0"), "{err}");
    assert!(err.contains("MCP server `everything` failed"), "{err}");
}

#[tokio::test]
async fn an_image_is_described_in_the_result_and_handed_to_the_turn() {
    let registry = registry("").await;
    let ctx = ctx(CancellationToken::new());
    let images = ctx.report.images.clone();
    let r = registry
        .call("mcp__everything__get-tiny-image", "{}", &toolsets(), ctx)
        .await
        .unwrap();
    let text = r.as_str().unwrap();
    assert!(text.contains("[image: image/png, "), "{text}");
    assert!(
        !text.contains("iVBOR"),
        "the image's data went into the text: {text}"
    );
    // The pixels go to the turn, for a model that accepts images: the server's PNG, whole.
    let images = images.take();
    assert_eq!(images.len(), 1, "{images:?}");
    assert_eq!(images[0].mime_type, "image/png");
    assert!(images[0].data.starts_with("iVBOR"), "{:?}", images[0]);
    assert!(
        text.contains(&format!("{} bytes]", images[0].decoded_len())),
        "{text}"
    );
}

#[tokio::test]
async fn a_call_without_images_hands_none_to_the_turn() {
    let registry = registry("").await;
    let ctx = ctx(CancellationToken::new());
    let images = ctx.report.images.clone();
    registry
        .call(
            "mcp__everything__echo",
            r#"{"message": "no pixels"}"#,
            &toolsets(),
            ctx,
        )
        .await
        .unwrap();
    assert!(images.is_empty());
}

#[tokio::test]
async fn an_interrupted_turn_cancels_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sent.jsonl");
    let mut registry = Registry::new();
    tern_mcp::register(&mut registry, everything_teed(&log, "").await)
        .await
        .unwrap();
    let cancel = CancellationToken::new();
    let sets = toolsets();
    let call = registry.call(
        "mcp__everything__trigger-long-running-operation",
        r#"{"duration": 60, "steps": 2}"#,
        &sets,
        ctx(cancel.clone()),
    );
    // Interrupted once the server has the call.
    let interrupt = async {
        let call = eventually("the call sent", async || sent(&log, "tools/call").pop()).await;
        cancel.cancel();
        call
    };
    let (result, sent_call) = tokio::join!(call, interrupt);
    let err = result.unwrap_err().0;
    let cancelled = eventually("notifications/cancelled sent", async || {
        sent(&log, "notifications/cancelled").pop()
    })
    .await;
    assert_eq!(
        cancelled["params"]["requestId"], sent_call["id"],
        "{cancelled}"
    );
    assert_eq!(
        err,
        "interrupted: the call to `trigger-long-running-operation` of MCP server `everything` was cancelled"
    );
    // The server goes on answering.
    let r = registry
        .call(
            "mcp__everything__echo",
            r#"{"message": "still here"}"#,
            &toolsets(),
            ctx(CancellationToken::new()),
        )
        .await;
    assert_eq!(r, Ok(Value::String("Echo: still here".to_owned())));
}
