//! The supervisor: one small process per background process, `tern supervise DIR`.
//!
//! The manager starts it detached (its own session and process group, stdin closed, stderr
//! into `supervisor.log`), so it outlives the gateway: a stop, crash or kill -9 of the gateway
//! leaves it and its child running, and the next gateway adopts the directory.
//!
//! Flow: read `spec.json` → take the directory's lock (held until exit: its release is how
//! the gateway knows the supervisor is gone) → start the log → bind `sock` → spawn the child,
//! `bash -c COMMAND` (for the ssh backend the `ssh` client, [`crate::ssh`], whose kills go
//! to the remote process group), as the leader of its own process group: stdout and stderr
//! into one pipe, or a fresh PTY (portable-pty) whose session it leads → write `meta.json` →
//! print one readiness line ([`Response`]) on stdout for the manager, then point stdout at
//! /dev/null. Then three things run side by side:
//!
//! - the **pump** ([`crate::pump`]): one thread reads the pipe or the PTY into a few buffers,
//!   another appends them to the log ([`LogWriter`]), so the pipe is drained while a chunk is
//!   being written;
//! - the **reaper** thread waits for the child (`waitid` with `WNOWAIT`, then marks it reaped
//!   under the lock that signalling takes, then reaps it, so a signal never reaches a reused
//!   process group id; after a kill it keeps the exited leader unreaped until the rest of its
//!   group is gone or has had its KILL at the end of the grace period);
//! - the socket server answers `write`, `submit`, `close`, `kill` (TERM to the group, KILL
//!   after the grace period to all that is left of it), `wait`, and for a PTY `resize` and
//!   `attach` (the connection then streams the live output, which the pump also hands to
//!   [`crate::attach`]'s fanout, and takes terminal input) ([`crate::protocol`]); SIGTERM or
//!   SIGINT to the supervisor kills the child the same way; SIGHUP is ignored.
//!
//! When the child has exited: wait for the pump to reach the end of the output (bounded, as a
//! background descendant may hold the pipe open) → write `exit.json` atomically → answer the
//! waiters → remove the socket → exit.

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::ProcError;
use crate::attach::{CLIENT_BACKLOG, Fanout, Subscription};
use crate::layout::{Backend, ExitRecord, Meta, ProcDir, Spec, read_json, write_json_atomic};
use crate::log::LogWriter;
use crate::protocol::{MAX_LINE, Request, Response};
use tern_util::now_ms;

/// How long the output may go on after the child exited before the status is recorded
/// anyway (a background descendant can hold the pipe open for ever).
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// How long connected clients get for their last answers before the supervisor exits.
const GOODBYE_GRACE: Duration = Duration::from_secs(2);
/// The output pipe's capacity (Linux's default is 64 KiB). A fast writer hands over more
/// per wake-up, so the pump reads bigger chunks and both sides switch less (see
/// `docs/benchmarks.md`, issue 6). Not larger: a pipe's capacity counts against the user's
/// quota (`fs.pipe-user-pages-soft`, 64 MiB), and 64 processes use a quarter of it.
const PIPE_SIZE: usize = 256 * 1024;

/// Runs the supervisor for the process directory `dir` until its child has exited and the
/// exit status is recorded. Prints the readiness line on stdout.
pub async fn supervise(dir: &Path) -> Result<(), ProcError> {
    let pd = ProcDir::new(dir);
    let started = match start(&pd).await {
        Ok(s) => s,
        Err(e) => {
            ready(&Response::err(e.to_string()));
            return Err(e);
        }
    };
    let mut ok = Response::ok();
    ok.child_pid = Some(started.meta.child_pid);
    ready(&ok);
    tracing::info!(id = %started.meta.spec.id, child_pid = started.meta.child_pid, "supervising");
    run(pd, started).await
}

