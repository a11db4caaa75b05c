//! Validated workflow versions, kept for the runs and triggers that follow.
//!
//! A stored version never changes (a changed definition is a new version,
//! and versions are never deleted), so nobody need fetch, parse and validate
//! the same definition twice: for a workflow of 100,000 tasks that is most
//! of a second. One cache serves a process: in `dagr serve` the API and the
//! engine share it, so a large workflow is held once, not once per reader.
//! The key carries the tenant.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::Workflow;

/// Versions kept at most, by default.
pub const DEFAULT_MAX_VERSIONS: usize = 4096;
/// Tasks over all kept versions at most, by default (a validated task takes
/// ~0.7 KiB, so ~700 MiB: a run in progress holds its own version anyway).
pub const DEFAULT_MAX_TASKS: usize = 1_000_000;

type Key = (String, String, i64);

/// Validated versions by (tenant, workflow, version), bounded by their
/// number and by their tasks; when full, versions are forgotten (in no
/// particular order) to make room.
#[derive(Debug)]
pub struct VersionCache {
    max_versions: usize,
    max_tasks: usize,
    entries: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    map: HashMap<Key, Arc<Workflow>>,
    tasks: usize,
}

impl Default for VersionCache {
    fn default() -> Self {
        VersionCache::new(DEFAULT_MAX_VERSIONS, DEFAULT_MAX_TASKS)
    }
}

impl VersionCache {
    pub fn new(max_versions: usize, max_tasks: usize) -> Self {
        VersionCache { max_versions: max_versions.max(1), max_tasks, entries: Mutex::default() }
    }

    pub fn get(&self, tenant: &str, name: &str, version: i64) -> Option<Arc<Workflow>> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.map.get(&(tenant.to_owned(), name.to_owned(), version)).cloned()
    }

    /// Keeps `workflow`; a version larger than the whole cache is not kept.
    pub fn insert(&self, tenant: &str, name: &str, version: i64, workflow: Arc<Workflow>) {
        let size = workflow.tasks.len();
        if size > self.max_tasks {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let key = (tenant.to_owned(), name.to_owned(), version);
        if let Some(old) = entries.map.remove(&key) {
            entries.tasks -= old.tasks.len();
        }
        while !entries.map.is_empty()
            && (entries.map.len() >= self.max_versions || entries.tasks + size > self.max_tasks)
        {
            let Some(old) = entries.map.keys().next().cloned() else { break };
            if let Some(old) = entries.map.remove(&old) {
                entries.tasks -= old.tasks.len();
            }
        }
        entries.tasks += size;
        entries.map.insert(key, workflow);
    }

    /// Versions kept now.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workflow(name: &str, tasks: usize) -> Arc<Workflow> {
        let tasks: String = (0..tasks).map(|i| format!("- {{name: t{i}, plugin: echo}}\n")).collect();
        crate::run::tests::workflow(&format!("name: {name}\ntasks:\n{tasks}"))
    }

    #[test]
    fn versions_are_kept_per_tenant_and_the_cache_stays_bounded() {
        let cache = VersionCache::new(256, 1_000);
        cache.insert("t1", "wf", 1, workflow("wf", 1));
        assert!(cache.get("t1", "wf", 1).is_some());
        assert!(cache.get("t2", "wf", 1).is_none(), "another tenant's version");
        assert!(cache.get("t1", "wf", 2).is_none(), "another version");
        let many = workflow("many", 1);
        for v in 0..512 {
            cache.insert("t1", "many", v, many.clone());
        }
        assert_eq!(cache.len(), 256);
        assert!(cache.get("t1", "many", 511).is_some(), "the newest is kept");
    }

    #[test]
    fn the_cache_is_bounded_by_tasks_too() {
        let cache = VersionCache::new(100, 10);
        cache.insert("t", "a", 1, workflow("a", 4));
        cache.insert("t", "b", 1, workflow("b", 4));
        assert_eq!(cache.len(), 2);
        cache.insert("t", "c", 1, workflow("c", 4));
        assert!(cache.get("t", "c", 1).is_some(), "the newest is kept");
        assert_eq!(cache.len(), 2, "one of the others made room");
        cache.insert("t", "huge", 1, workflow("huge", 11));
        assert!(cache.get("t", "huge", 1).is_none(), "larger than the whole cache");
        // The same key again replaces, and counts once.
        cache.insert("t", "c", 1, workflow("c", 4));
        cache.insert("t", "c", 1, workflow("c", 4));
        assert!(cache.get("t", "c", 1).is_some());
        assert!(cache.len() <= 2);
    }
}
