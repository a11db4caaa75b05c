//! Hostile input through the API, against a real `dagr serve`: YAML whose
//! aliases expand far past the body limit, documents nested 100,000 levels
//! deep (as a definition, in a job's params, in a trigger's params), and a
//! plugin that logs a NUL character on PostgreSQL.
//!
//! Each is refused (or stored safely) quickly with a 4xx that names the
//! limit and its config key; `/healthz` answers while it is handled; the
//! server's memory stays bounded; nothing is stored.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::server::DagrServer;

/// The most resident memory the server may reach in these tests. A debug
/// `dagr serve` with its built-in plugins loaded stays well below; the
/// alias bomb of this module took it to several GiB before the limits.
const MAX_RSS_KIB: u64 = 1 << 20;

async fn own_server(envs: &'static [(&'static str, &'static str)]) -> DagrServer {
    tokio::task::spawn_blocking(move || DagrServer::start_with(envs)).await.unwrap()
}

/// The server's peak resident memory so far (VmHWM), in KiB.
fn peak_rss_kib(server: &DagrServer) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid().unwrap())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// One anchor of 1 KiB and ~5,000 aliases of it: a 30 KB body that stands
/// for 5 MB, in a task's params.
fn alias_bomb() -> String {
    let mut yaml = format!(
        "name: bomb\ntasks:\n- name: a\n  plugin: echo\n  params:\n    base: &b \"{}\"\n    copies: [",
        "x".repeat(1024)
    );
    yaml.push_str(&vec!["*b"; 5_000].join(", "));
    yaml.push_str("]\n");
    yaml
}

/// `levels` nested arrays, as JSON (and YAML flow) text.
fn nested(levels: usize) -> String {
    format!("{}{}", "[".repeat(levels), "]".repeat(levels))
}

/// Sends a hostile request while asking `/healthz` at the same time;
/// returns the hostile request's status and body.
async fn with_health_meanwhile(server: &DagrServer, request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let hostile = tokio::spawn(async move {
        let response = request.send().await.unwrap();
        (response.status(), response.json::<Value>().await.unwrap_or(Value::Null))
    });
    let health = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let answer = health.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK, "/healthz while a hostile body is handled");
    hostile.await.unwrap()
}

#[tokio::test]
async fn hostile_documents_are_refused_with_their_limit() {
    let server = own_server(&[]).await;
    let client = server.client();

    // The alias bomb: 413, naming the body limit.
    let bomb = alias_bomb();
    assert!(bomb.len() < 40_000, "{} bytes", bomb.len());
    let request =
        client.post(server.url("/v1/workflows")).header("content-type", "application/yaml").body(bomb.clone());
    let (status, body) = with_health_meanwhile(&server, request).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("exceeds the size limit of 4194304 bytes ([api] max_body)"), "{message}");

    // 100,000 levels in a task's params (YAML flow style): 400, naming the
    // depth limit and where.
    let deep = format!("name: deep\ntasks:\n- name: a\n  plugin: echo\n  params:\n    v: {}\n", nested(100_000));
    let request = client.post(server.url("/v1/workflows")).header("content-type", "application/yaml").body(deep);
    let (status, body) = with_health_meanwhile(&server, request).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "too_deep", "{body}");
    assert_eq!(body["location"], "tasks[0].params.v", "{body}");
    assert!(body["message"].as_str().unwrap().ends_with("exceeds the nesting limit of 64 ([api] max_depth)"), "{body}");

    // The same as a JSON definition, a job's params and a trigger's params.
    let deep_json = format!(
        r#"{{"name": "deep", "tasks": [{{"name": "a", "plugin": "echo", "params": {{"v": {}}}}}]}}"#,
        nested(100_000)
    );
    let request = client.post(server.url("/v1/workflows")).header("content-type", "application/json").body(deep_json);
    let (status, body) = with_health_meanwhile(&server, request).await;
    assert_eq!((status, body["code"].as_str()), (StatusCode::BAD_REQUEST, Some("too_deep")), "{body}");

    let job = format!(r#"{{"plugin": "echo", "params": {{"v": {}}}}}"#, nested(100_000));
    let request = client.post(server.url("/v1/jobs")).header("content-type", "application/json").body(job);
    let (status, body) = with_health_meanwhile(&server, request).await;
    assert_eq!((status, body["code"].as_str()), (StatusCode::BAD_REQUEST, Some("too_deep")), "{body}");

    let ok = client
        .post(server.url("/v1/workflows"))
        .header("content-type", "application/yaml")
        .body("name: fine\nparams: {p: 1}\ntasks:\n- {name: a, plugin: echo}\n")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::CREATED);
    let trigger = format!(r#"{{"params": {{"p": {}}}}}"#, nested(100_000));
    let request =
        client.post(server.url("/v1/workflows/fine/runs")).header("content-type", "application/json").body(trigger);
    let (status, body) = with_health_meanwhile(&server, request).await;
    assert_eq!((status, body["code"].as_str()), (StatusCode::BAD_REQUEST, Some("too_deep")), "{body}");

    // At the limit, a document is an ordinary one.
    let at_limit = format!("name: edge\ntasks:\n- name: a\n  plugin: echo\n  params:\n    v: {}\n", nested(60));
    let ok = client.post(server.url("/v1/workflows")).body(at_limit).send().await.unwrap();
    assert_eq!(ok.status(), StatusCode::CREATED, "{}", ok.text().await.unwrap());

    // Nothing of the hostile ones was stored, no run was created, and the
    // server's memory stayed bounded.
    let workflows: Value = client.get(server.url("/v1/workflows")).send().await.unwrap().json().await.unwrap();
    let names: Vec<&str> = workflows.as_array().unwrap().iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["edge", "fine"], "{workflows}");
    let runs: Value = client.get(server.url("/v1/runs")).send().await.unwrap().json().await.unwrap();
    assert_eq!(runs["runs"], json!([]), "{runs}");
    let peak = peak_rss_kib(&server);
    assert!(peak < MAX_RSS_KIB, "dagr serve peaked at {} MiB", peak / 1024);
}

