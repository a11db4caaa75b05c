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

// Requests ------------------------------------------------------------------------

/// The server the client verbs talk to when none is configured.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// What every request carries.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// The bearer token.
    pub token: Option<String>,
    /// With the admin token: the tenant to act for.
    pub tenant: Option<String>,
}

static CREDENTIALS: OnceLock<Credentials> = OnceLock::new();

/// `~/.config/dagr/config.toml`: named connections.
#[derive(Debug, Default, Deserialize)]
struct ClientConfig {
    #[serde(default)]
    profiles: BTreeMap<String, Profile>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Profile {
    server: Option<String>,
    token: Option<String>,
    /// With an admin token: the tenant to act for.
    tenant: Option<String>,
}

fn client_config_path() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".config"),
    };
    Some(base.join("dagr").join("config.toml"))
}

/// Decides the server and the credentials of this process's requests;
/// returns the server. `server` and `token` are the flags (or their
/// variables), empty or `None` when not given; `admin` says the verb needs
/// the admin token, whose local file differs.
pub fn connect(
    server: &str,
    token: Option<String>,
    profile: &str,
    tenant: Option<String>,
    admin: bool,
) -> anyhow::Result<String> {
    let mut chosen = Profile::default();
    if let Some(path) = client_config_path().filter(|p| p.exists()) {
        let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let mut config: ClientConfig =
            toml::from_str(&text).with_context(|| format!("{} is not a valid dagr client config", path.display()))?;
        match config.profiles.remove(profile) {
            Some(p) => chosen = p,
            None if profile != "default" => bail!("there is no profile `{profile}` in {}", path.display()),
            None => {}
        }
    } else if profile != "default" {
        bail!("there is no profile `{profile}`: ~/.config/dagr/config.toml does not exist");
    }
    let server = match (server.is_empty(), chosen.server) {
        (false, _) => server.to_owned(),
        (true, Some(s)) => s,
        (true, None) => DEFAULT_SERVER.to_owned(),
    };
    let local = Path::new("dagr-data").join(if admin { "admin.token" } else { "token" });
    let token = token
        .filter(|t| !t.trim().is_empty())
        .or(chosen.token)
        .or_else(|| std::fs::read_to_string(&local).ok())
        .map(|t| t.trim().to_owned());
    let tenant = tenant.filter(|t| !t.is_empty()).or(chosen.tenant);
    let _ = CREDENTIALS.set(Credentials { token, tenant });
    Ok(server)
}

/// A dagr server's HTTP API.
pub struct Api {
    base: Url,
    http: reqwest::Client,
}

/// An error answer of the API.
#[derive(Debug)]
pub struct ApiFailure(pub ApiError);

