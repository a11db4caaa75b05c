//! Which master owns which slot: weighted rendezvous (highest random weight)
//! hashing. Every slot goes to the live master with the highest score for
//! it, so a master that joins takes about 1/N of the slots from the others
//! and a master that leaves gives up only its own slots; nothing else moves.
//! Weights (default 1.0) let the rebalancer shift load away from a master
//! that is persistently overloaded.

use std::collections::{BTreeMap, HashSet};

use crate::SLOTS;

/// Slot → master id, for every slot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlotMap {
    owners: Vec<String>,
}

/// 64-bit FNV-1a, then a finaliser, so that scores are well spread.
fn hash(master: &str, slot: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in master.bytes().chain(slot.to_le_bytes()) {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // splitmix64 finaliser
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The weighted score: -weight / ln(u) with u uniform in (0, 1).
fn score(master: &str, weight: f64, slot: u32) -> f64 {
    let u = ((hash(master, slot) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    -weight / u.ln()
}

impl SlotMap {
    /// Assigns every slot among `masters` (id → weight). Empty when there
    /// are no masters.
    pub fn compute(masters: &BTreeMap<String, f64>) -> SlotMap {
        if masters.is_empty() {
            return SlotMap::default();
        }
        let owners = (0..SLOTS)
            .map(|slot| {
                masters
                    .iter()
                    .map(|(id, &w)| (score(id, w.max(0.01), slot), id))
                    .max_by(|a, b| a.0.total_cmp(&b.0).then_with(|| b.1.cmp(a.1)))
                    .map(|(_, id)| id.clone())
                    .unwrap_or_default()
            })
            .collect();
        SlotMap { owners }
    }

    pub fn owner(&self, slot: u32) -> Option<&str> {
        self.owners.get(slot as usize).map(String::as_str)
    }

    /// The slots `master` owns.
    pub fn slots_of(&self, master: &str) -> HashSet<u32> {
        self.owners.iter().enumerate().filter(|(_, o)| *o == master).map(|(s, _)| s as u32).collect()
    }

    /// How many slots changed owner between two maps.
    pub fn moved(&self, other: &SlotMap) -> usize {
        (0..SLOTS as usize).filter(|&s| self.owners.get(s) != other.owners.get(s)).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masters(ids: &[&str]) -> BTreeMap<String, f64> {
        ids.iter().map(|id| (id.to_string(), 1.0)).collect()
    }

    #[test]
    fn even_spread() {
        let map = SlotMap::compute(&masters(&["m1", "m2", "m3"]));
        for m in ["m1", "m2", "m3"] {
            let n = map.slots_of(m).len();
            assert!((250..=430).contains(&n), "{m} owns {n}");
        }
    }

    #[test]
    fn adding_moves_about_one_nth_and_removing_only_its_own() {
        let three = SlotMap::compute(&masters(&["m1", "m2", "m3"]));
        let four = SlotMap::compute(&masters(&["m1", "m2", "m3", "m4"]));
        let moved = three.moved(&four);
        // Ideal: 1024 / 4 = 256.
        assert!((180..=330).contains(&moved), "{moved}");
        // Every moved slot went to the new master.
        for s in 0..SLOTS {
            if three.owner(s) != four.owner(s) {
                assert_eq!(four.owner(s), Some("m4"));
            }
        }
        let two = SlotMap::compute(&masters(&["m1", "m3"]));
        let m2_slots = three.slots_of("m2");
        assert_eq!(three.moved(&two), m2_slots.len());
        for s in 0..SLOTS {
            if !m2_slots.contains(&s) {
                assert_eq!(three.owner(s), two.owner(s));
            }
        }
    }

    #[test]
    fn weight_shifts_load() {
        let mut w = masters(&["m1", "m2", "m3"]);
        let before = SlotMap::compute(&w).slots_of("m1").len();
        w.insert("m1".into(), 0.5);
        let after = SlotMap::compute(&w).slots_of("m1").len();
        assert!(after < before * 3 / 4, "{before} -> {after}");
    }
}
