//! A test bench for the engine's state machine: an [`EngineState`] on a
//! fake clock, with an in-memory store that answers its [`Need`]s the way
//! the shell would, so a test builds a situation from a few lines and
//! asserts on the [`Effects`] of each step (the idea of Restate's
//! `TestEnv`). Used by the unit tests, the engine benchmark and the
//! simulation; nothing here does I/O.
//!
//! ```ignore
//! let mut env = TestEnv::new();
//! env.apply("name: w\ntasks:\n- {name: a, plugin: echo}\n");
//! let run = env.trigger("w");
//! let effects = env.step(vec![]);                 // reads the admit command, dispatches `a`
//! let a = env.dispatched("a");
//! env.succeed(&a, "{}");
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use dagr_core::Workflow;
use dagr_core::definition::Format;
use dagr_protocol::commands::Command;
use dagr_protocol::plugins::{PluginDescriptor, PluginDirectory, TrustedCatalog};
use dagr_protocol::tenancy::TenantLimits;
use dagr_protocol::wire::{AttemptKey, AttemptResult, AttemptSpec, FailureKind, Outcome};
use dagr_store::admission;
use dagr_store::{
    AttemptRow, AttemptState, Committed, OutputWrite, RunKind, RunOrigin, RunRow, RunState, TaskRow, TaskState,
    WriteBatch,
};

use crate::EngineConfig;
use crate::engine::effects::{
    Data, Effects, Input, LoadError, LoadedRun, Need, PendingCommand, ScheduleRow, ScheduleSource,
};
use crate::engine::placement::WorkerInfo;
use crate::engine::state::{EngineState, MAX_PASSES};

/// A plugin directory that knows every plugin but those named `missing*`
/// (until it is refreshed with `publish_on_refresh`).
#[derive(Debug, Default)]
pub struct FakePlugins {
    /// Made known by the next refresh.
    pub publish_on_refresh: AtomicBool,
    published: AtomicBool,
}

#[async_trait]
impl PluginDirectory for FakePlugins {
    fn list(&self, _tenant: &str) -> Vec<PluginDescriptor> {
        Vec::new()
    }

    fn resolve(&self, _tenant: &str, name: &str, version: Option<&str>) -> Result<PluginDescriptor, String> {
        if name.starts_with("missing") && !self.published.load(Ordering::Relaxed) {
            return Err(format!("no plugin `{name}`"));
        }
        Ok(PluginDescriptor {
            name: name.into(),
            version: version.unwrap_or("1.0.0").into(),
            description: String::new(),
            params_schema: None,
            sha256: format!("sha-of-{name}"),
            size: 0,
            builtin: true,
        })
    }

    async fn refresh(&self) {
        if self.publish_on_refresh.load(Ordering::Relaxed) {
            self.published.store(true, Ordering::Relaxed);
        }
    }
}

/// A live workflow in the fake store: version, definition, schedule cursor.
pub type StoredWorkflow = (i64, Arc<Workflow>, Option<i64>);

/// What the fake store keeps.
#[derive(Debug, Default)]
pub struct FakeStore {
    pub runs: BTreeMap<String, RunRow>,
    pub tasks: BTreeMap<String, Vec<TaskRow>>,
    pub outputs: BTreeMap<(String, i64), String>,
    pub attempts: BTreeMap<(String, i64, i64), AttemptRow>,
    pub commands: Vec<(i64, String, Command)>,
    pub done: BTreeMap<i64, String>,
    pub events: Vec<dagr_store::NewEvent>,
    /// Live workflows: (tenant, name) → (version, workflow, cursor).
    pub workflows: BTreeMap<(String, String), StoredWorkflow>,
    /// Runs whose loading fails (for the failure paths).
    pub unloadable: HashMap<String, LoadError>,
    /// Backfills' parallelism, by id (a backfill not here has none).
    pub backfills: HashMap<String, usize>,
    /// Schedules taken offline: (tenant, workflow).
    pub paused: HashSet<(String, String)>,
    /// Waits recorded: run → (upstream workflow, from, to).
    pub waits: BTreeMap<String, Vec<(String, i64, i64, bool)>>,
    /// (tenant, upstream run, the run it released).
    pub links: Vec<(String, String, String)>,
    /// Singleton duties: name → the highest token that acquired it.
    pub singletons: HashMap<String, i64>,
    /// Every write taken, in order, when kept (to check this model against
    /// the real store: [`StoreOp`]).
    pub journal: Option<Vec<StoreOp>>,
    next_command: i64,
}

