//! Tenants' limits for the engine, read from the store.
//!
//! The engine reads them on its hot path (every dispatch) from a snapshot
//! it is handed ([`TenantPolicy::snapshot`]); [`StorePolicy::refresh`]
//! reloads every tenant's limits, and [`StorePolicy::spawn_refresh`] does it
//! periodically and when told that a tenant
//! [changed](TenantPolicy::changed). A tenant the copy does not know yet is
//! read from the store when the engine loads one of its runs
//! ([`TenantPolicy::prepare`]); one that is not in the store at all gets the
//! default limits (no network, no caps).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use dagr_protocol::tenancy::TenantLimits;
use dagr_store::Store;

use crate::TenantPolicy;

/// A [`TenantPolicy`] backed by the store's tenants.
pub struct StorePolicy {
    store: Arc<dyn Store>,
    limits: RwLock<Arc<HashMap<String, TenantLimits>>>,
    /// Bumped whenever `limits` is replaced.
    version: AtomicU64,
    changed: tokio::sync::Notify,
}

impl StorePolicy {
    /// Loads every tenant's limits once.
    pub async fn load(store: Arc<dyn Store>) -> Result<Arc<StorePolicy>, dagr_store::Error> {
        let policy = Arc::new(StorePolicy {
            store,
            limits: RwLock::default(),
            version: AtomicU64::new(0),
            changed: tokio::sync::Notify::new(),
        });
        policy.refresh().await?;
        Ok(policy)
    }

    /// Re-reads every tenant's limits.
    pub async fn refresh(&self) -> Result<(), dagr_store::Error> {
        let mut fresh = HashMap::new();
        for row in self.store.list_tenants().await? {
            fresh.insert(row.name.clone(), parse(&row));
        }
        *self.limits.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(fresh);
        self.version.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Refreshes every `interval` (and when a tenant changed) until the
    /// returned task is aborted.
    pub fn spawn_refresh(self: &Arc<Self>, interval: Duration) -> tokio::task::JoinHandle<()> {
        let policy = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = policy.changed.notified() => {}
                }
                if let Err(e) = policy.refresh().await {
                    tracing::warn!(error = %e, "cannot refresh tenants' limits; keeping the last ones");
                }
            }
        })
    }
}

fn parse(row: &dagr_store::tenancy::TenantRow) -> TenantLimits {
    serde_json::from_str(&row.limits).unwrap_or_else(|e| {
        tracing::error!(tenant = %row.name, error = %e, "unreadable tenant limits; using the defaults");
        TenantLimits::default()
    })
}

#[async_trait::async_trait]
impl TenantPolicy for StorePolicy {
    async fn prepare(&self, tenant: &str) {
        if self.limits.read().unwrap_or_else(|e| e.into_inner()).contains_key(tenant) {
            return;
        }
        match self.store.get_tenant(tenant).await {
            Ok(Some(row)) => {
                let limits = parse(&row);
                let mut all = self.limits.write().unwrap_or_else(|e| e.into_inner());
                Arc::make_mut(&mut all).insert(row.name, limits);
                self.version.fetch_add(1, Ordering::Release);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(tenant, error = %e, "cannot read the tenant's limits"),
        }
    }

    fn snapshot(&self) -> Option<(u64, Arc<HashMap<String, TenantLimits>>)> {
        let limits = self.limits.read().unwrap_or_else(|e| e.into_inner()).clone();
        Some((self.version.load(Ordering::Acquire), limits))
    }

    fn changed(&self) {
        self.changed.notify_one();
    }
}
