//! The resumer and the embedded follower against a real store and inbox; only the turn
//! runner is a stand-in (the gateway's runner is exercised end to end in tern-cli's tests).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use tern_inbox::outcome::{Outcome, OutcomeType};
use tern_store::{NewSession, NewWait};

use super::*;
use crate::client::{EmbeddedInbox, InboxClient};
use crate::follow::Follower;

/// Delivers, then "runs a turn" by appending an assistant answer; fails its first
/// `fail_first` turns as a model that is down would. With `shutdown_first`, its first turn
/// is cut short by a shutdown as the gateway's drain timeout does (the marker appended).
/// A turn on an ended session fails as the agent's does.
struct FakeRunner {
    store: Store,
    fail_first: usize,
    shutdown_first: bool,
    calls: AtomicUsize,
    runs: Mutex<Vec<(String, bool)>>,
    done: Notify,
}

impl TurnRunner for FakeRunner {
    fn run_resume(
        &self,
        session_id: String,
        _input: String,
        deliver: Option<Deliver>,
    ) -> BoxFuture<'_, Result<Resumed, ResumeError>> {
        Box::pin(async move {
            let delivering = deliver.is_some();
            if let Some(d) = deliver {
                match d.await.map_err(|e| ResumeError::Failed(e.to_string()))? {
                    None => return Ok(Resumed::NotDelivered),
                    Some(to) if to != session_id => return Ok(Resumed::Moved(to)),
                    Some(_) => {}
                }
            }
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            self.runs
                .lock()
                .unwrap()
                .push((session_id.clone(), delivering));
            let session = self
                .store
                .session(&session_id)
                .await
                .map_err(|e| ResumeError::Failed(e.to_string()))?;
            if session.status == tern_store::SessionStatus::Ended {
                return Err(ResumeError::Gone(format!("session {session_id} has ended")));
            }
            if n < self.fail_first {
                self.done.notify_one();
                return Err(ResumeError::Failed("the model is down".into()));
            }
            if n == 0 && self.shutdown_first {
                self.store
                    .append_message(
                        &session_id,
                        &NewMessage::new(Role::Assistant, INTERRUPTED_MARKER),
                    )
                    .await
                    .map_err(|e| ResumeError::Failed(e.to_string()))?;
                return Err(ResumeError::ShuttingDown("drain timeout".into()));
            }
            self.store
                .append_message(&session_id, &NewMessage::new(Role::Assistant, "ok"))
                .await
                .map_err(|e| ResumeError::Failed(e.to_string()))?;
            self.done.notify_one();
            Ok(Resumed::Answered)
        })
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    inbox: tern_inbox::Inbox,
    client: Arc<EmbeddedInbox>,
    session: String,
}

async fn fixture() -> Fixture {
    fixture_with(tern_inbox::policy::Policy::default()).await
}

