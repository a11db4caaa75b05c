//! Helpers shared by every module of the test binary.
//!
//! - [`runtime`] / [`runtime_with`]: a fresh [`Runtime`] per test, sharing a
//!   compiled-code cache so that each component compiles once per machine.
//! - [`load`], [`execution`], [`run`]: load a component by path and run one
//!   attempt of it with JSON params.
//! - [`assert_echo_works`]: the "is this runtime still healthy" check that
//!   follows every hostile case.
//! - [`serial`]: a lock for tests that measure time or burn every core, so
//!   they do not measure each other.
//! - [`dagr_binary`]: the `dagr` executable of this build, built if needed.
//! - [`log_text`], [`output_json`], [`failure`]: read an [`AttemptReport`].
//! - [`send_upload`]: send a request with a body the server may refuse
//!   before reading it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use dagr_runtime::{AttemptContext, AttemptReport, Execution, Failure, LogSource, Plugin, Runtime, RuntimeConfig};
use serde_json::{Value, json};

/// Where every test runtime caches compiled code. It lives in cargo's
/// per-target temp dir, so it survives between runs: only a changed
/// component is compiled again.
pub fn shared_cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dagr-code-cache")
}

/// The settings of a test runtime: small (a few slots), with the shared
/// cache, and guests at normal priority.
///
/// Guest threads normally run at a lower priority than the host's. On a
/// two-core machine that is busy compiling, that would make the suite's few
/// timing assertions measure the compiler rather than the runtime.
pub fn test_config() -> RuntimeConfig {
    RuntimeConfig {
        max_concurrent_attempts: 16,
        guest_threads: 2,
        max_memory_bytes: 256 << 20,
        cache_dir: Some(shared_cache_dir()),
        guest_nice: 0,
        ..RuntimeConfig::default()
    }
}

/// A fresh runtime with [`test_config`].
pub fn runtime() -> Runtime {
    runtime_with(|_| {})
}

/// A fresh runtime with [`test_config`] as changed by `adjust`.
pub fn runtime_with(adjust: impl FnOnce(&mut RuntimeConfig)) -> Runtime {
    let mut config = test_config();
    adjust(&mut config);
    Runtime::new(config).unwrap_or_else(|e| panic!("cannot create a runtime: {e}"))
}

/// Loads the component at `path` (one of `dagr_builtins::*_PATH`).
pub fn load(runtime: &Runtime, path: &str) -> Plugin {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    runtime.load(&bytes).unwrap_or_else(|e| panic!("cannot load {path}: {e}"))
}

/// An execution of an ad-hoc task with these params and default limits.
pub fn execution(params: Value) -> Execution {
    Execution::new(AttemptContext::adhoc("test"), params.to_string())
}

/// Loads `path` and runs one attempt with `params`.
pub async fn run(runtime: &Runtime, path: &str, params: Value) -> AttemptReport {
    let plugin = load(runtime, path);
    runtime.execute(&plugin, execution(params)).await
}

/// The output of a successful attempt, parsed; panics (showing the log) if
/// the attempt failed.
pub fn output_json(report: &AttemptReport) -> Value {
    match &report.result {
        Ok(text) => serde_json::from_str(text).unwrap_or_else(|e| panic!("output is not JSON ({e}): {text}")),
        Err(failure) => panic!("the attempt failed: {failure}\nlog:\n{}", log_text(report)),
    }
}

/// The failure of a failed attempt; panics (showing the output) if it succeeded.
pub fn failure(report: &AttemptReport) -> &Failure {
    match &report.result {
        Ok(output) => {
            panic!("the attempt succeeded, but a failure was expected; output: {output:.500}")
        }
        Err(failure) => failure,
    }
}

