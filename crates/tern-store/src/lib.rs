//! The session store: sessions and their messages, on SQLite through sqlx.
//!
//! Flow: [`Store::open`] creates `tern.db` if needed (mode 0600, like its `-wal` and `-shm`
//! files; WAL journal, foreign keys on) and runs the embedded migrations → the agent appends
//! every message with [`Store::append_message`], each in its own committed transaction, so a
//! `kill -9` at any moment loses at most the model answer in flight → a turn reads its
//! transcript back with [`Store::messages`].
//!
//! Durability: WAL with `synchronous = NORMAL` survives the crash of the process at any point
//! (a committed transaction is in the WAL, which the OS keeps); only a power loss may drop the
//! last transactions. The SQL is kept portable to PostgreSQL (TEXT ids, BIGINT timestamps,
//! JSON as TEXT, `RETURNING`); only full-text search is SQLite-specific (FTS5).

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};
use tern_llm::{ContentPart, RequestMessage, Role, ToolCall};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the session store at {path}: {source}")]
    Open {
        path: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("cannot migrate the session store: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("session store error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("session not found: {0}")]
    SessionNotFound(String),
    #[error("a session with id {0} already exists")]
    SessionExists(String),
    #[error("more than one session id starts with {0}; give more characters")]
    AmbiguousPrefix(String),
    #[error("an active key named {0} already exists; revoke it first or choose another name")]
    KeyExists(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// A compaction was planned on a transcript that has changed since (a message was
    /// appended, or another compaction ran): nothing was written; plan again.
    #[error("the transcript of session {0} changed since the compaction was planned")]
    TranscriptChanged(String),
    /// A scheduled job's definition does not hold together (e.g. a script job without a
    /// command): nothing was written.
    #[error("invalid scheduled job: {0}")]
    InvalidCronJob(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// `as_str` and `parse` of an enum stored as text, from one table of variants and texts so
/// the two cannot disagree; `parse` calls any other text corrupt, naming it as `$what`.
macro_rules! stored_as_text {
    ($ty:ident, $what:literal, { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $ty {
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $text,)+
                }
            }

            fn parse(s: &str) -> $crate::Result<Self> {
                match s {
                    $($text => Ok($ty::$variant),)+
                    other => Err($crate::StoreError::Corrupt(format!(
                        concat!("unknown ", $what, " {:?}"),
                        other
                    ))),
                }
            }
        }
    };
}
pub(crate) use stored_as_text;

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionStatus {
    Idle,
    Running,
    Waiting,
    Ended,
}

stored_as_text!(SessionStatus, "session status", {
    Idle => "idle",
    Running => "running",
    Waiting => "waiting",
    Ended => "ended",
});

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Session {
    pub id: String,
    pub title: Option<String>,
    pub source: String,
    pub model: Option<String>,
    pub parent_id: Option<String>,
    pub system_prompt: Option<String>,
    pub status: SessionStatus,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
    pub updated_at: i64,
    /// The id of the API key that created it (see [`NewSession::owner`]); `None` for a
    /// session no key created, which only admin keys see.
    pub owner: Option<String>,
    /// The toolsets the session is limited to, whatever a turn asks for (a `delegate_task`
    /// child's); `None`: no limit beyond the turn's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub toolsets: Option<Vec<String>>,
}

/// What a new session starts with.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    /// Chosen by the caller, or a fresh UUIDv7.
    pub id: Option<String>,
    pub title: Option<String>,
    pub source: String,
    pub model: Option<String>,
    pub parent_id: Option<String>,
    pub system_prompt: Option<String>,
    /// The id of the API key creating it, which alone (with admin keys) may use it through
    /// the gateway; `None` for `tern chat`.
    pub owner: Option<String>,
    /// See [`Session::toolsets`].
    pub toolsets: Option<Vec<String>>,
}

/// A stored message, in the OpenAI shape plus bookkeeping.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub id: i64,
    pub session_id: String,
    /// Position in the session, from 1.
    pub seq: i64,
    pub role: Role,
    pub content: Option<String>,
    /// The content as parts, sent to the model in place of `content` (which holds the same
    /// message as text, images described): the images of a step's tool calls for a model
    /// that accepts images.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parts: Option<Vec<ContentPart>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<i64>,
    /// The model that wrote an assistant message (as its server named it); `None` for other
    /// roles and for messages stored before tern recorded it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub created_at: i64,
    /// Whether a compaction took the message out of the active transcript (only
    /// [`Store::messages_all`] returns such messages).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub compacted: bool,
    /// What the model sees instead of `content` when the cheap pass of a compaction replaced a
    /// long tool output by a placeholder: set by [`Store::messages_all`], whose `content` is
    /// the full output; [`Store::messages`] gives the placeholder as `content` instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_content: Option<String>,
    /// Set on the one message that is not stored as a message: the summary of the current
    /// compaction, which [`Store::messages`] places right after the kept head (with that
    /// message's seq) and `id` 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compaction_id: Option<i64>,
}

