//! Elicitation fields: what an agent asks a human to fill in, and the checks on the
//! answers.
//!
//! The types mirror the Pump Up SDK (`pumpup-sdk` 0.0.10, `pumpup/types/field.py` and
//! friends) field for field: [`Field`] is the union tagged by `"type"`, property names are
//! the SDK's camelCase aliases, and optional properties are left out of the JSON when
//! unset, as the SDK does. Unknown extra properties are ignored on input, like the SDK's
//! `extra="allow"` models.
//!
//! Two checks run at two different times:
//! - [`validate_field_defs`] when an agent opens an elicitation request: are the field
//!   definitions themselves usable (ids unique, ranges not inverted, options present)?
//! - [`validate_answers`] when a human submits: is every answer acceptable for its field?
//!   It returns the answers normalized, ready to store as the `ElicitationResult`'s
//!   `fields`.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Number as JsonNumber, Value};

use crate::datetime::{self, ParseError};

/// One input on an elicitation form. The `type` property on the wire selects the kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Field {
    /// One line of text, optionally in a known format.
    Text(Text),
    /// Free text over several lines.
    TextArea(TextArea),
    /// A number typed in.
    Number(Number),
    /// A number picked on a bounded scale.
    Slider(Slider),
    /// On or off.
    Switch(Switch),
    /// Exactly one of a list of options.
    Select(Select),
    /// Any number of distinct options from a list.
    Multiselect(Multiselect),
    /// A calendar date.
    DateField(DateField),
    /// A date and time with a UTC offset.
    DateTime(DateTime),
    /// A time of day.
    Time(Time),
}

/// Formats a [`Text`] field can require. The SDK types this as an open enum (any string
/// accepted for forward compatibility); the inbox validates answers against the format,
/// so it accepts only the formats it knows how to check and rejects the request otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TextFormat {
    Email,
    Phone,
    Url,
}

/// `{"type":"Text", id, label, required, description?, format?, minLength?, maxLength?}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Text {
    pub id: String,
    pub label: String,
    pub required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<TextFormat>,
    /// In characters (Unicode scalar values), not bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_length: Option<u64>,
    /// In characters (Unicode scalar values), not bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u64>,
}

/// `{"type":"TextArea", id, label, required, description?, minLength?, maxLength?}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TextArea {
    pub id: String,
    pub label: String,
    pub required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_length: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u64>,
}

/// `{"type":"Number", id, label, required, description?, integerOnly, min?, max?}` —
/// `integerOnly` is required on the wire (the SDK gives it no default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Number {
    pub id: String,
    pub label: String,
    pub required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub integer_only: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

/// `{"type":"Slider", id, label, required, description?, min, max, step?}` — unlike
/// [`Number`], both bounds are required. Without `step` any value in range is allowed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Slider {
    pub id: String,
    pub label: String,
    pub required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub min: f64,
    pub max: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<f64>,
}

/// `{"type":"Switch", id, label, required, description?}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Switch {
    pub id: String,
    pub label: String,
    pub required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `{"type":"Select", id, label, required, description?, options}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Select {
    pub id: String,
    pub label: String,
    pub required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub options: Vec<String>,
}

/// `{"type":"Multiselect", id, label, required, description?, options}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Multiselect {
    pub id: String,
    pub label: String,
    pub required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub options: Vec<String>,
}

/// The shape shared by the three date and time kinds: `{id, label, required, description?,
/// min?, max?}`. Bounds are kept as the strings given, so they go back out exactly as they
/// came in; [`validate_field_defs`] checks that they parse for the field's kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoundedField {
    pub id: String,
    pub label: String,
    pub required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<String>,
}

/// `{"type":"DateField", …}` with bounds written `YYYY-MM-DD` (the SDK's `datetime.date`).
pub type DateField = BoundedField;

/// `{"type":"DateTime", …}` with bounds in RFC 3339 with an offset (the SDK's
/// `datetime.datetime`, which it always sends with an offset, `Z` for UTC).
pub type DateTime = BoundedField;

