//! A Telegram channel across `kill -9`: real `tern gateway` processes on one home, the fake
//! Bot API and the fake model in the test. Three users keep sending numbered messages while
//! the gateway is killed at several moments — while two chats' model replies are held (their
//! turns running, another message queued behind one), right after updates were sent, while a
//! poll is held, while an answer is stored but not yet delivered, and at moments that fall
//! where they may (once a round is recorded, once its first turn asked the model) — and
//! restarted on the same home each time. At the end every message is in the store exactly once, the model
//! was asked about each at most once, every chat got the answer to each message whose turn
//! was not cut short (and the cut-short notice otherwise), and Telegram has no unconfirmed
//! update left.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use tern_fake_model::{Gate, Reply};
use tern_store::Store;
use tern_test_support::telegram::{FakeTelegram, Fault, Sent};
use tern_test_support::{PATIENCE, Running};

use crate::common::{Env, content, last_message};

/// The users, each in their private chat (a private chat's id is the user's).
const USERS: [i64; 3] = [111, 222, 333];
/// Those whose replies are held while the gateway is killed.
const HELD_USERS: [i64; 2] = [111, 333];
/// What the model answers to `X`: `ANSWER X`.
const ANSWER: &str = "answer to";
const CUT_SHORT: &str = "cut short";

fn text_of(s: &Sent) -> String {
    s.text.clone().unwrap_or_default()
}

/// The conversation so far: each chat's messages, in the order sent.
#[derive(Default)]
struct Conversation {
    by_chat: BTreeMap<i64, Vec<String>>,
}

impl Conversation {
    fn send(&mut self, tg: &FakeTelegram, user: i64, text: String) {
        tg.user_sends(user, user, &text);
        self.by_chat.entry(user).or_default().push(text);
    }

    /// One numbered message from every user.
    fn round(&mut self, tg: &FakeTelegram, round: &str) {
        for u in USERS {
            self.send(tg, u, format!("u{u} {round}"));
        }
    }

    fn all(&self) -> impl Iterator<Item = (i64, &String)> + '_ {
        self.by_chat
            .iter()
            .flat_map(|(c, ms)| ms.iter().map(move |m| (*c, m)))
    }
}

fn answered(tg: &FakeTelegram, chat: i64, text: &str) -> bool {
    let want = format!("{ANSWER} {text}");
    tg.sent()
        .iter()
        .any(|m| m.chat_id == chat && text_of(m) == want)
}

/// Waits until every message sent that `which` picks is answered.
async fn until_answered(tg: &FakeTelegram, conv: &Conversation, which: impl Fn(&String) -> bool) {
    tern_test_support::eventually("the messages answered", async || {
        conv.all()
            .filter(|(_, t)| which(t))
            .all(|(c, t)| answered(tg, c, t))
            .then_some(())
    })
    .await;
}

fn start(e: &Env) -> Running {
    // Starting blocks until the child listens; the fakes run on the runtime's other worker.
    tokio::task::block_in_place(|| e.gateway())
}

/// `kill -9`: no drain, no shutdown, the store left as the instant found it.
fn kill9(mut gw: Running) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(gw.child.id()).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let status = gw.child.wait().unwrap();
    assert!(
        !status.success(),
        "the gateway ended on its own: {status:?}"
    );
}

/// How many model requests asked about `text` (it was the newest message of the request).
fn asked(e: &Env, text: &str) -> usize {
    e.fake()
        .requests()
        .iter()
        .filter(|r| {
            let last = last_message(&r.body);
            last["role"] == "user" && content(&last) == text
        })
        .count()
}

/// The store as the killed gateway left it: each chat session's user messages, and whether
/// the answer to it follows it (`false`: its turn was cut short).
async fn stored(e: &Env) -> Vec<(String, bool)> {
    let store = Store::open_read_only(&e.home().join("tern.db"))
        .await
        .unwrap();
    let sessions = store.list_sessions(100, 0).await.unwrap();
    assert_eq!(
        sessions.len(),
        USERS.len(),
        "one session per chat: {sessions:?}"
    );
    let mut out = Vec::new();
    for s in &sessions {
        assert_eq!(s.source, "telegram");
        let msgs = store.messages_all(&s.id).await.unwrap();
        for (i, m) in msgs.iter().enumerate() {
            if m.role.as_str() != "user" {
                continue;
            }
            let text = m.content.clone().unwrap_or_default();
            let answer = format!("{ANSWER} {text}");
            let answered = msgs.get(i + 1).is_some_and(|n| {
                n.role.as_str() == "assistant" && n.content.as_deref() == Some(answer.as_str())
            });
            out.push((text, answered));
        }
    }
    store.close().await;
    out
}