impl fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Issues often repeat their location in front of the message.
        let line = |f: &mut fmt::Formatter<'_>, location: Option<&str>, message: &str| match location {
            Some(at) if !at.is_empty() => {
                let message = message.strip_prefix(at).and_then(|m| m.strip_prefix(": ")).unwrap_or(message);
                write!(f, "{message} (at {at})")
            }
            _ => write!(f, "{message}"),
        };
        let error = &self.0;
        line(f, error.location.as_deref(), &error.message)?;
        for detail in error.details.iter().skip(1) {
            write!(f, "\nerror: ")?;
            line(f, Some(&detail.location), &detail.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for ApiFailure {}

impl Api {
    /// A client of `server` with the credentials [`connect`] chose.
    pub fn new(server: &str) -> anyhow::Result<Api> {
        Api::with_credentials(server, CREDENTIALS.get().cloned().unwrap_or_default())
    }

    pub fn with_credentials(server: &str, credentials: Credentials) -> anyhow::Result<Api> {
        let base =
            Url::parse(server).with_context(|| format!("`{server}` is not a server URL like http://127.0.0.1:8080"))?;
        if base.cannot_be_a_base() {
            bail!("`{server}` is not a server URL like http://127.0.0.1:8080");
        }
        let mut headers = HeaderMap::new();
        if let Some(token) = &credentials.token {
            let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| anyhow::anyhow!("the token has characters a token cannot have"))?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        if let Some(tenant) = &credentials.tenant {
            let value = HeaderValue::from_str(tenant).with_context(|| format!("`{tenant}` is not a tenant name"))?;
            headers.insert(dagr_protocol::tenancy::TENANT_HEADER, value);
        }
        Ok(Api { base, http: reqwest::Client::builder().default_headers(headers).build()? })
    }

    /// The URL of a path made of these segments (each one escaped).
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    pub fn get(&self, segments: &[&str]) -> RequestBuilder {
        self.http.request(Method::GET, self.url(segments))
    }

    pub fn post(&self, segments: &[&str]) -> RequestBuilder {
        self.http.request(Method::POST, self.url(segments))
    }

    pub fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        self.http.request(method, self.url(segments))
    }

    pub fn delete(&self, segments: &[&str]) -> RequestBuilder {
        self.http.request(Method::DELETE, self.url(segments))
    }

    /// Sends a request; any answer but 2xx becomes an error.
    pub async fn send(&self, request: RequestBuilder) -> anyhow::Result<Response> {
        let response = request.send().await.map_err(|e| {
            if e.is_connect() {
                anyhow::anyhow!(
                    "the dagr server is not reachable at {} (start one with `dagr serve`, or point --server / DAGR_SERVER at one)",
                    self.base
                )
            } else {
                anyhow::anyhow!("request to {} failed: {e}", self.base)
            }
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.bytes().await.unwrap_or_default();
        match serde_json::from_slice::<ApiError>(&body) {
            Ok(mut error) => {
                if status == StatusCode::UNAUTHORIZED {
                    error.message.push_str(
                        " (give the CLI a token with --token, DAGR_TOKEN or a profile in ~/.config/dagr/config.toml)",
                    );
                }
                Err(ApiFailure(error).into())
            }
            Err(_) => bail!("the server answered {status}: {}", String::from_utf8_lossy(&body).trim()),
        }
    }

    /// Sends a request and decodes its JSON answer.
    pub async fn json<T: DeserializeOwned>(&self, request: RequestBuilder) -> anyhow::Result<T> {
        let response = self.send(request).await?;
        let body = response.bytes().await?;
        serde_json::from_slice(&body).with_context(|| {
            format!("unexpected answer from the server: {}", String::from_utf8_lossy(&body[..body.len().min(300)]))
        })
    }
}

/// `KEY=VALUE` pairs as a JSON object; a VALUE that parses as JSON is taken
/// as JSON, anything else as a string.
pub fn parse_params(pairs: &[String]) -> anyhow::Result<Map<String, Value>> {
    let mut params = Map::new();
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            bail!("--param `{pair}` must be KEY=VALUE");
        };
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.into()));
        params.insert(key.into(), value);
    }
    Ok(params)
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

// Watching a run ----------------------------------------------------------------------

/// Runs with more tasks than this show counts per state, not a line per task.
const TASK_LINES: usize = 40;

