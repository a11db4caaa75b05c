-- Tenants' own plugins. Keep in step with ../postgres/0004_plugins.sql
-- (they differ only in the blob type).

-- Component bytes, content-addressed: one row per distinct component,
-- however many tenants or versions publish it.
CREATE TABLE plugin_blobs (
    sha256     TEXT   NOT NULL PRIMARY KEY,
    bytes      BLOB   NOT NULL,
    size       BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

-- Published versions, immutable: a (tenant, name, version) never changes
-- its sha256. What `describe()` said is kept for listings and validation.
CREATE TABLE plugins (
    tenant        TEXT   NOT NULL,
    name          TEXT   NOT NULL,
    version       TEXT   NOT NULL,
    sha256        TEXT   NOT NULL,
    description   TEXT   NOT NULL,
    -- JSON Schema of the params, as JSON text.
    params_schema TEXT,
    size          BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (tenant, name, version)
);
CREATE INDEX plugins_by_sha256 ON plugins (sha256);

-- Bumped by every publish and delete, so that nodes re-read the plugin
-- list only when it changed.
CREATE TABLE plugin_generation (
    id         BIGINT NOT NULL PRIMARY KEY,
    generation BIGINT NOT NULL
);
INSERT INTO plugin_generation (id, generation) VALUES (1, 0);
