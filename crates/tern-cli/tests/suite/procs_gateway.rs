//! Background processes through a real `tern gateway`, only the model faked: the model
//! starts a process with `terminal` and `background: true`; the gateway is killed with
//! SIGKILL and started again; the process is still running, listed by the `process` tool,
//! takes stdin, and ends when its session is deleted. The hook events `process_started` and
//! `process_exited` are seen by a command hook, once each. Ten processes (some in a PTY)
//! survive kill -9 of the gateway with gap-free logs and working stdin, and the one that
//! ended meanwhile has its exit code. `keep_processes` on reset and delete; the idle reset
//! spares sessions with running processes; `[processes] keep_finished` and `log_max_bytes`
//! from config.toml take effect (a finished process's directory goes after its retention, a
//! log stays under its cap).

use crate::common;

use std::time::Duration;

use common::{Api, Env, content, last_message, wait_until};
use serde_json::{Value, json};
use tern_fake_model::{FakeModel, Reply};

/// The model: `start` runs the background command, `call TOOL ARGS` calls any tool; after
/// a tool result it answers with that result, so the test reads it from the reply.
fn script_model(fake: &FakeModel) {
    fake.set_responder(move |body| {
        let last = last_message(body);
        let text = content(&last).to_owned();
        match last["role"].as_str() {
            Some("user") if text == "start" => Reply::tool_call(
                "call_start",
                "terminal",
                json!({
                    "command": "echo started; while read -r l; do echo \"got:$l\"; done",
                    "background": true,
                })
                .to_string(),
            ),
            Some("user") => {
                let (tool, args) = text
                    .strip_prefix("call ")
                    .and_then(|r| r.split_once(' '))
                    .unwrap_or(("none", "{}"));
                Reply::tool_call("call_x", tool, args.to_owned())
            }
            Some("tool") => Reply::text(text),
            _ => Reply::text("?"),
        }
    });
}

/// One turn; the tool result the model echoed, as JSON.
async fn turn(api: &Api, session: &str, message: &str) -> Value {
    let v = api.chat(session, message).await;
    let text = v["message"]["content"].as_str().unwrap_or_default();
    serde_json::from_str(text).unwrap_or_else(|_| panic!("not a tool result: {v}"))
}

async fn process(api: &Api, session: &str, args: Value) -> Value {
    turn(api, session, &format!("call process {args}")).await
}

