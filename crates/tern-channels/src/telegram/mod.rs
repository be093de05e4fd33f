//! The Telegram adapter: the Bot API (<https://core.telegram.org/bots/api>) behind
//! [`Platform`], with long polling, so it works behind NAT with outbound HTTPS only.
//!
//! - [`Platform::poll`] is one `getUpdates` with the committed cursor as `offset`, a positive
//!   `timeout` ([`TelegramSettings::poll_timeout`]) and the HTTP timeout longer than it.
//!   Passing an offset is what confirms updates to Telegram, so nothing is confirmed before
//!   the runtime has committed the cursor with the events. `allowed_updates` is
//!   `["message", "callback_query"]`: tern acts on new messages and button taps; edits of
//!   messages already handled cannot change a turn, so `edited_message` is not asked for.
//!   Updates tern ignores (service messages, stickers, bots, inline-mode taps) still advance
//!   the cursor. A webhook left on the bot is deleted (Telegram refuses `getUpdates` while
//!   one is set), keeping its pending updates.
//! - Events: `key` is the `update_id`; users and chats are the numeric ids as text; a message
//!   in a forum topic carries the topic's `message_thread_id` as its thread; a photo is its
//!   largest size.
//! - Outbound text is HTML (`parse_mode: "HTML"`); when Telegram refuses it ("can't parse
//!   entities") the same message goes again as plain text.
//! - Errors ([`PlatformError`]): 429 → `RetryAfter(parameters.retry_after)`; 401 and 404 (what
//!   Telegram answers to a wrong or revoked token) → `Unauthorized`; 409 → `Conflict`; 403
//!   (the user blocked the bot, the bot left the group) and other 4xx → `Rejected`, as they
//!   concern one chat; 5xx, network errors, answers that are not the API's JSON →
//!   `Unavailable`. The token is part of every URL, so no error text carries a URL, and every
//!   text is scrubbed of the token besides.

pub mod api;

use std::time::Duration;

use reqwest::multipart::{Form, Part};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::format;
use crate::platform::{
    Batch, BoxFuture, Button, ChatRef, Event, EventKind, FileRef, Limits, OutFile, OutMessage,
    Platform, PlatformError, UserRef,
};

/// The public Bot API server.
pub const DEFAULT_API_URL: &str = "https://api.telegram.org";

/// The update kinds tern asks for (see the module docs).
pub const ALLOWED_UPDATES: &[&str] = &["message", "callback_query"];

/// A caption's limit, in characters.
const MAX_CAPTION_CHARS: usize = 1024;

/// The longest notice a tap's answer shows, in characters.
const MAX_NOTICE_CHARS: usize = 200;

/// When a 429 names no `retry_after` (Telegram always does; a proxy might not).
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(5);

/// Telegram's limits: 4096 characters a message, 64 bytes of callback data.
pub const LIMITS: Limits = Limits {
    max_message_chars: 4096,
    buttons: true,
    max_callback_bytes: 64,
};

/// How to reach one bot.
#[derive(Clone)]
pub struct TelegramSettings {
    /// The bot's token from @BotFather (`123456:ABC…`).
    pub token: String,
    /// The Bot API server, without a trailing `/bot…` ([`DEFAULT_API_URL`]; a self-hosted
    /// Bot API server or a test's fake).
    pub api_url: String,
    /// How long one `getUpdates` waits for an update (Telegram caps it at 50 s).
    pub poll_timeout: Duration,
    /// The bound of every other request, and what a long poll may take beyond its timeout.
    pub request_timeout: Duration,
}

impl TelegramSettings {
    /// The settings for `token` with the defaults: the public API, 50 s long polls, 30 s
    /// requests.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            api_url: DEFAULT_API_URL.to_owned(),
            poll_timeout: Duration::from_secs(50),
            request_timeout: Duration::from_secs(30),
        }
    }
}

