//! Schedules: when a job runs. Four kinds, each parsed from the text a user writes:
//!
//! - a **delay**, one shot: `30m`, `in 2h`, `90s` → once at creation + delay;
//! - an **interval**: `every 2h`, `every 15m` → at anchor + k·interval (k ≥ 1), the anchor being
//!   the creation time, so occurrences never drift however late a run starts. Intervals are in
//!   absolute time, unaffected by DST. The shortest is one second (the crash test fires jobs
//!   every few seconds); anything shorter is an error;
//! - a **cron expression**, 5 fields as in crontab(5) (`minute hour day-of-month month
//!   day-of-week`), with `JAN`…`DEC` and `SUN`…`SAT`, day-of-week 0 and 7 both Sunday, the
//!   `@yearly`/`@annually`/`@monthly`/`@weekly`/`@daily`/`@midnight`/`@hourly` aliases, and
//!   crontab's rule that when both day fields are restricted a day matching either runs. Its
//!   time zone is a `TZ=Area/City ` (or `CRON_TZ=`) prefix, else the default zone given to
//!   `parse` (the machine's, `TimeZone::system()`, in the gateway);
//! - a **timestamp**, one shot: RFC 3339 (`2026-12-01T09:00:00+01:00`), a time in a named zone
//!   (`2026-12-01T09:00[Europe/Paris]`), or a civil date-time (`2026-12-01 09:00`,
//!   `2026-12-01T09:00`) in the default zone; one already past is an error.
//!
//! Zone names are IANA names (`Europe/Paris`, `UTC`), fixed offsets (`+05:30`) or POSIX TZ
//! strings, read from the system's tz database; a schedule stores its zone's canonical name.
//!
//! **DST.** A cron time names a wall-clock time in its zone, and each wall-clock time of a day
//! runs once: a time that does not exist on the spring-forward day (02:30 in Europe/Berlin on
//! the last Sunday of March) runs once, shifted forward by the gap (03:30 CEST), and a time
//! that occurs twice on the fall-back day (02:30 on the last Sunday of October) runs once, at
//! its first occurrence (02:30 CEST). This is jiff's `compatible` disambiguation (RFC 5545's,
//! and what Temporal does). The second pass through the repeated hour runs nothing, so an
//! hourly job has no extra run that night, and a job every 15 minutes pauses for that hour.
//!
//! **Why the cron part is written here.** The crates considered: `cron` (chrono-based) and
//! `jiff-cron` (its port to jiff 0.2) read Quartz expressions (seconds first, 1 = Sunday, so
//! crontab's `1-5` would mean Sunday to Thursday) and fire twice in the repeated hour (their
//! own documentation shows it); `jiff-cron` would also add jiff 0.2 beside our jiff 1, its
//! zones converted through Unix timestamps. `croner` reads crontab's fields but is chrono-based,
//! which would add chrono and chrono-tz (a second, compiled-in time zone database) beside jiff.
//! The missing part is small: five fields of numbers, ranges, steps and names parsed into bit
//! sets, and a search over days in the zone; jiff does all the calendar and zone arithmetic.

use std::fmt;
use std::time::Duration;

use jiff::civil::{Date, DateTime, Time};
use jiff::fmt::temporal::{DateTimeParser, DateTimePrinter};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

/// The accepted forms, shown with every parse error.
pub const ACCEPTED_FORMS: &str = "a schedule is one of: a delay (\"30m\", \"in 2h\"), an interval \
(\"every 2h\", at least 1s), a 5-field cron expression (\"0 9 * * 1-5\", \"TZ=Europe/Paris 0 9 * * *\", \
\"@daily\"), or a time (\"2026-12-01T09:00:00+01:00\", \"2026-12-01 09:00\")";

/// The shortest interval (and delay) accepted.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// How many days ahead a cron search looks before it concludes an expression never fires
/// again: 8 years hold a 29 February, the rarest day a satisfiable expression can need (a day
/// of the month and a day of the week both given mean either, never both).
const SEARCH_DAYS: i32 = 8 * 366;

