//! Every action of the process manager against real supervisors and real processes.

use crate::support;

use std::time::Duration;

use support::*;
use tern_procs::{ProcError, ProcStatus};
use tokio_util::sync::CancellationToken;

const LONG: Duration = Duration::from_secs(120);

#[tokio::test]
async fn spawn_wait_poll_and_exit_code() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = manager(d.path()).await;
    let p = mgr
        .spawn(req("echo hello; echo oops >&2; exit 3", d.path(), false))
        .await
        .unwrap();
    assert!(p.id.starts_with("proc_"));
    assert!(p.pid > 0 && p.supervisor_pid > 0);
    assert_eq!(p.session_id.as_deref(), Some("sess-1"));
    assert_eq!(p.workdir, d.path());

    let w = mgr
        .wait(&p.id, LONG, &CancellationToken::new())
        .await
        .unwrap();
    assert!(!w.timed_out && !w.interrupted);
    assert_eq!(exit_code(&w.info.status), Some(3));

    let first = mgr.poll(&p.id).await.unwrap();
    assert_eq!(first.output, "hello\noops\n");
    assert_eq!(first.offset, 11);
    assert_eq!(first.skipped_bytes, 0);
    let second = mgr.poll(&p.id).await.unwrap();
    assert_eq!(second.output, "");
    assert_eq!(second.offset, 11);

    // The supervisor is gone once the status is recorded, and the directory says so.
    let dir = d.path().join("procs").join(&p.id);
    let exit: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("exit.json")).unwrap()).unwrap();
    assert_eq!(exit["code"], 3);
    assert_eq!(exit["output_bytes"], 11);
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["id"], p.id.as_str());
    assert_eq!(meta["pty"], false);
    assert_eq!(meta["child_pid"], p.pid);
    assert_eq!(meta["command"], "echo hello; echo oops >&2; exit 3");
    eventually("the supervisor to end", || async {
        gone(p.supervisor_pid).then_some(())
    })
    .await;
    assert!(!dir.join("sock").exists());

    // What the manager and the supervisor made is for this user only, whatever the umask
    // (under the usual 022, plain creation would give 0644 files and 0755 directories).
    let loose: Vec<String> = tern_test_support::modes_under(&d.path().join("procs"))
        .into_iter()
        .filter(|(p, mode)| *mode != if p.is_dir() { 0o700 } else { 0o600 })
        .map(|(p, mode)| format!("{} {mode:o}", p.display()))
        .collect();
    assert!(loose.is_empty(), "not private: {loose:?}");
}

#[tokio::test]
async fn stdin_write_submit_close_over_a_pipe() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = manager(d.path()).await;
    let p = mgr
        .spawn(req(
            r#"while IFS= read -r l; do echo "got $l"; done; echo "eof"; exit 4"#,
            d.path(),
            false,
        ))
        .await
        .unwrap();
    mgr.submit(&p.id, "one").await.unwrap();
    let out = poll_until(&mgr, &p.id, "got one\n").await;
    assert_eq!(out, "got one\n");
    // `write` sends no newline: nothing is read until `submit` ends the line.
    mgr.write(&p.id, "tw").await.unwrap();
    mgr.submit(&p.id, "o").await.unwrap();
    let out = poll_until(&mgr, &p.id, "got two\n").await;
    assert_eq!(out, "got two\n", "poll gives only the new output");
    mgr.close(&p.id).await.unwrap();
    let w = mgr
        .wait(&p.id, LONG, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(exit_code(&w.info.status), Some(4));
    assert_eq!(mgr.poll(&p.id).await.unwrap().output, "eof\n");
    // Stdin of a finished process: refused, clearly.
    let e = mgr.submit(&p.id, "late").await.unwrap_err();
    assert!(matches!(e, ProcError::NotRunning(_)), "{e}");
}

#[tokio::test]
async fn closing_stdin_twice_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = manager(d.path()).await;
    let p = mgr
        .spawn(req("exec 0<&-; sleep 300", d.path(), false))
        .await
        .unwrap();
    mgr.close(&p.id).await.unwrap();
    let e = mgr.close(&p.id).await.unwrap_err();
    assert!(
        matches!(e, ProcError::Refused(ref m) if m.contains("already closed")),
        "{e}"
    );
    let e = mgr.write(&p.id, "x").await.unwrap_err();
    assert!(
        matches!(e, ProcError::Refused(ref m) if m.contains("closed")),
        "{e}"
    );
    kill_all(&mgr).await;
}

