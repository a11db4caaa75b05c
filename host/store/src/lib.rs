//! dagr's durable state: workflows and their versions, runs, task
//! instances, attempts, outputs, logs, the event log, commands and
//! backfills.
//!
//! # Brief overview
//!
//! - [`Store`] is the trait every part of dagr talks to. [`SqlStore`]
//!   implements it on SQLite (the embedded default) and PostgreSQL (cluster
//!   mode) through sqlx, with one set of queries and one migration folder per
//!   backend.
//! - The engine writes through [`WriteBatch`]: every state change of one
//!   engine step — task and run states, attempts, outputs, events, consumed
//!   commands — commits in one transaction, so a crash leaves either all of
//!   a step or none of it. A batch may be *fenced*: its writes for a run
//!   apply only while the run's ownership epoch is the one the writer holds.
//! - [`TenancyStore`], a supertrait of [`Store`]: tenants and their limits,
//!   API tokens (only hashes), secrets and the audit log.
//! - [`ReadStore`], another: the API's paged and keyed reads of a run's
//!   tasks.
//! - Rows are plain structs ([`RunRow`], [`TaskRow`], …); times are
//!   milliseconds since the Unix epoch.

pub mod admission;
pub mod alerts;
pub mod archive;
pub mod conformance;
mod conformance_admission;
mod conformance_archive;
mod conformance_outer;
mod conformance_tenancy;
mod logs;
mod migrations;
#[cfg(test)]
mod migrations_agree;
pub mod outer;
mod reads;
mod registry;
mod sql;
mod sql_alerts;
mod sql_api;
mod sql_archive;
mod sql_commit;
mod sql_events;
mod sql_outer;
mod sql_registry;
mod sql_rows;
mod sql_script;
mod sql_tenancy;
mod sql_wal;
mod sql_webhooks;
pub mod tenancy;
pub mod webhooks;

use std::fmt;

use async_trait::async_trait;
pub use dagr_core::attempt::{AttemptState, FailureKind};
pub use dagr_core::{RunState, TaskState};
use serde::{Deserialize, Serialize};

pub use crate::alerts::{AlertRow, AlertRuleRow, AlertStore, DueSla, NewAlert};
pub use crate::archive::{ArchiveStore, CarryOver, HotCounts, PartitionRow, Period, Restored};
pub use crate::logs::NUL_STORED_AS;
pub use crate::outer::{CycleRange, CycleRun, EdgeRow, OuterStore};
pub use crate::reads::ReadStore;
pub use crate::registry::{PluginInsert, PluginRow, RegistryStore};
pub use crate::sql::{DEFAULT_IDLE_IN_TRANSACTION, SqlStore, Synchronous};
pub use crate::tenancy::TenancyStore;
pub use crate::webhooks::{DeliveryRow, WebhookRow, WebhookState, WebhookStore, webhook_secret_name};

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a run came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    /// Triggered by a person or a program.
    Manual,
    /// Materialised by a cron schedule.
    Schedule,
    /// Part of a backfill.
    Backfill,
    /// An ad-hoc job (no registered workflow).
    Job,
    /// Run by a task of another run (a sub-workflow).
    Child,
}

impl RunKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Manual => "manual",
            RunKind::Schedule => "schedule",
            RunKind::Backfill => "backfill",
            RunKind::Job => "job",
            RunKind::Child => "child",
        }
    }

    pub fn parse(text: &str) -> Option<RunKind> {
        [RunKind::Manual, RunKind::Schedule, RunKind::Backfill, RunKind::Job, RunKind::Child]
            .into_iter()
            .find(|k| k.as_str() == text)
    }
}

