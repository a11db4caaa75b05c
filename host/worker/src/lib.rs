//! dagr's worker: it runs attempts in the WebAssembly runtime, streams
//! their logs to the store, and reports results.
//!
//! # Brief overview
//!
//! - [`Worker::start`] takes an [`AttemptSpec`], loads its plugin (from a
//!   [`PluginSource`], compiled once and kept), runs it with the spec's
//!   limits and allowlist, and hands the [`AttemptResult`] to a [`Reporter`].
//! - [`Worker::cancel`] stops one attempt; [`Worker::cancel_all`] stops them
//!   all (a worker that lost its lease must not keep running work).
//! - [`LogWriter`] batches log lines of all attempts into the store while
//!   they run, so that people can follow them; an attempt's lines are all
//!   written before its result is reported. A batch the database refuses
//!   is split until the line it refuses is found, so one bad line never
//!   holds up the others (`logs`).

mod builtins;
mod kept;
mod logs;
pub mod metrics;
mod registry;
pub mod service;

pub use crate::builtins::{BuiltinPlugins, semver_key};
pub use crate::registry::Registry;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dagr_protocol::now_ms;
use dagr_protocol::wire::{AttemptKey, AttemptResult, AttemptSpec, FailureKind, Outcome};
use dagr_runtime::{
    AttemptContext, AttemptObserver, Execution, Limits, LogLine, NetworkPolicy, Plugin, Runtime, SecretSource,
};
use dagr_store::{LogRow, Store};
use tokio::sync::{OnceCell, mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// A check that the worker may still act.
pub type KeepGoing = Arc<dyn Fn() -> bool + Send + Sync>;

/// Where component bytes come from, by sha256.
#[async_trait::async_trait]
pub trait PluginSource: Send + Sync {
    /// The component with this sha256; `Ok(None)` if there is none, `Err`
    /// if it cannot be read now.
    async fn component(&self, sha256: &str) -> Result<Option<Vec<u8>>, String>;
}

/// Compiles a component into the worker's code cache outside the worker's
/// process (a child under CPU and memory limits, as uploads are checked),
/// so that loading it only reads the cache: a component that is expensive
/// to compile cannot take the node's memory or CPU with it.
#[async_trait::async_trait]
pub trait Precompile: Send + Sync {
    /// `Err` says why the component was not compiled (the limit it hit).
    async fn precompile(&self, bytes: Vec<u8>) -> Result<(), String>;
}

/// Receives finished attempts.
pub trait Reporter: Send + Sync {
    fn report(&self, result: AttemptResult);
}

/// Secrets for an attempt's tenant.
pub trait SecretResolver: Send + Sync {
    fn secrets_for(&self, tenant: &str) -> Option<Arc<dyn SecretSource>>;
}

/// A worker. Cheap to clone.
#[derive(Clone)]
pub struct Worker {
    inner: Arc<Inner>,
}

/// Attempts a worker remembers having disowned ([`Worker::disown`]): a
/// dispatch that waited longer than the last this many disowned ones is
/// not expected (a master asks about an attempt seconds after sending it).
pub const DISOWNED_KEPT: usize = 65_536;

/// Why a worker does not take an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the worker is at capacity")]
    Full,
    #[error(
        "the attempt was cancelled, or this worker told a master it does not know the attempt, before its dispatch came: it will not run it"
    )]
    Disowned,
    #[error("it was sent to an earlier lease of this worker, which it lost since: it will not run here")]
    OtherLease,
}

struct Inner {
    id: String,
    runtime: Runtime,
    source: Arc<dyn PluginSource>,
    secrets: Option<Arc<dyn SecretResolver>>,
    plugins: Mutex<HashMap<String, Loading>>,
    running: Mutex<HashMap<AttemptKey, CancellationToken>>,
    /// Attempts stopped because this worker lost its lease: reported lost.
    abandoned: Mutex<std::collections::HashSet<AttemptKey>>,
    /// Attempts this worker told a master it does not know (taken after
    /// `running`, never before).
    disowned: Mutex<kept::RecentKeys>,
    /// "This worker may still act" (its lease is safe), checked by guests.
    keep_going: Mutex<Option<KeepGoing>>,
    /// Compiles components not in the code cache, outside this process.
    precompile: Mutex<Option<Arc<dyn Precompile>>>,
    logs: LogWriter,
}

