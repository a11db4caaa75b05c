-- Cold partitions (issue 18): finished runs move, with what they own, into
-- a partition per tenant and period; this index records each partition's
-- period and the range of its runs' creation and logical times, so that a
-- lookup opens only the partitions that can hold what it looks for.
CREATE TABLE archive_partitions (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant          TEXT   NOT NULL,
    period          TEXT   NOT NULL,
    from_time       BIGINT NOT NULL,
    to_time         BIGINT NOT NULL,
    runs            BIGINT NOT NULL DEFAULT 0,
    min_logical     BIGINT,
    max_logical     BIGINT,
    min_created     BIGINT,
    max_created     BIGINT,
    created_at      BIGINT NOT NULL,
    logs_dropped_at BIGINT
);
CREATE UNIQUE INDEX archive_partitions_by_period ON archive_partitions (tenant, period);

-- The carry-over finds a tenant's runs finished before its cut-off, and
-- takes a run's commands along.
CREATE INDEX runs_by_finished ON runs (tenant, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX commands_by_run ON commands (run_id);
