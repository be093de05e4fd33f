//! Attaching a terminal to a PTY process (`tern ps attach`): the supervisor's side, which fans
//! the live output out to every attached client, and the client's side of the request.
//!
//! Flow in the supervisor:
//!
//! ```text
//! pump: read the PTY ─(buffer)→ LogWriter::write → Fanout::publish(chunk, log end offset)
//!                                   └─ queue it for every subscriber (never blocks)
//! `attach` request → Fanout::subscribe (offset = where the stream begins) → `ok` + offset
//!   → serve(): queued chunks → socket        (ends: output ended, dropped, supervisor stops)
//!              socket bytes  → the PTY input (ends: the client closed its side = detach)
//! ```
//!
//! **Nobody waits for a client.** Publishing only queues. A subscriber is dropped and its
//! connection closed when more than [`CLIENT_BACKLOG`] bytes wait for it and it has taken
//! nothing for [`CLIENT_STALL`] (a frozen or dead terminal), or when more than
//! [`CLIENT_BACKLOG_MAX`] wait however it reads (it cannot keep up; memory stays bounded).
//! So neither the pump nor the log ever block on an attached client, and a live one that is
//! merely slower than a burst of output (a busy machine) is not cut off for it.
//!
//! **No gap, no repeat.** The pump writes a chunk to the log before publishing it, and
//! subscribing reads the offset under the lock `publish` takes: the log holds every byte
//! before the answer's `offset`, the stream carries every byte from it. A client shows the
//! log's tail up to `offset` for context, then the stream.
//!
//! Client side: [`attach`] sends the request, reads the answer line byte by byte (the raw
//! stream follows it at once, so nothing may be read ahead) and returns the stream.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::ProcError;
use crate::protocol::{Request, Response};

/// Bytes of output queued for one attached client beyond which it is disconnected if it has
/// taken nothing for [`CLIENT_STALL`].
pub const CLIENT_BACKLOG: usize = 4 * 1024 * 1024;
/// Bytes queued for one client beyond which it is disconnected however it reads.
pub const CLIENT_BACKLOG_MAX: usize = 32 * 1024 * 1024;
/// How long a client with more than [`CLIENT_BACKLOG`] queued may take nothing.
pub const CLIENT_STALL: Duration = Duration::from_secs(2);

/// Longest answer line the client reads before the stream.
const MAX_ANSWER: usize = 64 * 1024;

type Chunk = Arc<[u8]>;

/// The attached clients of one supervisor, fed by the pump's writing thread.
pub(crate) struct Fanout {
    inner: Mutex<Inner>,
    backlog: usize,
    backlog_max: usize,
    stall_ms: u64,
    /// The clock of the clients' `progress`.
    born: Instant,
}

#[derive(Default)]
struct Inner {
    /// The log's end offset after the last chunk published.
    offset: u64,
    /// The output ended: nobody can subscribe any more.
    closed: bool,
    next_id: u64,
    subs: Vec<Sub>,
}

struct Sub {
    id: u64,
    tx: mpsc::UnboundedSender<Chunk>,
    queued: Arc<AtomicUsize>,
    /// When (ms on the fanout's clock) the client last took a chunk or was caught up.
    progress: Arc<AtomicU64>,
    dropped: CancellationToken,
}

/// One attached client's share of the output; unsubscribes when dropped.
pub(crate) struct Subscription {
    id: u64,
    offset: u64,
    rx: mpsc::UnboundedReceiver<Chunk>,
    queued: Arc<AtomicUsize>,
    progress: Arc<AtomicU64>,
    /// Cancelled when the fanout dropped this client for its backlog.
    dropped: CancellationToken,
    fanout: Arc<Fanout>,
}

impl Subscription {
    /// The log offset of the first byte this subscription receives.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.fanout.unsubscribe(self.id);
    }
}

impl Fanout {
    /// A fanout with the production limits; `backlog` is [`CLIENT_BACKLOG`] there.
    pub(crate) fn new(backlog: usize) -> Self {
        Self::with_limits(backlog, CLIENT_BACKLOG_MAX.max(backlog), CLIENT_STALL)
    }

