//! Uploads over HTTP: agents upload files for the human to see; the owning key and reviewers
//! download them.
//!
//! # The flow
//!
//! 1. `POST /api/uploads` (agent key), `multipart/form-data` with the file in field `file`
//!    (what the Pump Up SDK sends). The route has its own body limit, `max_upload_bytes`
//!    plus room for the multipart framing, instead of the gateway's JSON limit; a declared
//!    `Content-Length` past it is refused before anything is read. The file's bytes are
//!    streamed chunk by chunk into [`tern_inbox::uploads::UploadWriter`] — hashed, written to
//!    a temporary file, moved to `uploads/<sha256>` — so a large file is never held whole in
//!    memory. A file past `max_upload_bytes` → 413 `{"error"}`, nothing kept. The answer is
//!    201 `{"id", "status": "READY"}`; a repeat with the same `Idempotency-Key` gets the
//!    same answer and records no new upload; the key with another file (or type, or name) is
//!    422 `idempotency_key_reused`. Either way the repeat's bytes are not kept: the file
//!    stays temporary until the key's claim in the service's transaction lets it in.
//! 2. `GET /api/uploads/{id}` (the owning key; other keys get 404) → `{id, contentType,
//!    size, url}`, `url` being `<public_url>/api/uploads/{id}/content` (without `[inbox]
//!    public_url`, the address the gateway is bound to; never the request's `Host`).
//! 3. Downloads — `GET /api/uploads/{id}/content` (the owning key) and
//!    `GET /inbox/uploads/{id}` (reviewers, outside the agent key check) — stream the file
//!    with a safe `Content-Type` ([`tern_inbox::uploads::Upload::served_content_type`]),
//!    `Content-Disposition` (images inline, the rest as attachments), `X-Content-Type-Options:
//!    nosniff` and a sandboxing `Content-Security-Policy`, so no upload ever runs as a page of
//!    the inbox's origin.

use std::path::PathBuf;

use axum::Router;
use axum::body::Body;
use axum::extract::multipart::{Multipart, MultipartRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json};
use serde_json::json;
use tern_inbox::InboxError;
use tern_inbox::uploads::{UploadDir, UploadError, normalize_content_type, sanitize_file_name};

use crate::inbox_api::InboxApiError;
use crate::reviewer_auth::Reviewer;
use crate::reviewer_router;
use crate::{AppState, CallerKey};

/// Room for the multipart framing (boundaries, part headers, small extra fields) on top of
/// `max_upload_bytes`: the file itself is measured exactly while it streams.
const FRAMING_ALLOWANCE: u64 = 64 * 1024;

/// The routes behind the agent key check.
pub(crate) fn agent_routes(max_upload_bytes: u64) -> Router<AppState> {
    let body_limit =
        usize::try_from(max_upload_bytes.saturating_add(FRAMING_ALLOWANCE)).unwrap_or(usize::MAX);
    Router::new()
        .route(
            "/api/uploads",
            post(upload).layer(DefaultBodyLimit::max(body_limit)),
        )
        .route("/api/uploads/{id}", get(resolve))
        .route("/api/uploads/{id}/content", get(agent_download))
}

/// The reviewers' download, outside the agent key check.
pub(crate) fn reviewer_routes() -> Vec<reviewer_router::Route> {
    vec![reviewer_router::get(
        "/inbox/uploads/{id}",
        reviewer_download,
    )]
}

fn too_large(limit: u64) -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        Json(json!({"error": format!("the file is larger than the limit of {limit} bytes")})),
    )
        .into_response()
}

fn bad_request(code: &str, message: impl Into<String>) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"code": code, "message": message.into()})),
    )
        .into_response()
}

fn internal(e: impl std::fmt::Display) -> Response {
    tracing::error!(error = %e, "cannot store or read an upload");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        Json(json!({"error": "internal error"})),
    )
        .into_response()
}

/// The uploads directory; `None` when this gateway has none (see [`no_uploads`]).
fn upload_dir(gw: &AppState) -> Option<UploadDir> {
    gw.inbox_settings.uploads_dir.clone().map(UploadDir::new)
}

fn no_uploads() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"error": "this gateway stores no uploads (no uploads directory)"})),
    )
        .into_response()
}

