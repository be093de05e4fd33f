//! The web inbox: server-rendered HTML pages (maud) where reviewers see what agents ask and
//! decide. Every page works without JavaScript; a small script only refreshes the list live.
//!
//! # Routes
//!
//! | route | what |
//! | --- | --- |
//! | `GET /` | a redirect to `/inbox` |
//! | `GET /inbox` | the list: pending by default, newest first, with a count; `status`, `project`, `kind` filters as a GET form; `before` pages on |
//! | `GET /inbox/requests/{id}` | one request: summary, the session that asked and the agent's words before it asked, context, recommendation, attachments, the decision form or the result, the task's timeline |
//! | `POST /inbox/requests/{id}/decide` | an approval decision (form-encoded): outcome, note, reason code (a command's scope) |
//! | `POST /inbox/requests/{id}/answer` | an elicitation's answers (form-encoded, `f.<field id>` per control) |
//! | `POST /inbox/requests/{id}/dismiss` | takes a stale pending request off the list; its agent reads it as withdrawn |
//! | `GET /inbox/sessions/{id}` | the read-only conversation of a gateway session that asked the inbox something |
//! | `GET /inbox/events` | the change feed as server-sent events (see [`sse`]) |
//!
//! Every route needs a reviewer (the stylesheet is inlined into each page, so there is no
//! public asset route). A session's conversation is shown only for sessions of the
//! gateway's own agent that have an inbox task (they asked a reviewer something); any
//! other id is "not found", whether the session exists or not.
//!
//! Tasks of the gateway's own sessions are named `session <id>`; the pages show the
//! session's title instead, linked to its conversation.
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
pub(crate) mod layout;
mod list;
mod request;
mod scripts;
mod sse;
mod transcript;

use axum::Form;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use tern_inbox::review::{RequestKind, RequestSummary, RequestView};
use tern_inbox::{InboxError, Outcome};
use tern_waits::client::EMBEDDED_OWNER;

use crate::AppState;
use crate::reviewer_auth::Reviewer;
use crate::reviewer_router::{self, Route};
use forms::ApprovalDraft;
use layout::message_page;
use request::{AttachmentInfo, FormState, Notice, Origin, SessionLink};

/// The web inbox's routes; merged by [`crate::Gateway::router_for`] outside the agent-key
/// check (reviewers are people, not agent keys).
pub(crate) fn routes() -> Router<AppState> {
    reviewer_router::router(reviewer_routes())
}

/// Every page and form of the web inbox is a reviewer's.
pub(crate) fn reviewer_routes() -> Vec<Route> {
    vec![
        reviewer_router::get("/", |_: Reviewer| async { Redirect::to("/inbox") }),
        reviewer_router::get("/inbox", list_page),
        reviewer_router::get("/inbox/", |_: Reviewer| async {
            Redirect::permanent("/inbox")
        }),
        reviewer_router::get("/inbox/requests/{id}", request_page),
        reviewer_router::post("/inbox/requests/{id}/decide", decide),
        reviewer_router::post("/inbox/requests/{id}/answer", answer),
        reviewer_router::post("/inbox/requests/{id}/dismiss", dismiss),
        reviewer_router::get("/inbox/sessions/{id}", session_page),
        reviewer_router::get("/inbox/events", events),
    ]
}

/// Whether `path` is one of the web inbox's pages (not its JSON API), where a browser gets
/// errors as pages.
pub(crate) fn is_page_path(path: &str) -> bool {
    path == "/"
        || ((path == "/inbox" || path.starts_with("/inbox/")) && !path.starts_with("/inbox/api/"))
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
    let pending = match gw.inbox.pending_count().await {
        Ok(n) => n,
        Err(e) => return inbox_error_page(&e, &reviewer.name),
    };
    let mut sessions = Vec::with_capacity(list.items.len());
    for r in &list.items {
        sessions.push(session_link(&gw, r).await);
    }
    list::page(
        &query,
        &list,
        &sessions,
        &projects,
        pending,
        &reviewer.name,
        reviewer.csrf.as_deref().unwrap_or(""),
    )
}

/// The gateway session that asked, when the request's task is one of the gateway's own
/// sessions' (its `externalId` names the session) and that session still exists.
async fn session_link(gw: &AppState, summary: &RequestSummary) -> Option<SessionLink> {
    if summary.task_owner != EMBEDDED_OWNER {
        return None;
    }
    let id = summary.task_external_id.as_deref()?;
    match gw.store.get_session(id).await {
        Ok(Some(s)) => Some(SessionLink {
            title: transcript::session_title(&s),
            id: s.id,
        }),
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(session = id, error = %e, "cannot read the session of an inbox task");
            None
        }
    }
}

