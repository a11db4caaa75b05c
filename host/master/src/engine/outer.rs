//! The outer DAG in the engine: runs (and tasks) that wait for instances of
//! other workflows.
//!
//! A run whose workflow has `upstream` dependencies is created `waiting`.
//! When it is loaded (its admit command) or woken (a `wake` command: an
//! upstream instance in its range changed state, written by the store in
//! the transaction that recorded the change), it is evaluated: the
//! instances it needs are computed from the upstream workflows' schedules
//! ([`dagr_core::outer::expected`]), read from the store by cycle range, and
//! judged ([`dagr_core::outer::evaluate`]). Satisfied, it is released to
//! `queued`; otherwise its waits are recorded (`run_waits`, the index the
//! store wakes it by) and it leaves memory — a waiting instance costs a few
//! rows, not engine memory. No loop ever scans waiting runs.
//!
//! A task with `upstream` dependencies is evaluated the same way when it
//! becomes ready, and waits (holding no worker) while its run goes on.

use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use dagr_core::control::UpstreamFailure;
use dagr_core::outer::{CycleOffset, Expected, Period, Standing, Upstream, UpstreamRun, Wait, evaluate, expected};
use dagr_core::run::{Input as RunInput, RunState, TaskState};
use dagr_core::schedule::Schedule;
use dagr_store::RunWait;
use serde_json::json;

use crate::engine::effects::{Effects, Need, UpstreamQuery};
use crate::engine::state::EngineState;

/// Cycles one dependency may name at most (a per-second upstream over a
/// month would be millions).
pub(crate) const MAX_UPSTREAM_INSTANCES: usize = 10_000;

/// Entries [`ExpectedMemo`] holds at most (it starts again when full).
const EXPECTED_MEMO_ENTRIES: usize = 8_192;

/// What [`expected`] answered, by everything its answer depends on.
///
/// Walking an upstream's cron through a period (24 cycles for an hourly
/// upstream over a day) is most of a judgement's own work, and the same
/// walk comes again and again: a run is judged once before its upstream
/// runs are read and once after, again at every wake-up, and every run of
/// the same cycle that depends on the same upstream asks the same. The
/// key holds the upstream's schedule as written (expression, time zone,
/// start, end), so a new version with another schedule is another key.
#[derive(Default)]
pub(crate) struct ExpectedMemo {
    answers: crate::hash::Map<ExpectedKey, Result<Expected, String>>,
}

#[derive(PartialEq, Eq, Hash)]
struct ExpectedKey {
    /// In the error's text.
    workflow: String,
    schedule: Option<(String, chrono_tz::Tz, Option<i64>, Option<i64>)>,
    cycles: Option<Period>,
    offset: CycleOffset,
    logical: i64,
    tz: chrono_tz::Tz,
}

impl ExpectedMemo {
    /// [`expected`] for a run at `logical` (in `tz`), remembered.
    pub(crate) fn get(
        &mut self,
        dep: &Upstream,
        logical: i64,
        tz: chrono_tz::Tz,
        schedule: Option<&Schedule>,
    ) -> Result<Expected, String> {
        let key = ExpectedKey {
            workflow: dep.workflow.clone(),
            schedule: schedule.map(|s| {
                (
                    s.expression.clone(),
                    s.timezone,
                    s.start.map(|t| t.timestamp_millis()),
                    s.end.map(|t| t.timestamp_millis()),
                )
            }),
            cycles: dep.cycles,
            offset: dep.offset,
            logical,
            tz,
        };
        if let Some(answer) = self.answers.get(&key) {
            return answer.clone();
        }
        let answer = expected(dep, to_time(logical), tz, schedule, MAX_UPSTREAM_INSTANCES);
        if self.answers.len() >= EXPECTED_MEMO_ENTRIES {
            self.answers.clear();
        }
        self.answers.insert(key, answer.clone());
        answer
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.answers.len()
    }
}

