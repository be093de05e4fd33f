//! `tern inbox` and `tern ask` as real processes against a real `tern gateway` on loopback
//! (the model is the fake one; the inbox does not use it): listing, showing, deciding and
//! answering requests as the local admin, the exit codes, `tern ask approve|form` waiting
//! for a decision made from another process (and withdrawing what it no longer waits
//! for), dismissing stale requests, short id prefixes, and projects with steps.

use crate::common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{Env, Running, assert_exit, http_get, http_post, stderr, stdout};
use serde_json::{Value, json};

fn json_out(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(o), stderr(o)))
}

/// An agent of the gateway, over the Pump Up agent API.
struct Agent {
    url: String,
    key: String,
}

impl Agent {
    fn new(gw: &Running, key: String) -> Self {
        Agent {
            url: gw.url.clone(),
            key,
        }
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let (status, v) = http_post(&format!("{}{path}", self.url), &self.key, body).await;
        assert_eq!(status, 201, "{path}");
        v
    }

    async fn task(&self, project: &str, name: &str) -> Value {
        self.post("/api/tasks", json!({"name": name, "projectName": project}))
            .await
    }

    async fn approval(&self, task: &str, summary: &str, context: Value) -> String {
        let v = self
            .post(
                "/api/approval-requests",
                json!({"projectName": "default", "taskId": task, "summary": summary,
                       "keyValueContext": context,
                       "recommendation": {"outcome": {"type": "APPROVE"}, "confidence": 0.8,
                                          "rationale": "the tests pass"}}),
            )
            .await;
        v["eventId"].as_str().unwrap().to_owned()
    }

    async fn elicitation(&self, task: &str, fields: Value) -> String {
        let v = self
            .post(
                "/api/elicitation-requests",
                json!({"projectName": "default", "taskId": task, "summary": "Tell me more",
                       "fields": fields}),
            )
            .await;
        v["eventId"].as_str().unwrap().to_owned()
    }

    /// `(status, body)` of a result read.
    async fn result(&self, kind: &str, id: &str) -> (u16, Value) {
        let url = format!("{}/api/{kind}-requests/{id}/result", self.url);
        http_get(&url, &self.key).await
    }
}

#[tokio::test]
async fn list_show_approve_reject_and_a_second_decision() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let agent = Agent::new(&gw, e.key());
    let task = agent.task("default", "deploy").await;
    let task = task["id"].as_str().unwrap();
    let a = agent
        .approval(
            task,
            "Deploy v2 to prod?",
            json!({"env": "prod", "version": "v2"}),
        )
        .await;
    let b = agent.approval(task, "Drop the old table?", json!({})).await;

    let o = e.inbox(&["list"]);
    assert_exit(&o, 0);
    let table = stdout(&o);
    assert!(
        table.contains(&a) && table.contains(&b) && table.contains("Deploy v2 to prod?"),
        "{table}"
    );
    assert!(stderr(&o).contains("2 in all"), "{}", stderr(&o));
    let o = e.inbox(&["list", "--json"]);
    assert_exit(&o, 0);
    let list = json_out(&o);
    assert_eq!(list["count"], 2);
    assert_eq!(list["items"][0]["id"], b.as_str(), "newest first");

    let o = e.inbox(&["show", &a]);
    assert_exit(&o, 0);
    let text = stdout(&o);
    for want in [
        "Deploy v2 to prod?",
        "env",
        "prod",
        "Recommendation  APPROVE",
        "the tests pass",
        "Timeline",
        "APPROVAL_REQUESTED",
        "TASK_CREATED",
    ] {
        assert!(text.contains(want), "{want:?} missing:\n{text}");
    }
    let o = e.inbox(&["show", &a, "--json"]);
    assert_exit(&o, 0);
    let view = json_out(&o);
    assert_eq!(view["id"], a.as_str());
    assert_eq!(view["status"], "pending");

    assert_eq!(agent.result("approval", &a).await.0, 204);
    let o = e.inbox(&["approve", &a, "--note", "go ahead"]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("APPROVE by admin"), "{}", stdout(&o));
    let (status, result) = agent.result("approval", &a).await;
    assert_eq!(status, 200);
    assert_eq!(result["outcome"]["type"], "APPROVE");
    assert_eq!(result["outcome"]["note"], "go ahead");
    assert_eq!(result["decidedBy"], "admin");

    let o = e.inbox(&["reject", &b, "--reason-code", "too_risky", "--json"]);
    assert_exit(&o, 0);
    let decided = json_out(&o);
    assert_eq!(decided["outcome"]["type"], "REJECT");
    assert_eq!(decided["outcome"]["reasonCode"], "too_risky");

    // A second decision: 409, exit 4, says who decided and when; nothing changes.
    let o = e.inbox(&["reject", &a, "--note", "changed my mind"]);
    assert_exit(&o, 4);
    let err = stderr(&o);
    assert!(
        err.contains("already decided by admin") && err.contains("APPROVE"),
        "{err}"
    );
    let o = e.inbox(&["approve", &b, "--json"]);
    assert_exit(&o, 4);
    assert_eq!(json_out(&o)["status"], 409);
    assert_eq!(agent.result("approval", &a).await.1, result, "unchanged");

    let o = e.inbox(&["list", "--json"]);
    assert_eq!(json_out(&o)["count"], 0, "nothing pending");
    let o = e.inbox(&["list", "--status", "decided", "--json"]);
    assert_eq!(json_out(&o)["count"], 2);
    let o = e.inbox(&["show", &a]);
    assert!(
        stdout(&o).contains("APPROVE by admin") && stdout(&o).contains("note: go ahead"),
        "{}",
        stdout(&o)
    );

    let o = e.inbox(&["approve", "0190a000-0000-7000-8000-000000000000"]);
    assert_exit(&o, 5);
    let o = e.inbox(&["approve"]);
    assert_exit(&o, 2);
}

