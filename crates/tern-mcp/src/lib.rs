//! MCP, the Model Context Protocol (issue 17): other MCP servers' tools for tern's agent, on
//! the official Rust SDK (`rmcp`). So far the client's foundation over stdio:
//!
//! - [`client`]: one configured server (`[mcp_servers.NAME]`) started as a child process, its
//!   stderr in tern's log, `initialize` within `startup_timeout`, every page of `tools/list`,
//!   `tools/call` within `tool_timeout`, and a `CallToolResult` as the text the model reads;
//! - [`tools`]: each of a server's tools as a tern tool `mcp__<server>__<tool>` with the
//!   server's own JSON schema, added to a [`tern_tools::Registry`].
//!
//! Not yet wired into the agent or the gateway; the streamable HTTP transport, restarts,
//! progress and elicitation come later (see issue 17).

pub mod client;
mod error;
mod result;
pub mod tools;

pub use client::{ClientOptions, McpClient};
pub use error::McpError;
pub use result::result_text;
pub use tools::{McpTool, register, tool_name};
