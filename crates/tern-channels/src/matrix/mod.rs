//! The Matrix adapter: [`Matrix`] implements [`Platform`] over the client-server API (v3)
//! with plain HTTP requests.
//!
//! **Unencrypted rooms only.** The bot reads and writes plain `m.room.message` events; in an
//! end-to-end encrypted room it sees only `m.room.encrypted` events, which it ignores, and a
//! user there gets no answer. Open the DM with encryption off. (The `matrix-sdk` crate would
//! bring encryption, but it is a very large dependency with its own crypto store and state;
//! the handful of endpoints below do not need it.)
//!
//! - **Polling**: `GET /sync?since=<cursor>&timeout=<poll_timeout>` with an inline filter (room
//!   timelines' `m.room.message` and `m.reaction`, the senders' member events for display
//!   names; no presence or account data). The cursor is the sync's `next_batch`, which the
//!   runtime commits with the events. The first poll (no cursor) does not replay the rooms'
//!   history: it syncs with `timeout=0` and returns only `next_batch`, with no events, so
//!   **messages sent before the bot's first start are not answered**. A timeline the server
//!   cut (`limited`: over 100 new events in a room since the cursor) is completed with
//!   `/messages` back to the cursor, up to 1000 events (beyond that the oldest are skipped,
//!   and logged).
//! - **Joining**: the bot joins every room it is invited to (a user opens a DM by inviting
//!   it); who may talk to the agent is the runtime's business (allowed users and pairing). A
//!   join that fails for a passing reason fails the poll, so the invite comes again.
//! - **Mapping**: `m.text`/`m.notice`/`m.emote` → a message; `m.image`/`m.file`/`m.video`/
//!   `m.audio` → a message with a [`FileRef`] (the `mxc://` URI; the body is a caption when
//!   it differs from the file name); `m.in_reply_to` → `reply_to` (a reply fallback quote in
//!   the body is cut off); an `m.thread` relation → the chat's `thread_id`; `m.annotation`
//!   reactions → [`EventKind::Reaction`]. Edits (`m.replace`) of users' messages, redacted
//!   events and the bot's own events are skipped.
//! - **Sending**: `PUT /rooms/{room}/send/m.room.message/{txnId}` with `body` (plain text)
//!   and `formatted_body` (`org.matrix.custom.html`). Matrix has no buttons: they are listed
//!   under the text with their reaction keys ("React ✅ Approve · ❌ Reject, or reply …").
//!   See [`Txns`] for how transaction ids make a retried send land once.
//! - **Files**: downloads use the authenticated media API (`/_matrix/client/v1/media/…`),
//!   falling back to the legacy `/_matrix/media/v3/download` on servers without it; uploads go
//!   to `/_matrix/media/v3/upload`.
//!
//! The access token travels only in the `Authorization` header, never in a URL, and no
//! error text or log line carries it.

mod api;

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::platform::{
    Batch, BoxFuture, Button, ChatRef, Event, EventKind, FileRef, Limits, OutFile, OutMessage,
    Platform, PlatformError, UserRef,
};

use crate::format::{matrix_html, plain_text};

/// How the adapter reaches the homeserver, as the bot's account.
#[derive(Debug, Clone)]
pub struct MatrixSettings {
    /// The homeserver's base URL, e.g. `https://matrix.example.org`.
    pub homeserver: String,
    /// The bot's full id, `@tern:example.org`; its own events are skipped.
    pub user_id: String,
    pub access_token: String,
    /// How long one `/sync` long poll waits for events (default 30 s).
    pub poll_timeout: Duration,
    /// The bound of every other request, and what a sync may take beyond `poll_timeout`
    /// (default 30 s).
    pub request_timeout: Duration,
}

