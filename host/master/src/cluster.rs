//! A master in cluster mode: dispatch to workers over HTTP, the master's
//! internal endpoint, the ownership driver that turns membership into owned
//! slots, and the API's way of reaching masters.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::Json;
use axum::extract::State;
use axum::routing::{get, post};
use dagr_coord::{Coordinator, Membership, NodeInfo, Role};
use dagr_protocol::control::{CommandOutcome, Control};
use dagr_protocol::sharding::SlotMap;
use dagr_protocol::wire::{
    AdoptRequest, AdoptResponse, AttemptKey, AttemptSpec, CancelRequest, DispatchBatch, DispatchResponse,
    ResourceAnswer, ResourceRequest, ResultAcks, ResultBatch, Verdict,
};
use dagr_store::Store;
use dagr_transport::Internal;
use serde::Deserialize;
use tokio::sync::watch;

use crate::rebalance::{RebalanceConfig, Rebalancer};
use crate::resource_leader::{LeaderClient, NotAnswered, ResourceLeader};
use crate::{Accepted, Adoption, DispatchError, EngineHandle, EngineMetrics, Transport, WorkerInfo};

/// How often a cancel or an adoption is asked of a worker that does not
/// answer, and the pause between the asks.
const ASK_TRIES: usize = 3;
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Reaches workers over HTTP: their internal endpoints, found in the
/// membership, with the cluster secret (over mutual TLS when the cluster
/// has certificates).
pub struct HttpTransport {
    me: String,
    membership: watch::Receiver<Membership>,
    http: reqwest::Client,
    /// The resource leader, when it schedules resources.
    leader: Option<LeaderClient>,
}

impl HttpTransport {
    pub fn new(me: String, membership: watch::Receiver<Membership>, internal: &Internal) -> Self {
        HttpTransport {
            me,
            membership,
            http: internal
                .client()
                .timeout(Duration::from_secs(10))
                .connect_timeout(Duration::from_secs(2))
                .build()
                .unwrap_or_default(),
            leader: None,
        }
    }

    /// Asks `leader` for slots (`[master] resources = "leader"`).
    pub fn with_resource_leader(mut self, leader: LeaderClient) -> Self {
        self.leader = Some(leader);
        self
    }

    fn addr(&self, worker: &str) -> Option<String> {
        self.membership.borrow().nodes.get(worker).map(|n| n.addr.clone())
    }
}

