//! The scheduled jobs' API (`/api/cron/jobs…`) on a gateway booted as `tern gateway` boots
//! it, with a hand-moved clock and the fake model: a job's whole life (create, list, show,
//! patch, pause, resume, a scheduled run that reaches the model in a `cron` session, a run
//! by hand held at the model and stopped, history, delete), and what is refused (bad
//! schedules, unknown fields and toolsets, other keys' jobs, no key, scripts from agent keys,
//! runs with the scheduler off).

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use tern_cron::ManualClock;
use tern_fake_model::{FakeModel, Gate, Reply};
use tern_gateway::boot::GatewayHandle;
use tern_test_support::{TempHome, eventually};

use crate::common::{self, home_for, status_json};

const KEY: &str = "cron-api-test-server-key-0123456789";

/// A fixed start, so the schedule's times are known.
fn start_time() -> Timestamp {
    "2026-11-26T09:00:00Z".parse().unwrap()
}

async fn boot(fake: &FakeModel, extra: &str, clock: Arc<ManualClock>) -> (TempHome, GatewayHandle) {
    let home = home_for(fake, extra);
    let handle = common::builder(&home)
        .server_key(Some(KEY.into()))
        .clock(clock)
        .start()
        .await
        .unwrap()
        .handle;
    (home, handle)
}

/// One request with `key` (none: no `Authorization`); the status and the JSON body.
async fn call(method: &str, url: &str, key: Option<&str>, body: Option<Value>) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut req = client.request(method.parse().unwrap(), url);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    status_json(req.send().await.unwrap()).await
}

/// The error envelope's code and message.
fn error_of(body: &Value) -> (&str, &str) {
    (
        body["error"]["code"].as_str().unwrap_or_default(),
        body["error"]["message"].as_str().unwrap_or_default(),
    )
}

