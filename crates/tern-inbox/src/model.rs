//! Projects, tasks, events and the agents' request bodies, in the wire shapes of the Pump Up
//! SDK (`pumpup-sdk` 0.0.10: `project_response.py`, `steps.py`, `step.py`,
//! `task_response.py`, `task_detail_response.py`, `open_request_dto.py`, `event_row.py`,
//! `payload.py`, `metadata_patch_dto.py`, `attachment.py`, `event_response.py`, and the
//! request bodies in `tasks/`, `approvals/`, `elicitations/` and `events/raw_client.py`).
//!
//! Property names are the SDK's camelCase aliases; optional properties are left out of the
//! JSON when unset; unknown extra properties are ignored on input.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::fields::{Field, FieldBid};
use crate::outcome::{ApprovalRecommendation, AuthoritySnapshot, Outcome, Timestamp};

/// Who owns a step, or who produced an event: `AGENT`, `HUMAN` or `PLATFORM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Actor {
    Agent,
    Human,
    Platform,
}

impl Actor {
    /// The wire spelling, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Actor::Agent => "AGENT",
            Actor::Human => "HUMAN",
            Actor::Platform => "PLATFORM",
        }
    }
}

/// One step of a project's workflow: `{name, owner, exits?}`. Without `exits`, a task may
/// leave the step for any step of the project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    pub name: String,
    pub owner: Actor,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exits: Option<Vec<String>>,
}

/// A project's workflow: `{initialStep, steps, stepSchemas?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Steps {
    pub initial_step: String,
    pub steps: Vec<Step>,
    /// An opaque document in the SDK; kept and returned as given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_schemas: Option<Map<String, Value>>,
}

/// `{id, name, projectName, steps}`. The SDK distinguishes a display `name` from the
/// `projectName` slug; tern's projects have one name, the slug, so both carry it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Project {
    pub id: String,
    pub name: String,
    pub project_name: String,
    pub steps: Steps,
}

/// `RUNNING` (the agent works on it), `WAITING` (a request waits for a human), `CLOSED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskStatus {
    Running,
    Waiting,
    Closed,
}

impl TaskStatus {
    /// The wire spelling, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Running => "RUNNING",
            TaskStatus::Waiting => "WAITING",
            TaskStatus::Closed => "CLOSED",
        }
    }
}

/// A file attached to a task: `{uploadId, label}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    pub upload_id: String,
    pub label: String,
}

/// `{id, projectId, name, externalId?, status, currentStep, metadata, attachments}` (the
/// SDK's `TaskResponse`). `metadata` and `attachments` are optional in the SDK; the inbox
/// always sends them, empty when there are none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub id: String,
    pub project_id: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    pub status: TaskStatus,
    pub current_step: String,
    #[serde(default)]
    pub metadata: Map<String, Value>,
    #[serde(default)]
    pub attachments: Vec<Attachment>,
}

/// `{set?, setOnce?, unset?}`: `set` overwrites keys, `setOnce` sets only keys the metadata
/// does not have yet, `unset` removes keys — applied in that order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetadataPatch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set_once: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unset: Option<Vec<String>>,
}

impl MetadataPatch {
    /// Applies the patch to `metadata`.
    pub fn apply(&self, metadata: &mut Map<String, Value>) {
        for (key, value) in self.set.iter().flatten() {
            metadata.insert(key.clone(), value.clone());
        }
        for (key, value) in self.set_once.iter().flatten() {
            if !metadata.contains_key(key) {
                metadata.insert(key.clone(), value.clone());
            }
        }
        for key in self.unset.iter().flatten() {
            metadata.remove(key);
        }
    }
}

/// The body of `POST api/tasks`: `{name, projectName, externalId?, metadataPatch?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateTask {
    pub name: String,
    pub project_name: String,
    /// The agent's own correlation id (e.g. its session id); not unique.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_patch: Option<MetadataPatch>,
}

/// The query of `GET api/tasks`: `projectId` exactly, `name` as a case-insensitive substring.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFilter {
    pub project_id: Option<String>,
    pub name: Option<String>,
}

/// `{items: [...]}`, the SDK's `ProjectListResponse` and `TaskListResponse`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemList<T> {
    pub items: Vec<T>,
}

/// The body of `GET api/tasks/{id}`: `{task, openRequests}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskDetail {
    pub task: Task,
    #[serde(default)]
    pub open_requests: Vec<OpenRequest>,
}

/// A request of the task still waiting for a human: `{requestId, eventType, summary,
/// requestedAt}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenRequest {
    pub request_id: String,
    pub event_type: EventType,
    pub summary: String,
    pub requested_at: Timestamp,
}

/// The kinds of events the inbox records. The SDK also lists `TIMEOUT`, `ASSIGNMENT` and
/// `TASK_CLOSED`; they arrive with the features that produce them (expiry, reviewers,
/// closing tasks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventType {
    TaskCreated,
    ApprovalRequested,
    ApprovalDecided,
    ElicitationRequested,
    ElicitationProvided,
    Action,
    Exception,
    Note,
    /// A request expired without a decision (`[inbox.policy] expires_after`).
    Timeout,
}

