//! `inbox_tasks`: a task, the agent key that owns it, its step, metadata and attachments.

use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use super::{Conn, from_json, to_json, wire_enum};
use crate::error::{InboxError, Result};
use crate::model::Task;

// Keep the column list in one place; a macro so the queries stay `'static` literals.
macro_rules! task_cols {
    () => {
        "id, project_id, owner_key, name, external_id, status, current_step, metadata, \
         attachments"
    };
}

/// A task with the key that owns it.
pub(crate) struct OwnedTask {
    pub task: Task,
    pub owner: String,
}

/// Stores a new task of `owner`, created and updated at `now`.
pub(crate) async fn insert(conn: &mut Conn, owner: &str, task: &Task, now: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO inbox_tasks (id, project_id, owner_key, name, external_id, status, \
         current_step, metadata, attachments, created_at, updated_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(&task.id)
    .bind(&task.project_id)
    .bind(owner)
    .bind(&task.name)
    .bind(&task.external_id)
    .bind(task.status.as_str())
    .bind(&task.current_step)
    .bind(to_json(&task.metadata)?)
    .bind(to_json(&task.attachments)?)
    .bind(now)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

/// Writes what a task's events change: status, step, metadata, attachments.
pub(crate) async fn save(conn: &mut Conn, task: &Task, now: i64) -> Result<()> {
    sqlx::query(
        "UPDATE inbox_tasks SET status = ?, current_step = ?, metadata = ?, attachments = ?, \
         updated_at = ? WHERE id = ?",
    )
    .bind(task.status.as_str())
    .bind(&task.current_step)
    .bind(to_json(&task.metadata)?)
    .bind(to_json(&task.attachments)?)
    .bind(now)
    .bind(&task.id)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn by_id(conn: &mut Conn, id: &str) -> Result<OwnedTask> {
    let row = sqlx::query(concat!(
        "SELECT ",
        task_cols!(),
        " FROM inbox_tasks WHERE id = ?"
    ))
    .bind(id)
    .fetch_optional(conn)
    .await?
    .ok_or_else(|| InboxError::NotFound(format!("task {id}")))?;
    from_row(&row)
}

/// `owner`'s tasks, newest first; with `project_id`, only that project's.
pub(crate) async fn of_owner(
    conn: &mut Conn,
    owner: &str,
    project_id: Option<&str>,
) -> Result<Vec<Task>> {
    let rows = sqlx::query(concat!(
        "SELECT ",
        task_cols!(),
        " FROM inbox_tasks WHERE owner_key = ? AND (? IS NULL OR project_id = ?) \
         ORDER BY created_at DESC, id DESC"
    ))
    .bind(owner)
    .bind(project_id)
    .bind(project_id)
    .fetch_all(conn)
    .await?;
    rows.iter().map(|row| Ok(from_row(row)?.task)).collect()
}

/// A task's `externalId`.
pub(crate) async fn external_id(conn: &mut Conn, id: &str) -> Result<Option<String>> {
    Ok(
        sqlx::query_scalar("SELECT external_id FROM inbox_tasks WHERE id = ?")
            .bind(id)
            .fetch_one(conn)
            .await?,
    )
}

/// Whether `owner` has a task whose `externalId` is `external_id`.
pub(crate) async fn owner_has_external_id(
    conn: &mut Conn,
    owner: &str,
    external_id: &str,
    since_ms: i64,
) -> Result<bool> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM inbox_tasks \
         WHERE owner_key = ? AND external_id = ? AND created_at >= ?",
    )
    .bind(owner)
    .bind(external_id)
    .bind(since_ms)
    .fetch_one(conn)
    .await?;
    Ok(n > 0)
}

fn from_row(row: &SqliteRow) -> Result<OwnedTask> {
    let status: String = row.try_get("status")?;
    let metadata: String = row.try_get("metadata")?;
    let attachments: String = row.try_get("attachments")?;
    Ok(OwnedTask {
        owner: row.try_get("owner_key")?,
        task: Task {
            id: row.try_get("id")?,
            project_id: row.try_get("project_id")?,
            name: row.try_get("name")?,
            external_id: row.try_get("external_id")?,
            status: wire_enum(status, "task status")?,
            current_step: row.try_get("current_step")?,
            metadata: from_json(&metadata, "task metadata")?,
            attachments: from_json(&attachments, "task attachments")?,
        },
    })
}
