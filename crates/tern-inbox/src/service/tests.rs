use super::*;
use crate::model::{ApprovalRequest, ElicitationRequest, EventRow};
use crate::outcome::OutcomeType;
use crate::{Field, FieldBid};
use serde_json::json;
use tern_store::StoreError;

const AGENT: &str = "agent-a";
const OTHER: &str = "agent-b";

async fn inbox() -> (tempfile::TempDir, Inbox) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("tern.db")).await.unwrap();
    let inbox = Inbox::new(store);
    inbox.ensure_default_project().await.unwrap();
    (dir, inbox)
}

fn new_task(name: &str) -> CreateTask {
    CreateTask {
        name: name.into(),
        project_name: DEFAULT_PROJECT.into(),
        external_id: Some("session-1".into()),
        metadata_patch: None,
    }
}

fn approval(task_id: &str) -> CreateApproval {
    CreateApproval {
        project_name: DEFAULT_PROJECT.into(),
        task_id: task_id.into(),
        request: ApprovalRequest {
            summary: "Run rm -rf build/".into(),
            key_value_context: Some([("command".to_owned(), "rm -rf build/".to_owned())].into()),
            recommendation: serde_json::from_value(
                json!({"outcome": {"type": "APPROVE"}, "confidence": 0.9}),
            )
            .unwrap(),
            attachments: None,
        },
        external_trace_id: Some("trace-1".into()),
    }
}

fn note(task_id: &str, message: &str) -> AddNote {
    AddNote {
        project_name: DEFAULT_PROJECT.into(),
        task_id: task_id.into(),
        message: message.into(),
        external_trace_id: None,
    }
}

fn action(project: &str, task_id: &str, to: Option<&str>) -> RecordAction {
    RecordAction {
        project_name: project.into(),
        task_id: task_id.into(),
        description: "did a thing".into(),
        detail: None,
        transitions_to: to.map(Into::into),
        metadata_patch: None,
        add_attachments: None,
        external_trace_id: None,
    }
}

async fn count(inbox: &Inbox, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(inbox.store().pool())
        .await
        .unwrap()
}

