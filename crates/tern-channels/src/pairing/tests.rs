//! The pairing rules against a real SQLite store, with a clock the tests move by hand.

use super::*;

const T0: i64 = 1_800_000_000_000;
const MIN: i64 = 60 * 1000;

async fn pairing() -> (tempfile::TempDir, Pairing) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("tern.db")).await.unwrap();
    (dir, Pairing::new(store))
}

async fn issue(p: &Pairing, platform: &str, user: &str, now: i64) -> String {
    match p.request(platform, user, "Ann", now).await.unwrap() {
        CodeRequest::Issued { code, expires_at } => {
            assert_eq!(expires_at, now + CODE_TTL_MS);
            code
        }
        other => panic!("expected a code, got {other:?}"),
    }
}

#[tokio::test]
async fn a_code_is_eight_unambiguous_characters_and_approving_it_allows_the_user() {
    let (_d, p) = pairing().await;
    let code = issue(&p, "telegram", "42", T0).await;
    assert_eq!(code.len(), CODE_LENGTH);
    for c in code.chars() {
        assert!(ALPHABET.contains(&(c as u8)), "{c} in {code}");
        assert!(!"0O1IL".contains(c), "look-alike {c} in {code}");
    }
    assert!(!p.is_allowed("telegram", "42", &[]).await.unwrap());
    // Lower case and spaces around are accepted: people type codes from a phone.
    let approved = p
        .approve(
            "telegram",
            &format!(" {} ", code.to_lowercase()),
            Some("ann"),
            T0 + MIN,
        )
        .await
        .unwrap();
    assert_eq!(approved.user_id, "42");
    assert!(p.is_allowed("telegram", "42", &[]).await.unwrap());
    // Another platform's user with the same id is not.
    assert!(!p.is_allowed("matrix", "42", &[]).await.unwrap());
    let listed = p.store.pairing_approved().await.unwrap();
    assert_eq!(listed[0].reviewer.as_deref(), Some("ann"));
    assert!(p.store.pairing_pending(T0 + MIN).await.unwrap().is_empty());
    // A code is used once.
    let again = p.approve("telegram", &code, None, T0 + MIN).await;
    assert!(
        matches!(again, Err(PairingError::UnknownCode { .. })),
        "{again:?}"
    );
}

#[tokio::test]
async fn the_configured_allowlist_allows_without_pairing() {
    let (_d, p) = pairing().await;
    let allow = vec!["7".to_owned()];
    assert!(p.is_allowed("telegram", "7", &allow).await.unwrap());
    assert!(!p.is_allowed("telegram", "8", &allow).await.unwrap());
}

#[tokio::test]
async fn an_expired_code_cannot_be_approved() {
    let (_d, p) = pairing().await;
    let code = issue(&p, "telegram", "42", T0).await;
    let r = p.approve("telegram", &code, None, T0 + CODE_TTL_MS).await;
    assert!(matches!(r, Err(PairingError::Expired { .. })), "{r:?}");
    assert!(!p.is_allowed("telegram", "42", &[]).await.unwrap());
    // Nor later, when it is no longer even known.
    let r = p
        .approve("telegram", &code, None, T0 + CODE_TTL_MS + 1)
        .await;
    assert!(r.is_err());
    assert!(!p.is_allowed("telegram", "42", &[]).await.unwrap());
    // A second before the hour it still works (with a fresh code).
    let code = issue(&p, "telegram", "43", T0).await;
    p.approve("telegram", &code, None, T0 + CODE_TTL_MS - 1)
        .await
        .unwrap();
}

#[tokio::test]
async fn one_code_per_user_per_ten_minutes() {
    let (_d, p) = pairing().await;
    let first = issue(&p, "telegram", "42", T0).await;
    let r = p
        .request("telegram", "42", "Ann", T0 + RATE_LIMIT_MS - 1)
        .await
        .unwrap();
    assert_eq!(
        r,
        CodeRequest::RateLimited {
            retry_at: T0 + RATE_LIMIT_MS
        }
    );
    // The first code still works after the refused request.
    let second = issue(&p, "telegram", "42", T0 + RATE_LIMIT_MS).await;
    // The new code replaces the old one: one pending code per user.
    assert_eq!(
        p.store
            .pairing_pending(T0 + RATE_LIMIT_MS)
            .await
            .unwrap()
            .len(),
        1
    );
    let r = p
        .approve("telegram", &first, None, T0 + RATE_LIMIT_MS)
        .await;
    assert!(matches!(r, Err(PairingError::UnknownCode { .. })), "{r:?}");
    p.approve("telegram", &second, None, T0 + RATE_LIMIT_MS)
        .await
        .unwrap();
    assert_eq!(
        p.request("telegram", "42", "Ann", T0 + RATE_LIMIT_MS)
            .await
            .unwrap(),
        CodeRequest::AlreadyApproved
    );
}

#[tokio::test]
async fn at_most_three_pending_codes_per_platform() {
    let (_d, p) = pairing().await;
    for user in ["1", "2", "3"] {
        issue(&p, "telegram", user, T0).await;
    }
    assert_eq!(
        p.request("telegram", "4", "D", T0).await.unwrap(),
        CodeRequest::PlatformFull
    );
    // Other platforms have their own three.
    issue(&p, "matrix", "@d:example.org", T0).await;
    // Once the codes expire, there is room again.
    issue(&p, "telegram", "4", T0 + CODE_TTL_MS).await;
}

