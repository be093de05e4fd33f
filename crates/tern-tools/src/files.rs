//! The `file` toolset: `read_file`, `write_file`, `patch_file` and `list_dir`.
//!
//! Every path argument is resolved with [`ToolContext::resolve`] (relative to the working
//! directory; absolute paths are allowed) and echoed back to the model as it was given.
//! Filesystem work runs off the async runtime's threads: under a sandboxing policy on a
//! thread of its own, confined by the same Landlock rules as the agent's commands (so the
//! kernel, not a path check, decides what a symlink or `..` may reach, and `$TERN_HOME` is
//! out of reach); without one on tokio's blocking pool.
//! Writes are atomic: the new text goes to a temporary file in the target's directory which
//! is then renamed over the target, so a reader never sees a half-written file.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::{FnTool, Tool, ToolContext, ToolError, ToolResult, ToolSpec};

const TOOLSET: &str = "file";

/// Lines `read_file` returns when the model gives no `limit`.
const DEFAULT_READ_LINES: u64 = 2000;
/// Entries `list_dir` returns when the model gives no `max_entries`.
const DEFAULT_LIST_ENTRIES: u64 = 500;
/// Largest `max_entries` the model may ask for.
const MAX_LIST_ENTRIES: u64 = 5000;
/// A NUL byte in this many leading bytes marks a file as binary.
const SNIFF_BYTES: usize = 8 * 1024;
/// Size of the reads `read_file` streams a file with.
const CHUNK_BYTES: usize = 64 * 1024;
/// Lines of each side shown in a `patch_file` diff before it is cut.
const DIFF_MAX_LINES: usize = 40;
/// Match lines listed in the "occurs N times" error before it is cut.
const MAX_LISTED_MATCHES: usize = 20;

/// The tools of the `file` toolset.
pub fn all() -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(FnTool::new(read_file_spec(), read_file)),
        Arc::new(FnTool::new(write_file_spec(), write_file)),
        Arc::new(FnTool::new(patch_file_spec(), patch_file)),
        Arc::new(FnTool::new(list_dir_spec(), list_dir)),
    ]
}

// ---------------------------------------------------------------------------------------
// read_file
// ---------------------------------------------------------------------------------------

/// `read_file`: numbered lines of a UTF-8 text file, a window at a time.
fn read_file_spec() -> ToolSpec {
    ToolSpec {
        name: "read_file",
        toolset: TOOLSET,
        description: "Read a UTF-8 text file. Returns its lines numbered like `cat -n` \
            (line number right-aligned to 6 characters, a tab, then the line); the numbers \
            and the tab are not part of the file, so never copy them into patch_file. \
            Returns up to `limit` lines (default 2000) starting at line `offset` (1-based, \
            default 1). When `truncated` is true, more lines follow: call again with the \
            offset given in `note`. Binary files are refused. Relative paths are resolved \
            against the working directory. Prefer this tool over `cat` in the terminal.",
        parameters: json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "File to read, relative to the working directory or absolute."
                },
                "offset": {
                    "type": "integer",
                    "minimum": 1,
                    "default": 1,
                    "description": "1-based number of the first line to return."
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "default": DEFAULT_READ_LINES,
                    "description": "Maximum number of lines to return."
                }
            },
            "required": ["path"],
            "additionalProperties": false
        }),
    }
}

async fn read_file(args: Value, ctx: ToolContext) -> ToolResult {
    check_cancel(&ctx)?;
    let shown = str_arg(&args, "path")?.to_owned();
    let offset = to_usize(uint_arg(&args, "offset", 1)?.max(1));
    let limit = to_usize(uint_arg(&args, "limit", DEFAULT_READ_LINES)?.max(1));
    let cap = ctx.limits.read_limit_bytes;
    let path = ctx.resolve(&shown);

    let meta = tokio::fs::metadata(&path)
        .await
        .map_err(|e| io_error("read", &shown, &ctx, &e))?;
    if meta.is_dir() {
        return Err(ToolError::new(format!(
            "is a directory: {shown}; use list_dir to see what it contains"
        )));
    }
    if !meta.is_file() {
        return Err(ToolError::new(format!(
            "not a regular file: {shown} (a device, socket or pipe cannot be read)"
        )));
    }

    let cancel = ctx.cancel.clone();
    let window = Window { offset, limit, cap };
    let scan = run_blocking(&ctx, move || scan_text_file(&path, window, &cancel))
        .await?
        .map_err(|e| fs_error("read", &shown, &ctx, e))?;

    let total = scan.total_lines;
    if total == 0 {
        return Ok(json!({
            "path": shown,
            "content": "",
            "total_lines": 0,
            "start_line": 0,
            "end_line": 0,
            "truncated": false,
            "note": "the file is empty",
        }));
    }
    if offset > total {
        return Err(ToolError::new(format!(
            "offset {offset} is past the end of {shown}, which has {total} lines"
        )));
    }

    let end = scan.end_line;
    let truncated = end < total || scan.cut_line.is_some();
    let mut result = json!({
        "path": shown,
        "content": scan.content,
        "total_lines": total,
        "start_line": offset,
        "end_line": end,
        "truncated": truncated,
    });
    let more = if end < total {
        format!("; call again with offset={} to read more", end + 1)
    } else {
        String::new()
    };
    let note = if let Some(line) = scan.cut_line {
        Some(format!(
            "line {line} is longer than the {cap}-byte read limit and was cut; \
             showing lines {offset}-{end} of {total}{more}"
        ))
    } else if scan.byte_capped && end < total {
        Some(format!(
            "output reached the {cap}-byte read limit; showing lines {offset}-{end} of {total}{more}"
        ))
    } else if end < total {
        Some(format!("showing lines {offset}-{end} of {total}{more}"))
    } else {
        None
    };
    if let (Some(note), Some(obj)) = (note, result.as_object_mut()) {
        obj.insert("note".into(), Value::String(note));
    }
    Ok(result)
}

/// Which lines `read_file` wants and how many bytes of output it may return.
#[derive(Debug, Clone, Copy)]
struct Window {
    offset: usize,
    limit: usize,
    cap: usize,
}

/// What a streaming pass over a file found.
#[derive(Debug, Default)]
struct Scan {
    /// The numbered lines of the window.
    content: String,
    total_lines: usize,
    /// Last line (fully or partly) in `content`; 0 if none.
    end_line: usize,
    /// The byte cap stopped the window early.
    byte_capped: bool,
    /// A line that alone exceeded the byte cap and was cut.
    cut_line: Option<usize>,
}

/// Failures of the blocking filesystem helpers.
#[derive(Debug)]
enum FsError {
    Io(io::Error),
    Binary,
    Cancelled,
}

impl From<io::Error> for FsError {
    fn from(e: io::Error) -> Self {
        FsError::Io(e)
    }
}

/// Streams the file once: counts its lines, checks it is text, and keeps the numbered lines
/// of the window (at most `cap` bytes of them). Memory stays bounded whatever the file size.
fn scan_text_file(path: &Path, w: Window, cancel: &CancellationToken) -> Result<Scan, FsError> {
    let mut file = fs::File::open(path)?;
    let mut scanner = Scanner::new(w);
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        if cancel.is_cancelled() {
            return Err(FsError::Cancelled);
        }
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        scanner.feed(&buf[..n])?;
    }
    scanner.finish()
}

/// Line-splitting state of [`scan_text_file`].
struct Scanner {
    w: Window,
    /// Last line number the window wants.
    last_wanted: usize,
    /// Bytes of an incomplete UTF-8 sequence at the end of the previous chunk.
    utf8_carry: Vec<u8>,
    /// Leading bytes already checked for NUL.
    sniffed: usize,
    /// Number of the line being read.
    line_no: usize,
    /// The line being read has at least one byte.
    line_has_bytes: bool,
    /// Bytes of the line being read, if it is in the window (at most `cap + 1`).
    cur: Vec<u8>,
    /// Still adding lines to the output.
    collecting: bool,
    out: Scan,
}

impl Scanner {
    fn new(w: Window) -> Self {
        Self {
            w,
            last_wanted: w.offset.saturating_add(w.limit.saturating_sub(1)),
            utf8_carry: Vec::new(),
            sniffed: 0,
            line_no: 1,
            line_has_bytes: false,
            cur: Vec::new(),
            collecting: true,
            out: Scan::default(),
        }
    }

