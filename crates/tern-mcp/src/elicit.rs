//! Elicitation: a server asking tern's human for values during a call (`elicitation/create`).
//!
//! Whoever starts the client sets an [`Elicitor`] in [`crate::ClientOptions`]: the gateway's
//! asks through the inbox, `tern chat`'s at the terminal. Only then does the client advertise
//! the `elicitation` capability in `initialize`, so a server never asks a client that cannot
//! answer. The request's schema is parsed here once, into [`ElicitField`]s (MCP allows a flat
//! object of string, number, integer, boolean and enum properties, and arrays of enum values
//! for a multiple choice), so every elicitor asks the same questions and answers with the
//! schema's own types.

use serde_json::{Map, Value};
use tern_tools::BoxFuture;
use tokio_util::sync::CancellationToken;

/// The tool call an elicitation serves: who is asked, on behalf of which session's call.
#[derive(Debug, Clone)]
pub struct CallScope {
    /// The session whose turn made the call.
    pub session_id: String,
    /// The model's id of the call, and the transcript position of its message (see
    /// `tern_tools::ToolContext::call_seq`): with the session they key what the call creates.
    pub call_id: String,
    pub call_seq: i64,
    /// Cancelled when the turn is interrupted.
    pub cancel: CancellationToken,
}

/// One `elicitation/create` (form mode) from a server.
#[derive(Debug, Clone)]
pub struct ElicitationRequest {
    /// The server's name (`[mcp_servers.NAME]`).
    pub server: String,
    /// The tool whose call it arrived during, when one was in flight.
    pub tool: Option<String>,
    /// What the server says it needs.
    pub message: String,
    /// The requested schema, parsed.
    pub fields: Vec<ElicitField>,
    /// The call it serves; `None` when the server asked while no call was in flight.
    pub call: Option<CallScope>,
    /// Cancelled when the answer is no longer wanted: the turn was interrupted, or the
    /// server cancelled its request. The elicitor then cleans up and answers
    /// [`ElicitationAnswer::Cancel`].
    pub cancel: CancellationToken,
}

/// The human's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitationAnswer {
    /// The values, keyed by property name, typed as the schema says.
    Accept { content: Map<String, Value> },
    /// The human said no; the server may go on without the values.
    Decline,
    /// Nobody answered (the turn was interrupted, the request expired or was withdrawn).
    Cancel,
}

/// Why an elicitor could not ask.
#[derive(Debug, thiserror::Error)]
pub enum ElicitError {
    /// The schema uses what MCP's elicitation does not allow (nested objects, …).
    #[error("unsupported elicitation schema: {0}")]
    Schema(String),
    /// There is nobody to ask this request (no session to ask in, no terminal).
    #[error("cannot ask for this elicitation: {0}")]
    Unavailable(String),
    /// Asking failed (the inbox refused or could not be reached, the terminal closed).
    #[error("elicitation failed: {0}")]
    Failed(String),
}

/// Asks a human for what a server's `elicitation/create` wants.
pub trait Elicitor: Send + Sync {
    fn elicit(
        &self,
        request: ElicitationRequest,
    ) -> BoxFuture<'_, Result<ElicitationAnswer, ElicitError>>;
}

/// One property of the requested schema.
#[derive(Debug, Clone, PartialEq)]
pub struct ElicitField {
    /// The property's name: the key of its value in the answer.
    pub name: String,
    /// Its `title`, else its name.
    pub title: String,
    pub description: Option<String>,
    pub required: bool,
    pub kind: FieldKind,
    /// The schema's `default`, if it has one (shown as a pre-fill).
    pub default: Option<Value>,
}

/// What kind of value a property takes.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldKind {
    /// A string, with `format` (`email`, `uri`, `date`, `date-time`) and length bounds.
    Text {
        format: Option<String>,
        min_length: Option<u64>,
        max_length: Option<u64>,
    },
    /// A number; `integer` for `"type": "integer"`.
    Number {
        integer: bool,
        min: Option<f64>,
        max: Option<f64>,
    },
    Boolean,
    /// One of `options` (`enum`, `oneOf` of `const`/`title`, or `enum` with `enumNames`).
    Choice {
        options: Vec<Choice>,
    },
    /// Any of `options` (`"type": "array"` of enum items).
    MultiChoice {
        options: Vec<Choice>,
        min_items: Option<u64>,
        max_items: Option<u64>,
    },
}

/// One option of a choice: the value the server gets and what the human sees.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub value: String,
    pub label: String,
}

impl FieldKind {
    /// The options of a choice, for either kind.
    pub fn options(&self) -> &[Choice] {
        match self {
            FieldKind::Choice { options } | FieldKind::MultiChoice { options, .. } => options,
            _ => &[],
        }
    }
}

