//! The two decision forms: the approval form and the elicitation form with one control per
//! field kind, and the conversion of what a browser submits into the typed answers the
//! inbox validates.
//!
//! Controls by kind: `Text` → an `email`/`tel`/`url`/`text` input by its format, with
//! `minlength`/`maxlength`; `TextArea` → a textarea; `Number` → a number input (`step=1`
//! when `integerOnly`); `Slider` → a range input with its value shown beside it; `Switch` →
//! a checkbox; `Select` → a select; `Multiselect` → checkboxes; `DateField`, `DateTime`,
//! `Time` → `date`, `datetime-local` (in UTC, as the label says) and `time` inputs.
//!
//! Every control is named `f.<field id>`, so no field id can collide with `csrf_token`.
//! The browser's own checks are a convenience; the server's ([`tern_inbox::validate_answers`])
//! decide, and their messages are shown next to each field with the entered values kept.

use std::collections::HashMap;

use maud::{Markup, html};
use serde_json::{Map, Value};
use tern_inbox::fields::{Field, FieldBid, FieldError, TextFormat};
use tern_inbox::{OutcomeType, Timestamp, bid_applies};

use super::layout::{humanize, plain};

/// The prefix of every answer control's name.
pub(super) const FIELD_PREFIX: &str = "f.";

/// The five outcomes in the order the form lists them.
pub(super) const OUTCOMES: [OutcomeType; 5] = [
    OutcomeType::Approve,
    OutcomeType::Reject,
    OutcomeType::EditAndApprove,
    OutcomeType::Escalate,
    OutcomeType::RequestMoreInfo,
];

/// The wire spelling of an outcome (`EDIT_AND_APPROVE`).
pub(super) fn outcome_wire(o: OutcomeType) -> String {
    match serde_json::to_value(o) {
        Ok(Value::String(s)) => s,
        // OutcomeType is a unit enum with a rename rule: it always serializes to a string.
        _ => format!("{o:?}"),
    }
}

/// `EDIT_AND_APPROVE` → the outcome; anything else → `None`.
pub(super) fn parse_outcome(s: &str) -> Option<OutcomeType> {
    serde_json::from_value(Value::String(s.to_owned())).ok()
}

/// What the approval form shows: the choice pre-selected and the texts pre-filled.
#[derive(Debug, Default, Clone)]
pub(super) struct ApprovalDraft {
    pub outcome: Option<OutcomeType>,
    pub note: String,
    pub reason_code: String,
}

/// `outcomes`: those offered, in order. `scopes`: a choice among these `(code, label)`, sent
/// as the reason code (a dangerous command's scope: once, for the session, always). Without
/// scopes there is no reason code field: it is for machines (`tern inbox --reason-code`),
/// not for people.
pub(super) fn approval_form(
    id: &str,
    csrf: &str,
    draft: &ApprovalDraft,
    outcomes: &[OutcomeType],
    recommended: Option<OutcomeType>,
    error: Option<&str>,
    scopes: Option<&[(&str, &str)]>,
) -> Markup {
    html! {
        form.card method="post" action={"/inbox/requests/" (id) "/decide"} id="decide" {
            h2 { "Your decision" }
            input type="hidden" name="csrf_token" value=(csrf);
            fieldset.field.(if error.is_some() { "has-error" } else { "" }) {
                legend { "Outcome" span.req aria-hidden="true" { "*" } }
                div.choices {
                    @for &o in outcomes {
                        @let wire = outcome_wire(o);
                        label.choice {
                            input type="radio" name="outcome" value=(wire) required
                                checked[draft.outcome == Some(o)];
                            span { (humanize(&wire)) }
                            @if recommended == Some(o) {
                                span.hint { "Recommended" }
                            }
                        }
                    }
                }
                @if let Some(e) = error {
                    p.error role="alert" { (e) }
                }
            }
            div.field {
                label for="note" { "Note" }
                textarea id="note" name="note" rows="3" maxlength="10000" { (draft.note) }
            }
            @if let Some(scopes) = scopes {
                div.field {
                    label for="reason_code" { "If approved, allow" }
                    select id="reason_code" name="reason_code" {
                        @for (code, label) in scopes {
                            option value=(code) selected[draft.reason_code == *code] { (label) }
                        }
                    }
                }
            }
            div.actions {
                button type="submit" { "Submit decision" }
            }
        }
    }
}

