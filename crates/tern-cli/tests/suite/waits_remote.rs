//! Remote mode (`[inbox] url`, `key`): the agent gateway A uses another server's inbox and
//! follows its decisions over outbound connections only. Real `tern gateway` processes on
//! loopback, only the model faked:
//!
//! - against a tern inbox (gateway B, `--inbox-only`): the request appears at B, a reviewer
//!   approves it there with `tern inbox`, and A's session is resumed;
//! - against a server without the decisions feed (a small Pump Up server in this test that
//!   answers 404 on `/api/decisions`): A polls the result — an error, then 204, then 200 —
//!   and every request was one A opened;
//! - with many open waits A asks nothing but the feed, one long-poll at a time (counted by a
//!   proxy in front of B);
//! - the feed's cursor survives a restart of A (SIGTERM or kill -9): a decision made at B
//!   while A is down resumes the session once after A restarts, and A asks the feed from
//!   where it stopped, so the decisions before are not delivered again.
//!
//! While waiting for a resume the tests read A's session with `tern sessions show` (the
//! database), never over A's API: nothing but the gateway itself talks to A then.

use crate::common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use common::{Api, DECISION_TAG, Env, Running, assert_ok, content, last_message, wait_until};
use serde_json::{Value, json};
use tern_fake_model::{FakeModel, Reply};

/// How long a test waits for what A does; it only turns a hang into a failure.
const WAIT: Duration = Duration::from_secs(90);

impl Env {
    /// `tern sessions show ID --json`: read from the database, not over the gateway's API.
    fn session(&self, id: &str) -> Value {
        let o = self.run(&["sessions", "show", id, "--json"]);
        assert_ok(&o);
        serde_json::from_slice(&o.stdout).unwrap()
    }

    /// Waits until the session is idle with no open wait (resumed and answered).
    async fn until_resumed(&self, id: &str) -> Value {
        self.until_session(id, |s| {
            s["session"]["status"] == "idle" && s["waits"].as_array().is_some_and(Vec::is_empty)
        })
        .await
    }

    /// Waits until the session (as `tern sessions show` reads it) is as `done` says.
    async fn until_session(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        wait_until(WAIT, Duration::from_millis(100), async || {
            let s = self.session(id);
            if done(&s) {
                Ok(s)
            } else {
                Err(format!("never resumed: {s}"))
            }
        })
        .await
    }
}

/// Creates a session on A and runs one chat turn; returns the session id. The HTTP client
/// is dropped afterwards: from then on nobody connects to A.
async fn chat(gw: &Running, key: &str, message: &str) -> String {
    let api = Api::new(gw, key.to_owned());
    let id = api.create_session().await;
    api.chat(&id, message).await;
    id
}

/// The model: on a user's message it asks with `calls` (tool name, arguments) and ends its
/// turn; on a decision it says what it saw.
fn script_model(fake: &FakeModel, calls: Vec<(String, Value)>) {
    let ids: Vec<String> = (0..calls.len()).map(|i| format!("call_{i}")).collect();
    fake.set_responder(move |body| {
        let last = last_message(body);
        let text = content(&last).to_owned();
        match last["role"].as_str() {
            Some("user") if text.starts_with(DECISION_TAG) => {
                Reply::text(format!("resumed with: {text}"))
            }
            Some("user") => Reply::tool_calls(
                calls
                    .iter()
                    .zip(&ids)
                    .map(|((name, args), id)| (id.as_str(), name.as_str(), args.to_string()))
                    .collect::<Vec<_>>(),
            ),
            Some("tool") => Reply::text("I asked; I will go on once they decide."),
            _ => Reply::text("?"),
        }
    });
}

fn one_approval(summary: &str) -> Vec<(String, Value)> {
    vec![(
        "request_approval".to_owned(),
        json!({"summary": summary, "keyValueContext": {"env": "prod"}}),
    )]
}

