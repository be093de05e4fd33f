-- Following a remote inbox's decisions feed (`[inbox] url`): where the feed was read up to,
-- per inbox, so that a restart goes on from there instead of missing or re-reading
-- decisions.
CREATE TABLE remote_inbox_cursors (
    -- The inbox's base URL.
    inbox       TEXT PRIMARY KEY,
    -- The feed's opaque `nextCursor`.
    cursor      TEXT NOT NULL,
    updated_at  BIGINT NOT NULL
);

-- Decisions the feed reported for requests no wait knew of yet: a request decided at once
-- (an auto-approve rule) can reach the feed before its wait has stored the request id. They
-- are matched to the wait once it has, and forgotten after a while (requests of other agents
-- that share the key never match).
CREATE TABLE remote_inbox_unmatched (
    request_id  TEXT PRIMARY KEY,
    -- The feed item (JSON).
    decision    TEXT NOT NULL,
    seen_at     BIGINT NOT NULL
);

CREATE INDEX remote_inbox_unmatched_by_age ON remote_inbox_unmatched (seen_at);
