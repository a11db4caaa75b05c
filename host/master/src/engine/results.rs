//! Results: workers' reports, attempts lost with their worker, answers to
//! dispatches and to probes (adoption after a takeover, periodic checks).

use dagr_core::run::{FailureClass, Input as RunInput, TaskState};
use dagr_protocol::wire::{Ack, AttemptKey, AttemptResult, FailureKind, Outcome};
use dagr_store::{AttemptRow, AttemptState, OutputWrite};

use crate::engine::effects::{Accepted, Effects, Need, Probe};
use crate::engine::runs::CACHED_OUTPUT;
use crate::engine::state::EngineState;
use crate::hash::Set;
use crate::{Adoption, DispatchError};

/// Most in-flight attempts asked about in one step.
const MAX_ATTEMPT_CHECKS: usize = 256;

impl EngineState {
    /// Applies an attempt's result. Results from workers must be for an
    /// attempt this master has in flight (dispatched or adopted); anything
    /// else is stale (or, for a run of another master's slot, not ours).
    pub(crate) fn apply_result(
        &mut self,
        effects: &mut Effects,
        result: AttemptResult,
        now: i64,
        from_worker: bool,
    ) -> Ack {
        if from_worker {
            match self.in_flight.remove(&result.key) {
                Some(flight) => {
                    self.release(&flight);
                    let mut row = attempt_row(&result);
                    if let Some(run) = self.runs.get(result.key.run_id.as_str()) {
                        row.epoch = run.row.epoch;
                    }
                    effects.batch.attempts.push(row);
                }
                None => {
                    let slot = dagr_protocol::slot_of(&result.key.run_id);
                    if !self.owned.contains(&slot) && !self.runs.contains_key(result.key.run_id.as_str()) {
                        return Ack::NotOwner;
                    }
                    // Superseded, duplicate, or from an old owner's dispatch.
                    self.counters.stale_results += 1;
                    return Ack::Stale;
                }
            }
        }
        let Some(id) = self.runs.get_key_value(result.key.run_id.as_str()).map(|(id, _)| id.clone()) else {
            // The run finished (or was killed) meanwhile; the attempt row is
            // recorded above.
            self.counters.stale_results += 1;
            return Ack::Stale;
        };
        let Some(run) = self.runs.get_mut(&id) else { return Ack::Stale };
        let task = result.key.task as usize;
        if task >= run.machine.tasks().len() {
            self.counters.stale_results += 1;
            return Ack::Stale;
        }
        let attempt = result.key.number;
        // A sensor whose condition does not hold yet is checked again
        // later; past its last check it fails.
        let unready_sensor = match (&result.outcome, run.machine.workflow().tasks[task].sensor.as_deref().copied()) {
            (Outcome::Succeeded { output }, Some(sensor)) if !dagr_core::control::Sensor::ready(output) => Some(sensor),
            _ => None,
        };
        let input = match (&result.outcome, unready_sensor) {
            (_, Some(sensor)) => {
                let last_check = run.machine.task(task).attempts >= sensor.max_checks;
                if last_check {
                    run.extra[task].error = Some(format!(
                        "sensor: its condition did not hold within {} ({} checks, every {})",
                        dagr_core::units::format_duration(sensor.timeout),
                        sensor.max_checks,
                        dagr_core::units::format_duration(sensor.interval)
                    ));
                }
                let at_ms = now + sensor.interval.as_millis() as i64;
                RunInput::NotReady { task, attempt, at_ms, last_check }
            }
            (Outcome::Succeeded { .. }, None) => RunInput::AttemptSucceeded { task, attempt },
            (Outcome::Failed { kind, .. }, None) => RunInput::AttemptFailed {
                task,
                attempt,
                class: FailureClass {
                    retryable: kind.retryable(),
                    charged: kind.charged(),
                    lost: *kind == FailureKind::WorkerLost,
                },
            },
        };
        let span = tracing::debug_span!(parent: &run.span(), "attempt", task = %result.task_name, attempt);
        let _entered = span.enter();
        let not_ready = matches!(input, RunInput::NotReady { .. });
        match run.machine.apply(input, now) {
            Ok(actions) => {
                match result.outcome {
                    Outcome::Succeeded { .. } if not_ready => tracing::debug!("sensor not ready"),
                    Outcome::Succeeded { output } => {
                        tracing::debug!("attempt succeeded");
                        if output.len() <= CACHED_OUTPUT {
                            run.outputs.insert(task, std::sync::Arc::from(output.as_str()));
                        }
                        run.absent.remove(&task);
                        effects.batch.outputs.push(OutputWrite::Set {
                            run_id: run.row.id.clone(),
                            idx: task as i64,
                            output,
                        });
                    }
                    Outcome::Failed { kind, message } => {
                        tracing::debug!(%kind, %message, "attempt failed");
                        let progress = run.machine.task(task);
                        run.extra[task].error =
                            Some(if kind == FailureKind::WorkerLost && progress.state == TaskState::Failed {
                                format!(
                                    "{kind}: {message} (lost {} times with its node, past the limit [master] \
                                     max_lost_attempts = {}: failed instead of going again)",
                                    progress.lost,
                                    run.machine.max_lost()
                                )
                            } else {
                                format!("{kind}: {message}")
                            });
                    }
                }
                self.absorb(effects, &id, actions, now);
                Ack::Applied
            }
            Err(_) => {
                self.counters.stale_results += 1;
                Ack::Stale
            }
        }
    }

