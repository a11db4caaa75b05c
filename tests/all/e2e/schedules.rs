//! Backfills, cron catch-up and restarts.

use super::*;

// 10. Backfills --------------------------------------------------------------------------

fn ten_days() -> Vec<String> {
    (1..=10).map(|d| format!("2026-01-{d:02}T00:00:00.000Z")).collect()
}

/// Waits until every run of the backfill has finished; returns them by
/// logical time.
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
    let ms = |v: &Value| time_of(v).timestamp_millis();
    crate::support::most_at_once(runs.iter().map(|r| (ms(&r["started_at"]), ms(&r["finished_at"]))))
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