/// The request id of the session's one open wait.
fn open_wait(s: &Value) -> String {
    let waits = s["waits"].as_array().unwrap();
    assert_eq!(waits.len(), 1, "{s}");
    assert_eq!(waits[0]["status"], "pending", "{s}");
    waits[0]["request_id"].as_str().unwrap().to_owned()
}

/// The decision message the resumed turn answered.
fn decision_message(s: &Value) -> String {
    let msgs = s["messages"].as_array().unwrap();
    let ds: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["role"] == "user" && content(m).starts_with(DECISION_TAG))
        .collect();
    assert_eq!(ds.len(), 1, "exactly one decision message: {msgs:#?}");
    let last = msgs.last().unwrap();
    assert!(
        content(last).starts_with("resumed with: "),
        "the resumed turn answered: {last}"
    );
    content(ds[0]).to_owned()
}

#[tokio::test]
async fn a_decision_at_the_remote_tern_inbox_resumes_the_session() {
    let b = Env::new();
    let gw_b = b.gateway_with(&["--inbox-only"], &[]);
    let a = Env::with_model().await;
    a.config(&format!(
        "[inbox]\nurl = \"{}\"\nkey = \"{}\"\npoll_interval = \"2s\"\n",
        gw_b.url,
        b.key()
    ));
    let fake = a.fake();
    script_model(fake, one_approval("Deploy v2 to prod?"));
    let gw_a = a.gateway();

    let id = chat(&gw_a, &a.key(), "deploy v2 please").await;
    let s = a.session(&id);
    assert_eq!(s["session"]["status"], "waiting", "{s}");
    let request = open_wait(&s);

    // The request is at B, not at A.
    let o = b.run(&["inbox", "list", "--json"]);
    assert_ok(&o);
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == request.as_str() && r["summary"] == "Deploy v2 to prod?"),
        "{list}"
    );
    let o = a.run(&["inbox", "list", "--json"]);
    assert_ok(&o);
    let at_a: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        at_a["items"].as_array().unwrap().is_empty(),
        "A's own inbox stays empty: {at_a}"
    );

    assert_ok(&b.run(&["inbox", "approve", &request, "--note", "ship it"]));
    let s = a.until_resumed(&id).await;
    let text = decision_message(&s);
    for want in [
        "Asked: Deploy v2 to prod?",
        "Decided: APPROVE by admin",
        "Note: ship it",
        request.as_str(),
    ] {
        assert!(text.contains(want), "{want:?} missing:\n{text}");
    }
    // The resumed turn's model request ended with the decision.
    assert!(fake.requests().iter().any(|r| {
        r.messages()
            .last()
            .is_some_and(|m| content(m).starts_with(DECISION_TAG))
    }));
}

/// What a test server saw: one line per request.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    /// Path and query.
    uri: String,
    peer: SocketAddr,
    auth: Option<String>,
    api_version: Option<String>,
    idem: Option<String>,
    status: u16,
}

#[derive(Default)]
struct Log {
    seen: Mutex<Vec<Seen>>,
    /// Path and query of every request, in the order they arrived (`seen` is in the order
    /// they ended: a long-poll ends long after later requests began).
    entered: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    /// The most requests in flight at once since `reset_max`.
    max_in_flight: AtomicUsize,
}

impl Log {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn enter(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
    }

    fn leave(&self, seen: Seen) {
        self.seen.lock().unwrap().push(seen);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    async fn until(&self, what: &str, pred: impl Fn(&[Seen]) -> bool) {
        wait_until(WAIT, Duration::from_millis(50), async || {
            let seen = self.seen();
            match pred(&seen) {
                true => Ok(()),
                false => Err(format!("never saw {what}: {seen:#?}")),
            }
        })
        .await
    }
}

fn header(req: &Request, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Serves `app` on loopback; returns its base URL.
async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap()
    });
    url
}