/// Prints the readiness line, then points stdout at /dev/null so later writes go nowhere
/// (the manager stops reading after this line).
fn ready(resp: &Response) {
    let mut line = serde_json::to_string(resp)
        .unwrap_or_else(|_| r#"{"ok":false,"error":"unencodable readiness"}"#.into());
    line.push('\n');
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(line.as_bytes()).and_then(|()| out.flush()) {
        tracing::warn!("cannot report readiness: {e}");
    }
    drop(out);
    match File::options().write(true).open("/dev/null") {
        Ok(null) => {
            if let Err(e) = nix::unistd::dup2_stdout(&null) {
                tracing::warn!("cannot detach stdout: {e}");
            }
        }
        Err(e) => tracing::warn!("cannot open /dev/null: {e}"),
    }
}

/// What a started supervisor holds.
struct Started {
    meta: Meta,
    _lock: nix::fcntl::Flock<File>,
    listener: UnixListener,
    log: LogWriter,
    output: Box<dyn Read + Send>,
    stdin: Box<dyn Write + Send>,
    /// Kept open for the child's life (dropping the master hangs up the terminal).
    _master: Option<Box<dyn portable_pty::MasterPty + Send>>,
    /// The child's private `TMPDIR`, removed when the supervisor is done.
    _tmpdir: Option<RemoveOnDrop>,
}

/// A directory removed (with what is in it) when this is dropped.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.0.display(), error = %e, "cannot remove the process's temporary directory");
        }
    }
}

async fn start(pd: &ProcDir) -> Result<Started, ProcError> {
    let spec: Spec = read_json(&pd.spec())?
        .ok_or_else(|| ProcError::Protocol(format!("{} is missing", pd.spec().display())))?;
    let lock = pd.take_lock()?;
    let log = LogWriter::create(&pd.log_dir(), spec.log_max_bytes)?;
    let sock = pd.socket();
    match std::fs::remove_file(&sock) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(ProcError::io(&sock, e)),
    }
    let listener = UnixListener::bind(&sock).map_err(|e| ProcError::io(&sock, e))?;
    let (child, tmpdir) = spawn_child(&spec)?;
    let meta = Meta {
        spec,
        supervisor_pid: std::process::id() as i32,
        child_pid: child.pid,
        started_at_ms: now_ms(),
    };
    write_json_atomic(&pd.meta(), &meta)?;
    Ok(Started {
        meta,
        _lock: lock,
        listener,
        log,
        output: child.output,
        stdin: child.stdin,
        _master: child.master,
        _tmpdir: tmpdir.map(RemoveOnDrop),
    })
}

/// The environment a child gets instead of the supervisor's (`None`: the supervisor's).
type ChildEnv = Option<Vec<(OsString, OsString)>>;

/// Starts the child, in its sandbox when the spec has one: the sandbox is prepared here,
/// then a thread of its own confines itself (Landlock and seccomp hold per thread, and a
/// child inherits its thread's) and starts the child, so the supervisor itself keeps its
/// access to the process directory. Returns the child and its private `TMPDIR`.
fn spawn_child(spec: &Spec) -> Result<(Child, Option<std::path::PathBuf>), ProcError> {
    let start = |env: ChildEnv| {
        if spec.pty {
            spawn_pty(spec, env)
        } else {
            spawn_pipe(spec, env)
        }
    };
    let Some(sb) = &spec.sandbox else {
        return Ok((start(None)?, None));
    };
    let sandbox = tern_sandbox::Sandbox::new(sb.policy.clone());
    let mut prepared = sandbox
        .prepare(&sb.workspace, sb.level(), std::env::vars_os())
        .map_err(|e| ProcError::Spawn(e.to_string()))?;
    let tmpdir = prepared.keep_tmpdir();
    let confinement = prepared.confinement.clone();
    let env = std::mem::take(&mut prepared.env);
    let child = std::thread::scope(|scope| {
        scope
            .spawn(move || {
                confinement.apply().map_err(|e| {
                    ProcError::Spawn(format!("cannot confine the process to the sandbox: {e}"))
                })?;
                start(Some(env))
            })
            .join()
            .unwrap_or_else(|_| Err(ProcError::Spawn("the spawning thread panicked".into())))
    });
    match child {
        Ok(child) => Ok((child, tmpdir)),
        Err(e) => {
            drop(tmpdir.map(RemoveOnDrop));
            Err(e)
        }
    }
}

