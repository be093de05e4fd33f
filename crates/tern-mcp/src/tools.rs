//! A server's tools as tern tools: [`McpTool`] is a [`DynTool`] named
//! `mcp__<server>__<tool>` whose parameters are the server's own JSON schema (no Rust type
//! describes them, so it implements `DynTool` by hand, as the trait's docs allow). The
//! registry validates the model's arguments against that schema before the call; the call
//! goes to the server's current client (a [`ServerHandle`]: a restarted server serves the
//! same tool) through [`McpClient::call_tool`].

use std::sync::Arc;

use serde_json::{Map, Value};
use tern_tools::{BoxFuture, DynTool, Registry, ToolContext, ToolError, ToolResult, ToolSpec};

use crate::client::{CallOptions, McpClient};
use crate::elicit::CallScope;
use crate::error::McpError;
use crate::server::ServerHandle;

/// The toolset that stands for every configured server's toolset (`mcp:NAME`).
pub const TOOLSET_ALL: &str = "mcp";

/// The longest tool name OpenAI function calling accepts.
const MAX_TOOL_NAME: usize = 64;

/// The name the model calls a server's tool by: `mcp__<server>__<tool>`, with any character
/// function names may not have (`[a-zA-Z0-9_-]`) as `_`. `None` when it is longer than
/// function names may be.
pub fn tool_name(server: &str, tool: &str) -> Option<String> {
    let name: String = format!("mcp__{server}__{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    (name.len() <= MAX_TOOL_NAME).then_some(name)
}

/// The toolset of a server's tools: `mcp:<server>`.
pub fn toolset(server: &str) -> String {
    format!("mcp:{server}")
}

/// One tool of one MCP server.
pub struct McpTool {
    spec: ToolSpec,
    tool: String,
    server: ServerHandle,
}

impl McpTool {
    /// The tern tool for the server's `tool`; `None` when its name would be too long.
    pub fn new(server: ServerHandle, tool: &rmcp::model::Tool) -> Option<Self> {
        let client = &server;
        let name = tool_name(client.name(), &tool.name)?;
        let description = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .map_or_else(
                || format!("Tool `{}` of MCP server `{}`.", tool.name, client.name()),
                str::to_owned,
            );
        let spec = ToolSpec {
            // The registry keeps `&'static str`s: a server's tools are made once, when its
            // tools are listed at boot (a restart reuses them), and live as long as the
            // registry, so their few strings are leaked once per process.
            name: leak(name),
            toolset: leak(toolset(client.name())),
            description: leak(description),
            parameters: parameters(&tool.input_schema),
        };
        Some(McpTool {
            spec,
            tool: tool.name.to_string(),
            server,
        })
    }
}

impl DynTool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'_, ToolResult> {
        Box::pin(async move {
            let arguments = match args {
                Value::Object(map) => Some(map),
                Value::Null => None,
                _ => return Err(ToolError::new("tool arguments must be a JSON object")),
            };
            let mut options = CallOptions::default()
                .with_scope(CallScope {
                    session_id: ctx.session_id.clone(),
                    call_id: ctx.call_id.clone(),
                    call_seq: ctx.call_seq,
                    cancel: ctx.cancel.clone(),
                })
                .with_images(ctx.report.images.clone());
            if let Some(sink) = &ctx.report.progress {
                options = options.with_progress(Arc::clone(sink));
            }
            let call = async {
                let client = self.server.client().await?;
                client.call_tool_with(&self.tool, arguments, options).await
            };
            tokio::select! {
                r = call => {
                    r.map(Value::String).map_err(|e| ToolError::new(e.to_string()))
                }
                // Dropping the call sends the server `notifications/cancelled`.
                () = ctx.cancel.cancelled() => Err(ToolError::new(format!(
                    "interrupted: the call to `{}` of MCP server `{}` was cancelled",
                    self.tool,
                    self.server.name()
                ))),
            }
        })
    }
}

/// Lists the server's tools and adds those its configuration offers (`enabled_tools`,
/// `disabled_tools`) to `registry`; returns the names added. A tool whose name would be too
/// long is left out with a warning. The tools call this client alone (no restarts: the
/// [`McpManager`](crate::McpManager) registers the tools of the servers it runs).
pub async fn register(
    registry: &mut Registry,
    client: Arc<McpClient>,
) -> Result<Vec<&'static str>, McpError> {
    let tools = client.list_tools().await?;
    Ok(register_listed(
        registry,
        &ServerHandle::fixed(client),
        &tools,
    ))
}

/// Adds the offered ones of `tools`, listed from `server`, to `registry`.
pub(crate) fn register_listed(
    registry: &mut Registry,
    server: &ServerHandle,
    tools: &[rmcp::model::Tool],
) -> Vec<&'static str> {
    let built = build(server, tools);
    for tool in &built {
        registry.register(Arc::clone(tool));
    }
    built.iter().map(|t| t.spec().name).collect()
}

/// The offered ones of `tools` as tern tools.
pub(crate) fn build(server: &ServerHandle, tools: &[rmcp::model::Tool]) -> Vec<Arc<dyn DynTool>> {
    let mut built: Vec<Arc<dyn DynTool>> = Vec::new();
    for tool in tools {
        if !server.config().offers_tool(&tool.name) {
            continue;
        }
        match McpTool::new(server.clone(), tool) {
            Some(t) => built.push(Arc::new(t)),
            None => tracing::warn!(
                server = server.name(),
                tool = %tool.name,
                "MCP tool left out: mcp__{}__{} is longer than {MAX_TOOL_NAME} characters",
                server.name(),
                tool.name
            ),
        }
    }
    built
}

/// The server's input schema as function-calling parameters: an object with `properties`
/// (servers may leave either out for a tool without arguments), without `$schema` (the
/// registry validates against draft 2020-12 like every tool's schema).
fn parameters(schema: &Map<String, Value>) -> Value {
    let mut schema = schema.clone();
    schema.remove("$schema");
    schema
        .entry("type")
        .or_insert_with(|| Value::String("object".to_owned()));
    schema
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    Value::Object(schema)
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_function_names() {
        assert_eq!(
            tool_name("everything", "get-sum").as_deref(),
            Some("mcp__everything__get-sum")
        );
        assert_eq!(
            tool_name("fs", "read.file/v2").as_deref(),
            Some("mcp__fs__read_file_v2")
        );
        assert_eq!(tool_name("s", &"x".repeat(60)), None);
    }

    #[test]
    fn a_schema_without_properties_gets_them() {
        let schema: Map<String, Value> =
            serde_json::from_str(r#"{"$schema": "http://json-schema.org/draft-07/schema#"}"#)
                .unwrap();
        assert_eq!(
            parameters(&schema),
            serde_json::json!({"type": "object", "properties": {}})
        );
    }
}
