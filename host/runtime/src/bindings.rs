//! The one place where the `dagr:plugin` world is turned into Rust.
//!
//! `wit/` holds the only copy of the contract; every other module imports the
//! generated types from here.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "plugin",
    // `run` may block on async host I/O (wasi:http, timers); it runs on a
    // fiber so that the guest runtime's threads are never blocked.
    exports: { default: async },
});

pub(crate) use self::dagr::plugin::types::{Level, PluginInfo, TaskContext, TaskError};
