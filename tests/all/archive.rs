//! Hot and cold data on a real `dagr serve`: finished runs carried over to
//! cold partitions, found, read and acted on there (an action restores),
//! kept apart by tenant, and a carry-over killed with `kill -9` again and
//! again losing and duplicating nothing.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::api::{Api, state};
use crate::server::DagrServer;

/// Finished runs go cold a second after they finish, and the carrier looks
/// often and moves a few at a time (so that a kill lands mid-way).
const ARCHIVE: [(&str, &str); 4] = [
    ("DAGR_ARCHIVE__AFTER", "1s"),
    ("DAGR_ARCHIVE__INTERVAL", "100ms"),
    ("DAGR_ARCHIVE__BATCH", "7"),
    ("DAGR_ARCHIVE__PERIOD", "week"),
];

async fn server() -> DagrServer {
    tokio::task::spawn_blocking(|| DagrServer::start_with(&ARCHIVE)).await.unwrap()
}

const WORKFLOW: &str = r#"
name: nightly
params: {part: 0}
tasks:
- name: load
  plugin: script
  params:
    script: |
      info("loaded");
      7
- {name: report, plugin: echo, depends_on: [load], params: {part: "{{ params.part }}"}}
"#;

/// Every run of the tenant, hot and cold, page by page: (id, archived).
async fn all_runs(api: &Api, query: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut before = String::new();
    loop {
        let page = api.get_ok(&format!("/v1/runs?limit=25{query}{before}")).await;
        for run in page["runs"].as_array().unwrap() {
            out.push((run["id"].as_str().unwrap().to_owned(), run["archived"] == json!(true)));
        }
        match page["next"].as_str() {
            Some(next) => before = format!("&before={next}"),
            None => return out,
        }
    }
}

