//! dagr's metrics in the Prometheus text format (version 0.0.4).
//!
//! Every process has one [`Registry`] ([`global`]); each part of dagr
//! registers what it measures when it starts: a [`Counter`], [`Gauge`] or
//! [`Histogram`] it updates, a [`Family`] of them by label (with a bound on
//! its series: past it, values go to the series whose labels read
//! `other`, so a tenant cannot grow the registry without end), or a
//! function read at each scrape ([`Registry::counter_fn`],
//! [`Registry::gauge_fn`]) for numbers that already live elsewhere.
//! [`Registry::render`] writes them all; names follow Prometheus
//! conventions (`dagr_` prefix, base units in the name, `_total` for
//! counters).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The label value that stands for every series past a family's bound.
pub const OTHER: &str = "other";

/// Buckets for durations of requests and steps, in seconds (1 ms – 10 s).
pub const FAST_SECONDS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
/// Buckets for durations of tasks and delays, in seconds (10 ms – 1 h).
pub const SLOW_SECONDS: &[f64] = &[0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0];
/// Buckets for short host work such as making a guest's instance, in
/// seconds (50 µs – 100 ms).
pub const MICRO_SECONDS: &[f64] = &[0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1];
/// Buckets for sizes in bytes (64 KiB – 4 GiB).
pub const BYTES: &[f64] =
    &[65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0, 67108864.0, 268435456.0, 1073741824.0, 4294967296.0];

/// A number that only grows.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.add(1);
    }

    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A number that goes up and down.
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    pub fn set(&self, value: i64) {
        self.0.store(value, Ordering::Relaxed);
    }

    pub fn add(&self, n: i64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Observations counted into buckets by upper bound.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Per bucket (not cumulative), and one past the last bound.
    counts: Vec<AtomicU64>,
    /// The sum, as the bits of an `f64`.
    sum: AtomicU64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram { bounds, counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(), sum: AtomicU64::new(0) }
    }

    pub fn observe(&self, value: f64) {
        self.observe_many(value, 1);
    }

    /// `n` observations of the same value at once.
    pub fn observe_many(&self, value: f64, n: u64) {
        if n == 0 {
            return;
        }
        let value = if value.is_finite() { value } else { 0.0 };
        let i = self.bounds.iter().position(|b| value <= *b).unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(n, Ordering::Relaxed);
        let added = value * n as f64;
        let mut current = self.sum.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(current) + added).to_bits();
            match self.sum.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    pub fn observe_duration(&self, d: Duration) {
        self.observe(d.as_secs_f64());
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

/// What a family's series are.
pub trait Metric: Send + Sync + 'static {
    const KIND: &'static str;
    fn write(&self, name: &str, labels: &str, out: &mut String);
}

impl Metric for Counter {
    const KIND: &'static str = "counter";
    fn write(&self, name: &str, labels: &str, out: &mut String) {
        let _ = writeln!(out, "{name}{} {}", braces(labels), self.get());
    }
}

impl Metric for Gauge {
    const KIND: &'static str = "gauge";
    fn write(&self, name: &str, labels: &str, out: &mut String) {
        let _ = writeln!(out, "{name}{} {}", braces(labels), self.get());
    }
}

impl Metric for Histogram {
    const KIND: &'static str = "histogram";
    fn write(&self, name: &str, labels: &str, out: &mut String) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut total = 0;
        for (i, bound) in self.bounds.iter().enumerate() {
            total += self.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {total}");
        }
        total += self.counts[self.bounds.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {total}");
        let _ = writeln!(out, "{name}_sum{} {}", braces(labels), f64::from_bits(self.sum.load(Ordering::Relaxed)));
        let _ = writeln!(out, "{name}_count{} {total}", braces(labels));
    }
}

fn braces(labels: &str) -> String {
    if labels.is_empty() { String::new() } else { format!("{{{labels}}}") }
}

/// A label value escaped for the text format.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Series of one metric by label values, at most `max_series` of them.
pub struct Family<M: Metric> {
    labels: &'static [&'static str],
    max_series: usize,
    make: Box<dyn Fn() -> M + Send + Sync>,
    series: Mutex<BTreeMap<Vec<String>, Arc<M>>>,
}

impl<M: Metric> Family<M> {
    /// The series of these label values (one per label name); past the
    /// bound, the `other` series.
    pub fn with(&self, values: &[&str]) -> Arc<M> {
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let key: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
        if let Some(found) = series.get(&key) {
            return found.clone();
        }
        // One place is kept for the `other` series.
        let key = if series.len() + 1 >= self.max_series {
            self.labels.iter().map(|_| OTHER.to_owned()).collect()
        } else {
            key
        };
        series.entry(key).or_insert_with(|| Arc::new((self.make)())).clone()
    }

    fn write(&self, name: &str, out: &mut String) {
        let series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        for (values, metric) in series.iter() {
            let labels = self
                .labels
                .iter()
                .zip(values)
                .map(|(l, v)| format!("{l}=\"{}\"", escape(v)))
                .collect::<Vec<_>>()
                .join(",");
            metric.write(name, &labels, out);
        }
    }
}

