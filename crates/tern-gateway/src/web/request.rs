//! One request's page: what the agent asks, its context and recommendation, attachments,
//! the decision form while pending (or the result once settled), and the task's timeline.

use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use serde_json::{Map, Value};
use tern_inbox::FieldError;
use tern_inbox::model::Payload;
use tern_inbox::review::{RequestKind, RequestStatus, RequestView};

use super::forms::{self, ApprovalDraft};
use super::layout::{Nav, Page, humanize, when};

/// An attachment as the page shows it.
pub(super) struct AttachmentInfo {
    pub id: String,
    pub label: String,
    /// Type and size, e.g. `image/png · 12.5 KiB`; empty when unknown.
    pub detail: String,
    pub is_image: bool,
}

/// A banner above the page's content.
pub(super) enum Notice {
    Saved,
    Conflict,
    Invalid(String),
}

/// What the decision form shows after a submission that was refused.
#[derive(Default)]
pub(super) struct FormState {
    pub notice: Option<Notice>,
    pub draft: Option<ApprovalDraft>,
    pub outcome_error: Option<String>,
    pub answers: Option<Map<String, Value>>,
    pub field_errors: Vec<FieldError>,
}

/// How far the approval of a dangerous command reaches, sent as the outcome's reason code
/// (the gateway's `tern_waits::command` makes it a grant; `once` first, the default).
const COMMAND_SCOPES: &[(&str, &str)] = &[
    ("once", "Once: this command, one time"),
    (
        "session",
        "For this session: commands of this kind, for the rest of the agent's session",
    ),
    (
        "always",
        "Always: this exact command, from now on (added to the allowlist)",
    ),
];

/// A dangerous command's approval request: its context says `action = command`.
fn is_command(view: &RequestView) -> bool {
    view.key_value_context
        .as_ref()
        .and_then(|c| c.get("action"))
        .is_some_and(|a| a == "command")
}

