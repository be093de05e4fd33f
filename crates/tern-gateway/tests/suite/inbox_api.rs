//! The Pump Up agent API of the human inbox over real HTTP: tasks, idempotent creates,
//! approval and elicitation requests with their results, the event log, ownership between
//! keys, and the error shapes.

use crate::common;

use std::sync::Arc;

use serde_json::{Value, json};
use tern_gateway::{Gateway, auth};
use tern_inbox::{InboxError, Outcome, OutcomeType};

struct Gw {
    _dir: tempfile::TempDir,
    gw: Arc<Gateway>,
    url: String,
    key: String,
    other_key: String,
    http: reqwest::Client,
}

async fn start() -> Gw {
    let dir = tempfile::tempdir().unwrap();
    let gw = common::inbox_gateway(dir.path()).await;
    let key = auth::create_key(&gw.store, "agent-a").await.unwrap();
    let other_key = auth::create_key(&gw.store, "agent-b").await.unwrap();
    let (url, _) = common::serve(&gw).await;
    Gw {
        _dir: dir,
        gw,
        url,
        key,
        other_key,
        http: reqwest::Client::new(),
    }
}

impl Gw {
    async fn get_as(&self, key: &str, path: &str) -> (u16, String) {
        let r = self
            .http
            .get(format!("{}{path}", self.url))
            .bearer_auth(key)
            .header("X-API-Version", "2025-01-01")
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let (status, text) = self.get_as(&self.key, path).await;
        (status, common::json_or_null(&text))
    }

    async fn post(&self, path: &str, body: &Value, idem: Option<&str>) -> (u16, Value) {
        let mut req = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(&self.key)
            .header("X-API-Version", "2025-01-01")
            .json(body);
        if let Some(k) = idem {
            req = req.header("Idempotency-Key", k);
        }
        let r = req.send().await.unwrap();
        common::status_json(r).await
    }

    async fn task(&self, name: &str) -> String {
        let (status, task) = self
            .post(
                "/api/tasks",
                &json!({"name": name, "projectName": "default"}),
                None,
            )
            .await;
        assert_eq!(status, 201, "{task}");
        task["id"].as_str().unwrap().to_owned()
    }
}

