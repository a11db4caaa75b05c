//! The runs the engine drives: loading one from what the shell read,
//! forgetting one, and turning its machine's actions into writes, events,
//! ready tasks and timers.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use chrono_tz::Tz;
use dagr_core::run::{Action, RunMachine, RunState, TaskProgress, TaskState};
use dagr_protocol::commands::Command;
use dagr_protocol::wire::AttemptKey;
use dagr_store::{NewEvent, OutputWrite, RunRow, RunWrite, TaskRow};
use serde_json::{Value, json};

use crate::engine::admission::Hold;
use crate::engine::effects::{Effects, LoadError, LoadedRun, Probe, Transition};
use crate::engine::state::EngineState;
use crate::engine::timers::Timer;
use crate::hash::{Map, Set};
use crate::ready::ReadyTask;

/// Outputs up to this size stay in memory for dependents; larger ones are
/// read back from the store when needed.
pub(crate) const CACHED_OUTPUT: usize = 64 * 1024;

/// A workflow: (tenant, name).
pub(crate) type WorkflowKey = (String, String);

/// Timestamps and notes the machine does not keep, for the task rows.
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskExtra {
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// A retry's time, or a sensor's next check.
    pub retry_at: Option<i64>,
    pub error: Option<String>,
    /// The child run of a sub-workflow task.
    pub child: Option<String>,
    /// The task waits (state `waiting`) for upstream instances.
    pub waiting_upstream: bool,
    /// Its upstream instances were found done (not judged again).
    pub upstream_ok: bool,
    /// Its change to `queued` waits in the run's backlog (not written yet).
    pub deferred: bool,
}

/// A run the engine drives.
pub(crate) struct ActiveRun {
    pub tenant: Arc<str>,
    pub row: RunRow,
    pub machine: RunMachine,
    pub params: BTreeMap<String, Value>,
    pub timezone: Tz,
    pub extra: Vec<TaskExtra>,
    /// Outputs of finished tasks kept for their dependents (small ones, and
    /// big ones read back for a dispatch).
    pub outputs: Map<usize, Arc<str>>,
    /// Tasks whose output the store does not have (read and found absent).
    pub absent: Set<usize>,
    /// A backfill's parallelism, if the run belongs to one.
    pub backfill_parallel: Option<usize>,
    /// Its machine's actions past a step's budget, in order, to carry out
    /// in the next steps (see [`EngineState::absorb`]).
    pub backlog: VecDeque<Action>,
    /// A finished run rerun: `row.started_at` is its new life's start
    /// (none until it is admitted again), not its first.
    pub reopened: bool,
}

impl ActiveRun {
    /// The span of what the engine does for this run: commands, state
    /// changes, dispatches. Debug level, so a busy engine at the default
    /// level pays for it only by a check (`RUST_LOG=dagr_master=debug`
    /// follows one run: `grep 'run{id=…}'`).
    pub fn span(&self) -> tracing::Span {
        tracing::debug_span!("run", id = %self.row.id, workflow = %self.row.workflow, tenant = %self.tenant)
    }

    pub fn workflow_key(&self) -> WorkflowKey {
        (self.row.tenant.clone(), self.row.workflow.clone())
    }

    /// The task's row as it is now.
    pub fn task_row(&self, task: usize) -> TaskRow {
        let p = self.machine.task(task);
        let e = &self.extra[task];
        TaskRow {
            run_id: self.row.id.clone(),
            idx: task as i64,
            name: self.machine.workflow().tasks[task].name.clone(),
            state: p.state,
            attempts: p.attempts as i64,
            failures: p.failures as i64,
            lost: p.lost as i64,
            forced: p.forced,
            retry_at: e.retry_at,
            error: e.error.clone(),
            started_at: e.started_at,
            finished_at: e.finished_at,
            child_run: e.child.clone(),
        }
    }

    pub(crate) fn event(&self, kind: &str, task: Option<usize>, data: Value, now: i64) -> NewEvent {
        self.event_text(kind, task, data.to_string(), now)
    }

