//! `tern chat` as a new user meets it (issue 13): what tools printed and the tokens used,
//! sessions stored only with a message, the REPL's commands, `-q` as a flag, no orphan
//! session after a failed turn, the `/v1` hint, whole error messages, and project
//! instructions in the system prompt. Real `tern` processes against the fake model.

use std::io::Write;
use std::process::{Output, Stdio};

use serde_json::Value;
use tern_fake_model::Reply;

use crate::common::{Env, assert_exit, stderr, stdout};

fn sessions(e: &Env) -> Vec<Value> {
    let o = e.run(&["sessions", "list", "--json"]);
    assert_exit(&o, 0);
    serde_json::from_slice(&o.stdout).unwrap()
}

fn messages(e: &Env, id: &str) -> Vec<Value> {
    let o = e.run(&["sessions", "show", id, "--json"]);
    assert_exit(&o, 0);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["messages"].as_array().unwrap().clone()
}

/// The REPL with `input` typed on a pipe (no terminal: plain output).
fn repl(e: &Env, args: &[&str], input: &str) -> Output {
    let mut child = e
        .tern()
        .arg("chat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn ten_lines() -> String {
    serde_json::json!({"command": "for i in 1 2 3 4 5 6 7 8 9 10; do echo out-line-$i; done"})
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_output_is_previewed_whole_with_verbose_and_tokens_are_reported() {
    let e = Env::with_model().await;
    e.fake()
        .push(Reply::tool_call("c1", "terminal", ten_lines()).usage(100, 10))
        .push(Reply::text("Ten lines.").usage(150, 5));
    let o = e.run(&["chat", "-q", "print ten lines"]);
    assert_exit(&o, 0);
    let err = stderr(&o);
    assert!(
        err.contains("out-line-1\n") && err.contains("out-line-4\n"),
        "{err}"
    );
    assert!(!err.contains("out-line-5"), "only a preview:\n{err}");
    assert!(
        err.contains("… 6 more lines (--verbose shows all)"),
        "{err}"
    );
    assert!(
        err.contains("tokens: 250 prompt + 15 completion"),
        "the turn's usage, both calls:\n{err}"
    );
    assert_eq!(stdout(&o), "Ten lines.\n");

    e.fake()
        .push(Reply::tool_call("c2", "terminal", ten_lines()))
        .push(Reply::text("Again."));
    let o = e.run(&["chat", "--verbose", "-q", "print ten lines"]);
    assert_exit(&o, 0);
    let err = stderr(&o);
    assert!(err.contains("out-line-10"), "{err}");
    assert!(!err.contains("more lines"), "{err}");
    assert!(
        !err.contains("tokens:"),
        "no usage reported, none shown:\n{err}"
    );
}

/// `-q` is a flag: the next word is not its value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn q_does_not_swallow_the_next_flag() {
    let e = Env::with_model().await;
    std::fs::create_dir(e.work().join("victim")).unwrap();
    e.fake()
        .push(Reply::tool_call(
            "d1",
            "terminal",
            r#"{"command":"rm -rf victim"}"#,
        ))
        .push(Reply::text("Removed."));
    let o = e.run(&["chat", "-q", "--yolo", "remove the victim directory"]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "Removed.\n");
    assert!(!e.work().join("victim").exists(), "--yolo was a flag");
    let req = &e.fake().requests()[0];
    let user = &req.messages()[1];
    assert_eq!(user["content"], "remove the victim directory");
    // -q without a message is a usage error.
    let o = e.run(&["chat", "-q"]);
    assert_exit(&o, 2);
    assert!(stderr(&o).contains("MESSAGE"), "{}", stderr(&o));
}

/// A denial's advice sits at the end of a long message: it is shown whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_yolo_hint_of_a_denial_is_shown_whole() {
    let e = Env::with_model().await;
    std::fs::create_dir(e.work().join("victim")).unwrap();
    e.fake()
        .push(Reply::tool_call(
            "d1",
            "terminal",
            r#"{"command":"rm -rf victim"}"#,
        ))
        .push(Reply::text("Not allowed."));
    let o = e.run(&["chat", "-q", "delete victim"]);
    assert_exit(&o, 0);
    let err = stderr(&o);
    let line = err.lines().find(|l| l.starts_with("✗ terminal")).unwrap();
    assert!(
        line.contains("allow dangerous commands with --yolo"),
        "{line}"
    );
}

