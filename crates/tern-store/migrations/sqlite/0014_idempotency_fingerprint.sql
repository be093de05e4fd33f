-- What each Idempotency-Key was first used with: the hex SHA-256 of the request's canonical
-- JSON (for an upload, of its content's hash, size, type and name). A repeat of the key with
-- another request is refused (422 `idempotency_key_reused`) instead of being answered with the
-- first response. Keys claimed before this migration have no fingerprint and keep being
-- answered with their first response, whatever the repeat sends.
ALTER TABLE inbox_idempotency ADD COLUMN fingerprint TEXT;
