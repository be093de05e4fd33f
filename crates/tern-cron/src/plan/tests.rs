//! The plan at fixed times: nothing due, on time, downtime under each catch-up policy and
//! grace window, overlap, one-shots retired, DST days, backlogs planned in parts, and every
//! occurrence accounted for exactly once.

use jiff::tz::TimeZone;

use super::*;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn hours(h: i64) -> SignedDuration {
    SignedDuration::from_hours(h)
}

/// A schedule created at `created`, in UTC unless it names a zone.
fn schedule(spec: &str, created: &str) -> Schedule {
    Schedule::parse(spec, ts(created), &TimeZone::UTC).unwrap()
}

fn job<'a>(s: &'a Schedule, next: &str, catch_up: CatchUp, grace: SignedDuration) -> Job<'a> {
    Job {
        schedule: s,
        next_run_at: Some(ts(next)),
        catch_up,
        grace,
        overlap: Overlap::Skip,
        in_flight: false,
    }
}

/// The steps as (time, "run" | reason), for readable assertions.
fn steps(p: &Plan) -> Vec<(String, &'static str)> {
    p.steps
        .iter()
        .map(|s| {
            let what = match s.action {
                Action::Run => "run",
                Action::Skip(r) => r.as_str(),
            };
            (s.at.to_string(), what)
        })
        .collect()
}

/// Each step's `next_run_at` is the following step's time, and the last one's is the plan's.
fn assert_chained(p: &Plan) {
    for pair in p.steps.windows(2) {
        assert_eq!(pair[0].next_run_at, Some(pair[1].at), "a gap in the chain");
    }
    if let Some(last) = p.steps.last() {
        assert_eq!(last.next_run_at, p.next_run_at);
    }
}

const MISSED: &str = "missed: gateway down";
const GRACE: &str = "missed: outside grace window";
const BOUND: &str = "missed: beyond the catch-up bound (100 runs)";
const OVERLAP: &str = "overlap: previous run still going";

#[test]
fn nothing_due_plans_nothing_and_keeps_next_run_at() {
    let s = schedule("every 1h", "2026-11-26T09:00:00Z");
    let j = job(&s, "2026-11-26T10:00:00Z", CatchUp::One, hours(1));
    let p = plan(&j, ts("2026-11-26T09:59:59Z"));
    assert!(p.steps.is_empty());
    assert_eq!(p.next_run_at, Some(ts("2026-11-26T10:00:00Z")));
    assert!(!p.retires() && !p.more);
}

#[test]
fn an_occurrence_on_time_runs_and_next_run_at_moves_to_the_next() {
    let s = schedule("every 1h", "2026-11-26T09:00:00Z");
    for policy in [CatchUp::One, CatchUp::All, CatchUp::None] {
        let j = job(&s, "2026-11-26T10:00:00Z", policy, SignedDuration::ZERO);
        // Exactly at the time, and at the edge of on-time.
        for now in ["2026-11-26T10:00:00Z", "2026-11-26T10:01:00Z"] {
            let p = plan(&j, ts(now));
            assert_eq!(
                steps(&p),
                [("2026-11-26T10:00:00Z".into(), "run")],
                "{policy:?}"
            );
            assert_eq!(p.next_run_at, Some(ts("2026-11-26T11:00:00Z")));
            assert_chained(&p);
        }
    }
}

#[test]
fn one_after_downtime_runs_the_latest_missed_within_grace_and_skips_the_rest() {
    // Hourly, down from 09:30 to 15:30, grace 2 h.
    let s = schedule("every 1h", "2026-11-26T09:00:00Z");
    let j = job(&s, "2026-11-26T10:00:00Z", CatchUp::One, hours(2));
    let p = plan(&j, ts("2026-11-26T15:30:00Z"));
    assert_eq!(
        steps(&p),
        [
            ("2026-11-26T10:00:00Z".into(), GRACE),
            ("2026-11-26T11:00:00Z".into(), GRACE),
            ("2026-11-26T12:00:00Z".into(), GRACE),
            ("2026-11-26T13:00:00Z".into(), GRACE),
            ("2026-11-26T14:00:00Z".into(), MISSED),
            ("2026-11-26T15:00:00Z".into(), "run"),
        ]
    );
    assert_eq!(p.next_run_at, Some(ts("2026-11-26T16:00:00Z")));
    assert_chained(&p);
}

