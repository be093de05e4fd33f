//! `tern-bench waits`: how fast a decision resumes its session, and what a remote inbox
//! costs while nothing happens.
//!
//! Flow: the fake model answers `ask: …` with a `request_approval` call and a decision
//! message with a short text. Embedded: one release gateway; 100 sessions ask; each request
//! is decided in turn over the reviewer API, timing from just before the decide call to the
//! fake model's arrival time of the resumed turn's first request (the one whose messages
//! name the request). Remote: gateway A (agents) uses gateway B (`--inbox-only`) as its
//! inbox through a counting TCP proxy; the same timing with decisions made at B; then 10,
//! and later 1,000, sessions of A wait at once and the proxy counts A's requests to B over an
//! idle minute each time.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tern_fake_model::{FakeModel, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{Args, pct};

const KEY_A: &str = "bench-agents-key-0123456789";
const KEY_B: &str = "bench-inbox-key-0123456789";
const TIMED: usize = 100;
const IDLE_WAITS: usize = 1_000;
const IDLE_WINDOW: Duration = Duration::from_secs(60);

/// The model of the decision benchmarks: `ask: …` → `request_approval`, a decision →
/// `resumed` (also the channels benchmark's).
pub(crate) fn responder(body: &Value) -> Reply {
    let msgs = body["messages"].as_array();
    let last = msgs.and_then(|m| m.last());
    match last {
        Some(m) if m["role"] == "user" => {
            let text = m["content"].as_str().unwrap_or_default();
            match text.strip_prefix("ask:") {
                Some(summary) => Reply::tool_call(
                    &format!("call_ask_{}", msgs.map_or(0, Vec::len)),
                    "request_approval",
                    json!({ "summary": summary.trim() }).to_string(),
                ),
                None => Reply::text("resumed"),
            }
        }
        _ => Reply::text("waiting for the decision"),
    }
}

struct Gw {
    child: Child,
    url: String,
    home: PathBuf,
}

impl Drop for Gw {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn start(
    tern: &Path,
    home: PathBuf,
    key: &str,
    model: Option<&str>,
    inbox_only: bool,
) -> anyhow::Result<Gw> {
    std::fs::create_dir_all(&home)?;
    let port = free_port()?;
    let mut c = Command::new(tern);
    c.args(["gateway", "--listen", &format!("127.0.0.1:{port}")])
        .env("TERN_HOME", &home)
        .env("TERN_SERVER_KEY", key)
        .env("TERN_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("TERN_MODEL")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    if inbox_only {
        c.arg("--inbox-only");
    }
    if let Some(base) = model {
        c.env("OPENAI_BASE_URL", base)
            .env("TERN_MODEL", "fake-model");
    }
    let gw = Gw {
        child: c.spawn()?,
        url: format!("http://127.0.0.1:{port}"),
        home,
    };
    let http = reqwest::Client::new();
    let t0 = Instant::now();
    while http.get(format!("{}/health", gw.url)).send().await.is_err() {
        if t0.elapsed() > Duration::from_secs(20) {
            bail!("a gateway did not start");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(gw)
}

fn admin_token(home: &Path) -> anyhow::Result<String> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(home.join("inbox-admin.json"))?)?;
    Ok(v["token"].as_str().context("no token")?.to_owned())
}

async fn json_req(req: reqwest::RequestBuilder) -> anyhow::Result<Value> {
    let r = req.send().await?;
    let status = r.status();
    let v: Value = r.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        bail!("{status}: {v}");
    }
    Ok(v)
}

/// Opens `n` sessions on `gw` that each ask once; returns (session, request id) pairs.
async fn ask(gw: &Gw, key: &str, n: usize) -> anyhow::Result<Vec<(String, String)>> {
    let http = reqwest::Client::new();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let s = json_req(
            http.post(format!("{}/api/sessions", gw.url))
                .bearer_auth(key)
                .json(&json!({})),
        )
        .await?;
        let sid = s["session"]["id"]
            .as_str()
            .context("no session id")?
            .to_owned();
        json_req(
            http.post(format!("{}/api/sessions/{sid}/chat", gw.url))
                .bearer_auth(key)
                .json(&json!({ "message": format!("ask: deploy step {i}") })),
        )
        .await?;
        let s = json_req(
            http.get(format!("{}/api/sessions/{sid}", gw.url))
                .bearer_auth(key),
        )
        .await?;
        let rid = s["session"]["waits"][0]["requestId"]
            .as_str()
            .with_context(|| format!("session {sid} has no wait: {s}"))?
            .to_owned();
        out.push((sid, rid));
    }
    Ok(out)
}

