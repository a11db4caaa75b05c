//! The run and task state machines: state in, actions out.
//!
//! A [`RunMachine`] holds the state of one run: the state of each task and,
//! per task, counters of how its upstream tasks ended. A completion updates
//! the counters of the task's dependents only, so readiness is decided in
//! time proportional to the number of edges touched, never by scanning the
//! run. Inputs are events (an attempt finished, a retry is due) and operator
//! commands (kill, pause, rerun …); outputs are [`Action`]s that a loop
//! elsewhere performs: persist a change, dispatch a task, cancel an attempt,
//! arm a timer.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::control::FailureStrategy;
use crate::definition::{TriggerRule, Workflow};

mod states;

pub use states::{RunState, TaskProgress, TaskState};

/// How an attempt failed, as far as retrying is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureClass {
    /// The failure may pass if tried again.
    pub retryable: bool,
    /// The failure counts against the task's retry budget (false for an
    /// attempt lost with its worker).
    pub charged: bool,
    /// The attempt was running when its node died or left: it counts
    /// towards [`RunMachine::max_lost`].
    pub lost: bool,
}

/// Task state changes an engine step commits at most by default (`[master]
/// step_task_changes`): a burst beyond it goes to the next steps. 250
/// rather than 1,000 halves the p99 delay of a 10,000-task fan-out's events
/// to 100 stream followers (83-138 -> 53-73 ms) at no measured cost in
/// throughput: steps come with results anyway (docs/BENCHMARKS.md, "A
/// step's budget of task changes").
pub const DEFAULT_STEP_TASK_CHANGES: usize = 250;

/// Runs waiting upstream in gained slots a master wakes (to be judged again)
/// per step by default (`[master] takeover_wakes_per_step`): a master taking
/// over the slots of one that died, with Buffalo's tens of thousands of
/// waiting instances in them, judges them a page at a time between its
/// other work. All in one step, they held every command behind them (a
/// trigger's admission among them) for up to 17 s; 16 a step kept other
/// runs' delay under 1.2 s (docs/BENCHMARKS.md, "A takeover of waiting
/// instances").
pub const DEFAULT_TAKEOVER_WAKES_PER_STEP: usize = 16;

/// How many times a task's attempt may be lost with its node before the
/// task fails instead of going again (see [`RunMachine::with_max_lost`]).
pub const DEFAULT_MAX_LOST: u32 = 3;

/// Events and commands a run reacts to.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// The run was admitted: roots become ready, and the tasks a rerun
    /// queued are dispatched.
    Start,
    AttemptSucceeded {
        task: usize,
        attempt: u32,
    },
    AttemptFailed {
        task: usize,
        attempt: u32,
        class: FailureClass,
    },
    RetryDue {
        task: usize,
    },
    Pause,
    Resume,
    Kill,
    MarkFailed,
    /// Rerun failed, upstream-failed and killed tasks and what depends on
    /// them; the run is queued again (see [`Input::Start`]).
    RerunFailed,
    /// Rerun one task of a finished run, optionally with everything
    /// downstream; the run is queued again.
    RerunTask {
        task: usize,
        downstream: bool,
    },
    /// Mark a failed task succeeded so that its downstream proceeds (a
    /// failed run with tasks left to run is queued again).
    ForceSuccess {
        task: usize,
    },
    /// The upstream instances a waiting run needs are done: it is queued
    /// for admission.
    Release,
    /// Run a finished run again from scratch (a re-flush after its
    /// upstream was rerun): every task goes back to pending, and a run
    /// that needs upstream instances waits for them again.
    Reflush,
    /// A queued task waits for something outside its run (upstream
    /// instances, its child run).
    Wait {
        task: usize,
    },
    /// A waiting task may go: it is queued again.
    Unblock {
        task: usize,
    },
    /// A queued task's condition is false: it is skipped.
    Skip {
        task: usize,
    },
    /// A switch picked its branch: it succeeds, the branches it did not
    /// pick are skipped.
    Switched {
        task: usize,
        skip: Vec<usize>,
    },
    /// A queued or waiting task cannot run (its condition does not render,
    /// its child workflow is gone, an upstream instance failed): it fails.
    Abort {
        task: usize,
    },
    /// A waiting task's child run ended (succeeded or not).
    ChildEnded {
        task: usize,
        succeeded: bool,
    },
    /// A sensor's check found its condition not met yet: it waits, and is
    /// checked again at `at_ms` (past its last check it fails).
    NotReady {
        task: usize,
        attempt: u32,
        at_ms: i64,
        last_check: bool,
    },
}

