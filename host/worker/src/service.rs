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
//! - a dispatch that arrives late (it waited in a frozen worker's socket,
//!   or its call timed out) does not start an attempt its master ended
//!   meanwhile: a master ends an attempt it sent only when the worker said
//!   it does not know it or was told to stop it first (the worker then
//!   refuses its dispatch: [`Worker::disown`]), or when the worker's lease
//!   ended (each attempt names the lease it was sent to, and a worker that
//!   joined again under another refuses it; one that holds no lease takes
//!   nothing).
//! - a result is kept until the run's current owner acknowledges it; a new
//!   owner that adopts a running attempt gets its result, with its epoch.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use dagr_coord::{Coordinator, Membership, Role};
use dagr_protocol::sharding::SlotMap;
use dagr_protocol::wire::{
    self, Ack, AdoptRequest, AdoptResponse, AttemptKey, AttemptResult, AttemptSpec, CancelRequest, DispatchBatch,
    DispatchResponse, ResultAcks, ResultBatch, Verdict,
};
use dagr_store::Store;
use dagr_transport::Internal;
use tokio::sync::{Notify, watch};

use crate::kept::StaleResults;
use crate::{Reporter, Worker};

/// Delivers results to masters, retrying and re-routing until acknowledged.
pub struct ClusterReporter {
    state: Mutex<ReporterState>,
    notify: Notify,
    membership: watch::Receiver<Membership>,
    /// The masters' ids and their slot map (see [`ClusterReporter::masters`]).
    slot_map: Mutex<(Vec<String>, Arc<SlotMap>)>,
    http: reqwest::Client,
}

#[derive(Default)]
struct ReporterState {
    /// The epoch and master an attempt reports with (changed by adoption).
    targets: HashMap<AttemptKey, (i64, String)>,
    /// Finished results not yet acknowledged.
    pending: HashMap<AttemptKey, AttemptResult>,
    /// Results a master acknowledged as stale, for a master that asks
    /// about their attempts later.
    stale: StaleResults,
}

