//! The interactive REPL in a real pseudo-terminal: line editing is on, Ctrl-C is a real
//! SIGINT from the terminal, and the approval prompt is answered by typing.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{CommandBuilder, PtySize, native_pty_system};
use tern_fake_model::{FakeModel, Reply};

struct Screen(Arc<Mutex<String>>);

impl Screen {
    /// Waits until `text` appears after byte offset `from`; returns the offset after it.
    fn wait_for(&self, text: &str, from: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            {
                let s = self.0.lock().unwrap();
                if let Some(pos) = s.get(from..).and_then(|rest| rest.find(text)) {
                    return from + pos + text.len();
                }
                assert!(
                    Instant::now() < deadline,
                    "timed out waiting for {text:?}; screen:\n{s}"
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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
    cmd.cwd(&work);
    for k in ["OPENAI_API_KEY", "TERN_LOG"] {
        cmd.env_remove(k);
    }
    cmd.env("TERN_HOME", &home);
    cmd.env("OPENAI_BASE_URL", fake.base_url());
    cmd.env("TERN_MODEL", "fake-model");
    cmd.env("NO_COLOR", "1");
    cmd.env("TERM", "dumb");
    let mut child = pty.slave.spawn_command(cmd).unwrap();
    drop(pty.slave);
    let mut reader = pty.master.try_clone_reader().unwrap();
    let mut writer = pty.master.take_writer().unwrap();
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

    let tool_pidfile = pidfile.clone();
    let screen = tokio::task::spawn_blocking(move || {
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
        let deadline = Instant::now() + Duration::from_secs(20);
        while !std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n')) {
            assert!(Instant::now() < deadline, "the tool never started");
            std::thread::sleep(Duration::from_millis(20));
        }
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
    assert!(process_ended(pid), "the interrupted tool's process is gone");
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

/// Whether process `pid` has ended within a few seconds: gone, or a zombie nobody reaped
/// yet (a command's shell is its watchdog's child; killed with its group, it waits for init
/// to reap it).
fn process_ended(pid: i32) -> bool {
    for _ in 0..250 {
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()
                    .map(|r| r.trim_start().starts_with('Z'))
            });
        if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err()
            || zombie == Some(true)
        {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}
