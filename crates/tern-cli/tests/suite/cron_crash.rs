//! Scheduled jobs across `kill -9` (issue 16's crash test; `.ci/cron-crash` runs it, as it
//! takes a few minutes): 200 jobs firing every 2–6 s — script jobs appending a line to a
//! log, agent jobs asking the fake model — while a real `tern gateway` is SIGKILLed at random
//! moments and restarted on the same home, sometimes after a pause (downtime to catch up). At
//! the end, for every job, every occurrence from its creation up to where its schedule stands
//! is in the store exactly once (none missing, none extra), as ran, skipped for a reason its
//! policies allow, or interrupted; no script ran more often than its runs allow, none that ran
//! to completion failed to leave its line; no agent occurrence asked the model twice.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use tern_cron::Schedule;
use tern_cron::jobs::{self, Creator, JobFields};
use tern_fake_model::Reply;
use tern_store::Store;
use tern_store::cron::{CronCatchUp, CronCreator, CronJobKind, CronOverlap, OccurrenceState};
use tern_test_support::Running;

use crate::common::{Env, content, last_message};

const SCRIPT_JOBS: usize = 150;
const AGENT_JOBS: usize = 50;
const KILLS: usize = 14;

fn kill9(mut gw: Running) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(gw.child.id()).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = gw.child.wait().unwrap();
}