#[tokio::test]
async fn projects_list_the_default_project_and_get_by_id() {
    let gw = start().await;
    let (status, list) = gw.get("/api/projects").await;
    assert_eq!(status, 200);
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["name"], "default");
    let id = items[0]["id"].as_str().unwrap();
    let (status, project) = gw.get(&format!("/api/projects/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(project["steps"]["initialStep"], "default");
    let (status, missing) = gw.get("/api/projects/nope").await;
    assert_eq!(status, 404);
    assert!(missing["error"].is_string(), "{missing}");
}

#[tokio::test]
async fn create_task_is_idempotent_and_listed() {
    let gw = start().await;
    let body = json!({"name": "Refund #42", "projectName": "default", "externalId": "s-1"});
    let (status, first) = gw.post("/api/tasks", &body, Some("task-1")).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["status"], "RUNNING");
    let (status, again) = gw.post("/api/tasks", &body, Some("task-1")).await;
    assert_eq!(status, 201);
    assert_eq!(again["id"], first["id"]);

    let (status, list) = gw.get("/api/tasks?name=refund").await;
    assert_eq!(status, 200);
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let id = first["id"].as_str().unwrap();
    let (status, detail) = gw.get(&format!("/api/tasks/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(detail["task"]["id"], first["id"]);
    assert_eq!(detail["openRequests"], json!([]));
}

#[tokio::test]
async fn a_key_reused_with_another_body_is_422_and_stores_nothing() {
    let gw = start().await;
    let task = gw.task("Pay invoice").await;
    let body = json!({"projectName": "default", "taskId": task, "summary": "Pay 40 EUR?",
                      "keyValueContext": {"amount": "40", "currency": "EUR"}});
    let (status, first) = gw
        .post("/api/approval-requests", &body, Some("appr-1"))
        .await;
    assert_eq!(status, 201, "{first}");
    let events_path = format!("/api/tasks/{task}/events");
    let (_, events) = gw.get(&events_path).await;

    let mut other = body.clone();
    other["summary"] = json!("Pay 4000 EUR?");
    let (status, refused) = gw
        .post("/api/approval-requests", &other, Some("appr-1"))
        .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(refused["code"], "idempotency_key_reused", "{refused}");
    assert!(refused["message"].is_string(), "{refused}");
    // Nothing of it was stored: the same timeline, the first request alone and unchanged.
    assert_eq!(gw.get(&events_path).await.1, events);
    let (_, detail) = gw.get(&format!("/api/tasks/{task}")).await;
    let open = detail["openRequests"].as_array().unwrap();
    assert_eq!(open.len(), 1, "{detail}");
    assert_eq!(open[0]["summary"], "Pay 40 EUR?");

    // The same body again — keys in another order, other whitespace — is a retry.
    let text = format!(
        r#"{{ "keyValueContext": {{"currency": "EUR", "amount": "40"}},
             "summary": "Pay 40 EUR?", "taskId": "{task}",  "projectName": "default" }}"#
    );
    let r = gw
        .http
        .post(format!("{}/api/approval-requests", gw.url))
        .bearer_auth(&gw.key)
        .header("Content-Type", "application/json")
        .header("Idempotency-Key", "appr-1")
        .body(text)
        .send()
        .await
        .unwrap();
    let (status, again) = common::status_json(r).await;
    assert_eq!((status, &again), (201, &first));

    // Tasks too.
    let task_body = json!({"name": "Refund #42", "projectName": "default"});
    let (status, t) = gw.post("/api/tasks", &task_body, Some("task-k")).await;
    assert_eq!(status, 201, "{t}");
    let (status, refused) = gw
        .post(
            "/api/tasks",
            &json!({"name": "Refund #43", "projectName": "default"}),
            Some("task-k"),
        )
        .await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (422, Some("idempotency_key_reused"))
    );
    let (_, list) = gw.get("/api/tasks?name=refund").await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
}

#[tokio::test]
async fn idempotency_keys_must_be_printable_ascii_and_at_most_255_characters() {
    let gw = start().await;
    let body = json!({"name": "Keyed", "projectName": "default"});
    let send = |key: reqwest::header::HeaderValue| {
        gw.http
            .post(format!("{}/api/tasks", gw.url))
            .bearer_auth(&gw.key)
            .header("Idempotency-Key", key)
            .json(&body)
            .send()
    };
    let non_ascii = reqwest::header::HeaderValue::from_bytes("clé-1".as_bytes()).unwrap();
    let too_long = reqwest::header::HeaderValue::from_str(&"k".repeat(256)).unwrap();
    for (key, says) in [(non_ascii, "ASCII"), (too_long, "256")] {
        let (status, refused) = common::status_json(send(key).await.unwrap()).await;
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["code"], "invalid_idempotency_key", "{refused}");
        assert!(
            refused["message"].as_str().unwrap().contains(says),
            "{refused}"
        );
    }
    // Nothing was created for the refused keys.
    let (_, list) = gw.get("/api/tasks").await;
    assert_eq!(list["items"], json!([]));
    // 255 characters is a key like any other.
    let longest = reqwest::header::HeaderValue::from_str(&"k".repeat(255)).unwrap();
    let (status, first) = common::status_json(send(longest.clone()).await.unwrap()).await;
    assert_eq!(status, 201, "{first}");
    let (status, again) = common::status_json(send(longest).await.unwrap()).await;
    assert_eq!((status, &again), (201, &first));
}

