//! Webhooks: `[[webhooks]]` entries, each event POSTed as JSON with an HMAC signature.
//!
//! Flow, per event and webhook, on a task of its own: the body is the envelope JSON → each
//! attempt stamps `X-Tern-Timestamp` (milliseconds since the epoch, at sending) and signs
//! `"<timestamp>.<body>"` with HMAC-SHA256 under the webhook's secret
//! (`X-Tern-Signature: sha256=<hex>`) → a 2xx ends the delivery; a connection error, a
//! timeout, a 5xx or a 429 is retried after `retry_base_ms`, doubling each time, at most
//! 30 s, each wait cut by up to a quarter of jitter (`tern_util::Backoff`; a longer
//! `Retry-After` is honoured up to the cap), until `max_attempts`; any other
//! status (3xx, 4xx) gives up at once, since sending the same request again cannot help.
//! `X-Tern-Delivery` stays the same across the attempts of one delivery, so a receiver
//! can drop duplicates (a retry after a timeout may deliver twice).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hmac::{KeyInit, Mac};
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use tern_config::WebhookConfig;
use tern_util::{Backoff, now_ms};

use crate::{EventFilter, HookError};

/// The header with the event's name.
pub const EVENT_HEADER: &str = "X-Tern-Event";
/// The header with the attempt's time, in milliseconds since the Unix epoch.
pub const TIMESTAMP_HEADER: &str = "X-Tern-Timestamp";
/// The header with `sha256=<hex of HMAC-SHA256(secret, "<timestamp>.<body>")>`.
pub const SIGNATURE_HEADER: &str = "X-Tern-Signature";
/// The header identifying a delivery; the same for every attempt of it.
pub const DELIVERY_HEADER: &str = "X-Tern-Delivery";

/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The `X-Tern-Signature` value for a body sent at `timestamp_ms`:
/// `sha256=` and the lowercase hex of HMAC-SHA256 keyed with `secret` over the bytes of
/// `"<timestamp_ms>.<body>"` (the timestamp in decimal, a dot, the body exactly as sent).
pub fn webhook_signature(secret: &str, timestamp_ms: i64, body: &[u8]) -> String {
    #[expect(
        clippy::expect_used,
        reason = "HMAC takes keys of any length (long ones are hashed first): this cannot fail"
    )]
    let mut mac =
        HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC accepts keys of any length");
    mac.update(timestamp_ms.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// A POST of `body` to `url` with tern's webhook headers: JSON, `X-Tern-Event: event`, the
/// time of now, its signature under `secret` ([`webhook_signature`]) and `X-Tern-Delivery:
/// delivery`. The caller sets the timeout and sends it.
pub fn signed_post(
    client: &reqwest::Client,
    url: impl reqwest::IntoUrl,
    secret: &str,
    event: &str,
    delivery: &str,
    body: impl Into<Bytes>,
) -> reqwest::RequestBuilder {
    let body: Bytes = body.into();
    let timestamp = now_ms();
    let signature = webhook_signature(secret, timestamp, &body);
    client
        .post(url)
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .header(EVENT_HEADER, event)
        .header(TIMESTAMP_HEADER, timestamp.to_string())
        .header(SIGNATURE_HEADER, signature)
        .header(DELIVERY_HEADER, delivery)
        .body(body)
}

/// The client shared by every webhook.
pub(crate) fn client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        // A redirected POST would become a GET or go somewhere not configured; a 3xx is
        // reported instead.
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("tern/", env!("CARGO_PKG_VERSION")))
        .build()
}

/// A configured webhook.
pub(crate) struct Webhook {
    /// For logs: the configured name, or the URL without query and password.
    name: String,
    url: reqwest::Url,
    secret: String,
    filter: EventFilter,
    timeout: Duration,
    max_attempts: u32,
    retry_base: Duration,
}

impl Webhook {
    pub(crate) fn from_config(config: &WebhookConfig) -> Result<Self, HookError> {
        let name = match config.name.as_deref().map(str::trim) {
            Some(n) if !n.is_empty() => n.to_owned(),
            _ => display_url(&config.url),
        };
        let subscriber = format!("webhook {name:?}");
        let invalid = |message: String| HookError::Invalid {
            subscriber: subscriber.clone(),
            message,
        };
        let url = reqwest::Url::parse(config.url.trim())
            .map_err(|e| invalid(format!("`url` is not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(
                "`url` must start with http:// or https://".to_owned(),
            ));
        }
        if config.secret.chars().count() < 16 {
            return Err(invalid(
                "`secret` must have at least 16 characters".to_owned(),
            ));
        }
        if config.timeout_ms == 0 {
            return Err(invalid("`timeout_ms` must be at least 1".to_owned()));
        }
        if config.max_attempts == 0 {
            return Err(invalid("`max_attempts` must be at least 1".to_owned()));
        }
        let filter = EventFilter::parse(&subscriber, &config.events)?;
        Ok(Webhook {
            name,
            url,
            secret: config.secret.clone(),
            filter,
            timeout: Duration::from_millis(config.timeout_ms),
            max_attempts: config.max_attempts,
            retry_base: Duration::from_millis(config.retry_base_ms),
        })
    }

    pub(crate) fn wants(&self, event: &str) -> bool {
        self.filter.matches(event)
    }

