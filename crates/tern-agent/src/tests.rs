//! Agent loop tests: every one drives the scripted fake model over real HTTP.

use super::*;
use serde_json::Value;
use tern_fake_model::{FakeModel, Reply};
use tern_llm::ClientConfig;
use tern_store::NewSession;
use tern_tools::DenyAll;

struct Env {
    _dir: tempfile::TempDir,
    work: PathBuf,
    fake: FakeModel,
    agent: Arc<Agent>,
    session: String,
}

async fn env_with(max_iterations: u32, stream: bool) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let store = Store::open(&dir.path().join("tern.db")).await.unwrap();
    let fake = FakeModel::start().await.unwrap();
    let mut cfg = ClientConfig::new(fake.base_url());
    cfg.backoff_base = Duration::from_millis(5);
    cfg.max_retries = 2;
    let agent = Arc::new(Agent::new(
        store.clone(),
        Ok(Client::new(cfg).unwrap()),
        Arc::new(Registry::builtin()),
        AgentSettings {
            model: "fake-model".into(),
            max_iterations,
            stream,
            system_prompt: None,
            limits: ToolLimits::default(),
            loop_guard: Default::default(),
            context_length: None,
            compaction: Default::default(),
        },
    ));
    let session = store
        .create_session(NewSession {
            source: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    Env {
        _dir: dir,
        work,
        fake,
        agent,
        session,
    }
}

async fn env() -> Env {
    env_with(60, false).await
}

impl Env {
    fn request(&self, input: &str) -> TurnRequest {
        TurnRequest {
            session_id: self.session.clone(),
            input: input.into(),
            input_appended: false,
            interrupt: Interrupt::new(),
            system_prompt: None,
            approver: Arc::new(DenyAll {
                reason: "nobody to ask in tests".into(),
            }),
            workdir: self.work.clone(),
            toolsets: vec!["terminal".into(), "file".into()],
            events: None,
            ticket: None,
        }
    }

    async fn turn(&self, input: &str) -> TurnOutcome {
        self.agent.run_turn(self.request(input)).await.unwrap()
    }

    async fn transcript(&self) -> Vec<Message> {
        self.agent.store().messages(&self.session).await.unwrap()
    }

    /// The text of every stored message, in order.
    async fn contents(&self) -> Vec<String> {
        self.transcript()
            .await
            .into_iter()
            .map(|m| m.content.unwrap())
            .collect()
    }
}

/// Every assistant tool call is followed by exactly one matching tool result before the next
/// non-tool message; the shape strict servers require.
fn assert_valid_transcript(msgs: &[Value]) {
    let mut i = 0;
    while i < msgs.len() {
        let m = &msgs[i];
        if m["role"] == "tool" {
            panic!("tool message without a preceding call at {i}: {msgs:#?}");
        }
        if let Some(calls) = m["tool_calls"].as_array() {
            let mut ids: Vec<&str> = calls.iter().map(|c| c["id"].as_str().unwrap()).collect();
            i += 1;
            while i < msgs.len() && msgs[i]["role"] == "tool" {
                let id = msgs[i]["tool_call_id"].as_str().unwrap();
                let pos = ids
                    .iter()
                    .position(|x| *x == id)
                    .expect("result for an unknown call");
                ids.remove(pos);
                i += 1;
            }
            assert!(
                ids.is_empty(),
                "calls without results: {ids:?} in {msgs:#?}"
            );
        } else {
            i += 1;
        }
    }
}

fn tool_content(m: &Message) -> Value {
    serde_json::from_str(m.content.as_deref().unwrap()).unwrap()
}

#[tokio::test]
async fn one_shot_turn_with_a_tool_call() {
    let e = env().await;
    e.fake
        .push(
            Reply::tool_call("c1", "terminal", r#"{"command":"echo hello-from-tool"}"#)
                .usage(20, 5),
        )
        .push(Reply::text("The command printed hello-from-tool.").usage(40, 8));
    let out = e.turn("run echo").await;
    assert_eq!(out.status, TurnStatus::Completed);
    assert_eq!(
        out.text.as_deref(),
        Some("The command printed hello-from-tool.")
    );
    assert_eq!(out.iterations, 2);
    assert_eq!(
        (out.usage.prompt_tokens, out.usage.completion_tokens),
        (60, 13)
    );

    let reqs = e.fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].messages()[0]["role"], "system");
    assert_eq!(reqs[0].messages()[1]["content"], "run echo");
    let mut names = reqs[0].tool_names();
    names.sort();
    assert_eq!(
        names,
        [
            "list_dir",
            "patch_file",
            "read_file",
            "search_files",
            "terminal",
            "write_file"
        ]
    );
    let tool_msg = &reqs[1].messages()[3];
    assert_eq!(tool_msg["role"], "tool");
    assert_eq!(tool_msg["tool_call_id"], "c1");
    let result: Value = serde_json::from_str(tool_msg["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["output"], "hello-from-tool\n");
    assert_eq!(result["exit_code"], 0);

    let t = e.transcript().await;
    let roles: Vec<_> = t.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
    );
    assert_eq!(t[1].prompt_tokens, Some(20));
    assert_eq!(t[2].tool_name.as_deref(), Some("terminal"));
    let s = e.agent.store().session(&e.session).await.unwrap();
    assert_eq!(s.status, SessionStatus::Idle);
    assert_eq!(s.title.as_deref(), Some("run echo"));
    assert_eq!((s.prompt_tokens, s.completion_tokens), (60, 13));
}

#[tokio::test]
async fn parallel_tool_calls_run_concurrently_and_keep_call_order() {
    let e = env().await;
    // Each command waits for the other's file: run one after the other, the first would
    // time out; run together, both succeed.
    let a = r#"{"command":"touch a; for i in $(seq 200); do [ -f b ] && echo A-saw-B && exit 0; sleep 0.05; done; exit 1","timeout":20}"#;
    let b = r#"{"command":"touch b; for i in $(seq 200); do [ -f a ] && echo B-saw-A && exit 0; sleep 0.05; done; exit 1","timeout":20}"#;
    e.fake
        .push(Reply::tool_calls([
            ("ca", "terminal", a.to_owned()),
            ("cb", "terminal", b.to_owned()),
        ]))
        .push(Reply::text("both done"));
    let out = e.turn("rendezvous").await;
    assert_eq!(out.status, TurnStatus::Completed);
    let t = e.transcript().await;
    assert_eq!(t[2].tool_call_id.as_deref(), Some("ca"));
    assert_eq!(t[3].tool_call_id.as_deref(), Some("cb"));
    assert_eq!(tool_content(&t[2])["output"], "A-saw-B\n");
    assert_eq!(tool_content(&t[3])["output"], "B-saw-A\n");
}

#[tokio::test]
async fn invalid_tool_arguments_become_tool_errors() {
    let e = env().await;
    e.fake
        .push(Reply::tool_calls([
            (
                "bad-json",
                "terminal",
                r#"{"command": "echo hi""#.to_owned(),
            ),
            ("bad-schema", "terminal", r#"{"cmd": "echo hi"}"#.to_owned()),
            ("unknown", "launch_rockets", "{}".to_owned()),
        ]))
        .push(Reply::text("I will fix my arguments"));
    let out = e.turn("go").await;
    assert_eq!(out.status, TurnStatus::Completed);
    let t = e.transcript().await;
    let errs: Vec<String> = t[2..5]
        .iter()
        .map(|m| tool_content(m)["error"].as_str().unwrap().to_owned())
        .collect();
    assert!(errs[0].contains("not valid JSON"), "{}", errs[0]);
    assert!(
        errs[1].contains("invalid arguments for `terminal`") && errs[1].contains("command"),
        "{}",
        errs[1]
    );
    assert!(
        errs[2].contains("unknown tool `launch_rockets`"),
        "{}",
        errs[2]
    );
    assert_valid_transcript(e.fake.requests()[1].messages());
}

#[tokio::test]
async fn model_500_then_success_is_retried() {
    let e = env().await;
    e.fake
        .push(Reply::error(500, "boom"))
        .push(Reply::rate_limited(0))
        .push(Reply::text("recovered"));
    let out = e.turn("hi").await;
    assert_eq!(out.text.as_deref(), Some("recovered"));
    assert_eq!(e.fake.requests().len(), 3);
}

#[tokio::test]
async fn model_errors_past_the_retry_budget_fail_the_turn_and_keep_the_input() {
    let e = env().await;
    for _ in 0..3 {
        e.fake.push(Reply::error(503, "down"));
    }
    e.fake.push(Reply::text("never"));
    let err = e.agent.run_turn(e.request("hi")).await.unwrap_err();
    assert!(
        matches!(err, AgentError::Model(LlmError::Http { status: 503, .. })),
        "{err}"
    );
    assert_eq!(e.fake.requests().len(), 3, "one try plus two retries");
    let t = e.transcript().await;
    assert_eq!(t.len(), 1, "the user's input is kept");
    assert_eq!(
        e.agent.store().session(&e.session).await.unwrap().status,
        SessionStatus::Idle
    );
    // A 400 is not retried.
    let e = env().await;
    e.fake
        .push(Reply::error(400, "bad request"))
        .push(Reply::text("x"));
    assert!(e.agent.run_turn(e.request("hi")).await.is_err());
    assert_eq!(e.fake.requests().len(), 1);
}

#[tokio::test]
async fn max_iterations_ends_the_turn_with_a_clear_message() {
    let e = env_with(3, false).await;
    e.fake
        .set_responder(|_| Reply::tool_call("loop", "list_dir", "{}"));
    let out = e.turn("loop forever").await;
    assert_eq!(out.status, TurnStatus::MaxIterations);
    assert_eq!(e.fake.requests().len(), 3);
    let text = out.text.unwrap();
    assert!(
        text.contains("limit of 3 model calls") && text.contains("max_iterations"),
        "{text}"
    );
    let t = e.transcript().await;
    assert_eq!(t.last().unwrap().content.as_deref(), Some(text.as_str()));
    // The transcript stays valid: the next turn works.
    e.fake.set_responder(|_| Reply::text("ok"));
    assert_eq!(e.turn("continue").await.status, TurnStatus::Completed);
    assert_valid_transcript(e.fake.requests().last().unwrap().messages());
}

#[tokio::test]
async fn interrupt_during_a_running_tool_leaves_a_valid_transcript() {
    let e = env().await;
    let pidfile = e.work.join("pid");
    let cmd = format!(
        // `>>`: a `>` onto a file needs an approval.
        r#"{{"command":"echo $$ >> {}; sleep 60"}}"#,
        pidfile.display()
    );
    e.fake.push(Reply::tool_calls([
        ("fast", "list_dir", "{}".to_owned()),
        ("slow", "terminal", cmd),
    ]));
    let mut req = e.request("start something long");
    let cancel = req.interrupt.clone();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    req.events = Some(Arc::new(move |ev| {
        let _ = tx.send(ev);
    }));
    let agent = e.agent.clone();
    let turn = tokio::spawn(async move { agent.run_turn(req).await });
    while let Some(ev) = rx.recv().await {
        if matches!(&ev, AgentEvent::ToolFinished { call_id, .. } if call_id == "fast") {
            break;
        }
    }
    for _ in 0..200 {
        if std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n')) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cancel.trigger(StopReason::ApiStop);
    let out = turn.await.unwrap().unwrap();
    assert_eq!(out.status, TurnStatus::Interrupted);
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        tern_test_support::process_ended(pid),
        "the tool's child process was killed"
    );
    let t = e.transcript().await;
    let last = &t[t.len() - 1];
    assert_eq!(last.content.as_deref(), Some(INTERRUPTED_MARKER));
    let slow = t
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("slow"))
        .unwrap();
    assert!(
        tool_content(slow)["error"]
            .as_str()
            .unwrap()
            .starts_with("interrupted")
    );
    assert_eq!(
        e.agent.store().session(&e.session).await.unwrap().status,
        SessionStatus::Idle
    );

    e.fake.push(Reply::text("fine, continuing"));
    let out = e.turn("what happened?").await;
    assert_eq!(out.text.as_deref(), Some("fine, continuing"));
    let msgs = e.fake.requests().last().unwrap().messages().to_vec();
    assert_valid_transcript(&msgs);
    assert_eq!(msgs.last().unwrap()["content"], "what happened?");
}

#[tokio::test]
async fn interrupt_during_the_model_call_aborts_it() {
    let e = env().await;
    e.fake.push(Reply::hang());
    let req = e.request("hello?");
    let cancel = req.interrupt.clone();
    let agent = e.agent.clone();
    let turn = tokio::spawn(async move { agent.run_turn(req).await });
    e.fake
        .wait_requests(1, Duration::from_secs(10))
        .await
        .unwrap();
    cancel.trigger(StopReason::ApiStop);
    let out = tokio::time::timeout(Duration::from_secs(10), turn)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(out.status, TurnStatus::Interrupted);
    let t = e.transcript().await;
    assert_eq!(
        t.iter()
            .map(|m| m.content.as_deref().unwrap())
            .collect::<Vec<_>>(),
        ["hello?", INTERRUPTED_MARKER]
    );
}

#[tokio::test]
async fn a_transcript_left_mid_turn_is_repaired() {
    let e = env().await;
    // What a kill -9 during a tool leaves behind: a call without a result.
    let store = e.agent.store();
    store
        .append_message(&e.session, &NewMessage::new(Role::User, "do it"))
        .await
        .unwrap();
    store
        .append_message(
            &e.session,
            &NewMessage {
                role: Some(Role::Assistant),
                tool_calls: vec![
                    tern_llm::ToolCall::new("done", "list_dir", "{}"),
                    tern_llm::ToolCall::new("lost", "terminal", r#"{"command":"sleep 100"}"#),
                ],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    store
        .append_message(
            &e.session,
            &NewMessage::tool_result("done", "list_dir", "{}"),
        )
        .await
        .unwrap();
    e.fake.push(Reply::text("resumed"));
    assert_eq!(e.turn("again").await.text.as_deref(), Some("resumed"));
    assert_valid_transcript(e.fake.requests()[0].messages());
    let t = e.transcript().await;
    assert_eq!(t[3].tool_call_id.as_deref(), Some("lost"));
    assert_eq!(t[4].content.as_deref(), Some(INTERRUPTED_MARKER));
}

#[tokio::test]
async fn streaming_keeps_reasoning_and_emits_deltas() {
    let e = env_with(60, true).await;
    e.fake
        .push(
            Reply::tool_call(
                "c1",
                "write_file",
                r#"{"path":"out.txt","content":"streamed"}"#,
            )
            .reasoning("need a file"),
        )
        .push(
            Reply::text("Wrote out.txt for you.")
                .reasoning_as_reasoning("done now")
                .usage(7, 3),
        );
    let deltas = Arc::new(Mutex::new(String::new()));
    let d2 = deltas.clone();
    let mut req = e.request("write it");
    req.events = Some(Arc::new(move |ev| {
        if let AgentEvent::AssistantDelta { text } = ev {
            d2.lock().unwrap().push_str(&text);
        }
    }));
    let out = e.agent.run_turn(req).await.unwrap();
    assert_eq!(out.text.as_deref(), Some("Wrote out.txt for you."));
    assert_eq!(*deltas.lock().unwrap(), "Wrote out.txt for you.");
    assert_eq!(
        std::fs::read_to_string(e.work.join("out.txt")).unwrap(),
        "streamed"
    );
    assert_eq!(e.fake.requests()[0].body["stream"], true);
    let t = e.transcript().await;
    assert_eq!(t[1].reasoning.as_deref(), Some("need a file"));
    assert_eq!(t[3].reasoning.as_deref(), Some("done now"));
    assert_eq!(t[3].completion_tokens, Some(3));
    assert!(
        e.fake.requests()[1]
            .messages()
            .iter()
            .all(|m| m.get("reasoning").is_none())
    );
}

#[tokio::test]
async fn inputs_during_a_turn_queue_behind_it() {
    let e = env().await;
    e.fake
        .push(Reply::text("first answer").delay(Duration::from_millis(300)))
        .push(Reply::text("second answer"));
    let (a, b) = (e.agent.clone(), e.agent.clone());
    let r1 = e.request("first");
    let r2 = e.request("second");
    let t1 = tokio::spawn(async move { a.run_turn(r1).await });
    e.fake
        .wait_requests(1, Duration::from_secs(5))
        .await
        .unwrap();
    let t2 = tokio::spawn(async move { b.run_turn(r2).await });
    assert_eq!(
        t1.await.unwrap().unwrap().text.as_deref(),
        Some("first answer")
    );
    assert_eq!(
        t2.await.unwrap().unwrap().text.as_deref(),
        Some("second answer")
    );
    let contents = e.contents().await;
    assert_eq!(
        contents,
        ["first", "first answer", "second", "second answer"]
    );
}

#[tokio::test]
async fn no_model_configured_says_what_to_set() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("tern.db")).await.unwrap();
    let sid = store
        .create_session(NewSession {
            source: "t".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    let agent = Agent::new(
        store.clone(),
        Err("no model is configured: set TERN_MODEL".into()),
        Arc::new(Registry::builtin()),
        AgentSettings {
            model: String::new(),
            max_iterations: 60,
            stream: false,
            system_prompt: None,
            limits: ToolLimits::default(),
            loop_guard: Default::default(),
            context_length: None,
            compaction: Default::default(),
        },
    );
    let err = agent
        .run_turn(TurnRequest {
            session_id: sid.clone(),
            input: "hi".into(),
            input_appended: false,
            interrupt: Interrupt::new(),
            system_prompt: None,
            approver: Arc::new(DenyAll {
                reason: String::new(),
            }),
            workdir: dir.path().into(),
            toolsets: vec![],
            events: None,
            ticket: None,
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("TERN_MODEL"));
    assert!(
        store.messages(&sid).await.unwrap().is_empty(),
        "nothing stored"
    );
}

/// Records every event; gates tool calls by a fixed verdict.
struct Recorder {
    events: Mutex<Vec<tern_hooks::Envelope>>,
    gate: Option<tern_hooks::ToolGate>,
}

impl tern_hooks::Subscriber for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn on_event(&self, event: &tern_hooks::Envelope) {
        self.events.lock().unwrap().push(event.clone());
    }
    fn gate_tool_call(&self, _event: &tern_hooks::Envelope) -> Option<tern_hooks::ToolGate> {
        self.gate.clone()
    }
}

impl Recorder {
    fn names(&self) -> Vec<&'static str> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.event.name())
            .collect()
    }
}

fn hooked(e: &mut Env, gate: Option<tern_hooks::ToolGate>) -> Arc<Recorder> {
    let rec = Arc::new(Recorder {
        events: Mutex::new(Vec::new()),
        gate,
    });
    let bus = Arc::new(HookBus::new());
    bus.subscribe(rec.clone());
    let mut cfg = ClientConfig::new(e.fake.base_url());
    cfg.backoff_base = Duration::from_millis(5);
    let agent = Agent::new(
        e.agent.store().clone(),
        Ok(Client::new(cfg).unwrap()),
        Arc::new(Registry::builtin()),
        e.agent.settings().clone(),
    );
    e.agent = Arc::new(agent.with_hooks(bus));
    rec
}

#[tokio::test]
async fn hooks_see_the_turn_in_order() {
    let mut e = env().await;
    let rec = hooked(&mut e, None);
    e.fake
        .push(Reply::tool_call("c1", "list_dir", "{}").usage(3, 2))
        .push(Reply::text("done"));
    e.turn("look around").await;
    assert_eq!(
        rec.names(),
        [
            "turn_start",
            "pre_llm_call",
            "post_llm_call",
            "pre_tool_call",
            "post_tool_call",
            "pre_llm_call",
            "post_llm_call",
            "turn_end"
        ]
    );
    let events = rec.events.lock().unwrap();
    let end = serde_json::to_value(&events[7]).unwrap();
    assert_eq!(end["status"], "completed");
    assert_eq!(end["iterations"], 2);
    assert_eq!(end["source"], "test");
    assert_eq!(end["usage"]["prompt_tokens"], 3);
    let pre = serde_json::to_value(&events[3]).unwrap();
    assert_eq!(
        (pre["tool"].as_str(), pre["call_id"].as_str()),
        (Some("list_dir"), Some("c1"))
    );
}

#[tokio::test]
async fn agent_loop_stopped_fires_once_with_the_reason_and_never_for_a_queued_turn() {
    let mut e = env().await;
    let rec = hooked(&mut e, None);
    e.fake.push(Reply::tool_call(
        "slow",
        "terminal",
        r#"{"command":"sleep 30"}"#,
    ));
    let running = e.request("long");
    let queued = e.request("queued behind it");
    let (i1, i2) = (running.interrupt.clone(), queued.interrupt.clone());
    let (a, b) = (e.agent.clone(), e.agent.clone());
    let t1 = tokio::spawn(async move { a.run_turn(running).await });
    e.fake
        .wait_requests(1, Duration::from_secs(10))
        .await
        .unwrap();
    let t2 = tokio::spawn(async move { b.run_turn(queued).await });
    while !rec.names().contains(&"pre_tool_call") {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The queued turn is stopped first: it never ran, so no event.
    i2.trigger(StopReason::ApiStop);
    i1.trigger(StopReason::SessionReset);
    i1.trigger(StopReason::ApiStop); // a second trigger changes nothing
    assert_eq!(t1.await.unwrap().unwrap().status, TurnStatus::Interrupted);
    assert_eq!(t2.await.unwrap().unwrap().status, TurnStatus::Interrupted);
    let events = rec.events.lock().unwrap();
    let stopped: Vec<_> = events
        .iter()
        .filter(|e| e.event.name() == "agent_loop_stopped")
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    assert_eq!(stopped.len(), 1, "{stopped:?}");
    assert_eq!(stopped[0]["reason"], "session_reset");
    assert_eq!(stopped[0]["invalidation_reason"], "session");
    assert_eq!(stopped[0]["session_id"], e.session.as_str());
    let turn_ends = events
        .iter()
        .filter(|e| e.event.name() == "turn_end")
        .count();
    assert_eq!(turn_ends, 1, "the queued turn never started");
    let names: Vec<_> = events.iter().map(|e| e.event.name()).collect();
    assert_eq!(
        &names[names.len() - 2..],
        ["agent_loop_stopped", "turn_end"],
        "subscribers hear of the interrupt first"
    );
}

#[tokio::test]
async fn a_pre_tool_call_block_reaches_the_model() {
    let mut e = env().await;
    hooked(
        &mut e,
        Some(tern_hooks::ToolGate::Block {
            hook: "policy".into(),
            message: "no listing on Fridays".into(),
        }),
    );
    e.fake
        .push(Reply::tool_call("c1", "list_dir", "{}"))
        .push(Reply::text("ok"));
    e.turn("list").await;
    let t = e.transcript().await;
    assert_eq!(
        tool_content(&t[2])["error"],
        "blocked by the policy hook: no listing on Fridays"
    );
}

#[tokio::test]
async fn a_pre_tool_call_allow_lets_a_dangerous_command_through_but_not_a_hard_line_one() {
    let mut e = env().await;
    hooked(
        &mut e,
        Some(tern_hooks::ToolGate::Allow {
            hook: "policy".into(),
        }),
    );
    std::fs::create_dir(e.work.join("build")).unwrap();
    e.fake
        .push(Reply::tool_calls([
            ("d", "terminal", r#"{"command":"rm -rf build"}"#.to_owned()),
            ("h", "terminal", r#"{"command":"rm -rf /"}"#.to_owned()),
        ]))
        .push(Reply::text("ok"));
    e.turn("clean").await;
    assert!(
        !e.work.join("build").exists(),
        "allowed without asking (the approver denies all)"
    );
    let t = e.transcript().await;
    assert!(
        tool_content(&t[3])["error"]
            .as_str()
            .unwrap()
            .starts_with("blocked")
    );
}

#[tokio::test]
async fn turns_run_in_the_order_their_queue_tickets_were_taken() {
    let e = env().await;
    e.fake
        .push(Reply::text("answer to first"))
        .push(Reply::text("answer to second"));
    let mut first = e.request("first");
    let mut second = e.request("second");
    first.ticket = Some(e.agent.enqueue(&e.session));
    second.ticket = Some(e.agent.enqueue(&e.session));
    // The second turn reaches run_turn first, yet waits for the first ticket.
    let a = e.agent.clone();
    let t2 = tokio::spawn(async move { a.run_turn(second).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        e.fake.requests().is_empty(),
        "the second turn must not start before the first"
    );
    let a = e.agent.clone();
    let t1 = tokio::spawn(async move { a.run_turn(first).await });
    assert_eq!(
        t1.await.unwrap().unwrap().text.as_deref(),
        Some("answer to first")
    );
    assert_eq!(
        t2.await.unwrap().unwrap().text.as_deref(),
        Some("answer to second")
    );
    let contents = e.contents().await;
    assert_eq!(
        contents,
        ["first", "answer to first", "second", "answer to second"]
    );
}

/// A tool that holds a store connection across an await: a write transaction kept open while
/// it waits, as a tool in the middle of its queries does.
struct HoldsConnection(Store);

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

impl tern_tools::Tool for HoldsConnection {
    const NAME: &'static str = "hold_connection";
    const TOOLSET: &'static str = "terminal";
    const DESCRIPTION: &'static str = "Holds a store connection for a moment.";
    type Args = NoArgs;

    async fn run(&self, _args: NoArgs, _ctx: tern_tools::ToolContext) -> tern_tools::ToolResult {
        let tx = self
            .0
            .begin_write()
            .await
            .map_err(|e| tern_tools::ToolError::new(e.to_string()))?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        tx.commit()
            .await
            .map_err(|e| tern_tools::ToolError::new(e.to_string()))?;
        Ok(serde_json::json!("held"))
    }
}

/// Storing a finished call's result while a later call of the same message holds a store
/// connection: the later call goes on being polled, gives its connection back, and the turn
/// ends. (Left unpolled, it kept the connection while the store waited for one: with the
/// gateway's small pool, a turn of a dozen inbox requests answered 500 after 30 s.)
#[tokio::test]
async fn a_result_is_stored_while_a_later_call_holds_a_connection() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    // One connection: the later call holds it when the first result is stored.
    let store = Store::open_with(&dir.path().join("tern.db"), 1)
        .await
        .unwrap();
    let fake = FakeModel::start().await.unwrap();
    let mut registry = Registry::builtin();
    registry.add(HoldsConnection(store.clone()));
    let agent = Agent::new(
        store.clone(),
        Ok(Client::new(ClientConfig::new(fake.base_url())).unwrap()),
        Arc::new(registry),
        AgentSettings {
            model: "fake-model".into(),
            max_iterations: 5,
            stream: false,
            system_prompt: None,
            limits: ToolLimits::default(),
            loop_guard: Default::default(),
            context_length: None,
            compaction: Default::default(),
        },
    );
    let session = store
        .create_session(NewSession {
            source: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    fake.push(Reply::tool_calls([
        ("c1", "list_dir", "{}".to_owned()),
        ("c2", "hold_connection", "{}".to_owned()),
    ]));
    fake.push(Reply::text("both done"));
    let env = Env {
        _dir: dir,
        work,
        fake,
        agent: Arc::new(agent),
        session,
    };
    let out = env.turn("go").await;
    assert_eq!(out.status, TurnStatus::Completed);
    assert_eq!(out.text.as_deref(), Some("both done"));
    let msgs = store.messages(&env.session).await.unwrap();
    let results: Vec<(&str, &str)> = msgs
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| {
            (
                m.tool_call_id.as_deref().unwrap_or(""),
                m.content.as_deref().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(results.len(), 2, "{msgs:?}");
    assert_eq!(results[0].0, "c1");
    assert_eq!(results[1], ("c2", "held"));
}

/// The loop guard against the fake model: a model that repeats a failing call reads the note
/// from the third repeat on, and the fifth ends the turn with a message, stored as the
/// answer, and `turn_end` failed with the reason.
#[tokio::test]
async fn a_model_repeating_a_failing_call_is_told_then_stopped() {
    let mut e = env().await;
    let rec = hooked(&mut e, None);
    for i in 1..=5 {
        // Same call each time; the id differs, as real models' ids do.
        e.fake.push(Reply::tool_call(
            &format!("c{i}"),
            "read_file",
            r#"{"path":"missing.txt"}"#,
        ));
    }
    e.fake.push(Reply::text("never asked for"));
    let out = e.turn("read missing.txt").await;
    assert_eq!(out.status, TurnStatus::LoopDetected);
    let text = out.text.clone().unwrap();
    assert!(
        text.contains("`read_file` 5 times") && text.contains("loop_guard"),
        "{text}"
    );
    assert_eq!(
        e.fake.remaining(),
        1,
        "no model call after the fifth repeat"
    );

    let t = e.transcript().await;
    let results: Vec<Value> = t
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(tool_content)
        .collect();
    assert_eq!(results.len(), 5);
    for (i, r) in results.iter().enumerate() {
        assert!(r["error"].is_string(), "{r}");
        assert_eq!(
            r.get("loop_warning").is_some(),
            i >= 2,
            "call {}: {r}",
            i + 1
        );
    }
    // The model read the note: the request after the third result carries it.
    let fourth = &e.fake.requests()[3];
    let last = fourth.messages().last().unwrap();
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .contains("change your approach"),
        "{last}"
    );
    assert_eq!(t.last().unwrap().content.as_deref(), Some(text.as_str()));
    assert_eq!(t.last().unwrap().role, Role::Assistant);

    let end = {
        let events = rec.events.lock().unwrap();
        let end = events.iter().find(|e| e.event.name() == "turn_end");
        serde_json::to_value(end.unwrap()).unwrap()
    };
    assert_eq!(end["status"], "failed");
    assert!(
        end["error"].as_str().unwrap().contains("loop guard"),
        "{end}"
    );

    // The session stays usable: the next turn gets the scripted answer left over.
    let out = e.turn("try again").await;
    assert_eq!(out.status, TurnStatus::Completed);
    assert_eq!(out.text.as_deref(), Some("never asked for"));
}

/// A model that keeps calling the same tool with other arguments is working, not looping.
#[tokio::test]
async fn a_model_that_varies_its_arguments_is_not_stopped() {
    let e = env().await;
    for i in 1..=8 {
        e.fake.push(Reply::tool_call(
            &format!("c{i}"),
            "read_file",
            format!(r#"{{"path":"missing-{i}.txt"}}"#),
        ));
    }
    e.fake.push(Reply::text("none of them exist"));
    let out = e.turn("read them all").await;
    assert_eq!(out.status, TurnStatus::Completed);
    assert_eq!(out.text.as_deref(), Some("none of them exist"));
    for m in e.transcript().await.iter().filter(|m| m.role == Role::Tool) {
        assert!(tool_content(m).get("loop_warning").is_none());
    }
}

/// `loop_guard = false`: the same call runs as often as the model asks.
#[tokio::test]
async fn the_loop_guard_can_be_turned_off() {
    let mut e = env().await;
    let mut settings = e.agent.settings().clone();
    settings.loop_guard.enabled = false;
    let mut cfg = ClientConfig::new(e.fake.base_url());
    cfg.backoff_base = Duration::from_millis(5);
    e.agent = Arc::new(Agent::new(
        e.agent.store().clone(),
        Ok(Client::new(cfg).unwrap()),
        Arc::new(Registry::builtin()),
        settings,
    ));
    for i in 1..=6 {
        e.fake.push(Reply::tool_call(
            &format!("c{i}"),
            "read_file",
            r#"{"path":"missing.txt"}"#,
        ));
    }
    e.fake.push(Reply::text("gave up"));
    let out = e.turn("read it").await;
    assert_eq!(out.status, TurnStatus::Completed);
}

/// `{"command":"echo a","command":"touch x"}`: which one was meant is a guess, so neither
/// runs and the model reads why.
#[tokio::test]
async fn duplicate_argument_keys_are_a_tool_error_and_nothing_runs() {
    let e = env().await;
    e.fake
        .push(Reply::tool_call(
            "dup",
            "terminal",
            r#"{"command":"echo a","command":"touch ran"}"#,
        ))
        .push(Reply::text("I will send each key once"));
    let out = e.turn("go").await;
    assert_eq!(out.status, TurnStatus::Completed);
    let t = e.transcript().await;
    let err = tool_content(&t[2])["error"].as_str().unwrap().to_owned();
    assert!(err.contains("duplicate key `command`"), "{err}");
    assert!(!e.work.join("ran").exists());
}

/// A stream that ends in an error event after some text is asked for again; the agent tells
/// its consumer to drop the text streamed so far, and stores only the whole answer.
#[tokio::test]
async fn a_broken_stream_is_retried_and_its_partial_text_discarded() {
    let e = env_with(60, true).await;
    e.fake
        .push(Reply::raw_sse([
            r#"{"choices":[{"delta":{"content":"The answer is"}}]}"#,
            r#"{"error":{"code":500,"message":"Failed to parse input at pos 14: <tool_call>","type":"server_error"}}"#,
        ]))
        .push(Reply::text("The answer is 42."));
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let mut req = e.request("what is it?");
    req.events = Some(Arc::new(move |x| ev.lock().unwrap().push(x)));
    let out = e.agent.run_turn(req).await.unwrap();
    assert_eq!(out.text.as_deref(), Some("The answer is 42."));
    let events = events.lock().unwrap().clone();
    let mut shown = String::new();
    let mut saw_discard = false;
    for ev in &events {
        match ev {
            AgentEvent::AssistantDelta { text } => shown.push_str(text),
            AgentEvent::AnswerDiscarded => {
                saw_discard = true;
                shown.clear();
            }
            _ => {}
        }
    }
    assert!(saw_discard, "{events:?}");
    assert_eq!(shown, "The answer is 42.");
    let discard = events
        .iter()
        .position(|x| *x == AgentEvent::AnswerDiscarded)
        .unwrap();
    assert!(
        matches!(events[discard + 1], AgentEvent::ModelRetry { .. }),
        "{events:?}"
    );
    let t = e.transcript().await;
    assert_eq!(t.len(), 2);
    assert_eq!(t[1].content.as_deref(), Some("The answer is 42."));
}

mod compaction;
mod images;

/// A toolset's state outside the transcript, as a `SessionContext` gives it.
struct Noted;

impl tern_tools::SessionContext for Noted {
    fn prompt<'a>(&'a self, session_id: &'a str) -> tern_tools::BoxFuture<'a, Option<String>> {
        Box::pin(async move { Some(format!("NOTE for {session_id}: the list")) })
    }
}

#[tokio::test]
async fn each_turn_shows_the_enabled_toolsets_contexts_in_the_system_prompt() {
    let e = env().await;
    let mut registry = Registry::builtin();
    registry.add_context("file", Arc::new(Noted));
    let agent = Agent::new(
        e.agent.store().clone(),
        Ok(Client::new(ClientConfig::new(e.fake.base_url())).unwrap()),
        Arc::new(registry),
        e.agent.settings().clone(),
    );
    e.fake.push(Reply::text("one")).push(Reply::text("two"));
    agent.run_turn(e.request("first")).await.unwrap();
    let mut without = e.request("second");
    without.toolsets = vec!["terminal".into()];
    agent.run_turn(without).await.unwrap();
    let requests = e.fake.requests();
    let system = |i: usize| {
        requests[i].messages()[0]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(
        system(0).contains(&format!("NOTE for {}: the list", e.session)),
        "{}",
        system(0)
    );
    assert!(!system(1).contains("NOTE for"), "{}", system(1));
}

#[tokio::test]
async fn the_window_is_configured_else_what_the_server_says_else_the_default() {
    let e = env().await;
    // The fake model says nothing about its window yet: the default, and asked again later.
    assert_eq!(
        e.agent.context_window().await,
        (window::DEFAULT_CONTEXT_LENGTH, WindowSource::Default)
    );
    e.fake
        .set_model_info("fake-model", serde_json::json!({"context_length": 8192}));
    let fresh = |context_length| {
        let mut settings = e.agent.settings().clone();
        settings.context_length = context_length;
        Agent::new(
            e.agent.store().clone(),
            Ok(Client::new(ClientConfig::new(e.fake.base_url())).unwrap()),
            Arc::new(Registry::builtin()),
            settings,
        )
    };
    let asked = fresh(None);
    assert_eq!(asked.context_window().await, (8192, WindowSource::Server));
    // Kept once known: the server changing its answer is not asked again.
    e.fake
        .set_model_info("fake-model", serde_json::json!({"context_length": 4096}));
    assert_eq!(asked.context_window().await, (8192, WindowSource::Server));
    assert_eq!(
        fresh(Some(32768)).context_window().await,
        (32768, WindowSource::Configured)
    );
}

#[tokio::test]
async fn the_toolset_filter_narrows_a_turn_by_its_sessions_source() {
    let mut e = env().await;
    // `file` only for sessions from `cron`; `test` (this session's source) goes without it.
    let filter: ToolsetFilter = Arc::new(|source: &str, toolsets: &mut Vec<String>| {
        if source != "cron" {
            toolsets.retain(|t| t != "file");
        }
    });
    e.agent = Arc::new((*e.agent).clone().with_toolset_filter(filter));
    // The model calls a file tool anyway: refused, as for any tool the turn does not have.
    e.fake
        .push(Reply::tool_call("c1", "read_file", r#"{"path":"x.txt"}"#))
        .push(Reply::text("no file tools here"));
    std::fs::write(e.work.join("x.txt"), "secret-contents").unwrap();
    let out = e.turn("read x.txt").await;
    assert_eq!(out.status, TurnStatus::Completed);
    let reqs = e.fake.requests();
    assert_eq!(reqs[0].tool_names(), ["terminal"]);
    let tool_msg = reqs[1]
        .messages()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap();
    let text = tool_msg["content"].as_str().unwrap();
    assert!(!text.contains("secret-contents"), "{text}");
    assert!(text.contains("read_file"), "{text}");

    // A session from `cron`, same agent and same requested toolsets: it has them.
    let cron = e
        .agent
        .store()
        .create_session(NewSession {
            source: "cron".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    e.fake.push(Reply::text("ok"));
    let mut req = e.request("list");
    req.session_id = cron;
    e.agent.run_turn(req).await.unwrap();
    let mut names = e.fake.requests()[2].tool_names();
    names.sort();
    assert_eq!(
        names,
        [
            "list_dir",
            "patch_file",
            "read_file",
            "search_files",
            "terminal",
            "write_file"
        ]
    );
}
