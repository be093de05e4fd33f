//! The inbox tools: `request_approval`, `request_elicitation`, `get_decision`,
//! `wait_for_decision` — the agent API's requests (`/api/approval-requests`, …) for MCP.
//!
//! A request lives on a task of the calling key, in a project, as one made through the agent
//! API does: `taskId` names one of the key's tasks; without it a task is created for the
//! request (`taskName`, else the summary) in `projectName` (default `default`). The key's id
//! owns it, so another key reads "not found" for it. The arguments reuse the `inbox`
//! toolset's types (summary, context, recommendation, fields) without its workspace
//! attachments: an MCP client's files are not on the gateway's disk.

use std::collections::HashMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tern_inbox::InboxError;
use tern_inbox::model::{
    ApprovalRequest, CreateApproval, CreateElicitation, CreateTask, ElicitationRequest,
};
use tern_inbox::service::DEFAULT_PROJECT;
use tern_waits::tools::request_approval::ApprovalArgs;
use tern_waits::tools::request_elicitation::ElicitationArgs;

use super::{Call, PROGRESS_EVERY, ToolDef, ToolFail, ToolOut, parse_args, report_progress};

/// The longest `wait_for_decision` waits in one call.
pub(crate) const MAX_WAIT_SECS: u64 = 600;
/// Its default.
const DEFAULT_WAIT_SECS: u64 = 300;

/// Where a request goes; the arguments every request tool takes besides its own.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Placement {
    /// The inbox project (default `default`).
    #[serde(default)]
    project_name: Option<String>,
    /// One of your tasks (from an earlier request's `taskId`); default: a new task.
    #[serde(default)]
    task_id: Option<String>,
    /// The name of the new task when `taskId` is not given (default: the summary).
    #[serde(default)]
    task_name: Option<String>,
    /// A retry with the same key returns the first request and creates nothing.
    #[serde(default)]
    idempotency_key: Option<String>,
}

const PLACEMENT_KEYS: [&str; 4] = ["projectName", "taskId", "taskName", "idempotencyKey"];

/// `request_approval`'s schema: the `inbox` toolset's without attachments, plus where.
fn approval_schema() -> Value {
    request_schema::<ApprovalArgs>()
}

fn elicitation_schema() -> Value {
    request_schema::<ElicitationArgs>()
}

fn request_schema<A: JsonSchema>() -> Value {
    let mut schema = tern_tools::tool::parameters_schema::<A>();
    let extra = tern_tools::tool::parameters_schema::<Placement>();
    if let (Some(props), Some(more)) = (
        schema["properties"].as_object_mut(),
        extra["properties"].as_object(),
    ) {
        props.remove("attachments");
        for (k, v) in more {
            props.insert(k.clone(), v.clone());
        }
    }
    schema
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DecisionArgs {
    /// The id `request_approval` or `request_elicitation` returned.
    request_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct WaitArgs {
    /// The id `request_approval` or `request_elicitation` returned.
    request_id: String,
    /// Seconds to wait at most (default 300, at most 600); then the answer says it is
    /// still pending.
    #[serde(default)]
    #[schemars(range(min = 1, max = 600))]
    timeout: Option<u64>,
}

pub(crate) fn tools() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: "request_approval",
            description: "Ask a human reviewer (tern's inbox: web, CLI or chat) to approve or \
                reject one concrete action before you take it. Returns {requestId, taskId, \
                status: \"pending\"} at once; then wait_for_decision or get_decision.",
            schema: approval_schema,
        },
        ToolDef {
            name: "request_elicitation",
            description: "Ask a human reviewer to fill in a small form of typed fields \
                (text, number, boolean, select, …). Returns {requestId, taskId, status: \
                \"pending\"} at once; then wait_for_decision or get_decision.",
            schema: elicitation_schema,
        },
        super::def::<DecisionArgs>(
            "get_decision",
            "The state of one of your requests now: {status: \"pending\"} or {status: \
             \"decided\", result} (an approval's outcome, or an elicitation's answers).",
        ),
        super::def::<WaitArgs>(
            "wait_for_decision",
            "Wait until one of your requests is decided, or `timeout` seconds pass (default \
             300, at most 600); reports progress meanwhile. Answers like get_decision \
             (status \"pending\" when the time ran out: call it again).",
        ),
    ]
}

