//! One request's page: what the agent asks, the session that asked (linked to its
//! conversation) and the agent's own words before it asked, its context and recommendation,
//! attachments, the decision form and a way to dismiss it while pending (or the result once
//! settled), and the task's timeline. Reason codes are for machines and not shown; a
//! command's scope, which travels as one, is shown in words.

use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use serde_json::{Map, Value};
use tern_inbox::FieldError;
use tern_inbox::OutcomeType;
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

/// The gateway session a request came from.
pub(super) struct SessionLink {
    pub id: String,
    /// The session's title, or `Session <short id>` without one.
    pub title: String,
}

/// Where a request came from, when the gateway knows.
pub(super) struct Origin {
    pub session: Option<SessionLink>,
    /// What the agent wrote in the message whose tool call asked.
    pub words: Option<String>,
}

/// A banner above the page's content.
pub(super) enum Notice {
    Saved,
    Dismissed,
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

/// The outcomes a reviewer is offered: a command runs or not (its scope is chosen apart),
/// so only approve and reject; any other approval all five.
pub(super) fn outcomes_for(view: &RequestView) -> &'static [OutcomeType] {
    if is_command(view) {
        &[OutcomeType::Approve, OutcomeType::Reject]
    } else {
        &forms::OUTCOMES
    }
}

/// A dangerous command's approval request: the gateway's own agent asked it (any agent key
/// could write `action = command` into its own request's context) and its context says
/// `action = command`.
fn is_command(view: &RequestView) -> bool {
    view.summary.task_owner == tern_waits::client::EMBEDDED_OWNER
        && view
            .key_value_context
            .as_ref()
            .and_then(|c| c.get("action"))
            .is_some_and(|a| a == "command")
}

#[expect(
    clippy::too_many_arguments,
    reason = "one page's parts, each read by the handler; a struct would only rename them"
)]
pub(super) fn page(
    view: &RequestView,
    attachments: &[AttachmentInfo],
    origin: &Origin,
    pending_count: u64,
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
            "Project " strong { (s.project_name) }
            @match &origin.session {
                Some(session) => {
                    " · session " a.session href={"/inbox/sessions/" (session.id)} { (session.title) }
                }
                None => { " · task " strong { (s.task_name) } }
            }
            " · asked " (when(&s.created_at))
        }
        @match &state.notice {
            Some(Notice::Saved) => div.notice.ok role="status" {
                @if s.kind == RequestKind::Approval { "Your decision was recorded." }
                @else { "Your answer was recorded." }
            },
            Some(Notice::Dismissed) => div.notice.ok role="status" {
                "The request was dismissed; its agent sees it as withdrawn."
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
        @if let Some(words) = &origin.words {
            section.card.words {
                h2 { "What the agent said before asking" }
                p.said { (words) }
                @if let Some(session) = &origin.session {
                    p.small { a href={"/inbox/sessions/" (session.id)} { "The whole conversation" } }
                }
            }
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
                    (forms::approval_form(&s.id, csrf, &draft, outcomes_for(view), recommended, state.outcome_error.as_deref(), scopes))
                }
                RequestKind::Elicitation => {
                    @let values = state.answers.clone().unwrap_or_else(|| forms::prefill(&view.fields, &view.field_bids));
                    (forms::elicitation_form(&s.id, csrf, &view.fields, &view.field_bids, &values, &state.field_errors))
                }
            }
        }
        @if pending {
            (dismiss_form(&s.id, csrf))
        }
        (timeline(view, origin))
    };
    Page {
        title: &s.summary,
        nav: Nav::None,
        reviewer: Some(reviewer),
        csrf: Some(csrf),
        pending: Some(pending_count),
        body,
        script: pending.then_some(super::scripts::PENDING_SCRIPT),
    }
    .render(status)
}

/// Takes a request nobody will decide off the list; the agent reads it as withdrawn.
fn dismiss_form(id: &str, csrf: &str) -> Markup {
    html! {
        details.card.dismiss {
            summary { "Dismiss this request" }
            form method="post" action={"/inbox/requests/" (id) "/dismiss"} id="dismiss" {
                input type="hidden" name="csrf_token" value=(csrf);
                p.help {
                    "For a request nobody will decide (stale, asked twice, no longer relevant): "
                    "it leaves the pending list and its agent is told it was withdrawn."
                }
                div.field {
                    label for="dismiss_reason" { "Reason (optional, shown to the agent)" }
                    input type="text" id="dismiss_reason" name="reason" maxlength="2000" autocomplete="off";
                }
                div.actions { button.secondary type="submit" { "Dismiss request" } }
            }
        }
    }
}

/// A command approval's scope (sent as the reason code) in words.
fn scope_label(code: &str) -> &str {
    COMMAND_SCOPES
        .iter()
        .find(|(c, _)| c.eq_ignore_ascii_case(code))
        .map_or(code, |(_, label)| label)
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
                            @if is_command(view) && o.get("type").and_then(Value::as_str).is_some_and(|t| t.contains("APPROVE")) {
                                tr { th scope="row" { "Allowed" }
                                    td { (scope_label(o.get("reasonCode").and_then(Value::as_str).unwrap_or("once"))) } }
                            }
                        }
                    }
                    _ => {}
                }
                tr { th scope="row" { "Status" } td { (humanize(s.status.as_str())) } }
                @if s.status == RequestStatus::Withdrawn {
                    @if let Some(by) = get("dismissedBy").and_then(Value::as_str) {
                        tr { th scope="row" { "Dismissed by" } td { (by) } }
                    } @else if let Some(by) = &s.decided_by {
                        tr { th scope="row" { "Withdrawn by" } td { (by) } }
                    }
                    @if let Some(why) = get("reason").and_then(Value::as_str) {
                        tr { th scope="row" { "Reason" } td { (why) } }
                    }
                } @else if let Some(by) = &s.decided_by {
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
fn timeline(view: &RequestView, origin: &Origin) -> Markup {
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
            h2 {
                "Timeline of "
                @match &origin.session {
                    Some(s) => { "session " (s.title) }
                    None => { "task " (view.summary.task_name) }
                }
            }
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
