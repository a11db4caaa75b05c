//! The outer DAG in the simulation ([`SimConfig::outer`]): pairs of runs
//! of two workflows, the downstream one waiting for the upstream one of
//! its logical time, and runs whose task runs another workflow as a
//! child run. Either is made first, the other up to 3 s later, so
//! that a downstream run waits for an upstream run that does not exist
//! yet, or is judged while its upstream runs or after it ended; which
//! master owns which follows from their ids, so the upstream run's end
//! often wakes a run another master owns, through the store.
//!
//! [`SimConfig::outer`]: crate::sim::SimConfig::outer

use crate::engine::testkit::TENANT;
use crate::sim::world::{Event, World};
use crate::sim::{DOWNSTREAM, UPSTREAM};

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

/// The latest the second run of a pair is made after the first.
const PAIR_GAP_MS: i64 = 3_000;

impl World {
    /// Makes the first run of a pair, at a logical time no other pair has,
    /// and schedules the second.
    pub(super) fn pair_first(&mut self) {
        let mut logical = self.now;
        while self.store.runs.values().any(|r| r.workflow == DOWNSTREAM && r.logical_time == logical) {
            logical += 1;
        }
        let upstream_first = self.rng.chance(0.5);
        let number = self.triggered;
        let Some(id) = self.make_pair_run(upstream_first, logical, number) else { return };
        self.triggered += 1;
        self.pairing += 1;
        let at = self.now + self.rng.between(0, PAIR_GAP_MS);
        self.schedule(at, Event::Pair { upstream: !upstream_first, logical, number });
        self.note(|| format!("run {id} triggered (first of a pair)"));
        self.operate_on(&id);
    }

    /// Makes the second run of a pair.
    pub(super) fn pair_second(&mut self, upstream: bool, logical: i64, number: usize) {
        self.pairing -= 1;
        if let Some(id) = self.make_pair_run(upstream, logical, number) {
            self.note(|| format!("run {id} triggered (second of a pair)"));
            self.operate_on(&id);
        }
    }

    fn make_pair_run(&mut self, upstream: bool, logical: i64, number: usize) -> Option<String> {
        let (name, part) = if upstream { (UPSTREAM, 1) } else { (DOWNSTREAM, 0) };
        let id = format!("{:016x}-{number:04}-{part:04}", self.seed);
        self.make_run(TENANT, name, id, logical, None, false)
    }
}
