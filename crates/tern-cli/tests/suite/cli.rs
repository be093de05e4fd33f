//! End-to-end tests of the `tern` binary: real processes, a real store, the scripted fake
//! model over real HTTP.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use tern_fake_model::{FakeModel, Reply};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

struct Env {
    dir: tempfile::TempDir,
    fake: FakeModel,
}

impl Env {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("work")).unwrap();
        Self {
            dir,
            fake: FakeModel::start().await.unwrap(),
        }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// `tern` with a clean environment pointing at the fake model.
    fn tern(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tern"));
        for k in [
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "TERN_MODEL",
            "TERN_HOME",
            "TERN_LOG",
        ] {
            c.env_remove(k);
        }
        c.env("TERN_HOME", self.home())
            .env("OPENAI_BASE_URL", self.fake.base_url())
            .env("TERN_MODEL", "fake-model")
            .env("NO_COLOR", "1")
            .current_dir(self.work())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        c
    }

    async fn run(&self, args: &[&str]) -> Output {
        self.tern().args(args).output().await.unwrap()
    }

    async fn sessions(&self) -> Vec<Value> {
        let o = self.run(&["sessions", "list", "--json"]).await;
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice::<Vec<Value>>(&o.stdout).unwrap()
    }

    async fn messages(&self, id: &str) -> Vec<Value> {
        let o = self.run(&["sessions", "show", id, "--json"]).await;
        assert!(o.status.success(), "{}", stderr(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        v["messages"].as_array().unwrap().clone()
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn tool_error(msgs: &[Value], call_id: &str) -> String {
    let m = msgs.iter().find(|m| m["tool_call_id"] == call_id).unwrap();
    let v: Value = serde_json::from_str(m["content"].as_str().unwrap()).unwrap();
    v["error"].as_str().unwrap_or_default().to_owned()
}

/// Each tool call has exactly one result right after its assistant message.
fn assert_valid_transcript(msgs: &[Value]) {
    let mut open: Vec<String> = Vec::new();
    for m in msgs {
        if m["role"] == "tool" {
            let id = m["tool_call_id"].as_str().unwrap();
            let pos = open
                .iter()
                .position(|x| x == id)
                .expect("result without call");
            open.remove(pos);
            continue;
        }
        assert!(open.is_empty(), "calls without results: {open:?}");
        if let Some(calls) = m["tool_calls"].as_array() {
            open = calls
                .iter()
                .map(|c| c["id"].as_str().unwrap().to_owned())
                .collect();
        }
    }
    assert!(open.is_empty(), "calls without results: {open:?}");
}

async fn wait_for_file(p: &Path) {
    tern_test_support::eventually(&format!("a whole line in {}", p.display()), async || {
        std::fs::read_to_string(p)
            .is_ok_and(|s| s.ends_with('\n'))
            .then_some(())
    })
    .await
}

#[tokio::test]
async fn version_and_help() {
    let e = Env::new().await;
    let o = e.run(&["--version"]).await;
    assert!(o.status.success());
    assert_eq!(
        stdout(&o).trim(),
        format!("tern {}", env!("CARGO_PKG_VERSION"))
    );
    let o = e.run(&["--help"]).await;
    for word in ["chat", "config", "doctor", "sessions"] {
        assert!(stdout(&o).contains(word), "{word} missing from help");
    }
    let o = e.run(&["frobnicate"]).await;
    assert_eq!(o.status.code(), Some(2), "usage errors exit 2");
}

#[tokio::test]
async fn one_shot_turn_with_a_tool_call() {
    let e = Env::new().await;
    e.fake
        .push(Reply::tool_call(
            "c1",
            "terminal",
            r#"{"command":"echo tool-output-42"}"#,
        ))
        .push(Reply::text("The answer is 42."));
    let o = e.run(&["chat", "-q", "what does the tool say?"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "The answer is 42.\n",
        "only the final answer on stdout"
    );
    assert!(
        stderr(&o).contains("→ terminal echo tool-output-42"),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("✓ terminal"), "{}", stderr(&o));

    let sessions = e.sessions().await;
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0]["source"], "cli");
    assert_eq!(sessions[0]["status"], "idle");
    let msgs = e.messages(sessions[0]["id"].as_str().unwrap()).await;
    assert_eq!(msgs.len(), 4);
    assert!(
        msgs[2]["content"]
            .as_str()
            .unwrap()
            .contains("tool-output-42")
    );
    // The tool really ran in the working directory the CLI was started in.
    let req = &e.fake.requests()[0];
    assert!(
        req.messages()[0]["content"]
            .as_str()
            .unwrap()
            .contains(e.work().to_str().unwrap())
    );
}

#[tokio::test]
async fn continue_and_session_flags_reuse_the_session() {
    let e = Env::new().await;
    e.fake
        .push(Reply::text("one"))
        .push(Reply::text("two"))
        .push(Reply::text("three"));
    assert!(e.run(&["chat", "-q", "first"]).await.status.success());
    assert!(
        e.run(&["chat", "--continue", "-q", "second"])
            .await
            .status
            .success()
    );
    let id = e.sessions().await[0]["id"].as_str().unwrap().to_owned();
    let o = e.run(&["chat", "--session", &id[..8], "-q", "third"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(e.sessions().await.len(), 1);
    assert_eq!(e.messages(&id).await.len(), 6);
    let last = e.fake.requests().pop().unwrap();
    assert_eq!(last.messages().len(), 6, "system + 5 stored messages");
    let o = e
        .run(&["chat", "--session", "doesnotexist", "-q", "x"])
        .await;
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("session not found: doesnotexist"),
        "{}",
        stderr(&o)
    );
}

#[tokio::test]
async fn no_model_configured_names_the_variables() {
    let e = Env::new().await;
    let o = e
        .tern()
        .env_remove("OPENAI_BASE_URL")
        .env_remove("TERN_MODEL")
        .args(["chat", "-q", "hello"])
        .output()
        .await
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("OPENAI_BASE_URL") && err.contains("TERN_MODEL"),
        "{err}"
    );
    let o = e
        .tern()
        .env_remove("TERN_MODEL")
        .args(["chat", "-q", "hello"])
        .output()
        .await
        .unwrap();
    let err = stderr(&o);
    assert!(
        err.contains("TERN_MODEL") && !err.contains("set OPENAI_BASE_URL"),
        "{err}"
    );
    assert!(e.fake.requests().is_empty());
}

#[tokio::test]
async fn dangerous_command_is_denied_in_quiet_mode() {
    let e = Env::new().await;
    std::fs::create_dir(e.work().join("victim")).unwrap();
    e.fake
        .push(Reply::tool_call(
            "d1",
            "terminal",
            r#"{"command":"rm -rf victim"}"#,
        ))
        .push(Reply::text("I was not allowed to delete it."));
    let o = e.run(&["chat", "-q", "delete victim"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        e.work().join("victim").exists(),
        "the directory must survive"
    );
    let msgs = e.fake.requests()[1].messages().to_vec();
    let err = tool_error(&msgs, "d1");
    assert!(err.starts_with("denied") && err.contains("--yolo"), "{err}");
}

#[tokio::test]
async fn yolo_allows_dangerous_but_never_hard_line() {
    let e = Env::new().await;
    std::fs::create_dir(e.work().join("victim")).unwrap();
    e.fake
        .push(Reply::tool_calls([
            ("h1", "terminal", r#"{"command":"rm -rf /"}"#.to_owned()),
            (
                "d1",
                "terminal",
                r#"{"command":"rm -rf victim"}"#.to_owned(),
            ),
        ]))
        .push(Reply::text("done"));
    let o = e.run(&["chat", "--yolo", "-q", "clean up"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !e.work().join("victim").exists(),
        "--yolo allowed the dangerous command"
    );
    let msgs = e.fake.requests()[1].messages().to_vec();
    assert!(
        tool_error(&msgs, "h1").starts_with("blocked"),
        "{}",
        tool_error(&msgs, "h1")
    );
    assert_eq!(tool_error(&msgs, "d1"), "");
}

#[tokio::test]
async fn allowlisted_command_runs_in_quiet_mode() {
    let e = Env::new().await;
    std::fs::create_dir_all(e.home()).unwrap();
    std::fs::write(
        e.home().join("config.toml"),
        "[approvals]\nallowlist = [\"rm -rf victim\"]\n",
    )
    .unwrap();
    std::fs::create_dir(e.work().join("victim")).unwrap();
    e.fake
        .push(Reply::tool_call(
            "d1",
            "terminal",
            r#"{"command":"rm -rf victim"}"#,
        ))
        .push(Reply::text("deleted"));
    let o = e.run(&["chat", "-q", "delete victim"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!e.work().join("victim").exists());
}

#[tokio::test]
async fn kill_9_during_a_turn_leaves_a_session_that_continues() {
    let e = Env::new().await;
    let pidfile = e.work().join("tool.pid");
    let cmd = format!(
        // `>>`: a `>` onto a file needs an approval.
        r#"{{"command":"echo $$ >> {}; sleep 30"}}"#,
        pidfile.display()
    );
    e.fake.push(Reply::tool_call("long", "terminal", cmd));
    let mut child = e
        .tern()
        .args(["chat", "-q", "start a long job"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&pidfile).await;
    child.start_kill().unwrap(); // SIGKILL
    let status = child.wait().await.unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    // The orphaned tool process is not tern's to clean up after a kill -9; end it here.
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );

    let sessions = e.sessions().await;
    assert_eq!(sessions.len(), 1);
    let id = sessions[0]["id"].as_str().unwrap().to_owned();
    let before = e.messages(&id).await;
    assert_eq!(
        before.len(),
        2,
        "input and the tool call were committed before the kill"
    );

    e.fake.push(Reply::text("continuing after the crash"));
    let o = e
        .run(&["chat", "--session", &id, "-q", "are you there?"])
        .await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "continuing after the crash\n");
    let req = e.fake.requests().pop().unwrap();
    assert_valid_transcript(req.messages());
    let msgs = e.messages(&id).await;
    assert!(tool_error(&msgs, "long").starts_with("interrupted"));
    assert_eq!(e.sessions().await[0]["status"], "idle");
}

#[tokio::test]
async fn sigint_interrupts_the_turn_and_exits_130() {
    let e = Env::new().await;
    let events = e.dir.path().join("events.jsonl");
    std::fs::create_dir_all(e.home()).unwrap();
    std::fs::write(
        e.home().join("config.toml"),
        format!(
            "[[hooks]]\nevents = [\"agent_loop_stopped\", \"turn_end\"]\ncommand = \"cat >> {}\"\n",
            events.display()
        ),
    )
    .unwrap();
    let pidfile = e.work().join("tool.pid");
    let cmd = format!(
        // `>>`: a `>` onto a file needs an approval.
        r#"{{"command":"echo $$ >> {}; sleep 30"}}"#,
        pidfile.display()
    );
    e.fake.push(Reply::tool_call("long", "terminal", cmd));
    let child = e
        .tern()
        .args(["chat", "-q", "long job"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&pidfile).await;
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let o = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(stderr(&o).contains("interrupted"));
    let tool_pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        tern_test_support::process_ended(tool_pid),
        "tool child killed"
    );
    let id = e.sessions().await[0]["id"].as_str().unwrap().to_owned();
    let msgs = e.messages(&id).await;
    assert_eq!(msgs.last().unwrap()["content"], "[interrupted]");
    assert_valid_transcript(&msgs);
    // The hooks ran before the process exited: agent_loop_stopped once, as a user interrupt.
    let logged: Vec<Value> = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let stops: Vec<&Value> = logged
        .iter()
        .filter(|v| v["event"] == "agent_loop_stopped")
        .collect();
    assert_eq!(stops.len(), 1, "{logged:?}");
    assert_eq!(stops[0]["reason"], "user_interrupt");
    assert_eq!(stops[0]["source"], "cli");
    assert!(
        logged
            .iter()
            .any(|v| v["event"] == "turn_end" && v["status"] == "interrupted")
    );
}

#[tokio::test]
async fn sessions_search_show_export_delete() {
    let e = Env::new().await;
    e.fake
        .push(Reply::text("Penguins live in the southern hemisphere."));
    e.fake.push(Reply::text("Something else entirely."));
    assert!(
        e.run(&["chat", "-q", "tell me about penguins"])
            .await
            .status
            .success()
    );
    assert!(
        e.run(&["chat", "-q", "unrelated question"])
            .await
            .status
            .success()
    );
    let o = e
        .run(&["sessions", "search", "southern", "hemisphere"])
        .await;
    assert!(o.status.success());
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.contains("[southern] [hemisphere]"), "{out}");
    let o = e.run(&["sessions", "search", "--json", "penguins"]).await;
    let hits: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(hits.len(), 2, "question and answer both match");
    let id = hits[0]["session_id"].as_str().unwrap().to_owned();

    let o = e.run(&["sessions", "show", &id]).await;
    assert!(stdout(&o).contains("tell me about penguins"));
    let o = e.run(&["sessions", "export", &id]).await;
    let lines: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["object"], "session");
    assert_eq!(lines[2]["message"]["role"], "assistant");

    let o = e.run(&["sessions", "delete", &id]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(e.sessions().await.len(), 1);
    let o = e.run(&["sessions", "search", "penguins"]).await;
    assert!(stdout(&o).is_empty());
    let o = e.run(&["sessions", "show", &id]).await;
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("session not found"));
}

#[tokio::test]
async fn config_show_masks_secrets_and_names_sources() {
    let e = Env::new().await;
    let o = e
        .tern()
        .env("OPENAI_API_KEY", "sk-verysecretvalue-9876")
        .args(["config", "show"])
        .output()
        .await
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(!out.contains("verysecret"), "{out}");
    assert!(out.contains("9876"), "{out}");
    assert!(
        out.contains("from OPENAI_BASE_URL") && out.contains("from TERN_MODEL"),
        "{out}"
    );
}

#[tokio::test]
async fn bad_config_file_is_a_clear_error() {
    let e = Env::new().await;
    std::fs::create_dir_all(e.home()).unwrap();
    std::fs::write(
        e.home().join("config.toml"),
        "[agent]\nmax_iterations = \"many\"\n",
    )
    .unwrap();
    let o = e.run(&["chat", "-q", "hi"]).await;
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("config.toml") && err.contains("line 2"),
        "{err}"
    );
}

#[tokio::test]
async fn doctor_reports_health_and_problems() {
    let e = Env::new().await;
    let o = e.run(&["doctor"]).await;
    if let tern_sandbox::Support::Missing { .. } = tern_sandbox::Support::probe() {
        // Without Landlock the agent's commands are refused, and doctor says so.
        assert_eq!(o.status.code(), Some(1));
        assert!(
            stdout(&o).contains("✗ sandbox: the sandbox cannot be enforced"),
            "{}",
            stdout(&o)
        );
    } else {
        assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
        assert!(stdout(&o).contains("All checks passed"));
        // The sandbox line: the default policy, and what it keeps out of reach.
        assert!(
            stdout(&o).contains("sandbox: workspace-write, network off (Landlock ABI"),
            "{}",
            stdout(&o)
        );
    }
    // full-access is said loudly, with what it gives up.
    std::fs::create_dir_all(e.home()).unwrap();
    std::fs::write(
        e.home().join("config.toml"),
        "[sandbox]\nmode = \"full-access\"\n",
    )
    .unwrap();
    let o = e.run(&["doctor"]).await;
    assert!(
        stdout(&o).contains("! sandbox: full-access, no sandbox")
            && stdout(&o).contains("approve its own requests"),
        "{}",
        stdout(&o)
    );
    std::fs::remove_file(e.home().join("config.toml")).unwrap();

    e.fake.require_key("right-key");
    let o = e
        .tern()
        .env("OPENAI_API_KEY", "wrong-key")
        .arg("doctor")
        .output()
        .await
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("refused the API key"), "{}", stdout(&o));

    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let o = e
        .tern()
        .env("OPENAI_BASE_URL", format!("http://{closed}/v1"))
        .arg("doctor")
        .output()
        .await
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stdout(&o).contains("cannot reach the model endpoint"),
        "{}",
        stdout(&o)
    );

    let o = e
        .tern()
        .env_remove("TERN_MODEL")
        .arg("doctor")
        .output()
        .await
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("TERN_MODEL"), "{}", stdout(&o));
}

