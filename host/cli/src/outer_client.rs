//! The outer DAG's client verbs: `dagr lineage`, `dagr why`,
//! `dagr schedule pause|resume`.

use std::process::ExitCode;

use dagr_protocol::api::{LineageView, RunUpstreamView, ScheduleStateView};

use crate::client::Api;

/// `dagr lineage NAME [--depth N]`: the workflows around one, upstream
/// (negative levels) and downstream (positive), and the edges between them.
pub async fn lineage(api: &Api, workflow: &str, depth: u32) -> anyhow::Result<ExitCode> {
    let view: LineageView =
        api.json(api.get(&["v1", "workflows", workflow, "lineage"]).query(&[("depth", depth.to_string())])).await?;
    let mut nodes = view.nodes.clone();
    nodes.sort_by_key(|n| (n.level, n.name.clone()));
    for node in &nodes {
        let role = match node.level {
            0 => "this workflow".to_owned(),
            l if l < 0 => format!("upstream, {} away", -l),
            l => format!("downstream, {l} away"),
        };
        let schedule = node.schedule.as_deref().map(|c| format!(" [{c}]")).unwrap_or_default();
        println!("{:>4}  {}{schedule}  ({role})", node.level, node.name);
    }
    if !view.edges.is_empty() {
        println!();
    }
    for e in &view.edges {
        let what = match (e.kind.as_str(), &e.task) {
            ("child", _) => "runs".to_owned(),
            (_, Some(task)) => format!("waits for task {task} of"),
            _ => "waits for".to_owned(),
        };
        let past = if e.past { " (earlier cycles)" } else { "" };
        println!("{} {what} {}{past}", e.from, e.to);
    }
    Ok(ExitCode::SUCCESS)
}

/// `dagr why RUN`: what a run waits for, instance by instance.
pub async fn why(api: &Api, run: &str) -> anyhow::Result<ExitCode> {
    let view: RunUpstreamView = api.json(api.get(&["v1", "runs", run, "upstream"])).await?;
    if view.dependencies.is_empty() {
        println!("run {run} ({}) depends on no other workflow", view.state);
        return Ok(ExitCode::SUCCESS);
    }
    println!("run {run} is {}; its upstream is {}", view.state, view.standing);
    for dep in &view.dependencies {
        let who = dep.task.as_deref().map(|t| format!("task {t}: ")).unwrap_or_default();
        let what = dep.upstream_task.as_deref().map(|t| format!(" (task {t})")).unwrap_or_default();
        let cycles = dep.cycles.as_deref().map(|c| format!(", every cycle of the {c}")).unwrap_or_default();
        println!("  {who}{}{what}, offset {}{cycles}: {}", dep.workflow, dep.offset, dep.standing);
        for wait in &dep.waits {
            let at = wait.logical_time.as_deref().unwrap_or("(any time in the period)");
            let id = wait.run_id.as_deref().map(|r| format!(" run {r}")).unwrap_or_default();
            println!("    {at}{id}: {}", wait.state);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `dagr schedule pause|resume NAME`.
pub async fn schedule(api: &Api, workflow: &str, pause: bool) -> anyhow::Result<ExitCode> {
    let verb = if pause { "pause" } else { "resume" };
    let view: ScheduleStateView = api.json(api.post(&["v1", "workflows", workflow, "schedule", verb])).await?;
    let state = if view.paused { "offline" } else { "online (from now on)" };
    println!("the schedule of {} is {state}", view.workflow);
    Ok(ExitCode::SUCCESS)
}
