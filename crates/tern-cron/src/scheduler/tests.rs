//! The scheduler against a real SQLite store and a `ManualClock`: each schedule kind, DST in a
//! zone, catch-up after downtime, overlap, pause and resume, one-shots retired, stop, runs by
//! hand, recovery of runs cut short, and two schedulers on one store. No test waits for the
//! clock: each moves it and waits for the scheduler to settle.

use std::sync::Mutex;

use jiff::tz::TimeZone;
use tern_store::cron::{CronCreator, OccurrenceState};
use tokio::sync::Semaphore;

use super::*;
use crate::ManualClock;
use crate::jobs::{self, Creator, JobFields};

/// Records every run it is asked for; holds each until a permit is given when `hold`.
struct Recorder {
    runs: Mutex<Vec<(String, i64, i64, bool)>>,
    hold: bool,
    gate: Semaphore,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            runs: Mutex::new(Vec::new()),
            hold: false,
            gate: Semaphore::new(0),
        }
    }
}

impl Recorder {
    fn holding() -> Self {
        Recorder {
            hold: true,
            ..Default::default()
        }
    }

    fn runs(&self) -> Vec<(String, i64, i64, bool)> {
        self.runs.lock().unwrap().clone()
    }

    fn times(&self, job: &str) -> Vec<i64> {
        self.runs()
            .into_iter()
            .filter(|r| r.0 == job)
            .map(|r| r.1)
            .collect()
    }
}

impl Runner for Recorder {
    fn run(&self, job: CronJob, o: CronOccurrence, cx: RunContext) -> BoxFuture<'_, RunEnd> {
        Box::pin(async move {
            self.runs
                .lock()
                .unwrap()
                .push((job.id.clone(), o.scheduled_at, o.attempt, o.manual));
            if self.hold {
                tokio::select! {
                    p = self.gate.acquire() => { p.unwrap().forget(); }
                    () = cx.stop.cancelled() => {
                        return RunEnd::Finished { status: "stopped".into(), outcome: "stopped".into(), output: None };
                    }
                    () = cx.shutdown.cancelled() => return RunEnd::CutShort,
                }
            }
            RunEnd::Finished {
                status: "completed".into(),
                outcome: "completed".into(),
                output: Some(format!("ran {}", o.scheduled_at)),
            }
        })
    }
}

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

struct Env {
    _dir: tempfile::TempDir,
    store: Store,
    clock: Arc<ManualClock>,
}

async fn env(start: &str) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("tern.db")).await.unwrap();
    Env {
        _dir: dir,
        store,
        clock: Arc::new(ManualClock::new(ts(start))),
    }
}

struct Running {
    scheduler: Arc<Scheduler>,
    recorder: Arc<Recorder>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn shut(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the scheduler stops")
            .unwrap();
    }
}

impl Env {
    fn start(&self, recorder: Recorder) -> Running {
        let recorder = Arc::new(recorder);
        let scheduler = Scheduler::new(self.store.clone(), self.clock.clone(), recorder.clone());
        let stop = CancellationToken::new();
        let task = scheduler.spawn(stop.clone());
        Running {
            scheduler,
            recorder,
            stop,
            task,
        }
    }

    async fn add(&self, fields: JobFields) -> CronJob {
        jobs::create(
            &self.store,
            &fields,
            &Creator {
                created_by: CronCreator::Cli,
                owner_key: None,
                session: None,
            },
            self.clock.now(),
            &TimeZone::UTC,
        )
        .await
        .unwrap()
    }

    async fn history(&self, job: &str) -> Vec<CronOccurrence> {
        let mut h = self.store.cron_history(job, 1000).await.unwrap();
        h.reverse();
        h
    }

    /// Moves the clock to `t` and waits until the scheduler has looked.
    async fn at(&self, r: &Running, t: Timestamp) {
        self.clock.set(t);
        tokio::time::timeout(Duration::from_secs(10), r.scheduler.settled())
            .await
            .expect("the scheduler settles");
    }
}

fn fields(schedule: &str) -> JobFields {
    JobFields {
        schedule: Some(schedule.into()),
        prompt: Some("check the deploy".into()),
        ..Default::default()
    }
}