/// `POST /api/uploads`.
async fn upload(
    State(gw): State<AppState>,
    Extension(CallerKey { id: owner, .. }): Extension<CallerKey>,
    headers: HeaderMap,
    multipart: Result<Multipart, MultipartRejection>,
) -> Response {
    // Before any byte is read: a key that cannot be honoured must not cost a stored file.
    let idem = match crate::inbox_api::idem(&headers) {
        Ok(idem) => idem,
        Err(e) => return e.into_response(),
    };
    let limit = gw.inbox_settings.max_upload_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit.saturating_add(FRAMING_ALLOWANCE)) {
        return too_large(limit);
    }
    let mut multipart = match multipart {
        Ok(m) => m,
        Err(e) => {
            return bad_request(
                "invalid_multipart",
                format!("send the file as multipart/form-data in field `file`: {e}"),
            );
        }
    };
    let Some(dir) = upload_dir(&gw) else {
        return no_uploads();
    };
    loop {
        let mut field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => return too_large(limit),
            Err(e) => return bad_request("invalid_multipart", e.body_text()),
        };
        if field.name() != Some("file") {
            // Other fields are skipped; the next `next_field` reads past them.
            continue;
        }
        let content_type = normalize_content_type(field.content_type());
        let file_name = sanitize_file_name(field.file_name());
        let mut writer = match dir.begin(limit).await {
            Ok(w) => w,
            Err(e) => return internal(e),
        };
        loop {
            match field.chunk().await {
                Ok(Some(chunk)) => match writer.write(&chunk).await {
                    Ok(()) => {}
                    Err(UploadError::TooLarge { limit }) => return too_large(limit),
                    Err(e) => return internal(e),
                },
                Ok(None) => break,
                Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                    return too_large(limit);
                }
                Err(e) => return bad_request("invalid_multipart", e.body_text()),
            }
        }
        // Hashed but not yet kept: the service keeps it only if the idempotency key lets it.
        let hashed = match writer.hash().await {
            Ok(hashed) => hashed,
            Err(e) => return internal(e),
        };
        let size = hashed.stored().size;
        return match gw
            .inbox
            .create_upload(&owner, hashed, &content_type, file_name.as_deref(), idem)
            .await
        {
            Ok(receipt) => {
                tracing::debug!(id = %receipt.id, size, owner = %owner, "upload stored");
                (StatusCode::CREATED, Json(receipt)).into_response()
            }
            Err(e) => InboxApiError::from(e).into_response(),
        };
    }
    bad_request(
        "missing_file",
        "the multipart body has no field named `file`",
    )
}

/// `GET /api/uploads/{id}`.
async fn resolve(
    State(gw): State<AppState>,
    Extension(CallerKey { id: owner, .. }): Extension<CallerKey>,
    Path(id): Path<String>,
) -> Response {
    match gw.inbox.owned_upload(&owner, &id).await {
        Ok(upload) => {
            let base = public_base(&gw);
            Json(json!({
                "id": upload.id,
                "contentType": upload.content_type,
                "size": upload.size,
                "url": format!("{base}/api/uploads/{}/content", upload.id),
            }))
            .into_response()
        }
        Err(e) => InboxApiError::from(e).into_response(),
    }
}

/// The base of links: `[inbox] public_url`, else the address the gateway is bound to (a
/// wildcard as loopback). Never the request's `Host`: a client could otherwise have the
/// gateway hand out links to a host of its choosing.
pub(crate) fn public_base(gw: &AppState) -> String {
    if let Some(url) = &gw.inbox_settings.public_url {
        return url.trim_end_matches('/').to_owned();
    }
    match gw.local_addr {
        Some(addr) => crate::admin_file::local_url(addr),
        // A gateway embedded without `GatewayParts::local_addr`: nothing better is known.
        None => "http://localhost".to_owned(),
    }
}

/// `GET /api/uploads/{id}/content`: the owning key's download.
async fn agent_download(
    State(gw): State<AppState>,
    Extension(CallerKey { id: owner, .. }): Extension<CallerKey>,
    Path(id): Path<String>,
) -> Response {
    match gw.inbox.owned_upload(&owner, &id).await {
        Ok(upload) => serve(&gw, upload).await,
        Err(e) => InboxApiError::from(e).into_response(),
    }
}

/// `GET /inbox/uploads/{id}`: a reviewer's download.
async fn reviewer_download(
    State(gw): State<AppState>,
    _reviewer: Reviewer,
    Path(id): Path<String>,
) -> Response {
    match gw.inbox.upload(&id).await {
        Ok(upload) => serve(&gw, upload).await,
        Err(e) => InboxApiError::from(e).into_response(),
    }
}

/// Streams an upload's file with the safe headers (see the module docs).
async fn serve(gw: &AppState, upload: tern_inbox::uploads::Upload) -> Response {
    let Some(dir) = upload_dir(gw) else {
        return no_uploads();
    };
    let Some(path): Option<PathBuf> = dir.path_of(&upload.sha256) else {
        return internal(format!("upload {} has a malformed hash", upload.id));
    };
    let file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::error!(id = %upload.id, path = %path.display(), "an upload's file is missing");
            return InboxApiError::from(InboxError::NotFound(format!(
                "the file of upload {}",
                upload.id
            )))
            .into_response();
        }
        Err(e) => return internal(e),
    };
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(file));
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    let pairs = [
        (
            header::CONTENT_TYPE,
            upload.served_content_type().to_owned(),
        ),
        (header::CONTENT_LENGTH, upload.size.to_string()),
        (header::CONTENT_DISPOSITION, upload.content_disposition()),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; img-src 'self'; sandbox".to_owned(),
        ),
        (header::CACHE_CONTROL, "private, no-cache".to_owned()),
    ];
    for (name, value) in pairs {
        match HeaderValue::from_str(&value) {
            Ok(v) => {
                h.insert(name, v);
            }
            Err(e) => return internal(e),
        }
    }
    resp
}
