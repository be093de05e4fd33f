//! `tern ps`: the real `tern` binary against background processes that a real
//! `ProcessManager` (standing in for the gateway, with `tern supervise` as supervisor) started
//! under `$TERN_HOME/procs`.

use crate::common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Env, assert_exit, assert_ok, stderr, stdout};
use serde_json::Value;
use tern_procs::{
    ManagerConfig, ProcEvent, ProcStatus, ProcessManager, SpawnRequest, SupervisorCommand,
};
use tern_test_support::eventually;

/// Turns a hang into a failure; never a time the test waits for.
const LONG: Duration = Duration::from_secs(60);

fn config(e: &Env) -> ManagerConfig {
    let sup = SupervisorCommand {
        program: PathBuf::from(env!("CARGO_BIN_EXE_tern")),
        args: vec!["supervise".into()],
    };
    let mut cfg = ManagerConfig::new(e.home().join("procs"), sup);
    cfg.kill_grace = Duration::from_millis(500);
    cfg
}

async fn manager(e: &Env) -> ProcessManager {
    ProcessManager::open(config(e)).await.unwrap()
}

fn req(e: &Env, command: &str, pty: bool) -> SpawnRequest {
    SpawnRequest {
        command: command.into(),
        workdir: e.work(),
        pty,
        session_id: Some("sess-abc123".into()),
        ..Default::default()
    }
}

/// On drop (a failed test included), SIGKILLs every child group and supervisor still running
/// under `procs/`.
pub(crate) struct Reap(pub(crate) PathBuf);

impl Drop for Reap {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, kill, killpg};
        use nix::unistd::Pid;
        let Ok(rd) = std::fs::read_dir(self.0.join("procs")) else {
            return;
        };
        for dir in rd.flatten().map(|e| e.path()) {
            if dir.join("exit.json").exists() {
                continue;
            }
            let Ok(meta) = std::fs::read(dir.join("meta.json")) else {
                continue;
            };
            let Ok(meta) = serde_json::from_slice::<tern_procs::Meta>(&meta) else {
                continue;
            };
            let _ = killpg(Pid::from_raw(meta.child_pid), Signal::SIGKILL);
            let _ = kill(Pid::from_raw(meta.supervisor_pid), Signal::SIGKILL);
        }
    }
}

/// `out` ended with `code` and says `needle` on stderr.
fn fails_with(out: &Output, code: i32, needle: impl AsRef<str>) {
    assert_exit(out, code);
    assert!(stderr(out).contains(needle.as_ref()), "{}", stderr(out));
}

/// Waits for `child` to exit, reading its output meanwhile; kills it and fails after
/// [`LONG`].
fn finish(child: Child) -> Output {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output().unwrap());
    });
    match rx.recv_timeout(LONG) {
        Ok(out) => out,
        Err(_) => {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            let out = rx.recv().unwrap();
            panic!(
                "tern did not finish:\nstdout:\n{}\nstderr:\n{}",
                stdout(&out),
                stderr(&out)
            );
        }
    }
}

async fn until_logged(mgr: &ProcessManager, id: &str, needle: &str) {
    eventually(needle, async || {
        let l = mgr.log(id, Some(0), None).await.unwrap();
        l.output.contains(needle).then_some(())
    })
    .await;
}

fn ps_json(e: &Env, args: &[&str]) -> Vec<Value> {
    let out = e
        .tern()
        .arg("ps")
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    assert_ok(&out);
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .cloned()
        .unwrap()
}

fn find<'a>(list: &'a [Value], id: &str) -> &'a Value {
    list.iter()
        .find(|p| p["id"] == id)
        .unwrap_or_else(|| panic!("{id} not listed: {list:?}"))
}

