//! The supervisor's `attach` and `resize` ops against real supervisors and PTY programs.

use crate::support;

use std::time::Duration;

use support::*;
use tern_procs::ProcError;
use tern_procs::attach::{Attached, attach};
use tern_procs::log::read_range;
use tern_procs::protocol::{Request, call};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Reads `stream` into `seen` until it contains `needle`; fails after a minute.
async fn read_until(stream: &mut UnixStream, seen: &mut Vec<u8>, needle: &str) {
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(seen).contains(needle) {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "the stream ended without {needle:?}: {:?}",
                String::from_utf8_lossy(seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(
        found.is_ok(),
        "no {needle:?} in {:?}",
        String::from_utf8_lossy(seen)
    );
}

/// Reads `stream` to its end; the bytes read. Fails after a minute.
async fn read_to_end(stream: &mut UnixStream) -> Vec<u8> {
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut all))
        .await
        .expect("the stream did not end")
        .unwrap();
    all
}

async fn attach_to(root: &std::path::Path, id: &str) -> Attached {
    attach(&root.join("procs").join(id).join("sock"))
        .await
        .unwrap()
        .expect("a supervisor")
}

#[tokio::test]
async fn resize_changes_the_terminal_size_the_program_sees() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = manager(d.path()).await;
    let p = mgr
        .spawn(req(
            r#"while IFS= read -r l; do echo "size:$(stty size)"; done"#,
            d.path(),
            true,
        ))
        .await
        .unwrap();
    let sock = d.path().join("procs").join(&p.id).join("sock");
    mgr.submit(&p.id, "a").await.unwrap();
    poll_until(&mgr, &p.id, "size:40 120").await;

    let r = call(
        &sock,
        &Request::Resize {
            cols: 100,
            rows: 30,
        },
    )
    .await
    .unwrap()
    .unwrap();
    assert!(r.ok, "{r:?}");
    mgr.submit(&p.id, "b").await.unwrap();
    poll_until(&mgr, &p.id, "size:30 100").await;

    let r = call(&sock, &Request::Resize { cols: 0, rows: 30 })
        .await
        .unwrap()
        .unwrap();
    assert!(!r.ok && r.error.unwrap().contains("column"));

    // A pipe process has no terminal to resize.
    let pipe = mgr.spawn(req("sleep 60", d.path(), false)).await.unwrap();
    let r = call(
        &d.path().join("procs").join(&pipe.id).join("sock"),
        &Request::Resize { cols: 80, rows: 24 },
    )
    .await
    .unwrap()
    .unwrap();
    assert!(!r.ok && r.error.unwrap().contains("pipes"));
    kill_all(&mgr).await;
}

