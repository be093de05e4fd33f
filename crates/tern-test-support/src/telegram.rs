//! A scripted fake of the Telegram Bot API on loopback, for the Telegram channel's tests.
//!
//! [`FakeTelegram::start`] binds `127.0.0.1:0` and serves `{base}/bot<TOKEN>/<method>` (GET or
//! POST; parameters as a query string, a JSON body, a form or `multipart/form-data`) and file
//! downloads at `{base}/file/bot<TOKEN>/<file_path>`, following the documented semantics
//! (<https://core.telegram.org/bots/api>) where tern relies on them:
//!
//! - `getUpdates`: updates with `update_id >= offset`; a call with an `offset` confirms (forgets)
//!   every update before it, so a restarted client polling with its committed offset gets
//!   exactly the unconfirmed ones. With `timeout > 0` and nothing to deliver the request is held
//!   until an update arrives or the timeout passes (a wake-up, not a busy loop). The last
//!   `allowed_updates` given is remembered; updates of other kinds are not delivered. A newer
//!   `getUpdates` ends a held older one with `409 Conflict`.
//! - `sendMessage` (HTML checked for supported, balanced tags; at most 4096 characters after
//!   entity parsing), `editMessageText` ("message is not modified" when nothing changes),
//!   `editMessageReplyMarkup`, `sendChatAction`, `answerCallbackQuery` (once per query),
//!   `getMe`, `getFile`, `sendDocument`, `sendPhoto`, `deleteWebhook`. Message ids increase
//!   per chat, shared by the users' messages and the bot's, as in a real chat.
//! - a wrong or revoked token answers `401 Unauthorized`, an unknown method `404 Not Found`.
//!
//! The test plays the users ([`FakeTelegram::user_sends`], [`FakeTelegram::user_taps`], …),
//! inspects what the bot did ([`FakeTelegram::sent`], [`FakeTelegram::edits`], …, and the
//! `wait_*` variants, bounded like [`crate::wait`]), and injects faults
//! ([`FakeTelegram::fail_next`]). All state lives in the fake, so a client can be killed and
//! another connect.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Path, Query, RawQuery, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

/// The bot's own user id; the token starts with it, as real tokens do.
pub const BOT_ID: i64 = 7_000_001;

/// Telegram's limit on a message's text, in characters after entity parsing.
pub const MAX_TEXT_CHARS: usize = 4096;

/// The longest notice `answerCallbackQuery` shows.
pub const MAX_CALLBACK_TEXT_CHARS: usize = 200;

/// A fault the next calls of a method answer with ([`FakeTelegram::fail_next`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// `429 Too Many Requests: retry after N` with `parameters.retry_after: N`.
    TooManyRequests { retry_after: u64 },
    /// `500 Internal Server Error`.
    ServerError,
    /// `400 Bad Request: can't parse entities` — only for calls that set `parse_mode`
    /// (calls without it pass and do not use the fault up).
    CantParseEntities,
    /// A body that is not JSON, with status 200.
    Garbage,
}

/// One message the bot sent (`sendMessage`, `sendDocument`, `sendPhoto`).
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    pub method: String,
    pub chat_id: i64,
    pub message_id: i64,
    /// The text (`sendMessage`) or caption, as sent.
    pub text: Option<String>,
    pub parse_mode: Option<String>,
    /// `reply_markup` as sent (`{"inline_keyboard": [[{"text", "callback_data"}]]}`).
    pub reply_markup: Option<Value>,
    /// The message replied to (`reply_parameters.message_id` or `reply_to_message_id`).
    pub reply_to: Option<i64>,
    pub thread_id: Option<i64>,
    /// A sent file: its name and bytes.
    pub file: Option<(String, Vec<u8>)>,
}

impl Sent {
    /// The text as the chat shows it (HTML tags removed, entities decoded).
    pub fn shown(&self) -> String {
        shown(self.text.as_deref(), self.parse_mode.as_deref())
    }

    /// Every button's `callback_data`, row by row.
    pub fn button_data(&self) -> Vec<String> {
        keyboard_data(self.reply_markup.as_ref())
    }
}

/// One `editMessageText` / `editMessageReplyMarkup` that Telegram accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    pub method: String,
    pub chat_id: i64,
    pub message_id: i64,
    pub text: Option<String>,
    pub parse_mode: Option<String>,
    pub reply_markup: Option<Value>,
}

impl Edit {
    /// The new text as the chat shows it (HTML tags removed, entities decoded).
    pub fn shown(&self) -> String {
        shown(self.text.as_deref(), self.parse_mode.as_deref())
    }

    /// Every button's `callback_data` after the edit.
    pub fn button_data(&self) -> Vec<String> {
        keyboard_data(self.reply_markup.as_ref())
    }
}

/// One `sendChatAction`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatAction {
    pub chat_id: i64,
    pub action: String,
    pub thread_id: Option<i64>,
}

/// One accepted `answerCallbackQuery`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackAnswer {
    pub callback_query_id: String,
    pub text: Option<String>,
    pub show_alert: bool,
}

/// A message as the fake keeps it, for edits and taps.
#[derive(Debug, Clone)]
struct Stored {
    text: Option<String>,
    reply_markup: Option<Value>,
    thread_id: Option<i64>,
}

