//! What `tern` writes: plain-text logs off a terminal, a quiet end when its reader goes away,
//! whole error causes, and the model each answer really came from.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{Env, assert_ok, stderr, stdout};
use serde_json::Value;
use tern_fake_model::Reply;

/// An env whose fake model answers every request with a short text.
async fn answering() -> Env {
    let e = Env::with_model().await;
    e.fake().set_responder(|_| Reply::text("ok"));
    e
}

/// `tern ARGS…` with stdout a real pipe whose read end is already closed, as `| head -1`
/// leaves it once `head` has its line.
pub fn into_closed_pipe(e: &Env, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    e.tern().args(args).stdout(writer).output().unwrap()
}

/// Exit status 0 and nothing on stderr: no panic message, no `error: Broken pipe`.
#[track_caller]
pub fn ended_quietly(o: &Output, what: &str) {
    assert_eq!(o.status.code(), Some(0), "{what}: stderr:\n{}", stderr(o));
    assert_eq!(
        stderr(o),
        "",
        "{what}: said something about the closed pipe"
    );
}

// Multi-threaded: the fake model serves while this thread waits for `tern`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_ends_session_commands_quietly() {
    let e = answering().await;
    assert_ok(&e.run(&["chat", "-q", "hello"]));
    let list = e.run(&["sessions", "list", "--json"]);
    assert_ok(&list);
    let id = serde_json::from_slice::<Value>(&list.stdout).unwrap()[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for args in [
        vec!["sessions", "list"],
        vec!["sessions", "list", "--json"],
        vec!["sessions", "show", &id],
        vec!["sessions", "export", &id],
        vec!["sessions", "search", "hello"],
        vec!["status"],
        vec!["config", "show"],
        vec!["completions", "bash"],
    ] {
        ended_quietly(&into_closed_pipe(&e, &args), &format!("{args:?}"));
    }
    // A real `| head -1` in a shell: the first line, and the pipeline succeeds.
    let o = std::process::Command::new("bash")
        .args(["-o", "pipefail", "-c"])
        .arg(format!(
            "'{}' sessions list | head -1",
            env!("CARGO_BIN_EXE_tern")
        ))
        .env("TERN_HOME", e.home())
        .output()
        .unwrap();
    assert_ok(&o);
    assert!(stdout(&o).starts_with("ID "), "{}", stdout(&o));
    assert_eq!(stderr(&o), "");
}

// Multi-threaded: the fake model serves while this thread waits for `tern`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_log_has_no_terminal_codes() {
    let e = answering().await;
    let o = e
        .tern()
        .args(["chat", "-q", "hello"])
        .env("TERN_LOG", "debug")
        .output()
        .unwrap();
    assert_ok(&o);
    let log = std::fs::read_to_string(e.home().join("logs/tern.log")).unwrap();
    assert!(log.contains("INFO") || log.contains("DEBUG"), "{log}");
    assert!(!log.contains('\x1b'), "ANSI codes in tern.log:\n{log:?}");
}

#[tokio::test]
async fn gateway_logs_on_a_pipe_are_plain_text() {
    let e = Env::with_model().await;
    // Text logs (the default format), stderr a pipe as under systemd or `2> file`.
    let mut child = e
        .tern()
        .args(["gateway", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let listening = line.contains("tern gateway listening");
            let _ = tx.send(line);
            if listening {
                return;
            }
        }
    });
    let mut lines = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                let done = line.contains("tern gateway listening");
                lines.push(line);
                if done {
                    break;
                }
            }
            Err(_) => {
                let _ = child.kill();
                panic!("the gateway did not say it listens:\n{}", lines.join("\n"));
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = lines.join("\n");
    assert!(text.contains("INFO"), "{text}");
    assert!(!text.contains('\x1b'), "ANSI codes on a pipe:\n{text:?}");
}

#[tokio::test]
async fn an_unreachable_model_is_reported_with_its_cause_and_each_retry_too() {
    let e = Env::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    e.config("[model]\nmax_retries = 1\n");
    let o = e
        .tern()
        .args(["chat", "-q", "hello"])
        .env("OPENAI_BASE_URL", format!("http://127.0.0.1:{port}/v1"))
        .env("TERN_MODEL", "m")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o).to_lowercase();
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("error: "), "{err}");
    assert!(last.contains("connection refused"), "cut off: {last}");
    // The retry notice before it says why, too.
    let retry = err
        .lines()
        .find(|l| l.contains("retry"))
        .unwrap_or_else(|| panic!("no retry notice: {err}"));
    assert!(retry.contains("connection refused"), "{retry}");
}

// Multi-threaded: the fake model serves while this thread waits for `tern`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_show_reports_the_models_that_answered() {
    let e = answering().await;
    assert_ok(&e.run(&["chat", "-q", "first", "--model", "model-one"]));
    assert_ok(&e.run(&["chat", "--continue", "-q", "second", "--model", "model-two"]));
    let list = e.run(&["sessions", "list", "--json"]);
    let sessions: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(sessions.as_array().unwrap().len(), 1, "{sessions}");
    let id = sessions[0]["id"].as_str().unwrap();

    let o = e.run(&["sessions", "show", id]);
    assert_ok(&o);
    let text = stdout(&o);
    let header = text.lines().find(|l| l.starts_with("status")).unwrap();
    // The latest first, then the one before: not the model the session was created with.
    assert!(
        header.ends_with("model model-two (before: model-one)"),
        "{header}"
    );
    let answers: Vec<&str> = text.lines().filter(|l| l.contains(" assistant")).collect();
    assert_eq!(answers.len(), 2, "{text}");
    assert!(answers[0].contains("[model-one]"), "{}", answers[0]);
    assert!(answers[1].contains("[model-two]"), "{}", answers[1]);

    let o = e.run(&["sessions", "show", id, "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let models: Vec<&Value> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| &m["model"])
        .collect();
    assert_eq!(models, ["model-one", "model-two"], "{v}");
}
