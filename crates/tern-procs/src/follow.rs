//! Following a process's output in the gateway: the rolling in-memory window and the watch
//! patterns.
//!
//! One follower task per process the gateway's manager reports on (see
//! [`crate::ProcessManager::events`]). Flow:
//!
//! ```text
//! start: read `watched` (how far the patterns were applied, when they last notified)
//!   └─ read from min(watched, end - WINDOW) so the window starts full
//! loop: read new log bytes (every IDLE when there are none)
//!   ├─ push them into the Window (the newest WINDOW_BYTES; `poll`/`log` read from it)
//!   └─ complete lines past `watched` → control sequences stripped → each pattern
//!        └─ a match joins the pending batch
//!   batch due (first one at once, then at most one per `watch_interval`) or process ended
//!     └─ WatchSink::matched(batch) ─ok─► `watched` = scanned offset (written atomically)
//! process ended and the log read to its end: last partial line, last batch, window complete
//! ```
//!
//! **At most once to the model, never lost:** `watched` moves past a match only after the
//! sink accepted its batch; a crash in between scans the same lines again after the restart,
//! and the batch keeps its key (the log offset of its first match), which the sink
//! deduplicates. Matches found while a batch may not be sent yet (the rate limit) are not
//! persisted: the next scan from `watched` finds them again.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};
use tern_tools::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::ProcError;
use crate::blocking;
use crate::layout::{ProcDir, read_json, write_json_atomic};
use crate::log::{LogSlice, read_range};
use crate::output::for_model;
use tern_util::now_ms;

/// The session a process belongs to, shared with its follower.
pub(crate) type Owner = Arc<Mutex<Option<String>>>;

/// Bytes of the newest output each followed process keeps in memory.
pub const WINDOW_BYTES: usize = 200 * 1024;
/// How often the log is looked at while it does not grow.
const IDLE: Duration = Duration::from_millis(150);
/// Most bytes read from the log at once.
const READ_CHUNK: usize = 256 * 1024;
/// A line longer than this is matched in pieces (a stream without newlines must not grow
/// the line buffer for ever).
const MAX_LINE: usize = 16 * 1024;
/// Matching lines one notification shows at most (all are counted).
pub const BATCH_LINES: usize = 10;
/// Characters of a matching line shown at most.
const LINE_CHARS: usize = 500;
/// `watched` is rewritten at least after this much scanned output without matches.
const PERSIST_EVERY: u64 = 1024 * 1024;

/// The newest output of a process, in memory: bytes `[start, start + data.len())`.
#[derive(Debug, Default)]
pub struct Window {
    start: u64,
    data: VecDeque<u8>,
    /// The process has ended and everything it wrote is here (from `start`).
    complete: bool,
}

impl Window {
    fn at(start: u64) -> Self {
        Self {
            start,
            data: VecDeque::new(),
            complete: false,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.data.extend(bytes);
        let over = self.data.len().saturating_sub(WINDOW_BYTES);
        if over > 0 {
            self.data.drain(..over);
            self.start += over as u64;
        }
    }

    /// The offset just past the newest byte.
    pub fn end(&self) -> u64 {
        self.start + self.data.len() as u64
    }

    /// Up to `limit` bytes from `offset` when the window holds that offset (`total` is the
    /// window's end); `None` when it starts later.
    pub fn read(&self, offset: u64, limit: usize) -> Option<LogSlice> {
        if offset < self.start {
            return None;
        }
        let from = (offset.min(self.end()) - self.start) as usize;
        let to = (from + limit).min(self.data.len());
        Some(LogSlice {
            data: self.data.range(from..to).copied().collect(),
            start: self.start + from as u64,
            total: self.end(),
        })
    }
}

/// Where a follower keeps what it knows; shared with the manager's readers.
#[derive(Debug, Default)]
pub struct Followed {
    window: Mutex<Option<Window>>,
    /// Fired when the follower has read the ended process's output to the end and handed
    /// over its last batch (so the exit is reported after the last matches).
    pub done: CancellationToken,
}

impl Followed {
    /// Reads from the window: `None` when there is no window, it does not hold `offset`
    /// (before its start or past its end), or it may lag behind a process that ended (only a complete window is trusted then).
    pub fn read(&self, offset: u64, limit: usize, running: bool) -> Option<LogSlice> {
        let w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let w = w.as_ref()?;
        if (!running && !w.complete) || offset > w.end() {
            return None;
        }
        w.read(offset, limit)
    }

