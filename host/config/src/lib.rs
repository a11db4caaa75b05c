//! dagr's configuration: one struct tree for every role.
//!
//! Layers, each overriding the one before: built-in defaults, a TOML file
//! (`--config FILE` or `DAGR_CONFIG`), `DAGR_*` environment variables
//! (sections separated by a double underscore: `DAGR_SERVER__LISTEN`,
//! `DAGR_STORE__URL`), then command-line flags. [`Config::validate`] checks
//! the result and names the field of every problem. A text setting that the
//! environment or TOML parse as a number or boolean is taken as the text it
//! was written as (`DAGR_SMTP__PASSWORD=123456`, `max_body = 1048576`).
//!
//! ```toml
//! [server]
//! listen = "127.0.0.1:8080"
//! data_dir = "./dagr-data"
//! threads = 0    # the engine's, the API's and dispatch's threads; 0: half the
//!                # CPUs beside guests (serve, worker), all of them otherwise
//!
//! [store]
//! # url = "postgres://dagr@127.0.0.1/dagr"   # default: SQLite in data_dir
//! synchronous = "normal"                     # or "full"
//!
//! [worker]
//! slots = 256
//! scratch_max_entries = 10000  # files and directories in one attempt's scratch
//! scratch_max_depth = 64       # directory nesting in one attempt's scratch
//! max_handles = 1024           # open files, streams, HTTP resources one attempt holds at once
//! http_field_bytes = "16KiB"   # one HTTP headers resource in the host's memory
//! max_output_depth = 64        # nesting of a task's output (JSON), at most 120
//! # extra_ca_file = "/etc/dagr/internal-ca.pem"  # plugins' HTTPS also trusts these CAs
//!
//! [api]
//! max_body = "4MiB"          # a request body, and a YAML definition with its aliases expanded
//! max_depth = 64             # nesting of a body or definition, at most 120
//! event_poll = "50ms"        # how often the API looks for new events to stream
//! max_event_streams = 1000   # event streams (GET /v1/events as SSE) open at once
//! max_backfill_runs = 10000  # runs one backfill may create
//! max_unfinished_runs = 100000  # a tenant's unfinished runs past which a backfill is refused
//! event_buffer = "32MiB"     # newest events kept in memory for the streams (1MiB–1GiB)
//! ui_session = "12h"         # how long a web UI sign-in lasts
//! ui_secure_cookie = false   # mark the UI's session cookie Secure (dagr behind HTTPS)
//!
//! [webhooks]
//! allow_private = false      # deliveries to loopback/private addresses
//! max_per_tenant = 20
//! retry_base = "1s"          # the first retry's delay, doubled each time
//! max_backoff = "5m"
//! disable_after = "24h"      # failing that long disables a subscription
//! timeout = "10s"            # a receiver's answer
//! keep_deliveries = 100      # delivery attempts kept per subscription
//!
//! [smtp]                     # where alert mail goes out
//! # host = "smtp.example.org"
//! port = 587
//! security = "starttls"      # starttls (required), tls (implicit, port 465), none
//! # username = "dagr"
//! # password = "…"           # or DAGR_SMTP__PASSWORD
//! from = "dagr <dagr@localhost>"
//!
//! [alerts]
//! # base_url = "https://dagr.example.org"   # links in alert messages
//!
//! [nats]
//! # url = "nats://127.0.0.1:4222"   # publish every event there (off when empty)
//! prefix = "dagr"            # subjects: <prefix>.<tenant>.<kind>
//!
//! [telemetry]
//! # otlp_endpoint = "http://127.0.0.1:4318/v1/traces"   # export spans (OTLP/HTTP, JSON)
//! # service_name = ""        # empty: dagr-<role> (dagr-serve, dagr-master, ...)
//!
//! [archive]                  # finished runs move to cold partitions (hot/cold data)
//! enabled = true
//! after = "7d"               # finished (and untouched) this long; per tenant: archive_after_ms
//! period = "month"           # a cold partition per tenant and week, month or quarter
//! retain_for = ""            # drop partitions whose period ended this long before the
//!                            #   cut-off (empty: keep for ever); per tenant: archive_retain_ms
//! logs_retain_for = ""       # drop cold logs sooner; per tenant: archive_logs_retain_ms
//! audit_retain_for = ""      # drop audit records older than this (empty: keep for ever)
//! batch = 500                # runs per carry-over batch
//! interval = "1m"            # how often the carry-over looks when idle
//!
//! [metrics]
//! public = false             # /metrics without a token (else: the admin token on
//!                            #   the API, the cluster secret as bearer on nodes)
//!
//! [limits]
//! default_timeout = "1h"
//! default_memory = "128MiB"
//! max_params = "4MiB"        # a task's params once their templates are rendered
//!
//! [auth]
//! # admin_token = "dagr_<12 lowercase letters or digits>_<secret>"
//! #   default: generated at first start, printed once, in data_dir/admin.token
//! default_tenant = false      # `dagr serve` always makes the tenant `default`
//!
//! [secrets]
//! # key = "<64 hex digits>"   # seals tenants' secrets at rest; `dagr serve`
//! #   makes one in data_dir/secrets.key; every node of a cluster must share one
//! # previous_keys = ["<64 hex digits>"]  # still open secrets, never seal
//! #   (while `dagr secrets rotate` re-seals them under `key`)
//!
//! [cluster]
//! # tls_cert = "/etc/dagr/node.pem"   # mutual TLS between nodes: this node's
//! # tls_key = "/etc/dagr/node.key"    #   certificate and key, and the CA that
//! # tls_ca = "/etc/dagr/ca.pem"       #   signs every node's (all three or none)
//!
//! [plugins]
//! max_upload = "64MiB"       # tenants' uploads; compiled in a child process
//! compile_cpu = "60s"        # with these limits (a Python component, 18 MB,
//! compile_memory = "2GiB"    #   takes 13-16 s of CPU and ~600 MB here)
//! compile_timeout = "120s"
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dagr_core::units::{parse_bytes, parse_duration};
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

