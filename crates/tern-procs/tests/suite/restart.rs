//! Processes outlive the manager: dropped in process, or killed with SIGKILL in the process
//! that holds it. A new manager on the same directory adopts them: still running, their logs
//! without a gap, stdin working, and the exit code of one that ended meanwhile.

use crate::support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use support::*;
use tern_procs::{ProcInfo, ProcessManager};
use tokio_util::sync::CancellationToken;

const LONG: Duration = Duration::from_secs(120);

/// Prints 1, 2, 3, … one line at a time, for ever.
const COUNTER: &str = "i=0; while :; do i=$((i+1)); echo $i; sleep 0.01; done";
/// Echoes each line it reads.
const ECHO: &str = r#"while IFS= read -r l; do echo "got $l"; done"#;
/// Exits 7 once the file `go` exists in its working directory.
const EXIT_ON_GO: &str = "while [ ! -e go ]; do sleep 0.01; done; exit 7";

/// The processes of a restart test: (command, pty).
fn fleet() -> Vec<(&'static str, bool)> {
    vec![
        (COUNTER, false),
        (COUNTER, false),
        (COUNTER, false),
        (COUNTER, false),
        (COUNTER, true),
        (COUNTER, true),
        (COUNTER, true),
        (ECHO, false),
        (ECHO, true),
        (EXIT_ON_GO, false),
    ]
}

async fn spawn_fleet(mgr: &ProcessManager, workdir: &Path) -> Vec<String> {
    let mut ids = Vec::new();
    for (cmd, pty) in fleet() {
        ids.push(mgr.spawn(req(cmd, workdir, pty)).await.unwrap().id);
    }
    ids
}

/// Checks everything a restarted manager must see; `ids` in `fleet()` order.
async fn check_adopted(root: &Path, workdir: &Path, ids: &[String]) {
    // The exit-on-go process ends while no manager is there.
    let last = ids.last().unwrap();
    std::fs::write(workdir.join("go"), "").unwrap();
    let exit_json = root.join("procs").join(last).join("exit.json");
    eventually("the exit to be recorded", || async {
        exit_json.exists().then_some(())
    })
    .await;

    let mgr = manager(root).await;
    let list = mgr.list().await.unwrap();
    let by_id = |id: &str| -> ProcInfo { list.iter().find(|p| p.id == id).unwrap().clone() };
    assert_eq!(list.len(), ids.len());
    for (id, (cmd, pty)) in ids.iter().zip(fleet()) {
        let p = by_id(id);
        assert_eq!((p.command.as_str(), p.pty), (cmd, pty));
        if cmd == EXIT_ON_GO {
            assert_eq!(exit_code(&p.status), Some(7), "{id}");
        } else {
            assert!(p.status.is_running(), "{id}: {:?}", p.status);
        }
    }
    let w = mgr
        .wait(last, LONG, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(exit_code(&w.info.status), Some(7));

    // The counters went on, and their logs have every number: no gap, no repeat.
    for (id, (cmd, _)) in ids.iter().zip(fleet()) {
        if cmd != COUNTER {
            continue;
        }
        let before = mgr.log(id, None, Some(1)).await.unwrap().total;
        eventually("the counter to go on", || async {
            (mgr.log(id, None, Some(1)).await.unwrap().total > before + 100).then_some(())
        })
        .await;
        let log = mgr.log(id, Some(0), None).await.unwrap();
        assert!(!log.rotated);
        // Whole lines only: the last one may still be on its way.
        let numbers: Vec<u64> = log
            .output
            .split_inclusive('\n')
            .filter_map(|l| l.strip_suffix('\n'))
            .map(|l| l.parse().unwrap_or_else(|_| panic!("{id}: line {l:?}")))
            .collect();
        let expected: Vec<u64> = (1..=numbers.len() as u64).collect();
        assert_eq!(numbers, expected, "{id}");
    }

    // Stdin still works, over a pipe and on a terminal.
    for (id, (cmd, _)) in ids.iter().zip(fleet()) {
        if cmd == ECHO {
            mgr.submit(id, "after the restart").await.unwrap();
            poll_until(&mgr, id, "got after the restart").await;
        }
    }
    kill_all(&mgr).await;
    for p in mgr.list().await.unwrap() {
        assert!(!p.status.is_running(), "{}", p.id);
    }
}

#[tokio::test]
async fn processes_outlive_a_dropped_manager() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let work = d.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let mgr = manager(d.path()).await;
    let ids = spawn_fleet(&mgr, &work).await;
    // Some output before the manager goes.
    for id in &ids[..2] {
        poll_until(&mgr, id, "\n3\n").await;
    }
    drop(mgr);
    check_adopted(d.path(), &work, &ids).await;
}

