//! `request_approval`: a human approves or rejects one concrete action.

use std::collections::BTreeMap;
use std::sync::Arc;

use schemars::generate::SchemaGenerator;
use schemars::{JsonSchema, Schema, json_schema};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tern_inbox::outcome::ApprovalRecommendation;
use tern_store::WaitKind;
use tern_tools::{Tool, ToolContext, ToolError, ToolResult};

use super::ask::{Ask, guide_pointer, request};
use super::common::{insert_some, require_text};
use super::context::{InboxTools, TOOLSET};
use super::schemas::{attachments_schema, key_value_schema};

/// `request_approval`: a human approves or rejects one concrete action.
pub struct RequestApproval(pub Arc<InboxTools>);

impl Tool for RequestApproval {
    const NAME: &'static str = "request_approval";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = concat!(
        "Ask a human reviewer to approve or reject one concrete action before you \
         take it (irreversible or costly actions). Returns {\"requestId\", \
         \"status\": \"pending\"} at once; then END YOUR TURN: you will be resumed \
         with the decision in this conversation. Never poll.",
        guide_pointer!()
    );
    type Args = ApprovalArgs;

    async fn run(&self, args: ApprovalArgs, ctx: ToolContext) -> ToolResult {
        request(&self.0, check_approval(args)?, ctx, WaitKind::Approval).await
    }
}

/// The arguments of `request_approval`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalArgs {
    /// One line: exactly what you want to do.
    #[schemars(length(min = 1))]
    pub summary: String,
    #[serde(default)]
    #[schemars(schema_with = "key_value_schema")]
    pub key_value_context: Option<BTreeMap<String, String>>,
    /// What you suggest, and why.
    #[serde(default)]
    #[schemars(schema_with = "approval_recommendation_schema")]
    pub recommendation: Option<ApprovalRecommendation>,
    #[serde(default)]
    #[schemars(schema_with = "attachments_schema")]
    pub attachments: Option<Vec<String>>,
    /// Your own correlation id, shown in the log.
    #[serde(default)]
    pub external_trace_id: Option<String>,
}

fn check_approval(a: ApprovalArgs) -> Result<Ask, ToolError> {
    require_text("summary", &a.summary)?;
    let mut body = Map::new();
    body.insert("summary".into(), json!(a.summary));
    insert_some(&mut body, "keyValueContext", a.key_value_context)?;
    if let Some(c) = a.recommendation.as_ref().and_then(|r| r.confidence)
        && !(0.0..=1.0).contains(&c)
    {
        return Err(ToolError::new(
            "`recommendation.confidence` must be between 0 and 1",
        ));
    }
    insert_some(&mut body, "recommendation", a.recommendation)?;
    insert_some(&mut body, "externalTraceId", a.external_trace_id)?;
    Ok(Ask {
        body,
        files: a.attachments.unwrap_or_default(),
    })
}

fn outcome_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "type": {
                "type": "string",
                "enum": ["APPROVE", "REJECT", "EDIT_AND_APPROVE", "ESCALATE", "REQUEST_MORE_INFO"]
            },
            "reasonCode": {"type": "string"},
            "note": {"type": "string"}
        },
        "required": ["type"],
        "additionalProperties": false
    })
}

fn approval_recommendation_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "properties": {
            "outcome": outcome_schema(),
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "rationale": {"type": "string"}
        },
        "required": ["outcome"],
        "additionalProperties": false
    })
}
