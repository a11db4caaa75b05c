//! The handlers. Each one is declared for OpenAPI next to its code.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeZone, Utc};
use dagr_core::definition::{DefinitionError, Format, HumanDuration};
use dagr_core::document::DocumentError;
use dagr_core::schedule::backfill_times;
use dagr_core::{Workflow, WorkflowSpec};
use dagr_protocol::api::*;
use dagr_protocol::plugins::{TenantCatalog, TrustedCatalog};
use dagr_store::{BackfillRow, Created, NewCommand, NewRun, RunFilter, RunKind, RunRow, now_ms};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::Digest as _;

use crate::auth::{Caller, audit};
use crate::error::{ApiResult, AppError};
use crate::extract::{Json, OptionalJson, Query, body_bytes, document_error, off_runtime};
use crate::tasks::find_task;
use crate::views::{run_summary, time};
use crate::{ApiState, Tenant};

pub(crate) type Answer<T> = ApiResult<(StatusCode, axum::Json<T>)>;

pub(crate) fn ok<T>(value: T) -> Answer<T> {
    Ok((StatusCode::OK, axum::Json(value)))
}

fn created<T>(value: T) -> Answer<T> {
    Ok((StatusCode::CREATED, axum::Json(value)))
}

// System ----------------------------------------------------------------------

/// Liveness: answers while the server runs.
#[utoipa::path(get, path = "/healthz", tag = "system", responses((status = 200, body = Health)))]
pub async fn healthz() -> axum::Json<Health> {
    axum::Json(Health { status: "ok".into(), version: env!("CARGO_PKG_VERSION").into() })
}

// Workflows ---------------------------------------------------------------------

/// A tenant's definition, parsed, validated and in its stored form.
pub struct Validated {
    pub workflow: Workflow,
    /// The canonical JSON (what is stored) and its sha256.
    pub canonical: String,
    pub hash: String,
}

/// Parses and validates a tenant's definition (YAML or JSON) against its
/// plugins, within the API's document limits (checked before parsing: the
/// nesting depth, and the size of the document with its aliases expanded,
/// which is also the size of what is stored). A large definition is
/// handled on a blocking thread.
pub async fn validate_definition(
    state: &ApiState,
    tenant: &str,
    bytes: bytes::Bytes,
    format: Option<Format>,
    code: &'static str,
) -> ApiResult<Validated> {
    let limits = state.config.document_limits();
    let plugins = state.plugins.clone();
    let tenant = tenant.to_owned();
    off_runtime(bytes.len(), move || {
        let text = std::str::from_utf8(&bytes).map_err(|_| AppError::bad("bad_body", "the definition is not UTF-8"))?;
        let spec = WorkflowSpec::parse_limited(text, format, &limits).map_err(|e| match e {
            DefinitionError::Limit(DocumentError::Syntax { location, message }) => {
                if location.is_empty() {
                    AppError::bad(code, message)
                } else {
                    AppError::bad_at(code, location, message)
                }
            }
            DefinitionError::Limit(limit) => document_error(limit),
            DefinitionError::Invalid(invalid) => AppError::invalid(code, &invalid),
        })?;
        let catalog = TenantCatalog { directory: plugins.as_ref(), tenant: &tenant };
        let workflow = Workflow::validate(spec, &catalog).map_err(|e| AppError::invalid(code, &e))?;
        let canonical = workflow.spec.canonical_json();
        if canonical.len() > limits.max_bytes {
            return Err(AppError::TooLarge(format!(
                "the definition is {} bytes as stored (canonical JSON), which exceeds the size limit of {} bytes ({})",
                canonical.len(),
                limits.max_bytes,
                limits.bytes_key
            )));
        }
        let hash = hex::encode(sha2::Sha256::digest(canonical.as_bytes()));
        Ok(Validated { workflow, canonical, hash })
    })
    .await
}

