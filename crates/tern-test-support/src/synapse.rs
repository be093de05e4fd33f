//! A real Synapse homeserver on loopback, for the Matrix adapter's tests and the channel
//! end-to-end tests.
//!
//! [`Synapse::shared`] starts one server per test binary, lazily, and every test uses it with
//! its own users and rooms ([`unique`] names them); [`Synapse::start`] starts a private one
//! with [`Options`] (Synapse's default rate limits, for a test of 429 handling). The server
//! runs from a temporary directory with a hand-written `homeserver.yaml`: SQLite, one plain
//! HTTP listener on `127.0.0.1:<free port>` serving the client API only, registration by
//! shared secret, no federation, no key server, no stats, rate limits raised out of the way,
//! logs in `homeserver.log` there (printed when it fails to start).
//!
//! It needs Python with `matrix-synapse` (`.ci/run` installs it): `$TERN_SYNAPSE_PYTHON`, else
//! `python3`. Without it the harness panics and says so; the tests do not skip.
//!
//! The process runs in its own process group and is killed (the group) when its [`Synapse`]
//! is dropped; the shared one, which lives as long as the test binary, is started by a thread
//! that never ends, with `PR_SET_PDEATHSIG`, so it dies with the test binary however that ends;
//! its directory (`$TMPDIR/tern-synapse-*`, marked with the owner's pid) is removed by the next
//! start of a server once that pid is gone.
//!
//! The clients ([`MatrixUser`]) hold no state across tests' runtimes: each test registers its
//! users and gets a fresh HTTP client.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use reqwest::Url;
use serde_json::{Value, json};

use crate::wait::{PATIENCE, poll_blocking, wait_until};

/// The shared secret of registration (the server is on loopback and lives for one test run).
const SECRET: &str = "tern-test-registration-secret";

/// What differs between servers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Keep Synapse's default rate limits (messages: 0.2/s, a burst of 10), so that a test
    /// can see `M_LIMIT_EXCEEDED`; the default raises every limit out of the tests' way.
    pub default_rate_limits: bool,
}

/// A running Synapse; killed (its process group) on drop.
pub struct Synapse {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
}

static SHARED: OnceLock<Synapse> = OnceLock::new();
static NAMES: AtomicU64 = AtomicU64::new(0);

/// A name unique in this test run (and across test binaries sharing nothing but a server's
/// lifetime): `prefix` with the process id and a counter, lower-case as Matrix localparts
/// must be.
pub fn unique(prefix: &str) -> String {
    let n = NAMES.fetch_add(1, Ordering::Relaxed);
    format!("{}-{}-{n}", prefix.to_lowercase(), std::process::id())
}