/// The elicitation form. `values` are wire-form answers to show (the agent's applicable
/// pre-fills, or what the reviewer entered); `errors` are the server's, per field.
pub(super) fn elicitation_form(
    id: &str,
    csrf: &str,
    fields: &[Field],
    bids: &[FieldBid],
    values: &Map<String, Value>,
    errors: &[FieldError],
) -> Markup {
    let known: Vec<&str> = fields.iter().map(Field::id).collect();
    let stray: Vec<&FieldError> = errors
        .iter()
        .filter(|e| !known.contains(&e.field_id.as_str()))
        .collect();
    html! {
        form.card method="post" action={"/inbox/requests/" (id) "/answer"} id="answer" {
            h2 { "Your answer" }
            input type="hidden" name="csrf_token" value=(csrf);
            @for e in &stray {
                p.error role="alert" { (e.field_id) ": " (e.message) }
            }
            @for (i, field) in fields.iter().enumerate() {
                @let errs: Vec<&FieldError> = errors.iter().filter(|e| e.field_id == field.id()).collect();
                @let bid = bids.iter().find(|b| b.field_id == field.id());
                (field_control(i, field, values.get(field.id()), bid, &errs))
            }
            div.actions {
                button type="submit" { "Submit answer" }
            }
        }
    }
}

/// The agent's pre-fills that are valid answers, keyed by field id.
pub(super) fn prefill(fields: &[Field], bids: &[FieldBid]) -> Map<String, Value> {
    let mut out = Map::new();
    for field in fields {
        if let Some(bid) = bids.iter().find(|b| bid_applies(field, b)) {
            out.insert(field.id().to_owned(), bid.value.clone());
        }
    }
    out
}

