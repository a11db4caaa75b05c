//! dagr's configuration: one struct tree for every role.
//!
//! Layers, each overriding the one before: built-in defaults, a TOML file
//! (`--config FILE` or `DAGR_CONFIG`), `DAGR_*` environment variables
//! (sections separated by a double underscore: `DAGR_SERVER__LISTEN`,
//! `DAGR_STORE__URL`), then command-line flags. [`Config::validate`] checks
//! the result and names the field of every problem.
//!
//! ```toml
//! [server]
//! listen = "127.0.0.1:8080"
//! data_dir = "./dagr-data"
//!
//! [store]
//! # url = "postgres://dagr@127.0.0.1/dagr"   # default: SQLite in data_dir
//! synchronous = "normal"                     # or "full"
//!
//! [worker]
//! slots = 256
//!
//! [limits]
//! default_timeout = "1h"
//! default_memory = "128MiB"
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dagr_core::units::{parse_bytes, parse_duration};
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};

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
}

/// Cluster mode: how nodes find each other.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// etcd endpoints.
    pub etcd: Vec<String>,
    /// Key prefix in etcd; clusters sharing an etcd need different ones.
    pub prefix: String,
    /// Lease time-to-live: how long a silent node stays a member.
    pub ttl: String,
    /// This node's id; empty: `<role>-<host>-<pid>`.
    pub node_id: String,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            etcd: vec!["http://127.0.0.1:2379".into()],
            prefix: "/dagr".into(),
            ttl: "10s".into(),
            node_id: String::new(),
        }
    }
}

/// A master's settings (cluster mode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MasterConfig {
    /// The master's internal endpoint (workers report results here).
    pub listen: String,
    /// `least-loaded` or `round-robin` (weighted by capacity).
    pub dispatch: String,
    /// Attempts one master keeps in flight at most.
    pub max_in_flight: u32,
    /// How often a master looks for new commands without being woken.
    pub poll_interval: String,
}

impl Default for MasterConfig {
    fn default() -> Self {
        MasterConfig {
            listen: "127.0.0.1:7100".into(),
            dispatch: "least-loaded".into(),
            max_in_flight: 10_000,
            poll_interval: "500ms".into(),
        }
    }
}

/// Extra global plugins, loaded from files at startup (every role loads the
/// same list).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PluginsConfig {
    pub extra: Vec<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address of the HTTP API.
    pub listen: String,
    /// Where dagr keeps its files (the SQLite database, compiled code).
    pub data_dir: PathBuf,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig { listen: "127.0.0.1:8080".into(), data_dir: PathBuf::from("./dagr-data") }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `sqlite://PATH` or `postgres://…`; empty: SQLite in the data directory.
    pub url: String,
    /// SQLite durability: `normal` (WAL; survives a crash of dagr) or `full`
    /// (fsync every commit; survives power loss).
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
    pub listen: String,
    /// The worker's group (tasks with `worker_group` run only on their group).
    pub group: String,
    /// Attempts that run at once.
    pub slots: u32,
    /// Threads that run guests; 0 means one per CPU.
    pub guest_threads: usize,
    /// Compiled-code cache; empty: `<data_dir>/cache`.
    pub cache_dir: String,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            listen: "127.0.0.1:7200".into(),
            group: String::new(),
            slots: 256,
            guest_threads: 0,
            cache_dir: String::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Attempt deadline when a task sets none.
    pub default_timeout: String,
    /// Attempt memory when a task sets none.
    pub default_memory: String,
    /// The most memory a task may ask for.
    pub max_memory: String,
    /// The largest task output.
    pub max_output: String,
    /// The largest attempt log.
    pub max_log: String,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            default_timeout: "1h".into(),
            default_memory: "128MiB".into(),
            max_memory: "1GiB".into(),
            max_output: "1MiB".into(),
            max_log: "1MiB".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiConfig {
    /// The largest request body.
    pub max_body: String,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig { max_body: "4MiB".into() }
    }
}

