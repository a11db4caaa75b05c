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

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use dagr_core::Workflow;
use dagr_core::definition::Format;
use dagr_protocol::commands::Command;
use dagr_protocol::plugins::{PluginDescriptor, PluginDirectory, TrustedCatalog};
use dagr_protocol::tenancy::TenantLimits;
use dagr_protocol::wire::{AttemptKey, AttemptResult, AttemptSpec, FailureKind, Outcome};
use dagr_store::{RunKind, RunOrigin, RunState, TaskState, WriteBatch};

use crate::EngineConfig;
use crate::engine::effects::{Data, Effects, Input, Need, PendingCommand};
use crate::engine::placement::WorkerInfo;
use crate::engine::state::{EngineState, MAX_PASSES};

mod store;
pub use store::{FakeStore, Reader, StoreOp, StoredWorkflow};

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
        env.step(vec![Input::Workers(workers), Input::Ownership(all_slots())]);
        env
    }

    /// [`TestEnv::with`] asking workers about attempts not heard of for
    /// 5 s (`attempt_check`), which also sweeps the owned slots for runs
    /// loaded nowhere as often.
    pub fn checking(workers: Vec<WorkerInfo>) -> TestEnv {
        TestEnv::with(|c| c.attempt_check = Some(std::time::Duration::from_secs(5)), workers)
    }

    /// A fresh engine, `config`'s node, takes over from the one that ran
    /// (as after its death), with the given workers and every slot; the
    /// store stays.
    pub fn take_over(&mut self, config: EngineConfig, workers: Vec<WorkerInfo>) -> Effects {
        self.state = EngineState::new(&config, self.now);
        self.node = config.node_id;
        self.step(vec![Input::Workers(workers), Input::Ownership(all_slots())])
    }

    /// Validates a definition and makes it a live workflow of [`TENANT`].
    pub fn apply(&mut self, yaml: &str) -> Arc<Workflow> {
        let spec = dagr_core::WorkflowSpec::parse(yaml, Format::Yaml).unwrap_or_else(|e| panic!("{e}"));
        let workflow = Arc::new(Workflow::validate(spec, &TrustedCatalog).unwrap_or_else(|e| panic!("{e}")));
        let key = (TENANT.to_owned(), workflow.name().to_owned());
        let version = self.store.workflows.get(&key).map_or(1, |(v, _, _)| v + 1);
        self.store.versions.insert((key.0.clone(), key.1.clone(), version), workflow.clone());
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
        self.claim_elsewhere(&id, owner);
        let row = self.store.runs.get_mut(&id).unwrap_or_else(|| panic!("no run {id}"));
        row.state = RunState::Running;
        row.started_at = Some(self.now);
        id
    }

    /// `owner` claims `run` in the store (its epoch goes up); this engine
    /// hears nothing of it. Returns the new epoch.
    pub fn claim_elsewhere(&mut self, run: &str, owner: &str) -> i64 {
        let row = self.store.runs.get_mut(run).unwrap_or_else(|| panic!("no run {run}"));
        row.owner = Some(owner.into());
        row.epoch += 1;
        row.epoch
    }

    fn made_run(&mut self, tenant: &str, workflow: &str, logical_time: i64, backfill: Option<&str>) -> String {
        let wf = self.workflows.get(workflow).unwrap_or_else(|| panic!("no workflow {workflow}")).clone();
        let version = self.store.workflows.get(&(TENANT.to_owned(), workflow.to_owned())).map_or(1, |(v, _, _)| *v);
        let origin = RunOrigin {
            tenant: tenant.into(),
            version: Some(version),
            kind: if backfill.is_some() { RunKind::Backfill } else { RunKind::Manual },
            logical_time,
            params: serde_json::to_string(&wf.spec.params).unwrap_or_else(|_| "{}".into()),
            spec: None,
            backfill_id: backfill.map(Into::into),
            parent: None,
            tenant_capped: false,
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

    /// A worker's result for `key`, as an input (for a step with more).
    pub fn result(&self, key: &AttemptKey, outcome: Outcome) -> Input {
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
        Input::Result { result, ack: Some(1) }
    }

    /// A step with a worker's result for `key`.
    pub fn report(&mut self, key: &AttemptKey, outcome: Outcome) -> Effects {
        let input = self.result(key, outcome);
        self.step(vec![input])
    }

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

    /// A step in which attempt `key` succeeded with `output`.
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

/// The runs whose tasks a step dispatched, in order.
pub fn dispatched_runs(effects: &Effects) -> Vec<String> {
    effects.dispatches.iter().map(|(s, _)| s.key.run_id.clone()).collect()
}

/// Every slot.
pub fn all_slots() -> std::collections::HashSet<u32> {
    (0..dagr_protocol::SLOTS).collect()
}

/// Inputs by which this master loses every slot and gains them all back
/// in one step: its runs are dropped and claimed again.
pub fn lost_and_regained() -> Vec<Input> {
    vec![Input::Ownership(Default::default()), Input::Ownership(all_slots())]
}

/// The task names dispatched in a step, in order.
pub fn dispatched_names(effects: &Effects) -> Vec<String> {
    effects.dispatches.iter().map(|(s, _): &(AttemptSpec, String)| s.task_name.clone()).collect()
}