/// What the agent wrote in the message whose tool call asked (its text, else its
/// reasoning): the why of the request, in its own words. Only the gateway's own waits know
/// that message (the wait's key holds its place in the transcript).
async fn agent_words(gw: &AppState, request_id: &str) -> Option<String> {
    let wait = match gw.store.wait_by_request(request_id).await {
        Ok(w) => w?,
        Err(e) => {
            tracing::warn!(request = request_id, error = %e, "cannot read the wait of a request");
            return None;
        }
    };
    let seq = wait.call_seq()?;
    let messages = match gw.store.messages(wait.origin_session()).await {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(request = request_id, error = %e, "cannot read the session that asked");
            return None;
        }
    };
    let asked = messages
        .iter()
        .find(|m| m.seq == seq && m.role == tern_llm::Role::Assistant)?;
    [&asked.content, &asked.reasoning]
        .into_iter()
        .flatten()
        .map(|t| t.trim())
        .find(|t| !t.is_empty())
        .map(str::to_owned)
}

/// `?done=1` after a decision was recorded, `?dismissed=1` after a dismissal (the redirect
/// of Post/Redirect/Get).
#[derive(Debug, Default, Deserialize)]
struct RequestQuery {
    done: Option<String>,
    dismissed: Option<String>,
}

async fn request_page(
    State(gw): State<AppState>,
    reviewer: Reviewer,
    Path(id): Path<String>,
    Query(q): Query<RequestQuery>,
) -> Response {
    let notice = if q.dismissed.is_some() {
        Some(Notice::Dismissed)
    } else {
        q.done.is_some().then_some(Notice::Saved)
    };
    let state = FormState {
        notice,
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
    let origin = Origin {
        session: session_link(gw, &view.summary).await,
        words: agent_words(gw, id).await,
    };
    let pending = match gw.inbox.pending_count().await {
        Ok(n) => n,
        Err(e) => return inbox_error_page(&e, &reviewer.name),
    };
    request::page(
        &view,
        &attachments,
        &origin,
        pending,
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
    let view = match view_of_kind(&gw, &reviewer, &id, RequestKind::Approval).await {
        Ok(v) => v,
        Err(page) => return page,
    };
    // Only the outcomes the form offers: a command is run or not, nothing in between.
    let offered = request::outcomes_for(&view);
    let kind = form
        .outcome
        .as_deref()
        .and_then(forms::parse_outcome)
        .filter(|k| offered.contains(k));
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

#[derive(Debug, Default, Deserialize)]
struct DismissForm {
    csrf_token: Option<String>,
    reason: Option<String>,
}

/// A reviewer takes a stale pending request off the list ([`tern_inbox::Inbox::dismiss_request`]);
/// 303 to its page, or the page with 409 when it was settled first.
async fn dismiss(
    State(gw): State<AppState>,
    reviewer: Reviewer,
    Path(id): Path<String>,
    Form(form): Form<DismissForm>,
) -> Response {
    if let Err(refused) = reviewer.check_csrf(form.csrf_token.as_deref()) {
        return refused.html_response();
    }
    let reason = given(form.reason);
    match gw
        .inbox
        .dismiss_request(&id, &reviewer.name, reason.as_deref())
        .await
    {
        Ok(_) => {
            tracing::info!(request = %id, reviewer = %reviewer.name, "request dismissed");
            Redirect::to(&format!("/inbox/requests/{id}?dismissed=1")).into_response()
        }
        Err(InboxError::AlreadyDecided) => already_decided(&gw, &reviewer, &id).await,
        Err(e) => inbox_error_page(&e, &reviewer.name),
    }
}

/// A session's conversation, read-only; see the module docs for which sessions.
async fn session_page(
    State(gw): State<AppState>,
    reviewer: Reviewer,
    Path(id): Path<String>,
) -> Response {
    let not_found = || {
        message_page(
            StatusCode::NOT_FOUND,
            Some(&reviewer.name),
            "Not found",
            "There is no conversation here for you to read: only sessions that asked the inbox something are shown.",
        )
    };
    // Conversations hold whatever the agent's tools read: admins only.
    match tern_inbox::reviewers::Reviewers::new(gw.store.clone())
        .get(&reviewer.name)
        .await
    {
        Ok(Some(r)) if r.admin => {}
        Ok(_) => return not_found(),
        Err(e) => {
            tracing::error!(error = %e, "cannot read the reviewer");
            return message_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                Some(&reviewer.name),
                "Something went wrong",
                "The inbox could not check who you are; try again.",
            );
        }
    }
    let session = match gw.store.get_session(&id).await {
        Ok(Some(s)) => s,
        Ok(None) => return not_found(),
        Err(e) => return inbox_error_page(&InboxError::Store(e), &reviewer.name),
    };
    // A task the session itself asked: made after the session was (clients choose session
    // ids, so a deleted session's id may now name an unrelated one).
    match gw
        .inbox
        .owner_has_task_for(EMBEDDED_OWNER, &id, session.created_at)
        .await
    {
        Ok(true) => {}
        Ok(false) => return not_found(),
        Err(e) => return inbox_error_page(&e, &reviewer.name),
    }
    let messages = match gw.store.messages(&id).await {
        Ok(m) => m,
        Err(e) => return inbox_error_page(&InboxError::Store(e), &reviewer.name),
    };
    let pending = match gw.inbox.pending_count().await {
        Ok(n) => n,
        Err(e) => return inbox_error_page(&e, &reviewer.name),
    };
    transcript::page(
        &session,
        &messages,
        pending,
        &reviewer.name,
        reviewer.csrf.as_deref().unwrap_or(""),
    )
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
