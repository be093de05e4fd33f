-- The MCP servers' questions (`elicitation/create`) the gateway asked in the inbox for a
-- session and is waiting on: no durable wait (the server holds its tool call open for the
-- answer), so this row is what lets a chat channel post it to the session's chat and settle
-- the post. Deleted once the gateway has answered the server or withdrawn the request, and
-- at the next start for those an earlier process held (their calls ended with it).
CREATE TABLE mcp_elicitations (
    request_id  TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
CREATE INDEX mcp_elicitations_session ON mcp_elicitations (session_id);