/// Waits, bounded, until `f` holds.
async fn eventually(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !f().await {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn ms(s: &str) -> i64 {
    ts(s).as_millisecond()
}

async fn ran(e: &Env, job: &str, n: usize) {
    eventually(&format!("{n} run(s) of {job} recorded"), async || {
        e.history(job)
            .await
            .iter()
            .filter(|o| o.state == OccurrenceState::Ran)
            .count()
            == n
    })
    .await;
}

#[tokio::test]
async fn a_delay_runs_once_at_its_time_and_the_job_retires() {
    let e = env("2026-11-26T09:00:00Z").await;
    let r = e.start(Recorder::default());
    let job = e.add(fields("30m")).await;
    e.at(&r, ts("2026-11-26T09:29:59Z")).await;
    assert!(r.recorder.runs().is_empty(), "ran early");
    e.at(&r, ts("2026-11-26T09:30:00Z")).await;
    ran(&e, &job.id, 1).await;
    e.at(&r, ts("2026-11-26T12:00:00Z")).await;
    assert_eq!(r.recorder.times(&job.id), vec![ms("2026-11-26T09:30:00Z")]);
    let j = e.store.cron_job(&job.id).await.unwrap().unwrap();
    assert!(j.retired_at.is_some() && j.next_run_at.is_none(), "{j:?}");
    assert_eq!(jobs::job_state(&j), "retired");
    let h = e.history(&job.id).await;
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].outcome.as_deref(), Some("completed"));
    r.shut().await;
}

#[tokio::test]
async fn an_interval_runs_at_each_multiple_of_its_anchor_however_late_it_is_looked_at() {
    let e = env("2026-11-26T09:00:00Z").await;
    let r = e.start(Recorder::default());
    let job = e.add(fields("every 10m")).await;
    // Looked at 20 s late each time (within the on-time tolerance): no drift.
    for k in 1..=3 {
        let t = ts("2026-11-26T09:00:20Z") + SignedDuration::from_mins(10 * k);
        e.at(&r, t).await;
        ran(&e, &job.id, k as usize).await;
    }
    assert_eq!(
        r.recorder.times(&job.id),
        vec![
            ms("2026-11-26T09:10:00Z"),
            ms("2026-11-26T09:20:00Z"),
            ms("2026-11-26T09:30:00Z")
        ]
    );
    r.shut().await;
}

#[tokio::test]
async fn a_timestamp_runs_once_and_a_cron_expression_at_each_match() {
    let e = env("2026-11-26T09:00:00Z").await;
    let r = e.start(Recorder::default());
    let once = e.add(fields("2026-11-26T10:15:00Z")).await;
    let cron = e.add(fields("0 */2 * * *")).await;
    for t in [
        "2026-11-26T10:00:05Z",
        "2026-11-26T10:15:05Z",
        "2026-11-26T12:00:05Z",
    ] {
        e.at(&r, ts(t)).await;
        // Each run ends before the next occurrence (else that one is an overlap).
        eventually("the runs ended", async || {
            let (a, b) = (e.history(&once.id).await, e.history(&cron.id).await);
            a.iter()
                .chain(&b)
                .all(|o| o.state != OccurrenceState::Running)
        })
        .await;
    }
    ran(&e, &cron.id, 2).await;
    ran(&e, &once.id, 1).await;
    assert_eq!(r.recorder.times(&once.id), vec![ms("2026-11-26T10:15:00Z")]);
    assert_eq!(
        r.recorder.times(&cron.id),
        vec![ms("2026-11-26T10:00:00Z"), ms("2026-11-26T12:00:00Z")]
    );
    r.shut().await;
}

/// Steps the clock just past each of the job's occurrences from `from` to `to`.
async fn step_through(e: &Env, r: &Running, job: &CronJob, to: Timestamp) {
    let schedule = Schedule::from_stored(&job.schedule).unwrap();
    while let Some(t) = schedule.next_after(e.clock.now()) {
        if t > to {
            break;
        }
        e.at(r, t + SignedDuration::from_secs(1)).await;
        // Its run ended before the next day's comes (else that one is an overlap).
        eventually("the day's run ended", async || {
            e.history(&job.id)
                .await
                .iter()
                .all(|o| o.state != OccurrenceState::Running)
        })
        .await;
    }
}