#[derive(Debug, Default)]
struct Data {
    token: String,
    revoked: bool,
    next_update_id: i64,
    /// Unconfirmed updates, oldest first.
    updates: VecDeque<Value>,
    /// The last `allowed_updates` a `getUpdates` gave (`None`: every kind tern could want).
    allowed_updates: Option<Vec<String>>,
    /// Bumped by every `getUpdates`: a held poll whose generation is no longer current was
    /// overtaken by a newer one.
    poll_generation: u64,
    get_updates_calls: u64,
    held_polls: usize,
    next_message_id: HashMap<i64, i64>,
    messages: HashMap<(i64, i64), Stored>,
    next_callback: u64,
    /// Callback query id → answered.
    callbacks: HashMap<String, bool>,
    next_file: u64,
    /// file_id → (file_path, bytes).
    files: HashMap<String, (String, Vec<u8>)>,
    faults: HashMap<String, VecDeque<Fault>>,
    /// A webhook set (by another deployment of the bot): `getUpdates` refuses until
    /// `deleteWebhook`.
    webhook: Option<String>,
    /// `getFile` leaves out `file_size` (Telegram may), and downloads come chunked.
    hide_file_sizes: bool,
    sent: Vec<Sent>,
    edits: Vec<Edit>,
    chat_actions: Vec<ChatAction>,
    callback_answers: Vec<CallbackAnswer>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<Data>,
    /// Woken when an update arrives or a newer `getUpdates` starts.
    wake: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Data> {
        // A panic while holding the lock already fails the test; the state stays readable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The running fake; the server stops when it is dropped.
#[derive(Debug)]
pub struct FakeTelegram {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeTelegram {
    /// Starts the fake on `127.0.0.1` with a random port and a fresh token.
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        {
            let mut s = shared.lock();
            s.token = format!(
                "{BOT_ID}:AAfake-{}-{:x}",
                std::process::id(),
                unique_suffix()
            );
            s.next_update_id = 100_000;
        }
        let app = Router::new()
            .route("/file/{bot}/{*path}", get(download))
            .route("/{bot}/{method}", any(method))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { addr, shared, task }
    }

    /// The API's base URL (`api_url`): `http://127.0.0.1:PORT`.
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bot's token.
    pub fn token(&self) -> String {
        self.shared.lock().token.clone()
    }

    /// Revokes the token (as @BotFather's `/revoke` does): every later call with it, and a
    /// held `getUpdates`, answers 401.
    pub fn revoke_token(&self) {
        self.shared.lock().revoked = true;
        self.shared.wake.notify_waiters();
    }

    /// Sets a webhook, as another deployment of the same bot might have: `getUpdates`
    /// answers 409 until `deleteWebhook` removes it.
    pub fn set_webhook(&self, url: &str) {
        self.shared.lock().webhook = Some(url.to_owned());
    }

    /// The webhook set, if any.
    pub fn webhook(&self) -> Option<String> {
        self.shared.lock().webhook.clone()
    }

    // --- the users ---

    /// A user sends a text message; its message id. `chat` is the user's id for a private
    /// chat, negative for a group.
    pub fn user_sends(&self, chat: i64, user: i64, text: &str) -> i64 {
        self.user_message(chat, user, None, None, |m| {
            m.insert("text".into(), json!(text));
        })
    }

    /// A user replies to message `reply_to` of the chat.
    pub fn user_replies(&self, chat: i64, user: i64, reply_to: i64, text: &str) -> i64 {
        self.user_message(chat, user, None, Some(reply_to), |m| {
            m.insert("text".into(), json!(text));
        })
    }

    /// A user writes in forum topic `thread` of group `chat`.
    pub fn user_sends_in_topic(&self, chat: i64, thread: i64, user: i64, text: &str) -> i64 {
        self.user_message(chat, user, Some(thread), None, |m| {
            m.insert("text".into(), json!(text));
        })
    }

    /// A user sends a photo: Telegram offers it in sizes, here a small thumbnail (the first
    /// bytes) and the full `bytes`, largest last.
    pub fn user_sends_photo(
        &self,
        chat: i64,
        user: i64,
        bytes: &[u8],
        caption: Option<&str>,
    ) -> i64 {
        let thumb = &bytes[..bytes.len().min(16)];
        let small = self.add_file("photos", "jpg", thumb);
        let large = self.add_file("photos", "jpg", bytes);
        self.user_message(chat, user, None, None, |m| {
            m.insert(
                "photo".into(),
                json!([
                    {"file_id": small, "file_unique_id": format!("u{small}"), "width": 90,
                     "height": 90, "file_size": thumb.len()},
                    {"file_id": large, "file_unique_id": format!("u{large}"), "width": 1280,
                     "height": 960, "file_size": bytes.len()},
                ]),
            );
            if let Some(c) = caption {
                m.insert("caption".into(), json!(c));
            }
        })
    }

    /// A user sends a document.
    pub fn user_sends_document(
        &self,
        chat: i64,
        user: i64,
        name: &str,
        mime_type: &str,
        bytes: &[u8],
        caption: Option<&str>,
    ) -> i64 {
        let id = self.add_file("documents", name.rsplit('.').next().unwrap_or("bin"), bytes);
        self.user_message(chat, user, None, None, |m| {
            m.insert(
                "document".into(),
                json!({"file_id": id, "file_unique_id": format!("u{id}"), "file_name": name,
                       "mime_type": mime_type, "file_size": bytes.len()}),
            );
            if let Some(c) = caption {
                m.insert("caption".into(), json!(c));
            }
        })
    }

    /// A user taps the button with callback data `data` on the bot's message; the callback
    /// query's id. Panics when the message has no such button (use
    /// [`FakeTelegram::user_taps_forged`] for data no button carries).
    pub fn user_taps(&self, chat: i64, user: i64, message_id: i64, data: &str) -> String {
        let has = {
            let s = self.shared.lock();
            s.messages.get(&(chat, message_id)).is_some_and(|m| {
                keyboard_data(m.reply_markup.as_ref())
                    .iter()
                    .any(|d| d == data)
            })
        };
        assert!(
            has,
            "message {message_id} in chat {chat} has no button with data {data:?}"
        );
        self.user_taps_forged(chat, user, message_id, data)
    }

    /// A `callback_query` with any data, as a modified client could send.
    pub fn user_taps_forged(&self, chat: i64, user: i64, message_id: i64, data: &str) -> String {
        let mut s = self.shared.lock();
        s.next_callback += 1;
        let id = format!("cbq{}", 9_000_000 + s.next_callback);
        s.callbacks.insert(id.clone(), false);
        let mut message = json!({
            "message_id": message_id,
            "from": bot_user(),
            "chat": chat_json(chat),
            "date": 1_700_000_000,
        });
        if let Some(stored) = s.messages.get(&(chat, message_id)) {
            if let Some(t) = &stored.text {
                message["text"] = json!(t);
            }
            if let Some(k) = &stored.reply_markup {
                message["reply_markup"] = k.clone();
            }
            if let Some(t) = stored.thread_id {
                message["message_thread_id"] = json!(t);
                message["is_topic_message"] = json!(true);
            }
        }
        let query = json!({
            "id": id,
            "from": user_json(user),
            "message": message,
            "chat_instance": format!("ci{chat}"),
            "data": data,
        });
        push(&mut s, "callback_query", query);
        drop(s);
        self.shared.wake.notify_waiters();
        id
    }

    /// Queues an update of any kind (`edited_message`, `my_chat_member`, …) with `payload` as
    /// its object; its `update_id`.
    pub fn push_update(&self, kind: &str, payload: Value) -> i64 {
        let id = push(&mut self.shared.lock(), kind, payload);
        self.shared.wake.notify_waiters();
        id
    }

    // --- what the bot did ---

    /// Every message the bot sent, in order.
    pub fn sent(&self) -> Vec<Sent> {
        self.shared.lock().sent.clone()
    }

    pub fn edits(&self) -> Vec<Edit> {
        self.shared.lock().edits.clone()
    }

    pub fn chat_actions(&self) -> Vec<ChatAction> {
        self.shared.lock().chat_actions.clone()
    }

    pub fn callback_answers(&self) -> Vec<CallbackAnswer> {
        self.shared.lock().callback_answers.clone()
    }

    /// How many `getUpdates` calls arrived (the idle cost: a held long poll is one call).
    pub fn get_updates_calls(&self) -> u64 {
        self.shared.lock().get_updates_calls
    }

    /// How many `getUpdates` calls are held right now, waiting for an update.
    pub fn held_polls(&self) -> usize {
        self.shared.lock().held_polls
    }

    /// How many updates are not confirmed yet.
    pub fn pending_updates(&self) -> usize {
        self.shared.lock().updates.len()
    }

    /// The `allowed_updates` the last `getUpdates` that gave one asked for.
    pub fn allowed_updates(&self) -> Option<Vec<String>> {
        self.shared.lock().allowed_updates.clone()
    }

    /// Waits (bounded by [`crate::wait::PATIENCE`]) for a sent message that `f` accepts.
    pub async fn wait_sent(&self, f: impl Fn(&Sent) -> bool) -> Sent {
        crate::eventually("a sent message that matches", async || {
            self.sent().into_iter().find(|m| f(m))
        })
        .await
    }

    /// Waits for an edit that `f` accepts.
    pub async fn wait_edit(&self, f: impl Fn(&Edit) -> bool) -> Edit {
        crate::eventually("an edit that matches", async || {
            self.edits().into_iter().find(|m| f(m))
        })
        .await
    }

    /// Waits for a chat action that `f` accepts.
    pub async fn wait_chat_action(&self, f: impl Fn(&ChatAction) -> bool) -> ChatAction {
        crate::eventually("a chat action that matches", async || {
            self.chat_actions().into_iter().find(|m| f(m))
        })
        .await
    }

    /// Waits for an answer to callback query `id`.
    pub async fn wait_callback_answer(&self, id: &str) -> CallbackAnswer {
        crate::eventually(&format!("an answer to callback query {id}"), async || {
            self.callback_answers()
                .into_iter()
                .find(|a| a.callback_query_id == id)
        })
        .await
    }

    /// Waits until a `getUpdates` is held (the client is long-polling).
    pub async fn wait_held_poll(&self) {
        crate::eventually("a held getUpdates", async || {
            (self.held_polls() > 0).then_some(())
        })
        .await
    }

    // --- faults ---

    /// The next `n` calls of `method` (e.g. `sendMessage`) answer with `fault`.
    pub fn fail_next(&self, method: &str, n: usize, fault: Fault) {
        let mut s = self.shared.lock();
        let q = s.faults.entry(method.to_owned()).or_default();
        q.extend(std::iter::repeat_n(fault, n));
    }

    /// From now on `getFile` does not say how large a file is, and downloads come without a
    /// `Content-Length`, so only reading them shows their size.
    pub fn hide_file_sizes(&self) {
        self.shared.lock().hide_file_sizes = true;
    }

    // --- internals ---

    fn add_file(&self, dir: &str, ext: &str, bytes: &[u8]) -> String {
        let mut s = self.shared.lock();
        s.next_file += 1;
        let id = format!("AgADfile{}", s.next_file);
        let path = format!("{dir}/file_{}.{ext}", s.next_file);
        s.files.insert(id.clone(), (path, bytes.to_vec()));
        id
    }

    fn user_message(
        &self,
        chat: i64,
        user: i64,
        thread: Option<i64>,
        reply_to: Option<i64>,
        fill: impl FnOnce(&mut Map<String, Value>),
    ) -> i64 {
        let mut s = self.shared.lock();
        let message_id = next_message_id(&mut s, chat);
        let mut m = Map::new();
        m.insert("message_id".into(), json!(message_id));
        m.insert("from".into(), user_json(user));
        m.insert("chat".into(), chat_json(chat));
        m.insert("date".into(), json!(1_700_000_000));
        fill(&mut m);
        let text = m.get("text").and_then(Value::as_str).map(str::to_owned);
        if let Some(t) = thread {
            m.insert("message_thread_id".into(), json!(t));
            m.insert("is_topic_message".into(), json!(true));
            // In a forum topic every message replies to the topic's first message unless it
            // replies to another one, as Telegram sends them.
            if reply_to.is_none() {
                m.insert(
                    "reply_to_message".into(),
                    json!({"message_id": t, "chat": chat_json(chat), "date": 1_700_000_000,
                           "forum_topic_created": {"name": "topic", "icon_color": 7322096}}),
                );
            }
        }
        if let Some(r) = reply_to {
            let mut replied = json!({"message_id": r, "chat": chat_json(chat),
                                     "date": 1_700_000_000});
            if let Some(t) = s.messages.get(&(chat, r)).and_then(|m| m.text.clone()) {
                replied["text"] = json!(t);
            }
            m.insert("reply_to_message".into(), replied);
        }
        s.messages.insert(
            (chat, message_id),
            Stored {
                text,
                reply_markup: None,
                thread_id: thread,
            },
        );
        push(&mut s, "message", Value::Object(m));
        drop(s);
        self.shared.wake.notify_waiters();
        message_id
    }
}

fn unique_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn push(s: &mut Data, kind: &str, payload: Value) -> i64 {
    let id = s.next_update_id;
    s.next_update_id += 1;
    s.updates.push_back(json!({"update_id": id, kind: payload}));
    id
}

fn next_message_id(s: &mut Data, chat: i64) -> i64 {
    let n = s.next_message_id.entry(chat).or_insert(0);
    *n += 1;
    *n
}

fn bot_user() -> Value {
    json!({"id": BOT_ID, "is_bot": true, "first_name": "tern test bot",
           "username": "tern_test_bot"})
}

fn user_json(user: i64) -> Value {
    json!({"id": user, "is_bot": false, "first_name": format!("User{user}"),
           "username": format!("user{user}"), "language_code": "en"})
}

fn chat_json(chat: i64) -> Value {
    if chat < 0 {
        json!({"id": chat, "type": "supergroup", "title": format!("Group {chat}"),
               "is_forum": true})
    } else {
        json!({"id": chat, "type": "private", "first_name": format!("User{chat}"),
               "username": format!("user{chat}")})
    }
}

fn keyboard_data(markup: Option<&Value>) -> Vec<String> {
    markup
        .and_then(|m| m.get("inline_keyboard"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|b| b.get("callback_data").and_then(Value::as_str))
        .map(str::to_owned)
        .collect()
}

/// An empty keyboard is no keyboard, for "not modified" and for what tests read.
fn normal_markup(markup: Option<Value>) -> Option<Value> {
    markup.filter(
        |m| match m.get("inline_keyboard").and_then(Value::as_array) {
            Some(rows) => rows
                .iter()
                .any(|r| r.as_array().is_some_and(|r| !r.is_empty())),
            None => true,
        },
    )
}

/// What the chat shows of `text`: without the HTML tags when it was sent as HTML.
fn shown(text: Option<&str>, parse_mode: Option<&str>) -> String {
    let text = text.unwrap_or("");
    visible_text(text, parse_mode).unwrap_or_else(|_| text.to_owned())
}

// --- the HTTP side ---

fn ok(result: Value) -> Response {
    Json(json!({"ok": true, "result": result})).into_response()
}

fn err(status: u16, description: &str) -> Response {
    error_with(status, description, None)
}

fn error_with(status: u16, description: &str, parameters: Option<Value>) -> Response {
    let mut body = json!({"ok": false, "error_code": status, "description": description});
    if let Some(p) = parameters {
        body["parameters"] = p;
    }
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(body)).into_response()
}

struct Json(Value);

impl IntoResponse for Json {
    fn into_response(self) -> Response {
        (
            [(header::CONTENT_TYPE, "application/json")],
            self.0.to_string(),
        )
            .into_response()
    }
}

fn bad(description: &str) -> Response {
    err(400, &format!("Bad Request: {description}"))
}

/// The call's parameters, from the query string and the body; a file part as
/// `(field, file name, bytes)`.
struct Params {
    map: Map<String, Value>,
    file: Option<(String, String, Vec<u8>)>,
}

impl Params {
    fn str(&self, k: &str) -> Option<String> {
        match self.map.get(k)? {
            Value::String(s) => Some(s.clone()),
            Value::Null => None,
            v => Some(v.to_string()),
        }
    }

    fn int(&self, k: &str) -> Option<i64> {
        match self.map.get(k)? {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    fn bool(&self, k: &str) -> bool {
        match self.map.get(k) {
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) => s == "true",
            _ => false,
        }
    }

    /// A parameter that is JSON-serialized in forms (arrays, objects).
    fn json(&self, k: &str) -> Option<Value> {
        match self.map.get(k)? {
            Value::String(s) => serde_json::from_str(s).ok(),
            Value::Null => None,
            v => Some(v.clone()),
        }
    }
}

async fn params(query: Option<String>, req: Request) -> Result<Params, Response> {
    let mut map = Map::new();
    if let Some(q) = query {
        for (k, v) in form_pairs(q.as_bytes()) {
            map.insert(k, Value::String(v));
        }
    }
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut file = None;
    if content_type.starts_with("multipart/form-data") {
        let mut mp = Multipart::from_request(req, &())
            .await
            .map_err(|e| bad(&format!("invalid multipart: {e}")))?;
        while let Some(field) = mp
            .next_field()
            .await
            .map_err(|e| bad(&format!("invalid multipart: {e}")))?
        {
            let name = field.name().unwrap_or("").to_owned();
            match field.file_name().map(str::to_owned) {
                Some(file_name) => {
                    let bytes = field
                        .bytes()
                        .await
                        .map_err(|e| bad(&format!("invalid multipart: {e}")))?;
                    file = Some((name, file_name, bytes.to_vec()));
                }
                None => {
                    let text = field
                        .text()
                        .await
                        .map_err(|e| bad(&format!("invalid multipart: {e}")))?;
                    map.insert(name, Value::String(text));
                }
            }
        }
    } else {
        let body = Bytes::from_request(req, &())
            .await
            .map_err(|e| bad(&format!("unreadable body: {e}")))?;
        if content_type.starts_with("application/json") {
            match serde_json::from_slice::<Value>(&body) {
                Ok(Value::Object(o)) => map.extend(o),
                _ => return Err(bad("invalid JSON body")),
            }
        } else if content_type.starts_with("application/x-www-form-urlencoded") {
            for (k, v) in form_pairs(&body) {
                map.insert(k, Value::String(v));
            }
        } else if !body.is_empty() {
            return Err(bad("unsupported content type"));
        }
    }
    Ok(Params { map, file })
}

/// `a=1&b=2` as pairs (axum's form decoding, so no decoder of our own).
fn form_pairs(bytes: &[u8]) -> Vec<(String, String)> {
    let uri = format!("/?{}", String::from_utf8_lossy(bytes));
    uri.parse::<axum::http::Uri>()
        .ok()
        .and_then(|u| Query::<Vec<(String, String)>>::try_from_uri(&u).ok())
        .map(|q| q.0)
        .unwrap_or_default()
}

/// Whether the `bot<TOKEN>` path segment carries the live (not revoked) token.
fn authorized(s: &Data, bot: &str) -> bool {
    bot.strip_prefix("bot")
        .is_some_and(|t| t == s.token && !s.revoked)
}

async fn download(
    State(shared): State<Arc<Shared>>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    let s = shared.lock();
    if !authorized(&s, &bot) {
        return err(401, "Unauthorized");
    }
    match s.files.values().find(|(p, _)| *p == path) {
        Some((_, bytes)) if s.hide_file_sizes => {
            let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
                bytes.chunks(1024).map(|c| Ok(c.to_vec())).collect();
            axum::body::Body::from_stream(futures_util::stream::iter(chunks)).into_response()
        }
        Some((_, bytes)) => bytes.clone().into_response(),
        None => err(404, "Not Found"),
    }
}

async fn method(
    State(shared): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    req: Request,
) -> Response {
    if !authorized(&shared.lock(), &bot) {
        return err(401, "Unauthorized");
    }
    let p = match params(query, req).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    if let Some(r) = take_fault(&shared, &method, &p) {
        return r;
    }
    match method.as_str() {
        "getUpdates" => get_updates(&shared, &bot, &p).await,
        "getMe" => ok(bot_user()),
        "deleteWebhook" => {
            shared.lock().webhook = None;
            ok(json!(true))
        }
        "sendMessage" => send_message(&shared, &p),
        "sendDocument" | "sendPhoto" => send_file(&shared, &method, &p),
        "editMessageText" | "editMessageReplyMarkup" => edit(&shared, &method, &p),
        "sendChatAction" => chat_action(&shared, &p),
        "answerCallbackQuery" => answer_callback(&shared, &p),
        "getFile" => get_file(&shared, &p),
        _ => err(404, "Not Found"),
    }
}

fn take_fault(shared: &Shared, method: &str, p: &Params) -> Option<Response> {
    let mut s = shared.lock();
    let q = s.faults.get_mut(method)?;
    let fault = q.front()?.clone();
    if fault == Fault::CantParseEntities && p.str("parse_mode").is_none() {
        return None;
    }
    q.pop_front();
    Some(match fault {
        Fault::TooManyRequests { retry_after } => error_with(
            429,
            &format!("Too Many Requests: retry after {retry_after}"),
            Some(json!({"retry_after": retry_after})),
        ),
        Fault::ServerError => err(500, "Internal Server Error"),
        Fault::CantParseEntities => {
            bad("can't parse entities: Unsupported start tag \"x\" at byte offset 0")
        }
        Fault::Garbage => "<html>502 Bad Gateway</html>".into_response(),
    })
}

/// Decrements the held-poll count however the held request ends (answered or dropped
/// because the client went away).
struct Held<'a>(&'a Shared);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.held_polls = s.held_polls.saturating_sub(1);
    }
}