    /// Attempts on workers that left (or lost their lease and joined
    /// again) are lost; their tasks go again.
    ///
    /// A worker that joined again under a new lease stopped what it ran
    /// under the old one first, so the attempts sent to the old one (taken
    /// over ones too: their rows keep it) are lost. One whose lease is not
    /// known (sent by a master that did not know it, or taken over from a
    /// row written before rows kept it) is asked about again instead: it
    /// may run under the new one.
    pub(crate) fn workers_gone(&mut self, effects: &mut Effects, workers: &[String], now: i64) {
        tracing::warn!(?workers, "workers left or lost their lease");
        let mut lost: Vec<(AttemptKey, String)> = Vec::new();
        let mut ask: Vec<Probe> = Vec::new();
        for (key, flight) in self.in_flight.iter().filter(|(_, f)| workers.contains(&f.worker)) {
            match (self.placement.member_lease(&flight.worker), flight.lease) {
                (Some(now_lease), Some(lease)) if lease == now_lease => {}
                (Some(_), None) if let Some(run) = self.runs.get(key.run_id.as_str()) => {
                    ask.push(Probe { key: key.clone(), worker: flight.worker.clone(), epoch: run.row.epoch });
                }
                _ => lost.push((key.clone(), flight.worker.clone())),
            }
        }
        for probe in &ask {
            if let Some(flight) = self.in_flight.get_mut(&probe.key) {
                flight.confirmed_at = now;
            }
        }
        effects.probes.extend(ask);
        for (key, worker) in lost {
            let message = format!("worker {worker} left the cluster, or lost its lease, while running it");
            self.lose_in_flight(effects, key, &worker, message, now);
        }
        for worker in workers {
            if self.placement.member_lease(worker).is_some() {
                self.placement.holds(worker);
            }
        }
    }

    /// An in-flight attempt whose worker no longer has it: it fails as
    /// `worker-lost` (retried, uncharged, counted towards the task's lost
    /// limit).
    pub(crate) fn lose_in_flight(
        &mut self,
        effects: &mut Effects,
        key: AttemptKey,
        worker: &str,
        message: String,
        now: i64,
    ) {
        let Some(run) = self.runs.get(key.run_id.as_str()) else {
            if let Some(flight) = self.in_flight.remove(&key) {
                self.release(&flight);
            }
            return;
        };
        if !self.in_flight.contains_key(&key) {
            return;
        }
        self.counters.attempts_lost += 1;
        let task_name = run.machine.workflow().tasks[key.task as usize].name.clone();
        let started_at = run.extra[key.task as usize].started_at.unwrap_or(now);
        let result = AttemptResult {
            epoch: run.row.epoch,
            key,
            task_name,
            worker: worker.to_owned(),
            started_at,
            finished_at: now,
            outcome: Outcome::Failed { kind: FailureKind::WorkerLost, message },
            trace: None,
        };
        self.apply_result(effects, result, now, true);
    }

