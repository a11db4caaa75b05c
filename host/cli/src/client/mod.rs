//! The client verbs (`dagr apply`, `run`, `runs`, `status`, `logs`, …): each
//! one a few HTTP requests to a dagr server.
//!
//! [`Api`] sends every request and turns error answers into [`ApiFailure`]
//! (printed as `error: MESSAGE (at LOCATION)`) and a refused connection into
//! a hint to start `dagr serve`. [`table`] lays out every listing.
//!
//! [`connect`] decides, once per process, the server and the token every
//! [`Api`] uses: `--server`/`DAGR_SERVER` and `--token`/`DAGR_TOKEN` first,
//! then the `--profile` of `~/.config/dagr/config.toml`, then (for the
//! token) `./dagr-data/token`, which `dagr serve` writes at its first start.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{IsTerminal as _, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context as _, bail};
use chrono::{DateTime, Utc};
use clap::Subcommand;
use dagr_protocol::api::{
    ActionResult, ApiError, Applied, BackfillRequest, BackfillView, JobRequest, JobResult, LogLineView,
    RerunTaskRequest, RunDetail, RunList, RunSummary, TaskView, TriggerRequest, WorkflowSummary,
};
use futures::StreamExt as _;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use reqwest::{Method, RequestBuilder, Response, StatusCode, Url};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

mod requests;
mod watch;

pub use requests::*;
pub use watch::*;

/// The verbs that talk to a server.
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Create or update a workflow from its definition (YAML or JSON).
    Apply {
        /// The definition file; `-` reads it from stdin.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: PathBuf,
    },
    /// List the workflows.
    Workflows,
    /// Trigger a run of a workflow.
    Run {
        workflow: String,
        /// A param override, KEY=VALUE (repeatable); VALUE is JSON when it
        /// parses as JSON (numbers, booleans, objects), else a string.
        #[arg(long = "param", value_name = "KEY=VALUE")]
        params: Vec<String>,
        /// The run's logical time (RFC 3339 or YYYY-MM-DD); default now.
        #[arg(long)]
        logical_time: Option<String>,
        /// Show the tasks live until the run ends; exit 0 if it succeeded.
        #[arg(long)]
        wait: bool,
    },
    /// List runs, newest first.
    Runs {
        #[arg(long)]
        workflow: Option<String>,
        /// queued, running, paused, succeeded, failed or killed.
        #[arg(long)]
        state: Option<String>,
        /// Only runs whose logical time is at or after this (RFC 3339 or a date).
        #[arg(long)]
        from: Option<String>,
        /// Only runs whose logical time is at or before this.
        #[arg(long)]
        to: Option<String>,
        /// Only archived runs (`true`) or only hot ones (`false`); default both.
        #[arg(long)]
        archived: Option<bool>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// A run and the state of each of its tasks.
    Status { run: String },
    /// The log of a task's attempt.
    Logs {
        run: String,
        task: String,
        /// Which attempt; default the latest.
        #[arg(long)]
        attempt: Option<i64>,
        /// Keep printing new lines until the attempt ends.
        #[arg(short, long)]
        follow: bool,
    },
    /// Kill a run: running attempts are cancelled.
    Kill { run: String },
    /// Pause a run: no new task starts.
    Pause { run: String },
    /// Resume a paused run.
    Resume { run: String },
    /// Rerun a finished run (from its failures; a succeeded one from
    /// scratch), or one task of it.
    Rerun {
        run: String,
        /// Rerun only this task.
        #[arg(long)]
        task: Option<String>,
        /// With --task: also rerun everything downstream of it.
        #[arg(long, requires = "task")]
        downstream: bool,
        /// Also re-flush the runs of other workflows this run released.
        #[arg(long, conflicts_with = "task")]
        downstream_workflows: bool,
    },
    /// The workflows a workflow depends on and that depend on it.
    Lineage {
        workflow: String,
        /// How many edges away to go, up and down.
        #[arg(long, default_value_t = 1)]
        depth: u32,
    },
    /// What a run waits for: the upstream instances it needs and their states.
    Why { run: String },
    /// The tenant's events (every state change), or with -f followed live.
    Events(crate::events_client::EventsArgs),
    /// The alerts raised for your tenant, newest first, and whether they
    /// went out (rules: POST /v1/alerts).
    Alerts {
        #[arg(long, default_value_t = 20)]
        limit: u32,
    },
    /// Take a workflow's schedule offline or back online.
    Schedule {
        #[command(subcommand)]
        action: ScheduleAction,
    },
    /// Mark a failed task succeeded, so that its downstream proceeds.
    ForceSuccess { run: String, task: String },
    /// Mark a run failed: running attempts are cancelled.
    MarkFailed { run: String },
    /// Create one run per logical time in a range.
    Backfill {
        workflow: String,
        /// First logical time, inclusive: RFC 3339, or a local time or date
        /// in the workflow's time zone (a date from its first instant).
        #[arg(long)]
        from: String,
        /// Last logical time, inclusive (a date includes its whole day).
        #[arg(long)]
        to: String,
        /// Runs at once.
        #[arg(long, default_value_t = 1)]
        parallel: u32,
        #[arg(long = "param", value_name = "KEY=VALUE")]
        params: Vec<String>,
        /// Also run the workflows downstream of this one for every cycle in
        /// the range (re-flushing cycles that have runs), in dependency order.
        #[arg(long)]
        downstream: bool,
    },
    /// Run one plugin as an ad-hoc job and print its output.
    Job {
        plugin: String,
        /// The task's params, JSON.
        #[arg(long, default_value = "{}")]
        params: String,
        /// Print the job's run id and return at once.
        #[arg(long)]
        no_wait: bool,
        /// How long to wait for the job, e.g. 30s, 5m.
        #[arg(long, default_value = "30s")]
        timeout: String,
    },
}

