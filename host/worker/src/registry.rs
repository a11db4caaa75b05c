//! The plugin registry every role uses: the built-ins (global, read-only)
//! and the versions tenants publish (in the store).
//!
//! [`PluginDirectory`] lookups are synchronous (the definition validator
//! calls them), so the registry answers from an in-memory snapshot of every
//! tenant's plugin metadata. The snapshot is refreshed in the background
//! ([`Registry::refresh_every`]) and on demand ([`PluginDirectory::refresh`]:
//! after an upload, or when the engine misses a plugin that may have been
//! published through another node a moment ago). A refresh costs one small
//! query when nothing changed: the store keeps a generation number that
//! every publish and delete bumps.
//!
//! As a [`PluginSource`] it hands out component bytes by sha256: built-ins
//! from memory, the rest from the store's content-addressed blobs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use dagr_protocol::plugins::{PluginDescriptor, PluginDirectory};
use dagr_store::{PluginRow, Store};

use crate::builtins::semver_key;
use crate::{BuiltinPlugins, PluginSource};

/// Built-in plugins plus tenants' own. Share it as an `Arc`.
pub struct Registry {
    builtins: Arc<BuiltinPlugins>,
    store: Arc<dyn Store>,
    snapshot: RwLock<Arc<Snapshot>>,
    /// Serialises refreshes, so that a burst of misses reads the store once.
    refreshing: tokio::sync::Mutex<()>,
    /// Whether the last refresh failed (to log a failure once, not every tick).
    failing: AtomicBool,
}

/// Tenants' plugins as of one store generation.
#[derive(Default)]
struct Snapshot {
    generation: Option<i64>,
    by_tenant: HashMap<String, Vec<PluginDescriptor>>,
}

impl Registry {
    /// A registry over `builtins` and the store's published plugins, read
    /// once now.
    pub async fn open(
        builtins: Arc<BuiltinPlugins>,
        store: Arc<dyn Store>,
    ) -> Result<Arc<Registry>, dagr_store::Error> {
        let registry = Arc::new(Registry {
            builtins,
            store,
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
            refreshing: tokio::sync::Mutex::new(()),
            failing: AtomicBool::new(false),
        });
        registry.try_refresh().await?;
        Ok(registry)
    }

    /// The built-in plugins (to preload into a worker).
    pub fn builtins(&self) -> &BuiltinPlugins {
        &self.builtins
    }

    /// Refreshes the snapshot every `every`, in the background, for as long
    /// as the registry lives.
    pub fn refresh_every(self: &Arc<Self>, every: Duration) {
        let weak: Weak<Registry> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(registry) = weak.upgrade() else { return };
                registry.refresh().await;
            }
        });
    }

    /// Re-reads tenants' plugins if the store says they changed.
    pub async fn try_refresh(&self) -> Result<(), dagr_store::Error> {
        let _one_at_a_time = self.refreshing.lock().await;
        let generation = self.store.plugins_generation().await?;
        if self.current().generation == Some(generation) {
            return Ok(());
        }
        let mut by_tenant: HashMap<String, Vec<PluginDescriptor>> = HashMap::new();
        for row in self.store.list_plugins().await? {
            by_tenant.entry(row.tenant.clone()).or_default().push(descriptor(row));
        }
        for plugins in by_tenant.values_mut() {
            plugins
                .sort_by(|a, b| a.name.cmp(&b.name).then_with(|| semver_key(&a.version).cmp(&semver_key(&b.version))));
        }
        let snapshot = Arc::new(Snapshot { generation: Some(generation), by_tenant });
        *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = snapshot;
        Ok(())
    }

    fn current(&self) -> Arc<Snapshot> {
        self.snapshot.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn descriptor(row: PluginRow) -> PluginDescriptor {
    let params_schema = row.params_schema.as_deref().and_then(|text| match serde_json::from_str(text) {
        Ok(schema) => Some(schema),
        Err(e) => {
            // It was checked when it was published; the store holds what the
            // API wrote, so this is a bug or a hand-edited database.
            tracing::warn!(plugin = %row.name, version = %row.version, error = %e, "stored params schema is not JSON");
            None
        }
    });
    PluginDescriptor {
        name: row.name,
        version: row.version,
        description: row.description,
        params_schema,
        sha256: row.sha256,
        size: row.size.max(0) as u64,
        builtin: false,
    }
}

#[async_trait]
impl PluginDirectory for Registry {
    fn list(&self, tenant: &str) -> Vec<PluginDescriptor> {
        let mut all = self.builtins.list(tenant);
        if let Some(own) = self.current().by_tenant.get(tenant) {
            all.extend(own.iter().cloned());
        }
        all
    }

    fn resolve(&self, tenant: &str, name: &str, version: Option<&str>) -> Result<PluginDescriptor, String> {
        // Called for every attempt: borrow the descriptors, copy only the
        // one that is picked.
        let snapshot = self.current();
        let own = snapshot.by_tenant.get(tenant).map(Vec::as_slice).unwrap_or_default();
        pick(self.builtins.descriptors().iter().chain(own), name, version)
    }

    async fn refresh(&self) {
        match self.try_refresh().await {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("the plugin registry can read the store again");
                }
            }
            Err(e) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %e, "cannot refresh the plugin registry; using the last snapshot");
                }
            }
        }
    }
}