/// A failed `-q` turn in a new session keeps nothing when the model never answered; the
/// retry's cause is shown whole. A turn that failed after a tool ran keeps its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_leaves_no_orphan_session() {
    let e = Env::with_model().await;
    e.config("[model]\nmax_retries = 1\n");
    let cause = format!("the upstream is down {} end-of-cause", "x".repeat(300));
    e.fake()
        .push(Reply::error(500, &cause))
        .push(Reply::error(500, &cause));
    let o = e.run(&["chat", "-q", "hello"]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    let retry = err.lines().find(|l| l.contains("retry 1")).unwrap();
    assert!(retry.contains("end-of-cause"), "cut: {retry}");
    assert!(err.contains("was not kept"), "{err}");
    assert!(sessions(&e).is_empty(), "no orphan session");

    e.fake()
        .push(Reply::tool_call(
            "c1",
            "terminal",
            r#"{"command":"echo ran"}"#,
        ))
        .push(Reply::error(500, "down"))
        .push(Reply::error(500, "down"));
    let o = e.run(&["chat", "-q", "run something"]);
    assert_exit(&o, 1);
    let kept = sessions(&e);
    assert_eq!(kept.len(), 1, "the tool's work is kept");
    assert_eq!(messages(&e, kept[0]["id"].as_str().unwrap()).len(), 3);
}

/// A base URL without `/v1`: the chat says what `tern doctor` says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_url_without_v1_gets_the_doctor_hint() {
    let e = Env::with_model().await;
    let base = e.fake().base_url();
    let bare = base.strip_suffix("/v1").unwrap();
    let o = e
        .tern()
        .env("OPENAI_BASE_URL", bare)
        .args(["chat", "-q", "hello"])
        .output()
        .unwrap();
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(
        err.contains("HTTP 404")
            && err.contains(&format!("is {bare} the API's base URL?"))
            && err.contains("OPENAI_BASE_URL usually ends in /v1"),
        "{err}"
    );
    assert!(sessions(&e).is_empty());
    let o = e
        .tern()
        .env("OPENAI_BASE_URL", bare)
        .arg("doctor")
        .output()
        .unwrap();
    assert!(
        stdout(&o).contains("OPENAI_BASE_URL usually ends in /v1"),
        "{}",
        stdout(&o)
    );
}

/// The REPL stores a session with its first message, not at its start nor on `/new`;
/// `--continue` goes to the latest session that has a message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_stored_with_their_first_message() {
    let e = Env::with_model().await;
    let o = repl(&e, &[], "/new\n/session\n/exit\n");
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("no session yet"), "{}", stderr(&o));
    assert!(sessions(&e).is_empty(), "nothing typed, nothing stored");

    e.fake().push(Reply::text("first answer"));
    let o = repl(&e, &[], "/title Release notes\nhello\n/new\n/exit\n");
    assert_exit(&o, 0);
    let list = sessions(&e);
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["title"], "Release notes");
    let with_message = list[0]["id"].as_str().unwrap().to_owned();

    // An empty session, as older versions left them, is newer but skipped.
    let store = tern_store::Store::open(&e.home().join("tern.db"))
        .await
        .unwrap();
    let empty = store
        .create_session(tern_store::NewSession {
            source: "cli".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    store.close().await;
    e.fake().push(Reply::text("continued"));
    let o = e.run(&["chat", "--continue", "-q", "and now?"]);
    assert_exit(&o, 0);
    assert!(stderr(&o).contains(&with_message), "{}", stderr(&o));
    assert_eq!(messages(&e, &with_message).len(), 4);
    assert!(messages(&e, &empty.id).is_empty());
}

/// `/retry` answers the message whose turn failed without storing it twice; `/usage`
/// sums the session's tokens; `/resume` takes a prefix; `/model` switches the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_usage_resume_and_model() {
    let e = Env::with_model().await;
    e.fake()
        .push(Reply::text("one").usage(10, 2))
        .push(Reply::error(400, "bad request today"))
        .push(Reply::text("two").usage(20, 3))
        .push(Reply::text("three"));
    let o = repl(&e, &[], "first\nsecond\n/retry\n/usage\n/retry\n/exit\n");
    // (the second /retry sends "second" again as a new message: its turn has an answer)
    assert_exit(&o, 0);
    let err = stderr(&o);
    assert!(err.contains("bad request today"), "{err}");
    assert!(
        err.contains("tokens so far in this session: 30 prompt + 5 completion = 35"),
        "{err}"
    );
    let reqs = e.fake().requests();
    let retried = reqs[2].messages();
    let texts: Vec<&str> = retried
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["first", "second"], "stored once");
    assert_eq!(reqs.len(), 4, "the last /retry sent it again");
    let last_users = reqs[3]
        .messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .count();
    assert_eq!(last_users, 3);

    let id = sessions(&e)[0]["id"].as_str().unwrap().to_owned();
    e.fake().push(Reply::text("resumed here"));
    let input = format!(
        "/resume {}\n/model other-model\nwhere am I?\n/exit\n",
        &id[..8]
    );
    let o = repl(&e, &[], &input);
    assert_exit(&o, 0);
    let err = stderr(&o);
    assert!(err.contains(&format!("resumed session {id}")), "{err}");
    assert!(
        err.contains("model other-model from the next turn on"),
        "{err}"
    );
    let last = e.fake().requests().pop().unwrap();
    assert_eq!(last.body["model"], "other-model");
    assert!(last.messages().iter().any(|m| m["content"] == "first"));
    let list = sessions(&e);
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["model"], "other-model");
    let o = repl(&e, &[], "/resume zzzz\n/help\n/exit\n");
    let err = stderr(&o);
    assert!(err.contains("session not found: zzzz"), "{err}");
    for c in [
        "/resume ID",
        "/model NAME",
        "/title TEXT",
        "/retry",
        "/usage",
    ] {
        assert!(err.contains(c), "{c} missing from /help:\n{err}");
    }
}