impl MatrixSettings {
    /// Settings with the default timeouts.
    pub fn new(
        homeserver: impl Into<String>,
        user_id: impl Into<String>,
        access_token: impl Into<String>,
    ) -> Self {
        MatrixSettings {
            homeserver: homeserver.into(),
            user_id: user_id.into(),
            access_token: access_token.into(),
            poll_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Settings that cannot make an adapter.
#[derive(Debug, thiserror::Error)]
pub enum MatrixSetupError {
    #[error("the Matrix homeserver URL {0:?} is not an http(s) URL")]
    Homeserver(String),
    #[error("the Matrix user id {0:?} is not a full id like @tern:example.org")]
    UserId(String),
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

/// Text longer than this is split by the runtime. Matrix limits an event to 64 KiB of JSON,
/// which holds the text twice (plain and HTML); 8000 characters leave room for both.
const MAX_MESSAGE_CHARS: usize = 8000;

/// How a refused download says why (the limit follows).
const TOO_LARGE: &str = "larger than the limit";

/// Transaction ids that make a retried send land once.
///
/// Matrix deduplicates `PUT /send/{type}/{txnId}` per access token: a second request with a
/// txn id the server has seen returns the first event's id and sends nothing. So a send gets
/// a fresh id (`tern.<boot nonce>.<counter>`) unless an earlier send of the *same* logical
/// message (same room, type and content — the digest) failed in a way that leaves its fate
/// unknown (a network error, a timeout, a 5xx, a 429): then the retry reuses that attempt's
/// id, and if the first attempt did reach the server, the retry returns its event instead of
/// posting a copy. Identical messages sent on purpose (two "Done.") get distinct ids, since
/// the first succeeded. The boot nonce keeps ids unique across restarts: a send cut off by a
/// crash may thus appear twice after the restart (never lost), as the trait carries no
/// durable message identity to derive the id from.
#[derive(Debug)]
struct Txns {
    boot: String,
    next: u64,
    /// Digest → txn id of sends whose outcome is unknown, oldest first in `order`.
    pending: HashMap<[u8; 32], String>,
    order: VecDeque<[u8; 32]>,
}

/// A cut timeline is filled with at most this many pages of 100 events.
const GAP_PAGES: usize = 10;

/// Sends whose fate is unknown kept for a retry; older ones are forgotten (their retry gets
/// a fresh id, at worst a duplicate).
const PENDING_TXNS: usize = 256;

impl Txns {
    fn new() -> Self {
        let mut nonce = [0u8; 8];
        // Without OS randomness, the time still separates boots.
        if getrandom::fill(&mut nonce).is_err() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default();
            nonce = (now as u64).to_le_bytes();
        }
        Txns {
            boot: hex::encode(nonce),
            next: 0,
            pending: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn take(&mut self, digest: &[u8; 32]) -> String {
        if let Some(txn) = self.pending.get(digest) {
            return txn.clone();
        }
        self.next += 1;
        format!("tern.{}.{}", self.boot, self.next)
    }

    fn settle(&mut self, digest: [u8; 32], txn: String, outcome_unknown: bool) {
        if outcome_unknown {
            if self.pending.insert(digest, txn).is_none() {
                self.order.push_back(digest);
                while self.order.len() > PENDING_TXNS {
                    if let Some(old) = self.order.pop_front() {
                        self.pending.remove(&old);
                    }
                }
            }
        } else if self.pending.remove(&digest).is_some() {
            self.order.retain(|d| d != &digest);
        }
    }
}

/// The Matrix adapter.
pub struct Matrix {
    settings: MatrixSettings,
    base: Url,
    http: reqwest::Client,
    txns: Mutex<Txns>,
}

impl std::fmt::Debug for Matrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the settings: they hold the token.
        f.debug_struct("Matrix")
            .field("homeserver", &self.settings.homeserver)
            .field("user_id", &self.settings.user_id)
            .finish_non_exhaustive()
    }
}

/// How a request's body is sent.
enum Body {
    None,
    Json(Value),
    Bytes { bytes: Vec<u8>, mime: String },
}

impl Matrix {
    pub fn new(settings: MatrixSettings) -> Result<Self, MatrixSetupError> {
        let base = Url::parse(&settings.homeserver)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && !u.cannot_be_a_base())
            .ok_or_else(|| MatrixSetupError::Homeserver(settings.homeserver.clone()))?;
        let valid_id = settings
            .user_id
            .strip_prefix('@')
            .and_then(|rest| rest.split_once(':'))
            .is_some_and(|(local, server)| !local.is_empty() && !server.is_empty());
        if !valid_id {
            return Err(MatrixSetupError::UserId(settings.user_id.clone()));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(settings.request_timeout)
            // Redirects stay on (a homeserver may send media downloads to a CDN): the token
            // is only in the Authorization header, which reqwest drops on another host.
            .build()
            .map_err(|e| MatrixSetupError::Client(e.to_string()))?;
        Ok(Matrix {
            settings,
            base,
            http,
            txns: Mutex::new(Txns::new()),
        })
    }

    /// `base` + the path segments, each percent-encoded where a path needs it (an id with
    /// `/`, `?` or `#` stays one segment).
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    fn client_url(&self, segments: &[&str]) -> Url {
        let mut all = vec!["_matrix", "client", "v3"];
        all.extend_from_slice(segments);
        self.url(&all)
    }

    /// One request; the answer's bytes on a 2xx, else the error it maps to. `what` names the
    /// call in errors (never the URL's query, never the token).
    async fn request_raw(
        &self,
        method: Method,
        url: Url,
        body: Body,
        what: &str,
        timeout: Duration,
        max_bytes: Option<u64>,
    ) -> Result<Vec<u8>, PlatformError> {
        let mut req = self
            .http
            .request(method, url)
            .bearer_auth(&self.settings.access_token)
            .timeout(timeout);
        req = match body {
            Body::None => req,
            Body::Json(v) => req.json(&v),
            Body::Bytes { bytes, mime } => req.header("content-type", mime).body(bytes),
        };
        let mut resp = req
            .send()
            .await
            .map_err(|e| PlatformError::Unavailable(format!("{what}: {}", e.without_url())))?;
        let status = resp.status();
        if !status.is_success() {
            let retry_header = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            let text = resp.bytes().await.unwrap_or_default();
            return Err(map_error(what, status, &text, retry_header));
        }
        if let (Some(limit), Some(len)) = (max_bytes, resp.content_length())
            && len > limit
        {
            return Err(PlatformError::Rejected(format!(
                "{what}: the file ({len} bytes) is {TOO_LARGE} of {limit} bytes"
            )));
        }
        let mut out = Vec::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| PlatformError::Unavailable(format!("{what}: {}", e.without_url())))?
        {
            out.extend_from_slice(&chunk);
            if let Some(limit) = max_bytes
                && out.len() as u64 > limit
            {
                return Err(PlatformError::Rejected(format!(
                    "{what}: the file is {TOO_LARGE} of {limit} bytes"
                )));
            }
        }
        Ok(out)
    }

    /// [`Matrix::request_raw`] with a JSON answer.
    async fn request(
        &self,
        method: Method,
        url: Url,
        body: Body,
        what: &str,
        timeout: Duration,
    ) -> Result<Value, PlatformError> {
        let bytes = self
            .request_raw(method, url, body, what, timeout, None)
            .await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| PlatformError::Unavailable(format!("{what}: the answer is not JSON: {e}")))
    }

    async fn sync(
        &self,
        since: Option<&str>,
        timeout: Duration,
    ) -> Result<api::SyncResponse, PlatformError> {
        let mut url = self.client_url(&["sync"]);
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("filter", &api::sync_filter())
                .append_pair("timeout", &timeout.as_millis().to_string());
            if let Some(since) = since {
                q.append_pair("since", since);
            }
        }
        let bytes = self
            .request_raw(
                Method::GET,
                url,
                Body::None,
                "sync",
                timeout + self.settings.request_timeout,
                None,
            )
            .await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            PlatformError::Unavailable(format!("sync: the answer does not parse: {e}"))
        })
    }

    /// Joins the rooms the bot is invited to. A join refused for good (the room is gone, the
    /// invite withdrawn) is logged and skipped; any other failure fails the poll, so that the
    /// invite comes again with the uncommitted cursor.
    async fn join_invites(&self, rooms: &api::Rooms) -> Result<(), PlatformError> {
        for room_id in rooms.invite.keys() {
            let joined = self
                .request(
                    Method::POST,
                    self.client_url(&["join", room_id]),
                    Body::Json(json!({})),
                    "join",
                    self.settings.request_timeout,
                )
                .await;
            match joined {
                Ok(_) => tracing::info!(room_id, "matrix: joined a room the bot was invited to"),
                Err(PlatformError::Rejected(why)) => {
                    tracing::warn!(room_id, %why, "matrix: cannot join a room the bot was invited to");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn poll_inner(&self, cursor: Option<&str>) -> Result<Batch, PlatformError> {
        let Some(cursor) = cursor else {
            // The first start: no history replayed, only the position.
            let sync = self.sync(None, Duration::ZERO).await?;
            self.join_invites(&sync.rooms).await?;
            return Ok(Batch {
                events: Vec::new(),
                next_cursor: Some(sync.next_batch),
            });
        };
        let sync = self.sync(Some(cursor), self.settings.poll_timeout).await?;
        self.join_invites(&sync.rooms).await?;
        let mut events = Vec::new();
        for (room_id, room) in &sync.rooms.join {
            let gap = match (&room.timeline.prev_batch, room.timeline.limited) {
                (Some(prev), true) => self.fill_gap(room_id, prev, cursor).await?,
                _ => Vec::new(),
            };
            let names: HashMap<&str, &str> = room
                .state
                .events
                .iter()
                .chain(&room.timeline.events)
                .filter(|e| e.kind == "m.room.member")
                .filter_map(|e| {
                    Some((
                        e.state_key.as_deref()?,
                        e.content.get("displayname")?.as_str()?,
                    ))
                })
                .collect();
            for ev in gap.iter().chain(&room.timeline.events) {
                if ev.sender == self.settings.user_id || ev.event_id.is_empty() {
                    continue;
                }
                if let Some(event) = map_event(room_id, ev, &names) {
                    events.push(event);
                }
            }
        }
        Ok(Batch {
            events,
            next_cursor: Some(sync.next_batch),
        })
    }

    /// The events a cut timeline left out: `/messages` backwards from the timeline's
    /// `prev_batch` down to the cursor the sync started at, oldest first. Past
    /// [`GAP_PAGES`] pages the oldest are left out, and that is logged.
    async fn fill_gap(
        &self,
        room_id: &str,
        prev_batch: &str,
        since: &str,
    ) -> Result<Vec<api::RoomEvent>, PlatformError> {
        let filter = json!({ "types": api::TIMELINE_TYPES }).to_string();
        let mut from = prev_batch.to_owned();
        let mut older = Vec::new();
        for page in 0.. {
            if page == GAP_PAGES {
                tracing::warn!(
                    room_id,
                    kept = older.len(),
                    "matrix: too many events since the last poll; the oldest are skipped"
                );
                break;
            }
            let mut url = self.client_url(&["rooms", room_id, "messages"]);
            url.query_pairs_mut()
                .append_pair("dir", "b")
                .append_pair("from", &from)
                .append_pair("to", since)
                .append_pair("limit", "100")
                .append_pair("filter", &filter);
            let bytes = self
                .request_raw(
                    Method::GET,
                    url,
                    Body::None,
                    "messages",
                    self.settings.request_timeout,
                    None,
                )
                .await?;
            let resp: api::MessagesResponse = serde_json::from_slice(&bytes).map_err(|e| {
                PlatformError::Unavailable(format!("messages: the answer does not parse: {e}"))
            })?;
            if resp.chunk.is_empty() {
                break;
            }
            older.extend(resp.chunk);
            match resp.end {
                Some(end) if end != from => from = end,
                _ => break,
            }
        }
        older.reverse();
        Ok(older)
    }

    /// Sends one event with a transaction id from [`Txns`]; its event id. `digest` names the
    /// logical message (what a retry of it sends again).
    async fn send_event(
        &self,
        room_id: &str,
        event_type: &str,
        content: Value,
        digest: [u8; 32],
    ) -> Result<String, PlatformError> {
        let txn = self.lock_txns().take(&digest);
        let url = self.client_url(&["rooms", room_id, "send", event_type, &txn]);
        let sent = self
            .request(
                Method::PUT,
                url,
                Body::Json(content),
                "send",
                self.settings.request_timeout,
            )
            .await
            .and_then(|v| {
                v.get("event_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        PlatformError::Unavailable("send: no event_id in the answer".into())
                    })
            });
        let unknown = matches!(
            sent,
            Err(PlatformError::Unavailable(_) | PlatformError::RetryAfter(_))
        );
        self.lock_txns().settle(digest, txn, unknown);
        sent
    }

    fn lock_txns(&self) -> std::sync::MutexGuard<'_, Txns> {
        // The map is only inserted into and removed from; a panic elsewhere cannot leave
        // it inconsistent.
        self.txns.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn download_inner(
        &self,
        file: &FileRef,
        max_bytes: u64,
    ) -> Result<Vec<u8>, PlatformError> {
        let (server, media_id) = file
            .id
            .strip_prefix("mxc://")
            .and_then(|rest| rest.split_once('/'))
            .filter(|(s, m)| !s.is_empty() && !m.is_empty() && !m.contains('/'))
            .ok_or_else(|| PlatformError::Rejected(format!("not an mxc:// URI: {}", file.id)))?;
        let authenticated = self.url(&[
            "_matrix", "client", "v1", "media", "download", server, media_id,
        ]);
        let got = self
            .request_raw(
                Method::GET,
                authenticated,
                Body::None,
                "download",
                self.settings.request_timeout,
                Some(max_bytes),
            )
            .await;
        match got {
            // A server without authenticated media does not know the endpoint.
            Err(PlatformError::Rejected(why)) if why.contains("M_UNRECOGNIZED") => {
                let legacy = self.url(&["_matrix", "media", "v3", "download", server, media_id]);
                self.request_raw(
                    Method::GET,
                    legacy,
                    Body::None,
                    "download",
                    self.settings.request_timeout,
                    Some(max_bytes),
                )
                .await
            }
            other => other,
        }
    }

    async fn send_file_inner(
        &self,
        chat: &ChatRef,
        file: &OutFile,
    ) -> Result<String, PlatformError> {
        let mime = file
            .mime_type
            .clone()
            .unwrap_or_else(|| "application/octet-stream".into());
        let mut url = self.url(&["_matrix", "media", "v3", "upload"]);
        url.query_pairs_mut().append_pair("filename", &file.name);
        let uploaded = self
            .request(
                Method::POST,
                url,
                Body::Bytes {
                    bytes: file.bytes.clone(),
                    mime: mime.clone(),
                },
                "upload",
                self.settings.request_timeout,
            )
            .await?;
        let uri = uploaded
            .get("content_uri")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                PlatformError::Unavailable("upload: no content_uri in the answer".into())
            })?;
        let mut content = json!({
            "msgtype": if file.is_image { "m.image" } else { "m.file" },
            "body": file.caption.clone().unwrap_or_else(|| file.name.clone()),
            "filename": file.name,
            "url": uri,
            "info": { "mimetype": mime, "size": file.bytes.len() },
        });
        add_relation(&mut content, chat, None);
        // The upload gives a new URI on each try: the logical message is the file itself.
        let mut h = Sha256::new();
        h.update(chat.chat_id.as_bytes());
        h.update([0]);
        h.update(chat.thread_id.as_deref().unwrap_or_default().as_bytes());
        h.update([0]);
        h.update(file.name.as_bytes());
        h.update([0]);
        h.update(file.caption.as_deref().unwrap_or_default().as_bytes());
        h.update([0]);
        h.update(Sha256::digest(&file.bytes));
        self.send_event(
            &chat.chat_id,
            "m.room.message",
            content,
            h.finalize().into(),
        )
        .await
    }
}

