//! Dangerous commands through the inbox, with a real store, the embedded inbox and the real
//! `terminal` tool: asking creates one wait and one request; decisions become grants that
//! let exactly what the reviewer chose run.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tern_config::Home;
use tern_hooks::{Envelope, HookBus, HookEvent, Subscriber};
use tern_inbox::Inbox;
use tern_inbox::review::{RequestFilter, RequestStatus};
use tern_inbox::{Outcome, OutcomeType};
use tern_store::{GrantScope, NewSession, Store, WaitKind, WaitStatus};
use tern_tools::danger::{Verdict, check_command};
use tern_tools::{ApprovalDecision, ApprovalRequest, Approver, BoxFuture, ToolContext, ToolLimits};
use tern_waits::client::{ClientError, EmbeddedInbox, InboxClient, RequestKind};
use tern_waits::command::{self, InboxApprover};
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

struct Env {
    _dir: tempfile::TempDir,
    store: Store,
    inbox: Inbox,
    home: Home,
    workdir: PathBuf,
    events: Arc<Events>,
    approver: Arc<InboxApprover>,
}

async fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let home = Home {
        root: dir.path().join("home"),
    };
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
    let approver = Arc::new(
        InboxApprover::new(
            store.clone(),
            Arc::new(EmbeddedInbox::new(inbox.clone())),
            ["git push --force".to_owned()],
        )
        .with_hooks(hooks)
        .with_home(home.clone()),
    );
    Env {
        _dir: dir,
        store,
        inbox,
        home,
        workdir,
        events,
        approver,
    }
}

impl Env {
    fn req(&self, session: &str, call: &str, command: &str) -> ApprovalRequest {
        let Verdict::Dangerous { key, description } = check_command(command) else {
            panic!("{command} is not dangerous");
        };
        ApprovalRequest {
            session_id: session.into(),
            call_id: call.into(),
            call_seq: 0,
            command: command.into(),
            workdir: self.workdir.clone(),
            pattern_key: key,
            description,
            context: Vec::new(),
        }
    }

    async fn ask(&self, session: &str, call: &str, command: &str) -> ApprovalDecision {
        self.ask_at(session, call, 0, command).await
    }

    /// [`Env::ask`] for the call of the message at `seq` in the transcript.
    async fn ask_at(&self, session: &str, call: &str, seq: i64, command: &str) -> ApprovalDecision {
        let mut req = self.req(session, call, command);
        req.call_seq = seq;
        self.approver.approve(req).await
    }

    /// Asks, expects the pending answer, and returns the request id it names.
    async fn ask_pending(&self, session: &str, call: &str, command: &str) -> String {
        self.ask_pending_at(session, call, 0, command).await
    }

    /// [`Env::ask_pending`] for the call of the message at `seq` in the transcript.
    async fn ask_pending_at(&self, session: &str, call: &str, seq: i64, command: &str) -> String {
        let d = self.ask_at(session, call, seq, command).await;
        let ApprovalDecision::Pending { message: reason } = d else {
            panic!("expected a pending answer, got {d:?}");
        };
        assert!(reason.contains("End your turn now"), "{reason}");
        let wait = self
            .store
            .wait_by_request(
                reason
                    .split("request ")
                    .nth(1)
                    .and_then(|r| r.split(' ').next())
                    .unwrap(),
            )
            .await
            .unwrap()
            .expect("the reason names the wait's request");
        wait.request_id.unwrap()
    }

    async fn pending_requests(&self) -> u64 {
        self.inbox.pending_count().await.unwrap()
    }

    /// A reviewer decides; the wait becomes ready and `on_decided` runs, as the resumer does.
    async fn decide(&self, request_id: &str, kind: OutcomeType, code: Option<&str>) -> Value {
        let outcome = Outcome {
            kind,
            reason_code: code.map(str::to_owned),
            note: None,
        };
        let result = self
            .inbox
            .decide_approval(request_id, outcome, "ana")
            .await
            .unwrap();
        let result = serde_json::to_value(result).unwrap();
        let wait = self
            .store
            .wait_by_request(request_id)
            .await
            .unwrap()
            .unwrap();
        let ready = self
            .store
            .wait_ready(&wait.id, &result.to_string(), Some("ana"))
            .await
            .unwrap()
            .unwrap();
        // As the gateway's resumer does, before it delivers the decision.
        let hook = command::resume_hook(self.approver.clone());
        hook(ready.clone(), result.clone()).await.unwrap();
        // It may do it again after a crash: still one grant.
        let grant = command::on_decided(&self.store, &ready, &result)
            .await
            .unwrap();
        assert_eq!(grant.is_some(), tern_waits::decision::approves(&result));
        result
    }