/// Applies a workflow definition. Identical to the latest version: nothing
/// changes (200); otherwise a new version is created (201).
#[utoipa::path(
    post, path = "/v1/workflows", tag = "workflows",
    request_body(content = String, description = "The definition, YAML or JSON", content_type = "application/yaml"),
    responses(
        (status = 201, body = Applied, description = "A new version"),
        (status = 200, body = Applied, description = "Unchanged"),
        (status = 400, body = ApiError, description = "The definition is invalid; `location` says where"),
    )
)]
pub async fn apply_workflow(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    headers: HeaderMap,
    request: Request,
) -> Answer<Applied> {
    let bytes = body_bytes(request, &()).await?;
    if bytes.is_empty() {
        return Err(AppError::bad("bad_body", "the body must be the definition (YAML or JSON)"));
    }
    let format = match headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) {
        Some(t) if t.contains("json") => Some(Format::Json),
        Some(t) if t.contains("yaml") => Some(Format::Yaml),
        _ => None,
    };
    let Validated { workflow, canonical, hash } =
        validate_definition(&state, &tenant.0, bytes, format, "invalid_definition").await?;
    crate::admin::check_within_limits(&state, &tenant.0, &workflow, "invalid_definition").await?;
    let now = now_ms();
    let applied = state.store.apply_workflow(&tenant.0, workflow.name(), &hash, &canonical, now).await?;
    state.control.workflow_changed(&tenant.0, workflow.name());
    let detail = json!({"version": applied.version, "created": applied.created});
    audit(&state, &caller, &tenant.0, "workflow.apply", workflow.name(), detail).await;
    let next_run = workflow
        .schedule
        .as_ref()
        .and_then(|s| s.next_after(Utc::now()))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    let body = Applied { name: workflow.name().into(), version: applied.version, created: applied.created, next_run };
    if applied.created { created(body) } else { ok(body) }
}

/// Lists the tenant's workflows.
#[utoipa::path(get, path = "/v1/workflows", tag = "workflows", responses((status = 200, body = Vec<WorkflowSummary>)))]
pub async fn list_workflows(State(state): State<ApiState>, tenant: Tenant) -> Answer<Vec<WorkflowSummary>> {
    let mut out = Vec::new();
    for row in state.store.list_workflows(&tenant.0).await? {
        let Some(version) = state.store.get_version(&tenant.0, &row.name, row.latest_version).await? else {
            continue;
        };
        let spec: Value = serde_json::from_str(&version.spec).unwrap_or(Value::Null);
        out.push(WorkflowSummary {
            name: row.name.clone(),
            description: spec["description"].as_str().unwrap_or_default().into(),
            latest_version: row.latest_version,
            tasks: spec["tasks"].as_array().map(|t| t.len()).unwrap_or(0),
            schedule: spec["schedule"]["cron"].as_str().map(String::from),
            created_at: time(row.created_at),
            updated_at: time(row.updated_at),
        });
    }
    ok(out)
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct VersionQuery {
    /// A version number; default the latest.
    pub version: Option<i64>,
}

async fn workflow_version(
    state: &ApiState,
    tenant: &str,
    name: &str,
    version: Option<i64>,
) -> ApiResult<(dagr_store::WorkflowRow, dagr_store::VersionRow)> {
    let row = live_workflow(state, tenant, name).await?;
    let version = stored_version(state, tenant, name, version.unwrap_or(row.latest_version)).await?;
    Ok((row, version))
}

/// A workflow that exists and is not deleted.
async fn live_workflow(state: &ApiState, tenant: &str, name: &str) -> ApiResult<dagr_store::WorkflowRow> {
    state
        .store
        .get_workflow(tenant, name)
        .await?
        .filter(|w| !w.deleted)
        .ok_or_else(|| AppError::NotFound(format!("there is no workflow `{name}`")))
}

async fn stored_version(state: &ApiState, tenant: &str, name: &str, v: i64) -> ApiResult<dagr_store::VersionRow> {
    state
        .store
        .get_version(tenant, name, v)
        .await?
        .ok_or_else(|| AppError::NotFound(format!("workflow `{name}` has no version {v}")))
}

/// A workflow's definition (the latest version, or `?version=N`).
#[utoipa::path(
    get, path = "/v1/workflows/{name}", tag = "workflows", params(("name" = String, Path), VersionQuery),
    responses((status = 200, body = WorkflowDetail), (status = 404, body = ApiError))
)]
pub async fn get_workflow(
    State(state): State<ApiState>,
    tenant: Tenant,
    Path(name): Path<String>,
    Query(q): Query<VersionQuery>,
) -> Answer<WorkflowDetail> {
    let (row, version) = workflow_version(&state, &tenant.0, &name, q.version).await?;
    ok(WorkflowDetail {
        name: row.name,
        version: version.version,
        latest_version: row.latest_version,
        hash: version.hash,
        definition: serde_json::from_str(&version.spec).map_err(AppError::internal)?,
        created_at: time(version.created_at),
    })
}