mod sections;
pub use crate::sections::*;

/// The whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub store: StoreConfig,
    pub worker: WorkerConfig,
    pub limits: LimitsConfig,
    pub api: ApiConfig,
    pub cluster: ClusterConfig,
    pub master: MasterConfig,
    pub plugins: PluginsConfig,
    pub auth: AuthConfig,
    pub secrets: SecretsConfig,
    pub metrics: MetricsConfig,
    pub webhooks: WebhooksConfig,
    pub nats: NatsConfig,
    pub smtp: SmtpConfig,
    pub alerts: AlertsConfig,
    pub telemetry: TelemetryConfig,
    pub archive: ArchiveConfig,
}

/// A configuration problem, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config: {field}: {message}")]
pub struct ConfigError {
    pub field: String,
    pub message: String,
}

/// The PEM files of a node's TLS setup (`[cluster] tls_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsPaths {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// The checked, typed values the rest of dagr uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub store_url: String,
    pub synchronous_full: bool,
    pub slots: u32,
    /// The node's own runtime threads; 0: chosen by the role.
    pub threads: usize,
    pub guest_threads: usize,
    pub cache_dir: PathBuf,
    pub extra_ca_file: Option<PathBuf>,
    pub scratch_max_entries: u64,
    pub scratch_max_depth: u64,
    pub max_handles: usize,
    pub http_field_bytes: u64,
    pub max_output_depth: usize,
    pub max_lost_attempts: u32,
    pub max_catch_up: u32,
    pub catch_up_per_second: u32,
    pub step_task_changes: u32,
    pub takeover_wakes_per_step: u32,
    pub default_timeout: Duration,
    pub default_memory: u64,
    pub max_memory: u64,
    pub max_output: u64,
    pub max_log: u64,
    pub max_params: u64,
    pub max_body: u64,
    pub max_depth: usize,
    pub event_poll: Duration,
    pub max_event_streams: usize,
    pub max_backfill_runs: usize,
    pub max_unfinished_runs: usize,
    pub event_buffer: u64,
    pub ui_session: Duration,
    pub ui_secure_cookie: bool,
    pub metrics_public: bool,
    pub webhooks_allow_private: bool,
    pub nats_url: String,
    /// `[smtp]`, checked: the host trimmed, the security one of
    /// `starttls`, `tls`, `none`, the sender a mailbox.
    pub smtp: SmtpConfig,
    pub alerts_base_url: String,
    pub nats_prefix: String,
    /// Where spans go (OTLP/HTTP); empty: nowhere.
    pub otlp_endpoint: String,
    /// The `service.name` of this node's spans; empty: by role.
    pub service_name: String,
    pub webhooks_per_tenant: usize,
    /// `[archive]`: see the module's documentation.
    pub archive_enabled: bool,
    pub archive_after: Duration,
    /// week, month or quarter.
    pub archive_period: String,
    pub archive_retain_for: Option<Duration>,
    pub archive_logs_retain_for: Option<Duration>,
    pub archive_audit_retain_for: Option<Duration>,
    pub archive_batch: u32,
    pub archive_interval: Duration,
    pub webhook_retry_base: Duration,
    pub webhook_max_backoff: Duration,
    pub webhook_disable_after: Duration,
    pub webhook_timeout: Duration,
    pub webhook_keep_deliveries: u32,
    pub etcd: Vec<String>,
    pub cluster_prefix: String,
    pub ttl: Duration,
    pub node_id: String,
    pub cluster_secret: String,
    /// `[cluster] tls_cert`, `tls_key`, `tls_ca`, when set.
    pub cluster_tls: Option<TlsPaths>,
    pub master_listen: SocketAddr,
    pub dispatch: String,
    pub resources: String,
    pub max_in_flight: u32,
    pub poll_interval: Duration,
    pub rebalance_interval: Duration,
    pub overloads: u32,
    pub worker_listen: SocketAddr,
    pub worker_group: String,
    pub extra_plugins: Vec<PathBuf>,
    /// The configured admin token, if any.
    pub admin_token: Option<String>,
    pub default_tenant: bool,
    /// `[secrets] key`, checked to be 64 hex digits; empty if not set.
    pub secrets_key: String,
    /// `[secrets] previous_keys`, each checked to be 64 hex digits.
    pub secrets_previous_keys: Vec<String>,
    pub max_upload: u64,
    pub compile_cpu: Duration,
    pub compile_memory: u64,
    pub compile_timeout: Duration,
    pub concurrent_compiles: u32,
    pub plugin_refresh: Duration,
}

