//! What goes into a step and what comes out of it.
//!
//! - [`Input`]: what happened (a worker's result, commands found in the
//!   store, a change of ownership, leadership or workers, a probe's answer).
//! - [`Data`]: what the shell read because the state asked for it.
//! - [`Effects`]: what the step decided — the [`WriteBatch`] to commit, and
//!   what to do once it is committed — and the [`Need`]s that must be read
//!   before the step can finish.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use dagr_core::Workflow;
use dagr_protocol::commands::Command;
use dagr_protocol::control::CommandOutcome;
use dagr_protocol::tenancy::TenantLimits;
use dagr_protocol::wire::{Ack, AttemptKey, AttemptResult, AttemptSpec, ResourceAnswer, ResourceRequest};
use dagr_store::{AttemptRow, RunRow, RunState, TaskRow, WriteBatch};

use crate::engine::placement::WorkerInfo;
use crate::{Adoption, DispatchError};

/// Something that happened, for the state to decide on.
#[derive(Debug, Clone)]
pub enum Input {
    /// A worker's result. `ack`: the shell's handle for whoever waits for
    /// the verdict (answered in [`Effects::acks`]).
    Result { result: AttemptResult, ack: Option<u64> },
    /// Commands found in the store after [`EngineState::command_cursor`](crate::engine::EngineState::command_cursor),
    /// oldest first, decoded (or the reason they do not decode).
    Commands(Vec<PendingCommand>),
    /// The slots this master owns now.
    Ownership(HashSet<u32>),
    /// This master leads (with its fencing token) or not.
    Leadership(Option<i64>),
    /// The workers that exist now, with their capacity.
    Workers(Vec<WorkerInfo>),
    /// A worker's answer to a dispatch: its running count and a verdict
    /// per attempt sent, or why the whole dispatch failed.
    Dispatched { worker: String, sent: Vec<(AttemptKey, i64, String)>, answer: Result<Accepted, DispatchError> },
    /// A worker's answer about an attempt this master adopted or checked.
    Probed { key: AttemptKey, worker: String, epoch: i64, adoption: Adoption },
    /// A workflow was applied or deleted: its schedule may have changed.
    WorkflowChanged { tenant: String, name: String },
    /// The resource leader's answer to [`Effects::resources`], or why
    /// there was none.
    Granted(Result<ResourceAnswer, String>),
}

/// What the answer to a dispatch of `specs` needs of them
/// ([`Input::Dispatched`]'s `sent`): each attempt's key, epoch and task.
pub(crate) fn sent_of(specs: &[AttemptSpec]) -> Vec<(AttemptKey, i64, String)> {
    specs.iter().map(|s| (s.key.clone(), s.epoch, s.task_name.clone())).collect()
}

/// A worker's answer to a dispatch that reached it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// One per attempt, in order: accepted, or why not.
    pub verdicts: Vec<Result<(), String>>,
    /// What the worker runs now, for every master (if it said).
    pub running: Option<u32>,
}

/// A command read from the store.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingCommand {
    pub id: i64,
    pub run_id: String,
    pub slot: u32,
    pub command: Result<Command, String>,
}

/// A run the shell claimed (or read) and loaded for the state.
#[derive(Debug, Clone)]
pub struct LoadedRun {
    /// The run as it is after the claim (with this master's epoch).
    pub row: RunRow,
    /// Its task rows; `None` when the run was claimed for the first time
    /// while queued (every task is still pending, nothing to read).
    pub tasks: Option<Vec<TaskRow>>,
    pub workflow: Arc<Workflow>,
    /// Its backfill's parallelism, if it belongs to one.
    pub backfill_parallel: Option<usize>,
    /// Its attempts the store has as running (to adopt or to lose).
    pub running: Vec<AttemptRow>,
}

/// Why a run could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The store failed; trying again later may work.
    #[error("the store failed: {0}")]
    Transient(String),
    /// There is no such run, or it belongs to another master.
    #[error("{0}")]
    Gone(String),
    /// The run's stored definition or rows do not load.
    #[error("{0}")]
    Invalid(String),
}

/// A workflow's schedule as stored now: `None` when the workflow is gone
/// or has no schedule.
#[derive(Debug, Clone)]
pub struct ScheduleSource {
    pub tenant: String,
    pub name: String,
    pub current: Option<ScheduleRow>,
}

/// A live workflow's latest version, validated, and its schedule's cursor.
#[derive(Debug, Clone)]
pub struct ScheduleRow {
    pub version: i64,
    pub workflow: Arc<Workflow>,
    /// The last cycle materialised, if any.
    pub cursor: Option<i64>,
    /// Since when the workflow has had this schedule (or existed).
    pub since: i64,
    /// The schedule is offline.
    pub paused: bool,
}

