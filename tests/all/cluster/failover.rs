//! The failures: masters and workers killed or frozen, etcd and PostgreSQL
//! down, tenants, secrets, rebalancing, and a chaos soak.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_runs_complete_on_the_others_exactly_once() {
    let _one = exclusive().await;
    let ledger = Ledger::start().await;
    let cluster = Cluster::up(2, 2, "3s").await;
    cluster.apply(&ledger.workflow("fan", &fan(10), 600)).await;
    let mut runs = Vec::new();
    for _ in 0..6 {
        runs.push(cluster.trigger("fan").await);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    cluster.kill("m1");
    let details = cluster.wait_all(&runs, Duration::from_secs(90)).await;
    let audit = audit(&cluster, &ledger, &details, true).await;
    assert_eq!(audit.task_instances, 6 * 12);
    assert_eq!(audit.executions, 6 * 12, "no task ran twice");
    let claimed = cluster.metrics("m2").await["runs_claimed"].as_u64().unwrap_or(0);
    assert!(claimed > 0, "m2 took nothing over: {}", cluster.metrics("m2").await);
}

/// The event stream, followed on the API node while a master is killed
/// (-9) mid-runs: every event of the runs arrives exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_goes_on_across_a_master_kill_9_exactly_once() {
    let _one = exclusive().await;
    let ledger = Ledger::start().await;
    let cluster = Cluster::up(2, 2, "3s").await;
    cluster.apply(&ledger.workflow("fan", &fan(6), 400)).await;
    let mut stream = crate::events::Stream::open(&cluster.api, &cluster.token, None, "", None).await;
    let mut runs = Vec::new();
    for _ in 0..4 {
        runs.push(cluster.trigger("fan").await);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    cluster.kill("m1");
    cluster.wait_all(&runs, Duration::from_secs(90)).await;
    let mut open: std::collections::BTreeSet<&String> = runs.iter().collect();
    let mut seen: Vec<Value> = Vec::new();
    while !open.is_empty() {
        let (_, event) = stream.next().await;
        if event["kind"] == "run.state" && event["data"]["to"] == "succeeded" {
            open.retain(|r| event["run_id"] != r.as_str());
        }
        seen.push(event);
    }
    let numbers: Vec<i64> = seen.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "in order, no duplicate: {numbers:?}");
    for run in &runs {
        let of_run: Vec<i64> =
            seen.iter().filter(|e| e["run_id"] == run.as_str()).map(|e| e["seq"].as_i64().unwrap()).collect();
        let page = cluster.get(&format!("/v1/events?run={run}&limit=10000")).await;
        let stored: Vec<i64> = page["events"].as_array().unwrap().iter().map(|e| e["seq"].as_i64().unwrap()).collect();
        assert_eq!(of_run, stored, "run {run}: the stream has the log's events, each once");
    }
}

/// Dispatches and results travel in batches: big params, outputs and
/// inputs (together past a 2 MB request body, axum's default) still get
/// through. (The definition itself must stay under the API's 4 MiB.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_params_outputs_and_inputs_cross_the_cluster() {
    let _one = exclusive().await;
    let cluster = Cluster::up(1, 1, "3s").await;
    let blob = "x".repeat(200 << 10);
    let names: Vec<String> = (0..16).map(|i| format!("t{i}")).collect();
    let mut tasks: Vec<Value> =
        names.iter().map(|name| json!({"name": name, "plugin": "echo", "params": {"blob": blob}})).collect();
    // 16 × 200 KB of inputs for one attempt; its output stays small.
    tasks.push(json!({
        "name": "join", "plugin": "transform", "depends_on": names,
        "params": {"filter": "[.inputs[] | .params.blob | length] | add"}
    }));
    cluster.apply(&json!({"name": "big", "tasks": tasks})).await;
    let run = cluster.trigger("big").await;
    let details = cluster.wait_all(std::slice::from_ref(&run), Duration::from_secs(120)).await;
    assert_eq!(details[0]["state"], "succeeded", "{}", details[0]);
    let join = cluster.get(&format!("/v1/runs/{run}/tasks/join")).await;
    assert_eq!(join["output"], json!(16 * (200 << 10)), "{join}");
}

