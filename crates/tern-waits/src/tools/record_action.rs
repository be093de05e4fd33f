//! `record_action`: logs what the agent did.

use std::sync::Arc;

use schemars::generate::SchemaGenerator;
use schemars::{JsonSchema, Schema, json_schema};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tern_inbox::model::MetadataPatch;
use tern_tools::{Tool, ToolContext, ToolResult};

use super::common::{insert_some, require_text};
use super::context::{InboxTools, TOOLSET};
use super::schemas::attachments_schema;
use super::task_log::log;
use crate::client::LogKind;

/// `record_action`: logs what the agent did.
pub struct RecordAction(pub Arc<InboxTools>);

impl Tool for RecordAction {
    const NAME: &'static str = "record_action";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = "Log something you did in the reviewer's inbox (never \
        waits for anyone). May move the session's task to another step (`transitionsTo`), \
        patch its metadata and attach workspace files.";
    type Args = ActionArgs;

    async fn run(&self, a: ActionArgs, ctx: ToolContext) -> ToolResult {
        require_text("description", &a.description)?;
        let mut body = Map::new();
        body.insert("description".into(), json!(a.description));
        insert_some(&mut body, "detail", a.detail)?;
        insert_some(&mut body, "transitionsTo", a.transitions_to)?;
        insert_some(&mut body, "metadataPatch", a.metadata_patch)?;
        insert_some(&mut body, "externalTraceId", a.external_trace_id)?;
        let files = a.attachments.unwrap_or_default();
        log(&self.0, body, &files, ctx, LogKind::Action).await
    }
}

/// The arguments of `record_action`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActionArgs {
    #[schemars(length(min = 1))]
    pub description: String,
    /// Structured details (any JSON object).
    #[serde(default)]
    pub detail: Option<Map<String, Value>>,
    /// A step of the project.
    #[serde(default)]
    pub transitions_to: Option<String>,
    /// `set` overwrites keys, `setOnce` sets missing keys, `unset` removes keys.
    #[serde(default)]
    #[schemars(schema_with = "metadata_patch_schema")]
    pub metadata_patch: Option<MetadataPatch>,
    #[serde(default)]
    #[schemars(schema_with = "attachments_schema")]
    pub attachments: Option<Vec<String>>,
    /// Your own correlation id, shown in the log.
    #[serde(default)]
    pub external_trace_id: Option<String>,
}

fn metadata_patch_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "properties": {
            "set": {"type": "object"},
            "setOnce": {"type": "object"},
            "unset": {"type": "array", "items": {"type": "string"}}
        },
        "additionalProperties": false
    })
}