/// `{"type":"Time", …}`. The SDK types the bounds as plain strings; the inbox requires
/// `HH:MM` or `HH:MM:SS`, like the answers.
pub type Time = BoundedField;

/// The agent's suggested value for one field, shown to the human as a pre-fill.
/// `value` is required on the wire but may be `null` (as in the SDK).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldBid {
    pub field_id: String,
    pub value: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
}

/// Applies `$body` to the inner struct of whichever kind `$field` is — every kind has the
/// common properties, so the accessors need not list ten identical arms each.
macro_rules! each_kind {
    ($field:expr, $inner:ident => $body:expr) => {
        match $field {
            Field::Text($inner) => $body,
            Field::TextArea($inner) => $body,
            Field::Number($inner) => $body,
            Field::Slider($inner) => $body,
            Field::Switch($inner) => $body,
            Field::Select($inner) => $body,
            Field::Multiselect($inner) => $body,
            Field::DateField($inner) => $body,
            Field::DateTime($inner) => $body,
            Field::Time($inner) => $body,
        }
    };
}

impl Field {
    /// The id answers are keyed by.
    pub fn id(&self) -> &str {
        each_kind!(self, f => &f.id)
    }

    /// The caption shown to the human.
    pub fn label(&self) -> &str {
        each_kind!(self, f => &f.label)
    }

    /// Whether the form can be submitted without an answer to this field.
    pub fn required(&self) -> bool {
        each_kind!(self, f => f.required)
    }

    /// Optional help text shown under the label.
    pub fn description(&self) -> Option<&str> {
        each_kind!(self, f => f.description.as_deref())
    }

    /// The wire value of `type`, e.g. `"DateField"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Field::Text(_) => "Text",
            Field::TextArea(_) => "TextArea",
            Field::Number(_) => "Number",
            Field::Slider(_) => "Slider",
            Field::Switch(_) => "Switch",
            Field::Select(_) => "Select",
            Field::Multiselect(_) => "Multiselect",
            Field::DateField(_) => "DateField",
            Field::DateTime(_) => "DateTime",
            Field::Time(_) => "Time",
        }
    }
}

/// The machine-readable `code`s of [`FieldError`] and [`FieldDefError`]. They are part of
/// the inbox's API (a UI may key translations or highlighting on them), so they are
/// constants rather than strings scattered through the checks.
pub mod code {
    // Answers.
    pub const REQUIRED: &str = "required";
    pub const UNKNOWN_FIELD: &str = "unknown_field";
    pub const WRONG_TYPE: &str = "wrong_type";
    pub const TOO_SHORT: &str = "too_short";
    pub const TOO_LONG: &str = "too_long";
    pub const INVALID_FORMAT: &str = "invalid_format";
    pub const BELOW_MIN: &str = "below_min";
    pub const ABOVE_MAX: &str = "above_max";
    pub const NOT_INTEGER: &str = "not_integer";
    pub const OFF_STEP: &str = "off_step";
    pub const NOT_AN_OPTION: &str = "not_an_option";
    /// Also used for field definitions that list an option twice.
    pub const DUPLICATE_OPTION: &str = "duplicate_option";
    pub const INVALID_DATE: &str = "invalid_date";
    pub const INVALID_TIME: &str = "invalid_time";
    // Field definitions.
    pub const EMPTY_ID: &str = "empty_id";
    pub const DUPLICATE_ID: &str = "duplicate_id";
    pub const EMPTY_LABEL: &str = "empty_label";
    pub const MIN_ABOVE_MAX: &str = "min_above_max";
    pub const INVALID_BOUND: &str = "invalid_bound";
    pub const INVALID_STEP: &str = "invalid_step";
    pub const NO_OPTIONS: &str = "no_options";
    pub const EMPTY_OPTION: &str = "empty_option";
}

