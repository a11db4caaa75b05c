//! The engine loop and the state it owns.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use dagr_core::definition::Format;
use dagr_core::run::{
    Action, FailureClass, Input as RunInput, Rejected, RunMachine, RunState, TaskProgress, TaskState,
};
use dagr_core::schedule::{MAX_RUNS_PER_STEP, Schedule};
use dagr_core::template::RenderContext;
use dagr_core::{Workflow, WorkflowSpec};
use dagr_protocol::control::CommandOutcome;
use dagr_protocol::plugins::{PluginDirectory, TrustedCatalog};
use dagr_protocol::wire::{AttemptKey, AttemptResult, AttemptSpec, FailureKind, Outcome, PluginSpec};
use dagr_store::{
    AttemptRow, CommandRow, NewEvent, NewRun, OutputWrite, RunKind, RunRow, RunWrite, Store, TaskWrite, WriteBatch,
    now_ms,
};
use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::ready::{ReadyQueue, ReadyTask};
use crate::{Ack, Adoption, Dispatcher, EngineConfig, EngineHandle, EngineMetrics, Input, TenantLimits};

/// Outputs up to this size stay in memory for dependents; larger ones are
/// read back from the store when needed.
const CACHED_OUTPUT: usize = 64 * 1024;

/// Inputs handled per step at most, so that one step's batch stays bounded.
const MAX_INPUTS_PER_STEP: usize = 8192;
/// Most in-flight attempts asked about in one engine step.
const MAX_ATTEMPT_CHECKS: usize = 256;

type WorkflowKey = (String, String);

/// Timestamps and notes the machine does not keep, for the task rows.
#[derive(Debug, Clone, Default)]
struct TaskExtra {
    started_at: Option<i64>,
    finished_at: Option<i64>,
    retry_at: Option<i64>,
    error: Option<String>,
}

/// A run the engine drives.
struct ActiveRun {
    tenant: Arc<str>,
    row: RunRow,
    machine: RunMachine,
    params: BTreeMap<String, Value>,
    timezone: Tz,
    extra: Vec<TaskExtra>,
    outputs: HashMap<usize, Arc<str>>,
    /// A backfill's parallelism, if the run belongs to one.
    backfill_parallel: Option<usize>,
}

impl ActiveRun {
    fn workflow_key(&self) -> WorkflowKey {
        (self.row.tenant.clone(), self.row.workflow.clone())
    }
}

/// An attempt handed to a worker and not yet reported back.
struct InFlight {
    workflow: WorkflowKey,
    tenant: Arc<str>,
    worker: String,
    /// When its worker last confirmed it (or when it was dispatched).
    confirmed_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Retry { run: String, task: usize },
    Schedule { tenant: String, name: String },
}

struct ScheduleEntry {
    version: i64,
    schedule: Schedule,
    workflow: Arc<Workflow>,
    since: i64,
    cursor: Option<i64>,
}

/// What one step changes and what it must do once that is committed.
#[derive(Default)]
struct Step {
    batch: WriteBatch,
    /// Attempts to hand to workers: (spec, worker).
    dispatches: Vec<(AttemptSpec, String)>,
    /// Attempts to stop: (key, worker).
    cancels: Vec<(AttemptKey, String)>,
    /// Workers' results waiting for their answer: (run, verdict, reply).
    acks: Vec<(String, Ack, tokio::sync::oneshot::Sender<Ack>)>,
    finished: Vec<(String, String)>,
    replies: Vec<(i64, CommandOutcome)>,
    /// Runs that reached a final state in this step (dropped from memory after it).
    retire: Vec<Arc<str>>,
}

/// The engine. Built and started by [`Engine::start`].
pub struct Engine {
    config: EngineConfig,
    store: Arc<dyn Store>,
    dispatcher: Arc<dyn Dispatcher>,
    plugins: Arc<dyn PluginDirectory>,
    metrics: Arc<EngineMetrics>,
    rx: mpsc::UnboundedReceiver<Input>,
    commands_tx: broadcast::Sender<(i64, CommandOutcome)>,
    finished_tx: broadcast::Sender<(String, String)>,

    runs: HashMap<Arc<str>, ActiveRun>,
    /// Runs dropped during the current step, with the epoch held: their
    /// writes waiting in the step are still fenced (see `finish_step`).
    dropped_epochs: HashMap<String, i64>,
    workflows: HashMap<(String, String, i64), Arc<Workflow>>,
    ready: ReadyQueue,
    in_flight: HashMap<AttemptKey, InFlight>,
    /// When in-flight attempts were last reconciled with their workers.
    last_attempt_check: i64,
    /// When the owned slots were last searched for runs loaded nowhere.
    last_orphan_sweep: i64,
    /// Tasks running per workflow (for `concurrency`).
    running_by_workflow: HashMap<WorkflowKey, usize>,
    /// Ready tasks held back by their workflow's `concurrency`.
    parked: HashMap<WorkflowKey, VecDeque<ReadyTask>>,
    /// Attempts running per tenant, and ready tasks held back by the
    /// tenant's `max_concurrent`.
    running_by_tenant: HashMap<Arc<str>, usize>,
    parked_by_tenant: HashMap<Arc<str>, VecDeque<ReadyTask>>,
    /// Running or paused runs per workflow (for `max_active_runs`) and per backfill.
    active_by_workflow: HashMap<WorkflowKey, usize>,
    active_by_backfill: HashMap<String, usize>,
    /// Queued runs waiting for admission, per workflow, oldest first.
    waiting: HashMap<WorkflowKey, VecDeque<Arc<str>>>,
    timers: BTreeMap<(i64, u64), Timer>,
    timer_seq: u64,
    schedules: HashMap<WorkflowKey, ScheduleEntry>,
    command_cursor: i64,
    /// Results to apply in the next step (dispatches that failed).
    deferred: Vec<AttemptResult>,
    /// Run another step at once (more commands are waiting).
    pending_wake: bool,
    /// Slots this master owns (and drives the runs of).
    owned: HashSet<u32>,
    /// The ownership asked for last; retried if taking over failed.
    wanted_slots: HashSet<u32>,
    pending_ownership: bool,
    /// The fencing token while this master leads.
    leader: Option<i64>,
}

fn outcome_json(outcome: &CommandOutcome) -> String {
    serde_json::to_string(outcome).unwrap_or_else(|_| "{\"ok\":false,\"message\":\"\"}".into())
}

