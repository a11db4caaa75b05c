//! dagr's integration tests, in one binary so that it links once.
//!
//! - `support`: helpers every module may use (runtimes, plugins, a local
//!   HTTP server, the `dagr` binary, reading attempt reports).
//! - `runtime`: loading, the code cache, limits, the hostile suite, secrets,
//!   concurrency and cancellation, with real components.
//! - `plugins`: each built-in plugin's happy path and error cases.
//! - `cli`: the `dagr` binary.
//! - `tenancy`: tokens, the isolation matrix over every route, secrets,
//!   runs per minute and the tenancy CLI verbs, against a real `dagr serve`.
//! - `polyglot`: plugin projects in Rust, Python and JavaScript from `dagr
//!   plugin new` to a workflow; the examples; all languages in one DAG.
//! - `hostile_guests`: the hostile suite in Python and JavaScript.
//! - `sdks`: the Python and JS SDKs' own tests and their WIT contract.
//! - `projects`: helpers for Python and JS projects (toolchains, builds).
//! - `registry`: tenants' plugins (upload, versions, deletion, the limits
//!   of the compiling child) against a real `dagr serve`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod projects;
mod server;
mod support;

mod cli;
mod cli_client;
mod cluster;
mod e2e;
mod hostile_guests;
mod plugins;
mod polyglot;
mod registry;
mod runtime;
mod sdks;
mod tenancy;
