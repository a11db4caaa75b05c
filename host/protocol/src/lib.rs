//! dagr's wire types.
//!
//! # Brief overview
//!
//! - [`wire`]: what masters and workers say to each other: an
//!   [`AttemptSpec`](wire::AttemptSpec) to run, an
//!   [`AttemptResult`](wire::AttemptResult) back. In `dagr serve` they travel
//!   through channels in one process; in a cluster, over HTTP. The types are
//!   the same, so swapping the transport changes nothing else.
//! - [`api`]: the public REST DTOs, shared by the server (which also
//!   generates the OpenAPI document from them) and the CLI.
//! - [`plugins`]: the plugin directory the API validates against and the
//!   engine resolves plugins with.
//! - [`sealed`]: tenants' secrets sealed at rest (ChaCha20-Poly1305),
//!   sealed by the API and opened by workers.
//! - [`commands`]: the typed [`Command`](commands::Command)s the API writes
//!   and the engine consumes.
//! - [`control`]: how the API reaches the engine (wake it, wait for a
//!   command or a run), whether in-process or over the store.

pub mod api;
pub mod commands;
pub mod control;
pub mod plugins;
pub mod sealed;
pub mod sharding;
pub mod tenancy;
pub mod wire;

pub use dagr_core::slots::{SLOTS, slot_of};

/// The wall clock, in milliseconds since the Unix epoch: read at the edges
/// (the API, the engine's shell, workers), never inside a decision.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
