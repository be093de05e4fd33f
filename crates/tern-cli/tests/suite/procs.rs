//! `tern supervise` (hidden): the process manager with the real `tern` binary as supervisor.

use std::path::PathBuf;
use std::time::Duration;

use tern_procs::{ManagerConfig, ProcStatus, ProcessManager, SpawnRequest, SupervisorCommand};
use tokio_util::sync::CancellationToken;

fn tern() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tern"))
}

#[tokio::test]
async fn tern_supervise_runs_a_background_process() {
    let d = tempfile::tempdir().unwrap();
    let sup = SupervisorCommand {
        program: tern(),
        args: vec!["supervise".into()],
    };
    let mgr = ProcessManager::open(ManagerConfig::new(d.path().join("procs"), sup))
        .await
        .unwrap();
    let p = mgr
        .spawn(SpawnRequest {
            command: r#"read l; echo "got $l"; exit 5"#.into(),
            workdir: d.path().to_path_buf(),
            pty: false,
            session_id: None,
            ..Default::default()
        })
        .await
        .unwrap();
    mgr.submit(&p.id, "hi").await.unwrap();
    let w = mgr
        .wait(&p.id, Duration::from_secs(120), &CancellationToken::new())
        .await
        .unwrap();
    assert!(
        matches!(
            w.info.status,
            ProcStatus::Exited {
                exit_code: Some(5),
                ..
            }
        ),
        "{:?}",
        w.info.status
    );
    assert_eq!(mgr.poll(&p.id).await.unwrap().output, "got hi\n");
    let diag =
        std::fs::read_to_string(d.path().join("procs").join(&p.id).join("supervisor.log")).unwrap();
    assert!(diag.contains("supervising"), "{diag}");
}

#[test]
fn supervise_is_not_in_the_help() {
    let out = std::process::Command::new(tern())
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("sessions") && !help.contains("supervise"),
        "{help}"
    );
}
