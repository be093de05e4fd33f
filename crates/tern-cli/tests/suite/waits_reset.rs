//! Durable waits across a session reset, and the waits' hook events — real `tern gateway`
//! processes, decisions made with real `tern inbox` processes, only the model faked:
//!
//! - `POST /api/sessions/{id}/reset` with an open wait cancels the wait and withdraws its
//!   request ("session reset"; `wait_resolved`, cancelled);
//! - with `[inbox] keep_waits_on_reset = true` the wait moves to the new session: the
//!   decision is appended to the new session (never to the old one) and its resumed turn
//!   answers it;
//! - a command hook receives `wait_created` when the model asks, `wait_resolved` (delivered,
//!   who decided, the outcome) after `tern inbox approve`, and `wait_resolved` (cancelled)
//!   after a session is deleted — with exactly the fields `docs/hooks.md` documents.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Api, DECISION_TAG, Env, assert_ok, content, decisions, last_message, wait_until};
use serde_json::{Value, json};
use tern_fake_model::{FakeModel, Reply};

impl Env {
    /// Where the command hook of [`Env::hook_config`] appends the events it receives.
    fn events_file(&self) -> PathBuf {
        self.dir.path().join("events.jsonl")
    }

    /// A `[[hooks]]` entry that appends every wait event, one JSON a line, to
    /// [`Env::events_file`].
    fn hook_config(&self) -> String {
        format!(
            "[[hooks]]\nname = \"waits-log\"\nevents = [\"wait_created\", \"wait_resolved\"]\ncommand = \"cat >> '{}'\"\ntimeout_ms = 5000\n",
            self.events_file().display()
        )
    }

    /// `tern inbox list --status STATUS --json`: the listed requests.
    fn listed(&self, status: &str) -> Vec<Value> {
        let o = self.inbox(&["list", "--status", status, "--json"]);
        assert_ok(&o);
        let list: Value = serde_json::from_slice(&o.stdout).unwrap();
        list["items"].as_array().cloned().unwrap()
    }
}

/// The model: asks for approval with `summary` on a user's message and ends its turn; on a
/// decision it says what it saw.
fn script_model(fake: &FakeModel, summary: &'static str) {
    fake.set_responder(move |body| {
        let last = last_message(body);
        let text = content(&last);
        match last["role"].as_str() {
            Some("user") if text.starts_with(DECISION_TAG) => {
                Reply::text(format!("resumed with: {text}"))
            }
            Some("user") => Reply::tool_call(
                "call_ask",
                "request_approval",
                json!({"summary": summary}).to_string(),
            ),
            Some("tool") => Reply::text("I asked a human; I will continue once they decide."),
            _ => Reply::text("?"),
        }
    });
}

/// The session's one open wait, once its turn ended waiting.
async fn open_wait(api: &Api, id: &str) -> Value {
    let s = api.session(id).await;
    assert_eq!(s["status"], "waiting", "{s}");
    let waits = s["waits"].as_array().unwrap();
    assert_eq!(waits.len(), 1, "{s}");
    assert_eq!(waits[0]["status"], "pending", "{s}");
    assert!(waits[0]["requestId"].is_string(), "{s}");
    waits[0].clone()
}

/// The model requests whose last message is a decision.
fn resume_requests(fake: &FakeModel) -> Vec<Vec<Value>> {
    fake.requests()
        .iter()
        .filter(|r| {
            r.messages()
                .last()
                .is_some_and(|m| m["role"] == "user" && content(m).starts_with(DECISION_TAG))
        })
        .map(|r| r.messages().to_vec())
        .collect()
}

/// The events the hook received so far, in order.
fn hook_events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Waits until the hook received an event `pred` accepts and returns it; panics after a
/// generous bound, which only a lost event reaches.
async fn hook_event(path: &Path, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        async || {
            let events = hook_events(path);
            match events.iter().find(|ev| pred(ev)) {
                Some(ev) => Ok(ev.clone()),
                None => Err(format!("the hook never received {what}: {events:#?}")),
            }
        },
    )
    .await
}

/// The event's field names.
fn keys(ev: &Value) -> BTreeSet<&str> {
    ev.as_object().unwrap().keys().map(String::as_str).collect()
}

const WAIT_CREATED_FIELDS: [&str; 8] = [
    "event",
    "session_id",
    "source",
    "wait_id",
    "request_id",
    "kind",
    "summary",
    "timestamp",
];

const WAIT_RESOLVED_FIELDS: [&str; 10] = [
    "event",
    "session_id",
    "source",
    "wait_id",
    "request_id",
    "kind",
    "status",
    "decided_by",
    "outcome",
    "timestamp",
];