    /// Delivers one event, retrying as the module docs say; logs the outcome.
    pub(crate) async fn deliver(&self, client: &reqwest::Client, event: &'static str, body: Bytes) {
        let delivery = delivery_id();
        for attempt in 1..=self.max_attempts {
            let sent = signed_post(
                client,
                self.url.clone(),
                &self.secret,
                event,
                &delivery,
                body.clone(),
            )
            .timeout(self.timeout)
            .send()
            .await;
            let (reason, retry_after) = match sent {
                Ok(resp) if resp.status().is_success() => {
                    tracing::debug!(webhook = %self.name, event, attempt, "webhook delivered");
                    return;
                }
                Ok(resp) if is_retryable(resp.status()) => (
                    format!("HTTP {}", resp.status()),
                    retry_after(resp.headers().get(RETRY_AFTER)),
                ),
                Ok(resp) => {
                    tracing::warn!(
                        webhook = %self.name,
                        event,
                        attempt,
                        status = resp.status().as_u16(),
                        "webhook rejected the event with HTTP {}; not retried",
                        resp.status()
                    );
                    return;
                }
                Err(e) if e.is_builder() => {
                    tracing::warn!(webhook = %self.name, event, "webhook request could not be built: {e}");
                    return;
                }
                Err(e) => (error_chain(&e), None),
            };
            if attempt == self.max_attempts {
                tracing::warn!(
                    webhook = %self.name,
                    event,
                    attempts = attempt,
                    "webhook delivery failed, giving up: {reason}"
                );
                return;
            }
            let delay = Backoff::new(self.retry_base, MAX_BACKOFF)
                .delay(attempt)
                .max(retry_after.unwrap_or_default())
                .min(MAX_BACKOFF);
            tracing::debug!(
                webhook = %self.name,
                event,
                attempt,
                delay_ms = delay.as_millis() as u64,
                "webhook attempt failed ({reason}); retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }
}

/// 5xx and 429 are the receiver's transient trouble; everything else is an answer.
fn is_retryable(status: StatusCode) -> bool {
    status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS
}

/// `Retry-After` in seconds (the HTTP-date form is rare from webhook receivers; ignored).
fn retry_after(value: Option<&HeaderValue>) -> Option<Duration> {
    let secs: u64 = value?.to_str().ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(secs))
}

/// A reqwest error with its causes ("error sending request: connection refused").
pub fn error_chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The URL for logs: no query or fragment (they may carry tokens), password masked.
fn display_url(url: &str) -> String {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    tern_config::mask_url(url[..end].trim())
}

/// A delivery id unique within this process and across restarts in practice: the time in
/// nanoseconds, the process id and a counter.
fn delivery_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{nanos:x}-{:x}-{:x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_known_vectors() {
        // The HMAC itself: RFC 4231, test case 2.
        let mut mac = HmacSha256::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // The signed string "<timestamp>.<body>", computed independently with Python:
        // hmac.new(b"0123456789abcdef", b'1700000000000.{"a":1}', hashlib.sha256).hexdigest()
        assert_eq!(
            webhook_signature("0123456789abcdef", 1_700_000_000_000, br#"{"a":1}"#),
            "sha256=de32ced690ba7742b66a8b93053efa2a98f3a8fc16b2907325d41944cf17d735"
        );
        assert_ne!(
            webhook_signature("0123456789abcdef", 1, b"x"),
            webhook_signature("0123456789abcdef", 2, b"x")
        );
    }

    #[test]
    fn retryable_statuses() {
        assert!(is_retryable(StatusCode::INTERNAL_SERVER_ERROR));
        assert!(is_retryable(StatusCode::SERVICE_UNAVAILABLE));
        assert!(is_retryable(StatusCode::TOO_MANY_REQUESTS));
        assert!(!is_retryable(StatusCode::BAD_REQUEST));
        assert!(!is_retryable(StatusCode::NOT_FOUND));
        assert!(!is_retryable(StatusCode::MOVED_PERMANENTLY));
    }

    #[test]
    fn retry_after_seconds() {
        assert_eq!(
            retry_after(Some(&HeaderValue::from_static("3"))),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            retry_after(Some(&HeaderValue::from_static(
                "Wed, 21 Oct 2015 07:28:00 GMT"
            ))),
            None
        );
        assert_eq!(retry_after(None), None);
    }

    #[test]
    fn names_hide_query_and_password() {
        assert_eq!(
            display_url("https://u:pw@h.example/in?token=abc#x"),
            "https://u:****@h.example/in"
        );
    }

    #[test]
    fn invalid_webhooks_are_rejected() {
        let ok = WebhookConfig {
            name: None,
            url: "http://127.0.0.1:9/in".to_owned(),
            secret: "0123456789abcdef".to_owned(),
            events: vec!["*".to_owned()],
            timeout_ms: 1,
            max_attempts: 1,
            retry_base_ms: 1,
        };
        assert!(Webhook::from_config(&ok).is_ok());
        for bad in [
            WebhookConfig {
                url: "ftp://x/".to_owned(),
                ..ok.clone()
            },
            WebhookConfig {
                url: "not a url".to_owned(),
                ..ok.clone()
            },
            WebhookConfig {
                secret: "short".to_owned(),
                ..ok.clone()
            },
            WebhookConfig {
                max_attempts: 0,
                ..ok.clone()
            },
            WebhookConfig {
                timeout_ms: 0,
                ..ok.clone()
            },
        ] {
            let err = Webhook::from_config(&bad).err().unwrap();
            assert!(!err.to_string().contains("0123456789abcdef"), "{err}");
        }
    }
}
