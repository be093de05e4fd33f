//! Waiting for a condition: the one way tests synchronise with what runs elsewhere (a child
//! process, a server task, a file another process writes). A test never sleeps for a time it
//! hopes is long enough: it polls the condition, and a bound turns a hang or a regression into
//! a failure that names what was awaited and what was last seen.
//!
//! The bound is generous ([`PATIENCE`]): on a loaded two-core machine a slow condition is
//! still met, and only a condition that never holds pays it.

use std::time::{Duration, Instant};

/// How long a condition may take before the test fails. It only turns a hang into a failure;
/// no test's outcome depends on it.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// How often [`eventually`] checks.
const EVERY: Duration = Duration::from_millis(20);

/// Calls `check` every `every` until it gives `Ok`, and returns that. Once `within` has
/// passed, fails the test with the last `Err`: what `check` saw, naming what it awaited. A
/// `check` that itself hangs is cut off at the bound too.
pub async fn wait_until<T>(
    within: Duration,
    every: Duration,
    mut check: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        let saw = match tokio::time::timeout_at(deadline.into(), check()).await {
            Ok(Ok(v)) => return v,
            Ok(Err(saw)) => saw,
            Err(_) => "the check itself did not finish".to_owned(),
        };
        if Instant::now() >= deadline {
            panic!("gave up after {within:?}: {saw}");
        }
        tokio::time::sleep(every).await;
    }
}

/// [`wait_until`] with the usual bound ([`PATIENCE`]), for a check that gives a value once
/// the condition holds (`Some`, or `true` through `bool::then_some`); `what` names the
/// condition in the failure.
pub async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    wait_until(PATIENCE, EVERY, async || {
        check().await.ok_or_else(|| format!("waiting for {what}"))
    })
    .await
}

/// [`wait_until`] for tests without a runtime: blocks the thread between checks.
pub fn wait_until_blocking<T>(
    within: Duration,
    every: Duration,
    check: impl FnMut() -> Result<T, String>,
) -> T {
    poll_blocking(within, every, check)
        .unwrap_or_else(|saw| panic!("gave up after {within:?}: {saw}"))
}

/// Calls `check` every `every` until it gives `Ok` or `within` has passed; the last `Err`
/// when it never did.
pub(crate) fn poll_blocking<T>(
    within: Duration,
    every: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + within;
    loop {
        let saw = match check() {
            Ok(v) => return Ok(v),
            Err(saw) => saw,
        };
        if Instant::now() >= deadline {
            return Err(saw);
        }
        std::thread::sleep(every);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_condition_that_comes_true_returns_its_value() {
        let mut n = 0;
        let got = wait_until(PATIENCE, Duration::from_millis(1), async || {
            n += 1;
            if n == 3 {
                Ok(n)
            } else {
                Err(format!("n is {n}"))
            }
        })
        .await;
        assert_eq!(got, 3);
    }

    #[tokio::test]
    async fn a_condition_that_never_holds_fails_with_what_was_seen() {
        let short = tokio::spawn(async {
            wait_until(
                Duration::from_millis(50),
                Duration::from_millis(5),
                async || Err::<(), _>("waiting for the sky: still grey".to_owned()),
            )
            .await;
        });
        let msg = short.await.unwrap_err().into_panic();
        let msg = msg.downcast_ref::<String>().unwrap();
        assert!(msg.contains("waiting for the sky: still grey"), "{msg}");
    }

    #[tokio::test]
    async fn eventually_returns_the_first_value() {
        let mut n = 0;
        let got = eventually("the third call", async || {
            n += 1;
            (n == 3).then_some(n)
        })
        .await;
        assert_eq!(got, 3);
    }

    #[tokio::test]
    async fn a_check_that_hangs_is_cut_off_at_the_bound() {
        let hung = tokio::spawn(async {
            wait_until(
                Duration::from_millis(50),
                Duration::from_millis(5),
                async || std::future::pending::<Result<(), String>>().await,
            )
            .await;
        });
        let msg = hung.await.unwrap_err().into_panic();
        let msg = msg.downcast_ref::<String>().unwrap();
        assert!(msg.contains("did not finish"), "{msg}");
    }

    #[test]
    fn the_blocking_wait_gives_the_last_thing_it_saw() {
        assert_eq!(
            poll_blocking(Duration::from_millis(30), Duration::from_millis(5), || {
                Err::<(), _>("nope".to_owned())
            }),
            Err("nope".to_owned())
        );
        assert_eq!(
            wait_until_blocking(PATIENCE, Duration::from_millis(1), || Ok::<_, String>(7)),
            7
        );
    }
}
