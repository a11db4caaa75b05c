-- Alert rules: which events of a tenant (or of one workflow) alert whom,
-- and how alerts are grouped. Keep in step with the other backend's file
-- (they differ only in the auto-increment key).
CREATE TABLE alert_rules (
    id         TEXT   NOT NULL PRIMARY KEY,
    tenant     TEXT   NOT NULL,
    workflow   TEXT,
    -- Comma-separated alert kinds: run.failed, run.succeeded, task.failed, ...
    kinds      TEXT   NOT NULL,
    -- email, slack, teams or webhook
    channel    TEXT   NOT NULL,
    -- The address or URL.
    target     TEXT   NOT NULL,
    -- Alerts of one group within this window go out as one summary.
    group_ms   BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX alert_rules_by_tenant ON alert_rules (tenant, created_at);

-- Every alert raised, and when (and whether) it went out.
CREATE TABLE alerts (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    rule_id    TEXT   NOT NULL,
    tenant     TEXT   NOT NULL,
    -- The event that raised it: one alert per rule and event.
    seq        BIGINT NOT NULL,
    kind       TEXT   NOT NULL,
    -- Alerts of one rule, workflow and kind are grouped: `workflow|kind`.
    grp        TEXT   NOT NULL,
    workflow   TEXT,
    run_id     TEXT,
    message    TEXT   NOT NULL,
    at         BIGINT NOT NULL,
    -- The message it went out in (NULL: not yet), and the last failure.
    sent_at    BIGINT,
    error      TEXT
);
CREATE UNIQUE INDEX alerts_once ON alerts (rule_id, seq);
CREATE INDEX alerts_unsent ON alerts (sent_at, rule_id);
CREATE INDEX alerts_by_group ON alerts (rule_id, grp, sent_at);
CREATE INDEX alerts_by_tenant ON alerts (tenant, id);
