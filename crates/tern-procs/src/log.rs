//! The output log: the child's whole output on disk, in segments, under a size cap.
//!
//! Flow: the supervisor's pump hands every chunk it reads to [`LogWriter::write`] (on its
//! writing thread), which appends it to the current segment; a full segment (a quarter of
//! the cap) is closed and a new one started, and the oldest segments are deleted so at most
//! the cap stays on disk. Each segment is named by the absolute offset of its first byte (20
//! digits), so an offset means the same byte for ever, readers need no index, and rotation is
//! a file create plus deletes. The deletes run on a helper thread (`Remover`): freeing a
//! segment's pages takes the file system milliseconds, which the pump would otherwise not
//! spend writing (so the cap can be exceeded, briefly, by what is written meanwhile; dropping
//! the writer waits for them). [`read_range`] serves `log` and `poll`: bytes `[offset,
//! offset + limit)` across segments, moved forward when the start was rotated away.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;

use crate::ProcError;

/// Smallest segment, so a tiny cap does not mean a file per write.
const MIN_SEGMENT: u64 = 16 * 1024;

fn segment_name(start: u64) -> String {
    format!("{start:020}")
}

/// Appends output to the log, rotating segments under the cap. Used by one thread.
pub struct LogWriter {
    dir: PathBuf,
    max_bytes: u64,
    segment_max: u64,
    segments: VecDeque<u64>,
    file: File,
    offset: u64,
    remover: Remover,
}

/// Deletes rotated-out segments on a thread of its own, started at the first deletion (most
/// logs never rotate). One deletion may wait while another runs; a further rotation waits
/// for them, so the log never runs more than that ahead of its cap.
#[derive(Default)]
struct Remover {
    tx: Option<SyncSender<PathBuf>>,
    thread: Option<JoinHandle<()>>,
}

impl Remover {
    fn remove(&mut self, path: PathBuf) {
        if self.tx.is_none() {
            let (tx, rx) = sync_channel::<PathBuf>(1);
            let spawned = std::thread::Builder::new()
                .name("log-remover".into())
                .spawn(move || {
                    for path in rx {
                        remove_segment(&path);
                    }
                });
            match spawned {
                Ok(thread) => {
                    self.tx = Some(tx);
                    self.thread = Some(thread);
                }
                Err(e) => tracing::debug!("no log remover thread ({e}); deleting in place"),
            }
        }
        match &self.tx {
            // A send fails only if the thread is gone (it never ends while `tx` lives, short
            // of a panic): the path comes back and is deleted here.
            Some(tx) => {
                if let Err(e) = tx.send(path) {
                    remove_segment(&e.0);
                }
            }
            None => remove_segment(&path),
        }
    }
}

impl Drop for Remover {
    /// Waits for the deletions asked for, so a finished log is within its cap.
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn remove_segment(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("cannot delete the old log segment {}: {e}", path.display()),
    }
}

impl LogWriter {
    /// Starts a log in `dir` (created if needed) with `max_bytes` kept on disk.
    pub fn create(dir: &Path, max_bytes: u64) -> Result<Self, ProcError> {
        std::fs::create_dir_all(dir).map_err(|e| ProcError::io(dir, e))?;
        let segment_max = (max_bytes / 4).max(MIN_SEGMENT);
        let path = dir.join(segment_name(0));
        let file = File::create(&path).map_err(|e| ProcError::io(&path, e))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            max_bytes: max_bytes.max(segment_max),
            segment_max,
            segments: VecDeque::from([0]),
            file,
            offset: 0,
            remover: Remover::default(),
        })
    }

    /// Bytes written so far: the end offset of the log.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Appends `bytes`, split at segment boundaries: no segment grows past its size, however
    /// large one read of the output was, so the segments kept always fit in the cap.
    pub fn write(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            let current = self.segments.back().copied().unwrap_or(0);
            let used = self.offset - current;
            if used >= self.segment_max {
                self.rotate()?;
                continue;
            }
            let room = usize::try_from(self.segment_max - used).unwrap_or(usize::MAX);
            let (now, rest) = bytes.split_at(room.min(bytes.len()));
            self.file.write_all(now)?;
            self.offset += now.len() as u64;
            bytes = rest;
        }
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let start = self.offset;
        self.file = File::create(self.dir.join(segment_name(start)))?;
        self.segments.push_back(start);
        // Keep what fits in the cap once the new segment is full.
        while self.segments.len() > 1
            && start + self.segment_max - self.segments.front().copied().unwrap_or(start)
                > self.max_bytes
        {
            if let Some(old) = self.segments.pop_front() {
                self.remover.remove(self.dir.join(segment_name(old)));
            }
        }
        Ok(())
    }
}

/// A slice of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSlice {
    pub data: Vec<u8>,
    /// Offset of `data[0]`: the offset asked for, or later when that part was rotated away.
    pub start: u64,
    /// The log's end offset when it was read.
    pub total: u64,
}

impl LogSlice {
    /// Offset just past `data`.
    pub fn end(&self) -> u64 {
        self.start + self.data.len() as u64
    }
}