/// What the machine asks the outside world to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Persist (and log as an event) a task's new state.
    TaskChanged { task: usize, from: TaskState, to: TaskState },
    /// Persist (and log as an event) the run's new state.
    RunChanged { from: RunState, to: RunState },
    /// The task is queued and the run may start tasks: give it a worker.
    Dispatch { task: usize },
    /// Stop this running attempt.
    Cancel { task: usize, attempt: u32 },
    /// Feed `Input::RetryDue` at this time (ms since the epoch).
    RetryAt { task: usize, at_ms: i64 },
    /// Feed `Input::Unblock` at this time (a sensor's next check).
    WakeAt { task: usize, at_ms: i64 },
}

/// Why an input was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// A result for an attempt that is no longer current (the task was
    /// killed, reset, or the result was already applied). Harmless.
    #[error("stale: {0}")]
    Stale(String),
    /// An operator command that does not apply in the current state.
    #[error("{0}")]
    NotAllowed(String),
}

/// The state machine of one run.
#[derive(Debug, Clone)]
pub struct RunMachine {
    workflow: Arc<Workflow>,
    state: RunState,
    tasks: Vec<TaskProgress>,
    unfinished: usize,
    running: usize,
    failures: usize,
    max_lost: u32,
    /// It has been released from `waiting` (or its workflow waits for no
    /// upstream instance): a run that never was and is reopened (a rerun
    /// after it was killed or marked failed while it waited) waits again,
    /// instead of starting tasks its upstream was never done for.
    released: bool,
    actions: Vec<Action>,
    now_ms: i64,
}

impl RunMachine {
    /// A new run, all tasks pending.
    pub fn new(workflow: Arc<Workflow>) -> Self {
        let tasks = vec![TaskProgress::new(TaskState::Pending, 0, 0, false); workflow.tasks.len()];
        let unfinished = tasks.len();
        let waits = workflow.waits_upstream();
        let state = if waits { RunState::Waiting } else { RunState::Queued };
        RunMachine {
            workflow,
            state,
            tasks,
            unfinished,
            running: 0,
            failures: 0,
            max_lost: DEFAULT_MAX_LOST,
            released: !waits,
            actions: Vec::new(),
            now_ms: 0,
        }
    }

    /// Lets a task's attempts be lost with their node at most `max` times;
    /// the next loss fails the task. A task that crashes the node running
    /// it (every restart finds it running again) must not do so forever.
    pub fn with_max_lost(mut self, max: u32) -> Self {
        self.max_lost = max;
        self
    }

    /// Whether a restored run was released from `waiting` once (by default
    /// a restored run was, unless it waits now): see [`Self::released`].
    pub fn with_released(mut self, released: bool) -> Self {
        self.released = released || !self.workflow.waits_upstream();
        self
    }

    /// See [`Self::with_max_lost`].
    pub fn max_lost(&self) -> u32 {
        self.max_lost
    }

    /// Rebuilds a machine from persisted state (after a restart or a
    /// failover). Returns it with the actions needed to continue: tasks that
    /// were queued are dispatched again, pending tasks whose upstream is
    /// settled are evaluated. Running tasks stay running: the caller decides
    /// whether their attempts are alive or lost.
    pub fn restore(workflow: Arc<Workflow>, state: RunState, tasks: Vec<TaskProgress>) -> (Self, Vec<Action>) {
        let mut m = RunMachine {
            workflow,
            state,
            tasks,
            unfinished: 0,
            running: 0,
            failures: 0,
            max_lost: DEFAULT_MAX_LOST,
            released: state != RunState::Waiting,
            actions: Vec::new(),
            now_ms: 0,
        };
        for i in 0..m.tasks.len() {
            let s = m.tasks[i].state;
            if !s.is_terminal() {
                m.unfinished += 1;
            }
            if s == TaskState::Running {
                m.running += 1;
            }
            if s.is_failure() {
                m.failures += 1;
            }
            m.recount(i);
        }
        if m.state == RunState::Running {
            for i in 0..m.tasks.len() {
                match m.tasks[i].state {
                    TaskState::Queued => m.actions.push(Action::Dispatch { task: i }),
                    TaskState::Pending => m.evaluate_cascade(i),
                    _ => {}
                }
            }
            m.maybe_finish();
        }
        let actions = std::mem::take(&mut m.actions);
        (m, actions)
    }