/// One problem with one answer, worded for the human who gave it.
/// Serializes as `{"fieldId", "code", "message"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(rename_all = "camelCase")]
#[error("{field_id}: {message}")]
pub struct FieldError {
    pub field_id: String,
    /// One of the constants in [`code`].
    pub code: &'static str,
    pub message: String,
}

/// One problem with one field definition, worded for the agent's developer.
/// Serializes as `{"index", "fieldId", "code", "message"}`; `index` is the position in
/// the request's `fields`, which is the only way to point at a field whose id is empty
/// or duplicated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(rename_all = "camelCase")]
#[error("fields[{index}] ({field_id:?}): {message}")]
pub struct FieldDefError {
    pub index: usize,
    pub field_id: String,
    /// One of the constants in [`code`].
    pub code: &'static str,
    pub message: String,
}

/// Checks an elicitation request's field definitions, returning every problem found.
///
/// Rules: ids non-empty and unique; labels non-empty; `minLength <= maxLength`;
/// numeric bounds finite with `min <= max`; slider `step` finite and `> 0`; date,
/// date-time and time bounds well formed with `min <= max`; select and multiselect
/// options non-empty, each option non-empty and listed once.
pub fn validate_field_defs(fields: &[Field]) -> Result<(), Vec<FieldDefError>> {
    let mut errors = Vec::new();
    let mut seen_ids = HashSet::new();
    for (index, field) in fields.iter().enumerate() {
        let mut err = |code: &'static str, message: String| {
            errors.push(FieldDefError {
                index,
                field_id: field.id().to_owned(),
                code,
                message,
            })
        };
        if field.id().trim().is_empty() {
            err(code::EMPTY_ID, "id must not be empty".into());
        } else if !seen_ids.insert(field.id()) {
            err(
                code::DUPLICATE_ID,
                format!("id {:?} is used by an earlier field", field.id()),
            );
        }
        if field.label().trim().is_empty() {
            // A human cannot answer a question that has no caption.
            err(code::EMPTY_LABEL, "label must not be empty".into());
        }
        match field {
            Field::Text(Text {
                min_length,
                max_length,
                ..
            })
            | Field::TextArea(TextArea {
                min_length,
                max_length,
                ..
            }) => {
                if let (Some(min), Some(max)) = (min_length, max_length)
                    && min > max
                {
                    err(
                        code::MIN_ABOVE_MAX,
                        format!("minLength ({min}) is greater than maxLength ({max})"),
                    );
                }
            }
            Field::Number(f) => check_number_bounds(f.min, f.max, &mut err),
            Field::Slider(f) => {
                check_number_bounds(Some(f.min), Some(f.max), &mut err);
                if let Some(step) = f.step
                    && !(step.is_finite() && step > 0.0)
                {
                    err(
                        code::INVALID_STEP,
                        format!("step ({step}) must be greater than 0"),
                    );
                }
            }
            Field::Switch(_) => {}
            Field::Select(Select { options, .. })
            | Field::Multiselect(Multiselect { options, .. }) => {
                if options.is_empty() {
                    err(code::NO_OPTIONS, "options must not be empty".into());
                }
                let mut seen = HashSet::new();
                let mut reported = HashSet::new();
                for option in options {
                    if option.trim().is_empty() {
                        // A blank option would be indistinguishable from "no answer".
                        err(
                            code::EMPTY_OPTION,
                            "options must not be empty strings".into(),
                        );
                    } else if !seen.insert(option) && reported.insert(option) {
                        err(
                            code::DUPLICATE_OPTION,
                            format!("option {option:?} is listed more than once"),
                        );
                    }
                }
            }
            Field::DateField(f) => check_parsed_bounds(
                &f.min,
                &f.max,
                datetime::parse_date,
                "a date like 2024-12-31",
                &mut err,
            ),
            Field::DateTime(f) => check_parsed_bounds(
                &f.min,
                &f.max,
                datetime::parse_rfc3339,
                "an RFC 3339 date-time with an offset, like 2024-12-31T09:30:00+01:00",
                &mut err,
            ),
            Field::Time(f) => check_parsed_bounds(
                &f.min,
                &f.max,
                datetime::parse_time_of_day,
                "a time like 09:30 or 09:30:00",
                &mut err,
            ),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn check_number_bounds(
    min: Option<f64>,
    max: Option<f64>,
    err: &mut impl FnMut(&'static str, String),
) {
    // JSON cannot carry NaN or infinities, but a definition built in Rust can, and every
    // comparison with NaN is false, so it would silently disable the bound.
    for (name, bound) in [("min", min), ("max", max)] {
        if let Some(b) = bound
            && !b.is_finite()
        {
            err(
                code::INVALID_BOUND,
                format!("{name} ({b}) must be a finite number"),
            );
        }
    }
    if let (Some(min), Some(max)) = (min, max)
        && min > max
    {
        err(
            code::MIN_ABOVE_MAX,
            format!("min ({min}) is greater than max ({max})"),
        );
    }
}

fn check_parsed_bounds<T: PartialOrd>(
    min: &Option<String>,
    max: &Option<String>,
    parse: fn(&str) -> Result<T, ParseError>,
    expected: &str,
    err: &mut impl FnMut(&'static str, String),
) {
    let mut parse_bound = |name: &str, bound: &Option<String>| {
        let text = bound.as_deref()?;
        match parse(text) {
            Ok(value) => Some(value),
            Err(_) => {
                err(
                    code::INVALID_BOUND,
                    format!("{name} ({text:?}) must be {expected}"),
                );
                None
            }
        }
    };
    let parsed_min = parse_bound("min", min);
    let parsed_max = parse_bound("max", max);
    if let (Some(lo), Some(hi)) = (parsed_min, parsed_max)
        && lo > hi
    {
        // Both are Some here: they parsed.
        let (lo, hi) = (min.as_deref().unwrap_or(""), max.as_deref().unwrap_or(""));
        err(
            code::MIN_ABOVE_MAX,
            format!("min ({lo}) is later than max ({hi})"),
        );
    }
}

/// Checks a human's answers against the request's fields and returns them normalized.
///
/// - Every required field must be answered. `null` or a string of only whitespace counts
///   as no answer (a web form sends `""` for an input left empty); an unanswered optional
///   field is fine and is left out of the result. A required multiselect needs at least
///   one option; an optional one may be `[]`.
/// - Every key must be the id of one of `fields` (`unknown_field` otherwise).
/// - Each answer must suit its field's kind: `Text`/`TextArea` a string within the length
///   limits (counted in characters) and, for `Text`, in its `format` (EMAIL, PHONE, URL);
///   `Number` a number, whole if `integerOnly`, within `min`/`max`; `Slider` a number in
///   `[min, max]` on the `step` grid counted from `min` (float rounding tolerated);
///   `Switch` a boolean; `Select` one of the options; `Multiselect` a list of distinct
///   options; `DateField` a real `YYYY-MM-DD` date, `DateTime` an RFC 3339 date-time with
///   an offset (bounds compared as instants, across time zones), `Time` `HH:MM` or
///   `HH:MM:SS` — each within its bounds.
///
/// Normalization: numbers come out as JSON numbers (numeric strings from a form are
/// accepted and converted; whole numbers for `integerOnly` become JSON integers),
/// switches as booleans (`"true"`/`"false"` accepted), everything else exactly as given.
///
/// All problems are returned together, in field order, unknown ids last. Call
/// [`validate_field_defs`] on `fields` first: a bound that does not parse is ignored here.
pub fn validate_answers(
    fields: &[Field],
    answers: &Map<String, Value>,
) -> Result<Map<String, Value>, Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut normalized = Map::new();
    for field in fields {
        match check_answer(field, answers.get(field.id())) {
            Ok(Some(value)) => {
                normalized.insert(field.id().to_owned(), value);
            }
            Ok(None) => {}
            Err(mut errs) => errors.append(&mut errs),
        }
    }
    let known: HashSet<&str> = fields.iter().map(Field::id).collect();
    for key in answers.keys() {
        if !known.contains(key.as_str()) {
            errors.push(FieldError {
                field_id: key.clone(),
                code: code::UNKNOWN_FIELD,
                message: "This question is not part of the form".into(),
            });
        }
    }
    if errors.is_empty() {
        Ok(normalized)
    } else {
        Err(errors)
    }
}

/// Whether an agent's pre-fill is usable as is: it names this field and its value is one
/// the human could submit (the same checks as [`validate_answers`]). A `null` or blank
/// value pre-fills nothing, so it never applies.
pub fn bid_applies(field: &Field, bid: &FieldBid) -> bool {
    bid.field_id == field.id() && matches!(check_answer(field, Some(&bid.value)), Ok(Some(_)))
}

/// `Ok(None)`: not answered and that is fine; `Ok(Some(v))`: answered, normalized to `v`.
fn check_answer(field: &Field, answer: Option<&Value>) -> Result<Option<Value>, Vec<FieldError>> {
    let mut errors = Errors {
        field_id: field.id(),
        list: Vec::new(),
    };
    // No answer: absent, null, or a blank string (a web form sends "" for an empty input).
    // A required multiselect needs at least one choice too; for an optional one, `[]` is a
    // real answer ("none of these") and goes through the checks below.
    let value = match answer {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(Value::Array(a))
            if a.is_empty() && field.required() && matches!(field, Field::Multiselect(_)) =>
        {
            None
        }
        Some(v) => Some(v),
    };
    let Some(value) = value else {
        if field.required() {
            errors.push(code::REQUIRED, "This field is required".into());
            return Err(errors.list);
        }
        return Ok(None);
    };

    let normalized = match field {
        Field::Text(f) => check_text(value, f.min_length, f.max_length, f.format, &mut errors),
        Field::TextArea(f) => check_text(value, f.min_length, f.max_length, None, &mut errors),
        Field::Number(f) => check_number(value, f, &mut errors),
        Field::Slider(f) => check_slider(value, f, &mut errors),
        Field::Switch(_) => match value {
            Value::Bool(_) => Some(value.clone()),
            Value::String(s) if s == "true" || s == "false" => Some(Value::Bool(s == "true")),
            _ => {
                errors.push(code::WRONG_TYPE, "Must be on or off (true or false)".into());
                None
            }
        },
        Field::Select(f) => match value {
            Value::String(s) => {
                if !f.options.contains(s) {
                    errors.push(
                        code::NOT_AN_OPTION,
                        format!("\"{s}\" is not one of the options"),
                    );
                }
                Some(value.clone())
            }
            _ => {
                errors.push(code::WRONG_TYPE, "Must be one of the options".into());
                None
            }
        },
        Field::Multiselect(f) => check_multiselect(value, &f.options, &mut errors),
        Field::DateField(f) => check_date(value, f, &mut errors),
        Field::DateTime(f) => check_date_time(value, f, &mut errors),
        Field::Time(f) => check_time(value, f, &mut errors),
    };
    match normalized {
        Some(v) if errors.list.is_empty() => Ok(Some(v)),
        _ => Err(errors.list),
    }
}

/// Collects the errors for one field, so each check need not repeat the field id.
struct Errors<'a> {
    field_id: &'a str,
    list: Vec<FieldError>,
}

impl Errors<'_> {
    fn push(&mut self, code: &'static str, message: String) {
        self.list.push(FieldError {
            field_id: self.field_id.to_owned(),
            code,
            message,
        });
    }
}

/// "1 character" / "2 characters": the messages are read by people.
fn characters(n: u64) -> String {
    if n == 1 {
        "1 character".into()
    } else {
        format!("{n} characters")
    }
}

fn check_text(
    value: &Value,
    min_length: Option<u64>,
    max_length: Option<u64>,
    format: Option<TextFormat>,
    errors: &mut Errors,
) -> Option<Value> {
    let Value::String(s) = value else {
        errors.push(code::WRONG_TYPE, "Must be text".into());
        return None;
    };
    // Limits count characters as a person does, not UTF-8 bytes ("é" is one).
    let len = s.chars().count() as u64;
    if let Some(min) = min_length
        && len < min
    {
        errors.push(
            code::TOO_SHORT,
            format!("Must be at least {}", characters(min)),
        );
    }
    if let Some(max) = max_length
        && len > max
    {
        errors.push(
            code::TOO_LONG,
            format!("Must be at most {}", characters(max)),
        );
    }
    match format {
        Some(TextFormat::Email) if !is_email(s) => errors.push(
            code::INVALID_FORMAT,
            "Must be an email address, like name@example.com".into(),
        ),
        Some(TextFormat::Phone) if !is_phone(s) => errors.push(
            code::INVALID_FORMAT,
            "Must be a phone number with 7 to 15 digits, like +1 555 123 4567".into(),
        ),
        Some(TextFormat::Url) if !is_url(s) => errors.push(
            code::INVALID_FORMAT,
            "Must be a web address starting with http:// or https://".into(),
        ),
        _ => {}
    }
    Some(value.clone())
}

/// Pragmatic, not RFC 5322: one `@`, something before it, a dotted domain after it, no
/// spaces. Anything stricter rejects real addresses; the only true check is sending mail.
fn is_email(s: &str) -> bool {
    if s.chars().any(char::is_whitespace) {
        return false;
    }
    let Some((local, domain)) = s.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && !domain.contains('@')
        && domain.contains('.')
        && domain.split('.').all(|label| !label.is_empty())
}

/// An optional leading `+`, then 7–15 digits (15 is the E.164 maximum) with spaces,
/// dashes, dots and balanced parentheses allowed between them, as people write numbers.
fn is_phone(s: &str) -> bool {
    let rest = s.strip_prefix('+').unwrap_or(s);
    let mut digits = 0;
    let mut open_paren = false;
    for c in rest.chars() {
        match c {
            '0'..='9' => digits += 1,
            ' ' | '-' | '.' => {}
            '(' if !open_paren => open_paren = true,
            ')' if open_paren => open_paren = false,
            _ => return false,
        }
    }
    !open_paren && (7..=15).contains(&digits)
}

/// `http://` or `https://` (any case) followed by a host: a name, an IPv4 address or a
/// bracketed IPv6 address, with an optional `user@` before it and `:port` after it.
fn is_url(s: &str) -> bool {
    url_host_ok(s).is_some()
}

/// [`is_url`] written with `?`: every `None` is a reason the string is not a web address.
fn url_host_ok(s: &str) -> Option<()> {
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return None;
    }
    let (scheme, rest) = s.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let port_ok = |port: &str| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    if let Some(bracketed) = host_port.strip_prefix('[') {
        let (inside, after) = bracketed.split_once(']')?;
        let ipv6_ok = !inside.is_empty()
            && inside
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
        let after_ok = after.is_empty() || after.strip_prefix(':').is_some_and(port_ok);
        return (ipv6_ok && after_ok).then_some(());
    }
    let host = match host_port.rsplit_once(':') {
        Some((host, port)) => port_ok(port).then_some(host)?,
        None => host_port,
    };
    // Letters of any script are allowed: internationalized domain names are typed as is.
    let host_ok = !host.is_empty()
        && !host.starts_with(['.', '-'])
        && !host.contains("..")
        && host
            .chars()
            .all(|c| c.is_alphanumeric() || c == '-' || c == '.');
    host_ok.then_some(())
}

