-- Agent API keys of the gateway. Only a SHA-256 hash of each key is stored: keys are 256-bit
-- random values, so a fast hash is enough and a leaked database reveals no usable key.
CREATE TABLE api_keys (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    key_hash     TEXT NOT NULL UNIQUE,
    prefix       TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    revoked_at   BIGINT
);

-- A name identifies one active key; revoked keys stay for the record.
CREATE UNIQUE INDEX api_keys_active_name ON api_keys (name) WHERE revoked_at IS NULL;