#[tokio::test]
async fn log_reads_by_offset_and_limit() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = manager(d.path()).await;
    let p = mgr.spawn(req("seq 1 1000", d.path(), false)).await.unwrap();
    mgr.wait(&p.id, LONG, &CancellationToken::new())
        .await
        .unwrap();
    let all: String = (1..=1000).map(|i| format!("{i}\n")).collect();

    let head = mgr.log(&p.id, Some(0), Some(10)).await.unwrap();
    assert_eq!(head.output, "1\n2\n3\n4\n5\n");
    assert_eq!(
        (head.start, head.end, head.total),
        (0, 10, all.len() as u64)
    );
    assert!(!head.rotated);
    let next = mgr.log(&p.id, Some(head.end), Some(6)).await.unwrap();
    assert_eq!(next.output, "6\n7\n8\n");
    let tail = mgr.log(&p.id, None, Some(9)).await.unwrap();
    assert_eq!(tail.output, "999\n1000\n");
    assert_eq!(tail.end, all.len() as u64);
    let whole = mgr.log(&p.id, Some(0), None).await.unwrap();
    assert_eq!(whole.output, all);
    let past = mgr.log(&p.id, Some(1 << 40), Some(10)).await.unwrap();
    assert_eq!((past.output.as_str(), past.start), ("", all.len() as u64));
}

#[tokio::test]
async fn the_log_rotates_under_its_cap() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mut cfg = config(d.path());
    cfg.log_max_bytes = 64 * 1024;
    let mgr = tern_procs::ProcessManager::open(cfg).await.unwrap();
    let p = mgr
        .spawn(req("seq 1 100000", d.path(), false))
        .await
        .unwrap();
    let w = mgr
        .wait(&p.id, LONG, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(exit_code(&w.info.status), Some(0));
    let log = mgr.log(&p.id, Some(0), Some(1 << 20)).await.unwrap();
    assert!(log.rotated);
    assert_eq!(log.total, 588_895);
    assert!(log.start > 0 && log.end == log.total);
    assert!(log.output.ends_with("99999\n100000\n"));
    let on_disk =
        tern_procs::log::on_disk(&d.path().join("procs").join(&p.id).join("log")).unwrap();
    assert!(on_disk <= 64 * 1024, "{on_disk}");
    // A poll after a long silence shows the newest output and says what it skipped.
    let poll = mgr.poll(&p.id).await.unwrap();
    assert!(poll.output.ends_with("100000\n"));
    assert_eq!(poll.offset, 588_895);
}

#[tokio::test]
async fn poll_caps_its_output_and_says_what_it_skipped() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mut cfg = config(d.path());
    cfg.poll_max_bytes = 100;
    let mgr = tern_procs::ProcessManager::open(cfg).await.unwrap();
    let p = mgr.spawn(req("seq 1 1000", d.path(), false)).await.unwrap();
    mgr.wait(&p.id, LONG, &CancellationToken::new())
        .await
        .unwrap();
    let poll = mgr.poll(&p.id).await.unwrap();
    assert_eq!(poll.output.len(), 100);
    assert!(poll.output.ends_with("999\n1000\n"));
    assert_eq!(poll.skipped_bytes, 3893 - 100);
}

/// Spawns `command`, which writes a child's pid to `pid_file` and then `ready`; the process
/// and that pid.
async fn spawn_with_child(
    mgr: &tern_procs::ProcessManager,
    dir: &std::path::Path,
    command: &str,
    pid_file: &str,
) -> (tern_procs::ProcInfo, i32) {
    let p = mgr.spawn(req(command, dir, false)).await.unwrap();
    poll_until(mgr, &p.id, "ready").await;
    let pid = std::fs::read_to_string(dir.join(pid_file))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (p, pid)
}

