//! Backfills: one run per logical time of a range.

use std::collections::HashMap;

use axum::extract::State;
use chrono::Utc;
use dagr_core::schedule::{backfill_times, range_bound};
use dagr_protocol::api::*;
use dagr_protocol::commands::Command;
use dagr_protocol::now_ms;
use dagr_store::{BackfillRow, Created, NewCommand, NewRun, RunFilter, RunKind, RunOrigin, RunRow};
use serde_json::json;

use crate::auth::{Caller, audit};
use crate::error::{ApiResult, AppError};
use crate::extract::{Json, Path};
use crate::handlers::*;
use crate::views::{run_summary, time};
use crate::{ApiState, Tenant};

/// Brings back the runs of `workflow` with logical times in `[from, to]`
/// that were carried over to cold storage: a cycle has one run, hot or
/// cold, and creating runs sees only hot ones, so a cold cycle would get a
/// second run. Restored, it is skipped (or re-flushed) like a hot one.
async fn restore_cycles(
    state: &ApiState,
    tenant: &str,
    workflow: &str,
    from: chrono::DateTime<Utc>,
    to: chrono::DateTime<Utc>,
) -> ApiResult<()> {
    let (from, to) = (from.timestamp_millis(), to.timestamp_millis());
    state.store.restore_range(tenant, workflow, from, to, i64::MAX, now_ms()).await?;
    Ok(())
}

/// A backfill's re-flush of the workflows downstream of `workflow`
/// (transitively): every cycle of theirs in `[from, to]` gets a run of the
/// backfill, and cycles that already have one are re-flushed. Dependency
/// order needs nothing more: each downstream run waits for its upstream
/// instances. `tenant_capped`: the tenant limits its tasks at once (its
/// runs share a slot). Returns the runs made and the cycles re-flushed.
async fn backfill_downstream(
    state: &ApiState,
    tenant: &str,
    workflow: &str,
    from: chrono::DateTime<Utc>,
    to: chrono::DateTime<Utc>,
    backfill: &str,
    tenant_capped: bool,
) -> ApiResult<(Vec<RunRow>, Vec<String>)> {
    let limit = state.config.max_backfill_runs;
    let edges = state.store.workflow_edges(tenant).await?;
    let mut seen: std::collections::BTreeSet<String> = std::collections::BTreeSet::from([workflow.to_owned()]);
    let mut queue: std::collections::VecDeque<String> = std::collections::VecDeque::from([workflow.to_owned()]);
    let mut order = Vec::new();
    while let Some(at) = queue.pop_front() {
        for e in edges.iter().filter(|e| e.upstream == at && e.kind == "upstream") {
            if seen.insert(e.workflow.clone()) {
                order.push(e.workflow.clone());
                queue.push_back(e.workflow.clone());
            }
        }
    }
    // An existing cycle of a workflow that also waits for another one
    // re-flushed here is re-flushed by the engine after that one (through
    // the runs that released it), never beside it: judged first, it would
    // find its upstream still finished and go at once.
    let after_another: std::collections::BTreeSet<String> = order
        .iter()
        .filter(|name| {
            edges.iter().any(|e| {
                &e.workflow == *name && e.kind == "upstream" && e.upstream != workflow && seen.contains(&e.upstream)
            })
        })
        .cloned()
        .collect();
    let (mut made, mut reflushed, mut total) = (Vec::new(), Vec::new(), 0usize);
    for name in order {
        let (version, wf) = latest_workflow(state, tenant, &name).await?;
        let times = backfill_times(wf.schedule.as_ref(), from, to, limit)
            .map_err(|m| AppError::bad_at("invalid_backfill", "to", format!("downstream workflow `{name}`: {m}")))?;
        total += times.len();
        if total > limit {
            return Err(AppError::bad_at(
                "invalid_backfill",
                "include_downstream",
                format!(
                    "with its downstream workflows the backfill covers more than {limit} runs (the limit `[api] max_backfill_runs`); split it"
                ),
            ));
        }
        restore_cycles(state, tenant, &name, from, to).await?;
        let params = serde_json::to_string(&wf.spec.params).map_err(AppError::internal)?;
        let runs: Vec<NewRun> = times
            .iter()
            .map(|t| {
                new_run(
                    &wf,
                    RunOrigin {
                        tenant: tenant.into(),
                        version: Some(version),
                        kind: RunKind::Backfill,
                        logical_time: t.timestamp_millis(),
                        params: params.clone(),
                        spec: None,
                        backfill_id: Some(backfill.into()),
                        parent: None,
                        tenant_capped,
                    },
                )
            })
            .collect();
        let rows: Vec<RunRow> = runs.iter().map(|r| r.run.clone()).collect();
        for (i, outcome) in state.store.create_runs(runs, admit()).await?.into_iter().enumerate() {
            match outcome {
                Created::Created { .. } => made.push(rows[i].clone()),
                Created::Exists { .. } if after_another.contains(&name) => reflushed.push(format!(
                    "{name}@{} (re-flushed after its upstream)",
                    times[i].to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                )),
                Created::Exists { id } => {
                    let slot = dagr_protocol::slot_of(&id) as i64;
                    let command = encoded(&Command::Reflush { downstream: true });
                    state
                        .store
                        .insert_command(NewCommand {
                            tenant: tenant.into(),
                            run_id: id,
                            slot,
                            command,
                            created_at: now_ms(),
                            by: None,
                        })
                        .await?;
                    reflushed.push(format!(
                        "{name}@{} (re-flushed)",
                        times[i].to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                    ));
                }
            }
        }
    }
    Ok((made, reflushed))
}

