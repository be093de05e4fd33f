//! The decisions feed: tern's extension beyond Pump Up, so that an agent gateway behind NAT
//! follows every decision on its requests over one outbound connection instead of polling
//! each request's result.
//!
//! # The flow at a glance
//!
//! 1. An agent key asks [`Inbox::decisions`] for its requests settled after a cursor (from
//!    the start without one): decided, answered, expired or withdrawn, oldest first, each
//!    with its result (the `ApprovalResult`, `ElicitationResult` or `Withdrawal`).
//! 2. The answer's `nextCursor` goes into the next ask. It encodes the `seq` of the event
//!    that settled the request (the same encoding as [`Inbox::task_events`]' cursors), so it
//!    lives in the database and survives restarts of the inbox and of the agent.
//! 3. [`Inbox::wait_decisions`] is the long-poll: it answers at once when something is
//!    there, else it sleeps on [`Inbox::changes`] until a request leaves the pending list (and
//!    looks again) or the time is up (an empty page).
//!
//! # Why a page never skips a decision
//!
//! A request is settled in one transaction that updates it and appends the settling event;
//! SQLite has one writer at a time, so events become visible in `seq` order. A page is read
//! in one read transaction: the decisions after the cursor, and — when the page is not
//! full — the highest `seq` of that snapshot, which becomes `nextCursor`. Every event up to
//! it was examined, so the cursor may move past other keys' decisions (a quiet key does not
//! rescan a busy inbox) but never past one of the caller's.
//!
//! # Which event settles a request
//!
//! Every event `inResponseTo` a request, except the platform's notes: `APPROVAL_DECIDED`,
//! `ELICITATION_PROVIDED` and `TIMEOUT` (a decision, an answer, an expiry — also the
//! platform's auto-approval) and the agent's `NOTE` of a withdrawal. The platform's notes
//! (a policy matched, an expiry was set) are written while the request is still pending.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;

use super::review::{ChangeKind, RequestKind, RequestStatus};
use super::{Inbox, Result, decode_cursor, encode_cursor};
use crate::store::{self, from_json, wire_enum};

/// The most decisions one page holds, and the default.
pub const MAX_DECISIONS_PAGE: u32 = 100;
/// The longest a long-poll waits.
pub const MAX_DECISIONS_WAIT: Duration = Duration::from_secs(60);

/// A settled request, as the feed reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub request_id: String,
    pub kind: RequestKind,
    /// `decided`, `expired` or `withdrawn` (never `pending`).
    pub status: RequestStatus,
    /// The `ApprovalResult` / `ElicitationResult` (also of an expired request) or the
    /// `Withdrawal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

/// A page of the feed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decisions {
    pub items: Vec<Decision>,
    /// Pass as `after` next time; always present.
    pub next_cursor: String,
}

