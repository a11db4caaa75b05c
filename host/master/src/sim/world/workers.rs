//! The simulated workers: they accept dispatches the store's epoch
//! confirms, run attempts for a while, report results until acked, answer
//! probes, freeze, crash and restart.

use super::*;

impl World {
    // Workers -------------------------------------------------------------------------------

    pub(super) fn worker_index(&self, id: &str) -> Option<usize> {
        self.workers.iter().position(|w| w.id == id)
    }

    /// A worker that is a member now (alive, its lease held).
    pub(super) fn member_worker(&self, id: &str) -> Option<usize> {
        self.worker_index(id).filter(|&w| self.workers[w].alive && self.workers[w].lease_until >= self.now)
    }

    pub(super) fn master_index(&self, id: &str) -> Option<usize> {
        self.masters.iter().position(|m| m.id == id)
    }

    /// A dispatch reaching a worker: it accepts what it has room for and
    /// whose epoch the store confirms (as the real worker does).
    pub(super) fn accept(
        &mut self,
        master: usize,
        m_inc: u32,
        w: usize,
        specs: Vec<AttemptSpec>,
        late: bool,
        deadline: i64,
    ) {
        let worker = &self.workers[w];
        let sent = crate::engine::sent_of(&specs);
        let healthy = worker.alive && worker.lease_until >= self.now;
        if !healthy {
            // A fenced worker refuses the dispatch as a whole (503), as the
            // real one does: the master rests it.
            if !late {
                let worker = worker.id.clone();
                let answer = Err(DispatchError::Refused {
                    worker: worker.clone(),
                    status: 503,
                    body: "this worker is fenced (its lease is not safe): it takes no attempts".into(),
                });
                self.send(Msg::Dispatched { master, m_inc, worker, sent, answer, deadline });
            }
            return;
        }
        let mut verdicts = Vec::with_capacity(specs.len());
        let mut started = Vec::new();
        for spec in specs {
            let worker = &self.workers[w];
            let verdict = if worker.running.len() >= self.config.slots as usize {
                self.report.refused += 1;
                Err("the worker is at capacity".to_owned())
            } else if worker.running.contains_key(&spec.key) || worker.outbox.contains_key(&spec.key) {
                Err("the attempt is already here".to_owned())
            } else if spec.worker_lease.is_some_and(|sent| sent != worker.lease as i64) {
                Err("it was sent to an earlier lease of this worker: it will not run here".to_owned())
            } else if worker.disowned.contains(&spec.key) {
                Err("it was cancelled, or this worker said it does not know it: it will not run it".to_owned())
            } else {
                match self.store.runs.get(&spec.key.run_id).map(|r| r.epoch) {
                    Some(epoch) if epoch == spec.epoch => Ok(()),
                    current => Err(format!("stale dispatch: the run's epoch is {current:?}, not {}", spec.epoch)),
                }
            };
            if verdict.is_ok() {
                self.checker.started(&spec.key, &worker.id, &self.store);
                // No other attempt of the task instance may run on a
                // worker that is up and holds its lease (one on a frozen
                // worker stops when it wakes without it), but for one
                // killed whose cancellation is on its way (either of the
                // two).
                let key = &spec.key;
                let cancelled = |k: &AttemptKey| {
                    let row = self.store.attempts.get(&(k.run_id.clone(), k.task as i64, k.number as i64));
                    row.is_some_and(|a| a.failure_kind == Some(FailureKind::Cancelled))
                };
                let same = |k: &&AttemptKey| k.run_id == key.run_id && k.task == key.task && *k != key && !cancelled(k);
                let twin = self
                    .workers
                    .iter()
                    .filter(|other| !cancelled(key) && other.alive && !other.paused && other.lease_until >= self.now)
                    .find_map(|other| other.running.keys().find(same).map(|k| (other.id.clone(), k.number)));
                if let Some((other, number)) = twin {
                    self.checker.twice(key, &worker.id, &other, number);
                }
                // A capped tenant's attempts, and a workflow's under its
                // `concurrency`, on workers that are up and hold their
                // lease, this one too, but for those cancelled (their
                // cancellation is on its way; the master gave their places
                // back when it cancelled them).
                let limited = [
                    (spec.tenant == super::CAPPED).then_some((Limited::Tenant, crate::sim::CAPPED_MAX)),
                    (spec.tenant == super::TENANT && spec.workflow == super::WIDE)
                        .then_some((Limited::Workflow, crate::sim::WIDE_CONCURRENCY)),
                ];
                for (limit, max) in limited.into_iter().flatten().filter(|_| !cancelled(key)) {
                    let counted = |s: &AttemptSpec| match limit {
                        Limited::Tenant => s.tenant == spec.tenant,
                        Limited::Workflow => s.tenant == spec.tenant && s.workflow == spec.workflow,
                    };
                    let at_once: Vec<String> = self
                        .workers
                        .iter()
                        .filter(|other| other.alive && !other.paused && other.lease_until >= self.now)
                        .flat_map(|other| other.running.iter().map(move |(k, r)| (other, k, r)))
                        .filter(|(_, k, r)| counted(&r.spec) && !cancelled(k))
                        .map(|(other, k, _)| format!("{k} on {}", other.id))
                        .collect();
                    if at_once.len() + 1 > max as usize {
                        self.checker.over_cap(key, &worker.id, limit.describe(max), &at_once);
                    }
                }
                let worker = &mut self.workers[w];
                started.push(spec.key.clone());
                let master_id = spec.master.clone();
                worker.running.insert(spec.key.clone(), Running { epoch: spec.epoch, master: master_id, spec });
            }
            verdicts.push(verdict);
        }
        let worker = &self.workers[w];
        let (inc, running) = (worker.incarnation, worker.running.len() as u32);
        for key in started {
            let at = self.now + self.rng.between(5, 300);
            self.schedule(at, Event::Finish(w, inc, key));
        }
        if late {
            return;
        }
        let worker = self.workers[w].id.clone();
        let answer = Ok(Accepted { verdicts, running: Some(running) });
        self.send(Msg::Dispatched { master, m_inc, worker, sent, answer, deadline });
    }