impl Message {
    /// How many images the model is shown with this message (its `image_url` parts).
    pub fn images(&self) -> usize {
        self.parts.as_ref().map_or(0, |parts| {
            parts
                .iter()
                .filter(|p| matches!(p, ContentPart::ImageUrl { .. }))
                .count()
        })
    }

    /// The message as sent to the model.
    pub fn to_request(&self) -> RequestMessage {
        RequestMessage {
            role: self.role,
            content: self.content.clone(),
            parts: self.parts.clone(),
            tool_calls: self.tool_calls.clone(),
            tool_call_id: self.tool_call_id.clone(),
        }
    }
}

/// A message to append.
#[derive(Debug, Clone, Default)]
pub struct NewMessage {
    pub role: Option<Role>,
    pub content: Option<String>,
    /// See [`Message::parts`].
    pub parts: Option<Vec<ContentPart>>,
    pub tool_calls: Vec<ToolCall>,
    pub tool_call_id: Option<String>,
    pub tool_name: Option<String>,
    pub reasoning: Option<String>,
    pub turn_id: Option<String>,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    /// See [`Message::model`].
    pub model: Option<String>,
}

impl NewMessage {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role: Some(role),
            content: Some(content.into()),
            ..Default::default()
        }
    }

    pub fn tool_result(call_id: &str, tool_name: &str, content: impl Into<String>) -> Self {
        Self {
            role: Some(Role::Tool),
            content: Some(content.into()),
            tool_call_id: Some(call_id.to_owned()),
            tool_name: Some(tool_name.to_owned()),
            ..Default::default()
        }
    }

    pub fn turn(mut self, turn_id: &str) -> Self {
        self.turn_id = Some(turn_id.to_owned());
        self
    }
}

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyKind {
    /// An agent's key: the sessions it created, and its own inbox tasks.
    Agent,
    /// The operator's key: every session as well.
    Admin,
}

stored_as_text!(KeyKind, "key kind", {
    Agent => "agent",
    Admin => "admin",
});

/// An agent API key, without its secret.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApiKey {
    pub id: String,
    pub name: String,
    pub kind: KeyKind,
    /// The first characters of the key, to recognise it.
    pub prefix: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
}

/// An active key as the bearer check needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ActiveKey {
    /// Immutable and never reused: what the key owns is owned by this id, not by the name.
    pub id: String,
    pub name: String,
    pub kind: KeyKind,
    /// Hex SHA-256 of the key.
    pub hash: String,
}

/// What [`Store::counts`] counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Every session, ended ones included.
    pub sessions: i64,
    pub running_sessions: i64,
    pub waiting_sessions: i64,
    /// Inbox requests no one has decided yet.
    pub pending_requests: i64,
}

/// A full-text search hit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    pub session_id: String,
    pub session_title: Option<String>,
    pub message_id: i64,
    pub seq: i64,
    pub role: Role,
    /// The matching part, with matches in `[` `]`.
    pub snippet: String,
    pub created_at: i64,
}

/// Milliseconds since the Unix epoch: the clock every stored time is taken from (re-exported
/// from `tern_util`, where it is defined once for all crates).
pub use tern_util::now_ms;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// The files SQLite keeps beside the database in WAL mode.
const SIDE_FILES: [&str; 2] = ["-wal", "-shm"];

/// Creates the database file, empty, with mode 0600 if it does not exist. SQLite would
/// create it with 0644 less the umask, and it gives its `-wal` and `-shm` files the
/// database's mode, so creating it first makes all three private from the start. Failures
/// are left for SQLite to report when it opens the file.
fn create_private(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    if let Err(e) = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        && e.kind() != std::io::ErrorKind::AlreadyExists
    {
        tracing::debug!(path = %path.display(), error = %e, "cannot create the database file first");
    }
}

