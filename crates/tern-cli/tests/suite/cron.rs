//! `tern cron` as a real process: jobs managed on the store without a gateway (add, list,
//! show, edit, pause, resume, history, remove; a bad schedule's error; `run` refused
//! clearly), and through a running `tern gateway` with the fake model (a job due in 2 s
//! reaches the model and its history shows the run with its session; a run by hand held at
//! the model, then stopped).

use crate::common;

use std::time::Duration;

use common::{Env, assert_ok, stderr, stdout};
use serde_json::Value;
use tern_fake_model::{Gate, Reply};
use tern_test_support::{PATIENCE, wait_until};

fn json_of(e: &Env, args: &[&str]) -> Value {
    let mut all = vec!["cron"];
    all.extend_from_slice(args);
    all.push("--json");
    let o = e.run(&all);
    assert_ok(&o);
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|err| panic!("tern {all:?}: not JSON ({err}): {}", stdout(&o)))
}

fn cron(e: &Env, args: &[&str]) -> std::process::Output {
    let mut all = vec!["cron"];
    all.extend_from_slice(args);
    e.run(&all)
}

#[test]
fn jobs_are_managed_on_the_store_without_a_gateway() {
    let e = Env::new();

    let o = cron(
        &e,
        &[
            "add",
            "every 2h",
            "check the deploy",
            "--name",
            "deploy",
            "--overlap",
            "queue",
        ],
    );
    assert_ok(&o);
    let id = stdout(&o).trim().to_owned();
    assert_eq!(id.len(), 32, "only the id on stdout: {id:?}");
    assert!(stderr(&o).contains("added job"), "{}", stderr(&o));

    let o = cron(&e, &["list"]);
    assert_ok(&o);
    let table = stdout(&o);
    for word in [id.as_str(), "deploy", "every 2h", "scheduled"] {
        assert!(table.contains(word), "{word} in:\n{table}");
    }
    let list = json_of(&e, &["list"]);
    assert_eq!(list["data"][0]["id"], id.as_str(), "{list}");
    assert_eq!(list["data"][0]["created_by"], "cli");

    // By name, and by a prefix of the id.
    let shown = json_of(&e, &["show", "deploy"]);
    assert_eq!(shown["prompt"], "check the deploy");
    assert_eq!(shown["overlap"], "queue");
    assert_eq!(shown["recent"], serde_json::json!([]));
    let o = cron(&e, &["show", &id[..6]]);
    assert_ok(&o);
    assert!(stdout(&o).contains("check the deploy"), "{}", stdout(&o));

    let edited = json_of(
        &e,
        &[
            "edit",
            "deploy",
            "--prompt",
            "check it again",
            "--timeout",
            "5m",
        ],
    );
    assert_eq!(edited["prompt"], "check it again");
    assert_eq!(edited["timeout_secs"], 300);
    assert_eq!(edited["name"], "deploy");

    assert_eq!(json_of(&e, &["pause", "deploy"])["state"], "paused");
    assert_eq!(json_of(&e, &["resume", "deploy"])["state"], "scheduled");
    assert_eq!(
        json_of(&e, &["history", "deploy"])["data"],
        serde_json::json!([])
    );

    // Nothing runs a job without a gateway: said, not pretended.
    let o = cron(&e, &["run", "deploy"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(
            "no gateway is running on this home: `tern cron run` needs one (start `tern gateway`)"
        ),
        "{}",
        stderr(&o)
    );

    // A bad schedule: what is wrong, a failure status, nothing stored.
    let o = cron(&e, &["add", "0 9 * * 8", "never"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).is_empty(), "no id: {}", stdout(&o));
    assert!(
        stderr(&o).contains("day-of-week 8 is out of range"),
        "{}",
        stderr(&o)
    );
    assert_eq!(json_of(&e, &["list"])["data"].as_array().unwrap().len(), 1);

    // A job named like another's id prefix does not take its place; a prompt's control
    // characters reach the terminal written out, not as escape sequences.
    let o = cron(
        &e,
        &["add", "every 3h", "decoy\u{1b}[2J", "--name", &id[..31]],
    );
    assert_ok(&o);
    let decoy = stdout(&o).trim().to_owned();
    let o = cron(&e, &["show", &id[..31]]);
    assert_ok(&o);
    assert!(stdout(&o).contains("check it again"), "{}", stdout(&o));
    let o = cron(&e, &["show", &decoy]);
    assert_ok(&o);
    assert!(!stdout(&o).contains('\u{1b}'), "{:?}", stdout(&o));
    assert!(stdout(&o).contains("\\u{1b}"), "{}", stdout(&o));
    assert_ok(&cron(&e, &["remove", &decoy]));

    let removed = json_of(&e, &["remove", "deploy"]);
    assert_eq!(removed["deleted"], true);
    let o = cron(&e, &["show", "deploy"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no scheduled job \"deploy\""),
        "{}",
        stderr(&o)
    );
}

/// The job's occurrence `pred` picks, once `tern cron history --json` shows it.
async fn wait_for_occurrence(e: &Env, job: &str, pred: impl Fn(&Value) -> bool) -> Value {
    wait_until(PATIENCE, Duration::from_millis(100), async || {
        let h = json_of(e, &["history", job]);
        h["data"]
            .as_array()
            .and_then(|a| a.iter().find(|o| pred(o)).cloned())
            .ok_or_else(|| format!("waiting for the occurrence in {h}"))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_gateway_the_jobs_run_and_stop_through_it() {
    let e = Env::with_model().await;
    let _gw = e.gateway();
    e.fake().push(Reply::text("pong"));

    let o = cron(&e, &["add", "2s", "ping", "--name", "soon"]);
    assert_ok(&o);
    let id = stdout(&o).trim().to_owned();
    let ran = wait_for_occurrence(&e, "soon", |o| o["state"] == "ran").await;
    assert_eq!(ran["outcome"], "completed", "{ran}");
    assert_eq!(ran["trigger"], "schedule");
    assert!(ran["session_id"].is_string(), "{ran}");
    let asked = e.fake().requests();
    let said = common::last_message(&asked.last().expect("the run asked the model").body);
    assert_eq!(common::content(&said), "ping");
    // The one-shot is retired; the gateway's API answered (it is the job the list shows).
    let list = json_of(&e, &["list"]);
    assert_eq!(list["data"][0]["id"], id.as_str());
    assert_eq!(list["data"][0]["state"], "retired");

    // A run by hand, held at the model, then stopped.
    let gate = Gate::new();
    let before = e.fake().requests().len();
    e.fake().push(Reply::text("too late").held(&gate));
    let started = json_of(&e, &["run", "soon"]);
    assert_eq!(started["occurrence"]["trigger"], "manual", "{started}");
    let manual = started["occurrence"]["id"].clone();
    wait_until(PATIENCE, Duration::from_millis(20), async || {
        if e.fake().requests().len() > before {
            Ok(())
        } else {
            Err("waiting for the manual run's model request".to_owned())
        }
    })
    .await;
    assert_eq!(json_of(&e, &["stop", "soon"])["stopped"], 1);
    let stopped =
        wait_for_occurrence(&e, "soon", |o| o["id"] == manual && o["state"] == "ran").await;
    assert!(
        stopped["outcome"]
            .as_str()
            .is_some_and(|s| s.starts_with("stopped")),
        "{stopped}"
    );
    gate.open();

    let o = cron(&e, &["history", "soon"]);
    assert_ok(&o);
    let text = stdout(&o);
    assert!(
        text.contains("ran: completed") && text.contains("(by hand)"),
        "{text}"
    );
}
