//! The handlers shared by the API's modules, the system's and the runs':
//! triggering, listing, actions (commands for the engine), events and logs.
//! Each one is declared for OpenAPI next to its code. Workflows, backfills
//! and jobs have their own modules (`workflows`, `backfills`, `jobs`); a
//! run's tasks are in `tasks`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeZone, Utc};
use dagr_core::Workflow;
use dagr_protocol::api::*;
use dagr_protocol::commands::Command;
use dagr_protocol::now_ms;
use dagr_protocol::plugins::stored_workflow;
use dagr_store::{EncodedCommand, NewCommand, NewRun, RunFilter, RunKind, RunOrigin, RunRow};
use serde::Deserialize;
use serde_json::json;

pub(crate) use crate::auth::audit;
use crate::auth::{Caller, run_audit};
use crate::error::{ApiResult, AppError};
use crate::extract::{OptionalJson, Path, Query};
use crate::tasks::find_task;
use crate::views::{run_summary, time};
use crate::workflows::{live_workflow, stored_version};
use crate::{ApiState, Tenant};

pub(crate) type Answer<T> = ApiResult<(StatusCode, axum::Json<T>)>;

pub(crate) fn ok<T>(value: T) -> Answer<T> {
    Ok((StatusCode::OK, axum::Json(value)))
}

pub(crate) fn created<T>(value: T) -> Answer<T> {
    Ok((StatusCode::CREATED, axum::Json(value)))
}

// System ----------------------------------------------------------------------

