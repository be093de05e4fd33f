//! The model's side: `terminal` with `background: true`, and the `process` tool.
//!
//! Only a program that owns a [`ProcessManager`] registers these (the gateway, whose
//! processes it re-adopts after a restart). [`register`] replaces the foreground-only
//! `terminal` of [`Registry::builtin`] with one that also starts background processes, and
//! adds `process`; both are in the `terminal` toolset. `tern chat` and `tern ask` keep the
//! plain `terminal`: a process started there would outlive the command with nobody to
//! report its completion to.
//!
//! Flow of `terminal` with `background: true`: the options are checked (watch patterns
//! must compile) → the command goes through [`terminal::authorize`] like a foreground one
//! (working directory, hard-line list, approval of dangerous commands) →
//! [`ProcessManager::spawn`] starts it under a supervisor, tagged with the calling
//! session → the answer is at once `{"process_id": "proc_…", "session_id": (the same id,
//! under Hermes' name), "pid": …}`. Without `background` the call is the foreground
//! `terminal`.
//!
//! With the ssh backend ([`crate::ssh`]) background commands run on the remote host: their
//! `workdir` is a path there, so it is not checked on this machine (the manager's preflight
//! checks it on the host) and only the command goes through
//! [`terminal::authorize_command`] (the approver sees `host:path`). Foreground commands,
//! like the file tools, stay on this machine; the system prompt line says so.
//!
//! `process` maps its `action` to the manager: `list` (this session's processes), `poll`,
//! `log`, `wait` (clamped, ended early by the turn's cancellation), `kill`, `write`,
//! `submit`, `close`. A session sees and touches only its own processes; another
//! session's id is answered as unknown.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tern_sandbox::Level;
use tern_tools::terminal::{SandboxPermissions, TerminalArgs};
use tern_tools::tool::lenient_opt_u64;
use tern_tools::{Registry, Tool, ToolContext, ToolError, ToolResult, ToolSpec};
use tern_tools::{escalation, terminal};

use crate::layout::SandboxSpec;
use crate::manager::{MAX_WATCH_PATTERNS, validate_watch_patterns};
use crate::ssh::SshTarget;
use crate::{Backend, ProcError, ProcInfo, ProcessManager, ProcessNotifier, SpawnRequest};

/// `wait`'s timeout when the model gives none, in seconds.
const DEFAULT_WAIT_SECS: u64 = 60;

/// The line the `terminal` toolset adds to the system prompt when background processes
/// are available.
pub const SYSTEM_PROMPT_LINE: &str = "Long-running commands (servers, watchers, long builds \
    and test suites, interactive programs) can run in the background: call `terminal` with \
    `background: true` (and `pty: true` for interactive programs), then use the `process` \
    tool with the returned session_id to poll output, wait, send input or kill it. Background \
    processes keep running after your turn ends.";

/// Registers the background-capable `terminal` (replacing the foreground-only one) and the
/// `process` tool, both on `mgr`, without completion notifications.
pub fn register(registry: &mut Registry, mgr: Arc<ProcessManager>) {
    register_with(registry, mgr, None);
}

/// [`register`] with a notifier: a process started with `notify_on_complete` is armed
/// through it before the tool answers (see [`crate::notify`]).
pub fn register_with(
    registry: &mut Registry,
    mgr: Arc<ProcessManager>,
    notifier: Option<Arc<dyn ProcessNotifier>>,
) {
    if let Backend::Local = &mgr.config().backend {
        registry.set_prompt_line("terminal", SYSTEM_PROMPT_LINE);
    }
    if let Backend::Ssh(t) = &mgr.config().backend {
        let (line, _) = ssh_notes(t);
        registry.set_prompt_line("terminal", format!("{SYSTEM_PROMPT_LINE} {line}"));
    }
    registry.add(Terminal {
        mgr: Arc::clone(&mgr),
        notifier,
    });
    registry.add_context(
        "terminal",
        Arc::new(crate::context::ProcessContext {
            mgr: Arc::clone(&mgr),
        }),
    );
    registry.add(Process { mgr });
}

/// With the ssh backend: the system prompt's note on where background processes run, and
/// the `workdir` parameter's description.
fn ssh_notes(t: &SshTarget) -> (String, String) {
    let base = t.workdir.as_deref().unwrap_or("~");
    let line = format!(
        "Background processes run on the remote host {} over ssh, in {base} unless `workdir` \
         says otherwise; foreground commands and the file tools act on this machine.",
        t.display()
    );
    let workdir = format!(
        "Foreground: the directory to run in, relative to the session's working directory. \
         Background: a directory on the remote host {}, relative to {base} (default {base}).",
        t.display()
    );
    (line, workdir)
}

