//! The reviewers' side of the inbox: what a human sees, across every agent's tasks.
//!
//! The agent API ([`Inbox::task`], [`Inbox::approval_result`], …) answers one agent key
//! about what it created; a reviewer sees every request. This module reads for them:
//!
//! 1. [`Inbox::list_requests`]: a page of requests, newest first, filtered by status,
//!    project and kind, with the number of all that match (the inbox's count) and a cursor
//!    for the next page.
//! 2. [`Inbox::request_view`]: one request whole — what the agent asked, its context and
//!    recommendation, the fields of an elicitation, the result once decided, and the task's
//!    timeline.
//! 3. [`Inbox::changes`]: a live feed of requests created and decided, which the web
//!    inbox turns into server-sent events.
//!
//! Deciding goes through [`Inbox::decide_approval`] and [`Inbox::answer_elicitation`],
//! which take the reviewer's name.

use std::collections::BTreeMap;

use super::{Inbox, Result};
use crate::error::InboxError;
use crate::fields::{Field, FieldBid};
use crate::model::{ApprovalRequest, ElicitationRequest, EventRow};
use crate::outcome::{ApprovalRecommendation, OutcomeType, Timestamp};
use crate::store::requests::{Filter, SummaryRow};
use crate::store::{self, from_json, wire_enum};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The most requests one page of [`Inbox::list_requests`] returns.
pub const MAX_REQUESTS_PAGE: u32 = 200;
const DEFAULT_REQUESTS_PAGE: u32 = 50;
/// A request page shows at most this many of the task's events (the oldest); the agent API
/// pages through the rest.
pub const MAX_VIEW_EVENTS: u32 = 500;

/// An approval or an elicitation request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestKind {
    Approval,
    Elicitation,
}

impl RequestKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Approval => "approval",
            RequestKind::Elicitation => "elicitation",
        }
    }
}

/// Where a request stands. `withdrawn` and `expired` are settled without a human.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestStatus {
    Pending,
    Decided,
    Withdrawn,
    Expired,
}

impl RequestStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestStatus::Pending => "pending",
            RequestStatus::Decided => "decided",
            RequestStatus::Withdrawn => "withdrawn",
            RequestStatus::Expired => "expired",
        }
    }
}

/// Which requests [`Inbox::list_requests`] returns. The default: every request, newest
/// first, 50 to a page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestFilter {
    /// `None`: any status.
    pub status: Option<RequestStatus>,
    /// A project's name.
    pub project: Option<String>,
    pub kind: Option<RequestKind>,
    /// Default 50, clamped to 1..=[`MAX_REQUESTS_PAGE`].
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    pub before: Option<String>,
    /// Only requests whose id starts with this (how `tern inbox` resolves a short id).
    pub id_prefix: Option<String>,
}

/// One line of the inbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestSummary {
    pub id: String,
    pub kind: RequestKind,
    pub status: RequestStatus,
    pub project_name: String,
    pub task_id: String,
    pub task_name: String,
    pub summary: String,
    pub created_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// An approval's outcome once settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<OutcomeType>,
    /// The task's `externalId`: for the gateway's own agent, the session that asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_external_id: Option<String>,
    /// The id of the agent key that owns the task; not sent (key ids are not for reviewers'
    /// programs), only read by the web inbox to tell the gateway's own sessions apart.
    #[serde(skip)]
    pub task_owner: String,
}

/// A page of the inbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestList {
    pub items: Vec<RequestSummary>,
    /// How many requests match the filter, over all pages.
    pub count: u64,
    /// Pass as `before` for the next page; absent on the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One request whole, as a reviewer sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestView {
    #[serde(flatten)]
    pub summary: RequestSummary,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_value_context: Option<BTreeMap<String, String>>,
    /// An approval's recommended outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_recommendation: Option<ApprovalRecommendation>,
    /// An elicitation's pre-fills.
    #[serde(default)]
    pub field_bids: Vec<FieldBid>,
    /// An elicitation's fields; empty for an approval.
    #[serde(default)]
    pub fields: Vec<Field>,
    /// Upload ids.
    #[serde(default)]
    pub attachments: Vec<String>,
    /// The `ApprovalResult` or `ElicitationResult` once settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The task's timeline, oldest first (at most [`MAX_VIEW_EVENTS`]).
    pub events: Vec<EventRow>,
}

/// Something that happened to a request, on [`Inbox::changes`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    pub request_id: String,
    pub what: ChangeKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Created,
    /// Decided, answered, expired or withdrawn: it left the pending list.
    Decided,
}

