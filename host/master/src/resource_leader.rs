//! The resource leader's service: the [`ResourceBook`] of the master that
//! leads, kept in step with leadership and membership, answering other
//! masters' exchanges on its internal endpoint (`POST /internal/resources`),
//! and the masters' way of reaching it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dagr_coord::{Coordinator, Leader, LeaseGuard, Membership, Role};
use dagr_protocol::wire::{ResourceAnswer, ResourceRequest};
use tokio::sync::watch;

use crate::cluster::workers_of;
use crate::resources::{HEARTBEAT_MS, ResourceBook};

/// A new leader grants nothing for this long (ms): it first hears what
/// every master holds (each says so at least every heartbeat).
pub const WARM_UP_MS: i64 = HEARTBEAT_MS + HEARTBEAT_MS / 5;

/// Why the leader did not answer an exchange.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAnswered {
    #[error("this master does not lead: ask the leader")]
    NotLeader,
    #[error("this master's lease is not safe: it does not act")]
    Fenced,
    #[error(transparent)]
    Refused(#[from] crate::resources::Refusal),
}

/// The book while this master leads; nothing otherwise.
pub struct ResourceLeader {
    book: Mutex<Option<ResourceBook>>,
    guard: LeaseGuard,
}

impl ResourceLeader {
    /// Follows `coordinator`'s leadership and membership: a book is made
    /// for every term this master leads (with its token), dropped when it
    /// stops leading, and kept to the live workers and masters.
    pub fn start(coordinator: Arc<dyn Coordinator>) -> Arc<ResourceLeader> {
        let leader = Arc::new(ResourceLeader { book: Mutex::new(None), guard: coordinator.lease_guard() });
        let this = leader.clone();
        tokio::spawn(async move {
            let mut leadership = coordinator.leadership();
            let mut health = coordinator.health();
            let mut membership = coordinator.membership();
            loop {
                let token = if *health.borrow_and_update() { *leadership.borrow_and_update() } else { None };
                let members = membership.borrow_and_update().clone();
                this.follow(token, &members, dagr_protocol::now_ms());
                tokio::select! {
                    r = leadership.changed() => if r.is_err() { return },
                    r = health.changed() => if r.is_err() { return },
                    r = membership.changed() => if r.is_err() { return },
                }
            }
        });
        leader
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<ResourceBook>> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn follow(&self, token: Option<i64>, members: &Membership, now: i64) {
        let mut book = self.lock();
        match token {
            None => {
                if book.take().is_some() {
                    tracing::info!("no longer the resource leader");
                }
                return;
            }
            Some(token) if book.as_ref().is_none_or(|b| b.token() != token) => {
                tracing::info!(token, warm_up_ms = WARM_UP_MS, "resource leader: listening to the masters first");
                *book = Some(ResourceBook::new(token, now, WARM_UP_MS));
            }
            Some(_) => {}
        }
        if let Some(book) = book.as_mut() {
            book.set_workers(workers_of(members));
            book.set_masters(members.with_role(Role::Master).map(|m| m.id.as_str()));
        }
    }

    /// A master's exchange, answered while this master leads safely.
    pub fn exchange(&self, request: &ResourceRequest) -> Result<ResourceAnswer, NotAnswered> {
        if !self.guard.is_safe() {
            return Err(NotAnswered::Fenced);
        }
        let mut book = self.lock();
        let book = book.as_mut().ok_or(NotAnswered::NotLeader)?;
        Ok(book.exchange(request, dagr_protocol::now_ms())?)
    }

    /// The book's counters and token, for `/internal/load`.
    pub fn describe(&self) -> serde_json::Value {
        match self.lock().as_ref() {
            None => serde_json::Value::Null,
            Some(book) => {
                let c = book.counters();
                serde_json::json!({
                    "token": book.token(),
                    "exchanges": c.exchanges,
                    "granted": c.granted,
                    "empty": c.empty,
                })
            }
        }
    }
}

/// How a master reaches the resource leader: the leader as the
/// coordinator says, its address from the membership.
#[derive(Clone)]
pub struct LeaderClient {
    leader: watch::Receiver<Option<Leader>>,
    membership: watch::Receiver<Membership>,
    http: reqwest::Client,
}

impl LeaderClient {
    pub fn new(coordinator: &dyn Coordinator, internal: &dagr_transport::Internal) -> LeaderClient {
        LeaderClient {
            leader: coordinator.leader(),
            membership: coordinator.membership(),
            http: internal
                .client()
                .timeout(Duration::from_secs(2))
                .connect_timeout(Duration::from_millis(500))
                .build()
                .unwrap_or_default(),
        }
    }

    pub async fn exchange(&self, request: ResourceRequest) -> Result<ResourceAnswer, String> {
        let leader = self.leader.borrow().clone().ok_or("no leader is known yet")?;
        let addr = self
            .membership
            .borrow()
            .nodes
            .get(&leader.id)
            .map(|n| n.addr.clone())
            .ok_or_else(|| format!("the leader {} is not a member", leader.id))?;
        let response = self
            .http
            .post(format!("{addr}/internal/resources"))
            .json(&request)
            .send()
            .await
            .map_err(|e| format!("the leader {} is unreachable: {e}", leader.id))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(format!("the leader {} answered {status}: {}", leader.id, body.trim()));
        }
        response.json::<ResourceAnswer>().await.map_err(|e| format!("the leader {} answered badly: {e}", leader.id))
    }
}