impl std::fmt::Debug for TelegramSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramSettings")
            .field("token", &"<redacted>")
            .field("api_url", &self.api_url)
            .field("poll_timeout", &self.poll_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// One bot on the Bot API.
#[derive(Debug)]
pub struct Telegram {
    settings: TelegramSettings,
    http: reqwest::Client,
}

impl Telegram {
    pub fn new(mut settings: TelegramSettings) -> Result<Self, PlatformError> {
        settings.api_url = settings.api_url.trim_end_matches('/').to_owned();
        let http = reqwest::Client::builder()
            .connect_timeout(settings.request_timeout)
            // A redirect would carry the credentials (Telegram's are in the URL) to wherever
            // it points, and reqwest logs redirect URLs: the API never redirects, so refuse.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| PlatformError::Unavailable(format!("HTTP client: {}", e.without_url())))?;
        Ok(Self { settings, http })
    }

    fn url(&self, method: &str) -> String {
        format!(
            "{}/bot{}/{method}",
            self.settings.api_url, self.settings.token
        )
    }

    /// `text` without the token, should anything have echoed it.
    fn scrub(&self, text: String) -> String {
        if self.settings.token.is_empty() {
            text
        } else {
            text.replace(&self.settings.token, "<token>")
        }
    }

    fn scrub_err(&self, e: PlatformError) -> PlatformError {
        use PlatformError as E;
        match e {
            E::Unauthorized(t) => E::Unauthorized(self.scrub(t)),
            E::Rejected(t) => E::Rejected(self.scrub(t)),
            E::Conflict(t) => E::Conflict(self.scrub(t)),
            E::Unavailable(t) => E::Unavailable(self.scrub(t)),
            other => other,
        }
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<T, PlatformError> {
        let sent = self
            .http
            .post(self.url(method))
            .timeout(timeout)
            .json(body)
            .send()
            .await;
        self.finish(method, sent).await
    }

    async fn finish<T: DeserializeOwned>(
        &self,
        method: &str,
        sent: Result<reqwest::Response, reqwest::Error>,
    ) -> Result<T, PlatformError> {
        let result = async {
            let resp = sent.map_err(|e| network_error(method, e))?;
            let status = resp.status().as_u16();
            let bytes = resp.bytes().await.map_err(|e| network_error(method, e))?;
            let value = classify(method, status, serde_json::from_slice(&bytes).ok())?;
            serde_json::from_value(value).map_err(|e| {
                PlatformError::Unavailable(format!("{method}: unexpected answer: {e}"))
            })
        }
        .await;
        result.map_err(|e| self.scrub_err(e))
    }

    /// The bot itself (`getMe`): its id and name, or why the token does not work. What a
    /// start-up check or a status line shows.
    pub async fn me(&self) -> Result<UserRef, PlatformError> {
        let me: api::User = self
            .call("getMe", &json!({}), self.settings.request_timeout)
            .await?;
        Ok(user(&me))
    }

    /// One `getUpdates`. A webhook (set by another deployment of the bot) makes Telegram
    /// refuse it; the channel was configured to poll, so the webhook is removed (its pending
    /// updates kept) and the poll repeated once.
    async fn get_updates(&self, body: &Value) -> Result<Vec<Value>, PlatformError> {
        let timeout = self.settings.poll_timeout + self.settings.request_timeout;
        match self.call("getUpdates", body, timeout).await {
            Err(PlatformError::Conflict(why)) if why.contains("webhook") => {
                tracing::warn!("the bot had a webhook; deleting it to poll for updates");
                self.call::<Value>(
                    "deleteWebhook",
                    &json!({ "drop_pending_updates": false }),
                    self.settings.request_timeout,
                )
                .await?;
                self.call("getUpdates", body, timeout).await
            }
            other => other,
        }
    }

    /// Calls a method that sends `text` as HTML; on "can't parse entities" calls it again
    /// with `plain` and no `parse_mode`.
    async fn call_html<T: DeserializeOwned>(
        &self,
        method: &str,
        mut body: Value,
        plain: impl FnOnce() -> String,
    ) -> Result<T, PlatformError> {
        let timeout = self.settings.request_timeout;
        match self.call(method, &body, timeout).await {
            Err(PlatformError::Rejected(why)) if why.contains("can't parse entities") => {
                tracing::warn!(method, %why, "Telegram refused the HTML; sending plain text");
                body["text"] = json!(plain());
                if let Some(o) = body.as_object_mut() {
                    o.remove("parse_mode");
                }
                self.call(method, &body, timeout).await
            }
            other => other,
        }
    }
}

/// The answer of a call, or its error (see the module docs for the mapping).
fn classify(
    method: &str,
    status: u16,
    answer: Option<api::Response>,
) -> Result<Value, PlatformError> {
    use PlatformError as E;
    let Some(answer) = answer else {
        return Err(match status {
            401 | 404 => E::Unauthorized(format!("{method}: HTTP {status}")),
            429 => E::RetryAfter(DEFAULT_RETRY_AFTER),
            _ => E::Unavailable(format!(
                "{method}: HTTP {status} with an answer that is not the Bot API's JSON"
            )),
        });
    };
    if answer.ok && (200..300).contains(&status) {
        return Ok(answer.result.unwrap_or(Value::Null));
    }
    let code = answer.error_code.unwrap_or(i64::from(status));
    let why = format!(
        "{method}: {}",
        answer
            .description
            .unwrap_or_else(|| format!("error {code}"))
    );
    Err(match code {
        429 => E::RetryAfter(
            answer
                .parameters
                .and_then(|p| p.retry_after)
                .map_or(DEFAULT_RETRY_AFTER, Duration::from_secs),
        ),
        401 | 404 => E::Unauthorized(why),
        409 => E::Conflict(why),
        400..=499 => E::Rejected(why),
        _ => E::Unavailable(why),
    })
}

/// A network error without its URL (which holds the token), with its causes.
fn network_error(method: &str, e: reqwest::Error) -> PlatformError {
    let e = e.without_url();
    if e.is_timeout() {
        return PlatformError::Unavailable(format!("{method}: timed out"));
    }
    let mut text = format!("{method}: {e}");
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    PlatformError::Unavailable(text)
}

/// A chat id as the API takes it: the number, or an `@channelusername`.
fn chat_id(chat: &ChatRef) -> Value {
    match chat.chat_id.parse::<i64>() {
        Ok(n) => json!(n),
        Err(_) => json!(chat.chat_id),
    }
}

fn int(what: &str, id: &str) -> Result<i64, PlatformError> {
    id.parse()
        .map_err(|_| PlatformError::Rejected(format!("not a Telegram {what}: {id:?}")))
}

fn keyboard(rows: &[Vec<Button>]) -> Value {
    let rows: Vec<Vec<Value>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|b| json!({"text": b.label, "callback_data": b.data}))
                .collect()
        })
        .collect();
    json!({ "inline_keyboard": rows })
}