impl fmt::Display for RunKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowRow {
    pub tenant: String,
    pub name: String,
    pub latest_version: i64,
    pub deleted: bool,
    pub created_at: i64,
    pub updated_at: i64,
    pub schedule_cursor: Option<i64>,
    pub schedule_since: Option<i64>,
    /// The schedule is offline (the workflow stays; no cycle is made).
    pub schedule_paused: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionRow {
    pub tenant: String,
    pub name: String,
    pub version: i64,
    pub hash: String,
    /// Canonical JSON of the `WorkflowSpec`.
    pub spec: String,
    pub created_at: i64,
}

/// The result of applying a definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    pub version: i64,
    /// False when the definition was identical to the latest version.
    pub created: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRow {
    pub id: String,
    pub tenant: String,
    pub workflow: String,
    /// The workflow version; `None` for jobs, whose spec is inline.
    pub version: Option<i64>,
    pub kind: RunKind,
    pub state: RunState,
    pub logical_time: i64,
    /// The run's params (JSON object), defaults merged with overrides.
    pub params: String,
    /// Inline spec (jobs only).
    pub spec: Option<String>,
    pub backfill_id: Option<String>,
    pub slot: i64,
    pub owner: Option<String>,
    pub epoch: i64,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub updated_at: i64,
    /// A child run: the run and task (index) that run it.
    pub parent_run: Option<String>,
    pub parent_task: Option<i64>,
}

/// A task instance of a run, as stored; the engine writes it whole (last
/// write wins within a batch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRow {
    pub run_id: String,
    pub idx: i64,
    pub name: String,
    pub state: TaskState,
    pub attempts: i64,
    pub failures: i64,
    /// Attempts lost with their node since the task was last reset.
    pub lost: i64,
    pub forced: bool,
    pub retry_at: Option<i64>,
    pub error: Option<String>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// The child run of a sub-workflow task (its latest).
    pub child_run: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRow {
    pub run_id: String,
    pub task_idx: i64,
    pub number: i64,
    pub task: String,
    pub state: AttemptState,
    pub failure_kind: Option<FailureKind>,
    pub message: Option<String>,
    /// Whether a failure counted against the retry budget.
    pub charged: bool,
    pub worker: String,
    pub epoch: i64,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    /// The worker's lease its dispatch was addressed to (the worker refuses
    /// it under any other), if the master knew it. Written when the attempt
    /// starts and never changed; read back only with the running attempts
    /// a new owner takes over ([`Store::running_attempts_of`]), `None` from
    /// every other read and from the cold partitions.
    pub lease: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRow {
    pub run_id: String,
    pub task_idx: i64,
    pub attempt: i64,
    pub seq: i64,
    pub at: i64,
    pub source: String,
    pub level: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow {
    pub seq: i64,
    pub tenant: String,
    pub at: i64,
    pub kind: String,
    /// The workflow the event is about, if any (its run's, its schedule's).
    pub workflow: Option<String>,
    pub run_id: Option<String>,
    pub task: Option<String>,
    pub data: String,
}

/// Which events [`Store::event_page`] reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventScope {
    /// One tenant's; `None`: every tenant's (the admin's stream).
    pub tenant: Option<String>,
    pub workflow: Option<String>,
    pub run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    pub tenant: String,
    pub at: i64,
    pub kind: String,
    pub workflow: Option<String>,
    pub run_id: Option<String>,
    pub task: Option<String>,
    pub data: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRow {
    pub id: i64,
    pub tenant: String,
    pub run_id: String,
    pub slot: i64,
    pub command: EncodedCommand,
    pub created_at: i64,
    pub done_at: Option<i64>,
    /// JSON `{"ok": bool, "message": …}` once done.
    pub result: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCommand {
    pub tenant: String,
    pub run_id: String,
    pub slot: i64,
    pub command: EncodedCommand,
    pub created_at: i64,
    /// In a [`WriteBatch`]: the run whose change wrote it (a child's end
    /// for its parent, a kill for a child, a re-flush for a released run),
    /// dropped with that run's writes when they are fenced. Not stored.
    pub by: Option<String>,
}

/// A command as the store keeps it: its kind and a JSON payload. Encoding
/// and decoding belong to `dagr_protocol::commands::Command`; the store
/// only keeps the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedCommand {
    pub kind: String,
    pub payload: String,
}

impl EncodedCommand {
    pub fn new(kind: &str, payload: String) -> Self {
        EncodedCommand { kind: kind.into(), payload }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackfillRow {
    pub id: String,
    pub tenant: String,
    pub workflow: String,
    pub from_time: i64,
    pub to_time: i64,
    pub parallel: i64,
    pub total: i64,
    pub created_at: i64,
}

/// A run to create, with its task instances (all pending).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRun {
    pub run: RunRow,
    /// Task names in workflow order; their index is their position.
    pub tasks: Vec<String>,
    /// Its deadline (the workflow's `sla`), if it has one.
    pub sla_at: Option<i64>,
}

/// What a new run is: everything [`NewRun::new`] needs besides the
/// workflow and the clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOrigin {
    pub tenant: String,
    /// The workflow version; `None` for jobs, whose spec is inline.
    pub version: Option<i64>,
    pub kind: RunKind,
    pub logical_time: i64,
    /// The run's params (a JSON object), defaults merged with overrides.
    pub params: String,
    /// Inline spec (jobs only).
    pub spec: Option<String>,
    pub backfill_id: Option<String>,
    /// A child run's parent run and task (index).
    pub parent: Option<(String, i64)>,
    /// Whether its tenant limits the tasks it runs at once
    /// (`max_concurrent`): then all the tenant's runs are made in one slot.
    pub tenant_capped: bool,
}

thread_local! {
    /// Where run ids come from on this thread, if not from the clock and
    /// chance ([`with_run_ids`]).
    static RUN_IDS: std::cell::RefCell<Option<Box<dyn FnMut() -> String>>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with the ids of runs made on this thread taken from `next` (a
/// deterministic simulation must not draw them from the clock).
pub fn with_run_ids<T>(next: impl FnMut() -> String + 'static, f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            RUN_IDS.with(|ids| ids.borrow_mut().take());
        }
    }
    RUN_IDS.with(|ids| *ids.borrow_mut() = Some(Box::new(next)));
    let _reset = Reset;
    f()
}

/// The slot a new run must share with others, if any: a tenant's
/// `max_concurrent`, a workflow's limits over all its runs
/// (`max_active_runs`, `concurrency`) and a backfill's parallelism are
/// counted by the master that drives the runs, so all the runs one limit
/// counts must be driven by one master. The widest limit decides: a
/// tenant's counts all its workflows' runs, a workflow's its backfills'.
pub fn together_in(workflow: &dagr_core::Workflow, origin: &RunOrigin) -> Option<u32> {
    if origin.tenant_capped {
        return Some(dagr_core::slots::slot_of(&format!("tenant/{}", origin.tenant)));
    }
    let spec = &workflow.spec;
    if spec.max_active_runs.is_some() || spec.concurrency.is_some() {
        return Some(dagr_core::slots::slot_of(&format!("workflow/{}/{}", origin.tenant, workflow.name())));
    }
    let backfill = origin.backfill_id.as_ref()?;
    Some(dagr_core::slots::slot_of(&format!("backfill/{backfill}")))
}

fn next_run_id() -> String {
    RUN_IDS.with(|ids| ids.borrow_mut().as_mut().map(|next| next())).unwrap_or_else(|| uuid::Uuid::now_v7().to_string())
}

impl NewRun {
    /// A queued (or, if it needs upstream instances, waiting) run of
    /// `workflow` with all its tasks pending, created at
    /// `now`: the one constructor the API (triggers, backfills, jobs) and
    /// the engine (schedules) share. Its id is a UUIDv7 (time-ordered), its
    /// slot the hash of its id. The runs of a tenant with `max_concurrent`,
    /// of a workflow with `max_active_runs` or `concurrency`, and those of
    /// one backfill, get ids in one slot ([`together_in`]): one master
    /// drives and counts them.
    pub fn new(workflow: &dagr_core::Workflow, origin: RunOrigin, now: i64) -> NewRun {
        let id = next_run_id();
        let id = together_in(workflow, &origin).and_then(|slot| dagr_core::slots::id_in_slot(&id, slot)).unwrap_or(id);
        NewRun {
            run: RunRow {
                slot: dagr_core::slots::slot_of(&id) as i64,
                id,
                tenant: origin.tenant,
                workflow: workflow.name().into(),
                version: origin.version,
                kind: origin.kind,
                // A run that needs upstream instances starts by waiting for them.
                state: if workflow.waits_upstream() { RunState::Waiting } else { RunState::Queued },
                logical_time: origin.logical_time,
                params: origin.params,
                spec: origin.spec,
                backfill_id: origin.backfill_id,
                owner: None,
                epoch: 0,
                created_at: now,
                started_at: None,
                finished_at: None,
                updated_at: now,
                parent_run: origin.parent.as_ref().map(|(run, _)| run.clone()),
                parent_task: origin.parent.map(|(_, task)| task),
            },
            tasks: workflow.tasks.iter().map(|t| t.name.clone()).collect(),
            sla_at: workflow.sla.map(|sla| sla.deadline(origin.logical_time)),
        }
    }
}

/// What happened to a run that was to be created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    Created {
        id: String,
    },
    /// A schedule or backfill run for this logical time already exists.
    Exists {
        id: String,
    },
}

/// Filters for listing runs, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    pub tenant: String,
    pub workflow: Option<String>,
    pub state: Option<String>,
    pub kind: Option<RunKind>,
    pub backfill_id: Option<String>,
    /// Only runs with logical times in [`logical_from`, `logical_to`].
    pub logical_from: Option<i64>,
    pub logical_to: Option<i64>,
    /// Only runs created before this (created_at, id) — the cursor of the
    /// previous page.
    pub before: Option<(i64, String)>,
    pub limit: i64,
}

