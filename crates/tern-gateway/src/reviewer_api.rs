//! The JSON reviewer API: what `tern inbox` (and any other reviewer's program) uses to list,
//! read and decide the inbox's requests.
//!
//! # The flow
//!
//! 1. The [`Reviewer`] extractor authenticates the caller: a reviewer bearer token or the web
//!    inbox's session cookie. An agent key gets 403 — an agent can never decide a request —
//!    and no or unknown credentials 401.
//! 2. A POST that came with the cookie must carry the session's CSRF token in
//!    `X-CSRF-Token` (403 otherwise); this is checked before the body is even read, so a
//!    forged request learns nothing and changes nothing.
//! 3. The handler calls [`tern_inbox::Inbox`]: [`Inbox::list_requests`] and
//!    [`Inbox::request_view`] to read, [`Inbox::decide_approval`] and
//!    [`Inbox::answer_elicitation`] to decide, with the reviewer's name as
//!    `decidedBy` / `answeredBy`, and [`Inbox::dismiss_request`] to take a stale request
//!    off the list (the agent reads it as withdrawn).
//! 4. Errors answer in the agent API's shapes: `{"code", "message"}` for a 400 (invalid
//!    answers add `errors`, one per field), `{"error"}` otherwise — 404 for an unknown
//!    request or one of the other kind, 409 when it was already decided.
//!
//! Routes: `GET /inbox/api/me`, `GET /inbox/api/requests`, `GET /inbox/api/requests/{id}`,
//! `POST /inbox/api/requests/{id}/decide`, `POST /inbox/api/requests/{id}/answer`,
//! `POST /inbox/api/requests/{id}/withdraw`. The list takes `idPrefix` to find requests by
//! the start of their id.
//!
//! [`Inbox::list_requests`]: tern_inbox::Inbox::list_requests
//! [`Inbox::request_view`]: tern_inbox::Inbox::request_view
//! [`Inbox::decide_approval`]: tern_inbox::Inbox::decide_approval
//! [`Inbox::answer_elicitation`]: tern_inbox::Inbox::answer_elicitation
//! [`Inbox::dismiss_request`]: tern_inbox::Inbox::dismiss_request

use std::collections::HashMap;

use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tern_inbox::Outcome;
use tern_inbox::review::{RequestFilter, RequestKind, RequestStatus};

use crate::AppState;
use crate::inbox_api::{InboxApiError, InboxJson};
use crate::reviewer_auth::{AuthError, Reviewer};
use crate::reviewer_router::{self, Route};

pub(crate) fn routes() -> Router<AppState> {
    reviewer_router::router(reviewer_routes())
}

/// Every route of this API is a reviewer's.
pub(crate) fn reviewer_routes() -> Vec<Route> {
    vec![
        reviewer_router::get("/inbox/api/me", me),
        reviewer_router::get("/inbox/api/requests", list),
        reviewer_router::get("/inbox/api/requests/{id}", show),
        reviewer_router::post("/inbox/api/requests/{id}/decide", decide),
        reviewer_router::post("/inbox/api/requests/{id}/answer", answer),
        reviewer_router::post("/inbox/api/requests/{id}/withdraw", withdraw),
    ]
}

/// A failure of these routes: the caller was refused, or the inbox refused or failed.
enum Failure {
    Auth(AuthError),
    Inbox(InboxApiError),
}

impl From<AuthError> for Failure {
    fn from(e: AuthError) -> Self {
        Failure::Auth(e)
    }
}

impl From<InboxApiError> for Failure {
    fn from(e: InboxApiError) -> Self {
        Failure::Inbox(e)
    }
}

impl From<tern_inbox::InboxError> for Failure {
    fn from(e: tern_inbox::InboxError) -> Self {
        Failure::Inbox(e.into())
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        match self {
            Failure::Auth(e) => e.into_response(),
            Failure::Inbox(e) => e.into_response(),
        }
    }
}

type ApiResult = Result<Response, Failure>;

fn bad_request(code: &'static str, message: String) -> Failure {
    Failure::Inbox(InboxApiError::Request {
        status: StatusCode::BAD_REQUEST,
        code,
        message,
    })
}

/// `GET /inbox/api/me` → `{"name"}`: who the credentials belong to.
async fn me(reviewer: Reviewer) -> Json<Value> {
    Json(json!({"name": reviewer.name}))
}