type Render = Box<dyn Fn(&str, &mut String) + Send + Sync>;

struct Entry {
    help: &'static str,
    kind: &'static str,
    render: Render,
}

/// The metrics of a process, by name.
#[derive(Default)]
pub struct Registry {
    entries: Mutex<BTreeMap<&'static str, Entry>>,
}

/// The process's registry.
pub fn global() -> &'static Registry {
    static GLOBAL: OnceLock<Registry> = OnceLock::new();
    GLOBAL.get_or_init(Registry::default)
}

impl Registry {
    fn put(&self, name: &'static str, help: &'static str, kind: &'static str, render: Render) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.insert(name, Entry { help, kind, render });
    }

    /// A metric without labels. Registering a name again replaces it.
    pub fn single<M: Metric>(&self, name: &'static str, help: &'static str, metric: M) -> Arc<M> {
        let metric = Arc::new(metric);
        let kept = metric.clone();
        self.put(name, help, M::KIND, Box::new(move |name, out| kept.write(name, "", out)));
        metric
    }

    pub fn counter(&self, name: &'static str, help: &'static str) -> Arc<Counter> {
        self.single(name, help, Counter::default())
    }

    pub fn gauge(&self, name: &'static str, help: &'static str) -> Arc<Gauge> {
        self.single(name, help, Gauge::default())
    }

    pub fn histogram(&self, name: &'static str, help: &'static str, bounds: &'static [f64]) -> Arc<Histogram> {
        self.single(name, help, Histogram::new(bounds))
    }

    /// A metric by `labels`, at most `max_series` series.
    pub fn family<M: Metric>(
        &self,
        name: &'static str,
        help: &'static str,
        labels: &'static [&'static str],
        max_series: usize,
        make: impl Fn() -> M + Send + Sync + 'static,
    ) -> Arc<Family<M>> {
        let family =
            Arc::new(Family { labels, max_series: max_series.max(2), make: Box::new(make), series: Mutex::default() });
        let kept = family.clone();
        self.put(name, help, M::KIND, Box::new(move |name, out| kept.write(name, out)));
        family
    }

    /// A counter read from `read` at each scrape.
    pub fn counter_fn(&self, name: &'static str, help: &'static str, read: impl Fn() -> u64 + Send + Sync + 'static) {
        self.put(
            name,
            help,
            "counter",
            Box::new(move |name, out| {
                let _ = writeln!(out, "{name} {}", read());
            }),
        );
    }

    /// A gauge read from `read` at each scrape.
    pub fn gauge_fn(&self, name: &'static str, help: &'static str, read: impl Fn() -> f64 + Send + Sync + 'static) {
        self.put(
            name,
            help,
            "gauge",
            Box::new(move |name, out| {
                let _ = writeln!(out, "{name} {}", read());
            }),
        );
    }

    /// Every metric in the text format.
    pub fn render(&self) -> String {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        for (name, entry) in entries.iter() {
            let _ = writeln!(out, "# HELP {name} {}", entry.help);
            let _ = writeln!(out, "# TYPE {name} {}", entry.kind);
            (entry.render)(name, &mut out);
        }
        out
    }
}

/// The content type of [`Registry::render`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_text_format_has_help_type_cumulative_buckets_and_escaped_labels() {
        let registry = Registry::default();
        registry.counter("dagr_things_total", "Things.").add(3);
        let h = registry.histogram("dagr_wait_seconds", "Waits.", &[0.1, 1.0]);
        h.observe(0.05);
        h.observe(0.5);
        h.observe(7.0);
        h.observe_many(0.25, 4);
        h.observe_many(0.25, 0);
        let family = registry.family("dagr_runs_total", "Runs.", &["tenant"], 3, Counter::default);
        family.with(&["a\"b"]).inc();
        family.with(&["c"]).inc();
        family.with(&["d"]).inc();
        family.with(&["e"]).inc();
        registry.gauge_fn("dagr_open", "Open.", || 2.0);
        let text = registry.render();
        assert!(text.contains("# TYPE dagr_things_total counter\ndagr_things_total 3\n"), "{text}");
        assert!(text.contains("dagr_wait_seconds_bucket{le=\"0.1\"} 1\n"), "{text}");
        assert!(text.contains("dagr_wait_seconds_bucket{le=\"1\"} 6\n"), "{text}");
        assert!(text.contains("dagr_wait_seconds_bucket{le=\"+Inf\"} 7\n"), "{text}");
        assert!(text.contains("dagr_wait_seconds_sum 8.55\n"), "{text}");
        assert!(text.contains("dagr_wait_seconds_count 7\n"), "{text}");
        assert!(text.contains("dagr_runs_total{tenant=\"a\\\"b\"} 1\n"), "{text}");
        assert!(text.contains("dagr_runs_total{tenant=\"other\"} 2\n"), "past the bound: {text}");
        assert!(text.contains("dagr_open 2\n"), "{text}");
    }
}
