//! Waits against a real SQLite store: the transcript a crash left mid-turn is repaired by
//! the delivery, and the session's status follows its open waits.

use tern_llm::FunctionCall;

use super::*;
use crate::{NewSession, SessionStatus};

async fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("tern.db")).await.unwrap();
    (dir, s)
}

async fn session(s: &Store) -> String {
    s.create_session(NewSession {
        source: "api".into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .id
}

async fn wait(s: &Store, session: &str, call: &str) -> Wait {
    let (w, _) = s
        .create_wait(&NewWait {
            session_id: session,
            idem_key: &format!("tern-wait:{session}:{call}"),
            tool_call_id: Some(call),
            kind: WaitKind::Approval,
            request: r#"{"kind":"approval","summary":"Deploy"}"#,
        })
        .await
        .unwrap();
    s.set_wait_request(&w.id, &format!("req_{call}"))
        .await
        .unwrap();
    w
}

fn call(id: &str, name: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        kind: "function".into(),
        function: FunctionCall {
            name: name.into(),
            arguments: "{}".into(),
        },
    }
}

fn assistant_calling(calls: Vec<ToolCall>) -> NewMessage {
    NewMessage {
        role: Some(Role::Assistant),
        tool_calls: calls,
        ..Default::default()
    }
}

async fn status(s: &Store, session: &str) -> SessionStatus {
    s.session(session).await.unwrap().status
}

#[tokio::test]
async fn a_delivery_after_a_crash_mid_turn_answers_the_open_tool_calls_first() {
    let (_d, s) = store().await;
    let sid = session(&s).await;
    // The turn that asked: the model called the request tool and another tool; the gateway
    // died after the request was created, before either result was stored.
    s.append_messages(
        &sid,
        &[
            NewMessage::new(Role::User, "deploy it"),
            assistant_calling(vec![
                call("call_req", "request_approval"),
                call("call_ls", "terminal"),
            ]),
        ],
    )
    .await
    .unwrap();
    let w = wait(&s, &sid, "call_req").await;
    s.wait_ready(&w.id, r#"{"outcome":{"type":"APPROVE"}}"#, Some("alice"))
        .await
        .unwrap()
        .unwrap();
    let decision = s
        .deliver_wait(&w.id, &NewMessage::new(Role::User, "[inbox decision] yes"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(decision.session_id, sid);

    let msgs = s.messages(&sid).await.unwrap();
    let tail: Vec<(Role, Option<&str>)> = msgs[2..]
        .iter()
        .map(|m| (m.role, m.tool_call_id.as_deref()))
        .collect();
    assert_eq!(
        tail,
        [
            (Role::Tool, Some("call_req")),
            (Role::Tool, Some("call_ls")),
            (Role::Assistant, None),
            (Role::User, None),
        ]
    );
    let own: serde_json::Value = serde_json::from_str(msgs[2].content.as_deref().unwrap()).unwrap();
    assert_eq!(own["requestId"], "req_call_req");
    assert_eq!(own["status"], "decided");
    assert_eq!(msgs[2].tool_name.as_deref(), Some("request_approval"));
    assert!(msgs[3].content.as_deref().unwrap().contains("interrupted"));
    assert_eq!(msgs[4].content.as_deref(), Some(INTERRUPTED_MARKER));
    assert_eq!(msgs[5].id, decision.id);
    assert_eq!(
        s.wait(&w.id).await.unwrap().unwrap().message_id,
        Some(decision.id)
    );
}

/// A model that sends `call_1` every turn: a decision for the wait an earlier message's
/// `call_1` asked (`…:call_1@2`) does not pass for the result of a later, open `call_1`.
#[tokio::test]
async fn a_delivery_does_not_answer_a_later_call_that_reuses_the_waits_call_id() {
    let (_d, s) = store().await;
    let sid = session(&s).await;
    let asked = s
        .append_messages(
            &sid,
            &[
                NewMessage::new(Role::User, "deploy it"),
                assistant_calling(vec![call("call_1", "request_approval")]),
            ],
        )
        .await
        .unwrap();
    let (w, _) = s
        .create_wait(&NewWait {
            session_id: &sid,
            idem_key: &format!("tern-wait:{sid}:call_1@{}", asked[1].seq),
            tool_call_id: Some("call_1"),
            kind: WaitKind::Approval,
            request: r#"{"kind":"approval","summary":"Deploy"}"#,
        })
        .await
        .unwrap();
    assert_eq!(w.call_seq(), Some(asked[1].seq));
    s.append_messages(
        &sid,
        &[
            NewMessage::tool_result("call_1", "request_approval", "{}"),
            NewMessage::new(Role::User, "meanwhile, list the files"),
            assistant_calling(vec![call("call_1", "terminal")]),
        ],
    )
    .await
    .unwrap();
    s.wait_ready(&w.id, r#"{"outcome":{"type":"APPROVE"}}"#, Some("alice"))
        .await
        .unwrap()
        .unwrap();
    s.deliver_wait(&w.id, &NewMessage::new(Role::User, "[inbox decision] yes"))
        .await
        .unwrap()
        .unwrap();
    let msgs = s.messages(&sid).await.unwrap();
    let repaired = &msgs[msgs.len() - 3];
    assert_eq!(repaired.tool_call_id.as_deref(), Some("call_1"));
    assert_eq!(repaired.tool_name.as_deref(), Some("terminal"));
    let content = repaired.content.as_deref().unwrap();
    assert!(
        content.contains("interrupted") && !content.contains("decided"),
        "{content}"
    );
}

#[tokio::test]
async fn a_delivery_after_a_complete_turn_appends_only_the_decision() {
    let (_d, s) = store().await;
    let sid = session(&s).await;
    s.append_messages(
        &sid,
        &[
            NewMessage::new(Role::User, "deploy it"),
            assistant_calling(vec![call("call_req", "request_approval")]),
            NewMessage::tool_result("call_req", "request_approval", "{}"),
            NewMessage::new(Role::Assistant, "asked; waiting"),
        ],
    )
    .await
    .unwrap();
    let w = wait(&s, &sid, "call_req").await;
    s.wait_ready(&w.id, "{}", None).await.unwrap().unwrap();
    s.deliver_wait(&w.id, &NewMessage::new(Role::User, "[inbox decision]"))
        .await
        .unwrap()
        .unwrap();
    let msgs = s.messages(&sid).await.unwrap();
    assert_eq!(msgs.len(), 5);
    assert_eq!(msgs[4].content.as_deref(), Some("[inbox decision]"));
}

#[tokio::test]
async fn the_status_follows_the_open_waits_when_waits_end_outside_a_turn() {
    let (_d, s) = store().await;
    let sid = session(&s).await;
    let a = wait(&s, &sid, "call_a").await;
    let b = wait(&s, &sid, "call_b").await;
    s.set_status(&sid, SessionStatus::Waiting).await.unwrap();
    // One of two withdrawn: still waiting.
    s.cancel_wait(&a.id).await.unwrap().unwrap();
    assert_eq!(status(&s, &sid).await, SessionStatus::Waiting);
    // The last one: idle.
    s.cancel_wait(&b.id).await.unwrap().unwrap();
    assert_eq!(status(&s, &sid).await, SessionStatus::Idle);

    // A running turn keeps its status (it sets it when it ends); cancel_waits as well.
    let sid2 = session(&s).await;
    wait(&s, &sid2, "call_c").await;
    s.set_status(&sid2, SessionStatus::Running).await.unwrap();
    s.cancel_waits(&sid2).await.unwrap();
    assert_eq!(status(&s, &sid2).await, SessionStatus::Running);
    let sid3 = session(&s).await;
    wait(&s, &sid3, "call_d").await;
    s.set_status(&sid3, SessionStatus::Waiting).await.unwrap();
    s.cancel_waits(&sid3).await.unwrap();
    assert_eq!(status(&s, &sid3).await, SessionStatus::Idle);
}

#[tokio::test]
async fn reset_running_leaves_sessions_with_open_waits_waiting() {
    let (_d, s) = store().await;
    let asked = session(&s).await;
    wait(&s, &asked, "call_a").await;
    s.set_status(&asked, SessionStatus::Running).await.unwrap();
    let plain = session(&s).await;
    s.set_status(&plain, SessionStatus::Running).await.unwrap();
    let stale = session(&s).await;
    s.set_status(&stale, SessionStatus::Waiting).await.unwrap();
    let still = session(&s).await;
    wait(&s, &still, "call_b").await;
    s.set_status(&still, SessionStatus::Waiting).await.unwrap();

    assert_eq!(s.reset_running().await.unwrap(), 3);
    assert_eq!(status(&s, &asked).await, SessionStatus::Waiting);
    assert_eq!(status(&s, &plain).await, SessionStatus::Idle);
    assert_eq!(status(&s, &stale).await, SessionStatus::Idle);
    assert_eq!(status(&s, &still).await, SessionStatus::Waiting);
}

/// At the gateway's start, every transcript a dead process left mid-turn is valid again
/// before anyone reads it: each open call gets a result (the one that asked a human is told
/// its request stands), then the marker; `tern chat`'s sessions and valid transcripts are
/// left alone.
#[tokio::test]
async fn transcripts_left_running_mid_turn_are_repaired_at_start() {
    let (_d, s) = store().await;
    let asked = session(&s).await;
    s.append_messages(
        &asked,
        &[
            NewMessage::new(Role::User, "deploy it"),
            assistant_calling(vec![
                call("call_ls", "terminal"),
                call("call_req", "request_approval"),
                call("call_done", "read_file"),
            ]),
            NewMessage::tool_result("call_done", "read_file", "contents"),
        ],
    )
    .await
    .unwrap();
    let w = wait(&s, &asked, "call_req").await;
    let cli = s
        .create_session(NewSession {
            source: "cli".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    s.append_messages(&cli, &[assistant_calling(vec![call("c", "terminal")])])
        .await
        .unwrap();
    let valid = session(&s).await;
    s.append_messages(&valid, &[NewMessage::new(Role::User, "hi")])
        .await
        .unwrap();
    let idle = session(&s).await;
    s.append_messages(&idle, &[assistant_calling(vec![call("c", "terminal")])])
        .await
        .unwrap();
    for id in [&asked, &cli, &valid] {
        s.set_status(id, SessionStatus::Running).await.unwrap();
    }

    assert_eq!(
        s.repair_running_transcripts().await.unwrap(),
        vec![asked.clone()]
    );
    let msgs = s.messages(&asked).await.unwrap();
    let tail: Vec<(Role, Option<&str>)> = msgs[3..]
        .iter()
        .map(|m| (m.role, m.tool_call_id.as_deref()))
        .collect();
    assert_eq!(
        tail,
        [
            (Role::Tool, Some("call_ls")),
            (Role::Tool, Some("call_req")),
            (Role::Assistant, None),
        ]
    );
    assert!(msgs[3].content.as_deref().unwrap().contains("interrupted"));
    let own: serde_json::Value = serde_json::from_str(msgs[4].content.as_deref().unwrap()).unwrap();
    assert_eq!(
        (own["requestId"].as_str(), own["status"].as_str()),
        (Some("req_call_req"), Some("pending"))
    );
    assert_eq!(msgs[4].tool_name.as_deref(), Some("request_approval"));
    assert_eq!(msgs[5].content.as_deref(), Some(INTERRUPTED_MARKER));
    assert_eq!(s.messages(&cli).await.unwrap().len(), 1, "tern chat's own");
    assert_eq!(s.messages(&valid).await.unwrap().len(), 1);
    assert_eq!(
        s.messages(&idle).await.unwrap().len(),
        1,
        "not left running"
    );
    // Once is enough: a second start finds nothing to repair.
    assert!(s.repair_running_transcripts().await.unwrap().is_empty());
    s.reset_running().await.unwrap();
    assert_eq!(status(&s, &asked).await, SessionStatus::Waiting);
    // The decision, when it comes, follows the repaired transcript without a second repair.
    s.wait_ready(&w.id, r#"{"outcome":{"type":"APPROVE"}}"#, Some("alice"))
        .await
        .unwrap()
        .unwrap();
    let decision = s
        .deliver_wait(&w.id, &NewMessage::new(Role::User, "[inbox decision] yes"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(decision.seq, msgs[5].seq + 1);
}

#[tokio::test]
async fn a_moved_wait_keeps_its_origin_session_and_the_successor_waits() {
    let (_d, s) = store().await;
    let old = session(&s).await;
    let next = session(&s).await;
    let w = wait(&s, &old, "call_a").await;
    assert_eq!(s.move_open_waits(&old, &next).await.unwrap(), 1);
    let moved = s.wait(&w.id).await.unwrap().unwrap();
    assert_eq!(moved.session_id, next);
    assert_eq!(moved.origin_session(), old);
    assert_eq!(status(&s, &next).await, SessionStatus::Waiting);
    // A key of another form: the current session.
    let other = Wait {
        idem_key: "custom".into(),
        ..moved
    };
    assert_eq!(other.origin_session(), next);
}

#[tokio::test]
async fn process_waits_do_not_make_the_session_waiting_but_are_delivered_once() {
    let (_d, s) = store().await;
    let sess = session(&s).await;
    let (w, new) = s
        .create_wait(&NewWait {
            session_id: &sess,
            idem_key: "tern-proc:proc_1:exit",
            tool_call_id: Some("call_1"),
            kind: WaitKind::Process,
            request: r#"{"process_id":"proc_1","command":"true"}"#,
        })
        .await
        .unwrap();
    assert!(new);
    assert_eq!(w.kind, WaitKind::Process);
    assert!(!s.has_open_waits(&sess).await.unwrap());
    s.refresh_waiting(&sess).await.unwrap();
    assert_eq!(status(&s, &sess).await, SessionStatus::Idle);
    assert_eq!(
        s.wait_by_key("tern-proc:proc_1:exit")
            .await
            .unwrap()
            .unwrap()
            .id,
        w.id
    );
    s.wait_ready(&w.id, r#"{"exit_code":0}"#, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status(&s, &sess).await, SessionStatus::Idle);
    let msg = NewMessage::new(Role::User, "[process exited]");
    assert!(s.deliver_wait(&w.id, &msg).await.unwrap().is_some());
    assert!(s.deliver_wait(&w.id, &msg).await.unwrap().is_none());
    assert_eq!(s.messages(&sess).await.unwrap().len(), 1);
}

/// Migration 0011 rebuilds `waits` (to allow kind `process`): a database migrated up to 0010
/// keeps its waits of every kind and every status, and the indexes come back.
#[tokio::test]
async fn the_process_kind_migration_keeps_existing_waits() {
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
    use std::borrow::Cow;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tern.db");
    {
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(
                SqliteConnectOptions::new()
                    .filename(&path)
                    .create_if_missing(true),
            )
            .await
            .unwrap();
        let old = sqlx::migrate::Migrator {
            migrations: Cow::Owned(
                crate::MIGRATOR
                    .iter()
                    .filter(|m| m.version <= 10)
                    .cloned()
                    .collect(),
            ),
            ..sqlx::migrate::Migrator::DEFAULT
        };
        old.run(&pool).await.unwrap();
        for (i, (kind, status)) in [
            ("approval", "pending"),
            ("elicitation", "ready"),
            ("command", "delivered"),
            ("approval", "cancelled"),
        ]
        .into_iter()
        .enumerate()
        {
            sqlx::query(
                "INSERT INTO waits (id, session_id, idem_key, tool_call_id, kind, request_id, \
                 request, status, result, attempts, created_at) \
                 VALUES (?, 's1', ?, 'c', ?, ?, '{}', ?, '{\"x\":1}', 2, ?)",
            )
            .bind(format!("w{i}"))
            .bind(format!("k{i}"))
            .bind(kind)
            .bind(format!("req{i}"))
            .bind(status)
            .bind(i as i64)
            .execute(&pool)
            .await
            .unwrap();
        }
        let refused = sqlx::query(
            "INSERT INTO waits (id, session_id, idem_key, kind, request, status, created_at) \
             VALUES ('p', 's1', 'kp', 'process', '{}', 'pending', 9)",
        )
        .execute(&pool)
        .await;
        assert!(refused.is_err(), "0008 refuses kind process");
        pool.close().await;
    }
    let s = Store::open(&path).await.unwrap();
    let all = s.session_waits("s1", false).await.unwrap();
    let got: Vec<_> = all
        .iter()
        .map(|w| (w.id.as_str(), w.kind, w.status, w.attempts))
        .collect();
    assert_eq!(
        got,
        vec![
            ("w0", WaitKind::Approval, WaitStatus::Pending, 2),
            ("w1", WaitKind::Elicitation, WaitStatus::Ready, 2),
            ("w2", WaitKind::Command, WaitStatus::Delivered, 2),
            ("w3", WaitKind::Approval, WaitStatus::Cancelled, 2),
        ]
    );
    assert_eq!(s.wait_by_request("req2").await.unwrap().unwrap().id, "w2");
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'waits' \
         AND name NOT LIKE 'sqlite_autoindex%' ORDER BY name",
    )
    .fetch_all(&s.pool)
    .await
    .unwrap();
    assert_eq!(
        indexes,
        ["waits_by_request", "waits_by_session", "waits_by_status"]
    );
    // The partial unique index on request_id holds again.
    let dup = sqlx::query(
        "INSERT INTO waits (id, session_id, idem_key, kind, request_id, request, status, \
         created_at) VALUES ('d', 's1', 'kd', 'approval', 'req0', '{}', 'pending', 9)",
    )
    .execute(&s.pool)
    .await;
    assert!(dup.is_err());
    let (w, _) = s
        .create_wait(&NewWait {
            session_id: "s1",
            idem_key: "tern-proc:proc_x:exit",
            tool_call_id: None,
            kind: WaitKind::Process,
            request: "{}",
        })
        .await
        .unwrap();
    assert_eq!(w.kind, WaitKind::Process);
}
