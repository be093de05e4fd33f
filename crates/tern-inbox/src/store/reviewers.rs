//! `inbox_reviewers` and what authenticates them: `inbox_login_tokens` (one-time login
//! links), `inbox_sessions` (browser sessions) and `inbox_reviewer_tokens` (bearer tokens).
//! Tokens are stored as their SHA-256 only.

use serde::Serialize;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use tern_store::StoreError;

use super::Conn;

type Result<T> = std::result::Result<T, StoreError>;

/// A reviewer as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reviewer {
    pub id: String,
    pub name: String,
    pub admin: bool,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
}

/// The active reviewer named `name`.
pub(crate) async fn active(conn: &mut Conn, name: &str) -> Result<Option<Reviewer>> {
    let row = sqlx::query(
        "SELECT id, name, is_admin, created_at FROM inbox_reviewers \
         WHERE name = ? AND disabled_at IS NULL",
    )
    .bind(name)
    .fetch_optional(conn)
    .await?;
    row.as_ref().map(from_row).transpose()
}

/// Stores a reviewer; `false` when an active one has the name.
pub(crate) async fn insert(conn: &mut Conn, reviewer: &Reviewer) -> Result<bool> {
    let inserted = sqlx::query(
        "INSERT INTO inbox_reviewers (id, name, is_admin, created_at) VALUES (?, ?, ?, ?) \
         ON CONFLICT DO NOTHING",
    )
    .bind(&reviewer.id)
    .bind(&reviewer.name)
    .bind(i64::from(reviewer.admin))
    .bind(reviewer.created_at)
    .execute(conn)
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

/// The active reviewers, by name.
pub(crate) async fn all_active(conn: &mut Conn) -> Result<Vec<Reviewer>> {
    let rows = sqlx::query(
        "SELECT id, name, is_admin, created_at FROM inbox_reviewers \
         WHERE disabled_at IS NULL ORDER BY name",
    )
    .fetch_all(conn)
    .await?;
    rows.iter().map(from_row).collect()
}

/// Disables the active reviewer named `name` at `now`: ends their sessions, revokes their
/// tokens and voids their unused login links. `false` when there was none. Run it in a
/// write transaction.
pub(crate) async fn disable(conn: &mut Conn, name: &str, now: i64) -> Result<bool> {
    let Some(row) =
        sqlx::query("SELECT id FROM inbox_reviewers WHERE name = ? AND disabled_at IS NULL")
            .bind(name)
            .fetch_optional(&mut *conn)
            .await?
    else {
        return Ok(false);
    };
    let id: String = row.try_get("id")?;
    sqlx::query("UPDATE inbox_reviewers SET disabled_at = ? WHERE id = ?")
        .bind(now)
        .bind(&id)
        .execute(&mut *conn)
        .await?;
    sqlx::query("DELETE FROM inbox_sessions WHERE reviewer_id = ?")
        .bind(&id)
        .execute(&mut *conn)
        .await?;
    sqlx::query(
        "UPDATE inbox_reviewer_tokens SET revoked_at = ? \
         WHERE reviewer_id = ? AND revoked_at IS NULL",
    )
    .bind(now)
    .bind(&id)
    .execute(&mut *conn)
    .await?;
    // Marked as expired rather than consumed, so "has logged in" stays truthful.
    sqlx::query(
        "UPDATE inbox_login_tokens SET expires_at = ? \
         WHERE reviewer_id = ? AND consumed_at IS NULL AND expires_at > ?",
    )
    .bind(now)
    .bind(&id)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(true)
}

// ---- login links and sessions ---------------------------------------------------------------

pub(crate) async fn insert_login_token(
    conn: &mut Conn,
    token_hash: &str,
    reviewer_id: &str,
    now: i64,
    expires_at: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO inbox_login_tokens (token_hash, reviewer_id, created_at, expires_at) \
         VALUES (?, ?, ?, ?)",
    )
    .bind(token_hash)
    .bind(reviewer_id)
    .bind(now)
    .bind(expires_at)
    .execute(conn)
    .await?;
    Ok(())
}

/// Whether the active reviewer `name` has ever used a login link.
pub(crate) async fn has_used_login_token(conn: &mut Conn, name: &str) -> Result<bool> {
    let row = sqlx::query(
        "SELECT 1 FROM inbox_login_tokens l JOIN inbox_reviewers r ON r.id = l.reviewer_id \
         WHERE r.name = ? AND r.disabled_at IS NULL AND l.consumed_at IS NOT NULL LIMIT 1",
    )
    .bind(name)
    .fetch_optional(conn)
    .await?;
    Ok(row.is_some())
}

/// The name of the active reviewer whose unused login token hashes to `token_hash` and is
/// valid at `now`.
pub(crate) async fn login_token_owner(
    conn: &mut Conn,
    token_hash: &str,
    now: i64,
) -> Result<Option<String>> {
    Ok(sqlx::query_scalar(
        "SELECT r.name FROM inbox_login_tokens l JOIN inbox_reviewers r \
         ON r.id = l.reviewer_id WHERE l.token_hash = ? AND l.consumed_at IS NULL \
         AND l.expires_at > ? AND r.disabled_at IS NULL",
    )
    .bind(token_hash)
    .bind(now)
    .fetch_optional(conn)
    .await?)
}