/// A Pump Up server without tern's decisions feed: one task, one approval request whose
/// first two result reads fail (500), then it answers 204 until `decided`, then 200. (The
/// tool reads a new request's result once, at once, to catch a decision taken inside the
/// create; the poller's first read is then the second.)
struct FakePumpUp {
    log: Log,
    result_reads: AtomicUsize,
    decided: AtomicBool,
}

async fn fake_pump_up(
    State(f): State<Arc<FakePumpUp>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    f.log.enter();
    let method = req.method().to_string();
    let uri = req.uri().to_string();
    let mut seen = Seen {
        auth: header(&req, "authorization"),
        api_version: header(&req, "x-api-version"),
        idem: header(&req, "idempotency-key"),
        method: method.clone(),
        uri: uri.clone(),
        peer,
        status: 0,
    };
    let path = req.uri().path().to_owned();
    let resp = match (method.as_str(), path.as_str()) {
        ("POST", "/api/tasks") => (
            StatusCode::CREATED,
            axum::Json(json!({"id": "task-1", "projectId": "p-1", "name": "t",
                "status": "RUNNING", "currentStep": "default", "metadata": {}, "attachments": []})),
        )
            .into_response(),
        ("POST", "/api/approval-requests") => {
            (StatusCode::CREATED, axum::Json(json!({"eventId": "req-1"}))).into_response()
        }
        ("GET", "/api/approval-requests/req-1/result") => {
            let n = f.result_reads.fetch_add(1, Ordering::SeqCst);
            if n < 2 {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    axum::Json(json!({"error": "try later"})),
                )
                    .into_response()
            } else if !f.decided.load(Ordering::SeqCst) {
                StatusCode::NO_CONTENT.into_response()
            } else {
                axum::Json(json!({
                    "requestId": "req-1", "taskId": "task-1",
                    "outcome": {"type": "APPROVE", "note": "fine by me"},
                    "decidedAt": "2025-01-01T00:00:00Z", "decidedBy": "pat"
                }))
                .into_response()
            }
        }
        _ => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": "not found"})),
        )
            .into_response(),
    };
    seen.status = resp.status().as_u16();
    f.log.leave(seen);
    resp
}

#[tokio::test]
async fn without_a_decisions_feed_the_gateway_polls_the_result() {
    let fake_server = Arc::new(FakePumpUp {
        log: Log::default(),
        result_reads: AtomicUsize::new(0),
        decided: AtomicBool::new(false),
    });
    let app = axum::Router::new()
        .fallback(fake_pump_up)
        .with_state(fake_server.clone());
    let server_url = serve(app).await;

    let a = Env::with_model().await;
    a.config(&format!(
        "[inbox]\nurl = \"{server_url}\"\nkey = \"remote-key-0123456789\"\npoll_interval = \"1s\"\n"
    ));
    let fake = a.fake();
    script_model(fake, one_approval("Rotate the keys?"));
    let gw_a = a.gateway();
    let id = chat(&gw_a, &a.key(), "rotate them").await;
    assert_eq!(open_wait(&a.session(&id)), "req-1");

    // The poller's failed read is counted on the wait, then the request is still pending
    // (204).
    let log = &fake_server.log;
    log.until("500s then a 204 on the result", |seen| {
        let codes: Vec<u16> = seen
            .iter()
            .filter(|s| s.uri.ends_with("/result"))
            .map(|s| s.status)
            .collect();
        codes.starts_with(&[500, 500, 204])
    })
    .await;
    let s = a.session(&id);
    let wait = &s["waits"][0];
    assert!(wait["attempts"].as_u64().is_some_and(|n| n >= 1), "{wait}");
    assert!(
        wait["last_error"].as_str().unwrap().contains("500"),
        "{wait}"
    );

    fake_server.decided.store(true, Ordering::SeqCst);
    let s = a.until_resumed(&id).await;
    let text = decision_message(&s);
    assert!(text.contains("Decided: APPROVE by pat"), "{text}");
    assert!(text.contains("fine by me"), "{text}");

    let seen = log.seen();
    // It looked for the feed, found none, and polled.
    let feed = seen
        .iter()
        .position(|s| s.uri.starts_with("/api/decisions"))
        .expect("the feed was tried");
    assert_eq!(seen[feed].status, 404);
    assert!(
        seen.iter()
            .any(|s| s.uri.ends_with("/result") && s.status == 200)
    );
    for s in &seen {
        assert_eq!(
            s.auth.as_deref(),
            Some("Bearer remote-key-0123456789"),
            "{s:?}"
        );
        assert!(s.api_version.is_some(), "{s:?}");
        // Every exchange was a connection A opened: from an ephemeral port of its own,
        // never its listening port (the server has no way to call A, and did not).
        assert_ne!(s.peer.port(), gw_a.port(), "{s:?}");
        assert!(s.peer.ip().is_loopback());
    }
    let create = seen
        .iter()
        .find(|s| s.method == "POST" && s.uri == "/api/approval-requests")
        .unwrap();
    // The call's occurrence: its id, and the seq of the answer that carried it (after the
    // user's message).
    assert_eq!(
        create.idem.as_deref(),
        Some(format!("tern-req:{id}:call_0@2").as_str())
    );
}