    pub fn state(&self) -> RunState {
        self.state
    }

    pub fn workflow(&self) -> &Arc<Workflow> {
        &self.workflow
    }

    pub fn task(&self, task: usize) -> &TaskProgress {
        &self.tasks[task]
    }

    pub fn tasks(&self) -> &[TaskProgress] {
        &self.tasks
    }

    /// Tasks running right now.
    pub fn running(&self) -> usize {
        self.running
    }

    /// Whether the run may start tasks.
    pub fn dispatching(&self) -> bool {
        self.state == RunState::Running
    }

    /// Starts the next attempt of a queued task; returns its number.
    pub fn start_attempt(&mut self, task: usize) -> Result<(u32, Vec<Action>), Rejected> {
        if self.state != RunState::Running {
            return Err(Rejected::NotAllowed(format!("the run is {}, not running", self.state)));
        }
        let t = self.tasks.get(task).ok_or_else(|| Rejected::NotAllowed(format!("no task #{task}")))?;
        if t.state != TaskState::Queued {
            return Err(Rejected::Stale(format!("task `{}` is {}, not queued", self.name(task), t.state)));
        }
        self.tasks[task].attempts += 1;
        self.set_state(task, TaskState::Running);
        Ok((self.tasks[task].attempts, std::mem::take(&mut self.actions)))
    }

    /// Applies an input at time `now_ms`.
    pub fn apply(&mut self, input: Input, now_ms: i64) -> Result<Vec<Action>, Rejected> {
        self.now_ms = now_ms;
        let result = self.apply_inner(input);
        let actions = std::mem::take(&mut self.actions);
        result.map(|()| actions)
    }

    fn name(&self, task: usize) -> &str {
        &self.workflow.tasks[task].name
    }

    fn check_task(&self, task: usize) -> Result<(), Rejected> {
        if task < self.tasks.len() { Ok(()) } else { Err(Rejected::NotAllowed(format!("no task #{task}"))) }
    }

    fn current_attempt(&self, task: usize, attempt: u32) -> Result<(), Rejected> {
        self.check_task(task)?;
        let t = &self.tasks[task];
        if t.state == TaskState::Running && t.attempts == attempt {
            Ok(())
        } else {
            Err(Rejected::Stale(format!(
                "attempt {attempt} of `{}` is not current (the task is {}, at attempt {})",
                self.name(task),
                t.state,
                t.attempts
            )))
        }
    }