/// A run's state change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunWrite {
    pub id: String,
    pub state: RunState,
    /// When the run started (its latest life, after a rerun); `None`
    /// keeps the stored start.
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub updated_at: i64,
}

/// A run the step admits (queued → running) under a limit on the runs
/// active at once (see [`WriteBatch::admissions`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub run_id: String,
    pub tenant: String,
    pub workflow: String,
    /// The workflow's `max_active_runs`.
    pub max_active_runs: Option<u32>,
    /// The run's backfill and its parallelism.
    pub backfill: Option<(String, u32)>,
    /// The run's slot and owner (the master admitting it), when a limit
    /// that one master counts for the slot governs it (its tenant's
    /// `max_concurrent`, its workflow's `concurrency`): it is not admitted
    /// while an active run of its tenant in that slot is another master's
    /// (two masters each believe they hold the slot).
    pub sole: Option<(i64, String)>,
}

/// A run that starts attempts under a limit counted for its slot
/// ([`WriteBatch::sole_starts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoleStart {
    pub run_id: String,
    pub tenant: String,
    pub slot: i64,
    /// The master that starts them.
    pub owner: String,
}

/// A change to a task's stored output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputWrite {
    Set { run_id: String, idx: i64, output: String },
    Clear { run_id: String, idx: i64 },
}

