//! The output log: the child's whole output on disk, in segments, under a size cap.
//!
//! Flow: the supervisor's pump hands every chunk it reads to [`LogWriter::write`] (on its
//! writing thread), which appends it to the current segment; a full segment (a quarter of
//! the cap) is closed and a new one started. Each segment is named by the absolute offset of
//! its first byte (20 digits), so an offset means the same byte for ever and readers need no
//! index. Once the log is at its cap, a rotation **reuses** the oldest segment: it is renamed
//! to the new segment's name and overwritten from its start. Its pages stay in the page cache
//! and are written over, instead of being freed and new ones allocated — that freeing cost
//! more than the copy itself (`docs/benchmarks.md`, issue 6). A reused file is longer than
//! what was written into it, so from the first reuse on the log keeps an end marker: the file
//! `end`, 8 bytes holding the log's end offset, which the writer maps and moves with an
//! atomic store after every write and before every rename (so it never runs ahead of the
//! data, costs no system call, and a reader, mapping it too, never sees half a number).
//! Segments beyond what one reuse frees are deleted on a helper thread (`Remover`), and so
//! are all rotated-out segments where the marker cannot be made (a file system without
//! shared mappings). When the writer is dropped the current segment is cut to its real
//! length.
//!
//! [`read_range`] serves `log` and `poll`: bytes `[offset, offset + limit)` across segments,
//! moved forward when the start was rotated away. It lists the segments, then takes the end
//! (the marker, bounded by the last segment's size), reads, and after each segment checks that
//! its name still leads to the file it read: if the file was renamed for reuse meanwhile, what
//! was read may be newer output, so the read starts over.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::thread::JoinHandle;

use crate::ProcError;

/// Smallest segment, so a tiny cap does not mean a file per write.
const MIN_SEGMENT: u64 = 16 * 1024;
/// The end marker's name (segments' names are 20 digits).
const END_MARKER: &str = "end";
/// Where the marker is made before it is renamed into place, whole.
const END_MARKER_NEW: &str = "end.new";
/// How often a read starts over when rotation keeps overtaking it.
const READ_TRIES: usize = 8;

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
    /// The end marker, from the first reuse on.
    end: Option<EndMarker>,
    /// Whether the current segment's file is a reused one, longer than what it holds.
    reused: bool,
    /// Whether rotation may reuse segments: false once the end marker could not be made (a
    /// file system without shared mappings); rotation then deletes, as before reuse.
    reuse: bool,
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
        crate::layout::private_dir_all(dir).map_err(|e| ProcError::io(dir, e))?;
        let segment_max = (max_bytes / 4).max(MIN_SEGMENT);
        let path = dir.join(segment_name(0));
        let file = crate::layout::private_file(&path).map_err(|e| ProcError::io(&path, e))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            max_bytes: max_bytes.max(segment_max),
            segment_max,
            segments: VecDeque::from([0]),
            file,
            offset: 0,
            end: None,
            reused: false,
            reuse: true,
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
        self.mark_end()
    }

    /// Whether the end marker is there to bound a reused segment, making it at the first
    /// reuse; if it cannot be made, reuse is off for good (with a warning) and rotation
    /// deletes instead.
    fn marker_ready(&mut self) -> bool {
        if self.end.is_some() {
            return true;
        }
        if !self.reuse {
            return false;
        }
        match EndMarker::create(&self.dir, self.offset) {
            Ok(end) => {
                self.end = Some(end);
                true
            }
            Err(e) => {
                tracing::warn!(
                    "cannot make the log's end marker ({e}); rotated segments will be deleted, not reused"
                );
                self.reuse = false;
                false
            }
        }
    }

    /// Moves the end marker, if there is one, to the end of what is written.
    fn mark_end(&self) -> std::io::Result<()> {
        if let Some(end) = &self.end {
            end.set(self.offset);
        }
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let start = self.offset;
        let path = self.dir.join(segment_name(start));
        // Whether the segment starting at `first` falls outside the cap once the new one is
        // full.
        let (seg, max) = (self.segment_max, self.max_bytes);
        let outside = move |first: u64| start + seg - first > max;
        match self.segments.front().copied() {
            Some(oldest) if outside(oldest) && self.marker_ready() => {
                // Before the rename: a reader that finds the new name must find the marker
                // at its start, so none of the old bytes in it count yet.
                self.mark_end()?;
                std::fs::rename(self.dir.join(segment_name(oldest)), &path)?;
                self.segments.pop_front();
                // Written over from its start; its old length stays until the writer is
                // dropped.
                self.file = File::options().write(true).open(&path)?;
                self.reused = true;
            }
            _ => {
                self.mark_end()?;
                self.file = crate::layout::private_file(&path)?;
                self.reused = false;
            }
        }
        self.segments.push_back(start);
        // A cap lowered since the segments were written (or a first segment larger than the
        // rest) can leave more outside it than one reuse takes.
        while self.segments.len() > 1 && self.segments.front().is_some_and(|&f| outside(f)) {
            if let Some(old) = self.segments.pop_front() {
                self.remover.remove(self.dir.join(segment_name(old)));
            }
        }
        Ok(())
    }
}

