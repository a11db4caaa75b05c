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

// 1. Data passing ----------------------------------------------------------------------

#[tokio::test]
async fn a_diamond_passes_outputs_as_inputs_and_through_templates() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-diamond
params: {x: default-x, n: 10}
tasks:
- name: a
  plugin: echo
  params: {who: "{{ params.x }}", day: "{{ ds }}", v: 7}
- name: b
  plugin: echo
  depends_on: [a]
  params: {from_a: "{{ inputs.a.params.v }}", text: "a said {{ inputs.a.params.who }}"}
- name: c
  plugin: fib
  depends_on: [a]
  params: {n: "{{ params.n }}"}
- name: d
  plugin: transform
  depends_on: [b, c]
  params:
    filter: '{b: .inputs.b.params, fib: .inputs.c.value, day: .vars.day}'
    vars: {day: "{{ ds_nodash }}"}
"#,
    )
    .await;
    let id =
        api.trigger("e2e-diamond", json!({"params": {"x": "override"}, "logical_time": "2026-03-04T05:06:07Z"})).await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    assert_eq!(run["params"], json!({"x": "override", "n": 10}));
    assert_eq!(run["logical_time"], "2026-03-04T05:06:07.000Z");

    let a = api.task(&id, "a").await;
    assert_eq!(a["output"], json!({"params": {"who": "override", "day": "2026-03-04", "v": 7}, "inputs": {}}));
    // b sees a's whole output under a's name; a whole-string template keeps
    // the JSON type (7 stays a number).
    let b = api.task(&id, "b").await;
    assert_eq!(
        b["output"],
        json!({
            "params": {"from_a": 7, "text": "a said override"},
            "inputs": {"a": a["output"].clone()},
        })
    );
    let c = api.task(&id, "c").await;
    assert_eq!(c["output"], json!({"n": 10, "value": 55}));
    let d = api.task(&id, "d").await;
    assert_eq!(d["output"], json!({"b": {"from_a": 7, "text": "a said override"}, "fib": 55, "day": "20260304"}));
    assert_eq!(task_of(&run, "d")["depends_on"], json!(["b", "c"]));
}

// 2–4. Retries, exhaustion, timeouts ------------------------------------------------

#[tokio::test]
async fn a_big_output_reaches_a_dependent_started_in_the_same_step() {
    // Outputs over 64 KiB are not kept in memory; the dependent starts in
    // the step that records its upstream's output, before that is committed.
    let api = Api::shared().await;
    let blob = "x".repeat(100 << 10);
    api.apply(&format!(
        r#"
name: e2e-big-output
tasks:
- name: a
  plugin: echo
  params: {{blob: "{blob}"}}
- name: b
  plugin: transform
  depends_on: [a]
  params: {{filter: '.inputs.a.params.blob | length'}}
"#
    ))
    .await;
    let id = api.trigger("e2e-big-output", json!({})).await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    assert_eq!(api.task(&id, "b").await["output"], json!(100 << 10));
}

#[tokio::test]
async fn a_retryable_failure_is_retried_until_it_succeeds() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-retries
tasks:
- name: flaky
  plugin: fail
  params: {mode: retryable, attempts: 2}
  retries: 2
  retry_backoff: {kind: fixed, delay: 0s}
- name: after
  plugin: echo
  depends_on: [flaky]
"#,
    )
    .await;
    let id = api.trigger("e2e-retries", json!({})).await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    let flaky = api.task(&id, "flaky").await;
    assert_eq!(flaky["state"], "succeeded");
    assert_eq!(flaky["attempts"], 3);
    assert_eq!(flaky["failures"], 2);
    assert_eq!(flaky["output"], json!({"succeeded_on_attempt": 3}));
    assert_eq!(attempt_summary(&flaky), vec![failed("retryable", true), failed("retryable", true), succeeded()]);
    let numbers: Vec<i64> =
        flaky["attempts_detail"].as_array().unwrap().iter().map(|a| a["number"].as_i64().unwrap()).collect();
    assert_eq!(numbers, vec![1, 2, 3]);
    assert_eq!(attempts(&run, "after"), 1);
}

#[tokio::test]
async fn exhausted_retries_fail_the_task_its_downstream_and_the_run() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-exhausted
tasks:
- name: broken
  plugin: fail
  params: {mode: retryable, message: always broken}
  retries: 1
  retry_backoff: {kind: fixed, delay: 10ms}
- name: next
  plugin: echo
  depends_on: [broken]
- name: last
  plugin: echo
  depends_on: [next]
"#,
    )
    .await;
    let id = api.trigger("e2e-exhausted", json!({})).await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "failed", "{run:#}");
    assert_eq!(task_state(&run, "broken"), "failed");
    assert_eq!(task_state(&run, "next"), "upstream_failed");
    assert_eq!(task_state(&run, "last"), "upstream_failed");
    assert_eq!(attempts(&run, "next"), 0);
    let broken = api.task(&id, "broken").await;
    assert_eq!(broken["attempts"], 2, "retries: 1 means two attempts");
    assert_eq!(broken["failures"], 2);
    assert_eq!(attempt_summary(&broken), vec![failed("retryable", true), failed("retryable", true)]);
    let error = broken["error"].as_str().unwrap_or_default();
    assert!(error.contains("always broken"), "error: {error}");
    assert!(broken.get("output").is_none(), "{broken:#}");
}

#[tokio::test]
async fn an_attempt_past_its_timeout_fails_as_timeout() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-timeout
tasks:
- {name: slow, plugin: sleep, params: {ms: 10000}, timeout: 500ms}
"#,
    )
    .await;
    let id = api.trigger("e2e-timeout", json!({})).await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "failed", "{run:#}");
    let slow = api.task(&id, "slow").await;
    assert_eq!(slow["state"], "failed");
    assert_eq!(attempt_summary(&slow), vec![failed("timeout", true)]);
}

// 5. Trigger rules -------------------------------------------------------------------------

