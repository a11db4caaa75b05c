//! The outer DAG over HTTP: the loop check at apply, lineage, what a run
//! waits for, schedules taken offline, re-flushes.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use axum::extract::State;
use chrono::{DateTime, TimeZone, Utc};
use dagr_core::Workflow;
use dagr_core::control::TaskKind;
use dagr_core::outer::{Edge, Standing, Upstream, UpstreamRun, evaluate, expected, find_loop};
use dagr_protocol::api::{
    DependencyView, LineageEdge, LineageNode, LineageView, RunUpstreamView, ScheduleStateView, WaitView,
};
use dagr_protocol::now_ms;
use dagr_store::{EdgeRow, RunRow};
use serde::Deserialize;
use serde_json::json;

use crate::auth::Caller;
use crate::error::{ApiResult, AppError};
use crate::extract::{Path, Query};
use crate::handlers::{Answer, audit, find_run, latest_workflow, ok};
use crate::tasks::run_workflow;
use crate::workflows::live_workflow;
use crate::{ApiState, Tenant};

/// Cycles one dependency may name at most.
const MAX_INSTANCES: usize = 10_000;
/// Runs one re-flush reaches at most.
const MAX_REFLUSH: usize = 10_000;
/// Workflows the loop check walks at most (a tenant's whole graph is rarely
/// reachable from one workflow; past this, the check stops looking).
const MAX_GRAPH: usize = 100_000;

/// The edges a workflow adds to its tenant's graph.
pub(crate) fn edges_of(tenant: &str, workflow: &Workflow) -> Vec<EdgeRow> {
    let name = workflow.name();
    let upstream = |u: &Upstream| EdgeRow {
        tenant: tenant.into(),
        workflow: name.into(),
        upstream: u.workflow.clone(),
        task: u.task.clone(),
        past: u.strictly_past(),
        kind: "upstream".into(),
    };
    let mut rows: Vec<EdgeRow> =
        workflow.upstream.iter().chain(workflow.tasks.iter().flat_map(|t| &t.upstream)).map(upstream).collect();
    for task in &workflow.tasks {
        if let TaskKind::Workflow { name: child } = &task.kind {
            rows.push(EdgeRow {
                tenant: tenant.into(),
                workflow: name.into(),
                upstream: child.clone(),
                task: None,
                past: false,
                kind: "child".into(),
            });
        }
    }
    rows.sort();
    rows.dedup();
    rows
}