#[async_trait]
impl Transport for HttpTransport {
    async fn dispatch(&self, specs: Vec<AttemptSpec>, worker: &str) -> Result<Accepted, DispatchError> {
        let n = specs.len();
        let addr = self.addr(worker).ok_or_else(|| DispatchError::NotMember(worker.into()))?;
        // The request continues the trace of its first attempt (a batch is
        // mostly one run's); each attempt carries its own in its spec.
        let traceparent = specs.first().and_then(|s| s.trace.clone());
        let mut request = self.http.post(format!("{addr}/internal/attempts"));
        if let Some(value) = traceparent {
            request = request.header("traceparent", value);
        }
        let response = request.json(&DispatchBatch { attempts: specs }).send().await.map_err(|e| {
            // Only a connection never made is sure to have carried
            // nothing; a timeout or a reset may come after the worker
            // read the request.
            let (worker, reason) = (worker.into(), e.to_string());
            if e.is_connect() || e.is_builder() {
                DispatchError::Unreachable { worker, reason }
            } else {
                DispatchError::NoAnswer { worker, reason }
            }
        })?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            return Err(DispatchError::Refused {
                worker: worker.into(),
                status: status.as_u16(),
                body: text.trim().into(),
            });
        }
        let bad = |reason: String| DispatchError::BadAnswer { worker: worker.into(), reason };
        let body = response.json::<DispatchResponse>().await.map_err(|e| bad(e.to_string()))?;
        if body.verdicts.len() != n {
            return Err(bad(format!("{} verdicts for {n} attempts", body.verdicts.len())));
        }
        let verdicts = body
            .verdicts
            .into_iter()
            .map(|verdict| match verdict {
                Verdict::Accepted => Ok(()),
                Verdict::Refused { reason } => Err(format!("worker {worker} refused: {reason}")),
            })
            .collect();
        Ok(Accepted { verdicts, running: Some(body.running) })
    }

    async fn resources(&self, request: ResourceRequest) -> Result<ResourceAnswer, String> {
        match &self.leader {
            Some(leader) => leader.exchange(request).await,
            None => Err("resources are scheduled by each master here".into()),
        }
    }

    async fn cancel(&self, key: &AttemptKey, worker: &str) {
        let request = CancelRequest { key: key.clone() };
        // Asked as adoption is: a cancel lost to a reset or a worker's
        // pause would leave the attempt running to its own end. Stopped
        // (200) or not known there (404: the worker then refuses it, should
        // its dispatch still arrive) both settle it; a worker that leaves
        // the membership takes the attempt with it.
        for _ in 0..ASK_TRIES {
            let Some(addr) = self.addr(worker) else { return };
            let response = self.http.post(format!("{addr}/internal/attempts/cancel")).json(&request).send().await;
            if let Ok(response) = response
                && (response.status().is_success() || response.status() == reqwest::StatusCode::NOT_FOUND)
            {
                return;
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        tracing::warn!(worker, attempt = %key,
            "the worker did not answer a cancel: the attempt may run to its own end");
    }

    async fn adopt(&self, key: &AttemptKey, worker: &str, epoch: i64) -> Adoption {
        let Some(addr) = self.addr(worker) else {
            // Not a member: its lease expired; whatever it ran is lost.
            return Adoption::Gone;
        };
        let request = AdoptRequest { key: key.clone(), epoch, master: self.me.clone() };
        for _ in 0..ASK_TRIES {
            let response = self.http.post(format!("{addr}/internal/attempts/adopt")).json(&request).send().await;
            if let Ok(response) = response
                && let Ok(answer) = response.json::<AdoptResponse>().await
            {
                return match answer {
                    AdoptResponse::Running => Adoption::Running,
                    AdoptResponse::Finished { result } => Adoption::Finished(result),
                    AdoptResponse::Unknown { never_under } => Adoption::Unknown { never_under },
                };
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        // A member that does not answer may still run it: keep it in flight.
        // Its result will reach us, or its lease will expire and it is lost.
        Adoption::Running
    }
}

/// The workers of a membership, as the engine places attempts on them.
pub fn workers_of(members: &Membership) -> Vec<WorkerInfo> {
    members
        .with_role(Role::Worker)
        .map(|w| WorkerInfo {
            id: w.id.clone(),
            capacity: w.capacity,
            group: w.labels.get("group").cloned(),
            any_group: false,
            lease: w.lease,
        })
        .collect()
}

/// What the master's internal endpoint shares.
#[derive(Clone)]
pub struct MasterService {
    pub engine: EngineHandle,
    pub owned_slots: watch::Receiver<usize>,
    /// Whether this master leads (and is healthy).
    pub leading: watch::Receiver<bool>,
    /// The resource book, when the leader schedules resources.
    pub resources: Option<Arc<ResourceLeader>>,
}

#[derive(Debug, Deserialize)]
struct WorkflowChanged {
    tenant: String,
    name: String,
}

/// The master's internal HTTP endpoint.
pub fn router(service: MasterService) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/internal/results", post(results))
        .route("/internal/wake", post(wake))
        .route("/internal/workflow-changed", post(workflow_changed))
        .route("/internal/tenant-changed", post(tenant_changed))
        .route("/internal/load", get(load))
        .route("/internal/resources", post(resources))
        .layer(axum::extract::DefaultBodyLimit::max(dagr_protocol::wire::INTERNAL_BODY_LIMIT))
        .with_state(service)
}

async fn results(State(s): State<MasterService>, Json(batch): Json<ResultBatch>) -> Json<ResultAcks> {
    Json(ResultAcks { acks: s.engine.report_acked(batch.results).await })
}

async fn wake(State(s): State<MasterService>) -> &'static str {
    s.engine.wake();
    "ok"
}

async fn tenant_changed(State(s): State<MasterService>) -> &'static str {
    s.engine.tenant_changed("");
    "ok"
}

