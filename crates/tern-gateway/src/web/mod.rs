//! The web inbox: server-rendered HTML pages (maud) where reviewers see what agents ask and
//! decide. Every page works without JavaScript; a small script only refreshes the list live.
//!
//! # Routes
//!
//! | route | what |
//! | --- | --- |
//! | `GET /inbox` | the list: pending by default, newest first, with a count; `status`, `project`, `kind` filters as a GET form; `before` pages on |
//! | `GET /inbox/requests/{id}` | one request: summary, context, recommendation, attachments, the decision form or the result, the task's timeline |
//! | `POST /inbox/requests/{id}/decide` | an approval decision (form-encoded): outcome, note, reason code |
//! | `POST /inbox/requests/{id}/answer` | an elicitation's answers (form-encoded, `f.<field id>` per control) |
//! | `GET /inbox/events` | the change feed as server-sent events (see [`sse`]) |
//!
//! Every route needs a reviewer (the stylesheet is inlined into each page, so there is no
//! public asset route).
//!
//! # The flow of a decision
//!
//! 1. The [`Reviewer`] extractor authenticates the person (session cookie or reviewer
//!    bearer token; an agent key gets 403, nobody gets the 401 page that says how to log in).
//! 2. A POST checks the form's `csrf_token` against the session ([`Reviewer::check_csrf`]):
//!    403 and nothing recorded when it is missing or wrong.
//! 3. The form is turned into an [`Outcome`] or typed answers ([`forms::answers_from_form`])
//!    and handed to [`tern_inbox::Inbox::decide_approval`] /
//!    [`tern_inbox::Inbox::answer_elicitation`] with the reviewer's name.
//! 4. Success → `303 See Other` back to the request page (Post/Redirect/Get), which then shows
//!    the result. Invalid answers → the page again with `400`, each message next to its
//!    field and the entered values kept. Already decided → the page with `409` and a notice.

mod forms;
mod layout;

pub(crate) use layout::{CSS, html_response};
mod list;
mod request;
mod scripts;
mod sse;

use axum::Form;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use tern_inbox::review::{RequestKind, RequestView};
use tern_inbox::{InboxError, Outcome};

use crate::AppState;
use crate::reviewer_auth::Reviewer;
use forms::ApprovalDraft;
use layout::message_page;
use request::{AttachmentInfo, FormState, Notice};

/// The web inbox's routes; merged by [`crate::Gateway::router_for`] outside the agent-key
/// check (reviewers are people, not agent keys).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/inbox", get(list_page))
        .route(
            "/inbox/",
            get(|_: Reviewer| async { Redirect::permanent("/inbox") }),
        )
        .route("/inbox/requests/{id}", get(request_page))
        .route("/inbox/requests/{id}/decide", post(decide))
        .route("/inbox/requests/{id}/answer", post(answer))
        .route("/inbox/events", get(events))
}

/// Whether `path` is one of the web inbox's pages (not its JSON API), where a browser gets
/// errors as pages.
pub(crate) fn is_page_path(path: &str) -> bool {
    (path == "/inbox" || path.starts_with("/inbox/")) && !path.starts_with("/inbox/api/")
}

/// An error that axum or a layer answered before a handler ran (a form over the body limit,
/// a wrong method), as a page; `detail` is axum's text.
pub(crate) fn error_page(status: StatusCode, detail: &str) -> Response {
    let (title, text) = match status {
        StatusCode::PAYLOAD_TOO_LARGE => (
            "Too large",
            "What you sent is too large for the inbox; nothing was recorded. Shorten it and \
             send it again.",
        ),
        StatusCode::NOT_FOUND => ("Not found", "There is no such page in the inbox."),
        _ => (status.canonical_reason().unwrap_or("Error"), detail),
    };
    message_page(status, None, title, text)
}