/// Times as Berlin's wall clock shows them, with the zone's abbreviation.
fn berlin_times(times: &[i64]) -> Vec<String> {
    let berlin = TimeZone::get("Europe/Berlin").unwrap();
    times
        .iter()
        .map(|t| {
            Timestamp::from_millisecond(*t)
                .unwrap()
                .to_zoned_datetime(berlin.clone())
                .strftime("%F %H:%M %Z")
                .to_string()
        })
        .collect()
}

#[tokio::test]
async fn dst_a_daily_job_runs_once_a_day_through_both_changes() {
    let e = env("2026-03-27T12:00:00Z").await;
    let r = e.start(Recorder::default());
    let job = e.add(fields("TZ=Europe/Berlin 30 2 * * *")).await;
    let fall = e.add(fields("TZ=Europe/Berlin 30 2 * * *")).await;
    step_through(&e, &r, &job, ts("2026-03-31T12:00:00Z")).await;
    ran(&e, &job.id, 4).await;
    let local = berlin_times(&r.recorder.times(&job.id));
    // 29 March: 02:30 does not exist; it runs once, shifted forward by the gap.
    assert_eq!(
        local,
        vec![
            "2026-03-28 02:30 CET",
            "2026-03-29 03:30 CEST",
            "2026-03-30 02:30 CEST",
            "2026-03-31 02:30 CEST"
        ]
    );
    // 25 October: 02:30 happens twice; it runs once, the first time.
    let _ = fall;
    let r = {
        r.shut().await;
        e.clock.set(ts("2026-10-23T12:00:00Z"));
        let resumed = e.start(Recorder::default());
        jobs::update(
            &e.store,
            &fall.id,
            &fields("TZ=Europe/Berlin 30 2 * * *"),
            e.clock.now(),
            &TimeZone::UTC,
        )
        .await
        .unwrap();
        resumed
    };
    let fall = e.store.cron_job(&fall.id).await.unwrap().unwrap();
    step_through(&e, &r, &fall, ts("2026-10-27T12:00:00Z")).await;
    let local = berlin_times(&r.recorder.times(&fall.id));
    assert_eq!(
        local,
        vec![
            "2026-10-24 02:30 CEST",
            "2026-10-25 02:30 CEST",
            "2026-10-26 02:30 CET",
            "2026-10-27 02:30 CET"
        ]
    );
    r.shut().await;
}

/// A job every hour, the scheduler down for 5 h 30 min, then started again: its runs and
/// skips under `catch_up`/`grace`.
async fn after_downtime(catch_up: &str, grace: Option<&str>) -> (Vec<i64>, Vec<CronOccurrence>) {
    let e = env("2026-11-26T00:00:00Z").await;
    let r = e.start(Recorder::default());
    let mut f = fields("every 1h");
    f.catch_up = Some(serde_json::from_value(serde_json::json!(catch_up)).unwrap());
    f.grace = grace.map(str::to_owned);
    let job = e.add(f).await;
    r.shut().await;
    e.clock.set(ts("2026-11-26T05:30:00Z"));
    let r = e.start(Recorder::default());
    r.scheduler.settled().await;
    let runs = {
        let job = job.id.clone();
        let rec = r.recorder.clone();
        eventually("the catch-up runs are recorded", async || {
            let h = e.history(&job).await;
            h.len() == 5 && h.iter().all(|o| o.state != OccurrenceState::Running)
        })
        .await;
        rec.times(&job)
    };
    let h = e.history(&job.id).await;
    assert_eq!(
        e.store
            .cron_job(&job.id)
            .await
            .unwrap()
            .unwrap()
            .next_run_at,
        Some(ms("2026-11-26T06:00:00Z")),
        "the next occurrence is the next one after now"
    );
    r.shut().await;
    (runs, h)
}

fn reasons(h: &[CronOccurrence]) -> Vec<(i64, &str)> {
    h.iter()
        .map(|o| {
            (
                o.scheduled_at,
                o.reason.as_deref().unwrap_or(match o.state {
                    OccurrenceState::Ran => "ran",
                    _ => "?",
                }),
            )
        })
        .collect()
}

