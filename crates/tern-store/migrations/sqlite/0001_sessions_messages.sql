-- Sessions and their messages in the OpenAI shape.
-- Portable SQL: TEXT ids, BIGINT millisecond timestamps, JSON kept as TEXT. The PostgreSQL
-- migrations mirror this file; only the full-text index differs (FTS5 here, tsvector there).

CREATE TABLE sessions (
    id                TEXT PRIMARY KEY,
    title             TEXT,
    source            TEXT NOT NULL,
    model             TEXT,
    parent_id         TEXT REFERENCES sessions (id) ON DELETE SET NULL,
    system_prompt     TEXT,
    status            TEXT NOT NULL DEFAULT 'idle'
                      CHECK (status IN ('idle', 'running', 'waiting', 'ended')),
    prompt_tokens     BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL
);

CREATE INDEX sessions_by_update ON sessions (updated_at);

CREATE TABLE messages (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id        TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq               BIGINT NOT NULL,
    role              TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content           TEXT,
    tool_calls        TEXT,
    tool_call_id      TEXT,
    tool_name         TEXT,
    reasoning         TEXT,
    turn_id           TEXT,
    prompt_tokens     BIGINT,
    completion_tokens BIGINT,
    created_at        BIGINT NOT NULL,
    UNIQUE (session_id, seq)
);

CREATE VIRTUAL TABLE messages_fts USING fts5 (
    content,
    content = 'messages',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages
WHEN new.content IS NOT NULL BEGIN
    INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
END;

CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
WHEN old.content IS NOT NULL BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