/// `dagr schedule …`.
#[derive(Debug, Subcommand)]
pub enum ScheduleAction {
    /// Take the schedule offline: no cycle is made until it is resumed.
    Pause { workflow: String },
    /// Bring it back online from now on (missed cycles are not made).
    Resume { workflow: String },
}

/// Runs a client verb against `server`. Every failure is printed as
/// `error: …` and exits 1.
pub fn run(server: &str, command: ClientCommand) -> ExitCode {
    finish(block_on(async {
        let api = Api::new(server)?;
        execute(&api, command).await
    }))
}

/// Runs a verb on a runtime of its own.
pub fn block_on<T>(verb: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(verb)
}

/// The exit code of a verb; a failure is printed as `error: …`.
pub fn finish(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        // The reader went away (`dagr runs | head`): nothing to say.
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) => {
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn execute(api: &Api, command: ClientCommand) -> anyhow::Result<ExitCode> {
    match command {
        ClientCommand::Apply { file } => apply(api, &file).await,
        ClientCommand::Workflows => workflows(api).await,
        ClientCommand::Run { workflow, params, logical_time, wait } => {
            let request = TriggerRequest { params: parse_params(&params)?, logical_time };
            let run: RunSummary = api.json(api.post(&["v1", "workflows", &workflow, "runs"]).json(&request)).await?;
            if !wait {
                println!("{}", run.id);
                return Ok(ExitCode::SUCCESS);
            }
            println!("run {} of {} started", run.id, run.workflow);
            watch(api, &run.id).await
        }
        ClientCommand::Runs { workflow, state, from, to, archived, limit } => {
            let mut query = vec![("limit", limit.to_string())];
            query.extend(workflow.map(|w| ("workflow", w)));
            query.extend(state.map(|s| ("state", s)));
            query.extend(from.map(|t| ("from", t)));
            query.extend(to.map(|t| ("to", t)));
            query.extend(archived.map(|a| ("archived", a.to_string())));
            let list: RunList = api.json(api.get(&["v1", "runs"]).query(&query)).await?;
            print_runs(&list.runs);
            Ok(ExitCode::SUCCESS)
        }
        ClientCommand::Status { run } => status(api, &run).await,
        ClientCommand::Logs { run, task, attempt, follow } => logs(api, &run, &task, attempt, follow).await,
        ClientCommand::Kill { run } => action(api, &["v1", "runs", &run, "kill"], None).await,
        ClientCommand::Pause { run } => action(api, &["v1", "runs", &run, "pause"], None).await,
        ClientCommand::Resume { run } => action(api, &["v1", "runs", &run, "resume"], None).await,
        ClientCommand::MarkFailed { run } => action(api, &["v1", "runs", &run, "mark-failed"], None).await,
        ClientCommand::Rerun { run, task: None, downstream_workflows, .. } => {
            let query = [("downstream_workflows", downstream_workflows.to_string())];
            action_with(api, api.post(&["v1", "runs", &run, "rerun"]).query(&query)).await
        }
        ClientCommand::Rerun { run, task: Some(task), downstream, .. } => {
            let body = serde_json::to_value(RerunTaskRequest { downstream })?;
            action(api, &["v1", "runs", &run, "tasks", &task, "rerun"], Some(body)).await
        }
        ClientCommand::ForceSuccess { run, task } => {
            action(api, &["v1", "runs", &run, "tasks", &task, "force-success"], None).await
        }
        ClientCommand::Lineage { workflow, depth } => crate::outer_client::lineage(api, &workflow, depth).await,
        ClientCommand::Why { run } => crate::outer_client::why(api, &run).await,
        ClientCommand::Events(args) => crate::events_client::events(api, args).await,
        ClientCommand::Alerts { limit } => crate::events_client::alerts(api, limit).await,
        ClientCommand::Schedule { action } => match action {
            ScheduleAction::Pause { workflow } => crate::outer_client::schedule(api, &workflow, true).await,
            ScheduleAction::Resume { workflow } => crate::outer_client::schedule(api, &workflow, false).await,
        },
        ClientCommand::Backfill { workflow, from, to, parallel, params, downstream } => {
            let params = parse_params(&params)?;
            let request = BackfillRequest { workflow, from, to, parallel, params, include_downstream: downstream };
            let backfill: BackfillView = api.json(api.post(&["v1", "backfills"]).json(&request)).await?;
            println!(
                "backfill {}: {} runs of {}, {} at a time",
                backfill.id,
                backfill.runs.len(),
                backfill.workflow,
                backfill.parallel
            );
            print_runs(&backfill.runs);
            for time in &backfill.skipped {
                println!("skipped {time}: a run for it exists");
            }
            Ok(ExitCode::SUCCESS)
        }
        ClientCommand::Job { plugin, params, no_wait, timeout } => job(api, plugin, &params, no_wait, &timeout).await,
    }
}

// Verbs -----------------------------------------------------------------------------

async fn apply(api: &Api, file: &PathBuf) -> anyhow::Result<ExitCode> {
    let text = if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).context("cannot read the definition from stdin")?;
        text
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?
    };
    let mut request = api.post(&["v1", "workflows"]).body(text);
    match file.extension().and_then(|e| e.to_str()) {
        Some("json") => request = request.header("content-type", "application/json"),
        Some("yaml" | "yml") => request = request.header("content-type", "application/yaml"),
        _ => {}
    }
    let applied: Applied = api.json(request).await?;
    println!(
        "workflow {} version {} ({})",
        applied.name,
        applied.version,
        if applied.created { "created" } else { "unchanged" }
    );
    if let Some(next) = applied.next_run {
        println!("next run: {next}");
    }
    Ok(ExitCode::SUCCESS)
}

