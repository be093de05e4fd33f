-- A session's CSRF token is derived from its session token (hex SHA-256 of
-- "tern-csrf:" + token, see tern-inbox's reviewers.rs), which every request carries in its
-- cookie, so the database no longer holds it: nothing stored is a usable secret. Sessions
-- made before this migration keep working; their CSRF token is now the derived one (pages
-- opened before it need a reload).
ALTER TABLE inbox_sessions DROP COLUMN csrf_token;
