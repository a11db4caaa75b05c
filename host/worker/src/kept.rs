//! What a worker remembers of attempts it no longer runs, bounded: keys it
//! disowned, and results a master acknowledged as stale.

use std::collections::{HashMap, HashSet, VecDeque};

use dagr_protocol::wire::{AttemptKey, AttemptResult};

/// The last keys put in, up to a bound: the oldest leave first.
#[derive(Default)]
pub(crate) struct RecentKeys {
    keys: HashSet<AttemptKey>,
    order: VecDeque<AttemptKey>,
    /// Some key left.
    forgot: bool,
}

impl RecentKeys {
    pub(crate) fn insert(&mut self, key: &AttemptKey, bound: usize) {
        if self.keys.insert(key.clone()) {
            self.order.push_back(key.clone());
        }
        while self.order.len() > bound {
            if let Some(oldest) = self.order.pop_front() {
                self.keys.remove(&oldest);
                self.forgot = true;
            }
        }
    }

    pub(crate) fn contains(&self, key: &AttemptKey) -> bool {
        self.keys.contains(key)
    }

    /// Whether a key left to keep the bound.
    pub(crate) fn forgot(&self) -> bool {
        self.forgot
    }
}

/// Results a master acknowledged as stale. A master answers so for a run it
/// does not hold (yet): one that restarted and owns the run's slot again,
/// but has not taken the run over, drops the result; asked about the
/// attempt once it has, the worker gives the result instead of making it
/// run again. The newest are kept, up to a count and a size; a result that
/// leaves is remembered by key ([`StaleResults::dropped`]).
#[derive(Default)]
pub(crate) struct StaleResults {
    results: HashMap<AttemptKey, AttemptResult>,
    order: VecDeque<AttemptKey>,
    bytes: usize,
    dropped: RecentKeys,
}

/// At most this many stale results are kept…
pub const STALE_RESULTS_KEPT: usize = 4_096;
/// …taking at most this many bytes (by [`AttemptResult::payload_bytes`]).
pub const STALE_RESULT_BYTES: usize = 16 << 20;
/// Keys of stale results that were not kept: past this many the worker no
/// longer vouches that an attempt it does not know never reached it.
pub const DROPPED_KEPT: usize = 65_536;

impl StaleResults {
    pub(crate) fn keep(&mut self, result: AttemptResult) {
        let key = result.key.clone();
        self.bytes += result.payload_bytes();
        if let Some(old) = self.results.insert(key.clone(), result) {
            self.bytes -= old.payload_bytes();
        } else {
            self.order.push_back(key);
        }
        while self.results.len() > STALE_RESULTS_KEPT || self.bytes > STALE_RESULT_BYTES {
            let Some(oldest) = self.order.pop_front() else { break };
            if let Some(old) = self.results.remove(&oldest) {
                self.bytes -= old.payload_bytes();
                self.dropped.insert(&oldest, DROPPED_KEPT);
            }
        }
    }

    /// The kept result of `key`, taken out.
    pub(crate) fn take(&mut self, key: &AttemptKey) -> Option<AttemptResult> {
        let result = self.results.remove(key)?;
        self.bytes -= result.payload_bytes();
        self.order.retain(|k| k != key);
        Some(result)
    }

    /// Whether the attempt's result may have been here and left: then the
    /// attempt ran here, though the worker no longer knows it.
    pub(crate) fn may_have_dropped(&self, key: &AttemptKey) -> bool {
        self.dropped.forgot() || self.dropped.contains(key)
    }
}

#[cfg(test)]
mod tests {
    use dagr_protocol::wire::Outcome;

    use super::*;

    fn key(number: u32) -> AttemptKey {
        AttemptKey { run_id: "r".into(), task: 0, number }
    }

    #[test]
    fn recent_keys_keep_the_newest_and_say_when_they_forgot_one() {
        let mut keys = RecentKeys::default();
        keys.insert(&key(1), 2);
        keys.insert(&key(2), 2);
        keys.insert(&key(2), 2);
        assert!(keys.contains(&key(1)) && keys.contains(&key(2)));
        assert!(!keys.forgot(), "a key put in twice is kept once");
        keys.insert(&key(3), 2);
        assert!(!keys.contains(&key(1)), "the oldest leaves");
        assert!(keys.contains(&key(2)) && keys.contains(&key(3)));
        assert!(keys.forgot());
    }

    #[test]
    fn stale_results_are_kept_up_to_their_size_and_remembered_by_key_past_it() {
        let result = |number: u32, bytes: usize| AttemptResult {
            key: key(number),
            epoch: 1,
            task_name: "t".into(),
            worker: "w1".into(),
            started_at: 0,
            finished_at: 1,
            outcome: Outcome::Succeeded { output: "x".repeat(bytes) },
            trace: None,
        };
        let mut stale = StaleResults::default();
        stale.keep(result(1, 10));
        stale.keep(result(1, 10));
        assert!(!stale.may_have_dropped(&key(1)));
        assert_eq!(stale.take(&key(1)), Some(result(1, 10)));
        assert_eq!(stale.take(&key(1)), None, "taken out");
        assert_eq!((stale.bytes, stale.order.len()), (0, 0));

        // Past the size, the oldest go and are remembered.
        stale.keep(result(2, STALE_RESULT_BYTES / 2));
        stale.keep(result(3, STALE_RESULT_BYTES / 2));
        assert!(stale.take(&key(2)).is_none());
        assert!(stale.may_have_dropped(&key(2)));
        assert_eq!(stale.take(&key(3)), Some(result(3, STALE_RESULT_BYTES / 2)));
        // Once a key was forgotten too, it vouches for nothing.
        for number in 0..=(STALE_RESULTS_KEPT + DROPPED_KEPT) as u32 {
            stale.keep(result(10 + number, 0));
        }
        assert!(stale.may_have_dropped(&key(1)));
    }
}
