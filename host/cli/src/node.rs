//! One node with every role: store, runtime, worker, engine and API in one
//! process (`dagr serve`, `dagr bench`, and tests).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use async_trait::async_trait;
use dagr_config::Settings;
use dagr_master::{Accepted, Adoption, DispatchError, Engine, EngineConfig, EngineHandle, Transport, WorkerInfo};
use dagr_protocol::sealed::SecretKey;
use dagr_protocol::wire::{AttemptKey, AttemptResult, AttemptSpec};
use dagr_runtime::{Runtime, RuntimeConfig};
use dagr_store::{SqlStore, Synchronous};
use dagr_worker::{BuiltinPlugins, LogWriter, Registry, Reporter, Worker};
use tokio::sync::oneshot;

/// How often the engine re-reads tenants' limits (it also does when the
/// API changes one).
pub const POLICY_REFRESH: std::time::Duration = std::time::Duration::from_secs(5);

/// A running node.
pub struct Node {
    pub addr: SocketAddr,
    /// Held while the node runs: the data directory's lock.
    _lock: std::fs::File,
    pub engine: EngineHandle,
    pub worker: Worker,
    /// Tokens made at this start (the admin token, the `default` tenant's
    /// first one), to show once.
    pub bootstrap: dagr_api::auth::Bootstrapped,
    stop: Option<oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<()>,
    /// Set to false to stop delivering webhooks.
    delivering: tokio::sync::watch::Sender<bool>,
}

