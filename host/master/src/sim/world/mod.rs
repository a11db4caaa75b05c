//! The simulated cluster and its event loop.
//!
//! Everything that happens is an [`Event`] at a simulated time, taken from
//! one queue in (time, number) order: a master's step, a commit landing, a
//! message arriving, an attempt ending, the coordination service's round,
//! a fault. Nothing reads a real clock or iterates a hash map where order
//! matters, so a seed replays exactly.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use dagr_core::Workflow;
use dagr_core::definition::Format;
use dagr_protocol::commands::Command;
use dagr_protocol::plugins::TrustedCatalog;
use dagr_protocol::wire::{
    Ack, AttemptKey, AttemptResult, AttemptSpec, FailureKind, Outcome, ResourceAnswer, ResourceRequest,
};
use dagr_store::{RunKind, RunOrigin, WriteBatch};

use crate::engine::testkit::{FakePlugins, FakeStore, Reader, TENANT};
use crate::engine::{Accepted, Data, Effects, EngineState, Input, Probe, WorkerInfo};
use crate::sim::check::{Checker, Limited};
use crate::sim::{Failure, Report, Rng, SimConfig};
use crate::{Adoption, DispatchError, EngineConfig};

mod coord;
mod masters;
mod network;
pub(super) mod outer;
mod resources;
mod workers;

/// The simulated epoch (2023-11-14).
pub(super) const START: i64 = 1_700_000_000_000;
/// A master steps at least this often.
const POLL_MS: i64 = 200;
/// The coordination service's round.
const COORD_MS: i64 = 100;
/// An unanswered dispatch or probe fails after this long.
const HTTP_TIMEOUT_MS: i64 = 2_000;
/// Stale results a worker keeps (the real one: `dagr_worker`'s
/// `STALE_RESULTS_KEPT`).
const STALE_KEPT: usize = 3;
/// A run made after the faults stopped must have ended within this.
const STUCK_MS: i64 = 30_000;
/// Commands a step reads at most.
const COMMAND_PAGE: usize = 100;

const CHAIN: &str = "name: chain
tasks:
- {name: a, plugin: echo}
- {name: b, plugin: echo, depends_on: [a], retries: 2}
- {name: c, plugin: echo, depends_on: [a]}
- {name: d, plugin: echo, depends_on: [b, c], retries: 1}
";

/// Runs one at a time (a third of the runs triggered): admission holds
/// the rest queued, whichever master drives them.
/// The backfill some runs of `chain` belong to, and its parallelism.
const BACKFILL: &str = "bf";
const BACKFILL_PARALLEL: usize = 2;

const SINGLE: &str = "name: single
max_active_runs: 1
tasks:
- {name: a, plugin: echo}
- {name: b, plugin: echo, depends_on: [a]}
";

/// The capped tenant and its workflow: four tasks at once, then one.
const CAPPED: &str = "capped";
const FAN: &str = "name: fan
tasks:
- {name: a, plugin: echo}
- {name: b, plugin: echo}
- {name: c, plugin: echo}
- {name: d, plugin: echo}
- {name: e, plugin: echo, depends_on: [a, b, c, d]}
";

/// A workflow of the first tenant whose four parallel tasks may run only
/// two at a time ([`crate::sim::WIDE_CONCURRENCY`]).
const WIDE: &str = "wide";
/// `wide` after its `concurrency: N` line.
const WIDE_TASKS: &str = "tasks:
- {name: a, plugin: echo}
- {name: b, plugin: echo, retries: 1}
- {name: c, plugin: echo}
- {name: d, plugin: echo}
- {name: e, plugin: echo, depends_on: [a, b, c, d]}
";

