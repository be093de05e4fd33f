//! The human inbox's Pump Up *agent API* over HTTP: a thin layer over [`tern_inbox::Inbox`].
//!
//! # The flow
//!
//! 1. [`crate::require_key`] checks the bearer key and puts it in the request's extensions
//!    as [`CallerKey`]; its immutable id owns every task, request and upload created with it
//!    (a name can pass to a new key once the old one is revoked; an id cannot), and other
//!    keys get 404 for them.
//! 2. A POST body is read up to the gateway's body limit and parsed into the service's
//!    request type; an optional `Idempotency-Key` header (printable ASCII, at most 255
//!    characters, else 400) is passed on as `idem`, so a repeat returns the original response
//!    (and a repeat with another body is 422). `X-API-Version` is accepted and ignored.
//! 3. The handler calls the service and answers its value as JSON: approval and elicitation
//!    creates with 201 (the SDK documents every create as `Created`), a pending request's result
//!    with 204 and an empty body, a decided one with 200.
//! 4. Failures answer in the Pump Up shapes, not the Hermes envelope: `{"code","message"}`
//!    for a 400 (a body that is not the JSON expected is `invalid_json`) and `{"error"}`
//!    otherwise, from [`InboxError::http_status`] and [`InboxError::body`].

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::de::DeserializeOwned;
use serde_json::json;
use tern_inbox::InboxError;
use tern_inbox::model::{
    AddNote, CreateApproval, CreateElicitation, CreateTask, RecordAction, ReportException,
    TaskFilter,
};
use tern_inbox::review::RequestKind;

use crate::{AppState, CallerKey, read_json};

/// A failure of an inbox endpoint, answered in the Pump Up shapes.
#[derive(Debug)]
pub(crate) enum InboxApiError {
    /// The service refused or failed.
    Inbox(InboxError),
    /// The request could not be read (a bad body or query).
    Request {
        status: StatusCode,
        code: &'static str,
        message: String,
    },
}

impl From<InboxError> for InboxApiError {
    fn from(e: InboxError) -> Self {
        InboxApiError::Inbox(e)
    }
}