impl Node {
    /// Starts every role and the HTTP API on `settings.listen` (port 0
    /// picks a free one).
    ///
    /// The listener is bound as soon as the store is open and the tokens
    /// exist: from then on `/healthz` answers, and says what the node is
    /// doing while it starts (on a fresh data directory it compiles the
    /// built-in plugins, which takes seconds); other requests wait for it
    /// ([`dagr_api::gate`]).
    pub async fn start(settings: &Settings) -> anyhow::Result<Node> {
        let lock = lock_data_dir(&settings.data_dir)?;
        // The tokens' files exist before anything answers.
        let store = open_store(settings).await?;
        let bootstrap =
            dagr_api::auth::bootstrap(store.as_ref(), &settings.data_dir, settings.admin_token.as_deref(), true)
                .await
                .context("cannot set up the API tokens")?;
        let listener = tokio::net::TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        let addr = listener.local_addr()?;
        let (gate, service) = dagr_api::gate::Gate::new("loading the plugins");
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            if let Err(e) = axum::serve(listener, service).with_graceful_shutdown(shutdown).await {
                tracing::error!(error = %e, "the HTTP server stopped");
            }
        });
        match Node::assemble(settings, store, &gate).await {
            Ok((api, engine, worker, delivering)) => {
                gate.ready(api);
                Ok(Node { addr, _lock: lock, engine, worker, bootstrap, stop: Some(stop), server, delivering })
            }
            Err(e) => {
                server.abort();
                Err(e)
            }
        }
    }

    /// Everything behind the listener: the plugins, the worker, the engine
    /// and the API's router.
    async fn assemble(
        settings: &Settings,
        store: Arc<SqlStore>,
        gate: &dagr_api::gate::Gate,
    ) -> anyhow::Result<(axum::Router, EngineHandle, Worker, tokio::sync::watch::Sender<bool>)> {
        let key = secrets_key(settings, true)?;
        let secrets = Arc::new(crate::secrets::StoreSecrets::new(store.clone(), key.clone()));
        let runtime = make_runtime(settings, settings.slots, true)?;
        let plugins = load_plugins(&runtime, settings, store.clone(), |doing| gate.doing(doing)).await?;
        gate.doing("starting the engine");
        let inspector = inspector(settings)?;
        let logs = LogWriter::start(store.clone());
        let worker = Worker::new("local", runtime, plugins.clone(), Some(secrets), logs);
        worker.precompile_with(Arc::new(ChildCompiler(inspector.clone())));
        let policy = dagr_master::StorePolicy::load(store.clone()).await.context("cannot read the tenants")?;
        policy.spawn_refresh(POLICY_REFRESH);
        let reporter = Arc::new(LateReporter::default());
        let transport = Arc::new(LocalTransport { worker: worker.clone(), reporter: reporter.clone() });
        let engine_config = EngineConfig {
            node_id: "local".into(),
            default_timeout: settings.default_timeout,
            default_memory: settings.default_memory,
            max_memory: settings.max_memory,
            max_output_bytes: settings.max_output,
            max_log_bytes: settings.max_log,
            max_params_bytes: settings.max_params,
            // The data directory is locked to this process: with SQLite
            // nobody else can write, so the epoch check can be skipped.
            fence_writes: !settings.store_url.starts_with("sqlite://"),
            policy,
            max_lost_attempts: settings.max_lost_attempts,
            max_catch_up: settings.max_catch_up,
            catch_up_per_second: settings.catch_up_per_second,
            step_task_changes: settings.step_task_changes as usize,
            takeover_wakes_per_step: settings.takeover_wakes_per_step as usize,
            max_in_flight: worker.slots(),
            ..EngineConfig::default()
        };
        let versions = engine_config.versions.clone();
        let engine = Engine::start(engine_config, store.clone(), transport, plugins.clone()).await?;
        reporter.connect(engine.clone());
        dagr_worker::metrics::register(&worker);
        // One node delivers every webhook.
        let (delivering, deliver) = tokio::sync::watch::channel(true);
        start_outbox(settings, store.clone(), key.clone(), deliver, engine.events_committed());
        // One worker, in this process, for every group.
        engine.workers(vec![WorkerInfo {
            id: worker.id().to_owned(),
            capacity: worker.slots() as u32,
            group: None,
            any_group: true,
            lease: 0,
        }]);
        // One node owns every slot and leads; taking the slots over is how
        // it recovers the runs of a previous process.
        engine.own_slots((0..dagr_protocol::SLOTS).collect());
        engine.lead(Some(dagr_protocol::now_ms()));

        let mut state = dagr_api::ApiState::new(
            store.clone(),
            Arc::new(engine.clone()),
            plugins,
            api_config(settings, key, inspector)?,
        );
        // One copy of each validated workflow for the API and the engine.
        state.versions = versions;
        // Event streams read what the engine commits at once.
        state.events.nudged_by(engine.events_committed());
        Ok((dagr_api::router(state), engine, worker, delivering))
    }

    /// Stops the API and the engine.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.server).await;
        let _ = self.delivering.send(false);
        self.engine.shutdown().await;
        self.worker.cancel_all();
    }
}

/// Makes sure no other `dagr serve` uses this data directory.
fn lock_data_dir(dir: &std::path::Path) -> anyhow::Result<std::fs::File> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    let path = dir.join("dagr.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            anyhow::bail!(
                "another dagr process uses the data directory {} (it holds {})",
                dir.display(),
                path.display()
            )
        }
        Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("cannot lock {}", path.display())),
    }
}

/// Sets up this node's logs, and its traces if `[telemetry]
/// otlp_endpoint` is set (`service.name`: `[telemetry] service_name`, else
/// `dagr-<role>`).
pub fn telemetry(settings: &Settings, role: &str) -> anyhow::Result<dagr_telemetry::Telemetry> {
    let otlp = (!settings.otlp_endpoint.is_empty()).then(|| dagr_telemetry::Otlp {
        endpoint: settings.otlp_endpoint.clone(),
        service: match settings.service_name.as_str() {
            "" => format!("dagr-{role}"),
            name => name.to_owned(),
        },
    });
    dagr_telemetry::init(otlp)
}