#[tokio::test]
async fn limits_are_configurable() {
    let server = own_server(&[("DAGR_API__MAX_DEPTH", "8"), ("DAGR_API__MAX_BODY", "64KiB")]).await;
    let client = server.client();
    let deep = format!("name: deep\ntasks:\n- name: a\n  plugin: echo\n  params: {{v: {}}}\n", nested(8));
    let answer = client.post(server.url("/v1/workflows")).body(deep).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    let body: Value = answer.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().ends_with("exceeds the nesting limit of 8 ([api] max_depth)"), "{body}");
    // A small anchor repeated 100 times: under the default, over 64 KiB.
    let mut yaml = format!(
        "name: copies\ntasks:\n- name: a\n  plugin: echo\n  params:\n    b: &b \"{}\"\n    c: [",
        "y".repeat(1000)
    );
    yaml.push_str(&vec!["*b"; 100].join(", "));
    yaml.push_str("]\n");
    let answer = client.post(server.url("/v1/workflows")).body(yaml).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body: Value = answer.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("([api] max_body)"), "{body}");
}

/// A fresh database on the suite's PostgreSQL, or `None` (outside CI) when
/// there is none.
pub(crate) async fn fresh_postgres_database(prefix: &str) -> Option<String> {
    use sqlx::Connection as _;
    let Ok(url) = std::env::var("DAGR_TEST_POSTGRES_URL") else {
        assert!(std::env::var("CI").is_err(), "CI must set DAGR_TEST_POSTGRES_URL");
        eprintln!("DAGR_TEST_POSTGRES_URL is not set; skipping");
        return None;
    };
    let name = format!("{prefix}_{}", std::process::id());
    let mut conn = sqlx::postgres::PgConnection::connect(&url).await.unwrap();
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name}")).execute(&mut conn).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut conn).await.unwrap();
    let (base, _) = url.rsplit_once('/').unwrap();
    Some(format!("{base}/{name}"))
}

async fn logs_of(client: &reqwest::Client, server: &DagrServer, run: &str) -> Vec<String> {
    let url = server.url(&format!("/v1/runs/{run}/tasks/script/logs"));
    let lines: Value = client.get(url).send().await.unwrap().json().await.unwrap();
    lines.as_array().unwrap().iter().map(|l| l["message"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn a_nul_in_a_log_line_does_not_stop_logging_on_postgres() {
    let Some(url) = fresh_postgres_database("dagr_nul").await else {
        return;
    };
    let url: &'static str = Box::leak(url.into_boxed_str());
    let envs: &'static [(&'static str, &'static str)] = Box::leak(Box::new([("DAGR_STORE__URL", url)]));
    let server = own_server(envs).await;
    let client = server.client();
    let job = |script: &str| {
        client
            .post(server.url("/v1/jobs?wait=true&wait_timeout=60s"))
            .json(&json!({"plugin": "script", "params": {"script": script}}))
            .send()
    };
    // Rhai's `\x00` is a NUL character in the string the plugin logs.
    let first: Value = job(r#"info("a\x00b"); info("after the NUL"); 1"#).await.unwrap().json().await.unwrap();
    assert_eq!(first["state"], "succeeded", "{first}");
    let second: Value = job(r#"info("a later attempt"); 2"#).await.unwrap().json().await.unwrap();
    assert_eq!(second["state"], "succeeded", "{second}");
    // A task's error text is the plugin's too, and goes to the engine's
    // own writes: the run fails with it, and a later job still runs.
    let failed: Value = job(r#"fail("bad\x00end")"#).await.unwrap().json().await.unwrap();
    assert_eq!(failed["state"], "failed", "{failed}");
    let error = failed["errors"]["script"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("bad\u{2400}end"), "{failed}");
    let third: Value = job(r#"info("after the failure"); 3"#).await.unwrap().json().await.unwrap();
    assert_eq!(third["state"], "succeeded", "{third}");

    let first_log = logs_of(&client, &server, first["run_id"].as_str().unwrap()).await;
    assert!(first_log.contains(&"a\u{2400}b".to_owned()), "{first_log:?}");
    assert!(first_log.contains(&"after the NUL".to_owned()), "{first_log:?}");
    let second_log = logs_of(&client, &server, second["run_id"].as_str().unwrap()).await;
    assert!(second_log.contains(&"a later attempt".to_owned()), "{second_log:?}");
}

/// A path parameter that is not UTF-8 once decoded is a 400 in the API's
/// JSON shape on every kind of route (axum's own rejection is plain text).
#[tokio::test]
async fn a_path_parameter_that_is_not_utf8_is_a_json_400() {
    let api = crate::api::Api::shared().await;
    for path in ["/v1/plugins/%FF", "/v1/runs/%C3%28", "/v1/webhooks/%FE/deliveries", "/v1/alerts/%FF"] {
        let (status, body) = api.get(path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(body["code"], "bad_path", "{path}: {body}");
        assert!(body["message"].as_str().unwrap_or("").contains("UTF-8"), "{path}: {body}");
    }
}