/// The arguments of the background-capable `terminal`: the foreground one's
/// ([`TerminalArgs`]) and the background options.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackgroundTerminalArgs {
    /// The command line to run with bash -c.
    #[schemars(length(min = 1))]
    pub command: String,
    /// Foreground only: seconds before the command is killed (default 180).
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
    /// Start in the background and answer at once with the process's session_id (default false).
    #[serde(default)]
    pub background: bool,
    /// Background only: run in a pseudo-terminal, for interactive programs (default false).
    #[serde(default)]
    pub pty: bool,
    /// Background only: resume this session with a summary (exit code, last lines) when the process exits.
    #[serde(default)]
    pub notify_on_complete: bool,
    /// Background only: regular expressions; a match in the output resumes this session.
    #[serde(default)]
    #[schemars(length(max = MAX_WATCH_PATTERNS), inner(length(min = 1)))]
    pub watch_patterns: Vec<String>,
}

impl BackgroundTerminalArgs {
    /// The background options set on a call that is not `background`.
    fn background_only(&self) -> Vec<&'static str> {
        [
            ("pty", self.pty),
            ("notify_on_complete", self.notify_on_complete),
            ("watch_patterns", !self.watch_patterns.is_empty()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }

    fn into_foreground(self) -> TerminalArgs {
        TerminalArgs {
            command: self.command,
            timeout: self.timeout,
            workdir: self.workdir,
            sandbox_permissions: self.sandbox_permissions,
            justification: self.justification,
        }
    }
}

/// What `process` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    List,
    Poll,
    Log,
    Wait,
    Kill,
    Write,
    Submit,
    Close,
}

/// The arguments of `process`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessArgs {
    pub action: Action,
    /// The process's id (`proc_…`), from `terminal` or `list`.
    #[serde(default)]
    pub session_id: Option<String>,
    /// log: the first byte to read.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    #[schemars(with = "Option<u64>")]
    pub offset: Option<u64>,
    /// log: most bytes to read.
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    #[schemars(with = "Option<u64>", range(min = 1))]
    pub limit: Option<u64>,
    /// wait: seconds (default 60; clamped).
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    #[schemars(with = "Option<u64>")]
    pub timeout: Option<u64>,
    /// write/submit: the text for stdin.
    #[serde(default)]
    pub data: Option<String>,
}

fn tool_error(e: ProcError) -> ToolError {
    ToolError::new(e.to_string())
}

/// A process as the model sees it: `session_id` is the process's id (the calling session
/// is implied).
fn proc_json(info: &ProcInfo) -> Value {
    let mut v = serde_json::to_value(info).unwrap_or_else(|_| json!({}));
    if let Some(obj) = v.as_object_mut() {
        obj.remove("session_id");
        obj.remove("supervisor_pid");
        if let Some(id) = obj.remove("id") {
            obj.insert("session_id".into(), id);
        }
    }
    v
}

/// The background-capable `terminal`.
struct Terminal {
    mgr: Arc<ProcessManager>,
    /// Arms `notify_on_complete` (the gateway's durable waits); `None`: nobody is notified.
    notifier: Option<Arc<dyn ProcessNotifier>>,
}

impl Tool for Terminal {
    const NAME: &'static str = "terminal";
    const TOOLSET: &'static str = "terminal";
    const DESCRIPTION: &'static str = "Run a shell command (bash). In the foreground (the \
        default) it returns the combined stdout and stderr with the exit code; commands run \
        non-interactively (stdin closed), long output is cut in the middle. With \
        `background: true` it starts the command under a supervisor and answers at once with \
        its `session_id` (`proc_…`) and pid; use the `process` tool with that id to read its \
        output, wait for it, write to its stdin or kill it. Background processes outlive the \
        turn and gateway restarts. Use `pty: true` for interactive programs (REPLs, prompts), \
        `notify_on_complete: true` to be told when it exits, `watch_patterns` (regular \
        expressions) to be told when its output matches. Dangerous commands (recursive \
        deletes, force pushes, disk writes) need a human's approval and may be denied; some \
        are never allowed.";
    type Args = BackgroundTerminalArgs;