/// Tenancy holds in a cluster too: each tenant's job runs on the masters
/// and workers, and another tenant's token sees none of it (404, never its
/// contents); a tenant's limits are enforced by the API node there as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_stay_apart_in_a_cluster() {
    let _one = exclusive().await;
    let cluster = Cluster::up(2, 1, "3s").await;
    let admin = std::fs::read_to_string(cluster.dir.join("api/admin.token")).unwrap().trim().to_owned();
    let admin = Api::at(&cluster.api, &admin);
    let mut tokens = HashMap::new();
    for (tenant, limits) in [("alpha", json!({})), ("beta", json!({"max_memory": 32 << 20}))] {
        let body = json!({"name": tenant, "limits": limits});
        let (status, answer) = admin.post("/v1/tenants", body).await;
        assert_eq!(status, reqwest::StatusCode::CREATED, "{answer}");
        let body = json!({"scopes": ["read", "write"], "label": "test"});
        let path = format!("/v1/tenants/{tenant}/tokens");
        let (status, answer) = admin.post(&path, body).await;
        assert_eq!(status, reqwest::StatusCode::CREATED, "{answer}");
        tokens.insert(tenant, Api::at(&cluster.api, answer["token"].as_str().unwrap()));
    }
    let (alpha, beta) = (&tokens["alpha"], &tokens["beta"]);

    // The cluster as the UI's Cluster page shows it: every node with its
    // slots and load; the admin token's only.
    let started = std::time::Instant::now();
    let view = loop {
        let view = admin.get_ok("/v1/cluster").await;
        if view["leader"].is_string() || started.elapsed() > crate::api::PATIENCE {
            break view;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(view["mode"], "cluster", "{view}");
    let members = view["members"].as_array().unwrap();
    let of = |role: &str| members.iter().filter(|m| m["role"] == role).collect::<Vec<_>>();
    assert_eq!((of("master").len(), of("worker").len(), of("api").len()), (2, 1, 1), "{view}");
    assert!(of("master").iter().all(|m| m["load"]["owned_slots"].is_number()), "masters report their load: {view}");
    assert!(of("master").iter().any(|m| m["id"] == view["leader"]), "the leader is one of the masters: {view}");
    assert!(of("worker").iter().all(|m| m["load"].is_object() && m["slots"].as_u64() > Some(0)), "{view}");
    let (status, _) = alpha.get("/v1/cluster").await;
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN);

    let job = json!({"plugin": "echo", "params": {"private": "alpha's"}});
    let (status, answer) = alpha.post("/v1/jobs?wait=true", job).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{answer}");
    assert_eq!(answer["state"], "succeeded", "{answer}");
    let run = answer["run_id"].as_str().unwrap().to_owned();

    let task = answer["outputs"].as_object().and_then(|o| o.keys().next().cloned()).unwrap_or_else(|| "echo".into());
    for path in [
        format!("/v1/runs/{run}"),
        format!("/v1/runs/{run}/events"),
        format!("/v1/runs/{run}/tasks/{task}"),
        format!("/v1/runs/{run}/tasks/{task}/logs"),
    ] {
        let (status, _) = alpha.get(&path).await;
        assert!(status.is_success(), "alpha reads {path}: {status}");
        let (status, answer) = beta.get(&path).await;
        assert_eq!(status, reqwest::StatusCode::NOT_FOUND, "beta reads {path}: {answer}");
        assert!(!answer.to_string().contains("alpha's"), "{answer}");
    }
    let (status, answer) = beta.post(&format!("/v1/runs/{run}/kill"), json!({})).await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND, "beta kills alpha's run: {answer}");
    let (_, listed) = beta.get("/v1/runs").await;
    assert!(!listed.to_string().contains(&run), "beta lists alpha's run: {listed}");

    // Beta's cap on memory holds here too.
    let job = json!({"tasks": [{"name": "t", "plugin": "echo", "memory": "64MiB"}]});
    let (status, answer) = beta.post("/v1/jobs", job).await;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST, "{answer}");
    assert!(answer["message"].as_str().unwrap_or("").contains("max_memory"), "{answer}");

    // Alpha's secret, set through the API node, reaches alpha's task on a
    // worker (which opens it with the cluster's secrets key) and nobody
    // else's; PostgreSQL holds it sealed.
    let value = format!("alpha-secret-{}", std::process::id());
    let body = json!({"value": value});
    let (status, answer) = alpha.put("/v1/secrets/k", body).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{answer}");
    let reads = json!({"plugin": "script", "params": {"script": "let v = secret(\"k\"); if v == () { \"none\" } else { v.len() }"}});
    let (status, answer) = alpha.post("/v1/jobs?wait=true", reads.clone()).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{answer}");
    assert_eq!(answer["output"], json!(value.len()), "alpha's task reads alpha's secret: {answer}");
    let (status, answer) = beta.post("/v1/jobs?wait=true", reads).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{answer}");
    assert_eq!(answer["output"], "none", "beta's task does not see alpha's secret: {answer}");
    let dump = pg_dump_table(&cluster, "secrets");
    assert!(dump.contains("sealed:v1:"), "{dump}");
    assert!(!dump.contains(&value), "the secret is in PostgreSQL in plain text: {dump}");
}

