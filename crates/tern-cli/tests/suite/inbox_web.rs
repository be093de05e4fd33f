//! The web inbox for a request a gateway session made (real `tern gateway`, the fake model
//! asking through `request_approval`): the request is named after the session's title and
//! links to a read-only conversation page, shows what the agent said before asking, and a
//! reviewer's dismissal ends the session's wait as a withdrawal does.

use crate::common;

use std::time::Duration;

use common::{Api, Env, assert_ok, content, last_message, wait_until};
use serde_json::json;
use tern_fake_model::Reply;

const WHY: &str = "The release touches the production database, so I ask a human first.";

/// `(status, body)` of a GET of a web inbox page as a browser with `token` would get it.
async fn page(url: &str, token: Option<&str>) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .get(url)
        .header("accept", "text/html");
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn a_sessions_request_shows_its_title_its_reasons_and_its_conversation() {
    let e = Env::with_model().await;
    e.fake().set_responder(|body| {
        let last = last_message(body);
        match (last["role"].as_str(), content(&last)) {
            (Some("user"), t) if t.starts_with("deploy") => Reply::tool_call(
                "call_ask",
                "request_approval",
                json!({"summary": "Deploy v2 to prod?"}).to_string(),
            )
            .with_text(WHY),
            (Some("tool"), _) => Reply::text("I asked; I will go on once they decide."),
            _ => Reply::text("hello"),
        }
    });
    let gw = e.gateway();
    let api = Api::new(&gw, e.key());
    let asking = api.create_session().await;
    let first = api.chat(&asking, "deploy v2 to prod please").await;
    assert_eq!(first["status"], "completed");
    let s = api.session(&asking).await;
    assert_eq!(s["status"], "waiting", "{s}");
    let request = s["waits"][0]["requestId"].as_str().unwrap().to_owned();
    let title = s["title"].as_str().unwrap().to_owned();
    assert!(title.starts_with("deploy v2"), "{s}");
    let quiet = api.create_session().await;
    api.chat(&quiet, "just say hello").await;
    let admin = e.admin_token();

    // The list and the request name the session by its title, the request links to it.
    let (status, list) = page(&format!("{}/inbox", gw.url), Some(&admin)).await;
    assert_eq!(status, 200, "{list}");
    assert!(list.contains(&title), "{list}");
    let (status, req_page) = page(
        &format!("{}/inbox/requests/{request}", gw.url),
        Some(&admin),
    )
    .await;
    assert_eq!(status, 200, "{req_page}");
    let link = format!("href=\"/inbox/sessions/{asking}\"");
    assert!(
        req_page.contains(&link) && req_page.contains(&title),
        "{req_page}"
    );
    // What the agent said in the message that asked.
    assert!(req_page.contains(WHY), "{req_page}");

    // The conversation: read-only, for reviewers, and only of sessions that asked.
    let conversation = format!("{}/inbox/sessions/{asking}", gw.url);
    let (status, text) = page(&conversation, Some(&admin)).await;
    assert_eq!(status, 200, "{text}");
    for want in [
        "deploy v2 to prod please",
        WHY,
        "request_approval",
        "Deploy v2 to prod?",
    ] {
        assert!(text.contains(want), "{want:?}: {text}");
    }
    assert!(
        !text.contains("<form method=\"post\" action=\"/inbox/requests"),
        "{text}"
    );
    let (status, _) = page(&format!("{}/inbox/sessions/{quiet}", gw.url), Some(&admin)).await;
    assert_eq!(status, 404, "a session that asked nothing is not shown");
    assert_eq!(page(&conversation, None).await.0, 401);
    assert_eq!(page(&conversation, Some(&e.key())).await.0, 403);
    // Conversations hold what the agent's tools read: a reviewer who is not an admin does
    // not see them.
    assert_ok(&e.inbox(&["reviewers", "add", "bob"]));
    let bob = e.inbox(&["reviewers", "token", "bob"]);
    assert_ok(&bob);
    let bob = String::from_utf8_lossy(&bob.stdout).trim().to_owned();
    let (status, _) = page(&format!("{}/inbox", gw.url), Some(&bob)).await;
    assert_eq!(status, 200, "bob is a reviewer");
    assert_eq!(page(&conversation, Some(&bob)).await.0, 404);

    // Dismissed from the CLI: the session's wait ends as after a withdrawal.
    assert_ok(&e.inbox(&["dismiss", &request, "--reason", "not today"]));
    wait_until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        async || {
            let s = api.session(&asking).await;
            if s["status"] == "idle" && s["waits"].as_array().is_some_and(Vec::is_empty) {
                Ok(())
            } else {
                Err(format!("the wait is still open: {s}"))
            }
        },
    )
    .await;

    // A session made later under the deleted one's id (clients choose ids) is not the one
    // that asked: its conversation is not shown.
    assert_eq!(page(&conversation, Some(&admin)).await.0, 200);
    api.delete(&asking).await;
    let (status, again) = api
        .send(
            api.http
                .post(format!("{}/api/sessions", gw.url))
                .json(&json!({"id": asking})),
        )
        .await;
    assert_eq!(status, 201, "{again}");
    assert_eq!(page(&conversation, Some(&admin)).await.0, 404);
}
