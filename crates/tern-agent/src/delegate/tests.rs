//! `delegate_task` against the scripted fake model over real HTTP: the parent and its
//! children are real turns of the same agent, their sessions in a real store.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;
use tern_fake_model::{FakeModel, Gate, Reply};
use tern_llm::{Client, ClientConfig, Role};
use tern_store::{Message, NewSession, SessionStatus, Store};
use tern_test_support::{PATIENCE, eventually};
use tern_tools::{DenyAll, Registry, ToolLimits};

use super::*;
use crate::{AgentSettings, INTERRUPTED_MARKER, TurnOutcome};

const OWNER: &str = "key-of-the-parent";

struct Env {
    _dir: tempfile::TempDir,
    work: PathBuf,
    fake: FakeModel,
    agent: Agent,
    store: Store,
    session: String,
}

async fn env(delegation: DelegateSettings) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let store = Store::open(&dir.path().join("tern.db")).await.unwrap();
    let fake = FakeModel::start().await.unwrap();
    let mut cfg = ClientConfig::new(fake.base_url());
    cfg.backoff_base = Duration::from_millis(5);
    cfg.max_retries = 0;
    let mut registry = Registry::builtin();
    register(&mut registry);
    let agent = Agent::new(
        store.clone(),
        Ok(Client::new(cfg).unwrap()),
        Arc::new(registry),
        AgentSettings {
            model: "fake-model".into(),
            max_iterations: 10,
            stream: false,
            system_prompt: None,
            limits: ToolLimits::default(),
            loop_guard: Default::default(),
            context_length: None,
            compaction: Default::default(),
        },
    )
    .with_delegation(delegation);
    let session = store
        .create_session(NewSession {
            source: "api".into(),
            owner: Some(OWNER.into()),
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
        store,
        session,
    }
}

impl Env {
    fn request(&self, input: &str, interrupt: Interrupt) -> TurnRequest {
        TurnRequest {
            session_id: self.session.clone(),
            input: input.into(),
            input_appended: false,
            interrupt,
            system_prompt: None,
            approver: Arc::new(DenyAll {
                reason: "nobody to ask in tests".into(),
            }),
            workdir: self.work.clone(),
            toolsets: vec!["terminal".into(), "file".into(), TOOLSET.into()],
            events: None,
            ticket: None,
        }
    }

    async fn turn(&self, input: &str) -> TurnOutcome {
        self.agent
            .run_turn(self.request(input, Interrupt::new()))
            .await
            .unwrap()
    }

    async fn children(&self, of: &str) -> Vec<tern_store::Session> {
        self.store.children(of).await.unwrap()
    }

    async fn transcript(&self, of: &str) -> Vec<Message> {
        self.store.messages(of).await.unwrap()
    }
}

/// Every hook event, in order.
#[derive(Default)]
struct Recorder(Mutex<Vec<HookEvent>>);

impl tern_hooks::Subscriber for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }
    fn on_event(&self, event: &tern_hooks::Envelope) {
        self.0.lock().unwrap().push(event.event.clone());
    }
}

impl Env {
    fn record_hooks(&mut self) -> Arc<Recorder> {
        let rec = Arc::new(Recorder::default());
        let bus = Arc::new(tern_hooks::HookBus::new());
        bus.subscribe(rec.clone());
        self.agent = self.agent.clone().with_hooks(bus);
        rec
    }
}

fn settings(max_concurrent: usize, max_depth: u32) -> DelegateSettings {
    DelegateSettings {
        max_iterations: 5,
        max_concurrent,
        max_depth,
    }
}

fn content(m: &Message) -> &str {
    m.content.as_deref().unwrap_or_default()
}

fn json_of(m: &Message) -> Value {
    serde_json::from_str(content(m)).unwrap()
}

