//! The harness of tests that run a real binary: a [`TempHome`], commands with a clean
//! environment (and the fake model, if the test has one), `tern gateway` started as a child
//! process on a free port ([`Running`]), and what a test reads of a finished command.
//!
//! The binary's path is passed in by the test crate: `CARGO_BIN_EXE_tern` exists only in
//! tern-cli's tests.

use std::io::{BufRead, BufReader};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use serde_json::Value;
use tern_fake_model::FakeModel;

use crate::home::TempHome;
use crate::wait::{PATIENCE, wait_until_blocking};

/// Variables of the test's own environment that would change what `tern` does.
const CLEARED: [&str; 9] = [
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "TERN_MODEL",
    "TERN_SERVER_KEY",
    "TERN_LOG",
    "TERN_INBOX_URL",
    "TERN_INBOX_TOKEN",
    "TERN_INBOX_KEY",
    "TERN_API_KEY",
];

/// A [`TempHome`] (which it dereferences to), the binary run in it, and the fake model if
/// the test has one.
pub struct Env {
    home: TempHome,
    /// The binary (`tern`) its commands run.
    binary: PathBuf,
    fake: Option<FakeModel>,
    /// The umask the binary runs with; the test's own when `None`.
    umask: Option<u32>,
}

impl Deref for Env {
    type Target = TempHome;

    fn deref(&self) -> &TempHome {
        &self.home
    }
}

impl Env {
    /// `binary` in a new temporary home, without a model: the binary is given none.
    pub fn new(binary: impl Into<PathBuf>) -> Self {
        Env {
            home: TempHome::new(),
            binary: binary.into(),
            fake: None,
            umask: None,
        }
    }

    /// [`Env::new`] with the fake model, which every command of this env uses.
    pub async fn with_model(binary: impl Into<PathBuf>) -> Self {
        Env {
            fake: Some(FakeModel::start().await.unwrap()),
            ..Env::new(binary)
        }
    }

    /// Every command of this env runs with `umask`, whatever the test's own.
    pub fn with_umask(mut self, umask: u32) -> Self {
        self.umask = Some(umask);
        self
    }

    pub fn fake(&self) -> &FakeModel {
        self.fake.as_ref().expect("an Env::with_model")
    }

    /// The binary with this home, the working directory, no stdin, and the fake model (if
    /// any); nothing of the test's own environment that would change it.
    pub fn tern(&self) -> Command {
        let mut c = Command::new(&self.binary);
        for k in CLEARED {
            c.env_remove(k);
        }
        if let Some(fake) = &self.fake {
            c.env("OPENAI_BASE_URL", fake.base_url())
                .env("TERN_MODEL", "fake-model");
        }
        c.env("TERN_HOME", self.home())
            .current_dir(self.work())
            .stdin(Stdio::null());
        if let Some(mask) = self.umask {
            use std::os::unix::process::CommandExt;
            let mode = nix::sys::stat::Mode::from_bits_truncate(mask);
            // SAFETY: umask(2) is async-signal-safe and the closure allocates nothing.
            unsafe {
                c.pre_exec(move || {
                    nix::sys::stat::umask(mode);
                    Ok(())
                });
            }
        }
        c
    }

    /// `tern ARGS…` to completion.
    pub fn run(&self, args: &[&str]) -> Output {
        self.tern().args(args).output().unwrap()
    }

    /// `tern inbox ARGS…` to completion.
    pub fn inbox(&self, args: &[&str]) -> Output {
        self.tern().arg("inbox").args(args).output().unwrap()
    }

    /// Starts `tern gateway` on a free port of loopback; see [`Env::gateway_on`].
    pub fn gateway(&self) -> Running {
        self.gateway_on("127.0.0.1:0")
    }

    /// [`Env::gateway`] with more arguments and environment variables.
    pub fn gateway_with(&self, args: &[&str], env: &[(&str, &str)]) -> Running {
        self.start_gateway("127.0.0.1:0", args, env)
    }

    /// Starts `tern gateway --listen LISTEN` with JSON logs and waits until it listens and
    /// has written its admin file (`inbox-admin.json`) for this start.
    pub fn gateway_on(&self, listen: &str) -> Running {
        self.start_gateway(listen, &[], &[])
    }

    fn start_gateway(&self, listen: &str, args: &[&str], env: &[(&str, &str)]) -> Running {
        let admin = self.home().join("inbox-admin.json");
        let _ = std::fs::remove_file(&admin);
        let mut child = self
            .tern()
            .args(["gateway", "--listen", listen, "--log-format", "json"])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let l2 = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && v["message"] == "tern gateway listening"
                {
                    let _ = tx.send(Some(v["addr"].as_str().unwrap_or_default().to_owned()));
                }
                l2.lock().unwrap().push(line);
            }
            let _ = tx.send(None);
        });
        let logs = || lines.lock().unwrap().join("\n");
        let addr = match rx.recv_timeout(PATIENCE) {
            Ok(Some(addr)) => addr,
            Ok(None) => panic!("the gateway exited:\n{}", logs()),
            Err(_) => panic!("the gateway did not start:\n{}", logs()),
        };
        // The admin file is written before the gateway accepts connections; wait for it all
        // the same (the file, not a time, is what is waited for).
        wait_until_blocking(PATIENCE, Duration::from_millis(20), || {
            admin_file(&admin)
                .map(drop)
                .ok_or_else(|| format!("waiting for {}:\n{}", admin.display(), logs()))
        });
        Running {
            child,
            url: format!("http://{addr}"),
            stderr: lines,
        }
    }

    /// The API key the gateway's first start wrote to `gateway.key` (an admin key).
    pub fn key(&self) -> String {
        std::fs::read_to_string(self.home().join("gateway.key"))
            .unwrap()
            .trim()
            .to_owned()
    }

    /// A new API key named `name` (`tern keys create NAME`), an agent's or, with `admin`, an
    /// admin's.
    pub fn create_key(&self, name: &str, admin: bool) -> String {
        let mut args = vec!["keys", "create", name];
        if admin {
            args.push("--admin");
        }
        let out = self.run(&args);
        assert_ok(&out);
        stdout(&out).trim().to_owned()
    }

    /// The local admin's reviewer token, from `inbox-admin.json`.
    pub fn admin_token(&self) -> String {
        let v = admin_file(&self.home().join("inbox-admin.json")).expect("inbox-admin.json");
        v["token"].as_str().unwrap().to_owned()
    }
}

/// The admin file, once it is whole (it holds the URL and the token).
fn admin_file(path: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    (v["url"].is_string() && v["token"].is_string()).then_some(v)
}

/// A running `tern gateway`, killed when dropped.
pub struct Running {
    pub child: Child,
    /// `http://ADDR`
    pub url: String,
    /// Its stderr so far, a line an entry.
    pub stderr: Arc<Mutex<Vec<String>>>,
}

impl Running {
    pub fn port(&self) -> u16 {
        self.url.rsplit_once(':').unwrap().1.parse().unwrap()
    }

    /// Its stderr so far.
    pub fn logs(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
pub fn assert_exit(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(o),
        stderr(o)
    );
}

#[track_caller]
pub fn assert_ok(o: &Output) {
    assert!(
        o.status.success(),
        "stdout:\n{}\nstderr:\n{}",
        stdout(o),
        stderr(o)
    );
}
