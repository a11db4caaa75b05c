//! Guests in other languages: size, compile time (cold and from the code
//! cache), instantiate + call of a trivial task (p50/p99) with the pooling
//! allocator, and memory per instance; and, for comparison, starting
//! `python3 -c pass` and `node -e 0` in the same run. Prints a markdown table.
//!
//! ```sh
//! DAGR_BENCH_GUESTS="rust=a.wasm,python=b.wasm,js=c.wasm" cargo bench -p dagr-runtime --bench guests
//! ```
//!
//! Each component is called with `DAGR_BENCH_PARAMS` (default
//! `{"name":"Ada"}`, what `dagr plugin new`'s template takes),
//! `DAGR_BENCH_CALLS` times (default 500) after 50 warm-up calls.
//! `DAGR_BENCH_KEEP_RESIDENT` sets `RuntimeConfig::memory_keep_resident`.
//!
//! Memory per instance is the growth of the process's resident set while
//! one instance runs (read when the task logs, i.e. at the end of its
//! `run`), over the resident set between attempts: the pages an instance
//! touches that its pool slot does not keep. Median of the measured calls.
//! Page faults per attempt are the process's minor faults during one
//! `execute` (a copy-on-write memory image faults in each page its guest
//! touches).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dagr_runtime::{AttemptContext, AttemptObserver, CodeSource, Execution, LogLine, Runtime, RuntimeConfig};

fn main() {
    let guests = std::env::var("DAGR_BENCH_GUESTS").unwrap_or_default();
    let params = std::env::var("DAGR_BENCH_PARAMS").unwrap_or_else(|_| r#"{"name":"Ada"}"#.into());
    let keep_resident: usize = std::env::var("DAGR_BENCH_KEEP_RESIDENT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(RuntimeConfig::default().memory_keep_resident);
    let calls: usize = std::env::var("DAGR_BENCH_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    println!(
        "guests: {calls} sequential calls each, {} KiB kept resident per memory, load average at start {load}\n",
        keep_resident >> 10
    );
    println!(
        "| guest | size | compile (cold) | load from the code cache | instantiate + call p50 / p99 | memory per instance | page faults per attempt |"
    );
    println!("|---|---|---|---|---|---|---|");
    let host = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut p50s = Vec::new();
    for entry in guests.split(',').filter(|e| !e.is_empty()) {
        let (label, path) = entry.split_once('=').expect("DAGR_BENCH_GUESTS is label=path,…");
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
        let cache = tempfile::tempdir().unwrap();
        let config = || RuntimeConfig {
            max_concurrent_attempts: 16,
            cache_dir: Some(cache.path().to_path_buf()),
            memory_keep_resident: keep_resident,
            ..RuntimeConfig::default()
        };
        let started = Instant::now();
        let plugin = Runtime::new(config()).unwrap().load(&bytes).unwrap();
        let cold = started.elapsed();
        assert_eq!(plugin.code_source(), CodeSource::Compiled);
        let mut cached = Vec::new();
        let mut runtime = None;
        for _ in 0..5 {
            let fresh = Runtime::new(config()).unwrap();
            let started = Instant::now();
            let plugin = fresh.load(&bytes).unwrap();
            cached.push(started.elapsed());
            assert_eq!(plugin.code_source(), CodeSource::Cached);
            runtime = Some((fresh, plugin));
        }
        cached.sort();
        let (runtime, plugin) = runtime.unwrap();

        let rss = Arc::new(RssProbe::default());
        let mut samples = Vec::with_capacity(calls);
        let mut growth = Vec::with_capacity(calls);
        let mut faults = Vec::with_capacity(calls);
        for i in 0..calls + 50 {
            let mut exec = Execution::new(AttemptContext::adhoc("bench"), params.clone());
            exec.observer = Some(rss.clone());
            let before = resident_bytes();
            let faults_before = minor_faults();
            let started = Instant::now();
            let report = host.block_on(runtime.execute(&plugin, exec));
            let took = started.elapsed();
            let faulted = minor_faults() - faults_before;
            assert!(report.result.is_ok(), "{label}: {:?}", report.result);
            let during = rss.take();
            if i >= 50 {
                samples.push(took);
                faults.push(faulted);
                if let Some(during) = during {
                    growth.push(during.saturating_sub(before));
                }
            }
        }
        samples.sort();
        growth.sort();
        faults.sort();
        let p50 = samples[samples.len() / 2];
        let p99 = samples[samples.len() * 99 / 100];
        p50s.push((label.to_owned(), p50));
        let memory =
            growth.get(growth.len() / 2).map_or("–".into(), |b| format!("{:.1} MiB", *b as f64 / (1 << 20) as f64));
        println!(
            "| {label} | {:.1} MB | {:.1} s | {:.0} ms | {} / {} | {memory} | {} |",
            bytes.len() as f64 / 1e6,
            cold.as_secs_f64(),
            cached[cached.len() / 2].as_secs_f64() * 1e3,
            fmt(p50),
            fmt(p99),
            faults[faults.len() / 2]
        );
    }
    println!();
    println!("| process start, same run | p50 | p99 |");
    println!("|---|---|---|");
    for (label, program, args) in
        [("python3 -c pass", "python3", &["-c", "pass"][..]), ("node -e 0", "node", &["-e", "0"][..])]
    {
        let mut samples: Vec<Duration> = (0..30)
            .filter_map(|_| {
                let started = Instant::now();
                let status = std::process::Command::new(program).args(args).status().ok()?;
                status.success().then(|| started.elapsed())
            })
            .collect();
        if samples.is_empty() {
            println!("| {label} | not installed | |");
            continue;
        }
        samples.sort();
        let p50 = samples[samples.len() / 2];
        println!("| {label} | {} | {} |", fmt(p50), fmt(samples[samples.len() * 99 / 100]));
        for (guest, guest_p50) in &p50s {
            println!("|   … / {guest}'s instantiate + call | {:.0}× | |", p50.as_secs_f64() / guest_p50.as_secs_f64());
        }
    }
}

fn fmt(d: Duration) -> String {
    if d >= Duration::from_millis(1) {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{} µs", d.as_micros())
    }
}

/// Minor page faults of this process so far (all threads).
fn minor_faults() -> i64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage only writes into the struct we pass, which is
    // zeroed (a valid rusage) whatever it does.
    #[allow(unsafe_code)]
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    usage.ru_minflt
}

/// The resident set size of this process, from /proc/self/statm.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// Reads the resident set when the task logs (while its instance is alive).
#[derive(Default)]
struct RssProbe(Mutex<Option<u64>>);

impl RssProbe {
    fn take(&self) -> Option<u64> {
        self.0.lock().unwrap().take()
    }
}

impl AttemptObserver for RssProbe {
    fn log(&self, _line: &LogLine) {
        let mut seen = self.0.lock().unwrap();
        *seen = Some(seen.unwrap_or(0).max(resident_bytes()));
    }
}
