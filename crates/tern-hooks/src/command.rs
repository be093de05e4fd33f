//! Command hooks: `[[hooks]]` entries, run per event as `sh -c COMMAND` (a string `command`)
//! or as the program and arguments themselves (an array `command`, no shell in between).
//!
//! Flow: the command starts as the leader of a new process group, with the hook's name and the
//! event's name in the environment (`TERN_HOOK_NAME`, `TERN_EVENT`) → the envelope JSON and
//! a newline are written to its stdin, which is then closed → stdout (first 64 KiB) and
//! stderr (first 16 KiB) are read while it runs → once the command exits, what is left in the
//! pipes is drained briefly (a background child may hold them open) → if the hook's timeout
//! passes first, the whole process group gets SIGKILL and the command is reaped. A guard
//! does the same when the run is dropped (an interrupted `pre_tool_call`, a runtime shutting
//! down), so no hook outlives what started it unless it detached itself.
//!
//! Failures (cannot start, non-zero exit, killed by a signal, timeout) are logged with the
//! hook's name and never propagate. For `pre_tool_call`, stdout of a hook that exited 0 is
//! its verdict: `{"action":"block","message":"…"}` or `{"action":"allow"}`.

use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tern_config::{CommandHookConfig, HookCommand};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::{EventFilter, HookError, ToolGate};

/// The most of a hook's stdout kept; a verdict is tiny, this only bounds memory.
const STDOUT_LIMIT: usize = 64 * 1024;
/// The most of a hook's stderr kept for the logs.
const STDERR_LIMIT: usize = 16 * 1024;
/// The most of stderr quoted in one log line.
const STDERR_LOG_CHARS: usize = 2000;
/// After the command exits, how long to keep reading pipes still held open by a descendant.
const DRAIN_GRACE: Duration = Duration::from_millis(250);

/// A configured command hook.
#[derive(Debug)]
pub(crate) struct CommandHook {
    /// For logs: the configured name, or the command cut to 40 characters.
    name: String,
    command: HookCommand,
    filter: EventFilter,
    timeout: Duration,
}

/// What a finished run produced.
struct Output {
    status: ExitStatus,
    stdout: Capped,
    stderr: Capped,
}

impl CommandHook {
    pub(crate) fn from_config(config: &CommandHookConfig) -> Result<Self, HookError> {
        let name = match config.name.as_deref().map(str::trim) {
            Some(n) if !n.is_empty() => n.to_owned(),
            _ => config.command.display().chars().take(40).collect(),
        };
        let invalid = |message: &str| HookError::Invalid {
            subscriber: format!("hook {name:?}"),
            message: message.to_owned(),
        };
        if let Some(problem) = config.command.problem() {
            return Err(invalid(&format!("`command` {problem}")));
        }
        if config.timeout_ms == 0 {
            return Err(invalid("`timeout_ms` must be at least 1"));
        }
        let filter = EventFilter::parse(&format!("hook {name:?}"), &config.events)?;
        Ok(CommandHook {
            name,
            command: config.command.clone(),
            filter,
            timeout: Duration::from_millis(config.timeout_ms),
        })
    }

    pub(crate) fn wants(&self, event: &str) -> bool {
        self.filter.matches(event)
    }

    /// Runs the hook for one event; logs the outcome. Returns stdout when the hook exited 0.
    pub(crate) async fn run(&self, event: &'static str, json: &str) -> Option<Vec<u8>> {
        let started = tokio::time::Instant::now();
        match self.execute(event, json).await {
            Err(RunError::Spawn(e)) => {
                tracing::warn!(hook = %self.name, event, "command hook could not start: {e}");
                None
            }
            Err(RunError::Wait(e)) => {
                tracing::warn!(hook = %self.name, event, "command hook could not be waited for: {e}");
                None
            }
            Err(RunError::Timeout { stderr }) => {
                tracing::warn!(
                    hook = %self.name,
                    event,
                    timeout_ms = self.timeout.as_millis() as u64,
                    stderr = stderr.lossy_tail(STDERR_LOG_CHARS),
                    "command hook timed out and was killed (its process group got SIGKILL)"
                );
                None
            }
            Ok(out) => {
                let stderr = out.stderr.lossy_tail(STDERR_LOG_CHARS);
                let elapsed_ms = started.elapsed().as_millis() as u64;
                if out.status.success() {
                    if out.stdout.truncated {
                        tracing::warn!(
                            hook = %self.name,
                            event,
                            "command hook printed more than {STDOUT_LIMIT} bytes; the rest was discarded"
                        );
                    }
                    tracing::debug!(hook = %self.name, event, elapsed_ms, stderr, "command hook finished");
                    return Some(out.stdout.buf);
                }
                match (out.status.code(), exit_signal(&out.status)) {
                    (Some(code), _) => tracing::warn!(
                        hook = %self.name,
                        event,
                        code,
                        stderr,
                        "command hook failed with exit code {code}"
                    ),
                    (None, Some(signal)) => tracing::warn!(
                        hook = %self.name,
                        event,
                        signal,
                        stderr,
                        "command hook was killed by signal {signal}"
                    ),
                    (None, None) => tracing::warn!(
                        hook = %self.name,
                        event,
                        stderr,
                        "command hook failed: {}",
                        out.status
                    ),
                }
                None
            }
        }
    }

