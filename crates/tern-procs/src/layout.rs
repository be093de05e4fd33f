//! One process's directory under `$TERN_HOME/procs/`, and the small files in it.
//!
//! ```text
//! procs/proc_1a2b3c4d5e6f/
//!   spec.json       what to run (written by the manager before it starts the supervisor)
//!   meta.json       spec + supervisor pid, child pid, start time (written by the supervisor)
//!   lock            flock-ed by the supervisor for its whole life: free = supervisor gone
//!   sock            the supervisor's unix socket (stdin, kill, wait)
//!   log/<offset>    the output log in segments, each named by its first byte's offset
//!   exit.json       the exit status (written by the supervisor, once, after the output)
//!   polled          how far `poll` has read (written by the manager)
//!   reported        the manager reported the exit as an event (written by the manager)
//!   supervisor.log  the supervisor's own diagnostics (its stderr)
//! ```
//!
//! Every JSON file is written whole through a temporary file and a rename, so a reader sees
//! either nothing or the complete file, also after a crash.
//!
//! Directories are made with mode 0700 and files with 0600 ([`private_dir_all`],
//! [`private_file`]), whatever the umask: a process's output and its control socket are for
//! tern's user only.

use std::fs::{DirBuilder, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::ProcError;

/// Creates `dir` and its missing parents with mode 0700 (an existing one keeps its mode).
pub fn private_dir_all(dir: &Path) -> std::io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Creates the directory `dir` with mode 0700; `AlreadyExists` if it does.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    DirBuilder::new().mode(0o700).create(dir)
}

/// Opens `path` for writing, truncated, like `File::create`; created with mode 0600.
pub fn private_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// Longest path a unix socket address can hold (`sun_path` less its terminating NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// What to run; written by the manager, read by the supervisor.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Spec {
    /// `proc_` and 12 hex digits.
    pub id: String,
    /// The command line, run with `bash -c` (or `sh -c` without bash).
    pub command: String,
    /// Absolute working directory.
    pub workdir: PathBuf,
    /// Run in a pseudo-terminal instead of pipes.
    pub pty: bool,
    /// The session that started it, if any.
    pub session_id: Option<String>,
    /// Terminal size in PTY mode.
    pub cols: u16,
    pub rows: u16,
    /// Bytes of output kept on disk; older segments are deleted beyond it.
    pub log_max_bytes: u64,
    /// Time between TERM and KILL when the process is killed.
    pub kill_grace_ms: u64,
    /// Resume the session with a summary when the process exits (the gateway's durable
    /// waits act on it; the supervisor ignores it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub notify_on_complete: bool,
    /// Regular expressions on the output that should resume the session (validated at
    /// spawn; acted on by the gateway, ignored by the supervisor).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watch_patterns: Vec<String>,
    /// Where the command runs: here, or on another host through `ssh` (then `workdir` is a
    /// path there). Absent in the spec of a local process, and in specs written before it.
    #[serde(default, skip_serializing_if = "Backend::is_local")]
    pub backend: Backend,
    /// The sandbox the supervisor puts the child in (its own policy and the session's
    /// workspace). Absent in specs written before the sandbox: those ran unconfined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxSpec>,
}

/// How a background process is confined: the policy of the gateway that started it, the
/// workspace of the session, and whether a human approved running it outside the sandbox.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SandboxSpec {
    pub policy: tern_sandbox::Policy,
    pub workspace: PathBuf,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub escalated: bool,
}

impl SandboxSpec {
    pub fn level(&self) -> tern_sandbox::Level {
        if self.escalated {
            tern_sandbox::Level::Escalated
        } else {
            tern_sandbox::Level::Sandboxed
        }
    }
}

/// Where background processes run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Backend {
    /// On this machine (`bash -c` under the supervisor).
    #[default]
    Local,
    /// On another host: the supervisor's child is the `ssh` client ([`crate::ssh`]).
    Ssh(crate::ssh::SshTarget),
}

impl Backend {
    pub fn is_local(&self) -> bool {
        matches!(self, Self::Local)
    }
}

/// A running (or finished) process as its supervisor recorded it at start.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Meta {
    #[serde(flatten)]
    pub spec: Spec,
    pub supervisor_pid: i32,
    /// Also the process group id of the child and its descendants.
    pub child_pid: i32,
    /// Unix time in milliseconds.
    pub started_at_ms: i64,
}

/// How the child ended, recorded by the supervisor after the output was written.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExitRecord {
    /// The exit code, when it exited by itself.
    pub code: Option<i32>,
    /// The signal that ended it, otherwise.
    pub signal: Option<i32>,
    /// Unix time in milliseconds.
    pub ended_at_ms: i64,
    /// Bytes of output written in all (the end offset of the log).
    pub output_bytes: u64,
}

impl ExitRecord {
    /// The code a shell would report: the exit code, or 128 + the signal.
    pub fn shell_code(&self) -> Option<i32> {
        self.code.or(self.signal.map(|s| 128 + s))
    }
}

/// The paths of one process's directory.
#[derive(Clone, Debug)]
pub struct ProcDir {
    pub dir: PathBuf,
}

