//! A remote inbox (`[inbox] url = …, key = …`): the Pump Up agent API of another server over
//! HTTP ([`RemoteInbox`]), and following its decisions through outbound connections only
//! ([`RemoteFollower`]) — the gateway may sit behind NAT with no inbound port.
//!
//! # The follower at a glance
//!
//! ```text
//! cursor ← Store::remote_cursor(url)             (none: from the feed's beginning)
//! loop:  GET /api/decisions?after=cursor&wait=W   one long-poll for ALL open waits
//!        each item ─► Store::wait_by_request
//!              wait pending  ─► decided/expired: Store::wait_ready ─► Resumer::notify_ready
//!                               withdrawn:       Store::cancel_wait ─► wait_resolved (cancelled)
//!                               no result in the item: read …/result (settle); when
//!                               that fails ─► kept as below, read again by the rematch
//!              no wait (yet) ─► Store::remember_unmatched (matched when the wait appears)
//!        Store::set_remote_cursor(nextCursor)     after the items: a crash re-reads, harmlessly
//!        errors ─► backoff 1 s … 60 s, same cursor
//! 404 on /api/decisions (a server without tern's feed, e.g. the hosted Pump Up):
//!        every open wait's …/result, each every poll_interval (first at once after a start);
//!        errors count on the wait (Store::wait_attempt_failed) and back off, doubling up to
//!        an hour; every 30 min the feed is tried again
//! ```
//!
//! The feed's cost does not grow with the number of open waits: one request per long-poll
//! period, whatever is pending. `W` is `poll_interval`, at most 30 s (under the idle timeouts
//! of common proxies and NATs).
//!
//! # The client
//!
//! Every call sends `Authorization: Bearer <key>` and `X-API-Version`; creates send the
//! caller's `Idempotency-Key`, so a retry after a lost answer gets the original. A result
//! read answers `None` on 204. Failures become [`ClientError`]: no answer or garbage is
//! [`ClientError::Unreachable`], an error status [`ClientError::Refused`] with its body
//! (transient or not by [`ClientError::is_transient`]). Withdrawing is tern's extension; a
//! server without it (404/405) is tolerated — the request then simply stays open there.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tern_hooks::{HookBus, WaitResolvedStatus};
use tern_inbox::review::RequestStatus;
use tern_inbox::service::decisions::{Decision, Decisions};
use tern_store::{Store, StoreError, Wait, WaitStatus, now_ms};
use tern_util::Backoff;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::{
    BoxFuture, ClientError, ClientResult, InboxClient, LogKind, RequestKind, TaskRef,
    content_type_for,
};
use crate::follow::{Settled, settle};
use crate::resume::{Resumer, emit_resolved};

/// What `X-API-Version` says (the Pump Up SDK's default).
pub const API_VERSION: &str = "0";
/// `[inbox] poll_interval` unless set.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(30);
/// The longest long-poll asked of the feed.
const MAX_LONG_POLL: Duration = Duration::from_secs(30);
/// Every call but the long-poll (which gets its wait on top).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Uploads may be large and the link slow.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(600);
/// Feed errors back off from 1 s, doubling, up to a minute.
const FEED_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
/// Polling errors back off from `poll_interval`, doubling, up to this.
const MAX_POLL_BACKOFF: Duration = Duration::from_secs(3600);
/// In polling mode, how often the feed is tried again (the server may have been upgraded).
const FEED_PROBE_EVERY: Duration = Duration::from_secs(1800);
/// In polling mode, how often the pending waits are listed again (a local query), so that
/// new waits are picked up without waiting a whole `poll_interval`.
const POLL_RELIST_EVERY: Duration = Duration::from_secs(5);
/// A decision the feed reported before its wait stored the request id is looked for this
/// often while it is recent (the wait should appear within milliseconds)…
const REMATCH_EVERY: Duration = Duration::from_secs(1);
const REMATCH_RECENT_MS: i64 = 120_000;
/// …and kept this long (an agent that shares the key may own it: it never matches).
const UNMATCHED_KEPT_MS: i64 = 7 * 24 * 3_600_000;