async fn workflows(api: &Api) -> anyhow::Result<ExitCode> {
    let list: Vec<WorkflowSummary> = api.json(api.get(&["v1", "workflows"])).await?;
    let rows = list
        .iter()
        .map(|w| {
            vec![
                w.name.clone(),
                w.latest_version.to_string(),
                w.tasks.to_string(),
                w.schedule.clone().unwrap_or_else(|| "-".into()),
                short_time(&w.updated_at),
                w.description.clone(),
            ]
        })
        .collect();
    print!("{}", table(&["NAME", "VERSION", "TASKS", "SCHEDULE", "UPDATED", "DESCRIPTION"], rows));
    Ok(ExitCode::SUCCESS)
}

fn print_runs(runs: &[RunSummary]) {
    if runs.is_empty() {
        println!("no runs");
        return;
    }
    let rows = runs
        .iter()
        .map(|r| {
            vec![
                r.id.clone(),
                r.workflow.clone(),
                r.kind.clone(),
                if r.archived { format!("{} (archived)", r.state) } else { r.state.clone() },
                short_time(&r.logical_time),
                short_time(&r.created_at),
                span(r.started_at.as_deref(), r.finished_at.as_deref()),
            ]
        })
        .collect();
    print!("{}", table(&["RUN", "WORKFLOW", "KIND", "STATE", "LOGICAL TIME", "CREATED", "DURATION"], rows));
}

