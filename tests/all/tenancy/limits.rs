//! Runs per minute, every tenant limit, the attempts cap, and fairness
//! between tenants.

use super::*;

// Runs per minute -------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_per_minute_answers_429_with_retry_after() {
    let _serial = serial().await;
    let server = own_server().await;
    let client = Api::anonymous(&server.base_url());
    let admin = server.admin_token();
    let token = tenant_with_token(&client, &admin, "busy", json!({"runs_per_minute": 2})).await;
    client
        .expect(Method::POST, "/v1/workflows", &token, Body::Text(probe_workflow("quick")), StatusCode::CREATED)
        .await;
    client.expect(Method::POST, "/v1/workflows/quick/runs", &token, Body::Json(json!({})), StatusCode::CREATED).await;
    client.expect(Method::POST, "/v1/jobs", &token, Body::Json(json!({"plugin": "echo"})), StatusCode::CREATED).await;

    for (path, body) in [("/v1/workflows/quick/runs", json!({})), ("/v1/jobs", json!({"plugin": "echo"}))] {
        let answer = client.send(Method::POST, path, &token, Body::Json(body)).await;
        assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "{path}: {}", answer.text);
        let body = answer.json();
        assert_eq!(body["code"], "rate_limited", "{body}");
        assert!(body["message"].as_str().unwrap().contains("runs_per_minute"), "{body}");
        let retry: u64 = answer
            .retry_after
            .as_deref()
            .unwrap_or("")
            .parse()
            .unwrap_or_else(|_| panic!("{path}: Retry-After should be seconds: {:?}", answer.retry_after));
        assert!((1..=60).contains(&retry), "{path}: Retry-After {retry}");
    }
    // The limit is the tenant's: another tenant is not held back.
    let own = server.token();
    client.expect(Method::POST, "/v1/jobs", &own, Body::Json(json!({"plugin": "echo"})), StatusCode::CREATED).await;
    // Lifting the limit lets the tenant go on at once.
    let body = Body::Json(json!({"limits": {"runs_per_minute": null}}));
    client.expect(Method::PATCH, "/v1/tenants/busy", &admin, body, StatusCode::OK).await;
    client.expect(Method::POST, "/v1/workflows/quick/runs", &token, Body::Json(json!({})), StatusCode::CREATED).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfills_stop_at_the_tenants_unfinished_runs() {
    let _serial = serial().await;
    let server = own_server().await;
    let client = Api::anonymous(&server.base_url());
    let admin = server.admin_token();
    let token = tenant_with_token(&client, &admin, "piled", json!({"max_unfinished_runs": 4})).await;
    // One run at a time, each a long nap: a backfill's runs stay unfinished.
    let definition = "name: nap\nmax_active_runs: 1\ntasks:\n- {name: t, plugin: sleep, params: {ms: 60000}}\n";
    client.expect(Method::POST, "/v1/workflows", &token, Body::Text(definition.into()), StatusCode::CREATED).await;
    let backfill = |from: &str, to: &str| Body::Json(json!({"workflow": "nap", "from": from, "to": to}));
    // Five days are more than the four the tenant may have unfinished.
    let answer = client.send(Method::POST, "/v1/backfills", &token, backfill("2026-01-01", "2026-01-05")).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "{}", answer.text);
    let error = answer.json();
    assert!(error["message"].as_str().unwrap().contains("max_unfinished_runs"), "{error}");
    assert!(answer.retry_after.is_some(), "a 429 says when to try again");
    let runs = client.expect(Method::GET, "/v1/runs", &token, Body::None, StatusCode::OK).await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 0, "nothing of it was made: {runs}");
    // Three fit; then one more does, two more do not.
    client
        .expect(Method::POST, "/v1/backfills", &token, backfill("2026-01-01", "2026-01-03"), StatusCode::CREATED)
        .await;
    let answer = client.send(Method::POST, "/v1/backfills", &token, backfill("2026-02-01", "2026-02-02")).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "{}", answer.text);
    assert!(answer.json()["message"].as_str().unwrap().contains("has 3 unfinished runs"), "{}", answer.text);
    client
        .expect(Method::POST, "/v1/backfills", &token, backfill("2026-02-01", "2026-02-01"), StatusCode::CREATED)
        .await;
    // The limit is the tenant's: another tenant backfills as it likes.
    let own = server.token();
    client.expect(Method::POST, "/v1/workflows", &own, Body::Text(definition.into()), StatusCode::CREATED).await;
    client.expect(Method::POST, "/v1/backfills", &own, backfill("2026-01-01", "2026-01-05"), StatusCode::CREATED).await;
    // Runs that end make room again.
    let runs = client.expect(Method::GET, "/v1/runs", &token, Body::None, StatusCode::OK).await;
    for run in runs["runs"].as_array().unwrap() {
        let id = run["id"].as_str().unwrap();
        client.send(Method::POST, &format!("/v1/runs/{id}/kill"), &token, Body::None).await;
    }
    let mut left = 0;
    for _ in 0..200 {
        let answer = client.send(Method::POST, "/v1/backfills", &token, backfill("2026-03-01", "2026-03-04")).await;
        if answer.status == StatusCode::CREATED {
            return;
        }
        assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS, "{}", answer.text);
        left += 1;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the killed runs did not make room ({left} refusals)");
}
// Quotas ----------------------------------------------------------------------------------

