//! Small hand-written parsers for the three date/time formats the Pump Up API uses:
//! calendar dates (`YYYY-MM-DD`), RFC 3339 date-times with an offset, and times of day
//! (`HH:MM` or `HH:MM:SS`).
//!
//! We deliberately take no chrono/time dependency: the inbox only needs to check that a
//! string is well formed and a real date/time, and to compare two of them. That is a
//! page of code with no time-zone database, no locale and no extra supply chain.
//!
//! Years are limited to 0001–9999: that is what four digits can hold and what Python's
//! `datetime` (the reference SDK) accepts, so anything we accept the SDK can read.

/// Why a string was rejected: it does not have the expected shape at all, or it has the
/// shape but names a date/time that does not exist (February 30th, 24:00, month 13).
/// The difference matters to a human: "type it like 2024-12-31" versus "no such date".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParseError {
    Format,
    OutOfRange,
}

/// A calendar date. Field order makes the derived `Ord` chronological.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Date {
    pub(crate) year: i32,
    pub(crate) month: u32,
    pub(crate) day: u32,
}

/// A point in time as seconds and nanoseconds since 1970-01-01T00:00:00Z. Field order
/// makes the derived `Ord` chronological, whatever offset the strings were written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Instant {
    pub(crate) secs: i64,
    pub(crate) nanos: u32,
}

const SECS_PER_DAY: i64 = 86_400;

pub(crate) fn is_leap_year(year: i32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

pub(crate) fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap_year(year) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Parses exactly `n` ASCII digits (no sign, no spaces) — `str::parse` would also accept
/// a leading `+`, which none of these formats allow.
fn digits(s: &str, n: usize) -> Result<u32, ParseError> {
    if s.len() != n || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseError::Format);
    }
    Ok(s.bytes().fold(0, |acc, b| acc * 10 + u32::from(b - b'0')))
}

/// Splits off the first `n` bytes if they exist and fall on a character boundary (the
/// input may be arbitrary Unicode typed by a human; slicing mid-character would panic).
fn take(s: &str, n: usize) -> Result<(&str, &str), ParseError> {
    if s.is_char_boundary(n) && n <= s.len() {
        Ok(s.split_at(n))
    } else {
        Err(ParseError::Format)
    }
}

fn expect(s: &str, prefix: char) -> Result<&str, ParseError> {
    s.strip_prefix(prefix).ok_or(ParseError::Format)
}

/// `YYYY-MM-DD` at the start of `s`; returns the date and the rest.
fn parse_date_prefix(s: &str) -> Result<(Date, &str), ParseError> {
    let (y, s) = take(s, 4)?;
    let s = expect(s, '-')?;
    let (m, s) = take(s, 2)?;
    let s = expect(s, '-')?;
    let (d, rest) = take(s, 2)?;
    // Four digits always fit an i32, so the cast cannot truncate.
    let year = digits(y, 4)? as i32;
    let month = digits(m, 2)?;
    let day = digits(d, 2)?;
    if year == 0 || !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return Err(ParseError::OutOfRange);
    }
    Ok((Date { year, month, day }, rest))
}

/// A calendar date written `YYYY-MM-DD`, e.g. `2024-02-29`.
pub(crate) fn parse_date(s: &str) -> Result<Date, ParseError> {
    match parse_date_prefix(s)? {
        (date, "") => Ok(date),
        _ => Err(ParseError::Format),
    }
}

/// `HH:MM` or `HH:MM:SS` at the start of `s` (seconds mandatory if `seconds_required`);
/// returns seconds since midnight and the rest.
fn parse_clock_prefix(s: &str, seconds_required: bool) -> Result<(u32, &str), ParseError> {
    let (h, s) = take(s, 2)?;
    let s = expect(s, ':')?;
    let (m, mut rest) = take(s, 2)?;
    let hour = digits(h, 2)?;
    let minute = digits(m, 2)?;
    let mut second = 0;
    if let Some(after) = rest.strip_prefix(':') {
        let (sec, after) = take(after, 2)?;
        second = digits(sec, 2)?;
        rest = after;
    } else if seconds_required {
        return Err(ParseError::Format);
    }
    // Leap seconds (:60) are rejected: nothing a human answers needs one, and accepting
    // them would make two different strings name the same instant.
    if hour > 23 || minute > 59 || second > 59 {
        return Err(ParseError::OutOfRange);
    }
    Ok((hour * 3600 + minute * 60 + second, rest))
}

