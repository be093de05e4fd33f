-- Chat channels (tern-channels' runtime): where each channel's long poll stands, the events
-- it received, which session each chat talks to, and the requests posted to chats.

-- One row per configured channel: the platform's cursor (Telegram's offset, Matrix's
-- next_batch), committed in the same transaction that records the events before it, and the
-- channel's health for `tern channels status`.
CREATE TABLE channel_cursors (
    channel        TEXT NOT NULL PRIMARY KEY,
    platform       TEXT NOT NULL,
    cursor         TEXT,
    updated_at     BIGINT NOT NULL,
    last_ok_at     BIGINT,
    last_error     TEXT,
    last_error_at  BIGINT
);

-- Inbound events from allowed users (others' messages are never stored). `pending` until
-- handled; a message becomes `appended` in the transaction that appends it to its session,
-- then `done` when its turn ended. Unique per channel and platform key: a re-delivered update
-- is not recorded twice.
CREATE TABLE channel_events (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    channel      TEXT NOT NULL,
    event_key    TEXT NOT NULL,
    chat_id      TEXT NOT NULL,
    thread_id    TEXT NOT NULL DEFAULT '',
    user_id      TEXT NOT NULL,
    user_name    TEXT NOT NULL,
    kind         TEXT NOT NULL,
    payload      TEXT NOT NULL,
    status       TEXT NOT NULL,
    session_id   TEXT,
    message_seq  BIGINT,
    received_at  BIGINT NOT NULL,
    handled_at   BIGINT,
    UNIQUE (channel, event_key)
);
CREATE INDEX channel_events_open ON channel_events (channel, status, id);

-- Every session a chat (or thread) has had, and how far its assistant messages were sent
-- to the chat. The newest is the chat's current session unless `current_of` says otherwise.
CREATE TABLE channel_sessions (
    session_id     TEXT NOT NULL PRIMARY KEY,
    channel        TEXT NOT NULL,
    chat_id        TEXT NOT NULL,
    thread_id      TEXT NOT NULL DEFAULT '',
    delivered_seq  BIGINT NOT NULL DEFAULT 0,
    created_at     BIGINT NOT NULL
);
CREATE INDEX channel_sessions_chat ON channel_sessions (channel, chat_id, thread_id, created_at);

-- The session a chat talks to now (`/new`, `/resume N` change it).
CREATE TABLE channel_chats (
    channel     TEXT NOT NULL,
    chat_id     TEXT NOT NULL,
    thread_id   TEXT NOT NULL DEFAULT '',
    session_id  TEXT NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (channel, chat_id, thread_id)
);

-- A human request (approval, elicitation, dangerous command) posted to a chat with buttons:
-- the id is what signed callback data names. `open` until the request is settled and the
-- message edited to say how and by whom.
CREATE TABLE channel_posts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    channel     TEXT NOT NULL,
    chat_id     TEXT NOT NULL,
    thread_id   TEXT NOT NULL DEFAULT '',
    session_id  TEXT NOT NULL,
    wait_id     TEXT NOT NULL,
    request_id  TEXT NOT NULL,
    kind        TEXT NOT NULL,
    message_id  TEXT,
    status      TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    settled_at  BIGINT,
    UNIQUE (channel, wait_id)
);
CREATE INDEX channel_posts_open ON channel_posts (channel, status);

-- Files a session's `send_file` queued for its chat: copied out of the workspace (read under
-- the sandbox) to `path` in tern's home, sent, then removed.
CREATE TABLE channel_files (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id  TEXT NOT NULL,
    path        TEXT NOT NULL,
    name        TEXT NOT NULL,
    caption     TEXT,
    is_image    BOOLEAN NOT NULL,
    created_at  BIGINT NOT NULL,
    sent_at     BIGINT
);
CREATE INDEX channel_files_unsent ON channel_files (session_id) WHERE sent_at IS NULL;
