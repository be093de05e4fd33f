//! The `inbox` toolset with a real store and the embedded inbox on a temporary directory,
//! called through `Registry::call` as the agent loop does: requests return pending at once,
//! retries create nothing twice, bad arguments store nothing, attachments stay inside the
//! workspace, decisions are read back, and `wait_created` is emitted.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tern_hooks::{Envelope, HookBus, HookEvent, Subscriber};
use tern_inbox::model::TaskFilter;
use tern_inbox::review::RequestFilter;
use tern_inbox::uploads::UploadDir;
use tern_inbox::{Inbox, Outcome, OutcomeType};
use tern_store::{NewSession, Store, WaitKind, WaitStatus};
use tern_tools::{DenyAll, Registry, ToolContext, ToolLimits, ToolResult};
use tern_waits::client::{
    BoxFuture, ClientError, ClientResult, EMBEDDED_OWNER, EmbeddedInbox, InboxClient, LogKind,
    RequestKind, TaskRef,
};
use tern_waits::guide::GUIDE;
use tern_waits::tools::{self, InboxTools, TOOLSET};
use tokio_util::sync::CancellationToken;

struct Events(Mutex<Vec<HookEvent>>);

impl Subscriber for Events {
    fn name(&self) -> &str {
        "test"
    }
    fn on_event(&self, env: &Envelope) {
        self.0.lock().unwrap().push(env.event.clone());
    }
}

/// The embedded inbox, with a switch that makes every call fail as if the inbox were down
/// (only `create_request`, or everything).
struct Flaky {
    inner: EmbeddedInbox,
    requests_down: AtomicBool,
    requests_refused: AtomicBool,
    all_down: AtomicBool,
}

fn down() -> ClientError {
    ClientError::Unreachable("connection refused (test)".into())
}

impl Flaky {
    fn check(&self) -> ClientResult<()> {
        if self.all_down.load(Ordering::SeqCst) {
            Err(down())
        } else {
            Ok(())
        }
    }
}

impl InboxClient for Flaky {
    fn session_task<'a>(
        &'a self,
        session_id: &'a str,
        project: &'a str,
    ) -> BoxFuture<'a, ClientResult<TaskRef>> {
        Box::pin(async move {
            self.check()?;
            self.inner.session_task(session_id, project).await
        })
    }
    fn create_request<'a>(
        &'a self,
        kind: RequestKind,
        body: Value,
        idem: &'a str,
    ) -> BoxFuture<'a, ClientResult<String>> {
        Box::pin(async move {
            self.check()?;
            if self.requests_down.load(Ordering::SeqCst) {
                return Err(down());
            }
            if self.requests_refused.load(Ordering::SeqCst) {
                return Err(ClientError::Refused {
                    status: 400,
                    body: json!({"code": "invalid_request", "message": "refused (test)"}),
                });
            }
            self.inner.create_request(kind, body, idem).await
        })
    }
    fn log<'a>(
        &'a self,
        kind: LogKind,
        body: Value,
        idem: &'a str,
    ) -> BoxFuture<'a, ClientResult<String>> {
        Box::pin(async move {
            self.check()?;
            self.inner.log(kind, body, idem).await
        })
    }
    fn result<'a>(
        &'a self,
        kind: RequestKind,
        request_id: &'a str,
    ) -> BoxFuture<'a, ClientResult<Option<Value>>> {
        Box::pin(async move {
            self.check()?;
            self.inner.result(kind, request_id).await
        })
    }
    fn withdraw<'a>(
        &'a self,
        kind: RequestKind,
        request_id: &'a str,
        reason: &'a str,
    ) -> BoxFuture<'a, ClientResult<()>> {
        Box::pin(async move {
            self.check()?;
            self.inner.withdraw(kind, request_id, reason).await
        })
    }
    fn upload<'a>(&'a self, path: &'a Path, name: &'a str) -> BoxFuture<'a, ClientResult<String>> {
        Box::pin(async move {
            self.check()?;
            self.inner.upload(path, name).await
        })
    }
}

struct Env {
    dir: tempfile::TempDir,
    store: Store,
    inbox: Inbox,
    workdir: PathBuf,
    events: Arc<Events>,
    client: Arc<Flaky>,
    tools: Arc<InboxTools>,
    registry: Registry,
}

async fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let workdir = dir.path().join("work");
    std::fs::create_dir_all(&workdir).unwrap();
    let store = Store::open(&dir.path().join("tern.db")).await.unwrap();
    for id in ["s1", "s2"] {
        store
            .create_session(NewSession {
                id: Some(id.into()),
                source: "api".into(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let inbox = Inbox::new(store.clone());
    inbox.ensure_default_project().await.unwrap();
    let hooks = Arc::new(HookBus::new());
    let events = Arc::new(Events(Mutex::new(Vec::new())));
    hooks.subscribe(events.clone());
    let client = Arc::new(Flaky {
        inner: EmbeddedInbox::new(inbox.clone())
            .with_uploads(UploadDir::new(dir.path().join("uploads")), 1024 * 1024),
        requests_down: AtomicBool::new(false),
        requests_refused: AtomicBool::new(false),
        all_down: AtomicBool::new(false),
    });
    let tools = Arc::new(InboxTools::new(store.clone(), client.clone(), hooks));
    let mut registry = Registry::new();
    tools::register(&mut registry, tools.clone());
    Env {
        dir,
        store,
        inbox,
        workdir,
        events,
        client,
        tools,
        registry,
    }
}

impl Env {
    fn ctx(&self, session: &str, call: &str) -> ToolContext {
        ToolContext {
            session_id: session.into(),
            call_id: call.into(),
            call_seq: 0,
            workdir: self.workdir.clone(),
            cancel: CancellationToken::new(),
            approver: Arc::new(DenyAll {
                reason: "test".into(),
            }),
            limits: ToolLimits::default(),
            preapproved: false,
            subagents: None,
            toolsets: Default::default(),
            report: Default::default(),
        }
    }

    async fn call(&self, tool: &str, session: &str, call: &str, args: Value) -> ToolResult {
        self.registry
            .call(
                tool,
                &args.to_string(),
                &[TOOLSET.to_owned()],
                self.ctx(session, call),
            )
            .await
    }

    async fn request_count(&self) -> u64 {
        self.inbox
            .list_requests(&RequestFilter::default())
            .await
            .unwrap()
            .count
    }

    async fn waits(&self, session: &str) -> Vec<tern_store::Wait> {
        self.store.session_waits(session, false).await.unwrap()
    }

    async fn tasks(&self) -> usize {
        self.inbox
            .tasks(EMBEDDED_OWNER, &TaskFilter::default())
            .await
            .unwrap()
            .items
            .len()
    }

    fn created(&self) -> Vec<tern_hooks::WaitCreated> {
        self.events
            .0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                HookEvent::WaitCreated(w) => Some(w.clone()),
                _ => None,
            })
            .collect()
    }

    /// Files stored under the uploads directory (temporary ones aside).
    fn stored_files(&self) -> usize {
        let root = self.dir.path().join("uploads");
        let Ok(dirs) = std::fs::read_dir(&root) else {
            return 0;
        };
        dirs.map(|d| d.unwrap().path())
            .filter(|p| p.file_name().unwrap() != "tmp")
            .map(|p| std::fs::read_dir(p).unwrap().count())
            .sum()
    }

    /// Events in the logs of every task of the embedded owner.
    async fn events(&self) -> usize {
        let mut n = 0;
        for task in self
            .inbox
            .tasks(EMBEDDED_OWNER, &TaskFilter::default())
            .await
            .unwrap()
            .items
        {
            n += self
                .inbox
                .task_events(EMBEDDED_OWNER, &task.id, None, Some(100))
                .await
                .unwrap()
                .items
                .len();
        }
        n
    }
}

fn err(r: ToolResult) -> String {
    match r {
        Ok(v) => panic!("expected a tool error, got {v}"),
        Err(e) => e.0,
    }
}

#[tokio::test]
async fn approval_is_pending_at_once_and_recorded() {
    let env = env().await;
    let out = env
        .call(
            "request_approval",
            "s1",
            "call_1",
            json!({
                "summary": "Deploy 1.4.2 to production",
                "keyValueContext": {"action": "deploy_prod", "version": "1.4.2"},
                "recommendation": {"outcome": {"type": "APPROVE"}, "confidence": 0.8,
                                   "rationale": "tests pass"},
                "externalTraceId": "trace-7"
            }),
        )
        .await
        .unwrap();
    assert_eq!(out["status"], "pending");
    let request_id = out["requestId"].as_str().unwrap().to_owned();

    let waits = env.waits("s1").await;
    assert_eq!(waits.len(), 1);
    let wait = &waits[0];
    assert_eq!(wait.status, WaitStatus::Pending);
    assert_eq!(wait.kind, WaitKind::Approval);
    assert_eq!(wait.idem_key, "tern-wait:s1:call_1");
    assert_eq!(wait.tool_call_id.as_deref(), Some("call_1"));
    assert_eq!(wait.request_id.as_deref(), Some(request_id.as_str()));
    let asked: Value = serde_json::from_str(&wait.request).unwrap();
    assert_eq!(asked["kind"], "approval");
    assert_eq!(asked["summary"], "Deploy 1.4.2 to production");
    assert_eq!(asked["keyValueContext"]["action"], "deploy_prod");

    let view = env.inbox.request_view(&request_id).await.unwrap();
    assert_eq!(view.summary.summary, "Deploy 1.4.2 to production");
    assert_eq!(view.summary.project_name, "default");
    assert_eq!(
        view.key_value_context.unwrap()["version"],
        "1.4.2".to_owned()
    );
    assert_eq!(
        view.approval_recommendation.unwrap().outcome.kind,
        OutcomeType::Approve
    );
    let task = env
        .inbox
        .task(EMBEDDED_OWNER, &view.summary.task_id)
        .await
        .unwrap();
    assert_eq!(task.task.external_id.as_deref(), Some("s1"));

    let created = env.created();
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].session_id, "s1");
    assert_eq!(created[0].source, "api");
    assert_eq!(created[0].wait_id, wait.id);
    assert_eq!(created[0].request_id, request_id);
    assert_eq!(created[0].kind, "approval");
    assert_eq!(created[0].summary, "Deploy 1.4.2 to production");
}

