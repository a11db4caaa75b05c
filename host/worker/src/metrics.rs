//! The worker's Prometheus metrics (see `dagr_metrics`).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dagr_metrics::{BYTES, Counter, Family, Histogram, MICRO_SECONDS, SLOW_SECONDS, global};
use dagr_protocol::wire::Outcome;
use dagr_runtime::AttemptReport;

use crate::Worker;

/// Series of a by-plugin family at most (past it: `other`).
const MAX_PLUGINS: usize = 200;

struct WorkerMetrics {
    attempts: Arc<Family<Counter>>,
    durations: Arc<Family<Histogram>>,
    instantiate: Arc<Family<Histogram>>,
    memory: Arc<Family<Histogram>>,
}

fn metrics() -> &'static WorkerMetrics {
    static METRICS: OnceLock<WorkerMetrics> = OnceLock::new();
    METRICS.get_or_init(|| WorkerMetrics {
        attempts: global().family(
            "dagr_worker_attempts_total",
            "Attempts this worker ran, by outcome (succeeded, or the failure kind: timeout, memory-limit, ...).",
            &["outcome"],
            64,
            Counter::default,
        ),
        durations: global().family(
            "dagr_task_duration_seconds",
            "How long attempts ran (from their slot to their end), by plugin.",
            &["plugin"],
            MAX_PLUGINS,
            || Histogram::new(SLOW_SECONDS),
        ),
        instantiate: global().family(
            "dagr_instantiate_seconds",
            "How long making a guest's instance took (its memory, tables and start), by plugin.",
            &["plugin"],
            MAX_PLUGINS,
            || Histogram::new(MICRO_SECONDS),
        ),
        memory: global().family(
            "dagr_guest_memory_bytes",
            "The most linear memory an attempt's guest had, by plugin.",
            &["plugin"],
            MAX_PLUGINS,
            || Histogram::new(BYTES),
        ),
    })
}

/// Records what an attempt's guest took: its instantiation and memory.
pub(crate) fn guest_used(plugin: &str, report: &AttemptReport) {
    if let Some(took) = report.instantiate {
        let m = metrics();
        m.instantiate.with(&[plugin]).observe_duration(took);
        m.memory.with(&[plugin]).observe(report.memory_bytes as f64);
    }
}

/// Counts an attempt's end.
pub(crate) fn attempt_ended(plugin: &str, outcome: &Outcome, elapsed: Duration) {
    let m = metrics();
    let outcome = match outcome {
        Outcome::Succeeded { .. } => "succeeded",
        Outcome::Failed { kind, .. } => kind.as_str(),
    };
    m.attempts.with(&[outcome]).inc();
    m.durations.with(&[plugin]).observe_duration(elapsed);
}

/// Registers the worker's gauges, read from `worker` at each scrape.
pub fn register(worker: &Worker) {
    metrics();
    let w = worker.clone();
    global().gauge_fn("dagr_worker_slots", "Attempts this worker runs at once at most.", move || w.slots() as f64);
    let w = worker.clone();
    global().gauge_fn("dagr_worker_slots_used", "Attempts this worker runs now.", move || w.running() as f64);
}
