//! The sections of the configuration file, as written (see the crate's
//! documentation for the file; [`crate::Config::validate`] checks them).

use std::fmt;
use std::path::PathBuf;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

/// A setting written as text. The environment's values and TOML's are
/// parsed before they reach a section, so `DAGR_SMTP__PASSWORD=123456`,
/// `DAGR_API__MAX_BODY=1048576` or `max_body = 1048576` arrive as numbers
/// (and `true` as a boolean): each is taken as the text it was written as,
/// and a size or a duration is then parsed, and checked, like any other
/// (`crate::Config::validate`). Anything else (a list, a table) is refused,
/// naming the key.
fn text<'de, D: Deserializer<'de>, T: From<String>>(d: D) -> Result<T, D::Error> {
    struct Text;
    impl Visitor<'_> for Text {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string (or a number or boolean, taken as text)")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_owned())
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
            Ok(v)
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i128<E: de::Error>(self, v: i128) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u128<E: de::Error>(self, v: u128) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    d.deserialize_any(Text).map(T::from)
}

/// The SMTP server alert mail goes out through.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SmtpConfig {
    /// Empty: no mail (rules with the email channel fail to send, saying so).
    #[serde(deserialize_with = "text")]
    pub host: String,
    pub port: u16,
    /// `starttls` (upgrade, required), `tls` (implicit, port 465) or `none`
    /// (loopback relays and tests only).
    #[serde(deserialize_with = "text")]
    pub security: String,
    #[serde(deserialize_with = "text")]
    pub username: String,
    #[serde(deserialize_with = "text")]
    pub password: String,
    #[serde(deserialize_with = "text")]
    pub from: String,
}

impl Default for SmtpConfig {
    fn default() -> Self {
        SmtpConfig {
            host: String::new(),
            port: 587,
            security: "starttls".into(),
            username: String::new(),
            password: String::new(),
            from: "dagr <dagr@localhost>".into(),
        }
    }
}

/// Alerts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertsConfig {
    /// The start of the links in alert messages.
    #[serde(deserialize_with = "text")]
    pub base_url: String,
}

/// Publishing the event log to NATS.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsConfig {
    /// `nats://host:port`; empty: no publishing.
    #[serde(deserialize_with = "text")]
    pub url: String,
    #[serde(deserialize_with = "text")]
    pub prefix: String,
}

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig { url: String::new(), prefix: "dagr".into() }
    }
}

/// Webhook deliveries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhooksConfig {
    pub allow_private: bool,
    pub max_per_tenant: usize,
    #[serde(deserialize_with = "text")]
    pub retry_base: String,
    #[serde(deserialize_with = "text")]
    pub max_backoff: String,
    #[serde(deserialize_with = "text")]
    pub disable_after: String,
    #[serde(deserialize_with = "text")]
    pub timeout: String,
    pub keep_deliveries: u32,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        WebhooksConfig {
            allow_private: false,
            max_per_tenant: 20,
            retry_base: "1s".into(),
            max_backoff: "5m".into(),
            disable_after: "24h".into(),
            timeout: "10s".into(),
            keep_deliveries: 100,
        }
    }
}

/// Hot and cold data (issue 18): when finished runs move to cold
/// partitions and how long they stay there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ArchiveConfig {
    pub enabled: bool,
    #[serde(deserialize_with = "text")]
    pub after: String,
    #[serde(deserialize_with = "text")]
    pub period: String,
    /// Empty: cold partitions are kept for ever.
    #[serde(deserialize_with = "text")]
    pub retain_for: String,
    /// Empty: cold logs stay as long as their runs.
    #[serde(deserialize_with = "text")]
    pub logs_retain_for: String,
    /// Empty: the audit log is kept for ever.
    #[serde(deserialize_with = "text")]
    pub audit_retain_for: String,
    pub batch: u32,
    #[serde(deserialize_with = "text")]
    pub interval: String,
}

impl Default for ArchiveConfig {
    fn default() -> Self {
        ArchiveConfig {
            enabled: true,
            after: "7d".into(),
            period: "month".into(),
            retain_for: String::new(),
            logs_retain_for: String::new(),
            audit_retain_for: String::new(),
            batch: 500,
            interval: "1m".into(),
        }
    }
}

/// Prometheus metrics at `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Serve `/metrics` without any token.
    pub public: bool,
}

