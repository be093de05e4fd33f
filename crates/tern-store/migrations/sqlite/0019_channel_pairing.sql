-- DM pairing for chat channels (tern-channels): who, besides a channel's configured
-- `allowed_users`, may talk to the agent. Codes are kept only as a salted SHA-256 hash; the
-- plaintext goes to the chat user once and nowhere else.

-- A code waiting for the owner's `tern pairing approve`. One per (platform, user): asking
-- again replaces it. Rows outlive their expiry until the next write on the platform, so an
-- expired code is told apart from an unknown one.
CREATE TABLE channel_pairing_pending (
    platform      TEXT NOT NULL,
    user_id       TEXT NOT NULL,
    display_name  TEXT NOT NULL,
    code_salt     TEXT NOT NULL,
    code_hash     TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    PRIMARY KEY (platform, user_id)
);

-- Users the owner approved. A revoked user keeps their row (with `revoked_at`) so the history
-- stays; approving them again clears it.
CREATE TABLE channel_pairing_approved (
    platform      TEXT NOT NULL,
    user_id       TEXT NOT NULL,
    display_name  TEXT NOT NULL,
    approved_at   BIGINT NOT NULL,
    reviewer      TEXT,
    revoked_at    BIGINT,
    PRIMARY KEY (platform, user_id)
);

-- Consecutive failed approvals per platform, and until when the platform is locked out.
CREATE TABLE channel_pairing_failures (
    platform      TEXT NOT NULL PRIMARY KEY,
    failures      BIGINT NOT NULL,
    locked_until  BIGINT
);
