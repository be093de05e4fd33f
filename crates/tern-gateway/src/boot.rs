//! The gateway as a library: [`GatewayBuilder`] makes a whole gateway from tern's home and
//! configuration and serves it; [`GatewayHandle`] stops it. `tern gateway` is a thin caller,
//! and tests boot the same gateway in-process.
//!
//! Flow of [`GatewayBuilder::start`]: open the store (repair the transcripts of sessions an
//! earlier process left mid-turn, then reset their status) → the inbox (default project,
//! `[[inbox.projects]]`, policy, notifications) → the hook bus → the API keys (first start:
//! an admin key written to `gateway.key`) → bind → the admin reviewer and `inbox-admin.json`
//! → durable waits (this inbox, or `[inbox] url`) and the approver of dangerous commands →
//! the tools, the MCP servers (`[mcp_servers]`, started at once; their tools in toolsets
//! `mcp:NAME`), background processes (live supervisors adopted) and the agent → the gateway,
//! whole → its upkeep → the server.
//!
//! [`GatewayHandle::shutdown`]: refuse new turns, drain running ones within the drain timeout
//! and interrupt the rest → stop the server (open connections get 5 s) → stop and join every
//! upkeep task → close the MCP servers → flush the hooks → close the store. Background
//! processes are not stopped:
//! their supervisors outlive the gateway.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tern_config::{Effective, Home};
use tern_hooks::HookBus;
use tern_store::Store;
use tern_tools::approval::Grants;
use tern_tools::{Approver, DenyAll};
use tern_waits::client::{EmbeddedInbox, InboxClient};
use tern_waits::command::InboxApprover;
use tern_waits::remote::{RemoteFollower, RemoteInbox};
use tern_waits::tools::InboxTools;
use tokio_util::sync::CancellationToken;

use crate::admin_file::{self, AdminFileError};
use crate::{
    Authenticator, Gateway, GatewayParts, GatewaySettings, InboxSettings, Serve, Upkeep,
    WaitsSetup, auth,
};

/// How long upkeep tasks get to end after the stop before shutdown gives up on them.
const UPKEEP_JOIN: Duration = Duration::from_secs(10);
/// How long open connections get once the server stops accepting.
const CONNECTIONS_CLOSE: Duration = Duration::from_secs(5);

