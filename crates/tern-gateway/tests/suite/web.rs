//! The web inbox over real HTTP on loopback: a reviewer logs in by link (cookie), reads the
//! list and a request page, decides and answers through the HTML forms (CSRF-checked), and
//! follows the live change feed. Agents create the requests through the agent API.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tern_gateway::{Gateway, auth};
use tern_inbox::model::{Actor, Step, Steps};

struct Gw {
    _dir: tempfile::TempDir,
    gw: Arc<Gateway>,
    url: String,
    key: String,
    http: reqwest::Client,
    /// `tern_inbox=<session>` of a logged-in reviewer named `alice`.
    cookie: String,
}

async fn start() -> Gw {
    let dir = tempfile::tempdir().unwrap();
    let gw = common::inbox_gateway(dir.path()).await;
    let key = auth::create_key(&gw.store, "agent-a").await.unwrap();
    gw.inbox
        .add_project(
            "ops",
            Steps {
                initial_step: "work".into(),
                steps: vec![Step {
                    name: "work".into(),
                    owner: Actor::Agent,
                    exits: None,
                }],
                step_schemas: None,
            },
        )
        .await
        .unwrap();
    let (url, _) = common::serve(&gw).await;
    let http = common::no_redirects();

    // Log in as a browser does: open the one-time link, press its "Sign in" button (which
    // posts the token), keep the cookie that sets.
    let reviewers = gw.inbox.reviewers();
    reviewers.add("alice", false).await.unwrap();
    let token = reviewers.login_token("alice").await.unwrap();
    let r = http
        .get(format!("{url}/inbox/login/{token}"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "login page: {}", r.status());
    assert!(r.text().await.unwrap().contains("action=\"/inbox/login\""));
    let r = http
        .post(format!("{url}/inbox/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "login: {}", r.status());
    let set_cookie = r
        .headers()
        .get("set-cookie")
        .expect("the login sets a cookie")
        .to_str()
        .unwrap()
        .to_owned();
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    assert!(cookie.starts_with("tern_inbox="), "{set_cookie}");
    Gw {
        _dir: dir,
        gw,
        url,
        key,
        http,
        cookie,
    }
}

impl Gw {
    /// An agent API call with the agent key.
    async fn agent_post(&self, path: &str, body: Value) -> Value {
        let r = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(&self.key)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap();
        assert_eq!(status, 201, "{path}: {body}");
        body
    }

    async fn task(&self, name: &str, project: &str) -> String {
        let t = self
            .agent_post("/api/tasks", json!({"name": name, "projectName": project}))
            .await;
        t["id"].as_str().unwrap().to_owned()
    }

    async fn approval(&self, task: &str, project: &str, body: Value) -> String {
        let mut b = body;
        b["taskId"] = json!(task);
        b["projectName"] = json!(project);
        let r = self.agent_post("/api/approval-requests", b).await;
        r["eventId"].as_str().unwrap().to_owned()
    }

    /// A dangerous command's approval request as the gateway's own agent asks it (through
    /// the inbox itself: no agent key owns it).
    async fn embedded_command(&self) -> String {
        let owner = tern_waits::client::EMBEDDED_OWNER;
        let task = self
            .gw
            .inbox
            .create_task(
                owner,
                serde_json::from_value(json!({"name": "cmd", "projectName": "default"})).unwrap(),
                None,
            )
            .await
            .unwrap();
        let body = json!({
            "taskId": task.id,
            "projectName": "default",
            "summary": "Run rm -r build?",
            "keyValueContext": {"action": "command", "command": "rm -r build"},
        });
        self.gw
            .inbox
            .create_approval(owner, serde_json::from_value(body).unwrap(), None)
            .await
            .unwrap()
            .event_id
    }

    /// The plain approval request "Ship it?" in the default project.
    async fn ship_it(&self, task: &str) -> String {
        self.approval(task, "default", json!({"summary": "Ship it?"}))
            .await
    }

    /// An elicitation request with one required text field, `acct`.
    async fn which_account(&self, task: &str) -> String {
        self.elicitation(
            task,
            json!({"summary": "Which account?", "fields": [
                {"type": "Text", "id": "acct", "label": "Account", "required": true}]}),
        )
        .await
    }

    async fn elicitation(&self, task: &str, body: Value) -> String {
        let mut b = body;
        b["taskId"] = json!(task);
        b["projectName"] = json!("default");
        let r = self.agent_post("/api/elicitation-requests", b).await;
        r["eventId"].as_str().unwrap().to_owned()
    }

    /// A page as the logged-in reviewer's browser gets it.
    async fn page(&self, path: &str) -> (u16, String) {
        let r = self
            .get(path, &[("cookie", &self.cookie), ("accept", "text/html")])
            .await;
        let status = r.status().as_u16();
        if status == 200 {
            assert_eq!(
                r.headers()["content-type"],
                "text/html; charset=utf-8",
                "{path}"
            );
        }
        (status, r.text().await.unwrap())
    }

    /// Submits a form as the browser does; answers the status, `Location` and body.
    async fn submit(&self, path: &str, form: &[(&str, &str)]) -> (u16, Option<String>, String) {
        let r = self
            .http
            .post(format!("{}{path}", self.url))
            .header("cookie", &self.cookie)
            .header("accept", "text/html")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(encode_form(form))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let location = r
            .headers()
            .get("location")
            .map(|v| v.to_str().unwrap().to_owned());
        (status, location, r.text().await.unwrap())
    }

    /// The CSRF token the request page's form carries.
    async fn csrf(&self, request_id: &str) -> String {
        let (status, page) = self.page(&format!("/inbox/requests/{request_id}")).await;
        assert_eq!(status, 200, "{page}");
        let marker = "name=\"csrf_token\" value=\"";
        let start = page.find(marker).expect("the form has a CSRF token") + marker.len();
        let end = start + page[start..].find('"').unwrap();
        let token = page[start..end].to_owned();
        assert!(!token.is_empty());
        token
    }

    /// A GET with only the given headers.
    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut req = self.http.get(format!("{}{path}", self.url));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        req.send().await.unwrap()
    }

    /// The request's result (it has one).
    async fn result_of(&self, request_id: &str) -> Value {
        let view = self.gw.inbox.request_view(request_id).await.unwrap();
        view.result.unwrap()
    }

    async fn status_of(&self, request_id: &str) -> String {
        let view = self.gw.inbox.request_view(request_id).await.unwrap();
        view.summary.status.as_str().to_owned()
    }
}

fn encode_form(pairs: &[(&str, &str)]) -> String {
    fn enc(s: &str) -> String {
        let mut out = String::new();
        for b in s.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    }
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The markup of one form field: from its `data-field` wrapper to the next one.
fn field_html<'a>(page: &'a str, id: &str) -> &'a str {
    let marker = format!("data-field=\"{id}\"");
    let start = page
        .find(&marker)
        .unwrap_or_else(|| panic!("no field {id}"));
    let rest = &page[start + marker.len()..];
    let end = rest
        .find("data-field=")
        .or_else(|| rest.find("</form>"))
        .unwrap();
    &rest[..end]
}

/// The request ids of the list page's rows, top to bottom.
fn row_ids(page: &str) -> Vec<String> {
    page.match_indices("data-id=\"")
        .map(|(i, m)| {
            let rest = &page[i + m.len()..];
            rest[..rest.find('"').unwrap()].to_owned()
        })
        .collect()
}

fn count(page: &str) -> u64 {
    let marker = "data-count=\"";
    let start = page.find(marker).expect("a count") + marker.len();
    page[start..start + page[start..].find('"').unwrap()]
        .parse()
        .unwrap()
}

#[tokio::test]
async fn list_is_newest_first_with_count_and_filters() {
    let gw = start().await;
    let t1 = gw.task("Refunds", "default").await;
    let t2 = gw.task("Deploys", "ops").await;
    let a = gw
        .approval(&t1, "default", json!({"summary": "Refund 40 EUR"}))
        .await;
    let b = gw
        .approval(&t2, "ops", json!({"summary": "Deploy v2"}))
        .await;
    let c = gw.which_account(&t1).await;

    let (status, page) = gw.page("/inbox").await;
    assert_eq!(status, 200);
    assert_eq!(row_ids(&page), vec![c.clone(), b.clone(), a.clone()]);
    assert_eq!(count(&page), 3);
    assert!(page.contains("Signed in as"), "{page}");
    assert!(page.contains("alice"));
    assert!(page.contains(&format!("href=\"/inbox/requests/{a}\"")));

    let (_, ops) = gw.page("/inbox?project=ops").await;
    assert_eq!(row_ids(&ops), vec![b.clone()]);
    assert_eq!(count(&ops), 1);
    let (_, questions) = gw.page("/inbox?kind=elicitation&project=").await;
    assert_eq!(row_ids(&questions), vec![c.clone()]);

    // Decided leaves the pending list and shows in the history.
    gw.gw
        .inbox
        .decide_approval(
            &a,
            tern_inbox::Outcome::new(tern_inbox::OutcomeType::Reject),
            "bob",
        )
        .await
        .unwrap();
    let (_, pending) = gw.page("/inbox").await;
    assert_eq!(row_ids(&pending), vec![c.clone(), b.clone()]);
    assert_eq!(count(&pending), 2);
    let (_, decided) = gw.page("/inbox?status=decided").await;
    assert_eq!(row_ids(&decided), vec![a.clone()]);
    assert!(decided.contains("Reject"), "{decided}");
    assert!(decided.contains("by bob"), "{decided}");
    let (_, all) = gw.page("/inbox?status=all").await;
    assert_eq!(count(&all), 3);

    let (status, bad) = gw.page("/inbox?status=sideways").await;
    assert_eq!(status, 400);
    assert!(bad.contains("Unknown status"), "{bad}");
}

#[tokio::test]
async fn request_page_shows_context_recommendation_and_timeline() {
    let gw = start().await;
    let task = gw.task("Refund #42", "default").await;
    let id = gw
        .approval(
            &task,
            "default",
            json!({
                "summary": "Refund 40 EUR to Ada",
                "keyValueContext": {"amount": "40 EUR", "customer": "Ada"},
                "recommendation": {"outcome": {"type": "REJECT", "reasonCode": "dup"},
                                   "confidence": 0.8, "rationale": "Refunded last week"}
            }),
        )
        .await;
    let (status, page) = gw.page(&format!("/inbox/requests/{id}")).await;
    assert_eq!(status, 200);
    assert!(page.contains("<h1>Refund 40 EUR to Ada</h1>"), "{page}");
    assert!(
        page.contains("<th scope=\"row\">amount</th><td>40 EUR</td>"),
        "{page}"
    );
    assert!(page.contains("Refunded last week"));
    assert!(page.contains("80%"));
    // Reason codes are for machines: neither the recommendation's nor a field for one.
    assert!(
        !page.contains("dup") && !page.contains("Reason code"),
        "{page}"
    );
    assert!(!page.contains("id=\"reason_code\""), "{page}");
    // The recommended outcome is shown and pre-selected; the others are not selected.
    assert!(
        page.contains("value=\"REJECT\" required checked"),
        "REJECT is pre-selected: {page}"
    );
    assert_eq!(page.matches(" checked").count(), 1, "{page}");
    for o in [
        "APPROVE",
        "REJECT",
        "EDIT_AND_APPROVE",
        "ESCALATE",
        "REQUEST_MORE_INFO",
    ] {
        assert!(page.contains(&format!("value=\"{o}\"")), "{o}");
    }
    // The timeline: the task's creation, then this request (marked).
    let created = page.find("Task created").expect("task creation event");
    let requested = page.find("Approval requested").expect("request event");
    assert!(created < requested);
    assert!(page.contains("(this request)"));

    let (status, missing) = gw.page("/inbox/requests/nope").await;
    assert_eq!(status, 404);
    assert!(missing.contains("Not found"), "{missing}");
}

#[tokio::test]
async fn a_form_without_its_csrf_token_is_refused_and_decides_nothing() {
    let gw = start().await;
    let task = gw.task("t", "default").await;
    let id = gw.ship_it(&task).await;
    let path = format!("/inbox/requests/{id}/decide");

    let (status, _, body) = gw.submit(&path, &[("outcome", "APPROVE")]).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("security token"), "{body}");
    let (status, _, _) = gw
        .submit(&path, &[("outcome", "APPROVE"), ("csrf_token", "forged")])
        .await;
    assert_eq!(status, 403);
    assert_eq!(gw.status_of(&id).await, "pending");

    // With the page's token: 303 back to the page, which shows the result.
    let csrf = gw.csrf(&id).await;
    let (status, location, _) = gw
        .submit(
            &path,
            &[
                ("csrf_token", &csrf),
                ("outcome", "EDIT_AND_APPROVE"),
                ("note", "  ship on Monday "),
                ("reason_code", ""),
            ],
        )
        .await;
    assert_eq!(status, 303);
    assert_eq!(
        location.as_deref(),
        Some(format!("/inbox/requests/{id}?done=1").as_str())
    );
    assert_eq!(gw.status_of(&id).await, "decided");
    let result = gw.result_of(&id).await;
    assert_eq!(result["outcome"]["type"], "EDIT_AND_APPROVE");
    assert_eq!(result["outcome"]["note"], "ship on Monday");
    assert!(result["outcome"].get("reasonCode").is_none(), "{result}");
    assert_eq!(result["decidedBy"], "alice");
    let (_, page) = gw.page(&format!("/inbox/requests/{id}?done=1")).await;
    assert!(page.contains("Your decision was recorded."), "{page}");
    assert!(page.contains("Edit and approve"));
    assert!(!page.contains("id=\"decide\""), "no form once decided");

    // A second decision: 409, a clear message, and the first decision stands.
    let (status, _, page) = gw
        .submit(&path, &[("csrf_token", &csrf), ("outcome", "REJECT")])
        .await;
    assert_eq!(status, 409);
    assert!(page.contains("already decided"), "{page}");
    assert!(page.contains("alice"));
    let result = gw.result_of(&id).await;
    assert_eq!(result["outcome"]["type"], "EDIT_AND_APPROVE");

    // No outcome chosen: the form again with a message.
    let other = gw
        .approval(&task, "default", json!({"summary": "Again?"}))
        .await;
    let csrf = gw.csrf(&other).await;
    let (status, _, page) = gw
        .submit(
            &format!("/inbox/requests/{other}/decide"),
            &[("csrf_token", &csrf), ("note", "kept")],
        )
        .await;
    assert_eq!(status, 400);
    assert!(page.contains("Choose one of the outcomes."), "{page}");
    assert!(page.contains(">kept</textarea>"), "{page}");
}