    /// The newest `limit` bytes, when the window holds them all (see [`Self::read`]).
    pub fn tail(&self, limit: usize, running: bool) -> Option<LogSlice> {
        let end = self.bounds(running)?.1;
        self.read(end.saturating_sub(limit as u64), limit, running)
    }

    /// The window's `[start, end)` offsets, when it can answer (see [`Self::read`]).
    pub fn bounds(&self, running: bool) -> Option<(u64, u64)> {
        let w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let w = w.as_ref()?;
        (running || w.complete).then(|| (w.start, w.end()))
    }
}

/// One line that matched a watch pattern.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MatchedLine {
    /// The log offset of the line's first byte.
    pub offset: u64,
    pub pattern: String,
    /// The line, control sequences stripped, cut to a sensible length.
    pub line: String,
}

/// Matches handed to the sink at once.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct WatchBatch {
    pub process_id: String,
    /// The log offset of the first match: the batch's identity across restarts.
    pub first_offset: u64,
    /// The first [`BATCH_LINES`] matching lines.
    pub matches: Vec<MatchedLine>,
    /// All matching lines in the batch, shown or not.
    pub total_matches: u64,
    /// The process had ended when the batch was made.
    pub process_ended: bool,
}

/// Why a [`WatchSink`] did not take a batch (handed over again later): the sink's own error.
pub type WatchSinkError = Box<dyn std::error::Error + Send + Sync>;

/// Turns watch matches into notifications (the gateway: a durable wait that resumes the
/// process's session). Must be idempotent per (`process_id`, `first_offset`).
pub trait WatchSink: Send + Sync {
    fn matched<'a>(
        &'a self,
        info: &'a crate::ProcInfo,
        batch: &'a WatchBatch,
    ) -> BoxFuture<'a, Result<(), WatchSinkError>>;
}

/// What `watched` holds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Watched {
    /// Lines before this offset were matched, and their matches handed over (or are in
    /// `sending`).
    offset: u64,
    /// When the last batch was handed over (ms since the epoch).
    last_sent_ms: i64,
    /// A batch recorded before it is handed over (write-ahead): after a crash it is handed
    /// over again, the same batch under the same key, so no match is lost or told twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sending: Option<WatchBatch>,
}

/// What the follower of one process needs.
pub(crate) struct Follow {
    pub pd: ProcDir,
    pub info: crate::ProcInfo,
    /// The session it belongs to now (it may move while followed).
    pub owner: Owner,
    pub patterns: Vec<(String, Regex)>,
    pub sink: Option<Arc<dyn WatchSink>>,
    pub interval: Duration,
    pub followed: Arc<Followed>,
    pub shutdown: CancellationToken,
}

/// Compiles the patterns; invalid ones (checked at spawn, so only a hand-edited spec) are
/// left out with a warning.
pub(crate) fn compile(id: &str, patterns: &[String]) -> Vec<(String, Regex)> {
    patterns
        .iter()
        .filter_map(
            |p| match regex::RegexBuilder::new(p).size_limit(1 << 20).build() {
                Ok(r) => Some((p.clone(), r)),
                Err(e) => {
                    tracing::warn!(%id, pattern = %p, "watch pattern left out: {e}");
                    None
                }
            },
        )
        .collect()
}

/// The scanning side: the partial line and the pending batch.
struct Scanner {
    patterns: Vec<(String, Regex)>,
    /// Offset of `line[0]`.
    line_start: u64,
    line: Vec<u8>,
    batch: Option<WatchBatch>,
}

