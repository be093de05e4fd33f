//! Dangerous commands through the inbox, end to end: a real `tern gateway` process, the fake
//! model, and decisions made with `tern inbox approve|reject` from another process. The
//! command's effect is a line it appends to a file, so the tests see whether and how often
//! it really ran.

use crate::common;

use std::process::Output;
use std::time::Duration;

use common::{Api, Env, wait_until};
use serde_json::{Value, json};
use tern_fake_model::Reply;

/// Generous bounds for what a test waits for; they only turn a hang into a failure.
const WAIT: Duration = Duration::from_secs(60);

impl Env {
    /// `tern inbox ARGS…`, which must succeed.
    fn inbox_ok(&self, args: &[&str]) -> Output {
        let o = self.inbox(args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "tern inbox {args:?}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        o
    }

    /// How many times the command of `marker` ran: the lines it appended.
    fn runs(&self, marker: &str) -> usize {
        std::fs::read_to_string(self.work().join("ran.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| *l == marker)
            .count()
    }

    /// Waits until the fake model has received `n` requests in all.
    async fn model_requests(&self, n: usize) -> Vec<tern_fake_model::Recorded> {
        self.fake()
            .wait_requests(n, WAIT)
            .await
            .unwrap_or_else(|| panic!("the model did not get {n} requests"))
    }
}

/// A dangerous command (a recursive delete) whose run leaves a line `marker` in `ran.log`.
fn command(marker: &str) -> String {
    format!("mkdir -p junk-{marker} && echo {marker} >> ran.log && rm -r junk-{marker}")
}

fn terminal(call: &str, cmd: &str) -> Reply {
    Reply::tool_call(call, "terminal", json!({ "command": cmd }).to_string())
}

impl Api {
    async fn status(&self, id: &str) -> String {
        let (_, v) = self
            .send(self.http.get(format!("{}/api/sessions/{id}", self.url)))
            .await;
        v["session"]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Waits (bounded) until the resumed turn has ended: the session is idle, or waiting
    /// when the turn asked again.
    async fn until_settled(&self, id: &str) {
        wait_until(WAIT, Duration::from_millis(100), async || {
            match self.status(id).await.as_str() {
                "idle" | "waiting" => Ok(()),
                _ => Err(format!("the turn of session {id} did not end")),
            }
        })
        .await
    }
}

/// The tool result the model got for `call`, found in its last request (the latest, when
/// the model used the id more than once).
fn tool_result(req: &tern_fake_model::Recorded, call: &str) -> String {
    req.messages()
        .iter()
        .rev()
        .find(|m| m["tool_call_id"] == call)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no result for {call}"))
        .to_owned()
}

/// The text of the last message the model got in `req` (a decision, when resumed).
fn last_content(req: &tern_fake_model::Recorded) -> String {
    req.messages().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The request id the pending answer names.
fn request_id(result: &str) -> String {
    let rest = result
        .split("request ")
        .nth(1)
        .unwrap_or_else(|| panic!("no request id in {result}"));
    rest.split_whitespace().next().unwrap().to_owned()
}

/// One turn: the model runs `cmd` (call `call`), is told it awaits approval, and ends the
/// turn. Returns the request id and the session's status after the turn.
async fn ask(e: &Env, api: &Api, session: &str, call: &str, cmd: &str) -> String {
    ask_with(e, api, session, call, terminal(call, cmd)).await
}

/// [`ask`] with the model's tool call `reply` (whose call id is `call`).
async fn ask_with(e: &Env, api: &Api, session: &str, call: &str, reply: Reply) -> String {
    let before = e.fake().requests().len();
    e.fake().push(reply);
    e.fake().push(Reply::text("Waiting for the approval."));
    api.chat(session, "clean up").await;
    let reqs = e.model_requests(before + 2).await;
    let result = tool_result(&reqs[before + 1], call);
    assert!(
        result.contains("needs a human's approval") && result.contains("End your turn now"),
        "{result}"
    );
    assert!(
        !result.contains("safer approach"),
        "not a refusal: {result}"
    );
    assert_eq!(api.status(session).await, "waiting");
    request_id(&result)
}

#[tokio::test]
async fn approve_runs_exactly_that_command_once_and_reject_never_runs_it() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let session = api.create_session().await;
    let cmd = command("a");
    let id = ask(&e, &api, &session, "c1", &cmd).await;
    assert_eq!(e.runs("a"), 0, "not run while waiting");
    let shown = e.inbox_ok(&["show", &id, "--json"]);
    let view: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(view["keyValueContext"]["action"], "command");
    assert_eq!(view["keyValueContext"]["command"], cmd.as_str());

    // The resumed turn runs the command again (a new call), then tries it a third time.
    let before = e.fake().requests().len();
    e.fake().push(terminal("c2", &cmd));
    e.fake().push(terminal("c3", &cmd));
    e.fake().push(Reply::text("Done."));
    e.inbox_ok(&["approve", &id]);
    let reqs = e.model_requests(before + 3).await;
    api.until_settled(&session).await;
    let decision = last_content(&reqs[before]);
    assert!(
        decision.contains(&id) && decision.contains("APPROVE"),
        "{decision}"
    );
    assert_eq!(e.runs("a"), 1, "approved once: ran once");
    assert!(!e.work().join("junk-a").exists());
    let third = tool_result(&reqs[before + 2], "c3");
    assert!(
        third.contains("needs a human's approval"),
        "once is once: {third}"
    );
    assert_ne!(request_id(&third), id);
    assert_eq!(e.runs("a"), 1);

    // A rejection: the resumed agent is told not to retry, and the command never runs.
    let session = api.create_session().await;
    let cmd = command("b");
    let id = ask(&e, &api, &session, "r1", &cmd).await;
    let before = e.fake().requests().len();
    e.fake().push(Reply::text("Understood, I will not run it."));
    e.inbox_ok(&["reject", &id, "--note", "not today"]);
    let reqs = e.model_requests(before + 1).await;
    api.until_settled(&session).await;
    let decision = last_content(&reqs[before]);
    assert!(decision.contains("REJECT"), "{decision}");
    assert!(
        decision.to_lowercase().contains("do not retry")
            || decision.contains("Do not run it again"),
        "the agent is told not to retry: {decision}"
    );
    assert_eq!(e.runs("b"), 0);
    assert!(!e.work().join("junk-b").exists(), "never ran");
}

#[tokio::test]
async fn once_for_this_session_and_always() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());

    for (scope, second_runs) in [("once", false), ("session", true)] {
        let session = api.create_session().await;
        let first = command(&format!("{scope}-1"));
        let second = command(&format!("{scope}-2"));
        let id = ask(&e, &api, &session, "c1", &first).await;
        let before = e.fake().requests().len();
        // Resumed: the approved command, then another one of the same kind.
        e.fake().push(terminal("c2", &first));
        e.fake().push(terminal("c3", &second));
        e.fake().push(Reply::text("Done."));
        e.inbox_ok(&["approve", &id, "--reason-code", scope]);
        let reqs = e.model_requests(before + 3).await;
        api.until_settled(&session).await;
        assert_eq!(e.runs(&format!("{scope}-1")), 1, "{scope}");
        let result = tool_result(&reqs[before + 2], "c3");
        assert_eq!(
            e.runs(&format!("{scope}-2")),
            usize::from(second_runs),
            "{scope}: {result}"
        );
        assert_eq!(
            result.contains("needs a human's approval"),
            !second_runs,
            "{scope}: {result}"
        );

        // The session grant is the session's: a new session asks again.
        if scope == "session" {
            let other = api.create_session().await;
            ask(&e, &api, &other, "c1", &command("elsewhere")).await;
            assert_eq!(e.runs("elsewhere"), 0);
        }
    }

    // Always: the exact command goes to the allowlist and runs in any session without
    // asking; another command of the same kind still asks.
    let session = api.create_session().await;
    let cmd = command("always");
    let id = ask(&e, &api, &session, "c1", &cmd).await;
    let before = e.fake().requests().len();
    e.fake().push(terminal("c2", &cmd));
    e.fake().push(Reply::text("Done."));
    e.inbox_ok(&["approve", &id, "--reason-code", "always"]);
    e.model_requests(before + 2).await;
    api.until_settled(&session).await;
    assert_eq!(e.runs("always"), 1);
    let config = std::fs::read_to_string(e.home().join("config.toml")).unwrap();
    assert!(config.contains(&format!("{cmd:?}")), "{config}");

    let other = api.create_session().await;
    let before = e.fake().requests().len();
    e.fake().push(terminal("c1", &cmd));
    e.fake().push(Reply::text("Done."));
    api.chat(&other, "again").await;
    let reqs = e.model_requests(before + 2).await;
    let result = tool_result(&reqs[before + 1], "c1");
    assert!(!result.contains("approval"), "{result}");
    assert_eq!(e.runs("always"), 2);
    assert_eq!(api.status(&other).await, "idle");
    ask(&e, &api, &other, "c2", &command("always-other")).await;
}

/// The self-approval attack (issue 12): while session A waits for a human to approve a
/// dangerous command, session B's agent runs `tern inbox approve ID --reason-code always`
/// from its shell — in the foreground and in the background, with and without pointing
/// `TERN_HOME`/`--home` at the gateway's home. The sandbox keeps the admin token out of
/// reach: every attempt fails saying there are no credentials, the request stays pending,
/// the command never runs and nothing reaches the allowlist.
#[tokio::test]
async fn an_agent_cannot_approve_its_own_request_from_the_shell() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let victim = api.create_session().await;
    let cmd = command("self");
    let id = ask(&e, &api, &victim, "v1", &cmd).await;

    let tern = env!("CARGO_BIN_EXE_tern");
    let home = e.home().display().to_string();
    let attacks = [
        format!("{tern} inbox approve {id} --reason-code always"),
        format!("TERN_HOME={home} {tern} inbox approve {id} --reason-code always"),
        format!("{tern} --home {home} inbox approve {id} --reason-code always"),
        format!("cat {home}/inbox-admin.json {home}/gateway.key"),
    ];
    let attacker = api.create_session().await;
    let before = e.fake().requests().len();
    for (i, a) in attacks.iter().enumerate() {
        e.fake().push(terminal(&format!("fg{i}"), a));
        e.fake().push(Reply::tool_call(
            &format!("bg{i}"),
            "terminal",
            json!({"command": format!("({a}) >> bg{i}.out 2>&1; echo exit=$? >> bg{i}.out"), "background": true})
                .to_string(),
        ));
    }
    e.fake().push(Reply::text("Done."));
    api.chat(&attacker, "approve the pending request").await;
    let reqs = e.model_requests(before + 2 * attacks.len() + 1).await;
    let last = reqs.last().unwrap();
    let admin_token = e.admin_token();
    let key = e.key();
    for i in 0..attacks.len() {
        let fg = tool_result(last, &format!("fg{i}"));
        assert!(
            !fg.contains(&admin_token) && !fg.contains(&key),
            "fg{i} read a secret: {fg}"
        );
        // Without TERN_HOME (scrubbed) `tern inbox` finds no gateway; pointed at the home it
        // cannot read the credentials; `cat` is refused outright.
        let says = [
            "no gateway to talk to",
            "no reviewer credentials",
            "no reviewer credentials",
            "Permission denied",
        ][i];
        assert!(fg.contains(says), "fg{i}: {fg}");
        let out = e.work().join(format!("bg{i}.out"));
        let text =
            wait_until(
                WAIT,
                Duration::from_millis(100),
                async || match std::fs::read_to_string(&out) {
                    Ok(t) if t.contains("exit=") => Ok(t),
                    _ => Err(format!("background attack {i} did not finish")),
                },
            )
            .await;
        assert!(!text.contains("exit=0"), "bg{i} succeeded: {text}");
        assert!(
            !text.contains(&admin_token) && !text.contains(&key),
            "bg{i} read a secret: {text}"
        );
    }

    let shown = e.inbox_ok(&["show", &id, "--json"]);
    let view: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(view["status"], "pending", "{view}");
    assert_eq!(e.runs("self"), 0);
    let config = std::fs::read_to_string(e.home().join("config.toml")).unwrap_or_default();
    assert!(!config.contains("junk-self"), "allowlisted: {config}");
}

/// Some models send `call_1` in every turn. A second dangerous command in a later turn gets
/// an approval request of its own, instead of being answered with the first one — already
/// rejected — and waiting on it forever.
#[tokio::test]
async fn a_model_that_reuses_its_call_id_gets_a_request_for_each_command() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let session = api.create_session().await;
    let first = ask(&e, &api, &session, "call_1", &command("one")).await;
    let before = e.fake().requests().len();
    e.fake().push(Reply::text("Understood, I will not run it."));
    e.inbox_ok(&["reject", &first]);
    e.model_requests(before + 1).await;
    api.until_settled(&session).await;

