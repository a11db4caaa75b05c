//! The event stream (`GET /v1/events`) against a real `dagr serve`:
//! followed as Server-Sent Events, resumed with `Last-Event-ID` across a
//! `kill -9` of the server with no gap and no duplicate, read as pages,
//! kept to its tenant (the admin follows every tenant), and through
//! `dagr events`; the Prometheus metrics at `/metrics`, checked by
//! `promtool` and moving as a run proceeds.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::api::{Api, Auth, Body, Call, PATIENCE};
use crate::e2e::{own_server, restart};
use crate::server::{DagrServer, output_within};

/// A Server-Sent Events stream being read.
pub(crate) struct Stream {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl Stream {
    /// Opens `/v1/events?query` with `token` (and `tenant`'s header),
    /// resuming after `last` if given.
    pub(crate) async fn open(base: &str, token: &str, tenant: Option<&str>, query: &str, last: Option<i64>) -> Stream {
        // No overall timeout: a stream lasts; each read has its own.
        let http = reqwest::Client::new();
        let mut request =
            http.get(format!("{base}/v1/events?{query}")).bearer_auth(token).header("accept", "text/event-stream");
        if let Some(last) = last {
            request = request.header("last-event-id", last.to_string());
        }
        if let Some(tenant) = tenant {
            request = request.header("x-dagr-tenant", tenant);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{}", response.text().await.unwrap_or_default());
        let kind = response.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(kind.starts_with("text/event-stream"), "{kind}");
        Stream { response, buffer: Vec::new() }
    }

    /// The next event: its `id` field and its data.
    pub(crate) async fn next(&mut self) -> (i64, Value) {
        tokio::time::timeout(PATIENCE, async {
            loop {
                if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                    let frame: Vec<u8> = self.buffer.drain(..end + 2).collect();
                    let text = String::from_utf8(frame).unwrap();
                    let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
                    let (Some(id), Some(data)) = (field("id:"), field("data:")) else { continue };
                    let event: Value = serde_json::from_str(data).unwrap();
                    let id: i64 = id.parse().unwrap();
                    assert_eq!(event["seq"], id, "the id is the event's number");
                    assert_eq!(
                        text.lines().find_map(|l| l.strip_prefix("event:")).map(str::trim),
                        event["kind"].as_str()
                    );
                    return (id, event);
                }
                let chunk = self.response.chunk().await.unwrap().expect("the stream ended");
                self.buffer.extend_from_slice(&chunk);
            }
        })
        .await
        .expect("no event came")
    }

    /// Events until (and with) the first one `last` accepts.
    async fn until(&mut self, last: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let (_, event) = self.next().await;
            let done = last(&event);
            seen.push(event);
            if done {
                return seen;
            }
        }
    }

    /// Whether an event arrives within `wait`.
    async fn quiet_for(&mut self, wait: Duration) -> bool {
        tokio::time::timeout(wait, self.next()).await.is_err()
    }
}

fn ended(run: &str) -> impl Fn(&Value) -> bool + '_ {
    move |e| e["kind"] == "run.state" && e["run_id"] == run && e["data"]["to"] == "succeeded"
}

fn seqs(events: &[Value]) -> Vec<i64> {
    events.iter().map(|e| e["seq"].as_i64().unwrap()).collect()
}

/// Every event after `after` (of the query), by pages of JSON.
async fn pages(api: &Api, query: &str, mut after: i64) -> Vec<Value> {
    let mut all = Vec::new();
    loop {
        let page = api.get_ok(&format!("/v1/events?{query}&after={after}&limit=7")).await;
        let events = page["events"].as_array().unwrap().clone();
        let next = page["next"].as_i64().unwrap();
        if next == after {
            return all;
        }
        all.extend(events);
        after = next;
    }
}

