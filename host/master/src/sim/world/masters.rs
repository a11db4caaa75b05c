//! The simulated masters: an engine step as the shell takes it, a commit
//! landing (fenced by the store) and sending the step's effects out, a
//! master frozen and woken, and a master killed mid-commit.

use std::collections::HashMap;

use dagr_protocol::tenancy::TenantLimits;

use super::*;

impl World {
    // Masters -------------------------------------------------------------------------------

    /// One engine step, as the shell takes it: inputs and new commands in,
    /// needs answered from the store, the batch sealed and sent to commit.
    pub(super) fn tick(&mut self, i: usize) -> Result<(), String> {
        let poll = self.now + POLL_MS;
        let m = &mut self.masters[i];
        if m.state.is_none() || m.paused {
            return Ok(());
        }
        if m.committing.is_some() {
            return Ok(());
        }
        // A master that lost its lease gives everything up, as the real
        // node does when the coordinator says so.
        if m.lease_until < self.now || m.lease_lost {
            m.lease_lost = false;
            m.joining = true;
            m.told_workers = None;
            m.told_leases = None;
            if m.told_slots.as_ref().is_none_or(|s| !s.is_empty()) {
                m.inbox.push(Input::Ownership(Default::default()));
                m.told_slots = Some(BTreeSet::new());
            }
            if m.told_lead != Some(None) {
                m.inbox.push(Input::Leadership(None));
                m.told_lead = Some(None);
            }
        }
        let mut inputs = std::mem::take(&mut m.inbox);
        let Some(state) = m.state.as_mut() else { return Ok(()) };
        state.restart_command_scan();
        let commands = self.store.commands_after(state.command_cursor(), COMMAND_PAGE);
        if !commands.is_empty() {
            inputs.push(Input::Commands(commands));
        }
        let count = inputs.len();
        let mut effects = Effects::default();
        state.begin(&mut effects);
        let mut data = Data::default();
        if self.config.capped_tenant {
            // As the shell reads them at its start and when they change.
            let cap = TenantLimits { max_concurrent: Some(crate::sim::CAPPED_MAX), ..TenantLimits::default() };
            data.tenant_limits = Some(Arc::new(HashMap::from([(super::CAPPED.to_owned(), cap)])));
        }
        let mut claimed = Vec::new();
        for pass in 0..crate::engine::MAX_PASSES {
            state.step(&mut effects, std::mem::take(&mut inputs), data, &self.plugins, self.now);
            let Some(needs) = state.needs_to_read(&mut effects, pass) else { break };
            let node = m.id.as_str();
            let has_run = |id: &str| state.has_run(id);
            data = self.store.answer(needs, &Reader { node, now: self.now, plugins: &self.plugins, has_run: &has_run });
            claimed.extend(data.loaded.iter().map(|l| {
                let running: Vec<String> =
                    l.running.iter().map(|a| format!(" {}/{}#{}", a.run_id, a.task_idx, a.number)).collect();
                format!("{} (epoch {}{})", l.row.id, l.row.epoch, running.concat())
            }));
        }
        state.seal(&mut effects, self.now);
        let next = state.next_wake(self.now).unwrap_or(poll).clamp(self.now + 1, poll);
        self.report.steps += 1;
        let writes = effects.batch.runs.len() + effects.batch.tasks.len() + effects.batch.attempts.len();
        let dispatches = effects.dispatches.len();
        let id = m.id.clone();
        let inc = m.incarnation;
        self.note(|| format!("{id} steps: {count} inputs, {writes} writes, {dispatches} dispatches"));
        if !claimed.is_empty() {
            self.note(|| format!("{id} claims {}", claimed.join(", ")));
        }
        let delay = if self.rng.chance(self.config.faults.commit_error) {
            self.report.faults.commit_errors += 1;
            self.note(|| format!("{id}'s commit fails; the shell retries it"));
            self.rng.between(50, 1_000)
        } else if self.rng.chance(self.config.faults.slow_commit) {
            self.report.faults.slow_commits += 1;
            self.note(|| format!("{id}'s commit is slow"));
            self.rng.between(100, self.config.faults.max_delay_ms.max(100))
        } else {
            1
        };
        self.masters[i].committing = Some(effects);
        self.schedule(self.now + delay, Event::Commit(i, inc));
        self.wake(i, next.max(self.now + delay + 1));
        Ok(())
    }