/// A write the model store took, and what it answered.
#[derive(Debug, Clone)]
pub enum StoreOp {
    /// A run made as the API makes one, with its admit command.
    Create(dagr_store::NewRun),
    /// A run claimed: the epoch it has after the claim.
    Claim { id: String, node: String, epoch: i64 },
    /// A singleton duty asked for: whether the token holds it.
    Acquire { name: String, token: i64, held: bool },
    /// A batch committed: the runs it was fenced off, and whether its
    /// schedule writes were.
    Commit { batch: WriteBatch, fenced: Vec<String>, singleton_fenced: bool },
}

/// Who reads the fake store, for [`FakeStore::answer`].
pub struct Reader<'a> {
    /// The master (owner of what it claims).
    pub node: &'a str,
    pub now: i64,
    pub plugins: &'a FakePlugins,
    /// Whether the master already has a run (it is not claimed again).
    pub has_run: &'a dyn Fn(&str) -> bool,
}

impl FakeStore {
    /// Inserts a new run with its pending task rows.
    pub fn insert_run(&mut self, new: dagr_store::NewRun) {
        let id = new.run.id.clone();
        let tasks = new
            .tasks
            .iter()
            .enumerate()
            .map(|(i, name)| TaskRow {
                run_id: id.clone(),
                idx: i as i64,
                name: name.clone(),
                state: TaskState::Pending,
                attempts: 0,
                failures: 0,
                lost: 0,
                forced: false,
                retry_at: None,
                error: None,
                started_at: None,
                finished_at: None,
                child_run: None,
            })
            .collect();
        self.tasks.insert(id.clone(), tasks);
        self.runs.insert(id, new.run);
    }

    /// Makes a run as the API does (with its admit command).
    pub fn create_run(&mut self, new: dagr_store::NewRun) {
        let id = new.run.id.clone();
        if let Some(journal) = &mut self.journal {
            journal.push(StoreOp::Create(new.clone()));
        }
        self.insert_run(new);
        self.command(&id, Command::Admit);
    }

    /// Writes a command for a run; returns it as a master reads it.
    pub fn command(&mut self, run: &str, command: Command) -> PendingCommand {
        self.next_command += 1;
        let id = self.next_command;
        let slot = self.runs.get(run).map_or(0, |r| r.slot as u32);
        self.commands.push((id, run.to_owned(), command.clone()));
        PendingCommand { id, run_id: run.to_owned(), slot, command: Ok(command) }
    }

    /// The commands after `cursor` not yet done, oldest first, at most
    /// `limit` (as the store's `pending_commands`).
    pub fn commands_after(&self, cursor: i64, limit: usize) -> Vec<PendingCommand> {
        self.commands
            .iter()
            .filter(|(id, _, _)| *id > cursor && !self.done.contains_key(id))
            .take(limit)
            .map(|(id, run, command)| PendingCommand {
                id: *id,
                run_id: run.clone(),
                slot: self.runs.get(run).map_or(0, |r| r.slot as u32),
                command: Ok(command.clone()),
            })
            .collect()
    }

    /// A workflow by name (shared by every tenant of the bench).
    fn workflow_named(&self, name: &str) -> Option<Arc<Workflow>> {
        self.workflows.iter().find(|((_, n), _)| n == name).map(|(_, (_, w, _))| w.clone())
    }

    /// Records `token` as the holder of a singleton duty unless a higher
    /// one holds it; whether `token` holds it now.
    pub fn acquire_singleton(&mut self, name: &str, token: i64) -> bool {
        let held = self.singletons.entry(name.to_owned()).or_insert(token);
        if *held <= token {
            *held = token;
        }
        let held = *held == token;
        if let Some(journal) = &mut self.journal {
            journal.push(StoreOp::Acquire { name: name.to_owned(), token, held });
        }
        held
    }

