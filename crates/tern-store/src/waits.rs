//! Durable waits (`waits` table, migration 0008): an agent asked a human and ended its
//! turn; the decision will resume its session.
//!
//! # The life of a wait
//!
//! 1. [`Store::create_wait`] records it `pending` under an idempotency key derived from the
//!    session and the tool call, before the inbox request exists: a retried tool call, or a
//!    restart between the two steps, finds the same wait and re-creates the request with the
//!    same key (the inbox answers the original). [`Store::set_wait_request`] then stores the
//!    inbox's request id.
//! 2. [`Store::wait_ready`] stores the decision when it is known (`pending` → `ready`); done
//!    at most once per wait, whoever notices the decision first.
//! 3. [`Store::deliver_wait`] appends the decision message to the session **and** marks the
//!    wait `delivered`, in one transaction guarded by `status = 'ready'`: the message is
//!    appended exactly once, whatever crashes or races.
//! 4. [`Store::wait_answered`] records that a turn ran on it. After a crash,
//!    [`Store::delivered_unanswered`] lists the decisions whose turn must still run.
//! 5. [`Store::cancel_waits`] ends a session's open waits (deleted or reset session).

use serde::Serialize;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use crate::{Message, NewMessage, Result, Store, StoreError, insert_messages, now_ms};

/// What a wait waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitKind {
    Approval,
    Elicitation,
    /// A dangerous `terminal` command waiting for approval.
    Command,
}

impl WaitKind {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitKind::Approval => "approval",
            WaitKind::Elicitation => "elicitation",
            WaitKind::Command => "command",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "approval" => WaitKind::Approval,
            "elicitation" => WaitKind::Elicitation,
            "command" => WaitKind::Command,
            other => return Err(StoreError::Corrupt(format!("unknown wait kind {other:?}"))),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitStatus {
    Pending,
    Ready,
    Delivered,
    Cancelled,
}

impl WaitStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitStatus::Pending => "pending",
            WaitStatus::Ready => "ready",
            WaitStatus::Delivered => "delivered",
            WaitStatus::Cancelled => "cancelled",
        }
    }

    fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "pending" => WaitStatus::Pending,
            "ready" => WaitStatus::Ready,
            "delivered" => WaitStatus::Delivered,
            "cancelled" => WaitStatus::Cancelled,
            other => {
                return Err(StoreError::Corrupt(format!(
                    "unknown wait status {other:?}"
                )));
            }
        })
    }
}

/// One durable wait. Times are milliseconds since the Unix epoch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Wait {
    pub id: String,
    pub session_id: String,
    pub idem_key: String,
    pub tool_call_id: Option<String>,
    pub kind: WaitKind,
    pub request_id: Option<String>,
    /// What was asked (JSON text).
    pub request: String,
    pub status: WaitStatus,
    /// The decision (JSON text) once ready.
    pub result: Option<String>,
    pub decided_by: Option<String>,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub message_id: Option<i64>,
    pub created_at: i64,
    pub ready_at: Option<i64>,
    pub delivered_at: Option<i64>,
    pub answered_at: Option<i64>,
    pub cancelled_at: Option<i64>,
}

/// A wait to record.
#[derive(Debug, Clone)]
pub struct NewWait<'a> {
    pub session_id: &'a str,
    pub idem_key: &'a str,
    pub tool_call_id: Option<&'a str>,
    pub kind: WaitKind,
    /// What was asked (JSON text).
    pub request: &'a str,
}

macro_rules! wait_cols {
    () => {
        "id, session_id, idem_key, tool_call_id, kind, request_id, request, status, result, \
         decided_by, attempts, last_error, message_id, created_at, ready_at, delivered_at, \
         answered_at, cancelled_at"
    };
}

fn wait_from_row(row: &SqliteRow) -> Result<Wait> {
    Ok(Wait {
        id: row.try_get("id")?,
        session_id: row.try_get("session_id")?,
        idem_key: row.try_get("idem_key")?,
        tool_call_id: row.try_get("tool_call_id")?,
        kind: WaitKind::parse(row.try_get("kind")?)?,
        request_id: row.try_get("request_id")?,
        request: row.try_get("request")?,
        status: WaitStatus::parse(row.try_get("status")?)?,
        result: row.try_get("result")?,
        decided_by: row.try_get("decided_by")?,
        attempts: row.try_get("attempts")?,
        last_error: row.try_get("last_error")?,
        message_id: row.try_get("message_id")?,
        created_at: row.try_get("created_at")?,
        ready_at: row.try_get("ready_at")?,
        delivered_at: row.try_get("delivered_at")?,
        answered_at: row.try_get("answered_at")?,
        cancelled_at: row.try_get("cancelled_at")?,
    })
}

