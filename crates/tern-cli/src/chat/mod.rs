//! `tern chat`: one turn with `-q`, or an interactive session.
//!
//! Flow: pick the session (`--session`, `--continue` — the latest one with a message — or a
//! new one, which the REPL stores only with its first message) → build the approver
//! (interactive: ask at the terminal; `-q`: deny unless `--yolo`; the allowlist applies to
//! both) → run turns; Ctrl-C (and SIGTERM) cancels the running turn's token, so the turn
//! stops cleanly and the program goes on (interactive) or exits 130 (`-q`). A turn that fails
//! before the model answered anything in a session it created deletes that session again: a
//! session holding only the unanswered message is nothing to continue.
//!
//! The REPL's slash commands come from one table, [`COMMANDS`]: dispatch, `/help` and Tab
//! completion all read it.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, anyhow, bail};
use clap::Args;
use tern_agent::{Agent, AgentError, Interrupt, StopReason, TurnOutcome, TurnRequest, TurnStatus};
use tern_config::{Effective, Home};
use tern_hooks::HookBus;
use tern_llm::{LlmError, Role};
use tern_store::{NewSession, Session, Store};
use tern_tools::approval::Grants;
use tern_tools::{AllowAll, Approver, DenyAll};

mod approve;
// Nothing in `tern chat` starts MCP servers yet (issue 17's runtime part gives them this
// elicitor); until then its code is only reached from its tests.
#[cfg_attr(
    not(test),
    allow(
        dead_code,
        reason = "given to tern chat's MCP servers once it starts them"
    )
)]
mod elicit;
mod input;

use crate::context;
use crate::render::{self, Style};
use approve::TerminalApprover;
use input::{Input, LineReader};

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

/// What a REPL command does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmd {
    New,
    Resume,
    Sessions,
    Session,
    Title,
    Model,
    Retry,
    Usage,
    Compact,
    Stop,
    Help,
    Exit,
}

/// A REPL command: its name, other names, its argument, and what it does.
pub struct CommandSpec {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub arg: &'static str,
    pub help: &'static str,
    pub cmd: Cmd,
}

/// Every REPL command; `/help`, Tab completion and dispatch all come from here.
pub const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "/new",
        aliases: &[],
        arg: "",
        help: "start a new session (stored with its first message)",
        cmd: Cmd::New,
    },
    CommandSpec {
        name: "/resume",
        aliases: &[],
        arg: "ID",
        help: "continue a stored session: its id or a unique prefix (see /sessions)",
        cmd: Cmd::Resume,
    },
    CommandSpec {
        name: "/sessions",
        aliases: &[],
        arg: "",
        help: "list recent sessions",
        cmd: Cmd::Sessions,
    },
    CommandSpec {
        name: "/session",
        aliases: &[],
        arg: "",
        help: "show the current session's id",
        cmd: Cmd::Session,
    },
    CommandSpec {
        name: "/title",
        aliases: &[],
        arg: "TEXT",
        help: "set the session's title",
        cmd: Cmd::Title,
    },
    CommandSpec {
        name: "/model",
        aliases: &[],
        arg: "NAME",
        help: "use another model from the next turn on (no name: show the current one)",
        cmd: Cmd::Model,
    },
    CommandSpec {
        name: "/retry",
        aliases: &[],
        arg: "",
        help: "send your last message again",
        cmd: Cmd::Retry,
    },
    CommandSpec {
        name: "/usage",
        aliases: &[],
        arg: "",
        help: "tokens used so far in this session",
        cmd: Cmd::Usage,
    },
    CommandSpec {
        name: "/compact",
        aliases: &[],
        arg: "",
        help: "summarise the session's older messages to free its context window (they stay stored)",
        cmd: Cmd::Compact,
    },
    CommandSpec {
        name: "/stop",
        aliases: &[],
        arg: "",
        help: "(a running turn is stopped with Ctrl-C)",
        cmd: Cmd::Stop,
    },
    CommandSpec {
        name: "/help",
        aliases: &[],
        arg: "",
        help: "this help",
        cmd: Cmd::Help,
    },
    CommandSpec {
        name: "/exit",
        aliases: &["/quit"],
        arg: "",
        help: "quit (or Ctrl-D)",
        cmd: Cmd::Exit,
    },
];

