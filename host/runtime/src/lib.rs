//! dagr's WebAssembly runtime: it loads plugin components and runs attempts
//! of tasks in a sandbox with hard limits.
//!
//! # Brief overview
//!
//! - [`Runtime`] owns one wasmtime `Engine` (component model, async, pooling
//!   allocator, epoch interruption), one `Linker` with WASI p2, `wasi:http`
//!   and the `dagr:plugin/host` interface, a compiled-code cache, and a
//!   separate tokio runtime on which guests run. Guests never run on the
//!   caller's threads: a guest spinning in a loop cannot delay the scheduler,
//!   the API or a timer. Those threads also run at a lower OS priority.
//! - [`Runtime::load`] turns bytes into a [`Plugin`]: it rejects files that
//!   are not components or do not implement the world (saying which, and what
//!   is missing), compiles (or loads from the cache), pre-instantiates
//!   (`InstancePre`) and calls `describe` once.
//! - [`Runtime::execute`] runs one attempt of a task described by an
//!   [`Execution`]: a fresh `Store`, [`Limits`] (deadline, memory, fuel,
//!   output and log size), a [`NetworkPolicy`], a scratch directory, secrets
//!   and a cancellation token. It always returns an [`AttemptReport`]; a trap,
//!   a deadline, the memory cap or a stack overflow becomes a [`Failure`] with
//!   a distinct [`FailureKind`], never a panic or an error of the process.
//!
//! ```no_run
//! # async fn demo(bytes: Vec<u8>) -> Result<(), Box<dyn std::error::Error>> {
//! use dagr_runtime::{AttemptContext, Execution, Runtime, RuntimeConfig};
//!
//! let runtime = Runtime::new(RuntimeConfig::default())?;
//! let plugin = runtime.load(&bytes)?;
//! let exec = Execution::new(AttemptContext::adhoc("demo"), r#"{"hello":"world"}"#);
//! let report = runtime.execute(&plugin, exec).await;
//! match report.result {
//!     Ok(output) => println!("{output}"),
//!     Err(failure) => println!("{}: {}", failure.kind, failure.message),
//! }
//! # Ok(()) }
//! ```

mod attempt;
mod bindings;
mod cache;
mod guest;
mod info;
mod limits;
mod log;
mod network;
mod outcome;
mod outgoing;
mod sandbox;
mod scratch;
mod setup;
mod ticker;
mod tree;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use wasmtime::component::{HasSelf, Linker, ResourceTable, ResourceTableError};
use wasmtime::{Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap, UpdateDeadline};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};
use wasmtime_wasi_http::WasiHttpCtx;

pub use crate::attempt::*;
pub use crate::cache::{CodeSource, sha256_hex};
pub use crate::guest::GuestLanguage;
pub use crate::limits::Limits;
pub use crate::log::{LogLevel, LogLine, LogSource};
pub use crate::network::{HostPattern, NetworkPolicy};
pub use dagr_core::net::is_public;

use crate::bindings::PluginPre;
use crate::cache::CodeCache;
use crate::info::*;
use crate::limits::{AttemptLimiter, MemoryLimitExceeded};
use crate::log::{AttemptLog, CapturedOutput};
use crate::outcome::*;
use crate::sandbox::{HostState, HttpPolicyHooks, StoreState};
pub use crate::scratch::SCRATCH_CHECK;
use crate::scratch::{ScratchCaps, ScratchDirs};
use crate::setup::*;
pub use crate::setup::{DEFAULT_HTTP_FIELD_BYTES, DEFAULT_MAX_HANDLES, NODE_DESCRIPTORS, reserve_descriptors};
use crate::ticker::*;