/// The whole log, one line per entry, as `source level: message`.
pub fn log_text(report: &AttemptReport) -> String {
    report
        .log
        .iter()
        .map(|line| format!("{:?} {}: {}", line.source, line.level.as_str(), line.message))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The messages of the log lines from `source`.
pub fn log_from(report: &AttemptReport, source: LogSource) -> Vec<&str> {
    report.log.iter().filter(|line| line.source == source).map(|line| line.message.as_str()).collect()
}

/// Runs `echo` on `runtime` and checks its output: after a hostile guest,
/// the same runtime must still work.
pub async fn assert_echo_works(runtime: &Runtime) {
    let report = run(runtime, dagr_builtins::ECHO_PATH, json!({"still": "alive"})).await;
    assert_eq!(output_json(&report), json!({"params": {"still": "alive"}, "inputs": {}}), "echo after a hostile case");
}

/// Held by tests that measure time or keep every core busy, so that two of
/// them never run at once. A tokio lock, because it is held across awaits
/// (each test has its own tokio runtime; this lock needs none).
pub async fn serial() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    SERIAL.write().await
}

/// [`serial`] for tests that are not async.
pub fn serial_blocking() -> tokio::sync::RwLockWriteGuard<'static, ()> {
    SERIAL.blocking_write()
}

/// Held by tests that only burn CPU (building and compiling Python and
/// JavaScript components), measure no time and allow long for it: they keep
/// out of [`serial`] tests' way but may run beside each other. (Before,
/// they were serial, and as libtest runs tests in name order, a run of them
/// kept one of the two test threads waiting for the other for minutes.)
pub fn busy_blocking() -> tokio::sync::RwLockReadGuard<'static, ()> {
    SERIAL.blocking_read()
}

static SERIAL: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Sends the request `make` builds, whose body the server may refuse (401,
/// 413) before it has read it: the server then answers and closes the
/// connection, and the client, still sending, may see the broken connection
/// instead of the answer. Such a request is sent again (a few times at
/// most); the answer it gets is what a test checks.
pub async fn send_upload(make: impl Fn() -> reqwest::RequestBuilder) -> reqwest::Result<reqwest::Response> {
    let mut tries = 0;
    loop {
        tries += 1;
        match make().send().await {
            Err(e) if e.is_request() && tries < 4 => continue,
            sent => return sent,
        }
    }
}

/// The workspace root (the directory of the root `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(".."))
}

/// The `dagr` executable that belongs to this build of the tests.
///
/// `CARGO_BIN_EXE_dagr` only exists in the `dagr` package's own tests, and a
/// dev-dependency on a binary-only package is ignored by cargo. So the
/// binary is looked up next to this test executable (`target/<profile>/`)
/// and brought up to date with `cargo build -p dagr` once per test run
/// (cargo releases its build lock before it runs tests).
pub fn dagr_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        // A benchmark may run the tests' harness against another build
        // (e.g. a release binary): `DAGR_TEST_BINARY=/path/to/dagr`.
        if let Some(binary) = std::env::var_os("DAGR_TEST_BINARY").filter(|b| !b.is_empty()) {
            return PathBuf::from(binary);
        }
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("cannot find the test executable: {e}"));
        // target/<profile>/deps/all-<hash>
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .unwrap_or_else(|| panic!("unexpected test executable location {}", exe.display()));
        let target_dir = profile_dir.parent().unwrap_or(profile_dir);
        let profile = profile_dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = std::process::Command::new(cargo);
        build
            .arg("build")
            .arg("--quiet")
            .args(["-p", "dagr", "--bin", "dagr"])
            .arg("--manifest-path")
            .arg(workspace_root().join("Cargo.toml"))
            .arg("--target-dir")
            .arg(target_dir);
        // `cargo test` runs this executable with the test package's own
        // variables (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, …). Some build
        // scripts watch those (ring's: `rerun-if-env-changed`), and cargo
        // compares them with the environment of the build that ran them: with
        // them set, this build would run ring's build script again and
        // rebuild ring, rustls and every crate above them up to dagr (about
        // two minutes of both cores), and the next `cargo test` would do the
        // same the other way round.
        for (key, _) in std::env::vars_os() {
            if key.to_str().is_some_and(is_package_variable) {
                build.env_remove(key);
            }
        }
        match profile {
            "debug" => {}
            "release" => {
                build.arg("--release");
            }
            other => {
                build.args(["--profile", other]);
            }
        }
        let built = build.output().unwrap_or_else(|e| panic!("cannot run cargo to build dagr: {e}"));
        assert!(built.status.success(), "cargo build -p dagr failed:\n{}", String::from_utf8_lossy(&built.stderr));
        let binary = profile_dir.join("dagr");
        assert!(binary.exists(), "cargo built dagr, but {} does not exist", binary.display());
        binary
    })
}

