//! The Telegram adapter against the fake Bot API on loopback
//! (`tern_test_support::telegram`), through real HTTP.

use std::sync::Arc;
use std::time::Duration;

use tern_channels::platform::{
    Button, ChatRef, EventKind, OutFile, OutMessage, Platform, PlatformError,
};
use tern_channels::telegram::{ALLOWED_UPDATES, Telegram, TelegramSettings};
use tern_test_support::telegram::{FakeTelegram, Fault};
use tokio_util::sync::CancellationToken;

const ANN: i64 = 4242;

/// An adapter for the fake; `poll_timeout` is how long an empty poll is held.
fn adapter(tg: &FakeTelegram, poll_timeout: Duration) -> Telegram {
    Telegram::new(TelegramSettings {
        token: tg.token(),
        api_url: tg.api_url(),
        poll_timeout,
        request_timeout: Duration::from_secs(30),
    })
    .unwrap()
}

fn dm(chat: i64) -> ChatRef {
    ChatRef {
        chat_id: chat.to_string(),
        thread_id: None,
    }
}

fn text(markdown: &str) -> OutMessage {
    OutMessage {
        markdown: markdown.to_owned(),
        ..OutMessage::default()
    }
}

fn button(label: &str, data: &str) -> Button {
    Button {
        label: label.to_owned(),
        data: data.to_owned(),
        reaction: None,
    }
}