#[test]
fn one_with_an_occurrence_on_time_runs_that_one_only() {
    let s = schedule("every 1h", "2026-11-26T09:00:00Z");
    let j = job(&s, "2026-11-26T13:00:00Z", CatchUp::One, hours(3));
    let p = plan(&j, ts("2026-11-26T15:00:30Z"));
    assert_eq!(
        steps(&p),
        [
            ("2026-11-26T13:00:00Z".into(), MISSED),
            ("2026-11-26T14:00:00Z".into(), MISSED),
            ("2026-11-26T15:00:00Z".into(), "run"),
        ]
    );
}

#[test]
fn one_with_every_missed_occurrence_outside_grace_runs_nothing() {
    // A daily job missed by 5 hours with a 1-hour grace window waits for tomorrow.
    let s = schedule("0 9 * * *", "2026-11-25T12:00:00Z");
    let j = job(&s, "2026-11-26T09:00:00Z", CatchUp::One, hours(1));
    let p = plan(&j, ts("2026-11-26T14:00:00Z"));
    assert_eq!(steps(&p), [("2026-11-26T09:00:00Z".into(), GRACE)]);
    assert_eq!(p.next_run_at, Some(ts("2026-11-27T09:00:00Z")));
}

#[test]
fn none_skips_every_missed_occurrence_but_runs_one_on_time() {
    let s = schedule("every 1h", "2026-11-26T09:00:00Z");
    let j = job(&s, "2026-11-26T12:00:00Z", CatchUp::None, hours(2));
    let p = plan(&j, ts("2026-11-26T14:30:00Z"));
    assert_eq!(
        steps(&p),
        [
            ("2026-11-26T12:00:00Z".into(), GRACE),
            ("2026-11-26T13:00:00Z".into(), MISSED),
            ("2026-11-26T14:00:00Z".into(), MISSED),
        ]
    );
    assert_eq!(p.runs().count(), 0);
    let p = plan(&j, ts("2026-11-26T14:00:10Z"));
    assert_eq!(
        steps(&p),
        [
            ("2026-11-26T12:00:00Z".into(), GRACE),
            ("2026-11-26T13:00:00Z".into(), MISSED),
            ("2026-11-26T14:00:00Z".into(), "run"),
        ]
    );
}

#[test]
fn all_runs_every_missed_occurrence_within_grace_in_order() {
    let s = schedule("every 1h", "2026-11-26T09:00:00Z");
    let j = job(&s, "2026-11-26T10:00:00Z", CatchUp::All, hours(3));
    let p = plan(&j, ts("2026-11-26T14:30:00Z"));
    assert_eq!(
        steps(&p),
        [
            ("2026-11-26T10:00:00Z".into(), GRACE),
            ("2026-11-26T11:00:00Z".into(), GRACE),
            ("2026-11-26T12:00:00Z".into(), "run"),
            ("2026-11-26T13:00:00Z".into(), "run"),
            ("2026-11-26T14:00:00Z".into(), "run"),
        ]
    );
    assert_chained(&p);
}

#[test]
fn all_is_bounded_to_the_latest_runs() {
    // Every minute, down three hours, a day's grace: 179 missed and 11:59 on time; the
    // latest 100 missed run, and the one on time.
    let s = schedule("* * * * *", "2026-11-26T08:59:30Z");
    let j = job(&s, "2026-11-26T09:00:00Z", CatchUp::All, hours(24));
    let p = plan(&j, ts("2026-11-26T11:59:30Z"));
    assert_eq!(p.steps.len(), 180);
    assert_eq!(p.runs().count(), MAX_CATCH_UP_RUNS + 1);
    let first_run = p.runs().next().unwrap();
    assert_eq!(first_run, ts("2026-11-26T10:19:00Z"));
    assert!(
        p.steps[..79]
            .iter()
            .all(|s| s.action == Action::Skip(SkipReason::CatchUpBound))
    );
    assert_eq!(steps(&p)[0].1, BOUND);
    assert_chained(&p);
}

#[test]
fn overlap_skip_skips_what_would_run_while_a_run_is_going_and_queue_runs_it() {
    let s = schedule("every 1h", "2026-11-26T09:00:00Z");
    let mut j = job(&s, "2026-11-26T10:00:00Z", CatchUp::One, hours(1));
    j.in_flight = true;
    let p = plan(&j, ts("2026-11-26T10:00:05Z"));
    assert_eq!(steps(&p), [("2026-11-26T10:00:00Z".into(), OVERLAP)]);
    assert_eq!(p.next_run_at, Some(ts("2026-11-26T11:00:00Z")));
    j.overlap = Overlap::Queue;
    let p = plan(&j, ts("2026-11-26T10:00:05Z"));
    assert_eq!(steps(&p), [("2026-11-26T10:00:00Z".into(), "run")]);
    // Nothing running: skip has nothing to skip.
    j.overlap = Overlap::Skip;
    j.in_flight = false;
    assert_eq!(plan(&j, ts("2026-11-26T10:00:05Z")).runs().count(), 1);
}

