//! `tern-bench mcp`: what calling a tool through MCP adds, and how fast a cancel reaches the
//! server.
//!
//! Flow: the real `@modelcontextprotocol/server-everything` (npm, `tests/mcp`) and a minimal
//! server on the official TypeScript SDK (`tests/mcp/bench-server.mjs`) are started over stdio
//! as `[mcp_servers]` would start them, and their tools registered as the agent's
//! (`mcp__everything__echo`, `mcp__bench__echo`, `mcp__bench__wait`) beside a native Rust
//! `echo` tool that answers the same text.
//!
//! - **Overhead**: `Registry::call` of each echo with the same arguments, round-robin, each
//!   call timed from the call to its result: the native tool is the baseline, and what MCP adds
//!   is the difference of the medians (and of the p99s). A second baseline: the same server's
//!   echo called without tern's client (JSON-RPC lines written and read by hand), which is
//!   what the server and the pipe cost on their own.
//! - **Cancel**: a call to `wait` (answers only when cancelled) is started, then its turn's
//!   token cancelled; the server writes the moment the SDK aborted that request's signal (it
//!   does so on `notifications/cancelled`) as microseconds of the wall clock, and the figure is
//!   that moment minus the wall clock at the cancel.
//!
//! Usage: `tern-bench mcp [--calls N] [--cancels N]`; needs `node` and `npm ci` in `tests/mcp`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tern_config::McpServerConfig;
use tern_mcp::McpClient;
use tern_tools::{DenyAll, Registry, Tool, ToolContext, ToolLimits, ToolResult};
use tokio_util::sync::CancellationToken;

use crate::pct;

struct Opts {
    calls: usize,
    cancels: usize,
}

fn parse() -> anyhow::Result<Opts> {
    let mut o = Opts {
        calls: 2000,
        cancels: 100,
    };
    let mut it = std::env::args().skip(2);
    while let Some(a) = it.next() {
        let mut num = |what: &str| -> anyhow::Result<usize> {
            Ok(it
                .next()
                .with_context(|| format!("{what} needs a number"))?
                .parse()?)
        };
        match a.as_str() {
            "--calls" => o.calls = num("--calls")?,
            "--cancels" => o.cancels = num("--cancels")?,
            other => bail!("unknown argument {other}"),
        }
    }
    if o.calls == 0 || o.cancels == 0 {
        bail!("--calls and --cancels must be at least 1");
    }
    Ok(o)
}

/// The native baseline: the same answer as the servers' `echo`, without MCP.
struct NativeEcho;

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct EchoArgs {
    /// The text to echo.
    message: String,
}

impl Tool for NativeEcho {
    const NAME: &'static str = "echo";
    const TOOLSET: &'static str = "bench";
    const DESCRIPTION: &'static str = "Echoes back the input";
    type Args = EchoArgs;

    async fn run(&self, args: EchoArgs, _ctx: ToolContext) -> ToolResult {
        Ok(Value::String(format!("Echo: {}", args.message)))
    }
}

fn tests_mcp() -> anyhow::Result<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp");
    let root = root
        .canonicalize()
        .with_context(|| format!("{} is missing", root.display()))?;
    if !root.join("node_modules/@modelcontextprotocol/sdk").is_dir() {
        bail!(
            "the MCP servers are not installed: run `npm ci --no-audit --no-fund` in {}",
            root.display()
        );
    }
    Ok(root)
}

fn stdio_config(args: &[String], env: &[(&str, String)]) -> anyhow::Result<McpServerConfig> {
    let mut text = format!(
        "command = \"node\"\nargs = {}\n",
        serde_json::to_string(args)?
    );
    if !env.is_empty() {
        text.push_str("[env]\n");
        for (k, v) in env {
            text.push_str(&format!("{k} = {}\n", serde_json::to_string(v)?));
        }
    }
    Ok(toml::from_str(&text)?)
}

fn ctx(cancel: CancellationToken) -> ToolContext {
    ToolContext {
        session_id: "bench".into(),
        call_id: "call".into(),
        call_seq: 0,
        workdir: std::env::temp_dir(),
        cancel,
        approver: Arc::new(DenyAll {
            reason: "bench".into(),
        }),
        limits: ToolLimits::default(),
        preapproved: false,
        subagents: None,
        toolsets: Default::default(),
        report: Default::default(),
    }
}

fn micros_now() -> anyhow::Result<i64> {
    Ok(i64::try_from(
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros(),
    )?)
}

