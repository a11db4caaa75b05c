//! Buffalo's resource scheduler, the leader's half: the leader holds every
//! worker's slots in memory and grants them to all masters, with no
//! distributed lock and no store round trip (the master's half is in
//! [`placement`](crate::engine) and the engine's `resources` module).
//!
//! The book is pure: the leader's endpoint feeds it requests, the
//! membership and `now`, and sends back what it answers.
//!
//! - **Holdings are absolute.** A master says what it keeps (its attempts
//!   running, and granted slots it still means to use); the book takes
//!   that as the truth. A lost answer, a master that restarts or a new
//!   leader loses nothing: the next exchange says it again.
//! - **A new leader listens before it grants.** Until it has heard from
//!   every live master, or for [`ResourceBook::new`]'s `warm_up` at most,
//!   it records holdings and grants nothing, so that it does not hand out
//!   slots that masters it has not heard from yet still use. Masters
//!   exchange at least every [`HEARTBEAT_MS`] while they hold anything, so
//!   a warm-up a little longer than that hears them all.
//! - **Fair shares.** When masters together ask for more than the
//!   workers have, each gets a max-min fair share of the capacity; a
//!   master above its share gives slots back as its attempts end.
//! - **Fenced.** A request from a master that has seen a larger token
//!   than the book's is refused: a newer leader exists. Workers still
//!   refuse attempts past their capacity, so an overlap between two
//!   leaders costs refusals, never an overloaded worker.

use std::collections::BTreeMap;

use dagr_protocol::wire::{ResourceAnswer, ResourceRequest, WorkerSlots};

use crate::engine::WorkerInfo;

/// The longest a master that holds or wants slots goes without an
/// exchange (ms): its heartbeat to the leader.
pub const HEARTBEAT_MS: i64 = 1000;
/// What a master asked for is counted in others' fair shares this long
/// after its last exchange (ms).
const WANT_FRESH_MS: i64 = 3 * HEARTBEAT_MS;

/// Why the book did not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("this leader's token {mine} is older than {seen}, which the master has seen: a newer leader exists")]
    Deposed { mine: i64, seen: i64 },
}

#[derive(Debug, Default, Clone)]
struct MasterEntry {
    holding: BTreeMap<String, u32>,
    want: u32,
    /// The groups it wants slots of.
    groups: Vec<Option<String>>,
    at: i64,
}

/// What the book counted, for metrics.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BookCounters {
    pub exchanges: u64,
    pub granted: u64,
    /// Exchanges that wanted slots and got none.
    pub empty: u64,
}

/// The leader's view of every worker's slots and who holds them.
#[derive(Debug)]
pub struct ResourceBook {
    token: i64,
    grants_from: i64,
    workers: BTreeMap<String, WorkerInfo>,
    masters: BTreeMap<String, MasterEntry>,
    /// The live masters, and whether each was heard in this term.
    live: BTreeMap<String, bool>,
    counters: BookCounters,
}

impl ResourceBook {
    /// The book of a leader elected with `token` at `now`; it grants from
    /// `now + warm_up` on.
    pub fn new(token: i64, now: i64, warm_up: i64) -> ResourceBook {
        ResourceBook {
            token,
            grants_from: now + warm_up,
            workers: BTreeMap::new(),
            masters: BTreeMap::new(),
            live: BTreeMap::new(),
            counters: BookCounters::default(),
        }
    }

    pub fn token(&self) -> i64 {
        self.token
    }

    pub fn counters(&self) -> &BookCounters {
        &self.counters
    }

    /// The workers now; holdings on workers that left are forgotten.
    pub fn set_workers(&mut self, workers: Vec<WorkerInfo>) {
        self.workers = workers.into_iter().map(|w| (w.id.clone(), w)).collect();
        for entry in self.masters.values_mut() {
            entry.holding.retain(|w, _| self.workers.contains_key(w));
        }
    }