impl Scanner {
    /// Feeds bytes that start at `offset` (only the part at or past `line_start + line.len()`
    /// is new; earlier bytes are skipped).
    fn feed(&mut self, process_id: &str, offset: u64, mut bytes: &[u8]) {
        let next = self.line_start + self.line.len() as u64;
        if offset < next {
            let skip = ((next - offset) as usize).min(bytes.len());
            bytes = &bytes[skip..];
        }
        while !bytes.is_empty() {
            match bytes.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    self.line.extend_from_slice(&bytes[..=i]);
                    bytes = &bytes[i + 1..];
                    self.end_line(process_id);
                }
                None => {
                    let room = MAX_LINE.saturating_sub(self.line.len());
                    let take = room.min(bytes.len());
                    self.line.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if self.line.len() >= MAX_LINE {
                        self.end_line(process_id);
                    }
                }
            }
        }
    }

    /// Matches the current line and starts the next.
    fn end_line(&mut self, process_id: &str) {
        let offset = self.line_start;
        self.line_start += self.line.len() as u64;
        let bytes = std::mem::take(&mut self.line);
        if bytes.is_empty() {
            return;
        }
        let text = for_model(&bytes);
        let text = text.trim_end_matches(['\n', '\r']);
        let Some((pattern, _)) = self.patterns.iter().find(|(_, r)| r.is_match(text)) else {
            return;
        };
        let batch = self.batch.get_or_insert_with(|| WatchBatch {
            process_id: process_id.to_owned(),
            first_offset: offset,
            matches: Vec::new(),
            total_matches: 0,
            process_ended: false,
        });
        batch.total_matches += 1;
        if batch.matches.len() < BATCH_LINES {
            batch.matches.push(MatchedLine {
                offset,
                pattern: pattern.clone(),
                line: text.chars().take(LINE_CHARS).collect(),
            });
        }
    }
}

