//! What a server sends tern during a call: progress (to the calling tool's `ToolReport`)
//! and elicitations (to the client's `Elicitor`), against the real server-everything.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tern_mcp::elicit::FieldKind;
use tern_mcp::{
    ClientOptions, ElicitError, ElicitationAnswer, ElicitationRequest, Elicitor, McpClient,
};
use tern_tools::{BoxFuture, DenyAll, Registry, ToolContext, ToolLimits, ToolProgress, ToolReport};
use tokio_util::sync::CancellationToken;

use crate::common::{everything, everything_config};

fn ctx(report: ToolReport) -> ToolContext {
    ToolContext {
        session_id: "sess-1".into(),
        call_id: "call-1".into(),
        call_seq: 7,
        workdir: std::env::temp_dir(),
        cancel: CancellationToken::new(),
        approver: Arc::new(DenyAll {
            reason: "tests never approve".into(),
        }),
        limits: ToolLimits::default(),
        preapproved: false,
        subagents: None,
        toolsets: Default::default(),
        report,
    }
}

fn toolsets() -> Vec<String> {
    vec!["mcp:everything".to_owned()]
}

#[tokio::test]
async fn the_long_running_operation_reports_its_progress_in_order() {
    let mut registry = Registry::new();
    tern_mcp::register(&mut registry, everything("").await)
        .await
        .unwrap();
    let seen: Arc<Mutex<Vec<ToolProgress>>> = Arc::default();
    let sink = {
        let seen = Arc::clone(&seen);
        Arc::new(move |p: ToolProgress| seen.lock().unwrap().push(p))
    };
    let r = registry
        .call(
            "mcp__everything__trigger-long-running-operation",
            r#"{"duration": 1, "steps": 4}"#,
            &toolsets(),
            ctx(ToolReport::default().with_progress(sink)),
        )
        .await
        .unwrap();
    assert!(
        r.as_str()
            .unwrap()
            .contains("Long running operation completed"),
        "{r}"
    );
    let seen = seen.lock().unwrap().clone();
    let values: Vec<f64> = seen.iter().map(|p| p.progress).collect();
    // Every report was sent before the result, so all have arrived: in order, none lost.
    assert_eq!(values, [1.0, 2.0, 3.0, 4.0], "{seen:?}");
    assert!(seen.iter().all(|p| p.total == Some(4.0)), "{seen:?}");
}

#[tokio::test]
async fn a_call_without_a_sink_still_answers() {
    let client = everything("").await;
    let r = client
        .call_tool(
            "trigger-long-running-operation",
            json!({"duration": 0.2, "steps": 2}).as_object().cloned(),
        )
        .await
        .unwrap();
    assert!(r.contains("completed"), "{r}");
}

/// An elicitor that records what it was asked and answers as told.
struct Scripted {
    answer: ElicitationAnswer,
    asked: Mutex<Vec<ElicitationRequest>>,
}

impl Elicitor for Scripted {
    fn elicit(
        &self,
        request: ElicitationRequest,
    ) -> BoxFuture<'_, Result<ElicitationAnswer, ElicitError>> {
        self.asked.lock().unwrap().push(request);
        let answer = self.answer.clone();
        Box::pin(async move { Ok(answer) })
    }
}

async fn with_elicitor(answer: ElicitationAnswer) -> (Registry, Arc<Scripted>) {
    let elicitor = Arc::new(Scripted {
        answer,
        asked: Mutex::default(),
    });
    let client = McpClient::start_with(
        "everything",
        &everything_config(""),
        &ClientOptions::default().with_elicitor(elicitor.clone()),
    )
    .await
    .unwrap();
    let mut registry = Registry::new();
    tern_mcp::register(&mut registry, Arc::new(client))
        .await
        .unwrap();
    (registry, elicitor)
}

#[tokio::test]
async fn an_accepted_elicitation_reaches_the_server_with_its_values() {
    let content = json!({"name": "Ada Lovelace", "check": true, "integer": 7, "petType": "pet-2"});
    let (registry, elicitor) = with_elicitor(ElicitationAnswer::Accept {
        content: content.as_object().cloned().unwrap(),
    })
    .await;
    let r = registry
        .call(
            "mcp__everything__trigger-elicitation-request",
            "{}",
            &toolsets(),
            ctx(ToolReport::default()),
        )
        .await
        .unwrap();
    let text = r.as_str().unwrap();
    assert!(text.contains("- Name: Ada Lovelace"), "{text}");
    assert!(text.contains("- Agreed to terms: true"), "{text}");
    assert!(text.contains("- Favorite Integer: 7"), "{text}");
    let asked = elicitor.asked.lock().unwrap();
    let req = &asked[0];
    assert_eq!(req.server, "everything");
    assert_eq!(req.tool.as_deref(), Some("trigger-elicitation-request"));
    assert_eq!(
        req.message,
        "Please provide inputs for the following fields:"
    );
    // Asked for the call it arrived during.
    let scope = req.call.as_ref().unwrap();
    assert_eq!(
        (
            scope.session_id.as_str(),
            scope.call_id.as_str(),
            scope.call_seq
        ),
        ("sess-1", "call-1", 7)
    );
    let name = req.fields.iter().find(|f| f.name == "name").unwrap();
    assert!(name.required);
    assert_eq!(name.description.as_deref(), Some("Your full, legal name"));
    let integer = req.fields.iter().find(|f| f.name == "integer").unwrap();
    assert_eq!(
        integer.kind,
        FieldKind::Number {
            integer: true,
            min: Some(1.0),
            max: Some(100.0)
        }
    );
    assert_eq!(integer.default, Some(json!(42)));
    let hero = req
        .fields
        .iter()
        .find(|f| f.name == "titledSingleSelectEnum")
        .unwrap();
    assert_eq!(hero.kind.options()[1].label, "Green Lantern");
}

#[tokio::test]
async fn declined_and_cancelled_elicitations_reach_the_server_as_such() {
    for (answer, said) in [
        (ElicitationAnswer::Decline, "\"action\": \"decline\""),
        (ElicitationAnswer::Cancel, "\"action\": \"cancel\""),
    ] {
        let (registry, _) = with_elicitor(answer).await;
        let r = registry
            .call(
                "mcp__everything__trigger-elicitation-request",
                "{}",
                &toolsets(),
                ctx(ToolReport::default()),
            )
            .await
            .unwrap();
        let text = r.as_str().unwrap();
        assert!(text.contains(said), "{text}");
    }
}

#[tokio::test]
async fn without_an_elicitor_the_capability_is_not_advertised() {
    // server-everything offers its elicitation tool only to clients that can answer.
    let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        tools.into_iter().map(|t| t.name.to_string()).collect()
    };
    let without = names(everything("").await.list_tools().await.unwrap());
    assert!(
        !without.contains(&"trigger-elicitation-request".to_owned()),
        "{without:?}"
    );
    let (registry, _) = with_elicitor(ElicitationAnswer::Decline).await;
    let with: Vec<Value> = registry.schemas(&toolsets());
    assert!(
        with.iter()
            .any(|s| s["function"]["name"] == "mcp__everything__trigger-elicitation-request"),
        "{with:?}"
    );
}
