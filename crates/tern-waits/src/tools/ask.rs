//! What `request_approval` and `request_elicitation` share: the checked request ([`Ask`]) and
//! [`request`], which records the wait, sends the request and answers at once.

use serde_json::{Map, Value, json};
use tern_store::{NewWait, StoreError, WaitKind, WaitStatus};
use tern_tools::{ToolContext, ToolError, ToolResult};

use super::attach::{LocalFile, confine_all, upload_all};
use super::common::{call_ids, nothing_asked};
use super::context::{InboxTools, SendError, is_transient};
use crate::client::TaskRef;

/// The sentence that offers the guide as a skill, ending both request tools' descriptions.
macro_rules! guide_pointer {
    () => {
        " Read `inbox_guide` first (when to ask, how, and what to do after)."
    };
}
pub(super) use guide_pointer;

/// The checked create body (without projectName/taskId) and the attachments to upload.
pub(super) struct Ask {
    pub(super) body: Map<String, Value>,
    pub(super) files: Vec<String>,
}

fn store_error(e: StoreError) -> ToolError {
    tracing::error!(error = %e, "inbox tool: session store error");
    ToolError::new(format!(
        "cannot record the request ({e}); nothing was sent to the inbox"
    ))
}

/// What a new call asks, in a form comparable with [`asked_of_stored`]: the create body,
/// the kind, and the attachments as the paths the model gave (upload ids differ per upload).
fn asked_of_new(body: &Map<String, Value>, kind: WaitKind, files: &[LocalFile]) -> Value {
    let mut asked = body.clone();
    asked.insert("kind".into(), json!(kind.as_str()));
    if !files.is_empty() {
        let paths: Vec<&str> = files.iter().map(|f| f.shown.as_str()).collect();
        asked.insert("attachmentFiles".into(), json!(paths));
    }
    Value::Object(asked)
}

/// What a stored wait asked (its `request` JSON), comparable with [`asked_of_new`].
fn asked_of_stored(request: &str) -> Value {
    let Ok(Value::Object(mut asked)) = serde_json::from_str::<Value>(request) else {
        // Unreadable: it matches no arguments, so the call is refused rather than answered
        // with a request nobody can read.
        return Value::Null;
    };
    asked.remove("attachments");
    if let Some(files) = asked.remove("attachmentFiles") {
        let paths: Vec<Value> = files
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| f.get("path").cloned().unwrap_or(Value::Null))
            .collect();
        asked.insert("attachmentFiles".into(), Value::Array(paths));
    }
    Value::Object(asked)
}

pub(super) async fn request(
    tools: &InboxTools,
    ask: Ask,
    ctx: ToolContext,
    kind: WaitKind,
) -> ToolResult {
    let (session, call, occurrence) = call_ids(&ctx)?;
    let files = confine_all(&ctx, &ask.files).await?;
    let idem = format!("tern-wait:{session}:{occurrence}");

    let existing = tools
        .store
        .session_waits(session, false)
        .await
        .map_err(store_error)?
        .into_iter()
        .find(|w| w.idem_key == idem);
    let wait = match existing {
        Some(w) => {
            // The key says "retry of that call", but only the same question may be answered
            // with the earlier request: two calls of one message with the same id would
            // otherwise get each other's request (and its decision) back.
            if asked_of_stored(&w.request) != asked_of_new(&ask.body, kind, &files) {
                return Err(ToolError::new(format!(
                    "tool call id {call:?} was already used in this message for a different \
                     request (wait {}); nothing was asked. The tool call ids must be unique: \
                     call the tool again in a new tool call.",
                    w.id
                )));
            }
            w
        }
        None => {
            // The task first: when the inbox is unreachable, nothing is recorded.
            let _task: TaskRef = tools
                .client
                .session_task(session, &tools.project)
                .await
                .map_err(nothing_asked)?;
            let uploaded = upload_all(tools.client.as_ref(), &files).await?;
            let mut request = ask.body;
            if !uploaded.is_empty() {
                request.insert(
                    "attachments".into(),
                    json!(uploaded.iter().map(|(_, id)| id).collect::<Vec<_>>()),
                );
                request.insert(
                    "attachmentFiles".into(),
                    json!(
                        uploaded
                            .iter()
                            .map(|(path, id)| json!({"path": path, "uploadId": id}))
                            .collect::<Vec<_>>()
                    ),
                );
            }
            request.insert("kind".into(), json!(kind.as_str()));
            let request = Value::Object(request).to_string();
            let (wait, _fresh) = tools
                .store
                .create_wait(&NewWait {
                    session_id: session,
                    idem_key: &idem,
                    tool_call_id: Some(call),
                    kind,
                    request: &request,
                })
                .await
                .map_err(store_error)?;
            wait
        }
    };
    if wait.status == WaitStatus::Cancelled {
        return Err(ToolError::new(format!(
            "this request was cancelled (wait {}); do not ask again unless the user wants you to",
            wait.id
        )));
    }
    let request_id = match wait.request_id.clone() {
        Some(id) => id,
        None => match tools.send_request(&wait.id).await {
            Ok(id) => id,
            Err(SendError::Busy(_)) => {
                return Err(ToolError::new(format!(
                    "this request (wait {}) is being sent right now; end your turn, you will \
                     be resumed with the decision",
                    wait.id
                )));
            }
            Err(e) if is_transient(&e) => {
                if let Err(se) = tools
                    .store
                    .wait_attempt_failed(&wait.id, &e.to_string())
                    .await
                {
                    tracing::warn!(error = %se, "cannot count a failed send");
                }
                return Err(ToolError::new(format!(
                    "the inbox is unreachable ({e}). Your request is saved (wait {}) and will be \
                     sent when the inbox is reachable again. Do not ask again: end your turn; \
                     you will be resumed with the decision in this conversation.",
                    wait.id
                )));
            }
            Err(e) => {
                if let Err(se) = tools.send_failed(&wait.id, &e).await {
                    tracing::warn!(error = %se, "cannot cancel a refused wait");
                }
                return Err(ToolError::new(format!(
                    "the inbox refused the request: {e}. Nothing is pending; fix the arguments \
                     and ask again."
                )));
            }
        },
    };
    let status = match wait.status {
        WaitStatus::Pending | WaitStatus::Ready => "pending",
        WaitStatus::Delivered => "decided",
        WaitStatus::Cancelled => "cancelled",
    };
    Ok(json!({
        "requestId": request_id,
        "status": status,
        "next": "End your turn now: you will be resumed with the decision in this \
                 conversation. Do not poll.",
    }))
}

#[cfg(test)]
mod tests {
    use tern_tools::Tool;

    use super::super::{RequestApproval, RequestElicitation};

    #[test]
    fn request_descriptions_point_to_the_guide() {
        for description in [
            RequestApproval::DESCRIPTION,
            RequestElicitation::DESCRIPTION,
        ] {
            assert!(description.contains(guide_pointer!()), "{description}");
            assert!(description.contains("END YOUR TURN"), "{description}");
        }
    }
}
