//! Reviewers over real HTTP: one-time login links, the session cookie and its flags, CSRF
//! on cookie-authenticated changes, reviewer bearer tokens, agent keys refused on every
//! reviewer route (an agent can never decide), and the JSON reviewer API.

use crate::common;

use std::sync::Arc;

use reqwest::header::{ACCEPT, COOKIE, SET_COOKIE};
use serde_json::{Value, json};
use tern_gateway::{Gateway, auth};

struct Gw {
    _dir: tempfile::TempDir,
    gw: Arc<Gateway>,
    url: String,
    agent_key: String,
    http: reqwest::Client,
}

async fn start() -> Gw {
    let dir = tempfile::tempdir().unwrap();
    let gw = common::inbox_gateway(dir.path()).await;
    let agent_key = auth::create_key(&gw.store, "agent-a").await.unwrap();
    let (url, _) = common::serve(&gw).await;
    Gw {
        _dir: dir,
        gw,
        url,
        agent_key,
        http: common::no_redirects(),
    }
}

/// How a request authenticates.
#[derive(Clone, Copy)]
enum As<'a> {
    Nobody,
    Bearer(&'a str),
    /// The session cookie, with the CSRF header when given.
    Cookie(&'a str, Option<&'a str>),
}

impl Gw {
    async fn send(
        &self,
        method: &str,
        path: &str,
        who: As<'_>,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let url = format!("{}{path}", self.url);
        let mut req = match method {
            "GET" => self.http.get(url),
            _ => self.http.post(url),
        };
        match who {
            As::Nobody => {}
            As::Bearer(t) => req = req.bearer_auth(t),
            As::Cookie(c, csrf) => {
                req = req.header(COOKIE, format!("other=1; tern_inbox={c}"));
                if let Some(t) = csrf {
                    req = req.header("X-CSRF-Token", t);
                }
            }
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let r = req.send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, value)
    }

    async fn get_bearer(&self, token: &str, path: &str) -> (u16, Value) {
        self.send("GET", path, As::Bearer(token), None).await
    }

    async fn post_bearer(&self, token: &str, path: &str, body: &Value) -> (u16, Value) {
        self.send("POST", path, As::Bearer(token), Some(body)).await
    }

    /// The status of `/inbox/api/me` for `who`.
    async fn me_status(&self, who: As<'_>) -> u16 {
        self.send("GET", "/inbox/api/me", who, None).await.0
    }

    /// Adds the reviewer `name` and returns a bearer token of theirs.
    async fn bearer_reviewer(&self, name: &str) -> String {
        let reviewers = self.gw.inbox.reviewers();
        reviewers.add(name, false).await.unwrap();
        reviewers.bearer_token(name, "cli").await.unwrap()
    }

    /// `url` as a browser opens it.
    async fn get_html(&self, url: &str) -> reqwest::Response {
        self.http
            .get(url)
            .header(ACCEPT, "text/html")
            .send()
            .await
            .unwrap()
    }

