-- Webhook subscriptions: a tenant's events delivered to a URL, signed,
-- in order, at least once. `cursor` is the number of the last event
-- delivered (or passed over by the filter): the event log is the outbox.
CREATE TABLE webhooks (
    id            TEXT   NOT NULL PRIMARY KEY,
    tenant        TEXT   NOT NULL,
    url           TEXT   NOT NULL,
    -- Comma-separated kinds (`run.*` for a prefix); empty for every kind.
    kinds         TEXT   NOT NULL,
    workflow      TEXT,
    -- The signing secret (whsec_ + base64), shown once at creation.
    secret        TEXT   NOT NULL,
    cursor        BIGINT NOT NULL,
    -- active or disabled
    state         TEXT   NOT NULL,
    -- Since when every delivery failed (NULL while they succeed).
    failing_since BIGINT,
    disabled_reason TEXT,
    created_at    BIGINT NOT NULL
);
CREATE INDEX webhooks_by_tenant ON webhooks (tenant, created_at);

-- Each attempt to deliver an event to a webhook; the newest are kept.
CREATE TABLE webhook_deliveries (
    webhook_id  TEXT    NOT NULL,
    seq         BIGINT  NOT NULL,
    attempt     BIGINT  NOT NULL,
    at          BIGINT  NOT NULL,
    status      BIGINT,
    error       TEXT,
    duration_ms BIGINT  NOT NULL
);
CREATE INDEX webhook_deliveries_by_hook ON webhook_deliveries (webhook_id, at);
