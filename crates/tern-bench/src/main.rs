//! `tern-bench`: the figures in `docs/benchmarks.md`.
//!
//! Flow: start the fake model with an instant responder (a tool call for a user message, a
//! text answer after the tool result) → run the release `tern chat -q` as a real process N
//! times in a fresh `$TERN_HOME`, timing each from spawn to exit, reading its peak RSS from
//! `wait4`, and taking the fake model's arrival time of the first request → fill a store with
//! a 10,000-message session and time loading its transcript.
//!
//! Usage: `cargo build --release -p tern-cli -p tern-bench && target/release/tern-bench
//! [gateway|inbox|waits|compact] [--runs N] [--tern PATH]` (`inbox`, `waits`, `compact`: see
//! their modules;
//! `procs [--size 1G] [--concurrency 64] [--runs 3]`, `sandbox`, `search [--rg PATH]`,
//! `channels [--rounds N] [--idle SECS]`, `mcp [--calls N] [--cancels N]`: see their modules)

mod channels;
mod compact;
mod cron;
mod inbox;
mod mcp;
mod procs;
mod sandbox;
mod search;
mod waits;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;
use tern_fake_model::{FakeModel, Reply};
use tern_llm::{Role, ToolCall};
use tern_store::{NewMessage, NewSession, Store};

struct Args {
    runs: usize,
    tern: PathBuf,
}

fn parse_args() -> anyhow::Result<Args> {
    parse_args_from(1)
}

fn parse_args_from(skip: usize) -> anyhow::Result<Args> {
    let mut runs = 30;
    let mut tern = std::env::current_exe()?
        .parent()
        .context("the bench binary has no directory")?
        .join("tern");
    let mut it = std::env::args().skip(skip);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--runs" => runs = it.next().context("--runs needs a number")?.parse()?,
            "--tern" => tern = it.next().context("--tern needs a path")?.into(),
            "-h" | "--help" => {
                println!(
                    "tern-bench [gateway|inbox|waits|procs|sandbox|search|load|compact|channels|serve] [--runs N] [--tern PATH]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}"),
        }
    }
    if !tern.exists() {
        bail!(
            "{} not found: build it with `cargo build --release -p tern-cli`",
            tern.display()
        );
    }
    Ok(Args { runs, tern })
}

