//! `add_note`: a remark on the session's task.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, json};
use tern_tools::{Tool, ToolContext, ToolResult};

use super::common::{insert_some, require_text};
use super::context::{InboxTools, TOOLSET};
use super::task_log::log;
use crate::client::LogKind;

/// `add_note`: a remark on the session's task.
pub struct AddNote(pub Arc<InboxTools>);

impl Tool for AddNote {
    const NAME: &'static str = "add_note";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = "Add a remark to the session's task in the reviewer's \
        inbox (never waits for anyone).";
    type Args = NoteArgs;

    async fn run(&self, a: NoteArgs, ctx: ToolContext) -> ToolResult {
        require_text("message", &a.message)?;
        let mut body = Map::new();
        body.insert("message".into(), json!(a.message));
        insert_some(&mut body, "externalTraceId", a.external_trace_id)?;
        log(&self.0, body, &[], ctx, LogKind::Note).await
    }
}

/// The arguments of `add_note`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NoteArgs {
    #[schemars(length(min = 1))]
    pub message: String,
    /// Your own correlation id, shown in the log.
    #[serde(default)]
    pub external_trace_id: Option<String>,
}