/// The digest of a logical message: the room, the event type and the content.
fn digest(room_id: &str, event_type: &str, content: &Value) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(room_id.as_bytes());
    h.update([0]);
    h.update(event_type.as_bytes());
    h.update([0]);
    // serde_json's maps are sorted: the same content serialises the same.
    h.update(content.to_string().as_bytes());
    h.finalize().into()
}

/// Maps an error answer to [`PlatformError`].
fn map_error(
    what: &str,
    status: StatusCode,
    body: &[u8],
    retry_header: Option<u64>,
) -> PlatformError {
    let err: api::ErrorBody = serde_json::from_slice(body).unwrap_or_default();
    let code = err.errcode.as_deref().unwrap_or("");
    let text = format!(
        "{what}: {} {code} {}",
        status.as_u16(),
        err.error.as_deref().unwrap_or("")
    )
    .trim_end()
    .to_owned();
    if status == StatusCode::TOO_MANY_REQUESTS || code == "M_LIMIT_EXCEEDED" {
        let wait = err
            .retry_after_ms
            .map(Duration::from_millis)
            .or(retry_header.map(Duration::from_secs))
            .unwrap_or(Duration::from_secs(1));
        return PlatformError::RetryAfter(wait);
    }
    if status == StatusCode::UNAUTHORIZED || matches!(code, "M_UNKNOWN_TOKEN" | "M_MISSING_TOKEN") {
        return PlatformError::Unauthorized(text);
    }
    if status.is_client_error() {
        return PlatformError::Rejected(text);
    }
    PlatformError::Unavailable(text)
}

