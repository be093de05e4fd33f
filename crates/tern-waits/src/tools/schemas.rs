//! Schemas of the argument fields several inbox tools share, whose types are the inbox's own
//! (`tern-inbox` checks them when the request is created; these tell the model their shape).

use schemars::generate::SchemaGenerator;
use schemars::{Schema, json_schema};

pub(super) fn key_value_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {"type": "string"},
        "description": "Facts the reviewer needs, as short strings (what, where, why, impact, \
            how to undo). Add `action`: a stable machine name of the action, e.g. `deploy_prod`."
    })
}

pub(super) fn attachments_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {"type": "string", "minLength": 1},
        "description": "Files to show the reviewer: paths relative to the workspace, inside \
            it (no `..`, no absolute paths)."
    })
}
