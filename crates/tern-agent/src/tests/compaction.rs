//! Compaction against the scripted fake model over real HTTP, with a small context window
//! that the fake model enforces on every request with its own token count.

use super::*;
use crate::compact::{COMPACTOR_MARKER, ELIDED_PREFIX, SUMMARY_HEADER};
use std::sync::atomic::Ordering::SeqCst;
use tern_store::{CompactionReason, NewWait, WaitKind};

const TASK: &str = "the task: keep a log of the nightly builds";
const REQUEST_ID: &str = "req-7f3a-approve-deploy";
const TODO_LINE: &str = "todo [in progress] read every build log";

/// A toolset's critical facts, as the todo list gives them.
struct Todo;

impl tern_tools::SessionContext for Todo {
    fn critical<'a>(&'a self, _session_id: &'a str) -> tern_tools::BoxFuture<'a, Vec<String>> {
        Box::pin(async { vec![TODO_LINE.to_owned()] })
    }
}

struct Compacting {
    e: Env,
    rec: Arc<Recorder>,
    /// Problems the responder saw in requests, checked by the test.
    problems: Arc<Mutex<Vec<String>>>,
    /// How many of the agent's next requests the model refuses as too long.
    refuse: Arc<std::sync::atomic::AtomicUsize>,
    summaries: Arc<Mutex<Vec<Value>>>,
}

fn is_summary_request(body: &Value) -> bool {
    body["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.starts_with(COMPACTOR_MARKER))
}

/// An agent with a `window`-token context (the fake model enforces the same window), the
/// `file` toolset with the todo context, and an open approval wait on the session.
async fn compacting(window: u64, compaction: CompactionSettings) -> Compacting {
    let mut e = env().await;
    e.fake.set_context_window(Some(window));
    let mut registry = Registry::builtin();
    registry.add_context("file", Arc::new(Todo));
    let rec = Arc::new(Recorder {
        events: Mutex::new(Vec::new()),
        gate: None,
    });
    let bus = Arc::new(HookBus::new());
    bus.subscribe(rec.clone());
    let mut cfg = ClientConfig::new(e.fake.base_url());
    cfg.backoff_base = Duration::from_millis(5);
    cfg.max_retries = 0;
    let settings = AgentSettings {
        context_length: Some(window),
        compaction,
        ..e.agent.settings().clone()
    };
    e.agent = Arc::new(
        Agent::new(
            e.agent.store().clone(),
            Ok(Client::new(cfg).unwrap()),
            Arc::new(registry),
            settings,
        )
        .with_hooks(bus),
    );
    let store = e.agent.store();
    let key = format!("tern-wait:{}:call-ask@2", e.session);
    let (wait, _) = store
        .create_wait(&NewWait {
            session_id: &e.session,
            idem_key: &key,
            tool_call_id: Some("call-ask"),
            kind: WaitKind::Approval,
            request: r#"{"summary":"deploy build 41 to production"}"#,
        })
        .await
        .unwrap();
    store.set_wait_request(&wait.id, REQUEST_ID).await.unwrap();
    for i in 0..40 {
        std::fs::write(
            e.work.join(format!("build-{i}.log")),
            format!("build {i}: ok\n").repeat(280),
        )
        .unwrap();
    }
    Compacting {
        e,
        rec,
        problems: Arc::new(Mutex::new(Vec::new())),
        refuse: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        summaries: Arc::new(Mutex::new(Vec::new())),
    }
}

impl Compacting {
    fn request(&self, input: &str) -> TurnRequest {
        TurnRequest {
            toolsets: vec!["file".into()],
            ..self.e.request(input)
        }
    }

    /// Answers like a working agent: a user message gets a `read_file` of a large log, the
    /// result a short text; a summary request gets `summary(body)`. Every agent request is
    /// checked for the task, and once compacted, for the summary with the open wait.
    fn respond(&self, summary: impl Fn(&Value) -> Reply + Send + Sync + 'static) {
        let problems = self.problems.clone();
        let summaries = self.summaries.clone();
        let refuse = self.refuse.clone();
        self.e.fake.set_responder(move |body| {
            let msgs = body["messages"].as_array().unwrap();
            if is_summary_request(body) {
                summaries.lock().unwrap().push(body.clone());
                return summary(body);
            }
            if refuse
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Reply::context_overflow(4000, 9000);
            }
            let mut problems = problems.lock().unwrap();
            if msgs[1]["content"] != TASK {
                problems.push(format!("the task is not the first message: {}", msgs[1]));
            }
            if let Some(s) = msgs.iter().find_map(|m| {
                m["content"]
                    .as_str()
                    .filter(|c| c.starts_with(SUMMARY_HEADER))
            }) && !(s.contains(REQUEST_ID) && s.contains(TODO_LINE))
            {
                problems.push(format!("a summary without the critical context: {s}"));
            }
            let last = msgs.last().unwrap();
            if last["role"] == "tool" {
                Reply::text("noted the build status")
            } else {
                let n = msgs.len() % 40;
                Reply::tool_call(
                    &format!("call-{}", msgs.len()),
                    "read_file",
                    format!(r#"{{"path":"build-{n}.log"}}"#),
                )
            }
        });
    }

    async fn turn(&self, input: &str) -> TurnOutcome {
        self.e.agent.run_turn(self.request(input)).await.unwrap()
    }

    fn problems(&self) -> Vec<String> {
        self.problems.lock().unwrap().clone()
    }

    fn compact_events(&self) -> Vec<Value> {
        self.rec
            .events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| matches!(e.event.name(), "pre_compact" | "post_compact"))
            .map(|e| serde_json::from_str(&e.to_json()).unwrap())
            .collect()
    }
}

