//! Durable waits: an agent asks a human through the inbox, ends its turn, and is resumed
//! exactly once in its original conversation when the decision lands — after crashes and
//! restarts, with the inbox in this gateway or on another server.
//!
//! - [`client`]: [`client::InboxClient`], the inbox as the waits see it — embedded (called in
//!   process) or remote ([`remote`], the Pump Up agent API over HTTP);
//! - [`tools`]: the `inbox` toolset the model calls (`request_approval`, …), which records a
//!   wait and creates the request, and returns at once;
//! - [`follow`]: noticing decisions — the embedded inbox's change feed, or a remote inbox's
//!   decisions feed or polling — and marking waits ready;
//! - [`resume`]: delivering a ready wait's decision into its session exactly once and running
//!   the turn that answers it (at least once, also after a crash);
//! - [`command`]: dangerous `terminal` commands approved through the inbox;
//! - [`process`]: `notify_on_complete` — a background process's exit resumes its session.

pub mod client;
pub mod command;
pub mod follow;
pub mod guide;
pub mod process;
pub mod remote;
pub mod resume;
pub mod tools;
