//! The gateway's side: [`ProcessManager`] starts supervisors and answers the `process` actions.
//!
//! Flow:
//! - **open**: scan `procs/` and adopt every directory with a `meta.json` — whatever its
//!   state; the status is read when asked (`exit.json` → exited; the supervisor's lock held →
//!   running; neither → lost). A directory without `meta.json` whose lock is free is what a
//!   start that failed half-way left, and is removed.
//! - **spawn**: check the cap and the working directory → create `procs/<id>/` and its
//!   `spec.json` → start the supervisor (`tern supervise DIR`) in a new session, stderr into
//!   `supervisor.log` → read its readiness line (it has the child's pid, or the reason it
//!   could not start) → read `meta.json` → registered. A task reaps the supervisor when it
//!   ends, as long as this manager lives. With the ssh backend ([`crate::ssh`]) the working
//!   directory is remote: a preflight `ssh` checks the host and the directory instead.
//! - **poll** / **log**: read the log by offset ([`crate::log`]); `poll` remembers how far it
//!   read in `polled`, so a restarted gateway goes on where it stopped. Text for the model
//!   goes through [`crate::output::for_model`].
//! - **write** / **submit** / **close** / **kill** / **wait**: one request over the
//!   supervisor's socket ([`crate::protocol`]). `wait` is answered by the supervisor when the
//!   child has exited; a closed connection means the supervisor is gone.
//!
//! - **events** (opt-in, [`ProcessManager::events`]): `Started` after a spawn; `Exited`
//!   from a watcher task per process that waits on its socket and, once the status is no
//!   longer running, writes `reported` and sends the event, so a restarted gateway reports
//!   an exit that happened while it was down exactly then, and never again.
//! - **prune**: directories of processes that ended longer ago than the retention are
//!   removed; **kill_session** kills every running process a session started.
//!
//! Blocking file work (small JSON files, locks, log reads) runs on tokio's blocking pool.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use process_wrap::tokio::{CommandWrap, ProcessSession};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use crate::ProcError;
use crate::blocking;
use crate::follow::{Follow, Followed, Owner, WatchSink};
use crate::layout::{
    Backend, MAX_SOCKET_PATH, Meta, ProcDir, Spec, new_id, read_json, valid_id, write_atomic,
    write_json_atomic,
};
use crate::log::read_range;
use crate::output::{complete_utf8_len, for_model, leading_continuation_len};
use crate::protocol::{Request, Response, call, call_ok};
use crate::status::{ProcInfo, ProcStatus, info, status_of};

/// How the supervisor is started: `program args… DIR`.
#[derive(Clone, Debug)]
pub struct SupervisorCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

impl SupervisorCommand {
    /// This very binary in its hidden `supervise` mode (`tern supervise DIR`).
    pub fn current_exe() -> Result<Self, ProcError> {
        let program = std::env::current_exe()
            .map_err(|e| ProcError::Spawn(format!("cannot find the tern binary: {e}")))?;
        Ok(Self {
            program,
            args: vec!["supervise".into()],
        })
    }
}

/// The manager's settings.
#[derive(Clone, Debug)]
pub struct ManagerConfig {
    /// `$TERN_HOME/procs`.
    pub root: PathBuf,
    pub supervisor: SupervisorCommand,
    /// Output bytes kept on disk per process (default 64 MiB).
    pub log_max_bytes: u64,
    /// Running processes at most (default 64).
    pub max_running: usize,
    /// Between TERM and KILL (default 5 s).
    pub kill_grace: Duration,
    /// The longest `wait` (default 10 min); longer timeouts are clamped.
    pub max_wait: Duration,
    /// Most output bytes one `poll` returns (default 16 KiB): the newest, when there is more.
    pub poll_max_bytes: usize,
    /// Most bytes one `log` read returns (default 64 KiB).
    pub log_max_read: usize,
    /// PTY size (columns, rows; default 120 × 40).
    pub pty_size: (u16, u16),
    /// Where processes run (default: here). With ssh, a spawn's `workdir` is a remote path.
    pub backend: Backend,
    /// Watch-pattern notifications per process at most one per this (default 30 s); the
    /// matches in between are told together.
    pub watch_interval: Duration,
}

impl ManagerConfig {
    pub fn new(root: impl Into<PathBuf>, supervisor: SupervisorCommand) -> Self {
        Self {
            root: root.into(),
            supervisor,
            log_max_bytes: 64 * 1024 * 1024,
            max_running: 64,
            kill_grace: Duration::from_secs(5),
            max_wait: Duration::from_secs(600),
            poll_max_bytes: 16 * 1024,
            log_max_read: 64 * 1024,
            pty_size: (120, 40),
            backend: Backend::Local,
            watch_interval: Duration::from_secs(30),
        }
    }
}

