//! A session's task list (`todos` table, migration 0017), written by the `todo` tool.
//!
//! The list lives here rather than in the transcript so that the agent can show it to the
//! model every turn and carry its unfinished items through a compaction from the store, not
//! from the model's memory of it.
//!
//! # Flow
//!
//! [`Store::write_todos`] checks every item (ids, text, bounds) before anything is written,
//! then, in one write transaction, either replaces the whole list (a fresh plan) or merges the
//! items into it by id (new ids are appended, known ones updated). An item keeps its
//! `created_at` when a replacement names it again; `updated_at` moves only when it changed.
//! [`Store::todos`] reads the list back in order.

use serde::Serialize;
use sqlx::Row;

use crate::{Store, StoreError, now_ms};

/// Most items in one session's list: the list is shown to the model every turn, so it must
/// stay a plan, not a log.
pub const MAX_TODOS: usize = 100;
/// Longest item text, in characters.
pub const MAX_TODO_CHARS: usize = 500;
/// Longest item id, in characters.
pub const MAX_TODO_ID_CHARS: usize = 64;

/// Where an item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Completed,
    Cancelled,
}

crate::stored_as_text!(TodoStatus, "todo status", {
    Pending => "pending",
    InProgress => "in_progress",
    Completed => "completed",
    Cancelled => "cancelled",
});

impl TodoStatus {
    /// Pending or in progress: still to be done.
    pub fn is_open(self) -> bool {
        matches!(self, TodoStatus::Pending | TodoStatus::InProgress)
    }
}

/// One item of a session's list. Times are milliseconds since the epoch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Todo {
    pub id: String,
    pub content: String,
    pub status: TodoStatus,
    pub created_at: i64,
    pub updated_at: i64,
}

/// An item to write: a new one needs `content` (its status defaults to pending); for a known
/// id in a merge, what is `None` stays as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TodoWrite {
    pub id: String,
    pub content: Option<String>,
    pub status: Option<TodoStatus>,
}

/// Why a write was refused; nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum TodoError {
    /// The items break a rule (empty or duplicate id, missing or overlong text, too many).
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for TodoError {
    fn from(e: sqlx::Error) -> Self {
        TodoError::Store(e.into())
    }
}