struct Child {
    pid: i32,
    output: Box<dyn Read + Send>,
    stdin: Box<dyn Write + Send>,
    master: Option<Box<dyn portable_pty::MasterPty + Send>>,
}

fn shell() -> &'static str {
    if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
}

/// The child's program, arguments and (local) working directory: `bash -c COMMAND` in the
/// working directory, or for the ssh backend the `ssh` client, whose working directory is
/// remote ([`crate::ssh`]).
fn child_command(spec: &Spec) -> (OsString, Vec<OsString>, Option<&Path>) {
    match &spec.backend {
        Backend::Local => (
            shell().into(),
            vec!["-c".into(), spec.command.clone().into()],
            Some(&spec.workdir),
        ),
        Backend::Ssh(t) => (
            "ssh".into(),
            t.client_args(
                &spec.id,
                spec.pty,
                &spec.workdir.to_string_lossy(),
                &spec.command,
            ),
            None,
        ),
    }
}

fn spawn_pipe(spec: &Spec, env: ChildEnv) -> Result<Child, ProcError> {
    use std::os::unix::process::CommandExt;
    let spawn_err = |e: std::io::Error| ProcError::Spawn(e.to_string());
    let (read_end, write_end) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| spawn_err(e.into()))?;
    // Only a wish: beyond the user's pipe quota (`fs.pipe-user-pages-soft`) the kernel
    // refuses, and the default pipe works too, more slowly.
    let size = nix::fcntl::FcntlArg::F_SETPIPE_SZ(PIPE_SIZE as i32);
    if let Err(e) = nix::fcntl::fcntl(&read_end, size) {
        tracing::debug!("cannot enlarge the output pipe: {e}");
    }
    let write_err = write_end.try_clone().map_err(spawn_err)?;
    let (program, args, cwd) = child_command(spec);
    let mut cmd = std::process::Command::new(program);
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    if let Some(env) = env {
        cmd.env_clear().envs(env);
    }
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::from(write_err))
        .env("PAGER", "cat")
        .env("GIT_PAGER", "cat")
        .env("GIT_TERMINAL_PROMPT", "0")
        .process_group(0);
    let mut child = cmd.spawn().map_err(spawn_err)?;
    // Our copies of the pipe's write end go with `cmd`, so EOF comes when the child and its
    // descendants have closed theirs.
    drop(cmd);
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| ProcError::Spawn("the child has no stdin".into()))?;
    Ok(Child {
        pid: child.id() as i32,
        output: Box::new(File::from(read_end)),
        stdin: Box::new(stdin),
        master: None,
    })
}