/// Takes group and other permissions off the database and its side files: they hold the
/// sessions, key hashes and reviewer sessions. Also a database made by an older tern (0644
/// under the usual umask) becomes private. A file that cannot be changed (another owner, a
/// read-only file system) is left as it is, with a warning.
fn make_private(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut files = vec![path.to_path_buf()];
    for suffix in SIDE_FILES {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        files.push(name.into());
    }
    for file in files {
        let Ok(meta) = std::fs::metadata(&file) else {
            continue;
        };
        let mode = meta.permissions().mode();
        if !meta.is_file() || mode & 0o077 == 0 {
            continue;
        }
        let private = std::fs::Permissions::from_mode(mode & 0o700);
        if let Err(e) = std::fs::set_permissions(&file, private) {
            tracing::warn!(path = %file.display(), error = %e, "cannot make the database file private (mode 0600)");
        }
    }
}

// A macro rather than a const so that every query stays a `&'static str` literal (sqlx refuses
// SQL built at run time unless audited).
macro_rules! session_cols {
    () => {
        "id, title, source, model, parent_id, system_prompt, status, \
         prompt_tokens, completion_tokens, created_at, updated_at, owner_key, toolsets"
    };
}

/// The session store. Cheap to clone (a connection pool).
#[derive(Clone, Debug)]
pub struct Store {
    pool: SqlitePool,
}