    /// A worker's answer to a dispatch: refused attempts never ran, so
    /// they go again uncharged; a dispatch that failed as a whole rests the
    /// worker. One that got no (usable) answer may have reached it: its
    /// attempts stay in flight and the worker is asked about them
    /// ([`Self::unanswered`]) — where workers are asked at all
    /// (`attempt_check`; the one worker in the process of `dagr serve`
    /// always answers).
    pub(crate) fn dispatched(
        &mut self,
        effects: &mut Effects,
        worker: &str,
        sent: Vec<(AttemptKey, i64, String)>,
        answer: Result<Accepted, DispatchError>,
        now: i64,
    ) {
        self.counters.dispatched += sent.len() as u64;
        let verdicts: Vec<Result<(), String>> = match answer {
            Ok(accepted) => {
                let ended = sent.iter().filter(|(key, _, _)| !self.in_flight.contains_key(key)).count();
                self.placement.answered(worker, accepted.running, ended);
                accepted.verdicts
            }
            Err(error) if error.may_have_run() && self.settings.attempt_check.is_some() => {
                let pause = self.placement.failed(worker, now);
                tracing::warn!(%worker, pause_ms = pause, %error, "no usable answer to a dispatch; its attempts stay in flight");
                self.unanswered(worker, &sent);
                return;
            }
            Err(error) => {
                let pause = self.placement.failed(worker, now);
                tracing::warn!(%worker, pause_ms = pause, %error, "dispatch failed; the worker rests");
                vec![Err(error.to_string()); sent.len()]
            }
        };
        for ((key, epoch, task_name), verdict) in sent.into_iter().zip(verdicts) {
            let Err(message) = verdict else { continue };
            self.counters.dispatch_refused += 1;
            tracing::warn!(attempt = %key, %message, "dispatch failed; the attempt goes again");
            self.never_ran(effects, key, epoch, task_name, worker, message, now);
        }
    }

    /// An attempt that never ran on `worker` ends as `dispatch-failed`: it
    /// goes again, neither charged nor counted as lost.
    #[allow(clippy::too_many_arguments)]
    fn never_ran(
        &mut self,
        effects: &mut Effects,
        key: AttemptKey,
        epoch: i64,
        task_name: String,
        worker: &str,
        message: String,
        now: i64,
    ) {
        let result = AttemptResult {
            key,
            epoch,
            task_name,
            worker: worker.to_owned(),
            started_at: now,
            finished_at: now,
            outcome: Outcome::Failed { kind: FailureKind::DispatchFailed, message },
            trace: None,
        };
        self.apply_result(effects, result, now, true);
    }

    /// Attempts whose dispatch got no answer: the worker may run them, so
    /// they stay in flight, and it is asked about them at the next check.
    /// It answers that it runs them, or has their result, or does not
    /// know them (it refuses them from then on, should the request still
    /// reach it): then they never ran if the worker vouches for it under
    /// the lease they were sent to, and are lost otherwise ("unknown" alone
    /// cannot tell one that never arrived from one that ran and whose
    /// result was dropped); a worker that does not answer leaves with its
    /// lease, and they are lost with it.
    fn unanswered(&mut self, worker: &str, sent: &[(AttemptKey, i64, String)]) {
        let every = self.settings.attempt_check.map_or(0, |every| every.as_millis() as i64);
        for (key, _, _) in sent {
            if let Some(flight) = self.in_flight.get_mut(key)
                && flight.worker == worker
            {
                flight.confirmed_at = flight.confirmed_at.min(self.last_attempt_check - every);
            }
        }
    }

