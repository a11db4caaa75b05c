//! In-process coordination: a [`LocalHub`] plays etcd for nodes in one
//! process. `dagr serve` uses a hub with one node; tests use several, and
//! [`LocalHub::cut`] / [`LocalHub::heal`] simulate a node losing and
//! regaining its lease.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::{Coordinator, FencingToken, Leader, LeaseGuard, Membership, NodeInfo, SessionConfig};

/// The shared state of an in-process cluster.
#[derive(Clone, Default)]
pub struct LocalHub {
    inner: Arc<Mutex<HubState>>,
}

#[derive(Default)]
struct HubState {
    nodes: BTreeMap<String, Member>,
    /// Campaigning nodes in the order they (re)joined; the first live one leads.
    queue: Vec<String>,
    leader: Option<String>,
    token: FencingToken,
    membership: Option<watch::Sender<Membership>>,
    leader_tx: Option<watch::Sender<Option<Leader>>>,
    /// The last lease handed out.
    leases: i64,
}

struct Member {
    info: NodeInfo,
    guard: LeaseGuard,
    live: bool,
    campaign: bool,
    health: watch::Sender<bool>,
    leadership: watch::Sender<Option<FencingToken>>,
}

/// One node's handle on a [`LocalHub`].
pub struct LocalCoordinator {
    hub: LocalHub,
    guard: LeaseGuard,
    node: NodeInfo,
    membership: watch::Receiver<Membership>,
    health: watch::Receiver<bool>,
    leadership: watch::Receiver<Option<FencingToken>>,
    leader: watch::Receiver<Option<Leader>>,
}

impl LocalHub {
    pub fn new() -> Self {
        LocalHub::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HubState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a node; it is healthy at once.
    pub fn join(&self, node: NodeInfo, config: &SessionConfig) -> Arc<LocalCoordinator> {
        let mut state = self.lock();
        let membership = state.membership.get_or_insert_with(|| watch::channel(Membership::default()).0).subscribe();
        let leader = state.leader_tx.get_or_insert_with(|| watch::channel(None).0).subscribe();
        let (health, health_rx) = watch::channel(true);
        let (leadership, leadership_rx) = watch::channel(None);
        let guard = LeaseGuard::forever();
        state.leases += 1;
        let node = NodeInfo { lease: state.leases, ..node };
        state.nodes.insert(
            node.id.clone(),
            Member {
                info: node.clone(),
                guard: guard.clone(),
                live: true,
                campaign: config.campaign,
                health,
                leadership,
            },
        );
        if config.campaign {
            state.queue.push(node.id.clone());
        }
        state.publish();
        Arc::new(LocalCoordinator {
            hub: self.clone(),
            guard,
            node,
            membership,
            health: health_rx,
            leadership: leadership_rx,
            leader,
        })
    }

    /// The node loses its lease: it self-fences and drops out of membership.
    pub fn cut(&self, id: &str) {
        let mut state = self.lock();
        if let Some(member) = state.nodes.get_mut(id) {
            member.live = false;
            member.guard.revoke();
            let _ = member.health.send(false);
            let _ = member.leadership.send(None);
        }
        state.queue.retain(|q| q != id);
        state.publish();
    }

    /// The node re-joins under a new lease (and campaigns again, last in line).
    pub fn heal(&self, id: &str) {
        let mut state = self.lock();
        let lease = state.leases + 1;
        let campaign = match state.nodes.get_mut(id) {
            Some(member) if !member.live => {
                member.live = true;
                member.info.lease = lease;
                member.guard.extend(std::time::Instant::now() + std::time::Duration::from_secs(100 * 365 * 24 * 3600));
                let _ = member.health.send(true);
                member.campaign
            }
            _ => return,
        };
        state.leases = lease;
        if campaign {
            state.queue.push(id.to_owned());
        }
        state.publish();
    }

    fn leave(&self, id: &str) {
        let mut state = self.lock();
        if let Some(member) = state.nodes.remove(id) {
            let _ = member.health.send(false);
            let _ = member.leadership.send(None);
        }
        state.queue.retain(|q| q != id);
        state.publish();
    }
}

impl HubState {
    /// Publishes membership and (re)elects.
    fn publish(&mut self) {
        let nodes = self.nodes.iter().filter(|(_, m)| m.live).map(|(id, m)| (id.clone(), m.info.clone())).collect();
        if let Some(tx) = &self.membership {
            tx.send_replace(Membership { nodes });
        }
        let leader = self.queue.first().cloned();
        if leader != self.leader {
            if let Some(old) = self.leader.take().and_then(|id| self.nodes.get(&id)) {
                let _ = old.leadership.send(None);
            }
            if let Some(id) = &leader {
                self.token += 1;
                if let Some(member) = self.nodes.get(id) {
                    let _ = member.leadership.send(Some(self.token));
                }
            }
            self.leader = leader;
            if let Some(tx) = &self.leader_tx {
                tx.send_replace(self.leader.clone().map(|id| Leader { id, token: self.token }));
            }
        }
    }
}

impl Coordinator for LocalCoordinator {
    fn node(&self) -> &NodeInfo {
        &self.node
    }

    fn membership(&self) -> watch::Receiver<Membership> {
        self.membership.clone()
    }

    fn health(&self) -> watch::Receiver<bool> {
        self.health.clone()
    }

    fn lease_guard(&self) -> LeaseGuard {
        self.guard.clone()
    }

    fn lease(&self) -> Option<i64> {
        let state = self.hub.lock();
        state.nodes.get(&self.node.id).filter(|m| m.live).map(|m| m.info.lease)
    }

    fn leadership(&self) -> watch::Receiver<Option<FencingToken>> {
        self.leadership.clone()
    }

    fn leader(&self) -> watch::Receiver<Option<Leader>> {
        self.leader.clone()
    }

    fn leave(&self) {
        self.hub.leave(&self.node.id);
    }
}
