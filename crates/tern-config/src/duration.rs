//! [`parse_duration`]: the durations of the configuration and of `tern ask`, `"30s"`, `"2h"`,
//! `"1h30m"`, read by `humantime`.

use std::time::Duration;

/// Parses a duration: one or more `<number><unit>` parts (`"30s"`, `"5m"`, `"2h"`, `"1d"`,
/// `"1h30m"`, `"500ms"`; humantime's longer unit names and spaces between parts work too).
/// Zero and overflowing durations are refused.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let duration = humantime::parse_duration(text).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => format!("{text:?} is too long a duration"),
        e => format!(
            "{text:?} is not a duration ({e}): write a number and a unit, s, m, h or d (e.g. \"30m\", \"2h\", \"1h30m\")"
        ),
    })?;
    if duration.is_zero() {
        return Err(format!("{text:?} must be longer than zero"));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_forms_parse() {
        for (text, secs) in [
            ("30s", 30),
            ("5m", 300),
            ("30m", 1800),
            ("1h", 3600),
            ("2h", 7200),
            ("24h", 86_400),
            ("1d", 86_400),
            ("2d", 172_800),
            ("1h30m", 5400),
            (" 5m ", 300),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_secs(secs)),
                "{text}"
            );
        }
    }

    #[test]
    fn humantime_s_wider_forms_parse_too() {
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2 days"), Ok(Duration::from_secs(172_800)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
    }

    #[test]
    fn malformed_zero_and_overflowing_durations_are_refused() {
        for text in ["", "5", "m", "5x", "-1h", "h5", "1h-30m", "off"] {
            let err = parse_duration(text).unwrap_err();
            assert!(err.contains("not a duration"), "{text:?}: {err}");
        }
        assert!(
            parse_duration("0m")
                .unwrap_err()
                .contains("longer than zero")
        );
        for text in ["99999999999999999999d", "999999999999999999d"] {
            let err = parse_duration(text).unwrap_err();
            assert!(err.contains("too long"), "{text:?}: {err}");
        }
    }
}
