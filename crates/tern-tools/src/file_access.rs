//! Sandboxed file access shared by the `file` toolset: running filesystem work confined
//! (or on the blocking pool), atomic writes, text decoding, and the errors the model reads,
//! naming the path as it gave it.
//!
//! Filesystem work runs off the async runtime's threads: under a sandboxing policy on a
//! thread of its own, confined by the same Landlock rules as the agent's commands (so the
//! kernel, not a path check, decides what a symlink or `..` may reach, and `$TERN_HOME` is
//! out of reach); without one on tokio's blocking pool.
//! Writes are atomic: the new text goes to a temporary file in the target's directory which
//! is then renamed over the target, so a reader never sees a half-written file.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tern_util::fs::Mode;

use crate::{ToolContext, ToolError};

/// A NUL byte in this many leading bytes marks a file as binary.
pub(crate) const SNIFF_BYTES: usize = 8 * 1024;

/// Failures of the blocking filesystem helpers.
#[derive(Debug)]
pub(crate) enum FsError {
    Io(io::Error),
    Binary,
    Cancelled,
}

impl From<io::Error> for FsError {
    fn from(e: io::Error) -> Self {
        FsError::Io(e)
    }
}

/// The largest char boundary of `s` that is `<= at`.
pub(crate) fn floor_char_boundary(s: &str, at: usize) -> usize {
    let mut i = at.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Decodes a whole file as text: `None` if it looks binary.
pub(crate) fn decode_text(bytes: Vec<u8>) -> Option<String> {
    let sniff = &bytes[..bytes.len().min(SNIFF_BYTES)];
    if sniff.contains(&0) {
        return None;
    }
    String::from_utf8(bytes).ok()
}

/// Writes `data` to `path` through a temporary file in the same directory and a rename.
/// Creates missing parent directories, follows a symlink to its target (the link stays),
/// keeps an existing file's permissions. Returns whether the file was created.
///
/// Runs to completion even if the calling future is dropped (it lives on the blocking pool),
/// so no temporary file is left behind by an interrupted turn.
pub(crate) fn atomic_write(path: &Path, data: &[u8]) -> io::Result<bool> {
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
    if target.file_name().is_none() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "path has no file name",
        ));
    }
    if let Some(dir) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(dir)?;
    }
    // An existing file keeps its permissions; a new one gets the usual default.
    let mode = match &existing {
        // Not setuid, setgid or sticky: the kernel clears those when the agent writes the
        // file in place, and a rewrite must not give them back.
        Some(meta) => Mode::Exact(meta.permissions().mode() & 0o777),
        None => Mode::Default,
    };
    tern_util::fs::write_atomic(&target, data, mode)?;
    Ok(existing.is_none())
}

pub(crate) fn check_cancel(ctx: &ToolContext) -> Result<(), ToolError> {
    if ctx.cancel.is_cancelled() {
        Err(ToolError::new("cancelled: the turn was interrupted"))
    } else {
        Ok(())
    }
}

/// Runs blocking filesystem work: under a sandboxing policy on a new thread confined by the
/// session's rules (a confined thread stays confined, so it is not a pool's), else on
/// tokio's blocking pool.
pub(crate) async fn run_blocking<T, F>(ctx: &ToolContext, f: F) -> Result<T, ToolError>
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

/// Reads a whole file the model names, as the file tools do: confined by the session's
/// sandbox (so `$TERN_HOME` and anything else outside the policy stays out of reach, symlinks
/// included), refusing files over `max_bytes`. The path resolved, and the bytes. For tools of
/// other crates that hand a file on (`send_file`).
pub async fn read_bytes(
    ctx: &ToolContext,
    shown: &str,
    max_bytes: u64,
) -> Result<(std::path::PathBuf, Vec<u8>), ToolError> {
    use std::io::Read as _;
    check_cancel(ctx)?;
    let path = ctx.resolve(shown);
    let p = path.clone();
    let read = run_blocking(ctx, move || -> io::Result<Option<Vec<u8>>> {
        use std::os::unix::fs::OpenOptionsExt as _;
        // Only regular files: a FIFO or a device would block or never end, and the kernel's
        // pseudo-files (`/proc/self/environ` is this process's environment, secrets
        // included) are regular-looking files that no sandbox rule keeps a process from
        // reading about itself.
        if !fs::metadata(&p)?.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        let f = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&p)?;
        if !f.metadata()?.is_file() || is_pseudo_fs(&f) {
            return Err(io::Error::other(
                "not a regular file (a kernel pseudo-file, e.g. under /proc or /sys)",
            ));
        }
        let mut bytes = Vec::new();
        f.take(max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)?;
        Ok((bytes.len() as u64 <= max_bytes).then_some(bytes))
    })
    .await?;
    match read {
        Ok(Some(bytes)) => Ok((path, bytes)),
        Ok(None) => Err(ToolError::new(format!(
            "{shown} is larger than {max_bytes} bytes, the most that can be sent"
        ))),
        Err(e) => Err(io_error("read", shown, ctx, &e)),
    }
}

/// Whether `f` lives on procfs or sysfs (or the check itself fails: then it is refused too).
fn is_pseudo_fs(f: &fs::File) -> bool {
    use nix::sys::statfs::{PROC_SUPER_MAGIC, SYSFS_MAGIC, fstatfs};
    match fstatfs(f) {
        Ok(s) => s.filesystem_type() == PROC_SUPER_MAGIC || s.filesystem_type() == SYSFS_MAGIC,
        Err(_) => true,
    }
}

pub(crate) fn binary_error(shown: &str) -> ToolError {
    ToolError::new(format!("not valid UTF-8 text (binary file?): {shown}"))
}

pub(crate) fn fs_error(action: &str, shown: &str, ctx: &ToolContext, e: FsError) -> ToolError {
    match e {
        FsError::Io(e) => io_error(action, shown, ctx, &e),
        FsError::Binary => binary_error(shown),
        FsError::Cancelled => ToolError::new("cancelled: the turn was interrupted"),
    }
}

/// Turns an I/O error into a message naming the path as the model gave it.
pub(crate) fn io_error(action: &str, shown: &str, ctx: &ToolContext, e: &io::Error) -> ToolError {
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

pub(crate) fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}