/// Errors from building a runtime or loading a plugin.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("not a WebAssembly file ({0})")]
    NotWasm(String),
    #[error(
        "this is a core WebAssembly module, not a component: build the plugin for the \
         wasm32-wasip2 target (or wrap the module with `wasm-tools component new`)"
    )]
    CoreModule,
    #[error("not a valid WebAssembly component: {0}")]
    InvalidComponent(String),
    #[error("the component does not implement the dagr:plugin@0.1.0 world: {0}")]
    WrongWorld(String),
    #[error("the plugin's describe() failed: {0}")]
    Describe(String),
    #[error("the plugin describes itself wrongly: {0}")]
    BadInfo(String),
    #[error("compiled-code cache {path}: {message}")]
    Cache { path: PathBuf, message: String },
    #[error("runtime configuration: {0}")]
    Config(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Settings of a [`Runtime`]; they hold for every attempt it runs.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Attempts that may run at once; more wait for a slot. This also sizes
    /// the pooling allocator.
    pub max_concurrent_attempts: u32,
    /// OS threads that run guests. They are separate from the caller's.
    pub guest_threads: usize,
    /// How often running guests are interrupted to check their deadline and
    /// to yield to other guests.
    pub epoch_tick: Duration,
    /// Upper bound of any attempt's linear memory (the pooling allocator's
    /// slot size). Per-attempt [`Limits::memory_bytes`] can only be lower.
    pub max_memory_bytes: u64,
    /// Meter fuel, so that [`Limits::fuel`] is honoured (costs some speed).
    pub fuel: bool,
    /// Where compiled code is cached; `None` compiles every load.
    pub cache_dir: Option<PathBuf>,
    /// Where per-attempt scratch directories are created when an execution
    /// does not bring its own.
    pub scratch_root: PathBuf,
    /// Niceness added to guest threads so that the OS favours the host's.
    pub guest_nice: i32,
    /// Take instances from a pool reserved up front (fast instantiation, but
    /// several GiB of address space per memory slot), or allocate each one
    /// on demand with small reservations (bounds-checked memory). Off only
    /// for processes that run under an address-space limit, like the one
    /// that compiles uploads (`dagr plugin inspect`). Code compiled one way
    /// is not reused by the other: the cache keys them apart.
    pub pooling: bool,
    /// A PEM file of certificate authorities that plugins' `https`
    /// requests trust besides webpki's roots (say, a company's internal
    /// CA). Read when the runtime starts.
    pub extra_ca_file: Option<PathBuf>,
    /// The most files and directories an attempt's scratch directory may
    /// hold, whatever its tenant's byte quota (100,000 empty files cost
    /// inodes, not bytes).
    pub scratch_max_entries: u64,
    /// How deep an attempt may nest directories in its scratch directory.
    pub scratch_max_depth: u64,
    /// The most resources an attempt may hold at once: open files and
    /// directories (each a real descriptor of the node), streams,
    /// pollables, HTTP fields, requests and responses. The WASI context's
    /// own (stdio, preopens) count too.
    pub max_handles: usize,
    /// The most bytes one HTTP `fields` resource (a request's or response's
    /// headers) may take in the host's memory. With `max_handles` it bounds
    /// what a guest can make the host hold outside its memory cap.
    pub http_field_bytes: usize,
    /// How deeply a task's output may nest JSON arrays and objects (a
    /// deeper output fails the attempt: dependents and the API could not
    /// parse it).
    pub max_output_depth: usize,
    /// The scratch root is this runtime's alone (a node's data directory):
    /// what an earlier process left there is removed at start.
    pub scratch_exclusive: bool,
    /// Bytes at the start of each linear memory that a pool slot keeps
    /// resident between attempts (reset in place instead of given back to
    /// the kernel). Larger values spare big guests (Python, JavaScript:
    /// 9-13 MiB of initial memory) page faults on every attempt, at the
    /// price of that much resident memory per idle slot that ran one.
    pub memory_keep_resident: usize,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            max_concurrent_attempts: 1024,
            guest_threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2),
            epoch_tick: Duration::from_millis(1),
            max_memory_bytes: 1 << 30,
            fuel: false,
            cache_dir: None,
            scratch_root: std::env::temp_dir().join("dagr-scratch"),
            guest_nice: 10,
            pooling: true,
            extra_ca_file: None,
            scratch_max_entries: 10_000,
            scratch_max_depth: 64,
            max_handles: DEFAULT_MAX_HANDLES,
            http_field_bytes: DEFAULT_HTTP_FIELD_BYTES,
            max_output_depth: dagr_core::document::DEFAULT_MAX_DEPTH,
            scratch_exclusive: false,
            memory_keep_resident: KEEP_RESIDENT,
        }
    }
}

/// A loaded, pre-instantiated plugin. Cheap to clone.
#[derive(Clone)]
pub struct Plugin {
    inner: Arc<PluginInner>,
}