fn every_kind() -> Value {
    json!([
        {"type": "Text", "id": "email", "label": "E-mail", "required": true, "format": "EMAIL"},
        {"type": "TextArea", "id": "notes", "label": "Notes", "required": false},
        {"type": "Number", "id": "n", "label": "How many", "required": true, "integerOnly": true, "min": 1, "max": 10},
        {"type": "Slider", "id": "level", "label": "Level", "required": true, "min": 0, "max": 1, "step": 0.25},
        {"type": "Switch", "id": "ok", "label": "OK?", "required": true},
        {"type": "Select", "id": "size", "label": "Size", "required": true, "options": ["S", "M", "L"]},
        {"type": "Multiselect", "id": "tags", "label": "Tags", "required": false, "options": ["a", "b", "c"]},
        {"type": "DateField", "id": "day", "label": "Day", "required": true},
        {"type": "DateTime", "id": "at", "label": "At", "required": false},
        {"type": "Time", "id": "time", "label": "Time", "required": false, "min": "09:00", "max": "17:00"},
    ])
}

#[tokio::test]
async fn answer_types_values_and_reports_invalid_ones() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let agent = Agent::new(&gw, e.key());
    let task = agent.task("default", "form").await;
    let task = task["id"].as_str().unwrap();
    let id = agent.elicitation(task, every_kind()).await;

    let o = e.inbox(&["show", &id]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains("Fields") && stdout(&o).contains("options S|M|L"),
        "{}",
        stdout(&o)
    );

    // Unknown field ids and values that cannot be typed are refused before sending.
    let o = e.inbox(&["answer", &id, "--field", "colour=red", "--field", "n=many"]);
    assert_exit(&o, 6);
    assert!(
        stderr(&o).contains("colour: the request has no such field")
            && stderr(&o).contains("not a number"),
        "{}",
        stderr(&o)
    );
    // Values the gateway refuses: every problem listed, nothing stored.
    let o = e.inbox(&[
        "answer",
        &id,
        "--field",
        "email=not-an-email",
        "--field",
        "n=11",
        "--field",
        "level=0.3",
        "--field",
        "ok=no",
        "--field",
        "size=XL",
        "--field",
        "day=2024-02-30",
    ]);
    assert_exit(&o, 6);
    let err = stderr(&o);
    for field in ["email:", "n:", "level:", "size:", "day:"] {
        assert!(err.contains(field), "{field} missing:\n{err}");
    }
    let o = e.inbox(&["answer", &id, "--field", "n=11", "--json"]);
    assert_exit(&o, 6);
    let body = json_out(&o);
    assert_eq!(body["body"]["code"], "invalid_answers");
    assert_eq!(agent.result("elicitation", &id).await.0, 204);

    let o = e.inbox(&[
        "answer",
        &id,
        "--field",
        "email=ada@example.com",
        "--field",
        "n=7",
        "--field",
        "level=0.75",
        "--field",
        "ok=yes",
        "--field",
        "size=M",
        "--field",
        "tags=a,c",
        "--field",
        "tags=b",
        "--field",
        "day=2024-02-29",
        "--field",
        "time=09:30",
        "--json",
    ]);
    assert_exit(&o, 0);
    let answered = json_out(&o);
    assert_eq!(answered["answeredBy"], "admin");
    let (status, result) = agent.result("elicitation", &id).await;
    assert_eq!(status, 200);
    let f = &result["fields"];
    assert_eq!(f["n"], 7);
    assert_eq!(f["level"], 0.75);
    assert_eq!(f["ok"], true);
    assert_eq!(f["size"], "M");
    assert_eq!(f["tags"], json!(["a", "c", "b"]));
    assert_eq!(f["email"], "ada@example.com");

    let o = e.inbox(&["answer", &id, "--field", "email=x@example.com"]);
    assert_exit(&o, 4);
    assert!(
        stderr(&o).contains("already decided by admin"),
        "{}",
        stderr(&o)
    );
    // An approval command on an elicitation: not found as an approval.
    let o = e.inbox(&["approve", &id]);
    assert_exit(&o, 5);
}