    fn apply_inner(&mut self, input: Input) -> Result<(), Rejected> {
        match input {
            Input::Start => {
                if self.state != RunState::Queued {
                    return Err(Rejected::NotAllowed(format!("the run is {}, not queued", self.state)));
                }
                // A finished run that was rerun waited for admission with
                // the tasks it runs again already queued.
                let queued: Vec<usize> =
                    (0..self.tasks.len()).filter(|&i| self.tasks[i].state == TaskState::Queued).collect();
                self.set_run_state(RunState::Running);
                self.actions.extend(queued.into_iter().map(|task| Action::Dispatch { task }));
                let roots: Vec<usize> = self.workflow.roots().collect();
                for root in roots {
                    self.evaluate_cascade(root);
                }
                self.maybe_finish();
            }
            Input::AttemptSucceeded { task, attempt } => {
                self.current_attempt(task, attempt)?;
                self.set_state(task, TaskState::Succeeded);
                self.settled(task);
            }
            Input::AttemptFailed { task, attempt, class } => {
                self.current_attempt(task, attempt)?;
                if class.charged {
                    self.tasks[task].failures += 1;
                }
                if class.lost {
                    self.tasks[task].lost += 1;
                }
                let budget_left = self.tasks[task].failures <= self.workflow.tasks[task].retries;
                let lost_too_often = self.tasks[task].lost > self.max_lost;
                if class.retryable && (!class.charged || budget_left) && !lost_too_often {
                    if !class.charged {
                        // A lost worker is not the task's fault: go again now.
                        self.requeue(task);
                    } else {
                        let delay = self.workflow.tasks[task].backoff.delay_for(self.tasks[task].failures);
                        self.set_state(task, TaskState::RetryWait);
                        let at_ms = self.now_ms.saturating_add(delay.as_millis() as i64);
                        self.actions.push(Action::RetryAt { task, at_ms });
                    }
                } else {
                    self.set_state(task, TaskState::Failed);
                    self.settled(task);
                }
            }
            Input::RetryDue { task } => {
                self.check_task(task)?;
                if self.tasks[task].state != TaskState::RetryWait {
                    return Err(Rejected::Stale(format!("`{}` is not waiting for a retry", self.name(task))));
                }
                self.requeue(task);
            }
            Input::Pause => {
                if self.state != RunState::Running {
                    return Err(Rejected::NotAllowed(format!(
                        "only a running run can be paused; this one is {}",
                        self.state
                    )));
                }
                self.set_run_state(RunState::Paused);
            }
            Input::Resume => {
                if self.state != RunState::Paused {
                    return Err(Rejected::NotAllowed(format!(
                        "only a paused run can be resumed; this one is {}",
                        self.state
                    )));
                }
                self.set_run_state(RunState::Running);
                for i in 0..self.tasks.len() {
                    if self.tasks[i].state == TaskState::Queued {
                        self.actions.push(Action::Dispatch { task: i });
                    }
                }
                self.maybe_finish();
            }
            Input::Kill => {
                if self.state.is_terminal() {
                    return Err(Rejected::NotAllowed(format!("the run already finished ({})", self.state)));
                }
                self.stop_everything();
                self.set_run_state(RunState::Killed);
            }
            Input::MarkFailed => {
                if self.state.is_terminal() {
                    return Err(Rejected::NotAllowed(format!("the run already finished ({})", self.state)));
                }
                self.stop_everything();
                self.set_run_state(RunState::Failed);
            }
            Input::RerunFailed => {
                if !matches!(self.state, RunState::Failed | RunState::Killed) {
                    return Err(Rejected::NotAllowed(format!(
                        "rerun-from-failed needs a failed or killed run; this one is {}",
                        self.state
                    )));
                }
                let seeds: Vec<usize> = (0..self.tasks.len()).filter(|&i| self.tasks[i].state.is_failure()).collect();
                if seeds.is_empty() {
                    return Err(Rejected::NotAllowed("no task failed; nothing to rerun".into()));
                }
                let set = self.downstream_closure(&seeds);
                self.reset(set);
            }
            Input::RerunTask { task, downstream } => {
                self.check_task(task)?;
                if !self.state.is_terminal() {
                    return Err(Rejected::NotAllowed(format!(
                        "a task can be rerun once the run has finished; this one is {}",
                        self.state
                    )));
                }
                let set = if downstream { self.downstream_closure(&[task]) } else { vec![task] };
                self.reset(set);
            }
            Input::ForceSuccess { task } => {
                self.check_task(task)?;
                let s = self.tasks[task].state;
                if !s.is_failure() {
                    return Err(Rejected::NotAllowed(format!(
                        "only a failed, upstream-failed or killed task can be forced to succeed; `{}` is {s}",
                        self.name(task)
                    )));
                }
                if self.state == RunState::Killed {
                    return Err(Rejected::NotAllowed("the run was killed; rerun it instead".into()));
                }
                // Downstream tasks that gave up because of this task get another chance.
                let closure = self.downstream_closure(&[task]);
                let to_reset: Vec<usize> = closure
                    .into_iter()
                    .filter(|&i| {
                        i != task && matches!(self.tasks[i].state, TaskState::UpstreamFailed | TaskState::Skipped)
                    })
                    .collect();
                let members: HashSet<usize> = to_reset.iter().copied().collect();
                let others: Vec<usize> =
                    self.workflow.tasks[task].dependents.iter().copied().filter(|d| !members.contains(d)).collect();
                let reopened = self.reopen();
                self.tasks[task].forced = true;
                self.set_state(task, TaskState::Succeeded);
                // Dependents that are not reset counted this task as failed.
                for &d in &others {
                    self.count(d, s, -1);
                    self.count(d, TaskState::Succeeded, 1);
                }
                if !to_reset.is_empty() {
                    self.reset_tasks(to_reset);
                }
                for &d in &others {
                    self.evaluate_cascade(d);
                }
                self.settle_reopened(reopened);
            }
            Input::Reflush => {
                if !self.state.is_terminal() {
                    return Err(Rejected::NotAllowed(format!(
                        "a run can be re-flushed once it has finished; this one is {}",
                        self.state
                    )));
                }
                let all: Vec<usize> = (0..self.tasks.len()).collect();
                if self.workflow.waits_upstream() {
                    for &t in &all {
                        self.tasks[t].failures = 0;
                        self.tasks[t].lost = 0;
                        self.tasks[t].forced = false;
                        self.set_state(t, TaskState::Pending);
                    }
                    for &t in &all {
                        self.recount(t);
                    }
                    self.released = false;
                    self.set_run_state(RunState::Waiting);
                } else {
                    self.reset(all);
                }
            }
            Input::Release => {
                if self.state != RunState::Waiting {
                    return Err(Rejected::Stale(format!("the run is {}, not waiting", self.state)));
                }
                self.released = true;
                self.set_run_state(RunState::Queued);
            }
            Input::Wait { task } => {
                self.expect(task, TaskState::Queued)?;
                self.set_state(task, TaskState::Waiting);
            }
            Input::Unblock { task } => {
                self.expect(task, TaskState::Waiting)?;
                self.requeue(task);
            }
            Input::Skip { task } => {
                self.expect(task, TaskState::Queued)?;
                self.set_state(task, TaskState::Skipped);
                self.settled(task);
            }
            Input::Switched { task, skip } => {
                self.expect(task, TaskState::Queued)?;
                for branch in skip {
                    if branch < self.tasks.len() && self.tasks[branch].state == TaskState::Pending {
                        self.set_state(branch, TaskState::Skipped);
                        self.settled(branch);
                    }
                }
                self.set_state(task, TaskState::Succeeded);
                self.settled(task);
            }
            Input::Abort { task } => {
                self.check_task(task)?;
                if !matches!(self.tasks[task].state, TaskState::Queued | TaskState::Waiting) {
                    return Err(Rejected::Stale(format!(
                        "`{}` is {}, not queued",
                        self.name(task),
                        self.tasks[task].state
                    )));
                }
                self.set_state(task, TaskState::Failed);
                self.settled(task);
            }
            Input::ChildEnded { task, succeeded } => {
                self.expect(task, TaskState::Waiting)?;
                self.set_state(task, if succeeded { TaskState::Succeeded } else { TaskState::Failed });
                self.settled(task);
            }
            Input::NotReady { task, attempt, at_ms, last_check } => {
                self.current_attempt(task, attempt)?;
                if last_check {
                    self.set_state(task, TaskState::Failed);
                    self.settled(task);
                } else {
                    self.set_state(task, TaskState::Waiting);
                    self.actions.push(Action::WakeAt { task, at_ms });
                }
            }
        }
        Ok(())
    }