/// A failure of the inbox service, as a page.
fn inbox_error_page(e: &InboxError, reviewer: &str) -> Response {
    match e {
        InboxError::NotFound(what) => message_page(
            StatusCode::NOT_FOUND,
            Some(reviewer),
            "Not found",
            &format!("There is no {what}."),
        ),
        InboxError::Store(inner) => {
            tracing::error!(error = %inner, "inbox store error");
            message_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                Some(reviewer),
                "Something went wrong",
                "The inbox could not read or write its database. The error is in the gateway's log.",
            )
        }
        other => message_page(
            StatusCode::from_u16(other.http_status()).unwrap_or(StatusCode::BAD_REQUEST),
            Some(reviewer),
            "Cannot do that",
            &other.to_string(),
        ),
    }
}

async fn list_page(
    State(gw): State<AppState>,
    reviewer: Reviewer,
    Query(query): Query<list::ListQuery>,
) -> Response {
    let filter = match query.filter() {
        Ok(f) => f,
        Err(msg) => {
            return message_page(
                StatusCode::BAD_REQUEST,
                Some(&reviewer.name),
                "Unknown filter",
                &msg,
            );
        }
    };
    let list = match gw.inbox.list_requests(&filter).await {
        Ok(l) => l,
        Err(e) => return inbox_error_page(&e, &reviewer.name),
    };
    let projects = match gw.inbox.projects(None).await {
        Ok(p) => p.items.into_iter().map(|p| p.name).collect::<Vec<_>>(),
        Err(e) => return inbox_error_page(&e, &reviewer.name),
    };
    list::page(
        &query,
        &list,
        &projects,
        &reviewer.name,
        reviewer.csrf.as_deref().unwrap_or(""),
    )
}

/// `?done=1` after a decision was recorded (the redirect of Post/Redirect/Get).
#[derive(Debug, Default, Deserialize)]
struct RequestQuery {
    done: Option<String>,
}

async fn request_page(
    State(gw): State<AppState>,
    reviewer: Reviewer,
    Path(id): Path<String>,
    Query(q): Query<RequestQuery>,
) -> Response {
    let state = FormState {
        notice: q.done.is_some().then_some(Notice::Saved),
        ..FormState::default()
    };
    render_request(&gw, &reviewer, &id, state, StatusCode::OK).await
}

async fn render_request(
    gw: &AppState,
    reviewer: &Reviewer,
    id: &str,
    state: FormState,
    status: StatusCode,
) -> Response {
    let view = match gw.inbox.request_view(id).await {
        Ok(v) => v,
        Err(e) => return inbox_error_page(&e, &reviewer.name),
    };
    let attachments = attachments(gw, &view).await;
    request::page(
        &view,
        &attachments,
        &reviewer.name,
        reviewer.csrf.as_deref().unwrap_or(""),
        state,
        status,
    )
}

/// The request's attachments with what the page needs to show them: images (of the types
/// a browser shows without running anything) inline, other files as downloads. An upload
/// that cannot be read is still listed, as a download by its id.
async fn attachments(gw: &AppState, view: &RequestView) -> Vec<AttachmentInfo> {
    let mut out = Vec::with_capacity(view.attachments.len());
    for id in &view.attachments {
        let info = match gw.inbox.upload(id).await {
            Ok(u) => AttachmentInfo {
                id: id.clone(),
                label: u.file_name.clone().unwrap_or_else(|| id.clone()),
                detail: format!("{} · {}", u.content_type, size_text(u.size)),
                is_image: u.is_inline_image(),
            },
            Err(e) => {
                tracing::warn!(upload = %id, error = %e, "cannot read an attachment's details");
                AttachmentInfo {
                    id: id.clone(),
                    label: id.clone(),
                    detail: String::new(),
                    is_image: false,
                }
            }
        };
        out.push(info);
    }
    out
}

