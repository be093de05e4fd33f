//! `inbox_requests`: approval and elicitation requests (`kind`), keyed by the id of the event
//! that opened them; pending until a decision, an answer, an expiry or a withdrawal settles
//! them (`status`, `result`), at most once.

use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use super::Conn;
use crate::error::Result;

/// Stores a new pending request of `kind` (`approval` or `elicitation`).
pub(crate) async fn insert(
    conn: &mut Conn,
    id: &str,
    kind: &str,
    task_id: &str,
    project_id: &str,
    request_json: &str,
    now: i64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO inbox_requests (id, kind, task_id, project_id, status, request, \
         created_at) VALUES (?, ?, ?, ?, 'pending', ?, ?)",
    )
    .bind(id)
    .bind(kind)
    .bind(task_id)
    .bind(project_id)
    .bind(request_json)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

/// A request's task, status and body.
pub(crate) struct Stored {
    pub task_id: String,
    pub status: String,
    pub request: String,
}

/// The request `id` of `kind`, if there is one.
pub(crate) async fn get(conn: &mut Conn, id: &str, kind: &str) -> Result<Option<Stored>> {
    let row = sqlx::query(
        "SELECT task_id, status, request FROM inbox_requests WHERE id = ? AND kind = ?",
    )
    .bind(id)
    .bind(kind)
    .fetch_optional(conn)
    .await?;
    row.map(|row| {
        Ok(Stored {
            task_id: row.try_get("task_id")?,
            status: row.try_get("status")?,
            request: row.try_get("request")?,
        })
    })
    .transpose()
}

/// Settles the request with `status` and `result` — only if it is still pending; `false`
/// when it was not. The guard that makes a decision happen once, whatever the isolation
/// level: of two racing decisions, only one finds the row still pending.
pub(crate) async fn settle(
    conn: &mut Conn,
    id: &str,
    status: &str,
    result_json: &str,
    decided_by: &str,
    decided_at_ms: i64,
) -> Result<bool> {
    let updated = sqlx::query(
        "UPDATE inbox_requests SET status = ?, result = ?, decided_by = ?, \
         decided_at = ? WHERE id = ? AND status = 'pending'",
    )
    .bind(status)
    .bind(result_json)
    .bind(decided_by)
    .bind(decided_at_ms)
    .bind(id)
    .execute(conn)
    .await?
    .rows_affected();
    Ok(updated == 1)
}

/// How many of the task's requests are pending.
pub(crate) async fn pending_of_task(conn: &mut Conn, task_id: &str) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT COUNT(*) FROM inbox_requests WHERE task_id = ? AND status = 'pending'",
    )
    .bind(task_id)
    .fetch_one(conn)
    .await?)
}

/// A pending request of a task, as the task's detail lists it.
pub(crate) struct Open {
    pub id: String,
    pub kind: String,
    pub request: String,
    /// When it was asked (ms): its event's time.
    pub asked_at: i64,
}

/// The task's pending requests, oldest first.
pub(crate) async fn open_of_task(conn: &mut Conn, task_id: &str) -> Result<Vec<Open>> {
    let rows = sqlx::query(
        "SELECT r.id, r.kind, r.request, e.timestamp FROM inbox_requests r \
         JOIN inbox_events e ON e.id = r.id \
         WHERE r.task_id = ? AND r.status = 'pending' ORDER BY e.seq",
    )
    .bind(task_id)
    .fetch_all(conn)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(Open {
                id: row.try_get("id")?,
                kind: row.try_get("kind")?,
                request: row.try_get("request")?,
                asked_at: row.try_get("timestamp")?,
            })
        })
        .collect()
}

/// What an agent polls: a request's status, result and expiry time.
pub(crate) struct Outcome {
    pub status: String,
    pub result: Option<String>,
    pub expires_at: Option<i64>,
}

