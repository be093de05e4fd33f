//! The seam between tern's channel runtime and one chat platform: [`Platform`].
//!
//! An adapter (one module per platform: [`crate::telegram`], [`crate::matrix`]) turns the
//! platform's API into these few operations and types and knows nothing else of tern:
//!
//! - [`Platform::poll`] long-polls for the events after a cursor (Telegram's `offset`,
//!   Matrix's `next_batch`) and returns them with the cursor that follows them. The runtime
//!   commits that cursor in the same transaction that records the events, so the adapter must
//!   not confirm anything on its own: the next `poll` with the committed cursor does.
//! - outbound: [`Platform::send`] (markdown in, the platform's formatting out; the runtime has
//!   already split the text at [`Limits::max_message_chars`]), [`Platform::edit`],
//!   [`Platform::typing`], [`Platform::answer_callback`], [`Platform::send_file`];
//! - files in: [`Platform::download`].
//!
//! Errors are typed ([`PlatformError`]) so the runtime can back off on `RetryAfter`, stop
//! retrying on `Unauthorized`, and give up on one message on `Rejected`.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A platform's fixed limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest text one message may carry, in characters (Telegram: 4096).
    pub max_message_chars: usize,
    /// Whether messages can carry inline buttons (Telegram: yes; Matrix: no — a reaction or
    /// a reply to the message stands for a tap).
    pub buttons: bool,
    /// The longest callback data a button may carry, in bytes (Telegram: 64).
    pub max_callback_bytes: usize,
}

/// A chat (and thread, on platforms that have threads) on a platform.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChatRef {
    /// The platform's chat id (Telegram's numeric chat id as text, a Matrix room id).
    pub chat_id: String,
    /// A thread in the chat (a Telegram forum topic's `message_thread_id`, a Matrix thread
    /// root event id); `None` for the chat itself.
    pub thread_id: Option<String>,
}

/// Who sent an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRef {
    /// The platform's user id (Telegram's numeric user id as text, a Matrix id
    /// `@alice:example.org`); what `allowed_users` and pairing match.
    pub id: String,
    /// A name to show (Telegram's first name + username, a Matrix display name or the id).
    pub name: String,
}

/// A file attached to an inbound message, fetched with [`Platform::download`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRef {
    /// The platform's handle (Telegram's `file_id`, a Matrix `mxc://` URI).
    pub id: String,
    /// The file name the sender gave, if any.
    pub name: Option<String>,
    pub mime_type: Option<String>,
    /// Whether it is an image (a Telegram photo, an `m.image`).
    pub is_image: bool,
    /// Size in bytes, when the platform says.
    pub size: Option<u64>,
}

/// One inbound event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Unique per channel and stable across re-deliveries (Telegram: the `update_id`;
    /// Matrix: the event id): the store refuses a second event with the same key.
    pub key: String,
    pub chat: ChatRef,
    pub user: UserRef,
    pub kind: EventKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// A message: text (a caption for a file), files, and the message it replies to.
    Message {
        /// The platform's id of this message.
        message_id: String,
        text: String,
        files: Vec<FileRef>,
        /// The platform id of the message this one replies to.
        reply_to: Option<String>,
    },
    /// A tap on an inline button (Telegram's `callback_query`).
    Callback {
        /// Answered with [`Platform::answer_callback`].
        callback_id: String,
        /// The platform id of the message that carries the button.
        message_id: String,
        /// The button's callback data, as the platform delivered it (untrusted).
        data: String,
    },
    /// A reaction to a message (Matrix `m.reaction`): a tap where there are no buttons.
    Reaction {
        /// The platform id of the message reacted to.
        message_id: String,
        /// The reaction's key, e.g. `✅`.
        key: String,
    },
}

/// What [`Platform::poll`] returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Batch {
    pub events: Vec<Event>,
    /// The cursor to commit with these events, and to pass to the next poll; `None` when it
    /// did not change.
    pub next_cursor: Option<String>,
}

/// An inline button.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Button {
    pub label: String,
    /// Signed callback data (see [`crate::signing`]), at most [`Limits::max_callback_bytes`].
    pub data: String,
    /// What stands for this button where there are no buttons (Matrix): a reaction key such
    /// as `✅`, shown next to the label.
    pub reaction: Option<String>,
}

