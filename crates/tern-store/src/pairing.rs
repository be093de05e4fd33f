//! The tables of DM pairing (`tern-channels` holds the rules): pending codes, stored only as a
//! salted hash; approved users; consecutive failed approvals per platform.
//!
//! Functions that write take the caller's transaction (from [`Store::begin_write`]) so one
//! pairing step — check the limits, then write — is one transaction.

use serde::Serialize;
use sqlx::SqliteConnection;

use crate::{Result, Store};

/// A pending code, without the code: only its hash is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct PendingCode {
    pub platform: String,
    pub user_id: String,
    pub display_name: String,
    pub created_at: i64,
    pub expires_at: i64,
}

/// A pending code with its salt and hash, for checking a code given to approve.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PendingHash {
    pub user_id: String,
    pub display_name: String,
    pub code_salt: String,
    pub code_hash: String,
    pub expires_at: i64,
}

/// A user the owner approved; revoked when `revoked_at` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ApprovedUser {
    pub platform: String,
    pub user_id: String,
    pub display_name: String,
    pub approved_at: i64,
    pub reviewer: Option<String>,
    pub revoked_at: Option<i64>,
}

/// A new pending code.
#[derive(Debug, Clone)]
pub struct NewPending<'a> {
    pub platform: &'a str,
    pub user_id: &'a str,
    pub display_name: &'a str,
    pub code_salt: &'a str,
    pub code_hash: &'a str,
    pub created_at: i64,
    pub expires_at: i64,
}

/// Drops the platform's pending codes that expired before `before`.
pub async fn delete_expired(tx: &mut SqliteConnection, platform: &str, before: i64) -> Result<()> {
    sqlx::query("DELETE FROM channel_pairing_pending WHERE platform = ? AND expires_at <= ?")
        .bind(platform)
        .bind(before)
        .execute(tx)
        .await?;
    Ok(())
}

/// The platform's pending codes (with hashes), expired ones included.
pub async fn pending_hashes(tx: &mut SqliteConnection, platform: &str) -> Result<Vec<PendingHash>> {
    Ok(sqlx::query_as(
        "SELECT user_id, display_name, code_salt, code_hash, expires_at \
         FROM channel_pairing_pending WHERE platform = ?",
    )
    .bind(platform)
    .fetch_all(tx)
    .await?)
}

/// When the user's pending code was made, if they have one.
pub async fn pending_created_at(
    tx: &mut SqliteConnection,
    platform: &str,
    user_id: &str,
) -> Result<Option<i64>> {
    Ok(sqlx::query_scalar(
        "SELECT created_at FROM channel_pairing_pending WHERE platform = ? AND user_id = ?",
    )
    .bind(platform)
    .bind(user_id)
    .fetch_optional(tx)
    .await?)
}

/// Stores a pending code, replacing the user's previous one.
pub async fn put_pending(tx: &mut SqliteConnection, new: NewPending<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO channel_pairing_pending \
         (platform, user_id, display_name, code_salt, code_hash, created_at, expires_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?) \
         ON CONFLICT (platform, user_id) DO UPDATE SET display_name = excluded.display_name, \
         code_salt = excluded.code_salt, code_hash = excluded.code_hash, \
         created_at = excluded.created_at, expires_at = excluded.expires_at",
    )
    .bind(new.platform)
    .bind(new.user_id)
    .bind(new.display_name)
    .bind(new.code_salt)
    .bind(new.code_hash)
    .bind(new.created_at)
    .bind(new.expires_at)
    .execute(tx)
    .await?;
    Ok(())
}

/// Removes the user's pending code.
pub async fn delete_pending(
    tx: &mut SqliteConnection,
    platform: &str,
    user_id: &str,
) -> Result<()> {
    sqlx::query("DELETE FROM channel_pairing_pending WHERE platform = ? AND user_id = ?")
        .bind(platform)
        .bind(user_id)
        .execute(tx)
        .await?;
    Ok(())
}

/// Approves a user (again): clears an earlier revocation.
pub async fn put_approved(
    tx: &mut SqliteConnection,
    platform: &str,
    user_id: &str,
    display_name: &str,
    reviewer: Option<&str>,
    now_ms: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO channel_pairing_approved \
         (platform, user_id, display_name, approved_at, reviewer, revoked_at) \
         VALUES (?, ?, ?, ?, ?, NULL) \
         ON CONFLICT (platform, user_id) DO UPDATE SET display_name = excluded.display_name, \
         approved_at = excluded.approved_at, reviewer = excluded.reviewer, revoked_at = NULL",
    )
    .bind(platform)
    .bind(user_id)
    .bind(display_name)
    .bind(now_ms)
    .bind(reviewer)
    .execute(tx)
    .await?;
    Ok(())
}

/// Revokes an approved user; false when they were not approved (or already revoked).
pub async fn revoke(
    tx: &mut SqliteConnection,
    platform: &str,
    user_id: &str,
    now_ms: i64,
) -> Result<bool> {
    let r = sqlx::query(
        "UPDATE channel_pairing_approved SET revoked_at = ? \
         WHERE platform = ? AND user_id = ? AND revoked_at IS NULL",
    )
    .bind(now_ms)
    .bind(platform)
    .bind(user_id)
    .execute(tx)
    .await?;
    Ok(r.rows_affected() > 0)
}

/// The platform's consecutive failed approvals and the end of its lockout, if any.
pub async fn failures(tx: &mut SqliteConnection, platform: &str) -> Result<(i64, Option<i64>)> {
    let row: Option<(i64, Option<i64>)> = sqlx::query_as(
        "SELECT failures, locked_until FROM channel_pairing_failures WHERE platform = ?",
    )
    .bind(platform)
    .fetch_optional(tx)
    .await?;
    Ok(row.unwrap_or((0, None)))
}

/// Sets the platform's failure count and lockout end.
pub async fn set_failures(
    tx: &mut SqliteConnection,
    platform: &str,
    failures: i64,
    locked_until: Option<i64>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO channel_pairing_failures (platform, failures, locked_until) VALUES (?, ?, ?) \
         ON CONFLICT (platform) DO UPDATE SET failures = excluded.failures, \
         locked_until = excluded.locked_until",
    )
    .bind(platform)
    .bind(failures)
    .bind(locked_until)
    .execute(tx)
    .await?;
    Ok(())
}

impl Store {
    /// Whether the user is approved on the platform and not revoked.
    pub async fn pairing_is_approved(&self, platform: &str, user_id: &str) -> Result<bool> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM channel_pairing_approved \
             WHERE platform = ? AND user_id = ? AND revoked_at IS NULL",
        )
        .bind(platform)
        .bind(user_id)
        .fetch_one(self.pool())
        .await?;
        Ok(n > 0)
    }

    /// Pending codes not expired at `now_ms`, oldest first.
    pub async fn pairing_pending(&self, now_ms: i64) -> Result<Vec<PendingCode>> {
        Ok(sqlx::query_as(
            "SELECT platform, user_id, display_name, created_at, expires_at \
             FROM channel_pairing_pending WHERE expires_at > ? ORDER BY created_at, platform",
        )
        .bind(now_ms)
        .fetch_all(self.pool())
        .await?)
    }

    /// Approved users, revoked ones included, by platform and approval time.
    pub async fn pairing_approved(&self) -> Result<Vec<ApprovedUser>> {
        Ok(sqlx::query_as(
            "SELECT platform, user_id, display_name, approved_at, reviewer, revoked_at \
             FROM channel_pairing_approved ORDER BY platform, approved_at",
        )
        .fetch_all(self.pool())
        .await?)
    }
}