async fn get_updates(shared: &Shared, bot: &str, p: &Params) -> Response {
    let timeout = p.int("timeout").unwrap_or(0).clamp(0, 50);
    let limit = p.int("limit").unwrap_or(100).clamp(1, 100) as usize;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout as u64);
    let generation = {
        let mut s = shared.lock();
        s.get_updates_calls += 1;
        if s.webhook.is_some() {
            return err(
                409,
                "Conflict: can't use getUpdates method while webhook is active; use \
                 deleteWebhook to delete the webhook first",
            );
        }
        s.poll_generation += 1;
        if let Some(allowed) = p.json("allowed_updates") {
            let list: Vec<String> = allowed
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
            s.allowed_updates = (!list.is_empty()).then_some(list);
        }
        if let Some(offset) = p.int("offset")
            && offset > 0
        {
            s.updates
                .retain(|u| u["update_id"].as_i64().is_some_and(|id| id >= offset));
        }
        s.poll_generation
    };
    // Overtaken polls end now, with the 409 Telegram gives them.
    shared.wake.notify_waiters();
    let offset = p.int("offset").unwrap_or(0);
    let mut held: Option<Held<'_>> = None;
    loop {
        let notified = shared.wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        {
            let s = shared.lock();
            if !authorized(&s, bot) {
                return err(401, "Unauthorized");
            }
            if s.poll_generation != generation {
                return err(
                    409,
                    "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
                );
            }
            let due: Vec<Value> = s
                .updates
                .iter()
                .filter(|u| u["update_id"].as_i64().is_some_and(|id| id >= offset))
                .filter(|u| deliverable(u, s.allowed_updates.as_deref()))
                .take(limit)
                .cloned()
                .collect();
            if !due.is_empty() || tokio::time::Instant::now() >= deadline {
                return ok(Value::Array(due));
            }
        }
        if held.is_none() {
            shared.lock().held_polls += 1;
            held = Some(Held(shared));
        }
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep_until(deadline) => {}
        }
    }
}