/// A request from a child session: its system prompt makes it a subagent.
fn is_child(body: &Value) -> bool {
    body["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.contains("You are a subagent"))
}

/// The first user message of a request: a child's task.
fn first_user(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn one_child_answers_and_its_transcript_is_stored_with_the_parent_set() {
    let mut e = env(DelegateSettings::default()).await;
    let hooks = e.record_hooks();
    e.fake
        .push(Reply::tool_call(
            "d1",
            "delegate_task",
            r#"{"goal":"Count the files in the project","context":"They are in ./work"}"#,
        ))
        .push(Reply::text("There are 3 files.").usage(7, 3))
        .push(Reply::text("The subagent counted 3 files."));
    let out = e.turn("please delegate the counting").await;
    assert_eq!(out.status, TurnStatus::Completed);
    assert_eq!(out.text.as_deref(), Some("The subagent counted 3 files."));

    // The parent's tool result: the child's answer and its session.
    let parent = e.transcript(&e.session).await;
    let result = json_of(&parent[2]);
    assert_eq!(parent[2].tool_name.as_deref(), Some("delegate_task"));
    assert_eq!(result["status"], "completed");
    assert_eq!(result["summary"], "There are 3 files.");
    let child_id = result["session_id"].as_str().unwrap().to_owned();

    // The child: its own session, linked to the parent, owned by the parent's owner.
    let children = e.children(&e.session).await;
    assert_eq!(children.len(), 1);
    let child = &children[0];
    assert_eq!(child.id, child_id);
    assert_eq!(child.parent_id.as_deref(), Some(e.session.as_str()));
    assert_eq!(child.source, CHILD_SOURCE);
    assert_eq!(child.owner.as_deref(), Some(OWNER));
    assert_eq!(child.status, SessionStatus::Idle);
    assert_eq!(
        child.title.as_deref(),
        Some("Count the files in the project")
    );
    assert_eq!((child.prompt_tokens, child.completion_tokens), (7, 3));
    let t = e.transcript(&child.id).await;
    let roles: Vec<_> = t.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant]);
    assert_eq!(
        content(&t[0]),
        "Count the files in the project\n\nContext:\nThey are in ./work"
    );
    assert_eq!(content(&t[1]), "There are 3 files.");

    // What the child's model saw: its task alone, the parent's tools but delegation.
    let reqs = e.fake.requests();
    let child_req = &reqs[1];
    assert!(is_child(&child_req.body));
    assert!(
        !child_req
            .messages()
            .iter()
            .any(|m| m["content"] == "please delegate the counting"),
        "the child saw the parent's conversation"
    );
    let mut tools = child_req.tool_names();
    tools.sort();
    assert_eq!(
        tools,
        [
            "list_dir",
            "patch_file",
            "read_file",
            "search_files",
            "terminal",
            "write_file"
        ]
    );
    assert!(reqs[0].tool_names().contains(&"delegate_task".to_owned()));

    // The child's session and turn are announced as their own, linked to the parent.
    let events = hooks.0.lock().unwrap().clone();
    assert!(
        events
            .iter()
            .any(|ev| matches!(ev, HookEvent::SessionStart(s)
        if s.session_id == child.id && s.source == CHILD_SOURCE
            && s.parent_id.as_deref() == Some(e.session.as_str())))
    );
    assert!(events.iter().any(|ev| matches!(ev, HookEvent::TurnEnd(t)
        if t.session_id == child.id && t.source == CHILD_SOURCE)));
}

