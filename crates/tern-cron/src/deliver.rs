//! Webhook delivery of a run's result: one JSON POST, retried with backoff on a network error
//! or a 5xx/429 answer, never following redirects (the URL is where the user said).
//! Delivery is at least once: a gateway stopped after the POST but before recording it sends
//! it again at the next start, with the same `X-Tern-Delivery` id for the receiver to drop.

use std::time::Duration;

use serde_json::json;
use tern_store::cron::{CronJob, CronOccurrence};
use tern_util::Backoff;

use crate::jobs::{occurrence_view, rfc3339};

/// Attempts per delivery.
const ATTEMPTS: u32 = 5;
const BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
const TIMEOUT: Duration = Duration::from_secs(15);

/// Why a delivery failed, after its attempts.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error("the webhook answered {0}")]
    Status(u16),
    #[error("the webhook could not be reached: {0}")]
    Unreachable(String),
}

/// The HTTP client deliveries use.
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(TIMEOUT)
        .build()
        .unwrap_or_default()
}

/// The body POSTed for a run.
pub fn payload(job: &CronJob, o: &CronOccurrence) -> serde_json::Value {
    json!({
        "event": "cron_run_finished",
        "job": {"id": job.id, "name": job.name},
        "occurrence": occurrence_view(o),
        "delivered_at": rfc3339(tern_util::now_ms()),
    })
}

/// POSTs the run's result to `url`, retrying transient failures.
pub(crate) async fn post(
    http: &reqwest::Client,
    url: &str,
    job: &CronJob,
    o: &CronOccurrence,
) -> Result<(), DeliveryError> {
    let body = payload(job, o);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let sent = http
            .post(url)
            .header("X-Tern-Event", "cron_run_finished")
            .header("X-Tern-Delivery", format!("cron-{}-{}", o.id, o.attempt))
            .json(&body)
            .send()
            .await;
        let err = match sent {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) => {
                let s = r.status();
                if !(s.is_server_error() || s.as_u16() == 429) {
                    return Err(DeliveryError::Status(s.as_u16()));
                }
                DeliveryError::Status(s.as_u16())
            }
            Err(e) => DeliveryError::Unreachable(e.without_url().to_string()),
        };
        if attempt >= ATTEMPTS {
            return Err(err);
        }
        tokio::time::sleep(BACKOFF.delay(attempt)).await;
    }
}