/// What to start.
#[derive(Clone, Debug, Default)]
pub struct SpawnRequest {
    pub command: String,
    /// Must exist; made absolute. With the ssh backend, a path on the remote host (relative
    /// to its configured working directory, or its home; empty: that directory).
    pub workdir: PathBuf,
    pub pty: bool,
    pub session_id: Option<String>,
    /// Recorded in the process's spec for the gateway's notifications.
    pub notify_on_complete: bool,
    /// Regular expressions on the output; each must compile. Recorded in the spec.
    pub watch_patterns: Vec<String>,
    /// The sandbox of the child; `None`: unconfined (tests, and embedders without one).
    pub sandbox: Option<crate::layout::SandboxSpec>,
}

/// Most watch patterns one process may have, and the longest one (bytes).
pub const MAX_WATCH_PATTERNS: usize = 16;
const MAX_WATCH_PATTERN_LEN: usize = 1024;

/// Checks that every watch pattern is a valid regular expression of sensible size.
pub fn validate_watch_patterns(patterns: &[String]) -> Result<(), ProcError> {
    if patterns.len() > MAX_WATCH_PATTERNS {
        return Err(ProcError::Invalid(format!(
            "at most {MAX_WATCH_PATTERNS} watch patterns"
        )));
    }
    for p in patterns {
        if p.is_empty() || p.len() > MAX_WATCH_PATTERN_LEN {
            return Err(ProcError::Invalid(format!(
                "a watch pattern is 1 to {MAX_WATCH_PATTERN_LEN} bytes"
            )));
        }
        regex::RegexBuilder::new(p)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| ProcError::Invalid(format!("watch pattern {p:?} is not valid: {e}")))?;
    }
    Ok(())
}

/// What `poll` answers: the status and the output since the last poll.
#[derive(Clone, Debug, Serialize)]
pub struct Poll {
    #[serde(flatten)]
    pub info: ProcInfo,
    /// New output, control sequences stripped.
    pub output: String,
    /// New bytes not shown (only the newest `poll_max_bytes` are); `log` reads them.
    pub skipped_bytes: u64,
    /// The log offset this poll read up to.
    pub offset: u64,
}

/// What `log` answers.
#[derive(Clone, Debug, Serialize)]
pub struct LogChunk {
    pub output: String,
    /// Log offsets of the bytes shown: `[start, end)`.
    pub start: u64,
    pub end: u64,
    /// Bytes of output in all so far.
    pub total: u64,
    /// Set when the start asked for was rotated out of the log.
    pub rotated: bool,
}

/// What `wait` answers.
#[derive(Clone, Debug, Serialize)]
pub struct WaitOutcome {
    #[serde(flatten)]
    pub info: ProcInfo,
    pub timed_out: bool,
    pub interrupted: bool,
}

/// What `kill` answers.
#[derive(Clone, Debug, Serialize)]
pub struct KillOutcome {
    #[serde(flatten)]
    pub info: ProcInfo,
    /// False when it had already exited.
    pub signalled: bool,
}

struct Entry {
    meta: Meta,
    pd: ProcDir,
    /// How far `poll` has read; persisted in `polled`.
    polled: tokio::sync::Mutex<u64>,
    /// The in-memory window, while a follower runs ([`crate::follow`]).
    followed: Arc<Followed>,
    /// The session it belongs to: the spec's, or the one it moved to (`owner`).
    owner: Owner,
}

/// What `owner` holds.
#[derive(Serialize, serde::Deserialize)]
struct OwnerRecord {
    session_id: Option<String>,
}

impl Entry {
    fn new(meta: Meta, pd: ProcDir, polled: u64) -> Self {
        // A moved process's `owner` wins over its spec; unreadable means not moved.
        let owner = read_json::<OwnerRecord>(&pd.owner())
            .ok()
            .flatten()
            .map_or_else(|| meta.spec.session_id.clone(), |o| o.session_id);
        Self {
            meta,
            pd,
            polled: tokio::sync::Mutex::new(polled),
            followed: Arc::default(),
            owner: Arc::new(Mutex::new(owner)),
        }
    }