/// Decides each request at `inbox` and times until the fake model sees the resumed turn.
async fn time_resumes(
    fake: &FakeModel,
    inbox_url: &str,
    reviewer: &str,
    asked: &[(String, String)],
) -> anyhow::Result<Vec<f64>> {
    let http = reqwest::Client::new();
    let mut lat = Vec::with_capacity(asked.len());
    for (_, rid) in asked {
        let seen = fake.requests().len();
        let t0 = Instant::now();
        json_req(
            http.post(format!("{inbox_url}/inbox/api/requests/{rid}/decide"))
                .bearer_auth(reviewer)
                .json(&json!({"outcome": {"type": "APPROVE"}})),
        )
        .await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let at = loop {
            let reqs = fake.requests();
            if let Some(r) = reqs[seen.min(reqs.len())..].iter().find(|r| {
                r.body["messages"].as_array().is_some_and(|m| {
                    m.iter().any(|m| {
                        m["role"] == "user"
                            && m["content"]
                                .as_str()
                                .is_some_and(|c| c.contains(rid.as_str()))
                    })
                })
            }) {
                break r.at;
            }
            if Instant::now() > deadline {
                bail!("request {rid} was decided but its session was not resumed within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        lat.push(at.duration_since(t0).as_secs_f64() * 1e3);
        // Let the resumed turn finish before the next decision.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(lat)
}

fn report(name: &str, mut v: Vec<f64>) {
    v.sort_by(f64::total_cmp);
    println!(
        "  {name}: median {:.1} ms, p99 {:.1} ms, max {:.1} ms (n={})",
        pct(&v, 0.5),
        pct(&v, 0.99),
        v.last().copied().unwrap_or(0.0),
        v.len()
    );
}

/// A TCP proxy that counts the HTTP requests going through it (request lines).
async fn counting_proxy(upstream: String) -> anyhow::Result<(String, Arc<AtomicU64>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let count = Arc::new(AtomicU64::new(0));
    let c = count.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let upstream = upstream.clone();
            let c = c.clone();
            tokio::spawn(async move {
                let Ok(mut out) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                let (mut ri, mut wi) = inbound.split();
                let (mut ro, mut wo) = out.split();
                let up = async {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        let n = match ri.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        let chunk = &buf[..n];
                        let lines = chunk.windows(11).filter(|w| w == b" HTTP/1.1\r\n").count();
                        c.fetch_add(lines as u64, Ordering::Relaxed);
                        if wo.write_all(chunk).await.is_err() {
                            break;
                        }
                    }
                    let _ = wo.shutdown().await;
                };
                let down = async {
                    let _ = tokio::io::copy(&mut ro, &mut wi).await;
                    let _ = wi.shutdown().await;
                };
                tokio::join!(up, down);
            });
        }
    });
    Ok((url, count))
}

pub async fn bench_waits(args: &Args) -> anyhow::Result<()> {
    let fake = FakeModel::start().await?;
    fake.set_responder(responder);
    let dir = tempfile::tempdir()?;

    println!("waits: embedded inbox, {TIMED} decisions, one at a time");
    {
        let gw = start(
            &args.tern,
            dir.path().join("embedded"),
            KEY_A,
            Some(&fake.base_url()),
            false,
        )
        .await?;
        let asked = ask(&gw, KEY_A, TIMED).await?;
        let reviewer = admin_token(&gw.home)?;
        let lat = time_resumes(&fake, &gw.url, &reviewer, &asked).await?;
        report("decision → resumed turn's first model request", lat);
    }

    println!("waits: remote inbox (gateway A → gateway B --inbox-only), {TIMED} decisions");
    let b = start(&args.tern, dir.path().join("b"), KEY_B, None, true).await?;
    let upstream = b.url.trim_start_matches("http://").to_owned();
    let (proxy_url, count) = counting_proxy(upstream).await?;
    let home_a = dir.path().join("a");
    std::fs::create_dir_all(&home_a)?;
    std::fs::write(
        home_a.join("config.toml"),
        format!("[inbox]\nurl = \"{proxy_url}\"\nkey = \"{KEY_B}\"\npoll_interval = \"30s\"\n"),
    )?;
    let a = start(&args.tern, home_a, KEY_A, Some(&fake.base_url()), false).await?;
    let asked = ask(&a, KEY_A, TIMED).await?;
    let reviewer_b = admin_token(&b.home)?;
    let lat = time_resumes(&fake, &b.url, &reviewer_b, &asked).await?;
    report("decision at B → resumed turn at A", lat);

    // The same idle minute with 10 open waits, then with 1,000: the feed's cost must not
    // grow with them.
    let mut open = 0;
    for target in [10, IDLE_WAITS] {
        let t = Instant::now();
        ask(&a, KEY_A, target - open).await?;
        open = target;
        println!(
            "waits: remote inbox, {open} open waits ({} sessions asked in {:.1} s), outbound requests while idle",
            target,
            t.elapsed().as_secs_f64()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        let before = count.load(Ordering::Relaxed);
        tokio::time::sleep(IDLE_WINDOW).await;
        let n = count.load(Ordering::Relaxed) - before;
        let per_hour = n as f64 * 3600.0 / IDLE_WINDOW.as_secs_f64();
        println!(
            "  {n} requests from A to B in {} s = {per_hour:.0} per hour (polling each request \
             every 30 s would be {} per hour)",
            IDLE_WINDOW.as_secs(),
            open * 120
        );
    }
    drop(a);
    drop(b);
    Ok(())
}
