//! Dispatch: ready tasks, fairly across tenants and by priority within
//! one, start as attempts on workers with room, within their workflow's
//! `concurrency` and their tenant's `max_concurrent`.

use std::sync::Arc;

use dagr_core::run::TaskState;
use dagr_protocol::plugins::PluginDirectory;
use dagr_protocol::wire::{AttemptKey, AttemptResult, Outcome};
use dagr_store::{AttemptRow, AttemptState, OutputWrite, SoleStart};

use crate::engine::control::Activation;
use crate::engine::effects::{Effects, Need};
use crate::engine::runs::{ActiveRun, InFlight, WorkflowKey, next_to_dispatch};
use crate::engine::state::EngineState;
use crate::engine::timers::Timer;
use crate::hash::Set;
use crate::ready::ReadyTask;

/// Ready tasks set aside in one step because their worker group is full;
/// past this many the step stops looking further down the queue.
const MAX_SET_ASIDE: usize = 4096;

/// Whether a ready task can start now or waits for data.
enum Prepared {
    Ready,
    Waiting,
}

impl EngineState {
    /// Fills free worker slots from the ready queue.
    pub(crate) fn dispatch_ready(&mut self, effects: &mut Effects, plugins: &dyn PluginDirectory, now: i64) {
        for item in std::mem::take(&mut self.awaiting) {
            self.ready.restore(item);
        }
        self.unpark_with_room();
        self.placement.clear_wants();
        let mut set_aside: Vec<ReadyTask> = Vec::new();
        let mut full_groups: Set<Option<String>> = Set::default();
        // Slots with a run under a limit counted per slot that is being
        // claimed again (see `claiming`): their runs under such limits wait.
        let reclaimed: Set<u32> = self.claiming.values().map(|(slot, _)| *slot).collect();
        while self.in_flight.len() < self.settings.max_in_flight && !self.owned.is_empty() {
            let Some(item) = self.ready.pop(now) else { break };
            let Some(run) = self.runs.get(&item.run) else {
                continue;
            };
            if !run.machine.dispatching() || run.machine.task(item.task).state != TaskState::Queued {
                continue;
            }
            let key = run.workflow_key();
            if let Some(cap) = run.machine.workflow().spec.concurrency
                && self.running_by_workflow.get(&key).copied().unwrap_or(0) >= cap as usize
            {
                self.parked.entry(key).or_default().push_back(item);
                continue;
            }
            let tenant_cap = self.tenant_limits(&run.row.tenant).and_then(|l| l.max_concurrent);
            if let Some(cap) = tenant_cap
                && self.running_by_tenant.get(&run.tenant).copied().unwrap_or(0) >= cap as usize
            {
                self.parked_by_tenant.entry(run.tenant.clone()).or_default().push_back(item);
                continue;
            }
            if reclaimed.contains(&(run.row.slot as u32)) && self.counted_per_slot(run) {
                set_aside.push(item);
                continue;
            }
            let group = run.machine.workflow().tasks[item.task].worker_group.clone();
            if full_groups.contains(&group) {
                self.placement.want(group.as_deref(), 1);
                set_aside.push(item);
                if set_aside.len() >= MAX_SET_ASIDE {
                    break;
                }
                continue;
            }
            if let Prepared::Waiting = self.prepare(effects, &item, plugins) {
                self.awaiting.push(item);
                continue;
            }
            // Conditions, upstream waits, switches and child runs need no worker.
            match self.activate(effects, &item.run, item.task, now) {
                Activation::Worker => {}
                Activation::Done => continue,
                Activation::Later => {
                    self.awaiting.push(item);
                    continue;
                }
            }
            let Some(worker) = self.placement.pick(group.as_deref(), now) else {
                // No worker of this group has room: its tasks wait, the
                // other groups' go on (unless no worker at all has room).
                self.placement.want(group.as_deref(), 1);
                set_aside.push(item);
                if !self.placement.has_room(now) || set_aside.len() >= MAX_SET_ASIDE {
                    // What is still in line wants slots too (counted as
                    // this group's: the leader grants what it can).
                    self.placement.want(group.as_deref(), self.ready.len());
                    break;
                }
                full_groups.insert(group);
                continue;
            };
            self.start_task(effects, &item, worker, plugins, now);
        }
        for item in set_aside {
            self.ready.restore(item);
        }
    }

