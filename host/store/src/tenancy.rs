//! What multi-tenancy keeps: tenants and their limits, API tokens (only
//! their hashes), secrets and the audit log, plus the count the
//! runs-per-minute limit is checked against.
//!
//! [`TenancyStore`] is a supertrait of [`Store`](crate::Store), so every
//! `Arc<dyn Store>` carries it. The rows are plain: limits and audit details
//! are JSON text, scopes a comma-separated list; their meaning belongs to
//! `dagr-protocol` and the API.

use async_trait::async_trait;

use crate::{Result, RunKind};

/// A tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRow {
    pub name: String,
    /// `TenantLimits` as JSON.
    pub limits: String,
    pub created_at: i64,
    pub updated_at: i64,
}

/// An API token: its id (the lookup key) and the sha256 of its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    pub id: String,
    pub tenant: String,
    /// sha256 of the secret part, hex.
    pub hash: String,
    /// Comma-separated: `read`, `write`, `admin`.
    pub scopes: String,
    pub label: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    /// The token that created this one; `None` when dagr made it at startup.
    pub created_by: Option<String>,
}

/// A secret's name and when it was last written (never its value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretMeta {
    pub name: String,
    pub updated_at: i64,
}

/// One audit record to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAudit {
    pub tenant: String,
    pub at: i64,
    /// The id of the token that acted.
    pub token_id: String,
    /// What it did: `apply`, `trigger`, `kill`, `secret.put`, …
    pub action: String,
    /// What it acted on: a workflow name, a run id, a secret name, …
    pub target: String,
    /// A small JSON object.
    pub detail: String,
}

/// A stored audit record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    pub seq: i64,
    pub tenant: String,
    pub at: i64,
    pub token_id: String,
    pub action: String,
    pub target: String,
    pub detail: String,
}

/// A tenant's recent runs, for the runs-per-minute limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecentRuns {
    pub count: i64,
    /// When the oldest of them was created: a slot frees a minute after it.
    pub oldest: Option<i64>,
}

/// Tenants, tokens, secrets and audit.
#[async_trait]
pub trait TenancyStore: Send + Sync {
    // Tenants --------------------------------------------------------------

    /// Creates a tenant; false if one of that name exists (nothing changes).
    async fn create_tenant(&self, tenant: &TenantRow) -> Result<bool>;
    async fn get_tenant(&self, name: &str) -> Result<Option<TenantRow>>;
    /// Every tenant, by name.
    async fn list_tenants(&self) -> Result<Vec<TenantRow>>;
    /// Replaces a tenant's limits; false if there is no such tenant.
    async fn update_tenant(&self, name: &str, limits: &str, now: i64) -> Result<bool>;

    // Tokens ---------------------------------------------------------------

    /// Stores a new token; false if its id is taken (nothing changes).
    async fn create_token(&self, token: &TokenRow) -> Result<bool>;
    /// A token by id, revoked or not.
    async fn get_token(&self, id: &str) -> Result<Option<TokenRow>>;
    /// A tenant's tokens, revoked ones included, oldest first.
    async fn list_tokens(&self, tenant: &str) -> Result<Vec<TokenRow>>;
    /// Revokes a token of `tenant`. False if the tenant has no such token or
    /// it was already revoked.
    async fn revoke_token(&self, tenant: &str, id: &str, now: i64) -> Result<bool>;

    // Secrets --------------------------------------------------------------

    /// Creates or replaces a secret.
    async fn put_secret(&self, tenant: &str, name: &str, value: &str, now: i64) -> Result<()>;
    /// False if the tenant has no such secret.
    async fn delete_secret(&self, tenant: &str, name: &str) -> Result<bool>;
    /// The names of a tenant's secrets, by name.
    async fn list_secrets(&self, tenant: &str) -> Result<Vec<SecretMeta>>;
    /// Every secret of a tenant, name and value (for the tenant's attempts).
    async fn tenant_secrets(&self, tenant: &str) -> Result<Vec<(String, String)>>;
    /// The secrets of every tenant after `after` (a tenant and a name), in
    /// that order, at most `limit`: tenant, name and value (for re-sealing
    /// them all, a page at a time).
    async fn secrets_page(&self, after: Option<(&str, &str)>, limit: i64) -> Result<Vec<(String, String, String)>>;
    /// Replaces a secret's value if it still is `expected` (a write in
    /// between wins), keeping its last write time: re-sealing changes how
    /// it is stored, not what it is. False if it changed or is gone.
    async fn reseal_secret(&self, tenant: &str, name: &str, expected: &str, value: &str) -> Result<bool>;

    // Audit ----------------------------------------------------------------

    /// Appends a record; returns its sequence number.
    async fn append_audit(&self, entry: NewAudit) -> Result<i64>;
    /// A tenant's records after `after_seq`, oldest first.
    async fn list_audit(&self, tenant: &str, after_seq: i64, limit: i64) -> Result<Vec<AuditRow>>;
    /// Deletes up to `limit` records made before `before` (ms), oldest
    /// first, of every tenant (retention, in bounded batches); returns how
    /// many.
    async fn drop_audit(&self, before: i64, limit: i64) -> Result<u64>;

    // Quotas ---------------------------------------------------------------

    /// The tenant's runs of these kinds created at or after `since_ms`.
    async fn count_runs_since(&self, tenant: &str, kinds: &[RunKind], since_ms: i64) -> Result<RecentRuns>;
    /// The tenant's runs that have not ended (waiting, queued, running,
    /// paused).
    async fn count_unfinished_runs(&self, tenant: &str) -> Result<i64>;
}
