//! `tern-bench cron`: how late a scheduled run starts, and what idle jobs cost.
//!
//! Flow: a gateway booted in-process (`GatewayBuilder`, as `tern gateway` boots it, the wall
//! clock) with the instant fake model.
//!
//! - **Delay**: each round creates a job due 1 s later (`tern_cron::jobs::create`, as the API
//!   does, then `Scheduler::wake`), and times from the occurrence's scheduled time to the
//!   fake model's arrival time of the run's first request. Baseline in the same run: the same
//!   job run by hand (`Scheduler::run_now`), timed from the call: the cost of a run without
//!   the scheduler's sleep. The two alternate.
//! - **Idle cost**: the gateway with 10,000 jobs whose next occurrences are hours away
//!   (intervals, cron expressions, one-shots), then a fresh one with none, each left alone for
//!   the same window: this process's CPU time (`getrusage`) and RSS at the start and end of
//!   the window. Flat means no per-job timer or polling: one sleep until the earliest job.
//!
//! Usage: `tern-bench cron [--rounds N] [--jobs N] [--idle SECS]`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use jiff::Timestamp;
use tern_cron::jobs::{self, Creator, JobFields};
use tern_fake_model::{FakeModel, Reply};
use tern_gateway::boot::{GatewayBuilder, GatewayHandle};
use tern_store::cron::CronCreator;

use crate::channels::cpu_time;
use crate::pct;

const BOUND: Duration = Duration::from_secs(30);

struct Opts {
    rounds: usize,
    jobs: usize,
    idle: Duration,
}

fn parse() -> anyhow::Result<Opts> {
    let mut o = Opts {
        rounds: 50,
        jobs: 10_000,
        idle: Duration::from_secs(60),
    };
    let mut it = std::env::args().skip(2);
    while let Some(a) = it.next() {
        let mut num = |what: &str| -> anyhow::Result<u64> {
            Ok(it
                .next()
                .with_context(|| format!("{what} needs a number"))?
                .parse()?)
        };
        match a.as_str() {
            "--rounds" => o.rounds = usize::try_from(num("--rounds")?)?,
            "--jobs" => o.jobs = usize::try_from(num("--jobs")?)?,
            "--idle" => o.idle = Duration::from_secs(num("--idle")?),
            other => bail!("unknown argument {other}"),
        }
    }
    if o.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    Ok(o)
}

async fn boot(dir: &Path, fake: &FakeModel) -> anyhow::Result<GatewayHandle> {
    let home = dir.join("home");
    let work = dir.join("work");
    std::fs::create_dir_all(&home)?;
    std::fs::create_dir_all(&work)?;
    std::fs::write(
        home.join("config.toml"),
        format!(
            "[model]\nbase_url = \"{}\"\nname = \"fake-model\"\nstream = false\n\n\
             [gateway]\nlisten = \"127.0.0.1:0\"\n",
            fake.base_url()
        ),
    )?;
    let root = tern_config::Home { root: home };
    let eff = tern_config::load(&root, &|_| None)?;
    Ok(GatewayBuilder::new(root, eff)
        .workdir(work)
        .start()
        .await?
        .handle)
}

fn cli() -> Creator {
    Creator {
        created_by: CronCreator::Cli,
        owner_key: None,
        session: None,
    }
}