/// Marks the login token used, if it is unused and valid at `now`; its reviewer's id.
pub(crate) async fn consume_login_token(
    conn: &mut Conn,
    token_hash: &str,
    now: i64,
) -> Result<Option<String>> {
    Ok(sqlx::query_scalar(
        "UPDATE inbox_login_tokens SET consumed_at = ? \
         WHERE token_hash = ? AND consumed_at IS NULL AND expires_at > ? \
         RETURNING reviewer_id",
    )
    .bind(now)
    .bind(token_hash)
    .bind(now)
    .fetch_optional(conn)
    .await?)
}

/// The name of the reviewer `id`, if they are active.
pub(crate) async fn active_name(conn: &mut Conn, id: &str) -> Result<Option<String>> {
    Ok(
        sqlx::query_scalar("SELECT name FROM inbox_reviewers WHERE id = ? AND disabled_at IS NULL")
            .bind(id)
            .fetch_optional(conn)
            .await?,
    )
}

pub(crate) async fn insert_session(
    conn: &mut Conn,
    token_hash: &str,
    reviewer_id: &str,
    now: i64,
    expires_at: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO inbox_sessions (token_hash, reviewer_id, created_at, expires_at) \
         VALUES (?, ?, ?, ?)",
    )
    .bind(token_hash)
    .bind(reviewer_id)
    .bind(now)
    .bind(expires_at)
    .execute(conn)
    .await?;
    Ok(())
}

/// Deletes the sessions that ended at or before `now`.
pub(crate) async fn delete_ended_sessions(conn: &mut Conn, now: i64) -> Result<()> {
    sqlx::query("DELETE FROM inbox_sessions WHERE expires_at <= ?")
        .bind(now)
        .execute(conn)
        .await?;
    Ok(())
}

/// A live session of an active reviewer.
pub(crate) struct Session {
    pub token_hash: String,
    pub reviewer: String,
    pub expires_at: i64,
}

/// The session whose token hashes to `token_hash`, if it lives at `now` and its reviewer is
/// active.
pub(crate) async fn session(
    conn: &mut Conn,
    token_hash: &str,
    now: i64,
) -> Result<Option<Session>> {
    let row = sqlx::query(
        "SELECT s.token_hash, s.expires_at, r.name FROM inbox_sessions s \
         JOIN inbox_reviewers r ON r.id = s.reviewer_id \
         WHERE s.token_hash = ? AND s.expires_at > ? AND r.disabled_at IS NULL",
    )
    .bind(token_hash)
    .bind(now)
    .fetch_optional(conn)
    .await?;
    row.map(|row| {
        Ok(Session {
            token_hash: row.try_get("token_hash")?,
            reviewer: row.try_get("name")?,
            expires_at: row.try_get("expires_at")?,
        })
    })
    .transpose()
}

/// Deletes the session; `false` when there was none.
pub(crate) async fn delete_session(conn: &mut Conn, token_hash: &str) -> Result<bool> {
    let n = sqlx::query("DELETE FROM inbox_sessions WHERE token_hash = ?")
        .bind(token_hash)
        .execute(conn)
        .await?
        .rows_affected();
    Ok(n > 0)
}

// ---- bearer tokens --------------------------------------------------------------------------

pub(crate) async fn insert_bearer(
    conn: &mut Conn,
    token_hash: &str,
    reviewer_id: &str,
    label: &str,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO inbox_reviewer_tokens (token_hash, reviewer_id, label, created_at) \
         VALUES (?, ?, ?, ?)",
    )
    .bind(token_hash)
    .bind(reviewer_id)
    .bind(label)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

/// Revokes `name`'s active tokens labelled `label` at `now`; how many.
pub(crate) async fn revoke_bearers(
    conn: &mut Conn,
    name: &str,
    label: &str,
    now: i64,
) -> Result<u64> {
    Ok(sqlx::query(
        "UPDATE inbox_reviewer_tokens SET revoked_at = ? \
         WHERE label = ? AND revoked_at IS NULL AND reviewer_id IN \
         (SELECT id FROM inbox_reviewers WHERE name = ?)",
    )
    .bind(now)
    .bind(label)
    .bind(name)
    .execute(conn)
    .await?
    .rows_affected())
}

/// `(token hash, reviewer name)` of every unrevoked token of an active reviewer.
pub(crate) async fn active_bearers(conn: &mut Conn) -> Result<Vec<(String, String)>> {
    let rows = sqlx::query(
        "SELECT t.token_hash, r.name FROM inbox_reviewer_tokens t \
         JOIN inbox_reviewers r ON r.id = t.reviewer_id \
         WHERE t.revoked_at IS NULL AND r.disabled_at IS NULL",
    )
    .fetch_all(conn)
    .await?;
    rows.iter()
        .map(|row| Ok((row.try_get("token_hash")?, row.try_get("name")?)))
        .collect()
}

fn from_row(row: &SqliteRow) -> Result<Reviewer> {
    Ok(Reviewer {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        admin: row.try_get::<i64, _>("is_admin")? != 0,
        created_at: row.try_get("created_at")?,
    })
}