#[test]
fn catch_up_runs_of_one_plan_do_not_overlap_each_other() {
    let s = schedule("every 1h", "2026-11-26T09:00:00Z");
    let j = job(&s, "2026-11-26T10:00:00Z", CatchUp::All, hours(5));
    let p = plan(&j, ts("2026-11-26T12:00:00Z"));
    assert_eq!(p.runs().count(), 3);
}

#[test]
fn a_one_shot_runs_once_and_is_retired() {
    let s = schedule("30m", "2026-11-26T09:00:00Z");
    let at = "2026-11-26T09:30:00Z";
    let j = job(&s, at, CatchUp::One, hours(1));
    let early = plan(&j, ts("2026-11-26T09:29:00Z"));
    assert!(early.steps.is_empty() && !early.retires());
    let p = plan(&j, ts("2026-11-26T09:30:01Z"));
    assert_eq!(steps(&p), [(at.into(), "run")]);
    assert_eq!(p.steps[0].next_run_at, None);
    assert!(p.retires());
    // Once retired there is nothing left to plan, however late it is asked.
    let retired = Job {
        next_run_at: p.next_run_at,
        ..j
    };
    let again = plan(&retired, ts("2026-11-27T00:00:00Z"));
    assert!(again.steps.is_empty() && !again.retires());
}

#[test]
fn a_one_shot_missed_beyond_grace_is_skipped_and_retired() {
    let s = schedule("2026-11-26T12:00:00Z", "2026-11-26T09:00:00Z");
    for policy in [CatchUp::One, CatchUp::All, CatchUp::None] {
        let j = job(&s, "2026-11-26T12:00:00Z", policy, hours(1));
        let p = plan(&j, ts("2026-11-26T15:00:00Z"));
        assert_eq!(
            steps(&p),
            [("2026-11-26T12:00:00Z".into(), GRACE)],
            "{policy:?}"
        );
        assert!(p.retires());
    }
    // Within grace: `one` and `all` catch it up, `none` does not.
    let run = |policy| {
        let j = job(&s, "2026-11-26T12:00:00Z", policy, hours(4));
        plan(&j, ts("2026-11-26T15:00:00Z")).runs().count()
    };
    assert_eq!(
        (run(CatchUp::One), run(CatchUp::All), run(CatchUp::None)),
        (1, 1, 0)
    );
}

#[test]
fn downtime_across_the_spring_forward_day_accounts_each_day_once() {
    // 02:30 Berlin does not exist on 2026-03-29: that day's run is 03:30 CEST.
    let s = schedule("TZ=Europe/Berlin 30 2 * * *", "2026-03-27T12:00:00Z");
    let j = job(&s, "2026-03-28T01:30:00Z", CatchUp::All, hours(96));
    let p = plan(&j, ts("2026-03-30T12:00:00Z"));
    assert_eq!(
        steps(&p),
        [
            ("2026-03-28T01:30:00Z".into(), "run"),
            ("2026-03-29T01:30:00Z".into(), "run"),
            ("2026-03-30T00:30:00Z".into(), "run"),
        ]
    );
    assert_eq!(p.next_run_at, Some(ts("2026-03-31T00:30:00Z")));
}

#[test]
fn downtime_across_the_fall_back_day_runs_an_hourly_job_24_times_that_day() {
    let s = schedule("TZ=Europe/Berlin 0 * * * *", "2026-10-24T21:30:00Z");
    // The whole of 2026-10-25 in Berlin (25 hours: 22:00Z to 23:00Z the next day) down.
    let j = job(&s, "2026-10-24T22:00:00Z", CatchUp::All, hours(48));
    let p = plan(&j, ts("2026-10-25T22:59:00Z"));
    assert_eq!(p.steps.len(), 24, "{:?}", steps(&p));
    assert_eq!(p.runs().count(), 24);
    let times: std::collections::BTreeSet<_> = p.steps.iter().map(|s| s.at).collect();
    assert_eq!(times.len(), 24, "an occurrence twice");
    assert_chained(&p);
}

