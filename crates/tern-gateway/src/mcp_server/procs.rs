//! The process tools: `process_start`, `process_list`, `process_poll`, `process_log`,
//! `process_kill`, `process_write` — the gateway's background processes for MCP clients.
//!
//! A process belongs to a session, and a key sees the processes of the sessions it sees
//! (an admin key: all), as the session API scopes sessions: another key's process is "not
//! found". Starting and handling one goes through the model's own `terminal` (with
//! `background: true`) and `process` tools on that session, so whatever holds for the
//! agent's commands holds here: the sandbox, the hard-line list, `[processes]` limits — and
//! more: a dangerous command, which the agent would have a human approve through the inbox
//! (resuming its session with a model turn), is refused, saying so; so is a dangerous line
//! written to a process's stdin. Every call goes through the operator's `pre_tool_call`
//! hooks (`source: "mcp"`). Without `sessionId`, `process_start` makes a session of the key
//! for the process (`source: mcp`) and says which.

use std::collections::HashMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tern_store::NewSession;

use super::{Call, ToolDef, ToolFail, ToolOut, parse_args, tool_context};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StartArgs {
    /// The shell command to run in the background.
    #[schemars(length(min = 1))]
    command: String,
    /// Its working directory, relative to the gateway's working directory (default: that).
    #[serde(default)]
    workdir: Option<String>,
    /// Run it in a pseudo-terminal (for programs that want one).
    #[serde(default)]
    pty: bool,
    /// One of your sessions to own the process (default: a new session).
    #[serde(default)]
    session_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ListArgs {
    /// Only this session's processes.
    #[serde(default)]
    session_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProcArgs {
    /// The process's id (`proc_…`), from process_start or process_list.
    process_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LogArgs {
    /// The process's id (`proc_…`).
    process_id: String,
    /// The first byte to read (default: the last `limit` bytes).
    #[serde(default)]
    offset: Option<u64>,
    /// Most bytes to read.
    #[serde(default)]
    #[schemars(range(min = 1))]
    limit: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WriteArgs {
    /// The process's id (`proc_…`).
    process_id: String,
    /// Text for its stdin.
    #[serde(default)]
    data: Option<String>,
    /// Press Enter after `data` (default false).
    #[serde(default)]
    submit: bool,
    /// Close its stdin afterwards (default false).
    #[serde(default)]
    close: bool,
}

pub(crate) fn tools() -> Vec<ToolDef> {
    vec![
        super::def::<StartArgs>(
            "process_start",
            "Start a shell command in the background on the gateway's machine (sandboxed like \
             the agent's commands; dangerous ones, such as recursive deletes, are refused). Returns \
             {processId, sessionId, pid} at once; the process outlives this call and gateway \
             restarts.",
        ),
        super::def::<ListArgs>(
            "process_list",
            "Your background processes, running and recently finished: id, command, status, \
             exit code, session.",
        ),
        super::def::<ProcArgs>(
            "process_poll",
            "A process's status and its output since the last poll.",
        ),
        super::def::<LogArgs>(
            "process_log",
            "A part of a process's whole output log: from `offset`, or the last `limit` bytes.",
        ),
        super::def::<ProcArgs>(
            "process_kill",
            "Stop a process: TERM to its process group, KILL after a grace period.",
        ),
        super::def::<WriteArgs>(
            "process_write",
            "Write to a process's stdin: `data`, with `submit` to press Enter after it, \
             `close` to end its input. Each line of `data` gets the dangerous-command check \
             process_start applies (a line that looks dangerous is refused); this is a best \
             effort, not a sandbox for what the process does with its input.",
        ),
    ]
}

pub(crate) async fn call(name: &str, args: Value, call: &Call<'_>) -> Option<ToolOut> {
    let out = match name {
        "process_start" => start(call, args).await,
        "process_list" => list(call, args).await,
        "process_poll" => match parse_args::<ProcArgs>(args) {
            Ok(a) => process_tool(call, &a.process_id, json!({"action": "poll"})).await,
            Err(e) => Err(e),
        },
        "process_log" => match parse_args::<LogArgs>(args) {
            Ok(a) => {
                let mut t = json!({"action": "log"});
                if let Some(o) = a.offset {
                    t["offset"] = json!(o);
                }
                if let Some(l) = a.limit {
                    t["limit"] = json!(l);
                }
                process_tool(call, &a.process_id, t).await
            }
            Err(e) => Err(e),
        },
        "process_kill" => match parse_args::<ProcArgs>(args) {
            Ok(a) => process_tool(call, &a.process_id, json!({"action": "kill"})).await,
            Err(e) => Err(e),
        },
        "process_write" => write(call, args).await,
        _ => return None,
    };
    Some(out)
}

/// The gateway's manager, or why there is none.
fn manager<'a>(
    call: &Call<'a>,
) -> Result<&'a std::sync::Arc<tern_procs::ProcessManager>, ToolFail> {
    call.gw.procs().ok_or_else(|| {
        ToolFail::new("this gateway runs no background processes (`tern gateway --inbox-only`)")
    })
}

/// The gateway offers the agent no `terminal` toolset: nor does it to MCP clients.
fn terminal_enabled(call: &Call<'_>) -> Result<(), ToolFail> {
    if call.gw.settings.toolsets.iter().any(|t| t == "terminal") {
        Ok(())
    } else {
        Err(ToolFail::new(
            "background processes are off: the gateway's toolsets leave out `terminal`",
        ))
    }
}

/// Runs one of the agent's tools (`terminal`, `process`) on `session_id`, through the
/// operator's `pre_tool_call` gate as the agent loop runs it (`source: "mcp"`, the agent's
/// tool name and arguments, so a hook written for the agent's `terminal` holds here too): a
/// `block` refuses the call with the hook's message; `post_tool_call` follows every call
/// that ran.
async fn run_tool(call: &Call<'_>, session_id: &str, tool: &str, args: Value) -> ToolOut {
    let ctx = tool_context(call, session_id);
    let call_id = ctx.call_id.clone();
    let arguments = args.to_string();
    let hooks = &call.gw.hooks;
    let gate = hooks.pre_tool_call(tern_hooks::PreToolCall {
        session_id: session_id.to_owned(),
        source: "mcp".into(),
        turn_id: String::new(),
        call_id: call_id.clone(),
        tool: tool.to_owned(),
        arguments: arguments.clone(),
    });
    // A cancelled call must not wait for a slow hook's verdict (dropping the future kills
    // the hooks' processes).
    let gate = tokio::select! {
        g = gate => g,
        () = call.ctx.ct.cancelled() => return Err(ToolFail::new("cancelled by the client")),
    };
    if let tern_hooks::ToolGate::Block { hook, message } = gate {
        tracing::info!(key = %call.key.name, session = %session_id, %tool, %hook, "MCP tool call blocked by a hook");
        return Err(ToolFail(format!("blocked by the {hook} hook: {message}")));
    }
    // An `Allow` verdict is deliberately not honoured: `tool_context` leaves `preapproved`
    // false, so a dangerous command is still refused over MCP. A hook allows for the agent,
    // whose turn an operator configured; an MCP client is a key holder the hook was never
    // written to vouch for.
    let t0 = std::time::Instant::now();
    let toolsets = ["terminal".to_owned()];
    let r = call
        .gw
        .agent
        .registry()
        .call(tool, &arguments, &toolsets, ctx)
        .await;
    let result = match &r {
        Ok(v) => v.to_string(),
        Err(e) => e.0.clone(),
    };
    hooks.emit(tern_hooks::HookEvent::PostToolCall(
        tern_hooks::PostToolCall {
            session_id: session_id.to_owned(),
            source: "mcp".into(),
            turn_id: String::new(),
            call_id,
            tool: tool.to_owned(),
            ok: r.is_ok(),
            duration_ms: u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX),
            result: result.chars().take(4096).collect(),
        },
    ));
    r.map_err(|e| ToolFail(e.0))
}

async fn start(call: &Call<'_>, args: Value) -> ToolOut {
    let a: StartArgs = parse_args(args)?;
    manager(call)?;
    terminal_enabled(call)?;
    if a.command.trim().is_empty() {
        return Err(ToolFail::new("`command` must not be empty"));
    }
    let made = a.session_id.is_none();
    let session_id = match a.session_id {
        Some(id) => {
            crate::api::session_or_404(call.gw, &call.key, &id).await?;
            id
        }
        None => {
            let s = call
                .gw
                .store
                .create_session(NewSession {
                    id: None,
                    title: Some(format!(
                        "MCP: {}",
                        a.command.chars().take(60).collect::<String>()
                    )),
                    source: "mcp".into(),
                    model: Some(call.gw.settings.model.clone()),
                    parent_id: None,
                    system_prompt: None,
                    owner: Some(call.key.id.clone()),
                    toolsets: None,
                })
                .await?;
            call.gw.hooks.emit(tern_hooks::HookEvent::SessionStart(
                tern_hooks::SessionStart {
                    session_id: s.id.clone(),
                    source: s.source.clone(),
                    model: s.model.clone(),
                    parent_id: None,
                },
            ));
            s.id
        }
    };
    let mut t = json!({"command": a.command, "background": true, "pty": a.pty});
    if let Some(w) = a.workdir {
        t["workdir"] = json!(w);
    }
    let mut out = match run_tool(call, &session_id, "terminal", t).await {
        Ok(out) => out,
        Err(e) => {
            // A refused command leaves no empty session of its own behind.
            if made && let Err(d) = call.gw.store.delete_session(&session_id).await {
                tracing::warn!(session = %session_id, error = %d, "cannot remove the unused session");
            }
            return Err(e);
        }
    };
    tracing::info!(key = %call.key.name, session = %session_id, process = ?out.get("process_id"), "background process started over MCP");
    if let Some(o) = out.as_object_mut() {
        // The tool names the process `session_id` too (Hermes's name); here that key is the
        // owning session's.
        let id = o.remove("process_id").or_else(|| o.remove("session_id"));
        o.remove("session_id");
        o.remove("note");
        o.insert("processId".into(), id.unwrap_or(Value::Null));
        o.insert("sessionId".into(), json!(session_id));
    }
    Ok(out)
}

/// The session owning process `id`, if the key sees it; "not found" alike otherwise.
async fn owning_session(call: &Call<'_>, id: &str) -> Result<String, ToolFail> {
    let mgr = manager(call)?;
    let not_found = || ToolFail(format!("process {id} not found"));
    let info = mgr.get(id).await.map_err(|_| not_found())?;
    let session = info.session_id.ok_or_else(not_found)?;
    let s = call.gw.store.get_session(&session).await?;
    match s {
        Some(s) if call.key.sees(&s) => Ok(session),
        _ => Err(not_found()),
    }
}

async fn process_tool(call: &Call<'_>, id: &str, mut args: Value) -> ToolOut {
    let session = owning_session(call, id).await?;
    args["session_id"] = json!(id);
    let mut out = run_tool(call, &session, "process", args).await?;
    rename_id(&mut out);
    Ok(out)
}

/// The `process` tool says `session_id` for the process's id (Hermes's name): over MCP it is
/// `processId`, and `sessionId` the owning session.
fn rename_id(v: &mut Value) {
    if let Some(o) = v.as_object_mut()
        && let Some(id) = o.remove("session_id")
    {
        o.insert("processId".into(), id);
    }
}

async fn write(call: &Call<'_>, args: Value) -> ToolOut {
    let a: WriteArgs = parse_args(args)?;
    if a.data.is_none() && !a.close {
        return Err(ToolFail::new("send `data`, `close: true`, or both"));
    }
    if a.submit && a.data.is_none() {
        return Err(ToolFail::new("`submit` needs `data`"));
    }
    if let Some(data) = &a.data {
        refuse_dangerous_input(data)?;
    }
    let mut out = json!({"processId": a.process_id, "ok": true});
    if let Some(data) = a.data {
        let action = if a.submit { "submit" } else { "write" };
        out = process_tool(call, &a.process_id, json!({"action": action, "data": data})).await?;
    }
    if a.close {
        out = process_tool(call, &a.process_id, json!({"action": "close"})).await?;
    }
    Ok(out)
}

/// Text for a process's stdin may be a command for a shell reading it (`process_start` of
/// `bash`, then `submit`): each line of it gets the dangerous-command check `process_start`
/// gets, and one that would need a human's approval (or is hard-line) is refused, saying
/// why. A best effort, as the description says: a program may read its input otherwise
/// than as command lines, and a line sent in pieces is checked piece by piece.
fn refuse_dangerous_input(data: &str) -> Result<(), ToolFail> {
    for line in data.split(['\n', '\r']) {
        match tern_tools::danger::check_command(line) {
            tern_tools::danger::Verdict::Safe => {}
            tern_tools::danger::Verdict::Dangerous { description, .. }
            | tern_tools::danger::Verdict::Forbidden { description, .. } => {
                return Err(ToolFail(format!(
                    "refused: the input holds a command that needs a human's approval \
                     ({description}). {}",
                    super::DANGEROUS_OVER_MCP
                )));
            }
        }
    }
    Ok(())
}

async fn list(call: &Call<'_>, args: Value) -> ToolOut {
    let a: ListArgs = parse_args(args)?;
    let mgr = manager(call)?;
    if let Some(s) = &a.session_id {
        crate::api::session_or_404(call.gw, &call.key, s).await?;
    }
    let all = mgr
        .list()
        .await
        .map_err(|e| ToolFail(format!("cannot list the processes: {e}")))?;
    // Whether the key sees each session, looked up once per session.
    let mut sees: HashMap<String, bool> = HashMap::new();
    let mut out = Vec::new();
    for p in all {
        let Some(session) = p.session_id.clone() else {
            continue;
        };
        if a.session_id.as_ref().is_some_and(|s| *s != session) {
            continue;
        }
        let visible = match sees.get(&session) {
            Some(v) => *v,
            None => {
                let v = call
                    .gw
                    .store
                    .get_session(&session)
                    .await?
                    .is_some_and(|s| call.key.sees(&s));
                sees.insert(session.clone(), v);
                v
            }
        };
        if visible {
            let mut v = serde_json::to_value(&p)
                .map_err(|e| ToolFail(format!("cannot describe a process: {e}")))?;
            if let Some(o) = v.as_object_mut() {
                let id = o.remove("id");
                o.insert("processId".into(), id.unwrap_or(Value::Null));
                let sid = o.remove("session_id");
                o.insert("sessionId".into(), sid.unwrap_or(Value::Null));
            }
            out.push(v);
        }
    }
    Ok(json!({"processes": out}))
}