impl Worker {
    pub fn new(
        id: impl Into<String>,
        runtime: Runtime,
        source: Arc<dyn PluginSource>,
        secrets: Option<Arc<dyn SecretResolver>>,
        logs: LogWriter,
    ) -> Self {
        Worker {
            inner: Arc::new(Inner {
                id: id.into(),
                runtime,
                source,
                secrets,
                plugins: Mutex::new(HashMap::new()),
                running: Mutex::new(HashMap::new()),
                abandoned: Mutex::new(Default::default()),
                disowned: Mutex::new(Default::default()),
                keep_going: Mutex::new(None),
                precompile: Mutex::new(None),
                logs,
            }),
        }
    }

    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Attempts this worker runs at once at most.
    pub fn slots(&self) -> usize {
        self.inner.runtime.config().max_concurrent_attempts as usize
    }

    /// Attempts running now.
    pub fn running(&self) -> usize {
        self.lock_running().len()
    }

    /// Keys of the attempts running now.
    pub fn running_keys(&self) -> Vec<AttemptKey> {
        self.lock_running().keys().cloned().collect()
    }

    /// Whether this worker may act now (its lease is safe), as the guard
    /// given to [`Worker::guard_with`] says; always without one.
    pub fn may_act(&self) -> bool {
        let keep_going = self.inner.keep_going.lock().unwrap_or_else(|e| e.into_inner()).clone();
        keep_going.is_none_or(|ok| ok())
    }

    /// Makes every attempt stop at once when `keep_going` turns false (the
    /// worker's lease is no longer safe); such attempts are reported lost.
    pub fn guard_with(&self, keep_going: KeepGoing) {
        *self.inner.keep_going.lock().unwrap_or_else(|e| e.into_inner()) = Some(keep_going);
    }

    /// Compiles components that the code cache lacks with `precompile`
    /// instead of in this process.
    pub fn precompile_with(&self, precompile: Arc<dyn Precompile>) {
        *self.inner.precompile.lock().unwrap_or_else(|e| e.into_inner()) = Some(precompile);
    }

    fn lock_plugins(&self) -> std::sync::MutexGuard<'_, HashMap<String, Loading>> {
        self.inner.plugins.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `f` of whether the attempt `key` is running here, with no attempt
    /// finishing meanwhile: an attempt leaves the running ones and is
    /// reported under the same lock, so what `f` looks up in the reporter
    /// is consistent with the answer.
    pub fn while_running<R>(&self, key: &AttemptKey, f: impl FnOnce(bool) -> R) -> R {
        let running = self.lock_running();
        f(running.contains_key(key))
    }

    /// This worker told a master it does not know attempt `key` (which
    /// the master then counts as lost and runs again), or was told to stop
    /// it before it had it: should its dispatch still arrive (a request
    /// that waited in a frozen worker's socket, or was overtaken), it is
    /// refused. Called under the lock of running attempts (within
    /// [`Worker::while_running`]'s `f`), so that no dispatch of it slips in
    /// between the look and the refusal. The last [`DISOWNED_KEPT`] are
    /// remembered.
    pub fn disown(&self, key: &AttemptKey) {
        self.inner.disowned.lock().unwrap_or_else(|e| e.into_inner()).insert(key, DISOWNED_KEPT);
    }