/// A `wait_resolved` (cancelled) for `wait`, with exactly the documented fields.
#[track_caller]
fn assert_cancelled(ev: &Value, session: &str, wait: &Value) {
    assert_eq!(keys(ev), BTreeSet::from(WAIT_RESOLVED_FIELDS), "{ev}");
    assert_eq!(ev["session_id"], session, "{ev}");
    assert_eq!(ev["source"], "api", "{ev}");
    assert_eq!(ev["request_id"], wait["requestId"], "{ev}");
    assert_eq!(ev["kind"], "approval", "{ev}");
    assert_eq!(ev["status"], "cancelled", "{ev}");
    assert!(ev["decided_by"].is_null(), "{ev}");
    assert!(ev["outcome"].is_null(), "{ev}");
    assert!(ev["timestamp"].as_u64().is_some_and(|t| t > 0), "{ev}");
}

#[tokio::test]
async fn a_reset_cancels_the_wait_and_withdraws_the_request() {
    let e = Env::with_model().await;
    e.config(&e.hook_config());
    script_model(e.fake(), "Deploy v2 to prod?");
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let id = api.create_session().await;
    api.chat(&id, "deploy v2 please").await;
    let wait = open_wait(&api, &id).await;
    let request = wait["requestId"].as_str().unwrap().to_owned();

    let new = api.reset(&id).await;
    assert_ne!(new, id);

    let withdrawn = e.listed("withdrawn");
    assert!(
        withdrawn
            .iter()
            .any(|r| r["id"] == request.as_str() && r["status"] == "withdrawn"),
        "{withdrawn:#?}"
    );
    assert!(
        !e.listed("pending")
            .iter()
            .any(|r| r["id"] == request.as_str()),
        "no longer pending"
    );
    let o = e.inbox(&["show", &request]);
    assert_ok(&o);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("session reset"),
        "the timeline says why: {}",
        String::from_utf8_lossy(&o.stdout)
    );

    // Neither session waits any more; the wait did not move.
    let old = api.session(&id).await;
    assert_eq!(old["status"], "ended", "{old}");
    assert!(old["waits"].as_array().unwrap().is_empty(), "{old}");
    let next = api.session(&new).await;
    assert_eq!(next["status"], "idle", "{next}");
    assert!(next["waits"].as_array().unwrap().is_empty(), "{next}");

    let ev = hook_event(&e.events_file(), "wait_resolved", |v| {
        v["event"] == "wait_resolved"
    })
    .await;
    assert_cancelled(&ev, &id, &wait);
    assert_eq!(ev["wait_id"], wait["id"], "{ev}");

    // Too late to decide it now, and nothing was ever delivered.
    assert!(!e.inbox(&["approve", &request]).status.success());
    assert!(decisions(&api.messages(&id).await).is_empty());
    assert!(decisions(&api.messages(&new).await).is_empty());
    assert!(resume_requests(e.fake()).is_empty());
}

#[tokio::test]
async fn with_keep_waits_on_reset_the_decision_resumes_the_new_session() {
    let e = Env::with_model().await;
    e.config(&format!(
        "[inbox]\nkeep_waits_on_reset = true\n\n{}",
        e.hook_config()
    ));
    script_model(e.fake(), "Rotate the keys?");
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let id = api.create_session().await;
    api.chat(&id, "rotate the keys please").await;
    let wait = open_wait(&api, &id).await;
    let request = wait["requestId"].as_str().unwrap().to_owned();

    let new = api.reset(&id).await;
    // The wait moved: the new session waits for it, the old one (ended) no longer does,
    // and the request is still open.
    let moved = open_wait(&api, &new).await;
    assert_eq!(moved["id"], wait["id"]);
    assert_eq!(moved["requestId"], request.as_str());
    let old = api.session(&id).await;
    assert_eq!(old["status"], "ended", "{old}");
    assert!(old["waits"].as_array().unwrap().is_empty(), "{old}");
    assert!(
        e.listed("pending")
            .iter()
            .any(|r| r["id"] == request.as_str()),
        "the request stays pending"
    );
    assert!(
        hook_events(&e.events_file())
            .iter()
            .all(|v| v["event"] != "wait_resolved"),
        "a moved wait is not resolved"
    );

    assert_ok(&e.inbox(&["approve", &request, "--note", "go ahead"]));
    api.until_resumed(&new).await;

    // The model saw the decision in a request for the NEW session: one that ends with the
    // decision and carries none of the old conversation.
    let resumes = resume_requests(e.fake());
    assert_eq!(resumes.len(), 1, "{resumes:#?}");
    let msgs = &resumes[0];
    let decision = content(msgs.last().unwrap());
    for want in ["Asked: Rotate the keys?", "APPROVE", "go ahead", &request] {
        assert!(decision.contains(want), "{want:?} missing:\n{decision}");
    }
    assert!(
        !msgs
            .iter()
            .any(|m| content(m).contains("rotate the keys please")),
        "the resumed request carried the old session's conversation: {msgs:#?}"
    );

    // Appended to the new session once and answered there; never to the old one.
    let new_msgs = api.messages(&new).await;
    assert_eq!(decisions(&new_msgs).len(), 1, "{new_msgs:#?}");
    assert!(
        content(new_msgs.last().unwrap()).starts_with("resumed with: "),
        "{new_msgs:#?}"
    );
    let old_msgs = api.messages(&id).await;
    assert!(decisions(&old_msgs).is_empty(), "{old_msgs:#?}");
    assert_eq!(api.session(&id).await["status"], "ended");

    let ev = hook_event(&e.events_file(), "wait_resolved", |v| {
        v["event"] == "wait_resolved"
    })
    .await;
    assert_eq!(ev["status"], "delivered", "{ev}");
    assert_eq!(ev["session_id"], new.as_str(), "{ev}");
    assert_eq!(ev["wait_id"], wait["id"], "{ev}");
}