async fn workflow_changed(State(s): State<MasterService>, Json(w): Json<WorkflowChanged>) -> &'static str {
    s.engine.workflow_changed(&w.tenant, &w.name);
    "ok"
}

async fn load(State(s): State<MasterService>) -> Json<serde_json::Value> {
    let mut load = metrics_json(&s.engine.metrics, *s.owned_slots.borrow());
    load["leader"] = serde_json::Value::Bool(*s.leading.borrow());
    if let Some(resources) = &s.resources {
        load["resources"] = resources.describe();
    }
    Json(load)
}

/// Another master's exchange with the resource leader.
async fn resources(
    State(s): State<MasterService>,
    Json(request): Json<ResourceRequest>,
) -> Result<Json<ResourceAnswer>, (axum::http::StatusCode, String)> {
    use axum::http::StatusCode;
    let Some(leader) = &s.resources else {
        return Err((StatusCode::NOT_FOUND, "resources are scheduled by each master in this cluster".into()));
    };
    leader.exchange(&request).map(Json).map_err(|e| {
        let status = match e {
            NotAnswered::Fenced => StatusCode::SERVICE_UNAVAILABLE,
            NotAnswered::NotLeader | NotAnswered::Refused(_) => StatusCode::CONFLICT,
        };
        (status, e.to_string())
    })
}

pub fn metrics_json(m: &EngineMetrics, owned_slots: usize) -> serde_json::Value {
    let g = EngineMetrics::get;
    serde_json::json!({
        "owned_slots": owned_slots,
        "steps": g(&m.steps),
        "dispatched": g(&m.dispatched),
        "results": g(&m.results),
        "stale_results": g(&m.stale_results),
        "fenced_writes": g(&m.fenced_writes),
        "admissions_over_limit": g(&m.admissions_over_limit),
        "runs_handed_over": g(&m.runs_handed_over),
        "runs_finished": g(&m.runs_finished),
        "runs_claimed": g(&m.runs_claimed),
        "attempts_adopted": g(&m.attempts_adopted),
        "attempts_lost": g(&m.attempts_lost),
        "dispatch_refused": g(&m.dispatch_refused),
        "active_runs": g(&m.active_runs),
        "in_flight": g(&m.in_flight),
    })
}

/// How ownership follows membership and load.
#[derive(Debug, Clone)]
pub struct OwnershipConfig {
    /// How often loads are reported and (by the leader) compared.
    pub check_interval: Duration,
    pub rebalance: RebalanceConfig,
    /// How long a burst of membership changes (a node joining) may settle
    /// before the slots are recomputed; a lost lease does not wait.
    pub settle: Duration,
}

