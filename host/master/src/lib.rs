//! dagr's engine: it admits runs, drives their state machines, dispatches
//! attempts to workers, applies their results, fires retries and cron
//! schedules, and recovers after a crash.
//!
//! # Brief overview
//!
//! - [`Engine::start`] starts the engine loop and returns an
//!   [`EngineHandle`]. The engine drives the runs of the slots it is told it
//!   owns ([`EngineHandle::own_slots`]): taking a slot over claims its runs
//!   (bumping their epochs), asks workers about their running attempts
//!   instead of restarting them, and admits queued runs. Recovery after a
//!   restart is the same path.
//! - The engine is a synchronous state machine
//!   ([`EngineState`](engine::EngineState): inputs, data and `now` in,
//!   effects out — no clock, store or network inside a decision) inside a
//!   thin async shell that reads what the state needs, commits everything a
//!   step changed in **one** [`WriteBatch`](dagr_store::WriteBatch), and
//!   only then dispatches attempts, sends cancellations and tells waiters:
//!   a crash never leaves a dispatched attempt unrecorded. See
//!   [`engine`] for the split.
//! - Readiness is event-driven: a completion touches only its dependents;
//!   no loop scans all runs or all tasks.
//! - Workers are reached through a [`Transport`]; which worker gets an
//!   attempt is the state's decision ([`engine::Strategy`]). Results come
//!   back through [`EngineHandle::report`].

pub mod archive;
pub mod cluster;
pub mod engine;
mod hash;
pub mod metrics;
pub mod policy;
mod ready;
pub mod rebalance;
pub mod resource_leader;
pub mod resources;
pub mod sim;
pub use dagr_protocol::sharding;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use dagr_protocol::control::{CommandOutcome, Control};
use dagr_protocol::plugins::PluginDirectory;
use dagr_protocol::wire::{AttemptKey, AttemptResult, AttemptSpec, ResourceAnswer, ResourceRequest};
use dagr_store::{RunState, Store};
use tokio::sync::{broadcast, mpsc};

pub use crate::engine::{Accepted, Engine, Strategy, WorkerInfo};
pub use crate::policy::StorePolicy;

/// What a worker says about an attempt a new owner asks it about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adoption {
    /// Still running; it now reports to the asking master with its epoch.
    Running,
    /// It ended; here is its result.
    Finished(AttemptResult),
    /// The worker does not know it (never received, or restarted, or it ran
    /// and its result was dropped): it will never run there. `never_under`:
    /// the worker's lease, when it vouches that the attempt never reached
    /// it under that lease.
    Unknown { never_under: Option<i64> },
    /// The worker is not a member any more (its lease ended): what it ran
    /// is lost with it.
    Gone,
}

/// How attempts reach workers. In `dagr serve` a worker in the same
/// process; in a cluster, workers over HTTP.
#[async_trait]
pub trait Transport: Send + Sync + 'static {
    /// Hands attempts to `worker`, all in one exchange: a verdict per
    /// attempt (an error means that attempt was not accepted and will not
    /// run), or why the exchange failed as a whole.
    async fn dispatch(&self, specs: Vec<AttemptSpec>, worker: &str) -> Result<Accepted, DispatchError>;
    /// Asks the worker running this attempt to stop it.
    async fn cancel(&self, key: &AttemptKey, worker: &str);
    /// Asks `worker` about an attempt this master took over with `epoch`.
    async fn adopt(&self, key: &AttemptKey, worker: &str, epoch: i64) -> Adoption;
    /// Exchanges with the resource leader (when the leader schedules
    /// resources): what this master holds and wants, for what it may use.
    async fn resources(&self, _request: ResourceRequest) -> Result<ResourceAnswer, String> {
        Err("this transport has no resource leader".into())
    }
}

/// Who decides how many attempts a master may put on each worker
/// (`[master] resources`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Resources {
    /// Each master from its own view: the attempts it has on a worker and
    /// what the worker last said it runs; workers refuse past capacity.
    #[default]
    Local,
    /// The elected leader holds every worker's slots in memory and grants
    /// them to all masters (Buffalo's resource scheduler, see
    /// [`resources`]).
    Leader,
}

impl std::str::FromStr for Resources {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "local" => Ok(Resources::Local),
            "leader" => Ok(Resources::Leader),
            other => Err(format!("unknown resource scheduling `{other}` (local or leader)")),
        }
    }
}

