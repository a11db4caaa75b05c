-- A tenant's unfinished runs, counted before a backfill adds more (its
-- limit `max_unfinished_runs`). Partial: a run leaves it when it ends. The
-- state is in `runs_active`'s predicate already, so on PostgreSQL no update
-- that could stay on its page (HOT) is lost to it.
CREATE INDEX runs_unfinished ON runs (tenant) WHERE state IN ('queued', 'waiting', 'running', 'paused');