fn spawn_pty(spec: &Spec, env: ChildEnv) -> Result<Child, ProcError> {
    use portable_pty::{CommandBuilder, PtySize, native_pty_system};
    // portable-pty reports errors as `anyhow::Error`; only their text is kept.
    let pair = native_pty_system()
        .openpty(PtySize {
            rows: spec.rows,
            cols: spec.cols,
            pixel_width: 0,
            pixel_height: 0,
        })
        .map_err(|e| ProcError::Spawn(format!("cannot open a PTY: {e}")))?;
    let (program, args, cwd) = child_command(spec);
    let mut cmd = CommandBuilder::new(program);
    cmd.args(args);
    if let Some(cwd) = cwd {
        cmd.cwd(cwd);
    }
    if let Some(env) = env {
        cmd.env_clear();
        for (k, v) in env {
            cmd.env(k, v);
        }
    }
    cmd.env("TERM", "xterm-256color");
    cmd.env("PAGER", "cat");
    cmd.env("GIT_PAGER", "cat");
    let child = pair
        .slave
        .spawn_command(cmd)
        .map_err(|e| ProcError::Spawn(e.to_string()))?;
    let pid = child
        .process_id()
        .ok_or_else(|| ProcError::Spawn("the child has no pid".into()))? as i32;
    // The child has its own slave descriptors; ours would keep the terminal open after it.
    drop(pair.slave);
    let output = pair
        .master
        .try_clone_reader()
        .map_err(|e| ProcError::Spawn(format!("cannot read the PTY: {e}")))?;
    let stdin = pair
        .master
        .take_writer()
        .map_err(|e| ProcError::Spawn(format!("cannot write to the PTY: {e}")))?;
    Ok(Child {
        pid,
        output,
        stdin,
        master: Some(pair.master),
    })
}