/// Turns the coordinator's view into the engine's: the slots this master
/// owns (none while its lease is not safe), whether it leads, and which
/// workers left. Slots follow membership at once and load slowly: every
/// `check_interval` each master reports its load, the leader's
/// [`Rebalancer`] may change weights (with hysteresis), and everyone
/// recomputes the slot map with the weights. Returns the number of owned
/// slots as it changes.
pub fn drive_ownership(
    engine: EngineHandle,
    coordinator: Arc<dyn Coordinator>,
    store: Arc<dyn Store>,
    config: OwnershipConfig,
) -> watch::Receiver<usize> {
    let (owned_tx, owned_rx) = watch::channel(0usize);
    tokio::spawn(async move {
        let me = coordinator.node().id.clone();
        let mut membership = coordinator.membership();
        let mut health = coordinator.health();
        let mut leadership = coordinator.leadership();
        let mut last_slots: Option<HashSet<u32>> = None;
        let mut last_lead: Option<Option<i64>> = None;
        let mut last_workers: Option<Vec<WorkerInfo>> = None;
        let mut weights: BTreeMap<String, f64> = BTreeMap::new();
        let mut rebalancer = Rebalancer::default();
        let mut tick = tokio::time::interval(config.check_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut checking = false;
        loop {
            let healthy = *health.borrow_and_update();
            let members = membership.borrow_and_update().clone();
            let lead = if healthy { *leadership.borrow_and_update() } else { None };
            let live: BTreeMap<String, f64> = members
                .with_role(Role::Master)
                .map(|m| (m.id.clone(), weights.get(&m.id).copied().unwrap_or(1.0)))
                .collect();
            if checking && healthy {
                // Report our load; read everyone's; the leader rebalances.
                let now = dagr_protocol::now_ms();
                let load = engine.metrics.active_runs.load(std::sync::atomic::Ordering::Relaxed) as i64;
                let _ = store.report_master_load(&me, load, now).await;
                if let Ok(rows) = store.master_loads().await {
                    weights = rows.iter().map(|(id, _, w, _)| (id.clone(), *w as f64 / 1000.0)).collect();
                    if lead.is_some() {
                        let fresh = now - 3 * config.check_interval.as_millis() as i64;
                        let loads: BTreeMap<String, u64> = rows
                            .iter()
                            .filter(|(id, _, _, at)| live.contains_key(id) && *at >= fresh)
                            .map(|(id, load, _, _)| (id.clone(), *load as u64))
                            .collect();
                        let changes = rebalancer.check(&config.rebalance, &loads, &weights);
                        if !changes.is_empty() {
                            tracing::info!(?changes, ?loads, "rebalancing: masters' weights change");
                            let rows: Vec<(String, i64)> =
                                changes.iter().map(|(id, w)| (id.clone(), (w * 1000.0).round() as i64)).collect();
                            if store.set_master_weights(&rows).await.is_ok() {
                                weights.extend(changes);
                            }
                        }
                    }
                }
            }
            let live: BTreeMap<String, f64> = members
                .with_role(Role::Master)
                .map(|m| (m.id.clone(), weights.get(&m.id).copied().unwrap_or(1.0)))
                .collect();
            // A snapshot without this node under the lease it holds now
            // predates its joining (again, after a freeze or a lost lease):
            // the watch delivers what changed meanwhile a moment later, in
            // order. Slots, and the runs taken over with them, wait for the
            // snapshot that has the node's own registration, and with it
            // everything that changed before (a worker that joined again
            // while this node slept).
            let current = members.nodes.get(&me).is_some_and(|n| coordinator.lease() == Some(n.lease));
            let slots = if healthy && current { SlotMap::compute(&live).slots_of(&me) } else { HashSet::new() };
            // Workers first: taking slots over asks their workers about
            // the attempts of the runs it loads.
            let workers = workers_of(&members);
            if last_workers.as_ref() != Some(&workers) {
                engine.workers(workers.clone());
                last_workers = Some(workers);
            }
            if last_slots.as_ref() != Some(&slots) {
                // Detection: when the membership (a lease that expired, a
                // node that joined) changed this master's share; the
                // engine's "took over slots" follows once the runs are
                // loaded.
                tracing::info!(masters = live.len(), slots = slots.len(), "membership changed: slots reassigned");
                owned_tx.send_replace(slots.len());
                engine.own_slots(slots.clone());
                last_slots = Some(slots);
            }
            if last_lead != Some(lead) {
                engine.lead(lead);
                last_lead = Some(lead);
            }
            checking = false;
            tokio::select! {
                r = membership.changed() => if r.is_err() { return },
                r = health.changed() => if r.is_err() { return },
                r = leadership.changed() => if r.is_err() { return },
                _ = tick.tick() => checking = true,
            }
            // Let a burst of changes (a node joining) settle, but not a
            // lost lease, also one lost meanwhile: the node stops acting at
            // once, not when the settling is over.
            if !checking && *health.borrow() {
                tokio::select! {
                    _ = tokio::time::sleep(config.settle) => {}
                    r = health.wait_for(|healthy| !healthy) => if r.is_err() { return },
                }
            }
        }
    });
    owned_rx
}

/// The API's [`Control`] in a cluster: it nudges masters over HTTP and
/// waits by polling the store.
pub struct ClusterControl {
    pub store: Arc<dyn Store>,
    pub membership: watch::Receiver<Membership>,
    pub http: reqwest::Client,
}

impl ClusterControl {
    pub fn new(store: Arc<dyn Store>, membership: watch::Receiver<Membership>, internal: &Internal) -> Self {
        ClusterControl {
            store,
            membership,
            http: internal.client().timeout(Duration::from_secs(2)).build().unwrap_or_default(),
        }
    }

    fn broadcast(&self, path: &'static str, body: serde_json::Value) {
        let masters: Vec<String> = self.membership.borrow().with_role(Role::Master).map(|m| m.addr.clone()).collect();
        for addr in masters {
            let http = self.http.clone();
            let body = body.clone();
            tokio::spawn(async move {
                let _ = http.post(format!("{addr}{path}")).json(&body).send().await;
            });
        }
    }
}

#[async_trait]
impl Control for ClusterControl {
    fn wake(&self) {
        self.broadcast("/internal/wake", serde_json::Value::Null);
    }

    fn workflow_changed(&self, tenant: &str, name: &str) {
        self.broadcast("/internal/workflow-changed", serde_json::json!({"tenant": tenant, "name": name}));
    }

    fn tenant_changed(&self, tenant: &str) {
        self.broadcast("/internal/tenant-changed", serde_json::json!({"tenant": tenant}));
    }

    async fn wait_command(&self, id: i64, timeout: Duration) -> Option<CommandOutcome> {
        let until = tokio::time::Instant::now() + timeout;
        let mut delay = Duration::from_millis(5);
        loop {
            if let Ok(Some(row)) = self.store.get_command(id).await
                && let Some(result) = row.result
            {
                return serde_json::from_str(&result).ok();
            }
            if tokio::time::Instant::now() + delay > until {
                return None;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(200));
        }
    }

    async fn cluster(&self) -> Option<serde_json::Value> {
        let nodes: Vec<NodeInfo> = self.membership.borrow().nodes.values().cloned().collect();
        let reports = futures::future::join_all(nodes.iter().map(|node| {
            let path = match node.role {
                Role::Master => Some("/internal/load"),
                Role::Worker => Some("/internal/status"),
                _ => None,
            };
            let http = self.http.clone();
            let url = path.map(|p| format!("{}{p}", node.addr));
            async move {
                let url = url?;
                let response = http.get(url).send().await.ok()?.error_for_status().ok()?;
                response.json::<serde_json::Value>().await.ok()
            }
        }))
        .await;
        let members: Vec<serde_json::Value> = nodes
            .iter()
            .zip(reports)
            .map(|(node, report)| {
                serde_json::json!({
                    "id": node.id,
                    "role": node.role,
                    "addr": node.addr,
                    "slots": node.capacity,
                    "labels": node.labels,
                    "pid": node.pid,
                    "load": report,
                })
            })
            .collect();
        let leader = members.iter().find(|m| m["load"]["leader"] == true).map(|m| m["id"].clone());
        Some(serde_json::json!({"mode": "cluster", "leader": leader, "members": members}))
    }

    async fn wait_run(&self, run_id: &str, timeout: Duration) -> Option<String> {
        let until = tokio::time::Instant::now() + timeout;
        let mut delay = Duration::from_millis(5);
        loop {
            if let Ok(Some(run)) = self.store.get_run(run_id).await
                && run.state.is_terminal()
            {
                return Some(run.state.as_str().into());
            }
            if tokio::time::Instant::now() + delay > until {
                return None;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(200));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::http::StatusCode;
    use dagr_protocol::wire::ClusterSecret;

    use super::*;

    /// A worker's cancel endpoint that answers with `answers` in turn (the
    /// last one from then on), counting the asks.
    async fn worker_answering(answers: Vec<StatusCode>) -> (HttpTransport, Arc<AtomicUsize>) {
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = asked.clone();
        let app = axum::Router::new().route(
            "/internal/attempts/cancel",
            post(move |Json(_): Json<CancelRequest>| {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let answer = answers[n.min(answers.len() - 1)];
                async move { answer }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let node = NodeInfo {
            id: "w1".into(),
            role: Role::Worker,
            addr: format!("http://{addr}"),
            capacity: 1,
            labels: BTreeMap::new(),
            pid: 0,
            lease: 1,
        };
        let (_, membership) = watch::channel(Membership { nodes: BTreeMap::from([("w1".into(), node)]) });
        let internal = Internal::new(ClusterSecret::new("a-secret-of-sixteen-or-more").unwrap(), None);
        (HttpTransport::new("m1".into(), membership, &internal), asked)
    }

    fn key() -> AttemptKey {
        AttemptKey { run_id: "r1".into(), task: 0, number: 1 }
    }

    /// A master that lost its lease gives its slots up at once: the time a
    /// burst of membership changes gets to settle is not waited for, also
    /// when the lease is lost while a change settles.
    #[tokio::test]
    async fn a_lost_lease_gives_the_slots_up_without_letting_changes_settle() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_store(&dir).await;
        let plugins = Arc::new(crate::engine::testkit::FakePlugins::default());
        let (engine, mut told) = EngineHandle::detached(store.clone(), plugins);
        let hub = dagr_coord::local::LocalHub::new();
        let coordinator: Arc<dyn Coordinator> = hub.join(master(0), &dagr_coord::SessionConfig::default());
        let hour = Duration::from_secs(3600);
        let config = OwnershipConfig { check_interval: hour, rebalance: Default::default(), settle: hour };
        let mut owned = drive_ownership(engine, coordinator, store, config);
        owned.wait_for(|slots| *slots > 0).await.unwrap();
        // A worker joins: the membership changed, and that settles (for an
        // hour); the lease is lost while it does.
        let worker = NodeInfo { id: "w1".into(), role: Role::Worker, capacity: 1, ..master(0) };
        let _w1 = hub.join(worker, &dagr_coord::SessionConfig::default());
        tokio::time::sleep(Duration::from_millis(200)).await;

        hub.cut("m1");
        tokio::time::timeout(Duration::from_secs(10), owned.wait_for(|slots| *slots == 0))
            .await
            .expect("the slots were still owned 10 s after the lease was lost (settling takes an hour)")
            .unwrap();
        let mut last = None;
        while let Ok(message) = told.try_recv() {
            if let crate::Message::Ownership(slots) = message {
                last = Some(slots);
            }
        }
        assert_eq!(last, Some(HashSet::new()), "the engine was told it owns no slot");
    }

    /// A coordinator whose membership the test sets: a watch that lags.
    struct Lagging {
        node: NodeInfo,
        lease: i64,
        membership: watch::Sender<Membership>,
        health: watch::Sender<bool>,
        leadership: watch::Sender<Option<i64>>,
        leader: watch::Sender<Option<dagr_coord::Leader>>,
    }

    impl Coordinator for Lagging {
        fn node(&self) -> &NodeInfo {
            &self.node
        }
        fn membership(&self) -> watch::Receiver<Membership> {
            self.membership.subscribe()
        }
        fn health(&self) -> watch::Receiver<bool> {
            self.health.subscribe()
        }
        fn lease_guard(&self) -> dagr_coord::LeaseGuard {
            dagr_coord::LeaseGuard::forever()
        }
        fn lease(&self) -> Option<i64> {
            Some(self.lease)
        }
        fn leadership(&self) -> watch::Receiver<Option<i64>> {
            self.leadership.subscribe()
        }
        fn leader(&self) -> watch::Receiver<Option<dagr_coord::Leader>> {
            self.leader.subscribe()
        }
        fn leave(&self) {}
    }

    fn master(lease: i64) -> NodeInfo {
        NodeInfo {
            id: "m1".into(),
            role: Role::Master,
            addr: "http://127.0.0.1:1".into(),
            capacity: 0,
            labels: BTreeMap::new(),
            pid: 0,
            lease,
        }
    }

    async fn sqlite_store(dir: &tempfile::TempDir) -> Arc<dyn Store> {
        let path = dir.path().join("m.db");
        Arc::new(dagr_store::SqlStore::open_sqlite(&path, dagr_store::Synchronous::Normal).await.unwrap())
    }

    /// A master that joined again under a new lease takes slots only once
    /// its view of the members has it under that lease: an older snapshot
    /// (the watch lagging after a freeze) lacks what changed meanwhile,
    /// such as a worker that joined again, and a takeover on it ran a task
    /// twice at once (`dagr sim` with its membership lag).
    #[tokio::test]
    async fn slots_wait_for_a_view_that_has_this_master_under_its_current_lease() {
        let dir = tempfile::tempdir().unwrap();
        let store = sqlite_store(&dir).await;
        let plugins = Arc::new(crate::engine::testkit::FakePlugins::default());
        let (engine, _told) = EngineHandle::detached(store.clone(), plugins);
        let stale = Membership { nodes: BTreeMap::from([("m1".into(), master(1))]) };
        let coordinator = Arc::new(Lagging {
            node: master(2),
            lease: 2,
            membership: watch::channel(stale).0,
            health: watch::channel(true).0,
            leadership: watch::channel(None).0,
            leader: watch::channel(None).0,
        });
        let hour = Duration::from_secs(3600);
        let config = OwnershipConfig { check_interval: hour, rebalance: Default::default(), settle: Duration::ZERO };
        let mut owned = drive_ownership(engine, coordinator.clone(), store, config);
        let early = tokio::time::timeout(Duration::from_millis(300), owned.wait_for(|slots| *slots > 0)).await.is_ok();
        assert!(!early, "slots taken on a view that has this master under its old lease");

        coordinator.membership.send_replace(Membership { nodes: BTreeMap::from([("m1".into(), master(2))]) });
        tokio::time::timeout(Duration::from_secs(10), owned.wait_for(|slots| *slots == dagr_protocol::SLOTS as usize))
            .await
            .expect("the view caught up: every slot is this master's")
            .unwrap();
    }

    #[tokio::test]
    async fn a_cancel_the_worker_did_not_take_is_asked_again() {
        let (transport, asked) = worker_answering(vec![StatusCode::SERVICE_UNAVAILABLE, StatusCode::OK]).await;
        transport.cancel(&key(), "w1").await;
        assert_eq!(asked.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_cancel_is_settled_by_stopped_or_not_known() {
        for answer in [StatusCode::OK, StatusCode::NOT_FOUND] {
            let (transport, asked) = worker_answering(vec![answer]).await;
            transport.cancel(&key(), "w1").await;
            assert_eq!(asked.load(Ordering::SeqCst), 1, "after {answer}");
        }
    }

    #[tokio::test]
    async fn a_worker_that_never_takes_a_cancel_is_asked_a_bounded_number_of_times() {
        let (transport, asked) = worker_answering(vec![StatusCode::SERVICE_UNAVAILABLE]).await;
        transport.cancel(&key(), "w1").await;
        assert_eq!(asked.load(Ordering::SeqCst), ASK_TRIES);
        // And one that left the membership is not asked at all.
        transport.cancel(&key(), "w2").await;
        assert_eq!(asked.load(Ordering::SeqCst), ASK_TRIES);
    }
}
