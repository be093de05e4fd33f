//! Chat channels end to end: a gateway booted from a config with `[[channels.telegram]]`,
//! talking to the scripted fake Bot API on loopback, only the model faked. A conversation
//! with a tool call, DM pairing, an approval decided by a tap (forged and unauthorised taps
//! decide nothing), and files both ways.

use std::time::Duration;

use serde_json::{Value, json};
use tern_fake_model::{FakeModel, Reply};
use tern_gateway::boot::GatewayHandle;
use tern_test_support::TempHome;
use tern_test_support::telegram::{FakeTelegram, Sent};

use crate::common::{self, home_for};

/// The owner: allowed and mapped to the inbox reviewer `ann`.
const OWNER: i64 = 111;
/// Allowed to talk, not a reviewer.
const FRIEND: i64 = 222;
/// Unknown to the bot.
const STRANGER: i64 = 333;

const DECISION_TAG: &str = "[inbox decision]";

struct Setup {
    tg: FakeTelegram,
    model: FakeModel,
    _home: TempHome,
    handle: GatewayHandle,
}

fn content(m: &Value) -> String {
    m["content"].as_str().unwrap_or_default().to_owned()
}

fn last_message(body: &Value) -> Value {
    body["messages"]
        .as_array()
        .and_then(|a| a.last())
        .cloned()
        .unwrap_or(Value::Null)
}

async fn start(progress: &str) -> Setup {
    let tg = FakeTelegram::start().await;
    let model = FakeModel::start().await.unwrap();
    let home = home_for(
        &model,
        &format!(
            "[[channels.telegram]]\ntoken = \"{}\"\napi_url = \"{}\"\n\
             allowed_users = [{OWNER}, {FRIEND}]\nreviewers = {{ {OWNER} = \"ann\" }}\n\
             progress = \"{progress}\"\npoll_timeout = \"2s\"\n",
            tg.token(),
            tg.api_url()
        ),
    );
    // The reviewer the owner decides as.
    common::add_reviewer(&home, "ann").await;
    let handle = common::builder(&home).start().await.unwrap().handle;
    Setup {
        tg,
        model,
        _home: home,
        handle,
    }
}

fn text_of(s: &Sent) -> String {
    s.text.clone().unwrap_or_default()
}

