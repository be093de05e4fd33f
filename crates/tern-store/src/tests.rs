use super::*;

async fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(&dir.path().join("tern.db")).await.unwrap();
    (dir, s)
}

fn new_session(source: &str) -> NewSession {
    NewSession {
        source: source.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn sessions_round_trip_and_order() {
    let (_d, s) = store().await;
    let a = s.create_session(new_session("cli")).await.unwrap();
    assert_eq!(a.status, SessionStatus::Idle);
    let b = s
        .create_session(NewSession {
            id: Some("custom".into()),
            title: Some("B".into()),
            ..new_session("api")
        })
        .await
        .unwrap();
    assert!(matches!(
        s.create_session(NewSession {
            id: Some("custom".into()),
            ..new_session("api")
        })
        .await,
        Err(StoreError::SessionExists(_))
    ));
    tokio::time::sleep(Duration::from_millis(3)).await;
    s.append_message(&a.id, &NewMessage::new(Role::User, "hi"))
        .await
        .unwrap();
    assert_eq!(s.latest_session().await.unwrap().unwrap().id, a.id);
    let list = s.list_sessions(10, 0).await.unwrap();
    assert_eq!(
        list.iter().map(|x| x.id.as_str()).collect::<Vec<_>>(),
        vec![a.id.as_str(), b.id.as_str()]
    );
    s.set_status(&a.id, SessionStatus::Waiting).await.unwrap();
    s.set_title(&a.id, "renamed").await.unwrap();
    let a2 = s.session(&a.id).await.unwrap();
    assert_eq!(a2.status, SessionStatus::Waiting);
    assert_eq!(a2.title.as_deref(), Some("renamed"));
    assert!(matches!(
        s.set_title("nope", "x").await,
        Err(StoreError::SessionNotFound(_))
    ));
}

#[tokio::test]
async fn messages_keep_openai_shape_and_tokens() {
    let (_d, s) = store().await;
    let sess = s.create_session(new_session("cli")).await.unwrap();
    s.append_message(&sess.id, &NewMessage::new(Role::User, "list files"))
        .await
        .unwrap();
    let call = ToolCall::new("c1", "list_dir", r#"{"path":"."}"#);
    s.append_message(
        &sess.id,
        &NewMessage {
            role: Some(Role::Assistant),
            tool_calls: vec![call.clone()],
            reasoning: Some("I should look".into()),
            prompt_tokens: Some(10),
            completion_tokens: Some(5),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    s.append_messages(
        &sess.id,
        &[
            NewMessage::tool_result("c1", "list_dir", r#"{"entries":[]}"#),
            NewMessage::new(Role::Assistant, "empty"),
        ],
    )
    .await
    .unwrap();
    let msgs = s.messages(&sess.id).await.unwrap();
    assert_eq!(
        msgs.iter().map(|m| m.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(msgs[1].tool_calls, vec![call]);
    assert_eq!(msgs[1].content, None);
    assert_eq!(msgs[1].reasoning.as_deref(), Some("I should look"));
    assert_eq!(msgs[2].tool_call_id.as_deref(), Some("c1"));
    assert_eq!(msgs[2].tool_name.as_deref(), Some("list_dir"));
    let req = serde_json::to_value(msgs[1].to_request()).unwrap();
    assert!(
        req.get("reasoning").is_none(),
        "reasoning is never sent back"
    );
    assert_eq!(req["tool_calls"][0]["function"]["name"], "list_dir");
    let sess = s.session(&sess.id).await.unwrap();
    assert_eq!((sess.prompt_tokens, sess.completion_tokens), (10, 5));
}

#[tokio::test]
async fn a_message_with_image_parts_is_stored_whole_and_searched_by_its_text() {
    let (dir, s) = store().await;
    let sess = s.create_session(new_session("cli")).await.unwrap();
    s.append_message(&sess.id, &NewMessage::new(Role::User, "plain words"))
        .await
        .unwrap();
    let parts = vec![
        tern_llm::ContentPart::text("Images from tool call c1 (shot): 1"),
        tern_llm::ContentPart::image_data("image/png", "iVBORw0KGgoAAAA"),
    ];
    s.append_message(
        &sess.id,
        &NewMessage {
            parts: Some(parts.clone()),
            ..NewMessage::new(
                Role::User,
                "Images from tool call c1 (shot): [image: image/png]",
            )
        },
    )
    .await
    .unwrap();
    drop(s);
    // Reopened, as after a restart: the parts come back as they went in, next to a message
    // stored without any.
    let s = Store::open(&dir.path().join("tern.db")).await.unwrap();
    for msgs in [
        s.messages(&sess.id).await.unwrap(),
        s.messages_all(&sess.id).await.unwrap(),
    ] {
        assert_eq!(msgs[0].parts, None);
        assert_eq!(msgs[1].parts.as_ref(), Some(&parts));
        let req = serde_json::to_value(msgs[1].to_request()).unwrap();
        assert_eq!(req["content"][1]["type"], "image_url");
        assert_eq!(
            req["content"][1]["image_url"]["url"],
            "data:image/png;base64,iVBORw0KGgoAAAA"
        );
        assert_eq!(
            serde_json::to_value(msgs[0].to_request()).unwrap()["content"],
            "plain words"
        );
    }
    // The index holds the text, never the image's data.
    assert_eq!(s.search("shot", 10).await.unwrap().len(), 1);
    assert!(s.search("iVBORw0KGgoAAAA", 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn an_elided_image_message_is_sent_as_its_placeholder_without_parts() {
    let (_d, s) = store().await;
    let sess = s.create_session(new_session("cli")).await.unwrap();
    let stored = s
        .append_messages(
            &sess.id,
            &[
                NewMessage::new(Role::User, "the task"),
                NewMessage {
                    parts: Some(vec![
                        tern_llm::ContentPart::text("[image]"),
                        tern_llm::ContentPart::image_data("image/png", "BwcH"),
                    ]),
                    ..NewMessage::new(Role::User, "[image]")
                },
            ],
        )
        .await
        .unwrap();
    s.compact(
        &sess.id,
        &NewCompaction {
            reason: CompactionReason::Auto,
            planned_through_seq: 2,
            planned_after: None,
            elide: vec![Elision {
                message_id: stored[1].id,
                placeholder: "[image] (no longer shown)".into(),
            }],
            summary: None,
            tokens_before: 2000,
            tokens_after: 10,
        },
    )
    .await
    .unwrap();
    let active = s.messages(&sess.id).await.unwrap();
    assert_eq!(
        active[1].content.as_deref(),
        Some("[image] (no longer shown)")
    );
    assert_eq!(
        active[1].parts, None,
        "the model is sent the placeholder alone"
    );
    assert_eq!(active[1].images(), 0);
    let all = s.messages_all(&sess.id).await.unwrap();
    assert_eq!(all[1].images(), 1, "the store keeps the image");
    assert_eq!(
        all[1].model_content.as_deref(),
        Some("[image] (no longer shown)")
    );
}

#[tokio::test]
async fn append_to_missing_session_is_an_error() {
    let (_d, s) = store().await;
    assert!(matches!(
        s.append_message("ghost", &NewMessage::new(Role::User, "x"))
            .await,
        Err(StoreError::SessionNotFound(_))
    ));
}

#[tokio::test]
async fn search_finds_words_and_ignores_fts_syntax() {
    let (_d, s) = store().await;
    let a = s.create_session(new_session("cli")).await.unwrap();
    let b = s.create_session(new_session("cli")).await.unwrap();
    s.append_message(&a.id, &NewMessage::new(Role::User, "the quick brown fox"))
        .await
        .unwrap();
    s.append_message(
        &b.id,
        &NewMessage::new(Role::Assistant, "a lazy dog sleeps"),
    )
    .await
    .unwrap();
    let hits = s.search("brown fox", 10).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].session_id, a.id);
    assert!(hits[0].snippet.contains("[brown]"), "{}", hits[0].snippet);
    assert!(
        s.search("fox dog", 10).await.unwrap().is_empty(),
        "all words must match"
    );
    // Operators and quotes in user text are plain words, not syntax errors.
    assert!(
        s.search("\"dog\" AND OR NEAR(", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(s.search("DOG", 10).await.unwrap()[0].session_id, b.id);
    assert!(s.delete_session(&b.id).await.unwrap());
    assert!(
        s.search("dog", 10).await.unwrap().is_empty(),
        "deleted messages leave the index"
    );
    assert!(!s.delete_session(&b.id).await.unwrap());
    assert_eq!(s.message_count(&b.id).await.unwrap(), 0);
}

#[tokio::test]
async fn reopen_keeps_data_and_is_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tern.db");
    let id = {
        let s = Store::open(&path).await.unwrap();
        let sess = s.create_session(new_session("cli")).await.unwrap();
        s.append_message(&sess.id, &NewMessage::new(Role::User, "persist me"))
            .await
            .unwrap();
        s.close().await;
        sess.id
    };
    let s = Store::open(&path).await.unwrap();
    assert_eq!(
        s.messages(&id).await.unwrap()[0].content.as_deref(),
        Some("persist me")
    );
    assert_eq!(s.integrity_problem().await.unwrap(), None);
}

#[tokio::test]
async fn sessions_resolve_by_unique_prefix() {
    let (_d, s) = store().await;
    for id in ["abcd1111", "abcd2222", "ffff0000"] {
        s.create_session(NewSession {
            id: Some(id.into()),
            ..new_session("cli")
        })
        .await
        .unwrap();
    }
    assert_eq!(s.resolve_session("ffff").await.unwrap().id, "ffff0000");
    assert_eq!(s.resolve_session("abcd2222").await.unwrap().id, "abcd2222");
    assert!(matches!(
        s.resolve_session("abcd").await,
        Err(StoreError::AmbiguousPrefix(_))
    ));
    assert!(
        matches!(
            s.resolve_session("ff").await,
            Err(StoreError::SessionNotFound(_))
        ),
        "too short"
    );
    assert!(
        matches!(
            s.resolve_session("ab%").await,
            Err(StoreError::SessionNotFound(_))
        ),
        "no LIKE wildcards"
    );
}

#[tokio::test]
async fn keys_are_created_listed_and_revoked() {
    let (_d, s) = store().await;
    s.create_key("ci", KeyKind::Agent, "hash1", "tern_ab")
        .await
        .unwrap();
    assert!(matches!(
        s.create_key("ci", KeyKind::Admin, "hash2", "tern_cd").await,
        Err(StoreError::KeyExists(_))
    ));
    let active = s.active_keys().await.unwrap();
    assert_eq!(
        active
            .iter()
            .map(|k| (k.name.as_str(), k.hash.as_str()))
            .collect::<Vec<_>>(),
        vec![("ci", "hash1")]
    );
    assert!(s.revoke_key("ci").await.unwrap());
    assert!(!s.revoke_key("ci").await.unwrap());
    assert!(s.active_keys().await.unwrap().is_empty());
    // The name is free again; the revoked key stays listed.
    s.create_key("ci", KeyKind::Admin, "hash3", "tern_ef")
        .await
        .unwrap();
    let keys = s.list_keys().await.unwrap();
    assert_eq!(keys.len(), 2);
    assert!(keys[0].revoked_at.is_some() && keys[1].revoked_at.is_none());
    // A new key of the same name is another key: another id.
    assert_ne!(keys[0].id, keys[1].id);
    assert_eq!(s.active_keys().await.unwrap()[0].id, keys[1].id);
    assert_eq!(
        (keys[0].kind, keys[1].kind),
        (KeyKind::Agent, KeyKind::Admin)
    );
    assert_eq!(s.active_keys().await.unwrap()[0].kind, KeyKind::Admin);
}

#[tokio::test]
async fn a_wait_is_created_once_made_ready_once_and_delivered_once() {
    let (_d, s) = store().await;
    let sess = s.create_session(NewSession::default()).await.unwrap();
    let new = NewWait {
        session_id: &sess.id,
        idem_key: "wait:s:call-1",
        tool_call_id: Some("call-1"),
        kind: WaitKind::Approval,
        request: r#"{"summary":"Deploy?"}"#,
    };
    let (w, fresh) = s.create_wait(&new).await.unwrap();
    assert!(fresh);
    let (again, fresh) = s.create_wait(&new).await.unwrap();
    assert!(!fresh, "a retried tool call finds its wait");
    assert_eq!(again.id, w.id);
    s.set_wait_request(&w.id, "req-1").await.unwrap();
    assert_eq!(s.wait_by_request("req-1").await.unwrap().unwrap().id, w.id);
    assert!(s.has_open_waits(&sess.id).await.unwrap());

    let ready = s
        .wait_ready(&w.id, r#"{"outcome":{"type":"APPROVE"}}"#, Some("alice"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ready.status, WaitStatus::Ready);
    assert!(s.wait_ready(&w.id, "{}", None).await.unwrap().is_none());

    let msg = NewMessage::new(Role::User, "decided: APPROVE".to_owned());
    let (a, b) = tokio::join!(s.deliver_wait(&w.id, &msg), s.deliver_wait(&w.id, &msg));
    let delivered = [a.unwrap(), b.unwrap()];
    assert_eq!(
        delivered.iter().filter(|m| m.is_some()).count(),
        1,
        "exactly once"
    );
    let transcript = s.messages(&sess.id).await.unwrap();
    assert_eq!(transcript.len(), 1);
    assert_eq!(s.delivered_unanswered().await.unwrap().len(), 1);
    s.wait_answered(&w.id).await.unwrap();
    assert!(s.delivered_unanswered().await.unwrap().is_empty());
    assert!(!s.has_open_waits(&sess.id).await.unwrap());

    let (other, _) = s
        .create_wait(&NewWait {
            idem_key: "wait:s:call-2",
            tool_call_id: Some("call-2"),
            ..new
        })
        .await
        .unwrap();
    let cancelled = s.cancel_waits(&sess.id).await.unwrap();
    assert_eq!(cancelled.len(), 1);
    assert_eq!(cancelled[0].id, other.id);
    assert_eq!(
        s.wait(&other.id).await.unwrap().unwrap().status,
        WaitStatus::Cancelled
    );
    assert_eq!(s.session_waits(&sess.id, false).await.unwrap().len(), 2);
}

#[tokio::test]
async fn idle_sessions_page_past_the_ones_skipped() {
    let (_d, s) = store().await;
    let empty = s.create_session(new_session("api")).await.unwrap();
    let mut with_messages = Vec::new();
    for _ in 0..5 {
        let x = s.create_session(new_session("api")).await.unwrap();
        s.append_message(&x.id, &NewMessage::new(Role::User, "hi"))
            .await
            .unwrap();
        with_messages.push(s.session(&x.id).await.unwrap());
    }
    let running = s.create_session(new_session("api")).await.unwrap();
    s.append_message(&running.id, &NewMessage::new(Role::User, "hi"))
        .await
        .unwrap();
    s.set_status(&running.id, SessionStatus::Running)
        .await
        .unwrap();
    let cutoff = now_ms() + 1;
    // Pages of two, each after the last one seen, cover every candidate once, in order.
    let mut seen = Vec::new();
    let mut after: Option<(i64, String)> = None;
    loop {
        let page = s
            .idle_sessions(cutoff, after.as_ref().map(|(t, id)| (*t, id.as_str())), 2)
            .await
            .unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        after = Some((last.updated_at, last.id.clone()));
        seen.extend(page.into_iter().map(|x| x.id));
    }
    let mut want: Vec<&Session> = with_messages.iter().collect();
    want.sort_by(|a, b| (a.updated_at, &a.id).cmp(&(b.updated_at, &b.id)));
    assert_eq!(seen, want.iter().map(|x| x.id.clone()).collect::<Vec<_>>());
    assert!(!seen.contains(&empty.id) && !seen.contains(&running.id));
    // Nothing updated since the cutoff.
    let oldest = want[0].updated_at;
    assert!(s.idle_sessions(oldest, None, 10).await.unwrap().is_empty());
}

/// A database at `path` migrated up to `version` only (as an older tern left it), on one
/// connection the test writes its old rows through.
async fn migrated_up_to(path: &Path, version: i64) -> SqlitePool {
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::new()
                .filename(path)
                .create_if_missing(true),
        )
        .await
        .unwrap();
    let old = sqlx::migrate::Migrator {
        migrations: std::borrow::Cow::Owned(
            MIGRATOR
                .iter()
                .filter(|m| m.version <= version)
                .cloned()
                .collect(),
        ),
        ..sqlx::migrate::Migrator::DEFAULT
    };
    old.run(&pool).await.unwrap();
    pool
}

/// Migration 0012: the inbox's rows owned by a key *name* become owned by the id of the
/// active key that bears the name; the gateway's own owners stay reserved even when a key
/// bears their name, and a revoked key's name is kept out of reach of a key given it later.
#[tokio::test]
async fn inbox_rows_owned_by_key_names_become_owned_by_key_ids() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tern.db");
    let pool = migrated_up_to(&path, 11).await;
    for (id, name, revoked) in [
        ("k-live", "agent-a", None),
        ("k-gone", "agent-b", Some(5_i64)),
        // A key that took the gateway's own owner name before names were reserved.
        ("k-squat", "tern-agent", None),
    ] {
        sqlx::query(
            "INSERT INTO api_keys (id, name, key_hash, prefix, created_at, revoked_at) \
             VALUES (?, ?, ?, 'tern_x', 1, ?)",
        )
        .bind(id)
        .bind(name)
        .bind(format!("hash-{id}"))
        .bind(revoked)
        .execute(&pool)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO inbox_projects (id, name, steps, created_at) VALUES ('p', 'p', '{}', 1)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let owners = ["agent-a", "agent-b", "tern-agent", "TERN_SERVER_KEY"];
    for (i, owner) in owners.iter().enumerate() {
        sqlx::query(
            "INSERT INTO inbox_tasks (id, project_id, owner_key, name, status, current_step, \
             metadata, attachments, created_at, updated_at) \
             VALUES (?, 'p', ?, 't', 'RUNNING', 's', '{}', '[]', 1, 1)",
        )
        .bind(format!("t{i}"))
        .bind(owner)
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO inbox_idempotency (owner_key, idem_key, method_path, response, \
             status_code, created_at) VALUES (?, 'same-key', 'POST api/tasks', '{}', 201, 1)",
        )
        .bind(owner)
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO inbox_uploads (id, owner_key, sha256, size, content_type, created_at) \
             VALUES (?, ?, 'abc', 1, 'text/plain', 1)",
        )
        .bind(format!("u{i}"))
        .bind(owner)
        .execute(&pool)
        .await
        .unwrap();
    }
    pool.close().await;

    let s = Store::open(&path).await.unwrap();
    let expected = ["k-live", "name:agent-b", "tern-agent", "TERN_SERVER_KEY"];
    for sql in [
        "SELECT owner_key FROM inbox_tasks ORDER BY id",
        "SELECT owner_key FROM inbox_uploads ORDER BY id",
        "SELECT owner_key FROM inbox_idempotency ORDER BY rowid",
    ] {
        let got: Vec<String> = sqlx::query_scalar(sql).fetch_all(&s.pool).await.unwrap();
        assert_eq!(got, expected, "{sql}");
    }
}

#[tokio::test]
async fn a_key_lists_only_the_sessions_it_owns() {
    let (_d, s) = store().await;
    for (id, owner) in [
        ("a1", Some("ka")),
        ("b1", Some("kb")),
        ("a2", Some("ka")),
        ("cli", None),
    ] {
        s.create_session(NewSession {
            id: Some(id.into()),
            owner: owner.map(str::to_owned),
            ..new_session("api")
        })
        .await
        .unwrap();
    }
    let ids = |v: Vec<Session>| v.into_iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(
        ids(s.list_owned_sessions("ka", 10, 0).await.unwrap()),
        ["a2", "a1"]
    );
    assert_eq!(
        ids(s.list_owned_sessions("ka", 1, 1).await.unwrap()),
        ["a1"]
    );
    assert_eq!(
        ids(s.list_owned_sessions("kc", 10, 0).await.unwrap()),
        Vec::<String>::new()
    );
    assert_eq!(s.list_sessions(10, 0).await.unwrap().len(), 4);
    assert_eq!(s.session("b1").await.unwrap().owner.as_deref(), Some("kb"));
    assert_eq!(s.session("cli").await.unwrap().owner, None);
}

/// Migration 0013: keys get a kind — the gateway's first key (`default`, the oldest) becomes
/// admin, the others agent — and the sessions already there have no owner (admin keys only).
#[tokio::test]
async fn older_keys_and_sessions_after_the_session_owner_migration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tern.db");
    let pool = migrated_up_to(&path, 12).await;
    for (id, name, at) in [
        ("k1", "default", 1_i64),
        ("k2", "ci", 2),
        ("k3", "default-2", 3),
    ] {
        sqlx::query(
            "INSERT INTO api_keys (id, name, key_hash, prefix, created_at) \
             VALUES (?, ?, ?, 'tern_x', ?)",
        )
        .bind(id)
        .bind(name)
        .bind(format!("hash-{id}"))
        .bind(at)
        .execute(&pool)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO sessions (id, source, status, created_at, updated_at) \
         VALUES ('old', 'api', 'idle', 1, 1)",
    )
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;

    let s = Store::open(&path).await.unwrap();
    let kinds: Vec<_> = s
        .list_keys()
        .await
        .unwrap()
        .into_iter()
        .map(|k| (k.name, k.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("default".to_owned(), KeyKind::Admin),
            ("ci".to_owned(), KeyKind::Agent),
            ("default-2".to_owned(), KeyKind::Agent),
        ]
    );
    let old = s.session("old").await.unwrap();
    assert_eq!((old.owner, old.source.as_str()), (None, "api"));
    assert!(s.list_owned_sessions("k1", 10, 0).await.unwrap().is_empty());
}

/// A `default` key that is not the gateway's first key (that one was revoked, or another key
/// came first) is not made admin by the migration: a name proves nothing.
#[tokio::test]
async fn the_session_owner_migration_promotes_only_the_first_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tern.db");
    let pool = migrated_up_to(&path, 12).await;
    for (id, name, at, revoked) in [
        ("k1", "default", 1_i64, Some(2_i64)),
        ("k2", "default", 3, None),
    ] {
        sqlx::query(
            "INSERT INTO api_keys (id, name, key_hash, prefix, created_at, revoked_at) \
             VALUES (?, ?, ?, 'tern_x', ?, ?)",
        )
        .bind(id)
        .bind(name)
        .bind(format!("hash-{id}"))
        .bind(at)
        .bind(revoked)
        .execute(&pool)
        .await
        .unwrap();
    }
    pool.close().await;
    let s = Store::open(&path).await.unwrap();
    let kinds: Vec<_> = s
        .list_keys()
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.kind)
        .collect();
    assert_eq!(kinds, [KeyKind::Agent, KeyKind::Agent]);
}

/// The permission bits of the database and its WAL files.
fn db_modes(db: &Path) -> Vec<(String, u32)> {
    use std::os::unix::fs::PermissionsExt;
    ["", "-wal", "-shm"]
        .iter()
        .map(|suffix| {
            let name = format!("{}{suffix}", db.display());
            let mode = std::fs::metadata(&name).unwrap().permissions().mode() & 0o777;
            (name, mode)
        })
        .collect()
}

#[tokio::test]
async fn the_database_and_its_wal_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // A new database: private from its creation, whatever the umask.
    let db = dir.path().join("new.db");
    let s = Store::open(&db).await.unwrap();
    s.create_session(new_session("cli")).await.unwrap();
    for (name, mode) in db_modes(&db) {
        assert_eq!(format!("{mode:o}"), "600", "{name}");
    }
    // One an older tern left readable by everyone is made private when opened.
    let old = dir.path().join("old.db");
    drop(Store::open(&old).await.unwrap());
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
    let s = Store::open(&old).await.unwrap();
    s.create_session(new_session("cli")).await.unwrap();
    for (name, mode) in db_modes(&old) {
        assert_eq!(format!("{mode:o}"), "600", "{name}");
    }
}

#[tokio::test]
async fn a_channel_event_is_recorded_once_appended_once_and_known_answered() {
    use crate::channels::NewChannelEvent;
    let (_d, s) = store().await;
    let sid = s
        .create_session(NewSession {
            source: "telegram".into(),
            ..NewSession::default()
        })
        .await
        .unwrap()
        .id;
    let ev = NewChannelEvent {
        key: "100",
        chat_id: "1",
        thread_id: "",
        user_id: "1",
        user_name: "ann",
        kind: "message",
        payload: "{}",
    };
    let ids = s
        .channel_record("tg", "telegram", std::slice::from_ref(&ev), Some("101"))
        .await
        .unwrap();
    assert_eq!(ids.len(), 1);
    // The same update again (a poll before the cursor was committed): not recorded twice.
    let again = s
        .channel_record("tg", "telegram", &[ev], Some("101"))
        .await
        .unwrap();
    assert!(again.is_empty());
    assert_eq!(
        s.channel_cursor("tg").await.unwrap().as_deref(),
        Some("101")
    );
    let id = ids[0];
    let msg = NewMessage::new(Role::User, "hi");
    assert!(
        s.channel_append_event(id, &sid, &msg)
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        s.channel_append_event(id, &sid, &msg)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(s.messages(&sid).await.unwrap().len(), 1);
    assert!(!s.channel_event_answered(id).await.unwrap());
    s.append_message(
        &sid,
        &NewMessage::new(Role::Assistant, crate::waits::INTERRUPTED_MARKER),
    )
    .await
    .unwrap();
    assert!(!s.channel_event_answered(id).await.unwrap(), "cut short");
    s.append_message(&sid, &NewMessage::new(Role::Assistant, "hello"))
        .await
        .unwrap();
    assert!(s.channel_event_answered(id).await.unwrap());
}

#[tokio::test]
async fn a_chat_sessions_mcp_elicitation_is_posted_once_and_settled_when_no_longer_waited_for() {
    use crate::channels::{ChannelPost, MCP_POST_PREFIX};
    let (_d, s) = store().await;
    let chat = s.create_session(new_session("telegram")).await.unwrap();
    let other = s.create_session(new_session("cli")).await.unwrap();
    s.channel_bind_session("tg", "111", "", &chat.id)
        .await
        .unwrap();
    s.mcp_elicitation_asked("r1", &chat.id).await.unwrap();
    s.mcp_elicitation_asked("r2", &other.id).await.unwrap();
    // Asked again (a retried record): still one.
    s.mcp_elicitation_asked("r1", &chat.id).await.unwrap();
    assert_eq!(
        s.channel_unposted_mcp_elicitations("tg").await.unwrap(),
        vec![("r1".to_owned(), chat.id.clone())]
    );
    assert!(
        s.channel_unposted_mcp_elicitations("matrix")
            .await
            .unwrap()
            .is_empty()
    );
    let post = s
        .channel_post_create(&ChannelPost {
            id: 0,
            channel: "tg".into(),
            chat_id: "111".into(),
            thread_id: String::new(),
            session_id: chat.id.clone(),
            wait_id: format!("{MCP_POST_PREFIX}r1"),
            request_id: "r1".into(),
            kind: "elicitation".into(),
            message_id: None,
            status: "open".into(),
            created_at: 0,
        })
        .await
        .unwrap();
    s.channel_post_sent(post.id, "m1").await.unwrap();
    assert!(
        s.channel_unposted_mcp_elicitations("tg")
            .await
            .unwrap()
            .is_empty()
    );
    // A sent post of an MCP question is a candidate to settle while the gateway waits for
    // the answer and after: the channel goes by the inbox request's status.
    assert!(s.mcp_elicitation_pending("r1").await.unwrap());
    let settle = s.channel_posts_to_settle("tg").await.unwrap();
    assert_eq!(settle.len(), 1);
    assert_eq!(settle[0].id, post.id);
    s.mcp_elicitation_ended("r1").await.unwrap();
    assert!(!s.mcp_elicitation_pending("r1").await.unwrap());
    assert_eq!(s.channel_posts_to_settle("tg").await.unwrap().len(), 1);
    s.channel_post_settled(post.id).await.unwrap();
    assert!(s.channel_posts_to_settle("tg").await.unwrap().is_empty());
    // What an earlier process waited for, for a start to withdraw and end.
    assert_eq!(
        s.mcp_elicitations_left().await.unwrap(),
        vec!["r2".to_owned()]
    );
    s.mcp_elicitation_ended("r2").await.unwrap();
    assert!(!s.mcp_elicitation_pending("r2").await.unwrap());
    assert!(s.mcp_elicitations_left().await.unwrap().is_empty());
}