fn start(e: &Env) -> Running {
    tokio::task::block_in_place(|| e.gateway())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a few minutes long: run by .ci/cron-crash"]
async fn kill_9_while_200_jobs_fire_runs_each_occurrence_at_most_once_and_accounts_for_all() {
    let seed = std::env::var("CRON_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("cron crash test: seed {seed} (CRON_CRASH_SEED={seed} to repeat)");
    let mut rng = fastrand::Rng::with_seed(seed);
    let e = Env::with_model().await;
    e.config("[gateway]\nmax_concurrent_turns = 16\n");
    e.fake().set_responder(|body| {
        let last = last_message(body);
        Reply::text(format!("done: {}", content(&last)))
    });
    let log = e.work().join("runs.log");
    let db = e.home().join("tern.db");

    // The jobs, created on the store before any gateway runs (as `tern cron add` does
    // without one).
    let store = Store::open(&db).await.unwrap();
    let now = Timestamp::now();
    let tz = jiff::tz::TimeZone::UTC;
    let creator = Creator {
        created_by: CronCreator::Cli,
        owner_key: None,
        session: None,
    };
    for i in 0..SCRIPT_JOBS + AGENT_JOBS {
        let script = i < SCRIPT_JOBS;
        let name = format!("j{i:03}");
        let fields = JobFields {
            schedule: Some(format!("every {}s", 2 + i % 5)),
            name: Some(name.clone()),
            prompt: (!script).then(|| format!("job {name}")),
            script: script.then(|| format!("echo {name} >> {}", log.display())),
            catch_up: Some([CronCatchUp::One, CronCatchUp::All, CronCatchUp::None][i % 3]),
            overlap: Some(if i % 2 == 0 {
                CronOverlap::Skip
            } else {
                CronOverlap::Queue
            }),
            // Retried runs of script jobs only: an agent retry makes a second session.
            retry_interrupted: Some(script && i % 7 == 0),
            ..Default::default()
        };
        jobs::create(&store, &fields, &creator, now, &tz)
            .await
            .unwrap();
    }
    store.close().await;

    // Killed at random moments, sometimes left down a while.
    for k in 0..KILLS {
        let gw = start(&e);
        let up = Duration::from_millis(rng.u64(2_000..15_000));
        tokio::time::sleep(up).await;
        kill9(gw);
        let down = Duration::from_millis(if rng.bool() { rng.u64(0..4_000) } else { 0 });
        eprintln!("kill {}: after {up:?} up; down {down:?}", k + 1);
        tokio::time::sleep(down).await;
    }
    // A last start that recovers, runs a while, and stops cleanly.
    let gw = start(&e);
    tokio::time::sleep(Duration::from_secs(5)).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(gw.child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut gw = gw;
    tern_test_support::eventually("the gateway stops", async || {
        gw.child.try_wait().unwrap().map(|_| ())
    })
    .await;

    let store = Store::open_read_only(&db).await.unwrap();
    let lines = std::fs::read_to_string(&log).unwrap_or_default();
    let mut executed: BTreeMap<&str, usize> = BTreeMap::new();
    for l in lines.lines() {
        *executed.entry(l.trim()).or_default() += 1;
    }
    let requests = e.fake().requests();
    let mut asked: BTreeMap<String, usize> = BTreeMap::new();
    for r in &requests {
        let last = last_message(&r.body);
        if last["role"] == "user" {
            *asked.entry(content(&last).to_owned()).or_default() += 1;
        }
    }
    let sessions = store.list_sessions(100_000, 0).await.unwrap();
    let mut titles: BTreeMap<String, usize> = BTreeMap::new();
    for s in &sessions {
        if s.source == "cron" {
            *titles
                .entry(s.title.clone().unwrap_or_default())
                .or_default() += 1;
        }
    }
    let (mut total, mut ran, mut skipped, mut interrupted) = (0, 0, 0, 0);
    let mut problems = Vec::new();
    for job in store.list_cron_jobs(None).await.unwrap() {
        let name = job.name.clone().unwrap();
        let schedule = Schedule::from_stored(&job.schedule).unwrap();
        let next = job.next_run_at.expect("an interval job never retires");
        let from = Timestamp::from_millisecond(job.created_at - 60_000).unwrap();
        let to = Timestamp::from_millisecond(next - 1).unwrap();
        let expected: Vec<i64> = schedule
            .occurrences(from, to)
            .map(|t| t.as_millisecond())
            .collect();
        let history = store.cron_history(&job.id, 1_000_000).await.unwrap();
        let mut got: Vec<i64> = history.iter().map(|o| o.scheduled_at).collect();
        got.sort_unstable();
        if got != expected {
            let missing: Vec<_> = expected.iter().filter(|t| !got.contains(t)).collect();
            let extra: Vec<_> = got.iter().filter(|t| !expected.contains(t)).collect();
            problems.push(format!("{name}: missing {missing:?}, extra {extra:?}"));
        }
        let count = |s: OccurrenceState| history.iter().filter(|o| o.state == s).count();
        // A run the clean stop cut short is left `running`, as after a kill.
        let cut = count(OccurrenceState::Interrupted) + count(OccurrenceState::Running);
        let done = count(OccurrenceState::Ran);
        let retried = history
            .iter()
            .filter(|o| o.attempt == 2 && o.state == OccurrenceState::Ran)
            .count();
        total += history.len();
        ran += done;
        skipped += count(OccurrenceState::Skipped);
        interrupted += cut;
        for o in history
            .iter()
            .filter(|o| o.state == OccurrenceState::Skipped)
        {
            let reason = o.reason.as_deref().unwrap_or_default();
            let allowed = match reason {
                // `queue` too, past its bound of runs waiting (`MAX_QUEUED_RUNS`).
                "overlap: previous run still going" => true,
                "missed: gateway down" => job.catch_up != CronCatchUp::All,
                _ => false,
            };
            if !allowed {
                problems.push(format!(
                    "{name} ({:?}/{:?}): skipped {} for {reason:?}",
                    job.catch_up, job.overlap, o.scheduled_at
                ));
            }
        }
        match job.kind {
            CronJobKind::Script => {
                let lines = executed.get(name.as_str()).copied().unwrap_or(0);
                let completed = history
                    .iter()
                    .filter(|o| {
                        o.state == OccurrenceState::Ran && o.outcome.as_deref() == Some("exit 0")
                    })
                    .count();
                if lines < completed || lines > done + cut + retried {
                    problems.push(format!(
                        "{name}: ran {lines} time(s); {completed} completed, {done} ran, {cut} cut short"
                    ));
                }
            }
            CronJobKind::Agent => {
                let n = asked.get(&job.prompt).copied().unwrap_or(0);
                let completed = history
                    .iter()
                    .filter(|o| o.outcome.as_deref() == Some("completed"))
                    .count();
                if n < completed || n > done + cut {
                    problems.push(format!(
                        "{name}: the model was asked {n} time(s); {completed} completed, {done} ran, {cut} cut short"
                    ));
                }
                for o in &history {
                    let title = format!(
                        "cron: {name} @ {}",
                        Timestamp::from_millisecond(o.scheduled_at).unwrap()
                    );
                    if titles.get(&title).copied().unwrap_or(0) > 1 {
                        problems.push(format!("{title}: more than one session"));
                    }
                }
            }
        }
    }
    eprintln!(
        "cron crash test: {total} occurrences: {ran} ran, {skipped} skipped, {interrupted} \
         interrupted; {} script runs logged, {} model requests",
        lines.lines().count(),
        requests.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(ran > 200, "too little ran to tell anything: {ran}");
    store.close().await;
}
