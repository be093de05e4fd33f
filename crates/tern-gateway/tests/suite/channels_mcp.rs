//! An MCP server's question in a chat: a gateway booted with `[[channels.telegram]]` (the
//! scripted fake Bot API on loopback) and real MCP servers (Node.js, `npm ci` in `tests/mcp`):
//! `tests/mcp/ask-server.mjs`, which asks one simple question per call, and server-everything,
//! whose `trigger-elicitation-request` asks a whole form. The question is posted to the chat
//! of the session whose tool call asked, like an `inbox` tool's elicitation: answered there
//! (a tap, a reply), or linked to the web inbox and settled when answered there or withdrawn.

use std::path::PathBuf;

use serde_json::{Value, json};
use tern_fake_model::{FakeModel, Reply};
use tern_gateway::boot::GatewayHandle;
use tern_inbox::review::{RequestFilter, RequestStatus};
use tern_test_support::TempHome;
use tern_test_support::telegram::{FakeTelegram, Sent};
use tern_test_support::wait::eventually;

use crate::common::{self, home_for};

/// The owner: allowed and mapped to the inbox reviewer `ann`.
const OWNER: i64 = 111;

/// What the model says with the tool's result, so the chat shows what the server got.
const GOT: &str = "The server answered:";

struct Setup {
    tg: FakeTelegram,
    _model: FakeModel,
    _home: TempHome,
    handle: GatewayHandle,
}

fn mcp_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp")
}

/// A file of `tests/mcp`; fails, saying what to install, without `node_modules`.
fn mcp_file(rel: &str) -> String {
    let path = mcp_dir().join(rel);
    let sdk = mcp_dir().join("node_modules/@modelcontextprotocol/sdk/package.json");
    assert!(
        path.is_file() && sdk.is_file(),
        "{} is missing: install Node.js 20 or later and run `npm ci --no-audit --no-fund` in {}",
        path.display(),
        mcp_dir().display()
    );
    path.display().to_string()
}

/// Where the kernel cannot enforce the sandbox a sandboxed server does not start: there the
/// servers run without one (as in `suite::mcp`).
fn unsandboxed_without_landlock() -> &'static str {
    match tern_sandbox::Support::probe() {
        tern_sandbox::Support::Missing { .. } => "sandbox = \"none\"\n",
        tern_sandbox::Support::Landlock { .. } => "",
    }
}

