//! The plugin registry, end to end against a real `dagr serve`: publishing
//! a component, listing it, running workflows that pin a version or take
//! the latest, immutability, bad and oversized uploads, deletion guarded by
//! the workflows that use a version, and the limits of the child process
//! that compiles uploads.
//!
//! Two versions of one plugin come from the `versioned` test component: its
//! version string is patched (same length) in its bytes, which makes a
//! valid component that describes itself as the next version.
//!
//! The limit tests cannot easily craft a component that is genuinely
//! expensive to compile. They make the compiling child itself misbehave
//! (spin, allocate, sleep) through the test-only `DAGR_TEST_INSPECT_HOG`
//! variable, and prove that the CPU, memory and wall-clock limits stop it,
//! that the API answers with the limit's name, and that it keeps serving
//! meanwhile.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dagr_runtime::sha256_hex;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::api::Api;
use crate::server::DagrServer;
use crate::support::with_custom_section;

const V1: &str = "1.20250401.0";
const V2: &str = "1.20250402.0";

impl Api {
    /// Triggers a run of `workflow` and waits for it to end.
    async fn run_to_end(&self, workflow: &str) -> Value {
        let id = self.trigger(workflow, json!({})).await;
        self.finished(&id).await
    }

    /// The output of task `task` of a finished run that must have succeeded.
    async fn output(&self, run: &Value, task: &str) -> Value {
        assert_eq!(run["state"], "succeeded", "{run:#}");
        self.task(run["id"].as_str().unwrap(), task).await["output"].clone()
    }
}

async fn start(envs: &[(&str, &str)]) -> DagrServer {
    let envs: Vec<(String, String)> = envs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    tokio::task::spawn_blocking(move || {
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        DagrServer::start_with(&envs)
    })
    .await
    .unwrap()
}

/// The server the functional tests share; uploads are capped at 2 MiB so
/// that the 413 case stays cheap.
async fn shared() -> Arc<DagrServer> {
    static SHARED: tokio::sync::Mutex<std::sync::Weak<DagrServer>> =
        tokio::sync::Mutex::const_new(std::sync::Weak::new());
    let mut slot = SHARED.lock().await;
    if let Some(server) = slot.upgrade() {
        return server;
    }
    let server = Arc::new(start(&[("DAGR_PLUGINS__MAX_UPLOAD", "2MiB")]).await);
    *slot = Arc::downgrade(&server);
    server
}

fn read(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// The `versioned` component, describing itself as `version`.
fn versioned(version: &str) -> Vec<u8> {
    let mut bytes = read(dagr_builtins::VERSIONED_PATH);
    assert_eq!(version.len(), V1.len());
    let at: Vec<usize> =
        bytes.windows(V1.len()).enumerate().filter(|(_, w)| *w == V1.as_bytes()).map(|(i, _)| i).collect();
    assert_eq!(at.len(), 1, "the version string should occur once in the component");
    bytes[at[0]..at[0] + V1.len()].copy_from_slice(version.as_bytes());
    bytes
}

fn names(list: &Value) -> Vec<(String, String, bool)> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().into(), p["version"].as_str().unwrap().into(), p["builtin"] == true))
        .collect()
}