#[tokio::test]
async fn a_retried_call_returns_the_same_request_and_creates_nothing() {
    let env = env().await;
    let args = json!({"summary": "Delete the stale branches"});
    let first = env
        .call("request_approval", "s1", "call_1", args.clone())
        .await
        .unwrap();
    let again = env
        .call("request_approval", "s1", "call_1", args.clone())
        .await
        .unwrap();
    assert_eq!(first["requestId"], again["requestId"]);
    assert_eq!(again["status"], "pending");
    assert_eq!(env.request_count().await, 1);
    assert_eq!(env.waits("s1").await.len(), 1);
    assert_eq!(env.created().len(), 1, "wait_created once");

    // Another call id, or the same call id in another session, is another request; one
    // task per session.
    let other = env
        .call("request_approval", "s1", "call_2", args.clone())
        .await
        .unwrap();
    assert_ne!(other["requestId"], first["requestId"]);
    let s2 = env
        .call("request_approval", "s2", "call_1", args)
        .await
        .unwrap();
    assert_ne!(s2["requestId"], first["requestId"]);
    assert_eq!(env.request_count().await, 3);
    assert_eq!(env.tasks().await, 2);
}

/// A call id reused with other arguments is not a retry (a provider that numbers its tool
/// calls per answer would otherwise get the earlier request, and its decision, back).
#[tokio::test]
async fn a_reused_call_id_with_other_arguments_is_refused_and_creates_nothing() {
    let env = env().await;
    let first = env
        .call(
            "request_approval",
            "s1",
            "call_0",
            json!({"summary": "Delete the stale branches"}),
        )
        .await
        .unwrap();
    for (tool, args) in [
        (
            "request_approval",
            json!({"summary": "Drop the staging database"}),
        ),
        (
            "request_approval",
            json!({"summary": "Delete the stale branches", "externalTraceId": "t-2"}),
        ),
        (
            "request_elicitation",
            json!({"summary": "Delete the stale branches",
                   "fields": [{"type": "Text", "id": "why", "label": "Why", "required": true}]}),
        ),
    ] {
        let e = err(env.call(tool, "s1", "call_0", args).await);
        assert!(
            e.contains("already used") && e.contains("nothing was asked"),
            "{e}"
        );
        assert!(!e.contains(first["requestId"].as_str().unwrap()), "{e}");
    }
    assert_eq!(env.request_count().await, 1);
    assert_eq!(env.waits("s1").await.len(), 1);
    assert_eq!(env.created().len(), 1);
}

/// The same call id in a later message (some models send `call_1` every turn) is another
/// call: the same question asked again gets a new request, a note is logged again; the same
/// message's call run again finds its request.
#[tokio::test]
async fn a_call_id_reused_by_a_later_message_asks_and_logs_anew() {
    let env = env().await;
    let at = |seq: i64| ToolContext {
        call_seq: seq,
        ..env.ctx("s1", "call_1")
    };
    let run = |tool: &'static str, seq: i64, args: Value| {
        let ctx = at(seq);
        let registry = &env.registry;
        async move {
            registry
                .call(tool, &args.to_string(), &[TOOLSET.to_owned()], ctx)
                .await
        }
    };
    let ask = json!({"summary": "Delete the stale branches"});
    let first = run("request_approval", 3, ask.clone()).await.unwrap();
    let retry = run("request_approval", 3, ask.clone()).await.unwrap();
    assert_eq!(retry["requestId"], first["requestId"]);
    let later = run("request_approval", 8, ask.clone()).await.unwrap();
    assert_ne!(later["requestId"], first["requestId"]);
    assert_eq!(env.request_count().await, 2);
    let keys: Vec<String> = env
        .waits("s1")
        .await
        .into_iter()
        .map(|w| w.idem_key)
        .collect();
    assert_eq!(keys, ["tern-wait:s1:call_1@3", "tern-wait:s1:call_1@8"]);

    let note = json!({"message": "still working"});
    let n1 = run("add_note", 3, note.clone()).await.unwrap();
    let n2 = run("add_note", 8, note).await.unwrap();
    assert_ne!(n1["eventId"], n2["eventId"], "two notes, not a replay");
}

