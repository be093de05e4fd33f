//! The inbox's tables (`inbox_*`, created by `0003_inbox.sql` and later migrations in
//! `tern-store`): every SQL statement of this crate is in this module, one file per table
//! group, and nothing outside it names a table or a SQLite type.
//!
//! - [`projects`], [`tasks`], [`events`] (a task's log), [`requests`] (approvals and
//!   elicitations, their results, expiry and the feeds over them);
//! - [`idempotency`] (claimed `Idempotency-Key`s and their responses), [`uploads`],
//!   [`notifications`] (the outbox), [`reviewers`] (reviewers, login links, sessions, tokens).
//!
//! The service above decides what to write and in which transaction; these functions run one
//! statement or a few that belong together and turn rows into the crate's types. Writes that
//! read first run in a write transaction ([`write`]: `BEGIN IMMEDIATE` through
//! [`tern_store::Store::begin_write`]). Another database would be another implementation of
//! this module with the same functions: [`Conn`], [`Tx`] and the functions' signatures are
//! what the rest of the crate sees.

pub(crate) mod events;
pub(crate) mod idempotency;
pub(crate) mod notifications;
pub(crate) mod projects;
pub(crate) mod requests;
pub(crate) mod reviewers;
pub(crate) mod tasks;
pub(crate) mod uploads;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tern_store::{Store, StoreError};

use crate::error::{InboxError, Result};

/// A connection to the database; a transaction ([`Tx`]) and a pooled connection ([`Read`])
/// both dereference to one, and every function here takes one.
pub(crate) type Conn = sqlx::SqliteConnection;

/// A transaction: committed with `commit()`, rolled back when dropped.
pub(crate) type Tx = sqlx::Transaction<'static, sqlx::Sqlite>;

/// A connection taken from the pool for a few reads.
pub(crate) type Read = sqlx::pool::PoolConnection<sqlx::Sqlite>;

/// Begins a write transaction holding the database's write lock from its first statement:
/// what it checks cannot change before it commits, and concurrent writers wait for each
/// other (the store's busy timeout) instead of failing on a stale snapshot.
pub(crate) async fn write(store: &Store) -> Result<Tx, StoreError> {
    store.begin_write().await
}

/// Begins a read-only transaction: its reads see one snapshot.
pub(crate) async fn snapshot(store: &Store) -> Result<Tx, StoreError> {
    Ok(store.pool().begin().await?)
}

/// A connection for reads outside a transaction.
pub(crate) async fn read(store: &Store) -> Result<Read, StoreError> {
    Ok(store.pool().acquire().await?)
}

/// A new row id: a UUIDv7 in hex, so ids sort by creation time.
pub(crate) fn new_id() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}

/// Reads a unit enum stored in its wire spelling (`RUNNING`, `APPROVAL_DECIDED`, …).
pub(crate) fn wire_enum<T: DeserializeOwned>(stored: String, what: &str) -> Result<T> {
    serde_json::from_value(Value::String(stored)).map_err(|e| corrupt(format!("{what}: {e}")))
}

/// A value as the JSON text a column holds.
pub(crate) fn to_json<T: Serialize + ?Sized>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| corrupt(format!("cannot encode JSON: {e}")))
}

/// A JSON column read back; `what` names it in the error.
pub(crate) fn from_json<T: DeserializeOwned>(json: &str, what: &str) -> Result<T> {
    serde_json::from_str(json).map_err(|e| corrupt(format!("{what}: {e}")))
}

/// Stored data that cannot be what this code wrote.
pub(crate) fn corrupt(message: String) -> InboxError {
    InboxError::Store(StoreError::Corrupt(message))
}