#[tokio::test]
async fn agents_and_strangers_cannot_use_the_pages() {
    let gw = start().await;
    let task = gw.task("t", "default").await;
    let id = gw.ship_it(&task).await;
    // An agent key is refused, even with a well-formed decision.
    let r = gw
        .http
        .post(format!("{}/inbox/requests/{id}/decide", gw.url))
        .bearer_auth(&gw.key)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("outcome=APPROVE")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    assert_eq!(gw.status_of(&id).await, "pending");
    // A browser without a session gets a page that says how to log in.
    let r = gw.get("/inbox", &[("accept", "text/html")]).await;
    assert_eq!(r.status().as_u16(), 401);
    assert!(r.text().await.unwrap().contains("login link"));
}

#[tokio::test]
async fn elicitation_answers_are_checked_per_field_and_kept_when_wrong() {
    let gw = start().await;
    let task = gw.task("Onboarding", "default").await;
    let id = gw
        .elicitation(
            &task,
            json!({
                "summary": "Contact details",
                "fields": [
                    {"type": "Text", "id": "email", "label": "Email", "required": true, "format": "EMAIL"},
                    {"type": "Number", "id": "seats", "label": "Seats", "required": true, "integerOnly": true, "min": 1, "max": 50},
                    {"type": "Slider", "id": "prio", "label": "Priority", "required": true, "min": 0, "max": 10, "step": 2},
                    {"type": "Switch", "id": "vip", "label": "VIP", "required": false},
                    {"type": "Select", "id": "plan", "label": "Plan", "required": true, "options": ["free", "pro"]},
                    {"type": "Multiselect", "id": "tags", "label": "Tags", "required": false, "options": ["a", "b", "c"]},
                    {"type": "DateField", "id": "start", "label": "Start", "required": true, "min": "2030-01-01"},
                    {"type": "DateTime", "id": "call", "label": "Call", "required": false},
                    {"type": "Time", "id": "at", "label": "At", "required": false},
                    {"type": "TextArea", "id": "notes", "label": "Notes", "required": false, "maxLength": 20}
                ],
                "recommendation": [
                    {"fieldId": "plan", "value": "pro", "confidence": 0.9, "rationale": "big team"},
                    {"fieldId": "call", "value": "2030-02-03T10:30:00+01:00"}
                ]
            }),
        )
        .await;
    let (_, page) = gw.page(&format!("/inbox/requests/{id}")).await;
    // The right control for each kind, and the pre-fills.
    assert!(field_html(&page, "email").contains("type=\"email\""));
    assert!(field_html(&page, "seats").contains("type=\"number\""));
    assert!(field_html(&page, "seats").contains("step=\"1\""));
    assert!(field_html(&page, "prio").contains("type=\"range\""));
    assert!(field_html(&page, "vip").contains("type=\"checkbox\""));
    assert!(field_html(&page, "plan").contains("<option value=\"pro\" selected>"));
    assert!(field_html(&page, "plan").contains("big team"));
    assert_eq!(
        field_html(&page, "tags")
            .matches("type=\"checkbox\"")
            .count(),
        3
    );
    assert!(field_html(&page, "start").contains("type=\"date\""));
    assert!(field_html(&page, "start").contains("min=\"2030-01-01\""));
    assert!(field_html(&page, "call").contains("type=\"datetime-local\""));
    assert!(
        field_html(&page, "call").contains("value=\"2030-02-03T09:30\""),
        "pre-filled in UTC: {}",
        field_html(&page, "call")
    );
    assert!(field_html(&page, "at").contains("type=\"time\""));
    assert!(field_html(&page, "notes").contains("<textarea"));

    let csrf = gw.csrf(&id).await;
    let path = format!("/inbox/requests/{id}/answer");
    let (status, _, page) = gw
        .submit(
            &path,
            &[
                ("csrf_token", &csrf),
                ("f.email", "ops@localhost"),
                ("f.seats", "2.5"),
                ("f.prio", "3"),
                ("f.plan", "pro"),
                ("f.tags", "a"),
                ("f.tags", "c"),
                ("f.start", "2029-12-31"),
                ("f.call", "2030-02-03T09:30"),
                ("f.notes", "short"),
            ],
        )
        .await;
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("4 answers need fixing"), "{page}");
    let email = field_html(&page, "email");
    assert!(email.contains("Must be an email address"), "{email}");
    assert!(email.contains("value=\"ops@localhost\""), "kept: {email}");
    assert!(field_html(&page, "seats").contains("Must be a whole number"));
    assert!(field_html(&page, "prio").contains("in steps of 2"));
    assert!(field_html(&page, "start").contains("on or after 2030-01-01"));
    // Good answers stay as entered, with no message.
    let tags = field_html(&page, "tags");
    assert!(tags.contains("value=\"a\" checked"), "{tags}");
    assert!(tags.contains("value=\"c\" checked"), "{tags}");
    assert!(!tags.contains("class=\"error\""), "{tags}");
    assert!(field_html(&page, "call").contains("value=\"2030-02-03T09:30\""));
    assert_eq!(gw.status_of(&id).await, "pending");

    let (status, location, _) = gw
        .submit(
            &path,
            &[
                ("csrf_token", &csrf),
                ("f.email", "ops@example.com"),
                ("f.seats", "3"),
                ("f.prio", "4"),
                ("f.vip", "true"),
                ("f.plan", "pro"),
                ("f.tags", "a"),
                ("f.tags", "c"),
                ("f.start", "2030-01-02"),
                ("f.call", "2030-02-03T09:30"),
                ("f.at", "09:15"),
                ("f.notes", "two\r\nlines"),
            ],
        )
        .await;
    assert_eq!(status, 303);
    assert!(location.unwrap().ends_with("?done=1"));
    let result = gw.result_of(&id).await;
    assert_eq!(result["answeredBy"], "alice");
    assert_eq!(
        result["fields"],
        json!({"email": "ops@example.com", "seats": 3, "prio": 4, "vip": true, "plan": "pro",
               "tags": ["a", "c"], "start": "2030-01-02", "call": "2030-02-03T09:30:00Z",
               "at": "09:15", "notes": "two\nlines"})
    );
    let (_, page) = gw.page(&format!("/inbox/requests/{id}")).await;
    assert!(
        page.contains("id=\"result\""),
        "the result is shown: {page}"
    );
    assert!(!page.contains("id=\"answer\""), "no form once answered");
    assert!(page.contains("<td>ops@example.com</td>"), "{page}");
}