    // The next turn: the same call id, another command. `ask` checks the model is told to
    // wait and the session waits.
    let second = ask(&e, &api, &session, "call_1", &command("two")).await;
    assert_ne!(second, first, "a request of its own");
    let shown = e.inbox_ok(&["show", &second, "--json"]);
    let view: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(view["keyValueContext"]["command"], command("two").as_str());
    let waits = api.session(&session).await["waits"].clone();
    assert_eq!(waits.as_array().map(Vec::len), Some(1), "{waits}");
    assert_eq!(waits[0]["requestId"], second.as_str());

    // Its approval resumes the session, which runs it (the model reusing `call_1` again).
    let before = e.fake().requests().len();
    e.fake().push(terminal("call_1", &command("two")));
    e.fake().push(Reply::text("Done."));
    e.inbox_ok(&["approve", &second]);
    e.model_requests(before + 2).await;
    api.until_settled(&session).await;
    assert_eq!((e.runs("one"), e.runs("two")), (0, 1));
}

/// A directory beside the workspace, where the default sandbox (`workspace-write`) lets no
/// command write.
fn outside(e: &Env) -> std::path::PathBuf {
    let dir = e.dir.path().join("outside");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A harmless command the sandbox stops: it appends `marker` to `outside/log`.
fn write_outside(e: &Env, marker: &str) -> String {
    format!("echo {marker} >> {}", outside(e).join("log").display())
}

/// How many times the command of `marker` really ran outside: its lines in `outside/log`.
fn outside_runs(e: &Env, marker: &str) -> usize {
    std::fs::read_to_string(e.dir.path().join("outside").join("log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == marker)
        .count()
}

/// A tool result, which is a JSON object.
fn result_json(result: &str) -> Value {
    serde_json::from_str(result).unwrap_or_else(|e| panic!("{e}: {result}"))
}

/// The request `id` as `tern inbox show --json` shows it.
fn shown(e: &Env, id: &str) -> Value {
    serde_json::from_slice(&e.inbox_ok(&["show", id, "--json"]).stdout).unwrap()
}

/// The `sandbox` note of a command that ran outside the sandbox thanks to a grant.
const RAN_OUTSIDE: &str = "ran outside the sandbox, as a human approved";

/// Asserts that `result` is that of a command that ran confined, was stopped by the sandbox
/// (it failed with a denial) and is now offered for escalation in the inbox; returns the
/// escalation request's id.
fn stopped_and_asked(result: &str) -> String {
    let v = result_json(result);
    let sandbox = v["sandbox"].as_str().unwrap_or_default();
    assert!(
        sandbox
            .contains("the sandbox (workspace-write, network off) probably stopped this command")
            && sandbox.contains("needs a human's approval")
            && sandbox.contains("End your turn now"),
        "{result}"
    );
    assert!(v["exit_code"].as_i64().is_some_and(|c| c != 0), "{result}");
    assert!(
        v["output"]
            .as_str()
            .is_some_and(|o| o.contains("Permission denied")),
        "{result}"
    );
    request_id(sandbox)
}

/// Issue 12: a command the sandbox stopped (it writes outside the workspace) becomes an
/// approval request that says what was run, where, under which policy and what was denied.
/// Approved once, the resumed agent's same command runs exactly once outside the sandbox
/// and the next run is stopped again; rejected, the agent is told not to retry and the
/// command's write never happens.
#[tokio::test]
async fn a_command_the_sandbox_stopped_runs_outside_once_if_approved_never_if_rejected() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let session = api.create_session().await;
    let cmd = write_outside(&e, "once");
    let before = e.fake().requests().len();
    // `ask` checks that the model is told to end its turn and that the session waits.
    let id = ask(&e, &api, &session, "c1", &cmd).await;
    let result = tool_result(&e.fake().requests()[before + 1], "c1");
    assert_eq!(stopped_and_asked(&result), id);
    assert!(!outside(&e).join("log").exists(), "stopped: {result}");
    let view = shown(&e, &id);
    let ctx = &view["keyValueContext"];
    assert_eq!(ctx["command"], cmd.as_str(), "{view}");
    assert_eq!(ctx["workdir"], e.work().display().to_string(), "{view}");
    assert_eq!(ctx["policy"], "workspace-write, network off", "{view}");
    assert_eq!(
        ctx["denied"], "a file access outside what the sandbox allows",
        "{view}"
    );
    assert!(
        ctx["pattern"]
            .as_str()
            .is_some_and(|p| p.starts_with("sandbox_escalation")),
        "{view}"
    );
    assert_eq!(view["status"], "pending", "{view}");

    // The resumed turn runs the command again (a new call), then a third time.
    let before = e.fake().requests().len();
    e.fake().push(terminal("c2", &cmd));
    e.fake().push(terminal("c3", &cmd));
    e.fake().push(Reply::text("Done."));
    e.inbox_ok(&["approve", &id, "--reason-code", "once"]);
    let reqs = e.model_requests(before + 3).await;
    api.until_settled(&session).await;
    let decision = last_content(&reqs[before]);
    assert!(
        decision.contains(&id) && decision.contains("approved once"),
        "{decision}"
    );
    let second = result_json(&tool_result(&reqs[before + 1], "c2"));
    assert_eq!(second["sandbox"], RAN_OUTSIDE, "{second}");
    assert_eq!(second["exit_code"], 0, "{second}");
    assert_eq!(
        outside_runs(&e, "once"),
        1,
        "approved once: ran once, outside"
    );
    let third = tool_result(&reqs[before + 2], "c3");
    assert_ne!(stopped_and_asked(&third), id, "once is once: a new request");
    assert_eq!(outside_runs(&e, "once"), 1);
    assert_eq!(api.status(&session).await, "waiting");

    // Rejected: the resumed agent is told not to retry; the write never happens.
    let session = api.create_session().await;
    let cmd = write_outside(&e, "rejected");
    let id = ask(&e, &api, &session, "r1", &cmd).await;
    let before = e.fake().requests().len();
    e.fake().push(Reply::text("Understood, I will not run it."));
    e.inbox_ok(&["reject", &id, "--note", "not outside the repository"]);
    let reqs = e.model_requests(before + 1).await;
    api.until_resumed(&session).await;
    let decision = last_content(&reqs[before]);
    assert!(
        decision.contains(&id) && decision.contains("REJECT"),
        "{decision}"
    );
    assert!(
        decision.contains("Do not run it again"),
        "the agent is told not to retry: {decision}"
    );
    assert_eq!(outside_runs(&e, "rejected"), 0, "never ran outside");
}

/// Approved for the session — or `always`, which an escalation keeps to the session — the
/// session's later commands leave the sandbox without a new request, other commands writing
/// elsewhere included; yet even outside the sandbox `$TERN_HOME` stays unreadable (the
/// admin token), nothing reaches the allowlist, and another session is asked again.
#[tokio::test]
async fn an_escalation_for_the_session_lets_its_commands_out_but_never_into_tern_home() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let admin = e.home().join("inbox-admin.json");
    let token = e.admin_token();
    for scope in ["session", "always"] {
        let session = api.create_session().await;
        let first = write_outside(&e, &format!("{scope}-1"));
        let id = ask(&e, &api, &session, "c1", &first).await;
        let made = outside(&e).join(format!("{scope}-dir"));
        let another = format!(
            "mkdir {} && echo {scope}-2 >> {}",
            made.display(),
            outside(&e).join("log").display()
        );
        let before = e.fake().requests().len();
        e.fake().push(terminal("c2", &first));
        e.fake().push(terminal("c3", &another));
        e.fake()
            .push(terminal("c4", &format!("cat {}", admin.display())));
        e.fake().push(Reply::text("Done."));
        e.inbox_ok(&["approve", &id, "--reason-code", scope]);
        let reqs = e.model_requests(before + 4).await;
        // Idle with no open wait: no new request was made.
        api.until_resumed(&session).await;
        let last = &reqs[before + 3];
        for call in ["c2", "c3"] {
            let r = result_json(&tool_result(last, call));
            assert_eq!(r["sandbox"], RAN_OUTSIDE, "{scope} {call}: {r}");
            assert_eq!(r["exit_code"], 0, "{scope} {call}: {r}");
        }
        assert_eq!(outside_runs(&e, &format!("{scope}-1")), 1, "{scope}");
        assert_eq!(outside_runs(&e, &format!("{scope}-2")), 1, "{scope}");
        assert!(made.is_dir(), "{scope}");
        let cat = tool_result(last, "c4");
        let r = result_json(&cat);
        assert_eq!(r["sandbox"], RAN_OUTSIDE, "escalated all the same: {cat}");
        assert!(
            r["exit_code"].as_i64().is_some_and(|c| c != 0)
                && r["output"]
                    .as_str()
                    .is_some_and(|o| o.contains("Permission denied")),
            "{scope}: {cat}"
        );
        assert!(!cat.contains(&token), "{scope}: the admin token leaked");
        let config = std::fs::read_to_string(e.home().join("config.toml")).unwrap_or_default();
        assert!(!config.contains(&first), "{scope}: allowlisted: {config}");

        // The grant is the session's: another session is asked again.
        let other = api.create_session().await;
        let elsewhere = format!("{scope}-elsewhere");
        ask(&e, &api, &other, "c1", &write_outside(&e, &elsewhere)).await;
        assert_eq!(outside_runs(&e, &elsewhere), 0, "{scope}");
    }
}

/// The model may ask up front (`sandbox_permissions: "require_escalated"`) with a
/// justification: nothing runs until a human approves, the reviewer sees the justification,
/// and once approved the command runs outside the sandbox once.
#[tokio::test]
async fn require_escalated_asks_before_running_and_shows_the_justification() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let session = api.create_session().await;
    let cmd = write_outside(&e, "asked");
    let why = "the release notes live beside the repository";
    let call = |id: &str| {
        Reply::tool_call(
            id,
            "terminal",
            json!({"command": cmd, "sandbox_permissions": "require_escalated", "justification": why})
                .to_string(),
        )
    };
    let before = e.fake().requests().len();
    let id = ask_with(&e, &api, &session, "c1", call("c1")).await;
    let result = tool_result(&e.fake().requests()[before + 1], "c1");
    let error = result_json(&result)["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        error.starts_with(
            "not run: running this command outside the sandbox needs a human's approval"
        ),
        "{result}"
    );
    assert!(
        !outside(&e).join("log").exists(),
        "not even tried in the sandbox"
    );
    let view = shown(&e, &id);
    let ctx = &view["keyValueContext"];
    assert_eq!(ctx["justification"], why, "{view}");
    assert_eq!(ctx["command"], cmd.as_str(), "{view}");
    assert_eq!(ctx["workdir"], e.work().display().to_string(), "{view}");
    assert_eq!(ctx["policy"], "workspace-write, network off", "{view}");
    assert!(ctx.get("denied").is_none(), "{view}");

    let before = e.fake().requests().len();
    e.fake().push(call("c2"));
    e.fake().push(call("c3"));
    e.fake().push(Reply::text("Done."));
    e.inbox_ok(&["approve", &id]);
    let reqs = e.model_requests(before + 3).await;
    api.until_settled(&session).await;
    let second = result_json(&tool_result(&reqs[before + 1], "c2"));
    assert_eq!(second["sandbox"], RAN_OUTSIDE, "{second}");
    assert_eq!(outside_runs(&e, "asked"), 1, "approved once: ran once");
    let third = result_json(&tool_result(&reqs[before + 2], "c3"));
    let error = third["error"].as_str().unwrap_or_default();
    assert!(error.contains("needs a human's approval"), "{third}");
    assert_ne!(request_id(error), id, "once is once");
    assert_eq!(outside_runs(&e, "asked"), 1);
}

