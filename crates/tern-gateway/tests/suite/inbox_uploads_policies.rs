//! Uploads, notifications and policies of the human inbox over real HTTP: multipart uploads
//! with their size limit and content addressing, downloads for the owning key and reviewers
//! only, signed notifications to a real loopback receiver (also after a restart), and the
//! `[inbox.policy]` rules (auto-approve, always-review, rate limits, expiry).

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tern_gateway::{Gateway, GatewaySettings, InboxSettings, auth};
use tern_inbox::notify::{Notifications, NotifyTarget};
use tern_inbox::policy::Policy;
use tern_test_support::{PATIENCE, eventually, wait_until};
use tokio_util::sync::CancellationToken;

struct Gw {
    gw: Arc<Gateway>,
    url: String,
    key: String,
    other_key: String,
    http: reqwest::Client,
    uploads: PathBuf,
}

/// What a test gateway is built with.
struct Setup {
    policy: Policy,
    notify: Vec<NotifyTarget>,
    max_upload_bytes: u64,
    /// Run the notification worker and expiry sweeper.
    upkeep: bool,
    /// `[inbox] public_url`.
    public_url: Option<&'static str>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            policy: Policy::default(),
            notify: Vec::new(),
            max_upload_bytes: 1024 * 1024,
            upkeep: false,
            public_url: Some("https://inbox.example"),
        }
    }
}

/// A gateway on `dir`'s database (a second call on the same `dir` is a restart).
async fn start_in(dir: &std::path::Path, setup: Setup) -> Gw {
    let (store, work) = common::open(dir).await;
    let key = match store.list_keys().await.unwrap().is_empty() {
        true => {
            let a = auth::create_key(&store, "agent-a").await.unwrap();
            let b = auth::create_key(&store, "agent-b").await.unwrap();
            std::fs::write(dir.join("keys"), format!("{a}\n{b}")).unwrap();
            (a, b)
        }
        false => {
            let text = std::fs::read_to_string(dir.join("keys")).unwrap();
            let (a, b) = text.split_once('\n').unwrap();
            (a.to_owned(), b.to_owned())
        }
    };
    let agent = common::agent_without_model(&store);
    let uploads = dir.join("uploads");
    let inbox = tern_inbox::Inbox::new(store.clone())
        .with_policy(setup.policy)
        .with_notifications(Notifications::new(setup.notify, "https://inbox.example"));
    let settings = GatewaySettings {
        // Much smaller than the uploads: the JSON limit must not apply to them.
        max_body_bytes: 16 * 1024,
        ..common::settings(work)
    };
    // As `tern gateway` does: bound first, and links are made on the bound address.
    let listener = common::listener().await;
    let addr = listener.local_addr().unwrap();
    let gw = common::gateway_with_inbox(
        agent,
        settings,
        inbox,
        InboxSettings {
            uploads_dir: Some(uploads.clone()),
            max_upload_bytes: setup.max_upload_bytes,
            public_url: setup.public_url.map(str::to_owned),
        },
        addr,
    );
    gw.inbox.ensure_default_project().await.unwrap();
    let (url, _) = common::serve_on(listener, &gw).await;
    if setup.upkeep {
        // Dropping the handle leaves the tasks running, as long as the test's runtime.
        drop(gw.spawn_upkeep(CancellationToken::new()));
    }
    Gw {
        gw,
        url,
        key: key.0,
        other_key: key.1,
        http: reqwest::Client::new(),
        uploads,
    }
}

async fn start(setup: Setup) -> (tempfile::TempDir, Gw) {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_in(dir.path(), setup).await;
    (dir, gw)
}

/// A `multipart/form-data` body with one file part (and an unrelated text part first).
fn multipart(field: &str, file_name: &str, content_type: &str, bytes: &[u8]) -> (String, Vec<u8>) {
    let boundary = "----tern-test-boundary-7d3f";
    let mut body = Vec::new();
    body.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhello\r\n")
            .as_bytes(),
    );
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; \
             filename=\"{file_name}\"\r\nContent-Type: {content_type}\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

impl Gw {
    async fn upload_as(
        &self,
        key: &str,
        file_name: &str,
        content_type: &str,
        bytes: &[u8],
    ) -> (u16, Value) {
        let (ct, body) = multipart("file", file_name, content_type, bytes);
        let r = self
            .http
            .post(format!("{}/api/uploads", self.url))
            .bearer_auth(key)
            .header("Content-Type", ct)
            .body(body)
            .send()
            .await
            .unwrap();
        common::status_json(r).await
    }

    async fn upload(&self, file_name: &str, content_type: &str, bytes: &[u8]) -> (u16, Value) {
        self.upload_as(&self.key, file_name, content_type, bytes)
            .await
    }

