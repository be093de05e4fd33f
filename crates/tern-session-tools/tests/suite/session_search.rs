//! `session_search` on a real store: only the asking session's owner's other sessions are
//! searched (never its own, never another key's; `NULL` owners only see `NULL` owners),
//! results are grouped by session and capped, and roles are filtered.

use serde_json::{Value, json};
use tern_llm::Role;
use tern_store::NewMessage;

use crate::common::{Env, err};

async fn say(env: &Env, session: &str, text: &str) {
    env.store
        .append_message(session, &NewMessage::new(Role::User, text))
        .await
        .unwrap();
}

fn found(v: &Value) -> Vec<String> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["session_id"].as_str().unwrap().to_owned())
        .collect()
}

async fn search(env: &Env, session: &str, query: &str) -> Value {
    env.call(session, "session_search", json!({"query": query}))
        .await
        .unwrap()
}

#[tokio::test]
async fn only_the_same_owners_other_sessions_are_searched() {
    let env = Env::new().await;
    for (id, owner) in [
        ("a-now", Some("keya")),
        ("a-past", Some("keya")),
        ("b-past", Some("keyb")),
        ("local-now", None),
        ("local-past", None),
    ] {
        env.session(id, owner).await;
        say(&env, id, &format!("the kestrel migration, as {id} saw it")).await;
    }

    let v = search(&env, "a-now", "kestrel migration").await;
    assert_eq!(found(&v), vec!["a-past"]);
    assert_eq!(v["count"], 1);
    let m = &v["results"][0]["matches"][0];
    assert_eq!(m["role"], "user");
    assert!(
        m["snippet"]
            .as_str()
            .unwrap()
            .contains("[kestrel] [migration]"),
        "{v}"
    );

    assert_eq!(
        found(&search(&env, "b-past", "kestrel").await),
        Vec::<String>::new()
    );
    assert_eq!(
        found(&search(&env, "local-now", "kestrel").await),
        vec!["local-past"]
    );
}

#[tokio::test]
async fn the_current_session_is_never_a_result() {
    let env = Env::new().await;
    env.session("now", None).await;
    env.session("other", None).await;
    say(&env, "now", "the heron deadline is friday").await;
    say(&env, "other", "nothing about birds").await;

    let v = search(&env, "now", "heron deadline").await;
    assert_eq!(found(&v), Vec::<String>::new());
    assert!(
        v["note"].as_str().unwrap().contains("no past session"),
        "{v}"
    );

    say(&env, "other", "moved the heron deadline to monday").await;
    assert_eq!(
        found(&search(&env, "now", "heron deadline").await),
        vec!["other"]
    );
}

#[tokio::test]
async fn results_are_grouped_by_session_and_capped() {
    let env = Env::new().await;
    env.session("now", None).await;
    for i in 0..5 {
        let id = format!("past-{i}");
        env.session(&id, None).await;
        env.store
            .set_title(&id, &format!("title {i}"))
            .await
            .unwrap();
        for j in 0..5 {
            say(&env, &id, &format!("osprey note {j} of session {i}")).await;
        }
    }

    let v = search(&env, "now", "osprey").await;
    assert_eq!(v["count"], 3, "three sessions by default: {v}");
    let v = env
        .call(
            "now",
            "session_search",
            json!({"query": "osprey", "limit": 4}),
        )
        .await
        .unwrap();
    assert_eq!(v["count"], 4);
    let mut ids = found(&v);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "each session once: {v}");
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["matches"].as_array().unwrap().len(), 3, "{r}");
        let n = r["session_id"]
            .as_str()
            .unwrap()
            .trim_start_matches("past-");
        assert_eq!(r["title"], format!("title {n}"));
        assert!(r["when"].as_str().unwrap().ends_with(" UTC"), "{r}");
    }

    let e = err(env
        .call(
            "now",
            "session_search",
            json!({"query": "osprey", "limit": 11}),
        )
        .await);
    assert!(e.contains("/limit"), "{e}");
}

#[tokio::test]
async fn tool_output_is_searched_only_when_asked() {
    let env = Env::new().await;
    env.session("now", None).await;
    env.session("past", None).await;
    env.store
        .append_message(
            "past",
            &NewMessage::tool_result("call_1", "terminal", "error: plover.toml not found"),
        )
        .await
        .unwrap();

    assert_eq!(
        found(&search(&env, "now", "plover").await),
        Vec::<String>::new()
    );
    let v = env
        .call(
            "now",
            "session_search",
            json!({"query": "plover", "role_filter": "user,assistant,tool"}),
        )
        .await
        .unwrap();
    assert_eq!(found(&v), vec!["past"]);
    assert_eq!(v["results"][0]["matches"][0]["role"], "tool");

    let e = err(env
        .call(
            "now",
            "session_search",
            json!({"query": "plover", "role_filter": "user,robot"}),
        )
        .await);
    assert!(e.contains("unknown role \"robot\""), "{e}");
}
