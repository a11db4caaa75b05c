//! dagr's integration tests, in one binary so that it links once.
//!
//! - `support`: helpers every module may use (runtimes, plugins, a local
//!   HTTP server, the `dagr` binary, reading attempt reports).
//! - `runtime`: loading, the code cache, limits, the hostile suite, secrets,
//!   concurrency and cancellation, with real components.
//! - `plugins`: each built-in plugin's happy path and error cases.
//! - `cli`: the `dagr` binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod server;
mod support;

mod cli;
mod cli_client;
mod cluster;
mod e2e;
mod plugins;
mod runtime;