/// What the state needs read before it can go on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Need {
    /// Claim (bump the epoch of) and load these runs, which belong to slots
    /// this master owns and are not loaded here.
    Claim(Vec<String>),
    /// The active runs of these slots, claimed and loaded (the ones not
    /// loaded here).
    Slots(Vec<u32>),
    /// The ids and owners of the active runs of these slots (to find runs
    /// loaded nowhere).
    Owners(Vec<u32>),
    /// Stored outputs of a run's tasks (too big to keep in memory).
    Outputs { run: String, idxs: Vec<i64> },
    /// A fresh snapshot of the plugin directory (a plugin was not found).
    RefreshPlugins,
    /// Record this token as the scheduler's holder, and read every
    /// schedule if it holds.
    Lead(i64),
    /// A workflow's schedule as stored now.
    Schedule { tenant: String, name: String },
    /// Which workflows (and tasks) any workflow waits for.
    Watched,
    /// The pending commands, from the first: runs claimed in this step had
    /// commands read before the claim, which their previous master may
    /// have carried out since.
    Commands,
    /// What one workflow waits for (it was applied).
    WatchedBy { tenant: String, workflow: String },
    /// The latest versions of these workflows (for their schedules, or to
    /// run them as children).
    Workflows { tenant: String, names: Vec<String> },
    /// The runs of an upstream workflow in a range of cycles.
    UpstreamRuns(UpstreamQuery),
    /// The same, read once every commit waking the workflow's waiters has
    /// ended (a range read again after its waits committed); read after
    /// an unsettled read of the same range in one step, so that it wins.
    Settled(UpstreamQuery),
    /// The runs a run released (to re-flush them after it).
    ReleasedBy(String),
}

/// A workflow's latest version: its number, validated.
pub type Versioned = (i64, Arc<Workflow>);

/// The runs of `workflow` with logical times in [from, to] (ms), with the
/// state of `task` in each if given: the store's range, as the state asks
/// for it.
pub type UpstreamQuery = dagr_store::CycleRange;

/// What the shell read for the state's [`Need`]s.
#[derive(Debug, Default, Clone)]
pub struct Data {
    /// Runs claimed and loaded.
    pub loaded: Vec<LoadedRun>,
    /// Runs that could not be loaded.
    pub failed: Vec<(String, LoadError)>,
    /// Slots whose runs were read and loaded ([`Need::Slots`]).
    pub gained: Vec<u32>,
    /// The runs of those slots waiting upstream (not loaded): (tenant, run).
    pub waiting: Vec<(String, String)>,
    /// The pending commands read again ([`Need::Commands`]).
    pub commands: Option<Vec<PendingCommand>>,
    /// Slots whose runs could not be read (asked for again next step).
    pub slots_failed: Vec<u32>,
    /// Active runs of slots: (id, slot, owner).
    pub owners: Vec<(String, u32, Option<String>)>,
    /// Outputs: (run, task index, output if stored).
    pub outputs: Vec<(String, i64, Option<String>)>,
    /// The plugin directory was refreshed.
    pub plugins_refreshed: bool,
    /// Leadership: the token asked for, and whether it holds the duty
    /// (with every schedule) or a newer leader does (`None`: the store
    /// failed; asked again later).
    pub lead: Option<(i64, Option<Vec<ScheduleSource>>)>,
    /// Schedules read.
    pub schedules: Vec<ScheduleSource>,
    /// Tenants' limits, when they changed (read before runs of a tenant
    /// new to this master are dispatched).
    pub tenant_limits: Option<Arc<HashMap<String, TenantLimits>>>,
    /// (tenant, workflow, task) that workflows wait for.
    pub watched: Option<Vec<(String, String, Option<String>)>>,
    /// More of them (a workflow was applied).
    pub watched_add: Vec<(String, String, Option<String>)>,
    /// Latest versions of workflows: (tenant, name, version and workflow;
    /// `None`: no such live workflow).
    pub workflows: Vec<(String, String, Option<Versioned>)>,
    /// Upstream runs found.
    pub upstream_runs: Vec<(UpstreamQuery, Vec<dagr_store::CycleRun>)>,
    /// The runs a run released, by run.
    pub released: Vec<(String, Vec<String>)>,
}

impl Data {
    pub fn is_empty(&self) -> bool {
        self.loaded.is_empty()
            && self.failed.is_empty()
            && self.gained.is_empty()
            && self.waiting.is_empty()
            && self.commands.is_none()
            && self.slots_failed.is_empty()
            && self.owners.is_empty()
            && self.outputs.is_empty()
            && !self.plugins_refreshed
            && self.lead.is_none()
            && self.schedules.is_empty()
            && self.tenant_limits.is_none()
            && self.watched.is_none()
            && self.watched_add.is_empty()
            && self.workflows.is_empty()
            && self.upstream_runs.is_empty()
            && self.released.is_empty()
    }
}

