//! What a worker gets for one attempt: the plugin resolved, params
//! rendered, inputs gathered, limits set.

use chrono::{DateTime, TimeZone, Utc};
use dagr_core::template::{RenderContext, Template};
use dagr_protocol::plugins::PluginDirectory;
use dagr_protocol::tenancy::TenantLimits;
use dagr_protocol::wire::{AttemptKey, AttemptSpec, FailureKind, PluginSpec};
use serde_json::{Map, Value};

use crate::engine::runs::ActiveRun;
use crate::engine::state::Settings;

/// The spec of attempt `attempt` of `task`, or why the task cannot run.
pub(crate) fn build_spec(
    run: &ActiveRun,
    task: usize,
    attempt: u32,
    plugins: &dyn PluginDirectory,
    settings: &Settings,
    limits: Option<&TenantLimits>,
) -> Result<AttemptSpec, (FailureKind, String)> {
    let workflow = run.machine.workflow();
    let t = &workflow.tasks[task];
    let plugin = plugins
        .resolve(&run.row.tenant, &t.plugin.name, t.plugin.version.as_deref())
        .map_err(|message| (FailureKind::PluginUnavailable, message))?;
    let inputs = task_inputs(run, task);
    let logical_time = logical_time_of(run);
    let params = render_context(run, task, &inputs, settings.max_params_bytes, |context| t.params.render_json(context))
        .map_err(|p| (FailureKind::BadParams, format!("params{}: {}", p.location, p.message)))?;
    let deadline_ms = {
        let asked = t.timeout.unwrap_or(settings.default_timeout).as_millis() as u64;
        match limits.and_then(|l| l.max_duration_ms) {
            Some(max) if t.timeout.is_some() && asked > max => {
                return Err(over_limit(run, "max_duration_ms", format!("a timeout of {asked} ms"), max));
            }
            Some(max) => asked.min(max),
            None => asked,
        }
    };
    let memory_bytes = {
        let asked = t.memory.unwrap_or(settings.default_memory).min(settings.max_memory);
        match limits.and_then(|l| l.max_memory) {
            Some(max) if t.memory.is_some() && asked > max => {
                return Err(over_limit(run, "max_memory", format!("{asked} bytes of memory"), max));
            }
            Some(max) => asked.min(max),
            None => asked,
        }
    };
    // A task's hosts stay within its tenant's allowlist, even if the
    // tenant's list shrank after the workflow was applied.
    if let Some(l) = limits
        && let Some(host) =
            t.allow_hosts.iter().find(|h| !l.allow_hosts.iter().any(|by| dagr_core::definition::host_covered(h, by)))
    {
        return Err((
            FailureKind::TenantLimit,
            format!(
                "the task may not reach `{host}`: it is outside tenant `{}`'s network allowlist (limit allow_hosts: {:?})",
                run.row.tenant, l.allow_hosts
            ),
        ));
    }
    Ok(AttemptSpec {
        key: AttemptKey { run_id: run.row.id.clone(), task: task as u32, number: attempt },
        epoch: run.row.epoch,
        master: settings.node_id.clone(),
        tenant: run.row.tenant.clone(),
        workflow: run.row.workflow.clone(),
        task_name: t.name.clone(),
        plugin: PluginSpec { name: plugin.name, version: plugin.version, sha256: plugin.sha256 },
        params,
        inputs: Value::Object(inputs).to_string(),
        logical_time: logical_time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        idempotency_key: format!("{}/{}", run.row.id, t.name),
        priority: t.priority,
        grade: workflow.spec.grade,
        deadline_ms,
        memory_bytes,
        max_output_bytes: settings.max_output_bytes,
        max_log_bytes: settings.max_log_bytes,
        allow_hosts: t.allow_hosts.clone(),
        scratch_bytes: limits.and_then(|l| l.scratch_bytes),
        // Set by the shell as it dispatches, if traces are exported.
        trace: None,
        // Set when the worker is chosen.
        worker_lease: None,
    })
}

/// A task's inputs: the outputs of its upstream tasks, by name.
pub(crate) fn task_inputs(run: &ActiveRun, task: usize) -> Map<String, Value> {
    let workflow = run.machine.workflow();
    let mut inputs = Map::new();
    for &dep in &workflow.tasks[task].deps {
        if let Some(output) = run.outputs.get(&dep) {
            let value = serde_json::from_str(output).unwrap_or(Value::Null);
            inputs.insert(workflow.tasks[dep].name.clone(), value);
        }
    }
    inputs
}

fn logical_time_of(run: &ActiveRun) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(run.row.logical_time).single().unwrap_or_default()
}

/// Renders one of task `task`'s templates (params, condition, switch)
/// against its run.
pub(crate) fn render(
    run: &ActiveRun,
    task: usize,
    template: &Template,
    inputs: &Map<String, Value>,
    max_bytes: usize,
) -> Result<Value, dagr_core::template::Problem> {
    render_context(run, task, inputs, max_bytes, |context| template.render(context))
}

/// Renders with task `task`'s context in its run.
fn render_context<T>(
    run: &ActiveRun,
    task: usize,
    inputs: &Map<String, Value>,
    max_bytes: usize,
    render: impl FnOnce(&RenderContext<'_>) -> T,
) -> T {
    let context = RenderContext {
        params: &run.params,
        inputs,
        logical_time: logical_time_of(run),
        timezone: run.timezone,
        run_id: &run.row.id,
        workflow: &run.row.workflow,
        task: &run.machine.workflow().tasks[task].name,
        tenant: &run.row.tenant,
        max_bytes,
    };
    render(&context)
}

/// The failure of a task that asks for more than its tenant's `limit`.
fn over_limit(run: &ActiveRun, limit: &str, asked: String, max: u64) -> (FailureKind, String) {
    (
        FailureKind::TenantLimit,
        format!("the task asks for {asked}, above tenant `{}`'s limit {limit} = {max}", run.row.tenant),
    )
}