#[test]
fn a_backlog_longer_than_a_plan_is_planned_in_parts_without_gaps() {
    // Every second, down four hours: 14,400 occurrences.
    let s = schedule("every 1s", "2026-11-26T08:00:00Z");
    let start = ts("2026-11-26T08:00:01Z");
    let now = ts("2026-11-26T12:00:00Z");
    let mut j = Job {
        schedule: &s,
        next_run_at: Some(start),
        catch_up: CatchUp::One,
        grace: hours(1),
        overlap: Overlap::Skip,
        in_flight: false,
    };
    let mut all = Vec::new();
    let mut parts = 0;
    loop {
        let p = plan(&j, now);
        assert!(p.steps.len() <= MAX_STEPS);
        assert_chained(&p);
        if let (Some(prev), Some(first)) = (all.last(), p.steps.first()) {
            let prev: &Step = prev;
            assert_eq!(prev.next_run_at, Some(first.at));
        }
        all.extend(p.steps.iter().copied());
        parts += 1;
        j.next_run_at = p.next_run_at;
        if !p.more {
            break;
        }
    }
    assert_eq!(parts, 2);
    let expected: Vec<Timestamp> = std::iter::once(start)
        .chain(s.occurrences(start, now))
        .collect();
    assert_eq!(all.len(), 14_400);
    assert_eq!(all.iter().map(|s| s.at).collect::<Vec<_>>(), expected);
    let runs: Vec<_> = all.iter().filter(|s| s.action == Action::Run).collect();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].at, now);
    // The hour of grace (inclusive): 11:00:00 to 11:59:59 missed within it, the rest outside.
    let in_grace = all
        .iter()
        .filter(|s| s.action == Action::Skip(SkipReason::Missed))
        .count();
    assert_eq!(in_grace, 3_600);
}

#[test]
fn every_due_occurrence_gets_exactly_one_step_under_every_policy() {
    let schedules = [
        schedule("every 7m", "2026-11-26T00:00:00Z"),
        schedule("TZ=America/New_York */20 1-3 * * *", "2026-10-31T00:00:00Z"),
        schedule("every 90s", "2026-11-26T00:00:00Z"),
    ];
    for s in &schedules {
        let first = s
            .next_after(ts("2026-11-01T00:00:00Z").max(created(s)))
            .unwrap();
        for down_hours in [0, 1, 5, 30] {
            let now = first.checked_add(hours(down_hours)).unwrap();
            for catch_up in [CatchUp::One, CatchUp::All, CatchUp::None] {
                for (overlap, in_flight) in [
                    (Overlap::Skip, false),
                    (Overlap::Skip, true),
                    (Overlap::Queue, true),
                ] {
                    let j = Job {
                        schedule: s,
                        next_run_at: Some(first),
                        catch_up,
                        grace: hours(2),
                        overlap,
                        in_flight,
                    };
                    let p = plan(&j, now);
                    let expected: Vec<Timestamp> = std::iter::once(first)
                        .chain(s.occurrences(first, now))
                        .collect();
                    let got: Vec<Timestamp> = p.steps.iter().map(|s| s.at).collect();
                    assert_eq!(got, expected, "{s} {down_hours}h {catch_up:?}");
                    assert_chained(&p);
                    assert_eq!(p.next_run_at, s.next_after(now));
                    if in_flight && overlap == Overlap::Skip {
                        assert_eq!(p.runs().count(), 0);
                    }
                }
            }
        }
    }
}

fn created(s: &Schedule) -> Timestamp {
    // The schedules above were created before 2026-11-01 or on 2026-11-26.
    match s.kind() {
        crate::ScheduleKind::Every { anchor, .. } => *anchor,
        _ => ts("2026-10-31T00:00:00Z"),
    }
}

#[test]
fn an_anchor_with_nanoseconds_is_planned_in_the_stores_whole_milliseconds_once_each() {
    // Created at an instant with sub-millisecond digits (Timestamp::now() in the gateway);
    // the store keeps next_run_at in milliseconds.
    let s = Schedule::parse(
        "every 10s",
        ts("2026-11-26T09:00:00.123456789Z"),
        &TimeZone::UTC,
    )
    .unwrap();
    let exact = s.next_after(ts("2026-11-26T09:00:00.2Z")).unwrap();
    let stored = Timestamp::from_millisecond(exact.as_millisecond()).unwrap();
    assert_ne!(exact, stored);
    let j = Job {
        schedule: &s,
        next_run_at: Some(stored),
        catch_up: CatchUp::All,
        grace: hours(1),
        overlap: Overlap::Skip,
        in_flight: false,
    };
    let p = plan(&j, ts("2026-11-26T09:00:30.5Z"));
    assert_eq!(
        steps(&p),
        [
            ("2026-11-26T09:00:10.123Z".into(), "run"),
            ("2026-11-26T09:00:20.123Z".into(), "run"),
            ("2026-11-26T09:00:30.123Z".into(), "run"),
        ]
    );
    assert_eq!(p.next_run_at, Some(ts("2026-11-26T09:00:40.123Z")));
    assert_chained(&p);
}
