//! What to do about a job's due occurrences: pure logic, no I/O, so every policy is tested
//! with fixed times. The scheduler calls [`plan`] for each job whose `next_run_at` has come,
//! then records each [`Step`] in the store in order (a claim for a run, a skip with its
//! reason), each step moving `next_run_at` just past its own occurrence: a crash between two
//! steps leaves the rest due, to be planned again, never dropped.
//!
//! # The rules
//!
//! Every occurrence from the job's `next_run_at` up to `now` is **due**, and each gets exactly
//! one step, run or skip; none is silently dropped.
//!
//! - The latest due occurrence is **on time** when it is at most [`ON_TIME`] old: the
//!   scheduler's own lateness (a wake-up, a busy store), not downtime. It runs, whatever the
//!   catch-up policy.
//! - Every other due occurrence was **missed** (the gateway was down or stalled). Those older
//!   than the job's grace window are skipped, `outside grace window`. Within it, the catch-up
//!   policy decides: `none` runs none of them (`missed: gateway down`); `one` runs the latest
//!   if nothing runs on time (a single catch-up run), else none; `all` runs each, up to the
//!   latest [`MAX_CATCH_UP_RUNS`] (older ones: `missed: beyond the catch-up bound`).
//! - **Overlap**: when a run of the job is still going as the plan is made, each run the plan
//!   would start is skipped under `skip` (`overlap: previous run still going`), and left a run
//!   under `queue` (the scheduler queues it behind the running turn). The catch-up runs of one
//!   plan never count as overlapping each other: the policy asked for them, one after another.
//! - A one-shot whose occurrence got its step has no next one: the job is **retired**.
//!
//! Every time in a plan is a whole millisecond, as the store keeps them: an interval anchored
//! at an instant with nanoseconds would otherwise see its stored (truncated) `next_run_at` as
//! a different occurrence from the schedule's own, and plan it twice.
//!
//! # Bounds
//!
//! A plan holds at most [`MAX_STEPS`] steps. A longer backlog (an every-second job after a
//! week down) is planned in parts: the first part skips its oldest occurrences (none of which
//! can be on time or among the latest `MAX_CATCH_UP_RUNS`), sets `next_run_at` to the first
//! occurrence it did not account for, and says `more`; the job is still due, so the scheduler
//! plans it again. `all` runs at most `MAX_CATCH_UP_RUNS` per backlog.

use std::fmt;

use jiff::{SignedDuration, Timestamp};

use crate::Schedule;

/// How old the latest due occurrence may be and still count as on time rather than missed.
pub const ON_TIME: SignedDuration = SignedDuration::from_secs(60);

/// The most catch-up runs `all` starts for one backlog (besides the one on time): the latest
/// missed ones run, older ones are skipped. A job that fires every minute and was down a day would otherwise queue 1,440 turns.
pub const MAX_CATCH_UP_RUNS: usize = 100;

/// The most steps one plan holds; a longer backlog is planned in parts (see the module docs).
pub const MAX_STEPS: usize = 10_000;

/// What to do with occurrences missed while the gateway was down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatchUp {
    /// A single catch-up run (the latest missed occurrence within the grace window).
    #[default]
    One,
    /// Every missed occurrence within the grace window (at most [`MAX_CATCH_UP_RUNS`]).
    All,
    /// None: missed occurrences are skipped.
    None,
}

/// What to do with an occurrence that comes while the previous run is still going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overlap {
    /// Skip it (recorded with the reason).
    #[default]
    Skip,
    /// Run it after the running one.
    Queue,
}

/// Why an occurrence was not run; its text is what `tern cron history` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// Missed while the gateway was down, and the catch-up policy does not run it.
    Missed,
    /// Missed, and older than the job's grace window.
    OutsideGrace,
    /// Missed, within the grace window, but older than the latest [`MAX_CATCH_UP_RUNS`].
    CatchUpBound,
    /// A run of the job was still going (overlap policy `skip`).
    Overlap,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Missed => "missed: gateway down",
            SkipReason::OutsideGrace => "missed: outside grace window",
            SkipReason::CatchUpBound => "missed: beyond the catch-up bound (100 runs)",
            SkipReason::Overlap => "overlap: previous run still going",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one step does with its occurrence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Run,
    Skip(SkipReason),
}

/// One occurrence accounted for: the action, and the `next_run_at` to record with it (the
/// occurrence after this one; `None`: there is none, a one-shot is retired).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub at: Timestamp,
    pub action: Action,
    pub next_run_at: Option<Timestamp>,
}

/// What the scheduler needs to know of a job to plan it.
#[derive(Debug, Clone, Copy)]
pub struct Job<'a> {
    pub schedule: &'a Schedule,
    /// The next occurrence not yet accounted for; `None`: retired.
    pub next_run_at: Option<Timestamp>,
    pub catch_up: CatchUp,
    /// How late a missed occurrence may still be caught up.
    pub grace: SignedDuration,
    pub overlap: Overlap,
    /// Whether a run of the job is going now.
    pub in_flight: bool,
}

