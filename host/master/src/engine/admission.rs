//! Admission: a queued run starts when its workflow's `max_active_runs` and
//! its backfill's parallelism allow; otherwise it waits in line, oldest
//! first, until a run of the same workflow stops being active.
//!
//! A workflow's line is kept in lanes by what holds a run back beyond the
//! workflow's own limit: one lane per backfill with a parallelism, one for
//! every other run. Within a lane every run is held back by the same
//! limits, so only a lane's oldest run is ever looked at: admitting, and
//! queueing a run or forgetting one, cost the same with a hundred thousand
//! runs in line as with one (a run that leaves the line other than by
//! admission is dropped from its lane when it comes to the front).

use std::collections::VecDeque;
use std::sync::Arc;

use dagr_core::run::{Input as RunInput, RunState};
use dagr_store::Admission;

use crate::engine::effects::Effects;
use crate::engine::runs::{ActiveRun, WorkflowKey};
use crate::engine::state::EngineState;
use crate::hash::Map;

/// A workflow's queued runs waiting for admission.
#[derive(Debug, Default)]
pub(crate) struct Line {
    /// Places are handed out in the order runs join.
    next: u64,
    /// The runs in line, each with its place.
    members: Map<Arc<str>, u64>,
    /// By backfill (`None`: held back by the workflow's limit alone), in
    /// order of place; entries whose run left are dropped at the front.
    lanes: Map<Option<String>, VecDeque<(u64, Arc<str>)>>,
}

/// What admission makes of the run at the front of a lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Front {
    /// It may start now.
    Open,
    /// Its limits are reached: so are those of every run behind it.
    Held,
    /// It is no longer a queued run here: it leaves the line.
    Gone,
}

impl Line {
    /// Puts `id` at the back of `lane`; false if it is in line already.
    pub(crate) fn join(&mut self, lane: Option<String>, id: Arc<str>) -> bool {
        if self.members.contains_key(&id) {
            return false;
        }
        let place = self.next;
        self.next += 1;
        self.members.insert(id.clone(), place);
        self.lanes.entry(lane).or_default().push_back((place, id));
        true
    }

    /// Takes `id` out of line (if it is in it).
    pub(crate) fn leave(&mut self, id: &str) {
        self.members.remove(id);
    }

    pub(crate) fn has(&self, id: &str) -> bool {
        self.members.contains_key(id)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The oldest run at the front of a lane that `judge` finds open,
    /// taken out of line; runs it finds gone leave the line on the way.
    pub(crate) fn next_open(&mut self, mut judge: impl FnMut(&Arc<str>) -> Front) -> Option<Arc<str>> {
        let mut best: Option<(u64, &Option<String>)> = None;
        for (lane, queue) in &mut self.lanes {
            while let Some((place, id)) = queue.front() {
                if self.members.get(id) != Some(place) {
                    queue.pop_front();
                    continue;
                }
                match judge(id) {
                    Front::Open if best.is_none_or(|(b, _)| *place < b) => best = Some((*place, lane)),
                    Front::Open | Front::Held => {}
                    Front::Gone => {
                        self.members.remove(id);
                        queue.pop_front();
                        continue;
                    }
                }
                break;
            }
        }
        let lane = best.map(|(_, lane)| lane.clone());
        self.lanes.retain(|_, queue| !queue.is_empty());
        let (_, id) = self.lanes.get_mut(&lane?)?.pop_front()?;
        self.members.remove(&id);
        Some(id)
    }
}

/// The lane of a run: its backfill, if the backfill limits its parallelism.
fn lane_of(run: &ActiveRun) -> Option<String> {
    run.backfill_parallel.and(run.row.backfill_id.clone())
}

/// A run under a limit on active runs, dropped here and claimed again: it
/// may be active (elsewhere, or here once read) and is not counted
/// meanwhile, so what its limits govern waits until it is read (for at most
/// [`RECLAIM_HOLD_MS`](crate::engine::state::RECLAIM_HOLD_MS)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hold {
    pub(crate) workflow: WorkflowKey,
    /// What waits: `None`, every run of the workflow (its
    /// `max_active_runs` counts the run); else the lane of the run's
    /// backfill, whose parallelism alone counts it.
    pub(crate) lane: Option<String>,
    /// The run's slot: a slot that leaves takes its holds with it.
    pub(crate) slot: u32,
    pub(crate) since: i64,
}