#[tokio::test]
async fn connection_problems_have_their_own_exit_codes() {
    let e = Env::with_model().await;
    // No gateway has started here: no admin file.
    let o = e.inbox(&["list"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("inbox-admin.json"), "{}", stderr(&o));

    let gw = e.gateway();
    let o = e.inbox(&["list", "--gateway", &gw.url, "--token", "tern_rv_nope"]);
    assert_exit(&o, 3);
    // An agent key is not a reviewer's.
    let o = e.inbox(&["list", "--gateway", &gw.url, "--token", &e.key()]);
    assert_exit(&o, 3);
    // The admin token is not sent to another address than its own.
    let o = e.inbox(&["list", "--gateway", "http://127.0.0.1:9"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("--token"), "{}", stderr(&o));
    // From "elsewhere": the URL and a token, the token from the environment.
    let o = e
        .tern()
        .args(["inbox", "list", "--json", "--gateway", &gw.url])
        .env("TERN_INBOX_TOKEN", e.admin_token())
        .output()
        .unwrap();
    assert_exit(&o, 0);
    // Nothing listens on port 9 of loopback.
    let o = e.inbox(&["list", "--gateway", "http://127.0.0.1:9", "--token", "x"]);
    assert_exit(&o, 7);
    assert!(stderr(&o).contains("cannot reach"), "{}", stderr(&o));
    let o = e.tern().args(["inbox", "--help"]).output().unwrap();
    assert!(stdout(&o).contains("already decided"), "{}", stdout(&o));
}

/// A running `tern ask`, and the request id it announced on stderr.
struct Asking {
    child: Child,
    id: String,
    stderr: mpsc::Receiver<String>,
}

impl Asking {
    fn start(cmd: Command) -> Self {
        Self::start_with_stdin(cmd, None)
    }

    /// Starts `cmd`, writing `input` to its stdin first when given.
    fn start_with_stdin(mut cmd: Command, input: Option<&str>) -> Self {
        if input.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(text) = input {
            let mut stdin = child.stdin.take().unwrap();
            std::io::Write::write_all(&mut stdin, text.as_bytes()).unwrap();
        }
        let err = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut seen = Vec::new();
        let id = loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => {
                    if let Some(rest) = line.split(" request ").nth(1)
                        && line.starts_with("tern ask: waiting")
                    {
                        break rest.trim().to_owned();
                    }
                    seen.push(line);
                }
                Err(_) => panic!("tern ask announced no request:\n{}", seen.join("\n")),
            }
        };
        Asking {
            child,
            id,
            stderr: rx,
        }
    }

    /// Waits for the exit; `(code, stdout, stderr after the announcement)`.
    fn finish(mut self) -> (Option<i32>, String, String) {
        let status = self.child.wait().unwrap();
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        // The reader thread may still be passing the last lines on: read to its end (the
        // end of stderr, now that the process has exited).
        let mut err = Vec::new();
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_secs(30)) {
            err.push(line);
        }
        (status.code(), out, err.join("\n"))
    }
}