/// Why a schedule could not be parsed or restored.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScheduleError {
    #[error("the schedule is empty; {ACCEPTED_FORMS}")]
    Empty,
    #[error("{spec:?}: {reason}; {ACCEPTED_FORMS}")]
    Invalid { spec: String, reason: String },
    #[error("{spec:?}: {at} is already past (it is now {now})")]
    InPast {
        spec: String,
        at: Timestamp,
        now: Timestamp,
    },
    #[error("stored schedule {stored:?} is not readable: {reason}")]
    Stored { stored: String, reason: String },
}

fn invalid(spec: &str, reason: impl Into<String>) -> ScheduleError {
    ScheduleError::Invalid {
        spec: spec.to_owned(),
        reason: reason.into(),
    }
}

/// What kind of schedule, resolved: instants and zones rather than text.
#[derive(Debug, Clone, PartialEq)]
pub enum ScheduleKind {
    /// Runs once, at `at` (a delay or a timestamp).
    Once { at: Timestamp },
    /// Runs at `anchor + k·interval` for every k ≥ 1.
    Every {
        anchor: Timestamp,
        interval: SignedDuration,
    },
    /// Runs at each wall-clock time the expression matches in `tz`.
    Cron {
        cron: Cron,
        tz: TimeZone,
        /// The name stored for `tz`: an IANA name, or a fixed offset.
        tz_name: String,
    },
}

/// A parsed schedule: the text as written, and what it resolved to when it was created.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    spec: String,
    /// When the schedule was created: the `now` it was parsed at.
    created: Timestamp,
    kind: ScheduleKind,
}

impl Schedule {
    /// Parses `text`, resolving delays and intervals against `now` and zone-less cron
    /// expressions and civil times in `default_tz`.
    pub fn parse(text: &str, now: Timestamp, default_tz: &TimeZone) -> Result<Self, ScheduleError> {
        let spec = text.trim();
        if spec.is_empty() {
            return Err(ScheduleError::Empty);
        }
        let kind = parse_kind(spec, now, default_tz)?;
        let schedule = Schedule {
            spec: spec.to_owned(),
            created: now,
            kind,
        };
        match &schedule.kind {
            ScheduleKind::Once { at } if *at <= now => {
                return Err(ScheduleError::InPast {
                    spec: spec.to_owned(),
                    at: *at,
                    now,
                });
            }
            ScheduleKind::Cron { .. } if schedule.next_after(now).is_none() => {
                return Err(invalid(
                    spec,
                    "this cron expression never matches a day (check the day of the month against the months)",
                ));
            }
            _ => {}
        }
        Ok(schedule)
    }

    /// The text as the user wrote it (trimmed).
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// What the schedule resolved to.
    pub fn kind(&self) -> &ScheduleKind {
        &self.kind
    }

    /// Whether it runs once only.
    pub fn is_one_shot(&self) -> bool {
        matches!(self.kind, ScheduleKind::Once { .. })
    }

