//! Tenants' secrets for their attempts, read from the store and opened
//! with the node's [`SecretKey`] (see [`dagr_protocol::sealed`]).
//!
//! The worker asks for a tenant's [`SecretSource`] when an attempt starts;
//! the store is read only if the plugin calls `secret(name)`, once per
//! attempt. That call comes from a guest thread (the runtime's own tokio
//! runtime), so the query runs on this process's runtime and the guest
//! thread waits for it.
//!
//! [`rotate_store`] (`dagr secret rotate`) re-seals every tenant's secrets
//! under the current key, opening them with it or a previous one.

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

/// `dagr secret rotate`.
#[derive(Debug, clap::Args)]
pub struct RotateArgs {
    /// The config file: `[store] url`, `[secrets] key` (the new key) and
    /// `previous_keys` (the old ones). `DAGR_*` variables override it.
    #[arg(long, env = "DAGR_CONFIG")]
    pub config: Option<std::path::PathBuf>,
    /// The data directory (`dagr serve`'s store is SQLite in it).
    #[arg(long)]
    pub data_dir: Option<std::path::PathBuf>,
    /// Re-seal at most this many secrets, then stop; run again to go on.
    #[arg(long)]
    pub limit: Option<u64>,
}

/// Secrets read from the store at a time.
const ROTATE_PAGE: i64 = 200;

/// What a rotation did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// Sealed again under the current key.
    pub resealed: u64,
    /// Already under the current key.
    pub current: u64,
    /// Written (or deleted) between reading and re-sealing: a write seals
    /// under the writer's current key, so it is left alone.
    pub changed: u64,
    /// Opened by no key: left as they are, and named.
    pub unopened: u64,
}

/// Re-seals every tenant's secrets under `key`'s current key, a page at a
/// time, each with a compare-and-set on its stored value: stopped at any
/// point (even by `kill -9`), every secret is sealed under the old key or
/// the new one, and a second run picks up where the first stopped.
pub async fn rotate_store(store: &dyn Store, key: &SecretKey, limit: Option<u64>) -> anyhow::Result<Rotation> {
    use dagr_protocol::sealed::Reseal;
    let mut done = Rotation::default();
    let mut after: Option<(String, String)> = None;
    loop {
        let page = store.secrets_page(after.as_ref().map(|(t, n)| (t.as_str(), n.as_str())), ROTATE_PAGE).await?;
        let Some((tenant, name, _)) = page.last() else { break };
        after = Some((tenant.clone(), name.clone()));
        for (tenant, name, stored) in &page {
            if limit.is_some_and(|l| done.resealed >= l) {
                return Ok(done);
            }
            match key.reseal(tenant, name, stored) {
                Ok(Reseal::Current) => done.current += 1,
                Ok(Reseal::Sealed(sealed)) => {
                    if store.reseal_secret(tenant, name, stored, &sealed).await? {
                        done.resealed += 1;
                    } else {
                        done.changed += 1;
                    }
                }
                Err(e) => {
                    done.unopened += 1;
                    eprintln!("secret `{name}` of tenant `{tenant}` does not open with any key: {e}");
                }
            }
        }
        eprintln!("{} re-sealed, {} already under the current key so far", done.resealed, done.current);
    }
    // Webhooks' signing secrets, the same way.
    let mut after: Option<String> = None;
    loop {
        let page = store.webhook_secrets_page(after.as_deref(), ROTATE_PAGE).await?;
        let Some((_, id, _)) = page.last() else { break };
        after = Some(id.clone());
        for (tenant, id, stored) in &page {
            if limit.is_some_and(|l| done.resealed >= l) {
                return Ok(done);
            }
            let name = dagr_store::webhook_secret_name(id);
            match key.reseal(tenant, &name, stored) {
                Ok(Reseal::Current) => done.current += 1,
                Ok(Reseal::Sealed(sealed)) => {
                    if store.reseal_webhook_secret(id, stored, &sealed).await? {
                        done.resealed += 1;
                    } else {
                        done.changed += 1;
                    }
                }
                Err(e) => {
                    done.unopened += 1;
                    eprintln!(
                        "the signing secret of webhook `{id}` (tenant `{tenant}`) does not open with any key: {e}"
                    );
                }
            }
        }
    }
    Ok(done)
}

/// `dagr secret rotate`: re-seals every secret under `[secrets] key`.
pub fn rotate(args: RotateArgs) -> anyhow::Result<std::process::ExitCode> {
    let mut config = dagr_config::Config::load(args.config.as_deref())?;
    if let Some(dir) = args.data_dir {
        config.server.data_dir = dir;
    }
    let settings = config.validate()?;
    if settings.secrets_key.is_empty() {
        anyhow::bail!(
            "set [secrets] key to the new key and [secrets] previous_keys to the old ones (for `dagr serve`, the \
             old one is in <data_dir>/secrets.key): `dagr secret rotate` re-seals every secret under the new key"
        );
    }
    let key = crate::node::secrets_key(&settings, false)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let done = runtime.block_on(async {
        let store = crate::node::open_store(&settings).await?;
        rotate_store(store.as_ref(), &key, args.limit).await
    })?;
    println!(
        "{} re-sealed, {} already under the current key, {} written meanwhile, {} opened by no key",
        done.resealed, done.current, done.changed, done.unopened
    );
    Ok(if done.unopened > 0 { std::process::ExitCode::from(1) } else { std::process::ExitCode::SUCCESS })
}
