//! Scheduled runs in a gateway booted from config, on a `ManualClock`: an agent job whose run
//! answers in a Telegram chat (the fake Bot API) without the `cron` toolset, and a script job
//! whose output lands in its session.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tern_cron::jobs::{self, Creator, JobFields};
use tern_cron::{Clock, ManualClock};
use tern_fake_model::{FakeModel, Reply};
use tern_store::cron::{CronCreator, OccurrenceState};
use tern_test_support::telegram::FakeTelegram;

use crate::common::{self, home_for};

const OWNER: i64 = 4242;

fn cli() -> Creator {
    Creator {
        created_by: CronCreator::Cli,
        owner_key: None,
        session: None,
    }
}

/// A gateway on `home` reading a clock the test moves.
async fn boot(
    home: &tern_test_support::TempHome,
) -> (Arc<ManualClock>, tern_gateway::boot::GatewayHandle) {
    let clock = Arc::new(ManualClock::new(Timestamp::now()));
    let handle = common::builder(home)
        .clock(clock.clone())
        .start()
        .await
        .unwrap()
        .handle;
    (clock, handle)
}

async fn until<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_delivering_to_a_chat_answers_there_without_the_cron_toolset() {
    let tg = FakeTelegram::start().await;
    let model = FakeModel::start().await.unwrap();
    model.set_responder(|_| Reply::text("the deploy finished at 09:58"));
    let home = home_for(
        &model,
        &format!(
            "[cron]\nallow_agent_scheduling = true\n\n\
             [[channels.telegram]]\nname = \"tg\"\ntoken = \"{}\"\napi_url = \"{}\"\n\
             allowed_users = [{OWNER}]\nprogress = \"off\"\npoll_timeout = \"2s\"\n",
            tg.token(),
            tg.api_url()
        ),
    );
    let (clock, handle) = boot(&home).await;
    let gw = handle.gateway();
    let cron = gw.cron();
    let fields = JobFields {
        schedule: Some("2h".into()),
        prompt: Some("check whether the deploy finished".into()),
        deliver: Some(format!("tg:{OWNER}")),
        ..Default::default()
    };
    let job = jobs::create(gw.agent.store(), &fields, &cli(), clock.now(), &cron.tz)
        .await
        .unwrap();
    cron.scheduler.wake();
    clock.advance(SignedDuration::from_mins(119));
    cron.scheduler.settled().await;
    assert!(model.requests().is_empty(), "ran early");
    clock.advance(SignedDuration::from_mins(1));
    cron.scheduler.settled().await;
    let req = model
        .wait_requests(1, Duration::from_secs(20))
        .await
        .expect("the run asks the model")[0]
        .clone();
    let tools: Vec<String> = req.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect();
    assert!(!tools.is_empty(), "the run has tools");
    assert!(
        !tools.iter().any(|t| t == "cronjob"),
        "a run may not schedule: {tools:?}"
    );
    until("the answer in the chat", async || {
        tg.sent()
            .iter()
            .any(|m| {
                m.chat_id == OWNER
                    && m.text
                        .as_deref()
                        .unwrap_or_default()
                        .contains("deploy finished")
            })
            .then_some(())
    })
    .await;
    let store = gw.agent.store();
    let o = until("the run recorded", async || {
        let h = store.cron_history(&job.id, 10).await.unwrap();
        h.into_iter().find(|o| o.state == OccurrenceState::Ran)
    })
    .await;
    assert_eq!(o.outcome.as_deref(), Some("completed"));
    let session = store
        .get_session(o.session_id.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(session.source, "cron");
    let j = store.cron_job(&job.id).await.unwrap().unwrap();
    assert!(j.retired_at.is_some(), "a one-shot retires");
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_run_appends_its_output_to_its_session_and_records_its_exit() {
    let model = FakeModel::start().await.unwrap();
    let home = home_for(&model, "");
    let (clock, handle) = boot(&home).await;
    let gw = handle.gateway();
    let cron = gw.cron();
    let store = gw.agent.store();
    let ok = JobFields {
        schedule: Some("every 1m".into()),
        script: Some("echo hello-from-cron".into()),
        name: Some("hello".into()),
        ..Default::default()
    };
    let failing = JobFields {
        schedule: Some("1m".into()),
        script: Some("echo broken >&2; exit 3".into()),
        ..Default::default()
    };
    let ok = jobs::create(store, &ok, &cli(), clock.now(), &cron.tz)
        .await
        .unwrap();
    let failing = jobs::create(store, &failing, &cli(), clock.now(), &cron.tz)
        .await
        .unwrap();
    cron.scheduler.wake();
    clock.advance(SignedDuration::from_secs(61));
    cron.scheduler.settled().await;
    let done = |id: String| async move {
        until("the script's run recorded", async || {
            let h = store.cron_history(&id, 10).await.unwrap();
            h.into_iter().find(|o| o.state == OccurrenceState::Ran)
        })
        .await
    };
    let o = done(ok.id.clone()).await;
    assert_eq!(o.outcome.as_deref(), Some("exit 0"));
    assert!(
        o.output
            .as_deref()
            .unwrap_or_default()
            .contains("hello-from-cron")
    );
    let msgs = store
        .messages(o.session_id.as_deref().unwrap())
        .await
        .unwrap();
    let last = msgs.last().unwrap();
    assert_eq!(last.role.as_str(), "assistant");
    assert!(
        last.content
            .as_deref()
            .unwrap_or_default()
            .contains("hello-from-cron")
    );
    let f = done(failing.id.clone()).await;
    assert_eq!(f.outcome.as_deref(), Some("failed: exit 3"));
    assert!(f.output.as_deref().unwrap_or_default().contains("broken"));
    assert!(model.requests().is_empty(), "a script job asks no model");
    handle.shutdown().await.unwrap();
}

const DECISION_TAG: &str = "[inbox decision]";

fn last_user_text(body: &serde_json::Value) -> (String, String) {
    let last = body["messages"]
        .as_array()
        .and_then(|a| a.last())
        .cloned()
        .unwrap_or_default();
    (
        last["role"].as_str().unwrap_or_default().to_owned(),
        last["content"].as_str().unwrap_or_default().to_owned(),
    )
}

/// The model of a run that asks for approval, and answers once the decision is in.
fn asks_approval(body: &serde_json::Value) -> Reply {
    let (role, text) = last_user_text(body);
    match role.as_str() {
        "user" if text.starts_with(DECISION_TAG) => Reply::text("Rotated the keys."),
        "user" => Reply::tool_call(
            "c1",
            "request_approval",
            serde_json::json!({"summary": "Rotate the API keys?"}).to_string(),
        ),
        _ => Reply::text("I asked for approval."),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_asks_a_human_waits_durably_and_its_session_resumes_on_the_decision() {
    let model = FakeModel::start().await.unwrap();
    model.set_responder(asks_approval);
    let home = home_for(&model, "");
    common::add_reviewer(&home, "ann").await;
    let (clock, handle) = boot(&home).await;
    let gw = handle.gateway();
    let (cron, store) = (gw.cron(), gw.agent.store());
    let fields = JobFields {
        schedule: Some("10m".into()),
        prompt: Some("rotate the keys if allowed".into()),
        ..Default::default()
    };
    let job = jobs::create(store, &fields, &cli(), clock.now(), &cron.tz)
        .await
        .unwrap();
    cron.scheduler.wake();
    clock.advance(SignedDuration::from_mins(10));
    cron.scheduler.settled().await;
    let o = until("the run recorded as waiting", async || {
        let h = store.cron_history(&job.id, 10).await.unwrap();
        h.into_iter().find(|o| o.state == OccurrenceState::Ran)
    })
    .await;
    assert!(
        o.outcome
            .as_deref()
            .unwrap_or_default()
            .starts_with("waiting"),
        "{o:?}"
    );
    let session = o.session_id.clone().unwrap();
    assert!(store.has_open_waits(&session).await.unwrap());
    let inbox = gw.inbox.clone();
    let list = inbox
        .list_requests(&tern_inbox::review::RequestFilter {
            status: Some(tern_inbox::review::RequestStatus::Pending),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    inbox
        .decide_approval(
            &list.items[0].id,
            tern_inbox::Outcome::new(tern_inbox::OutcomeType::Approve),
            "ann",
        )
        .await
        .unwrap();
    until("the session resumed and answered", async || {
        let msgs = store.messages(&session).await.unwrap();
        msgs.iter()
            .any(|m| m.content.as_deref() == Some("Rotated the keys."))
            .then_some(())
    })
    .await;
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_a_busy_session_queues_behind_its_running_turn() {
    let model = FakeModel::start().await.unwrap();
    let gate = tern_fake_model::Gate::new();
    let held = gate.clone();
    model.set_responder(move |body| {
        let (_, text) = last_user_text(body);
        if text == "a long task" {
            Reply::text("long task done").held(&held)
        } else {
            Reply::text(format!("answer to {text}"))
        }
    });
    let home = home_for(&model, "");
    let (clock, handle) = boot(&home).await;
    let gw = handle.gateway().clone();
    let (cron, store) = (gw.cron(), gw.agent.store());
    let session = store
        .create_session(tern_store::NewSession {
            source: "api".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    // A turn held at the model.
    let turn = {
        let gw = gw.clone();
        let id = session.id.clone();
        tokio::spawn(async move {
            gw.agent
                .run_turn(tern_agent::TurnRequest {
                    session_id: id,
                    input: "a long task".into(),
                    input_appended: false,
                    interrupt: tern_agent::Interrupt::new(),
                    system_prompt: None,
                    approver: gw.approver.clone(),
                    workdir: gw.settings.workdir.clone(),
                    toolsets: gw.settings.toolsets.clone(),
                    events: None,
                    ticket: None,
                })
                .await
        })
    };
    model
        .wait_requests(1, Duration::from_secs(20))
        .await
        .unwrap();
    let fields = JobFields {
        schedule: Some("every 5m".into()),
        prompt: Some("the scheduled check".into()),
        session: Some(session.id.clone()),
        ..Default::default()
    };
    let job = jobs::create(store, &fields, &cli(), clock.now(), &cron.tz)
        .await
        .unwrap();
    cron.scheduler.wake();
    clock.advance(SignedDuration::from_mins(5));
    cron.scheduler.settled().await;
    until("the run claimed", async || {
        let h = store.cron_history(&job.id, 10).await.unwrap();
        (h.len() == 1 && h[0].session_id.is_some()).then_some(())
    })
    .await;
    assert_eq!(
        model.requests().len(),
        1,
        "the run did not wait for the turn"
    );
    gate.open();
    turn.await.unwrap().unwrap();
    let reqs = model
        .wait_requests(2, Duration::from_secs(20))
        .await
        .unwrap();
    // The run's request carries the held turn's answer before its prompt: it ran after.
    let msgs: Vec<String> = reqs[1]
        .messages()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    let done = msgs
        .iter()
        .position(|m| m == "long task done")
        .expect("the turn's answer");
    let prompt = msgs
        .iter()
        .position(|m| m == "the scheduled check")
        .expect("the prompt");
    assert!(done < prompt, "{msgs:?}");
    until("the run recorded", async || {
        let h = store.cron_history(&job.id, 10).await.unwrap();
        (h[0].state == OccurrenceState::Ran).then_some(())
    })
    .await;
    assert_eq!(
        store.cron_history(&job.id, 10).await.unwrap()[0]
            .session_id
            .as_deref(),
        Some(session.id.as_str())
    );
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_timeout_is_interrupted_and_recorded_timed_out() {
    let model = FakeModel::start().await.unwrap();
    let gate = tern_fake_model::Gate::new();
    let held = gate.clone();
    model.set_responder(move |_| Reply::text("too late").held(&held));
    let home = home_for(&model, "");
    let (clock, handle) = boot(&home).await;
    let gw = handle.gateway();
    let (cron, store) = (gw.cron(), gw.agent.store());
    let fields = JobFields {
        schedule: Some("1m".into()),
        prompt: Some("a slow check".into()),
        timeout: Some("1s".into()),
        ..Default::default()
    };
    let job = jobs::create(store, &fields, &cli(), clock.now(), &cron.tz)
        .await
        .unwrap();
    cron.scheduler.wake();
    clock.advance(SignedDuration::from_mins(1));
    cron.scheduler.settled().await;
    let o = until("the run timed out", async || {
        let h = store.cron_history(&job.id, 10).await.unwrap();
        h.into_iter().find(|o| o.state == OccurrenceState::Ran)
    })
    .await;
    assert_eq!(o.outcome.as_deref(), Some("timed out after 1s"), "{o:?}");
    gate.open();
    handle.shutdown().await.unwrap();
}

/// A run delivering to a chat whose agent asks a human: the channel learns of the run's
/// session when the run starts (it was attached to the chat after the channel loaded its
/// routes), so the request is posted there with buttons, and a tap resumes the session,
/// whose answer reaches the chat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_delivering_to_a_chat_posts_its_request_there_and_a_tap_resumes_it() {
    let tg = FakeTelegram::start().await;
    let model = FakeModel::start().await.unwrap();
    model.set_responder(asks_approval);
    let home = home_for(
        &model,
        &format!(
            "[[channels.telegram]]\nname = \"tg\"\ntoken = \"{}\"\napi_url = \"{}\"\n\
             allowed_users = [{OWNER}]\nreviewers = {{ {OWNER} = \"ann\" }}\n\
             progress = \"off\"\npoll_timeout = \"2s\"\n",
            tg.token(),
            tg.api_url()
        ),
    );
    common::add_reviewer(&home, "ann").await;
    let (clock, handle) = boot(&home).await;
    let gw = handle.gateway();
    let (cron, store) = (gw.cron(), gw.agent.store());
    let fields = JobFields {
        schedule: Some("10m".into()),
        prompt: Some("rotate the keys if allowed".into()),
        deliver: Some(format!("tg:{OWNER}")),
        ..Default::default()
    };
    jobs::create(store, &fields, &cli(), clock.now(), &cron.tz)
        .await
        .unwrap();
    cron.scheduler.wake();
    clock.advance(SignedDuration::from_mins(10));
    cron.scheduler.settled().await;
    let post = tg
        .wait_sent(|m| m.chat_id == OWNER && m.shown().contains("Rotate the API keys?"))
        .await;
    let data = post.button_data();
    assert!(!data.is_empty(), "the request has buttons: {post:?}");
    tg.user_taps(OWNER, OWNER, post.message_id, &data[0]);
    tg.wait_sent(|m| m.chat_id == OWNER && m.shown().contains("Rotated the keys."))
        .await;
    handle.shutdown().await.unwrap();
}