pub(crate) async fn call(name: &str, args: Value, call: &Call<'_>) -> Option<ToolOut> {
    Some(match name {
        "request_approval" => request(call, args, Kind::Approval).await,
        "request_elicitation" => request(call, args, Kind::Elicitation).await,
        "get_decision" => match parse_args::<DecisionArgs>(args) {
            Ok(a) => decision(call, &a.request_id).await.map(|d| d.json()),
            Err(e) => Err(e),
        },
        "wait_for_decision" => wait(call, args).await,
        _ => return None,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Approval,
    Elicitation,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Approval => "approval",
            Kind::Elicitation => "elicitation",
        }
    }
}

/// Splits the placement keys off the arguments, so the rest is the toolset's own shape.
fn split(args: Value) -> Result<(Placement, Value), ToolFail> {
    let Value::Object(mut obj) = args else {
        return Err(ToolFail::new("invalid arguments: expected an object"));
    };
    let mut place = Map::new();
    for k in PLACEMENT_KEYS {
        if let Some(v) = obj.remove(k) {
            place.insert(k.to_owned(), v);
        }
    }
    if obj.contains_key("attachments") {
        return Err(ToolFail::new(
            "`attachments` are not supported over MCP: your files are not on the gateway's \
             machine; put what the reviewer needs in `keyValueContext`",
        ));
    }
    Ok((parse_args(Value::Object(place))?, Value::Object(obj)))
}

