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
//!    appended exactly once, whatever crashes or races. A transcript a crash left with tool
//!    calls unanswered (the gateway died inside the turn that asked) is repaired first, in
//!    the same transaction, so the decision never lands between a tool call and its result.
//! 4. [`Store::wait_answered`] records that a turn ran on it. After a crash,
//!    [`Store::delivered_unanswered`] lists the decisions whose turn must still run.
//! 5. [`Store::cancel_wait`] / [`Store::cancel_waits`] end open waits (withdrawn request,
//!    deleted or reset session); the session's status follows ([`Store::refresh_waiting`]):
//!    `waiting` while a wait is open, `idle` once none is.
//!
//! Waits of kind `process` (migration 0011) have no inbox request: tern-procs arms one when a
//! process started with `notify_on_complete` starts and marks it ready with the exit status
//! when it exits; the same delivery path resumes the session exactly once. They do not make
//! the session `waiting`.
//!
//! A wait keeps the session that asked in its `idem_key` (`tern-wait:<session>:<call>`)
//! even when a reset moves it to the successor ([`Store::move_open_waits`]):
//! [`Wait::origin_session`] is what the inbox's idempotency keys are derived from.

use serde::Serialize;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use tern_llm::{Role, ToolCall};

use crate::{Message, NewMessage, Result, Store, StoreError, insert_messages, now_ms};

/// The marker a turn cut short leaves in the transcript (the same text as
/// `tern_agent::INTERRUPTED_MARKER`; the store cannot depend on the agent).
pub const INTERRUPTED_MARKER: &str = "[interrupted]";

/// The result an interrupted tool call gets (the same as the agent's repair gives).
const INTERRUPTED_RESULT: &str =
    r#"{"error":"interrupted: the turn was stopped before this tool call finished"}"#;

/// The session's status computed from its open waits: `waiting` while one is pending or
/// ready, else `idle`. For `UPDATE sessions` statements (refers to `sessions.id`).
///
/// Waits of kind `process` do not count: the session is not waiting for a human (the user
/// may chat on while a background process runs); their notification resumes it all the same.
macro_rules! status_from_waits {
    () => {
        "CASE WHEN EXISTS (SELECT 1 FROM waits w WHERE w.session_id = sessions.id \
         AND w.status IN ('pending', 'ready') AND w.kind <> 'process') \
         THEN 'waiting' ELSE 'idle' END"
    };
}
pub(crate) use status_from_waits;

/// What a wait waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitKind {
    Approval,
    Elicitation,
    /// A dangerous `terminal` command waiting for approval.
    Command,
    /// A background process started with `notify_on_complete` (tern-procs): ready when it
    /// exits. Does not make its session `waiting` (see `status_from_waits`).
    Process,
}

crate::stored_as_text!(WaitKind, "wait kind", {
    Approval => "approval",
    Elicitation => "elicitation",
    Command => "command",
    Process => "process",
});

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WaitStatus {
    Pending,
    Ready,
    Delivered,
    Cancelled,
}

crate::stored_as_text!(WaitStatus, "wait status", {
    Pending => "pending",
    Ready => "ready",
    Delivered => "delivered",
    Cancelled => "cancelled",
});

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

impl Wait {
    /// The session that asked: the one in `idem_key` (`tern-wait:<session>:<call>`), which
    /// a reset that keeps the waits does not change; `session_id` when the key has another
    /// form. The inbox's idempotency keys (task, request, attachments) derive from it, so a
    /// request sent again after the move is the same request.
    pub fn origin_session(&self) -> &str {
        self.idem_key
            .strip_prefix("tern-wait:")
            .and_then(|rest| rest.split_once(':'))
            .map(|(session, _call)| session)
            .filter(|s| !s.is_empty())
            .unwrap_or(&self.session_id)
    }

    /// Where the message whose tool call asked sits in the origin session's transcript, from
    /// `idem_key` (`tern-wait:<session>:<call>@<seq>`); `None` for a key of another form,
    /// e.g. one recorded before keys carried it.
    pub fn call_seq(&self) -> Option<i64> {
        call_seq_of(&self.idem_key)
    }
}

/// [`Wait::call_seq`] of an idempotency key.
fn call_seq_of(idem_key: &str) -> Option<i64> {
    let (_session, call) = idem_key.strip_prefix("tern-wait:")?.split_once(':')?;
    let (_id, seq) = call.rsplit_once('@')?;
    seq.parse().ok().filter(|s: &i64| *s > 0)
}