    fn lock_running(&self) -> std::sync::MutexGuard<'_, HashMap<AttemptKey, CancellationToken>> {
        self.inner.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Loads (once) and returns the plugin with this hash. A failure is not
    /// kept: the next attempt tries again (the store may be back, the
    /// component published by then).
    async fn plugin(&self, sha256: &str) -> Result<Plugin, PluginError> {
        let cell = self.lock_plugins().entry(sha256.to_owned()).or_default().clone();
        let loaded = cell
            .get_or_init(|| async {
                let bytes = match self.inner.source.component(sha256).await {
                    Ok(Some(bytes)) => bytes,
                    Ok(None) => return Err(PluginError::Missing { sha256: sha256.into() }),
                    Err(message) => return Err(PluginError::Source(message)),
                };
                let runtime = self.inner.runtime.clone();
                let precompile = self.inner.precompile.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if let Some(precompile) = precompile
                    && !runtime.is_cached(&bytes)
                {
                    precompile.precompile(bytes.clone()).await.map_err(PluginError::Load)?;
                }
                match tokio::task::spawn_blocking(move || runtime.load(&bytes)).await {
                    Ok(Ok(plugin)) if plugin.sha256() == sha256 => {
                        tracing::info!(sha256, name = %plugin.info().name, code = ?plugin.code_source(), "plugin loaded");
                        Ok(plugin)
                    }
                    Ok(Ok(plugin)) => Err(PluginError::Mismatch { asked: sha256.into(), got: plugin.sha256().into() }),
                    Ok(Err(e)) => Err(PluginError::Load(e.to_string())),
                    Err(e) => Err(PluginError::Load(format!("loading the component failed: {e}"))),
                }
            })
            .await
            .clone();
        if loaded.is_err() {
            let mut plugins = self.lock_plugins();
            if plugins.get(sha256).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                plugins.remove(sha256);
            }
        }
        loaded
    }

    /// Claims a slot for an attempt about to start: `Ok(true)` when
    /// claimed now, `Ok(false)` when it already had one.
    pub fn reserve(&self, key: &AttemptKey) -> Result<bool, Refusal> {
        let mut running = self.lock_running();
        if running.contains_key(key) {
            return Ok(false);
        }
        if self.inner.disowned.lock().unwrap_or_else(|e| e.into_inner()).contains(key) {
            return Err(Refusal::Disowned);
        }
        if running.len() >= self.slots() {
            return Err(Refusal::Full);
        }
        running.insert(key.clone(), CancellationToken::new());
        Ok(true)
    }

    /// Gives back a slot reserved for an attempt that will not start.
    pub fn unreserve(&self, key: &AttemptKey) {
        self.lock_running().remove(key);
    }

    /// Runs an attempt in the background and reports its result.
    pub fn start(&self, spec: AttemptSpec, reporter: Arc<dyn Reporter>) {
        let cancel = self.lock_running().entry(spec.key.clone()).or_default().clone();
        let worker = self.clone();
        let span = tracing::info_span!(
            "attempt",
            run = %spec.key.run_id,
            task = %spec.task_name,
            attempt = spec.key.number,
            tenant = %spec.tenant,
            plugin = %spec.plugin.name,
            outcome = tracing::field::Empty,
        );
        // In the run's trace: a child of the master's dispatch.
        match spec.trace.as_deref() {
            Some(parent) => dagr_telemetry::follow(&span, Some(parent)),
            None => dagr_telemetry::in_run(&span, &spec.key.run_id),
        }
        let work = tracing::Instrument::instrument(
            async move {
                let key = spec.key.clone();
                let mut result = worker.execute(spec, cancel).await;
                // The slot is given back and the result reported under the
                // same lock, which an adoption takes too (`while_running`):
                // a new owner asking about the attempt finds it running or
                // finished, never neither (it then ran it again).
                let mut running = worker.lock_running();
                running.remove(&key);
                let abandoned = worker.inner.abandoned.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
                if abandoned {
                    result.outcome = Outcome::Failed {
                        kind: FailureKind::WorkerLost,
                        message: "the worker lost its lease and stopped the attempt".into(),
                    };
                }
                let current = tracing::Span::current();
                match &result.outcome {
                    Outcome::Succeeded { .. } => {
                        current.record("outcome", "succeeded");
                        tracing::debug!("attempt succeeded");
                    }
                    Outcome::Failed { kind, message } => {
                        current.record("outcome", kind.as_str());
                        tracing::debug!(%kind, %message, "attempt failed");
                    }
                }
                result.trace = dagr_telemetry::traceparent(&current);
                reporter.report(result);
                drop(running);
            },
            span,
        );
        // On the guest threads: the node's own runtime (its engine and
        // API) does none of an attempt's work.
        self.inner.runtime.spawn_on_guests(work);
    }

    /// Stops one attempt; false if it is not running here — then it is
    /// [disowned](Worker::disown): its dispatch may still be on its way.
    pub fn cancel(&self, key: &AttemptKey) -> bool {
        match self.lock_running().get(key) {
            Some(token) => {
                token.cancel();
                true
            }
            None => {
                self.disown(key);
                false
            }
        }
    }

    /// Stops every attempt.
    pub fn cancel_all(&self) {
        for token in self.lock_running().values() {
            token.cancel();
        }
    }

    /// Stops every attempt because this worker may no longer act; they are
    /// reported as lost (and run again, uncharged).
    pub fn abandon_all(&self) {
        let running = self.lock_running();
        let mut abandoned = self.inner.abandoned.lock().unwrap_or_else(|e| e.into_inner());
        for (key, token) in running.iter() {
            abandoned.insert(key.clone());
            token.cancel();
        }
    }

    async fn execute(&self, spec: AttemptSpec, cancel: CancellationToken) -> AttemptResult {
        let started_at = now_ms();
        let finish = |outcome: Outcome| AttemptResult {
            key: spec.key.clone(),
            epoch: spec.epoch,
            task_name: spec.task_name.clone(),
            worker: self.inner.id.clone(),
            started_at,
            finished_at: now_ms(),
            outcome: storable_outcome(outcome),
            trace: None,
        };
        let plugin = match self.plugin(&spec.plugin.sha256).await {
            Ok(plugin) => plugin,
            Err(error) => {
                return finish(Outcome::Failed {
                    kind: FailureKind::PluginUnavailable,
                    message: format!("plugin {}@{}: {error}", spec.plugin.name, spec.plugin.version),
                });
            }
        };
        let network = match NetworkPolicy::allow(&spec.allow_hosts) {
            Ok(policy) => policy,
            Err(message) => {
                return finish(Outcome::Failed { kind: FailureKind::BadParams, message });
            }
        };
        let observer = Arc::new(AttemptLog::new(&spec.key, self.inner.logs.clone()));
        let keep_going = self.inner.keep_going.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let exec = Execution {
            context: AttemptContext {
                tenant: spec.tenant.clone(),
                workflow: spec.workflow.clone(),
                run_id: spec.key.run_id.clone(),
                task: spec.task_name.clone(),
                attempt: spec.key.number,
                logical_time: spec.logical_time.clone(),
                idempotency_key: spec.idempotency_key.clone(),
                grade: spec.grade,
            },
            params: spec.params.clone(),
            inputs: spec.inputs.clone(),
            limits: Limits {
                deadline: Duration::from_millis(spec.deadline_ms),
                memory_bytes: spec.memory_bytes,
                fuel: None,
                max_output_bytes: spec.max_output_bytes as usize,
                max_log_bytes: spec.max_log_bytes as usize,
                scratch_bytes: spec.scratch_bytes,
            },
            network,
            secrets: self.inner.secrets.as_ref().and_then(|s| s.secrets_for(&spec.tenant)),
            // An empty directory of the runtime's, under the tenant's own.
            scratch_dir: None,
            cancel: cancel.clone(),
            observer: Some(observer.clone()),
            keep_going: keep_going.clone(),
        };
        let report = self.inner.runtime.execute(&plugin, exec).await;
        observer.flush().await;
        let fenced = keep_going.as_ref().is_some_and(|ok| !ok());
        metrics::guest_used(&spec.plugin.name, &report);
        let elapsed = report.elapsed;
        let result = finish(match report.result {
            Ok(output) => Outcome::Succeeded { output },
            Err(failure) if fenced && failure.kind == dagr_runtime::FailureKind::Cancelled => {
                Outcome::Failed { kind: FailureKind::WorkerLost, message: failure.message }
            }
            Err(failure) => Outcome::Failed { kind: map_kind(failure.kind), message: failure.message },
        });
        metrics::attempt_ended(&spec.plugin.name, &result.outcome, elapsed);
        result
    }
}