    /// The first occurrence strictly after `t`; `None` once a one-shot's time has passed (or a
    /// cron expression matches nothing in the next 8 years).
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        match &self.kind {
            ScheduleKind::Once { at } => (*at > t).then_some(*at),
            ScheduleKind::Every { anchor, interval } => next_interval(*anchor, *interval, t),
            ScheduleKind::Cron { cron, tz, .. } => cron.next_after(tz, t),
        }
    }

    /// Every occurrence in `(from, to]`, in order: what came due while the scheduler was down.
    /// Finite, since occurrences are strictly increasing and at least a second apart; a caller
    /// that needs only some (catch-up policy `one`) takes them lazily.
    pub fn occurrences(&self, from: Timestamp, to: Timestamp) -> impl Iterator<Item = Timestamp> {
        let mut cursor = from;
        std::iter::from_fn(move || {
            let next = self.next_after(cursor)?;
            if next > to {
                return None;
            }
            cursor = next;
            Some(next)
        })
    }

    /// The schedule as the store keeps it: the spec plus what it resolved to (the one-shot's
    /// instant, the interval's anchor, the cron expression's zone), as one line of JSON.
    pub fn to_stored(&self) -> String {
        let (at, tz) = match &self.kind {
            ScheduleKind::Once { at } => (Some(at.to_string()), None),
            ScheduleKind::Every { .. } => (None, None),
            ScheduleKind::Cron { tz_name, .. } => (None, Some(tz_name.clone())),
        };
        let stored = Stored {
            v: 1,
            spec: self.spec.clone(),
            created: self.created.to_string(),
            at,
            tz,
        };
        #[expect(
            clippy::expect_used,
            reason = "a struct of strings and an integer always serializes"
        )]
        serde_json::to_string(&stored).expect("serializable")
    }

    /// Restores what `to_stored` wrote. A one-shot keeps its stored instant (it is not re-checked
    /// against the present), an interval its anchor, a cron expression its zone.
    pub fn from_stored(stored: &str) -> Result<Self, ScheduleError> {
        let bad = |reason: String| ScheduleError::Stored {
            stored: stored.to_owned(),
            reason,
        };
        let s: Stored = serde_json::from_str(stored).map_err(|e| bad(e.to_string()))?;
        if s.v != 1 {
            return Err(bad(format!("unknown version {}", s.v)));
        }
        let created: Timestamp = s
            .created
            .parse()
            .map_err(|e| bad(format!("created: {e}")))?;
        if let Some(at) = s.at {
            let at: Timestamp = at.parse().map_err(|e| bad(format!("at: {e}")))?;
            return Ok(Schedule {
                spec: s.spec,
                created,
                kind: ScheduleKind::Once { at },
            });
        }
        let tz = match &s.tz {
            Some(name) => zone(name).map_err(bad)?,
            None => TimeZone::UTC,
        };
        let kind = parse_kind(&s.spec, created, &tz).map_err(|e| bad(e.to_string()))?;
        if matches!(kind, ScheduleKind::Once { .. }) {
            return Err(bad("a one-shot schedule without its instant".into()));
        }
        Ok(Schedule {
            spec: s.spec,
            created,
            kind,
        })
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.spec)
    }
}

#[derive(Serialize, Deserialize)]
struct Stored {
    v: u32,
    spec: String,
    created: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tz: Option<String>,
}

