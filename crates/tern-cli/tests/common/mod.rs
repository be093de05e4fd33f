//! The harness the integration tests of the `tern` binary share: a temporary `$TERN_HOME`
//! (with a working directory and, if asked for, the fake model), `tern` commands with a
//! clean environment, `tern gateway` started as a child process on a free port, and small
//! HTTP and polling helpers.
//!
//! Every test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tern_fake_model::FakeModel;

/// The tag a decision appended to a session starts with.
pub const DECISION_TAG: &str = "[inbox decision]";

/// How long a gateway may take to start; it only turns a hang into a failure.
const START: Duration = Duration::from_secs(60);

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

/// A temporary directory with `home/` (`$TERN_HOME`) and `work/` (the commands' working
/// directory), and the fake model if the test has one.
pub struct Env {
    pub dir: tempfile::TempDir,
    fake: Option<FakeModel>,
    /// The umask `tern` runs with; the test's own when `None`.
    umask: Option<u32>,
}

impl Env {
    /// Without a model: `tern` is given none.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        Env {
            dir,
            fake: None,
            umask: None,
        }
    }

    /// With the fake model, which every `tern` command of this env uses.
    pub async fn with_model() -> Self {
        Env {
            fake: Some(FakeModel::start().await.unwrap()),
            ..Env::new()
        }
    }

    /// Every `tern` of this env runs with `umask`, whatever the test's own.
    pub fn with_umask(mut self, umask: u32) -> Self {
        self.umask = Some(umask);
        self
    }

    pub fn fake(&self) -> &FakeModel {
        self.fake.as_ref().expect("an Env::with_model")
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// Writes `$TERN_HOME/config.toml`.
    pub fn config(&self, text: &str) {
        std::fs::write(self.home().join("config.toml"), text).unwrap();
    }

    /// The `tern` binary with this home, the working directory, no stdin, and the fake
    /// model (if any); nothing of the test's own environment that would change it.
    pub fn tern(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tern"));
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
        let addr = match rx.recv_timeout(START) {
            Ok(Some(addr)) => addr,
            Ok(None) => panic!("the gateway exited:\n{}", logs()),
            Err(_) => panic!("the gateway did not start:\n{}", logs()),
        };
        // The admin file is written before the gateway accepts connections; wait for it all
        // the same (the file, not a time, is what is waited for).
        for _ in 0..600 {
            if let Ok(text) = std::fs::read_to_string(&admin)
                && let Ok(v) = serde_json::from_str::<Value>(&text)
                && v["url"].is_string()
                && v["token"].is_string()
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Running {
            child,
            url: format!("http://{addr}"),
            stderr: lines,
        }
    }

    /// The API key the gateway's first start wrote to `gateway.key`.
    pub fn key(&self) -> String {
        std::fs::read_to_string(self.home().join("gateway.key"))
            .unwrap()
            .trim()
            .to_owned()
    }

    /// The local admin's reviewer token, from `inbox-admin.json`.
    pub fn admin_token(&self) -> String {
        let text = std::fs::read_to_string(self.home().join("inbox-admin.json")).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        v["token"].as_str().unwrap().to_owned()
    }
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

/// `POST URL` with a bearer token and a JSON body: the status and the JSON answer (null if
/// none).
pub async fn http_post(url: &str, token: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

/// `GET URL` with a bearer token: the status and the JSON answer (null if none).
pub async fn http_get(url: &str, token: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let s = r.status().as_u16();
    (s, r.json().await.unwrap_or(Value::Null))
}

/// Calls `check` every `every` until it gives `Ok`; panics with its last `Err` (what it
/// saw) once `within` has passed. The bounds only turn a hang into a failure.
pub async fn wait_until<T>(
    within: Duration,
    every: Duration,
    mut check: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(saw) => assert!(Instant::now() < deadline, "{saw}"),
        }
        tokio::time::sleep(every).await;
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

/// The last message of a chat request the fake model got (`Null` when there is none).
pub fn last_message(body: &Value) -> Value {
    body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or(Value::Null)
}

/// A message's text.
pub fn content(m: &Value) -> &str {
    m["content"].as_str().unwrap_or_default()
}

/// The decisions appended to a transcript.
pub fn decisions(msgs: &[Value]) -> Vec<&Value> {
    msgs.iter()
        .filter(|m| m["role"] == "user" && content(m).starts_with(DECISION_TAG))
        .collect()
}

/// The gateway's session API, as one key.
pub struct Api {
    pub url: String,
    pub key: String,
    pub http: reqwest::Client,
}

impl Api {
    pub fn new(gw: &Running, key: String) -> Self {
        Api {
            url: gw.url.clone(),
            key,
            http: reqwest::Client::new(),
        }
    }

    /// Sends `rb` with the key: the status and the JSON answer (null if none).
    pub async fn send(&self, rb: reqwest::RequestBuilder) -> (u16, Value) {
        let r = rb.bearer_auth(&self.key).send().await.unwrap();
        let s = r.status().as_u16();
        (s, r.json().await.unwrap_or(Value::Null))
    }

    /// A new session's id.
    pub async fn create_session(&self) -> String {
        let (s, v) = self
            .send(
                self.http
                    .post(format!("{}/api/sessions", self.url))
                    .json(&json!({})),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        v["session"]["id"].as_str().unwrap().to_owned()
    }

    /// One chat turn, which must answer 200.
    pub async fn chat(&self, id: &str, message: &str) -> Value {
        let (s, v) = self
            .send(
                self.http
                    .post(format!("{}/api/sessions/{id}/chat", self.url))
                    .json(&json!({"message": message})),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        v
    }

    /// `POST /api/sessions/{id}/reset`; returns the new session's id.
    pub async fn reset(&self, id: &str) -> String {
        self.reset_with(id, "").await
    }

    /// `POST /api/sessions/{id}/reset{query}` (`query` empty or `?…`).
    pub async fn reset_with(&self, id: &str, query: &str) -> String {
        let (s, v) = self
            .send(
                self.http
                    .post(format!("{}/api/sessions/{id}/reset{query}", self.url)),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["session_id"], id, "{v}");
        v["new_session_id"].as_str().unwrap().to_owned()
    }

    pub async fn delete(&self, id: &str) {
        self.delete_with(id, "").await
    }

    /// `DELETE /api/sessions/{id}{query}` (`query` empty or `?…`).
    pub async fn delete_with(&self, id: &str, query: &str) {
        let (s, v) = self
            .send(
                self.http
                    .delete(format!("{}/api/sessions/{id}{query}", self.url)),
            )
            .await;
        assert_eq!(s, 200, "{v}");
    }

    /// The session (its `session` object), which must exist.
    pub async fn session(&self, id: &str) -> Value {
        let (s, v) = self
            .send(self.http.get(format!("{}/api/sessions/{id}", self.url)))
            .await;
        assert_eq!(s, 200, "{v}");
        v["session"].clone()
    }

    pub async fn messages(&self, id: &str) -> Vec<Value> {
        let (s, v) = self
            .send(
                self.http
                    .get(format!("{}/api/sessions/{id}/messages", self.url)),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        v["data"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until the session is idle with no open wait (the resume ran).
    pub async fn until_resumed(&self, id: &str) -> Value {
        wait_until(
            Duration::from_secs(60),
            Duration::from_millis(50),
            async || {
                let s = self.session(id).await;
                if s["status"] == "idle" && s["waits"].as_array().is_some_and(Vec::is_empty) {
                    Ok(s)
                } else {
                    Err(format!("never resumed: {s}"))
                }
            },
        )
        .await
    }
}