impl Synapse {
    /// The test binary's shared server, started on first use.
    pub fn shared() -> &'static Synapse {
        SHARED.get_or_init(|| {
            // PR_SET_PDEATHSIG fires when the *thread* that forked the child ends; a test's
            // thread ends with the test, so the shared server is forked from a thread that
            // lives as long as the process.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(Synapse::start_inner(Options::default(), true));
                loop {
                    std::thread::park();
                }
            });
            rx.recv().expect("the Synapse starter thread panicked")
        })
    }

    /// A private server, killed when dropped.
    pub fn start(options: Options) -> Synapse {
        Synapse::start_inner(options, false)
    }

    fn start_inner(options: Options, die_with_process: bool) -> Synapse {
        let python = std::env::var("TERN_SYNAPSE_PYTHON").unwrap_or_else(|_| "python3".into());
        let probe = Command::new(&python)
            .args(["-c", "import synapse"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {python} for Synapse: {e}"));
        assert!(
            probe.status.success(),
            "the Matrix tests need a real Synapse: `{python} -c 'import synapse'` failed \
             ({}). Install it with `pip install matrix-synapse` (.ci/run does), or point \
             TERN_SYNAPSE_PYTHON at a Python that has it.",
            String::from_utf8_lossy(&probe.stderr).trim()
        );
        remove_stale_dirs();
        let mut dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir()
            .unwrap();
        std::fs::write(dir.path().join(OWNER), std::process::id().to_string()).unwrap();
        // The port may be taken between the probe and Synapse's bind: try a few.
        for _ in 0..5 {
            let d = dir.path().to_path_buf();
            std::fs::write(d.join("log.config"), log_config(&d.join("homeserver.log"))).unwrap();
            let port = free_port();
            std::fs::write(
                d.join("homeserver.yaml"),
                homeserver_yaml(&d, port, options),
            )
            .unwrap();
            let keys = Command::new(&python)
                .args(["-m", "synapse.app.homeserver", "--generate-keys", "-c"])
                .arg(d.join("homeserver.yaml"))
                .output()
                .unwrap();
            assert!(keys.status.success(), "synapse --generate-keys: {keys:?}");
            let mut cmd = Command::new(&python);
            cmd.args(["-m", "synapse.app.homeserver", "-c"])
                .arg(d.join("homeserver.yaml"))
                .current_dir(&d)
                .stdin(Stdio::null())
                .stdout(Stdio::from(
                    std::fs::File::create(d.join("stdout.log")).unwrap(),
                ))
                .stderr(Stdio::from(
                    std::fs::File::create(d.join("stderr.log")).unwrap(),
                ))
                .process_group(0);
            if die_with_process {
                // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
                unsafe {
                    cmd.pre_exec(|| {
                        nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                            .map_err(std::io::Error::from)
                    });
                }
            }
            let child = cmd.spawn().unwrap();
            let mut server = Synapse {
                dir,
                port,
                child: Some(child),
            };
            match server.wait_ready() {
                Ok(()) => return server,
                Err(log) if log.contains("Address already in use") => {
                    dir = server.take_dir();
                    continue;
                }
                Err(log) => panic!("Synapse did not start:\n{log}"),
            }
        }
        panic!("Synapse found no free port");
    }

    /// Waits until the client API answers, or the process exits (its logs then).
    fn wait_ready(&mut self) -> Result<(), String> {
        let port = self.port;
        let child = self.child.as_mut().unwrap();
        let ready = poll_blocking(PATIENCE, Duration::from_millis(50), || {
            if let Some(status) = child.try_wait().unwrap() {
                return Err(format!("exited: {status}"));
            }
            if versions_answer(port) {
                Ok(())
            } else {
                Err("waiting for GET /_matrix/client/versions".into())
            }
        });
        ready.map_err(|saw| format!("{saw}\n{}", self.logs()))
    }

    /// Kills the server and hands its directory back for another try.
    fn take_dir(mut self) -> tempfile::TempDir {
        self.kill();
        let empty = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.dir, empty)
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = child.wait();
        }
    }

    /// The end of the server's logs (`homeserver.log` and its stderr), for a failure message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for name in ["stderr.log", "homeserver.log"] {
            let text = std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            out.push_str(&format!("--- {name} (last lines)\n"));
            for line in tail.into_iter().rev() {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// The homeserver's base URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The server name, the part of every id after the colon.
    pub fn server_name(&self) -> &'static str {
        "localhost"
    }

    /// The full id of the local user `localpart`.
    pub fn user_id(&self, localpart: &str) -> String {
        format!("@{localpart}:{}", self.server_name())
    }

    /// Registers `localpart` through the shared-secret admin API; the user with a logged-in
    /// client.
    pub async fn register(&self, localpart: &str, password: &str, admin: bool) -> MatrixUser {
        let http = reqwest::Client::new();
        let url = format!("{}/_synapse/admin/v1/register", self.url());
        let nonce: Value = http.get(&url).send().await.unwrap().json().await.unwrap();
        let nonce = nonce["nonce"].as_str().unwrap().to_owned();
        let mut mac = Hmac::<sha1::Sha1>::new_from_slice(SECRET.as_bytes()).unwrap();
        mac.update(nonce.as_bytes());
        mac.update(b"\0");
        mac.update(localpart.as_bytes());
        mac.update(b"\0");
        mac.update(password.as_bytes());
        mac.update(b"\0");
        mac.update(if admin { b"admin" } else { b"notadmin" });
        let mac = hex::encode(mac.finalize().into_bytes());
        let r = http
            .post(&url)
            .json(&json!({
                "nonce": nonce, "username": localpart, "password": password,
                "admin": admin, "mac": mac,
            }))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert!(status.is_success(), "register {localpart}: {status} {body}");
        MatrixUser {
            user_id: body["user_id"].as_str().unwrap().to_owned(),
            access_token: body["access_token"].as_str().unwrap().to_owned(),
            base: Url::parse(&self.url()).unwrap(),
            http,
        }
    }

    /// [`Synapse::register`] of a fresh non-admin user named after `prefix`.
    pub async fn new_user(&self, prefix: &str) -> MatrixUser {
        self.register(&unique(prefix), "a-test-password", false)
            .await
    }
}

