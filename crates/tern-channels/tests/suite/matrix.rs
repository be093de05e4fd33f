//! The Matrix adapter against a real Synapse on loopback (`tern_test_support::synapse`): one
//! server for the test binary, fresh users and rooms per test; the 429 test starts its own
//! server with Synapse's default rate limits.
//!
//! Without `matrix-synapse` importable by `python3` (or `$TERN_SYNAPSE_PYTHON`) these tests
//! fail with a message saying so: `.ci/run` installs it.

use std::time::Duration;

use serde_json::Value;
use tern_channels::matrix::{Matrix, MatrixSettings};
use tern_channels::platform::{
    Batch, Button, ChatRef, Event, EventKind, FileRef, OutFile, OutMessage, Platform, PlatformError,
};
use tern_test_support::synapse::{MatrixUser, Options, Synapse};
use tern_test_support::{PATIENCE, wait_until};
use tokio_util::sync::CancellationToken;

fn adapter(server: &Synapse, bot: &MatrixUser) -> Matrix {
    Matrix::new(MatrixSettings {
        // A short long poll: a test waiting for a condition polls again sooner.
        poll_timeout: Duration::from_secs(2),
        ..MatrixSettings::new(server.url(), &bot.user_id, &bot.access_token)
    })
    .unwrap()
}

async fn poll(m: &Matrix, cursor: Option<&str>) -> Batch {
    m.poll(cursor, &CancellationToken::new()).await.unwrap()
}

/// Polls from `cursor` (advancing it) until the events polled so far satisfy `done`; all of
/// them.
async fn poll_until(
    m: &Matrix,
    cursor: &mut String,
    what: &str,
    done: impl Fn(&[Event]) -> bool,
) -> Vec<Event> {
    let mut seen = Vec::new();
    wait_until(PATIENCE, Duration::from_millis(10), async || {
        let batch = poll(m, Some(cursor)).await;
        seen.extend(batch.events);
        if let Some(next) = batch.next_cursor {
            *cursor = next;
        }
        if done(&seen) {
            Ok(())
        } else {
            Err(format!("waiting for {what}; polled {seen:#?}"))
        }
    })
    .await;
    seen
}

fn has_key(events: &[Event], key: &str) -> bool {
    events.iter().any(|e| e.key == key)
}

fn text_of(e: &Event) -> &str {
    match &e.kind {
        EventKind::Message { text, .. } => text,
        _ => "",
    }
}

/// A bot with its adapter and a first cursor, and a human who invited it to a new room the
/// bot has joined (through its polls).
struct Dm {
    bot: MatrixUser,
    human: MatrixUser,
    m: Matrix,
    room: String,
    cursor: String,
}

impl Dm {
    async fn open() -> Dm {
        let server = Synapse::shared();
        let bot = server.new_user("bot").await;
        let human = server.new_user("alice").await;
        let m = adapter(server, &bot);
        let first = poll(&m, None).await;
        assert!(first.events.is_empty(), "{first:?}");
        let mut cursor = first.next_cursor.expect("the first poll gives a cursor");
        let room = human.create_room(&[&bot.user_id]).await;
        wait_until(PATIENCE, Duration::from_millis(10), async || {
            let batch = poll(&m, Some(&cursor)).await;
            if let Some(next) = batch.next_cursor {
                cursor = next;
            }
            if human.is_joined(&room, &bot.user_id).await {
                Ok(())
            } else {
                Err(format!("waiting for {} to join {room}", bot.user_id))
            }
        })
        .await;
        Dm {
            bot,
            human,
            m,
            room,
            cursor,
        }
    }

    fn chat(&self) -> ChatRef {
        ChatRef {
            chat_id: self.room.clone(),
            thread_id: None,
        }
    }
}

