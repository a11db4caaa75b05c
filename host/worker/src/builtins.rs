//! The plugins every installation has: loaded once at startup, global and
//! read-only.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use dagr_protocol::plugins::{PluginDescriptor, PluginDirectory};
use dagr_runtime::{Plugin, Runtime};

use crate::PluginSource;

/// Built-in plugins: their components and what they describe.
pub struct BuiltinPlugins {
    plugins: Vec<(Plugin, Arc<[u8]>)>,
    descriptors: Vec<PluginDescriptor>,
    by_sha: HashMap<String, usize>,
}

impl BuiltinPlugins {
    /// Loads (compiling, or from the runtime's code cache) every component:
    /// the ones built into dagr, then `extra` files (from the configuration).
    pub fn load(
        runtime: &Runtime,
        components: &[(&str, &'static [u8])],
        extra: &[PathBuf],
    ) -> Result<BuiltinPlugins, String> {
        let mut all: Vec<(String, Arc<[u8]>)> =
            components.iter().map(|(n, b)| (n.to_string(), Arc::from(*b))).collect();
        for path in extra {
            let bytes =
                std::fs::read(path).map_err(|e| format!("plugins.extra: cannot read {}: {e}", path.display()))?;
            all.push((path.display().to_string(), Arc::from(bytes)));
        }
        let mut plugins = Vec::new();
        let mut descriptors = Vec::new();
        let mut by_sha = HashMap::new();
        for (name, bytes) in all {
            let plugin = runtime.load(&bytes).map_err(|e| format!("built-in plugin {name} does not load: {e}"))?;
            let info = plugin.info();
            descriptors.push(PluginDescriptor {
                name: info.name.clone(),
                version: info.version.clone(),
                description: info.description.clone(),
                params_schema: info.params_schema.clone(),
                sha256: plugin.sha256().to_owned(),
                size: plugin.size() as u64,
                builtin: true,
            });
            by_sha.insert(plugin.sha256().to_owned(), plugins.len());
            plugins.push((plugin, bytes));
        }
        Ok(BuiltinPlugins { plugins, descriptors, by_sha })
    }

    /// What each built-in describes, without copying it.
    pub fn descriptors(&self) -> &[PluginDescriptor] {
        &self.descriptors
    }

    /// The loaded plugins (to preload into a worker).
    pub fn plugins(&self) -> impl Iterator<Item = &Plugin> {
        self.plugins.iter().map(|(p, _)| p)
    }
}

#[async_trait::async_trait]
impl PluginSource for BuiltinPlugins {
    async fn component(&self, sha256: &str) -> Result<Option<Vec<u8>>, String> {
        Ok(self.by_sha.get(sha256).map(|&i| self.plugins[i].1.to_vec()))
    }
}

impl PluginDirectory for BuiltinPlugins {
    fn list(&self, _tenant: &str) -> Vec<PluginDescriptor> {
        self.descriptors.clone()
    }

    fn resolve(&self, _tenant: &str, name: &str, version: Option<&str>) -> Result<PluginDescriptor, String> {
        let mut candidates: Vec<&PluginDescriptor> = self.descriptors.iter().filter(|d| d.name == name).collect();
        if candidates.is_empty() {
            let known: Vec<&str> = self.descriptors.iter().map(|d| d.name.as_str()).collect();
            return Err(format!("unknown plugin `{name}` (available: {})", known.join(", ")));
        }
        if let Some(v) = version {
            return candidates
                .into_iter()
                .find(|d| d.version == v)
                .cloned()
                .ok_or_else(|| format!("plugin `{name}` has no version {v}"));
        }
        candidates.sort_by_key(|a| semver_key(&a.version));
        candidates.last().map(|d| (*d).clone()).ok_or_else(|| format!("unknown plugin `{name}`"))
    }
}

/// Orders `1.10.0` after `1.9.0`; pre-releases sort before their release.
pub fn semver_key(version: &str) -> (Vec<u64>, bool, String) {
    let (core, pre) = match version.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (version.split('+').next().unwrap_or(version), None),
    };
    let numbers = core.split('.').map(|p| p.parse().unwrap_or(0)).collect();
    (numbers, pre.is_none(), pre.unwrap_or("").to_owned())
}
