//! Runs are sharded into a fixed number of hash slots; a slot is the unit
//! that masters own (see `dagr_protocol::sharding` for who owns which).

/// Number of hash slots runs are sharded into. Fixed for the life of an
/// installation: changing it would move every run.
pub const SLOTS: u32 = 1024;

const FNV_OFFSET: u32 = 0x811c_9dc5;

fn fnv(mut hash: u32, bytes: &[u8]) -> u32 {
    for &byte in bytes {
        hash ^= byte as u32;
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// The slot of a run: a stable hash of its id (FNV-1a; the same on every
/// node and every build).
pub fn slot_of(run_id: &str) -> u32 {
    fnv(FNV_OFFSET, run_id.as_bytes()) % SLOTS
}

/// `id` with its last four hex digits chosen so that its slot is `slot`
/// (the first such choice; the rest of the id, and so its order in time,
/// is kept). Runs that one master must drive together (a workflow's under
/// `max_active_runs`, a backfill's under its parallelism: limits a master
/// counts over the runs it holds) are given ids in one slot, and every
/// node still finds a run's slot from its id alone. `None` if `id` does
/// not end in four lowercase hex digits.
pub fn id_in_slot(id: &str, slot: u32) -> Option<String> {
    let cut = id.len().checked_sub(4)?;
    let hex = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
    if !id.as_bytes()[cut..].iter().all(hex) {
        return None;
    }
    let prefix = fnv(FNV_OFFSET, &id.as_bytes()[..cut]);
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    (0..=0xffffu32).find_map(|n| {
        let tail = [12, 8, 4, 0].map(|shift| DIGITS[(n >> shift) as usize & 0xf]);
        (fnv(prefix, &tail) % SLOTS == slot % SLOTS)
            .then(|| format!("{}{}", &id[..cut], String::from_utf8_lossy(&tail)))
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn slots_are_stable_and_spread() {
        assert_eq!(super::slot_of("run-1"), super::slot_of("run-1"));
        let used: std::collections::HashSet<u32> = (0..5000).map(|i| super::slot_of(&format!("r{i}"))).collect();
        assert!(used.len() > 900, "{}", used.len());
    }

    #[test]
    fn an_id_can_be_put_in_any_slot_keeping_all_but_its_last_four_digits() {
        let id = "01938c2e-7b1a-7cde-9f01-23456789abcd";
        for slot in [0, 1, 511, super::SLOTS - 1] {
            let moved = super::id_in_slot(id, slot).unwrap();
            assert_eq!(super::slot_of(&moved), slot, "{moved}");
            assert_eq!(moved[..id.len() - 4], id[..id.len() - 4]);
            assert!(moved[id.len() - 4..].bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
            assert_eq!(super::id_in_slot(id, slot), Some(moved), "the same choice each time");
        }
        // Every slot is reachable from any id.
        let reached: std::collections::HashSet<u32> =
            (0..super::SLOTS).filter_map(|s| super::id_in_slot(id, s)).map(|m| super::slot_of(&m)).collect();
        assert_eq!(reached.len(), super::SLOTS as usize);
        assert_eq!(super::id_in_slot("run-7", 3), None, "not four hex digits at the end");
        assert_eq!(super::id_in_slot("abc", 3), None, "too short");
        assert_eq!(super::id_in_slot("x-ABCD", 3), None, "uppercase digits would read as another id");
    }
}