#[tokio::test]
async fn interactive_session_with_commands() {
    let e = Env::new().await;
    e.fake
        .push(Reply::text("hello there"))
        .push(Reply::text("fresh start"));
    let mut child = e
        .tern()
        .arg("chat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"/help\nhi\n/new\nagain\n/sessions\n/bogus\n/exit\n")
        .await
        .unwrap();
    drop(stdin);
    let o = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("hello there") && stdout(&o).contains("fresh start"),
        "{}",
        stdout(&o)
    );
    let err = stderr(&o);
    assert!(
        err.contains("/new")
            && err.contains("new session")
            && err.contains("unknown command /bogus"),
        "{err}"
    );
    assert_eq!(e.sessions().await.len(), 2);
    // The second session did not see the first one's messages.
    assert_eq!(e.fake.requests()[1].messages().len(), 2);
}

/// A `terminal` call's result, which is a JSON object.
fn tool_result(msgs: &[Value], call_id: &str) -> Value {
    let m = msgs.iter().find(|m| m["tool_call_id"] == call_id).unwrap();
    serde_json::from_str(m["content"].as_str().unwrap()).unwrap()
}

/// Issue 12 without a prompt: with `-q` nobody can let a command out of the sandbox, so a
/// command the sandbox stopped stays stopped (the model is told not to work around it) and
/// a `require_escalated` one does not run; with `--yolo` both run outside the sandbox, once —
/// where `$TERN_HOME` still cannot be read.
#[tokio::test]
async fn sandbox_escalation_is_refused_with_q_and_approved_with_yolo() {
    let e = Env::new().await;
    let outside = e.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::create_dir_all(e.home()).unwrap();
    let secret = e.home().join("secret.txt");
    std::fs::write(&secret, "the-secret-in-tern-home\n").unwrap();
    let log = outside.join("log");
    let write = |marker: &str| {
        serde_json::json!({"command": format!("echo {marker} >> {}", log.display())}).to_string()
    };
    let asked = |marker: &str| {
        serde_json::json!({
            "command": format!("echo {marker} >> {}", log.display()),
            "sandbox_permissions": "require_escalated",
            "justification": "the log lives beside the repository",
        })
        .to_string()
    };

    e.fake
        .push(Reply::tool_call("q1", "terminal", write("quiet")))
        .push(Reply::tool_call("q2", "terminal", asked("quiet-asked")))
        .push(Reply::text("I was not allowed to."));
    let o = e.run(&["chat", "-q", "write the log"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!log.exists(), "nothing was written outside");
    let msgs = e.fake.requests()[2].messages().to_vec();
    let q1 = tool_result(&msgs, "q1");
    let note = q1["sandbox"].as_str().unwrap_or_default();
    assert!(
        note.contains("probably stopped this command")
            && note.contains("not approved: tern chat -q runs without a human to ask")
            && note.contains("Do not retry it"),
        "{q1}"
    );
    let q2 = tool_error(&msgs, "q2");
    assert!(
        q2.starts_with("denied: running this command outside the sandbox was not approved"),
        "{q2}"
    );

    e.fake
        .push(Reply::tool_call("y1", "terminal", write("yolo")))
        .push(Reply::tool_call("y2", "terminal", asked("yolo-asked")))
        .push(Reply::tool_call(
            "y3",
            "terminal",
            serde_json::json!({
                "command": format!("cat {}", secret.display()),
                "sandbox_permissions": "require_escalated",
            })
            .to_string(),
        ))
        .push(Reply::text("Written."));
    let o = e.run(&["chat", "--yolo", "-q", "write the log"]).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = std::fs::read_to_string(&log).unwrap();
    assert_eq!(lines, "yolo\nyolo-asked\n", "each ran once, outside");
    let msgs = e.fake.requests()[6].messages().to_vec();
    let y1 = tool_result(&msgs, "y1");
    assert!(
        y1["sandbox"]
            .as_str()
            .unwrap_or_default()
            .contains("a human approved running it outside the sandbox"),
        "{y1}"
    );
    let outside_note = "ran outside the sandbox, as a human approved";
    assert_eq!(tool_result(&msgs, "y2")["sandbox"], outside_note);
    let y3 = tool_result(&msgs, "y3");
    assert_eq!(y3["sandbox"], outside_note, "{y3}");
    assert!(
        y3["output"]
            .as_str()
            .is_some_and(|o| o.contains("Permission denied")),
        "$TERN_HOME is out of reach even outside the sandbox: {y3}"
    );
    assert!(!y3.to_string().contains("the-secret-in-tern-home"), "{y3}");
}

#[tokio::test]
async fn doctor_shows_the_window_and_where_it_comes_from() {
    let e = Env::new().await;
    let o = e.run(&["doctor"]).await;
    assert!(
        stdout(&o).contains("! context window 128000 tokens (the default: the server does not say")
            && stdout(&o).contains("compact at 80 %"),
        "{}",
        stdout(&o)
    );
    e.fake
        .set_model_info("fake-model", serde_json::json!({"max_model_len": 16384}));
    let o = e.run(&["doctor"]).await;
    assert!(
        stdout(&o).contains("✓ context window 16384 tokens (reported by the model server)"),
        "{}",
        stdout(&o)
    );
    std::fs::create_dir_all(e.home()).unwrap();
    std::fs::write(
        e.home().join("config.toml"),
        "[model]\ncontext_length = 32768\n[compaction]\nthreshold_percent = 70\n",
    )
    .unwrap();
    let o = e.run(&["doctor"]).await;
    assert!(
        stdout(&o).contains(
            "✓ context window 32768 tokens ([model] context_length); sessions compact at 70 % of it"
        ),
        "{}",
        stdout(&o)
    );
}