/// The key that seals tenants' secrets: `[secrets] key`, else (if
/// `in_data_dir`, as for `dagr serve`) `<data_dir>/secrets.key`, made at the
/// first start. Cluster nodes that handle secrets (api, worker) must be
/// given the same key. `[secrets] previous_keys` open what they sealed.
pub fn secrets_key(settings: &Settings, in_data_dir: bool) -> anyhow::Result<SecretKey> {
    if !settings.secrets_key.is_empty() {
        let key =
            SecretKey::from_hex(&settings.secrets_key).map_err(|e| anyhow::anyhow!("config: secrets.key: {e}"))?;
        let mut previous = Vec::new();
        for (i, hex) in settings.secrets_previous_keys.iter().enumerate() {
            previous.push(
                SecretKey::from_hex(hex).map_err(|e| anyhow::anyhow!("config: secrets.previous_keys[{i}]: {e}"))?,
            );
        }
        return Ok(key.with_previous(previous));
    }
    if !in_data_dir {
        anyhow::bail!(
            "secrets.key is not set: every node of a cluster (api, master, worker) must share the key that seals tenants' \
             secrets. Set it in the config file ([secrets] key) or as DAGR_SECRETS__KEY, e.g. \
             DAGR_SECRETS__KEY=$(openssl rand -hex 32), and keep it apart from the database's backups"
        );
    }
    let path = settings.data_dir.join("secrets.key");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            return SecretKey::from_hex(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
    let key = SecretKey::generate();
    let partial = settings.data_dir.join("secrets.key.partial");
    let write = || -> std::io::Result<()> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let _ = std::fs::remove_file(&partial);
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&partial)?;
        file.write_all(format!("{}\n", key.to_hex()).as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&partial, &path)
    };
    write().with_context(|| format!("cannot write {}", path.display()))?;
    Ok(key)
}

/// The node's own tokio runtime (engine, API, dispatch, the worker's
/// service). `beside_guests`: the process also runs guests, which have
/// threads of their own (`dagr serve`, `dagr worker`); then, unless
/// `[server] threads` says otherwise, it takes half the CPUs. On two cores,
/// one thread here instead of two made the 10,000-task fan-out use a fifth
/// less CPU: the engine and the worker service no longer wake each other
/// across threads for every batch, and the threads do not crowd the guests.
pub fn node_runtime(settings: &Settings, beside_guests: bool) -> anyhow::Result<tokio::runtime::Runtime> {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let threads = match settings.threads {
        0 if beside_guests => (cpus / 2).max(1),
        0 => cpus,
        n => n,
    };
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()?)
}

/// Opens the configured store. On PostgreSQL a session that sits idle
/// inside a transaction for the lease's TTL is ended by the server: a node
/// frozen that long mid-transaction (SIGSTOP, a paused VM) has lost its
/// lease, and the locks it held would stall every other master's commits.
pub async fn open_store(settings: &Settings) -> anyhow::Result<Arc<SqlStore>> {
    let sync = if settings.synchronous_full { Synchronous::Full } else { Synchronous::Normal };
    Ok(Arc::new(
        SqlStore::open_with(&settings.store_url, sync, settings.ttl)
            .await
            .with_context(|| format!("cannot open the store at {}", settings.store_url))?,
    ))
}

