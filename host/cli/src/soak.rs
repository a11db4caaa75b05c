//! `dagr soak`: a Buffalo day in compressed time. It starts `dagr serve`
//! (this binary) on a fresh data directory with the carry-over to cold
//! storage running, submits N runs of a small DAG over HTTP at a steady
//! rate, and samples what must stay flat or grow linearly: the hot tables'
//! row counts, the latency of the API's run lists (hot and cold), the size
//! of the database files, the carry-over's pace. At the end every run is
//! accounted for (hot + cold = submitted) and one cold run is restored and
//! timed. Figures are JSON lines on stdout.

use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use dagr_store::{ArchiveStore, RunFilter, SqlStore};
use futures::StreamExt;
use serde_json::{Value, json};

#[derive(Debug, clap::Args)]
pub struct SoakArgs {
    /// Runs to submit (a Buffalo day: 1,000,000).
    #[arg(long, default_value_t = 1_000_000)]
    runs: u64,
    /// Runs submitted per second (0: as fast as the server takes them).
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// Triggers in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// `[archive] after`: how soon a finished run goes cold (compressed time).
    #[arg(long, default_value = "30s")]
    after: String,
    /// `[archive] audit_retain_for`: how long the record of each trigger
    /// stays in the audit log (compressed time; empty: for ever).
    #[arg(long, default_value = "2m")]
    audit_retain: String,
    /// Seconds between samples.
    #[arg(long, default_value_t = 10)]
    sample: u64,
    /// The server's data directory (default: a temporary one, removed).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// A PostgreSQL URL for the server's store (default: SQLite in the data directory).
    #[arg(long)]
    store: Option<String>,
}

/// Five tasks: one root, three after it, one after those.
const WORKFLOW: &str = r#"{"name": "soak", "tasks": [
  {"name": "extract", "plugin": "echo"},
  {"name": "orders", "plugin": "echo", "depends_on": ["extract"]},
  {"name": "users", "plugin": "echo", "depends_on": ["extract"]},
  {"name": "items", "plugin": "echo", "depends_on": ["extract"]},
  {"name": "report", "plugin": "echo", "depends_on": ["orders", "users", "items"]}
]}"#;

struct Server {
    child: Child,
    base: String,
    token: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(dir: &Path, store: Option<&str>, after: &str, audit_retain: &str) -> anyhow::Result<Server> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let log = std::fs::File::create(dir.join("server.log"))?;
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(dir)
        .env("DAGR_ARCHIVE__AFTER", after)
        .env("DAGR_ARCHIVE__AUDIT_RETAIN_FOR", audit_retain)
        .env("DAGR_ARCHIVE__INTERVAL", "1s")
        .env("DAGR_ARCHIVE__BATCH", "2000")
        .env("DAGR_ARCHIVE__PERIOD", "week")
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log));
    if let Some(url) = store {
        command.env("DAGR_STORE__URL", url);
    }
    let child = command.spawn().context("cannot start dagr serve")?;
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() || !dir.join("token").exists() {
        anyhow::ensure!(Instant::now() < deadline, "dagr serve did not start (see {}/server.log)", dir.display());
        std::thread::sleep(Duration::from_millis(100));
    }
    let token = std::fs::read_to_string(dir.join("token"))?.trim().to_owned();
    Ok(Server { child, base, token })
}

/// Bytes of the files under `path` (the database, its WAL, the archive).
fn size_of(path: &Path) -> u64 {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            std::fs::read_dir(path).map(|entries| entries.flatten().map(|e| size_of(&e.path())).sum()).unwrap_or(0)
        }
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}

/// Milliseconds of `n` GETs of `path`, sorted.
async fn timed(http: &reqwest::Client, server: &Server, path: &str, n: usize) -> Vec<f64> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let ok = http.get(format!("{}{path}", server.base)).bearer_auth(&server.token).send().await;
        if ok.is_ok_and(|r| r.status().is_success()) {
            times.push(start.elapsed().as_secs_f64() * 1000.0);
        }
    }
    times.sort_by(f64::total_cmp);
    times
}