/// Runs the follower until the process has ended and its output is read (or shutdown).
pub(crate) async fn run(f: Follow) {
    let id = f.info.id.clone();
    let log_dir = f.pd.log_dir();
    let watched_path = f.pd.dir.join("watched");
    let watching = !f.patterns.is_empty() && f.sink.is_some();
    let p = watched_path.clone();
    let watched = blocking(move || Ok(read_json::<Watched>(&p)?.unwrap_or_default()))
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(%id, "cannot read how far the watch patterns got: {e}");
            Watched::default()
        });
    let dir = log_dir.clone();
    let total = blocking(move || crate::log::total(&dir)).await.unwrap_or(0);
    let window_from = total.saturating_sub(WINDOW_BYTES as u64);
    let mut pos = if watching {
        watched.offset.min(window_from)
    } else {
        window_from
    };
    *f.followed.window.lock().unwrap_or_else(|p| p.into_inner()) = Some(Window::at(pos));
    let mut scanner = Scanner {
        patterns: f.patterns,
        line_start: watched.offset,
        line: Vec::new(),
        batch: None,
    };
    let mut persisted = watched.offset;
    let mut last_sent_ms = watched.last_sent_ms;
    // A batch recorded but perhaps not handed over before a crash goes first.
    let mut in_flight = watched.sending.map(|b| (b, watched.offset));
    loop {
        if f.shutdown.is_cancelled() {
            return;
        }
        // The status before the read: once it says ended, a read to the end is complete.
        let pd = f.pd.clone();
        let running = blocking(move || crate::status::status_of(&pd).map(|s| s.is_running()))
            .await
            .unwrap_or(true);
        let slice = match read_chunk(&log_dir, pos).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(%id, "cannot read the log: {e}");
                tokio::select! {
                    () = f.shutdown.cancelled() => return,
                    () = tokio::time::sleep(IDLE * 4) => continue,
                }
            }
        };
        if slice.start > pos {
            // Rotated away before it was read (far behind, e.g. after a long downtime).
            tracing::warn!(%id, lost = slice.start - pos, "output rotated out of the log before it was watched");
            let mut w = f.followed.window.lock().unwrap_or_else(|p| p.into_inner());
            *w = Some(Window::at(slice.start));
            if scanner.line_start < slice.start {
                scanner.line.clear();
                scanner.line_start = slice.start;
            }
        }
        if !watching && slice.total > slice.end() + WINDOW_BYTES as u64 {
            // Far behind a fast writer and nothing to match: only the window's worth is
            // worth reading.
            pos = slice.total - WINDOW_BYTES as u64;
            *f.followed.window.lock().unwrap_or_else(|p| p.into_inner()) = Some(Window::at(pos));
            continue;
        }
        let got = slice.data.len();
        if got > 0 {
            f.followed
                .window
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert_with(|| Window::at(slice.start))
                .push(&slice.data);
            if watching {
                scanner.feed(&id, slice.start, &slice.data);
            }
        }
        pos = slice.end();
        let at_end = pos >= slice.total;
        let ended = !running && at_end;
        if ended && watching {
            scanner.end_line(&id);
        }
        if watching {
            let due = now_ms().saturating_sub(last_sent_ms)
                >= i64::try_from(f.interval.as_millis()).unwrap_or(i64::MAX);
            if in_flight.is_none()
                && (due || ended)
                && let Some(mut batch) = scanner.batch.take()
            {
                batch.process_ended = ended;
                let ahead = Watched {
                    offset: scanner.line_start,
                    last_sent_ms,
                    sending: Some(batch.clone()),
                };
                match persist(&watched_path, &ahead).await {
                    Some(end) => in_flight = Some((batch, end)),
                    // Not recorded, so not sent: tried again with what comes meanwhile.
                    None => scanner.batch = Some(batch),
                }
            }
            if let Some((batch, end)) = &in_flight {
                let info = crate::ProcInfo {
                    session_id: f.owner.lock().unwrap_or_else(|p| p.into_inner()).clone(),
                    ..f.info.clone()
                };
                let sent = match f.sink.as_ref() {
                    Some(s) => s.matched(&info, batch).await,
                    None => Ok(()),
                };
                match sent {
                    Ok(()) => {
                        tracing::info!(%id, matches = batch.total_matches, "watch patterns matched; the session is to be told");
                        // Past the batch's end only when no newer match is pending.
                        let offset = if scanner.batch.is_none() {
                            scanner.line_start
                        } else {
                            *end
                        };
                        in_flight = None;
                        last_sent_ms = now_ms();
                        let w = Watched {
                            offset,
                            last_sent_ms,
                            sending: None,
                        };
                        persisted = persist(&watched_path, &w).await.unwrap_or(persisted);
                    }
                    Err(e) => tracing::warn!(%id, "cannot hand over watch matches (retried): {e}"),
                }
            }
            if in_flight.is_none()
                && scanner.batch.is_none()
                && (scanner.line_start >= persisted + PERSIST_EVERY
                    || (ended && scanner.line_start > persisted))
            {
                let w = Watched {
                    offset: scanner.line_start,
                    last_sent_ms,
                    sending: None,
                };
                persisted = persist(&watched_path, &w).await.unwrap_or(persisted);
            }
        }
        if ended && ((scanner.batch.is_none() && in_flight.is_none()) || !watching) {
            if let Some(w) = f
                .followed
                .window
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_mut()
            {
                w.complete = true;
            }
            f.followed.done.cancel();
            return;
        }
        if at_end {
            tokio::select! {
                () = f.shutdown.cancelled() => return,
                () = tokio::time::sleep(IDLE) => {}
            }
        }
    }
}

async fn read_chunk(dir: &Path, pos: u64) -> Result<LogSlice, ProcError> {
    let dir = dir.to_path_buf();
    blocking(move || read_range(&dir, pos, READ_CHUNK)).await
}

