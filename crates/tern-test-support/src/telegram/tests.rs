//! The fake's own semantics, through real HTTP.

use super::*;

async fn call(tg: &FakeTelegram, method: &str, body: Value) -> (u16, Value) {
    let url = format!("{}/bot{}/{method}", tg.api_url(), tg.token());
    let r = reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

fn ids(v: &Value) -> Vec<i64> {
    v["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["update_id"].as_i64().unwrap())
        .collect()
}

#[tokio::test]
async fn an_offset_confirms_the_updates_before_it() {
    let tg = FakeTelegram::start().await;
    tg.user_sends(5, 5, "one");
    tg.user_sends(5, 5, "two");
    let (status, first) = call(&tg, "getUpdates", json!({})).await;
    assert_eq!(status, 200);
    let got = ids(&first);
    assert_eq!(got.len(), 2);
    // Unconfirmed: they come again.
    let (_, again) = call(&tg, "getUpdates", json!({})).await;
    assert_eq!(ids(&again), got);
    // Polling past the first confirms it; the second stays.
    let (_, after) = call(&tg, "getUpdates", json!({"offset": got[0] + 1})).await;
    assert_eq!(ids(&after), vec![got[1]]);
    assert_eq!(tg.pending_updates(), 1);
    let (_, none) = call(&tg, "getUpdates", json!({"offset": got[1] + 1})).await;
    assert_eq!(ids(&none), Vec::<i64>::new());
    assert_eq!(tg.pending_updates(), 0);
}

#[tokio::test]
async fn a_held_long_poll_returns_when_an_update_arrives() {
    let tg = Arc::new(FakeTelegram::start().await);
    let poll = tokio::spawn({
        let tg = tg.clone();
        async move { call(&tg, "getUpdates", json!({"timeout": 50})).await }
    });
    tg.wait_held_poll().await;
    tg.user_sends(5, 5, "wake up");
    let (status, body) = poll.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body["result"][0]["message"]["text"], "wake up");
    // One held request, not a loop of them.
    assert_eq!(tg.get_updates_calls(), 1);
}

#[tokio::test]
async fn a_newer_poll_ends_the_held_one_with_409() {
    let tg = Arc::new(FakeTelegram::start().await);
    let older = tokio::spawn({
        let tg = tg.clone();
        async move { call(&tg, "getUpdates", json!({"timeout": 50})).await }
    });
    tg.wait_held_poll().await;
    let (status, _) = call(&tg, "getUpdates", json!({"timeout": 0})).await;
    assert_eq!(status, 200);
    let (status, body) = older.await.unwrap();
    assert_eq!(status, 409, "{body}");
    assert!(
        body["description"]
            .as_str()
            .unwrap()
            .contains("terminated by other getUpdates")
    );
}

#[tokio::test]
async fn allowed_updates_filters_and_is_remembered() {
    let tg = FakeTelegram::start().await;
    tg.push_update("edited_message", json!({"message_id": 1}));
    let msg = tg.user_sends(5, 5, "hi");
    let (_, body) = call(
        &tg,
        "getUpdates",
        json!({"allowed_updates": ["message", "callback_query"]}),
    )
    .await;
    assert_eq!(body["result"].as_array().unwrap().len(), 1);
    assert_eq!(body["result"][0]["message"]["message_id"], msg);
    let (_, body) = call(&tg, "getUpdates", json!({})).await;
    assert_eq!(
        body["result"].as_array().unwrap().len(),
        1,
        "the list is remembered"
    );
}

#[tokio::test]
async fn injected_429_carries_retry_after_then_the_call_passes() {
    let tg = FakeTelegram::start().await;
    tg.fail_next("sendMessage", 1, Fault::TooManyRequests { retry_after: 3 });
    let (status, body) = call(&tg, "sendMessage", json!({"chat_id": 5, "text": "x"})).await;
    assert_eq!(status, 429);
    assert_eq!(body["parameters"]["retry_after"], 3);
    assert_eq!(body["description"], "Too Many Requests: retry after 3");
    assert!(tg.sent().is_empty());
    let (status, body) = call(&tg, "sendMessage", json!({"chat_id": 5, "text": "x"})).await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["message_id"], 1);
}