    /// Answers a master's needs as the shell would (claims bump epochs
    /// and make `reader.node` the owner).
    pub fn answer(&mut self, needs: Vec<Need>, reader: &Reader<'_>) -> Data {
        let mut data = Data::default();
        for need in needs {
            match need {
                Need::Claim(runs) => {
                    for id in runs {
                        if (reader.has_run)(&id) || data.loaded.iter().any(|l| l.row.id == id) {
                            continue;
                        }
                        match self.load(&id, reader.node) {
                            Ok(loaded) => data.loaded.push(loaded),
                            Err(e) => data.failed.push((id, e)),
                        }
                    }
                }
                Need::Slots(slots) => {
                    let set: HashSet<u32> = slots.iter().copied().collect();
                    let ids: Vec<String> = self
                        .runs
                        .values()
                        .filter(|r| set.contains(&(r.slot as u32)) && !r.state.is_terminal())
                        .map(|r| r.id.clone())
                        .filter(|id| !(reader.has_run)(id) && !data.loaded.iter().any(|l| l.row.id == *id))
                        .collect();
                    for id in ids {
                        match self.load(&id, reader.node) {
                            Ok(loaded) => data.loaded.push(loaded),
                            Err(e) => data.failed.push((id, e)),
                        }
                    }
                    data.gained.extend(slots);
                }
                Need::Owners(slots) => {
                    let set: HashSet<u32> = slots.iter().copied().collect();
                    data.owners.extend(
                        self.runs
                            .values()
                            .filter(|r| set.contains(&(r.slot as u32)) && !r.state.is_terminal())
                            .map(|r| (r.id.clone(), r.slot as u32, r.owner.clone())),
                    );
                }
                Need::Outputs { run, idxs } => {
                    for idx in idxs {
                        data.outputs.push((run.clone(), idx, self.outputs.get(&(run.clone(), idx)).cloned()));
                    }
                }
                Need::RefreshPlugins => {
                    futures::executor::block_on(reader.plugins.refresh());
                    data.plugins_refreshed = true;
                }
                Need::Lead(token) if !self.acquire_singleton(crate::engine::SCHEDULER, token) => {
                    data.lead = Some((token, None));
                }
                Need::Lead(token) => {
                    let schedules = self
                        .workflows
                        .iter()
                        .map(|((tenant, name), (version, workflow, cursor))| ScheduleSource {
                            tenant: tenant.clone(),
                            name: name.clone(),
                            current: Some(ScheduleRow {
                                version: *version,
                                workflow: workflow.clone(),
                                cursor: *cursor,
                                since: reader.now,
                                paused: false,
                            }),
                        })
                        .collect();
                    data.lead = Some((token, Some(schedules)));
                }
                Need::Schedule { tenant, name } => {
                    let current =
                        self.workflows.get(&(tenant.clone(), name.clone())).map(|(version, workflow, cursor)| {
                            ScheduleRow {
                                version: *version,
                                workflow: workflow.clone(),
                                cursor: *cursor,
                                since: reader.now,
                                paused: self.paused.contains(&(tenant.clone(), name.clone())),
                            }
                        });
                    data.schedules.push(ScheduleSource { tenant, name, current });
                }
                Need::Watched => {
                    let mut watched: Vec<(String, String, Option<String>)> = Vec::new();
                    for ((tenant, _), (_, workflow, _)) in &self.workflows {
                        for u in workflow.upstream.iter().chain(workflow.tasks.iter().flat_map(|t| &t.upstream)) {
                            watched.push((tenant.clone(), u.workflow.clone(), u.task.clone()));
                        }
                    }
                    data.watched = Some(watched);
                }
                Need::WatchedBy { tenant, workflow } => {
                    if let Some((_, wf, _)) = self.workflows.get(&(tenant.clone(), workflow)) {
                        for u in wf.upstream.iter().chain(wf.tasks.iter().flat_map(|t| &t.upstream)) {
                            data.watched_add.push((tenant.clone(), u.workflow.clone(), u.task.clone()));
                        }
                    }
                }
                Need::Workflows { tenant, names } => {
                    for name in names {
                        let found =
                            self.workflows.get(&(tenant.clone(), name.clone())).map(|(v, w, _)| (*v, w.clone()));
                        data.workflows.push((tenant.clone(), name, found));
                    }
                }
                Need::UpstreamRuns(query) | Need::Settled(query) => {
                    let runs = self
                        .runs
                        .values()
                        .filter(|r| {
                            r.tenant == query.tenant
                                && r.workflow == query.workflow
                                && r.logical_time >= query.from
                                && r.logical_time <= query.to
                        })
                        .map(|r| dagr_store::CycleRun {
                            id: r.id.clone(),
                            logical_time: r.logical_time,
                            state: r.state,
                            task_state: query.task.as_ref().and_then(|t| {
                                self.tasks.get(&r.id).and_then(|ts| ts.iter().find(|x| &x.name == t)).map(|x| x.state)
                            }),
                        })
                        .collect();
                    data.upstream_runs.push((query, runs));
                }
                Need::ReleasedBy(run) => {
                    let mut released: Vec<String> =
                        self.links.iter().filter(|(_, up, _)| *up == run).map(|(_, _, down)| down.clone()).collect();
                    released.sort();
                    released.dedup();
                    data.released.push((run, released));
                }
            }
        }
        data
    }