/// The command a line names and its argument (trimmed); `None` for an unknown command.
pub fn parse_command(line: &str) -> Option<(Cmd, &str)> {
    let (word, arg) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    COMMANDS
        .iter()
        .find(|c| c.name == word || c.aliases.contains(&word))
        .map(|c| (c.cmd, arg.trim()))
}

/// The text of `/help`.
pub fn help_text() -> String {
    let mut out = String::from("Commands:\n");
    for c in COMMANDS {
        let mut left = c.name.to_owned();
        for a in c.aliases {
            left.push_str(&format!(", {a}"));
        }
        if !c.arg.is_empty() {
            left.push_str(&format!(" {}", c.arg));
        }
        out.push_str(&format!("  {left:<16} {}\n", c.help));
    }
    out.push_str(
        "Anything else is sent to the agent. Ctrl-C stops a running turn and keeps the session; \
         Tab completes a command.",
    );
    out
}

/// The commands a partial first word completes to.
pub fn complete_command(prefix: &str) -> Vec<String> {
    COMMANDS
        .iter()
        .flat_map(|c| std::iter::once(c.name).chain(c.aliases.iter().copied()))
        .filter(|n| n.starts_with(prefix))
        .map(|n| {
            let takes_arg = parse_command(n)
                .is_some_and(|(cmd, _)| COMMANDS.iter().any(|c| c.cmd == cmd && !c.arg.is_empty()));
            if takes_arg {
                format!("{n} ")
            } else {
                n.to_owned()
            }
        })
        .collect()
}

struct Chat {
    home: Home,
    eff: Effective,
    agent: Agent,
    hooks: Arc<HookBus>,
    workdir: PathBuf,
    toolsets: Vec<String>,
    model: String,
    base_url: String,
    verbose: bool,
    /// The MCP servers of this process (`[mcp_servers]`), closed when `tern chat` ends.
    mcp: tern_mcp::McpManager,
    /// Where their elicitations are asked: the REPL's reader, once it has one.
    elicit_reader: elicit::ReaderSlot,
}

/// The agent of `tern chat`: the configured model and hooks, project instructions on, the
/// tools of the MCP servers `mcp` runs.
fn build_agent(
    home: &Home,
    eff: &Effective,
    store: Store,
    hooks: Arc<HookBus>,
    mcp: &tern_mcp::McpManager,
) -> anyhow::Result<Agent> {
    let user_home = std::env::var_os("HOME").map(PathBuf::from);
    let mut registry = tern_tools::Registry::builtin();
    tern_session_tools::register(&mut registry, store.clone(), &home.root, &eff.config.memory);
    mcp.register(&mut registry);
    Ok(context::build_agent_with(home, eff, store, registry)?
        .with_hooks(hooks)
        .with_project_instructions(user_home))
}

impl Chat {
    fn store(&self) -> &Store {
        self.agent.store()
    }

    async fn new_session(&self, title: Option<String>) -> anyhow::Result<Session> {
        let s = self
            .store()
            .create_session(NewSession {
                source: "cli".into(),
                model: Some(self.model.clone()),
                title,
                ..Default::default()
            })
            .await?;
        self.agent.hooks().emit(tern_hooks::HookEvent::SessionStart(
            tern_hooks::SessionStart {
                session_id: s.id.clone(),
                source: s.source.clone(),
                model: s.model.clone(),
                parent_id: None,
            },
        ));
        Ok(s)
    }

    /// Uses `name` from the next turn on.
    fn switch_model(&mut self, name: &str) -> anyhow::Result<()> {
        let mut eff = self.eff.clone();
        eff.set_model_flag(name.to_owned());
        let resolved = eff.resolved_model().map_err(|e| anyhow!("{e}"))?;
        let agent = build_agent(
            &self.home,
            &eff,
            self.store().clone(),
            self.hooks.clone(),
            &self.mcp,
        )?;
        self.agent = agent;
        self.eff = eff;
        self.model = resolved.name;
        Ok(())
    }

    /// Runs a turn; Ctrl-C or SIGTERM cancels it. `appended`: the input is already the
    /// transcript's last message (a retry of a turn that failed).
    async fn turn(
        &self,
        session: &str,
        input: String,
        appended: bool,
        approver: Arc<dyn Approver>,
        style: Style,
    ) -> Result<TurnOutcome, AgentError> {
        let interrupt = Interrupt::new();
        let watcher = tokio::spawn(interrupt_on_signal(interrupt.clone()));
        let r = self
            .agent
            .run_turn(TurnRequest {
                session_id: session.to_owned(),
                input,
                input_appended: appended,
                interrupt,
                system_prompt: None,
                approver,
                workdir: self.workdir.clone(),
                toolsets: self.toolsets.clone(),
                events: Some(render::sink(style)),
                ticket: None,
            })
            .await;
        watcher.abort();
        r
    }