#[tokio::test]
async fn kill_sends_term_to_the_group_then_kill() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = manager(d.path()).await;
    // A well-behaved group: TERM ends the shell and its background child.
    let p = mgr
        .spawn(req("sleep 300 & echo $! > bg.pid; wait", d.path(), false))
        .await
        .unwrap();
    let bg: i32 = eventually("the background pid", || async {
        std::fs::read_to_string(d.path().join("bg.pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    })
    .await;
    let k = mgr.kill(&p.id).await.unwrap();
    assert!(k.signalled);
    assert!(
        matches!(
            k.info.status,
            ProcStatus::Exited {
                signal: Some(15),
                exit_code: Some(143),
                ..
            }
        ),
        "{:?}",
        k.info.status
    );
    eventually("the background child to end", || async {
        gone(bg).then_some(())
    })
    .await;

    // A group that ignores TERM gets KILL after the grace period.
    let (p, bg) = spawn_with_child(
        &mgr,
        d.path(),
        "trap '' TERM; sleep 300 & echo $! > bg2.pid; echo ready; wait",
        "bg2.pid",
    )
    .await;
    let k = mgr.kill(&p.id).await.unwrap();
    assert!(
        matches!(
            k.info.status,
            ProcStatus::Exited {
                signal: Some(9),
                exit_code: Some(137),
                ..
            }
        ),
        "{:?}",
        k.info.status
    );
    eventually("the TERM-deaf child to be killed", || async {
        gone(bg).then_some(())
    })
    .await;

    // The leader goes on TERM, a child in its group ignores it: the child gets the rest of
    // the grace and then KILL, although the leader was gone by then.
    let (p, deaf) = spawn_with_child(
        &mgr,
        d.path(),
        "(trap '' TERM; exec sleep 300) & echo $! > deaf.pid; echo ready; wait",
        "deaf.pid",
    )
    .await;
    let k = mgr.kill(&p.id).await.unwrap();
    assert!(
        matches!(
            k.info.status,
            ProcStatus::Exited {
                signal: Some(15),
                ..
            }
        ),
        "{:?}",
        k.info.status
    );
    // The exit is recorded once the group is gone: the child is gone already.
    assert!(
        gone(deaf),
        "a TERM-deaf child outlived the kill of its group"
    );

    // Killing a finished process signals nothing.
    let again = mgr.kill(&p.id).await.unwrap();
    assert!(!again.signalled);
}

#[tokio::test]
async fn wait_times_out_and_is_interrupted() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = manager(d.path()).await;
    let p = mgr.spawn(req("sleep 300", d.path(), false)).await.unwrap();
    let w = mgr
        .wait(&p.id, Duration::from_millis(50), &CancellationToken::new())
        .await
        .unwrap();
    assert!(w.timed_out && !w.interrupted);
    assert!(w.info.status.is_running());

    let cancel = CancellationToken::new();
    cancel.cancel();
    let w = mgr.wait(&p.id, LONG, &cancel).await.unwrap();
    assert!(w.interrupted && !w.timed_out);
    kill_all(&mgr).await;
    let w = mgr
        .wait(&p.id, LONG, &CancellationToken::new())
        .await
        .unwrap();
    assert!(!w.info.status.is_running());
}

#[tokio::test]
async fn concurrent_spawns_stay_under_the_cap() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mut cfg = config(d.path());
    cfg.max_running = 3;
    let mgr = std::sync::Arc::new(tern_procs::ProcessManager::open(cfg).await.unwrap());
    // Eight tool calls at once, as the agent runs a turn's calls concurrently.
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (mgr, dir) = (mgr.clone(), d.path().to_path_buf());
        calls.spawn(async move { mgr.spawn(req("sleep 300", &dir, false)).await });
    }
    let results = calls.join_all().await;
    let started = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(started, 3);
    for r in &results {
        if let Err(e) = r {
            assert!(matches!(e, ProcError::TooMany(3)), "{e}");
        }
    }
    let running = mgr.list().await.unwrap();
    assert_eq!(running.iter().filter(|p| p.status.is_running()).count(), 3);
    kill_all(&mgr).await;
}