fn texts(batch: &tern_channels::platform::Batch) -> Vec<String> {
    batch
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Message { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_poll_confirms_nothing_until_its_cursor_is_passed_back() {
    let tg = FakeTelegram::start().await;
    let t = adapter(&tg, Duration::from_secs(1));
    let cancel = CancellationToken::new();
    tg.user_sends(ANN, ANN, "one");
    tg.user_sends(ANN, ANN, "two");

    let first = t.poll(None, &cancel).await.unwrap();
    assert_eq!(texts(&first), ["one", "two"]);
    let e = &first.events[0];
    assert_eq!(e.chat, dm(ANN));
    assert_eq!(e.user.id, ANN.to_string());
    let cursor = first.next_cursor.clone().unwrap();
    assert_eq!(
        cursor,
        (first.events[1].key.parse::<i64>().unwrap() + 1).to_string(),
        "the cursor follows the last update"
    );
    assert_eq!(tg.allowed_updates().unwrap(), ALLOWED_UPDATES);

    // The runtime has not committed the cursor yet (it crashed, say): the same updates again.
    let again = t.poll(None, &cancel).await.unwrap();
    assert_eq!(again.events, first.events);

    // With the cursor: nothing old; the poll times out empty.
    let after = t.poll(Some(&cursor), &cancel).await.unwrap();
    assert!(after.events.is_empty(), "{after:?}");
    assert_eq!(after.next_cursor, None);
    assert_eq!(tg.pending_updates(), 0, "passing the cursor confirmed them");

    tg.user_sends(ANN, ANN, "three");
    let next = t.poll(Some(&cursor), &cancel).await.unwrap();
    assert_eq!(texts(&next), ["three"]);
}

#[tokio::test]
async fn a_long_poll_returns_when_a_message_arrives_and_cancel_ends_it() {
    let tg = Arc::new(FakeTelegram::start().await);
    let t = Arc::new(adapter(&tg, Duration::from_secs(50)));
    let cancel = CancellationToken::new();
    let poll = tokio::spawn({
        let (t, cancel) = (t.clone(), cancel.clone());
        async move { t.poll(None, &cancel).await }
    });
    tg.wait_held_poll().await;
    tg.user_sends(ANN, ANN, "are you there?");
    let batch = poll.await.unwrap().unwrap();
    assert_eq!(texts(&batch), ["are you there?"]);
    assert_eq!(tg.get_updates_calls(), 1, "one held request, no busy loop");

    let cursor = batch.next_cursor.unwrap();
    let held = tokio::spawn({
        let (t, cancel) = (t.clone(), cancel.clone());
        async move { t.poll(Some(&cursor), &cancel).await }
    });
    tg.wait_held_poll().await;
    cancel.cancel();
    assert!(matches!(held.await.unwrap(), Err(PlatformError::Cancelled)));
    tern_test_support::eventually("the held request to be dropped", async || {
        (tg.held_polls() == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn photos_documents_replies_topics_and_ignored_updates_map() {
    let tg = FakeTelegram::start().await;
    let t = adapter(&tg, Duration::from_secs(1));
    let cancel = CancellationToken::new();
    let photo: Vec<u8> = (0..=255).collect();
    tg.user_sends_photo(ANN, ANN, &photo, Some("look"));
    tg.user_sends_document(ANN, ANN, "notes.txt", "text/plain", b"hello", None);
    let first = tg.user_sends(ANN, ANN, "first");
    tg.user_replies(ANN, ANN, first, "about that");
    tg.user_sends_in_topic(-100_777, 55, ANN, "in a topic");
    // Not asked for: Telegram does not send it.
    tg.push_update("my_chat_member", serde_json::json!({"chat": {"id": ANN}}));
    // Sent, but nothing tern acts on: a service message.
    let ignored = tg.push_update(
        "message",
        serde_json::json!({"message_id": 99, "date": 1, "chat": {"id": -100_777, "type": "supergroup"},
            "from": {"id": ANN, "is_bot": false, "first_name": "Ann"},
            "new_chat_members": [{"id": 1, "is_bot": false, "first_name": "Bob"}]}),
    );

    let batch = t.poll(None, &cancel).await.unwrap();
    assert_eq!(batch.events.len(), 5, "{batch:#?}");
    let EventKind::Message { text, files, .. } = &batch.events[0].kind else {
        panic!("{batch:#?}")
    };
    assert_eq!(text, "look");
    assert_eq!(files.len(), 1);
    assert!(files[0].is_image);
    assert_eq!(files[0].size, Some(256), "the largest size");
    assert_eq!(t.download(&files[0], 1024).await.unwrap(), photo);

    let EventKind::Message { text, files, .. } = &batch.events[1].kind else {
        panic!()
    };
    assert_eq!(text, "");
    assert_eq!(files[0].name.as_deref(), Some("notes.txt"));
    assert_eq!(files[0].mime_type.as_deref(), Some("text/plain"));
    assert!(!files[0].is_image);

    let EventKind::Message { reply_to, .. } = &batch.events[3].kind else {
        panic!()
    };
    assert_eq!(reply_to.as_deref(), Some(first.to_string().as_str()));

    let topic = &batch.events[4];
    assert_eq!(topic.chat.chat_id, "-100777");
    assert_eq!(topic.chat.thread_id.as_deref(), Some("55"));
    let EventKind::Message { reply_to, .. } = &topic.kind else {
        panic!()
    };
    assert_eq!(*reply_to, None, "the topic's root is not a reply");

    // The ignored update is no event, yet the cursor passes it.
    assert_eq!(
        batch.next_cursor.as_deref(),
        Some((ignored + 1).to_string().as_str())
    );
}

#[tokio::test]
async fn send_with_buttons_then_a_tap_is_a_callback_answered_once() {
    let tg = FakeTelegram::start().await;
    let t = adapter(&tg, Duration::from_secs(1));
    let cancel = CancellationToken::new();
    let asked = tg.user_sends(ANN, ANN, "delete it?");
    let msg = OutMessage {
        markdown: "Run `rm -rf build`?".to_owned(),
        buttons: vec![vec![button("Approve", "a:1"), button("Reject", "r:1")]],
        reply_to: Some(asked.to_string()),
    };
    let id = t.send(&dm(ANN), &msg).await.unwrap();
    let sent = tg.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].message_id.to_string(), id);
    assert_eq!(sent[0].parse_mode.as_deref(), Some("HTML"));
    assert_eq!(sent[0].reply_to, Some(asked));
    assert_eq!(sent[0].button_data(), ["a:1", "r:1"]);
    assert_eq!(
        sent[0].reply_markup.as_ref().unwrap()["inline_keyboard"][0][0]["text"],
        "Approve"
    );

    let cb = tg.user_taps(ANN, ANN, sent[0].message_id, "a:1");
    let batch = t.poll(None, &cancel).await.unwrap();
    let tap = batch.events.last().unwrap();
    assert_eq!(tap.user.id, ANN.to_string());
    assert_eq!(tap.chat, dm(ANN));
    assert_eq!(
        tap.kind,
        EventKind::Callback {
            callback_id: cb.clone(),
            message_id: id,
            data: "a:1".to_owned(),
        }
    );

    // A notice over Telegram's 200 characters is cut, not refused.
    let long = format!("Approved. {}", "x".repeat(300));
    t.answer_callback(&cb, Some(&long)).await.unwrap();
    let answer = tg.wait_callback_answer(&cb).await;
    let shown = answer.text.unwrap();
    assert!(shown.starts_with("Approved. xxx"), "{shown}");
    assert_eq!(shown.chars().count(), 200);
    assert!(matches!(
        t.answer_callback(&cb, None).await,
        Err(PlatformError::Rejected(why)) if why.contains("query is too old")
    ));
}

#[tokio::test]
async fn sends_into_a_topic_and_shows_typing_there() {
    let tg = FakeTelegram::start().await;
    let t = adapter(&tg, Duration::from_secs(1));
    let topic = ChatRef {
        chat_id: "-100777".to_owned(),
        thread_id: Some("55".to_owned()),
    };
    t.typing(&topic).await.unwrap();
    t.send(&topic, &text("in the topic")).await.unwrap();
    let action = tg.wait_chat_action(|a| a.chat_id == -100_777).await;
    assert_eq!(action.action, "typing");
    assert_eq!(action.thread_id, Some(55));
    let sent = tg.wait_sent(|m| m.chat_id == -100_777).await;
    assert_eq!(sent.thread_id, Some(55));
    assert_eq!(sent.shown(), "in the topic");
}

#[tokio::test]
async fn refused_html_goes_again_as_plain_text() {
    let tg = FakeTelegram::start().await;
    let t = adapter(&tg, Duration::from_secs(1));
    tg.fail_next("sendMessage", 1, Fault::CantParseEntities);
    t.send(&dm(ANN), &text("a < b & c")).await.unwrap();
    let sent = tg.sent();
    assert_eq!(sent.len(), 1, "one message reached the chat: {sent:?}");
    assert_eq!(sent[0].parse_mode, None);
    assert_eq!(sent[0].text.as_deref(), Some("a < b & c"));
}

#[tokio::test]
async fn edit_replaces_text_and_buttons_and_an_unchanged_edit_is_fine() {
    let tg = FakeTelegram::start().await;
    let t = adapter(&tg, Duration::from_secs(1));
    let asking = OutMessage {
        markdown: "Approve?".to_owned(),
        buttons: vec![vec![button("Approve", "a:1")]],
        reply_to: None,
    };
    let id = t.send(&dm(ANN), &asking).await.unwrap();
    let decided = text("Approved by Ann");
    t.edit(&dm(ANN), &id, &decided).await.unwrap();
    let edits = tg.edits();
    assert_eq!(edits.len(), 1);
    assert_eq!(edits[0].message_id.to_string(), id);
    assert_eq!(edits[0].shown(), "Approved by Ann");
    assert_eq!(edits[0].reply_markup, None, "the buttons are gone");
    // Telegram says "message is not modified"; for tern the edit holds.
    t.edit(&dm(ANN), &id, &decided).await.unwrap();
    assert_eq!(tg.edits().len(), 1);
    assert!(matches!(
        t.edit(&dm(ANN), "999", &decided).await,
        Err(PlatformError::Rejected(why)) if why.contains("message to edit not found")
    ));
}

#[tokio::test]
async fn a_429_is_retry_after_with_the_servers_seconds() {
    let tg = FakeTelegram::start().await;
    let t = adapter(&tg, Duration::from_secs(1));
    tg.fail_next("sendMessage", 1, Fault::TooManyRequests { retry_after: 7 });
    assert!(matches!(
        t.send(&dm(ANN), &text("hi")).await,
        Err(PlatformError::RetryAfter(d)) if d == Duration::from_secs(7)
    ));
    tg.fail_next("getUpdates", 1, Fault::TooManyRequests { retry_after: 3 });
    assert!(matches!(
        t.poll(None, &CancellationToken::new()).await,
        Err(PlatformError::RetryAfter(d)) if d == Duration::from_secs(3)
    ));
    assert!(tg.sent().is_empty());
    t.send(&dm(ANN), &text("hi")).await.unwrap();
}

#[tokio::test]
async fn a_revoked_token_is_unauthorized_everywhere() {
    let tg = FakeTelegram::start().await;
    let t = adapter(&tg, Duration::from_secs(1));
    let token = tg.token();
    tg.revoke_token();
    let cancel = CancellationToken::new();
    let errors = [
        t.poll(None, &cancel).await.unwrap_err(),
        t.send(&dm(ANN), &text("hi")).await.unwrap_err(),
        t.typing(&dm(ANN)).await.unwrap_err(),
    ];
    for e in errors {
        assert!(matches!(e, PlatformError::Unauthorized(_)), "{e:?}");
        assert!(!format!("{e} {e:?}").contains(&token), "{e:?}");
    }
}

#[tokio::test]
async fn errors_never_carry_the_token() {
    let tg = FakeTelegram::start().await;
    let token = tg.token();
    let t = adapter(&tg, Duration::from_secs(1));
    tg.fail_next("sendMessage", 1, Fault::ServerError);
    tg.fail_next("sendChatAction", 1, Fault::Garbage);
    let server = t.send(&dm(ANN), &text("hi")).await.unwrap_err();
    let garbage = t.typing(&dm(ANN)).await.unwrap_err();

    // Nothing listens on this port: a connection error, whose reqwest text has the URL.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let nowhere = Telegram::new(TelegramSettings {
        api_url: format!("http://127.0.0.1:{port}"),
        ..TelegramSettings::new(token.clone())
    })
    .unwrap();
    let network = nowhere.send(&dm(ANN), &text("hi")).await.unwrap_err();
    let download = nowhere
        .download(
            &tern_channels::platform::FileRef {
                id: "x".to_owned(),
                name: None,
                mime_type: None,
                is_image: false,
                size: None,
            },
            10,
        )
        .await
        .unwrap_err();

    for e in [server, garbage, network, download] {
        assert!(matches!(e, PlatformError::Unavailable(_)), "{e:?}");
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains(&token), "{shown}");
        assert!(!shown.contains("AAfake"), "{shown}");
    }
}

#[tokio::test]
async fn downloads_refuse_files_over_the_limit() {
    let tg = FakeTelegram::start().await;
    let t = adapter(&tg, Duration::from_secs(1));
    let bytes = vec![7u8; 5000];
    tg.user_sends_document(
        ANN,
        ANN,
        "big.bin",
        "application/octet-stream",
        &bytes,
        None,
    );
    let batch = t.poll(None, &CancellationToken::new()).await.unwrap();
    let EventKind::Message { files, .. } = &batch.events[0].kind else {
        panic!()
    };
    let file = files[0].clone();
    assert_eq!(t.download(&file, 5000).await.unwrap(), bytes);
    assert!(matches!(
        t.download(&file, 4999).await,
        Err(PlatformError::Rejected(why)) if why.contains("too large")
    ));
    // Without the size in the event, getFile's size still stops it.
    let no_size = tern_channels::platform::FileRef { size: None, ..file };
    assert!(matches!(
        t.download(&no_size, 100).await,
        Err(PlatformError::Rejected(why)) if why.contains("too large")
    ));
    // Nor there, nor in the response's headers: reading stops at the limit.
    tg.hide_file_sizes();
    assert!(matches!(
        t.download(&no_size, 4999).await,
        Err(PlatformError::Rejected(why)) if why.contains("too large")
    ));
    assert_eq!(t.download(&no_size, 5000).await.unwrap(), bytes);
}

#[tokio::test]
async fn send_file_uploads_documents_and_photos() {
    let tg = FakeTelegram::start().await;
    let t = adapter(&tg, Duration::from_secs(1));
    let doc = OutFile {
        name: "report.csv".to_owned(),
        bytes: b"a,b\n1,2\n".to_vec(),
        mime_type: Some("text/csv".to_owned()),
        is_image: false,
        caption: Some("the report".to_owned()),
    };
    let id = t.send_file(&dm(ANN), &doc).await.unwrap();
    let png = OutFile {
        name: "chart.png".to_owned(),
        bytes: vec![0x89, b'P', b'N', b'G', 1, 2, 3],
        mime_type: Some("image/png".to_owned()),
        is_image: true,
        caption: None,
    };
    t.send_file(&dm(ANN), &png).await.unwrap();
    let sent = tg.sent();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].method, "sendDocument");
    assert_eq!(sent[0].message_id.to_string(), id);
    assert_eq!(sent[0].text.as_deref(), Some("the report"));
    assert_eq!(
        sent[0].file,
        Some(("report.csv".to_owned(), doc.bytes.clone()))
    );
    assert_eq!(sent[1].method, "sendPhoto");
    assert_eq!(sent[1].file.as_ref().unwrap().1, png.bytes);
}

