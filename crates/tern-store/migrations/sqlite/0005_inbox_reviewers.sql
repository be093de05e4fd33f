-- The inbox's reviewers: the people who decide requests, separate from agent keys. Secrets
-- (login tokens, session tokens, bearer tokens) are 256-bit random values of which only the
-- SHA-256 is stored, so a leaked database reveals nothing usable. Portable SQL as in 0001.

CREATE TABLE inbox_reviewers (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    -- 1 for reviewers who may manage other reviewers (the `admin` created at first start).
    is_admin     INTEGER NOT NULL DEFAULT 0 CHECK (is_admin IN (0, 1)),
    created_at   BIGINT NOT NULL,
    -- Set when the reviewer is removed; the row stays so that old decisions keep a name.
    disabled_at  BIGINT
);

-- A name identifies one active reviewer; a removed name may be given to someone new.
CREATE UNIQUE INDEX inbox_reviewers_active_name ON inbox_reviewers (name)
    WHERE disabled_at IS NULL;

-- One-time login links: valid for 24 hours, consumed on first use.
CREATE TABLE inbox_login_tokens (
    token_hash   TEXT PRIMARY KEY,
    reviewer_id  TEXT NOT NULL REFERENCES inbox_reviewers (id),
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    consumed_at  BIGINT
);

CREATE INDEX inbox_login_tokens_by_reviewer ON inbox_login_tokens (reviewer_id);

-- Browser sessions (the `tern_inbox` cookie), each with the CSRF token its forms carry.
CREATE TABLE inbox_sessions (
    token_hash   TEXT PRIMARY KEY,
    reviewer_id  TEXT NOT NULL REFERENCES inbox_reviewers (id),
    -- Not a credential on its own: it is echoed into every form of the session.
    csrf_token   TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL
);

CREATE INDEX inbox_sessions_by_reviewer ON inbox_sessions (reviewer_id);

-- Bearer tokens for the CLI (`tern_rv_<64 hex>`).
CREATE TABLE inbox_reviewer_tokens (
    token_hash   TEXT PRIMARY KEY,
    reviewer_id  TEXT NOT NULL REFERENCES inbox_reviewers (id),
    -- What the token is for, e.g. `inbox-admin.json` or `cli`.
    label        TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    revoked_at   BIGINT
);

CREATE INDEX inbox_reviewer_tokens_by_reviewer ON inbox_reviewer_tokens (reviewer_id);