#[tokio::test]
async fn list_shows_running_and_recent_processes_and_json_parses() {
    let e = Env::new();
    let _reap = Reap(e.home());
    // Nothing yet: a friendly line, success.
    let out = e.run(&["ps"]);
    assert_ok(&out);
    assert!(stdout(&out).is_empty());
    assert!(
        stderr(&out).contains("no background processes"),
        "{}",
        stderr(&out)
    );
    assert_eq!(ps_json(&e, &[]), Vec::<Value>::new());

    let mgr = manager(&e).await;
    let sleeper = mgr.spawn(req(&e, "sleep 300", false)).await.unwrap();
    let term = mgr.spawn(req(&e, "sleep 300", true)).await.unwrap();
    let mut other = req(&e, "echo done; exit 3", false);
    other.session_id = Some("sess-zzz".into());
    let done = mgr.spawn(other).await.unwrap();
    let old = mgr.spawn(req(&e, "true", false)).await.unwrap();
    for id in [&done.id, &old.id] {
        eventually("the exit", async || {
            (!mgr.get(id).await.unwrap().status.is_running()).then_some(())
        })
        .await;
    }
    // `old` ended two hours ago, as far as its record says.
    let exit_path = e.home().join("procs").join(&old.id).join("exit.json");
    let mut rec: Value = serde_json::from_slice(&std::fs::read(&exit_path).unwrap()).unwrap();
    rec["ended_at_ms"] = (tern_util::now_ms() - 2 * 3600 * 1000).into();
    std::fs::write(&exit_path, rec.to_string()).unwrap();
    // A directory whose supervisor is still starting (no meta.json yet).
    let starting = e.home().join("procs").join("proc_0123456789ab");
    std::fs::create_dir(&starting).unwrap();
    std::fs::write(starting.join("spec.json"), "{}").unwrap();

    let out = e.run(&["ps"]);
    assert_ok(&out);
    let table = stdout(&out);
    let line = |id: &str| {
        table
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("{id} not in:\n{table}"))
            .to_owned()
    };
    assert!(table.starts_with("ID "), "{table}");
    let l = line(&sleeper.id);
    assert!(
        l.contains("running") && l.contains(&sleeper.pid.to_string()) && l.contains("sleep 300"),
        "{l}"
    );
    assert!(l.contains("sess-abc123") && l.contains("up "), "{l}");
    assert!(line(&term.id).contains("yes"), "{table}");
    let l = line(&done.id);
    assert!(l.contains("exited 3") && l.contains("ago"), "{l}");
    assert!(!table.contains(&old.id), "{table}");
    assert!(!table.contains("proc_0123456789ab"), "{table}");
    assert!(stderr(&out).contains("1 that finished"), "{}", stderr(&out));

    let all = ps_json(&e, &["--all"]);
    assert_eq!(all.len(), 4, "{all:?}");
    let s = find(&all, &sleeper.id);
    assert_eq!(s["state"], "running");
    assert_eq!(s["pid"], sleeper.pid);
    assert_eq!(s["pty"], false);
    assert_eq!(s["session_id"], "sess-abc123");
    assert_eq!(s["command"], "sleep 300");
    let d = find(&all, &done.id);
    assert_eq!(
        (d["state"].as_str(), d["exit_code"].as_i64()),
        (Some("exited"), Some(3))
    );
    assert_eq!(find(&all, &term.id)["pty"], true);
    assert_eq!(ps_json(&e, &[]).len(), 3);
    let mine = ps_json(&e, &["--session", "sess-abc"]);
    assert_eq!(mine.len(), 2, "{mine:?}");
    assert!(mine.iter().all(|p| p["session_id"] == "sess-abc123"));

    // A process moved to another session by a reset that kept it (`owner`) is listed there.
    std::fs::write(
        e.home().join("procs").join(&term.id).join("owner"),
        r#"{"session_id":"sess-new"}"#,
    )
    .unwrap();
    let moved = ps_json(&e, &["--session", "sess-new"]);
    assert_eq!(moved.len(), 1, "{moved:?}");
    assert_eq!(moved[0]["id"], term.id.as_str());
    assert_eq!(ps_json(&e, &["--session", "sess-abc"]).len(), 1);

    // Read-only: the starting directory is still there, and no exit was marked reported.
    assert!(starting.join("spec.json").exists());
    for p in &all {
        let dir = e.home().join("procs").join(p["id"].as_str().unwrap());
        assert!(!dir.join("reported").exists() && !dir.join("polled").exists());
    }
    for p in [&sleeper, &term] {
        mgr.kill(&p.id).await.unwrap();
    }
}

