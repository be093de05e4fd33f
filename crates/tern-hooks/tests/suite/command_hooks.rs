//! Command hooks with real processes: what they receive, which events they run for, that
//! they never delay `emit`, that timeouts kill their process group, that failures are only
//! logged, and the `pre_tool_call` verdicts.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use tern_hooks::*;

fn bus(hooks: &[tern_config::CommandHookConfig]) -> HookBus {
    HookBus::from_config(hooks, &[]).unwrap()
}

#[tokio::test]
async fn hook_receives_the_exact_envelope_on_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let bus = bus(&[hook(
        "capture",
        &["turn_start"],
        &format!("printf %s \"$TERN_EVENT/$TERN_HOOK_NAME\" > '{d}/env'; cat > '{d}/stdin'"),
        5000,
    )]);
    let event = turn_start("say \"hi\"\nthen 'bye' — ✓ \\ done");
    let before = Envelope::now(turn_start("")).timestamp;
    bus.emit(event.clone());
    assert!(bus.flush(PATIENCE).await);

    let stdin = read(&dir.path().join("stdin"));
    assert!(stdin.ends_with('\n'), "{stdin:?}");
    assert_eq!(stdin.matches('\n').count(), 1, "one line: {stdin:?}");
    let json: serde_json::Value = serde_json::from_str(stdin.trim_end()).unwrap();
    let timestamp = json["timestamp"].as_i64().unwrap();
    assert!(
        timestamp >= before && timestamp <= before + 10_000,
        "{json}"
    );
    // Byte for byte what the envelope serializes to, plus the newline.
    let expected = Envelope { event, timestamp }.to_json() + "\n";
    assert_eq!(stdin, expected);
    assert_eq!(json["event"], "turn_start");
    assert_eq!(json["input"], "say \"hi\"\nthen 'bye' — ✓ \\ done");
    assert_eq!(json["session_id"], "sess-1");
    assert_eq!(read(&dir.path().join("env")), "turn_start/capture");
}

#[tokio::test]
async fn hooks_run_only_for_their_events() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let bus = bus(&[
        hook(
            "on-end",
            &["turn_end"],
            &format!("echo \"$TERN_EVENT\" >> '{d}/end-hook'"),
            5000,
        ),
        hook(
            "on-both",
            &["turn_start", "turn_end"],
            &format!("echo \"$TERN_EVENT\" >> '{d}/both-hook'"),
            5000,
        ),
        hook(
            "on-all",
            &["*"],
            &format!("echo \"$TERN_EVENT\" >> '{d}/all-hook'"),
            5000,
        ),
    ]);
    bus.emit(turn_start("hello"));
    assert!(bus.flush(PATIENCE).await);
    assert_eq!(read(&dir.path().join("end-hook")), "");
    assert_eq!(read(&dir.path().join("both-hook")), "turn_start\n");
    assert_eq!(read(&dir.path().join("all-hook")), "turn_start\n");

    bus.emit(turn_end());
    assert!(bus.flush(PATIENCE).await);
    assert_eq!(read(&dir.path().join("end-hook")), "turn_end\n");
    assert_eq!(
        read(&dir.path().join("both-hook")),
        "turn_start\nturn_end\n"
    );
    assert_eq!(read(&dir.path().join("all-hook")), "turn_start\nturn_end\n");
}

