-- Files agents upload to the human inbox (`POST /api/uploads`). The bytes live outside the
-- database, content-addressed under `$TERN_HOME/uploads/` by their SHA-256, so identical
-- content is stored once however often it is uploaded; each upload is a row of its own,
-- owned by the agent key that sent it (only that key and reviewers may read it).
CREATE TABLE inbox_uploads (
    id            TEXT PRIMARY KEY,
    owner_key     TEXT NOT NULL,
    -- Lowercase hex; names the file under the uploads directory.
    sha256        TEXT NOT NULL,
    size          BIGINT NOT NULL,
    -- As the uploader declared it (normalized); downloads serve a safe subset.
    content_type  TEXT NOT NULL,
    file_name     TEXT,
    created_at    BIGINT NOT NULL
);

CREATE INDEX inbox_uploads_by_owner ON inbox_uploads (owner_key, created_at);
CREATE INDEX inbox_uploads_by_sha256 ON inbox_uploads (sha256);
