//! The ssh backend: background processes on another host, through the system `ssh` client.
//!
//! The supervisor stays on this machine, so the log, `exit.json`, the socket, stdin, and the
//! re-adoption after a gateway restart work as for a local process. Only its child differs:
//! instead of `bash -c COMMAND` it runs
//!
//! ```text
//! ssh -o BatchMode=yes [user options] -o LogLevel=ERROR … -e none [-p PORT] [-i KEY] [-l USER]
//!     (-tt | -T) -- HOST 'exec /bin/sh -c SCRIPT'
//! ```
//!
//! where SCRIPT ([`remote_command`]), on the remote host:
//! 1. traps INT and TERM for itself (a trapped signal is reset in children, so the command
//!    still gets them; ignoring them would be inherited): it outlives the command to clean up
//!    and pass its status on, and a Ctrl-C to a REPL does not end the session;
//! 2. `cd`s to the working directory;
//! 3. writes its pid to `~/.tern/procs/ID/pgid` — sshd starts every session with `setsid`, with
//!    or without a PTY, so the pid of the shell it starts is the remote process group id —
//!    as late as it can, just before the command starts;
//! 4. unless a TERM or INT came meanwhile (then it exits 143 or 130 at once: the signal would
//!    otherwise be lost, as the command did not run yet) runs `bash -c COMMAND` (or `sh`),
//!    removes `~/.tern/procs/ID`, and exits with the command's status, which ssh returns (255
//!    is ssh's own failure; its message, kept by `LogLevel=ERROR`, is in the process's log).
//!
//! A signal that lands in the instant between that check and the command's start is taken by
//! the shell's trap; the command then gets the KILL after the grace period.
//!
//! **Kill** ([`SshTarget::kill`], run by the supervisor for `kill` and for a SIGTERM to
//! itself): a second `ssh` sends TERM to the remote process group (retried while the pgid
//! file is not written yet), the grace period after it KILL (and removes the directory, as
//! the shell cannot then); if the local `ssh` client is still there a second later, it gets KILL
//! too. The local client is left alone until then, so the output up to the end and the
//! command's status still arrive. When the remote kill cannot reach the host, the local client
//! gets TERM at once (over a PTY, sshd then hangs up the remote session).
//!
//! **Spawn** ([`SshTarget::preflight`], by the manager before the supervisor starts): one
//! `ssh` that fails clearly when the host cannot be reached or the working directory does not
//! exist there, and removes the directories of remote processes whose group is gone (left by a
//! KILL or a hang-up).
//!
//! The remote login shell must be POSIX-like (sh, bash, zsh, ksh): it runs `exec /bin/sh -c
//! '…'`. The command, the id and the working directory are quoted with [`quote`].

use std::borrow::Cow;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

use crate::ProcError;

/// The longest one `ssh` call of the manager or the supervisor (preflight, remote kill) may
/// take; `ConnectTimeout` ends a connection attempt earlier.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a hung connection may stay silent before ssh gives up (interval × count).
const ALIVE_INTERVAL_SECS: u32 = 15;
const ALIVE_COUNT: u32 = 4;
/// How long a kill keeps trying to reach a remote command that has not started yet (its
/// shell has not recorded the process group) before it goes on to the KILL.
const START_WAIT: Duration = Duration::from_secs(15);
/// Exit code of a remote helper script meaning "no such process there".
const NOT_THERE: i32 = 3;

/// Where the ssh backend runs processes: `[processes.ssh]` of the configuration.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SshTarget {
    /// Host name, address or `~/.ssh/config` alias.
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity_file: Option<PathBuf>,
    /// Extra `-o` options (`Key=value`), before tern's own defaults, so they win.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// The remote working directory when the command names none, and what a relative one is
    /// relative to (default: the remote user's home).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
}

/// How a signal is named for the remote shell's `kill`.
fn signal_name(sig: Signal) -> &'static str {
    match sig {
        Signal::SIGKILL => "KILL",
        Signal::SIGINT => "INT",
        Signal::SIGHUP => "HUP",
        _ => "TERM",
    }
}