#[tokio::test]
async fn agent_text_is_escaped() {
    let gw = start().await;
    let task = gw.task("<b>task</b>", "default").await;
    let evil = "<script>alert('x')</script>";
    let id = gw
        .approval(
            &task,
            "default",
            json!({
                "summary": evil,
                "keyValueContext": {"<i>k</i>": "\"><img src=x onerror=alert(1)>"},
                "recommendation": {"outcome": {"type": "APPROVE"}, "rationale": "</section><script>1</script>"}
            }),
        )
        .await;
    for path in ["/inbox".to_owned(), format!("/inbox/requests/{id}")] {
        let (status, page) = gw.page(&path).await;
        assert_eq!(status, 200);
        assert!(!page.contains("<script>alert"), "{path}: {page}");
        assert!(!page.contains("<b>task</b>"), "{path}");
        assert!(
            page.contains("&lt;script&gt;alert('x')&lt;/script&gt;"),
            "{path}: {page}"
        );
    }
    let (_, page) = gw.page(&format!("/inbox/requests/{id}")).await;
    assert!(!page.contains("<img src=x"), "{page}");
    assert!(page.contains("&lt;i&gt;k&lt;/i&gt;"));
    assert!(page.contains("&lt;/section&gt;&lt;script&gt;1&lt;/script&gt;"));
    // The page's two scripts are its own (local times, the live notice), not anything the
    // agent wrote.
    assert_eq!(page.matches("<script").count(), 2, "{page}");
}