/// The segments on disk, oldest first, with their start offsets.
fn segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, ProcError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ProcError::io(dir, e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| ProcError::io(dir, e))?;
        if let Some(start) = entry
            .file_name()
            .to_str()
            .filter(|n| n.len() == 20)
            .and_then(|n| n.parse::<u64>().ok())
        {
            out.push((start, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Reads up to `limit` bytes from `offset` (blocking file I/O: call it off the runtime).
pub fn read_range(dir: &Path, offset: u64, limit: usize) -> Result<LogSlice, ProcError> {
    // A segment can be deleted between the listing and the open; the listing is then taken
    // again (the writer only deletes old segments, so a second try finds the rest).
    let mut last_err = None;
    for _ in 0..3 {
        match try_read_range(dir, offset, limit) {
            Ok(slice) => return Ok(slice),
            Err(ReadErr::Rotated(e)) => last_err = Some(e),
            Err(ReadErr::Other(e)) => return Err(e),
        }
    }
    Err(last_err.unwrap_or_else(|| ProcError::Protocol("log rotated while reading".into())))
}

enum ReadErr {
    Rotated(ProcError),
    Other(ProcError),
}

fn try_read_range(dir: &Path, offset: u64, limit: usize) -> Result<LogSlice, ReadErr> {
    let segs = segments(dir).map_err(ReadErr::Other)?;
    let Some((last_start, last_path)) = segs.last() else {
        return Ok(LogSlice {
            data: Vec::new(),
            start: offset,
            total: 0,
        });
    };
    let last_len = std::fs::metadata(last_path)
        .map_err(|e| ReadErr::Rotated(ProcError::io(last_path, e)))?
        .len();
    let total = last_start + last_len;
    let first_start = segs.first().map(|s| s.0).unwrap_or(0);
    let start = offset.clamp(first_start, total);
    let mut data = Vec::with_capacity(limit.min((total - start) as usize));
    let mut pos = start;
    for (i, (seg_start, path)) in segs.iter().enumerate() {
        let seg_end = segs.get(i + 1).map(|s| s.0).unwrap_or(total);
        if seg_end <= pos || data.len() >= limit {
            continue;
        }
        let mut f = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ReadErr::Rotated(ProcError::io(path, e)));
            }
            Err(e) => return Err(ReadErr::Other(ProcError::io(path, e))),
        };
        let want = ((seg_end - pos) as usize).min(limit - data.len());
        let io = |e| ReadErr::Other(ProcError::io(path, e));
        f.seek(SeekFrom::Start(pos - seg_start)).map_err(io)?;
        let got = f.take(want as u64).read_to_end(&mut data).map_err(io)?;
        pos += got as u64;
        if got < want {
            break;
        }
    }
    Ok(LogSlice { data, start, total })
}

/// The log's end offset (blocking file I/O).
pub fn total(dir: &Path) -> Result<u64, ProcError> {
    Ok(read_range(dir, u64::MAX, 0)?.total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_across_segments_and_rotation_keeps_the_cap() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("log");
        let mut w = LogWriter::create(&dir, 64 * 1024).unwrap();
        // 16 KiB segments: 1,000 lines of 100 bytes go through several of them.
        let mut all = Vec::new();
        for i in 0..1000 {
            let line = format!("{i:099}\n");
            w.write(line.as_bytes()).unwrap();
            all.extend_from_slice(line.as_bytes());
        }
        assert_eq!(w.offset(), 100_000);
        // Dropping the writer waits for the deletions still running.
        drop(w);
        let segs = segments(&dir).unwrap();
        let on_disk: u64 = segs
            .iter()
            .map(|(_, p)| std::fs::metadata(p).unwrap().len())
            .sum();
        assert!(on_disk <= 64 * 1024, "{on_disk}");
        assert!(segs.len() >= 3);

        // The start was rotated away: the read begins at the oldest byte kept.
        let s = read_range(&dir, 0, 1_000_000).unwrap();
        assert_eq!(s.total, 100_000);
        assert_eq!(s.start, segs[0].0);
        assert_eq!(s.data, &all[s.start as usize..]);
        // A read across a segment boundary.
        let b = segs[1].0;
        let s = read_range(&dir, b - 50, 100).unwrap();
        assert_eq!(s.start, b - 50);
        assert_eq!(s.data, &all[(b - 50) as usize..(b + 50) as usize]);
        // Past the end: nothing, at the end.
        let s = read_range(&dir, 200_000, 10).unwrap();
        assert_eq!((s.start, s.data.len(), s.end()), (100_000, 0, 100_000));
        assert_eq!(total(&dir).unwrap(), 100_000);
    }

    /// One read of the output can be larger than a segment (a busy pipe fills 64 KiB):
    /// it is split, so the cap holds and every byte stays readable in order.
    #[test]
    fn writes_larger_than_a_segment_are_split_and_the_cap_holds() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("log");
        let mut w = LogWriter::create(&dir, 64 * 1024).unwrap();
        let all: Vec<u8> = (0..600_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        for chunk in all.chunks(65_536 + 17) {
            w.write(chunk).unwrap();
        }
        drop(w);
        let segs = segments(&dir).unwrap();
        for (_, p) in &segs {
            assert!(std::fs::metadata(p).unwrap().len() <= 16 * 1024);
        }
        let on_disk: u64 = segs
            .iter()
            .map(|(_, p)| std::fs::metadata(p).unwrap().len())
            .sum();
        assert!(on_disk <= 64 * 1024, "{on_disk}");
        let s = read_range(&dir, 0, 1 << 20).unwrap();
        assert_eq!(s.total, 600_000);
        assert_eq!(s.data, &all[s.start as usize..]);
    }

    #[test]
    fn empty_and_missing_logs_read_as_empty() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(total(&d.path().join("nope")).unwrap(), 0);
        let _w = LogWriter::create(&d.path().join("log"), 1 << 20).unwrap();
        let s = read_range(&d.path().join("log"), 0, 10).unwrap();
        assert_eq!((s.start, s.total, s.data.len()), (0, 0, 0));
    }
}