fn field_control(
    index: usize,
    field: &Field,
    value: Option<&Value>,
    bid: Option<&FieldBid>,
    errors: &[&FieldError],
) -> Markup {
    let dom_id = format!("f{index}");
    let err_id = format!("f{index}-err");
    let name = format!("{FIELD_PREFIX}{}", field.id());
    let required = field.required();
    let text = value.map(|v| input_text(field, v)).unwrap_or_default();
    let described = (!errors.is_empty()).then_some(err_id.as_str());
    let has_error = if errors.is_empty() { "" } else { "has-error" };
    // Group controls (several inputs) get a fieldset and legend; single ones a label.
    let grouped = matches!(field, Field::Multiselect(_));
    let control = match field {
        Field::Text(f) => {
            let kind = match f.format {
                Some(TextFormat::Email) => "email",
                Some(TextFormat::Phone) => "tel",
                Some(TextFormat::Url) => "url",
                None => "text",
            };
            let autocomplete = match f.format {
                Some(TextFormat::Email) => "email",
                Some(TextFormat::Phone) => "tel",
                Some(TextFormat::Url) => "url",
                None => "off",
            };
            html! {
                input type=(kind) id=(dom_id) name=(name) value=(text) required[required]
                    minlength=[f.min_length] maxlength=[f.max_length]
                    autocomplete=(autocomplete) aria-describedby=[described];
            }
        }
        Field::TextArea(f) => html! {
            textarea id=(dom_id) name=(name) rows="4" required[required]
                minlength=[f.min_length] maxlength=[f.max_length] aria-describedby=[described] { (text) }
        },
        Field::Number(f) => html! {
            input type="number" id=(dom_id) name=(name) value=(text) required[required]
                step=(if f.integer_only { "1" } else { "any" })
                min=[f.min] max=[f.max] inputmode=(if f.integer_only { "numeric" } else { "decimal" })
                aria-describedby=[described];
        },
        Field::Slider(f) => {
            // A range input always has a value; start at the pre-fill or the minimum.
            let start = if text.is_empty() {
                number_text(f.min)
            } else {
                text.clone()
            };
            let step = f.step.map_or_else(|| "any".to_owned(), number_text);
            html! {
                div.slider {
                    input type="range" id=(dom_id) name=(name) value=(start)
                        min=(number_text(f.min)) max=(number_text(f.max)) step=(step)
                        aria-describedby=[described];
                    output for=(dom_id) { (start) }
                }
                p.help { "From " (number_text(f.min)) " to " (number_text(f.max))
                    @if let Some(s) = f.step { ", in steps of " (number_text(s)) } }
            }
        }
        Field::Switch(_) => {
            let on = matches!(value, Some(Value::Bool(true)))
                || matches!(value, Some(Value::String(s)) if s == "true");
            html! {
                label.switch {
                    input.toggle type="checkbox" id=(dom_id) name=(name) value="true" checked[on]
                        role="switch" aria-describedby=[described];
                    span { "Yes" }
                }
            }
        }
        Field::Select(f) => html! {
            select id=(dom_id) name=(name) required[required] aria-describedby=[described] {
                option value="" selected[text.is_empty()] { "Choose…" }
                @for o in &f.options {
                    option value=(o) selected[text == *o] { (o) }
                }
            }
        },
        Field::Multiselect(f) => {
            let chosen: Vec<String> = match value {
                Some(Value::Array(items)) => items.iter().map(plain).collect(),
                _ => Vec::new(),
            };
            html! {
                div.choices {
                    @for o in &f.options {
                        label.choice {
                            input type="checkbox" name=(name) value=(o) checked[chosen.contains(o)];
                            span { (o) }
                        }
                    }
                }
            }
        }
        Field::DateField(f) => html! {
            input type="date" id=(dom_id) name=(name) value=(text) required[required]
                min=[f.min.as_deref()] max=[f.max.as_deref()] aria-describedby=[described];
        },
        Field::DateTime(f) => {
            let min = f.min.as_deref().map(to_local_input);
            let max = f.max.as_deref().map(to_local_input);
            let step = has_seconds(&text, &min, &max).then_some("1");
            html! {
                input type="datetime-local" id=(dom_id) name=(name) value=(text) required[required]
                    min=[min] max=[max] step=[step] aria-describedby=[described];
            }
        }
        Field::Time(f) => {
            let step = has_seconds(&text, &f.min, &f.max).then_some("1");
            html! {
                input type="time" id=(dom_id) name=(name) value=(text) required[required]
                    min=[f.min.as_deref()] max=[f.max.as_deref()] step=[step]
                    aria-describedby=[described];
            }
        }
    };
    let label_suffix = match field {
        Field::DateTime(_) => Some("(UTC)"),
        _ => None,
    };
    let head = html! {
        (field.label())
        @if required { span.req title="required" { "*" } }
        @if let Some(s) = label_suffix { " " span.muted.small { (s) } }
    };
    html! {
        @if grouped {
            fieldset.field.(has_error) data-field=(field.id()) data-kind=(field.kind()) {
                legend { (head) }
                (help_and_control(field, control))
                (bid_and_errors(field, bid, errors, &err_id))
            }
        } @else {
            div.field.(has_error) data-field=(field.id()) data-kind=(field.kind()) {
                label for=(dom_id) { (head) }
                (help_and_control(field, control))
                (bid_and_errors(field, bid, errors, &err_id))
            }
        }
    }
}

fn help_and_control(field: &Field, control: Markup) -> Markup {
    html! {
        @if let Some(d) = field.description() { p.help { (d) } }
        (control)
    }
}

fn bid_and_errors(
    field: &Field,
    bid: Option<&FieldBid>,
    errors: &[&FieldError],
    err_id: &str,
) -> Markup {
    html! {
        @if let Some(b) = bid.filter(|b| !b.value.is_null()) {
            p.bid {
                "Agent suggests: " strong { (answer_text(field, &b.value)) }
                @if let Some(c) = b.confidence { " (" (percent(c)) " sure)" }
                @if let Some(r) = &b.rationale { " — " (r) }
            }
        }
        @if !errors.is_empty() {
            div.errors id=(err_id) role="alert" {
                @for e in errors { p.error { (e.message) } }
            }
        }
    }
}