/// Waits until no process but the exited leader is left in group `pgid`, or `deadline`
/// passes; then KILLs whatever is left. Call it only while the leader is unreaped.
fn end_group(pgid: Pid, deadline: Instant) {
    while group_has_others(pgid) {
        if Instant::now() >= deadline {
            tracing::info!("sent KILL to what was left of the group after the grace period");
            let _ = killpg(pgid, Signal::SIGKILL);
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a live process other than the leader is in group `pgid` (Linux `/proc`; zombies
/// waiting for their parent do not count).
fn group_has_others(pgid: Pid) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != pgid.as_raw())
        .any(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // Fields after the command name (which may hold spaces and parentheses):
            // state, ppid, pgrp.
            let mut f = stat
                .rfind(')')
                .map_or("", |i| &stat[i + 1..])
                .split_whitespace();
            let state = f.next();
            let pgrp = f.nth(1).and_then(|g| g.parse::<i32>().ok());
            state != Some("Z") && pgrp == Some(pgid.as_raw())
        })
}

/// What the socket handlers share.
struct State {
    pty: bool,
    pgid: Pid,
    child_pid: i32,
    kill_grace: Duration,
    /// Set (under this lock) just before the child is reaped; signals are sent under it.
    reaped: Mutex<bool>,
    /// When a kill's grace ends (set under `reaped`'s lock with the TERM): the reaper then
    /// keeps the exited leader unreaped — holding its group id — until the rest of the group
    /// is gone or has had its KILL.
    kill_deadline: Mutex<Option<Instant>>,
    stdin: Arc<Mutex<Option<Box<dyn Write + Send>>>>,
    exit: watch::Receiver<Option<ExitRecord>>,
    /// The ssh backend's host and the process id: kills go to the remote process group.
    remote: Option<(crate::ssh::SshTarget, String)>,
    /// The PTY's master (PTY mode): kept for the child's life, and resized through.
    master: Mutex<Option<Box<dyn portable_pty::MasterPty + Send>>>,
    /// Attached clients, fed by the pump.
    fanout: Arc<Fanout>,
}

impl State {
    /// Sends `sig` to the child's process group unless the child was reaped (its group id
    /// could then belong to someone else). False when nothing was sent.
    fn signal_group(&self, sig: Signal) -> bool {
        let reaped = self.reaped.lock().unwrap_or_else(|p| p.into_inner());
        if *reaped {
            return false;
        }
        match killpg(self.pgid, sig) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!("killpg {sig}: {e}");
                false
            }
        }
    }

    fn reaped(&self) -> bool {
        *self.reaped.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// TERM now, KILL after the grace period if the child is still there.
    fn kill(self: &Arc<Self>, grace: Duration) -> bool {
        if let Some((target, id)) = &self.remote {
            // The child is the ssh client: the signals go to the remote group through
            // another ssh, and to the client only when that fails or after the grace.
            if self.reaped() {
                return false;
            }
            let (alive, local) = (Arc::clone(self), Arc::clone(self));
            tokio::spawn(target.clone().kill(
                id.clone(),
                grace,
                move || !alive.reaped(),
                move |sig| local.signal_group(sig),
            ));
            return true;
        }
        {
            let reaped = self.reaped.lock().unwrap_or_else(|p| p.into_inner());
            if *reaped {
                return false;
            }
            if let Err(e) = killpg(self.pgid, Signal::SIGTERM) {
                tracing::debug!("killpg TERM: {e}");
                return false;
            }
            *self.kill_deadline.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(Instant::now() + grace);
        }
        tracing::info!(
            grace_ms = grace.as_millis() as u64,
            "sent TERM to the child's group"
        );
        let me = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            if me.signal_group(Signal::SIGKILL) {
                tracing::info!("sent KILL to the child's group after the grace period");
            }
        });
        true
    }

    fn exited(&self) -> Option<ExitRecord> {
        self.exit.borrow().clone()
    }

    async fn handle(self: &Arc<Self>, req: Request) -> Response {
        match req {
            Request::Ping => {
                let mut r = Response::ok();
                r.child_pid = Some(self.child_pid);
                r.exit = self.exited();
                r
            }
            Request::Write { data } => self.write(data.into_bytes()).await,
            Request::Submit { mut data } => {
                data.push(if self.pty { '\r' } else { '\n' });
                self.write(data.into_bytes()).await
            }
            Request::Close => {
                if self.exited().is_some() {
                    return Response::err("the process has exited");
                }
                let stdin = Arc::clone(&self.stdin);
                // Dropping the writer closes the pipe; portable-pty's PTY writer sends the
                // terminal's end-of-file (a newline and Ctrl-D) when dropped.
                let closed = tokio::task::spawn_blocking(move || {
                    stdin
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .take()
                        .is_some()
                })
                .await;
                match closed {
                    Ok(true) => Response::ok(),
                    Ok(false) => Response::err("stdin is already closed"),
                    Err(e) => Response::err(format!("cannot close stdin: {e}")),
                }
            }
            Request::Kill { grace_ms } => {
                let grace = grace_ms
                    .map(Duration::from_millis)
                    .unwrap_or(self.kill_grace);
                if self.kill(grace) {
                    Response::ok()
                } else {
                    let mut r = Response::err("the process has already exited");
                    r.exit = self.exited();
                    r
                }
            }
            Request::Resize { cols, rows } => self.resize(cols, rows),
            // `serve` takes `attach` before it gets here: the connection changes hands.
            Request::Attach => Response::err("attach is served by the connection"),
            Request::Wait => {
                let mut rx = self.exit.clone();
                match rx.wait_for(Option::is_some).await {
                    Ok(rec) => {
                        let mut r = Response::ok();
                        r.exit = rec.clone();
                        r
                    }
                    Err(_) => Response::err("the supervisor is stopping"),
                }
            }
        }
    }

    fn resize(&self, cols: u16, rows: u16) -> Response {
        if cols == 0 || rows == 0 {
            return Response::err("a terminal has at least one column and one row");
        }
        let master = self.master.lock().unwrap_or_else(|p| p.into_inner());
        let Some(master) = master.as_ref() else {
            return Response::err("not a terminal program (it runs with pipes): nothing to resize");
        };
        let size = portable_pty::PtySize {
            rows,
            cols,
            pixel_width: 0,
            pixel_height: 0,
        };
        // An ioctl on the master: it does not block.
        match master.resize(size) {
            Ok(()) => Response::ok(),
            Err(e) => Response::err(format!("cannot resize the terminal: {e}")),
        }
    }

    /// A new attached client, or the answer refusing it.
    fn attach(&self) -> Result<Subscription, Response> {
        if !self.pty {
            return Err(Response::err(
                "not a terminal program (it runs with pipes): only PTY processes can be attached; read its output in the log",
            ));
        }
        if self.exited().is_some() {
            return Err(Response::err("the process has exited"));
        }
        self.fanout
            .subscribe()
            .ok_or_else(|| Response::err("the process's output has ended"))
    }

    async fn write(&self, bytes: Vec<u8>) -> Response {
        if self.exited().is_some() {
            return Response::err("the process has exited");
        }
        let stdin = Arc::clone(&self.stdin);
        let res = tokio::task::spawn_blocking(move || {
            let mut guard = stdin.lock().unwrap_or_else(|p| p.into_inner());
            match guard.as_mut() {
                None => Err("stdin is closed".to_owned()),
                Some(w) => {
                    w.write_all(&bytes)
                        .and_then(|()| w.flush())
                        .map_err(|e| match e.kind() {
                            std::io::ErrorKind::BrokenPipe => {
                                "the process does not read its input any more".to_owned()
                            }
                            _ => format!("cannot write to the process: {e}"),
                        })
                }
            }
        })
        .await;
        match res {
            Ok(Ok(())) => Response::ok(),
            Ok(Err(e)) => Response::err(e),
            Err(e) => Response::err(format!("cannot write to the process: {e}")),
        }
    }
}