    /// After a failed turn in a session it just created: deletes the session when the
    /// turn left nothing but the user's message in it. Returns whether it did.
    async fn drop_if_unanswered(&self, session: &str) -> bool {
        match self.store().message_count(session).await {
            Ok(n) if n <= 1 => self.store().delete_session(session).await.unwrap_or(false),
            _ => false,
        }
    }

    /// A turn's error as the user reads it: a 404 from the endpoint says what is most likely
    /// wrong, as `tern doctor` does.
    fn explain(&self, e: AgentError) -> anyhow::Error {
        match &e {
            AgentError::Model(LlmError::Http { status: 404, .. }) => anyhow!(
                "{e}\n  is {} the API's base URL? {}",
                self.base_url,
                crate::doctor::base_url_hint()
            ),
            _ => anyhow::Error::new(e),
        }
    }
}

async fn interrupt_on_signal(interrupt: Interrupt) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let sigterm = async {
        match &mut term {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = sigterm => {}
    }
    interrupt.trigger(StopReason::UserInterrupt);
}

pub async fn run(home: Option<PathBuf>, args: ChatArgs) -> anyhow::Result<ExitCode> {
    let (home, mut eff) = context::load_config(home)?;
    let _log = context::init_logging(&home);
    if let Some(m) = args.model.clone() {
        eff.set_model_flag(m);
    }
    // Fail before touching anything when no model is configured.
    let resolved = eff.resolved_model().map_err(|e| anyhow!("{e}"))?;
    let store = context::open_store(&home).await?;
    let hooks = Arc::new(
        HookBus::from_config(&eff.config.hooks, &eff.config.webhooks)
            .context("in the [[hooks]] or [[webhooks]] configuration")?,
    );
    let workdir = match &args.workdir {
        Some(w) => w.clone(),
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let workdir = std::fs::canonicalize(&workdir)
        .with_context(|| format!("working directory {}", workdir.display()))?;
    // The MCP servers, all at once, in the agent's sandbox; one that fails is logged and
    // left out (`tern mcp list` shows the configured ones).
    let elicit_reader = elicit::ReaderSlot::default();
    let mut mcp_options =
        tern_mcp::ClientOptions::default().with_elicitor(Arc::new(elicit::TerminalElicitor {
            reader: Arc::clone(&elicit_reader),
        }));
    mcp_options.sandbox = Some(tern_mcp::ServerSandbox {
        sandbox: Arc::new(tern_agent::from_config::sandbox(&home, &eff)),
        workspace: workdir.clone(),
    });
    let mcp = tern_mcp::McpManager::start(&eff.config.mcp_servers, mcp_options).await;
    for s in mcp.status() {
        if let tern_mcp::ServerState::Failed { error } = &s.state {
            eprintln!("warning: {error}; its tools are left out");
        }
    }
    let agent = build_agent(&home, &eff, store, hooks.clone(), &mcp)?;
    context::announce_sandbox(&agent.settings().limits.sandbox, true);
    let mut toolsets = args
        .toolsets
        .clone()
        .unwrap_or_else(|| eff.config.agent.toolsets.clone())
        .into_iter()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>();
    // Every MCP server's tools while neither `--toolsets` nor `[agent] toolsets` chooses.
    if args.toolsets.is_none()
        && eff.source("agent.toolsets") == tern_config::Source::Default
        && !toolsets.iter().any(|t| t == tern_mcp::TOOLSET_ALL)
    {
        toolsets.push(tern_mcp::TOOLSET_ALL.to_owned());
    }
    let toolsets = mcp.expand_toolsets(&toolsets);
    if let Some(bad) = agent.registry().unknown_toolsets(&toolsets).first() {
        bail!(
            "unknown toolset `{bad}`; known toolsets: {}",
            agent.registry().toolsets().join(", ")
        );
    }
    let mut chat = Chat {
        home,
        eff,
        agent,
        hooks: hooks.clone(),
        workdir,
        toolsets,
        model: resolved.name.clone(),
        base_url: resolved.base_url.clone(),
        verbose: args.verbose,
        mcp: mcp.clone(),
        elicit_reader,
    };

    let session = if let Some(id) = &args.session {
        Some(
            chat.store()
                .resolve_session(id)
                .await
                .map_err(|e| anyhow!("{e} (see `tern sessions list`)"))?,
        )
    } else if args.continue_latest {
        Some(
            chat.store()
                .latest_session_with_messages()
                .await?
                .ok_or_else(|| {
                    anyhow!("there is no session to continue yet; start one with `tern chat`")
                })?,
        )
    } else {
        None
    };

    let code = match args.message.clone() {
        Some(q) => one_shot(&chat, session, q, args.yolo).await,
        None => repl(&mut chat, session, args.yolo).await,
    };
    mcp.shutdown().await;
    // Deliveries still under way (command hooks, webhooks) finish before the process exits.
    hooks.flush(std::time::Duration::from_secs(10)).await;
    code
}

fn allowlisted(chat: &Chat, inner: Arc<dyn Approver>) -> Grants {
    Grants::new(inner, chat.eff.config.approvals.allowlist.clone())
}

/// Says what a finished turn used, when the model reported it.
fn report_usage(style: Style, outcome: &TurnOutcome) {
    if let Some(line) = render::usage_line(&outcome.usage) {
        eprintln!("{}", style.dim(&line));
    }
}

async fn one_shot(
    chat: &Chat,
    session: Option<Session>,
    query: String,
    yolo: bool,
) -> anyhow::Result<ExitCode> {
    let input = if query == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading the message from stdin")?;
        s
    } else {
        query
    };
    if input.trim().is_empty() {
        bail!("the message is empty");
    }
    let inner: Arc<dyn Approver> = if yolo {
        Arc::new(AllowAll)
    } else {
        Arc::new(DenyAll {
            reason: "tern chat -q runs without a human to ask; the user can allow dangerous \
                     commands with --yolo"
                .into(),
        })
    };
    let approver: Arc<dyn Approver> = Arc::new(allowlisted(chat, inner));
    let style = Style::detect(false, chat.verbose);
    let (session, created) = match session {
        Some(s) => (s, false),
        None => (chat.new_session(None).await?, true),
    };
    eprintln!("{}", style.dim(&format!("session {}", session.id)));
    let outcome = match chat.turn(&session.id, input, false, approver, style).await {
        Ok(o) => o,
        Err(e) => {
            let e = chat.explain(e);
            if created && chat.drop_if_unanswered(&session.id).await {
                return Err(e.context(format!("no answer, so session {} was not kept", session.id)));
            }
            return Err(e);
        }
    };
    report_usage(style, &outcome);
    Ok(match outcome.status {
        TurnStatus::Completed => {
            let text = style.answer(&outcome.text.unwrap_or_default());
            print!("{text}");
            if !text.ends_with('\n') {
                println!();
            }
            ExitCode::SUCCESS
        }
        TurnStatus::MaxIterations | TurnStatus::LoopDetected | TurnStatus::ContextFull => {
            eprintln!("error: {}", outcome.text.unwrap_or_default());
            ExitCode::FAILURE
        }
        TurnStatus::Interrupted => {
            eprintln!(
                "interrupted; the session is kept and can be continued with --session {}",
                session.id
            );
            ExitCode::from(crate::exit::EXIT_INTERRUPTED)
        }
    })
}

