//! The plugin directory: which plugins a tenant may use.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// What dagr knows about one plugin version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PluginDescriptor {
    pub name: String,
    pub version: String,
    pub description: String,
    /// JSON Schema of the params, if the plugin declares one.
    #[schema(value_type = Option<Object>)]
    pub params_schema: Option<serde_json::Value>,
    /// sha256 of the component, hex.
    pub sha256: String,
    pub size: u64,
    /// Built into dagr (global, read-only).
    pub builtin: bool,
}

/// Looks plugins up. `version: None` means the latest.
///
/// Lookups are synchronous (the validator calls them); a directory that
/// caches a shared registry answers from its snapshot, which
/// [`refresh`](Self::refresh) brings up to date.
#[async_trait]
pub trait PluginDirectory: Send + Sync {
    fn list(&self, tenant: &str) -> Vec<PluginDescriptor>;
    fn resolve(&self, tenant: &str, name: &str, version: Option<&str>) -> Result<PluginDescriptor, String>;

    /// Re-reads what may have changed elsewhere (a plugin published through
    /// another node, a moment ago). Errors are logged, not returned: the
    /// previous snapshot stays in use.
    async fn refresh(&self) {}
}

/// What `dagr plugin inspect` (the child process that validates and
/// compiles an upload under CPU and memory limits) prints on stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InspectOutcome {
    /// The component implements the world; what it describes.
    Valid { name: String, version: String, description: String, params_schema: Option<serde_json::Value> },
    /// It does not load; the runtime's message says why.
    Invalid { message: String },
}

/// A [`PluginDirectory`] seen by one tenant, as the validator's catalog.
pub struct TenantCatalog<'a> {
    pub directory: &'a dyn PluginDirectory,
    pub tenant: &'a str,
}

impl dagr_core::PluginCatalog for TenantCatalog<'_> {
    fn resolve(&self, name: &str, version: Option<&str>) -> Result<dagr_core::ResolvedPlugin, String> {
        let found = self.directory.resolve(self.tenant, name, version)?;
        Ok(dagr_core::ResolvedPlugin { name: found.name, version: found.version, params_schema: found.params_schema })
    }
}

/// A catalog that accepts every plugin, for re-reading definitions that were
/// validated when they were applied (a plugin removed since then must not
/// make old runs unreadable; dispatch reports it instead).
pub struct TrustedCatalog;

impl dagr_core::PluginCatalog for TrustedCatalog {
    fn resolve(&self, name: &str, version: Option<&str>) -> Result<dagr_core::ResolvedPlugin, String> {
        Ok(dagr_core::ResolvedPlugin {
            name: name.to_owned(),
            version: version.unwrap_or("").to_owned(),
            params_schema: None,
        })
    }
}

/// A stored definition (its canonical JSON) read back: parsed and validated
/// through the [`TrustedCatalog`]. It was checked against its tenant's
/// plugins when it was applied. A large one takes a while (most of a second
/// for 100,000 tasks): callers on an async runtime run it on a blocking
/// thread.
pub fn stored_workflow(text: &str) -> Result<dagr_core::Workflow, String> {
    let spec = dagr_core::WorkflowSpec::parse(text, dagr_core::definition::Format::Json).map_err(|e| e.to_string())?;
    dagr_core::Workflow::validate(spec, &TrustedCatalog).map_err(|e| e.to_string())
}
