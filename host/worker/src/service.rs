//! A worker in cluster mode: its internal HTTP endpoint (masters push
//! attempts to it), the reporter that delivers results to the run's current
//! owner until acknowledged, and self-fencing.
//!
//! Two guards make sure an attempt never runs twice because of a
//! control-plane failure:
//! - before starting an attempt, the worker registers it, then checks in the
//!   store that the run's epoch is still the one the attempt was dispatched
//!   with. A master that took the run over bumped the epoch *before* asking
//!   workers about its attempts, so either it sees this attempt (and adopts
//!   it) or this worker sees the new epoch (and refuses the attempt).
//! - a result is kept until the run's current owner acknowledges it; a new
//!   owner that adopts a running attempt gets its result, with its epoch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use dagr_coord::{Membership, Role};
use dagr_protocol::sharding::SlotMap;
use dagr_protocol::wire::{
    Ack, AdoptRequest, AdoptResponse, AttemptKey, AttemptResult, AttemptSpec, CancelRequest, DispatchResponse,
};
use dagr_store::Store;
use tokio::sync::{Notify, watch};

use crate::{Reporter, Worker};

/// Delivers results to masters, retrying and re-routing until acknowledged.
pub struct ClusterReporter {
    state: Mutex<ReporterState>,
    notify: Notify,
    membership: watch::Receiver<Membership>,
    http: reqwest::Client,
}

#[derive(Default)]
struct ReporterState {
    /// The epoch and master an attempt reports with (changed by adoption).
    targets: HashMap<AttemptKey, (i64, String)>,
    /// Finished results not yet acknowledged.
    pending: HashMap<AttemptKey, AttemptResult>,
}

impl ClusterReporter {
    pub fn start(membership: watch::Receiver<Membership>) -> Arc<ClusterReporter> {
        let reporter = Arc::new(ClusterReporter {
            state: Mutex::new(ReporterState::default()),
            notify: Notify::new(),
            membership,
            http: reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap_or_default(),
        });
        tokio::spawn(reporter.clone().deliver_forever());
        reporter
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReporterState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers where an attempt reports (at dispatch).
    fn track(&self, spec: &AttemptSpec) {
        self.lock().targets.insert(spec.key.clone(), (spec.epoch, spec.master.clone()));
    }

    fn forget(&self, key: &AttemptKey) {
        let mut state = self.lock();
        state.targets.remove(key);
        state.pending.remove(key);
    }

    /// A new owner takes an attempt over.
    fn adopt(&self, request: &AdoptRequest) -> Option<AttemptResult> {
        let mut state = self.lock();
        state.targets.insert(request.key.clone(), (request.epoch, request.master.clone()));
        let result = state.pending.get_mut(&request.key).map(|r| {
            r.epoch = request.epoch;
            r.clone()
        });
        drop(state);
        self.notify.notify_one();
        result
    }

    fn pending(&self) -> Vec<(AttemptResult, String)> {
        let state = self.lock();
        state
            .pending
            .values()
            .map(|r| {
                let (epoch, master) = state.targets.get(&r.key).cloned().unwrap_or((r.epoch, String::new()));
                let mut r = r.clone();
                r.epoch = epoch;
                (r, master)
            })
            .collect()
    }

    /// The master to report to: the dispatching (or adopting) master while
    /// it is alive and owns the run's slot, else the slot's current owner.
    fn route(&self, run_id: &str, preferred: &str) -> Option<String> {
        let members = self.membership.borrow().clone();
        let masters: std::collections::BTreeMap<String, f64> =
            members.with_role(Role::Master).map(|m| (m.id.clone(), 1.0)).collect();
        let owner = SlotMap::compute(&masters).owner(dagr_protocol::slot_of(run_id)).map(str::to_owned);
        let id = match owner {
            Some(owner) => owner,
            None => preferred.to_owned(),
        };
        members.nodes.get(&id).map(|n| n.addr.clone())
    }

    async fn deliver_forever(self: Arc<Self>) {
        let mut delay = Duration::from_millis(50);
        loop {
            let pending = self.pending();
            if pending.is_empty() {
                self.notify.notified().await;
                delay = Duration::from_millis(50);
                continue;
            }
            let mut all_done = true;
            for (result, master) in pending {
                let Some(addr) = self.route(&result.key.run_id, &master) else {
                    all_done = false;
                    continue;
                };
                let ack = self
                    .http
                    .post(format!("{addr}/internal/results"))
                    .json(&result)
                    .send()
                    .await
                    .ok()
                    .filter(|r| r.status().is_success());
                let ack = match ack {
                    Some(response) => response.json::<Ack>().await.ok(),
                    None => None,
                };
                match ack {
                    Some(Ack::Applied | Ack::Stale) => {
                        let mut state = self.lock();
                        if state.pending.get(&result.key).is_some_and(|p| p.outcome == result.outcome) {
                            state.pending.remove(&result.key);
                            state.targets.remove(&result.key);
                        }
                    }
                    _ => all_done = false,
                }
            }
            if !all_done {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        }
    }
}

impl Reporter for ClusterReporter {
    fn report(&self, result: AttemptResult) {
        self.lock().pending.insert(result.key.clone(), result);
        self.notify.notify_one();
    }
}

/// What the worker's endpoint shares.
#[derive(Clone)]
pub struct WorkerService {
    pub worker: Worker,
    pub store: Arc<dyn Store>,
    pub reporter: Arc<ClusterReporter>,
    /// False while this worker's lease is not safely alive.
    pub healthy: watch::Receiver<bool>,
}

/// The worker's internal HTTP endpoint.
pub fn router(service: WorkerService) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/internal/attempts", post(accept))
        .route("/internal/attempts/cancel", post(cancel))
        .route("/internal/attempts/adopt", post(adopt))
        .route("/internal/status", get(status))
        .with_state(service)
}

async fn accept(State(s): State<WorkerService>, Json(spec): Json<AttemptSpec>) -> (StatusCode, Json<DispatchResponse>) {
    let capacity = s.worker.slots() as u32;
    let refuse = |status: StatusCode, reason: String, running: usize| {
        (status, Json(DispatchResponse { accepted: false, reason, running: running as u32, capacity }))
    };
    if !*s.healthy.borrow() {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "this worker is fenced (lease lost)".into(),
            s.worker.running(),
        );
    }
    // Register first, then check the epoch: see the module docs. The
    // reservation is given back if this handler ends early — a stale epoch,
    // a store error, or the master dropping the request mid-way (axum then
    // drops this future): a leaked one would make the worker claim forever
    // that the attempt runs.
    let Some(reservation) = Reservation::new(&s.worker, &spec.key) else {
        return refuse(StatusCode::TOO_MANY_REQUESTS, "the worker is at capacity".into(), s.worker.running());
    };
    match s.store.run_epoch(&spec.key.run_id).await {
        Ok(Some(epoch)) if epoch == spec.epoch => {}
        Ok(current) => {
            drop(reservation);
            return refuse(
                StatusCode::CONFLICT,
                format!("stale dispatch: the run's epoch is {current:?}, the attempt carries {}", spec.epoch),
                s.worker.running(),
            );
        }
        Err(e) => {
            drop(reservation);
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot check the run's epoch: {e}"),
                s.worker.running(),
            );
        }
    }
    reservation.keep();
    s.reporter.track(&spec);
    s.worker.start(spec, s.reporter.clone());
    (
        StatusCode::ACCEPTED,
        Json(DispatchResponse { accepted: true, reason: String::new(), running: s.worker.running() as u32, capacity }),
    )
}

