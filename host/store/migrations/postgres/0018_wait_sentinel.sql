-- A waiting run is woken by any end of one instance it waits for (its
-- sentinel, the blocker expected to end last), and by failures only in the
-- rest of its ranges: the hours of a day that end in order no longer wake
-- every daily run that waits for them, one re-evaluation each.
ALTER TABLE run_waits ADD COLUMN failures_only BIGINT NOT NULL DEFAULT 0;
