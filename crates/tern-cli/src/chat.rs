//! `tern chat`: one turn with `-q`, or an interactive session.
//!
//! Flow: pick the session (`--session`, `--continue`, or a new one) → build the approver
//! (interactive: ask at the terminal; `-q`: deny unless `--yolo`; the allowlist applies to
//! both) → run turns; Ctrl-C (and SIGTERM) cancels the running turn's token, so the turn
//! stops cleanly and the program goes on (interactive) or exits 130 (`-q`).

use std::io::Read as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, anyhow, bail};
use rustyline::error::ReadlineError;
use tern_agent::{Agent, AgentError, Interrupt, StopReason, TurnOutcome, TurnRequest, TurnStatus};
use tern_config::{Effective, Home};
use tern_store::{NewSession, Session, Store};
use tern_tools::approval::Grants;
use tern_tools::{AllowAll, Approver, DenyAll};

use crate::approve::TerminalApprover;
use crate::args::ChatArgs;
use crate::context;
use crate::render::{self, Style};

/// What reading a line gave.
pub enum Input {
    Line(String),
    Interrupted,
    Eof,
}

/// Line editing with a history file; plain line reads when stdin is not a terminal.
pub struct LineReader {
    editor: Option<rustyline::DefaultEditor>,
    history: PathBuf,
}

impl LineReader {
    pub fn new(history: PathBuf) -> Self {
        let editor = rustyline::DefaultEditor::new().ok().map(|mut e| {
            let _ = e.load_history(&history);
            e
        });
        Self { editor, history }
    }

    pub fn read(&mut self, prompt: &str) -> Input {
        match &mut self.editor {
            Some(e) => match e.readline(prompt) {
                Ok(line) => {
                    if !line.trim().is_empty() {
                        let _ = e.add_history_entry(line.as_str());
                        let _ = e.append_history(&self.history);
                    }
                    Input::Line(line)
                }
                Err(ReadlineError::Interrupted) => Input::Interrupted,
                Err(_) => Input::Eof,
            },
            None => {
                let mut line = String::new();
                match std::io::stdin().read_line(&mut line) {
                    Ok(0) | Err(_) => Input::Eof,
                    Ok(_) => Input::Line(line.trim_end_matches(['\n', '\r']).to_owned()),
                }
            }
        }
    }

    /// A line, or `None` on Ctrl-C / end of input.
    pub fn read_line(&mut self, prompt: &str) -> Option<String> {
        match self.read(prompt) {
            Input::Line(l) => Some(l),
            Input::Interrupted | Input::Eof => None,
        }
    }
}

struct Chat {
    home: Home,
    eff: Effective,
    agent: Agent,
    workdir: PathBuf,
    toolsets: Vec<String>,
    model: Option<String>,
}

impl Chat {
    fn store(&self) -> &Store {
        self.agent.store()
    }

