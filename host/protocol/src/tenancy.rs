//! Tenants: their limits (capabilities and quotas), tokens, secrets, audit.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The tenant of `dagr serve` (and of requests made with its default token).
pub const DEFAULT_TENANT: &str = "default";

/// The tenant recorded for the admin token, which belongs to no tenant.
pub const ADMIN_TENANT: &str = "*";

/// What a tenant may use. Absent means dagr's configured default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantLimits {
    /// Hosts the tenant's tasks may reach through `wasi:http`, in the
    /// allowlist syntax (`api.example.org`, `*.example.org:443`,
    /// `10.0.0.7:8080`). Empty (the default): no network at all. A task's
    /// own `allow_hosts` must stay within this list. `*` lets the tenant's
    /// tasks reach whatever they list themselves (what `dagr serve` gives
    /// its single-user `default` tenant).
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Most linear memory of one attempt, bytes.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 9223372036854775807_i64)]
    pub max_memory: Option<u64>,
    /// Longest attempt, milliseconds.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 9223372036854775807_i64)]
    pub max_duration_ms: Option<u64>,
    /// Attempts of the tenant running at once; more wait, queued. In a
    /// cluster the runs it makes from then on are all driven by one master,
    /// which counts them.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 2147483647)]
    pub max_concurrent: Option<u32>,
    /// Runs the tenant may trigger (manual runs and jobs) per minute; past
    /// it the API answers 429 with `Retry-After`.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 2147483647)]
    pub runs_per_minute: Option<u32>,
    /// Unfinished runs (queued, waiting, running, paused) the tenant may
    /// have before a new backfill is refused (429); default `[api]
    /// max_unfinished_runs`.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 2147483647)]
    pub max_unfinished_runs: Option<u32>,
    /// Most bytes one attempt may keep in its scratch directory.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 9223372036854775807_i64)]
    pub scratch_bytes: Option<u64>,
    /// Finished runs move to cold storage this long (ms) after they
    /// finished; default: `[archive] after`.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 9223372036854775807_i64)]
    pub archive_after_ms: Option<u64>,
    /// Cold partitions are dropped this long (ms) after their period ended
    /// (counted from the carry-over's cut-off); default: `[archive] retain_for`.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 9223372036854775807_i64)]
    pub archive_retain_ms: Option<u64>,
    /// Cold logs are dropped sooner; default: `[archive] logs_retain_for`.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 9223372036854775807_i64)]
    pub archive_logs_retain_ms: Option<u64>,
}

/// Token scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Read the tenant's objects.
    Read,
    /// Create and change them (implies read).
    Write,
    /// Manage the tenant's tokens (implies write); on the admin token:
    /// manage tenants.
    Admin,
}

impl Scope {
    /// Whether a token with `self` may do what needs `needed`.
    pub fn allows(self, needed: Scope) -> bool {
        self >= needed
    }
}

// The tenancy endpoints' request and response bodies --------------------------

/// The request header with which the admin token names the tenant it acts
/// for on tenant resources (workflows, runs, secrets, …).
pub const TENANT_HEADER: &str = "x-dagr-tenant";

/// `POST /v1/tenants`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    /// Lowercase letters, digits, `-` and `_`, at most 63; starts with a
    /// letter or digit.
    #[schema(pattern = "^[a-z0-9][a-z0-9_-]{0,62}$")]
    pub name: String,
    #[serde(default)]
    pub limits: TenantLimits,
}

/// `PATCH /v1/tenants/{name}`: `limits` is a JSON merge patch over the
/// tenant's limits (a field given replaces it, `null` clears it, a field
/// left out is kept).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateTenant {
    #[schema(value_type = Object)]
    pub limits: serde_json::Map<String, serde_json::Value>,
}

/// A tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TenantView {
    pub name: String,
    pub limits: TenantLimits,
    pub created_at: String,
    pub updated_at: String,
}

/// `POST /v1/tenants/{name}/tokens` and `POST /v1/tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// Default: read and write.
    #[serde(default = "default_scopes")]
    #[schema(min_items = 1)]
    pub scopes: Vec<Scope>,
    /// What the token is for, for people (at most 200 bytes).
    #[serde(default)]
    #[schema(max_length = 200)]
    pub label: String,
}

impl Default for CreateToken {
    fn default() -> Self {
        CreateToken { scopes: default_scopes(), label: String::new() }
    }
}

fn default_scopes() -> Vec<Scope> {
    vec![Scope::Read, Scope::Write]
}

/// A token as listed: never its secret or hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenView {
    pub id: String,
    pub tenant: String,
    pub scopes: Vec<Scope>,
    pub label: String,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
    /// The id of the token that created it; absent when dagr made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
}

/// A token just created: the only time its value is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CreatedToken {
    /// `dagr_<id>_<secret>`, for `Authorization: Bearer …`. Not stored;
    /// it cannot be shown again.
    pub token: String,
    #[serde(flatten)]
    pub view: TokenView,
}

/// `PUT /v1/secrets/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutSecret {
    /// 1 byte to 64 KiB.
    #[schema(min_length = 1, max_length = 65536)]
    pub value: String,
}

/// A secret as listed: its name, never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SecretView {
    pub name: String,
    pub updated_at: String,
}

/// One audit record: who (token id) did what, to what, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditView {
    pub seq: i64,
    pub at: String,
    pub tenant: String,
    pub token_id: String,
    pub action: String,
    pub target: String,
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

/// A page of the audit log, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AuditList {
    pub records: Vec<AuditView>,
    /// The `after` of the next page, when this one was full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<i64>,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Option<Scope> {
        [Scope::Read, Scope::Write, Scope::Admin].into_iter().find(|s| s.as_str() == text)
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