/// The verdict on a set of dependencies.
pub(crate) struct Verdict {
    pub standing: Standing,
    /// What is still missing or failed.
    pub waits: Vec<Wait>,
    /// The ranges waited on, as read (for `run_waits`).
    pub spans: Vec<UpstreamQuery>,
    /// The upstream runs that satisfied it.
    pub satisfied_by: Vec<String>,
    /// The blocker with the latest logical time: the range it was read in
    /// and its time; none when a blocker has no logical time (a window
    /// with no run in it, or a dependency whose instances could not be
    /// computed).
    pub sentinel: Option<(UpstreamQuery, i64)>,
}

/// Runs as a judging read saw them: (id, state, task state), by id.
pub(crate) type Seen = Vec<(String, RunState, Option<TaskState>)>;

/// A wait to read again once it has committed: another master may have
/// ended (or made) an instance in its range between this master's read and
/// that commit, and its wake-up did not find the wait yet.
#[derive(Debug, Clone)]
pub(crate) struct Confirm {
    pub run_id: String,
    pub tenant: String,
    /// The range waited on (the sentinel's cycle alone for the sentinel).
    pub query: UpstreamQuery,
    pub seen: Seen,
    pub failures_only: bool,
}

impl Confirm {
    /// Whether `now`, the range read again, holds a change the wait would
    /// have been woken by: any change, or for a wait on failures only, an
    /// end other than success that was not there before.
    fn missed(&self, now: &Seen) -> bool {
        if !self.failures_only {
            return *now != self.seen;
        }
        let failed = |(_, run, task): &(String, RunState, Option<TaskState>)| {
            (run.is_terminal() && *run != RunState::Succeeded)
                || task.is_some_and(|t| t.is_terminal() && t != TaskState::Succeeded)
        };
        now.iter().filter(|r| failed(r)).any(|r| !self.seen.contains(r))
    }
}

/// How far a blocker is from its end: failed (needs a rerun), not made,
/// waiting upstream itself, queued, started.
fn behind(wait: &Wait) -> u8 {
    match (wait.standing, wait.state.as_str()) {
        (Standing::Failed, _) => 4,
        (_, "missing") => 3,
        (_, "waiting") => 2,
        (_, "queued" | "pending") => 1,
        _ => 0,
    }
}

/// The runs of `runs` with logical times in [`from`, `to`], by id.
fn seen_in(runs: &[dagr_store::CycleRun], from: i64, to: i64) -> Seen {
    let mut seen: Seen = runs
        .iter()
        .filter(|r| (from..=to).contains(&r.logical_time))
        .map(|r| (r.id.clone(), r.state, r.task_state))
        .collect();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    seen
}

/// What wakes a waiting run: an end of an instance in the range `read` was
/// read for — any end, or only one other than success (`failures_only`);
/// the sentinel's listens to its cycle `at` alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listen {
    pub read: UpstreamQuery,
    pub at: Option<i64>,
    pub failures_only: bool,
}

impl Listen {
    /// The logical times it listens to.
    fn span(&self) -> (i64, i64) {
        self.at.map_or((self.read.from, self.read.to), |at| (at, at))
    }
}

impl Verdict {
    /// What should wake the run while this verdict holds. Nothing can
    /// release it before every instance it waits for has ended, so only
    /// one of them need wake it on success: the *sentinel*, the one with
    /// the latest logical time (upstream cycles tend to end in order, so
    /// it is likely the last to end). Its ranges still wake it on any
    /// failure, which may fail it (by policy) or change what it reports.
    /// Without the sentinel a daily run waiting for 24 hours of five
    /// workflows was woken — loaded, judged, written back — 120 times,
    /// each time to wait on. A blocker without a time (a window with no
    /// run in it) leaves every range waking on any end, as before.
    pub fn listens(&self) -> Vec<Listen> {
        let sentinel = self.sentinel.as_ref();
        let mut listens: Vec<Listen> = self
            .spans
            .iter()
            .map(|read| Listen { read: read.clone(), at: None, failures_only: sentinel.is_some() })
            .collect();
        if let Some((read, at)) = sentinel {
            listens.push(Listen { read: read.clone(), at: Some(*at), failures_only: false });
        }
        listens
    }
}

