//! `tern pairing list|approve|revoke` as a real process on a real store. The codes are issued
//! the way a channel adapter will, through `tern_channels::pairing` on the same database.

use crate::common;

use common::{Env, assert_exit, assert_ok, stderr, stdout};
use serde_json::Value;
use tern_channels::pairing::{CodeRequest, MAX_FAILED_APPROVALS, Pairing};

const HOUR: i64 = 60 * 60 * 1000;

async fn pairing(e: &Env) -> Pairing {
    // `tern` makes the home and the database on first use.
    assert_ok(&e.run(&["pairing", "list"]));
    let store = tern_store::Store::open(&e.home().join("tern.db"))
        .await
        .unwrap();
    Pairing::new(store)
}

/// Issues a code for `user` as if they wrote to the bot at `at`.
async fn code(p: &Pairing, platform: &str, user: &str, at: i64) -> String {
    match p.request(platform, user, "Ann Example", at).await.unwrap() {
        CodeRequest::Issued { code, .. } => code,
        other => panic!("no code: {other:?}"),
    }
}

fn list(e: &Env) -> Value {
    let out = e.run(&["pairing", "list", "--json"]);
    assert_ok(&out);
    serde_json::from_str(&stdout(&out)).unwrap()
}

#[tokio::test]
async fn list_approve_and_revoke() {
    let e = Env::new();
    let p = pairing(&e).await;
    let now = tern_util::now_ms();
    let code = code(&p, "telegram", "4242", now).await;

    let l = list(&e);
    assert_eq!(l["pending"][0]["user_id"], "4242");
    assert_eq!(l["pending"][0]["display_name"], "Ann Example");
    assert_eq!(l["approved"], serde_json::json!([]));
    // The code is not in the listing (it is stored hashed), in JSON or as a table.
    assert!(!l.to_string().contains(&code));
    let table = e.run(&["pairing", "list"]);
    assert_ok(&table);
    assert!(stdout(&table).contains("4242"), "{}", stdout(&table));
    assert!(!stdout(&table).contains(&code));

    let out = e.run(&["pairing", "approve", "telegram", &code]);
    assert_ok(&out);
    assert!(stderr(&out).contains("approved 4242"), "{}", stderr(&out));
    assert!(p.is_allowed("telegram", "4242", &[]).await.unwrap());
    let l = list(&e);
    assert_eq!(l["pending"], serde_json::json!([]));
    assert_eq!(l["approved"][0]["user_id"], "4242");
    assert_eq!(l["approved"][0]["revoked_at"], Value::Null);

    let out = e.run(&["pairing", "revoke", "telegram", "4242"]);
    assert_ok(&out);
    assert!(!p.is_allowed("telegram", "4242", &[]).await.unwrap());
    assert!(list(&e)["approved"][0]["revoked_at"].is_i64());

    // Revoking again, or someone never approved, is an error.
    let out = e.run(&["pairing", "revoke", "telegram", "4242"]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("not an approved user"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn approve_errors_unknown_expired_malformed() {
    let e = Env::new();
    let p = pairing(&e).await;
    let now = tern_util::now_ms();
    let old = code(&p, "telegram", "1", now - 2 * HOUR).await;

    let out = e.run(&["pairing", "approve", "telegram", &old]);
    assert_exit(&out, 1);
    assert!(stderr(&out).contains("has expired"), "{}", stderr(&out));
    assert!(!p.is_allowed("telegram", "1", &[]).await.unwrap());

    let out = e.run(&["pairing", "approve", "telegram", "ZZZZZZZZ"]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("no pending pairing code"),
        "{}",
        stderr(&out)
    );

    let out = e.run(&["pairing", "approve", "telegram", "O0O0"]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("is not a pairing code"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn approve_is_locked_after_five_wrong_codes() {
    let e = Env::new();
    let p = pairing(&e).await;
    let code = code(&p, "telegram", "7", tern_util::now_ms()).await;
    let wrong = if code == "ZZZZZZZZ" {
        "YYYYYYYY"
    } else {
        "ZZZZZZZZ"
    };
    for _ in 0..MAX_FAILED_APPROVALS {
        assert_exit(&e.run(&["pairing", "approve", "telegram", wrong]), 1);
    }
    let out = e.run(&["pairing", "approve", "telegram", &code]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("is locked after 5 wrong codes, until"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("UTC"), "{}", stderr(&out));
    assert!(!p.is_allowed("telegram", "7", &[]).await.unwrap());
}

#[tokio::test]
async fn approve_with_a_reviewer_checks_the_inbox() {
    let e = Env::new();
    let p = pairing(&e).await;
    let code = code(&p, "telegram", "9", tern_util::now_ms()).await;

    // An unknown reviewer is refused and the code is not used up.
    let out = e.run(&["pairing", "approve", "telegram", &code, "--reviewer", "ann"]);
    assert_exit(&out, 1);
    assert!(
        stderr(&out).contains("no inbox reviewer named `ann`"),
        "{}",
        stderr(&out)
    );
    assert_eq!(list(&e)["pending"][0]["user_id"], "9");

    assert_ok(&e.run(&["inbox", "reviewers", "add", "ann"]));
    let out = e.run(&["pairing", "approve", "telegram", &code, "--reviewer", "ann"]);
    assert_ok(&out);
    assert_eq!(list(&e)["approved"][0]["reviewer"], "ann");
}