#[tokio::test]
async fn emit_returns_at_once_and_a_hanging_hook_is_killed_at_its_timeout() {
    let (logs, _guard) = capture_logs();
    let dir = tempfile::tempdir().unwrap();
    let pgid_file = dir.path().join("pgid");
    // The shell records its pid (= its process group id), starts a background sleeper in
    // the same group, and hangs far longer than any test: only the kill at its timeout ends it.
    let bus = bus(&[hook(
        "sleeper",
        &["turn_start"],
        &format!(
            "echo $$ > '{}'; echo 'still waiting' >&2; sleep 600 & sleep 600",
            pgid_file.display()
        ),
        1500,
    )]);

    let started = Instant::now();
    bus.emit(turn_start("hi"));
    // emit returned while the hook, which cannot end before its timeout, is in flight.
    assert_eq!(bus.in_flight(), 1);

    let pgid = until_pgid(&pgid_file).await;
    // Before the timeout the group is alive: the shell and its sleepers.
    wait_until(PATIENCE, Duration::from_millis(10), async || {
        let members = live_group_members(pgid);
        if members.len() >= 2 {
            Ok(())
        } else {
            Err(format!(
                "the hook's group to hold its sleepers: {members:?}"
            ))
        }
    })
    .await;

    assert!(bus.flush(PATIENCE).await, "the hook was never killed");
    let took = started.elapsed();
    // Not killed before its timeout (a lower bound holds however loaded the machine is).
    assert!(
        took >= Duration::from_millis(1500),
        "the hook was killed after {took:?}, before its 1500 ms timeout"
    );
    assert_eq!(bus.in_flight(), 0);
    // Every process of the group, the background sleeper included, is gone.
    until_group_gone(pgid).await;
    let warned = logs.lines_with("hook=sleeper");
    assert!(
        warned
            .iter()
            .any(|l| l.contains("WARN") && l.contains("timed out") && l.contains("still waiting")),
        "{}",
        logs.text()
    );
}

#[tokio::test]
async fn failing_and_crashing_hooks_are_logged_and_do_not_affect_others() {
    let (logs, _guard) = capture_logs();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let bus = bus(&[
        hook(
            "fails",
            &["*"],
            "cat > /dev/null; echo 'disk on fire' >&2; exit 1",
            5000,
        ),
        hook("crashes", &["*"], "kill -9 $$", 5000),
        hook("not-found", &["*"], "/no/such/program-xyz", 5000),
        hook("good", &["*"], &format!("cat >> '{d}/good'"), 5000),
    ]);
    bus.emit(turn_start("one"));
    bus.emit(turn_end());
    assert!(bus.flush(PATIENCE).await);

    let good = read(&dir.path().join("good"));
    assert_eq!(good.lines().count(), 2, "{good}");
    assert!(good.contains("\"event\":\"turn_start\""), "{good}");
    assert!(good.contains("\"event\":\"turn_end\""), "{good}");

    let text = logs.text();
    let fails = logs.lines_with("hook=fails");
    assert_eq!(
        fails
            .iter()
            .filter(|l| l.contains("WARN") && l.contains("exit code 1"))
            .count(),
        2,
        "{text}"
    );
    assert!(fails.iter().any(|l| l.contains("disk on fire")), "{text}");
    let crashes = logs.lines_with("hook=crashes");
    assert_eq!(
        crashes
            .iter()
            .filter(|l| l.contains("WARN") && l.contains("signal 9"))
            .count(),
        2,
        "{text}"
    );
    assert!(
        logs.lines_with("hook=not-found")
            .iter()
            .any(|l| l.contains("WARN") && l.contains("exit code 127")),
        "{text}"
    );
    assert!(
        !logs
            .lines_with("hook=good")
            .iter()
            .any(|l| l.contains("WARN")),
        "{text}"
    );
}

/// An argv `command` runs the program itself: each element arrives as one argument, as
/// written, where a shell would split on spaces, strip quotes, expand `$VARS` and globs.
#[tokio::test]
async fn an_argv_hook_runs_without_a_shell_and_keeps_its_arguments_intact() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("args");
    let args = ["two words", "it's \"quoted\"", "$HOME", "*", " padded ", ""];
    // `sh` here is just the program of the argv: its script prints each argument it got
    // ("$@") on a line of its own, then saves stdin.
    let mut argv: Vec<String> = vec![
        "sh".into(),
        "-c".into(),
        "for a in \"$@\"; do printf '[%s]\\n' \"$a\"; done > \"$0\"; \
         printf %s \"$TERN_EVENT/$TERN_HOOK_NAME\" > \"$0.env\"; cat > \"$0.stdin\""
            .into(),
        out.display().to_string(),
    ];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    let bus = bus(&[tern_config::CommandHookConfig {
        name: Some("argv".to_owned()),
        events: vec!["turn_end".to_owned()],
        command: argv.into(),
        timeout_ms: 5000,
    }]);
    bus.emit(turn_end());
    assert!(bus.flush(PATIENCE).await);

    let expected: String = args.iter().map(|a| format!("[{a}]\n")).collect();
    assert_eq!(read(&out), expected);
    assert_eq!(read(&dir.path().join("args.env")), "turn_end/argv");
    let stdin = read(&dir.path().join("args.stdin"));
    let json: serde_json::Value = serde_json::from_str(stdin.trim_end()).unwrap();
    assert_eq!(json["event"], "turn_end");

    // The same words as a shell line come out split, unquoted and expanded: the difference
    // the array form is for.
    let shell_out = dir.path().join("shell");
    let bus2 = bus_of_line(&format!(
        "for a in two words \"$HOME\"; do printf '[%s]\\n' \"$a\"; done > '{}'",
        shell_out.display()
    ));
    bus2.emit(turn_end());
    assert!(bus2.flush(PATIENCE).await);
    let home = std::env::var("HOME").unwrap_or_default();
    assert_eq!(read(&shell_out), format!("[two]\n[words]\n[{home}]\n"));
}

