//! `request_elicitation`: a human fills in a form.

use std::collections::BTreeMap;
use std::sync::Arc;

use schemars::generate::SchemaGenerator;
use schemars::{JsonSchema, Schema, json_schema};
use serde::Deserialize;
use serde_json::{Map, json};
use tern_inbox::fields::{Field, FieldBid, validate_field_defs};
use tern_store::WaitKind;
use tern_tools::{Tool, ToolContext, ToolError, ToolResult};

use super::ask::{Ask, guide_pointer, request};
use super::common::{insert_some, require_text, to_value};
use super::context::{InboxTools, TOOLSET};
use super::schemas::{attachments_schema, key_value_schema};

/// `request_elicitation`: a human fills in a form.
pub struct RequestElicitation(pub Arc<InboxTools>);

impl Tool for RequestElicitation {
    const NAME: &'static str = "request_elicitation";
    const TOOLSET: &'static str = TOOLSET;
    const DESCRIPTION: &'static str = concat!(
        "Ask a human reviewer to fill in values only a human knows (a form of \
         `fields`). Returns {\"requestId\", \"status\": \"pending\"} at once; \
         then END YOUR TURN: you will be resumed with the answers in this \
         conversation. Never poll.",
        guide_pointer!()
    );
    type Args = ElicitationArgs;

    async fn run(&self, args: ElicitationArgs, ctx: ToolContext) -> ToolResult {
        request(
            &self.0,
            check_elicitation(args)?,
            ctx,
            WaitKind::Elicitation,
        )
        .await
    }
}

/// The arguments of `request_elicitation`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ElicitationArgs {
    /// One line: what you need and why.
    #[schemars(length(min = 1))]
    pub summary: String,
    #[schemars(schema_with = "fields_schema")]
    pub fields: Vec<Field>,
    #[serde(default)]
    #[schemars(schema_with = "key_value_schema")]
    pub key_value_context: Option<BTreeMap<String, String>>,
    /// Pre-filled values you suggest, per field.
    #[serde(default)]
    #[schemars(schema_with = "field_bids_schema")]
    pub recommendation: Option<Vec<FieldBid>>,
    #[serde(default)]
    #[schemars(schema_with = "attachments_schema")]
    pub attachments: Option<Vec<String>>,
    /// Your own correlation id, shown in the log.
    #[serde(default)]
    pub external_trace_id: Option<String>,
}

fn check_elicitation(a: ElicitationArgs) -> Result<Ask, ToolError> {
    require_text("summary", &a.summary)?;
    if a.fields.is_empty() {
        return Err(ToolError::new(
            "`fields` must not be empty: there would be nothing to answer",
        ));
    }
    validate_field_defs(&a.fields).map_err(|errors| {
        let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
        ToolError::new(format!("invalid `fields`: {}", list.join("; ")))
    })?;
    for bid in a.recommendation.iter().flatten() {
        if !a.fields.iter().any(|f| f.id() == bid.field_id) {
            return Err(ToolError::new(format!(
                "the recommendation for {:?} names no field of the request",
                bid.field_id
            )));
        }
    }
    let mut body = Map::new();
    body.insert("summary".into(), json!(a.summary));
    body.insert("fields".into(), to_value(&a.fields)?);
    insert_some(&mut body, "keyValueContext", a.key_value_context)?;
    insert_some(&mut body, "recommendation", a.recommendation)?;
    insert_some(&mut body, "externalTraceId", a.external_trace_id)?;
    Ok(Ask {
        body,
        files: a.attachments.unwrap_or_default(),
    })
}

fn fields_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "minItems": 1,
        "description": "The form. Each field: `type`, a unique `id`, a \
            `label`, `required` (boolean), optional `description`. \
            Text: `format` (EMAIL, PHONE, URL), `minLength`, `maxLength`; \
            TextArea: `minLength`, `maxLength`; Number: `integerOnly` \
            (required), `min`, `max`; Slider: `min`, `max` (required), \
            `step`; Select / Multiselect: `options` (required); \
            DateField (`min`/`max` as YYYY-MM-DD), DateTime (RFC 3339), \
            Time (HH:MM).",
        "items": {
            "type": "object",
            "properties": {
                "type": {
                    "type": "string",
                    "enum": ["Text", "TextArea", "Number", "Slider", "Switch",
                             "Select", "Multiselect", "DateField", "DateTime",
                             "Time"]
                },
                "id": {"type": "string", "minLength": 1},
                "label": {"type": "string", "minLength": 1},
                "required": {"type": "boolean"},
                "description": {"type": "string"}
            },
            "required": ["type", "id", "label", "required"]
        }
    })
}

fn field_bids_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "fieldId": {"type": "string"},
                "value": {},
                "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                "rationale": {"type": "string"}
            },
            "required": ["fieldId", "value"],
            "additionalProperties": false
        }
    })
}