/// The WebAssembly runtime with the configured limits. `runs_attempts`:
/// this process runs tasks (`serve`, `worker`), so the scratch directory
/// under its data directory is its own; masters and API nodes only load
/// plugins and leave it alone.
pub fn make_runtime(settings: &Settings, slots: u32, runs_attempts: bool) -> anyhow::Result<Runtime> {
    if runs_attempts && let Err((have, need)) = dagr_runtime::reserve_descriptors(slots, settings.max_handles) {
        tracing::warn!(
            have,
            need,
            "open files: this process may open {have}, but [worker] slots ({slots}) x max_handles ({}) + {} for \
             the node come to {need}; tasks together could exhaust the node's descriptors (raise the hard limit, \
             LimitNOFILE, or lower slots or max_handles)",
            settings.max_handles,
            dagr_runtime::NODE_DESCRIPTORS
        );
    }
    Ok(Runtime::new(RuntimeConfig {
        max_concurrent_attempts: slots,
        guest_threads: if settings.guest_threads == 0 {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)
        } else {
            settings.guest_threads
        },
        max_memory_bytes: settings.max_memory,
        cache_dir: Some(settings.cache_dir.clone()),
        scratch_root: settings.data_dir.join("scratch"),
        extra_ca_file: settings.extra_ca_file.clone(),
        scratch_max_entries: settings.scratch_max_entries,
        scratch_max_depth: settings.scratch_max_depth,
        max_handles: settings.max_handles,
        http_field_bytes: usize::try_from(settings.http_field_bytes).unwrap_or(usize::MAX),
        max_output_depth: settings.max_output_depth,
        scratch_exclusive: runs_attempts,
        ..RuntimeConfig::default()
    })?)
}

/// The plugin registry: the built-in plugins plus the configured extra
/// ones, and tenants' own from the store (re-read in the background).
/// First compiles what the code cache lacks of the built-ins
/// ([`compile_builtins`]); `doing` hears each step (a starting node's
/// `/healthz` says it).
pub async fn load_plugins(
    runtime: &Runtime,
    settings: &Settings,
    store: Arc<SqlStore>,
    doing: impl Fn(String),
) -> anyhow::Result<Arc<Registry>> {
    compile_builtins(runtime, settings, &inspector(settings)?, &doing).await;
    doing("describing the plugins".into());
    let runtime = runtime.clone();
    let extra = settings.extra_plugins.clone();
    let builtins =
        tokio::task::spawn_blocking(move || BuiltinPlugins::load(&runtime, dagr_builtins::BUILTINS_HASHED, &extra))
            .await?
            .map_err(anyhow::Error::msg)?;
    doing("reading the plugin registry".into());
    let registry = Registry::open(Arc::new(builtins), store).await.context("cannot read the plugin registry")?;
    registry.refresh_every(settings.plugin_refresh);
    Ok(registry)
}

/// Compiles the built-in plugins (and `[plugins] extra`) that the code
/// cache lacks — on a fresh data directory, all of them — each in the
/// inspection child ([`inspector`]), so that what the compiler allocates
/// is never this process's: [`load_plugins`] then finds their machine code
/// in the cache. `doing` hears which one is being compiled. A component the
/// child cannot compile is left to [`load_plugins`], which says why.
async fn compile_builtins(
    runtime: &Runtime,
    settings: &Settings,
    inspector: &dagr_api::Inspector,
    doing: impl Fn(String),
) {
    use dagr_worker::Precompile as _;
    use futures::StreamExt as _;
    let mut missing: Vec<(String, Vec<u8>)> = dagr_builtins::BUILTINS_HASHED
        .iter()
        .filter(|(_, _, sha256)| !runtime.is_cached_sha256(sha256))
        .map(|(name, bytes, _)| (name.to_string(), bytes.to_vec()))
        .collect();
    for path in &settings.extra_plugins {
        if let Ok(bytes) = std::fs::read(path)
            && !runtime.is_cached(&bytes)
        {
            missing.push((path.display().to_string(), bytes));
        }
    }
    // The largest first: they take longest, and the rest fit beside them.
    missing.sort_by_key(|(_, bytes)| std::cmp::Reverse(bytes.len()));
    let total = missing.len();
    let mut done = 0;
    let at_once = settings.concurrent_compiles.max(1) as usize;
    let mut compiles = futures::stream::iter(
        missing
            .into_iter()
            .map(|(name, bytes)| async move { (name, ChildCompiler(inspector.clone()).precompile(bytes).await) }),
    )
    .buffer_unordered(at_once);
    while done < total {
        doing(format!("compiling the built-in plugins into the code cache ({done} of {total} done)"));
        let Some((name, compiled)) = compiles.next().await else { break };
        if let Err(e) = compiled {
            tracing::warn!(plugin = %name, error = %e, "the inspection child could not compile a built-in plugin");
        }
        done += 1;
    }
}