struct PluginInner {
    info: PluginInfo,
    sha256: String,
    size: usize,
    code_source: CodeSource,
    pre: PluginPre<StoreState>,
    /// The component imports `wasi:filesystem/preopens`, its only way to a
    /// directory: one that does not (most task types) gets no scratch
    /// directory, which spares each attempt two opens and two closes of it.
    files: bool,
    /// What its toolchain says it was written in: traps are reported in
    /// that language's words.
    language: GuestLanguage,
}

impl Plugin {
    pub fn info(&self) -> &PluginInfo {
        &self.inner.info
    }

    /// sha256 of the component's bytes, hex.
    pub fn sha256(&self) -> &str {
        &self.inner.sha256
    }

    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// The language the component's toolchain says it was written in.
    pub fn language(&self) -> GuestLanguage {
        self.inner.language
    }

    /// Whether loading compiled the component or found it in the cache.
    pub fn code_source(&self) -> CodeSource {
        self.inner.code_source
    }
}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin").field("info", &self.inner.info).field("sha256", &self.inner.sha256).finish()
    }
}

/// The WebAssembly runtime. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<RuntimeInner>,
}

/// Tells runtimes apart on their guest threads.
static NEXT_RUNTIME_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

thread_local! {
    /// The runtime whose guest thread this is (0: none).
    static GUEST_THREAD_OF: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

struct RuntimeInner {
    engine: Engine,
    linker: Linker<StoreState>,
    cache: Option<CodeCache>,
    scratch: ScratchDirs,
    slots: Arc<Semaphore>,
    guests: Option<tokio::runtime::Runtime>,
    /// What the guest threads' [`GUEST_THREAD_OF`] says.
    guest_id: u64,
    ticker: Arc<Ticker>,
    tls: Arc<rustls::ClientConfig>,
    config: RuntimeConfig,
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        self.ticker.stop();
        // `shutdown_background` does not block, so a runtime may be dropped
        // from async code.
        if let Some(guests) = self.guests.take() {
            guests.shutdown_background();
        }
    }
}

/// Why the epoch callback stopped a guest.
#[derive(Debug, thiserror::Error)]
enum Interrupted {
    #[error("the attempt's deadline passed")]
    Deadline,
    #[error("the attempt was cancelled")]
    Cancelled,
    #[error("the worker may no longer act")]
    Fenced,
}

/// How long a cancelled attempt may take to notice `cancelled()` and return
/// by itself before it is stopped. Long enough for a task that checks every
/// 50 ms (like `sleep`), short enough that a kill is still prompt.
const CANCEL_GRACE: Duration = Duration::from_millis(200);