    pub(super) fn finish(&mut self, w: usize, inc: u32, key: AttemptKey) {
        let fails = self.rng.chance(0.1);
        let worker = &mut self.workers[w];
        if worker.incarnation != inc || !worker.alive {
            return;
        }
        let Some(run) = worker.running.remove(&key) else { return };
        // The gate's sensor finds its condition not met at its first check.
        let sensor = run.spec.workflow == crate::sim::GATE && i64::from(key.task) == super::outer::GATE_SENSOR;
        let ready = i64::from(key.number) >= super::outer::SENSOR_READY_FROM;
        let outcome = if fails {
            Outcome::Failed { kind: FailureKind::Retryable, message: "it failed, as some do".into() }
        } else {
            let ready = if sensor { format!(", \"ready\": {ready}") } else { String::new() };
            Outcome::Succeeded { output: format!("{{\"by\": \"{}\"{ready}}}", worker.id) }
        };
        self.report_result(w, run, outcome);
    }

    pub(super) fn report_result(&mut self, w: usize, run: Running, outcome: Outcome) {
        let worker = &mut self.workers[w];
        let result = AttemptResult {
            key: run.spec.key.clone(),
            epoch: run.epoch,
            task_name: run.spec.task_name.clone(),
            worker: worker.id.clone(),
            started_at: self.now,
            finished_at: self.now,
            outcome,
            trace: None,
        };
        worker.outbox.insert(run.spec.key.clone(), (result.clone(), run.master.clone()));
        let inc = worker.incarnation;
        // This result now; every unacknowledged one again later, on the
        // worker's one resend round (as the real worker's delivery loop).
        if let Some(m) = self.result_target(&result, &run.master) {
            let m_inc = self.masters[m].incarnation;
            self.send(Msg::Result { master: m, m_inc, worker: w, w_inc: inc, result });
        }
        self.resend_later(w, inc);
    }

