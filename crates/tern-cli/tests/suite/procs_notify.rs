//! `notify_on_complete` and `watch_patterns` through a real `tern gateway`, only the model
//! faked: the model starts `sleep 1; echo done` in the background with `notify_on_complete`,
//! its turn ends, and when the process exits the session is resumed once with the exit code
//! and the last line; a process that ends while its launching turn still runs is told once,
//! after that turn; a watch pattern's match resumes the session while the process runs; a
//! process that ends while the gateway is down (kill -9) is told once after the restart, and
//! not again after a second one; so is one whose exit was marked reported just before the
//! crash (the wait armed at spawn, found by the start-up sweep).

use crate::common;

use std::time::Duration;

use common::{Api, Env, content, last_message, wait_until};
use serde_json::{Value, json};
use tern_fake_model::{FakeModel, Reply};

const EXIT_TAG: &str = "[process exited]";

fn script_model(fake: &FakeModel) {
    fake.set_responder(move |body| {
        let last = last_message(body);
        let text = content(&last).to_owned();
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

/// The session's messages once the last one is `text` (the model's answer to a resume).
async fn until_last(api: &Api, session: &str, text: &str) -> Vec<Value> {
    wait_until(
        Duration::from_secs(60),
        Duration::from_millis(100),
        async || {
            let msgs = api.messages(session).await;
            if msgs.last().is_some_and(|m| content(m) == text) {
                Ok(msgs)
            } else {
                Err(format!("not resumed with {text:?}: {msgs:?}"))
            }
        },
    )
    .await
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

const MATCH_TAG: &str = "[process output matched]";

#[tokio::test]
async fn an_exit_during_the_launching_turn_is_told_once_after_that_turn() {
    let e = Env::with_model().await;
    e.fake().set_responder(move |body| {
        let last = last_message(body);
        let text = content(&last).to_owned();
        match (last["role"].as_str(), last["tool_call_id"].as_str()) {
            (Some("user"), _) if text == "start" => Reply::tool_call(
                "call_start",
                "terminal",
                json!({"command": "echo quick", "background": true, "notify_on_complete": true})
                    .to_string(),
            ),
            // The turn goes on until the process has ended: it waits for it.
            (Some("tool"), Some("call_start")) => {
                let started: Value = serde_json::from_str(&text).unwrap_or_default();
                Reply::tool_call(
                    "call_wait",
                    "process",
                    json!({"action": "wait", "session_id": started["session_id"], "timeout": 60})
                        .to_string(),
                )
            }
            (Some("tool"), Some("call_wait")) => Reply::text("launched"),
            (Some("user"), _) if text.starts_with(EXIT_TAG) => Reply::text("noted"),
            _ => Reply::text("?"),
        }
    });
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let session = api.create_session().await;
    let v = api.chat(&session, "start").await;
    assert_eq!(v["message"]["content"], "launched", "{v}");
    until_last(&api, &session, "noted").await;
    api.until_resumed(&session).await;
    // Read once everything has settled: a second notification would be there by now.
    let msgs = api.messages(&session).await;
    assert_eq!(
        msgs.last().map(content),
        Some("noted"),
        "nothing after the resume: {msgs:?}"
    );
    // The process had ended inside the launching turn: the turn's wait saw its exit.
    let waited = msgs
        .iter()
        .find(|m| m["tool_call_id"] == "call_wait")
        .expect("the launching turn waited for the process");
    let waited: Value = serde_json::from_str(content(waited)).unwrap();
    assert_eq!(
        (waited["state"].as_str(), waited["timed_out"].as_bool()),
        (Some("exited"), Some(false)),
        "{waited}"
    );
    let texts: Vec<String> = msgs.iter().map(|m| content(m).to_owned()).collect();
    let launched = texts.iter().position(|t| t == "launched").unwrap();
    let exits: Vec<usize> = (0..texts.len())
        .filter(|i| texts[*i].starts_with(EXIT_TAG))
        .collect();
    assert_eq!(exits.len(), 1, "told once: {texts:?}");
    assert!(
        exits[0] > launched,
        "told after the launching turn, not inside it: {texts:?}"
    );
    assert!(texts[exits[0]].contains("quick"), "{texts:?}");
}

#[tokio::test]
async fn a_watch_pattern_match_resumes_the_session_while_the_process_runs() {
    let e = Env::with_model().await;
    e.fake().set_responder(move |body| {
        let last = last_message(body);
        let text = content(&last).to_owned();
        match last["role"].as_str() {
            Some("user") if text == "serve" => Reply::tool_call(
                "call_serve",
                "terminal",
                json!({
                    "command": "sleep 0.5; echo booting; echo 'server READY on 9000'; sleep 120",
                    "background": true,
                    "watch_patterns": ["READY on \\d+"],
                })
                .to_string(),
            ),
            Some("user") if text.starts_with(MATCH_TAG) => Reply::text("it is up"),
            Some("tool") => Reply::text("launched"),
            _ => Reply::text("?"),
        }
    });
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let session = api.create_session().await;
    let v = api.chat(&session, "serve").await;
    assert_eq!(v["message"]["content"], "launched", "{v}");
    let msgs = until_last(&api, &session, "it is up").await;
    let told: Vec<&str> = msgs
        .iter()
        .map(content)
        .filter(|t| t.starts_with(MATCH_TAG))
        .collect();
    assert_eq!(told.len(), 1, "{msgs:?}");
    assert!(told[0].contains("server READY on 9000"), "{}", told[0]);
    assert!(told[0].contains("still running"), "{}", told[0]);
    let shown: Vec<&str> = told[0]
        .lines()
        .filter(|l| l.starts_with('[') && !l.starts_with(MATCH_TAG))
        .collect();
    assert_eq!(
        shown,
        [r"[READY on \d+] server READY on 9000"],
        "only matching lines: {}",
        told[0]
    );
    // The process still runs; deleting the session ends it.
    let procs = e.home().join("procs");
    assert_eq!(std::fs::read_dir(&procs).unwrap().count(), 1);
    api.delete(&session).await;
}

/// The one process directory under `$TERN_HOME/procs`.
fn process_dir(e: &Env) -> std::path::PathBuf {
    let mut dirs: Vec<_> = std::fs::read_dir(e.home().join("procs"))
        .unwrap()
        .map(|d| d.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.remove(0)
}

#[tokio::test]
async fn an_exit_while_the_gateway_is_down_is_told_once_after_the_restart() {
    exit_while_the_gateway_is_down(false).await;
}

/// The gateway died after recording that the exit was reported (`reported`) and before the
/// wait was made ready: no exit event comes again, and the start-up sweep finds the wait
/// armed at spawn still pending.
#[tokio::test]
async fn an_exit_reported_just_before_a_crash_is_told_by_the_sweep() {
    exit_while_the_gateway_is_down(true).await;
}

async fn exit_while_the_gateway_is_down(reported_before_the_crash: bool) {
    let e = Env::with_model().await;
    let go = e.work().join("go");
    let command = format!(
        "echo waiting; while [ ! -e '{}' ]; do sleep 0.05; done; echo finished; exit 3",
        go.display()
    );
    e.fake().set_responder(move |body| {
        let last = last_message(body);
        let text = content(&last).to_owned();
        match last["role"].as_str() {
            Some("user") if text == "start" => Reply::tool_call(
                "call_start",
                "terminal",
                json!({"command": command, "background": true, "notify_on_complete": true})
                    .to_string(),
            ),
            Some("user") if text.starts_with(EXIT_TAG) => Reply::text("noted"),
            Some("tool") => Reply::text("launched"),
            _ => Reply::text("?"),
        }
    });
    let mut gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let session = api.create_session().await;
    let v = api.chat(&session, "start").await;
    assert_eq!(v["message"]["content"], "launched", "{v}");

    // kill -9 the gateway; the process ends while no gateway runs.
    gw.child.kill().unwrap();
    gw.child.wait().unwrap();
    drop(gw);
    let dir = process_dir(&e);
    std::fs::write(&go, "").unwrap();
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        async || {
            if dir.join("exit.json").exists() {
                Ok(())
            } else {
                Err("the process has not ended".to_owned())
            }
        },
    )
    .await;
    if reported_before_the_crash {
        std::fs::write(dir.join("reported"), "").unwrap();
    }

    let told = |msgs: &[Value]| {
        msgs.iter()
            .filter(|m| m["role"] == "user" && content(m).starts_with(EXIT_TAG))
            .map(|m| content(m).to_owned())
            .collect::<Vec<_>>()
    };
    let mut gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let msgs = until_last(&api, &session, "noted").await;
    let exits = told(&msgs);
    assert_eq!(exits.len(), 1, "{msgs:?}");
    assert!(exits[0].contains("exited with code 3"), "{}", exits[0]);
    assert!(exits[0].contains("finished"), "{}", exits[0]);

    // Another kill -9 and restart tell it no more.
    gw.child.kill().unwrap();
    gw.child.wait().unwrap();
    drop(gw);
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    api.until_resumed(&session).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = api.messages(&session).await;
    assert_eq!(told(&after).len(), 1, "{after:?}");
    assert_eq!(after.len(), msgs.len(), "{after:?}");
}