/// Two clients see the same live output; input from one reaches the program; the stream
/// continues the log exactly at the answer's offset; one detaching leaves the other and the
/// process alone; at the exit the stream ends.
#[tokio::test]
async fn attached_clients_share_the_output_and_type_into_the_terminal() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = manager(d.path()).await;
    let p = mgr
        .spawn(req(
            r#"echo ready; while IFS= read -r l; do echo "got:$l"; done; echo bye"#,
            d.path(),
            true,
        ))
        .await
        .unwrap();
    poll_until(&mgr, &p.id, "ready").await;
    let mut a = attach_to(d.path(), &p.id).await;
    let mut b = attach_to(d.path(), &p.id).await;
    let log_dir = d.path().join("procs").join(&p.id).join("log");
    // Nothing was written since "ready": both streams begin at the log's end.
    let total = read_range(&log_dir, u64::MAX, 0).unwrap().total;
    assert_eq!((a.offset, b.offset), (total, total));

    a.stream.write_all(b"hello\r").await.unwrap();
    let (mut seen_a, mut seen_b) = (Vec::new(), Vec::new());
    read_until(&mut a.stream, &mut seen_a, "got:hello\r\n").await;
    read_until(&mut b.stream, &mut seen_b, "got:hello\r\n").await;
    // The stream is the log from the offset on: the terminal's echo, then the answer.
    let logged = read_range(&log_dir, a.offset, seen_a.len()).unwrap();
    assert_eq!(logged.data, seen_a);
    assert!(String::from_utf8_lossy(&seen_a).starts_with("hello\r\n"));

    // B detaches; the process and A go on.
    drop(b);
    a.stream.write_all(b"again\r").await.unwrap();
    read_until(&mut a.stream, &mut seen_a, "got:again\r\n").await;
    assert!(mgr.get(&p.id).await.unwrap().status.is_running());
    // The input really came through the terminal: the model's poll sees it too.
    poll_until(&mgr, &p.id, "got:again").await;

    // The end of input (Ctrl-D through the terminal) ends the program; the stream ends
    // after the last output.
    mgr.close(&p.id).await.unwrap();
    let rest = read_to_end(&mut a.stream).await;
    seen_a.extend_from_slice(&rest);
    assert!(
        String::from_utf8_lossy(&seen_a).contains("bye"),
        "{seen_a:?}"
    );
    let all = read_range(&log_dir, a.offset, usize::MAX).unwrap();
    assert_eq!(
        all.data, seen_a,
        "the stream is the log's rest, byte for byte"
    );

    // No attaching to a finished process.
    let sock = d.path().join("procs").join(&p.id).join("sock");
    eventually("the supervisor to stop", || async {
        match attach(&sock).await {
            Ok(None) => Some(()),
            Err(ProcError::Refused(e)) => {
                assert!(e.contains("exited") || e.contains("ended"), "{e}");
                None
            }
            other => panic!("attached to a finished process: {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn a_pipe_process_cannot_be_attached() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = manager(d.path()).await;
    let p = mgr.spawn(req("sleep 60", d.path(), false)).await.unwrap();
    let err = attach(&d.path().join("procs").join(&p.id).join("sock"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProcError::Refused(e) if e.contains("pipes")),
        "{err:?}"
    );
    kill_all(&mgr).await;
}

/// A client that stops reading is cut off; the program's output and the log go on at full
/// speed, and another client, which reads, is neither held up nor cut off.
#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected_and_blocks_nothing() {
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = manager(d.path()).await;
    // On a line of input, 6 MB of output (more than a client may have queued while it takes
    // nothing for 2 s), a pause longer than that, and the last line.
    let p = mgr
        .spawn(req(
            r#"read l; head -c 6000000 /dev/zero | tr '\0' x; sleep 3; echo; echo END; read l"#,
            d.path(),
            true,
        ))
        .await
        .unwrap();
    let mut stalled = attach_to(d.path(), &p.id).await;
    let live = attach_to(d.path(), &p.id).await;
    // Reads as fast as it can on a thread of its own (not behind this test's runtime),
    // keeping only a count and the last bytes.
    let live = live.stream.into_std().unwrap();
    live.set_nonblocking(false).unwrap();
    let live_reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut live = live;
        let (mut count, mut tail) = (0usize, Vec::new());
        let mut buf = vec![0u8; 256 * 1024];
        while !tail.windows(3).any(|w| w == b"END") {
            let n = live.read(&mut buf).unwrap();
            assert!(n > 0, "the live client was cut off after {count} bytes");
            count += n;
            tail.extend_from_slice(&buf[..n]);
            tail.drain(..tail.len().saturating_sub(16));
        }
        (live, count)
    });
    mgr.submit(&p.id, "go").await.unwrap();
    // The whole output reaches the log although `stalled` reads nothing.
    eventually("END in the log", || async {
        let tail = mgr.log(&p.id, None, Some(64)).await.unwrap();
        tail.output.contains("END").then_some(())
    })
    .await;
    let (_live, live_bytes) = live_reader.join().unwrap();
    assert!(live_bytes > 6_000_000, "{live_bytes}");
    // The stalled client was dropped: what it can still read ends well short of the output.
    let got = read_to_end(&mut stalled.stream).await;
    assert!(got.len() < 6_000_000, "{}", got.len());
    let diag =
        std::fs::read_to_string(d.path().join("procs").join(&p.id).join("supervisor.log")).unwrap();
    assert_eq!(diag.matches("fell too far behind").count(), 1, "{diag}");
    // The program runs on (waiting for its second line).
    assert!(mgr.get(&p.id).await.unwrap().status.is_running());
    kill_all(&mgr).await;
}
