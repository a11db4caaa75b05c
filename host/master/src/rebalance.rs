//! Load rebalancing between masters, with hysteresis (the seeds' rule: look
//! every 30–60 s, act only after 3 consecutive overloads).
//!
//! Slots go to masters by weighted rendezvous hashing. Every master reports
//! its load (runs it drives); the leader compares each master with the
//! average, and only when a master was overloaded at `overloads`
//! consecutive checks does it lower that master's weight — which moves some
//! of its slots to the others. A master whose weight was lowered gets it
//! back, step by step, once it has been under the average as many times in
//! a row. One bad sample moves nothing, and weights never swing back and
//! forth from one check to the next.

use std::collections::BTreeMap;

/// Settings of the rebalancer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RebalanceConfig {
    /// Consecutive checks a master must be over (or back under) before its
    /// weight changes.
    pub overloads: u32,
    /// Overloaded: load above `average * (1 + tolerance)`.
    pub tolerance: f64,
    /// Loads below this are never "overloaded" (noise on an idle cluster).
    pub min_load: u64,
    /// A weight step: multiply by this to shed load, divide to take it back.
    pub step: f64,
    /// The lowest weight a master can get.
    pub min_weight: f64,
}

impl Default for RebalanceConfig {
    fn default() -> Self {
        RebalanceConfig { overloads: 3, tolerance: 0.25, min_load: 8, step: 0.75, min_weight: 0.25 }
    }
}

/// The leader's memory between checks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rebalancer {
    /// Consecutive checks over (positive) or under (negative) the average.
    streaks: BTreeMap<String, i64>,
}

impl Rebalancer {
    /// One check: the loads of the live masters and their current weights
    /// (absent: 1.0). Returns the new weights of the masters whose weight
    /// changes.
    pub fn check(
        &mut self,
        config: &RebalanceConfig,
        loads: &BTreeMap<String, u64>,
        weights: &BTreeMap<String, f64>,
    ) -> BTreeMap<String, f64> {
        self.streaks.retain(|m, _| loads.contains_key(m));
        let mut changes = BTreeMap::new();
        if loads.len() < 2 {
            return changes;
        }
        let average = loads.values().sum::<u64>() as f64 / loads.len() as f64;
        for (master, &load) in loads {
            let weight = weights.get(master).copied().unwrap_or(1.0);
            let over = load >= config.min_load && load as f64 > average * (1.0 + config.tolerance);
            let under = (load as f64) < average;
            let streak = self.streaks.entry(master.clone()).or_insert(0);
            *streak = match (over, under) {
                (true, _) => (*streak).max(0) + 1,
                (false, true) => (*streak).min(0) - 1,
                (false, false) => 0,
            };
            if *streak >= config.overloads as i64 && weight > config.min_weight {
                changes.insert(master.clone(), (weight * config.step).max(config.min_weight));
                *streak = 0;
            } else if *streak <= -(config.overloads as i64) && weight < 1.0 {
                changes.insert(master.clone(), (weight / config.step).min(1.0));
                *streak = 0;
            }
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loads(v: &[(&str, u64)]) -> BTreeMap<String, u64> {
        v.iter().map(|(k, l)| (k.to_string(), *l)).collect()
    }

    #[test]
    fn acts_only_after_consecutive_overloads() {
        let config = RebalanceConfig::default();
        let mut r = Rebalancer::default();
        let mut weights = BTreeMap::new();
        let skewed = loads(&[("m1", 100), ("m2", 40), ("m3", 40)]);
        assert!(r.check(&config, &skewed, &weights).is_empty());
        assert!(r.check(&config, &skewed, &weights).is_empty());
        let third = r.check(&config, &skewed, &weights);
        assert_eq!(third.get("m1"), Some(&0.75));
        weights.extend(third);
        // The streak starts over after acting.
        assert!(r.check(&config, &skewed, &weights).is_empty());
    }

    #[test]
    fn one_spike_moves_nothing() {
        let config = RebalanceConfig::default();
        let mut r = Rebalancer::default();
        let weights = BTreeMap::new();
        let even = loads(&[("m1", 50), ("m2", 50)]);
        let spike = loads(&[("m1", 200), ("m2", 50)]);
        for _ in 0..10 {
            assert!(r.check(&config, &spike, &weights).is_empty());
            assert!(r.check(&config, &spike, &weights).is_empty());
            assert!(r.check(&config, &even, &weights).is_empty());
        }
    }

    #[test]
    fn weight_comes_back_when_the_load_does() {
        let config = RebalanceConfig::default();
        let mut r = Rebalancer::default();
        let mut weights = BTreeMap::from([("m1".to_owned(), 0.5625)]);
        let light = loads(&[("m1", 30), ("m2", 40), ("m3", 40)]);
        let mut seen = Vec::new();
        for _ in 0..9 {
            let changes = r.check(&config, &light, &weights);
            weights.extend(changes.clone());
            seen.extend(changes.into_values());
        }
        assert_eq!(seen, vec![0.75, 1.0]);
    }

    #[test]
    fn idle_clusters_are_left_alone() {
        let config = RebalanceConfig::default();
        let mut r = Rebalancer::default();
        let idle = loads(&[("m1", 3), ("m2", 0)]);
        for _ in 0..10 {
            assert!(r.check(&config, &idle, &BTreeMap::new()).is_empty());
        }
    }
}