    fn expect(&self, task: usize, state: TaskState) -> Result<(), Rejected> {
        self.check_task(task)?;
        let now = self.tasks[task].state;
        if now == state { Ok(()) } else { Err(Rejected::Stale(format!("`{}` is {now}, not {state}", self.name(task)))) }
    }

    /// Kill or mark-failed: cancel what runs, stop what waits.
    fn stop_everything(&mut self) {
        for i in 0..self.tasks.len() {
            match self.tasks[i].state {
                TaskState::Running => {
                    self.actions.push(Action::Cancel { task: i, attempt: self.tasks[i].attempts });
                    self.set_state(i, TaskState::Killed);
                }
                s if !s.is_terminal() => self.set_state(i, TaskState::Killed),
                _ => {}
            }
        }
    }

    fn requeue(&mut self, task: usize) {
        self.set_state(task, TaskState::Queued);
        if self.dispatching() {
            self.actions.push(Action::Dispatch { task });
        }
    }

    /// Every task reachable downstream from `seeds`, seeds included, sorted.
    fn downstream_closure(&self, seeds: &[usize]) -> Vec<usize> {
        let mut seen: HashSet<usize> = seeds.iter().copied().collect();
        let mut stack: Vec<usize> = seeds.to_vec();
        while let Some(t) = stack.pop() {
            for &d in &self.workflow.tasks[t].dependents {
                if seen.insert(d) {
                    stack.push(d);
                }
            }
        }
        let mut out: Vec<usize> = seen.into_iter().collect();
        out.sort_unstable();
        out
    }

