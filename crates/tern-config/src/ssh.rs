//! `[processes] backend` and `[processes.ssh]`: where the gateway's background processes run.
//!
//! ```toml
//! [processes]
//! backend = "ssh"                 # "local" (default): on this machine
//!
//! [processes.ssh]
//! host = "build-box"              # required for backend = "ssh": name, address or ~/.ssh/config alias
//! user = "deploy"                 # default: ssh's (the config's, else the local user name)
//! port = 2222                     # default: ssh's (22)
//! identity_file = "~/.ssh/id_ed25519"
//! options = ["ServerAliveInterval=30"]   # extra `ssh -o` options
//! workdir = "~/app"               # remote working directory (default: the remote home)
//! ```
//!
//! Checked when the file is loaded; the gateway hands the values to `tern-procs`.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// `[processes] backend`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessBackend {
    /// On this machine.
    #[default]
    Local,
    /// On `[processes.ssh] host`, through the system `ssh` client.
    Ssh,
}

// By hand, so a wrong value's error names the key and the choices.
impl<'de> Deserialize<'de> for ProcessBackend {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "local" => Ok(Self::Local),
            "ssh" => Ok(Self::Ssh),
            other => Err(serde::de::Error::custom(format!(
                "processes.backend must be \"local\" or \"ssh\", not {other:?}"
            ))),
        }
    }
}

/// `[processes.ssh]`: the ssh backend's host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SshConfig {
    pub host: Option<String>,
    pub user: Option<String>,
    /// 1 to 65535 (read wider, so a bad value gets this file's own message).
    pub port: Option<i64>,
    pub identity_file: Option<String>,
    /// Extra `-o` options, `Key=value`.
    pub options: Vec<String>,
    /// The remote working directory (absolute, `~/…`, or relative to the remote home).
    pub workdir: Option<String>,
}

/// A name ssh would not read as an option or split: non-empty, no whitespace, no leading `-`.
fn plain(s: &str) -> bool {
    !s.is_empty() && !s.starts_with('-') && !s.chars().any(char::is_whitespace)
}

/// Checks `backend` and `[processes.ssh]`.
pub(crate) fn validate_backend(
    backend: ProcessBackend,
    ssh: Option<&SshConfig>,
    path: &Path,
) -> Result<(), ConfigError> {
    let invalid = |msg: String| {
        Err(ConfigError::Invalid(format!(
            "{msg} (in {})",
            path.display()
        )))
    };
    let Some(s) = ssh else {
        if backend == ProcessBackend::Ssh {
            return invalid(
                "processes.backend is \"ssh\" but [processes.ssh] is missing; set at least \
                 its host"
                    .into(),
            );
        }
        return Ok(());
    };
    match s.host.as_deref() {
        None if backend == ProcessBackend::Ssh => {
            return invalid(
                "processes.backend is \"ssh\" but processes.ssh.host is not set".into(),
            );
        }
        Some(h) if !plain(h) => {
            return invalid(format!(
                "processes.ssh.host {h:?} is not a host name, address or ssh alias \
                 (no spaces, not starting with -)"
            ));
        }
        _ => {}
    }
    if let Some(u) = s.user.as_deref()
        && (!plain(u) || u.contains('@'))
    {
        return invalid(format!(
            "processes.ssh.user {u:?} is not a user name (no spaces or @, not starting with -)"
        ));
    }
    if s.port.is_some_and(|p| !(1..=65535).contains(&p)) {
        return invalid("processes.ssh.port must be 1 to 65535".into());
    }
    if s.identity_file
        .as_deref()
        .is_some_and(|f| f.trim().is_empty())
    {
        return invalid("processes.ssh.identity_file is empty".into());
    }
    for o in &s.options {
        let key = o.split(['=', ' ']).next().unwrap_or_default();
        if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric()) {
            return invalid(format!(
                "processes.ssh.options: {o:?} is not an ssh option such as \
                 \"ServerAliveInterval=30\" (written without -o)"
            ));
        }
    }
    if s.workdir.as_deref().is_some_and(|w| w.trim().is_empty()) {
        return invalid("processes.ssh.workdir is empty".into());
    }
    Ok(())
}
