//! Coordination on etcd (through etcd-client).
//!
//! Keys, under a cluster prefix (default `/dagr`):
//! - `{prefix}/nodes/{id}`: a node's [`NodeInfo`] as JSON, attached to its lease;
//! - `{prefix}/leader`: the election (etcd's election API); the leader key's
//!   creation revision is the fencing token.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, EventType, GetOptions, PutOptions, WatchOptions};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::{Coordinator, FencingToken, Leader, LeaseGuard, Membership, NodeInfo, Result, SessionConfig};

/// A node's session with etcd.
pub struct EtcdCoordinator {
    node: NodeInfo,
    guard: LeaseGuard,
    membership: watch::Receiver<Membership>,
    health: watch::Receiver<bool>,
    leadership: watch::Receiver<Option<FencingToken>>,
    leader: watch::Receiver<Option<Leader>>,
    tasks: Vec<JoinHandle<()>>,
    client: Client,
    lease: Arc<std::sync::Mutex<Option<i64>>>,
}

impl Drop for EtcdCoordinator {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Connects to etcd, retrying until `deadline`.
pub async fn connect(endpoints: &[String], deadline: Duration) -> Result<Client> {
    let until = Instant::now() + deadline;
    loop {
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(1))
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2));
        match Client::connect(endpoints, Some(options)).await {
            Ok(client) => return Ok(client),
            Err(e) if Instant::now() >= until => return Err(e.into()),
            Err(e) => {
                tracing::warn!(error = %e, "cannot reach etcd yet; retrying");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
}

impl EtcdCoordinator {
    /// Joins the cluster: registers `node` under a lease, keeps it alive,
    /// watches membership and, if configured, campaigns for leadership.
    pub async fn start(endpoints: &[String], prefix: &str, node: NodeInfo, config: SessionConfig) -> Result<Arc<Self>> {
        let client = connect(endpoints, Duration::from_secs(30)).await?;
        let prefix = prefix.trim_end_matches('/').to_owned();
        let (membership_tx, membership) = watch::channel(Membership::default());
        let (health_tx, health) = watch::channel(false);
        let (leadership_tx, leadership) = watch::channel(None);
        let lease = Arc::new(std::sync::Mutex::new(None));
        let guard = LeaseGuard::new();

        let (leader_tx, leader) = watch::channel(None);
        let watcher = tokio::spawn(watch_membership(client.clone(), format!("{prefix}/nodes/"), membership_tx));
        let observer = tokio::spawn(observe_leader(client.clone(), format!("{prefix}/leader"), leader_tx));
        let session = tokio::spawn(run_session(
            client.clone(),
            prefix.clone(),
            node.clone(),
            config,
            health_tx,
            leadership_tx,
            lease.clone(),
            guard.clone(),
        ));
        let coordinator = EtcdCoordinator {
            node,
            guard,
            membership,
            health,
            leadership,
            leader,
            tasks: vec![watcher, observer, session],
            client,
            lease,
        };
        // Wait for the first registration, so that callers start healthy.
        let mut health = coordinator.health.clone();
        let _ = tokio::time::timeout(Duration::from_secs(30), health.wait_for(|h| *h)).await;
        Ok(Arc::new(coordinator))
    }
}

impl EtcdCoordinator {
    /// The current lease, if registered.
    pub fn lease_id(&self) -> Option<i64> {
        *self.lease.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A client on the same connection (for tools and tests).
    pub fn client(&self) -> Client {
        self.client.clone()
    }
}

impl Coordinator for EtcdCoordinator {
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
        self.lease_id()
    }

    fn leadership(&self) -> watch::Receiver<Option<FencingToken>> {
        self.leadership.clone()
    }

    fn leader(&self) -> watch::Receiver<Option<Leader>> {
        self.leader.clone()
    }

    fn leave(&self) {
        for task in &self.tasks {
            task.abort();
        }
        let lease = *self.lease.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lease) = lease {
            let mut client = self.client.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(2), client.lease_revoke(lease)).await;
            });
        }
    }
}