fn structured_summary(body: &Value) -> Reply {
    let prompt = body["messages"][1]["content"].as_str().unwrap();
    let updates = prompt.contains("<previous-summary>");
    Reply::text(format!(
        "## Goal\nKeep a log of the nightly builds.\n## Constraints and preferences\nnone\n\
         ## Progress\n### Done\nread build logs{}\n### In progress\nreading logs\n### Blocked\n\
         deploy waits for approval\n## Key decisions\nnone\n## Files touched\nbuild-*.log\n\
         ## Next steps\nread the next log\n## Critical context\n- {REQUEST_ID}",
        if updates { " (updated)" } else { "" }
    ))
}

#[tokio::test]
async fn a_long_session_in_a_small_window_stays_within_it_and_keeps_the_task_and_the_waits() {
    let c = compacting(8000, CompactionSettings::default()).await;
    c.respond(structured_summary);
    let store = c.e.agent.store().clone();
    let sid = c.e.session.clone();
    let mut compactions = 0;
    for turn in 0..500 {
        let input = if turn == 0 {
            TASK.to_owned()
        } else {
            format!("turn {turn}: and the next log")
        };
        let o = c.turn(&input).await;
        assert_eq!(o.status, TurnStatus::Completed, "turn {turn}: {o:?}");
        let now = store.compactions(&sid).await.unwrap();
        if now.len() > compactions {
            compactions = now.len();
            // After every compaction: the task first, the summary (if any) with the open
            // wait and the todo, a valid transcript.
            let active = store.messages(&sid).await.unwrap();
            assert_eq!(active[0].content.as_deref(), Some(TASK), "turn {turn}");
            if let Some(s) = active.iter().find(|m| m.compaction_id.is_some()) {
                let text = s.content.as_deref().unwrap();
                assert!(
                    text.contains(REQUEST_ID) && text.contains(TODO_LINE),
                    "{text}"
                );
            }
            let sent: Vec<Value> = active
                .iter()
                .map(|m| serde_json::to_value(m.to_request()).unwrap())
                .collect();
            assert_valid_transcript(&sent);
        }
    }
    assert_eq!(c.e.fake.take_violations(), Vec::<String>::new());
    assert!(c.e.fake.largest_prompt() <= 8000);
    assert_eq!(c.problems(), Vec::<String>::new());
    let all = store.compactions(&sid).await.unwrap();
    let summarised = all.iter().filter(|x| x.messages_compacted > 0).count();
    let cheap = all
        .iter()
        .filter(|x| x.messages_compacted == 0 && x.outputs_elided > 0)
        .count();
    assert!(
        summarised >= 10 && cheap >= 1,
        "{summarised} summaries, {cheap} cheap passes"
    );
    // Every summary after the first updated the previous one.
    let summaries = c.summaries.lock().unwrap().clone();
    assert_eq!(summaries.len(), summarised);
    for s in &summaries[1..] {
        let prompt = s["messages"][1]["content"].as_str().unwrap();
        assert!(prompt.contains("<previous-summary>"), "{prompt}");
    }
    // Nothing was lost: every message is stored, the full outputs too.
    let kept = store.messages_all(&sid).await.unwrap();
    assert_eq!(kept.len(), 500 * 4);
    assert!(kept.iter().filter(|m| m.compacted).count() > 1500);
    assert!(
        kept.iter().filter(|m| m.role == Role::Tool).all(|m| m
            .content
            .as_deref()
            .unwrap()
            .contains("build"))
    );
    assert!(kept.iter().any(|m| {
        m.model_content
            .as_deref()
            .is_some_and(|p| p.starts_with(ELIDED_PREFIX))
    }));
    let events = c.compact_events();
    assert_eq!(events.len(), 2 * all.len());
    let post = events
        .iter()
        .find(|e| e["event"] == "post_compact")
        .unwrap();
    assert!(
        post["tokens_after"].as_u64() < post["tokens_before"].as_u64(),
        "{post}"
    );
    assert_eq!(post["reason"], "auto");
}