    async fn get_as(&self, key: &str, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.url))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
    }

    /// What the agent reads for its `kind` request `id`.
    async fn result_of(&self, kind: &str, id: &str) -> reqwest::Response {
        self.get_as(&self.key, &format!("/api/{kind}-requests/{id}/result"))
            .await
    }

    async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.http
            .post(format!("{}{path}", self.url))
            .bearer_auth(&self.key)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    async fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self.post(path, body).await;
        common::status_json(r).await
    }

    async fn task(&self, project: &str, name: &str) -> String {
        let (status, body) = self
            .post_json("/api/tasks", &json!({"name": name, "projectName": project}))
            .await;
        assert_eq!(status, 201, "{body}");
        body["id"].as_str().unwrap().to_owned()
    }

    async fn reviewer_token(&self) -> String {
        let reviewers = self.gw.inbox.reviewers();
        reviewers.ensure("alice", false).await.unwrap();
        reviewers.bearer_token("alice", "test").await.unwrap()
    }

    fn stored_files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![self.uploads.clone()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.push(p);
                }
            }
        }
        out
    }
}

// ---- uploads --------------------------------------------------------------------------------

#[tokio::test]
async fn upload_resolve_and_download_for_the_owner_only() {
    let (_d, gw) = start(Setup::default()).await;
    // Larger than the gateway's JSON body limit (16 KiB): uploads have their own limit.
    let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let (status, body) = gw.upload("report.pdf", "application/pdf", &bytes).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["status"], "READY");
    let id = body["id"].as_str().unwrap().to_owned();

    let r = gw.get_as(&gw.key, &format!("/api/uploads/{id}")).await;
    assert_eq!(r.status(), 200);
    let resolved: Value = r.json().await.unwrap();
    assert_eq!(
        resolved,
        json!({
            "id": id,
            "contentType": "application/pdf",
            "size": 200_000,
            "url": format!("https://inbox.example/api/uploads/{id}/content"),
        })
    );

    let r = gw
        .get_as(&gw.key, &format!("/api/uploads/{id}/content"))
        .await;
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert_eq!(h["content-type"], "application/pdf");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(
        h["content-disposition"],
        "attachment; filename=\"report.pdf\"; filename*=UTF-8''report.pdf"
    );
    assert_eq!(r.bytes().await.unwrap().as_ref(), bytes.as_slice());

    // Another key learns nothing about it.
    for path in [
        format!("/api/uploads/{id}"),
        format!("/api/uploads/{id}/content"),
    ] {
        let r = gw.get_as(&gw.other_key, &path).await;
        assert_eq!(r.status(), 404, "{path}");
        let body: Value = r.json().await.unwrap();
        assert!(body["error"].is_string(), "{body}");
    }
    let r = gw.get_as(&gw.key, "/api/uploads/nope").await;
    assert_eq!(r.status(), 404);

    // Stored once under its hash, whoever uploads the same bytes again.
    let (status, again) = gw
        .upload_as(&gw.other_key, "copy.pdf", "application/pdf", &bytes)
        .await;
    assert_eq!(status, 201, "{again}");
    assert_ne!(again["id"], body["id"]);
    let files = gw.stored_files();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(std::fs::read(&files[0]).unwrap(), bytes);
}

#[tokio::test]
async fn without_public_url_upload_links_are_on_the_bound_address_whatever_the_host() {
    let (_d, gw) = start(Setup {
        public_url: None,
        ..Setup::default()
    })
    .await;
    let (_, body) = gw.upload("a.txt", "text/plain", b"abc").await;
    let id = body["id"].as_str().unwrap();
    for host in ["evil.example", "evil.example:443"] {
        let r = gw
            .http
            .get(format!("{}/api/uploads/{id}", gw.url))
            .bearer_auth(&gw.key)
            .header("Host", host)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let resolved: Value = r.json().await.unwrap();
        assert_eq!(
            resolved["url"],
            format!("{}/api/uploads/{id}/content", gw.url),
            "Host: {host}"
        );
    }
}

impl Gw {
    async fn upload_with_key(&self, idem: &str, bytes: &[u8]) -> (u16, Value) {
        self.upload_with_key_named(idem, "retry.txt", bytes).await
    }

    async fn upload_with_key_named(&self, idem: &str, name: &str, bytes: &[u8]) -> (u16, Value) {
        let (ct, body) = multipart("file", name, "text/plain", bytes);
        let r = self
            .http
            .post(format!("{}/api/uploads", self.url))
            .bearer_auth(&self.key)
            .header("Content-Type", ct)
            .header("Idempotency-Key", idem)
            .body(body)
            .send()
            .await
            .unwrap();
        common::status_json(r).await
    }

    async fn upload_rows(&self) -> i64 {
        sqlx_count(&self.gw, "SELECT COUNT(*) FROM inbox_uploads").await
    }
}

/// A count straight from the database: what the API would not show (rows of a refused create).
async fn sqlx_count(gw: &Gateway, sql: &'static str) -> i64 {
    let row: (i64,) = sqlx::query_as(sql)
        .fetch_one(gw.store.pool())
        .await
        .unwrap();
    row.0
}