/// Why a dispatch failed as a whole: no attempt of it was accepted, and
/// unless [`DispatchError::may_have_run`], none reached the worker.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DispatchError {
    /// The worker left the membership.
    #[error("worker {0} is not a member any more")]
    NotMember(String),
    /// It could not be reached: no connection, so no request reached it.
    #[error("worker {worker} unreachable: {reason}")]
    Unreachable { worker: String, reason: String },
    /// The request went out and no answer came back (a timeout, a
    /// connection reset): the worker may have taken the attempts.
    #[error("worker {worker} did not answer: {reason}")]
    NoAnswer { worker: String, reason: String },
    /// It answered with an error status (e.g. a wrong cluster secret).
    #[error("worker {worker} answered {status}: {body}")]
    Refused { worker: String, status: u16, body: String },
    /// Its answer does not make sense.
    #[error("worker {worker} answered badly: {reason}")]
    BadAnswer { worker: String, reason: String },
}

impl DispatchError {
    /// Whether the worker may have taken the attempts anyway: then they
    /// are not "never ran" (that would run them twice, here and wherever
    /// they go next) but in flight until the worker says, or leaves.
    pub fn may_have_run(&self) -> bool {
        matches!(self, DispatchError::NoAnswer { .. } | DispatchError::BadAnswer { .. })
    }
}

/// The limits the engine enforces per tenant at dispatch: concurrent
/// attempts, memory and duration caps, the network allowlist and the
/// scratch quota.
#[async_trait]
pub trait TenantPolicy: Send + Sync + 'static {
    /// Every tenant's limits now, with a version that changes when they
    /// do; `None`: no tenant limits apply (tasks get what they ask for). A
    /// tenant missing from the map gets the default limits.
    fn snapshot(&self) -> Option<(u64, Arc<HashMap<String, TenantLimits>>)>;

    /// A run of `tenant` is being loaded: make sure its limits are known
    /// before its tasks are dispatched.
    async fn prepare(&self, _tenant: &str) {}

    /// A tenant's limits changed: re-read them soon.
    fn changed(&self) {}
}

/// No tenant limits at all.
pub struct Unlimited;

#[async_trait]
impl TenantPolicy for Unlimited {
    fn snapshot(&self) -> Option<(u64, Arc<HashMap<String, TenantLimits>>)> {
        None
    }
}

pub use dagr_protocol::tenancy::TenantLimits;

/// Settings of the engine.
#[derive(Clone)]
pub struct EngineConfig {
    /// This master's id, recorded with the attempts it dispatches.
    pub node_id: String,
    /// Attempt deadline when a task sets no timeout.
    pub default_timeout: Duration,
    /// Attempt memory when a task sets none.
    pub default_memory: u64,
    /// The most memory a task may ask for.
    pub max_memory: u64,
    pub max_output_bytes: u64,
    pub max_log_bytes: u64,
    /// The most a task's rendered params may be, as JSON (`[limits]
    /// max_params`); more fails the task.
    pub max_params_bytes: u64,
    /// How often the engine looks for commands even when not woken.
    pub poll_interval: Duration,
    /// Check the ownership epoch in every write (cluster mode). A single
    /// node that holds its store exclusively may skip the check.
    pub fence_writes: bool,
    /// Per-tenant limits.
    pub policy: Arc<dyn TenantPolicy>,
    /// Ask a worker about an attempt it has not been heard of for this
    /// long (cluster mode: a worker restarted within its lease TTL forgets
    /// its attempts without leaving the membership). `None`: never.
    pub attempt_check: Option<Duration>,
    /// Attempts this master keeps in flight at most.
    pub max_in_flight: usize,
    /// How a worker is chosen.
    pub strategy: Strategy,
    /// Who decides how many attempts this master may put on each worker.
    pub resources: Resources,
    /// Times a task's attempt may be lost with its node before the task
    /// fails (`[master] max_lost_attempts`).
    pub max_lost_attempts: u32,
    /// Missed cycles a catching-up schedule makes up for at most
    /// (`[master] max_catch_up`).
    pub max_catch_up: u32,
    /// Runs a catching-up schedule creates per engine step, a second apart
    /// (`[master] catch_up_per_second`).
    pub catch_up_per_second: u32,
    /// Task state changes a step commits at most; the rest of a burst
    /// follows in the next steps (`[master] step_task_changes`).
    pub step_task_changes: usize,
    /// Runs waiting upstream in gained slots woken per step
    /// (`[master] takeover_wakes_per_step`).
    pub takeover_wakes_per_step: usize,
    /// Validated workflow versions; `dagr serve` shares its API's, so a
    /// large workflow is held once.
    pub versions: Arc<dagr_core::versions::VersionCache>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            node_id: "local".into(),
            default_timeout: Duration::from_secs(3600),
            default_memory: 128 << 20,
            max_memory: 1 << 30,
            max_output_bytes: 1 << 20,
            max_log_bytes: 1 << 20,
            max_params_bytes: 4 << 20,
            poll_interval: Duration::from_secs(1),
            fence_writes: true,
            policy: Arc::new(Unlimited),
            attempt_check: None,
            max_in_flight: 10_000,
            strategy: Strategy::LeastLoaded,
            resources: Resources::Local,
            max_lost_attempts: dagr_core::run::DEFAULT_MAX_LOST,
            max_catch_up: 100,
            catch_up_per_second: dagr_core::schedule::MAX_RUNS_PER_STEP as u32,
            step_task_changes: dagr_core::run::DEFAULT_STEP_TASK_CHANGES,
            takeover_wakes_per_step: dagr_core::run::DEFAULT_TAKEOVER_WAKES_PER_STEP,
            versions: Default::default(),
        }
    }
}

