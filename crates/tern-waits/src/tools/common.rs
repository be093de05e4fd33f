//! Helpers every inbox tool uses: checking text arguments, the call's identity, building
//! the create bodies, and the error a tool returns when nothing was asked.

use serde_json::{Map, Value};
use tern_tools::{ToolContext, ToolError};

use crate::client::ClientError;

pub(super) fn require_text(name: &str, value: &str) -> Result<(), ToolError> {
    if value.trim().is_empty() {
        return Err(ToolError::new(format!("`{name}` must not be empty")));
    }
    Ok(())
}

/// The tool call's identity, which keys everything it creates: the session, the call id,
/// and the call's occurrence ([`crate::call_occurrence`]).
pub(super) fn call_ids(ctx: &ToolContext) -> Result<(&str, &str, String), ToolError> {
    if ctx.session_id.is_empty() || ctx.call_id.is_empty() {
        return Err(ToolError::new(
            "the inbox tools need a session and a tool call id (internal error)",
        ));
    }
    let occurrence = crate::call_occurrence(&ctx.call_id, ctx.call_seq);
    Ok((&ctx.session_id, &ctx.call_id, occurrence))
}

/// Sets `key` in `body` when there is a value.
pub(super) fn insert_some<T: serde::Serialize>(
    body: &mut Map<String, Value>,
    key: &str,
    value: Option<T>,
) -> Result<(), ToolError> {
    if let Some(v) = value {
        body.insert(key.into(), to_value(&v)?);
    }
    Ok(())
}

pub(super) fn to_value<T: serde::Serialize>(v: &T) -> Result<Value, ToolError> {
    serde_json::to_value(v).map_err(|e| ToolError::new(format!("cannot encode arguments: {e}")))
}

pub(super) fn nothing_asked(e: ClientError) -> ToolError {
    ToolError::new(format!(
        "{e}; nothing was sent to the inbox. If this persists, tell the user that the \
         inbox cannot be reached."
    ))
}