    fn session(&self) -> Option<String> {
        self.owner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn info(&self, status: ProcStatus) -> ProcInfo {
        ProcInfo {
            session_id: self.session(),
            ..info(&self.meta, status)
        }
    }
}

/// What happened to a process: for hooks and notifications.
#[derive(Clone, Debug)]
pub enum ProcEvent {
    /// Spawned by this manager.
    Started(ProcInfo),
    /// Exited (or lost its supervisor); reported once per process, across restarts.
    Exited(ProcInfo),
}

/// The gateway's registry of background processes. Cheap to share behind an `Arc`.
pub struct ProcessManager {
    cfg: ManagerConfig,
    procs: Mutex<HashMap<String, Arc<Entry>>>,
    /// Where events go, once someone asked for them.
    events: Mutex<Option<tokio::sync::mpsc::UnboundedSender<ProcEvent>>>,
    /// Where watch-pattern matches go (set before [`ProcessManager::events`]).
    watch_sink: Mutex<Option<Arc<dyn WatchSink>>>,
    /// Ends the watchers when the manager is dropped.
    shutdown: CancellationToken,
    /// Held by a spawn from the running cap's check until its process is listed, so
    /// concurrent tool calls cannot start more than `max_running` between them. (A local
    /// start is a few milliseconds: the supervisor's exec and its readiness line.)
    spawning: tokio::sync::Mutex<()>,
}

impl Drop for ProcessManager {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

fn read_polled(pd: &ProcDir) -> u64 {
    std::fs::read_to_string(pd.polled())
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// How long the exit report waits for the follower's last matches.
const FOLLOWER_FINISH: Duration = Duration::from_secs(10);
/// How long a new supervisor gets for its readiness line. It only sets up files and starts
/// the child, so this is generous; the bound matters because spawns wait for each other
/// (the running cap's lock). One that misses it is killed with its child.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Follows one process until it is no longer running; `None` when its exit was reported
/// already.
async fn until_ended(entry: &Entry) -> Option<ProcStatus> {
    let id = &entry.meta.spec.id;
    loop {
        let pd = entry.pd.clone();
        let state = blocking(move || {
            if pd.reported().exists() {
                return Ok(None);
            }
            status_of(&pd).map(Some)
        })
        .await;
        match state {
            Ok(None) => return None,
            Ok(Some(status)) if !status.is_running() => return Some(status),
            Ok(Some(_)) => {}
            Err(e) => tracing::warn!(%id, "cannot read the process's status: {e}"),
        }
        match call(&entry.pd.socket(), &Request::Wait).await {
            // Answered at the exit, or the supervisor is gone: look at the status again.
            Ok(_) => {}
            Err(e) => tracing::warn!(%id, "cannot wait for the process: {e}"),
        }
        // Between the supervisor's answer and its lock's release, the status may still
        // read running for an instant; do not spin meanwhile.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Records that the exit is reported, then sends it: at most once per process, across
/// managers (a crash between the two loses the event rather than repeating it).
async fn report_exit(
    entry: &Entry,
    status: ProcStatus,
    tx: &tokio::sync::mpsc::UnboundedSender<ProcEvent>,
) {
    if status == ProcStatus::Lost && entry.meta.spec.backend == Backend::Local {
        let meta = entry.meta.clone();
        let _ = blocking(move || {
            end_orphan(&meta);
            Ok(())
        })
        .await;
    }
    let path = entry.pd.reported();
    if let Err(e) = blocking(move || write_atomic(&path, b"")).await {
        tracing::warn!(id = %entry.meta.spec.id, "cannot record that the exit was reported: {e}");
    }
    let _ = tx.send(ProcEvent::Exited(entry.info(status)));
}

impl ProcessManager {
    /// Opens the registry on `cfg.root` and adopts every process directory in it.
    pub async fn open(cfg: ManagerConfig) -> Result<Self, ProcError> {
        if let Backend::Ssh(t) = &cfg.backend {
            t.validate()?;
        }
        let root = cfg.root.clone();
        let (entries, running) = blocking(move || {
            let entries = adopt_all(&root)?;
            let running = entries
                .iter()
                .filter(|e| matches!(status_of(&e.pd), Ok(ProcStatus::Running)))
                .count();
            Ok((entries, running))
        })
        .await?;
        tracing::info!(
            adopted = entries.len(),
            running,
            "background processes adopted"
        );
        let procs = entries
            .into_iter()
            .map(|e| (e.meta.spec.id.clone(), Arc::new(e)))
            .collect();
        Ok(Self {
            cfg,
            procs: Mutex::new(procs),
            events: Mutex::new(None),
            watch_sink: Mutex::new(None),
            shutdown: CancellationToken::new(),
            spawning: tokio::sync::Mutex::new(()),
        })
    }

    /// Starts reporting events: from now on every spawn sends `Started`, and a watcher per
    /// process (every adopted one included) sends `Exited` once it ends — at once for one
    /// that ended unreported while no manager ran. Call it once; a second call moves the
    /// events to the new receiver for processes spawned later.
    pub fn events(&self) -> tokio::sync::mpsc::UnboundedReceiver<ProcEvent> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        *self.events.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        for e in self.entries() {
            self.watch(e);
        }
        rx
    }

    fn watch(&self, entry: Arc<Entry>) {
        let Some(tx) = self
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        else {
            return;
        };
        let shutdown = self.shutdown.clone();
        let sink = self
            .watch_sink
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let interval = self.cfg.watch_interval;
        tokio::spawn(async move {
            let follower = Self::follow(&entry, sink, interval, &shutdown).await;
            let ended = tokio::select! {
                () = shutdown.cancelled() => return,
                s = until_ended(&entry) => s,
            };
            if follower {
                // The last matches before the exit; bounded, as a sink may be failing.
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = entry.followed.done.cancelled() => {}
                    () = tokio::time::sleep(FOLLOWER_FINISH) => {
                        tracing::warn!(id = %entry.meta.spec.id, "the output follower did not finish; the exit is reported anyway");
                    }
                }
            }
            // Not cancelled half-way: the record and the event go together.
            if let Some(status) = ended {
                report_exit(&entry, status, &tx).await;
            }
        });
    }

    /// Sets where watch-pattern matches go; call it before [`Self::events`].
    pub fn set_watch_sink(&self, sink: Arc<dyn WatchSink>) {
        *self.watch_sink.lock().unwrap_or_else(|p| p.into_inner()) = Some(sink);
    }

    /// Starts the follower of `entry` (window and watch patterns) when there is something
    /// to follow: a running process, or unreported output still to match. True if started.
    async fn follow(
        entry: &Arc<Entry>,
        sink: Option<Arc<dyn WatchSink>>,
        interval: Duration,
        shutdown: &CancellationToken,
    ) -> bool {
        let pd = entry.pd.clone();
        let (status, reported) =
            match blocking(move || Ok((status_of(&pd)?, pd.reported().exists()))).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(id = %entry.meta.spec.id, "cannot read the status: {e}");
                    return false;
                }
            };
        let spec = &entry.meta.spec;
        let watching = sink.is_some() && !spec.watch_patterns.is_empty();
        if !(status.is_running() || (watching && !reported)) {
            return false;
        }
        let f = Follow {
            pd: entry.pd.clone(),
            info: entry.info(status),
            owner: Arc::clone(&entry.owner),
            patterns: crate::follow::compile(&spec.id, &spec.watch_patterns),
            sink,
            interval,
            followed: Arc::clone(&entry.followed),
            shutdown: shutdown.clone(),
        };
        tokio::spawn(crate::follow::run(f));
        true
    }