#[tokio::test]
async fn html_is_checked_and_length_counts_visible_text() {
    let tg = FakeTelegram::start().await;
    let (status, body) = call(
        &tg,
        "sendMessage",
        json!({"chat_id": 5, "text": "<b>bold", "parse_mode": "HTML"}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["description"]
            .as_str()
            .unwrap()
            .contains("can't parse entities")
    );
    let long = format!("<b>{}</b>", "a".repeat(MAX_TEXT_CHARS));
    let (status, _) = call(
        &tg,
        "sendMessage",
        json!({"chat_id": 5, "text": long, "parse_mode": "HTML"}),
    )
    .await;
    assert_eq!(status, 200, "tags do not count");
    assert_eq!(tg.sent()[0].shown().len(), MAX_TEXT_CHARS);
    let (status, _) = call(
        &tg,
        "sendMessage",
        json!({"chat_id": 5, "text": "<i>a</i> &lt;b&gt; &amp; c", "parse_mode": "HTML"}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(tg.sent()[1].shown(), "a <b> & c");
    let (status, body) = call(
        &tg,
        "sendMessage",
        json!({"chat_id": 5, "text": "a".repeat(MAX_TEXT_CHARS + 1)}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["description"], "Bad Request: message is too long");
}

#[tokio::test]
async fn edits_callbacks_and_tokens_behave_like_telegram() {
    let tg = FakeTelegram::start().await;
    let kb = json!({"inline_keyboard": [[{"text": "Yes", "callback_data": "y"}]]});
    let (_, sent) = call(
        &tg,
        "sendMessage",
        json!({"chat_id": 5, "text": "ok?", "reply_markup": kb}),
    )
    .await;
    let mid = sent["result"]["message_id"].as_i64().unwrap();
    let (status, body) = call(
        &tg,
        "editMessageText",
        json!({"chat_id": 5, "message_id": mid, "text": "ok?", "reply_markup": kb}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["description"]
            .as_str()
            .unwrap()
            .contains("message is not modified")
    );
    let cb = tg.user_taps(5, 5, mid, "y");
    let (status, _) = call(&tg, "answerCallbackQuery", json!({"callback_query_id": cb})).await;
    assert_eq!(status, 200);
    let (status, body) = call(&tg, "answerCallbackQuery", json!({"callback_query_id": cb})).await;
    assert_eq!(status, 400);
    assert!(
        body["description"]
            .as_str()
            .unwrap()
            .contains("query is too old")
    );
    tg.revoke_token();
    let (status, body) = call(&tg, "getMe", json!({})).await;
    assert_eq!(status, 401);
    assert_eq!(body["description"], "Unauthorized");
}

#[tokio::test]
async fn parameters_come_as_a_query_or_a_form_too() {
    let tg = FakeTelegram::start().await;
    let base = format!("{}/bot{}", tg.api_url(), tg.token());
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{base}/sendMessage"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(
            "chat_id=5&text=a%20b&reply_markup=%7B%22inline_keyboard%22%3A%5B%5B%7B%22text%22%3A%22Y%22%2C%22callback_data%22%3A%22y%22%7D%5D%5D%7D",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let sent = tg.sent();
    assert_eq!(sent[0].text.as_deref(), Some("a b"));
    assert_eq!(sent[0].button_data(), ["y"]);
    tg.user_sends(5, 5, "hi");
    let r = http
        .get(format!("{base}/getUpdates?timeout=0&limit=1"))
        .send()
        .await
        .unwrap();
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["result"][0]["message"]["text"], "hi");
}

#[tokio::test]
async fn a_webhook_blocks_get_updates_until_deleted() {
    let tg = FakeTelegram::start().await;
    tg.set_webhook("https://example.org/hook");
    let (status, body) = call(&tg, "getUpdates", json!({})).await;
    assert_eq!(status, 409);
    assert!(
        body["description"]
            .as_str()
            .unwrap()
            .contains("webhook is active")
    );
    let (status, _) = call(&tg, "deleteWebhook", json!({})).await;
    assert_eq!(status, 200);
    let (status, _) = call(&tg, "getUpdates", json!({})).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_client_killed_mid_poll_leaves_everything_to_the_next() {
    let tg = Arc::new(FakeTelegram::start().await);
    tg.user_sends(5, 5, "before");
    let (_, first) = call(&tg, "getUpdates", json!({})).await;
    let before = ids(&first)[0];
    // The client dies holding a long poll: its connection goes away.
    let dying = tokio::spawn({
        let tg = tg.clone();
        async move {
            call(
                &tg,
                "getUpdates",
                json!({"offset": before + 1, "timeout": 50}),
            )
            .await
        }
    });
    tg.wait_held_poll().await;
    dying.abort();
    crate::eventually("the dead client's poll to end", async || {
        (tg.held_polls() == 0).then_some(())
    })
    .await;
    tg.user_sends(5, 5, "after");
    // A new client with the committed offset gets exactly what was not confirmed.
    let (status, body) = call(&tg, "getUpdates", json!({"offset": before + 1})).await;
    assert_eq!(status, 200);
    assert_eq!(body["result"].as_array().unwrap().len(), 1);
    assert_eq!(body["result"][0]["message"]["text"], "after");
}