    /// The logout form, posted with the session cookie and `body`.
    fn logout_form(&self, cookie: &str, body: String) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}/inbox/logout", self.url))
            .header(COOKIE, format!("tern_inbox={cookie}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
    }

    /// An agent's task and approval request; returns the request id.
    async fn approval(&self) -> String {
        let task = self
            .agent_post(
                "/api/tasks",
                &json!({"name": "Deploy", "projectName": "default"}),
            )
            .await;
        let created = self
            .agent_post(
                "/api/approval-requests",
                &json!({"projectName": "default", "taskId": task["id"], "summary": "Deploy v2?"}),
            )
            .await;
        created["eventId"].as_str().unwrap().to_owned()
    }

    async fn elicitation(&self) -> String {
        let task = self
            .agent_post(
                "/api/tasks",
                &json!({"name": "Ask", "projectName": "default"}),
            )
            .await;
        let created = self
            .agent_post(
                "/api/elicitation-requests",
                &json!({
                    "projectName": "default",
                    "taskId": task["id"],
                    "summary": "Details?",
                    "fields": [
                        {"type": "Text", "id": "street", "label": "Street", "required": true},
                        {"type": "Number", "id": "count", "label": "Count", "required": true,
                         "integerOnly": true, "min": 1, "max": 10},
                    ],
                }),
            )
            .await;
        created["eventId"].as_str().unwrap().to_owned()
    }

    async fn agent_post(&self, path: &str, body: &Value) -> Value {
        let (status, v) = self
            .send("POST", path, As::Bearer(&self.agent_key), Some(body))
            .await;
        assert_eq!(status, 201, "{v}");
        v
    }

    /// What the agent reads for its request: 204 while pending.
    async fn agent_result_status(&self, kind: &str, id: &str) -> u16 {
        self.send(
            "GET",
            &format!("/api/{kind}-requests/{id}/result"),
            As::Bearer(&self.agent_key),
            None,
        )
        .await
        .0
    }

    /// Presses the login page's "Sign in" button: posts the token as its form does.
    async fn post_login(&self, token: &str) -> reqwest::Response {
        self.http
            .post(format!("{}/inbox/login", self.url))
            .header(ACCEPT, "text/html")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
            .send()
            .await
            .unwrap()
    }

    /// Adds the reviewer `name` and logs them in with a fresh link; returns (session cookie
    /// value, CSRF token).
    async fn login(&self, name: &str) -> (String, String) {
        self.gw.inbox.reviewers().add(name, false).await.unwrap();
        let link = self.gw.inbox.reviewers().login_token(name).await.unwrap();
        let r = self
            .http
            .get(format!("{}/inbox/login/{link}", self.url))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers().get(SET_COOKIE).is_none());
        let r = self.post_login(&link).await;
        assert_eq!(r.status(), 200);
        let cookie = r.headers()[SET_COOKIE].to_str().unwrap().to_owned();
        let value = cookie
            .split(';')
            .next()
            .unwrap()
            .strip_prefix("tern_inbox=")
            .unwrap()
            .to_owned();
        let session = self
            .gw
            .inbox
            .reviewers()
            .session(&value)
            .await
            .unwrap()
            .unwrap();
        (value, session.csrf)
    }
}