/// One round: a job due in 1 s (or run by hand), timed to its run's first model request.
async fn round(
    i: usize,
    by_hand: bool,
    handle: &GatewayHandle,
    fake: &FakeModel,
) -> anyhow::Result<Duration> {
    let gw = handle.gateway();
    let store = gw.agent.store();
    let cron = gw.cron();
    let before = fake.requests().len();
    let fields = JobFields {
        schedule: Some(if by_hand { "every 24h" } else { "1s" }.into()),
        prompt: Some(format!("bench round {i}")),
        ..JobFields::default()
    };
    let (now_ts, now) = (Timestamp::now(), Instant::now());
    let job = jobs::create(store, &fields, &cli(), now_ts, &cron.tz).await?;
    let t0 = if by_hand {
        let t0 = Instant::now();
        cron.scheduler.run_now(&job.id).await?;
        t0
    } else {
        cron.scheduler.wake();
        let due = job.next_run_at.context("no occurrence")?;
        now + Duration::from_millis(u64::try_from(due - now_ts.as_millisecond())?)
    };
    let at = fake
        .wait_requests(before + 1, BOUND)
        .await
        .and_then(|r| r.get(before).map(|r| r.at))
        .context("the run's model request did not come")?;
    // Let the run end before the next round (its answer recorded).
    let deadline = Instant::now() + BOUND;
    loop {
        let h = store.cron_history(&job.id, 1).await?;
        if h.first().is_some_and(|o| o.outcome.is_some()) {
            break;
        }
        if Instant::now() > deadline {
            bail!("the run did not end");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    store.delete_cron_job(&job.id).await?;
    Ok(at.saturating_duration_since(t0))
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU seconds per hour, and RSS (MiB) at the start and end of an idle window, with `n`
/// jobs scheduled hours ahead.
async fn idle(n: usize, fake: &FakeModel, o: &Opts) -> anyhow::Result<(f64, f64, f64)> {
    let dir = tempfile::tempdir()?;
    let handle = boot(dir.path(), fake).await?;
    let gw = handle.gateway();
    let store = gw.agent.store();
    let tz = gw.cron().tz.clone();
    let now = Timestamp::now();
    for i in 0..n {
        let schedule = match i % 3 {
            0 => format!("every {}h", 6 + i % 18),
            1 => format!(
                "{} {} * * *",
                i % 60,
                (now.as_second() / 3600 + 6 + (i % 12) as i64) % 24
            ),
            _ => format!("{}h", 6 + i % 30),
        };
        let fields = JobFields {
            schedule: Some(schedule),
            prompt: Some(format!("idle job {i}")),
            ..JobFields::default()
        };
        jobs::create(store, &fields, &cli(), now, &tz).await?;
    }
    gw.cron().scheduler.settled().await;
    // Let the creation's allocations and the first pass settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (cpu0, rss0, t0) = (cpu_time()?, rss_kib(), Instant::now());
    tokio::time::sleep(o.idle).await;
    let (cpu1, rss1, wall) = (cpu_time()?, rss_kib(), t0.elapsed());
    handle.shutdown().await?;
    let hours = wall.as_secs_f64() / 3600.0;
    Ok((
        (cpu1 - cpu0).as_secs_f64() / hours,
        rss0 as f64 / 1024.0,
        rss1 as f64 / 1024.0,
    ))
}

pub async fn bench_cron() -> anyhow::Result<()> {
    let o = parse()?;
    let fake = FakeModel::start().await?;
    fake.set_responder(|_| Reply::text("done"));
    println!(
        "tern-bench cron: {} rounds, idle {} s with {} jobs\n",
        o.rounds,
        o.idle.as_secs(),
        o.jobs
    );
    let dir = tempfile::tempdir()?;
    let handle = boot(dir.path(), &fake).await?;
    let (mut sched, mut hand) = (Vec::new(), Vec::new());
    for i in 0..o.rounds * 2 {
        let d = round(i, i % 2 == 1, &handle, &fake).await?;
        let ms = d.as_secs_f64() * 1000.0;
        if i % 2 == 1 {
            hand.push(ms);
        } else {
            sched.push(ms);
        }
    }
    handle.shutdown().await?;
    sched.sort_by(f64::total_cmp);
    hand.sort_by(f64::total_cmp);
    println!("| figure | median | p99 |");
    println!("|---|---|---|");
    println!(
        "| occurrence's time → the run's first model request | {:.1} ms | {:.1} ms |",
        pct(&sched, 0.5),
        pct(&sched, 0.99)
    );
    println!(
        "| baseline: `run_now` → the run's first model request | {:.1} ms | {:.1} ms |",
        pct(&hand, 0.5),
        pct(&hand, 0.99)
    );
    println!();
    // The baseline first: RSS in one process only grows with what came before.
    let (cpu_0, rss0_0, rss1_0) = idle(0, &fake, &o).await?;
    let (cpu_n, rss0_n, rss1_n) = idle(o.jobs, &fake, &o).await?;
    println!("| idle gateway | CPU | RSS at start → end of the window |");
    println!("|---|---|---|");
    println!(
        "| {} jobs scheduled | {cpu_n:.2} s per hour | {rss0_n:.1} → {rss1_n:.1} MiB |",
        o.jobs
    );
    println!("| baseline: no job | {cpu_0:.2} s per hour | {rss0_0:.1} → {rss1_0:.1} MiB |");
    Ok(())
}
