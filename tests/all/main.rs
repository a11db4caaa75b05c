//! dagr's integration tests, in one binary so that it links once.
//!
//! - `support`: helpers every module may use (runtimes, plugins, a local
//!   HTTP server, the `dagr` binary, reading attempt reports); `server`: a
//!   real `dagr serve` process; `api`: the one HTTP client of dagr's API
//!   (requests, answers, waiting on runs).
//! - `runtime`: loading, the code cache, limits, the hostile suite, secrets,
//!   concurrency and cancellation, with real components.
//! - `plugins`: each built-in plugin's happy path and error cases.
//! - `cli` and `cli_client`: the `dagr` binary, its local verbs and its
//!   client verbs against a server.
//! - `e2e`: runs end to end on `dagr serve` (DAGs, retries, timeouts,
//!   trigger rules, operator actions, backfills, catch-up, kill -9, golden
//!   validation cases, the datasets).
//! - `outer`: the outer DAG (workflows waiting for workflows), sub-workflows
//!   and control nodes on `dagr serve`; `outer_control`: reruns and
//!   re-flushes in order, sensors (1,000 on two slots), run timeouts,
//!   pause reaching a child, recursion refused.
//! - `cluster`: real masters and workers on PostgreSQL and etcd, with real
//!   failures (kill -9, SIGSTOP, etcd and PostgreSQL restarts) and the chaos
//!   soak.
//! - `events`: the event stream (SSE and pages) followed, resumed across a
//!   `kill -9`, kept to its tenant; `dagr events`.
//! - `alerts`: alert mail through a real SMTP server (aiosmtpd), grouped;
//!   a Slack-compatible receiver; bad rules refused.
//! - `webhooks`: signed deliveries in order through a failing receiver
//!   and a `kill -9`, the delivery log, disabling, the network rule.
//! - `tenancy`: tokens, the isolation matrix over every route, secrets,
//!   runs per minute and the tenancy CLI verbs, against a real `dagr serve`.
//! - `contract`: Schemathesis against `/openapi.json` of a real `dagr
//!   serve`, with a tenant's token, the admin token and none.
//! - `hostile_api`: hostile documents (alias bombs, deep nesting) and log
//!   lines PostgreSQL cannot hold, against a real `dagr serve`.
//! - `polyglot`: plugin projects in Rust, Python and JavaScript from `dagr
//!   plugin new` to a workflow; the examples; all languages in one DAG.
//! - `hostile_guests`: the hostile suite in Python and JavaScript;
//!   `hostile_host`: what a guest can make the host hold (deep directory
//!   chains, descriptors, HTTP header resources, files), within limits.
//! - `sdks`: the Python and JS SDKs' own tests and their WIT contract.
//! - `projects`: helpers for Python and JS projects (toolchains, builds).
//! - `tls`: mutual TLS between a cluster's nodes, and `dagr cert`.
//! - `rotation`: re-sealing secrets under a new key (`dagr secret
//!   rotate`), on SQLite and PostgreSQL, through a `kill -9`.
//! - `fuzz_api`: hostile bodies and query strings on every route of a
//!   real `dagr serve`: never a 5xx.
//! - `sim`: the simulation's model store checked against PostgreSQL.
//! - `traces`: spans over OTLP/HTTP to a receiver in the test, one trace
//!   per run from trigger to result, on one node and across a cluster.
//! - `archive`: hot and cold data — runs carried over to cold partitions,
//!   read and acted on there, kept apart by tenant, through repeated `kill -9`.
//! - `registry`: tenants' plugins (upload, versions, deletion, the limits
//!   of the compiling child) against a real `dagr serve`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod alerts;
mod api;
mod archive;
mod browser;
mod projects;
mod server;
mod support;

mod cli;
mod cli_client;
mod cluster;
mod cluster_resources;
mod contract;
mod e2e;
mod events;
mod fuzz_api;
mod hostile_api;
mod hostile_guests;
mod hostile_host;
mod outer;
mod outer_control;
mod plugins;
mod polyglot;
mod registry;
mod rotation;
mod runtime;
mod sdks;
mod sim;
mod tenancy;
mod tls;
mod traces;
mod ui;
mod ui_bench;
mod webhooks;
