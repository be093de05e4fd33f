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
/// `fail_first` turns as a model that is down would.
struct FakeRunner {
    store: Store,
    fail_first: usize,
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
            if let Some(d) = deliver
                && !d.await.map_err(ResumeError::Failed)?
            {
                return Ok(Resumed::NotDelivered);
            }
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            self.runs
                .lock()
                .unwrap()
                .push((session_id.clone(), delivering));
            if n < self.fail_first {
                self.done.notify_one();
                return Err(ResumeError::Failed("the model is down".into()));
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
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("tern.db")).await.unwrap();
    let inbox = tern_inbox::Inbox::new(store.clone());
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

/// Waits (bounded by the test harness, not by a timed assertion) until the wait is answered.
async fn until_answered(store: &Store, wait_id: &str) -> Wait {
    loop {
        let w = store.wait(wait_id).await.unwrap().unwrap();
        if w.answered_at.is_some() {
            return w;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
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
    assert!(!res.deliver(&w2.id).await.unwrap());
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