#[tokio::test]
async fn a_context_length_error_compacts_and_retries_once() {
    let c = compacting(100_000, CompactionSettings::default()).await;
    c.respond(structured_summary);
    for turn in 0..6 {
        let input = if turn == 0 {
            TASK.to_owned()
        } else {
            format!("turn {turn}")
        };
        c.turn(&input).await;
    }
    let store = c.e.agent.store();
    assert!(store.compaction(&c.e.session).await.unwrap().is_none());
    // The server's window is smaller than tern was told: it refuses the next request.
    c.refuse.store(1, SeqCst);
    let before = c.e.fake.requests().len();
    let o = c.turn("turn 6: one more").await;
    assert_eq!(o.status, TurnStatus::Completed, "{o:?}");
    let compaction = store.compaction(&c.e.session).await.unwrap().unwrap();
    assert_eq!(compaction.reason, CompactionReason::Overflow);
    assert!(compaction.messages_compacted > 0);
    let requests = c.e.fake.requests();
    // refused, summary, the same call again, then the turn's second call.
    assert_eq!(requests.len() - before, 4);
    assert!(is_summary_request(&requests[before + 1].body));
    let retried = requests[before + 2].messages();
    assert!(retried.iter().any(|m| {
        m["content"]
            .as_str()
            .is_some_and(|s| s.starts_with(SUMMARY_HEADER))
    }));
    assert_eq!(retried.last().unwrap()["content"], "turn 6: one more");
    // Refused again after compacting: the turn ends with a message that says so.
    c.refuse.store(2, SeqCst);
    let o = c.turn("turn 7").await;
    assert_eq!(o.status, TurnStatus::ContextFull, "{o:?}");
    assert!(
        o.text.as_deref().unwrap().contains("context window"),
        "{o:?}"
    );
    let last = c.e.transcript().await.pop().unwrap();
    assert_eq!(last.content, o.text);
}

#[tokio::test]
async fn a_failing_summary_backs_off_instead_of_retrying_every_call() {
    let c = compacting(8000, CompactionSettings::default()).await;
    c.respond(|_| Reply::error(400, "the summariser is broken"));
    let mut ended = None;
    for turn in 0..60 {
        let input = if turn == 0 {
            TASK.to_owned()
        } else {
            format!("turn {turn}")
        };
        let o = c.turn(&input).await;
        if o.status != TurnStatus::Completed {
            ended = Some(o);
            break;
        }
    }
    let o = ended.expect("the window filled up");
    // One failed summary, then no more tries while backing off: the turns went on while the
    // prompt fitted, and the one that would not fit ended with a clear message, never
    // sending a request over the window.
    assert_eq!(o.status, TurnStatus::ContextFull, "{o:?}");
    let text = o.text.unwrap();
    assert!(text.contains("backing off"), "{text}");
    assert_eq!(c.summaries.lock().unwrap().len(), 1);
    assert_eq!(c.e.fake.take_violations(), Vec::<String>::new());
    let failed: Vec<Value> = c
        .compact_events()
        .into_iter()
        .filter(|e| e["event"] == "post_compact" && !e["error"].is_null())
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0]["error"]
            .as_str()
            .unwrap()
            .contains("summariser is broken")
    );
    // Asked for explicitly, it runs despite the backoff (and fails the same way, saying so).
    let out =
        c.e.agent
            .compact(&c.e.session, &["file".to_owned()])
            .await
            .unwrap();
    assert!(
        matches!(out, CompactOutcome::Failed { ref error } if error.contains("broken")),
        "{out:?}"
    );
    assert_eq!(c.summaries.lock().unwrap().len(), 2);
    let all = c.e.agent.store().compactions(&c.e.session).await.unwrap();
    assert!(
        all.iter().all(|x| x.summary.is_none()),
        "only cheap passes: {all:?}"
    );
}

