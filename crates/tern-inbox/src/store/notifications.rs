//! `inbox_notifications`: the outbox of announcements of new requests, one row per request
//! and configured URL, with its attempts.

use sqlx::Row;

use super::{Conn, new_id};
use crate::error::Result;

/// A notification due for an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// Also the `X-Tern-Delivery` header.
    pub id: String,
    pub request_id: String,
    pub url: String,
    pub body: String,
    /// Attempts made so far.
    pub attempts: u32,
}

/// A stored notification, for tests and diagnostics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationRow {
    pub id: String,
    pub request_id: String,
    pub url: String,
    pub status: String,
    pub attempts: u32,
    pub last_error: Option<String>,
}

/// Queues `body` for `url`, first due at `at` (ms).
pub(crate) async fn insert(
    conn: &mut Conn,
    request_id: &str,
    url: &str,
    body: &str,
    at: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO inbox_notifications (id, request_id, url, body, status, attempts, \
         next_attempt_at, created_at) VALUES (?, ?, ?, ?, 'pending', 0, ?, ?)",
    )
    .bind(new_id())
    .bind(request_id)
    .bind(url)
    .bind(body)
    .bind(at)
    .bind(at)
    .execute(conn)
    .await?;
    Ok(())
}

/// Pending notifications due at `now` (ms), oldest first.
pub(crate) async fn due(conn: &mut Conn, now: i64, limit: u32) -> Result<Vec<Delivery>> {
    let rows = sqlx::query(
        "SELECT id, request_id, url, body, attempts FROM inbox_notifications \
         WHERE status = 'pending' AND next_attempt_at <= ? \
         ORDER BY next_attempt_at, id LIMIT ?",
    )
    .bind(now)
    .bind(i64::from(limit))
    .fetch_all(conn)
    .await?;
    rows.iter()
        .map(|row| {
            let attempts: i64 = row.try_get("attempts")?;
            Ok(Delivery {
                id: row.try_get("id")?,
                request_id: row.try_get("request_id")?,
                url: row.try_get("url")?,
                body: row.try_get("body")?,
                attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
            })
        })
        .collect()
}

/// When the next pending notification is due (ms), if any.
pub(crate) async fn next_due(conn: &mut Conn) -> Result<Option<i64>> {
    Ok(sqlx::query_scalar(
        "SELECT MIN(next_attempt_at) FROM inbox_notifications WHERE status = 'pending'",
    )
    .fetch_one(conn)
    .await?)
}

pub(crate) async fn delivered(conn: &mut Conn, id: &str, now: i64) -> Result<()> {
    sqlx::query(
        "UPDATE inbox_notifications SET status = 'delivered', attempts = attempts + 1, \
         delivered_at = ?, last_error = NULL WHERE id = ? AND status = 'pending'",
    )
    .bind(now)
    .bind(id)
    .execute(conn)
    .await?;
    Ok(())
}

/// Records a failed attempt: `status` `pending` again (next due at `next`) or `failed`.
pub(crate) async fn failed(
    conn: &mut Conn,
    id: &str,
    status: &str,
    next: i64,
    error: &str,
) -> Result<()> {
    sqlx::query(
        "UPDATE inbox_notifications SET status = ?, attempts = attempts + 1, \
         next_attempt_at = ?, last_error = ? WHERE id = ? AND status = 'pending'",
    )
    .bind(status)
    .bind(next)
    .bind(error)
    .bind(id)
    .execute(conn)
    .await?;
    Ok(())
}

/// The notifications of a request, oldest first.
pub(crate) async fn of_request(conn: &mut Conn, request_id: &str) -> Result<Vec<NotificationRow>> {
    let rows = sqlx::query(
        "SELECT id, request_id, url, status, attempts, last_error FROM inbox_notifications \
         WHERE request_id = ? ORDER BY created_at, id",
    )
    .bind(request_id)
    .fetch_all(conn)
    .await?;
    rows.iter()
        .map(|row| {
            let attempts: i64 = row.try_get("attempts")?;
            Ok(NotificationRow {
                id: row.try_get("id")?,
                request_id: row.try_get("request_id")?,
                url: row.try_get("url")?,
                status: row.try_get("status")?,
                attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                last_error: row.try_get("last_error")?,
            })
        })
        .collect()
}