/// Two calls in one answer, one of them a batch of two tasks: three children, at most two
/// at once. Each child's reply is held at its own gate, so the test decides when one ends.
#[tokio::test]
async fn parallel_children_run_together_up_to_the_cap_and_the_rest_wait() {
    let e = env(settings(2, 1)).await;
    let gates: HashMap<&'static str, Gate> = ["alpha", "beta", "gamma"]
        .into_iter()
        .map(|g| (g, Gate::new()))
        .collect();
    // For each child request: how many children had arrived and not been let go before it.
    let released = Arc::new(Mutex::new(0usize));
    let arrived = Arc::new(Mutex::new(Vec::<(String, usize)>::new()));
    let (gates2, released2, arrived2) = (gates.clone(), released.clone(), arrived.clone());
    e.fake.set_responder(move |body| {
        if is_child(body) {
            // The task's first line (a context follows it in the message).
            let goal = first_user(body)
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned();
            let mut arrived = arrived2.lock().unwrap();
            let running = arrived.len() - *released2.lock().unwrap();
            arrived.push((goal.clone(), running + 1));
            let gate = &gates2[goal.split(' ').next().unwrap()];
            Reply::text(format!("{goal}: done")).held(gate)
        } else {
            Reply::text("all three are done")
        }
    });
    e.fake.push(Reply::tool_calls([
        ("d1", "delegate_task", r#"{"goal":"alpha task"}"#.to_owned()),
        (
            "d2",
            "delegate_task",
            r#"{"tasks":[{"goal":"beta task"},{"goal":"gamma task","context":"c"}]}"#.to_owned(),
        ),
    ]));
    let turn = tokio::spawn({
        let agent = e.agent.clone();
        let req = e.request("do three things", Interrupt::new());
        async move { agent.run_turn(req).await.unwrap() }
    });

    // The parent's request and two children's, held.
    e.fake.wait_requests(3, PATIENCE).await.unwrap();
    let first_two: Vec<String> = arrived
        .lock()
        .unwrap()
        .iter()
        .map(|a| a.0.clone())
        .collect();
    assert_eq!(first_two.len(), 2, "{first_two:?}");
    // The third child waits for a place before its session is made.
    assert_eq!(e.children(&e.session).await.len(), 2);
    // Let one of them finish: only then may the third start.
    *released.lock().unwrap() += 1;
    gates[first_two[0].split(' ').next().unwrap()].open();
    e.fake.wait_requests(4, PATIENCE).await.unwrap();
    for g in gates.values() {
        g.open();
    }
    let out = turn.await.unwrap();
    assert_eq!(out.status, TurnStatus::Completed);

    let arrived = arrived.lock().unwrap().clone();
    assert_eq!(arrived.len(), 3, "{arrived:?}");
    let most = arrived.iter().map(|a| a.1).max().unwrap();
    assert_eq!(most, 2, "children running at once: {arrived:?}");

    // Results in call order, each the answer of its own child.
    let parent = e.transcript(&e.session).await;
    assert_eq!(parent[2].tool_call_id.as_deref(), Some("d1"));
    assert_eq!(json_of(&parent[2])["summary"], "alpha task: done");
    let batch = json_of(&parent[3]);
    assert_eq!(parent[3].tool_call_id.as_deref(), Some("d2"));
    assert_eq!(batch["results"][0]["task_index"], 0);
    assert_eq!(batch["results"][0]["summary"], "beta task: done");
    assert_eq!(batch["results"][1]["summary"], "gamma task: done");
    let mut titles: Vec<String> = e
        .children(&e.session)
        .await
        .into_iter()
        .map(|c| c.title.unwrap())
        .collect();
    titles.sort();
    assert_eq!(titles, ["alpha task", "beta task", "gamma task"]);
}

#[tokio::test]
async fn an_interrupt_of_the_parent_interrupts_its_children() {
    let mut e = env(settings(2, 1)).await;
    let hooks = e.record_hooks();
    e.fake.set_responder(|body| {
        if is_child(body) {
            Reply::hang()
        } else {
            Reply::text("unexpected")
        }
    });
    e.fake.push(Reply::tool_call(
        "d1",
        "delegate_task",
        r#"{"tasks":[{"goal":"one"},{"goal":"two"},{"goal":"three"}]}"#,
    ));
    let interrupt = Interrupt::new();
    let turn = tokio::spawn({
        let agent = e.agent.clone();
        let req = e.request("work in parallel", interrupt.clone());
        async move { agent.run_turn(req).await.unwrap() }
    });
    // Two children are talking to the model; the third waits for a place.
    e.fake.wait_requests(3, PATIENCE).await.unwrap();
    interrupt.trigger(StopReason::UserInterrupt);
    let out = turn.await.unwrap();
    assert_eq!(out.status, TurnStatus::Interrupted);
    let parent = e.transcript(&e.session).await;
    assert_eq!(content(parent.last().unwrap()), INTERRUPTED_MARKER);

    // Each child that ran ends as an interrupted turn does; the one that waited never
    // started, so nothing of it is stored.
    let children = e.children(&e.session).await;
    assert_eq!(children.len(), 2, "{children:?}");
    for c in &children {
        eventually("the child's turn to end", async || {
            let s = e.store.session(&c.id).await.ok()?;
            (s.status == SessionStatus::Idle).then_some(())
        })
        .await;
        let t = e.transcript(&c.id).await;
        assert_eq!(content(t.last().unwrap()), INTERRUPTED_MARKER, "{t:?}");
        // Stopped for the parent's reason.
        let events = hooks.0.lock().unwrap().clone();
        assert!(
            events
                .iter()
                .any(|ev| matches!(ev, HookEvent::AgentLoopStopped(s)
                if s.session_id == c.id && s.reason == StopReason::UserInterrupt)),
            "{events:?}"
        );
    }
    assert_eq!(e.fake.requests().len(), 3);
}

/// With `max_depth = 2` a child may delegate once more; the grandchild gets no
/// `delegate_task`, so the nesting ends there.
#[tokio::test]
async fn children_delegate_only_above_the_depth_limit() {
    let e = env(settings(3, 2)).await;
    e.fake
        .push(Reply::tool_call(
            "p1",
            "delegate_task",
            r#"{"goal":"level one"}"#,
        ))
        .push(Reply::tool_call(
            "c1",
            "delegate_task",
            r#"{"goal":"level two"}"#,
        ))
        .push(Reply::text("deepest answer"))
        .push(Reply::text("relayed: deepest answer"))
        .push(Reply::text("final"));
    let out = e.turn("go deep").await;
    assert_eq!(out.text.as_deref(), Some("final"));
    let reqs = e.fake.requests();
    assert_eq!(reqs.len(), 5);
    let has_delegate = |i: usize| reqs[i].tool_names().contains(&"delegate_task".to_owned());
    assert!(
        has_delegate(0) && has_delegate(1),
        "parent and child may delegate"
    );
    assert!(!has_delegate(2), "the grandchild may not");

    let child = &e.children(&e.session).await[0];
    let grandchild = &e.children(&child.id).await[0];
    assert_eq!(grandchild.parent_id.as_deref(), Some(child.id.as_str()));
    assert_eq!(grandchild.owner.as_deref(), Some(OWNER));
    let parent = e.transcript(&e.session).await;
    assert_eq!(json_of(&parent[2])["summary"], "relayed: deepest answer");
}

/// At the default depth (1) a child cannot be given `delegate`, nor a toolset its parent
/// lacks; the model reads why, and no child is stored.
#[tokio::test]
async fn a_child_cannot_get_delegate_at_the_limit_nor_a_toolset_its_parent_lacks() {
    let e = env(DelegateSettings::default()).await;
    e.fake
        .push(Reply::tool_calls([
            (
                "d1",
                "delegate_task",
                r#"{"goal":"nest","toolsets":["delegate"]}"#.to_owned(),
            ),
            (
                "d2",
                "delegate_task",
                r#"{"goal":"ask","toolsets":["inbox"]}"#.to_owned(),
            ),
            ("d3", "delegate_task", r#"{"context":"no goal"}"#.to_owned()),
        ]))
        .push(Reply::text("understood"));
    e.turn("try").await;
    let parent = e.transcript(&e.session).await;
    let errors: Vec<String> = parent[2..5]
        .iter()
        .map(|m| json_of(m)["error"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        errors[0].contains("cannot have the toolset `delegate`"),
        "{errors:?}"
    );
    assert!(errors[0].contains("terminal, file"), "{errors:?}");
    assert!(
        errors[1].contains("cannot have the toolset `inbox`"),
        "{errors:?}"
    );
    assert!(errors[2].contains("give `goal`"), "{errors:?}");
    assert!(e.children(&e.session).await.is_empty());
}

/// A child whose model call fails is a tool error naming its session, which is kept.
#[tokio::test]
async fn a_failed_child_is_a_tool_error_the_model_reads() {
    let e = env(DelegateSettings::default()).await;
    e.fake
        .push(Reply::tool_call(
            "d1",
            "delegate_task",
            r#"{"goal":"doomed"}"#,
        ))
        .push(Reply::error(400, "the child's request was refused"))
        .push(Reply::text("the subagent failed"));
    let out = e.turn("delegate something doomed").await;
    assert_eq!(out.text.as_deref(), Some("the subagent failed"));
    let parent = e.transcript(&e.session).await;
    let error = json_of(&parent[2])["error"].as_str().unwrap().to_owned();
    let child = &e.children(&e.session).await[0];
    assert!(error.contains(&child.id), "{error}");
    assert!(error.contains("the child's request was refused"), "{error}");
    assert_eq!(child.status, SessionStatus::Idle);
}

/// The child works in the parent's directory, asks the parent's approver, and stops at its
/// own iteration budget (1 here, while the parent may make 10 calls).
#[tokio::test]
async fn a_child_uses_the_parents_workdir_and_approver_within_its_own_budget() {
    let e = env(DelegateSettings {
        max_iterations: 1,
        ..DelegateSettings::default()
    })
    .await;
    e.fake
        .push(Reply::tool_call(
            "d1",
            "delegate_task",
            r#"{"goal":"look around"}"#,
        ))
        .push(Reply::tool_calls([
            ("t1", "terminal", r#"{"command":"pwd"}"#.to_owned()),
            ("t2", "terminal", r#"{"command":"rm -rf ./old"}"#.to_owned()),
        ]))
        .push(Reply::text("the subagent ran out of steps"));
    let out = e.turn("delegate a look around").await;
    assert_eq!(out.status, TurnStatus::Completed);

    let parent = e.transcript(&e.session).await;
    let error = json_of(&parent[2])["error"].as_str().unwrap().to_owned();
    assert!(error.contains("limit of 1 model calls"), "{error}");
    let child = &e.children(&e.session).await[0];
    let t = e.transcript(&child.id).await;
    let pwd = json_of(&t[2]);
    assert_eq!(
        pwd["output"].as_str().unwrap().trim(),
        e.work.canonicalize().unwrap().to_str().unwrap()
    );
    let rm = content(&t[3]);
    assert!(rm.contains("nobody to ask in tests"), "{rm}");
    assert!(content(t.last().unwrap()).contains("max_iterations"));
    assert_eq!(e.fake.requests().len(), 3);
}

#[test]
fn the_schema_is_fit_for_function_calling_and_takes_hermes_arguments() {
    let spec = tern_tools::tool::spec_of::<DelegateTask>();
    assert_eq!(
        tern_tools::tool::schema_problems(&spec.parameters),
        Vec::<String>::new()
    );
    let props = spec.parameters["properties"].as_object().unwrap();
    let mut names: Vec<&str> = props.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["context", "goal", "tasks", "toolsets"]);
    assert_eq!(
        spec.parameters["properties"]["tasks"]["items"]["required"],
        serde_json::json!(["goal"])
    );
    let batch: DelegateArgs = tern_tools::tool::parse_args(
        "delegate_task",
        serde_json::json!({"tasks": [{"goal": "a", "toolsets": ["file"]}]}),
    )
    .unwrap();
    assert_eq!(
        batch.tasks.unwrap()[0].toolsets.as_deref(),
        Some(&["file".to_owned()][..])
    );
}

/// A later turn of a child (a wait of its resumed by the gateway, which asks for all of its
/// toolsets) keeps to the child's toolsets: a child cannot win back what it was not given.
#[tokio::test]
async fn a_childs_later_turns_keep_to_its_toolsets_whatever_they_ask() {
    let e = env(DelegateSettings::default()).await;
    e.fake
        .push(Reply::tool_call(
            "d1",
            "delegate_task",
            r#"{"goal":"look around","toolsets":["file"]}"#,
        ))
        .push(Reply::text("looked"))
        .push(Reply::text("done"));
    e.turn("delegate it").await;
    let child = e.children(&e.session).await.remove(0);
    assert_eq!(child.toolsets.as_deref(), Some(&["file".to_owned()][..]));

    e.fake.push(Reply::text("resumed"));
    let mut resumed = e.request("a decision arrived", Interrupt::new());
    resumed.session_id = child.id.clone();
    resumed.toolsets = vec!["terminal".into(), "file".into(), TOOLSET.into()];
    e.agent.run_turn(resumed).await.unwrap();
    let last = e.fake.requests().pop().unwrap();
    let tools = last.tool_names();
    assert!(tools.contains(&"read_file".to_owned()), "{tools:?}");
    assert!(
        !tools.contains(&"terminal".to_owned()) && !tools.contains(&"delegate_task".to_owned()),
        "{tools:?}"
    );
}

#[tokio::test]
async fn a_child_keeps_what_the_toolset_filter_left_its_parent() {
    let mut e = env(DelegateSettings::default()).await;
    // `file` only for `api` sessions (the parent's source), never for `delegate` ones: the
    // child still gets it, through its parent.
    let filter: crate::ToolsetFilter = Arc::new(|source: &str, toolsets: &mut Vec<String>| {
        if source != "api" {
            toolsets.retain(|t| t != "file");
        }
    });
    e.agent = e.agent.clone().with_toolset_filter(filter);
    e.fake
        .push(Reply::tool_call(
            "d1",
            "delegate_task",
            r#"{"goal":"Read the notes"}"#,
        ))
        .push(Reply::text("read them"))
        .push(Reply::text("done"));
    assert_eq!(e.turn("delegate").await.status, TurnStatus::Completed);
    let reqs = e.fake.requests();
    assert!(is_child(&reqs[1].body));
    let tools = reqs[1].tool_names();
    assert!(tools.iter().any(|t| t == "read_file"), "{tools:?}");
}