#[tokio::test]
async fn ask_approve_exits_by_the_decision_made_in_another_process() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let agent = Agent::new(&gw, e.key());

    // Approved: exit 0, the decision printed.
    let mut cmd = e.tern();
    cmd.args([
        "ask",
        "approve",
        "Deploy v2 to prod?",
        "--context",
        "env=prod",
        "--poll-interval",
        "100ms",
    ]);
    let ask = Asking::start(cmd);
    let o = e.inbox(&["show", &ask.id, "--json"]);
    assert_exit(&o, 0);
    let view = json_out(&o);
    assert_eq!(view["summary"], "Deploy v2 to prod?");
    assert_eq!(view["keyValueContext"]["env"], "prod");
    assert_exit(&e.inbox(&["approve", &ask.id, "--note", "ship it"]), 0);
    let (code, out, _) = ask.finish();
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("APPROVE by admin") && out.contains("note: ship it"),
        "{out}"
    );

    // Edited and approved counts as approved.
    let mut cmd = e.tern();
    cmd.args(["ask", "approve", "Restart the cache?", "--json"]);
    let ask = Asking::start(cmd);
    assert_exit(
        &e.inbox(&["approve", &ask.id, "--edit", "--note", "only one node"]),
        0,
    );
    let (code, out, _) = ask.finish();
    assert_eq!(code, Some(0));
    let result: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(result["outcome"]["type"], "EDIT_AND_APPROVE");

    // Rejected: exit 1; filed under a named task, which a second request reuses.
    let mut cmd = e.tern();
    cmd.args(["ask", "approve", "Drop the table?", "--task", "nightly"]);
    let ask = Asking::start(cmd);
    assert_exit(&e.inbox(&["reject", &ask.id, "--note", "no"]), 0);
    let (code, out, _) = ask.finish();
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("REJECT"), "{out}");
    let mut cmd = e.tern();
    cmd.args(["ask", "approve", "Drop it now?", "--task", "nightly"]);
    let ask = Asking::start(cmd);
    assert_exit(&e.inbox(&["decide", &ask.id, "escalate"]), 0);
    let (code, out, _) = ask.finish();
    assert_eq!(code, Some(1), "other outcomes are not approvals: {out}");
    assert!(out.contains("ESCALATE"), "{out}");
    let tasks: Value = reqwest::Client::new()
        .get(format!("{}/api/tasks?name=nightly", gw.url))
        .bearer_auth(&agent.key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(tasks["items"].as_array().unwrap().len(), 1, "{tasks}");
}

