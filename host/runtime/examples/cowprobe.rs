#![allow(clippy::unwrap_used)]
use std::time::Instant;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpView, WasiHttpCtxView};

struct S { wasi: WasiCtx, http: WasiHttpCtx, table: ResourceTable }
impl WasiView for S { fn ctx(&mut self) -> WasiCtxView<'_> { WasiCtxView { ctx: &mut self.wasi, table: &mut self.table } } }
impl WasiHttpView for S { fn http(&mut self) -> WasiHttpCtxView<'_> { WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: wasmtime_wasi_http::default_hooks() } } }

fn main() {
    let path = std::env::args().nth(1).unwrap();
    let variant = std::env::args().nth(2).unwrap_or_default();
    let bytes = std::fs::read(&path).unwrap();
    let slots = 64u32;
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(slots).total_core_instances(slots * 8).total_memories(slots * 2)
        .total_tables(slots * 8).total_stacks(slots).max_memory_size(1 << 30)
        .max_core_instances_per_component(32).max_memories_per_component(4).max_tables_per_component(32)
        .max_component_instance_size(1 << 20).max_core_instance_size(1 << 20).table_elements(100_000)
        .linear_memory_keep_resident(1 << 20).table_keep_resident(64 << 10).pagemap_scan(wasmtime::Enabled::Auto);
    let mut c = Config::new();
    if variant != "ondemand" { c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool)); }
    if variant == "nocow" { c.memory_init_cow(false); }
    if variant == "dense" { c.memory_guaranteed_dense_image_size(256 << 20); }
    c.epoch_interruption(true).max_wasm_stack(1 << 20).async_stack_size(2 << 20);
    let engine = Engine::new(&c).unwrap();
    let t = Instant::now();
    let component = Component::new(&engine, &bytes).unwrap();
    eprintln!("compile {:?}", t.elapsed());
    let mut linker: Linker<S> = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).unwrap();
    linker.define_unknown_imports_as_traps(&component).unwrap();
    let pre = linker.instantiate_pre(&component).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut v = Vec::new();
        for _ in 0..200 {
            let mut store = Store::new(&engine, S { wasi: WasiCtxBuilder::new().build(), http: WasiHttpCtx::new(), table: ResourceTable::new() });
            store.set_epoch_deadline(u64::MAX / 2);
            let t = Instant::now();
            let _i = pre.instantiate_async(&mut store).await.unwrap();
            v.push(t.elapsed());
        }
        v.sort();
        eprintln!("{variant}: instantiate p50 {:?} p99 {:?}", v[100], v[197]);
    });
}