#[tokio::test]
async fn catch_up_one_runs_the_latest_missed_and_records_the_rest_skipped() {
    let (runs, h) = after_downtime("one", None).await;
    assert_eq!(runs, vec![ms("2026-11-26T05:00:00Z")]);
    assert_eq!(
        reasons(&h),
        vec![
            (ms("2026-11-26T01:00:00Z"), "missed: gateway down"),
            (ms("2026-11-26T02:00:00Z"), "missed: gateway down"),
            (ms("2026-11-26T03:00:00Z"), "missed: gateway down"),
            (ms("2026-11-26T04:00:00Z"), "missed: gateway down"),
            (ms("2026-11-26T05:00:00Z"), "ran"),
        ]
    );
}

#[tokio::test]
async fn catch_up_all_runs_each_missed_one_in_order() {
    let (runs, h) = after_downtime("all", None).await;
    assert_eq!(runs.len(), 5);
    assert!(runs.windows(2).all(|w| w[0] < w[1]), "in order: {runs:?}");
    assert!(h.iter().all(|o| o.state == OccurrenceState::Ran));
}

#[tokio::test]
async fn catch_up_none_runs_nothing_missed() {
    let (runs, h) = after_downtime("none", None).await;
    assert!(runs.is_empty());
    assert!(
        h.iter()
            .all(|o| o.reason.as_deref() == Some("missed: gateway down"))
    );
}

#[tokio::test]
async fn the_grace_window_bounds_catch_up() {
    let (runs, h) = after_downtime("all", Some("2h45m")).await;
    assert_eq!(
        runs,
        vec![
            ms("2026-11-26T03:00:00Z"),
            ms("2026-11-26T04:00:00Z"),
            ms("2026-11-26T05:00:00Z")
        ]
    );
    let skipped: Vec<_> = reasons(&h)
        .into_iter()
        .filter(|(_, r)| *r != "ran")
        .collect();
    assert_eq!(
        skipped,
        vec![
            (ms("2026-11-26T01:00:00Z"), "missed: outside grace window"),
            (ms("2026-11-26T02:00:00Z"), "missed: outside grace window"),
        ]
    );
}

#[tokio::test]
async fn overlap_skip_records_the_occurrence_that_comes_during_a_run() {
    let e = env("2026-11-26T09:00:00Z").await;
    let r = e.start(Recorder::holding());
    let job = e.add(fields("every 1m")).await;
    e.at(&r, ts("2026-11-26T09:01:00Z")).await;
    eventually("the first run started", async || {
        r.recorder.runs().len() == 1
    })
    .await;
    e.at(&r, ts("2026-11-26T09:02:00Z")).await;
    let h = e.history(&job.id).await;
    assert_eq!(h.len(), 2);
    assert_eq!(h[0].state, OccurrenceState::Running);
    assert_eq!(h[1].state, OccurrenceState::Skipped);
    assert_eq!(
        h[1].reason.as_deref(),
        Some("overlap: previous run still going")
    );
    r.recorder.gate.add_permits(1);
    ran(&e, &job.id, 1).await;
    assert_eq!(r.recorder.runs().len(), 1);
    r.shut().await;
}

#[tokio::test]
async fn overlap_queue_runs_the_occurrence_after_the_running_one() {
    let e = env("2026-11-26T09:00:00Z").await;
    let r = e.start(Recorder::holding());
    let mut f = fields("every 1m");
    f.overlap = Some(CronOverlap::Queue);
    let job = e.add(f).await;
    e.at(&r, ts("2026-11-26T09:01:00Z")).await;
    eventually("the first run started", async || {
        r.recorder.runs().len() == 1
    })
    .await;
    e.at(&r, ts("2026-11-26T09:02:00Z")).await;
    // Claimed, but waiting behind the first: not started.
    assert_eq!(e.history(&job.id).await.len(), 2);
    assert_eq!(r.recorder.runs().len(), 1);
    r.recorder.gate.add_permits(2);
    ran(&e, &job.id, 2).await;
    assert_eq!(
        r.recorder.times(&job.id),
        vec![ms("2026-11-26T09:01:00Z"), ms("2026-11-26T09:02:00Z")]
    );
    r.shut().await;
}