/// A time of day written `HH:MM` or `HH:MM:SS` (24-hour clock), as seconds since midnight.
pub(crate) fn parse_time_of_day(s: &str) -> Result<u32, ParseError> {
    match parse_clock_prefix(s, false)? {
        (secs, "") => Ok(secs),
        _ => Err(ParseError::Format),
    }
}

/// Days from 1970-01-01 to the given date (negative before it), by Howard Hinnant's
/// `days_from_civil` algorithm: exact for every proleptic Gregorian date.
pub(crate) fn days_from_civil(year: i32, month: u32, day: u32) -> i64 {
    let y = i64::from(year) - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y - era * 400; // [0, 399]
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1; // [0, 365]
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // [0, 146096]
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`]: (year, month, day) for days since 1970-01-01.
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097; // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let day = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let month = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let year = yoe + era * 400 + i64::from(month <= 2);
    // day and month are in the small ranges noted above, so the casts cannot truncate.
    (year, month as u32, day as u32)
}

/// An RFC 3339 date-time with a mandatory offset, e.g. `2024-05-01T09:30:00+02:00`,
/// `2024-05-01T07:30:00.123456Z`. Lower-case `t`/`z` are allowed as RFC 3339 says; the
/// space separator it also tolerates is not, since the SDK never sends it.
pub(crate) fn parse_rfc3339(s: &str) -> Result<Instant, ParseError> {
    let (date, rest) = parse_date_prefix(s)?;
    let rest = rest
        .strip_prefix('T')
        .or_else(|| rest.strip_prefix('t'))
        .ok_or(ParseError::Format)?;
    let (clock, mut rest) = parse_clock_prefix(rest, true)?;

    let mut nanos = 0u32;
    if let Some(after) = rest.strip_prefix('.') {
        let len = after.bytes().take_while(u8::is_ascii_digit).count();
        if len == 0 {
            return Err(ParseError::Format);
        }
        // Python writes microseconds (6 digits); keep up to nanoseconds and ignore the
        // rest, which no comparison a human makes can depend on.
        for (i, b) in after
            .bytes()
            .take(9)
            .take_while(u8::is_ascii_digit)
            .enumerate()
        {
            nanos += u32::from(b - b'0') * 10u32.pow(8 - i as u32);
        }
        rest = &after[len..];
    }

    let offset_secs: i64 = match rest {
        "Z" | "z" => 0,
        _ => {
            let (sign, hhmm) = if let Some(r) = rest.strip_prefix('+') {
                (1, r)
            } else if let Some(r) = rest.strip_prefix('-') {
                (-1, r)
            } else {
                return Err(ParseError::Format);
            };
            let (h, r) = take(hhmm, 2)?;
            let m = expect(r, ':')?;
            let (h, m) = (digits(h, 2)?, digits(m, 2)?);
            if h > 23 || m > 59 {
                return Err(ParseError::OutOfRange);
            }
            sign * i64::from(h * 3600 + m * 60)
        }
    };

    let local = days_from_civil(date.year, date.month, date.day) * SECS_PER_DAY + i64::from(clock);
    Ok(Instant {
        secs: local - offset_secs,
        nanos,
    })
}

/// The earliest and latest instants a four-digit-year RFC 3339 string can name, in
/// milliseconds since the epoch (0001-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z).
pub(crate) const MIN_UNIX_MILLIS: i64 = -62_135_596_800_000;
pub(crate) const MAX_UNIX_MILLIS: i64 = 253_402_300_799_999;

/// Formats milliseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.mmmZ`, clamped to the
/// four-digit-year range so the result always parses back.
pub(crate) fn format_rfc3339_millis(unix_millis: i64) -> String {
    let ms = unix_millis.clamp(MIN_UNIX_MILLIS, MAX_UNIX_MILLIS);
    let days = ms.div_euclid(SECS_PER_DAY * 1000);
    let ms_of_day = ms.rem_euclid(SECS_PER_DAY * 1000);
    let (year, month, day) = civil_from_days(days);
    let secs = ms_of_day / 1000;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        ms_of_day % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_check_month_lengths_and_leap_years() {
        assert_eq!(
            parse_date("2024-02-29"),
            Ok(Date {
                year: 2024,
                month: 2,
                day: 29
            })
        );
        assert!(parse_date("2000-02-29").is_ok(), "divisible by 400 is leap");
        assert_eq!(parse_date("1900-02-29"), Err(ParseError::OutOfRange));
        assert_eq!(parse_date("2023-02-29"), Err(ParseError::OutOfRange));
        assert_eq!(parse_date("2024-04-31"), Err(ParseError::OutOfRange));
        assert!(parse_date("2024-12-31").is_ok());
        assert_eq!(parse_date("2024-13-01"), Err(ParseError::OutOfRange));
        assert_eq!(parse_date("2024-00-10"), Err(ParseError::OutOfRange));
        assert_eq!(parse_date("2024-01-00"), Err(ParseError::OutOfRange));
        assert_eq!(parse_date("0000-01-01"), Err(ParseError::OutOfRange));
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
            "2024-01-01T00:00:00Z",
            "+024-01-01",
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
        for s in [
            "9:30",
            "09:30:",
            "09:30:0",
            "0930",
            "09:30 ",
            "09:30:00.5",
            "09:30Z",
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
        assert_eq!(utc.secs, 1_714_548_600);
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z").unwrap().secs, 0);
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z").unwrap().secs, -1);
    }

    #[test]
    fn rfc3339_fractions() {
        let t = parse_rfc3339("2024-05-01T07:30:00.123456+00:00").unwrap();
        assert_eq!(t.nanos, 123_456_000);
        let t = parse_rfc3339("2024-05-01T07:30:00.5Z").unwrap();
        assert_eq!(t.nanos, 500_000_000);
        let t = parse_rfc3339("2024-05-01T07:30:00.1234567891234Z").unwrap();
        assert_eq!(t.nanos, 123_456_789);
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
        ] {
            assert_eq!(parse_rfc3339(s), Err(ParseError::Format), "{s:?}");
        }
        assert_eq!(
            parse_rfc3339("2023-02-29T00:00:00Z"),
            Err(ParseError::OutOfRange)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01T24:00:00Z"),
            Err(ParseError::OutOfRange)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01T07:30:00+24:00"),
            Err(ParseError::OutOfRange)
        );
    }

    #[test]
    fn civil_round_trip() {
        for days in [-719_162, -1, 0, 1, 11_016, 19_782, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y as i32, m, d), days);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }

    #[test]
    fn formatting_round_trips_and_clamps() {
        assert_eq!(format_rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_rfc3339_millis(1_714_548_600_123),
            "2024-05-01T07:30:00.123Z"
        );
        assert_eq!(format_rfc3339_millis(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(format_rfc3339_millis(i64::MIN), "0001-01-01T00:00:00.000Z");
        assert_eq!(format_rfc3339_millis(i64::MAX), "9999-12-31T23:59:59.999Z");
        for ms in [MIN_UNIX_MILLIS, -1, 0, 1_714_548_600_123, MAX_UNIX_MILLIS] {
            let t = parse_rfc3339(&format_rfc3339_millis(ms)).unwrap();
            assert_eq!(t.secs * 1000 + i64::from(t.nanos / 1_000_000), ms);
        }
    }
}