#[tokio::test]
async fn trigger_rules_decide_from_how_upstream_ended() {
    let api = Api::shared().await;
    // Each rule, behind (ok, bad) and behind (ok, ok2); none_failed and
    // all_success also behind a skipped task.
    api.apply(
        r#"
name: e2e-rules
tasks:
- {name: ok, plugin: echo}
- {name: ok2, plugin: echo}
- {name: bad, plugin: fail, params: {mode: fatal}}
- {name: mixed-all-success, plugin: echo, depends_on: [ok, bad], trigger_rule: all_success}
- {name: mixed-all-done, plugin: echo, depends_on: [ok, bad], trigger_rule: all_done}
- {name: mixed-one-failed, plugin: echo, depends_on: [ok, bad], trigger_rule: one_failed}
- {name: mixed-none-failed, plugin: echo, depends_on: [ok, bad], trigger_rule: none_failed}
- {name: good-all-success, plugin: echo, depends_on: [ok, ok2], trigger_rule: all_success}
- {name: good-all-done, plugin: echo, depends_on: [ok, ok2], trigger_rule: all_done}
- {name: good-one-failed, plugin: echo, depends_on: [ok, ok2], trigger_rule: one_failed}
- {name: good-none-failed, plugin: echo, depends_on: [ok, ok2], trigger_rule: none_failed}
- {name: after-skip-none-failed, plugin: echo, depends_on: [ok, good-one-failed], trigger_rule: none_failed}
- {name: after-skip-all-success, plugin: echo, depends_on: [ok, good-one-failed]}
"#,
    )
    .await;
    let id = api.trigger("e2e-rules", json!({})).await;
    let run = api.finished(&id).await;
    let expected = [
        ("ok", "succeeded", 1),
        ("ok2", "succeeded", 1),
        ("bad", "failed", 1),
        ("mixed-all-success", "upstream_failed", 0),
        ("mixed-all-done", "succeeded", 1),
        ("mixed-one-failed", "succeeded", 1),
        ("mixed-none-failed", "upstream_failed", 0),
        ("good-all-success", "succeeded", 1),
        ("good-all-done", "succeeded", 1),
        ("good-one-failed", "skipped", 0),
        ("good-none-failed", "succeeded", 1),
        ("after-skip-none-failed", "succeeded", 1),
        ("after-skip-all-success", "skipped", 0),
    ];
    let got: Vec<(String, String, i64)> = expected
        .iter()
        .map(|(name, _, _)| (name.to_string(), task_state(&run, name).to_owned(), attempts(&run, name)))
        .collect();
    let want: Vec<(String, String, i64)> =
        expected.iter().map(|(n, s, a)| (n.to_string(), s.to_string(), *a)).collect();
    assert_eq!(got, want, "{run:#}");
    // A failed task fails the run, whatever ran after it.
    assert_eq!(state(&run), "failed");
    // all_done and one_failed tasks get the outputs of the upstream that succeeded.
    let all_done = api.task(&id, "mixed-all-done").await;
    assert_eq!(all_done["output"]["inputs"], json!({"ok": {"params": {}, "inputs": {}}}));
}

// 6–7. Kill, pause and resume ------------------------------------------------------------

#[tokio::test]
async fn killing_a_run_cancels_its_running_attempt() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-kill
tasks:
- {name: long, plugin: sleep, params: {ms: 60000}}
- {name: never, plugin: echo, depends_on: [long]}
"#,
    )
    .await;
    let id = api.trigger("e2e-kill", json!({})).await;
    api.wait_task(&id, "long", "running").await;
    let killed = api.act_ok(&id, "kill").await;
    assert_eq!(killed["run"]["state"], "killed", "{killed:#}");
    let run = api.run(&id).await;
    assert_eq!(state(&run), "killed");
    assert_eq!(task_state(&run, "long"), "killed");
    assert_eq!(task_state(&run, "never"), "killed");
    assert_eq!(attempts(&run, "never"), 0);
    // A killed run cannot be killed again.
    let (status, body) = api.act(&id, "kill").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["code"], "conflict");
    // The attempt itself ends soon after (the plugin checks for cancellation
    // every 50 ms), not after its 60 s; "soon" is generous here.
    let deadline = Instant::now() + Duration::from_secs(30);
    let long = loop {
        let long = api.task(&id, "long").await;
        if long["attempts_detail"][0]["state"] != "running" {
            break long;
        }
        assert!(Instant::now() < deadline, "30 s after the kill, the attempt is still recorded as running: {long:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let attempt = &long["attempts_detail"][0];
    assert_eq!(attempt["state"], "failed", "{long:#}");
    assert_eq!(attempt["failure_kind"], "cancelled", "{long:#}");
    let ran = time_of(&attempt["finished_at"]) - time_of(&attempt["started_at"]);
    assert!(ran < chrono::Duration::seconds(30), "the cancelled attempt ran for {ran} of its 60 s");
    // The cancelled attempt's result arrived after the kill and was ignored
    // by the run: it did not count against the retry budget, and its
    // `charged` (documented as "whether a failure counted against the retry
    // budget") must say so.
    assert_eq!(long["failures"], 0, "{long:#}");
    assert_eq!(
        attempt["charged"], false,
        "the attempt of a killed task reports charged=true, yet the task's failures stayed 0: {long:#}"
    );
}

#[tokio::test]
async fn a_paused_run_starts_nothing_until_resumed() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-pause
tasks:
- {name: first, plugin: sleep, params: {ms: 3000}}
- {name: second, plugin: echo, depends_on: [first]}
"#,
    )
    .await;
    let id = api.trigger("e2e-pause", json!({})).await;
    api.wait_task(&id, "first", "running").await;
    let paused = api.act_ok(&id, "pause").await;
    assert_eq!(paused["run"]["state"], "paused");
    // The running task finishes; the next one is ready but does not start.
    let run = api.wait_task(&id, "first", "succeeded").await;
    assert_eq!(state(&run), "paused");
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let run = api.run(&id).await;
        assert_eq!(state(&run), "paused");
        assert_eq!(task_state(&run, "second"), "queued", "{run:#}");
        assert_eq!(attempts(&run, "second"), 0);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Pausing twice is refused; resuming continues.
    let (status, _) = api.act(&id, "pause").await;
    assert_eq!(status, StatusCode::CONFLICT);
    api.act_ok(&id, "resume").await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    assert_eq!(attempts(&run, "second"), 1);
    let (status, _) = api.act(&id, "resume").await;
    assert_eq!(status, StatusCode::CONFLICT);
}

