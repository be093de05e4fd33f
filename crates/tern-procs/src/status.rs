//! A process as its directory tells it: where it is ([`ProcStatus`], read by [`status_of`])
//! and what `list` shows of it ([`ProcInfo`]). Shared by the manager, its followers and the
//! read-only [`crate::Observer`].

use std::path::PathBuf;

use serde::Serialize;

use crate::ProcError;
use crate::layout::{Backend, ExitRecord, Meta, ProcDir, read_json};

/// Where a process is.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ProcStatus {
    Running,
    Exited {
        /// The exit code, or 128 + the signal that ended it.
        exit_code: Option<i32>,
        signal: Option<i32>,
        ended_at_ms: i64,
    },
    /// The supervisor is gone without recording an exit (it was killed itself).
    Lost,
}

impl ProcStatus {
    pub fn is_running(&self) -> bool {
        matches!(self, Self::Running)
    }
    fn from_record(rec: &ExitRecord) -> Self {
        Self::Exited {
            exit_code: rec.shell_code(),
            signal: rec.signal,
            ended_at_ms: rec.ended_at_ms,
        }
    }
}

/// A process as `list` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct ProcInfo {
    pub id: String,
    pub command: String,
    pub workdir: PathBuf,
    pub pty: bool,
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub notify_on_complete: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub watch_patterns: Vec<String>,
    pub pid: i32,
    pub supervisor_pid: i32,
    pub started_at_ms: i64,
    /// Where it runs when not here: `ssh://[user@]host[:port]` (`workdir` is a path there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(flatten)]
    pub status: ProcStatus,
}

pub(crate) fn status_of(pd: &ProcDir) -> Result<ProcStatus, ProcError> {
    if let Some(rec) = read_json::<ExitRecord>(&pd.exit())? {
        return Ok(ProcStatus::from_record(&rec));
    }
    if pd.supervisor_alive()? {
        return Ok(ProcStatus::Running);
    }
    // It may have recorded the exit between the two looks.
    match read_json::<ExitRecord>(&pd.exit())? {
        Some(rec) => Ok(ProcStatus::from_record(&rec)),
        None => Ok(ProcStatus::Lost),
    }
}

pub(crate) fn info(meta: &Meta, status: ProcStatus) -> ProcInfo {
    ProcInfo {
        id: meta.spec.id.clone(),
        command: meta.spec.command.clone(),
        workdir: meta.spec.workdir.clone(),
        pty: meta.spec.pty,
        session_id: meta.spec.session_id.clone(),
        notify_on_complete: meta.spec.notify_on_complete,
        watch_patterns: meta.spec.watch_patterns.clone(),
        pid: meta.child_pid,
        supervisor_pid: meta.supervisor_pid,
        started_at_ms: meta.started_at_ms,
        host: match &meta.spec.backend {
            Backend::Local => None,
            Backend::Ssh(t) => Some(t.display()),
        },
        status,
    }
}