/// A number from a JSON number, or from a string a form sent ("42", " 3.5 "); `None` if
/// neither. The second element is the JSON number to store.
fn number_value(value: &Value) -> Option<(f64, JsonNumber)> {
    match value {
        Value::Number(n) => Some((n.as_f64()?, n.clone())),
        Value::String(s) => {
            let x: f64 = s.trim().parse().ok()?;
            if !x.is_finite() {
                // "inf" and "NaN" parse as f64 but are not numbers a person means.
                return None;
            }
            Some((x, json_number(x)?))
        }
        _ => None,
    }
}

/// 2^53: every integer up to here is exactly representable as an f64, so whole-number
/// floats in this range convert to the same i64 without loss.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_992.0;

/// Whole numbers as JSON integers (so `"42"` and `42.0` store as `42`), others as floats.
fn json_number(x: f64) -> Option<JsonNumber> {
    if x.fract() == 0.0 && x.abs() <= MAX_SAFE_INTEGER {
        // Range checked just above, so the cast is exact.
        Some(JsonNumber::from(x as i64))
    } else {
        JsonNumber::from_f64(x)
    }
}

fn check_range(x: f64, min: Option<f64>, max: Option<f64>, errors: &mut Errors) {
    if let Some(min) = min
        && x < min
    {
        errors.push(code::BELOW_MIN, format!("Must be at least {min}"));
    }
    if let Some(max) = max
        && x > max
    {
        errors.push(code::ABOVE_MAX, format!("Must be at most {max}"));
    }
}

