//! Interactive programs in a pseudo-terminal.

use crate::support;

use std::time::Duration;

use support::*;
use tokio_util::sync::CancellationToken;

const LONG: Duration = Duration::from_secs(120);

/// Field `n` (0-based) after the command name in `/proc/PID/stat`.
fn stat_field(pid: i32, n: usize) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    rest.split_whitespace().nth(n).unwrap().parse().unwrap()
}

#[tokio::test]
async fn python_repl_answers_a_submitted_line() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = manager(d.path()).await;
    let p = mgr
        .spawn(req("python3 -i -q", d.path(), true))
        .await
        .unwrap();
    assert!(p.pty);
    // The PTY is the child's controlling terminal, never the supervisor's (which leads a
    // session of its own and must not get the terminal's hang-ups).
    assert_eq!(
        stat_field(p.supervisor_pid, 4),
        0,
        "tty_nr of the supervisor"
    );
    assert_ne!(stat_field(p.pid, 4), 0, "tty_nr of the child");
    poll_until(&mgr, &p.id, ">>> ").await;
    mgr.submit(&p.id, "print(6*7)").await.unwrap();
    let out = poll_until(&mgr, &p.id, "42").await;
    // The terminal echoes the input; the answer is on a line of its own, and no control
    // sequence reaches the model.
    assert!(out.contains("print(6*7)"), "{out:?}");
    assert!(out.lines().any(|l| l == "42"), "{out:?}");
    assert!(!out.contains('\x1b') && !out.contains('\r'), "{out:?}");
    // The raw log keeps what the terminal sent.
    let segments = tern_procs::log::segments(&d.path().join("procs").join(&p.id).join("log"));
    let raw = std::fs::read(&segments.unwrap()[0].1).unwrap();
    assert!(raw.windows(4).any(|w| w == b"42\r\n"));

    // `close` is the terminal's end of input: the REPL exits.
    mgr.close(&p.id).await.unwrap();
    let w = mgr
        .wait(&p.id, LONG, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(exit_code(&w.info.status), Some(0));
}

#[tokio::test]
async fn a_pty_program_sees_a_terminal_and_is_killed_with_its_group() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = manager(d.path()).await;
    let p = mgr
        .spawn(req(
            "test -t 0 && test -t 1 && echo tty:$TERM:$(stty size); sleep 300 & echo $! > bg.pid; wait",
            d.path(),
            true,
        ))
        .await
        .unwrap();
    // A terminal on both ends, of the configured size (rows, columns).
    poll_until(&mgr, &p.id, "tty:xterm-256color:40 120").await;
    let bg: i32 = eventually("the background pid", || async {
        std::fs::read_to_string(d.path().join("bg.pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    })
    .await;
    let k = mgr.kill(&p.id).await.unwrap();
    assert!(k.signalled);
    assert!(!k.info.status.is_running());
    eventually("the background child to end", || async {
        gone(bg).then_some(())
    })
    .await;
}
