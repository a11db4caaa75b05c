//! The outer DAG's storage: the workflow graph (what each workflow needs),
//! upstream instances by cycle, and which runs released which.
//!
//! Waits and wake-ups themselves travel in the engine's
//! [`WriteBatch`](crate::WriteBatch) (`run_waits`, `wakes`), so that a
//! state change and the wake-up of the runs waiting for it commit together.

use async_trait::async_trait;

use crate::{Result, RunState, TaskState};

/// One edge of a tenant's workflow graph: `workflow` needs `upstream`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct EdgeRow {
    pub tenant: String,
    pub workflow: String,
    pub upstream: String,
    /// The upstream task it waits for, if only one.
    pub task: Option<String>,
    /// Every instance it names lies strictly before the needing cycle.
    pub past: bool,
    /// `upstream` (an instance dependency) or `child` (a sub-workflow task).
    pub kind: String,
}

/// A run of a workflow for some cycle, as a dependency sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CycleRun {
    pub id: String,
    pub logical_time: i64,
    pub state: RunState,
    /// The state of the task asked about, if one was.
    pub task_state: Option<TaskState>,
}

/// A range of cycles of a workflow, and the task asked about, if any.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CycleRange {
    pub tenant: String,
    pub workflow: String,
    pub from: i64,
    pub to: i64,
    pub task: Option<String>,
}

/// The outer DAG's queries.
#[async_trait]
pub trait OuterStore: Send + Sync {
    /// Replaces what `workflow` needs (done when it is applied).
    async fn set_workflow_edges(&self, tenant: &str, workflow: &str, edges: &[EdgeRow]) -> Result<()>;
    /// Every edge of a tenant's workflow graph.
    async fn workflow_edges(&self, tenant: &str) -> Result<Vec<EdgeRow>>;
    /// The edges out of (what is needed by) these live workflows.
    async fn edges_from(&self, tenant: &str, workflows: &[String]) -> Result<Vec<EdgeRow>>;
    /// The edges of live workflows into `workflow` (what needs it), at most
    /// `limit`.
    async fn edges_to(&self, tenant: &str, workflow: &str, limit: i64) -> Result<Vec<EdgeRow>>;
    /// Every (tenant, workflow, task) some workflow needs, over all tenants:
    /// the engine wakes waiting runs only for these.
    async fn watched(&self) -> Result<Vec<(String, String, Option<String>)>>;
    /// The runs of `workflow` with logical times in [from, to], oldest first,
    /// with the state of `task` in each if given.
    async fn runs_in_range(
        &self,
        tenant: &str,
        workflow: &str,
        from: i64,
        to: i64,
        task: Option<&str>,
    ) -> Result<Vec<CycleRun>>;
    /// As [`runs_in_range`](Self::runs_in_range) for each of `ranges`, in
    /// their order: one answer per range, read together (an engine step
    /// that wakes many waiting runs asks for many ranges at once).
    async fn runs_in_ranges(&self, ranges: &[CycleRange]) -> Result<Vec<Vec<CycleRun>>>;
    /// As [`runs_in_range`](Self::runs_in_range) for each of `ranges`,
    /// read once every commit that is waking runs waiting on their
    /// workflows has ended (PostgreSQL: a shared advisory lock on each
    /// workflow, taken in one order in one transaction, which those commits
    /// hold exclusively from their wake-ups to COMMIT). A waiter whose
    /// waits are committed reads this way: either the commit that ends an
    /// instance saw its waits, or this read sees the instance ended.
    async fn runs_in_ranges_settled(&self, ranges: &[CycleRange]) -> Result<Vec<Vec<CycleRun>>>;
    /// The runs `run` released (directly).
    async fn released_by(&self, run: &str) -> Result<Vec<String>>;
    /// Takes a workflow's schedule offline or back online; back online, its
    /// cursor moves to `cursor` (cycles missed while offline are not made).
    /// False if the workflow does not exist.
    async fn set_schedule_paused(&self, tenant: &str, name: &str, paused: bool, cursor: i64) -> Result<bool>;
    /// The child runs of `run`.
    async fn children_of(&self, run: &str) -> Result<Vec<String>>;
    /// The runs waiting upstream whose slot is in `slots`, as (tenant, run
    /// id), oldest first: a master that takes slots over wakes them (the
    /// one that had them may have recorded their waits after an upstream
    /// instance's end looked for them, and died before it read the
    /// instance again).
    async fn waiting_in_slots(&self, slots: &[i64]) -> Result<Vec<(String, String)>>;
}
