-- The toolsets a session is limited to (a JSON array), whatever a turn asks for: a child
-- session of `delegate_task` keeps its narrower toolsets when a wait resumes it. NULL: no
-- limit beyond the turn's own.
ALTER TABLE sessions ADD COLUMN toolsets TEXT;
