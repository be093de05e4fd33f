//! The gateway booted in-process through [`GatewayBuilder`], as `tern gateway` boots it: a
//! home with a config.toml, a turn over HTTP, a shutdown that joins everything, and a restart
//! on the same home.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::{Value, json};
use tern_config::Home;
use tern_fake_model::{FakeModel, Reply};
use tern_gateway::boot::{BootError, GatewayBuilder};

const KEY: &str = "boot-test-server-key-0123456789";

/// A home whose config.toml points at `fake` and listens on any free loopback port.
fn home_for(dir: &Path, fake: &FakeModel) -> Home {
    let root = dir.join("home");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(
        root.join("config.toml"),
        format!(
            "[model]\nbase_url = \"{}\"\nname = \"fake-model\"\nstream = false\n\n\
             [gateway]\nlisten = \"127.0.0.1:0\"\n",
            fake.base_url()
        ),
    )
    .unwrap();
    Home { root }
}

fn builder(home: &Home, work: &Path) -> GatewayBuilder {
    let eff = tern_config::load(home, &|_| None).unwrap();
    GatewayBuilder::new(home.clone(), eff)
        .server_key(Some(KEY.into()))
        .workdir(work.to_path_buf())
}

async fn post(url: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn the_builder_serves_a_turn_shuts_down_joined_and_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let fake = FakeModel::start().await.unwrap();
    fake.push(Reply::text("hello from a built gateway"));
    let home = home_for(dir.path(), &fake);

    let started = builder(&home, &work).start().await.unwrap();
    assert!(started.created_key.is_none(), "a server key was given");
    let handle = started.handle;
    let url = handle.url();
    // First start: admin's one-time login link, on this gateway's address, and the local
    // admin credential, private.
    let login = started
        .admin_login
        .expect("a login link on the first start");
    assert!(login.starts_with(&format!("{url}/inbox/login/")), "{login}");
    let admin = home.root.join("inbox-admin.json");
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
        !home.root.join("tern.db-wal").exists(),
        "the store is still open after the shutdown"
    );
    assert!(
        reqwest::get(format!("{url}/health")).await.is_err(),
        "the server still answers after the shutdown"
    );

    // A restart on the same home: the session and its transcript are there.
    let again = builder(&home, &work).start().await.unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let fake = FakeModel::start().await.unwrap();
    let home = home_for(dir.path(), &fake);
    let eff = || tern_config::load(&home, &|_| None).unwrap();

    let started = GatewayBuilder::new(home.clone(), eff())
        .workdir(work.clone())
        .start()
        .await
        .unwrap();
    let key_file = started.created_key.clone().expect("the first key's file");
    assert_eq!(key_file, home.root.join("gateway.key"));
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
    let err = match GatewayBuilder::new(home.clone(), eff())
        .workdir(work.clone())
        .listen(taken.clone())
        .start()
        .await
    {
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