impl SshTarget {
    /// Checks the settings a bad configuration could get wrong (an option-like host would
    /// be read by ssh as an option).
    pub fn validate(&self) -> Result<(), ProcError> {
        let bad = |what: &str| Err(ProcError::Invalid(format!("ssh backend: {what}")));
        let plain =
            |s: &str| !s.is_empty() && !s.starts_with('-') && !s.chars().any(|c| c.is_whitespace());
        if !plain(&self.host) {
            return bad(
                "`host` must be a host name, address or ssh alias (no spaces, not starting with -)",
            );
        }
        if self
            .user
            .as_deref()
            .is_some_and(|u| !plain(u) || u.contains('@'))
        {
            return bad("`user` must be a user name (no spaces or @, not starting with -)");
        }
        if self.port == Some(0) {
            return bad("`port` must be 1 to 65535");
        }
        if self
            .identity_file
            .as_ref()
            .is_some_and(|p| p.as_os_str().is_empty())
        {
            return bad("`identity_file` is empty");
        }
        for o in &self.options {
            let key = o.split(['=', ' ']).next().unwrap_or_default();
            if key.is_empty()
                || o.starts_with('-')
                || !key.chars().all(|c| c.is_ascii_alphanumeric())
            {
                return bad(&format!(
                    "option {o:?} is not an ssh option such as \"ServerAliveInterval=30\""
                ));
            }
        }
        if self
            .workdir
            .as_deref()
            .is_some_and(|w| w.trim().is_empty() || w.contains('\0'))
        {
            return bad("`workdir` is empty");
        }
        Ok(())
    }

    /// `ssh://[user@]host[:port]`, for lists and messages.
    pub fn display(&self) -> String {
        let mut s = String::from("ssh://");
        if let Some(u) = &self.user {
            s.push_str(u);
            s.push('@');
        }
        s.push_str(&self.host);
        if let Some(p) = self.port {
            s.push_str(&format!(":{p}"));
        }
        s
    }

    /// `[user@]host:`, the prefix of a remote path in messages and approvals.
    fn at(&self) -> String {
        match &self.user {
            Some(u) => format!("{u}@{}", self.host),
            None => self.host.clone(),
        }
    }

    /// A remote path as the approver and the logs see it: `[user@]host:path`.
    pub fn describe_path(&self, workdir: &str) -> String {
        format!("{}:{workdir}", self.at())
    }

    /// The remote working directory of a command: `requested` when absolute (or `~`-based),
    /// relative to [`SshTarget::workdir`] otherwise; the configured one (or `~`) without.
    pub fn remote_workdir(&self, requested: &str) -> Result<String, ProcError> {
        if requested.contains('\0') {
            return Err(ProcError::Invalid(
                "the working directory contains a NUL byte".into(),
            ));
        }
        let base = self.workdir.as_deref().unwrap_or("~");
        let requested = requested.trim();
        Ok(if requested.is_empty() {
            base.to_owned()
        } else if requested.starts_with('/') || requested == "~" || requested.starts_with("~/") {
            requested.to_owned()
        } else {
            format!("{}/{requested}", base.trim_end_matches('/'))
        })
    }

