//! The wasmtime engine every attempt runs on: pooling, limits, and the
//! open files a node may hold.

use super::*;
/// Whether a component imports `wasi:filesystem/preopens` (any version).
pub(crate) fn imports_preopens(engine: &Engine, component: &wasmtime::component::Component) -> bool {
    component
        .component_type()
        .imports(engine)
        .any(|(name, _)| name.split('@').next() == Some("wasi:filesystem/preopens"))
}

/// Bytes of each linear memory kept resident between the attempts that use
/// its pool slot, by default ([`RuntimeConfig::memory_keep_resident`]).
pub(crate) const KEEP_RESIDENT: usize = 1 << 20;

/// Descriptors a node keeps for itself beyond its guests' (sockets, the
/// database, logs, the code cache): see [`reserve_descriptors`].
pub const NODE_DESCRIPTORS: u64 = 4096;

/// Raises this process's soft limit of open files towards what `slots`
/// attempts of `max_handles` resources each, plus [`NODE_DESCRIPTORS`] for
/// the node itself, may need, so that tenants' open files cannot exhaust
/// the node's. Returns `Err((have, need))` when the hard limit is lower
/// than that (the node runs; its operator should raise `LimitNOFILE` or
/// lower `[worker] slots` or `max_handles`).
pub fn reserve_descriptors(slots: u32, max_handles: usize) -> std::result::Result<u64, (u64, u64)> {
    let need = u64::from(slots).saturating_mul(max_handles as u64).saturating_add(NODE_DESCRIPTORS);
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write `limit`, a valid,
    // initialised struct on this stack.
    #[allow(unsafe_code)]
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err((0, need));
        }
        let want = (need as libc::rlim_t).min(limit.rlim_max);
        if limit.rlim_cur < want {
            limit.rlim_cur = want;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        }
    }
    let have: u64 = limit.rlim_cur;
    if have >= need { Ok(have) } else { Err((have, need)) }
}

/// Resources an attempt may hold at once by default
/// ([`RuntimeConfig::max_handles`]): as many descriptors as a process gets
/// by default, well under what wasmtime allows (a million).
pub const DEFAULT_MAX_HANDLES: usize = 1024;

/// Bytes one HTTP `fields` resource may take by default
/// ([`RuntimeConfig::http_field_bytes`]): twice what HTTP servers commonly
/// accept as a request's whole header, so that `max_handles` of them stay
/// at 16 MiB.
pub const DEFAULT_HTTP_FIELD_BYTES: usize = 16 << 10;

pub(crate) fn build_engine(config: &RuntimeConfig) -> Result<Engine> {
    // Headroom for `describe` calls and loads that run beside attempts.
    let slots = config.max_concurrent_attempts + 16;
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(slots)
        .total_core_instances(slots.saturating_mul(8))
        .total_memories(slots.saturating_mul(2))
        .total_tables(slots.saturating_mul(8))
        .total_stacks(slots)
        .max_memory_size(config.max_memory_bytes as usize)
        .max_core_instances_per_component(32)
        .max_memories_per_component(4)
        .max_tables_per_component(32)
        .max_component_instance_size(1 << 20)
        .max_core_instance_size(1 << 20)
        .table_elements(100_000)
        // Reset the first pages of a slot's memory and tables with memset
        // (only the pages that were touched, found with PAGEMAP_SCAN where
        // the kernel has it) instead of madvise: a small task then neither
        // faults its pages in again nor makes every core flush its TLB.
        .linear_memory_keep_resident(config.memory_keep_resident)
        .table_keep_resident(64 << 10)
        .pagemap_scan(wasmtime::Enabled::Auto);

    let mut wasm = wasmtime::Config::new();
    if config.pooling {
        wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    } else {
        wasm.allocation_strategy(InstanceAllocationStrategy::OnDemand)
            .memory_reservation(0)
            .memory_guard_size(64 << 10)
            .memory_reservation_for_growth(16 << 20);
    }
    wasm.epoch_interruption(true)
        .consume_fuel(config.fuel)
        .wasm_component_model(true)
        .max_wasm_stack(1 << 20)
        .async_stack_size(2 << 20);
    Engine::new(&wasm).map_err(|e| Error::Config(format!("cannot create the wasmtime engine: {}", error_chain(&e))))
}

/// Lowers the calling thread's scheduling priority (Linux: per-thread nice).
pub(crate) fn lower_thread_priority(nice: i32) {
    if nice == 0 {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: `gettid` has no preconditions; `setpriority` on our own thread
    // id only changes this thread's niceness, and its failure is harmless.
    #[allow(unsafe_code)]
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
    }
}
