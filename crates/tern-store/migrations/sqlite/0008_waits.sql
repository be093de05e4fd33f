-- Durable waits: an agent asked a human (through the inbox) and ended its turn; the answer
-- resumes its session. A wait moves pending → ready (the decision is known and stored here)
-- → delivered (the decision message is in the session, appended in the same transaction that
-- marks the wait delivered, so it is appended exactly once) → answered_at set once a turn
-- ran on it. cancelled: the session was deleted or reset and the request withdrawn.

CREATE TABLE waits (
    id             TEXT PRIMARY KEY,
    -- No foreign key: a deleted session cancels its waits, and the row stays as history.
    session_id     TEXT NOT NULL,
    -- Derived from the session and the tool call's id: a retried call finds its wait.
    idem_key       TEXT NOT NULL UNIQUE,
    tool_call_id   TEXT,
    kind           TEXT NOT NULL CHECK (kind IN ('approval', 'elicitation', 'command')),
    -- The inbox's request id, once the inbox answered the create.
    request_id     TEXT,
    -- What was asked (JSON), for the decision message and for listings.
    request        TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('pending', 'ready', 'delivered', 'cancelled')),
    -- The ApprovalResult / ElicitationResult JSON once ready.
    result         TEXT,
    -- Who decided (for the message and the hook event).
    decided_by     TEXT,
    -- Polls or deliveries tried (remote polling counts its errors here).
    attempts       BIGINT NOT NULL DEFAULT 0,
    last_error     TEXT,
    -- The id of the decision message once delivered.
    message_id     BIGINT,
    created_at     BIGINT NOT NULL,
    ready_at       BIGINT,
    delivered_at   BIGINT,
    answered_at    BIGINT,
    cancelled_at   BIGINT
);

CREATE INDEX waits_by_session ON waits (session_id, status);
CREATE INDEX waits_by_status ON waits (status, created_at);
CREATE UNIQUE INDEX waits_by_request ON waits (request_id) WHERE request_id IS NOT NULL;