pub(super) fn page(
    view: &RequestView,
    attachments: &[AttachmentInfo],
    reviewer: &str,
    csrf: &str,
    state: FormState,
    status: StatusCode,
) -> Response {
    let s = &view.summary;
    let pending = s.status == RequestStatus::Pending;
    let recommended = view
        .approval_recommendation
        .as_ref()
        .map(|r| r.outcome.kind);
    let body = html! {
        p.small { a href="/inbox" { "← Inbox" } }
        h1 { (s.summary) }
        p.meta.muted.small {
            span.badge.(s.kind.as_str()) { (s.kind.as_str()) } " "
            span.badge.(s.status.as_str()) { (s.status.as_str()) } " "
            "Project " strong { (s.project_name) } " · task " strong { (s.task_name) }
            " · asked " (when(&s.created_at))
        }
        @match &state.notice {
            Some(Notice::Saved) => div.notice.ok role="status" {
                @if s.kind == RequestKind::Approval { "Your decision was recorded." }
                @else { "Your answer was recorded." }
            },
            Some(Notice::Conflict) => div.notice.warn role="alert" {
                "This request was already decided"
                @if let Some(by) = &s.decided_by { " by " strong { (by) } }
                ". Your submission was not recorded; the decision below stands."
            },
            Some(Notice::Invalid(msg)) => div.notice.bad role="alert" { (msg) },
            None => {},
        }
        @if pending {
            div.notice.warn #elsewhere data-id=(s.id) role="alert" hidden {
                "This request has just been settled elsewhere. "
                a href={"/inbox/requests/" (s.id)} { "Reload to see the result" }
                "; a submission now would not be recorded."
            }
        } @else {
            (result_card(view))
        }
        @if let Some(ctx) = view.key_value_context.as_ref().filter(|c| !c.is_empty()) {
            section.card {
                h2 { "Context" }
                table.kv {
                    @for (k, v) in ctx {
                        tr { th scope="row" { (k) } td { (v) } }
                    }
                }
            }
        }
        @if let Some(r) = &view.approval_recommendation {
            section.card.recommendation {
                h2 { "The agent recommends" }
                p.what {
                    (humanize(&forms::outcome_wire(r.outcome.kind)))
                    @if let Some(c) = r.confidence { span.muted { " · " (forms::percent(c)) " confident" } }
                }
                @if let Some(why) = &r.rationale { p { (why) } }
                @if let Some(n) = &r.outcome.note { p.small { "Note: " (n) } }
                @if let Some(c) = &r.outcome.reason_code { p.small { "Reason code: " code { (c) } } }
            }
        }
        @if !attachments.is_empty() {
            section.card {
                h2 { "Attachments" }
                div.attachments {
                    @for a in attachments {
                        @let href = format!("/inbox/uploads/{}", a.id);
                        figure {
                            @if a.is_image {
                                a href=(href) { img src=(href) alt=(a.label) loading="lazy"; }
                            } @else {
                                a.file href=(href) download aria-hidden="true" tabindex="-1" { (extension(&a.label)) }
                            }
                            figcaption {
                                a href=(href) download[!a.is_image] { (a.label) }
                                @if !a.detail.is_empty() { br; span.small { (a.detail) } }
                            }
                        }
                    }
                }
            }
        }
        @if pending {
            @match s.kind {
                RequestKind::Approval => {
                    @let scopes = is_command(view).then_some(COMMAND_SCOPES);
                    @let draft = state.draft.clone().unwrap_or_else(|| ApprovalDraft {
                        outcome: recommended,
                        note: String::new(),
                        reason_code: scopes.map(|s| s[0].0.to_owned()).unwrap_or_default(),
                    });
                    (forms::approval_form(&s.id, csrf, &draft, recommended, state.outcome_error.as_deref(), scopes))
                }
                RequestKind::Elicitation => {
                    @let values = state.answers.clone().unwrap_or_else(|| forms::prefill(&view.fields, &view.field_bids));
                    (forms::elicitation_form(&s.id, csrf, &view.fields, &view.field_bids, &values, &state.field_errors))
                }
            }
        }
        (timeline(view))
    };
    Page {
        title: &s.summary,
        nav: Nav::None,
        reviewer: Some(reviewer),
        csrf: Some(csrf),
        body,
        script: pending.then_some(super::scripts::PENDING_SCRIPT),
    }
    .render(status)
}

fn result_card(view: &RequestView) -> Markup {
    let s = &view.summary;
    let result = view.result.as_ref();
    let get = |k: &str| result.and_then(|r| r.get(k));
    html! {
        section.card #result {
            h2 { "Result" }
            table.kv {
                @match s.status {
                    RequestStatus::Decided | RequestStatus::Expired => {
                        @if let Some(o) = get("outcome") {
                            tr { th scope="row" { "Outcome" }
                                td { strong { (humanize(o.get("type").and_then(Value::as_str).unwrap_or("?"))) } } }
                            @if let Some(n) = o.get("note").and_then(Value::as_str) {
                                tr { th scope="row" { "Note" } td { (n) } }
                            }
                            @if let Some(c) = o.get("reasonCode").and_then(Value::as_str) {
                                tr { th scope="row" { "Reason code" } td { code { (c) } } }
                            }
                        }
                    }
                    _ => {}
                }
                tr { th scope="row" { "Status" } td { (humanize(s.status.as_str())) } }
                @if let Some(by) = &s.decided_by {
                    tr { th scope="row" { (if s.kind == RequestKind::Approval { "Decided by" } else { "Answered by" }) } td { (by) } }
                }
                @if let Some(at) = &s.decided_at {
                    tr { th scope="row" { "When" } td { (when(at)) } }
                }
                @if let Some(Value::Object(answers)) = get("fields") {
                    @for field in &view.fields {
                        @if let Some(v) = answers.get(field.id()) {
                            tr { th scope="row" { (field.label()) } td { (forms::answer_text(field, v)) } }
                        }
                    }
                }
            }
        }
    }
}