/// Refuses a definition that would close a loop in its tenant's workflow
/// graph (A waits for B waits for A, or A runs B which runs A), naming it.
/// Returns the workflow's edges, to record once it is applied.
pub(crate) async fn check_graph(state: &ApiState, tenant: &str, workflow: &Workflow) -> ApiResult<Vec<EdgeRow>> {
    let rows = edges_of(tenant, workflow);
    let name = workflow.name();
    // A child run of a workflow that does not exist could only fail; an
    // upstream that does not exist yet may simply be applied later (its
    // instances are waited for, or skipped with `missing: skip`).
    for (i, task) in workflow.tasks.iter().enumerate() {
        if let TaskKind::Workflow { name: child } = &task.kind
            && child != name
            && state.store.get_workflow(tenant, child).await?.is_none_or(|w| w.deleted)
        {
            return Err(AppError::bad_at(
                "invalid_definition",
                format!("tasks[{i}].workflow"),
                format!("there is no workflow `{child}` to run as a child (apply it first)"),
            ));
        }
    }
    // A loop through this workflow means: following the edges that can
    // close one (not into the past) from what it needs, it is reached.
    // Walk them level by level (one query per level), never the whole graph.
    let mut graph: Vec<Edge> =
        rows.iter().map(|e| Edge { from: e.workflow.clone(), to: e.upstream.clone(), past: e.past }).collect();
    // Nothing else needs it (a new workflow, applied in dependency order):
    // no loop can pass through it but one of its own edges into itself. The
    // walk below reads what its upstream reaches, which in a big outer DAG
    // is most of it, for every workflow applied.
    const LOOK: i64 = 1000;
    let into = state.store.edges_to(tenant, name, LOOK).await?;
    let needed = into.len() as i64 == LOOK || into.iter().any(|e| e.workflow != name && !e.past);
    if !needed && !rows.iter().any(|e| e.upstream == name && !e.past) {
        return Ok(rows);
    }
    let mut seen: BTreeSet<String> = BTreeSet::from([name.to_owned()]);
    let mut frontier: Vec<String> =
        rows.iter().filter(|e| !e.past).map(|e| e.upstream.clone()).filter(|u| seen.insert(u.clone())).collect();
    while !frontier.is_empty() && seen.len() <= MAX_GRAPH {
        let found = state.store.edges_from(tenant, &frontier).await?;
        frontier = Vec::new();
        for e in found.into_iter().filter(|e| e.workflow != name && !e.past) {
            if seen.insert(e.upstream.clone()) {
                frontier.push(e.upstream.clone());
            }
            graph.push(Edge { from: e.workflow, to: e.upstream, past: false });
        }
    }
    if let Some(cycle) = find_loop(&graph) {
        // Where the loop leaves this workflow: a child task, else its
        // upstream list.
        let next = cycle.iter().position(|w| w == name).and_then(|i| cycle.get(i + 1));
        let location = workflow
            .tasks
            .iter()
            .position(|t| matches!(&t.kind, TaskKind::Workflow { name: child } if next == Some(child)))
            .map_or_else(|| "upstream".to_owned(), |i| format!("tasks[{i}].workflow"));
        return Err(AppError::bad_at(
            "invalid_definition",
            location,
            format!(
                "workflows would wait for each other in a loop: {} (a dependency on an earlier cycle, \
                 such as `offset: -1d`, does not close a loop; a workflow cannot run itself as a child)",
                cycle.join(" -> ")
            ),
        ));
    }
    Ok(rows)
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct LineageQuery {
    /// How many edges away from the workflow to go, up and down (default 1, at most 32).
    pub depth: Option<u32>,
}

/// The workflows a workflow depends on and those that depend on it, with
/// the edges between them.
#[utoipa::path(
    get, path = "/v1/workflows/{name}/lineage", tag = "workflows", params(("name" = String, Path), LineageQuery),
    responses((status = 200, body = LineageView), (status = 404, body = dagr_protocol::api::ApiError))
)]
pub async fn lineage(
    State(state): State<ApiState>,
    tenant: Tenant,
    Path(name): Path<String>,
    Query(q): Query<LineageQuery>,
) -> Answer<LineageView> {
    live_workflow(&state, &tenant.0, &name).await?;
    let depth = q.depth.unwrap_or(1).min(32) as i32;
    let edges = state.store.workflow_edges(&tenant.0).await?;
    let mut up: HashMap<&str, Vec<&EdgeRow>> = HashMap::new();
    let mut down: HashMap<&str, Vec<&EdgeRow>> = HashMap::new();
    for e in &edges {
        up.entry(e.workflow.as_str()).or_default().push(e);
        down.entry(e.upstream.as_str()).or_default().push(e);
    }
    let mut nodes: BTreeMap<String, i32> = BTreeMap::from([(name.clone(), 0)]);
    let mut chosen: BTreeSet<&EdgeRow> = BTreeSet::new();
    for (index, sign) in [(&up, -1), (&down, 1)] {
        let mut queue: VecDeque<(&str, i32)> = VecDeque::from([(name.as_str(), 0)]);
        while let Some((at, d)) = queue.pop_front() {
            if d.abs() >= depth {
                continue;
            }
            for e in index.get(at).into_iter().flatten() {
                chosen.insert(e);
                let next = if sign < 0 { e.upstream.as_str() } else { e.workflow.as_str() };
                if !nodes.contains_key(next) {
                    nodes.insert(next.to_owned(), d + sign);
                    queue.push_back((next, d + sign));
                }
            }
        }
    }
    let mut out = Vec::new();
    for (node, level) in nodes {
        let schedule = match state.store.get_workflow(&tenant.0, &node).await? {
            Some(row) if !row.deleted => {
                let spec = state.store.get_version(&tenant.0, &node, row.latest_version).await?;
                let spec: serde_json::Value =
                    spec.and_then(|v| serde_json::from_str(&v.spec).ok()).unwrap_or(serde_json::Value::Null);
                spec["schedule"]["cron"].as_str().map(String::from)
            }
            _ => None,
        };
        out.push(LineageNode { name: node, level, schedule });
    }
    ok(LineageView {
        workflow: name,
        nodes: out,
        edges: chosen
            .into_iter()
            .map(|e| LineageEdge {
                from: e.workflow.clone(),
                to: e.upstream.clone(),
                kind: e.kind.clone(),
                task: e.task.clone(),
                past: e.past,
            })
            .collect(),
    })
}

fn time(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default()
}

/// What a run waits for: its dependencies on other workflows' instances
/// (and its tasks'), each judged against the runs there are now.
#[utoipa::path(
    get, path = "/v1/runs/{id}/upstream", tag = "runs", params(("id" = String, Path)),
    responses((status = 200, body = RunUpstreamView), (status = 404, body = dagr_protocol::api::ApiError))
)]
pub async fn run_upstream(
    State(state): State<ApiState>,
    tenant: Tenant,
    Path(id): Path<String>,
) -> Answer<RunUpstreamView> {
    let run = find_run(&state, &tenant.0, &id).await?;
    let Some(workflow) = run_workflow(&state, &run).await else {
        return ok(RunUpstreamView {
            run_id: id,
            state: run.state.as_str().into(),
            standing: "satisfied".into(),
            dependencies: vec![],
        });
    };
    let tz = workflow.schedule.as_ref().map_or(chrono_tz::UTC, |s| s.timezone);
    let mut deps: Vec<(Option<String>, &Upstream)> = workflow.upstream.iter().map(|u| (None, u)).collect();
    for task in &workflow.tasks {
        deps.extend(task.upstream.iter().map(|u| (Some(task.name.clone()), u)));
    }
    let mut views = Vec::new();
    let mut overall = Standing::Satisfied;
    for (task, dep) in deps {
        let view = judge(&state, &run, dep, tz).await?;
        overall = overall.max(view.0);
        let mut v = view.1;
        v.task = task;
        views.push(v);
    }
    let standing = match overall {
        Standing::Satisfied => "satisfied",
        Standing::Waiting => "waiting",
        Standing::Failed => "failed",
    };
    ok(RunUpstreamView { run_id: id, state: run.state.as_str().into(), standing: standing.into(), dependencies: views })
}

