//! The interactive REPL in a real pseudo-terminal: line editing is on, Ctrl-C is a real
//! SIGINT from the terminal, and the approval prompt is answered by typing.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use portable_pty::{Child, CommandBuilder, MasterPty, PtySize, native_pty_system};
use tern_fake_model::{FakeModel, Reply};
use tern_test_support::{PATIENCE, wait_until_blocking};

struct Screen(Arc<Mutex<String>>);

impl Screen {
    /// Waits until `text` appears after byte offset `from`; returns the offset after it.
    fn wait_for(&self, text: &str, from: usize) -> usize {
        wait_until_blocking(PATIENCE, Duration::from_millis(20), || {
            let s = self.0.lock().unwrap();
            match s.get(from..).and_then(|rest| rest.find(text)) {
                Some(pos) => Ok(from + pos + text.len()),
                None => Err(format!("waiting for {text:?}; screen:\n{s}")),
            }
        })
    }

    /// What was shown between byte offsets `from` and `to`.
    fn text(&self, from: usize, to: usize) -> String {
        self.0.lock().unwrap()[from..to].to_owned()
    }
}

/// `tern chat` running in a pseudo-terminal of its own.
struct Chat {
    /// The terminal's master side: keep it, dropping it hangs up.
    master: Box<dyn MasterPty + Send>,
    child: Box<dyn Child + Send + Sync>,
    /// What is typed.
    writer: Box<dyn Write + Send>,
    /// What is shown.
    screen: Screen,
}

/// Starts `tern chat` in `work`, with `home` and the fake model.
fn start_chat(home: &Path, work: &Path, fake: &FakeModel) -> Chat {
    start_chat_on(home, work, fake, "dumb")
}

