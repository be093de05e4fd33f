//! What the channel runtime needs of the gateway that runs it: [`Host`].
//!
//! The gateway owns turn admission (the cap on concurrent turns, each session's queue,
//! interrupts, draining at shutdown) and the inbox; a channel's turns go through the same
//! doors as the HTTP API's, so `/stop` in a chat and `POST /api/sessions/{id}/stop` stop the
//! same turn, and a shutdown drains a chat's turn like any other.

use std::path::PathBuf;
use std::sync::Arc;

use tern_agent::{Agent, EventSink, Interrupt, QueueTicket};
use tern_inbox::Inbox;
use tern_tools::Approver;

use crate::platform::BoxFuture;

/// A turn admitted by the host: its place in the session's queue, its interrupt, the event
/// sink that keeps the host's view of it current, and a guard that unregisters it on drop.
pub struct Admission {
    pub ticket: QueueTicket,
    pub interrupt: Interrupt,
    pub events: EventSink,
    pub guard: Box<dyn Send + Sync>,
}

/// What every turn of a channel runs with.
#[derive(Clone)]
pub struct TurnDefaults {
    pub approver: Arc<dyn Approver>,
    pub workdir: PathBuf,
    pub toolsets: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The gateway is draining or stopped.
    #[error("the gateway is shutting down")]
    ShuttingDown,
    /// The session is being reset or deleted, or its queue is full.
    #[error("{0}")]
    Busy(String),
    #[error(transparent)]
    Store(#[from] tern_store::StoreError),
}

/// The gateway, as a channel sees it.
pub trait Host: Send + Sync + 'static {
    fn agent(&self) -> &Agent;

    /// The gateway's own inbox; `None` when its waits use a remote inbox (`[inbox] url`):
    /// requests are then posted to chats without buttons, to be decided there.
    fn inbox(&self) -> Option<&Inbox>;

    fn turn_defaults(&self) -> TurnDefaults;

    /// Waits for a place under the turn cap and registers a turn on the session, queued
    /// behind the turns admitted before it.
    fn admit<'a>(&'a self, session_id: &'a str) -> BoxFuture<'a, Result<Admission, HostError>>;

    /// Creates a session for a chat (`source`: the platform) with the gateway's model, and
    /// announces it (`session_start`); its id.
    fn create_session<'a>(
        &'a self,
        source: &'a str,
        title: Option<String>,
    ) -> BoxFuture<'a, Result<String, HostError>>;

    /// Interrupts the session's running turn; whether there was one.
    fn stop(&self, session_id: &str) -> bool;

    /// Whether the session has a turn admitted (running or queued).
    fn is_busy(&self, session_id: &str) -> bool;

    /// A link to the request in the web inbox, when the gateway knows its public address.
    fn inbox_link(&self, request_id: &str) -> Option<String>;
}