#[tokio::test]
async fn a_second_poller_makes_the_first_a_conflict() {
    let tg = Arc::new(FakeTelegram::start().await);
    let first = Arc::new(adapter(&tg, Duration::from_secs(50)));
    let second = adapter(&tg, Duration::from_secs(1));
    let cancel = CancellationToken::new();
    let held = tokio::spawn({
        let (first, cancel) = (first.clone(), cancel.clone());
        async move { first.poll(None, &cancel).await }
    });
    tg.wait_held_poll().await;
    second.poll(None, &cancel).await.unwrap();
    assert!(matches!(
        held.await.unwrap(),
        Err(PlatformError::Conflict(why)) if why.contains("terminated by other getUpdates")
    ));
}

#[tokio::test]
async fn a_leftover_webhook_is_deleted_and_the_poll_goes_on() {
    let tg = FakeTelegram::start().await;
    let t = adapter(&tg, Duration::from_secs(1));
    tg.set_webhook("https://old.example.org/hook");
    tg.user_sends(ANN, ANN, "still here");
    let batch = t.poll(None, &CancellationToken::new()).await.unwrap();
    assert_eq!(texts(&batch), ["still here"]);
    assert_eq!(tg.webhook(), None);
}

#[tokio::test]
async fn me_names_the_bot_or_says_the_token_is_bad() {
    let tg = FakeTelegram::start().await;
    let t = adapter(&tg, Duration::from_secs(1));
    let me = t.me().await.unwrap();
    assert_eq!(me.id, tern_test_support::telegram::BOT_ID.to_string());
    assert!(me.name.contains("@tern_test_bot"), "{me:?}");
    tg.revoke_token();
    assert!(matches!(t.me().await, Err(PlatformError::Unauthorized(_))));
}
