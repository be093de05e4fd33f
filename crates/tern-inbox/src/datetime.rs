//! The three date/time formats the Pump Up API uses: calendar dates (`YYYY-MM-DD`), RFC 3339
//! date-times with an offset, and times of day (`HH:MM` or `HH:MM:SS`).
//!
//! The shapes are checked here, strictly (exact digit counts, ASCII digits only, no sign, no
//! space), so that a bad shape and a date that does not exist get different messages; the
//! calendar — month lengths, leap years, days since the epoch — is `jiff`'s.
//!
//! Years are limited to 0001–9999: that is what four digits can hold and what Python's
//! `datetime` (the reference SDK) accepts, so anything we accept the SDK can read.

use std::sync::LazyLock;

use jiff::SignedDuration;
use jiff::civil::{self, DateTime};
use regex::Regex;

/// Why a string was rejected: it does not have the expected shape at all, or it has the
/// shape but names a date/time that does not exist (February 30th, 24:00, month 13).
/// The difference matters to a human: "type it like 2024-12-31" versus "no such date".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParseError {
    Format,
    OutOfRange,
}

/// A calendar date; its `Ord` is chronological.
pub(crate) type Date = civil::Date;

/// A point in time as the time since 1970-01-01T00:00:00Z (negative before it); its `Ord`
/// is chronological, whatever offset the strings were written in. Not a `jiff::Timestamp`:
/// that stops a day short of 9999-12-31, which an RFC 3339 string can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Instant(SignedDuration);

impl Instant {
    pub(crate) fn from_unix_millis(ms: i64) -> Self {
        Instant(SignedDuration::from_millis(ms))
    }

    /// Milliseconds since the epoch (sub-millisecond digits dropped, towards the past).
    pub(crate) fn unix_millis(self) -> i64 {
        // `as_millis` truncates towards zero; before the epoch, flooring takes one less.
        let ms = self.0.as_millis() - i128::from(self.0.subsec_nanos() % 1_000_000 < 0);
        i64::try_from(ms).unwrap_or(if ms < 0 { i64::MIN } else { i64::MAX })
    }
}

/// The epoch in civil terms, from which instants are counted.
const EPOCH: DateTime = DateTime::constant(1970, 1, 1, 0, 0, 0, 0);

/// The earliest and latest instants a four-digit-year RFC 3339 string can name, in
/// milliseconds since the epoch (0001-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z).
pub(crate) const MIN_UNIX_MILLIS: i64 = -62_135_596_800_000;
pub(crate) const MAX_UNIX_MILLIS: i64 = 253_402_300_799_999;

/// A pattern that is a literal of this module and known to compile.
fn pattern(re: &str) -> Regex {
    #[expect(
        clippy::expect_used,
        reason = "the patterns are literals, tested below"
    )]
    Regex::new(re).expect("a valid pattern")
}

const DATE: &str = "([0-9]{4})-([0-9]{2})-([0-9]{2})";
static DATE_RE: LazyLock<Regex> = LazyLock::new(|| pattern(&format!("^{DATE}$")));
static TIME_RE: LazyLock<Regex> =
    LazyLock::new(|| pattern("^([0-9]{2}):([0-9]{2})(?::([0-9]{2}))?$"));
// Lower-case `t`/`z` are allowed as RFC 3339 says; the space separator it also tolerates is
// not, since the SDK never sends it. Seconds and the offset are mandatory.
static RFC3339_RE: LazyLock<Regex> = LazyLock::new(|| {
    pattern(&format!(
        "^{DATE}[Tt]([0-9]{{2}}):([0-9]{{2}}):([0-9]{{2}})(?:\\.([0-9]+))?(?:[Zz]|([+-])([0-9]{{2}}):([0-9]{{2}}))$"
    ))
});

/// The number in capture group `i` (digits only, at most 9 of them, so it fits).
fn num(caps: &regex::Captures<'_>, i: usize) -> i32 {
    caps.get(i).map_or(0, |m| {
        m.as_str()
            .bytes()
            .fold(0, |n, b| n * 10 + i32::from(b - b'0'))
    })
}

/// The date in groups 1–3 (year, month, day). Year 0 is refused like month 13: it has the
/// shape but no four-digit-year calendar holds it.
fn date_of(caps: &regex::Captures<'_>) -> Result<Date, ParseError> {
    let (y, m, d) = (num(caps, 1), num(caps, 2), num(caps, 3));
    if y == 0 {
        return Err(ParseError::OutOfRange);
    }
    let (m, d) = (to_i8(m)?, to_i8(d)?);
    // Four digits always fit an i16.
    Date::new(i16::try_from(y).map_err(|_| ParseError::OutOfRange)?, m, d)
        .map_err(|_| ParseError::OutOfRange)
}

fn to_i8(n: i32) -> Result<i8, ParseError> {
    i8::try_from(n).map_err(|_| ParseError::OutOfRange)
}

/// A time of day from hours, minutes and seconds. Leap seconds (:60) are refused, as jiff
/// refuses them: nothing a human answers needs one, and accepting them would make two
/// different strings name the same instant.
fn time_of(h: i32, m: i32, s: i32, nanos: i32) -> Result<civil::Time, ParseError> {
    civil::Time::new(to_i8(h)?, to_i8(m)?, to_i8(s)?, nanos).map_err(|_| ParseError::OutOfRange)
}