/// Deletes a workflow: no new runs; its runs and versions are kept.
#[utoipa::path(
    delete, path = "/v1/workflows/{name}", tag = "workflows", params(("name" = String, Path)),
    responses((status = 204), (status = 404, body = ApiError))
)]
pub async fn delete_workflow(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    if !state.store.delete_workflow(&tenant.0, &name, now_ms()).await? {
        return Err(AppError::NotFound(format!("there is no workflow `{name}`")));
    }
    state.control.workflow_changed(&tenant.0, &name);
    audit(&state, &caller, &tenant.0, "workflow.delete", &name, json!({})).await;
    Ok(StatusCode::NO_CONTENT)
}

/// A workflow's versions, oldest first.
#[utoipa::path(
    get, path = "/v1/workflows/{name}/versions", tag = "workflows", params(("name" = String, Path)),
    responses((status = 200, body = Vec<VersionSummary>), (status = 404, body = ApiError))
)]
pub async fn list_versions(
    State(state): State<ApiState>,
    tenant: Tenant,
    Path(name): Path<String>,
) -> Answer<Vec<VersionSummary>> {
    workflow_version(&state, &tenant.0, &name, None).await?;
    let versions = state.store.list_versions(&tenant.0, &name).await?;
    ok(versions
        .into_iter()
        .map(|v| VersionSummary { version: v.version, hash: v.hash, created_at: time(v.created_at) })
        .collect())
}

// Runs --------------------------------------------------------------------------

/// Parses RFC 3339, `YYYY-MM-DDTHH:MM:SS` (UTC) or `YYYY-MM-DD` (midnight UTC).
pub fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Ok(t) = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S") {
        return Ok(Utc.from_utc_datetime(&t));
    }
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d")
        && let Some(t) = d.and_hms_opt(0, 0, 0)
    {
        return Ok(Utc.from_utc_datetime(&t));
    }
    Err(format!("`{text}` is not a time: use RFC 3339 (2026-01-31T00:00:00Z) or a date (2026-01-31)"))
}

#[allow(clippy::too_many_arguments, reason = "one field per column of the run, named at each call")]
fn new_run(
    tenant: &str,
    workflow: &Workflow,
    version: Option<i64>,
    kind: RunKind,
    logical_time: i64,
    params: &str,
    spec: Option<String>,
    backfill: Option<String>,
) -> NewRun {
    let id = uuid::Uuid::now_v7().to_string();
    let now = now_ms();
    NewRun {
        run: RunRow {
            slot: dagr_protocol::slot_of(&id) as i64,
            id,
            tenant: tenant.into(),
            workflow: workflow.name().into(),
            version,
            kind,
            state: "queued".into(),
            logical_time,
            params: params.into(),
            spec,
            backfill_id: backfill,
            owner: None,
            epoch: 0,
            created_at: now,
            started_at: None,
            finished_at: None,
            updated_at: now,
        },
        tasks: workflow.tasks.iter().map(|t| t.name.clone()).collect(),
    }
}

/// The latest version of a workflow, validated: from the cache when it was
/// validated before, else fetched, parsed and validated (and kept).
async fn latest_workflow(state: &ApiState, tenant: &str, name: &str) -> ApiResult<(i64, Arc<Workflow>)> {
    let v = live_workflow(state, tenant, name).await?.latest_version;
    if let Some(workflow) = state.versions.get(tenant, name, v) {
        return Ok((v, workflow));
    }
    let version = stored_version(state, tenant, name, v).await?;
    let spec = WorkflowSpec::parse(&version.spec, Format::Json)
        .map_err(|e| AppError::internal(format!("stored definition: {e}")))?;
    let workflow =
        Workflow::validate(spec, &TrustedCatalog).map_err(|e| AppError::internal(format!("stored definition: {e}")))?;
    let workflow = Arc::new(workflow);
    state.versions.insert(tenant, name, v, workflow.clone());
    Ok((v, workflow))
}