/// A command carried out, and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoneCommand {
    pub id: i64,
    /// The run it was for.
    pub run_id: String,
    /// Its outcome (JSON).
    pub result: String,
}

/// Everything one engine step changes, committed atomically.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    /// Runs to create (schedule materialisation). A run whose cycle already
    /// has one is skipped.
    pub new_runs: Vec<NewRun>,
    /// A command (admit) to insert for each new run that was created.
    pub new_run_command: Option<EncodedCommand>,
    /// Child runs of sub-workflow tasks (with the admit command too):
    /// written only if their parent run's writes are (they are fenced by
    /// the parent's epoch, not by the scheduler's token).
    pub child_runs: Vec<NewRun>,
    pub runs: Vec<RunWrite>,
    pub tasks: Vec<TaskRow>,
    pub outputs: Vec<OutputWrite>,
    /// Upserted by (run, task, number): insert when an attempt starts,
    /// update when it ends.
    pub attempts: Vec<AttemptRow>,
    pub events: Vec<NewEvent>,
    /// Commands consumed in this step, with their result (JSON). A
    /// command whose run's writes are fenced stays pending: the run's new
    /// owner carries it out.
    pub commands_done: Vec<DoneCommand>,
    /// New schedule cursors: (tenant, workflow, logical time).
    pub schedule_cursors: Vec<(String, String, i64)>,
    /// Runs whose writes must be fenced: (run id, the epoch the writer
    /// holds). Writes for a run whose stored epoch differs are dropped.
    pub fences: Vec<(String, i64)>,
    /// Runs admitted under a limit, in the order they were admitted. In a
    /// cluster a master counts only the runs it holds; the store counts
    /// the workflow's (and the backfill's) runs active once the step
    /// applies, and drops every write of an admission that would pass its
    /// limit ([`Committed::over_limit`]; see [`admission`]).
    pub admissions: Vec<Admission>,
    /// Runs already active that start attempts in this step under a limit
    /// one master counts for their slot (their tenant's `max_concurrent`,
    /// their workflow's `concurrency`), each once. Like an admission's
    /// [`Admission::sole`], the store drops every write of such a run while
    /// an active run of its tenant in that slot is another master's
    /// ([`Committed::over_limit`]).
    pub sole_starts: Vec<SoleStart>,
    /// Upstream instances whose state changed: the runs waiting for them
    /// (`run_waits`) are woken with `wake_command`, in this transaction.
    pub wakes: Vec<Wake>,
    /// Upstream workflows whose definition changed: every run waiting for
    /// any of their instances is woken with `wake_command` (what it waits
    /// for may have changed with the schedule).
    pub wake_all: Vec<(String, String)>,
    pub wake_command: Option<EncodedCommand>,
    /// Runs whose waits are replaced (or ended): their `run_waits` rows go.
    pub clear_waits: Vec<String>,
    /// What runs wait for now.
    pub run_waits: Vec<RunWait>,
    /// Upstream run → the run it released.
    pub links: Vec<(String, String, String)>,
    /// Commands for other runs (a child run's end for its parent, a kill
    /// for a child), inserted with the step.
    pub commands: Vec<NewCommand>,
    /// The singleton duty (and fencing token) that `new_runs` and
    /// `schedule_cursors` are written under. If a higher token holds the
    /// duty, those writes are dropped.
    pub singleton: Option<(String, i64)>,
    /// When the step happened (ms): the time recorded with consumed
    /// commands. The store reads no clock.
    pub at: i64,
}

