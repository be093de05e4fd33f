-- Sessions belong to the API key that created them; admin keys see every session.
--
-- `api_keys.kind`: `agent` (the default: its own sessions only) or `admin` (every session).
-- The key a gateway created on its first start (`default`, written to `gateway.key`) is the
-- operator's own credential, which `tern sessions delete` uses to ask the running gateway;
-- that key — the oldest key, named `default`, still active — becomes `admin`, as every key
-- saw every session before this migration.
ALTER TABLE api_keys ADD COLUMN kind TEXT NOT NULL DEFAULT 'agent'
    CHECK (kind IN ('agent', 'admin'));

UPDATE api_keys SET kind = 'admin'
WHERE name = 'default' AND revoked_at IS NULL
  AND id = (SELECT id FROM api_keys ORDER BY created_at, id LIMIT 1);

-- `sessions.owner_key`: the id of the key that created the session (the API or
-- /v1/chat/completions), kept by its successors after a reset. NULL: no key created it —
-- `tern chat`, or any session made before this migration, whose creator was never recorded —
-- and only admin keys see it.
ALTER TABLE sessions ADD COLUMN owner_key TEXT;

CREATE INDEX sessions_by_owner ON sessions (owner_key, updated_at);