async fn run(pd: ProcDir, started: Started) -> Result<(), ProcError> {
    let Started {
        meta,
        _lock,
        listener,
        log,
        output,
        stdin,
        _master: master,
        _tmpdir,
    } = started;
    let (exit_tx, exit_rx) = watch::channel(None);
    let state = Arc::new(State {
        pty: meta.spec.pty,
        pgid: Pid::from_raw(meta.child_pid),
        child_pid: meta.child_pid,
        kill_grace: Duration::from_millis(meta.spec.kill_grace_ms),
        reaped: Mutex::new(false),
        kill_deadline: Mutex::new(None),
        stdin: Arc::new(Mutex::new(Some(stdin))),
        exit: exit_rx,
        remote: match &meta.spec.backend {
            Backend::Local => None,
            Backend::Ssh(t) => Some((t.clone(), meta.spec.id.clone())),
        },
        master: Mutex::new(master),
        fanout: Arc::new(Fanout::new(CLIENT_BACKLOG)),
    });

    // The pump: output → log, on two threads of its own ([`crate::pump`]).
    let written = Arc::new(AtomicU64::new(0));
    let stop_pump = Arc::new(AtomicBool::new(false));
    let pump_done = crate::pump::start(
        output,
        log,
        Arc::clone(&state.fanout),
        Arc::clone(&written),
        Arc::clone(&stop_pump),
    )?;

    // The reaper: waits for the child without reaping, marks it, reaps it.
    let (status_tx, status_rx) = oneshot::channel::<WaitStatus>();
    {
        let state = Arc::clone(&state);
        std::thread::Builder::new()
            .name("reaper".into())
            .spawn(move || {
                let pid = state.pgid;
                while let Err(nix::errno::Errno::EINTR) =
                    waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT)
                {
                }
                let status = {
                    let mut reaped = state.reaped.lock().unwrap_or_else(|p| p.into_inner());
                    let deadline = *state
                        .kill_deadline
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    if let Some(deadline) = deadline {
                        // Killed: the leader may have gone on TERM while others in its
                        // group ignore it. They get the rest of the grace, then KILL; the
                        // unreaped leader keeps the group id from being reused meanwhile.
                        drop(reaped);
                        end_group(pid, deadline);
                        reaped = state.reaped.lock().unwrap_or_else(|p| p.into_inner());
                    }
                    *reaped = true;
                    loop {
                        match waitpid(pid, None) {
                            Err(nix::errno::Errno::EINTR) => continue,
                            Ok(s) => break s,
                            Err(e) => {
                                tracing::error!("cannot reap the child: {e}");
                                break WaitStatus::StillAlive;
                            }
                        }
                    }
                };
                let _ = status_tx.send(status);
            })
            .map_err(|e| ProcError::Spawn(format!("cannot start the reaper thread: {e}")))?;
    }

    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    tracker.spawn(accept_loop(
        listener,
        Arc::clone(&state),
        cancel.clone(),
        tracker.clone(),
    ));
    tracker.spawn(signals(Arc::clone(&state), cancel.clone()));

    let status = status_rx.await.unwrap_or(WaitStatus::StillAlive);
    let (code, signal) = match status {
        WaitStatus::Exited(_, code) => (Some(code), None),
        WaitStatus::Signaled(_, sig, _) => (None, Some(sig as i32)),
        other => {
            tracing::error!("unexpected wait status {other:?}");
            (None, None)
        }
    };
    if tokio::time::timeout(DRAIN_GRACE, pump_done).await.is_err() {
        tracing::warn!("the output is still open after the process exited; recording the exit");
    }
    stop_pump.store(true, Ordering::Release);
    let record = ExitRecord {
        code,
        signal,
        ended_at_ms: now_ms(),
        output_bytes: written.load(Ordering::Acquire),
    };
    let exit_path = pd.exit();
    let to_write = record.clone();
    let wrote = tokio::task::spawn_blocking(move || write_json_atomic(&exit_path, &to_write))
        .await
        .map_err(|e| ProcError::Protocol(format!("cannot record the exit: {e}")))?;
    tracing::info!(?code, ?signal, "the process exited");
    let _ = exit_tx.send(Some(record));
    let _ = std::fs::remove_file(pd.socket());
    cancel.cancel();
    tracker.close();
    let _ = tokio::time::timeout(GOODBYE_GRACE, tracker.wait()).await;
    wrote
}