#[tokio::test]
async fn an_unreachable_inbox_keeps_the_wait_and_a_retry_or_the_upkeep_sends_it_once() {
    let env = env().await;
    let args = json!({"summary": "Rotate the API keys"});

    // Down before anything is recorded: nothing is kept.
    env.client.all_down.store(true, Ordering::SeqCst);
    let e = err(env
        .call("request_approval", "s1", "call_0", args.clone())
        .await);
    assert!(
        e.contains("unreachable") && e.contains("nothing was sent"),
        "{e}"
    );
    assert!(env.waits("s1").await.is_empty());
    env.client.all_down.store(false, Ordering::SeqCst);

    // Down between the wait and the request (as after a crash there): the wait is kept
    // without a request, and the model is told not to ask again.
    env.client.requests_down.store(true, Ordering::SeqCst);
    let e = err(env
        .call("request_approval", "s1", "call_1", args.clone())
        .await);
    assert!(
        e.contains("unreachable") && e.contains("Do not ask again"),
        "{e}"
    );
    let waits = env.waits("s1").await;
    assert_eq!(waits.len(), 1);
    assert_eq!(waits[0].status, WaitStatus::Pending);
    assert_eq!(waits[0].request_id, None);
    assert_eq!(waits[0].attempts, 1);
    assert_eq!(env.request_count().await, 0);
    assert!(env.created().is_empty());

    // Still down: the upkeep's sweep fails again and leaves it pending.
    assert_eq!(env.tools.send_unsent().await.unwrap(), 0);
    assert_eq!(env.waits("s1").await[0].status, WaitStatus::Pending);

    // Back: a retry of the same call completes it.
    env.client.requests_down.store(false, Ordering::SeqCst);
    let out = env
        .call("request_approval", "s1", "call_1", args.clone())
        .await
        .unwrap();
    assert_eq!(out["status"], "pending");
    let waits = env.waits("s1").await;
    assert_eq!(waits.len(), 1);
    assert_eq!(waits[0].request_id.as_deref(), out["requestId"].as_str());
    assert_eq!(env.request_count().await, 1);
    assert_eq!(env.created().len(), 1);

    // Nothing left for the sweep; the next retry changes nothing.
    assert_eq!(env.tools.send_unsent().await.unwrap(), 0);
    let again = env
        .call("request_approval", "s1", "call_1", args)
        .await
        .unwrap();
    assert_eq!(again["requestId"], out["requestId"]);
    assert_eq!(env.request_count().await, 1);
    assert_eq!(env.created().len(), 1);
}

#[tokio::test]
async fn the_upkeep_sends_a_wait_left_without_its_request() {
    let env = env().await;
    env.client.requests_down.store(true, Ordering::SeqCst);
    err(env
        .call(
            "request_elicitation",
            "s2",
            "call_9",
            json!({
                "summary": "Which region?",
                "fields": [{"type": "Select", "id": "region", "label": "Region",
                            "required": true, "options": ["eu", "us"]}]
            }),
        )
        .await);
    env.client.requests_down.store(false, Ordering::SeqCst);
    assert_eq!(env.tools.send_unsent().await.unwrap(), 1);
    let wait = &env.waits("s2").await[0];
    let request_id = wait.request_id.clone().unwrap();
    let view = env.inbox.request_view(&request_id).await.unwrap();
    assert_eq!(view.fields.len(), 1);
    assert_eq!(env.created().len(), 1);
    assert_eq!(env.created()[0].kind, "elicitation");
    assert_eq!(env.tools.send_unsent().await.unwrap(), 0);
    assert_eq!(env.request_count().await, 1);
}

