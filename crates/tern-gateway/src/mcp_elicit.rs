//! MCP elicitations through the human inbox: [`InboxElicitor`] is the gateway's
//! [`Elicitor`], given to every MCP server the gateway starts (`ClientOptions::elicitor`).
//!
//! A server's `elicitation/create` during a tool call becomes an inbox elicitation request in
//! the calling session's task, as the `inbox` tools' requests are, so the web inbox and `tern
//! inbox` show it like any other, and (with [`InboxElicitor::with_store`]) a chat channel
//! posts it to the session's chat, answered there through the inbox. Its schema's
//! properties map to the inbox's field kinds (string → Text, with `email`/`uri` as its
//! format, `date`/`date-time` → DateField/DateTime; number and integer → Number; boolean →
//! Switch; enums → Select/Multiselect showing their titles), its defaults become the
//! request's pre-filled recommendation. The elicitor then
//! waits for the request's result (woken by the embedded inbox's change feed, else polling)
//! and answers the server:
//!
//! - answered → `accept`, each value converted back to the schema's type (a choice's title
//!   back to its value, an integer as a JSON integer);
//! - dismissed by a reviewer (the inbox has no "decline" for a form; dismissing is how a
//!   reviewer says no) → `decline`;
//! - expired → `cancel`; the turn interrupted (or the server cancelling its request) →
//!   the request withdrawn, then `cancel`.
//!
//! Unlike the `inbox` tools' requests this is no durable wait: the server holds its tool call
//! open for the answer, so the answer goes to that call and nothing resumes the session later.
//! A gateway that restarts meanwhile has lost the call: at its next start it withdraws the
//! request ([`InboxElicitor::withdraw_abandoned`]).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tern_inbox::fields::{
    BoundedField, Field, FieldBid, Multiselect, Number, Select, Switch, Text, TextFormat,
    bid_applies,
};
use tern_mcp::elicit::{ElicitField, FieldKind, choice_value, number_value};
use tern_mcp::{ElicitError, ElicitationAnswer, ElicitationRequest, Elicitor};
use tern_tools::BoxFuture;
use tern_waits::client::{ClientError, InboxClient, RequestKind};

/// How often a remote inbox is asked for the result (the embedded one wakes the elicitor on
/// each change, and is asked this often only as a fallback).
const POLL: Duration = Duration::from_secs(2);
const POLL_EMBEDDED: Duration = Duration::from_secs(30);

/// Asks MCP servers' questions through the inbox.
pub struct InboxElicitor {
    client: Arc<dyn InboxClient>,
    project: String,
    /// The embedded inbox's change feed, to wake on decisions.
    changes: Option<tern_inbox::Inbox>,
    /// Where each question waited for is recorded, so the session's chat channel posts it.
    store: Option<tern_store::Store>,
}

impl InboxElicitor {
    /// Requests go through `client`, in the sessions' tasks in `project`.
    pub fn new(client: Arc<dyn InboxClient>, project: impl Into<String>) -> Self {
        InboxElicitor {
            client,
            project: project.into(),
            changes: None,
            store: None,
        }
    }

    /// The elicitor of a gateway: requests through its durable waits' inbox `client` (its
    /// own, or a remote one), in the `inbox` tools' `project`, woken by the change feed of
    /// `own` when that inbox is the gateway's own (`None`: a remote inbox, polled).
    pub fn for_gateway(
        client: Arc<dyn InboxClient>,
        project: &str,
        own: Option<tern_inbox::Inbox>,
    ) -> Self {
        let elicitor = InboxElicitor::new(client, project);
        match own {
            Some(inbox) => elicitor.with_changes(inbox),
            None => elicitor,
        }
    }

    /// Wakes on `inbox`'s change feed rather than polling (when `client` is that inbox).
    pub fn with_changes(mut self, inbox: tern_inbox::Inbox) -> Self {
        self.changes = Some(inbox);
        self
    }

