//! `tern channels status`: the configured chat channels and how each is doing — from the
//! configuration (which exist, enabled or not) and the store (when each last polled its
//! platform, its last error, chats, events not yet handled, requests posted and open), and
//! whether a gateway runs them now. Works without a gateway; never prints a token.

use std::path::PathBuf;
use std::process::ExitCode;

use serde::Serialize;
use tern_store::channels::ChannelHealth;

use crate::context;
use crate::timefmt::when;

#[derive(Debug, clap::Args)]
pub struct ChannelsArgs {
    #[command(subcommand)]
    pub command: ChannelsCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ChannelsCommand {
    /// The configured channels: enabled, last poll, last error, chats, open requests
    Status {
        #[arg(long)]
        json: bool,
    },
}

/// One channel as `status` shows it.
#[derive(Debug, Serialize)]
struct Row {
    name: String,
    platform: &'static str,
    enabled: bool,
    /// Where it connects (the Bot API's URL, the homeserver) — never the secret.
    endpoint: String,
    /// `ok`, `failing`, `never started`, `disabled`, `gateway not running`.
    state: &'static str,
    last_ok_at: Option<i64>,
    last_error: Option<String>,
    last_error_at: Option<i64>,
    chats: i64,
    open_events: i64,
    open_posts: i64,
}

pub async fn run(home: Option<PathBuf>, cmd: ChannelsCommand) -> anyhow::Result<ExitCode> {
    let ChannelsCommand::Status { json } = cmd;
    let (home, eff) = context::load_config(home)?;
    let store = context::open_store(&home).await?;
    let health = store.channel_health().await?;
    store.close().await;
    let gateway = crate::status::running_gateway(&home)?;
    let running = gateway.as_ref().is_some_and(|g| !g.inbox_only);
    let channels = &eff.config.channels;
    let mut rows: Vec<Row> = Vec::new();
    let configured = channels
        .telegram
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                "telegram",
                t.enabled,
                t.api_url().to_owned(),
            )
        })
        .chain(channels.matrix.iter().map(|m| {
            (
                m.name.clone(),
                "matrix",
                m.enabled,
                format!("{} as {}", m.homeserver(), m.user_id),
            )
        }));
    for (name, platform, enabled, endpoint) in configured {
        let h = health.iter().find(|h| h.channel == name);
        rows.push(row(name, platform, enabled, endpoint, h, running));
    }
    if json {
        let v = serde_json::json!({
            "gateway": gateway.as_ref().map(|g| serde_json::json!({"pid": g.pid, "url": g.url})),
            "channels": rows,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        eprintln!(
            "no channels configured: add [[channels.telegram]] or [[channels.matrix]] to {} (see docs/channels.md)",
            home.config_path().display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    match &gateway {
        Some(g) if running => println!("gateway running (pid {}, {})", g.pid, g.url),
        _ => println!("no gateway running on this home: the channels are not polling"),
    }
    println!(
        "{:<12}  {:<8}  {:<19}  {:<16}  {:>5}  {:>6}  {:>5}  ENDPOINT",
        "CHANNEL", "PLATFORM", "STATE", "LAST POLL (UTC)", "CHATS", "QUEUED", "OPEN"
    );
    for r in &rows {
        println!(
            "{:<12}  {:<8}  {:<19}  {:<16}  {:>5}  {:>6}  {:>5}  {}",
            r.name,
            r.platform,
            r.state,
            r.last_ok_at.map(when).unwrap_or_else(|| "-".into()),
            r.chats,
            r.open_events,
            r.open_posts,
            r.endpoint
        );
        if let Some(e) = &r.last_error
            && r.state == "failing"
        {
            println!(
                "    last error ({}): {e}",
                r.last_error_at.map(when).unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn row(
    name: String,
    platform: &'static str,
    enabled: bool,
    endpoint: String,
    h: Option<&ChannelHealth>,
    running: bool,
) -> Row {
    let failing = h.is_some_and(|h| match (h.last_error_at, h.last_ok_at) {
        (Some(err), Some(ok)) => err > ok,
        (Some(_), None) => true,
        _ => false,
    });
    let state = if !enabled {
        "disabled"
    } else if failing {
        "failing"
    } else if !running {
        "gateway not running"
    } else if h.and_then(|h| h.last_ok_at).is_none() {
        "never started"
    } else {
        "ok"
    };
    Row {
        name,
        platform,
        enabled,
        endpoint,
        state,
        last_ok_at: h.and_then(|h| h.last_ok_at),
        last_error: h.and_then(|h| h.last_error.clone()),
        last_error_at: h.and_then(|h| h.last_error_at),
        chats: h.map_or(0, |h| h.chats),
        open_events: h.map_or(0, |h| h.open_events),
        open_posts: h.map_or(0, |h| h.open_posts),
    }
}
