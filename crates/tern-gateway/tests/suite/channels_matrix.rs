//! The Matrix channel end to end, against a real Synapse homeserver on loopback (the
//! test-support harness; `pip install matrix-synapse`): a gateway booted with
//! `[[channels.matrix]]` joins the room it is invited to, answers, posts an approval that a
//! reaction decides through the inbox, pairs a stranger, and after a restart answers what
//! came while it was down, once, without answering anything again.

use serde_json::{Value, json};
use tern_fake_model::{FakeModel, Reply};
use tern_gateway::boot::GatewayHandle;
use tern_test_support::synapse::{MatrixUser, RoomMessage, Synapse};
use tern_test_support::{PATIENCE, TempHome, wait_until};

use crate::common::{self, home_for};

const DECISION_TAG: &str = "[inbox decision]";

fn last_text(body: &Value) -> (String, String) {
    let last = body["messages"]
        .as_array()
        .and_then(|a| a.last())
        .cloned()
        .unwrap_or(Value::Null);
    (
        last["role"].as_str().unwrap_or_default().to_owned(),
        last["content"].as_str().unwrap_or_default().to_owned(),
    )
}

/// Echoes, asks for approval on "deploy", says "Deployed." after the decision.
fn script(model: &FakeModel) {
    model.set_responder(|body| {
        let (role, text) = last_text(body);
        match role.as_str() {
            "user" if text.starts_with(DECISION_TAG) => Reply::text("Deployed."),
            "user" if text.contains("deploy") => Reply::tool_call(
                "c1",
                "request_approval",
                json!({"summary": "Deploy v3?"}).to_string(),
            ),
            "tool" => Reply::text("I asked for approval."),
            _ => Reply::text(format!("echo: {text}")),
        }
    });
}

async fn boot(home: &TempHome) -> GatewayHandle {
    let handle = common::builder(home).start().await.unwrap().handle;
    // The adapter's first poll only takes the current position (what came before the bot's
    // first start is not answered): wait until it is committed.
    let store = handle.gateway().store.clone();
    wait_until(
        PATIENCE,
        std::time::Duration::from_millis(20),
        async || match store.channel_cursor("matrix").await.unwrap() {
            Some(_) => Ok(()),
            None => Err("waiting for the first sync".to_owned()),
        },
    )
    .await;
    handle
}

fn bodies_from(all: &[RoomMessage], sender: &str, text: &str) -> usize {
    all.iter()
        .filter(|m| m.sender == sender && m.body().contains(text))
        .count()
}

/// `[[channels.matrix]]` for `bot` on `server`, with `extra` lines.
fn matrix_config(server: &Synapse, bot: &MatrixUser, extra: &str) -> String {
    format!(
        "[[channels.matrix]]\nhomeserver = \"{}\"\nuser_id = \"{}\"\naccess_token = \"{}\"\n\
         poll_timeout = \"2s\"\n{extra}",
        server.url(),
        bot.user_id,
        bot.access_token
    )
}

async fn dm(human: &MatrixUser, bot: &MatrixUser) -> String {
    let room = human.create_room(&[&bot.user_id]).await;
    human.wait_joined(&room, &bot.user_id).await;
    room
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matrix_conversation_an_approval_by_reaction_and_a_restart_without_duplicates() {
    let server = Synapse::shared();
    let bot = server.new_user("bot").await;
    let alice = server.new_user("alice").await;
    let model = FakeModel::start().await.unwrap();
    script(&model);
    let home = home_for(
        &model,
        &matrix_config(
            server,
            &bot,
            &format!(
                "allowed_users = [\"{0}\"]\nreviewers = {{ \"{0}\" = \"ann\" }}\n",
                alice.user_id
            ),
        ),
    );
    common::add_reviewer(&home, "ann").await;
    let handle = boot(&home).await;

    let room = dm(&alice, &bot).await;
    alice.send_text(&room, "hello").await;
    alice
        .wait_for_message(&room, &bot.user_id, |m| m.body().contains("echo: hello"))
        .await;

    // An approval: posted with its reactions, decided by alice's ✅ through the inbox.
    alice.send_text(&room, "deploy v3").await;
    let post = alice
        .wait_for_message(&room, &bot.user_id, |m| {
            m.body().contains("Deploy v3?") && m.body().contains("React")
        })
        .await;
    alice.send_reaction(&room, &post.event_id, "✅").await;
    alice
        .wait_for_message(&room, &bot.user_id, |m| m.body().contains("Deployed."))
        .await;
    alice
        .wait_for_message(&room, &bot.user_id, |m| {
            m.body().contains("Approved by ann")
        })
        .await;
    assert_eq!(handle.gateway().inbox.pending_count().await.unwrap(), 0);

    // Down, a message, up again: it is answered once, nothing before it again.
    handle.shutdown().await.unwrap();
    alice.send_text(&room, "while you were away").await;
    let handle = boot(&home).await;
    alice
        .wait_for_message(&room, &bot.user_id, |m| {
            m.body().contains("echo: while you were away")
        })
        .await;
    alice.send_text(&room, "and now").await;
    alice
        .wait_for_message(&room, &bot.user_id, |m| m.body().contains("echo: and now"))
        .await;
    let all = alice.messages(&room).await;
    for text in [
        "echo: hello",
        "Deployed.",
        "echo: while you were away",
        "echo: and now",
    ] {
        assert_eq!(bodies_from(&all, &bot.user_id, text), 1, "{text}: {all:#?}");
    }
    let decisions = model
        .requests()
        .iter()
        .filter(|r| last_text(&r.body).1.starts_with(DECISION_TAG))
        .count();
    assert_eq!(decisions, 1);
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_matrix_stranger_pairs_and_a_reply_decides_an_approval() {
    let server = Synapse::shared();
    let bot = server.new_user("bot").await;
    let bob = server.new_user("bob").await;
    let model = FakeModel::start().await.unwrap();
    script(&model);
    let home = home_for(&model, &matrix_config(server, &bot, ""));
    common::add_reviewer(&home, "bobs-reviewer").await;
    let handle = boot(&home).await;
    let room = dm(&bob, &bot).await;
    bob.send_text(&room, "who are you?").await;
    let code_msg = bob
        .wait_for_message(&room, &bot.user_id, |m| {
            m.body().contains("tern pairing approve matrix")
        })
        .await;
    let code: String = code_msg
        .body()
        .split("tern pairing approve matrix ")
        .nth(1)
        .unwrap()
        .chars()
        .take(8)
        .collect();
    assert!(model.requests().is_empty(), "the agent saw a stranger");
    let store = handle.gateway().store.clone();
    tern_channels::pairing::Pairing::new(store.clone())
        .approve(
            "matrix",
            &code,
            Some("bobs-reviewer"),
            tern_util::clock::now_ms(),
        )
        .await
        .unwrap();
    bob.send_text(&room, "deploy please").await;
    let post = bob
        .wait_for_message(&room, &bot.user_id, |m| {
            m.body().contains("Deploy v3?") && m.body().contains("React")
        })
        .await;
    bob.send_reply(&room, &post.event_id, "approve").await;
    bob.wait_for_message(&room, &bot.user_id, |m| m.body().contains("Deployed."))
        .await;
    bob.wait_for_message(&room, &bot.user_id, |m| {
        m.body().contains("Approved by bobs-reviewer")
    })
    .await;
    handle.shutdown().await.unwrap();
}
