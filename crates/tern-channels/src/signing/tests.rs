use std::os::unix::fs::PermissionsExt as _;

use super::*;

fn key(seed: u8) -> CallbackKey {
    CallbackKey::from_bytes([seed; KEY_BYTES])
}

fn tap(post_id: i64, choice: &str) -> Tap {
    Tap::new(post_id, choice).unwrap()
}

#[test]
fn a_signed_tap_verifies_for_its_chat() {
    let k = key(1);
    for (post_id, choice) in [
        (1, "approve"),
        (0, "reject"),
        (123_456_789, "once"),
        (7, "a_1"),
    ] {
        let t = tap(post_id, choice);
        let data = k.sign("telegram", "-100123", &t);
        assert!(data.starts_with("t1."), "{data}");
        assert_eq!(k.verify("telegram", "-100123", &data).unwrap(), t);
    }
    let data = k.sign("telegram", "42", &tap(35, "always"));
    assert!(data.starts_with("t1.z.always."), "{data}");
}

#[test]
fn every_single_byte_change_is_rejected() {
    let k = key(2);
    let data = k.sign("telegram", "42", &tap(987_654, "session"));
    let bytes = data.as_bytes();
    let mut tried = 0;
    for i in 0..bytes.len() {
        for b in 0x20u8..0x7f {
            if b == bytes[i] {
                continue;
            }
            let mut changed = bytes.to_vec();
            changed[i] = b;
            let changed = String::from_utf8(changed).unwrap();
            let result = k.verify("telegram", "42", &changed);
            assert!(result.is_err(), "{changed} verified as {result:?}");
            tried += 1;
        }
    }
    assert!(tried > 3000, "{tried}");
    // Cut short, or with more after it: refused too.
    for i in 0..bytes.len() {
        assert!(
            k.verify("telegram", "42", &data[..i]).is_err(),
            "{}",
            &data[..i]
        );
    }
    assert!(k.verify("telegram", "42", &format!("{data}A")).is_err());
    assert!(k.verify("telegram", "42", &format!("{data}.x")).is_err());
}

#[test]
fn errors_tell_malformed_from_bad_signature_from_another_chat() {
    let k = key(3);
    let data = k.sign("telegram", "42", &tap(5, "approve"));
    assert!(matches!(
        k.verify("telegram", "43", &data),
        Err(SigningError::OtherChat)
    ));
    // The channel (one bot's configured name) is part of what is signed too.
    assert!(matches!(
        k.verify("work_bot", "42", &data),
        Err(SigningError::OtherChat)
    ));
    // Another choice or post with the original signature.
    let forged = data.replacen(".approve.", ".reject.", 1);
    assert!(matches!(
        k.verify("telegram", "42", &forged),
        Err(SigningError::BadSignature)
    ));
    let forged = data.replacen("t1.5.", "t1.6.", 1);
    assert!(matches!(
        k.verify("telegram", "42", &forged),
        Err(SigningError::BadSignature)
    ));
    for bad in [
        "",
        "approve",
        "t1.5.approve.abcd",
        "t2.5.approve.abcd.AAAAAAAAAAAAAAAA",
        "t1.05.approve.abcd.AAAAAAAAAAAAAAAA",
        "t1.A.approve.abcd.AAAAAAAAAAAAAAAA",
        "t1.+5.approve.abcd.AAAAAAAAAAAAAAAA",
        "t1.5.APPROVE.abcd.AAAAAAAAAAAAAAAA",
        "t1.5.toolongchoice.abcd.AAAAAAAAAAAAAAAA",
        "t1.5..abcd.AAAAAAAAAAAAAAAA",
        "t1.5.approve.abc.AAAAAAAAAAAAAAAA",
        "t1.5.approve.abcd.AAAAAAAAAAAAAAA",
        "t1.5.approve.ab+d.AAAAAAAAAAAAAAAA",
        "t1.5.approve.abcd.AAAAAAAAAAAAAAAA=",
    ] {
        assert!(
            matches!(
                k.verify("telegram", "42", bad),
                Err(SigningError::Malformed(_))
            ),
            "{bad}: {:?}",
            k.verify("telegram", "42", bad)
        );
    }
}

