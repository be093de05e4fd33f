-- The model that wrote each assistant message, as its server named it: a session's
-- `model` is only what it was created with, while `tern chat --model` and the gateway's
-- configuration decide what each turn really uses. NULL for other roles and for messages
-- stored before this migration.
ALTER TABLE messages ADD COLUMN model TEXT;
