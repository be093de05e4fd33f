//! Uploads, notifications and policies of the human inbox over real HTTP: multipart uploads
//! with their size limit and content addressing, downloads for the owning key and reviewers
//! only, signed notifications to a real loopback receiver (also after a restart), and the
//! `[inbox.policy]` rules (auto-approve, always-review, rate limits, expiry).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tern_agent::{Agent, AgentSettings};
use tern_gateway::{Authenticator, Gateway, GatewaySettings, InboxSettings, auth};
use tern_store::Store;
use tern_tools::{DenyAll, Registry, ToolLimits};

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
    inbox: fn(tern_inbox::Inbox) -> tern_inbox::Inbox,
    max_upload_bytes: u64,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            inbox: |i| i,
            max_upload_bytes: 1024 * 1024,
        }
    }
}

/// A gateway on `dir`'s database (a second call on the same `dir` is a restart).
async fn start_in(dir: &std::path::Path, setup: Setup) -> Gw {
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let store = Store::open(&dir.join("tern.db")).await.unwrap();
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
    let agent = Arc::new(Agent::new(
        store.clone(),
        Err("no model in these tests".into()),
        Arc::new(Registry::builtin()),
        AgentSettings {
            model: "none".into(),
            max_iterations: 1,
            stream: false,
            system_prompt: None,
            limits: ToolLimits::default(),
        },
    ));
    let uploads = dir.join("uploads");
    let inbox = (setup.inbox)(tern_inbox::Inbox::new(store.clone()));
    let gw = Gateway::with_inbox(
        agent,
        Authenticator::new(store, None).unwrap(),
        Arc::new(DenyAll {
            reason: "test".into(),
        }),
        GatewaySettings {
            max_concurrent_turns: 2,
            // Much smaller than the uploads: the JSON limit must not apply to them.
            max_body_bytes: 16 * 1024,
            drain_timeout: Duration::from_secs(5),
            workdir: work,
            toolsets: vec![],
            model: "none".into(),
        },
        inbox,
        InboxSettings {
            uploads_dir: Some(uploads.clone()),
            max_upload_bytes: setup.max_upload_bytes,
            public_url: Some("https://inbox.example".into()),
        },
    );
    gw.inbox.ensure_default_project().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = gw.router();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
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
        (r.status().as_u16(), r.json().await.unwrap())
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
        (r.status().as_u16(), r.json().await.unwrap())
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
    let mut left = Vec::new();
    for _ in 0..200 {
        left = gw.stored_files();
        if left.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(left.len(), 1, "{left:?}");
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
