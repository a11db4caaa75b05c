-- The worker's lease an attempt's dispatch was addressed to (a worker
-- refuses a dispatch sent to a lease it no longer holds). A master that
-- takes the attempt over compares it with the worker's lease now: a worker
-- that still holds it and never took the attempt under it vouches that it
-- never ran there. NULL for attempts written before, and where the master
-- did not know the lease.
ALTER TABLE attempts ADD COLUMN lease BIGINT;
