//! Cluster mode with real failures: real `dagr master`, `dagr worker` and
//! `dagr api` processes on PostgreSQL and etcd, started by
//! `tests/local-cluster.sh`, killed with SIGKILL, frozen with SIGSTOP,
//! cut off from etcd, and with PostgreSQL restarted under them.
//!
//! Tasks use the `ledger` test component, which reports the start and end
//! of every execution to an HTTP ledger in this test process *before* it
//! does any work; the ledger proves that no task instance ran twice
//! (overlapping) and none was lost.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::api::Api;
use crate::support;

mod failover;

/// Cluster tests are heavy (several processes each): one at a time.
pub(crate) async fn exclusive() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A cluster started by `tests/local-cluster.sh`, stopped on drop.
pub struct Cluster {
    pub dir: PathBuf,
    pub api: String,
    /// The `default` tenant's token.
    pub token: String,
    client: Api,
    /// What every node starts with, also when it is restarted or added.
    envs: Vec<(String, String)>,
}

impl Cluster {
    pub async fn up(masters: usize, workers: usize, ttl: &str) -> Cluster {
        Cluster::up_with(masters, workers, ttl, &[]).await
    }

    /// A cluster started with more `up` flags (e.g. `--tls`).
    pub async fn up_with(masters: usize, workers: usize, ttl: &str, flags: &[&str]) -> Cluster {
        Cluster::up_with_env(masters, workers, ttl, flags, &[]).await
    }

    /// A cluster whose nodes start with these environment variables too
    /// (e.g. `DAGR_TELEMETRY__OTLP_ENDPOINT`).
    pub async fn up_with_env(
        masters: usize,
        workers: usize,
        ttl: &str,
        flags: &[&str],
        envs: &[(&str, &str)],
    ) -> Cluster {
        let envs: Vec<(String, String)> = envs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let dir = tempfile::Builder::new().prefix("dagr-cluster-").tempdir().unwrap().keep();
        let mut args = ["up", "--masters", &masters.to_string(), "--workers", &workers.to_string(), "--ttl", ttl]
            .map(String::from)
            .to_vec();
        args.extend(flags.iter().map(|f| f.to_string()));
        let (dir2, envs2) = (dir.clone(), envs.clone());
        let out = tokio::task::spawn_blocking(move || script_with(&dir2, &args, &envs2)).await.unwrap();
        let api = out.lines().last().unwrap_or_default().trim().to_owned();
        assert!(api.starts_with("http://"), "local-cluster up did not print the API URL: {out}");
        // The API node made the tenant `default` and its first token at its
        // first start (local-cluster.sh sets auth.default_tenant).
        let token = std::fs::read_to_string(dir.join("api/token"))
            .unwrap_or_else(|e| panic!("the API node wrote no token in {}: {e}", dir.display()))
            .trim()
            .to_owned();
        let client = Api::at(&api, &token);
        Cluster { dir, api, token, client, envs }
    }

    fn run(&self, args: &[&str]) -> String {
        script_with(&self.dir, &args.iter().map(|s| s.to_string()).collect::<Vec<_>>(), &self.envs)
    }

    pub fn kill(&self, node: &str) {
        self.run(&["kill", node]);
    }

    pub fn stop(&self, node: &str) {
        self.run(&["stop", node]);
    }

    pub fn cont(&self, node: &str) {
        self.run(&["cont", node]);
    }

    pub async fn restart(&self, node: &str) {
        let (dir, envs) = (self.dir.clone(), self.envs.clone());
        let node = node.to_owned();
        tokio::task::spawn_blocking(move || script_with(&dir, &["restart".into(), node], &envs)).await.unwrap();
    }

    pub async fn add(&self, role: &str) -> String {
        let (dir, envs) = (self.dir.clone(), self.envs.clone());
        let role = role.to_owned();
        tokio::task::spawn_blocking(move || script_with(&dir, &["add".into(), role], &envs))
            .await
            .unwrap()
            .trim()
            .to_owned()
    }

