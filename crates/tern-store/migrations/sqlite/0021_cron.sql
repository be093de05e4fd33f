-- Scheduled jobs (issue 16): the jobs, and one row per occurrence of each, so that every
-- occurrence is accounted for (ran, skipped with a reason, or interrupted by a crash).

CREATE TABLE cron_jobs (
    id                 TEXT PRIMARY KEY,
    name               TEXT,
    -- `Schedule::to_stored()`: the spec and what it resolved to (JSON text).
    schedule           TEXT NOT NULL,
    prompt             TEXT NOT NULL,
    kind               TEXT NOT NULL CHECK (kind IN ('agent', 'script')),
    -- The command of a `script` job (run with no model).
    script             TEXT,
    -- `new_session`, or the id of the one session whose history accumulates.
    target             TEXT NOT NULL,
    -- JSON array of toolset names; NULL: the defaults.
    toolsets           TEXT,
    timeout_ms         BIGINT,
    -- JSON: "none", "session_chat", or {"webhook": URL}.
    deliver_to         TEXT NOT NULL,
    catch_up           TEXT NOT NULL DEFAULT 'one' CHECK (catch_up IN ('one', 'all', 'none')),
    grace_ms           BIGINT NOT NULL,
    overlap            TEXT NOT NULL DEFAULT 'skip' CHECK (overlap IN ('skip', 'queue')),
    retry_interrupted  BOOLEAN NOT NULL DEFAULT FALSE,
    enabled            BOOLEAN NOT NULL DEFAULT TRUE,
    -- The API key that owns the job; NULL: made by the CLI (only admin keys see it).
    owner_key          TEXT,
    -- `cli`, `api` or `agent`, and the session that made it (an agent's).
    created_by         TEXT NOT NULL CHECK (created_by IN ('cli', 'api', 'agent')),
    created_by_session TEXT,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    -- The next occurrence not yet claimed or skipped (ms); NULL once there is none (a
    -- one-shot that ran: `retired_at` is set).
    next_run_at        BIGINT,
    retired_at         BIGINT
);

-- The scheduler's one query: the enabled jobs due by now.
CREATE INDEX cron_jobs_due ON cron_jobs (next_run_at) WHERE enabled AND next_run_at IS NOT NULL;
CREATE INDEX cron_jobs_by_owner ON cron_jobs (owner_key, created_at);

-- One row per occurrence that came due. The unique key is the exactly-once claim: a second
-- claim of the same (job, scheduled time) fails. The rows outlive their job (history).
CREATE TABLE cron_occurrences (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id        TEXT NOT NULL,
    scheduled_at  BIGINT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('running', 'ran', 'skipped', 'interrupted')),
    -- Why it was skipped (`missed: gateway down`, `overlap: …`).
    reason        TEXT,
    session_id    TEXT,
    -- How the run ended (the turn's outcome, or the script's exit), once it has.
    outcome       TEXT,
    started_at    BIGINT,
    finished_at   BIGINT,
    -- 1 for the first run; 2 for the retry of an interrupted one.
    attempt       BIGINT NOT NULL DEFAULT 1,
    -- `schedule`, or `manual` (`tern cron run`: at the time it was asked, not moving the
    -- schedule).
    trigger       TEXT NOT NULL DEFAULT 'schedule' CHECK (trigger IN ('schedule', 'manual')),
    -- What the run produced (the last answer, or the script's output), cut to 64 KiB.
    output        TEXT,
    -- Webhook delivery: NULL until tried (or for a job that does not deliver to one), then
    -- `delivered` or `failed: …`.
    delivery      TEXT,
    UNIQUE (job_id, scheduled_at)
);
CREATE INDEX cron_occurrences_running ON cron_occurrences (state) WHERE state = 'running';