impl Inbox {
    /// `owner`'s requests settled after `after` (a `nextCursor` of this feed; from the
    /// start without one), oldest first; `limit` defaults to and is clamped to
    /// 1..=[`MAX_DECISIONS_PAGE`]. Answers at once.
    pub async fn decisions(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Result<Decisions> {
        let after = after.map(decode_cursor).transpose()?.unwrap_or(0);
        let limit = limit
            .unwrap_or(MAX_DECISIONS_PAGE)
            .clamp(1, MAX_DECISIONS_PAGE);
        // One read transaction: the page and the head come from the same snapshot.
        let mut tx = store::snapshot(self.store()).await?;
        let rows = store::requests::settled_after(&mut tx, owner, after, limit).await?;
        let mut items = Vec::with_capacity(rows.len());
        let mut last = after;
        for row in rows {
            last = row.seq;
            items.push(Decision {
                request_id: row.id,
                kind: wire_enum(row.kind, "request kind")?,
                status: wire_enum(row.status, "request status")?,
                result: row.result.map(|r| from_json(&r, "result")).transpose()?,
            });
        }
        if items.len() < limit as usize {
            // Everything up to the snapshot's last event was looked at.
            let head = store::events::head(&mut tx).await?;
            last = last.max(head.unwrap_or(0));
        }
        tx.commit().await?;
        Ok(Decisions {
            items,
            next_cursor: encode_cursor(last),
        })
    }

    /// [`Inbox::decisions`] as a long-poll: answers as soon as the page has items, else
    /// waits — at most `wait` (clamped to [`MAX_DECISIONS_WAIT`]), and only until `closing`
    /// resolves (the server shutting down) — for a request to be settled, then looks again.
    /// A page with no items after the wait carries the cursor to ask with next.
    pub async fn wait_decisions(
        &self,
        owner: &str,
        after: Option<&str>,
        limit: Option<u32>,
        wait: Duration,
        closing: impl std::future::Future<Output = ()>,
    ) -> Result<Decisions> {
        let mut closing = std::pin::pin!(closing);
        let deadline = tokio::time::Instant::now() + wait.min(MAX_DECISIONS_WAIT);
        // Subscribed before the first read: a decision committed after the read is
        // announced to this receiver, so it cannot fall between the read and the wait.
        let mut changes = self.changes();
        let mut page = self.decisions(owner, after, limit).await?;
        loop {
            if !page.items.is_empty() {
                return Ok(page);
            }
            let woken = tokio::select! {
                _ = &mut closing => return Ok(page),
                _ = tokio::time::sleep_until(deadline) => return Ok(page),
                change = changes.recv() => change,
            };
            match woken {
                Ok(change) if change.what == ChangeKind::Created => continue,
                // A settled request (maybe another key's: the read tells), or missed
                // announcements: look again.
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                // The sender lives as long as the inbox; nothing more will come.
                Err(RecvError::Closed) => return Ok(page),
            }
            page = self
                .decisions(owner, Some(&page.next_cursor), limit)
                .await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use tern_store::Store;

    use super::*;
    use crate::model::{
        AddNote, ApprovalRequest, CreateApproval, CreateElicitation, CreateTask, ElicitationRequest,
    };
    use crate::outcome::{Outcome, OutcomeType};
    use crate::service::DEFAULT_PROJECT;

    const AGENT: &str = "agent-a";
    const OTHER: &str = "agent-b";

    async fn inbox_with(
        policy: Option<tern_config::InboxPolicyConfig>,
    ) -> (tempfile::TempDir, Inbox) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("tern.db")).await.unwrap();
        let mut inbox = Inbox::new(store);
        if let Some(p) = policy {
            inbox = inbox.with_policy(crate::policy::Policy::from_config(&p).unwrap());
        }
        inbox.ensure_default_project().await.unwrap();
        (dir, inbox)
    }

    async fn task(inbox: &Inbox, owner: &str) -> String {
        let body = CreateTask {
            name: "t".into(),
            project_name: DEFAULT_PROJECT.into(),
            external_id: None,
            metadata_patch: None,
        };
        inbox.create_task(owner, body, None).await.unwrap().id
    }

    async fn approval(inbox: &Inbox, owner: &str, task_id: &str, action: &str) -> String {
        let body = CreateApproval {
            project_name: DEFAULT_PROJECT.into(),
            task_id: task_id.into(),
            request: ApprovalRequest {
                summary: "Deploy?".into(),
                key_value_context: Some([("action".to_owned(), action.to_owned())].into()),
                recommendation: None,
                attachments: None,
            },
            external_trace_id: None,
        };
        inbox
            .create_approval(owner, body, None)
            .await
            .unwrap()
            .event_id
    }

    async fn elicitation(inbox: &Inbox, owner: &str, task_id: &str) -> String {
        let request: ElicitationRequest = serde_json::from_value(json!({
            "summary": "Which branch?",
            "fields": [{"type": "Text", "id": "branch", "label": "Branch", "required": true}],
        }))
        .unwrap();
        let body = CreateElicitation {
            project_name: DEFAULT_PROJECT.into(),
            task_id: task_id.into(),
            request,
            external_trace_id: None,
        };
        inbox
            .create_elicitation(owner, body, None)
            .await
            .unwrap()
            .event_id
    }

    fn approve() -> Outcome {
        serde_json::from_value(json!({"type": "APPROVE"})).unwrap()
    }

    fn ids(page: &Decisions) -> Vec<&str> {
        page.items.iter().map(|d| d.request_id.as_str()).collect()
    }

    #[tokio::test]
    async fn every_way_of_settling_appears_once_in_order_and_only_for_its_owner() {
        let policy = tern_config::InboxPolicyConfig {
            auto_approve: vec![tern_config::AutoApproveConfig {
                project: DEFAULT_PROJECT.into(),
                action: Some("read_logs".into()),
                summary: None,
                task: None,
            }],
            always_review: vec!["deploy".into()],
            ..Default::default()
        };
        let (_d, inbox) = inbox_with(Some(policy)).await;
        let mine = task(&inbox, AGENT).await;
        let theirs = task(&inbox, OTHER).await;

        let empty = inbox.decisions(AGENT, None, None).await.unwrap();
        assert!(empty.items.is_empty());

        let decided = approval(&inbox, AGENT, &mine, "deploy").await;
        let answered = elicitation(&inbox, AGENT, &mine).await;
        let withdrawn = approval(&inbox, AGENT, &mine, "deploy").await;
        let pending = approval(&inbox, AGENT, &mine, "deploy").await;
        let other = approval(&inbox, OTHER, &theirs, "deploy").await;
        // Auto-approved at creation, after a platform note in response to it.
        let auto = approval(&inbox, AGENT, &mine, "read_logs").await;

        inbox
            .decide_approval(&decided, approve(), "ann")
            .await
            .unwrap();
        let answers = json!({"branch": "main"});
        inbox
            .answer_elicitation(&answered, answers.as_object().unwrap(), "bob")
            .await
            .unwrap();
        inbox
            .withdraw_request(AGENT, &withdrawn, Some("not needed"))
            .await
            .unwrap();
        inbox
            .decide_approval(&other, approve(), "ann")
            .await
            .unwrap();
        inbox
            .add_note(
                AGENT,
                AddNote {
                    project_name: DEFAULT_PROJECT.into(),
                    task_id: mine.clone(),
                    message: "still here".into(),
                    external_trace_id: None,
                },
                None,
            )
            .await
            .unwrap();

        let page = inbox.decisions(AGENT, None, None).await.unwrap();
        assert_eq!(ids(&page), [&auto, &decided, &answered, &withdrawn]);
        assert!(!ids(&page).contains(&pending.as_str()));
        let auto_item = &page.items[0];
        assert_eq!(auto_item.status, RequestStatus::Decided);
        assert_eq!(
            auto_item.result.as_ref().unwrap()["outcome"]["type"],
            "APPROVE"
        );
        assert_eq!(page.items[1].kind, RequestKind::Approval);
        assert_eq!(page.items[1].result.as_ref().unwrap()["decidedBy"], "ann");
        assert_eq!(page.items[2].kind, RequestKind::Elicitation);
        assert_eq!(
            page.items[2].result.as_ref().unwrap()["fields"]["branch"],
            "main"
        );
        assert_eq!(page.items[3].status, RequestStatus::Withdrawn);
        assert_eq!(
            page.items[3].result.as_ref().unwrap()["reason"],
            "not needed"
        );

        let theirs_page = inbox.decisions(OTHER, None, None).await.unwrap();
        assert_eq!(ids(&theirs_page), [&other]);

        // Resuming from the cursor: nothing new, then exactly the next settlement.
        let again = inbox
            .decisions(AGENT, Some(&page.next_cursor), None)
            .await
            .unwrap();
        assert!(again.items.is_empty());
        inbox
            .decide_approval(&pending, approve(), "ann")
            .await
            .unwrap();
        let next = inbox
            .decisions(AGENT, Some(&again.next_cursor), None)
            .await
            .unwrap();
        assert_eq!(ids(&next), [&pending]);
    }

    #[tokio::test]
    async fn an_expired_request_appears_once() {
        let policy = tern_config::InboxPolicyConfig {
            expires_after: Some("1s".into()),
            ..Default::default()
        };
        let (_d, inbox) = inbox_with(Some(policy)).await;
        let mine = task(&inbox, AGENT).await;
        let req = approval(&inbox, AGENT, &mine, "x").await;
        // Reading the result after the expiry settles it (no sweeper in this test).
        loop {
            if inbox.approval_result(AGENT, &req).await.unwrap().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let page = inbox.decisions(AGENT, None, None).await.unwrap();
        assert_eq!(ids(&page), [&req]);
        assert_eq!(page.items[0].status, RequestStatus::Expired);
        let outcome = &page.items[0].result.as_ref().unwrap()["outcome"]["type"];
        assert_eq!(outcome, &json!(OutcomeType::Reject));
    }

    #[tokio::test]
    async fn pages_are_bounded_and_continue_where_they_stopped() {
        let (_d, inbox) = inbox_with(None).await;
        let mine = task(&inbox, AGENT).await;
        let mut all = Vec::new();
        for _ in 0..5 {
            let req = approval(&inbox, AGENT, &mine, "x").await;
            inbox.decide_approval(&req, approve(), "ann").await.unwrap();
            all.push(req);
        }
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = inbox
                .decisions(AGENT, cursor.as_deref(), Some(2))
                .await
                .unwrap();
            assert!(page.items.len() <= 2);
            if page.items.is_empty() {
                break;
            }
            seen.extend(page.items.iter().map(|d| d.request_id.clone()));
            cursor = Some(page.next_cursor);
        }
        assert_eq!(seen, all);
        assert!(matches!(
            inbox.decisions(AGENT, Some("zz"), None).await,
            Err(crate::InboxError::Invalid {
                code: "invalid_cursor",
                ..
            })
        ));
    }

    #[tokio::test]
    async fn the_long_poll_answers_when_a_decision_lands_and_ignores_other_keys() {
        let (_d, inbox) = inbox_with(None).await;
        let mine = task(&inbox, AGENT).await;
        let theirs = task(&inbox, OTHER).await;
        let req = approval(&inbox, AGENT, &mine, "x").await;
        let other = approval(&inbox, OTHER, &theirs, "x").await;
        let start = inbox.decisions(AGENT, None, None).await.unwrap();
        assert!(start.items.is_empty());

        let polling = Arc::new(inbox.clone());
        let cursor = start.next_cursor.clone();
        let poll = tokio::spawn(async move {
            polling
                .wait_decisions(
                    AGENT,
                    Some(&cursor),
                    None,
                    MAX_DECISIONS_WAIT,
                    std::future::pending(),
                )
                .await
        });
        // Until the poll listens (it then reads, finds nothing, and sleeps).
        while inbox.changes.receiver_count() == 0 {
            tokio::task::yield_now().await;
        }
        // Another key's decision wakes the poll, which looks and keeps waiting.
        inbox
            .decide_approval(&other, approve(), "ann")
            .await
            .unwrap();
        inbox.decide_approval(&req, approve(), "ann").await.unwrap();
        let page = poll.await.unwrap().unwrap();
        assert_eq!(ids(&page), [&req]);

        // Nothing to report: `closing` ends the wait with an empty page.
        let idle = inbox
            .wait_decisions(
                AGENT,
                Some(&page.next_cursor),
                None,
                MAX_DECISIONS_WAIT,
                std::future::ready(()),
            )
            .await
            .unwrap();
        assert!(idle.items.is_empty());
        assert_eq!(idle.next_cursor, page.next_cursor);
    }
}
