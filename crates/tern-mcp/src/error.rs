//! [`McpError`]: what can go wrong with an MCP server, in words that name the server (and the
//! tool) and say what to check.

use std::time::Duration;

/// Errors of the MCP client.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The server's program could not be started.
    #[error("cannot start MCP server `{server}` (`{command}`): {source}")]
    Spawn {
        server: String,
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// The variable that should hold an HTTP server's bearer token is not set.
    #[error(
        "MCP server `{server}`: the environment variable `{variable}` (its bearer_token_env) is not set"
    )]
    MissingToken { server: String, variable: String },
    /// A configured header's value cannot be sent (it is not shown: it may be a secret).
    #[error(
        "MCP server `{server}`: the value of header `{header}` is not a valid HTTP header value"
    )]
    BadHeader { server: String, header: String },
    /// The sandbox of a stdio server cannot be set up here.
    #[error(
        "MCP server `{server}` cannot be sandboxed: {reason} (set `sandbox = \"none\"` in [mcp_servers.{server}] to run it without one)"
    )]
    Sandbox { server: String, reason: String },
    /// The server is not available for calls now (failed, restarting, disabled, shut down).
    #[error("MCP server `{server}` is not available: {reason}")]
    Unavailable { server: String, reason: String },
    /// The server started but the `initialize` handshake failed (it exited, or answered
    /// something else).
    #[error("MCP server `{server}` did not initialize: {reason}")]
    Initialize { server: String, reason: String },
    /// The server did not answer `initialize` in time.
    #[error(
        "MCP server `{server}` did not answer `initialize` within {}; raise startup_timeout in [mcp_servers.{server}] if it is slow to start",
        humantime::format_duration(*timeout)
    )]
    StartupTimeout { server: String, timeout: Duration },
    /// The server went away (it exited or closed its output).
    #[error(
        "MCP server `{server}` is not running: its connection closed (see tern's log for its stderr)"
    )]
    Closed { server: String },
    /// A request failed at the protocol level (a JSON-RPC error, an unexpected answer).
    #[error("MCP server `{server}` refused `{method}`: {reason}")]
    Protocol {
        server: String,
        method: String,
        reason: String,
    },
    /// A tool call took longer than `tool_timeout`; the server was told to cancel it.
    #[error(
        "tool `{tool}` of MCP server `{server}` did not finish within {}; it was cancelled",
        humantime::format_duration(*timeout)
    )]
    ToolTimeout {
        server: String,
        tool: String,
        timeout: Duration,
    },
    /// The tool ran and reported an error (`isError`); `message` is what it said.
    #[error("tool `{tool}` of MCP server `{server}` failed: {message}")]
    ToolFailed {
        server: String,
        tool: String,
        message: String,
    },
}