#[tokio::test]
async fn bad_arguments_are_clear_errors_and_store_nothing() {
    let env = env().await;
    let field = json!({"type": "Switch", "id": "ok", "label": "OK?", "required": true});
    let cases: Vec<(&str, Value, &str)> = vec![
        ("request_approval", json!({}), "summary"),
        ("request_approval", json!({"summary": "   "}), "summary"),
        (
            "request_approval",
            json!({"summary": "x", "bogus": 1}),
            "bogus",
        ),
        (
            "request_approval",
            json!({"summary": "x", "keyValueContext": {"a": 1}}),
            "keyValueContext",
        ),
        (
            "request_approval",
            json!({"summary": "x", "recommendation": {"outcome": {"type": "MAYBE"}}}),
            "MAYBE",
        ),
        (
            "request_approval",
            json!({"summary": "x", "recommendation": {"outcome": {"type": "APPROVE"}, "confidence": 3}}),
            "confidence",
        ),
        (
            "request_approval",
            json!({"summary": "x", "attachments": "a.txt"}),
            "attachments",
        ),
        (
            "request_approval",
            json!({"summary": "x", "attachments": [""]}),
            "attachments",
        ),
        ("request_elicitation", json!({"summary": "x"}), "fields"),
        (
            "request_elicitation",
            json!({"summary": "x", "fields": []}),
            "fields",
        ),
        (
            "request_elicitation",
            json!({"summary": "x", "fields": [field, field]}),
            "ok",
        ),
        (
            "request_elicitation",
            json!({"summary": "x", "fields": [{"type": "Slider", "id": "n", "label": "N", "required": true, "min": 5, "max": 1}]}),
            "n",
        ),
        (
            "request_elicitation",
            json!({"summary": "x", "fields": [{"type": "Select", "id": "s", "label": "S", "required": true}]}),
            "options",
        ),
        (
            "request_elicitation",
            json!({"summary": "x", "fields": [{"type": "Colour", "id": "c", "label": "C", "required": true}]}),
            "Colour",
        ),
        (
            "request_elicitation",
            json!({"summary": "x", "fields": [field], "recommendation": [{"fieldId": "nope", "value": true}]}),
            "nope",
        ),
        ("record_action", json!({}), "description"),
        ("record_action", json!({"description": ""}), "description"),
        (
            "record_action",
            json!({"description": "x", "metadataPatch": {"sett": {}}}),
            "sett",
        ),
        (
            "record_action",
            json!({"description": "x", "detail": "text"}),
            "detail",
        ),
        ("report_exception", json!({"message": " "}), "message"),
        ("report_exception", json!({"msg": "x"}), "message"),
        ("add_note", json!({}), "message"),
        ("add_note", json!({"message": "x", "extra": true}), "extra"),
        ("get_decision", json!({}), "requestId"),
        ("get_decision", json!({"requestId": ""}), "requestId"),
        ("inbox_guide", json!({"x": 1}), "x"),
    ];
    for (i, (tool, args, mention)) in cases.into_iter().enumerate() {
        let e = err(env
            .call(tool, "s1", &format!("call_{i}"), args.clone())
            .await);
        assert!(
            e.contains(mention),
            "{tool} {args}: {e:?} should mention {mention:?}"
        );
    }
    assert!(env.waits("s1").await.is_empty());
    assert_eq!(env.request_count().await, 0);
    assert_eq!(env.tasks().await, 0, "no task was even created");
    assert_eq!(env.events().await, 0);
    assert!(env.created().is_empty());
}

#[tokio::test]
async fn what_the_inbox_refuses_is_an_error_and_a_refused_request_leaves_no_open_wait() {
    let env = env().await;
    // `transitionsTo` is checked by the inbox against the project's steps.
    let e = err(env
        .call(
            "record_action",
            "s1",
            "call_1",
            json!({"description": "x", "transitionsTo": "nowhere"}),
        )
        .await);
    assert!(
        e.contains("refused") && e.contains("nothing was logged"),
        "{e}"
    );
    assert_eq!(env.events().await, 1, "only TASK_CREATED");

    // A request refused after its wait was recorded: the wait is cancelled, so the session
    // does not wait for a decision that cannot come.
    env.client.requests_refused.store(true, Ordering::SeqCst);
    let e = err(env
        .call("request_approval", "s1", "call_2", json!({"summary": "x"}))
        .await);
    assert!(
        e.contains("refused") && e.contains("Nothing is pending"),
        "{e}"
    );
    let waits = env.waits("s1").await;
    assert_eq!(waits.len(), 1);
    assert_eq!(waits[0].status, WaitStatus::Cancelled);
    assert!(!env.store.has_open_waits("s1").await.unwrap());
    assert!(env.created().is_empty());
    // A retry of that call says it was cancelled instead of asking again.
    env.client.requests_refused.store(false, Ordering::SeqCst);
    let e = err(env
        .call("request_approval", "s1", "call_2", json!({"summary": "x"}))
        .await);
    assert!(e.contains("cancelled"), "{e}");
    assert_eq!(env.request_count().await, 0);
}

