//! The outer DAG's operations and control nodes on a real `dagr serve`,
//! the parts `outer` leaves out: an upstream rerun (not forced) releasing
//! its dependents, `dagr rerun --downstream-workflows` in order, sensors
//! through the `http` plugin (ready and timed out), 1,000 waiting sensors
//! on two worker slots, a run timeout, pause reaching a child run, and
//! recursion through children refused at apply.

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::api::{Api, PATIENCE, state, task_of, task_state, time_of};
use crate::e2e::own_server;
use crate::server::DagrServer;

/// An HTTP endpoint whose answer the test sets: `GET /` answers `status`.
struct Switch {
    port: u16,
    status: Arc<AtomicU16>,
    hits: Arc<AtomicUsize>,
}

impl Switch {
    async fn start(status: u16) -> Switch {
        let (code, hits) = (Arc::new(AtomicU16::new(status)), Arc::new(AtomicUsize::new(0)));
        let (c, h) = (code.clone(), hits.clone());
        let app = axum::Router::new().route(
            "/",
            axum::routing::get(move || {
                let (c, h) = (c.clone(), h.clone());
                async move {
                    h.fetch_add(1, Ordering::SeqCst);
                    (axum::http::StatusCode::from_u16(c.load(Ordering::SeqCst)).unwrap(), "switch")
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Switch { port, status: code, hits }
    }

    fn set(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// An `http` task's params and allowlist for this endpoint.
    fn task(&self, name: &str, extra: &str) -> String {
        format!(
            "- {{name: {name}, plugin: http, params: {{url: \"http://127.0.0.1:{p}/\"{extra}}}, allow_hosts: [\"127.0.0.1:{p}\"]}}\n",
            p = self.port
        )
    }
}

async fn until<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "waited {PATIENCE:?} for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_rerun_upstream_releases_its_dependents() {
    let server = own_server().await;
    let api = Api::of(&server);
    let source = Switch::start(503).await;
    api.apply(&format!("name: source\ntasks:\n{}", source.task("fetch", "").replace("}\n", ", retries: 0}\n"))).await;
    api.apply("name: sink\nupstream: [{workflow: source, offset: -1d}]\ntasks:\n- {name: k, plugin: echo}\n").await;
    let yesterday = api.trigger("source", json!({"logical_time": "2026-03-09T00:00:00Z"})).await;
    let today = api.trigger("sink", json!({"logical_time": "2026-03-10T00:00:00Z"})).await;
    assert_eq!(state(&api.finished(&yesterday).await), "failed");
    let held = api.wait_run(&today, "the sink to wait", |r| state(r) == "waiting").await;
    assert_eq!(state(&held), "waiting");
    // The upstream's service is back: a plain rerun (no force) releases the sink.
    source.set(200);
    let (status, body) = api.post(&format!("/v1/runs/{yesterday}/rerun"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let up = api.finished(&yesterday).await;
    assert_eq!(state(&up), "succeeded", "{up:#}");
    let down = api.finished(&today).await;
    assert_eq!(state(&down), "succeeded", "{down:#}");
    assert!(time_of(&down["started_at"]) >= time_of(&up["finished_at"]));
    let (_, why) = api.get(&format!("/v1/runs/{today}/upstream")).await;
    assert_eq!(why["standing"], "satisfied", "{why}");
}

#[tokio::test]
async fn rerun_with_downstream_workflows_re_flushes_each_after_its_upstream() {
    let server = own_server().await;
    let api = Api::of(&server);
    api.apply("name: up\ntasks:\n- {name: u, plugin: sleep, params: {ms: 1500}}\n").await;
    api.apply("name: mid\nupstream: [{workflow: up}]\ntasks:\n- {name: m, plugin: sleep, params: {ms: 500}}\n").await;
    api.apply("name: down\nupstream: [{workflow: mid}]\ntasks:\n- {name: d, plugin: echo}\n").await;
    let at = json!({"logical_time": "2026-04-01T00:00:00Z"});
    let (up, mid, down) =
        (api.trigger("up", at.clone()).await, api.trigger("mid", at.clone()).await, api.trigger("down", at).await);
    let first_end = time_of(&api.finished(&down).await["finished_at"]);
    for run in [&up, &mid, &down] {
        assert_eq!(state(&api.run(run).await), "succeeded");
    }
    let out = server.cli(&["rerun", &up, "--downstream-workflows"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("2 downstream runs re-flushed"), "{text}");
    let again = |id: String| {
        let api = &api;
        async move {
            api.wait_run(&id, "the run to be re-flushed and finish", |r| {
                state(r) == "succeeded" && time_of(&r["finished_at"]) > first_end
            })
            .await
        }
    };
    let (up, mid, down) = (again(up).await, again(mid).await, again(down).await);
    // Each started again only once its upstream had finished again. A
    // re-flushed run keeps its first `started_at`: its task's is the new one.
    let again_at = |run: &Value, task: &str| time_of(&task_of(run, task)["started_at"]);
    assert!(again_at(&mid, "m") >= time_of(&up["finished_at"]), "mid went before up:\n{up:#}\n{mid:#}");
    assert!(again_at(&down, "d") >= time_of(&mid["finished_at"]), "down went before mid:\n{mid:#}\n{down:#}");
}

#[tokio::test]
async fn an_http_sensor_waits_for_its_endpoint_and_another_times_out() {
    let server = own_server().await;
    let api = Api::of(&server);
    let endpoint = Switch::start(404).await;
    let sensor =
        endpoint.task("ready", ", ready_status: 200").replace("}\n", ", sensor: {interval: 1s, timeout: 2m}}\n");
    api.apply(&format!("name: gated\ntasks:\n{sensor}- {{name: after, plugin: echo, depends_on: [ready]}}\n")).await;
    let run = api.trigger("gated", json!({})).await;
    until("two checks of the sensor", async || (endpoint.hits() >= 2).then_some(())).await;
    // Between checks the sensor waits without an attempt (during one it runs).
    let waiting = api.wait_task(&run, "ready", "waiting").await;
    assert_eq!(task_state(&waiting, "after"), "pending", "{waiting:#}");
    endpoint.set(200);
    let done = api.finished(&run).await;
    assert_eq!(state(&done), "succeeded", "{done:#}");
    let ready = api.task(&run, "ready").await;
    assert_eq!(ready["output"]["ready"], true, "{ready:#}");
    assert_eq!(ready["output"]["status"], 200);

    // Never ready: the sensor fails when its timeout is up, and says so.
    endpoint.set(404);
    let sensor =
        endpoint.task("ready", ", ready_status: 200").replace("}\n", ", sensor: {interval: 1s, timeout: 3s}}\n");
    api.apply(&format!("name: impatient\ntasks:\n{sensor}")).await;
    let run = api.trigger("impatient", json!({})).await;
    let done = api.finished(&run).await;
    assert_eq!(state(&done), "failed", "{done:#}");
    let task = api.task(&run, "ready").await;
    let error = task["error"].as_str().unwrap_or_default();
    assert!(error.contains("did not hold within 3s"), "{task:#}");
}

#[tokio::test]
async fn a_thousand_waiting_sensors_on_two_slots_do_not_block_other_work() {
    let server = tokio::task::spawn_blocking(|| DagrServer::start_with(&[("DAGR_WORKER__SLOTS", "2")])).await.unwrap();
    let api = Api::of(&server);
    api.apply(
        "name: sensing\ntasks:\n- {name: wait, plugin: script, params: {script: \"#{ready: false}\"}, \
         sensor: {interval: 10m, timeout: 1h}}\n",
    )
    .await;
    api.apply(
        "name: work\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo, depends_on: [a]}\n\
         - {name: c, plugin: echo, depends_on: [b]}\n",
    )
    .await;
    let mut sensors = Vec::new();
    for _ in 0..1000 {
        sensors.push(api.trigger("sensing", json!({})).await);
    }
    // The sensors checked once, not ready: they wait, holding no slot (a
    // sample of them, spread over the whole range, is asked).
    for sensor in sensors.iter().step_by(97).chain(sensors.last()) {
        until("a sensor to be checked and wait", async || {
            let task = api.task(sensor, "wait").await;
            (task["state"] == "waiting" && task["attempts"].as_i64() >= Some(1)).then_some(())
        })
        .await;
    }
    let started = Instant::now();
    let run = api.trigger("work", json!({})).await;
    let done = api.finished(&run).await;
    assert_eq!(state(&done), "succeeded", "{done:#}");
    eprintln!("work of 3 tasks done in {:?} beside 1,000 waiting sensors on 2 slots", started.elapsed());
    let sample = api.task(&sensors[500], "wait").await;
    assert_eq!(sample["state"], "waiting", "the sensors still wait: {sample:#}");
}

#[tokio::test]
async fn a_run_timeout_fails_the_run_and_cancels_its_task() {
    let server = own_server().await;
    let api = Api::of(&server);
    api.apply("name: slow\ntimeout: 2s\ntasks:\n- {name: nap, plugin: sleep, params: {ms: 60000}}\n").await;
    let run = api.trigger("slow", json!({})).await;
    let started = Instant::now();
    let done = api.finished(&run).await;
    assert_eq!(state(&done), "failed", "{done:#}");
    assert!(started.elapsed() < Duration::from_secs(50), "the 60 s task was not cut short");
    assert_eq!(task_state(&done, "nap"), "killed", "{done:#}");
    let (_, events) = api.get(&format!("/v1/runs/{run}/events")).await;
    assert!(events.to_string().contains("run.timeout"), "{events:#}");
}

#[tokio::test]
async fn pausing_a_parent_pauses_its_child_and_resuming_finishes_both() {
    let server = own_server().await;
    let api = Api::of(&server);
    api.apply(
        "name: kid\ntasks:\n- {name: first, plugin: sleep, params: {ms: 1500}}\n\
         - {name: second, plugin: echo, depends_on: [first]}\n",
    )
    .await;
    api.apply("name: parent\ntasks:\n- {name: sub, workflow: kid}\n- {name: after, plugin: echo, depends_on: [sub]}\n")
        .await;
    let parent = api.trigger("parent", json!({})).await;
    let child = until("the child run", async || {
        let runs = api.runs_of("kid", "child").await;
        runs.first().map(|r| r["id"].as_str().unwrap_or_default().to_owned())
    })
    .await;
    api.wait_task(&child, "first", "running").await;
    api.act_ok(&parent, "pause").await;
    let paused = api.wait_run(&child, "the child to be paused", |r| state(r) == "paused").await;
    // The running task ends; nothing new starts while paused.
    let held = api.wait_task(&child, "first", "succeeded").await;
    // `second` is ready (pending or queued) but not dispatched while paused.
    assert!(matches!(task_state(&held, "second"), "pending" | "queued"), "{paused:#}\n{held:#}");
    assert_eq!(state(&api.run(&child).await), "paused");
    api.act_ok(&parent, "resume").await;
    let done = api.finished(&parent).await;
    assert_eq!(state(&done), "succeeded", "{done:#}");
    assert_eq!(state(&api.run(&child).await), "succeeded");
}

#[tokio::test]
async fn recursion_through_children_is_refused_at_apply() {
    let server = own_server().await;
    let api = Api::of(&server);
    api.apply("name: a\ntasks:\n- {name: t, plugin: echo}\n").await;
    api.apply("name: b\ntasks:\n- {name: run-a, workflow: a}\n").await;
    let (status, answer) = api.post_text("/v1/workflows", "name: a\ntasks:\n- {name: run-b, workflow: b}\n").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["location"], "tasks[0].workflow", "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(message.contains("a -> b -> a") || message.contains("b -> a -> b"), "{message}");
    // Nothing was written: `a` is still the plain version.
    let (_, a): (_, Value) = api.get("/v1/workflows/a").await;
    assert_eq!(a["latest_version"], 1, "{a}");
}
