-- The human inbox (Pump Up agent API): projects, tasks, their append-only event log, the
-- approval and elicitation requests waiting for a human, and the idempotency keys of the
-- agents' writes. Portable SQL as in 0001: TEXT ids (UUIDv7), BIGINT millisecond timestamps,
-- JSON kept as TEXT; wire values (RUNNING, APPROVAL_REQUESTED, …) are stored as spelled on
-- the wire so that the rows read back without a translation table.

CREATE TABLE inbox_projects (
    id          TEXT PRIMARY KEY,
    -- The slug agents reference the project by (`projectName` on the wire).
    name        TEXT NOT NULL UNIQUE,
    -- `{initialStep, steps: [{name, owner, exits?}], stepSchemas?}`
    steps       TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);

CREATE TABLE inbox_tasks (
    id            TEXT PRIMARY KEY,
    project_id    TEXT NOT NULL REFERENCES inbox_projects (id),
    -- The name of the agent key that created the task: a key sees only its own tasks.
    owner_key     TEXT NOT NULL,
    name          TEXT NOT NULL,
    external_id   TEXT,
    status        TEXT NOT NULL CHECK (status IN ('RUNNING', 'WAITING', 'CLOSED')),
    current_step  TEXT NOT NULL,
    metadata      TEXT NOT NULL,
    attachments   TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);

CREATE INDEX inbox_tasks_by_owner ON inbox_tasks (owner_key, created_at);

-- The audit trail: rows are only ever inserted. `seq` orders the log (ids are random) and is
-- what event cursors encode.
CREATE TABLE inbox_events (
    seq                INTEGER PRIMARY KEY AUTOINCREMENT,
    id                 TEXT NOT NULL UNIQUE,
    project_id         TEXT NOT NULL REFERENCES inbox_projects (id),
    task_id            TEXT NOT NULL REFERENCES inbox_tasks (id),
    timestamp          BIGINT NOT NULL,
    event_type         TEXT NOT NULL,
    owner              TEXT NOT NULL CHECK (owner IN ('AGENT', 'HUMAN', 'PLATFORM')),
    source             TEXT NOT NULL CHECK (source IN ('AGENT', 'HUMAN', 'PLATFORM')),
    -- The wire payload, a union tagged by `type`.
    payload            TEXT NOT NULL,
    in_response_to     TEXT,
    transition_from    TEXT,
    transition_to      TEXT,
    external_trace_id  TEXT
);

CREATE INDEX inbox_events_by_task ON inbox_events (task_id, seq);

CREATE TABLE inbox_requests (
    -- The id of the request's *_REQUESTED event, which is the request id agents poll by.
    id          TEXT PRIMARY KEY REFERENCES inbox_events (id),
    kind        TEXT NOT NULL CHECK (kind IN ('approval', 'elicitation')),
    task_id     TEXT NOT NULL REFERENCES inbox_tasks (id),
    project_id  TEXT NOT NULL REFERENCES inbox_projects (id),
    status      TEXT NOT NULL CHECK (status IN ('pending', 'decided', 'withdrawn', 'expired')),
    -- `{summary, keyValueContext?, recommendation?, fields?, attachments?}`
    request     TEXT NOT NULL,
    -- The ApprovalResult or ElicitationResult, once decided.
    result      TEXT,
    decided_by  TEXT,
    decided_at  BIGINT,
    created_at  BIGINT NOT NULL
);

-- The human inbox lists pending requests, newest first.
CREATE INDEX inbox_requests_pending ON inbox_requests (status, created_at DESC);
-- A decision looks for the task's other pending requests.
CREATE INDEX inbox_requests_by_task ON inbox_requests (task_id, status);

-- One row per (agent key, Idempotency-Key): the response of the first request, returned again
-- for every repeat. The row is claimed and the response written in the transaction that
-- creates what the request creates, so `response` is never seen empty by another transaction.
CREATE TABLE inbox_idempotency (
    owner_key    TEXT NOT NULL,
    idem_key     TEXT NOT NULL,
    -- e.g. `POST api/tasks`: a key reused for another method or path is refused.
    method_path  TEXT NOT NULL,
    response     TEXT,
    status_code  INTEGER,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (owner_key, idem_key)
);
