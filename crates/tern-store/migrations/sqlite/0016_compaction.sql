-- Context compaction (tern-store/src/compaction.rs). A compaction moves messages out of the
-- active transcript (what the model sees) without deleting them: they stay exportable and
-- searchable, marked with the compaction that replaced them. The cheap pass keeps a long tool
-- output in `content` and gives the model a short placeholder instead (`model_content`).

CREATE TABLE compactions (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id         TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    -- 'auto' (before a model call), 'manual' (asked for), 'overflow' (the model refused).
    reason             TEXT NOT NULL CHECK (reason IN ('auto', 'manual', 'overflow')),
    -- The structured summary of everything compacted so far (the next compaction updates
    -- it); NULL while no compaction summarised anything (only the cheap pass ran).
    summary            TEXT,
    -- The summary as the model sees it (framed as reference material, with the critical
    -- context), and the role it is sent with; NULL with `summary`.
    content            TEXT,
    role               TEXT CHECK (role IN ('user', 'assistant')),
    -- The summary sits right after the message with this seq (the kept head).
    after_seq          BIGINT NOT NULL,
    -- The seqs of the first and last message this compaction replaced (NULL: none).
    first_seq          BIGINT,
    last_seq           BIGINT,
    messages_compacted BIGINT NOT NULL DEFAULT 0,
    -- Tool outputs the cheap pass replaced by a placeholder.
    outputs_elided     BIGINT NOT NULL DEFAULT 0,
    -- The last seq of the transcript when it was compacted: token counts the server reported
    -- for answers up to it were for the transcript before this compaction.
    through_seq        BIGINT NOT NULL,
    tokens_before      BIGINT NOT NULL,
    tokens_after       BIGINT NOT NULL,
    created_at         BIGINT NOT NULL
);

CREATE INDEX compactions_by_session ON compactions (session_id, id);

-- The compaction that took the message out of the active transcript; NULL while active.
ALTER TABLE messages ADD COLUMN compacted_by BIGINT;
-- What the model sees instead of `content` (a placeholder for a long old tool output);
-- NULL: `content` itself.
ALTER TABLE messages ADD COLUMN model_content TEXT;

-- The active transcript of a long session is a small part of it.
CREATE INDEX messages_active ON messages (session_id, seq) WHERE compacted_by IS NULL;
