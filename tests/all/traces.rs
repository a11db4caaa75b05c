//! Traces exported over OTLP/HTTP (JSON) to a receiver in the test, which
//! parses what dagr sends as a collector would: on `dagr serve`, and across
//! the processes of a real cluster (API, master, worker), one trace per
//! run follows each task from its trigger through dispatch and attempt to
//! its result, every span linked to its parent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::api::{Api, PATIENCE};
use crate::cluster::{Cluster, exclusive};
use crate::server::DagrServer;

/// One span as the receiver got it.
#[derive(Debug, Clone)]
struct Span {
    service: String,
    trace: String,
    id: String,
    parent: String,
    name: String,
    attributes: HashMap<String, String>,
}

/// An OTLP/HTTP traces endpoint (JSON encoding) on a loopback port.
struct Collector {
    url: String,
    spans: Arc<Mutex<Vec<Span>>>,
}

fn attribute_text(value: &Value) -> String {
    for key in ["stringValue", "intValue", "boolValue", "doubleValue"] {
        if let Some(v) = value.get(key) {
            return v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string());
        }
    }
    value.to_string()
}

fn attributes(list: &Value) -> HashMap<String, String> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| Some((a["key"].as_str()?.to_owned(), attribute_text(&a["value"]))))
        .collect()
}

/// The spans of an `ExportTraceServiceRequest` in JSON.
fn parse(body: &Value) -> Vec<Span> {
    let mut spans = Vec::new();
    for resource in body["resourceSpans"].as_array().into_iter().flatten() {
        let service = attributes(&resource["resource"]["attributes"]).remove("service.name").unwrap_or_default();
        for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
            for s in scope["spans"].as_array().into_iter().flatten() {
                spans.push(Span {
                    service: service.clone(),
                    trace: s["traceId"].as_str().unwrap_or_default().to_owned(),
                    id: s["spanId"].as_str().unwrap_or_default().to_owned(),
                    parent: s["parentSpanId"].as_str().unwrap_or_default().to_owned(),
                    name: s["name"].as_str().unwrap_or_default().to_owned(),
                    attributes: attributes(&s["attributes"]),
                });
            }
        }
    }
    spans
}

