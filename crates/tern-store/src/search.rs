//! Full-text search over a session's past sessions, for the `session_search` tool.
//!
//! [`Store::search_past_sessions`] is [`Store::search`] narrowed to what one session may see:
//! never itself (its own transcript is already in front of the model), and only sessions of
//! the same owner — the API key that created it, `NULL` matching `NULL` (`tern chat`) — so an
//! agent key never reads another key's sessions.

use serde::Serialize;
use sqlx::Row;
use tern_llm::Role;

use crate::{Result, Store, fts_query, parse_role};

/// A message of a past session that matches, with its session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionSearchHit {
    pub session_id: String,
    pub session_title: Option<String>,
    /// When the session was created and last changed (ms since the epoch).
    pub session_created_at: i64,
    pub session_updated_at: i64,
    pub message_id: i64,
    pub seq: i64,
    pub role: Role,
    /// The matching part with a few words around it, matches in `[` `]`.
    pub snippet: String,
    pub created_at: i64,
}

impl Store {
    /// Messages matching every word of `text` (as [`Store::search`] reads it) in sessions
    /// other than `current` whose owner is `owner` (`None`: sessions no key created), of the
    /// given roles, best matches first, at most `limit`.
    pub async fn search_past_sessions(
        &self,
        text: &str,
        current: &str,
        owner: Option<&str>,
        roles: &[Role],
        limit: i64,
    ) -> Result<Vec<SessionSearchHit>> {
        let query = fts_query(text);
        if query.is_empty() || roles.is_empty() {
            return Ok(Vec::new());
        }
        let roles = serde_json::to_string(&roles.iter().map(|r| r.as_str()).collect::<Vec<_>>())
            .map_err(|e| crate::StoreError::Corrupt(e.to_string()))?;
        // `IS`: NULL owner matches NULL owner, and nothing else.
        let rows = sqlx::query(
            "SELECT m.session_id, s.title, s.created_at, s.updated_at, m.id, m.seq, m.role, \
             snippet(messages_fts, 0, '[', ']', '…', 16) AS snip, m.created_at \
             FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid \
             JOIN sessions s ON s.id = m.session_id \
             WHERE messages_fts MATCH ? AND m.session_id <> ? AND s.owner_key IS ? \
             AND m.role IN (SELECT value FROM json_each(?)) \
             ORDER BY rank LIMIT ?",
        )
        .bind(&query)
        .bind(current)
        .bind(owner)
        .bind(&roles)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let role: String = r.try_get(6)?;
                Ok(SessionSearchHit {
                    session_id: r.try_get(0)?,
                    session_title: r.try_get(1)?,
                    session_created_at: r.try_get(2)?,
                    session_updated_at: r.try_get(3)?,
                    message_id: r.try_get(4)?,
                    seq: r.try_get(5)?,
                    role: parse_role(&role)?,
                    snippet: r.try_get(7)?,
                    created_at: r.try_get(8)?,
                })
            })
            .collect()
    }
}
