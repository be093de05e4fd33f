//! `tern gateway` and `tern keys`.
//!
//! Flow of `tern gateway`: load the configuration → log to stderr → start the gateway with
//! [`GatewayBuilder`] (its module docs give what it opens and wires) → print what a person
//! must see once (the first key's file, admin's login link) and how the sandbox applies → on
//! SIGTERM or SIGINT, [`tern_gateway::boot::GatewayHandle::shutdown`]: drain running turns
//! within the drain timeout, interrupt the rest, stop the server, join the upkeep, close the
//! store. `--inbox-only` serves the human inbox alone (no model needed). Background
//! processes are not stopped with the gateway.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::{Args, Subcommand};
use tern_gateway::boot::GatewayBuilder;
use tern_gateway::{Serve, auth};
use tokio_util::sync::CancellationToken;

use crate::context;

#[derive(Args, Debug)]
pub struct GatewayArgs {
    /// Address to listen on (default from config: 127.0.0.1:8642)
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,

    /// Log format on stderr
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Serve only the human inbox (its agent API, reviewers and web inbox): a remote inbox
    /// for agents on other machines. No model is needed; session and OpenAI routes answer 404.
    #[arg(long)]
    pub inbox_only: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum KeysCommand {
    /// Create a key and print it (the only time it is shown)
    Create {
        name: String,
        /// An admin key: it sees and uses every session through the gateway, not only
        /// those it created (for operators; give agents ordinary keys)
        #[arg(long)]
        admin: bool,
    },
    /// List keys (names and prefixes, never the keys)
    List {
        #[arg(long)]
        json: bool,
    },
    /// Revoke the active key with this name
    Revoke { name: String },
}

fn init_stderr_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TERN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

async fn shutdown_signal(token: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot listen for signals; stop the gateway with SIGKILL");
        return std::future::pending().await;
    };
    let name = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    tracing::info!(
        signal = name,
        "shutting down (a second signal exits at once)"
    );
    token.cancel();
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    tracing::warn!("second signal: exiting without waiting for running turns");
    std::process::exit(1);
}

/// The gateway is long-running: glibc's default raises its mmap threshold as large blocks
/// are freed, after which large buffers come from the heap and their pages stay resident
/// after a burst. A fixed threshold keeps large buffers in mappings of their own, returned to
/// the OS when freed.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets glibc allocator parameters; called before any other thread
    // of ours allocates.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

pub async fn run(home: Option<PathBuf>, args: GatewayArgs) -> anyhow::Result<ExitCode> {
    tune_allocator();
    let (home, eff) = context::load_config(home)?;
    init_stderr_logging(args.log_format);
    if !args.inbox_only {
        // Before anything is served: this process is hardened before any command runs.
        context::announce_sandbox(&context::sandbox(&home, &eff), true);
    }
    let mut builder = GatewayBuilder::new(home.clone(), eff)
        .server_key(context::env_var("TERN_SERVER_KEY"))
        .serve(if args.inbox_only {
            Serve::InboxOnly
        } else {
            Serve::Everything
        });
    if let Some(listen) = args.listen.clone() {
        builder = builder.listen(listen);
    }
    let started = builder.start().await?;
    if let Some(path) = &started.created_key {
        eprintln!(
            "tern: created the first API key; it is in {}",
            path.display()
        );
    }
    if let Some(link) = &started.admin_login {
        // On stderr only, not in the log: the link is a credential for 24 hours.
        eprintln!(
            "tern: inbox: open {link} to log in as admin (the link works once, within 24 hours)"
        );
    }
    // On every start: where people decide what the agents ask.
    eprintln!("tern: inbox: {}", started.inbox_url);
    let handle = started.handle;
    // `gateway.json`, for `tern status`; removed when this guard drops at a clean stop.
    let _recorded = crate::status::record(&home, handle.addr(), args.inbox_only);
    // Last of the start's lines: who waits for it has seen the others.
    tracing::info!(addr = %handle.addr(), inbox = %started.inbox_url, version = env!("CARGO_PKG_VERSION"), "tern gateway listening");
    tokio::spawn(shutdown_signal(handle.stop_token()));
    handle.stopped().await;
    if let Err(e) = handle.shutdown().await {
        tracing::warn!(error = %e, "the gateway stopped, not cleanly");
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn keys(home: Option<PathBuf>, cmd: KeysCommand) -> anyhow::Result<ExitCode> {
    let (home, _) = context::load_config(home)?;
    let store = context::open_store(&home).await?;
    match cmd {
        KeysCommand::Create { name, admin } => {
            let name = name.trim();
            if name.is_empty() || name.chars().count() > 64 {
                bail!("a key name is 1 to 64 characters");
            }
            let kind = if admin {
                tern_store::KeyKind::Admin
            } else {
                tern_store::KeyKind::Agent
            };
            let key = auth::create_key_of_kind(&store, name, kind).await?;
            println!("{key}");
            let sees = if admin {
                "an admin key: it sees every session"
            } else {
                "it sees the sessions it creates"
            };
            eprintln!(
                "Created key `{name}` ({sees}). It is shown only now: store it safely. Use it as `Authorization: Bearer <key>`."
            );
        }
        KeysCommand::List { json } => {
            let keys = store.list_keys().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&keys)?);
            } else if keys.is_empty() {
                eprintln!(
                    "no keys yet; create one with `tern keys create NAME` (the gateway creates one on its first start)"
                );
            } else {
                println!(
                    "{:<24}  {:<5}  {:<14}  {:<16}  STATUS",
                    "NAME", "KIND", "PREFIX", "CREATED (UTC)"
                );
                for k in keys {
                    let status = match k.revoked_at {
                        Some(t) => format!("revoked {}", crate::timefmt::when(t)),
                        None => "active".into(),
                    };
                    println!(
                        "{:<24}  {:<5}  {:<14}  {:<16}  {status}",
                        k.name,
                        k.kind.as_str(),
                        format!("{}…", k.prefix),
                        crate::timefmt::when(k.created_at)
                    );
                }
            }
        }
        KeysCommand::Revoke { name } => {
            if !store.revoke_key(&name).await? {
                bail!("no active key named `{name}` (see `tern keys list`)");
            }
            eprintln!("revoked key `{name}`");
        }
    }
    Ok(ExitCode::SUCCESS)
}