/// Keeps a snapshot of `{prefix}/nodes/` up to date: get, then watch from
/// the next revision; on any error, start over.
async fn watch_membership(mut client: Client, prefix: String, tx: watch::Sender<Membership>) {
    loop {
        let result: Result<()> = async {
            let snapshot = client.get(prefix.as_str(), Some(GetOptions::new().with_prefix())).await?;
            let revision = snapshot.header().map(|h| h.revision()).unwrap_or(0);
            let mut members = Membership::default();
            for kv in snapshot.kvs() {
                if let Ok(info) = serde_json::from_slice::<NodeInfo>(kv.value()) {
                    members.nodes.insert(info.id.clone(), info);
                }
            }
            tx.send_replace(members.clone());
            let mut stream = client
                .watch(prefix.as_str(), Some(WatchOptions::new().with_prefix().with_start_revision(revision + 1)))
                .await?;
            while let Some(response) = stream.message().await? {
                if response.canceled() {
                    break;
                }
                let mut changed = false;
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    let key = String::from_utf8_lossy(kv.key()).into_owned();
                    let id = key.trim_start_matches(prefix.as_str()).to_owned();
                    match event.event_type() {
                        EventType::Put => {
                            if let Ok(info) = serde_json::from_slice::<NodeInfo>(kv.value()) {
                                members.nodes.insert(info.id.clone(), info);
                                changed = true;
                            }
                        }
                        EventType::Delete => changed |= members.nodes.remove(&id).is_some(),
                    }
                }
                if changed {
                    tx.send_replace(members.clone());
                }
            }
            Ok(())
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "membership watch failed; resyncing");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Registers, keeps the lease alive, self-fences when renewals fail, and
/// registers again once etcd answers.
#[allow(clippy::too_many_arguments)]
async fn run_session(
    mut client: Client,
    prefix: String,
    node: NodeInfo,
    config: SessionConfig,
    health: watch::Sender<bool>,
    leadership: watch::Sender<Option<FencingToken>>,
    current_lease: Arc<std::sync::Mutex<Option<i64>>>,
    guard: LeaseGuard,
) {
    let ttl_secs = config.ttl.as_secs().max(1) as i64;
    let key = format!("{prefix}/nodes/{}", node.id);
    loop {
        // Register under a fresh lease.
        let asked = Instant::now();
        let registered: Result<i64> = async {
            let lease = tokio::time::timeout(config.ttl, client.lease_grant(ttl_secs, None))
                .await
                .map_err(|_| crate::Error::Other("lease grant timed out".into()))??
                .id();
            // The value names its lease: requests addressed to it are
            // refused once the node holds another.
            let value = serde_json::to_vec(&NodeInfo { lease, ..node.clone() })
                .map_err(|e| crate::Error::Other(format!("cannot encode the node: {e}")))?;
            tokio::time::timeout(
                config.ttl,
                client.put(key.as_str(), value, Some(PutOptions::new().with_lease(lease))),
            )
            .await
            .map_err(|_| crate::Error::Other("registration timed out".into()))??;
            Ok(lease)
        }
        .await;
        let lease = match registered {
            Ok(lease) => lease,
            Err(e) => {
                tracing::warn!(error = %e, "cannot register with etcd; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        *current_lease.lock().unwrap_or_else(|e| e.into_inner()) = Some(lease);
        let expires = asked + Duration::from_secs(ttl_secs as u64);
        guard.extend(expires.into_std() - config.fence_margin());
        tracing::info!(node = %node.id, lease, "joined the cluster");
        health.send_replace(true);

        let campaign = config.campaign.then(|| {
            tokio::spawn(campaign(
                client.clone(),
                format!("{prefix}/leader"),
                node.id.clone(),
                lease,
                leadership.clone(),
            ))
        });
        let why = keep_alive(&mut client, lease, expires, &config, &guard).await;
        // Stop acting first, then clean up.
        guard.revoke();
        *current_lease.lock().unwrap_or_else(|e| e.into_inner()) = None;
        health.send_replace(false);
        leadership.send_replace(None);
        if let Some(task) = campaign {
            task.abort();
        }
        tracing::warn!(node = %node.id, lease, reason = %why, "lease lost: this node stopped acting");
        let mut revoke = client.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(2), revoke.lease_revoke(lease)).await;
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Renews the lease until that fails for too long. Returns why it stopped.
async fn keep_alive(
    client: &mut Client,
    lease: i64,
    mut expires: Instant,
    config: &SessionConfig,
    guard: &LeaseGuard,
) -> String {
    let margin = config.fence_margin();
    let interval = (config.ttl / 3).max(Duration::from_millis(100));
    let mut channel = None;
    loop {
        let deadline = expires.checked_sub(margin).unwrap_or(expires);
        if Instant::now() >= deadline {
            return "renewal did not succeed before the lease would expire".into();
        }
        if channel.is_none() {
            match tokio::time::timeout(deadline - Instant::now(), client.lease_keep_alive(lease)).await {
                Ok(Ok(pair)) => channel = Some(pair),
                _ => {
                    tokio::time::sleep(
                        Duration::from_millis(100).min(deadline.saturating_duration_since(Instant::now())),
                    )
                    .await;
                    continue;
                }
            }
        }
        let Some((keeper, stream)) = channel.as_mut() else { continue };
        let sent = Instant::now();
        let renewed = tokio::time::timeout(deadline.saturating_duration_since(sent), async {
            keeper.keep_alive().await?;
            stream.message().await
        })
        .await;
        match renewed {
            Ok(Ok(Some(response))) if response.ttl() > 0 => {
                expires = sent + Duration::from_secs(response.ttl() as u64);
                guard.extend(expires.into_std() - margin);
            }
            Ok(Ok(Some(_))) => return "the lease expired at the server".into(),
            _ => {
                // The stream broke (etcd restarting?): open a new one.
                channel = None;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        }
        let next = (Instant::now() + interval).min(expires.checked_sub(margin).unwrap_or(expires));
        tokio::time::sleep_until(next).await;
    }
}

/// Follows who leads the election (etcd's observe): the leader key's
/// value is the node id, its creation revision the token. etcd says each
/// new leader; the last one stays known until then.
async fn observe_leader(mut client: Client, election: String, leader: watch::Sender<Option<Leader>>) {
    loop {
        let observed: Result<()> = async {
            let mut stream = client.observe(election.as_str()).await?;
            while let Some(response) = stream.message().await? {
                let now = response.kv().map(|kv| Leader {
                    id: String::from_utf8_lossy(kv.value()).into_owned(),
                    token: kv.create_revision(),
                });
                leader.send_if_modified(|current| {
                    let changed = *current != now;
                    *current = now.clone();
                    changed
                });
            }
            Ok(())
        }
        .await;
        if let Err(e) = observed {
            tracing::debug!(error = %e, "observing the leader failed; observing again");
        }
        // The stream broke (etcd restarting?): observe again.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Campaigns until elected, then watches the leader key; campaigns again if
/// it disappears while the session lives.
async fn campaign(
    mut client: Client,
    election: String,
    id: String,
    lease: i64,
    leadership: watch::Sender<Option<FencingToken>>,
) {
    loop {
        let elected = client.campaign(election.as_str(), id.as_str(), lease).await;
        let leader = match elected {
            Ok(response) => response.leader().cloned(),
            Err(e) => {
                tracing::warn!(error = %e, "campaign failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let Some(leader) = leader else { continue };
        let token = leader.rev();
        let key = leader.key().to_vec();
        leadership.send_replace(Some(token));
        tracing::info!(node = %id, token, "elected leader");
        // Leadership lasts while the leader key exists.
        let watched: Result<()> = async {
            let mut stream = client.watch(key.clone(), Some(WatchOptions::new().with_start_revision(token))).await?;
            while let Some(response) = stream.message().await? {
                if response.canceled() || response.events().iter().any(|e| e.event_type() == EventType::Delete) {
                    break;
                }
            }
            Ok(())
        }
        .await;
        if let Err(e) = watched {
            tracing::warn!(error = %e, "lost track of the leader key");
        }
        leadership.send_replace(None);
        tracing::warn!(node = %id, "no longer the leader");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