const TICKING: &str = "name: ticking
schedule: {cron: \"*/2 * * * * *\"}
tasks:
- {name: x, plugin: echo}
- {name: y, plugin: echo, depends_on: [x]}
";

#[derive(Debug)]
enum Event {
    Tick(usize),
    /// A master's commit lands (its incarnation).
    Commit(usize, u32),
    Deliver(Msg),
    /// An attempt ends on a worker (its incarnation).
    Finish(usize, u32, AttemptKey),
    /// A worker sends its unacknowledged results again.
    Resend(usize, u32),
    Coord,
    Faults,
    RestartMaster(usize),
    RestartWorker(usize),
    Resume(usize),
    ResumeWorker(usize),
    /// A resumed worker notices that its lease is gone.
    FenceWorker(usize),
    EtcdUp,
    Trigger,
    /// The second run of an outer DAG's pair is made (a run of this
    /// workflow), for this logical time, with the number of the trigger
    /// that made the first.
    Pair {
        workflow: &'static str,
        logical: i64,
        number: usize,
    },
    /// An operator's command for a run, written as the API writes it.
    Operate(String, Command),
}

#[derive(Debug)]
enum Msg {
    /// `late`: the master's call timed out already; its answer goes nowhere.
    /// `deadline`: when the master's call times out (request and answer).
    Dispatch {
        master: usize,
        m_inc: u32,
        worker: usize,
        specs: Vec<AttemptSpec>,
        late: bool,
        deadline: i64,
    },
    Dispatched {
        master: usize,
        m_inc: u32,
        worker: String,
        sent: Vec<(AttemptKey, i64, String)>,
        answer: Answer,
        deadline: i64,
    },
    Result {
        master: usize,
        m_inc: u32,
        worker: usize,
        w_inc: u32,
        result: AttemptResult,
    },
    Acked {
        worker: usize,
        w_inc: u32,
        key: AttemptKey,
        ack: Ack,
    },
    Cancel {
        worker: usize,
        key: AttemptKey,
    },
    Probe {
        master: usize,
        m_inc: u32,
        worker: usize,
        probe: Probe,
    },
    Probed {
        master: usize,
        m_inc: u32,
        probe: Probe,
        adoption: Adoption,
    },
    /// A master's exchange with the resource leader, and its answer.
    Resources {
        master: usize,
        m_inc: u32,
        request: ResourceRequest,
    },
    Granted {
        master: usize,
        m_inc: u32,
        answer: Result<ResourceAnswer, String>,
    },
}

type Answer = Result<Accepted, DispatchError>;

/// A master: the engine's state and what its shell holds.
struct Master {
    id: String,
    config: EngineConfig,
    state: Option<EngineState>,
    incarnation: u32,
    paused: bool,
    lease_until: i64,
    /// Its lease ran out: it gives up its slots before it may join again
    /// (as the real node does when its coordinator says so).
    lease_lost: bool,
    /// It gave its slots up and asks for a new lease.
    joining: bool,
    inbox: Vec<Input>,
    /// A step whose commit has not landed yet.
    committing: Option<Effects>,
    /// Who waits for each ack: (worker, its incarnation, the attempt).
    acks: BTreeMap<u64, (usize, u32, AttemptKey)>,
    next_ack: u64,
    told_slots: Option<BTreeSet<u32>>,
    told_lead: Option<Option<i64>>,
    told_workers: Option<Vec<String>>,
    /// The workers' leases in the last membership it was told.
    told_leases: Option<BTreeMap<String, u32>>,
    /// The membership it acts on (its watch's snapshot), and until when
    /// the watch lags behind the coordination service's: `coord::View`.
    seen: Option<coord::View>,
    lags_until: Option<i64>,
    /// It woke from a freeze or joined again since it was last told the
    /// membership: its watch is the likelier to lag.
    woke: bool,
    tick_at: Option<i64>,
}

/// An attempt on a worker: its spec, and whom and with which epoch it
/// reports (changed by adoption).
struct Running {
    spec: AttemptSpec,
    epoch: i64,
    master: String,
}

struct Worker {
    id: String,
    alive: bool,
    /// Frozen (SIGSTOP): what reaches it waits in `held` until it resumes.
    paused: bool,
    held: Vec<Event>,
    incarnation: u32,
    lease_until: i64,
    /// Its lease: a new one each time it gets one after the last expired.
    lease: u32,
    running: BTreeMap<AttemptKey, Running>,
    /// Results not yet acknowledged, with the master they go to first.
    outbox: BTreeMap<AttemptKey, (AttemptResult, String)>,
    /// Attempts it told a master it does not know: refused if their
    /// dispatch arrives after all (the real worker's tombstones).
    disowned: BTreeSet<AttemptKey>,
    /// Results acknowledged as stale, the newest [`STALE_KEPT`] (the real
    /// worker keeps thousands; few here, so that some leave): given to a
    /// master that asks about their attempts.
    stale: VecDeque<AttemptResult>,
    /// Attempts whose stale results left `stale`: it cannot vouch that
    /// these never reached it (it vouches for every other attempt it
    /// neither runs nor holds a result of).
    dropped: BTreeSet<AttemptKey>,
    /// Its resend round is scheduled (one per worker incarnation).
    resending: bool,
}

pub(crate) struct World {
    seed: u64,
    config: SimConfig,
    rng: Rng,
    now: i64,
    queue: BinaryHeap<Reverse<(i64, u64)>>,
    events: BTreeMap<u64, Event>,
    next_event: u64,
    store: FakeStore,
    plugins: FakePlugins,
    masters: Vec<Master>,
    workers: Vec<Worker>,
    etcd_up: bool,
    leader: Option<(usize, i64)>,
    term: i64,
    /// The resource leader's book (when the leader schedules resources).
    book: Option<crate::resources::ResourceBook>,
    triggered: usize,
    /// Runs of outer DAG pairs not made yet (the second of a pair).
    pairing: usize,
    checker: Checker,
    report: Report,
    trace: Option<VecDeque<String>>,
}

impl World {
    pub(crate) fn new(seed: u64, config: SimConfig) -> World {
        let masters = (0..config.masters)
            .map(|i| {
                let id = format!("m{}", i + 1);
                let engine = EngineConfig {
                    node_id: id.clone(),
                    fence_writes: true,
                    attempt_check: Some(Duration::from_secs(5)),
                    max_in_flight: 1_000,
                    resources: config.resources,
                    // One a step: a takeover's waiting runs are woken over
                    // as many steps as there are, with faults between them.
                    takeover_wakes_per_step: 1,
                    ..EngineConfig::default()
                };
                Master {
                    id,
                    config: engine,
                    state: None,
                    incarnation: 0,
                    paused: false,
                    lease_until: 0,
                    lease_lost: false,
                    joining: false,
                    inbox: Vec::new(),
                    committing: None,
                    acks: BTreeMap::new(),
                    next_ack: 0,
                    told_slots: None,
                    told_lead: None,
                    told_workers: None,
                    told_leases: None,
                    seen: None,
                    lags_until: None,
                    woke: false,
                    tick_at: None,
                }
            })
            .collect();
        let workers = (0..config.workers)
            .map(|i| Worker {
                id: format!("w{}", i + 1),
                alive: true,
                paused: false,
                held: Vec::new(),
                incarnation: 0,
                lease_until: 0,
                lease: 1,
                running: BTreeMap::new(),
                outbox: BTreeMap::new(),
                disowned: BTreeSet::new(),
                stale: VecDeque::new(),
                dropped: BTreeSet::new(),
                resending: false,
            })
            .collect();
        let trace = config.full_trace.then(VecDeque::new);
        World {
            seed,
            rng: Rng::new(seed),
            now: START,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            next_event: 0,
            store: FakeStore::default(),
            plugins: FakePlugins::default(),
            masters,
            workers,
            etcd_up: true,
            leader: None,
            term: 0,
            book: None,
            triggered: 0,
            pairing: 0,
            checker: Checker::default(),
            report: Report { seed, ..Report::default() },
            trace,
            config,
        }
    }

    /// One simulation, as it goes (with the trace if the config keeps it).
    pub(crate) fn simulate_once(&mut self) -> Result<Report, Failure> {
        match self.simulate() {
            Ok(()) => Ok(self.report.clone()),
            Err(invariant) => Err(self.failure(invariant)),
        }
    }

    pub(crate) fn keep_journal(&mut self) {
        self.store.journal = Some(Vec::new());
    }

    pub(crate) fn into_store(self) -> FakeStore {
        self.store
    }

    pub(crate) fn trace_lines(&self) -> Vec<String> {
        self.trace.iter().flatten().cloned().collect()
    }

    fn failure(&self, invariant: String) -> Failure {
        Failure { seed: self.seed, at_ms: self.now - START, invariant, trace: self.trace_lines() }
    }

    fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = &mut self.trace {
            trace.push_back(format!("[{:>6} ms] {}", self.now - START, line()));
        }
    }

    fn schedule(&mut self, at: i64, event: Event) {
        self.next_event += 1;
        self.queue.push(Reverse((at.max(self.now), self.next_event)));
        self.events.insert(self.next_event, event);
    }

    fn simulate(&mut self) -> Result<(), String> {
        self.setup()?;
        let faults_end = START + self.config.faults_for_ms;
        let deadline = faults_end + self.config.settle_ms;
        let mut healed = false;
        while let Some(Reverse((at, n))) = self.queue.pop() {
            let Some(event) = self.events.remove(&n) else { continue };
            self.now = at;
            self.report.path = mix(self.report.path, at as u64 ^ n.rotate_left(17));
            if !healed && self.now >= faults_end {
                healed = true;
                self.heal();
            }
            self.handle(event)?;
            self.checker.broken()?;
            if healed && self.config.gates {
                self.timeouts_come()?;
            }
            if healed && self.all_finished() {
                break;
            }
            if self.now > deadline {
                return Err(format!(
                    "runs not finished {} ms after the faults stopped: {}",
                    self.config.settle_ms,
                    self.unfinished().join(", ")
                ));
            }
        }
        if !self.all_finished() {
            return Err(format!("the simulation stalled with runs unfinished: {}", self.unfinished().join(", ")));
        }
        if let Some(stuck) =
            self.store.runs.values().find(|r| !r.state.is_terminal() && self.now - r.created_at > STUCK_MS)
        {
            return Err(format!(
                "run {} ({}) is still {:?} {} ms after it was made",
                stuck.id,
                stuck.workflow,
                stuck.state,
                self.now - stuck.created_at
            ));
        }
        self.checker.at_end(&self.store)?;
        self.report.sim_ms = self.now - START;
        self.report.runs = self.store.runs.len();
        self.report.attempts = self.store.attempts.len();
        Ok(())
    }

    fn setup(&mut self) -> Result<(), String> {
        self.store.backfills.insert(BACKFILL.to_owned(), BACKFILL_PARALLEL);
        let capped = self.config.capped_tenant.then_some((CAPPED, FAN));
        let wide_yaml = format!("name: {WIDE}\nconcurrency: {}\n{WIDE_TASKS}", crate::sim::WIDE_CONCURRENCY);
        let wide = self.config.workflow_concurrency.then_some((TENANT, wide_yaml.as_str()));
        let outer = self
            .config
            .outer
            .then_some([(TENANT, outer::DOWN), (TENANT, outer::PARENT), (TENANT, outer::LEAF)])
            .into_iter()
            .flatten();
        let up = (self.config.outer || self.config.gates).then_some((TENANT, outer::UP));
        let gate = self.config.gates.then_some((TENANT, outer::GATE_YAML));
        let workflows = [(TENANT, CHAIN), (TENANT, SINGLE), (TENANT, TICKING)]
            .into_iter()
            .chain(capped)
            .chain(wide)
            .chain(up)
            .chain(outer)
            .chain(gate);
        for (tenant, yaml) in workflows {
            let spec = dagr_core::WorkflowSpec::parse(yaml, Format::Yaml)
                .map_err(|e| format!("the simulation's workflow does not parse: {e}"))?;
            let workflow = Arc::new(
                Workflow::validate(spec, &TrustedCatalog)
                    .map_err(|e| format!("the simulation's workflow is not valid: {e}"))?,
            );
            self.store.workflows.insert((tenant.to_owned(), workflow.name().to_owned()), (1, workflow, None));
        }
        for i in 0..self.masters.len() {
            self.start_master(i);
        }
        for w in &mut self.workers {
            w.lease_until = START + self.config.lease_ttl_ms;
        }
        self.schedule(self.now, Event::Coord);
        self.schedule(self.now + 1_000, Event::Faults);
        for _ in 0..self.config.runs {
            let at = self.now + self.rng.between(0, self.config.faults_for_ms / 2);
            self.schedule(at, Event::Trigger);
        }
        Ok(())
    }

    fn start_master(&mut self, i: usize) {
        let m = &mut self.masters[i];
        m.incarnation += 1;
        m.state = Some(EngineState::new(&m.config, self.now));
        m.paused = false;
        // A new process registers with etcd before it acts: while etcd is
        // down it is no member, and joins at the first round etcd answers.
        m.joining = !self.etcd_up;
        m.lease_until = if self.etcd_up { self.now + self.config.lease_ttl_ms } else { self.now - 1 };
        m.lease_lost = false;
        m.inbox.clear();
        m.committing = None;
        m.acks.clear();
        m.told_slots = None;
        m.told_lead = None;
        m.told_workers = None;
        m.told_leases = None;
        // A new process reads the membership whole before it watches it.
        m.seen = None;
        m.lags_until = None;
        m.woke = false;
        m.tick_at = None;
        self.wake(i, self.now + 1);
    }

    /// Makes master `i` step at `at` (or earlier, if it already will).
    fn wake(&mut self, i: usize, at: i64) {
        let m = &mut self.masters[i];
        if m.tick_at.is_some_and(|t| t <= at) {
            return;
        }
        m.tick_at = Some(at);
        self.schedule(at, Event::Tick(i));
    }

    fn heal(&mut self) {
        self.note(|| "faults stop: every node restarts or resumes, etcd is up".into());
        self.config.faults = crate::sim::FaultMix::none();
        self.etcd_up = true;
        for i in 0..self.masters.len() {
            if self.masters[i].state.is_none() {
                self.start_master(i);
            } else if self.masters[i].paused {
                self.resume(i);
            }
        }
        for i in 0..self.workers.len() {
            if !self.workers[i].alive {
                self.restart_worker(i);
            } else if self.workers[i].paused {
                self.resume_worker(i);
            }
        }
    }

    /// Every run made while faults lasted has ended (the schedule goes on
    /// making runs; those must not be stuck either: [`STUCK_MS`]).
    fn all_finished(&self) -> bool {
        let faults_end = START + self.config.faults_for_ms;
        self.triggered == self.config.runs
            && self.pairing == 0
            && self.store.runs.values().filter(|r| r.created_at <= faults_end).all(|r| r.state.is_terminal())
    }

    fn unfinished(&self) -> Vec<String> {
        let faults_end = START + self.config.faults_for_ms;
        self.store
            .runs
            .values()
            .filter(|r| !r.state.is_terminal() && r.created_at <= faults_end)
            .map(|r| {
                let held: Vec<String> = self
                    .masters
                    .iter()
                    .filter_map(|m| Some(format!("{}: {}", m.id, m.state.as_ref()?.describe_run(&r.id)?)))
                    .collect();
                let commands: Vec<String> = self
                    .store
                    .commands
                    .iter()
                    .filter(|(_, run, _)| *run == r.id)
                    .map(|(id, _, c)| {
                        let done = self.store.done.get(id).map_or("pending", String::as_str);
                        format!("#{id} {} ({done})", c.kind())
                    })
                    .collect();
                format!(
                    "{} ({} {:?}, epoch {}, owner {:?}; held by {}; commands {})",
                    r.id,
                    r.workflow,
                    r.state,
                    r.epoch,
                    r.owner,
                    if held.is_empty() { "no master".to_owned() } else { held.join("; ") },
                    commands.join(", ")
                )
            })
            .collect()
    }

    /// The worker an event acts on, if any.
    fn worker_of(event: &Event) -> Option<usize> {
        match event {
            Event::Finish(w, _, _) | Event::Resend(w, _) => Some(*w),
            Event::Deliver(
                Msg::Dispatch { worker, .. }
                | Msg::Acked { worker, .. }
                | Msg::Cancel { worker, .. }
                | Msg::Probe { worker, .. },
            ) => Some(*worker),
            _ => None,
        }
    }

    fn handle(&mut self, event: Event) -> Result<(), String> {
        if let Some(w) = Self::worker_of(&event)
            && self.workers[w].paused
        {
            // A call to a frozen worker times out at the caller; the
            // request is still there when the worker wakes up.
            let event = match event {
                Event::Deliver(Msg::Dispatch { master, m_inc, worker, specs, late: false, deadline }) => {
                    Event::Deliver(self.outlive_call(master, m_inc, worker, specs, deadline))
                }
                Event::Deliver(probe @ Msg::Probe { .. }) => {
                    self.time_out(probe);
                    return Ok(());
                }
                other => other,
            };
            self.workers[w].held.push(event);
            return Ok(());
        }
        match event {
            Event::Tick(i) => {
                self.masters[i].tick_at = None;
                self.tick(i)?;
            }
            Event::Commit(i, inc) => self.land(i, inc)?,
            Event::Deliver(msg) => self.deliver(msg),
            Event::Finish(w, inc, key) => self.finish(w, inc, key),
            Event::Resend(w, inc) => self.resend(w, inc),
            Event::Coord => self.coordinate(),
            Event::Faults => self.faults()?,
            Event::RestartMaster(i) => {
                if self.masters[i].state.is_none() {
                    self.note(|| format!("m{} restarts", i + 1));
                    self.start_master(i);
                }
            }
            Event::RestartWorker(w) => self.restart_worker(w),
            Event::Resume(i) => self.resume(i),
            Event::ResumeWorker(w) => self.resume_worker(w),
            Event::FenceWorker(w) => {
                if self.workers[w].alive && !self.workers[w].paused {
                    self.abandon_all(w);
                    self.renew_worker_lease(w);
                }
            }
            Event::EtcdUp => {
                self.note(|| "etcd is back".into());
                self.etcd_up = true;
            }
            Event::Trigger => self.trigger(),
            Event::Pair { workflow, logical, number } => self.pair_second(workflow, logical, number),
            Event::Operate(run, command) => {
                self.note(|| format!("operator: {} {run}", command.kind()));
                self.store.command(&run, command);
            }
        }
        Ok(())
    }

    fn trigger(&mut self) {
        if self.config.outer && self.triggered.is_multiple_of(4) {
            self.pair_first(crate::sim::DOWNSTREAM);
            return;
        }
        if self.config.gates && self.triggered % 4 == 3 {
            self.pair_first(crate::sim::GATE);
            return;
        }
        let capped = self.config.capped_tenant && self.triggered % 4 == 3;
        let wide = self.config.workflow_concurrency && self.triggered % 4 == 1;
        let parent = self.config.outer && self.triggered % 4 == 2;
        let (tenant, name) = match (capped, wide, self.triggered % 3) {
            (true, _, _) => (CAPPED, "fan"),
            (_, true, _) => (TENANT, WIDE),
            _ if parent => (TENANT, crate::sim::PARENT),
            (false, false, 2) => (TENANT, "single"),
            (false, false, _) => (TENANT, "chain"),
        };
        // Every third run is part of a backfill of `chain` with a
        // parallelism of its own.
        let backfill = (name == "chain" && self.triggered % 3 == 1).then(|| BACKFILL.to_owned());
        let id = format!("{:016x}-{:04}-0000", self.seed, self.triggered);
        let Some(id) = self.make_run(tenant, name, id, self.now, backfill, capped) else { return };
        self.triggered += 1;
        self.note(|| format!("run {id} triggered"));
        self.operate_on(&id);
    }

    /// Makes a run of `name` as the API does, with an id from the seed
    /// (the real one is random), put in its workflow's slot as the store
    /// puts a real one: its slot follows from the id, as the store makes
    /// it (the engine finds a run's slot from its id alone: a claim it
    /// asked for, a worker's result). Returns the id it got.
    fn make_run(
        &mut self,
        tenant: &str,
        name: &str,
        id: String,
        logical_time: i64,
        backfill: Option<String>,
        capped: bool,
    ) -> Option<String> {
        let (_, workflow, _) = self.store.workflows.get(&(tenant.to_owned(), name.to_owned())).cloned()?;
        let origin = RunOrigin {
            tenant: tenant.into(),
            version: Some(1),
            kind: if backfill.is_some() { RunKind::Backfill } else { RunKind::Manual },
            logical_time,
            params: "{}".into(),
            spec: None,
            backfill_id: backfill,
            parent: None,
            tenant_capped: capped,
        };
        let together = dagr_store::together_in(&workflow, &origin);
        let mut new = dagr_store::NewRun::new(&workflow, origin, self.now);
        new.run.id = together.and_then(|slot| dagr_core::slots::id_in_slot(&id, slot)).unwrap_or(id);
        new.run.slot = i64::from(dagr_protocol::slot_of(&new.run.id));
        let id = new.run.id.clone();
        self.store.create_run(new);
        Some(id)
    }

    /// Now and then, an operator acts on a run while it goes: kills it,
    /// pauses and resumes it, marks it failed, reruns what failed, or
    /// forces a task's success.
    fn operate_on(&mut self, id: &str) {
        if !self.rng.chance(self.config.operator) {
            return;
        }
        let at = self.now + self.rng.between(50, 5_000);
        // An upstream run of the outer DAG is rerun with what it released
        // (re-flushed: they wait for it again).
        let downstream = self.store.runs.get(id).is_some_and(|r| r.workflow == crate::sim::UPSTREAM);
        let (first, then) = match self.rng.pick(5) {
            0 => (Command::Kill, None),
            1 => (Command::Pause, Some(Command::Resume)),
            2 => (Command::MarkFailed, Some(Command::RerunFailed { downstream })),
            3 => (Command::ForceSuccess { task: "b".into() }, None),
            _ => (Command::RerunFailed { downstream }, None),
        };
        self.schedule(at, Event::Operate(id.to_owned(), first));
        if let Some(then) = then {
            let later = at + self.rng.between(100, 3_000);
            self.schedule(later, Event::Operate(id.to_owned(), then));
        }
    }
}

/// Folds a number into a hash (FNV-1a over its bytes).
fn mix(hash: u64, value: u64) -> u64 {
    let mut h = if hash == 0 { 0xcbf2_9ce4_8422_2325 } else { hash };
    for byte in value.to_le_bytes() {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