/// A calendar date written `YYYY-MM-DD`, e.g. `2024-02-29`.
pub(crate) fn parse_date(s: &str) -> Result<Date, ParseError> {
    let caps = DATE_RE.captures(s).ok_or(ParseError::Format)?;
    date_of(&caps)
}

/// A time of day written `HH:MM` or `HH:MM:SS` (24-hour clock), as seconds since midnight.
pub(crate) fn parse_time_of_day(s: &str) -> Result<u32, ParseError> {
    let caps = TIME_RE.captures(s).ok_or(ParseError::Format)?;
    let (h, m, s) = (num(&caps, 1), num(&caps, 2), num(&caps, 3));
    time_of(h, m, s, 0)?;
    u32::try_from(h * 3600 + m * 60 + s).map_err(|_| ParseError::OutOfRange)
}

/// An RFC 3339 date-time with a mandatory offset, e.g. `2024-05-01T09:30:00+02:00`,
/// `2024-05-01T07:30:00.123456Z`.
pub(crate) fn parse_rfc3339(s: &str) -> Result<Instant, ParseError> {
    let caps = RFC3339_RE.captures(s).ok_or(ParseError::Format)?;
    let date = date_of(&caps)?;
    // Python writes microseconds (6 digits); keep up to nanoseconds and ignore the rest,
    // which no comparison a human makes can depend on.
    let nanos = caps.get(7).map_or(0, |m| {
        let digits = &m.as_str()[..m.as_str().len().min(9)];
        digits
            .bytes()
            .chain(std::iter::repeat(b'0'))
            .take(9)
            .fold(0, |n, b| n * 10 + i32::from(b - b'0'))
    });
    let time = time_of(num(&caps, 4), num(&caps, 5), num(&caps, 6), nanos)?;
    let offset_secs = match caps.get(8) {
        None => 0,
        Some(sign) => {
            let (h, m) = (num(&caps, 9), num(&caps, 10));
            if h > 23 || m > 59 {
                return Err(ParseError::OutOfRange);
            }
            let secs = i64::from(h * 3600 + m * 60);
            if sign.as_str() == "-" { -secs } else { secs }
        }
    };
    let local = date.to_datetime(time).duration_since(EPOCH);
    Ok(Instant(local - SignedDuration::from_secs(offset_secs)))
}