    fn feed(&mut self, chunk: &[u8]) -> Result<(), FsError> {
        if self.sniffed < SNIFF_BYTES {
            let k = (SNIFF_BYTES - self.sniffed).min(chunk.len());
            if chunk[..k].contains(&0) {
                return Err(FsError::Binary);
            }
            self.sniffed += k;
        }
        validate_utf8_chunk(&mut self.utf8_carry, chunk)?;

        let mut rest = chunk;
        loop {
            let newline = rest.iter().position(|&b| b == b'\n');
            let seg = &rest[..newline.unwrap_or(rest.len())];
            if !seg.is_empty() {
                self.line_has_bytes = true;
            }
            if self.collecting && self.line_no >= self.w.offset {
                let room = (self.w.cap + 1).saturating_sub(self.cur.len());
                self.cur.extend_from_slice(&seg[..seg.len().min(room)]);
            }
            match newline {
                Some(i) => {
                    self.finish_line();
                    rest = &rest[i + 1..];
                }
                None => break,
            }
        }
        Ok(())
    }

    fn finish_line(&mut self) {
        let n = self.line_no;
        if self.collecting && n >= self.w.offset {
            let text = utf8_prefix(&self.cur);
            let text = text.strip_suffix('\r').unwrap_or(text);
            let prefix = format!("{n:>6}\t");
            let needed = prefix.len() + text.len() + 1;
            let content = &mut self.out.content;
            if content.len() + needed <= self.w.cap {
                content.push_str(&prefix);
                content.push_str(text);
                content.push('\n');
                self.out.end_line = n;
            } else if content.is_empty() {
                // A single line longer than the cap: show its head, or the model could
                // never get past it.
                let room = self.w.cap.saturating_sub(prefix.len() + 1);
                let cut = floor_char_boundary(text, room);
                content.push_str(&prefix);
                content.push_str(&text[..cut]);
                content.push('\n');
                self.out.end_line = n;
                self.out.cut_line = Some(n);
                self.out.byte_capped = true;
                self.collecting = false;
            } else {
                self.out.byte_capped = true;
                self.collecting = false;
            }
            if n >= self.last_wanted {
                self.collecting = false;
            }
        }
        self.cur.clear();
        self.line_no += 1;
        self.line_has_bytes = false;
    }

    fn finish(mut self) -> Result<Scan, FsError> {
        if !self.utf8_carry.is_empty() {
            return Err(FsError::Binary);
        }
        if self.line_has_bytes {
            self.finish_line();
        }
        self.out.total_lines = self.line_no - 1;
        Ok(self.out)
    }
}

/// Checks one chunk of a UTF-8 stream; an incomplete sequence at its end is kept in `carry`
/// and completed by the next chunk.
fn validate_utf8_chunk(carry: &mut Vec<u8>, chunk: &[u8]) -> Result<(), FsError> {
    let joined;
    let data: &[u8] = if carry.is_empty() {
        chunk
    } else {
        let mut v = std::mem::take(carry);
        v.extend_from_slice(chunk);
        joined = v;
        &joined
    };
    match std::str::from_utf8(data) {
        Ok(_) => {
            carry.clear();
            Ok(())
        }
        Err(e) if e.error_len().is_none() => {
            *carry = data[e.valid_up_to()..].to_vec();
            Ok(())
        }
        Err(_) => Err(FsError::Binary),
    }
}

/// The longest valid UTF-8 prefix of `bytes`.
fn utf8_prefix(bytes: &[u8]) -> &str {
    match std::str::from_utf8(bytes) {
        Ok(s) => s,
        // The prefix up to `valid_up_to` is valid by definition, so this never yields "".
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
    }
}

/// The largest char boundary of `s` that is `<= at`.
fn floor_char_boundary(s: &str, at: usize) -> usize {
    let mut i = at.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Decodes a whole file as text: `None` if it looks binary.
fn decode_text(bytes: Vec<u8>) -> Option<String> {
    let sniff = &bytes[..bytes.len().min(SNIFF_BYTES)];
    if sniff.contains(&0) {
        return None;
    }
    String::from_utf8(bytes).ok()
}

// ---------------------------------------------------------------------------------------
// write_file
// ---------------------------------------------------------------------------------------

/// `write_file`: creates or replaces a whole file, atomically.
fn write_file_spec() -> ToolSpec {
    ToolSpec {
        name: "write_file",
        toolset: TOOLSET,
        description: "Create a file, or replace an existing file's whole content, with \
            `content` (the complete text, written exactly as given). Missing parent \
            directories are created. The write is atomic and keeps an existing file's \
            permissions. To change part of an existing file, use patch_file instead: it \
            is cheaper and cannot lose the rest of the file.",
        parameters: json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "File to write, relative to the working directory or absolute."
                },
                "content": {
                    "type": "string",
                    "description": "The complete new content of the file."
                }
            },
            "required": ["path", "content"],
            "additionalProperties": false
        }),
    }
}

async fn write_file(args: Value, ctx: ToolContext) -> ToolResult {
    check_cancel(&ctx)?;
    let shown = str_arg(&args, "path")?.to_owned();
    let content = str_arg(&args, "content")?.to_owned();
    let path = ctx.resolve(&shown);
    let bytes = content.len();
    let created = run_blocking(&ctx, move || atomic_write(&path, content.as_bytes()))
        .await?
        .map_err(|e| io_error("write", &shown, &ctx, &e))?;
    Ok(json!({
        "path": shown,
        "bytes_written": bytes,
        "created": created,
    }))
}

/// Writes `data` to `path` through a temporary file in the same directory and a rename.
/// Creates missing parent directories, follows a symlink to its target (the link stays),
/// keeps an existing file's permissions. Returns whether the file was created.
///
/// Runs to completion even if the calling future is dropped (it lives on the blocking pool),
/// so no temporary file is left behind by an interrupted turn.
fn atomic_write(path: &Path, data: &[u8]) -> io::Result<bool> {
    // Write through symlinks rather than replacing them with a regular file.
    let target = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let existing = match fs::metadata(&target) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if let Some(meta) = &existing {
        if meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                "target is a directory",
            ));
        }
        if !meta.is_file() {
            return Err(io::Error::other(
                "target is not a regular file (a device, socket or pipe)",
            ));
        }
        if meta.permissions().readonly() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the file is read-only",
            ));
        }
    }
    let file_name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let dir = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&dir)?;

    let (tmp_path, mut file) = create_temp_file(&dir, &file_name)?;
    let written = (|| {
        file.write_all(data)?;
        if let Some(meta) = &existing {
            file.set_permissions(meta.permissions())?;
        }
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp_path, &target)
    })();
    if let Err(e) = written {
        // Best effort: the temporary file is ours and useless now.
        let _ = fs::remove_file(&tmp_path);
        return Err(e);
    }
    Ok(existing.is_none())
}

/// Creates a new, uniquely named hidden file in `dir` for an atomic write of `file_name`.
fn create_temp_file(dir: &Path, file_name: &str) -> io::Result<(PathBuf, fs::File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // Keep the name well under the usual 255-byte limit.
    let stem = &file_name[..floor_char_boundary(file_name, 100)];
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut last_err = None;
    for _ in 0..64 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!(".{stem}.tern-{}-{nanos:x}-{n}.tmp", std::process::id());
        let tmp = dir.join(name);
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_err.unwrap_or_else(|| io::Error::other("cannot create a temporary file")))
}

// ---------------------------------------------------------------------------------------
// patch_file
// ---------------------------------------------------------------------------------------

/// `patch_file`: exact-text replacement in an existing file.
fn patch_file_spec() -> ToolSpec {
    ToolSpec {
        name: "patch_file",
        toolset: TOOLSET,
        description: "Edit an existing file by replacing exact text. `old_string` must \
            match the file exactly, including indentation, blank lines and line breaks \
            (copy it from read_file output without the line-number prefix and tab), and \
            must occur exactly once unless `replace_all` is true; include a few \
            surrounding lines to make it unique. `new_string` replaces it (an empty \
            string deletes it). Read the file first. Returns the number of replacements, \
            the first changed line and a diff of the first change.",
        parameters: json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "File to edit, relative to the working directory or absolute."
                },
                "old_string": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Exact text to replace."
                },
                "new_string": {
                    "type": "string",
                    "description": "Replacement text; must differ from old_string."
                },
                "replace_all": {
                    "type": "boolean",
                    "default": false,
                    "description": "Replace every occurrence instead of requiring exactly one."
                }
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": false
        }),
    }
}

