-- A run's task by name (the API's task lookup), without reading the run's
-- other tasks.
CREATE UNIQUE INDEX tasks_by_name ON tasks (run_id, name);
