//! Tenants' secrets for their attempts, read from the store and opened
//! with the node's [`SecretKey`] (see [`dagr_protocol::sealed`]).
//!
//! The worker asks for a tenant's [`SecretSource`] when an attempt starts;
//! the store is read only if the plugin calls `secret(name)`, once per
//! attempt. That call comes from a guest thread (the runtime's own tokio
//! runtime), so the query runs on this process's runtime and the guest
//! thread waits for it.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dagr_protocol::sealed::SecretKey;
use dagr_runtime::SecretSource;
use dagr_store::Store;
use dagr_worker::SecretResolver;

/// How long a guest waits for its tenant's secrets.
const LOAD_TIMEOUT: Duration = Duration::from_secs(30);

/// A [`SecretResolver`] backed by the store.
pub struct StoreSecrets {
    store: Arc<dyn Store>,
    key: Arc<SecretKey>,
    runtime: Option<tokio::runtime::Handle>,
}

impl StoreSecrets {
    /// Call it inside the runtime the store queries should run on.
    pub fn new(store: Arc<dyn Store>, key: SecretKey) -> Self {
        StoreSecrets { store, key: Arc::new(key), runtime: tokio::runtime::Handle::try_current().ok() }
    }
}

impl SecretResolver for StoreSecrets {
    fn secrets_for(&self, tenant: &str) -> Option<Arc<dyn SecretSource>> {
        Some(Arc::new(TenantSecrets {
            tenant: tenant.to_owned(),
            store: self.store.clone(),
            key: self.key.clone(),
            runtime: self.runtime.clone(),
            loaded: OnceLock::new(),
        }))
    }
}

/// One attempt's view of its tenant's secrets.
struct TenantSecrets {
    tenant: String,
    store: Arc<dyn Store>,
    key: Arc<SecretKey>,
    runtime: Option<tokio::runtime::Handle>,
    loaded: OnceLock<HashMap<String, String>>,
}

impl TenantSecrets {
    fn load(&self) -> HashMap<String, String> {
        let Some(runtime) = &self.runtime else {
            tracing::error!(tenant = %self.tenant, "secrets cannot be read: no runtime to query the store on");
            return HashMap::new();
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let store = self.store.clone();
        let tenant = self.tenant.clone();
        runtime.spawn(async move {
            let _ = tx.send(store.tenant_secrets(&tenant).await);
        });
        match rx.recv_timeout(LOAD_TIMEOUT) {
            Ok(Ok(secrets)) => secrets
                .into_iter()
                .filter_map(|(name, stored)| match self.key.open(&self.tenant, &name, &stored) {
                    Ok(value) => Some((name, value)),
                    Err(e) => {
                        // The plugin sees the secret as missing; the operator
                        // learns why (never the value).
                        tracing::error!(tenant = %self.tenant, secret = %name, error = %e, "cannot open a secret");
                        None
                    }
                })
                .collect(),
            Ok(Err(e)) => {
                tracing::error!(tenant = %self.tenant, error = %e, "cannot read the tenant's secrets");
                HashMap::new()
            }
            Err(_) => {
                tracing::error!(tenant = %self.tenant, "the tenant's secrets were not read in {LOAD_TIMEOUT:?}");
                HashMap::new()
            }
        }
    }
}

impl SecretSource for TenantSecrets {
    fn secret(&self, name: &str) -> Option<String> {
        self.loaded.get_or_init(|| self.load()).get(name).cloned()
    }
}