/// A dangerous command that also needs to leave the sandbox asks both questions. A
/// reviewer's `always` for the dangerous one (the allowlist) only passes the
/// dangerous-command check: the command still runs confined, in this session and in any
/// other, until a human approves the escalation.
#[tokio::test]
async fn an_always_approved_dangerous_command_still_needs_an_escalation() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let victim = outside(&e).join("victim");
    std::fs::create_dir_all(victim.join("sub")).unwrap();
    let cmd = format!("rm -r {}", victim.display());
    let session = api.create_session().await;
    let id = ask(&e, &api, &session, "c1", &cmd).await;
    let view = shown(&e, &id);
    assert!(
        view["keyValueContext"]["policy"].is_null(),
        "the dangerous-command question: {view}"
    );

    let before = e.fake().requests().len();
    e.fake().push(terminal("c2", &cmd));
    e.fake().push(Reply::text("Waiting."));
    e.inbox_ok(&["approve", &id, "--reason-code", "always"]);
    let reqs = e.model_requests(before + 2).await;
    api.until_settled(&session).await;
    let config = std::fs::read_to_string(e.home().join("config.toml")).unwrap();
    assert!(
        config.contains(&format!("{cmd:?}")),
        "allowlisted: {config}"
    );
    let escalation = stopped_and_asked(&tool_result(&reqs[before + 1], "c2"));
    assert!(
        victim.join("sub").is_dir(),
        "the allowlist let it out of the sandbox"
    );
    assert_eq!(
        shown(&e, &escalation)["keyValueContext"]["denied"],
        "a file access outside what the sandbox allows"
    );

    // Another session: allowlisted, so no dangerous question, but confined all the same.
    let other = api.create_session().await;
    let before = e.fake().requests().len();
    ask(&e, &api, &other, "c1", &cmd).await;
    stopped_and_asked(&tool_result(&e.fake().requests()[before + 1], "c1"));
    assert!(
        victim.join("sub").is_dir(),
        "the allowlist let it out of the sandbox"
    );

    // The escalation's approval is what lets it out.
    let before = e.fake().requests().len();
    e.fake().push(terminal("c3", &cmd));
    e.fake().push(Reply::text("Done."));
    e.inbox_ok(&["approve", &escalation]);
    let reqs = e.model_requests(before + 2).await;
    api.until_settled(&session).await;
    let r = result_json(&tool_result(&reqs[before + 1], "c3"));
    assert_eq!(r["sandbox"], RAN_OUTSIDE, "{r}");
    assert!(!victim.exists(), "{r}");
}

