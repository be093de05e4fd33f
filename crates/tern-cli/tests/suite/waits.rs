//! Durable waits end to end: real `tern gateway` processes, decisions made with real
//! `tern inbox` processes, only the model faked. The model asks a human (`request_approval`
//! or `request_elicitation`), its turn ends with the session `waiting`; the decision made
//! from the CLI is appended to the session once and the resumed turn sees it and goes on —
//! also when the session is busy, and after a `kill -9` between the decision and the resume.
//! A deleted session cancels its wait and withdraws the request.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Api, DECISION_TAG, Env, assert_ok, content, decisions, last_message, wait_until};
use serde_json::{Value, json};
use tern_fake_model::{FakeModel, Gate, Reply};
use tern_test_support::PATIENCE;

/// The model: asks for approval (or answers) on a user's request, ends its turn after
/// asking, and goes on after a decision — runs `echo deployed`, then says it is done. A
/// "long job" is answered once the returned gate is opened.
fn script_model(fake: &FakeModel, ask: &'static str, ask_args: Value) -> Gate {
    let ask_args = ask_args.to_string();
    let gate = Gate::new();
    let long_job = gate.clone();
    fake.set_responder(move |body| {
        let last = last_message(body);
        let text = content(&last);
        match last["role"].as_str() {
            Some("user") if text.starts_with(DECISION_TAG) => Reply::tool_call(
                "call_go",
                "terminal",
                json!({"command": "echo deployed"}).to_string(),
            ),
            Some("user") if text.starts_with("long job") => {
                Reply::text("long job done").held(&long_job)
            }
            Some("user") => Reply::tool_call("call_ask", ask, ask_args.clone()),
            Some("tool") if last["tool_call_id"] == "call_ask" => {
                Reply::text("I asked a human; I will continue once they decide.")
            }
            Some("tool") => Reply::text(format!("done after the decision: {}", text.trim())),
            _ => Reply::text("?"),
        }
    });
    gate
}

/// The request id of the session's one open wait, once the first turn ended waiting.
async fn open_wait(api: &Api, id: &str, kind: &str) -> String {
    let s = api.session(id).await;
    assert_eq!(s["status"], "waiting", "{s}");
    let waits = s["waits"].as_array().unwrap();
    assert_eq!(waits.len(), 1, "{s}");
    assert_eq!(waits[0]["kind"], kind);
    assert_eq!(waits[0]["status"], "pending");
    waits[0]["requestId"].as_str().unwrap().to_owned()
}

/// The model request that answered the decision: its last message is the decision.
fn resume_request(fake: &FakeModel) -> Value {
    let reqs = fake.requests();
    let r = reqs
        .iter()
        .find(|r| {
            r.messages()
                .last()
                .is_some_and(|m| m["role"] == "user" && content(m).starts_with(DECISION_TAG))
        })
        .expect("a model request ending with the decision");
    r.messages().last().unwrap().clone()
}

#[tokio::test]
async fn an_approval_from_the_cli_resumes_the_session_which_goes_on() {
    let e = Env::with_model().await;
    script_model(
        e.fake(),
        "request_approval",
        json!({"summary": "Deploy v2 to prod?", "keyValueContext": {"env": "prod"}}),
    );
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let id = api.create_session().await;
    let first = api.chat(&id, "deploy v2 please").await;
    assert_eq!(first["status"], "completed");
    assert!(
        e.fake().requests()[0]
            .tool_names()
            .contains(&"request_approval".to_owned()),
        "the gateway offers the inbox tools by default"
    );
    let request = open_wait(&api, &id, "approval").await;

    let o = e.inbox(&["list", "--json"]);
    assert_ok(&o);
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == request.as_str() && r["summary"] == "Deploy v2 to prod?"),
        "{list}"
    );
    let o = e.tern().args(["sessions", "show", &id]).output().unwrap();
    assert_ok(&o);
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(
        shown.contains("waiting for 1 decision") && shown.contains(&request),
        "{shown}"
    );

    assert_ok(&e.inbox(&["approve", &request, "--note", "ship it"]));
    api.until_resumed(&id).await;

    let decision = resume_request(e.fake());
    let text = content(&decision);
    for want in [
        "Asked: Deploy v2 to prod?",
        "Decided: APPROVE by admin",
        "Note: ship it",
        &request,
        "\"decidedBy\": \"admin\"",
    ] {
        assert!(text.contains(want), "{want:?} missing:\n{text}");
    }
    let msgs = api.messages(&id).await;
    assert_eq!(decisions(&msgs).len(), 1);
    // The resumed turn went on: it ran the command and answered with its output.
    let last = msgs.last().unwrap();
    assert_eq!(last["role"], "assistant");
    assert!(
        content(last).contains("done after the decision") && content(last).contains("deployed"),
        "{last}"
    );
}