    /// Records each question in `store` while it is waited for, so a chat channel posts it
    /// to the calling session's chat.
    ///
    /// Why a row of its own rather than a wait: a wait is durable and resumes the session
    /// when decided, and this answer goes to the tool call holding it open instead. Why not
    /// have the channel list the inbox's pending requests: the inbox may be remote, does not
    /// know which requests are MCP questions, and cannot say when the gateway stopped
    /// waiting for one (a restart loses the call; the request stays pending).
    pub fn with_store(mut self, store: tern_store::Store) -> Self {
        self.store = Some(store);
        self
    }

    /// At a start: the questions an earlier process asked died with the tool calls that
    /// held them open, so nobody can take their answers. Withdraws their requests (which
    /// settles their chat posts), then forgets each, so a crash meanwhile leaves the rest
    /// for the next start; how many.
    pub async fn withdraw_abandoned(&self, store: &tern_store::Store) -> usize {
        let ids = match store.mcp_elicitations_left().await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(error = %e, "cannot end earlier MCP elicitations");
                return 0;
            }
        };
        let reason = "the gateway restarted; the tool call that asked is gone";
        for id in &ids {
            match self
                .client
                .withdraw(RequestKind::Elicitation, id, reason)
                .await
            {
                Ok(()) => {}
                // Answered, dismissed or expired meanwhile: nothing to withdraw.
                Err(ClientError::Refused { status: 409, .. }) => {}
                // Forgotten all the same: left, it would be posted to a chat as waited for.
                Err(e) => {
                    tracing::warn!(request = %id, error = %e, "cannot withdraw an earlier MCP elicitation");
                }
            }
            if let Err(e) = store.mcp_elicitation_ended(id).await {
                tracing::warn!(request = %id, error = %e, "cannot end an earlier MCP elicitation");
            }
        }
        ids.len()
    }

    async fn ask(&self, req: ElicitationRequest) -> Result<ElicitationAnswer, ElicitError> {
        let scope = req.call.as_ref().ok_or_else(|| {
            ElicitError::Unavailable(
                "the server asked while none of its tool calls was running, so there is no session to ask in".to_owned(),
            )
        })?;
        let fields: Vec<Field> = req.fields.iter().map(inbox_field).collect();
        let recommendation: Vec<FieldBid> = req
            .fields
            .iter()
            .zip(&fields)
            .filter_map(|(f, field)| {
                let bid = FieldBid {
                    field_id: f.name.clone(),
                    value: inbox_value(f, f.default.as_ref()?)?,
                    confidence: None,
                    rationale: Some("the MCP server's default".to_owned()),
                };
                bid_applies(field, &bid).then_some(bid)
            })
            .collect();
        let task = self
            .client
            .session_task(&scope.session_id, &self.project)
            .await
            .map_err(failed)?;
        let tool = req.tool.as_deref().unwrap_or("?");
        let mut body = json!({
            "projectName": task.project_name,
            "taskId": task.task_id,
            "summary": format!("MCP server `{}` asks: {}", req.server, req.message),
            "fields": fields,
            "keyValueContext": {"MCP server": req.server, "tool": tool},
        });
        if !recommendation.is_empty() {
            body["recommendation"] = json!(recommendation);
        }
        let idem = format!(
            "tern-mcp-elicit:{}:{}@{}:{}",
            scope.session_id,
            scope.call_id,
            scope.call_seq,
            uuid::Uuid::now_v7().simple()
        );
        let id = self
            .client
            .create_request(RequestKind::Elicitation, body, &idem)
            .await
            .map_err(failed)?;
        tracing::info!(server = req.server, tool, request = %id, session = %scope.session_id, "MCP elicitation sent to the inbox");
        if let Some(store) = &self.store
            && let Err(e) = store.mcp_elicitation_asked(&id, &scope.session_id).await
        {
            tracing::warn!(request = %id, error = %e, "cannot record an MCP elicitation for the session's chat");
        }
        let answer = self.await_answer(&req, &id).await;
        // No longer waited for. (A chat post of it is settled by the request's status, on
        // the inbox's change feed, not by this.)
        if let Some(store) = &self.store
            && let Err(e) = store.mcp_elicitation_ended(&id).await
        {
            tracing::warn!(request = %id, error = %e, "cannot record an MCP elicitation's end");
        }
        answer
    }

    /// Waits for the inbox's decision on request `id`, or for the call to be interrupted.
    async fn await_answer(
        &self,
        req: &ElicitationRequest,
        id: &str,
    ) -> Result<ElicitationAnswer, ElicitError> {
        loop {
            // Subscribed before reading, so a decision in between still wakes the loop.
            let mut changes = self.changes.as_ref().map(tern_inbox::Inbox::changes);
            match self.client.result(RequestKind::Elicitation, id).await {
                Ok(Some(result)) => return Ok(answer(&req.fields, &result)),
                Ok(None) => {}
                // Dismissed by a reviewer (only this elicitor withdraws it otherwise, and
                // then it has stopped asking).
                Err(ClientError::Refused { status: 409, .. }) => {
                    return Ok(ElicitationAnswer::Decline);
                }
                Err(e) if e.is_transient() => {
                    tracing::warn!(request = %id, error = %e, "cannot read an MCP elicitation's result yet");
                }
                Err(e) => return Err(failed(e)),
            }
            let every = if changes.is_some() {
                POLL_EMBEDDED
            } else {
                POLL
            };
            tokio::select! {
                () = req.cancel.cancelled() => {
                    let reason = "the tool call that asked was interrupted";
                    if let Err(e) = self.client.withdraw(RequestKind::Elicitation, id, reason).await {
                        tracing::warn!(request = %id, error = %e, "cannot withdraw an MCP elicitation");
                    }
                    return Ok(ElicitationAnswer::Cancel);
                }
                () = async {
                    match changes.as_mut() {
                        Some(rx) => loop {
                            match rx.recv().await {
                                Ok(c) if c.request_id == id => break,
                                Ok(_) => {}
                                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                                    std::future::pending::<()>().await;
                                }
                            }
                        },
                        None => std::future::pending().await,
                    }
                } => {}
                () = tokio::time::sleep(every) => {}
            }
        }
    }
}

