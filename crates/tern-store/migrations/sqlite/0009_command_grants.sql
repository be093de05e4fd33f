-- Grants for dangerous `terminal` commands, made when a reviewer approves a command's
-- approval request in the inbox (a wait of kind 'command'). The gateway's approver checks
-- them before asking again:
--   once    — this session may run this exact command, in this working directory, one time;
--             `used_at` is set by the single UPDATE that consumes it, so it runs at most once;
--   session — this session may run any command matching the pattern (`pattern_key`) without
--             asking, like the CLI's "for this session";
--   always  — any session may run this exact command (also written to the config file's
--             allowlist by the approver; the row makes it hold from the moment of the decision,
--             whether or not the config file could be written).

CREATE TABLE command_grants (
    id           TEXT PRIMARY KEY,
    -- The wait whose decision made the grant: recording that decision again (the resumer
    -- retried after a crash) makes no second grant.
    wait_id      TEXT NOT NULL UNIQUE,
    session_id   TEXT NOT NULL,
    scope        TEXT NOT NULL CHECK (scope IN ('once', 'session', 'always')),
    -- The exact command (trimmed) and where it was to run, as the reviewer saw them.
    command      TEXT NOT NULL,
    workdir      TEXT NOT NULL,
    pattern_key  TEXT NOT NULL,
    -- Who decided (the inbox's decidedBy), for audits.
    decided_by   TEXT,
    created_at   BIGINT NOT NULL,
    -- `once` grants: when it was used up.
    used_at      BIGINT
);

CREATE INDEX command_grants_by_session ON command_grants (session_id, scope);
CREATE INDEX command_grants_always ON command_grants (command) WHERE scope = 'always';