#[tokio::test]
async fn a_paused_job_has_no_occurrences_and_resumes_from_the_next_one() {
    let e = env("2026-11-26T09:00:00Z").await;
    let r = e.start(Recorder::default());
    let job = e.add(fields("every 10m")).await;
    jobs::pause(&e.store, &job.id).await.unwrap();
    e.at(&r, ts("2026-11-26T09:35:00Z")).await;
    assert!(e.history(&job.id).await.is_empty());
    let resumed = jobs::resume(&e.store, &job.id, e.clock.now())
        .await
        .unwrap();
    assert_eq!(resumed.next_run_at, Some(ms("2026-11-26T09:40:00Z")));
    r.scheduler.wake();
    e.at(&r, ts("2026-11-26T09:40:01Z")).await;
    ran(&e, &job.id, 1).await;
    assert_eq!(r.recorder.times(&job.id), vec![ms("2026-11-26T09:40:00Z")]);
    r.shut().await;
}

#[tokio::test]
async fn stop_ends_a_run_and_its_outcome_says_so() {
    let e = env("2026-11-26T09:00:00Z").await;
    let r = e.start(Recorder::holding());
    let job = e.add(fields("1m")).await;
    e.at(&r, ts("2026-11-26T09:01:00Z")).await;
    eventually("the run started", async || r.recorder.runs().len() == 1).await;
    assert_eq!(r.scheduler.stop(&job.id), 1);
    ran(&e, &job.id, 1).await;
    assert_eq!(
        e.history(&job.id).await[0].outcome.as_deref(),
        Some("stopped")
    );
    assert_eq!(r.scheduler.stop(&job.id), 0, "nothing left to stop");
    r.shut().await;
}

#[tokio::test]
async fn a_run_by_hand_runs_a_paused_job_without_moving_its_schedule() {
    let e = env("2026-11-26T09:00:00Z").await;
    let r = e.start(Recorder::default());
    let job = e.add(fields("every 1h")).await;
    jobs::pause(&e.store, &job.id).await.unwrap();
    let o = r.scheduler.run_now(&job.id).await.unwrap();
    assert!(o.manual);
    ran(&e, &job.id, 1).await;
    let again = r.scheduler.run_now(&job.id).await.unwrap();
    assert_ne!(
        again.scheduled_at, o.scheduled_at,
        "two runs at the same ms"
    );
    ran(&e, &job.id, 2).await;
    let j = e.store.cron_job(&job.id).await.unwrap().unwrap();
    assert_eq!(j.next_run_at, Some(ms("2026-11-26T10:00:00Z")));
    assert!(!j.enabled);
    assert!(matches!(
        r.scheduler.run_now("nope").await,
        Err(JobError::NotFound(_))
    ));
    r.shut().await;
}

#[tokio::test]
async fn a_run_cut_short_is_interrupted_and_retried_once_only_when_the_job_says_so() {
    let e = env("2026-11-26T09:00:00Z").await;
    let r = e.start(Recorder::holding());
    let mut f = fields("every 1h");
    f.retry_interrupted = Some(true);
    let retried = e.add(f).await;
    let plain = e.add(fields("every 1h")).await;
    e.at(&r, ts("2026-11-26T10:00:00Z")).await;
    eventually("both runs started", async || r.recorder.runs().len() == 2).await;
    // The shutdown cuts both short: they stay `running`, as after a kill -9.
    r.shut().await;
    assert!(
        e.history(&plain.id)
            .await
            .iter()
            .all(|o| o.state == OccurrenceState::Running)
    );
    let r = e.start(Recorder::default());
    ran(&e, &retried.id, 1).await;
    r.scheduler.settled().await;
    let h = e.history(&retried.id).await;
    assert_eq!((h.len(), h[0].attempt), (1, 2), "{h:?}");
    assert_eq!(
        r.recorder.runs().len(),
        1,
        "only the retry ran: {:?}",
        r.recorder.runs()
    );
    let h = e.history(&plain.id).await;
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].state, OccurrenceState::Interrupted);
    r.shut().await;
    // A third start does not run it again.
    let r = e.start(Recorder::default());
    r.scheduler.settled().await;
    assert!(r.recorder.runs().is_empty());
    r.shut().await;
}

