//! The Bot API's types, as much of them as the adapter reads
//! (<https://core.telegram.org/bots/api#available-types>). Unknown fields are ignored and
//! every field tern can live without is optional, so a new Bot API version does not break
//! parsing.

use serde::Deserialize;
use serde_json::Value;

/// Every answer: `{"ok": true, "result": …}` or `{"ok": false, "error_code", "description",
/// "parameters"}`.
#[derive(Debug, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(default)]
    pub result: Option<Value>,
    #[serde(default)]
    pub error_code: Option<i64>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub parameters: Option<ResponseParameters>,
}

#[derive(Debug, Deserialize)]
pub struct ResponseParameters {
    /// Seconds to wait before repeating the request (429).
    #[serde(default)]
    pub retry_after: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub struct Update {
    pub update_id: i64,
    #[serde(default)]
    pub message: Option<Message>,
    #[serde(default)]
    pub callback_query: Option<CallbackQuery>,
}

#[derive(Debug, Deserialize)]
pub struct Message {
    pub message_id: i64,
    #[serde(default)]
    pub message_thread_id: Option<i64>,
    /// True when the message was sent in a forum topic.
    #[serde(default)]
    pub is_topic_message: Option<bool>,
    #[serde(default)]
    pub from: Option<User>,
    pub chat: Chat,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub caption: Option<String>,
    /// The sizes of a photo, smallest first.
    #[serde(default)]
    pub photo: Option<Vec<PhotoSize>>,
    #[serde(default)]
    pub document: Option<Document>,
    #[serde(default)]
    pub reply_to_message: Option<Box<Message>>,
}

impl Message {
    /// The forum topic the message is in, if any (`message_thread_id` alone also marks
    /// replies outside topics).
    pub fn topic(&self) -> Option<i64> {
        if self.is_topic_message == Some(true) {
            self.message_thread_id
        } else {
            None
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct User {
    pub id: i64,
    #[serde(default)]
    pub is_bot: bool,
    #[serde(default)]
    pub first_name: String,
    #[serde(default)]
    pub last_name: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
}

impl User {
    /// "First Last (@username)", as much of it as there is.
    pub fn display_name(&self) -> String {
        let mut name = self.first_name.clone();
        if let Some(last) = &self.last_name {
            name = format!("{name} {last}");
        }
        match (&self.username, name.trim().is_empty()) {
            (Some(u), true) => format!("@{u}"),
            (Some(u), false) => format!("{} (@{u})", name.trim()),
            (None, true) => self.id.to_string(),
            (None, false) => name.trim().to_owned(),
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct Chat {
    pub id: i64,
}

#[derive(Debug, Deserialize)]
pub struct PhotoSize {
    pub file_id: String,
    #[serde(default)]
    pub width: u32,
    #[serde(default)]
    pub height: u32,
    #[serde(default)]
    pub file_size: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub struct Document {
    pub file_id: String,
    #[serde(default)]
    pub file_name: Option<String>,
    #[serde(default)]
    pub mime_type: Option<String>,
    #[serde(default)]
    pub file_size: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub struct CallbackQuery {
    pub id: String,
    pub from: User,
    /// The message with the button (absent for buttons of inline-mode messages; an
    /// inaccessible message still has its chat and id).
    #[serde(default)]
    pub message: Option<Message>,
    #[serde(default)]
    pub data: Option<String>,
}

/// `getFile`'s answer.
#[derive(Debug, Deserialize)]
pub struct File {
    #[serde(default)]
    pub file_size: Option<u64>,
    #[serde(default)]
    pub file_path: Option<String>,
}

/// What the send methods answer (a `Message`; only its id is used).
#[derive(Debug, Deserialize)]
pub struct SentMessage {
    pub message_id: i64,
}
