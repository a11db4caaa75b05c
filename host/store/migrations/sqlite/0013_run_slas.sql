-- Runs' deadlines (a workflow's `sla`): the alerter raises
-- `run.sla_missed` once for a run unfinished at `due_at`.
CREATE TABLE run_slas (
    run_id    TEXT   NOT NULL PRIMARY KEY,
    tenant    TEXT   NOT NULL,
    workflow  TEXT   NOT NULL,
    due_at    BIGINT NOT NULL,
    missed_at BIGINT
);
CREATE INDEX run_slas_due ON run_slas (missed_at, due_at);
