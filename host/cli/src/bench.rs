//! `dagr bench`: runs a DAG on a fresh node in this process and measures
//! how long each run takes from trigger to finish.
//!
//! The DAG comes from a file in the datasets format (`{"name", "tasks":
//! [{"id", "deps", "runtime_s"}]}`) or is generated (`chain:N`,
//! `fanout:N`, `layered:N:K:W`). Each node becomes a task of the `echo` or `fib` plugin; the
//! workflow is applied and triggered through the node's HTTP API, like a
//! user would, and the end of a run is taken from the engine's
//! finished-runs channel, so no polling shows up in the figures.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};
use dagr_config::Config;
use dagr_protocol::api::{Applied, RunDetail, RunList, RunSummary, TriggerRequest};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use crate::client::{Api, Credentials, table};
use crate::node::Node;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// A DAG file in the datasets format, or `chain:N` (N tasks in a row),
    /// or `fanout:N` (one root and N tasks that depend on it), or
    /// `layered:N:K:W` (N tasks in layers W wide, each task after the first
    /// layer depending on K tasks of the layer before it).
    #[arg(long, value_name = "FILE|chain:N|fanout:N|layered:N:K:W")]
    dag: String,
    /// What every task runs.
    #[arg(long, value_enum, default_value_t = BenchPlugin::Echo)]
    plugin: BenchPlugin,
    /// With `--plugin fib`: the `n` each task computes (25 ≈ 1 ms).
    #[arg(long, default_value_t = 25)]
    fib_n: u32,
    /// With `--plugin sleep`: how long each task waits, in ms (a task of a
    /// known length whatever the machine's speed).
    #[arg(long, default_value_t = 10)]
    sleep_ms: u64,
    /// How many runs, one after another.
    #[arg(long, default_value_t = 1)]
    runs: u32,
    /// One JSON object per run and line, instead of a table.
    #[arg(long)]
    json: bool,
    /// The node's data directory; default a temporary one.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// SQLite durability.
    #[arg(long, value_enum, default_value_t = Synchronous::Normal)]
    synchronous: Synchronous,
    /// Attempts that run at once (default: the config's default).
    #[arg(long)]
    slots: Option<u32>,
    /// Measure a running dagr (a cluster's API, say) instead of a fresh
    /// embedded one; the token comes from `DAGR_TOKEN`.
    #[arg(long, value_name = "URL")]
    remote: Option<String>,
    /// With `--remote`: runs triggered at once per round; the round's wall
    /// time is from the first trigger to the last run's end.
    #[arg(long, default_value_t = 1, requires = "remote")]
    concurrent: u32,
    /// With `--remote`: this many clients follow the event stream, and the
    /// delays of its events are reported.
    #[arg(long, default_value_t = 0, requires = "remote")]
    sse: u32,
    /// With `--remote`: this many webhook subscriptions to a receiver here
    /// (the server needs `[webhooks] allow_private`).
    #[arg(long, default_value_t = 0, requires = "remote")]
    webhooks: u32,
    /// With `--webhooks`: events per request (the subscriptions' `batch`).
    #[arg(long, default_value_t = 1, requires = "webhooks")]
    webhook_batch: u32,
    /// With `--remote`: read `/metrics` every second (admin token in
    /// `DAGR_ADMIN_TOKEN`).
    #[arg(long, requires = "remote")]
    scrape: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BenchPlugin {
    Echo,
    Fib,
    Sleep,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Synchronous {
    Normal,
    Full,
}

/// A DAG with dagr task names.
#[derive(Debug)]
struct Dag {
    name: String,
    /// (task name, the names of its deps).
    tasks: Vec<(String, Vec<String>)>,
}

impl Dag {
    fn edges(&self) -> usize {
        self.tasks.iter().map(|(_, deps)| deps.len()).sum()
    }

    fn shape(&self) -> Shape {
        Shape { name: self.name.clone(), tasks: self.tasks.len(), edges: self.edges() }
    }
}

/// What the report says about a DAG (the DAG itself and its workflow's
/// JSON are dropped once the body is written, so that the memory measured
/// in this process is the node's).
#[derive(Debug)]
struct Shape {
    name: String,
    tasks: usize,
    edges: usize,
}

/// A file of `shared/datasets/dags`.
#[derive(Debug, Deserialize)]
struct DagFile {
    name: String,
    tasks: Vec<DagFileTask>,
}

#[derive(Debug, Deserialize)]
struct DagFileTask {
    id: String,
    #[serde(default)]
    deps: Vec<String>,
}

/// One measured run.
#[derive(Debug)]
struct Measurement {
    run: u32,
    state: String,
    wall_ms: f64,
    tasks_per_s: f64,
    /// Processor time (user + system, all threads) the node used during
    /// the run, in ms; `None` where it is not known (`--remote`).
    cpu_ms: Option<f64>,
    peak_rss_mib: f64,
    /// The resident memory just before the trigger (the run's peak is
    /// measured from it), in MiB; 0 where not known.
    rss_before_mib: f64,
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let dag = load_dag(&args.dag)?;
    let body = workflow_json(&dag, args.plugin, args.fib_n, args.sleep_ms).to_string();
    // Shadowing would keep the DAG alive: dropped, so that what this
    // process holds is the node's.
    let shape = dag.shape();
    drop(dag);
    let dag = shape;
    if let Some(server) = &args.remote {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        let measurements = runtime.block_on(measure_remote(server, &dag, &body, &args))?;
        return Ok(report(&dag, &measurements, &args));
    }
    let mut config = Config::default();
    config.server.listen = "127.0.0.1:0".into();
    let temp = match &args.data_dir {
        Some(dir) => {
            config.server.data_dir = dir.clone();
            None
        }
        None => {
            let temp = tempfile::Builder::new().prefix("dagr-bench-").tempdir()?;
            config.server.data_dir = temp.path().to_path_buf();
            Some(temp)
        }
    };
    config.store.synchronous = match args.synchronous {
        Synchronous::Normal => "normal".into(),
        Synchronous::Full => "full".into(),
    };
    if let Some(slots) = args.slots {
        config.worker.slots = slots;
    }
    // A generated DAG of 100,000 tasks is a body of ~20 MB: the limit is
    // raised to fit the workflow (and only for this node).
    let default_max = dagr_core::units::parse_bytes(&config.api.max_body).unwrap_or(0);
    if body.len() as u64 > default_max {
        config.api.max_body = (body.len() + (1 << 20)).to_string();
    }
    let settings = config.validate()?;
    let runtime = crate::node::node_runtime(&settings, true)?;
    let measurements = runtime.block_on(async {
        let node = Node::start(&settings).await?;
        let result = measure(&node, &settings.data_dir, &dag, body, &args).await;
        node.stop().await;
        result
    })?;
    drop(temp);
    Ok(report(&dag, &measurements, &args))
}

/// Prints the table (unless `--json` printed lines already); fails if a
/// run did not succeed.
fn report(dag: &Shape, measurements: &[Measurement], args: &BenchArgs) -> ExitCode {
    if !args.json {
        let rows = measurements
            .iter()
            .map(|m| {
                vec![
                    dag.name.clone(),
                    (dag.tasks * args.concurrent.max(1) as usize).to_string(),
                    dag.edges.to_string(),
                    m.run.to_string(),
                    m.state.clone(),
                    format!("{:.1}", m.wall_ms),
                    format!("{:.0}", m.tasks_per_s),
                    m.cpu_ms.map_or_else(|| "-".into(), |cpu| format!("{cpu:.0}")),
                    if m.peak_rss_mib > 0.0 { format!("{:.1}", m.peak_rss_mib) } else { "-".into() },
                    if m.rss_before_mib > 0.0 { format!("{:.1}", m.rss_before_mib) } else { "-".into() },
                ]
            })
            .collect();
        print!(
            "{}",
            table(
                &[
                    "DAG",
                    "TASKS",
                    "EDGES",
                    "RUN",
                    "STATE",
                    "WALL MS",
                    "TASKS/S",
                    "CPU MS",
                    "PEAK RSS MIB",
                    "RSS BEFORE MIB"
                ],
                rows
            )
        );
        if let Some(summary) = wall_summary(measurements) {
            println!("{summary}");
        }
    }
    if measurements.iter().all(|m| m.state == "succeeded") { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// The wall times' spread over two or more runs: `wall ms over N runs:
/// min …, median …, max …` (the median of an even count is the mean of the
/// middle two).
fn wall_summary(measurements: &[Measurement]) -> Option<String> {
    if measurements.len() < 2 {
        return None;
    }
    let mut walls: Vec<f64> = measurements.iter().map(|m| m.wall_ms).collect();
    walls.sort_by(f64::total_cmp);
    let n = walls.len();
    let median = if n % 2 == 1 { walls[n / 2] } else { (walls[n / 2 - 1] + walls[n / 2]) / 2.0 };
    Some(format!("wall ms over {n} runs: min {:.1}, median {median:.1}, max {:.1}", walls[0], walls[n - 1]))
}

/// `--remote`: applies the workflow to a running dagr, then per round
/// triggers `--concurrent` runs at once and polls them to their end.
/// Tasks per second count every task of the round's runs. Peak RSS is not
/// known here (the nodes are other processes).
async fn measure_remote(server: &str, dag: &Shape, body: &str, args: &BenchArgs) -> anyhow::Result<Vec<Measurement>> {
    let token = std::env::var("DAGR_TOKEN").ok().filter(|t| !t.is_empty());
    if token.is_none() {
        bail!("--remote needs a token in DAGR_TOKEN");
    }
    let api = Api::with_credentials(server, Credentials { token: token.clone(), tenant: None })?;
    let watchers = if args.sse > 0 || args.webhooks > 0 || args.scrape {
        let token = token.clone().unwrap_or_default();
        Some(
            crate::bench_events::start(
                &api,
                server,
                &token,
                crate::bench_events::Watch {
                    sse: args.sse,
                    webhooks: args.webhooks,
                    webhook_batch: args.webhook_batch,
                    scrape: args.scrape,
                },
            )
            .await?,
        )
    } else {
        None
    };
    let applied: Applied = api
        .json(api.post(&["v1", "workflows"]).header("content-type", "application/json").body(body.to_owned()))
        .await?;
    let mut measurements = Vec::new();
    let mut measured: Vec<String> = Vec::new();
    for number in 1..=args.runs {
        let start = Instant::now();
        let mut pending = Vec::new();
        for _ in 0..args.concurrent.max(1) {
            let run: RunSummary = api
                .json(api.post(&["v1", "workflows", &applied.name, "runs"]).json(&TriggerRequest::default()))
                .await?;
            measured.push(run.id.clone());
            pending.push(run.id);
        }
        let mut states = Vec::new();
        while !pending.is_empty() {
            // The workflow's newest runs, as summaries: a run's own page
            // carries every task, which would load the nodes more than the
            // runs being measured do.
            let limit = (pending.len() + 8).to_string();
            let page: RunList = api
                .json(api.get(&["v1", "workflows", &applied.name, "runs"]).query(&[("limit", limit.as_str())]))
                .await?;
            let mut still = Vec::new();
            for id in pending {
                let state = match page.runs.iter().find(|r| r.id == id) {
                    Some(run) => run.state.clone(),
                    None => api.json::<RunSummary>(api.get(&["v1", "runs", &id])).await?.state,
                };
                if matches!(state.as_str(), "succeeded" | "failed" | "killed") {
                    states.push(state);
                } else {
                    still.push(id);
                }
            }
            pending = still;
            if !pending.is_empty() {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        let wall = start.elapsed();
        let state = states.iter().find(|s| *s != "succeeded").cloned().unwrap_or_else(|| "succeeded".into());
        let tasks = dag.tasks * states.len();
        let measurement = Measurement {
            run: number,
            state,
            wall_ms: wall.as_secs_f64() * 1000.0,
            tasks_per_s: tasks as f64 / wall.as_secs_f64(),
            cpu_ms: None,
            peak_rss_mib: 0.0,
            rss_before_mib: 0.0,
        };
        if args.json {
            println!(
                "{}",
                json!({
                    "dag": dag.name,
                    "plugin": format!("{:?}", args.plugin).to_lowercase(),
                    "server": server,
                    "concurrent": states.len(),
                    "tasks": tasks,
                    "run": number,
                    "state": measurement.state,
                    "wall_ms": (measurement.wall_ms * 10.0).round() / 10.0,
                    "tasks_per_s": measurement.tasks_per_s.round(),
                })
            );
        }
        measurements.push(measurement);
    }
    if let Some(watchers) = watchers {
        // What every follower should have: the measured runs' events.
        let mut expected = 0usize;
        for run in &measured {
            let mut after = 0i64;
            loop {
                let query = [("run", run.clone()), ("limit", "10000".into()), ("after", after.to_string())];
                let page: Value = api.json(api.get(&["v1", "events"]).query(&query)).await?;
                expected += page["events"].as_array().map_or(0, Vec::len);
                let next = page["next"].as_i64().unwrap_or(after);
                if next == after {
                    break;
                }
                after = next;
            }
        }
        watchers.finish(&api, expected).await?;
    }
    Ok(measurements)
}

/// Applies the workflow, then triggers and times each run in turn.
async fn measure(
    node: &Node,
    data_dir: &std::path::Path,
    dag: &Shape,
    body: String,
    args: &BenchArgs,
) -> anyhow::Result<Vec<Measurement>> {
    // The `default` tenant's token, written at the data directory's first start.
    let token = std::fs::read_to_string(data_dir.join(dagr_api::auth::DEFAULT_TOKEN_FILE))
        .context("cannot read the default tenant's token")?;
    let credentials = Credentials { token: Some(token.trim().to_owned()), tenant: None };
    let api = Api::with_credentials(&format!("http://{}", node.addr), credentials)?;
    let bytes = body.len();
    let (cpu_before, start) = (process_cpu_ms(), Instant::now());
    let applied: Applied =
        api.json(api.post(&["v1", "workflows"]).header("content-type", "application/json").body(body)).await?;
    let cpu_ms = process_cpu_ms().zip(cpu_before).map_or(f64::NAN, |(after, before)| after - before);
    eprintln!(
        "applied `{}` ({} tasks, {} edges, {} bytes of JSON) in {:.1} ms, CPU {cpu_ms:.0} ms, peak RSS {:.1} MiB",
        applied.name,
        dag.tasks,
        dag.edges,
        bytes,
        start.elapsed().as_secs_f64() * 1000.0,
        peak_rss_mib(),
    );
    let mut measurements = Vec::new();
    for number in 1..=args.runs {
        // Subscribed before the trigger, so the end cannot be missed.
        let mut finished = node.engine.finished_runs();
        reset_peak_rss();
        let rss_before = rss_mib();
        let cpu_before = process_cpu_ms();
        let start = Instant::now();
        let run: RunSummary =
            api.json(api.post(&["v1", "workflows", &applied.name, "runs"]).json(&TriggerRequest::default())).await?;
        let state = loop {
            match finished.recv().await {
                Ok((id, state)) if id == run.id => break state,
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => {
                    let detail: RunSummary = api.json(api.get(&["v1", "runs", &run.id])).await?;
                    if matches!(detail.state.as_str(), "succeeded" | "failed" | "killed") {
                        break detail.state;
                    }
                }
                Err(RecvError::Closed) => bail!("the engine stopped during run {}", run.id),
            }
        };
        let wall = start.elapsed();
        let cpu_ms = process_cpu_ms().zip(cpu_before).map(|(after, before)| after - before);
        if state != "succeeded" {
            explain_failure(&api, &run.id, &args.plugin).await;
        }
        let measurement = Measurement {
            run: number,
            state,
            wall_ms: wall.as_secs_f64() * 1000.0,
            tasks_per_s: dag.tasks as f64 / wall.as_secs_f64(),
            cpu_ms,
            peak_rss_mib: peak_rss_mib(),
            rss_before_mib: rss_before,
        };
        if args.json {
            println!(
                "{}",
                json!({
                    "dag": dag.name,
                    "plugin": format!("{:?}", args.plugin).to_lowercase(),
                    "tasks": dag.tasks,
                    "edges": dag.edges,
                    "run": measurement.run,
                    "run_id": run.id,
                    "state": measurement.state,
                    "wall_ms": (measurement.wall_ms * 10.0).round() / 10.0,
                    "tasks_per_s": measurement.tasks_per_s.round(),
                    "cpu_ms": measurement.cpu_ms.map(|cpu| cpu.round()),
                    "peak_rss_mib": (measurement.peak_rss_mib * 10.0).round() / 10.0,
                    "rss_before_mib": (measurement.rss_before_mib * 10.0).round() / 10.0,
                })
            );
        }
        measurements.push(measurement);
    }
    Ok(measurements)
}

/// Says on stderr which tasks of a run that did not succeed failed, and why
/// (after the run's wall time was taken).
async fn explain_failure(api: &Api, run: &str, plugin: &BenchPlugin) {
    let Ok(detail) = api.json::<RunDetail>(api.get(&["v1", "runs", run])).await else { return };
    let failed: Vec<_> = detail.tasks.iter().filter(|t| t.state == "failed").collect();
    for task in failed.iter().take(5) {
        eprintln!("run {run}: task {} failed: {}", task.name, task.error.as_deref().unwrap_or("(no message)"));
    }
    if failed.len() > 5 {
        eprintln!("run {run}: and {} more failed tasks", failed.len() - 5);
    }
    if *plugin == BenchPlugin::Echo && failed.iter().any(|t| t.error.as_deref().is_some_and(|e| e.contains("output"))) {
        eprintln!(
            "`echo` returns its inputs, so outputs grow along the DAG and a task after a wide fan-in can pass the \
             output limit; `--plugin fib --fib-n 1` runs a task of about no work with a small output instead"
        );
    }
}

/// `chain:N`, `fanout:N`, `layered:N:K:W`, or a file.
fn load_dag(spec: &str) -> anyhow::Result<Dag> {
    let count = |n: &str| -> anyhow::Result<usize> {
        match n.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => bail!("--dag {spec}: N must be a positive number"),
        }
    };
    if let Some(n) = spec.strip_prefix("chain:") {
        let n = count(n)?;
        let tasks = (0..n)
            .map(|i| {
                let deps = if i == 0 { vec![] } else { vec![format!("t{}", i - 1)] };
                (format!("t{i}"), deps)
            })
            .collect();
        return Ok(Dag { name: format!("chain-{n}"), tasks });
    }
    if let Some(n) = spec.strip_prefix("fanout:") {
        let n = count(n)?;
        let mut tasks = vec![("root".to_owned(), vec![])];
        tasks.extend((0..n).map(|i| (format!("t{i}"), vec!["root".to_owned()])));
        return Ok(Dag { name: format!("fanout-{n}"), tasks });
    }
    if let Some(shape) = spec.strip_prefix("layered:") {
        let numbers = shape.split(':').map(count).collect::<anyhow::Result<Vec<_>>>()?;
        let [n, k, width] = numbers[..] else { bail!("--dag {spec}: the form is layered:N:K:W") };
        if k > width {
            bail!("--dag {spec}: K ({k}) cannot be more than the layer's width W ({width})");
        }
        return Ok(Dag { name: format!("layered-{n}-{k}-{width}"), tasks: layered(n, k, width) });
    }
    let text = std::fs::read_to_string(spec).with_context(|| format!("cannot read {spec}"))?;
    let file: DagFile = serde_json::from_str(&text).with_context(|| format!("{spec} is not a DAG file"))?;
    from_file(file).with_context(|| format!("in {spec}"))
}

/// `n` tasks in layers `width` wide; task `j` of a layer after the first
/// depends on the `k` tasks `j`, `j + width/k`, `j + 2·width/k`… (modulo the
/// width) of the layer before it, so every task of a layer has distinct
/// deps and the edges number `(n - width) · k`.
fn layered(n: usize, k: usize, width: usize) -> Vec<(String, Vec<String>)> {
    let stride = (width / k).max(1);
    (0..n)
        .map(|i| {
            let (layer, j) = (i / width, i % width);
            let deps = if layer == 0 {
                vec![]
            } else {
                let before = (layer - 1) * width;
                // The last layer may be narrower than the ones before it; the
                // layer before it is always whole.
                (0..k).map(|m| format!("t{}", before + (j + m * stride) % width)).collect()
            };
            (format!("t{i}"), deps)
        })
        .collect()
}

/// Maps the file's ids (any characters) to unique dagr task names.
fn from_file(file: DagFile) -> anyhow::Result<Dag> {
    let mut taken = HashSet::new();
    let names: HashMap<&str, String> =
        file.tasks.iter().map(|t| (t.id.as_str(), unique_name(&t.id, &mut taken))).collect();
    if names.len() != file.tasks.len() {
        bail!("task ids are not unique");
    }
    let mut tasks = Vec::with_capacity(file.tasks.len());
    for task in &file.tasks {
        let deps = task
            .deps
            .iter()
            .map(|dep| {
                names
                    .get(dep.as_str())
                    .cloned()
                    .with_context(|| format!("task `{}` depends on unknown `{dep}`", task.id))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        tasks.push((names[task.id.as_str()].clone(), deps));
    }
    let mut name_taken = HashSet::new();
    Ok(Dag { name: unique_name(&file.name, &mut name_taken), tasks })
}

/// `id` with every character a name may not contain replaced by `_`, cut
/// to 120 characters, and made unique with a `-2`, `-3`… suffix.
fn unique_name(id: &str, taken: &mut HashSet<String>) -> String {
    let mut base: String = id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' })
        .take(120)
        .collect();
    // `.` and `..` are valid names but cannot be a URL path segment.
    if base.chars().all(|c| c == '.') {
        base.insert_str(0, "task");
    }
    let mut name = base.clone();
    let mut n = 1;
    while !taken.insert(name.clone()) {
        n += 1;
        name = format!("{base}-{n}");
    }
    name
}

fn workflow_json(dag: &Dag, plugin: BenchPlugin, fib_n: u32, sleep_ms: u64) -> Value {
    let (plugin, params) = match plugin {
        BenchPlugin::Echo => ("echo", json!({})),
        BenchPlugin::Fib => ("fib", json!({ "n": fib_n })),
        BenchPlugin::Sleep => ("sleep", json!({ "ms": sleep_ms })),
    };
    let tasks: Vec<Value> = dag
        .tasks
        .iter()
        .map(|(name, deps)| json!({"name": name, "plugin": plugin, "params": params, "depends_on": deps}))
        .collect();
    json!({"name": dag.name, "description": "dagr bench", "tasks": tasks})
}

/// Processor time this process has used so far (user + system, all its
/// threads), in ms, from `/proc/self/stat` (in USER_HZ ticks, 100 per second
/// on Linux); `None` where unknown.
fn process_cpu_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces; fields after it are plain.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let user: f64 = fields.next()?.parse().ok()?;
    let system: f64 = fields.next()?.parse().ok()?;
    Some((user + system) * 10.0)
}

/// The process's peak resident memory (VmHWM), in MiB; 0 where unknown.
fn peak_rss_mib() -> f64 {
    status_mib("VmHWM:")
}

/// This process's resident memory now, in MiB (0 where unknown).
fn rss_mib() -> f64 {
    status_mib("VmRSS:")
}

/// Starts the peak of `peak_rss_mib` again from the resident memory now
/// (Linux: `clear_refs` 5), so a run's peak is its own, not the apply's.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn status_mib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map(|kib| kib / 1024.0)
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_ids_become_unique_valid_names_and_deps_follow() {
        let file: DagFile = serde_json::from_value(json!({
            "name": "a/b",
            "tasks": [
                {"id": "x/1:2", "deps": []},
                {"id": "x_1_2", "deps": ["x/1:2"]},
                {"id": "..", "deps": ["x_1_2", "x/1:2"]},
            ]
        }))
        .unwrap();
        let dag = from_file(file).unwrap();
        assert_eq!(dag.name, "a_b");
        assert_eq!(
            dag.tasks,
            vec![
                ("x_1_2".to_owned(), vec![]),
                ("x_1_2-2".to_owned(), vec!["x_1_2".to_owned()]),
                ("task..".to_owned(), vec!["x_1_2-2".to_owned(), "x_1_2".to_owned()]),
            ]
        );
        assert_eq!(dag.edges(), 3);
        for (name, _) in &dag.tasks {
            assert!(dagr_core::definition::valid_name(name), "{name}");
        }
    }

    #[test]
    fn the_summary_gives_min_median_and_max_of_two_or_more_runs() {
        let runs = |walls: &[f64]| -> Vec<Measurement> {
            walls
                .iter()
                .enumerate()
                .map(|(i, &wall_ms)| Measurement {
                    run: i as u32 + 1,
                    state: "succeeded".into(),
                    wall_ms,
                    tasks_per_s: 0.0,
                    cpu_ms: None,
                    peak_rss_mib: 0.0,
                    rss_before_mib: 0.0,
                })
                .collect()
        };
        assert_eq!(wall_summary(&runs(&[9.0])), None);
        assert_eq!(
            wall_summary(&runs(&[12.0, 8.0, 30.0])).unwrap(),
            "wall ms over 3 runs: min 8.0, median 12.0, max 30.0"
        );
        assert_eq!(
            wall_summary(&runs(&[10.0, 8.0, 30.0, 9.0])).unwrap(),
            "wall ms over 4 runs: min 8.0, median 9.5, max 30.0"
        );
    }

    #[test]
    fn an_unknown_dep_is_an_error() {
        let file: DagFile = serde_json::from_value(json!({
            "name": "d", "tasks": [{"id": "a", "deps": ["b"]}]
        }))
        .unwrap();
        assert!(from_file(file).is_err());
    }

    #[test]
    fn generated_dags_have_the_asked_shape() {
        let chain = load_dag("chain:3").unwrap();
        assert_eq!(chain.tasks.len(), 3);
        assert_eq!(chain.edges(), 2);
        let fanout = load_dag("fanout:4").unwrap();
        assert_eq!(fanout.tasks.len(), 5);
        assert_eq!(fanout.edges(), 4);
        assert!(load_dag("chain:0").is_err());
        let layered = load_dag("layered:10:2:4").unwrap();
        assert_eq!(layered.tasks.len(), 10);
        assert_eq!(layered.edges(), 12);
        assert_eq!(layered.tasks[4], ("t4".to_owned(), vec!["t0".to_owned(), "t2".to_owned()]));
        assert_eq!(layered.tasks[9], ("t9".to_owned(), vec!["t5".to_owned(), "t7".to_owned()]));
        for (_, deps) in &layered.tasks {
            assert_eq!(deps.iter().collect::<HashSet<_>>().len(), deps.len(), "{deps:?}");
        }
        assert!(load_dag("layered:10:5:4").is_err());
        assert!(load_dag("layered:10:2").is_err());
    }

    #[test]
    fn long_ids_are_cut_to_a_valid_length() {
        let mut taken = HashSet::new();
        let long = "é".repeat(300);
        let first = unique_name(&long, &mut taken);
        let second = unique_name(&long, &mut taken);
        assert_ne!(first, second);
        assert!(dagr_core::definition::valid_name(&second));
    }
}
