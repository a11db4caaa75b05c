-- Quiet hours of an alert rule: JSON {"from": "22:00", "to": "07:00",
-- "timezone": "Europe/Berlin"}; none: the rule sends at any hour.
ALTER TABLE alert_rules ADD COLUMN quiet TEXT;
-- For `run.waiting_long`: how long a run may wait for its upstream before
-- the rule alerts.
ALTER TABLE alert_rules ADD COLUMN wait_ms BIGINT;