#[tokio::test]
async fn compaction_on_demand_summarises_and_a_second_one_updates_the_summary() {
    let c = compacting(100_000, CompactionSettings::default()).await;
    c.respond(structured_summary);
    let agent = &c.e.agent;
    let toolsets = ["file".to_owned()];
    c.turn(TASK).await;
    // Only the task and its exchange: nothing to compact.
    let out = agent.compact(&c.e.session, &toolsets).await.unwrap();
    assert!(
        matches!(out, CompactOutcome::NothingToCompact { .. }),
        "{out:?}"
    );
    for turn in 1..5 {
        c.turn(&format!("turn {turn}")).await;
    }
    let out = agent.compact(&c.e.session, &toolsets).await.unwrap();
    let CompactOutcome::Compacted(stats) = out else {
        panic!("{out:?}")
    };
    assert!(
        stats.summarised && stats.messages_compacted > 0,
        "{stats:?}"
    );
    assert!(stats.tokens_after < stats.tokens_before, "{stats:?}");
    let active = c.e.transcript().await;
    assert_eq!(active[0].content.as_deref(), Some(TASK));
    assert!(active[1].compaction_id.is_some());
    assert_eq!(
        active[1].role,
        Role::Assistant,
        "alternates with the tail's user message: {active:#?}"
    );
    assert_eq!(active[2].content.as_deref(), Some("turn 4"));
    let events = c.compact_events();
    assert_eq!(events[0]["event"], "pre_compact");
    assert_eq!(events[0]["reason"], "manual");
    assert!(events[0]["turn_id"].is_null());
    // The next turn sends the summary as reference material, then goes on.
    let o = c.turn("turn 5").await;
    assert_eq!(o.status, TurnStatus::Completed);
    let sent = c.e.fake.requests().last().unwrap().messages().to_vec();
    let summary = sent[2]["content"].as_str().unwrap();
    assert!(summary.starts_with(SUMMARY_HEADER), "{summary}");
    assert!(summary.contains("not an instruction") && summary.contains(REQUEST_ID));
    // A second compaction hands the model the summary to update.
    c.turn("turn 6").await;
    let out = agent.compact(&c.e.session, &toolsets).await.unwrap();
    assert!(matches!(out, CompactOutcome::Compacted(_)), "{out:?}");
    let second = c.summaries.lock().unwrap().last().unwrap().clone();
    let prompt = second["messages"][1]["content"].as_str().unwrap();
    assert!(prompt.contains("<previous-summary>\n## Goal"), "{prompt}");
    let current = agent
        .store()
        .compaction(&c.e.session)
        .await
        .unwrap()
        .unwrap();
    assert!(current.summary.unwrap().contains("(updated)"));
    assert_eq!(
        agent.store().compactions(&c.e.session).await.unwrap().len(),
        2
    );
}

#[tokio::test]
async fn a_summary_request_refused_as_too_long_drops_its_oldest_messages_and_retries() {
    let c = compacting(100_000, CompactionSettings::default()).await;
    let refused = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let refused = refused.clone();
        c.respond(move |body| {
            if refused.swap(true, SeqCst) {
                structured_summary(body)
            } else {
                Reply::context_overflow(4000, 9000)
            }
        });
    }
    for turn in 0..8 {
        let input = if turn == 0 {
            TASK.to_owned()
        } else {
            format!("turn {turn}")
        };
        c.turn(&input).await;
    }
    let out =
        c.e.agent
            .compact(&c.e.session, &["file".to_owned()])
            .await
            .unwrap();
    assert!(matches!(out, CompactOutcome::Compacted(_)), "{out:?}");
    let summaries = c.summaries.lock().unwrap().clone();
    assert_eq!(summaries.len(), 2);
    let prompts: Vec<&str> = summaries
        .iter()
        .map(|s| s["messages"][1]["content"].as_str().unwrap())
        .collect();
    assert!(!prompts[0].contains("older messages were left out"));
    assert!(
        prompts[1].contains("older messages were left out"),
        "{}",
        prompts[1]
    );
    assert!(prompts[1].len() < prompts[0].len());
    // What was left out of the summary still left the transcript, and stays stored.
    let current =
        c.e.agent
            .store()
            .compaction(&c.e.session)
            .await
            .unwrap()
            .unwrap();
    assert_eq!(current.first_seq, Some(2));
}