/// The same server's echo without tern's client: JSON-RPC lines written to its stdin and read
/// from its stdout by hand, one call at a time, timed as the registry calls are. What the
/// server and the pipe cost on their own, so the figures above can be read as tern's share.
async fn raw_roundtrips(entry: &Path, calls: usize) -> anyhow::Result<Vec<f64>> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut child = tokio::process::Command::new("node")
        .arg(entry)
        .arg("stdio")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().context("no stdin")?;
    let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();
    let mut call = async |id: usize, msg: Value| -> anyhow::Result<()> {
        stdin.write_all(format!("{msg}\n").as_bytes()).await?;
        if msg.get("id").is_none() {
            return Ok(());
        }
        loop {
            let line = lines
                .next_line()
                .await?
                .context("the server closed its output")?;
            let v: Value = serde_json::from_str(&line).unwrap_or_default();
            if v["id"] == id {
                return Ok(());
            }
        }
    };
    call(
        0,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "tern-bench", "version": "1"}}}),
    )
    .await?;
    call(
        0,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await?;
    let mut times = Vec::with_capacity(calls);
    for id in 1..=calls + 50 {
        let t = Instant::now();
        call(
            id,
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"message": "hello from tern-bench"}}}),
        )
        .await?;
        if id > 50 {
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

pub async fn bench_mcp() -> anyhow::Result<()> {
    let o = parse()?;
    let root = tests_mcp()?;
    let dir = tempfile::tempdir()?;
    let cancel_log = dir.path().join("cancelled.log");

    let everything = stdio_config(
        &[
            root.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
                .display()
                .to_string(),
            "stdio".to_owned(),
        ],
        &[],
    )?;
    let bench = stdio_config(
        &[root.join("bench-server.mjs").display().to_string()],
        &[("TERN_BENCH_CANCEL_LOG", cancel_log.display().to_string())],
    )?;
    let mut registry = Registry::new();
    registry.add(NativeEcho);
    let everything = Arc::new(McpClient::start("everything", &everything).await?);
    let bench = Arc::new(McpClient::start("bench", &bench).await?);
    tern_mcp::register(&mut registry, Arc::clone(&everything)).await?;
    tern_mcp::register(&mut registry, Arc::clone(&bench)).await?;
    let toolsets: Vec<String> = ["bench", "mcp:everything", "mcp:bench"]
        .map(str::to_owned)
        .to_vec();

    // Overhead: round-robin, after a warm-up of each.
    let tools = ["echo", "mcp__everything__echo", "mcp__bench__echo"];
    let args = json!({"message": "hello from tern-bench"}).to_string();
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(o.calls); tools.len()];
    for round in 0..o.calls + 50 {
        for (i, tool) in tools.iter().enumerate() {
            let t = Instant::now();
            let out = registry
                .call(tool, &args, &toolsets, ctx(CancellationToken::new()))
                .await
                .map_err(|e| anyhow::anyhow!("{tool}: {e}"))?;
            let us = t.elapsed().as_secs_f64() * 1e6;
            let text = out.as_str().unwrap_or_default();
            if !text.contains("hello from tern-bench") {
                bail!("{tool} answered {out}");
            }
            if round >= 50 {
                times[i].push(us);
            }
        }
    }
    for t in &mut times {
        t.sort_by(f64::total_cmp);
    }
    println!("## MCP tool call overhead ({} calls each, µs)", o.calls);
    println!("| tool | median | p90 | p99 | added median | added p99 |");
    println!("|---|---|---|---|---|---|");
    let (base50, base99) = (pct(&times[0], 0.5), pct(&times[0], 0.99));
    for (tool, t) in tools.iter().zip(&times) {
        let (m, p) = (pct(t, 0.5), pct(t, 0.99));
        println!(
            "| `{tool}` | {m:.0} | {:.0} | {p:.0} | {:.0} | {:.0} |",
            pct(t, 0.9),
            m - base50,
            p - base99
        );
    }

    let raw = raw_roundtrips(
        &root.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        o.calls,
    )
    .await?;
    let (m, p) = (pct(&raw, 0.5), pct(&raw, 0.99));
    println!(
        "| server-everything's echo without tern (JSON-RPC lines by hand) | {m:.0} | {:.0} | {p:.0} | {:.0} | {:.0} |",
        pct(&raw, 0.9),
        m - base50,
        p - base99
    );

    // Cancel → the server's abort of the request.
    let mut delays = Vec::with_capacity(o.cancels);
    for i in 0..o.cancels {
        let id = format!("c{i}");
        let token = CancellationToken::new();
        let wait_args = json!({ "id": id }).to_string();
        let call = registry.call(
            "mcp__bench__wait",
            &wait_args,
            &toolsets,
            ctx(token.clone()),
        );
        let cancel = async {
            // Long enough for the request to reach the server and its handler to start.
            tokio::time::sleep(Duration::from_millis(30)).await;
            let at = micros_now();
            token.cancel();
            at
        };
        let (result, at) = tokio::join!(call, cancel);
        let at = at?;
        if result.is_ok() {
            bail!("the cancelled call answered {result:?}");
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let seen = loop {
            let text = std::fs::read_to_string(&cancel_log).unwrap_or_default();
            if let Some(us) = text.lines().find_map(|l| {
                l.strip_prefix(&format!("{id} "))
                    .and_then(|v| v.trim().parse::<i64>().ok())
            }) {
                break us;
            }
            if Instant::now() > deadline {
                bail!("the server never saw the cancel of {id}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        #[expect(
            clippy::cast_precision_loss,
            reason = "a delay in microseconds, far below 2^52"
        )]
        delays.push((seen - at) as f64 / 1000.0);
    }
    delays.sort_by(f64::total_cmp);
    println!();
    println!(
        "## Cancel → the server receives notifications/cancelled ({} calls, ms)",
        o.cancels
    );
    println!("| median | p99 | max |");
    println!("|---|---|---|");
    println!(
        "| {:.2} | {:.2} | {:.2} |",
        pct(&delays, 0.5),
        pct(&delays, 0.99),
        delays[delays.len() - 1]
    );

    drop(registry);
    for client in [everything, bench] {
        if let Ok(c) = Arc::try_unwrap(client) {
            c.close().await;
        }
    }
    Ok(())
}
