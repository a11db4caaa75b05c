//! Cluster roles: `dagr master`, `dagr worker`, `dagr api`. Same binary,
//! same config file; state in PostgreSQL, membership in etcd.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::response::IntoResponse as _;
use clap::Args;
use dagr_config::Settings;
use dagr_coord::etcd::EtcdCoordinator;
use dagr_coord::{Coordinator, NodeInfo, Role, SessionConfig};
use dagr_master::cluster::{ClusterControl, HttpTransport, MasterService, OwnershipConfig, drive_ownership};
use dagr_master::rebalance::RebalanceConfig;
use dagr_master::resource_leader::{LeaderClient, ResourceLeader};
use dagr_master::{Engine, EngineConfig};
use dagr_master::{Resources, Strategy};
use dagr_protocol::wire::ClusterSecret;
use dagr_transport::{Internal, Listener, Tls, TlsFiles};
use dagr_worker::service::{ClusterReporter, WorkerService, fence_on_lease_loss};
use dagr_worker::{LogWriter, Worker};

use crate::node::{api_config, load_plugins, make_runtime, open_store};

/// Flags every cluster role takes.
#[derive(Debug, Args)]
pub struct RoleArgs {
    /// A TOML config file (the same for every role); `DAGR_*` variables
    /// override it, flags override both.
    #[arg(long, env = "DAGR_CONFIG")]
    pub config: Option<PathBuf>,
    /// This node's id (default `<role>-<host>-<pid>`).
    #[arg(long)]
    pub node_id: Option<String>,
    /// The address this role listens on (port 0 picks a free port).
    #[arg(long)]
    pub listen: Option<String>,
    /// PostgreSQL URL (overrides store.url).
    #[arg(long)]
    pub store: Option<String>,
    /// etcd endpoint (repeatable; overrides cluster.etcd).
    #[arg(long = "etcd")]
    pub etcd: Vec<String>,
    /// Where this node keeps its files (compiled-code cache, scratch).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

fn settings(args: &RoleArgs, role: Role) -> anyhow::Result<Settings> {
    let mut config = dagr_config::Config::load(args.config.as_deref())?;
    if let Some(listen) = &args.listen {
        match role {
            Role::Master => config.master.listen = listen.clone(),
            Role::Worker => config.worker.listen = listen.clone(),
            Role::Api => config.server.listen = listen.clone(),
        }
    }
    if let Some(url) = &args.store {
        config.store.url = url.clone();
    }
    if !args.etcd.is_empty() {
        config.cluster.etcd = args.etcd.clone();
    }
    if let Some(id) = &args.node_id {
        config.cluster.node_id = id.clone();
    }
    if let Some(dir) = &args.data_dir {
        config.server.data_dir = dir.clone();
    }
    let settings = config.validate()?;
    if !settings.store_url.starts_with("postgres") {
        anyhow::bail!("cluster roles share their state: set store.url (or --store) to a postgres:// URL");
    }
    Ok(settings)
}

/// What internal traffic needs: the cluster's shared secret (cluster roles
/// do not start without one) and, with `[cluster] tls_*`, the node's TLS
/// setup (checked now: a bad file is named before anything starts).
fn internal(settings: &Settings) -> anyhow::Result<Internal> {
    let secret = cluster_secret(settings)?;
    let tls = match &settings.cluster_tls {
        None => None,
        Some(paths) => {
            let files = TlsFiles { cert: paths.cert.clone(), key: paths.key.clone(), ca: paths.ca.clone() };
            Some(Arc::new(Tls::load(&files).map_err(|e| anyhow::anyhow!("config: {e}"))?))
        }
    };
    Ok(Internal::new(secret, tls))
}

/// The cluster's shared secret; cluster roles do not start without one.
fn cluster_secret(settings: &Settings) -> anyhow::Result<ClusterSecret> {
    ClusterSecret::new(&settings.cluster_secret).ok_or_else(|| {
        anyhow::anyhow!(
            "cluster.secret is not set, or shorter than {} characters: every node of a cluster (api, masters, \
             workers) must share one, as internal requests are refused without it. Set it in the config file \
             or as DAGR_CLUSTER__SECRET, e.g. DAGR_CLUSTER__SECRET=$(openssl rand -hex 32)",
            ClusterSecret::MIN_LEN
        )
    })
}

/// Refuses a node's internal requests that do not carry the cluster's
/// secret; `/healthz` stays open, and `/metrics` takes the secret as a
/// bearer token too (or nothing, with `[metrics] public`).
fn internal_only(app: axum::Router, secret: ClusterSecret, metrics_public: bool) -> axum::Router {
    app.route("/metrics", axum::routing::get(|| async { prometheus() }))
        .layer(axum::middleware::from_fn(move |request: axum::extract::Request, next: axum::middleware::Next| {
            let headers = request.headers();
            let admitted = match request.uri().path() {
                "/healthz" => true,
                "/metrics" => metrics_public || secret.admits(headers) || secret.admits_bearer(headers),
                _ => secret.admits(headers),
            };
            async move {
                if admitted {
                    next.run(request).await
                } else {
                    let message = "this internal endpoint needs the cluster's secret (cluster.secret)";
                    (axum::http::StatusCode::UNAUTHORIZED, message).into_response()
                }
            }
        }))
        .layer(axum::middleware::from_fn(dagr_api::close_if_unread))
}

/// Every metric of this process, in the Prometheus text format.
pub fn prometheus() -> axum::response::Response {
    let headers = [(axum::http::header::CONTENT_TYPE, dagr_metrics::CONTENT_TYPE)];
    (headers, dagr_metrics::global().render()).into_response()
}

fn node_id(settings: &Settings, role: Role) -> String {
    if !settings.node_id.is_empty() {
        return settings.node_id.clone();
    }
    let host = std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_owned()).unwrap_or_else(|_| "host".into());
    format!("{role}-{host}-{}", std::process::id())
}