/// Whether the wait that asked through call `call` of the message at `seq` is this one: the
/// same call id and, when the wait knows it, the same message (a model may reuse call ids
/// across turns).
fn asked_by(tool_call_id: Option<&str>, wait_seq: Option<i64>, call: &str, seq: i64) -> bool {
    tool_call_id == Some(call) && wait_seq.is_none_or(|s| s == seq)
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

    /// The wait recorded under `idem_key` (e.g. a process's `tern-proc:<id>:exit`).
    pub async fn wait_by_key(&self, idem_key: &str) -> Result<Option<Wait>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            wait_cols!(),
            " FROM waits WHERE idem_key = ?"
        ))
        .bind(idem_key)
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
    /// cancelled) and nothing was appended — the exactly-once guard. The message returned
    /// says which session it went to (the wait's current one: a reset may have moved it).
    ///
    /// When the session's last assistant message has tool calls without results (the
    /// gateway died inside a turn, e.g. after the inbox request was created but before the
    /// tool's result was stored), they get results first — this wait's own call one saying
    /// the request was created and is decided, the others the usual interrupted result —
    /// then the `[interrupted]` marker, as the agent's repair would: the decision then
    /// follows a valid transcript instead of being cut off from it by a later repair.
    pub async fn deliver_wait(
        &self,
        wait_id: &str,
        message: &NewMessage,
    ) -> Result<Option<Message>> {
        let mut tx = self.begin_write().await?;
        let now = now_ms();
        let row = sqlx::query(
            "SELECT session_id, idem_key, tool_call_id, kind, request_id FROM waits \
             WHERE id = ? AND status = 'ready'",
        )
        .bind(wait_id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let session_id: String = row.try_get("session_id")?;
        let own_call: Option<String> = row.try_get("tool_call_id")?;
        let own_seq = call_seq_of(row.try_get("idem_key")?);
        let kind = WaitKind::parse(row.try_get("kind")?)?;
        let request_id: Option<String> = row.try_get("request_id")?;
        let mut msgs = open_call_results(&mut tx, &session_id, |seq, call| {
            asked_by(own_call.as_deref(), own_seq, call, seq)
                .then(|| decided_result(kind, request_id.as_deref()))
        })
        .await?;
        if !msgs.is_empty() {
            tracing::warn!(
                session = %session_id,
                wait = wait_id,
                open = msgs.len(),
                "repairing a transcript left mid-turn before delivering a decision"
            );
            msgs.push(NewMessage::new(Role::Assistant, INTERRUPTED_MARKER));
        }
        msgs.push(message.clone());
        let mut appended = insert_messages(&mut tx, &session_id, &msgs).await?;
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
            // Cannot happen under the write lock taken by `Store::begin_write`; refuse rather
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

    /// Whether the session has a pending or ready wait that makes it `waiting` between
    /// turns: any kind but `process` (a background process is not a human to wait for).
    pub async fn has_open_waits(&self, session_id: &str) -> Result<bool> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM waits WHERE session_id = ? AND status IN ('pending', 'ready') \
             AND kind <> 'process'",
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
        let wait = self.wait(wait_id).await?;
        if let Some(w) = &wait {
            // Its last open wait gone, the session no longer waits.
            self.refresh_waiting(&w.session_id).await?;
        }
        Ok(wait)
    }

    /// Sets a session `waiting` when it has an open (pending or ready) wait, else `idle` —
    /// only when it is one of the two: a running turn sets the status itself when it ends,
    /// and an ended session stays ended. Called whenever waits end other than by a turn.
    pub async fn refresh_waiting(&self, session_id: &str) -> Result<()> {
        sqlx::query(concat!(
            "UPDATE sessions SET status = ",
            status_from_waits!(),
            " WHERE id = ? AND status IN ('idle', 'waiting')"
        ))
        .bind(session_id)
        .execute(&self.pool)
        .await?;
        Ok(())
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
        // The successor waits for them, as its predecessor did.
        self.refresh_waiting(to).await?;
        Ok(r.rows_affected())
    }

    /// Moves a session's open background-process waits to `to` (its processes moved there);
    /// returns how many. Process waits do not make a session `waiting`.
    pub async fn move_process_waits(&self, from: &str, to: &str) -> Result<u64> {
        let r = sqlx::query(
            "UPDATE waits SET session_id = ? WHERE session_id = ? AND kind = 'process' \
             AND status IN ('pending', 'ready')",
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
        let mut tx = self.begin_write().await?;
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
        // A reset or deleted session is ended or gone (untouched); any other stops waiting.
        self.refresh_waiting(session_id).await?;
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

impl Store {
    /// Makes valid again the transcripts that a process which died mid-turn left `running`:
    /// tool calls of the last assistant message without a result get one, then the
    /// `[interrupted]` marker follows — what the agent's repair does at the session's next
    /// turn, done at once so that the transcript is valid to whoever reads it before then
    /// (the API, a resumed decision). A call that had asked a human (its wait is still open)
    /// is told that the request stands and its answer will resume the session; the others
    /// get the usual interrupted result. Each session is repaired in one transaction.
    ///
    /// Call it before [`Store::reset_running`], from the single owner of the store (the
    /// gateway) when it starts. Sessions of `tern chat` (source `cli`) are left alone: a
    /// `tern chat` process may be in the middle of a turn on one right now, and would append
    /// its real results after the repair's; its own next turn repairs it. Returns the ids of
    /// the sessions repaired.
    pub async fn repair_running_transcripts(&self) -> Result<Vec<String>> {
        let running: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM sessions WHERE status = 'running' AND source <> 'cli' ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut repaired = Vec::new();
        for session_id in running {
            let mut tx = self.begin_write().await?;
            let rows = sqlx::query(
                "SELECT idem_key, tool_call_id, kind, request_id FROM waits \
                 WHERE session_id = ? AND status IN ('pending', 'ready') \
                 AND tool_call_id IS NOT NULL",
            )
            .bind(&session_id)
            .fetch_all(&mut *tx)
            .await?;
            let mut open = Vec::with_capacity(rows.len());
            for r in &rows {
                let idem_key: String = r.try_get("idem_key")?;
                open.push((
                    r.try_get::<String, _>("tool_call_id")?,
                    call_seq_of(&idem_key),
                    WaitKind::parse(r.try_get("kind")?)?,
                    r.try_get::<Option<String>, _>("request_id")?,
                ));
            }
            let mut msgs = open_call_results(&mut tx, &session_id, |seq, call| {
                open.iter()
                    .find(|(id, wait_seq, _, _)| asked_by(Some(id), *wait_seq, call, seq))
                    .map(|(_, _, kind, request_id)| pending_result(*kind, request_id.as_deref()))
            })
            .await?;
            if msgs.is_empty() {
                continue;
            }
            tracing::warn!(
                session = %session_id,
                open = msgs.len(),
                "repairing a transcript left mid-turn by an earlier process"
            );
            msgs.push(NewMessage::new(Role::Assistant, INTERRUPTED_MARKER));
            insert_messages(&mut tx, &session_id, &msgs).await?;
            tx.commit().await?;
            repaired.push(session_id);
        }
        Ok(repaired)
    }
}

/// Results for the tool calls of the session's last assistant message that have none yet
/// (`[]` when all have one), read and built inside the caller's transaction. `own` gives a
/// call's result (from the message's seq and the call's id) when it is not the usual
/// interrupted one.
async fn open_call_results(
    tx: &mut sqlx::SqliteConnection,
    session_id: &str,
    own: impl Fn(i64, &str) -> Option<String>,
) -> Result<Vec<NewMessage>> {
    let last = sqlx::query(
        "SELECT seq, tool_calls FROM messages WHERE session_id = ? AND role = 'assistant' \
         AND tool_calls IS NOT NULL AND tool_calls <> '[]' ORDER BY seq DESC LIMIT 1",
    )
    .bind(session_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(last) = last else {
        return Ok(Vec::new());
    };
    let seq: i64 = last.try_get("seq")?;
    let calls: Vec<ToolCall> = serde_json::from_str(last.try_get("tool_calls")?)
        .map_err(|e| StoreError::Corrupt(format!("tool calls of session {session_id}: {e}")))?;
    let answered: Vec<String> = sqlx::query_scalar(
        "SELECT tool_call_id FROM messages WHERE session_id = ? AND seq > ? \
         AND tool_call_id IS NOT NULL",
    )
    .bind(session_id)
    .bind(seq)
    .fetch_all(&mut *tx)
    .await?;
    Ok(calls
        .iter()
        .filter(|c| !answered.contains(&c.id))
        .map(|c| {
            let content = own(seq, &c.id).unwrap_or_else(|| INTERRUPTED_RESULT.to_owned());
            NewMessage::tool_result(&c.id, &c.function.name, content)
        })
        .collect())
}

/// The result of the tool call that created a wait still open, when the process died before
/// the tool's own result was stored: the request stands (or is sent shortly, when it was not
/// yet), and its answer resumes the session.
fn pending_result(kind: WaitKind, request_id: Option<&str>) -> String {
    let note = match kind {
        WaitKind::Command => {
            "The command was not run: it needs a human's approval. The approval request \
             stands; the decision will resume this conversation. Do not run it again \
             meanwhile."
        }
        WaitKind::Approval | WaitKind::Elicitation => {
            "The request stands; the answer will resume this conversation. Do not ask again."
        }
        WaitKind::Process => {
            "The background process was started; its summary will follow when it exits."
        }
    };
    serde_json::json!({"requestId": request_id, "status": "pending", "note": note}).to_string()
}

/// The result of the tool call that created a wait's request, when the crash came before
/// the tool's own result was stored: the request exists and its decision follows.
fn decided_result(kind: WaitKind, request_id: Option<&str>) -> String {
    let note = match kind {
        WaitKind::Command => {
            "The command was not run: it needs a human's approval. The approval request was \
             created and has been decided since; the decision follows."
        }
        WaitKind::Approval | WaitKind::Elicitation => {
            "The request was created and has been decided since; the decision follows."
        }
        WaitKind::Process => {
            "The background process was started; it has exited since and its summary follows."
        }
    };
    serde_json::json!({"requestId": request_id, "status": "decided", "note": note}).to_string()
}

#[cfg(test)]
mod tests;