/// Triggers a run of the latest version, with param overrides.
#[utoipa::path(
    post, path = "/v1/workflows/{name}/runs", tag = "runs", params(("name" = String, Path)),
    request_body = TriggerRequest,
    responses((status = 201, body = RunSummary), (status = 400, body = ApiError), (status = 404, body = ApiError))
)]
pub async fn trigger_run(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Path(name): Path<String>,
    OptionalJson(req): OptionalJson<TriggerRequest>,
) -> Answer<RunSummary> {
    let (version, workflow) = latest_workflow(&state, &tenant.0, &name).await?;
    let params = workflow.resolve_params(&req.params).map_err(|e| AppError::invalid("invalid_params", &e))?;
    let logical_time = match &req.logical_time {
        Some(text) => {
            parse_time(text).map_err(|m| AppError::bad_at("invalid_time", "logical_time", m))?.timestamp_millis()
        }
        None => now_ms(),
    };
    let params = serde_json::to_string(&params).map_err(AppError::internal)?;
    crate::admin::check_run_rate(&state, &tenant.0).await?;
    let run = new_run(&tenant.0, &workflow, Some(version), RunKind::Manual, logical_time, &params, None, None);
    let summary = run_summary(&run.run);
    state.store.create_runs(vec![run], Some("admit")).await?;
    state.control.wake();
    let detail = json!({"workflow": name, "version": version});
    audit(&state, &caller, &tenant.0, "run.trigger", &summary.id, detail).await;
    created(summary)
}

/// A run's state, as a filter.
#[derive(Debug, Clone, Copy, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code, reason = "only describes the parameter's values in the OpenAPI document")]
pub enum RunStateName {
    Queued,
    Running,
    Paused,
    Succeeded,
    Failed,
    Killed,
}

/// How a run came to be, as a filter.
#[derive(Debug, Clone, Copy, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code, reason = "only describes the parameter's values in the OpenAPI document")]
pub enum RunKindName {
    Manual,
    Schedule,
    Backfill,
    Job,
}

/// The cursor of a page of runs: `<created_at ms>_<run id>`.
const RUN_CURSOR: &str = "^-?[0-9]+_.+$";

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    /// Only runs of this workflow.
    pub workflow: Option<String>,
    /// Only runs in this state.
    #[param(inline, value_type = Option<RunStateName>)]
    pub state: Option<String>,
    /// Only runs of this kind.
    #[param(inline, value_type = Option<RunKindName>)]
    pub kind: Option<String>,
    /// Only runs of this backfill.
    pub backfill: Option<String>,
    /// Page size, 1–1000 (default 50).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// The `next` cursor of the previous page.
    #[param(pattern = "^-?[0-9]+_.+$")]
    pub before: Option<String>,
}

/// [`RunsQuery`] of one workflow's runs (the path names the workflow).
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct WorkflowRunsQuery {
    /// Only runs in this state.
    #[param(inline, value_type = Option<RunStateName>)]
    pub state: Option<String>,
    /// Only runs of this kind.
    #[param(inline, value_type = Option<RunKindName>)]
    pub kind: Option<String>,
    /// Only runs of this backfill.
    pub backfill: Option<String>,
    /// Page size, 1–1000 (default 50).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// The `next` cursor of the previous page.
    #[param(pattern = "^-?[0-9]+_.+$")]
    pub before: Option<String>,
}

async fn runs_page(state: &ApiState, tenant: &str, q: RunsQuery) -> Answer<RunList> {
    if let Some(s) = &q.state
        && dagr_core::RunState::parse(s).is_none()
    {
        return Err(AppError::bad_at("bad_query", "?state", format!("unknown state `{s}`")));
    }
    let kind = match &q.kind {
        Some(k) => Some(
            RunKind::parse(k).ok_or_else(|| AppError::bad_at("bad_query", "?kind", format!("unknown kind `{k}`")))?,
        ),
        None => None,
    };
    let before = match &q.before {
        Some(cursor) => {
            debug_assert!(RUN_CURSOR.starts_with('^'));
            let (at, id) = cursor
                .split_once('_')
                .filter(|(_, id)| !id.is_empty())
                .and_then(|(at, id)| at.parse::<i64>().ok().map(|at| (at, id.to_owned())))
                .ok_or_else(|| AppError::bad_at("bad_query", "?before", "not a cursor from a previous page"))?;
            Some((at, id))
        }
        None => None,
    };
    let limit = q.limit.unwrap_or(50);
    if !(1..=1000).contains(&limit) {
        return Err(AppError::bad_at("bad_query", "?limit", "must be between 1 and 1000"));
    }
    let filter = RunFilter {
        tenant: tenant.into(),
        workflow: q.workflow,
        state: q.state,
        kind,
        backfill_id: q.backfill,
        before,
        limit,
    };
    let rows = state.store.list_runs(&filter).await?;
    let next =
        (rows.len() as i64 == limit).then(|| rows.last().map(|r| format!("{}_{}", r.created_at, r.id))).flatten();
    ok(RunList { runs: rows.iter().map(run_summary).collect(), next })
}