/// Runs a one-plugin job to its end; returns its single task's last
/// attempt (`failure_kind`, `message`) and the job's answer.
async fn job_failure(client: &Api, token: &str, job: Value) -> (String, String, Value) {
    let answer = client.expect(Method::POST, "/v1/jobs?wait=true", token, Body::Json(job), StatusCode::OK).await;
    let run = answer["run_id"].as_str().unwrap();
    let detail = client.expect(Method::GET, &format!("/v1/runs/{run}"), token, Body::None, StatusCode::OK).await;
    let task = detail["tasks"][0]["name"].as_str().unwrap().to_owned();
    let task =
        client.expect(Method::GET, &format!("/v1/runs/{run}/tasks/{task}"), token, Body::None, StatusCode::OK).await;
    let last = task["attempts_detail"].as_array().unwrap().last().cloned().unwrap_or(Value::Null);
    (last["failure_kind"].as_str().unwrap_or("").to_owned(), last["message"].as_str().unwrap_or("").to_owned(), answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_limit_fails_with_an_error_that_names_it() {
    let _serial = serial().await;
    let server = own_server().await;
    let client = Api::anonymous(&server.base_url());
    let admin = server.admin_token();
    let web = crate::support::TestServer::start().await;
    let allowed = web.host();
    let limits = json!({
        "max_memory": 32 << 20,
        "max_duration_ms": 1500,
        "scratch_bytes": 64 << 10,
        "allow_hosts": [allowed],
    });
    let token = tenant_with_token(&client, &admin, "capped", limits).await;

    // At apply: a task that asks for more than the tenant may have.
    for (task, location, limit) in [
        ("memory: 64MiB", "tasks[0].memory", "max_memory"),
        ("timeout: 10s", "tasks[0].timeout", "max_duration_ms"),
        ("allow_hosts: [example.org]", "tasks[0].allow_hosts[0]", "allow_hosts"),
    ] {
        let definition = format!("name: greedy\ntasks:\n  - name: t\n    plugin: echo\n    {task}\n");
        let error =
            client.expect(Method::POST, "/v1/workflows", &token, Body::Text(definition), StatusCode::BAD_REQUEST).await;
        assert_eq!(error["location"], location, "{error}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(limit) && message.contains("capped"), "{task}: {message}");
        let job = json!({"tasks": [{"name": "t", "plugin": "echo", "memory": "64MiB"}]});
        let error = client.expect(Method::POST, "/v1/jobs", &token, Body::Json(job), StatusCode::BAD_REQUEST).await;
        assert!(error["message"].as_str().unwrap().contains("max_memory"), "{error}");
    }

    // At run time: memory. The tenant's own hostile plugin meets the cap.
    let (membomb, _) = upload(&client, &token, dagr_builtins::MEMBOMB_PATH).await;
    let (kind, message, _) = job_failure(&client, &token, json!({"plugin": membomb})).await;
    assert_eq!(kind, "memory-limit", "{message}");
    assert!(message.contains("memory"), "{message}");

    // Duration: the tenant's cap shortens the default deadline.
    let (kind, message, _) = job_failure(&client, &token, json!({"plugin": "sleep", "params": {"ms": 10_000}})).await;
    assert_eq!(kind, "timeout", "{message}");

    // Scratch disk.
    let (probe, _) = upload(&client, &token, dagr_builtins::PROBE_PATH).await;
    let big = "x".repeat(256 << 10);
    let job = json!({"plugin": probe, "params": {"write": {"name": "big", "content": big}}});
    let (kind, message, answer) = job_failure(&client, &token, job).await;
    assert_eq!(answer["state"], "failed", "{answer}");
    assert!(message.contains("scratch"), "{kind}: {message}");

    // Network: the allowlisted host answers; any other is refused.
    let job = json!({"tasks": [{"name": "ok", "plugin": "http", "params": {"url": web.url("/json")}, "allow_hosts": [allowed]}]});
    let answer = client.expect(Method::POST, "/v1/jobs?wait=true", &token, Body::Json(job), StatusCode::OK).await;
    assert_eq!(answer["state"], "succeeded", "{answer}");
    let elsewhere = format!("http://127.0.0.2:{}/json", allowed.rsplit(':').next().unwrap());
    let job = json!({"tasks": [{"name": "no", "plugin": "http", "params": {"url": elsewhere}, "allow_hosts": [allowed], "retries": 0}]});
    let (kind, message, _) = job_failure(&client, &token, job).await;
    assert!(!kind.is_empty() && message.contains("network policy"), "{kind}: {message}");

    // A tenant with no allowlist has no network at all, whatever a task lists.
    let closed = tenant_with_token(&client, &admin, "closed", json!({})).await;
    let job =
        json!({"tasks": [{"name": "t", "plugin": "http", "params": {"url": web.url("/")}, "allow_hosts": [allowed]}]});
    let error = client.expect(Method::POST, "/v1/jobs", &closed, Body::Json(job), StatusCode::BAD_REQUEST).await;
    assert!(error["message"].as_str().unwrap().contains("network allowlist"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_attempts_stay_within_the_tenants_cap() {
    let _serial = serial().await;
    let server = own_server().await;
    let client = Api::anonymous(&server.base_url());
    let admin = server.admin_token();
    let token = tenant_with_token(&client, &admin, "narrow", json!({"max_concurrent": 2})).await;
    let mut definition = String::from("name: wide\ntasks:\n");
    for i in 0..8 {
        definition.push_str(&format!("  - name: t{i}\n    plugin: sleep\n    params: {{ms: 300}}\n"));
    }
    client.expect(Method::POST, "/v1/workflows", &token, Body::Text(definition), StatusCode::CREATED).await;
    let run = client
        .expect(Method::POST, "/v1/workflows/wide/runs", &token, Body::Json(json!({})), StatusCode::CREATED)
        .await;
    let finished = client.wait_run_as(&token, run["id"].as_str().unwrap()).await;
    assert_eq!(finished["state"], "succeeded", "{finished}");

    // The attempts' intervals: at no instant more than two overlap.
    let at = |task: &Value, field: &str| {
        chrono::DateTime::parse_from_rfc3339(task[field].as_str().unwrap()).unwrap().timestamp_millis()
    };
    let tasks = finished["tasks"].as_array().unwrap();
    let most = crate::support::most_at_once(tasks.iter().map(|task| (at(task, "started_at"), at(task, "finished_at"))));
    assert!(most <= 2, "{most} attempts of tenant `narrow` overlapped; its limit is 2: {finished:#}");
    assert_eq!(most, 2, "the two allowed slots were used: {finished:#}");
}
// Fairness ---------------------------------------------------------------------------------

/// One tenant queues 10,000 tasks on a worker with 4 slots; another
/// tenant's single task must not wait behind them. The bound, measured: how
/// many of the noisy tenant's tasks started between the quiet tenant's
/// submission and its task's start (the fair queue alternates tenants, so
/// only the slots already being refilled can go first), and the quiet
/// task's latency, printed for docs/BENCHMARKS.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_noisy_tenant_does_not_delay_another_tenants_task() {
    let _serial = serial().await;
    let server = tokio::task::spawn_blocking(|| DagrServer::start_with(&[("DAGR_WORKER__SLOTS", "4")])).await.unwrap();
    let client = Api::anonymous(&server.base_url());
    let admin = server.admin_token();
    let noisy = tenant_with_token(&client, &admin, "noisy", json!({})).await;
    let quiet = tenant_with_token(&client, &admin, "quiet", json!({})).await;

    let mut definition = String::from("name: flood\ntasks:\n");
    for i in 0..10_000 {
        definition.push_str(&format!("  - {{name: t{i}, plugin: sleep, params: {{ms: 5}}}}\n"));
    }
    client.expect(Method::POST, "/v1/workflows", &noisy, Body::Text(definition), StatusCode::CREATED).await;
    let flood = client
        .expect(Method::POST, "/v1/workflows/flood/runs", &noisy, Body::Json(json!({})), StatusCode::CREATED)
        .await;
    let flood = flood["id"].as_str().unwrap().to_owned();
    // Let the flood fill every slot and the queue.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let run = client.expect(Method::GET, &format!("/v1/runs/{flood}"), &noisy, Body::None, StatusCode::OK).await;
        let done = run["task_counts"]["succeeded"].as_u64().unwrap_or(0);
        if done >= 100 {
            break;
        }
        assert!(Instant::now() < deadline, "the flood does not progress: {}", run["state"]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut latencies = Vec::new();
    let mut ahead = Vec::new();
    for _ in 0..5 {
        let submitted = chrono::Utc::now().timestamp_millis();
        let clock = Instant::now();
        let job = json!({"plugin": "echo", "params": {"hello": "quiet"}});
        let answer = client.expect(Method::POST, "/v1/jobs?wait=true", &quiet, Body::Json(job), StatusCode::OK).await;
        latencies.push(clock.elapsed());
        assert_eq!(answer["state"], "succeeded", "{answer}");
        let run = answer["run_id"].as_str().unwrap();
        let detail = client.expect(Method::GET, &format!("/v1/runs/{run}"), &quiet, Body::None, StatusCode::OK).await;
        let started = millis(&detail["tasks"][0]["started_at"]);
        let flood = client.expect(Method::GET, &format!("/v1/runs/{flood}"), &noisy, Body::None, StatusCode::OK).await;
        let jumped = flood["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["started_at"].is_string() && (submitted..started).contains(&millis(&t["started_at"])))
            .count();
        ahead.push(jumped);
    }
    println!("fairness: quiet tenant's job (wait=true) latencies {latencies:?}; noisy tasks started first {ahead:?}");
    // 4 slots: at most the 4 in flight are replaced before the quiet task
    // gets one, plus one more per slot that was being refilled at that
    // instant.
    assert!(ahead.iter().all(|&n| n <= 8), "the noisy tenant's tasks went first: {ahead:?}");
    client.expect(Method::POST, &format!("/v1/runs/{flood}/kill"), &noisy, Body::Json(json!({})), StatusCode::OK).await;
}

fn millis(value: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(value.as_str().unwrap()).unwrap().timestamp_millis()
}