impl Drop for Synapse {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A user of the test (a human, or the bot's account) with a small client of the
/// client-server API.
pub struct MatrixUser {
    pub user_id: String,
    pub access_token: String,
    base: Url,
    http: reqwest::Client,
}

/// What a test reads of a message in a room.
#[derive(Debug, Clone)]
pub struct RoomMessage {
    pub event_id: String,
    pub sender: String,
    pub event_type: String,
    pub content: Value,
}

impl RoomMessage {
    pub fn body(&self) -> &str {
        self.content["body"].as_str().unwrap_or_default()
    }
}

impl MatrixUser {
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut().unwrap().extend(segments);
        url
    }

    /// A request as this user; panics on a non-2xx answer with its body.
    async fn call(&self, method: reqwest::Method, url: Url, body: Option<Value>) -> Value {
        let mut req = self
            .http
            .request(method.clone(), url.clone())
            .bearer_auth(&self.access_token);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let r = req.send().await.unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        assert!(
            status.is_success(),
            "{method} {} as {}: {status} {body}",
            url.path(),
            self.user_id
        );
        body
    }

    /// Creates an unencrypted private room, inviting `invite`; its id.
    pub async fn create_room(&self, invite: &[&str]) -> String {
        let body = self
            .call(
                reqwest::Method::POST,
                self.url(&["_matrix", "client", "v3", "createRoom"]),
                Some(json!({ "preset": "private_chat", "invite": invite })),
            )
            .await;
        body["room_id"].as_str().unwrap().to_owned()
    }

    pub async fn invite(&self, room_id: &str, user_id: &str) {
        self.call(
            reqwest::Method::POST,
            self.url(&["_matrix", "client", "v3", "rooms", room_id, "invite"]),
            Some(json!({ "user_id": user_id })),
        )
        .await;
    }

    pub async fn join(&self, room_id: &str) {
        self.call(
            reqwest::Method::POST,
            self.url(&["_matrix", "client", "v3", "join", room_id]),
            Some(json!({})),
        )
        .await;
    }

    /// Waits (bounded) until `user_id` has joined `room_id`, as this user sees it.
    pub async fn wait_joined(&self, room_id: &str, user_id: &str) {
        wait_until(PATIENCE, Duration::from_millis(100), async || {
            if self.is_joined(room_id, user_id).await {
                Ok(())
            } else {
                Err(format!("waiting for {user_id} to join {room_id}"))
            }
        })
        .await
    }

    /// Sends an event of `event_type` with `content`; its event id.
    pub async fn send_event(&self, room_id: &str, event_type: &str, content: Value) -> String {
        let txn = unique("txn");
        let body = self
            .call(
                reqwest::Method::PUT,
                self.url(&[
                    "_matrix", "client", "v3", "rooms", room_id, "send", event_type, &txn,
                ]),
                Some(content),
            )
            .await;
        body["event_id"].as_str().unwrap().to_owned()
    }

    pub async fn send_text(&self, room_id: &str, text: &str) -> String {
        self.send_event(
            room_id,
            "m.room.message",
            json!({ "msgtype": "m.text", "body": text }),
        )
        .await
    }

    /// A reply to `event_id`, the way clients send one (the relation only; no fallback).
    pub async fn send_reply(&self, room_id: &str, event_id: &str, text: &str) -> String {
        self.send_event(
            room_id,
            "m.room.message",
            json!({
                "msgtype": "m.text", "body": text,
                "m.relates_to": { "m.in_reply_to": { "event_id": event_id } },
            }),
        )
        .await
    }

    /// A message in the thread rooted at `root`.
    pub async fn send_in_thread(&self, room_id: &str, root: &str, text: &str) -> String {
        self.send_event(
            room_id,
            "m.room.message",
            json!({
                "msgtype": "m.text", "body": text,
                "m.relates_to": {
                    "rel_type": "m.thread", "event_id": root, "is_falling_back": true,
                    "m.in_reply_to": { "event_id": root },
                },
            }),
        )
        .await
    }

    pub async fn send_reaction(&self, room_id: &str, event_id: &str, key: &str) -> String {
        self.send_event(
            room_id,
            "m.reaction",
            json!({
                "m.relates_to": { "rel_type": "m.annotation", "event_id": event_id, "key": key },
            }),
        )
        .await
    }

    /// Uploads `bytes`; the `mxc://` URI.
    pub async fn upload(&self, name: &str, mime: &str, bytes: Vec<u8>) -> String {
        let mut url = self.url(&["_matrix", "media", "v3", "upload"]);
        url.query_pairs_mut().append_pair("filename", name);
        let r = self
            .http
            .post(url)
            .bearer_auth(&self.access_token)
            .header("content-type", mime)
            .body(bytes)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert!(status.is_success(), "upload: {status} {body}");
        body["content_uri"].as_str().unwrap().to_owned()
    }

    /// Downloads an `mxc://` URI through the authenticated media API.
    pub async fn download(&self, mxc: &str) -> Vec<u8> {
        let rest = mxc.strip_prefix("mxc://").unwrap();
        let (server, media) = rest.split_once('/').unwrap();
        let url = self.url(&[
            "_matrix", "client", "v1", "media", "download", server, media,
        ]);
        let r = self
            .http
            .get(url)
            .bearer_auth(&self.access_token)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "download {mxc}: {}", r.status());
        r.bytes().await.unwrap().to_vec()
    }