/// The steps for a job's due occurrences, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub steps: Vec<Step>,
    /// The job's `next_run_at` after the last step (unchanged when nothing was due);
    /// `None`: retired.
    pub next_run_at: Option<Timestamp>,
    /// The backlog was longer than [`MAX_STEPS`]: more occurrences are due; plan again.
    pub more: bool,
}

impl Plan {
    /// Whether the job has no occurrence left (a one-shot that got its step).
    pub fn retires(&self) -> bool {
        self.next_run_at.is_none() && !self.steps.is_empty()
    }

    /// The occurrences the plan runs.
    pub fn runs(&self) -> impl Iterator<Item = Timestamp> + '_ {
        self.steps
            .iter()
            .filter(|s| s.action == Action::Run)
            .map(|s| s.at)
    }
}

/// Plans `job`'s occurrences due by `now` (see the module docs for the rules).
pub fn plan(job: &Job<'_>, now: Timestamp) -> Plan {
    let Some(first) = job.next_run_at.map(whole_ms).filter(|t| *t <= now) else {
        return Plan {
            steps: Vec::new(),
            next_run_at: job.next_run_at,
            more: false,
        };
    };
    // The due occurrences, at most MAX_STEPS + 1 of them (the extra one says "more").
    let mut due = vec![first];
    let mut after = next_after(job.schedule, first);
    while let Some(t) = after.filter(|t| *t <= now) {
        if due.len() > MAX_STEPS {
            break;
        }
        due.push(t);
        after = next_after(job.schedule, t);
    }
    if due.len() > MAX_STEPS {
        // Too long to classify at once: account for the oldest part only. None of it can be
        // on time or among the latest MAX_CATCH_UP_RUNS, since more than that follow it.
        let part = MAX_STEPS - MAX_CATCH_UP_RUNS;
        let steps = (0..part)
            .map(|i| Step {
                at: due[i],
                action: Action::Skip(missed_reason(job, due[i], now)),
                next_run_at: Some(due[i + 1]),
            })
            .collect();
        return Plan {
            steps,
            next_run_at: Some(due[part]),
            more: true,
        };
    }
    let last = due.len() - 1;
    let on_time = now.duration_since(due[last]) <= ON_TIME;
    // Which of the missed (not on time, within grace) occurrences the policy runs.
    let missed_in_grace: Vec<usize> = (0..due.len())
        .filter(|&i| !(i == last && on_time) && within_grace(job, due[i], now))
        .collect();
    let catch_up: &[usize] = match job.catch_up {
        CatchUp::None => &[],
        CatchUp::One if on_time => &[],
        CatchUp::One => missed_in_grace
            .last()
            .map(std::slice::from_ref)
            .unwrap_or(&[]),
        CatchUp::All => &missed_in_grace[missed_in_grace.len().saturating_sub(MAX_CATCH_UP_RUNS)..],
    };
    let steps = due
        .iter()
        .enumerate()
        .map(|(i, &at)| {
            let runs = (i == last && on_time) || catch_up.contains(&i);
            let action = if !runs {
                Action::Skip(missed_reason(job, at, now))
            } else if job.in_flight && job.overlap == Overlap::Skip {
                Action::Skip(SkipReason::Overlap)
            } else {
                Action::Run
            };
            let next_run_at = due.get(i + 1).copied().or(after);
            Step {
                at,
                action,
                next_run_at,
            }
        })
        .collect();
    Plan {
        steps,
        next_run_at: after,
        more: false,
    }
}

/// Times in whole milliseconds, as the store keeps them: an interval anchored at its creation
/// instant has occurrences with nanoseconds, which the stored `next_run_at` has lost.
fn whole_ms(t: Timestamp) -> Timestamp {
    Timestamp::from_millisecond(t.as_millisecond()).unwrap_or(t)
}

/// The first occurrence after the millisecond `t` (whole) names, in whole milliseconds: an
/// occurrence that `t` is the truncation of is `t` itself, not the next one.
fn next_after(schedule: &Schedule, t: Timestamp) -> Option<Timestamp> {
    let end_of_ms = t
        .checked_add(SignedDuration::from_nanos(999_999))
        .unwrap_or(t);
    schedule.next_after(end_of_ms).map(whole_ms)
}

fn within_grace(job: &Job<'_>, at: Timestamp, now: Timestamp) -> bool {
    now.duration_since(at) <= job.grace
}

/// Why a missed occurrence that does not run is skipped.
fn missed_reason(job: &Job<'_>, at: Timestamp, now: Timestamp) -> SkipReason {
    if !within_grace(job, at, now) {
        SkipReason::OutsideGrace
    } else if job.catch_up == CatchUp::All {
        // `all` runs every missed occurrence within grace but the oldest beyond its bound.
        SkipReason::CatchUpBound
    } else {
        SkipReason::Missed
    }
}

#[cfg(test)]
mod tests;
