//! What the dispatcher, the commands and the posts share about a chat: the recorded
//! events' shapes, the chat an event came from, its current session, and sending it a line.

use serde::Deserialize;
use tern_store::channels::ChannelEvent;

use super::Inner;
use crate::platform::{ChatRef, OutMessage};

/// A message event as stored by the poll loop.
#[derive(Debug, Deserialize)]
pub(super) struct StoredMessage {
    pub text: String,
    #[serde(default)]
    pub reply_to: Option<String>,
    #[serde(default)]
    pub files: Vec<StoredFile>,
}

#[derive(Debug, Deserialize)]
pub(super) struct StoredFile {
    pub id: String,
    pub name: Option<String>,
    pub mime_type: Option<String>,
    #[serde(default)]
    pub is_image: bool,
    pub size: Option<u64>,
}

/// A tap or a reaction as stored.
#[derive(Debug, Deserialize)]
pub(super) struct StoredTap {
    #[serde(default)]
    pub callback_id: Option<String>,
    pub message_id: String,
    #[serde(default)]
    pub data: Option<String>,
    #[serde(default)]
    pub key: Option<String>,
}

pub(super) fn chat_of(ev: &ChannelEvent) -> ChatRef {
    ChatRef {
        chat_id: ev.chat_id.clone(),
        thread_id: (!ev.thread_id.is_empty()).then(|| ev.thread_id.clone()),
    }
}

pub(super) async fn send_text(inner: &Inner, chat: &ChatRef, text: &str) {
    let msg = OutMessage {
        markdown: text.to_owned(),
        ..OutMessage::default()
    };
    if let Err(e) = inner.platform.send(chat, &msg).await {
        tracing::warn!(channel = %inner.settings.name, error = %e, "cannot send to the chat");
    }
}

/// The chat's current session, or a new one.
pub(super) async fn current_session(
    inner: &Inner,
    chat: &ChatRef,
    title: Option<String>,
) -> Result<String, super::HostError> {
    let thread = chat.thread_id.as_deref().unwrap_or("");
    if let Some(s) = inner
        .store
        .channel_current_session(&inner.settings.name, &chat.chat_id, thread)
        .await?
    {
        return Ok(s);
    }
    new_session(inner, chat, title).await
}

/// A new session for the chat, made its current one.
pub(super) async fn new_session(
    inner: &Inner,
    chat: &ChatRef,
    title: Option<String>,
) -> Result<String, super::HostError> {
    let thread = chat.thread_id.as_deref().unwrap_or("");
    let id = inner
        .host
        .create_session(inner.platform_name(), title)
        .await?;
    inner
        .store
        .channel_bind_session(&inner.settings.name, &chat.chat_id, thread, &id)
        .await?;
    inner.set_route(&id, chat);
    Ok(id)
}
