//! A master in cluster mode: dispatch to workers over HTTP, the master's
//! internal endpoint, the ownership driver that turns membership into owned
//! slots, and the API's way of reaching masters.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::Json;
use axum::extract::State;
use axum::routing::{get, post};
use dagr_coord::{Coordinator, Membership, NodeInfo, Role};
use dagr_protocol::control::{CommandOutcome, Control};
use dagr_protocol::sharding::SlotMap;
use dagr_protocol::wire::{
    AdoptRequest, AdoptResponse, AttemptKey, AttemptSpec, CancelRequest, ClusterSecret, DispatchBatch,
    DispatchResponse, ResultAcks, ResultBatch, Verdict,
};
use dagr_store::Store;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::rebalance::{RebalanceConfig, Rebalancer};
use crate::{Adoption, Dispatcher, EngineHandle, EngineMetrics};

/// How a master chooses a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// The worker with the most free capacity (by what it last reported and
    /// what this master sent it since).
    #[default]
    LeastLoaded,
    /// Round robin, weighted by capacity (smooth weighted round robin).
    RoundRobin,
}

impl std::str::FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "least-loaded" => Ok(Strategy::LeastLoaded),
            "round-robin" => Ok(Strategy::RoundRobin),
            other => Err(format!("unknown dispatch strategy `{other}` (least-loaded or round-robin)")),
        }
    }
}

/// Pushes attempts to workers over HTTP.
pub struct HttpDispatcher {
    me: String,
    membership: watch::Receiver<Membership>,
    strategy: Strategy,
    max_in_flight: usize,
    state: Mutex<DispatchState>,
    http: reqwest::Client,
}

#[derive(Default)]
struct DispatchState {
    /// Attempts this master has on each worker.
    outstanding: HashMap<String, u32>,
    /// What each worker last said it runs, over all masters.
    reported: HashMap<String, u32>,
    /// Smooth weighted round robin: current weights.
    current: HashMap<String, i64>,
    /// Workers whose last dispatch failed as a whole (unreachable, or a
    /// refusal such as a wrong cluster secret): not picked until the
    /// instant, and the pause doubles with each failure in a row. Without
    /// it a master would send the same attempts to such a worker again in
    /// every step, as fast as it can commit.
    resting: HashMap<String, Rest>,
}

#[derive(Debug, Clone, Copy)]
struct Rest {
    until: Instant,
    pause: Duration,
}

/// The first pause of a worker whose dispatch failed, and the longest.
const FIRST_REST: Duration = Duration::from_millis(250);
const LONGEST_REST: Duration = Duration::from_secs(10);

impl DispatchState {
    fn resting(&self, worker: &str, now: Instant) -> bool {
        self.resting.get(worker).is_some_and(|r| r.until > now)
    }

    /// A failed dispatch to `worker`: how long it rests now.
    fn failed(&mut self, worker: &str, now: Instant) -> Duration {
        let pause = match self.resting.get(worker) {
            Some(r) => (r.pause * 2).min(LONGEST_REST),
            None => FIRST_REST,
        };
        self.resting.insert(worker.to_owned(), Rest { until: now + pause, pause });
        pause
    }
}