#[tokio::test]
async fn approval_is_pending_then_decided_once() {
    let gw = start().await;
    let task = gw.task("Pay invoice").await;
    let (status, created) = gw
        .post(
            "/api/approval-requests",
            &json!({"projectName": "default", "taskId": task, "summary": "Pay 40 EUR?"}),
            Some("appr-1"),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let request_id = created["eventId"].as_str().unwrap().to_owned();

    let result_path = format!("/api/approval-requests/{request_id}/result");
    let (status, text) = gw.get_as(&gw.key, &result_path).await;
    assert_eq!(status, 204);
    assert!(text.is_empty(), "{text:?}");

    gw.gw
        .inbox
        .decide_approval(&request_id, Outcome::new(OutcomeType::Approve), "alice")
        .await
        .unwrap();
    let (status, result) = gw.get(&result_path).await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["decidedBy"], "alice");
    assert_eq!(result["outcome"]["type"], "APPROVE");
    assert_eq!(result["requestId"], request_id.as_str());

    let second = gw
        .gw
        .inbox
        .decide_approval(&request_id, Outcome::new(OutcomeType::Reject), "bob")
        .await;
    assert!(
        matches!(second, Err(InboxError::AlreadyDecided)),
        "{second:?}"
    );
    let (_, still) = gw.get(&result_path).await;
    assert_eq!(still["outcome"]["type"], "APPROVE");
}