/// The session id of `pid` (field 6 of `/proc/PID/stat`).
fn session_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    rest.split_whitespace().nth(3).unwrap().parse().unwrap()
}

/// Not a test by itself: the process the next test runs and kills with SIGKILL. It opens a
/// manager on `$TERN_PROCS_HELPER_ROOT`, starts the fleet, writes the ids to `ids.json` beside
/// the root, and sleeps until killed. Ignored, so a plain run neither runs it nor counts it as a
/// pass.
#[tokio::test]
#[ignore = "a helper process for processes_outlive_a_manager_killed_with_sigkill"]
async fn helper_holds_a_manager() {
    let root = std::env::var_os("TERN_PROCS_HELPER_ROOT")
        .expect("run by processes_outlive_a_manager_killed_with_sigkill, which sets the root");
    let root = Path::new(&root);
    let work = root.join("work");
    let mgr = manager(root).await;
    let ids = spawn_fleet(&mgr, &work).await;
    let tmp = root.join("ids.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(&ids).unwrap()).unwrap();
    std::fs::rename(&tmp, root.join("ids.json")).unwrap();
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

#[tokio::test]
async fn processes_outlive_a_manager_killed_with_sigkill() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let work = d.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let mut helper = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "suite::restart::helper_holds_a_manager",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TERN_PROCS_HELPER_ROOT", d.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let ids_path = d.path().join("ids.json");
    let ids: Vec<String> = eventually("the helper to start the processes", || async {
        std::fs::read(&ids_path)
            .ok()
            .map(|b| serde_json::from_slice(&b).unwrap())
    })
    .await;
    assert_eq!(ids.len(), 10);
    let pid = Pid::from_raw(helper.id().unwrap() as i32);
    kill(pid, Signal::SIGKILL).unwrap();
    let status = helper.wait().await.unwrap();
    assert!(!status.success());
    // The supervisors were the helper's children: they live on without it.
    for id in &ids {
        let meta: serde_json::Value = serde_json::from_slice(
            &std::fs::read(d.path().join("procs").join(id).join("meta.json")).unwrap(),
        )
        .unwrap();
        let sup = meta["supervisor_pid"].as_i64().unwrap() as i32;
        assert!(!gone(sup), "{id}: the supervisor died with the manager");
        assert_eq!(
            session_of(sup),
            sup,
            "{id}: the supervisor leads a session of its own"
        );
    }
    check_adopted(d.path(), &work, &ids).await;
}

#[tokio::test]
async fn poll_goes_on_where_it_stopped_after_a_restart() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let first = manager(d.path()).await;
    let p = first
        .spawn(req(
            "echo before; read x; echo after-$x; read y",
            d.path(),
            false,
        ))
        .await
        .unwrap();
    poll_until(&first, &p.id, "before").await;
    drop(first);

    let second = manager(d.path()).await;
    second.submit(&p.id, "restart").await.unwrap();
    let seen = poll_until(&second, &p.id, "after-restart").await;
    // What the first manager's poll returned is not returned again.
    assert!(!seen.contains("before"), "{seen:?}");
    assert_eq!(seen, "after-restart\n");
    kill_all(&second).await;
}
