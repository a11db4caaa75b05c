//! The async shell around [`EngineState`]: it gathers inputs, reads what
//! the state needs, steps it, commits, and only then acts.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use dagr_core::{RunState, Workflow};
use dagr_protocol::commands::Command;
use dagr_protocol::now_ms;
use dagr_protocol::plugins::{PluginDirectory, stored_workflow};
use dagr_protocol::wire::{Ack, AttemptSpec};
use dagr_store::{AttemptRow, Committed, RunRow, Store, TaskRow};
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::engine::SCHEDULER;
use crate::engine::effects::{
    Data, Effects, Input, LoadError, LoadedRun, Need, PendingCommand, ScheduleRow, ScheduleSource,
};
use crate::engine::state::{EngineState, MAX_PASSES};
use crate::{EngineConfig, EngineHandle, EngineMetrics, Message, TenantPolicy, Transport};

/// Messages handled per step at most, so that one step's batch stays bounded.
const MAX_MESSAGES_PER_STEP: usize = 8192;
/// Commands read per step at most.
const COMMAND_PAGE: i64 = 256;
/// A stored definition longer than this is validated on a blocking thread
/// (one of 100,000 tasks takes most of a second).
const INLINE_VALIDATE_BYTES: usize = 64 << 10;

/// A command as the engine reads it.
fn pending(row: dagr_store::CommandRow) -> PendingCommand {
    PendingCommand {
        id: row.id,
        slot: row.slot as u32,
        command: Command::decode(&row.command.kind, &row.command.payload).map_err(|e| e.to_string()),
        run_id: row.run_id,
    }
}

/// The engine. Built and started by [`Engine::start`].
pub struct Engine {
    config: EngineConfig,
    state: EngineState,
    store: Arc<dyn Store>,
    transport: Arc<dyn Transport>,
    plugins: Arc<dyn PluginDirectory>,
    policy: Arc<dyn TenantPolicy>,
    metrics: Arc<EngineMetrics>,
    rx: mpsc::UnboundedReceiver<Message>,
    /// Answers of dispatches, grants and probes, which arrive after their step.
    answers_tx: mpsc::UnboundedSender<Input>,
    answers_rx: mpsc::UnboundedReceiver<Input>,
    commands_tx: broadcast::Sender<(i64, dagr_protocol::control::CommandOutcome)>,
    finished_tx: broadcast::Sender<(String, String)>,
    events_tx: tokio::sync::watch::Sender<u64>,
    /// Dispatch requests not yet answered, by worker.
    in_flight: super::in_flight::InFlight,
    /// Whoever waits for the verdict on a worker's result.
    acks: HashMap<u64, oneshot::Sender<Ack>>,
    next_ack: u64,
    limits_version: Option<u64>,
    /// The other masters, in a cluster.
    peers: Option<Arc<dyn dagr_protocol::control::Control>>,
}