/// A proxy in front of B that logs every request A makes.
async fn counting_proxy(
    State((log, upstream, http)): State<(Arc<Log>, String, reqwest::Client)>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    log.enter();
    let method = req.method().clone();
    let uri = req.uri().to_string();
    log.entered.lock().unwrap().push(uri.clone());
    let mut seen = Seen {
        auth: header(&req, "authorization"),
        api_version: header(&req, "x-api-version"),
        idem: header(&req, "idempotency-key"),
        method: method.to_string(),
        uri: uri.clone(),
        peer,
        status: 0,
    };
    let mut out = http.request(method, format!("{upstream}{uri}"));
    for (name, value) in req.headers() {
        if name != "host" && name != "content-length" {
            out = out.header(name, value);
        }
    }
    let body = axum::body::to_bytes(req.into_body(), 1 << 20)
        .await
        .unwrap();
    let answer = out.body(body).send().await.unwrap();
    let status = answer.status();
    let content_type = answer.headers().get("content-type").cloned();
    let bytes = answer.bytes().await.unwrap();
    seen.status = status.as_u16();
    log.leave(seen);
    let mut resp = Response::new(Body::from(bytes));
    *resp.status_mut() = status;
    if let Some(ct) = content_type {
        resp.headers_mut().insert("content-type", ct);
    }
    resp
}