/// An outcome whose failure message the store can hold: a task's error
/// text is the plugin's, and PostgreSQL's text cannot hold NUL (stored as
/// ␀, as in logs). An output is JSON, whose strings cannot hold a raw NUL.
fn storable_outcome(outcome: Outcome) -> Outcome {
    match outcome {
        Outcome::Failed { kind, message } if message.contains('\0') => {
            Outcome::Failed { kind, message: message.replace('\0', &dagr_store::NUL_STORED_AS.to_string()) }
        }
        other => other,
    }
}

/// A plugin being loaded (once) for the attempts that need it.
type Loading = Arc<OnceCell<Result<Plugin, PluginError>>>;

/// Why a worker has no plugin for an attempt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    /// No component with this hash is known (not published, or deleted).
    #[error("no component with sha256 {sha256} is available to this worker")]
    Missing { sha256: String },
    /// The component store failed (transient: the next attempt asks again).
    #[error("the component could not be fetched: {0}")]
    Source(String),
    /// The bytes fetched are not the component asked for.
    #[error("the component fetched for sha256 {asked} has sha256 {got}")]
    Mismatch { asked: String, got: String },
    /// The component does not load in this runtime.
    #[error("the component does not load: {0}")]
    Load(String),
}

fn map_kind(kind: dagr_runtime::FailureKind) -> FailureKind {
    use dagr_runtime::FailureKind as R;
    match kind {
        R::Retryable => FailureKind::Retryable,
        R::Fatal => FailureKind::Fatal,
        R::Trap => FailureKind::Trap,
        R::Timeout => FailureKind::Timeout,
        R::MemoryLimit => FailureKind::MemoryLimit,
        R::StackOverflow => FailureKind::StackOverflow,
        R::FuelExhausted => FailureKind::FuelExhausted,
        R::OutputTooLarge => FailureKind::OutputTooLarge,
        R::InvalidOutput => FailureKind::InvalidOutput,
        R::Cancelled => FailureKind::Cancelled,
        // The limit is the tenant's, and deterministic enough not to retry.
        R::ScratchQuota => FailureKind::Fatal,
        R::HandleLimit => FailureKind::HandleLimit,
        R::Internal => FailureKind::Internal,
    }
}

