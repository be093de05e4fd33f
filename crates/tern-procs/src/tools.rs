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

use serde_json::{Value, json};
use tern_sandbox::Level;
use tern_tools::{BoxFuture, Registry, Tool, ToolContext, ToolError, ToolResult, ToolSpec};
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
    let mut spec = terminal_spec();
    match &mgr.config().backend {
        Backend::Local => registry.set_prompt_line("terminal", SYSTEM_PROMPT_LINE),
        Backend::Ssh(t) => {
            let (line, workdir) = ssh_notes(t);
            registry.set_prompt_line("terminal", format!("{SYSTEM_PROMPT_LINE} {line}"));
            spec.parameters["properties"]["workdir"]["description"] = json!(workdir);
        }
    }
    registry.register(Arc::new(Terminal {
        spec,
        mgr: Arc::clone(&mgr),
        notifier,
    }));
    registry.register(Arc::new(Process {
        spec: process_spec(),
        mgr,
    }));
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

fn terminal_spec() -> ToolSpec {
    let mut spec = terminal::spec();
    spec.description = "Run a shell command (bash). In the foreground (the default) it returns \
        the combined stdout and stderr with the exit code; commands run non-interactively \
        (stdin closed), long output is cut in the middle. With `background: true` it starts the \
        command under a supervisor and answers at once with its `session_id` (`proc_…`) and \
        pid; use the `process` tool with that id to read its output, wait for it, write to its \
        stdin or kill it. Background processes outlive the turn and gateway restarts. Use \
        `pty: true` for interactive programs (REPLs, prompts), `notify_on_complete: true` to \
        be told when it exits, `watch_patterns` (regular expressions) to be told when its \
        output matches. Dangerous commands (recursive deletes, force pushes, disk writes) need \
        a human's approval and may be denied; some are never allowed.";
    let props = &mut spec.parameters["properties"];
    props["background"] = json!({"type": "boolean", "description": "Start in the background and answer at once with the process's session_id (default false)."});
    props["pty"] = json!({"type": "boolean", "description": "Background only: run in a pseudo-terminal, for interactive programs (default false)."});
    props["notify_on_complete"] = json!({"type": "boolean", "description": "Background only: resume this session with a summary (exit code, last lines) when the process exits."});
    props["watch_patterns"] = json!({
        "type": "array",
        "items": {"type": "string", "minLength": 1},
        "maxItems": MAX_WATCH_PATTERNS,
        "description": "Background only: regular expressions; a match in the output resumes this session."
    });
    props["timeout"]["description"] =
        json!("Foreground only: seconds before the command is killed (default 180).");
    spec
}

fn process_spec() -> ToolSpec {
    ToolSpec {
        name: "process",
        toolset: "terminal",
        description: "Manage background processes started with `terminal` and \
            `background: true`. Actions: `list` (this session's processes), `poll` (status and \
            the output since the last poll), `log` (the full log from `offset`, at most `limit` \
            bytes; without offset the newest bytes), `wait` (until it exits or `timeout` \
            seconds pass), `kill` (TERM to its process group, KILL after a grace period), \
            `write` (`data` to stdin), `submit` (`data` and Enter), `close` (end stdin). Every \
            action but `list` needs `session_id`.",
        parameters: json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["list", "poll", "log", "wait", "kill", "write", "submit", "close"]},
                "session_id": {"type": "string", "description": "The process's id (`proc_…`), from `terminal` or `list`."},
                "offset": {"type": "integer", "minimum": 0, "description": "log: the first byte to read."},
                "limit": {"type": "integer", "minimum": 1, "description": "log: most bytes to read."},
                "timeout": {"type": "integer", "minimum": 0, "description": "wait: seconds (default 60; clamped)."},
                "data": {"type": "string", "description": "write/submit: the text for stdin."}
            },
            "required": ["action"],
            "additionalProperties": false
        }),
    }
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

struct Terminal {
    spec: ToolSpec,
    mgr: Arc<ProcessManager>,
    /// Arms `notify_on_complete` (the gateway's durable waits); `None`: nobody is notified.
    notifier: Option<Arc<dyn ProcessNotifier>>,
}