    /// Removes processes that exited more than `keep` ago (their directories and logs);
    /// returns their ids. Running and lost processes are kept.
    pub async fn prune(&self, keep: Duration) -> Result<Vec<String>, ProcError> {
        let cutoff =
            tern_util::now_ms().saturating_sub(i64::try_from(keep.as_millis()).unwrap_or(i64::MAX));
        let mut removed = Vec::new();
        for e in self.entries() {
            let pd = e.pd.clone();
            let status = blocking(move || status_of(&pd)).await?;
            let ended_at_ms = match status {
                ProcStatus::Exited { ended_at_ms, .. } => ended_at_ms,
                // A lost one counts from when its loss was reported (until then it is kept:
                // its exit is still to be told).
                ProcStatus::Lost => {
                    let reported = e.pd.reported();
                    match blocking(move || {
                        Ok(std::fs::metadata(&reported).and_then(|m| m.modified()).ok())
                    })
                    .await?
                    {
                        Some(t) => tern_util::clock::unix_ms(t),
                        None => continue,
                    }
                }
                ProcStatus::Running => continue,
            };
            if ended_at_ms > cutoff {
                continue;
            }
            let id = e.meta.spec.id.clone();
            self.procs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            let dir = e.pd.dir.clone();
            blocking(move || std::fs::remove_dir_all(&dir).map_err(|err| ProcError::io(&dir, err)))
                .await?;
            tracing::info!(%id, "finished process removed after its retention");
            removed.push(id);
        }
        Ok(removed)
    }

    /// Kills every running process that `session_id` started (concurrently); returns their
    /// ids.
    pub async fn kill_session(self: &Arc<Self>, session_id: &str) -> Vec<String> {
        let mut set = tokio::task::JoinSet::new();
        for p in self.list().await.unwrap_or_default() {
            if p.status.is_running() && p.session_id.as_deref() == Some(session_id) {
                let me = Arc::clone(self);
                set.spawn(async move {
                    match me.kill(&p.id).await {
                        Ok(_) => Some(p.id),
                        Err(e) => {
                            tracing::warn!(id = %p.id, "cannot kill: {e}");
                            None
                        }
                    }
                });
            }
        }
        let mut killed = Vec::new();
        while let Some(r) = set.join_next().await {
            if let Ok(Some(id)) = r {
                killed.push(id);
            }
        }
        killed.sort();
        killed
    }

