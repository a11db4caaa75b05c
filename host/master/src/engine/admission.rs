//! Admission: a queued run starts when its workflow's `max_active_runs` and
//! its backfill's parallelism allow; otherwise it waits in line, oldest
//! first, until a run of the same workflow stops being active.

use std::sync::Arc;

use dagr_core::run::{Input as RunInput, RunState};

use crate::engine::effects::Effects;
use crate::engine::runs::{ActiveRun, WorkflowKey};
use crate::engine::state::EngineState;

impl EngineState {
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

    /// Puts a queued run in its workflow's line and starts what may start.
    pub(crate) fn admit_or_wait(&mut self, effects: &mut Effects, run_id: &Arc<str>, now: i64) {
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
        self.try_admit_waiting(effects, &key, now);
    }

    /// Starts the waiting runs of a workflow that may start now, in order.
    pub(crate) fn try_admit_waiting(&mut self, effects: &mut Effects, key: &WorkflowKey, now: i64) {
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
                        self.absorb(effects, &id, actions, now);
                    }
                }
                None => self.remove_waiting(key, &id),
            }
        }
    }

    pub(crate) fn remove_waiting(&mut self, key: &WorkflowKey, id: &str) {
        if let Some(queue) = self.waiting.get_mut(key) {
            queue.retain(|r| r.as_ref() != id);
            if queue.is_empty() {
                self.waiting.remove(key);
            }
        }
    }
}
