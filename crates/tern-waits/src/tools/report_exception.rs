//! `report_exception`: logs that something went wrong.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tern_tools::{Tool, ToolContext, ToolResult};

use super::common::{insert_some, require_text};
use super::context::{InboxTools, TOOLSET};
use super::task_log::log;
use crate::client::LogKind;

/// `report_exception`: logs that something went wrong.
pub struct ReportException(pub Arc<InboxTools>);

impl Tool for ReportException {
    const NAME: &'static str = "report_exception";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = "Log in the reviewer's inbox that something went wrong \
        (never waits for anyone). May move the session's task to another step.";
    type Args = ExceptionArgs;

    async fn run(&self, a: ExceptionArgs, ctx: ToolContext) -> ToolResult {
        require_text("message", &a.message)?;
        let mut body = Map::new();
        body.insert("message".into(), json!(a.message));
        insert_some(&mut body, "detail", a.detail)?;
        insert_some(&mut body, "transitionsTo", a.transitions_to)?;
        insert_some(&mut body, "externalTraceId", a.external_trace_id)?;
        log(&self.0, body, &[], ctx, LogKind::Exception).await
    }
}

/// The arguments of `report_exception`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExceptionArgs {
    #[schemars(length(min = 1))]
    pub message: String,
    /// Structured details (any JSON object).
    #[serde(default)]
    pub detail: Option<Map<String, Value>>,
    /// A step of the project.
    #[serde(default)]
    pub transitions_to: Option<String>,
    /// Your own correlation id, shown in the log.
    #[serde(default)]
    pub external_trace_id: Option<String>,
}
