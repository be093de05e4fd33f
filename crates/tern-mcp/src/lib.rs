//! MCP, the Model Context Protocol (issue 17): other MCP servers' tools for tern's agent, on
//! the official Rust SDK (`rmcp`):
//!
//! - [`client`]: one configured server (`[mcp_servers.NAME]`): a child process over stdio
//!   (sandboxed like the agent's commands, its stderr in tern's log) or a streamable HTTP
//!   endpoint; `initialize` within `startup_timeout`, every page of `tools/list`,
//!   `tools/call` within `tool_timeout`, and a `CallToolResult` as the text the model reads;
//! - [`manager`]: every configured server of a process, started at once (or lazily),
//!   restarted with backoff when it crashes, reported by `status`, closed by `shutdown`;
//! - [`tools`]: each of a server's tools as a tern tool `mcp__<server>__<tool>` in toolset
//!   `mcp:<server>`, with the server's own JSON schema, added to a [`tern_tools::Registry`];
//! - [`elicit`]: a server's `elicitation/create` answered by an [`Elicitor`] (the gateway's
//!   through the inbox, `tern chat`'s at the terminal); progress reports go to the calling
//!   tool's `ToolReport`.

pub mod client;
pub mod elicit;
mod error;
mod handler;
mod http;
pub mod manager;
mod result;
mod server;
pub mod tools;

pub use client::{CallOptions, ClientOptions, McpClient, ServerSandbox};
pub use elicit::{CallScope, ElicitError, ElicitationAnswer, ElicitationRequest, Elicitor};
pub use error::McpError;
pub use manager::McpManager;
pub use result::result_text;
pub use server::{ServerHandle, ServerState, ServerStatus};
pub use tools::{McpTool, TOOLSET_ALL, register, tool_name, toolset};