async fn all_events(inbox: &Inbox, owner: &str, task_id: &str) -> Vec<EventRow> {
    inbox
        .task_events(owner, task_id, None, Some(MAX_EVENTS_PAGE))
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn default_project_exists_once() {
    let (_d, inbox) = inbox().await;
    let again = inbox.ensure_default_project().await.unwrap();
    let projects = inbox.projects(None).await.unwrap().items;
    assert_eq!(projects.len(), 1);
    assert_eq!(projects[0], again);
    assert_eq!(again.name, "default");
    assert_eq!(again.project_name, "default");
    assert_eq!(again.steps.initial_step, "default");
    assert_eq!(again.steps.steps.len(), 1);
    assert_eq!(again.steps.steps[0].owner, Actor::Agent);
    assert_eq!(inbox.project(&again.id).await.unwrap(), again);
    assert!(matches!(
        inbox.project("nope").await,
        Err(InboxError::NotFound(_))
    ));
    assert_eq!(inbox.projects(Some("DEF")).await.unwrap().items.len(), 1);
    assert!(inbox.projects(Some("x")).await.unwrap().items.is_empty());
    let wire = serde_json::to_value(&again).unwrap();
    assert_eq!(
        wire["steps"],
        json!({"initialStep": "default", "steps": [{"name": "default", "owner": "AGENT"}]})
    );
}

#[tokio::test]
async fn task_create_is_idempotent() {
    let (_d, inbox) = inbox().await;
    let first = inbox
        .create_task(AGENT, new_task("Session 1"), Some("hermes-task:1"))
        .await
        .unwrap();
    let repeat = inbox
        .create_task(AGENT, new_task("Session 1"), Some("hermes-task:1"))
        .await
        .unwrap();
    assert_eq!(repeat, first);
    assert_eq!(first.status, TaskStatus::Running);
    assert_eq!(first.current_step, "default");
    assert_eq!(count(&inbox, "SELECT COUNT(*) FROM inbox_tasks").await, 1);
    let events = all_events(&inbox, AGENT, &first.id).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type, EventType::TaskCreated);
    assert_eq!(
        serde_json::to_value(&events[0].payload).unwrap(),
        json!({"type": "TaskCreated", "name": "Session 1", "initialState": "default",
               "metadataPatch": {}})
    );

    // The same key from another agent key is another key.
    let other = inbox
        .create_task(OTHER, new_task("Session 1"), Some("hermes-task:1"))
        .await
        .unwrap();
    assert_ne!(other.id, first.id);
    // Without a key every call creates.
    inbox
        .create_task(AGENT, new_task("Session 1"), None)
        .await
        .unwrap();
    assert_eq!(count(&inbox, "SELECT COUNT(*) FROM inbox_tasks").await, 3);

    // The key belongs to POST api/tasks now.
    let err = inbox
        .add_note(AGENT, note(&first.id, "hi"), Some("hermes-task:1"))
        .await
        .unwrap_err();
    assert!(matches!(err, InboxError::IdempotencyMismatch), "{err:?}");
    assert_eq!(all_events(&inbox, AGENT, &first.id).await.len(), 1);

    // A failed create does not use up its key.
    let mut bad = new_task("x");
    bad.project_name = "missing".into();
    let err = inbox.create_task(AGENT, bad, Some("k2")).await.unwrap_err();
    assert!(matches!(err, InboxError::NotFound(_)), "{err:?}");
    inbox
        .create_task(AGENT, new_task("y"), Some("k2"))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_key_reused_with_another_request_is_refused_and_stores_nothing() {
    let (_d, inbox) = inbox().await;
    let task = inbox
        .create_task(AGENT, new_task("Session 1"), Some("task-key"))
        .await
        .unwrap();
    let err = inbox
        .create_task(AGENT, new_task("Session 2"), Some("task-key"))
        .await
        .unwrap_err();
    assert!(matches!(err, InboxError::IdempotencyKeyReused), "{err:?}");
    assert_eq!(count(&inbox, "SELECT COUNT(*) FROM inbox_tasks").await, 1);

    let first = inbox
        .create_approval(AGENT, approval(&task.id), Some("req-key"))
        .await
        .unwrap();
    let events = all_events(&inbox, AGENT, &task.id).await.len();
    let mut other = approval(&task.id);
    other.request.summary = "Run rm -rf /".into();
    let err = inbox
        .create_approval(AGENT, other.clone(), Some("req-key"))
        .await
        .unwrap_err();
    assert!(matches!(err, InboxError::IdempotencyKeyReused), "{err:?}");
    assert_eq!(
        (err.http_status(), err.body()["code"].clone()),
        (422, json!("idempotency_key_reused"))
    );
    // Nothing of the refused request was stored; the first stands.
    assert_eq!(
        count(&inbox, "SELECT COUNT(*) FROM inbox_requests").await,
        1
    );
    assert_eq!(all_events(&inbox, AGENT, &task.id).await.len(), events);
    assert_eq!(
        inbox.task(AGENT, &task.id).await.unwrap().open_requests[0].summary,
        "Run rm -rf build/"
    );
    // The same request again is a retry: the original answer.
    let again = inbox
        .create_approval(AGENT, approval(&task.id), Some("req-key"))
        .await
        .unwrap();
    assert_eq!(again, first);

    // A key claimed before fingerprints were recorded (migration 0014) keeps answering its
    // original response, whatever the repeat sends.
    sqlx::query("UPDATE inbox_idempotency SET fingerprint = NULL")
        .execute(inbox.store.pool())
        .await
        .unwrap();
    let legacy = inbox
        .create_approval(AGENT, other, Some("req-key"))
        .await
        .unwrap();
    assert_eq!(legacy, first);
    assert_eq!(
        count(&inbox, "SELECT COUNT(*) FROM inbox_requests").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_with_one_key_create_one_task() {
    let (_d, inbox) = inbox().await;
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let inbox = inbox.clone();
            tokio::spawn(async move {
                inbox
                    .create_task(AGENT, new_task("racy"), Some("same-key"))
                    .await
            })
        })
        .collect();
    let mut ids = Vec::new();
    for h in handles {
        ids.push(h.await.unwrap().unwrap().id);
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    assert_eq!(count(&inbox, "SELECT COUNT(*) FROM inbox_tasks").await, 1);
    assert_eq!(count(&inbox, "SELECT COUNT(*) FROM inbox_events").await, 1);
}

#[tokio::test]
async fn approval_is_decided_once() {
    let (_d, inbox) = inbox().await;
    let task = inbox.create_task(AGENT, new_task("t"), None).await.unwrap();
    let EventId { event_id: req } = inbox
        .create_approval(AGENT, approval(&task.id), None)
        .await
        .unwrap();
    assert_eq!(inbox.approval_result(AGENT, &req).await.unwrap(), None);
    let detail = inbox.task(AGENT, &task.id).await.unwrap();
    assert_eq!(detail.task.status, TaskStatus::Waiting);
    assert_eq!(detail.open_requests.len(), 1);
    assert_eq!(detail.open_requests[0].request_id, req);
    assert_eq!(
        detail.open_requests[0].event_type,
        EventType::ApprovalRequested
    );
    assert_eq!(detail.open_requests[0].summary, "Run rm -rf build/");
    // The request id is not an elicitation's.
    assert!(matches!(
        inbox.elicitation_result(AGENT, &req).await,
        Err(InboxError::NotFound(_))
    ));

    let decided = inbox
        .decide_approval(&req, Outcome::new(OutcomeType::Approve), "alice")
        .await
        .unwrap();
    assert_eq!(decided.decided_by.as_deref(), Some("alice"));
    assert_eq!(decided.task_id, task.id);
    assert_eq!(
        decided
            .recommendation_snapshot
            .as_ref()
            .map(|r| r.confidence),
        Some(Some(0.9))
    );
    let polled = inbox.approval_result(AGENT, &req).await.unwrap();
    assert_eq!(polled.as_ref(), Some(&decided));

    let again = inbox
        .decide_approval(&req, Outcome::new(OutcomeType::Reject), "mallory")
        .await;
    assert!(
        matches!(again, Err(InboxError::AlreadyDecided)),
        "{again:?}"
    );
    let polled = inbox.approval_result(AGENT, &req).await.unwrap().unwrap();
    assert_eq!(polled.outcome.kind, OutcomeType::Approve);
    assert_eq!(polled.decided_by.as_deref(), Some("alice"));

    let detail = inbox.task(AGENT, &task.id).await.unwrap();
    assert_eq!(detail.task.status, TaskStatus::Running);
    assert!(detail.open_requests.is_empty());
    let events = all_events(&inbox, AGENT, &task.id).await;
    let kinds: Vec<_> = events.iter().map(|e| e.event_type).collect();
    assert_eq!(
        kinds,
        [
            EventType::TaskCreated,
            EventType::ApprovalRequested,
            EventType::ApprovalDecided
        ]
    );
    assert_eq!(events[1].id, req);
    assert_eq!(events[1].external_trace_id.as_deref(), Some("trace-1"));
    assert_eq!(events[2].in_response_to.as_deref(), Some(req.as_str()));
    assert_eq!(events[2].source, Actor::Human);
    assert_eq!(
        serde_json::to_value(&events[2].payload).unwrap()["type"],
        "ApprovalDecided"
    );
    assert!(matches!(
        inbox
            .decide_approval("nope", Outcome::new(OutcomeType::Approve), "a")
            .await,
        Err(InboxError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_task_waits_until_its_last_request_is_decided() {
    let (_d, inbox) = inbox().await;
    let task = inbox.create_task(AGENT, new_task("t"), None).await.unwrap();
    let first = inbox
        .create_approval(AGENT, approval(&task.id), None)
        .await
        .unwrap();
    let second = inbox
        .create_approval(AGENT, approval(&task.id), None)
        .await
        .unwrap();
    let status = async || inbox.task(AGENT, &task.id).await.unwrap().task.status;
    inbox
        .decide_approval(&second.event_id, Outcome::new(OutcomeType::Approve), "a")
        .await
        .unwrap();
    assert_eq!(status().await, TaskStatus::Waiting, "the first is pending");
    let open = inbox.task(AGENT, &task.id).await.unwrap().open_requests;
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].request_id, first.event_id);
    inbox
        .decide_approval(&first.event_id, Outcome::new(OutcomeType::Approve), "a")
        .await
        .unwrap();
    assert_eq!(status().await, TaskStatus::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_decisions_have_one_winner() {
    let (_d, inbox) = inbox().await;
    let task = inbox.create_task(AGENT, new_task("t"), None).await.unwrap();
    let req = inbox
        .create_approval(AGENT, approval(&task.id), None)
        .await
        .unwrap()
        .event_id;
    let handles: Vec<_> = ["alice", "bob", "carol", "dave"]
        .into_iter()
        .map(|who| {
            let (inbox, req) = (inbox.clone(), req.clone());
            tokio::spawn(async move {
                inbox
                    .decide_approval(&req, Outcome::new(OutcomeType::Reject), who)
                    .await
            })
        })
        .collect();
    let mut winners = Vec::new();
    for h in handles {
        match h.await.unwrap() {
            Ok(result) => winners.push(result),
            Err(InboxError::AlreadyDecided) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(winners.len(), 1);
    let stored = inbox.approval_result(AGENT, &req).await.unwrap().unwrap();
    assert_eq!(stored, winners[0]);
    assert_eq!(
        count(
            &inbox,
            "SELECT COUNT(*) FROM inbox_events WHERE event_type = 'APPROVAL_DECIDED'"
        )
        .await,
        1
    );
}

#[tokio::test]
async fn approval_create_repeated_after_the_decision_returns_the_original() {
    let (_d, inbox) = inbox().await;
    let task = inbox.create_task(AGENT, new_task("t"), None).await.unwrap();
    let first = inbox
        .create_approval(AGENT, approval(&task.id), Some("approve-1"))
        .await
        .unwrap();
    inbox
        .decide_approval(&first.event_id, Outcome::new(OutcomeType::Approve), "alice")
        .await
        .unwrap();
    let repeat = inbox
        .create_approval(AGENT, approval(&task.id), Some("approve-1"))
        .await
        .unwrap();
    assert_eq!(repeat, first);
    assert_eq!(
        count(&inbox, "SELECT COUNT(*) FROM inbox_requests").await,
        1
    );
    // The task is not made to wait again by the repeat.
    let detail = inbox.task(AGENT, &task.id).await.unwrap();
    assert_eq!(detail.task.status, TaskStatus::Running);
    assert!(
        inbox
            .approval_result(AGENT, &repeat.event_id)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(all_events(&inbox, AGENT, &task.id).await.len(), 3);
}

fn every_kind() -> Vec<Field> {
    serde_json::from_value(json!([
        {"type": "Text", "id": "email", "label": "Email", "required": true, "format": "EMAIL"},
        {"type": "TextArea", "id": "notes", "label": "Notes", "required": false, "maxLength": 10},
        {"type": "Number", "id": "count", "label": "Count", "required": true,
         "integerOnly": true, "min": 1, "max": 10},
        {"type": "Slider", "id": "level", "label": "Level", "required": true,
         "min": 0, "max": 100, "step": 5},
        {"type": "Switch", "id": "agree", "label": "Agree", "required": true},
        {"type": "Select", "id": "color", "label": "Color", "required": true,
         "options": ["red", "green"]},
        {"type": "Multiselect", "id": "tags", "label": "Tags", "required": false,
         "options": ["a", "b", "c"]},
        {"type": "DateField", "id": "day", "label": "Day", "required": true,
         "min": "2024-01-01", "max": "2024-12-31"},
        {"type": "DateTime", "id": "at", "label": "At", "required": false,
         "min": "2024-01-01T00:00:00Z"},
        {"type": "Time", "id": "time", "label": "Time", "required": true,
         "min": "09:00", "max": "17:00"}
    ]))
    .unwrap()
}

fn elicitation(task_id: &str, fields: Vec<Field>, bids: Vec<FieldBid>) -> CreateElicitation {
    CreateElicitation {
        project_name: DEFAULT_PROJECT.into(),
        task_id: task_id.into(),
        request: ElicitationRequest {
            summary: "A few details".into(),
            fields,
            key_value_context: None,
            recommendation: Some(bids),
            attachments: None,
        },
        external_trace_id: None,
    }
}

#[tokio::test]
async fn elicitation_answers_are_checked_then_stored_once() {
    let (_d, inbox) = inbox().await;
    let task = inbox.create_task(AGENT, new_task("t"), None).await.unwrap();
    let bids: Vec<FieldBid> =
        serde_json::from_value(json!([{"fieldId": "color", "value": "red"}])).unwrap();

    // Unusable definitions and stray recommendations are refused up front.
    let mut dup = every_kind();
    dup.push(dup[0].clone());
    let err = inbox
        .create_elicitation(AGENT, elicitation(&task.id, dup, vec![]), None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            InboxError::Invalid {
                code: "invalid_fields",
                ..
            }
        ),
        "{err:?}"
    );
    let stray: Vec<FieldBid> =
        serde_json::from_value(json!([{"fieldId": "nope", "value": 1}])).unwrap();
    let err = inbox
        .create_elicitation(AGENT, elicitation(&task.id, every_kind(), stray), None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            InboxError::Invalid {
                code: "unknown_field",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        count(&inbox, "SELECT COUNT(*) FROM inbox_requests").await,
        0
    );

    let req = inbox
        .create_elicitation(AGENT, elicitation(&task.id, every_kind(), bids), None)
        .await
        .unwrap()
        .event_id;
    assert_eq!(inbox.elicitation_result(AGENT, &req).await.unwrap(), None);

    let bad = json!({
        "email": "not-an-email", "notes": "far too long here", "count": 2.5, "level": 7,
        "agree": "yes", "color": "blue", "tags": ["a", "z"], "day": "2024-02-30",
        "at": "2023-06-01T00:00:00Z", "time": "18:00", "extra": 1
    });
    let err = inbox
        .answer_elicitation(&req, bad.as_object().unwrap(), "bob")
        .await
        .unwrap_err();
    let InboxError::InvalidAnswers(errors) = &err else {
        panic!("{err:?}")
    };
    let mut wrong: Vec<&str> = errors.iter().map(|e| e.field_id.as_str()).collect();
    wrong.dedup();
    assert_eq!(
        wrong,
        [
            "email", "notes", "count", "level", "agree", "color", "tags", "day", "at", "time",
            "extra"
        ]
    );
    assert_eq!(err.http_status(), 400);
    assert_eq!(err.body()["errors"].as_array().unwrap().len(), errors.len());
    // Nothing stored: still pending, no answer logged, the task still waits.
    assert_eq!(inbox.elicitation_result(AGENT, &req).await.unwrap(), None);
    assert_eq!(
        count(
            &inbox,
            "SELECT COUNT(*) FROM inbox_events WHERE event_type = 'ELICITATION_PROVIDED'"
        )
        .await,
        0
    );
    let detail = inbox.task(AGENT, &task.id).await.unwrap();
    assert_eq!(detail.task.status, TaskStatus::Waiting);
    assert_eq!(
        detail.open_requests[0].event_type,
        EventType::ElicitationRequested
    );

    let good = json!({
        "email": "bob@example.com", "count": "3", "level": 15, "agree": true,
        "color": "green", "tags": [], "day": "2024-02-29", "time": "09:30"
    });
    let result = inbox
        .answer_elicitation(&req, good.as_object().unwrap(), "bob")
        .await
        .unwrap();
    let fields = result.fields.clone().unwrap();
    assert_eq!(fields["count"], json!(3), "normalized to a number");
    assert!(!fields.contains_key("notes"));
    assert_eq!(
        inbox.elicitation_result(AGENT, &req).await.unwrap(),
        Some(result)
    );
    let err = inbox
        .answer_elicitation(&req, good.as_object().unwrap(), "eve")
        .await
        .unwrap_err();
    assert!(matches!(err, InboxError::AlreadyDecided), "{err:?}");
    let events = all_events(&inbox, AGENT, &task.id).await;
    let last = events.last().unwrap();
    assert_eq!(last.event_type, EventType::ElicitationProvided);
    assert_eq!(last.in_response_to.as_deref(), Some(req.as_str()));
    assert_eq!(
        serde_json::to_value(&last.payload).unwrap()["answeredBy"],
        "bob"
    );
    assert_eq!(
        inbox.task(AGENT, &task.id).await.unwrap().task.status,
        TaskStatus::Running
    );
}

#[tokio::test]
async fn a_key_sees_only_its_own_tasks() {
    let (_d, inbox) = inbox().await;
    let task = inbox.create_task(AGENT, new_task("t"), None).await.unwrap();
    let req = inbox
        .create_approval(AGENT, approval(&task.id), None)
        .await
        .unwrap()
        .event_id;
    let not_found = |r: Result<(), InboxError>| {
        assert!(matches!(r, Err(InboxError::NotFound(_))), "{r:?}");
    };
    not_found(inbox.task(OTHER, &task.id).await.map(drop));
    not_found(
        inbox
            .task_events(OTHER, &task.id, None, None)
            .await
            .map(drop),
    );
    not_found(inbox.approval_result(OTHER, &req).await.map(drop));
    not_found(
        inbox
            .create_approval(OTHER, approval(&task.id), None)
            .await
            .map(drop),
    );
    not_found(
        inbox
            .add_note(OTHER, note(&task.id, "x"), None)
            .await
            .map(drop),
    );
    assert!(
        inbox
            .tasks(OTHER, &TaskFilter::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert_eq!(
        inbox
            .tasks(AGENT, &TaskFilter::default())
            .await
            .unwrap()
            .items,
        [inbox.task(AGENT, &task.id).await.unwrap().task]
    );
    assert_eq!(
        count(&inbox, "SELECT COUNT(*) FROM inbox_requests").await,
        1
    );
}

#[tokio::test]
async fn tasks_filter_by_project_and_name() {
    let (_d, inbox) = inbox().await;
    let a = inbox
        .create_task(AGENT, new_task("Überweisung prüfen"), None)
        .await
        .unwrap();
    let b = inbox
        .create_task(AGENT, new_task("Other"), None)
        .await
        .unwrap();
    let by_name = TaskFilter {
        name: Some("ÜBERWEISUNG".into()),
        ..TaskFilter::default()
    };
    assert_eq!(
        inbox.tasks(AGENT, &by_name).await.unwrap().items,
        std::slice::from_ref(&a)
    );
    let by_project = TaskFilter {
        project_id: Some(a.project_id.clone()),
        ..TaskFilter::default()
    };
    // Newest first.
    assert_eq!(inbox.tasks(AGENT, &by_project).await.unwrap().items, [b, a]);
    let elsewhere = TaskFilter {
        project_id: Some("nope".into()),
        ..TaskFilter::default()
    };
    assert!(
        inbox
            .tasks(AGENT, &elsewhere)
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn events_pages_return_each_event_once_in_order() {
    let (_d, inbox) = inbox().await;
    let task = inbox.create_task(AGENT, new_task("t"), None).await.unwrap();
    // Another task's events interleave in the global sequence.
    let noise = inbox.create_task(AGENT, new_task("n"), None).await.unwrap();
    for i in 0..130 {
        inbox
            .add_note(AGENT, note(&task.id, &format!("note {i}")), None)
            .await
            .unwrap();
        if i % 10 == 0 {
            inbox
                .add_note(AGENT, note(&noise.id, "noise"), None)
                .await
                .unwrap();
        }
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    // Bounded, so a cursor that fails to advance fails the test instead of hanging it.
    for _ in 0..10 {
        let page = inbox
            .task_events(AGENT, &task.id, cursor.as_deref(), Some(1000))
            .await
            .unwrap();
        assert!(page.items.len() <= 100, "limit clamped to 100");
        if page.items.is_empty() {
            // At the end the cursor stays put, ready for new events.
            assert_eq!(page.next_cursor, cursor);
            break;
        }
        pages += 1;
        seen.extend(page.items);
        cursor = page.next_cursor;
    }
    assert_eq!(
        pages, 2,
        "131 events in pages of at most 100, then an empty page"
    );
    assert_eq!(seen.len(), 131);
    assert_eq!(seen[0].event_type, EventType::TaskCreated);
    for (i, event) in seen[1..].iter().enumerate() {
        assert_eq!(event.task_id, task.id);
        assert_eq!(
            event.payload,
            Payload::Note {
                message: format!("note {i}")
            }
        );
    }
    let mut ids: Vec<_> = seen.iter().map(|e| e.id.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 131);

    // A small page size, and a new event after the end is picked up from the cursor.
    let page = inbox
        .task_events(AGENT, &task.id, None, Some(0))
        .await
        .unwrap();
    assert_eq!(page.items.len(), 1);
    inbox
        .add_note(AGENT, note(&task.id, "late"), None)
        .await
        .unwrap();
    let tail = inbox
        .task_events(AGENT, &task.id, cursor.as_deref(), None)
        .await
        .unwrap();
    assert_eq!(tail.items.len(), 1);
    assert_eq!(
        tail.items[0].payload,
        Payload::Note {
            message: "late".into()
        }
    );

    for bad in ["", "e", "zz", "e-1", "effffffffffffffff1"] {
        let err = inbox
            .task_events(AGENT, &task.id, Some(bad), None)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                InboxError::Invalid {
                    code: "invalid_cursor",
                    ..
                }
            ),
            "{bad:?}: {err:?}"
        );
    }
}

#[tokio::test]
async fn metadata_patches_set_set_once_and_unset() {
    let (_d, inbox) = inbox().await;
    let mut create = new_task("t");
    create.metadata_patch = Some(
        serde_json::from_value(
            json!({"set": {"a": 1, "b": 2, "d": 4}, "setOnce": {"a": 9, "e": 5}}),
        )
        .unwrap(),
    );
    let task = inbox.create_task(AGENT, create, None).await.unwrap();
    assert_eq!(
        Value::Object(task.metadata.clone()),
        json!({"a": 1, "b": 2, "d": 4, "e": 5})
    );

    let mut act = action(DEFAULT_PROJECT, &task.id, None);
    act.metadata_patch = Some(
        serde_json::from_value(json!({
            "set": {"a": 10},
            "setOnce": {"b": 20, "c": 30},
            "unset": ["d", "missing"]
        }))
        .unwrap(),
    );
    // Attachments name uploads of the same key (see `crate::uploads`).
    let stored = crate::uploads::StoredFile {
        sha256: "0".repeat(64),
        size: 1,
    };
    let up1 = inbox
        .add_upload(AGENT, &stored, "application/pdf", Some("invoice.pdf"))
        .await
        .unwrap()
        .id;
    let up2 = inbox
        .add_upload(AGENT, &stored, "application/pdf", None)
        .await
        .unwrap()
        .id;
    act.add_attachments = Some(vec![Attachment {
        upload_id: up1.clone(),
        label: "invoice.pdf".into(),
    }]);
    inbox.record_action(AGENT, act, None).await.unwrap();
    let task = inbox.task(AGENT, &task.id).await.unwrap().task;
    assert_eq!(
        Value::Object(task.metadata),
        json!({"a": 10, "b": 2, "c": 30, "e": 5})
    );
    assert_eq!(task.attachments.len(), 1);

    // A request may show only files attached to its task.
    let mut with_file = approval(&task.id);
    with_file.request.attachments = Some(vec![up1]);
    inbox.create_approval(AGENT, with_file, None).await.unwrap();
    let mut unknown_file = approval(&task.id);
    unknown_file.request.attachments = Some(vec![up2]);
    let err = inbox
        .create_approval(AGENT, unknown_file, None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            InboxError::Invalid {
                code: "unknown_attachment",
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn transitions_follow_the_project_steps() {
    let (_d, inbox) = inbox().await;
    let steps: Steps = serde_json::from_value(json!({
        "initialStep": "draft",
        "steps": [
            {"name": "draft", "owner": "AGENT", "exits": ["review"]},
            {"name": "review", "owner": "HUMAN", "exits": ["done", "draft"]},
            {"name": "done", "owner": "AGENT"}
        ]
    }))
    .unwrap();
    let mut broken = steps.clone();
    broken.initial_step = "nowhere".into();
    assert!(matches!(
        inbox.add_project("broken", broken).await,
        Err(InboxError::Invalid {
            code: "invalid_steps",
            ..
        })
    ));
    inbox
        .add_project("review-flow", steps.clone())
        .await
        .unwrap();
    assert!(matches!(
        inbox.add_project("review-flow", steps).await,
        Err(InboxError::Invalid {
            code: "project_exists",
            ..
        })
    ));

    let mut create = new_task("t");
    create.project_name = "review-flow".into();
    let task = inbox.create_task(AGENT, create, None).await.unwrap();
    assert_eq!(task.current_step, "draft");

    for bad in ["done", "nowhere"] {
        let err = inbox
            .record_action(AGENT, action("review-flow", &task.id, Some(bad)), None)
            .await
            .unwrap_err();
        assert!(matches!(err, InboxError::InvalidTransition(_)), "{err:?}");
        assert_eq!(err.http_status(), 400);
    }
    // The project must be the task's.
    let err = inbox
        .record_action(
            AGENT,
            action(DEFAULT_PROJECT, &task.id, Some("review")),
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            InboxError::Invalid {
                code: "project_mismatch",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(all_events(&inbox, AGENT, &task.id).await.len(), 1);

    inbox
        .record_action(AGENT, action("review-flow", &task.id, Some("review")), None)
        .await
        .unwrap();
    let exception = ReportException {
        project_name: "review-flow".into(),
        task_id: task.id.clone(),
        message: "reviewer found a problem".into(),
        detail: None,
        transitions_to: Some("draft".into()),
        external_trace_id: None,
    };
    inbox
        .report_exception(AGENT, exception, None)
        .await
        .unwrap();
    let events = all_events(&inbox, AGENT, &task.id).await;
    let moves: Vec<_> = events
        .iter()
        .map(|e| {
            (
                e.transition_from.as_deref(),
                e.transition_to.as_deref(),
                e.owner,
            )
        })
        .collect();
    assert_eq!(
        moves,
        [
            (None, None, Actor::Agent),
            (Some("draft"), Some("review"), Actor::Human),
            (Some("review"), Some("draft"), Actor::Agent),
        ]
    );
    assert_eq!(events[2].event_type, EventType::Exception);
    assert_eq!(
        inbox.task(AGENT, &task.id).await.unwrap().task.current_step,
        "draft"
    );
}

#[test]
fn errors_map_to_pump_up_statuses_and_bodies() {
    let cases = [
        (
            InboxError::NotFound("task t1".into()),
            404,
            json!({"error": "task t1 not found"}),
        ),
        (
            InboxError::Invalid {
                code: "invalid_request",
                message: "name must not be empty".into(),
            },
            400,
            json!({"code": "invalid_request", "message": "name must not be empty"}),
        ),
        (
            InboxError::AlreadyDecided,
            409,
            json!({"error": "the request has already been decided"}),
        ),
        (
            InboxError::Store(StoreError::Corrupt("secret detail".into())),
            500,
            json!({"error": "internal error"}),
        ),
    ];
    for (err, status, body) in cases {
        assert_eq!(err.http_status(), status, "{err:?}");
        assert_eq!(err.body(), body, "{err:?}");
    }
    assert_eq!(
        InboxError::IdempotencyMismatch.body()["code"],
        "idempotency_key_reused"
    );
    assert_eq!(
        InboxError::InvalidTransition("x".into()).body()["code"],
        "invalid_transition"
    );
}

#[test]
fn request_bodies_read_the_sdk_wire_names() {
    let body: CreateElicitation = serde_json::from_value(json!({
        "projectName": "default",
        "taskId": "t1",
        "summary": "s",
        "keyValueContext": {"k": "v"},
        "fields": [{"type": "Switch", "id": "ok", "label": "OK", "required": true}],
        "recommendation": [{"fieldId": "ok", "value": true}],
        "attachments": ["up1"],
        "externalTraceId": "tr"
    }))
    .unwrap();
    assert_eq!(body.request.fields.len(), 1);
    assert_eq!(body.external_trace_id.as_deref(), Some("tr"));
    let body: RecordAction = serde_json::from_value(json!({
        "projectName": "default", "taskId": "t1", "description": "d",
        "detail": {"x": 1}, "transitionsTo": "s2",
        "metadataPatch": {"set": {"a": 1}, "setOnce": {"b": 2}, "unset": ["c"]},
        "addAttachments": [{"uploadId": "u", "label": "l"}]
    }))
    .unwrap();
    assert_eq!(body.transitions_to.as_deref(), Some("s2"));
    assert!(body.metadata_patch.unwrap().set_once.is_some());
    let payload = Payload::Action {
        description: "d".into(),
        detail: None,
        metadata_patch: MetadataPatch::default(),
        add_attachments: Some(vec![Attachment {
            upload_id: "u".into(),
            label: "l".into(),
        }]),
    };
    assert_eq!(
        serde_json::to_value(&payload).unwrap(),
        json!({"type": "Action", "description": "d", "metadataPatch": {},
               "addAttachments": [{"uploadId": "u", "label": "l"}]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_and_a_decision_race_and_one_wins() {
    let (_d, inbox) = inbox().await;
    let task = inbox.create_task(AGENT, new_task("t"), None).await.unwrap();
    for round in 0..8 {
        let req = inbox
            .create_approval(AGENT, approval(&task.id), None)
            .await
            .unwrap()
            .event_id;
        let mut feed = inbox.changes();
        let (a, b) = (inbox.clone(), inbox.clone());
        let (r1, r2) = (req.clone(), req.clone());
        let withdraw = tokio::spawn(async move { a.withdraw_request(AGENT, &r1, None).await });
        let decide = tokio::spawn(async move {
            b.decide_approval(&r2, Outcome::new(OutcomeType::Approve), "alice")
                .await
        });
        let (withdrawn, decided) = (withdraw.await.unwrap(), decide.await.unwrap());
        assert!(
            withdrawn.is_ok() != decided.is_ok(),
            "round {round}: exactly one wins: {withdrawn:?} / {decided:?}"
        );
        let read = inbox.approval_result(AGENT, &req).await;
        if withdrawn.is_ok() {
            assert!(matches!(decided, Err(InboxError::AlreadyDecided)));
            assert!(matches!(read, Err(InboxError::Withdrawn(ref id)) if *id == req));
        } else {
            assert!(matches!(withdrawn, Err(InboxError::AlreadyDecided)));
            assert_eq!(read.unwrap().unwrap(), decided.unwrap());
        }
        // The feed heard the request leave the pending list, once.
        let change = feed.recv().await.unwrap();
        assert_eq!(change.request_id, req);
        assert_eq!(change.what, review::ChangeKind::Decided);
        assert!(feed.try_recv().is_err());
    }
    // Every round logged one settlement: a decision or the agent's note.
    let settled = count(
        &inbox,
        "SELECT COUNT(*) FROM inbox_events WHERE event_type IN ('APPROVAL_DECIDED', 'NOTE')",
    )
    .await;
    assert_eq!(settled, 8);
    assert_eq!(inbox.pending_count().await.unwrap(), 0);
    let t = inbox.task(AGENT, &task.id).await.unwrap().task;
    assert_eq!(t.status, TaskStatus::Running);
}

#[tokio::test]
async fn only_the_owner_withdraws_and_the_reviewer_history_shows_it() {
    let (_d, inbox) = inbox().await;
    let task = inbox.create_task(AGENT, new_task("t"), None).await.unwrap();
    let req = inbox
        .create_approval(AGENT, approval(&task.id), None)
        .await
        .unwrap()
        .event_id;
    let other = inbox.withdraw_request(OTHER, &req, Some("mine now")).await;
    assert!(matches!(other, Err(InboxError::NotFound(_))), "{other:?}");
    assert_eq!(inbox.pending_count().await.unwrap(), 1);
    let missing = inbox.withdraw_request(AGENT, "nope", None).await;
    assert!(matches!(missing, Err(InboxError::NotFound(_))));

    let w = inbox
        .withdraw_request(AGENT, &req, Some("  not needed  "))
        .await
        .unwrap();
    assert_eq!(w.reason.as_deref(), Some("not needed"));
    let filter = review::RequestFilter {
        status: Some(review::RequestStatus::Withdrawn),
        ..Default::default()
    };
    let list = inbox.list_requests(&filter).await.unwrap();
    assert_eq!(list.count, 1);
    assert_eq!(list.items[0].id, req);
    assert_eq!(list.items[0].decided_by.as_deref(), Some(AGENT));
    assert_eq!(
        list.items[0]
            .decided_at
            .as_ref()
            .map(Timestamp::unix_millis),
        Some(w.withdrawn_at.unix_millis())
    );
    assert_eq!(list.items[0].outcome, None);
    let err = InboxError::Withdrawn(req.clone());
    assert_eq!(err.http_status(), 409);
    assert_eq!(
        err.body(),
        json!({"error": format!("request {req} was withdrawn")})
    );
}

#[tokio::test]
async fn a_reviewer_dismisses_any_agents_request_and_the_agent_reads_a_withdrawal() {
    let (_d, inbox) = inbox().await;
    let task = inbox.create_task(AGENT, new_task("t"), None).await.unwrap();
    let req = inbox
        .create_approval(AGENT, approval(&task.id), None)
        .await
        .unwrap()
        .event_id;
    let mut feed = inbox.changes();
    let w = inbox
        .dismiss_request(&req, "alice", Some(" stale "))
        .await
        .unwrap();
    assert_eq!(w.dismissed_by.as_deref(), Some("alice"));
    assert_eq!(w.reason.as_deref(), Some("stale"));
    assert_eq!(feed.recv().await.unwrap().request_id, req);
    // The agent reads it as it reads its own withdrawal.
    let read = inbox.approval_result(AGENT, &req).await;
    assert!(matches!(read, Err(InboxError::Withdrawn(_))), "{read:?}");
    // Again: the first dismissal answers; a decision now loses.
    let again = inbox.dismiss_request(&req, "bob", None).await.unwrap();
    assert_eq!(again.dismissed_by.as_deref(), Some("alice"));
    let decide = inbox
        .decide_approval(&req, crate::Outcome::new(OutcomeType::Approve), "bob")
        .await;
    assert!(
        matches!(decide, Err(InboxError::AlreadyDecided)),
        "{decide:?}"
    );
    let view = inbox.request_view(&req).await.unwrap();
    assert_eq!(view.summary.status, review::RequestStatus::Withdrawn);
    assert_eq!(view.summary.decided_by.as_deref(), Some("alice"));
    let note = view
        .events
        .iter()
        .find(|e| e.event_type == crate::model::EventType::Note)
        .unwrap();
    assert_eq!(note.source, Actor::Human);
    assert_eq!(note.in_response_to.as_deref(), Some(req.as_str()));
    // A decided request cannot be dismissed; an unknown one is not found.
    let other = inbox
        .create_approval(AGENT, approval(&task.id), None)
        .await
        .unwrap()
        .event_id;
    inbox
        .decide_approval(&other, crate::Outcome::new(OutcomeType::Reject), "bob")
        .await
        .unwrap();
    let late = inbox.dismiss_request(&other, "alice", None).await;
    assert!(matches!(late, Err(InboxError::AlreadyDecided)), "{late:?}");
    let missing = inbox.dismiss_request("nope", "alice", None).await;
    assert!(
        matches!(missing, Err(InboxError::NotFound(_))),
        "{missing:?}"
    );
}

#[tokio::test]
async fn requests_are_found_by_a_prefix_of_their_id() {
    let (_d, inbox) = inbox().await;
    let task = inbox.create_task(AGENT, new_task("t"), None).await.unwrap();
    let a = inbox
        .create_approval(AGENT, approval(&task.id), None)
        .await
        .unwrap()
        .event_id;
    let b = inbox
        .create_approval(AGENT, approval(&task.id), None)
        .await
        .unwrap()
        .event_id;
    let by = |p: &str| review::RequestFilter {
        id_prefix: Some(p.to_owned()),
        ..Default::default()
    };
    let whole = inbox.list_requests(&by(&a)).await.unwrap();
    assert_eq!(whole.count, 1);
    assert_eq!(whole.items[0].id, a);
    // The longest common prefix matches both; one more character only one.
    let common: String = a
        .chars()
        .zip(b.chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect();
    assert_eq!(inbox.list_requests(&by(&common)).await.unwrap().count, 2);
    let longer = &b[..common.len() + 1];
    let one = inbox.list_requests(&by(longer)).await.unwrap();
    assert_eq!((one.count, one.items[0].id.as_str()), (1, b.as_str()));
    // `%` and `_` are not wildcards.
    assert_eq!(inbox.list_requests(&by("%")).await.unwrap().count, 0);
    assert_eq!(inbox.list_requests(&by("_")).await.unwrap().count, 0);
}

/// An inbox whose requests expire one second after they are created.
async fn expiring_inbox() -> (tempfile::TempDir, Inbox) {
    let (dir, inbox) = inbox().await;
    let policy = crate::policy::Policy::from_config(&tern_config::InboxPolicyConfig {
        expires_after: Some("1s".into()),
        ..Default::default()
    })
    .unwrap();
    (dir, inbox.with_policy(policy))
}

/// Whether the sweeper would wake now, without waiting.
async fn sweeper_woken(inbox: &Inbox) -> bool {
    tokio::select! {
        biased;
        _ = inbox.expiry_woken() => true,
        _ = std::future::ready(()) => false,
    }
}

/// Waits (asserting nothing about time) until every pending request is overdue.
/// Waits until every request created up to `created_by` (ms) is overdue: the earliest expiry
/// has passed, and so has the latest one could have (`expiring_inbox`'s second after
/// `created_by`) — on a loaded machine the creates can be far apart.
async fn until_overdue(inbox: &Inbox, created_by: i64) {
    loop {
        let now = now_ms();
        let earliest_passed = match inbox.next_expiry().await.unwrap() {
            Some(at) => at <= now,
            None => true,
        };
        if earliest_passed && now > created_by + 1_000 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_request_with_an_expiry_wakes_the_sweeper() {
    let (_d, plain) = inbox().await;
    let task = plain.create_task(AGENT, new_task("t"), None).await.unwrap();
    plain
        .create_approval(AGENT, approval(&task.id), None)
        .await
        .unwrap();
    assert!(!sweeper_woken(&plain).await, "no expiry, nothing to wake");

    let (_d, inbox) = expiring_inbox().await;
    let task = inbox.create_task(AGENT, new_task("t"), None).await.unwrap();
    assert!(!sweeper_woken(&inbox).await);
    inbox
        .create_approval(AGENT, approval(&task.id), None)
        .await
        .unwrap();
    assert!(sweeper_woken(&inbox).await);
    assert!(!sweeper_woken(&inbox).await, "one wake per request");
}

#[tokio::test]
async fn an_overdue_request_expires_before_a_late_decision_or_read() {
    let (_d, inbox) = expiring_inbox().await;
    let task = inbox.create_task(AGENT, new_task("t"), None).await.unwrap();
    let decide_me = inbox
        .create_approval(AGENT, approval(&task.id), None)
        .await
        .unwrap()
        .event_id;
    let read_me = inbox
        .create_approval(AGENT, approval(&task.id), None)
        .await
        .unwrap()
        .event_id;
    let answer_me = inbox
        .create_elicitation(AGENT, elicitation(&task.id, every_kind(), vec![]), None)
        .await
        .unwrap()
        .event_id;
    let withdraw_me = inbox
        .create_approval(AGENT, approval(&task.id), None)
        .await
        .unwrap()
        .event_id;
    until_overdue(&inbox, now_ms()).await;
    let mut feed = inbox.changes();

    // No sweep ran; the decision still finds the request expired, and says so.
    let late = inbox
        .decide_approval(&decide_me, Outcome::new(OutcomeType::Approve), "alice")
        .await;
    assert!(matches!(late, Err(InboxError::AlreadyDecided)), "{late:?}");
    let result = inbox
        .approval_result(AGENT, &decide_me)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(result.outcome.kind, OutcomeType::Reject);
    assert_eq!(result.outcome.reason_code.as_deref(), Some("expired"));
    assert_eq!(result.decided_by.as_deref(), Some("PLATFORM"));

    // A read of an overdue request returns the expired result, not 204.
    let result = inbox
        .approval_result(AGENT, &read_me)
        .await
        .unwrap()
        .expect("the expired result");
    assert_eq!(result.outcome.reason_code.as_deref(), Some("expired"));

    let late = inbox
        .answer_elicitation(&answer_me, &serde_json::Map::new(), "alice")
        .await;
    assert!(matches!(late, Err(InboxError::AlreadyDecided)), "{late:?}");
    let result = inbox
        .elicitation_result(AGENT, &answer_me)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(result.answered_by.as_deref(), Some("PLATFORM"));
    assert_eq!(result.fields, None);

    let late = inbox.withdraw_request(AGENT, &withdraw_me, None).await;
    assert!(matches!(late, Err(InboxError::AlreadyDecided)), "{late:?}");

    // Each expired once, with one TIMEOUT each, announced; the sweep finds nothing left.
    let filter = review::RequestFilter {
        status: Some(review::RequestStatus::Expired),
        ..Default::default()
    };
    assert_eq!(inbox.list_requests(&filter).await.unwrap().count, 4);
    assert_eq!(
        count(
            &inbox,
            "SELECT COUNT(*) FROM inbox_events WHERE event_type = 'TIMEOUT'"
        )
        .await,
        4
    );
    assert_eq!(
        count(
            &inbox,
            "SELECT COUNT(*) FROM inbox_events WHERE event_type IN \
             ('APPROVAL_DECIDED', 'ELICITATION_PROVIDED')"
        )
        .await,
        0
    );
    let mut announced = Vec::new();
    while let Ok(change) = feed.try_recv() {
        assert_eq!(change.what, review::ChangeKind::Decided);
        announced.push(change.request_id);
    }
    assert_eq!(announced, [decide_me, read_me, answer_me, withdraw_me]);
    assert_eq!(inbox.expire_overdue(now_ms()).await.unwrap(), 0);
    let t = inbox.task(AGENT, &task.id).await.unwrap().task;
    assert_eq!(t.status, TaskStatus::Running);
}