#[tokio::test]
async fn a_login_link_works_once_and_sets_a_strict_secure_cookie() {
    let gw = start().await;
    gw.gw.inbox.reviewers().add("alice", false).await.unwrap();
    let link = gw.gw.inbox.reviewers().login_token("alice").await.unwrap();
    let url = format!("{}/inbox/login/{link}", gw.url);

    // Opening the link (a person, or a chat client's link preview) shows a "Sign in" button
    // and uses nothing up: twice, and still no session.
    for _ in 0..2 {
        let r = gw.get_html(&url).await;
        assert_eq!(r.status(), 200);
        assert!(r.headers().get(SET_COOKIE).is_none());
        assert_eq!(r.headers()["cache-control"], "no-store");
        assert_eq!(r.headers()["referrer-policy"], "no-referrer");
        let page = r.text().await.unwrap();
        assert!(
            page.contains("<form method=\"post\" action=\"/inbox/login\">"),
            "{page}"
        );
        assert!(
            page.contains(&format!("name=\"token\" value=\"{link}\"")),
            "{page}"
        );
        assert!(page.contains(">Sign in</button>") && page.contains("alice"));
    }
    assert!(
        !gw.gw
            .inbox
            .reviewers()
            .has_logged_in("alice")
            .await
            .unwrap()
    );

    // Pressing the button signs in.
    let r = gw.post_login(&link).await;
    assert_eq!(r.status(), 200);
    let cookies: Vec<_> = r.headers().get_all(SET_COOKIE).iter().collect();
    assert_eq!(cookies.len(), 1);
    let cookie = cookies[0].to_str().unwrap().to_owned();
    let attrs: Vec<&str> = cookie.split(';').map(str::trim).collect();
    let value = attrs[0]
        .strip_prefix("tern_inbox=")
        .expect("the tern_inbox cookie");
    assert_eq!(value.len(), 64);
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/", "Secure"] {
        assert!(attrs.contains(&flag), "{flag} missing from {cookie}");
    }
    assert!(attrs.iter().any(|a| a.starts_with("Max-Age=")), "{cookie}");
    assert_eq!(r.headers()["cache-control"], "no-store");
    let page = r.text().await.unwrap();
    // The page moves on to the inbox by itself (see reviewer_auth's docs on SameSite).
    assert!(
        page.contains("http-equiv=\"refresh\" content=\"0;url=/inbox\""),
        "{page}"
    );
    assert!(page.contains("alice"));

    // The cookie works on the reviewer API.
    let (status, me) = gw
        .send("GET", "/inbox/api/me", As::Cookie(value, None), None)
        .await;
    assert_eq!((status, me), (200, json!({"name": "alice"})));

    // The same link a second time: refused on the page and on the POST, no cookie, a page
    // that says what to do.
    let r = gw.get_html(&url).await;
    assert_eq!(r.status(), 401);
    assert!(r.headers().get(SET_COOKIE).is_none());
    assert!(common::content_type_starts(&r, "text/html"));
    let page = r.text().await.unwrap();
    assert!(page.contains("already been used"), "{page}");
    assert!(page.contains("tern inbox reviewers link"), "{page}");
    let r = gw.post_login(&link).await;
    assert_eq!(r.status(), 401);
    assert!(r.headers().get(SET_COOKIE).is_none());
    assert!(r.text().await.unwrap().contains("already been used"));

    // An unknown token too, and a POST without one.
    let unknown = "0".repeat(64);
    let r = gw
        .http
        .get(format!("{}/inbox/login/{unknown}", gw.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(gw.post_login(&unknown).await.status(), 401);
    assert_eq!(gw.post_login("").await.status(), 401);
}

#[tokio::test]
async fn a_cross_site_login_post_is_refused_and_leaves_the_link_usable() {
    let gw = start().await;
    gw.gw.inbox.reviewers().add("mallory", false).await.unwrap();
    let link = gw
        .gw
        .inbox
        .reviewers()
        .login_token("mallory")
        .await
        .unwrap();
    let r = gw
        .http
        .post(format!("{}/inbox/login", gw.url))
        .header("sec-fetch-site", "cross-site")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={link}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.headers().get(SET_COOKIE).is_none());
    // The link was not used up: the person can still open it themselves.
    let r = gw.post_login(&link).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers().get(SET_COOKIE).is_some());
}