const FLOW: &str = "name: evs\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo, depends_on: [a]}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_follows_runs_and_resumes_across_a_kill_9_without_gap_or_duplicate() {
    let server = own_server().await;
    let api = Api::of(&server);
    api.apply(FLOW).await;

    // Follow from now; a run's every change arrives, in order.
    let mut stream = Stream::open(&server.base_url(), &server.token(), None, "", None).await;
    let first = api.trigger("evs", json!({})).await;
    let followed = stream.until(ended(&first)).await;
    let numbers = seqs(&followed);
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "in order: {numbers:?}");
    assert!(followed.iter().all(|e| e["tenant"] == "default" && e["workflow"] == "evs"), "{followed:?}");
    let kinds: Vec<&str> = followed.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"task.state") && kinds.contains(&"run.state"), "{kinds:?}");
    // The same events as the run's pages say.
    let paged = pages(&api, &format!("run={first}"), 0).await;
    assert_eq!(seqs(&paged), numbers, "the stream and the pages agree");
    drop(stream);

    // kill -9, then a run the client did not see; it resumes after the
    // last event it saw and gets exactly what came after.
    let last_seen = *numbers.last().unwrap();
    let resume_from = numbers[2];
    let server = restart(server).await;
    let api = Api::of(&server);
    let second = api.trigger("evs", json!({})).await;
    api.finished(&second).await;
    let expected = pages(&api, "", resume_from).await;
    assert!(seqs(&expected).contains(&last_seen), "the pages go on past what the stream saw");
    let mut resumed = Stream::open(&server.base_url(), &server.token(), None, "", Some(resume_from)).await;
    let mut got = Vec::new();
    while got.len() < expected.len() {
        got.push(resumed.next().await.1);
    }
    assert_eq!(seqs(&got), seqs(&expected), "after a restart: no gap, no duplicate");
    assert_eq!(got, expected, "the same events, whole");
    assert!(got.iter().any(ended(&second)), "the run made while nobody followed");

    // A filtered stream: one kind of one run; a third run's events pass it by.
    let third = api.trigger("evs", json!({})).await;
    let query = format!("run={third}&kind=run.*");
    let mut filtered = Stream::open(&server.base_url(), &server.token(), None, &query, Some(0)).await;
    let only = filtered.until(ended(&third)).await;
    assert!(only.iter().all(|e| e["run_id"] == third.as_str() && e["kind"].as_str().unwrap().starts_with("run.")));
    assert!(filtered.quiet_for(Duration::from_millis(500)).await, "nothing else passes the filter");

    // `dagr events`: a page, and a follow that prints what happens.
    let out = output_within(server.cli_command(&["events", "--run", &first, "--json", "--limit", "1000"]), PATIENCE);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(seqs(&printed), numbers, "dagr events prints the run's events");
    let mut follow = server.cli_command(&["events", "-f", "--kind", "run.state", "--json"]);
    follow.stdout(std::process::Stdio::piped());
    let mut child = follow.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        use std::io::BufRead as _;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .map(|l| serde_json::from_str::<Value>(&l).unwrap())
            .find(|e| e["data"]["to"] == "succeeded")
    });
    // The follower starts from now: give it time to connect, then run.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let fourth = api.trigger("evs", json!({})).await;
    api.finished(&fourth).await;
    let seen = tokio::task::spawn_blocking(move || lines.join().unwrap()).await.unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(seen.unwrap()["run_id"], fourth.as_str(), "dagr events -f printed the run's end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_follows_only_its_own_events_and_the_admin_follows_all() {
    let server: DagrServer = own_server().await;
    let admin = server.admin_token();
    let anyone = Api::anonymous(&server.base_url());
    let created = anyone
        .call(Call {
            method: Method::POST,
            path: "/v1/tenants".into(),
            auth: Auth::Token(&admin),
            body: Body::Json(json!({"name": "ev-b"})),
            tenant_header: None,
        })
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let token = anyone
        .call(Call {
            method: Method::POST,
            path: "/v1/tenants/ev-b/tokens".into(),
            auth: Auth::Token(&admin),
            body: Body::Json(json!({"scopes": ["read", "write"], "label": "events"})),
            tenant_header: None,
        })
        .await;
    let b_token = token.json()["token"].as_str().unwrap().to_owned();

    let a = Api::of(&server);
    let b = Api::with_token(&server, &b_token);
    let mut b_stream = Stream::open(&server.base_url(), &b_token, None, "", Some(0)).await;
    let mut all = Stream::open(&server.base_url(), &admin, None, "", Some(0)).await;
    a.apply(FLOW).await;
    let a_run = a.trigger("evs", json!({})).await;
    a.finished(&a_run).await;
    b.apply(FLOW).await;
    let b_run = b.trigger("evs", json!({})).await;

    let b_seen = b_stream.until(ended(&b_run)).await;
    assert!(b_seen.iter().all(|e| e["tenant"] == "ev-b"), "only B's events: {b_seen:?}");
    assert!(!b_seen.iter().any(|e| e["run_id"] == a_run.as_str()));
    let page = b.get_ok("/v1/events?after=0").await;
    assert!(page["events"].as_array().unwrap().iter().all(|e| e["tenant"] == "ev-b"), "{page}");
    // Applying a definition is an event too, with who did it.
    let applied = b.get_ok("/v1/events?kind=workflow.*").await;
    assert_eq!(applied["events"][0]["kind"], "workflow.applied", "{applied}");
    assert_eq!(applied["events"][0]["workflow"], "evs", "{applied}");
    assert!(applied["events"][0]["data"]["by"].is_string(), "{applied}");
    // A's run, asked for by id: nothing, as for any run that is not B's.
    let page = b.get_ok(&format!("/v1/events?run={a_run}")).await;
    assert_eq!(page["events"], json!([]), "{page}");

    // The admin token without a tenant header sees both tenants, in one order.
    let mut tenants = std::collections::BTreeSet::new();
    let everything = all.until(ended(&b_run)).await;
    for e in &everything {
        tenants.insert(e["tenant"].as_str().unwrap().to_owned());
    }
    assert_eq!(tenants.into_iter().collect::<Vec<_>>(), ["default", "ev-b"]);
    let numbers = seqs(&everything);
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    // With a tenant header, the admin sees that tenant's only.
    let mut of_a = Stream::open(&server.base_url(), &admin, Some("default"), "", Some(0)).await;
    let a_seen = of_a.until(ended(&a_run)).await;
    assert!(a_seen.iter().all(|e| e["tenant"] == "default"));

    // Bad requests say what is wrong.
    for (query, location) in [("after=-1", "?after"), ("kind=r*n", "?kind"), ("limit=0", "?limit")] {
        let (status, body) = a.get(&format!("/v1/events?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(body["location"], location, "{query}: {body}");
    }
    let refused = a
        .request(Method::GET, "/v1/events")
        .header("accept", "text/event-stream")
        .header("last-event-id", "yesterday")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["location"], "Last-Event-ID", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_configured_limit_are_refused_with_429() {
    let server =
        tokio::task::spawn_blocking(|| DagrServer::start_with(&[("DAGR_API__MAX_EVENT_STREAMS", "2")])).await.unwrap();
    let _one = Stream::open(&server.base_url(), &server.token(), None, "", None).await;
    let _two = Stream::open(&server.base_url(), &server.token(), None, "", None).await;
    let api = Api::of(&server);
    let third = api.request(Method::GET, "/v1/events").header("accept", "text/event-stream").send().await.unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = third.json().await.unwrap();
    assert!(body["message"].as_str().unwrap().contains("[api] max_event_streams"), "{body}");
    drop(_one);
    // A closed stream frees its place: the server notices when it next
    // writes to it, here a run's events.
    api.apply(FLOW).await;
    let run = api.trigger("evs", json!({})).await;
    api.finished(&run).await;
    let mut reopened = None;
    for _ in 0..100 {
        let answer = api.request(Method::GET, "/v1/events").header("accept", "text/event-stream").send().await.unwrap();
        if answer.status() == StatusCode::OK {
            reopened = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(reopened.is_some(), "a closed stream's place is given back");
}

// Metrics ---------------------------------------------------------------------------------

/// `promtool check metrics` on `text`: its complaints, if any.
pub(crate) fn promtool_complaints(text: &str) -> Option<String> {
    use std::io::Write as _;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian's `prometheus` package; scripts/test.sh installs it)");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (!out.status.success())
        .then(|| format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// The value of the sample `series` (name with its labels, as written).
pub(crate) fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn scrape(api: &Api, token: Option<&str>) -> (StatusCode, String) {
    let auth = match token {
        Some(token) => Auth::Token(token),
        None => Auth::None,
    };
    let answer = api
        .call(Call { method: Method::GET, path: "/metrics".into(), auth, body: Body::None, tenant_header: None })
        .await;
    (answer.status, answer.text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_pass_promtool_and_move_as_a_run_proceeds() {
    let server = own_server().await;
    let admin = server.admin_token();
    let anyone = Api::anonymous(&server.base_url());
    let (status, _) = scrape(&anyone, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = scrape(&anyone, Some(&server.token())).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a tenant's token: {body}");
    assert!(body.contains("admin token"), "{body}");

    let (status, before) = scrape(&anyone, Some(&admin)).await;
    assert_eq!(status, StatusCode::OK, "{before}");
    if let Some(complaints) = promtool_complaints(&before) {
        panic!("promtool check metrics:\n{complaints}\n{before}");
    }
    let succeeded = "dagr_run_transitions_total{tenant=\"default\",state=\"succeeded\"}";
    let runs_before = sample(&before, succeeded).unwrap_or(0.0);
    let api = Api::of(&server);
    api.apply(FLOW).await;
    let mut stream = Stream::open(&server.base_url(), &server.token(), None, "", None).await;
    let (_, streaming) = scrape(&anyone, Some(&admin)).await;
    assert_eq!(sample(&streaming, "dagr_event_streams"), Some(1.0), "{streaming}");
    let run = api.trigger("evs", json!({})).await;
    stream.until(ended(&run)).await;

    let (_, after) = scrape(&anyone, Some(&admin)).await;
    if let Some(complaints) = promtool_complaints(&after) {
        panic!("promtool check metrics:\n{complaints}\n{after}");
    }
    assert_eq!(sample(&after, succeeded), Some(runs_before + 1.0), "{after}");
    let tasks = "dagr_task_transitions_total{tenant=\"default\",state=\"succeeded\"}";
    assert!(sample(&after, tasks).unwrap_or(0.0) >= 2.0, "{after}");
    assert!(sample(&after, "dagr_worker_attempts_total{outcome=\"succeeded\"}").unwrap_or(0.0) >= 2.0, "{after}");
    assert!(sample(&after, "dagr_task_duration_seconds_count{plugin=\"echo\"}").unwrap_or(0.0) >= 2.0, "{after}");
    assert!(sample(&after, "dagr_instantiate_seconds_count{plugin=\"echo\"}").unwrap_or(0.0) >= 2.0, "{after}");
    // A Rust guest has some linear memory, far less than its cap.
    let memory = sample(&after, "dagr_guest_memory_bytes_sum{plugin=\"echo\"}").unwrap_or(0.0);
    assert!(memory > 0.0 && memory < 2.0 * 1024.0 * 1024.0 * 1024.0, "{after}");
    let dispatched = |t: &str| sample(t, "dagr_attempts_dispatched_total").unwrap_or(0.0);
    assert!(dispatched(&after) >= dispatched(&before) + 2.0, "{after}");
    assert!(sample(&after, "dagr_store_commit_seconds_count").unwrap_or(0.0) > 0.0, "{after}");
    // The stream was handed the run's events (at least its queued, running
    // and succeeded, and each task's).
    let lag = |t: &str| sample(t, "dagr_event_stream_lag_seconds_count").unwrap_or(0.0);
    assert!(lag(&after) >= lag(&before) + 3.0, "{after}");
    for gauge in ["dagr_worker_slots", "dagr_worker_slots_used", "dagr_ready_tasks", "dagr_active_runs"] {
        assert!(sample(&after, gauge).is_some(), "{gauge} is missing: {after}");
    }
    drop(stream);

    // An operator may open them to anyone.
    let public =
        tokio::task::spawn_blocking(|| DagrServer::start_with(&[("DAGR_METRICS__PUBLIC", "true")])).await.unwrap();
    let (status, text) = scrape(&Api::anonymous(&public.base_url()), None).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert!(text.contains("# TYPE dagr_engine_steps_total counter"), "{text}");
}