#[tokio::test]
async fn an_answered_elicitation_resumes_the_session_with_the_answers() {
    let e = Env::with_model().await;
    script_model(
        e.fake(),
        "request_elicitation",
        json!({"summary": "Which region?", "fields": [
            {"type": "Text", "id": "region", "label": "Region", "required": true}
        ]}),
    );
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let id = api.create_session().await;
    api.chat(&id, "set up the region").await;
    let request = open_wait(&api, &id, "elicitation").await;

    assert_ok(&e.inbox(&["answer", &request, "--field", "region=eu-west-1"]));
    api.until_resumed(&id).await;
    let decision = resume_request(e.fake());
    let text = content(&decision);
    assert!(text.contains("Asked: Which region?"), "{text}");
    assert!(
        text.contains("Answered by admin:\n- region: eu-west-1"),
        "{text}"
    );
    let msgs = api.messages(&id).await;
    assert_eq!(decisions(&msgs).len(), 1);
    assert!(content(msgs.last().unwrap()).contains("done after the decision"));
}

#[tokio::test]
async fn a_decision_for_a_busy_session_waits_for_the_running_turn() {
    let e = Env::with_model().await;
    let long_job = script_model(
        e.fake(),
        "request_approval",
        json!({"summary": "Restart the cache?"}),
    );
    let gw = e.gateway();
    let api = Arc::new(Api::new(&gw, e.key()));
    let id = api.create_session().await;
    api.chat(&id, "restart the cache").await;
    let request = open_wait(&api, &id, "approval").await;

    // A long turn (the model answers when the test lets it) on the same session.
    let before = e.fake().requests().len();
    let long = {
        let (api, id) = (api.clone(), id.clone());
        tokio::spawn(async move { api.chat(&id, "long job: summarize everything").await })
    };
    e.fake()
        .wait_requests(before + 1, PATIENCE)
        .await
        .expect("the long turn reached the model");
    assert_ok(&e.inbox(&["approve", &request]));
    // The decision came while the long turn was still running.
    assert_eq!(api.session(&id).await["status"], "running");
    long_job.open();

    let long = long.await.unwrap();
    assert_eq!(long["message"]["content"], "long job done");
    api.until_resumed(&id).await;
    let msgs = api.messages(&id).await;
    let ds = decisions(&msgs);
    assert_eq!(ds.len(), 1);
    // Appended after the long turn's answer, not inside it; then answered.
    let long_answer = msgs
        .iter()
        .position(|m| content(m) == "long job done")
        .unwrap();
    let decision = msgs
        .iter()
        .position(|m| content(m).starts_with(DECISION_TAG))
        .unwrap();
    assert!(decision > long_answer, "{msgs:#?}");
    assert!(content(msgs.last().unwrap()).contains("done after the decision"));
}

#[tokio::test]
async fn a_deleted_session_cancels_its_wait_and_withdraws_the_request() {
    let e = Env::with_model().await;
    script_model(
        e.fake(),
        "request_approval",
        json!({"summary": "Drop the table?"}),
    );
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let id = api.create_session().await;
    api.chat(&id, "drop the old table").await;
    let request = open_wait(&api, &id, "approval").await;

    let (s, v) = api
        .send(api.http.delete(format!("{}/api/sessions/{id}", api.url)))
        .await;
    assert_eq!(s, 200, "{v}");
    let o = e.inbox(&["list", "--status", "withdrawn", "--json"]);
    assert_ok(&o);
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == request.as_str() && r["status"] == "withdrawn"),
        "{list}"
    );
    let o = e.inbox(&["show", &request]);
    assert_ok(&o);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("session deleted"),
        "the timeline says why"
    );
    // Too late to decide it now.
    assert!(!e.inbox(&["approve", &request]).status.success());
}

/// Whether the embedded inbox lists `request` as withdrawn.
fn withdrawn(e: &Env, request: &str) -> bool {
    let o = e.inbox(&["list", "--status", "withdrawn", "--json"]);
    assert_ok(&o);
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["id"] == request)
}