#[tokio::test]
async fn an_upload_repeated_with_its_idempotency_key_is_recorded_once() {
    let (_d, gw) = start(Setup::default()).await;
    let (status, first) = gw.upload_with_key("upload-1", b"the first bytes").await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["status"], "READY");
    // A retry (the client never saw the answer) gets the same id and records nothing new.
    let (status, repeat) = gw.upload_with_key("upload-1", b"the first bytes").await;
    assert_eq!((status, &repeat), (201, &first));
    // Another key records another upload; without a key every POST is new.
    let (status, other) = gw.upload_with_key("upload-2", b"the first bytes").await;
    assert_eq!(status, 201);
    assert_ne!(other["id"], first["id"]);
    let (_, plain) = gw.upload("plain.txt", "text/plain", b"x").await;
    let (_, plain_again) = gw.upload("plain.txt", "text/plain", b"x").await;
    assert_ne!(plain["id"], plain_again["id"]);
    // A key first used for an upload is refused on another path.
    let (status, body) = {
        let r = gw
            .http
            .post(format!("{}/api/tasks", gw.url))
            .bearer_auth(&gw.key)
            .header("Idempotency-Key", "upload-1")
            .json(&json!({"name": "t", "projectName": "default"}))
            .send()
            .await
            .unwrap();
        common::status_json(r).await
    };
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "idempotency_key_reused");
    // The file the repeat sent is the same content-addressed file.
    let (_, resolved) = {
        let id = first["id"].as_str().unwrap();
        let r = gw
            .get_as(&gw.key, &format!("/api/uploads/{id}/content"))
            .await;
        (r.status(), r.bytes().await.unwrap())
    };
    assert_eq!(resolved.as_ref(), b"the first bytes");
}

#[tokio::test]
async fn an_upload_key_reused_with_another_file_is_422_and_its_bytes_are_not_kept() {
    let (_d, gw) = start(Setup::default()).await;
    let (status, first) = gw.upload_with_key("upload-1", b"the first bytes").await;
    assert_eq!(status, 201, "{first}");
    let kept = gw.stored_files();
    assert_eq!(kept.len(), 1, "{kept:?}");
    // Other bytes, or the same bytes under another name: another request.
    for (name, bytes) in [
        ("retry.txt", &b"other bytes"[..]),
        ("renamed.txt", b"the first bytes"),
    ] {
        let (status, refused) = gw.upload_with_key_named("upload-1", name, bytes).await;
        assert_eq!(status, 422, "{name}: {refused}");
        assert_eq!(refused["code"], "idempotency_key_reused", "{refused}");
        // Nothing recorded, and nothing of what it sent on disk (no temporary file either).
        assert_eq!(gw.upload_rows().await, 1);
        assert_eq!(gw.stored_files(), kept);
    }
    // The first request again is still a retry.
    let (status, again) = gw.upload_with_key("upload-1", b"the first bytes").await;
    assert_eq!((status, &again), (201, &first));
    assert_eq!(gw.stored_files(), kept);
}

#[tokio::test]
async fn an_upload_with_an_unusable_idempotency_key_is_400_and_keeps_nothing() {
    let (_d, gw) = start(Setup::default()).await;
    let non_ascii = reqwest::header::HeaderValue::from_bytes("clé".as_bytes()).unwrap();
    let too_long = reqwest::header::HeaderValue::from_str(&"k".repeat(256)).unwrap();
    for key in [non_ascii, too_long] {
        let (ct, body) = multipart("file", "a.txt", "text/plain", b"bytes");
        let r = gw
            .http
            .post(format!("{}/api/uploads", gw.url))
            .bearer_auth(&gw.key)
            .header("Content-Type", ct)
            .header("Idempotency-Key", key)
            .body(body)
            .send()
            .await
            .unwrap();
        let (status, refused) = common::status_json(r).await;
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["code"], "invalid_idempotency_key", "{refused}");
    }
    assert_eq!(gw.upload_rows().await, 0);
    assert_eq!(gw.stored_files(), Vec::<PathBuf>::new());
}

