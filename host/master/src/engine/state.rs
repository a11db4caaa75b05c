//! The engine's state and the order in which a step decides.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use dagr_protocol::plugins::PluginDirectory;
use dagr_protocol::tenancy::TenantLimits;
use dagr_protocol::wire::AttemptKey;
use dagr_store::Committed;

use crate::EngineConfig;
use crate::engine::SCHEDULER;
use crate::engine::admission::{Hold, Line};
use crate::engine::effects::{Data, Effects, Input, LoadError, LoadedRun, Need, PendingCommand, UpstreamQuery};
use crate::engine::placement::Placement;
use crate::engine::runs::{ActiveRun, InFlight, WorkflowKey};
use crate::engine::schedules::ScheduleEntry;
use crate::engine::timers::Timers;
use crate::hash::{Map, Set};
use crate::ready::{ReadyQueue, ReadyTask};

/// The settings a decision reads (the engine's config without its I/O).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub node_id: String,
    pub default_timeout: Duration,
    pub default_memory: u64,
    pub max_memory: u64,
    pub max_output_bytes: u64,
    pub max_log_bytes: u64,
    /// The most a task's rendered params (or condition) may be, as JSON.
    pub max_params_bytes: usize,
    pub fence_writes: bool,
    pub attempt_check: Option<Duration>,
    pub max_lost_attempts: u32,
    pub max_catch_up: u32,
    pub catch_up_per_step: usize,
    pub max_in_flight: usize,
    pub step_task_changes: usize,
    pub takeover_wakes_per_step: usize,
}

impl Settings {
    pub(crate) fn of(config: &EngineConfig) -> Settings {
        Settings {
            node_id: config.node_id.clone(),
            default_timeout: config.default_timeout,
            default_memory: config.default_memory,
            max_memory: config.max_memory,
            max_output_bytes: config.max_output_bytes,
            max_log_bytes: config.max_log_bytes,
            max_params_bytes: usize::try_from(config.max_params_bytes).unwrap_or(usize::MAX),
            fence_writes: config.fence_writes,
            attempt_check: config.attempt_check,
            max_lost_attempts: config.max_lost_attempts,
            max_catch_up: config.max_catch_up,
            catch_up_per_step: (config.catch_up_per_second as usize).max(1),
            max_in_flight: config.max_in_flight.max(1),
            step_task_changes: config.step_task_changes.max(1),
            takeover_wakes_per_step: config.takeover_wakes_per_step.max(1),
        }
    }
}

/// What the engine counted, for metrics and tests. Plain numbers: the
/// shell publishes them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counters {
    pub steps: u64,
    pub dispatched: u64,
    pub results: u64,
    /// Results for attempts that were no longer current (killed, reset,
    /// duplicate, or carrying an old epoch). Never applied.
    pub stale_results: u64,
    /// Writes the store refused because another owner fenced the run.
    pub fenced_writes: u64,
    /// Admissions the store refused: their workflow's or backfill's runs
    /// were at their limit (counted over every master's runs).
    pub over_limit: u64,
    /// Runs this master stopped driving without a write: their slots went
    /// to another master, or another master claimed them while this one
    /// was away (a lapsed lease, a rebalance).
    pub runs_handed_over: u64,
    pub runs_finished: u64,
    /// Runs taken over from another owner (or after a restart).
    pub runs_claimed: u64,
    /// Attempts found running at takeover and adopted, not restarted.
    pub attempts_adopted: u64,
    /// Attempts found lost at takeover or with their worker.
    pub attempts_lost: u64,
    /// Attempts a worker refused (at capacity, fenced, a stale epoch) or
    /// that did not reach it: they go again, uncharged.
    pub dispatch_refused: u64,
}

