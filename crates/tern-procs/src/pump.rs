//! The supervisor's pump: the child's output (a pipe or a PTY) → the log, on two threads.
//!
//! Flow: `pump-read` takes a free buffer (allocating one while fewer than [`BUFS`] exist),
//! reads the output into it and queues it → `pump-write` takes the oldest queued buffer,
//! appends it to the log ([`LogWriter`]), publishes it to attached terminals ([`Fanout`])
//! and gives the buffer back. The reader ends at the end of the output (or when told to
//! stop); the writer then empties the queue, drops the log and reports done.
//!
//! Why two threads: with one, nobody drains the pipe while a chunk is copied into the page
//! cache, and the child waits on a full pipe; the split took capture from 61–65 % to 70–77 %
//! of a plain `> file` (`docs/benchmarks.md`, issue 6). Why a mutex and two condvars rather
//! than std's channels: a waiting side sleeps at once (std's channels spin a little first,
//! on a core the child or the other half could use), and a side is woken only when it
//! sleeps, so a busy pump makes no wake-up calls. Measured against the channels, the two
//! were equal within this machine's noise; the design is kept for what it rules out.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use tokio::sync::oneshot;

use crate::ProcError;
use crate::attach::Fanout;
use crate::log::LogWriter;

/// One read: a whole 256 KiB pipe.
const BUF: usize = 256 * 1024;
/// Buffers in use at most: how far the reader can run ahead of the log's writes.
const BUFS: usize = 4;

/// What the pump's two halves share.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// A chunk was queued, or the reader ended.
    queued: Condvar,
    /// A buffer came back, or the writer ended.
    freed: Condvar,
}

#[derive(Default)]
struct State {
    /// Read chunks, oldest first, with their lengths.
    full: VecDeque<(Vec<u8>, usize)>,
    /// Buffers given back by the writer.
    free: Vec<Vec<u8>>,
    allocated: usize,
    reader_done: bool,
    writer_done: bool,
    reader_waits: bool,
    writer_waits: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Starts the pump. `written` follows the log's end; `stop` makes the reader drop what it
/// reads next and end. The receiver fires when the output has ended and the log is closed.
pub(crate) fn start(
    mut output: Box<dyn Read + Send>,
    mut log: LogWriter,
    fanout: Arc<Fanout>,
    written: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Result<oneshot::Receiver<()>, ProcError> {
    let shared = Arc::new(Shared::default());
    let (done_tx, done) = oneshot::channel();
    let spawn_err = |e: std::io::Error| ProcError::Spawn(format!("cannot start the pump: {e}"));
    {
        let shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("pump-read".into())
            .spawn(move || {
                read(&mut output, &stop, &shared);
                let mut st = shared.lock();
                st.reader_done = true;
                if st.writer_waits {
                    shared.queued.notify_one();
                }
            })
            .map_err(spawn_err)?;
    }
    let for_writer = Arc::clone(&shared);
    let writer = std::thread::Builder::new()
        .name("pump-write".into())
        .spawn(move || {
            let shared = for_writer;
            write(&mut log, &fanout, &written, &shared);
            shared.lock().writer_done = true;
            shared.freed.notify_one();
            // Waits for the log's segment deletions, so the exit is recorded with the log
            // within its cap.
            drop(log);
            fanout.close();
            let _ = done_tx.send(());
        });
    if let Err(e) = writer {
        // The reader must not wait for a writer that never came.
        shared.lock().writer_done = true;
        shared.freed.notify_one();
        return Err(spawn_err(e));
    }
    Ok(done)
}

/// The reading half, until the end of the output, `stop`, or the writer's end.
fn read(output: &mut Box<dyn Read + Send>, stop: &AtomicBool, shared: &Shared) {
    loop {
        let mut buf = {
            let mut st = shared.lock();
            loop {
                if st.writer_done {
                    return;
                }
                if let Some(buf) = st.free.pop() {
                    break buf;
                }
                if st.allocated < BUFS {
                    st.allocated += 1;
                    // Untouched pages cost nothing: a buffer becomes memory as reads fill
                    // it, so a quiet process holds little.
                    break vec![0u8; BUF];
                }
                st.reader_waits = true;
                st = shared.freed.wait(st).unwrap_or_else(|p| p.into_inner());
                st.reader_waits = false;
            }
        };
        let n = loop {
            match output.read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // EIO on a PTY: the terminal has no slave left, which is its EOF.
                Ok(0) | Err(_) => return,
                Ok(n) => break n,
            }
        };
        if stop.load(Ordering::Acquire) {
            return;
        }
        let mut st = shared.lock();
        st.full.push_back((buf, n));
        if st.writer_waits {
            shared.queued.notify_one();
        }
    }
}

/// The writing half, until the reader has ended and the queue is empty.
fn write(log: &mut LogWriter, fanout: &Fanout, written: &AtomicU64, shared: &Shared) {
    let mut warned = false;
    loop {
        let (buf, n) = {
            let mut st = shared.lock();
            loop {
                if let Some(chunk) = st.full.pop_front() {
                    break chunk;
                }
                if st.reader_done {
                    return;
                }
                st.writer_waits = true;
                st = shared.queued.wait(st).unwrap_or_else(|p| p.into_inner());
                st.writer_waits = false;
            }
        };
        let wrote = log.write(&buf[..n]);
        // After the log, so an attach's offset never points past it.
        fanout.publish(&buf[..n], log.offset());
        {
            let mut st = shared.lock();
            st.free.push(buf);
            if st.reader_waits {
                shared.freed.notify_one();
            }
        }
        match wrote {
            Ok(()) => written.store(log.offset(), Ordering::Release),
            // The reader goes on, so the child never blocks on a full pipe.
            Err(e) if !warned => {
                tracing::warn!("cannot write the output log: {e}");
                warned = true;
            }
            Err(_) => {}
        }
    }
}
