//! The web UI's figures for `docs/BENCHMARKS.md` (issue 14), in a real
//! headless Chromium against a real `dagr serve`. Not a test: ignored, run
//! by `scripts/bench-ui.sh` (a release build), printing one table.
//!
//! For each page: first contentful paint, the time until the page's main
//! content is on screen (the page marks `dagr:ready` with the Performance
//! API), and the bytes transferred. For a run of the montage DAG while it
//! runs: the delay from a task's state change (its `finished_at`) to the
//! moment its node changed colour on the page.

use std::time::Duration;

use serde_json::json;

use crate::api::{Api, state};
use crate::browser::Browser;
use crate::e2e::own_server;
use crate::support::serial;

/// What one page load cost.
struct PageFigures {
    paint_ms: f64,
    ready_ms: f64,
    bytes: f64,
}

/// Loads `url` in a fresh tab state (cache cleared) and reads its figures
/// once `ready` (a script) holds.
async fn measure(browser: &Browser, url: &str, ready: &str) -> PageFigures {
    browser.goto("about:blank").await;
    browser.goto(url).await;
    browser.wait_for("the page's content", ready).await;
    browser.wait_for("the ready mark", "return performance.getEntriesByName('dagr:ready').length > 0").await;
    let figures = browser
        .script(
            "const paint = performance.getEntriesByName('first-contentful-paint')[0];
             const ready = performance.getEntriesByName('dagr:ready').slice(-1)[0];
             const nav = performance.getEntriesByType('navigation')[0];
             let bytes = nav ? nav.transferSize : 0;
             for (const r of performance.getEntriesByType('resource')) bytes += r.transferSize;
             return [paint ? paint.startTime : -1, ready ? ready.startTime : -1, bytes];",
            vec![],
        )
        .await;
    let n = |i: usize| figures[i].as_f64().unwrap_or(-1.0);
    PageFigures { paint_ms: n(0), ready_ms: n(1), bytes: n(2) }
}