    /// One sync as this user, from `since` (`None`: a full sync), waiting up to `timeout_ms`
    /// for something new: the raw answer, to look at what a client sees (e.g. typing
    /// notifications in `rooms.join.<room>.ephemeral`). Synapse caches a full sync's answer
    /// for a while: to see a change, sync from an earlier answer's `next_batch`.
    pub async fn sync(&self, since: Option<&str>, timeout_ms: u64) -> Value {
        let mut url = self.url(&["_matrix", "client", "v3", "sync"]);
        url.query_pairs_mut()
            .append_pair("timeout", &timeout_ms.to_string());
        if let Some(since) = since {
            url.query_pairs_mut().append_pair("since", since);
        }
        self.call(reqwest::Method::GET, url, None).await
    }

    /// Whether `user_id` is a joined member of `room_id` now.
    pub async fn is_joined(&self, room_id: &str, user_id: &str) -> bool {
        let url = self.url(&[
            "_matrix",
            "client",
            "v3",
            "rooms",
            room_id,
            "joined_members",
        ]);
        let body = self.call(reqwest::Method::GET, url, None).await;
        body["joined"].get(user_id).is_some()
    }

    /// The room's latest messages and reactions (up to 100), oldest first.
    pub async fn messages(&self, room_id: &str) -> Vec<RoomMessage> {
        let mut url = self.url(&["_matrix", "client", "v3", "rooms", room_id, "messages"]);
        url.query_pairs_mut()
            .append_pair("dir", "b")
            .append_pair("limit", "100");
        let body = self.call(reqwest::Method::GET, url, None).await;
        let mut out: Vec<RoomMessage> = body["chunk"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["type"] == "m.room.message" || e["type"] == "m.reaction")
            .map(|e| RoomMessage {
                event_id: e["event_id"].as_str().unwrap_or_default().to_owned(),
                sender: e["sender"].as_str().unwrap_or_default().to_owned(),
                event_type: e["type"].as_str().unwrap_or_default().to_owned(),
                content: e["content"].clone(),
            })
            .collect();
        out.reverse();
        out
    }