// 8–9. Reruns and force-success ------------------------------------------------------------

#[tokio::test]
async fn rerun_from_failed_reruns_only_the_failed_part() {
    let api = Api::shared().await;
    // `bad` fails its first attempt only, fatally (no retry in the run).
    api.apply(
        r#"
name: e2e-rerun-failed
tasks:
- {name: root, plugin: echo}
- {name: good, plugin: echo, depends_on: [root]}
- {name: good-after, plugin: echo, depends_on: [good]}
- {name: bad, plugin: fail, params: {mode: fatal, attempts: 1}, retries: 0, depends_on: [root]}
- {name: bad-after, plugin: echo, depends_on: [bad]}
- {name: join, plugin: echo, depends_on: [good-after, bad-after]}
- {name: side, plugin: echo}
"#,
    )
    .await;
    let id = api.trigger("e2e-rerun-failed", json!({})).await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "failed", "{run:#}");
    assert_eq!(task_state(&run, "bad"), "failed");
    assert_eq!(task_state(&run, "bad-after"), "upstream_failed");
    assert_eq!(task_state(&run, "join"), "upstream_failed");

    let rerun = api.act_ok(&id, "rerun").await;
    assert_eq!(rerun["run"]["state"], "running", "{rerun:#}");
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    let counts: BTreeMap<&str, i64> = ["root", "good", "good-after", "bad", "bad-after", "join", "side"]
        .into_iter()
        .map(|t| (t, attempts(&run, t)))
        .collect();
    let expected: BTreeMap<&str, i64> =
        [("root", 1), ("good", 1), ("good-after", 1), ("side", 1), ("bad", 2), ("bad-after", 1), ("join", 1)]
            .into_iter()
            .collect();
    assert_eq!(counts, expected, "{run:#}");
    let bad = api.task(&id, "bad").await;
    assert_eq!(attempt_summary(&bad), vec![failed("fatal", true), succeeded()]);
    assert_eq!(bad["output"], json!({"succeeded_on_attempt": 2}));
    // join got both inputs, the rerun one included.
    let join = api.task(&id, "join").await;
    assert_eq!(join["output"]["inputs"]["bad-after"]["inputs"]["bad"], json!({"succeeded_on_attempt": 2}));
    // Nothing failed now: a second rerun re-flushes the whole run (the
    // outer DAG's data re-flush), every task once more.
    let again = api.act_ok(&id, "rerun").await;
    assert_eq!(again["message"], "reflush done", "{again:#}");
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    assert_eq!(attempts(&run, "root"), 2, "{run:#}");
    assert_eq!(attempts(&run, "bad"), 3, "{run:#}");
}