/// The common part of a message in `chat`: its id and forum topic.
fn addressed(chat: &ChatRef) -> Result<Value, PlatformError> {
    let mut body = json!({ "chat_id": chat_id(chat) });
    if let Some(t) = &chat.thread_id {
        body["message_thread_id"] = json!(int("topic id", t)?);
    }
    Ok(body)
}

/// One update as a tern event; `None` for what tern does not act on.
pub fn event(update: api::Update) -> Option<Event> {
    let key = update.update_id.to_string();
    if let Some(m) = update.message {
        let from = m.from.as_ref().filter(|u| !u.is_bot)?;
        let mut files = Vec::new();
        if let Some(largest) = m.photo.iter().flatten().max_by_key(|p| {
            (
                u64::from(p.width) * u64::from(p.height),
                p.file_size.unwrap_or(0),
            )
        }) {
            files.push(FileRef {
                id: largest.file_id.clone(),
                name: None,
                mime_type: Some("image/jpeg".to_owned()),
                is_image: true,
                size: largest.file_size,
            });
        }
        if let Some(d) = &m.document {
            files.push(FileRef {
                id: d.file_id.clone(),
                name: d.file_name.clone(),
                mime_type: d.mime_type.clone(),
                is_image: false,
                size: d.file_size,
            });
        }
        let text = m
            .text
            .clone()
            .or_else(|| m.caption.clone())
            .unwrap_or_default();
        if text.is_empty() && files.is_empty() {
            return None;
        }
        let thread = m.topic();
        // In a forum topic every message "replies" to the topic's first message.
        let reply_to = m
            .reply_to_message
            .as_ref()
            .map(|r| r.message_id)
            .filter(|r| Some(*r) != thread);
        return Some(Event {
            key,
            chat: ChatRef {
                chat_id: m.chat.id.to_string(),
                thread_id: thread.map(|t| t.to_string()),
            },
            user: user(from),
            kind: EventKind::Message {
                message_id: m.message_id.to_string(),
                text,
                files,
                reply_to: reply_to.map(|r| r.to_string()),
            },
        });
    }
    if let Some(q) = update.callback_query {
        // Inline-mode buttons have no message; game buttons no data: neither is tern's.
        let m = q.message?;
        let data = q.data?;
        return Some(Event {
            key,
            chat: ChatRef {
                chat_id: m.chat.id.to_string(),
                thread_id: m.topic().map(|t| t.to_string()),
            },
            user: user(&q.from),
            kind: EventKind::Callback {
                callback_id: q.id,
                message_id: m.message_id.to_string(),
                data,
            },
        });
    }
    None
}

