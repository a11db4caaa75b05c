//! The invariants, checked around every commit and at the end.
//!
//! - Every write a step makes for a run is fenced by the run's epoch (an
//!   unfenced write could come from a master that lost the run), what it
//!   waits for upstream included.
//! - The store takes no write from a stale epoch.
//! - A task instance has at most one attempt accepted as its result (one
//!   more each time it is reset after it succeeded: a re-flush).
//! - No worker starts an attempt that the store has ended (but for one
//!   cancelled meanwhile, whose cancellation follows its dispatch).
//! - Scheduler writes are taken only from the newest leader's token (at
//!   most one leader acts per term), and a cycle has one scheduled run.
//! - No workflow has more runs active than its `max_active_runs`, and no
//!   backfill more than its parallelism (with faults, the store's count
//!   of the admitting commit holds them: see `dagr_store::admission`).
//! - No worker starts an attempt past its tenant's `max_concurrent` or
//!   its workflow's `concurrency` (the capped tenant's and `wide`'s, when
//!   the simulation has them), counting the attempts that run on workers
//!   up and holding their lease.
//! - No worker starts an attempt of a run of the outer DAG's downstream
//!   workflow before the upstream run of its logical time has ended (when
//!   the simulation has them), nor, once the run is made to wait again
//!   (re-flushed with its rerun upstream), before that run has ended
//!   again (but for an attempt cancelled while its dispatch was on the
//!   way); and no parent's sub-workflow task succeeds unless its child
//!   run did (or an operator forced it). The same for the attempts of the
//!   gate's task that waits upstream (task-level), from the last time it
//!   was made to wait.
//! - A gate's sensor has at most one check that found its condition met
//!   accepted as its result (per life); a run's timeout does not fail it
//!   before the run has lasted its `timeout` since it (last) started
//!   (and, once the faults have stopped, does come: `World` checks it).
//! - The event log of a run is gap-free: each state event of a run and
//!   of each of its tasks starts where the previous one ended.
//! - At the end: every run has ended (the caller checks it), nothing
//!   runs, and a succeeded run's tasks all ended; no attempt recorded as
//!   `dispatch-failed` (it never ran) was started by a worker.

use std::collections::{BTreeMap, HashMap, HashSet};

use dagr_core::attempt::{AttemptState, FailureKind};
use dagr_protocol::wire::AttemptKey;
use dagr_store::{Committed, RunKind, RunState, WriteBatch};

use crate::engine::testkit::FakeStore;
use crate::sim::world::outer::{GATE_SENSOR, GATE_WAITS, SENSOR_READY_FROM};
use crate::sim::{DOWNSTREAM, GATE, PARENT, UPSTREAM};

/// A limit on attempts at once that the checker holds the workers to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Limited {
    /// The capped tenant's `max_concurrent`.
    Tenant,
    /// The `wide` workflow's `concurrency`.
    Workflow,
}

