//! What a toolset adds to a session's model calls from durable state, outside the
//! transcript: the todo list and the memory shown to the model every turn, the facts a
//! compaction must carry into its summary (open waits, running processes, the todo list).
//!
//! A toolset registers a [`SessionContext`] on the [`crate::Registry`]
//! ([`crate::Registry::add_context`]); the agent asks the contexts of the turn's enabled
//! toolsets at two points: when it builds the system prompt of a model call
//! ([`SessionContext::prompt`]) and when it compacts the transcript
//! ([`SessionContext::critical`]). Both read the store (or the process manager), never the
//! model's memory of what happened, so a compaction cannot lose them.

use crate::BoxFuture;

/// Session state a toolset keeps outside the transcript.
pub trait SessionContext: Send + Sync {
    /// A section for the system prompt of every model call of `session_id`'s turns (e.g.
    /// the current todo list); `None` when there is nothing to say. Called once per turn.
    fn prompt<'a>(&'a self, session_id: &'a str) -> BoxFuture<'a, Option<String>> {
        let _ = session_id;
        Box::pin(async { None })
    }

    /// Facts that must survive a compaction of `session_id`, one line each, carried into the
    /// summary's critical context verbatim (e.g. "approval request 7f3a… pending: deploy to
    /// prod"). Empty when there are none.
    fn critical<'a>(&'a self, session_id: &'a str) -> BoxFuture<'a, Vec<String>> {
        let _ = session_id;
        Box::pin(async { Vec::new() })
    }
}