/// Progress reports of one attempt written to its log at most (the last
/// one is always written).
const MAX_PROGRESS_ROWS: u32 = 1000;

/// Progress reports closer together than this are not all written: the
/// latest one is, at most this late.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Longest progress message kept, in bytes.
const MAX_PROGRESS_MESSAGE: usize = 1024;

/// The log source of progress reports: a line `"<percent>% <message>"`.
pub const PROGRESS_SOURCE: &str = "progress";

/// Which progress reports reach the log.
#[derive(Default)]
struct ProgressGate {
    last_written: Option<std::time::Instant>,
    written: u32,
    /// The latest report, held back by [`PROGRESS_EVERY`].
    pending: Option<(String, i64)>,
}

/// Streams one attempt's log lines, and its progress reports, to the
/// [`LogWriter`].
struct AttemptLog {
    run_id: String,
    task: i64,
    attempt: i64,
    seq: AtomicI64,
    writer: LogWriter,
    progress: std::sync::Mutex<ProgressGate>,
}

impl AttemptLog {
    fn new(key: &AttemptKey, writer: LogWriter) -> Self {
        AttemptLog {
            run_id: key.run_id.clone(),
            task: key.task as i64,
            attempt: key.number as i64,
            seq: AtomicI64::new(0),
            writer,
            progress: Default::default(),
        }
    }

    fn write(&self, at: i64, source: String, level: String, message: String) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        self.writer.send(LogRow {
            run_id: self.run_id.clone(),
            task_idx: self.task,
            attempt: self.attempt,
            seq,
            at,
            source,
            level,
            message,
        });
    }

    /// Waits until every line so far is in the store (with the last
    /// progress report, if it was held back).
    async fn flush(&self) {
        let pending = self.progress.lock().unwrap_or_else(|e| e.into_inner()).pending.take();
        if let Some((message, at)) = pending {
            self.write(at, PROGRESS_SOURCE.into(), "info".into(), message);
        }
        if self.seq.load(Ordering::Relaxed) > 0 {
            self.writer.flush().await;
        }
    }
}

