//! Which worker runs an attempt: the workers this master knows, their
//! capacity and load, and the strategy that picks among them.
//!
//! A worker's load as this master sees it is the larger of the attempts
//! this master has on it and what the worker last said it runs for every
//! master. A worker whose dispatch failed as a whole (unreachable, a
//! refusal such as a wrong cluster secret) rests before it is picked again,
//! 250 ms doubling to 10 s, until its next good answer: without the rest a
//! master would send the same attempts to it in every step, as fast as it
//! can commit.

use std::collections::BTreeMap;

use crate::hash::Map;
use std::str::FromStr;

/// How a worker is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// The worker with the lowest load relative to its capacity.
    #[default]
    LeastLoaded,
    /// Smooth weighted round robin, weighted by capacity.
    RoundRobin,
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "least-loaded" => Ok(Strategy::LeastLoaded),
            "round-robin" => Ok(Strategy::RoundRobin),
            other => Err(format!("unknown dispatch strategy `{other}` (least-loaded or round-robin)")),
        }
    }
}

/// A worker as the membership describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerInfo {
    pub id: String,
    /// Attempts it runs at once.
    pub capacity: u32,
    /// Its group: tasks with `worker_group` run only on their group.
    pub group: Option<String>,
    /// It takes tasks of every group (the one worker of `dagr serve`).
    pub any_group: bool,
}

impl WorkerInfo {
    fn serves(&self, group: Option<&str>) -> bool {
        self.any_group || group.is_none_or(|g| self.group.as_deref() == Some(g))
    }
}

/// The first pause of a worker whose dispatch failed, and the longest (ms).
pub(crate) const FIRST_REST_MS: i64 = 250;
pub(crate) const LONGEST_REST_MS: i64 = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rest {
    until: i64,
    pause: i64,
}

/// The workers and their load.
#[derive(Debug, Default)]
pub(crate) struct Placement {
    strategy: Strategy,
    workers: BTreeMap<String, WorkerInfo>,
    /// Attempts this master has on each worker.
    outstanding: Map<String, u32>,
    /// What each worker last said it runs, over all masters.
    reported: Map<String, u32>,
    /// Smooth weighted round robin: current weights.
    current: Map<String, i64>,
    resting: Map<String, Rest>,
}

impl Placement {
    pub(crate) fn new(strategy: Strategy) -> Self {
        Placement { strategy, ..Placement::default() }
    }

    /// The workers now; returns those that are gone.
    pub(crate) fn set_workers(&mut self, workers: Vec<WorkerInfo>) -> Vec<String> {
        let fresh: BTreeMap<String, WorkerInfo> = workers.into_iter().map(|w| (w.id.clone(), w)).collect();
        let gone: Vec<String> = self.workers.keys().filter(|id| !fresh.contains_key(*id)).cloned().collect();
        for id in &gone {
            self.reported.remove(id);
            self.current.remove(id);
            self.resting.remove(id);
        }
        self.workers = fresh;
        gone
    }

    pub(crate) fn knows(&self, worker: &str) -> bool {
        self.workers.contains_key(worker)
    }

    fn resting(&self, worker: &str, now: i64) -> bool {
        self.resting.get(worker).is_some_and(|r| r.until > now)
    }

    fn load(&self, worker: &str) -> u32 {
        let mine = self.outstanding.get(worker).copied().unwrap_or(0);
        mine.max(self.reported.get(worker).copied().unwrap_or(0))
    }

    /// Chooses a worker of `group` with room, and counts the attempt on it.
    pub(crate) fn pick(&mut self, group: Option<&str>, now: i64) -> Option<String> {
        let eligible: Vec<&WorkerInfo> = self
            .workers
            .values()
            .filter(|w| w.serves(group) && !self.resting(&w.id, now) && self.load(&w.id) < w.capacity)
            .collect();
        let chosen = match self.strategy {
            Strategy::LeastLoaded => eligible
                .iter()
                .min_by(|a, b| {
                    let fa = self.load(&a.id) as f64 / a.capacity.max(1) as f64;
                    let fb = self.load(&b.id) as f64 / b.capacity.max(1) as f64;
                    fa.total_cmp(&fb).then_with(|| a.id.cmp(&b.id))
                })
                .map(|w| w.id.clone()),
            Strategy::RoundRobin => {
                let total: i64 = eligible.iter().map(|w| w.capacity as i64).sum();
                let ids: Vec<(String, i64)> = eligible.iter().map(|w| (w.id.clone(), w.capacity as i64)).collect();
                for (id, weight) in &ids {
                    *self.current.entry(id.clone()).or_default() += weight;
                }
                let best = ids
                    .iter()
                    .max_by_key(|(id, _)| (self.current.get(id).copied().unwrap_or(0), std::cmp::Reverse(id.clone())))
                    .map(|(id, _)| id.clone());
                if let Some(id) = &best {
                    *self.current.entry(id.clone()).or_default() -= total;
                }
                best
            }
        }?;
        *self.outstanding.entry(chosen.clone()).or_default() += 1;
        Some(chosen)
    }

    /// Whether any worker (of any group) has room now.
    pub(crate) fn has_room(&self, now: i64) -> bool {
        self.workers.values().any(|w| !self.resting(&w.id, now) && self.load(&w.id) < w.capacity)
    }