impl Store {
    /// Records a pending wait, or returns the one recorded earlier under the same
    /// `idem_key` (a retried tool call). The flag says whether it is new.
    pub async fn create_wait(&self, new: &NewWait<'_>) -> Result<(Wait, bool)> {
        let id = uuid::Uuid::now_v7().simple().to_string();
        let inserted = sqlx::query(
            "INSERT INTO waits (id, session_id, idem_key, tool_call_id, kind, request, status, \
             created_at) VALUES (?, ?, ?, ?, ?, ?, 'pending', ?) \
             ON CONFLICT (idem_key) DO NOTHING",
        )
        .bind(&id)
        .bind(new.session_id)
        .bind(new.idem_key)
        .bind(new.tool_call_id)
        .bind(new.kind.as_str())
        .bind(new.request)
        .bind(now_ms())
        .execute(&self.pool)
        .await?
        .rows_affected()
            == 1;
        let row = sqlx::query(concat!(
            "SELECT ",
            wait_cols!(),
            " FROM waits WHERE idem_key = ?"
        ))
        .bind(new.idem_key)
        .fetch_one(&self.pool)
        .await?;
        Ok((wait_from_row(&row)?, inserted))
    }

    /// Stores the inbox's request id of a wait (idempotent for the same id).
    pub async fn set_wait_request(&self, wait_id: &str, request_id: &str) -> Result<()> {
        sqlx::query("UPDATE waits SET request_id = ? WHERE id = ? AND request_id IS NULL")
            .bind(request_id)
            .bind(wait_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn wait(&self, id: &str) -> Result<Option<Wait>> {
        let row = sqlx::query(concat!("SELECT ", wait_cols!(), " FROM waits WHERE id = ?"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(wait_from_row).transpose()
    }

    pub async fn wait_by_request(&self, request_id: &str) -> Result<Option<Wait>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            wait_cols!(),
            " FROM waits WHERE request_id = ?"
        ))
        .bind(request_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(wait_from_row).transpose()
    }

    /// Stores the decision of a pending wait: `pending` → `ready`. `None` when the wait was
    /// not pending (already ready, delivered or cancelled): someone else got there first.
    pub async fn wait_ready(
        &self,
        wait_id: &str,
        result: &str,
        decided_by: Option<&str>,
    ) -> Result<Option<Wait>> {
        let updated = sqlx::query(
            "UPDATE waits SET status = 'ready', result = ?, decided_by = ?, ready_at = ? \
             WHERE id = ? AND status = 'pending'",
        )
        .bind(result)
        .bind(decided_by)
        .bind(now_ms())
        .bind(wait_id)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if updated == 0 {
            return Ok(None);
        }
        self.wait(wait_id).await
    }

    /// Appends `message` to the wait's session and marks the wait delivered, in one
    /// transaction, only if the wait is `ready`. `None`: it was not (delivered before, or
    /// cancelled) and nothing was appended — the exactly-once guard.
    pub async fn deliver_wait(
        &self,
        wait_id: &str,
        message: &NewMessage,
    ) -> Result<Option<Message>> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let now = now_ms();
        let row = sqlx::query("SELECT session_id FROM waits WHERE id = ? AND status = 'ready'")
            .bind(wait_id)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let session_id: String = row.try_get("session_id")?;
        let mut appended =
            insert_messages(&mut tx, &session_id, std::slice::from_ref(message)).await?;
        let message = appended
            .pop()
            .ok_or_else(|| StoreError::Corrupt("append returned no message".into()))?;
        let updated = sqlx::query(
            "UPDATE waits SET status = 'delivered', delivered_at = ?, message_id = ? \
             WHERE id = ? AND status = 'ready'",
        )
        .bind(now)
        .bind(message.id)
        .bind(wait_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if updated != 1 {
            // Cannot happen under the write lock taken by BEGIN IMMEDIATE; refuse rather
            // than append twice.
            return Err(StoreError::Corrupt(format!(
                "wait {wait_id} changed while being delivered"
            )));
        }
        tx.commit().await?;
        Ok(Some(message))
    }

    /// Records that a turn ran on a delivered wait's decision.
    pub async fn wait_answered(&self, wait_id: &str) -> Result<()> {
        sqlx::query("UPDATE waits SET answered_at = ? WHERE id = ? AND answered_at IS NULL")
            .bind(now_ms())
            .bind(wait_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Counts an attempt (a failed poll or delivery) with its error.
    pub async fn wait_attempt_failed(&self, wait_id: &str, error: &str) -> Result<()> {
        sqlx::query("UPDATE waits SET attempts = attempts + 1, last_error = ? WHERE id = ?")
            .bind(error)
            .bind(wait_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Waits of one session, oldest first; with `open_only`, just pending and ready ones.
    pub async fn session_waits(&self, session_id: &str, open_only: bool) -> Result<Vec<Wait>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            wait_cols!(),
            " FROM waits WHERE session_id = ? \
             AND (? = 0 OR status IN ('pending', 'ready')) ORDER BY created_at, id"
        ))
        .bind(session_id)
        .bind(open_only)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(wait_from_row).collect()
    }

    /// Whether the session has a pending or ready wait (it is `waiting` between turns).
    pub async fn has_open_waits(&self, session_id: &str) -> Result<bool> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM waits WHERE session_id = ? AND status IN ('pending', 'ready')",
        )
        .bind(session_id)
        .fetch_one(&self.pool)
        .await?;
        Ok(n > 0)
    }

    /// Every wait in `status`, oldest first (followers read `pending`, the resumer `ready`).
    pub async fn waits_in(&self, status: WaitStatus) -> Result<Vec<Wait>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            wait_cols!(),
            " FROM waits WHERE status = ? ORDER BY created_at, id"
        ))
        .bind(status.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(wait_from_row).collect()
    }

    /// Delivered decisions no turn has answered yet (a crash came between), oldest first.
    pub async fn delivered_unanswered(&self) -> Result<Vec<Wait>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            wait_cols!(),
            " FROM waits WHERE status = 'delivered' AND answered_at IS NULL \
             ORDER BY delivered_at, id"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(wait_from_row).collect()
    }

    /// Cancels one pending or ready wait (its request was withdrawn by someone else); the
    /// wait as cancelled, or `None` when it was not open.
    pub async fn cancel_wait(&self, wait_id: &str) -> Result<Option<Wait>> {
        let updated = sqlx::query(
            "UPDATE waits SET status = 'cancelled', cancelled_at = ? \
             WHERE id = ? AND status IN ('pending', 'ready')",
        )
        .bind(now_ms())
        .bind(wait_id)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if updated == 0 {
            return Ok(None);
        }
        self.wait(wait_id).await
    }

    /// Moves a session's open waits to another session (a reset that keeps its waits: the
    /// decisions resume the successor). Returns how many moved.
    pub async fn move_open_waits(&self, from: &str, to: &str) -> Result<u64> {
        let r = sqlx::query(
            "UPDATE waits SET session_id = ? WHERE session_id = ? AND status IN ('pending', 'ready')",
        )
        .bind(to)
        .bind(from)
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected())
    }

    /// Cancels a session's pending and ready waits; returns them (their requests are to be
    /// withdrawn).
    pub async fn cancel_waits(&self, session_id: &str) -> Result<Vec<Wait>> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let rows = sqlx::query(concat!(
            "SELECT ",
            wait_cols!(),
            " FROM waits WHERE session_id = ? AND status IN ('pending', 'ready')"
        ))
        .bind(session_id)
        .fetch_all(&mut *tx)
        .await?;
        let now = now_ms();
        sqlx::query(
            "UPDATE waits SET status = 'cancelled', cancelled_at = ? \
             WHERE session_id = ? AND status IN ('pending', 'ready')",
        )
        .bind(now)
        .bind(session_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut w = wait_from_row(row)?;
            w.status = WaitStatus::Cancelled;
            w.cancelled_at = Some(now);
            out.push(w);
        }
        Ok(out)
    }
}
