//! Loading what every command needs: home, configuration, store, agent.

use std::path::PathBuf;

use anyhow::Context as _;
use tern_agent::Agent;
use tern_config::{Effective, Home};
use tern_store::Store;
use tern_tools::Registry;

pub fn env_var(k: &str) -> Option<String> {
    std::env::var(k).ok()
}

/// Home and effective configuration.
pub fn load_config(explicit: Option<PathBuf>) -> anyhow::Result<(Home, Effective)> {
    let home = Home::resolve(explicit, &env_var)?;
    let eff = tern_config::load(&home, &env_var)?;
    Ok((home, eff))
}

/// Writes logs to `$TERN_HOME/logs/tern.log` (level from `TERN_LOG`, default `info`). The
/// returned guard flushes on drop.
pub fn init_logging(home: &Home) -> Option<tracing_appender::non_blocking::WorkerGuard> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = home.logs_dir();
    // Logs quote commands and their output: tern's user only, whatever the umask (an
    // existing directory or file keeps its mode).
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .ok()?;
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(dir.join("tern.log"))
        .ok()?;
    // A short queue: the default preallocates 128k lines (4 MB) for a CLI that logs little.
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(1024)
        .finish(file);
    let filter = tracing_subscriber::EnvFilter::try_from_env("TERN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(false)
        .try_init()
        .ok()?;
    Some(guard)
}

pub async fn open_store(home: &Home) -> anyhow::Result<Store> {
    home.ensure()?;
    // One connection: a CLI run uses the store sequentially, and each connection is a thread.
    Store::open_with(&home.db_path(), 1)
        .await
        .with_context(|| format!("opening the session store {}", home.db_path().display()))
}

/// The sandbox of the agent's commands and file tools, from `[sandbox]`, with this home
/// protected.
pub fn sandbox(home: &Home, eff: &Effective) -> tern_sandbox::Sandbox {
    tern_agent::from_config::sandbox(home, eff)
}

/// Hardens this process against the commands it runs (its `/proc` files unreadable to
/// them), and says how those commands are sandboxed: a warning for `full-access`, an error
/// when the sandbox cannot be enforced (commands are then refused).
pub fn announce_sandbox(sandbox: &tern_sandbox::Sandbox, to_stderr: bool) {
    if let Err(e) = tern_sandbox::harden_current_process() {
        tracing::warn!(error = %e, "cannot make this process undumpable; the agent's commands may read its environment through /proc");
    }
    let policy = sandbox.policy();
    let say = |line: &str| {
        if to_stderr {
            eprintln!("{line}");
        }
    };
    match sandbox.check() {
        Err(e) => {
            tracing::error!(error = %e, "the agent's commands will be refused");
            say(&format!("error: {e}"));
        }
        Ok(()) if policy.mode == tern_sandbox::Mode::FullAccess => {
            let msg = FULL_ACCESS_WARNING;
            tracing::warn!("{msg}");
            say(&format!("warning: {msg}"));
        }
        Ok(()) => {
            tracing::info!(policy = %policy.describe(), support = ?sandbox.support(), "the agent's commands run in the sandbox");
            if let Some(gaps) = sandbox.support().limits() {
                tracing::warn!("the sandbox is partly enforced on this kernel: {gaps}");
                say(&format!(
                    "warning: the sandbox is partly enforced on this kernel: {gaps}"
                ));
            }
        }
    }
}

/// What `full-access` gives up, said at start and by `tern doctor`.
pub const FULL_ACCESS_WARNING: &str = "[sandbox] mode = \"full-access\": the agent's commands \
    run with all of your rights and no sandbox. A prompt-injected agent can read tern's keys \
    and admin token (and so approve its own requests), write and delete anywhere you can, and \
    use the network. See docs/security.md.";

/// The agent; a missing model configuration is kept as the error message a turn reports.
pub fn build_agent(home: &Home, eff: &Effective, store: Store) -> anyhow::Result<Agent> {
    let mut registry = Registry::builtin();
    tern_session_tools::register(&mut registry, store.clone(), &home.root, &eff.config.memory);
    build_agent_with(home, eff, store, registry)
}

/// [`build_agent`] with the tools of `registry`.
pub fn build_agent_with(
    home: &Home,
    eff: &Effective,
    store: Store,
    registry: Registry,
) -> anyhow::Result<Agent> {
    Ok(tern_agent::from_config::agent(home, eff, store, registry)?)
}