#[tokio::test]
async fn the_bot_joins_when_invited_and_a_text_message_is_polled_as_an_event() {
    let mut dm = Dm::open().await;
    let sent = dm.human.send_text(&dm.room, "hello bot").await;
    let events = poll_until(&dm.m, &mut dm.cursor, "the message", |ev| {
        has_key(ev, &sent)
    })
    .await;
    let ev = events.iter().find(|e| e.key == sent).unwrap();
    assert_eq!(ev.chat, dm.chat());
    assert_eq!(ev.user.id, dm.human.user_id);
    // Synapse gives a new user their localpart as display name.
    let localpart = dm.human.user_id[1..].split(':').next().unwrap();
    assert_eq!(ev.user.name, localpart);
    assert_eq!(
        ev.kind,
        EventKind::Message {
            message_id: sent.clone(),
            text: "hello bot".into(),
            files: vec![],
            reply_to: None,
        }
    );
    assert_eq!(dm.m.platform(), "matrix");
}

#[tokio::test]
async fn an_old_cursor_delivers_again_and_the_new_one_does_not() {
    let mut dm = Dm::open().await;
    let before = dm.cursor.clone();
    let one = dm.human.send_text(&dm.room, "one").await;
    poll_until(&dm.m, &mut dm.cursor, "one", |ev| has_key(ev, &one)).await;
    let after = dm.cursor.clone();

    // Nothing was committed: polling from the old cursor gives the message again.
    let again = poll_until(&dm.m, &mut before.clone(), "one, again", |ev| {
        has_key(ev, &one)
    })
    .await;
    assert_eq!(again.iter().filter(|e| e.key == one).count(), 1);

    // From the new cursor, only what came later.
    let two = dm.human.send_text(&dm.room, "two").await;
    let mut cursor = after;
    let later = poll_until(&dm.m, &mut cursor, "two", |ev| has_key(ev, &two)).await;
    assert!(!has_key(&later, &one), "{later:#?}");
}

#[tokio::test]
async fn messages_before_the_first_start_are_not_replayed() {
    let server = Synapse::shared();
    let bot = server.new_user("bot").await;
    let human = server.new_user("alice").await;
    let room = human.create_room(&[&bot.user_id]).await;
    bot.join(&room).await;
    let early = human.send_text(&room, "before the bot ever ran").await;
    let m = adapter(server, &bot);
    let first = poll(&m, None).await;
    assert!(first.events.is_empty(), "{first:?}");
    let mut cursor = first.next_cursor.unwrap();
    let late = human.send_text(&room, "after").await;
    let events = poll_until(&m, &mut cursor, "the later message", |ev| {
        has_key(ev, &late)
    })
    .await;
    assert!(!has_key(&events, &early), "{events:#?}");
}

#[tokio::test]
async fn replies_threads_and_reactions_are_mapped() {
    let mut dm = Dm::open().await;
    let root = dm.human.send_text(&dm.room, "the root").await;
    let reply = dm.human.send_reply(&dm.room, &root, "approve").await;
    let reaction = dm.human.send_reaction(&dm.room, &root, "✅").await;
    let in_thread = dm
        .human
        .send_in_thread(&dm.room, &root, "in a thread")
        .await;
    let events = poll_until(&dm.m, &mut dm.cursor, "the four events", |ev| {
        [&root, &reply, &reaction, &in_thread]
            .iter()
            .all(|k| has_key(ev, k))
    })
    .await;
    let get = |k: &str| events.iter().find(|e| e.key == k).unwrap().clone();

    let r = get(&reply);
    assert_eq!(text_of(&r), "approve");
    assert!(
        matches!(&r.kind, EventKind::Message { reply_to: Some(to), .. } if *to == root),
        "{r:?}"
    );
    assert_eq!(r.chat.thread_id, None);

    assert_eq!(
        get(&reaction).kind,
        EventKind::Reaction {
            message_id: root.clone(),
            key: "✅".into()
        }
    );

    let t = get(&in_thread);
    assert_eq!(t.chat.thread_id.as_deref(), Some(root.as_str()));
    assert!(
        matches!(&t.kind, EventKind::Message { reply_to: None, .. }),
        "a thread's fallback reply is not a reply: {t:?}"
    );
}