/// `tern sessions delete` goes through the running gateway (which emits the hook events and
/// withdraws the request); with no gateway running it deletes locally and says that no
/// hook event was sent.
#[tokio::test]
async fn tern_sessions_delete_goes_through_the_running_gateway() {
    let e = Env::with_model().await;
    let events = e.dir.path().join("events.jsonl");
    std::fs::write(
        e.home().join("config.toml"),
        format!(
            "[[hooks]]\nname = \"log\"\nevents = [\"wait_resolved\", \"session_end\"]\n\
             command = \"cat >> {}\"\ntimeout_ms = 5000\n",
            events.display()
        ),
    )
    .unwrap();
    script_model(e.fake(), "request_approval", json!({"summary": "Drop it?"}));
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let first = api.create_session().await;
    api.chat(&first, "drop the old table").await;
    let first_request = open_wait(&api, &first, "approval").await;
    let second = api.create_session().await;
    api.chat(&second, "drop the other table").await;
    let second_request = open_wait(&api, &second, "approval").await;

    let o = e
        .tern()
        .args(["sessions", "delete", &first])
        .output()
        .unwrap();
    assert_ok(&o);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(said.contains("through the gateway"), "{said}");
    let (s, _) = api
        .send(api.http.get(format!("{}/api/sessions/{first}", api.url)))
        .await;
    assert_eq!(s, 404, "the gateway no longer has the session");
    assert!(withdrawn(&e, &first_request));
    // The gateway's hook events: the wait cancelled, then the session ended.
    let resolved = wait_until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        async || {
            let text = std::fs::read_to_string(&events).unwrap_or_default();
            let found: Vec<Value> = text
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .filter(|v: &Value| v["session_id"] == first.as_str())
                .collect();
            if found.iter().any(|v| v["event"] == "session_end") {
                Ok(found)
            } else {
                Err(format!("no session_end hook event: {text}"))
            }
        },
    )
    .await;
    let resolved: Vec<&Value> = resolved
        .iter()
        .filter(|v| v["event"] == "wait_resolved")
        .collect();
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(resolved[0]["status"], "cancelled");
    assert_eq!(resolved[0]["request_id"], first_request.as_str());

    // No gateway any more (its admin file stays behind): deleted locally, said so.
    drop(gw);
    let o = e
        .tern()
        .args(["sessions", "delete", &second])
        .output()
        .unwrap();
    assert_ok(&o);
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(said.contains("no hook events"), "{said}");
    let o = e
        .tern()
        .args(["sessions", "show", &second])
        .output()
        .unwrap();
    assert!(!o.status.success(), "the session is gone");
    // `tern inbox` reads the inbox through a gateway.
    let _gw = e.gateway();
    assert!(withdrawn(&e, &second_request));
}

#[tokio::test]
async fn kill_9_between_the_decision_and_its_answer_delivers_once_and_answers_after_restart() {
    let e = Env::with_model().await;
    // Until `answer` is set, the resumed turn's model call never returns: the gateway is
    // killed with the decision appended and its turn in flight.
    let answer = Arc::new(AtomicBool::new(false));
    {
        let answer = answer.clone();
        e.fake().set_responder(move |body| {
            let last = last_message(body);
            let text = content(&last);
            match last["role"].as_str() {
                Some("user") if text.starts_with(DECISION_TAG) => {
                    if answer.load(Ordering::SeqCst) {
                        Reply::text("resumed after the crash")
                    } else {
                        Reply::hang()
                    }
                }
                Some("user") if text == "hello again" => Reply::text("hi"),
                Some("user") => Reply::tool_call(
                    "call_ask",
                    "request_approval",
                    json!({"summary": "Rotate the keys?"}).to_string(),
                ),
                _ => Reply::text("I asked; waiting."),
            }
        });
    }
    let mut gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let id = api.create_session().await;
    api.chat(&id, "rotate the keys").await;
    let request = open_wait(&api, &id, "approval").await;
    let before = e.fake().requests().len();
    assert_ok(&e.inbox(&["approve", &request]));
    // The resumed turn reached the model: the decision is appended, not yet answered.
    e.fake()
        .wait_requests(before + 1, Duration::from_secs(30))
        .await
        .expect("the resumed turn called the model");
    gw.child.kill().unwrap(); // SIGKILL
    gw.child.wait().unwrap();

    answer.store(true, Ordering::SeqCst);
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    // Right after the restart the session is idle with no open wait while the recovered
    // turn is still to run: wait for its answer, not for the status.
    let msgs = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(50),
        async || {
            let msgs = api.messages(&id).await;
            match msgs.last() {
                Some(m) if content(m) == "resumed after the crash" => Ok(msgs),
                _ => Err(format!("the recovered turn never answered: {msgs:#?}")),
            }
        },
    )
    .await;
    api.until_resumed(&id).await;
    assert_eq!(decisions(&msgs).len(), 1, "{msgs:#?}");
    // A second restart has nothing left to recover: the next chat is the only model call
    // (a recovered turn would have queued before it), and there is still one decision.
    drop(gw);
    let before = e.fake().requests().len();
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let hi = api.chat(&id, "hello again").await;
    assert_eq!(hi["message"]["content"], "hi");
    let after = e.fake().requests();
    assert_eq!(after.len(), before + 1);
    assert_eq!(
        content(after[before].messages().last().unwrap()),
        "hello again"
    );
    assert_eq!(decisions(&api.messages(&id).await).len(), 1);
}