    /// Resets `set` to pending and runs it again. A finished run goes back
    /// to the queue: it counts against its workflow's `max_active_runs`
    /// (and its backfill's parallelism) again, so it waits for admission
    /// like a new run, and the tasks that may go are queued for when it
    /// starts.
    fn reset(&mut self, set: Vec<usize>) {
        let reopened = self.reopen();
        self.reset_tasks(set);
        self.settle_reopened(reopened);
    }

    /// Puts a finished run back in the queue while its tasks are reset (so
    /// that none is dispatched), without saying so yet: returns the state
    /// it had, for [`RunMachine::settle_reopened`].
    fn reopen(&mut self) -> Option<RunState> {
        let from = self.state;
        if !from.is_terminal() {
            return None;
        }
        self.state = RunState::Queued;
        Some(from)
    }

    /// Says where a reopened run went: queued if it has tasks to run
    /// (waiting, if it was never released from waiting upstream), or
    /// straight to its end if every task it reopened was settled at once
    /// (a forced success of its last failed task, a rerun of a disabled
    /// task): such a run needs no admission.
    fn settle_reopened(&mut self, reopened: Option<RunState>) {
        let Some(from) = reopened else {
            self.maybe_finish();
            return;
        };
        let to = match self.unfinished {
            0 if self.failures > 0 => RunState::Failed,
            0 => RunState::Succeeded,
            _ if !self.released => RunState::Waiting,
            _ => RunState::Queued,
        };
        self.state = from;
        self.set_run_state(to);
    }

    fn reset_tasks(&mut self, set: Vec<usize>) {
        let members: HashSet<usize> = set.iter().copied().collect();
        for &t in &set {
            let old = self.tasks[t].state;
            if old.is_terminal() {
                // Dependents outside the set counted this task as settled.
                for d in self.workflow.tasks[t].dependents.clone() {
                    if !members.contains(&d) {
                        self.count(d, old, -1);
                    }
                }
            }
            self.tasks[t].failures = 0;
            self.tasks[t].lost = 0;
            self.tasks[t].forced = false;
            self.set_state(t, TaskState::Pending);
        }
        for &t in &set {
            self.recount(t);
        }
        for &t in &set {
            self.evaluate_cascade(t);
        }
    }

    /// Recomputes a task's upstream counters from its deps' states.
    fn recount(&mut self, task: usize) {
        let p = &mut self.tasks[task];
        p.deps_done = 0;
        p.deps_ok = 0;
        p.deps_failed = 0;
        p.deps_skipped = 0;
        for i in 0..self.workflow.tasks[task].deps.len() {
            let dep = self.workflow.tasks[task].deps[i];
            let s = self.tasks[dep].state;
            self.count(task, s, 1);
        }
    }

    fn count(&mut self, task: usize, dep_state: TaskState, delta: i32) {
        if !dep_state.is_terminal() {
            return;
        }
        let p = &mut self.tasks[task];
        let add = |n: &mut u32| *n = n.saturating_add_signed(delta);
        add(&mut p.deps_done);
        match dep_state {
            TaskState::Succeeded => add(&mut p.deps_ok),
            TaskState::Skipped => add(&mut p.deps_skipped),
            s if s.is_failure() => add(&mut p.deps_failed),
            _ => {}
        }
    }

