//! How the waits machinery talks to an inbox: [`InboxClient`], with two implementations —
//! [`EmbeddedInbox`] (the inbox in this gateway, called directly) and
//! [`crate::remote::RemoteInbox`] (another server's Pump Up agent API over HTTP).
//!
//! Every create takes an idempotency key, so that the caller can retry after a crash or a
//! lost answer and get the original request back instead of a second one.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;

use serde_json::Value;
use tern_inbox::Inbox;
use tern_inbox::model::{
    AddNote, CreateApproval, CreateElicitation, CreateTask, RecordAction, ReportException,
};
use tern_inbox::uploads::{UploadDir, UploadError};
use tokio::io::AsyncReadExt;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The owner of what a gateway's own agents create in its embedded inbox. The agent API's
/// tasks and requests are owned by the API key's id instead: 32 hex digits, so no key can
/// ever own these, whatever its name (and the gateway refuses to name a key so).
pub const EMBEDDED_OWNER: &str = "tern-agent";

/// An approval or an elicitation request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    Approval,
    Elicitation,
}

impl RequestKind {
    /// The path segment: `approval-requests` / `elicitation-requests`.
    pub fn path(self) -> &'static str {
        match self {
            RequestKind::Approval => "approval-requests",
            RequestKind::Elicitation => "elicitation-requests",
        }
    }
}

/// An entry of the task's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogKind {
    Action,
    Exception,
    Note,
}

impl LogKind {
    /// The path: `agent-actions` / `exceptions` / `notes`.
    pub fn path(self) -> &'static str {
        match self {
            LogKind::Action => "agent-actions",
            LogKind::Exception => "exceptions",
            LogKind::Note => "notes",
        }
    }
}

/// A session's task in the inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRef {
    pub task_id: String,
    pub project_name: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The inbox refused: a status and its body (Pump Up's error shapes). 4xx are the
    /// caller's fault and not worth retrying as is (except 408/409/429).
    #[error("the inbox answered {status}: {body}")]
    Refused { status: u16, body: Value },
    /// The inbox could not be reached or answered garbage; worth retrying later.
    #[error("the inbox is unreachable: {0}")]
    Unreachable(String),
}

impl ClientError {
    /// Whether trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Unreachable(_) => true,
            ClientError::Refused { status, .. } => {
                matches!(status, 408 | 409 | 429) || *status >= 500
            }
        }
    }
}

impl From<tern_inbox::InboxError> for ClientError {
    fn from(e: tern_inbox::InboxError) -> Self {
        let status = e.http_status();
        if status >= 500 {
            ClientError::Unreachable(e.to_string())
        } else {
            ClientError::Refused {
                status,
                body: e.body(),
            }
        }
    }
}

pub type ClientResult<T> = Result<T, ClientError>;

/// What the waits machinery needs from an inbox. Bodies are Pump Up JSON (camelCase).
pub trait InboxClient: Send + Sync {
    /// The session's task, created on first use with the idempotency key
    /// `tern-task:<session id>` and `externalId` = the session id, in `project`.
    fn session_task<'a>(
        &'a self,
        session_id: &'a str,
        project: &'a str,
    ) -> BoxFuture<'a, ClientResult<TaskRef>>;

    /// Creates a request (`body` is the full Pump Up create body); returns its id.
    fn create_request<'a>(
        &'a self,
        kind: RequestKind,
        body: Value,
        idem: &'a str,
    ) -> BoxFuture<'a, ClientResult<String>>;

    /// Appends an action, exception or note; returns the event id.
    fn log<'a>(
        &'a self,
        kind: LogKind,
        body: Value,
        idem: &'a str,
    ) -> BoxFuture<'a, ClientResult<String>>;

    /// The result of a request: `None` while pending.
    fn result<'a>(
        &'a self,
        kind: RequestKind,
        request_id: &'a str,
    ) -> BoxFuture<'a, ClientResult<Option<Value>>>;

    /// Withdraws a pending request (best effort against servers without the extension).
    fn withdraw<'a>(
        &'a self,
        kind: RequestKind,
        request_id: &'a str,
        reason: &'a str,
    ) -> BoxFuture<'a, ClientResult<()>>;

    /// Uploads the file at `path` (read asynchronously, off the runtime's threads) under the
    /// name `file_name`; returns the upload id to put in a request's `attachments`. The
    /// caller has checked that `path` may be read (the tools confine it to the workspace).
    fn upload<'a>(
        &'a self,
        path: &'a Path,
        file_name: &'a str,
    ) -> BoxFuture<'a, ClientResult<String>>;
}

