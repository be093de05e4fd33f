//! Command-line arguments: the top level, assembled from the commands' own clap types
//! (each command's arguments live with the command).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "tern",
    version,
    about = "tern: a durable AI-agent runtime",
    long_about = "tern runs AI agents that call tools through any OpenAI-compatible model, \
                  with every session and message kept in a local store.\n\n\
                  Configure the model with OPENAI_BASE_URL, OPENAI_API_KEY and TERN_MODEL, or \
                  in $TERN_HOME/config.toml; check the set-up with `tern doctor`."
)]
pub struct Cli {
    /// tern's home directory (config.toml, the store, logs)
    #[arg(long, global = true, env = "TERN_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Talk to the agent: an interactive session, or one turn with -q
    Chat(crate::chat::ChatArgs),
    /// Show the effective configuration
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Check the configuration, the store and the model endpoint
    Doctor,
    /// Run the gateway: the always-on HTTP daemon (Hermes-compatible API, OpenAI endpoint)
    Gateway(crate::gateway::GatewayArgs),
    /// Ask a human from a script: an approval or a form, waiting for the answer
    Ask(crate::ask::AskArgs),
    /// Review the human inbox: list, show, approve, reject and answer requests
    Inbox(crate::inbox::InboxArgs),
    /// Create, list and revoke the gateway's agent API keys
    Keys {
        #[command(subcommand)]
        command: crate::gateway::KeysCommand,
    },
    /// List, show, search, delete and export stored sessions
    Sessions {
        #[command(subcommand)]
        command: crate::sessions::SessionsCommand,
    },
    /// Background processes: list them, read or follow their output, kill, attach
    Ps(crate::ps::PsArgs),
    /// Who may talk to the agent from a chat app: list, approve and revoke DM pairings
    Pairing(crate::pairing::PairingArgs),
    /// Chat channels (Telegram, Matrix): how each configured one is doing
    Channels(crate::channels::ChannelsArgs),
    /// MCP: the configured servers (list, tools, call; no gateway needed) and `serve`, tern
    /// as a server to MCP clients
    Mcp(crate::mcp::McpArgs),
    /// Scheduled jobs: add, list, show, edit, pause, resume, run, stop, remove, history
    Cron(crate::cron::CronArgs),
    /// Show or edit the agent's memory: notes it keeps across sessions
    Memory(crate::memory::MemoryArgs),
    /// Is a gateway running on this home? Its address, sessions, inbox and processes
    Status(crate::status::StatusArgs),
    /// Print a shell completion script (bash, zsh or fish) to stdout
    Completions(crate::completions::CompletionsArgs),
    /// Supervise one background process (started by the gateway, not by hand)
    #[command(hide = true)]
    Supervise {
        /// The process's directory under $TERN_HOME/procs
        dir: PathBuf,
    },
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Print the effective configuration, secrets masked, with where each value came from
    Show,
}
