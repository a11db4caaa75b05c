//! Validated workflow versions, kept for the triggers that follow.
//!
//! A stored version never changes (a changed definition is a new version,
//! and versions are never deleted), so a trigger need not fetch, parse and
//! validate the same definition again: for a workflow of 10,000 tasks that
//! is tens of milliseconds before every run. The key carries the tenant.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use dagr_core::Workflow;

/// Most versions kept; when full, one is forgotten to make room.
const CAPACITY: usize = 256;

type Key = (String, String, i64);

/// Validated versions by (tenant, workflow, version).
#[derive(Debug, Default)]
pub struct VersionCache {
    entries: Mutex<HashMap<Key, Arc<Workflow>>>,
}

impl VersionCache {
    pub fn get(&self, tenant: &str, name: &str, version: i64) -> Option<Arc<Workflow>> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get(&(tenant.to_owned(), name.to_owned(), version)).cloned()
    }

    pub fn insert(&self, tenant: &str, name: &str, version: i64, workflow: Arc<Workflow>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CAPACITY
            && let Some(old) = entries.keys().next().cloned()
        {
            entries.remove(&old);
        }
        entries.insert((tenant.to_owned(), name.to_owned(), version), workflow);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workflow(name: &str) -> Arc<Workflow> {
        let text = format!(r#"{{"name": "{name}", "tasks": [{{"name": "a", "plugin": "echo"}}]}}"#);
        let spec = dagr_core::WorkflowSpec::parse(&text, dagr_core::definition::Format::Json).unwrap();
        Arc::new(Workflow::validate(spec, &dagr_protocol::plugins::TrustedCatalog).unwrap())
    }

    #[test]
    fn versions_are_kept_per_tenant_and_the_cache_stays_bounded() {
        let cache = VersionCache::default();
        cache.insert("t1", "wf", 1, workflow("wf"));
        assert!(cache.get("t1", "wf", 1).is_some());
        assert!(cache.get("t2", "wf", 1).is_none(), "another tenant's version");
        assert!(cache.get("t1", "wf", 2).is_none(), "another version");
        for v in 0..(CAPACITY as i64 * 2) {
            cache.insert("t1", "many", v, workflow("many"));
        }
        assert_eq!(cache.entries.lock().unwrap().len(), CAPACITY);
        assert!(cache.get("t1", "many", CAPACITY as i64 * 2 - 1).is_some(), "the newest is kept");
    }
}