/// The outcome of the request `id` of `kind` on one of `owner`'s tasks.
pub(crate) async fn outcome_of(
    conn: &mut Conn,
    owner: &str,
    id: &str,
    kind: &str,
) -> Result<Option<Outcome>> {
    let row = sqlx::query(
        "SELECT r.status, r.result, r.expires_at FROM inbox_requests r \
         JOIN inbox_tasks t ON t.id = r.task_id \
         WHERE r.id = ? AND r.kind = ? AND t.owner_key = ?",
    )
    .bind(id)
    .bind(kind)
    .bind(owner)
    .fetch_optional(conn)
    .await?;
    row.map(|row| {
        Ok(Outcome {
            status: row.try_get("status")?,
            result: row.try_get("result")?,
            expires_at: row.try_get("expires_at")?,
        })
    })
    .transpose()
}

/// A request as a withdrawal finds it: its task, status and result.
pub(crate) struct Settling {
    pub task_id: String,
    pub status: String,
    pub result: Option<String>,
}

/// The request `id`, limited to `owner`'s tasks and to `kind` when given.
pub(crate) async fn settling(
    conn: &mut Conn,
    id: &str,
    owner: Option<&str>,
    kind: Option<&str>,
) -> Result<Option<Settling>> {
    let row = sqlx::query(
        "SELECT r.task_id, r.status, r.result FROM inbox_requests r \
         JOIN inbox_tasks t ON t.id = r.task_id \
         WHERE r.id = ?1 AND (?2 IS NULL OR t.owner_key = ?2) \
         AND (?3 IS NULL OR r.kind = ?3)",
    )
    .bind(id)
    .bind(owner)
    .bind(kind)
    .fetch_optional(conn)
    .await?;
    row.map(|row| {
        Ok(Settling {
            task_id: row.try_get("task_id")?,
            status: row.try_get("status")?,
            result: row.try_get("result")?,
        })
    })
    .transpose()
}

// ---- policy and expiry ----------------------------------------------------------------------

/// The creation times (ms) of the `max` most recent requests with `action` created after
/// `since`, newest first.
pub(crate) async fn recent_with_action(
    conn: &mut Conn,
    action: &str,
    since: i64,
    max: u32,
) -> Result<Vec<i64>> {
    Ok(sqlx::query_scalar(
        "SELECT created_at FROM inbox_requests WHERE action = ? AND created_at > ? \
         ORDER BY created_at DESC LIMIT ?",
    )
    .bind(action)
    .bind(since)
    .bind(i64::from(max))
    .fetch_all(conn)
    .await?)
}

pub(crate) async fn created_at(conn: &mut Conn, id: &str) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT created_at FROM inbox_requests WHERE id = ?")
            .bind(id)
            .fetch_one(conn)
            .await?,
    )
}