    /// A task reached a terminal state: update its dependents. A failure
    /// under the `stop` strategy ends the run instead.
    fn settled(&mut self, task: usize) {
        if self.tasks[task].state == TaskState::Failed
            && self.workflow.spec.on_failure == FailureStrategy::Stop
            && !self.state.is_terminal()
        {
            self.stop_everything();
            self.set_run_state(RunState::Failed);
            return;
        }
        let mut work = vec![task];
        while let Some(t) = work.pop() {
            let state = self.tasks[t].state;
            for i in 0..self.workflow.tasks[t].dependents.len() {
                let d = self.workflow.tasks[t].dependents[i];
                self.count(d, state, 1);
                if self.tasks[d].state == TaskState::Pending
                    && let Some(next) = self.decide(d)
                {
                    self.set_state(d, next);
                    match next {
                        TaskState::Queued => {
                            if self.dispatching() {
                                self.actions.push(Action::Dispatch { task: d });
                            }
                        }
                        _ => work.push(d),
                    }
                }
            }
        }
        self.maybe_finish();
    }

    /// Evaluates a pending task and cascades if it settles without running.
    fn evaluate_cascade(&mut self, task: usize) {
        if self.tasks[task].state != TaskState::Pending {
            return;
        }
        if let Some(next) = self.decide(task) {
            self.set_state(task, next);
            if next == TaskState::Queued {
                if self.dispatching() {
                    self.actions.push(Action::Dispatch { task });
                }
            } else {
                self.settled(task);
            }
        }
    }

    /// What a pending task becomes given its upstream, if anything yet; a
    /// disabled task that would run is skipped.
    fn decide(&self, task: usize) -> Option<TaskState> {
        let next = self.decide_by_rule(task)?;
        if next == TaskState::Queued && !self.workflow.tasks[task].enabled {
            return Some(TaskState::Skipped);
        }
        Some(next)
    }

    fn decide_by_rule(&self, task: usize) -> Option<TaskState> {
        let p = &self.tasks[task];
        let n = self.workflow.tasks[task].deps.len() as u32;
        let all_done = p.deps_done == n;
        match self.workflow.tasks[task].trigger_rule {
            TriggerRule::AllSuccess => {
                if p.deps_failed > 0 {
                    Some(TaskState::UpstreamFailed)
                } else if p.deps_skipped > 0 {
                    Some(TaskState::Skipped)
                } else if p.deps_ok == n {
                    Some(TaskState::Queued)
                } else {
                    None
                }
            }
            TriggerRule::AllDone => all_done.then_some(TaskState::Queued),
            TriggerRule::OneFailed => {
                if p.deps_failed > 0 {
                    Some(TaskState::Queued)
                } else if all_done {
                    Some(TaskState::Skipped)
                } else {
                    None
                }
            }
            TriggerRule::NoneFailed => {
                if p.deps_failed > 0 {
                    Some(TaskState::UpstreamFailed)
                } else if all_done {
                    Some(TaskState::Queued)
                } else {
                    None
                }
            }
        }
    }

    fn maybe_finish(&mut self) {
        if self.unfinished > 0 || self.state.is_terminal() || matches!(self.state, RunState::Queued | RunState::Waiting)
        {
            return;
        }
        let outcome = if self.failures > 0 { RunState::Failed } else { RunState::Succeeded };
        self.set_run_state(outcome);
    }

    fn set_state(&mut self, task: usize, to: TaskState) {
        let from = self.tasks[task].state;
        if from == to {
            return;
        }
        if from.is_terminal() && !to.is_terminal() {
            self.unfinished += 1;
        } else if !from.is_terminal() && to.is_terminal() {
            self.unfinished -= 1;
        }
        if from == TaskState::Running {
            self.running -= 1;
        }
        if to == TaskState::Running {
            self.running += 1;
        }
        if from.is_failure() {
            self.failures -= 1;
        }
        if to.is_failure() {
            self.failures += 1;
        }
        self.tasks[task].state = to;
        self.actions.push(Action::TaskChanged { task, from, to });
    }

    fn set_run_state(&mut self, to: RunState) {
        let from = self.state;
        if from != to {
            self.state = to;
            self.actions.push(Action::RunChanged { from, to });
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod control_tests;