impl ProcDir {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }
    pub fn spec(&self) -> PathBuf {
        self.dir.join("spec.json")
    }
    pub fn meta(&self) -> PathBuf {
        self.dir.join("meta.json")
    }
    pub fn exit(&self) -> PathBuf {
        self.dir.join("exit.json")
    }
    pub fn lock(&self) -> PathBuf {
        self.dir.join("lock")
    }
    pub fn socket(&self) -> PathBuf {
        self.dir.join("sock")
    }
    pub fn log_dir(&self) -> PathBuf {
        self.dir.join("log")
    }
    pub fn polled(&self) -> PathBuf {
        self.dir.join("polled")
    }
    pub fn supervisor_log(&self) -> PathBuf {
        self.dir.join("supervisor.log")
    }
    /// Present once the manager reported the exit (so a restart does not report it again).
    pub fn reported(&self) -> PathBuf {
        self.dir.join("reported")
    }
    /// The session the process belongs to now, when it moved from the one that started it
    /// (a reset that kept its processes); JSON `{"session_id": …}`.
    pub fn owner(&self) -> PathBuf {
        self.dir.join("owner")
    }

    /// Whether a supervisor holds this directory's lock. Takes the lock for an instant when
    /// it is free, which is harmless: only a supervisor keeps it.
    pub fn supervisor_alive(&self) -> Result<bool, ProcError> {
        let file = match File::open(self.lock()) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(ProcError::io(self.lock(), e)),
        };
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            // Dropping the guard unlocks at once.
            Ok(_guard) => Ok(false),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(true),
            Err((_, e)) => Err(ProcError::io(self.lock(), e.into())),
        }
    }

    /// Takes the lock for the life of the returned guard (the supervisor's).
    pub fn take_lock(&self) -> Result<Flock<File>, ProcError> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(self.lock())
            .map_err(|e| ProcError::io(self.lock(), e))?;
        Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| match e {
            nix::errno::Errno::EWOULDBLOCK => {
                ProcError::Protocol("another supervisor owns this directory".into())
            }
            e => ProcError::io(self.lock(), e.into()),
        })
    }
}

/// A fresh process id: `proc_` and 12 random hex digits (the directory's creation makes it
/// unique; the caller retries on a clash).
pub fn new_id() -> Result<String, ProcError> {
    let mut bytes = [0u8; 6];
    getrandom::fill(&mut bytes).map_err(|e| ProcError::Protocol(format!("no randomness: {e}")))?;
    let mut id = String::from("proc_");
    for b in bytes {
        id.push_str(&format!("{b:02x}"));
    }
    Ok(id)
}

/// Whether `id` has the shape of a process id (so it is safe as a directory name).
pub fn valid_id(id: &str) -> bool {
    id.strip_prefix("proc_")
        .is_some_and(|h| !h.is_empty() && h.len() <= 32 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Writes `value` as JSON to `path` through a temporary file in the same directory and a
/// rename, after syncing the data, so `path` is always either absent, the old or the new file.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), ProcError> {
    let bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| ProcError::Protocol(format!("cannot encode {}: {e}", path.display())))?;
    write_atomic(path, &bytes)
}

/// Replaces `path` with `bytes` atomically, mode 0600 ([`tern_util::fs::write_private`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ProcError> {
    tern_util::fs::write_private(path, bytes).map_err(|e| ProcError::io(path, e))
}

/// Reads a JSON file; `None` when it does not exist.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, ProcError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| ProcError::Protocol(format!("{} is not valid: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ProcError::io(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_valid_and_distinct() {
        let a = new_id().unwrap();
        let b = new_id().unwrap();
        assert!(valid_id(&a), "{a}");
        assert_eq!(a.len(), 17);
        assert_ne!(a, b);
        assert!(!valid_id("proc_"));
        assert!(!valid_id("proc_../x"));
        assert!(!valid_id("x_123"));
    }

    #[test]
    fn atomic_json_round_trips_and_leaves_no_temp_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("exit.json");
        assert_eq!(read_json::<ExitRecord>(&p).unwrap(), None);
        let rec = ExitRecord {
            code: Some(3),
            signal: None,
            ended_at_ms: 1,
            output_bytes: 10,
        };
        write_json_atomic(&p, &rec).unwrap();
        assert_eq!(read_json::<ExitRecord>(&p).unwrap(), Some(rec));
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn specs_without_a_backend_are_local_and_ssh_round_trips() {
        // A spec.json (and meta.json) as written before backends existed.
        let old = r#"{"id":"proc_0123456789ab","command":"sleep 1","workdir":"/tmp",
            "pty":false,"session_id":null,"cols":120,"rows":40,"log_max_bytes":4096,
            "kill_grace_ms":500}"#;
        let spec: Spec = serde_json::from_str(old).unwrap();
        assert_eq!(spec.backend, Backend::Local);
        // A local spec is written as before: no `backend` key.
        assert!(
            serde_json::to_value(&spec)
                .unwrap()
                .get("backend")
                .is_none()
        );
        let meta: Meta = serde_json::from_str(&format!(
            "{},\"supervisor_pid\":1,\"child_pid\":2,\"started_at_ms\":3}}",
            old.trim_end_matches('}')
        ))
        .unwrap();
        assert_eq!(meta.spec, spec);

        let mut ssh = spec.clone();
        ssh.backend = Backend::Ssh(crate::ssh::SshTarget {
            host: "build-box".into(),
            port: Some(2222),
            ..Default::default()
        });
        let v = serde_json::to_value(&ssh).unwrap();
        assert_eq!(v["backend"]["kind"], "ssh");
        assert_eq!(v["backend"]["host"], "build-box");
        let back: Spec = serde_json::from_value(v).unwrap();
        assert_eq!(back, ssh);
    }

    #[test]
    fn lock_is_seen_while_held() {
        let d = tempfile::tempdir().unwrap();
        let pd = ProcDir::new(d.path());
        assert!(!pd.supervisor_alive().unwrap());
        let guard = pd.take_lock().unwrap();
        assert!(pd.supervisor_alive().unwrap());
        assert!(pd.take_lock().is_err());
        drop(guard);
        assert!(!pd.supervisor_alive().unwrap());
    }
}