#[tokio::test]
async fn log_prints_the_output_and_follow_ends_with_the_exit_status() {
    let e = Env::new();
    let _reap = Reap(e.home());
    let mgr = manager(&e).await;
    let p = mgr
        .spawn(req(
            &e,
            "for i in 1 2 3 4 5; do echo line$i; sleep 0.2; done; exit 4",
            false,
        ))
        .await
        .unwrap();
    let started = Instant::now();
    let out = finish(
        e.tern()
            .args(["ps", "log", "-f", &p.id])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    assert_ok(&out);
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "did not follow"
    );
    assert_eq!(stdout(&out), "line1\nline2\nline3\nline4\nline5\n");
    assert!(
        stderr(&out).contains(&format!("{} exited with code 4", p.id)),
        "{}",
        stderr(&out)
    );

    // Without -f, the log as it is; the start of an id is enough.
    let short = &p.id["proc_".len()..][..6];
    let out = e.run(&["ps", "log", short]);
    assert_ok(&out);
    assert_eq!(stdout(&out), "line1\nline2\nline3\nline4\nline5\n");
    let out = e.run(&["ps", "log", &p.id, "--tail", "2"]);
    assert_eq!(stdout(&out), "line4\nline5\n");
    let out = e.run(&["ps", "log", &p.id, "--offset", "6"]);
    assert_eq!(stdout(&out), "line2\nline3\nline4\nline5\n");
    let out = e.run(&["ps", "log", &p.id, "-f", "--tail", "1"]);
    assert_eq!(stdout(&out), "line5\n");
    assert!(stderr(&out).contains("exited with code 4"));

    // Raw by default (what a terminal wants); --strip as the model reads it.
    let c = mgr
        .spawn(req(
            &e,
            r"printf '\033[31mred\033[0m\n10%%\r50%%\r100%%\n'",
            true,
        ))
        .await
        .unwrap();
    eventually("the exit", async || {
        (!mgr.get(&c.id).await.unwrap().status.is_running()).then_some(())
    })
    .await;
    let raw = e.run(&["ps", "log", &c.id]);
    assert!(raw.stdout.starts_with(b"\x1b[31mred\x1b[0m\r\n"), "{raw:?}");
    let stripped = e.run(&["ps", "log", &c.id, "--strip"]);
    assert_eq!(stdout(&stripped), "red\n100%\n");
    // The model's poll cursor was not moved by any of this.
    assert_eq!(
        mgr.poll(&p.id).await.unwrap().output,
        "line1\nline2\nline3\nline4\nline5\n"
    );
}

