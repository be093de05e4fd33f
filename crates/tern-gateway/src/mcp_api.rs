//! `GET /api/mcp/servers`: the state of each configured MCP server (running with its pid,
//! starting, restarting with its attempt and last error, failed with why, disabled). Admin
//! keys only: the servers are the gateway's, and their errors name commands and paths.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::{AppState, CallerKey};

pub(crate) async fn servers(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
) -> Result<Json<Value>, ApiError> {
    if !key.admin {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "Only an admin key may see the gateway's MCP servers",
        ));
    }
    Ok(Json(json!({ "servers": gw.mcp.status() })))
}
