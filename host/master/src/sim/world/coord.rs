//! The simulated coordination service (leases, slots, the leader and its
//! token) and the faults drawn each second.

use super::*;

/// A membership as a master sees it: the member masters (its slots follow
/// from them) and the workers with their leases.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct View {
    pub(super) masters: Vec<usize>,
    pub(super) workers: Vec<String>,
    pub(super) leases: BTreeMap<String, u32>,
}

impl View {
    /// Master `i`'s slots: every slot whose number falls to its rank
    /// among the masters (none if it is not one).
    fn slots_of(&self, i: usize) -> BTreeSet<u32> {
        let Some(rank) = self.masters.iter().position(|&m| m == i) else { return BTreeSet::new() };
        (0..dagr_protocol::SLOTS).filter(|s| *s as usize % self.masters.len() == rank).collect()
    }

    /// The workers as the engine places attempts on them.
    fn infos(&self, slots: u32) -> Vec<WorkerInfo> {
        self.workers
            .iter()
            .map(|id| WorkerInfo {
                id: id.clone(),
                capacity: slots,
                group: None,
                any_group: false,
                lease: self.leases[id] as i64,
            })
            .collect()
    }
}

impl World {
    // Coordination --------------------------------------------------------------------------

    pub(super) fn is_member_master(&self, i: usize) -> bool {
        let m = &self.masters[i];
        m.state.is_some() && m.lease_until >= self.now
    }

    /// The coordination service's round: leases renewed (when etcd is up),
    /// the members' slots and the leader decided, and every member master
    /// told what changed.
    pub(super) fn coordinate(&mut self) {
        let ttl = self.config.lease_ttl_ms;
        for m in self.masters.iter_mut().filter(|m| m.state.is_some() && m.lease_until < self.now && !m.joining) {
            m.lease_lost = true;
        }
        if self.etcd_up {
            for m in self.masters.iter_mut().filter(|m| m.state.is_some() && !m.paused && !m.lease_lost) {
                m.lease_until = self.now + ttl;
                // Joined again under a new lease: its watch may lag.
                m.woke |= m.joining;
                m.joining = false;
            }
            for w in 0..self.workers.len() {
                if self.workers[w].alive && !self.workers[w].paused {
                    self.renew_worker_lease(w);
                }
            }
        }
        for w in 0..self.workers.len() {
            let worker = &self.workers[w];
            if worker.alive && !worker.paused && worker.lease_until < self.now && !worker.running.is_empty() {
                self.abandon_all(w);
            }
        }
        let members: Vec<usize> = (0..self.masters.len()).filter(|&i| self.is_member_master(i)).collect();
        let leader = members.first().copied();
        if leader != self.leader.map(|(i, _)| i) {
            self.term += 1;
            self.leader = leader.map(|i| (i, self.term));
            let term = self.term;
            self.note(|| format!("leader: {:?} (token {term})", leader.map(|i| format!("m{}", i + 1))));
        }
        let workers: Vec<String> =
            self.workers.iter().filter(|w| w.alive && w.lease_until >= self.now).map(|w| w.id.clone()).collect();
        let leases: BTreeMap<String, u32> = self
            .workers
            .iter()
            .filter(|w| w.alive && w.lease_until >= self.now)
            .map(|w| (w.id.clone(), w.lease))
            .collect();
        let fresh = View { masters: members.clone(), workers, leases };
        self.follow_book(&fresh.infos(self.config.slots), &members);
        for &i in &members {
            if self.masters[i].paused {
                continue;
            }
            let view = self.view_of(i, &fresh);
            let own = view.slots_of(i);
            let lead = self.leader.filter(|(l, _)| *l == i).map(|(_, token)| token);
            let slots = self.config.slots;
            let m = &mut self.masters[i];
            let mut told = false;
            if m.told_workers.as_ref() != Some(&view.workers) || m.told_leases.as_ref() != Some(&view.leases) {
                m.inbox.push(Input::Workers(view.infos(slots)));
                m.told_workers = Some(view.workers.clone());
                m.told_leases = Some(view.leases.clone());
                told = true;
            }
            if m.told_slots.as_ref() != Some(&own) {
                m.inbox.push(Input::Ownership(own.iter().copied().collect()));
                m.told_slots = Some(own);
                told = true;
            }
            if m.told_lead != Some(lead) {
                m.inbox.push(Input::Leadership(lead));
                m.told_lead = Some(lead);
                told = true;
            }
            if told {
                self.wake(i, self.now + 1);
            }
        }
        self.schedule(self.now + COORD_MS, Event::Coord);
    }