fn p(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

async fn sample(
    store: &SqlStore,
    http: &reqwest::Client,
    server: &Server,
    dir: &Path,
    started: Instant,
    submitted: u64,
) -> anyhow::Result<Value> {
    let hot = store.hot_counts().await?;
    let cold: i64 = store.partitions(None).await?.iter().map(|p| p.runs).sum();
    let hot_list = timed(http, server, "/v1/runs?limit=50", 5).await;
    let cold_list = timed(http, server, "/v1/runs?limit=50&archived=true", 5).await;
    Ok(json!({
        "t_s": started.elapsed().as_secs(),
        "submitted": submitted,
        "hot": hot,
        "cold_runs": cold,
        "db_bytes": size_of(&dir.join("dagr.db")) + size_of(&dir.join("dagr.db-wal")),
        "wal_bytes": size_of(&dir.join("dagr.db-wal")),
        "archive_bytes": size_of(&dir.join("archive")),
        "list_ms": {"hot_p50": p(&hot_list, 0.5), "hot_max": p(&hot_list, 1.0),
                    "cold_p50": p(&cold_list, 0.5), "cold_max": p(&cold_list, 1.0)},
    }))
}

pub fn run(args: SoakArgs) -> anyhow::Result<ExitCode> {
    let temp = match &args.data_dir {
        Some(_) => None,
        None => Some(tempfile::Builder::new().prefix("dagr-soak-").tempdir()?),
    };
    let dir = args.data_dir.clone().or_else(|| temp.as_ref().map(|t| t.path().to_owned())).context("no data dir")?;
    std::fs::create_dir_all(&dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(soak(args, dir))
}

async fn soak(args: SoakArgs, dir: PathBuf) -> anyhow::Result<ExitCode> {
    let server = Arc::new(start(&dir, args.store.as_deref(), &args.after, &args.audit_retain)?);
    let url = args.store.clone().unwrap_or_else(|| format!("sqlite://{}", dir.join("dagr.db").display()));
    let store = SqlStore::open(&url, dagr_store::Synchronous::Normal).await?;
    let http = reqwest::Client::new();
    let applied = http
        .post(format!("{}/v1/workflows", server.base))
        .bearer_auth(&server.token)
        .header("content-type", "application/json")
        .body(WORKFLOW)
        .send()
        .await?;
    anyhow::ensure!(applied.status().is_success(), "cannot apply the soak workflow: {}", applied.text().await?);

    let started = Instant::now();
    let submitted = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let submitter = {
        let (server, http, submitted, failed) = (server.clone(), http.clone(), submitted.clone(), failed.clone());
        let (runs, rate, concurrency) = (args.runs, args.rate, args.concurrency.max(1));
        tokio::spawn(async move {
            futures::stream::iter(0..runs)
                .map(|i| {
                    let (server, http, submitted, failed) =
                        (server.clone(), http.clone(), submitted.clone(), failed.clone());
                    async move {
                        if rate > 0 {
                            let due = started + Duration::from_secs_f64(i as f64 / rate as f64);
                            tokio::time::sleep_until(due.into()).await;
                        }
                        for _ in 0..10 {
                            let sent = http
                                .post(format!("{}/v1/workflows/soak/runs", server.base))
                                .bearer_auth(&server.token)
                                .json(&json!({}))
                                .send()
                                .await;
                            if sent.is_ok_and(|r| r.status().is_success()) {
                                submitted.fetch_add(1, Ordering::Relaxed);
                                return;
                            }
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                })
                .buffer_unordered(concurrency)
                .for_each(|()| async {})
                .await;
        })
    };

    let every = Duration::from_secs(args.sample.max(1));
    let mut next = Instant::now() + every;
    loop {
        tokio::time::sleep_until(next.into()).await;
        next += every;
        let done = submitter.is_finished();
        println!("{}", sample(&store, &http, &server, &dir, started, submitted.load(Ordering::Relaxed)).await?);
        if done {
            break;
        }
    }
    let submit_s = started.elapsed().as_secs_f64();
    let total = submitted.load(Ordering::Relaxed);

    // Every run ends, then goes cold; the hot tables empty out.
    let deadline = Instant::now() + Duration::from_secs(3600);
    loop {
        let line = sample(&store, &http, &server, &dir, started, total).await?;
        println!("{line}");
        if line["cold_runs"].as_u64() == Some(total) || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(every).await;
    }
    let hot = store.hot_counts().await?;
    let cold: i64 = store.partitions(None).await?.iter().map(|p| p.runs).sum();
    let filter = RunFilter { tenant: "default".into(), limit: 1, ..Default::default() };
    let restore_ms = match store.list_archived_runs(&filter).await?.first() {
        Some(run) => {
            let start = Instant::now();
            store.restore_run(&run.id, chrono::Utc::now().timestamp_millis()).await?;
            Some(start.elapsed().as_secs_f64() * 1000.0)
        }
        None => None,
    };
    let accounted = hot.runs + cold == total as i64;
    println!(
        "{}",
        json!({
            "summary": true,
            "submitted": total,
            "failed_submissions": failed.load(Ordering::Relaxed),
            "submit_seconds": submit_s,
            "runs_per_second": total as f64 / submit_s,
            "hot_runs": hot.runs,
            "cold_runs": cold,
            "accounted": accounted,
            "restore_one_ms": restore_ms,
            "db_bytes": size_of(&dir.join("dagr.db")) + size_of(&dir.join("dagr.db-wal")),
            "wal_bytes": size_of(&dir.join("dagr.db-wal")),
            "archive_bytes": size_of(&dir.join("archive")),
            "total_seconds": started.elapsed().as_secs_f64(),
        })
    );
    Ok(if accounted { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