/// Whether `cargo test` sets `name` for the package under test (rather than
/// the person running it: CARGO_HOME, CARGO_TARGET_DIR, CARGO_BUILD_* stay).
fn is_package_variable(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_MANIFEST_")
        || name.starts_with("CARGO_BIN_")
        || matches!(
            name,
            "CARGO_CRATE_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

/// A local HTTP server on 127.0.0.1 with a few fixed routes, for the `http`
/// plugin and the network policy. It counts the requests it receives, so a
/// test can prove that a denied request never left the sandbox.
///
/// Routes: `GET /json` (a JSON object and an `x-test` header), `POST /echo`
/// (the request's method, content type, `x-*` headers and JSON body, as
/// JSON), `GET /status/{code}` (that status), `GET /bytes/{n}` (`n` bytes of
/// text).
pub struct TestServer {
    pub port: u16,
    requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    /// Starts the server on the current tokio runtime, on a random port.
    pub async fn start() -> TestServer {
        use axum::extract::{Path as UrlPath, State};
        use axum::http::{HeaderMap, StatusCode};
        use axum::response::IntoResponse;
        use axum::routing::{get, post};
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};

        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        let app = axum::Router::new()
            .route("/json", get(|| async { ([("x-test", "yes")], axum::Json(json!({"hello": "world", "n": 42}))) }))
            .route(
                "/echo",
                post(|headers: HeaderMap, body: axum::body::Bytes| async move {
                    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
                    let custom: serde_json::Map<String, Value> = headers
                        .iter()
                        .filter(|(name, _)| name.as_str().starts_with("x-"))
                        .map(|(name, value)| (name.to_string(), json!(value.to_str().unwrap_or("<binary>"))))
                        .collect();
                    let body: Value = serde_json::from_slice(&body)
                        .unwrap_or_else(|_| json!(String::from_utf8_lossy(&body).into_owned()));
                    axum::Json(json!({
                        "method": "POST",
                        "content_type": header("content-type"),
                        "headers": custom,
                        "body": body,
                    }))
                }),
            )
            .route(
                "/status/{code}",
                get(|UrlPath(code): UrlPath<u16>| async move {
                    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
                    (status, format!("status {code} on purpose")).into_response()
                }),
            )
            .route("/bytes/{n}", get(|UrlPath(n): UrlPath<usize>| async move { "z".repeat(n) }))
            .layer(axum::middleware::from_fn_with_state(
                counter,
                |State(counter): State<Arc<AtomicUsize>>,
                 request: axum::extract::Request,
                 next: axum::middleware::Next| async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    next.run(request).await
                },
            ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("cannot bind a test server: {e}"));
        let port = listener.local_addr().map(|a| a.port()).unwrap_or_else(|e| panic!("no local address: {e}"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TestServer { port, requests, task }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// `127.0.0.1:<port>`, an allowlist entry for this server.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// How many requests reached the server.
    pub fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Appends `n` as unsigned LEB128 (WebAssembly's integer encoding).
/// The most of these `(start, end)` intervals that overlap at any instant
/// (one that ends as another starts does not overlap it).
pub fn most_at_once(intervals: impl IntoIterator<Item = (i64, i64)>) -> usize {
    let mut edges: Vec<(i64, i32)> = intervals.into_iter().flat_map(|(start, end)| [(start, 1), (end, -1)]).collect();
    edges.sort();
    let (mut running, mut most) = (0i32, 0i32);
    for (_, delta) in edges {
        running += delta;
        most = most.max(running);
    }
    most as usize
}

pub fn write_leb(mut n: usize, out: &mut Vec<u8>) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// `bytes` with a custom section appended: other bytes, same behaviour.
pub fn with_custom_section(bytes: &[u8], name: &str, payload: &[u8]) -> Vec<u8> {
    let mut content = Vec::new();
    write_leb(name.len(), &mut content);
    content.extend_from_slice(name.as_bytes());
    content.extend_from_slice(payload);
    let mut out = bytes.to_vec();
    out.push(0);
    write_leb(content.len(), &mut out);
    out.extend_from_slice(&content);
    out
}
