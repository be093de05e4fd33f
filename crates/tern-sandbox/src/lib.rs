//! The sandbox of everything the agent does on this machine: `terminal` commands in the
//! foreground and the background, and the file tools. The kernel enforces it, not a parser:
//! whatever the model writes, a confined command cannot read tern's secrets or write outside
//! what the policy allows.
//!
//! Flow at a glance:
//! 1. `[sandbox]` in `config.toml` → a [`Policy`]: its [`Mode`] (`read-only`,
//!    `workspace-write` — the default — or `full-access`), the network switch, extra writable
//!    roots, and the protected paths (always `$TERN_HOME`, plus any configured).
//! 2. [`Sandbox::new`] probes the kernel once for Landlock ([`Support`]). Without it, every
//!    [`Sandbox::prepare`] fails unless the mode is `full-access`: tern never runs the
//!    agent's commands unsandboxed without being told to.
//! 3. Before each command, [`Sandbox::prepare`] computes the rules ([`rules`]): read and
//!    execute anywhere but the protected paths, write in the session's workspace, the writable
//!    roots and a private temporary directory made for this command, nothing else. They
//!    become a Landlock ruleset and, with the network off, a seccomp filter that refuses
//!    every socket but a unix one — all built in the parent, where allocating is fine.
//! 4. [`Confinement::apply`] runs between fork and exec (raw syscalls only): no new
//!    privileges, the ruleset, the filter. The command and all it starts stay confined.
//!    The environment the command gets is [`env::scrub`]bed of tern's and the model's
//!    secrets.
//! 5. The file tools do their work on a thread confined by the same rules
//!    ([`Confinement::confine_current_thread`]), so a symlink or `..` the agent made can
//!    lead nowhere the kernel would not let a command go.
//!
//! An escalated run ([`Level::Escalated`], after a human's approval) drops the write and
//! network limits but keeps the protected paths out of reach: not even an approved command
//! can read tern's keys and decide its own requests.

pub mod confine;
pub mod denied;
pub mod env;
pub mod rules;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

pub use confine::{Confinement, harden_current_process};
pub use env::EnvPolicy;

/// How much the agent's commands may do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Read anywhere the user can (but the protected paths); write only in a private
    /// temporary directory made for each command.
    ReadOnly,
    /// `read-only`, and also write in the session's workspace and the writable roots.
    #[default]
    WorkspaceWrite,
    /// No sandbox at all (the environment is still scrubbed).
    FullAccess,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::WorkspaceWrite => "workspace-write",
            Mode::FullAccess => "full-access",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The sandbox policy of the agent's commands and file tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub mode: Mode,
    /// Whether commands may open network sockets (unix sockets are always allowed).
    pub network: bool,
    /// Directories writable in `workspace-write` besides the session's workspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable_roots: Vec<PathBuf>,
    /// Never readable nor writable, whatever the mode or an approval: `$TERN_HOME` and the
    /// configured `protected_paths`. (`full-access` has no sandbox to enforce them.)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protected_paths: Vec<PathBuf>,
    /// Which environment variables commands get.
    #[serde(default)]
    pub env: EnvPolicy,
}

impl Policy {
    /// `mode` with its default network setting, nothing extra writable or protected.
    pub fn new(mode: Mode) -> Self {
        Policy {
            mode,
            network: mode == Mode::FullAccess,
            writable_roots: Vec::new(),
            protected_paths: Vec::new(),
            env: EnvPolicy::default(),
        }
    }

    /// No sandbox (tests of other crates, and `[sandbox] mode = "full-access"`).
    pub fn full_access() -> Self {
        Policy::new(Mode::FullAccess)
    }

    /// One line for logs and `tern doctor`.
    pub fn describe(&self) -> String {
        match self.mode {
            Mode::FullAccess => "full-access (no sandbox)".to_owned(),
            mode => format!(
                "{mode}, network {}",
                if self.network { "on" } else { "off" }
            ),
        }
    }
}

/// How one command is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Under the policy.
    Sandboxed,
    /// Approved by a human to run outside the sandbox: no write or network limit, but the
    /// protected paths stay out of reach.
    Escalated,
}

/// Whether the kernel can enforce the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// Landlock with this ABI version.
    Landlock { abi: i32 },
    /// No Landlock: why.
    Missing { reason: String },
}

impl Support {
    /// Probes the kernel once per process.
    pub fn probe() -> &'static Support {
        static PROBED: OnceLock<Support> = OnceLock::new();
        PROBED.get_or_init(confine::probe)
    }

    /// What is missing at this ABI, in words (`None` when everything is enforced).
    pub fn limits(&self) -> Option<String> {
        match self {
            Support::Missing { reason } => Some(reason.clone()),
            Support::Landlock { abi } => {
                let mut gaps = Vec::new();
                if *abi < 3 {
                    gaps.push("truncating files is not controlled (Landlock ABI 3)");
                }
                if *abi < 4 {
                    gaps.push("TCP is blocked by seccomp alone (Landlock ABI 4)");
                }
                if *abi < 6 {
                    gaps.push("commands may signal processes outside the sandbox (Landlock ABI 6)");
                }
                (!gaps.is_empty()).then(|| gaps.join("; "))
            }
        }
    }
}

