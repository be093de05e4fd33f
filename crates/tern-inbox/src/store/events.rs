//! `inbox_events`: each task's log, in one sequence (`seq`) over all tasks.

use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use super::{Conn, from_json, new_id, to_json, wire_enum};
use crate::error::Result;
use crate::model::{Actor, EventRow, EventType, Payload, Task};
use crate::outcome::Timestamp;

macro_rules! event_cols {
    () => {
        "seq, id, project_id, task_id, timestamp, event_type, owner, source, payload, \
         in_response_to, transition_from, transition_to, external_trace_id"
    };
}

/// An event about to be appended to a task's log.
pub(crate) struct NewEvent<'a> {
    pub event_type: EventType,
    pub source: Actor,
    pub payload: Payload,
    pub in_response_to: Option<&'a str>,
    /// `(from, to)` when the event moved the task to another step.
    pub transition: Option<(String, String)>,
    pub external_trace_id: Option<&'a str>,
}

impl NewEvent<'_> {
    pub(crate) fn new(event_type: EventType, source: Actor, payload: Payload) -> Self {
        NewEvent {
            event_type,
            source,
            payload,
            in_response_to: None,
            transition: None,
            external_trace_id: None,
        }
    }
}

/// Appends an event to the task's log and returns its id; `task` is the task as the event
/// leaves it, `owner` who owns the step it is in.
pub(crate) async fn insert(
    conn: &mut Conn,
    task: &Task,
    owner: Actor,
    event: NewEvent<'_>,
    now: i64,
) -> Result<String> {
    let id = new_id();
    let (from, to) = event.transition.unzip();
    sqlx::query(
        "INSERT INTO inbox_events (id, project_id, task_id, timestamp, event_type, owner, \
         source, payload, in_response_to, transition_from, transition_to, external_trace_id) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(&id)
    .bind(&task.project_id)
    .bind(&task.id)
    .bind(now)
    .bind(event.event_type.as_str())
    .bind(owner.as_str())
    .bind(event.source.as_str())
    .bind(to_json(&event.payload)?)
    .bind(event.in_response_to)
    .bind(from)
    .bind(to)
    .bind(event.external_trace_id)
    .execute(conn)
    .await?;
    Ok(id)
}

/// At most `limit` of the task's events after `after` (a `seq`), in order, each with its
/// `seq`.
pub(crate) async fn page(
    conn: &mut Conn,
    task_id: &str,
    after: i64,
    limit: u32,
) -> Result<Vec<(i64, EventRow)>> {
    let rows = sqlx::query(concat!(
        "SELECT ",
        event_cols!(),
        " FROM inbox_events WHERE task_id = ? AND seq > ? ORDER BY seq LIMIT ?"
    ))
    .bind(task_id)
    .bind(after)
    .bind(i64::from(limit))
    .fetch_all(conn)
    .await?;
    rows.iter()
        .map(|row| Ok((row.try_get("seq")?, from_row(row)?)))
        .collect()
}

/// The `seq` of the newest event, if there is one.
pub(crate) async fn head(conn: &mut Conn) -> Result<Option<i64>> {
    Ok(sqlx::query_scalar("SELECT MAX(seq) FROM inbox_events")
        .fetch_one(conn)
        .await?)
}

fn from_row(row: &SqliteRow) -> Result<EventRow> {
    let payload: String = row.try_get("payload")?;
    Ok(EventRow {
        id: row.try_get("id")?,
        project_id: row.try_get("project_id")?,
        task_id: row.try_get("task_id")?,
        timestamp: Timestamp::from_unix_millis(row.try_get("timestamp")?),
        event_type: wire_enum(row.try_get("event_type")?, "event type")?,
        owner: wire_enum(row.try_get("owner")?, "event owner")?,
        source: wire_enum(row.try_get("source")?, "event source")?,
        payload: from_json(&payload, "event payload")?,
        in_response_to: row.try_get("in_response_to")?,
        transition_from: row.try_get("transition_from")?,
        transition_to: row.try_get("transition_to")?,
        external_trace_id: row.try_get("external_trace_id")?,
    })
}
