//! A read-only view of `$TERN_HOME/procs` for people (`tern ps`), safe beside a running
//! gateway's [`crate::ProcessManager`] on the same directory.
//!
//! Why not a second manager: `ProcessManager::open` removes the directories that failed
//! starts left (from the outside, that could be a process the gateway is starting at that
//! very moment), `poll` moves the model's read cursor (`polled`), and the event watchers write
//! `reported` markers and send events. The observer does none of that. It reads `meta.json`,
//! `exit.json`, the supervisor's lock and the log, and talks to a supervisor only for what a
//! person asked: `kill`, `wait`, `resize`, `attach` ([`crate::attach`]). Directories are read
//! when asked, so a process started after the observer was made is found as well; one whose
//! supervisor has not written `meta.json` yet is not listed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::ProcError;
use crate::attach::Attached;
use crate::blocking;
use crate::layout::{Meta, ProcDir, read_json, valid_id};
use crate::log::{LogSlice, read_range};
use crate::manager::KillOutcome;
use crate::protocol::{Request, call, call_ok};
use crate::status::{ProcInfo, info, status_of};

/// How often a wait looks at the status again (between the supervisor's last answer and the
/// release of its lock the status can still read running for an instant).
const SETTLE: Duration = Duration::from_millis(50);

/// Read-only access to the processes under one `procs/` directory.
#[derive(Clone, Debug)]
pub struct Observer {
    root: PathBuf,
}

/// `owner`: the session a process moved to (see [`ProcDir::owner`]).
#[derive(serde::Deserialize)]
struct Owner {
    session_id: Option<String>,
}

/// Reads one process directory (blocking): `None` while it has no `meta.json`.
fn read_one(pd: &ProcDir, id: &str) -> Result<Option<ProcInfo>, ProcError> {
    let Some(meta) = read_json::<Meta>(&pd.meta())? else {
        return Ok(None);
    };
    if meta.spec.id != id {
        return Err(ProcError::Protocol(format!(
            "{} names another process ({})",
            pd.meta().display(),
            meta.spec.id
        )));
    }
    let status = status_of(pd)?;
    let mut p = info(&meta, status);
    // A reset that kept the session's processes moved this one; unreadable means not moved,
    // as for the manager.
    if let Ok(Some(owner)) = read_json::<Owner>(&pd.owner()) {
        p.session_id = owner.session_id;
    }
    Ok(Some(p))
}

impl Observer {
    /// A view of `root` (`$TERN_HOME/procs`); nothing is read yet.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether the `procs/` directory exists (the gateway creates it).
    pub async fn exists(&self) -> bool {
        tokio::fs::metadata(&self.root)
            .await
            .is_ok_and(|m| m.is_dir())
    }

    /// The directory of process `id`.
    pub fn dir(&self, id: &str) -> ProcDir {
        ProcDir::new(self.root.join(id))
    }