fn bus_of_line(line: &str) -> HookBus {
    bus(&[hook("line", &["turn_end"], line, 5000)])
}

/// A program that is not there is logged as such; the others still run.
#[tokio::test]
async fn an_argv_hook_whose_program_is_missing_is_logged() {
    let (logs, _guard) = capture_logs();
    let dir = tempfile::tempdir().unwrap();
    let bus = bus(&[
        tern_config::CommandHookConfig {
            name: Some("missing".to_owned()),
            events: vec!["*".to_owned()],
            command: vec!["/nonexistent/tern-hook".to_owned(), "x".to_owned()].into(),
            timeout_ms: 5000,
        },
        hook(
            "good",
            &["*"],
            &format!("touch '{}/ran'", dir.path().display()),
            5000,
        ),
    ]);
    bus.emit(turn_end());
    assert!(bus.flush(PATIENCE).await);
    assert!(dir.path().join("ran").exists());
    let text = logs.text();
    assert!(
        logs.lines_with("hook=missing")
            .iter()
            .any(|l| l.contains("WARN") && l.contains("could not start")),
        "{text}"
    );
}

#[test]
fn an_empty_argv_is_refused() {
    for (argv, says) in [
        (vec![], "empty array"),
        (vec![String::new(), "x".to_owned()], "empty program"),
        (vec!["  ".to_owned()], "empty program"),
    ] {
        let err = HookBus::from_config(
            &[tern_config::CommandHookConfig {
                name: Some("bad".to_owned()),
                events: vec!["*".to_owned()],
                command: argv.into(),
                timeout_ms: 5000,
            }],
            &[],
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(err.contains("`command`") && err.contains(says), "{err}");
    }
}

#[tokio::test]
async fn hook_name_defaults_to_the_command_cut_to_40_chars() {
    let (logs, _guard) = capture_logs();
    let command = "exit 3 # a rather long command line, longer than forty characters";
    let bus = HookBus::from_config(
        &[tern_config::CommandHookConfig {
            name: None,
            events: vec!["*".to_owned()],
            command: command.into(),
            timeout_ms: 5000,
        }],
        &[],
    )
    .unwrap();
    bus.emit(turn_end());
    assert!(bus.flush(PATIENCE).await);
    let name: String = command.chars().take(40).collect();
    let text = logs.text();
    assert!(
        text.lines()
            .any(|l| l.contains(&format!("hook={name} ")) && l.contains("exit code 3")),
        "{text}"
    );
}

#[tokio::test]
async fn pre_tool_call_block_with_message() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let bus = bus(&[hook(
        "policy",
        &["pre_tool_call"],
        &format!(
            "cat > '{d}/seen'; echo '{{\"action\":\"block\",\"message\":\"no deploys on Friday\"}}'"
        ),
        5000,
    )]);
    let gate = bus.pre_tool_call(pre_tool("make deploy")).await;
    assert_eq!(
        gate,
        ToolGate::Block {
            hook: "policy".to_owned(),
            message: "no deploys on Friday".to_owned()
        }
    );
    let seen: serde_json::Value = serde_json::from_str(&read(&dir.path().join("seen"))).unwrap();
    assert_eq!(seen["event"], "pre_tool_call");
    assert_eq!(seen["tool"], "terminal");
    assert_eq!(seen["arguments"], r#"{"command":"make deploy"}"#);
}

#[tokio::test]
async fn pre_tool_call_block_without_message_names_the_hook() {
    let bus = bus(&[hook(
        "guard",
        &["pre_tool_call"],
        r#"echo '{"action":"block"}'"#,
        5000,
    )]);
    assert_eq!(
        bus.pre_tool_call(pre_tool("ls")).await,
        ToolGate::Block {
            hook: "guard".to_owned(),
            message: "blocked by hook guard".to_owned()
        }
    );
}

#[tokio::test]
async fn pre_tool_call_allow() {
    let bus = bus(&[
        hook("quiet", &["*"], "cat > /dev/null", 5000),
        hook(
            "trusting",
            &["pre_tool_call"],
            r#"echo '{"action":"allow"}'"#,
            5000,
        ),
    ]);
    assert_eq!(
        bus.pre_tool_call(pre_tool("rm -rf build")).await,
        ToolGate::Allow {
            hook: "trusting".to_owned()
        }
    );
}

#[tokio::test]
async fn pre_tool_call_block_beats_allow_and_the_first_block_wins() {
    let bus = bus(&[
        hook(
            "allower",
            &["pre_tool_call"],
            r#"echo '{"action":"allow"}'"#,
            5000,
        ),
        hook(
            "first-blocker",
            &["pre_tool_call"],
            r#"sleep 0.3; echo '{"action":"block","message":"first"}'"#,
            5000,
        ),
        hook(
            "second-blocker",
            &["pre_tool_call"],
            r#"echo '{"action":"block","message":"second"}'"#,
            5000,
        ),
    ]);
    // The second blocker answers first, but configuration order decides.
    assert_eq!(
        bus.pre_tool_call(pre_tool("ls")).await,
        ToolGate::Block {
            hook: "first-blocker".to_owned(),
            message: "first".to_owned()
        }
    );
}

#[tokio::test]
async fn pre_tool_call_abstentions_proceed() {
    let (logs, _guard) = capture_logs();
    let bus = bus(&[
        hook("silent", &["pre_tool_call"], "cat > /dev/null", 5000),
        hook("chatty", &["pre_tool_call"], "echo hello", 5000),
        hook(
            "failing-blocker",
            &["pre_tool_call"],
            r#"echo '{"action":"block"}'; exit 2"#,
            5000,
        ),
        hook(
            "other-event",
            &["turn_end"],
            r#"echo '{"action":"block"}'"#,
            5000,
        ),
    ]);
    assert_eq!(bus.pre_tool_call(pre_tool("ls")).await, ToolGate::Proceed);
    assert_eq!(
        HookBus::new().pre_tool_call(pre_tool("ls")).await,
        ToolGate::Proceed
    );
    let text = logs.text();
    assert!(
        logs.lines_with("hook=chatty")
            .iter()
            .any(|l| l.contains("abstains")),
        "{text}"
    );
    assert!(
        logs.lines_with("hook=failing-blocker")
            .iter()
            .any(|l| l.contains("exit code 2")),
        "{text}"
    );
}

#[tokio::test]
async fn a_hanging_pre_tool_call_hook_abstains_after_its_timeout() {
    let (logs, _guard) = capture_logs();
    let dir = tempfile::tempdir().unwrap();
    let pgid_file = dir.path().join("pgid");
    let bus = bus(&[
        hook(
            "hangs",
            &["pre_tool_call"],
            &format!("echo $$ > '{}'; sleep 600", pgid_file.display()),
            500,
        ),
        hook(
            "allower",
            &["pre_tool_call"],
            r#"echo '{"action":"allow"}'"#,
            5000,
        ),
    ]);
    let started = Instant::now();
    // The hanging hook sleeps far longer than the bound: only its timeout lets the call end.
    let gate = tokio::time::timeout(PATIENCE, bus.pre_tool_call(pre_tool("ls")))
        .await
        .expect("the hanging hook was never given up on");
    let took = started.elapsed();
    assert_eq!(
        gate,
        ToolGate::Allow {
            hook: "allower".to_owned()
        }
    );
    assert!(
        took >= Duration::from_millis(500),
        "pre_tool_call took {took:?}, less than the hanging hook's 500 ms timeout"
    );
    let pgid = until_pgid(&pgid_file).await;
    until_group_gone(pgid).await;
    assert!(
        logs.lines_with("hook=hangs")
            .iter()
            .any(|l| l.contains("timed out")),
        "{}",
        logs.text()
    );
}

#[tokio::test]
async fn dropping_pre_tool_call_kills_its_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let pgid_file = dir.path().join("pgid");
    let bus = bus(&[hook(
        "slow-gate",
        &["pre_tool_call"],
        &format!("echo $$ > '{}'; sleep 600", pgid_file.display()),
        60_000,
    )]);
    // The gate waits for the hook; once the hook runs (its pgid written), drop the gate.
    // Boxed, not pinned on the stack: `drop` below must drop the future itself.
    let mut gate = Box::pin(bus.pre_tool_call(pre_tool("ls")));
    let pgid = tokio::select! {
        decided = &mut gate => panic!("the gate decided before its hook ended: {decided:?}"),
        pgid = until_pgid(&pgid_file) => pgid,
    };
    assert!(!live_group_members(pgid).is_empty(), "the hook runs");
    drop(gate);
    until_group_gone(pgid).await;
}