/// Tenants' secrets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecretsConfig {
    /// The key (64 hex digits: 32 bytes) that seals tenants' secrets in the
    /// store. Empty: `dagr serve` reads `<data_dir>/secrets.key`, made at
    /// the first start; `dagr api` and `dagr worker` require it, and must
    /// share it. Keep it apart from the database's backups.
    #[serde(deserialize_with = "text")]
    pub key: String,
    /// Keys that sealed secrets before `key` did: they still open them
    /// (never seal), while `dagr secrets rotate` re-seals every secret
    /// under `key`.
    pub previous_keys: Vec<String>,
}

/// API authentication.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// The admin token, `dagr_<id>_<secret>`; empty: one is generated at the
    /// first start (printed once, and written to `<data_dir>/admin.token`).
    #[serde(deserialize_with = "text")]
    pub admin_token: String,
    /// Make sure the tenant `default` exists, with a first token (printed
    /// once, and written to `<data_dir>/token`) when it is created.
    /// `dagr serve` always does.
    pub default_tenant: bool,
}

/// Cluster mode: how nodes find each other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// etcd endpoints.
    pub etcd: Vec<String>,
    /// Key prefix in etcd; clusters sharing an etcd need different ones.
    #[serde(deserialize_with = "text")]
    pub prefix: String,
    /// Lease time-to-live: how long a silent node stays a member.
    #[serde(deserialize_with = "text")]
    pub ttl: String,
    /// This node's id; empty: `<role>-<host>-<pid>`.
    #[serde(deserialize_with = "text")]
    pub node_id: String,
    /// The secret every node of the cluster shares (at least 16
    /// characters): internal requests between nodes carry it, and nodes
    /// refuse internal requests without it. Required by `dagr api`,
    /// `master` and `worker`.
    #[serde(deserialize_with = "text")]
    pub secret: String,
    /// Mutual TLS between nodes: this node's certificate (PEM)...
    #[serde(deserialize_with = "text")]
    pub tls_cert: String,
    /// ... its private key (PEM)...
    #[serde(deserialize_with = "text")]
    pub tls_key: String,
    /// ... and the CA that signs every node's certificate (PEM). All three
    /// or none; with them, internal ports serve only TLS and admit only
    /// peers whose certificate this CA signed.
    #[serde(deserialize_with = "text")]
    pub tls_ca: String,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            etcd: vec!["http://127.0.0.1:2379".into()],
            prefix: "/dagr".into(),
            ttl: "10s".into(),
            node_id: String::new(),
            secret: String::new(),
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_ca: String::new(),
        }
    }
}

/// A master's settings (cluster mode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MasterConfig {
    /// The master's internal endpoint (workers report results here).
    #[serde(deserialize_with = "text")]
    pub listen: String,
    /// `least-loaded` or `round-robin` (weighted by capacity).
    #[serde(deserialize_with = "text")]
    pub dispatch: String,
    /// Who decides how many attempts a master puts on each worker: `local`
    /// (each master from its own view; workers refuse past capacity) or
    /// `leader` (the elected leader holds every worker's slots in memory
    /// and grants them to all masters: Buffalo's resource scheduler).
    #[serde(deserialize_with = "text")]
    pub resources: String,
    /// Attempts one master keeps in flight at most.
    pub max_in_flight: u32,
    /// How often a master looks for new commands without being woken.
    #[serde(deserialize_with = "text")]
    pub poll_interval: String,
    /// How often masters report their load and the leader compares them.
    #[serde(deserialize_with = "text")]
    pub rebalance_interval: String,
    /// Consecutive overloaded checks before a master sheds slots.
    pub overloads: u32,
    /// Times a task's attempt may be lost with its node (the node died or
    /// left while running it) before the task fails instead of going again:
    /// a task that crashes its node must not crash it forever.
    pub max_lost_attempts: u32,
    /// Missed cycles a schedule with `catch_up` makes up for at most; older
    /// ones are skipped (and an event says which).
    pub max_catch_up: u32,
    /// Runs a catching-up schedule creates per second at most (the rest of
    /// its backlog follows a second later, and so on).
    pub catch_up_per_second: u32,
    /// Task state changes an engine step commits at most: a burst beyond
    /// it (a fan-out's 10,000 ready tasks, a run of 10,000 roots) is
    /// queued over the next steps, each committed on its own, so that no
    /// single commit holds the store (and every other run's step) for
    /// long.
    pub step_task_changes: u32,
    /// Runs waiting for another workflow that a master wakes (to judge
    /// them again) per engine step after taking over slots: the rest of a
    /// large takeover follows in the next steps, so that other runs' work
    /// goes on between its pages.
    pub takeover_wakes_per_step: u32,
}

