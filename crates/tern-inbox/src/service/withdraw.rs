//! Withdrawing a request: tern's extension beyond Pump Up (the SDK has no such endpoint).
//!
//! An agent that no longer needs an answer — the user went away, the session was deleted,
//! the work was done another way — takes its pending request back with
//! [`Inbox::withdraw_request`]:
//!
//! 1. Under the write lock, the request must be the agent's (another key's is
//!    [`InboxError::NotFound`]). An overdue one is settled as expired first and the
//!    withdrawal refused, as a decision would be.
//! 2. A pending request becomes `withdrawn` by the same conditional
//!    `UPDATE … WHERE status = 'pending'` every decision uses, so a withdrawal and a human's
//!    decision cannot both win; the loser gets [`InboxError::AlreadyDecided`] (409).
//! 3. The task's timeline gets a `NOTE` from the agent in response to the request (Pump
//!    Up's event types have no withdrawal), with the reason; the task runs again once
//!    nothing else of it is pending; the change feed hears the request left the pending
//!    list.
//! 4. Withdrawing a withdrawn request again answers the first [`Withdrawal`]: a retry is
//!    harmless. Afterwards a reviewer's decision gets 409, and the agent's result read gets
//!    [`InboxError::Withdrawn`] (409) instead of a 204 it would poll forever.
//!
//! A reviewer can take a stale request off the pending list the same way
//! ([`Inbox::dismiss_request`]): the same conditional update and the same stored
//! [`Withdrawal`] (with `dismissedBy`), so the agent reads it exactly as it reads its own
//! withdrawal; only the timeline's `NOTE` comes from the human and names them.

use serde::{Deserialize, Serialize};

use super::review::{ChangeKind, RequestKind, RequestStatus};
use super::{Inbox, Result, settle_as};
use crate::error::InboxError;
use crate::model::{Actor, EventType, Payload};
use crate::outcome::Timestamp;
use crate::store::events::NewEvent;
use crate::store::{self, from_json};

/// The longest reason kept; a longer one is cut (at a character boundary).
const MAX_REASON_CHARS: usize = 2000;

/// What [`Inbox::withdraw_request`] answers, and what a withdrawn request stores as its
/// result.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Withdrawal {
    pub request_id: String,
    pub task_id: String,
    /// Always `withdrawn`; there so the body says what happened on its own.
    pub status: RequestStatus,
    pub withdrawn_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The reviewer who dismissed the request; absent when the agent withdrew it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dismissed_by: Option<String>,
}

/// Who takes a request back: its agent (only its own requests) or a reviewer (any).
enum Withdrawer<'a> {
    Agent { owner: &'a str, by: &'a str },
    Reviewer { name: &'a str },
}

impl Inbox {
    /// Withdraws one of `owner`'s pending requests (either kind); see the module docs.
    /// `reason` (optional) goes on the timeline and into the answer. `owner` is recorded as
    /// who settled it.
    pub async fn withdraw_request(
        &self,
        owner: &str,
        request_id: &str,
        reason: Option<&str>,
    ) -> Result<Withdrawal> {
        self.withdraw_request_of(None, owner, request_id, reason)
            .await
    }

    /// [`Inbox::withdraw_request`] for a request of `kind` only (the HTTP paths name the
    /// kind): one of the other kind is [`InboxError::NotFound`].
    pub async fn withdraw_request_of(
        &self,
        kind: Option<RequestKind>,
        owner: &str,
        request_id: &str,
        reason: Option<&str>,
    ) -> Result<Withdrawal> {
        self.withdraw_request_by(kind, owner, owner, request_id, reason)
            .await
    }

    /// [`Inbox::withdraw_request_of`] recording `by` as who settled it: the gateway's agent
    /// API owns requests by the key's id and shows reviewers the key's name.
    pub async fn withdraw_request_by(
        &self,
        kind: Option<RequestKind>,
        owner: &str,
        by: &str,
        request_id: &str,
        reason: Option<&str>,
    ) -> Result<Withdrawal> {
        self.take_back(kind, Withdrawer::Agent { owner, by }, request_id, reason)
            .await
    }

    /// A reviewer dismisses a pending request of any agent (a stale one nobody will
    /// decide): it becomes `withdrawn` exactly as if its agent had withdrawn it, so the agent
    /// reads the same 409; the timeline's note names the reviewer. A second dismissal
    /// answers the first [`Withdrawal`]; a decided or expired request is
    /// [`InboxError::AlreadyDecided`].
    pub async fn dismiss_request(
        &self,
        request_id: &str,
        reviewer: &str,
        reason: Option<&str>,
    ) -> Result<Withdrawal> {
        self.take_back(
            None,
            Withdrawer::Reviewer { name: reviewer },
            request_id,
            reason,
        )
        .await
    }

    async fn take_back(
        &self,
        kind: Option<RequestKind>,
        who: Withdrawer<'_>,
        request_id: &str,
        reason: Option<&str>,
    ) -> Result<Withdrawal> {
        let what = match kind {
            Some(RequestKind::Approval) => "approval request",
            Some(RequestKind::Elicitation) => "elicitation request",
            None => "request",
        };
        let kind = kind.map(RequestKind::as_str);
        let owner = match who {
            Withdrawer::Agent { owner, .. } => Some(owner),
            Withdrawer::Reviewer { .. } => None,
        };
        let reason = reason
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(|r| r.chars().take(MAX_REASON_CHARS).collect::<String>());
        let mut tx = self.begin().await?;
        let row = store::requests::settling(&mut tx, request_id, owner, kind)
            .await?
            .ok_or_else(|| InboxError::NotFound(format!("{what} {request_id}")))?;
        if row.status == RequestStatus::Withdrawn.as_str() {
            let result = row.result.unwrap_or_default();
            return from_json(&result, "withdrawal");
        }
        if row.status != RequestStatus::Pending.as_str() {
            return Err(InboxError::AlreadyDecided);
        }
        if self.expire_if_overdue(&mut tx, request_id, None).await? {
            // The expiry came first: it stands, and there is nothing left to withdraw.
            tx.commit().await?;
            self.announce(request_id, ChangeKind::Decided);
            return Err(InboxError::AlreadyDecided);
        }
        let withdrawal = Withdrawal {
            request_id: request_id.to_owned(),
            task_id: row.task_id,
            status: RequestStatus::Withdrawn,
            withdrawn_at: Timestamp::now(),
            reason,
            dismissed_by: match who {
                Withdrawer::Reviewer { name } => Some(name.to_owned()),
                Withdrawer::Agent { .. } => None,
            },
        };
        let (actor, by, message) = match who {
            Withdrawer::Agent { by, .. } => (
                Actor::Agent,
                by,
                match &withdrawal.reason {
                    Some(reason) => format!("Withdrawn by the agent: {reason}"),
                    None => "Withdrawn by the agent.".to_owned(),
                },
            ),
            Withdrawer::Reviewer { name } => (
                Actor::Human,
                name,
                match &withdrawal.reason {
                    Some(reason) => format!("Dismissed by {name}: {reason}"),
                    None => format!("Dismissed by {name}."),
                },
            ),
        };
        let event = NewEvent::new(EventType::Note, actor, Payload::Note { message });
        settle_as(
            &mut tx,
            RequestStatus::Withdrawn,
            request_id,
            &withdrawal,
            &withdrawal.task_id,
            by,
            &withdrawal.withdrawn_at,
            event,
        )
        .await?;
        tx.commit().await?;
        self.announce(request_id, ChangeKind::Decided);
        Ok(withdrawal)
    }
}