/// Everything the engine knows. See the [module docs](crate::engine).
pub struct EngineState {
    pub(crate) settings: Settings,
    pub(crate) runs: Map<Arc<str>, ActiveRun>,
    /// Runs dropped during the current step, with the epoch held: their
    /// writes waiting in the step are still fenced.
    pub(crate) dropped_epochs: Map<String, i64>,
    pub(crate) ready: ReadyQueue,
    pub(crate) in_flight: Map<AttemptKey, InFlight>,
    /// When in-flight attempts were last reconciled with their workers.
    pub(crate) last_attempt_check: i64,
    /// When the owned slots were last searched for runs loaded nowhere.
    pub(crate) last_orphan_sweep: i64,
    /// Tasks running per workflow (for `concurrency`).
    pub(crate) running_by_workflow: Map<WorkflowKey, usize>,
    /// Ready tasks held back by their workflow's `concurrency`.
    pub(crate) parked: Map<WorkflowKey, VecDeque<ReadyTask>>,
    /// Attempts running per tenant, and ready tasks held back by the
    /// tenant's `max_concurrent`.
    pub(crate) running_by_tenant: Map<Arc<str>, usize>,
    pub(crate) parked_by_tenant: Map<Arc<str>, VecDeque<ReadyTask>>,
    /// Running or paused runs per workflow (for `max_active_runs`) and per backfill.
    pub(crate) active_by_workflow: Map<WorkflowKey, usize>,
    pub(crate) active_by_backfill: Map<String, usize>,
    /// Queued runs waiting for admission, per workflow, oldest first.
    pub(crate) waiting: Map<WorkflowKey, Line>,
    pub(crate) timers: Timers,
    pub(crate) schedules: Map<WorkflowKey, ScheduleEntry>,
    /// The last command id seen.
    pub(crate) command_cursor: i64,
    /// Commands waiting for their run to be loaded, in order.
    pub(crate) deferred_commands: Vec<PendingCommand>,
    /// Runs that could not be loaded in this step, and why.
    pub(crate) load_failures: Map<String, LoadError>,
    /// Runs to forget at the end of the step if they are finished.
    pub(crate) retiring: Vec<Arc<str>>,
    /// Runs claimed again in the step that dropped them: the step holds
    /// writes made under the epoch they had, which must not be committed
    /// under the new one. Installed at the next step, claimed afresh.
    pub(crate) reclaim: Vec<String>,
    /// Owned slots whose runs are all taken over (again) at the next step:
    /// an admission there was over its limit in the store.
    pub(crate) retake: Vec<u32>,
    /// What a step that ran out of passes still needed: asked for first
    /// at the next (see [`EngineState::needs_to_read`]).
    unmet: Vec<Need>,
    /// Runs under a limit on active runs dropped here (and claimed again)
    /// until they are read again, and what each holds back meanwhile.
    pub(crate) reclaiming: Map<String, Hold>,
    /// Runs under a limit counted per slot (a capped tenant's, a workflow's
    /// `concurrency`) dropped here and claimed again, until they are read
    /// (for at most [`RECLAIM_HOLD_MS`]): their slot and since when. Their
    /// attempts are counted nowhere meanwhile, and the store's check does
    /// not see them (this master owns them there), so the runs of their
    /// slots under such limits start nothing (`dispatch_ready`).
    pub(crate) claiming: Map<String, (u32, i64)>,
    /// The time of the last step.
    pub(crate) last_now: i64,
    /// Waiting runs to forget at the end of the step (loaded again when
    /// woken).
    pub(crate) parking: Vec<Arc<str>>,
    /// Ready tasks waiting for data (outputs, a plugin) in this step.
    pub(crate) awaiting: Vec<ReadyTask>,
    /// Whether the plugin directory was refreshed in this step.
    pub(crate) plugins_refreshed: bool,
    /// Slots this master owns (and drives the runs of).
    pub(crate) owned: Set<u32>,
    /// Owned slots whose runs could not be read: asked for again at the
    /// next step.
    pub(crate) pending_slots: Vec<u32>,
    /// Runs of gained slots waiting upstream, to be judged again (tenant,
    /// run): woken a page a step (`[master] takeover_wakes_per_step`).
    pub(crate) rejudge: std::collections::VecDeque<(String, String)>,
    /// The fencing token while this master leads.
    pub(crate) leader: Option<i64>,
    /// The token leadership was asked for last (until the store says).
    pub(crate) leading: Option<i64>,
    pub(crate) placement: Placement,
    /// Tenants' limits; `None`: no tenant limits apply.
    pub(crate) limits: Option<Arc<std::collections::HashMap<String, TenantLimits>>>,
    pub(crate) counters: Counters,
    /// Which workflows (and tasks) other workflows wait for: only their
    /// state changes wake anyone. `None` until read.
    pub(crate) watched: Option<Watched>,
    /// Latest versions of workflows other runs need (upstream schedules,
    /// children to run); `None`: no such live workflow.
    pub(crate) definitions: Map<(String, String), Option<crate::engine::effects::Versioned>>,
    /// Upstream runs read in this step.
    pub(crate) upstream_runs: Map<UpstreamQuery, Vec<dagr_store::CycleRun>>,
    /// The upstream instances dependencies name, as computed before.
    pub(crate) expected_memo: crate::engine::outer::ExpectedMemo,
    /// Evaluations of waits that wait for data in this step.
    pub(crate) evaluating: Vec<Arc<str>>,
    /// Waits recorded in this step, to read again after its commit.
    pub(crate) unconfirmed: Vec<crate::engine::outer::Confirm>,
    /// Waits being read again.
    pub(crate) confirming: Vec<crate::engine::outer::Confirm>,
    /// Runs rerun or re-flushed with their downstream: (tenant, run) whose
    /// released runs get a re-flush command once they are read.
    pub(crate) reflushing: Vec<(String, String)>,
    /// The runs a run released, read in this step.
    pub(crate) released: Map<String, Vec<String>>,
    /// Task changes this step may still carry out (`[master]
    /// step_task_changes`); what goes past it waits in its run's backlog.
    pub(crate) budget: usize,
    /// Runs with a backlog, in the order they get their next turn.
    pub(crate) backlogged: VecDeque<Arc<str>>,
}

