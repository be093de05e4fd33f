//! The tables of chat channels (`tern-channels` holds the runtime): each channel's cursor and
//! health, the events it received, the sessions of each chat, the requests posted to chats,
//! and the MCP elicitations the gateway waits on (which chats are shown like waits' requests).
//!
//! The two steps that make a channel exactly-once are single transactions here:
//! [`Store::channel_record`] (the events of one poll and the cursor after them) and
//! [`Store::channel_append_event`] (a message appended to its session and marked appended).

use serde::Serialize;
use sqlx::Row as _;

use crate::{Message, NewMessage, Result, Store, StoreError, now_ms};

/// An event to record (see `tern_channels::platform::Event`).
#[derive(Debug, Clone)]
pub struct NewChannelEvent<'a> {
    pub key: &'a str,
    pub chat_id: &'a str,
    /// `""` for the chat itself.
    pub thread_id: &'a str,
    pub user_id: &'a str,
    pub user_name: &'a str,
    /// `message`, `callback` or `reaction`.
    pub kind: &'a str,
    /// The event's particulars (JSON).
    pub payload: &'a str,
}

/// A recorded event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ChannelEvent {
    pub id: i64,
    pub channel: String,
    pub event_key: String,
    pub chat_id: String,
    pub thread_id: String,
    pub user_id: String,
    pub user_name: String,
    pub kind: String,
    pub payload: String,
    /// `pending`, `appended` or `done`.
    pub status: String,
    pub session_id: Option<String>,
    pub received_at: i64,
}

/// Where a session's output goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct SessionRoute {
    pub session_id: String,
    pub channel: String,
    pub chat_id: String,
    pub thread_id: String,
    pub created_at: i64,
}

/// An assistant message not yet sent to its chat.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Undelivered {
    pub session_id: String,
    pub chat_id: String,
    pub thread_id: String,
    pub seq: i64,
    pub content: String,
}

/// A request posted to a chat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ChannelPost {
    pub id: i64,
    pub channel: String,
    pub chat_id: String,
    pub thread_id: String,
    pub session_id: String,
    /// The wait whose request this is, or [`MCP_POST_PREFIX`] and the request's id.
    pub wait_id: String,
    pub request_id: String,
    pub kind: String,
    pub message_id: Option<String>,
    /// `open` or `settled`.
    pub status: String,
    pub created_at: i64,
}

/// A channel's health, as `tern channels status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ChannelHealth {
    pub channel: String,
    pub platform: String,
    pub cursor: Option<String>,
    pub updated_at: i64,
    pub last_ok_at: Option<i64>,
    pub last_error: Option<String>,
    pub last_error_at: Option<i64>,
    /// Events received and not yet handled.
    pub open_events: i64,
    /// Chats that have talked to the agent.
    pub chats: i64,
    /// Requests posted and not settled.
    pub open_posts: i64,
}

/// A file queued for a chat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ChannelFile {
    pub id: i64,
    pub session_id: String,
    pub path: String,
    pub name: String,
    pub caption: Option<String>,
    pub is_image: bool,
    pub chat_id: String,
    pub thread_id: String,
}

/// A post of an MCP elicitation has no wait: its `wait_id` is this prefix and the request's
/// id, which keeps `(channel, wait_id)` unique and tells the two kinds of post apart.
pub const MCP_POST_PREFIX: &str = "mcp-elicitation:";

macro_rules! post_cols {
    () => {
        "p.id, p.channel, p.chat_id, p.thread_id, p.session_id, p.wait_id, p.request_id, \
         p.kind, p.message_id, p.status, p.created_at"
    };
}