    /// Moves `from`'s running processes to the session `to` (a reset that keeps them):
    /// they are listed, touched and notified as `to`'s from now on, also after a restart.
    /// Returns their ids.
    pub async fn move_session(&self, from: &str, to: &str) -> Result<Vec<String>, ProcError> {
        let mut moved = Vec::new();
        for e in self.entries() {
            if e.session().as_deref() != Some(from) {
                continue;
            }
            let pd = e.pd.clone();
            if !blocking(move || status_of(&pd)).await?.is_running() {
                continue;
            }
            let path = e.pd.owner();
            let rec = OwnerRecord {
                session_id: Some(to.to_owned()),
            };
            blocking(move || write_json_atomic(&path, &rec)).await?;
            *e.owner.lock().unwrap_or_else(|p| p.into_inner()) = Some(to.to_owned());
            moved.push(e.meta.spec.id.clone());
        }
        moved.sort();
        Ok(moved)
    }

    pub fn config(&self) -> &ManagerConfig {
        &self.cfg
    }

    fn entry(&self, id: &str) -> Result<Arc<Entry>, ProcError> {
        self.procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| ProcError::NotFound(id.to_owned()))
    }

    fn entries(&self) -> Vec<Arc<Entry>> {
        self.procs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    async fn info_of(entry: &Arc<Entry>) -> Result<ProcInfo, ProcError> {
        let pd = entry.pd.clone();
        let status = blocking(move || status_of(&pd)).await?;
        Ok(entry.info(status))
    }

    /// Every known process, oldest first.
    pub async fn list(&self) -> Result<Vec<ProcInfo>, ProcError> {
        let mut out = Vec::new();
        for e in self.entries() {
            out.push(Self::info_of(&e).await?);
        }
        out.sort_by(|a, b| (a.started_at_ms, &a.id).cmp(&(b.started_at_ms, &b.id)));
        Ok(out)
    }

    /// One process's status.
    pub async fn get(&self, id: &str) -> Result<ProcInfo, ProcError> {
        Self::info_of(&self.entry(id)?).await
    }

    /// Starts a process under a supervisor of its own; returns once it runs.
    pub async fn spawn(&self, req: SpawnRequest) -> Result<ProcInfo, ProcError> {
        if req.command.trim().is_empty() {
            return Err(ProcError::Invalid("the command is empty".into()));
        }
        validate_watch_patterns(&req.watch_patterns)?;
        let workdir = match &self.cfg.backend {
            Backend::Local => {
                std::path::absolute(&req.workdir).map_err(|e| ProcError::io(&req.workdir, e))?
            }
            // A path on the remote host: the preflight below checks it there.
            Backend::Ssh(t) => PathBuf::from(t.remote_workdir(&req.workdir.to_string_lossy())?),
        };
        if self.cfg.backend.is_local()
            && !tokio::fs::metadata(&workdir)
                .await
                .is_ok_and(|m| m.is_dir())
        {
            return Err(ProcError::Invalid(format!(
                "working directory does not exist: {}",
                workdir.display()
            )));
        }
        if let Backend::Ssh(t) = &self.cfg.backend {
            // An unreachable host or a missing directory fails here, clearly, rather than
            // as a process that exits with 255. Before the cap's lock: it can take seconds.
            t.preflight(&workdir.to_string_lossy()).await?;
        }
        let _spawning = self.spawning.lock().await;
        let running = self
            .list()
            .await?
            .iter()
            .filter(|p| p.status.is_running())
            .count();
        if running >= self.cfg.max_running {
            return Err(ProcError::TooMany(self.cfg.max_running));
        }

        let root = self.cfg.root.clone();
        let (id, pd) = blocking(move || create_dir(&root)).await?;
        let spec = Spec {
            id: id.clone(),
            command: req.command,
            workdir,
            pty: req.pty,
            session_id: req.session_id,
            cols: self.cfg.pty_size.0,
            rows: self.cfg.pty_size.1,
            log_max_bytes: self.cfg.log_max_bytes,
            kill_grace_ms: u64::try_from(self.cfg.kill_grace.as_millis()).unwrap_or(u64::MAX),
            notify_on_complete: req.notify_on_complete,
            watch_patterns: req.watch_patterns,
            backend: self.cfg.backend.clone(),
            sandbox: req.sandbox,
        };
        match self.start_supervisor(&pd, spec).await {
            Ok(meta) => {
                let entry = Arc::new(Entry::new(meta, pd, 0));
                self.procs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id.clone(), Arc::clone(&entry));
                tracing::info!(%id, pid = entry.meta.child_pid, "background process started");
                let started = Self::info_of(&entry).await?;
                if let Some(tx) = &*self.events.lock().unwrap_or_else(|p| p.into_inner()) {
                    let _ = tx.send(ProcEvent::Started(started.clone()));
                }
                self.watch(entry);
                Ok(started)
            }
            Err(e) => {
                let dir = pd.dir.clone();
                let _ = blocking(move || {
                    std::fs::remove_dir_all(&dir).map_err(|e| ProcError::io(&dir, e))
                })
                .await;
                Err(e)
            }
        }
    }

