-- Attempts of a task lost with their node since it was last reset (a task
-- that crashes its node fails past [master] max_lost_attempts).
ALTER TABLE tasks ADD COLUMN lost BIGINT NOT NULL DEFAULT 0;
