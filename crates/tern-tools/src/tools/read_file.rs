//! `read_file`: numbered lines of a UTF-8 text file, a window at a time, streamed so memory
//! stays bounded whatever the file's size.

use std::fs;
use std::io::{self, Read};
use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::file_access::{
    FsError, SNIFF_BYTES, check_cancel, floor_char_boundary, fs_error, io_error, run_blocking,
    to_usize,
};
use crate::tool::lenient_u64;
use crate::{Tool, ToolContext, ToolError, ToolResult};

/// Lines `read_file` returns when the model gives no `limit`.
pub const DEFAULT_READ_LINES: u64 = 2000;
/// Size of the reads `read_file` streams a file with.
const CHUNK_BYTES: usize = 64 * 1024;

pub struct ReadFile;

/// The arguments of `read_file`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// File to read, relative to the working directory or absolute.
    #[schemars(length(min = 1))]
    pub path: String,
    /// 1-based number of the first line to return.
    #[serde(default = "first_line", deserialize_with = "lenient_u64")]
    #[schemars(with = "u64", range(min = 1))]
    pub offset: u64,
    /// Maximum number of lines to return.
    #[serde(default = "default_limit", deserialize_with = "lenient_u64")]
    #[schemars(with = "u64", range(min = 1))]
    pub limit: u64,
}

fn first_line() -> u64 {
    1
}

fn default_limit() -> u64 {
    DEFAULT_READ_LINES
}

impl Tool for ReadFile {
    const NAME: &'static str = "read_file";
    const TOOLSET: &'static str = super::FILE_TOOLSET;
    const DESCRIPTION: &'static str = "Read a UTF-8 text file. Returns its lines numbered like `cat -n` \
        (line number right-aligned to 6 characters, a tab, then the line); the numbers \
        and the tab are not part of the file, so never copy them into patch_file. \
        Returns up to `limit` lines (default 2000) starting at line `offset` (1-based, \
        default 1). When `truncated` is true, more lines follow: call again with the \
        offset given in `note`. Binary files are refused. Relative paths are resolved \
        against the working directory. Prefer this tool over `cat` in the terminal.";
    type Args = ReadFileArgs;

    async fn run(&self, args: ReadFileArgs, ctx: ToolContext) -> ToolResult {
        read_file(args, ctx).await
    }
}

async fn read_file(args: ReadFileArgs, ctx: ToolContext) -> ToolResult {
    check_cancel(&ctx)?;
    let shown = args.path;
    let offset = to_usize(args.offset.max(1));
    let limit = to_usize(args.limit.max(1));
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
pub(super) fn utf8_prefix(bytes: &[u8]) -> &str {
    match std::str::from_utf8(bytes) {
        Ok(s) => s,
        // The prefix up to `valid_up_to` is valid by definition, so this never yields "".
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
    }
}
