//! The durable scheduler: one task that finds due jobs with one indexed query, accounts for
//! each due occurrence in the store (a claim for a run, a skip with its reason), and starts the
//! claimed runs through a [`Runner`] (the gateway's: a turn, or a script).
//!
//! # The loop
//!
//! 1. **Recovery** (once, at start): every occurrence the previous process left `running` is
//!    marked `interrupted`; those of jobs with `retry_interrupted` run once more (attempt 2).
//!    Webhook deliveries that were never tried are sent.
//! 2. **A pass**: [`Store::cron_due`] (enabled jobs whose `next_run_at` has come, earliest
//!    first, a bounded batch) → for each, [`crate::plan()`] → each step recorded in order
//!    ([`Store::cron_claim`] / [`Store::cron_skip`], each moving `next_run_at` in its own
//!    transaction) → each claimed run started on a task of its own.
//! 3. **Sleep** until the earliest `next_run_at` ([`Store::cron_next_wake`]), a
//!    [`Scheduler::wake`] (a job created, changed, resumed, a run ended) or the stop. One sleep
//!    whatever the number of jobs: no timer per job, no polling.
//!
//! # Runs
//!
//! Runs of one job go one at a time (a per-job lock): with overlap `queue` a run claimed while
//! another is going waits for it, at most [`MAX_QUEUED_RUNS`] deep (past that the policy is
//! `skip`). A run ends [`RunEnd::Finished`] (recorded `ran` with its outcome and output, then
//! delivered to a webhook if the job says so) or [`RunEnd::CutShort`] by the shutdown: left
//! `running`, so the next start marks it `interrupted`, exactly as after a `kill -9`.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tern_store::Store;
use tern_store::cron::{Claim, CronCatchUp, CronJob, CronOccurrence, CronOverlap, DeliverTo};
use tern_util::Backoff;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::jobs::JobError;
use crate::plan::{self, Action, CatchUp, Overlap};
use crate::{Clock, Schedule};

/// How many due jobs one pass reads; more are read by the next pass, at once.
const BATCH: i64 = 256;

/// The most runs of one job claimed and waiting behind its running one (overlap `queue`).
pub const MAX_QUEUED_RUNS: usize = 8;

/// Store errors back off between passes, so a broken store is not hammered.
const STORE_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// It ended: recorded `ran`.
    Finished {
        /// `completed`, `waiting` (it asked a human), `failed`, `timed_out`, `stopped`.
        status: String,
        /// The outcome in words, as `tern cron history` shows it.
        outcome: String,
        /// What it produced: its last answer, or the script's output.
        output: Option<String>,
    },
    /// The shutdown cut it short: left `running`, marked `interrupted` at the next start.
    CutShort,
}

/// What a run is given besides its job and occurrence.
#[derive(Clone)]
pub struct RunContext {
    /// Cancelled by `tern cron stop` (the run ends `stopped`).
    pub stop: CancellationToken,
    /// Cancelled when the scheduler stops (the gateway is shutting down).
    pub shutdown: CancellationToken,
}

/// Runs one claimed occurrence to its end: the gateway's turn or script. It records the run's
/// session ([`Store::cron_set_session`]) as soon as it has one.
pub trait Runner: Send + Sync + 'static {
    fn run(
        &self,
        job: CronJob,
        occurrence: CronOccurrence,
        cx: RunContext,
    ) -> BoxFuture<'_, RunEnd>;
}

/// The scheduler of one gateway.
pub struct Scheduler {
    store: Store,
    clock: Arc<dyn Clock>,
    runner: Arc<dyn Runner>,
    wake: Notify,
    /// Runs started and not ended: occurrence id → (job id, its stop).
    runs: Mutex<HashMap<i64, (String, CancellationToken)>>,
    /// One lock per job with runs: its runs go one at a time.
    job_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
    http: reqwest::Client,
    /// [`Scheduler::settled`]'s requests, and the latest one a finished pass had seen.
    settle_requested: std::sync::atomic::AtomicU64,
    /// Set once recovery has marked the last process's runs: a run by hand waits for it, so
    /// the recovery never takes a run of this process for one the last process left.
    recovered: tokio::sync::watch::Sender<bool>,
    /// Whether [`Scheduler::spawn`] started the loop.
    started: std::sync::atomic::AtomicBool,
    settle_done: tokio::sync::watch::Sender<u64>,
}