#[tokio::test]
async fn a_sent_message_has_formatting_and_its_buttons_as_text_and_can_be_edited() {
    let mut dm = Dm::open().await;
    let asked = dm.human.send_text(&dm.room, "run ls?").await;
    let msg = OutMessage {
        markdown: "Run `ls`?".into(),
        buttons: vec![vec![
            Button {
                label: "Approve".into(),
                data: "signed-a".into(),
                reaction: Some("✅".into()),
            },
            Button {
                label: "Reject".into(),
                data: "signed-r".into(),
                reaction: Some("❌".into()),
            },
        ]],
        reply_to: Some(asked.clone()),
    };
    let id = dm.m.send(&dm.chat(), &msg).await.unwrap();
    let got = dm
        .human
        .wait_for_message(&dm.room, &dm.bot.user_id, |m| m.event_id == id)
        .await;
    let body = got.body();
    assert!(body.starts_with("Run ls?"), "plain text, no markup: {body}");
    assert!(
        body.contains(
            "React ✅ Approve · ❌ Reject, or reply to this message with approve / reject"
        ),
        "{body}"
    );
    assert_eq!(got.content["format"], "org.matrix.custom.html");
    assert!(
        got.content["formatted_body"]
            .as_str()
            .unwrap()
            .contains("✅ Approve"),
        "{}",
        got.content
    );
    assert_eq!(
        got.content["m.relates_to"]["m.in_reply_to"]["event_id"],
        asked.as_str()
    );

    dm.m.edit(
        &dm.chat(),
        &id,
        &OutMessage {
            markdown: "Approved by alice.".into(),
            ..OutMessage::default()
        },
    )
    .await
    .unwrap();
    let edit = dm
        .human
        .wait_for_message(&dm.room, &dm.bot.user_id, |m| {
            m.content["m.relates_to"]["rel_type"] == "m.replace"
        })
        .await;
    assert_eq!(edit.content["m.relates_to"]["event_id"], id.as_str());
    assert_eq!(edit.content["m.new_content"]["body"], "Approved by alice.");

    // The bot's own messages never come back as events.
    let last = dm.human.send_text(&dm.room, "thanks").await;
    let events = poll_until(&dm.m, &mut dm.cursor, "thanks", |ev| has_key(ev, &last)).await;
    assert!(
        events.iter().all(|e| e.user.id != dm.bot.user_id),
        "{events:#?}"
    );
}

#[tokio::test]
async fn the_same_text_sent_twice_on_purpose_lands_twice_and_threads_are_kept() {
    let dm = Dm::open().await;
    let root = dm.human.send_text(&dm.room, "a thread").await;
    let chat = ChatRef {
        chat_id: dm.room.clone(),
        thread_id: Some(root.clone()),
    };
    let msg = OutMessage {
        markdown: "Done.".into(),
        ..OutMessage::default()
    };
    let a = dm.m.send(&chat, &msg).await.unwrap();
    let b = dm.m.send(&chat, &msg).await.unwrap();
    assert_ne!(a, b);
    let all = dm.human.messages(&dm.room).await;
    let done: Vec<_> = all
        .iter()
        .filter(|m| m.sender == dm.bot.user_id && m.body() == "Done.")
        .collect();
    assert_eq!(done.len(), 2, "{all:#?}");
    for m in done {
        assert_eq!(m.content["m.relates_to"]["rel_type"], "m.thread");
        assert_eq!(m.content["m.relates_to"]["event_id"], root.as_str());
    }
}