    /// The ids of every process directory (blocking); none when `root` does not exist.
    fn ids(root: &Path) -> Result<Vec<String>, ProcError> {
        let rd = match std::fs::read_dir(root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(ProcError::io(root, e)),
        };
        let mut ids = Vec::new();
        for dirent in rd {
            let dirent = dirent.map_err(|e| ProcError::io(root, e))?;
            if let Some(id) = dirent.file_name().to_str().filter(|n| valid_id(n)) {
                ids.push(id.to_owned());
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Every process with a `meta.json`, oldest first. A directory that cannot be read is
    /// skipped with a warning (one broken directory must not hide the others).
    pub async fn list(&self) -> Result<Vec<ProcInfo>, ProcError> {
        let root = self.root.clone();
        let mut out = blocking(move || {
            let mut out = Vec::new();
            for id in Self::ids(&root)? {
                match read_one(&ProcDir::new(root.join(&id)), &id) {
                    Ok(Some(p)) => out.push(p),
                    // Starting, or removed by the gateway's retention meanwhile.
                    Ok(None) => {}
                    Err(ProcError::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => tracing::warn!(%id, "cannot read the process: {e}"),
                }
            }
            Ok(out)
        })
        .await?;
        out.sort_by(|a, b| (a.started_at_ms, &a.id).cmp(&(b.started_at_ms, &b.id)));
        Ok(out)
    }

    /// The full id of the process `id` names: the id itself, or the unique id it is a prefix
    /// of (with or without `proc_`). [`ProcError::NotFound`] when none matches,
    /// [`ProcError::Invalid`] when several do.
    pub async fn resolve(&self, id: &str) -> Result<String, ProcError> {
        let wanted = if id.starts_with("proc_") {
            id.to_owned()
        } else {
            format!("proc_{id}")
        };
        // Only the shape of an id may reach the file system.
        if !valid_id(&wanted) {
            return Err(ProcError::NotFound(id.to_owned()));
        }
        let root = self.root.clone();
        let ids = blocking(move || Self::ids(&root)).await?;
        if ids.contains(&wanted) {
            return Ok(wanted);
        }
        let matching: Vec<&String> = ids.iter().filter(|i| i.starts_with(&wanted)).collect();
        match matching.as_slice() {
            [] => Err(ProcError::NotFound(id.to_owned())),
            [one] => Ok((*one).clone()),
            many => Err(ProcError::Invalid(format!(
                "{id} is the start of several process ids: {}",
                many.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// One process (its full id).
    pub async fn get(&self, id: &str) -> Result<ProcInfo, ProcError> {
        if !valid_id(id) {
            return Err(ProcError::NotFound(id.to_owned()));
        }
        let pd = self.dir(id);
        let owned = id.to_owned();
        blocking(move || read_one(&pd, &owned))
            .await?
            .ok_or_else(|| ProcError::NotFound(id.to_owned()))
    }

    /// Up to `limit` raw bytes of the log from `offset` (moved forward when that part was
    /// rotated away: see [`LogSlice::start`]).
    pub async fn read_log(
        &self,
        id: &str,
        offset: u64,
        limit: usize,
    ) -> Result<LogSlice, ProcError> {
        let dir = self.dir(id).log_dir();
        blocking(move || read_range(&dir, offset, limit)).await
    }

    /// Waits until the process no longer runs; its status then.
    pub async fn wait(&self, id: &str) -> Result<ProcInfo, ProcError> {
        let socket = self.dir(id).socket();
        loop {
            let p = self.get(id).await?;
            if !p.status.is_running() {
                return Ok(p);
            }
            // Answered at the exit; `None` when the supervisor is gone (the status says how).
            if call(&socket, &Request::Wait).await?.is_none() {
                tokio::time::sleep(SETTLE).await;
            }
        }
    }

    /// TERM to the process group, KILL after `grace` (default: the process's own); returns
    /// once it has exited, or after the grace and a little more.
    pub async fn kill(&self, id: &str, grace: Option<Duration>) -> Result<KillOutcome, ProcError> {
        let grace_ms = grace.map(|g| u64::try_from(g.as_millis()).unwrap_or(u64::MAX));
        let resp = call(&self.dir(id).socket(), &Request::Kill { grace_ms }).await?;
        let signalled = resp.is_some_and(|r| r.ok);
        if signalled {
            let grace = match grace {
                Some(g) => g,
                None => Duration::from_millis(self.meta(id).await?.spec.kill_grace_ms),
            };
            let settle = grace + Duration::from_secs(5);
            let _ = tokio::time::timeout(settle, self.wait(id)).await;
        }
        Ok(KillOutcome {
            info: self.get(id).await?,
            signalled,
        })
    }

    /// Sets the terminal size of a PTY process.
    pub async fn resize(&self, id: &str, cols: u16, rows: u16) -> Result<(), ProcError> {
        call_ok(&self.dir(id).socket(), id, &Request::Resize { cols, rows }).await
    }

    /// Sends input to the process's stdin: [`Request::Write`], [`Request::Submit`] (the text
    /// and Enter) or [`Request::Close`] (the end of input); other requests are refused.
    pub async fn input(&self, id: &str, req: Request) -> Result<(), ProcError> {
        if !matches!(
            req,
            Request::Write { .. } | Request::Submit { .. } | Request::Close
        ) {
            return Err(ProcError::Invalid("not an input request".into()));
        }
        call_ok(&self.dir(id).socket(), id, &req).await
    }

    /// Attaches to a PTY process's terminal ([`crate::attach`]).
    pub async fn attach(&self, id: &str) -> Result<Attached, ProcError> {
        crate::attach::attach(&self.dir(id).socket())
            .await?
            .ok_or_else(|| ProcError::NotRunning(id.to_owned()))
    }

    async fn meta(&self, id: &str) -> Result<Meta, ProcError> {
        let path = self.dir(id).meta();
        blocking(move || read_json::<Meta>(&path))
            .await?
            .ok_or_else(|| ProcError::NotFound(id.to_owned()))
    }
}