impl Scheduler {
    pub fn new(store: Store, clock: Arc<dyn Clock>, runner: Arc<dyn Runner>) -> Arc<Self> {
        Arc::new(Scheduler {
            store,
            clock,
            runner,
            wake: Notify::new(),
            runs: Mutex::new(HashMap::new()),
            job_locks: Mutex::new(HashMap::new()),
            tasks: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            http: crate::deliver::client(),
            settle_requested: std::sync::atomic::AtomicU64::new(0),
            recovered: tokio::sync::watch::Sender::new(false),
            started: std::sync::atomic::AtomicBool::new(false),
            settle_done: tokio::sync::watch::Sender::new(0),
        })
    }

    /// Waits until a pass that started after this call has ended (every job due at the
    /// clock's time then is accounted for, its runs started). Tests call it after moving a
    /// `ManualClock`.
    pub async fn settled(&self) {
        use std::sync::atomic::Ordering;
        let wanted = self.settle_requested.fetch_add(1, Ordering::SeqCst) + 1;
        self.wake();
        let mut rx = self.settle_done.subscribe();
        let _ = rx.wait_for(|done| *done >= wanted).await;
    }

    /// Looks at the jobs again now: call after creating, changing or resuming one.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The clock the scheduler reads.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<i64, (String, CancellationToken)>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many runs of `job_id` are going or waiting in this process.
    pub fn runs_of(&self, job_id: &str) -> usize {
        self.runs().values().filter(|(j, _)| j == job_id).count()
    }

    /// Runs job `id` now, by hand, whether or not it is paused: a `manual` occurrence at now
    /// that does not move its schedule.
    pub async fn run_now(self: &Arc<Self>, id: &str) -> Result<CronOccurrence, JobError> {
        if self.shutdown.is_cancelled() {
            return Err(JobError::Invalid("the gateway is shutting down".into()));
        }
        let mut recovered = self.recovered.subscribe();
        // Unless the loop never started (a scheduler used only for runs by hand).
        let started = self.started.load(std::sync::atomic::Ordering::SeqCst);
        tokio::select! {
            () = std::future::ready(()), if !started => {}
            r = recovered.wait_for(|done| *done) => {
                if r.is_err() {
                    return Err(JobError::Invalid("the scheduler is not running".into()));
                }
            }
            () = self.shutdown.cancelled() => {
                return Err(JobError::Invalid("the gateway is shutting down".into()));
            }
        }
        if self.runs_of(id) > MAX_QUEUED_RUNS {
            return Err(JobError::Invalid(format!(
                "{} runs of this job are going or waiting already; stop them or wait",
                self.runs_of(id)
            )));
        }
        let job = self
            .store
            .cron_job(id)
            .await?
            .ok_or_else(|| JobError::NotFound(id.to_owned()))?;
        let occurrence = self
            .store
            .cron_claim_manual(id, self.clock.now().as_millisecond())
            .await?
            .ok_or_else(|| JobError::NotFound(id.to_owned()))?;
        self.start(job, occurrence.clone());
        Ok(occurrence)
    }

    /// Stops the runs of job `id` going now (and those waiting behind them); how many.
    pub fn stop(&self, id: &str) -> usize {
        let runs = self.runs();
        let mut n = 0;
        for (job, token) in runs.values() {
            if job == id && !token.is_cancelled() {
                token.cancel();
                n += 1;
            }
        }
        n
    }

    /// Starts the scheduler's task; it ends when `stop` is cancelled, after its runs have.
    pub fn spawn(self: &Arc<Self>, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        self.started
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let me = self.clone();
        tokio::spawn(async move {
            me.recover().await;
            me.recovered.send_replace(true);
            me.main_loop(&stop).await;
            me.shutdown.cancel();
            me.tasks.close();
            me.tasks.wait().await;
        })
    }

