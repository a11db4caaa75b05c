//! The master's Prometheus metrics (see `dagr_metrics`): what the engine
//! counts in its state, published after each step, and what its shell
//! measures around the store.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::engine::Effects;
use dagr_metrics::{Counter, FAST_SECONDS, Family, Histogram, SLOW_SECONDS, global};

use crate::EngineMetrics;

/// Tenants with a series of their own (past it: `other`), times states.
const MAX_SERIES: usize = 2000;

struct MasterMetrics {
    runs: Arc<Family<Counter>>,
    tasks: Arc<Family<Counter>>,
    commit: Arc<Histogram>,
    created_delay: Arc<Histogram>,
    started_delay: Arc<Histogram>,
}

fn metrics() -> &'static MasterMetrics {
    static METRICS: OnceLock<MasterMetrics> = OnceLock::new();
    METRICS.get_or_init(|| {
        let r = global();
        MasterMetrics {
            runs: r.family(
                "dagr_run_transitions_total",
                "Runs that entered a state, by tenant and state.",
                &["tenant", "state"],
                MAX_SERIES,
                Counter::default,
            ),
            tasks: r.family(
                "dagr_task_transitions_total",
                "Task instances that entered a state, by tenant and state.",
                &["tenant", "state"],
                MAX_SERIES,
                Counter::default,
            ),
            commit: r.histogram(
                "dagr_store_commit_seconds",
                "How long the store took to commit an engine step.",
                FAST_SECONDS,
            ),
            created_delay: r.histogram(
                "dagr_schedule_created_delay_seconds",
                "From a cycle's due time to the creation of its run.",
                SLOW_SECONDS,
            ),
            started_delay: r.histogram(
                "dagr_schedule_started_delay_seconds",
                "From a cycle's due time to its run's start (its first task dispatched or waiting).",
                SLOW_SECONDS,
            ),
        }
    })
}

/// Counts what a committed step wrote and how long the commit took.
pub(crate) fn committed(effects: &Effects, took: Duration) {
    let m = metrics();
    m.commit.observe_duration(took);
    for t in &effects.transitions {
        let family = if t.task { &m.tasks } else { &m.runs };
        family.with(&[&t.tenant, t.to]).inc();
    }
    for new in &effects.batch.new_runs {
        if new.run.kind == dagr_store::RunKind::Schedule {
            m.created_delay.observe((new.run.created_at - new.run.logical_time).max(0) as f64 / 1000.0);
        }
    }
    for delay in &effects.schedule_delays {
        m.started_delay.observe((*delay).max(0) as f64 / 1000.0);
    }
}

/// A number the engine publishes: its name, its help, where it is.
type Published = (&'static str, &'static str, fn(&EngineMetrics) -> &AtomicU64);

/// Registers the engine's counters and gauges, read at each scrape.
pub fn register(engine: &Arc<EngineMetrics>) {
    metrics();
    let r = global();
    let counters: [Published; 11] = [
        ("dagr_engine_steps_total", "Engine steps (each a batch of inputs and one commit).", |m| &m.steps),
        ("dagr_attempts_dispatched_total", "Attempts handed to workers.", |m| &m.dispatched),
        ("dagr_attempt_results_total", "Attempt results received from workers.", |m| &m.results),
        (
            "dagr_stale_results_total",
            "Results for attempts no longer current (killed, reset, duplicate, or of an old epoch): never applied.",
            |m| &m.stale_results,
        ),
        ("dagr_fenced_writes_total", "Writes the store refused because another owner fenced the run.", |m| {
            &m.fenced_writes
        }),
        (
            "dagr_admissions_over_limit_total",
            "Admissions the store refused: the workflow's or backfill's runs, counted over every master's, were at their limit, or another master held an active run of the tenant in the slot of a run under a limit counted per slot (also for a run starting attempts).",
            |m| &m.admissions_over_limit,
        ),
        (
            "dagr_runs_handed_over_total",
            "Runs this master stopped driving without a write: their slots went to another master, or another claimed them while it was away.",
            |m| &m.runs_handed_over,
        ),
        ("dagr_runs_claimed_total", "Runs taken over from another owner (or after a restart).", |m| &m.runs_claimed),
        ("dagr_attempts_adopted_total", "Attempts found running at a takeover and adopted.", |m| &m.attempts_adopted),
        ("dagr_attempts_lost_total", "Attempts lost with their worker or at a takeover.", |m| &m.attempts_lost),
        (
            "dagr_dispatch_refused_total",
            "Attempts a worker refused or that did not reach it (dispatched again, uncharged).",
            |m| &m.dispatch_refused,
        ),
    ];
    for (name, help, field) in counters {
        let m = engine.clone();
        r.counter_fn(name, help, move || EngineMetrics::get(field(&m)));
    }
    let gauges: [Published; 3] = [
        ("dagr_active_runs", "Runs this master drives now.", |m| &m.active_runs),
        ("dagr_attempts_in_flight", "Attempts handed to workers and not yet reported.", |m| &m.in_flight),
        ("dagr_ready_tasks", "Tasks ready to start, waiting for a worker slot.", |m| &m.ready),
    ];
    for (name, help, field) in gauges {
        let m = engine.clone();
        r.gauge_fn(name, help, move || EngineMetrics::get(field(&m)) as f64);
    }
}