async fn status(api: &Api, run: &str) -> anyhow::Result<ExitCode> {
    let detail: RunDetail = api.json(api.get(&["v1", "runs", run])).await?;
    let r = &detail.run;
    println!("run           {}", r.id);
    let version = r.version.map(|v| format!(" version {v}")).unwrap_or_default();
    println!("workflow      {}{version} ({})", r.workflow, r.kind);
    println!("state         {}", r.state);
    if r.archived {
        println!("archived      yes (in cold storage; an action on it restores it)");
    }
    println!("logical time  {}", r.logical_time);
    println!("created       {}", r.created_at);
    if let Some(t) = &r.started_at {
        println!("started       {t}");
    }
    if let Some(t) = &r.finished_at {
        println!("finished      {t} (took {})", span(r.started_at.as_deref(), Some(t)));
    }
    if let Some(b) = &r.backfill_id {
        println!("backfill      {b}");
    }
    if detail.params.as_object().is_some_and(|p| !p.is_empty()) {
        println!("params        {}", detail.params);
    }
    println!();
    let rows = detail
        .tasks
        .iter()
        .map(|t| {
            let mut state = t.state.clone();
            if t.forced {
                state.push_str(" (forced)");
            }
            vec![
                t.name.clone(),
                t.plugin.clone(),
                state,
                t.attempts.to_string(),
                task_span(t),
                t.error.as_deref().and_then(|e| e.lines().next()).unwrap_or("").to_owned(),
            ]
        })
        .collect();
    print!("{}", table(&["TASK", "PLUGIN", "STATE", "ATTEMPTS", "DURATION", "ERROR"], rows));
    Ok(ExitCode::SUCCESS)
}