/// The plugin `name` at `version`, or its highest version; errors name what
/// is there instead.
fn pick<'a>(
    plugins: impl Iterator<Item = &'a PluginDescriptor> + Clone,
    name: &str,
    version: Option<&str>,
) -> Result<PluginDescriptor, String> {
    let candidates: Vec<&PluginDescriptor> = plugins.clone().filter(|d| d.name == name).collect();
    if candidates.is_empty() {
        let mut known: Vec<&str> = plugins.map(|d| d.name.as_str()).collect();
        known.sort_unstable();
        known.dedup();
        return Err(format!("unknown plugin `{name}` (available: {})", known.join(", ")));
    }
    match version {
        // Built-ins come first, so they win if a configured extra plugin
        // ever takes a name a tenant already uses.
        Some(v) => candidates.iter().find(|d| d.version == v).map(|d| (*d).clone()).ok_or_else(|| {
            let versions: Vec<&str> = candidates.iter().map(|d| d.version.as_str()).collect();
            format!("plugin `{name}` has no version {v} (versions: {})", versions.join(", "))
        }),
        None => candidates
            .iter()
            .max_by(|a, b| semver_key(&a.version).cmp(&semver_key(&b.version)))
            .map(|d| (*d).clone())
            .ok_or_else(|| format!("unknown plugin `{name}`")),
    }
}

#[async_trait]
impl PluginSource for Registry {
    async fn component(&self, sha256: &str) -> Result<Option<Vec<u8>>, String> {
        if let Some(bytes) = self.builtins.component(sha256).await? {
            return Ok(Some(bytes));
        }
        self.store.plugin_blob(sha256).await.map_err(|e| format!("cannot read the component from the store: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(name: &str, version: &str, builtin: bool) -> PluginDescriptor {
        PluginDescriptor {
            name: name.into(),
            version: version.into(),
            description: String::new(),
            params_schema: None,
            sha256: format!("{name}-{version}"),
            size: 1,
            builtin,
        }
    }

    #[test]
    fn pick_takes_the_exact_version_or_the_highest() {
        let all = [plugin("echo", "0.1.0", true), plugin("x", "1.9.0", false), plugin("x", "1.10.0", false)];
        assert_eq!(pick(all.iter(), "x", None).unwrap().version, "1.10.0");
        assert_eq!(pick(all.iter(), "x", Some("1.9.0")).unwrap().version, "1.9.0");
        let missing = pick(all.iter(), "x", Some("2.0.0")).unwrap_err();
        assert_eq!(missing, "plugin `x` has no version 2.0.0 (versions: 1.9.0, 1.10.0)");
        let unknown = pick(all.iter(), "y", None).unwrap_err();
        assert_eq!(unknown, "unknown plugin `y` (available: echo, x)");
    }
}