/// Another server's Pump Up agent API.
#[derive(Clone)]
pub struct RemoteInbox {
    http: reqwest::Client,
    /// Without a trailing slash.
    base: String,
    key: String,
}

// Hand-written so the key never ends up in logs.
impl fmt::Debug for RemoteInbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteInbox")
            .field("base", &self.base)
            .field("key", &"…")
            .finish()
    }
}

impl RemoteInbox {
    /// A client of the inbox at `url` (e.g. `https://inbox.example`) with the agent key
    /// `key`.
    pub fn new(url: &str, key: &str) -> ClientResult<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("tern/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError::Unreachable(format!("cannot build an HTTP client: {e}")))?;
        Ok(RemoteInbox {
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
    }

    /// Sends; an error status becomes [`ClientError::Refused`] with its body.
    async fn send(&self, req: RequestBuilder) -> ClientResult<reqwest::Response> {
        let resp = req.send().await.map_err(unreachable)?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let text = resp.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or_else(|_| json!({"error": text}));
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
    ClientError::Unreachable(e.without_url().to_string())
}

async fn parse_body<T: DeserializeOwned>(resp: reqwest::Response) -> ClientResult<T> {
    let bytes = resp.bytes().await.map_err(unreachable)?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ClientError::Unreachable(format!("the inbox answered garbage: {e}")))
}

fn string_field(body: &Value, field: &str) -> ClientResult<String> {
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

impl InboxClient for RemoteInbox {
    fn session_task<'a>(
        &'a self,
        session_id: &'a str,
        project: &'a str,
    ) -> BoxFuture<'a, ClientResult<TaskRef>> {
        Box::pin(async move {
            let body = json!({
                "name": format!("session {session_id}"),
                "projectName": project,
                "externalId": session_id,
            });
            let req = self
                .request(Method::POST, "/api/tasks")
                .header("Idempotency-Key", format!("tern-task:{session_id}"))
                .json(&body);
            let task: Value = self.send_json(req).await?;
            Ok(TaskRef {
                task_id: string_field(&task, "id")?,
                project_name: project.to_owned(),
            })
        })
    }

    fn create_request<'a>(
        &'a self,
        kind: RequestKind,
        body: Value,
        idem: &'a str,
    ) -> BoxFuture<'a, ClientResult<String>> {
        Box::pin(async move {
            self.post_created(&format!("/api/{}", kind.path()), &body, idem)
                .await
        })
    }

    fn log<'a>(
        &'a self,
        kind: LogKind,
        body: Value,
        idem: &'a str,
    ) -> BoxFuture<'a, ClientResult<String>> {
        Box::pin(async move {
            self.post_created(&format!("/api/{}", kind.path()), &body, idem)
                .await
        })
    }

    fn result<'a>(
        &'a self,
        kind: RequestKind,
        request_id: &'a str,
    ) -> BoxFuture<'a, ClientResult<Option<Value>>> {
        Box::pin(async move {
            let path = format!("/api/{}/{request_id}/result", kind.path());
            let resp = self.send(self.request(Method::GET, &path)).await?;
            if resp.status() == StatusCode::NO_CONTENT {
                return Ok(None);
            }
            parse_body(resp).await.map(Some)
        })
    }

    fn withdraw<'a>(
        &'a self,
        kind: RequestKind,
        request_id: &'a str,
        reason: &'a str,
    ) -> BoxFuture<'a, ClientResult<()>> {
        Box::pin(async move {
            let path = format!("/api/{}/{request_id}/withdraw", kind.path());
            let req = self
                .request(Method::POST, &path)
                .json(&json!({"reason": reason}));
            match self.send(req).await {
                Ok(_) => Ok(()),
                // A server without tern's extension: the request stays open there.
                Err(ClientError::Refused {
                    status: 404 | 405, ..
                }) => {
                    tracing::debug!(
                        request = request_id,
                        "the remote inbox cannot withdraw requests; left open there"
                    );
                    Ok(())
                }
                Err(e) => Err(e),
            }
        })
    }

    fn upload<'a>(
        &'a self,
        path: &'a Path,
        file_name: &'a str,
    ) -> BoxFuture<'a, ClientResult<String>> {
        Box::pin(async move {
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
        })
    }
}