async fn logs(api: &Api, run: &str, task: &str, attempt: Option<i64>, follow: bool) -> anyhow::Result<ExitCode> {
    let mut query: Vec<(&str, String)> = attempt.map(|a| ("attempt", a.to_string())).into_iter().collect();
    if follow {
        query.push(("follow", "true".into()));
    }
    let request = api.get(&["v1", "runs", run, "tasks", task, "logs"]).query(&query);
    if !follow {
        let lines: Vec<LogLineView> = api.json(request).await?;
        for line in &lines {
            println!("{}", log_line(line));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut stream = api.send(request).await?.bytes_stream();
    let mut pending = Vec::new();
    let mut stdout = std::io::stdout();
    while let Some(chunk) = stream.next().await {
        pending.extend_from_slice(&chunk.context("the log stream broke off")?);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let raw: Vec<u8> = pending.drain(..=end).collect();
            if let Ok(line) = serde_json::from_slice::<LogLineView>(&raw) {
                writeln!(stdout, "{}", log_line(&line))?;
            }
        }
        stdout.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}

fn log_line(line: &LogLineView) -> String {
    format!("{} {:<5} {:<6} │ {}", clock(&line.at), line.level, line.source, line.message)
}

/// A run or task action. A 202 (accepted, not yet applied) is not an error.
async fn action(api: &Api, segments: &[&str], body: Option<Value>) -> anyhow::Result<ExitCode> {
    let mut request = api.post(segments);
    if let Some(body) = body {
        request = request.json(&body);
    }
    action_with(api, request).await
}

async fn action_with(api: &Api, request: RequestBuilder) -> anyhow::Result<ExitCode> {
    let response = api.send(request).await?;
    if response.status() == StatusCode::ACCEPTED {
        let pending: ApiError = response.json().await?;
        println!("{}", pending.message);
        return Ok(ExitCode::SUCCESS);
    }
    let result: ActionResult = response.json().await?;
    let message = if result.message.is_empty() { "done".into() } else { result.message };
    println!("run {} {}: {message}", result.run.id, result.run.state);
    Ok(ExitCode::SUCCESS)
}

async fn job(api: &Api, plugin: String, params: &str, no_wait: bool, timeout: &str) -> anyhow::Result<ExitCode> {
    let params: Value = serde_json::from_str(params).context("--params is not valid JSON")?;
    let request = JobRequest { plugin: Some(plugin), params: Some(params), ..JobRequest::default() };
    let mut query = vec![("wait", (!no_wait).to_string())];
    if !no_wait {
        query.push(("wait_timeout", timeout.to_owned()));
    }
    let result: JobResult = api.json(api.post(&["v1", "jobs"]).query(&query).json(&request)).await?;
    if no_wait {
        println!("{}", result.run_id);
        return Ok(ExitCode::SUCCESS);
    }
    match result.state.as_str() {
        "succeeded" => {
            let output = result.output.unwrap_or(Value::Null);
            println!("{}", serde_json::to_string_pretty(&output)?);
            Ok(ExitCode::SUCCESS)
        }
        "failed" | "killed" => {
            eprintln!("error: job {} {}", result.run_id, result.state);
            for (task, error) in &result.errors {
                let message = error["error"].as_str().unwrap_or("no error recorded");
                eprintln!("error: {task}: {message}");
            }
            Ok(ExitCode::FAILURE)
        }
        state => {
            eprintln!(
                "error: job {} is still {state} after {timeout}; see `dagr status {}`",
                result.run_id, result.run_id
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_json_when_they_parse_and_strings_otherwise() {
        let params = parse_params(&[
            "n=3".into(),
            "flag=true".into(),
            "obj={\"a\":1}".into(),
            "name=hello world".into(),
            "eq=a=b".into(),
        ])
        .unwrap();
        assert_eq!(
            Value::Object(params),
            serde_json::json!({"n": 3, "flag": true, "obj": {"a": 1}, "name": "hello world", "eq": "a=b"})
        );
        assert!(parse_params(&["novalue".into()]).is_err());
    }

    #[test]
    fn table_pads_every_column_but_the_last() {
        let text = table(&["A", "BB", "C"], vec![vec!["xxx".into(), "y".into(), "z z".into()]]);
        assert_eq!(text, "A    BB  C\nxxx  y   z z\n");
    }

    #[test]
    fn api_errors_show_the_location_once() {
        let failure = ApiFailure(ApiError {
            code: "invalid_definition".into(),
            message: "tasks[1].depends_on[0]: unknown task `lod`".into(),
            location: Some("tasks[1].depends_on[0]".into()),
            details: Vec::new(),
        });
        assert_eq!(failure.to_string(), "unknown task `lod` (at tasks[1].depends_on[0])");
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(human_duration(850), "850ms");
        assert_eq!(human_duration(12_345), "12.3s");
        assert_eq!(human_duration(245_000), "4m05s");
        assert_eq!(human_duration(7_380_000), "2h03m");
    }
}