/// Maps one timeline event; `None` for what the runtime does not handle.
fn map_event(room_id: &str, ev: &api::RoomEvent, names: &HashMap<&str, &str>) -> Option<Event> {
    let content = &ev.content;
    let relates = content.get("m.relates_to");
    let rel_type = relates
        .and_then(|r| r.get("rel_type"))
        .and_then(Value::as_str);
    let user = UserRef {
        id: ev.sender.clone(),
        name: names
            .get(ev.sender.as_str())
            .map(|n| (*n).to_owned())
            .unwrap_or_else(|| ev.sender.clone()),
    };
    let str_of = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    match ev.kind.as_str() {
        "m.reaction" => {
            let r = relates?;
            if rel_type != Some("m.annotation") {
                return None;
            }
            Some(Event {
                key: ev.event_id.clone(),
                chat: ChatRef {
                    chat_id: room_id.to_owned(),
                    thread_id: None,
                },
                user,
                kind: EventKind::Reaction {
                    message_id: str_of(r.get("event_id"))?,
                    key: str_of(r.get("key"))?,
                },
            })
        }
        "m.room.message" => {
            // Edits of a user's message are not new messages.
            if rel_type == Some("m.replace") {
                return None;
            }
            let msgtype = content.get("msgtype").and_then(Value::as_str)?;
            let body = content.get("body").and_then(Value::as_str).unwrap_or("");
            let thread_id = (rel_type == Some("m.thread"))
                .then(|| str_of(relates.and_then(|r| r.get("event_id"))))
                .flatten();
            // In a thread, `m.in_reply_to` with `is_falling_back` only points at the thread's
            // latest message for clients without threads: not a reply.
            let falling_back = relates
                .and_then(|r| r.get("is_falling_back"))
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let reply_to = str_of(
                relates
                    .and_then(|r| r.get("m.in_reply_to"))
                    .and_then(|r| r.get("event_id")),
            )
            .filter(|_| !(thread_id.is_some() && falling_back));
            let (text, files) = match msgtype {
                "m.text" | "m.notice" | "m.emote" => {
                    let text = if reply_to.is_some() {
                        strip_reply_fallback(body)
                    } else {
                        body.to_owned()
                    };
                    (text, Vec::new())
                }
                "m.image" | "m.file" | "m.video" | "m.audio" => {
                    let url = content.get("url").and_then(Value::as_str)?;
                    let filename = content.get("filename").and_then(Value::as_str);
                    let info = content.get("info");
                    let file = FileRef {
                        id: url.to_owned(),
                        name: filename
                            .or((!body.is_empty()).then_some(body))
                            .map(str::to_owned),
                        mime_type: str_of(info.and_then(|i| i.get("mimetype"))),
                        is_image: msgtype == "m.image",
                        size: info.and_then(|i| i.get("size")).and_then(Value::as_u64),
                    };
                    // The body is a caption only when a file name is given apart from it.
                    let caption = match filename {
                        Some(f) if f != body => body.to_owned(),
                        _ => String::new(),
                    };
                    (caption, vec![file])
                }
                _ => return None,
            };
            Some(Event {
                key: ev.event_id.clone(),
                chat: ChatRef {
                    chat_id: room_id.to_owned(),
                    thread_id,
                },
                user,
                kind: EventKind::Message {
                    message_id: ev.event_id.clone(),
                    text,
                    files,
                    reply_to,
                },
            })
        }
        _ => None,
    }
}