/// An attempt to ask a worker about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub key: AttemptKey,
    pub worker: String,
    pub epoch: i64,
}

/// What one step decided. Everything but `needs` happens after `batch` is
/// committed; nothing of it before.
#[derive(Debug, Default)]
pub struct Effects {
    pub batch: WriteBatch,
    /// Attempts to hand to workers: (spec, worker).
    pub dispatches: Vec<(AttemptSpec, String)>,
    /// Attempts to stop: (key, worker).
    pub cancels: Vec<(AttemptKey, String)>,
    /// Attempts to ask their workers about (adoption, checks).
    pub probes: Vec<Probe>,
    /// Verdicts on workers' results: (ack handle, run, verdict). A run
    /// fenced by the commit answers `NotOwner` instead.
    pub acks: Vec<(u64, String, Ack)>,
    /// Outcomes of consumed commands: (command id, outcome).
    pub replies: Vec<(i64, CommandOutcome)>,
    /// Runs that reached a final state: (run, state).
    pub finished: Vec<(String, RunState)>,
    /// What must be read before the step can finish.
    pub needs: Vec<Need>,
    /// The upstream reads among `needs`, to ask for each once: a burst of
    /// wake-ups asks for thousands, and looking for each in `needs` was
    /// quadratic.
    upstream_asked: HashSet<Need>,
    /// Read the next page of commands at once (more are waiting, or
    /// slots were gained).
    pub read_commands: bool,
    /// Scheduled runs that started this step: how long after their cycle
    /// was due (ms), for the metrics.
    pub schedule_delays: Vec<i64>,
    /// The states runs and tasks entered this step, for the metrics.
    pub transitions: Vec<Transition>,
    /// An exchange with the resource leader (slots wanted, slots held),
    /// when the leader schedules resources. Its answer comes back as
    /// [`Input::Granted`].
    pub resources: Option<ResourceRequest>,
}

/// A run (or a task, `task`) of `tenant` entered state `to`.
#[derive(Debug, Clone)]
pub struct Transition {
    pub tenant: Arc<str>,
    pub task: bool,
    pub to: &'static str,
}

impl Effects {
    /// Asks for `need` once.
    pub(crate) fn need(&mut self, need: Need) {
        let new = match &need {
            Need::UpstreamRuns(_) | Need::Settled(_) => self.upstream_asked.insert(need.clone()),
            _ => !self.needs.contains(&need),
        };
        if new {
            self.needs.push(need);
        }
    }

    /// A command for run `run_id` of `tenant`, written with the step; the
    /// next step reads commands at once (the run may be this master's).
    /// `by`: the run whose change it follows from, if any — when that
    /// run's writes are fenced off (this master lost it), the command is
    /// dropped with them (its new owner makes the change, and the command,
    /// again).
    pub(crate) fn command_for(&mut self, tenant: &str, run_id: &str, command: &Command, by: Option<&str>, now: i64) {
        self.batch.commands.push(dagr_store::NewCommand {
            tenant: tenant.to_owned(),
            run_id: run_id.to_owned(),
            slot: i64::from(dagr_protocol::slot_of(run_id)),
            command: encoded(command),
            created_at: now,
            by: by.map(str::to_owned),
        });
        self.read_commands = true;
    }

    /// Takes the needs, leaving none.
    pub fn take_needs(&mut self) -> Vec<Need> {
        self.upstream_asked.clear();
        std::mem::take(&mut self.needs)
    }
}

/// A command as the store keeps it.
pub(crate) fn encoded(command: &Command) -> dagr_store::EncodedCommand {
    dagr_store::EncodedCommand::new(command.kind(), command.payload())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_need_is_asked_for_once_until_taken() {
        let query = |from: i64| UpstreamQuery {
            tenant: "t".into(),
            workflow: "hourly".into(),
            from,
            to: from + 3_600_000,
            task: None,
        };
        let mut effects = Effects::default();
        for _ in 0..3 {
            effects.need(Need::UpstreamRuns(query(0)));
            effects.need(Need::Settled(query(0)));
            effects.need(Need::UpstreamRuns(query(1)));
            effects.need(Need::Watched);
        }
        assert_eq!(
            effects.take_needs(),
            [Need::UpstreamRuns(query(0)), Need::Settled(query(0)), Need::UpstreamRuns(query(1)), Need::Watched]
        );
        effects.need(Need::UpstreamRuns(query(0)));
        assert_eq!(effects.needs, [Need::UpstreamRuns(query(0))], "asked again once taken");
    }
}