impl Engine {
    /// Starts the engine loop. The engine drives nothing until it is told
    /// which slots it owns ([`EngineHandle::own_slots`]); taking over a slot
    /// is also how it recovers after a restart.
    pub async fn start(
        config: EngineConfig,
        store: Arc<dyn Store>,
        dispatcher: Arc<dyn Dispatcher>,
        plugins: Arc<dyn PluginDirectory>,
    ) -> Result<EngineHandle, dagr_store::Error> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (commands_tx, _) = broadcast::channel(1024);
        let (finished_tx, _) = broadcast::channel(4096);
        let metrics = Arc::new(EngineMetrics::default());
        let handle = EngineHandle {
            tx,
            commands: commands_tx.clone(),
            finished: finished_tx.clone(),
            store: store.clone(),
            metrics: metrics.clone(),
            plugins: plugins.clone(),
        };
        let engine = Engine {
            config,
            store,
            dispatcher,
            plugins,
            metrics,
            rx,
            commands_tx,
            finished_tx,
            runs: HashMap::new(),
            dropped_epochs: HashMap::new(),
            workflows: HashMap::new(),
            ready: ReadyQueue::default(),
            in_flight: HashMap::new(),
            last_attempt_check: now_ms(),
            last_orphan_sweep: now_ms(),
            running_by_workflow: HashMap::new(),
            parked: HashMap::new(),
            running_by_tenant: HashMap::new(),
            parked_by_tenant: HashMap::new(),
            active_by_workflow: HashMap::new(),
            active_by_backfill: HashMap::new(),
            waiting: HashMap::new(),
            timers: BTreeMap::new(),
            timer_seq: 0,
            schedules: HashMap::new(),
            command_cursor: 0,
            deferred: Vec::new(),
            pending_wake: false,
            owned: HashSet::new(),
            wanted_slots: HashSet::new(),
            pending_ownership: false,
            leader: None,
        };
        tokio::spawn(engine.run());
        Ok(handle)
    }

    /// Takes over the runs of newly owned slots: claims each one (bumping
    /// its epoch, so that a previous owner can no longer write), loads it,
    /// and asks the workers about its running attempts instead of blindly
    /// restarting them.
    async fn gain_slots(&mut self, gained: &HashSet<u32>, step: &mut Step, now: i64) {
        let mut slots: Vec<i64> = gained.iter().map(|&s| s as i64).collect();
        slots.sort_unstable();
        let rows = match self.store.active_runs_in_slots(&slots).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the runs of gained slots; retrying");
                self.owned.retain(|s| !gained.contains(s));
                self.pending_ownership = true;
                return;
            }
        };
        let mut loaded = Vec::new();
        for row in rows {
            if self.runs.contains_key(row.id.as_str()) {
                continue;
            }
            let id = row.id.clone();
            match self.claim_and_load(row, step, now).await {
                Ok(()) => loaded.push(id),
                Err(message) => tracing::error!(run = %id, %message, "cannot take over run"),
            }
        }
        self.adopt_attempts(&loaded, step, now).await;
        // Queued runs wait for admission in creation order.
        let mut queued: Vec<(i64, Arc<str>)> = loaded
            .iter()
            .filter_map(|id| self.runs.get_key_value(id.as_str()))
            .filter(|(_, r)| r.machine.state() == RunState::Queued)
            .map(|(id, r)| (r.row.created_at, id.clone()))
            .collect();
        queued.sort();
        for (_, id) in queued {
            self.admit_or_wait(&id, step, now);
        }
        // Commands of these slots may be pending from before.
        self.command_cursor = 0;
        self.pending_wake = true;
        tracing::info!(slots = gained.len(), runs = loaded.len(), "took over slots");
    }

    /// Forgets the runs of slots this master no longer owns. Nothing is
    /// written: the new owner takes them over.
    fn lose_slots(&mut self, lost: &HashSet<u32>) {
        let ids: Vec<Arc<str>> =
            self.runs.iter().filter(|(_, r)| lost.contains(&(r.row.slot as u32))).map(|(id, _)| id.clone()).collect();
        for id in &ids {
            self.drop_run(id);
        }
        if !ids.is_empty() {
            tracing::info!(slots = lost.len(), runs = ids.len(), "handed over slots");
        }
    }

    async fn run(mut self) {
        let mut poll = tokio::time::interval(self.config.poll_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut wanted: Option<HashSet<u32>> = None;
        loop {
            let mut inputs: Vec<Input> = Vec::new();
            if self.deferred.is_empty() && !self.pending_wake && !self.pending_ownership {
                let timer_at = self.timers.keys().next().map(|&(at, _)| at);
                let sleep_for = timer_at.map(|at| Duration::from_millis((at - now_ms()).max(0) as u64));
                tokio::select! {
                    input = self.rx.recv() => match input {
                        Some(input) => inputs.push(input),
                        None => return,
                    },
                    _ = poll.tick() => inputs.push(Input::Wake),
                    _ = async {
                        match sleep_for {
                            Some(d) => tokio::time::sleep(d).await,
                            None => std::future::pending().await,
                        }
                    } => {}
                }
            }
            inputs.extend(self.deferred.drain(..).map(|r| Input::Result(r, None)));
            if std::mem::take(&mut self.pending_wake) {
                inputs.push(Input::Wake);
            }
            while inputs.len() < MAX_INPUTS_PER_STEP {
                match self.rx.try_recv() {
                    Ok(input) => inputs.push(input),
                    Err(_) => break,
                }
            }
            let now = now_ms();
            let mut step = Step::default();
            let mut wake = false;
            let mut shutdown = None;
            let mut leadership_changed = None;
            for input in inputs {
                match input {
                    Input::Wake => wake = true,
                    Input::Result(result, ack) => {
                        self.metrics.results.fetch_add(1, Ordering::Relaxed);
                        let verdict = self.apply_result(result.clone(), &mut step, now, true);
                        if let Some(ack) = ack {
                            step.acks.push((result.key.run_id.clone(), verdict, ack));
                        }
                    }
                    Input::WorkflowChanged { tenant, name } => {
                        if self.leader.is_some() {
                            self.reload_schedule(&tenant, &name, &mut step, now).await;
                        }
                    }
                    Input::TenantChanged => self.config.policy.changed(),
                    Input::Ownership(slots) => wanted = Some(slots),
                    Input::Leadership(token) => leadership_changed = Some(token),
                    Input::WorkersGone(workers) => self.workers_gone(&workers, &mut step, now),
                    Input::Shutdown(reply) => shutdown = Some(reply),
                }
            }
            if std::mem::take(&mut self.pending_ownership) && wanted.is_none() {
                wanted = Some(self.wanted_slots.clone());
            }
            if let Some(slots) = wanted.take() {
                self.wanted_slots = slots.clone();
                let lost: HashSet<u32> = self.owned.difference(&slots).copied().collect();
                let gained: HashSet<u32> = slots.difference(&self.owned).copied().collect();
                self.owned = slots;
                if !lost.is_empty() {
                    self.lose_slots(&lost);
                }
                if !gained.is_empty() {
                    self.gain_slots(&gained, &mut step, now).await;
                }
            }
            if let Some(token) = leadership_changed {
                self.set_leadership(token, &mut step, now).await;
            }
            self.fire_timers(&mut step, now);
            self.check_in_flight(&mut step, now).await;
            if wake {
                self.consume_commands(&mut step, now).await;
            }
            self.dispatch_ready(&mut step, now).await;
            self.finish_step(step).await;
            self.metrics.steps.fetch_add(1, Ordering::Relaxed);
            self.metrics.active_runs.store(self.runs.len() as u64, Ordering::Relaxed);
            self.metrics.in_flight.store(self.in_flight.len() as u64, Ordering::Relaxed);
            if let Some(reply) = shutdown {
                let _ = reply.send(());
                return;
            }
        }
    }

    /// Starts or stops the singleton duties (cron materialisation).
    async fn set_leadership(&mut self, token: Option<i64>, step: &mut Step, now: i64) {
        if token == self.leader {
            return;
        }
        self.schedules.clear();
        self.leader = None;
        let Some(token) = token else {
            tracing::info!("no longer the leader: schedules stop here");
            return;
        };
        match self.store.acquire_singleton(SCHEDULER, &self.config.node_id, token, now).await {
            Ok(true) => {
                self.leader = Some(token);
                if let Err(e) = self.load_schedules(step, now).await {
                    tracing::error!(error = %e, "cannot load schedules");
                }
                tracing::info!(token, schedules = self.schedules.len(), "leading: schedules run here");
            }
            Ok(false) => tracing::warn!(token, "a newer leader holds the scheduler; standing by"),
            Err(e) => tracing::error!(error = %e, "cannot record leadership; will retry on the next change"),
        }
    }

    /// Asks workers about attempts they have not been heard of for
    /// [`EngineConfig::attempt_check`]. A worker that restarted under the
    /// same id within its lease TTL never leaves the membership, so
    /// [`Self::workers_gone`] does not see that its attempts are gone; this
    /// does: an attempt its worker does not know is lost (retried,
    /// uncharged), a finished one's result is applied.
    async fn check_in_flight(&mut self, step: &mut Step, now: i64) {
        let Some(every) = self.config.attempt_check else { return };
        let every = every.as_millis() as i64;
        if now - self.last_attempt_check < every.min(1000) {
            return;
        }
        self.last_attempt_check = now;
        if now - self.last_orphan_sweep >= every {
            self.last_orphan_sweep = now;
            self.sweep_orphans(step, now).await;
        }
        let due: Vec<(AttemptKey, String)> = self
            .in_flight
            .iter()
            .filter(|(_, f)| now - f.confirmed_at >= every)
            .map(|(k, f)| (k.clone(), f.worker.clone()))
            .take(MAX_ATTEMPT_CHECKS)
            .collect();
        for (key, worker) in due {
            let Some(run) = self.runs.get(key.run_id.as_str()) else { continue };
            let epoch = run.row.epoch;
            match self.dispatcher.adopt(&key, &worker, epoch).await {
                Adoption::Running => {
                    if let Some(f) = self.in_flight.get_mut(&key) {
                        f.confirmed_at = now;
                    }
                }
                Adoption::Finished(mut result) => {
                    result.epoch = epoch;
                    self.apply_result(result, step, now, true);
                }
                Adoption::Unknown => {
                    tracing::warn!(attempt = %key, %worker, "the attempt's worker does not know it: lost");
                    let message = format!(
                        "worker {worker} does not know the attempt (it restarted, or the attempt never reached it)"
                    );
                    self.lose_in_flight(key, &worker, message, step, now);
                }
            }
        }
    }

    /// Asks the workers about the running attempts of runs just loaded
    /// (taken over): still running ones are tracked again, finished ones
    /// applied, unknown ones lost (retried, uncharged). Every path that
    /// loads a run goes through here, or its running attempts would wait
    /// forever.
    async fn adopt_attempts(&mut self, loaded: &[String], step: &mut Step, now: i64) {
        if loaded.is_empty() {
            return;
        }
        let running = match self.store.running_attempts_of(loaded).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::error!(error = %e, "cannot read running attempts");
                Vec::new()
            }
        };
        for attempt in running {
            let key = AttemptKey {
                run_id: attempt.run_id.clone(),
                task: attempt.task_idx as u32,
                number: attempt.number as u32,
            };
            let Some(run) = self.runs.get(attempt.run_id.as_str()) else { continue };
            let epoch = run.row.epoch;
            let workflow = run.workflow_key();
            let tenant = run.tenant.clone();
            let adoption = if attempt.worker.is_empty() {
                Adoption::Unknown
            } else {
                self.dispatcher.adopt(&key, &attempt.worker, epoch).await
            };
            if !matches!(adoption, Adoption::Unknown) {
                // Running or finished on its worker: tracked again, so that
                // its result (now or later) is applied like any other.
                self.metrics.attempts_adopted.fetch_add(1, Ordering::Relaxed);
                self.count_running(&workflow, &tenant);
                let worker = attempt.worker.clone();
                self.in_flight.insert(key, InFlight { workflow, tenant, worker, confirmed_at: now });
            }
            match adoption {
                Adoption::Running => {
                    let mut adopted = attempt.clone();
                    adopted.epoch = epoch;
                    step.batch.attempts.push(adopted);
                }
                Adoption::Finished(mut result) => {
                    result.epoch = epoch;
                    self.apply_result(result, step, now, true);
                }
                Adoption::Unknown => {
                    self.metrics.attempts_lost.fetch_add(1, Ordering::Relaxed);
                    let result = lost_result(
                        &attempt,
                        epoch,
                        now,
                        "its worker does not know it (the worker restarted, or it was never delivered)",
                    );
                    step.batch.attempts.push(finished_attempt(&result, &attempt));
                    self.apply_result(result, step, now, false);
                }
            }
        }
    }

    /// Takes over runs of this master's slots that no master has loaded:
    /// a run this master dropped because another one claimed it (their
    /// views of the membership differed for a moment), which that other
    /// master then handed back when it lost the slot. Such a run would
    /// otherwise wait for the next membership change.
    async fn sweep_orphans(&mut self, step: &mut Step, now: i64) {
        if self.owned.is_empty() {
            return;
        }
        let mut slots: Vec<i64> = self.owned.iter().map(|&s| s as i64).collect();
        slots.sort_unstable();
        let Ok(rows) = self.store.active_runs_in_slots(&slots).await else { return };
        let me = self.config.node_id.as_str();
        let orphans: HashSet<u32> = rows
            .iter()
            .filter(|r| !self.runs.contains_key(r.id.as_str()))
            .filter(|r| r.owner.as_deref().is_some_and(|owner| owner != me))
            .map(|r| r.slot as u32)
            .collect();
        if !orphans.is_empty() {
            tracing::warn!(slots = orphans.len(), "runs of this master's slots were loaded nowhere; taking them over");
            self.gain_slots(&orphans, step, now).await;
        }
    }

    /// Attempts on workers that left are lost; their tasks go again.
    fn workers_gone(&mut self, workers: &[String], step: &mut Step, now: i64) {
        let lost: Vec<(AttemptKey, String)> = self
            .in_flight
            .iter()
            .filter(|(_, f)| workers.contains(&f.worker))
            .map(|(k, f)| (k.clone(), f.worker.clone()))
            .collect();
        for (key, worker) in lost {
            let message = format!("worker {worker} left the cluster while running it");
            self.lose_in_flight(key, &worker, message, step, now);
        }
    }

    /// An in-flight attempt whose worker no longer has it: it fails as
    /// `worker-lost` (retried, uncharged).
    fn lose_in_flight(&mut self, key: AttemptKey, worker: &str, message: String, step: &mut Step, now: i64) {
        let Some(run) = self.runs.get(key.run_id.as_str()) else {
            self.in_flight.remove(&key);
            return;
        };
        if !self.in_flight.contains_key(&key) {
            return;
        }
        self.metrics.attempts_lost.fetch_add(1, Ordering::Relaxed);
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
        };
        self.apply_result(result, step, now, true);
    }

    /// Commits the step, then performs what must follow a commit.
    async fn finish_step(&mut self, mut step: Step) {
        let mut batch = std::mem::take(&mut step.batch);
        let mut fenced: HashSet<String> = HashSet::new();
        if !batch.is_empty() {
            // Every write for a run is fenced by the epoch this master holds.
            if self.config.fence_writes {
                let mut touched: HashSet<&str> = HashSet::new();
                touched.extend(batch.runs.iter().map(|r| r.id.as_str()));
                touched.extend(batch.tasks.iter().map(|t| t.run_id.as_str()));
                touched.extend(batch.attempts.iter().map(|a| a.run_id.as_str()));
                touched.extend(batch.events.iter().filter_map(|e| e.run_id.as_deref()));
                // A run dropped during this step (its slot handed over)
                // keeps the epoch it had: without a fence its writes
                // would land even after another master claimed it.
                batch.fences = touched
                    .into_iter()
                    .filter_map(|id| {
                        let epoch =
                            self.runs.get(id).map(|r| r.row.epoch).or_else(|| self.dropped_epochs.get(id).copied());
                        epoch.map(|epoch| (id.to_owned(), epoch))
                    })
                    .collect();
            }
            if !batch.new_runs.is_empty() || !batch.schedule_cursors.is_empty() {
                batch.singleton = self.leader.map(|t| (SCHEDULER.to_owned(), t));
            }
            let mut delay = Duration::from_millis(50);
            loop {
                match self.store.commit(batch.clone()).await {
                    Ok(committed) => {
                        if !committed.fenced.is_empty() {
                            self.metrics.fenced_writes.fetch_add(committed.fenced.len() as u64, Ordering::Relaxed);
                            for run in &committed.fenced {
                                tracing::warn!(run = %run, "another master owns this run now; dropping it");
                                self.drop_run(run);
                            }
                            fenced.extend(committed.fenced);
                        }
                        if committed.singleton_fenced {
                            self.metrics.fenced_writes.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!("a newer leader holds the scheduler; stopping schedules here");
                            self.schedules.clear();
                            self.leader = None;
                        }
                        break;
                    }
                    Err(e) => {
                        // Nothing of this step happened; keep trying rather than
                        // act on state that is not durable.
                        tracing::error!(error = %e, "cannot commit the engine step; retrying");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(5));
                    }
                }
            }
        }
        for (run, verdict, ack) in step.acks {
            let _ = ack.send(if fenced.contains(&run) { Ack::NotOwner } else { verdict });
        }
        // One request per worker (cut if big), all workers at once.
        let mut by_worker: BTreeMap<String, Vec<AttemptSpec>> = BTreeMap::new();
        for (spec, worker) in step.dispatches {
            if !fenced.contains(&spec.key.run_id) {
                by_worker.entry(worker).or_default().push(spec);
            }
        }
        let requests: Vec<(String, Vec<AttemptSpec>)> = by_worker
            .into_iter()
            .flat_map(|(worker, specs)| {
                dagr_protocol::wire::batches(specs, AttemptSpec::payload_bytes)
                    .into_iter()
                    .map(move |batch| (worker.clone(), batch))
            })
            .collect();
        let dispatcher = &self.dispatcher;
        let answers = futures::future::join_all(requests.into_iter().map(|(worker, specs)| async move {
            // What a refusal needs to be reported; the specs themselves
            // (params, inputs) go to the worker without a copy.
            let sent: Vec<(AttemptKey, i64, String)> =
                specs.iter().map(|s| (s.key.clone(), s.epoch, s.task_name.clone())).collect();
            let answers = dispatcher.dispatch(specs, &worker).await;
            (worker, sent, answers)
        }))
        .await;
        for (worker, sent, answers) in answers {
            self.metrics.dispatched.fetch_add(sent.len() as u64, Ordering::Relaxed);
            for ((key, epoch, task_name), answer) in sent.into_iter().zip(answers) {
                let Err(message) = answer else { continue };
                tracing::warn!(attempt = %key, %message, "dispatch failed; the attempt goes again");
                // The worker did not take it: it never ran, so it is not charged.
                let now = now_ms();
                self.deferred.push(AttemptResult {
                    key,
                    epoch,
                    task_name,
                    worker: worker.clone(),
                    started_at: now,
                    finished_at: now,
                    outcome: Outcome::Failed { kind: FailureKind::DispatchFailed, message },
                });
            }
        }
        for (key, worker) in step.cancels {
            self.dispatcher.cancel(&key, &worker).await;
        }
        for (run, state) in step.finished {
            if fenced.contains(&run) {
                continue;
            }
            self.metrics.runs_finished.fetch_add(1, Ordering::Relaxed);
            let _ = self.finished_tx.send((run, state));
        }
        for reply in step.replies {
            let _ = self.commands_tx.send(reply);
        }
        for run in step.retire {
            if self.runs.get(&run).is_some_and(|r| r.machine.state().is_terminal()) {
                self.retire_run(&run);
            }
        }
        self.dropped_epochs.clear();
    }
}

