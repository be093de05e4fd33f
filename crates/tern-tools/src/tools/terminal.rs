//! `terminal`: runs one foreground shell command.
//!
//! Flow: the command is checked against the hard-line list (never run) and the dangerous
//! list (asks the [`Approver`](crate::Approver)) → [`escalation::level`] decides whether it
//! runs in the sandbox (the default) or outside (a human approved) → the sandbox is prepared
//! ([`tern_sandbox::Sandbox::prepare`]: the scrubbed environment, a private `TMPDIR`, the
//! Landlock and seccomp confinement applied between fork and exec) → `bash -c` runs it in a
//! new process group led by a watchdog that kills the group when tern dies
//! ([`crate::lifeline`]), stdin closed, stdout and stderr into one pipe so their order is kept → the
//! output is captured with a cap (head and tail kept, a note says what was cut) → the call
//! ends when the command exits, its timeout passes, or the turn is cancelled; in the last two
//! cases the whole process group gets SIGKILL, and a guard does the same if the future is
//! dropped, so no child outlives an interrupted turn. A confined command that failed the way a
//! sandbox denial looks is offered to a human to run outside the sandbox
//! ([`escalation::ask`]); approved, it runs again, outside, once.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use process_wrap::tokio::{CommandWrap, ProcessGroup};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use tern_sandbox::Level;
use tern_sandbox::denied::probable_denial;

use crate::danger::{Verdict, check_command};
use crate::escalation::{self, Outcome, Why};
use crate::tool::lenient_opt_u64;
use crate::{ApprovalDecision, ApprovalRequest, Tool, ToolContext, ToolError, ToolResult};

/// The foreground `terminal` tool (the gateway replaces it with `tern-procs`' one, which
/// also starts background processes).
pub struct Terminal;

/// The arguments of the foreground `terminal`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TerminalArgs {
    /// The command line to run with bash -c.
    #[schemars(length(min = 1))]
    pub command: String,
    /// Seconds before the command is killed (default 180).
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    #[schemars(with = "Option<u64>", range(min = 1))]
    pub timeout: Option<u64>,
    /// Directory to run in; relative to the session's working directory. Default: the working directory.
    #[serde(default)]
    pub workdir: Option<String>,
    /// require_escalated: ask a human to run this command outside the sandbox (it needs to write elsewhere or use the network). Default: use_default.
    #[serde(default)]
    pub sandbox_permissions: SandboxPermissions,
    /// With require_escalated: one sentence for the human on why the command needs it.
    #[serde(default)]
    pub justification: Option<String>,
}

/// Whether the model asks to run a command outside the sandbox.
// No doc comments on the variants: they would turn the schema's `enum` into a `oneOf`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxPermissions {
    #[default]
    UseDefault,
    RequireEscalated,
}

/// What the model reads about the foreground `terminal`.
pub const DESCRIPTION: &str = "Run a shell command (bash) in the foreground and return its \
    combined stdout and stderr with the exit code. Use it for builds, tests, git, package \
    managers and inspecting the system. Commands run non-interactively (stdin is \
    closed); avoid programs that wait for input or open a pager. Long output is cut \
    in the middle. Commands run in a sandbox: they may read most files but write only \
    in the working directory (and $TMPDIR), and have no network unless configured; a \
    command the sandbox stops is offered to a human to run outside it. Dangerous \
    commands (deletes, overwrites, force pushes) need a human's approval and may be \
    denied; some are never allowed.";

impl Tool for Terminal {
    const NAME: &'static str = "terminal";
    const TOOLSET: &'static str = "terminal";
    const DESCRIPTION: &'static str = DESCRIPTION;
    type Args = TerminalArgs;

    async fn run(&self, args: TerminalArgs, ctx: ToolContext) -> ToolResult {
        run(args, ctx).await
    }
}