fn hook_events(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[tokio::test]
async fn a_background_process_survives_a_killed_gateway() {
    let e = Env::with_model().await;
    script_model(e.fake());
    let events = e.dir.path().join("events.jsonl");
    e.config(&format!(
        "[processes]\nmax_running = 4\nkeep_finished = \"1h\"\n\n[[hooks]]\nevents = [\"process_started\", \"process_exited\"]\ncommand = \"cat >> {}; echo >> {}\"\n",
        events.display(),
        events.display()
    ));
    let mut gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let session = api.create_session().await;

    let started = turn(&api, &session, "start").await;
    let id = started["session_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("proc_"), "{started}");
    // Named plainly, with `session_id` kept as its alias for Hermes' clients.
    assert_eq!(started["process_id"], id.as_str(), "{started}");
    let pid = started["pid"].as_i64().unwrap();
    let first = process(&api, &session, json!({"action": "poll", "session_id": id})).await;
    assert_eq!(first["state"], "running", "{first}");

    // kill -9 the gateway; the process does not notice.
    gw.child.kill().unwrap();
    gw.child.wait().unwrap();
    drop(gw);
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the process died with the gateway"
    );

    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let list = process(&api, &session, json!({"action": "list"})).await;
    let procs = list["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{list}");
    assert_eq!(procs[0]["session_id"], id.as_str());
    assert_eq!(procs[0]["state"], "running");
    assert_eq!(procs[0]["pid"], pid);

    // stdin still works, and the output goes on where it was.
    let ok = process(
        &api,
        &session,
        json!({"action": "submit", "session_id": id, "data": "after restart"}),
    )
    .await;
    assert_eq!(ok["ok"], true, "{ok}");
    let log = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(100),
        async || {
            let l = process(
                &api,
                &session,
                json!({"action": "log", "session_id": id, "offset": 0}),
            )
            .await;
            let out = l["output"].as_str().unwrap_or_default().to_owned();
            if out.contains("got:after restart") {
                Ok(out)
            } else {
                Err(format!("{l}"))
            }
        },
    )
    .await;
    assert_eq!(log, "started\ngot:after restart\n");

    // Deleting the session kills its process; the exit is reported once.
    api.delete(&session).await;
    let evs = wait_until(
        Duration::from_secs(60),
        Duration::from_millis(100),
        async || {
            let evs = hook_events(&events);
            if evs.iter().any(|v| v["event"] == "process_exited") {
                Ok(evs)
            } else {
                Err(format!("{evs:?}"))
            }
        },
    )
    .await;
    let names: Vec<&str> = evs.iter().map(|v| v["event"].as_str().unwrap()).collect();
    assert_eq!(names, ["process_started", "process_exited"], "{evs:?}");
    assert_eq!(evs[0]["process_id"], id.as_str());
    assert_eq!(evs[0]["session_id"], session.as_str());
    assert_eq!(evs[0]["source"], "api");
    assert_eq!(evs[1]["process_id"], id.as_str());
    assert_eq!(evs[1]["state"], "exited");
    assert_eq!(evs[1]["signal"], 15);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}/stat")).exists() || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        }
    );
}

fn pid_alive(pid: i64) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test]
async fn a_reset_or_delete_asked_to_keep_processes_keeps_them() {
    let e = Env::with_model().await;
    script_model(e.fake());
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let first = api.create_session().await;
    let started = turn(&api, &first, "start").await;
    let id = started["session_id"].as_str().unwrap().to_owned();
    let pid = started["pid"].as_i64().unwrap();

    // Kept on reset: it moves to the successor, which sees and drives it.
    let second = api.reset_with(&first, "?keep_processes=true").await;
    assert!(pid_alive(pid));
    let listed = process(&api, &second, json!({"action": "list"})).await;
    assert!(listed.to_string().contains(&id), "{listed}");
    let sent = process(
        &api,
        &second,
        json!({"action": "submit", "session_id": id, "data": "moved"}),
    )
    .await;
    assert!(!sent.to_string().contains("error"), "{sent}");
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(100),
        async || {
            let p = process(&api, &second, json!({"action": "log", "session_id": id})).await;
            if p.to_string().contains("got:moved") {
                Ok(())
            } else {
                Err(p.to_string())
            }
        },
    )
    .await;

    // Kept on delete: it goes on without a session.
    api.delete_with(&second, "?keep_processes=true").await;
    assert!(pid_alive(pid), "kept through the delete");

    // A plain reset ends a session's processes.
    let third = api.create_session().await;
    let other = turn(&api, &third, "start").await;
    let other_pid = other["pid"].as_i64().unwrap();
    api.reset(&third).await;
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(100),
        async || {
            if pid_alive(other_pid) {
                Err("still running".to_owned())
            } else {
                Ok(())
            }
        },
    )
    .await;
    assert!(pid_alive(pid), "the kept one is untouched");
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .ok();
}