/// A follow across log rotation: every line once, in order, although the early segments are
/// deleted while it reads.
#[tokio::test]
async fn follow_across_rotation_loses_and_repeats_nothing() {
    let e = Env::new();
    let _reap = Reap(e.home());
    let mut cfg = config(&e);
    cfg.log_max_bytes = 64 * 1024; // segments of 16 KiB
    let mgr = ProcessManager::open(cfg).await.unwrap();
    // 3,000 lines of 100 bytes (300 KB), 10 KB every 50 ms.
    let p = mgr
        .spawn(req(
            &e,
            "for i in $(seq 0 29); do for j in $(seq 1 100); do printf '%099d\\n' $((i*100+j)); done; sleep 0.05; done",
            false,
        ))
        .await
        .unwrap();
    let out = finish(
        e.tern()
            .args(["ps", "log", "-f", &p.id])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    assert_ok(&out);
    let text = stdout(&out);
    let numbers: Vec<u64> = text.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(numbers, (1..=3000).collect::<Vec<_>>());
    assert!(!stderr(&out).contains("rotated out"), "{}", stderr(&out));
    // The log did rotate: its start is gone now.
    let out = e.run(&["ps", "log", &p.id]);
    let kept = stdout(&out);
    assert!(
        kept.len() <= 64 * 1024 && !kept.is_empty(),
        "{}",
        kept.len()
    );
    assert!(text.ends_with(&kept));
    let out = e.run(&["ps", "log", &p.id, "--offset", "0"]);
    assert!(stderr(&out).contains("rotated out"), "{}", stderr(&out));
}

#[tokio::test]
async fn kill_stops_a_process_and_the_gateway_still_reports_its_exit() {
    let e = Env::new();
    let _reap = Reap(e.home());
    let mgr = manager(&e).await;
    // The stand-in gateway reports events, as the real one does.
    let mut events = mgr.events();
    let p = mgr.spawn(req(&e, "sleep 300", false)).await.unwrap();
    let out = e.run(&["ps", "kill", &p.id]);
    assert_ok(&out);
    assert!(
        stdout(&out).contains(&format!("{} was killed by SIGTERM", p.id)),
        "{}",
        stdout(&out)
    );
    let listed = ps_json(&e, &[]);
    let k = find(&listed, &p.id);
    assert_eq!(
        (k["state"].as_str(), k["signal"].as_i64()),
        (Some("exited"), Some(15))
    );
    // The exit is the gateway's to report, once.
    let exited = tokio::time::timeout(LONG, async {
        loop {
            match events.recv().await.unwrap() {
                ProcEvent::Exited(info) => return info,
                ProcEvent::Started(_) => {}
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(exited.id, p.id);

    // TERM ignored: KILL after the grace asked for.
    let stubborn = mgr
        .spawn(req(&e, "trap '' TERM; echo armed; sleep 300", false))
        .await
        .unwrap();
    until_logged(&mgr, &stubborn.id, "armed").await;
    let started = Instant::now();
    let out = e.run(&["ps", "kill", &stubborn.id, "--grace", "1"]);
    assert_ok(&out);
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert!(
        stdout(&out).contains("killed by SIGKILL"),
        "{}",
        stdout(&out)
    );

    // Killing what has ended says so and succeeds.
    let out = e.run(&["ps", "kill", &p.id]);
    assert_ok(&out);
    assert!(stdout(&out).contains("already ended"), "{}", stdout(&out));
    let out = e.run(&["ps", "kill", &p.id, "--grace=-1"]);
    fails_with(&out, 1, "--grace");
}

/// A process whose supervisor was killed is `lost`: listed so, and neither followed nor
/// killed as if it ran.
#[tokio::test]
async fn a_process_whose_supervisor_died_is_lost() {
    let e = Env::new();
    let _reap = Reap(e.home());
    let mgr = manager(&e).await;
    let p = mgr.spawn(req(&e, "sleep 300", false)).await.unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(p.supervisor_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    eventually("lost", async || {
        (mgr.get(&p.id).await.unwrap().status == ProcStatus::Lost).then_some(())
    })
    .await;
    let out = e.run(&["ps"]);
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with(&p.id) && l.contains("lost"))
    );
    let out = e.run(&["ps", "log", "-f", &p.id]);
    fails_with(&out, 1, "lost");
    let out = e.run(&["ps", "kill", &p.id]);
    fails_with(&out, 1, "lost");
}

/// Starts `tern ps attach ID` with piped stdin and stdout; stdout's bytes arrive on the
/// channel.
fn attach(e: &Env, id: &str) -> (Child, mpsc::Receiver<Vec<u8>>) {
    let mut child = e
        .tern()
        .args(["ps", "attach", id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// Reads the channel into `seen` until it contains `needle`.
fn read_until(rx: &mpsc::Receiver<Vec<u8>>, seen: &mut Vec<u8>, needle: &str) {
    let deadline = Instant::now() + LONG;
    while !String::from_utf8_lossy(seen).contains(needle) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(bytes) => seen.extend_from_slice(&bytes),
            Err(_) => panic!(
                "no {needle:?} in attach's output: {:?}",
                String::from_utf8_lossy(seen)
            ),
        }
    }
}

#[tokio::test]
async fn attach_to_a_python_repl_types_and_detaches() {
    let e = Env::new();
    let _reap = Reap(e.home());
    let mgr = manager(&e).await;
    let p = mgr.spawn(req(&e, "python3 -i -q", true)).await.unwrap();
    until_logged(&mgr, &p.id, ">>> ").await;

    let (mut child, rx) = attach(&e, &p.id);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"print(6*7)\r").unwrap();
    let mut seen = Vec::new();
    read_until(&rx, &mut seen, "42\r\n");
    let text = String::from_utf8_lossy(&seen).into_owned();
    // The context first (the prompt that was on the screen), then the live echo and answer.
    let prompt = text.find(">>> ").unwrap();
    assert!(prompt < text.find("print(6*7)").unwrap(), "{text:?}");
    // Ctrl-] detaches.
    stdin.write_all(&[0x1d]).unwrap();
    let out = finish(child);
    assert_ok(&out);
    let err = stderr(&out);
    assert!(err.contains("Ctrl-] detaches"), "{err}");
    assert!(err.contains(&format!("detached from {}", p.id)), "{err}");
    // The REPL runs on, and still answers.
    assert!(mgr.get(&p.id).await.unwrap().status.is_running());
    mgr.submit(&p.id, "print(6*9)").await.unwrap();
    until_logged(&mgr, &p.id, "54").await;

    // The end of stdin ends the input, not the attachment: the output goes on until the
    // process exits, and attach reports the exit.
    let (mut child, rx) = attach(&e, &p.id);
    drop(child.stdin.take());
    let mut seen = Vec::new();
    read_until(&rx, &mut seen, "54");
    mgr.submit(&p.id, "import sys; sys.exit(5)").await.unwrap();
    let out = finish(child);
    assert_ok(&out);
    assert!(
        stderr(&out).contains(&format!("{} exited with code 5", p.id)),
        "{}",
        stderr(&out)
    );
    let out = e.run(&["ps", "attach", &p.id]);
    fails_with(&out, 1, "not running");
}

#[tokio::test]
async fn attach_refuses_a_pipe_process_and_unknown_ids_fail_clearly() {
    let e = Env::new();
    let _reap = Reap(e.home());
    // No procs directory at all.
    let out = e.run(&["ps", "log", "proc_0123456789ab"]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("no process proc_0123456789ab")
            && stderr(&out).contains("does not exist"),
        "{}",
        stderr(&out)
    );

    let mgr = manager(&e).await;
    let p = mgr.spawn(req(&e, "sleep 300", false)).await.unwrap();
    let out = e.run(&["ps", "attach", &p.id]);
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("not a terminal program") && err.contains(&format!("tern ps log -f {}", p.id)),
        "{err}"
    );
    for args in [
        &["ps", "log", "proc_ffffffffffff"][..],
        &["ps", "kill", "proc_ffffffffffff"],
        &["ps", "attach", "proc_ffffffffffff"],
        &["ps", "log", "../etc"],
    ] {
        let out = e.run(args);
        assert_exit(&out, 1);
        let id = args[2];
        assert!(
            stderr(&out).contains(&format!("no process {id}")),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    assert!(mgr.get(&p.id).await.unwrap().status.is_running());
    mgr.kill(&p.id).await.unwrap();
}

#[test]
fn ps_is_in_the_help() {
    let e = Env::new();
    let out = e.run(&["ps", "--help"]);
    assert_ok(&out);
    let help = stdout(&out);
    for word in ["log", "kill", "attach", "--all", "--json", "Ctrl-]"] {
        assert!(help.contains(word), "{word}: {help}");
    }
}

/// What a terminal showed, collected by a thread.
struct Screen(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Screen {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Waits until `needle` appears after byte `from`; the offset after it.
    fn wait_for(&self, needle: &str, from: usize) -> usize {
        let deadline = Instant::now() + LONG;
        loop {
            let text = self.text();
            if let Some(at) = text.get(from..).and_then(|t| t.find(needle)) {
                return from + at + needle.len();
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} on the screen:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `tern ps attach` in a real terminal: raw mode (a lone Ctrl-] detaches at once, without
/// waiting for a line), the program gets our terminal's size at the start and after a
/// resize (SIGWINCH), and the terminal's mode is restored after the detach.
#[tokio::test]
async fn attach_in_a_real_terminal_is_raw_resizes_and_restores_the_terminal() {
    use portable_pty::{CommandBuilder, PtySize, native_pty_system};
    let e = Env::new();
    let _reap = Reap(e.home());
    let mgr = manager(&e).await;
    let p = mgr
        .spawn(req(
            &e,
            r#"while IFS= read -r l; do echo "size:$(stty size) got:$l"; done"#,
            true,
        ))
        .await
        .unwrap();

    let size = |cols, rows| PtySize {
        rows,
        cols,
        pixel_width: 0,
        pixel_height: 0,
    };
    let pty = native_pty_system().openpty(size(100, 30)).unwrap();
    let mut cmd = CommandBuilder::new("/bin/sh");
    cmd.arg("-c");
    cmd.arg(format!(
        "'{}' ps attach {}; echo \"AFTER:$?\"; stty -a",
        env!("CARGO_BIN_EXE_tern"),
        p.id
    ));
    cmd.cwd(e.work());
    cmd.env("TERN_HOME", e.home());
    cmd.env_remove("TERN_LOG");
    let mut child = pty.slave.spawn_command(cmd).unwrap();
    drop(pty.slave);
    let mut reader = pty.master.try_clone_reader().unwrap();
    let mut keys = pty.master.take_writer().unwrap();
    let screen = Screen(Default::default());
    let shown = screen.0.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                return;
            }
            shown.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    });

    let at = screen.wait_for("Ctrl-] detaches", 0);
    keys.write_all(b"hello\r").unwrap();
    let at = screen.wait_for("size:30 100 got:hello", at);
    pty.master.resize(size(90, 25)).unwrap();
    // The resize reaches the program through tern's SIGWINCH handler; type until it shows.
    let deadline = Instant::now() + LONG;
    while !screen.text()[at..].contains("size:25 90") {
        assert!(
            Instant::now() < deadline,
            "never resized:\n{}",
            screen.text()
        );
        keys.write_all(b"x\r").unwrap();
        std::thread::sleep(Duration::from_millis(200));
    }
    // A lone Ctrl-], no Enter: only a raw terminal hands it over at once.
    keys.write_all(&[0x1d]).unwrap();
    let at = screen.wait_for(&format!("detached from {}", p.id), at);
    let at = screen.wait_for("AFTER:0", at);
    screen.wait_for("isig", at);
    let deadline = Instant::now() + LONG;
    while child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "sh did not end:\n{}",
            screen.text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // `stty -a` after the detach: the terminal is cooked again.
    let modes = screen.text()[at..].to_owned();
    let words: Vec<&str> = modes.split_whitespace().collect();
    for flag in ["icanon", "echo", "isig", "opost", "icrnl"] {
        assert!(words.contains(&flag), "{flag} not restored:\n{modes}");
    }
    assert!(mgr.get(&p.id).await.unwrap().status.is_running());
    mgr.kill(&p.id).await.unwrap();
}

#[tokio::test]
async fn send_writes_lines_raw_text_and_the_end_of_input() {
    let e = Env::new();
    let _reap = Reap(e.home());
    let mgr = manager(&e).await;
    let p = mgr
        .spawn(req(
            &e,
            r#"while IFS= read -r l; do echo "got:$l"; done; echo eof; exit 4"#,
            false,
        ))
        .await
        .unwrap();
    let out = e.run(&["ps", "send", &p.id, "hello there"]);
    assert_ok(&out);
    until_logged(&mgr, &p.id, "got:hello there\n").await;
    // Raw text waits for the rest of its line.
    assert_ok(&e.run(&["ps", "send", &p.id, "--raw", "half-"]));
    assert_ok(&e.run(&["ps", "send", &p.id, "line"]));
    until_logged(&mgr, &p.id, "got:half-line\n").await;
    // `-` reads the text from stdin; an id prefix will do.
    let mut child = e
        .tern()
        .args(["ps", "send", &p.id[..9], "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all("from stdin ✓".as_bytes())
        .unwrap();
    assert_ok(&finish(child));
    until_logged(&mgr, &p.id, "got:from stdin ✓\n").await;
    // --close ends the input: the loop ends and the process exits.
    assert_ok(&e.run(&["ps", "send", &p.id, "--close"]));
    let done = mgr
        .wait(&p.id, LONG, &tokio_util::sync::CancellationToken::new())
        .await
        .unwrap();
    assert!(
        matches!(
            done.info.status,
            ProcStatus::Exited {
                exit_code: Some(4),
                ..
            }
        ),
        "{:?}",
        done.info.status
    );
    let log = mgr.log(&p.id, Some(0), None).await.unwrap().output;
    assert_eq!(
        log,
        "got:hello there\ngot:half-line\ngot:from stdin ✓\neof\n"
    );
    // An ended process and an empty call are refused clearly.
    let out = e.run(&["ps", "send", &p.id, "late"]);
    fails_with(&out, 1, "exited with code 4");
    let out = e.run(&["ps", "send", &p.id]);
    fails_with(&out, 2, "<TEXT>");
}

#[tokio::test]
async fn send_types_a_line_into_a_pty_program() {
    let e = Env::new();
    let _reap = Reap(e.home());
    let mgr = manager(&e).await;
    let p = mgr.spawn(req(&e, "python3 -i -q", true)).await.unwrap();
    until_logged(&mgr, &p.id, ">>> ").await;
    assert_ok(&e.run(&["ps", "send", &p.id, "print(6 * 7)"]));
    until_logged(&mgr, &p.id, "42").await;
    assert_ok(&e.run(&["ps", "send", &p.id, "--close"]));
    let done = mgr
        .wait(&p.id, LONG, &tokio_util::sync::CancellationToken::new())
        .await
        .unwrap();
    assert!(!done.info.status.is_running());
}

#[tokio::test]
async fn the_list_shows_running_ones_first_then_the_newest_first() {
    let e = Env::new();
    let _reap = Reap(e.home());
    let mgr = manager(&e).await;
    let first = mgr.spawn(req(&e, "true", false)).await.unwrap();
    let old_runner = mgr.spawn(req(&e, "sleep 300", false)).await.unwrap();
    let failed = mgr.spawn(req(&e, "exit 3", false)).await.unwrap();
    for id in [&first.id, &failed.id] {
        eventually("the exit", async || {
            (!mgr.get(id).await.unwrap().status.is_running()).then_some(())
        })
        .await;
    }
    let new_runner = mgr.spawn(req(&e, "sleep 300", false)).await.unwrap();
    let want = [&new_runner.id, &old_runner.id, &failed.id, &first.id];

    let listed = ps_json(&e, &[]);
    let ids: Vec<&str> = listed.iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(ids, want, "{listed:?}");
    let out = e.run(&["ps"]);
    assert_ok(&out);
    let table = stdout(&out);
    let rows: Vec<&str> = table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(rows, want, "{table}");

    // Into a pipe its reader closed (`tern ps | head -1`): a quiet success.
    for args in [&["ps"][..], &["ps", "--json"], &["ps", "log", &first.id]] {
        let o = crate::suite::output::into_closed_pipe(&e, args);
        crate::suite::output::ended_quietly(&o, &format!("{args:?}"));
    }
    for id in [&old_runner.id, &new_runner.id] {
        mgr.kill(id).await.unwrap();
    }
}
