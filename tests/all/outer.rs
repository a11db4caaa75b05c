//! The outer DAG on a real `dagr serve`: workflows that wait for other
//! workflows' instances across cycles (hourly → daily → monthly), woken by
//! the store when their upstream changes; failure and rerun; re-flush
//! through a backfill; sub-workflows, switches, conditions, the stop
//! strategy; grades under pressure; lineage and `why`.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::api::{Api, PATIENCE, state, task_state, time_of};
use crate::e2e::own_server;
use crate::server::DagrServer;

/// Waits until every run of `workflow` (of `kind`) has finished; returns them.
async fn all_finished(api: &Api, workflow: &str, kind: &str, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let runs = api.runs_of(workflow, kind).await;
        if runs.len() == count && runs.iter().all(|r| matches!(state(r), "succeeded" | "failed" | "killed")) {
            return runs;
        }
        assert!(Instant::now() < deadline, "{workflow}: {} runs, not all finished: {runs:#?}", runs.len());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn backfill(api: &Api, body: Value) -> Value {
    let (status, answer) = api.post("/v1/backfills", body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    answer
}

fn finished_at(run: &Value) -> chrono::DateTime<chrono::Utc> {
    time_of(&run["finished_at"])
}

fn started_at(run: &Value) -> chrono::DateTime<chrono::Utc> {
    time_of(&run["started_at"])
}

/// Hourly loads, a daily report over each day's hours, a monthly summary
/// over each month's days. Their schedules start on January 30th so that
/// January has 2 days of 24 hours each.
async fn apply_three_layers(api: &Api) {
    api.apply(
        "name: hourly\nschedule: {cron: \"0 * * * *\", start: \"2026-01-30T00:00:00Z\"}\n\
         tasks:\n- {name: load, plugin: echo, params: {at: \"{{ ts }}\"}}\n",
    )
    .await;
    api.apply(
        "name: daily\nschedule: {cron: \"0 1 * * *\", start: \"2026-01-30T00:00:00Z\"}\n\
         upstream: [{workflow: hourly, cycles: day}]\n\
         tasks:\n- {name: report, plugin: echo, params: {day: \"{{ ds }}\", yesterday: \"{{ ds | add_days(-1) }}\"}}\n",
    )
    .await;
    api.apply(
        "name: monthly\nschedule: {cron: \"0 3 1 * *\"}\nupstream: [{workflow: daily, cycles: month}]\n\
         tasks:\n- {name: summary, plugin: echo, params: {month: \"{{ ds | start_of_month }}\"}}\n",
    )
    .await;
}

#[tokio::test]
async fn hourly_daily_monthly_instances_start_when_their_upstream_is_done() {
    let server = own_server().await;
    let api = Api::of(&server);
    apply_three_layers(&api).await;
    // The downstream instances exist first and wait, saying for what.
    let monthly = api.trigger("monthly", json!({"logical_time": "2026-01-01T03:00:00Z"})).await;
    backfill(&api, json!({"workflow": "daily", "from": "2026-01-30", "to": "2026-01-31", "parallel": 2})).await;
    let waiting = api.wait_run(&monthly, "the monthly run to wait", |r| state(r) == "waiting").await;
    assert_eq!(state(&waiting), "waiting");
    let (status, why) = api.get(&format!("/v1/runs/{monthly}/upstream")).await;
    assert_eq!(status, StatusCode::OK, "{why}");
    assert_eq!(why["standing"], "waiting", "{why}");
    assert_eq!(why["dependencies"][0]["workflow"], "daily");
    assert_eq!(why["dependencies"][0]["waits"].as_array().unwrap().len(), 2, "two daily runs: {why}");

    // The 48 hourly loads of January 30th and 31st release everything.
    backfill(&api, json!({"workflow": "hourly", "from": "2026-01-30", "to": "2026-01-31", "parallel": 8})).await;
    let hours = all_finished(&api, "hourly", "backfill", 48).await;
    let days = all_finished(&api, "daily", "backfill", 2).await;
    let month = api.finished(&monthly).await;
    assert!(hours.iter().chain(&days).all(|r| state(r) == "succeeded"));
    assert_eq!(state(&month), "succeeded", "{month:#}");
    for day in &days {
        let date = time_of(&day["logical_time"]).date_naive();
        let last_hour =
            hours.iter().filter(|h| time_of(&h["logical_time"]).date_naive() == date).map(finished_at).max().unwrap();
        assert!(started_at(day) >= last_hour, "the daily run of {date} started before its last hour finished");
    }
    assert!(started_at(&month) >= days.iter().map(finished_at).max().unwrap());
    let (_, why) = api.get(&format!("/v1/runs/{monthly}/upstream")).await;
    assert_eq!(why["standing"], "satisfied");
    let report = api.task(days[1]["id"].as_str().unwrap(), "report").await;
    assert_eq!(report["output"]["params"]["yesterday"], "2026-01-30", "date arithmetic in templates: {report:#}");
}

#[tokio::test]
async fn a_failed_upstream_holds_its_dependent_until_a_rerun_succeeds() {
    let server = own_server().await;
    let api = Api::of(&server);
    api.apply(
        "name: source\nparams: {fail: true}\ntasks:\n\
         - {name: s, plugin: script, params: {script: \"if vars.fail { fail(`source broke`) } 1\", vars: {fail: \"{{ params.fail }}\"}}}\n",
    )
    .await;
    api.apply("name: sink\nupstream: [{workflow: source, offset: -1d}]\ntasks:\n- {name: k, plugin: echo}\n").await;
    let yesterday = api.trigger("source", json!({"logical_time": "2026-03-09T00:00:00Z"})).await;
    let today = api.trigger("sink", json!({"logical_time": "2026-03-10T00:00:00Z"})).await;
    assert_eq!(state(&api.finished(&yesterday).await), "failed");
    let held = api.wait_run(&today, "the sink to wait", |r| state(r) == "waiting").await;
    assert_eq!(state(&held), "waiting");
    let (_, why) = api.get(&format!("/v1/runs/{today}/upstream")).await;
    assert_eq!(why["standing"], "failed", "{why}");
    assert_eq!(why["dependencies"][0]["waits"][0]["run_id"], yesterday.as_str());
    // Fixed upstream: force its task to success; the sink goes.
    let (status, body) = api.post(&format!("/v1/runs/{yesterday}/tasks/s/force-success"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let done = api.finished(&today).await;
    assert_eq!(state(&done), "succeeded");
}

#[tokio::test]
async fn a_backfill_with_its_downstream_re_flushes_every_affected_cycle_in_order() {
    let server = own_server().await;
    let api = Api::of(&server);
    apply_three_layers(&api).await;
    let answer = backfill(
        &api,
        json!({"workflow": "hourly", "from": "2026-01-31", "to": "2026-01-31", "parallel": 4, "include_downstream": true}),
    )
    .await;
    assert_eq!(answer["runs"].as_array().unwrap().len(), 24 + 1, "24 hours and their day: {answer}");
    let days = all_finished(&api, "daily", "backfill", 1).await;
    assert_eq!(state(&days[0]), "succeeded");
    // Again: the existing cycles are re-flushed, each after its upstream again.
    let first_end = finished_at(&days[0]);
    let answer = backfill(
        &api,
        json!({"workflow": "hourly", "from": "2026-01-31", "to": "2026-01-31", "parallel": 4, "include_downstream": true}),
    )
    .await;
    assert!(
        answer["skipped"].as_array().unwrap().iter().any(|s| s.as_str().unwrap().contains("re-flushed")),
        "{answer}"
    );
    let deadline = Instant::now() + PATIENCE;
    loop {
        let day = api.run(days[0]["id"].as_str().unwrap()).await;
        if state(&day) == "succeeded" && finished_at(&day) > first_end {
            break;
        }
        assert!(Instant::now() < deadline, "the daily run was not re-flushed: {day:#}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn sub_workflows_switches_conditions_and_the_stop_strategy() {
    let server = own_server().await;
    let api = Api::of(&server);
    api.apply("name: child\nparams: {n: 1}\ntasks:\n- {name: c, plugin: echo, params: {n: \"{{ params.n }}\"}}\n")
        .await;
    api.apply(
        "name: parent\nparams: {kind: csv}\ntasks:\n- {name: sub, workflow: child, params: {n: 41}}\n\
         - {name: sw, switch: {on: \"{{ params.kind }}\", cases: {csv: [csv], json: [json]}}, depends_on: [sub]}\n\
         - {name: csv, plugin: echo, depends_on: [sw]}\n- {name: json, plugin: echo, depends_on: [sw]}\n\
         - {name: never, plugin: echo, when: \"{{ params.kind | upper }}\", enabled: false}\n",
    )
    .await;
    let run = api.trigger("parent", json!({})).await;
    let done = api.finished(&run).await;
    assert_eq!(state(&done), "succeeded", "{done:#}");
    assert_eq!(task_state(&done, "csv"), "succeeded");
    assert_eq!(task_state(&done, "json"), "skipped");
    assert_eq!(task_state(&done, "never"), "skipped");
    let children = api.runs_of("child", "child").await;
    assert_eq!(children.len(), 1);
    let child = api.task(children[0]["id"].as_str().unwrap(), "c").await;
    assert_eq!(child["output"]["params"]["n"], 41, "the task's params are the child's: {child:#}");

    api.apply(
        "name: halting\non_failure: stop\ntasks:\n- {name: bad, plugin: fail, params: {message: boom}}\n\
         - {name: slow, plugin: sleep, params: {ms: 20000}}\n",
    )
    .await;
    let run = api.trigger("halting", json!({})).await;
    let done = api.finished(&run).await;
    assert_eq!(state(&done), "failed");
    assert_eq!(task_state(&done, "slow"), "killed", "the stop strategy cancels the rest: {done:#}");
}

#[tokio::test]
async fn higher_grades_go_first_when_slots_are_short() {
    let server = tokio::task::spawn_blocking(|| DagrServer::start_with(&[("DAGR_WORKER__SLOTS", "1")])).await.unwrap();
    let api = Api::of(&server);
    let tasks = |n: usize| -> String {
        (0..n).map(|i| format!("- {{name: t{i}, plugin: sleep, params: {{ms: 50}}}}\n")).collect()
    };
    api.apply(&format!("name: low\ntasks:\n{}", tasks(12))).await;
    api.apply(&format!("name: high\ngrade: 3\ntasks:\n{}", tasks(12))).await;
    let low = api.trigger("low", json!({})).await;
    // Let `low` fill the queue first.
    api.wait_run(&low, "low to start", |r| state(r) == "running").await;
    let high = api.trigger("high", json!({})).await;
    let (low, high) = (api.finished(&low).await, api.finished(&high).await);
    let starts = |run: &Value| -> Vec<chrono::DateTime<chrono::Utc>> {
        run["tasks"].as_array().unwrap().iter().map(|t| time_of(&t["started_at"])).collect()
    };
    let high_done = starts(&high).into_iter().max().unwrap();
    let low_after = starts(&low).into_iter().filter(|t| *t > high_done).count();
    assert!(low_after >= 6, "the grade-3 workflow went first: {low_after} of 12 low tasks started after it ended");
}

#[tokio::test]
async fn lineage_why_and_an_offline_schedule_through_the_cli() {
    let server = own_server().await;
    let api = Api::of(&server);
    apply_three_layers(&api).await;
    let out = server.cli(&["lineage", "daily", "--depth", "2"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("hourly") && text.contains("monthly") && text.contains("daily waits for hourly"), "{text}");
    let (status, lineage) = api.get("/v1/workflows/daily/lineage?depth=1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(lineage["edges"].as_array().unwrap().len(), 2, "{lineage}");
    let run = api.trigger("daily", json!({"logical_time": "2026-01-30T01:00:00Z"})).await;
    api.wait_run(&run, "the run to wait", |r| state(r) == "waiting").await;
    let out = server.cli(&["why", &run]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("hourly") && text.contains("missing"), "{text}");
    let out = server.cli(&["schedule", "pause", "hourly"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("offline"));
    let out = server.cli(&["schedule", "resume", "hourly"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("online"));

    // A loop is refused at apply, naming it.
    let (status, answer) = api
        .post_text(
            "/v1/workflows",
            "name: hourly\nupstream: [{workflow: monthly}]\ntasks:\n- {name: t, plugin: echo}\n",
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(message.contains("hourly -> monthly -> daily -> hourly") || message.contains("loop"), "{message}");
    // A loop into the past is fine.
    let (status, answer) = api
        .post_text("/v1/workflows", "name: hourly\nupstream: [{workflow: monthly, offset: -1mo, cycles: month}]\ntasks:\n- {name: t, plugin: echo}\n")
        .await;
    assert!(status.is_success(), "{answer}");
}
