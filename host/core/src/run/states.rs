//! What a run and its tasks can be in, and a task's progress.

use super::*;

/// The state of a run (a workflow instance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Created, waiting for the upstream instances it needs (the outer
    /// DAG); released to `queued` when they are done.
    Waiting,
    /// Created, waiting to be admitted (max active runs, backfill parallelism).
    Queued,
    Running,
    /// No new task starts; running ones finish.
    Paused,
    Succeeded,
    Failed,
    Killed,
}

impl RunState {
    pub fn is_terminal(self) -> bool {
        matches!(self, RunState::Succeeded | RunState::Failed | RunState::Killed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Waiting => "waiting",
            RunState::Queued => "queued",
            RunState::Running => "running",
            RunState::Paused => "paused",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Killed => "killed",
        }
    }

    pub fn parse(text: &str) -> Option<RunState> {
        [
            RunState::Waiting,
            RunState::Queued,
            RunState::Running,
            RunState::Paused,
            RunState::Succeeded,
            RunState::Failed,
            RunState::Killed,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of one task instance in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Waiting for upstream tasks.
    Pending,
    /// Ready, waiting for a worker slot.
    Queued,
    Running,
    /// Failed, waiting for its retry backoff.
    RetryWait,
    /// Ready, but waiting for something outside its run: upstream
    /// instances, its child run, its sensor's next check. Holds no worker.
    Waiting,
    Succeeded,
    Failed,
    /// Not run because an upstream task failed.
    UpstreamFailed,
    /// Not run because its trigger rule was not met.
    Skipped,
    /// Stopped or never started because the run was killed or marked failed.
    Killed,
}

impl TaskState {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Succeeded
                | TaskState::Failed
                | TaskState::UpstreamFailed
                | TaskState::Skipped
                | TaskState::Killed
        )
    }

    /// Counts as a failure for trigger rules and for the run's outcome.
    pub fn is_failure(self) -> bool {
        matches!(self, TaskState::Failed | TaskState::UpstreamFailed | TaskState::Killed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Queued => "queued",
            TaskState::Running => "running",
            TaskState::RetryWait => "retry_wait",
            TaskState::Waiting => "waiting",
            TaskState::Succeeded => "succeeded",
            TaskState::Failed => "failed",
            TaskState::UpstreamFailed => "upstream_failed",
            TaskState::Skipped => "skipped",
            TaskState::Killed => "killed",
        }
    }

    pub fn parse(text: &str) -> Option<TaskState> {
        [
            TaskState::Pending,
            TaskState::Queued,
            TaskState::Running,
            TaskState::RetryWait,
            TaskState::Waiting,
            TaskState::Succeeded,
            TaskState::Failed,
            TaskState::UpstreamFailed,
            TaskState::Skipped,
            TaskState::Killed,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the machine knows about one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskProgress {
    pub state: TaskState,
    /// Attempts started so far; also the number of the latest attempt.
    pub attempts: u32,
    /// Failures charged to the retry budget since the task was last reset.
    /// Attempts lost with their worker are not charged.
    pub failures: u32,
    /// Set by force-success.
    pub forced: bool,
    /// Attempts lost with their node (it died or left while running them)
    /// since the task was last reset. Past [`RunMachine::max_lost`] the
    /// task fails instead of going again.
    pub lost: u32,
    pub(super) deps_done: u32,
    pub(super) deps_ok: u32,
    pub(super) deps_failed: u32,
    pub(super) deps_skipped: u32,
}

impl TaskProgress {
    pub fn new(state: TaskState, attempts: u32, failures: u32, forced: bool) -> Self {
        TaskProgress {
            state,
            attempts,
            failures,
            forced,
            lost: 0,
            deps_done: 0,
            deps_ok: 0,
            deps_failed: 0,
            deps_skipped: 0,
        }
    }

    /// With `lost` attempts lost with their node so far.
    pub fn with_lost(mut self, lost: u32) -> Self {
        self.lost = lost;
        self
    }
}