/// What workflows wait for.
#[derive(Debug, Default)]
pub(crate) struct Watched {
    pub runs: Set<(String, String)>,
    pub tasks: Set<(String, String, String)>,
}

/// Passes of one step at most: a need answered can raise another (claim a
/// run found loaded nowhere, then read its outputs), but not forever.
pub const MAX_PASSES: usize = 4;

/// Longest a workflow admits no run while one of its runs is claimed
/// again (the claim is normally read at the next step).
pub(crate) const RECLAIM_HOLD_MS: i64 = 5_000;

impl EngineState {
    /// An engine that owns nothing and leads nothing yet.
    pub fn new(config: &EngineConfig, now: i64) -> EngineState {
        EngineState {
            settings: Settings::of(config),
            runs: Map::default(),
            dropped_epochs: Map::default(),
            ready: ReadyQueue::default(),
            in_flight: Map::default(),
            last_attempt_check: now,
            last_orphan_sweep: now,
            running_by_workflow: Map::default(),
            parked: Map::default(),
            running_by_tenant: Map::default(),
            parked_by_tenant: Map::default(),
            active_by_workflow: Map::default(),
            active_by_backfill: Map::default(),
            waiting: Map::default(),
            timers: Timers::default(),
            schedules: Map::default(),
            command_cursor: 0,
            deferred_commands: Vec::new(),
            load_failures: Map::default(),
            retiring: Vec::new(),
            reclaim: Vec::new(),
            retake: Vec::new(),
            unmet: Vec::new(),
            reclaiming: Map::default(),
            claiming: Map::default(),
            last_now: 0,
            parking: Vec::new(),
            awaiting: Vec::new(),
            plugins_refreshed: false,
            owned: Set::default(),
            pending_slots: Vec::new(),
            rejudge: Default::default(),
            leader: None,
            leading: None,
            placement: Placement::new(config.strategy, config.resources == crate::Resources::Leader),
            limits: None,
            counters: Counters::default(),
            watched: None,
            definitions: Map::default(),
            upstream_runs: Map::default(),
            expected_memo: Default::default(),
            evaluating: Vec::new(),
            unconfirmed: Vec::new(),
            confirming: Vec::new(),
            reflushing: Vec::new(),
            released: Map::default(),
            budget: config.step_task_changes.max(1),
            backlogged: VecDeque::new(),
        }
    }