impl Default for MasterConfig {
    fn default() -> Self {
        MasterConfig {
            listen: "127.0.0.1:7100".into(),
            dispatch: "least-loaded".into(),
            resources: "local".into(),
            max_in_flight: 10_000,
            poll_interval: "500ms".into(),
            rebalance_interval: "30s".into(),
            overloads: 3,
            max_lost_attempts: 3,
            max_catch_up: 100,
            catch_up_per_second: dagr_core::schedule::MAX_RUNS_PER_STEP as u32,
            step_task_changes: dagr_core::run::DEFAULT_STEP_TASK_CHANGES as u32,
            takeover_wakes_per_step: dagr_core::run::DEFAULT_TAKEOVER_WAKES_PER_STEP as u32,
        }
    }
}

/// Plugins: extra global ones, and the registry of tenants' own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PluginsConfig {
    /// Extra global plugins, loaded from files at startup (every role loads
    /// the same list).
    pub extra: Vec<PathBuf>,
    /// The largest component a tenant may upload.
    #[serde(deserialize_with = "text")]
    pub max_upload: String,
    /// CPU time an upload's validation and compilation may take (in a child
    /// process; all its threads together).
    #[serde(deserialize_with = "text")]
    pub compile_cpu: String,
    /// Address space of that child process.
    #[serde(deserialize_with = "text")]
    pub compile_memory: String,
    /// Wall-clock time after which that child is killed.
    #[serde(deserialize_with = "text")]
    pub compile_timeout: String,
    /// Uploads compiled at once; more wait for a turn.
    pub concurrent_compiles: u32,
    /// How often a node re-reads the list of tenants' plugins (it also does
    /// when it misses one).
    #[serde(deserialize_with = "text")]
    pub refresh_interval: String,
}