/// Why a command cannot be confined (and so is not run).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "the sandbox cannot be enforced here ({reason}), so tern does not run the agent's \
         commands; set [sandbox] mode = \"full-access\" in config.toml to run them without a \
         sandbox, knowing what that gives up (see docs/security.md)"
    )]
    Unavailable { reason: String },
    #[error("cannot build the sandbox for this command: {0}")]
    Build(String),
    #[error("cannot make the command's private temporary directory: {0}")]
    TempDir(#[source] std::io::Error),
}

/// The sandbox of one program (the gateway, `tern chat`, a supervisor): its policy and what
/// the kernel supports. Cheap to share behind an `Arc`.
#[derive(Debug, Clone)]
pub struct Sandbox {
    policy: Policy,
    support: Support,
}

/// What [`Sandbox::prepare`] made for one command.
pub struct Prepared {
    /// Applied between fork and exec (and shared with the `pre_exec` hook).
    pub confinement: Arc<Confinement>,
    /// The complete environment of the command (start from an empty one).
    pub env: Vec<(OsString, OsString)>,
    /// The command's private temporary directory (`TMPDIR`), removed when dropped.
    pub tmpdir: Option<tempfile::TempDir>,
}

impl Prepared {
    /// Keeps the temporary directory after this value is gone (a background process
    /// outlives the call that started it); returns its path.
    pub fn keep_tmpdir(&mut self) -> Option<PathBuf> {
        self.tmpdir.take().map(tempfile::TempDir::keep)
    }
}

impl Sandbox {
    /// The sandbox of `policy` on this kernel.
    pub fn new(policy: Policy) -> Self {
        Sandbox {
            policy,
            support: Support::probe().clone(),
        }
    }

    /// The sandbox of `policy` as if the kernel's support were `support` (to show what tern
    /// does on a kernel without Landlock).
    pub fn with_support(policy: Policy, support: Support) -> Self {
        Sandbox { policy, support }
    }

    /// No sandbox: what tests of other crates use, and `full-access`.
    pub fn full_access() -> Self {
        Sandbox::new(Policy::full_access())
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn support(&self) -> &Support {
        &self.support
    }

    /// Err when commands cannot run under this policy here (no Landlock and not
    /// `full-access`): what `tern doctor` and the gateway's start-up report.
    pub fn check(&self) -> Result<(), SandboxError> {
        match (&self.support, self.policy.mode) {
            (_, Mode::FullAccess) | (Support::Landlock { .. }, _) => Ok(()),
            (Support::Missing { reason }, _) => Err(SandboxError::Unavailable {
                reason: reason.clone(),
            }),
        }
    }

    /// Builds the confinement, environment and temporary directory of one command that runs
    /// with `workspace` as the session's working directory. `vars` is the environment it
    /// would inherit (usually `std::env::vars_os()`).
    pub fn prepare(
        &self,
        workspace: &Path,
        level: Level,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Result<Prepared, SandboxError> {
        self.check()?;
        let mut env = env::scrub(vars, &self.policy.env);
        if self.policy.mode == Mode::FullAccess {
            return Ok(Prepared {
                confinement: Arc::new(Confinement::none()),
                env,
                tmpdir: None,
            });
        }
        let tmpdir = tempfile::Builder::new()
            .prefix("tern-sbx-")
            .tempdir()
            .map_err(SandboxError::TempDir)?;
        for name in ["TMPDIR", "TMP", "TEMP"] {
            env.retain(|(k, _)| k != name);
            env.push((name.into(), tmpdir.path().as_os_str().to_owned()));
        }
        let grants = rules::grants(&self.policy, workspace, Some(tmpdir.path()), level);
        let network = self.policy.network || level == Level::Escalated;
        let confinement = Confinement::build(&grants, network, level == Level::Sandboxed)?;
        Ok(Prepared {
            confinement: Arc::new(confinement),
            env,
            tmpdir: Some(tmpdir),
        })
    }

    /// The confinement of the file tools working for a session whose workspace is
    /// `workspace` (no temporary directory, no network filter: they open no sockets).
    pub fn file_confinement(&self, workspace: &Path) -> Result<Confinement, SandboxError> {
        self.check()?;
        if self.policy.mode == Mode::FullAccess {
            return Ok(Confinement::none());
        }
        let grants = rules::grants(&self.policy, workspace, None, Level::Sandboxed);
        Confinement::build(&grants, true, false)
    }

    /// Whether `path` is one of the protected paths or inside one (after resolving
    /// symlinks, as far as the path exists): for clear messages before the kernel says no.
    pub fn is_protected(&self, path: &Path) -> bool {
        let real = rules::resolve(path);
        rules::canonical_protected(&self.policy)
            .iter()
            .any(|p| real.starts_with(p))
    }
}