    /// Starts a step: what could not be done in the last one for want of
    /// data is asked for again.
    pub fn begin(&mut self, effects: &mut Effects) {
        for need in std::mem::take(&mut self.unmet) {
            effects.need(need);
        }
        self.plugins_refreshed = false;
        self.budget = self.settings.step_task_changes;
        let pending = std::mem::take(&mut self.pending_slots);
        if !pending.is_empty() {
            self.gain(effects, pending);
        }
        if let Some(token) = self.leading {
            effects.need(Need::Lead(token));
        }
        self.reclaim_deferred(effects);
        if !self.reclaim.is_empty() {
            effects.need(Need::Claim(std::mem::take(&mut self.reclaim)));
        }
        let mut retake = std::mem::take(&mut self.retake);
        retake.retain(|slot| self.owned.contains(slot));
        retake.sort_unstable();
        retake.dedup();
        self.gain(effects, retake);
        if self.watched.is_none() {
            effects.need(Need::Watched);
        }
        self.begin_confirmations(effects);
    }

    /// What the shell reads after pass `pass` (from 0) of a step: `None`
    /// when nothing is needed, or when the step has had its
    /// [`MAX_PASSES`] — then the needs wait for the next step, which asks
    /// for them first. Read now, they would not be absorbed: a run claimed
    /// for them would be held in the store by this master and loaded
    /// nowhere, and no sweep looks for those.
    pub fn needs_to_read(&mut self, effects: &mut Effects, pass: usize) -> Option<Vec<Need>> {
        let needs = effects.take_needs();
        if needs.is_empty() {
            return None;
        }
        if pass + 1 >= MAX_PASSES {
            tracing::debug!(?needs, "the step ran out of passes; reading at the next");
            self.unmet.extend(needs);
            return None;
        }
        Some(needs)
    }

    /// One pass of a step: absorbs what the shell read, applies the inputs,
    /// then does what is due — deferred work, timers, checks, dispatch. The
    /// first pass of a step carries its inputs; later passes (answering
    /// [`Effects::needs`]) carry only data.
    pub fn step(
        &mut self,
        effects: &mut Effects,
        inputs: Vec<Input>,
        data: Data,
        plugins: &dyn PluginDirectory,
        now: i64,
    ) {
        self.last_now = now;
        self.absorb_data(effects, data, now);
        self.drain_backlogs(effects, now);
        for input in inputs {
            self.apply_input(effects, input, now);
        }
        self.retry_deferred_commands(effects, now);
        self.confirm_waits(effects, now);
        self.continue_evaluations(effects, now);
        self.continue_reflushes(effects, now);
        self.fire_timers(effects, now);
        self.check_in_flight(effects, now);
        self.dispatch_ready(effects, plugins, now);
        if let Some(request) = self.placement.resource_request(&self.settings.node_id, now) {
            effects.resources = Some(request);
        }
        // Tasks that began to wait during dispatch record their waits now.
        self.continue_evaluations(effects, now);
    }