impl ClusterReporter {
    pub fn start(membership: watch::Receiver<Membership>, internal: &Internal) -> Arc<ClusterReporter> {
        let reporter = Arc::new(ClusterReporter {
            state: Mutex::new(ReporterState::default()),
            notify: Notify::new(),
            membership,
            slot_map: Mutex::new((Vec::new(), Arc::new(SlotMap::default()))),
            http: internal.client().timeout(Duration::from_secs(10)).build().unwrap_or_default(),
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

    /// A new owner takes an attempt over: its result, if it has one (kept
    /// after a stale acknowledgement too: it goes to the new owner).
    fn adopt(&self, request: &AdoptRequest) -> Option<AttemptResult> {
        let mut state = self.lock();
        state.targets.insert(request.key.clone(), (request.epoch, request.master.clone()));
        if let Some(kept) = state.stale.take(&request.key) {
            state.pending.insert(request.key.clone(), kept);
        }
        let result = state.pending.get_mut(&request.key).map(|r| {
            r.epoch = request.epoch;
            r.clone()
        });
        drop(state);
        self.notify.notify_one();
        result
    }

    /// Whether the attempt may have run here though neither it nor its
    /// result is here any more: its result, acknowledged as stale, was not
    /// kept. Asked after [`Self::adopt`] found no result: a result settles
    /// under the same lock that keeps it.
    fn may_have_dropped(&self, key: &AttemptKey) -> bool {
        self.lock().stale.may_have_dropped(key)
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

    /// The live masters (id → address) and the slot map they make with
    /// equal weights, computed again only when the masters change.
    fn masters(&self) -> (BTreeMap<String, String>, Arc<SlotMap>) {
        let masters: BTreeMap<String, String> =
            self.membership.borrow().with_role(Role::Master).map(|m| (m.id.clone(), m.addr.clone())).collect();
        let mut cached = self.slot_map.lock().unwrap_or_else(|e| e.into_inner());
        if !cached.0.iter().eq(masters.keys()) {
            let weights = masters.keys().map(|id| (id.clone(), 1.0)).collect();
            *cached = (masters.keys().cloned().collect(), Arc::new(SlotMap::compute(&weights)));
        }
        (masters, cached.1.clone())
    }

    /// Where a result goes, in order: the master that dispatched (or
    /// adopted) the attempt, which owns the run unless it failed over; the
    /// slot's owner with equal weights (the owner after a failover); then
    /// every other master (the leader's rebalancing weights, which workers
    /// do not know, can move a slot anywhere). A master that does not own
    /// the run answers so, and the next one is asked.
    fn candidates(run_id: &str, preferred: &str, masters: &BTreeMap<String, String>, map: &SlotMap) -> Vec<String> {
        let mut order: Vec<&str> = Vec::with_capacity(masters.len());
        let owner = map.owner(dagr_protocol::slot_of(run_id));
        for id in std::iter::once(preferred).chain(owner).chain(masters.keys().map(String::as_str)) {
            if masters.contains_key(id) && !order.contains(&id) {
                order.push(id);
            }
        }
        order.into_iter().map(|id| masters[id].clone()).collect()
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
            let (masters, map) = self.masters();
            let mut left: Vec<(AttemptResult, Vec<String>)> = pending
                .into_iter()
                .map(|(result, preferred)| {
                    let candidates = Self::candidates(&result.key.run_id, &preferred, &masters, &map);
                    (result, candidates)
                })
                .collect();
            // Round n asks each result's n-th candidate: one request per
            // master (a chunk at most), all masters at once.
            for round in 0..masters.len() {
                let mut batches: HashMap<&str, Vec<&AttemptResult>> = HashMap::new();
                for (result, candidates) in &left {
                    if let Some(addr) = candidates.get(round) {
                        batches.entry(addr).or_default().push(result);
                    }
                }
                let this: &ClusterReporter = &self;
                let requests = batches.into_iter().flat_map(|(addr, results)| {
                    wire::batches(results, |r| r.payload_bytes())
                        .into_iter()
                        .map(move |chunk| this.deliver(addr, chunk))
                });
                let settled: HashSet<AttemptKey> =
                    futures::future::join_all(requests).await.into_iter().flatten().collect();
                left.retain(|(result, _)| !settled.contains(&result.key));
                if left.is_empty() {
                    break;
                }
            }
            if !left.is_empty() {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        }
    }

    /// Sends results to one master: the keys of those it settled (recorded,
    /// or found stale).
    async fn deliver(&self, addr: &str, results: Vec<&AttemptResult>) -> Vec<AttemptKey> {
        let batch = ResultBatch { results: results.iter().map(|r| (*r).clone()).collect() };
        let answer = self
            .http
            .post(format!("{addr}/internal/results"))
            .json(&batch)
            .send()
            .await
            .ok()
            .filter(|r| r.status().is_success());
        let Some(answer) = answer else { return Vec::new() };
        let Ok(ResultAcks { acks }) = answer.json::<ResultAcks>().await else { return Vec::new() };
        let mut state = self.lock();
        let mut settled = Vec::new();
        for (result, ack) in batch.results.into_iter().zip(&acks) {
            if matches!(ack, Ack::Applied | Ack::Stale)
                && state.pending.get(&result.key).is_some_and(|p| p.outcome == result.outcome)
            {
                state.targets.remove(&result.key);
                let settled_result = state.pending.remove(&result.key);
                if let (Ack::Stale, Some(stale)) = (ack, settled_result) {
                    state.stale.keep(stale);
                }
                settled.push(result.key);
            }
        }
        settled
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
    /// Its membership: the lease it holds now, which a dispatch names.
    pub coordinator: Arc<dyn Coordinator>,
}

/// The worker's internal HTTP endpoint.
pub fn router(service: WorkerService) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/internal/attempts", post(accept))
        .route("/internal/attempts/cancel", post(cancel))
        .route("/internal/attempts/adopt", post(adopt))
        .route("/internal/status", get(status))
        .layer(axum::extract::DefaultBodyLimit::max(wire::INTERNAL_BODY_LIMIT))
        .with_state(service)
}

async fn accept(
    State(s): State<WorkerService>,
    headers: axum::http::HeaderMap,
    Json(batch): Json<DispatchBatch>,
) -> Result<Json<DispatchResponse>, (axum::http::StatusCode, &'static str)> {
    // A fenced worker takes nothing, as a whole: the master rests it (and
    // its attempts go elsewhere) instead of sending them back at once. The
    // lease guard is read as well as the health watch: just after a freeze
    // (SIGSTOP) the guard knows first, and an attempt accepted then would
    // be stopped at once and counted as lost with its node.
    if !*s.healthy.borrow() || !s.worker.may_act() {
        return Err((
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "this worker is fenced (its lease is not safe): it takes no attempts",
        ));
    }
    // The span is the dispatch's link in a trace; with no exporter there
    // is nothing to link, and a batch need not pay for one.
    if !dagr_telemetry::enabled() {
        return Ok(accept_batch(s, batch).await);
    }
    let span = tracing::info_span!("accept", attempts = batch.attempts.len(), otel.kind = "server");
    dagr_telemetry::extract(&span, &headers);
    Ok(tracing::Instrument::instrument(accept_batch(s, batch), span).await)
}

async fn accept_batch(s: WorkerService, batch: DispatchBatch) -> Json<DispatchResponse> {
    let capacity = s.worker.slots() as u32;
    let answer =
        |verdicts: Vec<Verdict>| Json(DispatchResponse { verdicts, running: s.worker.running() as u32, capacity });
    // Register first, then check the epoch: see the module docs. A
    // reservation is given back if this handler ends early — a stale epoch,
    // a store error, or the master dropping the request mid-way (axum then
    // drops this future): a leaked one would make the worker claim forever
    // that the attempt runs.
    let mut reserved: Vec<Option<Reservation<'_>>> = Vec::with_capacity(batch.attempts.len());
    let mut verdicts: Vec<Verdict> = Vec::with_capacity(batch.attempts.len());
    // Sent to this worker under a lease it lost since: the master counted
    // them lost when it saw that lease go.
    let lease = s.coordinator.lease();
    for spec in &batch.attempts {
        if spec.worker_lease.is_some_and(|sent| Some(sent) != lease) {
            verdicts.push(Verdict::Refused { reason: crate::Refusal::OtherLease.to_string() });
            reserved.push(None);
            continue;
        }
        let reservation = Reservation::new(&s.worker, &spec.key);
        verdicts.push(match &reservation {
            Ok(_) => Verdict::Accepted,
            Err(refusal) => Verdict::Refused { reason: refusal.to_string() },
        });
        reserved.push(reservation.ok());
    }
    // One look at the store per run: a batch is mostly one run's tasks.
    let mut epochs: HashMap<&str, Result<Option<i64>, String>> = HashMap::new();
    for spec in batch.attempts.iter().zip(&reserved).filter(|(_, r)| r.is_some()).map(|(spec, _)| spec) {
        if !epochs.contains_key(spec.key.run_id.as_str()) {
            let epoch = s.store.run_epoch(&spec.key.run_id).await.map_err(|e| e.to_string());
            epochs.insert(&spec.key.run_id, epoch);
        }
    }
    for ((spec, reservation), verdict) in batch.attempts.iter().zip(&mut reserved).zip(&mut verdicts) {
        if reservation.is_none() {
            continue;
        }
        match &epochs[spec.key.run_id.as_str()] {
            Ok(Some(epoch)) if *epoch == spec.epoch => {}
            Ok(current) => {
                *reservation = None;
                *verdict = Verdict::Refused {
                    reason: format!(
                        "stale dispatch: the run's epoch is {current:?}, the attempt carries {}",
                        spec.epoch
                    ),
                };
            }
            Err(e) => {
                *reservation = None;
                *verdict = Verdict::Refused { reason: format!("cannot check the run's epoch: {e}") };
            }
        }
    }
    for (spec, reservation) in batch.attempts.into_iter().zip(reserved) {
        // A duplicate of an attempt that runs here already is accepted, once.
        if let Some(reservation) = reservation
            && reservation.keep()
        {
            s.reporter.track(&spec);
            s.worker.start(spec, s.reporter.clone());
        }
    }
    answer(verdicts)
}

/// A worker slot reserved for an attempt by `accept`, given back on drop
/// unless kept. A reservation that was already there (the same attempt
/// dispatched twice) is not given back: it belongs to the first.
struct Reservation<'a> {
    worker: &'a Worker,
    key: Option<AttemptKey>,
}

impl<'a> Reservation<'a> {
    fn new(worker: &'a Worker, key: &AttemptKey) -> Result<Reservation<'a>, crate::Refusal> {
        let fresh = worker.reserve(key)?;
        Ok(Reservation { worker, key: fresh.then(|| key.clone()) })
    }

    /// Keeps the slot; true if the reservation was made for this dispatch
    /// (false: the attempt was running here already).
    fn keep(mut self) -> bool {
        self.key.take().is_some()
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
    // Both looked at under the worker's lock of running attempts: one that
    // finishes in between would be in neither (and run again).
    s.worker.while_running(&req.key, |running| match s.reporter.adopt(&req) {
        Some(result) => Json(AdoptResponse::Finished { result }),
        None if running => Json(AdoptResponse::Running),
        None => {
            s.reporter.forget(&req.key);
            s.worker.disown(&req.key);
            // Neither running nor finished here, nor dropped: it never
            // reached this worker since it started, so not under the lease
            // it holds now (a new process joins under a new lease).
            let never_under = if s.reporter.may_have_dropped(&req.key) { None } else { s.coordinator.lease() };
            Json(AdoptResponse::Unknown { never_under })
        }
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_go_to_their_master_then_the_slot_owner_then_everyone_else() {
        let masters: BTreeMap<String, String> =
            ["m1", "m2", "m3"].iter().map(|id| (id.to_string(), format!("http://{id}"))).collect();
        let map = SlotMap::compute(&masters.keys().map(|id| (id.clone(), 1.0)).collect());
        let run = "run-1";
        let owner = map.owner(dagr_protocol::slot_of(run)).unwrap().to_owned();
        let other = masters.keys().find(|id| **id != owner).unwrap().clone();

        let order = ClusterReporter::candidates(run, &other, &masters, &map);
        assert_eq!(order.len(), 3, "every live master, once: {order:?}");
        assert_eq!(order[0], format!("http://{other}"), "the dispatching master first");
        assert_eq!(order[1], format!("http://{owner}"), "then the slot's owner");

        let order = ClusterReporter::candidates(run, "gone", &masters, &map);
        assert_eq!(order.len(), 3, "{order:?}");
        assert_eq!(order[0], format!("http://{owner}"), "a master that left is skipped");

        let order = ClusterReporter::candidates(run, &owner, &masters, &map);
        assert_eq!(order[0], format!("http://{owner}"));
        assert_eq!(order.len(), 3, "no master twice: {order:?}");

        assert!(ClusterReporter::candidates(run, "m1", &BTreeMap::new(), &SlotMap::default()).is_empty());
    }
}