    /// Where a result goes: the master that dispatched or adopted it if it
    /// is a member, else the run's owner in the store, else any member.
    fn result_target(&self, result: &AttemptResult, preferred: &str) -> Option<usize> {
        let members: Vec<usize> = (0..self.masters.len()).filter(|&i| self.is_member_master(i)).collect();
        let owner = self.store.runs.get(&result.key.run_id).and_then(|r| r.owner.clone());
        [Some(preferred.to_owned()), owner]
            .into_iter()
            .flatten()
            .filter_map(|id| self.master_index(&id))
            .find(|i| members.contains(i))
            .or_else(|| members.first().copied())
    }

    /// Schedules the worker's resend round unless one is scheduled.
    fn resend_later(&mut self, w: usize, inc: u32) {
        if self.workers[w].outbox.is_empty() || self.workers[w].resending {
            return;
        }
        self.workers[w].resending = true;
        let at = self.now + self.rng.between(300, 1_000);
        self.schedule(at, Event::Resend(w, inc));
    }

    /// Sends every unacknowledged result to the master it goes to: the one
    /// that dispatched or adopted it if it is a member, else the run's
    /// owner in the store, else any member; again later until acked.
    pub(super) fn resend(&mut self, w: usize, inc: u32) {
        let worker = &self.workers[w];
        if worker.incarnation != inc || !worker.alive {
            return;
        }
        let sends: Vec<(usize, AttemptResult)> = worker
            .outbox
            .values()
            .filter_map(|(result, preferred)| Some((self.result_target(result, preferred)?, result.clone())))
            .collect();
        for (m, result) in sends {
            let m_inc = self.masters[m].incarnation;
            self.send(Msg::Result { master: m, m_inc, worker: w, w_inc: inc, result });
        }
        self.workers[w].resending = false;
        self.resend_later(w, inc);
    }

    pub(super) fn restart_worker(&mut self, w: usize) {
        let worker = &mut self.workers[w];
        if worker.alive {
            return;
        }
        worker.alive = true;
        worker.incarnation += 1;
        worker.resending = false;
        // A new process registers under a new lease, once etcd answers (the
        // coordination round renews it then).
        worker.lease += 1;
        let id = worker.id.clone();
        if self.etcd_up {
            self.renew_worker_lease(w);
        } else {
            self.workers[w].lease_until = self.now - 1;
        }
        self.note(|| format!("{id} restarts"));
    }

    /// The worker's lease goes on; one that expired is replaced by a new
    /// lease, after the worker stopped what it ran under the old one (as a
    /// real node fences before it joins again).
    pub(super) fn renew_worker_lease(&mut self, w: usize) {
        if self.workers[w].lease_until < self.now {
            self.abandon_all(w);
            self.workers[w].lease += 1;
        }
        self.workers[w].lease_until = self.now + self.config.lease_ttl_ms;
    }

    /// A frozen worker goes on: what waited for it arrives; if its lease
    /// ended meanwhile it stops its attempts — before or after the ones
    /// that ended while it slept report (a race the real one has too).
    pub(super) fn resume_worker(&mut self, w: usize) {
        if !self.workers[w].paused {
            return;
        }
        self.workers[w].paused = false;
        let lost = self.workers[w].lease_until < self.now;
        let id = self.workers[w].id.clone();
        self.note(|| format!("{id} wakes up (lease lost: {lost})"));
        let fence_first = lost && self.rng.chance(0.5);
        if fence_first {
            self.abandon_all(w);
            self.renew_worker_lease(w);
        }
        for event in std::mem::take(&mut self.workers[w].held) {
            self.schedule(self.now + 1, event);
        }
        if lost && !fence_first {
            self.schedule(self.now + 2, Event::FenceWorker(w));
        }
    }

    /// A worker whose lease is gone stops every attempt and reports them
    /// lost (they run again, uncharged).
    pub(super) fn abandon_all(&mut self, w: usize) {
        let running: Vec<Running> = std::mem::take(&mut self.workers[w].running).into_values().collect();
        for run in running {
            let outcome = Outcome::Failed {
                kind: FailureKind::WorkerLost,
                message: "the worker lost its lease and stopped the attempt".into(),
            };
            self.report_result(w, run, outcome);
        }
    }
}
