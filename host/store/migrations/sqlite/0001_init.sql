-- dagr schema, SQLite flavour. Times are milliseconds since the Unix epoch.
-- Keep in step with ../postgres/0001_init.sql: the queries are shared.

CREATE TABLE workflows (
    tenant          TEXT    NOT NULL,
    name            TEXT    NOT NULL,
    latest_version  BIGINT  NOT NULL,
    deleted         BIGINT  NOT NULL DEFAULT 0,
    created_at      BIGINT  NOT NULL,
    updated_at      BIGINT  NOT NULL,
    -- The last logical time a schedule materialised, and when the schedule
    -- began (for catch-up of a new schedule).
    schedule_cursor BIGINT,
    schedule_since  BIGINT,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE workflow_versions (
    tenant     TEXT   NOT NULL,
    name       TEXT   NOT NULL,
    version    BIGINT NOT NULL,
    hash       TEXT   NOT NULL,
    spec       TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (tenant, name, version)
);

CREATE TABLE runs (
    id           TEXT   NOT NULL PRIMARY KEY,
    tenant       TEXT   NOT NULL,
    workflow     TEXT   NOT NULL,
    version      BIGINT,
    kind         TEXT   NOT NULL,
    state        TEXT   NOT NULL,
    logical_time BIGINT NOT NULL,
    params       TEXT   NOT NULL,
    spec         TEXT,
    backfill_id  TEXT,
    slot         BIGINT NOT NULL,
    owner        TEXT,
    epoch        BIGINT NOT NULL DEFAULT 0,
    created_at   BIGINT NOT NULL,
    started_at   BIGINT,
    finished_at  BIGINT,
    updated_at   BIGINT NOT NULL
);
-- One run per logical time for instance-based scheduling (cron and backfill).
CREATE UNIQUE INDEX runs_cycle ON runs (tenant, workflow, logical_time) WHERE kind IN ('schedule', 'backfill');
CREATE INDEX runs_by_workflow ON runs (tenant, workflow, created_at);
CREATE INDEX runs_by_tenant ON runs (tenant, created_at);
CREATE INDEX runs_active ON runs (state) WHERE state IN ('queued', 'running', 'paused');
CREATE INDEX runs_by_backfill ON runs (backfill_id) WHERE backfill_id IS NOT NULL;

CREATE TABLE tasks (
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
    PRIMARY KEY (run_id, idx)
);

CREATE TABLE task_outputs (
    run_id TEXT   NOT NULL,
    idx    BIGINT NOT NULL,
    output TEXT   NOT NULL,
    PRIMARY KEY (run_id, idx)
);

CREATE TABLE attempts (
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
);
CREATE INDEX attempts_running ON attempts (worker) WHERE state = 'running';

CREATE TABLE logs (
    run_id   TEXT   NOT NULL,
    task_idx BIGINT NOT NULL,
    attempt  BIGINT NOT NULL,
    seq      BIGINT NOT NULL,
    at       BIGINT NOT NULL,
    source   TEXT   NOT NULL,
    level    TEXT   NOT NULL,
    message  TEXT   NOT NULL,
    PRIMARY KEY (run_id, task_idx, attempt, seq)
);

CREATE TABLE events (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant   TEXT   NOT NULL,
    at       BIGINT NOT NULL,
    kind     TEXT   NOT NULL,
    run_id   TEXT,
    task     TEXT,
    data     TEXT   NOT NULL
);
CREATE INDEX events_by_tenant ON events (tenant, seq);
CREATE INDEX events_by_run ON events (run_id, seq);

CREATE TABLE commands (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant     TEXT   NOT NULL,
    run_id     TEXT   NOT NULL,
    slot       BIGINT NOT NULL,
    kind       TEXT   NOT NULL,
    payload    TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    done_at    BIGINT,
    result     TEXT
);
CREATE INDEX commands_pending ON commands (slot, id) WHERE done_at IS NULL;

CREATE TABLE backfills (
    id         TEXT   NOT NULL PRIMARY KEY,
    tenant     TEXT   NOT NULL,
    workflow   TEXT   NOT NULL,
    from_time  BIGINT NOT NULL,
    to_time    BIGINT NOT NULL,
    parallel   BIGINT NOT NULL,
    total      BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX backfills_by_tenant ON backfills (tenant, created_at);
