//! The outer DAG in the simulation ([`SimConfig::outer`]): pairs of runs
//! of two workflows, the downstream one waiting for the upstream one of
//! its logical time, and runs whose task runs another workflow as a
//! child run. Either is made first, the other up to 3 s later, so
//! that a downstream run waits for an upstream run that does not exist
//! yet, or is judged while its upstream runs or after it ended; which
//! master owns which follows from their ids, so the upstream run's end
//! often wakes a run another master owns, through the store.
//!
//! With [`SimConfig::gates`] the upstream run's other half is a run of
//! [`GATE`]: one of its tasks waits for it (a task-level wait), another is
//! a sensor, and the run has a timeout shorter than many of its runs last.
//!
//! [`SimConfig::outer`]: crate::sim::SimConfig::outer
//! [`SimConfig::gates`]: crate::sim::SimConfig::gates

use dagr_store::RunState;

use crate::engine::testkit::TENANT;
use crate::sim::world::{Event, World};
use crate::sim::{DOWNSTREAM, GATE, UPSTREAM};

/// The upstream workflow (its second task can be forced, as the
/// operator's `force-success` names task `b`).
pub(super) const UP: &str = "name: up
tasks:
- {name: a, plugin: echo}
- {name: b, plugin: echo, depends_on: [a], retries: 1}
";

/// The downstream workflow: waits for the upstream run of its logical
/// time to end, whatever its end.
pub(super) const DOWN: &str = "name: down
upstream:
- {workflow: up, require: finished}
tasks:
- {name: a, plugin: echo}
- {name: b, plugin: echo, depends_on: [a]}
";

/// A workflow whose second task runs [`LEAF`] as a child run (holding no
/// worker while it waits for it).
pub(super) const PARENT: &str = "name: parent
tasks:
- {name: a, plugin: echo}
- {name: s, workflow: leaf, depends_on: [a]}
- {name: b, plugin: echo, depends_on: [s]}
";

pub(super) const LEAF: &str = "name: leaf
tasks:
- {name: a, plugin: echo}
- {name: b, plugin: echo, depends_on: [a], retries: 1}
";

/// A workflow whose task `w` waits for the upstream run of its logical
/// time (task-level), whose task `s` is a sensor (its first check finds
/// its condition not met: the simulated workers answer so), and whose runs
/// fail when unfinished 4 s after they started.
pub(super) const GATE_YAML: &str = "name: gate
timeout: 4s
tasks:
- {name: a, plugin: echo}
- {name: w, plugin: echo, depends_on: [a], upstream: [{workflow: up, require: finished}]}
- {name: s, plugin: echo, sensor: {interval: 1s, timeout: 3s}}
- {name: b, plugin: echo, depends_on: [w, s]}
";

/// The index of [`GATE_YAML`]'s task that waits upstream, and of its
/// sensor.
pub(crate) const GATE_WAITS: i64 = 1;
pub(crate) const GATE_SENSOR: i64 = 2;

/// A check of the gate's sensor finds its condition met from this attempt
/// on (the first does not).
pub(crate) const SENSOR_READY_FROM: i64 = 2;

/// The latest the second run of a pair is made after the first.
const PAIR_GAP_MS: i64 = 3_000;

impl World {
    /// Makes the first run of a pair of [`UPSTREAM`] and `downstream` (a
    /// run of [`DOWNSTREAM`] or [`GATE`]), at a logical time no other pair
    /// has, and schedules the second.
    pub(super) fn pair_first(&mut self, downstream: &'static str) {
        let mut logical = self.now;
        let paired =
            |workflow: &str| workflow == DOWNSTREAM || (self.config.gates && [UPSTREAM, GATE].contains(&workflow));
        while self.store.runs.values().any(|r| paired(&r.workflow) && r.logical_time == logical) {
            logical += 1;
        }
        let upstream_first = self.rng.chance(0.5);
        let number = self.triggered;
        let first = if upstream_first { UPSTREAM } else { downstream };
        let Some(id) = self.make_pair_run(first, logical, number) else { return };
        self.triggered += 1;
        self.pairing += 1;
        let at = self.now + self.rng.between(0, PAIR_GAP_MS);
        let second = if upstream_first { downstream } else { UPSTREAM };
        self.schedule(at, Event::Pair { workflow: second, logical, number });
        self.note(|| format!("run {id} triggered (first of a pair)"));
        self.operate_on(&id);
    }

    /// Makes the second run of a pair.
    pub(super) fn pair_second(&mut self, workflow: &str, logical: i64, number: usize) {
        self.pairing -= 1;
        if let Some(id) = self.make_pair_run(workflow, logical, number) {
            self.note(|| format!("run {id} triggered (second of a pair)"));
            self.operate_on(&id);
        }
    }

    fn make_pair_run(&mut self, workflow: &str, logical: i64, number: usize) -> Option<String> {
        let part = if workflow == UPSTREAM { 1 } else { 0 };
        let id = format!("{:016x}-{number:04}-{part:04}", self.seed);
        self.make_run(TENANT, workflow, id, logical, None, false)
    }
}

/// How late, at most, a run's timeout may fail it once the faults have
/// stopped: after its timeout ran out, or after the faults stopped and the
/// leases of the masters that crashed ran out (another master takes their
/// slots and loads the run), whichever is later.
const TIMEOUT_LATE_MS: i64 = 2_000;

impl World {
    /// Once the faults have stopped, a run still running or paused past
    /// its timeout (and the time it takes a master to take it over) is a
    /// timeout that did not come.
    pub(super) fn timeouts_come(&self) -> Result<(), String> {
        let faults_end = super::START + self.config.faults_for_ms;
        let taken_over = faults_end + 2 * self.config.lease_ttl_ms;
        let late =
            |r: &&dagr_store::RunRow| r.workflow == GATE && matches!(r.state, RunState::Running | RunState::Paused);
        for run in self.store.runs.values().filter(late) {
            let (Some(started), Some(limit)) =
                (run.started_at, crate::sim::check::Checker::timeout_of(&self.store, run))
            else {
                continue;
            };
            let due = started + limit;
            if self.now > due.max(taken_over) + TIMEOUT_LATE_MS {
                return Err(format!(
                    "run {} ({}) is still {:?} {} ms after its timeout of {limit} ms ran out (it started at {} ms)",
                    run.id,
                    run.workflow,
                    run.state,
                    self.now - due,
                    started - super::START
                ));
            }
        }
        Ok(())
    }
}
