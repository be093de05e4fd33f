//! `notify_on_complete` through a real `tern gateway`, only the model faked: the model starts
//! `sleep 1; echo done` in the background with `notify_on_complete`, its turn ends, and when
//! the process exits the session is resumed once with the exit code and the last line.

mod common;

use std::time::Duration;

use common::{Api, Env, content, wait_until};
use serde_json::{Value, json};
use tern_fake_model::{FakeModel, Reply};

const EXIT_TAG: &str = "[process exited]";

fn script_model(fake: &FakeModel) {
    fake.set_responder(move |body| {
        let msgs = body["messages"].as_array().cloned().unwrap_or_default();
        let last = msgs.last().cloned().unwrap_or(Value::Null);
        let text = last["content"].as_str().unwrap_or_default().to_owned();
        match last["role"].as_str() {
            Some("user") if text == "start" => Reply::tool_call(
                "call_start",
                "terminal",
                json!({
                    "command": "sleep 1; echo done",
                    "background": true,
                    "notify_on_complete": true,
                })
                .to_string(),
            ),
            Some("user") if text.starts_with(EXIT_TAG) => Reply::text("noted"),
            Some("tool") => Reply::text("launched"),
            _ => Reply::text("?"),
        }
    });
}

#[tokio::test]
async fn a_finished_process_resumes_its_session_once() {
    let e = Env::with_model().await;
    script_model(e.fake());
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let session = api.create_session().await;

    let v = api.chat(&session, "start").await;
    assert_eq!(v["message"]["content"], "launched", "{v}");
    // A pending process wait does not make the session `waiting`.
    assert_ne!(api.session(&session).await["status"], "waiting");

    let msgs = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(100),
        async || {
            let msgs = api.messages(&session).await;
            let answered = msgs
                .iter()
                .skip_while(|m| !content(m).starts_with(EXIT_TAG))
                .any(|m| m["role"] == "assistant" && content(m) == "noted");
            if answered {
                Ok(msgs)
            } else {
                Err(format!("not resumed: {msgs:?}"))
            }
        },
    )
    .await;
    api.until_resumed(&session).await;
    let exits: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["role"] == "user" && content(m).starts_with(EXIT_TAG))
        .collect();
    assert_eq!(exits.len(), 1, "{msgs:?}");
    let text = content(exits[0]);
    assert!(text.contains("exited with code 0"), "{text}");
    assert!(text.contains("Last lines:\ndone"), "{text}");
    // Still once after the resume's turn ran.
    let again = api.messages(&session).await;
    assert_eq!(
        again
            .iter()
            .filter(|m| content(m).starts_with(EXIT_TAG))
            .count(),
        1
    );
}