/// The task's events, oldest first; the event of this request is marked, and an event that
/// answers a request links to it.
fn timeline(view: &RequestView) -> Markup {
    // The summaries of the task's requests, to name the request an answer responds to.
    let summaries: std::collections::HashMap<&str, &str> = view
        .events
        .iter()
        .filter_map(|e| match &e.payload {
            Payload::ApprovalRequested(r) => Some((e.id.as_str(), r.summary.as_str())),
            Payload::ElicitationRequested(r) => Some((e.id.as_str(), r.summary.as_str())),
            _ => None,
        })
        .collect();
    html! {
        section.card {
            h2 { "Timeline of task " (view.summary.task_name) }
            @if view.events.is_empty() {
                p.muted { "No events." }
            } @else {
                ol.timeline {
                    @for e in &view.events {
                        @let payload = serde_json::to_value(&e.payload).unwrap_or(Value::Null);
                        @let this = e.id == view.summary.id;
                        @let source = serde_json::to_value(e.source).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
                        li id={"ev-" (e.id)} class={(if this { "this " } else { "" }) (source.to_lowercase())} {
                            div.head {
                                span.type { (humanize(e.event_type.as_str())) }
                                span.when { (when(&e.timestamp)) " · by " (who(&source, &payload)) }
                            }
                            div.body {
                                @if !this && summaries.contains_key(e.id.as_str()) {
                                    a href={"/inbox/requests/" (e.id)} { (event_text(&payload)) }
                                } @else {
                                    (event_text(&payload))
                                }
                                @if let Some(r) = &e.in_response_to {
                                    div.small { "In response to "
                                        a href={"/inbox/requests/" (r)} {
                                            (summaries.get(r.as_str()).copied().unwrap_or(short(r)))
                                        }
                                    }
                                }
                                @if let (Some(from), Some(to)) = (&e.transition_from, &e.transition_to) {
                                    div.small { "Step " (from) " → " (to) }
                                }
                                @if this { div.small { "(this request)" } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Who did it: the person for a human's decision, else the actor kind.
fn who(source: &str, payload: &Value) -> String {
    let person = payload
        .pointer("/authority/subject")
        .or_else(|| payload.get("answeredBy"))
        .and_then(Value::as_str);
    match person {
        Some(p) => p.to_owned(),
        None => humanize(source),
    }
}

/// One line for an event, from its payload's JSON so event kinds added later still show.
fn event_text(payload: &Value) -> Markup {
    let s = |k: &str| payload.get(k).and_then(Value::as_str);
    html! {
        @if let Some(summary) = s("summary") {
            (summary)
        } @else if let Some(o) = payload.get("outcome") {
            (humanize(o.get("type").and_then(Value::as_str).unwrap_or("?")))
            @if let Some(n) = o.get("note").and_then(Value::as_str) { " — " (n) }
        } @else if let Some(m) = s("message").or_else(|| s("description")) {
            (m)
        } @else if let Some(name) = s("name") {
            "Task " (name) " created"
            @if let Some(step) = s("initialState") { " in step " (step) }
        } @else if let Some(state) = s("state") {
            "Request " (state)
        } @else if let Some(Value::Object(a)) = payload.get("answers") {
            (a.len()) " answer" (if a.len() == 1 { "" } else { "s" })
        }
    }
}

/// `receipt.txt` → `txt`; `FILE` without an extension.
fn extension(name: &str) -> &str {
    match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && !ext.is_empty() && ext.len() <= 5 => ext,
        _ => "file",
    }
}

/// The last 8 characters of an id, enough to tell requests of one task apart.
fn short(id: &str) -> &str {
    let start = id.len().saturating_sub(8);
    id.get(start..).unwrap_or(id)
}