#[tokio::test]
async fn the_event_stream_reports_created_and_decided_requests() {
    let gw = start().await;
    let task = gw.task("t", "default").await;
    let r = gw.get("/inbox/events", &[("cookie", &gw.cookie)]).await;
    assert_eq!(r.status().as_u16(), 200);
    assert!(common::content_type_starts(&r, "text/event-stream"));
    let mut body = r.bytes_stream();
    let id = gw
        .approval(&task, "default", json!({"summary": "Live?"}))
        .await;
    gw.gw
        .inbox
        .decide_approval(
            &id,
            tern_inbox::Outcome::new(tern_inbox::OutcomeType::Approve),
            "alice",
        )
        .await
        .unwrap();
    let mut text = String::new();
    // Read until both events arrived; the bound only keeps a broken stream from hanging.
    let read = async {
        while !(text.contains("\"what\":\"created\"") && text.contains("\"what\":\"decided\"")) {
            let chunk = body.next().await.expect("stream open").unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("both events within 30 s");
    assert!(text.contains("event: change"), "{text}");
    assert!(text.contains(&format!("\"requestId\":\"{id}\"")), "{text}");

    // Shutdown ends the stream, so an open browser tab cannot hold the server open.
    gw.gw.drain().await;
    let ended = async {
        while let Some(chunk) = body.next().await {
            if chunk.is_err() {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), ended)
        .await
        .expect("the stream ends once the gateway drains");

    // Without a session: 401.
    let r = gw.get("/inbox/events", &[]).await;
    assert_eq!(r.status().as_u16(), 401);
}

#[tokio::test]
async fn a_form_over_the_body_limit_gets_413_and_records_nothing() {
    let gw = start().await;
    let task = gw.task("t", "default").await;
    let id = gw.ship_it(&task).await;
    let question = gw.which_account(&task).await;
    let csrf = gw.csrf(&id).await;
    // Over the gateway's limit (1 MiB here) and under axum's default (2 MiB).
    let big = "x".repeat(1_500_000);

    // A browser gets a page.
    let (status, _, page) = gw
        .submit(
            &format!("/inbox/requests/{id}/decide"),
            &[
                ("csrf_token", &csrf),
                ("outcome", "APPROVE"),
                ("note", &big),
            ],
        )
        .await;
    assert_eq!(status, 413);
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    assert!(page.contains("too large"), "{page}");
    let (status, _, page) = gw
        .submit(
            &format!("/inbox/requests/{question}/answer"),
            &[("csrf_token", &csrf), ("f.acct", &big)],
        )
        .await;
    assert_eq!(status, 413, "{page}");
    assert_eq!(gw.status_of(&id).await, "pending");
    assert_eq!(gw.status_of(&question).await, "pending");

    // A program gets JSON.
    let r = gw
        .http
        .post(format!("{}/inbox/requests/{id}/decide", gw.url))
        .header("cookie", &gw.cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encode_form(&[
            ("csrf_token", &csrf),
            ("outcome", "APPROVE"),
            ("note", &big),
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    assert!(common::content_type_starts(&r, "application/json"));
    common::assert_json_error(r).await;
    assert_eq!(gw.status_of(&id).await, "pending");
}

#[tokio::test]
async fn nothing_but_health_answers_without_a_reviewer_and_pages_carry_their_style() {
    let gw = start().await;
    // The stylesheet is in every page (no separate, public asset route).
    let (status, page) = gw.page("/inbox").await;
    assert_eq!(status, 200);
    assert!(
        page.contains("<style>") && page.contains("--accent"),
        "{page}"
    );
    assert!(!page.contains("rel=\"stylesheet\""), "{page}");
    for path in ["/inbox/assets/inbox.css", "/inbox/"] {
        let r = gw.get(path, &[]).await;
        let status = r.status().as_u16();
        assert!(status == 401 || status == 404, "{path}: {status}");
        assert!(!r.text().await.unwrap().contains("--accent"), "{path}");
    }
    // The 401 page for a browser is styled as well.
    let r = gw.get("/inbox", &[("accept", "text/html")]).await;
    assert_eq!(r.status().as_u16(), 401);
    let page = r.text().await.unwrap();
    assert!(
        page.contains("<style>") && page.contains("--accent"),
        "{page}"
    );
    // `/inbox/` still leads a reviewer to the inbox.
    let r = gw.get("/inbox/", &[("cookie", &gw.cookie)]).await;
    assert!(r.status().is_redirection(), "{}", r.status());
    assert_eq!(r.headers()["location"], "/inbox");
}

#[tokio::test]
async fn a_command_request_offers_approve_or_reject_and_the_scope_as_its_reason_code() {
    let gw = start().await;
    let task = gw.task("t", "default").await;
    let command = gw.embedded_command().await;
    let plain = gw.ship_it(&task).await;
    // An agent key that dresses its own request up as a command gets no command page.
    let dressed = gw
        .approval(
            &task,
            "default",
            json!({"summary": "Run rm -r build?", "keyValueContext": {"action": "command", "command": "rm -r build"}}),
        )
        .await;

    for id in [&plain, &dressed] {
        let (_, page) = gw.page(&format!("/inbox/requests/{id}")).await;
        assert!(!page.contains("id=\"reason_code\""), "{page}");
        assert!(page.contains("value=\"EDIT_AND_APPROVE\""), "{page}");
    }

    let (_, page) = gw.page(&format!("/inbox/requests/{command}")).await;
    // A command runs or it does not: no "Edit and approve", escalation or questions.
    assert!(
        page.contains("value=\"APPROVE\"") && page.contains("value=\"REJECT\""),
        "{page}"
    );
    for o in ["EDIT_AND_APPROVE", "ESCALATE", "REQUEST_MORE_INFO"] {
        assert!(!page.contains(&format!("value=\"{o}\"")), "{o}: {page}");
    }
    let start = page
        .find("<select id=\"reason_code\" name=\"reason_code\"")
        .unwrap_or_else(|| panic!("no scope choice: {page}"));
    let select = &page[start..start + page[start..].find("</select>").unwrap()];
    for code in ["once", "session", "always"] {
        assert!(select.contains(&format!("value=\"{code}\"")), "{select}");
    }
    assert!(
        select.contains("value=\"once\" selected"),
        "once is the default: {select}"
    );

    let csrf = gw.csrf(&command).await;
    // An outcome the form does not offer is refused, and nothing is recorded.
    let (status, _, body) = gw
        .submit(
            &format!("/inbox/requests/{command}/decide"),
            &[("csrf_token", &csrf), ("outcome", "EDIT_AND_APPROVE")],
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(gw.status_of(&command).await, "pending");
    let (status, _, body) = gw
        .submit(
            &format!("/inbox/requests/{command}/decide"),
            &[
                ("csrf_token", &csrf),
                ("outcome", "APPROVE"),
                ("reason_code", "session"),
            ],
        )
        .await;
    assert_eq!(status, 303, "{body}");
    let result = gw.result_of(&command).await;
    assert_eq!(result["outcome"]["type"], "APPROVE");
    assert_eq!(result["outcome"]["reasonCode"], "session");
    // The scope is shown in words, not as a code.
    let (_, page) = gw.page(&format!("/inbox/requests/{command}")).await;
    assert!(
        page.contains("<th scope=\"row\">Allowed</th><td>For this session"),
        "{page}"
    );
    assert!(!page.contains("Reason code"), "{page}");
}

#[tokio::test]
async fn a_reviewer_dismisses_a_stale_request_and_the_agent_reads_it_as_withdrawn() {
    let gw = start().await;
    let task = gw.task("t", "default").await;
    let stale = gw.ship_it(&task).await;
    let csrf = gw.csrf(&stale).await;
    let (_, page) = gw.page(&format!("/inbox/requests/{stale}")).await;
    assert!(
        page.contains(&format!("action=\"/inbox/requests/{stale}/dismiss\"")),
        "{page}"
    );
    // Without the CSRF token: refused, nothing changes.
    let (status, _, _) = gw
        .submit(
            &format!("/inbox/requests/{stale}/dismiss"),
            &[("reason", "x")],
        )
        .await;
    assert_eq!(status, 403);
    assert_eq!(gw.status_of(&stale).await, "pending");

    let (status, location, body) = gw
        .submit(
            &format!("/inbox/requests/{stale}/dismiss"),
            &[("csrf_token", &csrf), ("reason", "asked twice")],
        )
        .await;
    assert_eq!(status, 303, "{body}");
    assert_eq!(
        location.as_deref(),
        Some(format!("/inbox/requests/{stale}?dismissed=1").as_str())
    );
    assert_eq!(gw.status_of(&stale).await, "withdrawn");
    // The agent reads what it reads after its own withdrawal.
    let r = gw
        .http
        .get(format!("{}/api/approval-requests/{stale}/result", gw.url))
        .bearer_auth(&gw.key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 409);
    let (_, page) = gw
        .page(&format!("/inbox/requests/{stale}?dismissed=1"))
        .await;
    for want in [
        "The request was dismissed",
        "<th scope=\"row\">Dismissed by</th><td>alice</td>",
        "<th scope=\"row\">Reason</th><td>asked twice</td>",
        "Dismissed by alice: asked twice",
    ] {
        assert!(page.contains(want), "{want:?}: {page}");
    }
    assert!(!page.contains("/dismiss\""), "no dismiss form once settled");

    // A decided request cannot be dismissed: 409, the decision stands.
    let decided = gw.ship_it(&task).await;
    let csrf = gw.csrf(&decided).await;
    gw.gw
        .inbox
        .decide_approval(
            &decided,
            tern_inbox::Outcome::new(tern_inbox::OutcomeType::Approve),
            "bob",
        )
        .await
        .unwrap();
    let (status, _, body) = gw
        .submit(
            &format!("/inbox/requests/{decided}/dismiss"),
            &[("csrf_token", &csrf)],
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(gw.status_of(&decided).await, "decided");

    // Over the JSON reviewer API, with a reviewer's bearer token; found by an id prefix.
    let json_one = gw.ship_it(&task).await;
    let reviewers = gw.gw.inbox.reviewers();
    reviewers.add("carol", false).await.unwrap();
    let token = reviewers.bearer_token("carol", "cli").await.unwrap();
    let list: Value = gw
        .http
        .get(format!(
            "{}/inbox/api/requests?status=all&idPrefix={}",
            gw.url,
            &json_one[..json_one.len() - 2]
        ))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&json_one.as_str()), "{list}");
    assert!(
        ids.iter()
            .all(|id| id.starts_with(&json_one[..json_one.len() - 2])),
        "{list}"
    );
    let r = gw
        .http
        .post(format!("{}/inbox/api/requests/{json_one}/withdraw", gw.url))
        .bearer_auth(&token)
        .json(&json!({"reason": "stale"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let w: Value = r.json().await.unwrap();
    assert_eq!(w["status"], "withdrawn");
    assert_eq!(w["dismissedBy"], "carol");
    assert_eq!(w["reason"], "stale");
    // An agent key may not dismiss through the reviewer API.
    let other = gw.ship_it(&task).await;
    let r = gw
        .http
        .post(format!("{}/inbox/api/requests/{other}/withdraw", gw.url))
        .bearer_auth(&gw.key)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    assert_eq!(gw.status_of(&other).await, "pending");
}

#[tokio::test]
async fn pages_show_local_times_pending_badges_and_counts_and_the_root_leads_to_the_inbox() {
    let gw = start().await;
    let task = gw.task("t", "default").await;
    let a = gw.ship_it(&task).await;
    let b = gw.ship_it(&task).await;
    gw.gw
        .inbox
        .decide_approval(
            &b,
            tern_inbox::Outcome::new(tern_inbox::OutcomeType::Reject),
            "alice",
        )
        .await
        .unwrap();
    // The tab's title counts what is pending, on the list and on a request page.
    let (_, list) = gw.page("/inbox?status=all").await;
    assert!(
        list.contains("<title>(1) All requests · tern inbox</title>"),
        "{list}"
    );
    let (_, page) = gw.page(&format!("/inbox/requests/{a}")).await;
    assert!(
        page.contains("<title>(1) Ship it? · tern inbox</title>"),
        "{page}"
    );
    // In "All", the pending request carries its badge; in "Pending" none is needed.
    let row = |page: &str, id: &str| -> String {
        let start = page.find(&format!("data-id=\"{id}\"")).unwrap();
        page[start..start + page[start..].find("</a>").unwrap()].to_owned()
    };
    assert!(
        row(&list, &a).contains("<span class=\"badge pending\">pending</span>"),
        "{}",
        row(&list, &a)
    );
    assert!(
        row(&list, &b).contains("badge decided"),
        "{}",
        row(&list, &b)
    );
    let (_, pending) = gw.page("/inbox").await;
    assert!(!row(&pending, &a).contains("badge pending"), "{pending}");
    // Times are UTC instants in `<time datetime>`, which the page's script shows locally.
    let created = gw
        .gw
        .inbox
        .request_view(&a)
        .await
        .unwrap()
        .summary
        .created_at;
    let utc = tern_inbox::Timestamp::from_unix_millis(created.unix_millis());
    assert!(utc.as_str().ends_with('Z'));
    assert!(
        list.contains(&format!("<time datetime=\"{}\"", utc.as_str())),
        "{list}"
    );
    assert!(
        list.contains("ternLocalTimes"),
        "the local-time script runs: {list}"
    );
    // With nothing pending the title has no count.
    gw.gw
        .inbox
        .dismiss_request(&a, "alice", None)
        .await
        .unwrap();
    let (_, list) = gw.page("/inbox").await;
    assert!(
        list.contains("<title>Pending requests · tern inbox</title>"),
        "{list}"
    );

    // `/` leads a reviewer to the inbox; without credentials it answers 401 like the rest.
    let r = gw
        .get("/", &[("cookie", &gw.cookie), ("accept", "text/html")])
        .await;
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(r.headers()["location"], "/inbox");
    let r = gw.get("/", &[("accept", "text/html")]).await;
    assert_eq!(r.status().as_u16(), 401);
}

/// The sources a Content-Security-Policy directive lists (empty when it has none).
fn csp_sources<'a>(csp: &'a str, directive: &str) -> Vec<&'a str> {
    csp.split(';')
        .map(str::trim)
        .find_map(|d| {
            let mut words = d.split_whitespace();
            (words.next() == Some(directive)).then(|| words.collect())
        })
        .unwrap_or_default()
}

/// The contents of every `<tag>…</tag>` element of a page.
fn inline_elements<'a>(page: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    page.match_indices(&open)
        .map(|(i, _)| {
            let rest = &page[i + open.len()..];
            &rest[..rest.find(&close).expect("a closed element")]
        })
        .collect()
}

/// `'sha256-…'` of an inline element's contents, as a policy names it.
fn csp_hash(text: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(text.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// The page's policy is strict — only the gateway's own resources, no framing, no inline
/// code but what it names by hash — and every inline script and stylesheet of the page is
/// one it names; no element carries an inline handler or style.
fn assert_strict_csp(what: &str, h: &reqwest::header::HeaderMap, page: &str) {
    assert_eq!(h["x-content-type-options"], "nosniff", "{what}");
    let csp = h
        .get("content-security-policy")
        .unwrap_or_else(|| panic!("{what}: no Content-Security-Policy"))
        .to_str()
        .unwrap();
    assert_eq!(csp_sources(csp, "default-src"), ["'self'"], "{what}: {csp}");
    assert_eq!(
        csp_sources(csp, "frame-ancestors"),
        ["'none'"],
        "{what}: {csp}"
    );
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval") && !csp.contains('*'),
        "{what}: {csp}"
    );
    let scripts = csp_sources(csp, "script-src");
    let styles = csp_sources(csp, "style-src");
    assert!(
        scripts
            .iter()
            .chain(&styles)
            .all(|s| s.starts_with("'sha256-")),
        "{what}: only hashes may allow inline code: {csp}"
    );
    for script in inline_elements(page, "script") {
        assert!(
            scripts.contains(&csp_hash(script).as_str()),
            "{what}: a script the policy does not allow:\n{script}"
        );
    }
    let sheets = inline_elements(page, "style");
    assert!(!sheets.is_empty(), "{what}: unstyled");
    for sheet in sheets {
        assert!(
            styles.contains(&csp_hash(sheet).as_str()),
            "{what}: a stylesheet the policy does not allow"
        );
    }
    let lower = page.to_ascii_lowercase();
    assert!(
        !lower.contains(" style="),
        "{what}: an inline style attribute"
    );
    let handler = lower.match_indices(" on").find(|(i, _)| {
        let rest = &lower[i + 3..];
        let name_len = rest.bytes().take_while(u8::is_ascii_lowercase).count();
        name_len > 0 && rest[name_len..].starts_with('=')
    });
    assert!(
        handler.is_none(),
        "{what}: an inline event handler at {handler:?}"
    );
}

#[tokio::test]
async fn every_inbox_page_sends_a_strict_content_security_policy() {
    let gw = start().await;
    let task = gw.task("t", "default").await;
    let approval = gw.ship_it(&task).await;
    let slider = gw
        .elicitation(
            &task,
            json!({"summary": "How urgent?", "fields": [
                {"type": "Slider", "id": "prio", "label": "Priority", "required": true,
                 "min": 0, "max": 10, "step": 2}]}),
        )
        .await;
    let decided = gw.ship_it(&task).await;
    gw.gw
        .inbox
        .decide_approval(
            &decided,
            tern_inbox::Outcome::new(tern_inbox::OutcomeType::Approve),
            "alice",
        )
        .await
        .unwrap();
    let browser = [("cookie", gw.cookie.as_str()), ("accept", "text/html")];
    let pages = [
        "/inbox".to_owned(),
        "/inbox?status=decided".to_owned(),
        format!("/inbox/requests/{approval}"),
        format!("/inbox/requests/{slider}"),
        format!("/inbox/requests/{decided}"),
        "/inbox/requests/nope".to_owned(),
    ];
    let mut scripted = 0;
    for path in &pages {
        let r = gw.get(path, &browser).await;
        let status = r.status();
        assert!(status == 200 || status == 404, "{path}: {status}");
        let headers = r.headers().clone();
        let page = r.text().await.unwrap();
        assert_strict_csp(path, &headers, &page);
        scripted += inline_elements(&page, "script").len();
    }
    // The list and the pending request pages carry their scripts (which the policy allows).
    assert!(scripted >= 3, "{scripted}");
    // The slider shows its value through the allowed script, not an `oninput` attribute.
    let (_, page) = gw.page(&format!("/inbox/requests/{slider}")).await;
    assert!(
        page.contains("type=\"range\"") && !page.contains("oninput"),
        "{page}"
    );

    // The pages outside the shell: the 401 page, a login link's page, a bad link's page.
    let token = gw.gw.inbox.reviewers().login_token("alice").await.unwrap();
    for path in [
        "/inbox".to_owned(),
        format!("/inbox/login/{token}"),
        "/inbox/login/not-a-token".to_owned(),
    ] {
        let r = gw.get(&path, &[("accept", "text/html")]).await;
        let headers = r.headers().clone();
        let page = r.text().await.unwrap();
        assert!(page.contains("<html"), "{path}: {page}");
        assert_strict_csp(&path, &headers, &page);
    }
}
