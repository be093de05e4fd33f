//! Where the service applies [`crate::policy`] and [`crate::notify`]: inside the transaction
//! that opens a request (rate limits before, expiry, auto-approval and notifications after),
//! in the expiry sweep ([`Inbox::expire_overdue`]), and before a request is decided, answered,
//! withdrawn or read ([`Inbox::expire_if_overdue`]: an overdue request expires then, whether
//! or not the sweeper came by). The module docs of `policy` and
//! `notify` give the rules; this is the glue to the service's tables and events.

use std::collections::BTreeMap;

use tern_store::now_ms;

use super::{Inbox, Kind, RequestTarget, Result, insert_event, pending_request, review, settle};
use crate::error::InboxError;
use crate::model::{Actor, ApprovalRequest, EventType, Payload, Project};
use crate::notify::{NewRequest, enqueue};
use crate::outcome::{
    ApprovalResult, AuthoritySnapshot, ElicitationResult, Outcome, OutcomeType, Timestamp,
};
use crate::policy::{PLATFORM, RequestFacts, Verdict};
use crate::store::events::NewEvent;
use crate::store::{self, Conn, from_json};

/// How many overdue requests one sweep settles; the next sweep takes the rest.
const SWEEP_BATCH: i64 = 500;

/// `keyValueContext.action` of a request.
pub(super) fn action_of(context: Option<&BTreeMap<String, String>>) -> Option<String> {
    context.and_then(|c| c.get("action")).cloned()
}

/// Refuses the request when a rate limit for its action is exhausted (see
/// [`crate::policy`]). Runs under the write lock, so two racing creates cannot both pass
/// the last free slot.
pub(super) async fn check_rate_limits(
    conn: &mut Conn,
    target: &RequestTarget<'_>,
    now: i64,
) -> Result<()> {
    let Some(action) = target.action else {
        return Ok(());
    };
    for limit in target.inbox.policy.rate_limits_for(action) {
        let window = i64::try_from(limit.window.as_millis()).unwrap_or(i64::MAX);
        let since = now.saturating_sub(window);
        // The `max` most recent requests with this action inside the window; when there are
        // `max` of them, the oldest of these must leave the window before another fits.
        let recent =
            store::requests::recent_with_action(&mut *conn, action, since, limit.max).await?;
        if recent.len() >= limit.max as usize {
            let oldest = recent.last().copied().unwrap_or(now);
            let free_at = oldest.saturating_add(window);
            let wait_ms = u64::try_from(free_at.saturating_sub(now)).unwrap_or(0);
            return Err(InboxError::RateLimited {
                action: action.to_owned(),
                max: limit.max,
                window: humanize(limit.window),
                retry_after_secs: wait_ms.div_ceil(1000).max(1),
            });
        }
    }
    Ok(())
}

/// `1h30m`-style text for a duration in whole seconds.
fn humanize(d: std::time::Duration) -> String {
    let mut secs = d.as_secs();
    let mut out = String::new();
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    if out.is_empty() { "0s".into() } else { out }
}

/// What [`after_open`] did, for what happens after the commit.
pub(super) struct Applied {
    /// Approved at once by the policy.
    pub decided: bool,
    /// Notification rows were written.
    pub notify: bool,
    /// The request waits with an expiry time.
    pub expires: bool,
}

