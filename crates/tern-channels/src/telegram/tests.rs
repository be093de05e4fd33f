//! The pure parts: error mapping, update mapping, captions.

use super::*;

fn answer(v: Value) -> Option<api::Response> {
    Some(serde_json::from_value(v).unwrap())
}

#[test]
fn errors_map_to_what_the_runtime_does_next() {
    let e = |status, body| classify("m", status, answer(body)).unwrap_err();
    assert!(matches!(
        e(429, json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 7", "parameters": {"retry_after": 7}})),
        PlatformError::RetryAfter(d) if d == Duration::from_secs(7)
    ));
    assert!(matches!(
        e(
            401,
            json!({"ok": false, "error_code": 401, "description": "Unauthorized"})
        ),
        PlatformError::Unauthorized(_)
    ));
    assert!(matches!(
        e(
            404,
            json!({"ok": false, "error_code": 404, "description": "Not Found"})
        ),
        PlatformError::Unauthorized(_)
    ));
    assert!(matches!(
        e(403, json!({"ok": false, "error_code": 403, "description": "Forbidden: bot was blocked by the user"})),
        PlatformError::Rejected(t) if t.contains("blocked")
    ));
    assert!(matches!(
        e(
            409,
            json!({"ok": false, "error_code": 409, "description": "Conflict"})
        ),
        PlatformError::Conflict(_)
    ));
    assert!(matches!(
        e(
            502,
            json!({"ok": false, "error_code": 502, "description": "Bad Gateway"})
        ),
        PlatformError::Unavailable(_)
    ));
    assert!(matches!(
        classify("m", 502, None).unwrap_err(),
        PlatformError::Unavailable(_)
    ));
    assert_eq!(
        classify("m", 200, answer(json!({"ok": true, "result": true}))).unwrap(),
        json!(true)
    );
}

#[test]
fn service_messages_and_bots_are_not_events_but_topics_are_threads() {
    let update = |v: Value| serde_json::from_value::<api::Update>(v).unwrap();
    let from = json!({"id": 5, "is_bot": false, "first_name": "Ann", "username": "ann"});
    assert_eq!(
        event(update(json!({"update_id": 1, "message": {"message_id": 2,
            "chat": {"id": -9}, "from": from, "new_chat_members": []}}))),
        None
    );
    assert_eq!(
        event(update(
            json!({"update_id": 1, "message": {"message_id": 2, "chat": {"id": -9},
            "from": {"id": 6, "is_bot": true, "first_name": "b"}, "text": "hi"}})
        )),
        None
    );
    let e = event(update(json!({"update_id": 1, "message": {"message_id": 12,
        "chat": {"id": -9}, "from": from, "text": "hi", "message_thread_id": 10,
        "is_topic_message": true, "reply_to_message": {"message_id": 10, "chat": {"id": -9}}}})))
    .unwrap();
    assert_eq!(e.chat.thread_id.as_deref(), Some("10"));
    assert_eq!(e.user.name, "Ann (@ann)");
    assert!(matches!(e.kind, EventKind::Message { reply_to: None, .. }));
}

#[test]
fn long_captions_are_cut_not_refused() {
    let c = cut(&"x".repeat(2000), MAX_CAPTION_CHARS);
    assert_eq!(c.chars().count(), MAX_CAPTION_CHARS);
    assert!(c.ends_with('…'));
    assert_eq!(cut("short", MAX_CAPTION_CHARS), "short");
}

#[test]
fn settings_never_print_the_token() {
    let s = TelegramSettings::new("123:SECRET");
    assert!(!format!("{s:?}").contains("SECRET"));
}
