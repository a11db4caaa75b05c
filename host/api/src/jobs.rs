//! Ad-hoc jobs: one plugin, or a small inline DAG, with no registered
//! workflow; `wait=true` answers with the outcome.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use dagr_core::definition::{Format, HumanDuration};
use dagr_protocol::api::*;
use dagr_protocol::now_ms;
use dagr_store::{RunKind, RunOrigin, TaskState};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::auth::{Caller, run_audit};
use crate::error::AppError;
use crate::extract::{Json, Query};
use crate::handlers::*;
use crate::workflows::{Validated, validate_definition};
use crate::{ApiState, Tenant};

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct JobQuery {
    /// Wait for the job to finish and return its outputs.
    pub wait: Option<bool>,
    /// How long to wait with `wait=true`, e.g. `30s` (default 60s, at most
    /// the server's limit); refused without `wait=true`.
    pub wait_timeout: Option<String>,
}

/// Runs an ad-hoc job: one plugin with params, or a small inline DAG.
#[utoipa::path(
    post, path = "/v1/jobs", tag = "jobs", params(JobQuery), request_body = JobRequest,
    responses(
        (status = 201, body = JobResult, description = "Created (without wait)"),
        (status = 200, body = JobResult, description = "Finished (with wait)"),
        (status = 202, body = JobResult, description = "Still running when the wait ended"),
        (status = 400, body = ApiError)
    )
)]
pub async fn create_job(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Query(q): Query<JobQuery>,
    Json(req): Json<JobRequest>,
) -> Answer<JobResult> {
    if q.wait_timeout.is_some() && !q.wait.unwrap_or(false) {
        return Err(AppError::bad_at("bad_query", "?wait_timeout", "only means something with wait=true"));
    }
    let name = req.name.clone().unwrap_or_else(|| "job".into());
    let timeout = match &req.timeout {
        Some(t) => Some(HumanDuration(
            dagr_core::units::parse_duration(t).map_err(|m| AppError::bad_at("invalid_job", "timeout", m))?,
        )),
        None => None,
    };
    let single = req.plugin.is_some();
    let mut tasks: Vec<Value> = match (&req.plugin, &req.tasks) {
        (Some(plugin), None) => {
            let short = plugin.split('@').next().unwrap_or("task").to_owned();
            vec![json!({"name": short, "plugin": plugin, "params": req.params.clone().unwrap_or(json!({}))})]
        }
        (None, Some(tasks)) => {
            if req.params.is_some() {
                return Err(AppError::bad_at(
                    "invalid_job",
                    "params",
                    "`params` belongs to a one-plugin job; give each task its own",
                ));
            }
            tasks.clone()
        }
        (Some(_), Some(_)) => {
            return Err(AppError::bad("invalid_job", "give either `plugin` (one task) or `tasks` (a DAG), not both"));
        }
        (None, None) => {
            return Err(AppError::bad("invalid_job", "give `plugin` (one task) or `tasks` (a DAG)"));
        }
    };
    if tasks.len() > state.config.max_job_tasks {
        return Err(AppError::bad_at(
            "invalid_job",
            "tasks",
            format!("a job may have at most {} tasks", state.config.max_job_tasks),
        ));
    }
    if let Some(t) = timeout {
        for task in &mut tasks {
            if let Value::Object(map) = task {
                map.entry("timeout").or_insert_with(|| serde_json::to_value(t).unwrap_or(Value::Null));
            }
        }
    }
    let spec = bytes::Bytes::from(json!({"name": name, "tasks": tasks}).to_string());
    let Validated { workflow, canonical, .. } =
        validate_definition(&state, &tenant.0, spec, Some(Format::Json), "invalid_job").await?;
    crate::admin::check_within_limits(&state, &tenant.0, &workflow, "invalid_job").await?;
    let limits = crate::admin::check_run_rate(&state, &tenant.0).await?;
    let run = new_run(
        &workflow,
        RunOrigin {
            tenant: tenant.0.clone(),
            version: None,
            kind: RunKind::Job,
            logical_time: now_ms(),
            params: "{}".into(),
            spec: Some(canonical),
            backfill_id: None,
            parent: None,
            tenant_capped: crate::admin::capped(limits.as_ref()),
        },
    );
    let run_id = run.run.id.clone();
    let span = tracing::info_span!("trigger", run = %run_id, job = %name, tenant = %tenant.0);
    dagr_telemetry::in_run(&span, &run_id);
    let entry = run_audit(&caller, &tenant.0, "job.create", &run_id, &json!({"name": name}));
    tracing::Instrument::instrument(state.store.create_runs_audited(vec![run], admit(), entry), span).await?;
    state.control.wake();
    if !q.wait.unwrap_or(false) {
        return created(JobResult {
            run_id,
            state: "queued".into(),
            outputs: Map::new(),
            output: None,
            errors: Map::new(),
        });
    }
    let wait = match &q.wait_timeout {
        Some(t) => {
            dagr_core::units::parse_duration(t).map_err(|m| AppError::bad_at("bad_query", "?wait_timeout", m))?
        }
        None => Duration::from_secs(60),
    }
    .min(state.config.max_job_wait);
    let finished = state.control.wait_run(&run_id, wait).await;
    let run = find_run(&state, &tenant.0, &run_id).await?;
    let tasks = state.store.run_tasks(&run_id).await?;
    let idxs: Vec<i64> = tasks.iter().map(|t| t.idx).collect();
    let outputs: HashMap<i64, String> = state.store.outputs(&run_id, &idxs).await?.into_iter().collect();
    let mut out = Map::new();
    let mut errors = Map::new();
    for t in &tasks {
        if let Some(o) = outputs.get(&t.idx) {
            out.insert(t.name.clone(), serde_json::from_str(o).unwrap_or(Value::String(o.clone())));
        }
        if t.state != TaskState::Succeeded && t.state.is_terminal() {
            errors.insert(t.name.clone(), json!({"state": t.state, "error": t.error}));
        }
    }
    let output = if single { out.values().next().cloned() } else { None };
    let body = JobResult {
        run_id,
        state: run.state.as_str().into(),
        outputs: if single { Map::new() } else { out },
        output,
        errors,
    };
    if finished.is_some() { ok(body) } else { Ok((StatusCode::ACCEPTED, axum::Json(body))) }
}
