//! A step's budget of task changes (`[master] step_task_changes`): what a
//! run's machine decides past it waits in the run's backlog for the next
//! steps.

use std::sync::Arc;

use dagr_core::run::{Action, TaskState};

use crate::engine::effects::Effects;
use crate::engine::runs::TaskExtra;
use crate::engine::state::EngineState;

impl EngineState {
    /// Carries out a run machine's actions, within the step's budget of
    /// task changes (`[master] step_task_changes`).
    ///
    /// A burst past the budget — tasks becoming `queued`, and their
    /// dispatch — waits in the run's backlog for the next steps, in
    /// order: the store then holds what the machine decided up to a point,
    /// as if it had decided more slowly, and a restart that loses the
    /// backlog decides those tasks again (`RunMachine::restore` evaluates
    /// every pending task). Nothing else is ever held back: an action that
    /// cannot be decided again (a task's end, a kill, the run's change)
    /// is carried out in its step, with the command or result that caused
    /// it. When such an action concerns a task in the backlog, or the run
    /// itself, the backlog is carried out first, whatever the budget, so
    /// that every task's changes are written in the order they happened.
    pub(crate) fn absorb(&mut self, effects: &mut Effects, run_id: &Arc<str>, actions: Vec<Action>, now: i64) {
        let Some(run) = self.runs.get_mut(run_id) else {
            return;
        };
        if !run.backlog.is_empty() && actions.iter().any(|a| behind_backlog(a, &run.extra)) {
            let backlog: Vec<Action> = std::mem::take(&mut run.backlog).into();
            self.absorb_now(effects, run_id, backlog, now);
        }
        let mut actions = actions;
        let later = self.over_budget(&mut actions);
        self.absorb_now(effects, run_id, actions, now);
        if !later.is_empty() {
            self.defer(run_id, later);
        }
    }

    /// Splits off the actions past what is left of the step's budget, if
    /// all of them may wait; counts the rest against the budget.
    fn over_budget(&mut self, actions: &mut Vec<Action>) -> Vec<Action> {
        let mut changes = 0;
        let mut split = None;
        for (i, action) in actions.iter().enumerate() {
            if let Action::TaskChanged { .. } = action {
                if changes == self.budget {
                    split = Some(i);
                    break;
                }
                changes += 1;
            }
        }
        let later = match split {
            Some(i) if actions[i..].iter().all(may_wait) => actions.split_off(i),
            _ => Vec::new(),
        };
        let counted = actions.iter().filter(|a| matches!(a, Action::TaskChanged { .. })).count();
        self.budget = self.budget.saturating_sub(counted);
        later
    }

    fn defer(&mut self, run_id: &Arc<str>, later: Vec<Action>) {
        let Some(run) = self.runs.get_mut(run_id) else {
            return;
        };
        if run.backlog.is_empty() {
            self.backlogged.push_back(run_id.clone());
        }
        for action in &later {
            if let Action::TaskChanged { task, .. } = action {
                run.extra[*task].deferred = true;
            }
        }
        run.backlog.extend(later);
    }

    /// Carries out backlogs, oldest first, as far as the step's budget goes.
    pub(crate) fn drain_backlogs(&mut self, effects: &mut Effects, now: i64) {
        while self.budget > 0 {
            let Some(run_id) = self.backlogged.pop_front() else {
                return;
            };
            let Some(run) = self.runs.get_mut(&run_id) else {
                continue;
            };
            if run.backlog.is_empty() {
                continue;
            }
            let mut take = 0;
            let mut changes = 0;
            for action in &run.backlog {
                if let Action::TaskChanged { .. } = action {
                    if changes == self.budget {
                        break;
                    }
                    changes += 1;
                }
                take += 1;
            }
            let now_part: Vec<Action> = run.backlog.drain(..take).collect();
            let more = !run.backlog.is_empty();
            self.budget -= changes;
            self.absorb_now(effects, &run_id, now_part, now);
            if more {
                self.backlogged.push_front(run_id);
            }
        }
    }

    /// Whether any run has a backlog (the next step should come at once).
    pub(crate) fn has_backlog(&self) -> bool {
        self.backlogged.iter().any(|id| self.runs.get(id).is_some_and(|r| !r.backlog.is_empty()))
    }
}

/// Whether a machine's action may wait in a backlog: a task becoming
/// `queued` (decided again after a restart) and a dispatch.
fn may_wait(action: &Action) -> bool {
    matches!(
        action,
        Action::TaskChanged { from: TaskState::Pending, to: TaskState::Queued, .. } | Action::Dispatch { .. }
    )
}

/// Whether an action must come after the run's backlog: it changes the
/// run, or a task whose change waits there.
fn behind_backlog(action: &Action, extra: &[TaskExtra]) -> bool {
    match action {
        Action::RunChanged { .. } => true,
        Action::TaskChanged { task, .. }
        | Action::Dispatch { task }
        | Action::Cancel { task, .. }
        | Action::RetryAt { task, .. }
        | Action::WakeAt { task, .. } => extra.get(*task).is_some_and(|e| e.deferred),
    }
}
