//! dagr's coordination: who is alive, who leads, and when to stop acting.
//!
//! # Brief overview
//!
//! - A node [`join`](Coordinator)s under a lease (TTL default 10 s) with its
//!   role, address, capacity and labels. Every node watches the
//!   [`Membership`].
//! - Nodes that campaign (masters) elect one leader; [`Coordinator::leadership`]
//!   says whether this node leads and gives its [`FencingToken`]: an etcd
//!   revision, larger for every new term, that guards the leader's writes;
//!   [`Coordinator::leader`] tells every node who leads.
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

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
    /// The lease it registered under, set by the coordinator: a new one
    /// each time the node (re)joins. A request addressed to an earlier one
    /// was meant for a node that has since lost its lease (0: unknown).
    #[serde(default)]
    pub lease: i64,
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

/// Who leads, as every node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The leader's node id.
    pub id: String,
    pub token: FencingToken,
}

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

/// Whether this node's lease is still safe to act on. Cheap to read from
/// any thread, without waiting for the coordinator's tasks to run: after a
/// freeze (SIGSTOP), the first look already says no.
#[derive(Debug, Clone)]
pub struct LeaseGuard {
    /// Nanoseconds since [`origin`] until which acting is safe; 0 = never.
    safe_until: Arc<AtomicU64>,
}

fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

impl LeaseGuard {
    /// A guard that is never safe until [`LeaseGuard::extend`]ed.
    pub fn new() -> Self {
        LeaseGuard { safe_until: Arc::new(AtomicU64::new(0)) }
    }

    /// A guard that is always safe (one node, no leases).
    pub fn forever() -> Self {
        LeaseGuard { safe_until: Arc::new(AtomicU64::new(u64::MAX)) }
    }

    pub fn is_safe(&self) -> bool {
        (origin().elapsed().as_nanos() as u64) < self.safe_until.load(Ordering::Acquire)
    }

    /// Acting is safe until `until`.
    pub fn extend(&self, until: Instant) {
        let nanos = until.saturating_duration_since(origin()).as_nanos() as u64;
        self.safe_until.store(nanos, Ordering::Release);
    }

    pub fn revoke(&self) {
        self.safe_until.store(0, Ordering::Release);
    }
}

impl Default for LeaseGuard {
    fn default() -> Self {
        LeaseGuard::new()
    }
}

/// A node's view of the cluster.
pub trait Coordinator: Send + Sync + 'static {
    fn node(&self) -> &NodeInfo;
    /// The live members; changes as nodes come and go.
    fn membership(&self) -> watch::Receiver<Membership>;
    /// True while this node's lease is safely alive.
    fn health(&self) -> watch::Receiver<bool>;
    /// The same, as a guard that can be checked synchronously.
    fn lease_guard(&self) -> LeaseGuard;
    /// The lease this node is registered under now ([`NodeInfo::lease`] in
    /// the membership), if it is.
    fn lease(&self) -> Option<i64>;
    /// `Some(token)` while this node is the leader.
    fn leadership(&self) -> watch::Receiver<Option<FencingToken>>;
    /// Who leads now, as this node sees it (a little after the fact: the
    /// leader itself learns first, through [`Coordinator::leadership`]).
    fn leader(&self) -> watch::Receiver<Option<Leader>>;
    /// Leaves the cluster (revokes the lease) and stops the background work.
    fn leave(&self);
}
