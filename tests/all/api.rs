//! The one HTTP client of the integration tests: [`Api`] speaks to a `dagr`
//! API (a `dagr serve`, or a cluster's API node) with a token, answers
//! (status, JSON body), and waits on runs by polling; [`read`] turns any
//! response into that pair for tests that build their own requests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::server::DagrServer;

/// How long any wait for the server may take before the test fails.
pub(crate) const PATIENCE: Duration = Duration::from_secs(120);

/// A response as (status, JSON body; `null` when empty). Panics, naming
/// `what`, when nothing answered or the body is not JSON.
pub(crate) async fn read(sent: reqwest::Result<reqwest::Response>, what: &str) -> (StatusCode, Value) {
    let response = sent.unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {status}, not JSON ({e}): {text}"))
    };
    (status, body)
}

/// The last lines of a server's log.
fn log_tail(server: &DagrServer, lines: usize) -> String {
    let log = server.log();
    let all: Vec<&str> = log.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// One request spelled out: method, path, token (none: no Authorization
/// header) and body (JSON, or text/bytes for the routes that take those).
pub(crate) struct Call<'a> {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) auth: Auth<'a>,
    pub(crate) body: Body,
    pub(crate) tenant_header: Option<&'a str>,
}

#[derive(Clone, Copy)]
pub(crate) enum Auth<'a> {
    None,
    Raw(&'a str),
    Token(&'a str),
}

#[derive(Clone)]
pub(crate) enum Body {
    None,
    Json(Value),
    Text(String),
    Bytes(Vec<u8>),
}

/// What [`Api::call`] got: the status, `Retry-After` and the body as text.
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) retry_after: Option<String>,
    pub(crate) text: String,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }
}

/// A client of one API. Each test has its own (a reqwest client belongs
/// to the tokio runtime it first ran on).
pub(crate) struct Api {
    pub(crate) base: String,
    http: reqwest::Client,
    /// Sent as a bearer token with every request but [`Api::call`]'s.
    token: Option<String>,
    /// Keeps a shared server up while the test runs (and shows the end of
    /// its log when the test fails).
    pub(crate) shared: Option<Arc<DagrServer>>,
}

impl Api {
    /// A client of a server the test owns, with its `default` tenant's token.
    pub(crate) fn of(server: &DagrServer) -> Api {
        Api::at(&server.base_url(), &server.token())
    }

    /// A client of the server with another token.
    pub(crate) fn with_token(server: &DagrServer, token: &str) -> Api {
        Api::at(&server.base_url(), token)
    }

    /// A client of the API at `base` (e.g. a cluster's API node).
    pub(crate) fn at(base: &str, token: &str) -> Api {
        let mut api = Api::anonymous(base);
        api.token = Some(token.to_owned());
        api
    }

    /// A client that sends no token: each [`Api::call`] says what to send.
    pub(crate) fn anonymous(base: &str) -> Api {
        let http = reqwest::Client::builder()
            .timeout(PATIENCE)
            .build()
            .unwrap_or_else(|e| panic!("cannot build an HTTP client: {e}"));
        Api { base: base.to_owned(), http, token: None, shared: None }
    }