/// The REPL's state besides the chat: the session (none until the first message), a title
/// given before it, and the last message sent (for `/retry`).
struct Repl {
    session: Option<Session>,
    pending_title: Option<String>,
    last_input: Option<String>,
    approver: Arc<dyn Approver>,
    style: Style,
}

impl Repl {
    /// Sends `input`, storing the session first if there is none yet. `retry`: the input
    /// is sent again; if the turn that had it failed, it is still the transcript's last
    /// message and is answered, not appended a second time.
    async fn send(&mut self, chat: &Chat, input: String, retry: bool) -> anyhow::Result<()> {
        let style = self.style;
        let (session, created) = match &self.session {
            Some(s) => (s.clone(), false),
            None => {
                let s = chat.new_session(self.pending_title.take()).await?;
                self.session = Some(s.clone());
                (s, true)
            }
        };
        let appended = retry
            && !created
            && chat
                .store()
                .messages(&session.id)
                .await?
                .last()
                .is_some_and(|m| m.role == Role::User && m.content.as_deref() == Some(&input));
        self.last_input = Some(input.clone());
        match chat
            .turn(&session.id, input, appended, self.approver.clone(), style)
            .await
        {
            Ok(o) => {
                match o.status {
                    TurnStatus::Completed => {}
                    TurnStatus::MaxIterations
                    | TurnStatus::LoopDetected
                    | TurnStatus::ContextFull => {
                        eprintln!("{}", style.yellow(&o.text.clone().unwrap_or_default()));
                    }
                    TurnStatus::Interrupted => eprintln!("{}", style.yellow("[interrupted]")),
                }
                report_usage(style, &o);
            }
            Err(e) => {
                let e = chat.explain(e);
                eprintln!("{} {}", style.red("error:"), crate::exit::error_chain(&e));
                if created && chat.drop_if_unanswered(&session.id).await {
                    // The next message starts the session again, with the title given.
                    self.session = None;
                    self.pending_title = session.title.clone();
                }
                eprintln!("{}", style.dim("(/retry sends the message again)"));
            }
        }
        Ok(())
    }

