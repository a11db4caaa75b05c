//! dagr's wire types.
//!
//! # Brief overview
//!
//! - [`wire`]: what masters and workers say to each other: an
//!   [`AttemptSpec`](wire::AttemptSpec) to run, an
//!   [`AttemptResult`](wire::AttemptResult) back. In `dagr serve` they travel
//!   through channels in one process; in a cluster, over HTTP. The types are
//!   the same, so swapping the transport changes nothing else.
//! - [`api`]: the public REST DTOs, shared by the server (which also
//!   generates the OpenAPI document from them) and the CLI.
//! - [`plugins`]: the plugin directory the API validates against and the
//!   engine resolves plugins with.
//! - [`sealed`]: tenants' secrets sealed at rest (ChaCha20-Poly1305),
//!   sealed by the API and opened by workers.
//! - [`control`]: how the API reaches the engine (wake it, wait for a
//!   command or a run), whether in-process or over the store.

pub mod api;
pub mod control;
pub mod plugins;
pub mod sealed;
pub mod sharding;
pub mod tenancy;
pub mod wire;

/// Number of hash slots runs are sharded into. Fixed for the life of an
/// installation: changing it would move every run.
pub const SLOTS: u32 = 1024;

/// The slot of a run: a stable hash of its id (FNV-1a; the same on every
/// node and every build).
pub fn slot_of(run_id: &str) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in run_id.bytes() {
        hash ^= byte as u32;
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash % SLOTS
}

#[cfg(test)]
mod tests {
    #[test]
    fn slots_are_stable_and_spread() {
        assert_eq!(super::slot_of("run-1"), super::slot_of("run-1"));
        let used: std::collections::HashSet<u32> = (0..5000).map(|i| super::slot_of(&format!("r{i}"))).collect();
        assert!(used.len() > 900, "{}", used.len());
    }
}