#[tokio::test]
async fn attachments_must_stay_inside_the_workspace() {
    let env = env().await;
    let outside = env.dir.path().join("secret.txt");
    std::fs::write(&outside, "top secret").unwrap();
    std::fs::write(env.workdir.join("inside.txt"), "fine").unwrap();
    std::fs::create_dir_all(env.workdir.join("sub")).unwrap();
    std::os::unix::fs::symlink(&outside, env.workdir.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(env.dir.path(), env.workdir.join("sub/up")).unwrap();

    let cases = [
        ("../secret.txt", ".."),
        ("sub/../../secret.txt", ".."),
        (outside.to_str().unwrap(), "absolute"),
        ("/etc/passwd", "absolute"),
        ("link.txt", "link leading out"),
        ("sub/up/secret.txt", "link leading out"),
        ("missing.txt", "cannot open"),
        ("sub", "not a regular file"),
    ];
    for (i, (path, why)) in cases.iter().enumerate() {
        for tool in ["request_approval", "record_action"] {
            let args = if tool == "record_action" {
                json!({"description": "x", "attachments": ["inside.txt", path]})
            } else {
                json!({"summary": "x", "attachments": ["inside.txt", path]})
            };
            let e = err(env
                .call(tool, "s1", &format!("call_{tool}_{i}"), args)
                .await);
            assert!(e.contains("refused") && e.contains(why), "{path}: {e}");
        }
    }
    assert!(env.waits("s1").await.is_empty());
    assert_eq!(env.request_count().await, 0);
    assert_eq!(env.stored_files(), 0, "nothing was uploaded");
}

#[tokio::test]
async fn a_workspace_file_is_uploaded_and_attached() {
    let env = env().await;
    std::fs::create_dir_all(env.workdir.join("out")).unwrap();
    std::fs::write(env.workdir.join("out/plan.diff"), "+ one line\n").unwrap();
    // A link that stays inside the workspace is fine.
    std::os::unix::fs::symlink(
        env.workdir.join("out/plan.diff"),
        env.workdir.join("latest.diff"),
    )
    .unwrap();
    let out = env
        .call(
            "request_approval",
            "s1",
            "call_1",
            json!({"summary": "Apply the plan", "attachments": ["out/plan.diff", "./latest.diff"]}),
        )
        .await
        .unwrap();
    let request_id = out["requestId"].as_str().unwrap();
    // A retry with the same attachments is the same request (the upload ids differ, the
    // paths do not).
    let again = env
        .call(
            "request_approval",
            "s1",
            "call_1",
            json!({"summary": "Apply the plan", "attachments": ["out/plan.diff", "./latest.diff"]}),
        )
        .await
        .unwrap();
    assert_eq!(again["requestId"], out["requestId"]);
    let view = env.inbox.request_view(request_id).await.unwrap();
    assert_eq!(
        view.attachments.len(),
        1,
        "the same file once: {:?}",
        view.attachments
    );
    let upload = env.inbox.upload(&view.attachments[0]).await.unwrap();
    assert_eq!(upload.size, 11);
    assert_eq!(upload.file_name.as_deref(), Some("plan.diff"));
    assert_eq!(upload.content_type, "text/plain");
    let task = env
        .inbox
        .task(EMBEDDED_OWNER, &view.summary.task_id)
        .await
        .unwrap();
    assert_eq!(task.task.attachments.len(), 1);
    assert_eq!(task.task.attachments[0].label, "out/plan.diff");
    assert_eq!(task.task.attachments[0].upload_id, view.attachments[0]);

    // record_action attaches with addAttachments.
    std::fs::write(env.workdir.join("report.md"), "# Report\n").unwrap();
    let logged = env
        .call(
            "record_action",
            "s1",
            "call_2",
            json!({"description": "Wrote the report", "attachments": ["report.md"],
                   "metadataPatch": {"set": {"stage": "reported"}}}),
        )
        .await
        .unwrap();
    assert!(logged["eventId"].is_string());
    let task = env
        .inbox
        .task(EMBEDDED_OWNER, &view.summary.task_id)
        .await
        .unwrap();
    assert_eq!(task.task.attachments.len(), 2);
    assert_eq!(task.task.metadata["stage"], "reported");
}

#[tokio::test]
async fn get_decision_before_and_after_the_decision() {
    let env = env().await;
    let out = env
        .call(
            "request_approval",
            "s1",
            "call_1",
            json!({"summary": "Ship it"}),
        )
        .await
        .unwrap();
    let request_id = out["requestId"].as_str().unwrap().to_owned();
    let before = env
        .call(
            "get_decision",
            "s1",
            "call_2",
            json!({"requestId": request_id}),
        )
        .await
        .unwrap();
    assert_eq!(before["status"], "pending");

    // Another session's request is not this session's to read.
    let e = err(env
        .call(
            "get_decision",
            "s2",
            "call_2",
            json!({"requestId": request_id}),
        )
        .await);
    assert!(e.contains("no request"), "{e}");

    env.inbox
        .decide_approval(&request_id, Outcome::new(OutcomeType::Reject), "alice")
        .await
        .unwrap();
    let after = env
        .call(
            "get_decision",
            "s1",
            "call_3",
            json!({"requestId": request_id}),
        )
        .await
        .unwrap();
    assert_eq!(after["status"], "decided");
    assert_eq!(after["result"]["outcome"]["type"], "REJECT");
    assert_eq!(after["result"]["decidedBy"], "alice");
    assert_eq!(after["result"]["requestId"], request_id.as_str());
}

#[tokio::test]
async fn elicitation_answers_are_read_back() {
    let env = env().await;
    let out = env
        .call(
            "request_elicitation",
            "s1",
            "call_1",
            json!({
                "summary": "Pick the release date",
                "fields": [{"type": "DateField", "id": "date", "label": "Date", "required": true}],
                "recommendation": [{"fieldId": "date", "value": "2026-12-01"}]
            }),
        )
        .await
        .unwrap();
    let request_id = out["requestId"].as_str().unwrap().to_owned();
    assert_eq!(env.waits("s1").await[0].kind, WaitKind::Elicitation);
    let mut answers = serde_json::Map::new();
    answers.insert("date".into(), json!("2026-12-02"));
    env.inbox
        .answer_elicitation(&request_id, &answers, "bob")
        .await
        .unwrap();
    let after = env
        .call(
            "get_decision",
            "s1",
            "call_2",
            json!({"requestId": request_id}),
        )
        .await
        .unwrap();
    assert_eq!(after["status"], "decided");
    assert_eq!(after["result"]["fields"]["date"], "2026-12-02");
}

#[tokio::test]
async fn log_tools_write_to_the_sessions_task_once() {
    let env = env().await;
    for (tool, args) in [
        (
            "record_action",
            json!({"description": "Ran the tests", "detail": {"passed": 12}}),
        ),
        (
            "report_exception",
            json!({"message": "The build failed", "detail": {"code": 2}}),
        ),
        (
            "add_note",
            json!({"message": "Waiting on CI", "externalTraceId": "t-1"}),
        ),
    ] {
        let first = env
            .call(tool, "s1", &format!("{tool}_1"), args.clone())
            .await
            .unwrap();
        let retry = env
            .call(tool, "s1", &format!("{tool}_1"), args)
            .await
            .unwrap();
        assert_eq!(first["eventId"], retry["eventId"], "{tool}");
    }
    assert_eq!(env.tasks().await, 1);
    // TASK_CREATED and the three entries, none twice.
    assert_eq!(env.events().await, 4);
    assert!(env.waits("s1").await.is_empty(), "logging never waits");
}

#[tokio::test]
async fn the_guide_is_a_tool_and_the_request_tools_point_to_it() {
    let env = env().await;
    let out = env
        .call("inbox_guide", "s1", "call_1", json!({}))
        .await
        .unwrap();
    assert_eq!(out["guide"], GUIDE);
    assert!(GUIDE.contains("end your\nturn") || GUIDE.contains("end your turn"));
    assert!(GUIDE.contains("Do not poll"));
    let toolsets = [TOOLSET.to_owned()];
    let names: Vec<&str> = env.registry.specs(&toolsets).map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "add_note",
            "get_decision",
            "inbox_guide",
            "record_action",
            "report_exception",
            "request_approval",
            "request_elicitation"
        ]
    );
    for spec in env.registry.specs(&toolsets) {
        if spec.name.starts_with("request_") {
            assert!(spec.description.contains("inbox_guide"), "{}", spec.name);
        }
    }
}