fn check_number(value: &Value, field: &Number, errors: &mut Errors) -> Option<Value> {
    let Some((x, mut stored)) = number_value(value) else {
        errors.push(code::WRONG_TYPE, "Must be a number".into());
        return None;
    };
    if field.integer_only {
        if x.fract() != 0.0 {
            errors.push(code::NOT_INTEGER, "Must be a whole number".into());
        } else if stored.is_f64() {
            // 3.0 → 3: an integer field's answers should read as integers downstream.
            stored = json_number(x).unwrap_or(stored);
        }
    }
    check_range(x, field.min, field.max, errors);
    Some(Value::Number(stored))
}

fn check_slider(value: &Value, field: &Slider, errors: &mut Errors) -> Option<Value> {
    let Some((x, stored)) = number_value(value) else {
        errors.push(code::WRONG_TYPE, "Must be a number".into());
        return None;
    };
    check_range(x, Some(field.min), Some(field.max), errors);
    if let Some(step) = field.step
        && step > 0.0
        && !on_step_grid(x, field.min, step)
    {
        errors.push(
            code::OFF_STEP,
            format!("Must be {} or go up from it in steps of {step}", field.min),
        );
    }
    Some(Value::Number(stored))
}

/// Whether `x` is `min + k * step` for a whole `k`. Decimal steps are not exact in
/// binary floating point (0.3 / 0.1 = 2.9999999999999996), so `k` may miss a whole
/// number by a rounding error. That error is a few ulps of the numbers involved, so the
/// tolerance is a small absolute slack plus a few ulps scaled by their magnitude in
/// steps: loose enough for 0.3 on a 0.1 grid, tight enough that half a step is always
/// caught even far along a long scale.
fn on_step_grid(x: f64, min: f64, step: f64) -> bool {
    let k = (x - min) / step;
    let tolerance = 1e-9 + 16.0 * f64::EPSILON * (k.abs() + (x.abs() + min.abs()) / step);
    (k - k.round()).abs() <= tolerance
}

