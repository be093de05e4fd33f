//! Notifications: every new request is announced to the `[[inbox.notify]]` URLs, with a link
//! to its page in the web inbox.
//!
//! # The flow at a glance
//!
//! 1. The transaction that creates a request also inserts one `inbox_notifications` row per
//!    configured URL ([`enqueue`]), holding the exact JSON to send:
//!    `{type: "inbox.request.created", requestId, kind, projectName, taskId, summary,
//!    url: "<public_url>/inbox/requests/<id>", createdAt}`. The request and its
//!    notifications commit together, so none is lost to a crash in between. (A request the
//!    policy approves at once needs no human and is not announced.)
//! 2. After the commit the service wakes the delivery worker ([`Notifications::wake`]); the
//!    gateway runs it. The worker takes due rows ([`crate::Inbox::due_notifications`]), POSTs each
//!    body signed like tern's webhooks (`X-Tern-Signature: sha256=HMAC-SHA256(secret,
//!    "<X-Tern-Timestamp>.<body>")`, `X-Tern-Delivery` = the row id, the same on every
//!    attempt), and records the outcome: delivered ([`crate::Inbox::notification_delivered`]) or
//!    failed with the error and the next attempt after an exponential backoff
//!    ([`crate::Inbox::notification_failed`], [`retry_delay`]); after `max_attempts` it gives up
//!    and the row stays `failed` with its last error.
//! 3. Rows are durable: a gateway that stops (or dies) before delivering picks the pending
//!    rows up again when it starts. Delivery is at least once; receivers drop duplicates by
//!    `X-Tern-Delivery`.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tern_config::InboxNotifyConfig;
use tern_util::Backoff;

use crate::error::Result;
use crate::outcome::Timestamp;
pub use crate::store::notifications::{Delivery, NotificationRow};
use crate::store::{self, Conn};

/// The `type` of the notification body, also sent as `X-Tern-Event`.
pub const EVENT: &str = "inbox.request.created";

/// The longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// One configured URL.
#[derive(Clone)]
pub struct NotifyTarget {
    pub url: String,
    /// The HMAC-SHA256 key.
    pub secret: String,
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// The first retry's delay; doubling after each failure, at most [`MAX_BACKOFF`].
    pub retry_base: Duration,
    /// Per attempt.
    pub timeout: Duration,
}

// Hand-written so the secret never ends up in logs.
impl std::fmt::Debug for NotifyTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifyTarget")
            .field("url", &tern_config::mask_url(&self.url))
            .field("max_attempts", &self.max_attempts)
            .field("retry_base", &self.retry_base)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl NotifyTarget {
    pub fn from_config(c: &InboxNotifyConfig) -> Self {
        NotifyTarget {
            url: c.url.trim().to_owned(),
            secret: c.secret.clone(),
            max_attempts: c.max_attempts.max(1),
            retry_base: Duration::from_millis(c.retry_base_ms),
            timeout: Duration::from_millis(c.timeout_ms),
        }
    }
}

/// The notification targets and the base of the links they carry; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct Notifications {
    pub targets: Vec<NotifyTarget>,
    /// The base of request links, e.g. `https://inbox.example` (no trailing slash).
    pub public_url: String,
    wake: Arc<tokio::sync::Notify>,
}

impl Notifications {
    pub fn new(targets: Vec<NotifyTarget>, public_url: &str) -> Self {
        Notifications {
            targets,
            public_url: public_url.trim_end_matches('/').to_owned(),
            wake: Arc::default(),
        }
    }

    /// The target configured for `url`, if it still is.
    pub fn target(&self, url: &str) -> Option<&NotifyTarget> {
        self.targets.iter().find(|t| t.url == url)
    }

    /// Tells the worker there may be new work.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Resolves at the next [`Notifications::wake`] (or at once if one came since the last
    /// wait).
    pub async fn woken(&self) {
        self.wake.notified().await;
    }
}

/// The wait before attempt `attempts + 1`, after `attempts` failed ones (1-based): the
/// shared [`Backoff`] from `base`, doubling, at most [`MAX_BACKOFF`], jittered.
pub fn retry_delay(base: Duration, attempts: u32) -> Duration {
    Backoff::new(base, MAX_BACKOFF).delay(attempts)
}

/// The notification body.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    #[serde(rename = "type")]
    kind_of_event: &'static str,
    request_id: &'a str,
    kind: &'a str,
    project_name: &'a str,
    task_id: &'a str,
    summary: &'a str,
    url: String,
    created_at: Timestamp,
}

/// What [`enqueue`] needs to know about the new request.
pub(crate) struct NewRequest<'a> {
    pub id: &'a str,
    pub kind: &'a str,
    pub project_name: &'a str,
    pub task_id: &'a str,
    pub summary: &'a str,
    pub created_at: i64,
}

/// Inserts a row per target, in the caller's transaction.
pub(crate) async fn enqueue(
    conn: &mut Conn,
    notifications: &Notifications,
    request: &NewRequest<'_>,
) -> Result<()> {
    if notifications.targets.is_empty() {
        return Ok(());
    }
    let body = Body {
        kind_of_event: EVENT,
        request_id: request.id,
        kind: request.kind,
        project_name: request.project_name,
        task_id: request.task_id,
        summary: request.summary,
        url: format!("{}/inbox/requests/{}", notifications.public_url, request.id),
        created_at: Timestamp::from_unix_millis(request.created_at),
    };
    let body = serde_json::to_string(&body)
        .map_err(|e| store::corrupt(format!("cannot encode a notification: {e}")))?;
    for target in &notifications.targets {
        store::notifications::insert(
            &mut *conn,
            request.id,
            &target.url,
            &body,
            request.created_at,
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter_below() {
        let s = Duration::from_secs;
        let within = |d: Duration, ceiling: Duration| d <= ceiling && d >= ceiling * 3 / 4;
        for (attempts, ceiling) in [(1, s(1)), (2, s(2)), (4, s(8)), (30, MAX_BACKOFF)] {
            let d = retry_delay(s(1), attempts);
            assert!(within(d, ceiling), "attempt {attempts}: {d:?}");
        }
        assert!(retry_delay(s(1), u32::MAX) <= MAX_BACKOFF);
    }

    #[test]
    fn debug_hides_the_secret() {
        let t = NotifyTarget {
            url: "https://u:pw-secret@x.example/h".into(),
            secret: "very-secret-value-123".into(),
            max_attempts: 1,
            retry_base: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
        };
        let dbg = format!("{t:?}");
        assert!(
            !dbg.contains("very-secret") && !dbg.contains("pw-secret"),
            "{dbg}"
        );
    }
}