/// [`start_chat`] on a terminal of type `term` (`dumb` turns rustyline's line editing off).
fn start_chat_on(home: &Path, work: &Path, fake: &FakeModel, term: &str) -> Chat {
    let pty = native_pty_system()
        .openpty(PtySize {
            rows: 40,
            cols: 200,
            pixel_width: 0,
            pixel_height: 0,
        })
        .unwrap();
    let mut cmd = CommandBuilder::new(env!("CARGO_BIN_EXE_tern"));
    cmd.arg("chat");
    cmd.cwd(work);
    for k in ["OPENAI_API_KEY", "TERN_LOG"] {
        cmd.env_remove(k);
    }
    cmd.env("TERN_HOME", home);
    cmd.env("OPENAI_BASE_URL", fake.base_url());
    cmd.env("TERN_MODEL", "fake-model");
    cmd.env("NO_COLOR", "1");
    cmd.env("TERM", term);
    let child = pty.slave.spawn_command(cmd).unwrap();
    drop(pty.slave);
    let mut reader = pty.master.try_clone_reader().unwrap();
    let writer = pty.master.take_writer().unwrap();
    let screen = Screen(Arc::new(Mutex::new(String::new())));
    let buf = screen.0.clone();
    std::thread::spawn(move || {
        let mut b = [0u8; 4096];
        while let Ok(n) = reader.read(&mut b) {
            if n == 0 {
                break;
            }
            buf.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&b[..n]));
        }
    });
    Chat {
        master: pty.master,
        child,
        writer,
        screen,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repl_approval_interrupt_and_exit_in_a_real_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join("victim")).unwrap();
    let pidfile = work.join("tool.pid");

    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::tool_call(
        "d1",
        "terminal",
        r#"{"command":"rm -rf victim"}"#,
    ))
    .push(Reply::text("Deleted the victim directory."))
    .push(Reply::tool_call(
        "long",
        "terminal",
        format!(
            // `>>`: a `>` onto a file needs an approval.
            r#"{{"command":"echo $$ >> {}; sleep 30"}}"#,
            pidfile.display()
        ),
    ))
    .push(Reply::text("Still here after the interrupt."));

    let Chat {
        master: _master,
        mut child,
        mut writer,
        screen,
    } = start_chat(&home, &work, &fake);

    let tool_pidfile = pidfile.clone();
    let screen =
        tokio::task::spawn_blocking(move || {
            let pidfile = tool_pidfile;
            let mut at = screen.wait_for("Ctrl-D quits", 0);
            at = screen.wait_for("› ", at);

            // A dangerous command: the prompt asks, "always" runs it and saves it.
            writer.write_all(b"clean up please\r").unwrap();
            at = screen.wait_for("Allow? [o]nce, [s]ession, [a]lways, [d]eny", at);
            writer.write_all(b"a\r").unwrap();
            at = screen.wait_for("Deleted the victim directory.", at);
            at = screen.wait_for("› ", at);

            // Ctrl-C during a running tool stops the turn, not the program.
            writer.write_all(b"start the long job\r").unwrap();
            at = screen.wait_for("→ terminal", at);
            wait_until_blocking(PATIENCE, Duration::from_millis(20), || {
                match std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n')) {
                    true => Ok(()),
                    false => Err("waiting for the tool to start".to_owned()),
                }
            });
            writer.write_all(b"\x03").unwrap();
            at = screen.wait_for("[interrupted]", at);
            at = screen.wait_for("› ", at);

            writer.write_all(b"are you still there?\r").unwrap();
            at = screen.wait_for("Still here after the interrupt.", at);
            at = screen.wait_for("› ", at);
            // Ctrl-D at the prompt quits.
            writer.write_all(b"\x04").unwrap();
            (screen, at)
        })
        .await
        .unwrap();

    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "screen:\n{}", screen.0.0.lock().unwrap());
    assert!(!work.join("victim").exists(), "approved command ran");
    let config = std::fs::read_to_string(home.join("config.toml")).unwrap();
    assert!(
        config.contains("\"rm -rf victim\""),
        "always was saved:\n{config}"
    );
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        tern_test_support::process_ended(pid),
        "the interrupted tool's process is gone"
    );
    // The interrupted turn left a valid transcript: the third request carries the result.
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 4);
    let msgs = reqs[3].messages();
    let long = msgs.iter().find(|m| m["tool_call_id"] == "long").unwrap();
    assert!(long["content"].as_str().unwrap().contains("interrupted"));
    // History was written.
    let history = std::fs::read_to_string(home.join("history")).unwrap();
    assert!(history.contains("start the long job"), "{history}");
}