/// Lists runs, newest first, with filters and pagination.
#[utoipa::path(get, path = "/v1/runs", tag = "runs", params(RunsQuery), responses((status = 200, body = RunList), (status = 400, body = ApiError)))]
pub async fn list_runs(State(state): State<ApiState>, tenant: Tenant, Query(q): Query<RunsQuery>) -> Answer<RunList> {
    runs_page(&state, &tenant.0, q).await
}

/// Lists a workflow's runs, newest first.
#[utoipa::path(
    get, path = "/v1/workflows/{name}/runs", tag = "runs", params(("name" = String, Path), WorkflowRunsQuery),
    responses((status = 200, body = RunList), (status = 404, body = ApiError))
)]
pub async fn list_workflow_runs(
    State(state): State<ApiState>,
    tenant: Tenant,
    Path(name): Path<String>,
    Query(q): Query<WorkflowRunsQuery>,
) -> Answer<RunList> {
    if state.store.get_workflow(&tenant.0, &name).await?.is_none() {
        return Err(AppError::NotFound(format!("there is no workflow `{name}`")));
    }
    let q = RunsQuery {
        workflow: Some(name),
        state: q.state,
        kind: q.kind,
        backfill: q.backfill,
        limit: q.limit,
        before: q.before,
    };
    runs_page(&state, &tenant.0, q).await
}

pub(crate) async fn find_run(state: &ApiState, tenant: &str, id: &str) -> ApiResult<RunRow> {
    state
        .store
        .get_run(id)
        .await?
        .filter(|r| r.tenant == tenant)
        .ok_or_else(|| AppError::NotFound(format!("there is no run `{id}`")))
}

/// The audit action of a run or task command.
fn action_name(kind: &str) -> String {
    match kind {
        "rerun_failed" => "run.rerun".into(),
        "rerun_task" => "task.rerun".into(),
        "force_success" => "task.force_success".into(),
        other => format!("run.{other}"),
    }
}

async fn act(
    state: &ApiState,
    caller: &Caller,
    tenant: &str,
    run_id: &str,
    kind: &str,
    payload: Value,
) -> Answer<ActionResult> {
    let run = find_run(state, tenant, run_id).await?;
    let id = state
        .store
        .insert_command(NewCommand {
            tenant: tenant.into(),
            run_id: run_id.into(),
            slot: run.slot,
            kind: kind.into(),
            payload: payload.to_string(),
            created_at: now_ms(),
        })
        .await?;
    state.control.wake();
    let outcome = state.control.wait_command(id, state.config.action_wait).await;
    let run = find_run(state, tenant, run_id).await?;
    if outcome.as_ref().is_none_or(|o| o.ok) {
        let detail = if payload.is_null() { json!({}) } else { payload };
        audit(state, caller, tenant, &action_name(kind), run_id, detail).await;
    }
    match outcome {
        Some(o) if o.ok => ok(ActionResult { ok: true, message: o.message, run: run_summary(&run) }),
        Some(o) => Err(AppError::Conflict(o.message)),
        None => Ok((
            StatusCode::ACCEPTED,
            axum::Json(ActionResult {
                ok: false,
                message: format!("{kind} was accepted; the engine has not applied it yet"),
                run: run_summary(&run),
            }),
        )),
    }
}

macro_rules! run_action {
    ($fn:ident, $path:literal, $kind:literal, $doc:literal) => {
        #[doc = $doc]
        #[utoipa::path(
                    post, path = $path, tag = "runs", params(("id" = String, Path)),
                    responses(
                        (status = 200, body = ActionResult),
                        (status = 404, body = ApiError),
                        (status = 409, body = ApiError, description = "Not possible in the run's state"),
                        (status = 202, body = ActionResult, description = "Accepted, not yet applied (`ok` is false)"),
                    )
                )]
        pub async fn $fn(
            State(state): State<ApiState>,
            tenant: Tenant,
            caller: Caller,
            Path(id): Path<String>,
        ) -> Answer<ActionResult> {
            act(&state, &caller, &tenant.0, &id, $kind, Value::Null).await
        }
    };
}

