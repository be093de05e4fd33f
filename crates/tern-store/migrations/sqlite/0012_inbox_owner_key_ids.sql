-- The inbox's rows were owned by the agent key's *name* (`owner_key`). A name is not an
-- identity: a revoked key's name given to a new key read the old key's tasks, and a key named
-- after the gateway's own agents (`tern-agent`, `EMBEDDED_OWNER` in tern-waits) read and
-- withdrew the gateway's requests. From here on they are owned by the key's immutable `id`
-- (`api_keys.id`, 32 lowercase hex digits), and the column keeps its name.
--
-- Existing rows: a name borne by an active key now becomes that key's id (a name identifies
-- at most one active key, so the mapping is one to one and the idempotency table's primary
-- key stays unique). Two owners are reserved and stay as they are, whatever keys bear their
-- names: `tern-agent`, the gateway's own agents, and `TERN_SERVER_KEY`, the environment's
-- server key; neither can be a key id (not hex). A name no active key bears (its key was
-- revoked) is prefixed with `name:` — an owner no key can have, since ids have no colon — so
-- that a key later given that name does not inherit the rows. Nothing is deleted: reviewers
-- still see every task and request.

UPDATE inbox_tasks SET owner_key = COALESCE(
    (SELECT k.id FROM api_keys k WHERE k.name = inbox_tasks.owner_key AND k.revoked_at IS NULL),
    'name:' || owner_key)
WHERE owner_key NOT IN ('tern-agent', 'TERN_SERVER_KEY');

UPDATE inbox_idempotency SET owner_key = COALESCE(
    (SELECT k.id FROM api_keys k WHERE k.name = inbox_idempotency.owner_key AND k.revoked_at IS NULL),
    'name:' || owner_key)
WHERE owner_key NOT IN ('tern-agent', 'TERN_SERVER_KEY');

UPDATE inbox_uploads SET owner_key = COALESCE(
    (SELECT k.id FROM api_keys k WHERE k.name = inbox_uploads.owner_key AND k.revoked_at IS NULL),
    'name:' || owner_key)
WHERE owner_key NOT IN ('tern-agent', 'TERN_SERVER_KEY');
