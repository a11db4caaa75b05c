-- A workflow's (and a backfill's) active runs, counted by the commit that
-- admits one under its limit (`max_active_runs`, a backfill's
-- parallelism): a cluster's masters each count only the runs they hold.
-- Partial, and small: a run is in it while it runs. Its columns never
-- change and the state is in `runs_active`'s predicate already, so on
-- PostgreSQL no update that could stay on its page (HOT) is lost to it.
CREATE INDEX runs_running ON runs (tenant, workflow, backfill_id) WHERE state IN ('running', 'paused');
