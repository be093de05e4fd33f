//! `inbox_uploads`: who uploaded which content (by SHA-256), its declared type and name.

use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use super::Conn;
use crate::error::{InboxError, Result};
use crate::outcome::Timestamp;
use crate::uploads::Upload;

macro_rules! upload_cols {
    () => {
        "id, owner_key, sha256, size, content_type, file_name, created_at"
    };
}

pub(crate) async fn insert(conn: &mut Conn, upload: &Upload) -> Result<()> {
    sqlx::query(concat!(
        "INSERT INTO inbox_uploads (",
        upload_cols!(),
        ") VALUES (?, ?, ?, ?, ?, ?, ?)"
    ))
    .bind(&upload.id)
    .bind(&upload.owner_key)
    .bind(&upload.sha256)
    .bind(i64::try_from(upload.size).unwrap_or(i64::MAX))
    .bind(&upload.content_type)
    .bind(&upload.file_name)
    .bind(upload.created_at.unix_millis())
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) async fn by_id(conn: &mut Conn, id: &str) -> Result<Upload> {
    let row = sqlx::query(concat!(
        "SELECT ",
        upload_cols!(),
        " FROM inbox_uploads WHERE id = ?"
    ))
    .bind(id)
    .fetch_optional(conn)
    .await?
    .ok_or_else(|| InboxError::NotFound(format!("upload {id}")))?;
    from_row(&row)
}

/// Whether `id` is an upload of `owner`.
pub(crate) async fn is_owned(conn: &mut Conn, owner: &str, id: &str) -> Result<bool> {
    let found: Option<i64> =
        sqlx::query_scalar("SELECT 1 FROM inbox_uploads WHERE id = ? AND owner_key = ?")
            .bind(id)
            .bind(owner)
            .fetch_optional(conn)
            .await?;
    Ok(found.is_some())
}

fn from_row(row: &SqliteRow) -> Result<Upload> {
    let size: i64 = row.try_get("size")?;
    Ok(Upload {
        id: row.try_get("id")?,
        owner_key: row.try_get("owner_key")?,
        sha256: row.try_get("sha256")?,
        size: u64::try_from(size).unwrap_or(0),
        content_type: row.try_get("content_type")?,
        file_name: row.try_get("file_name")?,
        created_at: Timestamp::from_unix_millis(row.try_get("created_at")?),
    })
}
