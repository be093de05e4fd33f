//! Watch patterns (rate-limited batches, exactly once across restarts, write-ahead of a
//! batch) and the in-memory output window, with real supervisors.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_procs::{ProcEvent, ProcInfo, ProcessManager, WatchBatch, WatchSink};
use tern_tools::BoxFuture;

use support::{config, eventually, kill_all, req};

/// Records the batches it is given; refuses them all when `fail` is set.
#[derive(Default)]
struct Recorder {
    batches: Mutex<Vec<(Instant, WatchBatch)>>,
    calls: AtomicUsize,
    fail: bool,
}

impl Recorder {
    fn batches(&self) -> Vec<WatchBatch> {
        self.batches
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| b.clone())
            .collect()
    }
    fn lines(&self) -> Vec<String> {
        self.batches()
            .iter()
            .flat_map(|b| b.matches.iter().map(|m| m.line.clone()))
            .collect()
    }
}

impl WatchSink for Recorder {
    fn matched<'a>(
        &'a self,
        _info: &'a ProcInfo,
        batch: &'a WatchBatch,
    ) -> BoxFuture<'a, Result<(), tern_procs::WatchSinkError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.fail {
                return Err("the store is away".into());
            }
            self.batches
                .lock()
                .unwrap()
                .push((Instant::now(), batch.clone()));
            Ok(())
        })
    }
}

async fn watching(
    root: &std::path::Path,
    interval: Duration,
    sink: Arc<Recorder>,
) -> ProcessManager {
    let mut cfg = config(root);
    cfg.watch_interval = interval;
    let m = ProcessManager::open(cfg).await.unwrap();
    m.set_watch_sink(sink);
    m
}

fn watched(command: &str, dir: &std::path::Path, patterns: &[&str]) -> tern_procs::SpawnRequest {
    let mut r = req(command, dir, false);
    r.watch_patterns = patterns.iter().map(|p| p.to_string()).collect();
    r
}

#[tokio::test]
async fn matches_come_in_rate_limited_batches_before_the_exit() {
    let d = tempfile::tempdir().unwrap();
    let sink = Arc::new(Recorder::default());
    let m = watching(d.path(), Duration::from_millis(800), sink.clone()).await;
    let mut events = m.events();
    // Six ERROR lines over about three seconds, then a last line as the process ends.
    let cmd = "for i in $(seq 1 30); do echo \"line $i\"; \
               if [ $((i % 5)) = 0 ]; then printf '\\033[31mERROR %s\\033[0m\\n' $i; fi; \
               sleep 0.1; done; echo finished";
    let p = m
        .spawn(watched(cmd, d.path(), &["ERROR", "^finished$"]))
        .await
        .unwrap();
    let exited_at = loop {
        match tokio::time::timeout(Duration::from_secs(60), events.recv())
            .await
            .unwrap()
            .unwrap()
        {
            ProcEvent::Exited(i) if i.id == p.id => break Instant::now(),
            _ => {}
        }
    };
    let batches = sink.batches.lock().unwrap().clone();
    let lines = sink.lines();
    assert_eq!(
        lines,
        [
            "ERROR 5", "ERROR 10", "ERROR 15", "ERROR 20", "ERROR 25", "ERROR 30", "finished"
        ],
        "every match once, in order, control sequences stripped"
    );
    let total: u64 = batches.iter().map(|(_, b)| b.total_matches).sum();
    assert_eq!(total, 7);
    assert!(
        (2..=6).contains(&batches.len()),
        "rate-limited into a few batches: {batches:?}"
    );
    for w in batches.windows(2) {
        assert!(
            w[1].0 - w[0].0 >= Duration::from_millis(700) || w[1].1.process_ended,
            "batches at most one per interval (except the last at the exit): {batches:?}"
        );
    }
    let last = &batches.last().unwrap();
    assert!(
        last.1.process_ended,
        "the last batch knows the process ended"
    );
    assert!(
        last.0 <= exited_at,
        "the last matches come before the exit is reported"
    );
    // Offsets name the lines in the log.
    let log = m.log(&p.id, Some(0), None).await.unwrap().output;
    let first = &batches[0].1;
    assert_eq!(first.first_offset, first.matches[0].offset);
    assert!(log[first.first_offset as usize..].starts_with("ERROR 5"));
}

#[tokio::test]
async fn watching_goes_on_after_a_restart_without_loss_or_repeat() {
    let d = tempfile::tempdir().unwrap();
    let a_sink = Arc::new(Recorder::default());
    let a = watching(d.path(), Duration::ZERO, a_sink.clone()).await;
    let _ev = a.events();
    let cmd = "echo 'ERROR one'; read x; echo 'ERROR two'; echo ok; read y; echo 'ERROR three'";
    let p = a.spawn(watched(cmd, d.path(), &["ERROR"])).await.unwrap();
    eventually("the first match", || async {
        (a_sink.lines() == ["ERROR one"]).then_some(())
    })
    .await;
    drop(a);

    // Output while nobody watches (a manager without events has no followers).
    let b = support::manager(d.path()).await;
    b.submit(&p.id, "go").await.unwrap();
    support::poll_until(&b, &p.id, "ok").await;
    drop(b);

    let c_sink = Arc::new(Recorder::default());
    let c = watching(d.path(), Duration::ZERO, c_sink.clone()).await;
    let _ev = c.events();
    eventually("the match made while nobody watched", || async {
        (c_sink.lines() == ["ERROR two"]).then_some(())
    })
    .await;
    c.submit(&p.id, "go").await.unwrap();
    eventually("the match after the restart", || async {
        (c_sink.lines() == ["ERROR two", "ERROR three"]).then_some(())
    })
    .await;
    assert_eq!(
        a_sink.lines(),
        ["ERROR one"],
        "the first manager told only its own"
    );
    kill_all(&c).await;
}