#[tokio::test]
async fn logout_needs_the_csrf_token_and_ends_the_session() {
    let gw = start().await;
    let (cookie, csrf) = gw.login("alice").await;

    let (status, body) = gw
        .send("POST", "/inbox/logout", As::Cookie(&cookie, None), None)
        .await;
    assert_eq!(status, 403, "{body}");
    let (status, _) = gw
        .send(
            "POST",
            "/inbox/logout",
            As::Cookie(&cookie, Some("wrong")),
            None,
        )
        .await;
    assert_eq!(status, 403);
    assert_eq!(gw.me_status(As::Cookie(&cookie, None)).await, 200);

    // A form over the gateway's body limit (1 MiB here; axum's default is 2 MiB): 413, and
    // the session lives on.
    let r = gw
        .logout_form(
            &cookie,
            format!("csrf_token={csrf}&pad={}", "x".repeat(1_500_000)),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert!(common::content_type_starts(&r, "application/json"));
    common::assert_json_error(r).await;
    assert_eq!(gw.me_status(As::Cookie(&cookie, None)).await, 200);

    // The form field works as well as the header.
    let r = gw
        .logout_form(&cookie, format!("csrf_token={csrf}"))
        .header(ACCEPT, "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let cleared = r.headers()[SET_COOKIE].to_str().unwrap();
    assert!(
        cleared.starts_with("tern_inbox=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
    assert_eq!(gw.me_status(As::Cookie(&cookie, None)).await, 401);
}

#[tokio::test]
async fn no_or_unknown_credentials_get_401() {
    let gw = start().await;
    let id = gw.approval().await;
    let routes = [
        ("GET", "/inbox/api/me".to_owned()),
        ("GET", "/inbox/api/requests".to_owned()),
        ("GET", format!("/inbox/api/requests/{id}")),
        ("POST", format!("/inbox/api/requests/{id}/decide")),
        ("POST", format!("/inbox/api/requests/{id}/answer")),
        ("POST", "/inbox/logout".to_owned()),
    ];
    let fake_token = format!("tern_rv_{}", "a".repeat(64));
    for (method, path) in &routes {
        for who in [
            As::Nobody,
            As::Bearer(&fake_token),
            As::Cookie(&"b".repeat(64), None),
        ] {
            let body = json!({"outcome": {"type": "APPROVE"}});
            let (status, v) = gw.send(method, path, who, Some(&body)).await;
            assert_eq!(status, 401, "{method} {path}: {v}");
            assert!(v["error"].as_str().unwrap().contains("login"), "{v}");
        }
    }
    assert_eq!(gw.agent_result_status("approval", &id).await, 204);

    // A browser gets a page that says how to log in.
    let r = gw
        .http
        .get(format!("{}/inbox/api/me", gw.url))
        .header(ACCEPT, "text/html,*/*")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(common::content_type_starts(&r, "text/html"));
    let page = r.text().await.unwrap();
    assert!(
        page.contains("login link") && page.contains("tern inbox reviewers"),
        "{page}"
    );
}

#[tokio::test]
async fn an_agent_key_can_never_act_as_a_reviewer() {
    let gw = start().await;
    let approval = gw.approval().await;
    let elicitation = gw.elicitation().await;
    // Even with a live reviewer session beside it, the agent key is refused.
    let (cookie, _) = gw.login("alice").await;
    // Every reviewer route the gateway has: the router is built from this list, so a new
    // route is tested here without being named.
    let routes = tern_gateway::reviewer_routes();
    for known in [
        "/inbox/api/requests/{id}/decide",
        "/inbox/api/requests/{id}/answer",
        "/inbox/logout",
        "/inbox/uploads/{id}",
        "/inbox/requests/{id}/decide",
    ] {
        assert!(
            routes.iter().any(|(_, p)| *p == known),
            "{known} is missing from {routes:?}"
        );
    }
    assert!(
        routes.iter().all(|(_, p)| !p.starts_with("/inbox/login")),
        "the login routes hand out credentials, they need none: {routes:?}"
    );
    for (method, pattern) in routes {
        // An answer goes to the elicitation, everything else to the approval.
        let id = if pattern.ends_with("answer") {
            &elicitation
        } else {
            &approval
        };
        let path = pattern.replace("{id}", id);
        assert!(
            !path.contains('{'),
            "a path parameter not filled in: {path}"
        );
        let body = if path.ends_with("answer") {
            json!({"fields": {"street": "Main St 1", "count": 2}})
        } else {
            json!({"outcome": {"type": "APPROVE"}})
        };
        for with_cookie in [false, true] {
            let mut req = gw
                .http
                .request(method.clone(), format!("{}{path}", gw.url))
                .bearer_auth(&gw.agent_key)
                .json(&body);
            if with_cookie {
                req = req.header(COOKIE, format!("tern_inbox={cookie}"));
            }
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 403, "{method} {path} (cookie: {with_cookie})");
            // JSON for the API, a page for the web inbox's forms: both say why.
            let text = r.text().await.unwrap().to_lowercase();
            assert!(
                text.contains("agent keys cannot act as reviewers"),
                "{method} {path}: {text}"
            );
        }
    }
    assert_eq!(gw.agent_result_status("approval", &approval).await, 204);
    assert_eq!(
        gw.agent_result_status("elicitation", &elicitation).await,
        204
    );
    // And the reviewer routes never accepted the agent key through `require_key` either:
    // the agent's own API still works with it.
    let (status, _) = gw.get_bearer(&gw.agent_key, "/api/projects").await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn cookie_posts_need_the_csrf_token() {
    let gw = start().await;
    let approval = gw.approval().await;
    let elicitation = gw.elicitation().await;
    let (cookie, csrf) = gw.login("alice").await;
    let decide = format!("/inbox/api/requests/{approval}/decide");
    let answer = format!("/inbox/api/requests/{elicitation}/answer");
    let outcome = json!({"outcome": {"type": "APPROVE"}});
    let answers = json!({"fields": {"street": "Main St 1", "count": 2}});

    for bad in [None, Some("wrong"), Some("")] {
        let (status, v) = gw
            .send("POST", &decide, As::Cookie(&cookie, bad), Some(&outcome))
            .await;
        assert_eq!(status, 403, "{v}");
        assert!(v["error"].as_str().unwrap().contains("CSRF"), "{v}");
        let (status, _) = gw
            .send("POST", &answer, As::Cookie(&cookie, bad), Some(&answers))
            .await;
        assert_eq!(status, 403);
    }
    // Refused before the body is read: a broken body with no token is still 403.
    let (status, _) = gw
        .send(
            "POST",
            &decide,
            As::Cookie(&cookie, None),
            Some(&json!("x")),
        )
        .await;
    assert_eq!(status, 403);
    assert_eq!(gw.agent_result_status("approval", &approval).await, 204);
    assert_eq!(
        gw.agent_result_status("elicitation", &elicitation).await,
        204
    );

    // With the session's token it works; GETs need none.
    let (status, v) = gw
        .send(
            "POST",
            &decide,
            As::Cookie(&cookie, Some(&csrf)),
            Some(&outcome),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["decidedBy"], "alice");
    let (status, v) = gw
        .send(
            "POST",
            &answer,
            As::Cookie(&cookie, Some(&csrf)),
            Some(&answers),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["answeredBy"], "alice");
    let (status, _) = gw
        .send(
            "GET",
            "/inbox/api/requests",
            As::Cookie(&cookie, None),
            None,
        )
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_bearer_reviewer_decides_once() {
    let gw = start().await;
    let id = gw.approval().await;
    let token = gw.bearer_reviewer("bob").await;
    let path = format!("/inbox/api/requests/{id}/decide");

    let (status, me) = gw.get_bearer(&token, "/inbox/api/me").await;
    assert_eq!((status, me), (200, json!({"name": "bob"})));

    // A bad outcome is a 400 in the agent API's shape and decides nothing.
    let (status, v) = gw
        .post_bearer(&token, &path, &json!({"outcome": {"type": "MAYBE"}}))
        .await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["code"], "invalid_json");
    assert_eq!(gw.agent_result_status("approval", &id).await, 204);

    let body = json!({"outcome": {"type": "REJECT", "note": "not today", "reasonCode": "timing"}});
    let (status, v) = gw.post_bearer(&token, &path, &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["decidedBy"], "bob");
    assert_eq!(
        v["outcome"],
        json!({"type": "REJECT", "note": "not today", "reasonCode": "timing"})
    );

    // The agent now reads the decision, by bob.
    let (status, result) = gw
        .get_bearer(
            &gw.agent_key,
            &format!("/api/approval-requests/{id}/result"),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(result["decidedBy"], "bob");
    assert_eq!(result["outcome"]["type"], "REJECT");

    // A second decision: 409, and the first stands.
    let (status, v) = gw
        .post_bearer(&token, &path, &json!({"outcome": {"type": "APPROVE"}}))
        .await;
    assert_eq!(status, 409, "{v}");
    assert!(v["error"].is_string(), "{v}");
    let (_, again) = gw
        .get_bearer(
            &gw.agent_key,
            &format!("/api/approval-requests/{id}/result"),
        )
        .await;
    assert_eq!(again, result);

    // Unknown ids and the wrong kind are 404.
    let (status, v) = gw
        .post_bearer(&token, "/inbox/api/requests/nope/decide", &body)
        .await;
    assert_eq!(status, 404, "{v}");
    let elicitation = gw.elicitation().await;
    let (status, _) = gw
        .post_bearer(
            &token,
            &format!("/inbox/api/requests/{elicitation}/decide"),
            &body,
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(
        gw.agent_result_status("elicitation", &elicitation).await,
        204
    );

    // A revoked token stops working.
    gw.gw.inbox.reviewers().remove("bob").await.unwrap();
    assert_eq!(gw.me_status(As::Bearer(&token)).await, 401);
}

#[tokio::test]
async fn invalid_answers_get_an_error_per_field_and_store_nothing() {
    let gw = start().await;
    let id = gw.elicitation().await;
    let token = gw.bearer_reviewer("carol").await;
    let path = format!("/inbox/api/requests/{id}/answer");

    let bad = json!({"fields": {"street": "", "count": 11, "extra": 1}});
    let (status, v) = gw.post_bearer(&token, &path, &bad).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["code"], "invalid_answers");
    assert!(v["message"].is_string());
    let errors = v["errors"].as_array().unwrap();
    let ids: Vec<&str> = errors
        .iter()
        .map(|e| e["fieldId"].as_str().unwrap())
        .collect();
    for f in ["street", "count", "extra"] {
        assert!(ids.contains(&f), "no error for {f}: {v}");
    }
    assert!(
        errors
            .iter()
            .all(|e| e["code"].is_string() && e["message"].is_string())
    );
    assert_eq!(gw.agent_result_status("elicitation", &id).await, 204);
    let (_, view) = gw
        .get_bearer(&token, &format!("/inbox/api/requests/{id}"))
        .await;
    assert_eq!(view["status"], "pending");

    let (status, _) = gw.post_bearer(&token, &path, &json!({"nofields": 1})).await;
    assert_eq!(status, 400);

    let good = json!({"fields": {"street": "Main St 1", "count": 3}});
    let (status, v) = gw.post_bearer(&token, &path, &good).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["answeredBy"], "carol");
    assert_eq!(v["fields"]["count"], 3);
    let (status, _) = gw.post_bearer(&token, &path, &good).await;
    assert_eq!(status, 409);
}

#[tokio::test]
async fn the_reviewer_api_lists_and_shows_requests() {
    let gw = start().await;
    let first = gw.approval().await;
    let second = gw.elicitation().await;
    let token = gw.bearer_reviewer("dave").await;

    let (status, list) = gw.get_bearer(&token, "/inbox/api/requests").await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["count"], 2);
    let ids: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [second.as_str(), first.as_str()], "newest first");

    let (_, list) = gw
        .get_bearer(&token, "/inbox/api/requests?kind=approval")
        .await;
    assert_eq!(list["count"], 1);
    assert_eq!(list["items"][0]["kind"], "approval");
    let (_, list) = gw.get_bearer(&token, "/inbox/api/requests?limit=1").await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let cursor = list["nextCursor"].as_str().unwrap().to_owned();
    let (_, page2) = gw
        .get_bearer(
            &token,
            &format!("/inbox/api/requests?limit=1&before={cursor}"),
        )
        .await;
    assert_eq!(page2["items"][0]["id"], first);

    for bad in ["status=open", "kind=poll", "limit=-1"] {
        let (status, v) = gw
            .get_bearer(&token, &format!("/inbox/api/requests?{bad}"))
            .await;
        assert_eq!(status, 400, "{bad}: {v}");
        assert!(v["code"].is_string() && v["message"].is_string(), "{v}");
    }

    let body = json!({"outcome": {"type": "APPROVE"}});
    let (status, _) = gw
        .post_bearer(
            &token,
            &format!("/inbox/api/requests/{first}/decide"),
            &body,
        )
        .await;
    assert_eq!(status, 200);
    let (_, pending) = gw.get_bearer(&token, "/inbox/api/requests").await;
    assert_eq!(pending["count"], 1, "pending by default: {pending}");
    let (_, decided) = gw
        .get_bearer(&token, "/inbox/api/requests?status=decided")
        .await;
    assert_eq!(decided["items"][0]["decidedBy"], "dave");
    let (_, all) = gw
        .get_bearer(&token, "/inbox/api/requests?status=all")
        .await;
    assert_eq!(all["count"], 2);

    let (status, view) = gw
        .get_bearer(&token, &format!("/inbox/api/requests/{second}"))
        .await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["kind"], "elicitation");
    assert_eq!(view["fields"].as_array().unwrap().len(), 2);
    assert!(!view["events"].as_array().unwrap().is_empty());
    let (status, _) = gw.get_bearer(&token, "/inbox/api/requests/nope").await;
    assert_eq!(status, 404);
}