/// Counters for metrics and tests.
#[derive(Debug, Default)]
pub struct EngineMetrics {
    pub steps: AtomicU64,
    pub dispatched: AtomicU64,
    pub results: AtomicU64,
    /// Results for attempts that were no longer current (killed, reset,
    /// duplicate, or carrying an old epoch). Never applied.
    pub stale_results: AtomicU64,
    /// Writes the store refused because another owner fenced the run.
    pub fenced_writes: AtomicU64,
    /// Admissions the store refused: their workflow's or backfill's runs
    /// were at their limit (counted over every master's runs).
    pub admissions_over_limit: AtomicU64,
    /// Runs this master stopped driving without a write: their slots went
    /// to another master, or another master claimed them while this one
    /// was away (a lapsed lease, a rebalance).
    pub runs_handed_over: AtomicU64,
    pub runs_finished: AtomicU64,
    /// Runs taken over from another owner (or after a restart).
    pub runs_claimed: AtomicU64,
    /// Attempts found running at takeover and adopted, not restarted.
    pub attempts_adopted: AtomicU64,
    /// Attempts found lost at takeover or with their worker.
    pub attempts_lost: AtomicU64,
    pub dispatch_refused: AtomicU64,
    /// Runs this master drives now (a gauge; its load for rebalancing).
    pub active_runs: AtomicU64,
    /// Attempts in flight now (a gauge).
    pub in_flight: AtomicU64,
    /// Tasks ready and waiting for a worker slot (a gauge).
    pub ready: AtomicU64,
}

impl EngineMetrics {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

pub use dagr_protocol::wire::Ack;

/// What the handle sends the engine's loop.
pub(crate) enum Message {
    Wake,
    Result(AttemptResult, Option<tokio::sync::oneshot::Sender<Ack>>),
    WorkflowChanged {
        tenant: String,
        name: String,
    },
    TenantChanged,
    /// The slots this master owns now.
    Ownership(std::collections::HashSet<u32>),
    /// Whether this master leads (and its fencing token).
    Leadership(Option<i64>),
    /// The workers that exist now.
    Workers(Vec<WorkerInfo>),
    Shutdown(tokio::sync::oneshot::Sender<()>),
    /// Whom to wake when a step wrote commands for runs of other masters.
    Peers(Arc<dyn Control>),
}

/// A running engine. Cheap to clone.
#[derive(Clone)]
pub struct EngineHandle {
    tx: mpsc::UnboundedSender<Message>,
    commands: broadcast::Sender<(i64, CommandOutcome)>,
    finished: broadcast::Sender<(String, String)>,
    /// Counts the steps that committed events.
    events: tokio::sync::watch::Sender<u64>,
    store: Arc<dyn Store>,
    pub metrics: Arc<EngineMetrics>,
    pub plugins: Arc<dyn PluginDirectory>,
}

#[cfg(test)]
impl EngineHandle {
    /// A handle with no engine behind it: the test reads what it is sent.
    pub(crate) fn detached(
        store: Arc<dyn Store>,
        plugins: Arc<dyn PluginDirectory>,
    ) -> (Self, mpsc::UnboundedReceiver<Message>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = EngineHandle {
            tx,
            commands: broadcast::channel(1).0,
            finished: broadcast::channel(1).0,
            events: tokio::sync::watch::channel(0).0,
            store,
            metrics: Arc::default(),
            plugins,
        };
        (handle, rx)
    }
}

impl EngineHandle {
    /// Changes each time a step of this engine committed events: an event
    /// stream in the same process can read them at once instead of at its
    /// next poll.
    pub fn events_committed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.events.subscribe()
    }

