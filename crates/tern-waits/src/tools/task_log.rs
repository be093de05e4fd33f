//! What `record_action`, `report_exception` and `add_note` share: [`log`], which logs an
//! event on the session's task.

use serde_json::{Map, Value, json};
use tern_tools::{ToolContext, ToolError, ToolResult};

use super::attach::{confine_all, upload_all};
use super::common::{call_ids, nothing_asked};
use super::context::InboxTools;
use crate::client::{ClientError, LogKind};

/// Logs `body` (the create body without projectName/taskId) on the session's task, with
/// `files` (workspace paths) uploaded and attached.
pub(super) async fn log(
    tools: &InboxTools,
    mut body: Map<String, Value>,
    files: &[String],
    ctx: ToolContext,
    kind: LogKind,
) -> ToolResult {
    let (session, _call, occurrence) = call_ids(&ctx)?;
    let files = confine_all(&ctx, files).await?;
    let task = tools
        .client
        .session_task(session, &tools.project)
        .await
        .map_err(nothing_asked)?;
    let uploaded = upload_all(tools.client.as_ref(), &files).await?;
    if !uploaded.is_empty() {
        body.insert(
            "addAttachments".into(),
            json!(
                uploaded
                    .iter()
                    .map(|(path, id)| json!({"uploadId": id, "label": path}))
                    .collect::<Vec<_>>()
            ),
        );
    }
    body.insert("projectName".into(), json!(task.project_name));
    body.insert("taskId".into(), json!(task.task_id));
    let idem = format!("tern-log:{session}:{occurrence}");
    let event_id = tools
        .client
        .log(kind, Value::Object(body), &idem)
        .await
        .map_err(|e| match e {
            ClientError::Refused { .. } => {
                ToolError::new(format!("the inbox refused it: {e}; nothing was logged"))
            }
            ClientError::Unreachable(_) => nothing_asked(e),
        })?;
    Ok(json!({ "eventId": event_id }))
}