/// Whether the answer to `text` is in the store (read while a gateway runs).
async fn answer_stored(db: &Path, text: &str) -> bool {
    let Ok(store) = Store::open_read_only(db).await else {
        return false;
    };
    let want = format!("{ANSWER} {text}");
    let mut found = false;
    for s in store.list_sessions(100, 0).await.unwrap_or_default() {
        let msgs = store.messages_all(&s.id).await.unwrap_or_default();
        found |= msgs
            .iter()
            .any(|m| m.role.as_str() == "assistant" && m.content.as_deref() == Some(&want));
    }
    store.close().await;
    found
}

/// Kills the gateway and adds the messages whose turns it cut short to `cut`.
async fn kill_and_note(e: &Env, gw: Running, cut: &mut BTreeSet<String>) {
    kill9(gw);
    cut.extend(
        stored(e)
            .await
            .into_iter()
            .filter(|(_, answered)| !answered)
            .map(|(t, _)| t),
    );
}

fn cut_notices(tg: &FakeTelegram, chat: i64) -> usize {
    tg.sent()
        .iter()
        .filter(|m| m.chat_id == chat && text_of(m).contains(CUT_SHORT))
        .count()
}

/// Waits until every message sent is settled: answered, or cut short and its chat told so.
/// A failure names the messages still unanswered.
async fn until_settled(tg: &FakeTelegram, conv: &Conversation, cut: &BTreeSet<String>) {
    tern_test_support::wait_until(PATIENCE, Duration::from_millis(20), async || {
        let missing: Vec<&String> = conv
            .all()
            .filter(|(c, t)| !cut.contains(*t) && !answered(tg, *c, t))
            .map(|(_, t)| t)
            .collect();
        let untold: Vec<i64> = USERS
            .into_iter()
            .filter(|c| {
                let n = conv
                    .all()
                    .filter(|(chat, t)| chat == c && cut.contains(*t))
                    .count();
                cut_notices(tg, *c) < n
            })
            .collect();
        if missing.is_empty() && untold.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "unanswered: {missing:?}; chats not told of a cut-short turn: {untold:?}"
            ))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_conversation_neither_repeats_nor_loses_a_message() {
    let e = Env::with_model().await;
    let tg = FakeTelegram::start().await;
    let allowed = USERS.map(|u| u.to_string()).join(", ");
    e.config(&format!(
        "[[channels.telegram]]\ntoken = \"{}\"\napi_url = \"{}\"\nallowed_users = [{allowed}]\n\
         progress = \"off\"\npoll_timeout = \"30s\"\n",
        tg.token(),
        tg.api_url()
    ));
    let gate = Gate::new();
    let holding = gate.clone();
    e.fake().set_responder(move |body| {
        let last = last_message(body);
        let text = content(&last).to_owned();
        let reply = Reply::text(format!("{ANSWER} {text}"));
        if text.contains("hold") {
            reply.held(&holding)
        } else {
            reply
        }
    });
    let mut conv = Conversation::default();
    // Messages whose turn a kill cut short, read from the store after each kill.
    let mut cut = BTreeSet::new();

    // A first exchange, everyone answered.
    let gw = start(&e);
    conv.round(&tg, "m1");
    until_settled(&tg, &conv, &cut).await;

    // 1. While model replies are held: two users' turns are running (their messages
    //    appended), a second message of one of them is queued behind its turn (recorded, not
    //    appended), the third user's message is answered.
    let mut held = BTreeSet::new();
    for u in HELD_USERS {
        let t = format!("u{u} m2 hold");
        conv.send(&tg, u, t.clone());
        held.insert(t);
    }
    tern_test_support::eventually("the held model requests", async || {
        held.iter().all(|t| asked(&e, t) == 1).then_some(())
    })
    .await;
    let queued = format!("u{} m3 queued", HELD_USERS[0]);
    conv.send(&tg, HELD_USERS[0], queued.clone());
    for u in USERS.into_iter().filter(|u| !HELD_USERS.contains(u)) {
        conv.send(&tg, u, format!("u{u} m2"));
    }
    until_answered(&tg, &conv, |t| !held.contains(t) && t != &queued).await;
    // Every update recorded and confirmed: the queued message waits in the store.
    tern_test_support::eventually("every update confirmed", async || {
        (tg.pending_updates() == 0).then_some(())
    })
    .await;
    kill_and_note(&e, gw, &mut cut).await;
    assert_eq!(cut, held, "only the held turns were cut");
    assert!(
        !stored(&e).await.iter().any(|(t, _)| t == &queued),
        "the queued message was appended before its turn"
    );
    // The model's answer comes too late for the dead gateway.
    gate.open();

    // 2. Right after updates were sent: whatever the gateway got to record, nothing more.
    let gw = start(&e);
    until_settled(&tg, &conv, &cut).await;
    conv.round(&tg, "m4");
    kill_and_note(&e, gw, &mut cut).await;

    // 3. While a poll is held, with nothing left to do; messages arrive while it is down.
    let gw = start(&e);
    until_settled(&tg, &conv, &cut).await;
    tern_test_support::eventually("nothing left unconfirmed", async || {
        (tg.pending_updates() == 0).then_some(())
    })
    .await;
    tg.wait_held_poll().await;
    kill_and_note(&e, gw, &mut cut).await;
    conv.round(&tg, "m5");

    // 4. An answer stored but not yet delivered (Telegram asked to wait): the next gateway
    //    delivers it, once.
    let gw = start(&e);
    until_settled(&tg, &conv, &cut).await;
    tg.fail_next("sendMessage", 1, Fault::TooManyRequests { retry_after: 1 });
    let undelivered = format!("u{} m6 undelivered", USERS[1]);
    conv.send(&tg, USERS[1], undelivered.clone());
    let db = e.home().join("tern.db");
    tern_test_support::eventually("the answer stored", async || {
        answer_stored(&db, &undelivered).await.then_some(())
    })
    .await;
    kill_and_note(&e, gw, &mut cut).await;

    // 5. Kills at moments that fall where they may: right after a round was sent, once it is
    //    recorded, once its first turn asked the model.
    for i in 0..6 {
        let gw = start(&e);
        until_settled(&tg, &conv, &cut).await;
        let asked_before = e.fake().requests().len();
        conv.round(&tg, &format!("m{} r{i}", 7 + i));
        match i % 3 {
            0 => {}
            1 => {
                tern_test_support::eventually("the round recorded", async || {
                    (tg.pending_updates() == 0).then_some(())
                })
                .await;
            }
            _ => {
                tern_test_support::eventually("a turn of the round", async || {
                    (e.fake().requests().len() > asked_before).then_some(())
                })
                .await;
            }
        }
        kill_and_note(&e, gw, &mut cut).await;
    }

    // The last start: everything sent so far, and a last round, is handled.
    let gw = start(&e);
    conv.round(&tg, "m99");
    until_settled(&tg, &conv, &cut).await;
    tern_test_support::eventually("no unconfirmed update", async || {
        (tg.pending_updates() == 0).then_some(())
    })
    .await;
    kill_and_note(&e, gw, &mut cut).await;

    // The store: each message sent once, as a user message of its chat's session; nothing
    // else.
    let mut in_store: BTreeMap<String, usize> = BTreeMap::new();
    for (t, _) in stored(&e).await {
        *in_store.entry(t).or_default() += 1;
    }
    let sent: BTreeMap<String, usize> = conv.all().map(|(_, t)| (t.clone(), 1)).collect();
    assert_eq!(
        in_store, sent,
        "the store's user messages are not the messages sent, each once"
    );
    // Each turn ran once: the model was asked about each answered message once, about a
    // cut-short one at most once (never again after the restart).
    for (chat, t) in conv.all() {
        let n = asked(&e, t);
        if cut.contains(t) {
            assert!(n <= 1, "the model was asked about {t:?} {n} times");
            assert!(!answered(&tg, chat, t), "the cut-short {t:?} was answered");
        } else {
            assert_eq!(n, 1, "the model was asked about {t:?} {n} times");
            assert!(answered(&tg, chat, t), "{t:?} was not answered");
        }
    }
    let answers = |t: &str| {
        let want = format!("{ANSWER} {t}");
        tg.sent().iter().filter(|m| text_of(m) == want).count()
    };
    assert_eq!(answers(&undelivered), 1, "the undelivered answer, once");
    for u in HELD_USERS {
        assert!(cut_notices(&tg, u) >= 1, "no cut-short notice in chat {u}");
    }
    assert_eq!(tg.pending_updates(), 0);
}