    /// A worker's answer about an attempt this master adopted or checked.
    pub(crate) fn probed(
        &mut self,
        effects: &mut Effects,
        key: AttemptKey,
        worker: &str,
        epoch: i64,
        adoption: Adoption,
        now: i64,
    ) {
        let current = self.runs.get(key.run_id.as_str()).map(|r| r.row.epoch);
        let tracked = self.in_flight.get(&key).is_some_and(|f| f.worker == worker);
        if !tracked || current != Some(epoch) {
            // Answered for an epoch this master no longer holds, or the
            // attempt ended meanwhile.
            return;
        }
        match adoption {
            Adoption::Running => {
                let mut adopted_row = None;
                if let Some(flight) = self.in_flight.get_mut(&key) {
                    flight.confirmed_at = now;
                    if std::mem::take(&mut flight.adopting) {
                        adopted_row = Some((flight.worker.clone(), flight.lease));
                    }
                }
                if let (Some((worker, lease)), Some(run)) = (adopted_row, self.runs.get(key.run_id.as_str())) {
                    // Adopted: its row now carries this master's epoch.
                    self.counters.attempts_adopted += 1;
                    let task = key.task as usize;
                    effects.batch.attempts.push(AttemptRow {
                        run_id: key.run_id.clone(),
                        task_idx: task as i64,
                        number: key.number as i64,
                        task: run.machine.workflow().tasks[task].name.clone(),
                        state: AttemptState::Running,
                        failure_kind: None,
                        message: None,
                        charged: false,
                        worker,
                        epoch,
                        started_at: run.extra[task].started_at.unwrap_or(now),
                        finished_at: None,
                        lease,
                    });
                }
            }
            Adoption::Finished(mut result) => {
                result.epoch = epoch;
                self.apply_result(effects, result, now, true);
            }
            Adoption::Gone => {
                tracing::warn!(attempt = %key, %worker, "the attempt's worker is not a member any more: lost");
                let message = format!("worker {worker} left the cluster while running it");
                self.lose_in_flight(effects, key, worker, message, now);
            }
            Adoption::Unknown { never_under: Some(lease) }
                if self.in_flight.get(&key).is_some_and(|f| f.lease == Some(lease)) =>
            {
                // Sent to this lease, which the worker still holds, and it
                // never took the attempt under it: it never ran.
                tracing::warn!(attempt = %key, %worker, "the attempt never reached its worker: it goes again");
                let message = format!(
                    "worker {worker} never received the attempt (it holds the lease it was sent to, and does not \
                     know it): it never ran there"
                );
                let task_name = self
                    .runs
                    .get(key.run_id.as_str())
                    .map(|r| r.machine.workflow().tasks[key.task as usize].name.clone());
                self.never_ran(effects, key, epoch, task_name.unwrap_or_default(), worker, message, now);
            }
            Adoption::Unknown { .. } => {
                tracing::warn!(attempt = %key, %worker, "the attempt's worker does not know it: lost");
                let message = format!(
                    "worker {worker} does not know the attempt (it restarted, or the attempt never reached it)"
                );
                self.lose_in_flight(effects, key, worker, message, now);
            }
        }
    }

    /// Asks workers about attempts they have not been heard of for
    /// `attempt_check`. A worker that restarted under the same id within
    /// its lease TTL never leaves the membership, so [`Self::workers_gone`]
    /// does not see that its attempts are gone; this does. Also looks, as
    /// often, for runs of owned slots that no master has loaded.
    pub(crate) fn check_in_flight(&mut self, effects: &mut Effects, now: i64) {
        let Some(every) = self.settings.attempt_check else { return };
        let every = every.as_millis() as i64;
        if now - self.last_attempt_check < every.min(1000) {
            return;
        }
        self.last_attempt_check = now;
        if now - self.last_orphan_sweep >= every && !self.owned.is_empty() {
            self.last_orphan_sweep = now;
            let mut slots: Vec<u32> = self.owned.iter().copied().collect();
            slots.sort_unstable();
            effects.need(Need::Owners(slots));
        }
        let due: Vec<Probe> = self
            .in_flight
            .iter()
            .filter(|(_, f)| !f.adopting && now - f.confirmed_at >= every)
            .filter_map(|(k, f)| {
                let epoch = self.runs.get(k.run_id.as_str())?.row.epoch;
                Some(Probe { key: k.clone(), worker: f.worker.clone(), epoch })
            })
            .take(MAX_ATTEMPT_CHECKS)
            .collect();
        for probe in &due {
            if let Some(flight) = self.in_flight.get_mut(&probe.key) {
                // Not asked again until this answer is overdue too.
                flight.confirmed_at = now;
            }
        }
        effects.probes.extend(due);
    }