#[tokio::test]
async fn many_open_waits_cost_one_long_poll_at_a_time() {
    const WAITS: usize = 12;
    let b = Env::new();
    let gw_b = b.gateway_with(&["--inbox-only"], &[]);
    let log = Arc::new(Log::default());
    let proxy = axum::Router::new().fallback(counting_proxy).with_state((
        log.clone(),
        gw_b.url.clone(),
        reqwest::Client::new(),
    ));
    let proxy_url = serve(proxy).await;

    let a = Env::with_model().await;
    a.config(&format!(
        "[inbox]\nurl = \"{proxy_url}\"\nkey = \"{}\"\npoll_interval = \"1s\"\n",
        b.key()
    ));
    let fake = a.fake();
    let calls = (0..WAITS)
        .map(|i| {
            (
                "request_approval".to_owned(),
                json!({"summary": format!("Step {i}?")}),
            )
        })
        .collect();
    script_model(fake, calls);
    let gw_a = a.gateway();
    let id = chat(&gw_a, &a.key(), "do the twelve steps").await;
    let s = a.session(&id);
    let waits = s["waits"].as_array().unwrap();
    assert_eq!(waits.len(), WAITS, "{s}");
    assert!(waits.iter().all(|w| w["request_id"].is_string()), "{s}");

    // From here on nothing is created: count what A asks while it waits, over three
    // completed long-polls after the creates.
    let start = log.seen().len();
    log.max_in_flight
        .store(log.in_flight.load(Ordering::SeqCst), Ordering::SeqCst);
    log.until("three long-polls", |seen| {
        seen[start..]
            .iter()
            .filter(|s| s.uri.starts_with("/api/decisions"))
            .count()
            >= 3
    })
    .await;
    let idle = log.seen()[start..].to_vec();
    for s in &idle {
        assert!(
            s.method == "GET" && s.uri.starts_with("/api/decisions?wait=1"),
            "while idle A asks only the feed, never per wait: {s:?}"
        );
        assert_eq!(s.status, 200, "{s:?}");
    }
    assert_eq!(
        log.max_in_flight.load(Ordering::SeqCst),
        1,
        "one long-poll at a time, whatever the number of waits"
    );

    // And the feed carries decisions: one approved at B resumes A's session.
    let request = waits[0]["request_id"].as_str().unwrap();
    assert_ok(&b.run(&["inbox", "approve", request]));
    a.until_session(&id, |s| {
        s["waits"].as_array().unwrap().len() == WAITS - 1
            && s["messages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| content(m).starts_with("resumed with: "))
    })
    .await;
    assert!(
        log.seen()[start..]
            .iter()
            .all(|s| s.uri.starts_with("/api/decisions")),
        "the decision came through the feed, with no result read"
    );
}

/// The `after` of a feed request (`/api/decisions?after=…&wait=…`), as sent.
fn feed_after(uri: &str) -> Option<String> {
    let query = uri.strip_prefix("/api/decisions?")?;
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix("after="))
        .map(str::to_owned)
}

/// The feed requests among `uris`, with their `after` (`None`: from the beginning).
fn feed_requests(uris: &[String]) -> Vec<Option<String>> {
    uris.iter()
        .filter(|u| u.starts_with("/api/decisions"))
        .map(|u| feed_after(u))
        .collect()
}

/// The decision messages in a session's transcript that name `request`.
fn decisions_for(s: &Value, request: &str) -> usize {
    s["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            m["role"] == "user"
                && content(m).starts_with(DECISION_TAG)
                && content(m).contains(request)
        })
        .count()
}

/// How many model requests ended with the decision for `request` (the turns run on it).
fn resumed_turns(fake: &FakeModel, request: &str) -> usize {
    fake.requests()
        .iter()
        .filter(|r| {
            r.messages().last().is_some_and(|m| {
                content(m).starts_with(DECISION_TAG) && content(m).contains(request)
            })
        })
        .count()
}

