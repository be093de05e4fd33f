//! `tern gateway` and `tern keys` as real processes: keys, the first start, JSON logs,
//! SIGTERM while a turn runs, and command hooks in a live gateway.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Env, http_get, http_post, wait_until};
use serde_json::{Value, json};
use tern_fake_model::Reply;
use tern_test_support::{PATIENCE, eventually, wait_until_blocking};

#[tokio::test]
async fn first_start_writes_a_key_file_and_keys_can_be_managed() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let path = e.home().join("gateway.key");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let key = e.key();
    assert!(key.starts_with("tern_") && key.len() == 69, "{key}");
    let logs = gw.logs();
    assert!(
        logs.contains("gateway.key") && !logs.contains(&key),
        "the path is printed, never the key"
    );
    assert!(
        logs.lines()
            .all(|l| serde_json::from_str::<Value>(l).is_ok() || l.starts_with("tern: ")),
        "JSON lines:\n{logs}"
    );
    assert_eq!(
        http_get(&format!("{}/api/sessions", gw.url), &key).await.0,
        200
    );

    let out = e.tern().args(["keys", "create", "ci"]).output().unwrap();
    assert!(out.status.success());
    let ci = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert_eq!(
        http_get(&format!("{}/api/sessions", gw.url), &ci).await.0,
        200,
        "a key created while running works"
    );
    let out = e.tern().args(["keys", "list"]).output().unwrap();
    let listing = String::from_utf8(out.stdout).unwrap();
    assert!(
        listing.contains("default") && listing.contains("ci") && !listing.contains(&ci),
        "{listing}"
    );
    // The first key is the operator's, an admin key; `ci` an agent's. `ci` sees only its
    // own sessions, the admin key every one.
    let kind_of = |name: &str| {
        listing
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(
        (kind_of("default"), kind_of("ci")),
        ("admin".into(), "agent".into())
    );
    let (s, v) = http_post(&format!("{}/api/sessions", gw.url), &key, json!({})).await;
    assert_eq!(s, 201, "{v}");
    let ops_session = v["session"]["id"].as_str().unwrap().to_owned();
    let (s, _) = http_get(&format!("{}/api/sessions/{ops_session}", gw.url), &ci).await;
    assert_eq!(s, 404, "another key's session is not found");
    let out = e
        .tern()
        .args(["keys", "create", "ops-2", "--admin"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ops = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let (s, _) = http_get(&format!("{}/api/sessions/{ops_session}", gw.url), &ops).await;
    assert_eq!(s, 200, "an admin key sees every session");
    let out = e.tern().args(["keys", "create", "ci"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "duplicate names are refused");
    // The owners the gateway uses itself are no key's name.
    for name in ["tern-agent", "TERN_SERVER_KEY"] {
        let out = e.tern().args(["keys", "create", name]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert!(
            err.contains(&format!("`{name}` is reserved")) && out.stdout.is_empty(),
            "{name}: {err}"
        );
    }
    let listing = e.tern().args(["keys", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&listing.stdout).contains("tern-agent"),
        "nothing was stored"
    );
    assert!(
        e.tern()
            .args(["keys", "revoke", "ci"])
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(
        http_get(&format!("{}/api/sessions", gw.url), &ci).await.0,
        401,
        "revoked at once"
    );
    let out = e.tern().args(["keys", "revoke", "ci"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    // The key file is written once: a restart keeps the same key.
    drop(gw);
    let gw = e.gateway();
    assert_eq!(e.key(), key);
    assert_eq!(
        http_get(&format!("{}/api/sessions", gw.url), &key).await.0,
        200
    );
}

#[tokio::test]
async fn server_key_from_the_environment() {
    let e = Env::with_model().await;
    let out = e
        .tern()
        .env("TERN_SERVER_KEY", "short")
        .args(["gateway", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 16 characters"));
    let gw = e.gateway_with(&[], &[("TERN_SERVER_KEY", "a-long-enough-server-key")]);
    assert!(
        !e.home().join("gateway.key").exists(),
        "no key file with TERN_SERVER_KEY"
    );
    assert_eq!(
        http_get(
            &format!("{}/api/sessions", gw.url),
            "a-long-enough-server-key"
        )
        .await
        .0,
        200
    );
    assert_eq!(
        http_get(
            &format!("{}/api/sessions", gw.url),
            "a-long-enough-server-keyX"
        )
        .await
        .0,
        401
    );
}

async fn wait_for(path: &Path, what: &str) -> String {
    wait_until(
        Duration::from_secs(20),
        Duration::from_millis(20),
        async || match std::fs::read_to_string(path) {
            Ok(s) if s.contains(what) => Ok(s),
            _ => Err(format!("{} never contained {what}", path.display())),
        },
    )
    .await
}

#[tokio::test]
async fn sigterm_during_a_turn_drains_then_interrupts_and_the_session_continues() {
    let e = Env::with_model().await;
    let events = e.dir.path().join("events.jsonl");
    e.config(&format!(
        "[gateway]\ndrain_timeout_secs = 1\n\n[[hooks]]\nname = \"log\"\nevents = [\"agent_loop_stopped\", \"session_end\"]\ncommand = \"cat >> {}\"\ntimeout_ms = 2000\n",
        events.display()
    ));
    let gw = e.gateway();
    let key = e.key();
    let (_, v) = http_post(&format!("{}/api/sessions", gw.url), &key, json!({})).await;
    let id = v["session"]["id"].as_str().unwrap().to_owned();
    e.fake().push(Reply::tool_call(
        "long",
        "terminal",
        r#"{"command":"touch tool-started; sleep 600"}"#,
    ));
    let url = format!("{}/api/sessions/{id}/chat", gw.url);
    let k2 = key.clone();
    let chat =
        tokio::spawn(async move { http_post(&url, &k2, json!({"message": "long job"})).await });
    let started = e.work().join("tool-started");
    eventually("the tool to start", async || started.exists().then_some(())).await;

    let mut gw = gw;
    let t0 = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(gw.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    // The tool would run ten minutes: only the interrupt after the drain ends the gateway
    // within the bound.
    let status = wait_until_blocking(PATIENCE, Duration::from_millis(20), || {
        gw.child
            .try_wait()
            .unwrap()
            .ok_or_else(|| format!("the gateway still runs after SIGTERM:\n{}", gw.logs()))
    });
    assert!(status.success(), "{}", gw.logs());
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_secs(1),
        "the running turn was given its 1 s drain timeout first, exited after {took:?}"
    );
    let (s, v) = chat.await.unwrap();
    assert_eq!((s, v["status"].as_str()), (200, Some("interrupted")), "{v}");
    let logged = wait_for(&events, "agent_loop_stopped").await;
    let stops: Vec<Value> = logged
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &Value| v["event"] == "agent_loop_stopped")
        .collect();
    assert_eq!(stops.len(), 1);
    assert_eq!(stops[0]["reason"], "shutdown");
    assert_eq!(stops[0]["invalidation_reason"], "process");
    assert!(logged.contains("\"reason\":\"shutdown\""));

    // Restart: the session loads, its transcript is valid, and it continues.
    let gw = e.gateway();
    e.fake().push(Reply::text("Back after the restart."));
    let (s, v) = http_post(
        &format!("{}/api/sessions/{id}/chat", gw.url),
        &key,
        json!({"message": "still there?"}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["message"]["content"], "Back after the restart.");
    let last = e.fake().requests().pop().unwrap();
    let msgs = last.messages();
    let tool = msgs.iter().find(|m| m["tool_call_id"] == "long").unwrap();
    assert!(tool["content"].as_str().unwrap().contains("interrupted"));
}

#[tokio::test]
async fn command_hooks_block_tools_and_never_delay_an_interrupt() {
    let e = Env::with_model().await;
    let seen = e.dir.path().join("stopped.jsonl");
    // The `held` hook ends only once the test creates `release`.
    let release = e.dir.path().join("release");
    let released = e.dir.path().join("released");
    e.config(&format!(
        r#"[[hooks]]
name = "policy"
events = ["pre_tool_call"]
command = "grep -q forbidden-word && echo '{{\"action\":\"block\",\"message\":\"that word is not allowed\"}}' || true"
timeout_ms = 3000

[[hooks]]
name = "hangs"
events = ["agent_loop_stopped"]
command = "sleep 30"
timeout_ms = 500

[[hooks]]
name = "held"
events = ["agent_loop_stopped"]
command = "while [ ! -e '{release}' ]; do sleep 0.02; done; touch '{released}'"
timeout_ms = 60000

[[hooks]]
name = "fails"
events = ["agent_loop_stopped"]
command = "exit 3"

[[hooks]]
name = "records"
events = ["agent_loop_stopped"]
command = "cat >> {}"
"#,
        seen.display(),
        release = release.display(),
        released = released.display(),
    ));
    let gw = e.gateway();
    let key = e.key();
    let (_, v) = http_post(&format!("{}/api/sessions", gw.url), &key, json!({})).await;
    let id = v["session"]["id"].as_str().unwrap().to_owned();

    // pre_tool_call: the hook blocks a call, and the model reads its message.
    e.fake()
        .push(Reply::tool_call(
            "b",
            "terminal",
            r#"{"command":"echo forbidden-word"}"#,
        ))
        .push(Reply::text("ok"));
    let (s, _) = http_post(
        &format!("{}/api/sessions/{id}/chat", gw.url),
        &key,
        json!({"message": "try"}),
    )
    .await;
    assert_eq!(s, 200);
    let msgs = e.fake().requests()[1].messages().to_vec();
    let blocked = msgs.iter().find(|m| m["tool_call_id"] == "b").unwrap();
    assert!(
        blocked["content"]
            .as_str()
            .unwrap()
            .contains("blocked by the policy hook: that word is not allowed"),
        "{blocked}"
    );

    // An interrupt with a hanging and a failing hook subscribed: stop answers at once and
    // the turn ends promptly.
    e.fake().push(Reply::tool_call(
        "long",
        "terminal",
        r#"{"command":"touch long-started; sleep 600"}"#,
    ));
    let url = format!("{}/api/sessions/{id}/chat", gw.url);
    let k2 = key.clone();
    let chat = tokio::spawn(async move { http_post(&url, &k2, json!({"message": "long"})).await });
    let started = e.work().join("long-started");
    eventually("the tool to start", async || started.exists().then_some(())).await;
    let (s, v) = http_post(
        &format!("{}/api/sessions/{id}/stop", gw.url),
        &key,
        json!({}),
    )
    .await;
    assert_eq!((s, v["stopped"].as_bool()), (200, Some(true)), "{v}");
    let (_, v) = tokio::time::timeout(PATIENCE, chat)
        .await
        .expect("the interrupted turn never answered")
        .unwrap();
    assert_eq!(v["status"], "interrupted");
    // The turn answered while the `held` hook was still waiting to be released: hooks never
    // delay an interrupt.
    assert!(
        !released.exists(),
        "the held hook ended before it was released"
    );
    std::fs::write(&release, "").unwrap();
    eventually("the held hook to end once released", async || {
        released.exists().then_some(())
    })
    .await;
    let logged = wait_for(&seen, "agent_loop_stopped").await;
    assert_eq!(logged.lines().count(), 1);
    let ev: Value = serde_json::from_str(logged.lines().next().unwrap()).unwrap();
    assert_eq!(ev["reason"], "api_stop");
    assert_eq!(ev["session_id"], id.as_str());
    // The failing and hanging hooks are logged with their names.
    wait_until(
        Duration::from_secs(10),
        Duration::from_millis(50),
        async || {
            let logs = gw.logs();
            if logs.contains("hangs") && logs.contains("fails") {
                Ok(())
            } else {
                Err(format!("hook failures not logged:\n{logs}"))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_webhook_receives_a_signed_event_from_the_gateway() {
    use axum::body::Bytes;
    use axum::http::HeaderMap;
    let e = Env::with_model().await;
    type Got = std::sync::Arc<std::sync::Mutex<Vec<(HeaderMap, Bytes)>>>;
    let got: Got = Default::default();
    let g2 = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |h: HeaderMap, b: Bytes| {
            let g = g2.clone();
            async move {
                g.lock().unwrap().push((h, b));
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let secret = "webhook-secret-0123456789";
    e.config(&format!(
        "[[webhooks]]\nname = \"ops\"\nurl = \"http://{addr}/hook\"\nsecret = \"{secret}\"\nevents = [\"session_start\"]\n"
    ));
    let gw = e.gateway();
    let key = e.key();
    let (_, v) = http_post(&format!("{}/api/sessions", gw.url), &key, json!({})).await;
    let id = v["session"]["id"].as_str().unwrap().to_owned();
    wait_until(
        Duration::from_secs(10),
        Duration::from_millis(20),
        async || match got.lock().unwrap().is_empty() {
            true => Err("no webhook delivery".to_owned()),
            false => Ok(()),
        },
    )
    .await;
    let (headers, body) = got.lock().unwrap()[0].clone();
    let ts: i64 = headers["x-tern-timestamp"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let expected = tern_hooks::webhook_signature(secret, ts, &body);
    assert_eq!(headers["x-tern-signature"].to_str().unwrap(), expected);
    assert_ne!(
        tern_hooks::webhook_signature("another-secret-0123456", ts, &body),
        expected
    );
    let ev: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (ev["event"].as_str(), ev["session_id"].as_str()),
        (Some("session_start"), Some(id.as_str()))
    );
    assert_eq!(headers["x-tern-event"], "session_start");
}

#[tokio::test]
async fn kill_9_of_the_gateway_mid_turn_then_restart_continues_the_session() {
    let e = Env::with_model().await;
    let mut gw = e.gateway();
    let key = e.key();
    let (_, v) = http_post(&format!("{}/api/sessions", gw.url), &key, json!({})).await;
    let id = v["session"]["id"].as_str().unwrap().to_owned();
    // In the workspace: the default sandbox lets commands write nowhere else.
    let pidfile = e.work().join("tool.pid");
    e.fake().push(Reply::tool_call(
        "long",
        "terminal",
        format!(
            // `>>`: a `>` onto a file needs an approval.
            r#"{{"command":"echo $$ >> {}; (sleep 2; touch landed-sub) & sleep 2; touch landed; wait"}}"#,
            pidfile.display()
        ),
    ));
    let url = format!("{}/api/sessions/{id}/chat", gw.url);
    let k2 = key.clone();
    let chat = tokio::spawn(async move {
        reqwest::Client::new()
            .post(&url)
            .bearer_auth(&k2)
            .json(&json!({"message": "long"}))
            .send()
            .await
    });
    eventually("the tool to start", async || {
        std::fs::read_to_string(&pidfile)
            .is_ok_and(|s| s.ends_with('\n'))
            .then_some(())
    })
    .await;
    gw.child.kill().unwrap(); // SIGKILL: no drain, no cleanup
    gw.child.wait().unwrap();
    assert!(
        chat.await.unwrap().is_err(),
        "the connection died with the gateway"
    );
    // The command dies with the gateway, its orphaned subshell too: neither side effect
    // lands after the transcript calls the command interrupted.
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    eventually("the command to die with the gateway", async || {
        tern_test_support::procs::gone(pid).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!e.work().join("landed").exists(), "the shell ran on");
    assert!(!e.work().join("landed-sub").exists(), "the subshell ran on");

    let gw = e.gateway();
    let r = reqwest::Client::new()
        .get(format!("{}/api/sessions/{id}", gw.url))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["session"]["status"], "idle",
        "a session left running is idle after the restart"
    );
    let (_, v) = http_get(&format!("{}/api/sessions/{id}/messages", gw.url), &key).await;
    tool_calls_answered(v["data"].as_array().unwrap()).unwrap();
    e.fake().push(Reply::text("Recovered."));
    let (s, v) = http_post(
        &format!("{}/api/sessions/{id}/chat", gw.url),
        &key,
        json!({"message": "again"}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["message"]["content"], "Recovered.");
    let msgs = e.fake().requests().pop().unwrap().messages().to_vec();
    let tool = msgs.iter().find(|m| m["tool_call_id"] == "long").unwrap();
    assert!(
        tool["content"].as_str().unwrap().contains("interrupted"),
        "repaired: {tool}"
    );
    assert_eq!(msgs.last().unwrap()["content"], "again");
}

/// Whether every tool call of the transcript (the API's messages) has its result before the
/// next message of another role: what a model accepts.
fn tool_calls_answered(msgs: &[Value]) -> Result<(), String> {
    let mut open: Vec<String> = Vec::new();
    for m in msgs {
        if m["role"] == "tool" {
            let id = m["tool_call_id"].as_str().unwrap_or_default();
            let Some(pos) = open.iter().position(|c| c == id) else {
                return Err(format!("a result without its call: {m}"));
            };
            open.remove(pos);
            continue;
        }
        if !open.is_empty() {
            return Err(format!("calls {open:?} have no result before {m}"));
        }
        if let Some(calls) = m["tool_calls"].as_array() {
            open = calls
                .iter()
                .map(|c| c["id"].as_str().unwrap_or_default().to_owned())
                .collect();
        }
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(format!("calls {open:?} have no result"))
    }
}

/// A store a crashed gateway left behind: a session `running`, its last answer's tool calls
/// only partly answered. The next gateway repairs the transcript as it starts, so the API
/// serves a valid one before any turn runs on the session.
#[tokio::test]
async fn a_transcript_left_mid_turn_is_valid_as_soon_as_the_gateway_starts() {
    let e = Env::new();
    let id = {
        let store = tern_store::Store::open(&e.home().join("tern.db"))
            .await
            .unwrap();
        let s = store
            .create_session(tern_store::NewSession {
                source: "api".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let call = |id: &str| tern_llm::ToolCall {
            id: id.into(),
            kind: "function".into(),
            function: tern_llm::FunctionCall {
                name: "terminal".into(),
                arguments: r#"{"command":"ls"}"#.into(),
            },
        };
        store
            .append_messages(
                &s.id,
                &[
                    tern_store::NewMessage::new(tern_llm::Role::User, "look around"),
                    tern_store::NewMessage {
                        role: Some(tern_llm::Role::Assistant),
                        tool_calls: vec![call("call_1"), call("call_2")],
                        ..Default::default()
                    },
                    tern_store::NewMessage::tool_result("call_1", "terminal", "a b c"),
                ],
            )
            .await
            .unwrap();
        store
            .set_status(&s.id, tern_store::SessionStatus::Running)
            .await
            .unwrap();
        store.close().await;
        s.id
    };
    let gw = e.gateway();
    let key = e.key();
    let (s, v) = http_get(&format!("{}/api/sessions/{id}/messages", gw.url), &key).await;
    assert_eq!(s, 200, "{v}");
    let msgs = v["data"].as_array().unwrap();
    tool_calls_answered(msgs).unwrap();
    assert_eq!(msgs.len(), 5, "{v}");
    assert_eq!(msgs[2]["content"], "a b c", "an existing result is kept");
    assert_eq!(msgs[3]["tool_call_id"], "call_2");
    assert!(
        msgs[3]["content"]
            .as_str()
            .is_some_and(|c| c.contains("interrupted")),
        "{}",
        msgs[3]
    );
    assert_eq!(msgs[4]["content"], "[interrupted]");
    let (_, v) = http_get(&format!("{}/api/sessions/{id}", gw.url), &key).await;
    assert_eq!(v["session"]["status"], "idle");
    assert!(gw.logs().contains("were repaired"), "{}", gw.logs());
}

#[tokio::test]
async fn inbox_only_serves_the_inbox_without_a_model() {
    // No model anywhere: an inbox-only gateway needs none.
    let env = Env::new();
    let gw = env.gateway_with(&["--inbox-only"], &[]);
    let key = env.key();
    assert_eq!(http_get(&format!("{}/health", gw.url), &key).await.0, 200);
    assert_eq!(
        http_get(&format!("{}/api/projects", gw.url), &key).await.0,
        200
    );
    let (status, task) = http_post(
        &format!("{}/api/tasks", gw.url),
        &key,
        json!({"name": "remote", "projectName": "default"}),
    )
    .await;
    assert_eq!(status, 201, "{task}");
    // The agent side is not served.
    assert_eq!(
        http_get(&format!("{}/api/sessions", gw.url), &key).await.0,
        404
    );
    let (status, _) = http_post(
        &format!("{}/v1/chat/completions", gw.url),
        &key,
        json!({"model": "x", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 404);
    assert!(
        !gw.stderr
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("turns will fail")),
        "no model warning in inbox-only mode"
    );
}

/// The gateway says at start how the agent's commands are sandboxed, and says it loudly when
/// they are not.
#[tokio::test]
async fn the_gateway_says_how_commands_are_sandboxed_at_start() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let logs = gw.logs();
    if let tern_sandbox::Support::Missing { .. } = tern_sandbox::Support::probe() {
        assert!(logs.contains("will be refused"), "{logs}");
    } else {
        assert!(
            logs.contains("the agent's commands run in the sandbox")
                && logs.contains("workspace-write, network off"),
            "{logs}"
        );
    }
    drop(gw);
    e.config("[sandbox]\nmode = \"full-access\"\n");
    let gw = e.gateway();
    let logs = gw.logs();
    assert!(
        logs.contains("full-access") && logs.contains("approve its own requests"),
        "{logs}"
    );
}

#[tokio::test]
async fn files_tern_creates_in_an_existing_home_are_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    // A home made before, readable by everyone, and the usual umask: files would be 0644.
    let e = Env::with_model().await.with_umask(0o022);
    std::fs::set_permissions(e.home(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // A turn on the command line: the store and the log file. Off the runtime's thread,
    // which serves the fake model.
    e.fake().push(Reply::text("hello"));
    let mut chat = e.tern();
    chat.args(["chat", "-q", "hi"]);
    let out = tokio::task::spawn_blocking(move || chat.output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let gw = e.gateway();
    let key = e.key();
    // An upload: its directories and file.
    let boundary = "tern-perm-test";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\
         Content-Type: text/plain\r\n\r\nprivate bytes\r\n--{boundary}--\r\n"
    );
    let r = reqwest::Client::new()
        .post(format!("{}/api/uploads", gw.url))
        .bearer_auth(&key)
        .header(
            "Content-Type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);

    // While the gateway runs, so the database's -wal and -shm files are there too.
    let found = tern_test_support::modes_under(&e.home());
    let names: Vec<String> = found
        .iter()
        .map(|(p, _)| p.strip_prefix(e.home()).unwrap().display().to_string())
        .collect();
    for expected in [
        "tern.db",
        "tern.db-wal",
        "tern.db-shm",
        "gateway.key",
        "inbox-admin.json",
        "logs",
        "logs/tern.log",
        "uploads",
        "uploads/tmp",
        "procs",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "no {expected} in {names:?}"
        );
    }
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("uploads/") && n.len() > 70),
        "no stored upload in {names:?}"
    );
    let loose: Vec<String> = found
        .iter()
        .filter(|(p, mode)| *mode != if p.is_dir() { 0o700 } else { 0o600 })
        .map(|(p, mode)| format!("{} {mode:o}", p.display()))
        .collect();
    assert!(loose.is_empty(), "not private: {loose:?}");
    // The home keeps the mode it was given.
    let home = std::fs::metadata(e.home()).unwrap().permissions().mode() & 0o777;
    assert_eq!(home, 0o755);

    // Upload links are made on the bound address, never on the Host the client sent.
    let (id, url) = {
        let text = r.text().await.unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        let id = v["id"].as_str().unwrap().to_owned();
        let r = reqwest::Client::new()
            .get(format!("{}/api/uploads/{id}", gw.url))
            .bearer_auth(&key)
            .header("Host", "evil.example")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        (id, v["url"].as_str().unwrap().to_owned())
    };
    assert_eq!(url, format!("{}/api/uploads/{id}/content", gw.url));
}
