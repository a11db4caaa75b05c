//! The plugins every installation has: global and read-only. A node
//! lists them from the code cache's record of what each said of itself
//! (described once per data directory and dagr build) and loads one only
//! when a task needs it, so an idle node holds no built-in's machine code.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;

use dagr_protocol::plugins::{PluginDescriptor, PluginDirectory};
use dagr_runtime::{PluginInfo, Runtime, sha256_hex};

use crate::PluginSource;

/// Built-in plugins: their components and what they describe.
pub struct BuiltinPlugins {
    /// Each one's bytes: the built-in ones where the binary has them.
    components: Vec<Cow<'static, [u8]>>,
    descriptors: Vec<PluginDescriptor>,
    by_sha: HashMap<String, usize>,
}

impl BuiltinPlugins {
    /// Describes every component: the ones built into dagr (name, bytes,
    /// SHA-256), then `extra` files (from the configuration). A component
    /// the runtime's code cache has described before is not loaded; any
    /// other is loaded (compiling it, or from the cache), described, and
    /// let go.
    pub fn load(
        runtime: &Runtime,
        components: &[(&str, &'static [u8], &str)],
        extra: &[PathBuf],
    ) -> Result<BuiltinPlugins, String> {
        let mut all: Vec<(String, Cow<'static, [u8]>, String)> =
            components.iter().map(|(n, b, sha)| (n.to_string(), Cow::Borrowed(*b), sha.to_string())).collect();
        for path in extra {
            let bytes =
                std::fs::read(path).map_err(|e| format!("plugins.extra: cannot read {}: {e}", path.display()))?;
            let sha256 = sha256_hex(&bytes);
            all.push((path.display().to_string(), Cow::Owned(bytes), sha256));
        }
        let mut builtins = BuiltinPlugins { components: Vec::new(), descriptors: Vec::new(), by_sha: HashMap::new() };
        for (name, bytes, sha256) in all {
            let (info, sha256) = match runtime.cached_info(&sha256) {
                Some(info) => (info, sha256),
                None => {
                    let plugin =
                        runtime.load(&bytes).map_err(|e| format!("built-in plugin {name} does not load: {e}"))?;
                    (plugin.info().clone(), plugin.sha256().to_owned())
                }
            };
            builtins.add(info, sha256, bytes);
        }
        Ok(builtins)
    }

    fn add(&mut self, info: PluginInfo, sha256: String, bytes: Cow<'static, [u8]>) {
        self.descriptors.push(PluginDescriptor {
            name: info.name,
            version: info.version,
            description: info.description,
            params_schema: info.params_schema,
            sha256: sha256.clone(),
            size: bytes.len() as u64,
            builtin: true,
        });
        self.by_sha.insert(sha256, self.components.len());
        self.components.push(bytes);
    }

    /// What each built-in describes, without copying it.
    pub fn descriptors(&self) -> &[PluginDescriptor] {
        &self.descriptors
    }
}

#[async_trait::async_trait]
impl PluginSource for BuiltinPlugins {
    async fn component(&self, sha256: &str) -> Result<Option<Vec<u8>>, String> {
        Ok(self.by_sha.get(sha256).map(|&i| self.components[i].to_vec()))
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