#[tokio::test]
async fn the_upkeep_also_sends_a_command_wait_a_crash_left_without_its_request() {
    let env = env().await;
    // As `command::InboxApprover` records it, then a crash before the request existed.
    let asked = json!({
        "kind": "command",
        "summary": "Run a dangerous command: git push --force",
        "keyValueContext": {"action": "command", "command": "git push --force"},
        "command": "git push --force",
        "workdir": ".",
        "patternKey": "git_force_push",
    });
    let (wait, _) = env
        .store
        .create_wait(&tern_store::NewWait {
            session_id: "s1",
            idem_key: "tern-wait:s1:call_t",
            tool_call_id: Some("call_t"),
            kind: WaitKind::Command,
            request: &asked.to_string(),
        })
        .await
        .unwrap();
    assert_eq!(env.tools.send_unsent().await.unwrap(), 1);
    let request_id = env
        .store
        .wait(&wait.id)
        .await
        .unwrap()
        .unwrap()
        .request_id
        .unwrap();
    let view = env.inbox.request_view(&request_id).await.unwrap();
    assert_eq!(
        view.summary.summary,
        "Run a dangerous command: git push --force"
    );
    assert_eq!(
        view.key_value_context.unwrap()["command"],
        "git push --force"
    );
    let created = env.created();
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].kind, "command");
    assert_eq!(created[0].request_id, request_id);

    // A later message's `call_t` (its wait keyed with the message's seq), whose request was
    // created before the crash but not stored: the upkeep finds that request with the
    // approver's key, and asks nothing twice.
    let (later, _) = env
        .store
        .create_wait(&tern_store::NewWait {
            session_id: "s1",
            idem_key: &tern_waits::command::wait_key("s1", "call_t@4"),
            tool_call_id: Some("call_t"),
            kind: WaitKind::Command,
            request: &asked.to_string(),
        })
        .await
        .unwrap();
    let task = env.client.session_task("s1", "default").await.unwrap();
    let made = env
        .client
        .create_request(
            RequestKind::Approval,
            // The body the approver sent (an idempotency key only replays the same body).
            json!({"projectName": task.project_name, "taskId": task.task_id,
                   "summary": "Run a dangerous command: git push --force",
                   "keyValueContext": asked["keyValueContext"]}),
            &tern_waits::command::request_key("s1", "call_t@4"),
        )
        .await
        .unwrap();
    assert_eq!(env.tools.send_unsent().await.unwrap(), 1);
    let stored = env.store.wait(&later.id).await.unwrap().unwrap();
    assert_eq!(stored.request_id.as_deref(), Some(made.as_str()));
    assert_eq!(env.request_count().await, 2);
}