/// Liveness: answers while the server runs.
#[utoipa::path(get, path = "/healthz", tag = "system", responses((status = 200, body = Health)))]
pub async fn healthz() -> axum::Json<Health> {
    axum::Json(Health { status: "ok".into(), version: env!("CARGO_PKG_VERSION").into(), starting: None })
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

/// A new run of `workflow`, created now.
pub(crate) fn new_run(workflow: &Workflow, origin: RunOrigin) -> NewRun {
    NewRun::new(workflow, origin, now_ms())
}

/// The command that admits a new run.
pub(crate) fn admit() -> Option<EncodedCommand> {
    Some(encoded(&Command::Admit))
}

pub(crate) fn encoded(command: &Command) -> EncodedCommand {
    EncodedCommand::new(command.kind(), command.payload())
}

/// The latest version of a workflow, validated: from the cache when it was
/// validated before, else fetched, parsed and validated (and kept).
pub(crate) async fn latest_workflow(state: &ApiState, tenant: &str, name: &str) -> ApiResult<(i64, Arc<Workflow>)> {
    let v = live_workflow(state, tenant, name).await?.latest_version;
    Ok((v, validated_version(state, tenant, name, v).await?))
}

/// Version `v` of a workflow, validated: from the cache, else fetched,
/// parsed and validated (a large one on a blocking thread) and kept.
pub(crate) async fn validated_version(state: &ApiState, tenant: &str, name: &str, v: i64) -> ApiResult<Arc<Workflow>> {
    if let Some(workflow) = state.versions.get(tenant, name, v) {
        return Ok(workflow);
    }
    let workflow = Arc::new(stored_definition(stored_version(state, tenant, name, v).await?.spec).await?);
    state.versions.insert(tenant, name, v, workflow.clone());
    Ok(workflow)
}

/// A stored definition read back (see [`stored_workflow`]), a large one on a
/// blocking thread.
pub(crate) async fn stored_definition(text: String) -> ApiResult<Workflow> {
    crate::extract::off_runtime(text.len(), move || {
        stored_workflow(&text).map_err(|e| AppError::internal(format!("stored definition: {e}")))
    })
    .await
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
    let limits = crate::admin::check_run_rate(&state, &tenant.0).await?;
    let run = new_run(
        &workflow,
        RunOrigin {
            tenant: tenant.0.clone(),
            version: Some(version),
            kind: RunKind::Manual,
            logical_time,
            params,
            spec: None,
            backfill_id: None,
            parent: None,
            tenant_capped: crate::admin::capped(limits.as_ref()),
        },
    );
    let summary = run_summary(&run.run);
    // The run's trace starts here.
    let span = tracing::info_span!("trigger", run = %summary.id, workflow = %name, tenant = %tenant.0);
    dagr_telemetry::in_run(&span, &summary.id);
    // Recorded with the run: one transaction, not two.
    let entry =
        run_audit(&caller, &tenant.0, "run.trigger", &summary.id, &json!({"workflow": name, "version": version}));
    tracing::Instrument::instrument(state.store.create_runs_audited(vec![run], admit(), entry), span).await?;
    state.control.wake();
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
    /// Only runs whose logical time is at or after this: RFC 3339,
    /// `YYYY-MM-DDTHH:MM:SS` (UTC) or a date.
    #[param(format = DateTime)]
    pub from: Option<String>,
    /// Only runs whose logical time is at or before this (as `from`).
    #[param(format = DateTime)]
    pub to: Option<String>,
    /// `true`: only archived runs; `false`: only hot ones; default: both.
    pub archived: Option<bool>,
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
    /// Only runs whose logical time is at or after this: RFC 3339,
    /// `YYYY-MM-DDTHH:MM:SS` (UTC) or a date.
    #[param(format = DateTime)]
    pub from: Option<String>,
    /// Only runs whose logical time is at or before this (as `from`).
    #[param(format = DateTime)]
    pub to: Option<String>,
    /// `true`: only archived runs; `false`: only hot ones; default: both.
    pub archived: Option<bool>,
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
    let logical = |text: &Option<String>, at: &str| match text {
        Some(t) => parse_time(t).map(|t| Some(t.timestamp_millis())).map_err(|e| AppError::bad_at("bad_query", at, e)),
        None => Ok(None),
    };
    let filter = RunFilter {
        tenant: tenant.into(),
        workflow: q.workflow,
        state: q.state,
        kind,
        backfill_id: q.backfill,
        logical_from: logical(&q.from, "?from")?,
        logical_to: logical(&q.to, "?to")?,
        before,
        limit,
    };
    let hot = match q.archived {
        Some(true) => Vec::new(),
        _ => state.store.list_runs(&filter).await?,
    };
    // Cold runs only where a partition may hold one that belongs on this
    // page: a full page of hot runs newer than every partition needs none.
    let oldest_hot = hot.last().filter(|_| hot.len() as i64 == limit).map(|r| r.created_at);
    let cold = match q.archived {
        Some(false) => Vec::new(),
        _ => {
            let partitions = state.store.partitions(Some(tenant)).await?;
            let reachable = partitions
                .iter()
                .any(|p| p.runs > 0 && p.max_created.is_some_and(|at| oldest_hot.is_none_or(|h| at >= h)));
            if reachable { state.store.list_archived_runs(&filter).await? } else { Vec::new() }
        }
    };
    let hot_ids: std::collections::HashSet<&str> = hot.iter().map(|r| r.id.as_str()).collect();
    let mut rows: Vec<(&RunRow, bool)> = hot.iter().map(|r| (r, false)).collect();
    rows.extend(cold.iter().filter(|r| !hot_ids.contains(r.id.as_str())).map(|r| (r, true)));
    rows.sort_by(|(a, _), (b, _)| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
    rows.truncate(limit as usize);
    let next =
        (rows.len() as i64 == limit).then(|| rows.last().map(|(r, _)| format!("{}_{}", r.created_at, r.id))).flatten();
    let runs = rows.iter().map(|(r, archived)| RunSummary { archived: *archived, ..run_summary(r) }).collect();
    ok(RunList { runs, next })
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
        from: q.from,
        to: q.to,
        archived: q.archived,
        limit: q.limit,
        before: q.before,
    };
    runs_page(&state, &tenant.0, q).await
}

/// A run of the tenant, hot or archived.
pub(crate) async fn find_run(state: &ApiState, tenant: &str, id: &str) -> ApiResult<RunRow> {
    Ok(locate_run(state, tenant, id).await?.0)
}

/// A run of the tenant, and whether it is archived (in cold storage).
pub(crate) async fn locate_run(state: &ApiState, tenant: &str, id: &str) -> ApiResult<(RunRow, bool)> {
    if let Some(run) = state.store.get_run(id).await?.filter(|r| r.tenant == tenant) {
        return Ok((run, false));
    }
    match state.store.archived_run(tenant, id).await? {
        Some((run, _)) => Ok((run, true)),
        None => Err(AppError::NotFound(format!("there is no run `{id}`"))),
    }
}

/// Writes a command for the engine and waits (briefly) for its outcome.
/// An archived run is restored into the hot tables first: the engine
/// works on hot runs only.
async fn act(state: &ApiState, caller: &Caller, tenant: &str, run_id: &str, command: Command) -> Answer<ActionResult> {
    let (run, archived) = locate_run(state, tenant, run_id).await?;
    if archived {
        state.store.restore_run(run_id, now_ms()).await?;
    }
    let id = state
        .store
        .insert_command(NewCommand {
            tenant: tenant.into(),
            run_id: run_id.into(),
            slot: run.slot,
            command: encoded(&command),
            created_at: now_ms(),
            by: None,
        })
        .await?;
    state.control.wake();
    let outcome = state.control.wait_command(id, state.config.action_wait).await;
    let run = find_run(state, tenant, run_id).await?;
    if outcome.as_ref().is_none_or(|o| o.ok) {
        let detail = serde_json::from_str(&command.payload()).unwrap_or_else(|_| json!({}));
        audit(state, caller, tenant, command.audit_action(), run_id, detail).await;
    }
    match outcome {
        Some(o) if o.ok => ok(ActionResult { ok: true, message: o.message, run: run_summary(&run) }),
        Some(o) => Err(AppError::Conflict(o.message)),
        None => Ok((
            StatusCode::ACCEPTED,
            axum::Json(ActionResult {
                ok: false,
                message: format!("{} was accepted; the engine has not applied it yet", command.kind()),
                run: run_summary(&run),
            }),
        )),
    }
}

macro_rules! run_action {
    ($fn:ident, $path:literal, $command:expr, $doc:literal) => {
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
            act(&state, &caller, &tenant.0, &id, $command).await
        }
    };
}

