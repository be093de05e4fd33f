//! The Pump Up agent API over HTTP ([`PumpUp`]): one client for everything in tern that acts
//! as an agent of an inbox on a server — the waits' remote inbox
//! ([`crate::remote::RemoteInbox`]) and `tern ask`.
//!
//! Every call sends `Authorization: Bearer <key>` and `X-API-Version`; creates send the
//! caller's `Idempotency-Key`, so a retry after a lost answer gets the original. A result
//! read answers `None` on 204. Failures become [`ClientError`]: no answer or garbage is
//! [`ClientError::Unreachable`] (with the causes, without the URL), an error status
//! [`ClientError::Refused`] with its body (transient or not by
//! [`ClientError::is_transient`]; what to retry is the caller's call).

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::time::Duration;

use reqwest::{Method, RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tern_inbox::service::decisions::Decisions;
use tokio::io::AsyncReadExt;

use crate::client::{ClientError, ClientResult, LogKind, RequestKind, content_type_for};

/// What `X-API-Version` says (the Pump Up SDK's default).
pub const API_VERSION: &str = "0";
/// Every call but the long-poll (which gets its wait on top).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Uploads may be large and the link slow.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// A client of one server's Pump Up agent API, with an agent key.
#[derive(Clone)]
pub struct PumpUp {
    http: reqwest::Client,
    /// Without a trailing slash.
    base: String,
    key: String,
}

// Hand-written so the key never ends up in logs.
impl fmt::Debug for PumpUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PumpUp")
            .field("base", &self.base)
            .field("key", &"…")
            .finish()
    }
}

impl PumpUp {
    /// A client of the inbox at `url` (e.g. `https://inbox.example`) with the agent key
    /// `key`.
    pub fn new(url: &str, key: &str) -> ClientResult<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("tern/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError::Unreachable(format!("cannot build an HTTP client: {e}")))?;
        Ok(PumpUp {
            http,
            base: url.trim().trim_end_matches('/').to_owned(),
            key: key.to_owned(),
        })
    }

    /// The inbox's base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key)
            .header("X-API-Version", API_VERSION)
            .header(reqwest::header::ACCEPT, "application/json")
    }

    /// Sends; an error status becomes [`ClientError::Refused`] with its body.
    async fn send(&self, req: RequestBuilder) -> ClientResult<reqwest::Response> {
        let resp = req.send().await.map_err(unreachable)?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let text = resp.text().await.unwrap_or_default();
        let body = error_body(&text);
        Err(ClientError::Refused {
            status: status.as_u16(),
            body,
        })
    }

    async fn send_json<T: DeserializeOwned>(&self, req: RequestBuilder) -> ClientResult<T> {
        let resp = self.send(req).await?;
        parse_body(resp).await
    }

    async fn post_created(&self, path: &str, body: &Value, idem: &str) -> ClientResult<String> {
        let req = self
            .request(Method::POST, path)
            .header("Idempotency-Key", idem)
            .json(body);
        let created: Value = self.send_json(req).await?;
        string_field(&created, "eventId")
    }

    /// A POST of `body`, with `idempotency_key` when given (a create); the answer's JSON.
    pub async fn post(
        &self,
        path: &str,
        body: &Value,
        idempotency_key: Option<&str>,
    ) -> ClientResult<Value> {
        let mut req = self.request(Method::POST, path).json(body);
        if let Some(k) = idempotency_key {
            req = req.header("Idempotency-Key", k);
        }
        self.send_json(req).await
    }

    /// A GET with `query` (each value percent-encoded); the answer's JSON.
    pub async fn get_json(&self, path: &str, query: &[(&str, &str)]) -> ClientResult<Value> {
        let mut url = path.to_owned();
        for (i, (k, v)) in query.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(&format!("{k}={}", percent_encode(v)));
        }
        self.send_json(self.request(Method::GET, &url)).await
    }

    /// Creates a task (`POST /api/tasks`, idempotent by `idem`); its id.
    pub async fn create_task(&self, body: &Value, idem: &str) -> ClientResult<String> {
        let task = self.post("/api/tasks", body, Some(idem)).await?;
        string_field(&task, "id")
    }

    /// Creates a request of `kind`, idempotent by `idem`; its id (`eventId`).
    pub async fn create_request(
        &self,
        kind: RequestKind,
        body: &Value,
        idem: &str,
    ) -> ClientResult<String> {
        self.post_created(&format!("/api/{}", kind.path()), body, idem)
            .await
    }

    /// Appends to a task's log, idempotent by `idem`; the entry's id.
    pub async fn log(&self, kind: LogKind, body: &Value, idem: &str) -> ClientResult<String> {
        self.post_created(&format!("/api/{}", kind.path()), body, idem)
            .await
    }

    /// A request's result: `None` while it is pending (204). A withdrawn request answers
    /// 409 ([`ClientError::Refused`]).
    pub async fn result(&self, kind: RequestKind, request_id: &str) -> ClientResult<Option<Value>> {
        let path = format!("/api/{}/{request_id}/result", kind.path());
        let resp = self.send(self.request(Method::GET, &path)).await?;
        if resp.status() == StatusCode::NO_CONTENT {
            return Ok(None);
        }
        parse_body(resp).await.map(Some)
    }

    /// Withdraws a request, with `reason` on its timeline (tern's extension: a server
    /// without it answers 404 or 405, which is the caller's to judge).
    pub async fn withdraw(
        &self,
        kind: RequestKind,
        request_id: &str,
        reason: &str,
    ) -> ClientResult<()> {
        let path = format!("/api/{}/{request_id}/withdraw", kind.path());
        let req = self
            .request(Method::POST, &path)
            .json(&json!({"reason": reason}));
        self.send(req).await.map(|_| ())
    }

    /// Uploads the file at `path` as `file_name`; the upload's id.
    pub async fn upload(&self, path: &Path, file_name: &str) -> ClientResult<String> {
        let io = |e: std::io::Error| ClientError::Refused {
            status: 400,
            body: json!({
                "code": "invalid_request",
                "message": format!("cannot read {file_name}: {e}"),
            }),
        };
        let file = tokio::fs::File::open(path).await.map_err(io)?;
        let size = file.metadata().await.map_err(io)?.len();
        // The multipart body streams the file between its framing, never whole in
        // memory: field `file`, as the Pump Up SDK sends it.
        let boundary = boundary();
        let head = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; \
             filename=\"{}\"\r\nContent-Type: {}\r\n\r\n",
            quoted_file_name(file_name),
            content_type_for(file_name),
        )
        .into_bytes();
        let tail = format!("\r\n--{boundary}--\r\n").into_bytes();
        let length = head.len() as u64 + size + tail.len() as u64;
        let reader = std::io::Cursor::new(head)
            .chain(file)
            .chain(std::io::Cursor::new(tail));
        let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(reader));
        let req = self
            .request(Method::POST, "/api/uploads")
            .timeout(UPLOAD_TIMEOUT)
            .header(
                reqwest::header::CONTENT_TYPE,
                format!("multipart/form-data; boundary={boundary}"),
            )
            .header(reqwest::header::CONTENT_LENGTH, length)
            .body(body);
        let created: Value = self.send_json(req).await?;
        string_field(&created, "id")
    }

    /// One page of the decisions feed, waiting up to `wait` for one; `None` when the server
    /// has no feed (404).
    pub async fn decisions(
        &self,
        after: Option<&str>,
        wait: Duration,
    ) -> ClientResult<Option<Decisions>> {
        let mut path = format!("/api/decisions?wait={}", wait.as_secs());
        if let Some(after) = after {
            path.push_str("&after=");
            path.push_str(&percent_encode(after));
        }
        let req = self
            .request(Method::GET, &path)
            .timeout(wait + REQUEST_TIMEOUT);
        match self.send_json(req).await {
            Ok(page) => Ok(Some(page)),
            Err(ClientError::Refused { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Percent-encodes a query value (cursors are opaque: they may hold anything).
fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn unreachable(e: reqwest::Error) -> ClientError {
    // Without the URL: it is in the logs' context already, and the message stays short.
    // With the causes: reqwest's own text ("error sending request") does not say why.
    let e = e.without_url();
    let mut cause = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        cause = format!("{cause}: {s}");
        source = s.source();
    }
    ClientError::Unreachable(cause)
}

async fn parse_body<T: DeserializeOwned>(resp: reqwest::Response) -> ClientResult<T> {
    let bytes = resp.bytes().await.map_err(unreachable)?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ClientError::Unreachable(format!("the inbox answered garbage: {e}")))
}

pub(crate) fn string_field(body: &Value, field: &str) -> ClientResult<String> {
    body.get(field)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| {
            ClientError::Unreachable(format!("the inbox's answer has no {field:?}: {body}"))
        })
}

/// A `multipart/form-data` boundary that will not occur in the file: 128 random bits.
fn boundary() -> String {
    // RandomState is seeded from the OS once per process and stepped per instance.
    let a = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let b = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!("tern-{a:016x}{b:016x}")
}

/// A file name safe inside a quoted `Content-Disposition` parameter.
fn quoted_file_name(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            '"' | '\\' => '_',
            c if c.is_control() => '_',
            c => c,
        })
        .collect()
}