/// A dangerous command that also needs to leave the sandbox, each question approved `once`,
/// runs, exactly once and outside the sandbox, after a bounded number of approvals: the
/// escalation's grant is not used up by the dangerous-command check of the resumed run
/// (which would leave it confined, stopped and asking again, forever).
#[tokio::test]
async fn a_dangerous_command_outside_approved_once_at_each_question_runs_once() {
    let e = Env::with_model().await;
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let victim = outside(&e).join("victim");
    std::fs::create_dir_all(victim.join("sub")).unwrap();
    let cmd = format!("rm -r {}", victim.display());
    let session = api.create_session().await;
    let mut id = ask(&e, &api, &session, "c1", &cmd).await;
    let mut seen = Vec::new();
    // The dangerous question; the escalation, once its confined run was stopped; the
    // dangerous question again, its once used by the stopped run.
    for round in 1..=3 {
        let call = format!("r{round}");
        let before = e.fake().requests().len();
        e.fake().push(terminal(&call, &cmd));
        e.fake().push(Reply::text("Waiting."));
        e.inbox_ok(&["approve", &id, "--reason-code", "once"]);
        let reqs = e.model_requests(before + 2).await;
        api.until_settled(&session).await;
        let result = tool_result(&reqs[before + 1], &call);
        seen.push(result.clone());
        if !victim.exists() {
            assert_eq!(result_json(&result)["sandbox"], RAN_OUTSIDE, "{result}");
            assert_eq!(api.status(&session).await, "idle");
            return;
        }
        assert!(result.contains("needs a human's approval"), "{result}");
        id = request_id(&result);
    }
    panic!("three approvals and it never ran: {seen:#?}");
}