    fn absorb_data(&mut self, effects: &mut Effects, data: Data, now: i64) {
        if let Some(limits) = data.tenant_limits {
            self.limits = Some(limits);
        }
        if let Some(watched) = data.watched {
            let mut w = Watched::default();
            for (tenant, workflow, task) in watched {
                match task {
                    Some(task) => w.tasks.insert((tenant, workflow, task)),
                    None => w.runs.insert((tenant, workflow)),
                };
            }
            self.watched = Some(w);
        }
        if let Some(w) = self.watched.as_mut() {
            for (tenant, workflow, task) in data.watched_add {
                match task {
                    Some(task) => w.tasks.insert((tenant, workflow, task)),
                    None => w.runs.insert((tenant, workflow)),
                };
            }
        }
        for (tenant, name, workflow) in data.workflows {
            self.definitions.insert((tenant, name), workflow);
        }
        for (query, runs) in data.upstream_runs {
            self.upstream_runs.insert(query, runs);
        }
        self.released.extend(data.released);
        if data.plugins_refreshed {
            self.plugins_refreshed = true;
        }
        for (run, idx, output) in data.outputs {
            self.output_read(&run, idx, output);
        }
        if let Some((token, schedules)) = data.lead {
            self.lead_answered(effects, token, schedules, now);
        }
        for source in data.schedules {
            self.install_schedule(effects, source, now);
        }
        if !data.slots_failed.is_empty() {
            // Taking these over failed: not owned until they are read; asked
            // for again at the next step.
            for slot in &data.slots_failed {
                self.owned.remove(slot);
            }
            self.pending_slots.extend(data.slots_failed);
        }
        self.found_owners(effects, data.owners);
        if let Some(commands) = data.commands {
            self.commands_read_again(effects, commands, now);
        }
        // A run dropped earlier in this step has writes in it fenced by
        // the epoch it had: installed now, they would be fenced by the new
        // one and land. They are fenced off instead, and the run is taken
        // over at the next step.
        let mut loaded = data.loaded;
        // Claimed twice in one read: the last claim's epoch is the one held.
        loaded.sort_by(|a, b| (&a.row.id, b.row.epoch).cmp(&(&b.row.id, a.row.epoch)));
        loaded.dedup_by(|later, first| later.row.id == first.row.id);
        // A run of a slot this master does not own (any more) is not
        // driven here, whatever was read.
        loaded.retain(|l| {
            let mine = self.owned.contains(&(l.row.slot as u32));
            if !mine {
                tracing::warn!(run = %l.row.id, slot = l.row.slot, "read a run of a slot this master does not own; leaving it");
            }
            mine
        });
        let (loaded, again): (Vec<LoadedRun>, Vec<LoadedRun>) =
            loaded.into_iter().partition(|l| !self.dropped_epochs.contains_key(l.row.id.as_str()));
        // What was read of runs being claimed again ends their hold.
        let mut held: Vec<WorkflowKey> = Vec::new();
        for id in loaded.iter().map(|l| &l.row.id).chain(data.failed.iter().map(|(id, _)| id)) {
            held.extend(self.reclaiming.remove(id).map(|hold| hold.workflow));
            self.claiming.remove(id);
        }
        self.claiming.retain(|_, (_, since)| now - *since < RECLAIM_HOLD_MS);
        self.reclaiming.retain(|_, hold| {
            let keep = now - hold.since < RECLAIM_HOLD_MS;
            if !keep {
                held.push(hold.workflow.clone());
            }
            keep
        });
        for l in &again {
            if self.limited_per_slot(&l.workflow, &l.row.tenant) {
                self.claiming.insert(l.row.id.clone(), (l.row.slot as u32, now));
            }
            let key = (l.row.tenant.clone(), l.row.workflow.clone());
            let lane = l.backfill_parallel.and(l.row.backfill_id.clone());
            if let Some(hold) = Hold::of(key, l.workflow.spec.max_active_runs, lane, l.row.slot as u32, now) {
                self.reclaiming.insert(l.row.id.clone(), hold);
            }
        }
        self.reclaim.extend(again.into_iter().map(|l| l.row.id));
        let ids: Vec<String> = loaded.iter().map(|l| l.row.id.clone()).collect();
        for run in loaded {
            self.install_run(effects, run, now);
        }
        let loaded = ids;
        self.admit_loaded(effects, &loaded, now);
        for (run, error) in data.failed {
            self.load_failed(effects, &run, error);
        }
        held.sort();
        held.dedup();
        for key in held {
            self.try_admit_waiting(effects, &key, now);
        }
        if !data.gained.is_empty() {
            tracing::info!(
                slots = data.gained.len(),
                runs = loaded.len(),
                waiting = data.waiting.len(),
                "took over slots"
            );
            // The runs of these slots waiting upstream are judged again:
            // the master that had them may have recorded their waits after
            // an upstream instance's end looked for them, and died before
            // it read the instance again (`confirm_waits`). In a cluster
            // only: a single node's commits never cross.
            if self.settings.fence_writes {
                self.rejudge.extend(data.waiting);
            }
            // Commands of these slots may be pending from before.
            self.command_cursor = 0;
            effects.read_commands = true;
        }
    }