fn to_time(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

impl EngineState {
    /// Judges `deps` for a run of `tenant` at `logical` (in `tz`), or asks
    /// for what it needs to (and answers `None`).
    pub(crate) fn judge(
        &mut self,
        effects: &mut Effects,
        tenant: &str,
        deps: &[Upstream],
        logical: i64,
        tz: chrono_tz::Tz,
    ) -> Option<Verdict> {
        let mut missing_defs: Vec<String> = deps
            .iter()
            .filter(|d| !self.definitions.contains_key(&(tenant.to_owned(), d.workflow.clone())))
            .map(|d| d.workflow.clone())
            .collect();
        if !missing_defs.is_empty() {
            missing_defs.sort();
            missing_defs.dedup();
            effects.need(Need::Workflows { tenant: tenant.into(), names: missing_defs });
            return None;
        }
        let mut plans: Vec<(&Upstream, Expected, UpstreamQuery)> = Vec::new();
        let mut verdict = Verdict {
            standing: Standing::Satisfied,
            waits: Vec::new(),
            spans: Vec::new(),
            satisfied_by: Vec::new(),
            sentinel: None,
        };
        // A blocker without a logical time: no sentinel.
        let mut timeless = false;
        for dep in deps {
            let upstream = self.definitions.get(&(tenant.to_owned(), dep.workflow.clone())).cloned().flatten();
            let schedule = upstream.as_ref().and_then(|(_, w)| w.schedule.as_ref());
            let expectation = match self.expected_memo.get(dep, logical, tz, schedule) {
                Ok(e) => e,
                Err(message) => {
                    verdict.standing = Standing::Failed;
                    timeless = true;
                    verdict.waits.push(Wait {
                        workflow: dep.workflow.clone(),
                        logical_time: None,
                        run_id: None,
                        state: message,
                        standing: Standing::Failed,
                    });
                    continue;
                }
            };
            let Some((from, to)) = expectation.span() else { continue };
            let query = UpstreamQuery {
                tenant: tenant.into(),
                workflow: dep.workflow.clone(),
                from: from.timestamp_millis(),
                to: to.timestamp_millis(),
                task: dep.task.clone(),
            };
            plans.push((dep, expectation, query));
        }
        let unread: Vec<&UpstreamQuery> =
            plans.iter().map(|(_, _, q)| q).filter(|q| !self.upstream_runs.contains_key(*q)).collect();
        if !unread.is_empty() {
            for q in unread {
                effects.need(Need::UpstreamRuns(q.clone()));
            }
            return None;
        }
        // The sentinel: the latest logical time; among equals, the one
        // furthest from its end; then by name, for a stable choice.
        let mut best: Option<((i64, u8, String), UpstreamQuery)> = None;
        for (dep, expectation, query) in plans {
            let runs: Vec<UpstreamRun> = self.upstream_runs[&query]
                .iter()
                .map(|r| UpstreamRun {
                    id: r.id.clone(),
                    logical_time: to_time(r.logical_time),
                    state: r.state,
                    task_state: r.task_state,
                })
                .collect();
            let (standing, waits) = evaluate(dep, &expectation, &runs);
            verdict.standing = verdict.standing.max(standing);
            if standing != Standing::Satisfied {
                verdict.spans.push(query.clone());
            }
            for wait in waits.iter().filter(|w| w.standing != Standing::Satisfied) {
                let Some(at) = wait.logical_time.map(|t| t.timestamp_millis()) else {
                    timeless = true;
                    continue;
                };
                let key = (at, behind(wait), dep.workflow.clone());
                if best.as_ref().is_none_or(|(best, _)| key > *best) {
                    best = Some((key, query.clone()));
                }
            }
            let blocking: Vec<&str> = waits.iter().filter_map(|w| w.run_id.as_deref()).collect();
            verdict.satisfied_by.extend(
                runs.iter()
                    .filter(|r| !blocking.contains(&r.id.as_str()))
                    .filter(|r| r.state.is_terminal())
                    .map(|r| r.id.clone()),
            );
            verdict.waits.extend(waits);
        }
        verdict.sentinel = best.filter(|_| !timeless).map(|((at, ..), range)| (range, at));
        Some(verdict)
    }

    /// Evaluates a loaded run that waits (or whose tasks wait) upstream:
    /// releases what may go, records what still waits.
    pub(crate) fn evaluate_waits(&mut self, effects: &mut Effects, run_id: &Arc<str>, now: i64) {
        let Some(run) = self.runs.get(run_id) else { return };
        let (tenant, logical, tz, slot) = (run.row.tenant.clone(), run.row.logical_time, run.timezone, run.row.slot);
        let workflow = run.machine.workflow().clone();
        let mut spans: Vec<Listen> = Vec::new();
        if run.machine.state() == RunState::Waiting {
            let Some(verdict) = self.judge(effects, &tenant, &workflow.upstream, logical, tz) else {
                self.keep_evaluating(run_id);
                return;
            };
            if !self.settle_run(effects, run_id, verdict, &mut spans, now) {
                return;
            }
        }
        // Tasks waiting upstream.
        let waiting: Vec<usize> = match self.runs.get(run_id) {
            Some(run) => (0..workflow.tasks.len())
                .filter(|&t| run.machine.task(t).state == TaskState::Waiting && run.extra[t].waiting_upstream)
                .collect(),
            None => Vec::new(),
        };
        for task in waiting {
            let Some(verdict) = self.judge(effects, &tenant, &workflow.tasks[task].upstream, logical, tz) else {
                self.keep_evaluating(run_id);
                return;
            };
            match verdict.standing {
                Standing::Satisfied => {
                    self.link(effects, &tenant, run_id, &verdict.satisfied_by);
                    if let Some(run) = self.runs.get_mut(run_id) {
                        run.extra[task].waiting_upstream = false;
                        if let Ok(actions) = run.machine.apply(RunInput::Unblock { task }, now) {
                            self.absorb(effects, run_id, actions, now);
                        }
                    }
                }
                _ => spans.extend(verdict.listens()),
            }
        }
        self.record_waits(effects, run_id, &tenant, slot, spans);
        self.evaluating.retain(|r| r != run_id);
    }

    /// A waiting run's verdict: released, failed, or still waiting (then it
    /// leaves memory once its waits are recorded). Returns whether the run
    /// is still loaded and running (its tasks' waits are judged next).
    fn settle_run(
        &mut self,
        effects: &mut Effects,
        run_id: &Arc<str>,
        verdict: Verdict,
        spans: &mut Vec<Listen>,
        now: i64,
    ) -> bool {
        let Some(run) = self.runs.get_mut(run_id) else { return false };
        let (tenant, slot) = (run.row.tenant.clone(), run.row.slot);
        let policy = run.machine.workflow().spec.on_upstream_failure;
        let waits = serde_json::to_value(&verdict.waits).unwrap_or_default();
        match verdict.standing {
            Standing::Satisfied => {
                tracing::info!(run = %run_id, "upstream instances done: released");
                effects.batch.events.push(run.event("run.released", None, json!({}), now));
                effects.batch.clear_waits.push(run_id.to_string());
                if let Ok(actions) = run.machine.apply(RunInput::Release, now) {
                    self.absorb(effects, run_id, actions, now);
                }
                self.link(effects, &tenant, run_id, &verdict.satisfied_by);
                self.admit_or_wait(effects, run_id, now);
                true
            }
            Standing::Failed if policy == UpstreamFailure::Fail => {
                effects.batch.events.push(run.event("run.upstream_failed", None, json!({ "waits": waits }), now));
                effects.batch.clear_waits.push(run_id.to_string());
                if let Ok(actions) = run.machine.apply(RunInput::MarkFailed, now) {
                    self.absorb(effects, run_id, actions, now);
                }
                false
            }
            _ => {
                effects.batch.events.push(run.event("run.waiting", None, json!({ "waits": waits }), now));
                spans.extend(verdict.listens());
                let spans = std::mem::take(spans);
                self.record_waits(effects, run_id, &tenant, slot, spans);
                // A waiting instance costs rows, not memory: it is loaded
                // again when woken.
                self.evaluating.retain(|r| r != run_id);
                self.parking.push(run_id.clone());
                false
            }
        }
    }

    /// Waits recorded by the last step, read again now that they are
    /// committed: a range that changed since in a way that would have woken
    /// the run wakes it — the change's own wake-up may have committed
    /// before the waits did.
    pub(crate) fn confirm_waits(&mut self, effects: &mut Effects, now: i64) {
        if self.confirming.is_empty() {
            return;
        }
        let mut woken: Vec<String> = Vec::new();
        for confirm in std::mem::take(&mut self.confirming) {
            let Some(runs) = self.upstream_runs.get(&confirm.query) else {
                self.confirming.push(confirm);
                continue;
            };
            if !woken.contains(&confirm.run_id) && confirm.missed(&seen_in(runs, confirm.query.from, confirm.query.to))
            {
                tracing::debug!(run = %confirm.run_id, "an upstream instance changed before its waits committed: woken");
                effects.command_for(
                    &confirm.tenant,
                    &confirm.run_id,
                    &dagr_protocol::commands::Command::Wake,
                    None,
                    now,
                );
                woken.push(confirm.run_id);
            }
        }
    }

    /// At the start of a step: the waits the last step recorded are read
    /// again, once every commit waking their upstream has ended.
    pub(crate) fn begin_confirmations(&mut self, effects: &mut Effects) {
        self.confirming.append(&mut self.unconfirmed);
        for confirm in &self.confirming {
            effects.need(Need::Settled(confirm.query.clone()));
        }
    }

    pub(crate) fn keep_evaluating(&mut self, run_id: &Arc<str>) {
        if !self.evaluating.contains(run_id) {
            self.evaluating.push(run_id.clone());
        }
    }

    /// Evaluations that waited for data in an earlier pass.
    pub(crate) fn continue_evaluations(&mut self, effects: &mut Effects, now: i64) {
        for run_id in std::mem::take(&mut self.evaluating) {
            self.evaluate_waits(effects, &run_id, now);
        }
    }

    /// A run rerun or re-flushed with its downstream: the runs it released
    /// are re-flushed (with theirs) by commands written in this step's
    /// transaction, the one that takes this run out of its end state. A
    /// command written by the API beside the upstream's own could be judged
    /// first, while the upstream still reads as finished, and release its
    /// run at once.
    pub(crate) fn reflush_released(&mut self, effects: &mut Effects, tenant: &str, run_id: &str, now: i64) {
        self.reflushing.push((tenant.to_owned(), run_id.to_owned()));
        self.continue_reflushes(effects, now);
    }

    /// Re-flush commands for the runs whose released runs were read.
    pub(crate) fn continue_reflushes(&mut self, effects: &mut Effects, now: i64) {
        if self.reflushing.is_empty() {
            return;
        }
        let command = dagr_protocol::commands::Command::Reflush { downstream: true };
        for (tenant, run_id) in std::mem::take(&mut self.reflushing) {
            let Some(released) = self.released.get(&run_id) else {
                effects.need(Need::ReleasedBy(run_id.clone()));
                self.reflushing.push((tenant, run_id));
                continue;
            };
            for downstream in released {
                effects.command_for(&tenant, downstream, &command, Some(&run_id), now);
            }
        }
    }

    /// Replaces what a run waits for with `spans`.
    fn record_waits(&mut self, effects: &mut Effects, run_id: &str, tenant: &str, slot: i64, spans: Vec<Listen>) {
        effects.batch.clear_waits.push(run_id.to_owned());
        // Another master may end an instance in a range between this
        // step's read and its commit, and its wake-up would not find these
        // waits yet: the ranges are read again after the commit. Only a
        // single node is sure to be alone; a master of a cluster that owns
        // every slot now may not when its commit lands (another master
        // came back and took the upstream's slot meanwhile: the simulation,
        // seed 2300376 with two masters).
        let alone = !self.settings.fence_writes;
        for listen in spans {
            let (from, to) = listen.span();
            if !alone && let Some(runs) = self.upstream_runs.get(&listen.read) {
                self.unconfirmed.push(Confirm {
                    run_id: run_id.to_owned(),
                    tenant: tenant.to_owned(),
                    query: UpstreamQuery { from, to, ..listen.read.clone() },
                    seen: seen_in(runs, from, to),
                    failures_only: listen.failures_only,
                });
            }
            effects.batch.run_waits.push(RunWait {
                run_id: run_id.to_owned(),
                tenant: tenant.to_owned(),
                upstream: listen.read.workflow,
                from_time: from,
                to_time: to,
                slot,
                failures_only: listen.failures_only,
            });
        }
    }

    fn link(&mut self, effects: &mut Effects, tenant: &str, run_id: &str, by: &[String]) {
        for upstream in by {
            effects.batch.links.push((tenant.to_owned(), upstream.clone(), run_id.to_owned()));
        }
    }
}

/// What a list of waits says, for people.
pub(crate) fn describe(waits: &[Wait]) -> String {
    waits
        .iter()
        .map(|w| match w.logical_time {
            Some(t) => format!("{} {} is {}", w.workflow, t.to_rfc3339(), w.state),
            None => format!("{}: {}", w.workflow, w.state),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl EngineState {
    /// Writes a `wake` for each of the next `[master]
    /// takeover_wakes_per_step` runs to judge again whose slot this master
    /// still owns (a slot lost since is its new owner's to judge), and reads
    /// them in the next step.
    pub(crate) fn wake_to_rejudge(&mut self, effects: &mut Effects, now: i64) {
        let mut woken = 0;
        while woken < self.settings.takeover_wakes_per_step {
            let Some((tenant, run)) = self.rejudge.pop_front() else { break };
            if self.owns(dagr_protocol::slot_of(&run)) {
                effects.command_for(&tenant, &run, &dagr_protocol::commands::Command::Wake, None, now);
                woken += 1;
            }
        }
        if woken > 0 {
            effects.read_commands = true;
        }
    }
}

#[cfg(test)]
mod memo_tests {
    use dagr_core::definition::ScheduleSpec;
    use dagr_core::outer::{Expected, Upstream, UpstreamSpec, expected};
    use dagr_core::schedule::Schedule;

    use super::{ExpectedMemo, MAX_UPSTREAM_INSTANCES, to_time};

    fn schedule(cron: &str) -> Schedule {
        let spec: ScheduleSpec = serde_json::from_value(serde_json::json!({ "cron": cron })).unwrap();
        Schedule::new(&spec).unwrap()
    }

    fn dep(json: serde_json::Value) -> Upstream {
        let spec: UpstreamSpec = serde_json::from_value(json).unwrap();
        Upstream::new(&spec).unwrap()
    }

    #[test]
    fn the_memo_answers_what_expected_answers_and_tells_schedules_apart() {
        let mut memo = ExpectedMemo::default();
        let day = dep(serde_json::json!({ "workflow": "loads", "cycles": "day" }));
        let hourly = schedule("0 * * * *");
        let every_two_hours = schedule("0 */2 * * *");
        let at = to_time(0).timestamp_millis() + 86_400_000 * 30;
        let utc = chrono_tz::UTC;
        let direct = |s: &Schedule| expected(&day, to_time(at), utc, Some(s), MAX_UPSTREAM_INSTANCES);

        let first = memo.get(&day, at, utc, Some(&hourly));
        assert_eq!(first, direct(&hourly));
        assert!(matches!(&first, Ok(Expected::Times(t)) if t.len() == 24));
        assert_eq!(memo.get(&day, at, utc, Some(&hourly)), first, "asked again");
        assert_eq!(memo.len(), 1, "answered from the memo");

        let other = memo.get(&day, at, utc, Some(&every_two_hours));
        assert!(matches!(&other, Ok(Expected::Times(t)) if t.len() == 12), "another schedule, another answer");
        assert_eq!(memo.get(&day, at, utc, None), expected(&day, to_time(at), utc, None, MAX_UPSTREAM_INSTANCES));
        let yesterday = dep(serde_json::json!({ "workflow": "loads", "cycles": "day", "offset": "-1d" }));
        assert_eq!(
            memo.get(&yesterday, at, utc, Some(&hourly)),
            expected(&yesterday, to_time(at), utc, Some(&hourly), MAX_UPSTREAM_INSTANCES)
        );
        assert_eq!(memo.len(), 4);
    }
}