    /// An attempt on `worker` ended: its slot is free again.
    pub(crate) fn released(&mut self, worker: &str) {
        if let Some(n) = self.outstanding.get_mut(worker) {
            *n = n.saturating_sub(1);
        }
        if let Some(n) = self.reported.get_mut(worker) {
            *n = n.saturating_sub(1);
        }
    }

    /// An attempt on `worker` this master took over (adopted).
    pub(crate) fn adopted(&mut self, worker: &str) {
        *self.outstanding.entry(worker.to_owned()).or_default() += 1;
    }

    /// A dispatch reached `worker`, which runs `running` attempts now.
    pub(crate) fn answered(&mut self, worker: &str, running: Option<u32>) {
        if let Some(running) = running {
            self.reported.insert(worker.to_owned(), running);
        }
        self.resting.remove(worker);
    }

    /// A dispatch to `worker` failed as a whole: it rests; returns for how
    /// long (ms).
    pub(crate) fn failed(&mut self, worker: &str, now: i64) -> i64 {
        let pause = match self.resting.get(worker) {
            Some(r) => (r.pause * 2).min(LONGEST_REST_MS),
            None => FIRST_REST_MS,
        };
        self.resting.insert(worker.to_owned(), Rest { until: now + pause, pause });
        pause
    }

    /// When the next resting worker may be picked again, if any rests.
    pub(crate) fn next_rest_end(&self, now: i64) -> Option<i64> {
        self.resting.values().map(|r| r.until).filter(|&u| u > now).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(id: &str, capacity: u32, group: Option<&str>) -> WorkerInfo {
        WorkerInfo { id: id.into(), capacity, group: group.map(Into::into), any_group: false }
    }

    #[test]
    fn least_loaded_fills_by_share_of_capacity_then_by_id() {
        let mut p = Placement::new(Strategy::LeastLoaded);
        p.set_workers(vec![worker("a", 2, None), worker("b", 4, None)]);
        let picks: Vec<String> = (0..6).filter_map(|_| p.pick(None, 0)).collect();
        assert_eq!(picks, ["a", "b", "b", "a", "b", "b"]);
        assert_eq!(p.pick(None, 0), None, "every slot is taken");
        p.released("a");
        assert_eq!(p.pick(None, 0).as_deref(), Some("a"));
    }

    #[test]
    fn round_robin_is_weighted_by_capacity() {
        let mut p = Placement::new(Strategy::RoundRobin);
        p.set_workers(vec![worker("a", 1, None), worker("b", 3, None)]);
        let picks: Vec<String> = (0..4).filter_map(|_| p.pick(None, 0)).collect();
        assert_eq!(picks.iter().filter(|w| *w == "b").count(), 3, "{picks:?}");
    }

    #[test]
    fn groups_and_reported_load_are_respected() {
        let mut p = Placement::new(Strategy::LeastLoaded);
        p.set_workers(vec![worker("cpu", 4, None), worker("gpu", 4, Some("gpu"))]);
        assert_eq!(p.pick(Some("gpu"), 0).as_deref(), Some("gpu"));
        assert_eq!(p.pick(Some("tpu"), 0), None, "no worker of the group");
        // Other masters keep `gpu` full: it says it runs 4.
        p.answered("gpu", Some(4));
        assert_eq!(p.pick(Some("gpu"), 0), None);
        let any = WorkerInfo { any_group: true, ..worker("local", 1, None) };
        p.set_workers(vec![any]);
        assert_eq!(p.pick(Some("gpu"), 0).as_deref(), Some("local"), "the one worker of serve takes every group");
    }

    #[test]
    fn a_failing_worker_rests_longer_each_time_up_to_a_limit() {
        let mut p = Placement::new(Strategy::LeastLoaded);
        p.set_workers(vec![worker("dead", 8, None), worker("alive", 8, None)]);
        assert_eq!(p.failed("dead", 1000), FIRST_REST_MS);
        for _ in 0..4 {
            assert_eq!(p.pick(None, 1000).as_deref(), Some("alive"), "the resting worker is skipped");
        }
        assert_eq!(p.next_rest_end(1000), Some(1000 + FIRST_REST_MS));
        assert_eq!(p.pick(None, 1000 + FIRST_REST_MS).as_deref(), Some("dead"), "picked again after its rest");
        assert_eq!(p.failed("dead", 2000), FIRST_REST_MS * 2);
        for _ in 0..10 {
            p.failed("dead", 2000);
        }
        assert_eq!(p.failed("dead", 2000), LONGEST_REST_MS);
        p.answered("dead", Some(0));
        assert_eq!(p.next_rest_end(2000), None, "a good answer ends the rest");
    }

    #[test]
    fn workers_that_leave_are_reported_once() {
        let mut p = Placement::new(Strategy::LeastLoaded);
        p.set_workers(vec![worker("a", 1, None), worker("b", 1, None)]);
        assert_eq!(p.set_workers(vec![worker("b", 1, None)]), ["a"]);
        assert!(p.set_workers(vec![worker("b", 1, None)]).is_empty());
        assert!(!p.knows("a"));
    }
}