    /// A request to `path` with the client's token.
    pub(crate) fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// A request spelled out whole (for the isolation matrix: no, malformed
    /// or another token, a tenant header, any body); the answer as text.
    pub(crate) async fn call(&self, call: Call<'_>) -> Answer {
        let make = || {
            let mut request = self.http.request(call.method.clone(), format!("{}{}", self.base, call.path));
            match call.auth {
                Auth::None => {}
                Auth::Raw(value) => request = request.header("authorization", value),
                Auth::Token(token) => request = request.bearer_auth(token),
            }
            if let Some(tenant) = call.tenant_header {
                request = request.header("x-dagr-tenant", tenant);
            }
            match call.body.clone() {
                Body::None => request,
                Body::Json(value) => request.json(&value),
                Body::Text(text) => request.header("content-type", "application/yaml").body(text),
                Body::Bytes(bytes) => request.header("content-type", "application/wasm").body(bytes),
            }
        };
        // A refused upload (401, 413) is answered before it is read.
        let sent = match call.body {
            Body::Bytes(_) => crate::support::send_upload(make).await,
            _ => make().send().await,
        };
        let response = sent.unwrap_or_else(|e| panic!("{} {}: no answer: {e}", call.method, call.path));
        let status = response.status();
        let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap_or_default().to_owned());
        let text = response.text().await.unwrap_or_default();
        Answer { status, retry_after, text }
    }

    pub(crate) async fn answer(&self, request: reqwest::RequestBuilder, what: &str) -> (StatusCode, Value) {
        read(request.send().await, what).await
    }

    pub(crate) async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.answer(self.request(Method::GET, path), path).await
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.answer(self.request(Method::POST, path).json(&body), path).await
    }

    pub(crate) async fn post_text(&self, path: &str, body: &str) -> (StatusCode, Value) {
        self.answer(self.request(Method::POST, path).body(body.to_owned()), path).await
    }

    pub(crate) async fn put(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.answer(self.request(Method::PUT, path).json(&body), path).await
    }

    pub(crate) async fn delete(&self, path: &str) -> (StatusCode, Value) {
        self.answer(self.request(Method::DELETE, path), path).await
    }

    /// A GET that may find the server down: `None` when nothing answered.
    pub(crate) async fn try_get(&self, path: &str) -> Option<(StatusCode, Value)> {
        let response = self.request(Method::GET, path).send().await.ok()?;
        Some(read(Ok(response), path).await)
    }

    /// Uploads a component to `/v1/plugins`.
    pub(crate) async fn upload(&self, bytes: &[u8]) -> (StatusCode, Value) {
        // An upload over the limit is answered (413) before it is read.
        let make = || {
            self.request(Method::POST, "/v1/plugins").header("content-type", "application/wasm").body(bytes.to_vec())
        };
        read(crate::support::send_upload(make).await, "POST /v1/plugins").await
    }

    /// GET that must succeed.
    pub(crate) async fn get_ok(&self, path: &str) -> Value {
        let (status, body) = self.get(path).await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {body}");
        body
    }

    /// Applies a definition (YAML or JSON text) that must be valid.
    pub(crate) async fn apply(&self, definition: &str) -> Value {
        let (status, body) = self.post_text("/v1/workflows", definition).await;
        assert!(status == StatusCode::CREATED || status == StatusCode::OK, "apply: {status} {body}\n{definition}");
        body
    }

    /// Triggers a run of `workflow`; returns its id.
    pub(crate) async fn trigger(&self, workflow: &str, request: Value) -> String {
        let (status, body) = self.post(&format!("/v1/workflows/{workflow}/runs"), request).await;
        assert_eq!(status, StatusCode::CREATED, "trigger {workflow}: {body}");
        body["id"].as_str().unwrap().to_owned()
    }

    pub(crate) async fn run(&self, id: &str) -> Value {
        self.get_ok(&format!("/v1/runs/{id}")).await
    }

    pub(crate) async fn task(&self, run: &str, task: &str) -> Value {
        self.get_ok(&format!("/v1/runs/{run}/tasks/{task}")).await
    }

    /// Polls the run until `done` holds; fails after [`PATIENCE`].
    pub(crate) async fn wait_run(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let run = self.run(id).await;
            if done(&run) {
                return run;
            }
            assert!(Instant::now() < deadline, "waited {PATIENCE:?} for {what}; the run is:\n{run:#}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the run has finished (succeeded, failed or killed).
    pub(crate) async fn finished(&self, id: &str) -> Value {
        self.wait_run(id, "the run to finish", |r| matches!(state(r), "succeeded" | "failed" | "killed")).await
    }

    /// Waits until a task of the run is in `want`.
    pub(crate) async fn wait_task(&self, id: &str, task: &str, want: &str) -> Value {
        self.wait_run(id, &format!("task {task} to be {want}"), |r| task_state(r, task) == want).await
    }

    /// A run action (`kill`, `pause`, …): (status, body).
    pub(crate) async fn act(&self, id: &str, action: &str) -> (StatusCode, Value) {
        self.post(&format!("/v1/runs/{id}/{action}"), json!({})).await
    }

    /// A run action that must be applied.
    pub(crate) async fn act_ok(&self, id: &str, action: &str) -> Value {
        let (status, body) = self.act(id, action).await;
        assert_eq!(status, StatusCode::OK, "{action}: {body}");
        assert_eq!(body["ok"], json!(true), "{action}: {body}");
        body
    }

    /// The runs of a workflow, of one kind, oldest logical time first.
    pub(crate) async fn runs_of(&self, workflow: &str, kind: &str) -> Vec<Value> {
        let body = self.get_ok(&format!("/v1/workflows/{workflow}/runs?kind={kind}&limit=1000")).await;
        let mut runs = body["runs"].as_array().unwrap().clone();
        runs.sort_by_key(|r| time_of(&r["logical_time"]));
        runs
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        // The shared server outlives a failed test; show what it said.
        if std::thread::panicking()
            && let Some(server) = &self.shared
        {
            eprintln!("--- the last lines of the shared dagr serve's log ({}):\n{}", self.base, log_tail(server, 40));
        }
    }
}

// Reading answers ----------------------------------------------------------------------

pub(crate) fn state(run: &Value) -> &str {
    run["state"].as_str().unwrap_or_default()
}

/// A task of a run detail, by name.
pub(crate) fn task_of<'a>(run: &'a Value, name: &str) -> &'a Value {
    run["tasks"]
        .as_array()
        .and_then(|tasks| tasks.iter().find(|t| t["name"] == name))
        .unwrap_or_else(|| panic!("the run has no task {name}: {run:#}"))
}

pub(crate) fn task_state<'a>(run: &'a Value, name: &str) -> &'a str {
    task_of(run, name)["state"].as_str().unwrap_or_default()
}

pub(crate) fn time_of(value: &Value) -> DateTime<Utc> {
    let text = value.as_str().unwrap_or_else(|| panic!("not a time: {value}"));
    DateTime::parse_from_rfc3339(text).unwrap_or_else(|e| panic!("not a time ({e}): {text}")).with_timezone(&Utc)
}