async fn request(call: &Call<'_>, args: Value, kind: Kind) -> ToolOut {
    let (place, rest) = split(args)?;
    let owner = call.key.id.as_str();
    let inbox = &call.gw.inbox;
    let idem = place.idempotency_key.as_deref().filter(|k| !k.is_empty());
    if idem.is_some_and(|k| k.len() > crate::inbox_api::MAX_IDEMPOTENCY_KEY) {
        return Err(ToolFail::new(format!(
            "`idempotencyKey` is at most {} characters",
            crate::inbox_api::MAX_IDEMPOTENCY_KEY
        )));
    }
    // Checked before a task is made for it: bad input stores nothing.
    let (summary, build): (String, Box<dyn FnOnce(String, String) -> Body + Send>) = match kind {
        Kind::Approval => {
            let a: ApprovalArgs = parse_args(rest)?;
            if let Some(c) = a.recommendation.as_ref().and_then(|r| r.confidence)
                && !(0.0..=1.0).contains(&c)
            {
                return Err(ToolFail::new(
                    "`recommendation.confidence` must be between 0 and 1",
                ));
            }
            let summary = a.summary.clone();
            (
                summary,
                Box::new(move |project_name, task_id| {
                    Body::Approval(CreateApproval {
                        project_name,
                        task_id,
                        request: ApprovalRequest {
                            summary: a.summary,
                            key_value_context: a.key_value_context,
                            recommendation: a.recommendation,
                            attachments: None,
                        },
                        external_trace_id: a.external_trace_id,
                    })
                }),
            )
        }
        Kind::Elicitation => {
            let a: ElicitationArgs = parse_args(rest)?;
            if a.fields.is_empty() {
                return Err(ToolFail::new(
                    "`fields` must not be empty: there would be nothing to answer",
                ));
            }
            tern_inbox::fields::validate_field_defs(&a.fields).map_err(|errors| {
                let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
                ToolFail(format!("invalid `fields`: {}", list.join("; ")))
            })?;
            let summary = a.summary.clone();
            (
                summary,
                Box::new(move |project_name, task_id| {
                    Body::Elicitation(CreateElicitation {
                        project_name,
                        task_id,
                        request: ElicitationRequest {
                            summary: a.summary,
                            fields: a.fields,
                            key_value_context: a.key_value_context,
                            recommendation: a.recommendation,
                            attachments: None,
                        },
                        external_trace_id: a.external_trace_id,
                    })
                }),
            )
        }
    };
    if summary.trim().is_empty() {
        return Err(ToolFail::new("`summary` must not be empty"));
    }
    let project = place
        .project_name
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_PROJECT.to_owned());
    if project == DEFAULT_PROJECT {
        inbox.ensure_default_project().await?;
    }
    let task_id = match place.task_id {
        // The key's own task, or "not found" (another key's task is not told apart).
        Some(id) => inbox.task(owner, &id).await?.task.id,
        None => {
            let name = place
                .task_name
                .filter(|n| !n.trim().is_empty())
                .unwrap_or_else(|| summary.chars().take(120).collect());
            // A retried request with a key must not make a second task either.
            let task_idem = idem.map(|k| format!("mcp-task:{k}"));
            inbox
                .create_task(
                    owner,
                    CreateTask {
                        name,
                        project_name: project.clone(),
                        external_id: Some("mcp".to_owned()),
                        metadata_patch: None,
                    },
                    task_idem.as_deref(),
                )
                .await?
                .id
        }
    };
    let created = match build(project, task_id.clone()) {
        Body::Approval(b) => inbox.create_approval(owner, b, idem).await?,
        Body::Elicitation(b) => inbox.create_elicitation(owner, b, idem).await?,
    };
    tracing::info!(key = %call.key.name, request = %created.event_id, kind = kind.as_str(), "inbox request over MCP");
    // An auto-approve policy may have decided it inside the create.
    let now = decision(call, &created.event_id).await?;
    let mut out = now.json();
    out["taskId"] = json!(task_id);
    out["kind"] = json!(kind.as_str());
    Ok(out)
}

enum Body {
    Approval(CreateApproval),
    Elicitation(CreateElicitation),
}

/// A request's state as the tools answer it.
struct Decision {
    request_id: String,
    kind: Kind,
    result: Option<Value>,
}

impl Decision {
    fn json(&self) -> Value {
        match &self.result {
            None => json!({
                "requestId": self.request_id,
                "kind": self.kind.as_str(),
                "status": "pending",
            }),
            Some(r) => json!({
                "requestId": self.request_id,
                "kind": self.kind.as_str(),
                "status": "decided",
                "result": r,
            }),
        }
    }
}

/// One of the key's requests now, whichever kind it is.
async fn decision(call: &Call<'_>, request_id: &str) -> Result<Decision, ToolFail> {
    let owner = call.key.id.as_str();
    let inbox = &call.gw.inbox;
    let (kind, result) = match inbox.approval_result(owner, request_id).await {
        Ok(r) => (Kind::Approval, r.map(serde_json::to_value)),
        Err(InboxError::NotFound(_)) => match inbox.elicitation_result(owner, request_id).await {
            Ok(r) => (Kind::Elicitation, r.map(serde_json::to_value)),
            Err(InboxError::NotFound(_)) => {
                return Err(ToolFail(format!("request {request_id} not found")));
            }
            Err(e) => return Err(e.into()),
        },
        Err(e) => return Err(e.into()),
    };
    let result = result
        .transpose()
        .map_err(|e| ToolFail(format!("cannot read the result: {e}")))?;
    Ok(Decision {
        request_id: request_id.to_owned(),
        kind,
        result,
    })
}

/// `wait_for_decision` calls one key may have under way at once, across its sessions:
/// each holds a task and a feed subscription for up to 600 s.
pub(crate) const MAX_WAITS_PER_KEY: usize = 32;