/// Runs one foreground `terminal` call.
pub async fn run(args: TerminalArgs, ctx: ToolContext) -> ToolResult {
    let command = args.command;
    let timeout = args
        .timeout
        .unwrap_or(ctx.limits.terminal_timeout_secs)
        .clamp(1, ctx.limits.terminal_max_timeout_secs.max(1));
    let workdir = authorize(&command, args.workdir.as_deref(), &ctx).await?;
    let requested = args.sandbox_permissions == SandboxPermissions::RequireEscalated;
    let justification = args.justification.as_deref();
    let level = escalation::level(&ctx, &command, &workdir, requested, justification).await?;
    let timeout = Duration::from_secs(timeout);
    let limit = ctx.limits.output_limit_chars;
    let mut out = execute(&command, &workdir, timeout, limit, &ctx, level).await?;
    if level == Level::Escalated {
        out["sandbox"] = json!("ran outside the sandbox, as a human approved");
        return Ok(out);
    }
    let network_off = !ctx.limits.sandbox.policy().network;
    let denial = escalation::confines(&ctx)
        .then(|| {
            probable_denial(
                out["output"].as_str().unwrap_or_default(),
                out["exit_code"].as_i64().map(|c| c as i32),
                network_off,
            )
        })
        .flatten();
    let Some(denial) = denial else {
        return Ok(out);
    };
    let stopped = format!(
        "the sandbox ({}) probably stopped this command: {}",
        ctx.limits.sandbox.policy().describe(),
        denial.describe()
    );
    match escalation::ask(&ctx, &command, &workdir, Why::Denied(denial), None).await {
        Outcome::Approved => {
            let mut again =
                execute(&command, &workdir, timeout, limit, &ctx, Level::Escalated).await?;
            again["sandbox"] = json!(format!(
                "{stopped}; a human approved running it outside the sandbox, and this is the result of that run"
            ));
            Ok(again)
        }
        Outcome::Refused(reason) => {
            out["sandbox"] = json!(format!(
                "{stopped}. Running it outside the sandbox was not approved: {reason}. Do not \
                 retry it or work around the sandbox; do the work inside it or ask the user."
            ));
            Ok(out)
        }
        Outcome::Pending(message) => {
            out["sandbox"] = json!(format!("{stopped}. {message}"));
            Ok(out)
        }
    }
}

/// What every command goes through before it runs, in the foreground or the background:
/// the working directory (`workdir` relative to the session's) must exist, hard-line
/// commands are refused, dangerous ones need the [`Approver`](crate::Approver) (or a
/// `pre_tool_call` hook's approval). Returns the resolved working directory.
pub async fn authorize(
    command: &str,
    workdir: Option<&str>,
    ctx: &ToolContext,
) -> Result<std::path::PathBuf, ToolError> {
    let workdir = match workdir {
        Some(w) => ctx.resolve(w),
        None => ctx.workdir.clone(),
    };
    if !tokio::fs::metadata(&workdir)
        .await
        .is_ok_and(|m| m.is_dir())
    {
        return Err(ToolError::new(format!(
            "working directory does not exist: {}",
            workdir.display()
        )));
    }
    authorize_command(command, &workdir, ctx).await?;
    Ok(workdir)
}