impl Collector {
    async fn start() -> Collector {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let json_sent = headers
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .is_some_and(|v| v.starts_with("application/json"));
                    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
                        return (axum::http::StatusCode::BAD_REQUEST, "not JSON");
                    };
                    if !json_sent {
                        return (axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE, "JSON only");
                    }
                    kept.lock().unwrap().extend(parse(&body));
                    (axum::http::StatusCode::OK, "{}")
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Collector { url, spans }
    }

    /// The spans of `run`'s trace, once every span `want` names (by name
    /// and task) has come: each process sends its own, in batches.
    async fn trace_of(&self, run: &str, want: &[(&str, &str)]) -> Vec<Span> {
        let trace = run.replace('-', "");
        let start = Instant::now();
        loop {
            let spans: Vec<Span> = self.spans.lock().unwrap().iter().filter(|s| s.trace == trace).cloned().collect();
            let has = |(name, task): &(&str, &str)| {
                spans.iter().any(|s| s.name == *name && s.attributes.get("task").map_or("", String::as_str) == *task)
            };
            if want.iter().all(has) {
                return spans;
            }
            assert!(start.elapsed() < PATIENCE, "the trace of run {run} did not come whole: {spans:#?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The spans of a run of tasks `a` → `b`.
const WHOLE: [(&str, &str); 8] = [
    ("run", ""),
    ("trigger", ""),
    ("dispatch", "a"),
    ("dispatch", "b"),
    ("attempt", "a"),
    ("attempt", "b"),
    ("result", "a"),
    ("result", "b"),
];

/// Checks one run's trace of tasks `a` → `b`: the root span is the run's
/// (ids from its UUID); the trigger and each dispatch are its children;
/// each attempt is a child of its dispatch, each result of its attempt.
/// Returns the spans by name and task.
fn check_trace(run: &str, spans: &[Span]) -> HashMap<(String, String), Span> {
    let hex = run.replace('-', "");
    let by: HashMap<(String, String), Span> = spans
        .iter()
        .map(|s| ((s.name.clone(), s.attributes.get("task").cloned().unwrap_or_default()), s.clone()))
        .collect();
    let get = |name: &str, task: &str| {
        by.get(&(name.to_owned(), task.to_owned()))
            .unwrap_or_else(|| panic!("no `{name}` span for task `{task}` in {spans:#?}"))
    };
    let root = get("run", "");
    assert_eq!(root.id, hex[16..], "the root span's id is the run id's last 8 bytes");
    assert_eq!(root.parent, "", "the run's span is the root");
    assert_eq!(root.attributes.get("state").map(String::as_str), Some("succeeded"), "{root:?}");
    let trigger = get("trigger", "");
    assert_eq!(trigger.parent, root.id, "the trigger is the run's child: {trigger:?}");
    for task in ["a", "b"] {
        let dispatch = get("dispatch", task);
        let attempt = get("attempt", task);
        let result = get("result", task);
        assert_eq!(dispatch.parent, root.id, "{dispatch:?}");
        assert_eq!(attempt.parent, dispatch.id, "the attempt continues its dispatch: {attempt:?}");
        assert_eq!(result.parent, attempt.id, "the result continues its attempt: {result:?}");
        assert_eq!(attempt.attributes.get("outcome").map(String::as_str), Some("succeeded"), "{attempt:?}");
        assert_eq!(attempt.attributes.get("plugin").map(String::as_str), Some("echo"), "{attempt:?}");
    }
    by
}

const FLOW: &str = "name: traced\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo, depends_on: [a]}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_one_node_is_one_trace_from_trigger_to_result() {
    let collector = Collector::start().await;
    let url = collector.url.clone();
    let server =
        tokio::task::spawn_blocking(move || DagrServer::start_with(&[("DAGR_TELEMETRY__OTLP_ENDPOINT", url.as_str())]))
            .await
            .unwrap();
    let api = Api::of(&server);
    api.apply(FLOW).await;
    let run = api.trigger("traced", json!({})).await;
    api.finished(&run).await;
    // run, trigger, and per task dispatch, attempt and result.
    let spans = collector.trace_of(&run, &WHOLE).await;
    let by = check_trace(&run, &spans);
    assert!(spans.iter().all(|s| s.service == "dagr-serve"), "{spans:#?}");
    assert_eq!(by[&("trigger".to_owned(), String::new())].attributes["workflow"], "traced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_a_cluster_is_one_trace_across_api_master_and_worker() {
    let _one = exclusive().await;
    let collector = Collector::start().await;
    let cluster =
        Cluster::up_with_env(1, 1, "3s", &[], &[("DAGR_TELEMETRY__OTLP_ENDPOINT", collector.url.as_str())]).await;
    cluster
        .apply(&json!({"name": "traced", "tasks": [
            {"name": "a", "plugin": "echo"},
            {"name": "b", "plugin": "echo", "depends_on": ["a"]},
        ]}))
        .await;
    let run = cluster.trigger("traced").await;
    cluster.wait_all(std::slice::from_ref(&run), Duration::from_secs(60)).await;
    let spans = collector.trace_of(&run, &WHOLE).await;
    let by = check_trace(&run, &spans);
    let service = |name: &str, task: &str| by[&(name.to_owned(), task.to_owned())].service.clone();
    assert_eq!(service("trigger", ""), "dagr-api");
    assert_eq!(service("run", ""), "dagr-master");
    assert_eq!(service("dispatch", "a"), "dagr-master");
    assert_eq!(service("attempt", "a"), "dagr-worker", "the attempt ran in another process");
    assert_eq!(service("result", "b"), "dagr-master");
    // The dispatch request itself carried a traceparent to the worker.
    let accepted = spans.iter().filter(|s| s.name == "accept" && s.service == "dagr-worker").count();
    assert!(accepted >= 1, "the worker's accept span is in the run's trace: {spans:#?}");
}