/// One session on A waits for two requests at B. The first is approved while A runs; A is
/// stopped (`sigkill`: kill -9, else SIGTERM); the second is approved at B while A is down.
/// After A restarts, the session gets the second decision once, the first is not delivered
/// again, and A's first feed request asks from the cursor it had stored.
async fn the_feed_cursor_survives_a_restart_of_the_agent_gateway(sigkill: bool) {
    let b = Env::new();
    let gw_b = b.gateway_with(&["--inbox-only"], &[]);
    let log = Arc::new(Log::default());
    let proxy = axum::Router::new().fallback(counting_proxy).with_state((
        log.clone(),
        gw_b.url.clone(),
        reqwest::Client::new(),
    ));
    let proxy_url = serve(proxy).await;
    let a = Env::with_model().await;
    a.config(&format!(
        "[inbox]\nurl = \"{proxy_url}\"\nkey = \"{}\"\npoll_interval = \"2s\"\n",
        b.key()
    ));
    let fake = a.fake();
    script_model(
        fake,
        vec![
            (
                "request_approval".to_owned(),
                json!({"summary": "First step?"}),
            ),
            (
                "request_approval".to_owned(),
                json!({"summary": "Second step?"}),
            ),
        ],
    );
    let mut gw_a = a.gateway();
    let id = chat(&gw_a, &a.key(), "two steps please").await;
    let s = a.session(&id);
    let waits = s["waits"].as_array().unwrap();
    assert_eq!(waits.len(), 2, "{s}");
    let first = waits[0]["request_id"].as_str().unwrap().to_owned();
    let second = waits[1]["request_id"].as_str().unwrap().to_owned();

    // The first decision, while A runs: delivered and answered.
    assert_ok(&b.run(&["inbox", "approve", &first]));
    a.until_session(&id, |s| {
        let answered = s["messages"]
            .as_array()
            .unwrap()
            .last()
            .is_some_and(|m| content(m).starts_with("resumed with: "));
        answered && s["waits"].as_array().unwrap().len() == 1
    })
    .await;
    // A feed request that began after that: A asks from past the first decision (a fetch
    // starts only once the cursor before it is stored).
    let mark = log.entered.lock().unwrap().len();
    let cursor = wait_until(WAIT, Duration::from_millis(50), async || {
        let entered = log.entered.lock().unwrap().clone();
        match feed_requests(&entered[mark..]).pop() {
            Some(after) => Ok(after.expect("past the first decision, A asks after a cursor")),
            None => Err(format!("no feed request: {entered:#?}")),
        }
    })
    .await;

    if sigkill {
        gw_a.child.kill().unwrap();
    } else {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(gw_a.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
    }
    let status = gw_a.child.wait().unwrap();
    assert_eq!(status.success(), !sigkill, "{status:?}");
    drop(gw_a);
    // What the stopped A asked last is where it stood.
    let entered = log.entered.lock().unwrap().clone();
    let last = feed_requests(&entered).pop().unwrap();
    assert_eq!(last.as_deref(), Some(cursor.as_str()), "{entered:#?}");
    let restart_mark = entered.len();

    // The second decision, while A is down.
    assert_ok(&b.run(&["inbox", "approve", &second, "--note", "while you slept"]));
    let gw_a = a.gateway();
    let s = a.until_resumed(&id).await;
    assert_eq!(decisions_for(&s, &first), 1, "{s:#}");
    assert_eq!(decisions_for(&s, &second), 1, "{s:#}");
    let all: usize = s["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user" && content(m).starts_with(DECISION_TAG))
        .count();
    assert_eq!(all, 2, "{s:#}");
    assert!(
        content(s["messages"].as_array().unwrap().last().unwrap()).contains("while you slept"),
        "the resumed turn answered the second decision: {s:#}"
    );
    // One turn on each decision: the restart re-ran nothing.
    assert_eq!(resumed_turns(fake, &first), 1);
    assert_eq!(resumed_turns(fake, &second), 1);

    // The restarted A asked the feed from the stored cursor, never from the beginning.
    let entered = log.entered.lock().unwrap().clone();
    let after_restart = feed_requests(&entered[restart_mark..]);
    assert_eq!(
        after_restart.first().cloned().flatten().as_deref(),
        Some(cursor.as_str()),
        "{entered:#?}"
    );
    assert!(after_restart.iter().all(Option::is_some), "{entered:#?}");
    // And after that cursor, B's feed holds the second decision only.
    let http = reqwest::Client::new();
    let page = |after: Option<&str>| {
        let url = match after {
            Some(c) => format!("{}/api/decisions?after={c}", gw_b.url),
            None => format!("{}/api/decisions", gw_b.url),
        };
        let req = http.get(url).bearer_auth(b.key());
        async move {
            let r = req.send().await.unwrap();
            assert_eq!(r.status().as_u16(), 200);
            let v: Value = r.json().await.unwrap();
            v["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["requestId"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(page(Some(&cursor)).await, vec![second.clone()]);
    assert_eq!(page(None).await, vec![first, second]);
    drop(gw_a);
}

#[tokio::test]
async fn the_feed_cursor_survives_a_sigterm_of_the_agent_gateway() {
    the_feed_cursor_survives_a_restart_of_the_agent_gateway(false).await;
}

#[tokio::test]
async fn the_feed_cursor_survives_a_kill_9_of_the_agent_gateway() {
    the_feed_cursor_survives_a_restart_of_the_agent_gateway(true).await;
}
