//! Runtime benchmarks; prints a markdown table.
//!
//! ```sh
//! cargo bench -p dagr-runtime --bench runtime
//! ```
//!
//! 1. `echo` through `Runtime::execute` (fresh `Store`, pooling allocator),
//!    sequential calls; and, for a breakdown, the same steps done with
//!    wasmtime directly (the floor the runtime adds to).
//! 2. Spawning `/bin/true` per call, for comparison.
//! 3. How late a 1 ms timer on the caller's tokio runtime fires while N
//!    guests spin in a loop.
//! 4. Loading the largest built-in plugin: compiling vs. the code cache.
//!
//! `DAGR_BENCH_CALLS` changes the number of calls of 1 and 2 (default 3000),
//! `DAGR_BENCH_ROUNDS` the rounds each figure is the best of (default 3).
//! Arguments select sections (`execute`, `spawn`, `timer`, `load`), e.g.
//! `cargo bench -p dagr-runtime --bench runtime -- execute`; none runs all.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use dagr_runtime::{AttemptContext, Execution, Plugin, Runtime, RuntimeConfig};
use tokio_util::sync::CancellationToken;

fn main() {
    let calls: usize = std::env::var("DAGR_BENCH_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    println!("dagr-runtime benchmarks: {calls} sequential calls, {cores} cores, load average at start {load}\n");

    // A caller like `dagr serve`: a multi-threaded tokio runtime.
    let host = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let echo = runtime.load(dagr_builtins::ECHO).unwrap();

    // The machine may be shared: every figure is from the best of a few
    // rounds (by median, or by max for the timer), with the worst round's.
    let rounds: usize = std::env::var("DAGR_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let sections: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let run = |section: &str| sections.is_empty() || sections.iter().any(|s| s == section);
    let mut rows: Vec<[String; 3]> = Vec::new();
    let mut execute_median = None;

    // 1. echo through the runtime.
    if run("execute") {
        let (execute, execute_worst) =
            best_of(rounds, Samples::median, || host.block_on(time_execute(&runtime, &echo, calls, None)));
        let scratch = tempfile::tempdir().unwrap();
        let given = Some(scratch.path().to_path_buf());
        let (execute_given, _) =
            best_of(rounds, Samples::median, || host.block_on(time_execute(&runtime, &echo, calls, given.clone())));
        let (floor, _) = best_of(rounds, |f: &floor::Floor| f.total.median(), || floor::measure(calls));
        let (handoff, _) = best_of(rounds, Samples::median, || time_handoff(calls, Duration::ZERO));
        // With work, the caller's thread has time to go idle, as it does
        // while a real attempt runs.
        let work = floor.total.median();
        let (handoff_work, _) = best_of(rounds, Samples::median, || time_handoff(calls, work));
        rows.push([
            "echo via `Runtime::execute` (fresh Store, pooling, own scratch dir)".into(),
            format!("median {} (worst round {}), p99 {}", us(execute.median()), us(execute_worst), us(execute.p99())),
            goal(execute.median(), Duration::from_micros(50), Duration::from_micros(25)),
        ]);
        rows.push([
            "  … same, caller-provided scratch dir".into(),
            format!("median {}, p99 {}", us(execute_given.median()), us(execute_given.p99())),
            String::new(),
        ]);
        rows.push([
            "  … floor: wasmtime alone on the calling thread (WASI ctx + Store / instantiate / call + drop)".into(),
            format!(
                "median {} ({} / {} / {}), p99 {}",
                us(floor.total.median()),
                us(floor.store.median()),
                us(floor.instantiate.median()),
                us(floor.call.median()),
                us(floor.total.p99())
            ),
            String::new(),
        ]);
        rows.push([
            "  … handoff to a guest thread and back (empty task on another tokio runtime)".into(),
            format!("median {}, p99 {}", us(handoff.median()), us(handoff.p99())),
            String::new(),
        ]);
        rows.push([
            format!("  … same handoff, task spinning {} (the floor's median) minus that", us(work)),
            format!(
                "median {}, p99 {}",
                us(handoff_work.median().saturating_sub(work)),
                us(handoff_work.p99().saturating_sub(work))
            ),
            String::new(),
        ]);
        execute_median = Some(execute.median());
    }

    // 2. a process per call.
    if run("spawn") {
        let (spawn, spawn_worst) = best_of(rounds, Samples::median, || time_spawn(calls));
        rows.push([
            "spawn `/bin/true` (std::process)".into(),
            format!("median {} (worst round {}), p99 {}", us(spawn.median()), us(spawn_worst), us(spawn.p99())),
            String::new(),
        ]);
        if let Some(execute) = execute_median {
            let ratio = spawn.median().as_secs_f64() / execute.as_secs_f64();
            rows.push([
                "  ratio spawn / execute (medians)".into(),
                format!("{ratio:.1}×"),
                if ratio >= 20.0 {
                    "stretch met (≥ 20×)".into()
                } else if ratio >= 10.0 {
                    "goal met (≥ 10×)".into()
                } else {
                    "goal missed (≥ 10×)".into()
                },
            ]);
        }
    }

    // 3. timer lateness on the caller's runtime while guests spin.
    if run("timer") {
        let iloop = runtime.load(dagr_builtins_iloop()).unwrap();
        // tokio's timer has a 1 ms resolution, so a tick is up to ~1 ms late
        // with nothing running: the first row is that baseline.
        for spinners in [0, 1, 4, 16] {
            let (late, worst) = best_of(rounds, Samples::max, || {
                host.block_on(timer_lateness(&runtime, &iloop, spinners, Duration::from_secs(2)))
            });
            rows.push([
                format!("1 ms timer on the caller's runtime, {spinners} spinning guests: how late ticks fire"),
                format!(
                    "max {} (worst round {}), p99 {}, median {}",
                    ms(late.max()),
                    ms(worst),
                    ms(late.p99()),
                    ms(late.median())
                ),
                if spinners == 16 { goal(late.max(), Duration::from_millis(5), Duration::ZERO) } else { String::new() },
            ]);
        }
    }

    // 4. loading the largest built-in.
    if run("load") {
        let (name, bytes) = dagr_builtins::BUILTINS.iter().max_by_key(|(_, bytes)| bytes.len()).unwrap();
        let (cold, cached) = time_loads(bytes);
        rows.push([
            format!("load `{name}` ({} KB): compile (cold cache)", bytes.len() / 1000),
            format!("median {}", ms(cold.median())),
            String::new(),
        ]);
        rows.push([
            format!("load `{name}`: from the code cache"),
            format!("median {}", ms(cached.median())),
            format!("{:.0}× faster", cold.median().as_secs_f64() / cached.median().as_secs_f64()),
        ]);
    }

    println!("| measurement | result | goal |");
    println!("|---|---|---|");
    for [what, result, goal] in rows {
        println!("| {what} | {result} | {goal} |");
    }
}

/// Runs `measure` `rounds` times; returns the round with the lowest `key`
/// and the highest `key` seen.
fn best_of<T>(rounds: usize, key: impl Fn(&T) -> Duration, mut measure: impl FnMut() -> T) -> (T, Duration) {
    let mut best: Option<T> = None;
    let mut worst = Duration::ZERO;
    for _ in 0..rounds.max(1) {
        let result = measure();
        worst = worst.max(key(&result));
        if best.as_ref().is_none_or(|b| key(&result) < key(b)) {
            best = Some(result);
        }
    }
    (best.unwrap(), worst)
}

fn dagr_builtins_iloop() -> &'static [u8] {
    static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BYTES.get_or_init(|| std::fs::read(dagr_builtins::ILOOP_PATH).unwrap())
}

/// Durations, with order statistics.
struct Samples(Vec<Duration>);

impl Samples {
    fn new(mut samples: Vec<Duration>) -> Self {
        samples.sort();
        Samples(samples)
    }
    fn quantile(&self, q: f64) -> Duration {
        let index = ((self.0.len() as f64 - 1.0) * q).round() as usize;
        self.0.get(index).copied().unwrap_or_default()
    }
    fn median(&self) -> Duration {
        self.quantile(0.5)
    }
    fn p99(&self) -> Duration {
        self.quantile(0.99)
    }
    fn max(&self) -> Duration {
        self.0.last().copied().unwrap_or_default()
    }
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn goal(value: Duration, goal: Duration, stretch: Duration) -> String {
    if !stretch.is_zero() && value <= stretch {
        format!("stretch met (≤ {})", us(stretch))
    } else if value <= goal {
        format!("goal met (≤ {})", if goal >= Duration::from_millis(1) { ms(goal) } else { us(goal) })
    } else {
        format!("goal missed (≤ {})", if goal >= Duration::from_millis(1) { ms(goal) } else { us(goal) })
    }
}

fn echo_execution(scratch: &Option<std::path::PathBuf>) -> Execution {
    let mut exec = Execution::new(AttemptContext::adhoc("bench"), r#"{"hello":"world"}"#);
    exec.scratch_dir = scratch.clone();
    exec
}

async fn time_execute(
    runtime: &Runtime,
    plugin: &Plugin,
    calls: usize,
    scratch: Option<std::path::PathBuf>,
) -> Samples {
    for _ in 0..calls / 10 {
        let report = runtime.execute(plugin, echo_execution(&scratch)).await;
        assert!(report.result.is_ok(), "{:?}", report.result);
    }
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let exec = echo_execution(&scratch);
        let started = Instant::now();
        let report = runtime.execute(plugin, exec).await;
        samples.push(started.elapsed());
        assert!(report.result.is_ok(), "{:?}", report.result);
    }
    Samples::new(samples)
}

/// What `execute` pays to keep guests off the caller's threads: spawning
/// onto another runtime and being woken when the task, which spins for
/// `work`, ends.
fn time_handoff(calls: usize, work: Duration) -> Samples {
    let caller = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let guests = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let guests = guests.handle().clone();
    caller.block_on(async move {
        let mut samples = Vec::with_capacity(calls);
        for i in 0..calls + calls / 10 {
            let started = Instant::now();
            let spinning = async move {
                let start = Instant::now();
                while start.elapsed() < work {
                    std::hint::spin_loop();
                }
            };
            guests.spawn(spinning).await.unwrap();
            if i >= calls / 10 {
                samples.push(started.elapsed());
            }
        }
        Samples::new(samples)
    })
}

fn time_spawn(calls: usize) -> Samples {
    let mut samples = Vec::with_capacity(calls);
    for i in 0..calls + calls / 10 {
        let started = Instant::now();
        let status = std::process::Command::new("/bin/true").status().unwrap();
        if i >= calls / 10 {
            samples.push(started.elapsed());
        }
        assert!(status.success());
    }
    Samples::new(samples)
}

/// Runs a 1 ms interval on the caller's runtime for `length` while
/// `spinners` guests spin, and returns how late each tick fired.
async fn timer_lateness(runtime: &Runtime, iloop: &Plugin, spinners: usize, length: Duration) -> Samples {
    let stop = CancellationToken::new();
    let mut guests = Vec::new();
    for _ in 0..spinners {
        let mut exec = Execution::new(AttemptContext::adhoc("spin"), "{}");
        exec.limits.deadline = length * 2;
        exec.cancel = stop.clone();
        let (runtime, iloop) = (runtime.clone(), iloop.clone());
        guests.push(tokio::spawn(async move { runtime.execute(&iloop, exec).await }));
    }
    // Let the guests start before measuring.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ticker = tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_millis(1));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let end = Instant::now() + length;
        let mut lateness = Vec::new();
        interval.tick().await;
        while Instant::now() < end {
            let scheduled = interval.tick().await;
            lateness.push(tokio::time::Instant::now().saturating_duration_since(scheduled));
        }
        lateness
    });
    let lateness = ticker.await.unwrap();
    stop.cancel();
    for guest in guests {
        let report = guest.await.unwrap();
        assert!(report.result.is_err(), "an iloop returned");
    }
    Samples::new(lateness)
}

