//! Runs are sharded into a fixed number of hash slots; a slot is the unit
//! that masters own (see `dagr_protocol::sharding` for who owns which).

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