async fn patch_file(args: Value, ctx: ToolContext) -> ToolResult {
    check_cancel(&ctx)?;
    let shown = str_arg(&args, "path")?.to_owned();
    let old = str_arg(&args, "old_string")?;
    let new = str_arg(&args, "new_string")?;
    let replace_all = bool_arg(&args, "replace_all", false)?;
    if old.is_empty() {
        return Err(ToolError::new(
            "old_string is empty; give the exact text to replace (use write_file to create a file)",
        ));
    }
    if old == new {
        return Err(ToolError::new(
            "old_string and new_string are identical; nothing would change",
        ));
    }
    let path = ctx.resolve(&shown);

    let read_path = path.clone();
    let bytes = run_blocking(&ctx, move || fs::read(&read_path))
        .await?
        .map_err(|e| {
            let err = io_error("read", &shown, &ctx, &e);
            if e.kind() == io::ErrorKind::NotFound {
                ToolError::new(format!("{}; use write_file to create a new file", err.0))
            } else {
                err
            }
        })?;
    let content = decode_text(bytes).ok_or_else(|| binary_error(&shown))?;

    let (old, new) = match pick_needle(&content, old, new) {
        Some(pair) => pair,
        None => {
            let mut msg = format!(
                "old_string not found in {shown}; read the file again and copy the exact text, \
                 including whitespace"
            );
            if let Some(hint) = not_found_hint(&content, old) {
                msg.push_str(". ");
                msg.push_str(&hint);
            }
            return Err(ToolError::new(msg));
        }
    };

    let starts: Vec<usize> = content
        .match_indices(old.as_str())
        .map(|(i, _)| i)
        .collect();
    let count = starts.len();
    if count > 1 && !replace_all {
        let lines = line_numbers(&content, &starts);
        let mut listed: Vec<String> = lines
            .iter()
            .take(MAX_LISTED_MATCHES)
            .map(ToString::to_string)
            .collect();
        if lines.len() > MAX_LISTED_MATCHES {
            listed.push("…".into());
        }
        return Err(ToolError::new(format!(
            "old_string occurs {count} times in {shown} (lines {}); add surrounding context to \
             make it unique, or set replace_all to true to replace every occurrence",
            listed.join(", ")
        )));
    }
    // `pick_needle` found `old`, so there is at least one match.
    let first = starts[0];
    let (diff, first_changed_line) = diff_snippet(&content, first, &old, &new);
    let updated = if replace_all {
        content.replace(old.as_str(), &new)
    } else {
        content.replacen(old.as_str(), &new, 1)
    };

    check_cancel(&ctx)?;
    run_blocking(&ctx, move || atomic_write(&path, updated.as_bytes()))
        .await?
        .map_err(|e| io_error("write", &shown, &ctx, &e))?;

    let mut result = Map::new();
    result.insert("path".into(), Value::String(shown));
    result.insert("replacements".into(), json!(count));
    result.insert("first_changed_line".into(), json!(first_changed_line));
    result.insert("diff".into(), Value::String(diff));
    if count > 1 {
        result.insert(
            "note".into(),
            Value::String(format!(
                "replaced {count} occurrences; the diff shows the first (lines {})",
                line_numbers(&content, &starts)
                    .iter()
                    .take(MAX_LISTED_MATCHES)
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        );
    }
    Ok(Value::Object(result))
}

/// The old/new pair to apply: as given, or with `\n` turned into `\r\n` when the file uses
/// CRLF line endings and only that makes `old` match. `None` if `old` does not occur.
fn pick_needle(content: &str, old: &str, new: &str) -> Option<(String, String)> {
    if content.contains(old) {
        return Some((old.to_owned(), new.to_owned()));
    }
    if old.contains('\n') && !old.contains('\r') && content.contains("\r\n") {
        let crlf_old = old.replace('\n', "\r\n");
        if content.contains(crlf_old.as_str()) {
            let crlf_new = if new.contains('\r') {
                new.to_owned()
            } else {
                new.replace('\n', "\r\n")
            };
            return Some((crlf_old, crlf_new));
        }
    }
    None
}

/// 1-based line numbers of the given byte offsets (sorted ascending).
fn line_numbers(content: &str, starts: &[usize]) -> Vec<usize> {
    let bytes = content.as_bytes();
    let mut line = 1;
    let mut pos = 0;
    starts
        .iter()
        .map(|&s| {
            line += bytes[pos..s].iter().filter(|&&b| b == b'\n').count();
            pos = s;
            line
        })
        .collect()
}

/// Explains a miss: line-number prefixes copied from read_file, or a match that differs
/// only in whitespace.
fn not_found_hint(content: &str, old: &str) -> Option<String> {
    let non_empty: Vec<&str> = old.lines().filter(|l| !l.trim().is_empty()).collect();
    if !non_empty.is_empty() && non_empty.iter().all(|l| has_line_number_prefix(l)) {
        return Some(
            "old_string seems to include the line-number prefixes of read_file output; \
             remove them and keep only the file's text"
                .into(),
        );
    }

    let norm = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut old_lines: Vec<String> = old.lines().map(norm).collect();
    while old_lines.last().is_some_and(String::is_empty) {
        old_lines.pop();
    }
    let leading_empty = old_lines.iter().take_while(|l| l.is_empty()).count();
    old_lines.drain(..leading_empty);
    if old_lines.is_empty() {
        return None;
    }
    let file_lines: Vec<String> = content.lines().map(norm).collect();
    let k = old_lines.len();
    if file_lines.len() >= k {
        for i in 0..=file_lines.len() - k {
            let matches = (0..k).all(|j| {
                let f = &file_lines[i + j];
                let o = &old_lines[j];
                if k == 1 {
                    f.contains(o.as_str())
                } else if j == 0 {
                    f.ends_with(o.as_str())
                } else if j == k - 1 {
                    f.starts_with(o.as_str())
                } else {
                    f == o
                }
            });
            if matches {
                return Some(format!(
                    "Text matching except for whitespace (indentation, tabs vs spaces, spacing or \
                     line endings) starts at line {}; read those lines and copy them exactly",
                    i + 1
                ));
            }
        }
    }
    if norm(content).contains(&norm(old)) {
        return Some(
            "The text exists if whitespace is ignored (indentation, line breaks or blank lines \
             differ); read the file and copy the exact text"
                .into(),
        );
    }
    None
}

/// Whether a line looks like `   12\tcode` (read_file's numbering).
fn has_line_number_prefix(line: &str) -> bool {
    line.trim_start_matches(' ')
        .split_once('\t')
        .is_some_and(|(num, _)| !num.is_empty() && num.bytes().all(|b| b.is_ascii_digit()))
}

/// A small unified-style diff of replacing `old` at byte `at` by `new`, over the whole lines
/// involved, and the number of the first line that changes.
fn diff_snippet(content: &str, at: usize, old: &str, new: &str) -> (String, usize) {
    let region_start = content[..at].rfind('\n').map_or(0, |i| i + 1);
    let old_end = at + old.len();
    let region_end = content[old_end..]
        .find('\n')
        .map_or(content.len(), |i| old_end + i);
    let first_line = 1 + content.as_bytes()[..region_start]
        .iter()
        .filter(|&&b| b == b'\n')
        .count();

    let before = &content[region_start..region_end];
    let after = format!(
        "{}{}{}",
        &content[region_start..at],
        new,
        &content[old_end..region_end]
    );
    let clean = |l: &str| l.strip_suffix('\r').unwrap_or(l).to_owned();
    let old_lines: Vec<String> = before.split('\n').map(clean).collect();
    let new_lines: Vec<String> = after.split('\n').map(clean).collect();

    let common_prefix = old_lines
        .iter()
        .zip(&new_lines)
        .take_while(|(a, b)| a == b)
        .count();
    let max_suffix = old_lines.len().min(new_lines.len()) - common_prefix;
    let common_suffix = old_lines
        .iter()
        .rev()
        .zip(new_lines.iter().rev())
        .take(max_suffix)
        .take_while(|(a, b)| a == b)
        .count();

    let mut out = format!(
        "@@ -{first_line},{} +{first_line},{} @@\n",
        old_lines.len(),
        new_lines.len()
    );
    for l in &old_lines[..common_prefix] {
        out.push_str(&format!(" {l}\n"));
    }
    push_side(
        &mut out,
        '-',
        &old_lines[common_prefix..old_lines.len() - common_suffix],
    );
    push_side(
        &mut out,
        '+',
        &new_lines[common_prefix..new_lines.len() - common_suffix],
    );
    for l in &old_lines[old_lines.len() - common_suffix..] {
        out.push_str(&format!(" {l}\n"));
    }
    (out, first_line + common_prefix)
}

fn push_side(out: &mut String, mark: char, lines: &[String]) {
    for l in lines.iter().take(DIFF_MAX_LINES) {
        out.push(mark);
        out.push_str(l);
        out.push('\n');
    }
    if lines.len() > DIFF_MAX_LINES {
        out.push_str(&format!(
            "{mark}… ({} more lines)\n",
            lines.len() - DIFF_MAX_LINES
        ));
    }
}

// ---------------------------------------------------------------------------------------
// list_dir
// ---------------------------------------------------------------------------------------

/// `list_dir`: the entries of one directory.
fn list_dir_spec() -> ToolSpec {
    ToolSpec {
        name: "list_dir",
        toolset: TOOLSET,
        description: "List the entries of one directory (not recursive): name, type \
            (file, dir, symlink or other) and size in bytes for files. Directories come \
            first, then everything else, each sorted by name. Hidden entries (names \
            starting with '.') are skipped unless include_hidden is true. For recursive \
            searches use the terminal (`rg --files`, `find`).",
        parameters: json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "default": ".",
                    "description": "Directory to list, relative to the working directory or absolute."
                },
                "max_entries": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LIST_ENTRIES,
                    "default": DEFAULT_LIST_ENTRIES,
                    "description": "Maximum number of entries to return."
                },
                "include_hidden": {
                    "type": "boolean",
                    "default": false,
                    "description": "Also list entries whose names start with '.'."
                }
            },
            "additionalProperties": false
        }),
    }
}