    /// The options every call shares, then `-- host`.
    fn base_args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        // First: ssh keeps the first value of an option, and nobody could type a password.
        a.extend(["-o".into(), "BatchMode=yes".into()]);
        for o in &self.options {
            a.extend(["-o".into(), o.into()]);
        }
        for o in [
            // ssh's own warnings ("Permanently added …", "Connection … closed") stay out of
            // the process's log; its errors stay in.
            "LogLevel=ERROR".to_owned(),
            "ConnectTimeout=15".to_owned(),
            format!("ServerAliveInterval={ALIVE_INTERVAL_SECS}"),
            format!("ServerAliveCountMax={ALIVE_COUNT}"),
        ] {
            a.extend(["-o".into(), o.into()]);
        }
        // No escape character: a `~.` in the input is the program's, not a disconnect.
        a.extend(["-e".into(), "none".into()]);
        if let Some(p) = self.port {
            a.extend(["-p".into(), p.to_string().into()]);
        }
        if let Some(i) = &self.identity_file {
            a.extend(["-i".into(), i.clone().into_os_string()]);
        }
        if let Some(u) = &self.user {
            a.extend(["-l".into(), u.into()]);
        }
        a
    }

    /// The arguments of the `ssh` client the supervisor runs as its child (the program is
    /// `ssh`): a PTY on the remote side when `pty` (`-tt`: the supervisor's own PTY is
    /// ssh's terminal), plain pipes otherwise.
    pub fn client_args(&self, id: &str, pty: bool, workdir: &str, command: &str) -> Vec<OsString> {
        let mut a = self.base_args();
        a.push(if pty { "-tt" } else { "-T" }.into());
        a.extend(["--".into(), self.host.clone().into()]);
        a.push(remote_command(id, workdir, command).into());
        a
    }

    /// Runs `script` with `/bin/sh` on the host, stdin closed; `(exit code, stderr)`. Err
    /// when ssh cannot start or takes too long.
    async fn run(&self, script: &str) -> Result<(Option<i32>, String), ProcError> {
        let mut cmd = tokio::process::Command::new("ssh");
        cmd.args(self.base_args())
            .arg("-T")
            .arg("--")
            .arg(&self.host)
            .arg(format!("exec /bin/sh -c {}", quote(script)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(|e| ProcError::Spawn(format!("cannot run ssh: {e}")))?;
        let out = tokio::time::timeout(CALL_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| {
                ProcError::Spawn(format!(
                    "ssh to {} did not finish within {} s",
                    self.display(),
                    CALL_TIMEOUT.as_secs()
                ))
            })?
            .map_err(|e| ProcError::Spawn(format!("ssh to {} failed: {e}", self.display())))?;
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        Ok((out.status.code(), stderr))
    }

    /// Before a spawn: the host answers, and `workdir` exists there. Also removes the
    /// directories of remote processes whose process group is gone.
    pub async fn preflight(&self, workdir: &str) -> Result<(), ProcError> {
        let script = format!(
            "for f in \"$HOME\"/.tern/procs/proc_*/pgid; do \
               [ -f \"$f\" ] || continue; \
               kill -0 -\"$(cat \"$f\")\" 2>/dev/null || rm -rf \"${{f%/pgid}}\"; \
             done; \
             {}",
            cd(workdir)
        );
        match self.run(&script).await? {
            (Some(0), _) => Ok(()),
            (Some(255), err) => Err(ProcError::Spawn(format!(
                "cannot reach {} over ssh: {}{}",
                self.display(),
                if err.is_empty() { "ssh failed" } else { &err },
                hint(&err)
            ))),
            (_, err) => Err(ProcError::Invalid(format!(
                "working directory does not exist on {}: {} ({err})",
                self.display(),
                workdir
            ))),
        }
    }

    /// Sends `sig` to the remote process group of process `id`. `Ok(false)`: it is not
    /// there (not started yet, or ended); Err: ssh failed.
    pub async fn signal(&self, id: &str, sig: Signal) -> Result<bool, ProcError> {
        let name = signal_name(sig);
        let mut script = format!(
            "d=\"$HOME/.tern/procs/\"{}; [ -f \"$d/pgid\" ] || exit {NOT_THERE}; \
             kill -{name} -\"$(cat \"$d/pgid\")\" 2>/dev/null; rc=$?; ",
            quote(id)
        );
        if sig == Signal::SIGKILL {
            // The shell that would remove it is gone with the group.
            script.push_str("rm -rf \"$d\"; ");
        }
        script.push_str(&format!("[ $rc = 0 ] || exit {NOT_THERE}"));
        match self.run(&script).await? {
            (Some(0), _) => Ok(true),
            (Some(NOT_THERE), _) => Ok(false),
            (code, err) => Err(ProcError::Spawn(format!(
                "remote {name} over ssh to {} failed ({}): {err}",
                self.display(),
                code.map_or("no exit code".to_owned(), |c| format!("exit code {c}"))
            ))),
        }
    }

    /// The supervisor's kill of process `id`: TERM to the remote group (retried while its
    /// pgid is not recorded yet, up to [`START_WAIT`]), KILL `grace` after the TERM, then KILL
    /// to the local ssh client if it still runs. `alive` says whether the local child still
    /// runs; `local` signals its group.
    pub async fn kill(
        self,
        id: String,
        grace: Duration,
        alive: impl Fn() -> bool,
        local: impl Fn(Signal) -> bool,
    ) {
        let start = tokio::time::Instant::now();
        // The grace is the command's, from the TERM it got.
        let mut deadline = start + grace;
        loop {
            match self.signal(&id, Signal::SIGTERM).await {
                Ok(true) => {
                    tracing::info!("sent TERM to the remote process group");
                    deadline = tokio::time::Instant::now() + grace;
                    break;
                }
                Ok(false) if alive() && start.elapsed() < START_WAIT.max(grace) => {
                    // The remote shell has not recorded its pgid yet (a kill right after
                    // the spawn, a slow host): try again shortly.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!("{e}; ending the local ssh client");
                    local(Signal::SIGTERM);
                    break;
                }
            }
        }
        tokio::time::sleep_until(deadline).await;
        if !alive() {
            return;
        }
        match self.signal(&id, Signal::SIGKILL).await {
            Ok(sent) => tracing::info!(
                sent,
                "sent KILL to the remote process group after the grace period"
            ),
            Err(e) => tracing::warn!("{e}"),
        }
        // The client ends once the remote group is gone; give it a moment before the
        // (then harmless) local KILL, so the status ssh reports is kept when it can be.
        tokio::time::sleep(Duration::from_secs(1)).await;
        if local(Signal::SIGKILL) {
            tracing::info!("sent KILL to the local ssh client");
        }
    }
}

/// What to do about the usual ssh failures (it runs with `BatchMode=yes`: nobody can answer
/// a question).
fn hint(stderr: &str) -> &'static str {
    if stderr.contains("Host key verification failed") {
        " (the host's key is not in known_hosts: connect once with `ssh` to add it, or set \
         options = [\"StrictHostKeyChecking=accept-new\"] in [processes.ssh])"
    } else if stderr.contains("Permission denied") {
        " (no key was accepted: ssh cannot ask for a password here; set identity_file or \
         load the key into an ssh agent)"
    } else {
        ""
    }
}

