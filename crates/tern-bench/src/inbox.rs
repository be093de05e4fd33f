//! `tern-bench inbox`: the human inbox under load.
//!
//! Flow: fill a fresh store with 100,000 decided approval requests through the inbox
//! service (create, then decide, as the gateway would) → start the release `tern gateway
//! --inbox-only` on it → create-and-decide cycles over HTTP from 16 concurrent clients
//! (agent key creates, reviewer token decides, agent reads the 200) → result reads of
//! random decided requests, one client and then 8 concurrent ones, reporting p50/p99.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tern_inbox::model::{CreateApproval, CreateTask};
use tern_inbox::{Inbox, Outcome, OutcomeType};
use tern_store::Store;

use crate::{Args, pct};

/// The name the gateway gives requests made with `TERN_SERVER_KEY`.
const SERVER_KEY_OWNER: &str = "TERN_SERVER_KEY";
const KEY: &str = "bench-key-0123456789abcdef";
const DECIDED: usize = 100_000;
const CYCLES: usize = 2_000;
const CLIENTS: usize = 16;
const READS: usize = 20_000;

fn report(name: &str, v: &mut [f64]) {
    v.sort_by(f64::total_cmp);
    println!(
        "  {name}: median {:.2} ms, p99 {:.2} ms, max {:.2} ms (n={})",
        pct(v, 0.5),
        pct(v, 0.99),
        v.last().copied().unwrap_or(0.0),
        v.len()
    );
}