#[tokio::test]
async fn two_schedulers_on_one_store_run_each_occurrence_once() {
    let e = env("2026-11-26T09:00:00Z").await;
    let a = e.start(Recorder::default());
    let b = e.start(Recorder::default());
    let mut ids = Vec::new();
    for i in 0..20 {
        let mut f = fields(if i % 2 == 0 { "every 1m" } else { "90s" });
        f.name = Some(format!("job {i}"));
        ids.push(e.add(f).await.id);
    }
    for m in 1..=3 {
        let t = ts("2026-11-26T09:00:00Z") + SignedDuration::from_mins(m);
        e.clock.set(t);
        let (x, y) = tokio::join!(a.scheduler.settled(), b.scheduler.settled());
        let _ = (x, y);
    }
    // Every-minute jobs: 3 occurrences; 90 s one-shots: 1. Each accounted for once: run by
    // one of the two, or skipped (a run of the other scheduler still going: overlap).
    let expected = 10 * 3 + 10;
    eventually("every occurrence accounted for", async || {
        let mut n = 0;
        for id in &ids {
            let h = e.history(id).await;
            if h.iter().any(|o| o.state == OccurrenceState::Running) {
                return false;
            }
            n += h.len();
        }
        n == expected
    })
    .await;
    let mut all: Vec<(String, i64)> = a
        .recorder
        .runs()
        .into_iter()
        .chain(b.recorder.runs())
        .map(|r| (r.0, r.1))
        .collect();
    all.sort();
    let n = all.len();
    all.dedup();
    assert_eq!(all.len(), n, "an occurrence ran twice");
    let mut ran = 0;
    for id in &ids {
        ran += e
            .history(id)
            .await
            .iter()
            .filter(|o| o.state == OccurrenceState::Ran)
            .count();
    }
    assert_eq!(ran, n, "every recorded run ran, and only those");
    assert!(n >= 10, "the one-shots at least ran: {n}");
    a.shut().await;
    b.shut().await;
}

#[tokio::test]
async fn a_webhook_gets_the_result_of_a_run() {
    use axum::routing::post;
    let got = Arc::new(Mutex::new(Vec::<serde_json::Value>::new()));
    let g = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(move |body: axum::Json<serde_json::Value>| {
            let g = g.clone();
            async move {
                g.lock().unwrap().push(body.0);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let e = env("2026-11-26T09:00:00Z").await;
    let r = e.start(Recorder::default());
    let mut f = fields("5m");
    f.deliver = Some(format!("http://{addr}/hook"));
    let job = e.add(f).await;
    e.at(&r, ts("2026-11-26T09:05:00Z")).await;
    eventually("the webhook got the result", async || {
        !got.lock().unwrap().is_empty()
    })
    .await;
    let body = got.lock().unwrap()[0].clone();
    assert_eq!(body["job"]["id"], job.id.as_str());
    assert_eq!(body["occurrence"]["state"], "ran");
    assert_eq!(
        body["occurrence"]["output"],
        format!("ran {}", ms("2026-11-26T09:05:00Z"))
    );
    eventually("the delivery is recorded", async || {
        e.history(&job.id).await[0].delivery.as_deref() == Some("delivered")
    })
    .await;
    r.shut().await;
    server.abort();
}

#[tokio::test]
async fn a_jobs_lock_goes_once_its_runs_have_ended() {
    let e = env("2026-11-26T09:00:00Z").await;
    let r = e.start(Recorder::default());
    let job = e.add(fields("every 1m")).await;
    e.at(&r, ts("2026-11-26T09:01:00Z")).await;
    ran(&e, &job.id, 1).await;
    eventually("the run's task ended", async || {
        r.scheduler.runs_of(&job.id) == 0
    })
    .await;
    assert!(
        r.scheduler.job_locks.lock().unwrap().is_empty(),
        "one lock kept per job ever run"
    );
    r.shut().await;
}