struct Gate(Option<ToolGate>, std::sync::Mutex<Vec<String>>);

impl Subscriber for Gate {
    fn name(&self) -> &str {
        "in-process"
    }

    fn on_event(&self, event: &Envelope) {
        self.1.lock().unwrap().push(event.event.name().to_owned());
    }

    fn gate_tool_call(&self, _event: &Envelope) -> Option<ToolGate> {
        self.0.clone()
    }
}

#[tokio::test]
async fn in_process_subscribers_still_gate_and_see_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    // A command hook that would allow once released; the in-process block decides at once.
    let bus = bus(&[hook(
        "slow-allower",
        &["pre_tool_call"],
        &format!(
            "while [ ! -e '{d}/release' ]; do sleep 0.01; done; \
             echo ran > '{d}/ran'; echo '{{\"action\":\"allow\"}}'"
        ),
        60_000,
    )]);
    let gate = Arc::new(Gate(
        Some(ToolGate::Block {
            hook: "in-process".to_owned(),
            message: "nope".to_owned(),
        }),
        Default::default(),
    ));
    bus.subscribe(gate.clone());
    assert_eq!(
        bus.pre_tool_call(pre_tool("ls")).await,
        ToolGate::Block {
            hook: "in-process".to_owned(),
            message: "nope".to_owned()
        }
    );
    // The call returned while the command hook was still held: it did not wait for it.
    assert!(
        !dir.path().join("ran").exists(),
        "the command hook finished before it was released"
    );
    assert_eq!(
        bus.in_flight(),
        1,
        "the command hook runs in the background"
    );
    std::fs::write(dir.path().join("release"), "").unwrap();
    // The command hook still saw the event, in the background.
    assert!(bus.flush(PATIENCE).await);
    assert_eq!(read(&dir.path().join("ran")), "ran\n");

    bus.emit(turn_end());
    assert_eq!(*gate.1.lock().unwrap(), vec!["pre_tool_call", "turn_end"]);

    // An in-process allow loses to a command hook's block.
    let bus = bus_with_block_hook();
    bus.subscribe(Arc::new(Gate(
        Some(ToolGate::Allow {
            hook: "in-process".to_owned(),
        }),
        Default::default(),
    )));
    assert!(matches!(
        bus.pre_tool_call(pre_tool("ls")).await,
        ToolGate::Block { hook, .. } if hook == "blocker"
    ));
}

fn bus_with_block_hook() -> HookBus {
    bus(&[hook(
        "blocker",
        &["pre_tool_call"],
        r#"echo '{"action":"block"}'"#,
        5000,
    )])
}