#[tokio::test]
async fn a_published_plugin_is_listed_and_runs_pinned_or_latest() {
    let server = shared().await;
    let api = Api::of(&server);
    let v1 = versioned(V1);
    let (status, body) = api.upload(&v1).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["name"], "versioned");
    assert_eq!(body["version"], V1);
    assert_eq!(body["description"], "Test component: reports its own version");
    assert_eq!(body["sha256"], sha256_hex(&v1));
    assert_eq!(body["size"], v1.len());
    assert_eq!(body["builtin"], false);

    let (status, list) = api.get("/v1/plugins").await;
    assert_eq!(status, StatusCode::OK);
    let listed = names(&list);
    assert!(listed.contains(&("echo".into(), "0.1.0".into(), true)), "{list:#}");
    assert!(listed.contains(&("versioned".into(), V1.into(), false)), "{list:#}");

    api.apply(&format!("name: reg-pinned\ntasks:\n- name: t\n  plugin: versioned@{V1}\n  params: {{who: pinned}}\n"))
        .await;
    api.apply("name: reg-latest\ntasks:\n- name: t\n  plugin: versioned\n").await;
    let pinned = api.run_to_end("reg-pinned").await;
    assert_eq!(api.output(&pinned, "t").await, json!({"version": V1, "params": {"who": "pinned"}}));
    let latest = api.run_to_end("reg-latest").await;
    assert_eq!(api.output(&latest, "t").await["version"], V1);

    let v2 = versioned(V2);
    let (status, body) = api.upload(&v2).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["version"], V2);
    let (_, versions) = api.get("/v1/plugins/versioned").await;
    let ours: Vec<_> = names(&versions).into_iter().filter(|(_, v, _)| v == V1 || v == V2).collect();
    assert_eq!(ours, vec![("versioned".into(), V1.into(), false), ("versioned".into(), V2.into(), false)]);

    // New runs: the unpinned workflow takes the new version, the pinned one
    // stays on its own.
    let latest = api.run_to_end("reg-latest").await;
    assert_eq!(api.output(&latest, "t").await["version"], V2);
    let pinned = api.run_to_end("reg-pinned").await;
    assert_eq!(api.output(&pinned, "t").await["version"], V1);

    // The CLI: pushing the same bytes again is fine and says so; the
    // listing comes from the server; the built-ins are listed offline.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("v2.wasm");
    std::fs::write(&file, &v2).unwrap();
    let out = server.cli(&["plugin", "push", file.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.trim(), format!("already published with these bytes: versioned@{V2} sha256:{}", sha256_hex(&v2)));
    let out = server.cli(&["plugin", "list"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.lines().any(|l| l.starts_with("versioned") && l.contains(V2) && l.contains("tenant")), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("echo") && l.contains("built-in")), "{stdout}");
    let out = server.cli(&["plugin", "list", "--builtin"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.lines().any(|l| l.starts_with("echo")) && !stdout.contains("versioned"), "{stdout}");
}

#[tokio::test]
async fn a_published_version_is_immutable() {
    let server = shared().await;
    let api = Api::of(&server);
    let probe = read(dagr_builtins::PROBE_PATH);
    let (status, first) = api.upload(&probe).await;
    assert!(status == StatusCode::CREATED || status == StatusCode::OK, "{first}");
    let (status, again) = api.upload(&probe).await;
    assert_eq!(status, StatusCode::OK, "the same bytes again are fine: {again}");
    assert_eq!(again, first);

    let other = with_custom_section(&probe, "dagr-test", b"other bytes, same plugin");
    let (status, body) = api.upload(&other).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("probe@0.1.0 is already published with other content")
            && message.contains(&sha256_hex(&probe))
            && message.contains("immutable"),
        "{message}"
    );
    let (_, versions) = api.get("/v1/plugins/probe").await;
    assert_eq!(versions[0]["sha256"], sha256_hex(&probe), "the published version did not change: {versions:#}");
}

#[tokio::test]
async fn bad_uploads_are_refused_with_the_runtimes_message() {
    let server = shared().await;
    let api = Api::of(&server);
    let random: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("random bytes", random, "not a WebAssembly file"),
        ("a core module", b"\0asm\x01\0\0\0".to_vec(), "core WebAssembly module, not a component"),
        ("another world", read(dagr_builtins::OTHERWORLD_PATH), "does not implement the dagr:plugin@0.1.0 world"),
        ("an unknown import", read(dagr_builtins::ALIEN_PATH), "test:alien/clock"),
    ];
    for (what, bytes, expected) in cases {
        let (status, body) = api.upload(&bytes).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {body}");
        assert_eq!(body["code"], "invalid_plugin", "{what}: {body}");
        assert!(body["message"].as_str().unwrap().contains(expected), "{what}: {body}");
    }

    let echo = dagr_builtins::BUILTINS.iter().find(|(n, _)| *n == "echo").unwrap().1;
    let (status, body) = api.upload(echo).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "builtin_name", "{body}");
    assert!(body["message"].as_str().unwrap().contains("`echo` is the name of a built-in plugin"), "{body}");

    let (status, body) = api.upload(&vec![0u8; 3 << 20]).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(body["message"].as_str().unwrap().contains("plugins.max_upload"), "{body}");

    let (status, list) = api.get("/v1/plugins").await;
    assert_eq!(status, StatusCode::OK);
    assert!(!names(&list).iter().any(|(n, _, _)| n == "otherworld" || n == "alien"), "{list:#}");
}