fn parse_kind(
    spec: &str,
    now: Timestamp,
    default_tz: &TimeZone,
) -> Result<ScheduleKind, ScheduleError> {
    let lower = spec.to_ascii_lowercase();
    if lower == "every" || lower == "in" {
        return Err(invalid(
            spec,
            format!("{spec:?} needs a duration after it (\"{spec} 2h\")"),
        ));
    }
    if let Some(rest) = lower.strip_prefix("every ") {
        let interval = duration(spec, rest)?;
        return Ok(ScheduleKind::Every {
            anchor: now,
            interval,
        });
    }
    if let Some(rest) = lower.strip_prefix("in ") {
        return once_after(spec, now, duration(spec, rest)?);
    }
    if lower.starts_with("tz=") || lower.starts_with("cron_tz=") {
        let (assignment, expr) = spec
            .split_once(char::is_whitespace)
            .ok_or_else(|| invalid(spec, "a time zone but no cron expression after it"))?;
        let name = assignment
            .split_once('=')
            .map(|(_, name)| name)
            .unwrap_or_default();
        let tz = zone(name).map_err(|reason| invalid(spec, reason))?;
        // Stored by its canonical name (`europe/paris` → `Europe/Paris`).
        let tz_name = zone_name(&tz).map_err(|reason| invalid(spec, reason))?;
        return cron_kind(spec, expr.trim(), tz, tz_name);
    }
    if spec.starts_with('@') || spec.split_whitespace().count() == 5 {
        let tz_name = zone_name(default_tz).map_err(|reason| invalid(spec, reason))?;
        return cron_kind(spec, spec, default_tz.clone(), tz_name);
    }
    if let Ok(at) = spec.parse::<Timestamp>() {
        return Ok(ScheduleKind::Once { at });
    }
    // `2026-12-01T09:00[Europe/Paris]`: a time in a named zone (RFC 9557).
    if let Ok(zoned) = spec.parse::<jiff::ZonedDateTime>() {
        return Ok(ScheduleKind::Once {
            at: zoned.timestamp(),
        });
    }
    // A civil time in the default zone; one in a DST gap moves forward by the gap, a repeated
    // one is its first occurrence, as for cron times.
    if let Ok(civil) = spec.parse::<DateTime>() {
        let at = default_tz
            .to_ambiguous_timestamp(civil)
            .compatible()
            .map_err(|e| invalid(spec, e.to_string()))?;
        return Ok(ScheduleKind::Once { at });
    }
    if spec.starts_with(|c: char| c.is_ascii_digit()) && spec.contains('-') {
        return Err(invalid(
            spec,
            "not a time: write RFC 3339 (2026-12-01T09:00:00+01:00) or a date and time (2026-12-01 09:00)",
        ));
    }
    if let Ok(delay) = duration(spec, spec) {
        return once_after(spec, now, delay);
    }
    // Several fields of digits and `*`: a cron expression with the wrong number of fields.
    let cron_like = |f: &str| f.chars().all(|c| c.is_ascii_digit() || "*/,-".contains(c));
    let fields = spec.split_whitespace().count();
    if fields > 2 && spec.split_whitespace().next().is_some_and(cron_like) {
        return Err(invalid(
            spec,
            format!(
                "a cron expression has 5 fields (minute hour day-of-month month day-of-week), this one has {fields}"
            ),
        ));
    }
    Err(invalid(spec, "not a schedule"))
}

fn once_after(
    spec: &str,
    now: Timestamp,
    delay: SignedDuration,
) -> Result<ScheduleKind, ScheduleError> {
    let at = now
        .checked_add(delay)
        .map_err(|_| invalid(spec, "the delay is too long"))?;
    Ok(ScheduleKind::Once { at })
}

fn duration(spec: &str, text: &str) -> Result<SignedDuration, ScheduleError> {
    let text = text.trim();
    let parsed = humantime::parse_duration(text).map_err(|e| {
        invalid(
            spec,
            format!("{text:?} is not a duration ({e}): write a number and a unit, s, m, h or d (\"30m\", \"1h30m\")"),
        )
    })?;
    if parsed < MIN_INTERVAL {
        return Err(invalid(
            spec,
            format!("{text:?} is shorter than the minimum, 1s"),
        ));
    }
    SignedDuration::try_from(parsed).map_err(|_| invalid(spec, format!("{text:?} is too long")))
}

fn next_interval(anchor: Timestamp, interval: SignedDuration, t: Timestamp) -> Option<Timestamp> {
    let step = interval.as_nanos();
    if step <= 0 {
        return None;
    }
    let elapsed = t.as_nanosecond() - anchor.as_nanosecond();
    let k = if elapsed < 0 { 1 } else { elapsed / step + 1 };
    let at = anchor.as_nanosecond().checked_add(k.checked_mul(step)?)?;
    Timestamp::from_nanosecond(at).ok()
}

/// A zone by name: an IANA name (`Europe/Paris`, `UTC`), a fixed offset (`+01:00`) or a POSIX
/// TZ string, as jiff's Temporal parser reads them.
fn zone(name: &str) -> Result<TimeZone, String> {
    if name.is_empty() {
        return Err("an empty time zone name (write e.g. TZ=Europe/Paris)".into());
    }
    static PARSER: DateTimeParser = DateTimeParser::new();
    PARSER.parse_time_zone(name).map_err(|_| {
        format!("unknown time zone {name:?} (write an IANA name such as Europe/Paris or UTC)")
    })
}