    /// Runs the hook as a `pre_tool_call` gate: its verdict, or `None` to abstain.
    pub(crate) async fn gate(&self, event: &'static str, json: &str) -> Option<ToolGate> {
        // `run` logged why there is no output (failure or timeout).
        let stdout = self.run(event, json).await?;
        parse_verdict(&self.name, &stdout)
    }

    async fn execute(&self, event: &'static str, json: &str) -> Result<Output, RunError> {
        let mut cmd = match &self.command {
            HookCommand::Shell(line) => {
                let mut cmd = tokio::process::Command::new("/bin/sh");
                cmd.arg("-c").arg(line);
                cmd
            }
            // Checked in `from_config`: the program is there and not empty.
            HookCommand::Argv(argv) => {
                let mut cmd = tokio::process::Command::new(argv.first().map_or("", String::as_str));
                cmd.args(argv.iter().skip(1));
                cmd
            }
        };
        cmd.env("TERN_EVENT", event)
            .env("TERN_HOOK_NAME", &self.name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so a timeout can kill whatever the command started too.
            .process_group(0)
            // Belt and braces with the group guard: the leader is killed on drop even if
            // the group kill failed.
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(RunError::Spawn)?;
        // A fresh child has an id until it is reaped; pids fit in i32 (pid_t).
        let mut group = GroupGuard(child.id().map(|pid| Pid::from_raw(pid as i32)));

        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let mut out = Capped::new(STDOUT_LIMIT);
        let mut err = Capped::new(STDERR_LIMIT);

        let finished = {
            let io = async {
                tokio::join!(
                    feed(stdin, json, &self.name),
                    out.fill(stdout),
                    err.fill(stderr)
                )
            };
            tokio::pin!(io);
            tokio::time::timeout(self.timeout, async {
                let mut io_done = false;
                let status = tokio::select! {
                    _ = &mut io => {
                        io_done = true;
                        child.wait().await
                    }
                    status = child.wait() => status,
                };
                if !io_done {
                    // The command is gone; a descendant may still hold the pipes open. Take
                    // what is there without waiting for it.
                    let _ = tokio::time::timeout(DRAIN_GRACE, &mut io).await;
                }
                status
            })
            .await
        };

        match finished {
            Ok(Ok(status)) => {
                // The leader was reaped: its pid may be reused, so never signal the group
                // now; descendants it left behind on purpose are the hook's business.
                group.disarm();
                Ok(Output {
                    status,
                    stdout: out,
                    stderr: err,
                })
            }
            Ok(Err(e)) => Err(RunError::Wait(e)),
            Err(_elapsed) => {
                group.kill();
                // Reap the leader so it does not linger as a zombie; SIGKILL makes this quick.
                let _ = child.wait().await;
                Err(RunError::Timeout { stderr: err })
            }
        }
    }
}

enum RunError {
    Spawn(std::io::Error),
    Wait(std::io::Error),
    /// With what the hook wrote to stderr before it was killed.
    Timeout {
        stderr: Capped,
    },
}

fn exit_signal(status: &ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

/// Writes the event to the hook's stdin and closes it. A hook that does not read stdin and
/// exits makes the write fail (EPIPE); that is its choice, not an error.
async fn feed(stdin: Option<tokio::process::ChildStdin>, json: &str, name: &str) {
    let Some(mut stdin) = stdin else { return };
    let written = async {
        stdin.write_all(json.as_bytes()).await?;
        stdin.write_all(b"\n").await?;
        stdin.shutdown().await
    };
    if let Err(e) = written.await {
        tracing::debug!(hook = %name, "command hook did not take all of stdin: {e}");
    }
}

/// Kills a process group when dropped, unless disarmed after its leader was reaped.
struct GroupGuard(Option<Pid>);

impl GroupGuard {
    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            // ESRCH (already gone) is fine: there is nothing left to kill.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }

    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The first `limit` bytes of a stream; the rest is read and dropped so the writer never
/// blocks on a full pipe.
struct Capped {
    buf: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl Capped {
    fn new(limit: usize) -> Self {
        Capped {
            buf: Vec::new(),
            limit,
            truncated: false,
        }
    }

    async fn fill<R: AsyncRead + Unpin>(&mut self, reader: Option<R>) {
        let Some(mut reader) = reader else { return };
        let mut chunk = [0u8; 8192];
        loop {
            match reader.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let room = self.limit - self.buf.len();
                    if n > room {
                        self.truncated = true;
                    }
                    self.buf.extend_from_slice(&chunk[..n.min(room)]);
                }
            }
        }
    }

    /// The end of the text (where errors usually are), trimmed, for a log line.
    fn lossy_tail(&self, max_chars: usize) -> String {
        let text = String::from_utf8_lossy(&self.buf);
        let text = text.trim();
        let count = text.chars().count();
        if count <= max_chars {
            text.to_owned()
        } else {
            let tail: String = text.chars().skip(count - max_chars).collect();
            format!("…{tail}")
        }
    }
}

/// Reads a `pre_tool_call` reply. Anything but a JSON object with `"action"` of `"block"`
/// or `"allow"` abstains: hooks that only observe print nothing.
fn parse_verdict(name: &str, stdout: &[u8]) -> Option<ToolGate> {
    let text = String::from_utf8_lossy(stdout);
    let text = text.trim();
    if text.is_empty() {
        tracing::debug!(hook = %name, "pre_tool_call hook abstained (no output)");
        return None;
    }
    let reply: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(hook = %name, "pre_tool_call hook output is not JSON ({e}); it abstains");
            return None;
        }
    };
    match reply.get("action").and_then(serde_json::Value::as_str) {
        Some("block") => {
            let message = reply
                .get("message")
                .and_then(serde_json::Value::as_str)
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .map_or_else(|| format!("blocked by hook {name}"), str::to_owned);
            Some(ToolGate::Block {
                hook: name.to_owned(),
                message,
            })
        }
        Some("allow") => Some(ToolGate::Allow {
            hook: name.to_owned(),
        }),
        _ => {
            tracing::warn!(
                hook = %name,
                "pre_tool_call hook output has no \"action\" of \"block\" or \"allow\"; it abstains"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(name: Option<&str>, command: &str) -> CommandHookConfig {
        CommandHookConfig {
            name: name.map(str::to_owned),
            events: vec!["*".to_owned()],
            command: command.into(),
            timeout_ms: 1000,
        }
    }

    #[test]
    fn name_defaults_to_the_command_cut_to_40_chars() {
        let long = "echo 0123456789012345678901234567890123456789 | tee log";
        let h = CommandHook::from_config(&hook(None, long)).unwrap();
        assert_eq!(h.name, long.chars().take(40).collect::<String>());
        assert_eq!(h.name.chars().count(), 40);
        let h = CommandHook::from_config(&hook(Some("audit"), long)).unwrap();
        assert_eq!(h.name, "audit");
        let h = CommandHook::from_config(&hook(Some(" "), "true")).unwrap();
        assert_eq!(h.name, "true");
    }

    #[test]
    fn invalid_hooks_are_rejected() {
        assert!(CommandHook::from_config(&hook(None, "  ")).is_err());
        let mut h = hook(None, "true");
        h.timeout_ms = 0;
        assert!(CommandHook::from_config(&h).is_err());
        h.timeout_ms = 1;
        h.events.clear();
        assert!(CommandHook::from_config(&h).is_err());
    }

    #[test]
    fn verdicts() {
        let block = |m: &str| {
            Some(ToolGate::Block {
                hook: "h".to_owned(),
                message: m.to_owned(),
            })
        };
        assert_eq!(
            parse_verdict("h", br#"{"action":"block","message":"no rm"}"#),
            block("no rm")
        );
        assert_eq!(
            parse_verdict("h", b"  {\"action\":\"block\"}\n"),
            block("blocked by hook h")
        );
        assert_eq!(
            parse_verdict("h", br#"{"action":"block","message":""}"#),
            block("blocked by hook h")
        );
        assert_eq!(
            parse_verdict("h", br#"{"action":"allow"}"#),
            Some(ToolGate::Allow {
                hook: "h".to_owned()
            })
        );
        for abstain in [
            &b""[..],
            b"\n",
            b"ok",
            br#"{"action":"deny"}"#,
            br#"{"action":"BLOCK"}"#,
            br#"["block"]"#,
            br#"{"message":"x"}"#,
            br#"{"action":"allow"} trailing"#,
        ] {
            assert_eq!(parse_verdict("h", abstain), None, "{abstain:?}");
        }
    }

    #[test]
    fn capped_tail() {
        let mut c = Capped::new(10);
        c.buf = b"  hello world  ".to_vec();
        assert_eq!(c.lossy_tail(100), "hello world");
        assert_eq!(c.lossy_tail(5), "…world");
    }
}
