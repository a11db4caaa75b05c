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

use dagr_protocol::wire::{GroupWant, ResourceAnswer, ResourceRequest, WorkerSlots};

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
    /// The lease it holds in the membership (0: none known); a worker
    /// under a new lease is another: what ran under the old one is lost.
    pub lease: i64,
}

impl WorkerInfo {
    pub(crate) fn serves(&self, group: Option<&str>) -> bool {
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

/// Slots the resource leader granted this master (when the leader
/// schedules resources, see [`crate::resources`]).
#[derive(Debug, Default)]
pub(crate) struct Grants {
    /// Slots held per worker: this master's attempts there and the granted
    /// slots it has not used yet.
    pub held: Map<String, u32>,
    /// The most slots to keep while other masters wait (its fair share).
    pub share: Option<u32>,
    /// The largest leader token seen.
    pub token: i64,
    /// An exchange with the leader is out.
    pub asking: bool,
    /// When the last exchange ended.
    pub last: i64,
    /// No exchange for more slots before then (after a failure, or an
    /// answer that granted nothing).
    pub not_before: i64,
    /// Slots wanted at the last dispatch, per worker group.
    pub wanted: BTreeMap<Option<String>, u32>,
    /// Slots held as the last exchange said (to the leader).
    pub declared: u32,
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
    /// `Some` when the resource leader grants this master its slots: a
    /// worker's room is then what was granted, not its capacity.
    pub(crate) grants: Option<Grants>,
}

impl Placement {
    pub(crate) fn new(strategy: Strategy, by_leader: bool) -> Self {
        Placement { strategy, grants: by_leader.then(Grants::default), ..Placement::default() }
    }

    /// Attempts this master has on `worker`.
    pub(crate) fn outstanding(&self, worker: &str) -> u32 {
        self.outstanding.get(worker).copied().unwrap_or(0)
    }

    /// How many attempts `worker` may run for this master now.
    fn room(&self, worker: &WorkerInfo) -> u32 {
        match &self.grants {
            Some(grants) => grants.held.get(&worker.id).copied().unwrap_or(0).min(worker.capacity),
            None => worker.capacity,
        }
    }

    /// The workers now; those that left, or hold another lease now (they
    /// lost theirs and joined again), are returned.
    pub(crate) fn set_workers(&mut self, workers: Vec<WorkerInfo>) -> Vec<String> {
        let fresh: BTreeMap<String, WorkerInfo> = workers.into_iter().map(|w| (w.id.clone(), w)).collect();
        let gone: Vec<String> = self
            .workers
            .iter()
            .filter(|(id, old)| fresh.get(*id).is_none_or(|new| new.lease != old.lease))
            .map(|(id, _)| id.clone())
            .collect();
        for id in &gone {
            if let Some(grants) = self.grants.as_mut() {
                grants.held.remove(id);
            }
            self.reported.remove(id);
            self.current.remove(id);
            self.resting.remove(id);
        }
        self.workers = fresh;
        gone
    }

    /// The lease `worker` holds if it is a member, as last told (0: not
    /// known).
    pub(crate) fn member_lease(&self, worker: &str) -> Option<i64> {
        self.workers.get(worker).map(|w| w.lease)
    }

    /// The lease `worker` holds, as last told (none when not known).
    pub(crate) fn lease_of(&self, worker: &str) -> Option<i64> {
        self.workers.get(worker).map(|w| w.lease).filter(|lease| *lease != 0)
    }

    fn resting(&self, worker: &str, now: i64) -> bool {
        self.resting.get(worker).is_some_and(|r| r.until > now)
    }

    fn load(&self, worker: &str) -> u32 {
        let mine = self.outstanding(worker);
        if self.grants.is_some() {
            // The leader accounts for every master's attempts.
            return mine;
        }
        mine.max(self.reported.get(worker).copied().unwrap_or(0))
    }

    /// Chooses a worker of `group` with room, and counts the attempt on it.
    pub(crate) fn pick(&mut self, group: Option<&str>, now: i64) -> Option<String> {
        let eligible: Vec<&WorkerInfo> = self
            .workers
            .values()
            .filter(|w| w.serves(group) && !self.resting(&w.id, now) && self.load(&w.id) < self.room(w))
            .collect();
        let chosen = match self.strategy {
            Strategy::LeastLoaded => eligible
                .iter()
                .min_by(|a, b| {
                    let fa = self.load(&a.id) as f64 / self.room(a).max(1) as f64;
                    let fb = self.load(&b.id) as f64 / self.room(b).max(1) as f64;
                    fa.total_cmp(&fb).then_with(|| a.id.cmp(&b.id))
                })
                .map(|w| w.id.clone()),
            Strategy::RoundRobin => {
                let total: i64 = eligible.iter().map(|w| self.room(w) as i64).sum();
                let ids: Vec<(String, i64)> = eligible.iter().map(|w| (w.id.clone(), self.room(w) as i64)).collect();
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
        self.workers.values().any(|w| !self.resting(&w.id, now) && self.load(&w.id) < self.room(w))
    }

    /// An attempt on `worker` ended: its slot is free again (or, above
    /// this master's fair share, goes back to the leader at the next
    /// exchange).
    pub(crate) fn released(&mut self, worker: &str) {
        if let Some(n) = self.outstanding.get_mut(worker) {
            *n = n.saturating_sub(1);
        }
        let mine = self.outstanding(worker);
        if let Some(grants) = self.grants.as_mut()
            && let Some(share) = grants.share
            && grants.held.values().sum::<u32>() > share
            && let Some(held) = grants.held.get_mut(worker)
            && *held > mine
        {
            *held -= 1;
        }
        if let Some(n) = self.reported.get_mut(worker) {
            *n = n.saturating_sub(1);
        }
    }

    /// This master still has attempts on `worker`, which joined again: with
    /// a resource leader, it holds their slots there (and says so).
    pub(crate) fn holds(&mut self, worker: &str) {
        let mine = self.outstanding(worker);
        if let Some(grants) = self.grants.as_mut() {
            let held = grants.held.entry(worker.to_owned()).or_default();
            *held = (*held).max(mine);
        }
    }

    /// An attempt on `worker` this master took over (adopted).
    pub(crate) fn adopted(&mut self, worker: &str) {
        *self.outstanding.entry(worker.to_owned()).or_default() += 1;
        let mine = self.outstanding(worker);
        if let Some(grants) = self.grants.as_mut() {
            // It runs there: this master holds that slot (and says so at
            // its next exchange).
            let held = grants.held.entry(worker.to_owned()).or_default();
            *held = (*held).max(mine);
        }
    }

    /// A dispatch reached `worker`, which ran `running` attempts when it
    /// answered, `ended` of them this dispatch's attempts whose results
    /// came back before the answer: their slots were [`Self::released`]
    /// already, and no later release would take them off the figure again
    /// (a master with nothing else there would see the worker full for
    /// good).
    pub(crate) fn answered(&mut self, worker: &str, running: Option<u32>, ended: usize) {
        if let Some(running) = running {
            let ended = u32::try_from(ended).unwrap_or(u32::MAX);
            self.reported.insert(worker.to_owned(), running.saturating_sub(ended));
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

/// After a failed exchange, or an answer from a deposed leader, the next
/// one waits this long (ms).
pub(crate) const EXCHANGE_RETRY_MS: i64 = 250;
/// After an answer that granted nothing of what was wanted, the next ask
/// waits this long (ms): other masters give slots back as their attempts
/// end, not at once.
pub(crate) const EMPTY_RETRY_MS: i64 = 5;

impl Placement {
    /// Slots wanted for tasks of `group` that found no room.
    pub(crate) fn want(&mut self, group: Option<&str>, n: usize) {
        if let Some(grants) = self.grants.as_mut() {
            let wanted = grants.wanted.entry(group.map(str::to_owned)).or_default();
            *wanted = wanted.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        }
    }

    /// Starts counting what the next dispatch wants.
    pub(crate) fn clear_wants(&mut self) {
        if let Some(grants) = self.grants.as_mut() {
            grants.wanted.clear();
        }
    }

    /// This master's attempts per worker.
    fn running(&self) -> BTreeMap<String, u32> {
        self.outstanding.iter().filter(|(_, n)| **n > 0).map(|(w, n)| (w.clone(), *n)).collect()
    }

    /// The exchange with the resource leader that is due, if one is: more
    /// slots when tasks wait for them, idle slots back when none wait, and
    /// what it holds at least every heartbeat while it holds or wants
    /// anything. One exchange is out at a time.
    pub(crate) fn resource_request(&mut self, master: &str, now: i64) -> Option<ResourceRequest> {
        let running = self.running();
        let grants = self.grants.as_mut()?;
        if grants.asking {
            return None;
        }
        let want: u32 = grants.wanted.values().sum();
        let held: u32 = grants.held.values().sum();
        let used: u32 = running.values().sum();
        let ask = want > 0 && now >= grants.not_before;
        let give_back = want == 0 && held > used;
        // Slots given back above its fair share: the leader hears of them
        // at once (another master waits for them).
        let gave = held < grants.declared;
        // (The same condition as `next_exchange`'s, or the shell would wake
        // for an exchange that never goes.)
        let beat = (held > 0 || used > 0 || want > 0) && now - grants.last >= crate::resources::HEARTBEAT_MS;
        if !(ask || give_back || gave || beat) {
            return None;
        }
        if want == 0 {
            // Nothing waits: keep only the slots in use.
            grants.held = running.iter().map(|(w, n)| (w.clone(), *n)).collect();
        }
        grants.asking = true;
        grants.declared = grants.held.values().sum();
        let mut holding: Vec<WorkerSlots> =
            grants.held.iter().map(|(worker, slots)| WorkerSlots { worker: worker.clone(), slots: *slots }).collect();
        holding.sort();
        Some(ResourceRequest {
            master: master.to_owned(),
            seen: grants.token,
            holding,
            want: grants
                .wanted
                .iter()
                .map(|(group, slots)| GroupWant { group: group.clone(), slots: *slots })
                .collect(),
        })
    }

    /// The leader's answer (or why there was none); returns whether this
    /// master gained room.
    pub(crate) fn granted(&mut self, answer: Result<ResourceAnswer, String>, now: i64) -> bool {
        let running = self.running();
        let known: Vec<String> = self.workers.keys().cloned().collect();
        let Some(grants) = self.grants.as_mut() else { return false };
        grants.asking = false;
        grants.last = now;
        let answer = match answer {
            Ok(answer) if answer.token >= grants.token => answer,
            Ok(answer) => {
                tracing::debug!(token = answer.token, seen = grants.token, "a deposed resource leader answered");
                grants.not_before = now + EXCHANGE_RETRY_MS;
                return false;
            }
            Err(reason) => {
                tracing::debug!(%reason, "no answer from the resource leader; holding on to granted slots");
                grants.not_before = now + EXCHANGE_RETRY_MS;
                return false;
            }
        };
        grants.token = answer.token;
        grants.share = answer.share;
        let before: u32 = grants.held.values().sum();
        let mut held: Map<String, u32> = answer
            .held
            .into_iter()
            .filter(|h| h.slots > 0 && known.contains(&h.worker))
            .map(|h| (h.worker, h.slots))
            .collect();
        // What runs here is held, whatever the leader knew of it.
        for (worker, n) in running {
            let slots = held.entry(worker).or_default();
            *slots = (*slots).max(n);
        }
        let after: u32 = held.values().sum();
        grants.held = held;
        grants.declared = after;
        let wanted = grants.wanted.values().sum::<u32>() > 0;
        grants.not_before = if wanted && after <= before { now + EMPTY_RETRY_MS } else { now };
        after > before
    }

    /// When the next exchange with the leader is due, if any.
    pub(crate) fn next_exchange(&self) -> Option<i64> {
        let grants = self.grants.as_ref()?;
        if grants.asking {
            return None;
        }
        let want = grants.wanted.values().any(|n| *n > 0);
        let holds = grants.held.values().any(|n| *n > 0) || self.outstanding.values().any(|n| *n > 0);
        let beat = (want || holds).then_some(grants.last + crate::resources::HEARTBEAT_MS);
        let ask = want.then_some(grants.not_before);
        [beat, ask].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(id: &str, capacity: u32, group: Option<&str>) -> WorkerInfo {
        WorkerInfo { id: id.into(), capacity, group: group.map(Into::into), any_group: false, lease: 0 }
    }

    #[test]
    fn least_loaded_fills_by_share_of_capacity_then_by_id() {
        let mut p = Placement::new(Strategy::LeastLoaded, false);
        p.set_workers(vec![worker("a", 2, None), worker("b", 4, None)]);
        let picks: Vec<String> = (0..6).filter_map(|_| p.pick(None, 0)).collect();
        assert_eq!(picks, ["a", "b", "b", "a", "b", "b"]);
        assert_eq!(p.pick(None, 0), None, "every slot is taken");
        p.released("a");
        assert_eq!(p.pick(None, 0).as_deref(), Some("a"));
    }

    #[test]
    fn round_robin_is_weighted_by_capacity() {
        let mut p = Placement::new(Strategy::RoundRobin, false);
        p.set_workers(vec![worker("a", 1, None), worker("b", 3, None)]);
        let picks: Vec<String> = (0..4).filter_map(|_| p.pick(None, 0)).collect();
        assert_eq!(picks.iter().filter(|w| *w == "b").count(), 3, "{picks:?}");
    }

    #[test]
    fn groups_and_reported_load_are_respected() {
        let mut p = Placement::new(Strategy::LeastLoaded, false);
        p.set_workers(vec![worker("cpu", 4, None), worker("gpu", 4, Some("gpu"))]);
        assert_eq!(p.pick(Some("gpu"), 0).as_deref(), Some("gpu"));
        assert_eq!(p.pick(Some("tpu"), 0), None, "no worker of the group");
        // Other masters keep `gpu` full: it says it runs 4.
        p.answered("gpu", Some(4), 0);
        assert_eq!(p.pick(Some("gpu"), 0), None);
        let any = WorkerInfo { any_group: true, ..worker("local", 1, None) };
        p.set_workers(vec![any]);
        assert_eq!(p.pick(Some("gpu"), 0).as_deref(), Some("local"), "the one worker of serve takes every group");
    }

    #[test]
    fn a_failing_worker_rests_longer_each_time_up_to_a_limit() {
        let mut p = Placement::new(Strategy::LeastLoaded, false);
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
        p.answered("dead", Some(0), 0);
        assert_eq!(p.next_rest_end(2000), None, "a good answer ends the rest");
    }

    #[test]
    fn workers_that_leave_are_reported_once() {
        let mut p = Placement::new(Strategy::LeastLoaded, false);
        p.set_workers(vec![worker("a", 1, None), worker("b", 1, None)]);
        assert_eq!(p.set_workers(vec![worker("b", 1, None)]), ["a"]);
        assert!(p.set_workers(vec![worker("b", 1, None)]).is_empty());
        assert!(!p.workers.contains_key("a"));
    }

    fn answer(token: i64, held: &[(&str, u32)], share: Option<u32>) -> Result<ResourceAnswer, String> {
        let held = held.iter().map(|(w, n)| WorkerSlots { worker: (*w).into(), slots: *n }).collect();
        Ok(ResourceAnswer { token, held, share })
    }

    #[test]
    fn with_a_resource_leader_only_granted_slots_are_used() {
        let mut p = Placement::new(Strategy::LeastLoaded, true);
        p.set_workers(vec![worker("a", 4, None), worker("b", 4, None)]);
        assert_eq!(p.pick(None, 0), None, "nothing granted yet");
        p.want(None, 3);
        let request = p.resource_request("m1", 0).expect("it asks for what it wants");
        assert_eq!(request.want, vec![GroupWant { group: None, slots: 3 }]);
        assert!(request.holding.is_empty());
        assert_eq!(p.resource_request("m1", 0), None, "one exchange out at a time");
        assert!(p.granted(answer(5, &[("b", 2)], None), 10), "room gained");
        let picks: Vec<String> = (0..3).filter_map(|_| p.pick(None, 10)).collect();
        assert_eq!(picks, ["b", "b"], "only the two granted slots");
        // The attempts end and nothing waits: the slots go back.
        p.released("b");
        p.clear_wants();
        let request = p.resource_request("m1", 20).expect("idle slots go back");
        assert_eq!(request.holding, vec![WorkerSlots { worker: "b".into(), slots: 1 }]);
        assert_eq!(request.seen, 5);
    }

    #[test]
    fn a_failed_or_deposed_answer_keeps_what_is_held_and_waits_before_asking_again() {
        let mut p = Placement::new(Strategy::LeastLoaded, true);
        p.set_workers(vec![worker("a", 4, None)]);
        p.want(None, 1);
        p.resource_request("m1", 0).unwrap();
        p.granted(answer(5, &[("a", 1)], None), 0);
        assert_eq!(p.pick(None, 0).as_deref(), Some("a"));
        p.want(None, 1);
        p.resource_request("m1", 0).unwrap();
        assert!(!p.granted(Err("the leader is unreachable".into()), 100));
        assert_eq!(p.resource_request("m1", 100), None, "waits after a failure");
        assert_eq!(p.next_exchange(), Some(100 + EXCHANGE_RETRY_MS));
        p.resource_request("m1", 100 + EXCHANGE_RETRY_MS).unwrap();
        assert!(!p.granted(answer(4, &[("a", 4)], None), 400), "an older leader is not heard");
        assert_eq!(p.pick(None, 400), None, "still the one slot, in use");
        // A leader that knows nothing of the attempt: it is held anyway.
        p.resource_request("m1", 400 + EXCHANGE_RETRY_MS).unwrap();
        assert!(!p.granted(answer(6, &[], None), 700));
        assert_eq!(p.resource_request("m1", 700), None, "asks again a little later");
        assert_eq!(p.next_exchange(), Some(700 + EMPTY_RETRY_MS));
        let request = p.resource_request("m1", 700 + EMPTY_RETRY_MS).unwrap();
        assert_eq!(request.holding, vec![WorkerSlots { worker: "a".into(), slots: 1 }]);
    }

    #[test]
    fn above_its_fair_share_a_master_gives_slots_back_as_attempts_end() {
        let mut p = Placement::new(Strategy::LeastLoaded, true);
        p.set_workers(vec![worker("a", 4, None)]);
        p.want(None, 4);
        p.resource_request("m1", 0).unwrap();
        p.granted(answer(1, &[("a", 4)], None), 0);
        for _ in 0..4 {
            p.pick(None, 0).unwrap();
        }
        p.want(None, 4);
        p.resource_request("m1", 0).unwrap();
        p.granted(answer(1, &[("a", 4)], Some(2)), 0);
        p.released("a");
        assert_eq!(p.pick(None, 0), None, "the slot went back, not to the next task");
        let request = p.resource_request("m1", 0).expect("the leader hears of it at once");
        assert_eq!(request.holding, vec![WorkerSlots { worker: "a".into(), slots: 3 }]);
        p.granted(answer(1, &[("a", 3)], Some(2)), 0);
        p.released("a");
        p.released("a");
        assert_eq!(p.pick(None, 0).as_deref(), Some("a"), "at its share of 2, a freed slot is used again");
    }
}