impl Store {
    /// The channel's committed cursor.
    pub async fn channel_cursor(&self, channel: &str) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT cursor FROM channel_cursors WHERE channel = ?")
                .bind(channel)
                .fetch_optional(self.pool())
                .await?
                .flatten(),
        )
    }

    /// Records one poll's events and the cursor after them, in one transaction. An event
    /// already recorded (same key) is not recorded again. Returns the ids of the new events.
    pub async fn channel_record(
        &self,
        channel: &str,
        platform: &str,
        events: &[NewChannelEvent<'_>],
        cursor: Option<&str>,
    ) -> Result<Vec<i64>> {
        let now = now_ms();
        let mut tx = self.begin_write().await?;
        let mut ids = Vec::new();
        for e in events {
            let id: Option<i64> = sqlx::query_scalar(
                "INSERT INTO channel_events (channel, event_key, chat_id, thread_id, user_id, \
                 user_name, kind, payload, status, received_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?) \
                 ON CONFLICT (channel, event_key) DO NOTHING RETURNING id",
            )
            .bind(channel)
            .bind(e.key)
            .bind(e.chat_id)
            .bind(e.thread_id)
            .bind(e.user_id)
            .bind(e.user_name)
            .bind(e.kind)
            .bind(e.payload)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            ids.extend(id);
        }
        sqlx::query(
            "INSERT INTO channel_cursors (channel, platform, cursor, updated_at, last_ok_at) \
             VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT (channel) DO UPDATE SET platform = excluded.platform, \
               cursor = COALESCE(excluded.cursor, channel_cursors.cursor), \
               updated_at = excluded.updated_at, last_ok_at = excluded.last_ok_at",
        )
        .bind(channel)
        .bind(platform)
        .bind(cursor)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(ids)
    }

    /// Notes a failed poll or send, for `tern channels status`.
    pub async fn channel_error(&self, channel: &str, platform: &str, error: &str) -> Result<()> {
        let now = now_ms();
        sqlx::query(
            "INSERT INTO channel_cursors (channel, platform, updated_at, last_error, last_error_at) \
             VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT (channel) DO UPDATE SET last_error = excluded.last_error, \
               last_error_at = excluded.last_error_at",
        )
        .bind(channel)
        .bind(platform)
        .bind(now)
        .bind(error)
        .bind(now)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Every channel's health.
    pub async fn channel_health(&self) -> Result<Vec<ChannelHealth>> {
        Ok(sqlx::query_as(
            "SELECT c.channel, c.platform, c.cursor, c.updated_at, c.last_ok_at, c.last_error, \
               c.last_error_at, \
               (SELECT COUNT(*) FROM channel_events e \
                  WHERE e.channel = c.channel AND e.status <> 'done') AS open_events, \
               (SELECT COUNT(*) FROM channel_chats h WHERE h.channel = c.channel) AS chats, \
               (SELECT COUNT(*) FROM channel_posts p \
                  WHERE p.channel = c.channel AND p.status = 'open') AS open_posts \
             FROM channel_cursors c ORDER BY c.channel",
        )
        .fetch_all(self.pool())
        .await?)
    }

    /// The channel's events not done yet, oldest first.
    pub async fn channel_open_events(&self, channel: &str) -> Result<Vec<ChannelEvent>> {
        Ok(sqlx::query_as(
            "SELECT id, channel, event_key, chat_id, thread_id, user_id, user_name, kind, \
               payload, status, session_id, received_at \
             FROM channel_events WHERE channel = ? AND status <> 'done' ORDER BY id",
        )
        .bind(channel)
        .fetch_all(self.pool())
        .await?)
    }

    /// Marks an event handled.
    pub async fn channel_event_done(&self, id: i64) -> Result<()> {
        sqlx::query("UPDATE channel_events SET status = 'done', handled_at = ? WHERE id = ?")
            .bind(now_ms())
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Appends `msg` to the session and marks the event appended to it, in one transaction:
    /// after a crash the message is either in the transcript and the event `appended`, or
    /// neither. Refused (`Ok(None)`) when the event is no longer pending.
    pub async fn channel_append_event(
        &self,
        event_id: i64,
        session_id: &str,
        msg: &NewMessage,
    ) -> Result<Option<Message>> {
        let mut tx = self.begin_write().await?;
        let r = sqlx::query(
            "UPDATE channel_events SET status = 'appended', session_id = ? \
             WHERE id = ? AND status = 'pending'",
        )
        .bind(session_id)
        .bind(event_id)
        .execute(&mut *tx)
        .await?;
        if r.rows_affected() == 0 {
            return Ok(None);
        }
        let mut out =
            crate::insert_messages(&mut tx, session_id, std::slice::from_ref(msg)).await?;
        if let Some(m) = out.last() {
            sqlx::query("UPDATE channel_events SET message_seq = ? WHERE id = ?")
                .bind(m.seq)
                .bind(event_id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(out.pop())
    }

    /// Whether the turn of an appended event ended with an answer: after its message, the
    /// session's last message is the assistant's, with text, no tool calls, and not the
    /// `[interrupted]` marker a crash repair appends.
    pub async fn channel_event_answered(&self, event_id: i64) -> Result<bool> {
        let row: Option<(Option<String>, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT m.role, m.content, m.tool_calls FROM channel_events e \
             JOIN messages m ON m.session_id = e.session_id \
             WHERE e.id = ? AND e.message_seq IS NOT NULL AND m.seq > e.message_seq \
             ORDER BY m.seq DESC LIMIT 1",
        )
        .bind(event_id)
        .fetch_optional(self.pool())
        .await?;
        Ok(match row {
            Some((Some(role), Some(content), calls)) => {
                role == "assistant"
                    && !content.is_empty()
                    && content != crate::waits::INTERRUPTED_MARKER
                    && calls.is_none_or(|c| c.is_empty() || c == "[]")
            }
            _ => false,
        })
    }

    /// Makes `session_id` the chat's current session (and one of its sessions).
    pub async fn channel_bind_session(
        &self,
        channel: &str,
        chat_id: &str,
        thread_id: &str,
        session_id: &str,
    ) -> Result<()> {
        let now = now_ms();
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO channel_sessions (session_id, channel, chat_id, thread_id, created_at) \
             VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id) DO NOTHING",
        )
        .bind(session_id)
        .bind(channel)
        .bind(chat_id)
        .bind(thread_id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO channel_chats (channel, chat_id, thread_id, session_id, updated_at) \
             VALUES (?, ?, ?, ?, ?) ON CONFLICT (channel, chat_id, thread_id) \
             DO UPDATE SET session_id = excluded.session_id, updated_at = excluded.updated_at",
        )
        .bind(channel)
        .bind(chat_id)
        .bind(thread_id)
        .bind(session_id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Sends what `session_id` says from now on to a chat, without making it the chat's
    /// current session (a scheduled job's run). Its messages so far are not sent. A session
    /// already routed to a chat keeps its route. Whether it is routed to this chat now.
    pub async fn channel_attach_session(
        &self,
        channel: &str,
        chat_id: &str,
        thread_id: &str,
        session_id: &str,
    ) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO channel_sessions (session_id, channel, chat_id, thread_id, delivered_seq, \
             created_at) VALUES (?, ?, ?, ?, \
             (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?), ?) \
             ON CONFLICT (session_id) DO NOTHING",
        )
        .bind(session_id)
        .bind(channel)
        .bind(chat_id)
        .bind(thread_id)
        .bind(session_id)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        let routed: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM channel_sessions WHERE session_id = ? AND channel = ? \
             AND chat_id = ? AND thread_id = ?)",
        )
        .bind(session_id)
        .bind(channel)
        .bind(chat_id)
        .bind(thread_id)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(routed)
    }

    /// The chat's current session, if it still exists.
    pub async fn channel_current_session(
        &self,
        channel: &str,
        chat_id: &str,
        thread_id: &str,
    ) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT c.session_id FROM channel_chats c JOIN sessions s ON s.id = c.session_id \
             WHERE c.channel = ? AND c.chat_id = ? AND c.thread_id = ?",
        )
        .bind(channel)
        .bind(chat_id)
        .bind(thread_id)
        .fetch_optional(self.pool())
        .await?)
    }

    /// The chat's sessions that still exist, newest first.
    pub async fn channel_chat_sessions(
        &self,
        channel: &str,
        chat_id: &str,
        thread_id: &str,
        limit: i64,
    ) -> Result<Vec<SessionRoute>> {
        Ok(sqlx::query_as(
            "SELECT c.session_id, c.channel, c.chat_id, c.thread_id, c.created_at \
             FROM channel_sessions c JOIN sessions s ON s.id = c.session_id \
             WHERE c.channel = ? AND c.chat_id = ? AND c.thread_id = ? \
             ORDER BY c.created_at DESC, c.rowid DESC LIMIT ?",
        )
        .bind(channel)
        .bind(chat_id)
        .bind(thread_id)
        .bind(limit)
        .fetch_all(self.pool())
        .await?)
    }

    /// Where every session of the channel sends its output.
    pub async fn channel_routes(&self, channel: &str) -> Result<Vec<SessionRoute>> {
        Ok(sqlx::query_as(
            "SELECT session_id, channel, chat_id, thread_id, created_at \
             FROM channel_sessions WHERE channel = ?",
        )
        .bind(channel)
        .fetch_all(self.pool())
        .await?)
    }

    /// The route of one session, on any channel.
    pub async fn channel_route(&self, session_id: &str) -> Result<Option<SessionRoute>> {
        Ok(sqlx::query_as(
            "SELECT session_id, channel, chat_id, thread_id, created_at \
             FROM channel_sessions WHERE session_id = ?",
        )
        .bind(session_id)
        .fetch_optional(self.pool())
        .await?)
    }

    /// The channel's assistant messages with text that were not sent to their chats yet, in
    /// order per session.
    pub async fn channel_undelivered(&self, channel: &str) -> Result<Vec<Undelivered>> {
        Ok(sqlx::query_as(
            "SELECT m.session_id, c.chat_id, c.thread_id, m.seq, m.content \
             FROM channel_sessions c JOIN messages m ON m.session_id = c.session_id \
             WHERE c.channel = ? AND m.seq > c.delivered_seq AND m.role = 'assistant' \
               AND m.content IS NOT NULL AND m.content <> '' \
             ORDER BY m.session_id, m.seq",
        )
        .bind(channel)
        .fetch_all(self.pool())
        .await?)
    }

    /// Records that the session's messages up to `seq` were sent to its chat.
    pub async fn channel_delivered(&self, session_id: &str, seq: i64) -> Result<()> {
        sqlx::query(
            "UPDATE channel_sessions SET delivered_seq = MAX(delivered_seq, ?) WHERE session_id = ?",
        )
        .bind(seq)
        .bind(session_id)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Marks every message of the session so far as delivered (a session bound to a chat
    /// with history, e.g. on `/resume`, does not replay it).
    pub async fn channel_delivered_all(&self, session_id: &str) -> Result<()> {
        sqlx::query(
            "UPDATE channel_sessions SET delivered_seq = \
               MAX(delivered_seq, (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE session_id = ?)) \
             WHERE session_id = ?",
        )
        .bind(session_id)
        .bind(session_id)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// The open waits (approval, elicitation, command) of the channel's sessions that have
    /// an inbox request and were not posted to their chat yet, oldest first.
    pub async fn channel_unposted_waits(&self, channel: &str) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT w.id FROM waits w JOIN channel_sessions c ON c.session_id = w.session_id \
             WHERE c.channel = ? AND w.status = 'pending' AND w.request_id IS NOT NULL \
               AND w.kind IN ('approval', 'elicitation', 'command') \
               AND NOT EXISTS (SELECT 1 FROM channel_posts p \
                                WHERE p.channel = c.channel AND p.wait_id = w.id) \
             ORDER BY w.created_at",
        )
        .bind(channel)
        .fetch_all(self.pool())
        .await?)
    }

    /// The pending MCP elicitations (see [`Store::mcp_elicitation_asked`]) of the channel's
    /// sessions not posted to their chat yet, oldest first: `(request_id, session_id)`.
    pub async fn channel_unposted_mcp_elicitations(
        &self,
        channel: &str,
    ) -> Result<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT m.request_id, m.session_id FROM mcp_elicitations m \
             JOIN channel_sessions c ON c.session_id = m.session_id \
             WHERE c.channel = ? \
               AND NOT EXISTS (SELECT 1 FROM channel_posts p \
                                WHERE p.channel = c.channel AND p.wait_id = ? || m.request_id) \
             ORDER BY m.created_at",
        )
        .bind(channel)
        .bind(MCP_POST_PREFIX)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| (r.get("request_id"), r.get("session_id")))
            .collect())
    }

    /// Records that the gateway asked an MCP server's question in the inbox for `session_id`
    /// and waits for its answer, so the session's chat is shown it.
    pub async fn mcp_elicitation_asked(&self, request_id: &str, session_id: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO mcp_elicitations (request_id, session_id, created_at) \
             VALUES (?, ?, ?) ON CONFLICT (request_id) DO NOTHING",
        )
        .bind(request_id)
        .bind(session_id)
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// The gateway no longer waits for the MCP elicitation's answer (answered the server,
    /// withdrew the request): a post of it is to be settled.
    pub async fn mcp_elicitation_ended(&self, request_id: &str) -> Result<()> {
        sqlx::query("DELETE FROM mcp_elicitations WHERE request_id = ?")
            .bind(request_id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Whether the gateway still waits for the MCP elicitation's answer.
    pub async fn mcp_elicitation_pending(&self, request_id: &str) -> Result<bool> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM mcp_elicitations WHERE request_id = ?)",
        )
        .bind(request_id)
        .fetch_one(self.pool())
        .await?)
    }

    /// Every MCP elicitation recorded as waited for, oldest first. At a start none can still
    /// be (the tool calls that asked ended with the process that held them): the caller
    /// withdraws each request, then ends its record.
    pub async fn mcp_elicitations_left(&self) -> Result<Vec<String>> {
        Ok(
            sqlx::query_scalar("SELECT request_id FROM mcp_elicitations ORDER BY created_at")
                .fetch_all(self.pool())
                .await?,
        )
    }

    /// Records a post before it is sent (so its id can be signed into the buttons); the
    /// existing post when the wait was posted already.
    pub async fn channel_post_create(&self, post: &ChannelPost) -> Result<ChannelPost> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO channel_posts (channel, chat_id, thread_id, session_id, wait_id, \
               request_id, kind, status, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'open', ?) \
             ON CONFLICT (channel, wait_id) DO NOTHING",
        )
        .bind(&post.channel)
        .bind(&post.chat_id)
        .bind(&post.thread_id)
        .bind(&post.session_id)
        .bind(&post.wait_id)
        .bind(&post.request_id)
        .bind(&post.kind)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        let row = sqlx::query_as(concat!(
            "SELECT ",
            post_cols!(),
            " FROM channel_posts p WHERE channel = ? AND wait_id = ?"
        ))
        .bind(&post.channel)
        .bind(&post.wait_id)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(row)
    }

    /// Records the platform's id of a sent post.
    pub async fn channel_post_sent(&self, id: i64, message_id: &str) -> Result<()> {
        sqlx::query("UPDATE channel_posts SET message_id = ? WHERE id = ?")
            .bind(message_id)
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    pub async fn channel_post(&self, id: i64) -> Result<Option<ChannelPost>> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            post_cols!(),
            " FROM channel_posts p WHERE id = ?"
        ))
        .bind(id)
        .fetch_optional(self.pool())
        .await?)
    }

    /// The post carried by a platform message in a chat.
    pub async fn channel_post_by_message(
        &self,
        channel: &str,
        chat_id: &str,
        message_id: &str,
    ) -> Result<Option<ChannelPost>> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            post_cols!(),
            " FROM channel_posts p WHERE channel = ? AND chat_id = ? AND message_id = ?"
        ))
        .bind(channel)
        .bind(chat_id)
        .bind(message_id)
        .fetch_optional(self.pool())
        .await?)
    }

    /// The channel's open posts that may be settled: those whose wait is no longer pending
    /// (decided, expired, withdrawn), and every sent post of an MCP elicitation. The latter
    /// has no wait to go by: the channel settles it once its inbox request is no longer
    /// pending, whether or not the gateway still holds the call that asked (its answer and
    /// the call's end race each other).
    pub async fn channel_posts_to_settle(&self, channel: &str) -> Result<Vec<ChannelPost>> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            post_cols!(),
            " FROM channel_posts p \
             WHERE p.channel = ? AND p.status = 'open' AND p.message_id IS NOT NULL \
               AND NOT EXISTS (SELECT 1 FROM waits w WHERE w.id = p.wait_id AND w.status = 'pending') \
             ORDER BY p.id",
        ))
        .bind(channel)
        .fetch_all(self.pool())
        .await?)
    }

    /// The channel's posts that were recorded but never sent (a crash between the two).
    pub async fn channel_posts_unsent(&self, channel: &str) -> Result<Vec<ChannelPost>> {
        Ok(sqlx::query_as(concat!(
            "SELECT ",
            post_cols!(),
            " FROM channel_posts p \
             WHERE channel = ? AND status = 'open' AND message_id IS NULL ORDER BY id"
        ))
        .bind(channel)
        .fetch_all(self.pool())
        .await?)
    }

    pub async fn channel_post_settled(&self, id: i64) -> Result<()> {
        sqlx::query("UPDATE channel_posts SET status = 'settled', settled_at = ? WHERE id = ?")
            .bind(now_ms())
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Queues a file (already copied to `path`) for the session's chat.
    pub async fn channel_file_queue(
        &self,
        session_id: &str,
        path: &str,
        name: &str,
        caption: Option<&str>,
        is_image: bool,
    ) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "INSERT INTO channel_files (session_id, path, name, caption, is_image, created_at) \
             VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(session_id)
        .bind(path)
        .bind(name)
        .bind(caption)
        .bind(is_image)
        .bind(now_ms())
        .fetch_one(self.pool())
        .await?)
    }

    /// How many files the session has queued and not sent yet.
    pub async fn channel_files_queued(&self, session_id: &str) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM channel_files WHERE session_id = ? AND sent_at IS NULL",
        )
        .bind(session_id)
        .fetch_one(self.pool())
        .await?)
    }

    /// The channel's queued files not sent yet, oldest first.
    pub async fn channel_files_unsent(&self, channel: &str) -> Result<Vec<ChannelFile>> {
        Ok(sqlx::query_as(
            "SELECT f.id, f.session_id, f.path, f.name, f.caption, f.is_image, c.chat_id, \
               c.thread_id \
             FROM channel_files f JOIN channel_sessions c ON c.session_id = f.session_id \
             WHERE c.channel = ? AND f.sent_at IS NULL ORDER BY f.id",
        )
        .bind(channel)
        .fetch_all(self.pool())
        .await?)
    }

    pub async fn channel_file_sent(&self, id: i64) -> Result<()> {
        sqlx::query("UPDATE channel_files SET sent_at = ? WHERE id = ?")
            .bind(now_ms())
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// The reviewer an approved pairing maps the user to.
    pub async fn pairing_reviewer(&self, platform: &str, user_id: &str) -> Result<Option<String>> {
        let row = sqlx::query(
            "SELECT reviewer FROM channel_pairing_approved \
             WHERE platform = ? AND user_id = ? AND revoked_at IS NULL",
        )
        .bind(platform)
        .bind(user_id)
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| r.try_get::<Option<String>, _>("reviewer"))
            .transpose()
            .map(Option::flatten)
            .map_err(StoreError::from)
    }
}
