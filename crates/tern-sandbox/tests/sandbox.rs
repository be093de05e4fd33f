//! Real commands under each policy, checked with the file system (and a loopback listener
//! for the network). Each test needs Landlock; where the kernel lacks it they check that
//! nothing runs instead.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on a broken setup.

use std::ffi::OsString;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tern_sandbox::{Level, Mode, Policy, Sandbox, SandboxError, Support};

struct Fixture {
    _dir: tempfile::TempDir,
    workspace: PathBuf,
    outside: PathBuf,
    home: PathBuf,
    extra: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let workspace = root.join("ws");
    let outside = root.join("outside");
    let home = root.join("tern-home");
    let extra = root.join("extra");
    for d in [&workspace, &outside, &home, &extra] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(outside.join("keep.txt"), "precious").unwrap();
    std::fs::set_permissions(
        outside.join("keep.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    std::fs::write(workspace.join("in.txt"), "mine").unwrap();
    std::fs::write(home.join("inbox-admin.json"), "{\"token\":\"secret\"}").unwrap();
    Fixture {
        _dir: dir,
        workspace,
        outside,
        home,
        extra,
    }
}

fn policy(mode: Mode, f: &Fixture) -> Policy {
    let mut p = Policy::new(mode);
    p.protected_paths = vec![f.home.clone()];
    p
}

fn landlock() -> bool {
    matches!(Support::probe(), Support::Landlock { .. })
}

/// Runs `script` with `bash -c` in `cwd` as tern does: the prepared environment, the
/// confinement applied between fork and exec.
fn run_in(sandbox: &Sandbox, workspace: &Path, cwd: &Path, level: Level, script: &str) -> Output {
    let prepared = sandbox
        .prepare(workspace, level, std::env::vars_os())
        .unwrap();
    let mut cmd = Command::new("/bin/bash");
    cmd.arg("-c").arg(script).current_dir(cwd).env_clear();
    cmd.envs(prepared.env.iter().map(|(k, v)| (k, v)));
    let c = prepared.confinement.clone();
    // SAFETY: `apply` makes raw syscalls only.
    unsafe {
        cmd.pre_exec(move || c.apply());
    }
    cmd.output().unwrap()
}

fn run(sandbox: &Sandbox, f: &Fixture, script: &str) -> Output {
    run_in(
        sandbox,
        &f.workspace,
        &f.workspace,
        Level::Sandboxed,
        script,
    )
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn workspace_write_writes_the_workspace_and_nothing_else() {
    if !landlock() {
        return;
    }
    let f = fixture();
    let sb = Sandbox::new(policy(Mode::WorkspaceWrite, &f));
    let o = run(
        &sb,
        &f,
        "echo new > new.txt && mkdir d && mv in.txt d/ && echo ok",
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(f.workspace.join("new.txt")).unwrap(),
        "new\n"
    );
    assert!(f.workspace.join("d/in.txt").exists());

    let o = run(&sb, &f, &format!("rm -rf {}", f.outside.display()));
    assert!(!o.status.success());
    assert!(text(&o).contains("Permission denied"), "{}", text(&o));
    assert_eq!(
        std::fs::read_to_string(f.outside.join("keep.txt")).unwrap(),
        "precious"
    );
    for script in [
        format!("echo x > {}/new.txt", f.outside.display()),
        format!(": > {}/keep.txt", f.outside.display()),
        format!("truncate -s0 {}/keep.txt", f.outside.display()),
        format!("chmod 777 {}/keep.txt", f.outside.display()),
        format!("chmod o+w {}/keep.txt", f.outside.display()),
        format!("chmod u+s {}/keep.txt", f.outside.display()),
        format!(
            "python3 -c 'import os; os.chmod(\"{}/keep.txt\", 0o666)'",
            f.outside.display()
        ),
        format!("chown 0:0 {}/keep.txt", f.outside.display()),
        format!("mv {0} {0}.gone", f.outside.display()),
        format!("ln -s /etc {}/link", f.outside.display()),
        "echo x > /tmp/tern-sandbox-test-escape".to_owned(),
    ] {
        let o = run(&sb, &f, &script);
        assert!(!o.status.success(), "{script} succeeded: {}", text(&o));
    }
    assert_eq!(
        std::fs::read_to_string(f.outside.join("keep.txt")).unwrap(),
        "precious"
    );
    assert!(!f.outside.join("new.txt").exists());
    assert!(!Path::new("/tmp/tern-sandbox-test-escape").exists());
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(f.outside.join("keep.txt"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o7777, 0o644, "the mode changed: {mode:o}");
    // A narrowing chmod (+x, 600) in the workspace is ordinary work and stays possible.
    let o = run(&sb, &f, "chmod +x new.txt && chmod 600 d/in.txt && echo ok");
    assert!(o.status.success(), "{}", text(&o));
    // Reading outside is fine; so is /dev/null and the private TMPDIR.
    let o = run(
        &sb,
        &f,
        &format!(
            "cat {}/keep.txt; echo x > /dev/null; echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"",
            f.outside.display()
        ),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "precioust\n");
}

#[test]
fn writable_roots_are_writable() {
    if !landlock() {
        return;
    }
    let f = fixture();
    let mut p = policy(Mode::WorkspaceWrite, &f);
    p.writable_roots = vec![f.extra.clone()];
    let sb = Sandbox::new(p);
    let o = run(&sb, &f, &format!("echo x > {}/e.txt", f.extra.display()));
    assert!(o.status.success(), "{}", text(&o));
    assert!(f.extra.join("e.txt").exists());
}

#[test]
fn read_only_writes_only_its_tmpdir() {
    if !landlock() {
        return;
    }
    let f = fixture();
    let sb = Sandbox::new(policy(Mode::ReadOnly, &f));
    let o = run(&sb, &f, "echo x > new.txt");
    assert!(!o.status.success());
    assert!(!f.workspace.join("new.txt").exists());
    let o = run(&sb, &f, "rm in.txt");
    assert!(!o.status.success());
    assert!(f.workspace.join("in.txt").exists());
    let o = run(
        &sb,
        &f,
        "echo \"$TMPDIR\" && echo t > \"$TMPDIR/t\" && cat in.txt",
    );
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let tmp = out.lines().next().unwrap().to_owned();
    assert!(out.ends_with("mine"), "{out}");
    // The private temporary directory goes with the prepared command.
    assert!(!Path::new(&tmp).exists(), "{tmp} outlived its command");
}

#[test]
fn the_protected_home_is_neither_readable_nor_writable_in_any_mode() {
    if !landlock() {
        return;
    }
    let f = fixture();
    // Even with the workspace being the home's parent, and even escalated.
    let parent = f.home.parent().unwrap().to_path_buf();
    for (mode, level) in [
        (Mode::ReadOnly, Level::Sandboxed),
        (Mode::WorkspaceWrite, Level::Sandboxed),
        (Mode::WorkspaceWrite, Level::Escalated),
    ] {
        let sb = Sandbox::new(policy(mode, &f));
        let home = f.home.display();
        for script in [
            format!("cat {home}/inbox-admin.json"),
            format!("ls {home}"),
            format!("echo x > {home}/new"),
            format!("rm {home}/inbox-admin.json"),
            format!("cd {home}/.. && cat tern-home/inbox-admin.json"),
            format!("ln -s {home} link; cat link/inbox-admin.json"),
            format!("cp -r {home} copy && cat copy/inbox-admin.json"),
            format!("mv {home} {home}.moved"),
        ] {
            let o = run_in(&sb, &parent, &parent, level, &script);
            let out = text(&o);
            assert!(
                !out.contains("secret"),
                "{mode} {level:?}: {script} read the token: {out}"
            );
            assert!(!f.home.join("new").exists(), "{mode} {level:?}: {script}");
        }
        assert_eq!(
            std::fs::read_to_string(f.home.join("inbox-admin.json")).unwrap(),
            "{\"token\":\"secret\"}"
        );
    }
}

#[test]
fn escalated_writes_outside_but_not_into_the_home() {
    if !landlock() {
        return;
    }
    let f = fixture();
    let sb = Sandbox::new(policy(Mode::ReadOnly, &f));
    let o = run_in(
        &sb,
        &f.workspace,
        &f.workspace,
        Level::Escalated,
        &format!("echo x > {}/new.txt", f.outside.display()),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(f.outside.join("new.txt").exists());
}

#[test]
fn the_network_is_off_unless_allowed() {
    if !landlock() {
        return;
    }
    let f = fixture();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let off = Sandbox::new(policy(Mode::WorkspaceWrite, &f));
    let o = run(&off, &f, &connect);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains("connected"));
    // UDP too (seccomp refuses the socket itself).
    let o = run(&off, &f, "exec 3<>/dev/udp/127.0.0.1/53 && echo opened");
    assert!(!o.status.success(), "{}", text(&o));
    // Unix sockets stay usable.
    let o = run(
        &off,
        &f,
        "python3 -c 'import socket; a, b = socket.socketpair(); a.send(b\"u\"); print(b.recv(1).decode())' 2>&1 || echo nopython",
    );
    assert!(
        text(&o).contains('u') || text(&o).contains("nopython"),
        "{}",
        text(&o)
    );

    let mut p = policy(Mode::WorkspaceWrite, &f);
    p.network = true;
    let on = Sandbox::new(p);
    let o = run(&on, &f, &connect);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("connected"));

    // A socket file outside (a session bus, docker.sock, another program's control socket)
    // is out of reach with the network on or off: connecting would reach a program outside
    // the sandbox.
    let path = f.outside.join("ctl.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let script = format!(
        "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{}\"); print(\"reached\")' 2>&1; command -v python3 || echo nopython",
        path.display()
    );
    for sb in [&off, &on] {
        let o = run(sb, &f, &script);
        assert!(!text(&o).contains("reached"), "{}", text(&o));
    }
}

#[test]
fn secrets_are_not_in_the_environment() {
    if !landlock() {
        return;
    }
    let f = fixture();
    let sb = Sandbox::new(policy(Mode::WorkspaceWrite, &f));
    let vars: Vec<(OsString, OsString)> = vec![
        ("PATH".into(), std::env::var_os("PATH").unwrap_or_default()),
        ("TERN_HOME".into(), f.home.clone().into()),
        ("TERN_SERVER_KEY".into(), "sk-server".into()),
        ("OPENAI_API_KEY".into(), "sk-model".into()),
        ("KEEP_ME".into(), "visible".into()),
    ];
    let prepared = sb.prepare(&f.workspace, Level::Sandboxed, vars).unwrap();
    let o = Command::new("/usr/bin/env")
        .env_clear()
        .envs(prepared.env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let out = text(&o);
    assert!(out.contains("KEEP_ME=visible"));
    for secret in ["TERN_HOME", "sk-server", "sk-model"] {
        assert!(!out.contains(secret), "{secret} leaked: {out}");
    }
}

#[test]
fn a_command_cannot_read_the_parents_environment_or_signal_it() {
    if !landlock() {
        return;
    }
    let f = fixture();
    let sb = Sandbox::new(policy(Mode::WorkspaceWrite, &f));
    // What the gateway does at start: its /proc files are no longer readable by the
    // commands it runs (Landlock alone lets some kernels read a parent's environ).
    tern_sandbox::harden_current_process().unwrap();
    let me = std::process::id();
    for file in ["environ", "maps", "mem"] {
        let o = run(&sb, &f, &format!("head -c 64 /proc/{me}/{file} | wc -c"));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            "0",
            "/proc/{me}/{file} was readable: {}",
            text(&o)
        );
    }
    if let Support::Landlock { abi } = Support::probe()
        && *abi >= 6
    {
        // Signal 0 only asks whether a signal could be sent.
        let o = run(&sb, &f, &format!("kill -0 {me}"));
        assert!(!o.status.success(), "{}", text(&o));
    }
}

#[test]
fn full_access_is_unconfined() {
    let f = fixture();
    let sb = Sandbox::new(policy(Mode::FullAccess, &f));
    let o = run(
        &sb,
        &f,
        &format!("echo x > {}/new.txt", f.outside.display()),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(f.outside.join("new.txt").exists());
}

#[test]
fn without_landlock_nothing_runs_unless_full_access() {
    let missing = Support::Missing {
        reason: "no Landlock in this test".into(),
    };
    for mode in [Mode::ReadOnly, Mode::WorkspaceWrite] {
        let sb = Sandbox::with_support(Policy::new(mode), missing.clone());
        let e = sb
            .prepare(Path::new("/"), Level::Sandboxed, [])
            .err()
            .unwrap();
        assert!(matches!(e, SandboxError::Unavailable { .. }));
        assert!(e.to_string().contains("full-access"), "{e}");
        assert!(sb.file_confinement(Path::new("/")).is_err());
    }
    let sb = Sandbox::with_support(Policy::full_access(), missing);
    let p = sb.prepare(Path::new("/"), Level::Sandboxed, []).unwrap();
    assert!(p.confinement.is_none());
}

#[test]
fn file_tool_threads_are_confined_by_the_same_rules() {
    if !landlock() {
        return;
    }
    let f = fixture();
    let sb = Sandbox::new(policy(Mode::WorkspaceWrite, &f));
    let conf = sb.file_confinement(&f.workspace).unwrap();
    let (ws, outside, home) = (f.workspace.clone(), f.outside.clone(), f.home.clone());
    let results = std::thread::spawn(move || {
        conf.confine_current_thread().unwrap();
        (
            std::fs::write(ws.join("ok.txt"), "ok").is_ok(),
            std::fs::write(outside.join("no.txt"), "no").is_ok(),
            std::fs::read_to_string(outside.join("keep.txt")).is_ok(),
            std::fs::read_to_string(home.join("inbox-admin.json")).is_ok(),
        )
    })
    .join()
    .unwrap();
    assert_eq!(results, (true, false, true, false));
    // The calling thread (another one) is not confined.
    std::fs::write(f.outside.join("free.txt"), "x").unwrap();
}