impl Drop for LogWriter {
    /// Cuts a reused segment to what it holds, so the files on disk say the log's length
    /// again and the old bytes past it are freed.
    fn drop(&mut self) {
        if self.reused {
            let current = self.segments.back().copied().unwrap_or(0);
            if let Err(e) = self.file.set_len(self.offset - current) {
                tracing::warn!("cannot cut the last log segment to its length: {e}");
            }
        }
    }
}

/// The end marker's 8 bytes, mapped shared: the log's end offset, read and written as one
/// atomic value by the writer and by readers in other processes.
struct EndMarker {
    ptr: std::ptr::NonNull<std::ffi::c_void>,
}

// SAFETY: the mapping belongs to the process, not to a thread, and is only used through
// `AtomicU64`, which any thread may use.
unsafe impl Send for EndMarker {}

/// The marker's length (one u64).
const END_LEN: std::num::NonZeroUsize = std::num::NonZeroUsize::MIN.saturating_add(7);

impl EndMarker {
    /// Makes the marker at `value` and puts it in place: built under another name and
    /// renamed, so a reader never finds it shorter than 8 bytes or not yet set.
    fn create(dir: &Path, value: u64) -> std::io::Result<Self> {
        let new = dir.join(END_MARKER_NEW);
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&new)?;
        file.set_len(END_LEN.get() as u64)?;
        let marker = Self::map(&file, true)?;
        marker.set(value);
        std::fs::rename(&new, dir.join(END_MARKER))?;
        Ok(marker)
    }

    /// Reads the marker in `dir`: `None` when the log has none (no segment was reused).
    fn read(dir: &Path) -> std::io::Result<Option<u64>> {
        let file = match File::open(dir.join(END_MARKER)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        // Never shorter once in place; checked all the same, as a mapping past the end of a
        // file faults.
        if file.metadata()?.len() < END_LEN.get() as u64 {
            return Ok(None);
        }
        Ok(Some(Self::map(&file, false)?.get()))
    }

    fn map(file: &File, write: bool) -> std::io::Result<Self> {
        use nix::sys::mman::{MapFlags, ProtFlags, mmap};
        let prot = if write {
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE
        } else {
            ProtFlags::PROT_READ
        };
        // SAFETY: a fresh shared mapping of a file at least `END_LEN` long (checked by both
        // callers), used only as one page-aligned `AtomicU64`; it aliases no Rust object.
        let ptr = unsafe { mmap(None, END_LEN, prot, MapFlags::MAP_SHARED, file, 0) }
            .map_err(std::io::Error::from)?;
        Ok(Self { ptr })
    }

    fn atomic(&self) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: the mapping is live while `self` is, page-aligned (so aligned for a u64)
        // and 8 bytes long; everyone who touches those bytes does so atomically. A load
        // from a read-only mapping is a plain load on 64-bit targets.
        unsafe { &*self.ptr.as_ptr().cast::<std::sync::atomic::AtomicU64>() }
    }

    fn set(&self, value: u64) {
        self.atomic()
            .store(value, std::sync::atomic::Ordering::Release);
    }

    fn get(&self) -> u64 {
        self.atomic().load(std::sync::atomic::Ordering::Acquire)
    }
}