impl Config {
    /// Defaults, then the file (if any), then `DAGR_*` variables.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(path) = file {
            if !path.exists() {
                return Err(ConfigError {
                    field: "--config".into(),
                    message: format!("{} does not exist", path.display()),
                });
            }
            figment = figment.merge(Toml::file(path));
        }
        // Only `DAGR_<SECTION>__<KEY>` variables are configuration; other
        // `DAGR_*` variables (DAGR_SERVER, DAGR_TOKEN, …) belong to tools.
        figment = figment.merge(Env::prefixed("DAGR_").filter(|k| k.as_str().contains("__")).split("__"));
        figment.extract().map_err(|e| {
            let field = e.path.join(".");
            ConfigError { field: if field.is_empty() { "config".into() } else { field }, message: e.kind.to_string() }
        })
    }

    /// Checks every value and converts it.
    /// The TLS files, all three or none.
    fn cluster_tls(&self) -> Result<Option<TlsPaths>, ConfigError> {
        let c = &self.cluster;
        let fields = [("tls_cert", &c.tls_cert), ("tls_key", &c.tls_key), ("tls_ca", &c.tls_ca)];
        let set: Vec<&str> = fields.iter().filter(|(_, v)| !v.trim().is_empty()).map(|(k, _)| *k).collect();
        if set.is_empty() {
            return Ok(None);
        }
        if let Some((missing, _)) = fields.iter().find(|(_, v)| v.trim().is_empty()) {
            return Err(ConfigError {
                field: format!("cluster.{missing}"),
                message: format!(
                    "mutual TLS needs tls_cert, tls_key and tls_ca together; {} set, {missing} is not",
                    set.join(", ")
                ),
            });
        }
        let path = |v: &String| PathBuf::from(v.trim());
        Ok(Some(TlsPaths { cert: path(&c.tls_cert), key: path(&c.tls_key), ca: path(&c.tls_ca) }))
    }

    pub fn validate(&self) -> Result<Settings, ConfigError> {
        let err = |field: &str, message: String| ConfigError { field: field.into(), message };
        let listen: SocketAddr = self.server.listen.parse().map_err(|e| {
            err("server.listen", format!("`{}` is not an address like 127.0.0.1:8080: {e}", self.server.listen))
        })?;
        let duration = |field: &str, v: &str| parse_duration(v).map_err(|m| err(field, m));
        let bytes = |field: &str, v: &str| parse_bytes(v).map_err(|m| err(field, m));
        let synchronous_full = match self.store.synchronous.as_str() {
            "normal" => false,
            "full" => true,
            other => {
                return Err(err("store.synchronous", format!("`{other}` must be `normal` or `full`")));
            }
        };
        let store_url = if self.store.url.is_empty() {
            format!("sqlite://{}", self.server.data_dir.join("dagr.db").display())
        } else if self.store.url.starts_with("sqlite://") || self.store.url.starts_with("postgres") {
            self.store.url.clone()
        } else {
            return Err(err("store.url", format!("`{}` must start with sqlite:// or postgres://", self.store.url)));
        };
        if self.worker.slots == 0 {
            return Err(err("worker.slots", "must be at least 1".into()));
        }
        if self.worker.scratch_max_entries == 0 {
            return Err(err("worker.scratch_max_entries", "must be at least 1".into()));
        }
        if self.worker.max_handles < 16 {
            return Err(err(
                "worker.max_handles",
                "must be at least 16 (stdio and the scratch directory take some)".into(),
            ));
        }
        let cap = dagr_core::document::MAX_DEPTH_CAP;
        for (field, depth) in
            [("api.max_depth", self.api.max_depth), ("worker.max_output_depth", self.worker.max_output_depth)]
        {
            if !(1..=cap).contains(&depth) {
                return Err(err(
                    field,
                    format!("{depth} must be between 1 and {cap} (the JSON parser's own bound, less room for inputs)"),
                ));
            }
        }
        if self.master.max_lost_attempts == 0 {
            return Err(err("master.max_lost_attempts", "must be at least 1".into()));
        }
        if self.master.catch_up_per_second == 0 {
            return Err(err("master.catch_up_per_second", "must be at least 1".into()));
        }
        if self.master.step_task_changes == 0 {
            return Err(err("master.step_task_changes", "must be at least 1".into()));
        }
        if self.master.takeover_wakes_per_step == 0 {
            return Err(err("master.takeover_wakes_per_step", "must be at least 1".into()));
        }
        let settings = Settings {
            listen,
            data_dir: self.server.data_dir.clone(),
            store_url,
            synchronous_full,
            slots: self.worker.slots,
            threads: self.server.threads,
            guest_threads: self.worker.guest_threads,
            cache_dir: if self.worker.cache_dir.is_empty() {
                self.server.data_dir.join("cache")
            } else {
                PathBuf::from(&self.worker.cache_dir)
            },
            extra_ca_file: (!self.worker.extra_ca_file.is_empty()).then(|| PathBuf::from(&self.worker.extra_ca_file)),
            scratch_max_entries: self.worker.scratch_max_entries,
            scratch_max_depth: self.worker.scratch_max_depth,
            max_handles: self.worker.max_handles,
            http_field_bytes: bytes("worker.http_field_bytes", &self.worker.http_field_bytes)?,
            max_output_depth: self.worker.max_output_depth,
            max_lost_attempts: self.master.max_lost_attempts,
            max_catch_up: self.master.max_catch_up,
            catch_up_per_second: self.master.catch_up_per_second,
            step_task_changes: self.master.step_task_changes,
            takeover_wakes_per_step: self.master.takeover_wakes_per_step,
            default_timeout: duration("limits.default_timeout", &self.limits.default_timeout)?,
            default_memory: bytes("limits.default_memory", &self.limits.default_memory)?,
            max_memory: bytes("limits.max_memory", &self.limits.max_memory)?,
            max_output: bytes("limits.max_output", &self.limits.max_output)?,
            max_log: bytes("limits.max_log", &self.limits.max_log)?,
            max_params: bytes("limits.max_params", &self.limits.max_params)?,
            max_body: bytes("api.max_body", &self.api.max_body)?,
            max_depth: self.api.max_depth,
            event_poll: match duration("api.event_poll", &self.api.event_poll)? {
                d if d.is_zero() || d > Duration::from_secs(10) => {
                    return Err(err(
                        "api.event_poll",
                        format!("`{}` must be above 0 and at most 10s", self.api.event_poll),
                    ));
                }
                d => d,
            },
            max_event_streams: match self.api.max_event_streams {
                0 => return Err(err("api.max_event_streams", "must be at least 1".into())),
                n => n,
            },
            max_backfill_runs: match self.api.max_backfill_runs {
                0 => return Err(err("api.max_backfill_runs", "must be at least 1".into())),
                n => n,
            },
            max_unfinished_runs: match self.api.max_unfinished_runs {
                0 => return Err(err("api.max_unfinished_runs", "must be at least 1".into())),
                n => n,
            },
            event_buffer: match bytes("api.event_buffer", &self.api.event_buffer)? {
                n if !(1 << 20..=1 << 30).contains(&n) => {
                    return Err(err(
                        "api.event_buffer",
                        format!("`{}` must be between 1MiB and 1GiB", self.api.event_buffer),
                    ));
                }
                n => n,
            },
            ui_session: match duration("api.ui_session", &self.api.ui_session)? {
                d if d < Duration::from_secs(60) || d > Duration::from_secs(30 * 24 * 3600) => {
                    return Err(err("api.ui_session", format!("`{}` must be between 1m and 30d", self.api.ui_session)));
                }
                d => d,
            },
            ui_secure_cookie: self.api.ui_secure_cookie,
            metrics_public: self.metrics.public,
            webhooks_allow_private: self.webhooks.allow_private,
            smtp: SmtpConfig {
                host: self.smtp.host.trim().to_owned(),
                port: self.smtp.port,
                security: match self.smtp.security.as_str() {
                    s @ ("starttls" | "tls" | "none") => s.to_owned(),
                    other => {
                        return Err(err("smtp.security", format!("`{other}` is not one of starttls, tls, none")));
                    }
                },
                username: self.smtp.username.clone(),
                password: self.smtp.password.clone(),
                from: match self.smtp.from.as_str() {
                    f if f.contains('@') && !f.contains(['\r', '\n']) => f.to_owned(),
                    f => {
                        return Err(err("smtp.from", format!("`{f}` is not a mailbox like `dagr <dagr@example.org>`")));
                    }
                },
            },
            alerts_base_url: self.alerts.base_url.trim_end_matches('/').to_owned(),
            nats_url: match self.nats.url.trim() {
                "" => String::new(),
                url if url.starts_with("nats://") || url.starts_with("tls://") => url.to_owned(),
                url => return Err(err("nats.url", format!("`{url}` is not a nats:// or tls:// URL"))),
            },
            nats_prefix: match self.nats.prefix.as_str() {
                p if p.is_empty() || p.contains([' ', '*', '>']) => {
                    return Err(err("nats.prefix", format!("`{p}` is not a subject prefix (no spaces, `*` or `>`)")));
                }
                p => p.to_owned(),
            },
            otlp_endpoint: match self.telemetry.otlp_endpoint.trim() {
                "" => String::new(),
                url if url.starts_with("http://") || url.starts_with("https://") => url.to_owned(),
                url => {
                    return Err(err(
                        "telemetry.otlp_endpoint",
                        format!(
                            "`{url}` is not an http:// or https:// URL (OTLP over HTTP, e.g. http://host:4318/v1/traces)"
                        ),
                    ));
                }
            },
            service_name: self.telemetry.service_name.trim().to_owned(),
            webhooks_per_tenant: self.webhooks.max_per_tenant,
            archive_enabled: self.archive.enabled,
            archive_after: duration("archive.after", &self.archive.after)?,
            archive_period: match self.archive.period.as_str() {
                p @ ("week" | "month" | "quarter") => p.to_owned(),
                other => return Err(err("archive.period", format!("`{other}` must be week, month or quarter"))),
            },
            archive_retain_for: match self.archive.retain_for.trim() {
                "" => None,
                text => Some(duration("archive.retain_for", text)?),
            },
            archive_logs_retain_for: match self.archive.logs_retain_for.trim() {
                "" => None,
                text => Some(duration("archive.logs_retain_for", text)?),
            },
            archive_audit_retain_for: match self.archive.audit_retain_for.trim() {
                "" => None,
                text => Some(duration("archive.audit_retain_for", text)?),
            },
            archive_batch: match self.archive.batch {
                0 | 10_001.. => return Err(err("archive.batch", "must be between 1 and 10000".into())),
                n => n,
            },
            archive_interval: match duration("archive.interval", &self.archive.interval)? {
                d if d.is_zero() => return Err(err("archive.interval", "must be above 0".into())),
                d => d,
            },
            webhook_retry_base: duration("webhooks.retry_base", &self.webhooks.retry_base)?,
            webhook_max_backoff: duration("webhooks.max_backoff", &self.webhooks.max_backoff)?,
            webhook_disable_after: duration("webhooks.disable_after", &self.webhooks.disable_after)?,
            webhook_timeout: match duration("webhooks.timeout", &self.webhooks.timeout)? {
                d if d.is_zero() => return Err(err("webhooks.timeout", "must be above 0".into())),
                d => d,
            },
            webhook_keep_deliveries: self.webhooks.keep_deliveries.max(1),
            etcd: self.cluster.etcd.clone(),
            cluster_prefix: self.cluster.prefix.clone(),
            ttl: duration("cluster.ttl", &self.cluster.ttl)?,
            node_id: self.cluster.node_id.clone(),
            cluster_secret: self.cluster.secret.clone(),
            cluster_tls: self.cluster_tls()?,
            master_listen: self
                .master
                .listen
                .parse()
                .map_err(|e| err("master.listen", format!("`{}` is not an address: {e}", self.master.listen)))?,
            dispatch: self.master.dispatch.clone(),
            resources: self.master.resources.clone(),
            max_in_flight: self.master.max_in_flight,
            poll_interval: duration("master.poll_interval", &self.master.poll_interval)?,
            rebalance_interval: duration("master.rebalance_interval", &self.master.rebalance_interval)?,
            overloads: self.master.overloads,
            worker_listen: self
                .worker
                .listen
                .parse()
                .map_err(|e| err("worker.listen", format!("`{}` is not an address: {e}", self.worker.listen)))?,
            worker_group: self.worker.group.clone(),
            extra_plugins: self.plugins.extra.clone(),
            admin_token: (!self.auth.admin_token.is_empty()).then(|| self.auth.admin_token.clone()),
            default_tenant: self.auth.default_tenant,
            secrets_key: self.secrets.key.trim().to_owned(),
            secrets_previous_keys: self.secrets.previous_keys.iter().map(|k| k.trim().to_owned()).collect(),
            max_upload: bytes("plugins.max_upload", &self.plugins.max_upload)?,
            compile_cpu: duration("plugins.compile_cpu", &self.plugins.compile_cpu)?,
            compile_memory: bytes("plugins.compile_memory", &self.plugins.compile_memory)?,
            compile_timeout: duration("plugins.compile_timeout", &self.plugins.compile_timeout)?,
            concurrent_compiles: self.plugins.concurrent_compiles,
            plugin_refresh: duration("plugins.refresh_interval", &self.plugins.refresh_interval)?,
        };
        let hex_key = |k: &str| k.len() == 64 && k.bytes().all(|b| b.is_ascii_hexdigit());
        if !settings.secrets_key.is_empty() && !hex_key(&settings.secrets_key) {
            return Err(err(
                "secrets.key",
                "must be 64 hex digits (32 bytes), e.g. from `openssl rand -hex 32`; the value is not shown".into(),
            ));
        }
        if let Some(i) = settings.secrets_previous_keys.iter().position(|k| !hex_key(k)) {
            return Err(err(
                &format!("secrets.previous_keys[{i}]"),
                "must be 64 hex digits (32 bytes); the value is not shown".into(),
            ));
        }
        if !settings.secrets_previous_keys.is_empty() && settings.secrets_key.is_empty() {
            return Err(err("secrets.previous_keys", "needs secrets.key: the key that seals from now on".into()));
        }
        if !matches!(settings.dispatch.as_str(), "least-loaded" | "round-robin") {
            return Err(err("master.dispatch", format!("`{}` must be least-loaded or round-robin", settings.dispatch)));
        }
        if !matches!(settings.resources.as_str(), "local" | "leader") {
            return Err(err("master.resources", format!("`{}` must be local or leader", settings.resources)));
        }
        if settings.ttl < Duration::from_secs(1) {
            return Err(err("cluster.ttl", "must be at least 1s".into()));
        }
        if settings.etcd.is_empty() {
            return Err(err("cluster.etcd", "needs at least one endpoint".into()));
        }
        if settings.default_memory > settings.max_memory {
            return Err(err("limits.default_memory", "must not exceed limits.max_memory".into()));
        }
        if settings.default_timeout.is_zero() {
            return Err(err("limits.default_timeout", "must be longer than zero".into()));
        }
        if let Some(token) = &settings.admin_token
            && !admin_token_is_well_formed(token)
        {
            return Err(err(
                "auth.admin_token",
                "must look like dagr_<id>_<secret>: an id of 12 lowercase letters or digits, and a secret of at \
                 least 32 characters"
                    .into(),
            ));
        }
        if settings.compile_cpu < Duration::from_secs(1) {
            return Err(err("plugins.compile_cpu", "must be at least 1s (the kernel counts whole seconds)".into()));
        }
        if settings.compile_memory < 256 << 20 {
            return Err(err(
                "plugins.compile_memory",
                "must be at least 256MiB (the compiler itself needs that)".into(),
            ));
        }
        if settings.compile_timeout.is_zero() {
            return Err(err("plugins.compile_timeout", "must be longer than zero".into()));
        }
        if settings.concurrent_compiles == 0 {
            return Err(err("plugins.concurrent_compiles", "must be at least 1".into()));
        }
        if settings.max_upload == 0 {
            return Err(err("plugins.max_upload", "must be at least 1 byte".into()));
        }
        if settings.plugin_refresh.is_zero() {
            return Err(err("plugins.refresh_interval", "must be longer than zero".into()));
        }
        Ok(settings)
    }
}