#[tokio::test]
async fn ask_times_out_with_3_and_resumes_with_its_idempotency_key() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let mut cmd = e.tern();
    cmd.args([
        "ask",
        "approve",
        "Rotate the keys?",
        "--timeout",
        "1s",
        "--keep",
        "--idempotency-key",
        "rotate-2024",
    ]);
    let ask = Asking::start(cmd);
    let first = ask.id.clone();
    let (code, _, err) = ask.finish();
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("stays pending"), "{err}");
    let agent = Agent::new(&gw, e.key());
    assert_eq!(
        agent.result("approval", &first).await.0,
        204,
        "--keep keeps it"
    );

    // The same key finds the same request: nothing new is created.
    let mut cmd = e.tern();
    cmd.args([
        "ask",
        "approve",
        "Rotate the keys?",
        "--idempotency-key",
        "rotate-2024",
        "--gateway",
        &gw.url,
        "--key",
        &e.key(),
    ]);
    let ask = Asking::start(cmd);
    assert_eq!(ask.id, first);
    let o = e.inbox(&["list", "--json"]);
    assert_eq!(json_out(&o)["count"], 1);
    assert_exit(&e.inbox(&["approve", &first]), 0);
    let (code, out, _) = ask.finish();
    assert_eq!(code, Some(0), "{out}");

    // Ctrl-C with --keep: exit 130, the request stays pending.
    let mut cmd = e.tern();
    cmd.args(["ask", "approve", "Wait for me?", "--keep"]);
    let ask = Asking::start(cmd);
    let kept = ask.id.clone();
    interrupt(&ask);
    let (code, _, err) = ask.finish();
    assert_eq!(code, Some(130), "{err}");
    assert_eq!(agent.result("approval", &kept).await.0, 204, "{err}");

    // Usage errors: exit 2.
    let o = e
        .tern()
        .args(["ask", "approve", "x", "--context", "novalue"])
        .output()
        .unwrap();
    assert_exit(&o, 2);
    let o = e
        .tern()
        .args(["ask", "approve", "x", "--key", "tern_wrong"])
        .output()
        .unwrap();
    assert_exit(&o, 2);
    // The key is an agent key: the message says so, and sends nobody to reviewer tokens.
    let err = stderr(&o);
    assert!(err.contains("401") && err.contains("agent key"), "{err}");
    assert!(
        err.contains("--key") && !err.contains("inbox-admin.json"),
        "{err}"
    );
}

/// SIGINT to a running `tern ask`, as Ctrl-C in its terminal sends it.
fn interrupt(ask: &Asking) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(ask.child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
}

/// The request's status as the reviewer API reports it.
fn status_of(e: &Env, id: &str) -> Value {
    let o = e.inbox(&["show", id, "--json"]);
    assert_exit(&o, 0);
    json_out(&o)["status"].clone()
}

#[tokio::test]
async fn ask_withdraws_its_request_after_a_timeout_and_after_ctrl_c() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let agent = Agent::new(&gw, e.key());

    let mut cmd = e.tern();
    cmd.args([
        "ask",
        "approve",
        "Rotate the keys?",
        "--timeout",
        "1s",
        "--json",
    ]);
    let ask = Asking::start(cmd);
    let id = ask.id.clone();
    let (code, out, err) = ask.finish();
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains(&format!("request {id} withdrawn")), "{err}");
    let printed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(printed["withdrawn"], true, "{out}");
    // Nobody waits for it any more, and the inbox says so.
    assert_eq!(agent.result("approval", &id).await.0, 409);
    assert_eq!(status_of(&e, &id), "withdrawn");

    let mut cmd = e.tern();
    cmd.args(["ask", "form", "--field", "region:select[eu|us]"]);
    let ask = Asking::start(cmd);
    let id = ask.id.clone();
    interrupt(&ask);
    let (code, _, err) = ask.finish();
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains(&format!("request {id} withdrawn")), "{err}");
    assert_eq!(agent.result("elicitation", &id).await.0, 409);
    assert_eq!(status_of(&e, &id), "withdrawn");
    let o = e.inbox(&["show", &id]);
    assert!(
        stdout(&o).contains("tern ask was interrupted"),
        "the reason is on the timeline: {}",
        stdout(&o)
    );
}

#[tokio::test]
async fn ask_gives_up_when_the_gateway_cannot_be_reached() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let mut cmd = e.tern();
    cmd.args([
        "ask",
        "approve",
        "Anyone there?",
        "--poll-interval",
        "100ms",
        "--gateway-timeout",
        "1s",
    ]);
    let ask = Asking::start(cmd);
    drop(gw);
    let (code, _, err) = ask.finish();
    assert_eq!(code, Some(4), "{err}");
    assert!(
        err.contains("cannot reach the gateway") && err.contains("gave up after"),
        "{err}"
    );

    // Nothing listens at all: the create is retried a few times, then the same exit.
    let o = e
        .tern()
        .args([
            "ask",
            "approve",
            "Hello?",
            "--gateway",
            "http://127.0.0.1:9",
        ])
        .args(["--key", "tern_x"])
        .output()
        .unwrap();
    assert_exit(&o, 4);
    assert!(
        stderr(&o).contains("cannot reach the gateway"),
        "{}",
        stderr(&o)
    );
}