impl WriteBatch {
    pub fn is_empty(&self) -> bool {
        self.new_runs.is_empty()
            && self.child_runs.is_empty()
            && self.runs.is_empty()
            && self.tasks.is_empty()
            && self.outputs.is_empty()
            && self.attempts.is_empty()
            && self.events.is_empty()
            && self.commands_done.is_empty()
            && self.schedule_cursors.is_empty()
            && self.wakes.is_empty()
            && self.wake_all.is_empty()
            && self.clear_waits.is_empty()
            && self.run_waits.is_empty()
            && self.links.is_empty()
            && self.commands.is_empty()
    }
}

/// A state change of an upstream instance that runs may wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wake {
    pub tenant: String,
    pub workflow: String,
    pub logical_time: i64,
    /// The instance (or task) ended other than succeeded: it wakes the
    /// waits that listen for failures only too.
    pub failed: bool,
}

/// A run waits for instances of `upstream` with logical times in
/// [`from_time`, `to_time`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunWait {
    pub run_id: String,
    pub tenant: String,
    pub upstream: String,
    pub from_time: i64,
    pub to_time: i64,
    pub slot: i64,
    /// Woken only by an instance in range that ends other than succeeded
    /// (the waits beside a run's sentinel, which any end wakes).
    pub failures_only: bool,
}