/// `1536` → `1.5 KiB`.
fn size_text(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["bytes", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[derive(Debug, Default, Deserialize)]
struct DecideForm {
    csrf_token: Option<String>,
    outcome: Option<String>,
    note: Option<String>,
    reason_code: Option<String>,
}

/// Blank form text counts as not given.
fn given(s: Option<String>) -> Option<String> {
    s.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
}

async fn decide(
    State(gw): State<AppState>,
    reviewer: Reviewer,
    Path(id): Path<String>,
    Form(form): Form<DecideForm>,
) -> Response {
    if let Err(refused) = reviewer.check_csrf(form.csrf_token.as_deref()) {
        return refused.html_response();
    }
    if let Err(page) = view_of_kind(&gw, &reviewer, &id, RequestKind::Approval).await {
        return page;
    }
    let kind = form.outcome.as_deref().and_then(forms::parse_outcome);
    let draft = ApprovalDraft {
        outcome: kind,
        note: form.note.clone().unwrap_or_default(),
        reason_code: form.reason_code.clone().unwrap_or_default(),
    };
    let Some(kind) = kind else {
        let state = FormState {
            notice: Some(Notice::Invalid("Choose an outcome.".into())),
            draft: Some(draft),
            outcome_error: Some("Choose one of the outcomes.".into()),
            ..FormState::default()
        };
        return render_request(&gw, &reviewer, &id, state, StatusCode::BAD_REQUEST).await;
    };
    let outcome = Outcome {
        kind,
        reason_code: given(form.reason_code),
        note: given(form.note),
    };
    match gw.inbox.decide_approval(&id, outcome, &reviewer.name).await {
        Ok(_) => done(&id),
        Err(InboxError::AlreadyDecided) => already_decided(&gw, &reviewer, &id).await,
        Err(e) => inbox_error_page(&e, &reviewer.name),
    }
}

/// The view of request `id` when it is a `kind` request; else the page to answer with.
async fn view_of_kind(
    gw: &AppState,
    reviewer: &Reviewer,
    id: &str,
    kind: RequestKind,
) -> Result<RequestView, Response> {
    let view = gw
        .inbox
        .request_view(id)
        .await
        .map_err(|e| inbox_error_page(&e, &reviewer.name))?;
    if view.summary.kind != kind {
        return Err(message_page(
            StatusCode::NOT_FOUND,
            Some(&reviewer.name),
            "Not found",
            &format!("There is no {} request {id}.", kind.as_str()),
        ));
    }
    Ok(view)
}

/// The request page again, with the notice that someone decided first.
async fn already_decided(gw: &AppState, reviewer: &Reviewer, id: &str) -> Response {
    let state = FormState {
        notice: Some(Notice::Conflict),
        ..FormState::default()
    };
    render_request(gw, reviewer, id, state, StatusCode::CONFLICT).await
}

/// 303 to the request page, which shows the result.
fn done(id: &str) -> Response {
    Redirect::to(&format!("/inbox/requests/{id}?done=1")).into_response()
}

async fn answer(
    State(gw): State<AppState>,
    reviewer: Reviewer,
    Path(id): Path<String>,
    Form(pairs): Form<Vec<(String, String)>>,
) -> Response {
    let csrf = pairs
        .iter()
        .find(|(k, _)| k == "csrf_token")
        .map(|(_, v)| v.as_str());
    if let Err(refused) = reviewer.check_csrf(csrf) {
        return refused.html_response();
    }
    let view = match view_of_kind(&gw, &reviewer, &id, RequestKind::Elicitation).await {
        Ok(v) => v,
        Err(page) => return page,
    };
    let answers = forms::answers_from_form(&view.fields, &pairs);
    match gw
        .inbox
        .answer_elicitation(&id, &answers, &reviewer.name)
        .await
    {
        Ok(_) => done(&id),
        Err(InboxError::InvalidAnswers(errors)) => {
            let n = errors.len();
            let state = FormState {
                notice: Some(Notice::Invalid(if n == 1 {
                    "One answer needs fixing; see the message by its field. Nothing was recorded."
                        .into()
                } else {
                    format!(
                        "{n} answers need fixing; see the messages by their fields. Nothing was recorded."
                    )
                })),
                answers: Some(answers),
                field_errors: errors,
                ..FormState::default()
            };
            render_request(&gw, &reviewer, &id, state, StatusCode::BAD_REQUEST).await
        }
        Err(InboxError::AlreadyDecided) => already_decided(&gw, &reviewer, &id).await,
        Err(e) => inbox_error_page(&e, &reviewer.name),
    }
}

async fn events(State(gw): State<AppState>, _reviewer: Reviewer) -> Response {
    sse::stream(gw.inbox.changes(), gw.closing.clone()).into_response()
}
