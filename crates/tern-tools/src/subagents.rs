//! Child sessions a tool can run: the seam between a tool (`delegate_task`) and the agent
//! that runs turns.
//!
//! The agent sits above this crate, and its registry holds the tools, so a tool cannot hold
//! the agent. Instead the agent hands every call of a turn that enables delegation a
//! [`SubAgents`] in [`crate::ToolContext::subagents`]: made for that model answer, it knows
//! the parent session, its toolsets and interrupt, and the cap on children running at once.

use serde::Serialize;

use crate::{BoxFuture, ToolContext, ToolError};

/// One task to hand to a child session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildTask {
    /// What the child must achieve; its first message.
    pub goal: String,
    /// What the child needs to know of the parent's work (paths, errors, constraints).
    pub context: Option<String>,
    /// The child's toolsets; `None`: the parent's (without the ones children never get).
    pub toolsets: Option<Vec<String>>,
}

/// How a child's turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildStatus {
    /// The child answered in text.
    Completed,
    /// The parent's turn was interrupted, and with it the child's.
    Interrupted,
    /// The child used its iteration budget without a final answer.
    MaxIterations,
    /// The child's turn failed (the model could not be reached, …).
    Failed,
}

/// What a child session did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChildOutcome {
    /// The child's stored session (`parent_id` = the caller's session).
    pub session_id: String,
    pub status: ChildStatus,
    /// The child's final answer, or the message that explains why there is none.
    pub summary: Option<String>,
    /// Why the child failed, for [`ChildStatus::Failed`].
    pub error: Option<String>,
    /// Model calls the child made.
    pub iterations: u32,
}

/// Runs child sessions of the calling session. Implemented by the agent.
pub trait SubAgents: Send + Sync {
    /// Runs `task` as a child session of `ctx`'s session, in `ctx`'s working directory and
    /// with its approver, and returns when the child's turn has ended. Waits for a place
    /// while the cap of children running at once is reached. An interrupt of the parent's
    /// turn interrupts the child. An error: no child was started (depth limit, a toolset the
    /// parent does not have, the store), with a message the model can read.
    fn run_child<'a>(
        &'a self,
        task: ChildTask,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ChildOutcome, ToolError>>;
}
