//! [`ReadStore`]: the API's paged and keyed reads of a run's tasks, so that
//! a run of 100,000 tasks is shown a page at a time and one task is found
//! by its name through an index (`tasks_by_name`), not by reading them all.

use async_trait::async_trait;

use crate::{LogRow, Result, TaskRow};

#[async_trait]
pub trait ReadStore: Send + Sync {
    /// A run's tasks after index `after` (-1: from the first), in index
    /// order, at most `limit`.
    async fn run_tasks_page(&self, run_id: &str, after: i64, limit: i64) -> Result<Vec<TaskRow>>;

    /// How many of a run's tasks are in each state.
    async fn run_task_counts(&self, run_id: &str) -> Result<Vec<(String, i64)>>;

    /// One task of a run, by name.
    async fn run_task(&self, run_id: &str, name: &str) -> Result<Option<TaskRow>>;

    /// The last line of an attempt's log from `source` (e.g. its latest
    /// progress report).
    async fn last_log_line(&self, run_id: &str, task_idx: i64, attempt: i64, source: &str) -> Result<Option<LogRow>>;
}