/// A content type for a file name, from its extension; `application/octet-stream` when
/// unknown (the inbox then offers it as a download, never displays it inline).
pub fn content_type_for(file_name: &str) -> &'static str {
    let ext = file_name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "json" => "application/json",
        "csv" => "text/csv",
        "md" | "markdown" => "text/markdown",
        "txt" | "log" | "diff" | "patch" | "rs" | "py" | "toml" | "yaml" | "yml" | "sh" => {
            "text/plain"
        }
        "html" | "htm" => "text/html",
        "svg" => "image/svg+xml",
        "zip" => "application/zip",
        "gz" => "application/gzip",
        _ => "application/octet-stream",
    }
}

/// The inbox of this gateway, called in-process.
#[derive(Clone, Debug)]
pub struct EmbeddedInbox {
    pub inbox: Inbox,
    /// Owner of the tasks and requests created (see [`EMBEDDED_OWNER`]).
    pub owner: String,
    /// Where uploaded files are stored (`$TERN_HOME/uploads`, as the gateway's inbox API
    /// uses); `None` refuses uploads.
    pub uploads: Option<UploadDir>,
    /// The largest file uploaded, in bytes (`inbox.max_upload_bytes`).
    pub max_upload_bytes: u64,
}

impl EmbeddedInbox {
    /// Without an uploads directory: attachments are refused until
    /// [`EmbeddedInbox::with_uploads`] names one.
    pub fn new(inbox: Inbox) -> Self {
        EmbeddedInbox {
            inbox,
            owner: EMBEDDED_OWNER.to_owned(),
            uploads: None,
            max_upload_bytes: 0,
        }
    }

    /// Stores uploads under `dir`, at most `max_bytes` each.
    pub fn with_uploads(mut self, dir: UploadDir, max_bytes: u64) -> Self {
        self.uploads = Some(dir);
        self.max_upload_bytes = max_bytes;
        self
    }
}

fn parse<T: serde::de::DeserializeOwned>(body: Value) -> ClientResult<T> {
    serde_json::from_value(body).map_err(|e| ClientError::Refused {
        status: 400,
        body: serde_json::json!({"code": "invalid_request", "message": e.to_string()}),
    })
}

