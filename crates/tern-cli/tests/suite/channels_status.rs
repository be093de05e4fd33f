//! `tern channels status` as a real process: the configured channels with their state — one
//! polling the fake Bot API through a real `tern gateway`, one whose token cannot be read
//! (the gateway runs on without it), one disabled — and never a secret; and a background
//! process started from a chat telling that chat when it ends.

use crate::common;

use std::time::Duration;

use common::{Env, assert_ok, stdout};
use serde_json::Value;
use tern_fake_model::Reply;
use tern_test_support::telegram::FakeTelegram;
use tern_test_support::{PATIENCE, wait_until};

fn status(e: &Env) -> Value {
    let o = e.run(&["channels", "status", "--json"]);
    assert_ok(&o);
    serde_json::from_slice(&o.stdout).unwrap()
}

fn channel<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["channels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no channel {name}: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_status_shows_each_channel_its_failures_and_never_a_secret() {
    let tg = FakeTelegram::start().await;
    let e = Env::with_model().await;
    e.fake().push(Reply::text("hello from the bot"));
    let matrix_secret = "syt_matrix-secret-token-0123456789";
    e.config(&format!(
        "[[channels.telegram]]\nname = \"good\"\ntoken = \"{}\"\napi_url = \"{}\"\n\
         allowed_users = [1]\npoll_timeout = \"1s\"\n\n\
         [[channels.telegram]]\nname = \"broken\"\ntoken_env = \"TERN_TEST_NO_SUCH_TOKEN\"\n\n\
         [[channels.matrix]]\nname = \"off\"\nhomeserver = \"http://127.0.0.1:9\"\n\
         user_id = \"@bot:example.org\"\naccess_token = \"{matrix_secret}\"\nenabled = false\n",
        tg.token(),
        tg.api_url()
    ));

    let o = e.run(&["channels", "status"]);
    assert_ok(&o);
    let text = stdout(&o);
    assert!(text.contains("no gateway running"), "{text}");
    for name in ["good", "broken", "off"] {
        assert!(text.contains(name), "{text}");
    }

    let _gw = e.gateway();
    tg.user_sends(1, 1, "hi");
    tg.wait_sent(|m| m.text.as_deref() == Some("hello from the bot"))
        .await;
    wait_until(PATIENCE, Duration::from_millis(50), async || {
        let v = status(&e);
        let good = channel(&v, "good");
        if good["state"] == "ok" && good["chats"] == 1 {
            Ok(())
        } else {
            Err(format!("{v}"))
        }
    })
    .await;
    let v = status(&e);
    let broken = channel(&v, "broken");
    assert_eq!(broken["state"], "failing", "{v}");
    assert!(
        broken["last_error"]
            .as_str()
            .unwrap()
            .contains("TERN_TEST_NO_SUCH_TOKEN"),
        "{v}"
    );
    assert_eq!(channel(&v, "off")["state"], "disabled", "{v}");
    assert!(v["gateway"]["pid"].is_number(), "{v}");

    let o = e.run(&["channels", "status"]);
    let text = stdout(&o);
    assert!(text.contains("gateway running"), "{text}");
    assert!(text.contains("last error"), "{text}");
    for out in [text, v.to_string()] {
        assert!(
            !out.contains(&tg.token()),
            "the bot token was printed: {out}"
        );
        assert!(
            !out.contains(matrix_secret),
            "the access token was printed: {out}"
        );
    }
}

/// A background process started from a chat (supervised by `tern supervise`, so through the
/// real binary) resumes its session when it ends, and the answer reaches the chat though
/// no one wrote there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_process_that_ends_resumes_the_session_and_its_chat_hears_of_it() {
    let tg = FakeTelegram::start().await;
    let e = Env::with_model().await;
    e.fake().set_responder(|body| {
        let last = body["messages"]
            .as_array()
            .and_then(|a| a.last())
            .cloned()
            .unwrap_or_default();
        let text = last["content"].as_str().unwrap_or_default().to_owned();
        match last["role"].as_str() {
            Some("user") if text.starts_with("[process exited]") => {
                Reply::text("The background job has finished.")
            }
            Some("user") => Reply::tool_call(
                "c1",
                "terminal",
                serde_json::json!({"command": "echo working; sleep 0.3", "background": true,
                       "notify_on_complete": true})
                .to_string(),
            ),
            _ => Reply::text("Started it; I will tell you when it ends."),
        }
    });
    e.config(&format!(
        "[[channels.telegram]]\ntoken = \"{}\"\napi_url = \"{}\"\nallowed_users = [1]\n\
         poll_timeout = \"1s\"\n",
        tg.token(),
        tg.api_url()
    ));
    let _gw = e.gateway();
    tg.user_sends(1, 1, "run the job in the background");
    tg.wait_sent(|m| m.text.as_deref().unwrap_or("").contains("Started it"))
        .await;
    tg.wait_sent(|m| {
        m.chat_id == 1
            && m.text
                .as_deref()
                .unwrap_or("")
                .contains("The background job has finished.")
    })
    .await;
}
