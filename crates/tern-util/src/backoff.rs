//! [`Backoff`]: how long to wait before retry number `n` — exponential, capped, jittered.
//!
//! Every retry loop in tern (model calls, webhooks, inbox notifications, the remote inbox
//! follower, resumed turns, `tern ask`) uses this one rule, so they all behave alike: the
//! first retry waits `base`, each further one twice as long, never longer than `max`, and
//! each delay is cut by a random part of up to a quarter so that many clients that failed
//! together do not retry together.

use std::time::Duration;

/// The largest share of a delay that jitter may cut off.
const JITTER: u32 = 4;

/// Exponential backoff with jitter and a cap; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
}

impl Backoff {
    /// Delays from `base` doubling up to `max`. A `base` longer than `max` wins: a poll
    /// interval chosen longer than the usual cap is never shortened by it.
    pub const fn new(base: Duration, max: Duration) -> Self {
        Backoff { base, max }
    }

    /// The first delay.
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The cap.
    pub const fn max(&self) -> Duration {
        self.max
    }

    /// The delay before retry `attempt` (1-based) without jitter: `base · 2^(attempt-1)`,
    /// at most `max` (or `base` if that is longer). Attempt 0 counts as 1.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        self.base
            .saturating_mul(1 << doublings)
            .min(self.max.max(self.base))
    }

    /// The delay before retry `attempt` (1-based): [`Backoff::ceiling`] less a random part
    /// of up to a quarter of it, so never longer than the cap.
    pub fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self.ceiling(attempt);
        ceiling.saturating_sub((ceiling / JITTER).mul_f64(fastrand::f64()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn ceilings_double_up_to_the_cap() {
        let b = Backoff::new(s(1), s(60));
        let ceilings: Vec<_> = (1..=8).map(|n| b.ceiling(n)).collect();
        assert_eq!(
            ceilings,
            [s(1), s(2), s(4), s(8), s(16), s(32), s(60), s(60)]
        );
        assert_eq!(b.ceiling(0), s(1));
        assert_eq!(b.ceiling(u32::MAX), s(60));
        assert_eq!(Backoff::new(s(30), s(3600)).ceiling(3), s(120));
    }

    #[test]
    fn a_base_longer_than_the_cap_is_not_shortened() {
        let b = Backoff::new(s(7200), s(3600));
        assert_eq!(b.ceiling(1), s(7200));
        assert_eq!(b.ceiling(5), s(7200));
    }

    #[test]
    fn huge_values_saturate_instead_of_panicking() {
        let b = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!(b.ceiling(40), Duration::MAX);
        assert!(b.delay(40) >= Duration::MAX - Duration::MAX / 4);
    }

    #[test]
    fn jitter_stays_within_a_quarter_below_the_ceiling_and_varies() {
        let b = Backoff::new(Duration::from_millis(400), s(30));
        let mut seen = std::collections::HashSet::new();
        for attempt in 1..=10 {
            let ceiling = b.ceiling(attempt);
            for _ in 0..50 {
                let d = b.delay(attempt);
                assert!(d <= ceiling, "{d:?} > {ceiling:?}");
                assert!(
                    d >= ceiling - ceiling / 4,
                    "{d:?} too short for {ceiling:?}"
                );
                seen.insert(d);
            }
        }
        // 500 draws over a range of milliseconds to seconds: all alike would mean no jitter.
        assert!(seen.len() > 100, "only {} distinct delays", seen.len());
    }
}
