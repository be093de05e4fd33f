//! `tern status` against a real gateway, with it stopped and killed, and `tern completions`.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::{Api, Env, assert_ok, http_post, stderr, stdout, wait_until};
use serde_json::{Value, json};

fn status(e: &Env) -> Value {
    let o = e.run(&["status", "--json"]);
    assert_ok(&o);
    serde_json::from_slice(&o.stdout).unwrap()
}

fn status_text(e: &Env) -> String {
    let o = e.run(&["status"]);
    assert_ok(&o);
    stdout(&o)
}

/// A background process under `$TERN_HOME/procs`, as the gateway starts them.
async fn background_sleep(e: &Env) -> tern_procs::ProcessManager {
    let sup = tern_procs::SupervisorCommand {
        program: PathBuf::from(env!("CARGO_BIN_EXE_tern")),
        args: vec!["supervise".into()],
    };
    let mut cfg = tern_procs::ManagerConfig::new(e.home().join("procs"), sup);
    cfg.kill_grace = Duration::from_millis(200);
    let mgr = tern_procs::ProcessManager::open(cfg).await.unwrap();
    mgr.spawn(tern_procs::SpawnRequest {
        command: "sleep 300".into(),
        workdir: e.work(),
        ..Default::default()
    })
    .await
    .unwrap();
    mgr
}

#[tokio::test]
async fn status_on_a_fresh_home_changes_nothing() {
    let e = Env::new();
    let v = status(&e);
    assert_eq!(v["gateway"]["running"], false, "{v}");
    assert_eq!(v["sessions"]["running"], 0, "{v}");
    assert_eq!(v["inbox"]["pending"], 0, "{v}");
    assert_eq!(v["processes"]["running"], 0, "{v}");
    assert!(status_text(&e).starts_with("gateway    not running\n"));
    // Read-only: no store, no directories made for it.
    assert!(!e.home().join("tern.db").exists());
    assert!(!e.home().join("procs").exists());
}

#[tokio::test]
async fn status_reports_the_gateway_and_its_work_running_or_not() {
    let e = Env::with_model().await;
    // A failed assertion leaves no background `sleep` behind.
    let _reap = crate::suite::ps::Reap(e.home());
    let mut gw = e.gateway();
    let key = e.key();
    let pid = gw.child.id();

    // The gateway recorded itself.
    let v = status(&e);
    assert_eq!(v["gateway"]["running"], true, "{v}");
    assert_eq!(v["gateway"]["pid"], pid, "{v}");
    assert_eq!(v["gateway"]["url"], gw.url.as_str(), "{v}");
    let text = status_text(&e);
    assert!(
        text.contains(&format!("running at {} (pid {pid}", gw.url)),
        "{text}"
    );

    // Two sessions, one waiting for a human; a pending inbox request; a background process.
    let api = Api::new(&gw, key.clone());
    api.create_session().await;
    let waiting = api.create_session().await;
    let store = tern_store::Store::open(&e.home().join("tern.db"))
        .await
        .unwrap();
    store
        .set_status(&waiting, tern_store::SessionStatus::Waiting)
        .await
        .unwrap();
    store.close().await;
    let (s, task) = http_post(
        &format!("{}/api/tasks", gw.url),
        &key,
        json!({"name": "deploy", "projectName": "default"}),
    )
    .await;
    assert_eq!(s, 201, "{task}");
    let (s, v) = http_post(
        &format!("{}/api/approval-requests", gw.url),
        &key,
        json!({"projectName": "default", "taskId": task["id"], "summary": "Deploy?"}),
    )
    .await;
    assert_eq!(s, 201, "{v}");
    let mgr = background_sleep(&e).await;

    let v = status(&e);
    assert_eq!(v["sessions"]["total"], 2, "{v}");
    assert_eq!(v["sessions"]["waiting"], 1, "{v}");
    assert_eq!(v["sessions"]["running"], 0, "{v}");
    assert_eq!(v["inbox"]["pending"], 1, "{v}");
    assert_eq!(v["processes"]["running"], 1, "{v}");
    let text = status_text(&e);
    assert!(text.contains("0 running, 1 waiting (2 in all)"), "{text}");
    assert!(text.contains("1 pending request"), "{text}");
    assert!(text.contains("1 running in the background"), "{text}");

    // A clean stop removes the record; the counts still come from the store.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(gw.child.wait().unwrap().success(), "{}", gw.logs());
    drop(gw);
    assert!(!e.home().join("gateway.json").exists());
    let v = status(&e);
    assert_eq!(v["gateway"]["running"], false, "{v}");
    assert_eq!(v["sessions"]["waiting"], 1, "{v}");
    assert_eq!(v["inbox"]["pending"], 1, "{v}");
    assert_eq!(v["processes"]["running"], 1, "{v}");

    // A killed gateway leaves its record behind: a dead pid reads as not running.
    let mut gw = e.gateway();
    assert_eq!(status(&e)["gateway"]["running"], true);
    gw.child.kill().unwrap();
    gw.child.wait().unwrap();
    assert!(e.home().join("gateway.json").exists());
    let v = status(&e);
    assert_eq!(v["gateway"]["running"], false, "{v}");
    assert!(status_text(&e).starts_with("gateway    not running\n"));

    for p in mgr.list().await.unwrap() {
        mgr.kill(&p.id).await.unwrap();
    }
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        async || {
            let v = status(&e);
            (v["processes"]["running"] == 0)
                .then_some(())
                .ok_or(format!("{v}"))
        },
    )
    .await;
}

#[test]
fn completions_load_in_their_shells() {
    let e = Env::new();
    let bash = e.run(&["completions", "bash"]);
    assert_ok(&bash);
    let script = stdout(&bash);
    for sub in ["status", "completions", "sessions", "ps"] {
        assert!(script.contains(sub), "{sub} missing");
    }
    // bash really takes it: `complete -p tern` names the function it registered.
    let o = std::process::Command::new("bash")
        .arg("-c")
        .arg("source /dev/stdin && complete -p tern")
        .stdin({
            let path = e.dir.path().join("tern.bash");
            std::fs::write(&path, &bash.stdout).unwrap();
            std::fs::File::open(path).unwrap()
        })
        .output()
        .unwrap();
    assert_ok(&o);
    assert!(stdout(&o).contains("_tern"), "{}", stdout(&o));

    let zsh = e.run(&["completions", "zsh"]);
    assert_ok(&zsh);
    assert!(
        stdout(&zsh).starts_with("#compdef tern"),
        "{}",
        stdout(&zsh)
    );
    let fish = e.run(&["completions", "fish"]);
    assert_ok(&fish);
    assert!(
        stdout(&fish).contains("complete -c tern"),
        "{}",
        stdout(&fish)
    );

    let o = e.run(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("invalid value 'tcsh'"),
        "{}",
        stderr(&o)
    );
}
