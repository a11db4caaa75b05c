-- Tenants, their API tokens, secrets and audit log. Keep in step with
-- ../postgres/0003_tenancy.sql (they differ only in the auto-increment key).

CREATE TABLE tenants (
    name       TEXT   NOT NULL PRIMARY KEY,
    -- TenantLimits as JSON.
    limits     TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- A token is `dagr_<id>_<secret>`; only sha256(secret) is kept.
CREATE TABLE tokens (
    id         TEXT   NOT NULL PRIMARY KEY,
    tenant     TEXT   NOT NULL,
    hash       TEXT   NOT NULL,
    -- Comma-separated scopes: read, write, admin.
    scopes     TEXT   NOT NULL,
    label      TEXT   NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT,
    -- The id of the token that created it; NULL when dagr made it at startup.
    created_by TEXT
);
CREATE INDEX tokens_by_tenant ON tokens (tenant, created_at);

CREATE TABLE secrets (
    tenant     TEXT   NOT NULL,
    name       TEXT   NOT NULL,
    value      TEXT   NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE audit (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant   TEXT   NOT NULL,
    at       BIGINT NOT NULL,
    token_id TEXT   NOT NULL,
    action   TEXT   NOT NULL,
    target   TEXT   NOT NULL,
    -- A small JSON object; never a secret value.
    detail   TEXT   NOT NULL
);
CREATE INDEX audit_by_tenant ON audit (tenant, seq);

-- The runs-per-minute limit counts a tenant's recent manual and job runs;
-- runs_by_tenant (tenant, created_at) already bounds that scan to the last
-- minute, so it needs no index of its own.
