//! Tenants' limits for the engine, read from the store.
//!
//! [`TenantPolicy::limits`] is called on the engine's hot path (every
//! dispatch), so it reads an in-memory copy; [`StorePolicy::refresh`]
//! reloads every tenant's limits, and [`StorePolicy::spawn_refresh`] does it
//! periodically and when told that a tenant
//! [changed](TenantPolicy::changed). A tenant created or changed since the last refresh gets
//! the default limits (no network, no caps) until the next one, at most one
//! interval later.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use dagr_protocol::tenancy::TenantLimits;
use dagr_store::Store;

use crate::TenantPolicy;

/// A [`TenantPolicy`] backed by the store's tenants.
#[derive(Default)]
pub struct StorePolicy {
    limits: RwLock<HashMap<String, TenantLimits>>,
    changed: tokio::sync::Notify,
}

impl StorePolicy {
    /// Loads every tenant's limits once.
    pub async fn load(store: &dyn Store) -> Result<Arc<StorePolicy>, dagr_store::Error> {
        let policy = Arc::new(StorePolicy::default());
        policy.refresh(store).await?;
        Ok(policy)
    }

    /// Re-reads every tenant's limits.
    pub async fn refresh(&self, store: &dyn Store) -> Result<(), dagr_store::Error> {
        let mut fresh = HashMap::new();
        for row in store.list_tenants().await? {
            let limits = serde_json::from_str(&row.limits).unwrap_or_else(|e| {
                tracing::error!(tenant = %row.name, error = %e, "unreadable tenant limits; using the defaults");
                TenantLimits::default()
            });
            fresh.insert(row.name, limits);
        }
        *self.limits.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(())
    }

    /// Refreshes every `interval` until the returned task is aborted.
    pub fn spawn_refresh(self: &Arc<Self>, store: Arc<dyn Store>, interval: Duration) -> tokio::task::JoinHandle<()> {
        let policy = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = policy.changed.notified() => {}
                }
                if let Err(e) = policy.refresh(store.as_ref()).await {
                    tracing::warn!(error = %e, "cannot refresh tenants' limits; keeping the last ones");
                }
            }
        })
    }
}

impl TenantPolicy for StorePolicy {
    fn limits(&self, tenant: &str) -> Option<TenantLimits> {
        let known = self.limits.read().unwrap_or_else(|e| e.into_inner());
        Some(known.get(tenant).cloned().unwrap_or_default())
    }

    fn changed(&self) {
        self.changed.notify_one();
    }
}