#[tokio::test]
async fn rerunning_one_task_with_and_without_downstream() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-rerun-task
tasks:
- {name: x, plugin: echo}
- {name: y, plugin: echo, depends_on: [x]}
- {name: z, plugin: echo, depends_on: [y]}
"#,
    )
    .await;
    let id = api.trigger("e2e-rerun-task", json!({})).await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded");

    let path = format!("/v1/runs/{id}/tasks/y/rerun");
    let (status, body) = api.post(&path, json!({"downstream": false})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run = api.wait_run(&id, "y to run again", |r| state(r) == "succeeded" && attempts(r, "y") == 2).await;
    assert_eq!((attempts(&run, "x"), attempts(&run, "y"), attempts(&run, "z")), (1, 2, 1), "{run:#}");

    let (status, body) = api.post(&path, json!({"downstream": true})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run = api.wait_run(&id, "y and z to run again", |r| state(r) == "succeeded" && attempts(r, "z") == 2).await;
    assert_eq!((attempts(&run, "x"), attempts(&run, "y"), attempts(&run, "z")), (1, 3, 2), "{run:#}");
    let (status, body) = api.post(&format!("/v1/runs/{id}/tasks/nope/rerun"), json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn force_success_lets_the_downstream_run_and_the_run_succeed() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-force
tasks:
- {name: broken, plugin: fail, params: {mode: fatal}}
- {name: fine, plugin: echo}
- {name: after, plugin: echo, depends_on: [broken, fine]}
"#,
    )
    .await;
    let id = api.trigger("e2e-force", json!({})).await;
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "failed");
    assert_eq!(task_state(&run, "after"), "upstream_failed");
    // Only a failed task can be forced.
    let (status, _) = api.post(&format!("/v1/runs/{id}/tasks/fine/force-success"), json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT);

    let (status, body) = api.post(&format!("/v1/runs/{id}/tasks/broken/force-success"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    let broken = task_of(&run, "broken");
    assert_eq!(broken["state"], "succeeded");
    assert_eq!(broken["forced"], true);
    assert_eq!(broken["attempts"], 1, "forcing does not run the task");
    assert_eq!(task_state(&run, "after"), "succeeded");
    assert_eq!(attempts(&run, "after"), 1);
    assert_eq!(attempts(&run, "fine"), 1);
}

// 10. Backfills --------------------------------------------------------------------------

fn ten_days() -> Vec<String> {
    (1..=10).map(|d| format!("2026-01-{d:02}T00:00:00.000Z")).collect()
}

/// Waits until every run of the backfill has finished; returns them by
/// logical time.
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

async fn finished_backfill(api: &Api, id: &str) -> Vec<Value> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let view = api.get_ok(&format!("/v1/backfills/{id}")).await;
        let runs = view["runs"].as_array().unwrap().clone();
        if runs.iter().all(|r| matches!(state(r), "succeeded" | "failed" | "killed")) {
            return runs;
        }
        assert!(Instant::now() < deadline, "the backfill never finished: {view:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The most runs that were running at the same moment.
fn max_overlap(runs: &[Value]) -> usize {
    let mut edges: Vec<(DateTime<Utc>, i32)> = Vec::new();
    for r in runs {
        edges.push((time_of(&r["started_at"]), 1));
        edges.push((time_of(&r["finished_at"]), -1));
    }
    // At equal times, an end comes before a start: touching is not overlapping.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        now += delta;
        most = most.max(now);
    }
    most as usize
}

#[tokio::test]
async fn backfills_create_one_run_per_day_serially_or_in_parallel() {
    let api = Api::shared().await;
    for name in ["e2e-backfill-serial", "e2e-backfill-parallel"] {
        api.apply(&format!(
            r#"
name: {name}
schedule: {{cron: "0 0 * * *"}}
tasks:
- {{name: nap, plugin: sleep, params: {{ms: 300}}}}
- {{name: day, plugin: echo, depends_on: [nap], params: {{ds: "{{{{ ds }}}}"}}}}
"#
        ))
        .await;
    }
    let request = |name: &str, parallel: u32| json!({"workflow": name, "from": "2026-01-01", "to": "2026-01-10", "parallel": parallel});
    let (status, serial) = api.post("/v1/backfills", request("e2e-backfill-serial", 1)).await;
    assert_eq!(status, StatusCode::CREATED, "{serial}");
    let (status, parallel) = api.post("/v1/backfills", request("e2e-backfill-parallel", 4)).await;
    assert_eq!(status, StatusCode::CREATED, "{parallel}");
    for view in [&serial, &parallel] {
        assert_eq!(view["total"], 10, "{view:#}");
        assert_eq!(view["runs"].as_array().unwrap().len(), 10, "{view:#}");
        assert!(view.get("skipped").is_none(), "{view:#}");
    }

    for (view, parallelism) in [(&serial, 1), (&parallel, 4)] {
        let runs = finished_backfill(&api, view["id"].as_str().unwrap()).await;
        let times: Vec<&str> = runs.iter().map(|r| r["logical_time"].as_str().unwrap()).collect();
        assert_eq!(times, ten_days(), "{runs:#?}");
        for r in &runs {
            assert_eq!(state(r), "succeeded", "{r:#}");
            assert_eq!(r["kind"], "backfill");
            assert_eq!(r["backfill_id"], view["id"]);
        }
        // Each run saw its own logical date.
        for r in &runs {
            let id = r["id"].as_str().unwrap();
            let day = api.task(id, "day").await;
            let ds = &r["logical_time"].as_str().unwrap()[..10];
            assert_eq!(day["output"]["params"]["ds"], ds);
        }
        let overlap = max_overlap(&runs);
        assert!(overlap <= parallelism, "parallel {parallelism}, but {overlap} runs overlapped: {runs:#?}");
        if parallelism == 1 {
            // One after another, in logical-time order.
            for pair in runs.windows(2) {
                assert!(time_of(&pair[1]["started_at"]) >= time_of(&pair[0]["finished_at"]), "runs overlap: {pair:#?}");
            }
        } else {
            // Admitted together: the first four started before any finished.
            assert!(overlap >= 2, "the parallel backfill ran serially: {runs:#?}");
        }
    }

    // The same range again: every day has its run already.
    let (status, again) = api.post("/v1/backfills", request("e2e-backfill-serial", 1)).await;
    assert_eq!(status, StatusCode::CREATED, "{again}");
    assert_eq!(again["runs"], json!([]), "{again:#}");
    let skipped: Vec<String> =
        again["skipped"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().replace('Z', ".000Z")).collect();
    assert_eq!(skipped, ten_days());
    let all = api.runs_of("e2e-backfill-serial", "backfill").await;
    assert_eq!(all.len(), 10, "no run was added: {all:#?}");
}

// 11–12. Restarts --------------------------------------------------------------------------

/// Waits until `workflow` has a scheduled run with a logical time after `t`.
async fn wait_scheduled_after(api: &Api, workflow: &str, t: DateTime<Utc>) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let runs = api.runs_of(workflow, "schedule").await;
        if runs.iter().any(|r| time_of(&r["logical_time"]) > t) {
            return;
        }
        assert!(Instant::now() < deadline, "{workflow} has no scheduled run after {t}: {runs:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn missed_cron_times_are_caught_up_after_a_restart() {
    let mut server = own_server().await;
    let api = Api::of(&server);
    for (name, catch_up) in [("catch-up", true), ("latest-only", false)] {
        api.apply(&format!(
            r#"
name: {name}
schedule: {{cron: "*/2 * * * * *", catch_up: {catch_up}}}
tasks:
- {{name: tick, plugin: echo, params: {{at: "{{{{ ts }}}}"}}}}
"#
        ))
        .await;
    }
    // Let the schedules make a few runs.
    let started = Utc::now();
    for name in ["catch-up", "latest-only"] {
        wait_scheduled_after(&api, name, started + chrono::Duration::seconds(2)).await;
    }
    let killed_at = Utc::now();
    server.kill();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let server = restart(server).await;
    let restarted_at = Utc::now();
    let api = Api::of(&server);
    for name in ["catch-up", "latest-only"] {
        wait_scheduled_after(&api, name, restarted_at + chrono::Duration::seconds(2)).await;
    }

    let gaps = |runs: &[Value]| -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
        let times: Vec<DateTime<Utc>> = runs.iter().map(|r| time_of(&r["logical_time"])).collect();
        let distinct: BTreeSet<DateTime<Utc>> = times.iter().copied().collect();
        assert_eq!(distinct.len(), times.len(), "duplicate logical times: {times:?}");
        for t in &times {
            assert_eq!(t.timestamp_subsec_millis(), 0, "{t}");
            assert_eq!(t.timestamp() % 2, 0, "not a fire time: {t}");
        }
        times.windows(2).filter(|w| w[1] - w[0] != chrono::Duration::seconds(2)).map(|w| (w[0], w[1])).collect()
    };

    let caught_up = api.runs_of("catch-up", "schedule").await;
    assert_eq!(gaps(&caught_up), vec![], "a gap in {caught_up:#?}");
    let missed = caught_up
        .iter()
        .filter(|r| {
            let t = time_of(&r["logical_time"]);
            t > killed_at && t < restarted_at - chrono::Duration::seconds(1)
        })
        .count();
    assert!(missed >= 2, "the ~6 s outage should have missed at least two fire times: {caught_up:#?}");

    let latest = api.runs_of("latest-only", "schedule").await;
    let gaps = gaps(&latest);
    assert_eq!(gaps.len(), 1, "one gap, the outage: {latest:#?}");
    let (before, after) = gaps[0];
    assert!(before <= killed_at, "{before} {killed_at}");
    assert!(
        after >= killed_at + chrono::Duration::seconds(4),
        "the outage was over 6 s; only its latest fire time ({after}) is run"
    );
    // Every run finishes, before and after the restart.
    for r in caught_up.iter().chain(&latest) {
        let run = api.finished(r["id"].as_str().unwrap()).await;
        assert_eq!(state(&run), "succeeded", "{run:#}");
    }
}

/// Issue 12, item 2: a per-second cron catching up from 1970 once made the
/// apply never answer and the server grow until the kernel killed it, and a
/// restart on the same data grew again. Catch-up is bounded by
/// `[master] max_catch_up` (older cycles are skipped, and the log says so),
/// cycles are found without walking the gap, and a backlog arrives at a
/// bounded rate.
#[tokio::test]
async fn a_runaway_catch_up_is_bounded_and_survives_a_restart() {
    let server =
        tokio::task::spawn_blocking(|| DagrServer::start_with(&[("DAGR_MASTER__MAX_CATCH_UP", "20")])).await.unwrap();
    let api = Api::of(&server);
    let applied = Instant::now();
    api.apply(
        r#"
name: every-second-since-1970
schedule: {cron: "* * * * * *", catch_up: true, start: "1970-01-01T00:00:00Z"}
tasks:
- {name: tick, plugin: echo}
"#,
    )
    .await;
    let first = applied.elapsed();
    // Bounded: the 20 newest cycles, then one per second.
    let bound = |since: Instant| 20 + since.elapsed().as_secs() as usize + 2;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let runs = api.runs_of("every-second-since-1970", "schedule").await;
        assert!(runs.len() <= bound(applied), "{} runs after {:?}", runs.len(), applied.elapsed());
        if runs.len() >= 20 {
            break;
        }
        assert!(Instant::now() < deadline, "the catch-up made only {} runs", runs.len());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(server.log().contains("skipping missed cycles"), "the skipped cycles are not reported:\n{}", server.log());
    let server = restart(server).await;
    let restarted = Instant::now();
    let api = Api::of(&server);
    let (status, _) = api.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let runs = api.runs_of("every-second-since-1970", "schedule").await;
    assert!(runs.len() <= bound(applied) + 20, "{} runs after the restart", runs.len());
    let times: BTreeSet<String> = runs.iter().map(|r| r["logical_time"].to_string()).collect();
    assert_eq!(times.len(), runs.len(), "one run per cycle");
    eprintln!("apply answered in {first:?}; {} runs {:?} after the restart", runs.len(), restarted.elapsed());
}

#[tokio::test]
async fn a_run_survives_kill_9_of_the_server() {
    let server = own_server().await;
    let api = Api::of(&server);
    api.apply(
        r#"
name: e2e-crash
tasks:
- {name: before, plugin: echo}
- {name: nap, plugin: sleep, params: {ms: 3000}, depends_on: [before]}
- {name: after, plugin: echo, depends_on: [nap]}
"#,
    )
    .await;
    let id = api.trigger("e2e-crash", json!({})).await;
    api.wait_task(&id, "nap", "running").await;
    let server = restart(server).await;
    let api = Api::of(&server);
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    for name in ["before", "nap", "after"] {
        let task = api.task(&id, name).await;
        assert_eq!(task["state"], "succeeded", "{task:#}");
        let wins = attempt_summary(&task).iter().filter(|a| a.0 == "succeeded").count();
        assert_eq!(wins, 1, "{name} succeeded exactly once: {task:#}");
        assert_eq!(task["failures"], 0, "{task:#}");
    }
    assert_eq!(attempts(&run, "before"), 1);
    assert_eq!(attempts(&run, "after"), 1);
    let nap = api.task(&id, "nap").await;
    assert_eq!(attempt_summary(&nap), vec![failed("worker-lost", false), succeeded()], "{nap:#}");
}

/// A command that becomes visible after one with a higher id was read
/// (on PostgreSQL, concurrent writers commit out of id order) is still
/// applied: the engine's periodic scan starts from the first pending
/// command, not from its cursor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_committed_behind_the_engine_s_cursor_is_still_applied() {
    let server = own_server().await;
    let api = Api::of(&server);
    api.apply("name: e2e-late\ntasks:\n- {name: nap, plugin: sleep, params: {ms: 60000}}\n").await;
    let (first, id) = (api.trigger("e2e-late", json!({})).await, api.trigger("e2e-late", json!({})).await);
    api.wait_task(&first, "nap", "running").await;
    api.wait_task(&id, "nap", "running").await;
    let url = format!("sqlite://{}", server.data_dir().join("dagr.db").display());
    let db = sqlx::SqlitePool::connect(&url).await.unwrap();
    let insert = |command_id: i64, run: &str, kind: &str, payload: String| {
        sqlx::query(
            "INSERT INTO commands (id, tenant, run_id, slot, kind, payload, created_at) VALUES (?, 'default', ?, ?, ?, ?, 0)",
        )
        .bind(command_id)
        .bind(run.to_owned())
        .bind(dagr_protocol::slot_of(run) as i64)
        .bind(kind.to_owned())
        .bind(payload)
    };
    // A command far ahead moves the engine's cursor (it kills the first
    // run)…
    let kill = dagr_protocol::commands::Command::Kill;
    insert(1_000_000, &first, kill.kind(), kill.payload()).execute(&db).await.unwrap();
    assert_eq!(state(&api.finished(&first).await), "killed");
    // …then one behind it appears: the second run is killed all the same.
    insert(999_999, &id, kill.kind(), kill.payload()).execute(&db).await.unwrap();
    let run = api.finished(&id).await;
    assert_eq!(state(&run), "killed", "{run:#}");
}