    /// The live masters; what masters that left held is free again (their
    /// runs' new owners say what they adopted).
    pub fn set_masters<'a>(&mut self, live: impl IntoIterator<Item = &'a str>) {
        let live: std::collections::BTreeSet<&str> = live.into_iter().collect();
        self.masters.retain(|m, _| live.contains(m.as_str()));
        self.live = live.into_iter().map(|m| (m.to_owned(), self.masters.contains_key(m))).collect();
    }

    /// Whether the book grants: once it heard every live master, or after
    /// its warm-up.
    fn granting(&self, now: i64) -> bool {
        now >= self.grants_from || (!self.live.is_empty() && self.live.values().all(|heard| *heard))
    }

    /// Slots in use on `worker`, over all masters.
    fn used(&self, worker: &str) -> u32 {
        self.masters.values().map(|m| m.holding.get(worker).copied().unwrap_or(0)).sum()
    }

    /// A master's exchange: records what it holds, grants what it wants
    /// within the free slots and its fair share.
    pub fn exchange(&mut self, request: &ResourceRequest, now: i64) -> Result<ResourceAnswer, Refusal> {
        if request.seen > self.token {
            return Err(Refusal::Deposed { mine: self.token, seen: request.seen });
        }
        self.counters.exchanges += 1;
        let holding: BTreeMap<String, u32> = request
            .holding
            .iter()
            .filter(|h| h.slots > 0 && self.workers.contains_key(&h.worker))
            .map(|h| (h.worker.clone(), h.slots))
            .collect();
        let want: u32 = request.want.iter().map(|w| w.slots).sum();
        if let Some(heard) = self.live.get_mut(&request.master) {
            *heard = true;
        }
        let granting = self.granting(now);
        let entry = self.masters.entry(request.master.clone()).or_default();
        entry.holding = holding;
        entry.want = want;
        entry.groups = request.want.iter().filter(|w| w.slots > 0).map(|w| w.group.clone()).collect();
        entry.at = now;
        let share = self.share_of(&request.master, now);
        let mut held = self.masters[&request.master].holding.clone();
        let mut granted = 0u32;
        if granting {
            let mut room = share.map_or(u32::MAX, |s| s.saturating_sub(held.values().sum()));
            let mut used: BTreeMap<String, u32> = self.workers.keys().map(|w| (w.clone(), self.used(w))).collect();
            for wanted in &request.want {
                for _ in 0..wanted.slots.min(room) {
                    let Some(worker) = self.free_worker(wanted.group.as_deref(), &used) else { break };
                    *used.entry(worker.clone()).or_default() += 1;
                    *held.entry(worker).or_default() += 1;
                    granted += 1;
                    room -= 1;
                }
            }
        }
        self.counters.granted += granted as u64;
        if want > 0 && granted == 0 {
            self.counters.empty += 1;
        }
        if let Some(entry) = self.masters.get_mut(&request.master) {
            entry.holding = held.clone();
            entry.want = want.saturating_sub(granted);
        }
        Ok(ResourceAnswer {
            token: self.token,
            held: held.into_iter().map(|(worker, slots)| WorkerSlots { worker, slots }).collect(),
            share,
        })
    }

    /// The worker of `group` with free slots and the smallest share of its
    /// capacity in use (then by id).
    fn free_worker(&self, group: Option<&str>, used: &BTreeMap<String, u32>) -> Option<String> {
        self.workers
            .values()
            .filter(|w| w.serves(group))
            .filter_map(|w| {
                let u = used.get(&w.id).copied().unwrap_or(0);
                (u < w.capacity).then(|| (u as f64 / w.capacity.max(1) as f64, &w.id))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)))
            .map(|(_, id)| id.clone())
    }

    /// `master`'s max-min fair share of all workers' capacity, when the
    /// masters' demands (what they hold and what they recently asked for)
    /// exceed it and its own is above its share; `None`: not limited.
    ///
    /// A demand counts only up to the capacity of the workers that can
    /// meet it (those it holds slots on, and those serving a group it
    /// wants): a master waiting for 50 slots of a group of 2 competes for
    /// 2, and does not hold the others below what the rest of the workers
    /// could give them. (Where groups overlap — ungrouped tasks run on any
    /// worker — this is an approximation: a master may be held slightly
    /// below what a per-group split would give it.)
    fn share_of(&self, master: &str, now: i64) -> Option<u32> {
        let capacity: u32 = self.workers.values().map(|w| w.capacity).sum();
        let mut demands: Vec<(u32, &str)> = self
            .masters
            .iter()
            .map(|(id, m)| {
                let fresh = id == master || now - m.at <= WANT_FRESH_MS;
                let want = if fresh { m.want } else { 0 };
                let usable: u32 = self
                    .workers
                    .values()
                    .filter(|w| {
                        m.holding.contains_key(&w.id) || (fresh && m.groups.iter().any(|g| w.serves(g.as_deref())))
                    })
                    .map(|w| w.capacity)
                    .sum();
                (m.holding.values().sum::<u32>().saturating_add(want).min(usable), id.as_str())
            })
            .collect();
        demands.sort();
        let shares = fair_shares(&demands.iter().map(|(d, _)| *d).collect::<Vec<_>>(), capacity);
        let i = demands.iter().position(|(_, id)| *id == master)?;
        (shares[i] < demands[i].0).then_some(shares[i])
    }
}