/// Checks and compiles components with this very binary (`dagr plugin
/// inspect`) in a limited child process, which leaves the machine code in
/// this node's code cache. One per process: uploads and a worker's first
/// loads share its turns (`[plugins] concurrent_compiles`).
pub fn inspector(settings: &Settings) -> anyhow::Result<dagr_api::Inspector> {
    let program = std::env::current_exe().context("cannot find the dagr binary (to compile components with)")?;
    let limits = dagr_api::InspectLimits {
        cpu: settings.compile_cpu,
        memory: settings.compile_memory,
        wall: settings.compile_timeout,
        concurrent: settings.concurrent_compiles as usize,
    };
    let args = ["plugin", "inspect", "--cache-dir"].map(String::from).into_iter();
    let args = args.chain([settings.cache_dir.display().to_string()]).collect();
    Ok(dagr_api::Inspector::new(program, args, limits))
}

/// A worker's compiles, in the inspection child (see [`inspector`]).
pub struct ChildCompiler(pub dagr_api::Inspector);

#[async_trait]
impl dagr_worker::Precompile for ChildCompiler {
    async fn precompile(&self, bytes: Vec<u8>) -> Result<(), String> {
        use dagr_api::inspect::InspectError;
        use dagr_protocol::plugins::InspectOutcome;
        match self.0.inspect(bytes.into()).await {
            Ok(InspectOutcome::Valid { .. }) => Ok(()),
            Ok(InspectOutcome::Invalid { message }) => Err(message),
            Err(InspectError::Invalid(m) | InspectError::Limit(m) | InspectError::Failed(m)) => Err(m),
        }
    }
}

/// The API's settings: body limits, and plugin uploads checked (and
/// compiled into this node's cache) by `inspector`.
/// Starts what follows the event log outward — webhooks, alerts and the
/// NATS sink (if `[nats] url` is set) — and the carry-over to cold
/// storage, acting while `active`.
pub fn start_outbox(
    settings: &Settings,
    store: Arc<dyn dagr_store::Store>,
    key: SecretKey,
    active: tokio::sync::watch::Receiver<bool>,
    committed: tokio::sync::watch::Receiver<u64>,
) {
    start_sinks(settings, store.clone(), active.clone());
    start_alerts(settings, store.clone(), active.clone());
    dagr_master::archive::Archiver::start(store.clone(), archive_config(settings), active.clone());
    dagr_notify::Deliverer::start(store, webhook_config(settings), key, active, Some(committed));
}

/// Starts the NATS sink if `[nats] url` is set; it publishes while `active`.
fn start_sinks(settings: &Settings, store: Arc<dyn dagr_store::Store>, active: tokio::sync::watch::Receiver<bool>) {
    if settings.nats_url.is_empty() {
        return;
    }
    let config = dagr_notify::nats::NatsConfig {
        url: settings.nats_url.clone(),
        prefix: settings.nats_prefix.clone(),
        poll: std::time::Duration::from_millis(50),
    };
    dagr_notify::nats::start(store, config, active);
}

/// Starts the alerter; it raises and sends alerts while `active`.
fn start_alerts(settings: &Settings, store: Arc<dyn dagr_store::Store>, active: tokio::sync::watch::Receiver<bool>) {
    let config = dagr_notify::alerts::AlertConfig {
        smtp: settings.smtp.clone(),
        base_url: settings.alerts_base_url.clone(),
        allow_private: settings.webhooks_allow_private,
        poll: std::time::Duration::from_millis(200),
    };
    dagr_notify::alerts::Alerter::start(store, config, active);
}