async fn fill(home: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let store = Store::open(&home.join("tern.db")).await?;
    let inbox = Inbox::new(store.clone());
    inbox.ensure_default_project().await?;
    let t0 = Instant::now();
    let mut ids = Vec::with_capacity(DECIDED);
    let mut task_id = String::new();
    for i in 0..DECIDED {
        // A task per 100 requests, as agents open one task per session.
        if i % 100 == 0 {
            let task: CreateTask = serde_json::from_value(json!({
                "name": format!("session {}", i / 100), "projectName": "default"
            }))?;
            task_id = inbox.create_task(SERVER_KEY_OWNER, task, None).await?.id;
        }
        let body: CreateApproval = serde_json::from_value(json!({
            "projectName": "default", "taskId": task_id,
            "summary": format!("Run deploy step {i}?"),
            "keyValueContext": {"action": "deploy", "step": i.to_string()},
            "recommendation": {"outcome": {"type": "APPROVE"}, "confidence": 0.8},
        }))?;
        let id = inbox
            .create_approval(SERVER_KEY_OWNER, body, Some(&format!("fill-{i}")))
            .await?
            .event_id;
        inbox
            .decide_approval(&id, Outcome::new(OutcomeType::Approve), "admin")
            .await?;
        ids.push(id);
        if (i + 1) % 20_000 == 0 {
            eprintln!(
                "  filled {} decided requests ({:.0} s)",
                i + 1,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    store.close().await;
    Ok(ids)
}

async fn send(req: reqwest::RequestBuilder) -> anyhow::Result<(u16, Value, f64)> {
    let t = Instant::now();
    let r = req.send().await?;
    let status = r.status().as_u16();
    let body = r.bytes().await?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let v = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap_or(Value::Null)
    };
    Ok((status, v, ms))
}

pub async fn bench_inbox(args: &Args) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home)?;
    println!("inbox: filling the store with {DECIDED} decided approval requests");
    let t = Instant::now();
    let ids = fill(&home).await?;
    println!(
        "  fill: {:.1} s ({:.0} create+decide/s in-process)",
        t.elapsed().as_secs_f64(),
        DECIDED as f64 / t.elapsed().as_secs_f64()
    );

    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut child = Command::new(&args.tern)
        .args([
            "gateway",
            "--inbox-only",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .env("TERN_HOME", &home)
        .env("TERN_SERVER_KEY", KEY)
        .env("TERN_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let result = measure(&home, port, &ids).await;
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();
    result
}

async fn measure(home: &std::path::Path, port: u16, ids: &[String]) -> anyhow::Result<()> {
    let url = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let t0 = Instant::now();
    while http.get(format!("{url}/health")).send().await.is_err() {
        if t0.elapsed() > Duration::from_secs(20) {
            bail!("the gateway did not start");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let admin: Value = serde_json::from_str(
        &std::fs::read_to_string(home.join("inbox-admin.json"))
            .context("reading the gateway's inbox-admin.json")?,
    )?;
    let reviewer = admin["token"]
        .as_str()
        .context("inbox-admin.json has no token")?
        .to_owned();

    // Create-and-decide cycles: each client has its own task.
    println!(
        "inbox: {CYCLES} create-and-decide cycles over HTTP, {CLIENTS} clients, {} decided in the store",
        ids.len()
    );
    let t = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (http, url, reviewer) = (http.clone(), url.clone(), reviewer.clone());
            tokio::spawn(async move {
                let (s, task, _) =
                    send(http.post(format!("{url}/api/tasks")).bearer_auth(KEY).json(
                        &json!({"name": format!("bench client {c}"), "projectName": "default"}),
                    ))
                    .await?;
                if s != 201 {
                    bail!("creating a task: {s} {task}");
                }
                let task_id = task["id"].as_str().unwrap_or_default().to_owned();
                let (mut create, mut decide, mut read) = (Vec::new(), Vec::new(), Vec::new());
                for i in 0..CYCLES / CLIENTS {
                    let (s, created, ms) = send(
                        http.post(format!("{url}/api/approval-requests"))
                            .bearer_auth(KEY)
                            .header("Idempotency-Key", format!("bench-{c}-{i}"))
                            .json(&json!({
                                "projectName": "default", "taskId": task_id,
                                "summary": format!("client {c} step {i}"),
                                "keyValueContext": {"action": "deploy"},
                            })),
                    )
                    .await?;
                    if s != 201 {
                        bail!("creating a request: {s} {created}");
                    }
                    create.push(ms);
                    let id = created["eventId"].as_str().unwrap_or_default().to_owned();
                    let (s, decided, ms) = send(
                        http.post(format!("{url}/inbox/api/requests/{id}/decide"))
                            .bearer_auth(&reviewer)
                            .json(&json!({"outcome": {"type": "APPROVE"}})),
                    )
                    .await?;
                    if s != 200 {
                        bail!("deciding: {s} {decided}");
                    }
                    decide.push(ms);
                    let (s, result, ms) = send(
                        http.get(format!("{url}/api/approval-requests/{id}/result"))
                            .bearer_auth(KEY),
                    )
                    .await?;
                    if s != 200 || result["outcome"]["type"] != "APPROVE" {
                        bail!("reading the result: {s} {result}");
                    }
                    read.push(ms);
                }
                anyhow::Ok((create, decide, read))
            })
        })
        .collect();
    let (mut create, mut decide, mut read) = (Vec::new(), Vec::new(), Vec::new());
    for c in clients {
        let (a, b, r) = c.await??;
        create.extend(a);
        decide.extend(b);
        read.extend(r);
    }
    let wall = t.elapsed().as_secs_f64();
    println!(
        "  throughput: {:.0} create-and-decide cycles/s ({CYCLES} in {wall:.2} s; a cycle = create + decide + read)",
        CYCLES as f64 / wall
    );
    report("create (POST /api/approval-requests)", &mut create);
    report("decide (POST /inbox/api/requests/{id}/decide)", &mut decide);
    report("result read right after", &mut read);

    // Result reads of random old requests: a pseudo-random walk over the 100,000.
    let pick = |n: usize| -> &str { &ids[(n.wrapping_mul(2_654_435_761)) % ids.len()] };
    let mut one = Vec::with_capacity(READS / 10);
    for n in 0..READS / 10 {
        let (s, v, ms) = send(
            http.get(format!("{url}/api/approval-requests/{}/result", pick(n)))
                .bearer_auth(KEY),
        )
        .await?;
        if s != 200 {
            bail!("reading a result: {s} {v}");
        }
        one.push(ms);
    }
    println!(
        "inbox: result reads of random decided requests ({} in the store)",
        ids.len()
    );
    report("1 client", &mut one);
    let t = Instant::now();
    let readers: Vec<_> = (0..8)
        .map(|r| {
            let (http, url) = (http.clone(), url.clone());
            let mine: Vec<String> = (0..READS / 8)
                .map(|n| pick(r * READS + n).to_owned())
                .collect();
            tokio::spawn(async move {
                let mut v = Vec::with_capacity(mine.len());
                for id in mine {
                    let (s, body, ms) = send(
                        http.get(format!("{url}/api/approval-requests/{id}/result"))
                            .bearer_auth(KEY),
                    )
                    .await?;
                    if s != 200 {
                        bail!("reading a result: {s} {body}");
                    }
                    v.push(ms);
                }
                anyhow::Ok(v)
            })
        })
        .collect();
    let mut many = Vec::new();
    for r in readers {
        many.extend(r.await??);
    }
    let wall = t.elapsed().as_secs_f64();
    report("8 clients", &mut many);
    println!("  {:.0} reads/s with 8 clients", many.len() as f64 / wall);
    Ok(())
}
