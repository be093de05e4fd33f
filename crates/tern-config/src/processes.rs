//! `[processes]`: the gateway's background processes; where they run is in [`crate::ssh`].

use serde::{Deserialize, Serialize};

use crate::duration::parse_duration;
use crate::ssh::{ProcessBackend, SshConfig};

/// `[processes]`: the gateway's background processes (`terminal` with `background: true`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessesConfig {
    /// Processes running at once across the gateway; further starts are refused.
    pub max_running: usize,
    /// How long a finished process (its status and log) is kept: a duration such as
    /// `"30m"` or `"2h"`.
    pub keep_finished: String,
    /// Bytes of output kept on disk per process; older output is rotated out.
    pub log_max_bytes: u64,
    /// Where background processes run: `"local"` or `"ssh"` (on `[processes.ssh]`'s host).
    pub backend: ProcessBackend,
    /// Watch-pattern notifications per process at most one per this duration (`"30s"`);
    /// the matches in between are told together.
    pub watch_interval: String,
    /// `[processes.ssh]`: the host of `backend = "ssh"`.
    pub ssh: Option<SshConfig>,
}

impl Default for ProcessesConfig {
    fn default() -> Self {
        ProcessesConfig {
            max_running: 64,
            keep_finished: "30m".to_owned(),
            log_max_bytes: 64 * 1024 * 1024,
            backend: ProcessBackend::Local,
            watch_interval: "30s".to_owned(),
            ssh: None,
        }
    }
}

impl ProcessesConfig {
    /// `keep_finished` as a duration (checked when the file is loaded).
    pub fn keep_finished(&self) -> std::time::Duration {
        parse_duration(&self.keep_finished).unwrap_or(std::time::Duration::from_secs(30 * 60))
    }

    /// `watch_interval` as a duration (checked when the file is loaded).
    pub fn watch_interval(&self) -> std::time::Duration {
        parse_duration(&self.watch_interval).unwrap_or(std::time::Duration::from_secs(30))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use crate::{Config, load};

    #[test]
    fn processes_have_defaults_and_are_checked() {
        let (_d, home) = temp_home();
        let c = load(&home, &no_env).unwrap().config.processes;
        assert_eq!(c.max_running, 64);
        assert_eq!(c.keep_finished(), std::time::Duration::from_secs(1800));
        write_config(
            &home,
            "[processes]\nmax_running = 3\nkeep_finished = \"2h\"\nwatch_interval = \"5s\"\n",
        );
        let c = load(&home, &no_env).unwrap().config.processes;
        assert_eq!(c.max_running, 3);
        assert_eq!(c.keep_finished(), std::time::Duration::from_secs(7200));
        assert_eq!(c.watch_interval(), std::time::Duration::from_secs(5));
        for bad in [
            "max_running = 0",
            "keep_finished = \"soon\"",
            "watch_interval = \"often\"",
            "log_max_bytes = 1",
        ] {
            write_config(&home, &format!("[processes]\n{bad}\n"));
            let e = load(&home, &no_env).unwrap_err().to_string();
            assert!(e.contains("processes"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_ssh_backend_is_configured_and_checked() {
        let (_d, home) = temp_home();
        let c = load(&home, &no_env).unwrap().config.processes;
        assert_eq!(c.backend, ProcessBackend::Local);
        assert_eq!(c.ssh, None);
        write_config(
            &home,
            "[processes]\nbackend = \"ssh\"\n\n[processes.ssh]\nhost = \"build-box\"\n\
             user = \"deploy\"\nport = 2222\nidentity_file = \"~/.ssh/id_ed25519\"\n\
             options = [\"ServerAliveInterval=30\"]\nworkdir = \"~/app\"\n",
        );
        let c = load(&home, &no_env).unwrap().config.processes;
        assert_eq!(c.backend, ProcessBackend::Ssh);
        assert_eq!(
            c.ssh,
            Some(SshConfig {
                host: Some("build-box".into()),
                user: Some("deploy".into()),
                port: Some(2222),
                identity_file: Some("~/.ssh/id_ed25519".into()),
                options: vec!["ServerAliveInterval=30".into()],
                workdir: Some("~/app".into()),
            })
        );
        // Serialized back (`config show`, the allowlist writer) it reads the same.
        let text = toml::to_string(&load(&home, &no_env).unwrap().config).unwrap();
        let back: Config = toml::from_str(&text).unwrap();
        assert_eq!(back.processes, c);
        // A host kept for later while the backend is local is fine.
        write_config(&home, "[processes.ssh]\nhost = \"later\"\n");
        assert_eq!(
            load(&home, &no_env).unwrap().config.processes.backend,
            ProcessBackend::Local
        );
        for (bad, says) in [
            (
                "[processes]\nbackend = \"ssh\"\n",
                "[processes.ssh] is missing",
            ),
            (
                "[processes]\nbackend = \"ssh\"\n[processes.ssh]\nport = 22\n",
                "processes.ssh.host is not set",
            ),
            ("[processes]\nbackend = \"docker\"\n", "backend"),
            (
                "[processes.ssh]\nhost = \"-oProxyCommand=x\"\n",
                "processes.ssh.host",
            ),
            ("[processes.ssh]\nhost = \"a b\"\n", "processes.ssh.host"),
            (
                "[processes.ssh]\nhost = \"h\"\nuser = \"a@b\"\n",
                "processes.ssh.user",
            ),
            (
                "[processes.ssh]\nhost = \"h\"\nport = 0\n",
                "processes.ssh.port",
            ),
            (
                "[processes.ssh]\nhost = \"h\"\nport = 70000\n",
                "processes.ssh.port",
            ),
            (
                "[processes.ssh]\nhost = \"h\"\noptions = [\"-oProxyCommand=x\"]\n",
                "processes.ssh.options",
            ),
            (
                "[processes.ssh]\nhost = \"h\"\nworkdir = \" \"\n",
                "processes.ssh.workdir",
            ),
            (
                "[processes.ssh]\nhost = \"h\"\nhostname = \"x\"\n",
                "hostname",
            ),
        ] {
            write_config(&home, bad);
            let e = load(&home, &no_env).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