// 13. Errors ------------------------------------------------------------------------------------

/// The part of an error answer a golden file pins down.
fn error_essentials(body: &Value) -> Value {
    json!({
        "code": body["code"],
        "location": body["location"],
        "message": body["message"],
    })
}

#[tokio::test]
async fn invalid_definitions_answer_their_golden_errors() {
    let api = Api::shared().await;
    let cases = workspace_root().join("tests").join("cases");
    let bless = std::env::var_os("DAGR_BLESS").is_some();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&cases)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", cases.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("workflow.yaml").exists())
        .collect();
    names.sort();
    assert!(names.len() >= 12, "golden cases missing in {}", cases.display());
    let mut mismatches = Vec::new();
    for dir in &names {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let yaml = std::fs::read_to_string(dir.join("workflow.yaml")).unwrap();
        let (status, body) = api.post_text("/v1/workflows", &yaml).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {body}");
        let location = body["location"].as_str().unwrap_or_default();
        assert!(!location.is_empty(), "{name}: no location in {body}");
        let got = error_essentials(&body);
        let expected_path = dir.join("error.json");
        if bless {
            let text = serde_json::to_string_pretty(&got).unwrap() + "\n";
            std::fs::write(&expected_path, text).unwrap();
            continue;
        }
        let expected: Value = match std::fs::read_to_string(&expected_path) {
            Ok(text) => serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", expected_path.display())),
            Err(_) => {
                mismatches.push(format!("{name}: no error.json; got {got:#}"));
                continue;
            }
        };
        if got != expected {
            mismatches.push(format!("{name}:\n  expected {expected}\n  got      {got}"));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} golden case(s) differ (DAGR_BLESS=1 rewrites them):\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[tokio::test]
async fn requests_that_are_not_definitions_fail_with_4xx_too() {
    let api = Api::shared().await;
    api.apply(
        "name: e2e-errors\nparams: {region: eu}\ntasks:\n- {name: a, plugin: echo, params: {r: '{{ params.region }}'}}\n",
    )
    .await;
    // A trigger with a param the workflow does not declare.
    let (status, body) = api.post("/v1/workflows/e2e-errors/runs", json!({"params": {"x": 1}})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "invalid_params");
    assert_eq!(body["location"], "params.x");
    assert!(body["message"].as_str().unwrap().contains("unknown param `x`"), "{body}");
    // An unknown run.
    let (status, body) = api.get("/v1/runs/00000000-0000-0000-0000-000000000000").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["code"], "not_found");
    assert!(body["message"].as_str().unwrap().contains("no run"), "{body}");
    // An unknown workflow.
    let (status, body) = api.post("/v1/workflows/e2e-nope/runs", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["code"], "not_found");
    // A body that is not JSON.
    let (status, body) = api.post_text("/v1/workflows/e2e-errors/runs", "{\"params\": ").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "bad_body");
    // JSON of the wrong shape names the field.
    let (status, body) = api.post("/v1/workflows/e2e-errors/runs", json!({"params": 5})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["location"], "params");
    let (status, body) = api.post("/v1/workflows/e2e-errors/runs", json!({"logical_time": "yesterday"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["location"], "logical_time");
    // Nothing was created by any of these.
    assert_eq!(api.runs_of("e2e-errors", "manual").await.len(), 0);
}

// 14. Versions ---------------------------------------------------------------------------------

#[tokio::test]
async fn a_run_keeps_the_version_it_started_with() {
    let api = Api::shared().await;
    let v1 = r#"
name: e2e-versions
tasks:
- {name: wait, plugin: sleep, params: {ms: 2000}}
- {name: report, plugin: echo, depends_on: [wait], params: {version: 1}}
"#;
    let v2 = r#"
name: e2e-versions
tasks:
- {name: wait, plugin: sleep, params: {ms: 10}}
- {name: report, plugin: echo, depends_on: [wait], params: {version: 2}}
- {name: extra, plugin: echo, depends_on: [report]}
"#;
    let applied = api.apply(v1).await;
    assert_eq!(applied["version"], 1);
    assert_eq!(applied["created"], true);
    let old = api.trigger("e2e-versions", json!({})).await;
    api.wait_task(&old, "wait", "running").await;

    let (status, applied) = api.post_text("/v1/workflows", v2).await;
    assert_eq!(status, StatusCode::CREATED, "{applied}");
    assert_eq!(applied["version"], 2);
    assert_eq!(applied["created"], true);
    // The same definition again, written differently: nothing new.
    let (status, applied) = api.post_text("/v1/workflows", &v2.replace("{ms: 10}", "{ms: 10}, retries: 0")).await;
    assert_eq!(status, StatusCode::OK, "{applied}");
    assert_eq!(applied, json!({"name": "e2e-versions", "version": 2, "created": false}));

    let run = api.finished(&old).await;
    assert_eq!(state(&run), "succeeded", "{run:#}");
    assert_eq!(run["version"], 1);
    let names: Vec<&str> = run["tasks"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["wait", "report"]);
    let report = api.task(&old, "report").await;
    assert_eq!(report["output"]["params"], json!({"version": 1}));

    let new = api.trigger("e2e-versions", json!({})).await;
    let run = api.finished(&new).await;
    assert_eq!(run["version"], 2);
    assert_eq!(run["tasks"].as_array().unwrap().len(), 3);
    let report = api.task(&new, "report").await;
    assert_eq!(report["output"]["params"], json!({"version": 2}));

    let versions = api.get_ok("/v1/workflows/e2e-versions/versions").await;
    let numbers: Vec<i64> = versions.as_array().unwrap().iter().map(|v| v["version"].as_i64().unwrap()).collect();
    assert_eq!(numbers, [1, 2]);
    let first = api.get_ok("/v1/workflows/e2e-versions?version=1").await;
    assert_eq!(first["definition"]["tasks"].as_array().unwrap().len(), 2);
    assert_eq!(first["latest_version"], 2);
}

// 15. Real DAGs ------------------------------------------------------------------------------

/// A task name dagr accepts: `[A-Za-z0-9._-]`, at most 100 characters.
fn sanitize(id: &str) -> String {
    let name: String = id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .take(100)
        .collect();
    if name.is_empty() { "_".into() } else { name }
}

/// A small deterministic generator, so that a failing order can be replayed.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A dataset DAG as a workflow of `echo` tasks, in shuffled order; with the
/// dependencies each task should end up with, by dagr name.
pub(crate) fn dag_workflow(name: &str, file: &Path, seed: u64) -> (String, BTreeMap<String, Vec<String>>) {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
    let dag: Value = serde_json::from_str(&text).unwrap();
    let tasks = dag["tasks"].as_array().unwrap();
    let mut names: HashMap<String, String> = HashMap::new();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    for t in tasks {
        let id = t["id"].as_str().unwrap();
        let base = sanitize(id);
        let mut candidate = base.clone();
        let mut n = 2;
        while taken.contains(&candidate) {
            candidate = format!("{base}-{n}");
            n += 1;
        }
        taken.insert(candidate.clone());
        names.insert(id.to_owned(), candidate);
    }
    let mut expected = BTreeMap::new();
    let mut specs: Vec<Value> = tasks
        .iter()
        .map(|t| {
            let name = names[t["id"].as_str().unwrap()].clone();
            let mut deps: Vec<String> =
                t["deps"].as_array().unwrap().iter().map(|d| names[d.as_str().unwrap()].clone()).collect();
            let spec = json!({"name": name, "plugin": "echo", "depends_on": deps});
            deps.sort();
            expected.insert(name, deps);
            spec
        })
        .collect();
    let mut rng = XorShift(seed | 1);
    for i in (1..specs.len()).rev() {
        specs.swap(i, rng.below(i + 1));
    }
    let definition = json!({"name": name, "tasks": specs}).to_string();
    (definition, expected)
}

#[tokio::test]
async fn dataset_dags_run_to_completion() {
    let api = Api::shared().await;
    let root = workspace_root().join("tests/datasets/dags");
    let files = [
        "pegasus-srasearch-10a.json",
        "nextflow-rnaseq.json",
        "alibaba-v2018/j_2865455.json",
        "alibaba-v2018/j_1010856.json",
        "alibaba-v2018/j_1711085.json",
        "alibaba-v2018/j_3583533.json",
        "alibaba-v2018/j_10058.json",
    ];
    let mut started = Vec::new();
    for (i, file) in files.iter().enumerate() {
        let path = root.join(file);
        let stem = path.file_stem().unwrap().to_string_lossy().to_lowercase();
        let name = format!("e2e-dag-{}", sanitize(&stem));
        let (definition, expected) = dag_workflow(&name, &path, 2018 + i as u64);
        let count = serde_json::from_str::<Value>(&std::fs::read_to_string(&path).unwrap()).unwrap()["tasks"]
            .as_array()
            .unwrap()
            .len();
        assert_eq!(expected.len(), count);
        api.apply(&definition).await;
        let id = api.trigger(&name, json!({})).await;
        started.push((file, id, expected));
    }
    // Known sizes from the dataset's README.
    assert_eq!(started[0].2.len(), 22);
    assert_eq!(started[1].2.len(), 197);
    for (file, id, expected) in started {
        let run = api.finished(&id).await;
        assert_eq!(state(&run), "succeeded", "{file}");
        assert_eq!(run["task_counts"]["succeeded"], expected.len(), "{file}: {}", run["task_counts"]);
        let tasks = &all_tasks(&api, &id).await;
        assert_eq!(tasks.len(), expected.len(), "{file}");
        let mut got = BTreeMap::new();
        for t in tasks {
            assert_eq!(t["state"], "succeeded", "{file}: {t:#}");
            assert_eq!(t["attempts"], 1, "{file}: {t:#}");
            let mut deps: Vec<String> =
                t["depends_on"].as_array().unwrap().iter().map(|d| d.as_str().unwrap().to_owned()).collect();
            deps.sort();
            got.insert(t["name"].as_str().unwrap().to_owned(), deps);
        }
        assert_eq!(got, expected, "{file}: the dependencies");
        // Every task started after all of its upstream tasks finished.
        let by_name: HashMap<&str, &Value> = tasks.iter().map(|t| (t["name"].as_str().unwrap(), t)).collect();
        for t in tasks {
            for dep in t["depends_on"].as_array().unwrap() {
                let up = by_name[dep.as_str().unwrap()];
                assert!(
                    time_of(&t["started_at"]) >= time_of(&up["finished_at"]),
                    "{file}: {} started before {dep} finished",
                    t["name"]
                );
            }
        }
    }
}

// 16. Ad-hoc jobs ----------------------------------------------------------------------------

#[tokio::test]
async fn ad_hoc_jobs_return_their_outputs() {
    let api = Api::shared().await;
    let (status, body) = api.post("/v1/jobs?wait=true", json!({"plugin": "fib", "params": {"n": 20}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "succeeded");
    assert_eq!(body["output"], json!({"n": 20, "value": 6765}));
    let run = api.run(body["run_id"].as_str().unwrap()).await;
    assert_eq!(run["kind"], "job");

    let (status, body) = api
        .post(
            "/v1/jobs?wait=true",
            json!({"name": "e2e-job", "tasks": [
                {"name": "a", "plugin": "echo", "params": {"v": 20}},
                {"name": "b", "plugin": "fib", "depends_on": ["a"], "params": {"n": "{{ inputs.a.params.v }}"}},
            ]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "succeeded");
    assert_eq!(body["outputs"], json!({"a": {"params": {"v": 20}, "inputs": {}}, "b": {"n": 20, "value": 6765}}));

    let (status, body) = api.post("/v1/jobs?wait=true", json!({"plugin": "fail", "params": {"mode": "fatal"}})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "failed");
    assert_eq!(body["errors"]["fail"]["state"], "failed", "{body}");

    let (status, body) = api.post("/v1/jobs?wait=true", json!({"plugin": "nope"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "invalid_job");
    assert_eq!(body["location"], "tasks[0].plugin");
}

// 17. Logs --------------------------------------------------------------------------------------

#[tokio::test]
async fn task_logs_can_be_read_and_followed() {
    let api = Api::shared().await;
    api.apply(
        r#"
name: e2e-logs
tasks:
- name: quick
  plugin: script
  params:
    script: |
      info("first");
      warn("second");
      print("third");
      42
- name: slow
  plugin: script
  params:
    script: |
      let x = 0;
      for i in 0..6 {
        info("tick " + i);
        for j in 0..1500000 { x += 1; }
      }
      info("done");
      x
"#,
    )
    .await;
    let id = api.trigger("e2e-logs", json!({})).await;
    api.wait_task(&id, "slow", "running").await;

    // Follow the running attempt: the stream ends when the attempt does.
    let follow = format!("/v1/runs/{id}/tasks/slow/logs?follow=true");
    let response = api.request(reqwest::Method::GET, &follow).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()[reqwest::header::CONTENT_TYPE].to_str().unwrap().to_owned();
    assert_eq!(content_type, "application/x-ndjson");
    let mut response = response;
    let mut text = String::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let followed: Vec<String> = text
        .lines()
        .map(|l| {
            let line: Value = serde_json::from_str(l).unwrap();
            line["message"].as_str().unwrap().to_owned()
        })
        .collect();
    let mut expected: Vec<String> = (0..6).map(|i| format!("tick {i}")).collect();
    expected.push("done".into());
    let plugin_lines: Vec<String> =
        followed.iter().filter(|m| m.starts_with("tick") || *m == "done").cloned().collect();
    assert_eq!(plugin_lines, expected, "followed:\n{text}");
    let slow = api.task(&id, "slow").await;
    assert_eq!(slow["state"], "succeeded", "the stream ended before the attempt");
    assert_eq!(slow["output"], 9_000_000);

    // Reading a finished attempt's log.
    api.wait_task(&id, "quick", "succeeded").await;
    let lines = api.get_ok(&format!("/v1/runs/{id}/tasks/quick/logs")).await;
    let lines = lines.as_array().unwrap();
    let plugin: Vec<(String, String)> = lines
        .iter()
        .filter(|l| ["first", "second", "third"].contains(&l["message"].as_str().unwrap()))
        .map(|l| (l["message"].as_str().unwrap().to_owned(), l["level"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(plugin.iter().map(|p| p.0.as_str()).collect::<Vec<_>>(), ["first", "second", "third"], "{lines:#?}");
    assert_eq!(plugin[0].1, "info");
    assert_eq!(plugin[1].1, "warn");
    for l in lines {
        assert_eq!(l["attempt"], 1);
    }
    let seqs: Vec<i64> = lines.iter().map(|l| l["seq"].as_i64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order: {seqs:?}");
    // An attempt that does not exist.
    let (status, body) = api.get(&format!("/v1/runs/{id}/tasks/quick/logs?attempt=5")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["location"], "?attempt");
}

// The published JSON Schema ------------------------------------------------------------

/// `docs/workflow.schema.json` is what the code generates (bless with
/// `DAGR_BLESS=1`), and it agrees with dagr's own parser on the shape of
/// definitions: the golden cases that fail on shape fail the schema too,
/// those that fail on meaning (cycles, plugins, cron) pass it.
#[test]
fn the_published_json_schema_is_current_and_agrees_with_the_parser() {
    let path = crate::support::workspace_root().join("docs/workflow.schema.json");
    let generated = serde_json::to_string_pretty(&dagr_core::definition::json_schema()).unwrap() + "\n";
    if std::env::var_os("DAGR_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let published = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        published == generated,
        "{} is out of date; regenerate it with DAGR_BLESS=1 cargo test -p dagr-tests -- json_schema",
        path.display()
    );

    let schema: Value = serde_json::from_str(&published).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let shape_errors = [
        "unknown-field",
        "wrong-type",
        "empty-task-list",
        "grade-out-of-range",
        "upstream-bad-cycles",
        "upstream-bad-require",
        "upstream-bad-missing",
        "bad-on-failure",
        "bad-on-upstream-failure",
        "bad-run-timeout",
    ];
    let cases = crate::support::workspace_root().join("tests/cases");
    let mut checked = 0;
    for entry in std::fs::read_dir(&cases).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let Ok(text) = std::fs::read_to_string(dir.join("workflow.yaml")) else { continue };
        let Ok(document) = serde_yaml::from_str::<Value>(&text) else { continue };
        let valid = validator.is_valid(&document);
        if shape_errors.contains(&name.as_str()) {
            assert!(!valid, "the schema accepts case {name}, which dagr refuses for its shape");
        } else {
            assert!(valid, "the schema refuses case {name}: {:?}", validator.iter_errors(&document).next());
        }
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} cases in {}", cases.display());

    let full = json!({
        "name": "nightly",
        "description": "every option once",
        "params": {"day": "{{ ds }}"},
        "schedule": {"cron": "0 2 * * *", "timezone": "Europe/Berlin", "catch_up": true, "start": "2026-01-01T00:00:00Z"},
        "max_active_runs": 1,
        "concurrency": 4,
        "tasks": [
            {"name": "a", "plugin": "echo@0.1.0", "params": {"x": 1}, "retries": 3,
             "retry_backoff": {"kind": "exponential", "delay": "1s", "max": "1m"}, "timeout": "30s",
             "priority": 5, "allow_hosts": ["api.example.org:443"], "memory": "64MiB", "worker_group": "gpu"},
            {"name": "b", "plugin": "echo", "depends_on": ["a"], "trigger_rule": "all_done", "timeout": 90, "memory": 1048576}
        ]
    });
    assert!(validator.is_valid(&full), "{:?}", validator.iter_errors(&full).next());
    let definition = serde_yaml::to_string(&full).unwrap();
    dagr_core::definition::WorkflowSpec::parse(&definition, dagr_core::definition::Format::Yaml).unwrap();
}