/// Whether an update's kind is allowed; by default Telegram sends every kind except
/// `chat_member`, `message_reaction` and `message_reaction_count`.
fn deliverable(update: &Value, allowed: Option<&[String]>) -> bool {
    let Some(kind) = update
        .as_object()
        .and_then(|o| o.keys().find(|k| *k != "update_id"))
    else {
        return false;
    };
    match allowed {
        Some(list) => list.iter().any(|a| a == kind),
        None => !matches!(
            kind.as_str(),
            "chat_member" | "message_reaction" | "message_reaction_count"
        ),
    }
}

fn chat_id(p: &Params) -> Result<i64, String> {
    p.int("chat_id").ok_or_else(|| "chat not found".to_owned())
}

fn reply_to(p: &Params) -> Option<i64> {
    p.json("reply_parameters")
        .and_then(|r| r.get("message_id").and_then(Value::as_i64))
        .or_else(|| p.int("reply_to_message_id"))
}

/// The text Telegram would show, or what its "Bad Request" says.
fn visible_text(text: &str, parse_mode: Option<&str>) -> Result<String, String> {
    match parse_mode {
        None | Some("") => Ok(text.to_owned()),
        Some(m) if m.eq_ignore_ascii_case("html") => {
            parse_html(text).map_err(|e| format!("can't parse entities: {e}"))
        }
        Some(m) => Err(format!("unsupported parse_mode {m:?}")),
    }
}

