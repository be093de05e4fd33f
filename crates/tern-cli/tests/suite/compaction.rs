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

/// A session of the task and `turns` exchanges of long answers, through `api`.
async fn long_session(api: &Api, turns: usize) -> String {
    let id = api.create_session().await;
    for i in 0..turns {
        api.chat(&id, &format!("question {i}")).await;
    }
    id
}

// Multi-threaded: `e.run` blocks its thread while the fake model answers on another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tern_sessions_compact_with_or_without_a_gateway_and_show_all() {
    let e = Env::with_model().await;
    std::fs::create_dir_all(e.home()).unwrap();
    // A small window, compacted only on demand here.
    std::fs::write(
        e.home().join("config.toml"),
        "[model]\ncontext_length = 32768\n[compaction]\nthreshold_percent = 95\n",
    )
    .unwrap();
    e.fake().set_responder(|body| {
        if is_summary_request(body) {
            return Reply::text("## Goal\nanswer the questions\n## Next steps\ngo on");
        }
        Reply::text(format!("answer: {}", "lorem ipsum ".repeat(600)))
    });
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let id = long_session(&api, 5).await;
    let second = long_session(&api, 5).await;

    // Through the running gateway.
    let o = e.run(&["sessions", "compact", &id]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(said.contains(&format!("compacted session {id}")), "{said}");
    assert!(has_summary(&api.messages(&id).await));
    let o = e.run(&["sessions", "compact", &id]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    drop(gw);

    // Without one: the CLI compacts itself.
    let o = e.run(&["sessions", "compact", &second, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["status"], "compacted", "{v}");
    assert!(v["messages_compacted"].as_u64().unwrap() > 0, "{v}");

    // `show` gives what the model sees and how full the window is; `--all` everything.
    let o = e.run(&["sessions", "show", &second]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.contains("of 32768 tokens ([model] context_length)")
            && text.contains("1 compaction(s)"),
        "{text}"
    );
    assert!(
        text.contains("summary of earlier work (compaction)"),
        "{text}"
    );
    assert!(!text.contains("[compacted]"), "{text}");
    let o = e.run(&["sessions", "show", &second, "--all"]);
    let all = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        all.contains("question 1") && all.contains("[compacted]"),
        "{all}"
    );
    assert!(all.contains(" (manual, "), "{all}");
    assert!(all.contains("## Goal"), "{all}");
    let o = e.run(&["sessions", "show", &second, "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["context"]["context_length"], 32768, "{v}");
    assert_eq!(v["context"]["compactions"], 1, "{v}");

    // The export keeps everything: the compacted messages and the summary.
    let o = e.run(&["sessions", "export", &second]);
    let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.iter().filter(|l| l["object"] == "message").count(),
        10
    );
    assert!(
        lines
            .iter()
            .any(|l| l["object"] == "message" && l["message"]["compacted"] == true)
    );
    assert!(lines.iter().any(|l| l["object"] == "compaction"));

    // An unknown session is a clear error.
    let o = e.run(&["sessions", "compact", "nope"]);
    assert_eq!(o.status.code(), Some(1));
}