/// An outbound message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OutMessage {
    /// Markdown (CommonMark); the adapter converts it to its platform's formatting and falls
    /// back to plain text when the platform refuses the formatting.
    pub markdown: String,
    /// Rows of buttons; on a platform without buttons the adapter lists them as text
    /// (label and reaction key).
    pub buttons: Vec<Vec<Button>>,
    /// Send it as a reply to this platform message id.
    pub reply_to: Option<String>,
}

/// An outbound file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutFile {
    pub name: String,
    pub bytes: Vec<u8>,
    pub mime_type: Option<String>,
    /// Send as a photo / `m.image` (shown inline) rather than a document.
    pub is_image: bool,
    pub caption: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum PlatformError {
    /// The platform asks to wait (Telegram's 429 `retry_after`, Matrix's `M_LIMIT_EXCEEDED`).
    #[error("rate limited by the platform; retry after {0:?}")]
    RetryAfter(Duration),
    /// The token is wrong or revoked (401/403/404 on every call): back off long, log clearly.
    #[error("the platform refused the credentials: {0}")]
    Unauthorized(String),
    /// This one request was refused (400: a message too long, a chat that does not exist,
    /// a message that cannot be edited): retrying it will not help.
    #[error("the platform refused the request: {0}")]
    Rejected(String),
    /// Another client is polling with the same token (Telegram's 409 Conflict).
    #[error("another client is polling with this token: {0}")]
    Conflict(String),
    /// The network, a 5xx, a reply that does not parse: retry with backoff.
    #[error("the platform could not be reached: {0}")]
    Unavailable(String),
    /// `poll` was cancelled.
    #[error("cancelled")]
    Cancelled,
}

/// One chat platform, as the channel runtime uses it. Implementations are cheap to share
/// (`Arc<dyn Platform>`) and safe to call concurrently, except `poll`, which the runtime
/// calls from one task only.
pub trait Platform: Send + Sync + 'static {
    /// The platform's name as pairing, the store and `tern channels status` know it:
    /// `telegram`, `matrix`.
    fn platform(&self) -> &'static str;

    fn limits(&self) -> Limits;

    /// Long-polls for the events after `cursor` (`None`: from the platform's start). Returns
    /// an empty batch when the poll timed out with nothing new. Confirms nothing: the events
    /// come again until a poll passes the returned cursor. Ends early with
    /// [`PlatformError::Cancelled`] when `cancel` fires.
    fn poll<'a>(
        &'a self,
        cursor: Option<&'a str>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Batch, PlatformError>>;

    /// Sends a message; the platform's id of it.
    fn send<'a>(
        &'a self,
        chat: &'a ChatRef,
        msg: &'a OutMessage,
    ) -> BoxFuture<'a, Result<String, PlatformError>>;

    /// Replaces a sent message's text and buttons (an empty `buttons` removes them).
    fn edit<'a>(
        &'a self,
        chat: &'a ChatRef,
        message_id: &'a str,
        msg: &'a OutMessage,
    ) -> BoxFuture<'a, Result<(), PlatformError>>;

    /// Shows "typing…" in the chat for a few seconds (the runtime repeats it during a turn).
    fn typing<'a>(&'a self, chat: &'a ChatRef) -> BoxFuture<'a, Result<(), PlatformError>>;

    /// Answers a button tap, with a short notice shown to the user who tapped (`None`: just
    /// stop the button's spinner). A no-op on platforms without buttons.
    fn answer_callback<'a>(
        &'a self,
        callback_id: &'a str,
        notice: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), PlatformError>>;

    /// Fetches an inbound file's bytes, refusing files over `max_bytes`.
    fn download<'a>(
        &'a self,
        file: &'a FileRef,
        max_bytes: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, PlatformError>>;

    /// Sends a file; the platform's id of the message.
    fn send_file<'a>(
        &'a self,
        chat: &'a ChatRef,
        file: &'a OutFile,
    ) -> BoxFuture<'a, Result<String, PlatformError>>;
}
