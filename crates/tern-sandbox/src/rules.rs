//! Which paths a confined command may read and write: the policy turned into a list of
//! [`Grant`]s that Landlock can enforce.
//!
//! Landlock only grants: a right given on a directory holds for everything beneath it, and
//! nothing beneath can be taken back. So a protected path inside a granted tree is carved
//! out: instead of granting the tree, each entry of it is granted on its own, except the
//! protected one, descending along the protected path's ancestors. With `$TERN_HOME` at
//! `~/.tern`, "read anywhere" becomes every entry of `/` but `/root` (or `/home`), every
//! entry of that but `.tern`, and so on. The price: the carved ancestors themselves cannot be
//! listed (`ls /` is refused while `ls /usr` works), since listing one would list the
//! protected directory too.
//!
//! Every path is resolved (symlinks, `..`) before it is compared, so a symlink that leads
//! into a protected path is never granted.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use crate::{Level, Mode, Policy};

/// What a grant allows beneath its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rights {
    /// Read files, list directories, execute programs, connect to unix sockets.
    Read,
    /// Also create, write, truncate, rename and remove.
    ReadWrite,
    /// A device everyone writes to (`/dev/null`, the terminal): read, write, ioctl.
    Device,
}

/// One path and what may be done beneath it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub path: PathBuf,
    pub rights: Rights,
}

/// Devices a command may write to whatever the policy: output thrown away, read from the
/// terminal, PTYs.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// Deepest a carve descends (a protected path nested deeper is not granted around).
const MAX_DEPTH: usize = 64;

/// The grants of one command under `policy` whose session works in `workspace`, with its
/// private temporary directory `tmpdir`. Protected paths are carved out of every grant.
pub fn grants(
    policy: &Policy,
    workspace: &Path,
    tmpdir: Option<&Path>,
    level: Level,
) -> Vec<Grant> {
    let protected = canonical_protected(policy);
    let mut wanted: Vec<(PathBuf, Rights)> = Vec::new();
    match level {
        Level::Escalated => wanted.push(("/".into(), Rights::ReadWrite)),
        Level::Sandboxed => {
            wanted.push(("/".into(), Rights::Read));
            if policy.mode == Mode::WorkspaceWrite {
                wanted.push((workspace.to_path_buf(), Rights::ReadWrite));
                wanted.extend(
                    policy
                        .writable_roots
                        .iter()
                        .map(|r| (r.clone(), Rights::ReadWrite)),
                );
            }
            wanted.extend(tmpdir.map(|t| (t.to_path_buf(), Rights::ReadWrite)));
            wanted.extend(DEVICES.iter().map(|d| (PathBuf::from(d), Rights::Device)));
        }
    }
    let mut out = Vec::new();
    for (path, rights) in wanted {
        let mut visiting = HashSet::new();
        carve(&path, rights, &protected, &mut out, &mut visiting, 0);
    }
    out
}

/// The protected paths, resolved as far as they exist (a path that does not exist yet is
/// kept as given, made absolute and normalised, so it is protected once created).
pub fn canonical_protected(policy: &Policy) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in &policy.protected_paths {
        // Both spellings: the resolved one is what the kernel compares; the given one keeps
        // a symlinked home protected under its own name in `is_protected`.
        for q in [resolve(p), normalize(p)] {
            if !out.contains(&q) {
                out.push(q);
            }
        }
    }
    out
}

/// `path` with symlinks resolved as far as it exists, the rest appended as written
/// (normalised): where the kernel would look.
pub fn resolve(path: &Path) -> PathBuf {
    let path = normalize(path);
    let mut existing = path.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            let mut out = real;
            out.extend(rest.iter().rev());
            return out;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return path,
        }
    }
}

/// Absolute (against the current directory) with `.` and `..` applied lexically.
fn normalize(path: &Path) -> PathBuf {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(path)
    };
    let mut out = PathBuf::from("/");
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