const HTML_TAGS: &[&str] = &[
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "span",
    "tg-spoiler",
    "a",
    "code",
    "pre",
    "blockquote",
    "tg-emoji",
];

/// Telegram's HTML: the supported tags, properly nested; `<`, `>`, `&` escaped elsewhere. The
/// text with the tags removed and entities decoded, or what is wrong.
fn parse_html(html: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut open: Vec<String> = Vec::new();
    let mut rest = html;
    let mut at = 0;
    while let Some(c) = rest.chars().next() {
        match c {
            '<' => {
                let end = rest
                    .find('>')
                    .ok_or_else(|| format!("Unclosed start tag at byte offset {at}"))?;
                let inner = &rest[1..end];
                if let Some(name) = inner.strip_prefix('/') {
                    let name = name.trim().to_ascii_lowercase();
                    match open.pop() {
                        Some(o) if o == name => {}
                        _ => {
                            return Err(format!(
                                "Unexpected end tag \"{name}\" at byte offset {at}"
                            ));
                        }
                    }
                } else {
                    let name = inner
                        .split(|ch: char| ch.is_whitespace())
                        .next()
                        .unwrap_or("")
                        .to_ascii_lowercase();
                    if !HTML_TAGS.contains(&name.as_str()) {
                        return Err(format!(
                            "Unsupported start tag \"{name}\" at byte offset {at}"
                        ));
                    }
                    open.push(name);
                }
                at += end + 1;
                rest = &rest[end + 1..];
            }
            '&' => {
                let end = rest.find(';').filter(|e| *e <= 10);
                let decoded = end.and_then(|e| match &rest[1..e] {
                    "lt" => Some('<'),
                    "gt" => Some('>'),
                    "amp" => Some('&'),
                    "quot" => Some('"'),
                    n if n.starts_with('#') => n[1..].parse::<u32>().ok().and_then(char::from_u32),
                    _ => None,
                });
                match (end, decoded) {
                    (Some(e), Some(ch)) => {
                        out.push(ch);
                        at += e + 1;
                        rest = &rest[e + 1..];
                    }
                    _ => {
                        out.push('&');
                        at += 1;
                        rest = &rest[1..];
                    }
                }
            }
            '>' => return Err(format!("Unexpected character '>' at byte offset {at}")),
            c => {
                out.push(c);
                at += c.len_utf8();
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    match open.pop() {
        Some(tag) => Err(format!(
            "Can't find end tag corresponding to start tag \"{tag}\""
        )),
        None => Ok(out),
    }
}

fn send_message(shared: &Shared, p: &Params) -> Response {
    let chat = match chat_id(p) {
        Ok(c) => c,
        Err(e) => return bad(&e),
    };
    let Some(text) = p.str("text") else {
        return bad("message text is empty");
    };
    let parse_mode = p.str("parse_mode");
    let visible = match visible_text(&text, parse_mode.as_deref()) {
        Ok(v) => v,
        Err(e) => return bad(&e),
    };
    if visible.trim().is_empty() {
        return bad("message text is empty");
    }
    if visible.chars().count() > MAX_TEXT_CHARS {
        return bad("message is too long");
    }
    let markup = normal_markup(p.json("reply_markup"));
    let mut s = shared.lock();
    let reply = reply_to(p);
    if let Some(r) = reply
        && !s.messages.contains_key(&(chat, r))
        && !p
            .json("reply_parameters")
            .is_some_and(|r| r["allow_sending_without_reply"] == json!(true))
    {
        return bad("message to be replied not found");
    }
    let thread = p.int("message_thread_id");
    let message_id = next_message_id(&mut s, chat);
    s.messages.insert(
        (chat, message_id),
        Stored {
            text: Some(text.clone()),
            reply_markup: markup.clone(),
            thread_id: thread,
        },
    );
    s.sent.push(Sent {
        method: "sendMessage".into(),
        chat_id: chat,
        message_id,
        text: Some(text),
        parse_mode,
        reply_markup: markup.clone(),
        reply_to: reply,
        thread_id: thread,
        file: None,
    });
    ok(message_result(chat, message_id, thread, |m| {
        m.insert("text".into(), json!(visible));
        if let Some(k) = markup {
            m.insert("reply_markup".into(), k);
        }
    }))
}

fn message_result(
    chat: i64,
    message_id: i64,
    thread: Option<i64>,
    fill: impl FnOnce(&mut Map<String, Value>),
) -> Value {
    let mut m = Map::new();
    m.insert("message_id".into(), json!(message_id));
    m.insert("from".into(), bot_user());
    m.insert("chat".into(), chat_json(chat));
    m.insert("date".into(), json!(1_700_000_000));
    if let Some(t) = thread {
        m.insert("message_thread_id".into(), json!(t));
        m.insert("is_topic_message".into(), json!(true));
    }
    fill(&mut m);
    Value::Object(m)
}

fn send_file(shared: &Shared, method: &str, p: &Params) -> Response {
    let chat = match chat_id(p) {
        Ok(c) => c,
        Err(e) => return bad(&e),
    };
    let field = if method == "sendPhoto" {
        "photo"
    } else {
        "document"
    };
    let file = match &p.file {
        Some((name, file_name, bytes)) if name == field => (file_name.clone(), bytes.clone()),
        _ => return bad(&format!("there is no {field} in the request")),
    };
    if file.1.is_empty() {
        return bad("file must be non-empty");
    }
    let caption = p.str("caption");
    let parse_mode = p.str("parse_mode");
    if let Some(c) = &caption {
        match visible_text(c, parse_mode.as_deref()) {
            Ok(v) if v.chars().count() > 1024 => return bad("message caption is too long"),
            Ok(_) => {}
            Err(e) => return bad(&e),
        }
    }
    let markup = normal_markup(p.json("reply_markup"));
    let thread = p.int("message_thread_id");
    let mut s = shared.lock();
    let message_id = next_message_id(&mut s, chat);
    s.next_file += 1;
    let file_id = format!("AgADsent{}", s.next_file);
    let path = format!("sent/file_{}", s.next_file);
    s.files.insert(file_id.clone(), (path, file.1.clone()));
    s.messages.insert(
        (chat, message_id),
        Stored {
            text: caption.clone(),
            reply_markup: markup.clone(),
            thread_id: thread,
        },
    );
    let size = file.1.len();
    let file_name = file.0.clone();
    s.sent.push(Sent {
        method: method.to_owned(),
        chat_id: chat,
        message_id,
        text: caption.clone(),
        parse_mode,
        reply_markup: markup,
        reply_to: reply_to(p),
        thread_id: thread,
        file: Some(file),
    });
    ok(message_result(chat, message_id, thread, |m| {
        if field == "photo" {
            m.insert(
                "photo".into(),
                json!([{"file_id": file_id, "file_unique_id": format!("u{file_id}"),
                        "width": 800, "height": 600, "file_size": size}]),
            );
        } else {
            m.insert(
                "document".into(),
                json!({"file_id": file_id, "file_unique_id": format!("u{file_id}"),
                       "file_name": file_name, "file_size": size}),
            );
        }
        if let Some(c) = caption {
            m.insert("caption".into(), json!(c));
        }
    }))
}

fn edit(shared: &Shared, method: &str, p: &Params) -> Response {
    let chat = match chat_id(p) {
        Ok(c) => c,
        Err(e) => return bad(&e),
    };
    let Some(message_id) = p.int("message_id") else {
        return bad("message identifier is not specified");
    };
    let markup = normal_markup(p.json("reply_markup"));
    let parse_mode = p.str("parse_mode");
    let text = if method == "editMessageText" {
        let Some(text) = p.str("text") else {
            return bad("text must be non-empty");
        };
        match visible_text(&text, parse_mode.as_deref()) {
            Ok(v) if v.chars().count() > MAX_TEXT_CHARS => return bad("message is too long"),
            Ok(v) if v.trim().is_empty() => return bad("text must be non-empty"),
            Ok(_) => {}
            Err(e) => return bad(&e),
        }
        Some(text)
    } else {
        None
    };
    let mut s = shared.lock();
    let Some(stored) = s.messages.get_mut(&(chat, message_id)) else {
        return bad("message to edit not found");
    };
    let new_text = text.clone().or_else(|| stored.text.clone());
    if new_text == stored.text && markup == stored.reply_markup {
        return bad(
            "message is not modified: specified new message content and reply markup are \
             exactly the same as a current content and reply markup of the message",
        );
    }
    stored.text = new_text.clone();
    stored.reply_markup = markup.clone();
    let thread = stored.thread_id;
    s.edits.push(Edit {
        method: method.to_owned(),
        chat_id: chat,
        message_id,
        text,
        parse_mode,
        reply_markup: markup.clone(),
    });
    ok(message_result(chat, message_id, thread, |m| {
        if let Some(t) = new_text {
            m.insert("text".into(), json!(t));
        }
        if let Some(k) = markup {
            m.insert("reply_markup".into(), k);
        }
    }))
}

fn chat_action(shared: &Shared, p: &Params) -> Response {
    let chat = match chat_id(p) {
        Ok(c) => c,
        Err(e) => return bad(&e),
    };
    let Some(action) = p.str("action") else {
        return bad("wrong parameter action in request");
    };
    shared.lock().chat_actions.push(ChatAction {
        chat_id: chat,
        action,
        thread_id: p.int("message_thread_id"),
    });
    ok(json!(true))
}

fn answer_callback(shared: &Shared, p: &Params) -> Response {
    let id = p.str("callback_query_id").unwrap_or_default();
    if p.str("text")
        .is_some_and(|t| t.chars().count() > MAX_CALLBACK_TEXT_CHARS)
    {
        return bad("MESSAGE_TOO_LONG");
    }
    let mut s = shared.lock();
    match s.callbacks.get_mut(&id) {
        Some(answered) if !*answered => *answered = true,
        _ => {
            return bad("query is too old and response timeout expired or query ID is invalid");
        }
    }
    s.callback_answers.push(CallbackAnswer {
        callback_query_id: id,
        text: p.str("text"),
        show_alert: p.bool("show_alert"),
    });
    ok(json!(true))
}

fn get_file(shared: &Shared, p: &Params) -> Response {
    let id = p.str("file_id").unwrap_or_default();
    let s = shared.lock();
    match s.files.get(&id) {
        Some((path, bytes)) => {
            let mut file = json!({"file_id": id, "file_unique_id": format!("u{id}"),
                                  "file_path": path});
            if !s.hide_file_sizes {
                file["file_size"] = json!(bytes.len());
            }
            ok(file)
        }
        None => bad("invalid file_id"),
    }
}

#[cfg(test)]
mod tests;
