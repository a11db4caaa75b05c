//! The engine: a synchronous state machine and the thin async shell that
//! feeds it.
//!
//! # The state machine
//!
//! [`EngineState`](state::EngineState) holds everything the engine knows:
//! the runs it drives (each a [`RunMachine`](dagr_core::RunMachine)), the
//! ready queue, attempts in flight, the workers and their load, timers,
//! schedules, the slots it owns and whether it leads. It never reads a
//! clock, a store or a network: [`EngineState::step`](state::EngineState::step)
//! takes [`Input`]s, the [`Data`] the shell read for it, and `now`, and
//! adds to [`Effects`]: the writes to commit, the attempts to dispatch, the
//! cancellations, probes, verdicts and replies to send, the next timer, and
//! what it [`Need`]s read before it can go on. The shell answers the needs
//! and steps again (a second pass, with no new inputs) until nothing is
//! needed, then commits, then acts — the shape of raft-rs's `step` /
//! `Ready` / `advance` and of Restate's state machine returning actions.
//!
//! The state is split along its seams: [`runs`](runs) (loading a run,
//! forgetting it, the machines' actions), [`admission`](admission)
//! (`max_active_runs`, backfill parallelism), [`outer`](outer) (runs and
//! tasks waiting for other workflows' instances), [`control`](control)
//! (conditions, switches, child runs), [`commands`](commands),
//! [`results`](results) (workers' results, lost attempts, adoption),
//! [`timers`](timers), [`dispatch`](dispatch) (the ready queue against
//! workflow and tenant caps and free worker slots), [`placement`](placement)
//! (which worker), [`schedules`](schedules) (cron materialisation) and
//! [`spec`](spec) (what a worker gets for an attempt).
//!
//! # The shell
//!
//! [`shell`](shell) gathers inputs (workers' results, commands from the
//! store, ownership and leadership changes, timers), reads what the state
//! needs, steps it, commits the step's writes in **one** transaction, and
//! only then acts: every state change is durable before its effects leave
//! the process.

mod admission;
mod backlog;
mod commands;
mod control;
mod describe;
mod dispatch;
mod effects;
pub(crate) use effects::sent_of;
mod in_flight;
mod outer;
mod placement;
mod results;
mod runs;
mod schedules;
mod shell;
mod spec;
mod state;
mod timers;

pub mod testkit;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_admission;
#[cfg(test)]
mod tests_backlog;
#[cfg(test)]
mod tests_cluster;
#[cfg(test)]
mod tests_in_flight;
#[cfg(test)]
mod tests_outer;

pub use effects::{
    Accepted, Data, Effects, Input, LoadError, LoadedRun, Need, PendingCommand, Probe, ScheduleRow, ScheduleSource,
    Transition,
};
pub use placement::{Strategy, WorkerInfo};
pub use shell::Engine;
pub use state::{Counters, EngineState, MAX_PASSES};

/// The singleton duty the leader holds (cron materialisation).
pub(crate) const SCHEDULER: &str = "scheduler";