async fn accept_loop(
    listener: UnixListener,
    state: Arc<State>,
    cancel: CancellationToken,
    tracker: TaskTracker,
) {
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    tracker.spawn(serve(stream, Arc::clone(&state), cancel.clone()));
                }
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
}

async fn serve(stream: UnixStream, state: Arc<State>, cancel: CancellationToken) {
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    loop {
        let mut line = Vec::new();
        let mut limited = (&mut rd).take(MAX_LINE as u64);
        let read = tokio::select! {
            () = cancel.cancelled() => return,
            r = limited.read_until(b'\n', &mut line) => r,
        };
        let resp = match read {
            Ok(0) | Err(_) => return,
            Ok(_) if !line.ends_with(b"\n") => {
                Response::err(format!("a request is at most {MAX_LINE} bytes"))
            }
            Ok(_) => match serde_json::from_slice::<Request>(&line) {
                Ok(Request::Attach) => match state.attach() {
                    Ok(sub) => {
                        let mut ok = Response::ok();
                        ok.offset = Some(sub.offset());
                        let mut out =
                            serde_json::to_vec(&ok).unwrap_or_else(|_| b"{\"ok\":false}".to_vec());
                        out.push(b'\n');
                        if wr.write_all(&out).await.is_ok() {
                            // From here on the connection carries raw bytes.
                            crate::attach::serve(rd, wr, sub, Arc::clone(&state.stdin), cancel)
                                .await;
                        }
                        return;
                    }
                    Err(refused) => refused,
                },
                Ok(req) => state.handle(req).await,
                Err(e) => Response::err(format!("not a request: {e}")),
            },
        };
        let mut out = serde_json::to_vec(&resp).unwrap_or_else(|_| b"{\"ok\":false}".to_vec());
        out.push(b'\n');
        if wr.write_all(&out).await.is_err() || !line.ends_with(b"\n") {
            return;
        }
    }
}

async fn signals(state: Arc<State>, cancel: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::warn!("cannot handle signals");
        return;
    };
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = term.recv() => { state.kill(state.kill_grace); }
            _ = int.recv() => { state.kill(state.kill_grace); }
            _ = hup.recv() => tracing::debug!("ignoring SIGHUP"),
        }
    }
}