    async fn start_supervisor(&self, pd: &ProcDir, spec: Spec) -> Result<Meta, ProcError> {
        let socket = pd.socket();
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(ProcError::Spawn(format!(
                "the socket path {} is longer than {MAX_SOCKET_PATH} bytes; use a shorter TERN_HOME",
                socket.display()
            )));
        }
        let spec_path = pd.spec();
        let log_path = pd.supervisor_log();
        let stderr = blocking(move || {
            write_json_atomic(&spec_path, &spec)?;
            crate::layout::private_file(&log_path).map_err(|e| ProcError::io(&log_path, e))
        })
        .await?;
        let sup = &self.cfg.supervisor;
        let mut cmd = CommandWrap::with_new(&sup.program, |c| {
            c.args(&sup.args)
                .arg(&pd.dir)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::from(stderr));
        });
        cmd.wrap(ProcessSession);
        let mut child = cmd.spawn().map_err(|e| {
            ProcError::Spawn(format!(
                "cannot start the supervisor {}: {e}",
                sup.program.display()
            ))
        })?;
        drop(cmd);
        let stdout = child
            .stdout()
            .take()
            .ok_or_else(|| ProcError::Spawn("the supervisor has no stdout".into()))?;
        let mut line = String::new();
        let read =
            tokio::time::timeout(READY_TIMEOUT, BufReader::new(stdout).read_line(&mut line)).await;
        if read.is_err() {
            // Its signal handlers come after readiness, so the child (if it was started: its
            // meta.json says) is ended here, then the supervisor. Its reaper starts after
            // readiness too: the child is unreaped, so its group id is still its own.
            let meta_path = pd.meta();
            if let Ok(Some(meta)) = blocking(move || read_json::<Meta>(&meta_path)).await {
                let group = nix::unistd::Pid::from_raw(meta.child_pid);
                let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            }
            let _ = child.start_kill();
        }
        // Reap the supervisor whenever it ends (while this runtime lives; after that, init).
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        let ready: Option<Response> = match read {
            Ok(Ok(n)) if n > 0 => serde_json::from_str(&line).ok(),
            Err(_) => {
                return Err(ProcError::Spawn(format!(
                    "the supervisor was not ready within {} s; it and its command were killed",
                    READY_TIMEOUT.as_secs()
                )));
            }
            _ => None,
        };
        match ready {
            Some(r) if r.ok => {}
            Some(r) => {
                return Err(ProcError::Spawn(
                    r.error.unwrap_or_else(|| "the supervisor failed".into()),
                ));
            }
            None => {
                let log = tokio::fs::read_to_string(pd.supervisor_log())
                    .await
                    .unwrap_or_default();
                return Err(ProcError::Spawn(format!(
                    "the supervisor ended before it was ready: {}",
                    log.trim()
                )));
            }
        }
        let meta_path = pd.meta();
        blocking(move || read_json::<Meta>(&meta_path))
            .await?
            .ok_or_else(|| ProcError::Spawn("the supervisor wrote no meta.json".into()))
    }

    /// The status and the output since the last poll (at most `poll_max_bytes`, the newest).
    pub async fn poll(&self, id: &str) -> Result<Poll, ProcError> {
        let entry = self.entry(id)?;
        let mut polled = entry.polled.lock().await;
        // The status first: when it says exited, the log read after it is complete.
        let info = Self::info_of(&entry).await?;
        let pd = entry.pd.clone();
        let from = *polled;
        let max = self.cfg.poll_max_bytes;
        let running = info.status.is_running();
        // The window when it holds the newest output from `from` on; the log otherwise.
        let windowed = Self::fresh_window(&entry, running).await?.and_then(|end| {
            let start = from.max(end.saturating_sub(max as u64));
            entry.followed.read(start, max, running)
        });
        let (slice, skipped) = match windowed {
            Some(slice) => {
                let skipped = slice.start.saturating_sub(from);
                (slice, skipped)
            }
            None => {
                blocking(move || {
                    let total = read_range(&pd.log_dir(), u64::MAX, 0)?.total;
                    let start = from.max(total.saturating_sub(max as u64));
                    let slice = read_range(&pd.log_dir(), start, max)?;
                    Ok((slice, start.saturating_sub(from)))
                })
                .await?
            }
        };
        let skip = if skipped > 0 || slice.start > from {
            leading_continuation_len(&slice.data)
        } else {
            0
        };
        let end = complete_utf8_len(&slice.data);
        let output = for_model(&slice.data[skip..end.max(skip)]);
        let new_offset = slice.start + end as u64;
        let skipped_bytes = slice.start.saturating_sub(from) + skip as u64;
        if new_offset != *polled {
            *polled = new_offset;
            let path = entry.pd.polled();
            blocking(move || write_atomic(&path, new_offset.to_string().as_bytes())).await?;
        }
        Ok(Poll {
            info,
            output,
            skipped_bytes,
            offset: new_offset,
        })
    }

    /// The end offset of the in-memory window when reads may use it: a follower runs and its
    /// window has caught up with the log on disk. The follower reads the log a moment after
    /// the supervisor writes it (up to its idle interval later); a read in between must not
    /// miss output that is already in the log (`tern ps log` would show it), so a lagging
    /// window gives way to the disk. Costs a directory listing and a `stat`, not a read.
    async fn fresh_window(entry: &Entry, running: bool) -> Result<Option<u64>, ProcError> {
        let Some((_, end)) = entry.followed.bounds(running) else {
            return Ok(None);
        };
        if !running {
            // Trusted only once complete (`bounds`): it holds the process's last byte.
            return Ok(Some(end));
        }
        let dir = entry.pd.log_dir();
        let on_disk = blocking(move || Ok(read_range(&dir, u64::MAX, 0)?.total)).await?;
        Ok((end >= on_disk).then_some(end))
    }

    /// Whether the process's exit has been reported (the `reported` marker, written before
    /// the `Exited` event): true also for a process no longer kept; false while it runs.
    pub async fn exit_reported(&self, id: &str) -> Result<bool, ProcError> {
        let Ok(entry) = self.entry(id) else {
            return Ok(true);
        };
        let path = entry.pd.reported();
        blocking(move || Ok(path.exists())).await
    }

    /// How far the in-memory window has read the process's log (`None` without a follower
    /// or before its first read): for diagnostics and tests.
    pub fn window_end(&self, id: &str) -> Result<Option<u64>, ProcError> {
        Ok(self.entry(id)?.followed.bounds(true).map(|(_, end)| end))
    }

    /// Up to `limit` bytes (clamped to `log_max_read`) of the full log from `offset`; without
    /// an offset, the last `limit` bytes.
    pub async fn log(
        &self,
        id: &str,
        offset: Option<u64>,
        limit: Option<usize>,
    ) -> Result<LogChunk, ProcError> {
        let entry = self.entry(id)?;
        let limit = limit
            .unwrap_or(self.cfg.log_max_read)
            .clamp(1, self.cfg.log_max_read);
        let dir = entry.pd.log_dir();
        let running = Self::info_of(&entry).await?.status.is_running();
        let windowed = match (Self::fresh_window(&entry, running).await?, offset) {
            (None, _) => None,
            (Some(_), Some(o)) => entry.followed.read(o, limit, running),
            (Some(_), None) => entry.followed.tail(limit, running),
        };
        let slice = if let Some(s) = windowed {
            s
        } else {
            blocking(move || {
                let from = match offset {
                    Some(o) => o,
                    None => read_range(&dir, u64::MAX, 0)?
                        .total
                        .saturating_sub(limit as u64),
                };
                read_range(&dir, from, limit)
            })
            .await?
        };
        let rotated = offset.is_some_and(|o| slice.start > o);
        let skip = if offset.is_none() || rotated {
            leading_continuation_len(&slice.data)
        } else {
            0
        };
        let end = complete_utf8_len(&slice.data).max(skip);
        Ok(LogChunk {
            output: for_model(&slice.data[skip..end]),
            start: slice.start + skip as u64,
            end: slice.start + end as u64,
            total: slice.total,
            rotated,
        })
    }

    /// Waits until the process has exited, `timeout` (clamped to `max_wait`) has passed, or
    /// `cancel` fires.
    pub async fn wait(
        &self,
        id: &str,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<WaitOutcome, ProcError> {
        let entry = self.entry(id)?;
        let timeout = timeout.min(self.cfg.max_wait);
        let socket = entry.pd.socket();
        let (mut timed_out, mut interrupted) = (false, false);
        tokio::select! {
            r = call(&socket, &Request::Wait) => { r?; }
            () = tokio::time::sleep(timeout) => timed_out = true,
            () = cancel.cancelled() => interrupted = true,
        }
        let info = Self::info_of(&entry).await?;
        Ok(WaitOutcome {
            timed_out: timed_out && info.status.is_running(),
            interrupted: interrupted && info.status.is_running(),
            info,
        })
    }

    /// TERM to the process group, KILL after the grace period; returns once the process
    /// has exited (or the grace period and a little more have passed).
    pub async fn kill(&self, id: &str) -> Result<KillOutcome, ProcError> {
        let entry = self.entry(id)?;
        let resp = call(&entry.pd.socket(), &Request::Kill { grace_ms: None }).await?;
        let signalled = resp.is_some_and(|r| r.ok);
        if signalled {
            // An ssh process also needs the remote kill's connection.
            let extra = if entry.meta.spec.backend.is_local() {
                2
            } else {
                10
            };
            let settle = self.cfg.kill_grace + Duration::from_secs(extra);
            let _ = tokio::time::timeout(settle, call(&entry.pd.socket(), &Request::Wait)).await;
        }
        Ok(KillOutcome {
            info: Self::info_of(&entry).await?,
            signalled,
        })
    }

    /// Writes `data` to the process's stdin.
    pub async fn write(&self, id: &str, data: &str) -> Result<(), ProcError> {
        self.request(
            id,
            Request::Write {
                data: data.to_owned(),
            },
        )
        .await
    }

    /// Writes `data` and Enter to the process's stdin.
    pub async fn submit(&self, id: &str, data: &str) -> Result<(), ProcError> {
        self.request(
            id,
            Request::Submit {
                data: data.to_owned(),
            },
        )
        .await
    }

    /// Ends the process's stdin.
    pub async fn close(&self, id: &str) -> Result<(), ProcError> {
        self.request(id, Request::Close).await
    }

    async fn request(&self, id: &str, req: Request) -> Result<(), ProcError> {
        call_ok(&self.entry(id)?.pd.socket(), id, &req).await
    }
}