impl AttemptObserver for AttemptLog {
    fn log(&self, line: &LogLine) {
        self.write(line.at_ms, serde_plain(&line.source), line.level.as_str().into(), line.message.clone());
    }

    fn progress(&self, percent: u8, message: &str) {
        let mut cut = message.len().min(MAX_PROGRESS_MESSAGE);
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        let line = format!("{percent}% {}", &message[..cut]);
        let at = dagr_protocol::now_ms();
        let now = std::time::Instant::now();
        let mut gate = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        let due = gate.last_written.is_none_or(|last| now.duration_since(last) >= PROGRESS_EVERY);
        if (due || percent == 100) && gate.written < MAX_PROGRESS_ROWS {
            gate.last_written = Some(now);
            gate.written += 1;
            gate.pending = None;
            drop(gate);
            self.write(at, PROGRESS_SOURCE.into(), "info".into(), line);
        } else {
            gate.pending = Some((line, at));
        }
    }
}

fn serde_plain(source: &dagr_runtime::LogSource) -> String {
    match source {
        dagr_runtime::LogSource::Plugin => "plugin",
        dagr_runtime::LogSource::Stdout => "stdout",
        dagr_runtime::LogSource::Stderr => "stderr",
        dagr_runtime::LogSource::Dagr => "dagr",
    }
    .into()
}

enum LogMessage {
    Line(LogRow),
    Flush(oneshot::Sender<()>),
}

/// Batches log lines into the store. Cheap to clone.
#[derive(Clone)]
pub struct LogWriter {
    tx: mpsc::UnboundedSender<LogMessage>,
}

impl LogWriter {
    /// Starts the writer task.
    pub fn start(store: Arc<dyn Store>) -> LogWriter {
        let (tx, mut rx) = mpsc::unbounded_channel::<LogMessage>();
        tokio::spawn(async move {
            let mut buffer: Vec<LogRow> = Vec::new();
            let mut waiters: Vec<oneshot::Sender<()>> = Vec::new();
            loop {
                // Wait for something, then take what else is there (up to a
                // short linger so lines of a busy attempt go out together).
                let first = if buffer.is_empty() {
                    match rx.recv().await {
                        Some(m) => Some(m),
                        None => break,
                    }
                } else {
                    tokio::time::timeout(Duration::from_millis(100), rx.recv()).await.ok().flatten()
                };
                let mut flush_now = first.is_none();
                let mut closed = false;
                let mut take = |m: LogMessage, buffer: &mut Vec<LogRow>, waiters: &mut Vec<_>| match m {
                    LogMessage::Line(row) => buffer.push(row),
                    LogMessage::Flush(done) => {
                        waiters.push(done);
                        flush_now = true;
                    }
                };
                if let Some(m) = first {
                    take(m, &mut buffer, &mut waiters);
                }
                loop {
                    match rx.try_recv() {
                        Ok(m) => take(m, &mut buffer, &mut waiters),
                        Err(mpsc::error::TryRecvError::Empty) => break,
                        Err(mpsc::error::TryRecvError::Disconnected) => {
                            closed = true;
                            break;
                        }
                    }
                }
                if flush_now || closed || buffer.len() >= 1000 {
                    let lines = std::mem::take(&mut buffer);
                    let append = |lines: Vec<LogRow>| {
                        let store = store.clone();
                        async move { store.append_logs(lines).await }
                    };
                    logs::write_all(lines, append, dagr_store::Error::is_refused_data).await;
                    for done in waiters.drain(..) {
                        let _ = done.send(());
                    }
                }
                if closed {
                    break;
                }
            }
        });
        LogWriter { tx }
    }

    fn send(&self, row: LogRow) {
        let _ = self.tx.send(LogMessage::Line(row));
    }

    async fn flush(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(LogMessage::Flush(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}