/// Every inbox tool's generated schema is a function-calling object schema with its
/// required fields, and an example valid for it (every property set) deserialises into the
/// tool's `Args`.
#[tokio::test]
async fn generated_schemas_agree_with_the_args() {
    use tern_tools::tool::{parse_args, schema_problems};
    use tern_waits::tools::{
        ActionArgs, ApprovalArgs, DecisionArgs, ElicitationArgs, ExceptionArgs, GuideArgs, NoteArgs,
    };

    let env = env().await;
    let toolsets = [TOOLSET.to_owned()];
    let mut required = Vec::new();
    for spec in env.registry.specs(&toolsets) {
        assert_eq!(
            schema_problems(&spec.parameters),
            Vec::<String>::new(),
            "{}",
            spec.name
        );
        required.push((spec.name, spec.parameters.get("required").cloned()));
    }
    assert_eq!(
        required,
        [
            ("add_note", Some(json!(["message"]))),
            ("get_decision", Some(json!(["requestId"]))),
            ("inbox_guide", None),
            ("record_action", Some(json!(["description"]))),
            ("report_exception", Some(json!(["message"]))),
            ("request_approval", Some(json!(["summary"]))),
            ("request_elicitation", Some(json!(["summary", "fields"]))),
        ]
    );

    let example = |name: &str, example: Value| {
        let spec = env
            .registry
            .specs(&toolsets)
            .find(|s| s.name == name)
            .unwrap();
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(
            keys(&spec.parameters["properties"]),
            keys(&example),
            "{name}"
        );
        assert!(
            jsonschema::is_valid(&spec.parameters, &example),
            "{name}: {example}"
        );
        example
    };
    let a: ApprovalArgs = parse_args(
        "request_approval",
        example(
            "request_approval",
            json!({
                "attachments": ["a.txt"], "externalTraceId": "t",
                "keyValueContext": {"action": "deploy"},
                "recommendation": {"outcome": {"type": "APPROVE"}, "confidence": 0.5, "rationale": "r"},
                "summary": "Deploy",
            }),
        ),
    )
    .unwrap();
    assert_eq!(a.summary, "Deploy");
    assert_eq!(a.recommendation.unwrap().confidence, Some(0.5));
    let a: ElicitationArgs = parse_args(
        "request_elicitation",
        example(
            "request_elicitation",
            json!({
                "attachments": ["a.txt"], "externalTraceId": "t",
                "fields": [{"type": "Switch", "id": "ok", "label": "OK?", "required": true}],
                "keyValueContext": {"a": "b"},
                "recommendation": [{"fieldId": "ok", "value": true}],
                "summary": "Confirm",
            }),
        ),
    )
    .unwrap();
    assert_eq!((a.fields.len(), a.recommendation.unwrap().len()), (1, 1));
    let a: ActionArgs = parse_args(
        "record_action",
        example(
            "record_action",
            json!({
                "attachments": ["a.txt"], "description": "did it", "detail": {"n": 1},
                "externalTraceId": "t", "metadataPatch": {"set": {"k": "v"}, "unset": ["x"]},
                "transitionsTo": "done",
            }),
        ),
    )
    .unwrap();
    assert_eq!(a.transitions_to.as_deref(), Some("done"));
    assert!(a.metadata_patch.is_some());
    let a: ExceptionArgs = parse_args(
        "report_exception",
        example(
            "report_exception",
            json!({"detail": {}, "externalTraceId": "t", "message": "m", "transitionsTo": "x"}),
        ),
    )
    .unwrap();
    assert_eq!(a.message, "m");
    let a: NoteArgs = parse_args(
        "add_note",
        example("add_note", json!({"externalTraceId": "t", "message": "m"})),
    )
    .unwrap();
    assert_eq!(a.external_trace_id.as_deref(), Some("t"));
    let a: DecisionArgs = parse_args(
        "get_decision",
        example("get_decision", json!({"requestId": "r"})),
    )
    .unwrap();
    assert_eq!(a.request_id, "r");
    let _: GuideArgs = parse_args("inbox_guide", example("inbox_guide", json!({}))).unwrap();
}

/// A wrong type or a missing required field is refused before anything is asked, with the
/// tool and the field named.
#[tokio::test]
async fn bad_arguments_name_the_tool_and_the_field() {
    let env = env().await;
    let cases = [
        (
            "request_approval",
            json!({"summary": 5}),
            "/summary: 5 is not of type \"string\"",
        ),
        (
            "request_approval",
            json!({}),
            "\"summary\" is a required property",
        ),
        (
            "request_elicitation",
            json!({"summary": "x", "fields": {}}),
            "/fields",
        ),
        (
            "record_action",
            json!({"description": "x", "transitionsTo": 1}),
            "/transitionsTo",
        ),
        ("get_decision", json!({"requestId": ["r"]}), "/requestId"),
    ];
    for (i, (tool, args, mention)) in cases.into_iter().enumerate() {
        let e = err(env
            .call(tool, "s1", &format!("call_{i}"), args.clone())
            .await);
        assert!(
            e.starts_with(&format!("invalid arguments for `{tool}`: ")) && e.contains(mention),
            "{tool} {args}: {e:?} should mention {mention:?}"
        );
    }
    assert!(env.waits("s1").await.is_empty());
    assert_eq!(env.tasks().await, 0);
}