impl Elicitor for InboxElicitor {
    fn elicit(
        &self,
        request: ElicitationRequest,
    ) -> BoxFuture<'_, Result<ElicitationAnswer, ElicitError>> {
        Box::pin(self.ask(request))
    }
}

fn failed(e: ClientError) -> ElicitError {
    ElicitError::Failed(e.to_string())
}

/// The inbox field asking for `f`.
pub fn inbox_field(f: &ElicitField) -> Field {
    let id = f.name.clone();
    let label = f.title.clone();
    let required = f.required;
    let description = f.description.clone();
    let options = || f.kind.options().iter().map(|c| c.label.clone()).collect();
    match &f.kind {
        FieldKind::Text {
            format,
            min_length,
            max_length,
        } => {
            let bounded = || BoundedField {
                id: id.clone(),
                label: label.clone(),
                required,
                description: description.clone(),
                min: None,
                max: None,
            };
            match format.as_deref() {
                Some("date") => Field::DateField(bounded()),
                Some("date-time") => Field::DateTime(bounded()),
                format => Field::Text(Text {
                    id,
                    label,
                    required,
                    description,
                    format: match format {
                        Some("email") => Some(TextFormat::Email),
                        Some("uri") => Some(TextFormat::Url),
                        _ => None,
                    },
                    min_length: *min_length,
                    max_length: *max_length,
                }),
            }
        }
        FieldKind::Number { integer, min, max } => Field::Number(Number {
            id,
            label,
            required,
            description,
            integer_only: *integer,
            min: *min,
            max: *max,
        }),
        FieldKind::Boolean => Field::Switch(Switch {
            id,
            label,
            required,
            description,
        }),
        FieldKind::Choice { .. } => Field::Select(Select {
            id,
            label,
            required,
            description,
            options: options(),
        }),
        FieldKind::MultiChoice { .. } => Field::Multiselect(Multiselect {
            id,
            label,
            required,
            description,
            options: options(),
        }),
    }
}

/// A schema value (a default) as the inbox shows it: a choice's value as its title.
fn inbox_value(f: &ElicitField, v: &Value) -> Option<Value> {
    let label = |value: &Value| -> Option<Value> {
        let value = value.as_str()?;
        let c = f.kind.options().iter().find(|c| c.value == value)?;
        Some(Value::String(c.label.clone()))
    };
    match &f.kind {
        FieldKind::Choice { .. } => label(v),
        FieldKind::MultiChoice { .. } => v
            .as_array()?
            .iter()
            .map(label)
            .collect::<Option<Vec<_>>>()
            .map(Value::Array),
        _ => Some(v.clone()),
    }
}