/// How a round of following ended.
enum Ended {
    Stopped,
    /// The server has no decisions feed: poll instead.
    NoFeed,
    /// Time to look for the feed again.
    Probe,
}

/// Follows a remote inbox's decisions; see the module docs.
pub struct RemoteFollower {
    store: Store,
    inbox: Arc<RemoteInbox>,
    hooks: Arc<HookBus>,
    resumer: Arc<Resumer>,
    poll_interval: Duration,
}

impl RemoteFollower {
    pub fn new(
        store: Store,
        inbox: Arc<RemoteInbox>,
        hooks: Arc<HookBus>,
        resumer: Arc<Resumer>,
        poll_interval: Duration,
    ) -> Self {
        RemoteFollower {
            store,
            inbox,
            hooks,
            resumer,
            poll_interval: poll_interval.max(Duration::from_secs(1)),
        }
    }

    pub fn spawn(self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run(stop))
    }

    /// Follows the feed, or polls when the server has none, until `stop` is cancelled.
    pub async fn run(self, stop: CancellationToken) {
        loop {
            match self.follow_feed(&stop).await {
                Ended::Stopped => return,
                Ended::NoFeed | Ended::Probe => {
                    tracing::info!(
                        inbox = self.inbox.base_url(),
                        every = ?self.poll_interval,
                        "the remote inbox has no decisions feed; polling each open request's result"
                    );
                    match self.poll(&stop).await {
                        Ended::Stopped => return,
                        Ended::NoFeed | Ended::Probe => {}
                    }
                }
            }
        }
    }

    fn long_poll(&self) -> Duration {
        self.poll_interval.min(MAX_LONG_POLL)
    }

    /// The feed, page after page; see the module docs.
    async fn follow_feed(&self, stop: &CancellationToken) -> Ended {
        let url = self.inbox.base_url().to_owned();
        let mut failures: u32 = 0;
        let mut cursor = loop {
            match self.store.remote_cursor(&url).await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read the remote inbox's cursor");
                    failures += 1;
                    if !pause(stop, FEED_BACKOFF.delay(failures)).await {
                        return Ended::Stopped;
                    }
                }
            }
        };
        failures = 0;
        match self
            .store
            .prune_unmatched(now_ms() - UNMATCHED_KEPT_MS)
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::debug!(decisions = n, "forgot old decisions that matched no wait"),
            Err(e) => tracing::warn!(error = %e, "cannot prune unmatched decisions"),
        }
        let mut recent_unmatched = self.rematch().await;
        loop {
            let asked = Instant::now();
            let wait = self.long_poll();
            let page = {
                let fetch = self.inbox.decisions(cursor.as_deref(), wait);
                tokio::pin!(fetch);
                loop {
                    tokio::select! {
                        page = &mut fetch => break page,
                        () = stop.cancelled() => return Ended::Stopped,
                        () = tokio::time::sleep(REMATCH_EVERY), if recent_unmatched => {
                            recent_unmatched = self.rematch().await;
                        }
                    }
                }
            };
            match page {
                Ok(None) => return Ended::NoFeed,
                Ok(Some(page)) => {
                    failures = 0;
                    let empty = page.items.is_empty();
                    match self.apply_page(&page).await {
                        Ok(_) => {}
                        Err(e) => {
                            // The cursor stays: the page is read again after the pause.
                            tracing::error!(error = %e, "cannot record decisions from the remote inbox");
                            if !pause(stop, Duration::from_secs(5)).await {
                                return Ended::Stopped;
                            }
                            continue;
                        }
                    }
                    if cursor.as_deref() != Some(page.next_cursor.as_str()) {
                        if let Err(e) = self.store.set_remote_cursor(&url, &page.next_cursor).await
                        {
                            // Harmless: the next start re-reads from the saved one.
                            tracing::warn!(error = %e, "cannot save the remote inbox's cursor");
                        }
                        cursor = Some(page.next_cursor);
                    }
                    recent_unmatched = self.rematch().await;
                    // A server that answers an empty page before the wait is over (one
                    // shutting down, or one that ignores `wait`) is not asked again at once.
                    if empty && asked.elapsed() < wait && !pause(stop, wait - asked.elapsed()).await
                    {
                        return Ended::Stopped;
                    }
                }
                Err(e) => {
                    failures += 1;
                    let delay = FEED_BACKOFF.delay(failures);
                    if e.is_transient() {
                        tracing::warn!(error = %e, retry_in = ?delay, "the remote inbox's decisions feed failed");
                    } else {
                        tracing::error!(error = %e, retry_in = ?delay, "the remote inbox refused the decisions feed (is [inbox] key right?)");
                    }
                    if !pause(stop, delay).await {
                        return Ended::Stopped;
                    }
                }
            }
        }
    }

    /// Applies a page's items; `true` when one was kept for later (it matched no wait, or
    /// its result could not be read).
    async fn apply_page(&self, page: &Decisions) -> Result<bool, StoreError> {
        let mut unmatched = false;
        for item in &page.items {
            match self.store.wait_by_request(&item.request_id).await? {
                Some(w) => match self.apply(&w, item).await {
                    Ok(()) => {}
                    Err(ApplyError::Store(e)) => return Err(e),
                    Err(ApplyError::Unread(e)) => {
                        // The cursor moves past this item, so it is kept like a decision
                        // without a wait: `rematch` reads it again (its wait exists) until
                        // it lands, without holding up the other decisions.
                        tracing::warn!(wait = %w.id, request = %item.request_id, error = %e, "cannot read a decision yet; kept to retry");
                        let json = serde_json::to_string(item)
                            .map_err(|e| StoreError::Corrupt(format!("a feed item: {e}")))?;
                        self.store
                            .remember_unmatched(&item.request_id, &json)
                            .await?;
                        unmatched = true;
                    }
                },
                None => {
                    let json = serde_json::to_string(item)
                        .map_err(|e| StoreError::Corrupt(format!("a feed item: {e}")))?;
                    self.store
                        .remember_unmatched(&item.request_id, &json)
                        .await?;
                    unmatched = true;
                }
            }
        }
        Ok(unmatched)
    }

    /// Moves a pending wait on with a decision from the feed.
    async fn apply(&self, w: &Wait, item: &Decision) -> Result<(), ApplyError> {
        if w.status != WaitStatus::Pending {
            return Ok(());
        }
        match (item.status, &item.result) {
            (RequestStatus::Withdrawn, _) => {
                if let Some(w) = self.store.cancel_wait(&w.id).await? {
                    tracing::info!(wait = %w.id, request = %item.request_id, "the request was withdrawn; the wait is cancelled");
                    emit_resolved(
                        &self.hooks,
                        &self.store,
                        &w,
                        WaitResolvedStatus::Cancelled,
                        None,
                    )
                    .await;
                }
            }
            (RequestStatus::Pending, _) => {}
            (_, Some(result)) => {
                let decided_by = ["decidedBy", "answeredBy"]
                    .iter()
                    .find_map(|k| result.get(*k).and_then(Value::as_str));
                if self
                    .store
                    .wait_ready(&w.id, &result.to_string(), decided_by)
                    .await?
                    .is_some()
                {
                    tracing::debug!(wait = %w.id, request = %item.request_id, "decision landed (remote feed)");
                    self.resumer.notify_ready();
                }
            }
            (_, None) => {
                // Settled without a result in the feed: read it the usual way. A failure
                // is the caller's to keep (logging it alone would lose the decision: the
                // cursor moves on and the feed never reports it again).
                settle(&self.store, &*self.inbox, &self.hooks, &self.resumer, w)
                    .await
                    .map_err(ApplyError::Unread)?;
            }
        }
        Ok(())
    }

    /// Applies kept decisions whose wait has appeared; `true` while a recent one is still
    /// unmatched.
    async fn rematch(&self) -> bool {
        match self.store.matched_unmatched().await {
            Ok(matched) => {
                for (request_id, json) in matched {
                    let applied = match serde_json::from_str::<Decision>(&json) {
                        Ok(item) => match self.store.wait_by_request(&request_id).await {
                            Ok(Some(w)) => self.apply(&w, &item).await,
                            Ok(None) => Ok(()),
                            Err(e) => Err(e.into()),
                        },
                        Err(e) => {
                            tracing::warn!(request = %request_id, error = %e, "dropping an unreadable kept decision");
                            Ok(())
                        }
                    };
                    match applied {
                        Ok(()) => {
                            if let Err(e) = self.store.forget_unmatched(&request_id).await {
                                tracing::warn!(error = %e, "cannot forget a matched decision");
                            }
                        }
                        // Kept: tried again after the next page.
                        Err(ApplyError::Unread(e)) => {
                            tracing::warn!(request = %request_id, error = %e, "cannot read a kept decision yet")
                        }
                        Err(e) => {
                            tracing::error!(request = %request_id, error = %e, "cannot apply a kept decision")
                        }
                    }
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot look for kept decisions"),
        }
        self.store
            .has_unmatched_since(now_ms() - REMATCH_RECENT_MS)
            .await
            .unwrap_or(false)
    }

    /// The fallback: each open wait's result every `poll_interval`; see the module docs.
    async fn poll(&self, stop: &CancellationToken) -> Ended {
        let started = Instant::now();
        // wait id → (when to read next, failures in a row).
        let mut due: HashMap<String, (Instant, u32)> = HashMap::new();
        let mut first_pass = true;
        loop {
            if started.elapsed() >= FEED_PROBE_EVERY {
                return Ended::Probe;
            }
            let now = Instant::now();
            match self.store.waits_in(WaitStatus::Pending).await {
                Ok(waits) => {
                    let open: std::collections::HashSet<&str> =
                        waits.iter().map(|w| w.id.as_str()).collect();
                    due.retain(|id, _| open.contains(id.as_str()));
                    for w in waits.iter().filter(|w| w.request_id.is_some()) {
                        // Just started: every wait at once (decided while we were away?);
                        // later, a new wait after one interval.
                        let first = if first_pass {
                            now
                        } else {
                            now + self.poll_interval
                        };
                        let entry = due.entry(w.id.clone()).or_insert((first, 0));
                        if entry.0 > now {
                            continue;
                        }
                        if stop.is_cancelled() {
                            return Ended::Stopped;
                        }
                        match settle(&self.store, &*self.inbox, &self.hooks, &self.resumer, w).await
                        {
                            Ok(Settled::Pending) => *entry = (now + self.poll_interval, 0),
                            Ok(_) => {
                                due.remove(&w.id);
                            }
                            Err(e) => {
                                entry.1 += 1;
                                let delay = Backoff::new(self.poll_interval, MAX_POLL_BACKOFF)
                                    .delay(entry.1);
                                entry.0 = Instant::now() + delay;
                                tracing::warn!(wait = %w.id, error = %e, retry_in = ?delay, "cannot read a request's result from the remote inbox");
                                if let Err(e) =
                                    self.store.wait_attempt_failed(&w.id, &e.to_string()).await
                                {
                                    tracing::warn!(error = %e, "cannot count a failed poll");
                                }
                            }
                        }
                    }
                    first_pass = false;
                }
                Err(e) => tracing::error!(error = %e, "cannot list the pending waits"),
            }
            let next = due
                .values()
                .map(|(at, _)| *at)
                .min()
                .unwrap_or(now + POLL_RELIST_EVERY)
                .min(Instant::now() + POLL_RELIST_EVERY);
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                () = stop.cancelled() => return Ended::Stopped,
            }
        }
    }
}

/// Why a feed item could not be applied.
#[derive(Debug, thiserror::Error)]
enum ApplyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Its result could not be read from the inbox (the item had none).
    #[error("cannot read the result: {0}")]
    Unread(ClientError),
}

/// Sleeps `delay`; `false` when `stop` came first.
async fn pause(stop: &CancellationToken, delay: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(delay) => true,
        () = stop.cancelled() => false,
    }
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
    fn the_key_is_not_in_debug_output() {
        let inbox = RemoteInbox::new("http://inbox.example/", "secret-key").unwrap();
        assert_eq!(inbox.base_url(), "http://inbox.example");
        assert!(!format!("{inbox:?}").contains("secret-key"));
    }
}