async fn list_dir(args: Value, ctx: ToolContext) -> ToolResult {
    check_cancel(&ctx)?;
    let shown = opt_str_arg(&args, "path")?.unwrap_or(".").to_owned();
    let max =
        to_usize(uint_arg(&args, "max_entries", DEFAULT_LIST_ENTRIES)?.clamp(1, MAX_LIST_ENTRIES));
    let include_hidden = bool_arg(&args, "include_hidden", false)?;
    let path = ctx.resolve(&shown);

    let meta = tokio::fs::metadata(&path).await.map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            ToolError::new(format!("directory not found: {shown}"))
        } else {
            io_error("list", &shown, &ctx, &e)
        }
    })?;
    if !meta.is_dir() {
        return Err(ToolError::new(format!(
            "not a directory: {shown}; use read_file to read a file"
        )));
    }

    let cancel = ctx.cancel.clone();
    let listing = run_blocking(&ctx, move || {
        list_blocking(&path, include_hidden, max, &cancel)
    })
    .await?
    .map_err(|e| fs_error("list", &shown, &ctx, e))?;

    let truncated = listing.entries.len() < listing.total;
    let mut result = Map::new();
    result.insert("path".into(), Value::String(shown.clone()));
    result.insert("entries".into(), Value::Array(listing.entries));
    result.insert("total".into(), json!(listing.total));
    result.insert("truncated".into(), Value::Bool(truncated));
    if listing.hidden_skipped > 0 {
        result.insert("hidden_skipped".into(), json!(listing.hidden_skipped));
    }
    if truncated {
        result.insert(
            "note".into(),
            Value::String(format!(
                "showing {max} of {} entries; raise max_entries (up to {MAX_LIST_ENTRIES}) or \
                 list a subdirectory",
                listing.total
            )),
        );
    }
    Ok(Value::Object(result))
}

struct Listing {
    entries: Vec<Value>,
    /// Entries shown or not, hidden ones excluded unless asked for.
    total: usize,
    hidden_skipped: usize,
}

fn list_blocking(
    dir: &Path,
    include_hidden: bool,
    max: usize,
    cancel: &CancellationToken,
) -> Result<Listing, FsError> {
    let mut items: Vec<(bool, String, &'static str, fs::DirEntry)> = Vec::new();
    let mut hidden_skipped = 0;
    for (i, entry) in fs::read_dir(dir)?.enumerate() {
        if i % 256 == 0 && cancel.is_cancelled() {
            return Err(FsError::Cancelled);
        }
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !include_hidden && name.starts_with('.') {
            hidden_skipped += 1;
            continue;
        }
        // An entry that vanished or cannot be inspected is still listed, as "other".
        let kind = match entry.file_type() {
            Ok(t) if t.is_dir() => "dir",
            Ok(t) if t.is_file() => "file",
            Ok(t) if t.is_symlink() => "symlink",
            _ => "other",
        };
        items.push((kind != "dir", name, kind, entry));
    }
    let total = items.len();
    items.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    items.truncate(max);

    let entries = items
        .into_iter()
        .map(|(_, name, kind, entry)| {
            let mut obj = Map::new();
            obj.insert("name".into(), Value::String(name));
            obj.insert("type".into(), Value::String(kind.into()));
            match kind {
                "file" => {
                    if let Ok(m) = entry.metadata() {
                        obj.insert("size".into(), json!(m.len()));
                    }
                }
                "symlink" => {
                    if let Ok(t) = fs::read_link(entry.path()) {
                        obj.insert(
                            "target".into(),
                            Value::String(t.to_string_lossy().into_owned()),
                        );
                    }
                }
                _ => {}
            }
            Value::Object(obj)
        })
        .collect();
    Ok(Listing {
        entries,
        total,
        hidden_skipped,
    })
}

// ---------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------

fn check_cancel(ctx: &ToolContext) -> Result<(), ToolError> {
    if ctx.cancel.is_cancelled() {
        Err(ToolError::new("cancelled: the turn was interrupted"))
    } else {
        Ok(())
    }
}

/// Runs blocking filesystem work: under a sandboxing policy on a new thread confined by the
/// session's rules (a confined thread stays confined, so it is not a pool's), else on
/// tokio's blocking pool.
async fn run_blocking<T, F>(ctx: &ToolContext, f: F) -> Result<T, ToolError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    if !crate::escalation::confines(ctx) {
        return tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| ToolError::new(format!("internal error in a file tool: {e}")));
    }
    let sandbox = ctx.limits.sandbox.clone();
    let workspace = ctx.workdir.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("tern-file-tool".into())
        .spawn(move || {
            let confined = sandbox
                .file_confinement(&workspace)
                .map_err(|e| ToolError::new(e.to_string()))
                .and_then(|c| {
                    c.confine_current_thread().map_err(|e| {
                        ToolError::new(format!("cannot confine the file tool to the sandbox: {e}"))
                    })
                });
            // Only a confined thread may touch the file system for the model.
            let _ = tx.send(confined.map(|()| f()));
        })
        .map_err(|e| ToolError::new(format!("cannot start a file tool thread: {e}")))?;
    rx.await
        .map_err(|_| ToolError::new("internal error in a file tool: its thread ended early"))?
}

fn binary_error(shown: &str) -> ToolError {
    ToolError::new(format!("not valid UTF-8 text (binary file?): {shown}"))
}

fn fs_error(action: &str, shown: &str, ctx: &ToolContext, e: FsError) -> ToolError {
    match e {
        FsError::Io(e) => io_error(action, shown, ctx, &e),
        FsError::Binary => binary_error(shown),
        FsError::Cancelled => ToolError::new("cancelled: the turn was interrupted"),
    }
}

