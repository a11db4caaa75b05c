-- The audit log's retention (`[archive] audit_retain_for`) deletes the
-- records made before a time, oldest first, a batch at a time.
CREATE INDEX audit_by_at ON audit (at);