impl Hold {
    /// What a run with these limits holds while it is claimed again, if
    /// anything (`lane`: its backfill, if the backfill has a parallelism).
    pub(crate) fn of(
        workflow: WorkflowKey,
        max_active_runs: Option<u32>,
        lane: Option<String>,
        slot: u32,
        since: i64,
    ) -> Option<Hold> {
        let lane = match (max_active_runs, lane) {
            (Some(_), _) => None,
            (None, Some(lane)) => Some(lane),
            (None, None) => return None,
        };
        Some(Hold { workflow, lane, slot, since })
    }

    /// The hold of an active run being dropped, if its limits count it.
    pub(crate) fn of_run(run: &ActiveRun, since: i64) -> Option<Hold> {
        let max_active_runs = run.machine.workflow().spec.max_active_runs;
        Hold::of(run.workflow_key(), max_active_runs, lane_of(run), run.row.slot as u32, since)
    }
}

/// Whether `run` may start, given the runs active per workflow and per
/// backfill.
fn can_admit(by_workflow: &Map<WorkflowKey, usize>, by_backfill: &Map<String, usize>, run: &ActiveRun) -> bool {
    let workflow_ok = match run.machine.workflow().spec.max_active_runs {
        Some(max) => by_workflow.get(&run.workflow_key()).copied().unwrap_or(0) < max as usize,
        None => true,
    };
    let backfill_ok = match (&run.row.backfill_id, run.backfill_parallel) {
        (Some(bf), Some(parallel)) => by_backfill.get(bf).copied().unwrap_or(0) < parallel,
        _ => true,
    };
    workflow_ok && backfill_ok
}

impl EngineState {
    /// Puts a queued run in its workflow's line and starts what may start.
    pub(crate) fn admit_or_wait(&mut self, effects: &mut Effects, run_id: &Arc<str>, now: i64) {
        let Some(run) = self.runs.get(run_id) else {
            return;
        };
        if run.machine.state() != RunState::Queued {
            return;
        }
        let key = run.workflow_key();
        self.waiting.entry(key.clone()).or_default().join(lane_of(run), run_id.clone());
        self.try_admit_waiting(effects, &key, now);
    }

