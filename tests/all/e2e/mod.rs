//! End to end: a real `dagr serve` process, driven over HTTP.
//!
//! Most tests share one server (each with its own workflow names); the ones
//! that kill and restart the server start their own on a data dir that
//! survives the restart. Waits are generous polls, so that a loaded
//! two-core machine slows the tests down without failing them.
//!
//! - Golden cases: `tests/cases/<name>/workflow.yaml` is applied and the
//!   answer compared with `tests/cases/<name>/error.json`; `DAGR_BLESS=1`
//!   rewrites the expected files from what the server says.
//! - Servers are [`DagrServer`]s: a failed test prints the end of its
//!   server's log, and `DAGR_KEEP_TEST_DIRS=1` keeps its data dir.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::api::{Api, PATIENCE, state, task_of, task_state, time_of};
use crate::server::DagrServer;
use crate::support::workspace_root;

mod definitions;
mod schedules;
mod tasks;

pub(crate) use definitions::dag_workflow;

// Servers ---------------------------------------------------------------------------

/// Starts a server of its own (for tests that kill or restart it).
pub(crate) async fn own_server() -> DagrServer {
    tokio::task::spawn_blocking(DagrServer::start).await.unwrap()
}

/// Kills the server (SIGKILL) and starts it again on the same data dir.
pub(crate) async fn restart(server: DagrServer) -> DagrServer {
    tokio::task::spawn_blocking(move || {
        let mut server = server;
        server.restart();
        server
    })
    .await
    .unwrap()
}

/// The server most tests share: started by the first test that needs it,
/// stopped when the last test holding it is done.
async fn shared() -> Arc<DagrServer> {
    static SHARED: tokio::sync::Mutex<Weak<DagrServer>> = tokio::sync::Mutex::const_new(Weak::new());
    let mut slot = SHARED.lock().await;
    if let Some(server) = slot.upgrade() {
        return server;
    }
    let server = Arc::new(own_server().await);
    *slot = Arc::downgrade(&server);
    server
}

impl Api {
    /// A client of the server most tests share.
    pub(crate) async fn shared() -> Api {
        let server = shared().await;
        let mut api = Api::of(&server);
        api.shared = Some(server);
        api
    }
}

// Reading answers ----------------------------------------------------------------------

fn attempts(run: &Value, name: &str) -> i64 {
    task_of(run, name)["attempts"].as_i64().unwrap()
}

/// The attempts of a task detail as (state, failure kind, charged).
fn attempt_summary(task: &Value) -> Vec<(String, Option<String>, bool)> {
    task["attempts_detail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["state"].as_str().unwrap().to_owned(),
                a["failure_kind"].as_str().map(str::to_owned),
                a["charged"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn failed(kind: &str, charged: bool) -> (String, Option<String>, bool) {
    ("failed".into(), Some(kind.into()), charged)
}

fn succeeded() -> (String, Option<String>, bool) {
    ("succeeded".into(), None, false)
}

/// Every task of a run, a page at a time (`GET /v1/runs/{id}/tasks`).
async fn all_tasks(api: &Api, id: &str) -> Vec<Value> {
    let mut tasks = Vec::new();
    let mut path = format!("/v1/runs/{id}/tasks?limit=50");
    loop {
        let page = api.get_ok(&path).await;
        tasks.extend(page["tasks"].as_array().unwrap().iter().cloned());
        match page["next"].as_i64() {
            Some(after) => path = format!("/v1/runs/{id}/tasks?limit=50&after={after}"),
            None => return tasks,
        }
    }
}
