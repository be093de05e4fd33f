//! The inbox list: requests newest first with their count, filtered by a plain GET form
//! (status, project, kind) so it works without JavaScript; a small script refreshes the
//! list in place when the change feed (`/inbox/events`) says a request arrived or left.

use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use serde::Deserialize;
use tern_inbox::review::{RequestFilter, RequestKind, RequestList, RequestStatus};

use super::layout::{Nav, Page, humanize, when};
use super::request::SessionLink;

/// The list's query string. Unknown values are refused with a 400 page rather than
/// silently showing something else.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ListQuery {
    pub status: Option<String>,
    pub project: Option<String>,
    pub kind: Option<String>,
    pub before: Option<String>,
}

/// The status filter: one status, or `all`.
pub(super) const STATUSES: [(&str, &str); 5] = [
    ("pending", "Pending"),
    ("decided", "Decided"),
    ("withdrawn", "Withdrawn"),
    ("expired", "Expired"),
    ("all", "All"),
];

impl ListQuery {
    /// The filter, or a message saying which value is wrong. Blank values mean "any"
    /// (a GET form sends `project=` for "All projects"); status defaults to pending.
    pub fn filter(&self) -> Result<RequestFilter, String> {
        let nonblank = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let status = match nonblank(&self.status).as_deref() {
            None | Some("pending") => Some(RequestStatus::Pending),
            Some("decided") => Some(RequestStatus::Decided),
            Some("withdrawn") => Some(RequestStatus::Withdrawn),
            Some("expired") => Some(RequestStatus::Expired),
            Some("all") => None,
            Some(other) => {
                return Err(format!(
                    "Unknown status {other:?}: use pending, decided, withdrawn, expired or all."
                ));
            }
        };
        let kind = match nonblank(&self.kind).as_deref() {
            None => None,
            Some("approval") => Some(RequestKind::Approval),
            Some("elicitation") => Some(RequestKind::Elicitation),
            Some(other) => {
                return Err(format!(
                    "Unknown kind {other:?}: use approval or elicitation."
                ));
            }
        };
        Ok(RequestFilter {
            status,
            project: nonblank(&self.project),
            kind,
            limit: None,
            before: nonblank(&self.before),
            id_prefix: None,
        })
    }

    fn status_key(&self) -> &str {
        self.status
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .unwrap_or("pending")
    }
}

/// `sessions`: for each of `list`'s items, the gateway session that asked, if any.
pub(super) fn page(
    query: &ListQuery,
    list: &RequestList,
    sessions: &[Option<SessionLink>],
    projects: &[String],
    pending: u64,
    reviewer: &str,
    csrf: &str,
) -> Response {
    let status = query.status_key();
    let title = match status {
        "pending" => "Pending requests",
        "all" => "All requests",
        _ => "History",
    };
    let nav = if status == "pending" {
        Nav::Pending
    } else {
        Nav::History
    };
    let project = query.project.as_deref().unwrap_or("");
    let kind = query.kind.as_deref().unwrap_or("");
    let body = html! {
        h1 { (title) " " span #live .live aria-live="polite" {} }
        form.card.filters method="get" action="/inbox" {
            div {
                label for="status" { "Status" }
                select id="status" name="status" {
                    @for (value, label) in STATUSES {
                        option value=(value) selected[status == value] { (label) }
                    }
                }
            }
            div {
                label for="project" { "Project" }
                select id="project" name="project" {
                    option value="" selected[project.is_empty()] { "All projects" }
                    @for p in projects {
                        option value=(p) selected[project == p] { (p) }
                    }
                }
            }
            div {
                label for="kind" { "Kind" }
                select id="kind" name="kind" {
                    option value="" selected[kind.is_empty()] { "Any kind" }
                    option value="approval" selected[kind == "approval"] { "Approvals" }
                    option value="elicitation" selected[kind == "elicitation"] { "Questions (elicitations)" }
                }
            }
            div { button type="submit" { "Filter" } }
        }
        (results(list, sessions, status, query))
    };
    Page {
        title,
        nav,
        reviewer: Some(reviewer),
        csrf: Some(csrf),
        pending: Some(pending),
        body,
        script: Some(super::scripts::LIVE_SCRIPT),
    }
    .render(StatusCode::OK)
}

fn results(
    list: &RequestList,
    sessions: &[Option<SessionLink>],
    status: &str,
    query: &ListQuery,
) -> Markup {
    let noun = if list.count == 1 {
        "request"
    } else {
        "requests"
    };
    html! {
        section #results {
            div.count {
                strong #count data-count=(list.count) { (list.count) } " " (noun)
                @if status != "all" { " " (status) }
            }
            @if list.items.is_empty() {
                div.card.empty {
                    @if status == "pending" { "Nothing waits for you. New requests appear here as they arrive." }
                    @else { "No requests match these filters." }
                }
            } @else {
                ul.requests {
                    @for (i, r) in list.items.iter().enumerate() {
                        @let session = sessions.get(i).and_then(Option::as_ref);
                        li {
                            a.row href={"/inbox/requests/" (r.id)} data-id=(r.id) {
                                div.line1 {
                                    span.badge.(r.kind.as_str()) { (r.kind.as_str()) }
                                    // In the pending list every row is pending; elsewhere
                                    // ("All") the pending ones need telling apart.
                                    @if r.status != RequestStatus::Pending || status != "pending" {
                                        span.badge.(r.status.as_str()) { (r.status.as_str()) }
                                    }
                                    @if let Some(o) = r.outcome {
                                        @let wire = super::forms::outcome_wire(o);
                                        span.badge.(if wire == "REJECT" { "reject" } else { "decided" }) { (humanize(&wire)) }
                                    }
                                    span.summary { (r.summary) }
                                }
                                div.meta {
                                    (r.project_name) " · "
                                    @match session {
                                        Some(s) => span.session { (s.title) },
                                        None => (r.task_name),
                                    }
                                    " · " (when(&r.created_at))
                                    @if let Some(at) = &r.decided_at { " · settled " (when(at)) }
                                    @if let Some(by) = &r.decided_by { " by " (by) }
                                }
                            }
                        }
                    }
                }
            }
            @if let Some(next) = &list.next_cursor {
                p.pager {
                    a.button href=(older_href(query, next)) { "Older →" }
                }
            }
        }
    }
}

fn older_href(query: &ListQuery, cursor: &str) -> String {
    let mut params = vec![("status", query.status_key().to_owned())];
    if let Some(p) = query.project.as_deref().filter(|p| !p.is_empty()) {
        params.push(("project", p.to_owned()));
    }
    if let Some(k) = query.kind.as_deref().filter(|k| !k.is_empty()) {
        params.push(("kind", k.to_owned()));
    }
    params.push(("before", cursor.to_owned()));
    let qs: Vec<String> = params
        .into_iter()
        .map(|(k, v)| format!("{k}={}", encode(&v)))
        .collect();
    format!("/inbox?{}", qs.join("&"))
}

/// Percent-encodes a query value (everything but unreserved characters).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