    /// An event whose data is already JSON text.
    pub(crate) fn event_text(&self, kind: &str, task: Option<usize>, data: String, now: i64) -> NewEvent {
        NewEvent {
            tenant: self.row.tenant.clone(),
            at: now,
            kind: kind.into(),
            workflow: Some(self.row.workflow.clone()),
            run_id: Some(self.row.id.clone()),
            task: task.map(|t| self.machine.workflow().tasks[t].name.clone()),
            data,
        }
    }
}

/// A `task.state` event's data, `{"attempt":N,"from":"…","to":"…"}`, as
/// `serde_json` writes it (keys in order), without building a `Value`:
/// there are three of these per task, and the `Value`'s map, its strings
/// and its formatting were a tenth of the engine's step in a fan-out.
/// States' names are plain identifiers (nothing to escape).
pub(crate) fn task_state_data(from: TaskState, to: TaskState, attempt: u32) -> String {
    format!(r#"{{"attempt":{attempt},"from":"{}","to":"{}"}}"#, from.as_str(), to.as_str())
}

/// An attempt handed to a worker (or adopted) and not yet reported back.
#[derive(Debug, Clone)]
pub(crate) struct InFlight {
    pub workflow: WorkflowKey,
    pub tenant: Arc<str>,
    pub worker: String,
    /// When its worker last confirmed it (or when it was dispatched).
    pub confirmed_at: i64,
    /// Its worker has not said yet whether it still runs it (taken over).
    pub adopting: bool,
    /// The worker's lease it is known to run under: the one its dispatch
    /// was addressed to (a worker refuses a dispatch for another), also for
    /// one taken over (its row keeps it). `None` where the dispatching
    /// master did not know the worker's lease, or for a row written before
    /// rows kept it.
    pub lease: Option<i64>,
}

/// The wake-up a state change of (a task of) a run owes, if anyone waits
/// for that workflow (or task).
fn self_wake(
    watched: &Option<crate::engine::state::Watched>,
    tenant: &str,
    workflow: &str,
    task: Option<&str>,
    logical_time: i64,
    failed: bool,
) -> Option<dagr_store::Wake> {
    let watched = watched.as_ref()?;
    let wanted = match task {
        None => watched.runs.contains(&(tenant.to_owned(), workflow.to_owned())),
        Some(task) => watched.tasks.contains(&(tenant.to_owned(), workflow.to_owned(), task.to_owned())),
    };
    wanted.then(|| dagr_store::Wake { tenant: tenant.into(), workflow: workflow.into(), logical_time, failed })
}

/// Builds the machine of a run from its rows.
fn restore(run: &LoadedRun, max_lost: u32) -> Result<(RunMachine, Vec<TaskExtra>, Vec<Action>), LoadError> {
    let row = &run.row;
    let workflow = run.workflow.clone();
    let (progress, extra) = match &run.tasks {
        None => (
            vec![TaskProgress::new(TaskState::Pending, 0, 0, false); workflow.tasks.len()],
            vec![TaskExtra::default(); workflow.tasks.len()],
        ),
        Some(tasks) => {
            if tasks.len() != workflow.tasks.len() {
                return Err(LoadError::Invalid(format!(
                    "run {} has {} task rows for {} tasks",
                    row.id,
                    tasks.len(),
                    workflow.tasks.len()
                )));
            }
            tasks
                .iter()
                .map(|t| {
                    let progress = TaskProgress::new(t.state, t.attempts as u32, t.failures as u32, t.forced)
                        .with_lost(t.lost as u32);
                    let sensing = workflow.tasks[t.idx as usize].sensor.is_some() && t.retry_at.is_some();
                    let extra = TaskExtra {
                        started_at: t.started_at,
                        finished_at: t.finished_at,
                        retry_at: t.retry_at,
                        error: t.error.clone(),
                        child: t.child_run.clone(),
                        waiting_upstream: t.state == TaskState::Waiting && t.child_run.is_none() && !sensing,
                        upstream_ok: false,
                        deferred: false,
                    };
                    (progress, extra)
                })
                .unzip()
        }
    };
    let (machine, actions) = RunMachine::restore(workflow, row.state, progress);
    // Released from waiting upstream in this life if a task of it started
    // since (a re-flush clears its tasks' starts; the run's row keeps its
    // last life's start): one stopped before any did waits again when it
    // is rerun (judged at once, and released if its upstream is done).
    let released = row.state != RunState::Waiting && run.tasks.iter().flatten().any(|t| t.started_at.is_some());
    Ok((machine.with_max_lost(max_lost).with_released(released), extra, actions))
}

impl EngineState {
    /// Starts driving a run the shell claimed and loaded: its machine is
    /// rebuilt, its retries re-armed, and its running attempts asked about
    /// (adopted if their worker still runs them, lost if not) instead of
    /// being restarted blindly.
    pub(crate) fn install_run(&mut self, effects: &mut Effects, loaded: LoadedRun, now: i64) {
        if self.runs.contains_key(loaded.row.id.as_str()) {
            return;
        }
        let (machine, extra, actions) = match restore(&loaded, self.settings.max_lost_attempts) {
            Ok(restored) => restored,
            Err(e) => {
                tracing::error!(run = %loaded.row.id, error = %e, "cannot take over run");
                let id = loaded.row.id.clone();
                self.load_failed(effects, &id, e);
                return;
            }
        };
        self.counters.runs_claimed += 1;
        let LoadedRun { mut row, workflow, backfill_parallel, running, .. } = loaded;
        // Queued or waiting with a start: a rerun not admitted yet. The
        // store has its last life's start; this life has none yet.
        let reopened = matches!(row.state, RunState::Queued | RunState::Waiting) && row.started_at.is_some();
        if reopened {
            row.started_at = None;
        }
        let id: Arc<str> = Arc::from(row.id.as_str());
        for (task, e) in extra.iter().enumerate() {
            match machine.task(task).state {
                TaskState::RetryWait => {
                    self.timers.arm(e.retry_at.unwrap_or(now), Timer::Retry { run: row.id.clone(), task });
                }
                // A sensor between two checks.
                TaskState::Waiting if e.child.is_none() && !e.waiting_upstream => {
                    self.timers.arm(e.retry_at.unwrap_or(now), Timer::Wake { run: row.id.clone(), task });
                }
                _ => {}
            }
        }
        if let (Some(timeout), Some(started)) = (workflow.timeout, row.started_at)
            && matches!(row.state, RunState::Running | RunState::Paused)
        {
            self.timers.arm(started + timeout.as_millis() as i64, Timer::RunTimeout { run: row.id.clone() });
        }
        let run = ActiveRun {
            tenant: Arc::from(row.tenant.as_str()),
            params: serde_json::from_str(&row.params).unwrap_or_default(),
            timezone: workflow.schedule.as_ref().map(|s| s.timezone).unwrap_or(chrono_tz::UTC),
            row,
            machine,
            extra,
            outputs: Map::default(),
            absent: Set::default(),
            backfill_parallel,
            backlog: VecDeque::new(),
            reopened,
        };
        if matches!(run.machine.state(), RunState::Running | RunState::Paused) {
            self.count_active(&run, 1);
        }
        let epoch = run.row.epoch;
        let (workflow_key, tenant) = (run.workflow_key(), run.tenant.clone());
        let tasks_wait = run.extra.iter().any(|e| e.waiting_upstream);
        self.runs.insert(id.clone(), run);
        self.absorb(effects, &id, actions, now);
        // Its tasks waiting upstream are judged again, as a run waiting in
        // a slot taken over is (see `absorb_data`).
        if tasks_wait && self.settings.fence_writes {
            self.keep_evaluating(&id);
        }
        for attempt in running {
            let key = AttemptKey {
                run_id: attempt.run_id.clone(),
                task: attempt.task_idx as u32,
                number: attempt.number as u32,
            };
            if attempt.worker.is_empty() {
                // It never reached a worker: lost.
                self.counters.attempts_lost += 1;
                let result = crate::engine::results::lost_result(&attempt, epoch, now, "it never reached a worker");
                effects.batch.attempts.push(crate::engine::results::finished_attempt(&result, &attempt));
                self.apply_result(effects, result, now, false);
                continue;
            }
            // Tracked as running until its worker answers, also when this
            // master does not know the worker: its view of the members
            // may be stale (it woke from a freeze with the run's slot and
            // has not heard that the worker joined again), and declaring
            // the attempt lost would run it twice at once. The transport
            // asks the membership as it is now: a worker that is not a
            // member is answered `Gone`, and the attempt is lost then.
            self.count_running(&workflow_key, &tenant);
            self.placement.adopted(&attempt.worker);
            self.in_flight.insert(
                key.clone(),
                InFlight {
                    workflow: workflow_key.clone(),
                    tenant: tenant.clone(),
                    worker: attempt.worker.clone(),
                    confirmed_at: now,
                    adopting: true,
                    lease: attempt.lease,
                },
            );
            effects.probes.push(Probe { key, worker: attempt.worker, epoch });
        }
    }

    /// Queued runs just loaded wait for admission in creation order.
    pub(crate) fn admit_loaded(&mut self, effects: &mut Effects, loaded: &[String], now: i64) {
        let mut queued: Vec<(i64, Arc<str>)> = loaded
            .iter()
            .filter_map(|id| self.runs.get_key_value(id.as_str()))
            .filter(|(_, r)| r.machine.state() == RunState::Queued)
            .map(|(id, r)| (r.row.created_at, id.clone()))
            .collect();
        queued.sort();
        for (_, id) in queued {
            self.admit_or_wait(effects, &id, now);
        }
    }

    /// A stored output the shell read for a dispatch (or found absent).
    pub(crate) fn output_read(&mut self, run: &str, idx: i64, output: Option<String>) {
        if let Some(active) = self.runs.get_mut(run) {
            match output {
                Some(output) => {
                    active.outputs.insert(idx as usize, Arc::from(output.as_str()));
                }
                None => {
                    active.absent.insert(idx as usize);
                }
            }
        }
    }

    pub(crate) fn count_active(&mut self, run: &ActiveRun, delta: isize) {
        let add = |n: &mut usize| *n = n.saturating_add_signed(delta);
        add(self.active_by_workflow.entry(run.workflow_key()).or_default());
        if let Some(bf) = &run.row.backfill_id {
            add(self.active_by_backfill.entry(bf.clone()).or_default());
        }
    }

    /// Forgets a finished run. Its attempts still in flight (cancelled by a
    /// kill) stay tracked, so that their ends are recorded when they report.
    pub(crate) fn retire_run(&mut self, run_id: &str) {
        let Some(run) = self.runs.remove(run_id) else { return };
        if matches!(run.machine.state(), RunState::Running | RunState::Paused) {
            self.count_active(&run, -1);
        }
        self.remove_waiting(&run.workflow_key(), run_id);
    }

    /// Forgets a run this master may no longer drive (fenced, or handed
    /// over): its in-flight attempts are the new owner's to track.
    pub(crate) fn drop_run(&mut self, run_id: &str) {
        let Some(run) = self.runs.remove(run_id) else { return };
        // Writes for it may wait in the step being built: they are still
        // fenced with the epoch this master held.
        self.dropped_epochs.insert(run_id.to_owned(), run.row.epoch);
        if matches!(run.machine.state(), RunState::Running | RunState::Paused) {
            self.count_active(&run, -1);
        }
        // It may be active (whatever this master made of it: its last
        // writes may not land), driven elsewhere or here again once read,
        // and not counted meanwhile against its workflow's limits.
        if let Some(hold) = Hold::of_run(&run, self.last_now) {
            self.reclaiming.insert(run_id.to_owned(), hold);
        }
        self.remove_waiting(&run.workflow_key(), run_id);
        let flights: Vec<AttemptKey> = self.in_flight.keys().filter(|k| k.run_id == run_id).cloned().collect();
        for k in flights {
            if let Some(flight) = self.in_flight.remove(&k) {
                self.release(&flight);
            }
        }
    }

    pub(crate) fn count_running(&mut self, workflow: &WorkflowKey, tenant: &Arc<str>) {
        *self.running_by_workflow.entry(workflow.clone()).or_default() += 1;
        *self.running_by_tenant.entry(tenant.clone()).or_default() += 1;
    }

    /// A worker slot, a workflow and a tenant concurrency slot are free
    /// again (what waits behind the caps goes back in line at the next
    /// dispatch: [`EngineState::dispatch_ready`]).
    pub(crate) fn release(&mut self, flight: &InFlight) {
        self.placement.released(&flight.worker);
        if let Some(n) = self.running_by_workflow.get_mut(&flight.workflow) {
            *n = n.saturating_sub(1);
        }
        if let Some(n) = self.running_by_tenant.get_mut(&flight.tenant) {
            *n = n.saturating_sub(1);
        }
    }

    /// Carries out a run machine's actions: rows and events to write, tasks
    /// to queue for dispatch, attempts to cancel, retries to arm; a run that
    /// stops being active lets its workflow's waiting runs in.
    pub(crate) fn absorb_now(&mut self, effects: &mut Effects, run_id: &Arc<str>, actions: Vec<Action>, now: i64) {
        let mut freed: Vec<WorkflowKey> = Vec::new();
        let mut stopped: Vec<InFlight> = Vec::new();
        let mut wakes: Vec<dagr_store::Wake> = Vec::new();
        let mut timeouts: Vec<(i64, String)> = Vec::new();
        let mut pauses: Vec<(Arc<str>, Command)> = Vec::new();
        let span = self.runs.get(run_id).map(ActiveRun::span).unwrap_or_else(tracing::Span::none);
        let _entered = span.enter();
        for action in actions {
            let Some(run) = self.runs.get_mut(run_id) else {
                return;
            };
            match action {
                Action::TaskChanged { task, from, to } => {
                    let extra = &mut run.extra[task];
                    extra.deferred = false;
                    match to {
                        TaskState::Pending => {
                            *extra = TaskExtra::default();
                            if from == TaskState::Succeeded {
                                run.outputs.remove(&task);
                                run.absent.remove(&task);
                                effects
                                    .batch
                                    .outputs
                                    .push(OutputWrite::Clear { run_id: run.row.id.clone(), idx: task as i64 });
                            }
                        }
                        TaskState::Running => {
                            extra.started_at = Some(now);
                            extra.finished_at = None;
                            extra.retry_at = None;
                        }
                        TaskState::Queued => extra.retry_at = None,
                        s if s.is_terminal() => {
                            extra.finished_at = Some(now);
                            extra.retry_at = None;
                            if s == TaskState::Succeeded {
                                extra.error = None;
                            }
                        }
                        _ => {}
                    }
                    if to != TaskState::Waiting {
                        extra.waiting_upstream = false;
                    }
                    if to == TaskState::Pending {
                        extra.upstream_ok = false;
                    }
                    effects.batch.tasks.push(run.task_row(task));
                    let attempt = run.machine.task(task).attempts;
                    let data = task_state_data(from, to, attempt);
                    effects.batch.events.push(run.event_text("task.state", Some(task), data, now));
                    effects.transitions.push(Transition { tenant: run.tenant.clone(), task: true, to: to.as_str() });
                    // A child run whose task was killed is killed too.
                    if from == TaskState::Waiting
                        && to == TaskState::Killed
                        && let Some(child) = run.extra[task].child.clone()
                    {
                        effects.command_for(&run.row.tenant, &child, &Command::Kill, Some(&run.row.id), now);
                    }
                    if from.is_terminal() || to.is_terminal() {
                        let name = &run.machine.workflow().tasks[task].name;
                        let (tenant, workflow, logical) = (&run.row.tenant, &run.row.workflow, run.row.logical_time);
                        let failed = to.is_terminal() && to != TaskState::Succeeded;
                        wakes.extend(self_wake(&self.watched, tenant, workflow, Some(name), logical, failed));
                    }
                }
                Action::RunChanged { from, to } => {
                    run.row.state = to;
                    // A finished run reopened (a rerun) starts a new life:
                    // its start, and the timeout counted from it, come when
                    // it is admitted again (the store keeps the last start
                    // until then).
                    if from.is_terminal() && !to.is_terminal() {
                        run.row.started_at = None;
                        run.reopened = true;
                    }
                    let starts = to == RunState::Running && run.row.started_at.is_none();
                    if starts {
                        run.row.started_at = Some(now);
                        if run.row.kind == dagr_store::RunKind::Schedule && !run.reopened {
                            effects.schedule_delays.push(now - run.row.logical_time);
                        }
                    }
                    run.row.finished_at = to.is_terminal().then_some(now);
                    run.row.updated_at = now;
                    effects.batch.runs.push(RunWrite {
                        id: run.row.id.clone(),
                        state: to,
                        started_at: run.row.started_at,
                        finished_at: run.row.finished_at,
                        updated_at: now,
                    });
                    let data = json!({"from": from.as_str(), "to": to.as_str()});
                    effects.batch.events.push(run.event("run.state", None, data, now));
                    effects.transitions.push(Transition { tenant: run.tenant.clone(), task: false, to: to.as_str() });
                    if to.is_terminal() {
                        tracing::info!(run = %run.row.id, state = %to, "run finished");
                        effects.finished.push((run.row.id.clone(), to));
                        self.counters.runs_finished += 1;
                        run.outputs.clear();
                        effects.batch.clear_waits.push(run.row.id.clone());
                        // A child run tells its parent.
                        if let (Some(parent), Some(task)) = (&run.row.parent_run, run.row.parent_task) {
                            let ended = Command::ChildEnded {
                                task,
                                child: run.row.id.clone(),
                                succeeded: to == RunState::Succeeded,
                            };
                            effects.command_for(&run.row.tenant, parent, &ended, Some(&run.row.id), now);
                        }
                    }
                    if from.is_terminal() || to.is_terminal() {
                        let (tenant, workflow, logical) = (&run.row.tenant, &run.row.workflow, run.row.logical_time);
                        let failed = to.is_terminal() && to != RunState::Succeeded;
                        wakes.extend(self_wake(&self.watched, tenant, workflow, None, logical, failed));
                    }
                    if from == RunState::Queued
                        && starts
                        && let Some(timeout) = run.machine.workflow().timeout
                    {
                        let at = run.row.started_at.unwrap_or(now) + timeout.as_millis() as i64;
                        timeouts.push((at, run.row.id.clone()));
                    }
                    if matches!(
                        (from, to),
                        (RunState::Running, RunState::Paused) | (RunState::Paused, RunState::Running)
                    ) {
                        pauses.push((
                            run_id.clone(),
                            if to == RunState::Paused { Command::Pause } else { Command::Resume },
                        ));
                    }
                    let active = |s: RunState| matches!(s, RunState::Running | RunState::Paused);
                    let (key, backfill) = (run.workflow_key(), run.row.backfill_id.clone());
                    if !active(from) && active(to) {
                        *self.active_by_workflow.entry(key).or_default() += 1;
                        if let Some(bf) = backfill {
                            *self.active_by_backfill.entry(bf).or_default() += 1;
                        }
                    } else if active(from) && !active(to) {
                        if let Some(n) = self.active_by_workflow.get_mut(&key) {
                            *n = n.saturating_sub(1);
                        }
                        if let Some(n) = backfill.and_then(|bf| self.active_by_backfill.get_mut(&bf)) {
                            *n = n.saturating_sub(1);
                        }
                        freed.push(key);
                    }
                }
                Action::Dispatch { task } => {
                    let (priority, grade) =
                        (run.machine.workflow().tasks[task].priority, run.machine.workflow().spec.grade);
                    self.ready.push(run.tenant.clone(), run_id.clone(), task, priority, grade, now);
                }
                Action::Cancel { task, attempt } => {
                    // The task is stopped with its run (kill, mark failed):
                    // its attempt ends now, cancelled, and is no longer in
                    // flight — what its worker reports later is stale. (Its
                    // row would otherwise stay `running` once the run is
                    // retired.)
                    let key = AttemptKey { run_id: run.row.id.clone(), task: task as u32, number: attempt };
                    if let Some(flight) = self.in_flight.remove(&key) {
                        effects.batch.attempts.push(dagr_store::AttemptRow {
                            run_id: run.row.id.clone(),
                            task_idx: task as i64,
                            number: i64::from(attempt),
                            task: run.machine.workflow().tasks[task].name.clone(),
                            state: dagr_store::AttemptState::Failed,
                            failure_kind: Some(dagr_protocol::wire::FailureKind::Cancelled),
                            message: Some("cancelled: its run was killed or marked failed".into()),
                            charged: false,
                            worker: flight.worker.clone(),
                            epoch: run.row.epoch,
                            started_at: now,
                            finished_at: Some(now),
                            lease: flight.lease,
                        });
                        effects.cancels.push((key, flight.worker.clone()));
                        stopped.push(flight);
                    }
                }
                Action::RetryAt { task, at_ms } => {
                    run.extra[task].retry_at = Some(at_ms);
                    effects.batch.tasks.push(run.task_row(task));
                    let id = run.row.id.clone();
                    self.timers.arm(at_ms, Timer::Retry { run: id, task });
                }
                Action::WakeAt { task, at_ms } => {
                    run.extra[task].retry_at = Some(at_ms);
                    effects.batch.tasks.push(run.task_row(task));
                    let id = run.row.id.clone();
                    self.timers.arm(at_ms, Timer::Wake { run: id, task });
                }
            }
        }
        effects.batch.wakes.extend(wakes);
        for (at, run) in timeouts {
            self.timers.arm(at, Timer::RunTimeout { run });
        }
        for (run, command) in pauses {
            self.tell_children(effects, &run, &command, now);
        }
        for flight in stopped {
            self.release(&flight);
        }
        for key in freed {
            self.try_admit_waiting(effects, &key, now);
        }
    }
}

/// The first task parked behind a cap that is still to dispatch: a queued
/// task of a loaded, running run. What went stale on the way is dropped: a
/// task that moved on or whose run left or paused, and a task's second
/// item (a resume queues a paused run's tasks again while their first
/// items wait here). A place under the cap goes to a task that can take
/// it, not to a stale item, which would leave those behind it parked for
/// good (simulation with a capped tenant, seed 404).
pub(crate) fn next_to_dispatch(runs: &Map<Arc<str>, ActiveRun>, parked: &mut VecDeque<ReadyTask>) -> Option<ReadyTask> {
    while let Some(item) = parked.pop_front() {
        let queued = runs
            .get(&item.run)
            .is_some_and(|r| r.machine.dispatching() && r.machine.task(item.task).state == TaskState::Queued);
        if queued {
            return Some(item);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use dagr_core::TaskState;
    use serde_json::json;

    use super::task_state_data;

    #[test]
    fn a_task_state_event_s_data_is_what_serde_json_writes() {
        use TaskState::*;
        let states = [Pending, Queued, Running, RetryWait, Waiting, Succeeded, Failed, UpstreamFailed, Skipped, Killed];
        for from in states {
            for to in states {
                for attempt in [0, 1, 4_000_000_000] {
                    let expected = json!({"from": from.as_str(), "to": to.as_str(), "attempt": attempt}).to_string();
                    assert_eq!(task_state_data(from, to, attempt), expected);
                }
            }
        }
    }
}
