//! Background processes that outlive turns and gateway restarts.
//!
//! Each process runs under a supervisor of its own ([`supervisor`]: `tern supervise DIR`,
//! detached in its own session) that owns the child and its pipe or PTY, writes the whole
//! output to a log under a size cap ([`log`]), records the exit status atomically, and takes
//! stdin and signals over a unix socket ([`protocol`]). The gateway's [`ProcessManager`]
//! ([`manager`]) starts supervisors, talks to them, reads their logs, and on start adopts
//! every supervisor directory it finds — a live supervisor is running, a finished one left
//! its exit status — so neither a restart nor a kill -9 of the gateway loses a process.
//!
//! At a glance: `ProcessManager::spawn` → `procs/<id>/spec.json` → `tern supervise` (setsid)
//! → child + `log/` + `sock` + `meta.json` → readiness line → the manager answers with the
//! id. `poll`/`log` read `log/` by offset; `write`/`submit`/`close`/`kill`/`wait` go over
//! `sock`; the status is `exit.json`, else the supervisor's lock (held = running).
//! [`tools`] puts this before the model: `terminal` with `background: true` and `process`.
//! People use [`Observer`] (`tern ps`): a read-only view of the same directory, safe beside
//! the gateway's manager, and [`attach`] to a PTY process's live terminal.

pub mod attach;
pub mod context;
pub mod follow;
pub mod layout;
pub mod log;
pub mod manager;
pub mod notify;
pub mod observer;
pub mod output;
pub mod protocol;
mod pump;
pub mod ssh;
pub mod status;
pub mod supervisor;
pub mod tools;

use std::path::{Path, PathBuf};

pub use follow::{MatchedLine, WatchBatch, WatchSink, WatchSinkError};
pub use layout::{Backend, ExitRecord, Meta, Spec};
pub use manager::{
    KillOutcome, LogChunk, ManagerConfig, Poll, ProcEvent, ProcessManager, SpawnRequest,
    SupervisorCommand, WaitOutcome, validate_watch_patterns,
};
pub use notify::{ArmError, ExitSummary, ProcessNotifier};
pub use observer::Observer;
pub use status::{ProcInfo, ProcStatus};
pub use supervisor::supervise;

/// What can go wrong with background processes.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no process {0}")]
    NotFound(String),
    #[error("process {0} is not running")]
    NotRunning(String),
    #[error("cannot start the process: {0}")]
    Spawn(String),
    #[error("too many running processes (at most {0}); kill one or wait for one to finish")]
    TooMany(usize),
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The supervisor refused a request (stdin closed, process exited, …).
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Protocol(String),
}

impl ProcError {
    pub(crate) fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }
}

/// Runs `f` on the blocking pool: the process directories are plain files and sockets.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ProcError> + Send + 'static,
) -> Result<T, ProcError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ProcError::Protocol(format!("a blocking task failed: {e}")))?
}