    /// Runs a slash command; `false` to quit.
    async fn command(&mut self, chat: &mut Chat, cmd: Cmd, arg: &str) -> anyhow::Result<bool> {
        match cmd {
            Cmd::Exit => return Ok(false),
            Cmd::Help => eprintln!("{}", help_text()),
            Cmd::Stop => {
                eprintln!("No turn is running; press Ctrl-C while one runs to stop it.");
            }
            Cmd::Session => match &self.session {
                Some(s) => eprintln!("session {}", s.id),
                None => eprintln!("no session yet: it is stored with your first message"),
            },
            Cmd::New => {
                self.session = None;
                self.pending_title = None;
                eprintln!("new session: it starts with your next message");
            }
            Cmd::Resume => {
                if arg.is_empty() {
                    eprintln!("usage: /resume ID (an id or a unique prefix; /sessions lists them)");
                    return Ok(true);
                }
                match chat.store().resolve_session(arg).await {
                    Ok(s) => {
                        let n = chat.store().message_count(&s.id).await?;
                        eprintln!(
                            "resumed session {}  {}  ({n} messages)",
                            s.id,
                            s.title.as_deref().unwrap_or("(untitled)")
                        );
                        self.session = Some(s);
                        self.pending_title = None;
                    }
                    Err(e) => eprintln!("{} {e} (see /sessions)", self.style.red("error:")),
                }
            }
            Cmd::Sessions => {
                let current = self.session.as_ref().map(|s| s.id.as_str());
                for s in chat.store().list_sessions(10, 0).await? {
                    let mark = if Some(s.id.as_str()) == current {
                        "*"
                    } else {
                        " "
                    };
                    eprintln!(
                        "{mark} {}  {}  {}",
                        s.id,
                        crate::timefmt::when(s.updated_at),
                        s.title.as_deref().unwrap_or("(untitled)")
                    );
                }
            }
            Cmd::Title => {
                if arg.is_empty() {
                    eprintln!("usage: /title TEXT");
                    return Ok(true);
                }
                match &self.session {
                    Some(s) => {
                        chat.store().set_title(&s.id, arg).await?;
                        eprintln!("title: {arg}");
                    }
                    None => {
                        self.pending_title = Some(arg.to_owned());
                        eprintln!("title: {arg} (the session starts with your next message)");
                    }
                }
            }
            Cmd::Model => {
                if arg.is_empty() {
                    eprintln!("model {}", chat.model);
                    return Ok(true);
                }
                match chat.switch_model(arg) {
                    Ok(()) => {
                        if let Some(s) = &self.session {
                            chat.store().set_model(&s.id, &chat.model).await?;
                        }
                        eprintln!("model {} from the next turn on", chat.model);
                    }
                    Err(e) => eprintln!("{} {e}", self.style.red("error:")),
                }
            }
            Cmd::Retry => match self.last_input.clone() {
                Some(input) => self.send(chat, input, true).await?,
                None => eprintln!("nothing to retry yet: no message was sent in this REPL"),
            },
            Cmd::Compact => match &self.session {
                Some(s) => {
                    eprintln!("compacting session {} (one model call)…", s.id);
                    match chat.agent.compact(&s.id, &chat.toolsets).await? {
                        tern_agent::CompactOutcome::Compacted(st) => eprintln!(
                            "compacted: {} message(s) summarised, {} old output(s) cut; \
                             ~{} → ~{} tokens (everything stays stored: tern sessions show \
                             --all)",
                            st.messages_compacted,
                            st.outputs_elided,
                            st.tokens_before,
                            st.tokens_after
                        ),
                        tern_agent::CompactOutcome::NothingToCompact { tokens } => eprintln!(
                            "nothing to compact: the session is its task and latest exchange \
                             (~{tokens} tokens)"
                        ),
                        tern_agent::CompactOutcome::Failed { error } => eprintln!(
                            "{} the compaction failed and nothing changed: {error}",
                            self.style.red("error:")
                        ),
                    }
                }
                None => eprintln!("no session yet: nothing to compact"),
            },
            Cmd::Usage => match &self.session {
                Some(s) => {
                    let s = chat.store().session(&s.id).await?;
                    eprintln!(
                        "tokens so far in this session: {} prompt + {} completion = {}",
                        s.prompt_tokens,
                        s.completion_tokens,
                        s.prompt_tokens + s.completion_tokens
                    );
                }
                None => eprintln!("no session yet: no tokens used"),
            },
        }
        Ok(true)
    }
}