    /// The membership master `i` acts on this round: the one it saw
    /// last while its watch lags, else the coordination service's.
    ///
    /// A real master computes its slots and its workers from one snapshot
    /// of the membership (`cluster::drive_ownership`), and that snapshot
    /// can be stale: after a freeze (SIGSTOP) or a lost lease its watch
    /// delivers what changed meanwhile only later (events queued behind
    /// the freeze, or a watch etcd cancelled, read again after a pause),
    /// while its new lease makes it healthy at once. So the lag here is
    /// of the whole snapshot, slots and workers alike, not of the workers
    /// alone: a master told fresh slots beside stale workers is not one
    /// the real node can be. It still takes runs over on a stale view: a
    /// master that lost its lease gave its slots up, and joining again
    /// it takes the slots of its old snapshot back, whose runs others
    /// drove meanwhile, maybe on a worker that came back while it slept
    /// and that its snapshot does not have (the chaos soak's twin
    /// attempt, fixed by 97fb971). A lagging master keeps slots that are
    /// another's now, too: the store's fences must hold that. The real
    /// node is stricter than this model: it takes slots only from a
    /// snapshot that has it under its current lease, so it does not take
    /// runs over on a snapshot older than its re-join
    /// (`cluster::drive_ownership`). The model leaves that guard out on
    /// purpose: the engine must be safe without it too (the lease change
    /// of `f1d81d9` was found so).
    ///
    /// The transport (is a dispatch's or a probe's worker a member?)
    /// answers from the membership as it is now, lag or not. The real one
    /// reads the same watch when it sends, a step after the snapshot the
    /// takeover was made on: a lag that outlasts that step would have it
    /// answer `Gone` for the worker that came back, and the attempt would
    /// be lost all the same (with it modelled so, the seeds that find the
    /// twin attempt without 97fb971 find it with it too).
    pub(super) fn view_of(&mut self, i: usize, fresh: &View) -> View {
        let now = self.now;
        let m = &mut self.masters[i];
        let woke = std::mem::take(&mut m.woke);
        match (m.lags_until, m.seen.clone()) {
            (Some(until), Some(seen)) if until > now => return seen,
            (Some(_), _) => {
                m.lags_until = None;
                let id = m.id.clone();
                self.note(|| format!("{id}'s membership catches up"));
            }
            (None, Some(seen)) if seen != *fresh => {
                let chance = self.config.faults.membership_lag;
                if self.rng.chance(if woke { chance } else { chance / 10.0 }) {
                    let until = now + self.rng.between(1, crate::sim::MAX_LAG_MS);
                    let m = &mut self.masters[i];
                    m.lags_until = Some(until);
                    self.report.faults.membership_lags += 1;
                    let id = m.id.clone();
                    self.note(|| {
                        format!(
                            "{id}'s membership lags until {} ms: it acts on masters {:?}, workers {:?}",
                            until - START,
                            seen.masters.iter().map(|j| format!("m{}", j + 1)).collect::<Vec<_>>(),
                            seen.workers
                        )
                    });
                    return seen;
                }
            }
            _ => {}
        }
        self.masters[i].seen = Some(fresh.clone());
        fresh.clone()
    }

    // Faults --------------------------------------------------------------------------------

    /// Once a second while faults last: each node may crash or freeze, etcd
    /// may go away.
    pub(super) fn faults(&mut self) -> Result<(), String> {
        let f = self.config.faults.clone();
        for i in 0..self.masters.len() {
            if self.masters[i].state.is_none() || self.masters[i].paused {
                continue;
            }
            if self.rng.chance(f.master_crash) {
                self.crash_master(i)?;
            } else if self.rng.chance(f.master_pause) {
                self.masters[i].paused = true;
                self.report.faults.master_pauses += 1;
                let until = self.now + self.rng.between(self.config.lease_ttl_ms / 2, self.config.lease_ttl_ms * 3);
                self.note(|| format!("m{} freezes (SIGSTOP) until {} ms", i + 1, until - START));
                self.schedule(until, Event::Resume(i));
            }
        }
        for w in 0..self.workers.len() {
            if !self.workers[w].alive || self.workers[w].paused {
                continue;
            }
            if self.rng.chance(f.worker_pause) {
                self.workers[w].paused = true;
                self.report.faults.worker_pauses += 1;
                let until = self.now + self.rng.between(self.config.lease_ttl_ms / 2, self.config.lease_ttl_ms * 3);
                self.note(|| format!("w{} freezes (SIGSTOP) until {} ms", w + 1, until - START));
                self.schedule(until, Event::ResumeWorker(w));
            } else if self.rng.chance(f.worker_crash) {
                let worker = &mut self.workers[w];
                worker.alive = false;
                worker.running.clear();
                worker.outbox.clear();
                worker.disowned.clear();
                worker.stale.clear();
                worker.dropped.clear();
                worker.held.clear();
                self.report.faults.worker_crashes += 1;
                self.note(|| format!("w{} crashes (kill -9)", w + 1));
                let at = self.now + self.rng.between(500, 5_000);
                self.schedule(at, Event::RestartWorker(w));
            }
        }
        if self.etcd_up && self.rng.chance(f.etcd_down) {
            self.etcd_up = false;
            self.report.faults.etcd_outages += 1;
            let until = self.now + self.rng.between(1_000, self.config.lease_ttl_ms * 2);
            self.note(|| format!("etcd is unavailable until {} ms", until - START));
            self.schedule(until, Event::EtcdUp);
        }
        if self.now + 1_000 < START + self.config.faults_for_ms {
            self.schedule(self.now + 1_000, Event::Faults);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node that restarts while etcd is down cannot register: it is no
    /// member (no slots, no attempts) until etcd answers again (seed 872
    /// had a master made a member at once, alone with every slot).
    #[test]
    fn a_node_restarted_while_etcd_is_down_joins_once_etcd_answers() {
        let mut world = World::new(1, crate::sim::SimConfig::default());
        world.setup().unwrap();
        world.coordinate();
        assert!(world.is_member_master(0));
        world.etcd_up = false;
        world.crash_master(0).unwrap();
        world.workers[0].alive = false;
        world.now += 1_000;
        world.start_master(0);
        world.restart_worker(0);
        assert!(!world.is_member_master(0), "a master that could not register");
        assert!(world.workers[0].lease_until < world.now, "a worker that could not register");

        world.now += 1_000;
        world.etcd_up = true;
        world.coordinate();
        assert!(world.is_member_master(0));
        assert!(world.workers[0].lease_until >= world.now);
    }
}