/// When this node (as the leader) carries finished runs over to cold
/// storage, and how long cold data stays.
pub fn archive_config(settings: &Settings) -> dagr_master::archive::ArchiveConfig {
    dagr_master::archive::ArchiveConfig {
        enabled: settings.archive_enabled,
        after: settings.archive_after,
        period: dagr_store::Period::parse(&settings.archive_period).unwrap_or(dagr_store::Period::Month),
        retain_for: settings.archive_retain_for,
        logs_retain_for: settings.archive_logs_retain_for,
        audit_retain_for: settings.archive_audit_retain_for,
        batch: i64::from(settings.archive_batch),
        interval: settings.archive_interval,
    }
}

/// How this node delivers webhooks.
fn webhook_config(settings: &Settings) -> dagr_notify::WebhookConfig {
    dagr_notify::WebhookConfig {
        retry_base: settings.webhook_retry_base.max(std::time::Duration::from_millis(10)),
        max_backoff: settings.webhook_max_backoff,
        disable_after: settings.webhook_disable_after,
        timeout: settings.webhook_timeout,
        allow_private: settings.webhooks_allow_private,
        keep_deliveries: settings.webhook_keep_deliveries as i64,
        ..Default::default()
    }
}

pub fn api_config(
    settings: &Settings,
    secrets: SecretKey,
    inspector: dagr_api::Inspector,
) -> anyhow::Result<dagr_api::ApiConfig> {
    Ok(dagr_api::ApiConfig {
        max_body_bytes: settings.max_body as usize,
        max_depth: settings.max_depth,
        uploads: dagr_api::UploadConfig { max_bytes: settings.max_upload as usize, inspector: Some(inspector) },
        secrets,
        event_poll: settings.event_poll,
        metrics_public: settings.metrics_public,
        webhooks_allow_private: settings.webhooks_allow_private,
        max_webhooks: settings.webhooks_per_tenant,
        max_event_streams: settings.max_event_streams,
        max_backfill_runs: settings.max_backfill_runs,
        max_unfinished_runs: settings.max_unfinished_runs,
        event_buffer: settings.event_buffer as usize,
        ui_session: settings.ui_session,
        ui_secure_cookie: settings.ui_secure_cookie,
        ..Default::default()
    })
}

/// Hands attempts to the in-process worker.
struct LocalTransport {
    worker: Worker,
    reporter: Arc<LateReporter>,
}

#[async_trait]
impl Transport for LocalTransport {
    async fn dispatch(&self, specs: Vec<AttemptSpec>, _worker: &str) -> Result<Accepted, DispatchError> {
        let verdicts = specs
            .into_iter()
            .map(|spec| {
                self.worker.start(spec, self.reporter.clone());
                Ok(())
            })
            .collect();
        Ok(Accepted { verdicts, running: None })
    }

    async fn cancel(&self, key: &AttemptKey, _worker: &str) {
        self.worker.cancel(key);
    }

    async fn adopt(&self, key: &AttemptKey, _worker: &str, _epoch: i64) -> Adoption {
        // After a restart the in-process worker is new and knows nothing.
        if self.worker.running_keys().contains(key) {
            Adoption::Running
        } else {
            Adoption::Unknown { never_under: None }
        }
    }
}

/// The worker's reporter, connected to the engine once it has started
/// (the engine may dispatch during its start, before its handle exists).
#[derive(Default)]
struct LateReporter {
    state: Mutex<(Option<EngineHandle>, Vec<AttemptResult>)>,
}

impl LateReporter {
    fn connect(&self, engine: EngineHandle) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for result in state.1.drain(..) {
            engine.report(result);
        }
        state.0 = Some(engine);
    }
}

impl Reporter for LateReporter {
    fn report(&self, result: AttemptResult) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match &state.0 {
            Some(engine) => engine.report(result),
            None => state.1.push(result),
        }
    }
}