/// How many messages the bot sent with `text` in them.
fn sent_with(tg: &FakeTelegram, text: &str) -> usize {
    tg.sent()
        .iter()
        .filter(|m| text_of(m).contains(text))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_with_a_tool_call_shows_progress_typing_and_the_answer() {
    let s = start("all").await;
    s.model.set_responder(|body| {
        let last = last_message(body);
        match last["role"].as_str() {
            Some("tool") => Reply::text("The shell said: **hi**"),
            _ => Reply::tool_call("c1", "terminal", json!({"command": "echo hi"}).to_string()),
        }
    });
    s.tg.user_sends(OWNER, OWNER, "say hi through the shell");
    let answer =
        s.tg.wait_sent(|m| m.chat_id == OWNER && text_of(m).contains("The shell said"))
            .await;
    assert_eq!(answer.parse_mode.as_deref(), Some("HTML"), "{answer:?}");
    assert!(text_of(&answer).contains("<b>hi</b>"), "{answer:?}");
    let sent = s.tg.sent();
    let progress = sent
        .iter()
        .position(|m| text_of(m).contains("terminal") && text_of(m).contains("echo hi"))
        .unwrap_or_else(|| panic!("no progress line: {sent:?}"));
    let final_at = sent.iter().position(|m| m == &answer).unwrap();
    assert!(progress < final_at, "progress after the answer: {sent:?}");
    assert!(
        s.tg.chat_actions()
            .iter()
            .any(|a| a.chat_id == OWNER && a.action == "typing"),
        "no typing indicator"
    );
    // The chat's session holds the message once, with the tool call and its result.
    let store = s.handle.gateway().store.clone();
    let sessions = store.list_sessions(10, 0).await.unwrap();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0].source, "telegram");
    let msgs = store.messages(&sessions[0].id).await.unwrap();
    let users: Vec<_> = msgs.iter().filter(|m| m.role.as_str() == "user").collect();
    assert_eq!(users.len(), 1, "{msgs:?}");
    assert!(msgs.iter().any(|m| m.role.as_str() == "tool"
        && m.content.as_deref().unwrap_or("").contains("hi")));
    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_tools_progress_shows_in_the_chat_with_progress_all() {
    let s = start("all").await;
    s.model.push(Reply::text("hello"));
    s.tg.user_sends(OWNER, OWNER, "hi");
    s.tg.wait_sent(|m| m.chat_id == OWNER && text_of(m).contains("hello"))
        .await;
    let gw = s.handle.gateway();
    let session = gw.store.list_sessions(10, 0).await.unwrap()[0].id.clone();
    // What the agent emits while an MCP tool of the chat's session reports progress.
    gw.hooks.emit(tern_hooks::HookEvent::ToolProgress(
        tern_hooks::ToolProgress {
            session_id: session,
            source: "telegram".into(),
            turn_id: "t".into(),
            call_id: "c1".into(),
            tool: "mcp__build__compile".into(),
            progress: 2.0,
            total: Some(4.0),
            message: None,
        },
    ));
    let line =
        s.tg.wait_sent(|m| m.chat_id == OWNER && text_of(m).contains("compile"))
            .await;
    assert_eq!(text_of(&line), "⏳ mcp__build__compile: 2/4", "{line:?}");
    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_tap_decides_once_through_the_inbox_and_the_session_resumes() {
    let s = start("off").await;
    s.model.set_responder(|body| {
        let last = last_message(body);
        let text = content(&last);
        match last["role"].as_str() {
            Some("user") if text.starts_with(DECISION_TAG) => Reply::text("Deployed v2."),
            Some("user") => Reply::tool_call(
                "c1",
                "request_approval",
                json!({"summary": "Deploy v2 to prod?"}).to_string(),
            ),
            _ => Reply::text("I asked for approval."),
        }
    });
    s.tg.user_sends(OWNER, OWNER, "deploy v2");
    let post =
        s.tg.wait_sent(|m| m.chat_id == OWNER && !m.button_data().is_empty())
            .await;
    assert!(text_of(&post).contains("Deploy v2 to prod?"), "{post:?}");
    let data = post.button_data();
    assert_eq!(data.len(), 2, "Approve and Reject: {data:?}");
    assert!(data.iter().all(|d| d.len() <= 64), "{data:?}");
    let inbox = s.handle.gateway().inbox.clone();
    let pending = || async { inbox.pending_count().await.unwrap() };
    assert_eq!(pending().await, 1);

    // A forged tap: the data altered by one character.
    let mut forged = data[0].clone();
    let last = forged.pop().unwrap();
    forged.push(if last == 'A' { 'B' } else { 'A' });
    let id =
        s.tg.user_taps_forged(OWNER, OWNER, post.message_id, &forged);
    let answer = s.tg.wait_callback_answer(&id).await;
    assert!(
        answer.text.as_deref().unwrap_or("").contains("not valid"),
        "{answer:?}"
    );
    // A tap by someone who may talk to the agent but is no reviewer.
    let id = s.tg.user_taps(OWNER, FRIEND, post.message_id, &data[0]);
    let answer = s.tg.wait_callback_answer(&id).await;
    assert!(
        answer
            .text
            .as_deref()
            .unwrap_or("")
            .contains("Only reviewers"),
        "{answer:?}"
    );
    assert_eq!(pending().await, 1, "a forged or unauthorised tap decided");

    // The owner taps Approve.
    let id = s.tg.user_taps(OWNER, OWNER, post.message_id, &data[0]);
    let answer = s.tg.wait_callback_answer(&id).await;
    assert!(
        answer.text.as_deref().unwrap_or("").contains("done"),
        "{answer:?}"
    );
    s.tg.wait_sent(|m| m.chat_id == OWNER && text_of(m).contains("Deployed v2."))
        .await;
    let edit =
        s.tg.wait_edit(|e| e.message_id == post.message_id && e.text.is_some())
            .await;
    assert!(
        edit.text
            .as_deref()
            .unwrap_or("")
            .contains("Approved by ann"),
        "{edit:?}"
    );
    // The buttons are gone; a replayed callback (a modified client sends the genuine,
    // signed data again, here Reject's): already decided, nothing resumes twice.
    let id =
        s.tg.user_taps_forged(OWNER, OWNER, post.message_id, &data[1]);
    let answer = s.tg.wait_callback_answer(&id).await;
    assert!(
        answer
            .text
            .as_deref()
            .unwrap_or("")
            .contains("Already decided by ann"),
        "{answer:?}"
    );
    let decisions = |model: &FakeModel| {
        model
            .requests()
            .iter()
            .filter(|r| content(&last_message(&r.body)).starts_with(DECISION_TAG))
            .count()
    };
    // Give a second resume every chance to happen before counting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(decisions(&s.model), 1, "the session resumed more than once");
    let deployed = sent_with(&s.tg, "Deployed v2.");
    assert_eq!(deployed, 1);
    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_gets_a_pairing_code_nothing_is_stored_and_once_approved_they_talk() {
    let s = start("off").await;
    s.model.set_responder(|_| Reply::text("hello, new friend"));
    s.tg.user_sends(STRANGER, STRANGER, "secret plans");
    let code_msg =
        s.tg.wait_sent(|m| m.chat_id == STRANGER && text_of(m).contains("tern pairing approve"))
            .await;
    let text = text_of(&code_msg);
    let code: String = text
        .split("tern pairing approve telegram ")
        .nth(1)
        .unwrap()
        .chars()
        .take(8)
        .collect();
    assert_eq!(code.len(), 8, "{text}");
    // Asking again within 10 minutes: no new code.
    s.tg.user_sends(STRANGER, STRANGER, "hello?");
    s.tg.wait_sent(|m| m.chat_id == STRANGER && text_of(m).contains("already"))
        .await;
    let store = s.handle.gateway().store.clone();
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM channel_events")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(stored, 0, "a stranger's messages were stored");
    assert!(store.list_sessions(10, 0).await.unwrap().is_empty());
    assert!(s.model.requests().is_empty(), "the agent saw a stranger");

    // Wrong codes lock the platform after 5; the right one is refused while locked.
    let pairing = tern_channels::pairing::Pairing::new(store.clone());
    let now = tern_util::clock::now_ms();
    for _ in 0..5 {
        let _ = pairing.approve("telegram", "ZZZZZZZZ", None, now).await;
    }
    assert!(matches!(
        pairing.approve("telegram", &code, None, now).await,
        Err(tern_channels::pairing::PairingError::LockedOut { .. })
    ));
    // A new stranger is told pairing is paused.
    s.tg.user_sends(444, 444, "hi");
    s.tg.wait_sent(|m| m.chat_id == 444 && text_of(m).contains("paused"))
        .await;
    // An hour later the lock is gone and the code still valid (its hour from now on).
    let later = now + 61 * 60 * 1000;
    sqlx::query("UPDATE channel_pairing_pending SET expires_at = ? WHERE user_id = ?")
        .bind(later + 1000)
        .bind(STRANGER.to_string())
        .execute(store.pool())
        .await
        .unwrap();
    pairing
        .approve("telegram", &code, None, later)
        .await
        .unwrap();
    s.tg.user_sends(STRANGER, STRANGER, "now may I?");
    s.tg.wait_sent(|m| m.chat_id == STRANGER && text_of(m).contains("hello, new friend"))
        .await;
    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_code_cannot_be_approved_and_the_user_gets_a_new_one() {
    let s = start("off").await;
    s.tg.user_sends(STRANGER, STRANGER, "hi");
    let first =
        s.tg.wait_sent(|m| m.chat_id == STRANGER && text_of(m).contains("tern pairing approve"))
            .await;
    let code: String = text_of(&first)
        .split("tern pairing approve telegram ")
        .nth(1)
        .unwrap()
        .chars()
        .take(8)
        .collect();
    let store = s.handle.gateway().store.clone();
    // The code was issued over an hour ago.
    let past = tern_util::clock::now_ms() - 61 * 60 * 1000;
    sqlx::query(
        "UPDATE channel_pairing_pending SET created_at = ?, expires_at = ? WHERE user_id = ?",
    )
    .bind(past)
    .bind(past + 60 * 60 * 1000 - 1)
    .bind(STRANGER.to_string())
    .execute(store.pool())
    .await
    .unwrap();
    let pairing = tern_channels::pairing::Pairing::new(store.clone());
    assert!(matches!(
        pairing
            .approve("telegram", &code, None, tern_util::clock::now_ms())
            .await,
        Err(tern_channels::pairing::PairingError::Expired { .. })
    ));
    s.tg.user_sends(STRANGER, STRANGER, "hi again");
    let second =
        s.tg.wait_sent(|m| {
            m.chat_id == STRANGER && text_of(m).contains("tern pairing approve") && *m != first
        })
        .await;
    assert!(!text_of(&second).contains(&code), "the expired code again");
    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_stop_new_sessions_and_resume() {
    let s = start("off").await;
    let gate = tern_fake_model::Gate::new();
    let held = gate.clone();
    s.model.set_responder(move |body| {
        let text = content(&last_message(body));
        if text.contains("slow") {
            Reply::text("slow answer").held(&held)
        } else {
            Reply::text(format!("echo: {text}"))
        }
    });
    s.tg.user_sends(OWNER, OWNER, "first session");
    s.tg.wait_sent(|m| text_of(m).contains("echo: first session"))
        .await;
    // A slow turn, a message queued behind it, and /stop.
    s.tg.user_sends(OWNER, OWNER, "slow please");
    s.model
        .wait_requests(2, Duration::from_secs(10))
        .await
        .unwrap();
    s.tg.user_sends(OWNER, OWNER, "queued behind");
    s.tg.user_sends(OWNER, OWNER, "/stop");
    s.tg.wait_sent(|m| text_of(m) == "Stopped.").await;
    s.tg.wait_sent(|m| text_of(m).contains("echo: queued behind"))
        .await;
    gate.open();

    s.tg.user_sends(OWNER, OWNER, "/new");
    s.tg.wait_sent(|m| text_of(m).contains("Started a new session"))
        .await;
    s.tg.user_sends(OWNER, OWNER, "second session");
    s.tg.wait_sent(|m| text_of(m).contains("echo: second session"))
        .await;
    s.tg.user_sends(OWNER, OWNER, "/sessions");
    let list =
        s.tg.wait_sent(|m| text_of(m).contains("This chat's sessions"))
            .await;
    assert!(text_of(&list).contains("2. "), "{list:?}");
    s.tg.user_sends(OWNER, OWNER, "/resume 2");
    s.tg.wait_sent(|m| text_of(m).contains("Resumed session"))
        .await;
    s.tg.user_sends(OWNER, OWNER, "back in the first");
    s.tg.wait_sent(|m| text_of(m).contains("echo: back in the first"))
        .await;
    let store = s.handle.gateway().store.clone();
    let sessions = store.list_sessions(10, 0).await.unwrap();
    assert_eq!(sessions.len(), 2);
    let first = sessions
        .iter()
        .find(|x| x.title.as_deref() == Some("first session"))
        .unwrap();
    let texts: Vec<String> = store
        .messages(&first.id)
        .await
        .unwrap()
        .iter()
        .filter(|m| m.role.as_str() == "user")
        .map(|m| m.content.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        texts,
        [
            "first session",
            "slow please",
            "queued behind",
            "back in the first"
        ],
        "one message each, in order"
    );
    s.tg.user_sends(OWNER, OWNER, "/status");
    s.tg.wait_sent(|m| text_of(m).contains("messages;")).await;
    // From the chat, through the same `Agent::compact` as the API's (a summary call).
    s.tg.user_sends(OWNER, OWNER, "/compact");
    s.tg.wait_sent(|m| text_of(m).starts_with("Compacted 1 message(s)"))
        .await;
    s.tg.user_sends(OWNER, OWNER, "/help");
    s.tg.wait_sent(|m| text_of(m).contains("/resume N")).await;
    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_go_both_ways_and_send_file_never_sends_a_kernel_pseudo_file() {
    let s = start("off").await;
    std::fs::write(s._home.work().join("report.txt"), b"quarterly numbers").unwrap();
    s.model.set_responder(|body| {
        let (role, text) = {
            let last = last_message(body);
            (
                last["role"].as_str().unwrap_or("").to_owned(),
                content(&last),
            )
        };
        match role.as_str() {
            "user" => Reply::tool_call(
                "c1",
                "send_file",
                json!({"path": "/proc/self/environ"}).to_string(),
            ),
            "tool" if text.contains("not a regular file") => Reply::tool_call(
                "c2",
                "send_file",
                json!({"path": "report.txt", "caption": "the report"}).to_string(),
            ),
            _ => Reply::text("Sent you the report."),
        }
    });
    let photo = b"\x89PNG fake image bytes".repeat(10);
    s.tg.user_sends_photo(OWNER, OWNER, &photo, Some("what is this?"));
    s.tg.wait_sent(|m| text_of(m).contains("Sent you the report."))
        .await;
    // In: the image saved in the workspace, named in the model's input.
    let first = &s.model.requests()[0];
    let input = content(&last_message(&first.body));
    assert!(input.starts_with("what is this?"), "{input}");
    assert!(
        input.contains("[The user sent an image: chat-files/"),
        "{input}"
    );
    let saved: Vec<_> = std::fs::read_dir(s._home.work().join("chat-files"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(saved.len(), 1, "{saved:?}");
    assert_eq!(std::fs::read(&saved[0]).unwrap(), photo);
    // Out: the report, and never the gateway's environment.
    let files: Vec<Sent> =
        s.tg.sent()
            .into_iter()
            .filter(|m| m.file.is_some())
            .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let (name, bytes) = files[0].file.clone().unwrap();
    assert_eq!(name, "report.txt");
    assert_eq!(bytes, b"quarterly numbers");
    assert_eq!(files[0].text.as_deref(), Some("the report"));
    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_post_shows_the_whole_command_whatever_markdown_it_holds() {
    let s = start("off").await;
    // A fence of its own and a link reference definition would hide the payload from a
    // markdown renderer; the post must show it.
    let hostile = "rm -rf build\n```\n[x]: a \"$(echo PWNED)\"\n`";
    let command = hostile.to_owned();
    s.model
        .set_responder(move |body| match last_message(body)["role"].as_str() {
            Some("user") => Reply::tool_call(
                "c1",
                "terminal",
                json!({"command": command.clone()}).to_string(),
            ),
            _ => Reply::text("ok"),
        });
    s.tg.user_sends(OWNER, OWNER, "clean the build");
    let post =
        s.tg.wait_sent(|m| m.chat_id == OWNER && !m.button_data().is_empty())
            .await;
    let shown = post.shown();
    assert!(shown.contains("echo PWNED"), "{shown}");
    assert!(shown.contains("[x]: a"), "{shown}");
    assert_eq!(
        post.button_data().len(),
        4,
        "Once, This session, Always, Reject"
    );
    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_is_waited_out_and_a_revoked_token_leaves_the_gateway_serving() {
    let s = start("off").await;
    s.model
        .set_responder(|_| Reply::text("answered despite the rate limit"));
    s.tg.fail_next(
        "sendMessage",
        1,
        tern_test_support::telegram::Fault::TooManyRequests { retry_after: 1 },
    );
    s.tg.user_sends(OWNER, OWNER, "hi");
    s.tg.wait_sent(|m| text_of(m).contains("answered despite the rate limit"))
        .await;
    let answered = sent_with(&s.tg, "answered despite");
    assert_eq!(answered, 1);

    // The bot's token is revoked: the channel says so and backs off; the gateway serves on.
    s.tg.revoke_token();
    let store = s.handle.gateway().store.clone();
    tern_test_support::wait_until(
        tern_test_support::PATIENCE,
        Duration::from_millis(20),
        async || {
            let h = store.channel_health().await.unwrap();
            match h.first().and_then(|h| h.last_error.clone()) {
                Some(e) if e.contains("credentials") => Ok(()),
                other => Err(format!("no error recorded yet: {other:?}")),
            }
        },
    )
    .await;
    let polls = s.tg.get_updates_calls();
    let health = reqwest::get(format!("{}/health", s.handle.url()))
        .await
        .unwrap();
    assert!(health.status().is_success());
    let err = store.channel_health().await.unwrap()[0]
        .last_error
        .clone()
        .unwrap();
    assert!(!err.contains(&s.tg.token()), "the token in an error: {err}");
    // Backing off (30 s at first), not polling in a loop.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        s.tg.get_updates_calls(),
        polls,
        "polling on with a refused token"
    );
    s.handle.shutdown().await.unwrap();
}

/// A model that asks with `tool` and `args` on the user's message, and after the decision
/// repeats the decision message's first line.
fn asks(model: &FakeModel, tool: &'static str, args: Value) {
    let args = args.to_string();
    model.set_responder(move |body| {
        let last = last_message(body);
        let text = content(&last);
        match last["role"].as_str() {
            // A command approved: run it again, as the decision says.
            Some("user") if text.starts_with(DECISION_TAG) && tool == "terminal" => {
                Reply::tool_call("c2", tool, args.clone())
            }
            Some("user") if text.starts_with(DECISION_TAG) => {
                Reply::text(format!("resumed with: {}", text.replace('\n', " ")))
            }
            Some("user") => Reply::tool_call("c1", tool, args.clone()),
            Some("tool") if tool == "terminal" && !text.contains("not run") => {
                Reply::text(format!("ran: {text}"))
            }
            _ => Reply::text("asked"),
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_are_answered_by_buttons_and_by_replies() {
    let s = start("off").await;
    // Yes/no: buttons.
    asks(
        &s.model,
        "request_elicitation",
        json!({"summary": "Keep the logs?", "fields": [
            {"type": "Switch", "id": "keep", "label": "Keep", "required": true}]}),
    );
    s.tg.user_sends(OWNER, OWNER, "clean up");
    let post =
        s.tg.wait_sent(|m| text_of(m).contains("Keep the logs?") && !m.button_data().is_empty())
            .await;
    assert_eq!(post.button_data().len(), 2, "Yes and No");
    let id =
        s.tg.user_taps(OWNER, OWNER, post.message_id, &post.button_data()[0]);
    s.tg.wait_callback_answer(&id).await;
    let resumed =
        s.tg.wait_sent(|m| text_of(m).contains("resumed with"))
            .await;
    assert!(text_of(&resumed).contains("true"), "{resumed:?}");
    s.tg.wait_edit(|e| e.message_id == post.message_id && e.shown().contains("Answered by ann"))
        .await;

    // A number: a reply to the post.
    s.tg.user_sends(OWNER, OWNER, "/new");
    s.tg.wait_sent(|m| text_of(m).contains("Started a new session"))
        .await;
    asks(
        &s.model,
        "request_elicitation",
        json!({"summary": "How many replicas?", "fields": [
            {"type": "Number", "id": "n", "label": "Replicas", "required": true,
             "integerOnly": true, "min": 1, "max": 9}]}),
    );
    s.tg.user_sends(OWNER, OWNER, "scale it");
    let post = s
        .tg
        .wait_sent(|m| text_of(m).contains("How many replicas?") && text_of(m).contains("Reply"))
        .await;
    assert!(post.button_data().is_empty());
    s.tg.user_replies(OWNER, OWNER, post.message_id, "many");
    s.tg.wait_sent(|m| text_of(m).contains("Reply with a number"))
        .await;
    s.tg.user_replies(OWNER, OWNER, post.message_id, "3");
    let resumed =
        s.tg.wait_sent(|m| {
            text_of(m).contains("resumed with") && text_of(m).contains("How many replicas")
        })
        .await;
    assert!(text_of(&resumed).contains("n: 3"), "{resumed:?}");
    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dangerous_command_approved_for_the_session_runs_and_forum_topics_are_sessions() {
    let s = start("off").await;
    std::fs::create_dir_all(s._home.work().join("build")).unwrap();
    asks(
        &s.model,
        "terminal",
        json!({"command": "rm -rf build && echo cleaned"}),
    );
    s.tg.user_sends_in_topic(-100, 7, OWNER, "clean the build");
    let post =
        s.tg.wait_sent(|m| m.chat_id == -100 && m.button_data().len() == 4)
            .await;
    assert_eq!(post.thread_id, Some(7), "the post goes to the topic");
    // "This session".
    let id =
        s.tg.user_taps(-100, OWNER, post.message_id, &post.button_data()[1]);
    s.tg.wait_callback_answer(&id).await;
    s.tg.wait_edit(|e| e.message_id == post.message_id && e.shown().contains("(session)"))
        .await;
    s.tg.wait_sent(|m| m.chat_id == -100 && text_of(m).contains("ran:"))
        .await;
    let ran = sent_with(&s.tg, "ran:");
    assert_eq!(ran, 1);
    assert!(
        !s._home.work().join("build").exists(),
        "the command did not run: {:#?}",
        s.tg.sent()
    );
    // Another topic of the same chat is another session.
    s.model.set_responder(|_| Reply::text("topic two here"));
    s.tg.user_sends_in_topic(-100, 8, OWNER, "hello");
    let m =
        s.tg.wait_sent(|m| text_of(m).contains("topic two here"))
            .await;
    assert_eq!(m.thread_id, Some(8));
    assert_eq!(
        s.handle
            .gateway()
            .store
            .list_sessions(10, 0)
            .await
            .unwrap()
            .len(),
        2
    );
    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_answer_is_split_within_telegrams_limit_and_nothing_is_lost() {
    let s = start("off").await;
    let paragraphs: Vec<String> = (0..60)
        .map(|i| format!("Paragraph {i}: {}", "lorem ipsum dolor sit amet ".repeat(8)))
        .collect();
    let answer = paragraphs.join("\n\n");
    assert!(answer.chars().count() > 2 * 4096);
    let reply = answer.clone();
    s.model.set_responder(move |_| Reply::text(reply.clone()));
    s.tg.user_sends(OWNER, OWNER, "write a lot");
    s.tg.wait_sent(|m| text_of(m).contains("Paragraph 59:"))
        .await;
    let parts: Vec<String> =
        s.tg.sent()
            .iter()
            .filter(|m| m.chat_id == OWNER)
            .map(|m| m.shown())
            .collect();
    assert!(parts.len() >= 3, "{}", parts.len());
    assert!(parts.iter().all(|p| p.chars().count() <= 4096));
    let joined = parts.join("\n\n");
    for i in 0..60 {
        assert_eq!(
            joined.matches(&format!("Paragraph {i}:")).count(),
            1,
            "paragraph {i}"
        );
    }
    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_the_post_cannot_show_whole_can_only_be_rejected_from_the_chat() {
    let s = start("off").await;
    // Padding pushes the dangerous end past what a post shows; a right-to-left override
    // would show a command in another order than it runs.
    let mut floor = 0;
    for (i, command) in [
        format!("echo {}; rm -rf build", "x".repeat(3000)),
        "rm -rf build \u{202e}# harmless".to_owned(),
    ]
    .into_iter()
    .enumerate()
    {
        let args = json!({ "command": command }).to_string();
        s.model.set_responder(move |body| {
            let last = last_message(body);
            match last["role"].as_str() {
                Some("user") if content(&last).starts_with(DECISION_TAG) => {
                    Reply::text("resumed with the rejection")
                }
                Some("user") => Reply::tool_call("c1", "terminal", args.clone()),
                _ => Reply::text("asked"),
            }
        });
        s.tg.user_sends(OWNER, OWNER, &format!("clean {i}"));
        let post =
            s.tg.wait_sent(|m| m.message_id > floor && !m.button_data().is_empty())
                .await;
        assert_eq!(post.button_data().len(), 1, "only Reject: {post:?}");
        assert!(
            post.shown().contains("only be rejected"),
            "{}",
            post.shown()
        );
        // "approve" as a reply is refused too.
        s.tg.user_replies(OWNER, OWNER, post.message_id, "approve");
        s.tg.wait_sent(|m| {
            m.message_id > post.message_id && text_of(m).contains("Reply with one of: reject")
        })
        .await;
        assert_eq!(s.handle.gateway().inbox.pending_count().await.unwrap(), 1);
        let id =
            s.tg.user_taps(OWNER, OWNER, post.message_id, &post.button_data()[0]);
        s.tg.wait_callback_answer(&id).await;
        s.tg.wait_edit(|e| {
            e.message_id == post.message_id && e.shown().contains("Rejected by ann")
        })
        .await;
        let resumed = s
            .tg
            .wait_sent(|m| m.message_id > post.message_id && text_of(m).contains("resumed with"))
            .await;
        floor = resumed.message_id;
    }
    s.handle.shutdown().await.unwrap();
}
