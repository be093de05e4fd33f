//! The ssh backend against a real OpenSSH server: each test starts a private `sshd` on
//! 127.0.0.1 (its own host key, authorized key and config in a temporary directory; the
//! remote user is the current user, whose remote `HOME` is a temporary directory too, so the
//! remote `~/.tern/procs` is inspectable) and the system `ssh` client talks to it.
//!
//! Without `/usr/sbin/sshd` these tests fail (they do not skip): `.ci/run` installs
//! `openssh-server` and `openssh-client`.

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use support::*;
use tern_procs::ssh::SshTarget;
use tern_procs::{Backend, ManagerConfig, ProcError, ProcStatus, ProcessManager};
use tern_tools::{DenyAll, Registry, ToolContext, ToolLimits};
use tokio_util::sync::CancellationToken;

const LONG: Duration = Duration::from_secs(120);
const SSHD: &str = "/usr/sbin/sshd";

/// A private sshd on loopback, killed on drop (with every remote process group it ran).
struct Sshd {
    dir: tempfile::TempDir,
    port: u16,
    child: Child,
}

fn keygen(path: &Path) {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run ssh-keygen (install openssh-client): {e}"));
    assert!(out.status.success(), "ssh-keygen: {out:?}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Sshd {
    fn start() -> Self {
        assert!(
            Path::new(SSHD).exists(),
            "the ssh backend's tests need an OpenSSH server at {SSHD} \
             (apt-get install openssh-server openssh-client); .ci/run installs it"
        );
        // As root, sshd insists on its privilege separation directory, which a service
        // manager would create; running as another user it is not used.
        if unsafe { libc::geteuid() } == 0 && !Path::new("/run/sshd").exists() {
            std::fs::create_dir_all("/run/sshd").unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(&d.join("host_key"));
        keygen(&d.join("client_key"));
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys")).unwrap();
        std::fs::create_dir(d.join("home")).unwrap();
        // The port may be taken between the probe and sshd's bind: try a few.
        for _ in 0..5 {
            let port = free_port();
            let config = d.join("sshd_config");
            std::fs::write(
                &config,
                format!(
                    "Port {port}\n\
                     ListenAddress 127.0.0.1\n\
                     HostKey {d}/host_key\n\
                     AuthorizedKeysFile {d}/authorized_keys\n\
                     PasswordAuthentication no\n\
                     KbdInteractiveAuthentication no\n\
                     PermitRootLogin prohibit-password\n\
                     StrictModes no\n\
                     UsePAM no\n\
                     PidFile none\n\
                     SetEnv HOME={d}/home\n",
                    d = d.display()
                ),
            )
            .unwrap();
            let mut child = Command::new(SSHD)
                .args(["-D", "-e", "-f"])
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {SSHD}: {e}"));
            // Its log: "Server listening on …" once it accepts connections.
            let stderr = child.stderr.take().unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut lines = BufReader::new(stderr).lines();
                let mut seen = String::new();
                for line in lines.by_ref().map_while(Result::ok) {
                    seen.push_str(&line);
                    seen.push('\n');
                    if line.contains("Server listening") {
                        let _ = tx.send(Ok(()));
                        // Keep draining, so sshd never blocks on its log.
                        for _ in lines.by_ref() {}
                        return;
                    }
                }
                let _ = tx.send(Err(seen));
            });
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(Ok(())) => return Sshd { dir, port, child },
                Ok(Err(log)) if log.contains("Address already in use") => {
                    let _ = child.wait();
                }
                other => {
                    let _ = child.kill();
                    panic!("sshd did not start: {other:?}");
                }
            }
        }
        panic!("sshd found no free port");
    }

    /// The remote user's home (its `HOME` in ssh sessions).
    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn target(&self) -> SshTarget {
        let d = self.dir.path();
        SshTarget {
            host: "127.0.0.1".into(),
            port: Some(self.port),
            identity_file: Some(d.join("client_key")),
            options: vec![
                format!("UserKnownHostsFile={}", d.join("known_hosts").display()),
                "GlobalKnownHostsFile=/dev/null".into(),
                "StrictHostKeyChecking=accept-new".into(),
                "IdentitiesOnly=yes".into(),
            ],
            ..SshTarget::default()
        }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // Remote processes a failed test left (they are local here): their groups.
        if let Ok(rd) = std::fs::read_dir(self.home().join(".tern/procs")) {
            for dir in rd.flatten() {
                if let Some(pgid) = std::fs::read_to_string(dir.path().join("pgid"))
                    .ok()
                    .and_then(|s| s.trim().parse::<i32>().ok())
                {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pgid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ssh_config(root: &Path, target: SshTarget) -> ManagerConfig {
    let mut cfg = config(root);
    cfg.backend = Backend::Ssh(target);
    cfg
}

async fn ssh_manager(root: &Path, sshd: &Sshd) -> ProcessManager {
    ProcessManager::open(ssh_config(root, sshd.target()))
        .await
        .unwrap()
}

/// The pids of processes whose command line contains `needle` (this machine is the host).
fn pids_with(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(e.path().join("cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(needle)
            && !gone(pid)
        {
            out.push(pid);
        }
    }
    out
}

fn unique(what: &str) -> String {
    let mut b = [0u8; 6];
    getrandom::fill(&mut b).unwrap();
    format!(
        "{what}-{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    )
}

#[tokio::test]
async fn a_command_runs_on_the_host_with_its_output_and_exit_code() {
    let sshd = Sshd::start();
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = ssh_manager(d.path(), &sshd).await;
    let p = mgr
        .spawn(req(
            r#"echo "in $PWD"; echo 'it'"'"'s quoted'; echo oops >&2; exit 3"#,
            Path::new(""),
            false,
        ))
        .await
        .unwrap();
    assert_eq!(
        p.host.as_deref(),
        Some(format!("ssh://127.0.0.1:{}", sshd.port).as_str())
    );
    assert_eq!(p.workdir, Path::new("~"));
    let w = mgr
        .wait(&p.id, LONG, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(exit_code(&w.info.status), Some(3));
    let out = mgr.poll(&p.id).await.unwrap().output;
    // The remote user's home (its HOME, as sshd set it), not this process's directory.
    assert!(
        out.contains(&format!("in {}\n", sshd.home().display())),
        "{out:?}"
    );
    assert!(
        out.contains("it's quoted\n") && out.contains("oops\n"),
        "{out:?}"
    );
    // ssh's own chatter (known-hosts warnings) stays out of the log.
    assert!(!out.contains("Warning"), "{out:?}");
    // The remote process directory is removed at the exit.
    assert!(!sshd.home().join(".tern/procs").join(&p.id).exists());
    // The listing shows where it ran; the spec on disk says so too.
    let listed = serde_json::to_value(&mgr.list().await.unwrap()[0]).unwrap();
    assert_eq!(listed["host"], format!("ssh://127.0.0.1:{}", sshd.port));
    let meta: serde_json::Value = serde_json::from_slice(
        &std::fs::read(d.path().join("procs").join(&p.id).join("meta.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(meta["backend"]["kind"], "ssh");
    assert_eq!(meta["backend"]["port"], sshd.port);

    // A working directory on the host, relative to the remote home.
    std::fs::create_dir(sshd.home().join("proj dir")).unwrap();
    let p = mgr
        .spawn(req("pwd", Path::new("proj dir"), false))
        .await
        .unwrap();
    assert_eq!(p.workdir, Path::new("~/proj dir"));
    mgr.wait(&p.id, LONG, &CancellationToken::new())
        .await
        .unwrap();
    let out = mgr.poll(&p.id).await.unwrap().output;
    assert_eq!(out, format!("{}\n", sshd.home().join("proj dir").display()));
}

#[tokio::test]
async fn stdin_over_ssh_submit_and_close() {
    let sshd = Sshd::start();
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = ssh_manager(d.path(), &sshd).await;
    let p = mgr
        .spawn(req(
            r#"while IFS= read -r l; do echo "got $l"; done; echo "eof"; exit 4"#,
            Path::new(""),
            false,
        ))
        .await
        .unwrap();
    mgr.submit(&p.id, "one").await.unwrap();
    assert_eq!(poll_until(&mgr, &p.id, "got one\n").await, "got one\n");
    mgr.write(&p.id, "tw").await.unwrap();
    mgr.submit(&p.id, "o ~. ~?").await.unwrap();
    // `~.` is data, not ssh's disconnect (no escape character).
    assert_eq!(
        poll_until(&mgr, &p.id, "got two ~. ~?\n").await,
        "got two ~. ~?\n"
    );
    mgr.close(&p.id).await.unwrap();
    let w = mgr
        .wait(&p.id, LONG, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(exit_code(&w.info.status), Some(4));
    assert_eq!(mgr.poll(&p.id).await.unwrap().output, "eof\n");
}

#[tokio::test]
async fn python_in_a_remote_pty() {
    let sshd = Sshd::start();
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = ssh_manager(d.path(), &sshd).await;
    let p = mgr
        .spawn(req(
            "test -t 0 && echo tty:$TERM; python3 -i -q",
            Path::new(""),
            true,
        ))
        .await
        .unwrap();
    assert!(p.pty);
    // A terminal on the remote side, of the type the local PTY announces.
    let out = poll_until(&mgr, &p.id, ">>> ").await;
    assert!(out.contains("tty:xterm-256color\n"), "{out:?}");
    mgr.submit(&p.id, "print(6*7)").await.unwrap();
    let out = poll_until(&mgr, &p.id, "42").await;
    assert!(out.lines().any(|l| l == "42"), "{out:?}");
    assert!(!out.contains('\x1b') && !out.contains('\r'), "{out:?}");
    // Ctrl-C reaches the remote program (a KeyboardInterrupt, not the end of the session).
    mgr.write(&p.id, "\x03").await.unwrap();
    poll_until(&mgr, &p.id, "KeyboardInterrupt").await;
    mgr.submit(&p.id, "print('still', 'here')").await.unwrap();
    poll_until(&mgr, &p.id, "still here").await;
    // A person attaches (as `tern ps attach` does): keys reach the remote program and its
    // answer comes back on the stream; closing the stream detaches, the program runs on.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let obs = tern_procs::Observer::new(d.path().join("procs"));
        let mut att = obs.attach(&p.id).await.unwrap();
        att.stream.write_all(b"print(111 * 3)\r").await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        tokio::time::timeout(LONG, async {
            while !String::from_utf8_lossy(&seen).contains("333") {
                let n = att.stream.read(&mut buf).await.unwrap();
                assert!(
                    n > 0,
                    "the stream ended: {:?}",
                    String::from_utf8_lossy(&seen)
                );
                seen.extend_from_slice(&buf[..n]);
            }
        })
        .await
        .unwrap();
    }
    assert!(mgr.get(&p.id).await.unwrap().status.is_running());
    // `close` is the terminal's end of input, across ssh too.
    mgr.close(&p.id).await.unwrap();
    let w = mgr
        .wait(&p.id, LONG, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(exit_code(&w.info.status), Some(0));
}

#[tokio::test]
async fn kill_reaches_the_remote_process_group() {
    let sshd = Sshd::start();
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = ssh_manager(d.path(), &sshd).await;
    let marker = unique("tern-ssh-kill");
    let term = d.path().join("got-term");
    let bg = d.path().join("bg.pid");
    // A TERM trap in the command and a background child in its group.
    let cmd = format!(
        "trap 'echo term > {term}; exit 0' TERM; sleep 300 & echo $! > {bg}; echo ready; \
         while :; do sleep 0.1; done # {marker}",
        term = term.display(),
        bg = bg.display(),
    );
    let p = mgr.spawn(req(&cmd, Path::new(""), false)).await.unwrap();
    poll_until(&mgr, &p.id, "ready").await;
    let sleeper: i32 = std::fs::read_to_string(&bg)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!gone(sleeper));
    assert!(!pids_with(&marker).is_empty());

    let started = std::time::Instant::now();
    let k = mgr.kill(&p.id).await.unwrap();
    assert!(k.signalled);
    // TERM reached the remote command (its trap ran) and its group (the background sleep).
    assert_eq!(std::fs::read_to_string(&term).unwrap(), "term\n");
    assert!(gone(sleeper), "the remote background child survived");
    // The command's status after its trap, passed on by the remote shell and ssh.
    assert_eq!(exit_code(&k.info.status), Some(0));
    assert!(started.elapsed() < Duration::from_secs(30));
    eventually("every process of the command to end", || async {
        pids_with(&marker).is_empty().then_some(())
    })
    .await;
    assert!(!sshd.home().join(".tern/procs").join(&p.id).exists());

    // A command that ignores TERM gets KILL after the grace period, on the host.
    let marker = unique("tern-ssh-stubborn");
    let bg = d.path().join("bg2.pid");
    let cmd = format!(
        "trap '' TERM; sleep 300 & echo $! > {bg}; echo ready; wait # {marker}",
        bg = bg.display()
    );
    let p = mgr.spawn(req(&cmd, Path::new(""), true)).await.unwrap();
    poll_until(&mgr, &p.id, "ready").await;
    let sleeper: i32 = std::fs::read_to_string(&bg)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let k = mgr.kill(&p.id).await.unwrap();
    assert!(k.signalled);
    assert!(!k.info.status.is_running(), "{:?}", k.info.status);
    eventually("the stubborn command to be killed", || async {
        (gone(sleeper) && pids_with(&marker).is_empty()).then_some(())
    })
    .await;
    assert!(!sshd.home().join(".tern/procs").join(&p.id).exists());
    // Killing what has exited is answered as such.
    assert!(!mgr.kill(&p.id).await.unwrap().signalled);
}

#[tokio::test]
async fn a_kill_right_after_the_spawn_still_reaches_the_host() {
    let sshd = Sshd::start();
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = ssh_manager(d.path(), &sshd).await;
    let marker = unique("tern-ssh-early");
    let p = mgr
        .spawn(req(&format!("sleep 300; : {marker}"), Path::new(""), false))
        .await
        .unwrap();
    // No wait for any output: the remote shell may not have recorded its group yet.
    let k = mgr.kill(&p.id).await.unwrap();
    assert!(k.signalled);
    // The TERM reached the host (a remote shell ending with 143), and did not just end the
    // local ssh client (that would be signal 15 here, the remote sleep left running).
    assert!(
        matches!(
            k.info.status,
            ProcStatus::Exited {
                exit_code: Some(143),
                signal: None,
                ..
            }
        ),
        "{:?}",
        k.info.status
    );
    eventually("the remote sleep to end", || async {
        pids_with(&marker).is_empty().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_restarted_manager_adopts_ssh_processes() {
    let sshd = Sshd::start();
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = ssh_manager(d.path(), &sshd).await;
    let pipe = mgr
        .spawn(req(
            r#"while IFS= read -r l; do echo "got $l"; done"#,
            Path::new(""),
            false,
        ))
        .await
        .unwrap();
    let pty = mgr
        .spawn(req("python3 -i -q", Path::new(""), true))
        .await
        .unwrap();
    mgr.submit(&pipe.id, "before").await.unwrap();
    poll_until(&mgr, &pipe.id, "got before\n").await;
    poll_until(&mgr, &pty.id, ">>> ").await;
    // The gateway goes away (as after a kill -9: nothing is stopped).
    drop(mgr);

    let mgr = ssh_manager(d.path(), &sshd).await;
    let list = mgr.list().await.unwrap();
    assert_eq!(list.len(), 2);
    for p in &list {
        assert!(p.status.is_running(), "{p:?}");
        assert_eq!(
            p.host.as_deref(),
            Some(format!("ssh://127.0.0.1:{}", sshd.port).as_str())
        );
    }
    mgr.submit(&pipe.id, "after").await.unwrap();
    poll_until(&mgr, &pipe.id, "got after\n").await;
    mgr.submit(&pty.id, "print(6*7)").await.unwrap();
    poll_until(&mgr, &pty.id, "42").await;
    // Kills go through the adopted supervisors, which know the host.
    for p in &list {
        let k = mgr.kill(&p.id).await.unwrap();
        assert!(k.signalled);
        assert!(!k.info.status.is_running(), "{:?}", k.info.status);
    }
}

#[tokio::test]
async fn unreachable_hosts_and_missing_directories_fail_the_spawn() {
    let sshd = Sshd::start();
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());

    // Nothing listens on that port.
    let mut target = sshd.target();
    let closed = free_port();
    target.port = Some(closed);
    let mgr = ProcessManager::open(ssh_config(d.path(), target))
        .await
        .unwrap();
    let e = mgr
        .spawn(req("echo never", Path::new(""), false))
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ProcError::Spawn(_)), "{e:?}");
    assert!(
        msg.contains(&format!("cannot reach ssh://127.0.0.1:{closed}"))
            && msg.contains("Connection refused"),
        "{msg}"
    );
    assert!(mgr.list().await.unwrap().is_empty());
    drop(mgr);

    // The host answers, the directory is not there.
    let mgr = ssh_manager(d.path(), &sshd).await;
    let e = mgr
        .spawn(req("echo never", Path::new("/nonexistent/dir"), false))
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("working directory does not exist on") && msg.contains("/nonexistent/dir"),
        "{msg}"
    );
    assert!(mgr.list().await.unwrap().is_empty());
    // No process directory is left behind.
    let left: Vec<_> = std::fs::read_dir(d.path().join("procs"))
        .unwrap()
        .flatten()
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // An unknown host key, and a key the host does not accept: ssh cannot ask, the error
    // says what to do.
    let mut strict = sshd.target();
    strict.options = vec![
        format!(
            "UserKnownHostsFile={}",
            d.path().join("empty_known_hosts").display()
        ),
        "GlobalKnownHostsFile=/dev/null".into(),
        "StrictHostKeyChecking=yes".into(),
        "IdentitiesOnly=yes".into(),
    ];
    let mut stranger = sshd.target();
    let other_key = d.path().join("other_key");
    keygen(&other_key);
    stranger.identity_file = Some(other_key);
    for (target, says) in [
        (strict, "StrictHostKeyChecking=accept-new"),
        (stranger, "set identity_file"),
    ] {
        let mgr = ProcessManager::open(ssh_config(d.path(), target))
            .await
            .unwrap();
        let e = mgr
            .spawn(req("echo never", Path::new(""), false))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{e}");
    }

    // A bad target is refused when the manager opens.
    let mut bad = sshd.target();
    bad.host = "-oProxyCommand=touch /tmp/x".into();
    let e = ProcessManager::open(ssh_config(d.path(), bad))
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("ssh backend"), "{e}");
}

#[tokio::test]
async fn a_lost_connection_exits_255_with_ssh_s_message_in_the_log() {
    let sshd = Sshd::start();
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mgr = ssh_manager(d.path(), &sshd).await;
    // The command kills the sshd process serving its own connection: the parent of the
    // remote shell (whose pid is `$PPID` of `bash -c`), field 4 of its /proc stat. Only once
    // its first line arrived here: sshd could not forward it after the kill.
    let p = mgr
        .spawn(req(
            "echo started; read -r go; read -r _ _ _ sshd _ < /proc/$PPID/stat; kill -9 $sshd; \
             sleep 1",
            Path::new(""),
            false,
        ))
        .await
        .unwrap();
    poll_until(&mgr, &p.id, "started\n").await;
    mgr.submit(&p.id, "go").await.unwrap();
    let w = mgr
        .wait(&p.id, LONG, &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(exit_code(&w.info.status), Some(255));
    let out = mgr.poll(&p.id).await.unwrap().output;
    assert!(out.contains("closed by remote host"), "{out:?}");
}

#[tokio::test]
async fn the_terminal_tool_runs_background_commands_on_the_host() {
    let sshd = Sshd::start();
    let d = tempfile::tempdir().unwrap();
    let _reap = Reap(d.path().to_path_buf());
    let mut target = sshd.target();
    target.workdir = Some("~/projects".into());
    std::fs::create_dir_all(sshd.home().join("projects/app")).unwrap();
    let mgr = Arc::new(
        ProcessManager::open(ssh_config(d.path(), target))
            .await
            .unwrap(),
    );
    let mut registry = Registry::builtin();
    tern_procs::tools::register(&mut registry, Arc::clone(&mgr));
    // The session's local working directory has no `app`: the remote one has.
    let local = d.path().join("local");
    std::fs::create_dir(&local).unwrap();
    // The default sandbox, with the processes' directory protected as `$TERN_HOME` is: the
    // local side (the ssh client) runs confined, with its environment scrubbed.
    let mut policy = tern_sandbox::Policy::new(tern_sandbox::Mode::WorkspaceWrite);
    policy.protected_paths = vec![d.path().join("procs")];
    let sandbox = Arc::new(tern_sandbox::Sandbox::new(policy));
    let ctx = || ToolContext {
        session_id: "sess-a".into(),
        call_id: "call-1".into(),
        call_seq: 0,
        workdir: local.clone(),
        cancel: CancellationToken::new(),
        approver: Arc::new(DenyAll {
            reason: "nobody is here".into(),
        }),
        limits: ToolLimits {
            sandbox: sandbox.clone(),
            ..ToolLimits::default()
        },
        preapproved: false,
        subagents: None,
        toolsets: Default::default(),
        report: Default::default(),
    };
    let toolsets = ["terminal".to_owned()];
    let call = |tool: &'static str, args: serde_json::Value| {
        let registry = &registry;
        let toolsets = &toolsets;
        let ctx = ctx();
        async move { registry.call(tool, &args.to_string(), toolsets, ctx).await }
    };
    let v = call(
        "terminal",
        json!({"command": "pwd", "workdir": "app", "background": true}),
    )
    .await
    .unwrap();
    let id = v["session_id"].as_str().unwrap().to_owned();
    let w = call("process", json!({"action": "wait", "session_id": id}))
        .await
        .unwrap();
    assert_eq!(w["exit_code"], 0, "{w}");
    assert_eq!(w["host"], format!("ssh://127.0.0.1:{}", sshd.port));
    assert_eq!(w["workdir"], "~/projects/app");
    let p = call("process", json!({"action": "poll", "session_id": id}))
        .await
        .unwrap();
    assert_eq!(
        p["output"],
        format!("{}\n", sshd.home().join("projects/app").display())
    );

    // Dangerous commands still need approval (refused here), before anything starts.
    let e = call(
        "terminal",
        json!({"command": "rm -rf build", "background": true}),
    )
    .await
    .unwrap_err();
    assert!(e.0.contains("denied"), "{e}");
    assert_eq!(mgr.list().await.unwrap().len(), 1);
    // The system prompt says where background processes run.
    let lines: Vec<&str> = registry.prompt_lines(&toolsets).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("ssh://127.0.0.1:{}", sshd.port))),
        "{lines:?}"
    );
    // So does the `workdir` parameter's description.
    let terminal = registry.specs(&toolsets).find(|s| s.name == "terminal");
    let workdir = &terminal.unwrap().parameters["properties"]["workdir"]["description"];
    assert!(
        workdir
            .as_str()
            .is_some_and(|d| d.contains(&format!("ssh://127.0.0.1:{}", sshd.port))),
        "{workdir}"
    );
    // Foreground commands stay on this machine.
    let v = call("terminal", json!({"command": "pwd"})).await.unwrap();
    assert_eq!(v["output"], format!("{}\n", local.display()));
}