    fn apply_input(&mut self, effects: &mut Effects, input: Input, now: i64) {
        match input {
            Input::Result { result, ack } => {
                self.counters.results += 1;
                let run = result.key.run_id.clone();
                let verdict = self.apply_result(effects, result, now, true);
                if let Some(ack) = ack {
                    effects.acks.push((ack, run, verdict));
                }
            }
            Input::Commands(commands) => {
                for command in commands {
                    self.command_cursor = self.command_cursor.max(command.id);
                    self.apply_command(effects, command, now);
                }
            }
            Input::Ownership(slots) => self.set_ownership(effects, slots),
            Input::Leadership(token) => self.set_leadership(effects, token),
            Input::Workers(workers) => {
                let gone = self.placement.set_workers(workers);
                if !gone.is_empty() {
                    self.workers_gone(effects, &gone, now);
                }
            }
            Input::Dispatched { worker, sent, answer } => self.dispatched(effects, &worker, sent, answer, now),
            Input::Probed { key, worker, epoch, adoption } => self.probed(effects, key, &worker, epoch, adoption, now),
            Input::Granted(answer) => {
                self.placement.granted(answer, now);
            }
            Input::WorkflowChanged { tenant, name } => {
                // Its definition and what it waits for may have changed
                // (what it no longer waits for stays watched: a wake-up
                // that finds nobody waiting costs one index lookup).
                self.definitions.remove(&(tenant.clone(), name.clone()));
                effects.need(Need::WatchedBy { tenant: tenant.clone(), workflow: name.clone() });
                // The runs waiting for its instances are judged again: a
                // new schedule may expect other instances than the one
                // each waits to be woken by (one writer: the leader).
                if self.leader.is_some() {
                    effects.batch.wake_all.push((tenant.clone(), name.clone()));
                }
                self.workflow_changed(effects, tenant, name)
            }
        }
    }

    /// The slots this master owns now: runs of lost slots are forgotten
    /// (nothing is written: the new owner takes them over), those of gained
    /// slots are asked for.
    fn set_ownership(&mut self, effects: &mut Effects, slots: std::collections::HashSet<u32>) {
        self.pending_slots.clear();
        let lost: Set<u32> = self.owned.iter().filter(|s| !slots.contains(s)).copied().collect();
        let gained: Vec<u32> = slots.iter().filter(|s| !self.owned.contains(s)).copied().collect();
        self.owned.retain(|s| slots.contains(s));
        if !lost.is_empty() {
            // Commands waiting for runs of lost slots are the new owner's
            // (they stay pending in the store): asking for their runs again
            // at the next step would claim them from it.
            self.deferred_commands.retain(|c| !lost.contains(&c.slot));
            // Slots gained and lost again within one step: their runs must
            // not be claimed when this step's needs are read (the claim
            // would take them from their owner, and a copy of them would
            // stay here, going stale).
            for need in &mut effects.needs {
                match need {
                    Need::Slots(asked) | Need::Owners(asked) => asked.retain(|s| !lost.contains(s)),
                    Need::Claim(runs) => runs.retain(|r| !lost.contains(&dagr_core::slots::slot_of(r))),
                    _ => {}
                }
            }
            effects.needs.retain(|need| match need {
                Need::Slots(asked) | Need::Owners(asked) => !asked.is_empty(),
                Need::Claim(runs) => !runs.is_empty(),
                _ => true,
            });
            let ids = self.runs_in(&lost);
            // Their workflows' lines are judged again below: a run left in
            // line here (one of another slot, admitted by no limit of the
            // runs that left) may start now.
            let mut freed: Vec<WorkflowKey> =
                ids.iter().filter_map(|id| self.runs.get(id)).map(|r| r.workflow_key()).collect();
            for id in &ids {
                self.drop_run(id);
            }
            // Runs of lost slots are not claimed again here, nor counted,
            // and hold no line here any more.
            self.claiming.retain(|_, (slot, _)| !lost.contains(slot));
            self.reclaiming.retain(|_, hold| {
                let keep = !lost.contains(&hold.slot);
                if !keep {
                    freed.push(hold.workflow.clone());
                }
                keep
            });
            freed.sort();
            freed.dedup();
            let now = self.last_now;
            for key in freed {
                self.try_admit_waiting(effects, &key, now);
            }
            self.counters.runs_handed_over += ids.len() as u64;
            if !ids.is_empty() {
                tracing::info!(slots = lost.len(), runs = ids.len(), "handed over slots");
            }
        }
        self.gain(effects, gained);
    }

    /// Takes `slots` over: their runs are asked for.
    pub(crate) fn gain(&mut self, effects: &mut Effects, mut slots: Vec<u32>) {
        if slots.is_empty() {
            return;
        }
        slots.sort_unstable();
        self.owned.extend(slots.iter().copied());
        effects.need(Need::Slots(slots));
    }