impl Store {
    /// The session's list, in order (empty for a session without one).
    pub async fn todos(&self, session_id: &str) -> Result<Vec<Todo>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, content, status, created_at, updated_at FROM todos \
             WHERE session_id = ? ORDER BY position",
        )
        .bind(session_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let status: String = r.try_get(2)?;
                Ok(Todo {
                    id: r.try_get(0)?,
                    content: r.try_get(1)?,
                    status: TodoStatus::parse(&status)?,
                    created_at: r.try_get(3)?,
                    updated_at: r.try_get(4)?,
                })
            })
            .collect()
    }

    /// Writes `items` to the session's list and returns the list as it is now: with `merge`,
    /// known ids are updated and new ones appended; without, the list becomes `items`.
    /// Nothing is written when any item is refused.
    pub async fn write_todos(
        &self,
        session_id: &str,
        items: &[TodoWrite],
        merge: bool,
    ) -> Result<Vec<Todo>, TodoError> {
        let items = checked(items)?;
        let mut tx = self.begin_write().await?;
        let exists: Option<i64> = sqlx::query_scalar("SELECT 1 FROM sessions WHERE id = ?")
            .bind(session_id)
            .fetch_optional(&mut *tx)
            .await?;
        if exists.is_none() {
            return Err(StoreError::SessionNotFound(session_id.to_owned()).into());
        }
        let before: Vec<(String, String, String, i64, i64)> = sqlx::query_as(
            "SELECT id, content, status, created_at, updated_at FROM todos WHERE session_id = ? \
             ORDER BY position",
        )
        .bind(session_id)
        .fetch_all(&mut *tx)
        .await?;
        let now = now_ms();
        // The list as it will be: (id, content, status, created_at, changed).
        let mut after: Vec<(String, String, TodoStatus, i64, bool)> = Vec::new();
        if merge {
            for (id, content, status, created, _) in before.iter() {
                after.push((
                    id.clone(),
                    content.clone(),
                    TodoStatus::parse(status)?,
                    *created,
                    false,
                ));
            }
        }
        for item in &items {
            let old = before.iter().find(|b| b.0 == item.id);
            if let Some(row) = after.iter_mut().find(|a| a.0 == item.id) {
                // Merging into a known item: only what was given changes.
                if let Some(c) = &item.content
                    && *c != row.1
                {
                    row.1 = c.clone();
                    row.4 = true;
                }
                if let Some(s) = item.status
                    && s != row.2
                {
                    row.2 = s;
                    row.4 = true;
                }
                continue;
            }
            let content = match (&item.content, old) {
                (Some(c), _) => c.clone(),
                // A replacement may name a known item by id alone.
                (None, Some(o)) => o.1.clone(),
                (None, None) => {
                    return Err(TodoError::Invalid(format!(
                        "todo item {:?} is new and needs its content",
                        item.id
                    )));
                }
            };
            let status = match (item.status, old) {
                (Some(s), _) => s,
                (None, Some(o)) => TodoStatus::parse(&o.2)?,
                (None, None) => TodoStatus::Pending,
            };
            let changed = old.is_none_or(|o| o.1 != content || o.2 != status.as_str());
            let created = old.map_or(now, |o| o.3);
            after.push((item.id.clone(), content, status, created, changed));
        }
        if after.len() > MAX_TODOS {
            return Err(TodoError::Invalid(format!(
                "the list would have {} items; at most {MAX_TODOS} are kept: finish, cancel or \
                 merge items, or replace the list with a shorter plan",
                after.len()
            )));
        }
        // Rewritten whole: at most MAX_TODOS rows, and positions stay 0..n.
        sqlx::query("DELETE FROM todos WHERE session_id = ?")
            .bind(session_id)
            .execute(&mut *tx)
            .await?;
        for (pos, (id, content, status, created, changed)) in after.iter().enumerate() {
            let updated = if *changed {
                now
            } else {
                before.iter().find(|b| b.0 == *id).map_or(now, |b| b.4)
            };
            sqlx::query(
                "INSERT INTO todos (session_id, id, position, content, status, created_at, \
                 updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(session_id)
            .bind(id)
            .bind(i64::try_from(pos).unwrap_or(i64::MAX))
            .bind(content)
            .bind(status.as_str())
            .bind(created)
            .bind(updated)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        self.todos(session_id).await.map_err(Into::into)
    }
}

/// The items trimmed and checked: ids non-empty, short and unique; text non-empty and within
/// bounds; not more than [`MAX_TODOS`] at once.
fn checked(items: &[TodoWrite]) -> Result<Vec<TodoWrite>, TodoError> {
    if items.len() > MAX_TODOS {
        return Err(TodoError::Invalid(format!(
            "{} items given; a list holds at most {MAX_TODOS}",
            items.len()
        )));
    }
    let mut out: Vec<TodoWrite> = Vec::with_capacity(items.len());
    for item in items {
        let id = item.id.trim();
        if id.is_empty() {
            return Err(TodoError::Invalid("a todo item needs an id".into()));
        }
        if id.chars().count() > MAX_TODO_ID_CHARS {
            return Err(TodoError::Invalid(format!(
                "todo id {:?}… is longer than {MAX_TODO_ID_CHARS} characters",
                id.chars().take(20).collect::<String>()
            )));
        }
        if out.iter().any(|o| o.id == id) {
            return Err(TodoError::Invalid(format!(
                "todo id {id:?} is given twice; give each item once"
            )));
        }
        let content = match item.content.as_deref().map(str::trim) {
            Some("") => {
                return Err(TodoError::Invalid(format!(
                    "todo item {id:?} has empty content"
                )));
            }
            Some(c) if c.chars().count() > MAX_TODO_CHARS => {
                return Err(TodoError::Invalid(format!(
                    "todo item {id:?} has {} characters; at most {MAX_TODO_CHARS}: keep an \
                     item to a short task description",
                    c.chars().count()
                )));
            }
            other => other.map(str::to_owned),
        };
        out.push(TodoWrite {
            id: id.to_owned(),
            content,
            status: item.status,
        });
    }
    Ok(out)
}
