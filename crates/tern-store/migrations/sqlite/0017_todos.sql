-- A session's task list, written by the `todo` tool (tern-session-tools). One row per item;
-- `id` is the model's name for the item, unique in its session; `position` keeps the order
-- the model gave (list order is priority). Items go with their session.

CREATE TABLE todos (
    session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    id          TEXT NOT NULL,
    position    BIGINT NOT NULL,
    content     TEXT NOT NULL,
    status      TEXT NOT NULL
                CHECK (status IN ('pending', 'in_progress', 'completed', 'cancelled')),
    created_at  BIGINT NOT NULL,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (session_id, id)
);

CREATE INDEX todos_by_position ON todos (session_id, position);