async fn fixture_with(policy: tern_inbox::policy::Policy) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("tern.db")).await.unwrap();
    let inbox = tern_inbox::Inbox::new(store.clone()).with_policy(policy);
    inbox.ensure_default_project().await.unwrap();
    let session = store
        .create_session(NewSession {
            source: "api".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    Fixture {
        _dir: dir,
        client: Arc::new(EmbeddedInbox::new(inbox.clone())),
        store,
        inbox,
        session,
    }
}

/// A pending wait with a real approval request in the inbox.
async fn approval_wait(f: &Fixture, call: &str) -> Wait {
    let task = f.client.session_task(&f.session, "default").await.unwrap();
    let request_id = f
        .client
        .create_request(
            crate::client::RequestKind::Approval,
            json!({"projectName": "default", "taskId": task.task_id, "summary": "Deploy to prod"}),
            &format!("tern-req:{}:{call}", f.session),
        )
        .await
        .unwrap();
    let request = json!({"kind": "approval", "summary": "Deploy to prod", "requestId": request_id})
        .to_string();
    let (w, _) = f
        .store
        .create_wait(&NewWait {
            session_id: &f.session,
            idem_key: &format!("tern-wait:{}:{call}", f.session),
            tool_call_id: Some(call),
            kind: WaitKind::Approval,
            request: &request,
        })
        .await
        .unwrap();
    f.store.set_wait_request(&w.id, &request_id).await.unwrap();
    f.store.wait(&w.id).await.unwrap().unwrap()
}

fn runner(store: &Store, fail_first: usize) -> Arc<FakeRunner> {
    Arc::new(FakeRunner {
        store: store.clone(),
        fail_first,
        shutdown_first: false,
        calls: AtomicUsize::new(0),
        runs: Mutex::new(Vec::new()),
        done: Notify::new(),
    })
}

fn resumer(f: &Fixture, runner: &Arc<FakeRunner>) -> Arc<Resumer> {
    Arc::new(
        Resumer::new(f.store.clone(), Arc::new(HookBus::new()), runner.clone())
            .with_first_retry(Duration::from_millis(10)),
    )
}

async fn decision_count(store: &Store, session: &str) -> usize {
    store
        .messages(session)
        .await
        .unwrap()
        .iter()
        .filter(|m| {
            m.role == Role::User
                && m.content
                    .as_deref()
                    .is_some_and(|c| c.starts_with("[inbox decision]"))
        })
        .count()
}

/// Waits until the wait is answered; the minute is only a guard against a hang (a lost
/// decision), not a timed assertion.
async fn until_answered(store: &Store, wait_id: &str) -> Wait {
    let answered = async {
        loop {
            let w = store.wait(wait_id).await.unwrap().unwrap();
            if w.answered_at.is_some() {
                return w;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), answered)
        .await
        .expect("the wait was never answered")
}

#[tokio::test]
async fn a_decision_in_the_inbox_is_delivered_once_and_answered() {
    let f = fixture().await;
    let w = approval_wait(&f, "call_1").await;
    let run = runner(&f.store, 0);
    let res = resumer(&f, &run);
    let stop = CancellationToken::new();
    res.spawn(stop.clone());
    Follower::new(
        f.store.clone(),
        f.inbox.clone(),
        f.client.clone(),
        Arc::new(HookBus::new()),
        res.clone(),
    )
    .spawn(stop.clone());

    let mut outcome = Outcome::new(OutcomeType::Approve);
    outcome.note = Some("go ahead".into());
    f.inbox
        .decide_approval(w.request_id.as_deref().unwrap(), outcome, "alice")
        .await
        .unwrap();
    let done = until_answered(&f.store, &w.id).await;
    assert_eq!(done.status, WaitStatus::Delivered);
    assert_eq!(done.decided_by.as_deref(), Some("alice"));
    // More wake-ups deliver nothing more.
    res.notify_ready();
    res.notify_ready();
    tokio::task::yield_now().await;
    assert_eq!(decision_count(&f.store, &f.session).await, 1);
    let msgs = f.store.messages(&f.session).await.unwrap();
    let decision = msgs.iter().find(|m| Some(m.id) == done.message_id).unwrap();
    let text = decision.content.as_deref().unwrap();
    assert!(text.contains("Asked: Deploy to prod"), "{text}");
    assert!(text.contains("Decided: APPROVE by alice."), "{text}");
    assert!(text.contains("Note: go ahead"), "{text}");
    assert!(text.contains("\"decidedBy\": \"alice\""), "{text}");
    // Delivery came with the turn that answered it (delivered at the head of the queue).
    assert_eq!(
        run.runs.lock().unwrap().as_slice(),
        &[(f.session.clone(), true)]
    );
    stop.cancel();
}

#[tokio::test]
async fn a_failing_turn_is_retried_without_a_second_append() {
    let f = fixture().await;
    let w = approval_wait(&f, "call_1").await;
    f.store
        .wait_ready(&w.id, r#"{"outcome":{"type":"REJECT"}}"#, Some("bob"))
        .await
        .unwrap()
        .unwrap();
    let run = runner(&f.store, 2);
    let res = resumer(&f, &run);
    let stop = CancellationToken::new();
    res.spawn(stop.clone());
    let done = until_answered(&f.store, &w.id).await;
    assert_eq!(done.attempts, 2);
    assert_eq!(decision_count(&f.store, &f.session).await, 1);
    // The first run delivered; the retries only ran the turn.
    let runs: Vec<bool> = run.runs.lock().unwrap().iter().map(|r| r.1).collect();
    assert_eq!(runs, [true, false, false]);
    stop.cancel();
}

#[tokio::test]
async fn recovery_answers_delivered_decisions_and_skips_answered_ones() {
    let f = fixture().await;
    // B: delivered and its turn answered, the crash came before the mark.
    let b = approval_wait(&f, "call_b").await;
    f.store.wait_ready(&b.id, "{}", None).await.unwrap();
    f.store
        .deliver_wait(&b.id, &NewMessage::new(Role::User, "[inbox decision] b"))
        .await
        .unwrap()
        .unwrap();
    f.store
        .append_message(&f.session, &NewMessage::new(Role::Assistant, "done b"))
        .await
        .unwrap();
    // A: delivered, the crash came before its turn.
    let a = approval_wait(&f, "call_a").await;
    f.store.wait_ready(&a.id, "{}", None).await.unwrap();
    f.store
        .deliver_wait(&a.id, &NewMessage::new(Role::User, "[inbox decision] a"))
        .await
        .unwrap()
        .unwrap();
    let run = runner(&f.store, 0);
    let res = resumer(&f, &run);
    let stop = CancellationToken::new();
    res.spawn(stop.clone());
    until_answered(&f.store, &a.id).await;
    until_answered(&f.store, &b.id).await;
    // One turn ran (A's), without delivering anything again.
    assert_eq!(
        run.runs.lock().unwrap().as_slice(),
        &[(f.session.clone(), false)]
    );
    assert_eq!(decision_count(&f.store, &f.session).await, 2);
    stop.cancel();
}

#[tokio::test]
async fn a_withdrawn_request_cancels_its_wait_and_a_cancelled_wait_is_never_delivered() {
    let f = fixture().await;
    let w = approval_wait(&f, "call_1").await;
    let run = runner(&f.store, 0);
    let res = resumer(&f, &run);
    f.inbox
        .withdraw_request(
            crate::client::EMBEDDED_OWNER,
            w.request_id.as_deref().unwrap(),
            Some("test"),
        )
        .await
        .unwrap();
    // The start-up sweep finds it.
    let settled = crate::follow::settle(&f.store, &*f.client, &HookBus::new(), &res, &w)
        .await
        .unwrap();
    assert_eq!(settled, crate::follow::Settled::Cancelled);
    assert_eq!(
        f.store.wait(&w.id).await.unwrap().unwrap().status,
        WaitStatus::Cancelled
    );
    // A wait cancelled between ready and delivery: the deliver step appends nothing.
    let w2 = approval_wait(&f, "call_2").await;
    f.store.wait_ready(&w2.id, "{}", None).await.unwrap();
    f.store.cancel_waits(&f.session).await.unwrap();
    assert_eq!(res.deliver(&w2.id).await.unwrap(), None);
    assert_eq!(decision_count(&f.store, &f.session).await, 0);
}

#[test]
fn an_elicitation_decision_lists_the_answers() {
    let w = Wait {
        id: "w".into(),
        session_id: "s".into(),
        idem_key: "k".into(),
        tool_call_id: None,
        kind: WaitKind::Elicitation,
        request_id: Some("req_1".into()),
        request: json!({"kind": "elicitation", "summary": "Which region?"}).to_string(),
        status: WaitStatus::Ready,
        result: Some(
            json!({"requestId": "req_1", "answeredBy": "carol", "fields": {"region": "eu-west-1"}})
                .to_string(),
        ),
        decided_by: None,
        attempts: 0,
        last_error: None,
        message_id: None,
        created_at: 0,
        ready_at: None,
        delivered_at: None,
        answered_at: None,
        cancelled_at: None,
    };
    let text = render_decision(&w);
    assert!(text.contains("Asked: Which region?"), "{text}");
    assert!(
        text.contains("Answered by carol:\n- region: eu-west-1"),
        "{text}"
    );
    assert_eq!(
        outcome_word(&w, &parse_json(w.result.as_deref())).as_deref(),
        Some("SUBMITTED")
    );
}

fn tool_ctx(session: &str, call: &str) -> tern_tools::ToolContext {
    tern_tools::ToolContext {
        session_id: session.into(),
        call_id: call.into(),
        call_seq: 0,
        workdir: std::env::temp_dir(),
        cancel: CancellationToken::new(),
        approver: Arc::new(tern_tools::DenyAll {
            reason: "test".into(),
        }),
        limits: tern_tools::ToolLimits::default(),
        preapproved: false,
        subagents: None,
        toolsets: Default::default(),
        report: Default::default(),
    }
}

/// The resumer and the embedded follower, running until `stop`.
fn start(f: &Fixture, res: &Arc<Resumer>, stop: &CancellationToken) {
    res.spawn(stop.clone());
    Follower::new(
        f.store.clone(),
        f.inbox.clone(),
        f.client.clone(),
        Arc::new(HookBus::new()),
        res.clone(),
    )
    .spawn(stop.clone());
}

fn tools(f: &Fixture, res: &Arc<Resumer>) -> Arc<crate::tools::InboxTools> {
    Arc::new(
        crate::tools::InboxTools::new(f.store.clone(), f.client.clone(), Arc::new(HookBus::new()))
            .with_wakeup(res.wakeup().clone()),
    )
}

#[tokio::test]
async fn a_request_auto_approved_inside_its_create_resumes_the_session() {
    use tern_inbox::policy::{AutoApproveRule, Matcher, Policy};
    let f = fixture_with(Policy {
        auto_approve: vec![AutoApproveRule {
            name: "auto_approve[0]".into(),
            project: "default".into(),
            matcher: Matcher::Action("read_logs".into()),
            task: None,
        }],
        ..Policy::default()
    })
    .await;
    let run = runner(&f.store, 0);
    let res = resumer(&f, &run);
    let stop = CancellationToken::new();
    start(&f, &res, &stop);
    let mut registry = tern_tools::Registry::new();
    crate::tools::register(&mut registry, tools(&f, &res));

    // The policy decides inside the create, before the wait knows its request's id: the
    // follower hears of a decision for a request no wait has yet.
    let out = registry
        .call(
            "request_approval",
            &json!({"summary": "Read the logs", "keyValueContext": {"action": "read_logs"}})
                .to_string(),
            &[crate::tools::TOOLSET.to_owned()],
            tool_ctx(&f.session, "call_1"),
        )
        .await
        .unwrap();
    assert_eq!(out["status"], "pending", "{out}");
    let w = f.store.session_waits(&f.session, false).await.unwrap();
    assert_eq!(w.len(), 1);
    let done = until_answered(&f.store, &w[0].id).await;
    assert_eq!(done.status, WaitStatus::Delivered);
    assert_eq!(done.decided_by.as_deref(), Some("PLATFORM"));
    assert_eq!(decision_count(&f.store, &f.session).await, 1);
    assert_eq!(
        run.runs.lock().unwrap().as_slice(),
        &[(f.session.clone(), true)]
    );
    stop.cancel();
}

#[tokio::test]
async fn a_decision_taken_before_a_crash_let_the_request_id_be_stored_resumes_the_successor() {
    let f = fixture().await;
    // The wait, and its request created in the inbox; then the crash, before the id was
    // stored. The decision comes while the gateway is down.
    let request = json!({"kind": "approval", "summary": "Deploy to prod"}).to_string();
    let (w, _) = f
        .store
        .create_wait(&NewWait {
            session_id: &f.session,
            idem_key: &format!("tern-wait:{}:call_1", f.session),
            tool_call_id: Some("call_1"),
            kind: WaitKind::Approval,
            request: &request,
        })
        .await
        .unwrap();
    let task = f.client.session_task(&f.session, "default").await.unwrap();
    let request_id = f
        .client
        .create_request(
            crate::client::RequestKind::Approval,
            json!({"projectName": "default", "taskId": task.task_id, "summary": "Deploy to prod"}),
            &format!("tern-req:{}:call_1", f.session),
        )
        .await
        .unwrap();
    f.inbox
        .decide_approval(&request_id, Outcome::new(OutcomeType::Approve), "alice")
        .await
        .unwrap();
    // And the session was reset keeping its waits: the wait is the successor's now.
    let successor = f
        .store
        .create_session(NewSession {
            source: "api".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    f.store
        .move_open_waits(&f.session, &successor)
        .await
        .unwrap();
    f.store
        .set_status(&f.session, tern_store::SessionStatus::Ended)
        .await
        .unwrap();

    // The restart: the sweep skips the wait (no request id), the upkeep sends it.
    let run = runner(&f.store, 0);
    let res = resumer(&f, &run);
    let stop = CancellationToken::new();
    start(&f, &res, &stop);
    assert_eq!(tools(&f, &res).send_unsent().await.unwrap(), 1);
    let done = until_answered(&f.store, &w.id).await;
    // The same request (keys from the session that asked), its decision in the successor.
    assert_eq!(done.request_id.as_deref(), Some(request_id.as_str()));
    assert_eq!(done.decided_by.as_deref(), Some("alice"));
    let requests = f
        .inbox
        .list_requests(&tern_inbox::review::RequestFilter::default())
        .await
        .unwrap();
    assert_eq!(requests.count, 1);
    assert_eq!(decision_count(&f.store, &successor).await, 1);
    assert_eq!(
        run.runs.lock().unwrap().as_slice(),
        &[(successor.clone(), true)]
    );
    stop.cancel();
}

#[tokio::test]
async fn a_decision_for_a_wait_moved_during_its_resume_runs_its_turn_in_the_successor() {
    let f = fixture().await;
    let w = approval_wait(&f, "call_1").await;
    let ready = f
        .store
        .wait_ready(&w.id, "{}", Some("bob"))
        .await
        .unwrap()
        .unwrap();
    // A reset keeping the waits, while the resume (which read the old session) is under way.
    let successor = f
        .store
        .create_session(NewSession {
            source: "api".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    f.store
        .move_open_waits(&f.session, &successor)
        .await
        .unwrap();
    f.store
        .set_status(&f.session, tern_store::SessionStatus::Ended)
        .await
        .unwrap();
    let run = runner(&f.store, 0);
    let res = resumer(&f, &run);
    res.handle(ready, CancellationToken::new()).await;

    let done = f.store.wait(&w.id).await.unwrap().unwrap();
    assert!(done.answered_at.is_some());
    assert_eq!(decision_count(&f.store, &successor).await, 1);
    assert_eq!(decision_count(&f.store, &f.session).await, 0);
    // Its turn ran in the successor, on the decision.
    assert_eq!(
        run.runs.lock().unwrap().as_slice(),
        &[(successor.clone(), false)]
    );
    let last = f.store.messages(&successor).await.unwrap().pop().unwrap();
    assert_eq!(last.content.as_deref(), Some("ok"));
}

#[tokio::test]
async fn a_turn_on_an_ended_session_does_not_answer_the_decision() {
    let f = fixture().await;
    let w = approval_wait(&f, "call_1").await;
    let ready = f
        .store
        .wait_ready(&w.id, "{}", None)
        .await
        .unwrap()
        .unwrap();
    f.store
        .set_status(&f.session, tern_store::SessionStatus::Ended)
        .await
        .unwrap();
    let run = runner(&f.store, 0);
    let res = resumer(&f, &run);
    res.handle(ready, CancellationToken::new()).await;
    let w = f.store.wait(&w.id).await.unwrap().unwrap();
    assert_eq!(w.status, WaitStatus::Delivered);
    assert_eq!(w.answered_at, None);
}

#[tokio::test]
async fn a_crash_inside_the_turn_that_asked_leaves_a_valid_transcript_for_the_resume() {
    let f = fixture().await;
    // The model called the request tool; the gateway died after the request was created,
    // before the tool's result was stored.
    f.store
        .append_messages(
            &f.session,
            &[
                NewMessage::new(Role::User, "deploy it"),
                NewMessage {
                    role: Some(Role::Assistant),
                    tool_calls: vec![tern_llm::ToolCall {
                        id: "call_1".into(),
                        kind: "function".into(),
                        function: tern_llm::FunctionCall {
                            name: "request_approval".into(),
                            arguments: "{}".into(),
                        },
                    }],
                    ..Default::default()
                },
            ],
        )
        .await
        .unwrap();
    let w = approval_wait(&f, "call_1").await;
    f.store.wait_ready(&w.id, "{}", Some("bob")).await.unwrap();
    let run = runner(&f.store, 0);
    let res = resumer(&f, &run);
    let stop = CancellationToken::new();
    res.spawn(stop.clone());
    let done = until_answered(&f.store, &w.id).await;
    stop.cancel();
    let msgs = f.store.messages(&f.session).await.unwrap();
    let shape: Vec<(Role, Option<&str>)> = msgs
        .iter()
        .map(|m| (m.role, m.tool_call_id.as_deref()))
        .collect();
    assert_eq!(
        shape,
        [
            (Role::User, None),
            (Role::Assistant, None),
            (Role::Tool, Some("call_1")),
            (Role::Assistant, None),
            (Role::User, None),
            (Role::Assistant, None),
        ]
    );
    assert!(msgs[2].content.as_deref().unwrap().contains("decided"));
    assert_eq!(msgs[3].content.as_deref(), Some(INTERRUPTED_MARKER));
    assert_eq!(Some(msgs[4].id), done.message_id);
    assert_eq!(msgs[5].content.as_deref(), Some("ok"));
}

#[tokio::test]
async fn a_resume_cut_short_by_a_shutdown_runs_again_at_the_next_start() {
    let f = fixture().await;
    let w = approval_wait(&f, "call_1").await;
    f.store.wait_ready(&w.id, "{}", Some("bob")).await.unwrap();
    // The drain timeout interrupts the resumed turn: the marker follows the decision.
    let first = Arc::new(FakeRunner {
        shutdown_first: true,
        ..Arc::into_inner(runner(&f.store, 0)).unwrap()
    });
    let res = resumer(&f, &first);
    let ready = f.store.wait(&w.id).await.unwrap().unwrap();
    res.handle(ready, CancellationToken::new()).await;
    let left = f.store.wait(&w.id).await.unwrap().unwrap();
    assert_eq!(left.status, WaitStatus::Delivered);
    assert_eq!(left.answered_at, None);
    let last = f.store.messages(&f.session).await.unwrap().pop().unwrap();
    assert_eq!(last.content.as_deref(), Some(INTERRUPTED_MARKER));

    // The next start: the marker is no answer, so the turn runs again, delivering nothing.
    let second = runner(&f.store, 0);
    let res = resumer(&f, &second);
    let stop = CancellationToken::new();
    res.spawn(stop.clone());
    until_answered(&f.store, &w.id).await;
    stop.cancel();
    assert_eq!(
        second.runs.lock().unwrap().as_slice(),
        &[(f.session.clone(), false)]
    );
    assert_eq!(decision_count(&f.store, &f.session).await, 1);
}