    fn with_limits(backlog: usize, backlog_max: usize, stall: Duration) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            backlog,
            backlog_max,
            stall_ms: u64::try_from(stall.as_millis()).unwrap_or(u64::MAX),
            born: Instant::now(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `data` (already in the log, which now ends at `end`) for every subscriber.
    /// Never blocks: a subscriber too far behind is dropped instead.
    pub(crate) fn publish(&self, data: &[u8], end: u64) {
        let mut inner = self.lock();
        inner.offset = end;
        if inner.subs.is_empty() || data.is_empty() {
            return;
        }
        let chunk: Chunk = Arc::from(data);
        let now = self.now_ms();
        inner.subs.retain(|s| {
            let queued = s.queued.load(Ordering::Acquire);
            if queued == 0 {
                // Caught up: a stall is counted from here.
                s.progress.store(now, Ordering::Release);
            }
            let after = queued + chunk.len();
            let idle_ms = now.saturating_sub(s.progress.load(Ordering::Acquire));
            if after > self.backlog_max || (after > self.backlog && idle_ms >= self.stall_ms) {
                tracing::warn!(
                    queued,
                    idle_ms,
                    "an attached client fell too far behind the output; disconnecting it"
                );
                s.dropped.cancel();
                return false;
            }
            s.queued.fetch_add(chunk.len(), Ordering::AcqRel);
            s.tx.send(Arc::clone(&chunk)).is_ok()
        });
    }

    /// The output ended: every stream ends after what is queued, and no one may subscribe.
    pub(crate) fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        inner.subs.clear();
    }

    /// A new subscriber from the current end of the log; `None` once the output ended.
    pub(crate) fn subscribe(self: &Arc<Self>) -> Option<Subscription> {
        let mut inner = self.lock();
        if inner.closed {
            return None;
        }
        let id = inner.next_id;
        inner.next_id += 1;
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let progress = Arc::new(AtomicU64::new(self.now_ms()));
        let dropped = CancellationToken::new();
        inner.subs.push(Sub {
            id,
            tx,
            queued: Arc::clone(&queued),
            progress: Arc::clone(&progress),
            dropped: dropped.clone(),
        });
        Some(Subscription {
            id,
            offset: inner.offset,
            rx,
            queued,
            progress,
            dropped,
            fanout: Arc::clone(self),
        })
    }

    fn unsubscribe(&self, id: u64) {
        self.lock().subs.retain(|s| s.id != id);
    }

    #[cfg(test)]
    fn subscribers(&self) -> usize {
        self.lock().subs.len()
    }
}

/// Runs one attached connection (after its `ok` answer was written) until the client
/// detaches, the output ends, the client is dropped for its backlog, or `cancel` fires.
/// `input` may hold bytes the client sent right behind its request.
pub(crate) async fn serve<R: AsyncRead + Unpin>(
    mut input: R,
    mut output: OwnedWriteHalf,
    mut sub: Subscription,
    stdin: Arc<Mutex<Option<Box<dyn Write + Send>>>>,
    cancel: CancellationToken,
) {
    let dropped = sub.dropped.clone();
    let out = async {
        loop {
            let chunk = tokio::select! {
                () = dropped.cancelled() => return,
                c = sub.rx.recv() => match c {
                    Some(c) => c,
                    None => break,
                },
            };
            // A client that stopped reading blocks this write, not the pump; being dropped
            // for the backlog ends it.
            let wrote = tokio::select! {
                () = dropped.cancelled() => return,
                r = output.write_all(&chunk) => r,
            };
            if wrote.is_err() {
                return;
            }
            sub.progress.store(sub.fanout.now_ms(), Ordering::Release);
            sub.queued.fetch_sub(chunk.len(), Ordering::AcqRel);
        }
        // The output ended: the client reads to the end, then EOF.
        let _ = output.shutdown().await;
    };
    let inp = async {
        let mut buf = vec![0u8; 4096];
        loop {
            let n = match input.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let bytes = buf[..n].to_vec();
            let stdin = Arc::clone(&stdin);
            // The terminal's input can be full (a program that does not read): this blocks
            // only this client's input, on the blocking pool.
            let wrote = tokio::task::spawn_blocking(move || {
                let mut guard = stdin.lock().unwrap_or_else(|p| p.into_inner());
                match guard.as_mut() {
                    // Input was closed (`close`): the client watches only.
                    None => Ok(()),
                    Some(w) => w.write_all(&bytes).and_then(|()| w.flush()),
                }
            })
            .await;
            if let Ok(Err(e)) = wrote {
                tracing::debug!("attach: cannot write to the terminal: {e}");
            }
        }
    };
    tokio::select! {
        () = cancel.cancelled() => {}
        () = out => {}
        () = inp => {}
    }
}