impl Store {
    /// Opens (creating if needed) the store at `path` and brings its schema up to date.
    pub async fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, 4).await
    }

    /// Like [`Store::open`] with a pool of at most `max_connections`. sqlx runs each SQLite
    /// connection on a thread of its own, so a one-shot CLI run uses one.
    pub async fn open_with(path: &Path, max_connections: u32) -> Result<Self> {
        let display = path.display().to_string();
        let open_err = |source| StoreError::Open {
            path: display.clone(),
            source,
        };
        create_private(path);
        let opts = SqliteConnectOptions::from_str("sqlite://")
            .map_err(open_err)?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10))
            // Reads through a memory map instead of copying pages in with pread (10,000
            // messages: 49 → 43 ms median here). Pages count toward RSS only once read.
            .pragma("mmap_size", "268435456")
            // Reads come through the map, so the page cache mostly holds pages being written;
            // 512 KiB per connection instead of SQLite's 2 MiB keeps a long-running gateway's
            // memory flat.
            .pragma("cache_size", "-512");
        let pool = SqlitePoolOptions::new()
            .max_connections(max_connections.max(1))
            .min_connections(0)
            .connect_with(opts)
            .await
            .map_err(open_err)?;
        make_private(path);
        MIGRATOR.run(&pool).await?;
        Ok(Self { pool })
    }

    /// Opens an existing store for reading only (`tern status`): no file is created, the
    /// schema is not migrated, nothing is written — safe beside a running gateway.
    pub async fn open_read_only(path: &Path) -> Result<Self> {
        let display = path.display().to_string();
        let open_err = |source| StoreError::Open {
            path: display.clone(),
            source,
        };
        let opts = SqliteConnectOptions::from_str("sqlite://")
            .map_err(open_err)?
            .filename(path)
            .read_only(true)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .connect_with(opts)
            .await
            .map_err(open_err)?;
        Ok(Self { pool })
    }

    /// How many sessions are in each status, and inbox requests pending: what `tern status`
    /// shows.
    pub async fn counts(&self) -> Result<Counts> {
        let mut c = Counts::default();
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT status, COUNT(*) FROM sessions GROUP BY status")
                .fetch_all(&self.pool)
                .await?;
        for (status, n) in rows {
            match SessionStatus::parse(&status)? {
                SessionStatus::Running => c.running_sessions = n,
                SessionStatus::Waiting => c.waiting_sessions = n,
                SessionStatus::Idle | SessionStatus::Ended => {}
            }
            c.sessions += n;
        }
        c.pending_requests =
            sqlx::query_scalar("SELECT COUNT(*) FROM inbox_requests WHERE status = 'pending'")
                .fetch_one(&self.pool)
                .await?;
        Ok(c)
    }

    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Begins a write transaction: `BEGIN IMMEDIATE` takes SQLite's write lock (waiting the
    /// busy timeout) before the first statement, so what the transaction reads cannot change
    /// before it commits, and it never has to upgrade a stale read snapshot — which SQLite
    /// refuses at once with "database is locked". Every write that reads first goes through
    /// here, in this crate and in the crates that keep their tables in this database.
    pub async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// Runs SQLite's quick integrity check; `Ok(None)` when healthy.
    pub async fn integrity_problem(&self) -> Result<Option<String>> {
        let r: String = sqlx::query_scalar("PRAGMA quick_check")
            .fetch_one(&self.pool)
            .await?;
        Ok((r != "ok").then_some(r))
    }

    pub async fn create_session(&self, new: NewSession) -> Result<Session> {
        let id = new
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().simple().to_string());
        let now = now_ms();
        let res = sqlx::query(
            "INSERT INTO sessions (id, title, source, model, parent_id, system_prompt, status, \
             created_at, updated_at, owner_key, toolsets) \
             VALUES (?, ?, ?, ?, ?, ?, 'idle', ?, ?, ?, ?)",
        )
        .bind(&id)
        .bind(&new.title)
        .bind(&new.source)
        .bind(&new.model)
        .bind(&new.parent_id)
        .bind(&new.system_prompt)
        .bind(now)
        .bind(now)
        .bind(&new.owner)
        .bind(
            new.toolsets
                .as_ref()
                .map(serde_json::to_string)
                .transpose()
                .map_err(|e| StoreError::Corrupt(format!("toolsets: {e}")))?,
        )
        .execute(&self.pool)
        .await;
        match res {
            Ok(_) => {}
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                return Err(StoreError::SessionExists(id));
            }
            Err(e) => return Err(e.into()),
        }
        self.session(&id).await
    }

    pub async fn get_session(&self, id: &str) -> Result<Option<Session>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            session_cols!(),
            " FROM sessions WHERE id = ?"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| session_from_row(&r)).transpose()
    }

    /// Like [`Store::get_session`], but a missing session is an error.
    pub async fn session(&self, id: &str) -> Result<Session> {
        self.get_session(id)
            .await?
            .ok_or_else(|| StoreError::SessionNotFound(id.to_owned()))
    }

    /// Resolves a full id or a unique prefix of one (at least 4 characters), as git does.
    pub async fn resolve_session(&self, id_or_prefix: &str) -> Result<Session> {
        if let Some(s) = self.get_session(id_or_prefix).await? {
            return Ok(s);
        }
        if id_or_prefix.len() < 4
            || !id_or_prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(StoreError::SessionNotFound(id_or_prefix.to_owned()));
        }
        let rows = sqlx::query(concat!(
            "SELECT ",
            session_cols!(),
            " FROM sessions WHERE id LIKE ? || '%' ORDER BY id LIMIT 2"
        ))
        .bind(id_or_prefix)
        .fetch_all(&self.pool)
        .await?;
        match rows.as_slice() {
            [one] => session_from_row(one),
            [] => Err(StoreError::SessionNotFound(id_or_prefix.to_owned())),
            _ => Err(StoreError::AmbiguousPrefix(id_or_prefix.to_owned())),
        }
    }

    /// The most recently updated session.
    pub async fn latest_session(&self) -> Result<Option<Session>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            session_cols!(),
            " FROM sessions ORDER BY updated_at DESC, id DESC LIMIT 1"
        ))
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| session_from_row(&r)).transpose()
    }

    /// The most recently updated session that has a message: what `tern chat --continue`
    /// resumes (an empty session, left by an older version's REPL, is nothing to continue).
    pub async fn latest_session_with_messages(&self) -> Result<Option<Session>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            session_cols!(),
            " FROM sessions WHERE EXISTS (SELECT 1 FROM messages m WHERE m.session_id = sessions.id) \
             ORDER BY updated_at DESC, id DESC LIMIT 1"
        ))
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| session_from_row(&r)).transpose()
    }

    /// Idle sessions with messages, last updated before `before_ms` (oldest first, at most
    /// `limit`, after the `(updated_at, id)` given): the candidates for an idle reset. Empty
    /// ones (a fresh successor) are left alone, so a reset never chains into more resets.
    pub async fn idle_sessions(
        &self,
        before_ms: i64,
        after: Option<(i64, &str)>,
        limit: i64,
    ) -> Result<Vec<Session>> {
        // Keyset paging by (updated_at, id): a caller that skips some sessions (the idle
        // reset's exempt ones) pages past them instead of being handed them again.
        let (after_ms, after_id) = after.unwrap_or((i64::MIN, ""));
        let rows = sqlx::query(concat!(
            "SELECT ",
            session_cols!(),
            " FROM sessions WHERE status = 'idle' AND updated_at < ? \
              AND (updated_at > ? OR (updated_at = ? AND id > ?)) \
              AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = sessions.id) \
              ORDER BY updated_at, id LIMIT ?"
        ))
        .bind(before_ms)
        .bind(after_ms)
        .bind(after_ms)
        .bind(after_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(session_from_row).collect()
    }

    /// The sessions owned by the key `owner`, most recently updated first.
    pub async fn list_owned_sessions(
        &self,
        owner: &str,
        limit: i64,
        offset: i64,
    ) -> Result<Vec<Session>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            session_cols!(),
            " FROM sessions WHERE owner_key = ? ORDER BY updated_at DESC, id DESC LIMIT ? OFFSET ?"
        ))
        .bind(owner)
        .bind(limit)
        .bind(offset)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(session_from_row).collect()
    }

    /// Sessions, most recently updated first.
    pub async fn list_sessions(&self, limit: i64, offset: i64) -> Result<Vec<Session>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            session_cols!(),
            " FROM sessions ORDER BY updated_at DESC, id DESC LIMIT ? OFFSET ?"
        ))
        .bind(limit)
        .bind(offset)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(session_from_row).collect()
    }

    pub async fn set_title(&self, id: &str, title: &str) -> Result<()> {
        self.update_one(
            "UPDATE sessions SET title = ?, updated_at = ? WHERE id = ?",
            id,
            title,
        )
        .await
    }

    pub async fn set_status(&self, id: &str, status: SessionStatus) -> Result<()> {
        self.update_one(
            "UPDATE sessions SET status = ?, updated_at = ? WHERE id = ?",
            id,
            status.as_str(),
        )
        .await
    }

    /// Moves a session from `from` to `to`; `false` (and no change) if it was not in `from`,
    /// so that a turn ending never overwrites `ended` or `waiting`.
    pub async fn set_status_from(
        &self,
        id: &str,
        from: SessionStatus,
        to: SessionStatus,
    ) -> Result<bool> {
        let r = sqlx::query(
            "UPDATE sessions SET status = ?, updated_at = ? WHERE id = ? AND status = ?",
        )
        .bind(to.as_str())
        .bind(now_ms())
        .bind(id)
        .bind(from.as_str())
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() > 0)
    }

    /// Sessions left `running` by a process that died mid-turn become `waiting` when they
    /// have an open wait, else `idle` (and a `waiting` one without open waits, left by an
    /// older version, becomes `idle`); called by the single owner of the store (the gateway)
    /// when it starts. Returns how many changed.
    pub async fn reset_running(&self) -> Result<u64> {
        let r = sqlx::query(concat!(
            "UPDATE sessions SET status = ",
            waits::status_from_waits!(),
            " WHERE status = 'running' OR (status = 'waiting' AND NOT EXISTS \
             (SELECT 1 FROM waits w WHERE w.session_id = sessions.id \
             AND w.status IN ('pending', 'ready') AND w.kind <> 'process'))"
        ))
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected())
    }

    pub async fn set_model(&self, id: &str, model: &str) -> Result<()> {
        self.update_one(
            "UPDATE sessions SET model = ?, updated_at = ? WHERE id = ?",
            id,
            model,
        )
        .await
    }

    async fn update_one(&self, sql: &'static str, id: &str, value: &str) -> Result<()> {
        let r = sqlx::query(sql)
            .bind(value)
            .bind(now_ms())
            .bind(id)
            .execute(&self.pool)
            .await?;
        if r.rows_affected() == 0 {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        Ok(())
    }

    /// Deletes a session and its messages; `false` if there was none.
    pub async fn delete_session(&self, id: &str) -> Result<bool> {
        let mut tx = self.begin_write().await?;
        // Explicit, so the full-text index triggers run whatever the cascade settings.
        sqlx::query("DELETE FROM messages WHERE session_id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        let r = sqlx::query("DELETE FROM sessions WHERE id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        // Its route to a chat goes with it: a later session given the same id must not
        // inherit the chat.
        sqlx::query("DELETE FROM channel_sessions WHERE session_id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(r.rows_affected() > 0)
    }

    /// Appends one message in its own committed transaction.
    pub async fn append_message(&self, session_id: &str, msg: &NewMessage) -> Result<Message> {
        let mut v = self
            .append_messages(session_id, std::slice::from_ref(msg))
            .await?;
        v.pop()
            .ok_or_else(|| StoreError::Corrupt("append returned no message".into()))
    }

    /// Appends messages in order, in one committed transaction.
    pub async fn append_messages(
        &self,
        session_id: &str,
        msgs: &[NewMessage],
    ) -> Result<Vec<Message>> {
        let mut tx = self.begin_write().await?;
        let out = insert_messages(&mut tx, session_id, msgs).await?;
        tx.commit().await?;
        Ok(out)
    }

    /// The active transcript of a session, in order: what the model sees. Messages a
    /// compaction replaced are left out (see [`Store::messages_all`]), the current summary
    /// (if any) sits right after the kept head, and a tool output the cheap pass cut has its
    /// placeholder as `content` (a message with images: without its `parts`).
    ///
    /// SQLite builds the transcript as one JSON array and serde reads it back: sqlx moves
    /// every value of every row between threads with an allocation each, which made row-wise
    /// loading of a 10,000-message session several times slower. (PostgreSQL has the same
    /// aggregate as `json_agg(json_build_object(…) ORDER BY seq)`.)
    pub async fn messages(&self, session_id: &str) -> Result<Vec<Message>> {
        let json: Option<String> = sqlx::query_scalar(
            "SELECT json_group_array(json_object(\
               'id', id, 'seq', seq, 'role', role, \
               'content', COALESCE(model_content, content), \
               'parts', CASE WHEN model_content IS NULL THEN json(parts) END, \
               'tool_calls', json(tool_calls), \
               'tool_call_id', tool_call_id, 'tool_name', tool_name, 'reasoning', reasoning, \
               'turn_id', turn_id, 'prompt_tokens', prompt_tokens, \
               'completion_tokens', completion_tokens, 'model', model, \
               'created_at', created_at) ORDER BY seq) \
             FROM messages WHERE session_id = ? AND compacted_by IS NULL",
        )
        .bind(session_id)
        .fetch_one(&self.pool)
        .await?;
        let mut messages = parse_messages(session_id, json)?;
        if let Some(c) = self.compaction(session_id).await?
            && let Some(summary) = c.summary_message()
        {
            let at = messages.partition_point(|m| m.seq <= c.after_seq);
            messages.insert(at, summary);
        }
        Ok(messages)
    }

    /// Every stored message of a session, in order, compacted ones included (marked
    /// [`Message::compacted`]) with their full content: for export, `sessions show --all`
    /// and the API's flag. The summaries are [`Store::compactions`].
    pub async fn messages_all(&self, session_id: &str) -> Result<Vec<Message>> {
        let json: Option<String> = sqlx::query_scalar(
            "SELECT json_group_array(json_object(\
               'id', id, 'seq', seq, 'role', role, \
               'content', content, 'parts', json(parts), 'tool_calls', json(tool_calls), \
               'tool_call_id', tool_call_id, 'tool_name', tool_name, 'reasoning', reasoning, \
               'turn_id', turn_id, 'prompt_tokens', prompt_tokens, \
               'completion_tokens', completion_tokens, 'model', model, \
               'created_at', created_at, 'model_content', model_content, \
               'compacted', json(CASE WHEN compacted_by IS NULL THEN 'false' ELSE 'true' END)) \
               ORDER BY seq) \
             FROM messages WHERE session_id = ?",
        )
        .bind(session_id)
        .fetch_one(&self.pool)
        .await?;
        parse_messages(session_id, json)
    }

    pub async fn message_count(&self, session_id: &str) -> Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM messages WHERE session_id = ?")
                .bind(session_id)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// Full-text search over message content, best matches first. Every word of `text` must
    /// appear; words are matched as prefixes-free exact tokens, quoted so that FTS5 syntax in
    /// the user's text is never interpreted.
    pub async fn search(&self, text: &str, limit: i64) -> Result<Vec<SearchHit>> {
        let query = fts_query(text);
        if query.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "SELECT m.session_id, s.title, m.id, m.seq, m.role, \
             snippet(messages_fts, 0, '[', ']', '…', 12) AS snip, m.created_at \
             FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid \
             JOIN sessions s ON s.id = m.session_id \
             WHERE messages_fts MATCH ? ORDER BY rank LIMIT ?",
        )
        .bind(&query)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let role: String = r.try_get(4)?;
                Ok(SearchHit {
                    session_id: r.try_get(0)?,
                    session_title: r.try_get(1)?,
                    message_id: r.try_get(2)?,
                    seq: r.try_get(3)?,
                    role: parse_role(&role)?,
                    snippet: r.try_get(5)?,
                    created_at: r.try_get(6)?,
                })
            })
            .collect()
    }

    /// Stores a new key's hash under `name`.
    pub async fn create_key(
        &self,
        name: &str,
        kind: KeyKind,
        key_hash: &str,
        prefix: &str,
    ) -> Result<ApiKey> {
        let key = ApiKey {
            id: uuid::Uuid::now_v7().simple().to_string(),
            name: name.to_owned(),
            kind,
            prefix: prefix.to_owned(),
            created_at: now_ms(),
            revoked_at: None,
        };
        let r = sqlx::query(
            "INSERT INTO api_keys (id, name, kind, key_hash, prefix, created_at) \
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(&key.id)
        .bind(&key.name)
        .bind(kind.as_str())
        .bind(key_hash)
        .bind(&key.prefix)
        .bind(key.created_at)
        .execute(&self.pool)
        .await;
        match r {
            Ok(_) => Ok(key),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                Err(StoreError::KeyExists(name.to_owned()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// All keys, active and revoked, oldest first.
    pub async fn list_keys(&self) -> Result<Vec<ApiKey>> {
        let rows = sqlx::query(
            "SELECT id, name, kind, prefix, created_at, revoked_at FROM api_keys \
             ORDER BY created_at, id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(ApiKey {
                    id: r.try_get(0)?,
                    name: r.try_get(1)?,
                    kind: KeyKind::parse(r.try_get(2)?)?,
                    prefix: r.try_get(3)?,
                    created_at: r.try_get(4)?,
                    revoked_at: r.try_get(5)?,
                })
            })
            .collect()
    }

    /// Revokes the active key named `name`; `false` if there is none.
    pub async fn revoke_key(&self, name: &str) -> Result<bool> {
        let r =
            sqlx::query("UPDATE api_keys SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL")
                .bind(now_ms())
                .bind(name)
                .execute(&self.pool)
                .await?;
        Ok(r.rows_affected() > 0)
    }

    /// Every active key, with its hash.
    pub async fn active_keys(&self) -> Result<Vec<ActiveKey>> {
        let rows =
            sqlx::query("SELECT id, name, kind, key_hash FROM api_keys WHERE revoked_at IS NULL")
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|r| {
                Ok(ActiveKey {
                    id: r.try_get(0)?,
                    name: r.try_get(1)?,
                    kind: KeyKind::parse(r.try_get(2)?)?,
                    hash: r.try_get(3)?,
                })
            })
            .collect()
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Builds an FTS5 query that ANDs every word of the user's text as a quoted string.
pub(crate) fn fts_query(text: &str) -> String {
    text.split_whitespace()
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" ")
}

fn parse_role(s: &str) -> Result<Role> {
    Role::parse(s).ok_or_else(|| StoreError::Corrupt(format!("unknown role {s:?}")))
}

fn session_from_row(r: &sqlx::sqlite::SqliteRow) -> Result<Session> {
    let status: String = r.try_get("status")?;
    Ok(Session {
        id: r.try_get("id")?,
        title: r.try_get("title")?,
        source: r.try_get("source")?,
        model: r.try_get("model")?,
        parent_id: r.try_get("parent_id")?,
        system_prompt: r.try_get("system_prompt")?,
        status: SessionStatus::parse(&status)?,
        prompt_tokens: r.try_get("prompt_tokens")?,
        completion_tokens: r.try_get("completion_tokens")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
        owner: r.try_get("owner_key")?,
        toolsets: r
            .try_get::<Option<String>, _>("toolsets")?
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|e| StoreError::Corrupt(format!("toolsets of a session: {e}")))?,
    })
}

