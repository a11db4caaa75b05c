//! The test bench's store: the rows the engine reads and writes, kept in
//! maps, answering the engine's [`Need`]s and applying its batches with
//! the real store's fences and limits (see [`FakeStore::commit`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use dagr_core::Workflow;
use dagr_protocol::commands::Command;
use dagr_protocol::plugins::PluginDirectory;
use dagr_store::admission;
use dagr_store::{
    AttemptRow, AttemptState, Committed, OutputWrite, RunKind, RunRow, RunState, TaskRow, TaskState, WriteBatch,
};

use super::FakePlugins;
use crate::engine::effects::{Data, LoadError, LoadedRun, Need, PendingCommand, ScheduleRow, ScheduleSource};

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
    /// Every version applied: (tenant, name, version) → its definition (a
    /// run loads the version it was made from).
    pub versions: BTreeMap<(String, String, i64), Arc<Workflow>>,
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
    /// Runs active now (running or paused), as admissions count them.
    fn active_runs(&self) -> impl Iterator<Item = &RunRow> {
        self.runs.values().filter(|r| matches!(r.state, RunState::Running | RunState::Paused))
    }

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
                    // The active runs, as the store's `active_runs_in_slots`
                    // (a waiting run is loaded when a command or a wake-up
                    // names it).
                    let set: HashSet<u32> = slots.iter().copied().collect();
                    let active =
                        |r: &RunRow| matches!(r.state, RunState::Queued | RunState::Running | RunState::Paused);
                    let ids: Vec<String> = self
                        .runs
                        .values()
                        .filter(|r| set.contains(&(r.slot as u32)) && active(r))
                        .map(|r| r.id.clone())
                        .filter(|id| !(reader.has_run)(id) && !data.loaded.iter().any(|l| l.row.id == *id))
                        .collect();
                    for id in ids {
                        match self.load(&id, reader.node) {
                            Ok(loaded) => data.loaded.push(loaded),
                            Err(e) => data.failed.push((id, e)),
                        }
                    }
                    data.waiting.extend(
                        self.runs
                            .values()
                            .filter(|r| set.contains(&(r.slot as u32)) && r.state == RunState::Waiting)
                            .map(|r| (r.tenant.clone(), r.id.clone())),
                    );
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
                Need::Commands => data.commands = Some(self.commands_after(0, 256)),
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
        let made_from = row.version.and_then(|v| self.versions.get(&(row.tenant.clone(), row.workflow.clone(), v)));
        let workflow = made_from
            .cloned()
            .or_else(|| self.workflow_named(&row.workflow))
            .ok_or_else(|| LoadError::Invalid("no workflow".into()))?;
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
        if !batch.admissions.is_empty() || !batch.sole_starts.is_empty() {
            // Admissions past their limits, counted as the SQL store does.
            let mut live = batch.clone();
            admission::drop_writes(&mut live, &committed.fenced.iter().cloned().collect());
            let stored: Vec<(admission::Limit, Vec<String>)> = admission::limits(&live)
                .into_iter()
                .map(|limit| {
                    let ids = self
                        .active_runs()
                        .filter(|r| r.tenant == limit.tenant && r.workflow == limit.workflow)
                        .filter(|r| limit.backfill.is_none() || r.backfill_id == limit.backfill)
                        .map(|r| r.id.clone())
                        .collect();
                    (limit, ids)
                })
                .collect();
            let mut over = admission::over_limit(&live, &stored);
            let elsewhere: Vec<(admission::Sole, Vec<String>)> = admission::soles(&live)
                .into_iter()
                .map(|sole| {
                    let ids = self
                        .active_runs()
                        .filter(|r| r.tenant == sole.0 && r.slot == sole.1)
                        .filter(|r| r.owner.as_ref().is_some_and(|o| *o != sole.2))
                        .map(|r| r.id.clone())
                        .collect();
                    (sole, ids)
                })
                .collect();
            over.extend(admission::held_elsewhere(&live, &elsewhere));
            stale.extend(batch.admissions.iter().filter(|a| over.contains(&a.run_id)).map(|a| a.run_id.as_str()));
            stale.extend(batch.sole_starts.iter().filter(|s| over.contains(&s.run_id)).map(|s| s.run_id.as_str()));
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
        for id in batch.clear_waits.iter().filter(|id| !stale.contains(id.as_str())) {
            self.waits.remove(id);
        }
        for w in batch.run_waits.iter().filter(|w| !stale.contains(w.run_id.as_str())) {
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
        self.links.extend(batch.links.iter().filter(|(_, _, down)| !stale.contains(down.as_str())).cloned());
        for c in batch.commands.iter().filter(|c| c.by.as_deref().is_none_or(|by| !stale.contains(by))) {
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
