//! The wall clock as tern stores it: milliseconds since the Unix epoch in an `i64`.

use std::time::{SystemTime, UNIX_EPOCH};

/// The current time in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    unix_ms(SystemTime::now())
}

/// `time` in milliseconds since the Unix epoch: negative before it, saturating at the ends
/// of `i64` (about 292 million years away).
pub fn unix_ms(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn milliseconds_on_both_sides_of_the_epoch() {
        assert_eq!(unix_ms(UNIX_EPOCH), 0);
        assert_eq!(
            unix_ms(UNIX_EPOCH + Duration::from_millis(1_714_548_600_123)),
            1_714_548_600_123
        );
        assert_eq!(unix_ms(UNIX_EPOCH - Duration::from_millis(1500)), -1500);
    }

    #[test]
    fn now_is_after_this_code_was_written() {
        // 2025-01-01T00:00:00Z: a clock behind it is broken, or the function is.
        assert!(now_ms() > 1_735_689_600_000);
    }
}