/// How often a wait looks at its request without the change feed naming it: a backstop
/// for a change missed by a lagging or closed feed, rare enough to cost nothing.
const FALLBACK_LOOK: Duration = Duration::from_secs(30);

/// The `wait_for_decision` calls under way, per key id.
#[derive(Default)]
pub(crate) struct Waits(std::sync::Mutex<HashMap<String, usize>>);

/// One counted wait; uncounted when dropped (the call ended, however).
struct WaitSlot<'a> {
    waits: &'a Waits,
    key: String,
}

impl Waits {
    fn take(&self, key: &str) -> Result<WaitSlot<'_>, ToolFail> {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(key.to_owned()).or_default();
        if *n >= MAX_WAITS_PER_KEY {
            return Err(ToolFail(format!(
                "too many wait_for_decision calls under way for this key (at most \
                 {MAX_WAITS_PER_KEY}); end some, or use get_decision"
            )));
        }
        *n += 1;
        Ok(WaitSlot {
            waits: self,
            key: key.to_owned(),
        })
    }
}

impl Drop for WaitSlot<'_> {
    fn drop(&mut self) {
        let mut m = self.waits.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.key);
            }
        }
    }
}

/// `wait_for_decision`: the result once decided, or still pending after the timeout. Looks
/// at the request when the inbox's change feed names it (or at a slow fallback tick, for a
/// change a lagging feed missed); every [`PROGRESS_EVERY`], with a progress token, tells the
/// client it waits. An MCP cancel (`notifications/cancelled`) or the gateway's shutdown ends
/// it at once. A key has at most [`MAX_WAITS_PER_KEY`] under way.
async fn wait(call: &Call<'_>, args: Value) -> ToolOut {
    let a: WaitArgs = parse_args(args)?;
    let secs = a.timeout.unwrap_or(DEFAULT_WAIT_SECS);
    if !(1..=MAX_WAIT_SECS).contains(&secs) {
        return Err(ToolFail(format!(
            "`timeout` is 1 to {MAX_WAIT_SECS} seconds, not {secs}"
        )));
    }
    let _slot = call.waits.take(&call.key.id)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    let mut changes = call.gw.inbox.changes();
    let mut feed_open = true;
    let mut ticks = tokio::time::interval(PROGRESS_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut fallback = tokio::time::interval(FALLBACK_LOOK);
    fallback.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    fallback.reset();
    let started = tokio::time::Instant::now();
    let mut look = true;
    loop {
        // Subscribed before this look, so a decision landing after it wakes the loop.
        if look {
            let now = decision(call, &a.request_id).await?;
            if now.result.is_some() {
                return Ok(now.json());
            }
            look = false;
        }
        tokio::select! {
            r = changes.recv(), if feed_open => match r {
                Ok(change) => look = change.request_id == a.request_id,
                // Changes were missed: one may have been this request's.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => look = true,
                // A closed feed would wake the loop at once forever: the fallback tick
                // alone wakes it from then on.
                Err(tokio::sync::broadcast::error::RecvError::Closed) => feed_open = false,
            },
            _ = fallback.tick() => look = true,
            _ = ticks.tick() => {
                let message = format!("waiting for a human's decision on {}", a.request_id);
                report_progress(call, started, Some(secs as f64), message).await;
            }
            () = tokio::time::sleep_until(deadline) => {
                let mut out = decision(call, &a.request_id).await?.json();
                if out["status"] == "pending" {
                    out["timedOut"] = json!(true);
                }
                return Ok(out);
            }
            () = call.ctx.ct.cancelled() => {
                tracing::info!(request = %a.request_id, key = %call.key.name, "wait_for_decision cancelled by the client");
                return Err(ToolFail::new("cancelled by the client"));
            }
            () = call.gw.closing.cancelled() => {
                return Err(ToolFail::new("the gateway is shutting down; call wait_for_decision again later"));
            }
        }
    }
}