#[tokio::test]
async fn a_version_in_use_cannot_be_deleted_until_no_workflow_uses_it() {
    let server = shared().await;
    let api = Api::of(&server);
    let env = read(dagr_builtins::ENV_PATH);
    let (status, body) = api.upload(&env).await;
    assert!(status == StatusCode::CREATED || status == StatusCode::OK, "{body}");
    api.apply("name: reg-env-latest\ntasks:\n- name: a\n  plugin: env\n- name: b\n  plugin: env\n").await;
    api.apply("name: reg-env-pinned\ntasks:\n- name: p\n  plugin: env@0.1.0\n").await;
    api.apply("name: reg-env-none\ntasks:\n- name: e\n  plugin: echo\n").await;

    let (status, body) = api.delete("/v1/plugins/env/0.1.0").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("workflow `reg-env-latest` (tasks a, b)")
            && message.contains("workflow `reg-env-pinned` (task p)")
            && !message.contains("reg-env-none"),
        "{message}"
    );

    for workflow in ["reg-env-latest", "reg-env-pinned"] {
        let (status, body) = api.delete(&format!("/v1/workflows/{workflow}")).await;
        assert!(status.is_success(), "delete {workflow}: {body}");
    }
    let out = server.cli(&["plugin", "delete", "env", "0.1.0"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("deleted env@0.1.0 sha256:"), "{out:?}");
    let (status, _) = api.get("/v1/plugins/env").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = api.delete("/v1/plugins/env/0.1.0").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, body) = api.delete("/v1/plugins/echo/0.1.0").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body["message"].as_str().unwrap().contains("built-in plugins cannot be deleted"), "{body}");

    // A deleted version may be published again (and then used).
    let (status, body) = api.upload(&env).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn another_tenant_neither_sees_nor_uses_a_tenants_plugin() {
    let server = shared().await;
    let api = Api::of(&server);
    // Below V1, so that it never is the latest the other tests expect.
    let v9 = "1.20250400.0";
    let bytes = versioned(v9);
    let (status, body) = api.upload(&bytes).await;
    assert!(status == StatusCode::CREATED || status == StatusCode::OK, "{body}");

    let admin = Api::with_token(&server, &server.admin_token());
    let (status, body) = admin.post("/v1/tenants", json!({"name": "reg-other"})).await;
    assert!(status == StatusCode::CREATED || status == StatusCode::CONFLICT, "{body}");
    let (status, body) = admin.post("/v1/tenants/reg-other/tokens", json!({"label": "registry test"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let other = Api::with_token(&server, body["token"].as_str().unwrap());

    let (_, list) = other.get("/v1/plugins").await;
    assert!(!names(&list).iter().any(|(n, _, _)| n == "versioned"), "{list:#}");
    assert!(names(&list).iter().any(|(n, _, b)| n == "echo" && *b), "built-ins are everybody's: {list:#}");
    let (status, _) = other.get("/v1/plugins/versioned").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = other.delete(&format!("/v1/plugins/versioned/{v9}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let definition = format!("name: reg-theirs\ntasks:\n- name: t\n  plugin: versioned@{v9}\n");
    let (status, body) = other.post_text("/v1/workflows", &definition).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["message"].as_str().unwrap().contains("unknown plugin `versioned`"), "{body}");
    let (status, body) = other.post("/v1/jobs?wait=true", json!({"plugin": format!("versioned@{v9}")})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // The owner still has it; the other tenant may publish the same bytes
    // under its own name space.
    let (status, _) = api.get("/v1/plugins/versioned").await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = other.upload(&bytes).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, mine) = api.get("/v1/plugins/versioned").await;
    assert_eq!(mine.as_array().unwrap().iter().filter(|p| p["version"] == v9).count(), 1, "{mine:#}");
}

// Limits of the compiling child ----------------------------------------------------------

/// Uploads a valid component to a server whose inspection child misbehaves,
/// while measuring how fast the server answers other requests meanwhile.
/// Returns (status, body, how long the upload took, how many other
/// requests were answered while it ran).
async fn hostile_upload(server: &DagrServer) -> (StatusCode, Value, Duration, usize) {
    let api = Api::of(server);
    let probe = read(dagr_builtins::PROBE_PATH);
    let started = Instant::now();
    let upload = tokio::spawn(async move { api.upload(&probe).await });
    let api = Api::of(server);
    let mut answered = 0;
    while !upload.is_finished() {
        let (status, _) = api.get("/v1/plugins").await;
        assert_eq!(status, StatusCode::OK);
        if !upload.is_finished() {
            answered += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, body) = upload.await.unwrap();
    (status, body, started.elapsed(), answered)
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // pid (comm) state ppid …; comm may contain spaces.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

/// Waits until the server has no child process left.
async fn no_child_left(server: &DagrServer) {
    let pid = server.pid().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !children_of(pid).is_empty() {
        assert!(Instant::now() < deadline, "the inspection child is still there: {:?}", children_of(pid));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The server still works: a job runs.
async fn still_serving(server: &DagrServer) {
    let http = server.client();
    let response = http
        .post(server.url("/v1/jobs?wait=true"))
        .json(&json!({"plugin": "echo", "params": {"still": "here"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["output"]["params"], json!({"still": "here"}), "{body}");
}

#[tokio::test]
async fn a_compile_that_burns_cpu_is_stopped_at_the_cpu_limit() {
    let server = start(&[
        ("DAGR_TEST_INSPECT_HOG", "cpu"),
        ("DAGR_PLUGINS__COMPILE_CPU", "2s"),
        ("DAGR_PLUGINS__COMPILE_TIMEOUT", "90s"),
    ])
    .await;
    let (status, body, _, answered) = hostile_upload(&server).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "plugin_limit", "{body}");
    // The kernel stopped it at the CPU limit, not the 90 s wall-clock timeout.
    assert!(body["message"].as_str().unwrap().contains("CPU-time limit of 2s (plugins.compile_cpu)"), "{body}");
    assert!(answered > 0, "the API answered nothing while the upload was checked");
    no_child_left(&server).await;
    still_serving(&server).await;
}

#[tokio::test]
async fn a_compile_that_hoards_memory_is_stopped_at_the_memory_limit() {
    let server = start(&[("DAGR_TEST_INSPECT_HOG", "memory"), ("DAGR_PLUGINS__COMPILE_MEMORY", "512MiB")]).await;
    let (status, body, _, answered) = hostile_upload(&server).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "plugin_limit", "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("more memory than the limit of 512 MiB (plugins.compile_memory)"),
        "{body}"
    );
    assert!(answered > 0, "the API answered nothing while the upload was checked");
    no_child_left(&server).await;
    still_serving(&server).await;
}

#[tokio::test]
async fn a_compile_that_hangs_is_killed_at_the_wall_clock_limit() {
    let server = start(&[("DAGR_TEST_INSPECT_HOG", "sleep"), ("DAGR_PLUGINS__COMPILE_TIMEOUT", "2s")]).await;
    let (status, body, took, answered) = hostile_upload(&server).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "plugin_limit", "{body}");
    assert!(body["message"].as_str().unwrap().contains("wall-clock limit of 2s (plugins.compile_timeout)"), "{body}");
    // Not killed before its limit.
    assert!(took >= Duration::from_secs(2), "the upload took {took:?}");
    assert!(answered > 0, "the API answered nothing while the upload was checked");
    no_child_left(&server).await;
    still_serving(&server).await;
}