    async fn new_session(&self) -> anyhow::Result<Session> {
        let s = self
            .store()
            .create_session(NewSession {
                source: "cli".into(),
                model: self.model.clone(),
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

    /// Runs a turn; Ctrl-C or SIGTERM cancels it.
    async fn turn(
        &self,
        session: &str,
        input: String,
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
                input_appended: false,
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
        tern_hooks::HookBus::from_config(&eff.config.hooks, &eff.config.webhooks)
            .context("in the [[hooks]] or [[webhooks]] configuration")?,
    );
    let agent = context::build_agent(&home, &eff, store)?.with_hooks(hooks.clone());
    context::announce_sandbox(&agent.settings().limits.sandbox, true);
    let workdir = match &args.workdir {
        Some(w) => w.clone(),
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let workdir = std::fs::canonicalize(&workdir)
        .with_context(|| format!("working directory {}", workdir.display()))?;
    let toolsets = args
        .toolsets
        .clone()
        .unwrap_or_else(|| eff.config.agent.toolsets.clone())
        .into_iter()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>();
    if let Some(bad) = agent.registry().unknown_toolsets(&toolsets).first() {
        bail!(
            "unknown toolset `{bad}`; known toolsets: {}",
            agent.registry().toolsets().join(", ")
        );
    }
    let chat = Chat {
        home,
        eff,
        agent,
        workdir,
        toolsets,
        model: Some(resolved.name.clone()),
    };

    let session = if let Some(id) = &args.session {
        chat.store()
            .resolve_session(id)
            .await
            .map_err(|e| anyhow!("{e} (see `tern sessions list`)"))?
    } else if args.continue_latest {
        chat.store().latest_session().await?.ok_or_else(|| {
            anyhow!("there is no session to continue yet; start one with `tern chat`")
        })?
    } else {
        chat.new_session().await?
    };

    let code = match args.query.clone() {
        Some(q) => one_shot(&chat, &session, q, args.yolo).await,
        None => repl(&chat, session, args.yolo).await,
    };
    // Deliveries still under way (command hooks, webhooks) finish before the process exits.
    hooks.flush(std::time::Duration::from_secs(10)).await;
    code
}

fn allowlisted(chat: &Chat, inner: Arc<dyn Approver>) -> Grants {
    Grants::new(inner, chat.eff.config.approvals.allowlist.clone())
}

async fn one_shot(
    chat: &Chat,
    session: &Session,
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
    let style = Style::detect(false);
    eprintln!("{}", style.dim(&format!("session {}", session.id)));
    let outcome = chat.turn(&session.id, input, approver, style).await?;
    Ok(match outcome.status {
        TurnStatus::Completed => {
            println!("{}", outcome.text.unwrap_or_default());
            ExitCode::SUCCESS
        }
        TurnStatus::MaxIterations => {
            eprintln!("error: {}", outcome.text.unwrap_or_default());
            ExitCode::FAILURE
        }
        TurnStatus::Interrupted => {
            eprintln!(
                "interrupted; the session is kept and can be continued with --session {}",
                session.id
            );
            ExitCode::from(crate::EXIT_INTERRUPTED)
        }
    })
}

const HELP: &str = "\
Commands:
  /new        start a new session
  /stop       (a running turn is stopped with Ctrl-C)
  /sessions   list recent sessions
  /session    show the current session's id
  /help       this help
  /exit       quit (or Ctrl-D)
Anything else is sent to the agent. Ctrl-C stops a running turn and keeps the session.";

async fn repl(chat: &Chat, mut session: Session, yolo: bool) -> anyhow::Result<ExitCode> {
    let reader = Arc::new(Mutex::new(LineReader::new(chat.home.history_path())));
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
    let style = Style::detect(true);
    eprintln!(
        "tern {} · model {} · session {}\n{}",
        env!("CARGO_PKG_VERSION"),
        chat.model.as_deref().unwrap_or("?"),
        session.id,
        style.dim("Type a message; /help for commands; Ctrl-C stops a turn; Ctrl-D quits.")
    );
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
            match line {
                "/exit" | "/quit" => break,
                "/help" => eprintln!("{HELP}"),
                "/stop" => eprintln!("No turn is running; press Ctrl-C while one runs to stop it."),
                "/session" => eprintln!("session {}", session.id),
                "/new" => {
                    session = chat.new_session().await?;
                    eprintln!("new session {}", session.id);
                }
                "/sessions" => {
                    for s in chat.store().list_sessions(10, 0).await? {
                        let mark = if s.id == session.id { "*" } else { " " };
                        eprintln!(
                            "{mark} {}  {}  {}",
                            s.id,
                            crate::sessions::when(s.updated_at),
                            s.title.as_deref().unwrap_or("(untitled)")
                        );
                    }
                }
                other => eprintln!("unknown command {other}; /help lists the commands"),
            }
            continue;
        }
        match chat
            .turn(&session.id, line.to_owned(), approver.clone(), style)
            .await
        {
            Ok(o) => match o.status {
                TurnStatus::Completed => {}
                TurnStatus::MaxIterations => {
                    eprintln!("{}", style.yellow(&o.text.unwrap_or_default()));
                }
                TurnStatus::Interrupted => eprintln!("{}", style.yellow("[interrupted]")),
            },
            Err(e) => eprintln!("{} {e}", style.red("error:")),
        }
    }
    Ok(ExitCode::SUCCESS)
}