/// Right after the request row is written, in the same transaction: stores the action and
/// expiry, then auto-approves or records why not, and queues the notifications.
pub(super) async fn after_open(
    conn: &mut Conn,
    target: &RequestTarget<'_>,
    kind: Kind,
    project: &Project,
    request_id: &str,
) -> Result<Applied> {
    let policy = &target.inbox.policy;
    let created_at = store::requests::created_at(&mut *conn, request_id).await?;
    let expires_at = policy
        .expires_after
        .map(|d| created_at.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)));
    store::requests::set_action_and_expiry(&mut *conn, request_id, target.action, expires_at)
        .await?;
    let external_id = store::tasks::external_id(&mut *conn, target.task_id).await?;
    let facts = RequestFacts {
        is_approval: kind == Kind::Approval,
        project: &project.name,
        task_id: target.task_id,
        task_external_id: external_id.as_deref(),
        summary: target.summary,
        action: target.action,
    };
    match policy.verdict(&facts) {
        Verdict::AutoApprove { rule } => {
            let outcome = Outcome {
                kind: OutcomeType::Approve,
                reason_code: Some("policy_auto_approve".into()),
                note: Some(format!("Approved by policy: {rule}")),
            };
            let tags = vec![format!("policy:{rule}")];
            decide_as_platform(conn, request_id, outcome, tags, false).await?;
            return Ok(Applied {
                decided: true,
                notify: false,
                expires: false,
            });
        }
        Verdict::AlwaysReview { action, rule } => {
            let message = format!(
                "Policy: {rule} matched, but action {action:?} is on always_review: a human decides."
            );
            platform_note(conn, target.task_id, request_id, message).await?;
        }
        Verdict::Review => {}
    }
    if let (Some(after), Some(_)) = (policy.expires_after, expires_at) {
        let outcome = match kind {
            Kind::Approval => format!("; it then becomes {}", outcome_name(policy.expiry_outcome)),
            Kind::Elicitation => "; it is then closed without answers".to_owned(),
        };
        let message = format!(
            "Policy: expires after {} unless decided{outcome}.",
            humanize(after)
        );
        platform_note(conn, target.task_id, request_id, message).await?;
    }
    let notifications = &target.inbox.notifications;
    enqueue(
        conn,
        notifications,
        &NewRequest {
            id: request_id,
            kind: kind.as_str(),
            project_name: &project.name,
            task_id: target.task_id,
            summary: target.summary,
            created_at,
        },
    )
    .await?;
    Ok(Applied {
        decided: false,
        notify: !notifications.targets.is_empty(),
        expires: expires_at.is_some(),
    })
}

/// After the commit: wake the notification worker and the expiry sweeper (which may be
/// asleep for longer than this request's expiry), tell live views about a decision.
pub(super) fn after_commit(inbox: &Inbox, request_id: &str, applied: &Applied) {
    if applied.notify {
        inbox.notifications.wake();
    }
    if applied.expires {
        inbox.expiry_wake.notify_one();
    }
    if applied.decided {
        inbox.announce(request_id, review::ChangeKind::Decided);
    }
}

fn outcome_name(kind: OutcomeType) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{kind:?}"))
}

/// A `NOTE` from `PLATFORM` on the request's task, in response to the request.
async fn platform_note(
    conn: &mut Conn,
    task_id: &str,
    request_id: &str,
    message: String,
) -> Result<()> {
    let task = store::tasks::by_id(&mut *conn, task_id).await?.task;
    let project = store::projects::by_id(&mut *conn, &task.project_id).await?;
    let mut event = NewEvent::new(EventType::Note, Actor::Platform, Payload::Note { message });
    event.in_response_to = Some(request_id);
    insert_event(&mut *conn, &task, &project, event, now_ms()).await?;
    Ok(())
}

/// Decides a pending approval as `PLATFORM`: an `APPROVAL_DECIDED` event, or with
/// `expired` a `TIMEOUT` event and the request's status `expired`.
async fn decide_as_platform(
    conn: &mut Conn,
    request_id: &str,
    outcome: Outcome,
    tags: Vec<String>,
    expired: bool,
) -> Result<ApprovalResult> {
    let (task_id, request_json) = pending_request(&mut *conn, request_id, Kind::Approval).await?;
    let request: ApprovalRequest = from_json(&request_json, "request")?;
    let decided_at = Timestamp::now();
    let authority = AuthoritySnapshot {
        subject: Some(PLATFORM.to_owned()),
        tags: Some(tags),
    };
    let result = ApprovalResult {
        request_id: request_id.to_owned(),
        task_id,
        outcome: outcome.clone(),
        decided_at: decided_at.clone(),
        decided_by: Some(PLATFORM.to_owned()),
        authority_snapshot: Some(authority.clone()),
        recommendation_snapshot: request.recommendation.clone(),
    };
    let event = if expired {
        NewEvent::new(
            EventType::Timeout,
            Actor::Platform,
            Payload::Timeout {
                state: "expired".into(),
                outcome: Some(outcome),
            },
        )
    } else {
        NewEvent::new(
            EventType::ApprovalDecided,
            Actor::Platform,
            Payload::ApprovalDecided {
                outcome,
                authority: Some(authority),
                recommendation_snapshot: request.recommendation,
            },
        )
    };
    settle(
        &mut *conn,
        request_id,
        &result,
        &result.task_id,
        PLATFORM,
        &decided_at,
        event,
    )
    .await?;
    if expired {
        // `settle` records a decision; an expiry is a decision whose status says it timed out.
        store::requests::mark_expired(conn, request_id).await?;
    }
    Ok(result)
}