/// An attached connection: the raw stream, and where in the log it begins.
#[derive(Debug)]
pub struct Attached {
    /// The log offset of the stream's first byte: the log holds everything before it.
    pub offset: u64,
    /// Output from the process; what is written goes to its terminal. Closing it detaches.
    pub stream: UnixStream,
}

/// Attaches to the supervisor at `socket`. `Ok(None)`: no supervisor there (it is gone);
/// [`ProcError::Refused`]: it said no (not a PTY, exited).
pub async fn attach(socket: &Path) -> Result<Option<Attached>, ProcError> {
    let mut stream = match UnixStream::connect(socket).await {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(ProcError::io(socket, e)),
    };
    let mut line = serde_json::to_vec(&Request::Attach)
        .map_err(|e| ProcError::Protocol(format!("cannot encode a request: {e}")))?;
    line.push(b'\n');
    match stream.write_all(&line).await {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(None),
        Err(e) => return Err(ProcError::io(socket, e)),
    }
    let mut answer = Vec::new();
    loop {
        let mut byte = [0u8; 1];
        match stream.read(&mut byte).await {
            Ok(0) => return Ok(None),
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) => answer.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(None),
            Err(e) => return Err(ProcError::io(socket, e)),
        }
        if answer.len() > MAX_ANSWER {
            return Err(ProcError::Protocol(
                "the supervisor's answer is too long".into(),
            ));
        }
    }
    let resp: Response = serde_json::from_slice(&answer).map_err(|e| {
        ProcError::Protocol(format!(
            "the supervisor answered nonsense: {e}: {}",
            String::from_utf8_lossy(&answer)
        ))
    })?;
    if !resp.ok {
        return Err(ProcError::Refused(
            resp.error.unwrap_or_else(|| "attach refused".into()),
        ));
    }
    let offset = resp.offset.ok_or_else(|| {
        ProcError::Protocol("the supervisor's attach answer has no offset".into())
    })?;
    Ok(Some(Attached { offset, stream }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn subscribers_get_every_chunk_from_their_offset() {
        let f = Arc::new(Fanout::new(1024));
        f.publish(b"before", 6);
        let mut a = f.subscribe().unwrap();
        assert_eq!(a.offset(), 6);
        f.publish(b"one", 9);
        let mut b = f.subscribe().unwrap();
        assert_eq!(b.offset(), 9);
        f.publish(b"two", 12);
        assert_eq!(&*a.rx.recv().await.unwrap(), b"one");
        assert_eq!(&*a.rx.recv().await.unwrap(), b"two");
        assert_eq!(&*b.rx.recv().await.unwrap(), b"two");
        drop(b);
        assert_eq!(f.subscribers(), 1);
        f.close();
        assert!(
            a.rx.recv().await.is_none(),
            "the stream ends with the output"
        );
        assert!(f.subscribe().is_none());
    }

    /// A subscriber that does not drain its queue is dropped; publishing never waits.
    #[tokio::test]
    async fn a_subscriber_too_far_behind_is_dropped() {
        let f = Arc::new(Fanout::with_limits(10, 100, Duration::ZERO));
        let slow = f.subscribe().unwrap();
        let mut fast = f.subscribe().unwrap();
        let mut end = 0;
        for _ in 0..3 {
            end += 4;
            f.publish(b"abcd", end);
            let got = fast.rx.recv().await.unwrap();
            fast.queued.fetch_sub(got.len(), Ordering::AcqRel);
        }
        assert!(slow.dropped.is_cancelled());
        assert!(!fast.dropped.is_cancelled());
        assert_eq!(f.subscribers(), 1);
    }

    /// Over the backlog, a client that took output within the stall time stays (it is only
    /// slower than a burst), up to the hard limit.
    #[tokio::test]
    async fn a_client_that_reads_stays_up_to_the_hard_limit() {
        let f = Arc::new(Fanout::with_limits(10, 30, Duration::from_secs(3600)));
        let s = f.subscribe().unwrap();
        for i in 1..=7 {
            f.publish(b"abcd", 4 * i);
        }
        assert!(
            !s.dropped.is_cancelled(),
            "28 bytes queued, under the hard limit"
        );
        f.publish(b"abcd", 32);
        assert!(
            s.dropped.is_cancelled(),
            "32 bytes queued, over the hard limit"
        );
    }
}
