//! Context compaction in the store (`compactions` table and two columns of `messages`,
//! migration 0016): what a compaction of a session's transcript writes, in one transaction.
//!
//! A compaction never deletes: the messages it replaces stay in `messages` (exported,
//! searched, shown by [`Store::messages_all`]) with `compacted_by` set, so they leave the
//! active transcript that [`Store::messages`] returns. Its cheap pass sets `model_content`, the
//! placeholder the model sees instead of a long old tool output, and keeps `content` whole.
//! Each compaction is a row of `compactions`; the latest row is the session's current state:
//! its summary (carried forward by a compaction that only ran the cheap pass) is placed right
//! after the kept head. Seqs never change, so waits that refer to them stay valid.
//!
//! The agent plans a compaction on the transcript it read, then calls the model for the
//! summary, which takes seconds; [`Store::compact`] refuses with
//! [`StoreError::TranscriptChanged`] when a message was appended or another compaction ran in
//! between, so a compaction is never applied to a transcript it did not see.

use serde::Serialize;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use tern_llm::Role;

use crate::{Message, Result, Store, StoreError, now_ms};

/// Why a compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CompactionReason {
    /// The next model call would have passed the threshold.
    Auto,
    /// Asked for (`/compact`, the API, `tern sessions compact`).
    Manual,
    /// The model refused the request as over its context window.
    Overflow,
}

crate::stored_as_text!(CompactionReason, "compaction reason", {
    Auto => "auto",
    Manual => "manual",
    Overflow => "overflow",
});

/// One stored compaction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Compaction {
    pub id: i64,
    pub session_id: String,
    pub reason: CompactionReason,
    /// The structured summary of everything compacted so far; `None` while nothing was
    /// summarised (only the cheap pass ran).
    pub summary: Option<String>,
    /// The summary as the model sees it, and the role it is sent with.
    pub content: Option<String>,
    pub role: Option<Role>,
    /// The summary sits right after the message with this seq.
    pub after_seq: i64,
    /// The first and last seq this compaction took out of the active transcript.
    pub first_seq: Option<i64>,
    pub last_seq: Option<i64>,
    pub messages_compacted: i64,
    pub outputs_elided: i64,
    /// The transcript's last seq when it was compacted: the server's token counts of answers
    /// up to it describe the transcript before this compaction.
    pub through_seq: i64,
    pub tokens_before: i64,
    pub tokens_after: i64,
    pub created_at: i64,
}

impl Compaction {
    /// The summary as a message of the active transcript (id 0, the head's seq).
    pub(crate) fn summary_message(&self) -> Option<Message> {
        Some(Message {
            id: 0,
            session_id: self.session_id.clone(),
            seq: self.after_seq,
            role: self.role?,
            content: Some(self.content.clone()?),
            parts: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
            reasoning: None,
            turn_id: None,
            prompt_tokens: None,
            completion_tokens: None,
            model: None,
            created_at: self.created_at,
            compacted: false,
            model_content: None,
            compaction_id: Some(self.id),
        })
    }
}

/// A tool output the model sees as `placeholder` from now on.
#[derive(Debug, Clone)]
pub struct Elision {
    pub message_id: i64,
    pub placeholder: String,
}

/// A new summary, replacing the messages strictly between `after_seq` and `before_seq`.
#[derive(Debug, Clone)]
pub struct NewSummary {
    /// The structured summary (what the next compaction updates).
    pub summary: String,
    /// What the model sees.
    pub content: String,
    pub role: Role,
    /// The last message of the kept head.
    pub after_seq: i64,
    /// The first message of the kept tail (one past the last seq to keep nothing).
    pub before_seq: i64,
}

/// What [`Store::compact`] writes.
#[derive(Debug, Clone)]
pub struct NewCompaction {
    pub reason: CompactionReason,
    /// The last seq of the transcript the compaction was planned on.
    pub planned_through_seq: i64,
    /// The current compaction's id when it was planned (`None`: there was none).
    pub planned_after: Option<i64>,
    pub elide: Vec<Elision>,
    pub summary: Option<NewSummary>,
    pub tokens_before: u64,
    pub tokens_after: u64,
}

macro_rules! compaction_cols {
    () => {
        "id, session_id, reason, summary, content, role, after_seq, first_seq, last_seq, \
         messages_compacted, outputs_elided, through_seq, tokens_before, tokens_after, created_at"
    };
}

fn compaction_from_row(r: &SqliteRow) -> Result<Compaction> {
    let role: Option<String> = r.try_get("role")?;
    Ok(Compaction {
        id: r.try_get("id")?,
        session_id: r.try_get("session_id")?,
        reason: CompactionReason::parse(r.try_get("reason")?)?,
        summary: r.try_get("summary")?,
        content: r.try_get("content")?,
        role: role.as_deref().map(crate::parse_role).transpose()?,
        after_seq: r.try_get("after_seq")?,
        first_seq: r.try_get("first_seq")?,
        last_seq: r.try_get("last_seq")?,
        messages_compacted: r.try_get("messages_compacted")?,
        outputs_elided: r.try_get("outputs_elided")?,
        through_seq: r.try_get("through_seq")?,
        tokens_before: r.try_get("tokens_before")?,
        tokens_after: r.try_get("tokens_after")?,
        created_at: r.try_get("created_at")?,
    })
}

