//! `tern`: the command-line entry point.
//!
//! Flow: clap parses the command → [`context::Context`] resolves `$TERN_HOME`, loads
//! `config.toml` with the environment on top, opens the store, and builds the agent → the
//! subcommand runs on a single-threaded tokio runtime (light and quick to start; the agent's
//! concurrency is async, and blocking work goes to tokio's blocking pool) → errors print as
//! `error: …` on stderr with a non-zero exit code. Output to a closed pipe (`tern sessions
//! list | head -1`) ends the command quietly with exit status 0, as `head` wanted no more.

mod args;
mod ask;
mod channels;
mod chat;
mod completions;
mod context;
mod cron;
mod doctor;
mod exit;
mod gateway;
mod inbox;
mod mcp;
mod mcp_serve;
mod memory;
mod pairing;
mod ps;
mod render;
mod reviewers;
mod sessions;
mod status;
mod timefmt;

use std::process::ExitCode;

use clap::Parser;

use clap::CommandFactory as _;

use crate::args::{Cli, Command, ConfigCommand};
use crate::exit::{error_chain, is_broken_pipe};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        // The blocking pool serves short file operations of tools. Unbounded (512 by
        // default), a burst of concurrent turns in the gateway starts one thread per turn,
        // and each keeps its stack and malloc arena resident afterwards; 16 is ample for the
        // small machines tern targets, and further work waits its turn.
        .max_blocking_threads(16)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        // The reader went away (`| head`): it has what it wanted, nothing failed.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// `tern supervise DIR` (hidden): the supervisor of one background process, started detached
/// by the gateway's process manager; its stderr is the directory's `supervisor.log`.
async fn supervise(dir: &std::path::Path) -> anyhow::Result<ExitCode> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TERN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    // Its /proc files (environment included) stay out of its sandboxed child's reach.
    if let Err(e) = tern_sandbox::harden_current_process() {
        tracing::warn!(error = %e, "cannot make the supervisor undumpable");
    }
    tern_procs::supervise(dir).await?;
    Ok(ExitCode::SUCCESS)
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let home = cli.home.clone();
    match cli.command {
        Command::Chat(args) => chat::run(home, args).await,
        Command::Config {
            command: ConfigCommand::Show,
        } => {
            use std::io::Write as _;
            let (h, eff) = context::load_config(home)?;
            // `writeln!` with `?`, not `println!`: a closed pipe is an error to end quietly on.
            let mut out = std::io::stdout().lock();
            writeln!(out, "# tern home: {}", h.root.display())?;
            writeln!(out, "# session store: {}", h.db_path().display())?;
            // Starts with the `# config file:` line.
            write!(out, "{}", tern_config::render_masked(&eff))?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Doctor => doctor::run(home).await,
        Command::Gateway(args) => gateway::run(home, args).await,
        Command::Ask(args) => ask::run(home, args).await,
        Command::Inbox(args) => inbox::run(home, args).await,
        Command::Keys { command } => gateway::keys(home, command).await,
        Command::Sessions { command } => sessions::run(home, command).await,
        Command::Ps(args) => ps::run(home, args).await,
        Command::Memory(args) => memory::run(home, args).await,
        Command::Pairing(args) => pairing::run(home, args.command).await,
        Command::Channels(args) => channels::run(home, args.command).await,
        Command::Cron(args) => cron::run(home, args).await,
        Command::Mcp(args) => mcp::run(home, args).await,
        Command::Status(args) => status::run(home, args).await,
        Command::Completions(args) => completions::run(&args, Cli::command()),
        Command::Supervise { dir } => supervise(&dir).await,
    }
}