/// The messages of SQLite's JSON array (`None`: no rows).
fn parse_messages(session_id: &str, json: Option<String>) -> Result<Vec<Message>> {
    let Some(json) = json else {
        return Ok(Vec::new());
    };
    let rows: Vec<MessageRow> = serde_json::from_str(&json)
        .map_err(|e| StoreError::Corrupt(format!("messages of session {session_id}: {e}")))?;
    Ok(rows
        .into_iter()
        .map(|r| r.into_message(session_id))
        .collect())
}

/// A message as `messages` reads it from SQLite's JSON.
#[derive(serde::Deserialize)]
struct MessageRow {
    id: i64,
    seq: i64,
    role: Role,
    content: Option<String>,
    #[serde(default)]
    parts: Option<Vec<ContentPart>>,
    tool_calls: Option<Vec<ToolCall>>,
    tool_call_id: Option<String>,
    tool_name: Option<String>,
    reasoning: Option<String>,
    turn_id: Option<String>,
    prompt_tokens: Option<i64>,
    completion_tokens: Option<i64>,
    model: Option<String>,
    created_at: i64,
    #[serde(default)]
    model_content: Option<String>,
    #[serde(default)]
    compacted: bool,
}

impl MessageRow {
    fn into_message(self, session_id: &str) -> Message {
        Message {
            id: self.id,
            session_id: session_id.to_owned(),
            seq: self.seq,
            role: self.role,
            content: self.content,
            parts: self.parts,
            tool_calls: self.tool_calls.unwrap_or_default(),
            tool_call_id: self.tool_call_id,
            tool_name: self.tool_name,
            reasoning: self.reasoning,
            turn_id: self.turn_id,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            model: self.model,
            created_at: self.created_at,
            compacted: self.compacted,
            model_content: self.model_content,
            compaction_id: None,
        }
    }
}