impl Limited {
    pub(crate) fn describe(self, max: u32) -> String {
        match self {
            Limited::Tenant => format!("the capped tenant (max_concurrent {max})"),
            Limited::Workflow => format!("workflow `wide` (concurrency {max})"),
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Checker {
    /// The highest scheduler token whose writes the store took.
    scheduler_token: i64,
    /// The last state each run's (task `None`) and task's events reached.
    last_state: HashMap<(String, Option<String>), String>,
    /// Every attempt a worker started, and the first worker that did.
    started: HashMap<(String, i64, i64), String>,
    /// Times each task (run, task name) left `succeeded` (a re-flush or
    /// a rerun of it): each such life may accept a result of its own.
    lives: HashMap<(String, String), usize>,
    /// Commits checked so far.
    commits: u64,
    /// The outer DAG's upstream runs, by logical time: the last commit
    /// that left each ended (a rerun may take it out of its end later).
    upstream_ended: HashMap<i64, u64>,
    /// Its downstream runs put back to waiting (re-flushed when their
    /// upstream run was rerun): the commit that did, and whether their
    /// upstream run was ended then.
    rewaiting: HashMap<String, (u64, bool)>,
    /// The same for the gate's task that waits upstream: the last commit
    /// that made it wait, and whether its upstream run was ended then.
    gate_waits: HashMap<String, (u64, bool)>,
    broken: Option<String>,
}

impl Checker {
    /// Before the store sees a batch: is every write fenced?
    pub(crate) fn before_commit(&mut self, writer: &str, batch: &WriteBatch, _store: &FakeStore) -> Result<(), String> {
        let fenced: HashSet<&str> = batch.fences.iter().map(|(id, _)| id.as_str()).collect();
        let written = batch
            .runs
            .iter()
            .map(|w| &w.id)
            .chain(batch.tasks.iter().map(|t| &t.run_id))
            .chain(batch.attempts.iter().map(|a| &a.run_id))
            .chain(&batch.clear_waits)
            .chain(batch.run_waits.iter().map(|w| &w.run_id))
            .chain(batch.links.iter().map(|(_, _, released)| released))
            .chain(batch.commands.iter().filter_map(|c| c.by.as_ref()));
        for id in written {
            if !fenced.contains(id.as_str()) {
                return Err(format!("{writer} wrote run {id} without fencing it by its epoch"));
            }
        }
        Ok(())
    }

    /// After the store applied a batch.
    pub(crate) fn after_commit(
        &mut self,
        writer: &str,
        batch: &WriteBatch,
        committed: &Committed,
        store: &FakeStore,
    ) -> Result<(), String> {
        let stale = committed.dropped();
        // No write from a stale epoch was taken.
        for (id, epoch) in &batch.fences {
            let stored = store.runs.get(id).map(|r| r.epoch);
            if !stale.contains(id.as_str()) && stored != Some(*epoch) {
                return Err(format!(
                    "the store took {writer}'s writes to run {id} at epoch {epoch}, but the run is at {stored:?}"
                ));
            }
        }
        for event in batch.events.iter().filter(|e| e.kind == "task.state") {
            let (Some(run), Some(task)) = (&event.run_id, &event.task) else { continue };
            if stale.contains(run.as_str()) {
                continue;
            }
            let data: serde_json::Value = serde_json::from_str(&event.data).unwrap_or_default();
            // A task reset after it succeeded (a re-flush) runs again.
            if data["from"] == "succeeded" && data["to"] != "succeeded" {
                *self.lives.entry((run.clone(), task.clone())).or_default() += 1;
            }
            // The gate's task that waits upstream is made to wait (again),
            // in this commit (counted below).
            if task == "w"
                && data["to"] == "waiting"
                && let Some(row) = store.runs.get(run).filter(|r| r.workflow == GATE)
            {
                let ended = Self::upstream_is_ended(store, row.logical_time);
                self.gate_waits.insert(run.clone(), (self.commits + 1, ended));
            }
            // A parent's sub-workflow task succeeds with its child run (or
            // forced by an operator).
            if task == "s" && data["to"] == "succeeded" && store.runs.get(run).is_some_and(|r| r.workflow == PARENT) {
                let Some(row) = store.tasks.get(run).and_then(|ts| ts.iter().find(|t| t.name == "s")) else { continue };
                let child = row.child_run.as_deref().and_then(|c| store.runs.get(c));
                if !row.forced && child.is_none_or(|c| c.state != RunState::Succeeded) {
                    return Err(format!(
                        "{writer} made task s of run {run} succeed while its child run {:?} is {:?}",
                        row.child_run,
                        child.map(|c| c.state)
                    ));
                }
            }
        }
        // At most one accepted result per task instance (and life).
        let touched: HashSet<&str> =
            batch.attempts.iter().map(|a| a.run_id.as_str()).filter(|id| !stale.contains(id)).collect();
        for run in touched {
            self.one_result_per_task(store, run)?;
        }
        // The outer DAG's upstream runs that ended, and its downstream runs
        // made to wait again.
        self.commits += 1;
        for w in batch.runs.iter().filter(|w| !stale.contains(w.id.as_str())) {
            let Some(run) = store.runs.get(&w.id) else { continue };
            if run.workflow == UPSTREAM && run.state.is_terminal() {
                self.upstream_ended.insert(run.logical_time, self.commits);
            }
            if run.workflow == DOWNSTREAM && run.state == RunState::Waiting {
                self.rewaiting.insert(run.id.clone(), (self.commits, Self::upstream_is_ended(store, run.logical_time)));
            }
        }
        // No attempt starts once its run's timeout has run out.
        for a in
            batch.attempts.iter().filter(|a| a.state == AttemptState::Running && !stale.contains(a.run_id.as_str()))
        {
            let Some(row) = store.runs.get(&a.run_id) else { continue };
            let (Some(started), Some(limit)) = (row.started_at, Self::timeout_of(store, row)) else { continue };
            if a.started_at >= started + limit {
                return Err(format!(
                    "{writer} started attempt {}/{}#{} at {} ms, after the timeout of its run ({limit} ms from {} ms) \
                     ran out",
                    a.run_id,
                    a.task_idx,
                    a.number,
                    a.started_at - crate::sim::world::START,
                    started - crate::sim::world::START
                ));
            }
        }
        // A run's timeout comes once the run has lasted it, counted from
        // the start of the life it ends (the write that ends it says it;
        // a command of the same step may start the next life).
        for event in batch.events.iter().filter(|e| e.kind == "run.timeout") {
            let Some(run) = event.run_id.as_ref().filter(|r| !stale.contains(r.as_str())) else { continue };
            let Some(row) = store.runs.get(run) else { continue };
            let limit = Self::timeout_of(store, row).unwrap_or(i64::MAX);
            let ended = batch.runs.iter().find(|w| &w.id == run && w.state.is_terminal());
            let started = ended.and_then(|w| w.started_at);
            if started.is_none_or(|started| event.at < started.saturating_add(limit)) {
                return Err(format!(
                    "{writer} timed run {run} out at {} ms, but the life it ended started at {:?} ms, with a \
                     timeout of {limit} ms",
                    event.at - crate::sim::world::START,
                    started.map(|s| s - crate::sim::world::START)
                ));
            }
        }
        // One leader's scheduling at a time.
        if let Some((_, token)) = &batch.singleton
            && !committed.singleton_fenced
            && (!batch.new_runs.is_empty() || !batch.schedule_cursors.is_empty())
        {
            if *token < self.scheduler_token {
                return Err(format!(
                    "the store took {writer}'s schedule writes under token {token} after token {}",
                    self.scheduler_token
                ));
            }
            self.scheduler_token = *token;
        }
        if !batch.new_runs.is_empty() {
            let mut cycles: HashSet<(&str, i64)> = HashSet::new();
            for r in store.runs.values().filter(|r| r.kind == RunKind::Schedule) {
                if !cycles.insert((r.workflow.as_str(), r.logical_time)) {
                    return Err(format!("two scheduled runs of {} for the cycle {}", r.workflow, r.logical_time));
                }
            }
        }
        if batch.runs.iter().any(|r| matches!(r.state, RunState::Running | RunState::Paused)) {
            Self::active_within_limits(store)?;
        }
        // Gap-free event chains.
        for event in batch.events.iter().filter(|e| e.run_id.as_deref().is_none_or(|r| !stale.contains(r))) {
            let (Some(run), "run.state" | "task.state") = (&event.run_id, event.kind.as_str()) else { continue };
            let data: serde_json::Value = serde_json::from_str(&event.data).unwrap_or_default();
            let (Some(from), Some(to)) = (data["from"].as_str(), data["to"].as_str()) else {
                return Err(format!("a {} event of run {run} says no from/to: {}", event.kind, event.data));
            };
            let task = (event.kind == "task.state").then(|| event.task.clone().unwrap_or_default());
            let key = (run.clone(), task);
            if let Some(last) = self.last_state.get(&key)
                && last != from
            {
                return Err(format!(
                    "the events of run {run}{} skip a step: the last went to `{last}`, the next ({writer}'s) starts from `{from}`",
                    key.1.as_deref().map(|t| format!(", task {t}")).unwrap_or_default()
                ));
            }
            self.last_state.insert(key, to.to_owned());
        }
        Ok(())
    }

    /// A run's `timeout`, in ms.
    pub(crate) fn timeout_of(store: &FakeStore, run: &dagr_store::RunRow) -> Option<i64> {
        let (_, workflow, _) = store.workflows.get(&(run.tenant.clone(), run.workflow.clone()))?;
        workflow.timeout.map(|t| t.as_millis() as i64)
    }

    /// Whether the outer DAG's upstream run of `logical` has ended.
    fn upstream_is_ended(store: &FakeStore, logical: i64) -> bool {
        store.runs.values().any(|r| r.workflow == UPSTREAM && r.logical_time == logical && r.state.is_terminal())
    }

    /// No workflow has more runs active (running or paused) than its
    /// `max_active_runs`, whichever masters drive them.
    fn active_within_limits(store: &FakeStore) -> Result<(), String> {
        let mut active: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
        for r in store.runs.values().filter(|r| matches!(r.state, RunState::Running | RunState::Paused)) {
            active.entry((r.tenant.as_str(), r.workflow.as_str())).or_default().push(r.id.as_str());
        }
        for ((tenant, workflow), runs) in active {
            let max = store
                .workflows
                .get(&(tenant.to_owned(), workflow.to_owned()))
                .and_then(|(_, w, _)| w.spec.max_active_runs);
            if let Some(max) = max
                && runs.len() > max as usize
            {
                return Err(format!(
                    "{} runs of {workflow} active at once under max_active_runs: {max}: {runs:?}",
                    runs.len()
                ));
            }
        }
        let mut by_backfill: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for r in store.runs.values().filter(|r| matches!(r.state, RunState::Running | RunState::Paused)) {
            if let Some(backfill) = &r.backfill_id {
                by_backfill.entry(backfill.as_str()).or_default().push(r.id.as_str());
            }
        }
        for (backfill, runs) in by_backfill {
            if let Some(parallel) = store.backfills.get(backfill)
                && runs.len() > *parallel
            {
                return Err(format!(
                    "{} runs of backfill {backfill} active at once under its parallelism {parallel}: {runs:?}",
                    runs.len()
                ));
            }
        }
        Ok(())
    }

    fn one_result_per_task(&self, store: &FakeStore, run: &str) -> Result<(), String> {
        let mut succeeded: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        // The gate's sensor checks that found its condition not met are
        // not its result.
        let gate = store.runs.get(run).is_some_and(|r| r.workflow == GATE);
        let sensor = |task: i64| gate && task == GATE_SENSOR;
        for ((_, task, number), a) in store.attempts.range((run.to_owned(), i64::MIN, i64::MIN)..) {
            if a.run_id != run {
                break;
            }
            if a.state == AttemptState::Succeeded && !(sensor(*task) && *number < SENSOR_READY_FROM) {
                succeeded.entry(*task).or_default().push(*number);
            }
        }
        let lives = |task: i64| {
            let name = store.tasks.get(run).and_then(|ts| ts.get(task as usize)).map(|t| t.name.clone());
            1 + name.and_then(|n| self.lives.get(&(run.to_owned(), n))).copied().unwrap_or(0)
        };
        match succeeded.into_iter().find(|(task, numbers)| numbers.len() > lives(*task)) {
            Some((task, numbers)) => Err(format!(
                "task {task} of run {run} has {} attempts accepted as its result in {} lives: {numbers:?}",
                numbers.len(),
                lives(task)
            )),
            None => Ok(()),
        }
    }

    /// A worker starts an attempt: not one the store has ended already
    /// (its task would run twice: a new attempt of it goes, or went) —
    /// but for one cancelled while its dispatch was on the way: its
    /// cancellation follows the dispatch (and may come after the attempt
    /// ended, as the real one may). Broken, it is kept for
    /// [`Checker::broken`].
    pub(crate) fn started(&mut self, key: &AttemptKey, worker: &str, store: &FakeStore) {
        let key = (key.run_id.clone(), key.task as i64, key.number as i64);
        let ended = store.attempts.get(&key).filter(|a| a.state != AttemptState::Running);
        let cancelled = ended.is_some_and(|a| a.failure_kind == Some(FailureKind::Cancelled));
        if let Some(a) = ended
            && !cancelled
            && self.broken.is_none()
        {
            self.broken = Some(format!(
                "{worker} started attempt {}/{}#{}, which had ended already ({:?}, {})",
                a.run_id,
                a.task,
                a.number,
                a.state,
                a.failure_kind.map_or("", |k| k.as_str())
            ));
        }
        // A downstream run's task starts once its upstream run has ended
        // (again, if the run was made to wait again while it ran); so does
        // the gate's task that waits upstream. But for an attempt cancelled
        // while its dispatch was on the way: started in the run's life
        // before it was made to wait again, it runs until its cancellation
        // arrives, and its result is refused (`--gates --outer --masters 2
        // --workers 2 --runs 20 --resources leader --concurrency`, seed
        // 2801451: the re-flush was applied in the step after the one
        // that started the attempt).
        let waits = |run: &dagr_store::RunRow| match run.workflow.as_str() {
            DOWNSTREAM => Some(&self.rewaiting),
            GATE if key.1 == GATE_WAITS => Some(&self.gate_waits),
            _ => None,
        };
        if let Some(run) = store.runs.get(&key.0)
            && let Some(waits) = waits(run)
            && !cancelled
            && self.broken.is_none()
        {
            let (since, ended_then) = waits.get(&run.id).copied().unwrap_or((0, false));
            let ended = self.upstream_ended.get(&run.logical_time).is_some_and(|&at| at > since);
            if !(ended || ended_then) {
                self.broken = Some(format!(
                    "{worker} started attempt {}/{}#{} of run {} ({:?}) before the `{UPSTREAM}` run of its logical time {} ended{}",
                    key.0,
                    key.1,
                    key.2,
                    run.id,
                    run.state,
                    run.logical_time,
                    if since > 0 { " after the run was made to wait again" } else { "" }
                ));
            }
        }
        self.started.entry(key).or_insert_with(|| worker.to_owned());
    }

    /// A worker started `key` while `other` ran attempt `number` of the
    /// same task instance.
    pub(crate) fn twice(&mut self, key: &AttemptKey, worker: &str, other: &str, number: u32) {
        if self.broken.is_none() {
            self.broken = Some(format!(
                "{worker} started attempt {}/{}#{} while {other} ran its attempt #{number}",
                key.run_id, key.task, key.number
            ));
        }
    }

    /// A worker started `key`, under `limit`, while `running` of the
    /// attempts it counts ran already.
    pub(crate) fn over_cap(&mut self, key: &AttemptKey, worker: &str, limit: String, running: &[String]) {
        if self.broken.is_none() {
            self.broken = Some(format!(
                "{worker} started attempt {key} of {limit} while {} of its attempts ran: {}",
                running.len(),
                running.join(", ")
            ));
        }
    }

    /// An invariant found broken outside a commit (by a worker).
    pub(crate) fn broken(&mut self) -> Result<(), String> {
        self.broken.take().map_or(Ok(()), Err)
    }

    /// At the end: every run that ended, checked whole.
    pub(crate) fn at_end(&self, store: &FakeStore) -> Result<(), String> {
        for run in store.runs.values().filter(|r| r.state.is_terminal()) {
            self.one_result_per_task(store, &run.id)?;
            if let Some(last) = self.last_state.get(&(run.id.clone(), None))
                && last != run.state.as_str()
            {
                return Err(format!("run {} is {:?}, but its last event says `{last}`", run.id, run.state));
            }
            let tasks = store.tasks.get(&run.id).map(Vec::as_slice).unwrap_or_default();
            if run.state == RunState::Succeeded && tasks.iter().any(|t| !t.state.is_terminal()) {
                return Err(format!("run {} succeeded with tasks not ended: {tasks:?}", run.id));
            }
        }
        let ended = |run: &str| store.runs.get(run).is_some_and(|r| r.state.is_terminal());
        if let Some(a) = store.attempts.values().find(|a| a.state == AttemptState::Running && ended(&a.run_id)) {
            return Err(format!("attempt {}/{}#{} is still running, and its run ended", a.run_id, a.task, a.number));
        }
        // `dispatch-failed` says the attempt never ran: it goes again, and
        // is not counted as lost. A worker that did run it ran it twice.
        for (key, a) in &store.attempts {
            if a.failure_kind == Some(FailureKind::DispatchFailed)
                && let Some(worker) = self.started.get(key)
            {
                return Err(format!(
                    "attempt {}/{}#{} is recorded as dispatch-failed (never ran), but {worker} started it",
                    a.run_id, a.task, a.number
                ));
            }
        }
        Ok(())
    }
}