#[tokio::test]
async fn typing_is_shown_to_the_room() {
    let dm = Dm::open().await;
    let since = dm.human.sync(None, 0).await["next_batch"]
        .as_str()
        .unwrap()
        .to_owned();
    dm.m.typing(&dm.chat()).await.unwrap();
    let bot = Value::String(dm.bot.user_id.clone());
    wait_until(PATIENCE, Duration::from_millis(10), async || {
        // A long poll: it answers as soon as the typing notification is there.
        let sync = dm.human.sync(Some(&since), 5000).await;
        let typing = sync["rooms"]["join"][&dm.room]["ephemeral"]["events"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["type"] == "m.typing")
            .flat_map(|e| {
                e["content"]["user_ids"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .any(|u| u == bot);
        typing
            .then_some(())
            .ok_or_else(|| format!("waiting for the bot's typing notification; saw {sync}"))
    })
    .await;
}

#[tokio::test]
async fn files_go_up_and_come_down() {
    let mut dm = Dm::open().await;

    // Out: the bot's file, as the human downloads it.
    let bytes = b"a report\nwith two lines\n".to_vec();
    let id =
        dm.m.send_file(
            &dm.chat(),
            &OutFile {
                name: "report.txt".into(),
                bytes: bytes.clone(),
                mime_type: Some("text/plain".into()),
                is_image: false,
                caption: Some("the report".into()),
            },
        )
        .await
        .unwrap();
    let got = dm
        .human
        .wait_for_message(&dm.room, &dm.bot.user_id, |m| m.event_id == id)
        .await;
    assert_eq!(got.content["msgtype"], "m.file");
    assert_eq!(got.content["filename"], "report.txt");
    assert_eq!(got.body(), "the report");
    let url = got.content["url"].as_str().unwrap();
    assert_eq!(dm.human.download(url).await, bytes);

    // In: the human's image, as the bot polls and downloads it.
    let png = vec![0x89, b'P', b'N', b'G', 1, 2, 3, 4, 5, 6, 7, 8];
    let mxc = dm.human.upload("cat.png", "image/png", png.clone()).await;
    let sent = dm
        .human
        .send_event(
            &dm.room,
            "m.room.message",
            serde_json::json!({
                "msgtype": "m.image", "body": "look at this", "filename": "cat.png",
                "url": mxc, "info": { "mimetype": "image/png", "size": png.len() },
            }),
        )
        .await;
    let events = poll_until(&dm.m, &mut dm.cursor, "the image", |ev| has_key(ev, &sent)).await;
    let ev = events.iter().find(|e| e.key == sent).unwrap();
    let EventKind::Message { text, files, .. } = &ev.kind else {
        panic!("{ev:?}")
    };
    assert_eq!(text, "look at this");
    assert_eq!(
        files,
        &vec![FileRef {
            id: mxc.clone(),
            name: Some("cat.png".into()),
            mime_type: Some("image/png".into()),
            is_image: true,
            size: Some(png.len() as u64),
        }]
    );
    assert_eq!(dm.m.download(&files[0], 1024).await.unwrap(), png);
    let too_big = dm.m.download(&files[0], 4).await.unwrap_err();
    assert!(matches!(too_big, PlatformError::Rejected(_)), "{too_big:?}");
}

#[tokio::test]
async fn a_bad_token_is_unauthorized_and_never_named_in_the_error() {
    let server = Synapse::shared();
    let token = "syt_not_a_real_token_tern_test";
    let m = Matrix::new(MatrixSettings::new(
        server.url(),
        "@nobody:localhost",
        token,
    ))
    .unwrap();
    let err = m.poll(None, &CancellationToken::new()).await.unwrap_err();
    assert!(matches!(err, PlatformError::Unauthorized(_)), "{err:?}");
    assert!(!err.to_string().contains(token), "{err}");
    let err = m
        .send(
            &ChatRef {
                chat_id: "!nowhere:localhost".into(),
                thread_id: None,
            },
            &OutMessage {
                markdown: "hi".into(),
                ..OutMessage::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, PlatformError::Unauthorized(_)), "{err:?}");
}

#[tokio::test]
async fn a_cancelled_poll_ends_with_cancelled() {
    let dm = Dm::open().await;
    let cancel = CancellationToken::new();
    cancel.cancel();
    let err = dm.m.poll(Some(&dm.cursor), &cancel).await.unwrap_err();
    assert!(matches!(err, PlatformError::Cancelled), "{err:?}");
}

#[tokio::test]
async fn a_rate_limited_send_is_retry_after() {
    // Synapse's own limits (a burst of 10 messages): a private server.
    let server = Synapse::start(Options {
        default_rate_limits: true,
    });
    let bot = server.new_user("bot").await;
    let human = server.new_user("alice").await;
    let room = human.create_room(&[&bot.user_id]).await;
    bot.join(&room).await;
    let m = adapter(&server, &bot);
    let chat = ChatRef {
        chat_id: room,
        thread_id: None,
    };
    let mut limited = None;
    for n in 0..50 {
        let msg = OutMessage {
            markdown: format!("message {n}"),
            ..OutMessage::default()
        };
        match m.send(&chat, &msg).await {
            Ok(_) => {}
            Err(e) => {
                limited = Some(e);
                break;
            }
        }
    }
    let err = limited.expect("50 messages at once were never rate limited");
    assert!(
        matches!(err, PlatformError::RetryAfter(d) if d > Duration::ZERO),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_busy_room_is_not_cut_to_the_last_hundred_events() {
    let mut dm = Dm::open().await;
    // More than one sync timeline holds (100), all sent before the next poll.
    let mut sent = Vec::new();
    for n in 0..130 {
        sent.push(dm.human.send_text(&dm.room, &format!("message {n}")).await);
    }
    let events = poll_until(&dm.m, &mut dm.cursor, "all 130 messages", |ev| {
        sent.iter().all(|k| has_key(ev, k))
    })
    .await;
    let keys: Vec<&str> = events.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, sent, "each once, in order");
}

/// A loopback HTTP proxy in front of Synapse that can lose one answer: the request reaches
/// the server, the client's connection is closed before the answer comes back (a send whose
/// outcome the adapter cannot know). One request per connection (`Connection: close`
/// upstream), enough for reqwest.
struct LossyProxy {
    url: String,
    lose_next_send: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl LossyProxy {
    async fn start(upstream: String) -> LossyProxy {
        use std::sync::atomic::{AtomicBool, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let lose = std::sync::Arc::new(AtomicBool::new(false));
        let lose2 = lose.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let upstream = upstream.clone();
                let lose = lose2.clone();
                tokio::spawn(async move {
                    // The request's head, then its body by Content-Length.
                    let mut buf = Vec::new();
                    let head_end = loop {
                        let mut chunk = [0u8; 4096];
                        let n = client.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
                    let len: usize = head
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    while buf.len() < head_end + len {
                        let mut chunk = [0u8; 4096];
                        let n = client.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    let is_send = head.starts_with("PUT ") && head.contains("/send/");
                    let drop_answer = is_send && lose.swap(false, Ordering::SeqCst);
                    let mut request = head[..head_end - 2].to_owned();
                    request.push_str("Connection: close\r\n\r\n");
                    let mut up = tokio::net::TcpStream::connect(&upstream).await.unwrap();
                    up.write_all(request.as_bytes()).await.unwrap();
                    up.write_all(&buf[head_end..]).await.unwrap();
                    let mut answer = Vec::new();
                    up.read_to_end(&mut answer).await.unwrap();
                    if !drop_answer {
                        let _ = client.write_all(&answer).await;
                    }
                    // Dropped: the client sees the connection close with no answer.
                });
            }
        });
        LossyProxy {
            url,
            lose_next_send: lose,
        }
    }
}

#[tokio::test]
async fn a_send_retried_after_a_lost_answer_is_posted_once() {
    let dm = Dm::open().await;
    let proxy = LossyProxy::start(Synapse::shared().url()).await;
    let m = Matrix::new(MatrixSettings::new(
        &proxy.url,
        &dm.bot.user_id,
        &dm.bot.access_token,
    ))
    .unwrap();
    let msg = OutMessage {
        markdown: "only once".into(),
        ..OutMessage::default()
    };
    proxy
        .lose_next_send
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let lost = m.send(&dm.chat(), &msg).await.unwrap_err();
    assert!(matches!(lost, PlatformError::Unavailable(_)), "{lost:?}");
    // The server did post it; the retry gets that event back instead of a second one.
    let first = dm
        .human
        .wait_for_message(&dm.room, &dm.bot.user_id, |m| m.body() == "only once")
        .await;
    let retried = m.send(&dm.chat(), &msg).await.unwrap();
    assert_eq!(retried, first.event_id);
    // Sent again on purpose after that success: a second message.
    let again = m.send(&dm.chat(), &msg).await.unwrap();
    assert_ne!(again, first.event_id);
    let copies: Vec<String> = dm
        .human
        .messages(&dm.room)
        .await
        .into_iter()
        .filter(|m| m.sender == dm.bot.user_id && m.body() == "only once")
        .map(|m| m.event_id)
        .collect();
    assert_eq!(copies, vec![first.event_id.clone(), again]);
}