run_action!(
    kill_run,
    "/v1/runs/{id}/kill",
    Command::Kill,
    "Kills a run: running attempts are cancelled, nothing else starts."
);
run_action!(pause_run, "/v1/runs/{id}/pause", Command::Pause, "Pauses a run: no new task starts; running ones finish.");
run_action!(resume_run, "/v1/runs/{id}/resume", Command::Resume, "Resumes a paused run.");
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct RerunQuery {
    /// Also re-flush the runs of other workflows that this run released,
    /// transitively: each runs again once its upstream instances are done
    /// again (Buffalo's data re-flush).
    pub downstream_workflows: Option<bool>,
}

/// Reruns a run: a failed or killed one from its failures (failed,
/// upstream-failed and killed tasks and what depends on them); a
/// succeeded one from scratch (a re-flush). With `downstream_workflows`,
/// the runs it released are re-flushed too.
#[utoipa::path(
    post, path = "/v1/runs/{id}/rerun", tag = "runs", params(("id" = String, Path), RerunQuery),
    responses(
        (status = 200, body = ActionResult),
        (status = 404, body = ApiError),
        (status = 409, body = ApiError, description = "Not possible in the run's state"),
        (status = 202, body = ActionResult, description = "Accepted, not yet applied (`ok` is false)"),
    )
)]
pub async fn rerun_run(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<RerunQuery>,
) -> Answer<ActionResult> {
    let run = find_run(&state, &tenant.0, &id).await?;
    let with_downstream = q.downstream_workflows.unwrap_or(false);
    // The engine re-flushes the released runs in the transaction that takes
    // this one out of its end state (never before: they would find it
    // still finished and go at once).
    let command = match run.state {
        dagr_store::RunState::Succeeded => Command::Reflush { downstream: with_downstream },
        _ => Command::RerunFailed { downstream: with_downstream },
    };
    let downstream = if with_downstream { crate::outer::released_closure(&state, &id).await? } else { Vec::new() };
    let (status, axum::Json(mut result)) = act(&state, &caller, &tenant.0, &id, command).await?;
    if !downstream.is_empty() {
        result.message = format!("{}; {} downstream runs re-flushed", result.message, downstream.len());
        audit(&state, &caller, &tenant.0, "run.reflush_downstream", &id, json!({"runs": downstream})).await;
    }
    Ok((status, axum::Json(result)))
}
run_action!(
    mark_run_failed,
    "/v1/runs/{id}/mark-failed",
    Command::MarkFailed,
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
    ok(events.into_iter().map(crate::events::view).collect())
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
    act(&state, &caller, &tenant.0, &id, Command::RerunTask { task, downstream: req.downstream }).await
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
    act(&state, &caller, &tenant.0, &id, Command::ForceSuccess { task }).await
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
                let attempt_over = match store.attempts(&id, Some(idx)).await {
                    Ok(attempts) => attempts
                        .iter()
                        .find(|a| a.number == attempt)
                        .map(|a| a.state != dagr_store::AttemptState::Running),
                    Err(_) => Some(true),
                };
                let task_row = store.run_task(&id, &task).await;
                let task_waiting = match &task_row {
                    Ok(Some(t)) => t.attempts < attempt && !t.state.is_terminal(),
                    _ => false,
                };
                // An attempt that never started ends with its task: a task
                // skipped, failed upstream or killed before it ran.
                let finished =
                    attempt_over.unwrap_or_else(|| !matches!(&task_row, Ok(Some(t)) if !t.state.is_terminal()));
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