/// The name a zone is stored by, which `zone` reads back.
fn zone_name(tz: &TimeZone) -> Result<String, String> {
    static PRINTER: DateTimePrinter = DateTimePrinter::new();
    PRINTER.time_zone_to_string(tz).map_err(|_| {
        "the default time zone has no name to store it by; give one (TZ=Europe/Paris 0 9 * * *)"
            .to_owned()
    })
}

fn cron_kind(
    spec: &str,
    expr: &str,
    tz: TimeZone,
    tz_name: String,
) -> Result<ScheduleKind, ScheduleError> {
    let cron = Cron::parse(expr).map_err(|reason| invalid(spec, reason))?;
    Ok(ScheduleKind::Cron { cron, tz, tz_name })
}

/// A 5-field cron expression as bit sets: bit n set = value n matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    /// 0 = Sunday … 6 = Saturday (7 is folded into 0).
    weekdays: u64,
    /// Whether the day-of-month / day-of-week field was `*` (crontab's either-day rule).
    days_star: bool,
    weekdays_star: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Cron {
    /// Parses `minute hour day-of-month month day-of-week`, or an `@` alias.
    pub fn parse(expr: &str) -> Result<Self, String> {
        let expanded = match expr.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => {
                return Err(format!(
                    "unknown alias {expr:?} (the aliases are @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)"
                ));
            }
            _ => expr,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(format!(
                "a cron expression has 5 fields (minute hour day-of-month month day-of-week), this one has {}",
                fields.len()
            ));
        };
        let weekdays = field(weekday, "day-of-week", 0, 7, &WEEKDAYS, 0)?;
        // crontab(5): 0 and 7 are both Sunday.
        let weekdays = (weekdays | (weekdays >> 7)) & 0x7f;
        Ok(Cron {
            minutes: field(minute, "minute", 0, 59, &[], 0)?,
            hours: field(hour, "hour", 0, 23, &[], 0)?,
            days: field(day, "day-of-month", 1, 31, &[], 0)?,
            months: field(month, "month", 1, 12, &MONTHS, 1)?,
            weekdays,
            days_star: day.starts_with('*'),
            weekdays_star: weekday.starts_with('*'),
        })
    }

    fn day_matches(&self, date: Date) -> bool {
        if self.months & (1 << date.month()) == 0 {
            return false;
        }
        let dom = self.days & (1 << date.day()) != 0;
        let dow = self.weekdays & (1 << date.weekday().to_sunday_zero_offset()) != 0;
        match (self.days_star, self.weekdays_star) {
            (false, false) => dom || dow,
            _ => dom && dow,
        }
    }

    /// The first instant after `t` at which a matching wall-clock time occurs in `tz`.
    fn next_after(&self, tz: &TimeZone, t: Timestamp) -> Option<Timestamp> {
        let floor = earliest_civil_after(tz, t)?;
        let mut date = floor.date();
        let mut best: Option<Timestamp> = None;
        let mut days_after_gap = 0;
        for _ in 0..SEARCH_DAYS {
            if self.day_matches(date) {
                let (found, certain) = self.first_on(tz, date, floor, t);
                if let Some(found) = found {
                    best = Some(best.map_or(found, |b| b.min(found)));
                }
                if certain {
                    return best;
                }
            }
            // Only a time shifted forward by a gap can be later than a time of the next day
            // (a gap across midnight), so a day past it settles the matter.
            if best.is_some() {
                days_after_gap += 1;
                if days_after_gap > 1 {
                    break;
                }
            }
            date = date.tomorrow().ok()?;
        }
        best
    }

    /// The earliest matching instant after `t` on `date`, from wall-clock times at or after
    /// `floor`, and whether it is certainly the earliest of all later days too: it is unless it
    /// came from a time in a gap, since `compatible` keeps wall-clock order for every other time.
    fn first_on(
        &self,
        tz: &TimeZone,
        date: Date,
        floor: DateTime,
        t: Timestamp,
    ) -> (Option<Timestamp>, bool) {
        let mut best: Option<Timestamp> = None;
        for hour in bits(self.hours) {
            for minute in bits(self.minutes) {
                let Ok(time) = Time::new(hour, minute, 0, 0) else {
                    continue;
                };
                let civil = date.to_datetime(time);
                if civil < floor {
                    continue;
                }
                // `compatible`: a time in a gap moves forward by the gap, a repeated time is its
                // first occurrence.
                let ambiguous = tz.to_ambiguous_timestamp(civil);
                let in_gap = matches!(ambiguous.offset(), AmbiguousOffset::Gap { .. });
                let Ok(at) = ambiguous.compatible() else {
                    continue;
                };
                if at > t {
                    best = Some(best.map_or(at, |b| b.min(at)));
                    if !in_gap {
                        return (best, true);
                    }
                }
            }
        }
        (best, false)
    }
}

