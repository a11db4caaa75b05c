-- Tasks and attempts are stored once, in their primary key's order
-- (`WITHOUT ROWID`), instead of a row table plus a copy of the key in an
-- automatic index: every task row and attempt row written by a step is one
-- B-tree insert instead of two. Outputs and logs stay row tables (their rows
-- can be large, which clustered tables store poorly).
CREATE TABLE tasks_clustered (
    run_id      TEXT   NOT NULL,
    idx         BIGINT NOT NULL,
    name        TEXT   NOT NULL,
    state       TEXT   NOT NULL,
    attempts    BIGINT NOT NULL DEFAULT 0,
    failures    BIGINT NOT NULL DEFAULT 0,
    forced      BIGINT NOT NULL DEFAULT 0,
    retry_at    BIGINT,
    error       TEXT,
    started_at  BIGINT,
    finished_at BIGINT,
    lost        BIGINT NOT NULL DEFAULT 0,
    child_run   TEXT,
    PRIMARY KEY (run_id, idx)
) WITHOUT ROWID;
INSERT INTO tasks_clustered (run_id, idx, name, state, attempts, failures, forced, retry_at, error, started_at, finished_at, lost, child_run)
    SELECT run_id, idx, name, state, attempts, failures, forced, retry_at, error, started_at, finished_at, lost, child_run FROM tasks;
DROP TABLE tasks;
ALTER TABLE tasks_clustered RENAME TO tasks;
CREATE UNIQUE INDEX tasks_by_name ON tasks (run_id, name);

CREATE TABLE attempts_clustered (
    run_id       TEXT   NOT NULL,
    task_idx     BIGINT NOT NULL,
    number       BIGINT NOT NULL,
    task         TEXT   NOT NULL,
    state        TEXT   NOT NULL,
    failure_kind TEXT,
    message      TEXT,
    charged      BIGINT NOT NULL DEFAULT 1,
    worker       TEXT   NOT NULL,
    epoch        BIGINT NOT NULL,
    started_at   BIGINT NOT NULL,
    finished_at  BIGINT,
    PRIMARY KEY (run_id, task_idx, number)
) WITHOUT ROWID;
INSERT INTO attempts_clustered (run_id, task_idx, number, task, state, failure_kind, message, charged, worker, epoch, started_at, finished_at)
    SELECT run_id, task_idx, number, task, state, failure_kind, message, charged, worker, epoch, started_at, finished_at FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_clustered RENAME TO attempts;
CREATE INDEX attempts_running ON attempts (worker) WHERE state = 'running';
