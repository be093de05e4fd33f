//! `tern mcp`: `serve` (tern as an MCP server, `mcp_serve.rs`) and the configured MCP
//! servers, for debugging without a gateway — `list` (from the
//! configuration alone), `tools NAME` (starts the server and lists what it offers) and `call
//! NAME TOOL` (one call, its result on stdout). A server is started as the gateway starts it:
//! in the agent's sandbox unless it says otherwise, its stderr in tern's log.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, anyhow, bail};
use serde::Serialize;
use serde_json::{Map, Value};
use tern_config::{Effective, Home, McpServerConfig, McpTransport};
use tern_mcp::{ClientOptions, McpClient, ServerSandbox};

use crate::context;

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    #[command(subcommand)]
    pub command: McpCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum McpCommand {
    /// Serve tern's inbox, processes and sessions to an MCP client on stdio, through the
    /// running gateway
    Serve(crate::mcp_serve::ServeArgs),
    /// The configured servers: transport, enabled, startup, sandbox, tools filter
    List {
        #[arg(long)]
        json: bool,
    },
    /// Start a server and list the tools it offers, with their descriptions
    Tools {
        /// The server (`[mcp_servers.NAME]`)
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Call one tool of a server and print its result
    Call {
        /// The server (`[mcp_servers.NAME]`)
        name: String,
        /// The tool, as the server names it (e.g. `echo`)
        tool: String,
        /// An argument KEY=VALUE (repeatable); VALUE is typed by the tool's schema
        /// (integer, number, boolean, array/object as JSON; else a string)
        #[arg(long = "arg", value_name = "KEY=VALUE", conflicts_with = "json")]
        args: Vec<String>,
        /// All arguments as one JSON object
        #[arg(long, value_name = "OBJECT")]
        json: Option<String>,
    },
}

/// One server as `list` shows it: never its `env` or `headers` values.
#[derive(Debug, Serialize)]
struct Row {
    name: String,
    transport: &'static str,
    /// The command line (stdio) or the URL, passwords masked (HTTP).
    target: String,
    enabled: bool,
    startup: &'static str,
    sandbox: Option<&'static str>,
    enabled_tools: Option<Vec<String>>,
    disabled_tools: Vec<String>,
    /// The sessions it serves, by source; `None`: all.
    sources: Option<Vec<&'static str>>,
}

/// One offered tool as `tools` shows it.
#[derive(Debug, Serialize)]
struct ToolRow {
    name: String,
    /// The name the model calls it by.
    tern_name: Option<String>,
    description: String,
    offered: bool,
    input_schema: Value,
}

pub async fn run(home: Option<PathBuf>, args: McpArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        McpCommand::Serve(serve) => {
            crate::mcp_serve::dispatch(home, crate::mcp_serve::McpCommand::Serve(serve)).await
        }
        McpCommand::List { json } => list(&context::load_config(home)?.1, json),
        McpCommand::Tools { name, json } => {
            let (home, eff) = context::load_config(home)?;
            let _log = context::init_logging(&home);
            tools(&home, &eff, &name, json).await
        }
        McpCommand::Call {
            name,
            tool,
            args,
            json,
        } => {
            let (home, eff) = context::load_config(home)?;
            let _log = context::init_logging(&home);
            call(&home, &eff, &name, &tool, &args, json.as_deref()).await
        }
    }
}

