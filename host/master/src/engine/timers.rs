//! Timers: retries that are due and schedules' next cycles. The state
//! keeps them ordered by time; the shell sleeps until the first one.

use std::collections::BTreeMap;

use dagr_core::run::Input as RunInput;

use crate::engine::effects::Effects;
use crate::engine::state::EngineState;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    Retry {
        run: String,
        task: usize,
    },
    Schedule {
        tenant: String,
        name: String,
        at: i64,
    },
    /// A sensor's next check.
    Wake {
        run: String,
        task: usize,
    },
    /// A run's `timeout` ran out.
    RunTimeout {
        run: String,
    },
    /// An attempt reached its task's `timeout_warn`.
    AttemptWarn {
        run: String,
        task: usize,
        attempt: u32,
    },
}

/// Timers by (due time in ms, sequence).
#[derive(Debug, Default)]
pub(crate) struct Timers {
    due: BTreeMap<(i64, u64), Timer>,
    seq: u64,
}

impl Timers {
    pub(crate) fn arm(&mut self, at: i64, timer: Timer) {
        self.seq += 1;
        self.due.insert((at, self.seq), timer);
    }

    /// The timers that act on run `run`, with when they are due.
    pub(crate) fn of_run(&self, run: &str) -> Vec<(i64, &Timer)> {
        self.due
            .iter()
            .filter(|(_, t)| match t {
                Timer::Retry { run: r, .. } | Timer::Wake { run: r, .. } | Timer::RunTimeout { run: r } => r == run,
                Timer::AttemptWarn { run: r, .. } => r == run,
                Timer::Schedule { .. } => false,
            })
            .map(|(&(at, _), t)| (at, t))
            .collect()
    }

    /// When the first timer is due.
    pub(crate) fn next(&self) -> Option<i64> {
        self.due.keys().next().map(|&(at, _)| at)
    }

    /// Removes and returns the first timer due at `now`.
    fn pop_due(&mut self, now: i64) -> Option<Timer> {
        let entry = self.due.first_entry()?;
        if entry.key().0 > now {
            return None;
        }
        Some(entry.remove())
    }
}

impl EngineState {
    pub(crate) fn fire_timers(&mut self, effects: &mut Effects, now: i64) {
        while let Some(timer) = self.timers.pop_due(now) {
            match timer {
                Timer::Retry { run, task } => {
                    let Some(id) = self.runs.get_key_value(run.as_str()).map(|(id, _)| id.clone()) else {
                        continue;
                    };
                    if let Some(active) = self.runs.get_mut(&id)
                        && let Ok(actions) = active.machine.apply(RunInput::RetryDue { task }, now)
                    {
                        self.absorb(effects, &id, actions, now);
                    }
                }
                Timer::Schedule { tenant, name, at } => self.schedule_due(effects, (tenant, name), at, now),
                Timer::Wake { run, task } => {
                    let Some(id) = self.runs.get_key_value(run.as_str()).map(|(id, _)| id.clone()) else {
                        continue;
                    };
                    if let Some(active) = self.runs.get_mut(&id)
                        && let Ok(actions) = active.machine.apply(RunInput::Unblock { task }, now)
                    {
                        self.absorb(effects, &id, actions, now);
                    }
                }
                Timer::AttemptWarn { run, task, attempt } => {
                    let key =
                        dagr_protocol::wire::AttemptKey { run_id: run.clone(), task: task as u32, number: attempt };
                    if !self.in_flight.contains_key(&key) {
                        continue;
                    }
                    let Some(active) = self.runs.get(run.as_str()) else { continue };
                    let limit = active.machine.workflow().tasks[task].timeout_warn.unwrap_or_default();
                    let message = format!(
                        "attempt {attempt} has run longer than its warning threshold of {}",
                        dagr_core::units::format_duration(limit)
                    );
                    tracing::warn!(run = %run, task, %message, "attempt past its timeout_warn");
                    let data = serde_json::json!({ "attempt": attempt, "message": message });
                    effects.batch.events.push(active.event("task.timeout_warn", Some(task), data, now));
                }
                Timer::RunTimeout { run } => {
                    let Some(id) = self.runs.get_key_value(run.as_str()).map(|(id, _)| id.clone()) else {
                        continue;
                    };
                    let Some(active) = self.runs.get_mut(&id) else { continue };
                    if active.machine.state().is_terminal() {
                        continue;
                    }
                    let limit = active.machine.workflow().timeout.unwrap_or_default();
                    // Armed in an earlier life of a run since rerun: its
                    // timeout counts from its latest start.
                    let due = active.row.started_at.map(|at| at + limit.as_millis() as i64);
                    if due.is_none_or(|due| now < due) {
                        continue;
                    }
                    let message = format!(
                        "the run did not finish within its timeout of {}",
                        dagr_core::units::format_duration(limit)
                    );
                    tracing::warn!(run = %id, %message, "run timed out");
                    effects.batch.events.push(active.event(
                        "run.timeout",
                        None,
                        serde_json::json!({ "message": message }),
                        now,
                    ));
                    if let Ok(actions) = active.machine.apply(RunInput::MarkFailed, now) {
                        self.absorb(effects, &id, actions, now);
                        self.retiring.push(id);
                    }
                }
            }
        }
    }
}