impl EventType {
    /// The wire spelling, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::TaskCreated => "TASK_CREATED",
            EventType::ApprovalRequested => "APPROVAL_REQUESTED",
            EventType::ApprovalDecided => "APPROVAL_DECIDED",
            EventType::ElicitationRequested => "ELICITATION_REQUESTED",
            EventType::ElicitationProvided => "ELICITATION_PROVIDED",
            EventType::Action => "ACTION",
            EventType::Exception => "EXCEPTION",
            EventType::Note => "NOTE",
            EventType::Timeout => "TIMEOUT",
        }
    }
}

/// One entry of a task's event log: `{id, projectId, taskId, timestamp, eventType, owner,
/// source, payload, inResponseTo?, transitionFrom?, transitionTo?, externalTraceId?}`.
///
/// `source` is who produced the event; `owner` is who owns the step the task is in after
/// it (whose move it is).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRow {
    pub id: String,
    pub project_id: String,
    pub task_id: String,
    pub timestamp: Timestamp,
    pub event_type: EventType,
    pub owner: Actor,
    pub source: Actor,
    pub payload: Payload,
    /// For a decision or an answer: the id of the request it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_response_to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transition_from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transition_to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub external_trace_id: Option<String>,
}

/// An event's payload, a union tagged by `type` (the SDK's `Payload`). Only the kinds the
/// inbox produces; see [`EventType`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all_fields = "camelCase")]
pub enum Payload {
    TaskCreated {
        name: String,
        initial_state: String,
        /// Required in the SDK's payload, `{}` when the task was created without one.
        metadata_patch: MetadataPatch,
    },
    ApprovalRequested(ApprovalRequest),
    ApprovalDecided {
        outcome: Outcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        authority: Option<AuthoritySnapshot>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        recommendation_snapshot: Option<ApprovalRecommendation>,
    },
    ElicitationRequested(ElicitationRequest),
    ElicitationProvided {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answered_by: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answers: Option<Map<String, Value>>,
    },
    Action {
        description: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<Map<String, Value>>,
        /// Required in the SDK's payload, `{}` when the action patched nothing.
        metadata_patch: MetadataPatch,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        add_attachments: Option<Vec<Attachment>>,
    },
    ExceptionRaised {
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<Map<String, Value>>,
    },
    Note {
        message: String,
    },
    /// A request expired: `state` is `"expired"`; `outcome` is what an approval became (the
    /// configured `expiry_outcome`), absent for an elicitation.
    Timeout {
        state: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outcome: Option<Outcome>,
    },
}

/// What an approval request shows the human (the `ApprovalRequested` payload):
/// `{summary, keyValueContext?, recommendation?, attachments?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest {
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_value_context: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommendation: Option<ApprovalRecommendation>,
    /// Upload ids, each already attached to the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Vec<String>>,
}

/// What an elicitation request shows the human (the `ElicitationRequested` payload):
/// `{summary, fields, keyValueContext?, recommendation?, attachments?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElicitationRequest {
    pub summary: String,
    pub fields: Vec<Field>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_value_context: Option<BTreeMap<String, String>>,
    /// Pre-fills, each naming one of `fields`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommendation: Option<Vec<FieldBid>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Vec<String>>,
}

/// The body of `POST api/approval-requests`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateApproval {
    pub project_name: String,
    pub task_id: String,
    #[serde(flatten)]
    pub request: ApprovalRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_trace_id: Option<String>,
}

/// The body of `POST api/elicitation-requests`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateElicitation {
    pub project_name: String,
    pub task_id: String,
    #[serde(flatten)]
    pub request: ElicitationRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_trace_id: Option<String>,
}

/// The body of `POST api/agent-actions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordAction {
    pub project_name: String,
    pub task_id: String,
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Map<String, Value>>,
    /// A step of the project, and an exit of the current step when it lists exits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transitions_to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_patch: Option<MetadataPatch>,
    /// Files to attach to the task (an upload id already attached gets the new label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_attachments: Option<Vec<Attachment>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_trace_id: Option<String>,
}

/// The body of `POST api/exceptions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportException {
    pub project_name: String,
    pub task_id: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transitions_to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_trace_id: Option<String>,
}

/// The body of `POST api/notes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddNote {
    pub project_name: String,
    pub task_id: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_trace_id: Option<String>,
}

/// The response of every event-creating POST: `{eventId}`. For an approval or elicitation
/// request, the event id is the request id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventId {
    pub event_id: String,
}

/// A page of a task's event log: `{items, nextCursor?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskEvents {
    pub items: Vec<EventRow>,
    /// Where to resume: after the last event returned, or where the caller already was when
    /// nothing new arrived (the log is a tail to follow). Absent only for a task with no
    /// events read yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}