run_action!(
    kill_run,
    "/v1/runs/{id}/kill",
    "kill",
    "Kills a run: running attempts are cancelled, nothing else starts."
);
run_action!(pause_run, "/v1/runs/{id}/pause", "pause", "Pauses a run: no new task starts; running ones finish.");
run_action!(resume_run, "/v1/runs/{id}/resume", "resume", "Resumes a paused run.");
run_action!(
    rerun_run,
    "/v1/runs/{id}/rerun",
    "rerun_failed",
    "Reruns a failed or killed run from its failures: failed, upstream-failed and killed tasks and what depends on them."
);
run_action!(
    mark_run_failed,
    "/v1/runs/{id}/mark-failed",
    "mark_failed",
    "Marks a run failed: running attempts are cancelled."
);

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Events after this sequence number.
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// Most events, 1–10000 (default 1000).
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<i64>,
}

/// The event log of a run: every state change, in order.
#[utoipa::path(
    get, path = "/v1/runs/{id}/events", tag = "runs", params(("id" = String, Path), EventsQuery),
    responses((status = 200, body = Vec<EventView>), (status = 404, body = ApiError))
)]
pub async fn run_events(
    State(state): State<ApiState>,
    tenant: Tenant,
    Path(id): Path<String>,
    Query(q): Query<EventsQuery>,
) -> Answer<Vec<EventView>> {
    let limit = q.limit.unwrap_or(1000);
    if !(1..=10_000).contains(&limit) {
        return Err(AppError::bad_at("bad_query", "?limit", "must be between 1 and 10000"));
    }
    let after = q.after.unwrap_or(0);
    if after < 0 {
        return Err(AppError::bad_at("bad_query", "?after", "must be 0 or more"));
    }
    find_run(&state, &tenant.0, &id).await?;
    let events = state.store.events(&tenant.0, Some(&id), after, limit).await?;
    ok(events
        .into_iter()
        .map(|e| EventView {
            seq: e.seq,
            at: time(e.at),
            kind: e.kind,
            run_id: e.run_id,
            task: e.task,
            data: serde_json::from_str(&e.data).unwrap_or(Value::Null),
        })
        .collect())
}

/// Reruns one task of a finished run, optionally with everything downstream.
#[utoipa::path(
    post, path = "/v1/runs/{id}/tasks/{task}/rerun", tag = "runs",
    params(("id" = String, Path), ("task" = String, Path)), request_body = RerunTaskRequest,
    responses((status = 200, body = ActionResult), (status = 404, body = ApiError), (status = 409, body = ApiError))
)]
pub async fn rerun_task(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Path((id, task)): Path<(String, String)>,
    OptionalJson(req): OptionalJson<RerunTaskRequest>,
) -> Answer<ActionResult> {
    find_task(&state, &tenant.0, &id, &task).await?;
    act(&state, &caller, &tenant.0, &id, "rerun_task", json!({"task": task, "downstream": req.downstream})).await
}

/// Marks a failed task succeeded, so that its downstream proceeds.
#[utoipa::path(
    post, path = "/v1/runs/{id}/tasks/{task}/force-success", tag = "runs",
    params(("id" = String, Path), ("task" = String, Path)),
    responses((status = 200, body = ActionResult), (status = 404, body = ApiError), (status = 409, body = ApiError))
)]
pub async fn force_success(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Path((id, task)): Path<(String, String)>,
) -> Answer<ActionResult> {
    find_task(&state, &tenant.0, &id, &task).await?;
    act(&state, &caller, &tenant.0, &id, "force_success", json!({"task": task})).await
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// Which attempt; default the latest.
    #[param(minimum = 1)]
    pub attempt: Option<i64>,
    /// Lines after this sequence number.
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// Keep the response open and stream new lines (NDJSON) until the attempt ends.
    pub follow: Option<bool>,
}