#[tokio::test]
async fn a_batch_recorded_but_not_handed_over_is_handed_over_once_after_a_restart() {
    let d = tempfile::tempdir().unwrap();
    let failing = Arc::new(Recorder {
        fail: true,
        ..Recorder::default()
    });
    let a = watching(d.path(), Duration::ZERO, failing.clone()).await;
    let _ev = a.events();
    let p = a
        .spawn(watched(
            "echo 'ready on 8080'; read x; echo 'ready again'",
            d.path(),
            &["ready"],
        ))
        .await
        .unwrap();
    eventually("a refused hand-over", || async {
        (failing.calls.load(Ordering::SeqCst) >= 2).then_some(())
    })
    .await;
    // More output arrives while the batch is stuck: it must go into a later batch.
    a.submit(&p.id, "go").await.unwrap();
    support::poll_until(&a, &p.id, "ready again").await;
    drop(a);

    let sink = Arc::new(Recorder::default());
    let b = watching(d.path(), Duration::ZERO, sink.clone()).await;
    let _ev = b.events();
    eventually("both batches", || async {
        (sink.batches().len() == 2).then_some(())
    })
    .await;
    let batches = sink.batches();
    assert_eq!(batches[0].first_offset, 0);
    assert_eq!(sink.lines(), ["ready on 8080", "ready again"]);
    assert!(batches[0].first_offset < batches[1].first_offset);
    // Nothing more comes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sink.batches().len(), 2);
}

#[tokio::test]
async fn reads_of_recent_output_come_from_memory() {
    let d = tempfile::tempdir().unwrap();
    let m = watching(d.path(), Duration::ZERO, Arc::new(Recorder::default())).await;
    let _ev = m.events();
    let p = m
        .spawn(req("echo hello-window; read x", d.path(), false))
        .await
        .unwrap();
    // A read may come from the disk until the follower has caught up: wait for the window.
    let written = "hello-window\n".len() as u64;
    eventually("the output in the window", || async {
        (m.window_end(&p.id).unwrap() >= Some(written)).then_some(())
    })
    .await;
    // Take the log away on disk: the window still answers.
    let log_dir = d.path().join("procs").join(&p.id).join("log");
    for f in std::fs::read_dir(&log_dir).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    let tail = m.log(&p.id, None, None).await.unwrap();
    assert!(tail.output.contains("hello-window"), "{tail:?}");
    let polled = m.poll(&p.id).await.unwrap();
    assert!(polled.output.contains("hello-window"), "{polled:?}");
    // A manager without a follower reads the disk, where it is gone.
    let bare = support::manager(d.path()).await;
    assert!(
        !bare
            .log(&p.id, None, None)
            .await
            .unwrap()
            .output
            .contains("hello-window")
    );
    kill_all(&m).await;
}

#[tokio::test]
async fn the_window_keeps_up_with_a_fast_writer() {
    let d = tempfile::tempdir().unwrap();
    let m = watching(d.path(), Duration::ZERO, Arc::new(Recorder::default())).await;
    let _ev = m.events();
    let p = m
        .spawn(req("seq 1 500000; read x", d.path(), false))
        .await
        .unwrap();
    // The window itself reaches the end of the output (reads would fall back to the disk
    // while it lags), and then answers the read.
    let total: u64 = (1..=500_000u64)
        .map(|n| n.to_string().len() as u64 + 1)
        .sum();
    eventually("the window at the end of the output", || async {
        (m.window_end(&p.id).unwrap() == Some(total)).then_some(())
    })
    .await;
    let tail = m.log(&p.id, None, Some(2000)).await.unwrap();
    assert!(tail.output.ends_with("499999\n500000\n"), "{tail:?}");
    assert_eq!(tail.total, total);
    // The same bytes as on disk, at the same offsets.
    let bare = support::manager(d.path()).await;
    let disk = bare.log(&p.id, Some(tail.start), Some(2000)).await.unwrap();
    assert_eq!(disk.output, tail.output);
    assert_eq!(disk.start, tail.start);
    kill_all(&m).await;
}

#[tokio::test]
async fn reads_are_never_behind_the_log_on_disk() {
    let d = tempfile::tempdir().unwrap();
    let m = watching(d.path(), Duration::ZERO, Arc::new(Recorder::default())).await;
    let _ev = m.events();
    let p = m
        .spawn(req(
            "echo first; read x; echo second-$x; read y",
            d.path(),
            false,
        ))
        .await
        .unwrap();
    eventually("the window", || async {
        (m.window_end(&p.id).unwrap() >= Some("first\n".len() as u64)).then_some(())
    })
    .await;
    assert!(m.poll(&p.id).await.unwrap().output.contains("first"));
    // The follower is idle now; new output reaches the disk before it looks again.
    m.submit(&p.id, "now").await.unwrap();
    let log_dir = d.path().join("procs").join(&p.id).join("log");
    eventually("the answer on disk", || async {
        let on_disk = tern_procs::log::read_range(&log_dir, 0, 1 << 16).unwrap();
        String::from_utf8_lossy(&on_disk.data)
            .contains("second-now\n")
            .then_some(())
    })
    .await;
    // Whatever the follower has read by now, a read shows what is on disk.
    let tail = m.log(&p.id, None, None).await.unwrap();
    assert!(tail.output.contains("second-now"), "{tail:?}");
    let polled = m.poll(&p.id).await.unwrap();
    assert!(polled.output.contains("second-now"), "{polled:?}");
    kill_all(&m).await;
}