    /// The last command id this engine has seen: the shell reads pending
    /// commands after it.
    pub fn command_cursor(&self) -> i64 {
        self.command_cursor
    }

    /// Reads pending commands from the first again at the next read. The
    /// cursor only saves reading what was applied: on PostgreSQL a command
    /// can commit after one with a higher id was read (the API and other
    /// masters write concurrently), and would stay behind the cursor for
    /// good. The shell restarts the scan at every poll; what is applied is
    /// marked done and is not read again.
    pub fn restart_command_scan(&mut self) {
        self.command_cursor = 0;
    }

    /// The runs held here of these slots.
    fn runs_in(&self, slots: &Set<u32>) -> Vec<Arc<str>> {
        self.runs.iter().filter(|(_, r)| slots.contains(&(r.row.slot as u32))).map(|(id, _)| id.clone()).collect()
    }

    /// Whether a run is loaded here.
    pub fn has_run(&self, id: &str) -> bool {
        self.runs.contains_key(id)
    }

    /// Whether this master owns `slot`.
    pub fn owns(&self, slot: u32) -> bool {
        self.owned.contains(&slot)
    }

    /// When the state next has something to do by itself (a timer, a
    /// worker's rest ending, a check of attempts in flight, a backlog of
    /// task changes: now).
    pub fn next_wake(&self, now: i64) -> Option<i64> {
        let check = self
            .settings
            .attempt_check
            .filter(|_| !self.in_flight.is_empty() || !self.owned.is_empty())
            .map(|every| self.last_attempt_check + (every.as_millis() as i64).min(1000));
        let rest = (!self.ready.is_empty()).then(|| self.placement.next_rest_end(now)).flatten();
        // A backlog goes on at once.
        let backlog = (self.has_backlog() || !self.rejudge.is_empty()).then_some(now);
        [self.timers.next(), check, rest, self.placement.next_exchange(), backlog].into_iter().flatten().min()
    }

    /// Finishes a step before its commit: every write for a run is fenced
    /// by the epoch this master holds (a run dropped during the step keeps
    /// the epoch it had), schedule writes by the leader's token; runs that
    /// finished are forgotten.
    pub fn seal(&mut self, effects: &mut Effects, now: i64) {
        self.wake_to_rejudge(effects, now);
        let batch = &mut effects.batch;
        batch.at = now;
        if !batch.is_empty() && self.settings.fence_writes {
            let mut touched: Set<&str> = Set::default();
            touched.extend(batch.runs.iter().map(|r| r.id.as_str()));
            touched.extend(batch.tasks.iter().map(|t| t.run_id.as_str()));
            touched.extend(batch.attempts.iter().map(|a| a.run_id.as_str()));
            touched.extend(batch.events.iter().filter_map(|e| e.run_id.as_deref()));
            // A command's answer too: a master that lost the run and does
            // not know it yet (frozen, its view of the slots stale) must
            // not consume a command meant for the run's owner, even with a
            // refusal that writes nothing else.
            touched.extend(batch.commands_done.iter().map(|c| c.run_id.as_str()));
            // And what a run waits for upstream: a master that lost it must
            // not replace the waits its new owner recorded.
            touched.extend(batch.clear_waits.iter().map(String::as_str));
            touched.extend(batch.run_waits.iter().map(|w| w.run_id.as_str()));
            touched.extend(batch.links.iter().map(|(_, _, released)| released.as_str()));
            // And the commands a run's change wrote for other runs.
            touched.extend(batch.commands.iter().filter_map(|c| c.by.as_deref()));
            let mut fences: Vec<(String, i64)> = touched
                .into_iter()
                .filter_map(|id| {
                    let epoch = self.runs.get(id).map(|r| r.row.epoch).or_else(|| self.dropped_epochs.get(id).copied());
                    epoch.map(|epoch| (id.to_owned(), epoch))
                })
                .collect();
            fences.sort();
            batch.fences = fences;
        }
        if !batch.new_runs.is_empty() || !batch.schedule_cursors.is_empty() {
            batch.singleton = self.leader.map(|t| (SCHEDULER.to_owned(), t));
        }
        self.dropped_epochs.clear();
        // Work still waiting for data goes back in line for the next step.
        for item in std::mem::take(&mut self.awaiting) {
            self.ready.restore(item);
        }
        self.load_failures.clear();
        self.upstream_runs.clear();
        self.released.clear();
        // Evaluations still waiting for data go again at the next step.
        // The store turns them into commands for whoever waits, this
        // master's runs among them: read them at once, not at the next poll.
        // Waits to read again: at once, in the next step.
        if !self.unconfirmed.is_empty() {
            effects.read_commands = true;
        }
        if !effects.batch.wakes.is_empty() || !effects.batch.wake_all.is_empty() {
            effects.batch.wake_command = Some(crate::engine::effects::encoded(&dagr_protocol::commands::Command::Wake));
            effects.read_commands = true;
        }
        let finished: Vec<Arc<str>> = effects.finished.iter().map(|(id, _)| Arc::from(id.as_str())).collect();
        for id in finished.into_iter().chain(std::mem::take(&mut self.retiring)) {
            if self.runs.get(&id).is_some_and(|r| r.machine.state().is_terminal()) {
                self.retire_run(&id);
            }
        }
        for id in std::mem::take(&mut self.parking) {
            if self.runs.get(&id).is_some_and(|r| r.machine.state() == dagr_core::RunState::Waiting) {
                self.retire_run(&id);
            }
        }
        self.counters.steps += 1;
    }

