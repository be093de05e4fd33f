//! `inbox_idempotency`: the `Idempotency-Key`s agents created things under, with the request's
//! fingerprint and the response they got.

use sqlx::Row;

use super::Conn;
use crate::error::Result;

/// Claims `(owner, key)` for a create on `method_path`; `false` when someone claimed it
/// first (whose transaction has committed by now: the insert waited for it).
pub(crate) async fn claim(
    conn: &mut Conn,
    owner: &str,
    key: &str,
    method_path: &str,
    fingerprint: &str,
    now: i64,
) -> Result<bool> {
    let claimed = sqlx::query(
        "INSERT INTO inbox_idempotency (owner_key, idem_key, method_path, fingerprint, \
         created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (owner_key, idem_key) DO NOTHING",
    )
    .bind(owner)
    .bind(key)
    .bind(method_path)
    .bind(fingerprint)
    .bind(now)
    .execute(conn)
    .await?
    .rows_affected();
    Ok(claimed == 1)
}

/// What a claimed key recorded.
pub(crate) struct Claimed {
    pub method_path: String,
    /// `None` for keys claimed before fingerprints were recorded.
    pub fingerprint: Option<String>,
    /// The response JSON; `None` only if the claiming create never finished (it cannot
    /// commit without one).
    pub response: Option<String>,
}

pub(crate) async fn claimed(conn: &mut Conn, owner: &str, key: &str) -> Result<Claimed> {
    let row = sqlx::query(
        "SELECT method_path, fingerprint, response FROM inbox_idempotency \
         WHERE owner_key = ? AND idem_key = ?",
    )
    .bind(owner)
    .bind(key)
    .fetch_one(conn)
    .await?;
    Ok(Claimed {
        method_path: row.try_get("method_path")?,
        fingerprint: row.try_get("fingerprint")?,
        response: row.try_get("response")?,
    })
}

/// Stores the response of the create that claimed `(owner, key)`.
pub(crate) async fn remember(
    conn: &mut Conn,
    owner: &str,
    key: &str,
    response_json: &str,
    status_code: i64,
) -> Result<()> {
    sqlx::query(
        "UPDATE inbox_idempotency SET response = ?, status_code = ? \
         WHERE owner_key = ? AND idem_key = ?",
    )
    .bind(response_json)
    .bind(status_code)
    .bind(owner)
    .bind(key)
    .execute(conn)
    .await?;
    Ok(())
}
