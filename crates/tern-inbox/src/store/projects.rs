//! `inbox_projects`: a project's name and its steps (JSON).

use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use tern_store::now_ms;

use super::{Conn, from_json, new_id, to_json};
use crate::error::{InboxError, Result};
use crate::model::{Project, Steps};

/// Every project, by name.
pub(crate) async fn all(conn: &mut Conn) -> Result<Vec<Project>> {
    let rows = sqlx::query("SELECT id, name, steps FROM inbox_projects ORDER BY name")
        .fetch_all(conn)
        .await?;
    rows.iter().map(from_row).collect()
}

pub(crate) async fn by_name(conn: &mut Conn, name: &str) -> Result<Option<Project>> {
    let row = sqlx::query("SELECT id, name, steps FROM inbox_projects WHERE name = ?")
        .bind(name)
        .fetch_optional(conn)
        .await?;
    row.as_ref().map(from_row).transpose()
}

pub(crate) async fn by_id(conn: &mut Conn, id: &str) -> Result<Project> {
    let row = sqlx::query("SELECT id, name, steps FROM inbox_projects WHERE id = ?")
        .bind(id)
        .fetch_optional(conn)
        .await?
        .ok_or_else(|| InboxError::NotFound(format!("project {id}")))?;
    from_row(&row)
}

/// Stores a new project named `name` (the caller checked that the name is free).
pub(crate) async fn insert(conn: &mut Conn, name: &str, steps: Steps) -> Result<Project> {
    let project = Project {
        id: new_id(),
        name: name.to_owned(),
        project_name: name.to_owned(),
        steps,
    };
    sqlx::query("INSERT INTO inbox_projects (id, name, steps, created_at) VALUES (?, ?, ?, ?)")
        .bind(&project.id)
        .bind(name)
        .bind(to_json(&project.steps)?)
        .bind(now_ms())
        .execute(conn)
        .await?;
    Ok(project)
}

fn from_row(row: &SqliteRow) -> Result<Project> {
    let name: String = row.try_get("name")?;
    let steps: String = row.try_get("steps")?;
    Ok(Project {
        id: row.try_get("id")?,
        project_name: name.clone(),
        name,
        steps: from_json(&steps, "project steps")?,
    })
}