#[tokio::test]
async fn idle_sessions_are_reset_unless_they_have_running_processes() {
    let e = Env::with_model().await;
    script_model(e.fake());
    let events = e.dir.path().join("events.jsonl");
    e.config(&format!(
        "[gateway]\nidle_reset = \"2s\"\n\n[[hooks]]\nevents = [\"session_end\"]\ncommand = \"cat >> {}; echo >> {}\"\n",
        events.display(),
        events.display()
    ));
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let idle = api.create_session().await;
    api.chat(&idle, "call none {}").await;
    let busy = api.create_session().await;
    let started = turn(&api, &busy, "start").await;
    let pid = started["pid"].as_i64().unwrap();
    let empty = api.create_session().await;

    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(200),
        async || {
            let s = api.session(&idle).await;
            if s["status"] == "ended" {
                Ok(())
            } else {
                Err(format!("not reset: {s}"))
            }
        },
    )
    .await;
    // Hooks run on tasks of their own: the event may land a moment after the reset.
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(100),
        async || {
            let ends = hook_events(&events);
            if ends
                .iter()
                .any(|v| v["session_id"] == idle.as_str() && v["reason"] == "expired")
            {
                Ok(())
            } else {
                Err(format!("no session_end (expired) for {idle}: {ends:?}"))
            }
        },
    )
    .await;
    // Well past the idle time, the one with a running process and the empty one are not.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_ne!(api.session(&busy).await["status"], "ended");
    assert_ne!(api.session(&empty).await["status"], "ended");
    assert!(pid_alive(pid));
    // Once its process ends, it is reset like any other.
    process(
        &api,
        &busy,
        json!({"action": "kill", "session_id": started["session_id"]}),
    )
    .await;
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(200),
        async || {
            let s = api.session(&busy).await;
            if s["status"] == "ended" {
                Ok(())
            } else {
                Err(format!("not reset: {s}"))
            }
        },
    )
    .await;
}

/// Counts up forever, one number per line: a gap in the log would show as a missing number.
const COUNTER: &str = "i=0; while true; do echo n$i; i=$((i+1)); sleep 0.02; done";

fn assert_counts_without_gap(out: &str, what: &str) -> u64 {
    let nums: Vec<u64> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix('n')?.parse().ok())
        .collect();
    assert!(nums.len() > 5, "{what}: too few numbers: {out:?}");
    for (i, n) in nums.iter().enumerate() {
        assert_eq!(*n, i as u64, "{what}: a gap or repeat in {nums:?}");
    }
    *nums.last().unwrap()
}

