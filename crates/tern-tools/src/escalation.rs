//! Running a command outside the sandbox, only with a human's approval.
//!
//! Flow at a glance, for one `terminal` call under a sandboxing policy:
//! 1. [`level`]: a grant the human already gave for this command in this session (an
//!    approval that resumed the session, or "for the session") → outside at once. The model
//!    asked with `sandbox_permissions: "require_escalated"` → the [`Approver`](crate::Approver)
//!    is asked before anything runs. Otherwise the command runs confined.
//! 2. The confined command failed the way a sandbox denial looks
//!    ([`tern_sandbox::denied`]) → [`ask`] the approver, with what was probably denied.
//!    Approved → the command runs again, exactly as it was, outside the sandbox, once.
//!    Refused → the model is told not to retry. Pending (the gateway's inbox) → the model is
//!    told to end its turn; the approval becomes a grant that step 1 finds when the resumed
//!    model runs the command again.
//!
//! "Outside" is [`Level::Escalated`]: no write or network limit, but `$TERN_HOME` and the
//! protected paths stay unreadable, so not even an approved command can decide requests.
//! Hard-line commands never get here: the dangerous-command check refuses them first.

use std::path::Path;

use tern_sandbox::Level;
use tern_sandbox::denied::Denial;

use crate::{ApprovalDecision, ApprovalRequest, ToolContext, ToolError};

/// The pattern key of every escalation request (and of its session grants).
pub const PATTERN_KEY: &str = "sandbox_escalation";

/// Why a command is offered to run outside the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// The model asked (`sandbox_permissions: "require_escalated"`).
    Requested,
    /// The sandbox probably stopped it.
    Denied(Denial),
}

impl Why {
    fn description(self) -> &'static str {
        match self {
            Why::Requested => "run outside the sandbox, as the agent asked",
            Why::Denied(Denial::FileSystem) => {
                "run outside the sandbox: the sandbox stopped a file access"
            }
            Why::Denied(Denial::Network) => {
                "run outside the sandbox: the sandbox stopped a network connection"
            }
        }
    }
}

/// Whether a sandbox applies to `ctx`'s commands at all.
pub fn confines(ctx: &ToolContext) -> bool {
    ctx.limits.sandbox.policy().mode != tern_sandbox::Mode::FullAccess
}

fn request(
    ctx: &ToolContext,
    command: &str,
    workdir: &Path,
    why: Why,
    justification: Option<&str>,
) -> ApprovalRequest {
    let mut context = vec![("policy", ctx.limits.sandbox.policy().describe())];
    match why {
        Why::Denied(d) => context.push(("denied", d.describe().to_owned())),
        Why::Requested => {
            if let Some(j) = justification {
                context.push(("justification", j.to_owned()));
            }
        }
    }
    ApprovalRequest {
        session_id: ctx.session_id.clone(),
        // Not the call's own id: the same call may already have asked about the command
        // being dangerous, and each question needs its own request.
        call_id: format!("{}:sandbox", ctx.call_id),
        call_seq: ctx.call_seq,
        command: command.to_owned(),
        workdir: workdir.to_path_buf(),
        pattern_key: PATTERN_KEY,
        description: why.description(),
        context,
    }
}

/// How the command runs, before it runs (step 1 of the module docs).
pub async fn level(
    ctx: &ToolContext,
    command: &str,
    workdir: &Path,
    requested: bool,
    justification: Option<&str>,
) -> Result<Level, ToolError> {
    if !confines(ctx) {
        return Ok(Level::Sandboxed);
    }
    let probe = request(ctx, command, workdir, Why::Requested, justification);
    if ctx
        .approver
        .granted(&probe)
        .await
        .is_some_and(|d| d.allows())
    {
        return Ok(Level::Escalated);
    }
    if !requested {
        return Ok(Level::Sandboxed);
    }
    match ask(ctx, command, workdir, Why::Requested, justification).await {
        Outcome::Approved => Ok(Level::Escalated),
        Outcome::Refused(reason) => Err(ToolError::new(format!(
            "denied: running this command outside the sandbox was not approved: {reason}. Do \
             not retry it; do the work inside the sandbox ({}) or ask the user.",
            ctx.limits.sandbox.policy().describe()
        ))),
        Outcome::Pending(message) => Err(ToolError::new(format!(
            "not run: running this command outside the sandbox needs a human's approval. {message}"
        ))),
    }
}

/// What the human said about running a command outside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Approved,
    Refused(String),
    /// Asked; the answer comes later (the message tells the model what to do meanwhile).
    Pending(String),
}

/// Asks the approver whether `command` may run outside the sandbox.
pub async fn ask(
    ctx: &ToolContext,
    command: &str,
    workdir: &Path,
    why: Why,
    justification: Option<&str>,
) -> Outcome {
    let req = request(ctx, command, workdir, why, justification);
    let decision = tokio::select! {
        d = ctx.approver.approve(req) => d,
        () = ctx.cancel.cancelled() => return Outcome::Refused("the turn was interrupted".into()),
    };
    match decision {
        ApprovalDecision::Once | ApprovalDecision::Session | ApprovalDecision::Always => {
            Outcome::Approved
        }
        ApprovalDecision::Deny { reason } => Outcome::Refused(reason),
        ApprovalDecision::Pending { message } => Outcome::Pending(message),
    }
}
