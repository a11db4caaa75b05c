//! A run and its tasks, read a page at a time: a run of 100,000 tasks is
//! answered with counts by state and a first page, the rest with
//! `GET /v1/runs/{id}/tasks?after=&limit=`, and one task is found by its
//! name through the store's index rather than by reading them all.
//!
//! The definition a run's tasks are shown with (their plugin and
//! dependencies) comes from the [`VersionCache`](dagr_core::versions::VersionCache)
//! once it was read: a big definition is parsed and validated once, on a
//! blocking thread, not at every request.

use std::sync::Arc;

use axum::extract::State;
use dagr_core::Workflow;
use dagr_protocol::api::{ApiError, RunDetail, RunSummary, TaskDetail, TaskList};
use dagr_store::{RunRow, TaskRow};
use serde::Deserialize;
use serde_json::Value;

use crate::error::{ApiResult, AppError};
use crate::extract::{Path, Query};
use crate::handlers::{Answer, find_run, locate_run, ok};
use crate::views::{attempt_view, run_summary, task_view};
use crate::{ApiState, Tenant};

/// The tasks a run's detail carries.
pub const FIRST_PAGE: i64 = 100;

/// The largest page of tasks.
pub const MAX_PAGE: i64 = 1000;

/// The validated definition of a run (its version's, or a job's own), to
/// show its tasks with; `None` if it cannot be read.
pub(crate) async fn run_workflow(state: &ApiState, run: &RunRow) -> Option<Arc<Workflow>> {
    match (&run.spec, run.version) {
        (Some(spec), _) => crate::handlers::stored_definition(spec.clone()).await.ok().map(Arc::new),
        (None, Some(v)) => crate::handlers::validated_version(state, &run.tenant, &run.workflow, v).await.ok(),
        _ => None,
    }
}

/// A run of the tenant and one of its tasks, by name.
pub(crate) async fn find_task(
    state: &ApiState,
    tenant: &str,
    run_id: &str,
    task: &str,
) -> ApiResult<(RunRow, TaskRow)> {
    let run = find_run(state, tenant, run_id).await?;
    let row = state
        .store
        .run_task(run_id, task)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("run `{run_id}` has no task `{task}`")))?;
    Ok((run, row))
}

/// A page of tasks with the cursor of the next one.
async fn page(state: &ApiState, run: &RunRow, after: i64, limit: i64) -> ApiResult<TaskList> {
    // One more than asked tells whether there is a next page.
    let mut rows = state.store.run_tasks_page(&run.id, after, limit + 1).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = if more { rows.last().map(|t| t.idx) } else { None };
    let workflow = run_workflow(state, run).await;
    let tasks = rows.iter().map(|t| task_view(t, workflow.as_deref())).collect();
    Ok(TaskList { tasks, next })
}

/// A run: its params, how many of its tasks are in each state, and its
/// first tasks.
#[utoipa::path(
    get, path = "/v1/runs/{id}", tag = "runs", params(("id" = String, Path)),
    responses((status = 200, body = RunDetail), (status = 404, body = ApiError))
)]
pub async fn get_run(State(state): State<ApiState>, tenant: Tenant, Path(id): Path<String>) -> Answer<RunDetail> {
    let (run, archived) = locate_run(&state, &tenant.0, &id).await?;
    let counts = state.store.run_task_counts(&id).await?;
    let first = page(&state, &run, -1, FIRST_PAGE).await?;
    ok(RunDetail {
        run: RunSummary { archived, ..run_summary(&run) },
        params: serde_json::from_str(&run.params).unwrap_or(Value::Null),
        task_counts: counts.into_iter().collect(),
        tasks: first.tasks,
        tasks_next: first.next,
    })
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct TasksQuery {
    /// The `next` of the previous page (a task's index); default: from the
    /// first task.
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// Page size, 1–1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// A page of a run's tasks, in definition order.
#[utoipa::path(
    get, path = "/v1/runs/{id}/tasks", tag = "runs", params(("id" = String, Path), TasksQuery),
    responses((status = 200, body = TaskList), (status = 400, body = ApiError), (status = 404, body = ApiError))
)]
pub async fn list_run_tasks(
    State(state): State<ApiState>,
    tenant: Tenant,
    Path(id): Path<String>,
    Query(q): Query<TasksQuery>,
) -> Answer<TaskList> {
    let limit = q.limit.unwrap_or(FIRST_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(AppError::bad_at("bad_query", "?limit", format!("must be between 1 and {MAX_PAGE}")));
    }
    let after = q.after.unwrap_or(-1);
    if after < -1 {
        return Err(AppError::bad_at("bad_query", "?after", "must be the `next` of a previous page (0 or more)"));
    }
    let run = find_run(&state, &tenant.0, &id).await?;
    ok(page(&state, &run, after, limit).await?)
}

/// One task of a run: state, output and attempts.
#[utoipa::path(
    get, path = "/v1/runs/{id}/tasks/{task}", tag = "runs", params(("id" = String, Path), ("task" = String, Path)),
    responses((status = 200, body = TaskDetail), (status = 404, body = ApiError))
)]
pub async fn get_task(
    State(state): State<ApiState>,
    tenant: Tenant,
    Path((id, task)): Path<(String, String)>,
) -> Answer<TaskDetail> {
    let (run, row) = find_task(&state, &tenant.0, &id, &task).await?;
    let workflow = run_workflow(&state, &run).await;
    let output = state
        .store
        .outputs(&id, &[row.idx])
        .await?
        .into_iter()
        .next()
        .map(|(_, o)| serde_json::from_str(&o).unwrap_or(Value::String(o)));
    let attempts = state.store.attempts(&id, Some(row.idx)).await?;
    let progress = match attempts.iter().map(|a| a.number).max() {
        Some(last) => state.store.last_log_line(&id, row.idx, last, "progress").await?.map(progress_view),
        None => None,
    };
    ok(TaskDetail {
        task: task_view(&row, workflow.as_deref()),
        output,
        attempts_detail: attempts.iter().map(attempt_view).collect(),
        progress,
    })
}

/// A progress report as the worker logs it: `"<percent>% <message>"`.
fn progress_view(line: dagr_store::LogRow) -> dagr_protocol::api::ProgressView {
    let (percent, message) = line.message.split_once("% ").unwrap_or((line.message.as_str(), ""));
    dagr_protocol::api::ProgressView {
        percent: percent.trim_end_matches('%').parse().unwrap_or(0),
        message: message.to_owned(),
        at: crate::views::time(line.at),
    }
}
