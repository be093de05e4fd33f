//! MCP, the Model Context Protocol (issue 17): other MCP servers' tools for tern's agent, on
//! the official Rust SDK (`rmcp`). So far the client's foundation over stdio:
//!
//! - [`client`]: one configured server (`[mcp_servers.NAME]`) started as a child process, its
//!   stderr in tern's log, `initialize` within `startup_timeout`, every page of `tools/list`,
//!   `tools/call` within `tool_timeout`, and a `CallToolResult` as the text the model reads;
//! - [`tools`]: each of a server's tools as a tern tool `mcp__<server>__<tool>` with the
//!   server's own JSON schema, added to a [`tern_tools::Registry`].
//!
//! - [`elicit`]: a server's `elicitation/create` answered by an [`Elicitor`] (the gateway's
//!   through the inbox, `tern chat`'s at the terminal); progress reports go to the calling
//!   tool's `ToolReport`.
//!
//! Not yet wired into the agent or the gateway; the streamable HTTP transport and restarts
//! come later (see issue 17).

pub mod client;
pub mod elicit;
mod error;
mod handler;
mod result;
pub mod tools;

pub use client::{CallOptions, ClientOptions, McpClient};
pub use elicit::{CallScope, ElicitError, ElicitationAnswer, ElicitationRequest, Elicitor};
pub use error::McpError;
pub use result::result_text;
pub use tools::{McpTool, register, tool_name};
