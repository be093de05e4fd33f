-- `[inbox.policy]` and `[[inbox.notify]]` of the human inbox.
--
-- Requests remember their `keyValueContext.action` (rate limits count requests per action
-- and window) and, when `expires_after` is set, when they expire (the sweeper settles the
-- overdue ones).
ALTER TABLE inbox_requests ADD COLUMN action TEXT;
ALTER TABLE inbox_requests ADD COLUMN expires_at BIGINT;

CREATE INDEX inbox_requests_by_action ON inbox_requests (action, created_at);
CREATE INDEX inbox_requests_by_expiry ON inbox_requests (status, expires_at);

-- The notification outbox: one row per new request and configured URL, inserted in the
-- transaction that creates the request, so a notification is never lost between the two;
-- a worker delivers due rows and records each attempt. The signing secret stays in
-- config.toml: rows name the URL, and the worker looks its secret up there.
CREATE TABLE inbox_notifications (
    id               TEXT PRIMARY KEY,
    request_id       TEXT NOT NULL REFERENCES inbox_requests (id),
    url              TEXT NOT NULL,
    -- The JSON sent, exactly; signed at each attempt with the attempt's timestamp.
    body             TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  BIGINT NOT NULL,
    last_error       TEXT,
    created_at       BIGINT NOT NULL,
    delivered_at     BIGINT
);

CREATE INDEX inbox_notifications_due ON inbox_notifications (status, next_attempt_at);