    /// Claims a run (its epoch goes up) and loads it, as the shell does.
    pub fn load(&mut self, id: &str, node: &str) -> Result<LoadedRun, LoadError> {
        if let Some(e) = self.unloadable.get(id) {
            return Err(e.clone());
        }
        let row = self.runs.get_mut(id).ok_or_else(|| LoadError::Gone(format!("there is no run {id}")))?;
        row.epoch += 1;
        row.owner = Some(node.to_owned());
        let row = row.clone();
        if let Some(journal) = &mut self.journal {
            journal.push(StoreOp::Claim { id: id.to_owned(), node: node.to_owned(), epoch: row.epoch });
        }
        let workflow = self.workflow_named(&row.workflow).ok_or_else(|| LoadError::Invalid("no workflow".into()))?;
        let fresh = row.epoch == 1 && row.state == RunState::Queued;
        let tasks = (!fresh).then(|| self.tasks.get(id).cloned().unwrap_or_default());
        let running =
            self.attempts.values().filter(|a| a.run_id == id && a.state == AttemptState::Running).cloned().collect();
        let backfill_parallel = row.backfill_id.as_ref().and_then(|b| self.backfills.get(b).copied());
        Ok(LoadedRun { row, tasks, workflow, backfill_parallel, running })
    }

    /// Applies a batch (fencing by epoch and by the scheduler's token like
    /// the real store); returns what was committed and the commands it
    /// wrote.
    pub fn commit(&mut self, batch: &WriteBatch) -> (Committed, Vec<PendingCommand>) {
        let mut written = Vec::new();
        let mut committed = Committed::default();
        let mut stale: HashSet<&str> = batch
            .fences
            .iter()
            .filter(|(id, epoch)| self.runs.get(id).is_some_and(|r| r.epoch != *epoch))
            .map(|(id, _)| id.as_str())
            .collect();
        committed.fenced = stale.iter().map(|s| s.to_string()).collect();
        committed.fenced.sort();
        if !batch.admissions.is_empty() {
            // Admissions past their limits, counted as the SQL store does.
            let mut live = batch.clone();
            admission::drop_writes(&mut live, &committed.fenced.iter().cloned().collect());
            let stored: Vec<(admission::Limit, Vec<String>)> = admission::limits(&live)
                .into_iter()
                .map(|limit| {
                    let ids = self
                        .runs
                        .values()
                        .filter(|r| matches!(r.state, RunState::Running | RunState::Paused))
                        .filter(|r| r.tenant == limit.tenant && r.workflow == limit.workflow)
                        .filter(|r| limit.backfill.is_none() || r.backfill_id == limit.backfill)
                        .map(|r| r.id.clone())
                        .collect();
                    (limit, ids)
                })
                .collect();
            let over = admission::over_limit(&live, &stored);
            stale.extend(batch.admissions.iter().filter(|a| over.contains(&a.run_id)).map(|a| a.run_id.as_str()));
            committed.over_limit = over.into_iter().collect();
            committed.over_limit.sort();
        }
        let mut new_runs: &[dagr_store::NewRun] = &batch.new_runs;
        let mut cursors: &[(String, String, i64)] = &batch.schedule_cursors;
        if let Some((name, token)) = &batch.singleton
            && self.singletons.get(name).is_some_and(|held| held > token)
        {
            new_runs = &[];
            cursors = &[];
            committed.singleton_fenced = true;
        }
        for new in new_runs {
            let duplicate = self.runs.values().any(|r| {
                r.workflow == new.run.workflow && r.logical_time == new.run.logical_time && r.kind == RunKind::Schedule
            });
            if duplicate {
                continue;
            }
            let id = new.run.id.clone();
            self.insert_run(new.clone());
            if batch.new_run_command.is_some() {
                written.push(self.command(&id, Command::Admit));
            }
        }
        for new in &batch.child_runs {
            if new.run.parent_run.as_deref().is_some_and(|p| stale.contains(p)) {
                continue;
            }
            let id = new.run.id.clone();
            self.insert_run(new.clone());
            written.push(self.command(&id, Command::Admit));
        }
        for id in &batch.clear_waits {
            self.waits.remove(id);
        }
        for w in &batch.run_waits {
            self.waits.entry(w.run_id.clone()).or_default().push((
                w.upstream.clone(),
                w.from_time,
                w.to_time,
                w.failures_only,
            ));
        }
        // The runs some span of which `hit` matches, as the store's wake-up
        // statements find them.
        type Span = (String, i64, i64, bool);
        let woken = |waits: &BTreeMap<String, Vec<Span>>, hit: &dyn Fn(&Span) -> bool| -> Vec<String> {
            waits.iter().filter(|(_, spans)| spans.iter().any(hit)).map(|(run, _)| run.clone()).collect()
        };
        let mut wake_runs = Vec::new();
        for (_, upstream) in &batch.wake_all {
            wake_runs.extend(woken(&self.waits, &|(up, ..)| up == upstream));
        }
        for wake in &batch.wakes {
            wake_runs.extend(woken(&self.waits, &|(up, from, to, failures_only)| {
                *up == wake.workflow
                    && *from <= wake.logical_time
                    && wake.logical_time <= *to
                    && (!failures_only || wake.failed)
            }));
        }
        for run in wake_runs {
            written.push(self.command(&run, Command::Wake));
        }
        self.links.extend(batch.links.iter().cloned());
        for c in &batch.commands {
            let command = Command::decode(&c.command.kind, &c.command.payload).unwrap_or(Command::Wake);
            written.push(self.command(&c.run_id, command));
        }
        for w in batch.runs.iter().filter(|w| !stale.contains(w.id.as_str())) {
            if let Some(r) = self.runs.get_mut(&w.id) {
                r.state = w.state;
                r.started_at = w.started_at.or(r.started_at);
                r.finished_at = w.finished_at;
                r.updated_at = w.updated_at;
            }
        }
        for t in batch.tasks.iter().filter(|t| !stale.contains(t.run_id.as_str())) {
            if let Some(rows) = self.tasks.get_mut(&t.run_id)
                && let Some(row) = rows.get_mut(t.idx as usize)
            {
                *row = t.clone();
            }
        }
        for o in &batch.outputs {
            match o {
                OutputWrite::Set { run_id, idx, output } if !stale.contains(run_id.as_str()) => {
                    self.outputs.insert((run_id.clone(), *idx), output.clone());
                }
                OutputWrite::Clear { run_id, idx } if !stale.contains(run_id.as_str()) => {
                    self.outputs.remove(&(run_id.clone(), *idx));
                }
                _ => {}
            }
        }
        for a in batch.attempts.iter().filter(|a| !stale.contains(a.run_id.as_str())) {
            // As the real upsert: an attempt's end changes its outcome, not
            // who ran it, under which epoch, or when it started.
            match self.attempts.get_mut(&(a.run_id.clone(), a.task_idx, a.number)) {
                Some(row) => {
                    row.state = a.state;
                    row.failure_kind = a.failure_kind;
                    row.message = a.message.clone();
                    row.charged = a.charged;
                    row.finished_at = a.finished_at;
                }
                None => {
                    self.attempts.insert((a.run_id.clone(), a.task_idx, a.number), a.clone());
                }
            }
        }
        self.events
            .extend(batch.events.iter().filter(|e| e.run_id.as_deref().is_none_or(|r| !stale.contains(r))).cloned());
        for done in batch.commands_done.iter().filter(|c| !stale.contains(c.run_id.as_str())) {
            self.done.insert(done.id, done.result.clone());
        }
        for (tenant, name, cursor) in cursors {
            if let Some(w) = self.workflows.get_mut(&(tenant.clone(), name.clone())) {
                w.2 = Some(*cursor);
            }
        }
        if let Some(journal) = &mut self.journal {
            journal.push(StoreOp::Commit {
                batch: batch.clone(),
                fenced: committed.fenced.clone(),
                singleton_fenced: committed.singleton_fenced,
            });
        }
        (committed, written)
    }
}