/// `dagr_<id>_<secret>`: an id of 12 lowercase letters or digits and a
/// secret of at least 32 characters (the API checks the same).
fn admin_token_is_well_formed(token: &str) -> bool {
    let Some((id, secret)) = token.strip_prefix("dagr_").and_then(|rest| rest.split_once('_')) else {
        return false;
    };
    id.len() == 12 && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) && secret.len() >= 32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        let s = Config::default().validate().unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
        assert!(s.store_url.starts_with("sqlite://"));
        assert_eq!(s.default_memory, 128 << 20);
    }

    #[test]
    fn an_otlp_endpoint_is_an_http_url() {
        let mut c = Config::default();
        assert_eq!(c.validate().unwrap().otlp_endpoint, "", "off by default");
        c.telemetry.otlp_endpoint = "http://127.0.0.1:4318/v1/traces".into();
        assert_eq!(c.validate().unwrap().otlp_endpoint, "http://127.0.0.1:4318/v1/traces");
        c.telemetry.otlp_endpoint = "grpc://collector:4317".into();
        let e = c.validate().unwrap_err();
        assert_eq!(e.field, "telemetry.otlp_endpoint");
        assert!(e.message.contains("grpc://collector:4317"), "{e}");
    }

    #[test]
    fn file_then_env() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dagr.toml");
        std::fs::write(&path, "[server]\nlisten = \"127.0.0.1:9999\"\n[worker]\nslots = 8\n").unwrap();
        figment::Jail::expect_with(|jail| {
            jail.set_env("DAGR_WORKER__SLOTS", "16");
            jail.set_env("DAGR_WORKER__EXTRA_CA_FILE", "/etc/dagr/ca.pem");
            jail.set_env("DAGR_SERVER__THREADS", "3");
            jail.set_env("DAGR_MASTER__TAKEOVER_WAKES_PER_STEP", "64");
            let config = Config::load(Some(&path)).unwrap();
            assert_eq!(config.server.listen, "127.0.0.1:9999");
            assert_eq!(config.worker.slots, 16);
            let settings = config.validate().unwrap();
            let defaults = Config::default().validate().unwrap();
            assert_eq!(settings.extra_ca_file.as_deref(), Some(Path::new("/etc/dagr/ca.pem")));
            assert_eq!(defaults.extra_ca_file, None);
            assert_eq!(settings.threads, 3);
            assert_eq!(defaults.threads, 0, "0: chosen by the role");
            assert_eq!((settings.takeover_wakes_per_step, defaults.takeover_wakes_per_step), (64, 16));
            Ok(())
        });
    }

    #[test]
    fn text_settings_that_look_like_numbers_are_taken_as_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dagr.toml");
        std::fs::write(&path, "[limits]\nmax_output = 2097152\n[api]\nevent_poll = 30\n").unwrap();
        figment::Jail::expect_with(|jail| {
            jail.set_env("DAGR_API__MAX_BODY", "67108864");
            jail.set_env("DAGR_SMTP__PASSWORD", "123456");
            jail.set_env("DAGR_CLUSTER__NODE_ID", "7");
            jail.set_env("DAGR_SERVER__DATA_DIR", "2026");
            let config = Config::load(Some(&path)).unwrap();
            assert_eq!(config.smtp.password, "123456");
            assert_eq!(config.server.data_dir, PathBuf::from("2026"));
            let e = config.validate().unwrap_err();
            assert_eq!(e.field, "api.event_poll", "a number of seconds, checked like any duration: {e}");
            jail.set_env("DAGR_API__EVENT_POLL", "0.5");
            let settings = Config::load(Some(&path)).unwrap().validate().unwrap();
            assert_eq!((settings.max_body, settings.max_output), (64 << 20, 2 << 20));
            assert_eq!(settings.node_id, "7");
            assert_eq!(settings.event_poll, Duration::from_millis(500));
            jail.set_env("DAGR_SMTP__FROM", "[1, 2]");
            let e = Config::load(Some(&path)).unwrap_err();
            assert_eq!(e.field, "smtp.from", "{e}");
            Ok(())
        });
    }

    #[test]
    fn plugin_limits_parse_and_are_checked() {
        let s = Config::default().validate().unwrap();
        assert_eq!((s.max_upload, s.compile_memory), (64 << 20, 2 << 30));
        assert_eq!((s.compile_cpu, s.compile_timeout), (Duration::from_secs(60), Duration::from_secs(120)));
        let mut c = Config::default();
        c.plugins.compile_cpu = "500ms".into();
        assert_eq!(c.validate().unwrap_err().field, "plugins.compile_cpu");
        let mut c = Config::default();
        c.plugins.max_upload = "lots".into();
        assert_eq!(c.validate().unwrap_err().field, "plugins.max_upload");
    }

    #[test]
    fn the_event_buffer_is_a_bounded_size() {
        assert_eq!(Config::default().validate().unwrap().event_buffer, 32 << 20);
        let mut c = Config::default();
        c.api.event_buffer = "4MiB".into();
        assert_eq!(c.validate().unwrap().event_buffer, 4 << 20);
        for bad in ["100KiB", "2GiB", "plenty"] {
            c.api.event_buffer = bad.into();
            let e = c.validate().unwrap_err();
            assert_eq!(e.field, "api.event_buffer", "{bad}");
            assert!(e.message.contains(bad) || bad == "plenty", "{e}");
        }
    }

    #[test]
    fn admin_tokens_are_checked() {
        let mut c = Config::default();
        assert_eq!(c.validate().unwrap().admin_token, None);
        c.auth.admin_token = format!("dagr_abcdefghij12_{}", "s".repeat(32));
        assert_eq!(c.validate().unwrap().admin_token, Some(c.auth.admin_token.clone()));
        for bad in ["secret", "dagr_short_ssssssssssssssssssssssssssssssssss", "dagr_abcdefghij12_tooshort"] {
            c.auth.admin_token = bad.into();
            assert_eq!(c.validate().unwrap_err().field, "auth.admin_token", "{bad}");
        }
    }

    #[test]
    fn tls_files_go_together_and_previous_keys_are_checked() {
        let mut c = Config::default();
        assert_eq!(c.validate().unwrap().cluster_tls, None);
        c.cluster.tls_cert = "/etc/dagr/node.pem".into();
        c.cluster.tls_ca = "/etc/dagr/ca.pem".into();
        let e = c.validate().unwrap_err();
        assert_eq!(e.field, "cluster.tls_key");
        assert!(e.message.contains("tls_cert, tls_ca set"), "{}", e.message);
        c.cluster.tls_key = "/etc/dagr/node.key".into();
        let tls = c.validate().unwrap().cluster_tls.unwrap();
        assert_eq!(tls.key, PathBuf::from("/etc/dagr/node.key"));

        let mut c = Config::default();
        c.secrets.previous_keys = vec!["ab".repeat(32)];
        assert_eq!(c.validate().unwrap_err().field, "secrets.previous_keys");
        c.secrets.key = "cd".repeat(32);
        assert_eq!(c.validate().unwrap().secrets_previous_keys, vec!["ab".repeat(32)]);
        c.secrets.previous_keys.push("nope".into());
        let e = c.validate().unwrap_err();
        assert_eq!(e.field, "secrets.previous_keys[1]");
        assert!(!e.message.contains("nope"));
    }

    #[test]
    fn secrets_keys_are_checked_without_showing_them() {
        let mut c = Config::default();
        assert_eq!(c.validate().unwrap().secrets_key, "");
        c.secrets.key = format!(" {} ", "ab".repeat(32));
        assert_eq!(c.validate().unwrap().secrets_key, "ab".repeat(32));
        for bad in ["abcd", &"zz".repeat(32), &"ab".repeat(33)] {
            c.secrets.key = bad.to_owned();
            let e = c.validate().unwrap_err();
            assert_eq!(e.field, "secrets.key", "{bad}");
            assert!(!e.message.contains(bad), "{e}");
        }
    }

    #[test]
    fn errors_name_the_field() {
        let mut c = Config::default();
        c.limits.default_timeout = "soon".into();
        assert_eq!(c.validate().unwrap_err().field, "limits.default_timeout");
        let mut c = Config::default();
        c.master.resources = "boss".into();
        let e = c.validate().unwrap_err();
        assert_eq!((e.field.as_str(), e.message.contains("local or leader")), ("master.resources", true), "{e}");
        c.master.resources = "leader".into();
        assert!(c.validate().is_ok());
        c.master.takeover_wakes_per_step = 0;
        let e = c.validate().unwrap_err();
        assert_eq!((e.field.as_str(), e.message.as_str()), ("master.takeover_wakes_per_step", "must be at least 1"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "[server]\nlisen = \"x\"\n").unwrap();
        let e = Config::load(Some(&path)).unwrap_err();
        assert!(e.message.contains("lisen"), "{e}");
    }
}