    fn tool_ctx(&self, session: &str, call: &str, approver: Arc<dyn Approver>) -> ToolContext {
        ToolContext {
            session_id: session.into(),
            call_id: call.into(),
            call_seq: 0,
            workdir: self.workdir.clone(),
            cancel: CancellationToken::new(),
            approver,
            limits: ToolLimits::default(),
            preapproved: false,
            subagents: None,
            toolsets: Default::default(),
            report: Default::default(),
        }
    }
}

#[tokio::test]
async fn asking_records_a_wait_and_a_request_and_a_retry_finds_them() {
    let e = env().await;
    let id = e.ask_pending("s1", "call-1", "rm -r build").await;

    let waits = e.store.session_waits("s1", true).await.unwrap();
    assert_eq!(waits.len(), 1);
    let w = &waits[0];
    assert_eq!(w.kind, WaitKind::Command);
    assert_eq!(w.status, WaitStatus::Pending);
    assert_eq!(w.idem_key, "tern-wait:s1:call-1");
    assert_eq!(w.request_id.as_deref(), Some(id.as_str()));
    let asked: Value = serde_json::from_str(&w.request).unwrap();
    assert_eq!(asked["kind"], "command");
    assert_eq!(asked["command"], "rm -r build");
    assert_eq!(asked["patternKey"], "recursive_delete");
    assert_eq!(asked["keyValueContext"]["action"], "command");
    assert!(asked.get("taskId").is_none(), "the inbox tools' shape");

    let view = e.inbox.request_view(&id).await.unwrap();
    let ctx = view.key_value_context.unwrap();
    assert_eq!(ctx["action"], "command");
    assert_eq!(ctx["command"], "rm -r build");
    assert_eq!(ctx["workdir"], e.workdir.to_string_lossy());
    assert_eq!(ctx["pattern"], "recursive_delete (recursive delete)");
    assert!(view.summary.summary.contains("rm -r build"));
    assert_eq!(view.summary.status, RequestStatus::Pending);

    // The same call again (a retry): the same wait and request, nothing new.
    let again = e.ask_pending("s1", "call-1", "rm -r build").await;
    assert_eq!(again, id);
    assert_eq!(e.store.session_waits("s1", false).await.unwrap().len(), 1);
    assert_eq!(e.pending_requests().await, 1);
    // Both requests of the session share its task.
    let other = e.ask_pending("s1", "call-2", "chmod -R 777 x").await;
    assert_ne!(other, id);
    let list = e
        .inbox
        .list_requests(&RequestFilter::default())
        .await
        .unwrap();
    let tasks: std::collections::HashSet<_> =
        list.items.iter().map(|r| r.task_id.clone()).collect();
    assert_eq!(tasks.len(), 1);

    let created: Vec<_> = e
        .events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|ev| match ev {
            HookEvent::WaitCreated(c) => Some(c.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        created.len(),
        2,
        "one event per request, none for the retry"
    );
    assert_eq!(created[0].request_id, id);
    assert_eq!(created[0].kind, "command");
    assert_eq!(created[0].source, "api");
    assert_eq!(created[0].wait_id, w.id);
}

/// Some models send `call_1` every turn: a later message's `call_1` is another call, which
/// gets a request of its own, while the same message's `call_1` run again (a retry after a
/// crash) still finds its own.
#[tokio::test]
async fn a_call_id_reused_by_a_later_message_gets_its_own_request() {
    let e = env().await;
    let first = e.ask_pending_at("s1", "call_1", 2, "rm -r build").await;
    assert_eq!(
        e.ask_pending_at("s1", "call_1", 2, "rm -r build").await,
        first,
        "a retry of the same call"
    );
    e.decide(&first, OutcomeType::Reject, None).await;

    let later = e.ask_pending_at("s1", "call_1", 6, "rm -r dist").await;
    assert_ne!(later, first);
    let view = e.inbox.request_view(&later).await.unwrap();
    assert_eq!(view.summary.status, RequestStatus::Pending);
    assert_eq!(view.key_value_context.unwrap()["command"], "rm -r dist");
    let keys: Vec<String> = e
        .store
        .session_waits("s1", false)
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.idem_key)
        .collect();
    assert_eq!(keys, ["tern-wait:s1:call_1@2", "tern-wait:s1:call_1@6"]);
    assert_eq!(e.pending_requests().await, 1);
}