/// The engine's state on a fake clock with a fake store. See the module docs.
pub struct TestEnv {
    pub state: EngineState,
    pub store: FakeStore,
    pub plugins: FakePlugins,
    /// The fake clock (ms).
    pub now: i64,
    pub node: String,
    /// Tenants' limits handed to the state at the next step, if set.
    pub limits: Option<HashMap<String, TenantLimits>>,
    /// Every batch committed, in order.
    pub batches: Vec<WriteBatch>,
    /// Commands not yet read by the engine.
    unread: Vec<PendingCommand>,
    /// Inputs for the next step (what the API would have told the engine).
    pending: Vec<Input>,
    /// What the last step asked for and got.
    pub needs_seen: Vec<Need>,
    workflows: HashMap<String, Arc<Workflow>>,
    next_token: i64,
}

/// The tenant of the test bench's runs.
pub const TENANT: &str = "t";

impl TestEnv {
    /// An engine with one worker `w1` of 8 slots, owning every slot.
    pub fn new() -> TestEnv {
        TestEnv::with(|_| {}, vec![worker("w1", 8)])
    }

    /// An engine with a changed config and the given workers, owning every
    /// slot.
    pub fn with(adjust: impl FnOnce(&mut EngineConfig), workers: Vec<WorkerInfo>) -> TestEnv {
        let mut config = EngineConfig { node_id: "m1".into(), ..EngineConfig::default() };
        adjust(&mut config);
        let now = 1_700_000_000_000;
        let mut env = TestEnv {
            state: EngineState::new(&config, now),
            store: FakeStore::default(),
            plugins: FakePlugins::default(),
            now,
            node: config.node_id.clone(),
            limits: None,
            batches: Vec::new(),
            unread: Vec::new(),
            pending: Vec::new(),
            needs_seen: Vec::new(),
            workflows: HashMap::new(),
            next_token: 0,
        };
        env.step(vec![Input::Workers(workers), Input::Ownership((0..dagr_protocol::SLOTS).collect())]);
        env
    }

