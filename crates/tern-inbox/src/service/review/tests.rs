use super::*;
use crate::model::Steps;
use crate::model::{CreateApproval, CreateElicitation, CreateTask};
use crate::outcome::Outcome;
use crate::service::DEFAULT_PROJECT;
use serde_json::json;
use tern_store::Store;

const AGENT: &str = "agent-a";

async fn inbox() -> (tempfile::TempDir, Inbox) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("tern.db")).await.unwrap();
    let inbox = Inbox::new(store);
    inbox.ensure_default_project().await.unwrap();
    (dir, inbox)
}

async fn task(inbox: &Inbox, project: &str, name: &str) -> String {
    inbox
        .create_task(
            AGENT,
            CreateTask {
                name: name.into(),
                project_name: project.into(),
                external_id: None,
                metadata_patch: None,
            },
            None,
        )
        .await
        .unwrap()
        .id
}

async fn approval(inbox: &Inbox, project: &str, task_id: &str, summary: &str) -> String {
    let body: CreateApproval = serde_json::from_value(json!({
        "projectName": project, "taskId": task_id, "summary": summary,
        "keyValueContext": {"action": "deploy"},
        "recommendation": {"outcome": {"type": "REJECT"}, "rationale": "risky"},
    }))
    .unwrap();
    inbox
        .create_approval(AGENT, body, None)
        .await
        .unwrap()
        .event_id
}

async fn elicitation(inbox: &Inbox, task_id: &str) -> String {
    let body: CreateElicitation = serde_json::from_value(json!({
        "projectName": DEFAULT_PROJECT, "taskId": task_id, "summary": "Which region?",
        "fields": [{"type": "Select", "id": "region", "label": "Region", "required": true,
                    "options": ["eu", "us"]}],
        "recommendation": [{"fieldId": "region", "value": "eu"}],
    }))
    .unwrap();
    inbox
        .create_elicitation(AGENT, body, None)
        .await
        .unwrap()
        .event_id
}

#[tokio::test]
async fn lists_newest_first_with_filters_count_and_cursor() {
    let (_dir, inbox) = inbox().await;
    let steps: Steps = serde_json::from_value(json!({
        "initialStep": "work", "steps": [{"name": "work", "owner": "AGENT"}]
    }))
    .unwrap();
    inbox.add_project("ops", steps).await.unwrap();
    let t1 = task(&inbox, DEFAULT_PROJECT, "first").await;
    let t2 = task(&inbox, "ops", "second").await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(approval(&inbox, DEFAULT_PROJECT, &t1, &format!("default {i}")).await);
    }
    ids.push(approval(&inbox, "ops", &t2, "ops 0").await);
    ids.push(elicitation(&inbox, &t1).await);
    inbox
        .decide_approval(&ids[0], Outcome::new(OutcomeType::Approve), "alice")
        .await
        .unwrap();

    let pending = inbox
        .list_requests(&RequestFilter {
            status: Some(RequestStatus::Pending),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(pending.count, 6);
    let got: Vec<&str> = pending.items.iter().map(|r| r.id.as_str()).collect();
    let want: Vec<&str> = ids[1..].iter().rev().map(String::as_str).collect();
    assert_eq!(got, want, "newest first");
    assert_eq!(pending.items[0].kind, RequestKind::Elicitation);
    assert_eq!(pending.items[1].project_name, "ops");
    assert_eq!(pending.items[1].task_name, "second");
    assert_eq!(pending.items[1].summary, "ops 0");
    assert!(pending.next_cursor.is_none());

    // Pages of two walk the same order without repeats or gaps.
    let mut walked = Vec::new();
    let mut before = None;
    loop {
        let page = inbox
            .list_requests(&RequestFilter {
                status: Some(RequestStatus::Pending),
                limit: Some(2),
                before: before.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(page.count, 6, "the count covers every page");
        walked.extend(page.items.into_iter().map(|r| r.id));
        match page.next_cursor {
            Some(c) => before = Some(c),
            None => break,
        }
    }
    assert_eq!(walked, want);

    let ops = inbox
        .list_requests(&RequestFilter {
            project: Some("ops".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ops.count, 1);
    let elicitations = inbox
        .list_requests(&RequestFilter {
            kind: Some(RequestKind::Elicitation),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(elicitations.count, 1);
    let decided = inbox
        .list_requests(&RequestFilter {
            status: Some(RequestStatus::Decided),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(decided.count, 1);
    assert_eq!(decided.items[0].decided_by.as_deref(), Some("alice"));
    assert_eq!(decided.items[0].outcome, Some(OutcomeType::Approve));
    assert_eq!(inbox.pending_count().await.unwrap(), 6);

    let bad = inbox
        .list_requests(&RequestFilter {
            before: Some("garbage".into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(bad.http_status(), 400);
}

#[tokio::test]
async fn view_shows_the_request_its_result_and_the_timeline() {
    let (_dir, inbox) = inbox().await;
    let t = task(&inbox, DEFAULT_PROJECT, "deploy").await;
    let a = approval(&inbox, DEFAULT_PROJECT, &t, "Deploy v2?").await;
    let view = inbox.request_view(&a).await.unwrap();
    assert_eq!(view.summary.status, RequestStatus::Pending);
    assert_eq!(view.key_value_context.as_ref().unwrap()["action"], "deploy");
    assert_eq!(
        view.approval_recommendation.as_ref().unwrap().outcome.kind,
        OutcomeType::Reject
    );
    assert!(view.result.is_none());
    let types: Vec<_> = view.events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, ["TASK_CREATED", "APPROVAL_REQUESTED"]);

    inbox
        .decide_approval(&a, Outcome::new(OutcomeType::Reject), "bob")
        .await
        .unwrap();
    let view = inbox.request_view(&a).await.unwrap();
    assert_eq!(view.summary.status, RequestStatus::Decided);
    assert_eq!(view.result.as_ref().unwrap()["decidedBy"], "bob");
    assert_eq!(
        view.events.last().unwrap().in_response_to.as_deref(),
        Some(a.as_str())
    );

    let e = elicitation(&inbox, &t).await;
    let view = inbox.request_view(&e).await.unwrap();
    assert_eq!(view.fields.len(), 1);
    assert_eq!(view.field_bids[0].field_id, "region");

    let missing = inbox.request_view("nope").await.unwrap_err();
    assert_eq!(missing.http_status(), 404);
}

#[tokio::test]
async fn the_change_feed_sees_creates_and_decisions_not_idempotent_repeats() {
    let (_dir, inbox) = inbox().await;
    let mut feed = inbox.changes();
    let t = task(&inbox, DEFAULT_PROJECT, "t").await;
    let body: CreateApproval = serde_json::from_value(json!({
        "projectName": DEFAULT_PROJECT, "taskId": t, "summary": "ok?"
    }))
    .unwrap();
    let a = inbox
        .create_approval(AGENT, body.clone(), Some("k1"))
        .await
        .unwrap()
        .event_id;
    inbox
        .create_approval(AGENT, body, Some("k1"))
        .await
        .unwrap();
    inbox
        .decide_approval(&a, Outcome::new(OutcomeType::Approve), "alice")
        .await
        .unwrap();
    let first = feed.recv().await.unwrap();
    assert_eq!(
        (first.request_id.as_str(), first.what),
        (a.as_str(), ChangeKind::Created)
    );
    let second = feed.recv().await.unwrap();
    assert_eq!(
        second.what,
        ChangeKind::Decided,
        "the repeat announced nothing"
    );
    assert!(feed.try_recv().is_err());
}
