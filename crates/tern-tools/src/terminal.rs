//! `terminal`: runs one foreground shell command.
//!
//! Flow: the command is checked against the hard-line list (never run) and the dangerous
//! list (asks the [`Approver`](crate::Approver)) → `bash -c` runs it as the leader of a new
//! process group, stdin closed, stdout and stderr into one pipe so their order is kept → the
//! output is captured with a cap (head and tail kept, a note says what was cut) → the call
//! ends when the command exits, its timeout passes, or the turn is cancelled; in the last two
//! cases the whole process group gets SIGKILL, and a guard does the same if the future is
//! dropped, so no child outlives an interrupted turn.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use process_wrap::tokio::{CommandWrap, ProcessGroup};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use crate::danger::{Verdict, check_command};
use crate::{ApprovalDecision, ApprovalRequest, ToolContext, ToolError, ToolResult, ToolSpec};

/// What the model sees of `terminal`.
pub fn spec() -> ToolSpec {
    ToolSpec {
        name: "terminal",
        toolset: "terminal",
        description: "Run a shell command (bash) in the foreground and return its combined \
            stdout and stderr with the exit code. Use it for builds, tests, git, package \
            managers and inspecting the system. Commands run non-interactively (stdin is \
            closed); avoid programs that wait for input or open a pager. Long output is cut \
            in the middle. Dangerous commands (recursive deletes, force pushes, disk writes) \
            need a human's approval and may be denied; some are never allowed.",
        parameters: json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "minLength": 1, "description": "The command line to run with bash -c."},
                "timeout": {"type": "integer", "minimum": 1, "description": "Seconds before the command is killed (default 180)."},
                "workdir": {"type": "string", "description": "Directory to run in; relative to the session's working directory. Default: the working directory."}
            },
            "required": ["command"],
            "additionalProperties": false
        }),
    }
}

/// Runs one `terminal` call.
pub async fn run(args: Value, ctx: ToolContext) -> ToolResult {
    let command = args["command"].as_str().unwrap_or_default().to_owned();
    let timeout = args["timeout"]
        .as_u64()
        .unwrap_or(ctx.limits.terminal_timeout_secs)
        .clamp(1, ctx.limits.terminal_max_timeout_secs.max(1));
    let workdir = authorize(&command, args["workdir"].as_str(), &ctx).await?;
    execute(
        &command,
        &workdir,
        Duration::from_secs(timeout),
        ctx.limits.output_limit_chars,
        &ctx,
    )
    .await
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

async fn execute(
    command: &str,
    workdir: &Path,
    timeout: Duration,
    limit: usize,
    ctx: &ToolContext,
) -> ToolResult {
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| ToolError::new(format!("cannot create a pipe: {e}")))?;
    let write_err: OwnedFd = write_end
        .try_clone()
        .map_err(|e| ToolError::new(format!("cannot create a pipe: {e}")))?;
    let mut child = {
        let mut cmd = CommandWrap::with_new(shell(), |c| {
            c.arg("-c")
                .arg(command)
                .current_dir(workdir)
                .stdin(Stdio::null())
                .stdout(Stdio::from(write_end))
                .stderr(Stdio::from(write_err))
                .env("PAGER", "cat")
                .env("GIT_PAGER", "cat")
                .env("GIT_TERMINAL_PROMPT", "0");
        });
        cmd.wrap(ProcessGroup::leader());
        // The command (and with it our copies of the pipe's write end) is dropped at the end
        // of this block, so EOF comes when the child and its descendants close theirs.
        cmd.spawn()
            .map_err(|e| ToolError::new(format!("cannot start {}: {e}", shell())))?
    };
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
    guard.0 = None;
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
    use crate::{AllowAll, Approver, DenyAll, ToolLimits};
    use std::sync::Arc;
    use tokio_util::sync::CancellationToken;

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
        let cmd = format!("echo $$ > {}; sleep 30", pidfile.display());
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
        assert!(
            nix::sys::signal::kill(Pid::from_raw(pid), None).is_err(),
            "shell must be gone"
        );
    }

    #[tokio::test]
    async fn background_descendant_does_not_hang_the_call() {
        let d = tempfile::tempdir().unwrap();
        let t0 = std::time::Instant::now();
        let v = run(
            json!({"command": "sleep 20 & echo started"}),
            ctx(d.path(), deny()),
        )
        .await
        .unwrap();
        assert_eq!(v["output"], "started\n");
        assert!(t0.elapsed() < Duration::from_secs(5));
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
}