impl Default for PluginsConfig {
    fn default() -> Self {
        PluginsConfig {
            extra: Vec::new(),
            // Python components (componentize-py) are ~18 MB and take 13-16 s
            // of CPU to compile on a 2-core machine, JavaScript ones (jco)
            // 12-15 MB and 16 s: these leave them 3-4x room.
            max_upload: "64MiB".into(),
            compile_cpu: "60s".into(),
            compile_memory: "2GiB".into(),
            compile_timeout: "120s".into(),
            concurrent_compiles: 2,
            refresh_interval: "2s".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address of the HTTP API.
    #[serde(deserialize_with = "text")]
    pub listen: String,
    /// Where dagr keeps its files (the SQLite database, compiled code).
    #[serde(deserialize_with = "text")]
    pub data_dir: PathBuf,
    /// Threads of the node's own runtime (engine, API, dispatch, the
    /// worker's service); 0: half the CPUs (at least one) in a process that
    /// also runs guests, which have threads of their own, else one per CPU.
    pub threads: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig { listen: "127.0.0.1:8080".into(), data_dir: PathBuf::from("./dagr-data"), threads: 0 }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `sqlite://PATH` or `postgres://…`; empty: SQLite in the data directory.
    #[serde(deserialize_with = "text")]
    pub url: String,
    /// SQLite durability: `normal` (WAL; survives a crash of dagr) or `full`
    /// (fsync every commit; survives power loss).
    #[serde(deserialize_with = "text")]
    pub synchronous: String,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig { url: String::new(), synchronous: "normal".into() }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerConfig {
    /// The worker's internal endpoint (cluster mode; masters push attempts here).
    #[serde(deserialize_with = "text")]
    pub listen: String,
    /// The worker's group (tasks with `worker_group` run only on their group).
    #[serde(deserialize_with = "text")]
    pub group: String,
    /// Attempts that run at once.
    pub slots: u32,
    /// Threads that run guests; 0 means one per CPU.
    pub guest_threads: usize,
    /// Compiled-code cache; empty: `<data_dir>/cache`.
    #[serde(deserialize_with = "text")]
    pub cache_dir: String,
    /// A PEM file of certificate authorities that plugins' HTTPS requests
    /// trust besides the public (webpki) roots; empty: none.
    #[serde(deserialize_with = "text")]
    pub extra_ca_file: String,
    /// The most files and directories one attempt's scratch directory may
    /// hold (whatever its tenant's byte quota).
    pub scratch_max_entries: u64,
    /// How deep one attempt may nest directories in its scratch directory.
    pub scratch_max_depth: u64,
    /// The most resources one attempt may hold at once: open files (each a
    /// descriptor of the node), streams, HTTP fields and requests.
    pub max_handles: usize,
    /// The most host memory one HTTP headers (`fields`) resource may take.
    #[serde(deserialize_with = "text")]
    pub http_field_bytes: String,
    /// How deeply a task's output (JSON) may nest arrays and objects; a
    /// deeper one fails the attempt. At most 120.
    pub max_output_depth: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            listen: "127.0.0.1:7200".into(),
            group: String::new(),
            slots: 256,
            guest_threads: 0,
            cache_dir: String::new(),
            extra_ca_file: String::new(),
            scratch_max_entries: 10_000,
            scratch_max_depth: 64,
            max_handles: 1024,
            http_field_bytes: "16KiB".into(),
            max_output_depth: dagr_core::document::DEFAULT_MAX_DEPTH,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Attempt deadline when a task sets none.
    #[serde(deserialize_with = "text")]
    pub default_timeout: String,
    /// Attempt memory when a task sets none.
    #[serde(deserialize_with = "text")]
    pub default_memory: String,
    /// The most memory a task may ask for.
    #[serde(deserialize_with = "text")]
    pub max_memory: String,
    /// The largest task output.
    #[serde(deserialize_with = "text")]
    pub max_output: String,
    /// The largest attempt log.
    #[serde(deserialize_with = "text")]
    pub max_log: String,
    /// The most a task's params may be once their templates are rendered
    /// (as JSON); more fails the task.
    #[serde(deserialize_with = "text")]
    pub max_params: String,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            default_timeout: "1h".into(),
            default_memory: "128MiB".into(),
            max_memory: "1GiB".into(),
            max_output: "1MiB".into(),
            max_log: "1MiB".into(),
            max_params: "4MiB".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiConfig {
    /// The largest request body; also the most a YAML definition may stand
    /// for once its aliases are expanded.
    #[serde(deserialize_with = "text")]
    pub max_body: String,
    /// How deeply a request body or definition may nest arrays and objects
    /// (sequences and mappings). At most 120.
    pub max_depth: usize,
    /// How often the API reads the event log for its event streams: the
    /// most an event waits before it is streamed.
    #[serde(deserialize_with = "text")]
    pub event_poll: String,
    /// Event streams open at once; one more is refused (429).
    pub max_event_streams: usize,
    /// Most runs one backfill may create (with its downstream workflows').
    pub max_backfill_runs: usize,
    /// A tenant's unfinished runs (queued, waiting, running, paused) past
    /// which a new backfill is refused (429); a tenant's own limit
    /// (`max_unfinished_runs`) replaces it. Every unfinished run is held
    /// by a master, in memory.
    pub max_unfinished_runs: usize,
    /// The newest events the API keeps in memory for its event streams
    /// (their frames, in bytes); a stream further behind reads the store.
    #[serde(deserialize_with = "text")]
    pub event_buffer: String,
    /// How long a sign-in to the web UI lasts.
    #[serde(deserialize_with = "text")]
    pub ui_session: String,
    /// Whether the web UI's session cookie is `Secure` (only sent over
    /// HTTPS): set it when users reach dagr through HTTPS.
    pub ui_secure_cookie: bool,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            max_body: "4MiB".into(),
            max_depth: dagr_core::document::DEFAULT_MAX_DEPTH,
            event_poll: "50ms".into(),
            max_event_streams: 1000,
            max_backfill_runs: 10_000,
            max_unfinished_runs: 100_000,
            event_buffer: "32MiB".into(),
            ui_session: "12h".into(),
            ui_secure_cookie: false,
        }
    }
}

/// Traces (`[telemetry]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The OTLP/HTTP traces URL (e.g. `http://127.0.0.1:4318/v1/traces`)
    /// spans are exported to, as JSON; empty: no spans are recorded.
    #[serde(deserialize_with = "text")]
    pub otlp_endpoint: String,
    /// The `service.name` of this node's spans; empty: `dagr-<role>`.
    #[serde(deserialize_with = "text")]
    pub service_name: String,
}