/// What the inbox's result says to the server: answers → `accept` with the values in the
/// schema's types; a result without answers (expired) → `cancel`.
fn answer(fields: &[ElicitField], result: &Value) -> ElicitationAnswer {
    let Some(answers) = result.get("fields").and_then(Value::as_object) else {
        return ElicitationAnswer::Cancel;
    };
    let mut content = Map::new();
    for f in fields {
        if let Some(v) = answers.get(&f.name).and_then(|v| schema_value(f, v)) {
            content.insert(f.name.clone(), v);
        }
    }
    ElicitationAnswer::Accept { content }
}

/// An inbox answer as the schema's type; `None` for one that has no such value (blank).
fn schema_value(f: &ElicitField, v: &Value) -> Option<Value> {
    match &f.kind {
        FieldKind::Number { integer, .. } => number_value(v.as_f64()?, *integer),
        FieldKind::Choice { options } => choice_value(options, v.as_str()?).ok().map(Value::String),
        FieldKind::MultiChoice { options, .. } => v
            .as_array()?
            .iter()
            .map(|l| choice_value(options, l.as_str()?).ok().map(Value::String))
            .collect::<Option<Vec<_>>>()
            .map(Value::Array),
        FieldKind::Text { .. } | FieldKind::Boolean => Some(v.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_mcp::elicit::parse_schema;

    fn fields() -> Vec<ElicitField> {
        parse_schema(&json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "title": "Name", "maxLength": 20},
                "email": {"type": "string", "format": "email"},
                "born": {"type": "string", "format": "date"},
                "n": {"type": "integer", "minimum": 1, "maximum": 9, "default": 4},
                "ok": {"type": "boolean"},
                "hero": {"type": "string", "oneOf": [{"const": "h1", "title": "Superman"}, {"const": "h2", "title": "Batman"}], "default": "h2"},
                "fish": {"type": "array", "items": {"enum": ["tuna", "trout"]}}
            },
            "required": ["name"]
        }))
        .unwrap()
    }

    fn by_name<'a>(fields: &'a [ElicitField], name: &str) -> &'a ElicitField {
        fields.iter().find(|f| f.name == name).unwrap()
    }

    #[test]
    fn schema_properties_become_inbox_fields() {
        let fields = fields();
        let inbox: Vec<Value> = fields
            .iter()
            .map(|f| serde_json::to_value(inbox_field(f)).unwrap())
            .collect();
        let get = |id: &str| inbox.iter().find(|f| f["id"] == id).unwrap().clone();
        assert_eq!(
            get("name"),
            json!({"type": "Text", "id": "name", "label": "Name", "required": true, "maxLength": 20})
        );
        assert_eq!(get("email")["format"], "EMAIL");
        assert_eq!(get("born")["type"], "DateField");
        assert_eq!(
            get("n"),
            json!({"type": "Number", "id": "n", "label": "n", "required": false, "integerOnly": true, "min": 1.0, "max": 9.0})
        );
        assert_eq!(get("ok")["type"], "Switch");
        assert_eq!(get("hero")["options"], json!(["Superman", "Batman"]));
        assert_eq!(get("fish")["type"], "Multiselect");
        assert_eq!(
            inbox_value(by_name(&fields, "hero"), &json!("h2")),
            Some(json!("Batman"))
        );
    }

    #[test]
    fn answers_go_back_in_the_schemas_types() {
        let fields = fields();
        let result = json!({"fields": {"name": "Ada", "n": 7.0, "ok": true, "hero": "Superman", "fish": ["trout"]}});
        let ElicitationAnswer::Accept { content } = answer(&fields, &result) else {
            panic!("not accepted");
        };
        assert_eq!(
            Value::Object(content),
            json!({"name": "Ada", "n": 7, "ok": true, "hero": "h1", "fish": ["trout"]})
        );
        // Expired: a result without answers.
        assert_eq!(
            answer(&fields, &json!({"requestId": "r"})),
            ElicitationAnswer::Cancel
        );
    }
}
