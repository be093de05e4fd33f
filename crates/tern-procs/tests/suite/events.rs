//! Events (`Started`, `Exited` once across managers), retention and killing a session's
//! processes, with real supervisors.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use tern_procs::{ProcEvent, ProcStatus, ProcessManager, SpawnRequest};
use tokio::sync::mpsc::UnboundedReceiver;

use support::{config, exit_code, kill_all, manager, req};

async fn next(rx: &mut UnboundedReceiver<ProcEvent>) -> ProcEvent {
    tokio::time::timeout(Duration::from_secs(60), rx.recv())
        .await
        .expect("an event within a minute")
        .expect("the manager is alive")
}

#[tokio::test]
async fn started_and_exited_are_reported_once_across_managers() {
    let d = tempfile::tempdir().unwrap();
    let a = manager(d.path()).await;
    let mut rx = a.events();
    let p = a
        .spawn(req("read l; exit 4", d.path(), false))
        .await
        .unwrap();
    match next(&mut rx).await {
        ProcEvent::Started(i) => assert_eq!(i.id, p.id),
        other => panic!("{other:?}"),
    }
    a.close(&p.id).await.unwrap();
    match next(&mut rx).await {
        ProcEvent::Exited(i) => {
            assert_eq!(i.id, p.id);
            assert_eq!(exit_code(&i.status), Some(4));
        }
        other => panic!("{other:?}"),
    }

    // One that ends while no manager listens is reported by the next one that does.
    let quiet = a
        .spawn(req("read l; exit 6", d.path(), true))
        .await
        .unwrap();
    drop(rx);
    drop(a);
    let b = manager(d.path()).await;
    let gone = b.spawn(req("exit 0", d.path(), false)).await.unwrap();
    support::eventually("the exit", || async {
        (!b.get(&gone.id).await.unwrap().status.is_running()).then_some(())
    })
    .await;
    drop(b);
    let c = manager(d.path()).await;
    c.close(&quiet.id).await.unwrap();
    support::eventually("the quiet one's exit", || async {
        (!c.get(&quiet.id).await.unwrap().status.is_running()).then_some(())
    })
    .await;
    let mut rx = c.events();
    let mut exited = Vec::new();
    for _ in 0..2 {
        match next(&mut rx).await {
            ProcEvent::Exited(i) => exited.push((i.id.clone(), exit_code(&i.status))),
            other => panic!("{other:?}"),
        }
    }
    exited.sort();
    let mut want = vec![(quiet.id.clone(), Some(6)), (gone.id.clone(), Some(0))];
    want.sort();
    assert_eq!(exited, want);

    // Reported ones are not reported again: a fresh manager's only events are a new
    // process's.
    drop(rx);
    drop(c);
    let e = manager(d.path()).await;
    let mut rx = e.events();
    let fresh = e.spawn(req("read l", d.path(), false)).await.unwrap();
    assert!(matches!(next(&mut rx).await, ProcEvent::Started(i) if i.id == fresh.id));
    e.close(&fresh.id).await.unwrap();
    assert!(matches!(next(&mut rx).await, ProcEvent::Exited(i) if i.id == fresh.id));
    assert_eq!(e.list().await.unwrap().len(), 4);
}

#[tokio::test]
async fn prune_removes_only_finished_processes() {
    let d = tempfile::tempdir().unwrap();
    let m = manager(d.path()).await;
    let done = m.spawn(req("echo hi", d.path(), false)).await.unwrap();
    let running = m.spawn(req("sleep 1000", d.path(), false)).await.unwrap();
    support::eventually("the exit", || async {
        (!m.get(&done.id).await.unwrap().status.is_running()).then_some(())
    })
    .await;
    assert!(m.prune(Duration::from_secs(3600)).await.unwrap().is_empty());
    assert_eq!(
        m.prune(Duration::ZERO).await.unwrap(),
        vec![done.id.clone()]
    );
    assert!(!d.path().join("procs").join(&done.id).exists());
    let ids: Vec<_> = m.list().await.unwrap().into_iter().map(|p| p.id).collect();
    assert_eq!(ids, vec![running.id.clone()]);
    // A new manager does not bring it back.
    kill_all(&m).await;
    let m2 = manager(d.path()).await;
    assert!(m2.get(&done.id).await.is_err());
}

#[tokio::test]
async fn kill_session_kills_only_that_sessions_processes() {
    let d = tempfile::tempdir().unwrap();
    let m = Arc::new(ProcessManager::open(config(d.path())).await.unwrap());
    let spawn = |session: &str| SpawnRequest {
        session_id: Some(session.into()),
        ..req("sleep 1000", d.path(), false)
    };
    let a1 = m.spawn(spawn("a")).await.unwrap();
    let a2 = m.spawn(spawn("a")).await.unwrap();
    let b = m.spawn(spawn("b")).await.unwrap();
    let mut want = vec![a1.id.clone(), a2.id.clone()];
    want.sort();
    assert_eq!(m.kill_session("a").await, want);
    for id in [&a1.id, &a2.id] {
        assert!(matches!(
            m.get(id).await.unwrap().status,
            ProcStatus::Exited { .. }
        ));
    }
    assert!(m.get(&b.id).await.unwrap().status.is_running());
    assert!(m.kill_session("a").await.is_empty());
    kill_all(&m).await;
}
