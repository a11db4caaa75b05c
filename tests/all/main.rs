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
//! - `contract`: Schemathesis against `/openapi.json` of a real `dagr
//!   serve`, with a tenant's token, the admin token and none.
//! - `hostile_api`: hostile documents (alias bombs, deep nesting) and log
//!   lines PostgreSQL cannot hold, against a real `dagr serve`.
//! - `registry`: tenants' plugins (upload, versions, deletion, the limits
//!   of the compiling child) against a real `dagr serve`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod server;
mod support;

mod cli;
mod cli_client;
mod cluster;
mod contract;
mod e2e;
mod hostile_api;
mod plugins;
mod registry;
mod runtime;
mod tenancy;