    /// Tasks parked behind a cap that has room go back in line, as many as
    /// it has room for. Woken instead one by one as places were freed
    /// ([`EngineState::release`]), a task woken could go stale before it
    /// was dispatched, and the place was left to none: in the simulation
    /// with a capped tenant (seed 5670) two results woke two tasks of their
    /// own run, which a kill later in the same step ended, and another
    /// run's task stayed parked for good with none of its tenant's attempts
    /// running. Costs nothing where the caps are full.
    fn unpark_with_room(&mut self) {
        let tenants: Vec<Arc<str>> = self.parked_by_tenant.keys().cloned().collect();
        for tenant in tenants {
            let cap = self.tenant_limits(&tenant).and_then(|l| l.max_concurrent).map_or(usize::MAX, |c| c as usize);
            let room = cap.saturating_sub(self.running_by_tenant.get(&tenant).copied().unwrap_or(0));
            let Some(parked) = self.parked_by_tenant.get_mut(&tenant) else { continue };
            for _ in 0..room {
                let Some(item) = next_to_dispatch(&self.runs, parked) else { break };
                self.ready.restore(item);
            }
            if parked.is_empty() {
                self.parked_by_tenant.remove(&tenant);
            }
        }
        let workflows: Vec<WorkflowKey> = self.parked.keys().cloned().collect();
        for key in workflows {
            let Some(parked) = self.parked.get_mut(&key) else { continue };
            let cap = parked
                .iter()
                .find_map(|item| self.runs.get(&item.run)?.machine.workflow().spec.concurrency)
                .map_or(usize::MAX, |c| c as usize);
            let room = cap.saturating_sub(self.running_by_workflow.get(&key).copied().unwrap_or(0));
            for _ in 0..room {
                let Some(item) = next_to_dispatch(&self.runs, parked) else { break };
                self.ready.restore(item);
            }
            if parked.is_empty() {
                self.parked.remove(&key);
            }
        }
    }

    /// A run under a limit counted for its slot (its tenant's
    /// `max_concurrent`, its workflow's `concurrency`) starts an attempt:
    /// the store drops the step's writes for it while another master holds
    /// an active run of its tenant in the slot. This master counts only the
    /// attempts of the runs it holds, and a copy of a run another master
    /// claimed since is stale (no fence tells a master that has not written
    /// for the run), so two masters that each believe they hold the slot
    /// would each dispatch up to the limit.
    fn start_alone(&self, effects: &mut Effects, run_id: &str) {
        if !self.settings.fence_writes {
            return;
        }
        let Some(run) = self.runs.get(run_id) else { return };
        let Some(owner) = run.row.owner.clone().filter(|_| self.counted_per_slot(run)) else { return };
        // As many as the limit lets start in one step, at most.
        if effects.batch.sole_starts.iter().any(|s| s.run_id == run_id) {
            return;
        }
        effects.batch.sole_starts.push(SoleStart {
            run_id: run_id.to_owned(),
            tenant: run.row.tenant.clone(),
            slot: run.row.slot,
            owner,
        });
    }

    /// Whether a limit that one master counts for the run's slot governs
    /// it: its tenant's `max_concurrent`, its workflow's `concurrency`.
    pub(crate) fn counted_per_slot(&self, run: &ActiveRun) -> bool {
        self.limited_per_slot(run.machine.workflow(), &run.row.tenant)
    }

    /// [`Self::counted_per_slot`] for a run of `workflow` and `tenant`.
    pub(crate) fn limited_per_slot(&self, workflow: &dagr_core::Workflow, tenant: &str) -> bool {
        workflow.spec.concurrency.is_some() || self.tenant_capped(tenant)
    }

