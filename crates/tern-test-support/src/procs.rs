//! What tests ask of processes and the files they leave: whether a process ended, and the
//! permission bits of a tree.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::wait::{PATIENCE, poll_blocking};

/// Whether `pid` has ended now: gone, or a zombie nobody reaped yet (it runs no more either).
pub fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // "pid (comm) state …": comm may hold anything, so the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start())
            .is_some_and(|s| s.starts_with('Z') || s.starts_with('X')),
    }
}

/// Whether process `pid` ends within [`PATIENCE`] (see [`gone`]). A `terminal` command's shell
/// is its watchdog's child; killed with its group, it waits for init to reap it, so "ended"
/// is what tests of interrupted tools can ask.
pub fn process_ended(pid: i32) -> bool {
    poll_blocking(PATIENCE, Duration::from_millis(20), || {
        if gone(pid) {
            Ok(())
        } else {
            Err(String::new())
        }
    })
    .is_ok()
}

/// Every file and directory under `root` (not `root` itself), with its permission bits:
/// what tests of `$TERN_HOME`'s modes compare.
pub fn modes_under(root: &Path) -> Vec<(PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        // What cannot be read is left out (a test compares what it finds).
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(path.clone());
            }
            out.push((path, meta.permissions().mode() & 0o777));
        }
    }
    out
}