/// The chat's turns: "confirm" and "name" call `ask`, "form" calls server-everything's
/// form; a tool's result is repeated to the chat.
async fn start() -> Setup {
    let tg = FakeTelegram::start().await;
    let model = FakeModel::start().await.unwrap();
    model.set_responder(|body| {
        let last = body["messages"]
            .as_array()
            .and_then(|a| a.last())
            .cloned()
            .unwrap_or(Value::Null);
        let text = last["content"].as_str().unwrap_or_default().to_owned();
        match (last["role"].as_str(), text.as_str()) {
            (Some("tool"), _) => Reply::text(format!("{GOT} {text}")),
            (Some("user"), "form") => {
                Reply::tool_call("c1", "mcp__everything__trigger-elicitation-request", "{}")
            }
            (Some("user"), q) => {
                Reply::tool_call("c1", "mcp__ask__ask", json!({ "question": q }).to_string())
            }
            _ => Reply::text("?"),
        }
    });
    let home = home_for(
        &model,
        &format!(
            "[[channels.telegram]]\ntoken = \"{}\"\napi_url = \"{}\"\n\
             allowed_users = [{OWNER}]\nreviewers = {{ {OWNER} = \"ann\" }}\n\
             progress = \"off\"\npoll_timeout = \"2s\"\n\n\
             [mcp_servers.ask]\ncommand = \"node\"\nargs = [{:?}]\n{sandbox}\n\
             [mcp_servers.everything]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\n{sandbox}",
            tg.token(),
            tg.api_url(),
            mcp_file("ask-server.mjs"),
            mcp_file("node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
            sandbox = unsandboxed_without_landlock(),
        ),
    );
    common::add_reviewer(&home, "ann").await;
    let handle = common::builder(&home).start().await.unwrap().handle;
    Setup {
        tg,
        _model: model,
        _home: home,
        handle,
    }
}

fn text_of(s: &Sent) -> String {
    s.shown()
}

/// The labels of a message's buttons.
fn labels(s: &Sent) -> Vec<String> {
    s.reply_markup
        .as_ref()
        .and_then(|m| m["inline_keyboard"].as_array())
        .into_iter()
        .flatten()
        .filter_map(Value::as_array)
        .flatten()
        .filter_map(|b| b["text"].as_str().map(str::to_owned))
        .collect()
}

impl Setup {
    /// The post of the question whose text has `asked` in it.
    async fn post(&self, asked: &str) -> Sent {
        self.tg
            .wait_sent(|m| m.chat_id == OWNER && text_of(m).contains(asked))
            .await
    }

    /// The one pending request in the gateway's inbox.
    async fn pending_request(&self) -> String {
        let inbox = self.handle.gateway().inbox.clone();
        let filter = RequestFilter {
            status: Some(RequestStatus::Pending),
            ..Default::default()
        };
        eventually("the question in the inbox", async || {
            let list = inbox.list_requests(&filter).await.ok()?;
            list.items.first().map(|r| r.id.clone())
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_servers_question_is_answered_in_the_chat_and_the_server_gets_the_value() {
    let s = start().await;

    // A yes/no: buttons, decided by a tap.
    s.tg.user_sends(OWNER, OWNER, "confirm");
    let post = s.post("Deploy the release?").await;
    assert!(text_of(&post).contains("MCP server"), "{post:?}");
    assert!(text_of(&post).contains("ask"), "{post:?}");
    assert_eq!(labels(&post), ["Yes", "No"], "{post:?}");
    let data = post.button_data();
    let id = s.tg.user_taps(OWNER, OWNER, post.message_id, &data[0]);
    let answer = s.tg.wait_callback_answer(&id).await;
    assert!(
        answer.text.as_deref().unwrap_or("").contains("Answered"),
        "{answer:?}"
    );
    let got = s.post(GOT).await;
    assert!(
        text_of(&got).contains(r#"{"action":"accept","content":{"ok":true}}"#),
        "{got:?}"
    );
    let edit =
        s.tg.wait_edit(|e| e.message_id == post.message_id && e.text.is_some())
            .await;
    assert!(edit.shown().contains("Answered by ann"), "{edit:?}");
    assert!(edit.button_data().is_empty(), "{edit:?}");

    // Short text: a reply to the post.
    s.tg.user_sends(OWNER, OWNER, "name");
    let post = s.post("What is the release called?").await;
    assert!(
        text_of(&post).contains("Reply to this message with the release name"),
        "{post:?}"
    );
    s.tg.user_replies(OWNER, OWNER, post.message_id, "Falcon 2");
    let got =
        s.tg.wait_sent(|m| text_of(m).contains(GOT) && text_of(m).contains("Falcon"))
            .await;
    assert!(
        text_of(&got).contains(r#"{"action":"accept","content":{"name":"Falcon 2"}}"#),
        "{got:?}"
    );
    s.tg.wait_edit(|e| e.message_id == post.message_id && e.shown().contains("Answered by ann"))
        .await;
    // Both answered once, in the inbox, as the chat's reviewer.
    let inbox = s.handle.gateway().inbox.clone();
    assert_eq!(inbox.pending_count().await.unwrap(), 0);
    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_is_linked_to_the_web_inbox_and_its_post_settles_when_answered_there() {
    let s = start().await;
    s.tg.user_sends(OWNER, OWNER, "form");
    let post = s.post("Please provide inputs").await;
    assert!(
        text_of(&post).contains("Answer it in the web inbox"),
        "{post:?}"
    );
    assert!(post.button_data().is_empty(), "{post:?}");
    let id = s.pending_request().await;
    let answers = json!({"name": "Ada Lovelace", "check": true, "integer": 7});
    s.handle
        .gateway()
        .inbox
        .answer_elicitation(&id, answers.as_object().unwrap(), "ann")
        .await
        .unwrap();
    let got = s.post(GOT).await;
    assert!(text_of(&got).contains("Ada Lovelace"), "{got:?}");
    let edit =
        s.tg.wait_edit(|e| e.message_id == post.message_id && e.text.is_some())
            .await;
    assert!(edit.shown().contains("Answered by ann"), "{edit:?}");
    s.handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_withdrawn_by_stop_is_shown_withdrawn_and_decides_nothing() {
    let s = start().await;
    s.tg.user_sends(OWNER, OWNER, "confirm");
    let post = s.post("Deploy the release?").await;
    let request = s.pending_request().await;
    s.tg.user_sends(OWNER, OWNER, "/stop");
    let edit =
        s.tg.wait_edit(|e| e.message_id == post.message_id && e.text.is_some())
            .await;
    assert!(edit.shown().contains("Withdrawn"), "{edit:?}");
    let view = s
        .handle
        .gateway()
        .inbox
        .request_view(&request)
        .await
        .unwrap();
    assert_eq!(view.summary.status, RequestStatus::Withdrawn);
    // The buttons are gone; their genuine data sent again (a modified client) decides
    // nothing.
    let id =
        s.tg.user_taps_forged(OWNER, OWNER, post.message_id, &post.button_data()[0]);
    let answer = s.tg.wait_callback_answer(&id).await;
    assert!(
        answer.text.as_deref().unwrap_or("").contains("withdrawn"),
        "{answer:?}"
    );
    s.handle.shutdown().await.unwrap();
}