/// A configuration problem, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("config: {field}: {message}")]
pub struct ConfigError {
    pub field: String,
    pub message: String,
}

/// The checked, typed values the rest of dagr uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub store_url: String,
    pub synchronous_full: bool,
    pub slots: u32,
    pub guest_threads: usize,
    pub cache_dir: PathBuf,
    pub default_timeout: Duration,
    pub default_memory: u64,
    pub max_memory: u64,
    pub max_output: u64,
    pub max_log: u64,
    pub max_body: u64,
    pub etcd: Vec<String>,
    pub cluster_prefix: String,
    pub ttl: Duration,
    pub node_id: String,
    pub master_listen: SocketAddr,
    pub dispatch: String,
    pub max_in_flight: u32,
    pub poll_interval: Duration,
    pub worker_listen: SocketAddr,
    pub worker_group: String,
    pub extra_plugins: Vec<PathBuf>,
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
        let settings = Settings {
            listen,
            data_dir: self.server.data_dir.clone(),
            store_url,
            synchronous_full,
            slots: self.worker.slots,
            guest_threads: self.worker.guest_threads,
            cache_dir: if self.worker.cache_dir.is_empty() {
                self.server.data_dir.join("cache")
            } else {
                PathBuf::from(&self.worker.cache_dir)
            },
            default_timeout: duration("limits.default_timeout", &self.limits.default_timeout)?,
            default_memory: bytes("limits.default_memory", &self.limits.default_memory)?,
            max_memory: bytes("limits.max_memory", &self.limits.max_memory)?,
            max_output: bytes("limits.max_output", &self.limits.max_output)?,
            max_log: bytes("limits.max_log", &self.limits.max_log)?,
            max_body: bytes("api.max_body", &self.api.max_body)?,
            etcd: self.cluster.etcd.clone(),
            cluster_prefix: self.cluster.prefix.clone(),
            ttl: duration("cluster.ttl", &self.cluster.ttl)?,
            node_id: self.cluster.node_id.clone(),
            master_listen: self
                .master
                .listen
                .parse()
                .map_err(|e| err("master.listen", format!("`{}` is not an address: {e}", self.master.listen)))?,
            dispatch: self.master.dispatch.clone(),
            max_in_flight: self.master.max_in_flight,
            poll_interval: duration("master.poll_interval", &self.master.poll_interval)?,
            worker_listen: self
                .worker
                .listen
                .parse()
                .map_err(|e| err("worker.listen", format!("`{}` is not an address: {e}", self.worker.listen)))?,
            worker_group: self.worker.group.clone(),
            extra_plugins: self.plugins.extra.clone(),
        };
        if !matches!(settings.dispatch.as_str(), "least-loaded" | "round-robin") {
            return Err(err("master.dispatch", format!("`{}` must be least-loaded or round-robin", settings.dispatch)));
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
        Ok(settings)
    }
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
    fn file_then_env() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dagr.toml");
        std::fs::write(&path, "[server]\nlisten = \"127.0.0.1:9999\"\n[worker]\nslots = 8\n").unwrap();
        figment::Jail::expect_with(|jail| {
            jail.set_env("DAGR_WORKER__SLOTS", "16");
            let config = Config::load(Some(&path)).unwrap();
            assert_eq!(config.server.listen, "127.0.0.1:9999");
            assert_eq!(config.worker.slots, 16);
            Ok(())
        });
    }

    #[test]
    fn errors_name_the_field() {
        let mut c = Config::default();
        c.limits.default_timeout = "soon".into();
        assert_eq!(c.validate().unwrap_err().field, "limits.default_timeout");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "[server]\nlisen = \"x\"\n").unwrap();
        let e = Config::load(Some(&path)).unwrap_err();
        assert!(e.message.contains("lisen"), "{e}");
    }
}
