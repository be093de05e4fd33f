//! Each kind, the errors, DST both ways, day-of-week 0/7, aliases, catch-up windows, storage.

use super::*;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn tz(name: &str) -> TimeZone {
    zone(name).unwrap()
}

/// A Thursday, 10:00 UTC.
const NOW: &str = "2026-11-26T10:00:00Z";

fn parse(text: &str) -> Result<Schedule, ScheduleError> {
    Schedule::parse(text, ts(NOW), &TimeZone::UTC)
}

fn parse_in(text: &str, zone: &str) -> Schedule {
    Schedule::parse(text, ts(NOW), &tz(zone)).unwrap()
}

fn all(s: &Schedule, from: &str, to: &str) -> Vec<String> {
    s.occurrences(ts(from), ts(to))
        .map(|t| t.to_string())
        .collect()
}

fn err(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

#[test]
fn delays_run_once_after_the_delay() {
    for (text, at) in [
        ("30m", "2026-11-26T10:30:00Z"),
        ("in 2h", "2026-11-26T12:00:00Z"),
        ("90s", "2026-11-26T10:01:30Z"),
        ("In 1h 30m", "2026-11-26T11:30:00Z"),
    ] {
        let s = parse(text).unwrap();
        assert!(s.is_one_shot(), "{text}");
        assert_eq!(s.next_after(ts(NOW)), Some(ts(at)), "{text}");
        assert_eq!(s.next_after(ts(at)), None, "{text}: fired twice");
    }
}

#[test]
fn intervals_are_anchored_at_creation_and_do_not_drift() {
    let s = parse("every 2h").unwrap();
    assert!(!s.is_one_shot());
    assert_eq!(s.next_after(ts(NOW)), Some(ts("2026-11-26T12:00:00Z")));
    // Asked late (a slow run, a restart), the next one is still on the anchor's grid.
    assert_eq!(
        s.next_after(ts("2026-11-26T12:47:13Z")),
        Some(ts("2026-11-26T14:00:00Z"))
    );
    assert_eq!(
        s.next_after(ts("2026-11-26T14:00:00Z")),
        Some(ts("2026-11-26T16:00:00Z"))
    );
    let fast = parse("every 5s").unwrap();
    assert_eq!(fast.next_after(ts(NOW)), Some(ts("2026-11-26T10:00:05Z")));
}

#[test]
fn intervals_are_absolute_time_across_dst() {
    // Europe/Berlin springs forward on 2027-03-28 at 02:00; a 1h interval stays 3600 s apart.
    let created = ts("2027-03-27T23:30:00Z");
    let s = Schedule::parse("every 1h", created, &tz("Europe/Berlin")).unwrap();
    let got: Vec<_> = s.occurrences(created, ts("2027-03-28T03:30:00Z")).collect();
    assert_eq!(got.len(), 4);
    for pair in got.windows(2) {
        assert_eq!(
            pair[1].duration_since(pair[0]),
            SignedDuration::from_hours(1)
        );
    }
}

#[test]
fn timestamps_rfc3339_and_civil_in_the_default_zone() {
    let s = parse("2026-12-01T09:00:00+01:00").unwrap();
    assert_eq!(s.next_after(ts(NOW)), Some(ts("2026-12-01T08:00:00Z")));
    let paris = parse_in("2026-12-01 09:00", "Europe/Paris");
    assert_eq!(paris.next_after(ts(NOW)), Some(ts("2026-12-01T08:00:00Z")));
    let named = parse("2026-12-01T09:00[Europe/Paris]").unwrap();
    assert_eq!(named.next_after(ts(NOW)), Some(ts("2026-12-01T08:00:00Z")));
    // A civil time in the spring gap moves forward by the gap, as a cron time does.
    let gap = parse_in("2027-03-28 02:30", "Europe/Berlin");
    assert_eq!(gap.next_after(ts(NOW)), Some(ts("2027-03-28T01:30:00Z")));
    let utc = parse("2026-12-01T09:00").unwrap();
    assert_eq!(utc.next_after(ts(NOW)), Some(ts("2026-12-01T09:00:00Z")));
    assert_eq!(utc.next_after(ts("2026-12-01T09:00:00Z")), None);
}

#[test]
fn a_time_already_past_is_an_error() {
    let e = parse("2026-11-26T09:59:59Z").unwrap_err();
    assert!(matches!(e, ScheduleError::InPast { .. }), "{e:?}");
    assert!(e.to_string().contains("already past"), "{e}");
    assert!(matches!(
        parse("2020-01-01 09:00"),
        Err(ScheduleError::InPast { .. })
    ));
}

#[test]
fn cron_weekdays_at_nine() {
    let s = parse("0 9 * * 1-5").unwrap();
    // Thursday 26th after 10:00 → Friday 27th, then Monday 30th (the weekend skipped).
    assert_eq!(
        all(&s, NOW, "2026-11-30T12:00:00Z"),
        ["2026-11-27T09:00:00Z", "2026-11-30T09:00:00Z"]
    );
}

#[test]
fn cron_names_steps_lists() {
    let s = parse("*/20 8-9 * JAN,jul MON-wed").unwrap();
    // 2027-01-04 is a Monday.
    assert_eq!(s.next_after(ts(NOW)), Some(ts("2027-01-04T08:00:00Z")));
    assert_eq!(
        all(&s, "2027-01-04T08:00:00Z", "2027-01-04T09:59:00Z"),
        [
            "2027-01-04T08:20:00Z",
            "2027-01-04T08:40:00Z",
            "2027-01-04T09:00:00Z",
            "2027-01-04T09:20:00Z",
            "2027-01-04T09:40:00Z"
        ]
    );
}

#[test]
fn cron_day_of_week_0_and_7_are_both_sunday() {
    // 2026-11-29 is a Sunday.
    for text in ["0 12 * * 0", "0 12 * * 7", "0 12 * * SUN", "0 12 * * 5-7"] {
        let s = parse(text).unwrap();
        let got = all(&s, NOW, "2026-12-01T00:00:00Z");
        assert!(
            got.contains(&"2026-11-29T12:00:00Z".to_owned()),
            "{text}: {got:?}"
        );
        assert!(
            !got.contains(&"2026-11-30T12:00:00Z".to_owned()),
            "{text}: {got:?}"
        );
    }
    assert_eq!(
        all(&parse("0 12 * * 5-7").unwrap(), NOW, "2026-12-01T00:00:00Z"),
        [
            "2026-11-27T12:00:00Z",
            "2026-11-28T12:00:00Z",
            "2026-11-29T12:00:00Z"
        ]
    );
}

#[test]
fn cron_with_both_day_fields_runs_on_either() {
    // crontab(5): the 1st of the month, or any Monday.
    let s = parse("0 0 1 * MON").unwrap();
    assert_eq!(
        all(&s, NOW, "2026-12-08T00:00:00Z"),
        [
            "2026-11-30T00:00:00Z",
            "2026-12-01T00:00:00Z",
            "2026-12-07T00:00:00Z"
        ]
    );
    // With one of them `*`, both must match: Mondays only.
    let s = parse("0 0 * * MON").unwrap();
    assert_eq!(
        all(&s, NOW, "2026-12-08T00:00:00Z"),
        ["2026-11-30T00:00:00Z", "2026-12-07T00:00:00Z"]
    );
}

#[test]
fn cron_aliases() {
    for (alias, expect) in [
        ("@hourly", "2026-11-26T11:00:00Z"),
        ("@daily", "2026-11-27T00:00:00Z"),
        ("@midnight", "2026-11-27T00:00:00Z"),
        ("@weekly", "2026-11-29T00:00:00Z"),
        ("@monthly", "2026-12-01T00:00:00Z"),
        ("@yearly", "2027-01-01T00:00:00Z"),
        ("@annually", "2027-01-01T00:00:00Z"),
    ] {
        assert_eq!(
            parse(alias).unwrap().next_after(ts(NOW)),
            Some(ts(expect)),
            "{alias}"
        );
    }
}

#[test]
fn cron_time_zone_prefix_and_default_zone() {
    let s = parse("TZ=Europe/Paris 0 9 * * *").unwrap();
    assert_eq!(s.next_after(ts(NOW)), Some(ts("2026-11-27T08:00:00Z")));
    let s = parse("CRON_TZ=America/New_York 0 9 * * *").unwrap();
    assert_eq!(s.next_after(ts(NOW)), Some(ts("2026-11-26T14:00:00Z")));
    let s = parse_in("0 9 * * *", "Asia/Tokyo");
    assert_eq!(s.next_after(ts(NOW)), Some(ts("2026-11-27T00:00:00Z")));
    // Leap day: found however far ahead (2028).
    let s = parse("0 0 29 2 *").unwrap();
    assert_eq!(s.next_after(ts(NOW)), Some(ts("2028-02-29T00:00:00Z")));
}

#[test]
fn dst_spring_forward_a_missing_time_runs_once_shifted_forward() {
    // Europe/Berlin, 2027-03-28: 02:00 CET → 03:00 CEST; 02:30 does not exist.
    let s = parse_in("30 2 * * *", "Europe/Berlin");
    assert_eq!(
        all(&s, "2027-03-26T12:00:00Z", "2027-03-29T12:00:00Z"),
        [
            "2027-03-27T01:30:00Z", // 02:30 CET
            "2027-03-28T01:30:00Z", // 03:30 CEST, the gap's shift
            "2027-03-29T00:30:00Z", // 02:30 CEST
        ]
    );
    // A job at both 02:30 and 03:30 runs once at 03:30 that day, not twice.
    let s = parse_in("30 2,3 * * *", "Europe/Berlin");
    assert_eq!(
        all(&s, "2027-03-27T23:00:00Z", "2027-03-28T12:00:00Z"),
        ["2027-03-28T01:30:00Z"]
    );
}

#[test]
fn dst_fall_back_a_repeated_time_runs_once_the_first() {
    // America/New_York, 2026-11-01: 02:00 EDT → 01:00 EST; 01:30 occurs twice.
    let s = parse_in("30 1 * * *", "America/New_York");
    assert_eq!(
        all(&s, "2026-10-31T12:00:00Z", "2026-11-02T12:00:00Z"),
        [
            "2026-11-01T05:30:00Z", // 01:30 EDT, the first; not 06:30Z (EST) too
            "2026-11-02T06:30:00Z", // 01:30 EST
        ]
    );
    // Asked between the two 01:30s, it does not run the second one.
    assert_eq!(
        s.next_after(ts("2026-11-01T05:45:00Z")),
        Some(ts("2026-11-02T06:30:00Z"))
    );
    // An hourly job has no extra run in the repeated hour: 24 wall-clock hours, 24 runs,
    // though the day is 25 hours long.
    let hourly = parse_in("0 * * * *", "America/New_York");
    let day = all(&hourly, "2026-11-01T03:59:00Z", "2026-11-02T04:59:00Z");
    assert_eq!(day.len(), 24, "{day:?}");
}

#[test]
fn occurrences_over_a_downtime_window() {
    let s = parse("*/15 * * * *").unwrap();
    // Down from 10:07 to 11:02: four occurrences came due, in order; the window is (from, to].
    assert_eq!(
        all(&s, "2026-11-26T10:07:00Z", "2026-11-26T11:00:00Z"),
        [
            "2026-11-26T10:15:00Z",
            "2026-11-26T10:30:00Z",
            "2026-11-26T10:45:00Z",
            "2026-11-26T11:00:00Z"
        ]
    );
    let every = parse("every 10m").unwrap();
    assert_eq!(all(&every, NOW, "2026-11-26T10:35:00Z").len(), 3);
    let once = parse("30m").unwrap();
    assert_eq!(
        all(&once, NOW, "2026-11-27T00:00:00Z"),
        ["2026-11-26T10:30:00Z"]
    );
    assert!(all(&once, "2026-11-26T10:30:00Z", "2026-11-27T00:00:00Z").is_empty());
    // Lazy: a catch-up policy that wants one needs only one.
    let every_second = parse("every 1s").unwrap();
    let mut years = every_second.occurrences(ts(NOW), Timestamp::MAX);
    assert_eq!(years.next(), Some(ts("2026-11-26T10:00:01Z")));
}

#[test]
fn stored_schedules_round_trip() {
    let specs = [
        ("30m", "UTC"),
        ("every 2h", "UTC"),
        ("0 9 * * 1-5", "Europe/Berlin"),
        ("TZ=America/New_York 30 1 * * *", "UTC"),
        ("@weekly", "Asia/Tokyo"),
        ("tz=europe/paris 0 9 * * *", "UTC"),
        ("0 9 * * *", "+05:30"),
        ("2026-12-01 09:00", "Europe/Paris"),
    ];
    for (text, zone) in specs {
        let s = parse_in(text, zone);
        let stored = s.to_stored();
        let back = Schedule::from_stored(&stored).unwrap();
        assert_eq!(back, s, "{text} in {zone}: {stored}");
        let later = ts("2027-06-01T00:00:00Z");
        assert_eq!(back.next_after(later), s.next_after(later), "{text}");
        assert_eq!(back.spec(), text);
    }
    // The machine's zone, the gateway's default, is stored by its name too.
    let system = Schedule::parse("0 9 * * *", ts(NOW), &TimeZone::system()).unwrap();
    assert_eq!(Schedule::from_stored(&system.to_stored()).unwrap(), system);
    let canonical = parse("tz=europe/paris 0 9 * * *").unwrap().to_stored();
    assert!(canonical.contains(r#""tz":"Europe/Paris""#), "{canonical}");
    // Restored after its time, a one-shot is not an error: it has simply fired.
    let once = Schedule::from_stored(&parse("30m").unwrap().to_stored()).unwrap();
    assert_eq!(once.next_after(ts("2027-01-01T00:00:00Z")), None);
    // The interval keeps its anchor: restored a day later, still on the creation grid.
    let every = Schedule::from_stored(&parse("every 7m").unwrap().to_stored()).unwrap();
    assert_eq!(
        every.next_after(ts("2026-11-27T10:00:00Z")),
        Some(ts("2026-11-27T10:02:00Z")) // 10:00 + 206 × 7 min
    );
}

#[test]
fn unreadable_stored_schedules_are_errors() {
    for stored in [
        "",
        "0 9 * * *",
        r#"{"v":2,"spec":"30m","created":"2026-11-26T10:00:00Z"}"#,
        r#"{"v":1,"spec":"30m","created":"yesterday"}"#,
        r#"{"v":1,"spec":"30m","created":"2026-11-26T10:00:00Z"}"#,
        r#"{"v":1,"spec":"0 9 * * *","created":"2026-11-26T10:00:00Z","tz":"Mars/Olympus"}"#,
    ] {
        let e = Schedule::from_stored(stored).unwrap_err();
        assert!(matches!(e, ScheduleError::Stored { .. }), "{stored}: {e:?}");
    }
}

#[test]
fn errors_say_what_is_wrong_and_show_the_forms() {
    for (text, says) in [
        ("", "empty"),
        ("   ", "empty"),
        (
            "every",
            "\"every\" needs a duration after it (\"every 2h\")",
        ),
        ("in", "needs a duration"),
        ("every 0s", "shorter than the minimum"),
        ("every 500ms", "shorter than the minimum"),
        ("every fortnight", "not a duration"),
        ("in 2 parsecs", "not a duration"),
        ("tomorrow", "not a schedule"),
        (
            "0 9 * *",
            "has 5 fields (minute hour day-of-month month day-of-week), this one has 4",
        ),
        ("0 0 9 * * *", "this one has 6"),
        ("60 9 * * *", "minute 60 is out of range 0-59"),
        ("0 24 * * *", "hour 24 is out of range 0-23"),
        ("0 9 0 * *", "day-of-month 0 is out of range 1-31"),
        ("0 9 * 13 *", "month 13 is out of range 1-12"),
        ("0 9 * * 8", "day-of-week 8 is out of range 0-7"),
        ("0 9 * * FOO", "not a number or a name (SUN, MON"),
        ("0 9 * FOO *", "(JAN, FEB"),
        ("0 9-5 * * *", "runs backwards"),
        ("*/0 9 * * *", "step \"0\" is not a positive number"),
        ("0,,5 9 * * *", "empty item"),
        ("0 0 31 2 *", "never matches"),
        ("@reboot", "unknown alias"),
        (
            "TZ=Mars/Olympus 0 9 * * *",
            "unknown time zone \"Mars/Olympus\"",
        ),
        ("TZ=Europe/Paris", "no cron expression"),
        ("2026-13-01 09:00", "not a time"),
    ] {
        let e = err(text);
        assert!(e.contains(says), "{text:?}: {e}");
        assert!(e.contains("a schedule is one of"), "{text:?}: {e}");
    }
}

/// What the search must find, the slow way: every matching wall-clock minute around the
/// window, each mapped with `compatible`, the instants in `(from, to]`, each once.
fn reference(cron: &Cron, tz: &TimeZone, from: Timestamp, to: Timestamp) -> Vec<Timestamp> {
    let day = SignedDuration::from_hours(24);
    let mut civil = tz.to_datetime(from.checked_sub(day * 2).unwrap());
    let end = tz.to_datetime(to.checked_add(day * 2).unwrap());
    let mut found = std::collections::BTreeSet::new();
    while civil <= end {
        let matches = cron.day_matches(civil.date())
            && cron.hours & (1 << civil.hour()) != 0
            && cron.minutes & (1 << civil.minute()) != 0
            && civil.second() == 0;
        if matches {
            let at = tz.to_ambiguous_timestamp(civil).compatible().unwrap();
            if at > from && at <= to {
                found.insert(at);
            }
        }
        civil = civil.checked_add(SignedDuration::from_mins(1)).unwrap();
    }
    found.into_iter().collect()
}

#[test]
fn cron_search_agrees_with_every_minute_enumerated_across_transitions() {
    // Zones with 1 h, 30 min, midnight and whole-day transitions, around each.
    let windows = [
        ("Europe/Berlin", "2027-03-28T00:00:00Z"),
        ("Europe/Berlin", "2027-10-31T00:00:00Z"),
        ("America/New_York", "2026-11-01T06:00:00Z"),
        ("America/New_York", "2027-03-14T07:00:00Z"),
        ("Australia/Lord_Howe", "2027-04-03T15:00:00Z"),
        ("Australia/Lord_Howe", "2026-10-03T15:30:00Z"),
        ("America/Santiago", "2026-09-06T04:00:00Z"),
        ("America/Santiago", "2027-04-04T03:00:00Z"),
        ("Pacific/Apia", "2011-12-30T10:00:00Z"),
    ];
    let exprs = [
        "*/7 * * * *",
        "30 2 * * *",
        "0 0 * * *",
        "15,45 1-3 * * *",
        "0 * * * *",
        "59 23 * * *",
        "0 0 30 * SAT",
    ];
    let day = SignedDuration::from_hours(24);
    for (zone, around) in windows {
        let zone_tz = tz(zone);
        let from = ts(around).checked_sub(day * 2).unwrap();
        let to = ts(around).checked_add(day * 2).unwrap();
        for expr in exprs {
            let s = Schedule::parse(expr, from, &zone_tz).unwrap();
            let ScheduleKind::Cron { cron, .. } = s.kind() else {
                panic!("{expr} is not cron");
            };
            let got: Vec<_> = s.occurrences(from, to).collect();
            assert_eq!(
                got,
                reference(cron, &zone_tz, from, to),
                "{expr} in {zone} around {around}"
            );
        }
    }
}
