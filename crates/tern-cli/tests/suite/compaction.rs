//! Compaction in a real `tern gateway` process: a `kill -9` while the model writes the
//! summary leaves the old transcript whole, and the session goes on after a restart.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use serde_json::{Value, json};
use tern_agent::compact::{COMPACTOR_MARKER, SUMMARY_HEADER};
use tern_fake_model::{Gate, Reply};

use crate::common::{Api, Env, content, wait_until};

fn is_summary_request(body: &Value) -> bool {
    content(&body["messages"][0]).starts_with(COMPACTOR_MARKER)
}

fn has_summary(msgs: &[Value]) -> bool {
    msgs.iter().any(|m| content(m).starts_with(SUMMARY_HEADER))
}

/// What the session's transcript says, message by message.
fn shape(msgs: &[Value]) -> Vec<(String, String)> {
    msgs.iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                content(m).to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn kill_9_while_the_summary_is_written_leaves_the_old_transcript_and_the_session_goes_on() {
    let e = Env::with_model().await;
    let gate = Gate::new();
    // The model refuses this many of the agent's next requests as over its window.
    let refuse = Arc::new(AtomicUsize::new(0));
    {
        let (gate, refuse) = (gate.clone(), refuse.clone());
        e.fake().set_responder(move |body| {
            if is_summary_request(body) {
                return Reply::text("## Goal\nanswer the numbered messages\n## Next steps\ngo on")
                    .held(&gate);
            }
            if refuse
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Reply::context_overflow(4096, 5000);
            }
            let n = body["messages"].as_array().map_or(0, Vec::len);
            Reply::text(format!("answer to request of {n} messages"))
        });
    }
    let mut gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let id = api.create_session().await;
    for i in 0..6 {
        api.chat(&id, &format!("message {i}: {}", "words ".repeat(300)))
            .await;
    }
    let before = api.messages(&id).await;
    assert_eq!(before.len(), 12);

    // The next call is refused as too long: the gateway compacts, and the summary request
    // is held at the gate while the process is killed.
    refuse.store(1, SeqCst);
    let chat = {
        let (url, key) = (api.url.clone(), api.key.clone());
        let id = id.clone();
        tokio::spawn(async move {
            // The connection dies with the gateway; its error is expected.
            let _ = reqwest::Client::new()
                .post(format!("{url}/api/sessions/{id}/chat"))
                .bearer_auth(key)
                .json(&json!({"message": "the message during the crash"}))
                .send()
                .await;
        })
    };
    let fake = e.fake();
    wait_until(
        Duration::from_secs(60),
        Duration::from_millis(20),
        async || {
            let reqs = fake.requests();
            if reqs.iter().any(|r| is_summary_request(&r.body)) {
                Ok(())
            } else {
                Err(format!(
                    "no summary request yet among {} requests",
                    reqs.len()
                ))
            }
        },
    )
    .await;
    gw.child.kill().unwrap(); // SIGKILL
    let status = gw.child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    chat.await.unwrap();
    drop(gw);

    // Restarted: the old transcript is whole (plus the input committed before the model
    // call), nothing of the compaction was applied.
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let after = api.messages(&id).await;
    assert_eq!(shape(&after[..12]), shape(&before));
    assert_eq!(after.len(), 13, "{after:#?}");
    assert_eq!(content(&after[12]), "the message during the crash");
    assert!(!has_summary(&after));
    assert_eq!(api.session(&id).await["status"], "idle");

    // The next turn works; refused once more, it compacts, now that the model answers.
    gate.open();
    refuse.store(1, SeqCst);
    let v = api.chat(&id, "are you still there?").await;
    assert!(v.to_string().contains("answer to request of"), "{v}");
    let now = api.messages(&id).await;
    assert!(has_summary(&now), "{now:#?}");
    assert!(
        content(&now[0]).starts_with("message 0: "),
        "the task is kept first"
    );
    assert_eq!(
        content(now.last().unwrap()).split(' ').next(),
        Some("answer")
    );
    // Every request the model got was well formed (the fake model checks each on drop).
    let last = fake.requests().pop().unwrap();
    assert!(has_summary(last.messages()));
}