#[tokio::test]
async fn once_runs_exactly_once_then_asks_again() {
    let e = env().await;
    let id = e.ask_pending("s1", "call-1", "rm -r build").await;
    e.decide(&id, OutcomeType::Approve, None).await;

    // Another session, another command, another directory: not covered.
    e.ask_pending("s2", "c", "rm -r build").await;
    e.ask_pending("s1", "c2", "rm -r dist").await;
    let mut elsewhere = e.req("s1", "c3", "rm -r build");
    elsewhere.workdir = Path::new("/").to_path_buf();
    assert!(!e.approver.approve(elsewhere).await.allows());

    assert_eq!(
        e.ask("s1", "call-9", "rm -r build").await,
        ApprovalDecision::Once
    );
    let id2 = e.ask_pending("s1", "call-10", "rm -r build").await;
    assert_ne!(id2, id, "used up: a new request");
    let grants = e.store.session_command_grants("s1").await.unwrap();
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0].scope, GrantScope::Once);
    assert_eq!(grants[0].decided_by.as_deref(), Some("ana"));
}

#[tokio::test]
async fn a_session_grant_covers_the_pattern_in_that_session_only() {
    let e = env().await;
    let id = e.ask_pending("s1", "call-1", "rm -r build").await;
    e.decide(&id, OutcomeType::EditAndApprove, Some("session"))
        .await;
    for (call, cmd) in [("a", "rm -r build"), ("b", "rm -rf dist"), ("c", "rm -r x")] {
        assert_eq!(e.ask("s1", call, cmd).await, ApprovalDecision::Session);
    }
    e.ask_pending("s1", "d", "chmod -R 777 x").await;
    e.ask_pending("s2", "e", "rm -rf dist").await;
}

#[tokio::test]
async fn always_goes_to_the_allowlist() {
    let e = env().await;
    assert_eq!(
        e.ask("s1", "call-0", "git push --force").await,
        ApprovalDecision::Always,
        "allowlisted from the configuration"
    );
    assert_eq!(e.pending_requests().await, 0);

    let id = e.ask_pending("s1", "call-1", "rm -r build").await;
    e.decide(&id, OutcomeType::Approve, Some("ALWAYS")).await;
    let config = std::fs::read_to_string(e.home.config_path()).unwrap();
    assert!(config.contains("\"rm -r build\""), "{config}");
    assert_eq!(
        e.ask("s2", "call-2", "rm -r build").await,
        ApprovalDecision::Always
    );
    // Not the pattern: another recursive delete still asks.
    e.ask_pending("s1", "call-3", "rm -r dist").await;

    // A new approver (a restarted gateway) learns it from the store.
    let fresh = InboxApprover::new(
        e.store.clone(),
        Arc::new(EmbeddedInbox::new(e.inbox.clone())),
        [],
    );
    assert_eq!(fresh.sync_allowlist().await.unwrap(), 1);
    assert_eq!(
        fresh.approve(e.req("s2", "x", "rm -r build")).await,
        ApprovalDecision::Always
    );
}

#[tokio::test]
async fn a_rejection_grants_nothing() {
    let e = env().await;
    let id = e.ask_pending("s1", "call-1", "rm -r build").await;
    let result = e.decide(&id, OutcomeType::Reject, Some("session")).await;
    let hint = tern_waits::decision::command_message_hint(&result);
    assert!(hint.contains("rejected") && hint.contains("Do not run it again"));
    assert!(
        e.store
            .session_command_grants("s1")
            .await
            .unwrap()
            .is_empty()
    );
    e.ask_pending("s1", "call-2", "rm -r build").await;
}

struct Counting(Arc<InboxApprover>, AtomicUsize);

impl Approver for Counting {
    fn approve(&self, req: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.approve(req)
    }
}

