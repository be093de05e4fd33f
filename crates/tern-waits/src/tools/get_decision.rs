//! `get_decision`: reads a request's decision once.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tern_tools::{Tool, ToolContext, ToolError, ToolResult};

use super::common::require_text;
use super::context::{InboxTools, TOOLSET, request_kind};

/// `get_decision`: reads a request's decision once.
pub struct GetDecision(pub Arc<InboxTools>);

impl Tool for GetDecision {
    const NAME: &'static str = "get_decision";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = "Check once whether a request of this session was \
        decided, and read the decision. Not for waiting: after asking, end your turn; the \
        decision comes to you as a message.";
    type Args = DecisionArgs;

    async fn run(&self, a: DecisionArgs, ctx: ToolContext) -> ToolResult {
        decision(&self.0, a, ctx).await
    }
}

/// The arguments of `get_decision`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecisionArgs {
    #[schemars(length(min = 1))]
    pub request_id: String,
}

async fn decision(tools: &InboxTools, a: DecisionArgs, ctx: ToolContext) -> ToolResult {
    require_text("requestId", &a.request_id)?;
    let wait = tools
        .store
        .wait_by_request(&a.request_id)
        .await
        .map_err(|e| ToolError::new(format!("cannot read the request: {e}")))?
        .filter(|w| w.session_id == ctx.session_id)
        .ok_or_else(|| {
            ToolError::new(format!(
                "no request {:?} was made in this session; use the requestId that \
                 request_approval or request_elicitation returned",
                a.request_id
            ))
        })?;
    let result = tools
        .client
        .result(request_kind(wait.kind), &a.request_id)
        .await
        .map_err(|e| ToolError::new(format!("cannot read the decision: {e}")))?;
    Ok(match result {
        None => json!({
            "requestId": a.request_id,
            "status": "pending",
            "next": "No decision yet. End your turn: you will be resumed with the decision \
                     in this conversation. Do not poll.",
        }),
        Some(result) => json!({
            "requestId": a.request_id,
            "status": "decided",
            "result": result,
        }),
    })
}