/// Polls a run until it ends, showing its tasks: redrawn in place on a
/// terminal, one line per change otherwise.
async fn watch(api: &Api, run_id: &str) -> anyhow::Result<ExitCode> {
    let tty = std::io::stdout().is_terminal();
    let mut drawn_lines = 0;
    let mut seen: HashMap<String, (String, i64)> = HashMap::new();
    let mut run_state = String::new();
    let mut stdout = std::io::stdout();
    loop {
        let detail: RunDetail = api.json(api.get(&["v1", "runs", run_id])).await?;
        let done = matches!(detail.run.state.as_str(), "succeeded" | "failed" | "killed");
        if tty {
            let frame = live_frame(&detail);
            let mut out = String::new();
            if drawn_lines > 0 {
                out.push_str(&format!("\x1b[{drawn_lines}A"));
            }
            let width = terminal_width();
            for line in &frame {
                let line: String = line.chars().take(width.saturating_sub(1)).collect();
                out.push_str(&format!("\r\x1b[2K{line}\n"));
            }
            out.push_str("\x1b[J");
            drawn_lines = frame.len();
            stdout.write_all(out.as_bytes())?;
        } else {
            if detail.run.state != run_state {
                run_state = detail.run.state.clone();
                writeln!(stdout, "{} run {run_state}", now_clock())?;
            }
            for task in &detail.tasks {
                let key = (task.state.clone(), task.attempts);
                if seen.get(&task.name) == Some(&key) {
                    continue;
                }
                let mut line = format!("{} {} {}", now_clock(), task.name, task.state);
                if task.attempts > 1 {
                    line.push_str(&format!(" (attempt {})", task.attempts));
                }
                if let (true, Some(error)) = (task.state == "failed", &task.error) {
                    line.push_str(&format!(": {error}"));
                }
                writeln!(stdout, "{line}")?;
                seen.insert(task.name.clone(), key);
            }
        }
        stdout.flush()?;
        if done {
            let r = &detail.run;
            println!("run {} {} in {}", r.id, r.state, span(r.started_at.as_deref(), r.finished_at.as_deref()));
            for task in detail.tasks.iter().filter(|t| t.state == "failed") {
                let error = task.error.as_deref().unwrap_or("no error recorded");
                println!("  {} failed: {error}", task.name);
            }
            return Ok(if r.state == "succeeded" { ExitCode::SUCCESS } else { ExitCode::FAILURE });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The lines of the live display.
fn live_frame(detail: &RunDetail) -> Vec<String> {
    let r = &detail.run;
    let mut lines = vec![format!(
        "{} {}  {}  {}",
        r.workflow,
        r.id,
        r.state,
        span(r.started_at.as_deref(), r.finished_at.as_deref())
    )];
    let total: i64 = detail.task_counts.values().sum();
    if detail.tasks.len() <= TASK_LINES && detail.tasks_next.is_none() {
        let rows = detail
            .tasks
            .iter()
            .map(|t| vec![t.name.clone(), t.state.clone(), t.attempts.to_string(), task_span(t)])
            .collect();
        let text = table(&["TASK", "STATE", "ATTEMPTS", "DURATION"], rows);
        lines.extend(text.lines().map(str::to_owned));
        return lines;
    }
    const ORDER: [&str; 9] =
        ["pending", "queued", "running", "retry_wait", "succeeded", "failed", "upstream_failed", "skipped", "killed"];
    let counted: Vec<String> =
        ORDER.iter().filter_map(|s| detail.task_counts.get(*s).map(|n| format!("{s} {n}"))).collect();
    lines.push(format!("{total} tasks: {}", counted.join(", ")));
    if detail.tasks_next.is_some() {
        // Only the first page is here; the counts cover every task.
        return lines;
    }
    for state in ["running", "failed"] {
        let names: Vec<&str> = detail.tasks.iter().filter(|t| t.state == state).map(|t| t.name.as_str()).collect();
        if names.is_empty() {
            continue;
        }
        let shown = names.iter().take(8).copied().collect::<Vec<_>>().join(" ");
        let more = names.len().saturating_sub(8);
        let more = if more > 0 { format!(" (+{more} more)") } else { String::new() };
        lines.push(format!("{state}: {shown}{more}"));
    }
    lines
}

fn terminal_width() -> usize {
    std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()).filter(|&w: &usize| w > 20).unwrap_or(120)
}

// Formatting ----------------------------------------------------------------------------

/// Columns padded to their widest cell, two spaces apart; the last column
/// is not padded. Ends with a newline.
pub fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths[i] - cell.chars().count();
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text).ok().map(|t| t.with_timezone(&Utc))
}

/// `2026-01-31 12:00:00` from an RFC 3339 time.
fn short_time(text: &str) -> String {
    parse_time(text).map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string()).unwrap_or_else(|| text.to_owned())
}

/// `12:00:00.123` from an RFC 3339 time.
fn clock(text: &str) -> String {
    parse_time(text).map(|t| t.format("%H:%M:%S%.3f").to_string()).unwrap_or_else(|| text.to_owned())
}

fn now_clock() -> String {
    Utc::now().format("%H:%M:%S%.3f").to_string()
}

/// How long from `start` to `end` (or to now, while running); `-` before it started.
fn span(start: Option<&str>, end: Option<&str>) -> String {
    let Some(start) = start.and_then(parse_time) else {
        return "-".into();
    };
    let end = end.and_then(parse_time).unwrap_or_else(Utc::now);
    human_duration((end - start).num_milliseconds().max(0) as u64)
}

fn task_span(task: &TaskView) -> String {
    span(task.started_at.as_deref(), task.finished_at.as_deref())
}

/// `850ms`, `12.3s`, `4m05s`, `2h03m`.
pub fn human_duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60),
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