fn carve(
    path: &Path,
    rights: Rights,
    protected: &[PathBuf],
    out: &mut Vec<Grant>,
    visiting: &mut HashSet<PathBuf>,
    depth: usize,
) {
    // A path that does not exist (a writable root not made yet) is skipped: nothing to grant.
    let Ok(real) = std::fs::canonicalize(path) else {
        return;
    };
    if protected.iter().any(|p| real.starts_with(p)) {
        return;
    }
    if !protected.iter().any(|p| p.starts_with(&real)) {
        if !out.iter().any(|g| g.path == real && g.rights == rights) {
            out.push(Grant { path: real, rights });
        }
        return;
    }
    // An ancestor of a protected path: grant its entries one by one. `visiting` stops a
    // symlink loop back to an ancestor being carved.
    if depth >= MAX_DEPTH || !visiting.insert(real.clone()) {
        return;
    }
    let entries = match std::fs::read_dir(&real) {
        Ok(e) => e,
        Err(e) => {
            tracing::debug!(path = %real.display(), error = %e, "cannot list a directory to carve the sandbox around a protected path");
            return;
        }
    };
    for entry in entries.flatten() {
        carve(&entry.path(), rights, protected, out, visiting, depth + 1);
    }
    visiting.remove(&real);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(mode: Mode, protected: &[&Path]) -> Policy {
        let mut p = Policy::new(mode);
        p.protected_paths = protected.iter().map(|p| p.to_path_buf()).collect();
        p
    }

    #[test]
    fn a_protected_directory_is_carved_out_of_its_ancestors() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        for p in ["a/home/.tern/keys", "a/home/work", "a/other", "b"] {
            std::fs::create_dir_all(root.join(p)).unwrap();
        }
        std::fs::write(root.join("a/home/.profile"), "x").unwrap();
        std::os::unix::fs::symlink(root.join("a/home/.tern"), root.join("b/link")).unwrap();
        let tern = root.join("a/home/.tern");
        let p = policy(Mode::WorkspaceWrite, &[&tern]);
        let mut out = Vec::new();
        carve(
            &root,
            Rights::Read,
            &canonical_protected(&p),
            &mut out,
            &mut HashSet::new(),
            0,
        );
        let mut paths: Vec<_> = out
            .iter()
            .map(|g| g.path.strip_prefix(&root).unwrap().to_path_buf())
            .collect();
        paths.sort();
        assert_eq!(
            paths,
            ["a/home/.profile", "a/home/work", "a/other", "b"]
                .map(PathBuf::from)
                .to_vec()
        );
        // The symlink inside `b` is under a plain grant: the kernel resolves it to the
        // protected directory, which no grant covers.
        assert!(out.iter().all(|g| !g.path.starts_with(&tern)));
    }

    #[test]
    fn a_workspace_inside_a_protected_path_gets_nothing() {
        let d = tempfile::tempdir().unwrap();
        let tern = d.path().join("tern");
        std::fs::create_dir_all(tern.join("ws")).unwrap();
        let p = policy(Mode::WorkspaceWrite, &[&tern]);
        let g = grants(&p, &tern.join("ws"), None, Level::Sandboxed);
        assert!(g.iter().all(|g| g.rights != Rights::ReadWrite), "{g:?}");
    }

    #[test]
    fn read_only_grants_no_workspace_write_but_the_tmpdir() {
        let ws = tempfile::tempdir().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let p = policy(Mode::ReadOnly, &[]);
        let g = grants(&p, ws.path(), Some(tmp.path()), Level::Sandboxed);
        let writable: Vec<_> = g
            .iter()
            .filter(|g| g.rights == Rights::ReadWrite)
            .map(|g| g.path.clone())
            .collect();
        assert_eq!(writable, vec![tmp.path().canonicalize().unwrap()]);
    }

    #[test]
    fn resolve_follows_existing_symlinks_and_keeps_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().canonicalize().unwrap().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join("link")).unwrap();
        assert_eq!(
            resolve(&d.path().join("link/x/../y/new")),
            real.join("y/new")
        );
    }
}
