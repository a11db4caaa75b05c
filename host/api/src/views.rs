//! Store rows → API views.

use chrono::{TimeZone, Utc};
use dagr_core::Workflow;
use dagr_protocol::api::{AttemptView, RunSummary, TaskView};
use dagr_store::{AttemptRow, RunRow, TaskRow};

pub fn time(ms: i64) -> String {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub fn run_summary(row: &RunRow) -> RunSummary {
    RunSummary {
        id: row.id.clone(),
        workflow: row.workflow.clone(),
        version: row.version,
        kind: row.kind.as_str().into(),
        state: row.state.as_str().into(),
        logical_time: time(row.logical_time),
        created_at: time(row.created_at),
        started_at: row.started_at.map(time),
        finished_at: row.finished_at.map(time),
        backfill_id: row.backfill_id.clone(),
        archived: false,
    }
}

pub fn task_view(row: &TaskRow, workflow: Option<&Workflow>) -> TaskView {
    let def = workflow.and_then(|w| w.task_index(&row.name).map(|i| &w.tasks[i]));
    TaskView {
        name: row.name.clone(),
        plugin: def.map(|t| t.plugin.to_string()).unwrap_or_default(),
        state: row.state.as_str().into(),
        attempts: row.attempts,
        failures: row.failures,
        forced: row.forced,
        depends_on: def
            .map(|t| t.deps.iter().filter_map(|&d| workflow.map(|w| w.tasks[d].name.clone())).collect())
            .unwrap_or_default(),
        started_at: row.started_at.map(time),
        finished_at: row.finished_at.map(time),
        retry_at: row.retry_at.map(time),
        error: row.error.clone(),
    }
}

pub fn attempt_view(row: &AttemptRow) -> AttemptView {
    AttemptView {
        number: row.number,
        state: row.state.as_str().into(),
        failure_kind: row.failure_kind.map(|k| k.as_str().into()),
        message: row.message.clone(),
        charged: row.charged,
        worker: row.worker.clone(),
        started_at: time(row.started_at),
        finished_at: row.finished_at.map(time),
    }
}