    fn customize(&self, spec: &mut ToolSpec) {
        if let Backend::Ssh(t) = &self.mgr.config().backend {
            let (_, workdir) = ssh_notes(t);
            spec.parameters["properties"]["workdir"]["description"] = json!(workdir);
        }
    }

    async fn run(&self, args: BackgroundTerminalArgs, ctx: ToolContext) -> ToolResult {
        if !args.background {
            let background_only = args.background_only();
            if !background_only.is_empty() {
                return Err(ToolError::new(format!(
                    "{} only work with `background: true`",
                    background_only.join(", ")
                )));
            }
            return terminal::run(args.into_foreground(), ctx).await;
        }
        self.background(args, ctx).await
    }
}

impl Terminal {
    async fn background(&self, args: BackgroundTerminalArgs, ctx: ToolContext) -> ToolResult {
        let command = args.command;
        let watch_patterns = args.watch_patterns;
        // Before asking anyone to approve the command: a bad pattern would fail the start.
        validate_watch_patterns(&watch_patterns).map_err(tool_error)?;
        let workdir = match &self.mgr.config().backend {
            Backend::Local => terminal::authorize(&command, args.workdir.as_deref(), &ctx).await?,
            Backend::Ssh(t) => {
                // A path on the remote host: the manager checks it there at the spawn, not
                // on this machine. The approver sees (and a grant is keyed by) host:path.
                let asked = args.workdir.as_deref().unwrap_or_default();
                let remote = t.remote_workdir(asked).map_err(tool_error)?;
                let shown = PathBuf::from(t.describe_path(&remote));
                terminal::authorize_command(&command, &shown, &ctx).await?;
                PathBuf::from(asked)
            }
        };
        // The ssh client (the local side of an ssh process) needs the network and writes
        // its known hosts: it runs as if escalated, with tern's home still out of reach.
        let level = match &self.mgr.config().backend {
            Backend::Local => {
                let requested = args.sandbox_permissions == SandboxPermissions::RequireEscalated;
                escalation::level(
                    &ctx,
                    &command,
                    &workdir,
                    requested,
                    args.justification.as_deref(),
                )
                .await?
            }
            Backend::Ssh(_) => Level::Escalated,
        };
        ctx.limits
            .sandbox
            .check()
            .map_err(|e| ToolError::new(e.to_string()))?;
        let sandbox = Some(SandboxSpec {
            policy: ctx.limits.sandbox.policy().clone(),
            workspace: ctx.workdir.clone(),
            escalated: level == Level::Escalated,
        });
        let info = self
            .mgr
            .spawn(SpawnRequest {
                command,
                workdir,
                pty: args.pty,
                session_id: Some(ctx.session_id.clone()),
                notify_on_complete: args.notify_on_complete,
                watch_patterns,
                sandbox,
            })
            .await
            .map_err(tool_error)?;
        tracing::info!(session = %ctx.session_id, id = %info.id, pid = info.pid, "background process started by the model");
        if info.notify_on_complete
            && let Some(n) = &self.notifier
            && let Err(e) = n.armed(&ctx.call_id, &info).await
        {
            // The process runs; its exit arms the notification again (idempotent per id).
            tracing::warn!(id = %info.id, error = %e, "cannot arm the completion notification now; its exit will");
        }
        let mut note = String::from(
            "running in the background; use the `process` tool with this id as its session_id",
        );
        if args.timeout.is_some() {
            note.push_str(
                ". `timeout` was ignored: a background process runs until it exits or is \
                 killed (`process` `wait` takes a timeout)",
            );
        }
        // `process_id` names it plainly; `session_id` is the same id under Hermes' name.
        Ok(json!({
            "process_id": info.id,
            "session_id": info.id,
            "pid": info.pid,
            "state": "running",
            "note": note,
        }))
    }
}

/// `process`: the model's handle on its background processes.
struct Process {
    mgr: Arc<ProcessManager>,
}

impl Tool for Process {
    const NAME: &'static str = "process";
    const TOOLSET: &'static str = "terminal";
    const DESCRIPTION: &'static str = "Manage background processes started with `terminal` \
        and `background: true`. Actions: `list` (this session's processes), `poll` (status \
        and the output since the last poll), `log` (the full log from `offset`, at most \
        `limit` bytes; without offset the newest bytes), `wait` (until it exits or `timeout` \
        seconds pass), `kill` (TERM to its process group, KILL after a grace period), \
        `write` (`data` to stdin), `submit` (`data` and Enter), `close` (end stdin). Every \
        action but `list` needs `session_id`.";
    type Args = ProcessArgs;

    async fn run(&self, args: ProcessArgs, ctx: ToolContext) -> ToolResult {
        self.act(args, ctx).await
    }
}