    /// Active runs of owned slots and their owners: runs loaded nowhere
    /// (this master dropped them because another claimed them while their
    /// views of the membership differed, and that one handed them back)
    /// are taken over; they would otherwise wait for the next membership
    /// change. So are runs loaded here that another master claimed since
    /// (this one slept through the slot leaving and coming back: its copy
    /// is stale, and a run with nothing to do would never write and learn
    /// it from a fence).
    pub(crate) fn found_owners(&mut self, effects: &mut Effects, owners: Vec<(String, u32, Option<String>)>) {
        let me = self.settings.node_id.clone();
        let stale: Vec<&String> = owners
            .iter()
            .filter(|(id, slot, owner)| {
                self.owned.contains(slot)
                    && self.runs.contains_key(id.as_str())
                    && owner.as_deref().is_some_and(|o| o != me)
            })
            .map(|(id, _, _)| id)
            .collect();
        for id in stale {
            tracing::warn!(run = %id, "another master claimed this run since it was loaded here; taking it over again");
            self.drop_run(id);
            self.counters.runs_handed_over += 1;
        }
        let orphans: Set<u32> = owners
            .iter()
            .filter(|(id, slot, owner)| {
                self.owned.contains(slot)
                    && !self.runs.contains_key(id.as_str())
                    && owner.as_deref().is_some_and(|o| o != me)
            })
            .map(|(_, slot, _)| *slot)
            .collect();
        if !orphans.is_empty() {
            tracing::warn!(slots = orphans.len(), "runs of this master's slots were loaded nowhere; taking them over");
            let mut slots: Vec<u32> = orphans.into_iter().collect();
            slots.sort_unstable();
            effects.need(Need::Slots(slots));
        }
    }
}

/// A running attempt that will not report: failed as `worker-lost`.
pub(crate) fn lost_result(attempt: &AttemptRow, epoch: i64, now: i64, why: &str) -> AttemptResult {
    AttemptResult {
        key: AttemptKey {
            run_id: attempt.run_id.clone(),
            task: attempt.task_idx as u32,
            number: attempt.number as u32,
        },
        epoch,
        task_name: attempt.task.clone(),
        worker: attempt.worker.clone(),
        started_at: attempt.started_at,
        finished_at: now,
        outcome: Outcome::Failed { kind: FailureKind::WorkerLost, message: format!("the attempt was lost: {why}") },
        trace: None,
    }
}

/// The attempt row of a result.
pub(crate) fn attempt_row(result: &AttemptResult) -> AttemptRow {
    let (state, failure_kind, message, charged) = match &result.outcome {
        Outcome::Succeeded { .. } => (AttemptState::Succeeded, None, None, false),
        Outcome::Failed { kind, message } => (AttemptState::Failed, Some(*kind), Some(message.clone()), kind.charged()),
    };
    AttemptRow {
        run_id: result.key.run_id.clone(),
        task_idx: result.key.task as i64,
        number: result.key.number as i64,
        task: result.task_name.clone(),
        state,
        failure_kind,
        message,
        charged,
        worker: result.worker.clone(),
        epoch: result.epoch,
        started_at: result.started_at,
        finished_at: Some(result.finished_at),
        lease: None,
    }
}

/// The row of an attempt that started (`started`) and ended with `result`.
pub(crate) fn finished_attempt(result: &AttemptResult, started: &AttemptRow) -> AttemptRow {
    AttemptRow {
        worker: started.worker.clone(),
        epoch: started.epoch,
        started_at: started.started_at,
        lease: started.lease,
        ..attempt_row(result)
    }
}