#[tokio::test]
async fn a_reviewer_dismisses_a_stale_request_found_by_an_id_prefix() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    // Every start says where the inbox is.
    assert!(
        gw.logs()
            .contains(&format!("tern: inbox: {}/inbox", gw.url)),
        "{}",
        gw.logs()
    );
    let agent = Agent::new(&gw, e.key());
    let task = agent.task("default", "t").await;
    let task = task["id"].as_str().unwrap();
    let a = agent.approval(task, "Stale one", json!({})).await;
    let b = agent.approval(task, "Fresh one", json!({})).await;
    // Two ids made a moment apart share their beginning (UUIDv7: the time comes first).
    let common: String = a
        .chars()
        .zip(b.chars())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect();
    assert!(common.len() >= 4, "{a} {b}");
    let o = e.inbox(&["show", &common]);
    assert_exit(&o, 2);
    let err = stderr(&o);
    assert!(
        err.contains("more than one request") && err.contains(&a) && err.contains(&b),
        "the candidates are listed: {err}"
    );
    let o = e.inbox(&["show", "ffffffff"]);
    assert_exit(&o, 5);
    let short_a = &a[..common.len() + 1];
    let o = e.inbox(&["show", short_a, "--json"]);
    assert_exit(&o, 0);
    assert_eq!(json_out(&o)["id"], a.as_str());

    let o = e.inbox(&["dismiss", short_a, "--reason", "asked twice"]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains(&format!("{a}: dismissed")),
        "{}",
        stdout(&o)
    );
    let (status, body) = agent.result("approval", &a).await;
    assert_eq!(status, 409, "the agent reads a withdrawal: {body}");
    let o = e.inbox(&["show", &a, "--json"]);
    let view = json_out(&o);
    assert_eq!(view["status"], "withdrawn");
    assert_eq!(view["result"]["dismissedBy"], "admin");
    assert_eq!(view["result"]["reason"], "asked twice");
    let o = e.inbox(&["show", &a]);
    let text = stdout(&o);
    assert!(
        text.contains("dismissed by admin at") && text.contains("reason: asked twice"),
        "{text}"
    );
    // Dismissed once is dismissed; a decision now is refused and says why.
    assert_exit(&e.inbox(&["dismiss", &a]), 0);
    let o = e.inbox(&["approve", short_a]);
    assert_exit(&o, 4);
    assert!(stderr(&o).contains("withdrawn"), "{}", stderr(&o));
    // The other is untouched.
    assert_eq!(agent.result("approval", &b).await.0, 204);

    // A waiting `tern ask` whose request is dismissed ends as declined.
    let mut cmd = e.tern();
    cmd.args([
        "ask",
        "approve",
        "Still needed?",
        "--poll-interval",
        "100ms",
    ]);
    let ask = Asking::start(cmd);
    assert_exit(&e.inbox(&["withdraw", &ask.id]), 0);
    let (code, _, err) = ask.finish();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("was withdrawn"), "{err}");
}

#[tokio::test]
async fn ask_waits_out_a_gateway_restart() {
    let e = Env::with_model().await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let listen = format!("127.0.0.1:{port}");
    let gw = e.gateway_on(&listen);
    let mut cmd = e.tern();
    cmd.args([
        "ask",
        "approve",
        "Survive a restart?",
        "--poll-interval",
        "200ms",
    ]);
    let ask = Asking::start(cmd);
    drop(gw);
    let _gw = e.gateway_on(&listen);
    assert_exit(&e.inbox(&["approve", &ask.id]), 0);
    let (code, out, err) = ask.finish();
    assert_eq!(code, Some(0), "{out}\n{err}");
}