/// The `cd` of a remote working directory: `~` and `~/…` are the remote home, which a
/// quoted path could not say.
fn cd(workdir: &str) -> String {
    if workdir == "~" {
        "cd".to_owned()
    } else if let Some(rest) = workdir.strip_prefix("~/") {
        format!("cd \"$HOME\"/{}", quote(rest))
    } else {
        format!("cd {}", quote(workdir))
    }
}

/// The remote command line of process `id` (see the module's docs): its login shell execs
/// `/bin/sh` with a script that records the process group, runs `command` in `workdir`,
/// cleans up and passes the status on.
pub fn remote_command(id: &str, workdir: &str, command: &str) -> String {
    let script = format!(
        "trap 'k=130' INT\n\
         trap 'k=143' TERM\n\
         {cd} || exit 1\n\
         export PAGER=cat GIT_PAGER=cat GIT_TERMINAL_PROMPT=0\n\
         s=$(command -v bash) || s=sh\n\
         d=\"$HOME/.tern/procs/\"{id}\n\
         mkdir -p \"$d\" && echo $$ > \"$d/pgid\" || exit 1\n\
         [ -z \"$k\" ] || {{ rm -rf \"$d\"; exit $k; }}\n\
         \"$s\" -c {command}\n\
         rc=$?\n\
         rm -rf \"$d\"\n\
         exit $rc\n",
        id = quote(id),
        cd = cd(workdir),
        command = quote(command),
    );
    format!("exec /bin/sh -c {}", quote(&script))
}

