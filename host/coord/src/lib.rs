//! dagr's coordination: who is alive, who leads, and when to stop acting.
//!
//! # Brief overview
//!
//! - A node [`join`](Coordinator)s under a lease (TTL default 10 s) with its
//!   role, address, capacity and labels. Every node watches the
//!   [`Membership`].
//! - Nodes that campaign (masters) elect one leader; [`Coordinator::leadership`]
//!   says whether this node leads and gives its [`FencingToken`]: an etcd
//!   revision, larger for every new term, that guards the leader's writes.
//! - **Self-fencing:** [`Coordinator::health`] turns false as soon as the
//!   lease cannot be renewed in time — *before* it expires at the server — so
//!   that a node stops acting before anyone else may take over. It turns
//!   true again once the node has re-joined under a new lease.
//! - Two implementations: [`local::LocalHub`] (in-process, for `dagr serve`
//!   and tests; it can simulate a lost lease) and [`etcd::EtcdCoordinator`].
//!   [`conformance`] checks both behave alike.
//!
//! Leases alone do not give mutual exclusion (a paused process does not
//! know its lease expired); the store's epoch check does. Coordination only
//! decides who *should* act.

pub mod conformance;
pub mod etcd;
pub mod local;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// What a node does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Api,
    Master,
    Worker,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Api => "api",
            Role::Master => "master",
            Role::Worker => "worker",
        })
    }
}

/// A member of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Unique and stable for the life of the process.
    pub id: String,
    pub role: Role,
    /// Base URL of its internal HTTP endpoint, e.g. `http://127.0.0.1:7001`.
    pub addr: String,
    /// Attempts a worker runs at once (0 for other roles).
    pub capacity: u32,
    /// Worker group and other labels, for routing.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Process id, for people and tests.
    #[serde(default)]
    pub pid: u32,
}

/// The live members, by id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Membership {
    pub nodes: BTreeMap<String, NodeInfo>,
}

impl Membership {
    pub fn with_role(&self, role: Role) -> impl Iterator<Item = &NodeInfo> {
        self.nodes.values().filter(move |n| n.role == role)
    }

    pub fn contains(&self, id: &str) -> bool {
        self.nodes.contains_key(id)
    }
}

/// A leader's fencing token: strictly larger for every later leader.
pub type FencingToken = i64;

/// Errors of a coordinator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    #[error("{0}")]
    Other(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Settings of a node's session.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Lease time-to-live.
    pub ttl: Duration,
    /// Whether this node takes part in leader election.
    pub campaign: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig { ttl: Duration::from_secs(10), campaign: false }
    }
}

impl SessionConfig {
    /// How long before the lease would expire a node stops acting.
    pub fn fence_margin(&self) -> Duration {
        (self.ttl / 5).max(Duration::from_millis(300))
    }
}

/// A node's view of the cluster.
pub trait Coordinator: Send + Sync + 'static {
    fn node(&self) -> &NodeInfo;
    /// The live members; changes as nodes come and go.
    fn membership(&self) -> watch::Receiver<Membership>;
    /// True while this node's lease is safely alive.
    fn health(&self) -> watch::Receiver<bool>;
    /// `Some(token)` while this node is the leader.
    fn leadership(&self) -> watch::Receiver<Option<FencingToken>>;
    /// Leaves the cluster (revokes the lease) and stops the background work.
    fn leave(&self);
}