/// Creates `root/<new id>/`, retrying on the (unlikely) clash of random ids.
fn create_dir(root: &Path) -> Result<(String, ProcDir), ProcError> {
    crate::layout::private_dir_all(root).map_err(|e| ProcError::io(root, e))?;
    for _ in 0..8 {
        let id = new_id()?;
        let dir = root.join(&id);
        match crate::layout::private_dir(&dir) {
            Ok(()) => return Ok((id, ProcDir::new(dir))),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(ProcError::io(&dir, e)),
        }
    }
    Err(ProcError::Spawn("cannot find a free process id".into()))
}

/// Reads every process directory under `root` (blocking).
fn adopt_all(root: &Path) -> Result<Vec<Entry>, ProcError> {
    crate::layout::private_dir_all(root).map_err(|e| ProcError::io(root, e))?;
    let mut out = Vec::new();
    for dirent in std::fs::read_dir(root).map_err(|e| ProcError::io(root, e))? {
        let dirent = dirent.map_err(|e| ProcError::io(root, e))?;
        let name = dirent.file_name();
        let Some(id) = name.to_str().filter(|n| valid_id(n)) else {
            continue;
        };
        let pd = ProcDir::new(dirent.path());
        match read_json::<Meta>(&pd.meta()) {
            Ok(Some(meta)) if meta.spec.id == id => {
                let polled = read_polled(&pd);
                out.push(Entry::new(meta, pd, polled));
            }
            Ok(Some(_)) => tracing::warn!(dir = %pd.dir.display(), "meta.json names another id"),
            Ok(None) => {
                if pd.supervisor_alive()? {
                    tracing::warn!(%id, "a supervisor is starting here; not adopted");
                } else {
                    tracing::info!(%id, "removing what a failed start left");
                    if let Err(e) = std::fs::remove_dir_all(&pd.dir) {
                        tracing::warn!(%id, "cannot remove: {e}");
                    }
                }
            }
            Err(e) => tracing::warn!(%id, "cannot adopt: {e}"),
        }
    }
    Ok(out)
}

