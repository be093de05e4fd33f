//! Dangerous commands through the inbox, end to end: a real `tern gateway` process, the fake
//! model, and decisions made with `tern inbox approve|reject` from another process. The
//! command's effect is a line it appends to a file, so the tests see whether and how often
//! it really ran.

mod common;

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
    let before = e.fake().requests().len();
    e.fake().push(terminal(call, cmd));
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
    let decision = reqs[before].messages().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
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
    let decision = reqs[before].messages().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
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