/// A wall-clock time before this one cannot fall after `t` in `tz`, so the search starts here
/// rather than testing a whole day of times: `t` read with the smallest offset the zone uses
/// within two days of it (a time `c` lands at `c - offset` for an offset in force near there).
fn earliest_civil_after(tz: &TimeZone, t: Timestamp) -> Option<DateTime> {
    let window = SignedDuration::from_hours(48);
    let (lo, hi) = (t.checked_sub(window).ok()?, t.checked_add(window).ok()?);
    let smallest = tz
        .following(lo)
        .take_while(|transition| transition.timestamp() <= hi)
        .map(|transition| transition.offset())
        .fold(tz.to_offset(lo), |a, b| a.min(b));
    Some(smallest.to_datetime(t))
}

fn bits(set: u64) -> impl Iterator<Item = i8> {
    (0..64i8).filter(move |n| set & (1 << n) != 0)
}

/// One field: comma-separated items, each `*`, `N`, `N-M`, with an optional `/STEP`.
/// `names[i]` stands for `i + name_base`.
fn field(
    text: &str,
    what: &str,
    min: u8,
    max: u8,
    names: &[&str],
    name_base: u8,
) -> Result<u64, String> {
    let value = |s: &str| -> Result<u8, String> {
        let lower = s.to_ascii_lowercase();
        if let Some(i) = names.iter().position(|n| *n == lower) {
            return Ok(i as u8 + name_base);
        }
        let n: u8 = s.parse().map_err(|_| {
            if names.is_empty() {
                format!("{what} {s:?} is not a number")
            } else {
                format!(
                    "{what} {s:?} is not a number or a name ({})",
                    names.join(", ").to_ascii_uppercase()
                )
            }
        })?;
        if n < min || n > max {
            return Err(format!("{what} {n} is out of range {min}-{max}"));
        }
        Ok(n)
    };
    let mut set = 0u64;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(format!("{what} field {text:?} has an empty item"));
        }
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step: u8 = step
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("{what} step {step:?} is not a positive number"))?;
                (range, step)
            }
            None => (item, 1),
        };
        let (lo, hi) = if range == "*" {
            (min, max)
        } else if let Some((lo, hi)) = range.split_once('-') {
            let (lo, hi) = (value(lo)?, value(hi)?);
            if lo > hi {
                return Err(format!("{what} range {range:?} runs backwards"));
            }
            (lo, hi)
        } else {
            let lo = value(range)?;
            // `N/STEP` means from N to the end, as in cronie.
            (lo, if item.contains('/') { max } else { lo })
        };
        for n in (lo..=hi).step_by(step as usize) {
            set |= 1 << n;
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests;