/// Issue 12 at the terminal: a command the sandbox stopped (it writes outside the
/// workspace) is offered at the prompt with the policy and what was denied. Once: it runs
/// again outside, once, and the next run asks again; deny: the model is told not to retry
/// and nothing is written; `require_escalated` asks before anything runs, showing the
/// justification; session: the session's later commands leave the sandbox without a prompt,
/// yet `$TERN_HOME` stays unreadable; a new session asks again, and its "always" stays in
/// that session (nothing is saved to the allowlist).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_escalation_once_deny_and_session_at_the_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    let outside = dir.path().join("outside");
    for d in [&home, &work, &outside] {
        std::fs::create_dir_all(d).unwrap();
    }
    let secret = home.join("secret.txt");
    std::fs::write(&secret, "the-secret-in-tern-home\n").unwrap();
    let log = outside.join("log");
    let write = |marker: &str| {
        serde_json::json!({"command": format!("echo {marker} >> {}", log.display())}).to_string()
    };
    let why = "the release notes live beside the repository";
    let asked = serde_json::json!({
        "command": format!("echo asked >> {}", log.display()),
        "sandbox_permissions": "require_escalated",
        "justification": why,
    })
    .to_string();
    let made = outside.join("made");
    let another = serde_json::json!({
        "command": format!("mkdir {} && echo session-2 >> {}", made.display(), log.display())
    })
    .to_string();
    let cat = serde_json::json!({"command": format!("cat {}", secret.display())}).to_string();

    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::tool_call("o1", "terminal", write("once")))
        .push(Reply::tool_call("o2", "terminal", write("once")))
        .push(Reply::text("Once is done."))
        .push(Reply::tool_call("r1", "terminal", asked))
        .push(Reply::text("Asked is done."))
        .push(Reply::tool_call("s1", "terminal", write("session-1")))
        .push(Reply::tool_call("s2", "terminal", another))
        .push(Reply::tool_call("s3", "terminal", cat))
        .push(Reply::text("Session is done."))
        .push(Reply::tool_call("n1", "terminal", write("new-1")))
        .push(Reply::tool_call("n2", "terminal", write("new-2")))
        .push(Reply::text("New session is done."));

    let Chat {
        master: _master,
        mut child,
        mut writer,
        screen,
    } = start_chat(&home, &work, &fake);
    const ALLOW: &str = "Allow? [o]nce, [s]ession, [a]lways, [d]eny";
    let screen = tokio::task::spawn_blocking(move || {
        let mut at = screen.wait_for("Ctrl-D quits", 0);
        at = screen.wait_for("› ", at);

        // Stopped, asked with what a human needs to judge; once runs it, the rerun asks
        // again and is denied.
        writer.write_all(b"write the log\r").unwrap();
        at = screen.wait_for(
            "wants to run outside the sandbox: the sandbox stopped a file access",
            at,
        );
        at = screen.wait_for("policy: workspace-write, network off", at);
        at = screen.wait_for("denied: a file access outside what the sandbox allows", at);
        at = screen.wait_for(ALLOW, at);
        writer.write_all(b"o\r").unwrap();
        at = screen.wait_for("the sandbox stopped a file access", at);
        at = screen.wait_for(ALLOW, at);
        writer.write_all(b"d\r").unwrap();
        at = screen.wait_for("Once is done.", at);
        at = screen.wait_for("› ", at);

        // Asked up front, with the justification.
        writer.write_all(b"write it again, escalated\r").unwrap();
        at = screen.wait_for("wants to run outside the sandbox, as the agent asked", at);
        at = screen.wait_for(&format!("justification: {why}"), at);
        at = screen.wait_for(ALLOW, at);
        writer.write_all(b"o\r").unwrap();
        at = screen.wait_for("Asked is done.", at);
        at = screen.wait_for("› ", at);

        // For the session: one prompt, then the other commands go out without one.
        writer.write_all(b"write more\r").unwrap();
        at = screen.wait_for(ALLOW, at);
        writer.write_all(b"s\r").unwrap();
        let end = screen.wait_for("Session is done.", at);
        let between = screen.text(at, end);
        assert!(!between.contains(ALLOW), "asked again:\n{between}");
        at = screen.wait_for("› ", end);

        // A new session asks again; its "always" holds for it only.
        writer.write_all(b"/new\r").unwrap();
        at = screen.wait_for("› ", at);
        writer.write_all(b"write in a new session\r").unwrap();
        at = screen.wait_for("Outside the sandbox it may write anywhere", at);
        at = screen.wait_for(ALLOW, at);
        writer.write_all(b"a\r").unwrap();
        let end = screen.wait_for("New session is done.", at);
        let between = screen.text(at, end);
        assert!(!between.contains(ALLOW), "asked again:\n{between}");
        at = screen.wait_for("› ", end);
        writer.write_all(b"\x04").unwrap();
        (screen, at)
    })
    .await
    .unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    let shown = screen.0.0.lock().unwrap().clone();
    assert!(status.success(), "screen:\n{shown}");

    // What really happened on disk.
    let lines = std::fs::read_to_string(&log).unwrap();
    let runs = |m: &str| lines.lines().filter(|l| *l == m).count();
    assert_eq!(
        runs("once"),
        1,
        "once: ran once, the denied rerun never\n{lines}"
    );
    assert_eq!(runs("asked"), 1, "{lines}");
    assert_eq!(runs("session-1"), 1, "{lines}");
    assert_eq!(runs("session-2"), 1, "{lines}");
    assert!(made.is_dir());
    assert_eq!(runs("new-1"), 1, "{lines}");
    assert_eq!(runs("new-2"), 1, "{lines}");
    let config = std::fs::read_to_string(home.join("config.toml")).unwrap_or_default();
    assert!(
        !config.contains("new-1"),
        "always went to the allowlist: {config}"
    );

    // What the model was told.
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 12);
    let result = |req: usize, call: &str| -> serde_json::Value {
        let msgs = reqs[req].messages();
        let m = msgs.iter().find(|m| m["tool_call_id"] == call).unwrap();
        serde_json::from_str(m["content"].as_str().unwrap()).unwrap()
    };
    let o1 = result(1, "o1");
    assert!(
        o1["sandbox"]
            .as_str()
            .unwrap()
            .contains("a human approved running it outside the sandbox"),
        "{o1}"
    );
    assert_eq!(o1["exit_code"], 0, "{o1}");
    let o2 = result(2, "o2");
    let note = o2["sandbox"].as_str().unwrap();
    assert!(
        note.contains("not approved: the user denied it") && note.contains("Do not retry it"),
        "{o2}"
    );
    assert!(
        o2["output"].as_str().unwrap().contains("Permission denied"),
        "{o2}"
    );
    let ran_outside = "ran outside the sandbox, as a human approved";
    assert_eq!(result(4, "r1")["sandbox"], ran_outside);
    for call in ["s2", "s3"] {
        assert_eq!(result(8, call)["sandbox"], ran_outside, "{call}");
    }
    let s3 = result(8, "s3");
    assert!(
        s3["output"].as_str().unwrap().contains("Permission denied"),
        "$TERN_HOME is out of reach even outside the sandbox: {s3}"
    );
    assert!(!s3.to_string().contains("the-secret-in-tern-home"), "{s3}");
    assert_eq!(result(11, "n2")["sandbox"], ran_outside);
}