/// Appends messages in order on `conn`, inside the caller's transaction (so a caller can
/// append a message and record why in one commit, as delivering a wait does).
pub(crate) async fn insert_messages(
    tx: &mut sqlx::SqliteConnection,
    session_id: &str,
    msgs: &[NewMessage],
) -> Result<Vec<Message>> {
    let now = now_ms();
    let mut out = Vec::with_capacity(msgs.len());
    let mut tokens = (0i64, 0i64);
    for m in msgs {
        let role = m
            .role
            .ok_or_else(|| StoreError::Corrupt("message without a role".into()))?;
        let tool_calls = if m.tool_calls.is_empty() {
            None
        } else {
            Some(
                serde_json::to_string(&m.tool_calls)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            )
        };
        let parts = m
            .parts
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let row = sqlx::query(
            "INSERT INTO messages (session_id, seq, role, content, parts, tool_calls, \
                 tool_call_id, tool_name, reasoning, turn_id, prompt_tokens, completion_tokens, \
                 model, created_at) \
                 VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = ?), \
                 ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id, seq",
        )
        .bind(session_id)
        .bind(session_id)
        .bind(role.as_str())
        .bind(&m.content)
        .bind(&parts)
        .bind(&tool_calls)
        .bind(&m.tool_call_id)
        .bind(&m.tool_name)
        .bind(&m.reasoning)
        .bind(&m.turn_id)
        .bind(m.prompt_tokens)
        .bind(m.completion_tokens)
        .bind(&m.model)
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| match e {
            sqlx::Error::Database(d) if d.is_foreign_key_violation() => {
                StoreError::SessionNotFound(session_id.to_owned())
            }
            e => e.into(),
        })?;
        tokens.0 += m.prompt_tokens.unwrap_or(0);
        tokens.1 += m.completion_tokens.unwrap_or(0);
        out.push(Message {
            id: row.try_get(0)?,
            session_id: session_id.to_owned(),
            seq: row.try_get(1)?,
            role,
            content: m.content.clone(),
            parts: m.parts.clone(),
            tool_calls: m.tool_calls.clone(),
            tool_call_id: m.tool_call_id.clone(),
            tool_name: m.tool_name.clone(),
            reasoning: m.reasoning.clone(),
            turn_id: m.turn_id.clone(),
            prompt_tokens: m.prompt_tokens,
            completion_tokens: m.completion_tokens,
            model: m.model.clone(),
            created_at: now,
            compacted: false,
            model_content: None,
            compaction_id: None,
        });
    }
    sqlx::query(
        "UPDATE sessions SET updated_at = ?, prompt_tokens = prompt_tokens + ?, \
             completion_tokens = completion_tokens + ? WHERE id = ?",
    )
    .bind(now)
    .bind(tokens.0)
    .bind(tokens.1)
    .bind(session_id)
    .execute(&mut *tx)
    .await?;
    Ok(out)
}

pub mod channels;
pub mod compaction;
pub mod cron;
pub use compaction::{Compaction, CompactionReason, Elision, NewCompaction, NewSummary};
pub use cron::{
    Claim, CronCatchUp, CronCreator, CronJob, CronJobKind, CronOccurrence, CronOverlap, CronTarget,
    DeliverTo, NewCronJob, OccurrenceState,
};
pub mod grants;
pub mod pairing;
pub use grants::{CommandGrant, GrantScope, NewCommandGrant};
pub mod waits;
pub use waits::{NewWait, Wait, WaitKind, WaitStatus};
mod children;
mod remote_inbox;
pub mod search;
pub use search::SessionSearchHit;
pub mod todos;
pub use todos::{
    MAX_TODO_CHARS, MAX_TODO_ID_CHARS, MAX_TODOS, Todo, TodoError, TodoStatus, TodoWrite,
};

#[cfg(test)]
mod tests;