impl InboxClient for EmbeddedInbox {
    fn session_task<'a>(
        &'a self,
        session_id: &'a str,
        project: &'a str,
    ) -> BoxFuture<'a, ClientResult<TaskRef>> {
        Box::pin(async move {
            let body = CreateTask {
                name: format!("session {session_id}"),
                project_name: project.to_owned(),
                external_id: Some(session_id.to_owned()),
                metadata_patch: None,
            };
            let task = self
                .inbox
                .create_task(&self.owner, body, Some(&format!("tern-task:{session_id}")))
                .await?;
            Ok(TaskRef {
                task_id: task.id,
                project_name: project.to_owned(),
            })
        })
    }

    fn create_request<'a>(
        &'a self,
        kind: RequestKind,
        body: Value,
        idem: &'a str,
    ) -> BoxFuture<'a, ClientResult<String>> {
        Box::pin(async move {
            let id = match kind {
                RequestKind::Approval => {
                    let b: CreateApproval = parse(body)?;
                    self.inbox
                        .create_approval(&self.owner, b, Some(idem))
                        .await?
                }
                RequestKind::Elicitation => {
                    let b: CreateElicitation = parse(body)?;
                    self.inbox
                        .create_elicitation(&self.owner, b, Some(idem))
                        .await?
                }
            };
            Ok(id.event_id)
        })
    }

    fn log<'a>(
        &'a self,
        kind: LogKind,
        body: Value,
        idem: &'a str,
    ) -> BoxFuture<'a, ClientResult<String>> {
        Box::pin(async move {
            let id = match kind {
                LogKind::Action => {
                    let b: RecordAction = parse(body)?;
                    self.inbox.record_action(&self.owner, b, Some(idem)).await?
                }
                LogKind::Exception => {
                    let b: ReportException = parse(body)?;
                    self.inbox
                        .report_exception(&self.owner, b, Some(idem))
                        .await?
                }
                LogKind::Note => {
                    let b: AddNote = parse(body)?;
                    self.inbox.add_note(&self.owner, b, Some(idem)).await?
                }
            };
            Ok(id.event_id)
        })
    }

    fn result<'a>(
        &'a self,
        kind: RequestKind,
        request_id: &'a str,
    ) -> BoxFuture<'a, ClientResult<Option<Value>>> {
        Box::pin(async move {
            let v = match kind {
                RequestKind::Approval => self
                    .inbox
                    .approval_result(&self.owner, request_id)
                    .await?
                    .map(serde_json::to_value),
                RequestKind::Elicitation => self
                    .inbox
                    .elicitation_result(&self.owner, request_id)
                    .await?
                    .map(serde_json::to_value),
            };
            v.transpose()
                .map_err(|e| ClientError::Unreachable(format!("cannot encode a result: {e}")))
        })
    }

    fn withdraw<'a>(
        &'a self,
        _kind: RequestKind,
        request_id: &'a str,
        reason: &'a str,
    ) -> BoxFuture<'a, ClientResult<()>> {
        Box::pin(async move {
            self.inbox
                .withdraw_request(&self.owner, request_id, Some(reason))
                .await?;
            Ok(())
        })
    }

    fn upload<'a>(
        &'a self,
        path: &'a Path,
        file_name: &'a str,
    ) -> BoxFuture<'a, ClientResult<String>> {
        Box::pin(async move {
            let dir = self.uploads.as_ref().ok_or_else(|| ClientError::Refused {
                status: 501,
                body: serde_json::json!({
                    "code": "uploads_disabled",
                    "message": "this inbox has no uploads directory",
                }),
            })?;
            let limit = self.max_upload_bytes;
            let too_large = || ClientError::Refused {
                status: 413,
                body: serde_json::json!({
                    "code": "payload_too_large",
                    "message": format!("{file_name} is larger than {limit} bytes"),
                }),
            };
            let io = |e: std::io::Error| ClientError::Refused {
                status: 400,
                body: serde_json::json!({
                    "code": "invalid_request",
                    "message": format!("cannot read {file_name}: {e}"),
                }),
            };
            let store_err = |e: UploadError| match e {
                UploadError::TooLarge { .. } => too_large(),
                UploadError::Io(e) => {
                    ClientError::Unreachable(format!("cannot store {file_name}: {e}"))
                }
            };
            let mut file = tokio::fs::File::open(path).await.map_err(io)?;
            let mut writer = dir.begin(limit).await.map_err(store_err)?;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = file.read(&mut buf).await.map_err(io)?;
                if n == 0 {
                    break;
                }
                writer.write(&buf[..n]).await.map_err(store_err)?;
            }
            let stored = writer.finish().await.map_err(store_err)?;
            let upload = self
                .inbox
                .add_upload(
                    &self.owner,
                    &stored,
                    content_type_for(file_name),
                    tern_inbox::uploads::sanitize_file_name(Some(file_name)).as_deref(),
                )
                .await?;
            Ok(upload.id)
        })
    }
}