/// Tab completes a slash command, and an answer's markdown is rendered for the terminal:
/// no `#` or fences, bullets for list items, code indented.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tab_completes_commands_and_markdown_is_rendered() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::text(
        "# Steps\n\nRun **this** first:\n\n- first item\n- second item\n\n```sh\necho from-the-block\n```\n\nDone.",
    ));
    let Chat {
        master: _master,
        mut child,
        mut writer,
        screen,
    } = start_chat_on(&home, &work, &fake, "xterm");
    let (screen, shown) = tokio::task::spawn_blocking(move || {
        let mut at = screen.wait_for("Ctrl-D quits", 0);
        at = screen.wait_for("› ", at);
        // "/hel" + Tab is "/help": the help comes out, listing the commands.
        writer.write_all(b"/hel\t").unwrap();
        at = screen.wait_for("/help", at);
        writer.write_all(b"\r").unwrap();
        at = screen.wait_for("Commands:", at);
        at = screen.wait_for("/resume ID", at);
        at = screen.wait_for("› ", at);
        writer.write_all(b"show me the steps\r").unwrap();
        let from = at;
        at = screen.wait_for("Done.", at);
        let shown = screen.text(from, at);
        at = screen.wait_for("› ", at);
        writer.write_all(b"\x04").unwrap();
        let _ = at;
        (screen, shown)
    })
    .await
    .unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "screen:\n{}", screen.0.lock().unwrap());
    assert!(shown.contains("Steps"), "{shown}");
    assert!(!shown.contains("# Steps"), "{shown}");
    assert!(
        shown.contains("• first item") && shown.contains("• second item"),
        "{shown}"
    );
    assert!(shown.contains("    echo from-the-block"), "{shown}");
    assert!(!shown.contains("```") && !shown.contains("**"), "{shown}");
}