/// An attempt's log. With `follow=true`, an NDJSON stream of lines that ends
/// when the attempt does.
#[utoipa::path(
    get, path = "/v1/runs/{id}/tasks/{task}/logs", tag = "runs",
    params(("id" = String, Path), ("task" = String, Path), LogsQuery),
    responses(
        (status = 200, description = "A JSON array of lines; with follow=true an NDJSON stream (`application/x-ndjson`): \
            one LogLineView per line, ending when the attempt ends",
            content((Vec<LogLineView> = "application/json"), (LogLineView = "application/x-ndjson"))),
        (status = 400, body = ApiError, description = "`attempt` names no attempt of the task"),
        (status = 404, body = ApiError)
    )
)]
pub async fn task_logs(
    State(state): State<ApiState>,
    tenant: Tenant,
    Path((id, task)): Path<(String, String)>,
    Query(q): Query<LogsQuery>,
) -> ApiResult<Response> {
    let (_, row) = find_task(&state, &tenant.0, &id, &task).await?;
    let attempt = q.attempt.unwrap_or(row.attempts.max(1));
    if attempt < 1 || (row.attempts > 0 && attempt > row.attempts) {
        return Err(AppError::bad_at("bad_query", "?attempt", format!("task `{task}` has {} attempts", row.attempts)));
    }
    let after = q.after.unwrap_or(0);
    if after < 0 {
        return Err(AppError::bad_at("bad_query", "?after", "must be 0 or more"));
    }
    let view = move |l: dagr_store::LogRow| LogLineView {
        seq: l.seq,
        attempt: l.attempt,
        at: time(l.at),
        source: l.source,
        level: l.level,
        message: l.message,
    };
    if !q.follow.unwrap_or(false) {
        let lines = state.store.logs(&id, row.idx, attempt, after, 100_000).await?;
        return Ok(axum::Json(lines.into_iter().map(view).collect::<Vec<_>>()).into_response());
    }
    let store = state.store.clone();
    let idx = row.idx;
    let stream = futures::stream::unfold((after, false), move |(after, done)| {
        let store = store.clone();
        let id = id.clone();
        let task = task.clone();
        async move {
            if done {
                return None;
            }
            loop {
                let lines = match store.logs(&id, idx, attempt, after, 1000).await {
                    Ok(lines) => lines,
                    Err(e) => {
                        return Some((Err(std::io::Error::other(e.to_string())), (after, true)));
                    }
                };
                if let Some(last) = lines.last() {
                    let next = last.seq;
                    let mut chunk = String::new();
                    for line in lines {
                        chunk.push_str(&serde_json::to_string(&view(line)).unwrap_or_default());
                        chunk.push('\n');
                    }
                    return Some((Ok::<_, std::io::Error>(bytes::Bytes::from(chunk)), (next, false)));
                }
                // Nothing new: is the attempt over?
                let finished = match store.attempts(&id, Some(idx)).await {
                    Ok(attempts) => attempts.iter().find(|a| a.number == attempt).is_some_and(|a| a.state != "running"),
                    Err(_) => true,
                };
                let task_waiting = match store.run_task(&id, &task).await {
                    Ok(Some(t)) => t.attempts < attempt && !is_final(&t.state),
                    _ => false,
                };
                if finished && !task_waiting {
                    // One last read: lines written just before the end.
                    let tail = store.logs(&id, idx, attempt, after, 1000).await.unwrap_or_default();
                    if tail.is_empty() {
                        return None;
                    }
                    continue;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(stream)).into_response())
}

pub(crate) fn is_final(state: &str) -> bool {
    matches!(state, "succeeded" | "failed" | "upstream_failed" | "skipped" | "killed")
}

// Backfills ----------------------------------------------------------------------

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

// Jobs --------------------------------------------------------------------------

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
    let Validated { workflow, .. } =
        validate_definition(&state, &tenant.0, spec, Some(Format::Json), "invalid_job").await?;
    crate::admin::check_within_limits(&state, &tenant.0, &workflow, "invalid_job").await?;
    crate::admin::check_run_rate(&state, &tenant.0).await?;
    let run =
        new_run(&tenant.0, &workflow, None, RunKind::Job, now_ms(), "{}", Some(workflow.spec.canonical_json()), None);
    let run_id = run.run.id.clone();
    state.store.create_runs(vec![run], Some("admit")).await?;
    state.control.wake();
    audit(&state, &caller, &tenant.0, "job.create", &run_id, json!({"name": name})).await;
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
        if t.state != "succeeded" && is_final(&t.state) {
            errors.insert(t.name.clone(), json!({"state": t.state, "error": t.error}));
        }
    }
    let output = if single { out.values().next().cloned() } else { None };
    let body = JobResult { run_id, state: run.state, outputs: if single { Map::new() } else { out }, output, errors };
    if finished.is_some() { ok(body) } else { Ok((StatusCode::ACCEPTED, axum::Json(body))) }
}