    /// A fresh engine, `config`'s node, takes over from the one that ran
    /// (as after its death), with the given workers and every slot; the
    /// store stays.
    pub fn take_over(&mut self, config: EngineConfig, workers: Vec<WorkerInfo>) -> Effects {
        self.state = EngineState::new(&config, self.now);
        self.node = config.node_id;
        self.step(vec![Input::Workers(workers), Input::Ownership((0..dagr_protocol::SLOTS).collect())])
    }

    /// Validates a definition and makes it a live workflow of [`TENANT`].
    pub fn apply(&mut self, yaml: &str) -> Arc<Workflow> {
        let spec = dagr_core::WorkflowSpec::parse(yaml, Format::Yaml).unwrap_or_else(|e| panic!("{e}"));
        let workflow = Arc::new(Workflow::validate(spec, &TrustedCatalog).unwrap_or_else(|e| panic!("{e}")));
        let key = (TENANT.to_owned(), workflow.name().to_owned());
        let version = self.store.workflows.get(&key).map_or(1, |(v, _, _)| v + 1);
        self.store.workflows.insert(key, (version, workflow.clone(), None));
        self.workflows.insert(workflow.name().to_owned(), workflow.clone());
        // As the API tells the engine.
        self.pending.push(Input::WorkflowChanged { tenant: TENANT.into(), name: workflow.name().into() });
        workflow
    }