/// The outcome of a commit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Committed {
    /// Runs whose writes were dropped because another owner holds them.
    pub fenced: Vec<String>,
    /// Admitted runs whose writes were dropped: with them, their workflow
    /// or backfill would have had more runs active than its limit.
    pub over_limit: Vec<String>,
    /// The singleton writes were dropped: a newer leader holds the duty.
    pub singleton_fenced: bool,
}

impl Committed {
    /// The runs whose writes the store dropped (fenced, or admitted over a
    /// limit): nothing the step decided for them may act.
    pub fn dropped(&self) -> std::collections::HashSet<&str> {
        self.fenced.iter().chain(&self.over_limit).map(String::as_str).collect()
    }
}

/// dagr's storage. Implemented by [`SqlStore`] on SQLite and PostgreSQL.
#[async_trait]
pub trait Store:
    TenancyStore + RegistryStore + OuterStore + WebhookStore + AlertStore + ReadStore + ArchiveStore + Send + Sync + 'static
{
    // Workflows ----------------------------------------------------------

    /// Stores a definition as the next version, unless it is identical to
    /// the latest one (same hash), in which case nothing changes.
    async fn apply_workflow(&self, tenant: &str, name: &str, hash: &str, spec: &str, now: i64) -> Result<Applied>;
    async fn get_workflow(&self, tenant: &str, name: &str) -> Result<Option<WorkflowRow>>;
    async fn get_version(&self, tenant: &str, name: &str, version: i64) -> Result<Option<VersionRow>>;
    async fn list_workflows(&self, tenant: &str) -> Result<Vec<WorkflowRow>>;
    async fn list_versions(&self, tenant: &str, name: &str) -> Result<Vec<VersionRow>>;
    /// Marks a workflow deleted (its runs and versions stay). False if absent.
    async fn delete_workflow(&self, tenant: &str, name: &str, now: i64) -> Result<bool>;
    /// Every workflow that is not deleted, with its latest version.
    async fn live_workflows(&self) -> Result<Vec<(WorkflowRow, VersionRow)>>;

    // Runs ---------------------------------------------------------------

    /// Creates runs with their tasks, and for each an optional command
    /// (e.g. `admit`) in the same transaction. Schedule and backfill runs
    /// for a logical time that already has one are not created twice.
    async fn create_runs(&self, runs: Vec<NewRun>, command: Option<EncodedCommand>) -> Result<Vec<Created>>;
    /// [`Store::create_runs`], and `audit` appended in the same transaction
    /// if any of the runs was created: the audit log names a run that
    /// exists, and a run made by a request is never missing from it.
    async fn create_runs_audited(
        &self,
        runs: Vec<NewRun>,
        command: Option<EncodedCommand>,
        audit: tenancy::NewAudit,
    ) -> Result<Vec<Created>>;
    async fn get_run(&self, id: &str) -> Result<Option<RunRow>>;
    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>>;
    /// Runs that are queued, running or paused (for recovery).
    async fn active_runs(&self) -> Result<Vec<RunRow>>;
    async fn run_tasks(&self, run_id: &str) -> Result<Vec<TaskRow>>;
    /// The tasks of each of these hot runs, in index order, one list per run
    /// in the order given (empty for a run not found): a step that claims
    /// many runs reads their tasks together.
    async fn tasks_of_runs(&self, run_ids: &[String]) -> Result<Vec<Vec<TaskRow>>>;
    async fn outputs(&self, run_id: &str, idxs: &[i64]) -> Result<Vec<(i64, String)>>;
    async fn attempts(&self, run_id: &str, task_idx: Option<i64>) -> Result<Vec<AttemptRow>>;

    // Ownership (cluster mode) ------------------------------------------

    /// Active runs (queued, running, paused) whose slot is in `slots`.
    async fn active_runs_in_slots(&self, slots: &[i64]) -> Result<Vec<RunRow>>;
    /// Takes a run over: sets its owner and bumps its epoch, atomically.
    /// Returns the run as it is after the claim (with its new epoch): every
    /// later write by an older epoch is fenced, so this row and anything
    /// read after it are what the new owner starts from.
    async fn claim_run(&self, run_id: &str, owner: &str, now: i64) -> Result<Option<RunRow>>;
    /// Takes many runs over at once, as [`Store::claim_run`] each, in one
    /// statement; the runs as they are after the claim (a missing id has
    /// none), in no particular order.
    async fn claim_runs(&self, run_ids: &[String], owner: &str, now: i64) -> Result<Vec<RunRow>>;
    /// Records `holder` as the holder of a singleton duty with `token`,
    /// unless a higher token already holds it. True if this token holds it.
    async fn acquire_singleton(&self, name: &str, holder: &str, token: i64, now: i64) -> Result<bool>;
    /// The running attempts of these runs, with the lease each was sent to.
    async fn running_attempts_of(&self, run_ids: &[String]) -> Result<Vec<AttemptRow>>;
    /// The current epoch of a run (workers check it before starting an attempt).
    async fn run_epoch(&self, run_id: &str) -> Result<Option<i64>>;

    // Rebalancing (cluster mode) -----------------------------------------

    /// A master's current load (the runs it drives).
    async fn report_master_load(&self, master: &str, load: i64, now: i64) -> Result<()>;
    /// Every master's last report: (id, load, weight in thousandths, when).
    async fn master_loads(&self) -> Result<Vec<(String, i64, i64, i64)>>;
    /// Sets masters' weights (thousandths).
    async fn set_master_weights(&self, weights: &[(String, i64)]) -> Result<()>;

    // The engine's writes -------------------------------------------------

    async fn commit(&self, batch: WriteBatch) -> Result<Committed>;

    // Commands ------------------------------------------------------------

    async fn insert_command(&self, command: NewCommand) -> Result<i64>;
    /// Commands not yet done, oldest first, after `after_id`.
    async fn pending_commands(&self, after_id: i64, limit: i64) -> Result<Vec<CommandRow>>;
    async fn get_command(&self, id: i64) -> Result<Option<CommandRow>>;

    // Logs and events ----------------------------------------------------

    async fn append_logs(&self, lines: Vec<LogRow>) -> Result<()>;
    async fn logs(&self, run_id: &str, task_idx: i64, attempt: i64, after_seq: i64, limit: i64) -> Result<Vec<LogRow>>;
    async fn events(&self, tenant: &str, run_id: Option<&str>, after_seq: i64, limit: i64) -> Result<Vec<EventRow>>;

    /// Events after `after_seq` in sequence order, of one tenant or of all
    /// ([`EventScope`]). Sequence numbers only grow, and the events a
    /// reader sees always form a prefix of the log: an event never becomes
    /// visible after one with a higher number (the stream's resumption by
    /// `Last-Event-ID` relies on it).
    async fn event_page(&self, scope: &EventScope, after_seq: i64, limit: i64) -> Result<Vec<EventRow>>;

    /// The highest event sequence number so far (0 for none).
    async fn last_event_seq(&self) -> Result<i64>;

    // Backfills -----------------------------------------------------------

    async fn insert_backfill(&self, backfill: BackfillRow) -> Result<()>;
    async fn get_backfill(&self, id: &str) -> Result<Option<BackfillRow>>;
    async fn list_backfills(&self, tenant: &str) -> Result<Vec<BackfillRow>>;
}
