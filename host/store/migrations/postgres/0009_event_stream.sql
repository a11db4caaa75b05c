-- The event stream (GET /v1/events) filters by workflow without a join:
-- each event names its workflow (its run's, or its schedule's).
ALTER TABLE events ADD COLUMN workflow TEXT;
UPDATE events SET workflow = (SELECT runs.workflow FROM runs WHERE runs.id = events.run_id) WHERE run_id IS NOT NULL;
CREATE INDEX events_by_workflow ON events (tenant, workflow, seq);