fn list(eff: &Effective, json: bool) -> anyhow::Result<ExitCode> {
    let rows: Vec<Row> = eff
        .config
        .mcp_servers
        .iter()
        .map(|(name, s)| {
            let (transport, target) = match s.transport() {
                McpTransport::Stdio { command, args, .. } => (
                    "stdio",
                    std::iter::once(command)
                        .chain(args.iter().map(String::as_str))
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
                McpTransport::Http { url, .. } => ("http", tern_config::mask_url(url)),
            };
            Row {
                name: name.clone(),
                transport,
                target,
                enabled: s.enabled,
                startup: s.startup.as_str(),
                sandbox: s.sandbox.map(|m| m.as_str()),
                enabled_tools: s.enabled_tools.clone(),
                disabled_tools: s.disabled_tools.clone(),
                sources: s
                    .sources
                    .as_ref()
                    .map(|l| l.iter().map(|s| s.as_str()).collect()),
            }
        })
        .collect();
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        writeln!(
            out,
            "no MCP servers configured (add [mcp_servers.NAME] to config.toml; see docs/mcp.md)"
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    for r in &rows {
        let mut tools = match &r.enabled_tools {
            Some(t) => format!("only {}", t.join(", ")),
            None => "all".to_owned(),
        };
        if !r.disabled_tools.is_empty() {
            tools.push_str(&format!(", never {}", r.disabled_tools.join(", ")));
        }
        writeln!(
            out,
            "{}  {} {}  {}  startup {}  sandbox {}  tools {}  sessions {}",
            r.name,
            r.transport,
            r.target,
            if r.enabled { "enabled" } else { "disabled" },
            r.startup,
            r.sandbox.unwrap_or("default"),
            tools,
            r.sources
                .as_ref()
                .map_or("all".to_owned(), |l| l.join(", "))
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The server `name` from the configuration; an unknown name lists the configured ones.
fn server<'a>(eff: &'a Effective, name: &str) -> anyhow::Result<&'a McpServerConfig> {
    eff.config.mcp_servers.get(name).ok_or_else(|| {
        let known: Vec<&str> = eff.config.mcp_servers.keys().map(String::as_str).collect();
        if known.is_empty() {
            anyhow!("no MCP server `{name}`: none is configured (add [mcp_servers.{name}] to config.toml)")
        } else {
            anyhow!(
                "no MCP server `{name}`; the configured servers are: {}",
                known.join(", ")
            )
        }
    })
}

/// Starts `name` as the gateway would (the agent's sandbox, this directory as workspace).
async fn start(home: &Home, eff: &Effective, name: &str) -> anyhow::Result<McpClient> {
    let config = server(eff, name)?;
    let mut options = ClientOptions::default();
    options.sandbox = Some(ServerSandbox {
        sandbox: Arc::new(context::sandbox(home, eff)),
        workspace: std::env::current_dir().context("reading the current directory")?,
    });
    Ok(McpClient::start_with(name, config, &options).await?)
}

async fn tools(home: &Home, eff: &Effective, name: &str, json: bool) -> anyhow::Result<ExitCode> {
    let client = start(home, eff, name).await?;
    let listed = client.list_tools().await;
    client.close().await;
    let rows: Vec<ToolRow> = listed?
        .into_iter()
        .map(|t| ToolRow {
            tern_name: tern_mcp::tool_name(name, &t.name),
            offered: client.config().offers_tool(&t.name),
            description: t.description.as_deref().unwrap_or_default().to_owned(),
            input_schema: Value::Object((*t.input_schema).clone()),
            name: t.name.to_string(),
        })
        .collect();
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    for t in &rows {
        let note = if t.offered {
            ""
        } else {
            "  (not offered: enabled_tools/disabled_tools)"
        };
        writeln!(out, "{}{note}", t.name)?;
        for line in t.description.lines() {
            writeln!(out, "    {line}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn call(
    home: &Home,
    eff: &Effective,
    name: &str,
    tool: &str,
    args: &[String],
    json: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let client = start(home, eff, name).await?;
    let result = call_on(&client, tool, args, json).await;
    client.close().await;
    let text = result?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    Ok(ExitCode::SUCCESS)
}

async fn call_on(
    client: &McpClient,
    tool: &str,
    args: &[String],
    json: Option<&str>,
) -> anyhow::Result<String> {
    let tools = client.list_tools().await?;
    let Some(spec) = tools.iter().find(|t| t.name == tool) else {
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        bail!(
            "MCP server `{}` has no tool `{tool}`; its tools are: {}",
            client.name(),
            names.join(", ")
        );
    };
    let arguments = match json {
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => map,
            Ok(_) => bail!("--json must be a JSON object, e.g. '{{\"message\": \"hi\"}}'"),
            Err(e) => bail!("--json is not valid JSON: {e}"),
        },
        None => typed_args(args, &spec.input_schema)?,
    };
    // An `isError` result is `McpError::ToolFailed` with the server's text: exit 1 with it.
    Ok(client.call_tool(tool, Some(arguments)).await?)
}

/// `KEY=VALUE` arguments typed by the tool's input schema: `integer`, `number` and `boolean`
/// parsed, `array` and `object` read as JSON, anything else a string.
fn typed_args(args: &[String], schema: &Map<String, Value>) -> anyhow::Result<Map<String, Value>> {
    let mut out = Map::new();
    for arg in args {
        let Some((key, raw)) = arg.split_once('=') else {
            bail!("--arg {arg:?} is not KEY=VALUE");
        };
        let kind = schema
            .get("properties")
            .and_then(|p| p.get(key))
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("string");
        let bad = |what: &str| anyhow!("--arg {key}={raw}: `{key}` must be {what}");
        let value = match kind {
            "integer" => Value::from(raw.parse::<i64>().map_err(|_| bad("an integer"))?),
            "number" => match raw.parse::<i64>() {
                Ok(i) => Value::from(i),
                Err(_) => {
                    serde_json::Number::from_f64(raw.parse::<f64>().map_err(|_| bad("a number"))?)
                        .map(Value::Number)
                        .ok_or_else(|| bad("a finite number"))?
                }
            },
            "boolean" => Value::Bool(raw.parse::<bool>().map_err(|_| bad("true or false"))?),
            "array" | "object" => {
                serde_json::from_str(raw).map_err(|_| bad(&format!("a JSON {kind}")))?
            }
            _ => Value::String(raw.to_owned()),
        };
        out.insert(key.to_owned(), value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_typed_by_the_schema() {
        let schema: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "properties": {
                "a": {"type": "number"}, "n": {"type": "integer"}, "b": {"type": "boolean"},
                "l": {"type": "array"}, "s": {"type": "string"}
            }
        }))
        .unwrap();
        let args: Vec<String> = ["a=2.5", "n=7", "b=true", "l=[1,2]", "s=42", "x=free"]
            .map(str::to_owned)
            .to_vec();
        assert_eq!(
            Value::Object(typed_args(&args, &schema).unwrap()),
            serde_json::json!({"a": 2.5, "n": 7, "b": true, "l": [1, 2], "s": "42", "x": "free"})
        );
        let err = typed_args(&["n=seven".to_owned()], &schema).unwrap_err();
        assert_eq!(err.to_string(), "--arg n=seven: `n` must be an integer");
        let err = typed_args(&["novalue".to_owned()], &schema).unwrap_err();
        assert_eq!(err.to_string(), "--arg \"novalue\" is not KEY=VALUE");
    }
}