/// Writes `watched`; the offset now on disk, or `None` when it could not be written.
async fn persist(path: &Path, w: &Watched) -> Option<u64> {
    let p = path.to_path_buf();
    let w = w.clone();
    let offset = w.offset;
    match blocking(move || write_json_atomic(&p, &w)).await {
        Ok(()) => Some(offset),
        Err(e) => {
            tracing::warn!("cannot record how far the watch patterns got: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_keeps_the_newest_bytes_by_offset() {
        let mut w = Window::at(10);
        w.push(&vec![b'a'; WINDOW_BYTES]);
        w.push(b"xyz");
        assert_eq!(w.end(), 10 + WINDOW_BYTES as u64 + 3);
        assert_eq!(w.start, 13);
        assert!(w.read(12, 5).is_none(), "rotated out of the window");
        let tail = w.read(w.end() - 3, 100).unwrap();
        assert_eq!(tail.data, b"xyz");
        assert_eq!(tail.start, w.end() - 3);
        assert_eq!(tail.total, w.end());
        let past = w.read(w.end() + 50, 10).unwrap();
        assert!(past.data.is_empty());
        assert_eq!(past.start, w.end());
    }

    #[test]
    fn an_incomplete_window_is_not_trusted_for_an_ended_process() {
        let f = Followed::default();
        *f.window.lock().unwrap() = Some(Window::at(10));
        f.window.lock().unwrap().as_mut().unwrap().push(b"hello");
        assert_eq!(f.read(10, 10, true).unwrap().data, b"hello");
        assert!(f.read(10, 10, false).is_none());
        f.window.lock().unwrap().as_mut().unwrap().complete = true;
        assert_eq!(f.tail(3, false).unwrap().data, b"llo");
        assert_eq!(f.bounds(false), Some((10, 15)));
        assert!(f.tail(6, false).is_none(), "more than the window holds");
        assert!(f.read(16, 1, false).is_none(), "past the end");
    }

    fn scanner(patterns: &[&str]) -> Scanner {
        let p: Vec<String> = patterns.iter().map(|s| s.to_string()).collect();
        Scanner {
            patterns: compile("t", &p),
            line_start: 0,
            line: Vec::new(),
            batch: None,
        }
    }

    #[test]
    fn lines_are_matched_once_across_reads_with_offsets() {
        let mut s = scanner(&["ERROR", "^done$"]);
        s.feed("p", 0, b"ok\nERR");
        assert!(s.batch.is_none());
        s.feed("p", 6, b"OR: \x1b[31mdisk\x1b[0m\nfine\r\ndone\r\n");
        // A read that overlaps what was fed already adds nothing.
        s.feed("p", 3, b"ERROR: ");
        let b = s.batch.take().unwrap();
        assert_eq!(b.first_offset, 3);
        assert_eq!(b.total_matches, 2);
        assert_eq!(b.matches[0].line, "ERROR: disk");
        assert_eq!(b.matches[0].pattern, "ERROR");
        assert_eq!(b.matches[1].pattern, "^done$");
        assert_eq!(s.line_start, 3 + 21 + 6 + 6);
    }

    #[test]
    fn a_batch_counts_every_match_but_shows_a_few() {
        let mut s = scanner(&["x"]);
        let text = "x\n".repeat(25);
        s.feed("p", 0, text.as_bytes());
        let b = s.batch.unwrap();
        assert_eq!(b.total_matches, 25);
        assert_eq!(b.matches.len(), BATCH_LINES);
        assert_eq!(b.matches[1].offset, 2);
    }

    #[test]
    fn a_line_without_end_is_matched_in_pieces() {
        let mut s = scanner(&["needle"]);
        let mut long = vec![b'a'; MAX_LINE + 10];
        long.extend_from_slice(b"needle");
        s.feed("p", 0, &long);
        assert!(s.batch.is_none(), "the first piece has no needle");
        assert_eq!(s.line_start, MAX_LINE as u64);
        s.end_line("p");
        assert_eq!(s.batch.unwrap().first_offset, MAX_LINE as u64);
    }
}