fn user(u: &api::User) -> UserRef {
    UserRef {
        id: u.id.to_string(),
        name: u.display_name(),
    }
}

impl Platform for Telegram {
    fn platform(&self) -> &'static str {
        "telegram"
    }

    fn limits(&self) -> Limits {
        LIMITS
    }

    fn poll<'a>(
        &'a self,
        cursor: Option<&'a str>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Batch, PlatformError>> {
        Box::pin(async move {
            let mut body = json!({
                "timeout": self.settings.poll_timeout.as_secs().max(1),
                "allowed_updates": ALLOWED_UPDATES,
            });
            match cursor.map(str::parse::<i64>) {
                Some(Ok(offset)) => body["offset"] = json!(offset),
                // Only what this adapter returned is ever committed; without an offset
                // Telegram sends every unconfirmed update, which is what follows the last
                // confirmed one anyway.
                Some(Err(_)) => tracing::warn!(?cursor, "ignoring a cursor that is not an offset"),
                None => {}
            }
            let updates = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(PlatformError::Cancelled),
                r = self.get_updates(&body) => r?,
            };
            let mut batch = Batch::default();
            let mut last = None;
            for raw in updates {
                let Some(id) = raw.get("update_id").and_then(Value::as_i64) else {
                    tracing::warn!("skipping an update without an update_id");
                    continue;
                };
                last = Some(last.map_or(id, |l: i64| l.max(id)));
                match serde_json::from_value::<api::Update>(raw) {
                    Ok(u) => batch.events.extend(event(u)),
                    Err(e) => {
                        tracing::warn!(update_id = id, %e, "skipping an update tern cannot read")
                    }
                }
            }
            batch.next_cursor = last.map(|l| (l + 1).to_string());
            Ok(batch)
        })
    }

    fn send<'a>(
        &'a self,
        chat: &'a ChatRef,
        msg: &'a OutMessage,
    ) -> BoxFuture<'a, Result<String, PlatformError>> {
        Box::pin(async move {
            let mut body = addressed(chat)?;
            body["text"] = json!(format::telegram_html(&msg.markdown));
            body["parse_mode"] = json!("HTML");
            if let Some(r) = &msg.reply_to {
                // A reply to a message deleted meanwhile is still worth sending.
                body["reply_parameters"] = json!({
                    "message_id": int("message id", r)?,
                    "allow_sending_without_reply": true,
                });
            }
            if !msg.buttons.is_empty() {
                body["reply_markup"] = keyboard(&msg.buttons);
            }
            let sent: api::SentMessage = self
                .call_html("sendMessage", body, || format::plain_text(&msg.markdown))
                .await?;
            Ok(sent.message_id.to_string())
        })
    }

    fn edit<'a>(
        &'a self,
        chat: &'a ChatRef,
        message_id: &'a str,
        msg: &'a OutMessage,
    ) -> BoxFuture<'a, Result<(), PlatformError>> {
        Box::pin(async move {
            let body = json!({
                "chat_id": chat_id(chat),
                "message_id": int("message id", message_id)?,
                "text": format::telegram_html(&msg.markdown),
                "parse_mode": "HTML",
                // Always given: an empty keyboard removes the buttons.
                "reply_markup": keyboard(&msg.buttons),
            });
            match self
                .call_html::<Value>("editMessageText", body, || {
                    format::plain_text(&msg.markdown)
                })
                .await
            {
                Ok(_) => Ok(()),
                // The message already says this: what the caller wanted holds.
                Err(PlatformError::Rejected(why)) if why.contains("message is not modified") => {
                    Ok(())
                }
                Err(e) => Err(e),
            }
        })
    }

    fn typing<'a>(&'a self, chat: &'a ChatRef) -> BoxFuture<'a, Result<(), PlatformError>> {
        Box::pin(async move {
            let mut body = addressed(chat)?;
            body["action"] = json!("typing");
            self.call::<Value>("sendChatAction", &body, self.settings.request_timeout)
                .await
                .map(drop)
        })
    }

    fn answer_callback<'a>(
        &'a self,
        callback_id: &'a str,
        notice: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), PlatformError>> {
        Box::pin(async move {
            let mut body = json!({ "callback_query_id": callback_id });
            if let Some(t) = notice {
                body["text"] = json!(cut(t, MAX_NOTICE_CHARS));
            }
            self.call::<Value>("answerCallbackQuery", &body, self.settings.request_timeout)
                .await
                .map(drop)
        })
    }

    fn download<'a>(
        &'a self,
        file: &'a FileRef,
        max_bytes: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, PlatformError>> {
        Box::pin(async move {
            let too_big = |size: u64| {
                PlatformError::Rejected(format!(
                    "the file is too large: {size} bytes, more than {max_bytes}"
                ))
            };
            if let Some(size) = file.size.filter(|s| *s > max_bytes) {
                return Err(too_big(size));
            }
            let info: api::File = self
                .call(
                    "getFile",
                    &json!({ "file_id": file.id }),
                    self.settings.request_timeout,
                )
                .await?;
            if let Some(size) = info.file_size.filter(|s| *s > max_bytes) {
                return Err(too_big(size));
            }
            let Some(path) = info.file_path else {
                return Err(PlatformError::Rejected(
                    "getFile: the file cannot be downloaded (no file_path)".to_owned(),
                ));
            };
            let url = format!(
                "{}/file/bot{}/{path}",
                self.settings.api_url, self.settings.token
            );
            let fail = |e: reqwest::Error| self.scrub_err(network_error("file download", e));
            let mut resp = self
                .http
                .get(url)
                .timeout(self.settings.request_timeout)
                .send()
                .await
                .map_err(fail)?;
            let status = resp.status().as_u16();
            if !resp.status().is_success() {
                let bytes = resp.bytes().await.map_err(fail)?;
                return Err(self.scrub_err(
                    classify("file download", status, serde_json::from_slice(&bytes).ok())
                        .err()
                        .unwrap_or_else(|| {
                            PlatformError::Unavailable(format!("file download: HTTP {status}"))
                        }),
                ));
            }
            if let Some(size) = resp.content_length().filter(|s| *s > max_bytes) {
                return Err(too_big(size));
            }
            let mut bytes = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(fail)? {
                bytes.extend_from_slice(&chunk);
                if bytes.len() as u64 > max_bytes {
                    return Err(too_big(bytes.len() as u64));
                }
            }
            Ok(bytes)
        })
    }

    fn send_file<'a>(
        &'a self,
        chat: &'a ChatRef,
        file: &'a OutFile,
    ) -> BoxFuture<'a, Result<String, PlatformError>> {
        Box::pin(async move {
            let (method, field) = if file.is_image {
                ("sendPhoto", "photo")
            } else {
                ("sendDocument", "document")
            };
            let mut part = Part::bytes(file.bytes.clone()).file_name(file.name.clone());
            if let Some(m) = &file.mime_type {
                part = part.mime_str(m).map_err(|_| {
                    PlatformError::Rejected(format!("{method}: not a MIME type: {m:?}"))
                })?;
            }
            let mut form = Form::new()
                .text("chat_id", chat.chat_id.clone())
                .part(field, part);
            if let Some(t) = &chat.thread_id {
                form = form.text("message_thread_id", int("topic id", t)?.to_string());
            }
            if let Some(c) = &file.caption {
                // Plain text: a caption cut to its limit could break HTML tags.
                form = form.text("caption", cut(&format::plain_text(c), MAX_CAPTION_CHARS));
            }
            let sent = self
                .http
                .post(self.url(method))
                .timeout(self.settings.request_timeout)
                .multipart(form)
                .send()
                .await;
            let sent: api::SentMessage = self.finish(method, sent).await?;
            Ok(sent.message_id.to_string())
        })
    }
}

/// `text` within one of Telegram's limits: cut with an ellipsis rather than refused, so the
/// file still goes, the tap is still answered.
fn cut(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max_chars.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests;
