//! `tern gateway` and `tern keys`.
//!
//! Flow of `tern gateway`: load the configuration → log to stderr → open the store (repair
//! the transcripts of sessions an earlier process left mid-turn, then reset their status) → build
//! the hook bus and the agent → make sure a key exists (first start: create one, write it to
//! `$TERN_HOME/gateway.key` mode 0600, print the path) → bind and serve → on SIGTERM or
//! SIGINT stop accepting work, drain running turns within the drain timeout, interrupt the
//! rest, and exit once they have recorded their interruption. `--inbox-only` serves the
//! human inbox alone (no model needed). Background processes are opened on
//! `$TERN_HOME/procs` before serving (live supervisors re-adopted); they are not stopped
//! with the gateway.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tern_gateway::{
    Authenticator, Gateway, GatewaySettings, InboxSettings, Serve, WaitsSetup, auth,
};
use tern_tools::approval::Grants;
use tern_tools::{Approver, DenyAll};
use tern_waits::client::{EmbeddedInbox, InboxClient};
use tern_waits::command::InboxApprover;
use tern_waits::remote::{RemoteFollower, RemoteInbox};
use tern_waits::tools::InboxTools;
use tokio_util::sync::CancellationToken;

use crate::args::{GatewayArgs, KeysCommand, LogFormat};
use crate::context;

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

/// The gateway's toolsets: `[agent] toolsets`, plus `inbox` while that key is left at its
/// default — the gateway is where agents ask humans and are resumed. A user who sets
/// `toolsets` chooses exactly: list `inbox` there to keep it, leave it out to go without.
/// (`tern chat` and `tern ask` have no resumer, so they never offer it.)
fn gateway_toolsets(eff: &tern_config::Effective) -> Vec<String> {
    let mut toolsets = eff.config.agent.toolsets.clone();
    if eff.source("agent.toolsets") == tern_config::Source::Default
        && !toolsets.iter().any(|t| t == tern_waits::tools::TOOLSET)
    {
        toolsets.push(tern_waits::tools::TOOLSET.to_owned());
    }
    toolsets
}

