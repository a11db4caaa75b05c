//! Backfills: one run per logical time of a range.

use std::collections::HashMap;

use axum::extract::{Path, State};
use dagr_core::schedule::backfill_times;
use dagr_protocol::api::*;
use dagr_store::{BackfillRow, Created, NewRun, RunFilter, RunKind, RunRow, now_ms};
use serde_json::json;

use crate::auth::{Caller, audit};
use crate::error::AppError;
use crate::extract::Json;
use crate::handlers::*;
use crate::views::{run_summary, time};
use crate::{ApiState, Tenant};

/// Creates one run per logical time in `[from, to]` (the schedule's fire
/// times, or one per day without a schedule), run `parallel` at a time.
#[utoipa::path(
    post, path = "/v1/backfills", tag = "backfills", request_body = BackfillRequest,
    responses((status = 201, body = BackfillView), (status = 400, body = ApiError), (status = 404, body = ApiError))
)]
pub async fn create_backfill(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Json(req): Json<BackfillRequest>,
) -> Answer<BackfillView> {
    if req.parallel == 0 {
        return Err(AppError::bad_at("invalid_backfill", "parallel", "must be at least 1"));
    }
    let from = parse_time(&req.from).map_err(|m| AppError::bad_at("invalid_backfill", "from", m))?;
    let to = parse_time(&req.to).map_err(|m| AppError::bad_at("invalid_backfill", "to", m))?;
    let (version, workflow) = latest_workflow(&state, &tenant.0, &req.workflow).await?;
    let params = workflow.resolve_params(&req.params).map_err(|e| AppError::invalid("invalid_params", &e))?;
    let params = serde_json::to_string(&params).map_err(AppError::internal)?;
    let times = backfill_times(workflow.schedule.as_ref(), from, to, state.config.max_backfill_runs)
        .map_err(|m| AppError::bad_at("invalid_backfill", "to", m))?;
    if times.is_empty() {
        return Err(AppError::bad_at(
            "invalid_backfill",
            "from",
            "the range contains no logical time of the workflow's schedule",
        ));
    }
    let id = uuid::Uuid::now_v7().to_string();
    let now = now_ms();
    let backfill = BackfillRow {
        id: id.clone(),
        tenant: tenant.0.clone(),
        workflow: req.workflow.clone(),
        from_time: from.timestamp_millis(),
        to_time: to.timestamp_millis(),
        parallel: req.parallel as i64,
        total: times.len() as i64,
        created_at: now,
    };
    state.store.insert_backfill(backfill.clone()).await?;
    let runs: Vec<NewRun> = times
        .iter()
        .map(|t| {
            new_run(
                &tenant.0,
                &workflow,
                Some(version),
                RunKind::Backfill,
                t.timestamp_millis(),
                &params,
                None,
                Some(id.clone()),
            )
        })
        .collect();
    let by_id: HashMap<String, RunRow> = runs.iter().map(|r| (r.run.id.clone(), r.run.clone())).collect();
    let outcome = state.store.create_runs(runs, Some("admit")).await?;
    state.control.wake();
    let mut created_runs = Vec::new();
    let mut skipped = Vec::new();
    for (i, o) in outcome.into_iter().enumerate() {
        match o {
            Created::Created { id, .. } => {
                if let Some(row) = by_id.get(&id) {
                    created_runs.push(run_summary(row));
                }
            }
            Created::Exists { .. } => skipped.push(times[i].to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        }
    }
    let detail = json!({"workflow": backfill.workflow, "runs": created_runs.len(), "skipped": skipped.len()});
    audit(&state, &caller, &tenant.0, "backfill.create", &id, detail).await;
    created(BackfillView {
        id,
        workflow: backfill.workflow,
        from: time(backfill.from_time),
        to: time(backfill.to_time),
        parallel: backfill.parallel,
        total: backfill.total,
        created_at: time(now),
        runs: created_runs,
        skipped,
    })
}

/// The tenant's backfills, newest first (without their runs).
#[utoipa::path(get, path = "/v1/backfills", tag = "backfills", responses((status = 200, body = Vec<BackfillView>)))]
pub async fn list_backfills(State(state): State<ApiState>, tenant: Tenant) -> Answer<Vec<BackfillView>> {
    let rows = state.store.list_backfills(&tenant.0).await?;
    ok(rows
        .into_iter()
        .map(|b| BackfillView {
            id: b.id,
            workflow: b.workflow,
            from: time(b.from_time),
            to: time(b.to_time),
            parallel: b.parallel,
            total: b.total,
            created_at: time(b.created_at),
            runs: Vec::new(),
            skipped: Vec::new(),
        })
        .collect())
}

/// A backfill with its runs.
#[utoipa::path(
    get, path = "/v1/backfills/{id}", tag = "backfills", params(("id" = String, Path)),
    responses((status = 200, body = BackfillView), (status = 404, body = ApiError))
)]
pub async fn get_backfill(
    State(state): State<ApiState>,
    tenant: Tenant,
    Path(id): Path<String>,
) -> Answer<BackfillView> {
    let b = state
        .store
        .get_backfill(&id)
        .await?
        .filter(|b| b.tenant == tenant.0)
        .ok_or_else(|| AppError::NotFound(format!("there is no backfill `{id}`")))?;
    let mut runs = state
        .store
        .list_runs(&RunFilter {
            tenant: tenant.0.clone(),
            backfill_id: Some(id.clone()),
            limit: 1000,
            ..Default::default()
        })
        .await?;
    runs.sort_by_key(|r| r.logical_time);
    ok(BackfillView {
        id: b.id,
        workflow: b.workflow,
        from: time(b.from_time),
        to: time(b.to_time),
        parallel: b.parallel,
        total: b.total,
        created_at: time(b.created_at),
        runs: runs.iter().map(run_summary).collect(),
        skipped: Vec::new(),
    })
}
