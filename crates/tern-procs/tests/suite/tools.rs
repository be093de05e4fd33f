//! The model's tools (`terminal` with `background: true`, `process`) through
//! `Registry::call`, with a real manager and real supervisors on a temporary directory.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tern_procs::ProcessManager;
use tern_tools::{AllowAll, Approver, DenyAll, Registry, ToolContext, ToolLimits, ToolResult};
use tokio_util::sync::CancellationToken;

use support::{PATIENCE, config, eventually, kill_all, wait_until};

struct Env {
    _dir: tempfile::TempDir,
    work: std::path::PathBuf,
    mgr: Arc<ProcessManager>,
    registry: Registry,
}

async fn env_with(tweak: impl FnOnce(&mut tern_procs::ManagerConfig)) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join("sub")).unwrap();
    let mut cfg = config(dir.path());
    tweak(&mut cfg);
    let mgr = Arc::new(ProcessManager::open(cfg).await.unwrap());
    let mut registry = Registry::builtin();
    tern_procs::tools::register(&mut registry, Arc::clone(&mgr));
    Env {
        _dir: dir,
        work,
        mgr,
        registry,
    }
}

async fn env() -> Env {
    env_with(|_| {}).await
}

fn ctx_for(workdir: &Path, session: &str, approver: Arc<dyn Approver>) -> ToolContext {
    ToolContext {
        session_id: session.into(),
        call_id: "call-1".into(),
        call_seq: 0,
        workdir: workdir.to_path_buf(),
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

impl Env {
    fn ctx(&self) -> ToolContext {
        ctx_for(&self.work, "sess-a", deny())
    }

    async fn call_with(&self, tool: &str, args: Value, ctx: ToolContext) -> ToolResult {
        self.registry
            .call(tool, &args.to_string(), &["terminal".to_owned()], ctx)
            .await
    }

    async fn call(&self, tool: &str, args: Value) -> ToolResult {
        self.call_with(tool, args, self.ctx()).await
    }

    async fn start(&self, args: Value) -> String {
        let v = self.call("terminal", args).await.unwrap();
        assert!(v["pid"].as_i64().unwrap() > 0, "{v}");
        v["session_id"].as_str().unwrap().to_owned()
    }

    async fn process(&self, action: &str, id: &str, extra: Value) -> Value {
        let mut args = json!({"action": action, "session_id": id});
        if let Value::Object(m) = extra {
            for (k, v) in m {
                args[k] = v;
            }
        }
        self.call("process", args).await.unwrap()
    }

    /// Polls until the accumulated output contains `needle`.
    async fn poll_until(&self, id: &str, needle: &str) -> String {
        let mut seen = String::new();
        wait_until(PATIENCE, Duration::from_millis(50), async || {
            let v = self.process("poll", id, json!({})).await;
            seen.push_str(v["output"].as_str().unwrap());
            if seen.contains(needle) {
                return Ok(());
            }
            assert_eq!(v["state"], "running", "exited without {needle:?}: {seen:?}");
            Err(format!("no {needle:?} in {seen:?}"))
        })
        .await;
        seen
    }
}

#[tokio::test]
async fn background_answers_at_once_and_process_reads_it() {
    let e = env().await;
    let id = e
        .start(json!({
            "command": "pwd; echo out; echo err >&2; read l; echo \"got $l\"; exit 3",
            "background": true,
            "workdir": "sub",
        }))
        .await;
    assert!(id.starts_with("proc_"), "{id}");

    let list = e.call("process", json!({"action": "list"})).await.unwrap();
    let procs = list["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0]["session_id"], id.as_str());
    assert_eq!(procs[0]["state"], "running");
    assert!(procs[0]["workdir"].as_str().unwrap().ends_with("/sub"));

    let seen = e.poll_until(&id, "err").await;
    assert!(seen.contains("/sub\nout\n"), "{seen}");
    // A second poll shows only what is new: nothing yet.
    let again = e.process("poll", &id, json!({})).await;
    assert_eq!(again["output"], "");

    e.process("submit", &id, json!({"data": "hello"})).await;
    let w = e.process("wait", &id, json!({"timeout": 120})).await;
    assert_eq!(w["state"], "exited", "{w}");
    assert_eq!(w["exit_code"], 3);
    assert_eq!(w["timed_out"], false);

    let all = e.process("log", &id, json!({"offset": 0})).await;
    let out = all["output"].as_str().unwrap();
    assert!(out.ends_with("out\nerr\ngot hello\n"), "{out}");
    assert_eq!(all["start"], 0);
    assert_eq!(all["total"], all["end"]);
    let part = e
        .process("log", &id, json!({"offset": 0, "limit": 3}))
        .await;
    assert_eq!(part["output"].as_str().unwrap(), &out[..3]);
    assert_eq!(part["end"], 3);
    let tail = e.process("log", &id, json!({"limit": 10})).await;
    assert_eq!(tail["output"], "got hello\n");
}

#[tokio::test]
async fn write_and_close_over_a_pipe() {
    let e = env().await;
    let id = e
        .start(json!({"command": "cat; echo done", "background": true}))
        .await;
    e.process("write", &id, json!({"data": "abc"})).await;
    e.process("write", &id, json!({"data": "def\n"})).await;
    e.poll_until(&id, "abcdef").await;
    e.process("close", &id, json!({})).await;
    let w = e.process("wait", &id, json!({})).await;
    assert_eq!(w["exit_code"], 0, "{w}");
    let log = e.process("log", &id, json!({"offset": 0})).await;
    assert_eq!(log["output"], "abcdef\ndone\n");
    // stdin of an exited process is refused, as an error the model reads.
    let err = e
        .call(
            "process",
            json!({"action": "write", "session_id": id, "data": "x"}),
        )
        .await
        .unwrap_err();
    assert!(!err.0.is_empty());
}

#[tokio::test]
async fn an_interactive_program_in_a_pty() {
    let e = env().await;
    let id = e
        .start(json!({
            "command": "if [ -t 0 ]; then echo tty; fi; while read -r l; do echo \"got:$l\"; done",
            "background": true,
            "pty": true,
        }))
        .await;
    e.poll_until(&id, "tty").await;
    e.process("submit", &id, json!({"data": "one"})).await;
    e.poll_until(&id, "got:one").await;
    e.process("close", &id, json!({})).await;
    let w = e.process("wait", &id, json!({})).await;
    assert_eq!(w["state"], "exited", "{w}");
    assert_eq!(w["exit_code"], 0);
    assert_eq!(w["pty"], true);
}

#[tokio::test]
async fn kill_ends_the_group() {
    let e = env().await;
    let id = e
        .start(json!({"command": "sleep 1000 & echo started; wait", "background": true}))
        .await;
    e.poll_until(&id, "started").await;
    let k = e.process("kill", &id, json!({})).await;
    assert_eq!(k["signalled"], true, "{k}");
    assert_eq!(k["state"], "exited");
    assert_eq!(k["signal"], 15);
    // Killing again tells it was not running any more.
    let again = e.process("kill", &id, json!({})).await;
    assert_eq!(again["signalled"], false);
}

#[tokio::test]
async fn wait_is_interrupted_by_the_turn_and_clamped() {
    let e = env_with(|c| c.max_wait = Duration::from_millis(200)).await;
    let id = e
        .start(json!({"command": "sleep 1000", "background": true}))
        .await;
    let ctx = e.ctx();
    ctx.cancel.cancel();
    let err = e
        .call_with(
            "process",
            json!({"action": "wait", "session_id": id, "timeout": 600}),
            ctx,
        )
        .await
        .unwrap_err();
    assert!(err.0.starts_with("interrupted"), "{err}");

    let w = e.process("wait", &id, json!({"timeout": 3600})).await;
    assert_eq!(w["timed_out"], true, "{w}");
    assert_eq!(w["state"], "running");
    assert!(w["note"].as_str().unwrap().contains("clamped"), "{w}");
    kill_all(&e.mgr).await;
}

#[tokio::test]
async fn a_session_sees_only_its_own_processes() {
    let e = env().await;
    let id = e
        .start(json!({"command": "sleep 1000", "background": true}))
        .await;
    let other = ctx_for(&e.work, "sess-b", deny());
    let list = e
        .call_with("process", json!({"action": "list"}), other.clone())
        .await
        .unwrap();
    assert_eq!(list["processes"], json!([]));
    let err = e
        .call_with(
            "process",
            json!({"action": "kill", "session_id": id}),
            other,
        )
        .await
        .unwrap_err();
    assert!(err.0.contains("no process"), "{err}");
    assert!(e.mgr.get(&id).await.unwrap().status.is_running());
    // The manager records the session that started it.
    assert_eq!(
        e.mgr.get(&id).await.unwrap().session_id.as_deref(),
        Some("sess-a")
    );
    kill_all(&e.mgr).await;
}

#[tokio::test]
async fn options_are_checked_before_anything_runs() {
    let e = env().await;
    let marker = e.work.join("ran");
    let cmd = format!("touch {}", marker.display());

    let err = e
        .call(
            "terminal",
            json!({"command": cmd, "background": true, "watch_patterns": ["("]}),
        )
        .await
        .unwrap_err();
    assert!(err.0.contains("not valid"), "{err}");
    let err = e
        .call("terminal", json!({"command": cmd, "pty": true}))
        .await
        .unwrap_err();
    assert!(err.0.contains("background: true"), "{err}");
    let err = e
        .call("process", json!({"action": "poll"}))
        .await
        .unwrap_err();
    assert!(err.0.contains("needs `session_id`"), "{err}");
    let err = e
        .call(
            "process",
            json!({"action": "dance", "session_id": "proc_1"}),
        )
        .await
        .unwrap_err();
    assert!(err.0.contains("invalid arguments"), "{err}");
    assert!(e.mgr.list().await.unwrap().is_empty());
    assert!(!marker.exists());

    // Watch patterns and notify_on_complete are kept with the process.
    let id = e
        .start(json!({
            "command": "echo ready",
            "background": true,
            "notify_on_complete": true,
            "watch_patterns": ["^ready$", "error: .*"],
        }))
        .await;
    let info = e.mgr.get(&id).await.unwrap();
    assert!(info.notify_on_complete);
    assert_eq!(info.watch_patterns, ["^ready$", "error: .*"]);

    // Foreground calls still work, and say so when a background-only option is missing.
    let v = e
        .call("terminal", json!({"command": "echo fg"}))
        .await
        .unwrap();
    assert_eq!(v["output"], "fg\n");
}

#[tokio::test]
async fn dangerous_background_commands_need_approval_and_the_cap_holds() {
    let e = env_with(|c| c.max_running = 1).await;
    std::fs::create_dir(e.work.join("build")).unwrap();
    let err = e
        .call(
            "terminal",
            json!({"command": "rm -rf build", "background": true}),
        )
        .await
        .unwrap_err();
    assert!(err.0.starts_with("denied"), "{err}");
    assert!(e.work.join("build").exists());
    assert!(e.mgr.list().await.unwrap().is_empty());

    let allowed = ctx_for(&e.work, "sess-a", Arc::new(AllowAll));
    let v = e
        .call_with(
            "terminal",
            json!({"command": "rm -rf build && echo removed; sleep 1000", "background": true}),
            allowed,
        )
        .await
        .unwrap();
    let id = v["session_id"].as_str().unwrap().to_owned();
    let err = e
        .call(
            "terminal",
            json!({"command": "sleep 1", "background": true}),
        )
        .await
        .unwrap_err();
    assert!(err.0.contains("too many running processes"), "{err}");
    e.poll_until(&id, "removed").await;
    assert!(!e.work.join("build").exists());
    e.process("kill", &id, json!({})).await;
}

/// Background processes are confined like foreground commands, in pipe and PTY mode: the
/// workspace and their own `TMPDIR` are writable, a directory outside is not, the protected
/// processes' directory (as `$TERN_HOME/procs` is) is unreadable, and the environment has no
/// secrets. The private `TMPDIR` is removed when the process is done.
#[tokio::test]
async fn background_processes_run_in_the_sandbox() {
    if !matches!(
        tern_sandbox::Support::probe(),
        tern_sandbox::Support::Landlock { .. }
    ) {
        return;
    }
    let e = env().await;
    let root = e.work.parent().unwrap().to_path_buf();
    let outside = root.join("outside");
    std::fs::create_dir(&outside).unwrap();
    let mut policy = tern_sandbox::Policy::new(tern_sandbox::Mode::WorkspaceWrite);
    policy.protected_paths = vec![root.join("procs")];
    let mut ctx = e.ctx();
    ctx.limits.sandbox = Arc::new(tern_sandbox::Sandbox::new(policy));
    for pty in [false, true] {
        let script = format!(
            "echo in >> in-{pty}.txt; echo out >> {out}/out-{pty}.txt; ls {procs} && echo LISTED; \
             echo t >> \"$TMPDIR/t\" && echo tmp=$TMPDIR; echo done",
            out = outside.display(),
            procs = root.join("procs").display(),
        );
        let v = e
            .call_with(
                "terminal",
                json!({"command": script, "background": true, "pty": pty}),
                ctx.clone(),
            )
            .await
            .unwrap();
        let id = v["session_id"].as_str().unwrap().to_owned();
        let w = e.process("wait", &id, json!({"timeout": 30})).await;
        assert_eq!(w["state"], "exited", "{w}");
        let log = e.process("log", &id, json!({})).await;
        let out = log["output"].as_str().unwrap().to_owned();
        assert!(out.contains("done"), "{out}");
        assert!(e.work.join(format!("in-{pty}.txt")).exists(), "{out}");
        assert!(!outside.join(format!("out-{pty}.txt")).exists(), "{out}");
        assert!(
            !out.contains("LISTED"),
            "the processes' directory was listed: {out}"
        );
        let tmp = out
            .lines()
            .find_map(|l| l.trim().strip_prefix("tmp="))
            .unwrap_or_else(|| panic!("no TMPDIR: {out}"))
            .to_owned();
        eventually(&format!("{tmp} to go with its process"), async || {
            (!Path::new(&tmp).exists()).then_some(())
        })
        .await;
    }
    kill_all(&e.mgr).await;
}

/// The generated schemas of `terminal` and `process` are function-calling object schemas
/// that say what the hand-written ones did, and an example valid for each deserialises into
/// its `Args`.
#[tokio::test]
async fn generated_schemas_agree_with_the_args() {
    use tern_procs::tools::{Action, BackgroundTerminalArgs, ProcessArgs};
    use tern_tools::tool::{parse_args, schema_problems};

    let e = env().await;
    let sets = ["terminal".to_owned()];
    let spec = |name: &str| {
        let s = e.registry.specs(&sets).find(|s| s.name == name).unwrap();
        assert_eq!(
            schema_problems(&s.parameters),
            Vec::<String>::new(),
            "{name}"
        );
        s.parameters.clone()
    };
    let valid = |schema: &Value, example: &Value| {
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(
            keys(&schema["properties"]),
            keys(example),
            "every property is set"
        );
        assert!(jsonschema::is_valid(schema, example), "{example}");
    };

    let term = spec("terminal");
    assert_eq!(term["required"], json!(["command"]));
    let watch = &term["properties"]["watch_patterns"];
    assert_eq!(watch["maxItems"], tern_procs::manager::MAX_WATCH_PATTERNS);
    assert_eq!(watch["items"], json!({"type": "string", "minLength": 1}));
    let example = json!({
        "background": true, "command": "make", "justification": "j",
        "notify_on_complete": true, "pty": true, "sandbox_permissions": "require_escalated",
        "timeout": 5, "watch_patterns": ["^ok$"], "workdir": "sub",
    });
    valid(&term, &example);
    let a: BackgroundTerminalArgs = parse_args("terminal", example).unwrap();
    assert!(a.background && a.pty && a.notify_on_complete);
    assert_eq!((a.command.as_str(), a.timeout), ("make", Some(5)));
    assert_eq!(a.watch_patterns, ["^ok$"]);

    let process = spec("process");
    assert_eq!(process["required"], json!(["action"]));
    assert_eq!(
        process["properties"]["action"]["enum"],
        json!([
            "list", "poll", "log", "wait", "kill", "write", "submit", "close"
        ])
    );
    let example = json!({
        "action": "log", "data": "x", "limit": 10, "offset": 0, "session_id": "proc_1",
        "timeout": 3,
    });
    valid(&process, &example);
    let a: ProcessArgs = parse_args("process", example).unwrap();
    assert_eq!(a.action, Action::Log);
    assert_eq!((a.offset, a.limit, a.timeout), (Some(0), Some(10), Some(3)));
}

/// Wrong types and missing fields are refused with the tool and the field named, before
/// anything starts.
#[tokio::test]
async fn bad_arguments_name_the_tool_and_the_field() {
    let e = env().await;
    let err = |tool: &'static str, args: Value| {
        let e = &e;
        async move { e.call(tool, args).await.unwrap_err().0 }
    };
    let m = err("terminal", json!({"command": "true", "background": "yes"})).await;
    assert!(
        m.starts_with(
            "invalid arguments for `terminal`: /background: \"yes\" is not of type \"boolean\""
        ),
        "{m}"
    );
    let m = err("terminal", json!({"background": true})).await;
    assert!(m.contains("\"command\" is a required property"), "{m}");
    let m = err(
        "terminal",
        json!({"command": "true", "watch_patterns": "x"}),
    )
    .await;
    assert!(m.contains("/watch_patterns"), "{m}");
    let m = err("process", json!({"session_id": "proc_1"})).await;
    assert!(
        m.starts_with("invalid arguments for `process`: ")
            && m.contains("\"action\" is a required property"),
        "{m}"
    );
    let m = err(
        "process",
        json!({"action": "log", "session_id": "p", "offset": -1}),
    )
    .await;
    assert!(m.contains("/offset"), "{m}");
    assert!(e.mgr.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_compaction_is_told_of_the_sessions_running_processes() {
    let e = env().await;
    let terminal = ["terminal".to_owned()];
    let context = || e.registry.contexts(&terminal).next().unwrap().clone();
    assert!(context().critical("sess-a").await.is_empty());

    let id = e
        .start(json!({"command": "sleep 600", "background": true}))
        .await;
    let facts = context().critical("sess-a").await;
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert!(facts[0].contains(&id), "{facts:?}");
    assert!(facts[0].contains("`sleep 600`"), "{facts:?}");
    // Another session's compaction is not told of it; a toolset without it has no context.
    assert!(context().critical("sess-b").await.is_empty());
    assert!(e.registry.contexts(&["file".to_owned()]).next().is_none());

    e.process("kill", &id, json!({})).await;
    e.process("wait", &id, json!({"timeout": 60})).await;
    assert!(context().critical("sess-a").await.is_empty());
    kill_all(&e.mgr).await;
}