async fn until<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "waited 90 s for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_runs_go_cold_stay_readable_and_come_back_when_acted_on() {
    let server = server().await;
    let api = Api::of(&server);
    api.apply(WORKFLOW).await;
    let mut ids = Vec::new();
    for part in 0..3 {
        ids.push(
            api.trigger("nightly", json!({"params": {"part": part}, "logical_time": format!("2026-0{}-01", part + 1)}))
                .await,
        );
    }
    for id in &ids {
        assert_eq!(state(&api.finished(id).await), "succeeded");
    }
    until("the runs to go cold", async || {
        let runs = all_runs(&api, "").await;
        (runs.len() == 3 && runs.iter().all(|(_, cold)| *cold)).then_some(())
    })
    .await;

    // A cold run reads as it was: its page says where it is.
    let run = api.run(&ids[1]).await;
    assert_eq!(run["archived"], json!(true), "{run:#}");
    assert_eq!(run["state"], "succeeded");
    assert_eq!(run["tasks"].as_array().unwrap().len(), 2, "{run:#}");
    let load = api.task(&ids[1], "load").await;
    assert_eq!(load["output"], json!(7), "{load:#}");
    let report = api.task(&ids[1], "report").await;
    assert!(report["output"].to_string().contains("\"part\":1"), "{report:#}");
    let logs = api.get_ok(&format!("/v1/runs/{}/tasks/load/logs", ids[1])).await;
    assert!(logs.as_array().unwrap().iter().any(|l| l["message"] == "loaded"), "{logs:#}");
    let events = api.get_ok(&format!("/v1/runs/{}/events", ids[1])).await;
    let ended = |e: &Value| e["kind"] == "run.state" && e["data"]["to"] == "succeeded";
    assert!(events.as_array().unwrap().iter().any(ended), "its events, to its end: {events:#}");

    // Lists: hot only, cold only, by logical time, by workflow.
    assert!(all_runs(&api, "&archived=false").await.is_empty());
    assert_eq!(all_runs(&api, "&archived=true").await.len(), 3);
    let february = all_runs(&api, "&from=2026-02-01&to=2026-02-01").await;
    assert_eq!(february, vec![(ids[1].clone(), true)]);
    let (status, body) = api.get("/v1/runs?from=yesterday").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("?from"), "the error names the parameter: {body}");
    let of_workflow = api.get_ok("/v1/workflows/nightly/runs?archived=true").await;
    assert_eq!(of_workflow["runs"].as_array().unwrap().len(), 3);

    // Another tenant sees none of it.
    let admin = Api::with_token(&server, &server.admin_token());
    let (status, body) = admin.post("/v1/tenants", json!({"name": "other"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) =
        admin.post("/v1/tenants/other/tokens", json!({"label": "t", "scopes": ["read", "write"]})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let other = Api::with_token(&server, body["token"].as_str().unwrap());
    assert_eq!(other.get(&format!("/v1/runs/{}", ids[1])).await.0, StatusCode::NOT_FOUND);
    assert!(all_runs(&other, "&archived=true").await.is_empty());

    // A downstream workflow needing an archived upstream instance finds it:
    // the dependency restores it and the downstream run starts.
    api.apply(
        r#"
name: report-daily
upstream:
  - workflow: nightly
    cycles: day
tasks:
- {name: report, plugin: echo}
"#,
    )
    .await;
    let report = api.trigger("report-daily", json!({"logical_time": "2026-01-01"})).await;
    // (Without it the run would wait: a cycle with no upstream run waits by default.)
    assert_eq!(state(&api.finished(&report).await), "succeeded", "the archived upstream instance counts");

    // An action restores the run first, then the engine carries it out.
    let rerun = api.act_ok(&ids[1], "rerun").await;
    assert_eq!(rerun["ok"], json!(true), "{rerun:#}");
    let again = api.finished(&ids[1]).await;
    assert_eq!(state(&again), "succeeded", "{again:#}");
    let load = api.task(&ids[1], "load").await;
    assert_eq!(load["attempts"], json!(2), "the rerun ran the task again, after the first attempt: {load:#}");
    // And once finished long enough, it goes cold again.
    until("the rerun run to go cold again", async || (api.run(&ids[1]).await["archived"] == json!(true)).then_some(()))
        .await;

    // The operator's view: partitions by week, an export, the hot counts.
    let list = server.cli(&["archive", "list", "--data-dir", server.data_dir().to_str().unwrap()]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.status.success() && text.contains("default") && text.contains("-w"),
        "{text}{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let id = text.split_whitespace().next().unwrap();
    let out = server.data_dir().join("export.jsonl.zst");
    let export = server.cli(&[
        "archive",
        "export",
        "--data-dir",
        server.data_dir().to_str().unwrap(),
        "--partition",
        id,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(export.status.success(), "{}", String::from_utf8_lossy(&export.stderr));
    let lines = zstd::decode_all(std::fs::File::open(&out).unwrap()).unwrap();
    let lines: Vec<Value> =
        lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect();
    // The three nightly runs and the report run (which finished before the
    // rerun run went cold again: the carry-over goes by finishing time).
    assert_eq!(lines.len(), 4, "every run of the partition");
    let nightly: Vec<&Value> = lines.iter().filter(|l| l["run"]["workflow"] == "nightly").collect();
    assert_eq!(nightly.len(), 3);
    let whole = |l: &&Value| l["tasks"].as_array().unwrap().len() == 2 && !l["logs"].as_array().unwrap().is_empty();
    assert!(nightly.iter().all(whole), "{nightly:#?}");
}

/// `kill -9` at random moments while runs move: afterwards every run is in
/// exactly one place — none lost, none listed twice, each readable whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_carry_over_killed_again_and_again_loses_and_duplicates_nothing() {
    let mut server = server().await;
    let api = Api::of(&server);
    api.apply(WORKFLOW).await;
    let mut ids = HashSet::new();
    for part in 0..60 {
        ids.insert(api.trigger("nightly", json!({"params": {"part": part}})).await);
    }
    for id in &ids {
        api.finished(id).await;
    }
    // The first ones go cold after a second; kill the server while they move.
    for round in 0..8_u64 {
        tokio::time::sleep(Duration::from_millis(700 + 97 * round)).await;
        server = tokio::task::spawn_blocking(move || {
            let mut server = server;
            server.restart();
            server
        })
        .await
        .unwrap();
    }
    let api = Api::of(&server);
    let runs = until("every run to go cold", async || {
        let runs = all_runs(&api, "").await;
        (runs.iter().filter(|(_, cold)| *cold).count() == ids.len()).then_some(runs)
    })
    .await;
    let listed: Vec<&String> = runs.iter().map(|(id, _)| id).collect();
    assert_eq!(listed.len(), ids.len(), "each run listed once");
    assert_eq!(listed.iter().copied().cloned().collect::<HashSet<_>>(), ids, "and none lost");
    // The index agrees: its counts add up to the runs, nothing is left hot.
    let list = server.cli(&["archive", "list", "--data-dir", server.data_dir().to_str().unwrap()]);
    let text = String::from_utf8_lossy(&list.stdout);
    let counted: usize = text.lines().filter_map(|l| l.split_whitespace().nth(3)?.parse::<usize>().ok()).sum();
    assert_eq!(counted, ids.len(), "{text}");
    for id in &ids {
        let run = api.run(id).await;
        assert_eq!(run["state"], "succeeded", "{run:#}");
        assert_eq!(run["tasks"].as_array().unwrap().len(), 2, "{run:#}");
        assert!(run["tasks"].as_array().unwrap().iter().all(|t| t["state"] == "succeeded"), "{run:#}");
    }
}

/// A backfill over cycles whose runs went cold makes no second run for
/// them: each comes back and is skipped, as a hot one is; a cycle the first
/// backfill did not cover gets its run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_over_archived_cycles_skips_them() {
    let server = server().await;
    let api = Api::of(&server);
    api.apply(
        r#"
name: daily-load
schedule: {cron: "0 0 * * *", timezone: UTC}
tasks:
- {name: load, plugin: echo}
"#,
    )
    .await;
    let backfill = |from: &str, to: &str| json!({"workflow": "daily-load", "from": from, "to": to, "parallel": 3});
    let (status, first) = api.post("/v1/backfills", backfill("2025-03-01", "2025-03-03")).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let ids: Vec<String> = first["runs"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().into()).collect();
    assert_eq!(ids.len(), 3, "{first:#}");
    for id in &ids {
        assert_eq!(state(&api.finished(id).await), "succeeded");
    }
    until("the backfilled runs to go cold", async || {
        let runs = all_runs(&api, "").await;
        (runs.len() == 3 && runs.iter().all(|(_, cold)| *cold)).then_some(())
    })
    .await;

    let (status, second) = api.post("/v1/backfills", backfill("2025-03-01", "2025-03-04")).await;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    assert_eq!(second["skipped"].as_array().map(Vec::len), Some(3), "the archived cycles are skipped: {second:#}");
    let made = second["runs"].as_array().unwrap();
    assert_eq!(made.len(), 1, "{second:#}");
    assert!(made[0]["logical_time"].as_str().unwrap().starts_with("2025-03-04"), "{second:#}");
    assert_eq!(state(&api.finished(made[0]["id"].as_str().unwrap()).await), "succeeded");
    let runs = all_runs(&api, "").await;
    assert_eq!(runs.len(), 4, "one run per cycle, hot or cold: {runs:?}");
    for id in &ids {
        assert_eq!(api.run(id).await["state"], "succeeded", "the archived cycle's run is intact");
    }
}