/// Runs a command to completion; returns wall time and peak RSS in KiB.
fn run_measured(cmd: &mut Command) -> anyhow::Result<(Duration, i64, Instant)> {
    let start = Instant::now();
    let child = cmd.spawn()?;
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our own child, not yet reaped (std's Child never waited on it); the
    // pointers are to live locals.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = start.elapsed();
    if r != pid {
        bail!("wait4 failed: {}", std::io::Error::last_os_error());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("tern exited with status {status}");
    }
    std::mem::forget(child);
    Ok((wall, usage.ru_maxrss, start))
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn summary(name: &str, unit: &str, mut v: Vec<f64>) {
    v.sort_by(f64::total_cmp);
    println!(
        "| {name} | {:.1} {unit} | {:.1} {unit} | {:.1} {unit} | {:.1} {unit} |",
        pct(&v, 0.5),
        pct(&v, 0.95),
        v[0],
        v[v.len() - 1]
    );
}

fn instant_responder(body: &Value) -> Reply {
    let last = body["messages"].as_array().and_then(|m| m.last());
    if last.is_some_and(|m| m["role"] == "user") {
        Reply::tool_call("call_1", "terminal", r#"{"command":"echo bench"}"#)
    } else {
        Reply::text("done")
    }
}

async fn bench_one_shot(args: &Args) -> anyhow::Result<()> {
    let fake = FakeModel::start().await?;
    fake.set_responder(instant_responder);
    let dir = tempfile::tempdir()?;
    let home = dir.path().join("home");
    let tern = args.tern.clone();
    let base = fake.base_url();
    let make = move |home: &Path| {
        let mut c = Command::new(&tern);
        c.args(["chat", "-q", "run the bench tool"])
            .env("TERN_HOME", home)
            .env("OPENAI_BASE_URL", &base)
            .env("TERN_MODEL", "fake-model")
            .env_remove("OPENAI_API_KEY")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        c
    };
    // The first run creates the store and runs its migrations.
    let h = home.clone();
    let m = make.clone();
    let (cold, cold_rss, _) =
        tokio::task::spawn_blocking(move || run_measured(&mut m(&h))).await??;
    let (mut walls, mut rss, mut first_req) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.runs {
        let before = fake.requests().len();
        let h = home.clone();
        let m = make.clone();
        let (wall, maxrss, start) =
            tokio::task::spawn_blocking(move || run_measured(&mut m(&h))).await??;
        let reqs = fake.requests();
        if reqs.len() != before + 2 {
            bail!(
                "expected 2 model requests per run, got {}",
                reqs.len() - before
            );
        }
        walls.push(wall.as_secs_f64() * 1000.0);
        rss.push(maxrss as f64 / 1024.0);
        first_req.push(reqs[before].at.duration_since(start).as_secs_f64() * 1000.0);
    }
    println!(
        "## `tern chat -q` through one tool call ({} warm runs, instant fake model)\n",
        args.runs
    );
    println!("| figure | median | p95 | min | max |\n|---|---|---|---|---|");
    summary("wall time, start to exit", "ms", walls);
    summary("peak RSS", "MiB", rss);
    summary("process start to first model request", "ms", first_req);
    println!(
        "\nFirst run on an empty home (creates the store): {:.1} ms, {:.1} MiB peak RSS.\n",
        cold.as_secs_f64() * 1000.0,
        cold_rss as f64 / 1024.0
    );
    Ok(())
}

/// One round of a working session as `load` and `compact` write it: the user's request, an
/// answer calling `read_file`, its result, the answer in text.
pub(crate) fn tool_round(i: usize) -> [NewMessage; 4] {
    [
        NewMessage::new(
            Role::User,
            format!("please look at file number {i} and summarise it"),
        ),
        NewMessage {
            role: Some(Role::Assistant),
            tool_calls: vec![ToolCall::new(
                format!("call_{i}"),
                "read_file",
                format!(r#"{{"path":"src/file_{i}.rs"}}"#),
            )],
            reasoning: Some("I should read the file first.".into()),
            prompt_tokens: Some(1200),
            completion_tokens: Some(40),
            ..Default::default()
        },
        NewMessage::tool_result(
            &format!("call_{i}"),
            "read_file",
            format!(
                r#"{{"path":"src/file_{i}.rs","content":"{}","total_lines":40}}"#,
                "fn main() {} ".repeat(30)
            ),
        ),
        NewMessage::new(
            Role::Assistant,
            format!("File {i} defines an empty main function, repeated."),
        ),
    ]
}

async fn bench_load() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(&dir.path().join("tern.db")).await?;
    let s = store
        .create_session(NewSession {
            source: "bench".into(),
            ..Default::default()
        })
        .await?;
    // A realistic mix: user, assistant with a tool call, tool result, assistant text.
    let mut batch = Vec::new();
    for i in 0..2_500 {
        batch.extend(tool_round(i));
        if batch.len() >= 1000 {
            store.append_messages(&s.id, &batch).await?;
            batch.clear();
        }
    }
    store.append_messages(&s.id, &batch).await?;
    let n = store.message_count(&s.id).await?;
    let mut times = Vec::new();
    let reps: usize = std::env::var("TERN_BENCH_LOAD_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    for _ in 0..reps {
        let t = Instant::now();
        let msgs = store.messages(&s.id).await?;
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(msgs.len() as i64, n);
    }
    println!("## Loading a {n}-message session (`Store::messages`, {reps} runs)\n");
    println!("| figure | median | p95 | min | max |\n|---|---|---|---|---|");
    summary("load transcript", "ms", times);
    Ok(())
}

/// `tern-bench serve`: the instant fake model until Ctrl-C, for profiling by hand and for
/// the script suites. A user message whose text starts with `sh:` makes it call `terminal`
/// with the rest as command; `ask:` makes it call `request_approval` with the rest as
/// summary (and answer the tool's "pending" with a short text); any other user message
/// (a resumed decision, too) gets a `terminal` call, then "done".
async fn serve() -> anyhow::Result<()> {
    let fake = FakeModel::start().await?;
    fake.set_responder(|body| {
        let last = body["messages"].as_array().and_then(|m| m.last());
        match last {
            Some(m) if m["role"] == "user" => {
                let text = m["content"].as_str().unwrap_or_default();
                if let Some(summary) = text.strip_prefix("ask:") {
                    // A fresh call id per message, as a model gives: the request's
                    // idempotency key is derived from it.
                    let n = body["messages"].as_array().map_or(0, Vec::len);
                    return Reply::tool_call(
                        &format!("call_ask_{n}"),
                        "request_approval",
                        serde_json::json!({ "summary": summary.trim() }).to_string(),
                    );
                }
                let cmd = text.strip_prefix("sh:").unwrap_or("echo bench");
                Reply::tool_call(
                    "call_1",
                    "terminal",
                    serde_json::json!({ "command": cmd }).to_string(),
                )
            }
            Some(m)
                if m["role"] == "tool"
                    && m["content"].as_str().is_some_and(|c| c.contains("pending")) =>
            {
                Reply::text("asked; I will wait for the decision")
            }
            _ => Reply::text("done"),
        }
    });
    println!("OPENAI_BASE_URL={} TERN_MODEL=fake-model", fake.base_url());
    tokio::signal::ctrl_c().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match std::env::args().nth(1).as_deref() {
        Some("serve") => return serve().await,
        Some("load") => return bench_load().await,
        Some("compact") => return compact::bench_compact().await,
        Some("channels") => return channels::bench_channels().await,
        Some("cron") => return cron::bench_cron().await,
        Some("mcp") => return mcp::bench_mcp().await,
        Some("search") => return search::bench_search().await,
        Some("gateway") => {
            let args = parse_args_from(2)?;
            return bench_gateway(&args).await;
        }
        Some("inbox") => {
            let args = parse_args_from(2)?;
            return inbox::bench_inbox(&args).await;
        }
        Some("waits") => {
            let args = parse_args_from(2)?;
            return waits::bench_waits(&args).await;
        }
        Some("sandbox") => {
            let args = parse_args_from(2)?;
            return sandbox::bench_sandbox(&args).await;
        }
        // Blocking throughout (child processes, waits, file reads): off the runtime.
        Some("procs") => return tokio::task::spawn_blocking(|| procs::bench_procs(2)).await?,
        _ => {}
    }
    let args = parse_args()?;
    println!(
        "tern-bench on {} CPUs, {}\n",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        std::env::consts::ARCH
    );
    bench_one_shot(&args).await?;
    bench_load().await?;
    Ok(())
}

/// VmRSS, VmHWM, RssAnon, RssFile (KiB) and the thread count of a process.
fn mem_kib(pid: u32) -> anyhow::Result<[u64; 5]> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok([
        field("VmRSS:"),
        field("VmHWM:"),
        field("RssAnon:"),
        field("RssFile:"),
        field("Threads:"),
    ])
}

async fn chat(http: &reqwest::Client, url: &str, key: &str, session: &str) -> anyhow::Result<f64> {
    let t = Instant::now();
    let r = http
        .post(format!("{url}/api/sessions/{session}/chat"))
        .bearer_auth(key)
        .json(&serde_json::json!({"message": "run the bench tool"}))
        .send()
        .await?;
    if !r.status().is_success() {
        bail!("chat answered {}: {}", r.status(), r.text().await?);
    }
    let v: Value = r.json().await?;
    if v["message"]["content"] != "done" {
        bail!("unexpected answer {v}");
    }
    Ok(t.elapsed().as_secs_f64() * 1000.0)
}

async fn new_session(http: &reqwest::Client, url: &str, key: &str) -> anyhow::Result<String> {
    let v: Value = http
        .post(format!("{url}/api/sessions"))
        .bearer_auth(key)
        .json(&serde_json::json!({}))
        .send()
        .await?
        .json()
        .await?;
    v["session"]["id"]
        .as_str()
        .map(str::to_owned)
        .context("no session id")
}

/// `tern-bench gateway`: a release `tern gateway` against the instant fake model.
async fn bench_gateway(args: &Args) -> anyhow::Result<()> {
    let fake = FakeModel::start().await?;
    fake.set_responder(instant_responder);
    fake.record_bodies(false);
    let dir = tempfile::tempdir()?;
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home)?;
    std::fs::write(
        home.join("config.toml"),
        "[gateway]\nmax_concurrent_turns = 64\n",
    )?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let key = "bench-key-0123456789abcdef";
    let mut child = Command::new(&args.tern)
        .args(["gateway", "--listen", &format!("127.0.0.1:{port}")])
        .env("TERN_HOME", &home)
        .env("OPENAI_BASE_URL", fake.base_url())
        .env("TERN_MODEL", "fake-model")
        .env("TERN_SERVER_KEY", key)
        .env("TERN_LOG", "warn")
        .envs(
            std::env::var("BENCH_GW_ARENAS")
                .ok()
                .map(|v| ("MALLOC_ARENA_MAX".to_owned(), v)),
        )
        .env_remove("OPENAI_API_KEY")
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let pid = child.id();
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let t0 = Instant::now();
    while http.get(format!("{url}/health")).send().await.is_err() {
        if t0.elapsed() > Duration::from_secs(20) {
            bail!("the gateway did not start");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let startup = t0.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_parts = mem_kib(pid)?;
    let idle = idle_parts[0];

    // Sequential turns on one session (its transcript grows by 4 messages a turn).
    let session = new_session(&http, &url, key).await?;
    chat(&http, &url, key, &session).await?; // warm-up
    let mut seq = Vec::new();
    for _ in 0..200 {
        seq.push(chat(&http, &url, key, &session).await?);
    }

    // 50 sessions in parallel, 4 turns each.
    let mut sessions = Vec::new();
    for _ in 0..50 {
        sessions.push(new_session(&http, &url, key).await?);
    }
    let t = Instant::now();
    let tasks: Vec<_> = sessions
        .iter()
        .map(|s| {
            let (http, url, s) = (http.clone(), url.clone(), s.clone());
            tokio::spawn(async move {
                let mut v = Vec::new();
                for _ in 0..4 {
                    v.push(chat(&http, &url, key, &s).await?);
                }
                anyhow::Ok(v)
            })
        })
        .collect();
    let mut par = Vec::new();
    for t in tasks {
        par.extend(t.await??);
    }
    let par_wall = t.elapsed();

    // 1,000 turns over 200 sessions (5 each, 20 at a time), twice with new sessions: memory
    // that grew with the sessions served would show as a second step.
    let mut rounds = Vec::new();
    for _ in 0..2 {
        let mut many = Vec::new();
        for _ in 0..200 {
            many.push(new_session(&http, &url, key).await?);
        }
        for chunk in many.chunks(20) {
            let tasks: Vec<_> = chunk
                .iter()
                .map(|s| {
                    let (http, url, s) = (http.clone(), url.clone(), s.clone());
                    tokio::spawn(async move {
                        for _ in 0..5 {
                            chat(&http, &url, key, &s).await?;
                        }
                        anyhow::Ok(())
                    })
                })
                .collect();
            for t in tasks {
                t.await??;
            }
        }
        // Measured idle, as an always-on gateway spends most of its time.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        rounds.push(mem_kib(pid)?[0]);
    }
    let after_parts = mem_kib(pid)?;
    let (after, peak) = (after_parts[0], after_parts[1]);
    let _ = Command::new("kill").arg(pid.to_string()).status();
    let _ = child.wait();

    println!("## `tern gateway` against an instant fake model (one tool call per turn)\n");
    println!(
        "Start to first `/health` answer: {:.0} ms.\n",
        startup.as_secs_f64() * 1000.0
    );
    println!("| figure | median | p99 | min | max |\n|---|---|---|---|---|");
    let p99 = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (pct(&v, 0.5), pct(&v, 0.99), v[0], v[v.len() - 1])
    };
    let (a, b, c, d) = p99(seq);
    println!(
        "| `POST /api/sessions/{{id}}/chat`, 200 sequential turns, one session | {a:.1} ms | {b:.1} ms | {c:.1} ms | {d:.1} ms |"
    );
    let (a, b, c, d) = p99(par);
    println!(
        "| the same, 50 sessions in parallel (200 turns) | {a:.1} ms | {b:.1} ms | {c:.1} ms | {d:.1} ms |"
    );
    println!(
        "\n50 parallel sessions: 200 turns in {:.0} ms ({:.0} turns/s).\n",
        par_wall.as_secs_f64() * 1000.0,
        200.0 / par_wall.as_secs_f64()
    );
    println!("| memory | RSS |\n|---|---|");
    println!("| idle, after start | {:.1} MiB |", idle as f64 / 1024.0);
    println!(
        "| after 1,000 turns over 200 sessions (+ the runs above) | {:.1} MiB ({:.2}× idle) |",
        rounds[0] as f64 / 1024.0,
        rounds[0] as f64 / idle as f64
    );
    println!(
        "| after 1,000 more turns over 200 new sessions | {:.1} MiB ({:.2}× idle) |",
        after as f64 / 1024.0,
        after as f64 / idle as f64
    );
    println!("| peak (VmHWM) | {:.1} MiB |", peak as f64 / 1024.0);
    println!(
        "\nOf which anonymous / file-backed (binary, and store pages read through mmap): idle {:.1} / {:.1} MiB, after {:.1} / {:.1} MiB.",
        idle_parts[2] as f64 / 1024.0,
        idle_parts[3] as f64 / 1024.0,
        after_parts[2] as f64 / 1024.0,
        after_parts[3] as f64 / 1024.0
    );
    println!("Threads: {} idle, {} after.", idle_parts[4], after_parts[4]);
    Ok(())
}
