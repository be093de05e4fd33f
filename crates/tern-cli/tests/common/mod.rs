//! What only tern-cli's integration tests share: the `tern` binary as the
//! binary of [`tern_test_support::Env`], the gateway's session API as one key ([`Api`]), and
//! what the tests read of transcripts. The harness itself (temporary homes, `tern gateway` as
//! a child process, HTTP and waiting helpers) is `tern-test-support`'s.
//!
//! Every test uses only part of it.
#![allow(dead_code)]

use std::time::Duration;

use serde_json::{Value, json};
pub use tern_test_support::{
    Running, assert_exit, assert_ok, http_get, http_post, stderr, stdout, wait_until,
};

/// The tag a decision appended to a session starts with.
pub const DECISION_TAG: &str = "[inbox decision]";

/// A temporary `$TERN_HOME` running this crate's `tern`: the shared harness
/// ([`tern_test_support::Env`], which it dereferences to) with the binary filled in, and room
/// for the helpers of one test file (`impl Env` there).
pub struct Env(tern_test_support::Env);

impl Env {
    /// Without a model: `tern` is given none.
    pub fn new() -> Self {
        Env(tern_test_support::Env::new(env!("CARGO_BIN_EXE_tern")))
    }

    /// With the fake model, which every `tern` command of this env uses.
    pub async fn with_model() -> Self {
        Env(tern_test_support::Env::with_model(env!("CARGO_BIN_EXE_tern")).await)
    }

    /// Every `tern` of this env runs with `umask`, whatever the test's own.
    pub fn with_umask(self, umask: u32) -> Self {
        Env(self.0.with_umask(umask))
    }
}

impl std::ops::Deref for Env {
    type Target = tern_test_support::Env;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// The last message of a chat request the fake model got (`Null` when there is none).
pub fn last_message(body: &Value) -> Value {
    body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or(Value::Null)
}

/// A message's text.
pub fn content(m: &Value) -> &str {
    m["content"].as_str().unwrap_or_default()
}

/// The decisions appended to a transcript.
pub fn decisions(msgs: &[Value]) -> Vec<&Value> {
    msgs.iter()
        .filter(|m| m["role"] == "user" && content(m).starts_with(DECISION_TAG))
        .collect()
}

/// The gateway's session API, as one key.
pub struct Api {
    pub url: String,
    pub key: String,
    pub http: reqwest::Client,
}

impl Api {
    pub fn new(gw: &Running, key: String) -> Self {
        Api {
            url: gw.url.clone(),
            key,
            http: reqwest::Client::new(),
        }
    }

    /// Sends `rb` with the key: the status and the JSON answer (null if none).
    pub async fn send(&self, rb: reqwest::RequestBuilder) -> (u16, Value) {
        let r = rb.bearer_auth(&self.key).send().await.unwrap();
        let s = r.status().as_u16();
        (s, r.json().await.unwrap_or(Value::Null))
    }

    /// A new session's id.
    pub async fn create_session(&self) -> String {
        let (s, v) = self
            .send(
                self.http
                    .post(format!("{}/api/sessions", self.url))
                    .json(&json!({})),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        v["session"]["id"].as_str().unwrap().to_owned()
    }

    /// One chat turn, which must answer 200.
    pub async fn chat(&self, id: &str, message: &str) -> Value {
        let (s, v) = self
            .send(
                self.http
                    .post(format!("{}/api/sessions/{id}/chat", self.url))
                    .json(&json!({"message": message})),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        v
    }

    /// `POST /api/sessions/{id}/reset`; returns the new session's id.
    pub async fn reset(&self, id: &str) -> String {
        self.reset_with(id, "").await
    }

    /// `POST /api/sessions/{id}/reset{query}` (`query` empty or `?…`).
    pub async fn reset_with(&self, id: &str, query: &str) -> String {
        let (s, v) = self
            .send(
                self.http
                    .post(format!("{}/api/sessions/{id}/reset{query}", self.url)),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["session_id"], id, "{v}");
        v["new_session_id"].as_str().unwrap().to_owned()
    }

    pub async fn delete(&self, id: &str) {
        self.delete_with(id, "").await
    }

    /// `DELETE /api/sessions/{id}{query}` (`query` empty or `?…`).
    pub async fn delete_with(&self, id: &str, query: &str) {
        let (s, v) = self
            .send(
                self.http
                    .delete(format!("{}/api/sessions/{id}{query}", self.url)),
            )
            .await;
        assert_eq!(s, 200, "{v}");
    }

    /// The session (its `session` object), which must exist.
    pub async fn session(&self, id: &str) -> Value {
        let (s, v) = self
            .send(self.http.get(format!("{}/api/sessions/{id}", self.url)))
            .await;
        assert_eq!(s, 200, "{v}");
        v["session"].clone()
    }

    pub async fn messages(&self, id: &str) -> Vec<Value> {
        let (s, v) = self
            .send(
                self.http
                    .get(format!("{}/api/sessions/{id}/messages", self.url)),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        v["data"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until the session is idle with no open wait (the resume ran).
    pub async fn until_resumed(&self, id: &str) -> Value {
        wait_until(
            Duration::from_secs(60),
            Duration::from_millis(50),
            async || {
                let s = self.session(id).await;
                if s["status"] == "idle" && s["waits"].as_array().is_some_and(Vec::is_empty) {
                    Ok(s)
                } else {
                    Err(format!("never resumed: {s}"))
                }
            },
        )
        .await
    }
}
