-- A message whose content is an array of parts (chat completions' `content: [...]`): a user
-- message carrying the images a tool produced, for a model that accepts images. The parts as
-- JSON; `content` keeps the message as text (each image described), which is what the
-- full-text index, transcripts and compaction read. NULL for every text-only message, and
-- for every message stored before this migration.
ALTER TABLE messages ADD COLUMN parts TEXT;