#[tokio::test]
async fn a_command_hook_receives_wait_created_and_wait_resolved() {
    let e = Env::with_model().await;
    e.config(&e.hook_config());
    script_model(e.fake(), "Ship release 1.4.2?");
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let events = e.events_file();

    // Asked: `wait_created`.
    let id = api.create_session().await;
    api.chat(&id, "ship it").await;
    let wait = open_wait(&api, &id).await;
    let request = wait["requestId"].as_str().unwrap().to_owned();
    let created = hook_event(&events, "wait_created", |v| {
        v["event"] == "wait_created" && v["session_id"] == id.as_str()
    })
    .await;
    assert_eq!(
        keys(&created),
        BTreeSet::from(WAIT_CREATED_FIELDS),
        "{created}"
    );
    assert_eq!(created["source"], "api", "{created}");
    assert_eq!(created["wait_id"], wait["id"], "{created}");
    assert_eq!(created["request_id"], request.as_str(), "{created}");
    assert_eq!(created["kind"], "approval", "{created}");
    assert_eq!(created["summary"], "Ship release 1.4.2?", "{created}");
    assert!(
        created["timestamp"].as_u64().is_some_and(|t| t > 0),
        "{created}"
    );

    // Approved: `wait_resolved`, delivered, with who decided and the outcome.
    assert_ok(&e.inbox(&["approve", &request]));
    api.until_resumed(&id).await;
    let resolved = hook_event(&events, "wait_resolved (delivered)", |v| {
        v["event"] == "wait_resolved" && v["session_id"] == id.as_str()
    })
    .await;
    assert_eq!(
        keys(&resolved),
        BTreeSet::from(WAIT_RESOLVED_FIELDS),
        "{resolved}"
    );
    assert_eq!(resolved["source"], "api", "{resolved}");
    assert_eq!(resolved["wait_id"], wait["id"], "{resolved}");
    assert_eq!(resolved["request_id"], request.as_str(), "{resolved}");
    assert_eq!(resolved["kind"], "approval", "{resolved}");
    assert_eq!(resolved["status"], "delivered", "{resolved}");
    assert_eq!(resolved["decided_by"], "admin", "{resolved}");
    assert_eq!(resolved["outcome"], "APPROVE", "{resolved}");

    // Another session asks, then is deleted: `wait_resolved`, cancelled.
    let other = api.create_session().await;
    api.chat(&other, "ship it too").await;
    let other_wait = open_wait(&api, &other).await;
    hook_event(&events, "the second wait_created", |v| {
        v["event"] == "wait_created" && v["session_id"] == other.as_str()
    })
    .await;
    api.delete(&other).await;
    let cancelled = hook_event(&events, "wait_resolved (cancelled)", |v| {
        v["event"] == "wait_resolved" && v["session_id"] == other.as_str()
    })
    .await;
    assert_cancelled(&cancelled, &other, &other_wait);
    assert_eq!(cancelled["wait_id"], other_wait["id"], "{cancelled}");

    // Each wait was created once and resolved once.
    let all = hook_events(&events);
    for w in [&wait, &other_wait] {
        for name in ["wait_created", "wait_resolved"] {
            assert_eq!(
                all.iter()
                    .filter(|v| v["event"] == name && v["wait_id"] == w["id"])
                    .count(),
                1,
                "{name} for {w}: {all:#?}"
            );
        }
    }
}