#[tokio::test]
async fn ask_form_prints_the_answers_as_json() {
    let e = Env::with_model().await;
    let _gw = e.gateway();
    let fields = json!([{"type": "Switch", "id": "ok", "label": "All good?", "required": true}]);
    let mut cmd = e.tern();
    cmd.args([
        "ask",
        "form",
        "--summary",
        "About you",
        "--field",
        "email:email:Your e-mail",
        "--field",
        "n:integer[1..5]:How many?",
        "--field",
        "size:select[S|M|L]",
        "--field",
        "notes?:textarea",
        "--fields-json",
        "-",
    ]);
    let ask = Asking::start_with_stdin(cmd, Some(&fields.to_string()));
    let o = e.inbox(&["show", &ask.id, "--json"]);
    let view = json_out(&o);
    assert_eq!(view["summary"], "About you");
    assert_eq!(view["fields"].as_array().unwrap().len(), 5);
    let o = e.inbox(&[
        "answer",
        &ask.id,
        "--field",
        "email=ada@example.com",
        "--field",
        "n=3",
        "--field",
        "size=L",
        "--field",
        "ok=true",
    ]);
    assert_exit(&o, 0);
    let (code, out, err) = ask.finish();
    assert_eq!(code, Some(0), "{err}");
    let answers: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        answers,
        json!({"email": "ada@example.com", "n": 3, "size": "L", "ok": true})
    );

    let o = e
        .tern()
        .args(["ask", "form", "--field", "x:slider[0..]"])
        .output()
        .unwrap();
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("both ends"), "{}", stderr(&o));
}

#[tokio::test]
async fn projects_with_steps_from_the_cli_and_from_config() {
    let e = Env::with_model().await;
    std::fs::write(
        e.home().join("config.toml"),
        "[[inbox.projects]]\nname = \"ops\"\nsteps = [{ name = \"run\" }, { name = \"check\", owner = \"HUMAN\" }]\n",
    )
    .unwrap();
    let o = e.inbox(&[
        "projects",
        "add",
        "refunds",
        "--step",
        "triage>review",
        "--step",
        "review:HUMAN>done",
        "--step",
        "done",
    ]);
    assert_exit(&o, 0);
    assert!(
        stdout(&o).contains("triage (AGENT → review)"),
        "{}",
        stdout(&o)
    );
    let o = e.inbox(&["projects", "add", "refunds"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("already exists"), "{}", stderr(&o));
    let o = e.inbox(&["projects", "add", "bad", "--step", "a>nowhere"]);
    assert_exit(&o, 2);
    let o = e.inbox(&["projects", "add", "bad", "--step", "a:robot"]);
    assert_exit(&o, 2);

    let gw = e.gateway();
    let o = e.inbox(&["projects", "list", "--json"]);
    assert_exit(&o, 0);
    let list = json_out(&o);
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "ops", "refunds"]);
    let refunds = &list["items"][2];
    assert_eq!(refunds["steps"]["initialStep"], "triage");
    assert_eq!(refunds["steps"]["steps"][1]["owner"], "HUMAN");
    assert_eq!(list["items"][1]["steps"]["initialStep"], "run");

    // Agents use them at once.
    let agent = Agent::new(&gw, e.key());
    let task = agent.task("refunds", "refund #1").await;
    assert_eq!(task["currentStep"], "triage");
    let task = agent.task("ops", "nightly").await;
    assert_eq!(task["currentStep"], "run");
    // A restart keeps them as they are.
    drop(gw);
    let _gw = e.gateway();
    let o = e.inbox(&["projects", "list"]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("check (HUMAN)"), "{}", stdout(&o));
}

#[tokio::test]
async fn an_inbox_only_gateway_serves_tern_ask_and_tern_inbox() {
    let e = Env::with_model().await;
    let _gw = e.gateway_with(&["--inbox-only"], &[]);
    let mut cmd = e.tern();
    cmd.env_remove("OPENAI_BASE_URL")
        .env_remove("TERN_MODEL")
        .args([
            "ask",
            "approve",
            "Remote inbox?",
            "--poll-interval",
            "100ms",
        ]);
    let ask = Asking::start(cmd);
    assert_exit(&e.inbox(&["approve", &ask.id]), 0);
    let (code, out, err) = ask.finish();
    assert_eq!(code, Some(0), "{out}\n{err}");
}