/// Turns an I/O error into a message naming the path as the model gave it.
fn io_error(action: &str, shown: &str, ctx: &ToolContext, e: &io::Error) -> ToolError {
    use io::ErrorKind as K;
    let msg = match e.kind() {
        K::NotFound => {
            if Path::new(shown).is_absolute() {
                format!("file not found: {shown}")
            } else {
                format!(
                    "file not found: {shown} (relative to {})",
                    ctx.workdir.display()
                )
            }
        }
        K::PermissionDenied if crate::escalation::confines(ctx) => format!(
            "permission denied: {shown} ({e}). The sandbox ({}) lets the file tools write only in \
             the working directory{} and never touch tern's own files; use a path there, or \
             ask the user",
            ctx.limits.sandbox.policy().describe(),
            if ctx.limits.sandbox.policy().writable_roots.is_empty() {
                ""
            } else {
                " and the configured writable roots"
            }
        ),
        K::PermissionDenied => format!("permission denied: {shown} ({e})"),
        K::IsADirectory => format!("is a directory: {shown}"),
        K::NotADirectory => format!("cannot {action} {shown}: a parent of it is not a directory"),
        K::ReadOnlyFilesystem => format!("cannot {action} {shown}: the file system is read-only"),
        K::StorageFull => format!("cannot {action} {shown}: no space left on the device"),
        _ => format!("cannot {action} {shown}: {e}"),
    };
    ToolError::new(msg)
}

fn str_arg<'a>(args: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    opt_str_arg(args, key)?
        .ok_or_else(|| ToolError::new(format!("missing required argument `{key}`")))
}

fn opt_str_arg<'a>(args: &'a Value, key: &str) -> Result<Option<&'a str>, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ToolError::new(format!("argument `{key}` must be a string"))),
    }
}

/// A non-negative integer argument. JSON Schema's `integer` also admits `5.0`.
fn uint_arg(args: &Value, key: &str, default: u64) -> Result<u64, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .ok_or_else(|| {
                ToolError::new(format!("argument `{key}` must be a non-negative integer"))
            }),
    }
}

