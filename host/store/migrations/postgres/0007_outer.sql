-- The outer DAG: workflows that depend on workflows (issue 13).

-- What each workflow needs (its upstream workflows, and the workflows its
-- tasks run as children), replaced whenever it is applied: read for the
-- loop check at apply time, for lineage, and to know whose state changes
-- anyone waits for.
CREATE TABLE workflow_edges (
    tenant   TEXT   NOT NULL,
    workflow TEXT   NOT NULL,
    upstream TEXT   NOT NULL,
    task     TEXT,
    past     BIGINT NOT NULL DEFAULT 0,
    kind     TEXT   NOT NULL
);
CREATE INDEX workflow_edges_by_workflow ON workflow_edges (tenant, workflow);
CREATE INDEX workflow_edges_by_upstream ON workflow_edges (tenant, upstream);

-- Which runs (or tasks of runs) wait for which upstream instances: a
-- state change of an upstream run finds its waiting runs here by index,
-- in the transaction that records it, and wakes them with a command.
CREATE TABLE run_waits (
    run_id    TEXT   NOT NULL,
    tenant    TEXT   NOT NULL,
    upstream  TEXT   NOT NULL,
    from_time BIGINT NOT NULL,
    to_time   BIGINT NOT NULL,
    slot      BIGINT NOT NULL
);
CREATE INDEX run_waits_by_upstream ON run_waits (tenant, upstream, from_time);
CREATE INDEX run_waits_by_run ON run_waits (run_id);

-- Which upstream runs a run was released by (impact analysis: rerunning an
-- upstream instance can rerun what it released).
CREATE TABLE run_links (
    tenant     TEXT NOT NULL,
    upstream   TEXT NOT NULL,
    downstream TEXT NOT NULL,
    PRIMARY KEY (upstream, downstream)
);

-- A run of a sub-workflow task, and the task a child run belongs to.
ALTER TABLE runs ADD COLUMN parent_run TEXT;
ALTER TABLE runs ADD COLUMN parent_task BIGINT;
ALTER TABLE tasks ADD COLUMN child_run TEXT;
CREATE INDEX runs_by_cycle ON runs (tenant, workflow, logical_time);
CREATE INDEX runs_by_parent ON runs (parent_run) WHERE parent_run IS NOT NULL;

-- A schedule taken offline (the workflow stays).
ALTER TABLE workflows ADD COLUMN schedule_paused BIGINT NOT NULL DEFAULT 0;