    /// A commit lands: the store applies it (fencing), the invariants are
    /// checked, and the step's effects go out.
    pub(super) fn land(&mut self, i: usize, inc: u32) -> Result<(), String> {
        let m = &mut self.masters[i];
        if m.incarnation != inc || m.state.is_none() {
            return Ok(());
        }
        let Some(mut effects) = m.committing.take() else { return Ok(()) };
        let again = effects.read_commands;
        let committed = if effects.batch.is_empty() { Default::default() } else { self.commit(i, &effects.batch)? };
        let m = &mut self.masters[i];
        if let Some(state) = m.state.as_mut() {
            state.committed(&committed);
        }
        let fenced = committed.dropped();
        let m_inc = m.incarnation;
        for (id, outcome) in &effects.replies {
            let who = self.masters[i].id.clone();
            self.note(|| format!("{who} answers command #{id}: {}", outcome.message));
        }
        let mut acks: Vec<(u64, String, Ack)> = effects.acks.drain(..).collect();
        acks.sort_by_key(|(ack, _, _)| *ack);
        for (ack, run, verdict) in acks {
            if let Some((worker, w_inc, key)) = self.masters[i].acks.remove(&ack) {
                let ack = if fenced.contains(run.as_str()) { Ack::NotOwner } else { verdict };
                self.send(Msg::Acked { worker, w_inc, key, ack });
            }
        }
        let mut by_worker: BTreeMap<String, Vec<AttemptSpec>> = BTreeMap::new();
        for (spec, worker) in effects.dispatches.drain(..) {
            if !fenced.contains(spec.key.run_id.as_str()) {
                by_worker.entry(worker).or_default().push(spec);
            }
        }
        for (worker, mut specs) in by_worker {
            specs.sort_by(|a, b| a.key.cmp(&b.key));
            match self.member_worker(&worker) {
                Some(w) => {
                    let deadline = self.now + HTTP_TIMEOUT_MS;
                    self.send(Msg::Dispatch { master: i, m_inc, worker: w, specs, late: false, deadline })
                }
                None => {
                    let sent = crate::engine::sent_of(&specs);
                    let answer = Err(DispatchError::NotMember(worker.clone()));
                    self.masters[i].inbox.push(Input::Dispatched { worker, sent, answer });
                }
            }
        }
        let mut cancels: Vec<(AttemptKey, String)> = effects.cancels.drain(..).collect();
        cancels.sort();
        for (key, worker) in cancels {
            if let Some(w) = self.worker_index(&worker) {
                self.send(Msg::Cancel { worker: w, key });
            }
        }
        let mut probes: Vec<Probe> = effects.probes.drain(..).collect();
        probes.sort_by(|a, b| (&a.key, &a.worker).cmp(&(&b.key, &b.worker)));
        for probe in probes {
            match self.member_worker(&probe.worker) {
                Some(w) => self.send(Msg::Probe { master: i, m_inc, worker: w, probe }),
                None => self.masters[i].inbox.push(Input::Probed {
                    key: probe.key,
                    worker: probe.worker,
                    epoch: probe.epoch,
                    adoption: Adoption::Gone,
                }),
            }
        }
        if let Some(request) = effects.resources.take() {
            self.send(Msg::Resources { master: i, m_inc, request });
        }
        if again || !self.masters[i].inbox.is_empty() {
            self.wake(i, self.now + 1);
        }
        Ok(())
    }

    pub(super) fn commit(&mut self, i: usize, batch: &WriteBatch) -> Result<dagr_store::Committed, String> {
        self.report.commits += 1;
        let writer = self.masters[i].id.clone();
        self.checker.before_commit(&writer, batch, &self.store)?;
        let (committed, _) = self.store.commit(batch);
        self.checker.after_commit(&writer, batch, &committed, &self.store)?;
        self.report.over_limit += committed.over_limit.len() as u64;
        self.note(|| {
            let mut what: Vec<String> = batch.new_runs.iter().map(|n| format!("new {}", n.run.id)).collect();
            what.extend(batch.runs.iter().map(|r| format!("{} {:?}", r.id, r.state)));
            what.extend(batch.tasks.iter().map(|t| format!("{}/{} {:?}", t.run_id, t.name, t.state)));
            what.extend(batch.run_waits.iter().map(|w| {
                let only = if w.failures_only { " (failures)" } else { "" };
                format!("{} waits for {} {}..{}{only}", w.run_id, w.upstream, w.from_time, w.to_time)
            }));
            what.extend(batch.wakes.iter().map(|w| format!("wakes {} {}", w.workflow, w.logical_time)));
            what.extend(committed.fenced.iter().map(|id| format!("FENCED {id}")));
            what.extend(committed.over_limit.iter().map(|id| format!("OVER ITS LIMIT {id}")));
            if committed.singleton_fenced {
                what.push("SCHEDULER FENCED".into());
            }
            format!("{writer}'s commit lands: {}", what.join(", "))
        });
        Ok(committed)
    }

    pub(super) fn resume(&mut self, i: usize) {
        let m = &mut self.masters[i];
        if !m.paused {
            return;
        }
        m.paused = false;
        // What changed while it slept reaches its membership watch late,
        // maybe (`World::view_of`).
        m.woke = true;
        let id = m.id.clone();
        self.note(|| format!("{id} wakes up"));
        // It may step once on what it had before it learns that its lease
        // is gone: the store's fences must hold.
        self.wake(i, self.now + 1);
    }

    pub(super) fn crash_master(&mut self, i: usize) -> Result<(), String> {
        let m = &mut self.masters[i];
        if m.state.is_none() {
            return Ok(());
        }
        // A crash mid-commit: the transaction landed or it did not.
        if let Some(effects) = m.committing.take()
            && !effects.batch.is_empty()
            && self.rng.chance(0.5)
        {
            self.commit(i, &effects.batch)?;
        }
        let m = &mut self.masters[i];
        m.state = None;
        m.paused = false;
        let id = m.id.clone();
        self.report.faults.master_crashes += 1;
        self.note(|| format!("{id} crashes (kill -9)"));
        let at = self.now + self.rng.between(500, 5_000);
        self.schedule(at, Event::RestartMaster(i));
        Ok(())
    }
}