#[tokio::test]
async fn five_failed_approvals_lock_the_platform_for_an_hour() {
    let (_d, p) = pairing().await;
    let code = issue(&p, "telegram", "42", T0).await;
    let wrong = if code == "AAAAAAAA" {
        "BBBBBBBB"
    } else {
        "AAAAAAAA"
    };
    for _ in 0..MAX_FAILED_APPROVALS {
        let r = p.approve("telegram", wrong, None, T0).await;
        assert!(matches!(r, Err(PairingError::UnknownCode { .. })), "{r:?}");
    }
    // Locked: even the right code is refused, and no new codes are handed out.
    let r = p.approve("telegram", &code, None, T0 + 1).await;
    assert!(
        matches!(r, Err(PairingError::LockedOut { locked_until, .. }) if locked_until == T0 + LOCKOUT_MS),
        "{r:?}"
    );
    assert_eq!(
        p.request("telegram", "43", "B", T0 + 1).await.unwrap(),
        CodeRequest::LockedOut {
            until: T0 + LOCKOUT_MS
        }
    );
    // Other platforms are not locked.
    let m = issue(&p, "matrix", "@a:x", T0 + 1).await;
    p.approve("matrix", &m, None, T0 + 1).await.unwrap();
    // Still locked a moment before the hour; after it, codes are handed out and approved
    // again (the one issued before has expired with the hour).
    let r = p
        .approve("telegram", &code, None, T0 + LOCKOUT_MS - 1)
        .await;
    assert!(matches!(r, Err(PairingError::LockedOut { .. })), "{r:?}");
    let fresh = issue(&p, "telegram", "43", T0 + LOCKOUT_MS).await;
    p.approve("telegram", &fresh, None, T0 + LOCKOUT_MS)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_success_resets_the_failure_count() {
    let (_d, p) = pairing().await;
    let a = issue(&p, "telegram", "1", T0).await;
    let b = issue(&p, "telegram", "2", T0).await;
    for _ in 0..MAX_FAILED_APPROVALS - 1 {
        p.approve("telegram", "ZZZZZZZZ", None, T0)
            .await
            .unwrap_err();
    }
    p.approve("telegram", &a, None, T0).await.unwrap();
    for _ in 0..MAX_FAILED_APPROVALS - 1 {
        p.approve("telegram", "ZZZZZZZZ", None, T0)
            .await
            .unwrap_err();
    }
    p.approve("telegram", &b, None, T0).await.unwrap();
}

#[tokio::test]
async fn a_malformed_code_is_refused_and_not_counted() {
    let (_d, p) = pairing().await;
    let code = issue(&p, "telegram", "42", T0).await;
    for bad in ["", "ABC", "ABCDEFG0", "ABCDEFGHJ"] {
        for _ in 0..MAX_FAILED_APPROVALS {
            let r = p.approve("telegram", bad, None, T0).await;
            assert!(
                matches!(r, Err(PairingError::Malformed { .. })),
                "{bad}: {r:?}"
            );
        }
    }
    p.approve("telegram", &code, None, T0).await.unwrap();
}

#[tokio::test]
async fn revoke_stops_an_approved_user_and_approving_again_restores_them() {
    let (_d, p) = pairing().await;
    let code = issue(&p, "telegram", "42", T0).await;
    p.approve("telegram", &code, None, T0).await.unwrap();
    p.revoke("telegram", "42", T0 + 1).await.unwrap();
    assert!(!p.is_allowed("telegram", "42", &[]).await.unwrap());
    let listed = p.store.pairing_approved().await.unwrap();
    assert_eq!(listed[0].revoked_at, Some(T0 + 1));
    let r = p.revoke("telegram", "42", T0 + 2).await;
    assert!(matches!(r, Err(PairingError::NotApproved { .. })), "{r:?}");
    let r = p.revoke("telegram", "nobody", T0 + 2).await;
    assert!(matches!(r, Err(PairingError::NotApproved { .. })), "{r:?}");
    // A revoked user may pair again.
    let code = issue(&p, "telegram", "42", T0 + 2).await;
    p.approve("telegram", &code, None, T0 + 3).await.unwrap();
    assert!(p.is_allowed("telegram", "42", &[]).await.unwrap());
    assert_eq!(
        p.store.pairing_approved().await.unwrap()[0].revoked_at,
        None
    );
}

#[tokio::test]
async fn the_plaintext_code_is_nowhere_in_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("tern.db");
    let store = Store::open(&db).await.unwrap();
    let p = Pairing::new(store.clone());
    let mut codes = Vec::new();
    for user in ["1", "2", "3"] {
        codes.push(issue(&p, "telegram", user, T0).await);
    }
    // Checkpoint the WAL into the main file and close, so every byte written is in the files.
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(store.pool())
        .await
        .unwrap();
    store.pool().close().await;
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        bytes.extend(std::fs::read(entry.unwrap().path()).unwrap());
    }
    assert!(bytes.len() > 1000, "the database was read");
    for code in codes {
        assert!(
            !bytes.windows(code.len()).any(|w| w == code.as_bytes()),
            "{code} is stored in plaintext"
        );
        assert!(
            !bytes
                .windows(code.len())
                .any(|w| w.eq_ignore_ascii_case(code.as_bytes())),
            "{code} is stored in some case"
        );
    }
}
