//! Times as the commands print them.

/// A timestamp in milliseconds as `YYYY-MM-DD HH:MM` UTC (`?` outside jiff's years
/// -9999–9999, which no stored time reaches).
pub fn when(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M").to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_utc_times() {
        assert_eq!(super::when(0), "1970-01-01 00:00");
        assert_eq!(super::when(951_782_400_000), "2000-02-29 00:00");
        assert_eq!(super::when(1_795_000_000_000), "2026-11-18 11:06");
        assert_eq!(super::when(-60_000), "1969-12-31 23:59");
        assert_eq!(super::when(i64::MAX), "?");
    }
}