impl HttpDispatcher {
    pub fn new(
        me: String,
        membership: watch::Receiver<Membership>,
        strategy: Strategy,
        max_in_flight: usize,
        secret: &ClusterSecret,
    ) -> Self {
        HttpDispatcher {
            me,
            membership,
            strategy,
            max_in_flight,
            state: Mutex::new(DispatchState::default()),
            http: reqwest::Client::builder()
                .default_headers(secret.headers())
                .timeout(Duration::from_secs(10))
                .connect_timeout(Duration::from_secs(2))
                .build()
                .unwrap_or_default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DispatchState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn addr(&self, worker: &str) -> Option<String> {
        self.membership.borrow().nodes.get(worker).map(|n| n.addr.clone())
    }
}

fn in_group(node: &NodeInfo, group: Option<&str>) -> bool {
    match group {
        None => true,
        Some(g) => node.labels.get("group").map(String::as_str) == Some(g),
    }
}

#[async_trait]
impl Dispatcher for HttpDispatcher {
    fn slots(&self) -> usize {
        self.max_in_flight
    }

    fn pick(&self, group: Option<&str>) -> Option<String> {
        let members = self.membership.borrow().clone();
        let now = Instant::now();
        let mut state = self.lock();
        let workers: Vec<&NodeInfo> =
            members.with_role(Role::Worker).filter(|w| in_group(w, group) && !state.resting(&w.id, now)).collect();
        let load = |state: &DispatchState, id: &str| {
            let mine = state.outstanding.get(id).copied().unwrap_or(0);
            mine.max(state.reported.get(id).copied().unwrap_or(0))
        };
        let chosen = match self.strategy {
            Strategy::LeastLoaded => workers
                .iter()
                .filter(|w| load(&state, &w.id) < w.capacity)
                .min_by(|a, b| {
                    let fa = load(&state, &a.id) as f64 / a.capacity.max(1) as f64;
                    let fb = load(&state, &b.id) as f64 / b.capacity.max(1) as f64;
                    fa.total_cmp(&fb).then_with(|| a.id.cmp(&b.id))
                })
                .map(|w| w.id.clone()),
            Strategy::RoundRobin => {
                let eligible: Vec<&&NodeInfo> = workers.iter().filter(|w| load(&state, &w.id) < w.capacity).collect();
                let total: i64 = eligible.iter().map(|w| w.capacity as i64).sum();
                for w in &eligible {
                    *state.current.entry(w.id.clone()).or_default() += w.capacity as i64;
                }
                let best = eligible
                    .iter()
                    .max_by_key(|w| (state.current.get(&w.id).copied().unwrap_or(0), std::cmp::Reverse(w.id.clone())));
                let id = best.map(|w| w.id.clone());
                if let Some(id) = &id {
                    *state.current.entry(id.clone()).or_default() -= total;
                }
                id
            }
        }?;
        *state.outstanding.entry(chosen.clone()).or_default() += 1;
        Some(chosen)
    }

    async fn dispatch(&self, specs: Vec<AttemptSpec>, worker: &str) -> Vec<Result<(), String>> {
        let n = specs.len();
        let all_failed = |message: String| {
            let pause = self.lock().failed(worker, Instant::now());
            tracing::warn!(%worker, ?pause, %message, "dispatch failed; the worker gets no attempts for a while");
            vec![Err(message); n]
        };
        let Some(addr) = self.addr(worker) else {
            return all_failed(format!("worker {worker} is not a member any more"));
        };
        let response = match self
            .http
            .post(format!("{addr}/internal/attempts"))
            .json(&DispatchBatch { attempts: specs })
            .send()
            .await
        {
            Ok(response) => response,
            Err(e) => return all_failed(format!("worker {worker} unreachable: {e}")),
        };
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            return all_failed(format!("worker {worker} answered {status}: {}", text.trim()));
        }
        let body = match response.json::<DispatchResponse>().await {
            Ok(body) if body.verdicts.len() == n => body,
            Ok(body) => {
                return all_failed(format!(
                    "worker {worker} answered {} verdicts for {n} attempts",
                    body.verdicts.len()
                ));
            }
            Err(e) => return all_failed(format!("worker {worker} answered {status}: {e}")),
        };
        let mut state = self.lock();
        state.reported.insert(worker.to_owned(), body.running);
        state.resting.remove(worker);
        drop(state);
        body.verdicts
            .into_iter()
            .map(|verdict| match verdict {
                Verdict::Accepted => Ok(()),
                Verdict::Refused { reason } => Err(format!("worker {worker} refused: {reason}")),
            })
            .collect()
    }

    fn released(&self, worker: &str) {
        let mut state = self.lock();
        if let Some(n) = state.outstanding.get_mut(worker) {
            *n = n.saturating_sub(1);
        }
        if let Some(n) = state.reported.get_mut(worker) {
            *n = n.saturating_sub(1);
        }
    }

    async fn cancel(&self, key: &AttemptKey, worker: &str) {
        if let Some(addr) = self.addr(worker) {
            let _ = self
                .http
                .post(format!("{addr}/internal/attempts/cancel"))
                .json(&CancelRequest { key: key.clone() })
                .send()
                .await;
        }
    }

    async fn adopt(&self, key: &AttemptKey, worker: &str, epoch: i64) -> Adoption {
        let Some(addr) = self.addr(worker) else {
            // Not a member: its lease expired; whatever it ran is lost.
            return Adoption::Unknown;
        };
        let request = AdoptRequest { key: key.clone(), epoch, master: self.me.clone() };
        for _ in 0..3 {
            let response = self.http.post(format!("{addr}/internal/attempts/adopt")).json(&request).send().await;
            if let Ok(response) = response
                && let Ok(answer) = response.json::<AdoptResponse>().await
            {
                return match answer {
                    AdoptResponse::Running => Adoption::Running,
                    AdoptResponse::Finished { result } => Adoption::Finished(result),
                    AdoptResponse::Unknown => Adoption::Unknown,
                };
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // A member that does not answer may still run it: keep it in flight.
        // Its result will reach us, or its lease will expire and it is lost.
        Adoption::Running
    }
}

/// What the master's internal endpoint shares.
#[derive(Clone)]
pub struct MasterService {
    pub engine: EngineHandle,
    pub owned_slots: watch::Receiver<usize>,
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
        .route("/metrics", get(metrics))
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

async fn metrics(State(s): State<MasterService>) -> Json<serde_json::Value> {
    Json(metrics_json(&s.engine.metrics, *s.owned_slots.borrow()))
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
        "runs_finished": g(&m.runs_finished),
        "runs_claimed": g(&m.runs_claimed),
        "attempts_adopted": g(&m.attempts_adopted),
        "attempts_lost": g(&m.attempts_lost),
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
        let mut last_workers: HashSet<String> = HashSet::new();
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
                let now = dagr_store::now_ms();
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
            let slots =
                if healthy && members.contains(&me) { SlotMap::compute(&live).slots_of(&me) } else { HashSet::new() };
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
            let workers: HashSet<String> = members.with_role(Role::Worker).map(|w| w.id.clone()).collect();
            let gone: Vec<String> = last_workers.difference(&workers).cloned().collect();
            if !gone.is_empty() {
                tracing::warn!(workers = ?gone, "workers left the cluster");
                engine.workers_gone(gone);
            }
            last_workers = workers;
            checking = false;
            tokio::select! {
                r = membership.changed() => if r.is_err() { return },
                r = health.changed() => if r.is_err() { return },
                r = leadership.changed() => if r.is_err() { return },
                _ = tick.tick() => checking = true,
            }
            if !checking {
                // Let a burst of changes (a node joining) settle.
                tokio::time::sleep(Duration::from_millis(100)).await;
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
    pub fn new(store: Arc<dyn Store>, membership: watch::Receiver<Membership>, secret: &ClusterSecret) -> Self {
        ClusterControl {
            store,
            membership,
            http: reqwest::Client::builder()
                .default_headers(secret.headers())
                .timeout(Duration::from_secs(2))
                .build()
                .unwrap_or_default(),
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

    async fn wait_run(&self, run_id: &str, timeout: Duration) -> Option<String> {
        let until = tokio::time::Instant::now() + timeout;
        let mut delay = Duration::from_millis(5);
        loop {
            if let Ok(Some(run)) = self.store.get_run(run_id).await
                && matches!(run.state.as_str(), "succeeded" | "failed" | "killed")
            {
                return Some(run.state);
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
    use super::*;

    fn worker(id: &str, addr: &str) -> NodeInfo {
        NodeInfo {
            id: id.into(),
            role: Role::Worker,
            addr: addr.into(),
            capacity: 100,
            labels: BTreeMap::new(),
            pid: 0,
        }
    }

    #[test]
    fn a_failing_worker_rests_longer_each_time_up_to_a_limit() {
        let mut state = DispatchState::default();
        let now = Instant::now();
        assert!(!state.resting("w", now));
        assert_eq!(state.failed("w", now), FIRST_REST);
        assert!(state.resting("w", now));
        assert!(!state.resting("w", now + FIRST_REST));
        assert_eq!(state.failed("w", now), FIRST_REST * 2);
        for _ in 0..10 {
            state.failed("w", now);
        }
        assert_eq!(state.failed("w", now), LONGEST_REST);
        assert!(!state.resting("other", now));
    }

    #[tokio::test]
    async fn a_worker_whose_dispatch_failed_is_not_picked_while_it_rests() {
        // Port 1 on loopback: nothing listens there, the connection is refused.
        let nodes = [worker("dead", "http://127.0.0.1:1"), worker("alive", "http://127.0.0.1:1")];
        let membership = Membership { nodes: nodes.into_iter().map(|n| (n.id.clone(), n)).collect() };
        let (_tx, rx) = watch::channel(membership);
        let secret = ClusterSecret::new("a-secret-long-enough-for-the-check-0123456789").unwrap();
        let dispatcher = HttpDispatcher::new("m".into(), rx, Strategy::LeastLoaded, 16, &secret);
        assert_eq!(dispatcher.pick(None).as_deref(), Some("alive"), "least loaded, then by id");
        let answers = dispatcher.dispatch(Vec::new(), "dead").await;
        assert!(answers.is_empty());
        assert!(dispatcher.lock().resting("dead", Instant::now()));
        for _ in 0..8 {
            assert_eq!(dispatcher.pick(None).as_deref(), Some("alive"), "the resting worker is skipped");
        }
        dispatcher.lock().resting.get_mut("dead").unwrap().until = Instant::now();
        let picks: HashSet<String> = (0..4).filter_map(|_| dispatcher.pick(None)).collect();
        assert!(picks.contains("dead"), "picked again once its rest is over: {picks:?}");
    }
}