impl InboxApiError {
    fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        InboxApiError::Request {
            status: StatusCode::BAD_REQUEST,
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for InboxApiError {
    fn into_response(self) -> Response {
        match self {
            InboxApiError::Inbox(e) => {
                // Details stay in the log; the body says only "internal error".
                match &e {
                    InboxError::Store(inner) => {
                        tracing::error!(error = %inner, "inbox store error");
                    }
                    InboxError::Files(inner) => {
                        tracing::error!(error = %inner, "cannot store an upload's file");
                    }
                    _ => {}
                }
                let status = StatusCode::from_u16(e.http_status())
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let mut resp = (status, Json(e.body())).into_response();
                // A rate limit says when to come back.
                if let Some(secs) = e.retry_after_secs() {
                    resp.headers_mut()
                        .insert(axum::http::header::RETRY_AFTER, secs.into());
                }
                resp
            }
            InboxApiError::Request {
                status,
                code,
                message,
            } => {
                let body = if status == StatusCode::BAD_REQUEST {
                    json!({"code": code, "message": message})
                } else {
                    json!({"error": message})
                };
                (status, Json(body)).into_response()
            }
        }
    }
}

/// A JSON body read up to the gateway's limit, with failures in the Pump Up shapes.
pub(crate) struct InboxJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for InboxJson<T> {
    type Rejection = InboxApiError;

    async fn from_request(req: Request<Body>, state: &AppState) -> Result<Self, Self::Rejection> {
        match read_json(req, state).await {
            Ok(Some(v)) => Ok(InboxJson(v)),
            Ok(None) => Err(InboxApiError::bad_request(
                "invalid_json",
                "The request body is empty; send a JSON object",
            )),
            Err(e) => Err(InboxApiError::Request {
                status: e.status,
                code: if e.status == StatusCode::BAD_REQUEST {
                    "invalid_json"
                } else {
                    e.code
                },
                message: e.message,
            }),
        }
    }
}

/// An optional JSON body: `None` when the body is empty.
pub(crate) struct MaybeInboxJson<T>(pub Option<T>);

impl<T: DeserializeOwned> FromRequest<AppState> for MaybeInboxJson<T> {
    type Rejection = InboxApiError;

    async fn from_request(req: Request<Body>, state: &AppState) -> Result<Self, Self::Rejection> {
        match read_json(req, state).await {
            Ok(v) => Ok(MaybeInboxJson(v)),
            Err(e) => Err(InboxApiError::Request {
                status: e.status,
                code: if e.status == StatusCode::BAD_REQUEST {
                    "invalid_json"
                } else {
                    e.code
                },
                message: e.message,
            }),
        }
    }
}

type ApiResult<T> = Result<T, InboxApiError>;

/// The longest `Idempotency-Key` accepted.
pub(crate) const MAX_IDEMPOTENCY_KEY: usize = 255;

/// The `Idempotency-Key` header (`None` when absent or blank). A key that is not visible
/// ASCII or longer than [`MAX_IDEMPOTENCY_KEY`] is refused with 400 rather than ignored: a
/// client that sent one expects its retries to be recognized.
pub(crate) fn idem(headers: &HeaderMap) -> ApiResult<Option<&str>> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value.to_str().map(str::trim).map_err(|_| {
        InboxApiError::bad_request(
            "invalid_idempotency_key",
            "the Idempotency-Key header must be printable ASCII",
        )
    })?;
    if key.len() > MAX_IDEMPOTENCY_KEY {
        return Err(InboxApiError::bad_request(
            "invalid_idempotency_key",
            format!(
                "the Idempotency-Key header is {} characters long; at most \
                 {MAX_IDEMPOTENCY_KEY} are accepted",
                key.len()
            ),
        ));
    }
    Ok(Some(key).filter(|k| !k.is_empty()))
}

/// A non-empty query parameter.
fn param(query: &HashMap<String, String>, name: &str) -> Option<String> {
    query.get(name).filter(|v| !v.is_empty()).cloned()
}

/// 204 with an empty body while pending, 200 with the result once there is one.
fn result_response<T: serde::Serialize>(result: Option<T>) -> Response {
    match result {
        Some(r) => (StatusCode::OK, Json(r)).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    }
}

/// `GET /api/projects[?name=]`.
pub(crate) async fn projects(
    State(gw): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<impl IntoResponse> {
    let name = param(&query, "name");
    Ok(Json(gw.inbox.projects(name.as_deref()).await?))
}

/// `GET /api/projects/{id}`.
pub(crate) async fn project(
    State(gw): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(gw.inbox.project(&id).await?))
}

/// `GET /api/tasks[?projectId=&name=]`: the caller's tasks.
pub(crate) async fn tasks(
    State(gw): State<AppState>,
    Extension(CallerKey { id: owner, .. }): Extension<CallerKey>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<impl IntoResponse> {
    let filter = TaskFilter {
        project_id: param(&query, "projectId"),
        name: param(&query, "name"),
    };
    Ok(Json(gw.inbox.tasks(&owner, &filter).await?))
}

/// `POST /api/tasks` → 201 `Task`.
pub(crate) async fn create_task(
    State(gw): State<AppState>,
    Extension(CallerKey { id: owner, .. }): Extension<CallerKey>,
    headers: HeaderMap,
    InboxJson(body): InboxJson<CreateTask>,
) -> ApiResult<impl IntoResponse> {
    Ok((
        StatusCode::CREATED,
        Json(gw.inbox.create_task(&owner, body, idem(&headers)?).await?),
    ))
}

/// `GET /api/tasks/{id}` → `{task, openRequests}`.
pub(crate) async fn task(
    State(gw): State<AppState>,
    Extension(CallerKey { id: owner, .. }): Extension<CallerKey>,
    Path(id): Path<String>,
) -> ApiResult<impl IntoResponse> {
    Ok(Json(gw.inbox.task(&owner, &id).await?))
}

/// `GET /api/tasks/{id}/events[?cursor=&limit=]` → `{items, nextCursor}`.
pub(crate) async fn task_events(
    State(gw): State<AppState>,
    Extension(CallerKey { id: owner, .. }): Extension<CallerKey>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<impl IntoResponse> {
    let cursor = param(&query, "cursor");
    let limit = param(&query, "limit")
        .map(|l| {
            l.parse::<u32>().map_err(|_| {
                InboxApiError::bad_request(
                    "invalid_limit",
                    format!("limit must be a non-negative integer, not {l:?}"),
                )
            })
        })
        .transpose()?;
    Ok(Json(
        gw.inbox
            .task_events(&owner, &id, cursor.as_deref(), limit)
            .await?,
    ))
}

/// A non-negative integer query parameter; 400 `invalid_<name>` when it is not one.
fn uint_param(
    query: &HashMap<String, String>,
    name: &'static str,
    code: &'static str,
) -> ApiResult<Option<u64>> {
    param(query, name)
        .map(|v| {
            v.parse::<u64>().map_err(|_| {
                InboxApiError::bad_request(
                    code,
                    format!("{name} must be a non-negative integer, not {v:?}"),
                )
            })
        })
        .transpose()
}

/// `GET /api/decisions[?after=&wait=&limit=]` → `{items, nextCursor}` (tern's extension):
/// the caller's requests settled after the cursor, oldest first. With `wait` (seconds, at
/// most 60) a long-poll: it answers when one is settled or the time is up (no items, the
/// cursor to ask with next), and at once when the gateway shuts down.
pub(crate) async fn decisions(
    State(gw): State<AppState>,
    Extension(CallerKey { id: owner, .. }): Extension<CallerKey>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<impl IntoResponse> {
    let after = param(&query, "after");
    let limit =
        uint_param(&query, "limit", "invalid_limit")?.map(|l| u32::try_from(l).unwrap_or(u32::MAX));
    let wait = uint_param(&query, "wait", "invalid_wait")?.unwrap_or(0);
    let closing = gw.closing.clone();
    let page = gw
        .inbox
        .wait_decisions(
            &owner,
            after.as_deref(),
            limit,
            std::time::Duration::from_secs(wait),
            async move { closing.cancelled().await },
        )
        .await?;
    Ok(Json(page))
}

/// `POST /api/approval-requests` → 201 `{eventId}`.
pub(crate) async fn create_approval(
    State(gw): State<AppState>,
    Extension(CallerKey { id: owner, .. }): Extension<CallerKey>,
    headers: HeaderMap,
    InboxJson(body): InboxJson<CreateApproval>,
) -> ApiResult<impl IntoResponse> {
    let id = gw
        .inbox
        .create_approval(&owner, body, idem(&headers)?)
        .await?;
    Ok((StatusCode::CREATED, Json(id)))
}

/// `GET /api/approval-requests/{id}/result` → 204 while pending, 200 `ApprovalResult`.
pub(crate) async fn approval_result(
    State(gw): State<AppState>,
    Extension(CallerKey { id: owner, .. }): Extension<CallerKey>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    Ok(result_response(
        gw.inbox.approval_result(&owner, &id).await?,
    ))
}

/// `POST /api/elicitation-requests` → 201 `{eventId}`.
pub(crate) async fn create_elicitation(
    State(gw): State<AppState>,
    Extension(CallerKey { id: owner, .. }): Extension<CallerKey>,
    headers: HeaderMap,
    InboxJson(body): InboxJson<CreateElicitation>,
) -> ApiResult<impl IntoResponse> {
    let id = gw
        .inbox
        .create_elicitation(&owner, body, idem(&headers)?)
        .await?;
    Ok((StatusCode::CREATED, Json(id)))
}

/// `GET /api/elicitation-requests/{id}/result` → 204 while pending, 200 `ElicitationResult`.
pub(crate) async fn elicitation_result(
    State(gw): State<AppState>,
    Extension(CallerKey { id: owner, .. }): Extension<CallerKey>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    Ok(result_response(
        gw.inbox.elicitation_result(&owner, &id).await?,
    ))
}

/// The optional body of a withdrawal.
#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct Withdraw {
    reason: Option<String>,
}

/// `POST /api/approval-requests/{id}/withdraw` and `POST /api/elicitation-requests/{id}/withdraw`
/// `[{"reason"}]` → 200 `Withdrawal` (tern's extension; the same answer when repeated).
/// A request of the other kind is not found under the wrong path.
async fn withdraw(
    gw: &AppState,
    key: &CallerKey,
    id: &str,
    kind: RequestKind,
    body: Option<Withdraw>,
) -> ApiResult<Response> {
    let reason = body.unwrap_or_default().reason;
    let withdrawal = gw
        .inbox
        .withdraw_request_by(Some(kind), &key.id, &key.name, id, reason.as_deref())
        .await?;
    Ok((StatusCode::OK, Json(withdrawal)).into_response())
}

/// `POST /api/approval-requests/{id}/withdraw`.
pub(crate) async fn withdraw_approval(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
    MaybeInboxJson(body): MaybeInboxJson<Withdraw>,
) -> ApiResult<Response> {
    withdraw(&gw, &key, &id, RequestKind::Approval, body).await
}

/// `POST /api/elicitation-requests/{id}/withdraw`.
pub(crate) async fn withdraw_elicitation(
    State(gw): State<AppState>,
    Extension(key): Extension<CallerKey>,
    Path(id): Path<String>,
    MaybeInboxJson(body): MaybeInboxJson<Withdraw>,
) -> ApiResult<Response> {
    withdraw(&gw, &key, &id, RequestKind::Elicitation, body).await
}

/// `POST /api/agent-actions` → 201 `{eventId}`.
pub(crate) async fn record_action(
    State(gw): State<AppState>,
    Extension(CallerKey { id: owner, .. }): Extension<CallerKey>,
    headers: HeaderMap,
    InboxJson(body): InboxJson<RecordAction>,
) -> ApiResult<impl IntoResponse> {
    Ok((
        StatusCode::CREATED,
        Json(
            gw.inbox
                .record_action(&owner, body, idem(&headers)?)
                .await?,
        ),
    ))
}

/// `POST /api/exceptions` → 201 `{eventId}`.
pub(crate) async fn report_exception(
    State(gw): State<AppState>,
    Extension(CallerKey { id: owner, .. }): Extension<CallerKey>,
    headers: HeaderMap,
    InboxJson(body): InboxJson<ReportException>,
) -> ApiResult<impl IntoResponse> {
    Ok((
        StatusCode::CREATED,
        Json(
            gw.inbox
                .report_exception(&owner, body, idem(&headers)?)
                .await?,
        ),
    ))
}

/// `POST /api/notes` → 201 `{eventId}`.
pub(crate) async fn add_note(
    State(gw): State<AppState>,
    Extension(CallerKey { id: owner, .. }): Extension<CallerKey>,
    headers: HeaderMap,
    InboxJson(body): InboxJson<AddNote>,
) -> ApiResult<impl IntoResponse> {
    Ok((
        StatusCode::CREATED,
        Json(gw.inbox.add_note(&owner, body, idem(&headers)?).await?),
    ))
}