impl Tool for Terminal {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(async move {
            if args["background"].as_bool() != Some(true) {
                let background_only = ["pty", "notify_on_complete", "watch_patterns"]
                    .into_iter()
                    .filter(|k| match &args[*k] {
                        Value::Bool(b) => *b,
                        Value::Array(a) => !a.is_empty(),
                        _ => false,
                    })
                    .collect::<Vec<_>>();
                if !background_only.is_empty() {
                    return Err(ToolError::new(format!(
                        "{} only work with `background: true`",
                        background_only.join(", ")
                    )));
                }
                return terminal::run(args, ctx).await;
            }
            self.background(args, ctx).await
        })
    }
}

impl Terminal {
    async fn background(&self, args: Value, ctx: ToolContext) -> ToolResult {
        let command = args["command"].as_str().unwrap_or_default().to_owned();
        let watch_patterns: Vec<String> = args["watch_patterns"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| p.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        // Before asking anyone to approve the command: a bad pattern would fail the start.
        validate_watch_patterns(&watch_patterns).map_err(tool_error)?;
        let workdir = match &self.mgr.config().backend {
            Backend::Local => terminal::authorize(&command, args["workdir"].as_str(), &ctx).await?,
            Backend::Ssh(t) => {
                // A path on the remote host: the manager checks it there at the spawn, not
                // on this machine. The approver sees (and a grant is keyed by) host:path.
                let asked = args["workdir"].as_str().unwrap_or_default();
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
                let requested = args["sandbox_permissions"].as_str() == Some("require_escalated");
                escalation::level(
                    &ctx,
                    &command,
                    &workdir,
                    requested,
                    args["justification"].as_str(),
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
                pty: args["pty"].as_bool().unwrap_or(false),
                session_id: Some(ctx.session_id.clone()),
                notify_on_complete: args["notify_on_complete"].as_bool().unwrap_or(false),
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
        if args.get("timeout").is_some() {
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

struct Process {
    spec: ToolSpec,
    mgr: Arc<ProcessManager>,
}

impl Tool for Process {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(self.run(args, ctx))
    }
}

impl Process {
    /// The process `args.session_id` names, if it belongs to the calling session.
    async fn owned(&self, args: &Value, ctx: &ToolContext) -> Result<ProcInfo, ToolError> {
        let Some(id) = args["session_id"].as_str() else {
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

    async fn run(&self, args: Value, ctx: ToolContext) -> ToolResult {
        let action = args["action"].as_str().unwrap_or_default();
        if action == "list" {
            let procs: Vec<Value> = self
                .mgr
                .list()
                .await
                .map_err(tool_error)?
                .iter()
                .filter(|p| p.session_id.as_deref() == Some(ctx.session_id.as_str()))
                .map(proc_json)
                .collect();
            return Ok(json!({ "processes": procs }));
        }
        let info = self.owned(&args, &ctx).await?;
        let id = info.id.as_str();
        let mgr = &self.mgr;
        match action {
            "poll" => {
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
            "log" => {
                let offset = args["offset"].as_u64();
                let limit = args["limit"]
                    .as_u64()
                    .map(|l| usize::try_from(l).unwrap_or(usize::MAX));
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
            "wait" => {
                let asked = args["timeout"].as_u64().unwrap_or(DEFAULT_WAIT_SECS);
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
            "kill" => {
                let k = mgr.kill(id).await.map_err(tool_error)?;
                let mut v = proc_json(&k.info);
                v["signalled"] = json!(k.signalled);
                Ok(v)
            }
            "write" | "submit" => {
                let Some(data) = args["data"].as_str() else {
                    return Err(ToolError::new(format!("`{action}` needs `data`")));
                };
                if action == "write" {
                    mgr.write(id, data).await
                } else {
                    mgr.submit(id, data).await
                }
                .map_err(tool_error)?;
                Ok(json!({"session_id": id, "ok": true}))
            }
            "close" => {
                mgr.close(id).await.map_err(tool_error)?;
                Ok(json!({"session_id": id, "ok": true}))
            }
            other => Err(ToolError::new(format!("unknown action `{other}`"))),
        }
    }
}
