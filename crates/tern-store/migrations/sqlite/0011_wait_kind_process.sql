-- Waits of kind `process`: a background process started with `notify_on_complete` resumes its
-- session once it exits (tern-procs). SQLite cannot alter a CHECK constraint, so the table is
-- rebuilt with exactly 0008's columns and its indexes are recreated. `PRAGMA foreign_keys=OFF`
-- is not available inside the migration's transaction; none is needed: no table references
-- `waits` by foreign key.

CREATE TABLE waits_new (
    id             TEXT PRIMARY KEY,
    session_id     TEXT NOT NULL,
    idem_key       TEXT NOT NULL UNIQUE,
    tool_call_id   TEXT,
    kind           TEXT NOT NULL CHECK (kind IN ('approval', 'elicitation', 'command', 'process')),
    request_id     TEXT,
    request        TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('pending', 'ready', 'delivered', 'cancelled')),
    result         TEXT,
    decided_by     TEXT,
    attempts       BIGINT NOT NULL DEFAULT 0,
    last_error     TEXT,
    message_id     BIGINT,
    created_at     BIGINT NOT NULL,
    ready_at       BIGINT,
    delivered_at   BIGINT,
    answered_at    BIGINT,
    cancelled_at   BIGINT
);

INSERT INTO waits_new (id, session_id, idem_key, tool_call_id, kind, request_id, request, status,
    result, decided_by, attempts, last_error, message_id, created_at, ready_at, delivered_at,
    answered_at, cancelled_at)
SELECT id, session_id, idem_key, tool_call_id, kind, request_id, request, status,
    result, decided_by, attempts, last_error, message_id, created_at, ready_at, delivered_at,
    answered_at, cancelled_at
FROM waits;

DROP TABLE waits;
ALTER TABLE waits_new RENAME TO waits;

CREATE INDEX waits_by_session ON waits (session_id, status);
CREATE INDEX waits_by_status ON waits (status, created_at);
CREATE UNIQUE INDEX waits_by_request ON waits (request_id) WHERE request_id IS NOT NULL;