    /// Creates a queued run of `workflow` (with an admit command, as the
    /// API does); returns its id. The engine sees it at the next step.
    pub fn trigger(&mut self, workflow: &str) -> String {
        self.trigger_at(workflow, self.now, None)
    }

    /// A run for a logical time, optionally part of a backfill.
    pub fn trigger_at(&mut self, workflow: &str, logical_time: i64, backfill: Option<&str>) -> String {
        self.trigger_as(TENANT, workflow, logical_time, backfill)
    }

    /// A run of another tenant (the workflow is shared by name).
    pub fn trigger_as(&mut self, tenant: &str, workflow: &str, logical_time: i64, backfill: Option<&str>) -> String {
        let id = self.made_run(tenant, workflow, logical_time, backfill);
        self.command(&id, Command::Admit);
        id
    }

    /// A run another master made and started, and drives: in the store
    /// it is running, claimed by `owner`; this engine has heard nothing
    /// of it.
    pub fn run_elsewhere(&mut self, workflow: &str, owner: &str) -> String {
        let id = self.made_run(TENANT, workflow, self.now, None);
        let row = self.store.runs.get_mut(&id).unwrap_or_else(|| panic!("no run {id}"));
        row.state = RunState::Running;
        row.owner = Some(owner.into());
        row.epoch += 1;
        row.started_at = Some(self.now);
        id
    }

    fn made_run(&mut self, tenant: &str, workflow: &str, logical_time: i64, backfill: Option<&str>) -> String {
        let wf = self.workflows.get(workflow).unwrap_or_else(|| panic!("no workflow {workflow}")).clone();
        let origin = RunOrigin {
            tenant: tenant.into(),
            version: Some(1),
            kind: if backfill.is_some() { RunKind::Backfill } else { RunKind::Manual },
            logical_time,
            params: serde_json::to_string(&wf.spec.params).unwrap_or_else(|_| "{}".into()),
            spec: None,
            backfill_id: backfill.map(Into::into),
            parent: None,
        };
        let new = dagr_store::NewRun::new(&wf, origin, self.now);
        let id = new.run.id.clone();
        self.insert_run(new);
        id
    }

    fn insert_run(&mut self, new: dagr_store::NewRun) {
        self.store.insert_run(new);
    }

    /// Writes a command for a run; the engine reads it at the next step.
    pub fn command(&mut self, run: &str, command: Command) -> i64 {
        let pending = self.store.command(run, command);
        let id = pending.id;
        self.unread.push(pending);
        id
    }

    /// Moves the clock.
    pub fn advance(&mut self, ms: i64) {
        self.now += ms;
    }

    /// One step with `inputs` (and the commands written since the last
    /// one), its needs answered from the fake store, committed into it.
    pub fn step(&mut self, given: Vec<Input>) -> Effects {
        let mut inputs: Vec<Input> = std::mem::take(&mut self.pending);
        inputs.extend(given);
        let commands = std::mem::take(&mut self.unread);
        if !commands.is_empty() {
            inputs.push(Input::Commands(commands));
        }
        let mut effects = Effects::default();
        self.state.begin(&mut effects);
        let mut data = Data { tenant_limits: self.limits.take().map(Arc::new), ..Data::default() };
        self.needs_seen.clear();
        for pass in 0..MAX_PASSES {
            self.state.step(&mut effects, std::mem::take(&mut inputs), data, &self.plugins, self.now);
            let Some(needs) = self.state.needs_to_read(&mut effects, pass) else { break };
            self.needs_seen.extend(needs.iter().cloned());
            let (state, node, now, plugins) = (&self.state, self.node.as_str(), self.now, &self.plugins);
            let has_run = |id: &str| state.has_run(id);
            data = self.store.answer(needs, &Reader { node, now, plugins, has_run: &has_run });
        }
        self.state.seal(&mut effects, self.now);
        let (committed, written) = self.store.commit(&effects.batch);
        self.unread.extend(written);
        self.batches.push(effects.batch.clone());
        self.state.committed(&committed);
        effects
    }

