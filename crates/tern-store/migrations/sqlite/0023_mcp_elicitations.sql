-- An MCP server's question (`elicitation/create`) the gateway asked in the inbox for a
-- session: no durable wait (the server holds its tool call open for the answer), so this row
-- is what lets a chat channel post it to the session's chat and settle the post. `pending`
-- while the gateway waits for the answer; `ended` once it has answered the server, withdrawn
-- the request, or (at the next start) lost the call with the process that held it.
CREATE TABLE mcp_elicitations (
    request_id  TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL,
    status      TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    ended_at    BIGINT
);
CREATE INDEX mcp_elicitations_pending ON mcp_elicitations (status, session_id);