impl Inbox {
    /// A page of requests, newest first, with the number of all that match.
    pub async fn list_requests(&self, filter: &RequestFilter) -> Result<RequestList> {
        let limit = filter
            .limit
            .unwrap_or(DEFAULT_REQUESTS_PAGE)
            .clamp(1, MAX_REQUESTS_PAGE);
        let before = filter.before.as_deref().map(decode_cursor).transpose()?;
        let filter = Filter {
            status: filter.status.map(RequestStatus::as_str),
            project: filter.project.as_deref(),
            kind: filter.kind.map(RequestKind::as_str),
            id_prefix: filter.id_prefix.as_deref(),
        };
        let before = before.as_ref().map(|(at, id)| (*at, id.as_str()));
        let mut conn = store::read(self.store()).await?;
        // One more than the page, to know whether another page follows.
        let rows = store::requests::list(&mut conn, &filter, before, i64::from(limit) + 1).await?;
        let count = store::requests::count(&mut conn, &filter).await?;
        let more = rows.len() > limit as usize;
        let mut items = Vec::with_capacity(rows.len().min(limit as usize));
        for row in rows.into_iter().take(limit as usize) {
            items.push(summary_from_row(row)?);
        }
        let next_cursor = if more {
            items
                .last()
                .map(|last| encode_cursor(last.created_at.unix_millis(), &last.id))
        } else {
            None
        };
        Ok(RequestList {
            items,
            count: u64::try_from(count).unwrap_or(0),
            next_cursor,
        })
    }

    /// One request whole, whoever created it.
    pub async fn request_view(&self, id: &str) -> Result<RequestView> {
        let mut conn = store::read(self.store()).await?;
        let row = store::requests::summary(&mut conn, id)
            .await?
            .ok_or_else(|| InboxError::NotFound(format!("request {id}")))?;
        let summary = summary_from_row(row)?;
        let (request, result) = store::requests::bodies(&mut conn, id).await?;
        let mut view = RequestView {
            summary,
            key_value_context: None,
            approval_recommendation: None,
            field_bids: Vec::new(),
            fields: Vec::new(),
            attachments: Vec::new(),
            result: result.map(|r| from_json(&r, "result")).transpose()?,
            events: Vec::new(),
        };
        match view.summary.kind {
            RequestKind::Approval => {
                let r: ApprovalRequest = from_json(&request, "request")?;
                view.key_value_context = r.key_value_context;
                view.approval_recommendation = r.recommendation;
                view.attachments = r.attachments.unwrap_or_default();
            }
            RequestKind::Elicitation => {
                let r: ElicitationRequest = from_json(&request, "request")?;
                view.key_value_context = r.key_value_context;
                view.field_bids = r.recommendation.unwrap_or_default();
                view.fields = r.fields;
                view.attachments = r.attachments.unwrap_or_default();
            }
        }
        let events =
            store::events::page(&mut conn, &view.summary.task_id, 0, MAX_VIEW_EVENTS).await?;
        view.events = events.into_iter().map(|(_, event)| event).collect();
        Ok(view)
    }

    /// Whether `owner` has a task whose `externalId` is `external_id`: for the gateway's own
    /// agent, whether that session asked the inbox something (and so whether reviewers may
    /// read its conversation).
    pub async fn owner_has_task_for(
        &self,
        owner: &str,
        external_id: &str,
        since_ms: i64,
    ) -> Result<bool> {
        let mut conn = store::read(self.store()).await?;
        store::tasks::owner_has_external_id(&mut conn, owner, external_id, since_ms).await
    }

    /// How many requests wait for a human.
    pub async fn pending_count(&self) -> Result<u64> {
        let mut conn = store::read(self.store()).await?;
        let n = store::requests::pending_count(&mut conn).await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

fn summary_from_row(row: SummaryRow) -> Result<RequestSummary> {
    Ok(RequestSummary {
        id: row.id,
        kind: wire_enum(row.kind, "request kind")?,
        status: wire_enum(row.status, "request status")?,
        project_name: row.project_name,
        task_id: row.task_id,
        task_name: row.task_name,
        summary: row.summary.unwrap_or_default(),
        created_at: Timestamp::from_unix_millis(row.created_at),
        decided_at: row.decided_at.map(Timestamp::from_unix_millis),
        decided_by: row.decided_by,
        outcome: row
            .outcome
            .map(|o| wire_enum(o, "approval outcome"))
            .transpose()?,
        task_external_id: row.task_external_id,
        task_owner: row.task_owner,
    })
}

// A page cursor: "r" + the hex millisecond time of the page's last request + "." + its id.
fn encode_cursor(created_at: i64, id: &str) -> String {
    format!("r{created_at:x}.{id}")
}

fn decode_cursor(cursor: &str) -> Result<(i64, String)> {
    cursor
        .strip_prefix('r')
        .and_then(|rest| rest.split_once('.'))
        .filter(|(_, id)| !id.is_empty() && id.len() <= 64)
        .and_then(|(ms, id)| Some((i64::from_str_radix(ms, 16).ok()?, id.to_owned())))
        .ok_or_else(|| InboxError::Invalid {
            code: "invalid_cursor",
            message: format!("{cursor:?} is not a cursor this API returned"),
        })
}

#[cfg(test)]
mod tests;