/// Creates one run per logical time in `[from, to]` (the schedule's fire
/// times, or one per day without a schedule), run `parallel` at a time.
#[utoipa::path(
    post, path = "/v1/backfills", tag = "backfills", request_body = BackfillRequest,
    responses(
        (status = 201, body = BackfillView),
        (status = 400, body = ApiError),
        (status = 404, body = ApiError),
        (status = 429, body = ApiError, description = "The tenant's unfinished runs would pass max_unfinished_runs"),
    )
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
    let (version, workflow) = latest_workflow(&state, &tenant.0, &req.workflow).await?;
    // Bare dates and local times are the workflow's time zone's; a bare
    // `to` date includes its whole day.
    let timezone = workflow.schedule.as_ref().map_or(chrono_tz::UTC, |s| s.timezone);
    let from = range_bound(&req.from, timezone, false).map_err(|m| AppError::bad_at("invalid_backfill", "from", m))?;
    let to = range_bound(&req.to, timezone, true).map_err(|m| AppError::bad_at("invalid_backfill", "to", m))?;
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
    let limits = crate::admin::check_unfinished_runs(&state, &tenant.0, times.len()).await?;
    let tenant_capped = crate::admin::capped(limits.as_ref());
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
    restore_cycles(&state, &tenant.0, &req.workflow, from, to).await?;
    state.store.insert_backfill(backfill.clone()).await?;
    let runs: Vec<NewRun> = times
        .iter()
        .map(|t| {
            new_run(
                &workflow,
                RunOrigin {
                    tenant: tenant.0.clone(),
                    version: Some(version),
                    kind: RunKind::Backfill,
                    logical_time: t.timestamp_millis(),
                    params: params.clone(),
                    spec: None,
                    backfill_id: Some(id.clone()),
                    parent: None,
                    tenant_capped,
                },
            )
        })
        .collect();
    let by_id: HashMap<String, RunRow> = runs.iter().map(|r| (r.run.id.clone(), r.run.clone())).collect();
    let outcome = state.store.create_runs(runs, admit()).await?;
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
    if req.include_downstream {
        let (more, reflushed) =
            backfill_downstream(&state, &tenant.0, &req.workflow, from, to, &id, tenant_capped).await?;
        created_runs.extend(more.iter().map(run_summary));
        skipped.extend(reflushed);
    }
    state.control.wake();
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