/// A reply's body without the quote of the message it replies to (older clients put
/// `> <@user:server> text` lines and a blank line before the reply).
fn strip_reply_fallback(body: &str) -> String {
    if !body.starts_with("> <") {
        return body.to_owned();
    }
    let mut lines = body.lines();
    for line in lines.by_ref() {
        if !line.starts_with('>') {
            break;
        }
    }
    lines.collect::<Vec<_>>().join("\n")
}

/// The buttons as text, for a platform without buttons: plain and HTML.
fn buttons_text(rows: &[Vec<Button>]) -> Option<(String, String)> {
    let buttons: Vec<&Button> = rows.iter().flatten().collect();
    if buttons.is_empty() {
        return None;
    }
    let items: Vec<String> = buttons
        .iter()
        .map(|b| match &b.reaction {
            Some(r) => format!("{r} {}", b.label),
            None => b.label.clone(),
        })
        .collect();
    let words: Vec<String> = buttons.iter().map(|b| b.label.to_lowercase()).collect();
    let plain = if buttons.iter().any(|b| b.reaction.is_some()) {
        format!(
            "React {}, or reply to this message with {}",
            items.join(" · "),
            words.join(" / ")
        )
    } else {
        format!("Reply to this message with {}", words.join(" / "))
    };
    // The labels may be the agent's words (a question's options): shown as exactly them.
    let html = matrix_html(&crate::format::escape_markdown(&plain));
    Some((plain, html))
}

