//! The simulated coordination service (leases, slots, the leader and its
//! token) and the faults drawn each second.

use super::*;

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
        let slots = self.config.slots;
        let infos: Vec<WorkerInfo> = workers
            .iter()
            .map(|id| WorkerInfo {
                id: id.clone(),
                capacity: slots,
                group: None,
                any_group: false,
                lease: leases[id] as i64,
            })
            .collect();
        self.follow_book(&infos, &members);
        for (rank, &i) in members.iter().enumerate() {
            let own: BTreeSet<u32> =
                (0..dagr_protocol::SLOTS).filter(|s| *s as usize % members.len() == rank).collect();
            let lead = self.leader.filter(|(l, _)| *l == i).map(|(_, token)| token);
            let m = &mut self.masters[i];
            if m.paused {
                continue;
            }
            let mut told = false;
            if m.told_workers.as_ref() != Some(&workers) || m.told_leases.as_ref() != Some(&leases) {
                m.inbox.push(Input::Workers(infos.clone()));
                m.told_workers = Some(workers.clone());
                m.told_leases = Some(leases.clone());
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