/// The singleton duty the leader holds.
const SCHEDULER: &str = "scheduler";

/// A running attempt that will not report: failed as `worker-lost`.
fn lost_result(attempt: &AttemptRow, epoch: i64, now: i64, why: &str) -> AttemptResult {
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
    }
}

impl Engine {
    // Loading runs -----------------------------------------------------------

    async fn workflow_for(&mut self, row: &RunRow) -> Result<Arc<Workflow>, String> {
        let cache_key = row.version.map(|v| (row.tenant.clone(), row.workflow.clone(), v));
        if let Some(wf) = cache_key.as_ref().and_then(|k| self.workflows.get(k)) {
            return Ok(wf.clone());
        }
        let text = match (&row.spec, row.version) {
            (Some(spec), _) => spec.clone(),
            (None, Some(version)) => {
                self.store
                    .get_version(&row.tenant, &row.workflow, version)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("workflow {} version {version} is missing", row.workflow))?
                    .spec
            }
            (None, None) => {
                return Err(format!("run {} has neither a workflow version nor a spec", row.id));
            }
        };
        let spec = WorkflowSpec::parse(&text, Format::Json).map_err(|e| e.to_string())?;
        let workflow = Arc::new(Workflow::validate(spec, &TrustedCatalog).map_err(|e| e.to_string())?);
        if let Some(k) = cache_key {
            self.workflows.insert(k, workflow.clone());
        }
        Ok(workflow)
    }

    /// Loads a run this master owns (by slot), taking it over first.
    async fn load_run(&mut self, run_id: &str, step: &mut Step, now: i64) -> Result<Arc<str>, String> {
        if let Some((id, _)) = self.runs.get_key_value(run_id) {
            return Ok(id.clone());
        }
        let row = self
            .store
            .get_run(run_id)
            .await
            .map_err(|e| format!("cannot read run {run_id}: {e}"))?
            .ok_or_else(|| format!("there is no run {run_id}"))?;
        if !self.owned.contains(&(row.slot as u32)) {
            return Err(format!("run {run_id} belongs to another master"));
        }
        self.claim_and_load(row, step, now).await?;
        self.adopt_attempts(&[run_id.to_owned()], step, now).await;
        self.runs.get_key_value(run_id).map(|(id, _)| id.clone()).ok_or_else(|| format!("run {run_id} did not load"))
    }

    /// Bumps the run's epoch (fencing out any previous owner), then loads it
    /// as it is after the claim. A row read before the claim may be older
    /// than the task rows read after it (the previous owner may commit in
    /// between): a run still `queued` there, with tasks already running,
    /// would never dispatch them again.
    async fn claim_and_load(&mut self, row: RunRow, step: &mut Step, now: i64) -> Result<(), String> {
        let row = self
            .store
            .claim_run(&row.id, &self.config.node_id, now)
            .await
            .map_err(|e| format!("cannot claim run {}: {e}", row.id))?
            .ok_or_else(|| format!("run {} vanished", row.id))?;
        self.metrics.runs_claimed.fetch_add(1, Ordering::Relaxed);
        self.load_run_row(row, step, now).await
    }

    async fn load_run_row(&mut self, row: RunRow, step: &mut Step, now: i64) -> Result<(), String> {
        self.config.policy.prepare(&row.tenant).await;
        let workflow = self.workflow_for(&row).await?;
        let state =
            RunState::parse(&row.state).ok_or_else(|| format!("run {} has unknown state `{}`", row.id, row.state))?;
        // A queued run claimed for the first time (epoch 1) was never owned
        // before: only an owner writes task rows, so every task is still
        // as the run was created, pending. Its rows need not be read
        // (10,000 rows of a big fan-out are tens of ms before it starts).
        let fresh = row.epoch == 1 && state == RunState::Queued;
        let tasks = if fresh { Vec::new() } else { self.store.run_tasks(&row.id).await.map_err(|e| e.to_string())? };
        if !fresh && tasks.len() != workflow.tasks.len() {
            return Err(format!("run {} has {} task rows for {} tasks", row.id, tasks.len(), workflow.tasks.len()));
        }
        let mut progress = Vec::with_capacity(workflow.tasks.len());
        let mut extra = Vec::with_capacity(workflow.tasks.len());
        if fresh {
            progress.resize(workflow.tasks.len(), TaskProgress::new(TaskState::Pending, 0, 0, false));
            extra.resize_with(workflow.tasks.len(), TaskExtra::default);
        }
        for t in &tasks {
            let task_state =
                TaskState::parse(&t.state).ok_or_else(|| format!("task {} has unknown state `{}`", t.name, t.state))?;
            progress.push(
                TaskProgress::new(task_state, t.attempts as u32, t.failures as u32, t.forced).with_lost(t.lost as u32),
            );
            extra.push(TaskExtra {
                started_at: t.started_at,
                finished_at: t.finished_at,
                retry_at: t.retry_at,
                error: t.error.clone(),
            });
        }
        let params: BTreeMap<String, Value> = serde_json::from_str(&row.params).unwrap_or_default();
        let timezone = workflow.schedule.as_ref().map(|s| s.timezone).unwrap_or(chrono_tz::UTC);
        let backfill_parallel = match &row.backfill_id {
            Some(id) => self.store.get_backfill(id).await.ok().flatten().map(|b| b.parallel.max(1) as usize),
            None => None,
        };
        let (machine, actions) = RunMachine::restore(workflow, state, progress);
        let machine = machine.with_max_lost(self.config.max_lost_attempts);
        let id: Arc<str> = Arc::from(row.id.as_str());
        for (i, t) in tasks.iter().enumerate() {
            if t.state == "retry_wait" {
                self.arm(t.retry_at.unwrap_or(now), Timer::Retry { run: row.id.clone(), task: i });
            }
        }
        let run = ActiveRun {
            tenant: Arc::from(row.tenant.as_str()),
            row,
            machine,
            params,
            timezone,
            extra,
            outputs: HashMap::new(),
            backfill_parallel,
        };
        if matches!(state, RunState::Running | RunState::Paused) {
            self.count_active(&run, 1);
        }
        self.runs.insert(id.clone(), run);
        self.absorb(&id, actions, step, now);
        Ok(())
    }

    fn count_active(&mut self, run: &ActiveRun, delta: isize) {
        let add = |n: &mut usize| *n = n.saturating_add_signed(delta);
        add(self.active_by_workflow.entry(run.workflow_key()).or_default());
        if let Some(bf) = &run.row.backfill_id {
            add(self.active_by_backfill.entry(bf.clone()).or_default());
        }
    }

    /// Forgets a finished run. Its attempts still in flight (cancelled by a
    /// kill) stay tracked, so that their ends are recorded when they report.
    fn retire_run(&mut self, run_id: &str) {
        let Some(run) = self.runs.remove(run_id) else { return };
        if matches!(run.machine.state(), RunState::Running | RunState::Paused) {
            self.count_active(&run, -1);
        }
        let key = run.workflow_key();
        if let Some(queue) = self.waiting.get_mut(&key) {
            queue.retain(|r| r.as_ref() != run_id);
        }
    }

    /// Forgets a run this master may no longer drive (fenced, or handed
    /// over): its in-flight attempts are the new owner's to track.
    fn drop_run(&mut self, run_id: &str) {
        let Some(run) = self.runs.remove(run_id) else { return };
        // Writes for it may wait in the step being built: they are still
        // fenced with the epoch this master held.
        self.dropped_epochs.insert(run_id.to_owned(), run.row.epoch);
        if matches!(run.machine.state(), RunState::Running | RunState::Paused) {
            self.count_active(&run, -1);
        }
        let key = run.workflow_key();
        if let Some(queue) = self.waiting.get_mut(&key) {
            queue.retain(|r| r.as_ref() != run_id);
        }
        let flights: Vec<AttemptKey> = self.in_flight.keys().filter(|k| k.run_id == run_id).cloned().collect();
        for k in flights {
            if let Some(flight) = self.in_flight.remove(&k) {
                self.release(&flight);
            }
        }
    }

    fn count_running(&mut self, workflow: &WorkflowKey, tenant: &Arc<str>) {
        *self.running_by_workflow.entry(workflow.clone()).or_default() += 1;
        *self.running_by_tenant.entry(tenant.clone()).or_default() += 1;
    }

    /// A worker slot, a workflow and a tenant concurrency slot are free again.
    fn release(&mut self, flight: &InFlight) {
        self.dispatcher.released(&flight.worker);
        if let Some(n) = self.running_by_workflow.get_mut(&flight.workflow) {
            *n = n.saturating_sub(1);
        }
        if let Some(n) = self.running_by_tenant.get_mut(&flight.tenant) {
            *n = n.saturating_sub(1);
        }
        self.unpark(&flight.workflow);
        if let Some(parked) = self.parked_by_tenant.get_mut(&flight.tenant) {
            if let Some(item) = parked.pop_front() {
                self.ready.restore(item);
            }
            if parked.is_empty() {
                self.parked_by_tenant.remove(&flight.tenant);
            }
        }
    }

    // Applying the machines' actions ------------------------------------------

    fn task_write(run: &ActiveRun, task: usize) -> TaskWrite {
        let p = run.machine.task(task);
        let e = &run.extra[task];
        TaskWrite {
            run_id: run.row.id.clone(),
            idx: task as i64,
            name: run.machine.workflow().tasks[task].name.clone(),
            state: p.state.as_str().into(),
            attempts: p.attempts as i64,
            failures: p.failures as i64,
            lost: p.lost as i64,
            forced: p.forced,
            retry_at: e.retry_at,
            error: e.error.clone(),
            started_at: e.started_at,
            finished_at: e.finished_at,
        }
    }

    fn absorb(&mut self, run_id: &Arc<str>, actions: Vec<Action>, step: &mut Step, now: i64) {
        let mut freed: Vec<WorkflowKey> = Vec::new();
        for action in actions {
            let Some(run) = self.runs.get_mut(run_id) else {
                return;
            };
            match action {
                Action::TaskChanged { task, from, to } => {
                    let extra = &mut run.extra[task];
                    match to {
                        TaskState::Pending => {
                            *extra = TaskExtra::default();
                            if from == TaskState::Succeeded {
                                run.outputs.remove(&task);
                                step.batch
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
                    step.batch.tasks.push(Self::task_write(run, task));
                    step.batch.events.push(NewEvent {
                        tenant: run.row.tenant.clone(),
                        at: now,
                        kind: "task.state".into(),
                        run_id: Some(run.row.id.clone()),
                        task: Some(run.machine.workflow().tasks[task].name.clone()),
                        data: json!({"from": from.as_str(), "to": to.as_str(), "attempt": run.machine.task(task).attempts})
                            .to_string(),
                    });
                }
                Action::RunChanged { from, to } => {
                    run.row.state = to.as_str().into();
                    if to == RunState::Running && run.row.started_at.is_none() {
                        run.row.started_at = Some(now);
                    }
                    run.row.finished_at = to.is_terminal().then_some(now);
                    run.row.updated_at = now;
                    step.batch.runs.push(RunWrite {
                        id: run.row.id.clone(),
                        state: to.as_str().into(),
                        started_at: run.row.started_at,
                        finished_at: run.row.finished_at,
                        updated_at: now,
                    });
                    step.batch.events.push(NewEvent {
                        tenant: run.row.tenant.clone(),
                        at: now,
                        kind: "run.state".into(),
                        run_id: Some(run.row.id.clone()),
                        task: None,
                        data: json!({"from": from.as_str(), "to": to.as_str()}).to_string(),
                    });
                    let active = |s: RunState| matches!(s, RunState::Running | RunState::Paused);
                    if to.is_terminal() {
                        step.finished.push((run.row.id.clone(), to.as_str().into()));
                        step.retire.push(run_id.clone());
                        run.outputs.clear();
                    }
                    let key = run.workflow_key();
                    if !active(from) && active(to) {
                        let run = &self.runs[run_id];
                        let (wf, bf) = (run.workflow_key(), run.row.backfill_id.clone());
                        *self.active_by_workflow.entry(wf).or_default() += 1;
                        if let Some(bf) = bf {
                            *self.active_by_backfill.entry(bf).or_default() += 1;
                        }
                    } else if active(from) && !active(to) {
                        let run = &self.runs[run_id];
                        let bf = run.row.backfill_id.clone();
                        if let Some(n) = self.active_by_workflow.get_mut(&key) {
                            *n = n.saturating_sub(1);
                        }
                        if let Some(n) = bf.and_then(|bf| self.active_by_backfill.get_mut(&bf)) {
                            *n = n.saturating_sub(1);
                        }
                        freed.push(key);
                    }
                }
                Action::Dispatch { task } => {
                    let priority = run.machine.workflow().tasks[task].priority;
                    self.ready.push(run.tenant.clone(), run_id.clone(), task, priority);
                }
                Action::Cancel { task, attempt } => {
                    let key = AttemptKey { run_id: run.row.id.clone(), task: task as u32, number: attempt };
                    if let Some(flight) = self.in_flight.get(&key) {
                        step.cancels.push((key, flight.worker.clone()));
                    }
                }
                Action::RetryAt { task, at_ms } => {
                    run.extra[task].retry_at = Some(at_ms);
                    step.batch.tasks.push(Self::task_write(run, task));
                    let id = run.row.id.clone();
                    self.arm(at_ms, Timer::Retry { run: id, task });
                }
            }
        }
        for key in freed {
            self.try_admit_waiting(&key, step, now);
        }
    }

    // Admission ------------------------------------------------------------------

    fn can_admit(&self, run: &ActiveRun) -> bool {
        let key = run.workflow_key();
        let workflow_ok = match run.machine.workflow().spec.max_active_runs {
            Some(max) => self.active_by_workflow.get(&key).copied().unwrap_or(0) < max as usize,
            None => true,
        };
        let backfill_ok = match (&run.row.backfill_id, run.backfill_parallel) {
            (Some(bf), Some(parallel)) => self.active_by_backfill.get(bf).copied().unwrap_or(0) < parallel,
            _ => true,
        };
        workflow_ok && backfill_ok
    }

    fn admit_or_wait(&mut self, run_id: &Arc<str>, step: &mut Step, now: i64) {
        let Some(run) = self.runs.get(run_id) else {
            return;
        };
        if run.machine.state() != RunState::Queued {
            return;
        }
        let key = run.workflow_key();
        let queue = self.waiting.entry(key.clone()).or_default();
        if !queue.contains(run_id) {
            queue.push_back(run_id.clone());
        }
        self.try_admit_waiting(&key, step, now);
    }

    /// Starts the waiting runs of a workflow that may start now, in order.
    fn try_admit_waiting(&mut self, key: &WorkflowKey, step: &mut Step, now: i64) {
        let Some(queue) = self.waiting.get(key) else {
            return;
        };
        let candidates: Vec<Arc<str>> = queue.iter().cloned().collect();
        for id in candidates {
            let decision = match self.runs.get(&id) {
                Some(run) if run.machine.state() == RunState::Queued => Some(self.can_admit(run)),
                _ => None,
            };
            match decision {
                Some(false) => continue,
                Some(true) => {
                    self.remove_waiting(key, &id);
                    if let Some(run) = self.runs.get_mut(&id)
                        && let Ok(actions) = run.machine.apply(RunInput::Start, now)
                    {
                        self.absorb(&id, actions, step, now);
                    }
                }
                None => self.remove_waiting(key, &id),
            }
        }
    }

    fn remove_waiting(&mut self, key: &WorkflowKey, id: &Arc<str>) {
        if let Some(queue) = self.waiting.get_mut(key) {
            queue.retain(|r| r != id);
            if queue.is_empty() {
                self.waiting.remove(key);
            }
        }
    }

    // Commands ----------------------------------------------------------------------

    async fn consume_commands(&mut self, step: &mut Step, now: i64) {
        const PAGE: i64 = 256;
        let commands = match self.store.pending_commands(self.command_cursor, PAGE).await {
            Ok(commands) => commands,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read commands; will retry");
                return;
            }
        };
        if commands.len() as i64 == PAGE {
            self.pending_wake = true;
        }
        for command in commands {
            self.command_cursor = self.command_cursor.max(command.id);
            if !self.owned.contains(&(command.slot as u32)) {
                // Another master's; if this one takes the slot over, it
                // reads pending commands again from the start.
                continue;
            }
            let outcome = self.apply_command(&command, step, now).await;
            step.batch.commands_done.push((command.id, outcome_json(&outcome)));
            step.replies.push((command.id, outcome));
        }
    }

    async fn apply_command(&mut self, command: &CommandRow, step: &mut Step, now: i64) -> CommandOutcome {
        let fail = |message: String| CommandOutcome { ok: false, message };
        let id = match self.load_run(&command.run_id, step, now).await {
            Ok(id) => id,
            Err(message) => return fail(message),
        };
        let payload: Value = serde_json::from_str(&command.payload).unwrap_or(Value::Null);
        let task_named = |engine: &Engine| -> Result<usize, String> {
            let name = payload["task"].as_str().unwrap_or_default();
            engine.runs[&id].machine.workflow().task_index(name).ok_or_else(|| format!("the run has no task `{name}`"))
        };
        let input = match command.kind.as_str() {
            "admit" => {
                self.admit_or_wait(&id, step, now);
                return CommandOutcome { ok: true, message: "admitted".into() };
            }
            "kill" => RunInput::Kill,
            "pause" => RunInput::Pause,
            "resume" => RunInput::Resume,
            "mark_failed" => RunInput::MarkFailed,
            "rerun_failed" => RunInput::RerunFailed,
            "rerun_task" => match task_named(self) {
                Ok(task) => RunInput::RerunTask { task, downstream: payload["downstream"].as_bool().unwrap_or(false) },
                Err(m) => return fail(m),
            },
            "force_success" => match task_named(self) {
                Ok(task) => RunInput::ForceSuccess { task },
                Err(m) => return fail(m),
            },
            other => return fail(format!("unknown command `{other}`")),
        };
        let Some(run) = self.runs.get_mut(&id) else {
            return fail("the run is gone".into());
        };
        let outcome = match run.machine.apply(input, now) {
            Ok(actions) => {
                self.absorb(&id, actions, step, now);
                CommandOutcome { ok: true, message: format!("{} done", command.kind) }
            }
            Err(Rejected::NotAllowed(message) | Rejected::Stale(message)) => fail(message),
        };
        if self.runs.get(&id).is_some_and(|r| r.machine.state().is_terminal()) {
            step.retire.push(id);
        }
        outcome
    }

    // Results ------------------------------------------------------------------------

    /// Applies an attempt's result. Results from workers must be for an
    /// attempt this master has in flight (dispatched or adopted); anything
    /// else is stale (or, for a run of another master's slot, not ours).
    fn apply_result(&mut self, result: AttemptResult, step: &mut Step, now: i64, from_worker: bool) -> Ack {
        let slot_owned = |engine: &Engine| engine.owned.contains(&dagr_protocol::slot_of(&result.key.run_id));
        if from_worker {
            match self.in_flight.remove(&result.key) {
                Some(flight) => {
                    self.release(&flight);
                    let mut row = attempt_row(&result);
                    if let Some(run) = self.runs.get(result.key.run_id.as_str()) {
                        row.epoch = run.row.epoch;
                    }
                    step.batch.attempts.push(row);
                }
                None => {
                    if !slot_owned(self) && !self.runs.contains_key(result.key.run_id.as_str()) {
                        return Ack::NotOwner;
                    }
                    // Superseded, duplicate, or from an old owner's dispatch.
                    self.metrics.stale_results.fetch_add(1, Ordering::Relaxed);
                    return Ack::Stale;
                }
            }
        }
        let Some(id) = self.runs.get_key_value(result.key.run_id.as_str()).map(|(id, _)| id.clone()) else {
            // The run finished (or was killed) meanwhile; the attempt row is
            // recorded above.
            self.metrics.stale_results.fetch_add(1, Ordering::Relaxed);
            return Ack::Stale;
        };
        let Some(run) = self.runs.get_mut(&id) else { return Ack::Stale };
        let task = result.key.task as usize;
        if task >= run.machine.tasks().len() {
            self.metrics.stale_results.fetch_add(1, Ordering::Relaxed);
            return Ack::Stale;
        }
        let attempt = result.key.number;
        let input = match &result.outcome {
            Outcome::Succeeded { .. } => RunInput::AttemptSucceeded { task, attempt },
            Outcome::Failed { kind, .. } => RunInput::AttemptFailed {
                task,
                attempt,
                class: FailureClass {
                    retryable: kind.retryable(),
                    charged: kind.charged(),
                    lost: *kind == FailureKind::WorkerLost,
                },
            },
        };
        match run.machine.apply(input, now) {
            Ok(actions) => {
                match result.outcome {
                    Outcome::Succeeded { output } => {
                        if output.len() <= CACHED_OUTPUT {
                            run.outputs.insert(task, Arc::from(output.as_str()));
                        }
                        step.batch.outputs.push(OutputWrite::Set {
                            run_id: run.row.id.clone(),
                            idx: task as i64,
                            output,
                        });
                    }
                    Outcome::Failed { kind, message } => {
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
                self.absorb(&id, actions, step, now);
                Ack::Applied
            }
            Err(_) => {
                self.metrics.stale_results.fetch_add(1, Ordering::Relaxed);
                Ack::Stale
            }
        }
    }

    fn unpark(&mut self, key: &WorkflowKey) {
        let Some(parked) = self.parked.get_mut(key) else {
            return;
        };
        if let Some(item) = parked.pop_front() {
            self.ready.restore(item);
        }
        if parked.is_empty() {
            self.parked.remove(key);
        }
    }

    // Timers ---------------------------------------------------------------------------

    fn arm(&mut self, at: i64, timer: Timer) {
        self.timer_seq += 1;
        self.timers.insert((at, self.timer_seq), timer);
    }

    fn fire_timers(&mut self, step: &mut Step, now: i64) {
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            match entry.remove() {
                Timer::Retry { run, task } => {
                    let Some(id) = self.runs.get_key_value(run.as_str()).map(|(id, _)| id.clone()) else {
                        continue;
                    };
                    if let Some(active) = self.runs.get_mut(&id)
                        && let Ok(actions) = active.machine.apply(RunInput::RetryDue { task }, now)
                    {
                        self.absorb(&id, actions, step, now);
                    }
                }
                Timer::Schedule { tenant, name } => {
                    if self.leader.is_some() {
                        self.materialize(&(tenant, name), step, now);
                    }
                }
            }
        }
    }

    // Dispatch ------------------------------------------------------------------------

    async fn dispatch_ready(&mut self, step: &mut Step, now: i64) {
        let slots = self.dispatcher.slots();
        while self.in_flight.len() < slots && !self.owned.is_empty() {
            let Some(item) = self.ready.pop() else { break };
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
            let tenant_cap = self.config.policy.limits(&run.row.tenant).and_then(|l| l.max_concurrent);
            if let Some(cap) = tenant_cap
                && self.running_by_tenant.get(&run.tenant).copied().unwrap_or(0) >= cap as usize
            {
                self.parked_by_tenant.entry(run.tenant.clone()).or_default().push_back(item);
                continue;
            }
            let group = run.machine.workflow().tasks[item.task].worker_group.clone();
            let Some(worker) = self.dispatcher.pick(group.as_deref()) else {
                // No worker has room (for this group): wait for one.
                self.ready.restore(item);
                break;
            };
            if !self.start_task(&item.run, item.task, worker, step, now).await {
                // Could not read its inputs; try again in a later step.
                self.ready.restore(item);
                break;
            }
        }
    }

    /// Starts the next attempt of a queued task. False if it could not be
    /// prepared for a transient reason (the task stays queued).
    async fn start_task(&mut self, run_id: &Arc<str>, task: usize, worker: String, step: &mut Step, now: i64) -> bool {
        let mut missing: Vec<i64> = {
            let Some(run) = self.runs.get(run_id) else {
                return true;
            };
            run.machine.workflow().tasks[task]
                .deps
                .iter()
                .filter(|&&d| run.machine.task(d).state == TaskState::Succeeded && !run.outputs.contains_key(&d))
                .map(|&d| d as i64)
                .collect()
        };
        // Outputs written in this very step are not in the store yet.
        if !missing.is_empty() {
            let pending: HashMap<i64, &String> = step
                .batch
                .outputs
                .iter()
                .filter_map(|w| match w {
                    OutputWrite::Set { run_id: r, idx, output } if **r == **run_id => Some((*idx, output)),
                    _ => None,
                })
                .collect();
            if let Some(run) = self.runs.get_mut(run_id) {
                missing.retain(|idx| match pending.get(idx) {
                    Some(output) => {
                        run.outputs.insert(*idx as usize, Arc::from(output.as_str()));
                        false
                    }
                    None => true,
                });
            }
        }
        if !missing.is_empty() {
            match self.store.outputs(run_id, &missing).await {
                Ok(rows) => {
                    if let Some(run) = self.runs.get_mut(run_id) {
                        for (idx, output) in rows {
                            run.outputs.insert(idx as usize, Arc::from(output.as_str()));
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(run = %run_id, error = %e, "cannot read upstream outputs");
                    return false;
                }
            }
        }
        // A plugin published a moment ago (through another node) may not be
        // in the directory's snapshot yet: refresh once before failing.
        if let Some(run) = self.runs.get(run_id) {
            let plugin = &run.machine.workflow().tasks[task].plugin;
            if self.plugins.resolve(&run.row.tenant, &plugin.name, plugin.version.as_deref()).is_err() {
                self.plugins.refresh().await;
            }
        }
        let Some(run) = self.runs.get_mut(run_id) else {
            return true;
        };
        let Ok((attempt, actions)) = run.machine.start_attempt(task) else {
            return true;
        };
        let limits = self.config.policy.limits(&run.row.tenant);
        let spec = build_spec(run, task, attempt, self.plugins.as_ref(), &self.config, limits.as_ref());
        let workflow = run.workflow_key();
        let key = AttemptKey { run_id: run.row.id.clone(), task: task as u32, number: attempt };
        let task_name = run.machine.workflow().tasks[task].name.clone();
        let epoch = run.row.epoch;
        self.absorb(run_id, actions, step, now);
        let started = AttemptRow {
            run_id: key.run_id.clone(),
            task_idx: task as i64,
            number: attempt as i64,
            task: task_name.clone(),
            state: "running".into(),
            failure_kind: None,
            message: None,
            charged: false,
            worker: worker.clone(),
            epoch,
            started_at: now,
            finished_at: None,
        };
        match spec {
            Ok(spec) => {
                step.batch.attempts.push(started);
                let tenant = self.runs.get(run_id).map(|r| r.tenant.clone()).unwrap_or_else(|| Arc::from(""));
                self.count_running(&workflow, &tenant);
                self.in_flight.insert(key, InFlight { workflow, tenant, worker: worker.clone(), confirmed_at: now });
                step.dispatches.push((spec, worker));
            }
            Err((kind, message)) => {
                self.dispatcher.released(&worker);
                let result = AttemptResult {
                    key,
                    epoch,
                    task_name,
                    worker,
                    started_at: now,
                    finished_at: now,
                    outcome: Outcome::Failed { kind, message },
                };
                step.batch.attempts.push(finished_attempt(&result, &started));
                self.apply_result(result, step, now, false);
            }
        }
        true
    }

    // Schedules ----------------------------------------------------------------------

    async fn load_schedules(&mut self, step: &mut Step, now: i64) -> Result<(), dagr_store::Error> {
        for (workflow, version) in self.store.live_workflows().await? {
            self.install_schedule(workflow, version, step, now);
        }
        Ok(())
    }

    async fn reload_schedule(&mut self, tenant: &str, name: &str, step: &mut Step, now: i64) {
        let key = (tenant.to_owned(), name.to_owned());
        let row = match self.store.get_workflow(tenant, name).await {
            Ok(Some(row)) if !row.deleted => row,
            Ok(_) => {
                self.schedules.remove(&key);
                return;
            }
            Err(e) => {
                tracing::warn!(workflow = name, error = %e, "cannot reload the schedule");
                return;
            }
        };
        match self.store.get_version(tenant, name, row.latest_version).await {
            Ok(Some(version)) => self.install_schedule(row, version, step, now),
            Ok(None) => {
                self.schedules.remove(&key);
            }
            Err(e) => tracing::warn!(workflow = name, error = %e, "cannot reload the schedule"),
        }
    }

    fn install_schedule(
        &mut self,
        row: dagr_store::WorkflowRow,
        version: dagr_store::VersionRow,
        step: &mut Step,
        now: i64,
    ) {
        let key = (row.tenant.clone(), row.name.clone());
        let workflow = match WorkflowSpec::parse(&version.spec, Format::Json)
            .map_err(|e| e.to_string())
            .and_then(|spec| Workflow::validate(spec, &TrustedCatalog).map_err(|e| e.to_string()))
        {
            Ok(wf) => Arc::new(wf),
            Err(message) => {
                tracing::error!(workflow = %row.name, %message, "stored definition does not load");
                return;
            }
        };
        let Some(schedule) = workflow.schedule.clone() else {
            self.schedules.remove(&key);
            return;
        };
        let known = self.schedules.get(&key).and_then(|e| e.cursor);
        let mut cursor = match (row.schedule_cursor, known) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        if cursor.is_none() {
            // A new schedule starts now, or at its start when it catches up.
            let initial = match schedule.start {
                Some(start) if schedule.catch_up && start.timestamp_millis() < now => start.timestamp_millis() - 1000,
                _ => now,
            };
            cursor = Some(initial);
            step.batch.schedule_cursors.push((row.tenant.clone(), row.name.clone(), initial));
        }
        self.schedules.insert(
            key.clone(),
            ScheduleEntry {
                version: version.version,
                schedule,
                workflow,
                since: row.schedule_since.unwrap_or(row.created_at),
                cursor,
            },
        );
        self.materialize(&key, step, now);
    }

    /// Creates the runs that are due for a schedule and arms its next fire.
    fn materialize(&mut self, key: &WorkflowKey, step: &mut Step, now: i64) {
        let Some(entry) = self.schedules.get_mut(key) else {
            return;
        };
        let to_time = |ms: i64| Utc.timestamp_millis_opt(ms).single().unwrap_or_default();
        let now_time = to_time(now);
        let cursor = entry.cursor.map(to_time);
        let max_catch_up = self.config.max_catch_up as usize;
        let due = entry.schedule.due(cursor, to_time(entry.since), now_time, max_catch_up, MAX_RUNS_PER_STEP);
        if let Some((first, last)) = due.skipped {
            tracing::warn!(workflow = %key.1, %first, %last, max_catch_up, "schedule: skipping missed cycles");
            step.batch.events.push(NewEvent {
                tenant: key.0.clone(),
                at: now,
                kind: "schedule.skipped".into(),
                run_id: None,
                task: None,
                data: json!({
                    "workflow": key.1,
                    "first": first.to_rfc3339(),
                    "last": last.to_rfc3339(),
                    "reason": format!("more than {max_catch_up} missed cycles to catch up (limit [master] max_catch_up)"),
                })
                .to_string(),
            });
        }
        let params = serde_json::to_string(&entry.workflow.spec.params).unwrap_or_else(|_| "{}".into());
        let task_names: Vec<String> = entry.workflow.tasks.iter().map(|t| t.name.clone()).collect();
        for logical in &due.times {
            let id = uuid::Uuid::now_v7().to_string();
            step.batch.new_runs.push(NewRun {
                run: RunRow {
                    slot: dagr_protocol::slot_of(&id) as i64,
                    id,
                    tenant: key.0.clone(),
                    workflow: key.1.clone(),
                    version: Some(entry.version),
                    kind: RunKind::Schedule,
                    state: RunState::Queued.as_str().into(),
                    logical_time: logical.timestamp_millis(),
                    params: params.clone(),
                    spec: None,
                    backfill_id: None,
                    owner: None,
                    epoch: 0,
                    created_at: now,
                    started_at: None,
                    finished_at: None,
                    updated_at: now,
                },
                tasks: task_names.clone(),
            });
        }
        if let Some(last) = due.times.last() {
            entry.cursor = Some(last.timestamp_millis());
            step.batch.schedule_cursors.push((key.0.clone(), key.1.clone(), last.timestamp_millis()));
            step.batch.new_run_command = Some("admit".into());
            // Admit them in the next step, after they are committed.
            self.pending_wake = true;
        }
        let from = entry.cursor.map(to_time).map_or(now_time, |c| c.max(now_time));
        let next = if due.more {
            // The rest of a catch-up, a second later: a backlog arrives at
            // a bounded rate.
            Some(now + 1000)
        } else {
            entry.schedule.next_after(from).map(|t| t.timestamp_millis())
        };
        if let Some(at) = next {
            self.arm(at, Timer::Schedule { tenant: key.0.clone(), name: key.1.clone() });
        }
    }
}

fn attempt_row(result: &AttemptResult) -> AttemptRow {
    let (state, failure_kind, message, charged) = match &result.outcome {
        Outcome::Succeeded { .. } => ("succeeded", None, None, false),
        Outcome::Failed { kind, message } => {
            ("failed", Some(kind.as_str().to_owned()), Some(message.clone()), kind.charged())
        }
    };
    AttemptRow {
        run_id: result.key.run_id.clone(),
        task_idx: result.key.task as i64,
        number: result.key.number as i64,
        task: result.task_name.clone(),
        state: state.into(),
        failure_kind,
        message,
        charged,
        worker: result.worker.clone(),
        epoch: result.epoch,
        started_at: result.started_at,
        finished_at: Some(result.finished_at),
    }
}

/// Everything a worker needs for one attempt: the plugin resolved, params
/// rendered, inputs gathered, limits set.
fn build_spec(
    run: &ActiveRun,
    task: usize,
    attempt: u32,
    plugins: &dyn PluginDirectory,
    config: &EngineConfig,
    limits: Option<&TenantLimits>,
) -> Result<AttemptSpec, (FailureKind, String)> {
    let workflow = run.machine.workflow();
    let t = &workflow.tasks[task];
    let plugin = plugins
        .resolve(&run.row.tenant, &t.plugin.name, t.plugin.version.as_deref())
        .map_err(|message| (FailureKind::PluginUnavailable, message))?;
    let mut inputs = Map::new();
    for &dep in &t.deps {
        if let Some(output) = run.outputs.get(&dep) {
            let value = serde_json::from_str(output).unwrap_or(Value::Null);
            inputs.insert(workflow.tasks[dep].name.clone(), value);
        }
    }
    let logical_time: DateTime<Utc> = Utc.timestamp_millis_opt(run.row.logical_time).single().unwrap_or_default();
    let context = RenderContext {
        params: &run.params,
        inputs: &inputs,
        logical_time,
        timezone: run.timezone,
        run_id: &run.row.id,
        workflow: &run.row.workflow,
        task: &t.name,
        tenant: &run.row.tenant,
    };
    let params = t
        .params
        .render(&context)
        .map_err(|p| (FailureKind::BadParams, format!("params{}: {}", p.location, p.message)))?;
    Ok(AttemptSpec {
        key: AttemptKey { run_id: run.row.id.clone(), task: task as u32, number: attempt },
        epoch: run.row.epoch,
        master: config.node_id.clone(),
        tenant: run.row.tenant.clone(),
        workflow: run.row.workflow.clone(),
        task_name: t.name.clone(),
        plugin: PluginSpec { name: plugin.name, version: plugin.version, sha256: plugin.sha256 },
        params: params.to_string(),
        inputs: Value::Object(inputs).to_string(),
        logical_time: logical_time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        idempotency_key: format!("{}/{}", run.row.id, t.name),
        priority: t.priority,
        deadline_ms: {
            let asked = t.timeout.unwrap_or(config.default_timeout).as_millis() as u64;
            match limits.and_then(|l| l.max_duration_ms) {
                Some(max) if t.timeout.is_some() && asked > max => {
                    return Err(over_limit(run, "max_duration_ms", format!("a timeout of {asked} ms"), max));
                }
                Some(max) => asked.min(max),
                None => asked,
            }
        },
        memory_bytes: {
            let asked = t.memory.unwrap_or(config.default_memory).min(config.max_memory);
            match limits.and_then(|l| l.max_memory) {
                Some(max) if t.memory.is_some() && asked > max => {
                    return Err(over_limit(run, "max_memory", format!("{asked} bytes of memory"), max));
                }
                Some(max) => asked.min(max),
                None => asked,
            }
        },
        max_output_bytes: config.max_output_bytes,
        max_log_bytes: config.max_log_bytes,
        // A task's hosts stay within its tenant's allowlist, even if the
        // tenant's list shrank after the workflow was applied.
        allow_hosts: match limits {
            None => t.allow_hosts.clone(),
            Some(l) => {
                if let Some(host) = t
                    .allow_hosts
                    .iter()
                    .find(|h| !l.allow_hosts.iter().any(|by| dagr_core::definition::host_covered(h, by)))
                {
                    return Err((
                        FailureKind::TenantLimit,
                        format!(
                            "the task may not reach `{host}`: it is outside tenant `{}`'s network allowlist (limit allow_hosts: {:?})",
                            run.row.tenant, l.allow_hosts
                        ),
                    ));
                }
                t.allow_hosts.clone()
            }
        },
        scratch_bytes: limits.and_then(|l| l.scratch_bytes),
    })
}

/// The failure of a task that asks for more than its tenant's `limit`.
fn over_limit(run: &ActiveRun, limit: &str, asked: String, max: u64) -> (FailureKind, String) {
    (
        FailureKind::TenantLimit,
        format!("the task asks for {asked}, above tenant `{}`'s limit {limit} = {max}", run.row.tenant),
    )
}

fn finished_attempt(result: &AttemptResult, started: &AttemptRow) -> AttemptRow {
    let (state, failure_kind, message, charged) = match &result.outcome {
        Outcome::Succeeded { .. } => ("succeeded", None, None, false),
        Outcome::Failed { kind, message } => {
            ("failed", Some(kind.as_str().to_owned()), Some(message.clone()), kind.charged())
        }
    };
    AttemptRow {
        run_id: started.run_id.clone(),
        task_idx: started.task_idx,
        number: started.number,
        task: started.task.clone(),
        state: state.into(),
        failure_kind,
        message,
        charged,
        worker: started.worker.clone(),
        epoch: started.epoch,
        started_at: started.started_at,
        finished_at: Some(result.finished_at),
    }
}