#[test]
fn another_key_s_data_is_rejected() {
    let data = key(4).sign("telegram", "42", &tap(9, "approve"));
    assert!(key(5).verify("telegram", "42", &data).is_err());
    assert!(key(4).verify("telegram", "42", &data).is_ok());
}

#[test]
fn data_fits_telegram_s_64_bytes() {
    let k = key(6);
    for post_id in [0, 1, i64::MAX, i64::MIN, -1] {
        let t = tap(post_id, "abcdefgh");
        let data = k.sign("a-long-channel-name", "-1001234567890123", &t);
        assert!(data.len() <= MAX_DATA_BYTES, "{} bytes: {data}", data.len());
        assert!(data.len() <= 64, "{data}");
        assert_eq!(
            k.verify("a-long-channel-name", "-1001234567890123", &data)
                .unwrap(),
            t
        );
    }
    let longest = k.sign("c", "1", &tap(i64::MIN, "abcdefgh"));
    assert_eq!(longest.len(), MAX_DATA_BYTES, "{longest}");
}

#[test]
fn choices_are_short_tokens() {
    for ok in ["a", "approve", "a_b_1", "abcdefgh"] {
        assert!(Tap::new(1, ok).is_ok(), "{ok}");
    }
    for bad in ["", "abcdefghi", "Approve", "a.b", "a b", "é", "a-b"] {
        let err = Tap::new(1, bad).unwrap_err();
        assert!(matches!(err, SigningError::InvalidChoice(_)), "{bad}");
        assert!(err.to_string().contains("a-z, 0-9 and _"), "{err}");
    }
    // A choice built by hand past the checks never verifies.
    let k = key(7);
    let t = Tap {
        post_id: 1,
        choice: "a.b".to_owned(),
    };
    assert!(
        k.verify("telegram", "1", &k.sign("telegram", "1", &t))
            .is_err()
    );
}

#[test]
fn base36_round_trips_in_one_spelling() {
    for n in [0, 1, 35, 36, 1295, i64::MAX, i64::MIN, -36, -1] {
        assert_eq!(parse_base36(&base36(n)), Some(n), "{n}");
    }
    assert_eq!(base36(35), "z");
    assert_eq!(base36(-36), "-10");
    for bad in ["", "00", "01", "Z", "+1", "-0", " 1", "1y2p0ij32e8e8"] {
        assert_eq!(parse_base36(bad), None, "{bad:?}");
    }
}

#[test]
fn the_key_file_is_created_once_0600_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("callback.key");
    let first = CallbackKey::load_or_create(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.trim().len(), KEY_BYTES * 2);

    let again = CallbackKey::load_or_create(&path).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
    let data = first.sign("telegram", "42", &tap(1, "approve"));
    assert!(again.verify("telegram", "42", &data).is_ok());

    // Two keys made fresh differ.
    let other = CallbackKey::load_or_create(&dir.path().join("other.key")).unwrap();
    assert!(other.verify("telegram", "42", &data).is_err());
}

#[test]
fn a_malformed_key_file_is_an_error_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("callback.key");
    for (content, reason) in [
        ("not hex at all\n", "not hex"),
        ("abcd\n", "2 bytes, where a key has 32"),
        ("", "0 bytes"),
    ] {
        std::fs::write(&path, content).unwrap();
        let err = CallbackKey::load_or_create(&path).unwrap_err();
        assert!(matches!(err, SigningError::MalformedKey { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains(reason), "{msg}");
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains("never replaced"), "{msg}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), content);
    }
    // A directory where the file should be: an error naming the path.
    let err = CallbackKey::load_or_create(dir.path()).unwrap_err();
    assert!(
        matches!(err, SigningError::Io { action: "read", .. }),
        "{err:?}"
    );
    // No directory to create it in.
    let err = CallbackKey::load_or_create(&dir.path().join("no/such/dir/key")).unwrap_err();
    assert!(
        matches!(
            err,
            SigningError::Io {
                action: "write",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn the_key_is_never_shown() {
    let k = CallbackKey::from_bytes([0xab; KEY_BYTES]);
    let shown = format!("{k:?}");
    assert!(!shown.to_lowercase().contains("abab"), "{shown}");
    assert!(!shown.contains("171"), "{shown}");
}
