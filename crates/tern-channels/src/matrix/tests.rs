//! The adapter's pure parts: error mapping, reply fallbacks, buttons as text, transaction
//! ids. What talks to a homeserver is tested against a real Synapse in `tests/suite/matrix.rs`.

use super::*;

#[test]
fn errors_map_to_what_the_runtime_does_next() {
    let limited = br#"{"errcode":"M_LIMIT_EXCEEDED","error":"Too many","retry_after_ms":1500}"#;
    assert!(matches!(
        map_error("send", StatusCode::TOO_MANY_REQUESTS, limited, None),
        PlatformError::RetryAfter(d) if d == Duration::from_millis(1500)
    ));
    let token = br#"{"errcode":"M_UNKNOWN_TOKEN","error":"Unknown access token"}"#;
    assert!(matches!(
        map_error("sync", StatusCode::UNAUTHORIZED, token, None),
        PlatformError::Unauthorized(t) if t.contains("M_UNKNOWN_TOKEN")
    ));
    let forbidden = br#"{"errcode":"M_FORBIDDEN","error":"not in room"}"#;
    assert!(matches!(
        map_error("send", StatusCode::FORBIDDEN, forbidden, None),
        PlatformError::Rejected(t) if t.contains("not in room")
    ));
    assert!(matches!(
        map_error("sync", StatusCode::BAD_GATEWAY, b"<html>", None),
        PlatformError::Unavailable(_)
    ));
    assert!(matches!(
        map_error("sync", StatusCode::TOO_MANY_REQUESTS, b"", Some(7)),
        PlatformError::RetryAfter(d) if d == Duration::from_secs(7)
    ));
}

#[test]
fn a_reply_fallback_quote_is_cut_off() {
    assert_eq!(
        strip_reply_fallback("> <@a:b> the question\n> more\n\nthe answer"),
        "the answer"
    );
    assert_eq!(
        strip_reply_fallback("> a quote of mine"),
        "> a quote of mine"
    );
    assert_eq!(strip_reply_fallback("plain"), "plain");
}

#[test]
fn buttons_become_text_with_their_reactions() {
    let b = |label: &str, reaction: Option<&str>| Button {
        label: label.into(),
        data: "x".into(),
        reaction: reaction.map(str::to_owned),
    };
    let (plain, html) =
        buttons_text(&[vec![b("Approve", Some("✅")), b("Reject", Some("❌"))]]).unwrap();
    assert_eq!(
        plain,
        "React ✅ Approve · ❌ Reject, or reply to this message with approve / reject"
    );
    assert!(html.contains("✅ Approve"), "{html}");
    assert_eq!(buttons_text(&[]), None);
}

#[test]
fn a_retry_after_an_unknown_outcome_reuses_the_txn_id_and_nothing_else_does() {
    let mut t = Txns::new();
    let a = [1u8; 32];
    let first = t.take(&a);
    t.settle(a, first.clone(), true);
    assert_eq!(
        t.take(&a),
        first,
        "the retry of a send whose fate is unknown"
    );
    t.settle(a, first.clone(), false);
    let next = t.take(&a);
    assert_ne!(next, first, "the same text sent again on purpose");
    t.settle(a, next.clone(), false);
    assert_ne!(t.take(&a), next);
    assert_ne!(Txns::new().boot, t.boot, "a restart's ids differ");
}

#[test]
fn settings_that_cannot_work_are_refused_up_front() {
    let m = |hs: &str, user: &str| Matrix::new(MatrixSettings::new(hs, user, "secret-token"));
    assert!(matches!(
        m("matrix.example.org", "@tern:example.org"),
        Err(MatrixSetupError::Homeserver(_))
    ));
    assert!(matches!(
        m("https://matrix.example.org", "tern"),
        Err(MatrixSetupError::UserId(_))
    ));
    let ok = m("https://matrix.example.org/", "@tern:example.org").unwrap();
    assert_eq!(
        ok.client_url(&["rooms", "!a:b", "send", "m.room.message", "t1"])
            .as_str(),
        "https://matrix.example.org/_matrix/client/v3/rooms/!a:b/send/m.room.message/t1"
    );
    assert!(!format!("{ok:?}").contains("secret-token"));
}