/// The command's part of [`authorize`]: hard-line commands are refused, dangerous ones need
/// approval. `workdir` is only shown to the approver (and keys a grant); it is not checked,
/// so a caller running the command elsewhere (another host) passes its own description.
pub async fn authorize_command(
    command: &str,
    workdir: &Path,
    ctx: &ToolContext,
) -> Result<(), ToolError> {
    match check_command(command) {
        Verdict::Safe => {}
        Verdict::Forbidden { description, .. } => {
            return Err(ToolError::new(format!(
                "blocked: this command is on tern's hard-line list ({description}) and is never run, \
                 not even with approval. Do not try to run it another way."
            )));
        }
        Verdict::Dangerous { .. } if ctx.preapproved => {}
        Verdict::Dangerous { key, description } => {
            let decision = tokio::select! {
                d = ctx.approver.approve(ApprovalRequest {
                    session_id: ctx.session_id.clone(),
                    call_id: ctx.call_id.clone(),
                    call_seq: ctx.call_seq,
                    command: command.to_owned(),
                    workdir: workdir.to_path_buf(),
                    pattern_key: key,
                    description,
                    context: Vec::new(),
                }) => d,
                () = ctx.cancel.cancelled() => return Err(ToolError::new("interrupted")),
            };
            match decision {
                ApprovalDecision::Deny { reason } => {
                    return Err(ToolError::new(format!(
                        "denied: this command needs approval ({description}) and was not approved: \
                         {reason}. Do not retry it; choose a safer approach or ask the user."
                    )));
                }
                ApprovalDecision::Pending { message } => {
                    return Err(ToolError::new(format!(
                        "not run: this command needs approval ({description}). {message}"
                    )));
                }
                ApprovalDecision::Once | ApprovalDecision::Session | ApprovalDecision::Always => {}
            }
        }
    }
    Ok(())
}

/// Kills the process group when dropped, unless disarmed after the leader was reaped.
struct GroupGuard(Option<Pid>);

impl GroupGuard {
    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            // ESRCH (already gone) is fine: there is nothing left to kill.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

fn shell() -> &'static str {
    if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
}

/// The sandbox of one command: prepared on the blocking pool (it lists directories and
/// opens the granted paths).
async fn prepare_sandbox(
    ctx: &ToolContext,
    level: Level,
) -> Result<tern_sandbox::Prepared, ToolError> {
    let sandbox = ctx.limits.sandbox.clone();
    let workspace = ctx.workdir.clone();
    tokio::task::spawn_blocking(move || sandbox.prepare(&workspace, level, std::env::vars_os()))
        .await
        .map_err(|e| ToolError::new(format!("cannot prepare the sandbox: {e}")))?
        .map_err(|e| ToolError::new(e.to_string()))
}

async fn execute(
    command: &str,
    workdir: &Path,
    timeout: Duration,
    limit: usize,
    ctx: &ToolContext,
    level: Level,
) -> ToolResult {
    // Lives until the command is done: its drop removes the private TMPDIR.
    let prepared = prepare_sandbox(ctx, level).await?;
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| ToolError::new(format!("cannot create a pipe: {e}")))?;
    let write_err: OwnedFd = write_end
        .try_clone()
        .map_err(|e| ToolError::new(format!("cannot create a pipe: {e}")))?;
    let confinement = prepared.confinement.clone();
    // The lifeline's write end stays here until the command is done; the watchdog ends the
    // command's group when it closes without that (tern died).
    let (life_read, life_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| ToolError::new(format!("cannot create a pipe: {e}")))?;
    let (life_r, life_w) = (life_read.as_raw_fd(), life_write.as_raw_fd());
    let mut child = {
        let mut cmd = CommandWrap::with_new(shell(), |c| {
            c.arg("-c")
                .arg(command)
                .current_dir(workdir)
                .stdin(Stdio::null())
                .stdout(Stdio::from(write_end))
                .stderr(Stdio::from(write_err))
                .env_clear()
                .envs(prepared.env.iter().map(|(k, v)| (k, v)))
                .env("PAGER", "cat")
                .env("GIT_PAGER", "cat")
                .env("GIT_TERMINAL_PROMPT", "0");
            // SAFETY: only raw syscalls run between fork and exec (no allocation, no locks).
            unsafe {
                c.pre_exec(move || {
                    crate::lifeline::fork_watchdog(life_r, life_w)?;
                    confinement.apply()
                });
            }
        });
        cmd.wrap(ProcessGroup::leader());
        // The command (and with it our copies of the pipe's write end) is dropped at the end
        // of this block, so EOF comes when the child and its descendants close theirs.
        cmd.spawn()
            .map_err(|e| ToolError::new(format!("cannot start {}: {e}", shell())))?
    };
    drop(life_read);
    let _lifeline = life_write;
    let mut guard = GroupGuard(child.id().map(|p| Pid::from_raw(p as i32)));
    let mut reader = tokio::net::unix::pipe::Receiver::from_owned_fd(read_end)
        .map_err(|e| ToolError::new(format!("cannot read the command's output: {e}")))?;
    let mut cap = Capture::new(limit);
    let mut buf = vec![0u8; 16 * 1024];
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);

    let mut eof = false;
    let status = loop {
        tokio::select! {
            r = reader.read(&mut buf), if !eof => match r {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => cap.push(&buf[..n]),
            },
            st = child.wait() => break st,
            () = &mut deadline => {
                guard.kill();
                let _ = child.wait().await;
                return Ok(result(cap, None, Some(format!(
                    "the command timed out after {} s and was killed; use a larger timeout or run it differently",
                    timeout.as_secs()
                ))));
            }
            () = ctx.cancel.cancelled() => {
                guard.kill();
                let _ = child.wait().await;
                return Err(ToolError::new("interrupted: the turn was stopped and the command was killed"));
            }
        }
    };
    // The leader is gone; drain what is left, but do not wait for a background descendant
    // that keeps the pipe open.
    let drain_until = tokio::time::Instant::now() + Duration::from_millis(250);
    while !eof {
        match tokio::time::timeout_at(drain_until, reader.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => cap.push(&buf[..n]),
            _ => eof = true,
        }
    }
    // What the command left running in its group (`sleep 60 &`, `nohup server &`) ends with
    // it: a long-lived process belongs in the background tool, where it is supervised. The
    // group's id stays reserved while any member lives, so this reaches nothing else.
    guard.kill();
    let status = status.map_err(|e| ToolError::new(format!("cannot wait for the command: {e}")))?;
    let code = status.code().or_else(|| {
        use std::os::unix::process::ExitStatusExt;
        status.signal().map(|s| 128 + s)
    });
    Ok(result(cap, code, None))
}