/// An answer (or a suggestion) as a person reads it; date-times in UTC.
pub(super) fn answer_text(field: &Field, value: &Value) -> String {
    match (field, value) {
        (Field::DateTime(_), Value::String(s)) => match Timestamp::parse(s) {
            Ok(t) => format!("{} UTC", to_local_input(t.as_str()).replace('T', " ")),
            Err(_) => s.clone(),
        },
        _ => plain(value),
    }
}

/// `0.8` → `80%`.
pub(super) fn percent(confidence: f64) -> String {
    let p = (confidence * 100.0).round();
    if (0.0..=100.0).contains(&p) {
        format!("{p}%")
    } else {
        number_text(confidence)
    }
}

/// A number as an input's value: `5` not `5.0`.
fn number_text(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        x.to_string()
    }
}

/// An answer as the text of its control.
fn input_text(field: &Field, value: &Value) -> String {
    match (field, value) {
        (Field::DateTime(_), Value::String(s)) => to_local_input(s),
        (_, Value::String(s)) => s.clone(),
        (_, Value::Number(n)) => n.to_string(),
        (_, Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    }
}

fn has_seconds(value: &str, min: &Option<String>, max: &Option<String>) -> bool {
    // `HH:MM:SS` or `YYYY-MM-DDTHH:MM:SS`: seconds show as a second colon in the time part.
    let secs = |s: &str| {
        let time = s.rsplit('T').next().unwrap_or(s);
        time.matches(':').count() >= 2
    };
    secs(value) || min.as_deref().is_some_and(secs) || max.as_deref().is_some_and(secs)
}

/// An RFC 3339 date-time → a `datetime-local` value in UTC (`2024-05-01T07:30`, with
/// seconds only when there are some). Text that does not parse is returned unchanged.
pub(super) fn to_local_input(s: &str) -> String {
    let Ok(t) = Timestamp::parse(s) else {
        return s.to_owned();
    };
    let utc = Timestamp::from_unix_millis(t.unix_millis());
    // `YYYY-MM-DDTHH:MM:SS.mmmZ`, ASCII.
    let text = utc.as_str();
    match (text.get(..16), text.get(..19), text.get(16..19)) {
        (Some(minutes), _, Some(":00")) => minutes.to_owned(),
        (_, Some(seconds), _) => seconds.to_owned(),
        _ => text.to_owned(),
    }
}

/// A `datetime-local` value, which has no zone, → RFC 3339 in UTC (the form says UTC).
/// Text that already has an offset, or that is no date-time at all, is passed on unchanged
/// for the validator to judge.
pub(super) fn from_local_input(s: &str) -> String {
    let s = s.trim();
    if s.is_empty() || Timestamp::parse(s).is_ok() {
        return s.to_owned();
    }
    for candidate in [format!("{s}Z"), format!("{s}:00Z")] {
        if Timestamp::parse(&candidate).is_ok() {
            return candidate;
        }
    }
    s.to_owned()
}

/// The answers a browser submitted, typed per field kind, ready for
/// [`tern_inbox::Inbox::answer_elicitation`]. `pairs` is the whole form in order; only
/// `f.`-prefixed names are answers. A name that is no field is passed on, so the validator
/// reports it rather than it being dropped silently.
pub(super) fn answers_from_form(
    fields: &[Field],
    pairs: &[(String, String)],
) -> Map<String, Value> {
    let mut submitted: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for (name, value) in pairs {
        if let Some(id) = name.strip_prefix(FIELD_PREFIX) {
            let entry = submitted.entry(id).or_default();
            if entry.is_empty() {
                order.push(id);
            }
            entry.push(value);
        }
    }
    let mut answers = Map::new();
    for field in fields {
        let values = submitted.remove(field.id()).unwrap_or_default();
        let first = values.first().copied();
        let answer = match field {
            // Unchecked boxes send nothing: off, and no choices.
            Field::Switch(_) => Some(Value::Bool(
                values.iter().any(|v| *v == "true" || *v == "on"),
            )),
            Field::Multiselect(_) => Some(Value::Array(
                values
                    .iter()
                    .map(|v| Value::String((*v).to_owned()))
                    .collect(),
            )),
            // Browsers send a textarea's line breaks as CRLF; count them as one character.
            Field::TextArea(_) => first.map(|v| Value::String(v.replace("\r\n", "\n"))),
            Field::Number(_) | Field::Slider(_) => {
                first.map(|v| Value::String(v.trim().to_owned()))
            }
            Field::DateTime(_) => first.map(|v| Value::String(from_local_input(v))),
            Field::Text(_) | Field::Select(_) | Field::DateField(_) | Field::Time(_) => {
                first.map(|v| Value::String(v.to_owned()))
            }
        };
        if let Some(a) = answer {
            answers.insert(field.id().to_owned(), a);
        }
    }
    for id in order {
        if let Some(values) = submitted.get(id) {
            let v = values.first().copied().unwrap_or_default();
            answers.insert(id.to_owned(), Value::String(v.to_owned()));
        }
    }
    answers
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tern_inbox::fields::{BoundedField, Multiselect, Switch, TextArea};

    fn bounded(id: &str, min: Option<&str>, max: Option<&str>) -> BoundedField {
        BoundedField {
            id: id.into(),
            label: id.into(),
            required: true,
            description: None,
            min: min.map(Into::into),
            max: max.map(Into::into),
        }
    }

    #[test]
    fn datetime_local_round_trip() {
        assert_eq!(
            to_local_input("2024-05-01T09:30:00+02:00"),
            "2024-05-01T07:30"
        );
        assert_eq!(
            to_local_input("2024-05-01T09:30:15Z"),
            "2024-05-01T09:30:15"
        );
        assert_eq!(to_local_input("nonsense"), "nonsense");
        assert_eq!(from_local_input("2024-05-01T07:30"), "2024-05-01T07:30:00Z");
        assert_eq!(
            from_local_input("2024-05-01T07:30:15"),
            "2024-05-01T07:30:15Z"
        );
        assert_eq!(
            from_local_input("2024-05-01T07:30:00+02:00"),
            "2024-05-01T07:30:00+02:00"
        );
        assert_eq!(from_local_input("tomorrow"), "tomorrow");
        assert_eq!(from_local_input(""), "");
    }

    #[test]
    fn form_values_become_typed_answers() {
        let fields = vec![
            Field::Switch(Switch {
                id: "on".into(),
                label: "On".into(),
                required: false,
                description: None,
            }),
            Field::Switch(Switch {
                id: "off".into(),
                label: "Off".into(),
                required: false,
                description: None,
            }),
            Field::Multiselect(Multiselect {
                id: "m".into(),
                label: "M".into(),
                required: false,
                description: None,
                options: vec!["a".into(), "b".into(), "c".into()],
            }),
            Field::TextArea(TextArea {
                id: "t".into(),
                label: "T".into(),
                required: false,
                description: None,
                min_length: None,
                max_length: None,
            }),
            Field::DateTime(bounded("when", None, None)),
        ];
        let pairs: Vec<(String, String)> = [
            ("csrf_token", "x"),
            ("f.on", "true"),
            ("f.m", "a"),
            ("f.m", "c"),
            ("f.t", "one\r\ntwo"),
            ("f.when", "2024-05-01T07:30"),
            ("f.extra", "?"),
        ]
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
        let answers = answers_from_form(&fields, &pairs);
        assert_eq!(
            Value::Object(answers),
            json!({"on": true, "off": false, "m": ["a", "c"], "t": "one\ntwo",
                   "when": "2024-05-01T07:30:00Z", "extra": "?"})
        );
    }

    #[test]
    fn outcomes_spelled_as_on_the_wire() {
        assert_eq!(
            outcome_wire(OutcomeType::EditAndApprove),
            "EDIT_AND_APPROVE"
        );
        assert_eq!(
            parse_outcome("REQUEST_MORE_INFO"),
            Some(OutcomeType::RequestMoreInfo)
        );
        assert_eq!(parse_outcome("approve"), None);
    }
}