/// A stream that ends in an error event (llama.cpp when output breaks its tool-call grammar)
/// is asked for again: the REPL says the text so far is void, drops what it still held back,
/// and shows the retried answer once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_stream_is_marked_void_and_the_answer_shown_once() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::raw_sse([
        r#"{"choices":[{"delta":{"content":"An unfinished para"}}]}"#,
        r#"{"error":{"code":500,"message":"Failed to parse input at pos 18: <tool_call>","type":"server_error"}}"#,
    ]))
    .push(Reply::text("The whole answer."));
    let Chat {
        master: _master,
        mut child,
        mut writer,
        screen,
    } = start_chat(&home, &work, &fake);
    let (screen, shown) = tokio::task::spawn_blocking(move || {
        let mut at = screen.wait_for("› ", 0);
        writer.write_all(b"answer me\r").unwrap();
        let from = at;
        at = screen.wait_for("[the answer broke off; the text above is discarded]", at);
        at = screen.wait_for("The whole answer.", at);
        let shown = screen.text(from, at);
        at = screen.wait_for("› ", at);
        writer.write_all(b"\x04").unwrap();
        let _ = at;
        (screen, shown)
    })
    .await
    .unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "screen:\n{}", screen.0.lock().unwrap());
    assert!(
        !shown.contains("An unfinished para"),
        "held-back text of the broken answer is dropped:\n{shown}"
    );
    assert_eq!(shown.matches("The whole answer.").count(), 1, "{shown}");
    assert!(shown.contains("retry 1"), "the retry is reported:\n{shown}");
    assert_eq!(fake.requests().len(), 2);
}

/// Issue 17 at the terminal: an MCP server's `elicitation/create` during a tool call is asked
/// at the REPL's prompt (`tern chat` starts the server with the terminal as its elicitor), and
/// the human's decline goes back to the server, whose answer the model then reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_servers_elicitation_is_asked_at_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let entry = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        entry.is_file(),
        "{} is missing: run `npm ci --no-audit --no-fund` in tests/mcp",
        entry.display()
    );
    let sandbox = match tern_sandbox::Support::probe() {
        tern_sandbox::Support::Missing { .. } => "sandbox = \"none\"\n",
        tern_sandbox::Support::Landlock { .. } => "",
    };
    std::fs::write(
        home.join("config.toml"),
        format!(
            "[mcp_servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n{sandbox}",
            entry.display().to_string()
        ),
    )
    .unwrap();

    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::tool_call(
        "e1",
        "mcp__everything__trigger-elicitation-request",
        "{}",
    ))
    .push(Reply::text("You declined; nothing was filled in."));

    let Chat {
        master: _master,
        mut child,
        mut writer,
        screen,
    } = start_chat(&home, &work, &fake);
    let screen = tokio::task::spawn_blocking(move || {
        let mut at = screen.wait_for("Ctrl-D quits", 0);
        at = screen.wait_for("› ", at);
        writer.write_all(b"fill in the form\r").unwrap();
        at = screen.wait_for(
            "MCP server `everything` asks (during `trigger-elicitation-request`)",
            at,
        );
        at = screen.wait_for("[a]nswer, [d]ecline or [c]ancel?", at);
        writer.write_all(b"d\r").unwrap();
        at = screen.wait_for("You declined; nothing was filled in.", at);
        at = screen.wait_for("› ", at);
        writer.write_all(b"\x04").unwrap();
        let _ = at;
        screen
    })
    .await
    .unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "screen:\n{}", screen.0.lock().unwrap());
    // The server got the decline: its result, in the model's second request, says so.
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let msgs = reqs[1].messages();
    let result = msgs.iter().find(|m| m["tool_call_id"] == "e1").unwrap();
    let text = result["content"].as_str().unwrap();
    assert!(
        text.contains("User declined") && text.contains("\n  \"action\": \"decline\"\n"),
        "{text}"
    );
}