/// Loads `bytes` with an empty cache (compiling) and with a warm one.
fn time_loads(bytes: &[u8]) -> (Samples, Samples) {
    let config = |dir: &std::path::Path| RuntimeConfig {
        max_concurrent_attempts: 16,
        cache_dir: Some(dir.to_path_buf()),
        ..RuntimeConfig::default()
    };
    let mut cold = Vec::new();
    for _ in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let runtime = Runtime::new(config(dir.path())).unwrap();
        let started = Instant::now();
        let plugin = runtime.load(bytes).unwrap();
        cold.push(started.elapsed());
        assert_eq!(plugin.code_source(), dagr_runtime::CodeSource::Compiled);
    }
    let dir = tempfile::tempdir().unwrap();
    Runtime::new(config(dir.path())).unwrap().load(bytes).unwrap();
    let mut cached = Vec::new();
    for _ in 0..10 {
        let runtime = Runtime::new(config(dir.path())).unwrap();
        let started = Instant::now();
        let plugin = runtime.load(bytes).unwrap();
        cached.push(started.elapsed());
        assert_eq!(plugin.code_source(), dagr_runtime::CodeSource::Cached);
    }
    (Samples::new(cold), Samples::new(cached))
}

/// The same steps as an attempt, done with wasmtime directly: what the
/// runtime cannot go below with this engine configuration.
mod floor {
    use super::*;
    use wasmtime::component::{HasSelf, Linker, ResourceTable};
    use wasmtime::{Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, UpdateDeadline};
    use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "plugin",
        exports: { default: async },
    });

    use self::dagr::plugin::types::{Level, TaskContext};

    struct State {
        wasi: WasiCtx,
        table: ResourceTable,
    }

    impl WasiView for State {
        fn ctx(&mut self) -> WasiCtxView<'_> {
            WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
        }
    }

    impl dagr::plugin::types::Host for State {}

    impl dagr::plugin::host::Host for State {
        fn log(&mut self, _level: Level, _message: String) {}
        fn progress(&mut self, _percent: u8, _message: String) {}
        fn cancelled(&mut self) -> bool {
            false
        }
        fn secret(&mut self, _name: String) -> Option<String> {
            None
        }
        fn grade(&mut self) -> u8 {
            0
        }
    }

    pub struct Floor {
        pub store: Samples,
        pub instantiate: Samples,
        pub call: Samples,
        pub total: Samples,
    }

    pub fn measure(calls: usize) -> Floor {
        // The runtime's engine settings (pool sized for 1024 attempts).
        let slots = 1024 + 16;
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(slots)
            .total_core_instances(slots * 8)
            .total_memories(slots * 2)
            .total_tables(slots * 8)
            .total_stacks(slots)
            .max_memory_size(1 << 30)
            .max_core_instances_per_component(32)
            .max_memories_per_component(4)
            .max_tables_per_component(32)
            .max_component_instance_size(1 << 20)
            .max_core_instance_size(1 << 20)
            .table_elements(100_000)
            .linear_memory_keep_resident(1 << 20)
            .table_keep_resident(64 << 10)
            .pagemap_scan(wasmtime::Enabled::Auto);
        let mut config = wasmtime::Config::new();
        config
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
            .epoch_interruption(true)
            .max_wasm_stack(1 << 20)
            .async_stack_size(2 << 20);
        let engine = Engine::new(&config).unwrap();
        let mut linker: Linker<State> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
        Plugin::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).unwrap();
        let component = wasmtime::component::Component::new(&engine, dagr_builtins::ECHO).unwrap();
        let pre = PluginPre::new(linker.instantiate_pre(&component).unwrap()).unwrap();
        let context = TaskContext {
            tenant: "default".into(),
            workflow: "adhoc".into(),
            run_id: "bench".into(),
            task: "bench".into(),
            attempt: 1,
            logical_time: "1970-01-01T00:00:00Z".into(),
            idempotency_key: "bench/bench".into(),
        };

        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (mut store_t, mut inst_t, mut call_t, mut total_t) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for i in 0..calls + calls / 10 {
                let t0 = Instant::now();
                let wasi = WasiCtxBuilder::new().build();
                let mut store = Store::new(&engine, State { wasi, table: ResourceTable::new() });
                store.set_epoch_deadline(1);
                store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Yield(1)));
                let t1 = Instant::now();
                let instance = pre.instantiate_async(&mut store).await.unwrap();
                let t2 = Instant::now();
                let output = instance
                    .dagr_plugin_task()
                    .call_run(&mut store, &context, r#"{"hello":"world"}"#, "{}")
                    .await
                    .unwrap();
                drop(store);
                let t3 = Instant::now();
                assert!(output.is_ok());
                if i >= calls / 10 {
                    store_t.push(t1 - t0);
                    inst_t.push(t2 - t1);
                    call_t.push(t3 - t2);
                    total_t.push(t3 - t0);
                }
            }
            Floor {
                store: Samples::new(store_t),
                instantiate: Samples::new(inst_t),
                call: Samples::new(call_t),
                total: Samples::new(total_t),
            }
        })
    }
}