/// The master that owns a run (once one has claimed it).
async fn owner_of(cluster: &Cluster, run: &str) -> String {
    for _ in 0..120 {
        let owner = psql_value(cluster, &format!("SELECT coalesce(owner, '') FROM runs WHERE id = '{run}'"));
        if !owner.is_empty() {
            return owner;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("no master claimed run {run}");
}

/// The outer DAG across masters: the downstream run waits on a master
/// other than the upstream's; that master is frozen before the upstream
/// ends (so it cannot act on the wake-up the store writes) and killed
/// after: the master that takes its slot over finds the wake-up and starts
/// the downstream run, exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downstream_run_starts_once_though_its_master_died_after_the_upstream_ended() {
    let _one = exclusive().await;
    let ledger = Ledger::start().await;
    let cluster = Cluster::up(3, 2, "3s").await;
    let mut up = ledger.workflow("up", &[("u".to_owned(), vec![])], 3000);
    up["name"] = json!("up");
    let mut down = ledger.workflow("down", &[("d".to_owned(), vec![])], 10);
    down["upstream"] = json!([{"workflow": "up"}]);
    cluster.apply(&up).await;
    cluster.apply(&down).await;
    let at = json!({"logical_time": "2026-05-01T00:00:00Z"});
    let down_run = cluster.post("/v1/workflows/down/runs", at.clone()).await["id"].as_str().unwrap().to_owned();
    let down_master = owner_of(&cluster, &down_run).await;
    assert_eq!(cluster.get(&format!("/v1/runs/{down_run}")).await["state"], "waiting");
    // An upstream run owned by another master (its slot is its id's hash).
    let mut up_run = String::new();
    for _ in 0..20 {
        let candidate = cluster.post("/v1/workflows/up/runs", at.clone()).await["id"].as_str().unwrap().to_owned();
        if owner_of(&cluster, &candidate).await != down_master {
            up_run = candidate;
            break;
        }
        let _ = cluster.post(&format!("/v1/runs/{candidate}/kill"), json!({})).await;
    }
    assert!(!up_run.is_empty(), "every upstream run landed on {down_master}");
    cluster.stop(&down_master);
    cluster.wait_all(std::slice::from_ref(&up_run), Duration::from_secs(60)).await;
    // Done or not: once the stopped master's lease is up, another master may
    // take the run over and apply the wake-up before this looks.
    let wakes =
        psql_value(&cluster, &format!("SELECT count(*) FROM commands WHERE run_id = '{down_run}' AND kind = 'wake'"));
    assert_ne!(wakes, "0", "the store wrote the wake-up with the upstream's end");
    cluster.kill(&down_master);
    let details = cluster.wait_all(std::slice::from_ref(&down_run), Duration::from_secs(90)).await;
    let audit = audit(&cluster, &ledger, &details, true).await;
    assert_eq!(audit.task_instances, 1);
    assert_eq!(audit.executions, 1, "the downstream task ran exactly once");
    let new_owner = owner_of(&cluster, &down_run).await;
    assert_ne!(new_owner, down_master);
}

/// The rows of `table` in the cluster's PostgreSQL, as `pg_dump` prints them.
fn pg_dump_table(cluster: &Cluster, table: &str) -> String {
    let url = std::fs::read_to_string(cluster.dir.join("postgres.url")).unwrap();
    let bin = pg_bin();
    let out = Command::new(bin.join("pg_dump"))
        .args(["--data-only", "--table", table, url.trim()])
        .output()
        .unwrap_or_else(|e| panic!("cannot run pg_dump from {}: {e}", bin.display()));
    assert!(out.status.success(), "pg_dump: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Reaching a node's port is not enough: internal endpoints want the
/// cluster's secret (a dispatch names its tenant, whose secrets the task
/// may read; a result decides a task).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_endpoints_refuse_requests_without_the_cluster_secret() {
    let _one = exclusive().await;
    let cluster = Cluster::up(1, 1, "3s").await;
    let http = reqwest::Client::new();
    let (worker, master) = (cluster.addr("w1"), cluster.addr("m1"));
    let attempts = json!({"attempts": []});
    for (url, body) in [
        (format!("{worker}/internal/attempts"), attempts.clone()),
        (format!("{worker}/internal/attempts/adopt"), json!({})),
        (format!("{master}/internal/results"), json!({"results": []})),
        (format!("{master}/internal/wake"), json!(null)),
    ] {
        for secret in [None, Some("not-the-cluster-secret-at-all")] {
            let mut request = http.post(&url).json(&body);
            if let Some(secret) = secret {
                request = request.header("x-dagr-cluster-secret", secret);
            }
            let status = request.send().await.unwrap().status();
            assert_eq!(status, reqwest::StatusCode::UNAUTHORIZED, "{url} with {secret:?}");
        }
    }
    for url in [format!("{worker}/healthz"), format!("{master}/healthz")] {
        assert!(http.get(&url).send().await.unwrap().status().is_success(), "{url} stays open");
    }
    // The metrics take the secret as a bearer token (as Prometheus sends
    // it), and pass promtool on every node.
    for node in [&worker, &master] {
        let url = format!("{node}/metrics");
        let status = http.get(&url).send().await.unwrap().status();
        assert_eq!(status, reqwest::StatusCode::UNAUTHORIZED, "{url} without the secret");
        let response = http.get(&url).bearer_auth(cluster.secret()).send().await.unwrap();
        assert!(response.status().is_success(), "{url}: {}", response.status());
        let text = response.text().await.unwrap();
        if let Some(complaints) = crate::events::promtool_complaints(&text) {
            panic!("promtool check metrics on {url}:\n{complaints}\n{text}");
        }
        let name = if node == &worker { "dagr_worker_slots" } else { "dagr_engine_steps_total" };
        assert!(text.contains(&format!("# TYPE {name} ")), "{url}: {text}");
    }
    // With the secret, the same endpoint answers.
    let response = http
        .post(format!("{worker}/internal/attempts"))
        .header("x-dagr-cluster-secret", cluster.secret())
        .json(&attempts)
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_is_fenced_when_it_wakes_up() {
    let _one = exclusive().await;
    let ledger = Ledger::start().await;
    let cluster = Cluster::up(2, 2, "2s").await;
    cluster.apply(&ledger.workflow("fan", &fan(16), 300)).await;
    let mut runs = Vec::new();
    for _ in 0..8 {
        runs.push(cluster.trigger("fan").await);
    }
    // Work under way, m1 owning part of it.
    started(&ledger, 1, Duration::from_secs(30)).await;
    // Owning slots is not enough: m1 must drive runs when it freezes (it
    // may have just gained its slots and not yet claimed their runs), or
    // it has nothing to write when it wakes. A run's slot is the hash of
    // its random id, so m1 may hold none of the eight, or (on a loaded
    // machine) all of its own may have ended before it is looked at: one
    // more run a second, up to 16, until it drives one.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = Instant::now();
    let before = loop {
        let m = cluster.metrics("m1").await;
        if m["owned_slots"].as_u64().unwrap_or(0) > 0 && m["active_runs"].as_u64().unwrap_or(0) > 0 {
            break m;
        }
        assert!(Instant::now() < deadline, "m1 drove none of {} runs: {m}", runs.len());
        if runs.len() < 24 && last.elapsed() >= Duration::from_secs(1) {
            runs.push(cluster.trigger("fan").await);
            last = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    cluster.stop("m1");
    // Past the lease: m2 takes m1's slots over while m1 is frozen.
    until(Duration::from_secs(60), "m2 to take every slot over", || async {
        (cluster.metrics("m2").await["owned_slots"].as_u64() == Some(1024)).then_some(())
    })
    .await;
    assert!(before["owned_slots"].as_u64().unwrap_or(0) > 0);
    cluster.cont("m1");
    let details = cluster.wait_all(&runs, Duration::from_secs(90)).await;
    let audit = audit(&cluster, &ledger, &details, true).await;
    assert_eq!(audit.executions, audit.task_instances, "no task ran twice");
    // The runs the frozen master drove are not its own when it wakes up.
    // Either it wrote first and the store refused the write (another
    // master's epoch), or it let them go without a write: its lease had
    // lapsed, or it saw another master's claim on them. Which comes first
    // is a race between its own timers and requests (under load, the
    // second more often); the store's fence itself is tested on both
    // backends by the store's conformance tests. Nothing it wrote landed:
    // the audit above found every task run once.
    // Counted since the freeze.
    let since = |m: &Value, name: &str| m[name].as_u64().unwrap_or(0) - before[name].as_u64().unwrap_or(0);
    let let_go = |m: &Value| (since(m, "fenced_writes"), since(m, "runs_handed_over"));
    let mut after = Value::Null;
    for _ in 0..40 {
        after = cluster.metrics("m1").await;
        if let_go(&after) != (0, 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (fenced, handed_over) = let_go(&after);
    eprintln!("stale master: {fenced} fenced writes, {handed_over} runs let go, metrics {after}");
    assert!(fenced + handed_over > 0, "the frozen master let none of its runs go: {after}");
    assert!(cluster.metrics("m2").await["runs_claimed"].as_u64().unwrap_or(0) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_s_attempt_runs_again_elsewhere_within_ttl_plus_two_seconds() {
    let _one = exclusive().await;
    let ledger = Ledger::start().await;
    let cluster = Cluster::up(1, 2, "3s").await;
    cluster.apply(&ledger.workflow("long", &[("only".to_owned(), vec![])], 4000)).await;
    let run = cluster.trigger("long").await;
    let started = wait_for(&ledger, &run, "only", 1, Duration::from_secs(30)).await;
    let detail = cluster.get(&format!("/v1/runs/{run}/tasks/only")).await;
    let worker = detail["attempts_detail"][0]["worker"].as_str().unwrap().to_owned();
    assert!(started > 0);
    let killed_at = now_ms();
    cluster.kill(&worker);
    let again = wait_for(&ledger, &run, "only", 2, Duration::from_secs(30)).await;
    let delay = again - killed_at;
    eprintln!("worker {worker} killed; attempt 2 started {delay} ms later");
    assert!(delay <= 5_000, "attempt 2 started {delay} ms after the kill (TTL 3 s + 2 s allowed)");
    let details = cluster.wait_all(std::slice::from_ref(&run), Duration::from_secs(60)).await;
    audit(&cluster, &ledger, &details, false).await;
    let detail = cluster.get(&format!("/v1/runs/{run}/tasks/only")).await;
    let first = &detail["attempts_detail"][0];
    assert_eq!(first["failure_kind"], "worker-lost");
    assert_eq!(first["charged"], false);
    assert_ne!(detail["attempts_detail"][1]["worker"], worker);
    assert_eq!(detail["failures"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_self_fence_while_etcd_is_down_and_recover() {
    let _one = exclusive().await;
    let ledger = Ledger::start().await;
    let cluster = Cluster::up(2, 2, "2s").await;
    cluster.apply(&ledger.workflow("fan", &fan(12), 500)).await;
    let mut runs = Vec::new();
    for _ in 0..4 {
        runs.push(cluster.trigger("fan").await);
    }
    started(&ledger, 1, Duration::from_secs(30)).await;
    cluster.kill("etcd");
    // Workers stop acting: they report themselves unhealthy (within the
    // 2 s lease; a generous deadline for a loaded machine).
    let http = reqwest::Client::new();
    for w in ["w1", "w2"] {
        until(Duration::from_secs(30), &format!("{w} to stop acting without etcd"), || async {
            let status: Value = http
                .get(format!("{}/internal/status", cluster.addr(w)))
                .header("x-dagr-cluster-secret", cluster.secret())
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (status["healthy"] == false).then_some(())
        })
        .await;
    }
    until(Duration::from_secs(30), "m1 to give its slots up without etcd", || async {
        (cluster.metrics("m1").await["owned_slots"] == 0).then_some(())
    })
    .await;
    cluster.restart("etcd").await;
    for _ in 0..4 {
        runs.push(cluster.trigger("fan").await);
    }
    let details = cluster.wait_all(&runs, Duration::from_secs(120)).await;
    let audit = audit(&cluster, &ledger, &details, false).await;
    eprintln!("{audit:?}");
    assert_eq!(audit.task_instances, 8 * 14);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_complete_across_a_postgres_restart() {
    let _one = exclusive().await;
    let ledger = Ledger::start().await;
    let cluster = Cluster::up(1, 1, "3s").await;
    cluster.apply(&ledger.workflow("fan", &fan(8), 400)).await;
    let mut runs = Vec::new();
    for _ in 0..4 {
        runs.push(cluster.trigger("fan").await);
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    cluster.restart("postgres").await;
    let details = cluster.wait_all(&runs, Duration::from_secs(120)).await;
    let audit = audit(&cluster, &ledger, &details, false).await;
    assert_eq!(audit.task_instances, 4 * 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_master_takes_about_a_quarter_of_the_slots_and_gives_them_back() {
    let _one = exclusive().await;
    let cluster = Cluster::up(3, 1, "2s").await;
    let owned = |names: &'static [&'static str]| {
        let c = &cluster;
        async move {
            let mut out = BTreeMap::new();
            for n in names {
                out.insert(*n, c.metrics(n).await["owned_slots"].as_u64().unwrap_or(0));
            }
            out
        }
    };
    let settled = |m: &BTreeMap<&str, u64>| m.values().sum::<u64>() == 1024 && m.values().all(|&v| v > 0);
    let mut three = BTreeMap::new();
    for _ in 0..40 {
        three = owned(&["m1", "m2", "m3"]).await;
        if settled(&three) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(settled(&three), "{three:?}");
    let m4 = cluster.add("master").await;
    assert_eq!(m4, "m4");
    let mut four = BTreeMap::new();
    for _ in 0..40 {
        four = owned(&["m1", "m2", "m3", "m4"]).await;
        if settled(&four) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(settled(&four), "{four:?}");
    let moved: u64 = ["m1", "m2", "m3"].iter().map(|m| three[m] - four[m]).sum();
    eprintln!("3 masters {three:?} → 4 masters {four:?}: {moved} slots moved");
    assert_eq!(moved, four["m4"], "only slots for the new master moved");
    assert!((180..=330).contains(&moved), "about 1024/4 should move, {moved} did");
    cluster.kill("m4");
    let mut back = BTreeMap::new();
    for _ in 0..60 {
        back = owned(&["m1", "m2", "m3"]).await;
        if back == three {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(back, three, "removing m4 gave back exactly its slots");
}

/// A DAG node: its name and its upstream nodes.
type Node = (String, Vec<String>);

/// Alibaba production DAGs from the datasets, as ledger workflows.
fn alibaba(count: usize) -> Vec<(String, Vec<Node>)> {
    let dir = support::workspace_root().join("tests/datasets/dags/alibaba-v2018");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()).collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let dag: Value = serde_json::from_str(&std::fs::read_to_string(&path).ok()?).ok()?;
            let tasks = dag["tasks"].as_array()?;
            if tasks.len() > 40 {
                return None;
            }
            let name = |id: &str| {
                id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' }).collect::<String>()
            };
            let out = tasks
                .iter()
                .map(|t| {
                    let deps = t["deps"]
                        .as_array()
                        .map(|d| d.iter().filter_map(|x| x.as_str()).map(name).collect())
                        .unwrap_or_default();
                    (name(t["id"].as_str().unwrap_or("t")), deps)
                })
                .collect();
            Some((path.file_stem()?.to_string_lossy().replace('_', "-"), out))
        })
        .take(count)
        .collect()
}

/// The chaos soak: random SIGKILL, SIGSTOP/SIGCONT and restarts of masters
/// and workers while DAGs from the datasets run. `DAGR_CHAOS_SECS` sets its
/// length (default 30 s, the short form the suite runs; `tests/chaos.sh`
/// runs long).
///
/// History: until 2026-11-29 it stayed out of the default suite because
/// short soaks left a run `running` now and then (no task ran twice, none
/// was lost; the run did not finish). The causes found and fixed: a worker
/// restarted under the same id within its TTL (its attempts were never
/// declared lost: masters now ask workers about long-silent attempts); a
/// run loaded for a command, or loaded nowhere after a fence, kept its
/// running attempts untracked (every load adopts them; masters sweep their
/// slots for such runs); a dispatch dropped mid-request leaked the worker's
/// reservation; a master loaded a claimed run from a row read before its
/// claim, older than the task rows read after it (the run then never
/// dispatched the tasks it had requeued).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_soak() {
    let _one = exclusive().await;
    let secs: u64 = std::env::var("DAGR_CHAOS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let ledger = Ledger::start().await;
    // Workers killed and frozen every few seconds lose an attempt now and
    // then, and a burst of faults on the workers can lose one task's
    // attempts more often than the default limit allows (a 600 s soak did:
    // four times in 7.5 s, on w3, w2, w1 and w2 again, each at a kill or a
    // freeze). What the soak checks is that none runs twice and none is
    // lost for good, not that limit.
    let cluster = Cluster::up_with_env(3, 3, "2s", &[], &[("DAGR_MASTER__MAX_LOST_ATTEMPTS", "20")]).await;
    let dags = alibaba(12);
    for (name, tasks) in &dags {
        cluster.apply(&ledger.workflow(name, tasks, 60)).await;
    }
    let mut runs = Vec::new();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let until = Instant::now() + Duration::from_secs(secs);
    let mut actions = Vec::new();
    let mut i = 0;
    while Instant::now() < until {
        for _ in 0..3 {
            let (name, _) = &dags[i % dags.len()];
            i += 1;
            runs.push(cluster.trigger(name).await);
        }
        let node = match next() % 6 {
            0..=2 => format!("m{}", 1 + next() % 3),
            _ => format!("w{}", 1 + next() % 3),
        };
        match next() % 3 {
            0 => {
                cluster.kill(&node);
                tokio::time::sleep(Duration::from_millis(500 + next() % 2000)).await;
                cluster.restart(&node).await;
                actions.push(format!("kill+restart {node}"));
            }
            1 => {
                cluster.stop(&node);
                tokio::time::sleep(Duration::from_millis(1000 + next() % 3000)).await;
                cluster.cont(&node);
                actions.push(format!("stop/cont {node}"));
            }
            _ => {
                tokio::time::sleep(Duration::from_millis(1000)).await;
            }
        }
    }
    eprintln!("chaos for {secs} s: {} runs, actions: {actions:?}", runs.len());
    let details = cluster.wait_all(&runs, Duration::from_secs(240)).await;
    let audit = audit(&cluster, &ledger, &details, false).await;
    eprintln!("chaos audit: {audit:?}");
    assert!(audit.task_instances > 0);
}

/// A dispatch that arrives late — it waited in a frozen worker's socket,
/// or its call timed out, while the master moved on — does not start an
/// attempt the master has ended: the worker remembers having told a master
/// it does not know the attempt, or having been told to stop it, and
/// refuses a dispatch sent to a lease it no longer holds. Telling a master
/// it does not know an attempt, it vouches, under the lease it holds, that
/// the attempt never reached it; the result of one that ran, which a master
/// acknowledged as stale, it keeps for a master that asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_dispatch_does_not_start_an_attempt_the_master_ended() {
    use dagr_protocol::wire::{AdoptRequest, AttemptKey, AttemptSpec, CancelRequest, DispatchBatch, PluginSpec};

    let _one = exclusive().await;
    let ledger = Ledger::start().await;
    let cluster = Cluster::up(1, 1, "3s").await;
    cluster.apply(&ledger.workflow("fan", &fan(1), 10)).await;
    let run = cluster.trigger("fan").await;
    cluster.wait_all(std::slice::from_ref(&run), Duration::from_secs(60)).await;
    let epoch: i64 = psql_value(&cluster, &format!("SELECT epoch FROM runs WHERE id = '{run}'")).parse().unwrap();
    // Attempts of task t0 (index 1) that no master made: the worker cannot
    // tell, and the plugin is none, so one it takes fails at once.
    let spec = |number: u32| AttemptSpec {
        key: AttemptKey { run_id: run.clone(), task: 1, number },
        epoch,
        master: "m1".into(),
        tenant: "default".into(),
        workflow: "fan".into(),
        task_name: "t0".into(),
        plugin: PluginSpec { name: "ledger".into(), version: "0".into(), sha256: "0".repeat(64) },
        params: "{}".into(),
        inputs: "{}".into(),
        logical_time: "2026-01-01T00:00:00Z".into(),
        idempotency_key: format!("{run}/t0/{number}"),
        priority: 0,
        grade: 0,
        deadline_ms: 5_000,
        memory_bytes: 64 << 20,
        max_output_bytes: 1 << 16,
        max_log_bytes: 1 << 16,
        allow_hosts: vec![],
        scratch_bytes: None,
        trace: None,
        worker_lease: None,
    };
    let http = reqwest::Client::new();
    let worker = cluster.addr("w1");
    let post = |path: &str, body: Value| {
        http.post(format!("{worker}{path}")).header("x-dagr-cluster-secret", cluster.secret()).json(&body).send()
    };
    let dispatch = |number: u32, lease: Option<i64>| {
        let batch = DispatchBatch { attempts: vec![AttemptSpec { worker_lease: lease, ..spec(number) }] };
        let batch = serde_json::to_value(batch).unwrap();
        async move { post("/internal/attempts", batch).await.unwrap() }
    };
    let verdict = |response: reqwest::Response| async move {
        assert!(response.status().is_success(), "{}", response.status());
        let answer: Value = response.json().await.unwrap();
        answer["verdicts"][0].clone()
    };

    // One it never heard of, with the run's epoch, is taken.
    let taken = verdict(dispatch(90, None).await).await;
    assert_eq!(taken["verdict"], "accepted", "{taken}");

    // One it said it does not know is not, and the refusal says why. It
    // never reached the worker, which says so under the lease the master
    // sent the run's attempts to (its row keeps it).
    let adopt = |number: u32| {
        let adopt = AdoptRequest { key: spec(number).key, epoch, master: "m1".into() };
        let answer = post("/internal/attempts/adopt", serde_json::to_value(adopt).unwrap());
        async move { answer.await.unwrap().json::<Value>().await.unwrap() }
    };
    let lease: i64 =
        psql_value(&cluster, &format!("SELECT lease FROM attempts WHERE run_id = '{run}' AND task_idx = 0"))
            .parse()
            .unwrap();
    let answer = adopt(91).await;
    assert_eq!(answer["state"], "unknown", "{answer}");
    assert_eq!(answer["never_under"], lease, "{answer}");
    let refused = verdict(dispatch(91, None).await).await;
    assert_eq!(refused["verdict"], "refused", "{refused}");
    let reason = refused["reason"].as_str().unwrap();
    assert!(reason.contains("does not know the attempt"), "{reason}");

    // Nor is one it was told to stop before it had it (the cancellation
    // overtook a dispatch whose call had timed out).
    let cancel = serde_json::to_value(CancelRequest { key: spec(92).key }).unwrap();
    let status = post("/internal/attempts/cancel", cancel).await.unwrap().status();
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND, "not here");
    let refused = verdict(dispatch(92, None).await).await;
    assert_eq!(refused["verdict"], "refused", "{refused}");

    // Nor is one sent to a lease it does not hold (it lost that one and
    // joined again under another).
    let refused = verdict(dispatch(93, Some(1)).await).await;
    assert_eq!(refused["verdict"], "refused", "{refused}");
    let reason = refused["reason"].as_str().unwrap();
    assert!(reason.contains("an earlier lease of this worker"), "{reason}");

    // The one it took ran, and its master acknowledged the result as stale
    // (no master made it). The worker keeps the result and gives it to a
    // master that asks about the attempt (one that took the run over would
    // apply it instead of running the task again).
    until(Duration::from_secs(30), "m1 to find a result stale", || async {
        (cluster.metrics("m1").await["stale_results"].as_u64().unwrap_or(0) > 0).then_some(())
    })
    .await;
    for _ in 0..2 {
        let answer = adopt(90).await;
        assert_eq!(answer["state"], "finished", "{answer}");
        assert_eq!(answer["result"]["key"]["number"], 90, "{answer}");
        assert_eq!(answer["result"]["epoch"], epoch, "with the asking master's epoch: {answer}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A tenant's `max_concurrent` is counted by the master that drives its
/// runs, so all a capped tenant's runs are made in one slot: one master
/// counts all its attempts. With its runs spread over the masters' slots,
/// each master let two attempts through: up to six at once here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_s_max_concurrent_holds_across_masters() {
    let _one = exclusive().await;
    let ledger = Ledger::start().await;
    let cluster = Cluster::up(3, 2, "2s").await;
    let admin = std::fs::read_to_string(cluster.dir.join("api/admin.token")).unwrap().trim().to_owned();
    let patched = reqwest::Client::new()
        .patch(format!("{}/v1/tenants/default", cluster.api))
        .bearer_auth(&admin)
        .json(&json!({"limits": {"max_concurrent": 2}}))
        .send()
        .await
        .unwrap();
    assert!(patched.status().is_success(), "PATCH the tenant: {}", patched.text().await.unwrap_or_default());
    // The API nudges every master to reload the limits (milliseconds);
    // their periodic reload is the fallback.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut runs = Vec::new();
    for name in ["capped-a", "capped-b", "capped-c"] {
        cluster.apply(&ledger.workflow(name, &fan(4), 300)).await;
        for _ in 0..2 {
            runs.push(cluster.trigger(name).await);
        }
    }
    let slots = psql_value(&cluster, "SELECT count(DISTINCT slot) FROM runs WHERE tenant = 'default'");
    assert_eq!(slots, "1", "the capped tenant's runs are made in one slot");
    let details = cluster.wait_all(&runs, Duration::from_secs(120)).await;
    audit(&cluster, &ledger, &details, false).await;
    // The executions the ledger saw: at no instant more than two overlap.
    let entries = ledger.entries();
    let most = crate::support::most_at_once(entries.iter().filter(|e| e.event == "start").map(|start| {
        let end = entries
            .iter()
            .filter(|e| e.event != "start" && e.run == start.run && e.task == start.task && e.attempt == start.attempt)
            .map(|e| e.at)
            .min()
            .unwrap_or(i64::MAX);
        (start.at, end)
    }));
    assert!(most <= 2, "{most} attempts of tenant `default` ran at once; its max_concurrent is 2");
    assert_eq!(most, 2, "the two allowed attempts ran at once");
}

/// A workflow's `max_active_runs` is counted by the master that drives its
/// runs, so all its runs are made in one slot: one master drives them
/// all, and after it is killed, the one that takes the slot over. With
/// runs spread over the masters' slots, each master let one run at a time
/// through: three at once here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_active_runs_holds_across_masters_and_a_failover() {
    let _one = exclusive().await;
    let ledger = Ledger::start().await;
    let cluster = Cluster::up(3, 2, "2s").await;
    let mut spec = ledger.workflow("one-at-a-time", &[("t".to_owned(), vec![])], 300);
    spec["max_active_runs"] = json!(1);
    cluster.apply(&spec).await;
    let runs: Vec<String> = futures::future::join_all((0..8).map(|_| cluster.trigger("one-at-a-time"))).await;
    let slots = psql_value(&cluster, "SELECT count(DISTINCT slot) FROM runs WHERE workflow = 'one-at-a-time'");
    assert_eq!(slots, "1", "the runs are made in one slot");
    // Kill the master driving them once the first has run.
    started(&ledger, 2, Duration::from_secs(30)).await;
    let owner = psql_value(&cluster, &format!("SELECT owner FROM runs WHERE id = '{}'", runs[0]));
    cluster.kill(&owner);
    let details = cluster.wait_all(&runs, Duration::from_secs(120)).await;
    audit(&cluster, &ledger, &details, false).await;
    // No two runs' executions overlap.
    let mut spans: Vec<(i64, i64, String)> = Vec::new();
    for run in &runs {
        let entries: Vec<Entry> = ledger.entries().into_iter().filter(|e| e.run == *run).collect();
        let start = entries.iter().filter(|e| e.event == "start").map(|e| e.at).min().unwrap();
        let end = entries.iter().filter(|e| e.event != "start").map(|e| e.at).max().unwrap_or(i64::MAX);
        spans.push((start, end, run.clone()));
    }
    spans.sort();
    for pair in spans.windows(2) {
        assert!(
            pair[1].0 >= pair[0].1,
            "run {} started at {} while run {} ran until {}",
            pair[1].2,
            pair[1].0,
            pair[0].2,
            pair[0].1
        );
    }
}