fn result(cap: Capture, exit_code: Option<i32>, error: Option<String>) -> Value {
    let (output, note) = cap.finish();
    let mut v = json!({ "output": output, "exit_code": exit_code });
    if let Some(e) = error {
        v["error"] = json!(e);
    }
    if let Some(n) = note {
        v["truncated"] = json!(true);
        v["note"] = json!(n);
    }
    v
}

/// Keeps the first and last parts of the output within a budget.
struct Capture {
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    head_max: usize,
    tail_max: usize,
    total: usize,
}

impl Capture {
    fn new(limit: usize) -> Self {
        let head_max = limit * 2 / 5;
        Self {
            head: Vec::new(),
            tail: std::collections::VecDeque::new(),
            head_max,
            tail_max: limit - head_max,
            total: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len();
        if self.head.len() < self.head_max {
            let n = bytes.len().min(self.head_max - self.head.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        self.tail.extend(bytes);
        if self.tail.len() > self.tail_max {
            let excess = self.tail.len() - self.tail_max;
            self.tail.drain(..excess);
        }
    }

    fn finish(self) -> (String, Option<String>) {
        let kept = self.head.len() + self.tail.len();
        let tail: Vec<u8> = self.tail.into_iter().collect();
        if kept == self.total {
            let mut all = self.head;
            all.extend_from_slice(&tail);
            return (String::from_utf8_lossy(&all).into_owned(), None);
        }
        let omitted = self.total - kept;
        let out = format!(
            "{}\n\n[... {omitted} bytes omitted ...]\n\n{}",
            String::from_utf8_lossy(&self.head),
            String::from_utf8_lossy(&tail)
        );
        let note = format!(
            "output was {} bytes; showing the first {} and the last {} bytes. Redirect to a file and read parts of it, or filter it (grep, head, tail), to see more.",
            self.total,
            self.head.len(),
            tail.len()
        );
        (out, Some(note))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AllowAll, Approver, DenyAll, DynTool, ToolLimits};
    use std::sync::Arc;
    use tokio_util::sync::CancellationToken;

    /// The tool as the registry calls it: the JSON arguments deserialised into
    /// [`TerminalArgs`] (shadows `super::run`).
    async fn run(args: Value, ctx: ToolContext) -> ToolResult {
        crate::Typed::new(Terminal).call(args, ctx).await
    }

    fn ctx(dir: &Path, approver: Arc<dyn Approver>) -> ToolContext {
        ToolContext {
            session_id: "s".into(),
            call_id: "call-1".into(),
            call_seq: 0,
            workdir: dir.to_path_buf(),
            cancel: CancellationToken::new(),
            approver,
            limits: ToolLimits::default(),
            preapproved: false,
            subagents: None,
            toolsets: Default::default(),
            report: Default::default(),
        }
    }

    fn deny() -> Arc<dyn Approver> {
        Arc::new(DenyAll {
            reason: "no".into(),
        })
    }

    #[tokio::test]
    async fn runs_and_merges_output_in_order() {
        let d = tempfile::tempdir().unwrap();
        let v = run(
            json!({"command": "echo one; echo two >&2; echo three; exit 3"}),
            ctx(d.path(), deny()),
        )
        .await
        .unwrap();
        assert_eq!(v["output"], "one\ntwo\nthree\n");
        assert_eq!(v["exit_code"], 3);
    }

    #[tokio::test]
    async fn workdir_is_used_and_checked() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        let v = run(
            json!({"command": "pwd", "workdir": "sub"}),
            ctx(d.path(), deny()),
        )
        .await
        .unwrap();
        assert!(v["output"].as_str().unwrap().trim_end().ends_with("/sub"));
        let e = run(
            json!({"command": "pwd", "workdir": "nope"}),
            ctx(d.path(), deny()),
        )
        .await
        .unwrap_err();
        assert!(e.0.contains("does not exist"), "{e}");
    }

    #[tokio::test]
    async fn output_is_capped_with_a_note() {
        let d = tempfile::tempdir().unwrap();
        let mut c = ctx(d.path(), deny());
        c.limits.output_limit_chars = 1000;
        let v = run(json!({"command": "seq 1 10000"}), c).await.unwrap();
        let out = v["output"].as_str().unwrap();
        assert!(out.starts_with("1\n2\n3\n"));
        assert!(out.trim_end().ends_with("10000"));
        assert!(out.contains("bytes omitted"));
        assert!(out.len() < 1100);
        assert_eq!(v["truncated"], true);
        assert!(v["note"].as_str().unwrap().contains("48894 bytes"));
    }

    #[tokio::test]
    async fn timeout_kills_the_group() {
        let d = tempfile::tempdir().unwrap();
        let marker = d.path().join("survived");
        let cmd = format!("(sleep 2; touch {}) & sleep 30", marker.display());
        let t0 = std::time::Instant::now();
        let v = run(json!({"command": cmd, "timeout": 1}), ctx(d.path(), deny()))
            .await
            .unwrap();
        assert!(t0.elapsed() < Duration::from_secs(10));
        assert!(v["error"].as_str().unwrap().contains("timed out after 1 s"));
        assert!(v["exit_code"].is_null());
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(
            !marker.exists(),
            "the background child must have been killed with the group"
        );
    }

    #[tokio::test]
    async fn cancel_kills_the_running_command() {
        let d = tempfile::tempdir().unwrap();
        let c = ctx(d.path(), deny());
        let cancel = c.cancel.clone();
        let pidfile = d.path().join("pid");
        // `>>`: a `>` onto a file would need an approval, which `deny()` refuses.
        let cmd = format!("echo $$ >> {}; sleep 30", pidfile.display());
        let h = tokio::spawn(run(json!({"command": cmd}), c));
        for _ in 0..100 {
            if pidfile.exists() && !std::fs::read_to_string(&pidfile).unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cancel.cancel();
        let e = h.await.unwrap().unwrap_err();
        assert!(e.0.starts_with("interrupted"));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The shell is the watchdog's child: killed with the group, it may stay a zombie
        // for a moment until init reaps it. Dead either way.
        assert!(dead_soon(pid).await, "shell must be gone");
    }

    /// Whether `pid` is gone or a zombie within a few seconds (a hang, not a slow machine).
    async fn dead_soon(pid: i32) -> bool {
        for _ in 0..200 {
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit(')')
                        .next()
                        .map(|r| r.trim_start().starts_with('Z'))
                });
            if nix::sys::signal::kill(Pid::from_raw(pid), None).is_err() || zombie == Some(true) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// tern dies (here: the lifeline's write end closes, as it does when the kernel tears a
    /// killed process down): the watchdog kills the command's whole group, so neither the
    /// shell's next command nor an orphaned subshell lands its side effect.
    #[tokio::test]
    async fn the_watchdog_ends_the_group_when_the_lifeline_breaks() {
        let d = tempfile::tempdir().unwrap();
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let (r, w) = (read.as_raw_fd(), write.as_raw_fd());
        let mut cmd = std::process::Command::new("/bin/bash");
        cmd.arg("-c")
            .arg("(sleep 1; touch sub) & sleep 1; touch main; wait")
            .current_dir(d.path())
            .process_group(0);
        // SAFETY: fork_watchdog makes raw syscalls only.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                crate::lifeline::fork_watchdog(r, w)
            });
        }
        use std::os::unix::process::CommandExt as _;
        let mut child = cmd.spawn().unwrap();
        drop(read);
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(write);
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(
            !d.path().join("sub").exists(),
            "the orphaned subshell ran on"
        );
        assert!(!d.path().join("main").exists(), "the shell ran on");

        // And while the lifeline holds, the command's own exit code comes through.
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let (r, w) = (read.as_raw_fd(), write.as_raw_fd());
        let mut cmd = std::process::Command::new("/bin/bash");
        cmd.arg("-c").arg("exit 7").process_group(0);
        // SAFETY: as above.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                crate::lifeline::fork_watchdog(r, w)
            });
        }
        let status = cmd.status().unwrap();
        drop((read, write));
        assert_eq!(status.code(), Some(7));
    }

    #[tokio::test]
    async fn background_descendant_does_not_hang_the_call() {
        let d = tempfile::tempdir().unwrap();
        let t0 = std::time::Instant::now();
        let v = run(
            json!({"command": "sleep 20 & echo $! >> pid; echo started"}),
            ctx(d.path(), deny()),
        )
        .await
        .unwrap();
        assert_eq!(v["output"], "started\n");
        assert!(t0.elapsed() < Duration::from_secs(5));
        // And it does not outlive the call: the group goes with the command.
        let pid: i32 = std::fs::read_to_string(d.path().join("pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            dead_soon(pid).await,
            "the backgrounded sleep outlived the call"
        );
    }

    #[tokio::test]
    async fn dangerous_is_denied_and_forbidden_is_blocked_even_when_allowed() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("build")).unwrap();
        let e = run(json!({"command": "rm -rf build"}), ctx(d.path(), deny()))
            .await
            .unwrap_err();
        assert!(e.0.starts_with("denied"), "{e}");
        assert!(d.path().join("build").exists());
        let v = run(
            json!({"command": "rm -rf build"}),
            ctx(d.path(), Arc::new(AllowAll)),
        )
        .await
        .unwrap();
        assert_eq!(v["exit_code"], 0);
        assert!(!d.path().join("build").exists());
        let e = run(
            json!({"command": "rm -rf /"}),
            ctx(d.path(), Arc::new(AllowAll)),
        )
        .await
        .unwrap_err();
        assert!(e.0.starts_with("blocked"), "{e}");
    }

    /// A human was asked (the gateway's inbox): not run, and the model gets the approver's
    /// words as they are, not the advice given for a refusal.
    #[tokio::test]
    async fn pending_approval_runs_nothing_and_passes_the_message_on() {
        struct Asked;
        impl Approver for Asked {
            fn approve(&self, _req: ApprovalRequest) -> crate::BoxFuture<'_, ApprovalDecision> {
                Box::pin(async {
                    ApprovalDecision::Pending {
                        message: "Request r1 is open; end your turn.".into(),
                    }
                })
            }
        }
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("build")).unwrap();
        let e = run(
            json!({"command": "rm -rf build"}),
            ctx(d.path(), Arc::new(Asked)),
        )
        .await
        .unwrap_err();
        assert!(e.0.starts_with("not run"), "{e}");
        assert!(e.0.ends_with("Request r1 is open; end your turn."), "{e}");
        assert!(d.path().join("build").exists());
        assert!(
            !ApprovalDecision::Pending {
                message: String::new()
            }
            .allows()
        );
    }

    // -----------------------------------------------------------------------------------
    // The sandbox

    struct Recorded {
        decision: ApprovalDecision,
        asked: std::sync::Mutex<Vec<ApprovalRequest>>,
    }

    impl Approver for Recorded {
        fn approve(&self, req: ApprovalRequest) -> crate::BoxFuture<'_, ApprovalDecision> {
            self.asked.lock().unwrap().push(req);
            let d = self.decision.clone();
            Box::pin(async move { d })
        }
    }

    fn recorded(decision: ApprovalDecision) -> Arc<Recorded> {
        Arc::new(Recorded {
            decision,
            asked: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// A workspace, a directory outside it, and a protected "tern home" with a token.
    struct Sbx {
        _d: tempfile::TempDir,
        ws: std::path::PathBuf,
        outside: std::path::PathBuf,
        home: std::path::PathBuf,
    }

    fn sbx() -> Option<Sbx> {
        if !matches!(
            tern_sandbox::Support::probe(),
            tern_sandbox::Support::Landlock { .. }
        ) {
            return None;
        }
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let (ws, outside, home) = (root.join("ws"), root.join("out"), root.join("home"));
        for p in [&ws, &outside, &home] {
            std::fs::create_dir(p).unwrap();
        }
        std::fs::write(outside.join("keep"), "data").unwrap();
        std::fs::write(home.join("inbox-admin.json"), "TOKEN").unwrap();
        Some(Sbx {
            _d: d,
            ws,
            outside,
            home,
        })
    }

    fn sandboxed(s: &Sbx, approver: Arc<dyn Approver>) -> ToolContext {
        let mut c = ctx(&s.ws, approver);
        let mut p = tern_sandbox::Policy::new(tern_sandbox::Mode::WorkspaceWrite);
        p.protected_paths = vec![s.home.clone()];
        c.limits.sandbox = Arc::new(tern_sandbox::Sandbox::new(p));
        c
    }

    #[tokio::test]
    async fn a_denied_write_is_offered_for_escalation_and_refused_keeps_the_data() {
        let Some(s) = sbx() else { return };
        let approver = recorded(ApprovalDecision::Deny {
            reason: "no".into(),
        });
        let cmd = format!("rm -r {}", s.outside.display());
        let v = run(json!({"command": cmd}), sandboxed(&s, approver.clone())).await;
        // `rm -r` is dangerous too: the same refusing approver says no first.
        assert!(v.is_err());
        let cmd = format!("echo x >> {}/keep", s.outside.display());
        let v = run(json!({"command": cmd}), sandboxed(&s, approver.clone()))
            .await
            .unwrap();
        assert_ne!(v["exit_code"], 0);
        let note = v["sandbox"].as_str().unwrap();
        assert!(
            note.contains("not approved: no") && note.contains("Do not"),
            "{note}"
        );
        assert_eq!(
            std::fs::read_to_string(s.outside.join("keep")).unwrap(),
            "data"
        );
        let asked = approver.asked.lock().unwrap();
        let last = asked.last().unwrap();
        assert_eq!(last.pattern_key, crate::escalation::PATTERN_KEY);
        assert_eq!(last.command, cmd);
        assert!(last.call_id.ends_with(":sandbox"));
        assert!(
            last.context
                .iter()
                .any(|(k, v)| *k == "policy" && v.contains("workspace-write"))
        );
        assert!(last.context.iter().any(|(k, _)| *k == "denied"));
    }

    #[tokio::test]
    async fn an_approved_escalation_runs_the_command_once_outside() {
        let Some(s) = sbx() else { return };
        let approver = recorded(ApprovalDecision::Once);
        let cmd = format!("echo more >> {}/keep", s.outside.display());
        let v = run(json!({"command": cmd}), sandboxed(&s, approver.clone()))
            .await
            .unwrap();
        assert_eq!(v["exit_code"], 0, "{v}");
        assert!(v["sandbox"].as_str().unwrap().contains("approved"));
        // Exactly one append: the confined run wrote nothing.
        assert_eq!(
            std::fs::read_to_string(s.outside.join("keep")).unwrap(),
            "datamore\n"
        );
        assert_eq!(approver.asked.lock().unwrap().len(), 1);
        // Outside the sandbox, the protected home is still out of reach.
        let v = run(
            json!({"command": format!("cat {}/inbox-admin.json > {}/stolen", s.home.display(), s.outside.display())}),
            sandboxed(&s, approver.clone()),
        )
        .await
        .unwrap();
        assert_ne!(v["exit_code"], 0, "{v}");
        assert!(
            std::fs::read_to_string(s.outside.join("stolen"))
                .unwrap_or_default()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn require_escalated_asks_first_and_pending_runs_nothing() {
        let Some(s) = sbx() else { return };
        let approver = recorded(ApprovalDecision::Pending {
            message: "Request r9 is open; end your turn.".into(),
        });
        let cmd = format!("touch {}/new", s.outside.display());
        let e = run(
            json!({"command": cmd, "sandbox_permissions": "require_escalated", "justification": "needs it"}),
            sandboxed(&s, approver.clone()),
        )
        .await
        .unwrap_err();
        assert!(
            e.0.starts_with("not run") && e.0.ends_with("end your turn."),
            "{e}"
        );
        assert!(!s.outside.join("new").exists());
        let asked = approver.asked.lock().unwrap();
        assert_eq!(asked.len(), 1);
        assert!(
            asked[0]
                .context
                .iter()
                .any(|(k, v)| *k == "justification" && v == "needs it")
        );
    }

    #[tokio::test]
    async fn a_session_grant_lets_later_commands_out_without_asking() {
        let Some(s) = sbx() else { return };
        let inner = recorded(ApprovalDecision::Session);
        let grants: Arc<dyn Approver> = Arc::new(crate::approval::Grants::new(inner.clone(), []));
        let first = format!("touch {}/a", s.outside.display());
        let v = run(json!({"command": first}), sandboxed(&s, grants.clone()))
            .await
            .unwrap();
        assert_eq!(v["exit_code"], 0, "{v}");
        let second = format!("touch {}/b", s.outside.display());
        let v = run(json!({"command": second}), sandboxed(&s, grants.clone()))
            .await
            .unwrap();
        assert_eq!(v["exit_code"], 0, "{v}");
        assert!(s.outside.join("a").exists() && s.outside.join("b").exists());
        assert_eq!(inner.asked.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn commands_get_a_private_tmpdir_removed_after_them() {
        let Some(s) = sbx() else { return };
        let v = run(
            json!({"command": "env; echo tmp=$TMPDIR; touch $TMPDIR/x && echo made"}),
            sandboxed(&s, deny()),
        )
        .await
        .unwrap();
        let out = v["output"].as_str().unwrap();
        assert!(out.contains("made"), "{out}");
        let tmp = out
            .lines()
            .find_map(|l| l.strip_prefix("tmp="))
            .unwrap()
            .to_owned();
        assert!(!tmp.is_empty() && !std::path::Path::new(&tmp).exists());
    }
}