impl Engine {
    /// Starts the engine loop. The engine drives nothing until it is told
    /// which slots it owns ([`EngineHandle::own_slots`]) and which workers
    /// exist ([`EngineHandle::workers`]); taking over a slot is also how
    /// it recovers after a restart.
    pub async fn start(
        config: EngineConfig,
        store: Arc<dyn Store>,
        transport: Arc<dyn Transport>,
        plugins: Arc<dyn PluginDirectory>,
    ) -> Result<EngineHandle, dagr_store::Error> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (answers_tx, answers_rx) = mpsc::unbounded_channel();
        let (commands_tx, _) = broadcast::channel(1024);
        let (finished_tx, _) = broadcast::channel(4096);
        let (events_tx, _) = tokio::sync::watch::channel(0u64);
        let metrics = Arc::new(EngineMetrics::default());
        crate::metrics::register(&metrics);
        let handle = EngineHandle {
            tx,
            commands: commands_tx.clone(),
            finished: finished_tx.clone(),
            events: events_tx.clone(),
            store: store.clone(),
            metrics: metrics.clone(),
            plugins: plugins.clone(),
        };
        let engine = Engine {
            state: EngineState::new(&config, now_ms()),
            policy: config.policy.clone(),
            config,
            store,
            transport,
            plugins,
            metrics,
            rx,
            answers_tx,
            answers_rx,
            commands_tx,
            finished_tx,
            events_tx,
            in_flight: Default::default(),
            acks: HashMap::new(),
            next_ack: 0,
            limits_version: None,
            peers: None,
        };
        tokio::spawn(engine.run());
        Ok(handle)
    }

    async fn run(mut self) {
        let mut poll = tokio::time::interval(self.config.poll_interval);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut read_commands = false;
        loop {
            let mut messages: Vec<Message> = Vec::new();
            let mut inputs: Vec<Input> = Vec::new();
            let mut wake = read_commands;
            // A backlog of task changes (a burst past a step's budget)
            // goes on at once, before anything new is waited for.
            if inputs.is_empty() && !wake && !self.state.has_backlog() {
                let next = self.state.next_wake(now_ms());
                let sleep_for = next.map(|at| Duration::from_millis((at - now_ms()).max(0) as u64));
                tokio::select! {
                    message = self.rx.recv() => match message {
                        Some(message) => messages.push(message),
                        None => return,
                    },
                    answer = self.answers_rx.recv() => inputs.extend(answer),
                    _ = poll.tick() => {
                        wake = true;
                        self.state.restart_command_scan();
                    }
                    _ = async {
                        match sleep_for {
                            Some(d) => tokio::time::sleep(d).await,
                            None => std::future::pending().await,
                        }
                    } => {}
                }
            }
            while messages.len() < MAX_MESSAGES_PER_STEP {
                match self.rx.try_recv() {
                    Ok(message) => messages.push(message),
                    Err(_) => break,
                }
            }
            while let Ok(answer) = self.answers_rx.try_recv() {
                inputs.push(answer);
            }
            let mut shutdown = None;
            for message in messages {
                match message {
                    Message::Wake => wake = true,
                    Message::Result(result, waiter) => {
                        let ack = waiter.map(|w| {
                            self.next_ack += 1;
                            self.acks.insert(self.next_ack, w);
                            self.next_ack
                        });
                        inputs.push(Input::Result { result, ack });
                    }
                    Message::WorkflowChanged { tenant, name } => inputs.push(Input::WorkflowChanged { tenant, name }),
                    Message::TenantChanged => self.policy.changed(),
                    Message::Ownership(slots) => inputs.push(Input::Ownership(slots)),
                    Message::Leadership(token) => inputs.push(Input::Leadership(token)),
                    Message::Workers(workers) => inputs.push(Input::Workers(workers)),
                    Message::Shutdown(reply) => shutdown = Some(reply),
                    Message::Peers(peers) => self.peers = Some(peers),
                }
            }
            let mut page_full = false;
            if wake {
                match self.store.pending_commands(self.state.command_cursor(), COMMAND_PAGE).await {
                    Ok(rows) => {
                        page_full = rows.len() as i64 == COMMAND_PAGE;
                        let commands = rows.into_iter().map(pending).collect::<Vec<_>>();
                        if !commands.is_empty() {
                            inputs.push(Input::Commands(commands));
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot read commands; will retry"),
                }
            }
            let effects = self.step(inputs).await;
            read_commands = page_full || effects.read_commands;
            self.publish_metrics();
            if let Some(reply) = shutdown {
                let _ = reply.send(());
                return;
            }
        }
    }

    /// One step: the passes, the commit, the effects.
    async fn step(&mut self, inputs: Vec<Input>) -> Effects {
        let now = now_ms();
        // Each result a worker reported, in its attempt's trace, until the
        // step that records it has committed and acted.
        let _results: Vec<tracing::Span> = if dagr_telemetry::enabled() {
            inputs
                .iter()
                .filter_map(|input| match input {
                    Input::Result { result, .. } => Some(result_span(result)),
                    _ => None,
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut effects = Effects::default();
        self.state.begin(&mut effects);
        let mut data = Data { tenant_limits: self.limits_changed(), ..Data::default() };
        let mut inputs = inputs;
        for pass in 0..MAX_PASSES {
            self.state.step(&mut effects, std::mem::take(&mut inputs), data, self.plugins.as_ref(), now);
            let Some(needs) = self.state.needs_to_read(&mut effects, pass) else { break };
            data = self.read(needs, now).await;
            data.tenant_limits = self.limits_changed();
        }
        self.state.seal(&mut effects, now);
        let started = std::time::Instant::now();
        let committed = self.commit(&mut effects).await;
        if !effects.batch.is_empty() {
            crate::metrics::committed(&effects, started.elapsed());
        }
        self.state.committed(&committed);
        if !effects.batch.events.is_empty() {
            self.events_tx.send_modify(|n| *n = n.wrapping_add(1));
        }
        self.wake_peers(&effects);
        self.act(&mut effects, &committed).await;
        effects
    }

    /// Wakes the other masters if this step's commit wrote commands they
    /// may have to read: wake-ups (written by the store for whoever waits),
    /// or commands for runs of slots this master does not own.
    fn wake_peers(&self, effects: &Effects) {
        let Some(peers) = &self.peers else { return };
        let batch = &effects.batch;
        let foreign = |slot: i64| u32::try_from(slot).ok().is_none_or(|s| !self.state.owns(s));
        if (batch.wake_command.is_some() && !(batch.wakes.is_empty() && batch.wake_all.is_empty()))
            || batch.commands.iter().any(|c| foreign(c.slot))
            || batch.child_runs.iter().any(|r| foreign(r.run.slot))
        {
            peers.wake();
        }
    }

    /// Tenants' limits, if they changed since the last look.
    fn limits_changed(&mut self) -> Option<Arc<HashMap<String, crate::TenantLimits>>> {
        let (version, limits) = self.policy.snapshot()?;
        if self.limits_version == Some(version) {
            return None;
        }
        self.limits_version = Some(version);
        Some(limits)
    }

    /// Commits the step's writes, retrying until the store takes them:
    /// nothing of the step may act on state that is not durable.
    async fn commit(&mut self, effects: &mut Effects) -> Committed {
        if effects.batch.is_empty() {
            return Committed::default();
        }
        let mut delay = Duration::from_millis(50);
        loop {
            match self.store.commit(effects.batch.clone()).await {
                Ok(committed) => return committed,
                Err(e) => {
                    tracing::error!(error = %e, "cannot commit the engine step; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// What a committed step does: answers, dispatches, cancellations,
    /// probes, notifications.
    async fn act(&mut self, effects: &mut Effects, committed: &Committed) {
        let fenced = committed.dropped();
        for (ack, run, verdict) in effects.acks.drain(..) {
            if let Some(waiter) = self.acks.remove(&ack) {
                let _ = waiter.send(if fenced.contains(run.as_str()) { Ack::NotOwner } else { verdict });
            }
        }
        // One request per worker (cut if big), all workers at once.
        let mut by_worker: BTreeMap<String, Vec<AttemptSpec>> = BTreeMap::new();
        let mut spans = Vec::new();
        for (mut spec, worker) in effects.dispatches.drain(..) {
            if !fenced.contains(spec.key.run_id.as_str()) {
                if dagr_telemetry::enabled() {
                    let span = dispatch_span(&spec, &worker);
                    spec.trace = dagr_telemetry::traceparent(&span);
                    spans.push(span);
                }
                by_worker.entry(worker).or_default().push(spec);
            }
        }
        let requests: Vec<(String, Vec<AttemptSpec>)> = by_worker
            .into_iter()
            .flat_map(|(worker, specs)| {
                dagr_protocol::wire::batches(specs, AttemptSpec::payload_bytes)
                    .into_iter()
                    .map(move |batch| (worker.clone(), batch))
            })
            .collect();
        // Each request in a task of its own: the next step does not wait
        // for a worker's round trip (its answer is an input like any
        // other, and may come after the attempts' results: the state
        // machine takes them in any order, as the simulation delivers
        // them). The dispatch spans end when the last request does.
        // A cancellation or probe decided later waits for the requests in
        // flight to its worker (see `in_flight`).
        self.in_flight.tidy();
        let spans = Arc::new(spans);
        for (worker, specs) in requests {
            let (transport, answers, spans) = (self.transport.clone(), self.answers_tx.clone(), spans.clone());
            let sending = self.in_flight.send(&worker);
            tokio::spawn(async move {
                // What an answer needs; the specs themselves go without a copy.
                let sent = super::sent_of(&specs);
                let answer = transport.dispatch(specs, &worker).await;
                drop((spans, sending));
                let _ = answers.send(Input::Dispatched { worker, sent, answer });
            });
        }
        for (key, worker) in effects.cancels.drain(..) {
            let (transport, answered) = (self.transport.clone(), self.in_flight.answered(&worker));
            tokio::spawn(async move {
                answered.await;
                transport.cancel(&key, &worker).await
            });
        }
        if let Some(request) = effects.resources.take() {
            let (transport, answers) = (self.transport.clone(), self.answers_tx.clone());
            tokio::spawn(async move {
                let answer = transport.resources(request).await;
                let _ = answers.send(Input::Granted(answer));
            });
        }
        for probe in effects.probes.drain(..) {
            let (transport, answers) = (self.transport.clone(), self.answers_tx.clone());
            let answered = self.in_flight.answered(&probe.worker);
            tokio::spawn(async move {
                answered.await;
                let adoption = transport.adopt(&probe.key, &probe.worker, probe.epoch).await;
                let _ =
                    answers.send(Input::Probed { key: probe.key, worker: probe.worker, epoch: probe.epoch, adoption });
            });
        }
        for (run, state) in &effects.finished {
            if !fenced.contains(run.as_str()) {
                dagr_telemetry::run_ended(run, state.as_str());
                let _ = self.finished_tx.send((run.clone(), state.as_str().to_owned()));
            }
        }
        for reply in effects.replies.drain(..) {
            let _ = self.commands_tx.send(reply);
        }
    }

    fn publish_metrics(&self) {
        let c = self.state.counters();
        let m = &self.metrics;
        for (atomic, value) in [
            (&m.steps, c.steps),
            (&m.dispatched, c.dispatched),
            (&m.results, c.results),
            (&m.stale_results, c.stale_results),
            (&m.fenced_writes, c.fenced_writes),
            (&m.admissions_over_limit, c.over_limit),
            (&m.runs_handed_over, c.runs_handed_over),
            (&m.runs_finished, c.runs_finished),
            (&m.runs_claimed, c.runs_claimed),
            (&m.attempts_adopted, c.attempts_adopted),
            (&m.attempts_lost, c.attempts_lost),
            (&m.dispatch_refused, c.dispatch_refused),
            (&m.active_runs, self.state.active_runs() as u64),
            (&m.in_flight, self.state.in_flight() as u64),
            (&m.ready, self.state.ready_tasks() as u64),
        ] {
            atomic.store(value, Ordering::Relaxed);
        }
    }

    // Reading what the state needs --------------------------------------------

    async fn read(&mut self, needs: Vec<Need>, now: i64) -> Data {
        let mut data = Data::default();
        let mut claims: Vec<String> = Vec::new();
        let mut settled: Vec<dagr_store::CycleRange> = Vec::new();
        let mut upstream: Vec<dagr_store::CycleRange> = Vec::new();
        for need in needs {
            match need {
                Need::Settled(query) => settled.push(query),
                Need::Claim(runs) => claims.extend(runs),
                Need::Slots(slots) => self.read_slots(&mut data, slots, now).await,
                Need::Owners(slots) => {
                    let slots: Vec<i64> = slots.iter().map(|&s| s as i64).collect();
                    match self.store.active_runs_in_slots(&slots).await {
                        Ok(rows) => data.owners.extend(rows.into_iter().map(|r| (r.id, r.slot as u32, r.owner))),
                        Err(e) => tracing::warn!(error = %e, "cannot read the runs of owned slots"),
                    }
                }
                Need::Outputs { run, idxs } => match self.store.outputs(&run, &idxs).await {
                    Ok(rows) => {
                        let found: HashMap<i64, String> = rows.into_iter().collect();
                        let mut found = found;
                        data.outputs.extend(idxs.iter().map(|i| (run.clone(), *i, found.remove(i))));
                    }
                    Err(e) => tracing::warn!(run = %run, error = %e, "cannot read upstream outputs"),
                },
                Need::RefreshPlugins => {
                    self.plugins.refresh().await;
                    data.plugins_refreshed = true;
                }
                Need::Lead(token) => self.read_lead(&mut data, token, now).await,
                Need::Schedule { tenant, name } => match self.read_schedule(&tenant, &name).await {
                    Ok(source) => data.schedules.push(source),
                    Err(e) => tracing::warn!(workflow = %name, error = %e, "cannot reload the schedule"),
                },
                Need::WatchedBy { tenant, workflow } => match self.store.edges_from(&tenant, &[workflow]).await {
                    Ok(edges) => data.watched_add.extend(
                        edges.into_iter().filter(|e| e.kind == "upstream").map(|e| (e.tenant, e.upstream, e.task)),
                    ),
                    Err(e) => tracing::warn!(error = %e, "cannot read what a workflow waits for"),
                },
                Need::Commands => match self.store.pending_commands(0, COMMAND_PAGE).await {
                    Ok(rows) => data.commands = Some(rows.into_iter().map(pending).collect()),
                    Err(e) => tracing::warn!(error = %e, "cannot read commands again; will at the next step"),
                },
                Need::Watched => match self.store.watched().await {
                    Ok(watched) => data.watched = Some(watched),
                    Err(e) => tracing::warn!(error = %e, "cannot read which workflows are waited for"),
                },
                Need::Workflows { tenant, names } => {
                    for name in names {
                        match self.latest_workflow(&tenant, &name).await {
                            Ok(found) => data.workflows.push((tenant.clone(), name, found)),
                            Err(e) => tracing::warn!(workflow = %name, error = %e, "cannot read a workflow"),
                        }
                    }
                }
                Need::UpstreamRuns(query) => upstream.push(query),
                Need::ReleasedBy(run) => match self.store.released_by(&run).await {
                    Ok(released) => data.released.push((run, released)),
                    Err(e) => tracing::warn!(run = %run, error = %e, "cannot read the runs a run released"),
                },
            }
        }
        // Every range this step asks about, read together (a step that
        // wakes many waiting runs asks for many).
        if !upstream.is_empty() {
            match self.store.runs_in_ranges(&upstream).await {
                Ok(found) => data.upstream_runs.extend(upstream.into_iter().zip(found)),
                Err(e) => tracing::warn!(ranges = upstream.len(), error = %e, "cannot read upstream runs"),
            }
        }
        // Ranges read again after their waits committed: in one
        // transaction, after every unsettled read of this step (so that a
        // settled read of a range is the one the state keeps).
        if !settled.is_empty() {
            match self.store.runs_in_ranges_settled(&settled).await {
                Ok(found) => data.upstream_runs.extend(settled.into_iter().zip(found)),
                Err(e) => tracing::warn!(error = %e, "cannot read upstream runs again"),
            }
        }
        claims.sort();
        claims.dedup();
        // A run of a gained slot was claimed above: claiming it twice
        // would leave the state with the first claim's epoch.
        claims.retain(|id| !self.state.has_run(id) && !data.loaded.iter().any(|l| l.row.id == *id));
        if claims.len() > 1 {
            // Many at once (a backlog of admissions): one statement claims
            // them all, instead of a write transaction each.
            match self.store.claim_runs(&claims, &self.config.node_id, now).await {
                Ok(rows) => {
                    let mut known = self.read_claimed_together(&rows).await;
                    for row in rows {
                        let id = row.id.clone();
                        claims.retain(|c| *c != id);
                        let known = known.remove(&id);
                        match self.load_claimed(row, known).await {
                            Ok(loaded) => data.loaded.push(loaded),
                            Err(e) => data.failed.push((id, e)),
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot claim runs together; claiming them one by one"),
            }
        }
        // The rest one by one: what the batch did not find may be in cold
        // storage (a claim restores it first).
        for id in claims {
            match self.claim_and_load(&id, now).await {
                Ok(loaded) => data.loaded.push(loaded),
                Err(e) => data.failed.push((id, e)),
            }
        }
        data
    }

    /// The active runs of gained slots, claimed and loaded.
    async fn read_slots(&mut self, data: &mut Data, slots: Vec<u32>, now: i64) {
        let query: Vec<i64> = slots.iter().map(|&s| s as i64).collect();
        // The waiting runs are woken in a cluster only (`absorb_data`).
        let fenced = self.config.fence_writes;
        let read = async {
            let active = self.store.active_runs_in_slots(&query).await?;
            let waiting = if fenced { self.store.waiting_in_slots(&query).await? } else { Vec::new() };
            Ok::<_, dagr_store::Error>((active, waiting))
        };
        let (rows, waiting) = match read.await {
            Ok(read) => read,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the runs of gained slots; retrying");
                data.slots_failed.extend(slots);
                return;
            }
        };
        data.waiting.extend(waiting);
        for row in rows {
            if self.state.has_run(&row.id) || data.loaded.iter().any(|l| l.row.id == row.id) {
                continue;
            }
            let id = row.id.clone();
            match self.claim_and_load(&id, now).await {
                Ok(loaded) => data.loaded.push(loaded),
                Err(e) => data.failed.push((id, e)),
            }
        }
        data.gained.extend(slots);
    }

    /// Takes a run over (bumping its epoch, so that a previous owner can no
    /// longer write), then reads it as it is after the claim. A row read
    /// before the claim may be older than the task rows read after it (the
    /// previous owner may commit in between): a run still `queued` there,
    /// with tasks already running, would never dispatch them again.
    async fn claim_and_load(&mut self, id: &str, now: i64) -> Result<LoadedRun, LoadError> {
        let claim = |e: dagr_store::Error| LoadError::Transient(format!("cannot claim run {id}: {e}"));
        let mut row = self.store.claim_run(id, &self.config.node_id, now).await.map_err(claim)?;
        // A command for a run carried over to cold storage (one that came
        // while it moved) brings it back: the engine works on hot runs.
        if row.is_none() && self.store.restore_run(id, now).await.map_err(claim)? == dagr_store::Restored::Restored {
            row = self.store.claim_run(id, &self.config.node_id, now).await.map_err(claim)?;
        }
        let row = row.ok_or_else(|| LoadError::Gone(format!("there is no run {id}")))?;
        self.load_claimed(row, None).await
    }

    /// The task rows and running attempts of claimed runs that have them
    /// (see [`Self::load_claimed`]), read together: a step that claims
    /// many runs (a burst of waiting runs woken at once) reads two queries'
    /// worth, not two per run. Nothing if a read fails: each run is then
    /// read on its own.
    async fn read_claimed_together(&self, rows: &[RunRow]) -> HashMap<String, (Vec<TaskRow>, Vec<AttemptRow>)> {
        let ids: Vec<String> = rows.iter().filter(|r| !is_fresh(r)).map(|r| r.id.clone()).collect();
        if ids.len() < 2 {
            return HashMap::new();
        }
        let (tasks, running) = match (self.store.tasks_of_runs(&ids).await, self.store.running_attempts_of(&ids).await)
        {
            (Ok(tasks), Ok(running)) => (tasks, running),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(runs = ids.len(), error = %e, "cannot read claimed runs together; reading them one by one");
                return HashMap::new();
            }
        };
        let mut known: HashMap<String, (Vec<TaskRow>, Vec<AttemptRow>)> =
            ids.into_iter().zip(tasks).map(|(id, tasks)| (id, (tasks, Vec::new()))).collect();
        for attempt in running {
            if let Some((_, of_run)) = known.get_mut(&attempt.run_id) {
                of_run.push(attempt);
            }
        }
        // A run whose rows are not in the hot tables is read on its own.
        known.retain(|_, (tasks, _)| !tasks.is_empty());
        known
    }

    /// Reads what the engine needs of a run it has just claimed; `known`
    /// is its task rows and running attempts if already read.
    async fn load_claimed(
        &mut self,
        row: RunRow,
        known: Option<(Vec<TaskRow>, Vec<AttemptRow>)>,
    ) -> Result<LoadedRun, LoadError> {
        let id = row.id.clone();
        let id = id.as_str();
        self.policy.prepare(&row.tenant).await;
        let workflow = self.workflow_of(&row).await?;
        let transient = |e: dagr_store::Error| LoadError::Transient(format!("cannot read run {id}: {e}"));
        let (tasks, running) = match known {
            _ if is_fresh(&row) => (None, Vec::new()),
            Some((tasks, running)) => (Some(tasks), running),
            None => (
                Some(self.store.run_tasks(id).await.map_err(transient)?),
                self.store.running_attempts_of(&[id.to_owned()]).await.map_err(transient)?,
            ),
        };
        let backfill_parallel = match &row.backfill_id {
            Some(bf) => match self.store.get_backfill(bf).await {
                Ok(b) => b.map(|b| b.parallel.max(1) as usize),
                Err(e) => return Err(transient(e)),
            },
            None => None,
        };
        Ok(LoadedRun { row, tasks, workflow, backfill_parallel, running })
    }

    /// A run's workflow: its version (validated once, then kept), or a
    /// job's inline spec.
    async fn workflow_of(&mut self, row: &RunRow) -> Result<Arc<Workflow>, LoadError> {
        if let Some(version) = row.version
            && let Some(wf) = self.config.versions.get(&row.tenant, &row.workflow, version)
        {
            return Ok(wf);
        }
        let text = match (&row.spec, row.version) {
            (Some(spec), _) => spec.clone(),
            (None, Some(version)) => {
                self.store
                    .get_version(&row.tenant, &row.workflow, version)
                    .await
                    .map_err(|e| LoadError::Transient(e.to_string()))?
                    .ok_or_else(|| {
                        LoadError::Invalid(format!("workflow {} version {version} is missing", row.workflow))
                    })?
                    .spec
            }
            (None, None) => {
                return Err(LoadError::Invalid(format!("run {} has neither a workflow version nor a spec", row.id)));
            }
        };
        let workflow = Arc::new(validate(text).await.map_err(LoadError::Invalid)?);
        if let Some(version) = row.version {
            self.config.versions.insert(&row.tenant, &row.workflow, version, workflow.clone());
        }
        Ok(workflow)
    }

    /// A stored version, validated: from the cache, or validated now and kept.
    async fn version(
        &self,
        tenant: &str,
        name: &str,
        version: &dagr_store::VersionRow,
    ) -> Result<Arc<Workflow>, String> {
        if let Some(wf) = self.config.versions.get(tenant, name, version.version) {
            return Ok(wf);
        }
        let workflow = Arc::new(validate(version.spec.clone()).await?);
        self.config.versions.insert(tenant, name, version.version, workflow.clone());
        Ok(workflow)
    }

    /// The schedule of a live workflow's latest version (`None` if it does
    /// not load).
    async fn schedule_row(
        &self,
        row: &dagr_store::WorkflowRow,
        version: &dagr_store::VersionRow,
    ) -> Option<ScheduleRow> {
        match self.version(&row.tenant, &row.name, version).await {
            Ok(workflow) => Some(ScheduleRow {
                version: version.version,
                workflow,
                cursor: row.schedule_cursor,
                since: row.schedule_since.unwrap_or(row.created_at),
                paused: row.schedule_paused,
            }),
            Err(message) => {
                tracing::error!(workflow = %row.name, %message, "stored definition does not load");
                None
            }
        }
    }

    async fn read_lead(&mut self, data: &mut Data, token: i64, now: i64) {
        match self.store.acquire_singleton(SCHEDULER, &self.config.node_id, token, now).await {
            Ok(true) => match self.store.live_workflows().await {
                Ok(rows) => {
                    let mut schedules = Vec::with_capacity(rows.len());
                    for (row, version) in rows {
                        let current = self.schedule_row(&row, &version).await;
                        schedules.push(ScheduleSource { tenant: row.tenant, name: row.name, current });
                    }
                    data.lead = Some((token, Some(schedules)));
                }
                Err(e) => tracing::error!(error = %e, "cannot load schedules; will retry"),
            },
            Ok(false) => data.lead = Some((token, None)),
            Err(e) => tracing::error!(error = %e, "cannot record leadership; will retry"),
        }
    }

    /// A live workflow's latest version, validated (kept: versions never change).
    async fn latest_workflow(
        &mut self,
        tenant: &str,
        name: &str,
    ) -> Result<Option<(i64, Arc<Workflow>)>, dagr_store::Error> {
        let row = match self.store.get_workflow(tenant, name).await? {
            Some(row) if !row.deleted => row,
            _ => return Ok(None),
        };
        if let Some(wf) = self.config.versions.get(tenant, name, row.latest_version) {
            return Ok(Some((row.latest_version, wf)));
        }
        let Some(version) = self.store.get_version(tenant, name, row.latest_version).await? else { return Ok(None) };
        match self.version(tenant, name, &version).await {
            Ok(workflow) => Ok(Some((row.latest_version, workflow))),
            Err(message) => {
                tracing::error!(workflow = %name, %message, "stored definition does not load");
                Ok(None)
            }
        }
    }

    async fn read_schedule(&self, tenant: &str, name: &str) -> Result<ScheduleSource, dagr_store::Error> {
        let gone = ScheduleSource { tenant: tenant.into(), name: name.into(), current: None };
        let row = match self.store.get_workflow(tenant, name).await? {
            Some(row) if !row.deleted => row,
            _ => return Ok(gone),
        };
        Ok(match self.store.get_version(tenant, name, row.latest_version).await? {
            Some(version) => ScheduleSource { current: self.schedule_row(&row, &version).await, ..gone },
            None => gone,
        })
    }
}

/// Parses and validates a stored definition (a large one on a blocking
/// thread, so the engine's runtime is not held).
async fn validate(text: String) -> Result<Workflow, String> {
    if text.len() <= INLINE_VALIDATE_BYTES {
        return stored_workflow(&text);
    }
    tokio::task::spawn_blocking(move || stored_workflow(&text))
        .await
        .map_err(|e| format!("validating a stored definition: {e}"))?
}

/// The span of one attempt's dispatch, in its run's trace; the worker's
/// attempt span continues from it.
fn dispatch_span(spec: &AttemptSpec, worker: &str) -> tracing::Span {
    let span = tracing::info_span!(
        "dispatch",
        run = %spec.key.run_id,
        task = %spec.task_name,
        attempt = spec.key.number,
        worker = %worker,
        otel.kind = "producer",
    );
    dagr_telemetry::in_run(&span, &spec.key.run_id);
    span
}

/// The span of recording one attempt's result: a child of the worker's
/// attempt span (or of the run, for a result the master made itself).
fn result_span(result: &dagr_protocol::wire::AttemptResult) -> tracing::Span {
    let outcome = match &result.outcome {
        dagr_protocol::wire::Outcome::Succeeded { .. } => "succeeded",
        dagr_protocol::wire::Outcome::Failed { kind, .. } => kind.as_str(),
    };
    let span = tracing::info_span!(
        "result",
        run = %result.key.run_id,
        task = %result.task_name,
        attempt = result.key.number,
        outcome,
        otel.kind = "consumer",
    );
    match result.trace.as_deref() {
        Some(parent) => dagr_telemetry::follow(&span, Some(parent)),
        None => dagr_telemetry::in_run(&span, &result.key.run_id),
    }
    span
}

/// A queued run claimed for the first time (epoch 1) was never owned
/// before: only an owner writes task rows, so every task is still as the
/// run was created, pending. Its rows need not be read (10,000 rows of a
/// big fan-out are tens of ms before it starts).
fn is_fresh(row: &RunRow) -> bool {
    row.epoch == 1 && row.state == RunState::Queued
}
