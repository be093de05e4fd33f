//! What this crate's tests share: a manager on a temporary directory whose supervisor is this
//! crate's `tern-procs-supervisor` binary, and reading a process's output until it shows
//! something. Waiting (never for fixed times) is `tern-test-support`'s.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use tern_procs::{ManagerConfig, ProcStatus, ProcessManager, SpawnRequest, SupervisorCommand};

pub fn supervisor() -> SupervisorCommand {
    SupervisorCommand {
        program: PathBuf::from(env!("CARGO_BIN_EXE_tern-procs-supervisor")),
        args: Vec::new(),
    }
}

pub fn config(root: &Path) -> ManagerConfig {
    let mut cfg = ManagerConfig::new(root.join("procs"), supervisor());
    cfg.kill_grace = Duration::from_millis(500);
    cfg.log_max_read = 4 * 1024 * 1024;
    cfg.poll_max_bytes = 1024 * 1024;
    cfg
}

pub async fn manager(root: &Path) -> ProcessManager {
    ProcessManager::open(config(root)).await.unwrap()
}

pub fn req(command: &str, workdir: &Path, pty: bool) -> SpawnRequest {
    SpawnRequest {
        command: command.to_owned(),
        workdir: workdir.to_path_buf(),
        pty,
        session_id: Some("sess-1".into()),
        ..Default::default()
    }
}

// Waiting and process inspection are the workspace's (`tern-test-support`).
pub use tern_test_support::procs::gone;
pub use tern_test_support::{PATIENCE, eventually, wait_until};

/// Polls `id` until its accumulated output contains `needle`; returns that output.
pub async fn poll_until(mgr: &ProcessManager, id: &str, needle: &str) -> String {
    let mut seen = String::new();
    wait_until(PATIENCE, Duration::from_millis(50), async || {
        let p = mgr.poll(id).await.unwrap();
        seen.push_str(&p.output);
        if !seen.contains(needle) && !p.info.status.is_running() {
            // One more read: output written just before the exit.
            seen.push_str(&mgr.poll(id).await.unwrap().output);
            assert!(
                seen.contains(needle),
                "{id} exited without {needle:?}: {seen:?}"
            );
        }
        if seen.contains(needle) {
            Ok(())
        } else {
            Err(format!("{id}: no {needle:?} in {seen:?}"))
        }
    })
    .await;
    seen
}

pub fn exit_code(s: &ProcStatus) -> Option<i32> {
    match s {
        ProcStatus::Exited { exit_code, .. } => *exit_code,
        other => panic!("not exited: {other:?}"),
    }
}

/// Kills every running process of `mgr` (test clean-up).
pub async fn kill_all(mgr: &ProcessManager) {
    for p in mgr.list().await.unwrap() {
        if p.status.is_running() {
            mgr.kill(&p.id).await.unwrap();
        }
    }
}

/// On drop (also when a test fails half-way), SIGKILLs every child group and supervisor still
/// running under `root/procs`, so no counter runs on after the test.
pub struct Reap(pub PathBuf);

impl Drop for Reap {
    fn drop(&mut self) {
        let Ok(rd) = std::fs::read_dir(self.0.join("procs")) else {
            return;
        };
        for dir in rd.flatten().map(|e| e.path()) {
            if dir.join("exit.json").exists() {
                continue;
            }
            let Ok(bytes) = std::fs::read(dir.join("meta.json")) else {
                continue;
            };
            let Ok(meta) = serde_json::from_slice::<tern_procs::Meta>(&bytes) else {
                continue;
            };
            use nix::sys::signal::{Signal, kill, killpg};
            use nix::unistd::Pid;
            let _ = killpg(Pid::from_raw(meta.child_pid), Signal::SIGKILL);
            let _ = kill(Pid::from_raw(meta.supervisor_pid), Signal::SIGKILL);
        }
    }
}