/// A worker slot reserved for an attempt by `accept`, given back on drop
/// unless kept. A reservation that was already there (the same attempt
/// dispatched twice) is not given back: it belongs to the first.
struct Reservation<'a> {
    worker: &'a Worker,
    key: Option<AttemptKey>,
}

impl<'a> Reservation<'a> {
    fn new(worker: &'a Worker, key: &AttemptKey) -> Option<Reservation<'a>> {
        let fresh = worker.reserve(key)?;
        Some(Reservation { worker, key: fresh.then(|| key.clone()) })
    }

    fn keep(mut self) {
        self.key = None;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.worker.unreserve(&key);
        }
    }
}

async fn cancel(State(s): State<WorkerService>, Json(req): Json<CancelRequest>) -> StatusCode {
    if s.worker.cancel(&req.key) { StatusCode::OK } else { StatusCode::NOT_FOUND }
}

async fn adopt(State(s): State<WorkerService>, Json(req): Json<AdoptRequest>) -> Json<AdoptResponse> {
    let running = s.worker.running_keys().contains(&req.key);
    match s.reporter.adopt(&req) {
        Some(result) => Json(AdoptResponse::Finished { result }),
        None if running => Json(AdoptResponse::Running),
        None => {
            s.reporter.forget(&req.key);
            Json(AdoptResponse::Unknown)
        }
    }
}

async fn status(State(s): State<WorkerService>) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "id": s.worker.id(),
        "running": s.worker.running(),
        "capacity": s.worker.slots(),
        "healthy": *s.healthy.borrow(),
    }))
}

/// Stops every attempt while the lease is lost (they are reported as lost,
/// so they run again, uncharged, elsewhere).
pub fn fence_on_lease_loss(worker: Worker, mut healthy: watch::Receiver<bool>) {
    tokio::spawn(async move {
        loop {
            if healthy.changed().await.is_err() {
                return;
            }
            if !*healthy.borrow() {
                tracing::warn!("lease lost: abandoning every running attempt");
                worker.abandon_all();
            }
        }
    });
}