/// `AGENTS.md` and `TERN.md` from the working directory up to the repository root are in
/// the system message the model gets, nearest last; one above the repository is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn project_instructions_reach_the_system_prompt() {
    let e = Env::with_model().await;
    let repo = e.work();
    let sub = repo.join("crates/app");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::create_dir(repo.join(".git")).unwrap();
    std::fs::write(e.dir.path().join("AGENTS.md"), "ABOVE THE REPOSITORY").unwrap();
    std::fs::write(repo.join("AGENTS.md"), "Run cargo fmt before committing.").unwrap();
    std::fs::write(sub.join("TERN.md"), "This crate uses tabs.").unwrap();
    e.fake().push(Reply::text("ok"));
    let o = e
        .tern()
        .current_dir(&sub)
        .args(["chat", "-q", "hello"])
        .output()
        .unwrap();
    assert_exit(&o, 0);
    let req = &e.fake().requests()[0];
    let system = req.messages()[0]["content"].as_str().unwrap();
    let repo_rule = system.find("Run cargo fmt before committing.").unwrap();
    let crate_rule = system.find("This crate uses tabs.").unwrap();
    assert!(repo_rule < crate_rule, "nearest last:\n{system}");
    assert!(!system.contains("ABOVE THE REPOSITORY"), "{system}");
    assert!(system.contains("# Project instructions"), "{system}");
}

/// `/compact` summarises the session's older messages on demand; the next turn sends the
/// summary in their place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_in_the_repl() {
    let e = Env::with_model().await;
    std::fs::create_dir_all(e.home()).unwrap();
    std::fs::write(
        e.home().join("config.toml"),
        "[model]\ncontext_length = 32768\n[compaction]\nthreshold_percent = 95\n",
    )
    .unwrap();
    e.fake().set_responder(|body| {
        let first = body["messages"][0]["content"].as_str().unwrap_or_default();
        if first.starts_with(tern_agent::compact::COMPACTOR_MARKER) {
            return Reply::text("## Goal\nanswer the questions\n## Next steps\ngo on");
        }
        Reply::text(format!("answer: {}", "lorem ipsum ".repeat(600)))
    });
    let o = repl(
        &e,
        &[],
        "/compact\none\ntwo\nthree\nfour\nfive\n/compact\nsix\n/exit\n",
    );
    assert_exit(&o, 0);
    let err = stderr(&o);
    assert!(err.contains("no session yet: nothing to compact"), "{err}");
    assert!(err.contains("compacted: "), "{err}");
    let last = e.fake().requests().pop().unwrap();
    let msgs = last.messages();
    assert!(
        msgs.iter().any(|m| m["content"]
            .as_str()
            .unwrap_or_default()
            .starts_with(tern_agent::compact::SUMMARY_HEADER)),
        "{msgs:#?}"
    );
    assert_eq!(msgs[1]["content"], "one", "the task is kept");
    assert!(!msgs.iter().any(|m| m["content"] == "two"), "{msgs:#?}");
    assert_eq!(msgs.last().unwrap()["content"], "six");
}