async fn judge(
    state: &ApiState,
    run: &RunRow,
    dep: &Upstream,
    tz: chrono_tz::Tz,
) -> ApiResult<(Standing, DependencyView)> {
    let upstream = latest_workflow(state, &run.tenant, &dep.workflow).await.ok().map(|(_, w)| w);
    let schedule = upstream.as_ref().and_then(|w| w.schedule.as_ref());
    let expectation = expected(dep, time(run.logical_time), tz, schedule, MAX_INSTANCES)
        .map_err(|m| AppError::bad_at("invalid_upstream", "upstream", m))?;
    let runs = match expectation.span() {
        Some((from, to)) => state
            .store
            .runs_in_range(
                &run.tenant,
                &dep.workflow,
                from.timestamp_millis(),
                to.timestamp_millis(),
                dep.task.as_deref(),
            )
            .await?
            .into_iter()
            .map(|r| UpstreamRun {
                id: r.id,
                logical_time: time(r.logical_time),
                state: r.state,
                task_state: r.task_state,
            })
            .collect(),
        None => Vec::new(),
    };
    let (standing, waits) = evaluate(dep, &expectation, &runs);
    let view = DependencyView {
        workflow: dep.workflow.clone(),
        task: None,
        upstream_task: dep.task.clone(),
        offset: dep.offset.to_string(),
        cycles: dep.cycles.map(|p| p.as_str().to_owned()),
        standing: format!("{standing:?}").to_lowercase(),
        waits: waits
            .into_iter()
            .map(|w| WaitView {
                logical_time: w.logical_time.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
                run_id: w.run_id,
                state: w.state,
            })
            .collect(),
    };
    Ok((standing, view))
}

/// Takes a workflow's schedule offline: no cycle is made until it is
/// resumed (the workflow stays; runs can still be triggered).
#[utoipa::path(
    post, path = "/v1/workflows/{name}/schedule/pause", tag = "workflows", params(("name" = String, Path)),
    responses((status = 200, body = ScheduleStateView), (status = 404, body = dagr_protocol::api::ApiError))
)]
pub async fn pause_schedule(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Path(name): Path<String>,
) -> Answer<ScheduleStateView> {
    set_paused(state, tenant, caller, name, true).await
}

/// Brings a workflow's schedule back online, from now on (the cycles
/// missed while it was offline are not made; backfill them if needed).
#[utoipa::path(
    post, path = "/v1/workflows/{name}/schedule/resume", tag = "workflows", params(("name" = String, Path)),
    responses((status = 200, body = ScheduleStateView), (status = 404, body = dagr_protocol::api::ApiError))
)]
pub async fn resume_schedule(
    State(state): State<ApiState>,
    tenant: Tenant,
    caller: Caller,
    Path(name): Path<String>,
) -> Answer<ScheduleStateView> {
    set_paused(state, tenant, caller, name, false).await
}

async fn set_paused(
    state: ApiState,
    tenant: Tenant,
    caller: Caller,
    name: String,
    paused: bool,
) -> Answer<ScheduleStateView> {
    live_workflow(&state, &tenant.0, &name).await?;
    if !state.store.set_schedule_paused(&tenant.0, &name, paused, now_ms()).await? {
        return Err(AppError::NotFound(format!("there is no workflow `{name}`")));
    }
    state.control.workflow_changed(&tenant.0, &name);
    let action = if paused { "schedule.pause" } else { "schedule.resume" };
    audit(&state, &caller, &tenant.0, action, &name, json!({})).await;
    ok(ScheduleStateView { workflow: name, paused })
}

/// Every run a run released, transitively (re-flush targets), oldest first.
pub(crate) async fn released_closure(state: &ApiState, run: &str) -> ApiResult<Vec<String>> {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut queue: VecDeque<String> = VecDeque::from([run.to_owned()]);
    let mut out = Vec::new();
    while let Some(at) = queue.pop_front() {
        for next in state.store.released_by(&at).await? {
            if seen.insert(next.clone()) {
                if seen.len() > MAX_REFLUSH {
                    return Err(AppError::bad_at(
                        "too_many_runs",
                        "downstream_workflows",
                        format!("the re-flush would reach more than {MAX_REFLUSH} runs; rerun fewer at a time"),
                    ));
                }
                out.push(next.clone());
                queue.push_back(next);
            }
        }
    }
    Ok(out)
}
