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
    /// own `allow_hosts` must stay within this list.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Most linear memory of one attempt, bytes.
    #[serde(default)]
    pub max_memory: Option<u64>,
    /// Longest attempt, milliseconds.
    #[serde(default)]
    pub max_duration_ms: Option<u64>,
    /// Attempts of the tenant running at once; more wait, queued.
    #[serde(default)]
    pub max_concurrent: Option<u32>,
    /// Runs the tenant may trigger (manual runs and jobs) per minute; past
    /// it the API answers 429 with `Retry-After`.
    #[serde(default)]
    pub runs_per_minute: Option<u32>,
    /// Most bytes one attempt may keep in its scratch directory.
    #[serde(default)]
    pub scratch_bytes: Option<u64>,
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