fn row(name: &str, f: &PageFigures) -> String {
    format!("| {name} | {:.0} ms | {:.0} ms | {:.0} KB |", f.paint_ms, f.ready_ms, f.bytes / 1000.0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: scripts/bench-ui.sh"]
async fn ui_bench_pages() {
    let _serial = serial().await;
    let server = own_server().await;
    let api = Api::of(&server);
    let runs_wanted: usize = std::env::var("DAGR_BENCH_UI_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let workflows_wanted: usize =
        std::env::var("DAGR_BENCH_UI_WORKFLOWS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);

    // 1,000 workflows, scheduled hourly.
    for i in 0..workflows_wanted {
        api.apply(&format!(
            "name: wf-{i:04}\ndescription: workflow number {i}\nschedule: {{cron: '0 * * * *'}}\n\
             tasks:\n- {{name: a, plugin: echo}}\n- {{name: b, plugin: echo, depends_on: [a]}}\n"
        ))
        .await;
    }
    // 100,000 runs: backfills of minutely cycles, 10,000 at a time, one
    // after the other (each waits until the last has finished, so that the
    // runs list is read with nothing running).
    api.apply("name: many\nschedule: {cron: '* * * * *'}\ntasks:\n- {name: a, plugin: echo}\n").await;
    let mut made = 0usize;
    let mut day = chrono::NaiveDate::from_ymd_opt(2020, 1, 1).unwrap();
    let setup = std::time::Instant::now();
    while made < runs_wanted {
        let count = (runs_wanted - made).min(10_000);
        let from = day.and_hms_opt(0, 0, 0).unwrap();
        let to = from + chrono::Duration::minutes(count as i64 - 1);
        let body = json!({"workflow": "many", "from": from.format("%Y-%m-%dT%H:%M:%S").to_string(),
            "to": to.format("%Y-%m-%dT%H:%M:%S").to_string(), "parallel": 256});
        let (status, answer) = api.post("/v1/backfills", body).await;
        assert!(status.is_success(), "backfill: {status} {answer}");
        made += count;
        day += chrono::Duration::days(8);
        loop {
            let queued = api.get_ok("/v1/runs?workflow=many&state=queued&limit=1").await;
            let running = api.get_ok("/v1/runs?workflow=many&state=running&limit=1").await;
            if queued["runs"].as_array().unwrap().is_empty() && running["runs"].as_array().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        eprintln!("{made} runs made and finished after {:.0?}", setup.elapsed());
    }
    // The montage DAG, whose tasks sleep so that its run lasts a while.
    api.apply(&crate::ui::montage("montage", 300).0).await;

    let shots = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-bench");
    let browser = Browser::start(&shots).await;
    let base = server.base_url();
    browser.goto(&format!("{base}/ui/")).await;
    browser.fill("#token", &server.token()).await;
    browser.click("#sign-in").await;
    browser.find("tr[data-workflow]").await;

    let mut rows = Vec::new();
    let f = measure(
        &browser,
        &format!("{base}/ui/"),
        &format!("return document.querySelectorAll('tr[data-workflow]').length >= {}", workflows_wanted + 2),
    )
    .await;
    rows.push(row(&format!("workflows list ({} workflows)", workflows_wanted + 2), &f));
    let f = measure(
        &browser,
        &format!("{base}/ui/workflows/montage"),
        "return document.querySelectorAll('[data-task]').length >= 2122",
    )
    .await;
    rows.push(row("workflow page: the montage graph (2,122 tasks, 6,114 edges)", &f));
    let f =
        measure(&browser, &format!("{base}/ui/runs"), "return document.querySelectorAll('tr[data-run]').length > 0")
            .await;
    rows.push(row(&format!("runs list ({runs_wanted} runs)"), &f));

    // A run of the montage DAG, loaded while it runs; then each node's
    // change of colour against the task's finished_at.
    let run = api.trigger("montage", json!({})).await;
    let first = api.run(&run).await["tasks"][0]["name"].as_str().unwrap().to_owned();
    api.wait_task(&run, &first, "running").await;
    let f = measure(
        &browser,
        &format!("{base}/ui/runs/{run}"),
        "return document.querySelectorAll('[data-task]').length >= 2122",
    )
    .await;
    rows.push(row("run page of the montage DAG, while it runs", &f));
    browser
        .script(
            "window.__seen = {}; window.__since = Date.now();
             new MutationObserver(records => {
               for (const r of records) {
                 const t = r.target.getAttribute('data-task');
                 if (t && r.target.getAttribute('data-state') === 'succeeded' && !window.__seen[t]) window.__seen[t] = Date.now();
               }
             }).observe(document.body, {subtree: true, attributes: true, attributeFilter: ['data-state']});",
            vec![],
        )
        .await;
    api.wait_run(&run, "the montage run", |r| state(r) == "succeeded").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seen = browser.script("return window.__seen", vec![]).await;
    let since = browser.script("return window.__since", vec![]).await.as_f64().unwrap_or(0.0);
    let mut delays = Vec::new();
    let mut after = -1i64;
    loop {
        let page = api.get_ok(&format!("/v1/runs/{run}/tasks?after={after}&limit=1000")).await;
        for t in page["tasks"].as_array().unwrap() {
            let name = t["name"].as_str().unwrap();
            if let (Some(at), Some(finished)) = (seen[name].as_f64(), t["finished_at"].as_str()) {
                let finished = chrono::DateTime::parse_from_rfc3339(finished).unwrap().timestamp_millis() as f64;
                // Only changes that happened while the page watched (not
                // what it caught up with while it loaded).
                if finished >= since {
                    delays.push(at - finished);
                }
            }
        }
        match page["next"].as_i64() {
            Some(next) => after = next,
            None => break,
        }
    }
    delays.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("\n| page | first contentful paint | main content shown | transferred |");
    println!("|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
    println!(
        "\nlive updates (montage run, {} tasks that finished while the page watched): task finished → node green p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        delays.len(),
        percentile(&delays, 0.5),
        percentile(&delays, 0.99),
        delays.last().copied().unwrap_or(f64::NAN)
    );
}
