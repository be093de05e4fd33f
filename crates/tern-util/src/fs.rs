//! [`write_atomic`]: a file replaced whole or not at all.
//!
//! The bytes go to a new temporary file beside the target (same directory, so the rename
//! cannot cross file systems), created with the wanted mode — a secret is never readable by
//! others, not even for a moment — then synced, renamed over the target, and the directory
//! synced so that the rename survives a power cut. A reader sees the old file or the new
//! one, never a mix; on any error the temporary file is removed and the target is left as it
//! was.
//!
//! The target path is used as given: a symlink there is replaced by a regular file. Callers
//! that write through symlinks resolve them first.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The permissions of the file [`write_atomic`] puts in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Exactly these permission bits, whatever the umask (e.g. `0o600` for secrets).
    Exact(u32),
    /// What a newly created file gets by default: `0o666` less the umask.
    Default,
}

/// Replaces `path` atomically with a file holding `bytes`, readable and writable by its
/// owner only (`0600`), whatever the umask.
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic(path, bytes, Mode::Exact(0o600))
}

/// Replaces `path` with a file holding `bytes` and having `mode`; see the module docs. The
/// directory must exist.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: Mode) -> io::Result<()> {
    let file_name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path has no file name"))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let (tmp, mut file) = create_temp(dir, &file_name.to_string_lossy(), mode)?;
    let written = (|| {
        file.write_all(bytes)?;
        if let Mode::Exact(bits) = mode {
            // Creating with `bits` could only narrow them (the umask); this sets them
            // exactly. After the write, which would clear set-user-id and set-group-id.
            file.set_permissions(Permissions::from_mode(bits))?;
        }
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        // Best effort: the temporary file is ours and useless now; the first error matters.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

/// Syncs the directory `dir`, which makes the creation, rename or removal of an entry in it
/// durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// A new, uniquely named hidden file in `dir` for an atomic write of `file_name`.
fn create_temp(dir: &Path, file_name: &str, mode: Mode) -> io::Result<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // Keep the name well under the usual 255-byte limit.
    let mut end = file_name.len().min(100);
    while !file_name.is_char_boundary(end) {
        end -= 1;
    }
    let stem = &file_name[..end];
    let bits = match mode {
        Mode::Exact(bits) => bits & 0o777,
        Mode::Default => 0o666,
    };
    let mut last_err = None;
    for _ in 0..64 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        // A random part too: in a directory others can write, nobody can take every name
        // this process would try ahead of it.
        let tmp = dir.join(format!(
            ".{stem}.tmp-{}-{n}-{:016x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(bits)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            // A leftover of a crashed process that had our pid; take the next name.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_err = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_err.unwrap_or_else(|| io::Error::other("cannot create a temporary file")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The umask is the process's; tests that set it or depend on it take turns.
    static UMASK: Mutex<()> = Mutex::new(());

    fn with_umask<T>(mask: libc::mode_t, f: impl FnOnce() -> T) -> T {
        let _turn = UMASK.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: umask has no memory effects; it only sets the process's file-creation mask.
        let old = unsafe { libc::umask(mask) };
        let out = f();
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        out
    }

    fn mode_of(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn private_files_are_0600_even_with_an_open_umask() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.key");
        with_umask(0o000, || write_private(&path, b"secret\n")).unwrap();
        assert_eq!(mode_of(&path), 0o600);
        assert_eq!(fs::read(&path).unwrap(), b"secret\n");
    }

    #[test]
    fn exact_modes_are_exact_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.txt");
        with_umask(0o077, || write_atomic(&path, b"x", Mode::Exact(0o644))).unwrap();
        assert_eq!(mode_of(&path), 0o644);
    }

    #[test]
    fn the_default_mode_follows_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notes.txt");
        with_umask(0o027, || write_atomic(&path, b"x", Mode::Default)).unwrap();
        assert_eq!(mode_of(&path), 0o640);
    }

    #[test]
    fn a_file_is_replaced_whole_with_the_new_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admin.json");
        fs::write(
            &path,
            "a much longer old content that must not survive in part",
        )
        .unwrap();
        fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
        write_private(&path, b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert_eq!(mode_of(&path), 0o600);
        assert_eq!(
            entries(dir.path()),
            ["admin.json"],
            "no temporary file is left"
        );
    }

    #[test]
    fn a_symlink_at_the_target_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        fs::write(&real, "old").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write_private(&link, b"new").unwrap();
        assert_eq!(fs::read(&real).unwrap(), b"old");
        assert!(
            !fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn nothing_is_left_behind_when_the_rename_fails() {
        let dir = tempfile::tempdir().unwrap();
        // A non-empty directory cannot be renamed over.
        let target = dir.path().join("taken");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("inside"), "kept").unwrap();
        let err = write_private(&target, b"new").unwrap_err();
        assert_ne!(err.kind(), io::ErrorKind::NotFound, "{err}");
        assert_eq!(entries(dir.path()), ["taken"]);
        assert_eq!(fs::read_to_string(target.join("inside")).unwrap(), "kept");
    }

    #[test]
    fn a_missing_directory_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let err = write_private(&dir.path().join("absent/file"), b"x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(write_private(Path::new("/"), b"x").is_err());
    }

    #[test]
    fn a_relative_path_writes_in_the_working_directory_s_terms() {
        // `Path::parent` of a bare name is empty; the directory is then `.`. Exercised
        // through a path relative to a known directory instead of changing the process's
        // working directory, which other tests share.
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a");
        fs::create_dir(&nested).unwrap();
        write_private(&nested.join("../b"), b"x").unwrap();
        assert_eq!(fs::read(dir.path().join("b")).unwrap(), b"x");
    }

    #[test]
    fn long_names_get_a_temporary_name_within_limits() {
        let dir = tempfile::tempdir().unwrap();
        let name = "é".repeat(120); // 240 bytes: a temp name with a suffix must be shorter
        let path = dir.path().join(&name);
        write_atomic(&path, b"x", Mode::Default).unwrap();
        assert_eq!(entries(dir.path()), [name]);
    }
}