/// An error answer's body as JSON: `null` when empty; text that is not JSON becomes
/// `{"error": text}`.
fn error_body(text: &str) -> Value {
    if text.trim().is_empty() {
        return Value::Null;
    }
    serde_json::from_str(text).unwrap_or_else(|_| json!({"error": text.trim()}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_cannot_break_out_of_the_header() {
        assert_eq!(quoted_file_name("a\"b\r\nc\\d.txt"), "a_b__c_d.txt");
        assert_ne!(boundary(), boundary());
        assert_eq!(percent_encode("e1f.a b&c=/"), "e1f.a%20b%26c%3D%2F");
    }

    #[test]
    fn error_bodies_are_json_or_wrapped_text() {
        assert_eq!(error_body(""), Value::Null);
        assert_eq!(error_body(" {\"code\": \"x\"}"), json!({"code": "x"}));
        assert_eq!(error_body("Bad Gateway\n"), json!({"error": "Bad Gateway"}));
    }

    #[test]
    fn the_key_is_not_in_debug_output() {
        let api = PumpUp::new("http://inbox.example/", "secret-key").unwrap();
        assert_eq!(api.base_url(), "http://inbox.example");
        assert!(!format!("{api:?}").contains("secret-key"));
    }

    /// No answer is `Unreachable` and says why (reqwest's own text does not), without the
    /// URL; an error status is `Refused` with the body the server sent.
    #[tokio::test]
    async fn failures_say_why() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let api = PumpUp::new(&url, "k").unwrap();
        match api.get_json("/api/projects", &[]).await {
            Err(ClientError::Unreachable(m)) => {
                assert!(m.contains("error sending request: "), "{m}");
                assert!(!m.contains("/api/projects"), "{m}");
            }
            other => panic!("expected unreachable, got {other:?}"),
        }

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .fallback(|| async { (axum::http::StatusCode::NOT_FOUND, "no such route\n") });
        tokio::spawn(async move { axum::serve(listener, app).await });
        let api = PumpUp::new(&url, "k").unwrap();
        match api.result(RequestKind::Approval, "r1").await {
            Err(ClientError::Refused { status: 404, body }) => {
                assert_eq!(body, json!({"error": "no such route"}));
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