async fn repl(chat: &mut Chat, session: Option<Session>, yolo: bool) -> anyhow::Result<ExitCode> {
    let reader = Arc::new(Mutex::new(LineReader::new(chat.home.history_path())));
    // MCP servers' elicitations are asked through the same reader from now on.
    let _ = chat.elicit_reader.set(Arc::clone(&reader));
    let inner: Arc<dyn Approver> = if yolo {
        Arc::new(AllowAll)
    } else {
        Arc::new(TerminalApprover {
            reader: reader.clone(),
        })
    };
    let home = chat.home.clone();
    let approver: Arc<dyn Approver> =
        Arc::new(allowlisted(chat, inner).with_persist(Box::new(move |cmd| {
            tern_config::add_to_allowlist(&home, cmd).map_err(Into::into)
        })));
    let style = Style::detect(true, chat.verbose);
    eprintln!(
        "tern {} · model {} · {}\n{}",
        env!("CARGO_PKG_VERSION"),
        chat.model,
        match &session {
            Some(s) => format!("session {}", s.id),
            None => "new session".to_owned(),
        },
        style.dim("Type a message; /help for commands; Ctrl-C stops a turn; Ctrl-D quits.")
    );
    let mut state = Repl {
        session,
        pending_title: None,
        last_input: None,
        approver,
        style,
    };
    loop {
        let r = reader.clone();
        let read = tokio::task::spawn_blocking(move || {
            r.lock().unwrap_or_else(|e| e.into_inner()).read("› ")
        })
        .await?;
        let line = match read {
            Input::Eof => break,
            Input::Interrupted => {
                eprintln!("{}", style.dim("(Ctrl-D or /exit quits)"));
                continue;
            }
            Input::Line(l) => l,
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line.starts_with('/') {
            match parse_command(line) {
                Some((cmd, arg)) => {
                    if !state.command(chat, cmd, arg).await? {
                        break;
                    }
                }
                None => {
                    let word = line.split_whitespace().next().unwrap_or(line);
                    eprintln!("unknown command {word}; /help lists the commands");
                }
            }
            continue;
        }
        state.send(chat, line.to_owned(), false).await?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_completion_and_dispatch_share_one_table() {
        let help = help_text();
        for c in COMMANDS {
            assert_eq!(parse_command(c.name).map(|(cmd, _)| cmd), Some(c.cmd));
            assert!(help.contains(c.name), "{} missing from /help", c.name);
            assert!(
                complete_command(c.name)
                    .iter()
                    .any(|n| n.trim_end() == c.name),
                "{} does not complete",
                c.name
            );
        }
        // /help lists nothing else.
        let listed = help.lines().filter(|l| l.starts_with("  /")).count();
        assert_eq!(listed, COMMANDS.len(), "{help}");
        assert_eq!(parse_command("/bogus"), None);
        assert_eq!(parse_command("/quit"), Some((Cmd::Exit, "")));
        assert_eq!(
            parse_command("/title  Release notes "),
            Some((Cmd::Title, "Release notes"))
        );
        assert_eq!(complete_command("/re"), vec!["/resume ", "/retry"]);
        assert_eq!(complete_command("/sess"), vec!["/sessions", "/session"]);
    }
}