/// The filter of `GET /inbox/api/requests`; every bad value is a 400 naming it.
fn filter(query: &HashMap<String, String>) -> Result<RequestFilter, Failure> {
    let get = |name: &str| query.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
    let status = match get("status").unwrap_or("pending") {
        "all" => None,
        "pending" => Some(RequestStatus::Pending),
        "decided" => Some(RequestStatus::Decided),
        "withdrawn" => Some(RequestStatus::Withdrawn),
        "expired" => Some(RequestStatus::Expired),
        other => {
            return Err(bad_request(
                "invalid_status",
                format!(
                    "status must be pending, decided, withdrawn, expired or all, not {other:?}"
                ),
            ));
        }
    };
    let kind = match get("kind") {
        None => None,
        Some("approval") => Some(RequestKind::Approval),
        Some("elicitation") => Some(RequestKind::Elicitation),
        Some(other) => {
            return Err(bad_request(
                "invalid_kind",
                format!("kind must be approval or elicitation, not {other:?}"),
            ));
        }
    };
    let limit = get("limit")
        .map(|l| {
            l.parse::<u32>().map_err(|_| {
                bad_request(
                    "invalid_limit",
                    format!("limit must be a non-negative integer, not {l:?}"),
                )
            })
        })
        .transpose()?;
    Ok(RequestFilter {
        status,
        project: get("project").map(str::to_owned),
        kind,
        limit,
        before: get("before").map(str::to_owned),
        id_prefix: get("idPrefix").map(str::to_owned),
    })
}

/// `GET /inbox/api/requests?status=&project=&kind=&limit=&before=&idPrefix=` → `RequestList`
/// (pending requests unless `status` says otherwise).
async fn list(
    State(gw): State<AppState>,
    _reviewer: Reviewer,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult {
    let filter = filter(&query)?;
    let list = gw.inbox.list_requests(&filter).await?;
    Ok(Json(list).into_response())
}

/// `GET /inbox/api/requests/{id}` → `RequestView`.
async fn show(
    State(gw): State<AppState>,
    _reviewer: Reviewer,
    Path(id): Path<String>,
) -> ApiResult {
    let view = gw.inbox.request_view(&id).await?;
    Ok(Json(view).into_response())
}

#[derive(Deserialize)]
struct DecideBody {
    outcome: Outcome,
}

#[derive(Deserialize)]
struct AnswerBody {
    fields: Map<String, Value>,
}

/// The CSRF check of a cookie-authenticated POST, then its JSON body — in this order, so a
/// forged request is refused before anything of it is read.
async fn checked_body<T: serde::de::DeserializeOwned>(
    reviewer: &Reviewer,
    req: Request,
    gw: &AppState,
) -> Result<T, Failure> {
    reviewer.check_csrf_header(req.headers())?;
    let InboxJson(body) = InboxJson::<T>::from_request(req, gw).await?;
    Ok(body)
}

/// `POST /inbox/api/requests/{id}/decide` `{"outcome": {type, note?, reasonCode?}}` → 200
/// `ApprovalResult`; 409 when already decided, 404 when unknown or not an approval.
async fn decide(
    State(gw): State<AppState>,
    reviewer: Reviewer,
    Path(id): Path<String>,
    req: Request,
) -> ApiResult {
    let DecideBody { outcome } = checked_body(&reviewer, req, &gw).await?;
    let result = gw
        .inbox
        .decide_approval(&id, outcome, &reviewer.name)
        .await?;
    tracing::info!(request = %id, reviewer = %reviewer.name, "approval decided");
    Ok(Json(result).into_response())
}

/// `POST /inbox/api/requests/{id}/answer` `{"fields": {"fieldId": value}}` → 200
/// `ElicitationResult`; 400 with an error per field when the answers do not fit (nothing
/// is stored), 409 when already answered, 404 when unknown or not an elicitation.
async fn answer(
    State(gw): State<AppState>,
    reviewer: Reviewer,
    Path(id): Path<String>,
    req: Request,
) -> ApiResult {
    let AnswerBody { fields } = checked_body(&reviewer, req, &gw).await?;
    let result = gw
        .inbox
        .answer_elicitation(&id, &fields, &reviewer.name)
        .await?;
    tracing::info!(request = %id, reviewer = %reviewer.name, "elicitation answered");
    Ok(Json(result).into_response())
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct WithdrawBody {
    #[serde(default)]
    reason: Option<String>,
}

/// `POST /inbox/api/requests/{id}/withdraw` `{"reason"?}` → 200 `Withdrawal` (with
/// `dismissedBy`): the request leaves the pending list and its agent reads it as withdrawn;
/// the same answer when repeated, 409 when already decided, 404 when unknown.
async fn withdraw(
    State(gw): State<AppState>,
    reviewer: Reviewer,
    Path(id): Path<String>,
    req: Request,
) -> ApiResult {
    let WithdrawBody { reason } = checked_body(&reviewer, req, &gw).await?;
    let withdrawal = gw
        .inbox
        .dismiss_request(&id, &reviewer.name, reason.as_deref())
        .await?;
    tracing::info!(request = %id, reviewer = %reviewer.name, "request dismissed");
    Ok(Json(withdrawal).into_response())
}