async fn history(url: &str, id: &str) -> Vec<Value> {
    let (status, h) = call(
        "GET",
        &format!("{url}/api/cron/jobs/{id}/history"),
        Some(KEY),
        None,
    )
    .await;
    assert_eq!(status, 200, "{h}");
    h["data"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_job_lives_through_the_api_from_creation_to_deletion() {
    let fake = FakeModel::start().await.unwrap();
    let clock = Arc::new(ManualClock::new(start_time()));
    let (_home, handle) = boot(&fake, "", clock.clone()).await;
    let url = handle.url();
    let jobs = format!("{url}/api/cron/jobs");

    let (status, job) = call(
        "POST",
        &jobs,
        Some(KEY),
        Some(json!({"schedule": "every 1h", "prompt": "ping", "name": "pinger"})),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_owned();
    assert_eq!(job["created_by"], "api");
    assert_eq!(job["state"], "scheduled");
    assert_eq!(job["schedule"], "every 1h");
    assert_eq!(job["next_run_at"], "2026-11-26T10:00:00Z", "{job}");

    let (status, list) = call("GET", &jobs, Some(KEY), None).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["object"], "list");
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["id"].as_str())
        .collect();
    assert_eq!(ids, [id.as_str()]);

    let (status, shown) = call("GET", &format!("{jobs}/{id}"), Some(KEY), None).await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["name"], "pinger");
    assert_eq!(shown["running"], json!([]));
    assert_eq!(shown["recent"], json!([]));

    let (status, patched) = call(
        "PATCH",
        &format!("{jobs}/{id}"),
        Some(KEY),
        Some(json!({"prompt": "ping again", "overlap": "queue"})),
    )
    .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["prompt"], "ping again");
    assert_eq!(patched["overlap"], "queue");
    assert_eq!(patched["name"], "pinger", "fields not given stay");

    let (status, paused) = call("POST", &format!("{jobs}/{id}/pause"), Some(KEY), None).await;
    assert_eq!(status, 200, "{paused}");
    assert_eq!(paused["state"], "paused");
    assert_eq!(paused["next_run_at"], Value::Null);
    let (status, resumed) = call("POST", &format!("{jobs}/{id}/resume"), Some(KEY), None).await;
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(resumed["state"], "scheduled");
    assert_eq!(resumed["next_run_at"], "2026-11-26T10:00:00Z");

    // The hour passes: the scheduler runs the occurrence, which reaches the model.
    fake.push(Reply::text("pong"));
    clock.advance(SignedDuration::from_hours(1));
    let ran = eventually("the scheduled run to be recorded `ran`", async || {
        history(&url, &id)
            .await
            .into_iter()
            .find(|o| o["state"] == "ran")
    })
    .await;
    assert_eq!(ran["scheduled_at"], "2026-11-26T10:00:00Z", "{ran}");
    assert_eq!(ran["trigger"], "schedule");
    assert_eq!(ran["outcome"], "completed", "{ran}");
    assert_eq!(ran["output"], "pong");
    let asked = fake.requests();
    let last = asked.last().expect("the run asked the model");
    let said = last.messages().last().cloned().unwrap_or_default();
    assert_eq!(said["content"], "ping again", "the run's prompt: {said}");
    let session = ran["session_id"].as_str().expect("the run's session");
    let (status, s) = call(
        "GET",
        &format!("{url}/api/sessions/{session}"),
        Some(KEY),
        None,
    )
    .await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["session"]["source"], "cron", "{s}");

    // A run by hand, held at the model, is stopped.
    let gate = Gate::new();
    let before = fake.requests().len();
    fake.push(Reply::text("too late").held(&gate));
    let (status, started) = call("POST", &format!("{jobs}/{id}/run"), Some(KEY), None).await;
    assert_eq!(status, 202, "{started}");
    assert_eq!(started["job"]["id"], id.as_str());
    assert_eq!(started["occurrence"]["state"], "running");
    assert_eq!(started["occurrence"]["trigger"], "manual");
    let manual = started["occurrence"]["id"].clone();
    eventually("the manual run's model request", async || {
        (fake.requests().len() > before).then_some(())
    })
    .await;
    let (status, shown) = call("GET", &format!("{jobs}/{id}"), Some(KEY), None).await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["running"][0]["id"], manual, "{shown}");
    let (status, stopped) = call("POST", &format!("{jobs}/{id}/stop"), Some(KEY), None).await;
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(stopped["stopped"], 1);
    let ended = eventually("the stopped run to be recorded", async || {
        history(&url, &id)
            .await
            .into_iter()
            .find(|o| o["id"] == manual && o["state"] == "ran")
    })
    .await;
    assert!(
        ended["outcome"].as_str().unwrap().starts_with("stopped"),
        "{ended}"
    );
    gate.open();

    // Newest first; the limit is honoured and checked.
    let all = history(&url, &id).await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[0]["id"], manual);
    let (status, one) = call(
        "GET",
        &format!("{jobs}/{id}/history?limit=1"),
        Some(KEY),
        None,
    )
    .await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["data"].as_array().unwrap().len(), 1);
    let (status, bad) = call(
        "GET",
        &format!("{jobs}/{id}/history?limit=0"),
        Some(KEY),
        None,
    )
    .await;
    assert_eq!((status, error_of(&bad).0), (400, "invalid_limit"), "{bad}");

    let (status, deleted) = call("DELETE", &format!("{jobs}/{id}"), Some(KEY), None).await;
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted, json!({"id": id, "deleted": true}));
    let (status, gone) = call("GET", &format!("{jobs}/{id}"), Some(KEY), None).await;
    assert_eq!((status, error_of(&gone).0), (404, "cron_job_not_found"));
    // Its history stays in the store.
    let kept = handle.gateway().store.cron_history(&id, 10).await.unwrap();
    assert_eq!(kept.len(), 2);
    handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn bad_input_other_keys_and_a_stopped_scheduler_are_refused() {
    let fake = FakeModel::start().await.unwrap();
    let clock = Arc::new(ManualClock::new(start_time()));
    let (_home, handle) = boot(&fake, "[cron]\nenabled = false\n", clock).await;
    let url = handle.url();
    let jobs = format!("{url}/api/cron/jobs");
    let store = handle.gateway().store.clone();
    let alice = tern_gateway::auth::create_key(&store, "alice")
        .await
        .unwrap();
    let bob = tern_gateway::auth::create_key(&store, "bob").await.unwrap();

    let (status, body) = call("GET", &jobs, None, None).await;
    assert_eq!((status, error_of(&body).0), (401, "invalid_api_key"));

    // A bad schedule says what is wrong; nothing is stored.
    let (status, body) = call(
        "POST",
        &jobs,
        Some(KEY),
        Some(json!({"schedule": "0 9 * * 8", "prompt": "x"})),
    )
    .await;
    let (code, message) = error_of(&body);
    assert_eq!((status, code), (400, "invalid_job"), "{body}");
    assert!(message.contains("day-of-week 8"), "{message}");
    let (status, unknown) = call(
        "POST",
        &jobs,
        Some(KEY),
        Some(json!({"schedule": "1h", "prompt": "x", "colour": "red"})),
    )
    .await;
    let (code, message) = error_of(&unknown);
    assert_eq!((status, code), (400, "invalid_job"), "{unknown}");
    assert!(message.contains("colour"), "{message}");
    let (status, toolset) = call(
        "POST",
        &jobs,
        Some(KEY),
        Some(json!({"schedule": "1h", "prompt": "x", "toolsets": ["file", "warp-drive"]})),
    )
    .await;
    let (code, message) = error_of(&toolset);
    assert_eq!((status, code), (400, "invalid_job"), "{toolset}");
    assert!(
        message.contains("\"warp-drive\"") && message.contains("terminal"),
        "names the unknown one and the allowed ones: {message}"
    );
    assert!(store.list_cron_jobs(None).await.unwrap().is_empty());

    // An agent key may not create a script job.
    let (status, body) = call(
        "POST",
        &jobs,
        Some(&alice),
        Some(json!({"schedule": "1h", "script": "echo hi"})),
    )
    .await;
    assert_eq!((status, error_of(&body).0), (403, "forbidden"), "{body}");

    // Alice's job is hers: bob gets 404 for it and does not see it; admin does.
    let (status, job) = call(
        "POST",
        &jobs,
        Some(&alice),
        Some(json!({"schedule": "every 2h", "prompt": "alice's"})),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_owned();
    for (method, path, body) in [
        ("GET", format!("{jobs}/{id}"), None),
        (
            "PATCH",
            format!("{jobs}/{id}"),
            Some(json!({"prompt": "bob's"})),
        ),
        ("POST", format!("{jobs}/{id}/pause"), None),
        ("GET", format!("{jobs}/{id}/history"), None),
        ("DELETE", format!("{jobs}/{id}"), None),
    ] {
        let (status, body) = call(method, &path, Some(&bob), body).await;
        assert_eq!(
            (status, error_of(&body).0),
            (404, "cron_job_not_found"),
            "{method} {path}: {body}"
        );
    }
    let (_, bobs) = call("GET", &jobs, Some(&bob), None).await;
    assert_eq!(bobs["data"], json!([]));
    let (_, all) = call("GET", &jobs, Some(KEY), None).await;
    assert_eq!(all["data"][0]["id"], id.as_str());
    assert_eq!(all["data"][0]["prompt"], "alice's", "bob changed nothing");

    // Bob may not aim a job at alice's session.
    let (status, s) = call(
        "POST",
        &format!("{url}/api/sessions"),
        Some(&alice),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 201, "{s}");
    let sid = s["session"]["id"].as_str().unwrap();
    let (status, body) = call(
        "POST",
        &jobs,
        Some(&bob),
        Some(json!({"schedule": "1h", "prompt": "x", "session": sid})),
    )
    .await;
    assert_eq!((status, error_of(&body).0), (400, "invalid_job"), "{body}");
    let (status, body) = call(
        "POST",
        &jobs,
        Some(&alice),
        Some(json!({"schedule": "1h", "prompt": "x", "session": sid})),
    )
    .await;
    assert_eq!(status, 201, "alice may use her own session: {body}");
    assert_eq!(body["session"], sid);

    // With `[cron] enabled = false` nothing would run or stop it.
    for action in ["run", "stop"] {
        let (status, body) =
            call("POST", &format!("{jobs}/{id}/{action}"), Some(&alice), None).await;
        assert_eq!(
            (status, error_of(&body).0),
            (503, "cron_disabled"),
            "{action}: {body}"
        );
    }
    handle.shutdown().await.unwrap();
}

/// What an agent key may not make a job do: post to a chat or a webhook of its choosing,
/// repeat more than once a minute, own more than 100 jobs; and what its jobs may no longer do
/// once made: run in a session whose id another key took after the first was deleted, or run
/// at all after the key is revoked (each such job is paused, its run `failed`, saying why).
#[tokio::test]
async fn an_agent_keys_jobs_stay_within_what_the_key_may_do() {
    let fake = FakeModel::start().await.unwrap();
    fake.set_responder(|_| Reply::text("done"));
    let clock = Arc::new(ManualClock::new(start_time()));
    let (_home, handle) = boot(&fake, "", clock.clone()).await;
    let url = handle.url();
    let jobs = format!("{url}/api/cron/jobs");
    let gw = handle.gateway().clone();
    let store = gw.store.clone();
    let alice = tern_gateway::auth::create_key(&store, "alice")
        .await
        .unwrap();
    let bob = tern_gateway::auth::create_key(&store, "bob").await.unwrap();

    for deliver in ["telegram:12345", "https://169.254.169.254/latest", "tg:1:2"] {
        let (status, body) = call(
            "POST",
            &jobs,
            Some(&alice),
            Some(json!({"schedule": "1h", "prompt": "x", "deliver": deliver})),
        )
        .await;
        assert_eq!(
            (status, error_of(&body).0),
            (403, "forbidden"),
            "{deliver}: {body}"
        );
    }
    let (status, body) = call(
        "POST",
        &jobs,
        Some(&alice),
        Some(json!({"schedule": "every 10s", "prompt": "x"})),
    )
    .await;
    assert_eq!((status, error_of(&body).0), (400, "invalid_job"), "{body}");
    assert!(error_of(&body).1.contains("once a minute"), "{body}");
    // The admin key may.
    let (status, body) = call(
        "POST",
        &jobs,
        Some(KEY),
        Some(json!({"schedule": "every 10s", "prompt": "x", "paused": true})),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    // Alice's job in her session `daily`; the session deleted and its id taken by bob.
    let (status, s) = call(
        "POST",
        &format!("{url}/api/sessions"),
        Some(&alice),
        Some(json!({"id": "daily"})),
    )
    .await;
    assert_eq!(status, 201, "{s}");
    let (status, job) = call(
        "POST",
        &jobs,
        Some(&alice),
        Some(json!({"schedule": "every 1h", "prompt": "repeat this conversation", "session": "daily"})),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_owned();
    let (status, _) = call(
        "DELETE",
        &format!("{url}/api/sessions/daily"),
        Some(&alice),
        None,
    )
    .await;
    assert!(status < 300, "deleted: {status}");
    let (status, _) = call(
        "POST",
        &format!("{url}/api/sessions"),
        Some(&bob),
        Some(json!({"id": "daily"})),
    )
    .await;
    assert_eq!(status, 201);
    clock.set(start_time() + SignedDuration::from_hours(1));
    gw.cron().scheduler.settled().await;
    eventually("alice's run refused", async || {
        let h = history(&url, &id).await;
        h.first()
            .filter(|o| o["state"] == "ran")
            .map(|o| o["outcome"].as_str().unwrap_or_default().to_owned())
    })
    .await;
    let h = history(&url, &id).await;
    assert!(
        h[0]["outcome"]
            .as_str()
            .unwrap()
            .contains("is not the job's key's"),
        "{h:?}"
    );
    assert!(
        store.messages("daily").await.unwrap().is_empty(),
        "bob's session untouched"
    );
    assert!(fake.requests().is_empty(), "nothing ran");
    let (_, j) = call("GET", &format!("{jobs}/{id}"), Some(&alice), None).await;
    assert_eq!(j["state"], "paused", "{j}");

    // A revoked key's job: paused at its next run, nothing run.
    let (status, job) = call(
        "POST",
        &jobs,
        Some(&alice),
        Some(json!({"schedule": "every 1h", "prompt": "still here?"})),
    )
    .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_owned();
    assert!(store.revoke_key("alice").await.unwrap());
    clock.set(start_time() + SignedDuration::from_hours(2));
    gw.cron().scheduler.settled().await;
    let job = eventually("the revoked key's job paused", async || {
        store.cron_job(&id).await.unwrap().filter(|j| !j.enabled)
    })
    .await;
    assert!(!job.enabled);
    assert!(fake.requests().is_empty(), "nothing ran");

    // At most 100 jobs per agent key.
    for i in 0..100 {
        let (status, body) = call(
            "POST",
            &jobs,
            Some(&bob),
            Some(json!({"schedule": "every 1h", "prompt": format!("job {i}"), "paused": true})),
        )
        .await;
        assert_eq!(status, 201, "{i}: {body}");
    }
    let (status, body) = call(
        "POST",
        &jobs,
        Some(&bob),
        Some(json!({"schedule": "every 1h", "prompt": "one too many"})),
    )
    .await;
    assert_eq!(
        (status, error_of(&body).0),
        (403, "too_many_jobs"),
        "{body}"
    );
    handle.shutdown().await.unwrap();
}