/// The fields of a requested schema (`{"type": "object", "properties": {…}, "required":
/// […]}`): the required ones first, each group by name (rmcp keeps a schema's properties in
/// a map, so the server's order is not known).
pub fn parse_schema(schema: &Value) -> Result<Vec<ElicitField>, ElicitError> {
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .ok_or_else(|| ElicitError::Schema("no `properties` object".to_owned()))?;
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    properties
        .iter()
        .map(|(name, p)| {
            Ok(ElicitField {
                name: name.clone(),
                title: str_of(p, "title").unwrap_or_else(|| name.clone()),
                description: str_of(p, "description"),
                required: required.contains(&name.as_str()),
                kind: kind_of(name, p)?,
                default: p.get("default").cloned(),
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(|mut fields| {
            // Stable: each group stays in the map's (name) order.
            fields.sort_by_key(|f| !f.required);
            fields
        })
}

fn kind_of(name: &str, p: &Value) -> Result<FieldKind, ElicitError> {
    let ty = p.get("type").and_then(Value::as_str).unwrap_or("string");
    if let Some(options) = choices(p) {
        return Ok(FieldKind::Choice { options });
    }
    match ty {
        "string" => Ok(FieldKind::Text {
            format: str_of(p, "format"),
            min_length: p.get("minLength").and_then(Value::as_u64),
            max_length: p.get("maxLength").and_then(Value::as_u64),
        }),
        "number" | "integer" => Ok(FieldKind::Number {
            integer: ty == "integer",
            min: p.get("minimum").and_then(Value::as_f64),
            max: p.get("maximum").and_then(Value::as_f64),
        }),
        "boolean" => Ok(FieldKind::Boolean),
        "array" => {
            let options = p.get("items").and_then(choices).ok_or_else(|| {
                ElicitError::Schema(format!("`{name}`: an array whose items are not an enum"))
            })?;
            Ok(FieldKind::MultiChoice {
                options,
                min_items: p.get("minItems").and_then(Value::as_u64),
                max_items: p.get("maxItems").and_then(Value::as_u64),
            })
        }
        other => Err(ElicitError::Schema(format!(
            "`{name}`: type `{other}` is not a primitive"
        ))),
    }
}

/// The options of an enum in any of the spellings MCP allows: `enum` (with the legacy
/// `enumNames` as labels), or `oneOf`/`anyOf` of `{const, title}`.
fn choices(p: &Value) -> Option<Vec<Choice>> {
    if let Some(values) = p.get("enum").and_then(Value::as_array) {
        let names = p.get("enumNames").and_then(Value::as_array);
        return Some(
            values
                .iter()
                .enumerate()
                .filter_map(|(i, v)| {
                    let value = scalar_text(v)?;
                    let label = names
                        .and_then(|n| n.get(i))
                        .and_then(Value::as_str)
                        .map_or_else(|| value.clone(), str::to_owned);
                    Some(Choice { value, label })
                })
                .collect(),
        );
    }
    let list = p
        .get("oneOf")
        .or_else(|| p.get("anyOf"))
        .and_then(Value::as_array)?;
    Some(
        list.iter()
            .filter_map(|o| {
                let value = scalar_text(o.get("const")?)?;
                let label = str_of(o, "title").unwrap_or_else(|| value.clone());
                Some(Choice { value, label })
            })
            .collect(),
    )
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn str_of(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Turns a human's text for `field` into the schema's type: numbers parsed (an integer
/// must be whole), booleans from yes/no words, a choice's label or value to its value, a
/// multiple choice from a comma-separated list. `Err` says what is wrong, for the human.
pub fn value_from_text(field: &ElicitField, text: &str) -> Result<Value, String> {
    let text = text.trim();
    match &field.kind {
        FieldKind::Text {
            min_length,
            max_length,
            ..
        } => {
            let n = text.chars().count() as u64;
            if min_length.is_some_and(|m| n < m) {
                return Err(format!("at least {} characters", min_length.unwrap_or(0)));
            }
            if max_length.is_some_and(|m| n > m) {
                return Err(format!("at most {} characters", max_length.unwrap_or(0)));
            }
            Ok(Value::String(text.to_owned()))
        }
        FieldKind::Number { integer, min, max } => {
            let n: f64 = text.parse().map_err(|_| "a number".to_owned())?;
            if !n.is_finite() {
                return Err("a number".to_owned());
            }
            if min.is_some_and(|m| n < m) || max.is_some_and(|m| n > m) {
                return Err(format!(
                    "a number from {} to {}",
                    min.map_or("-∞".to_owned(), |m| m.to_string()),
                    max.map_or("∞".to_owned(), |m| m.to_string())
                ));
            }
            number_value(n, *integer).ok_or_else(|| "a whole number".to_owned())
        }
        FieldKind::Boolean => match text.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" | "on" | "1" => Ok(Value::Bool(true)),
            "n" | "no" | "false" | "off" | "0" => Ok(Value::Bool(false)),
            _ => Err("yes or no".to_owned()),
        },
        FieldKind::Choice { options } => choice_value(options, text).map(Value::String),
        FieldKind::MultiChoice {
            options,
            min_items,
            max_items,
        } => {
            let picked = text
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| choice_value(options, s))
                .collect::<Result<Vec<_>, _>>()?;
            let n = picked.len() as u64;
            if min_items.is_some_and(|m| n < m) || max_items.is_some_and(|m| n > m) {
                return Err(format!(
                    "between {} and {} choices",
                    min_items.unwrap_or(0),
                    max_items.map_or("any".to_owned(), |m| m.to_string())
                ));
            }
            Ok(Value::Array(
                picked.into_iter().map(Value::String).collect(),
            ))
        }
    }
}

/// A number as JSON: an integer field's value as a JSON integer (`None` when not whole).
pub fn number_value(n: f64, integer: bool) -> Option<Value> {
    if integer {
        if n.fract() != 0.0 || n.abs() > 9.0e15 {
            return None;
        }
        Some(Value::from(n as i64))
    } else {
        serde_json::Number::from_f64(n).map(Value::Number)
    }
}

/// The value of the option whose label or value is `text` (labels first, ignoring case).
pub fn choice_value(options: &[Choice], text: &str) -> Result<String, String> {
    options
        .iter()
        .find(|c| c.label.eq_ignore_ascii_case(text))
        .or_else(|| options.iter().find(|c| c.value == text))
        .map(|c| c.value.clone())
        .ok_or_else(|| {
            let labels: Vec<&str> = options.iter().map(|c| c.label.as_str()).collect();
            format!("one of: {}", labels.join(", "))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "title": "Name", "description": "Your name", "maxLength": 5},
                "age": {"type": "integer", "minimum": 1, "maximum": 100},
                "ok": {"type": "boolean"},
                "pet": {"type": "string", "enum": ["pet-1", "pet-2"], "enumNames": ["Cats", "Dogs"]},
                "hero": {"type": "string", "oneOf": [{"const": "h1", "title": "Superman"}]},
                "fish": {"type": "array", "maxItems": 2, "items": {"anyOf": [
                    {"const": "f1", "title": "Tuna"}, {"const": "f2", "title": "Salmon"},
                    {"const": "f3", "title": "Trout"}]}}
            },
            "required": ["name"]
        })
    }

    /// The fields in a fixed order for the assertions: name, age, ok, pet, hero, fish.
    fn fields() -> Vec<ElicitField> {
        let parsed = parse_schema(&schema()).unwrap();
        assert_eq!(parsed[0].name, "name", "required first");
        ["name", "age", "ok", "pet", "hero", "fish"]
            .iter()
            .map(|n| parsed.iter().find(|f| f.name == *n).unwrap().clone())
            .collect()
    }

    #[test]
    fn every_kind_of_property_is_parsed() {
        let fields = fields();
        let name = &fields[0];
        assert_eq!(
            (name.name.as_str(), name.title.as_str(), name.required),
            ("name", "Name", true)
        );
        assert_eq!(name.description.as_deref(), Some("Your name"));
        assert_eq!(
            fields[1].kind,
            FieldKind::Number {
                integer: true,
                min: Some(1.0),
                max: Some(100.0)
            }
        );
        assert!(!fields[1].required);
        assert_eq!(fields[1].title, "age");
        assert_eq!(fields[2].kind, FieldKind::Boolean);
        assert_eq!(
            fields[3].kind.options()[1],
            Choice {
                value: "pet-2".into(),
                label: "Dogs".into()
            }
        );
        assert_eq!(fields[4].kind.options()[0].label, "Superman");
        assert!(matches!(
            fields[5].kind,
            FieldKind::MultiChoice {
                max_items: Some(2),
                ..
            }
        ));
        assert!(parse_schema(&json!({"properties": {"x": {"type": "object"}}})).is_err());
    }

    #[test]
    fn text_answers_become_the_schemas_types() {
        let fields = fields();
        assert_eq!(value_from_text(&fields[0], " Ann "), Ok(json!("Ann")));
        assert!(value_from_text(&fields[0], "Annabel").is_err());
        assert_eq!(value_from_text(&fields[1], "42"), Ok(json!(42)));
        assert_eq!(
            value_from_text(&fields[1], "4.5"),
            Err("a whole number".into())
        );
        assert!(value_from_text(&fields[1], "101").is_err());
        assert_eq!(value_from_text(&fields[2], "yes"), Ok(json!(true)));
        assert_eq!(value_from_text(&fields[3], "dogs"), Ok(json!("pet-2")));
        assert_eq!(value_from_text(&fields[3], "pet-1"), Ok(json!("pet-1")));
        assert!(value_from_text(&fields[3], "Fish").is_err());
        assert_eq!(
            value_from_text(&fields[5], "Tuna, trout"),
            Ok(json!(["f1", "f3"]))
        );
        assert!(value_from_text(&fields[5], "Tuna, Salmon, Trout").is_err());
    }
}
