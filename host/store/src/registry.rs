//! [`RegistryStore`]: the plugins tenants publish.
//!
//! A component's bytes are stored once, content-addressed by sha256
//! ([`put_plugin_blob`](RegistryStore::put_plugin_blob)); a published
//! version ([`PluginRow`]) names a blob as `name@version` for one tenant and
//! is immutable: publishing the same version again with other bytes is a
//! [`PluginInsert::Conflict`].

use async_trait::async_trait;

use crate::Result;

/// A published plugin version (metadata; the bytes are in its blob).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginRow {
    pub tenant: String,
    pub name: String,
    pub version: String,
    /// sha256 of the component, hex: the key of its blob.
    pub sha256: String,
    pub description: String,
    /// JSON Schema of the params (JSON text), if the plugin declares one.
    pub params_schema: Option<String>,
    pub size: i64,
    pub created_at: i64,
}

/// What publishing a version did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginInsert {
    /// A new version.
    Created,
    /// The version exists with these very bytes: nothing changed.
    Unchanged,
    /// The version exists with other bytes (their sha256); it was not changed.
    Conflict { sha256: String },
    /// The row's blob is not stored (it was removed by a concurrent delete):
    /// store the blob again and retry.
    MissingBlob,
}

#[async_trait]
pub trait RegistryStore: Send + Sync {
    /// Stores component bytes under their sha256 (computed by the caller).
    /// Storing the same sha256 again changes nothing.
    async fn put_plugin_blob(&self, sha256: &str, bytes: &[u8], now: i64) -> Result<()>;

    /// The bytes stored under `sha256`.
    async fn plugin_blob(&self, sha256: &str) -> Result<Option<Vec<u8>>>;

    /// Publishes a version. Its blob must be stored first.
    async fn insert_plugin(&self, row: &PluginRow) -> Result<PluginInsert>;

    /// Every published version of every tenant (metadata only), by tenant,
    /// name and version.
    async fn list_plugins(&self) -> Result<Vec<PluginRow>>;

    /// A number that changes whenever a version is published or deleted:
    /// lets a cache of [`list_plugins`](Self::list_plugins) skip re-reading
    /// an unchanged list.
    async fn plugins_generation(&self) -> Result<i64>;

    /// Deletes a version; its blob goes too when no other version (of any
    /// tenant) uses it. False if the version does not exist.
    async fn delete_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<bool>;
}