/// Limits for calling `describe` while loading: it must be quick and small.
fn describe_limits() -> Limits {
    Limits {
        deadline: Duration::from_secs(5),
        memory_bytes: 64 << 20,
        fuel: None,
        max_output_bytes: 256 << 10,
        max_log_bytes: 16 << 10,
        scratch_bytes: None,
    }
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Result<Self> {
        if config.max_concurrent_attempts == 0 {
            return Err(Error::Config("max_concurrent_attempts must be at least 1".into()));
        }
        if config.epoch_tick.is_zero() {
            return Err(Error::Config("epoch_tick must be positive".into()));
        }
        let scratch = ScratchDirs::new(config.scratch_root.clone(), config.max_concurrent_attempts as usize);
        if config.scratch_exclusive {
            scratch.exclusive().map_err(|e| {
                Error::Config(format!("cannot take over the scratch root {}: {e}", config.scratch_root.display()))
            })?;
        }
        let engine = build_engine(&config)?;
        let mut linker = Linker::new(&engine);
        let link = |e: wasmtime::Error| Error::Config(format!("cannot link host interfaces: {e}"));
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(link)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(link)?;
        bindings::Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).map_err(link)?;

        let cache = match &config.cache_dir {
            Some(dir) => Some(CodeCache::open(dir, &engine)?),
            None => None,
        };
        let tls = outgoing::tls_config(config.extra_ca_file.as_deref())
            .map_err(|e| Error::Config(format!("TLS for plugins' HTTPS: {e}")))?;

        let nice = config.guest_nice;
        let guest_id = NEXT_RUNTIME_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let guests = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.guest_threads.max(1))
            .thread_name("dagr-guest")
            // Poll timers and sockets every few guest polls, not every 61
            // (tokio's default): a guest poll can last a whole epoch tick, so
            // among spinning guests a sleeping or waiting one would otherwise
            // notice its wake-up tens of milliseconds late.
            .event_interval(4)
            .enable_all()
            .on_thread_start(move || {
                lower_thread_priority(nice);
                GUEST_THREAD_OF.set(guest_id);
            })
            .build()
            .map_err(|e| Error::Config(format!("cannot start the guest threads: {e}")))?;

        let ticker = Arc::new(Ticker::default());
        {
            let engine = engine.clone();
            let ticker = ticker.clone();
            let tick = config.epoch_tick;
            std::thread::Builder::new()
                .name("dagr-epoch".into())
                .spawn(move || {
                    let mut idle_ticks = 0;
                    while ticker.wait_for_work(&mut idle_ticks) {
                        std::thread::sleep(tick);
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| Error::Config(format!("cannot start the epoch thread: {e}")))?;
        }

        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                engine,
                linker,
                cache,
                scratch,
                slots: Arc::new(Semaphore::new(config.max_concurrent_attempts as usize)),
                guests: Some(guests),
                guest_id,
                ticker,
                tls,
                config,
            }),
        })
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// Attempts running or waiting for a slot right now.
    pub fn busy_slots(&self) -> usize {
        self.inner.config.max_concurrent_attempts as usize - self.inner.slots.available_permits()
    }

    /// Loads a plugin from the bytes of a component.
    ///
    /// This compiles the component (unless the cache has it), which can take
    /// a while for big components: call it from a blocking context or
    /// `spawn_blocking`.
    /// Whether loading `bytes` would take the machine code from the on-disk
    /// cache instead of compiling (false without a cache).
    pub fn is_cached(&self, bytes: &[u8]) -> bool {
        self.is_cached_sha256(&sha256_hex(bytes))
    }

    /// [`Runtime::is_cached`] for the component with this hash.
    pub fn is_cached_sha256(&self, sha256: &str) -> bool {
        self.inner.cache.as_ref().is_some_and(|cache| cache.contains(sha256))
    }

    /// What the component with this hash said of itself when this runtime's
    /// code cache last loaded it, without loading it (None: no cache, or
    /// never loaded with it).
    pub fn cached_info(&self, sha256: &str) -> Option<PluginInfo> {
        self.inner.cache.as_ref()?.get_info(sha256)
    }

    pub fn load(&self, bytes: &[u8]) -> Result<Plugin> {
        check_header(bytes)?;
        let sha256 = sha256_hex(bytes);
        let (component, code_source) = cache::compile(&self.inner.engine, self.inner.cache.as_ref(), bytes)
            .map_err(|e| Error::InvalidComponent(error_chain(&e)))?;
        let pre =
            self.inner.linker.instantiate_pre(&component).map_err(|e| Error::WrongWorld(explain_link_error(&e)))?;
        let pre = PluginPre::new(pre).map_err(|e| Error::WrongWorld(explain_export_error(&e)))?;
        let info = self.describe(&pre)?;
        if let Some(cache) = &self.inner.cache
            && cache.get_info(&sha256).as_ref() != Some(&info)
        {
            cache.put_info(&sha256, &info);
        }
        let files = imports_preopens(&self.inner.engine, &component);
        let language = GuestLanguage::detect(bytes);
        Ok(Plugin {
            inner: Arc::new(PluginInner { info, sha256, size: bytes.len(), code_source, pre, files, language }),
        })
    }

    /// Loads a plugin from a file.
    pub fn load_file(&self, path: &Path) -> Result<Plugin> {
        let bytes = std::fs::read(path).map_err(|e| Error::NotWasm(format!("cannot read {}: {e}", path.display())))?;
        self.load(&bytes)
    }

    fn describe(&self, pre: &PluginPre<StoreState>) -> Result<PluginInfo> {
        let limits = describe_limits();
        let log = AttemptLog::new(limits.max_log_bytes, None);
        let cancel = CancellationToken::new();
        let mut store = self.new_store(&limits, &log, &cancel, NetworkPolicy::deny_all(), None, None, None)?;
        let deadline = Instant::now() + limits.deadline;
        self.arm_epoch(&mut store, deadline, cancel, None);
        let pre = pre.clone();
        // `describe` is synchronous for callers; run it on the guest threads.
        let guests = self.guests();
        let call = async move {
            let instance = pre.instantiate_async(&mut store).await?;
            instance.dagr_plugin_task().call_describe(&mut store).await
        };
        let outcome = std::thread::scope(|scope| {
            scope.spawn(|| guests.block_on(async { tokio::time::timeout(limits.deadline, call).await })).join()
        });
        let info = match outcome {
            Ok(Ok(Ok(info))) => info,
            Ok(Ok(Err(e))) => return Err(Error::Describe(error_chain(&e))),
            Ok(Err(_)) => return Err(Error::Describe("it did not return within 5 s".into())),
            Err(_) => {
                return Err(Error::Describe("internal error while calling describe".into()));
            }
        };
        validate_info(info)
    }

    /// Runs `work` on the guest threads: the work around an attempt (its
    /// plugin, its log, its report), so that [`Runtime::execute`] in it
    /// runs the attempt on the thread it is on, with no second task and no
    /// hand-off between runtimes, and the caller's runtime does none of it.
    pub fn spawn_on_guests<F>(&self, work: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        // Boxed: the work around an attempt is a future of several KB,
        // which spawning would move through several frames.
        self.guests().spawn(Box::pin(work));
    }

    fn guests(&self) -> tokio::runtime::Handle {
        match &self.inner.guests {
            Some(rt) => rt.handle().clone(),
            // Only `Drop` takes the runtime out, and `self` is alive here.
            None => unreachable!("guest runtime is present until drop"),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn new_store(
        &self,
        limits: &Limits,
        log: &AttemptLog,
        cancel: &CancellationToken,
        network: NetworkPolicy,
        scratch: Option<&Path>,
        secrets: Option<Arc<dyn SecretSource>>,
        observer: Option<Arc<dyn AttemptObserver>>,
    ) -> Result<Store<StoreState>> {
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(CapturedOutput::new(log.clone(), LogSource::Stdout));
        wasi.stderr(CapturedOutput::new(log.clone(), LogSource::Stderr));
        if let Some(dir) = scratch {
            for guest_path in ["/scratch", "."] {
                wasi.preopened_dir(dir, guest_path, FsPerms::ReadWrite)
                    .map_err(|e| Error::Config(format!("cannot open the scratch directory {}: {e}", dir.display())))?;
            }
        }
        let state = StoreState {
            _ticking: Ticking::new(&self.inner.ticker),
            wasi: wasi.build(),
            http: {
                let mut http = WasiHttpCtx::new();
                http.set_field_size_limit(self.inner.config.http_field_bytes);
                http
            },
            table: {
                let mut table = ResourceTable::new();
                table.set_max_capacity(self.inner.config.max_handles);
                table
            },
            hooks: HttpPolicyHooks {
                policy: Arc::new(network),
                log: log.clone(),
                keep_going: None,
                tls: self.inner.tls.clone(),
            },
            limiter: AttemptLimiter::new(limits.memory_bytes.min(self.inner.config.max_memory_bytes)),
            host: HostState {
                log: log.clone(),
                cancel: cancel.clone(),
                secrets,
                observer,
                progress: Arc::new(Mutex::new(None)),
                grade: 0,
            },
        };
        let mut store = Store::new(&self.inner.engine, state);
        store.limiter(|state| &mut state.limiter);
        if self.inner.config.fuel {
            store
                .set_fuel(limits.fuel.unwrap_or(u64::MAX))
                .map_err(|e| Error::Config(format!("cannot set fuel: {e}")))?;
        }
        Ok(store)
    }

    /// Makes the guest stop at the deadline, or [`CANCEL_GRACE`] after it
    /// was cancelled, and yield to other guests after every tick it runs.
    ///
    /// The epoch deadline is only renewed here, so a guest that comes back
    /// from a long host call (a timer, a socket) finds it long passed. Such
    /// a guest was not running: it gets a fresh tick instead of being sent
    /// to the back of the run queue the moment it resumes, which among
    /// spinning guests would delay it by a whole round.
    fn arm_epoch(
        &self,
        store: &mut Store<StoreState>,
        deadline: Instant,
        cancel: CancellationToken,
        keep_going: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
    ) {
        store.set_epoch_deadline(1);
        let tick = self.inner.config.epoch_tick;
        let renewed = Arc::new(Mutex::new(Instant::now()));
        let mut cancel_seen: Option<Instant> = None;
        store.epoch_deadline_callback(move |_| {
            let now = Instant::now();
            if keep_going.as_ref().is_some_and(|ok| !ok()) {
                return Err(Interrupted::Fenced.into());
            }
            if cancel.is_cancelled() && now.duration_since(*cancel_seen.get_or_insert(now)) >= CANCEL_GRACE {
                return Err(Interrupted::Cancelled.into());
            }
            if now >= deadline {
                return Err(Interrupted::Deadline.into());
            }
            let mut last = renewed.lock().unwrap_or_else(|e| e.into_inner());
            if now.duration_since(*last) >= 2 * tick {
                *last = now;
                return Ok(UpdateDeadline::Continue(1));
            }
            drop(last);
            let renewed = renewed.clone();
            Ok(UpdateDeadline::YieldCustom(
                1,
                Box::pin(async move {
                    yield_to_other_guests().await;
                    *renewed.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
                }),
            ))
        });
    }

    /// Runs one attempt. Never fails: every problem is in the report.
    ///
    /// The attempt runs on the runtime's own guest threads: on the calling
    /// thread if it is one of them ([`Runtime::spawn_on_guests`]), else in
    /// a task of theirs that this future waits for. Dropping this future
    /// cancels the attempt.
    pub async fn execute(&self, plugin: &Plugin, exec: Execution) -> AttemptReport {
        let cancel = exec.cancel.clone();
        let permit = tokio::select! {
            permit = self.inner.slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return failed_before_start(Failure::new(FailureKind::Internal, "the runtime is shutting down")),
            },
            _ = cancel.cancelled() => {
                return failed_before_start(Failure::new(FailureKind::Cancelled, "cancelled before it started"));
            }
        };
        // The attempt starts when it has a slot: its deadline includes any
        // wait for a guest thread (as `AttemptReport::elapsed` says).
        let started = Instant::now();
        if GUEST_THREAD_OF.get() == self.inner.guest_id {
            let _permit = permit;
            // As a task of its own would: a panic in the attempt's host code
            // fails the attempt instead of ending its caller's task unheard.
            return caught(Box::pin(self.run_attempt(plugin, exec, started))).await.unwrap_or_else(|message| {
                failed_before_start(Failure::new(
                    FailureKind::Internal,
                    format!("the attempt's host task failed: it panicked: {message}"),
                ))
            });
        }
        let runtime = self.clone();
        let plugin = plugin.clone();
        let fut = async move {
            let _permit = permit;
            runtime.run_attempt(&plugin, exec, started).await
        };
        // Boxed: the future is ~3 KB, and spawning moves it through several
        // frames; a pointer moves instead.
        let task = self.guests().spawn(Box::pin(fut));
        let guard = AbortOnDrop(task.abort_handle());
        let report = match task.await {
            Ok(report) => report,
            Err(e) => {
                failed_before_start(Failure::new(FailureKind::Internal, format!("the attempt's host task failed: {e}")))
            }
        };
        drop(guard);
        report
    }

    async fn run_attempt(&self, plugin: &Plugin, exec: Execution, started: Instant) -> AttemptReport {
        let Execution { context, params, inputs, limits, network, secrets, scratch_dir, cancel, observer, keep_going } =
            exec;
        let log = AttemptLog::new(limits.max_log_bytes, observer.clone());

        let scratch = match plugin.inner.files.then(|| self.inner.scratch.take(scratch_dir, &context.tenant)) {
            None => None,
            Some(Ok(scratch)) => Some(scratch),
            Some(Err(message)) => {
                return finish(&log, Err(Failure::new(FailureKind::Internal, message)), started, None, None);
            }
        };
        let scratch_path = scratch.as_ref().map(|s| s.path());
        let mut store = match self.new_store(&limits, &log, &cancel, network, scratch_path, secrets, observer) {
            Ok(mut store) => {
                store.data_mut().hooks.keep_going = keep_going.clone();
                store.data_mut().host.grade = context.grade;
                store
            }
            Err(e) => {
                return finish(&log, Err(Failure::new(FailureKind::Internal, e.to_string())), started, None, None);
            }
        };
        let progress = store.data().host.progress.clone();
        let deadline = started + limits.deadline;
        self.arm_epoch(&mut store, deadline, cancel.clone(), keep_going);
        let caps = ScratchCaps {
            quota: limits.scratch_bytes,
            max_entries: self.inner.config.scratch_max_entries,
            max_depth: self.inner.config.scratch_max_depth,
        };
        let watch = scratch_path.map(|path| scratch::Watch::start(path, caps, &cancel));

        let wit_context = bindings::TaskContext {
            tenant: context.tenant,
            workflow: context.workflow,
            run_id: context.run_id,
            task: context.task,
            attempt: context.attempt,
            logical_time: context.logical_time,
            idempotency_key: context.idempotency_key,
        };
        // A guest blocked in a host call (a timer, a socket) never reaches an
        // epoch check, so the deadline and cancellation also race the call.
        // After a cancellation the task gets a moment to see `cancelled()`
        // and return by itself (the WIT promises that it can), then it is
        // stopped (the epoch callback enforces the same grace on a guest
        // that keeps computing).
        let mut instantiate = None;
        let (outcome, cancelled) = {
            let mut call = std::pin::pin!(async {
                let begun = Instant::now();
                let instance = plugin.inner.pre.instantiate_async(&mut store).await?;
                instantiate = Some(begun.elapsed());
                instance.dagr_plugin_task().call_run(&mut store, &wit_context, &params, &inputs).await
            });
            // A guest that waited in the run queue past its deadline is
            // stopped at once instead of being resumed until the next tick:
            // when many spin, that is what keeps the deadline tight.
            let until_deadline = std::future::poll_fn(|cx| {
                if Instant::now() >= deadline {
                    return std::task::Poll::Ready(Err(Interrupted::Deadline.into()));
                }
                call.as_mut().poll(cx)
            });
            tokio::select! {
                outcome = until_deadline => (outcome, false),
                _ = tokio::time::sleep_until(deadline.into()) => (Err(Interrupted::Deadline.into()), false),
                _ = cancel.cancelled() => {
                    let grace_end = (Instant::now() + CANCEL_GRACE).min(deadline);
                    match tokio::time::timeout_at(grace_end.into(), &mut call).await {
                        Ok(outcome) => (outcome, true),
                        Err(_) => (Err(Interrupted::Cancelled.into()), true),
                    }
                }
            }
        };
        // A guest that saw `cancelled()` turn true may return before the
        // select above notices the cancellation: it was cancelled all the same.
        let cancelled = cancelled || cancel.is_cancelled();
        // Whether the guest's `run` returned, rather than being stopped.
        let returned = outcome.is_ok();
        let mut result = match outcome {
            Ok(Ok(output)) => check_output(&log, output, &limits, self.inner.config.max_output_depth),
            Ok(Err(bindings::TaskError::Retryable(m))) => {
                Err(Failure::new(FailureKind::Retryable, log.redact_text(&m)))
            }
            Ok(Err(bindings::TaskError::Fatal(m))) => Err(Failure::new(FailureKind::Fatal, log.redact_text(&m))),
            Err(e) => Err(classify_error(&e, &limits, &log, plugin.inner.language, &self.inner.config)),
        };
        if cancelled {
            result = Err(cancelled_failure(result));
        }
        if let (Some(watch), Some(scratch)) = (watch, &scratch)
            && let Some(failure) = watch.finish(scratch).await
        {
            result = Err(failure);
        }
        let fuel_consumed = match (self.inner.config.fuel, store.get_fuel()) {
            (true, Ok(left)) => Some(limits.fuel.unwrap_or(u64::MAX) - left),
            _ => None,
        };
        let memory_bytes = store.data().limiter.memory_used();
        drop(store);
        if let Some(scratch) = scratch {
            self.inner.scratch.give_back(scratch, returned).await;
        }
        let progress = progress.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut report = finish(&log, result, started, progress, fuel_consumed);
        report.instantiate = instantiate;
        report.memory_bytes = memory_bytes;
        report
    }
}

/// Returns `Pending` once, waking itself: the guest thread's scheduler puts
/// the task at the back of its queue (as wasmtime's own yield does;
/// `tokio::task::yield_now` defers the wake-up, and such a task may run
/// again first).
async fn yield_to_other_guests() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests;