/// Max-min fair shares of `capacity` for `demands` (sorted, smallest
/// first): nobody gets more than it asks for, and what the small demands
/// leave is split evenly among the rest.
fn fair_shares(demands: &[u32], capacity: u32) -> Vec<u32> {
    let mut left = capacity;
    let mut shares: Vec<u32> = Vec::with_capacity(demands.len());
    for (i, demand) in demands.iter().enumerate() {
        let fair = left / (demands.len() - i) as u32;
        let share = (*demand).min(fair);
        shares.push(share);
        left -= share;
    }
    // What rounding down left over goes to the largest demands first.
    for (share, demand) in shares.iter_mut().zip(demands).rev() {
        if left == 0 {
            break;
        }
        if *share < *demand {
            *share += 1;
            left -= 1;
        }
    }
    shares
}

#[cfg(test)]
mod tests {
    use dagr_protocol::wire::GroupWant;

    use super::*;

    fn worker(id: &str, capacity: u32, group: Option<&str>) -> WorkerInfo {
        WorkerInfo { id: id.into(), capacity, group: group.map(Into::into), any_group: false, lease: 0 }
    }

    fn ask(master: &str, holding: &[(&str, u32)], want: u32) -> ResourceRequest {
        ResourceRequest {
            master: master.into(),
            seen: 0,
            holding: holding.iter().map(|(w, n)| WorkerSlots { worker: (*w).into(), slots: *n }).collect(),
            want: vec![GroupWant { group: None, slots: want }],
        }
    }

    fn total(answer: &ResourceAnswer) -> u32 {
        answer.held.iter().map(|h| h.slots).sum()
    }

    fn book(workers: Vec<WorkerInfo>) -> ResourceBook {
        let mut book = ResourceBook::new(7, 0, 0);
        book.set_workers(workers);
        book
    }

    #[test]
    fn grants_spread_over_the_least_used_workers_and_never_past_capacity() {
        let mut book = book(vec![worker("w1", 2, None), worker("w2", 4, None)]);
        let a = book.exchange(&ask("m1", &[], 3), 0).unwrap();
        assert_eq!(a.token, 7);
        assert_eq!(
            a.held,
            vec![WorkerSlots { worker: "w1".into(), slots: 1 }, WorkerSlots { worker: "w2".into(), slots: 2 }]
        );
        let b = book.exchange(&ask("m2", &[], 10), 0).unwrap();
        assert_eq!(total(&b), 3, "only three slots are left: {b:?}");
        let c = book.exchange(&ask("m3", &[], 1), 0).unwrap();
        assert_eq!(total(&c), 0, "every slot is held");
        assert_eq!(book.counters().empty, 1);
    }

    #[test]
    fn what_a_master_gives_back_is_granted_to_the_next() {
        let mut book = book(vec![worker("w1", 4, None)]);
        assert_eq!(total(&book.exchange(&ask("m1", &[], 4), 0).unwrap()), 4);
        assert_eq!(total(&book.exchange(&ask("m2", &[], 2), 0).unwrap()), 0);
        // m1 runs one attempt now and keeps nothing else.
        assert_eq!(total(&book.exchange(&ask("m1", &[("w1", 1)], 0), 10).unwrap()), 1);
        assert_eq!(total(&book.exchange(&ask("m2", &[], 2), 10).unwrap()), 2);
    }

    #[test]
    fn a_busy_master_gets_its_fair_share_when_others_wait() {
        let mut book = book(vec![worker("w1", 6, None)]);
        let m1 = book.exchange(&ask("m1", &[], 100), 0).unwrap();
        assert_eq!((total(&m1), m1.share), (6, None), "alone, all of it, and no limit");
        // m2 wants 3 and finds nothing free (its share covers what it wants);
        // m1 now has a share of 3.
        let m2 = book.exchange(&ask("m2", &[], 3), 0).unwrap();
        assert_eq!((total(&m2), m2.share), (0, None));
        let m1 = book.exchange(&ask("m1", &[("w1", 6)], 50), 1).unwrap();
        assert_eq!((total(&m1), m1.share), (6, Some(3)), "it keeps what it holds until its attempts end");
        // m1 gave three back as they ended.
        book.exchange(&ask("m1", &[("w1", 3)], 50), 2).unwrap();
        assert_eq!(total(&book.exchange(&ask("m2", &[], 3), 2).unwrap()), 3);
    }

