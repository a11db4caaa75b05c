//! `dagr sim`: the deterministic simulation of a cluster
//! ([`dagr_master::sim`]) over many seeds, on every core, or one seed
//! with its whole trace.

use std::collections::HashSet;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use clap::Args;
use dagr_master::sim::{self, FaultMix, Faults, SimConfig};

#[derive(Debug, Args)]
pub struct SimArgs {
    /// Run this one seed (with --trace: print every step).
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Run this many seeds (from --from), stopping at the first failure.
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    /// The first seed of --seeds.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Threads (default: every core).
    #[arg(long)]
    jobs: Option<usize>,
    /// With --seed: print the whole trace.
    #[arg(long, requires = "seed")]
    trace: bool,
    #[arg(long, default_value_t = 3)]
    masters: usize,
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// Attempts each worker runs at once.
    #[arg(long, default_value_t = 4)]
    slots: u32,
    /// Runs triggered per seed (besides the scheduled ones).
    #[arg(long, default_value_t = 8)]
    runs: usize,
    /// Inject no faults (the simulation of a healthy cluster).
    #[arg(long)]
    no_faults: bool,
    /// Who grants worker slots: each master (`local`) or the elected
    /// leader (`leader`, Buffalo's resource scheduler).
    #[arg(long, default_value = "local")]
    resources: dagr_master::Resources,
    /// Every fourth run is a second tenant's, whose `max_concurrent` (2) the
    /// checker holds the workers to (off by default: it changes every
    /// seed's path).
    #[arg(long)]
    tenant_cap: bool,
    /// Every fourth run is of a workflow with `concurrency: 2` (four
    /// parallel tasks), whose attempts at once the checker counts on the
    /// workers (off by default: it changes every seed's path).
    #[arg(long)]
    concurrency: bool,
    /// Every fourth run is a pair of the outer DAG: a run waiting for
    /// another workflow's run of its logical time (made up to 3 s before or
    /// after it), whose tasks the checker holds until that run has ended;
    /// and every fourth a run whose task runs another workflow as a child
    /// run, which the task must end with (off by default: it changes
    /// every seed's path).
    #[arg(long)]
    outer: bool,
    /// Every fourth run is a pair of a run and a run of `gate`: a task of
    /// it waits for that run (a task-level wait), another is a sensor, and
    /// the run has a timeout that many of its runs reach (off by default:
    /// it changes every seed's path; with `--tenant-cap`, in place of the
    /// capped tenant's runs).
    #[arg(long)]
    gates: bool,
}

pub fn run(args: SimArgs) -> anyhow::Result<ExitCode> {
    let config = SimConfig {
        masters: args.masters.max(1),
        workers: args.workers.max(1),
        slots: args.slots.max(1),
        runs: args.runs,
        faults: if args.no_faults { FaultMix::none() } else { FaultMix::standard() },
        resources: args.resources,
        capped_tenant: args.tenant_cap,
        workflow_concurrency: args.concurrency,
        outer: args.outer,
        gates: args.gates,
        ..SimConfig::default()
    };
    if let Some(seed) = args.seed {
        return Ok(one(seed, &config, args.trace));
    }
    many(&args, &config)
}

fn one(seed: u64, config: &SimConfig, trace: bool) -> ExitCode {
    let (outcome, lines) = if trace { sim::run_traced(seed, config) } else { (sim::run(seed, config), Vec::new()) };
    for line in &lines {
        println!("{line}");
    }
    match outcome {
        Ok(report) => {
            println!("seed {seed}: every invariant held. {report:?}");
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("{failure}");
            explain(seed, config);
            ExitCode::FAILURE
        }
    }
}

/// Says which faults the failure needs (the seed again with fewer kinds).
fn explain(seed: u64, config: &SimConfig) {
    if let Some((mix, failure)) = sim::shrink(seed, config) {
        eprintln!("seed {seed} still fails with only these faults: {mix:?}");
        eprintln!("  then: {}", failure.invariant);
    }
}

/// What the threads share.
#[derive(Default)]
struct Tally {
    done: AtomicU64,
    steps: AtomicU64,
    sim_ms: AtomicU64,
    over_limit: AtomicU64,
    kept_results: AtomicU64,
    never_received: AtomicU64,
    faults: Mutex<Faults>,
    paths: Mutex<HashSet<u64>>,
    failure: Mutex<Option<sim::Failure>>,
    stop: AtomicBool,
}

fn many(args: &SimArgs, config: &SimConfig) -> anyhow::Result<ExitCode> {
    let jobs = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let next = Arc::new(AtomicU64::new(args.from));
    let end = args.from.saturating_add(args.seeds);
    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let threads: Vec<_> = (0..jobs)
        .map(|_| {
            let (next, tally, config) = (next.clone(), tally.clone(), config.clone());
            std::thread::spawn(move || {
                while !tally.stop.load(Ordering::Relaxed) {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= end {
                        return;
                    }
                    match sim::run(seed, &config) {
                        Ok(report) => {
                            tally.done.fetch_add(1, Ordering::Relaxed);
                            tally.steps.fetch_add(report.steps, Ordering::Relaxed);
                            tally.sim_ms.fetch_add(report.sim_ms as u64, Ordering::Relaxed);
                            tally.over_limit.fetch_add(report.over_limit, Ordering::Relaxed);
                            tally.kept_results.fetch_add(report.kept_results, Ordering::Relaxed);
                            tally.never_received.fetch_add(report.never_received, Ordering::Relaxed);
                            tally.faults.lock().unwrap_or_else(|e| e.into_inner()).add(&report.faults);
                            tally.paths.lock().unwrap_or_else(|e| e.into_inner()).insert(report.path);
                        }
                        Err(failure) => {
                            tally.stop.store(true, Ordering::Relaxed);
                            let mut first = tally.failure.lock().unwrap_or_else(|e| e.into_inner());
                            if first.as_ref().is_none_or(|f| f.seed > failure.seed) {
                                *first = Some(failure);
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let done = tally.done.load(Ordering::Relaxed);
    let per_second = done as f64 / elapsed.max(1e-9);
    let faults = tally.faults.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let paths = tally.paths.lock().unwrap_or_else(|e| e.into_inner()).len();
    println!(
        "{done} seeds passed in {elapsed:.1} s on {jobs} threads: {per_second:.1} seeds/s, {:.0} per hour; {} engine \
         steps, {:.0} simulated minutes; {paths} distinct paths",
        per_second * 3600.0,
        tally.steps.load(Ordering::Relaxed),
        tally.sim_ms.load(Ordering::Relaxed) as f64 / 60_000.0,
    );
    println!("faults injected: {faults:?}");
    println!(
        "workers asked about attempts they no longer ran: {} results kept after a stale acknowledgement given to \
         the master that asked; {} attempts they vouched never reached them under their lease",
        tally.kept_results.load(Ordering::Relaxed),
        tally.never_received.load(Ordering::Relaxed),
    );
    let over = tally.over_limit.load(Ordering::Relaxed);
    if over > 0 {
        println!(
            "{over} admissions (or attempt starts) refused by the store: their workflow's runs were at its \
             max_active_runs, their backfill's at its parallelism, or another master held an active run of their \
             tenant in their slot under a limit counted per slot (a master's count missed a run another master \
             had started)"
        );
    }
    match tally.failure.lock().unwrap_or_else(|e| e.into_inner()).take() {
        Some(failure) => {
            eprintln!("{failure}");
            explain(failure.seed, config);
            Ok(ExitCode::FAILURE)
        }
        None => Ok(ExitCode::SUCCESS),
    }
}