impl Drop for EndMarker {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; no reference to it outlives
        // `self`.
        if let Err(e) = unsafe { nix::sys::mman::munmap(self.ptr, END_LEN.get()) } {
            tracing::debug!("cannot unmap the log's end marker: {e}");
        }
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

/// The segments on disk, oldest first, with their start offsets (beside them may be the
/// 8-byte end marker, which is not a segment).
pub fn segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, ProcError> {
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
    // A segment can be deleted or reused between the listing and the read; the read then
    // starts over. The writer only takes the oldest segments, so from the third try on the
    // read starts one segment later each time: a reader slower than the rotations still
    // gets the newest output (its slice says where it starts).
    let mut last_err = None;
    for attempt in 0..READ_TRIES {
        match try_read_range(dir, offset, limit, attempt.saturating_sub(1)) {
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

/// A missing file means rotation got there first; anything else is an error.
fn rotated_or_other(path: &Path, e: std::io::Error) -> ReadErr {
    if e.kind() == std::io::ErrorKind::NotFound {
        ReadErr::Rotated(ProcError::io(path, e))
    } else {
        ReadErr::Other(ProcError::io(path, e))
    }
}

/// One try of [`read_range`], starting no earlier than the `skip`-th segment listed.
fn try_read_range(dir: &Path, offset: u64, limit: usize, skip: usize) -> Result<LogSlice, ReadErr> {
    let segs = segments(dir).map_err(ReadErr::Other)?;
    let Some((last_start, last_path)) = segs.last() else {
        return Ok(LogSlice {
            data: Vec::new(),
            start: offset,
            total: 0,
        });
    };
    let last_len = std::fs::metadata(last_path)
        .map_err(|e| rotated_or_other(last_path, e))?
        .len();
    // Read after the listing: the marker is moved before every rename, so it is at least
    // the start of every segment listed, and the last one holds data up to it.
    let total = match EndMarker::read(dir) {
        Ok(Some(end)) => end.clamp(*last_start, last_start + last_len),
        Ok(None) => last_start + last_len,
        Err(e) => return Err(ReadErr::Other(ProcError::io(dir.join(END_MARKER), e))),
    };
    let first_start = segs[skip.min(segs.len() - 1)].0;
    let start = offset.clamp(first_start, total);
    let mut data = Vec::with_capacity(limit.min((total - start) as usize));
    let mut pos = start;
    for (i, (seg_start, path)) in segs.iter().enumerate() {
        let seg_end = segs.get(i + 1).map(|s| s.0).unwrap_or(total).min(total);
        if seg_end <= pos || data.len() >= limit {
            continue;
        }
        let f = File::open(path).map_err(|e| rotated_or_other(path, e))?;
        let want = ((seg_end - pos) as usize).min(limit - data.len());
        let got = read_segment(f, path, pos - seg_start, want, &mut data)?;
        pos += got as u64;
        if got < want {
            break;
        }
    }
    Ok(LogSlice { data, start, total })
}

/// Appends up to `want` bytes of segment file `f` (opened from `path`) from `at` to `data`,
/// checking afterwards that `path` still names `f`: a segment renamed for reuse while it was
/// read may hold newer output already, and the read must start over.
fn read_segment(
    mut f: File,
    path: &Path,
    at: u64,
    want: usize,
    data: &mut Vec<u8>,
) -> Result<usize, ReadErr> {
    let io = |e| ReadErr::Other(ProcError::io(path, e));
    let before = data.len();
    f.seek(SeekFrom::Start(at)).map_err(io)?;
    let got = (&mut f).take(want as u64).read_to_end(data).map_err(io)?;
    let read = f.metadata().map_err(io)?;
    let same = match std::fs::metadata(path) {
        Ok(now) => (read.dev(), read.ino()) == (now.dev(), now.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(io(e)),
    };
    if !same {
        data.truncate(before);
        return Err(ReadErr::Rotated(ProcError::Protocol(format!(
            "{} was reused while it was read",
            path.display()
        ))));
    }
    Ok(got)
}

/// The bytes the log's segments hold on disk: what the cap bounds (blocking file I/O).
pub fn on_disk(dir: &Path) -> Result<u64, ProcError> {
    let mut sum = 0;
    for (_, path) in segments(dir)? {
        sum += std::fs::metadata(&path)
            .map_err(|e| ProcError::io(&path, e))?
            .len();
    }
    Ok(sum)
}

/// The log's end offset (blocking file I/O).
pub fn total(dir: &Path) -> Result<u64, ProcError> {
    Ok(read_range(dir, u64::MAX, 0)?.total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log with a 64 KiB cap (16 KiB segments) that 1,000 lines of 100 bytes went through;
    /// the lines.
    fn thousand_lines(dir: &Path) -> (LogWriter, Vec<u8>) {
        thousand_lines_into(LogWriter::create(dir, 64 * 1024).unwrap())
    }

    fn thousand_lines_into(mut w: LogWriter) -> (LogWriter, Vec<u8>) {
        let mut all = Vec::new();
        for i in 0..1000 {
            let line = format!("{i:099}\n");
            w.write(line.as_bytes()).unwrap();
            all.extend_from_slice(line.as_bytes());
        }
        (w, all)
    }

    #[test]
    fn reads_across_segments_and_rotation_keeps_the_cap() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("log");
        let (w, all) = thousand_lines(&dir);
        assert_eq!(w.offset(), 100_000);
        // Dropping the writer waits for the deletions still running.
        drop(w);
        let segs = segments(&dir).unwrap();
        let on_disk = on_disk(&dir).unwrap();
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
        let on_disk = on_disk(&dir).unwrap();
        assert!(on_disk <= 64 * 1024, "{on_disk}");
        let s = read_range(&dir, 0, 1 << 20).unwrap();
        assert_eq!(s.total, 600_000);
        assert_eq!(s.data, &all[s.start as usize..]);
    }

    /// At the cap, rotation writes over the oldest segment instead of deleting it: the file
    /// is longer than what it holds until the writer is dropped, and readers see only what
    /// was written (the end marker), never the old bytes past it.
    #[test]
    fn a_reused_segment_reads_only_what_was_written_into_it() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("log");
        let (w, all) = thousand_lines(&dir);
        let segs = segments(&dir).unwrap();
        assert_eq!(segs.len(), 4, "{segs:?}");
        let (last_start, last_path) = segs.last().unwrap().clone();
        let held = 100_000 - last_start;
        // The scenario: a reused file, with old bytes past what it holds.
        assert!(std::fs::metadata(&last_path).unwrap().len() > held);
        assert_eq!(EndMarker::read(&dir).unwrap(), Some(100_000));
        assert_eq!(std::fs::metadata(dir.join(END_MARKER)).unwrap().len(), 8);

        let s = read_range(&dir, 0, 1_000_000).unwrap();
        assert_eq!((s.start, s.total), (segs[0].0, 100_000));
        assert_eq!(s.data, &all[s.start as usize..]);
        let s = read_range(&dir, last_start, 1_000_000).unwrap();
        assert_eq!(s.data, &all[last_start as usize..]);

        drop(w);
        assert_eq!(std::fs::metadata(&last_path).unwrap().len(), held);
        let on_disk = on_disk(&dir).unwrap();
        assert!(on_disk <= 64 * 1024, "{on_disk}");
        let s = read_range(&dir, 0, 1_000_000).unwrap();
        assert_eq!(s.data, &all[segs[0].0 as usize..]);
    }

    /// Where the end marker cannot be made, rotation deletes the oldest segment instead of
    /// reusing it: the cap holds, there is no marker, and every read is right.
    #[test]
    fn without_reuse_rotation_deletes_and_reads_stay_right() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("log");
        let mut w = LogWriter::create(&dir, 64 * 1024).unwrap();
        w.reuse = false;
        let (w, all) = thousand_lines_into(w);
        drop(w);
        assert!(!dir.join(END_MARKER).exists());
        let segs = segments(&dir).unwrap();
        assert_eq!(segs.len(), 4, "{segs:?}");
        assert!(on_disk(&dir).unwrap() <= 64 * 1024);
        let s = read_range(&dir, 0, 1_000_000).unwrap();
        assert_eq!((s.start, s.total), (segs[0].0, 100_000));
        assert_eq!(s.data, &all[s.start as usize..]);
    }

    /// The race the check is for, made certain: a segment opened for reading, then reused
    /// (renamed and written over) before the read. The read must not return the new bytes.
    #[test]
    fn a_segment_reused_between_open_and_read_is_read_again() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("log");
        let mut w = LogWriter::create(&dir, 64 * 1024).unwrap();
        w.write(&[b'a'; 64 * 1024]).unwrap();
        let (oldest, path) = segments(&dir).unwrap()[0].clone();
        assert_eq!(oldest, 0);
        let f = File::open(&path).unwrap();
        // The next segment reuses the oldest's file.
        w.write(&[b'b'; 100]).unwrap();
        assert!(!path.exists());
        let mut data = Vec::new();
        match read_segment(f, &path, 0, 100, &mut data) {
            Err(ReadErr::Rotated(_)) => {}
            Err(ReadErr::Other(e)) => panic!("{e}"),
            Ok(n) => panic!("read {n} bytes of a reused segment: {:?}", &data[..10]),
        }
        assert!(data.is_empty());
        // Read again from the start: moved forward to the oldest segment kept.
        let s = read_range(&dir, 0, 1 << 20).unwrap();
        assert_eq!((s.start, s.total), (16 * 1024, 64 * 1024 + 100));
        assert!(s.data[..48 * 1024].iter().all(|&b| b == b'a'));
        assert!(s.data[48 * 1024..].iter().all(|&b| b == b'b'));
    }

    /// A reader racing a writer that reuses segments a few thousand times: every byte it gets
    /// is the one written at that offset (the bytes follow the offset, so a segment read after
    /// it was renamed and written over shows).
    #[test]
    fn readers_racing_reuse_never_get_newer_bytes_for_an_old_offset() {
        let pattern = |o: u64| (o % 251) as u8;
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("log");
        let mut w = LogWriter::create(&dir, 64 * 1024).unwrap();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (dir, done) = (dir.clone(), done.clone());
            std::thread::spawn(move || {
                let (mut reads, mut pos) = (0u64, 0u64);
                while !done.load(std::sync::atomic::Ordering::Acquire) {
                    // A reader descheduled long enough (a loaded machine) can be lapped on
                    // every try and get an error: never wrong bytes, which is the point.
                    let s = match read_range(&dir, pos, 40_000) {
                        Ok(s) => s,
                        Err(ProcError::Protocol(m)) if m.contains("reused") => continue,
                        Err(ProcError::Io { source, .. })
                            if source.kind() == std::io::ErrorKind::NotFound =>
                        {
                            continue;
                        }
                        Err(e) => panic!("{e}"),
                    };
                    for (i, b) in s.data.iter().enumerate() {
                        let o = s.start + i as u64;
                        assert_eq!(*b, pattern(o), "byte at offset {o} of a read from {pos}");
                    }
                    reads += 1;
                    // Follow the output, falling behind now and then so reads land in the
                    // oldest segments, the ones being reused.
                    pos = if reads % 2 == 0 { 0 } else { s.end() };
                }
                reads
            })
        };
        // Chunks of the pattern are slices of one buffer, so the writer rotates as fast as
        // it can write.
        let source: Vec<u8> = (0..251 + 10_000).map(pattern).collect();
        let mut offset = 0u64;
        let mut n = 1usize;
        while offset < 100_000_000 {
            n = n * 7 % 9_973 + 1;
            let phase = (offset % 251) as usize;
            w.write(&source[phase..phase + n]).unwrap();
            offset += n as u64;
        }
        done.store(true, std::sync::atomic::Ordering::Release);
        let reads = reader.join().unwrap();
        assert!(reads > 100, "only {reads} reads");
        drop(w);
        let s = read_range(&dir, 0, 1 << 20).unwrap();
        assert_eq!(s.total, offset);
        assert!(
            s.data
                .iter()
                .enumerate()
                .all(|(i, b)| *b == pattern(s.start + i as u64))
        );
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