#[tokio::test]
async fn ten_processes_survive_kill_9_of_the_gateway() {
    let e = Env::with_model().await;
    script_model(e.fake());
    let mut gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let session = api.create_session().await;
    let start = async |command: &str, pty: bool| -> String {
        let args = json!({"command": command, "background": true, "pty": pty});
        let v = turn(&api, &session, &format!("call terminal {args}")).await;
        v["session_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{v}"))
            .to_owned()
    };
    // Six counters (three in a PTY), two stdin readers (one in a PTY), one that waits for
    // a file and exits 7, one long sleeper.
    let flag = e.dir.path().join("exit-now");
    let mut counters = Vec::new();
    for i in 0..6 {
        counters.push(start(COUNTER, i % 2 == 0).await);
    }
    let reader = start("while read -r l; do echo \"got:$l\"; done", false).await;
    let pty_reader = start("python3 -i -q", true).await;
    let ender = start(
        &format!(
            "while [ ! -e {} ]; do sleep 0.05; done; exit 7",
            flag.display()
        ),
        false,
    )
    .await;
    let sleeper = start("sleep 600", false).await;
    let list = process(&api, &session, json!({"action": "list"})).await;
    assert_eq!(list["processes"].as_array().unwrap().len(), 10, "{list}");

    gw.child.kill().unwrap();
    gw.child.wait().unwrap();
    drop(gw);
    // While the gateway is down, one of them ends.
    std::fs::write(&flag, b"").unwrap();
    let ender_exit = e.home().join("procs").join(&ender).join("exit.json");
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        async || {
            if ender_exit.exists() {
                Ok(())
            } else {
                Err("no exit.json yet".to_owned())
            }
        },
    )
    .await;

    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let list = process(&api, &session, json!({"action": "list"})).await;
    let procs = list["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 10, "{list}");
    for p in procs {
        if p["session_id"] == ender.as_str() {
            assert_eq!(p["state"], "exited", "{p}");
            assert_eq!(p["exit_code"], 7, "{p}");
        } else {
            assert_eq!(p["state"], "running", "{p}");
        }
    }
    // Logs: every counter's numbers without a gap, across the restart and after it.
    for id in &counters {
        let before = {
            let l = process(
                &api,
                &session,
                json!({"action": "log", "session_id": id, "offset": 0}),
            )
            .await;
            assert_counts_without_gap(l["output"].as_str().unwrap(), id)
        };
        wait_until(
            Duration::from_secs(30),
            Duration::from_millis(100),
            async || {
                let l = process(
                    &api,
                    &session,
                    json!({"action": "log", "session_id": id, "offset": 0}),
                )
                .await;
                let last = assert_counts_without_gap(l["output"].as_str().unwrap(), id);
                if last > before + 3 {
                    Ok(())
                } else {
                    Err(format!("{id} does not go on"))
                }
            },
        )
        .await;
    }
    // stdin, over a pipe and a PTY.
    process(
        &api,
        &session,
        json!({"action": "submit", "session_id": reader, "data": "still here"}),
    )
    .await;
    process(
        &api,
        &session,
        json!({"action": "submit", "session_id": pty_reader, "data": "print(6*7)"}),
    )
    .await;
    for (id, want) in [(&reader, "got:still here"), (&pty_reader, "42")] {
        wait_until(
            Duration::from_secs(30),
            Duration::from_millis(100),
            async || {
                let l = process(
                    &api,
                    &session,
                    json!({"action": "log", "session_id": id, "offset": 0}),
                )
                .await;
                if l["output"].as_str().unwrap_or_default().contains(want) {
                    Ok(())
                } else {
                    Err(format!("{l}"))
                }
            },
        )
        .await;
    }
    let _ = sleeper;
    api.delete(&session).await;
}

#[tokio::test]
async fn finished_processes_are_removed_after_keep_finished_and_logs_stay_under_their_cap() {
    let e = Env::with_model().await;
    script_model(e.fake());
    // Long enough for the checks below on a busy machine; pruned every 1.5 s.
    e.config("[processes]\nkeep_finished = \"6s\"\nlog_max_bytes = 16384\n");
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let session = api.create_session().await;
    // About 490 KB of numbered lines, then the end.
    let started = turn(
        &api,
        &session,
        &format!(
            "call terminal {}",
            json!({"command": "seq 1 80000; echo the-end", "background": true})
        ),
    )
    .await;
    let id = started["session_id"].as_str().unwrap().to_owned();
    let dir = e.home().join("procs").join(&id);
    let waited = process(
        &api,
        &session,
        json!({"action": "wait", "session_id": id, "timeout": 60}),
    )
    .await;
    assert_eq!(waited["exit_code"], 0, "{waited}");
    // The log holds the newest output within the cap from the config.
    let on_disk = tern_procs::log::on_disk(&dir.join("log")).unwrap();
    assert!(on_disk <= 16384, "{on_disk} bytes on disk");
    let tail = process(&api, &session, json!({"action": "log", "session_id": id})).await;
    assert!(
        tail["output"]
            .as_str()
            .unwrap()
            .ends_with("80000\nthe-end\n"),
        "{tail}"
    );
    // Listed while kept; gone, directory and all, once the retention is over.
    let list = process(&api, &session, json!({"action": "list"})).await;
    assert_eq!(list["processes"].as_array().unwrap().len(), 1, "{list}");
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(200),
        async || {
            if dir.exists() {
                Err(format!("{} still there", dir.display()))
            } else {
                Ok(())
            }
        },
    )
    .await;
    let list = process(&api, &session, json!({"action": "list"})).await;
    assert_eq!(list["processes"].as_array().unwrap().len(), 0, "{list}");
}