    /// Makes sure what a ready task needs is at hand: its upstream outputs
    /// (small ones are kept in memory, big ones read from the store) and
    /// its plugin (a plugin published a moment ago through another node may
    /// not be in the directory's snapshot yet: refreshed once before the
    /// attempt fails).
    fn prepare(&mut self, effects: &mut Effects, item: &ReadyTask, plugins: &dyn PluginDirectory) -> Prepared {
        let Some(run) = self.runs.get_mut(&item.run) else { return Prepared::Ready };
        // Outputs written in this very step are not in the store yet; they
        // are looked for only when one is needed (a step may carry hundreds
        // of outputs and start hundreds of tasks).
        let mut pending: Option<Vec<(i64, &String)>> = None;
        let mut missing: Vec<i64> = Vec::new();
        for &dep in &run.machine.workflow().tasks[item.task].deps {
            if run.machine.task(dep).state != TaskState::Succeeded
                || run.outputs.contains_key(&dep)
                || run.absent.contains(&dep)
            {
                continue;
            }
            let pending = pending.get_or_insert_with(|| {
                effects
                    .batch
                    .outputs
                    .iter()
                    .filter_map(|w| match w {
                        OutputWrite::Set { run_id, idx, output } if **run_id == *item.run => Some((*idx, output)),
                        _ => None,
                    })
                    .collect()
            });
            match pending.iter().find(|(idx, _)| *idx == dep as i64) {
                Some((_, output)) => {
                    run.outputs.insert(dep, Arc::from(output.as_str()));
                }
                None => missing.push(dep as i64),
            }
        }
        if !missing.is_empty() {
            effects.need(Need::Outputs { run: run.row.id.clone(), idxs: missing });
            return Prepared::Waiting;
        }
        let task = &run.machine.workflow().tasks[item.task];
        let plugin = &task.plugin;
        if matches!(task.kind, dagr_core::control::TaskKind::Plugin)
            && !self.plugins_refreshed
            && plugins.resolve(&run.row.tenant, &plugin.name, plugin.version.as_deref()).is_err()
        {
            effects.need(Need::RefreshPlugins);
            return Prepared::Waiting;
        }
        Prepared::Ready
    }

    /// Starts the next attempt of a queued task on `worker`. A task that
    /// cannot be given to a worker (its plugin is gone, its params do not
    /// render, it asks for more than its tenant may use) fails that
    /// attempt with the reason.
    fn start_task(
        &mut self,
        effects: &mut Effects,
        item: &ReadyTask,
        worker: String,
        plugins: &dyn PluginDirectory,
        now: i64,
    ) {
        let limits = self.tenant_limits(&item.tenant);
        let Some(run) = self.runs.get_mut(&item.run) else {
            self.placement.released(&worker);
            return;
        };
        let Ok((attempt, actions)) = run.machine.start_attempt(item.task) else {
            self.placement.released(&worker);
            return;
        };
        let spec = crate::engine::spec::build_spec(run, item.task, attempt, plugins, &self.settings, limits.as_ref());
        let workflow = run.workflow_key();
        let key = AttemptKey { run_id: run.row.id.clone(), task: item.task as u32, number: attempt };
        let task_name = run.machine.workflow().tasks[item.task].name.clone();
        let epoch = run.row.epoch;
        let span = tracing::debug_span!(parent: &run.span(), "attempt", task = %task_name, attempt);
        let _entered = span.enter();
        tracing::debug!(%worker, "attempt starts");
        self.absorb(effects, &item.run, actions, now);
        let started = AttemptRow {
            run_id: key.run_id.clone(),
            task_idx: item.task as i64,
            number: attempt as i64,
            task: task_name.clone(),
            state: AttemptState::Running,
            failure_kind: None,
            message: None,
            charged: false,
            worker: worker.clone(),
            epoch,
            started_at: now,
            finished_at: None,
            lease: None,
        };
        match spec {
            Ok(mut spec) => {
                spec.worker_lease = self.placement.lease_of(&worker);
                effects.batch.attempts.push(AttemptRow { lease: spec.worker_lease, ..started });
                self.start_alone(effects, &item.run);
                self.count_running(&workflow, &item.tenant);
                let flight = InFlight {
                    workflow,
                    tenant: item.tenant.clone(),
                    worker: worker.clone(),
                    confirmed_at: now,
                    adopting: false,
                    lease: spec.worker_lease,
                };
                if let Some(warn) =
                    self.runs.get(&item.run).and_then(|r| r.machine.workflow().tasks[item.task].timeout_warn)
                {
                    let timer = Timer::AttemptWarn { run: key.run_id.clone(), task: item.task, attempt };
                    self.timers.arm(now + warn.as_millis() as i64, timer);
                }
                self.in_flight.insert(key, flight);
                effects.dispatches.push((spec, worker));
            }
            Err((kind, message)) => {
                self.placement.released(&worker);
                let result = AttemptResult {
                    key,
                    epoch,
                    task_name,
                    worker,
                    started_at: now,
                    finished_at: now,
                    outcome: Outcome::Failed { kind, message },
                    trace: None,
                };
                effects.batch.attempts.push(crate::engine::results::finished_attempt(&result, &started));
                self.apply_result(effects, result, now, false);
            }
        }
    }
}