    /// A step with a worker's result for `key`.
    pub fn report(&mut self, key: &AttemptKey, outcome: Outcome) -> Effects {
        let run_epoch = self.state.runs.get(key.run_id.as_str()).map_or(0, |r| r.row.epoch);
        let result = AttemptResult {
            key: key.clone(),
            epoch: run_epoch,
            task_name: String::new(),
            worker: "w1".into(),
            started_at: self.now,
            finished_at: self.now,
            outcome,
            trace: None,
        };
        self.step(vec![Input::Result { result, ack: Some(1) }])
    }

    /// A step in which attempt `key` succeeded with `output`.
    /// A step in which `worker` answers the dispatch of `specs`.
    pub fn answer(
        &mut self,
        worker: &str,
        specs: &[AttemptSpec],
        answer: Result<crate::Accepted, crate::DispatchError>,
    ) -> Effects {
        let sent = crate::engine::sent_of(specs);
        self.step(vec![Input::Dispatched { worker: worker.to_owned(), sent, answer }])
    }

    pub fn succeed(&mut self, key: &AttemptKey, output: &str) -> Effects {
        self.report(key, Outcome::Succeeded { output: output.into() })
    }

    /// A step in which attempt `key` failed as `kind`.
    pub fn fail(&mut self, key: &AttemptKey, kind: FailureKind) -> Effects {
        self.report(key, Outcome::Failed { kind, message: format!("it {kind}") })
    }

    /// The attempt of task `task` (of any run) in flight now.
    pub fn in_flight(&self, task: &str) -> AttemptKey {
        self.in_flight_all(task).into_iter().next().unwrap_or_else(|| panic!("no attempt of {task} in flight"))
    }

    /// Every attempt of tasks named `task` in flight now.
    pub fn in_flight_all(&self, task: &str) -> Vec<AttemptKey> {
        let mut keys: Vec<AttemptKey> = self
            .state
            .in_flight
            .keys()
            .filter(|k| {
                self.state
                    .runs
                    .get(k.run_id.as_str())
                    .is_some_and(|r| r.machine.workflow().tasks[k.task as usize].name == task)
            })
            .cloned()
            .collect();
        keys.sort_by(|a, b| (&a.run_id, a.task, a.number).cmp(&(&b.run_id, b.task, b.number)));
        keys
    }

    /// A run's state as the engine has it (or as stored, once retired).
    pub fn run_state(&self, run: &str) -> RunState {
        match self.state.runs.get(run) {
            Some(r) => r.machine.state(),
            None => self.store.runs.get(run).map_or(RunState::Queued, |r| r.state),
        }
    }

    /// A task's state as stored.
    pub fn task_state(&self, run: &str, task: &str) -> TaskState {
        self.store.tasks[run].iter().find(|t| t.name == task).map_or(TaskState::Pending, |t| t.state)
    }

    /// Makes this engine the leader with a fresh token.
    pub fn lead(&mut self) -> Effects {
        self.next_token += 1;
        self.step(vec![Input::Leadership(Some(self.next_token))])
    }

    /// A command's recorded outcome.
    pub fn outcome(&self, id: i64) -> Option<serde_json::Value> {
        self.store.done.get(&id).and_then(|o| serde_json::from_str(o).ok())
    }
}

impl Default for TestEnv {
    fn default() -> Self {
        TestEnv::new()
    }
}

/// A worker with `slots` slots, of no group.
pub fn worker(id: &str, slots: u32) -> WorkerInfo {
    WorkerInfo { id: id.into(), capacity: slots, group: None, any_group: false, lease: 0 }
}

/// The dispatches of a step: (run, task index, worker).
pub fn dispatched(effects: &Effects) -> Vec<(String, usize, String)> {
    effects.dispatches.iter().map(|(s, w)| (s.key.run_id.clone(), s.key.task as usize, w.clone())).collect()
}

/// The task names dispatched in a step, in order.
pub fn dispatched_names(effects: &Effects) -> Vec<String> {
    effects.dispatches.iter().map(|(s, _): &(AttemptSpec, String)| s.task_name.clone()).collect()
}