    /// Marks the runs the previous process left `running` as interrupted, retries those whose
    /// job says so, and sends webhook deliveries that were never tried.
    async fn recover(self: &Arc<Self>) {
        let mut attempt = 0;
        let interrupted = loop {
            match self.store.cron_interrupted_on_start().await {
                Ok(v) => break v,
                Err(e) => {
                    attempt += 1;
                    tracing::error!(error = %e, "cannot mark the scheduled runs cut short by the last stop");
                    tokio::time::sleep(STORE_BACKOFF.delay(attempt)).await;
                }
            }
        };
        for o in interrupted {
            tracing::warn!(job = %o.job_id, occurrence = o.id, "a scheduled run was cut short by the gateway's stop");
            let job = match self.store.cron_job(&o.job_id).await {
                Ok(Some(j)) => j,
                Ok(None) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read a scheduled job");
                    continue;
                }
            };
            if !job.retry_interrupted || o.attempt != 1 {
                continue;
            }
            match self
                .store
                .cron_retry(o.id, self.clock.now().as_millisecond())
                .await
            {
                Ok(Some(o)) => {
                    tracing::info!(job = %job.id, occurrence = o.id, "retrying the interrupted run once");
                    self.start(job, o);
                }
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "cannot retry an interrupted run"),
            }
        }
        match self.store.cron_undelivered().await {
            Ok(list) => {
                for (job, o) in list {
                    self.spawn_delivery(job, o);
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot read the undelivered runs"),
        }
    }

    async fn main_loop(self: &Arc<Self>, stop: &CancellationToken) {
        let mut failures = 0;
        loop {
            if stop.is_cancelled() {
                return;
            }
            let requested = self
                .settle_requested
                .load(std::sync::atomic::Ordering::SeqCst);
            let again = match self.pass().await {
                Ok(again) => {
                    failures = 0;
                    again
                }
                Err(e) => {
                    failures += 1;
                    tracing::error!(error = %e, "the scheduler cannot read or record its jobs; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(STORE_BACKOFF.delay(failures)) => {}
                        () = stop.cancelled() => return,
                    }
                    continue;
                }
            };
            if again {
                tokio::task::yield_now().await;
                continue;
            }
            self.settle_done
                .send_modify(|done| *done = (*done).max(requested));
            let next = match self.store.cron_next_wake().await {
                Ok(n) => n,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read when the next job is due");
                    Some(self.clock.now().as_millisecond() + 1000)
                }
            };
            let sleep = async {
                match next.and_then(|t| Timestamp::from_millisecond(t).ok()) {
                    Some(at) => self.clock.sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = sleep => {}
                () = self.wake.notified() => {}
                () = stop.cancelled() => return,
            }
        }
    }

    /// One pass over the due jobs. `true`: there may be more due at once (a full batch, or a
    /// backlog planned in parts).
    async fn pass(self: &Arc<Self>) -> Result<bool, tern_store::StoreError> {
        let now = self.clock.now();
        let due = self.store.cron_due(now.as_millisecond(), BATCH).await?;
        let mut again = due.len() as i64 == BATCH;
        for job in due {
            again |= self.account(job, now).await?;
        }
        Ok(again)
    }

    /// Plans one due job and records each step; starts the claimed runs. `true`: more of its
    /// backlog is due.
    async fn account(
        self: &Arc<Self>,
        job: CronJob,
        now: Timestamp,
    ) -> Result<bool, tern_store::StoreError> {
        let schedule = match Schedule::from_stored(&job.schedule) {
            Ok(s) => s,
            Err(e) => {
                // Left enabled it would be due on every pass.
                tracing::error!(job = %job.id, error = %e, "a scheduled job's schedule is unreadable; the job is paused");
                self.store.set_cron_enabled(&job.id, false, None).await?;
                return Ok(false);
            }
        };
        let queued = self.runs_of(&job.id);
        let in_flight = queued > 0 || self.store.cron_in_flight(&job.id).await?;
        let overlap = match job.overlap {
            CronOverlap::Queue if queued <= MAX_QUEUED_RUNS => Overlap::Queue,
            _ => Overlap::Skip,
        };
        let p = plan::plan(
            &plan::Job {
                schedule: &schedule,
                next_run_at: job
                    .next_run_at
                    .and_then(|t| Timestamp::from_millisecond(t).ok()),
                catch_up: match job.catch_up {
                    CronCatchUp::One => CatchUp::One,
                    CronCatchUp::All => CatchUp::All,
                    CronCatchUp::None => CatchUp::None,
                },
                grace: SignedDuration::from_millis(job.grace_ms),
                overlap,
                in_flight,
            },
            now,
        );
        let at = now.as_millisecond();
        for step in &p.steps {
            let next = step.next_run_at.map(|t| t.as_millisecond());
            let when = step.at.as_millisecond();
            match step.action {
                Action::Run => match self.store.cron_claim(&job.id, when, at, next).await? {
                    Claim::Claimed(o) => self.start(job.clone(), *o),
                    Claim::Taken => {}
                    // Paused, changed or removed since it was read: the next pass sees it.
                    Claim::NotDue => return Ok(false),
                },
                Action::Skip(reason) => {
                    if !self
                        .store
                        .cron_skip(&job.id, when, reason.as_str(), at, next)
                        .await?
                        && self
                            .store
                            .cron_job(&job.id)
                            .await?
                            .is_none_or(|j| !j.enabled || j.next_run_at.is_none_or(|n| n > when))
                    {
                        return Ok(false);
                    }
                    if !matches!(reason, plan::SkipReason::Overlap) {
                        tracing::debug!(job = %job.id, at = %step.at, reason = reason.as_str(), "occurrence skipped");
                    } else {
                        tracing::info!(job = %job.id, at = %step.at, "occurrence skipped: the previous run is still going");
                    }
                }
            }
        }
        Ok(p.more)
    }

    fn job_lock(&self, job_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.job_locks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(job_id.to_owned())
            .or_default()
            .clone()
    }

    /// Starts a claimed run on a task of its own.
    fn start(self: &Arc<Self>, job: CronJob, occurrence: CronOccurrence) {
        let stop = CancellationToken::new();
        self.runs()
            .insert(occurrence.id, (job.id.clone(), stop.clone()));
        let me = self.clone();
        self.tasks.spawn(async move {
            let lock = me.job_lock(&job.id);
            let end = {
                let _one_at_a_time = tokio::select! {
                    g = lock.lock() => Some(g),
                    () = me.shutdown.cancelled() => None,
                };
                if _one_at_a_time.is_none() {
                    RunEnd::CutShort
                } else {
                    let cx = RunContext {
                        stop: stop.clone(),
                        shutdown: me.shutdown.clone(),
                    };
                    me.runner.run(job.clone(), occurrence.clone(), cx).await
                }
            };
            // Before the clean-up below counts who else holds the job's lock.
            drop(lock);
            // No longer in flight before its end is recorded: a pass that reads the end (and
            // plans the next occurrence) must not count it as still going, nor must one
            // during its webhook delivery.
            me.runs().remove(&occurrence.id);
            {
                let mut locks = me.job_locks.lock().unwrap_or_else(|e| e.into_inner());
                if locks
                    .get(&job.id)
                    .is_some_and(|l| Arc::strong_count(l) == 1)
                {
                    locks.remove(&job.id);
                }
            }
            if let RunEnd::Finished { outcome, output, .. } = &end {
                match me
                    .store
                    .cron_finish(occurrence.id, outcome, output.as_deref())
                    .await
                {
                    Ok(_) => {
                        if matches!(job.deliver_to, DeliverTo::Webhook(_))
                            && let Ok(Some(o)) = me.store.cron_occurrence(occurrence.id).await
                        {
                            me.deliver(&job, &o).await;
                        }
                    }
                    Err(e) => {
                        tracing::error!(job = %job.id, occurrence = occurrence.id, error = %e, "cannot record a scheduled run's end");
                    }
                }
            }
            // An overlap plan may have been waiting for this run to end.
            me.wake();
        });
    }

    fn spawn_delivery(self: &Arc<Self>, job: CronJob, o: CronOccurrence) {
        let me = self.clone();
        self.tasks.spawn(async move { me.deliver(&job, &o).await });
    }

    /// Sends a run's result to the job's webhook and records how it went. A shutdown during
    /// the attempts leaves it untried, to be sent at the next start.
    async fn deliver(&self, job: &CronJob, o: &CronOccurrence) {
        let DeliverTo::Webhook(url) = &job.deliver_to else {
            return;
        };
        let result = tokio::select! {
            r = crate::deliver::post(&self.http, url, job, o) => r,
            () = self.shutdown.cancelled() => return,
        };
        let text = match result {
            Ok(()) => "delivered".to_owned(),
            Err(e) => {
                tracing::warn!(job = %job.id, occurrence = o.id, error = %e, "a scheduled run's result could not be delivered to its webhook");
                format!("failed: {e}")
            }
        };
        if let Err(e) = self.store.cron_set_delivery(o.id, &text).await {
            tracing::error!(error = %e, "cannot record a webhook delivery");
        }
    }
}

#[cfg(test)]
mod tests;
