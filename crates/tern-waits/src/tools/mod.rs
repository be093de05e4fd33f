//! The `inbox` toolset: the model asks a human (`request_approval`, `request_elicitation`),
//! keeps the reviewer informed (`record_action`, `report_exception`, `add_note`), checks a
//! request once (`get_decision`) and reads how to do all that well (`inbox_guide`).
//!
//! # A request at a glance
//!
//! 1. The arguments are checked with the inbox's own types (Pump Up shapes; field
//!    definitions with [`validate_field_defs`](tern_inbox::fields::validate_field_defs)); attachments are workspace-relative paths
//!    that must stay inside the workspace, symlinks resolved. Bad input is a tool error and
//!    nothing is stored.
//! 2. A retried call (same session, tool call id and message) finds its wait
//!    (`tern-wait:<session>:<call>@<seq>`, see [`crate::call_occurrence`]) and only completes
//!    what is missing: it returns the same request id and creates nothing new. A later call
//!    that reuses the id (another message) is another occurrence and asks anew. A call of
//!    the same message that reuses the id with other arguments is not a retry either: it is
//!    refused, rather than answered with the other call's request.
//! 3. Otherwise: the session's task ([`InboxClient::session_task`](crate::client::InboxClient::session_task), one per session), the
//!    attachments uploaded, then [`Store::create_wait`](tern_store::Store::create_wait) records the wait `pending` with what
//!    is asked (`{"kind", …the create body without projectName/taskId}`).
//! 4. [`InboxTools::send_request`] sends it: the attachments are attached to the task (an
//!    action, idempotency key `tern-attach:<session>:<call>@<seq>`), the request is created
//!    (`tern-req:<session>:<call>@<seq>`), its id stored with [`Store::set_wait_request`](tern_store::Store::set_wait_request), and
//!    `wait_created` emitted; a decision taken already (an auto-approve policy decides inside
//!    the create) is read at once ([`crate::follow::settle_new_request`]). Every step is
//!    idempotent, so a crash anywhere in between is repaired by running it again. The keys
//!    use the session that asked ([`Wait::origin_session`](tern_store::Wait::origin_session)), even after a reset moved the
//!    wait to its successor.
//! 5. The tool returns `{"requestId", "status": "pending"}` at once; it never waits for the
//!    human. The model ends its turn and is resumed with the decision ([`crate::resume`]).
//!
//! # When the inbox cannot be reached
//!
//! Before the wait is recorded (task, uploads) nothing is kept and the error says nothing
//! was asked. After it, the wait stays `pending` without a request id and the error tells
//! the model not to ask again: [`InboxTools::send_unsent`] (run by the gateway's upkeep)
//! sends it later with the same keys, and the decision then resumes the session as usual.
//! A request the inbox refuses outright (a 4xx, e.g. an unknown `transitionsTo`) cannot
//! succeed later: its wait is cancelled so the session does not wait forever.
//!
//! # Layout
//!
//! One module per tool, each with its `Args` and its `Tool` impl, listed in one place:
//! [`register`]. [`context`] holds the shared state, [`InboxTools`], and the machinery that
//! sends a recorded wait; what several tools share lives beside them (`ask`: the request
//! flow of the two request tools; `task_log`: logging on the session's task; `attach`:
//! workspace attachments; `common`, `schemas`).
//!
//! Each tool's `Args` is the Pump Up create body without `projectName` and `taskId` (the
//! session's task supplies them), attachments as workspace paths.

pub mod add_note;
mod ask;
mod attach;
mod common;
pub mod context;
pub mod get_decision;
pub mod inbox_guide;
pub mod record_action;
pub mod report_exception;
pub mod request_approval;
pub mod request_elicitation;
mod schemas;
mod task_log;

use std::sync::Arc;

use tern_tools::Registry;

pub use add_note::{AddNote, NoteArgs};
pub use context::{DEFAULT_PROJECT, InboxTools, SendError, TOOLSET};
pub use get_decision::{DecisionArgs, GetDecision};
pub use inbox_guide::{GuideArgs, InboxGuide};
pub use record_action::{ActionArgs, RecordAction};
pub use report_exception::{ExceptionArgs, ReportException};
pub use request_approval::{ApprovalArgs, RequestApproval};
pub use request_elicitation::{ElicitationArgs, RequestElicitation};

use crate::guide::SYSTEM_PROMPT_LINE;

/// Adds the `inbox` toolset to `registry`, with [`SYSTEM_PROMPT_LINE`] for the system
/// prompt of the turns that enable it (the guide offered as a skill).
pub fn register(registry: &mut Registry, ctx: Arc<InboxTools>) {
    registry.set_prompt_line(TOOLSET, SYSTEM_PROMPT_LINE);
    registry.add(RequestApproval(Arc::clone(&ctx)));
    registry.add(RequestElicitation(Arc::clone(&ctx)));
    registry.add(RecordAction(Arc::clone(&ctx)));
    registry.add(ReportException(Arc::clone(&ctx)));
    registry.add(AddNote(Arc::clone(&ctx)));
    registry.add(GetDecision(ctx));
    registry.add(InboxGuide);
}
