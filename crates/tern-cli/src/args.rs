//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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
    Chat(ChatArgs),
    /// Show the effective configuration
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Check the configuration, the store and the model endpoint
    Doctor,
    /// Run the gateway: the always-on HTTP daemon (Hermes-compatible API, OpenAI endpoint)
    Gateway(GatewayArgs),
    /// Ask a human from a script: an approval or a form, waiting for the answer
    Ask(crate::ask::AskArgs),
    /// Review the human inbox: list, show, approve, reject and answer requests
    Inbox(crate::inbox::InboxArgs),
    /// Create, list and revoke the gateway's agent API keys
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// List, show, search, delete and export stored sessions
    Sessions {
        #[command(subcommand)]
        command: SessionsCommand,
    },
    /// Background processes: list them, read or follow their output, kill, attach
    Ps(crate::ps::PsArgs),
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

#[derive(Args, Debug)]
pub struct ChatArgs {
    /// Run one turn with MESSAGE, print the final answer and exit (quiet: no REPL)
    #[arg(short = 'q', long = "quiet", alias = "query", requires = "message")]
    pub quiet: bool,

    /// The message of a one-turn run ("-" reads it from stdin); given alone it implies -q
    #[arg(value_name = "MESSAGE")]
    pub message: Option<String>,

    /// Show each tool's whole output, not only its first lines
    #[arg(short = 'v', long)]
    pub verbose: bool,

    /// Continue this session (an id or a unique prefix of one)
    #[arg(long, value_name = "ID", conflicts_with = "continue_latest")]
    pub session: Option<String>,

    /// Continue the most recently used session
    #[arg(long = "continue", short = 'c')]
    pub continue_latest: bool,

    /// Model name (overrides TERN_MODEL and config.toml)
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,

    /// Comma-separated toolsets to enable (default from config: terminal,file)
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub toolsets: Option<Vec<String>>,

    /// Allow dangerous commands without asking (hard-line commands stay blocked)
    #[arg(long)]
    pub yolo: bool,

    /// Working directory for tools (default: the current directory)
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// List sessions, most recently used first
    List {
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Show a session and its messages
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// Full-text search over message content
    Search {
        /// Words that must all appear
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
        #[arg(long, default_value_t = 20)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// Delete a session and its messages (through the gateway running on this TERN_HOME,
    /// if any, so that its waits end properly)
    Delete { id: String },
    /// Export a session as JSON lines (the session, then one message per line)
    Export {
        id: String,
        /// Write to this file instead of stdout
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

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
