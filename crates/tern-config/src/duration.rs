//! [`parse_duration`]: the durations of the configuration, `"30s"`, `"2h"`, `"1h30m"`.

use std::time::Duration;

/// Parses a duration: one or more `<number><unit>` parts, unit `s`, `m`, `h` or `d`
/// (`"30m"`, `"2h"`, `"1d"`, `"1h30m"`). Zero and overflowing durations are refused.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad = || {
        format!(
            "{text:?} is not a duration: write a number and a unit, s, m, h or d (e.g. \"30m\", \"2h\", \"1h30m\")"
        )
    };
    if text.is_empty() {
        return Err(bad());
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
        let unit = rest[digits..].chars().next().ok_or_else(bad)?;
        let seconds = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        total = number
            .checked_mul(seconds)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(|| format!("{text:?} is too long a duration"))?;
        rest = &rest[digits + unit.len_utf8()..];
    }
    if total == 0 {
        return Err(format!("{text:?} must be longer than zero"));
    }
    Ok(Duration::from_secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for (text, secs) in [
            ("30s", 30),
            ("30m", 1800),
            ("2h", 7200),
            ("1d", 86_400),
            ("1h30m", 5400),
            (" 5m ", 300),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_secs(secs)),
                "{text}"
            );
        }
        for text in ["", "5", "m", "5x", "1.5h", "-1h", "h5", "1h 30m"] {
            assert!(parse_duration(text).is_err(), "{text:?} parsed");
        }
        assert!(
            parse_duration("0m")
                .unwrap_err()
                .contains("longer than zero")
        );
        assert!(
            parse_duration("99999999999999999999d")
                .unwrap_err()
                .contains("not a duration")
        );
        assert!(
            parse_duration("999999999999999999d")
                .unwrap_err()
                .contains("too long")
        );
    }
}