/// Records the request's `keyValueContext.action` and when it expires.
pub(crate) async fn set_action_and_expiry(
    conn: &mut Conn,
    id: &str,
    action: Option<&str>,
    expires_at: Option<i64>,
) -> Result<()> {
    sqlx::query("UPDATE inbox_requests SET action = ?, expires_at = ? WHERE id = ?")
        .bind(action)
        .bind(expires_at)
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Marks a settled request `expired` (a decision whose status says it timed out).
pub(crate) async fn mark_expired(conn: &mut Conn, id: &str) -> Result<()> {
    sqlx::query("UPDATE inbox_requests SET status = 'expired' WHERE id = ?")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// `(id, kind)` of at most `limit` pending requests due to expire at `now`, soonest first.
pub(crate) async fn overdue(
    conn: &mut Conn,
    now: i64,
    limit: i64,
) -> Result<Vec<(String, String)>> {
    let rows = sqlx::query(
        "SELECT id, kind FROM inbox_requests WHERE status = 'pending' \
         AND expires_at IS NOT NULL AND expires_at <= ? ORDER BY expires_at LIMIT ?",
    )
    .bind(now)
    .bind(limit)
    .fetch_all(conn)
    .await?;
    rows.iter()
        .map(|row| Ok((row.try_get("id")?, row.try_get("kind")?)))
        .collect()
}

/// The kind of the request `id` if it is pending and due to expire at `now` (and of `kind`,
/// when given).
pub(crate) async fn overdue_kind(
    conn: &mut Conn,
    id: &str,
    now: i64,
    kind: Option<&str>,
) -> Result<Option<String>> {
    Ok(sqlx::query_scalar(
        "SELECT kind FROM inbox_requests WHERE id = ?1 AND status = 'pending' \
         AND expires_at IS NOT NULL AND expires_at <= ?2 AND (?3 IS NULL OR kind = ?3)",
    )
    .bind(id)
    .bind(now)
    .bind(kind)
    .fetch_optional(conn)
    .await?)
}

/// When the next pending request expires (ms), if any does.
pub(crate) async fn next_expiry(conn: &mut Conn) -> Result<Option<i64>> {
    Ok(sqlx::query_scalar(
        "SELECT MIN(expires_at) FROM inbox_requests WHERE status = 'pending' \
         AND expires_at IS NOT NULL",
    )
    .fetch_one(conn)
    .await?)
}

// ---- what reviewers list and see ------------------------------------------------------------

// The summary and an approval's outcome are read with json_extract so a page of the inbox
// parses no request bodies. Filters use `?n IS NULL OR …` so the query stays one literal.
macro_rules! summary_select {
    () => {
        "SELECT r.id, r.kind, r.status, r.task_id, r.created_at, r.decided_at, r.decided_by, \
         json_extract(r.request, '$.summary') AS summary, \
         json_extract(r.result, '$.outcome.type') AS outcome, \
         t.name AS task_name, t.external_id AS task_external_id, \
         t.owner_key AS task_owner, p.name AS project_name \
         FROM inbox_requests r \
         JOIN inbox_tasks t ON t.id = r.task_id \
         JOIN inbox_projects p ON p.id = r.project_id "
    };
}
macro_rules! filter_where {
    () => {
        "WHERE (?1 IS NULL OR r.status = ?1) AND (?2 IS NULL OR p.name = ?2) \
         AND (?3 IS NULL OR r.kind = ?3) \
         AND (?4 IS NULL OR substr(r.id, 1, length(?4)) = ?4) "
    };
}

/// One line of the inbox as stored (the enums in their wire spelling).
pub(crate) struct SummaryRow {
    pub id: String,
    pub kind: String,
    pub status: String,
    pub project_name: String,
    pub task_id: String,
    pub task_name: String,
    pub summary: Option<String>,
    pub created_at: i64,
    pub decided_at: Option<i64>,
    pub decided_by: Option<String>,
    pub outcome: Option<String>,
    pub task_external_id: Option<String>,
    pub task_owner: String,
}

/// Which requests [`list`] and [`count`] take; `None` matches anything.
pub(crate) struct Filter<'a> {
    pub status: Option<&'a str>,
    pub project: Option<&'a str>,
    pub kind: Option<&'a str>,
    pub id_prefix: Option<&'a str>,
}

/// At most `limit` matching requests, newest first, created before `before` (`(created_at,
/// id)` of the previous page's last line).
pub(crate) async fn list(
    conn: &mut Conn,
    filter: &Filter<'_>,
    before: Option<(i64, &str)>,
    limit: i64,
) -> Result<Vec<SummaryRow>> {
    let (before_at, before_id) = before.unzip();
    let rows = sqlx::query(concat!(
        summary_select!(),
        filter_where!(),
        "AND (?5 IS NULL OR r.created_at < ?5 OR (r.created_at = ?5 AND r.id < ?6)) \
         ORDER BY r.created_at DESC, r.id DESC LIMIT ?7"
    ))
    .bind(filter.status)
    .bind(filter.project)
    .bind(filter.kind)
    .bind(filter.id_prefix)
    .bind(before_at)
    .bind(before_id)
    .bind(limit)
    .fetch_all(conn)
    .await?;
    rows.iter().map(summary_from_row).collect()
}

/// How many requests match, over all pages.
pub(crate) async fn count(conn: &mut Conn, filter: &Filter<'_>) -> Result<i64> {
    Ok(sqlx::query_scalar(concat!(
        "SELECT COUNT(*) FROM inbox_requests r \
         JOIN inbox_projects p ON p.id = r.project_id ",
        filter_where!()
    ))
    .bind(filter.status)
    .bind(filter.project)
    .bind(filter.kind)
    .bind(filter.id_prefix)
    .fetch_one(conn)
    .await?)
}

/// One request's line, whoever created it.
pub(crate) async fn summary(conn: &mut Conn, id: &str) -> Result<Option<SummaryRow>> {
    let row = sqlx::query(concat!(summary_select!(), "WHERE r.id = ?"))
        .bind(id)
        .fetch_optional(conn)
        .await?;
    row.as_ref().map(summary_from_row).transpose()
}

/// `(request, result)` JSON of the request `id`.
pub(crate) async fn bodies(conn: &mut Conn, id: &str) -> Result<(String, Option<String>)> {
    let row = sqlx::query("SELECT request, result FROM inbox_requests WHERE id = ?")
        .bind(id)
        .fetch_one(conn)
        .await?;
    Ok((row.try_get("request")?, row.try_get("result")?))
}

/// How many requests wait for a human.
pub(crate) async fn pending_count(conn: &mut Conn) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT COUNT(*) FROM inbox_requests WHERE status = 'pending'")
            .fetch_one(conn)
            .await?,
    )
}