    /// Starts the waiting runs of a workflow that may start now, in order;
    /// none that a run being claimed again holds back (it may be active,
    /// and counts once it is read): every run of its workflow if the
    /// workflow limits its active runs, else the runs of its backfill.
    pub(crate) fn try_admit_waiting(&mut self, effects: &mut Effects, key: &WorkflowKey, now: i64) {
        let mut held_lanes: Vec<String> = Vec::new();
        for hold in self.reclaiming.values().filter(|hold| hold.workflow == *key) {
            match &hold.lane {
                None => return,
                Some(lane) => held_lanes.push(lane.clone()),
            }
        }
        loop {
            let Some(line) = self.waiting.get_mut(key) else {
                return;
            };
            let (runs, by_workflow, by_backfill) = (&self.runs, &self.active_by_workflow, &self.active_by_backfill);
            let next = line.next_open(|id| match runs.get(id) {
                Some(run) if run.machine.state() == RunState::Queued => {
                    let lane_held = !held_lanes.is_empty()
                        && run.row.backfill_id.as_ref().is_some_and(|bf| held_lanes.contains(bf));
                    if !lane_held && can_admit(by_workflow, by_backfill, run) { Front::Open } else { Front::Held }
                }
                _ => Front::Gone,
            });
            if line.is_empty() {
                self.waiting.remove(key);
            }
            let Some(id) = next else { return };
            let per_slot = self.runs.get(&id).is_some_and(|run| self.counted_per_slot(run));
            if let Some(run) = self.runs.get_mut(&id)
                && let Ok(actions) = run.machine.apply(RunInput::Start, now)
            {
                if self.settings.fence_writes {
                    // The store counts the runs other masters hold too.
                    let max_active_runs = run.machine.workflow().spec.max_active_runs;
                    let backfill = run.backfill_parallel.zip(run.row.backfill_id.clone());
                    // Limits counted per slot: the store checks no other
                    // master holds an active run of the tenant in it.
                    let sole = per_slot.then(|| run.row.owner.clone().map(|owner| (run.row.slot, owner))).flatten();
                    if max_active_runs.is_some() || backfill.is_some() || sole.is_some() {
                        effects.batch.admissions.push(Admission {
                            run_id: id.to_string(),
                            tenant: run.row.tenant.clone(),
                            workflow: run.row.workflow.clone(),
                            max_active_runs,
                            backfill: backfill.map(|(parallel, id)| (id, u32::try_from(parallel).unwrap_or(u32::MAX))),
                            sole,
                        });
                    }
                }
                self.absorb(effects, &id, actions, now);
            }
        }
    }

    pub(crate) fn remove_waiting(&mut self, key: &WorkflowKey, id: &str) {
        if let Some(line) = self.waiting.get_mut(key) {
            line.leave(id);
            if line.is_empty() {
                self.waiting.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_of(runs: &[(&str, Option<&str>)]) -> Line {
        let mut line = Line::default();
        for (id, lane) in runs {
            assert!(line.join(lane.map(Into::into), Arc::from(*id)));
        }
        line
    }

    #[test]
    fn the_oldest_open_front_goes_first_and_a_run_joins_once() {
        let mut line = line_of(&[("a0", Some("a")), ("b0", Some("b")), ("m0", None), ("a1", Some("a"))]);
        assert!(!line.join(Some("a".into()), Arc::from("a0")), "already in line");
        let mut order = Vec::new();
        while let Some(id) = line.next_open(|_| Front::Open) {
            order.push(id.to_string());
        }
        assert_eq!(order, ["a0", "b0", "m0", "a1"]);
        assert!(line.is_empty());
    }

    #[test]
    fn a_held_lane_does_not_hold_the_others_and_only_its_front_is_judged() {
        let mut line = line_of(&[("a0", Some("a")), ("a1", Some("a")), ("b0", Some("b"))]);
        let mut judged = Vec::new();
        let next = line.next_open(|id| {
            judged.push(id.to_string());
            if id.starts_with('a') { Front::Held } else { Front::Open }
        });
        assert_eq!(next.as_deref(), Some("b0"));
        judged.sort();
        assert_eq!(judged, ["a0", "b0"], "a1 is behind a held front");
        assert_eq!(line.next_open(|id| if id.starts_with('a') { Front::Held } else { Front::Open }), None);
        assert!(!line.is_empty());
    }

    #[test]
    fn runs_that_left_or_are_gone_are_passed_over() {
        let mut line = line_of(&[("a0", Some("a")), ("a1", Some("a")), ("a2", Some("a"))]);
        line.leave("a0");
        let next = line.next_open(|id| if id.as_ref() == "a1" { Front::Gone } else { Front::Open });
        assert_eq!(next.as_deref(), Some("a2"));
        assert!(line.is_empty());
        // One that left and joins again is in line once, at the back.
        let mut again = line_of(&[("x", None), ("y", None), ("z", None)]);
        again.leave("x");
        assert!(again.join(None, Arc::from("x")));
        let mut order = Vec::new();
        while let Some(id) = again.next_open(|_| Front::Open) {
            order.push(id.to_string());
        }
        assert_eq!(order, ["y", "z", "x"]);
    }
}
