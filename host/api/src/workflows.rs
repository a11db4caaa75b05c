//! Workflows: apply (YAML or JSON, checked and validated off the async
//! runtime), list, read, delete, versions.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use chrono::Utc;
use dagr_core::definition::{DefinitionError, Format};
use dagr_core::document::DocumentError;
use dagr_core::{Workflow, WorkflowSpec};
use dagr_protocol::api::*;
use dagr_protocol::now_ms;
use dagr_protocol::plugins::TenantCatalog;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::Digest as _;

use crate::auth::{Caller, audit};
use crate::error::{ApiResult, AppError};
use crate::extract::{Path, Query, body_bytes, document_error, off_runtime};
use crate::handlers::*;
use crate::views::time;
use crate::{ApiState, Tenant};

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
        // What is stored; taken before validation, which keeps the tasks
        // only in their validated form.
        let canonical = spec.canonical_json();
        let catalog = TenantCatalog { directory: plugins.as_ref(), tenant: &tenant };
        let workflow = Workflow::validate(spec, &catalog).map_err(|e| AppError::invalid(code, &e))?;
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
    let edges = crate::outer::check_graph(&state, &tenant.0, &workflow).await?;
    let now = now_ms();
    let applied = state.store.apply_workflow(&tenant.0, workflow.name(), &hash, &canonical, now).await?;
    // Validated already: the first trigger (and, in `dagr serve`, the
    // engine) need not read, parse and validate it again.
    let workflow = std::sync::Arc::new(workflow);
    state.versions.insert(&tenant.0, workflow.name(), applied.version, workflow.clone());
    state.store.set_workflow_edges(&tenant.0, workflow.name(), &edges).await?;
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

/// Options of the workflow list.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct WorkflowsQuery {
    /// Also each workflow's latest runs, newest first: how many (0–25,
    /// default 0). The web UI's row of squares.
    #[param(minimum = 0, maximum = 25)]
    pub runs: Option<i64>,
}

/// Most latest runs the list shows per workflow.
const MAX_LIST_RUNS: i64 = 25;

/// Lists the tenant's workflows.
#[utoipa::path(get, path = "/v1/workflows", tag = "workflows", params(WorkflowsQuery),
    responses((status = 200, body = Vec<WorkflowSummary>), (status = 400, body = ApiError)))]
pub async fn list_workflows(
    State(state): State<ApiState>,
    tenant: Tenant,
    Query(q): Query<WorkflowsQuery>,
) -> Answer<Vec<WorkflowSummary>> {
    let runs = q.runs.unwrap_or(0);
    if !(0..=MAX_LIST_RUNS).contains(&runs) {
        return Err(AppError::bad_at("bad_query", "?runs", format!("must be 0 to {MAX_LIST_RUNS}")));
    }
    let now = Utc::now();
    let mut out = Vec::new();
    for row in state.store.list_workflows(&tenant.0).await? {
        let Some(version) = state.store.get_version(&tenant.0, &row.name, row.latest_version).await? else {
            continue;
        };
        let spec: Value = serde_json::from_str(&version.spec).unwrap_or(Value::Null);
        let next_run = if row.schedule_paused { None } else { next_cycle(&spec["schedule"], now) };
        out.push(WorkflowSummary {
            name: row.name.clone(),
            description: spec["description"].as_str().unwrap_or_default().into(),
            latest_version: row.latest_version,
            tasks: spec["tasks"].as_array().map(|t| t.len()).unwrap_or(0),
            schedule: spec["schedule"]["cron"].as_str().map(String::from),
            schedule_paused: row.schedule_paused,
            next_run,
            last_runs: Vec::new(),
            created_at: time(row.created_at),
            updated_at: time(row.updated_at),
        });
    }
    if runs > 0 {
        // One indexed query per workflow (runs_by_workflow), a few at once.
        use futures::StreamExt as _;
        let names: Vec<String> = out.iter().map(|w| w.name.clone()).collect();
        let store = state.store.clone();
        let tenant = tenant.0.clone();
        let latest = futures::stream::iter(names.into_iter().map(move |name| {
            let filter = dagr_store::RunFilter {
                tenant: tenant.clone(),
                workflow: Some(name),
                limit: runs,
                ..Default::default()
            };
            let store = store.clone();
            async move { store.list_runs(&filter).await }
        }))
        .buffered(8)
        .collect::<Vec<_>>()
        .await;
        for (summary, rows) in out.iter_mut().zip(latest) {
            summary.last_runs = rows?
                .iter()
                .map(|r| RunBrief {
                    id: r.id.clone(),
                    state: r.state.as_str().into(),
                    logical_time: time(r.logical_time),
                })
                .collect();
        }
    }
    ok(out)
}

/// The next cycle of a stored definition's schedule after `now`, if any.
fn next_cycle(schedule: &Value, now: chrono::DateTime<Utc>) -> Option<String> {
    let spec: dagr_core::definition::ScheduleSpec = serde_json::from_value(schedule.clone()).ok()?;
    let schedule = dagr_core::schedule::Schedule::new(&spec).ok()?;
    schedule.next_after(now).map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
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
pub(crate) async fn live_workflow(state: &ApiState, tenant: &str, name: &str) -> ApiResult<dagr_store::WorkflowRow> {
    state
        .store
        .get_workflow(tenant, name)
        .await?
        .filter(|w| !w.deleted)
        .ok_or_else(|| AppError::NotFound(format!("there is no workflow `{name}`")))
}

pub(crate) async fn stored_version(
    state: &ApiState,
    tenant: &str,
    name: &str,
    v: i64,
) -> ApiResult<dagr_store::VersionRow> {
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