impl Process {
    /// This session's processes.
    async fn list(&self, ctx: &ToolContext) -> ToolResult {
        let procs: Vec<Value> = self
            .mgr
            .list()
            .await
            .map_err(tool_error)?
            .iter()
            .filter(|p| p.session_id.as_deref() == Some(ctx.session_id.as_str()))
            .map(proc_json)
            .collect();
        Ok(json!({ "processes": procs }))
    }

    /// The process `args.session_id` names, if it belongs to the calling session.
    async fn owned(&self, args: &ProcessArgs, ctx: &ToolContext) -> Result<ProcInfo, ToolError> {
        let Some(id) = args.session_id.as_deref() else {
            return Err(ToolError::new(
                "this action needs `session_id` (the `proc_…` id from `terminal` or `list`)",
            ));
        };
        match self.mgr.get(id).await {
            Ok(info) if info.session_id.as_deref() == Some(ctx.session_id.as_str()) => Ok(info),
            Ok(_) | Err(ProcError::NotFound(_)) => Err(ToolError::new(format!(
                "no process {id} in this session; `list` shows this session's processes"
            ))),
            Err(e) => Err(tool_error(e)),
        }
    }

    async fn act(&self, args: ProcessArgs, ctx: ToolContext) -> ToolResult {
        let action = args.action;
        if action == Action::List {
            return self.list(&ctx).await;
        }
        let info = self.owned(&args, &ctx).await?;
        let id = info.id.as_str();
        let mgr = &self.mgr;
        match action {
            // Answered above: it names no process.
            Action::List => self.list(&ctx).await,
            Action::Poll => {
                let p = mgr.poll(id).await.map_err(tool_error)?;
                let mut v = proc_json(&p.info);
                v["output"] = json!(p.output);
                if p.skipped_bytes > 0 {
                    v["skipped_bytes"] = json!(p.skipped_bytes);
                    v["note"] = json!(format!(
                        "{} older bytes of new output are not shown; `log` with an offset reads them",
                        p.skipped_bytes
                    ));
                }
                Ok(v)
            }
            Action::Log => {
                let offset = args.offset;
                let limit = args.limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX));
                let c = mgr.log(id, offset, limit).await.map_err(tool_error)?;
                let mut v = json!({
                    "session_id": id,
                    "output": c.output,
                    "start": c.start,
                    "end": c.end,
                    "total": c.total,
                });
                if c.rotated {
                    v["note"] = json!(format!(
                        "the bytes before {} were rotated out of the log",
                        c.start
                    ));
                }
                Ok(v)
            }
            Action::Wait => {
                let asked = args.timeout.unwrap_or(DEFAULT_WAIT_SECS);
                let max = mgr.config().max_wait;
                let timeout = Duration::from_secs(asked).min(max);
                let w = mgr
                    .wait(id, timeout, &ctx.cancel)
                    .await
                    .map_err(tool_error)?;
                let mut v = proc_json(&w.info);
                v["timed_out"] = json!(w.timed_out);
                if Duration::from_secs(asked) > max {
                    v["note"] = json!(format!("the timeout was clamped to {} s", max.as_secs()));
                }
                if w.interrupted {
                    return Err(ToolError::new(
                        "interrupted: the turn was stopped; the process is still running",
                    ));
                }
                Ok(v)
            }
            Action::Kill => {
                let k = mgr.kill(id).await.map_err(tool_error)?;
                let mut v = proc_json(&k.info);
                v["signalled"] = json!(k.signalled);
                Ok(v)
            }
            Action::Write | Action::Submit => {
                let name = if action == Action::Write {
                    "write"
                } else {
                    "submit"
                };
                let Some(data) = args.data.as_deref() else {
                    return Err(ToolError::new(format!("`{name}` needs `data`")));
                };
                if action == Action::Write {
                    mgr.write(id, data).await
                } else {
                    mgr.submit(id, data).await
                }
                .map_err(tool_error)?;
                Ok(json!({"session_id": id, "ok": true}))
            }
            Action::Close => {
                mgr.close(id).await.map_err(tool_error)?;
                Ok(json!({"session_id": id, "ok": true}))
            }
        }
    }
}