fn check_multiselect(value: &Value, options: &[String], errors: &mut Errors) -> Option<Value> {
    let Value::Array(items) = value else {
        errors.push(code::WRONG_TYPE, "Must be a list of options".into());
        return None;
    };
    let mut seen = HashSet::new();
    let mut reported = HashSet::new();
    let mut wrong_type = false;
    for item in items {
        let Value::String(s) = item else {
            wrong_type = true;
            continue;
        };
        if seen.insert(s) {
            if !options.contains(s) {
                errors.push(
                    code::NOT_AN_OPTION,
                    format!("\"{s}\" is not one of the options"),
                );
            }
        } else if options.contains(s) && reported.insert(s) {
            // Once per repeated option; a repeated non-option was already reported.
            errors.push(
                code::DUPLICATE_OPTION,
                format!("\"{s}\" is chosen more than once"),
            );
        }
    }
    if wrong_type {
        // Once, however many non-strings: one message tells the human what is wrong.
        errors.push(
            code::WRONG_TYPE,
            "Every choice must be one of the options".into(),
        );
    }
    Some(value.clone())
}

/// The string of a date/time answer, or a `wrong_type` error.
fn answer_str<'v>(value: &'v Value, what: &str, errors: &mut Errors) -> Option<&'v str> {
    match value {
        Value::String(s) => Some(s),
        _ => {
            errors.push(code::WRONG_TYPE, format!("Must be {what}"));
            None
        }
    }
}