#[tokio::test]
async fn list_cap_and_bad_requests() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mut cfg = config(d.path());
    cfg.max_running = 2;
    let mgr = tern_procs::ProcessManager::open(cfg).await.unwrap();
    let a = mgr.spawn(req("sleep 300", d.path(), false)).await.unwrap();
    let b = mgr.spawn(req("exit 0", d.path(), false)).await.unwrap();
    mgr.wait(&b.id, LONG, &CancellationToken::new())
        .await
        .unwrap();
    let c = mgr.spawn(req("sleep 300", d.path(), true)).await.unwrap();
    let e = mgr
        .spawn(req("sleep 300", d.path(), false))
        .await
        .unwrap_err();
    assert!(matches!(e, ProcError::TooMany(2)), "{e}");

    let list = mgr.list().await.unwrap();
    let ids: Vec<_> = list.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, [a.id.as_str(), b.id.as_str(), c.id.as_str()]);
    assert!(list[0].status.is_running());
    assert_eq!(exit_code(&list[1].status), Some(0));
    assert!(list[2].status.is_running() && list[2].pty);

    let e = mgr
        .spawn(req("true", &d.path().join("nope"), false))
        .await
        .unwrap_err();
    assert!(
        matches!(e, ProcError::Invalid(ref m) if m.contains("does not exist")),
        "{e}"
    );
    let e = mgr.spawn(req("  ", d.path(), false)).await.unwrap_err();
    assert!(matches!(e, ProcError::Invalid(_)), "{e}");
    let e = mgr.poll("proc_000000000000").await.unwrap_err();
    assert!(matches!(e, ProcError::NotFound(_)), "{e}");
    // Nothing is left of the refused spawns.
    assert_eq!(
        std::fs::read_dir(d.path().join("procs")).unwrap().count(),
        3
    );
    kill_all(&mgr).await;
}

#[tokio::test]
async fn a_supervisor_that_cannot_start_its_child_says_why() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = manager(d.path()).await;
    let gone_dir = d.path().join("w");
    std::fs::create_dir(&gone_dir).unwrap();
    let mut cfg = config(d.path());
    // A supervisor program that does not exist.
    cfg.supervisor.program = d.path().join("no-such-supervisor");
    let broken = tern_procs::ProcessManager::open(cfg).await.unwrap();
    let e = broken
        .spawn(req("true", &gone_dir, false))
        .await
        .unwrap_err();
    assert!(
        matches!(e, ProcError::Spawn(ref m) if m.contains("no-such-supervisor")),
        "{e}"
    );
    assert_eq!(mgr.list().await.unwrap().len(), 0);
    assert_eq!(
        std::fs::read_dir(d.path().join("procs")).unwrap().count(),
        0
    );
}

#[tokio::test]
async fn a_killed_supervisor_is_reported_lost() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = manager(d.path()).await;
    let p = mgr.spawn(req("sleep 300", d.path(), false)).await.unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(p.supervisor_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    eventually("the supervisor to be seen gone", || async {
        (mgr.get(&p.id).await.unwrap().status == ProcStatus::Lost).then_some(())
    })
    .await;
    let e = mgr.submit(&p.id, "x").await.unwrap_err();
    assert!(matches!(e, ProcError::NotRunning(_)), "{e}");
    // A new manager sees the same.
    let again = manager(d.path()).await;
    assert_eq!(again.get(&p.id).await.unwrap().status, ProcStatus::Lost);
    // Its child outlived it; the manager that reports the loss ends the orphan's group.
    assert!(
        !support::gone(p.pid),
        "the orphan runs until the loss is reported"
    );
    let mut events = again.events();
    match tokio::time::timeout(std::time::Duration::from_secs(30), events.recv()).await {
        Ok(Some(tern_procs::ProcEvent::Exited(i))) => assert_eq!(i.status, ProcStatus::Lost),
        other => panic!("{other:?}"),
    }
    eventually("the orphan to be ended", || async {
        support::gone(p.pid).then_some(())
    })
    .await;
    // Lost ones are removed after the retention too, counted from the report.
    assert!(
        again
            .prune(std::time::Duration::from_secs(3600))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        again.prune(std::time::Duration::ZERO).await.unwrap(),
        std::slice::from_ref(&p.id)
    );
}