impl Inbox {
    /// Settles every pending request whose expiry time is at or before `now` (ms since the
    /// epoch): status `expired`, a `TIMEOUT` event from `PLATFORM`; an approval gets the
    /// policy's `expiry_outcome` decided by `PLATFORM` (its result reads 200 like any
    /// decision), an elicitation an `ElicitationResult` answered by `PLATFORM` **without
    /// `fields`** (the agent tells an expired form from an answered one by that). Returns how
    /// many it settled. Each request is settled in a transaction of its own; one decided
    /// meanwhile by a human is left as the human decided it.
    pub async fn expire_overdue(&self, now: i64) -> Result<usize> {
        let overdue = {
            let mut conn = store::read(self.store()).await?;
            store::requests::overdue(&mut conn, now, SWEEP_BATCH).await?
        };
        let mut settled = 0;
        for (id, kind) in &overdue {
            let mut tx = self.begin().await?;
            let done = self.expire(&mut tx, id, kind).await;
            match done {
                Ok(()) => {
                    tx.commit().await?;
                    self.announce(id, review::ChangeKind::Decided);
                    settled += 1;
                }
                // Decided between the query and this transaction: nothing to do.
                Err(InboxError::AlreadyDecided) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(settled)
    }

    /// Settles one pending request as expired (see [`Inbox::expire_overdue`]).
    async fn expire(&self, conn: &mut Conn, id: &str, kind: &str) -> Result<()> {
        if kind == Kind::Approval.as_str() {
            let outcome = Outcome {
                kind: self.policy.expiry_outcome,
                reason_code: Some("expired".into()),
                note: Some("No decision before the request expired.".into()),
            };
            let tags = vec!["policy:expires_after".to_owned()];
            decide_as_platform(conn, id, outcome, tags, true)
                .await
                .map(|_| ())
        } else {
            expire_elicitation(conn, id).await
        }
    }

    /// Settles the request as expired when it is pending and overdue, in the caller's
    /// transaction; `true` when it did (the caller commits and announces it). What would
    /// decide, answer, withdraw or read a request calls this first, so an overdue request
    /// is expired even before the sweeper comes by, and no late human beats the expiry.
    /// `kind` limits it to requests of that kind (others are left for the caller to refuse).
    pub(super) async fn expire_if_overdue(
        &self,
        conn: &mut Conn,
        request_id: &str,
        kind: Option<Kind>,
    ) -> Result<bool> {
        let overdue =
            store::requests::overdue_kind(&mut *conn, request_id, now_ms(), kind.map(Kind::as_str))
                .await?;
        let Some(kind) = overdue else {
            return Ok(false);
        };
        self.expire(conn, request_id, &kind).await?;
        Ok(true)
    }

    /// Resolves when a request with an expiry time was created since the last call (at
    /// once if one was): the sweeper then looks again when the next expiry is due.
    pub async fn expiry_woken(&self) {
        self.expiry_wake.notified().await;
    }

    /// When the next pending request expires (ms since the epoch), if any does.
    pub async fn next_expiry(&self) -> Result<Option<i64>> {
        let mut conn = store::read(self.store()).await?;
        store::requests::next_expiry(&mut conn).await
    }
}

async fn expire_elicitation(conn: &mut Conn, request_id: &str) -> Result<()> {
    let (task_id, _) = pending_request(&mut *conn, request_id, Kind::Elicitation).await?;
    let answered_at = Timestamp::now();
    let result = ElicitationResult {
        request_id: request_id.to_owned(),
        task_id,
        answered_at: answered_at.clone(),
        answered_by: Some(PLATFORM.to_owned()),
        fields: None,
    };
    let event = NewEvent::new(
        EventType::Timeout,
        Actor::Platform,
        Payload::Timeout {
            state: "expired".into(),
            outcome: None,
        },
    );
    settle(
        &mut *conn,
        request_id,
        &result,
        &result.task_id,
        PLATFORM,
        &answered_at,
        event,
    )
    .await?;
    store::requests::mark_expired(conn, request_id).await
}

#[cfg(test)]
mod tests {
    use super::humanize;
    use std::time::Duration;

    #[test]
    fn durations_read_back_as_configured() {
        assert_eq!(humanize(Duration::from_secs(5400)), "1h30m");
        assert_eq!(humanize(Duration::from_secs(86_400)), "1d");
        assert_eq!(humanize(Duration::from_secs(61)), "1m1s");
        assert_eq!(humanize(Duration::ZERO), "0s");
    }
}
