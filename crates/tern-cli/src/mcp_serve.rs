//! `tern mcp serve`: tern as an MCP server on stdio, for clients that start their servers as
//! commands (Claude Code, Codex, IDEs).
//!
//! # Design: a bridge to the running gateway
//!
//! The tools need what only the running gateway has: the process manager that owns the
//! background processes (one per home), the turn manager that admits a session's turns one
//! at a time, the inbox's change feed that wakes `wait_for_decision`, and the key check. A
//! second server serving in-process would own none of them (or fight the gateway over
//! them), so this command forwards: it speaks MCP on stdin/stdout and relays every message,
//! unchanged, to the gateway's `/mcp` (streamable HTTP, both directions through rmcp's
//! transports), authenticated with an agent key. The gateway then does exactly what it does
//! for an HTTP client — same tools, same scoping by key, same progress and cancellation.
//!
//! The key: the file `--key-file` names, else `TERN_API_KEY` — never a command-line
//! argument, which any user of the machine can read in `ps`. Never the home's `gateway.key`
//! on its own: that is the operator's admin key, which sees every session, and an MCP
//! client is an agent that should get a key of its own (`tern keys create NAME`). An admin
//! key (one the home's store lists as admin, or `TERN_SERVER_KEY`) is refused unless
//! `--allow-admin-key`. A plain `http://` URL is refused unless its host is loopback: the
//! key would cross the network in the clear.
//! The gateway: `--url`, else the one `gateway.json` names on this home (as `tern status`
//! finds it). Before speaking MCP the bridge checks both — no gateway, an inbox-only one, a
//! refused key — and exits 1 saying what to do.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{IntoTransport, StreamableHttpClientTransport, Transport};
use rmcp::{RoleClient, RoleServer};
use tern_config::Home;

use crate::context;

/// `tern mcp …`. (`serve` is this file's; the client side's commands join it.)
#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// Serve tern's inbox, processes and sessions to an MCP client on stdio, through the
    /// running gateway
    Serve(ServeArgs),
}

/// Runs a `tern mcp` command.
pub async fn dispatch(home: Option<PathBuf>, command: McpCommand) -> anyhow::Result<ExitCode> {
    match command {
        McpCommand::Serve(args) => run(home, args).await,
    }
}

#[derive(Args, Debug)]
#[command(after_help = "\
Example, in Claude Code's .mcp.json or Codex's config.toml:
  command = \"tern\", args = [\"mcp\", \"serve\"], env = { TERN_API_KEY = \"tern_…\" }
Create the key with `tern keys create claude`; start `tern gateway` first.")]
pub struct ServeArgs {
    /// A file holding the agent API key (its first line); wins over TERN_API_KEY
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<PathBuf>,
    /// The gateway's base URL (default: the gateway running on this home, from gateway.json)
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Serve with an admin key, which sees every session (refused otherwise: give the MCP
    /// client an agent key of its own)
    #[arg(long)]
    pub allow_admin_key: bool,
}

/// Runs the bridge until the client closes stdin (exit 0) or the gateway goes away (exit 1).
pub async fn run(home: Option<PathBuf>, args: ServeArgs) -> anyhow::Result<ExitCode> {
    let key = key(&args).await?;
    let resolved = Home::resolve(home, &context::env_var);
    let base = match &args.url {
        Some(u) => {
            let u = u.trim_end_matches('/').to_owned();
            refuse_cleartext(&u)?;
            u
        }
        None => {
            let home = resolved.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?;
            let Some(g) = crate::status::running_gateway(home)? else {
                bail!(
                    "no gateway is running on {}: start `tern gateway` first (or pass --url)",
                    home.root.display()
                );
            };
            if g.inbox_only {
                bail!(
                    "the gateway at {} runs with --inbox-only, which serves no MCP; start a full \
                     `tern gateway`",
                    g.url
                );
            }
            g.url.trim_end_matches('/').to_owned()
        }
    };
    if !args.allow_admin_key && is_admin_key(resolved.ok().as_ref(), &key).await {
        bail!(
            "this is an admin key, which sees every session: give the MCP client an agent key \
             of its own (`tern keys create NAME`), or pass --allow-admin-key"
        );
    }
    preflight(&base, &key).await?;
    let url = format!("{base}/mcp");
    tracing::info!(%url, "tern mcp serve: relaying stdio to the gateway");
    relay(&url, &key).await
}

/// Refuses `http://` to a host that is not loopback: the bearer key would be readable on
/// the way.
fn refuse_cleartext(url: &str) -> anyhow::Result<()> {
    let parsed = reqwest::Url::parse(url).with_context(|| format!("--url {url} is not a URL"))?;
    match parsed.scheme() {
        "https" => Ok(()),
        "http" => {
            let host = parsed.host_str().unwrap_or_default();
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let loopback = host.eq_ignore_ascii_case("localhost")
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            if loopback {
                Ok(())
            } else {
                bail!(
                    "refusing to send the key in the clear to {url}: use https:// for a gateway \
                     on another machine (plain http:// only to a loopback address)"
                )
            }
        }
        other => bail!("--url {url}: `{other}` is not http or https"),
    }
}

/// Whether `key` is an admin key: `TERN_SERVER_KEY`, or a key the home's store lists as
/// admin (a gateway elsewhere, whose store is not here, is taken at its word by the
/// operator who handed the key out).
async fn is_admin_key(home: Option<&Home>, key: &str) -> bool {
    if context::env_var("TERN_SERVER_KEY").is_some_and(|k| k.trim() == key) {
        return true;
    }
    let Some(home) = home else { return false };
    if !home.db_path().exists() {
        return false;
    }
    let store = match context::open_store(home).await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "cannot open the store to check the key's kind");
            return false;
        }
    };
    let hash = tern_gateway::auth::hash_key(key);
    store.active_keys().await.is_ok_and(|keys| {
        keys.iter()
            .any(|k| k.hash == hash && k.kind == tern_store::KeyKind::Admin)
    })
}

