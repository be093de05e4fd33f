//! The gateway booted in-process through [`GatewayBuilder`], as `tern gateway` boots it: a
//! home with a config.toml, a turn over HTTP, a shutdown that joins everything, and a restart
//! on the same home.

use std::os::unix::fs::PermissionsExt;

use serde_json::{Value, json};
use tern_fake_model::{FakeModel, Reply};
use tern_gateway::boot::{BootError, GatewayBuilder};
use tern_test_support::{TempHome, http_post};

use crate::common::{self, home_for};

const KEY: &str = "boot-test-server-key-0123456789";

fn builder(home: &TempHome) -> GatewayBuilder {
    common::builder(home).server_key(Some(KEY.into()))
}

async fn post(url: &str, body: Value) -> (u16, Value) {
    http_post(url, KEY, body).await
}

#[tokio::test]
async fn the_builder_serves_a_turn_shuts_down_joined_and_starts_again() {
    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::text("hello from a built gateway"));
    let home = home_for(&fake, "");

    let started = builder(&home).start().await.unwrap();
    assert!(started.created_key.is_none(), "a server key was given");
    let handle = started.handle;
    let url = handle.url();
    // First start: admin's one-time login link, on this gateway's address, and the local
    // admin credential, private.
    let login = started
        .admin_login
        .expect("a login link on the first start");
    assert!(login.starts_with(&format!("{url}/inbox/login/")), "{login}");
    let admin = home.home().join("inbox-admin.json");
    let mode = std::fs::metadata(&admin).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let admin: Value = serde_json::from_slice(&std::fs::read(&admin).unwrap()).unwrap();
    assert_eq!(admin["url"], url.as_str());

    let (status, created) = post(&format!("{url}/api/sessions"), json!({})).await;
    assert_eq!(status, 201, "{created}");
    let id = created["session"]["id"].as_str().unwrap().to_owned();
    let (status, answer) = post(
        &format!("{url}/api/sessions/{id}/chat"),
        json!({"message": "hi"}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["message"]["content"], "hello from a built gateway",
        "{answer}"
    );

    // Every task joined, then the store closed: SQLite removes the write-ahead log when its
    // last connection closes, which an upkeep task still holding the pool would prevent.
    handle.shutdown().await.unwrap();
    assert!(
        !home.home().join("tern.db-wal").exists(),
        "the store is still open after the shutdown"
    );
    assert!(
        reqwest::get(format!("{url}/health")).await.is_err(),
        "the server still answers after the shutdown"
    );

    // A restart on the same home: the session and its transcript are there.
    let again = builder(&home).start().await.unwrap();
    let url = again.handle.url();
    let r = reqwest::Client::new()
        .get(format!("{url}/api/sessions/{id}/messages"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let messages: Value = r.json().await.unwrap();
    let contents: Vec<&str> = messages["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(contents, ["hi", "hello from a built gateway"], "{messages}");
    again.handle.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_first_start_writes_its_key_and_a_taken_port_is_a_clear_error() {
    let fake = FakeModel::start().await.unwrap();
    let home = home_for(&fake, "");

    let started = common::builder(&home).start().await.unwrap();
    let key_file = started.created_key.clone().expect("the first key's file");
    assert_eq!(key_file, home.home().join("gateway.key"));
    let key = std::fs::read_to_string(&key_file).unwrap();
    let r = reqwest::Client::new()
        .get(format!("{}/api/sessions", started.handle.url()))
        .bearer_auth(key.trim())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the written key is accepted");

    // The same port again, while the first gateway holds it.
    let taken = started.handle.addr().to_string();
    let err = match common::builder(&home).listen(taken.clone()).start().await {
        Err(e) => e,
        Ok(_) => panic!("a second gateway bound {taken}"),
    };
    assert!(matches!(err, BootError::Bind { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(&taken) && msg.contains("--listen"),
        "the error names the address and the way out: {msg}"
    );
    started.handle.shutdown().await.unwrap();
}
