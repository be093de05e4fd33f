//! The scheduler's clock: the wall clock in production, a `ManualClock` in tests, so that no
//! test waits for real minutes to see a job fire.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio::sync::watch;

/// A boxed future, so that `Clock` stays usable as `Arc<dyn Clock>`.
pub type Sleep<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What the scheduler needs of time: the current instant and a way to wait for a later one.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Timestamp;
    /// Resolves once `now() >= at` (at once if it already is).
    fn sleep_until(&self, at: Timestamp) -> Sleep<'_>;
}

/// The machine's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

/// The longest single sleep: the wall clock can be stepped (NTP, a suspended laptop) while
/// tokio's monotonic timer runs on, so a long wait is re-measured against the wall clock at
/// least this often. One sleeper wakes once a minute, whatever the number of jobs.
const MAX_SLEEP: Duration = Duration::from_secs(60);

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn sleep_until(&self, at: Timestamp) -> Sleep<'_> {
        Box::pin(async move {
            loop {
                let left = at.duration_since(Timestamp::now());
                if left <= SignedDuration::ZERO {
                    return;
                }
                let left = Duration::try_from(left).unwrap_or(MAX_SLEEP);
                tokio::time::sleep(left.min(MAX_SLEEP)).await;
            }
        })
    }
}

/// A clock that moves only when told to; every sleeper whose instant is reached wakes.
#[derive(Debug)]
pub struct ManualClock {
    now: watch::Sender<Timestamp>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: watch::Sender::new(start),
        }
    }

    /// Sets the time (forward or back) and wakes the sleepers it passes.
    pub fn set(&self, now: Timestamp) {
        self.now.send_replace(now);
    }

    /// Moves the time forward by `by` and wakes the sleepers it passes; returns the new time.
    /// Saturates at the last representable instant.
    pub fn advance(&self, by: SignedDuration) -> Timestamp {
        let next = self.now().saturating_add(by).unwrap_or(Timestamp::MAX);
        self.set(next);
        next
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.borrow()
    }

    fn sleep_until(&self, at: Timestamp) -> Sleep<'_> {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // The sender is `self`, borrowed for as long as this future lives, so it cannot
            // close under us; an error would only mean "no further time will come".
            let _ = rx.wait_for(|now| *now >= at).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures_util::FutureExt;

    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(ts("2026-01-01T00:00:00Z"));
        assert_eq!(clock.now(), ts("2026-01-01T00:00:00Z"));
        assert_eq!(
            clock.advance(SignedDuration::from_mins(90)),
            ts("2026-01-01T01:30:00Z")
        );
        assert_eq!(clock.now(), ts("2026-01-01T01:30:00Z"));
        clock.set(ts("2025-12-31T23:00:00Z"));
        assert_eq!(clock.now(), ts("2025-12-31T23:00:00Z"));
    }

    #[test]
    fn a_sleeper_wakes_when_its_instant_is_passed_not_before() {
        let clock = ManualClock::new(ts("2026-01-01T00:00:00Z"));
        let mut sleep = clock.sleep_until(ts("2026-01-01T00:10:00Z"));
        assert!((&mut sleep).now_or_never().is_none());
        clock.advance(SignedDuration::from_mins(9));
        assert!((&mut sleep).now_or_never().is_none(), "woke a minute early");
        clock.advance(SignedDuration::from_mins(5));
        assert!(sleep.now_or_never().is_some(), "did not wake once passed");
    }

    #[test]
    fn sleeping_until_the_past_returns_at_once() {
        let clock = ManualClock::new(ts("2026-01-01T00:00:00Z"));
        assert!(
            clock
                .sleep_until(ts("2025-01-01T00:00:00Z"))
                .now_or_never()
                .is_some()
        );
        assert!(
            SystemClock
                .sleep_until(ts("2020-01-01T00:00:00Z"))
                .now_or_never()
                .is_some()
        );
    }

    #[tokio::test]
    async fn sleepers_in_other_tasks_wake_in_order_as_the_clock_is_advanced() {
        let clock = Arc::new(ManualClock::new(ts("2026-01-01T00:00:00Z")));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for minutes in [30, 10, 20] {
            let (clock, tx) = (clock.clone(), tx.clone());
            let at = ts("2026-01-01T00:00:00Z")
                .checked_add(SignedDuration::from_mins(minutes))
                .unwrap();
            tokio::spawn(async move {
                clock.sleep_until(at).await;
                tx.send(minutes).unwrap();
            });
        }
        let bound = Duration::from_secs(10);
        for (step, expect) in [(15, 10), (10, 20), (10, 30)] {
            clock.advance(SignedDuration::from_mins(step));
            let woke = tokio::time::timeout(bound, rx.recv()).await.unwrap();
            assert_eq!(woke, Some(expect));
        }
        assert!(rx.try_recv().is_err(), "a sleeper woke twice");
    }
}