    /// A worker's report of a finished attempt.
    pub fn report(&self, result: AttemptResult) {
        let _ = self.tx.send(Message::Result(result, None));
    }

    /// Workers' reports, each answered once the engine has durably recorded
    /// it (or decided it is stale or not its own): one [`Ack`] each, in
    /// order. All are handed to the engine before waiting, so that one
    /// engine step can record them together.
    pub async fn report_acked(&self, results: Vec<AttemptResult>) -> Vec<Ack> {
        let waiting: Vec<_> = results
            .into_iter()
            .map(|result| {
                let (tx, rx) = tokio::sync::oneshot::channel();
                self.tx.send(Message::Result(result, Some(tx))).is_ok().then_some(rx)
            })
            .collect();
        let mut acks = Vec::with_capacity(waiting.len());
        for rx in waiting {
            acks.push(match rx {
                Some(rx) => rx.await.unwrap_or(Ack::NotOwner),
                None => Ack::NotOwner,
            });
        }
        acks
    }

    /// Sets the slots this master owns: it takes over the runs of slots it
    /// gains (bumping their epochs) and drops the runs of slots it loses.
    pub fn own_slots(&self, slots: std::collections::HashSet<u32>) {
        let _ = self.tx.send(Message::Ownership(slots));
    }

    /// Makes this master the leader (with its fencing token) or not.
    pub fn lead(&self, token: Option<i64>) {
        let _ = self.tx.send(Message::Leadership(token));
    }

    /// The workers that exist now, with their capacity. The attempts of
    /// workers that are no longer among them are lost and go again.
    pub fn workers(&self, workers: Vec<WorkerInfo>) {
        let _ = self.tx.send(Message::Workers(workers));
    }

    /// In a cluster: the other masters, woken (to read their commands)
    /// whenever a step wrote commands for runs they may own — an upstream
    /// run's end waking a downstream run, a re-flush, a child run's end —
    /// so that they act at once instead of at their next poll.
    pub fn wake_peers_with(&self, peers: Arc<dyn Control>) {
        let _ = self.tx.send(Message::Peers(peers));
    }

    /// Stops the engine loop (attempts in flight are left to the worker).
    pub async fn shutdown(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.tx.send(Message::Shutdown(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// Subscribes to finished runs: (run id, final state).
    pub fn finished_runs(&self) -> broadcast::Receiver<(String, String)> {
        self.finished.subscribe()
    }
}

#[async_trait]
impl Control for EngineHandle {
    fn wake(&self) {
        let _ = self.tx.send(Message::Wake);
    }

    fn workflow_changed(&self, tenant: &str, name: &str) {
        let _ = self.tx.send(Message::WorkflowChanged { tenant: tenant.into(), name: name.into() });
    }

    fn tenant_changed(&self, _tenant: &str) {
        let _ = self.tx.send(Message::TenantChanged);
    }

    async fn wait_command(&self, id: i64, timeout: Duration) -> Option<CommandOutcome> {
        let mut rx = self.commands.subscribe();
        if let Ok(Some(row)) = self.store.get_command(id).await
            && let Some(result) = row.result
        {
            return serde_json::from_str(&result).ok();
        }
        let wait = async {
            loop {
                match rx.recv().await {
                    Ok((done, outcome)) if done == id => return Some(outcome),
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        if let Ok(Some(row)) = self.store.get_command(id).await
                            && let Some(result) = row.result
                        {
                            return serde_json::from_str(&result).ok();
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.ok().flatten()
    }

    async fn wait_run(&self, run_id: &str, timeout: Duration) -> Option<String> {
        let mut rx = self.finished.subscribe();
        let terminal = |state: RunState| state.is_terminal();
        if let Ok(Some(run)) = self.store.get_run(run_id).await
            && terminal(run.state)
        {
            return Some(run.state.as_str().into());
        }
        let wait = async {
            loop {
                match rx.recv().await {
                    Ok((id, state)) if id == run_id => return Some(state),
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        if let Ok(Some(run)) = self.store.get_run(run_id).await
                            && terminal(run.state)
                        {
                            return Some(run.state.as_str().into());
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.ok().flatten()
    }
}
