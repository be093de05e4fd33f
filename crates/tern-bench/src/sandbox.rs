//! `tern-bench sandbox`: what the sandbox costs per command (issue 12; target under 2 ms).
//!
//! Flow: (1) in-process, the `terminal` tool runs `true` through `Registry::call`, the same
//! path as the agent's calls, alternating `full-access` and `workspace-write` (with a
//! protected home beside the workspace, as `$TERN_HOME` is) run by run; (2) the release
//! `tern chat -q` with one tool call (`true`) against an instant fake model, in two homes
//! whose `config.toml` differ only in `[sandbox] mode`, alternating too. Each prints the
//! medians and the median of the run-by-run differences.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use anyhow::bail;
use serde_json::Value;
use tern_fake_model::{FakeModel, Reply};
use tern_sandbox::{Mode, Policy, Sandbox, Support};
use tern_tools::{DenyAll, Registry, ToolContext, ToolLimits};
use tokio_util::sync::CancellationToken;

use crate::{Args, pct, run_measured};

fn ctx(workspace: &Path, sandbox: Sandbox) -> ToolContext {
    let limits = ToolLimits {
        sandbox: Arc::new(sandbox),
        ..ToolLimits::default()
    };
    ToolContext {
        session_id: "bench".into(),
        call_id: "call".into(),
        call_seq: 0,
        workdir: workspace.to_path_buf(),
        cancel: CancellationToken::new(),
        approver: Arc::new(DenyAll {
            reason: "bench".into(),
        }),
        limits,
        preapproved: false,
        subagents: None,
        toolsets: Default::default(),
        report: Default::default(),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    pct(&v, 0.5)
}

fn row(name: &str, full: Vec<f64>, sandboxed: Vec<f64>) {
    let diffs: Vec<f64> = sandboxed.iter().zip(&full).map(|(s, f)| s - f).collect();
    println!(
        "| {name} | {:.2} ms | {:.2} ms | {:+.2} ms |",
        median(full),
        median(sandboxed),
        median(diffs)
    );
}

pub async fn bench_sandbox(args: &Args) -> anyhow::Result<()> {
    match Support::probe() {
        Support::Landlock { abi } => println!("Landlock ABI {abi}\n"),
        Support::Missing { reason } => bail!("no sandbox to measure: {reason}"),
    }
    let dir = tempfile::tempdir()?;
    let root = dir.path().canonicalize()?;
    let workspace = root.join("work");
    let home = root.join("home");
    std::fs::create_dir_all(&workspace)?;
    std::fs::create_dir_all(&home)?;

    // (1) The terminal tool in-process.
    let registry = Registry::builtin();
    let toolsets = vec!["terminal".to_owned()];
    let mut policy = Policy::new(Mode::WorkspaceWrite);
    policy.protected_paths = vec![home.clone()];
    let full = ctx(&workspace, Sandbox::full_access());
    let sandboxed = ctx(&workspace, Sandbox::new(policy));
    let runs = args.runs.max(10) * 10;
    let (mut f, mut s) = (Vec::new(), Vec::new());
    for i in 0..runs {
        for (which, c) in [(0, &full), (1, &sandboxed)] {
            // Every other run the other order, so neither mode always goes first.
            let (which, c) = if i % 2 == 0 {
                (which, c)
            } else if which == 0 {
                (1, &sandboxed)
            } else {
                (0, &full)
            };
            let t0 = Instant::now();
            let v = registry
                .call("terminal", r#"{"command":"true"}"#, &toolsets, c.clone())
                .await?;
            let ms = t0.elapsed().as_secs_f64() * 1000.0;
            if v["exit_code"] != 0 {
                bail!("`true` failed: {v}");
            }
            if which == 0 { f.push(ms) } else { s.push(ms) }
        }
    }
    println!("## The sandbox's cost per command ({runs} runs of each, alternating)\n");
    println!(
        "| command | full-access | workspace-write | difference (median of pairs) |\n|---|---|---|---|"
    );
    row("`terminal` `true`, in-process", f, s);

    // (2) `tern chat -q` with one tool call.
    let fake = FakeModel::start().await?;
    fake.set_responder(|body: &Value| {
        let last = body["messages"].as_array().and_then(|m| m.last());
        if last.is_some_and(|m| m["role"] == "user") {
            Reply::tool_call("call_1", "terminal", r#"{"command":"true"}"#)
        } else {
            Reply::text("done")
        }
    });
    let homes = [root.join("home-full"), root.join("home-sandboxed")];
    for (h, mode) in homes.iter().zip(["full-access", "workspace-write"]) {
        std::fs::create_dir_all(h)?;
        std::fs::write(
            h.join("config.toml"),
            format!("[sandbox]\nmode = \"{mode}\"\n"),
        )?;
    }
    let make = |home: &Path| {
        let mut c = Command::new(&args.tern);
        c.args(["chat", "-q", "run the bench tool"])
            .current_dir(&workspace)
            .env("TERN_HOME", home)
            .env("OPENAI_BASE_URL", fake.base_url())
            .env("TERN_MODEL", "fake-model")
            .env_remove("OPENAI_API_KEY")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        c
    };
    // Cold runs create the stores.
    for h in &homes {
        run_measured(&mut make(h))?;
    }
    let (mut f, mut s) = (Vec::new(), Vec::new());
    for i in 0..args.runs {
        let order: [usize; 2] = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let before = fake.requests().len();
            let (wall, _, _) = run_measured(&mut make(&homes[which]))?;
            if fake.requests().len() != before + 2 {
                bail!("expected 2 model requests per run");
            }
            let ms = wall.as_secs_f64() * 1000.0;
            if which == 0 { f.push(ms) } else { s.push(ms) }
        }
    }
    row(
        &format!("`tern chat -q`, one tool call ({} runs each)", args.runs),
        f,
        s,
    );
    Ok(())
}