/// The message content of an [`OutMessage`] (text, formatting, buttons as text).
fn message_content(msg: &OutMessage) -> Value {
    let mut body = plain_text(&msg.markdown);
    let mut html = matrix_html(&msg.markdown);
    if let Some((plain, h)) = buttons_text(&msg.buttons) {
        body.push_str("\n\n");
        body.push_str(&plain);
        html.push_str("<br><br>");
        html.push_str(&h);
    }
    json!({
        "msgtype": "m.text",
        "body": body,
        "format": "org.matrix.custom.html",
        "formatted_body": html,
    })
}

/// Adds the thread and reply relations of a message sent to `chat`.
fn add_relation(content: &mut Value, chat: &ChatRef, reply_to: Option<&str>) {
    let relation = match (&chat.thread_id, reply_to) {
        (Some(root), reply) => json!({
            "rel_type": "m.thread",
            "event_id": root,
            "is_falling_back": reply.is_none(),
            "m.in_reply_to": { "event_id": reply.unwrap_or(root) },
        }),
        (None, Some(reply)) => json!({ "m.in_reply_to": { "event_id": reply } }),
        (None, None) => return,
    };
    if let Some(obj) = content.as_object_mut() {
        obj.insert("m.relates_to".into(), relation);
    }
}

impl Platform for Matrix {
    fn platform(&self) -> &'static str {
        "matrix"
    }

    fn limits(&self) -> Limits {
        Limits {
            max_message_chars: MAX_MESSAGE_CHARS,
            buttons: false,
            // No buttons; the runtime's signed data keeps Telegram's bound so it is the same
            // everywhere.
            max_callback_bytes: 64,
        }
    }

    fn poll<'a>(
        &'a self,
        cursor: Option<&'a str>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Batch, PlatformError>> {
        Box::pin(async move {
            tokio::select! {
                biased;
                () = cancel.cancelled() => Err(PlatformError::Cancelled),
                batch = self.poll_inner(cursor) => batch,
            }
        })
    }

    fn send<'a>(
        &'a self,
        chat: &'a ChatRef,
        msg: &'a OutMessage,
    ) -> BoxFuture<'a, Result<String, PlatformError>> {
        Box::pin(async move {
            let mut content = message_content(msg);
            add_relation(&mut content, chat, msg.reply_to.as_deref());
            let d = digest(&chat.chat_id, "m.room.message", &content);
            self.send_event(&chat.chat_id, "m.room.message", content, d)
                .await
        })
    }

    fn edit<'a>(
        &'a self,
        chat: &'a ChatRef,
        message_id: &'a str,
        msg: &'a OutMessage,
    ) -> BoxFuture<'a, Result<(), PlatformError>> {
        Box::pin(async move {
            let new_content = message_content(msg);
            // Clients without edits show the fallback: the new text marked with `* `.
            let star = |field: &str| {
                format!(
                    "* {}",
                    new_content.get(field).and_then(Value::as_str).unwrap_or("")
                )
            };
            let content = json!({
                "msgtype": "m.text",
                "body": star("body"),
                "format": "org.matrix.custom.html",
                "formatted_body": star("formatted_body"),
                "m.new_content": new_content,
                "m.relates_to": { "rel_type": "m.replace", "event_id": message_id },
            });
            let d = digest(&chat.chat_id, "m.room.message", &content);
            self.send_event(&chat.chat_id, "m.room.message", content, d)
                .await
                .map(|_| ())
        })
    }

    fn typing<'a>(&'a self, chat: &'a ChatRef) -> BoxFuture<'a, Result<(), PlatformError>> {
        Box::pin(async move {
            self.request(
                Method::PUT,
                self.client_url(&["rooms", &chat.chat_id, "typing", &self.settings.user_id]),
                Body::Json(json!({ "typing": true, "timeout": 30000 })),
                "typing",
                self.settings.request_timeout,
            )
            .await
            .map(|_| ())
        })
    }

    fn answer_callback<'a>(
        &'a self,
        _callback_id: &'a str,
        _notice: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), PlatformError>> {
        // No buttons, no callbacks.
        Box::pin(async { Ok(()) })
    }

    fn download<'a>(
        &'a self,
        file: &'a FileRef,
        max_bytes: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, PlatformError>> {
        Box::pin(self.download_inner(file, max_bytes))
    }

    fn send_file<'a>(
        &'a self,
        chat: &'a ChatRef,
        file: &'a OutFile,
    ) -> BoxFuture<'a, Result<String, PlatformError>> {
        Box::pin(self.send_file_inner(chat, file))
    }
}

#[cfg(test)]
mod tests;