#[tokio::test]
async fn reviewers_download_with_safe_headers_and_agents_cannot_use_their_route() {
    let (_d, gw) = start(Setup::default()).await;
    let (_, png) = gw.upload("shot.png", "image/png", b"\x89PNG fake").await;
    let (_, html) = gw
        .upload("page.html", "text/html", b"<script>alert(1)</script>")
        .await;
    let token = gw.reviewer_token().await;

    let r = gw
        .get_as(
            &token,
            &format!("/inbox/uploads/{}", png["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "image/png");
    assert!(
        r.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("inline;")
    );
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"\x89PNG fake");

    // HTML is never served as a page.
    let r = gw
        .get_as(
            &token,
            &format!("/inbox/uploads/{}", html["id"].as_str().unwrap()),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/octet-stream");
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    assert!(
        r.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment;")
    );

    // The reviewers' route is not for agent keys, nor for nobody.
    let path = format!("/inbox/uploads/{}", png["id"].as_str().unwrap());
    assert_eq!(gw.get_as(&gw.key, &path).await.status(), 403);
    let r = gw
        .http
        .get(format!("{}{path}", gw.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn too_large_uploads_get_413_and_leave_nothing() {
    let (_d, gw) = start(Setup {
        max_upload_bytes: 1000,
        ..Setup::default()
    })
    .await;
    let (status, body) = gw
        .upload("a.bin", "application/octet-stream", &[7u8; 1000])
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = gw
        .upload("b.bin", "application/octet-stream", &[8u8; 1001])
        .await;
    assert_eq!(status, 413, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("1000 bytes"),
        "{body}"
    );
    // Far past the limit: refused by its declared length.
    let (status, body) = gw
        .upload("c.bin", "application/octet-stream", &vec![9u8; 500_000])
        .await;
    assert_eq!(status, 413, "{body}");
    // Only the accepted file is stored; no temporary file is left behind.
    wait_until(PATIENCE, Duration::from_millis(10), async || {
        let left = gw.stored_files();
        if left.len() == 1 {
            Ok(())
        } else {
            Err(format!("only the accepted file stored: {left:?}"))
        }
    })
    .await;
}

#[tokio::test]
async fn malformed_uploads_get_400() {
    let (_d, gw) = start(Setup::default()).await;
    let (ct, body) = multipart("document", "a.txt", "text/plain", b"x");
    let r = gw
        .http
        .post(format!("{}/api/uploads", gw.url))
        .bearer_auth(&gw.key)
        .header("Content-Type", ct)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], "missing_file", "{body}");

    let r = gw
        .http
        .post(format!("{}/api/uploads", gw.url))
        .bearer_auth(&gw.key)
        .json(&json!({"file": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], "invalid_multipart", "{body}");

    let r = gw
        .http
        .post(format!("{}/api/uploads", gw.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn attachments_name_uploads_of_the_same_key() {
    let (_d, gw) = start(Setup::default()).await;
    let task = gw.task("default", "with files").await;
    let (_, mine) = gw.upload("a.txt", "text/plain", b"mine").await;
    let (_, theirs) = gw
        .upload_as(&gw.other_key, "b.txt", "text/plain", b"theirs")
        .await;
    let action = |id: &Value| {
        json!({"projectName": "default", "taskId": task, "description": "attach",
               "addAttachments": [{"uploadId": id, "label": "file"}]})
    };
    for bad in [&theirs["id"], &json!("no-such-upload")] {
        let (status, body) = gw.post_json("/api/agent-actions", &action(bad)).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["code"], "unknown_upload", "{body}");
        assert!(body["message"].is_string());
    }
    let (status, body) = gw
        .post_json("/api/agent-actions", &action(&mine["id"]))
        .await;
    assert_eq!(status, 201, "{body}");
    let approval = |id: &Value| {
        json!({"projectName": "default", "taskId": task, "summary": "see file",
               "attachments": [id]})
    };
    let (status, body) = gw
        .post_json("/api/approval-requests", &approval(&theirs["id"]))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "unknown_upload");
    let (status, body) = gw
        .post_json("/api/approval-requests", &approval(&mine["id"]))
        .await;
    assert_eq!(status, 201, "{body}");
}

// ---- notifications --------------------------------------------------------------------------

const SECRET: &str = "notify-secret-0123456789";

/// One POST a receiver got.
#[derive(Debug, Clone)]
struct Received {
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

/// A loopback HTTP receiver that answers its first `fail_first` POSTs with 500, then 200.
async fn receiver(fail_first: usize) -> (String, tokio::sync::mpsc::UnboundedReceiver<Received>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let seen = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let tx = tx.clone();
                let seen = seen.clone();
                async move {
                    let n = seen.fetch_add(1, Ordering::SeqCst);
                    let _ = tx.send(Received {
                        headers,
                        body: body.to_vec(),
                    });
                    if n < fail_first {
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR
                    } else {
                        axum::http::StatusCode::OK
                    }
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, rx)
}

fn target(url: &str) -> NotifyTarget {
    NotifyTarget {
        url: url.to_owned(),
        secret: SECRET.to_owned(),
        max_attempts: 5,
        retry_base: Duration::from_millis(20),
        timeout: Duration::from_secs(5),
    }
}

/// The next POST, or a failure after a generous bound (so a broken worker fails the test
/// instead of hanging it).
async fn next(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Received>) -> Received {
    tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("no notification arrived")
        .expect("receiver closed")
}

/// Checks the signature the way a receiver would, and returns the body as JSON.
fn verified(r: &Received) -> Value {
    let timestamp: i64 = r.headers["x-tern-timestamp"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let expected = tern_hooks::webhook_signature(SECRET, timestamp, &r.body);
    assert_eq!(r.headers["x-tern-signature"].to_str().unwrap(), expected);
    assert_eq!(r.headers["x-tern-event"], "inbox.request.created");
    assert_eq!(r.headers["content-type"], "application/json");
    serde_json::from_slice(&r.body).unwrap()
}

impl Gw {
    async fn approval(&self, task: &str, summary: &str, action: Option<&str>) -> (u16, Value) {
        let mut body = json!({"projectName": "default", "taskId": task, "summary": summary});
        if let Some(a) = action {
            body["keyValueContext"] = json!({"action": a, "env": "test"});
        }
        self.post_json("/api/approval-requests", &body).await
    }

    async fn events(&self, task: &str) -> Vec<Value> {
        let r = self
            .get_as(&self.key, &format!("/api/tasks/{task}/events?limit=100"))
            .await;
        let body: Value = r.json().await.unwrap();
        body["items"].as_array().unwrap().clone()
    }

    async fn wait_delivered(&self, request_id: &str) -> Vec<tern_inbox::notify::NotificationRow> {
        wait_until(PATIENCE, Duration::from_millis(10), async || {
            let rows = self.gw.inbox.notifications_of(request_id).await.unwrap();
            if rows.iter().all(|r| r.status != "pending") {
                Ok(rows)
            } else {
                Err(format!("the notification of {request_id} stayed pending"))
            }
        })
        .await
    }
}

#[tokio::test]
async fn new_requests_are_notified_signed_and_retried_with_backoff() {
    let (url, mut rx) = receiver(1).await;
    let (_d, gw) = start(Setup {
        notify: vec![target(&url)],
        upkeep: true,
        ..Setup::default()
    })
    .await;
    let task = gw.task("default", "notify me").await;
    let (status, created) = gw.approval(&task, "Deploy v2?", None).await;
    assert_eq!(status, 201, "{created}");
    let id = created["eventId"].as_str().unwrap();

    // The first attempt gets a 500; the retry carries the same body and delivery id.
    let first = next(&mut rx).await;
    let second = next(&mut rx).await;
    assert_eq!(first.body, second.body);
    assert_eq!(
        first.headers["x-tern-delivery"],
        second.headers["x-tern-delivery"]
    );
    let body = verified(&second);
    assert_eq!(body["type"], "inbox.request.created");
    assert_eq!(body["requestId"], id);
    assert_eq!(body["kind"], "approval");
    assert_eq!(body["projectName"], "default");
    assert_eq!(body["taskId"], task.as_str());
    assert_eq!(body["summary"], "Deploy v2?");
    assert_eq!(
        body["url"],
        format!("https://inbox.example/inbox/requests/{id}")
    );
    assert!(body["createdAt"].as_str().unwrap().ends_with('Z'), "{body}");

    let rows = gw.wait_delivered(id).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].status.as_str(), rows[0].attempts),
        ("delivered", 2)
    );
    assert_eq!(rows[0].last_error, None);
}

#[tokio::test]
async fn a_gateway_stopped_before_delivery_delivers_after_restart() {
    let (url, mut rx) = receiver(0).await;
    let dir = tempfile::tempdir().unwrap();
    // No worker runs: as if the gateway died right after answering the create.
    let first = start_in(
        dir.path(),
        Setup {
            notify: vec![target(&url)],
            ..Setup::default()
        },
    )
    .await;
    let task = first.task("default", "survives").await;
    let (_, created) = first.approval(&task, "Still there?", None).await;
    let id = created["eventId"].as_str().unwrap().to_owned();
    let rows = first.gw.inbox.notifications_of(&id).await.unwrap();
    assert_eq!((rows.len(), rows[0].status.as_str()), (1, "pending"));
    assert!(rx.try_recv().is_err(), "nothing may be delivered yet");

    // The restarted gateway finds the pending row and delivers it.
    let second = start_in(
        dir.path(),
        Setup {
            notify: vec![target(&url)],
            upkeep: true,
            ..Setup::default()
        },
    )
    .await;
    let got = verified(&next(&mut rx).await);
    assert_eq!(got["requestId"], id.as_str());
    let rows = second.wait_delivered(&id).await;
    assert_eq!(rows[0].status, "delivered");
}

#[tokio::test]
async fn a_failing_receiver_is_retried_up_to_max_attempts_and_the_error_is_kept() {
    let (url, mut rx) = receiver(usize::MAX).await;
    let mut t = target(&url);
    t.max_attempts = 3;
    let (_d, gw) = start(Setup {
        notify: vec![t],
        upkeep: true,
        ..Setup::default()
    })
    .await;
    let task = gw.task("default", "never").await;
    let (_, created) = gw.approval(&task, "Anyone?", None).await;
    let id = created["eventId"].as_str().unwrap();
    for _ in 0..3 {
        next(&mut rx).await;
    }
    let rows = gw.wait_delivered(id).await;
    assert_eq!((rows[0].status.as_str(), rows[0].attempts), ("failed", 3));
    assert_eq!(
        rows[0].last_error.as_deref(),
        Some("HTTP 500 Internal Server Error")
    );
}

// ---- policies -------------------------------------------------------------------------------

/// The default setup with the policy `config` describes.
fn with_policy(config: tern_config::InboxPolicyConfig) -> Setup {
    Setup {
        policy: Policy::from_config(&config).unwrap(),
        ..Setup::default()
    }
}

fn auto_approve(action: Option<&str>, summary: Option<&str>) -> tern_config::AutoApproveConfig {
    tern_config::AutoApproveConfig {
        project: "default".into(),
        action: action.map(Into::into),
        summary: summary.map(Into::into),
        task: None,
    }
}

#[tokio::test]
async fn auto_approve_decides_at_once_as_the_platform() {
    let (_d, gw) = start(with_policy(tern_config::InboxPolicyConfig {
        auto_approve: vec![auto_approve(Some("read_logs"), None)],
        ..Default::default()
    }))
    .await;
    let task = gw.task("default", "auto").await;
    let (status, created) = gw.approval(&task, "Read the logs", Some("read_logs")).await;
    assert_eq!(status, 201, "{created}");
    let id = created["eventId"].as_str().unwrap();
    let r = gw.result_of("approval", id).await;
    assert_eq!(r.status(), 200);
    let result: Value = r.json().await.unwrap();
    assert_eq!(result["outcome"]["type"], "APPROVE");
    assert_eq!(result["decidedBy"], "PLATFORM");
    assert!(
        result["outcome"]["note"]
            .as_str()
            .unwrap()
            .contains("auto_approve[0] (project \"default\", action \"read_logs\")"),
        "{result}"
    );
    let events = gw.events(&task).await;
    let decided = events
        .iter()
        .find(|e| e["eventType"] == "APPROVAL_DECIDED")
        .expect("a decision on the timeline");
    assert_eq!(decided["source"], "PLATFORM");
    assert_eq!(decided["inResponseTo"], id);
    assert!(
        decided["payload"]["authority"]["tags"][0]
            .as_str()
            .unwrap()
            .starts_with("policy:auto_approve[0]"),
        "{decided}"
    );

    // Another action, or an elicitation with the same action, waits for a human.
    let (_, other) = gw
        .approval(&task, "Write the logs", Some("write_logs"))
        .await;
    let r = gw
        .result_of("approval", other["eventId"].as_str().unwrap())
        .await;
    assert_eq!(r.status(), 204);
    let (status, form) = gw
        .post_json(
            "/api/elicitation-requests",
            &json!({"projectName": "default", "taskId": task, "summary": "Which logs?",
                    "keyValueContext": {"action": "read_logs"},
                    "fields": [{"type": "Switch", "id": "all", "label": "All", "required": true}]}),
        )
        .await;
    assert_eq!(status, 201, "{form}");
    let r = gw
        .result_of("elicitation", form["eventId"].as_str().unwrap())
        .await;
    assert_eq!(r.status(), 204);
}

#[tokio::test]
async fn a_rule_limited_to_a_task_names_its_external_id_or_its_id() {
    let mut by_session = auto_approve(Some("read_logs"), None);
    by_session.task = Some("session-42".into());
    let (_d, gw) = start(with_policy(tern_config::InboxPolicyConfig {
        auto_approve: vec![by_session],
        ..Default::default()
    }))
    .await;
    let task_with = |external: &'static str| {
        let gw = &gw;
        async move {
            let (status, task) = gw
                .post_json(
                    "/api/tasks",
                    &json!({"name": external, "projectName": "default", "externalId": external}),
                )
                .await;
            assert_eq!(status, 201, "{task}");
            task["id"].as_str().unwrap().to_owned()
        }
    };
    let result_status = |id: Value| {
        let gw = &gw;
        async move {
            let id = id.as_str().unwrap().to_owned();
            gw.result_of("approval", &id).await.status().as_u16()
        }
    };
    // The session's task: approved at once, the rule named with its task.
    let session = task_with("session-42").await;
    let (status, created) = gw
        .approval(&session, "Read the logs", Some("read_logs"))
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(result_status(created["eventId"].clone()).await, 200);
    let events = gw.events(&session).await;
    let decided = events
        .iter()
        .find(|e| e["eventType"] == "APPROVAL_DECIDED")
        .expect("a decision on the timeline");
    assert_eq!(decided["source"], "PLATFORM");
    assert!(
        decided["payload"]["outcome"]["note"]
            .as_str()
            .unwrap()
            .contains("task \"session-42\""),
        "{decided}"
    );
    // Another session's task, or a task without an externalId, waits for a human.
    let other = task_with("session-43").await;
    let (_, created) = gw
        .approval(&other, "Read the logs", Some("read_logs"))
        .await;
    assert_eq!(result_status(created["eventId"].clone()).await, 204);
    let plain = gw.task("default", "no external id").await;
    let (_, created) = gw
        .approval(&plain, "Read the logs", Some("read_logs"))
        .await;
    assert_eq!(result_status(created["eventId"].clone()).await, 204);

    // A rule may also name the generated id: written after the task exists, read at the
    // next start.
    let dir = tempfile::tempdir().unwrap();
    let before = start_in(dir.path(), Setup::default()).await;
    let named = before.task("default", "named by id").await;
    let unnamed = before.task("default", "not named").await;
    let mut by_id = auto_approve(Some("read_logs"), None);
    by_id.task = Some(named.clone());
    let after = start_in(
        dir.path(),
        with_policy(tern_config::InboxPolicyConfig {
            auto_approve: vec![by_id],
            ..Default::default()
        }),
    )
    .await;
    for (task, expected) in [(&named, 200), (&unnamed, 204)] {
        let (status, created) = after
            .approval(task, "Read the logs", Some("read_logs"))
            .await;
        assert_eq!(status, 201, "{created}");
        let id = created["eventId"].as_str().unwrap();
        let r = after.result_of("approval", id).await;
        assert_eq!(r.status().as_u16(), expected, "task {task}");
    }
}

#[tokio::test]
async fn always_review_beats_auto_approve() {
    let (_d, gw) = start(with_policy(tern_config::InboxPolicyConfig {
        always_review: vec!["deploy_prod".into()],
        auto_approve: vec![auto_approve(None, Some("(?i)^deploy"))],
        ..Default::default()
    }))
    .await;
    let task = gw.task("default", "deploys").await;
    let (_, prod) = gw
        .approval(&task, "Deploy v2 to prod", Some("deploy_prod"))
        .await;
    let prod_id = prod["eventId"].as_str().unwrap();
    let r = gw.result_of("approval", prod_id).await;
    assert_eq!(r.status(), 204, "always_review must leave it to a human");
    let events = gw.events(&task).await;
    let note = events
        .iter()
        .find(|e| e["eventType"] == "NOTE" && e["inResponseTo"] == prod_id)
        .expect("the override is on the timeline");
    assert_eq!(note["source"], "PLATFORM");
    let message = note["payload"]["message"].as_str().unwrap();
    assert!(
        message.contains("always_review") && message.contains("auto_approve[0]"),
        "{message}"
    );

    // The same rule approves another action at once.
    let (_, staging) = gw
        .approval(&task, "Deploy v2 to staging", Some("deploy_staging"))
        .await;
    let r = gw
        .result_of("approval", staging["eventId"].as_str().unwrap())
        .await;
    assert_eq!(r.status(), 200);

    // A human still decides the always-reviewed one.
    let result = gw
        .gw
        .inbox
        .decide_approval(
            prod_id,
            tern_inbox::Outcome::new(tern_inbox::OutcomeType::Reject),
            "alice",
        )
        .await
        .unwrap();
    assert_eq!(result.decided_by.as_deref(), Some("alice"));
}

#[tokio::test]
async fn rate_limits_answer_429_with_retry_after_and_store_nothing() {
    let (_d, gw) = start(with_policy(tern_config::InboxPolicyConfig {
        rate_limit: vec![tern_config::RateLimitConfig {
            action: "send_email".into(),
            max: 2,
            window: "1h".into(),
        }],
        ..Default::default()
    }))
    .await;
    let task = gw.task("default", "mailer").await;
    for i in 0..2 {
        let (status, body) = gw
            .approval(&task, &format!("Mail {i}"), Some("send_email"))
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let events_before = gw.events(&task).await.len();
    let r = gw
        .post(
            "/api/approval-requests",
            &json!({"projectName": "default", "taskId": task, "summary": "Mail 3",
                    "keyValueContext": {"action": "send_email"}}),
        )
        .await;
    assert_eq!(r.status(), 429);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=3600).contains(&retry), "{retry}");
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("send_email"),
        "{body}"
    );
    assert_eq!(
        gw.events(&task).await.len(),
        events_before,
        "nothing stored"
    );

    // Other actions, and requests without one, are not limited.
    let (status, _) = gw.approval(&task, "Read", Some("read_logs")).await;
    assert_eq!(status, 201);
    let (status, _) = gw.approval(&task, "Plain", None).await;
    assert_eq!(status, 201);
}

#[tokio::test]
async fn expiry_settles_overdue_requests_with_a_timeout_and_the_default_outcome() {
    let (_d, gw) = start(with_policy(tern_config::InboxPolicyConfig {
        expires_after: Some("1h".into()),
        ..Default::default()
    }))
    .await;
    let task = gw.task("default", "slow humans").await;
    let (_, approval) = gw.approval(&task, "Approve in time?", None).await;
    let approval_id = approval["eventId"].as_str().unwrap().to_owned();
    let (_, form) = gw
        .post_json(
            "/api/elicitation-requests",
            &json!({"projectName": "default", "taskId": task, "summary": "Fill in?",
                    "fields": [{"type": "Switch", "id": "ok", "label": "OK", "required": true}]}),
        )
        .await;
    let form_id = form["eventId"].as_str().unwrap().to_owned();

    // Not yet due: nothing happens.
    let now = tern_store::now_ms();
    assert_eq!(gw.gw.inbox.expire_overdue(now).await.unwrap(), 0);
    // Two hours later both are overdue.
    let later = now + 2 * 3600 * 1000;
    assert_eq!(gw.gw.inbox.expire_overdue(later).await.unwrap(), 2);
    assert_eq!(gw.gw.inbox.expire_overdue(later).await.unwrap(), 0);

    let r = gw.result_of("approval", &approval_id).await;
    assert_eq!(r.status(), 200);
    let result: Value = r.json().await.unwrap();
    assert_eq!(result["outcome"]["type"], "REJECT");
    assert_eq!(result["outcome"]["reasonCode"], "expired");
    assert_eq!(result["decidedBy"], "PLATFORM");

    let r = gw.result_of("elicitation", &form_id).await;
    assert_eq!(r.status(), 200);
    let result: Value = r.json().await.unwrap();
    assert_eq!(result["answeredBy"], "PLATFORM");
    assert!(result.get("fields").is_none(), "{result}");

    let events = gw.events(&task).await;
    for id in [&approval_id, &form_id] {
        let timeout = events
            .iter()
            .find(|e| e["eventType"] == "TIMEOUT" && e["inResponseTo"] == id.as_str())
            .expect("a TIMEOUT event");
        assert_eq!(timeout["source"], "PLATFORM");
        assert_eq!(timeout["payload"]["state"], "expired");
    }
    // The expiry is also announced when the request is created.
    assert!(events.iter().any(|e| {
        e["eventType"] == "NOTE"
            && e["payload"]["message"]
                .as_str()
                .unwrap()
                .contains("expires after 1h unless decided; it then becomes REJECT")
    }));

    // Listed as expired for reviewers; a late decision is refused.
    let view = gw.gw.inbox.request_view(&approval_id).await.unwrap();
    assert_eq!(
        serde_json::to_value(view.summary.status).unwrap(),
        json!("expired")
    );
    let late = gw
        .gw
        .inbox
        .decide_approval(
            &approval_id,
            tern_inbox::Outcome::new(tern_inbox::OutcomeType::Approve),
            "alice",
        )
        .await;
    assert!(
        matches!(late, Err(tern_inbox::InboxError::AlreadyDecided)),
        "{late:?}"
    );
}

#[tokio::test]
async fn the_sweeper_runs_at_start() {
    // A request created by an earlier gateway, overdue when the next one starts.
    let dir = tempfile::tempdir().unwrap();
    let expiring = || {
        with_policy(tern_config::InboxPolicyConfig {
            expires_after: Some("1s".into()),
            expiry_outcome: "ESCALATE".into(),
            ..Default::default()
        })
    };
    let first = start_in(dir.path(), expiring()).await;
    let task = first.task("default", "restart").await;
    let (_, created) = first.approval(&task, "Decide soon", None).await;
    let id = created["eventId"].as_str().unwrap().to_owned();
    // Wait (without asserting on time) until the request is overdue.
    eventually("the request to be overdue", async || {
        (first.gw.inbox.next_expiry().await.unwrap().unwrap() <= tern_store::now_ms()).then_some(())
    })
    .await;
    let second = start_in(
        dir.path(),
        Setup {
            upkeep: true,
            ..expiring()
        },
    )
    .await;
    // Watched through the reviewers' view, which never expires anything itself (the agent's
    // result read would).
    assert!(second.expired_by_the_sweeper(&id).await);
    let r = second.result_of("approval", &id).await;
    assert_eq!(r.status(), 200);
    let result: Value = r.json().await.unwrap();
    assert_eq!(result["outcome"]["type"], "ESCALATE", "{result}");
}

impl Gw {
    /// Whether the request turns `expired` without anyone touching it; gives up after
    /// about 20 s, a third of the sweeper's longest sleep.
    async fn expired_by_the_sweeper(&self, id: &str) -> bool {
        for _ in 0..1000 {
            let view = self.gw.inbox.request_view(id).await.unwrap();
            if view.summary.status == tern_inbox::review::RequestStatus::Expired {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}

#[tokio::test]
async fn a_new_request_with_an_expiry_wakes_the_sleeping_sweeper() {
    let (_d, gw) = start(Setup {
        upkeep: true,
        ..with_policy(tern_config::InboxPolicyConfig {
            expires_after: Some("1s".into()),
            ..Default::default()
        })
    })
    .await;
    // The sweeper has run at start and found nothing due: it sleeps its longest.
    let task = gw.task("default", "wake up").await;
    let (status, created) = gw.approval(&task, "Decide within a second", None).await;
    assert_eq!(status, 201, "{created}");
    let id = created["eventId"].as_str().unwrap();
    assert!(
        gw.expired_by_the_sweeper(id).await,
        "the sweeper was not woken for the new expiry"
    );
    let events = gw.events(&task).await;
    assert!(
        events
            .iter()
            .any(|e| e["eventType"] == "TIMEOUT" && e["inResponseTo"] == id),
        "{events:?}"
    );
}
