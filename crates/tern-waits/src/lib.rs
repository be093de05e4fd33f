//! Durable waits: an agent asks a human through the inbox, ends its turn, and is resumed
//! exactly once in its original conversation when the decision lands — after crashes and
//! restarts, with the inbox in this gateway or on another server.
//!
//! - [`client`]: [`client::InboxClient`], the inbox as the waits see it — embedded (called in
//!   process) or remote ([`remote`], another server's inbox through [`pumpup`], the Pump Up
//!   agent API client that `tern ask` uses too);
//! - [`tools`]: the `inbox` toolset the model calls (`request_approval`, …), which records a
//!   wait and creates the request, and returns at once;
//! - [`follow`]: noticing decisions — the embedded inbox's change feed, or a remote inbox's
//!   decisions feed or polling — and marking waits ready;
//! - [`resume`]: delivering a ready wait's decision into its session exactly once and running
//!   the turn that answers it (at least once, also after a crash);
//! - [`command`]: dangerous `terminal` commands approved through the inbox;
//! - [`decision`]: a decided wait as the model and the hooks read it, and the message its
//!   delivery appends;
//! - [`process`]: `notify_on_complete` — a background process's exit resumes its session.

pub mod client;
pub mod command;
pub mod decision;
pub mod follow;
pub mod guide;
pub mod process;
pub mod pumpup;
pub mod remote;
pub mod resume;
pub mod tools;

/// The tool call's part of the idempotency keys of what it creates (`tern-wait:<session>:…`,
/// `tern-req:…`, `tern-log:…`): `<call id>@<seq>`, the seq being where the message that
/// carried the call sits in the transcript ([`tern_tools::ToolContext::call_seq`]). A call run
/// again (after a crash) has the same occurrence and finds what it created; a later call that
/// merely reuses the id — some models send `call_1` every turn — is another occurrence and
/// asks anew instead of getting the earlier, long decided request back. Without a message
/// (`call_seq` 0) it is the call id alone, the form of keys recorded before occurrences.
pub fn call_occurrence(call_id: &str, call_seq: i64) -> String {
    if call_seq > 0 {
        format!("{call_id}@{call_seq}")
    } else {
        call_id.to_owned()
    }
}