/// Quotes `s` as one word for a POSIX shell: unchanged when it has only characters no shell
/// treats specially, else in single quotes, a `'` inside becoming `'\''`. (A NUL byte cannot
/// be passed at all; callers refuse it.)
pub fn quote(s: &str) -> Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-.,/:@%+=".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        return Cow::Borrowed(s);
    }
    let mut q = String::with_capacity(s.len() + 2);
    q.push('\'');
    for c in s.chars() {
        if c == '\'' {
            q.push_str("'\\''");
        } else {
            q.push(c);
        }
    }
    q.push('\'');
    Cow::Owned(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `sh` makes of `word`: its single argument, printed back exactly.
    fn through_sh(word: &str) -> String {
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("printf %s {word}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{word}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn quoting_survives_the_shell() {
        for s in [
            "",
            "plain",
            "/a/b-c_d.e",
            "two words",
            "it's",
            "''",
            "'\\''",
            "$HOME `id` $(id) \"x\" \\n \\",
            "a\nb\tc",
            "~/x *.rs ?[a] {a,b} ; & | > < # !",
            "-n",
            "ünïcödé ☃",
        ] {
            let q = quote(s);
            assert_eq!(through_sh(&q), s, "{s:?} quoted as {q}");
        }
        assert_eq!(quote("a/b.c"), "a/b.c");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn the_remote_command_runs_in_sh_with_its_quoting_intact() {
        // Run locally what the remote login shell would: the command reaches bash intact,
        // in the working directory, with its status.
        let home = tempfile::tempdir().unwrap();
        let work = home.path().join("we'ird dir");
        std::fs::create_dir(&work).unwrap();
        let cmd = r#"printf '%s|' "$PWD" 'a b' "it's" '$HOME'; exit 7"#;
        let line = remote_command("proc_0123456789ab", work.to_str().unwrap(), cmd);
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(&line)
            .env("HOME", home.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(7), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{}|a b|it's|$HOME|", work.display())
        );
        // The pgid directory is gone after the exit.
        assert!(!home.path().join(".tern/procs/proc_0123456789ab").exists());
        // `~/…` is the home.
        std::fs::create_dir(home.path().join("sub")).unwrap();
        let line = remote_command("proc_0123456789ab", "~/sub", "pwd");
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(&line)
            .env("HOME", home.path())
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            home.path().join("sub").display().to_string()
        );
    }

    fn target() -> SshTarget {
        SshTarget {
            host: "example.org".into(),
            ..SshTarget::default()
        }
    }

    #[test]
    fn remote_workdirs_resolve() {
        let t = target();
        assert_eq!(t.remote_workdir("").unwrap(), "~");
        assert_eq!(t.remote_workdir("src").unwrap(), "~/src");
        assert_eq!(t.remote_workdir("/srv/app").unwrap(), "/srv/app");
        assert_eq!(t.remote_workdir("~/x").unwrap(), "~/x");
        let t = SshTarget {
            workdir: Some("/srv/app/".into()),
            ..target()
        };
        assert_eq!(t.remote_workdir("").unwrap(), "/srv/app/");
        assert_eq!(t.remote_workdir("src").unwrap(), "/srv/app/src");
        assert!(t.remote_workdir("a\0b").is_err());
    }

    #[test]
    fn targets_are_validated() {
        assert!(target().validate().is_ok());
        let full = SshTarget {
            host: "10.0.0.2".into(),
            user: Some("deploy".into()),
            port: Some(2222),
            identity_file: Some("/k/id_ed25519".into()),
            options: vec!["ServerAliveInterval=30".into(), "Compression yes".into()],
            workdir: Some("~/app".into()),
        };
        assert!(full.validate().is_ok());
        assert_eq!(full.display(), "ssh://deploy@10.0.0.2:2222");
        assert_eq!(full.describe_path("/x"), "deploy@10.0.0.2:/x");
        for bad in [
            SshTarget {
                host: "".into(),
                ..target()
            },
            SshTarget {
                host: "-oProxyCommand=x".into(),
                ..target()
            },
            SshTarget {
                host: "a b".into(),
                ..target()
            },
            SshTarget {
                user: Some("a@b".into()),
                ..target()
            },
            SshTarget {
                port: Some(0),
                ..target()
            },
            SshTarget {
                options: vec!["-oProxyCommand=x".into()],
                ..target()
            },
            SshTarget {
                options: vec!["=x".into()],
                ..target()
            },
        ] {
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains("ssh backend"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn client_arguments_put_the_host_after_the_options() {
        let t = SshTarget {
            user: Some("u".into()),
            port: Some(2200),
            options: vec!["LogLevel=INFO".into()],
            ..target()
        };
        let a: Vec<String> = t
            .client_args("proc_1", true, "~", "echo hi")
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect();
        assert_eq!(a[..4], ["-o", "BatchMode=yes", "-o", "LogLevel=INFO"]);
        let dd = a.iter().position(|s| s == "--").unwrap();
        assert_eq!(a[dd - 1], "-tt");
        assert_eq!(a[dd + 1], "example.org");
        assert_eq!(a.len(), dd + 3);
        assert!(a[dd + 2].starts_with("exec /bin/sh -c "));
        let l = a.iter().position(|s| s == "-l").unwrap();
        assert_eq!(a[l + 1], "u");
        assert!(
            t.client_args("proc_1", false, "~", "x")
                .contains(&"-T".into())
        );
    }
}
