-- Singleton duties (cron materialisation) are guarded by the leader's
-- fencing token: a write carries the token, and only the highest token
-- ever seen for a duty may write.
CREATE TABLE singletons (
    name       TEXT   NOT NULL PRIMARY KEY,
    holder     TEXT   NOT NULL,
    token      BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX runs_by_slot ON runs (slot) WHERE state IN ('queued', 'running', 'paused');