/// A lost process's supervisor died without ending its child, which may still run with its
/// group: TERM then KILL it, but only when the pid still names that child — a process group
/// leader that started within a few seconds of the recorded start (pids are reused).
fn end_orphan(meta: &Meta) {
    let pid = meta.child_pid;
    let Some(started_ms) = process_start_ms(pid) else {
        return;
    };
    let leader = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(pid)))
        .is_ok_and(|g| g.as_raw() == pid);
    if !leader || (started_ms - meta.started_at_ms).abs() > 5_000 {
        return;
    }
    let group = nix::unistd::Pid::from_raw(pid);
    tracing::warn!(id = %meta.spec.id, pid, "its supervisor is gone; ending the orphaned process group");
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGTERM);
    std::thread::sleep(Duration::from_millis(500));
    if process_start_ms(pid) == Some(started_ms) {
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    }
}

/// When `pid` started (ms since the epoch), from `/proc` (Linux); `None` when it is gone.
fn process_start_ms(pid: i32) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields follow the last ')'.
    let after = &stat[stat.rfind(')')? + 2..];
    // Field 22 (starttime, clock ticks after boot) is the 20th after the name.
    let ticks: i64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let btime: i64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())?;
    // SAFETY: sysconf reads a configuration value; it has no preconditions.
    let hz: i64 = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz } else { 100 };
    Some(btime * 1000 + ticks * 1000 / hz)
}