    #[test]
    fn fair_shares_add_up_and_small_demands_keep_what_they_need() {
        assert_eq!(fair_shares(&[1, 10, 10], 7), [1, 3, 3]);
        assert_eq!(fair_shares(&[5, 5], 7), [3, 4]);
        assert_eq!(fair_shares(&[3, 3, 3], 10), [3, 3, 3], "enough for all");
        assert_eq!(fair_shares(&[4, 4, 4], 10), [3, 3, 4]);
        assert!(fair_shares(&[], 10).is_empty());
    }

    #[test]
    fn groups_are_granted_only_their_workers() {
        let mut book = book(vec![worker("cpu", 4, None), worker("gpu", 2, Some("gpu"))]);
        let request =
            ResourceRequest { want: vec![GroupWant { group: Some("gpu".into()), slots: 5 }], ..ask("m1", &[], 0) };
        let a = book.exchange(&request, 0).unwrap();
        assert_eq!(a.held, vec![WorkerSlots { worker: "gpu".into(), slots: 2 }]);
    }

    #[test]
    fn a_master_waiting_for_a_small_group_does_not_hold_others_below_the_rest() {
        let mut book = book(vec![worker("cpu", 10, Some("cpu")), worker("gpu", 2, Some("gpu"))]);
        let want = |group: &str, slots: u32| vec![GroupWant { group: Some(group.into()), slots }];
        let gpu = |holding: &[(&str, u32)]| ResourceRequest { want: want("gpu", 50), ..ask("g", holding, 0) };
        let cpu = |m: &str, holding: &[(&str, u32)]| ResourceRequest { want: want("cpu", 40), ..ask(m, holding, 0) };
        assert_eq!(total(&book.exchange(&gpu(&[]), 0).unwrap()), 2);
        // 50 gpu slots wanted, 2 exist: the cpu master competes with 2, not
        // 52, and keeps every cpu slot.
        let c1 = book.exchange(&cpu("c1", &[]), 0).unwrap();
        assert_eq!((total(&c1), c1.share), (10, None));
        let g = book.exchange(&gpu(&[("gpu", 2)]), 1).unwrap();
        assert_eq!(g.share, None, "all of its group is all it can have");
        // A second cpu master: the cpu workers are split between the two.
        book.exchange(&cpu("c2", &[]), 2).unwrap();
        let c1 = book.exchange(&cpu("c1", &[("cpu", 10)]), 3).unwrap();
        assert_eq!(c1.share, Some(5));
    }

    #[test]
    fn a_new_leader_listens_before_it_grants_and_a_deposed_one_refuses() {
        let mut book = ResourceBook::new(9, 1000, 1200);
        book.set_workers(vec![worker("w1", 4, None)]);
        book.set_masters(["m1", "m2", "m3"]);
        // m1 still runs 3 attempts it was granted by the last leader.
        let a = book.exchange(&ask("m1", &[("w1", 3)], 2), 1500).unwrap();
        assert_eq!(total(&a), 3, "no grant while warming up, holdings kept");
        let b = book.exchange(&ask("m2", &[], 4), 2200).unwrap();
        assert_eq!(total(&b), 1, "after the warm-up: m1's three are in use");
        let stale = ResourceRequest { seen: 10, ..ask("m1", &[], 1) };
        assert_eq!(book.exchange(&stale, 2300), Err(Refusal::Deposed { mine: 9, seen: 10 }));
        // A leader that heard every live master grants before its warm-up ends.
        let mut book = ResourceBook::new(10, 1000, 1200);
        book.set_workers(vec![worker("w1", 4, None)]);
        book.set_masters(["m1", "m2"]);
        assert_eq!(total(&book.exchange(&ask("m1", &[("w1", 1)], 2), 1010).unwrap()), 1, "m2 not heard yet");
        assert_eq!(total(&book.exchange(&ask("m2", &[], 2), 1020).unwrap()), 2, "everyone heard: it grants");
    }

    #[test]
    fn workers_and_masters_that_leave_free_their_slots() {
        let mut book = book(vec![worker("w1", 2, None), worker("w2", 2, None)]);
        assert_eq!(total(&book.exchange(&ask("m1", &[], 4), 0).unwrap()), 4);
        book.set_masters(["m2"]);
        assert_eq!(total(&book.exchange(&ask("m2", &[], 4), 0).unwrap()), 4, "m1 is gone");
        book.set_workers(vec![worker("w1", 2, None), worker("w3", 2, None)]);
        let a = book.exchange(&ask("m2", &[("w1", 2), ("w2", 2)], 2), 0).unwrap();
        assert_eq!(
            a.held,
            vec![WorkerSlots { worker: "w1".into(), slots: 2 }, WorkerSlots { worker: "w3".into(), slots: 2 }]
        );
    }
}