    /// What the commit said: runs another master fenced are dropped here,
    /// and a newer leader ends this one's schedules.
    pub fn committed(&mut self, committed: &Committed) {
        for run in &committed.fenced {
            self.counters.fenced_writes += 1;
            tracing::warn!(run = %run, "another master owns this run now; dropping it");
            self.drop_run(run);
        }
        for run in &committed.over_limit {
            // Another master started a run of its workflow (or backfill)
            // that this one has not read, or holds an active run of its
            // tenant in its slot (under a limit counted per slot): this
            // one froze, or its view of the members lags, while the runs'
            // slot moved, and it has not read the slot's runs since. The
            // run is still queued. Every run of the slot is taken over at
            // the next step, this one with them, so that they are counted
            // before it is admitted again; the workflow's admissions wait
            // for that.
            self.counters.over_limit += 1;
            tracing::warn!(run = %run, "the store has its limit reached, or its slot held elsewhere; reading its slot again");
            let slot = self.runs.get(run.as_str()).map(|r| r.row.slot as u32);
            self.drop_run(run);
            // Nothing of the step it was dropped from is left to fence.
            self.dropped_epochs.remove(run.as_str());
            self.retake.extend(slot);
        }
        // The slot's runs held here go too, to be read afresh with the
        // rest: a copy of a run another master claimed since is stale
        // (this one has not written for it, so no fence told it) and counts
        // that run's attempts as they were, fewer than run (the simulation,
        // seed 118917 with a workflow's `concurrency`: both masters
        // dispatched past it). Dropped between steps, they are installed
        // in the step that claims them.
        if !committed.over_limit.is_empty() {
            let slots: Set<u32> = self.retake.iter().copied().collect();
            for id in self.runs_in(&slots) {
                self.drop_run(&id);
                self.dropped_epochs.remove(&*id);
            }
        }
        if committed.singleton_fenced {
            self.counters.fenced_writes += 1;
            tracing::warn!("a newer leader holds the scheduler; stopping schedules here");
            self.schedules.clear();
            self.leader = None;
        }
    }

    /// Counters for metrics.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Runs this master drives now (its load, for rebalancing).
    pub fn active_runs(&self) -> usize {
        self.runs.len()
    }

    /// Attempts in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Tasks ready to start and waiting for a worker slot.
    pub fn ready_tasks(&self) -> usize {
        self.ready.len()
    }

    /// The limits of `tenant`, if tenants have limits.
    pub(crate) fn tenant_limits(&self, tenant: &str) -> Option<TenantLimits> {
        self.limits.as_ref().map(|all| all.get(tenant).cloned().unwrap_or_default())
    }

    /// Whether `tenant` limits the tasks it runs at once: its new runs are
    /// then made in one slot, so that one master counts them all.
    pub(crate) fn tenant_capped(&self, tenant: &str) -> bool {
        self.limits.as_ref().and_then(|all| all.get(tenant)).is_some_and(|l| l.max_concurrent.is_some())
    }
}