#[tokio::test]
async fn through_the_terminal_tool_hard_line_is_never_offered_and_approval_runs_once() {
    let e = env().await;
    let counting = Arc::new(Counting(e.approver.clone(), AtomicUsize::new(0)));
    let run = |call: &str, cmd: &str| {
        tern_tools::terminal::run(
            tern_tools::terminal::TerminalArgs {
                command: cmd.to_owned(),
                ..Default::default()
            },
            e.tool_ctx("s1", call, counting.clone()),
        )
    };

    for cmd in [
        "rm -rf /",
        "rm -rf ~",
        "mkfs.ext4 /dev/sda1",
        "dd if=/dev/zero of=/dev/sda",
    ] {
        let err = run("h", cmd).await.unwrap_err();
        assert!(format!("{err:?}").contains("hard-line"), "{err:?}");
    }
    assert_eq!(counting.1.load(Ordering::SeqCst), 0, "never offered");
    // And the approver itself refuses one, should anything else ask it.
    assert!(
        !e.approver
            .approve(ApprovalRequest {
                session_id: "s1".into(),
                call_id: "h2".into(),
                call_seq: 0,
                command: "rm -rf /".into(),
                workdir: e.workdir.clone(),
                pattern_key: "delete_root",
                description: "x",
                context: Vec::new(),
            })
            .await
            .allows()
    );
    assert!(e.store.session_waits("s1", false).await.unwrap().is_empty());
    assert_eq!(e.pending_requests().await, 0);

    let cmd = "mkdir -p out && echo ran >> out/log && rm -r build; true";
    let err = run("call-1", cmd).await.unwrap_err();
    let text = format!("{err:?}");
    assert!(text.contains("End your turn now"), "{text}");
    assert!(!e.workdir.join("out").exists(), "not run while pending");
    let id = e.store.session_waits("s1", true).await.unwrap()[0]
        .request_id
        .clone()
        .unwrap();
    e.decide(&id, OutcomeType::Approve, None).await;

    run("call-2", cmd).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(e.workdir.join("out/log")).unwrap(),
        "ran\n"
    );
    assert!(run("call-3", cmd).await.is_err(), "once means once");
    assert_eq!(
        std::fs::read_to_string(e.workdir.join("out/log")).unwrap(),
        "ran\n"
    );
}

/// An inbox that cannot be reached.
struct Down;

impl InboxClient for Down {
    fn session_task<'a>(
        &'a self,
        _: &'a str,
        project: &'a str,
    ) -> BoxFuture<'a, Result<tern_waits::client::TaskRef, ClientError>> {
        let project = project.to_owned();
        Box::pin(async move {
            Ok(tern_waits::client::TaskRef {
                task_id: "t".into(),
                project_name: project,
            })
        })
    }
    fn create_request<'a>(
        &'a self,
        _: RequestKind,
        _: Value,
        _: &'a str,
    ) -> BoxFuture<'a, Result<String, ClientError>> {
        Box::pin(async { Err(ClientError::Unreachable("connection refused".into())) })
    }
    fn log<'a>(
        &'a self,
        _: tern_waits::client::LogKind,
        _: Value,
        _: &'a str,
    ) -> BoxFuture<'a, Result<String, ClientError>> {
        Box::pin(async { Err(ClientError::Unreachable("down".into())) })
    }
    fn result<'a>(
        &'a self,
        _: RequestKind,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, ClientError>> {
        Box::pin(async { Err(ClientError::Unreachable("down".into())) })
    }
    fn withdraw<'a>(
        &'a self,
        _: RequestKind,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(async { Err(ClientError::Unreachable("down".into())) })
    }
    fn upload<'a>(&'a self, _: &'a Path, _: &'a str) -> BoxFuture<'a, Result<String, ClientError>> {
        Box::pin(async { Err(ClientError::Unreachable("down".into())) })
    }
}

#[tokio::test]
async fn an_unreachable_inbox_denies_and_leaves_no_wait() {
    let e = env().await;
    let approver = InboxApprover::new(e.store.clone(), Arc::new(Down), []);
    let d = approver.approve(e.req("s1", "call-1", "rm -r build")).await;
    let ApprovalDecision::Deny { reason } = d else {
        panic!("{d:?}")
    };
    assert!(reason.contains("nobody was asked"), "{reason}");
    assert!(e.store.session_waits("s1", false).await.unwrap().is_empty());
    assert!(!e.store.has_open_waits("s1").await.unwrap());
}