/// Formats milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`, clamped to the
/// four-digit-year range so the result always parses back.
pub(crate) fn format_rfc3339_millis(unix_millis: i64) -> String {
    let ms = unix_millis.clamp(MIN_UNIX_MILLIS, MAX_UNIX_MILLIS);
    // Within the clamp the sum is a date-time of years 1–9999, which jiff holds.
    let t = EPOCH
        .checked_add(SignedDuration::from_millis(ms))
        .unwrap_or(EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(i: Instant) -> i64 {
        i.unix_millis().div_euclid(1000)
    }

    #[test]
    fn dates_check_month_lengths_and_leap_years() {
        assert_eq!(parse_date("2024-02-29"), Ok(Date::constant(2024, 2, 29)));
        assert!(parse_date("2000-02-29").is_ok(), "divisible by 400 is leap");
        assert_eq!(parse_date("1900-02-29"), Err(ParseError::OutOfRange));
        assert_eq!(parse_date("2023-02-29"), Err(ParseError::OutOfRange));
        assert_eq!(parse_date("2024-04-31"), Err(ParseError::OutOfRange));
        assert!(parse_date("2024-12-31").is_ok());
        assert!(parse_date("0001-01-01").is_ok());
        assert!(parse_date("9999-12-31").is_ok());
        assert_eq!(parse_date("2024-13-01"), Err(ParseError::OutOfRange));
        assert_eq!(parse_date("2024-00-10"), Err(ParseError::OutOfRange));
        assert_eq!(parse_date("2024-01-00"), Err(ParseError::OutOfRange));
        assert_eq!(parse_date("2024-99-99"), Err(ParseError::OutOfRange));
        assert_eq!(parse_date("0000-01-01"), Err(ParseError::OutOfRange));
        assert!(parse_date("2024-01-31").unwrap() < parse_date("2024-02-01").unwrap());
    }

    #[test]
    fn dates_reject_other_shapes() {
        for s in [
            "",
            "2024-1-01",
            "2024/01/01",
            "24-01-01",
            "2024-01-01 ",
            " 2024-01-01",
            "2024-01-01\n",
            "2024-01-01T00:00:00Z",
            "+024-01-01",
            "20240101",
            "2024-0a-01",
            "２０２４-01-01",
            "2024-01-é",
        ] {
            assert_eq!(parse_date(s), Err(ParseError::Format), "{s:?}");
        }
    }

    #[test]
    fn times_of_day() {
        assert_eq!(parse_time_of_day("00:00"), Ok(0));
        assert_eq!(parse_time_of_day("09:30"), Ok(9 * 3600 + 30 * 60));
        assert_eq!(parse_time_of_day("23:59:59"), Ok(86_399));
        assert_eq!(parse_time_of_day("24:00"), Err(ParseError::OutOfRange));
        assert_eq!(parse_time_of_day("12:60"), Err(ParseError::OutOfRange));
        assert_eq!(parse_time_of_day("12:00:60"), Err(ParseError::OutOfRange));
        assert_eq!(parse_time_of_day("99:99:99"), Err(ParseError::OutOfRange));
        for s in [
            "9:30",
            "09:30:",
            "09:30:0",
            "0930",
            "09:30 ",
            "09:30:00.5",
            "09:30Z",
            "０9:30",
        ] {
            assert_eq!(parse_time_of_day(s), Err(ParseError::Format), "{s:?}");
        }
    }

    #[test]
    fn rfc3339_instants_agree_across_offsets() {
        let utc = parse_rfc3339("2024-05-01T07:30:00Z").unwrap();
        assert_eq!(parse_rfc3339("2024-05-01T09:30:00+02:00").unwrap(), utc);
        assert_eq!(parse_rfc3339("2024-04-30T22:00:00-09:30").unwrap(), utc);
        assert_eq!(parse_rfc3339("2024-05-01t07:30:00z").unwrap(), utc);
        assert_eq!(secs(utc), 1_714_548_600);
        assert_eq!(secs(parse_rfc3339("1970-01-01T00:00:00Z").unwrap()), 0);
        assert_eq!(secs(parse_rfc3339("1969-12-31T23:59:59Z").unwrap()), -1);
        assert!(
            parse_rfc3339("2024-05-01T07:30:00Z").unwrap()
                < parse_rfc3339("2024-05-01T09:30:01+02:00").unwrap()
        );
        // The ends of the four-digit range, past what a jiff::Timestamp holds.
        assert!(parse_rfc3339("9999-12-31T23:59:59-23:59").is_ok());
        assert!(parse_rfc3339("0001-01-01T00:00:00+23:59").is_ok());
    }

    #[test]
    fn rfc3339_fractions() {
        let t = parse_rfc3339("2024-05-01T07:30:00.123456+00:00").unwrap();
        assert_eq!(t.unix_millis(), 1_714_548_600_123);
        assert_eq!(t.0.subsec_nanos(), 123_456_000);
        let t = parse_rfc3339("2024-05-01T07:30:00.5Z").unwrap();
        assert_eq!(t.0.subsec_nanos(), 500_000_000);
        let t = parse_rfc3339("2024-05-01T07:30:00.1234567891234Z").unwrap();
        assert_eq!(t.0.subsec_nanos(), 123_456_789);
        assert_eq!(
            parse_rfc3339("1969-12-31T23:59:59.9995Z")
                .unwrap()
                .unix_millis(),
            -1,
            "milliseconds are floored, also before the epoch"
        );
        assert!(parse_rfc3339("2024-05-01T07:30:00.Z").is_err());
    }

    #[test]
    fn rfc3339_rejects() {
        for s in [
            "2024-05-01T07:30:00",  // no offset
            "2024-05-01T07:30Z",    // no seconds
            "2024-05-01 07:30:00Z", // space separator
            "2024-05-01T07:30:00+0200",
            "2024-05-01T07:30:00+2:00",
            "2024-05-01",
            "2024-05-01T07:30:00Z ",
            "2024-05-01T07:30:00.Z",
            "+2024-05-01T07:30:00Z",
        ] {
            assert_eq!(parse_rfc3339(s), Err(ParseError::Format), "{s:?}");
        }
        for s in [
            "2023-02-29T00:00:00Z",
            "2024-05-01T24:00:00Z",
            "2024-05-01T23:59:60Z",
            "2024-05-01T07:30:00+24:00",
            "2024-05-01T07:30:00+00:60",
            "0000-12-31T23:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(s), Err(ParseError::OutOfRange), "{s:?}");
        }
    }

    #[test]
    fn the_range_constants_are_the_four_digit_years() {
        let min = parse_rfc3339("0001-01-01T00:00:00Z").unwrap();
        let max = parse_rfc3339("9999-12-31T23:59:59.999Z").unwrap();
        assert_eq!(min.unix_millis(), MIN_UNIX_MILLIS);
        assert_eq!(max.unix_millis(), MAX_UNIX_MILLIS);
    }

    #[test]
    fn formatting_round_trips_and_clamps() {
        assert_eq!(format_rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_rfc3339_millis(1_714_548_600_123),
            "2024-05-01T07:30:00.123Z"
        );
        assert_eq!(
            format_rfc3339_millis(951_782_400_000),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(format_rfc3339_millis(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(format_rfc3339_millis(i64::MIN), "0001-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339_millis(i64::MAX), "9999-12-31T23:59:59.999Z");
        for ms in [MIN_UNIX_MILLIS, -1, 0, 1_714_548_600_123, MAX_UNIX_MILLIS] {
            let t = parse_rfc3339(&format_rfc3339_millis(ms)).unwrap();
            assert_eq!(t.unix_millis(), ms);
            assert_eq!(Instant::from_unix_millis(ms), t);
        }
    }
}