pub async fn run(home: Option<PathBuf>, args: GatewayArgs) -> anyhow::Result<ExitCode> {
    tune_allocator();
    let (home, eff) = context::load_config(home)?;
    init_stderr_logging(args.log_format);
    home.ensure()?;
    let store = tern_store::Store::open(&home.db_path())
        .await
        .with_context(|| format!("opening the session store {}", home.db_path().display()))?;
    // This gateway owns the store: a session still `running` was left by a process that died
    // mid-turn. Its transcript is made valid now — not at its next turn, which may be days
    // away while clients read it — then its status follows its open waits.
    let repaired = store.repair_running_transcripts().await?;
    if !repaired.is_empty() {
        tracing::warn!(
            sessions = repaired.len(),
            ids = ?repaired,
            "transcripts left mid-turn by an earlier process were repaired"
        );
    }
    let reset = store.reset_running().await?;
    let inbox = tern_inbox::Inbox::new(store.clone());
    if let Err(e) = inbox.ensure_default_project().await {
        tracing::error!(error = %e, "cannot create the inbox's default project");
        return Err(anyhow::Error::new(e).context("creating the inbox's default project"));
    }
    crate::inbox::apply_config_projects(&inbox, &eff.config.inbox.projects).await?;
    if reset > 0 {
        tracing::warn!(
            sessions = reset,
            "sessions left running by an earlier process are idle (or waiting) again"
        );
    }
    let hooks = Arc::new(
        tern_hooks::HookBus::from_config(&eff.config.hooks, &eff.config.webhooks)
            .context("in the [[hooks]] or [[webhooks]] configuration")?,
    );
    let model = match eff.resolved_model() {
        Ok(m) => m.name,
        Err(_) if args.inbox_only => String::new(),
        Err(e) => {
            tracing::warn!("{e}; turns will fail until a model is configured");
            String::new()
        }
    };
    let server_key = context::env_var("TERN_SERVER_KEY").filter(|k| !k.is_empty());
    let authenticator = Authenticator::new(store.clone(), server_key.as_deref())?;
    if let Some(path) = auth::ensure_first_key(&store, &home.root, server_key.is_some()).await? {
        tracing::info!(path = %path.display(), "no API key existed: created an admin key named `default`; it is in this file (mode 0600)");
        eprintln!(
            "tern: created the first API key; it is in {}",
            path.display()
        );
    }

    let g = &eff.config.gateway;
    let listen = args.listen.clone().unwrap_or_else(|| g.listen.clone());
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .with_context(|| {
            format!("cannot listen on {listen} (in use? choose another with --listen)")
        })?;
    let addr = listener.local_addr()?;
    // The admin reviewer, its first-start login link, and the local admin credential.
    let local_url = crate::reviewers::local_url(addr);
    let link_base = eff.config.inbox.public_url.clone();
    let link_base = link_base.as_deref().unwrap_or(&local_url);
    crate::reviewers::prepare_admin(&home, &store, link_base, &local_url).await?;
    let inbox_config = &eff.config.inbox;
    // Links in notifications need an address others can open: the configured one, else
    // the bound one (`localhost` for a wildcard bind).
    let public_url = match &inbox_config.public_url {
        Some(url) => url.clone(),
        None if addr.ip().is_unspecified() => format!("http://localhost:{}", addr.port()),
        None => format!("http://{addr}"),
    };
    let policy = tern_inbox::policy::Policy::from_config(&inbox_config.policy)
        .context("in the [inbox.policy] configuration")?;
    let targets = inbox_config
        .notify
        .iter()
        .map(tern_inbox::notify::NotifyTarget::from_config)
        .collect();
    let inbox = inbox
        .with_policy(policy)
        .with_notifications(tern_inbox::notify::Notifications::new(targets, &public_url));
    // Durable waits use this gateway's own inbox: the `inbox` tools create requests in it
    // (with its policy and notifications) and the embedded follower hears its decisions.
    // With `[inbox] url` they use that inbox instead, followed over outbound connections
    // only (tern_waits::remote).
    let remote = inbox_config
        .remote()
        .map_err(anyhow::Error::msg)
        .context("in the [inbox] configuration")?;
    let remote_inbox = match &remote {
        Some(r) => Some(Arc::new(
            RemoteInbox::new(&r.url, &r.key).map_err(|e| anyhow::anyhow!("{e}"))?,
        )),
        None => None,
    };
    let inbox_client: Arc<dyn InboxClient> = match &remote_inbox {
        Some(r) => r.clone(),
        None => Arc::new(EmbeddedInbox::new(inbox.clone()).with_uploads(
            tern_inbox::uploads::UploadDir::new(home.root.join("uploads")),
            inbox_config.max_upload_bytes,
        )),
    };
    let inbox_tools = Arc::new(InboxTools::new(
        store.clone(),
        inbox_client.clone(),
        hooks.clone(),
    ));
    // Dangerous commands go to the inbox for approval, with durable grants
    // (tern_waits::command). `--inbox-only` runs no agent: nothing to approve there.
    let command_approver = (!args.inbox_only).then(|| {
        Arc::new(
            InboxApprover::new(
                store.clone(),
                inbox_client.clone(),
                eff.config.approvals.allowlist.clone(),
            )
            .with_hooks(hooks.clone())
            .with_home(home.clone()),
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
            eff.config.approvals.allowlist.clone(),
        )),
    };
    let mut registry = tern_tools::Registry::builtin();
    tern_waits::tools::register(&mut registry, inbox_tools.clone());
    // Background processes (`terminal` with `background: true`, `process`): supervised by
    // `tern supervise`, so they outlive this process; every live one is adopted here.
    let procs = if args.inbox_only {
        None
    } else {
        let p = &eff.config.processes;
        let mut cfg = tern_procs::ManagerConfig::new(
            home.root.join("procs"),
            tern_procs::SupervisorCommand::current_exe()?,
        );
        cfg.max_running = p.max_running;
        cfg.log_max_bytes = p.log_max_bytes;
        cfg.backend = procs_backend(p);
        if let tern_procs::Backend::Ssh(t) = &cfg.backend {
            tracing::info!(host = %t.display(), "background processes run over ssh");
        }
        cfg.watch_interval = p.watch_interval();
        let manager = tern_procs::ProcessManager::open(cfg)
            .await
            .with_context(|| format!("opening {}", home.root.join("procs").display()))?;
        let manager = Arc::new(manager);
        // `notify_on_complete`: armed as a durable wait before the tool answers.
        let notifier = Arc::new(tern_waits::process::ProcessWaits::new(store.clone()));
        tern_procs::tools::register_with(&mut registry, manager.clone(), Some(notifier));
        Some(manager)
    };
    let agent = Arc::new(
        context::build_agent_with(&home, &eff, store.clone(), registry)?.with_hooks(hooks.clone()),
    );
    if !args.inbox_only {
        context::announce_sandbox(&agent.settings().limits.sandbox, true);
    }
    let gw = Gateway::with_inbox(
        agent,
        authenticator,
        approver,
        GatewaySettings {
            max_concurrent_turns: g.max_concurrent_turns,
            max_body_bytes: g.max_body_bytes,
            drain_timeout: Duration::from_secs(g.drain_timeout_secs),
            workdir: std::env::current_dir().context("reading the current directory")?,
            toolsets: gateway_toolsets(&eff),
            model,
        },
        inbox,
        InboxSettings {
            uploads_dir: Some(home.root.join("uploads")),
            max_upload_bytes: inbox_config.max_upload_bytes,
            public_url: inbox_config.public_url.clone(),
        },
    );
    gw.set_waits(WaitsSetup {
        client: inbox_client,
        tools: Some(inbox_tools),
        follow_embedded: remote_inbox.is_none(),
        keep_on_reset: inbox_config.keep_waits_on_reset,
        command_hook: command_approver
            .clone()
            .map(tern_waits::command::resume_hook),
    });
    if let Some(manager) = procs {
        gw.set_procs(manager, eff.config.processes.keep_finished());
    }
    if let Some(after) = eff.config.gateway.idle_reset() {
        gw.set_idle_reset(after);
    }
    gw.set_local_addr(addr);
    let _recorded = crate::status::record(&home, addr, args.inbox_only); // gateway.json, for `tern status`
    tracing::info!(%addr, version = env!("CARGO_PKG_VERSION"), "tern gateway listening");

    let stop = CancellationToken::new();
    tokio::spawn(shutdown_signal(stop.clone()));
    gw.spawn_upkeep(stop.clone());
    if let (Some(a), Some(r)) = (&command_approver, gw.resumer()) {
        // A command request decided inside its create (an auto-approve policy) wakes it.
        a.wake_on_ready(r);
    }
    if let (Some(client), Some(r)) = (remote_inbox, &remote)
        && !args.inbox_only
    {
        let resumer = gw
            .resumer()
            .context("the resumer of durable waits did not start")?;
        RemoteFollower::new(
            store.clone(),
            client,
            hooks.clone(),
            resumer,
            r.poll_interval,
        )
        .spawn(stop.clone());
        tracing::info!(inbox = %r.url, "durable waits use a remote inbox (outbound connections only)");
    }
    let app = if args.inbox_only {
        tracing::info!("serving the human inbox only (--inbox-only)");
        gw.router_for(Serve::InboxOnly)
    } else {
        gw.router()
    };
    let server_stop = CancellationToken::new();
    let server = tokio::spawn(
        axum::serve(listener, app)
            .with_graceful_shutdown(server_stop.clone().cancelled_owned())
            .into_future(),
    );
    stop.cancelled().await;
    gw.drain().await;
    server_stop.cancel();
    // Streams end with their turns; give connections a moment to close, then go.
    if tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .is_err()
    {
        tracing::warn!("connections still open after 5 s; exiting anyway");
    }
    hooks.flush(Duration::from_secs(5)).await;
    store.close().await;
    tracing::info!("stopped");
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
                        Some(t) => format!("revoked {}", crate::sessions::when(t)),
                        None => "active".into(),
                    };
                    println!(
                        "{:<24}  {:<5}  {:<14}  {:<16}  {status}",
                        k.name,
                        k.kind.as_str(),
                        format!("{}…", k.prefix),
                        crate::sessions::when(k.created_at)
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
                identity_file: s.identity_file.as_ref().map(std::path::PathBuf::from),
                options: s.options.clone(),
                workdir: s.workdir.clone(),
            })
        }
        _ => tern_procs::Backend::Local,
    }
}