    /// Waits (bounded) for a message in `room_id` from `sender` that `pred` accepts.
    pub async fn wait_for_message(
        &self,
        room_id: &str,
        sender: &str,
        pred: impl Fn(&RoomMessage) -> bool,
    ) -> RoomMessage {
        wait_until(PATIENCE, Duration::from_millis(100), async || {
            let all = self.messages(room_id).await;
            all.iter()
                .find(|m| m.sender == sender && pred(m))
                .cloned()
                .ok_or_else(|| {
                    let seen: Vec<String> = all
                        .iter()
                        .map(|m| format!("{}: {}", m.sender, m.content))
                        .collect();
                    format!(
                        "waiting for a matching message from {sender} in {room_id}; saw {seen:#?}"
                    )
                })
        })
        .await
    }
}

/// The temporary directories of servers start with this.
const DIR_PREFIX: &str = "tern-synapse-";
/// In such a directory: the pid of the test binary that owns it.
const OWNER: &str = "owner.pid";

/// Removes the directories of servers whose test binary has ended: the shared server's is
/// never dropped (a static), so its binary cannot remove it.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let ours = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(DIR_PREFIX));
        let owner = std::fs::read_to_string(path.join(OWNER))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok());
        if let (true, Some(pid)) = (ours, owner)
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether `GET /_matrix/client/versions` answers 200 (plain HTTP/1.0 over a socket: the
/// harness starts servers outside any runtime).
fn versions_answer(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET /_matrix/client/versions HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.ends_with(b"200")
}

fn log_config(file: &Path) -> String {
    format!(
        "version: 1\n\
         formatters:\n  precise:\n    format: '%(asctime)s %(name)s %(levelname)s %(request)s %(message)s'\n\
         handlers:\n  file:\n    class: logging.FileHandler\n    formatter: precise\n    filename: {}\n\
         root:\n  level: INFO\n  handlers: [file]\n\
         disable_existing_loggers: false\n",
        file.display()
    )
}

fn homeserver_yaml(d: &Path, port: u16, options: Options) -> String {
    let p = |name: &str| -> PathBuf { d.join(name) };
    let mut yaml = format!(
        "server_name: localhost\n\
         pid_file: {pid}\n\
         listeners:\n\
         \x20 - port: {port}\n\
         \x20   bind_addresses: ['127.0.0.1']\n\
         \x20   type: http\n\
         \x20   tls: false\n\
         \x20   x_forwarded: false\n\
         \x20   resources:\n\
         \x20     - names: [client]\n\
         \x20       compress: false\n\
         database:\n  name: sqlite3\n  args:\n    database: {db}\n\
         log_config: {log}\n\
         media_store_path: {media}\n\
         max_upload_size: 10M\n\
         registration_shared_secret: {SECRET}\n\
         report_stats: false\n\
         macaroon_secret_key: tern-test-macaroon\n\
         form_secret: tern-test-form\n\
         signing_key_path: {key}\n\
         trusted_key_servers: []\n\
         suppress_key_server_warning: true\n\
         federation_domain_whitelist: []\n\
         enable_metrics: false\n\
         presence:\n  enabled: false\n",
        pid = p("homeserver.pid").display(),
        db = p("homeserver.db").display(),
        log = p("log.config").display(),
        media = p("media").display(),
        key = p("signing.key").display(),
    );
    if !options.default_rate_limits {
        let lots = "{per_second: 10000, burst_count: 10000}";
        for key in [
            "rc_message",
            "rc_registration",
            "rc_joins_per_room",
            "rc_room_creation",
            "rc_media_create",
            "rc_3pid_validation",
        ] {
            yaml.push_str(&format!("{key}: {lots}\n"));
        }
        yaml.push_str(&format!(
            "rc_login:\n  address: {lots}\n  account: {lots}\n  failed_attempts: {lots}\n\
             rc_joins:\n  local: {lots}\n  remote: {lots}\n\
             rc_invites:\n  per_room: {lots}\n  per_user: {lots}\n  per_issuer: {lots}\n"
        ));
    }
    yaml
}