async fn key(args: &ServeArgs) -> anyhow::Result<String> {
    let key = match &args.key_file {
        Some(path) => tokio::fs::read_to_string(path)
            .await
            .with_context(|| format!("reading the key file {}", path.display()))?
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned(),
        None => match context::env_var("TERN_API_KEY") {
            Some(k) => k,
            None => bail!(
                "no agent key: set TERN_API_KEY or pass --key-file (create a key with `tern \
                 keys create NAME`)"
            ),
        },
    };
    let key = key.trim().to_owned();
    if key.is_empty() {
        bail!("the agent key is empty");
    }
    Ok(key)
}

/// The gateway answers and takes the key: failures said here, in words, rather than as a
/// closed MCP connection.
async fn preflight(base: &str, key: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()?;
    http.get(format!("{base}/health"))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("the gateway at {base} cannot be reached"))?;
    let r = http
        .get(format!("{base}/api/sessions?limit=1"))
        .bearer_auth(key)
        .send()
        .await
        .with_context(|| format!("the gateway at {base} cannot be reached"))?;
    match r.status().as_u16() {
        200 => Ok(()),
        401 => bail!(
            "the gateway at {base} refused the key (401): check TERN_API_KEY or --key-file \
             (`tern keys list` shows the active keys)"
        ),
        s => bail!("the gateway at {base} answered {s} to a key check"),
    }
}

/// Relays MCP messages between stdio (this process as the server) and the gateway (this
/// process as its client) until either side ends.
async fn relay(url: &str, key: &str) -> anyhow::Result<ExitCode> {
    let mut local = IntoTransport::<RoleServer, _, _>::into_transport(rmcp::transport::stdio());
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(key);
    let mut remote = StreamableHttpClientTransport::<reqwest::Client>::from_config(config);
    let code = loop {
        tokio::select! {
            from_client = local.receive() => {
                let Some(msg) = from_client else {
                    // The client closed stdin: its session ends with it.
                    break ExitCode::SUCCESS;
                };
                // Sent on its own task: a POST answered by a long SSE stream (a waiting
                // call) must not hold up the next message.
                let sending = <_ as Transport<RoleClient>>::send(&mut remote, msg);
                tokio::spawn(async move {
                    if let Err(e) = sending.await {
                        tracing::warn!(error = %e, "cannot relay a message to the gateway");
                    }
                });
            }
            from_gateway = <_ as Transport<RoleClient>>::receive(&mut remote) => {
                let Some(msg) = from_gateway else {
                    eprintln!("tern mcp serve: the connection to the gateway at {url} ended");
                    break ExitCode::FAILURE;
                };
                if let Err(e) = local.send(msg).await {
                    tracing::debug!(error = %e, "stdout closed");
                    break ExitCode::SUCCESS;
                }
            }
        }
    };
    let _ = <_ as Transport<RoleClient>>::close(&mut remote).await;
    Ok(code)
}