fn summary_from_row(row: &SqliteRow) -> Result<SummaryRow> {
    Ok(SummaryRow {
        id: row.try_get("id")?,
        kind: row.try_get("kind")?,
        status: row.try_get("status")?,
        project_name: row.try_get("project_name")?,
        task_id: row.try_get("task_id")?,
        task_name: row.try_get("task_name")?,
        summary: row.try_get("summary")?,
        created_at: row.try_get("created_at")?,
        decided_at: row.try_get("decided_at")?,
        decided_by: row.try_get("decided_by")?,
        outcome: row.try_get("outcome")?,
        task_external_id: row.try_get("task_external_id")?,
        task_owner: row.try_get("task_owner")?,
    })
}

// ---- the agents' decisions feed -------------------------------------------------------------

/// A request settled by the event `seq`, as the feed reads it.
pub(crate) struct SettledRow {
    pub seq: i64,
    pub id: String,
    pub kind: String,
    pub status: String,
    pub result: Option<String>,
}

/// The settling events of `owner`'s requests after `after` (a `seq`), at most `limit`, in
/// order: a decision, an answer, an expiry (`TIMEOUT`), or an agent's withdrawal note.
pub(crate) async fn settled_after(
    conn: &mut Conn,
    owner: &str,
    after: i64,
    limit: u32,
) -> Result<Vec<SettledRow>> {
    let rows = sqlx::query(
        "SELECT e.seq, r.id, r.kind, r.status, r.result FROM inbox_events e \
         JOIN inbox_requests r ON r.id = e.in_response_to \
         JOIN inbox_tasks t ON t.id = r.task_id \
         WHERE e.seq > ?1 AND t.owner_key = ?2 AND r.status <> 'pending' \
         AND (e.event_type IN ('APPROVAL_DECIDED', 'ELICITATION_PROVIDED', 'TIMEOUT') \
              OR (e.event_type = 'NOTE' AND e.source = 'AGENT')) \
         ORDER BY e.seq LIMIT ?3",
    )
    .bind(after)
    .bind(owner)
    .bind(i64::from(limit))
    .fetch_all(conn)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(SettledRow {
                seq: row.try_get("seq")?,
                id: row.try_get("id")?,
                kind: row.try_get("kind")?,
                status: row.try_get("status")?,
                result: row.try_get("result")?,
            })
        })
        .collect()
}