#[tokio::test]
async fn elicitation_with_a_field_is_pending_and_shown_on_the_task() {
    let gw = start().await;
    let task = gw.task("Ship order").await;
    let (status, created) = gw
        .post(
            "/api/elicitation-requests",
            &json!({
                "projectName": "default",
                "taskId": task,
                "summary": "Which address?",
                "fields": [{"type": "Text", "id": "street", "label": "Street", "required": true}],
            }),
            None,
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let request_id = created["eventId"].as_str().unwrap();
    let (status, _) = gw
        .get(&format!("/api/elicitation-requests/{request_id}/result"))
        .await;
    assert_eq!(status, 204);
    let (_, detail) = gw.get(&format!("/api/tasks/{task}")).await;
    assert_eq!(detail["task"]["status"], "WAITING");
    assert_eq!(detail["openRequests"][0]["requestId"], request_id);
}

#[tokio::test]
async fn task_events_page_with_a_cursor() {
    let gw = start().await;
    let task = gw.task("Logged").await;
    for (path, body) in [
        (
            "/api/agent-actions",
            json!({"projectName": "default", "taskId": task, "description": "looked it up"}),
        ),
        (
            "/api/exceptions",
            json!({"projectName": "default", "taskId": task, "message": "timeout upstream"}),
        ),
        (
            "/api/notes",
            json!({"projectName": "default", "taskId": task, "message": "retrying"}),
        ),
    ] {
        let (status, out) = gw.post(path, &body, None).await;
        assert_eq!(status, 201, "{path}: {out}");
        assert!(out["eventId"].is_string(), "{out}");
    }
    // TASK_CREATED + 3 events: two pages of two.
    let (status, page1) = gw.get(&format!("/api/tasks/{task}/events?limit=2")).await;
    assert_eq!(status, 200, "{page1}");
    assert_eq!(page1["items"].as_array().unwrap().len(), 2);
    assert_eq!(page1["items"][0]["eventType"], "TASK_CREATED");
    let cursor = page1["nextCursor"].as_str().unwrap();
    let (status, page2) = gw
        .get(&format!("/api/tasks/{task}/events?limit=2&cursor={cursor}"))
        .await;
    assert_eq!(status, 200, "{page2}");
    let items = page2["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_ne!(items[0]["id"], page1["items"][1]["id"]);
    let (status, bad) = gw.get(&format!("/api/tasks/{task}/events?limit=x")).await;
    assert_eq!(status, 400);
    assert!(bad["code"].is_string(), "{bad}");
}

#[tokio::test]
async fn another_key_cannot_see_the_task() {
    let gw = start().await;
    let task = gw.task("Private").await;
    let (status, text) = gw
        .get_as(&gw.other_key, &format!("/api/tasks/{task}"))
        .await;
    assert_eq!(status, 404, "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert!(body["error"].is_string(), "{body}");
    let (status, text) = gw.get_as(&gw.other_key, "/api/tasks").await;
    assert_eq!(status, 200);
    let list: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(list["items"], json!([]));
}

#[tokio::test]
async fn a_new_key_with_a_revoked_keys_name_owns_nothing_of_it() {
    let gw = start().await;
    let task = gw.task("Before the revocation").await;
    let (status, created) = gw
        .post(
            "/api/approval-requests",
            &json!({"projectName": "default", "taskId": task, "summary": "Deploy?"}),
            Some("appr-old"),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let request = created["eventId"].as_str().unwrap().to_owned();
    assert!(gw.gw.store.revoke_key("agent-a").await.unwrap());
    let heir = auth::create_key(&gw.gw.store, "agent-a").await.unwrap();

    let (status, text) = gw.get_as(&heir, "/api/tasks").await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(common::json_or_null(&text)["items"], json!([]));
    for path in [
        format!("/api/tasks/{task}"),
        format!("/api/tasks/{task}/events"),
        format!("/api/approval-requests/{request}/result"),
    ] {
        let (status, text) = gw.get_as(&heir, &path).await;
        assert_eq!(status, 404, "{path}: {text}");
    }
    let (status, body) = gw
        .post_as(
            &heir,
            &format!("/api/approval-requests/{request}/withdraw"),
            None,
        )
        .await;
    assert_eq!(status, 404, "{body}");
    // Nor does it replay the old key's idempotent answers: the same key creates anew.
    let r = gw
        .http
        .post(format!("{}/api/tasks", gw.url))
        .bearer_auth(&heir)
        .header("Idempotency-Key", "appr-old")
        .json(&json!({"name": "mine", "projectName": "default"}))
        .send()
        .await
        .unwrap();
    let (status, mine) = common::status_json(r).await;
    assert_eq!(status, 201, "{mine}");
    assert_ne!(mine["id"], task.as_str());
    let pending = gw.gw.inbox.request_view(&request).await.unwrap();
    assert_eq!(
        serde_json::to_value(pending.summary.status).unwrap(),
        "pending"
    );
}

#[tokio::test]
async fn a_key_named_like_the_gateways_own_agents_sees_none_of_their_requests() {
    let gw = start().await;
    // What the gateway's own agents ask (the `inbox` tools, dangerous commands).
    let embedded = tern_waits::client::EmbeddedInbox::new(gw.gw.inbox.clone());
    let task = tern_waits::client::InboxClient::session_task(&embedded, "s1", "default")
        .await
        .unwrap();
    let request = tern_waits::client::InboxClient::create_request(
        &embedded,
        tern_waits::client::RequestKind::Approval,
        json!({"projectName": task.project_name, "taskId": task.task_id, "summary": "rm -rf?"}),
        "tern-req:s1:call_1",
    )
    .await
    .unwrap();

    // The name is refused now, whatever its case...
    for name in [
        tern_waits::client::EMBEDDED_OWNER,
        "Tern-Agent",
        " TERN_SERVER_KEY ",
    ] {
        let refused = auth::create_key(&gw.gw.store, name).await;
        assert!(
            matches!(refused, Err(auth::KeyError::ReservedName(_))),
            "{name}: {refused:?}"
        );
    }
    // ...and a key that got it before (stored directly, as an older gateway allowed) owns
    // nothing of the gateway's: ownership follows the key's id, not its name.
    let squatter = auth::generate_key().unwrap();
    gw.gw
        .store
        .create_key(
            tern_waits::client::EMBEDDED_OWNER,
            tern_store::KeyKind::Agent,
            &auth::hash_key(&squatter),
            &auth::key_prefix(&squatter),
        )
        .await
        .unwrap();
    let (status, text) = gw.get_as(&squatter, "/api/tasks").await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(common::json_or_null(&text)["items"], json!([]));
    let (status, text) = gw
        .get_as(&squatter, &format!("/api/tasks/{}", task.task_id))
        .await;
    assert_eq!(status, 404, "{text}");
    let (status, body) = gw
        .post_as(
            &squatter,
            &format!("/api/approval-requests/{request}/withdraw"),
            None,
        )
        .await;
    assert_eq!(status, 404, "{body}");
    let view = gw.gw.inbox.request_view(&request).await.unwrap();
    assert_eq!(
        serde_json::to_value(view.summary.status).unwrap(),
        "pending"
    );
}

#[tokio::test]
async fn requests_without_a_key_are_401() {
    let gw = start().await;
    let r = gw
        .http
        .get(format!("{}/api/tasks", gw.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = gw
        .http
        .post(format!("{}/api/notes", gw.url))
        .bearer_auth("not-a-key")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    // Pump Up's shape: `error` is a string the SDK can parse.
    common::assert_json_error(r).await;
    // The Hermes routes keep their envelope.
    let r = gw
        .http
        .get(format!("{}/api/sessions", gw.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_api_key", "{body}");
}

#[tokio::test]
async fn bad_bodies_are_400_with_a_code() {
    let gw = start().await;
    let r = gw
        .http
        .post(format!("{}/api/tasks", gw.url))
        .bearer_auth(&gw.key)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], "invalid_json", "{body}");
    assert!(body["message"].is_string());

    // Valid JSON of the wrong shape, and a refusal by the service.
    let (status, body) = gw.post("/api/tasks", &json!({"name": 3}), None).await;
    assert_eq!(status, 400);
    assert_eq!(body["code"], "invalid_json", "{body}");
    let (status, body) = gw
        .post(
            "/api/tasks",
            &json!({"name": "  ", "projectName": "default"}),
            None,
        )
        .await;
    assert_eq!(status, 400);
    assert!(body["code"].is_string(), "{body}");
    assert!(body.get("error").is_none(), "{body}");
}

impl Gw {
    async fn post_as(&self, key: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let mut req = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(key);
        if let Some(b) = body {
            req = req.json(b);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

#[tokio::test]
async fn the_agent_withdraws_its_pending_requests() {
    let gw = start().await;
    let task = gw.task("withdrawing").await;
    let (_, approval) = gw
        .post(
            "/api/approval-requests",
            &json!({"projectName": "default", "taskId": task, "summary": "Deploy?"}),
            None,
        )
        .await;
    let approval_id = approval["eventId"].as_str().unwrap().to_owned();
    let (_, form) = gw
        .post(
            "/api/elicitation-requests",
            &json!({"projectName": "default", "taskId": task, "summary": "Which one?",
                    "fields": [{"type": "Switch", "id": "ok", "label": "OK", "required": true}]}),
            None,
        )
        .await;
    let form_id = form["eventId"].as_str().unwrap().to_owned();
    let approval_path = format!("/api/approval-requests/{approval_id}/withdraw");
    let form_path = format!("/api/elicitation-requests/{form_id}/withdraw");

    // Another key, or the path of the other kind, does not find it; nothing changes.
    let (status, body) = gw
        .post_as(&gw.other_key, &approval_path, Some(&json!({})))
        .await;
    assert_eq!(status, 404, "{body}");
    let (status, _) = gw
        .post_as(
            &gw.key,
            &format!("/api/elicitation-requests/{approval_id}/withdraw"),
            None,
        )
        .await;
    assert_eq!(status, 404);
    let (status, _) = gw
        .get(&format!("/api/approval-requests/{approval_id}/result"))
        .await;
    assert_eq!(status, 204);

    // With a reason; a repeat (even with another reason) answers the first withdrawal.
    let (status, first) = gw
        .post_as(
            &gw.key,
            &approval_path,
            Some(&json!({"reason": "the user left"})),
        )
        .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["requestId"], approval_id.as_str());
    assert_eq!(first["taskId"], task.as_str());
    assert_eq!(first["status"], "withdrawn");
    assert_eq!(first["reason"], "the user left");
    let (status, again) = gw
        .post_as(&gw.key, &approval_path, Some(&json!({"reason": "other"})))
        .await;
    assert_eq!((status, &again), (200, &first));

    // The task still waits for the form; the result read says why none will come.
    let (_, detail) = gw.get(&format!("/api/tasks/{task}")).await;
    assert_eq!(detail["task"]["status"], "WAITING", "{detail}");
    let (status, result) = gw
        .get(&format!("/api/approval-requests/{approval_id}/result"))
        .await;
    assert_eq!(status, 409, "{result}");
    assert_eq!(
        result["error"],
        format!("request {approval_id} was withdrawn")
    );

    // Without a body; then nothing of the task is pending and it runs again.
    let (status, w) = gw.post_as(&gw.key, &form_path, None).await;
    assert_eq!(status, 200, "{w}");
    assert!(w.get("reason").is_none(), "{w}");
    let (_, detail) = gw.get(&format!("/api/tasks/{task}")).await;
    assert_eq!(detail["task"]["status"], "RUNNING", "{detail}");
    assert_eq!(detail["openRequests"], json!([]));

    // The timeline: a NOTE from the agent in response to each request.
    let (_, events) = gw.get(&format!("/api/tasks/{task}/events")).await;
    let notes: Vec<&Value> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["eventType"] == "NOTE")
        .collect();
    assert_eq!(notes.len(), 2, "{events}");
    assert_eq!(notes[0]["source"], "AGENT");
    assert_eq!(notes[0]["inResponseTo"], approval_id.as_str());
    assert_eq!(
        notes[0]["payload"]["message"],
        "Withdrawn by the agent: the user left"
    );
    assert_eq!(notes[1]["inResponseTo"], form_id.as_str());

    // A reviewer is too late now; the status reads withdrawn.
    let late = gw
        .gw
        .inbox
        .decide_approval(&approval_id, Outcome::new(OutcomeType::Approve), "alice")
        .await;
    assert!(matches!(late, Err(InboxError::AlreadyDecided)), "{late:?}");
    let late = gw
        .gw
        .inbox
        .answer_elicitation(&form_id, &serde_json::Map::new(), "alice")
        .await;
    assert!(matches!(late, Err(InboxError::AlreadyDecided)), "{late:?}");
    let view = gw.gw.inbox.request_view(&approval_id).await.unwrap();
    assert_eq!(
        serde_json::to_value(view.summary.status).unwrap(),
        "withdrawn"
    );
    // Owned by the key's id, shown to reviewers by its name.
    assert_eq!(view.summary.decided_by.as_deref(), Some("agent-a"));

    // A decided request cannot be withdrawn.
    let (_, decided) = gw
        .post(
            "/api/approval-requests",
            &json!({"projectName": "default", "taskId": task, "summary": "Again?"}),
            None,
        )
        .await;
    let decided_id = decided["eventId"].as_str().unwrap();
    gw.gw
        .inbox
        .decide_approval(decided_id, Outcome::new(OutcomeType::Reject), "alice")
        .await
        .unwrap();
    let (status, body) = gw
        .post_as(
            &gw.key,
            &format!("/api/approval-requests/{decided_id}/withdraw"),
            None,
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(body["error"].is_string(), "{body}");
    let (status, result) = gw
        .get(&format!("/api/approval-requests/{decided_id}/result"))
        .await;
    assert_eq!(
        (status, &result["outcome"]["type"]),
        (200, &json!("REJECT"))
    );
}

#[tokio::test]
async fn unknown_paths_and_methods_answer_in_pump_up_shapes() {
    let gw = start().await;
    // The agent API and the reviewer API: `{"error": "<string>"}`, which the SDK parses.
    for path in [
        "/api/tasks/x/nope",
        "/api/projects/x/y",
        "/api/uploads/x/y/z",
        "/inbox/api/nope",
    ] {
        let (status, text) = gw.get_as(&gw.key, path).await;
        assert_eq!(status, 404, "{path}: {text}");
        let body: Value = serde_json::from_str(&text).unwrap();
        assert!(body["error"].is_string(), "{path}: {body}");
    }
    let r = gw
        .http
        .delete(format!("{}/api/projects", gw.url))
        .bearer_auth(&gw.key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    assert!(r.headers().contains_key("allow"));
    common::assert_json_error(r).await;
    let r = gw
        .http
        .put(format!("{}/inbox/api/me", gw.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    common::assert_json_error(r).await;

    // The Hermes API keeps its envelope.
    for path in ["/api/sessions/x/nope", "/v1/nope"] {
        let (status, text) = gw.get_as(&gw.key, path).await;
        assert_eq!(status, 404, "{path}: {text}");
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["error"]["code"], "not_found", "{path}: {body}");
    }
    let r = gw
        .http
        .delete(format!("{}/v1/models", gw.url))
        .bearer_auth(&gw.key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed", "{body}");
}
