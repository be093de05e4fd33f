//! The inbox's background work in a gateway: delivering notifications and expiring
//! requests. Both start with [`crate::Gateway::spawn_upkeep`] and stop with its token.
//!
//! # Notifications ([`deliver_notifications`])
//!
//! A loop: take the due rows of the outbox ([`tern_inbox::Inbox::due_notifications`], rows
//! left pending by an earlier process included), deliver each (a batch at once), then sleep
//! until the next row is due, the service wakes the loop for a new request, or a minute
//! passes. Each attempt POSTs the stored body with tern's webhook headers — `X-Tern-Event:
//! inbox.request.created`, `X-Tern-Timestamp`, `X-Tern-Signature` ([`tern_hooks::webhook_signature`],
//! so receivers verify both kinds the same way) and `X-Tern-Delivery` (the row id) — and
//! records it: a 2xx is delivered; a connection error, a timeout, a 5xx or a 429 is retried
//! after [`retry_delay`] until the target's `max_attempts`; another status gives up at once
//! (sending the same request again cannot help), as does a URL no longer configured.
//!
//! # Expiry ([`expire_requests`])
//!
//! Once at start, then whenever the next expiry is due, the service wakes the loop for a new
//! request with an expiry time ([`tern_inbox::Inbox::expiry_woken`]: it may be due before
//! the one the loop sleeps for), or a minute passes:
//! [`tern_inbox::Inbox::expire_overdue`]. (Deciding, answering, withdrawing or reading an
//! overdue request expires it too, so the sweep is never late for an agent or a human.)

use std::time::Duration;

use futures_util::future::join_all;
use tern_hooks::{error_chain, signed_post};
use tern_inbox::Inbox;
use tern_inbox::notify::{Delivery, EVENT, retry_delay};
use tern_store::now_ms;
use tokio_util::sync::CancellationToken;

/// Rows delivered at once.
const BATCH: u32 = 16;
/// The longest sleep between two looks at the outbox or the expiries.
const IDLE: Duration = Duration::from_secs(60);

/// Starts both loops.
pub(crate) fn spawn(upkeep: &crate::Upkeep, inbox: Inbox) {
    let stop = upkeep.stop_token();
    upkeep.spawn(expire_requests(inbox.clone(), stop.clone()));
    if !inbox.notifications().targets.is_empty() {
        upkeep.spawn(deliver_notifications(inbox, stop.clone()));
    }
}

/// How long to sleep until `due_ms`, at most [`IDLE`].
fn until(due_ms: Option<i64>) -> Duration {
    match due_ms {
        Some(due) => {
            let ms = u64::try_from(due.saturating_sub(now_ms())).unwrap_or(0);
            Duration::from_millis(ms).min(IDLE)
        }
        None => IDLE,
    }
}

/// The expiry sweeper; see the module docs.
pub(crate) async fn expire_requests(inbox: Inbox, stop: CancellationToken) {
    loop {
        match inbox.expire_overdue(now_ms()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(requests = n, "expired overdue inbox requests"),
            Err(e) => tracing::error!(error = %e, "cannot expire overdue inbox requests"),
        }
        let next = inbox.next_expiry().await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot read the next inbox expiry");
            None
        });
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = inbox.expiry_woken() => {}
            _ = tokio::time::sleep(until(next)) => {}
        }
    }
}

/// The notification worker; see the module docs.
pub(crate) async fn deliver_notifications(inbox: Inbox, stop: CancellationToken) {
    let client = match reqwest::Client::builder()
        // A redirected POST would become a GET or go somewhere not configured.
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("tern/", env!("CARGO_PKG_VERSION")))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the HTTP client; inbox notifications are off");
            return;
        }
    };
    loop {
        let due = match inbox.due_notifications(now_ms(), BATCH).await {
            Ok(due) => due,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the inbox notification outbox");
                Vec::new()
            }
        };
        let full = due.len() == BATCH as usize;
        join_all(due.into_iter().map(|d| attempt(&client, &inbox, d))).await;
        if full {
            continue;
        }
        let next = inbox.next_notification_due().await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot read the inbox notification outbox");
            None
        });
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = inbox.notifications().woken() => {}
            _ = tokio::time::sleep(until(next)) => {}
        }
    }
}

/// One attempt at one notification, recorded.
async fn attempt(client: &reqwest::Client, inbox: &Inbox, d: Delivery) {
    let Some(target) = inbox.notifications().target(&d.url).cloned() else {
        let why = "the URL is no longer configured in [[inbox.notify]]";
        tracing::warn!(notification = %d.id, "inbox notification dropped: {why}");
        record(inbox.notification_failed(&d.id, why, None).await);
        return;
    };
    let sent = signed_post(client, &d.url, &target.secret, EVENT, &d.id, d.body.clone())
        .timeout(target.timeout)
        .send()
        .await;
    let attempts = d.attempts.saturating_add(1);
    let error = match sent {
        Ok(resp) if resp.status().is_success() => {
            tracing::debug!(notification = %d.id, request = %d.request_id, attempts, "inbox notification delivered");
            record(inbox.notification_delivered(&d.id).await);
            return;
        }
        Ok(resp) if resp.status().is_server_error() || resp.status().as_u16() == 429 => {
            format!("HTTP {}", resp.status())
        }
        Ok(resp) => {
            let why = format!("HTTP {}; not retried", resp.status());
            tracing::warn!(notification = %d.id, "inbox notification refused: {why}");
            record(inbox.notification_failed(&d.id, &why, None).await);
            return;
        }
        Err(e) => error_chain(&e),
    };
    let retry_at = (attempts < target.max_attempts).then(|| {
        let delay = retry_delay(target.retry_base, attempts);
        now_ms().saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX))
    });
    if retry_at.is_none() {
        tracing::warn!(notification = %d.id, attempts, "inbox notification failed, giving up: {error}");
    } else {
        tracing::debug!(notification = %d.id, attempts, "inbox notification attempt failed ({error}); will retry");
    }
    record(inbox.notification_failed(&d.id, &error, retry_at).await);
}

fn record(result: tern_inbox::service::Result<()>) {
    if let Err(e) = result {
        tracing::error!(error = %e, "cannot record an inbox notification attempt");
    }
}