    /// The internal address of a node, from its log.
    pub fn addr(&self, node: &str) -> String {
        let log = std::fs::read_to_string(self.dir.join(format!("{node}.log"))).unwrap_or_default();
        let line = log.lines().rev().find(|l| l.contains("listening on http")).unwrap_or_default();
        line.split("listening on ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap_or_default().to_owned()
    }

    /// The cluster's shared secret (from its config file).
    pub fn secret(&self) -> String {
        std::fs::read_to_string(self.dir.join("dagr.toml"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("secret = ").map(|v| v.trim_matches('"').to_owned()))
            .expect("the cluster's config has a secret")
    }

    /// A master's load and counters (`null` while it does not answer).
    pub async fn metrics(&self, master: &str) -> Value {
        let request = reqwest::Client::new()
            .get(format!("{}/internal/load", self.addr(master)))
            .header("x-dagr-cluster-secret", self.secret())
            .timeout(std::time::Duration::from_secs(5));
        match request.send().await {
            Ok(response) if response.status().is_success() => response.json().await.unwrap_or(Value::Null),
            _ => Value::Null,
        }
    }

    pub async fn post(&self, path: &str, body: Value) -> Value {
        let (status, v) = self.client.post(path, body).await;
        assert!(status.is_success(), "POST {path}: {status} {v}");
        v
    }

    /// A GET that must succeed within ~5 s (an API node may be restarting).
    pub async fn get(&self, path: &str) -> Value {
        for _ in 0..20 {
            if let Some((status, body)) = self.client.try_get(path).await
                && status.is_success()
            {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("GET {path} kept failing");
    }

    pub async fn apply(&self, spec: &Value) {
        let (status, body) = self.client.post("/v1/workflows", spec.clone()).await;
        assert!(status.is_success(), "apply: {status} {body}");
    }

    pub async fn trigger(&self, workflow: &str) -> String {
        self.post(&format!("/v1/workflows/{workflow}/runs"), json!({})).await["id"].as_str().unwrap().to_owned()
    }

    /// Waits until every run is finished; returns their details.
    pub async fn wait_all(&self, runs: &[String], timeout: Duration) -> Vec<Value> {
        let until = Instant::now() + timeout;
        loop {
            let mut details = Vec::new();
            for id in runs {
                details.push(self.get(&format!("/v1/runs/{id}")).await);
            }
            let open: Vec<String> = details
                .iter()
                .filter(|d| !matches!(d["state"].as_str(), Some("succeeded" | "failed" | "killed")))
                .map(|d| format!("{} {}", d["id"], d["state"]))
                .collect();
            if open.is_empty() {
                return details;
            }
            assert!(
                Instant::now() < until,
                "runs did not finish in {timeout:?} (stuck: {open:?}); logs in {}; PostgreSQL's sessions:\n{}",
                self.dir.display(),
                self.sessions()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

impl Cluster {
    /// PostgreSQL's sessions, one a line (what each waits on, and for how
    /// long it has been in its state): what a stuck commit waits for.
    fn sessions(&self) -> String {
        let sql = "SELECT pid, application_name, state, coalesce(wait_event_type, '-'), coalesce(wait_event, '-'), \
                   now() - state_change, left(regexp_replace(query, '\\s+', ' ', 'g'), 120) \
                   FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()";
        match psql(self, sql) {
            Ok(out) => format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
            Err(e) => format!("cannot run psql: {e}"),
        }
    }
}

/// `psql -tA` with one statement, on the cluster's PostgreSQL.
fn psql(cluster: &Cluster, sql: &str) -> std::io::Result<std::process::Output> {
    let url = std::fs::read_to_string(cluster.dir.join("postgres.url"))?;
    Command::new(pg_bin().join("psql")).args(["-tAc", sql, url.trim()]).output()
}

/// One value from the cluster's PostgreSQL (`psql -tA`).
fn psql_value(cluster: &Cluster, sql: &str) -> String {
    let out = psql(cluster, sql).unwrap_or_else(|e| panic!("cannot run psql: {e}"));
    assert!(out.status.success(), "psql: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// PostgreSQL's programs: `DAGR_TEST_PG_BIN`, or Debian's newest.
fn pg_bin() -> PathBuf {
    std::env::var("DAGR_TEST_PG_BIN").ok().map(PathBuf::from).unwrap_or_else(|| {
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|d| d.flatten().map(|e| e.path().join("bin")).collect())
            .unwrap_or_default();
        versions.sort();
        versions.pop().unwrap_or_default()
    })
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Every process stops either way; the directory (logs, the
        // database's files) may be kept for a post-mortem.
        let keep = std::env::var("DAGR_KEEP_TEST_DIRS").is_ok_and(|v| v == "1");
        if keep {
            eprintln!("keeping the cluster's directory {}", self.dir.display());
        }
        let _ = Command::new(support::workspace_root().join("tests/local-cluster.sh"))
            .arg("down")
            .args(keep.then_some("--keep"))
            .env("DAGR_CLUSTER_DIR", &self.dir)
            .output();
    }
}

fn script_with(dir: &std::path::Path, args: &[String], envs: &[(String, String)]) -> String {
    let extra = format!(
        "[plugins]\nextra = [{:?}]\n[master]\npoll_interval = \"200ms\"\n[worker]\nslots = 32\n",
        dagr_builtins::LEDGER_PATH
    );
    let out = Command::new(support::workspace_root().join("tests/local-cluster.sh"))
        .args(args)
        .env("DAGR_CLUSTER_DIR", dir)
        .env("DAGR_BIN", support::dagr_binary())
        .env("DAGR_CLUSTER_EXTRA", extra)
        // Compile the plugins once for every node of every test cluster.
        .env("DAGR_WORKER__CACHE_DIR", support::workspace_root().join("target/dagr-test-cache"))
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "local-cluster.sh {args:?} failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    text
}

/// One report to the ledger.
#[derive(Debug, Clone)]
pub struct Entry {
    pub event: String,
    pub run: String,
    pub task: String,
    pub attempt: i64,
    pub at: i64,
}

/// The ledger: an HTTP server in this process that records executions.
#[derive(Clone)]
pub struct Ledger {
    pub port: u16,
    entries: Arc<Mutex<Vec<Entry>>>,
}

impl Ledger {
    pub async fn start() -> Ledger {
        let entries: Arc<Mutex<Vec<Entry>>> = Arc::default();
        let state = entries.clone();
        let app = axum::Router::new().route(
            "/ledger",
            axum::routing::post(move |axum::Json(v): axum::Json<Value>| {
                let state = state.clone();
                async move {
                    state.lock().unwrap().push(Entry {
                        event: v["event"].as_str().unwrap_or_default().into(),
                        run: v["run"].as_str().unwrap_or_default().into(),
                        task: v["task"].as_str().unwrap_or_default().into(),
                        attempt: v["attempt"].as_i64().unwrap_or(0),
                        at: now_ms(),
                    });
                    "ok"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Ledger { port, entries }
    }

    pub fn entries(&self) -> Vec<Entry> {
        self.entries.lock().unwrap().clone()
    }

    /// A workflow of ledger tasks: `tasks` as (name, deps).
    pub fn workflow(&self, name: &str, tasks: &[(String, Vec<String>)], ms: u64) -> Value {
        let url = format!("http://127.0.0.1:{}/ledger", self.port);
        let tasks: Vec<Value> = tasks
            .iter()
            .map(|(t, deps)| {
                json!({
                    "name": t, "plugin": "ledger", "depends_on": deps,
                    "params": {"url": url, "ms": ms},
                    "allow_hosts": [format!("127.0.0.1:{}", self.port)],
                    "retries": 2,
                    "retry_backoff": {"kind": "fixed", "delay": "200ms"}
                })
            })
            .collect();
        json!({"name": name, "tasks": tasks})
    }
}

/// root → n parallel tasks → sink.
pub fn fan(n: usize) -> Vec<(String, Vec<String>)> {
    let mut tasks = vec![("root".to_owned(), vec![])];
    for i in 0..n {
        tasks.push((format!("t{i}"), vec!["root".to_owned()]));
    }
    tasks.push(("sink".to_owned(), (0..n).map(|i| format!("t{i}")).collect()));
    tasks
}

/// What the checks found.
#[derive(Debug, Default)]
pub struct Audit {
    pub task_instances: usize,
    pub executions: usize,
    /// Executions that were repeated because their worker died or lost its lease.
    pub repeated_after_worker_loss: usize,
}

/// Checks the exactly-once properties over finished runs:
/// - every run succeeded and every task in it succeeded exactly once;
/// - in the ledger, the executions of one task instance never overlap;
/// - an execution is repeated only when the previous one was lost with its
///   worker (`worker-lost`); with `strict`, never.
pub async fn audit(cluster: &Cluster, ledger: &Ledger, runs: &[Value], strict: bool) -> Audit {
    let entries = ledger.entries();
    let mut by_key: HashMap<(String, String), Vec<Entry>> = HashMap::new();
    for e in entries {
        by_key.entry((e.run.clone(), e.task.clone())).or_default().push(e);
    }
    let mut audit = Audit::default();
    for run in runs {
        let id = run["id"].as_str().unwrap();
        if run["state"] != "succeeded" {
            // What a reader of a failed CI run needs: each failed task's
            // attempts (workers, times, failures) and where the logs are.
            let mut failed = Vec::new();
            for task in run["tasks"].as_array().unwrap().iter().filter(|t| t["state"] != "succeeded") {
                let name = task["name"].as_str().unwrap();
                let detail = cluster.get(&format!("/v1/runs/{id}/tasks/{name}")).await;
                failed.push(format!("{name}: {}", detail["attempts_detail"]));
            }
            panic!(
                "run {id} did not succeed: {run}\nattempts of its tasks that did not:\n{}\nlogs in {}",
                failed.join("\n"),
                cluster.dir.display()
            );
        }
        for task in run["tasks"].as_array().unwrap() {
            let name = task["name"].as_str().unwrap();
            audit.task_instances += 1;
            assert_eq!(task["state"], "succeeded", "{id}/{name}: {task}");
            let detail = cluster.get(&format!("/v1/runs/{id}/tasks/{name}")).await;
            let attempts = detail["attempts_detail"].as_array().unwrap();
            let succeeded = attempts.iter().filter(|a| a["state"] == "succeeded").count();
            assert_eq!(succeeded, 1, "{id}/{name} succeeded {succeeded} times: {attempts:?}");
            let by_number: BTreeMap<i64, &Value> =
                attempts.iter().map(|a| (a["number"].as_i64().unwrap(), a)).collect();

            // Executions, by attempt: start, end (ledger end, or when the
            // master declared the attempt lost).
            let events = by_key.get(&(id.to_owned(), name.to_owned())).cloned().unwrap_or_default();
            let mut starts: BTreeMap<i64, i64> = BTreeMap::new();
            let mut ends: BTreeMap<i64, i64> = BTreeMap::new();
            for e in &events {
                match e.event.as_str() {
                    "start" => {
                        let previous = starts.insert(e.attempt, e.at);
                        assert!(previous.is_none(), "{id}/{name} attempt {} started twice", e.attempt);
                    }
                    _ => {
                        ends.insert(e.attempt, e.at);
                    }
                }
            }
            assert!(!starts.is_empty(), "{id}/{name} succeeded but never started in the ledger");
            audit.executions += starts.len();
            let mut previous_end: Option<(i64, i64)> = None;
            for (&attempt, &start) in &starts {
                let record = by_number
                    .get(&attempt)
                    .unwrap_or_else(|| panic!("{id}/{name}: no attempt {attempt} in {attempts:?}"));
                if let Some((prev_attempt, end)) = previous_end {
                    assert!(
                        start >= end,
                        "{id}/{name}: attempt {attempt} started at {start} while attempt {prev_attempt} ran until {end}"
                    );
                    let prev = by_number[&prev_attempt];
                    let lost = prev["failure_kind"] == "worker-lost";
                    assert!(
                        !strict && (lost || prev["state"] == "failed"),
                        "{id}/{name} ran again (attempt {attempt}) after attempt {prev_attempt}: {prev}"
                    );
                    if lost {
                        audit.repeated_after_worker_loss += 1;
                    }
                }
                let end = match ends.get(&attempt) {
                    Some(&end) => end,
                    None => {
                        assert_eq!(
                            record["failure_kind"], "worker-lost",
                            "{id}/{name} attempt {attempt} has no end in the ledger but was not lost with its worker: {record}"
                        );
                        chrono::DateTime::parse_from_rfc3339(record["finished_at"].as_str().unwrap())
                            .unwrap()
                            .timestamp_millis()
                    }
                };
                previous_end = Some((attempt, end));
            }
        }
    }
    audit
}
/// Polls `check` until it answers `Some`, failing after `timeout`.
async fn until<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until at least `count` attempts have started (by the ledger).
async fn started(ledger: &Ledger, count: usize, timeout: Duration) {
    until(timeout, "attempts to start", || async {
        (ledger.entries().iter().filter(|e| e.event == "start").count() >= count).then_some(())
    })
    .await;
}

pub(crate) async fn wait_for(ledger: &Ledger, run: &str, task: &str, attempt: i64, timeout: Duration) -> i64 {
    let until = Instant::now() + timeout;
    loop {
        if let Some(e) = ledger
            .entries()
            .iter()
            .find(|e| e.run == run && e.task == task && e.attempt == attempt && e.event == "start")
        {
            return e.at;
        }
        assert!(Instant::now() < until, "attempt {attempt} of {task} never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