/// Why a gateway did not start.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error(transparent)]
    Home(#[from] tern_config::ConfigError),
    #[error("opening the session store {path}: {source}")]
    OpenStore {
        path: PathBuf,
        source: tern_store::StoreError,
    },
    #[error("the session store: {0}")]
    Store(#[from] tern_store::StoreError),
    #[error("the inbox: {0}")]
    Inbox(#[from] tern_inbox::InboxError),
    #[error("in the [inbox.policy] configuration: {0}")]
    Policy(#[from] tern_inbox::policy::PolicyError),
    #[error("in the [inbox] configuration: {0}")]
    InboxConfig(String),
    #[error("the remote inbox: {0}")]
    RemoteInbox(#[from] tern_waits::client::ClientError),
    #[error("in the [[hooks]] or [[webhooks]] configuration: {0}")]
    Hooks(#[from] tern_hooks::HookError),
    #[error("the API keys: {0}")]
    Keys(#[from] auth::KeyError),
    #[error("cannot listen on {addr} (in use? choose another with --listen): {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Admin(#[from] AdminFileError),
    #[error("background processes in {path}: {source}")]
    Procs {
        path: PathBuf,
        source: tern_procs::ProcError,
    },
    #[error("the agent: {0}")]
    Agent(#[from] tern_agent::from_config::FromConfigError),
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
}

/// Makes a gateway from a home and its configuration (see the module docs).
pub struct GatewayBuilder {
    home: Home,
    eff: Effective,
    listen: Option<String>,
    serve: Serve,
    server_key: Option<String>,
    workdir: Option<PathBuf>,
    supervisor: Option<tern_procs::SupervisorCommand>,
    clock: Option<Arc<dyn tern_cron::Clock>>,
}

/// A gateway that is serving, and what its start has to tell a person.
pub struct Started {
    pub handle: GatewayHandle,
    /// The file the first API key was written to, when this start created it.
    pub created_key: Option<PathBuf>,
    /// Admin's one-time login link while admin has never logged in: a credential, for the
    /// terminal only.
    pub admin_login: Option<String>,
    /// Where people open the web inbox (`[inbox] public_url`, else this gateway's address).
    pub inbox_url: String,
}

impl GatewayBuilder {
    /// A gateway on `home` with the configuration `eff`, listening where `[gateway] listen`
    /// says, serving everything.
    pub fn new(home: Home, eff: Effective) -> Self {
        GatewayBuilder {
            home,
            eff,
            listen: None,
            serve: Serve::Everything,
            server_key: None,
            workdir: None,
            supervisor: None,
            clock: None,
        }
    }

    /// Listens on `addr` instead of `[gateway] listen` (`127.0.0.1:0`: any free port).
    pub fn listen(mut self, addr: impl Into<String>) -> Self {
        self.listen = Some(addr.into());
        self
    }

    /// What to serve ([`Serve::InboxOnly`]: the human inbox alone, no agent).
    pub fn serve(mut self, serve: Serve) -> Self {
        self.serve = serve;
        self
    }

    /// A key accepted besides the stored ones (`TERN_SERVER_KEY`); no first key is created.
    pub fn server_key(mut self, key: Option<String>) -> Self {
        self.server_key = key.filter(|k| !k.is_empty());
        self
    }

    /// The tools' working directory (default: the current directory).
    pub fn workdir(mut self, dir: PathBuf) -> Self {
        self.workdir = Some(dir);
        self
    }

    /// How background processes' supervisors are started (default: this executable's
    /// `supervise` subcommand, as `tern` has it).
    pub fn supervisor(mut self, cmd: tern_procs::SupervisorCommand) -> Self {
        self.supervisor = Some(cmd);
        self
    }

    /// The clock scheduled jobs read (default: the wall clock); tests pass a
    /// `tern_cron::ManualClock` so that no test waits for real minutes.
    pub fn clock(mut self, clock: Arc<dyn tern_cron::Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Makes the gateway and serves it (see the module docs).
    pub async fn start(self) -> Result<Started, BootError> {
        let GatewayBuilder {
            home,
            eff,
            listen,
            serve,
            server_key,
            workdir,
            supervisor,
            clock,
        } = self;
        let inbox_only = serve == Serve::InboxOnly;
        // Before anything runs a command (a resumed turn, also in an inbox-only gateway on a
        // home with waiting sessions): this process's /proc files unreadable to them.
        if let Err(e) = tern_sandbox::harden_current_process() {
            tracing::warn!(error = %e, "cannot make this process undumpable; the agent's commands may read its environment through /proc");
        }
        home.ensure()?;
        let store = open_store(&home).await?;
        let inbox = tern_inbox::Inbox::new(store.clone());
        inbox.ensure_default_project().await?;
        inbox
            .apply_config_projects(&eff.config.inbox.projects)
            .await?;
        let hooks = Arc::new(HookBus::from_config(
            &eff.config.hooks,
            &eff.config.webhooks,
        )?);
        let model = match eff.resolved_model() {
            Ok(m) => m.name,
            Err(_) if inbox_only => String::new(),
            Err(e) => {
                tracing::warn!("{e}; turns will fail until a model is configured");
                String::new()
            }
        };
        let authenticator = Authenticator::new(store.clone(), server_key.as_deref())?;
        let created_key = auth::ensure_first_key(&store, &home.root, server_key.is_some()).await?;
        if let Some(path) = &created_key {
            tracing::info!(path = %path.display(), "no API key existed: created an admin key named `default`; it is in this file (mode 0600)");
        }

        let g = &eff.config.gateway;
        let listen = listen.unwrap_or_else(|| g.listen.clone());
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .map_err(|source| BootError::Bind {
                addr: listen.clone(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| BootError::Io {
            what: "reading the bound address",
            source,
        })?;
        let inbox_config = &eff.config.inbox;
        // The admin reviewer and the local admin credential; login links use the
        // configured address, else the bound one.
        let local_url = admin_file::local_url(addr);
        let link_base = inbox_config.public_url.as_deref().unwrap_or(&local_url);
        let admin_login = admin_file::prepare_admin(&home, &store, link_base, &local_url).await?;
        let inbox_url = format!("{}/inbox", link_base.trim_end_matches('/'));
        let inbox = configure_inbox(inbox, &eff, addr)?;

        let waits = wire_waits(&home, &eff, &store, &inbox, &hooks, inbox_only).await?;

        let mut registry = tern_tools::Registry::builtin();
        tern_waits::tools::register(&mut registry, waits.tools.clone());
        // `todo`, `memory` (an API key's sessions keep a memory of their own) and
        // `session_search` (the same key's other sessions).
        tern_session_tools::register(&mut registry, store.clone(), &home.root, &eff.config.memory);
        // Chat channels (`[[channels.*]]`) and their `send_file`.
        let channels = if inbox_only {
            None
        } else {
            crate::channels::from_config(&home, &eff.config.channels, &store).await
        };
        if channels.is_some() {
            tern_channels::tools::register(&mut registry, store.clone(), &home.root);
        }
        // Background processes (`terminal` with `background: true`, `process`): supervised
        // apart from this process, so they outlive it; every live one is adopted here.
        let procs = if inbox_only {
            None
        } else {
            let manager = open_procs(&home, &eff, supervisor).await?;
            // `notify_on_complete`: armed as a durable wait before the tool answers.
            let notifier = Arc::new(tern_waits::process::ProcessWaits::new(store.clone()));
            tern_procs::tools::register_with(&mut registry, manager.clone(), Some(notifier));
            Some((manager, eff.config.processes.keep_finished()))
        };
        // Scheduled jobs: the scheduler is made here, before the agent, since the `cronjob`
        // tool holds it; its runs go through the gateway it is given to.
        let cron = cron_setup(&eff, &store, clock, inbox_only)?;
        // The `cronjob` tool only when the configuration lets agents schedule, and not
        // where the scheduler is off (its runs would never come).
        if eff.config.cron.allow_agent_scheduling && eff.config.cron.enabled && !inbox_only {
            tern_cron::tools::register(
                &mut registry,
                tern_cron::tools::CronTools::new(
                    cron.scheduler.clone(),
                    store.clone(),
                    cron.tz.clone(),
                    eff.config.cron.max_jobs_per_session,
                    eff.config.cron.allow_runs_to_schedule,
                ),
            );
        }
        let workdir = match workdir {
            Some(d) => d,
            None => std::env::current_dir().map_err(|source| BootError::Io {
                what: "reading the current directory",
                source,
            })?,
        };
        // MCP servers: all started at once; one that fails is reported, the rest work. Its
        // stdio servers run in the agent's sandbox unless they say otherwise.
        let mcp = if inbox_only {
            tern_mcp::McpManager::empty()
        } else {
            // A server's elicitations are asked in the inbox, in the calling session's task.
            let elicitor = crate::mcp_elicit::InboxElicitor::for_gateway(
                Arc::clone(&waits.client),
                &waits.tools.project,
                waits.remote.is_none().then(|| inbox.clone()),
            );
            // Recorded for the chat channels, which post a chat session's questions. Those an
            // earlier process waited for died with its tool calls: withdrawn.
            let n = elicitor.withdraw_abandoned(&store).await;
            if n > 0 {
                tracing::info!(
                    questions = n,
                    "MCP elicitations an earlier process asked are withdrawn: their tool calls are gone"
                );
            }
            let elicitor = elicitor.with_store(store.clone());
            let mut options = tern_mcp::ClientOptions::default().with_elicitor(Arc::new(elicitor));
            options.sandbox = Some(tern_mcp::ServerSandbox {
                sandbox: Arc::new(tern_agent::from_config::sandbox(&home, &eff)),
                workspace: workdir.clone(),
            });
            tern_mcp::McpManager::start(&eff.config.mcp_servers, options).await
        };
        mcp.register(&mut registry);
        let agent = Arc::new(
            tern_agent::from_config::agent(&home, &eff, store.clone(), registry)?
                .with_hooks(hooks.clone()),
        );
        let gw = Gateway::from_parts(GatewayParts {
            agent,
            auth: authenticator,
            approver: waits.approver.clone(),
            settings: GatewaySettings {
                max_concurrent_turns: g.max_concurrent_turns,
                max_body_bytes: g.max_body_bytes,
                drain_timeout: Duration::from_secs(g.drain_timeout_secs),
                workdir,
                toolsets: {
                    let mut t = mcp.expand_toolsets(&gateway_toolsets(&eff));
                    if channels.is_some() && !t.iter().any(|x| x == tern_channels::tools::TOOLSET) {
                        t.push(tern_channels::tools::TOOLSET.to_owned());
                    }
                    if eff.config.cron.allow_agent_scheduling
                        && eff.config.cron.enabled
                        && !inbox_only
                        && !t.iter().any(|x| x == crate::cron::CRON_TOOLSET)
                    {
                        t.push(crate::cron::CRON_TOOLSET.to_owned());
                    }
                    t
                },
                model,
            },
            inbox,
            inbox_settings: InboxSettings {
                uploads_dir: Some(home.root.join("uploads")),
                max_upload_bytes: inbox_config.max_upload_bytes,
                public_url: inbox_config.public_url.clone(),
            },
            waits: Some(WaitsSetup {
                client: waits.client.clone(),
                tools: Some(waits.tools.clone()),
                follow_embedded: waits.remote.is_none(),
                keep_on_reset: inbox_config.keep_waits_on_reset,
                command_hook: waits
                    .command_approver
                    .clone()
                    .map(tern_waits::command::resume_hook),
                wakeup: waits.wakeup.clone(),
            }),
            procs,
            idle_reset: eff.config.gateway.idle_reset(),
            local_addr: Some(addr),
            channels,
            cron: Some(cron),
            mcp,
        });

        let upkeep = gw.spawn_upkeep(CancellationToken::new());
        waits.start(&gw, &store, &hooks, &upkeep);
        let app = match serve {
            Serve::InboxOnly => {
                tracing::info!("serving the human inbox only (--inbox-only)");
                gw.router_for(Serve::InboxOnly)
            }
            Serve::Everything => gw.router(),
        };
        let server_stop = CancellationToken::new();
        let server = tokio::spawn(
            axum::serve(listener, app)
                .with_graceful_shutdown(server_stop.clone().cancelled_owned())
                .into_future(),
        );
        Ok(Started {
            handle: GatewayHandle {
                gateway: gw,
                addr,
                stop: CancellationToken::new(),
                upkeep,
                server,
                server_stop,
                hooks,
                store,
            },
            created_key,
            admin_login,
            inbox_url,
        })
    }
}

/// The inbox's policy and notifications from `[inbox]`; notification links need an address
/// others can open: the configured one, else the bound one (`localhost` for a wildcard bind).
fn configure_inbox(
    inbox: tern_inbox::Inbox,
    eff: &Effective,
    addr: SocketAddr,
) -> Result<tern_inbox::Inbox, BootError> {
    let inbox_config = &eff.config.inbox;
    let public_url = match &inbox_config.public_url {
        Some(url) => url.clone(),
        None if addr.ip().is_unspecified() => format!("http://localhost:{}", addr.port()),
        None => format!("http://{addr}"),
    };
    let policy = tern_inbox::policy::Policy::from_config(&inbox_config.policy)?;
    let targets = inbox_config
        .notify
        .iter()
        .map(tern_inbox::notify::NotifyTarget::from_config)
        .collect();
    Ok(inbox
        .with_policy(policy)
        .with_notifications(tern_inbox::notify::Notifications::new(targets, &public_url)))
}

/// Which inbox durable waits use, the `inbox` tools on it, and who approves dangerous
/// commands.
struct Waits {
    /// `[inbox] url`: a remote inbox, followed over outbound connections only.
    remote: Option<(tern_config::RemoteInboxConfig, Arc<RemoteInbox>)>,
    client: Arc<dyn InboxClient>,
    tools: Arc<InboxTools>,
    /// Wakes the gateway's resumer (see `WaitsSetup::wakeup`).
    wakeup: tern_waits::resume::Wakeup,
    /// Asks the inbox about dangerous commands (none in an inbox-only gateway).
    command_approver: Option<Arc<InboxApprover>>,
    approver: Arc<dyn Approver>,
}

/// Durable waits use this gateway's own inbox: the `inbox` tools create requests in it (with
/// its policy and notifications) and the embedded follower hears its decisions. With `[inbox]
/// url` they use that inbox instead (tern_waits::remote). Dangerous commands go to the inbox
/// for approval, with durable grants (tern_waits::command); an inbox-only gateway runs no
/// agent: nothing to approve.
async fn wire_waits(
    home: &Home,
    eff: &Effective,
    store: &Store,
    inbox: &tern_inbox::Inbox,
    hooks: &Arc<HookBus>,
    inbox_only: bool,
) -> Result<Waits, BootError> {
    let inbox_config = &eff.config.inbox;
    let remote = match inbox_config.remote().map_err(BootError::InboxConfig)? {
        Some(r) => {
            let client = Arc::new(RemoteInbox::new(&r.url, &r.key)?);
            Some((r, client))
        }
        None => None,
    };
    let client: Arc<dyn InboxClient> = match &remote {
        Some((_, r)) => r.clone(),
        None => Arc::new(EmbeddedInbox::new(inbox.clone()).with_uploads(
            tern_inbox::uploads::UploadDir::new(home.root.join("uploads")),
            inbox_config.max_upload_bytes,
        )),
    };
    // What a request decided inside its create (an auto-approve policy) wakes: the resumer
    // the gateway is made with.
    let wakeup = tern_waits::resume::Wakeup::default();
    let tools = Arc::new(
        InboxTools::new(store.clone(), client.clone(), hooks.clone()).with_wakeup(wakeup.clone()),
    );
    let allowlist = eff.config.approvals.allowlist.clone();
    let command_approver = (!inbox_only).then(|| {
        Arc::new(
            InboxApprover::new(store.clone(), client.clone(), allowlist.clone())
                .with_hooks(hooks.clone())
                .with_home(home.clone())
                .with_wakeup(wakeup.clone()),
        )
    });
    let approver: Arc<dyn Approver> = match &command_approver {
        Some(a) => {
            // `always` approvals recorded while the config file could not be written.
            if let Err(e) = a.sync_allowlist().await {
                tracing::warn!(error = %e, "cannot read the always-approved commands");
            }
            a.clone()
        }
        None => Arc::new(Grants::new(
            Arc::new(DenyAll {
                reason: "nobody sits at a terminal in the gateway; allowlist the command in \
                         config.toml or allow it with a pre_tool_call hook"
                    .into(),
            }),
            allowlist,
        )),
    };
    Ok(Waits {
        remote,
        client,
        tools,
        wakeup,
        command_approver,
        approver,
    })
}

impl Waits {
    /// Once the gateway and its upkeep exist: a remote inbox is followed (not by an
    /// inbox-only gateway: no agent asks there).
    fn start(self, gw: &Arc<Gateway>, store: &Store, hooks: &Arc<HookBus>, upkeep: &Upkeep) {
        if self.command_approver.is_some()
            && let Some((r, client)) = self.remote
        {
            upkeep.track(
                RemoteFollower::new(
                    store.clone(),
                    client,
                    hooks.clone(),
                    gw.resumer(),
                    r.poll_interval,
                )
                .spawn(upkeep.stop_token().clone()),
            );
            tracing::info!(inbox = %r.url, "durable waits use a remote inbox (outbound connections only)");
        }
    }
}

/// Opens the store this gateway owns: a session still `running` was left by a process that
/// died mid-turn. Its transcript is made valid now — not at its next turn, which may be days
/// away while clients read it — then its status follows its open waits.
async fn open_store(home: &Home) -> Result<Store, BootError> {
    let path = home.db_path();
    let store = Store::open(&path)
        .await
        .map_err(|source| BootError::OpenStore { path, source })?;
    let repaired = store.repair_running_transcripts().await?;
    if !repaired.is_empty() {
        tracing::warn!(
            sessions = repaired.len(),
            ids = ?repaired,
            "transcripts left mid-turn by an earlier process were repaired"
        );
    }
    let reset = store.reset_running().await?;
    if reset > 0 {
        tracing::warn!(
            sessions = reset,
            "sessions left running by an earlier process are idle (or waiting) again"
        );
    }
    Ok(store)
}

/// The process manager on `$TERN_HOME/procs`, from `[processes]`.
async fn open_procs(
    home: &Home,
    eff: &Effective,
    supervisor: Option<tern_procs::SupervisorCommand>,
) -> Result<Arc<tern_procs::ProcessManager>, BootError> {
    let dir = home.root.join("procs");
    let in_dir = |source| BootError::Procs {
        path: dir.clone(),
        source,
    };
    let supervisor = match supervisor {
        Some(s) => s,
        None => tern_procs::SupervisorCommand::current_exe().map_err(in_dir)?,
    };
    let p = &eff.config.processes;
    let mut cfg = tern_procs::ManagerConfig::new(dir.clone(), supervisor);
    cfg.max_running = p.max_running;
    cfg.log_max_bytes = p.log_max_bytes;
    cfg.backend = procs_backend(p);
    if let tern_procs::Backend::Ssh(t) = &cfg.backend {
        tracing::info!(host = %t.display(), "background processes run over ssh");
    }
    cfg.watch_interval = p.watch_interval();
    let manager = tern_procs::ProcessManager::open(cfg)
        .await
        .map_err(in_dir)?;
    Ok(Arc::new(manager))
}

/// `[processes] backend` and `[processes.ssh]` for the process manager (checked when the
/// configuration was loaded; the manager checks the target again when it opens).
fn procs_backend(p: &tern_config::ProcessesConfig) -> tern_procs::Backend {
    match (p.backend, &p.ssh) {
        (tern_config::ProcessBackend::Ssh, Some(s)) => {
            tern_procs::Backend::Ssh(tern_procs::ssh::SshTarget {
                host: s.host.clone().unwrap_or_default(),
                user: s.user.clone(),
                // Checked to be 1..=65535 when the configuration was loaded.
                port: s.port.and_then(|p| u16::try_from(p).ok()),
                identity_file: s.identity_file.as_ref().map(PathBuf::from),
                options: s.options.clone(),
                workdir: s.workdir.clone(),
            })
        }
        _ => tern_procs::Backend::Local,
    }
}

/// The gateway's toolsets: `[agent] toolsets`, plus `inbox` and `mcp` (every MCP server's
/// tools) while that key is left at its default — the gateway is where agents ask humans and
/// are resumed. A user who sets `toolsets` chooses exactly: list `inbox`, `mcp` or
/// `mcp:NAME` there to keep them, leave them out to go without. (`tern chat` and `tern ask`
/// have no resumer, so they never offer `inbox`.)
pub fn gateway_toolsets(eff: &Effective) -> Vec<String> {
    let mut toolsets = eff.config.agent.toolsets.clone();
    if eff.source("agent.toolsets") == tern_config::Source::Default {
        for extra in [tern_waits::tools::TOOLSET, tern_mcp::TOOLSET_ALL] {
            if !toolsets.iter().any(|t| t == extra) {
                toolsets.push(extra.to_owned());
            }
        }
    }
    toolsets
}

/// A serving gateway. Dropping it leaves the server and upkeep running until the runtime
/// ends; [`GatewayHandle::shutdown`] stops them in order and joins them.
pub struct GatewayHandle {
    gateway: Arc<Gateway>,
    addr: SocketAddr,
    stop: CancellationToken,
    upkeep: Upkeep,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    server_stop: CancellationToken,
    hooks: Arc<HookBus>,
    store: Store,
}

/// What did not end in time during [`GatewayHandle::shutdown`]; the store is closed anyway.
#[derive(Debug, thiserror::Error)]
pub enum ShutdownError {
    #[error("connections still open {0:?} after the server stopped accepting")]
    Connections(Duration),
    #[error(transparent)]
    Upkeep(#[from] crate::UpkeepStuck),
}

impl GatewayHandle {
    /// The address the server is bound to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR` (a wildcard address through loopback).
    pub fn url(&self) -> String {
        admin_file::local_url(self.addr)
    }

    /// The gateway being served.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// A token whose cancellation asks for a shutdown (a signal handler holds it);
    /// [`GatewayHandle::stopped`] waits for it.
    pub fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Resolves once the stop token is cancelled.
    pub async fn stopped(&self) {
        self.stop.cancelled().await;
    }

    /// Stops the gateway in order and joins everything it started (see the module docs).
    pub async fn shutdown(self) -> Result<(), ShutdownError> {
        self.stop.cancel();
        self.gateway.drain().await;
        self.server_stop.cancel();
        let mut outcome = Ok(());
        // Streams end with their turns; give connections a moment to close, then go.
        match tokio::time::timeout(CONNECTIONS_CLOSE, self.server).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::error!(error = %e, "the server failed"),
            Ok(Err(e)) => tracing::error!(error = %e, "the server's task failed"),
            Err(_) => {
                tracing::warn!("connections still open after 5 s; stopping anyway");
                outcome = Err(ShutdownError::Connections(CONNECTIONS_CLOSE));
            }
        }
        if let Err(e) = self.upkeep.stop_and_join(UPKEEP_JOIN).await {
            tracing::error!(error = %e, "upkeep did not end");
            if outcome.is_ok() {
                outcome = Err(e.into());
            }
        }
        // No turn runs any more: no tool call needs the MCP servers.
        self.gateway.mcp.shutdown().await;
        self.hooks.flush(CONNECTIONS_CLOSE).await;
        // The last reference to the gateway's parts may be held by a task that did not end:
        // closing the pool waits for its connections, so the store is closed last.
        drop(self.gateway);
        self.store.close().await;
        tracing::info!("stopped");
        outcome
    }
}

/// The scheduler of `[cron]`: its zone (`timezone`, else the machine's) and clock.
fn cron_setup(
    eff: &Effective,
    store: &Store,
    clock: Option<Arc<dyn tern_cron::Clock>>,
    inbox_only: bool,
) -> Result<crate::cron::CronSetup, BootError> {
    let c = &eff.config.cron;
    let tz = match &c.timezone {
        Some(name) => jiff::tz::TimeZone::get(name).map_err(|e| {
            BootError::Home(tern_config::ConfigError::Invalid(format!(
                "cron.timezone {name:?} is not a time zone this machine knows: {e}"
            )))
        })?,
        None => jiff::tz::TimeZone::system(),
    };
    Ok(crate::cron::CronSetup::new(
        store.clone(),
        clock.unwrap_or_else(|| Arc::new(tern_cron::SystemClock)),
        tz,
        // An inbox-only gateway runs no agents, so no jobs either.
        c.enabled && !inbox_only,
        c.allow_runs_to_schedule,
    ))
}