async fn join(settings: &Settings, node: NodeInfo, campaign: bool) -> anyhow::Result<Arc<EtcdCoordinator>> {
    let config = SessionConfig { ttl: settings.ttl, campaign };
    EtcdCoordinator::start(&settings.etcd, &settings.cluster_prefix, node, config)
        .await
        .with_context(|| format!("cannot join the cluster through etcd at {:?}", settings.etcd))
}

fn announce(role: Role, id: &str, url: &str) {
    tracing::info!(%role, node = id, %url, "serving");
    // Scripts and tests wait for this line.
    println!("dagr {role} {id} listening on {url} (pid {})", std::process::id());
}

/// `dagr master`.
pub fn master(args: RoleArgs) -> anyhow::Result<ExitCode> {
    let settings = settings(&args, Role::Master)?;
    let _telemetry = crate::node::telemetry(&settings, "master")?;
    // The leader delivers webhooks, whose signing secrets are sealed.
    let secrets_key = crate::node::secrets_key(&settings, false)?;
    crate::node::node_runtime(&settings, false)?.block_on(async move {
        let internal = internal(&settings)?;
        let id = node_id(&settings, Role::Master);
        let store = open_store(&settings).await?;
        let listener = Listener::bind(settings.master_listen, internal.tls().map(|t| t.as_ref()))
            .await
            .with_context(|| format!("cannot listen on {}", settings.master_listen))?;
        let url = format!("{}://{}", internal.scheme(), listener.local_addr()?);
        let wasm = make_runtime(&settings, 4, false)?;
        let plugins =
            load_plugins(&wasm, &settings, store.clone(), |doing| tracing::info!("starting: {doing}")).await?;
        let node = NodeInfo {
            id: id.clone(),
            role: Role::Master,
            addr: url.clone(),
            capacity: 0,
            labels: Default::default(),
            pid: std::process::id(),
            lease: 0,
        };
        let coordinator = join(&settings, node, true).await?;
        let strategy: Strategy = settings.dispatch.parse().map_err(anyhow::Error::msg)?;
        let resources: Resources = settings.resources.parse().map_err(anyhow::Error::msg)?;
        let mut transport = HttpTransport::new(id.clone(), coordinator.membership(), &internal);
        let mut resource_leader = None;
        if resources == Resources::Leader {
            transport = transport.with_resource_leader(LeaderClient::new(coordinator.as_ref(), &internal));
            resource_leader = Some(ResourceLeader::start(coordinator.clone()));
        }
        let transport = Arc::new(transport);
        let policy = dagr_master::StorePolicy::load(store.clone()).await.context("cannot read the tenants")?;
        policy.spawn_refresh(crate::node::POLICY_REFRESH);
        let config = EngineConfig {
            node_id: id.clone(),
            default_timeout: settings.default_timeout,
            default_memory: settings.default_memory,
            max_memory: settings.max_memory,
            max_output_bytes: settings.max_output,
            max_log_bytes: settings.max_log,
            max_params_bytes: settings.max_params,
            poll_interval: settings.poll_interval,
            fence_writes: true,
            policy,
            // Twice the lease TTL: a worker restarted under the same id
            // within its TTL is found out by then.
            attempt_check: Some((settings.ttl * 2).max(Duration::from_secs(4))),
            max_lost_attempts: settings.max_lost_attempts,
            max_catch_up: settings.max_catch_up,
            catch_up_per_second: settings.catch_up_per_second,
            step_task_changes: settings.step_task_changes as usize,
            takeover_wakes_per_step: settings.takeover_wakes_per_step as usize,
            max_in_flight: settings.max_in_flight as usize,
            strategy,
            resources,
            versions: Default::default(),
        };
        let engine = Engine::start(config, store.clone(), transport, plugins).await?;
        engine.wake_peers_with(Arc::new(ClusterControl::new(store.clone(), coordinator.membership(), &internal)));
        let ownership = OwnershipConfig {
            check_interval: settings.rebalance_interval,
            rebalance: RebalanceConfig { overloads: settings.overloads.max(1), ..RebalanceConfig::default() },
            settle: Duration::from_millis(100),
        };
        let owned = drive_ownership(engine.clone(), coordinator.clone(), store.clone(), ownership);
        // The leader delivers webhooks (a leader change may repeat the
        // delivery in flight, which receivers drop by its webhook-id).
        let (delivering, deliver) = tokio::sync::watch::channel(false);
        let (leadership, health) = (coordinator.leadership(), coordinator.health());
        tokio::spawn(async move {
            loop {
                let lead = leadership.borrow().is_some() && *health.borrow();
                if delivering.send(lead).is_err() {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
        });
        crate::node::start_outbox(&settings, store.clone(), secrets_key, deliver.clone(), engine.events_committed());
        let app = dagr_master::cluster::router(MasterService {
            engine: engine.clone(),
            owned_slots: owned,
            leading: deliver,
            resources: resource_leader,
        });
        let app = internal_only(app, internal.secret().clone(), settings.metrics_public);
        announce(Role::Master, &id, &url);
        serve_until_signal(listener, app).await;
        coordinator.leave();
        engine.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// `dagr worker`.
pub fn worker(args: RoleArgs) -> anyhow::Result<ExitCode> {
    let settings = settings(&args, Role::Worker)?;
    let _telemetry = crate::node::telemetry(&settings, "worker")?;
    let secrets_key = crate::node::secrets_key(&settings, false)?;
    crate::node::node_runtime(&settings, true)?.block_on(async move {
        let internal = internal(&settings)?;
        let id = node_id(&settings, Role::Worker);
        let store = open_store(&settings).await?;
        let listener = Listener::bind(settings.worker_listen, internal.tls().map(|t| t.as_ref()))
            .await
            .with_context(|| format!("cannot listen on {}", settings.worker_listen))?;
        let url = format!("{}://{}", internal.scheme(), listener.local_addr()?);
        let wasm = make_runtime(&settings, settings.slots, true)?;
        let plugins =
            load_plugins(&wasm, &settings, store.clone(), |doing| tracing::info!("starting: {doing}")).await?;
        let mut labels = std::collections::BTreeMap::new();
        if !settings.worker_group.is_empty() {
            labels.insert("group".to_owned(), settings.worker_group.clone());
        }
        let node = NodeInfo {
            id: id.clone(),
            role: Role::Worker,
            addr: url.clone(),
            capacity: settings.slots,
            labels,
            pid: std::process::id(),
            lease: 0,
        };
        let coordinator = join(&settings, node, false).await?;
        let logs = LogWriter::start(store.clone());
        let worker = Worker::new(
            id.clone(),
            wasm,
            plugins.clone(),
            Some(Arc::new(crate::secrets::StoreSecrets::new(store.clone(), secrets_key))),
            logs,
        );
        worker.precompile_with(Arc::new(crate::node::ChildCompiler(crate::node::inspector(&settings)?)));
        let guard = coordinator.lease_guard();
        worker.guard_with(Arc::new(move || guard.is_safe()));
        fence_on_lease_loss(worker.clone(), coordinator.health());
        dagr_worker::metrics::register(&worker);
        let reporter = ClusterReporter::start(coordinator.membership(), &internal);
        let app = dagr_worker::service::router(WorkerService {
            worker: worker.clone(),
            store: store.clone(),
            reporter,
            healthy: coordinator.health(),
            coordinator: coordinator.clone(),
        });
        let app = internal_only(app, internal.secret().clone(), settings.metrics_public);
        announce(Role::Worker, &id, &url);
        serve_until_signal(listener, app).await;
        coordinator.leave();
        worker.abandon_all();
        Ok(ExitCode::SUCCESS)
    })
}

/// `dagr api`.
pub fn api(args: RoleArgs) -> anyhow::Result<ExitCode> {
    let settings = settings(&args, Role::Api)?;
    let _telemetry = crate::node::telemetry(&settings, "api")?;
    let secrets_key = crate::node::secrets_key(&settings, false)?;
    crate::node::node_runtime(&settings, false)?.block_on(async move {
        let internal = internal(&settings)?;
        let id = node_id(&settings, Role::Api);
        let store = open_store(&settings).await?;
        let tokens = dagr_api::auth::bootstrap(
            store.as_ref(),
            &settings.data_dir,
            settings.admin_token.as_deref(),
            settings.default_tenant,
        )
        .await
        .context("cannot set up the API tokens")?;
        crate::serve::show_tokens(&tokens);
        // The public API: plain HTTP (its clients are people and tools,
        // with tokens); TLS for it belongs to the proxy in front.
        let listener = Listener::bind(settings.listen, None)
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        let url = format!("http://{}", listener.local_addr()?);
        let wasm = make_runtime(&settings, 4, false)?;
        let plugins =
            load_plugins(&wasm, &settings, store.clone(), |doing| tracing::info!("starting: {doing}")).await?;
        let node = NodeInfo {
            id: id.clone(),
            role: Role::Api,
            addr: url.clone(),
            capacity: 0,
            labels: Default::default(),
            pid: std::process::id(),
            lease: 0,
        };
        let coordinator = join(&settings, node, false).await?;
        let control = Arc::new(ClusterControl::new(store.clone(), coordinator.membership(), &internal));
        let app = dagr_api::router(dagr_api::ApiState::new(
            store.clone(),
            control,
            plugins,
            api_config(&settings, secrets_key, crate::node::inspector(&settings)?)?,
        ));
        announce(Role::Api, &id, &url);
        serve_until_signal(listener, app).await;
        coordinator.leave();
        Ok(ExitCode::SUCCESS)
    })
}

async fn serve_until_signal(listener: Listener, app: axum::Router) {
    let shutdown = async {
        crate::serve::shutdown_signal().await;
        tracing::info!("shutting down");
    };
    if let Err(e) = dagr_transport::serve(listener, app, shutdown).await {
        tracing::error!(error = %e, "the HTTP server stopped");
    }
    // Give in-flight reports a moment.
    tokio::time::sleep(Duration::from_millis(100)).await;
}