/// Compares a parsed answer with the field's bounds. Bounds that do not parse are
/// skipped: [`validate_field_defs`] reports them when the request is opened.
fn check_parsed_range<T: PartialOrd>(
    x: &T,
    min: &Option<String>,
    max: &Option<String>,
    parse: fn(&str) -> Result<T, ParseError>,
    (after, before): (&str, &str),
    errors: &mut Errors,
) {
    if let Some(min) = min.as_deref()
        && let Ok(lo) = parse(min)
        && *x < lo
    {
        errors.push(code::BELOW_MIN, format!("Must be {after} {min}"));
    }
    if let Some(max) = max.as_deref()
        && let Ok(hi) = parse(max)
        && *x > hi
    {
        errors.push(code::ABOVE_MAX, format!("Must be {before} {max}"));
    }
}

fn check_date(value: &Value, field: &DateField, errors: &mut Errors) -> Option<Value> {
    let s = answer_str(value, "a date", errors)?;
    match datetime::parse_date(s) {
        Ok(date) => check_parsed_range(
            &date,
            &field.min,
            &field.max,
            datetime::parse_date,
            ("on or after", "on or before"),
            errors,
        ),
        Err(ParseError::Format) => errors.push(
            code::INVALID_FORMAT,
            "Must be a date written like 2024-12-31".into(),
        ),
        Err(ParseError::OutOfRange) => {
            errors.push(code::INVALID_DATE, format!("{s} is not a real date"))
        }
    }
    Some(value.clone())
}