fn bool_arg(args: &Value, key: &str, default: bool) -> Result<bool, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ToolError::new(format!(
            "argument `{key}` must be a boolean"
        ))),
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DenyAll, Registry, ToolLimits};
    use tempfile::TempDir;

    /// Every file tool test runs under the default policy (`workspace-write`) where the
    /// kernel has Landlock, so the confined threads do all the work the tests check.
    fn ctx_in(dir: &Path) -> ToolContext {
        let mut limits = ToolLimits::default();
        if landlock() {
            limits.sandbox = Arc::new(tern_sandbox::Sandbox::new(tern_sandbox::Policy::new(
                tern_sandbox::Mode::WorkspaceWrite,
            )));
        }
        ToolContext {
            session_id: "test".into(),
            call_id: "call-1".into(),
            call_seq: 0,
            workdir: dir.to_path_buf(),
            cancel: CancellationToken::new(),
            approver: Arc::new(DenyAll {
                reason: "tests never approve".into(),
            }),
            limits,
            preapproved: false,
        }
    }

    fn landlock() -> bool {
        matches!(
            tern_sandbox::Support::probe(),
            tern_sandbox::Support::Landlock { .. }
        )
    }

    /// The file tools under `workspace-write` with a protected "tern home" beside the
    /// workspace: what they may reach is what a command may.
    #[tokio::test]
    async fn the_sandbox_confines_the_file_tools() {
        if !landlock() {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let (ws, out, home) = (root.join("ws"), root.join("out"), root.join("home"));
        for p in [&ws, &out, &home] {
            fs::create_dir(p).unwrap();
        }
        fs::write(out.join("f.txt"), "outside\n").unwrap();
        fs::write(home.join("inbox-admin.json"), "TOKEN\n").unwrap();
        std::os::unix::fs::symlink(&home, ws.join("h")).unwrap();
        std::os::unix::fs::symlink(out.join("f.txt"), ws.join("f-link")).unwrap();
        let mut ctx = ctx_in(&ws);
        let mut p = tern_sandbox::Policy::new(tern_sandbox::Mode::WorkspaceWrite);
        p.protected_paths = vec![home.clone()];
        ctx.limits.sandbox = Arc::new(tern_sandbox::Sandbox::new(p));

        // Inside: as usual.
        write(&ctx, json!({"path": "a.txt", "content": "a\n"}))
            .await
            .unwrap();
        assert_eq!(fs::read_to_string(ws.join("a.txt")).unwrap(), "a\n");
        // Outside: readable, not writable, whichever way the path is spelled.
        assert!(read(&ctx, json!({"path": out.join("f.txt")})).await.is_ok());
        for path in [
            out.join("f.txt").display().to_string(),
            "../out/f.txt".to_owned(),
            "f-link".to_owned(),
            out.join("new.txt").display().to_string(),
        ] {
            let e = err_text(write(&ctx, json!({"path": path, "content": "x"})).await);
            assert!(
                e.contains("permission denied") && e.contains("sandbox"),
                "{path}: {e}"
            );
            let e = err_text(
                patch(
                    &ctx,
                    json!({"path": path, "old_string": "outside", "new_string": "x"}),
                )
                .await,
            );
            assert!(!e.is_empty(), "{path}");
        }
        assert_eq!(fs::read_to_string(out.join("f.txt")).unwrap(), "outside\n");
        assert!(!out.join("new.txt").exists());
        // The protected home: not read, not listed, not written, not through a symlink.
        for path in [
            home.join("inbox-admin.json").display().to_string(),
            "h/inbox-admin.json".to_owned(),
            "../home/inbox-admin.json".to_owned(),
        ] {
            let e = err_text(read(&ctx, json!({"path": path})).await);
            assert!(!e.contains("TOKEN"), "{path}: {e}");
            assert!(e.contains("permission denied"), "{path}: {e}");
            let e = err_text(
                patch(
                    &ctx,
                    json!({"path": path, "old_string": "TOKEN", "new_string": "x"}),
                )
                .await,
            );
            assert!(e.contains("permission denied"), "{path}: {e}");
            assert!(
                write(&ctx, json!({"path": path, "content": "x"}))
                    .await
                    .is_err(),
                "{path}"
            );
        }
        assert!(
            list(&ctx, json!({"path": home.display().to_string()}))
                .await
                .is_err()
        );
        assert!(list(&ctx, json!({"path": "h"})).await.is_err());
        assert_eq!(
            fs::read_to_string(home.join("inbox-admin.json")).unwrap(),
            "TOKEN\n"
        );
    }

    fn setup() -> (TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx_in(dir.path());
        (dir, ctx)
    }

    async fn read(ctx: &ToolContext, args: Value) -> ToolResult {
        read_file(args, ctx.clone()).await
    }

    async fn write(ctx: &ToolContext, args: Value) -> ToolResult {
        write_file(args, ctx.clone()).await
    }

    async fn patch(ctx: &ToolContext, args: Value) -> ToolResult {
        patch_file(args, ctx.clone()).await
    }

    async fn list(ctx: &ToolContext, args: Value) -> ToolResult {
        list_dir(args, ctx.clone()).await
    }

    fn numbered(range: std::ops::RangeInclusive<usize>) -> String {
        range.map(|i| format!("line {i}\n")).collect()
    }

    fn err_text(r: ToolResult) -> String {
        r.unwrap_err().0
    }

    // --- specs ---------------------------------------------------------------------------

    #[test]
    fn all_tools_have_valid_strict_schemas() {
        let tools = all();
        let names: Vec<_> = tools.iter().map(|t| t.spec().name).collect();
        assert_eq!(names, ["read_file", "write_file", "patch_file", "list_dir"]);
        for t in &tools {
            let s = t.spec();
            assert_eq!(s.toolset, "file");
            assert!(!s.description.is_empty());
            assert_eq!(s.parameters["type"], "object");
            assert_eq!(s.parameters["additionalProperties"], false);
            jsonschema::validator_for(&s.parameters).unwrap();
        }
        let req = |i: usize| tools[i].spec().parameters["required"].clone();
        assert_eq!(req(0), json!(["path"]));
        assert_eq!(req(1), json!(["path", "content"]));
        assert_eq!(req(2), json!(["path", "old_string", "new_string"]));
        assert!(tools[3].spec().parameters.get("required").is_none());
    }

    #[tokio::test]
    async fn registry_validates_arguments() {
        let (dir, ctx) = setup();
        fs::write(dir.path().join("a.txt"), "x\n").unwrap();
        let mut reg = Registry::new();
        for t in all() {
            reg.register(t);
        }
        let sets = vec!["file".to_string()];
        let e = reg
            .call(
                "read_file",
                r#"{"path":"a.txt","offset":0}"#,
                &sets,
                ctx.clone(),
            )
            .await
            .unwrap_err();
        assert!(e.0.contains("invalid arguments"), "{e}");
        let e = reg
            .call(
                "read_file",
                r#"{"path":"a.txt","bogus":1}"#,
                &sets,
                ctx.clone(),
            )
            .await
            .unwrap_err();
        assert!(e.0.contains("invalid arguments"), "{e}");
        let e = reg
            .call(
                "patch_file",
                r#"{"path":"a.txt","old_string":"","new_string":"y"}"#,
                &sets,
                ctx.clone(),
            )
            .await
            .unwrap_err();
        assert!(e.0.contains("invalid arguments"), "{e}");
        let e = reg
            .call("list_dir", r#"{"max_entries":5001}"#, &sets, ctx.clone())
            .await
            .unwrap_err();
        assert!(e.0.contains("invalid arguments"), "{e}");
        let v = reg
            .call("read_file", r#"{"path":"a.txt"}"#, &sets, ctx)
            .await
            .unwrap();
        assert_eq!(v["content"], "     1\tx\n");
    }

    // --- read_file -----------------------------------------------------------------------

    #[tokio::test]
    async fn read_whole_file_numbered() {
        let (dir, ctx) = setup();
        fs::write(dir.path().join("a.txt"), "alpha\nbeta\n\ngamma").unwrap();
        let v = read(&ctx, json!({"path": "a.txt"})).await.unwrap();
        assert_eq!(
            v["content"],
            "     1\talpha\n     2\tbeta\n     3\t\n     4\tgamma\n"
        );
        assert_eq!(v["path"], "a.txt");
        assert_eq!(v["total_lines"], 4);
        assert_eq!(v["start_line"], 1);
        assert_eq!(v["end_line"], 4);
        assert_eq!(v["truncated"], false);
        assert!(v.get("note").is_none());
    }

    #[tokio::test]
    async fn read_absolute_path_and_crlf() {
        let (dir, ctx) = setup();
        let p = dir.path().join("w.txt");
        fs::write(&p, "one\r\ntwo\r\n").unwrap();
        let shown = p.to_str().unwrap();
        let v = read(&ctx, json!({"path": shown})).await.unwrap();
        assert_eq!(v["path"], shown);
        assert_eq!(v["content"], "     1\tone\n     2\ttwo\n");
        assert_eq!(v["total_lines"], 2);
    }

    #[tokio::test]
    async fn read_offset_limit_and_note() {
        let (dir, ctx) = setup();
        fs::write(dir.path().join("n.txt"), numbered(1..=10)).unwrap();
        let v = read(&ctx, json!({"path": "n.txt", "offset": 3, "limit": 4}))
            .await
            .unwrap();
        assert_eq!(
            v["content"],
            "     3\tline 3\n     4\tline 4\n     5\tline 5\n     6\tline 6\n"
        );
        assert_eq!(v["start_line"], 3);
        assert_eq!(v["end_line"], 6);
        assert_eq!(v["total_lines"], 10);
        assert_eq!(v["truncated"], true);
        assert_eq!(
            v["note"],
            "showing lines 3-6 of 10; call again with offset=7 to read more"
        );

        // The tail: not truncated.
        let v = read(&ctx, json!({"path": "n.txt", "offset": 7}))
            .await
            .unwrap();
        assert_eq!(v["end_line"], 10);
        assert_eq!(v["truncated"], false);
        assert!(v.get("note").is_none());

        // Exactly reaching the end is not truncated either.
        let v = read(&ctx, json!({"path": "n.txt", "offset": 8, "limit": 3}))
            .await
            .unwrap();
        assert_eq!(v["end_line"], 10);
        assert_eq!(v["truncated"], false);
    }

    #[tokio::test]
    async fn read_default_limit_is_2000_lines() {
        let (dir, ctx) = setup();
        fs::write(dir.path().join("big.txt"), numbered(1..=2500)).unwrap();
        let v = read(&ctx, json!({"path": "big.txt"})).await.unwrap();
        assert_eq!(v["end_line"], 2000);
        assert_eq!(v["total_lines"], 2500);
        assert_eq!(v["truncated"], true);
        assert!(v["note"].as_str().unwrap().contains("offset=2001"));
        assert!(
            v["content"]
                .as_str()
                .unwrap()
                .ends_with("  2000\tline 2000\n")
        );
    }

    #[tokio::test]
    async fn read_caps_output_bytes_at_line_boundary() {
        let (dir, mut ctx) = setup();
        ctx.limits.read_limit_bytes = 100;
        fs::write(dir.path().join("n.txt"), numbered(1..=50)).unwrap();
        let v = read(&ctx, json!({"path": "n.txt"})).await.unwrap();
        let content = v["content"].as_str().unwrap();
        assert!(content.len() <= 100, "{}", content.len());
        assert!(content.ends_with('\n'));
        // Each line is "     N\tline N\n": 14 bytes for N < 10, so 7 lines fit in 100.
        assert_eq!(v["end_line"], 7);
        assert_eq!(v["truncated"], true);
        assert_eq!(v["total_lines"], 50);
        let note = v["note"].as_str().unwrap();
        assert!(note.contains("100-byte read limit"), "{note}");
        assert!(note.contains("offset=8"), "{note}");
    }

    #[tokio::test]
    async fn read_cuts_a_single_overlong_line() {
        let (dir, mut ctx) = setup();
        ctx.limits.read_limit_bytes = 64;
        let long = "é".repeat(200);
        fs::write(dir.path().join("l.txt"), format!("{long}\nshort\n")).unwrap();
        let v = read(&ctx, json!({"path": "l.txt"})).await.unwrap();
        let content = v["content"].as_str().unwrap();
        assert!(content.len() <= 64);
        assert!(content.starts_with("     1\téé"));
        assert_eq!(v["end_line"], 1);
        assert_eq!(v["truncated"], true);
        let note = v["note"].as_str().unwrap();
        assert!(note.contains("line 1 is longer"), "{note}");
        assert!(note.contains("offset=2"), "{note}");
        let v = read(&ctx, json!({"path": "l.txt", "offset": 2}))
            .await
            .unwrap();
        assert_eq!(v["content"], "     2\tshort\n");
    }

    #[tokio::test]
    async fn read_multibyte_across_chunk_boundaries() {
        let (dir, ctx) = setup();
        // 'a' then two-byte chars: the 64 KiB chunk boundary falls inside a char.
        let text = format!("a{}\nend\n", "é".repeat(100_000));
        fs::write(dir.path().join("m.txt"), &text).unwrap();
        let v = read(&ctx, json!({"path": "m.txt"})).await.unwrap();
        assert_eq!(v["total_lines"], 2);
        assert!(v["content"].as_str().unwrap().ends_with("     2\tend\n"));
    }

    #[tokio::test]
    async fn read_empty_file() {
        let (dir, ctx) = setup();
        fs::write(dir.path().join("e.txt"), "").unwrap();
        let v = read(&ctx, json!({"path": "e.txt"})).await.unwrap();
        assert_eq!(v["content"], "");
        assert_eq!(v["total_lines"], 0);
        assert_eq!(v["truncated"], false);
    }

    #[tokio::test]
    async fn read_offset_past_end() {
        let (dir, ctx) = setup();
        fs::write(dir.path().join("n.txt"), numbered(1..=3)).unwrap();
        let e = err_text(read(&ctx, json!({"path": "n.txt", "offset": 9})).await);
        assert!(e.contains("offset 9 is past the end of n.txt"), "{e}");
        assert!(e.contains("3 lines"), "{e}");
    }

    #[tokio::test]
    async fn read_refuses_binary() {
        let (dir, ctx) = setup();
        fs::write(dir.path().join("nul.bin"), b"abc\0def").unwrap();
        let e = err_text(read(&ctx, json!({"path": "nul.bin"})).await);
        assert_eq!(e, "not valid UTF-8 text (binary file?): nul.bin");

        // Invalid UTF-8 far past the sniffed prefix is still caught.
        let mut bytes = numbered(1..=20_000).into_bytes();
        bytes.extend_from_slice(&[0xff, 0xfe, b'\n']);
        fs::write(dir.path().join("late.bin"), bytes).unwrap();
        let e = err_text(read(&ctx, json!({"path": "late.bin", "limit": 1})).await);
        assert!(e.contains("binary file?"), "{e}");

        // A truncated multi-byte sequence at the very end.
        fs::write(dir.path().join("cut.bin"), b"ok\n\xc3").unwrap();
        let e = err_text(read(&ctx, json!({"path": "cut.bin"})).await);
        assert!(e.contains("binary file?"), "{e}");
    }

    #[tokio::test]
    async fn read_missing_and_directory() {
        let (dir, ctx) = setup();
        let e = err_text(read(&ctx, json!({"path": "src/x.rs"})).await);
        assert!(e.starts_with("file not found: src/x.rs"), "{e}");
        fs::create_dir(dir.path().join("sub")).unwrap();
        let e = err_text(read(&ctx, json!({"path": "sub"})).await);
        assert!(e.starts_with("is a directory: sub"), "{e}");
    }

    #[tokio::test]
    async fn read_honours_cancellation() {
        let (dir, ctx) = setup();
        fs::write(dir.path().join("a.txt"), "x\n").unwrap();
        ctx.cancel.cancel();
        let e = err_text(read(&ctx, json!({"path": "a.txt"})).await);
        assert!(e.contains("cancelled"), "{e}");
    }

    // --- write_file ----------------------------------------------------------------------

    #[tokio::test]
    async fn write_creates_dirs_and_reads_back() {
        let (dir, ctx) = setup();
        let v = write(
            &ctx,
            json!({"path": "a/b/c.txt", "content": "hello\nworld\n"}),
        )
        .await
        .unwrap();
        assert_eq!(v["path"], "a/b/c.txt");
        assert_eq!(v["bytes_written"], 12);
        assert_eq!(v["created"], true);
        assert_eq!(
            fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
            "hello\nworld\n"
        );
        let r = read(&ctx, json!({"path": "a/b/c.txt"})).await.unwrap();
        assert_eq!(r["content"], "     1\thello\n     2\tworld\n");

        let v = write(&ctx, json!({"path": "a/b/c.txt", "content": "é"}))
            .await
            .unwrap();
        assert_eq!(v["created"], false);
        assert_eq!(v["bytes_written"], 2);
        assert_eq!(
            fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
            "é"
        );
        // No temporary files left behind.
        let names: Vec<_> = fs::read_dir(dir.path().join("a/b"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["c.txt"]);
    }

    #[tokio::test]
    async fn write_empty_content() {
        let (dir, ctx) = setup();
        let v = write(&ctx, json!({"path": "empty", "content": ""}))
            .await
            .unwrap();
        assert_eq!(v["bytes_written"], 0);
        assert_eq!(fs::read(dir.path().join("empty")).unwrap(), b"");
    }

    #[tokio::test]
    async fn write_refuses_directory() {
        let (dir, ctx) = setup();
        fs::create_dir(dir.path().join("d")).unwrap();
        let e = err_text(write(&ctx, json!({"path": "d", "content": "x"})).await);
        assert!(e.starts_with("is a directory: d"), "{e}");
    }

    #[tokio::test]
    async fn write_under_a_file_fails_clearly() {
        let (dir, ctx) = setup();
        fs::write(dir.path().join("f"), "x").unwrap();
        let e = err_text(write(&ctx, json!({"path": "f/g.txt", "content": "x"})).await);
        assert!(e.contains("f/g.txt"), "{e}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn write_keeps_permissions_and_symlinks() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, ctx) = setup();
        let p = dir.path().join("script.sh");
        fs::write(&p, "old").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o750)).unwrap();
        write(&ctx, json!({"path": "script.sh", "content": "new"}))
            .await
            .unwrap();
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o750);
        assert_eq!(fs::read_to_string(&p).unwrap(), "new");

        std::os::unix::fs::symlink("script.sh", dir.path().join("link")).unwrap();
        let v = write(&ctx, json!({"path": "link", "content": "via link"}))
            .await
            .unwrap();
        assert_eq!(v["created"], false);
        assert!(
            fs::symlink_metadata(dir.path().join("link"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read_to_string(&p).unwrap(), "via link");
    }

    // --- patch_file ----------------------------------------------------------------------

    #[tokio::test]
    async fn patch_replaces_once() {
        let (dir, ctx) = setup();
        let p = dir.path().join("src.rs");
        fs::write(
            &p,
            "fn main() {\n    let x = 1;\n    println!(\"{x}\");\n}\n",
        )
        .unwrap();
        let v = patch(
            &ctx,
            json!({"path": "src.rs", "old_string": "let x = 1;", "new_string": "let x = 2;"}),
        )
        .await
        .unwrap();
        assert_eq!(v["path"], "src.rs");
        assert_eq!(v["replacements"], 1);
        assert_eq!(v["first_changed_line"], 2);
        assert_eq!(
            v["diff"],
            "@@ -2,1 +2,1 @@\n-    let x = 1;\n+    let x = 2;\n"
        );
        assert_eq!(
            fs::read_to_string(&p).unwrap(),
            "fn main() {\n    let x = 2;\n    println!(\"{x}\");\n}\n"
        );
    }

    #[tokio::test]
    async fn patch_multiline_reports_first_really_changed_line() {
        let (dir, ctx) = setup();
        let p = dir.path().join("t.txt");
        fs::write(&p, "a\nb\nc\nd\n").unwrap();
        let v = patch(
            &ctx,
            json!({"path": "t.txt", "old_string": "b\nc\n", "new_string": "b\nC\nextra\n"}),
        )
        .await
        .unwrap();
        assert_eq!(v["first_changed_line"], 3);
        assert_eq!(fs::read_to_string(&p).unwrap(), "a\nb\nC\nextra\nd\n");
        let diff = v["diff"].as_str().unwrap();
        assert!(diff.contains(" b\n-c\n+C\n+extra\n"), "{diff}");

        // Deleting text.
        let v = patch(
            &ctx,
            json!({"path": "t.txt", "old_string": "extra\n", "new_string": ""}),
        )
        .await
        .unwrap();
        assert_eq!(v["first_changed_line"], 4);
        assert_eq!(fs::read_to_string(&p).unwrap(), "a\nb\nC\nd\n");
    }

    #[tokio::test]
    async fn patch_absent() {
        let (dir, ctx) = setup();
        fs::write(dir.path().join("f.txt"), "hello\n").unwrap();
        let e = err_text(
            patch(
                &ctx,
                json!({"path": "f.txt", "old_string": "bye", "new_string": "x"}),
            )
            .await,
        );
        assert_eq!(
            e,
            "old_string not found in f.txt; read the file again and copy the exact text, \
             including whitespace"
        );
        assert_eq!(
            fs::read_to_string(dir.path().join("f.txt")).unwrap(),
            "hello\n"
        );
    }

    #[tokio::test]
    async fn patch_absent_with_whitespace_hint() {
        let (dir, ctx) = setup();
        fs::write(
            dir.path().join("f.py"),
            "def f():\n\tif x:\n\t\treturn 1\n\treturn 2\n",
        )
        .unwrap();
        let e = err_text(
            patch(
                &ctx,
                json!({
                    "path": "f.py",
                    "old_string": "    if x:\n        return 1",
                    "new_string": "    if y:\n        return 1",
                }),
            )
            .await,
        );
        assert!(e.starts_with("old_string not found in f.py"), "{e}");
        assert!(e.contains("whitespace"), "{e}");
        assert!(e.contains("starts at line 2"), "{e}");

        // Line breaks differ: found only by the whole-text comparison.
        let e = err_text(
            patch(
                &ctx,
                json!({"path": "f.py", "old_string": "return 1 return 2", "new_string": "z"}),
            )
            .await,
        );
        assert!(e.contains("whitespace is ignored"), "{e}");
    }

    #[tokio::test]
    async fn patch_absent_with_line_number_prefix_hint() {
        let (dir, ctx) = setup();
        fs::write(dir.path().join("f.txt"), "alpha\nbeta\n").unwrap();
        let e = err_text(
            patch(
                &ctx,
                json!({"path": "f.txt", "old_string": "     1\talpha\n     2\tbeta", "new_string": "x"}),
            )
            .await,
        );
        assert!(e.contains("line-number prefixes"), "{e}");
    }

    #[tokio::test]
    async fn patch_ambiguous_lists_count_and_lines() {
        let (dir, ctx) = setup();
        let p = dir.path().join("f.txt");
        fs::write(&p, "foo\nbar\nfoo\nbaz\nfoo\n").unwrap();
        let e = err_text(
            patch(
                &ctx,
                json!({"path": "f.txt", "old_string": "foo", "new_string": "qux"}),
            )
            .await,
        );
        assert!(
            e.starts_with("old_string occurs 3 times in f.txt (lines 1, 3, 5)"),
            "{e}"
        );
        assert!(e.contains("replace_all"), "{e}");
        assert_eq!(fs::read_to_string(&p).unwrap(), "foo\nbar\nfoo\nbaz\nfoo\n");
    }

    #[tokio::test]
    async fn patch_replace_all() {
        let (dir, ctx) = setup();
        let p = dir.path().join("f.txt");
        fs::write(&p, "foo\nbar\nfoo\nbaz\nfoo\n").unwrap();
        let v = patch(
            &ctx,
            json!({"path": "f.txt", "old_string": "foo", "new_string": "qux", "replace_all": true}),
        )
        .await
        .unwrap();
        assert_eq!(v["replacements"], 3);
        assert_eq!(v["first_changed_line"], 1);
        assert!(v["note"].as_str().unwrap().contains("lines 1, 3, 5"));
        assert_eq!(fs::read_to_string(&p).unwrap(), "qux\nbar\nqux\nbaz\nqux\n");
        // replace_all with a single occurrence is fine too.
        let v = patch(
            &ctx,
            json!({"path": "f.txt", "old_string": "bar", "new_string": "BAR", "replace_all": true}),
        )
        .await
        .unwrap();
        assert_eq!(v["replacements"], 1);
        assert!(v.get("note").is_none());
    }

    #[tokio::test]
    async fn patch_identical_strings_refused() {
        let (dir, ctx) = setup();
        fs::write(dir.path().join("f.txt"), "foo\n").unwrap();
        let e = err_text(
            patch(
                &ctx,
                json!({"path": "f.txt", "old_string": "foo", "new_string": "foo"}),
            )
            .await,
        );
        assert!(e.contains("identical"), "{e}");
    }

    #[tokio::test]
    async fn patch_missing_and_binary_files() {
        let (dir, ctx) = setup();
        let e = err_text(
            patch(
                &ctx,
                json!({"path": "nope.txt", "old_string": "a", "new_string": "b"}),
            )
            .await,
        );
        assert!(e.starts_with("file not found: nope.txt"), "{e}");
        assert!(e.contains("write_file"), "{e}");

        fs::write(dir.path().join("b.bin"), b"a\0b").unwrap();
        let e = err_text(
            patch(
                &ctx,
                json!({"path": "b.bin", "old_string": "a", "new_string": "b"}),
            )
            .await,
        );
        assert_eq!(e, "not valid UTF-8 text (binary file?): b.bin");
    }

    #[tokio::test]
    async fn patch_adapts_to_crlf() {
        let (dir, ctx) = setup();
        let p = dir.path().join("w.txt");
        fs::write(&p, "one\r\ntwo\r\nthree\r\n").unwrap();
        let v = patch(
            &ctx,
            json!({"path": "w.txt", "old_string": "one\ntwo", "new_string": "1\n2"}),
        )
        .await
        .unwrap();
        assert_eq!(v["replacements"], 1);
        assert_eq!(fs::read_to_string(&p).unwrap(), "1\r\n2\r\nthree\r\n");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn patch_keeps_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, ctx) = setup();
        let p = dir.path().join("run.sh");
        fs::write(&p, "echo hi\n").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        patch(
            &ctx,
            json!({"path": "run.sh", "old_string": "hi", "new_string": "there"}),
        )
        .await
        .unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "echo there\n");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o755
        );
    }

    // --- list_dir ------------------------------------------------------------------------

    fn make_tree(dir: &Path) {
        fs::create_dir(dir.join("zdir")).unwrap();
        fs::create_dir(dir.join("adir")).unwrap();
        fs::create_dir(dir.join(".hdir")).unwrap();
        fs::write(dir.join("b.txt"), "12345").unwrap();
        fs::write(dir.join("a.txt"), "").unwrap();
        fs::write(dir.join(".hidden"), "x").unwrap();
    }

    fn names(v: &Value) -> Vec<String> {
        v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_owned())
            .collect()
    }

    #[tokio::test]
    async fn list_sorts_dirs_first_and_skips_hidden() {
        let (dir, ctx) = setup();
        make_tree(dir.path());
        let v = list(&ctx, json!({})).await.unwrap();
        assert_eq!(v["path"], ".");
        assert_eq!(names(&v), ["adir", "zdir", "a.txt", "b.txt"]);
        assert_eq!(v["total"], 4);
        assert_eq!(v["truncated"], false);
        assert_eq!(v["hidden_skipped"], 2);
        let e = &v["entries"];
        assert_eq!(e[0]["type"], "dir");
        assert!(e[0].get("size").is_none());
        assert_eq!(e[2]["type"], "file");
        assert_eq!(e[2]["size"], 0);
        assert_eq!(e[3]["size"], 5);

        let v = list(&ctx, json!({"path": ".", "include_hidden": true}))
            .await
            .unwrap();
        assert_eq!(
            names(&v),
            [".hdir", "adir", "zdir", ".hidden", "a.txt", "b.txt"]
        );
        assert_eq!(v["total"], 6);
        assert!(v.get("hidden_skipped").is_none());
    }

    #[tokio::test]
    async fn list_truncates() {
        let (dir, ctx) = setup();
        make_tree(dir.path());
        let v = list(&ctx, json!({"max_entries": 3})).await.unwrap();
        assert_eq!(names(&v), ["adir", "zdir", "a.txt"]);
        assert_eq!(v["total"], 4);
        assert_eq!(v["truncated"], true);
        assert!(v["note"].as_str().unwrap().contains("showing 3 of 4"));
    }

    #[tokio::test]
    async fn list_subdir_and_symlink() {
        let (dir, ctx) = setup();
        fs::create_dir_all(dir.path().join("sub/inner")).unwrap();
        fs::write(dir.path().join("sub/f.rs"), "fn x() {}").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink("f.rs", dir.path().join("sub/link")).unwrap();
        let v = list(&ctx, json!({"path": "sub"})).await.unwrap();
        assert_eq!(v["path"], "sub");
        let e = v["entries"].as_array().unwrap();
        assert_eq!(e[0]["name"], "inner");
        assert_eq!(e[1]["name"], "f.rs");
        assert_eq!(e[1]["size"], 9);
        #[cfg(unix)]
        {
            assert_eq!(e[2]["name"], "link");
            assert_eq!(e[2]["type"], "symlink");
            assert_eq!(e[2]["target"], "f.rs");
            assert!(e[2].get("size").is_none());
        }
    }

    #[tokio::test]
    async fn list_errors() {
        let (dir, ctx) = setup();
        fs::write(dir.path().join("f.txt"), "x").unwrap();
        let e = err_text(list(&ctx, json!({"path": "f.txt"})).await);
        assert!(e.starts_with("not a directory: f.txt"), "{e}");
        let e = err_text(list(&ctx, json!({"path": "missing"})).await);
        assert_eq!(e, "directory not found: missing");
    }

    #[tokio::test]
    async fn list_empty_dir() {
        let (_dir, ctx) = setup();
        let v = list(&ctx, json!({})).await.unwrap();
        assert_eq!(v["entries"], json!([]));
        assert_eq!(v["total"], 0);
        assert_eq!(v["truncated"], false);
    }

    // --- helpers -------------------------------------------------------------------------

    #[test]
    fn helper_functions() {
        assert_eq!(line_numbers("a\nb\nc", &[0, 2, 4]), [1, 2, 3]);
        assert!(has_line_number_prefix("    12\tfoo"));
        assert!(!has_line_number_prefix("\tfoo"));
        assert!(!has_line_number_prefix("x\tfoo"));
        assert_eq!(floor_char_boundary("aé", 2), 1);
        assert_eq!(floor_char_boundary("aé", 10), 3);
        assert_eq!(uint_arg(&json!({"n": 5.0}), "n", 1).unwrap(), 5);
        assert_eq!(uint_arg(&json!({}), "n", 7).unwrap(), 7);
        assert!(uint_arg(&json!({"n": -1}), "n", 1).is_err());
        assert_eq!(utf8_prefix(&[b'a', 0xc3]), "a");
    }
}