fn tokens(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Store {
    /// The session's current compaction (its latest), if it was ever compacted.
    pub async fn compaction(&self, session_id: &str) -> Result<Option<Compaction>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            compaction_cols!(),
            " FROM compactions WHERE session_id = ? ORDER BY id DESC LIMIT 1"
        ))
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| compaction_from_row(&r)).transpose()
    }

    /// Every compaction of the session, oldest first.
    pub async fn compactions(&self, session_id: &str) -> Result<Vec<Compaction>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            compaction_cols!(),
            " FROM compactions WHERE session_id = ? ORDER BY id"
        ))
        .bind(session_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(compaction_from_row).collect()
    }

    /// Applies a compaction in one transaction: the placeholders, the summary's row, and
    /// the replaced messages marked — or nothing, with [`StoreError::TranscriptChanged`] when
    /// the transcript is not the one the compaction was planned on.
    pub async fn compact(&self, session_id: &str, new: &NewCompaction) -> Result<Compaction> {
        let mut tx = self.begin_write().await?;
        let last_seq: Option<i64> =
            sqlx::query_scalar("SELECT MAX(seq) FROM messages WHERE session_id = ?")
                .bind(session_id)
                .fetch_one(&mut *tx)
                .await?;
        let current = sqlx::query(concat!(
            "SELECT ",
            compaction_cols!(),
            " FROM compactions WHERE session_id = ? ORDER BY id DESC LIMIT 1"
        ))
        .bind(session_id)
        .fetch_optional(&mut *tx)
        .await?
        .map(|r| compaction_from_row(&r))
        .transpose()?;
        if last_seq.unwrap_or(0) != new.planned_through_seq
            || current.as_ref().map(|c| c.id) != new.planned_after
        {
            return Err(StoreError::TranscriptChanged(session_id.to_owned()));
        }
        let mut elided = 0i64;
        for e in &new.elide {
            let r = sqlx::query(
                "UPDATE messages SET model_content = ? \
                 WHERE id = ? AND session_id = ? AND compacted_by IS NULL",
            )
            .bind(&e.placeholder)
            .bind(e.message_id)
            .bind(session_id)
            .execute(&mut *tx)
            .await?;
            elided += i64::try_from(r.rows_affected()).unwrap_or(0);
        }
        let (summary, content, role, after_seq, range) = match (&new.summary, &current) {
            (Some(s), _) => {
                let (first, last, n): (Option<i64>, Option<i64>, i64) = sqlx::query_as(
                    "SELECT MIN(seq), MAX(seq), COUNT(*) FROM messages WHERE session_id = ? \
                     AND compacted_by IS NULL AND seq > ? AND seq < ?",
                )
                .bind(session_id)
                .bind(s.after_seq)
                .bind(s.before_seq)
                .fetch_one(&mut *tx)
                .await?;
                (
                    Some(s.summary.clone()),
                    Some(s.content.clone()),
                    Some(s.role),
                    s.after_seq,
                    (first, last, n),
                )
            }
            // Only the cheap pass: the current summary stays where it is.
            (None, Some(c)) => (
                c.summary.clone(),
                c.content.clone(),
                c.role,
                c.after_seq,
                (None, None, 0),
            ),
            (None, None) => (None, None, None, 0, (None, None, 0)),
        };
        let row = sqlx::query(concat!(
            "INSERT INTO compactions (session_id, reason, summary, content, role, after_seq, \
             first_seq, last_seq, messages_compacted, outputs_elided, through_seq, \
             tokens_before, tokens_after, created_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING ",
            compaction_cols!()
        ))
        .bind(session_id)
        .bind(new.reason.as_str())
        .bind(&summary)
        .bind(&content)
        .bind(role.map(Role::as_str))
        .bind(after_seq)
        .bind(range.0)
        .bind(range.1)
        .bind(range.2)
        .bind(elided)
        .bind(new.planned_through_seq)
        .bind(tokens(new.tokens_before))
        .bind(tokens(new.tokens_after))
        .bind(now_ms())
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| match e {
            sqlx::Error::Database(d) if d.is_foreign_key_violation() => {
                StoreError::SessionNotFound(session_id.to_owned())
            }
            e => e.into(),
        })?;
        let compaction = compaction_from_row(&row)?;
        if let Some(s) = &new.summary {
            sqlx::query(
                "UPDATE messages SET compacted_by = ? WHERE session_id = ? \
                 AND compacted_by IS NULL AND seq > ? AND seq < ?",
            )
            .bind(compaction.id)
            .bind(session_id)
            .bind(s.after_seq)
            .bind(s.before_seq)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(compaction)
    }
}

#[cfg(test)]
mod tests;