fn check_date_time(value: &Value, field: &DateTime, errors: &mut Errors) -> Option<Value> {
    let s = answer_str(value, "a date and time", errors)?;
    match datetime::parse_rfc3339(s) {
        // Instants, so bounds and answers written in different time zones compare right.
        Ok(instant) => check_parsed_range(
            &instant,
            &field.min,
            &field.max,
            datetime::parse_rfc3339,
            ("at or after", "at or before"),
            errors,
        ),
        Err(ParseError::Format) => errors.push(
            code::INVALID_FORMAT,
            "Must be a date and time with a time zone, like 2024-12-31T09:30:00+01:00".into(),
        ),
        Err(ParseError::OutOfRange) => errors.push(
            code::INVALID_DATE,
            format!("{s} is not a real date and time"),
        ),
    }
    Some(value.clone())
}

fn check_time(value: &Value, field: &Time, errors: &mut Errors) -> Option<Value> {
    let s = answer_str(value, "a time of day", errors)?;
    match datetime::parse_time_of_day(s) {
        Ok(secs) => check_parsed_range(
            &secs,
            &field.min,
            &field.max,
            datetime::parse_time_of_day,
            ("at or after", "at or before"),
            errors,
        ),
        Err(ParseError::Format) => errors.push(
            code::INVALID_FORMAT,
            "Must be a time written like 09:30 or 09:30:00".into(),
        ),
        Err(ParseError::OutOfRange) => {
            errors.push(code::INVALID_TIME, format!("{s} is not a real time of day"))
        }
    }
    Some(value.clone())
}

#[cfg(test)]
mod tests;
