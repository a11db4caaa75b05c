//! Webhooks against a real `dagr serve` and a receiver in the test that
//! checks every signature (HMAC-SHA256 as the Standard Webhooks
//! specification says, computed here, not by dagr's code): deliveries in
//! order, at least once, through a receiver that fails for a while and a
//! `kill -9` of the sender; the delivery log; a subscription failing too
//! long is disabled and its tenant told; the network rule. The event log
//! published to a real `nats-server`, across a `kill -9`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::api::{Api, PATIENCE};
use crate::e2e::restart;
use crate::server::DagrServer;

/// What the receiver saw.
#[derive(Default)]
struct Seen {
    /// Requests to refuse (500) before taking any.
    refuse: usize,
    /// Whether to refuse every request.
    always_fail: bool,
    /// The events taken: (webhook-id, body).
    taken: Vec<(String, Value)>,
    refused: usize,
    bad_signatures: Vec<String>,
}

struct Receiver {
    url: String,
    seen: Arc<Mutex<Seen>>,
    secret: Arc<Mutex<String>>,
}

fn verify(secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<(String, Value), String> {
    let header =
        |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned).ok_or(format!("no {name}"));
    let (id, timestamp, signature) =
        (header("webhook-id")?, header("webhook-timestamp")?, header("webhook-signature")?);
    let stamp: i64 = timestamp.parse().map_err(|_| "a bad timestamp".to_owned())?;
    if (chrono::Utc::now().timestamp() - stamp).abs() > 300 {
        return Err(format!("timestamp {stamp} is not now"));
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = b64.decode(secret.strip_prefix("whsec_").ok_or("no whsec_ prefix")?).map_err(|e| e.to_string())?;
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    let expected = format!("v1,{}", b64.encode(mac.finalize().into_bytes()));
    if !signature.split(' ').any(|s| s == expected) {
        return Err(format!("signature {signature} is not {expected}"));
    }
    Ok((id, serde_json::from_slice(body).map_err(|e| e.to_string())?))
}

impl Receiver {
    async fn start(refuse: usize, always_fail: bool) -> Receiver {
        let seen = Arc::new(Mutex::new(Seen { refuse, always_fail, ..Seen::default() }));
        let secret = Arc::new(Mutex::new(String::new()));
        let (s, k) = (seen.clone(), secret.clone());
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
                let (seen, secret) = (s.clone(), k.clone());
                async move {
                    let secret = secret.lock().unwrap().clone();
                    let mut seen = seen.lock().unwrap();
                    if seen.always_fail || seen.refuse > 0 {
                        seen.refuse = seen.refuse.saturating_sub(1);
                        seen.refused += 1;
                        return StatusCode::INTERNAL_SERVER_ERROR;
                    }
                    match verify(&secret, &headers, &body) {
                        Ok(taken) => {
                            seen.taken.push(taken);
                            StatusCode::NO_CONTENT
                        }
                        Err(why) => {
                            seen.bad_signatures.push(why);
                            StatusCode::UNAUTHORIZED
                        }
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { url, seen, secret }
    }

    /// The numbers of the events taken, in the order taken, whether one
    /// per request or in batches.
    fn seqs(&self) -> Vec<i64> {
        let seen = self.seen.lock().unwrap();
        let mut seqs = Vec::new();
        for (_, body) in &seen.taken {
            match body["type"].as_str() {
                Some("batch") => {
                    seqs.extend(body["data"].as_array().unwrap().iter().map(|e| e["data"]["seq"].as_i64().unwrap()))
                }
                _ => seqs.push(body["data"]["seq"].as_i64().unwrap()),
            }
        }
        seqs
    }

    fn ids(&self) -> Vec<i64> {
        let seen = self.seen.lock().unwrap();
        seen.taken.iter().map(|(id, _)| id.strip_prefix("evt_").unwrap().parse().unwrap()).collect()
    }
}

fn server_with(extra: &[(&str, &str)]) -> DagrServer {
    let mut envs = vec![
        ("DAGR_WEBHOOKS__ALLOW_PRIVATE", "true"),
        ("DAGR_WEBHOOKS__RETRY_BASE", "100ms"),
        ("DAGR_WEBHOOKS__MAX_BACKOFF", "400ms"),
    ];
    envs.extend_from_slice(extra);
    DagrServer::start_with(&envs)
}

const FLOW: &str = "name: hooked\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo, depends_on: [a]}\n";

/// Every run.state and task.state event after `after`, by number.
async fn expected(api: &Api, after: i64) -> Vec<i64> {
    let page = api.get_ok(&format!("/v1/events?after={after}&kind=run.state,task.state&limit=10000")).await;
    page["events"].as_array().unwrap().iter().map(|e| e["seq"].as_i64().unwrap()).collect()
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "waited too long for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_are_signed_in_order_and_survive_a_failing_receiver_and_a_kill_9() {
    let server = tokio::task::spawn_blocking(|| server_with(&[])).await.unwrap();
    let api = Api::of(&server);
    api.apply(FLOW).await;
    let receiver = Receiver::start(4, false).await;
    let (status, hook) =
        api.post("/v1/webhooks", json!({"url": receiver.url, "kinds": ["run.state", "task.state"]})).await;
    assert_eq!(status, StatusCode::CREATED, "{hook}");
    let secret = hook["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{hook}");
    *receiver.secret.lock().unwrap() = secret;
    let id = hook["id"].as_str().unwrap().to_owned();
    let from = hook["cursor"].as_i64().unwrap();
    let listed = api.get_ok("/v1/webhooks").await;
    assert!(listed[0].get("secret").is_none(), "the secret is shown once: {listed}");

    let first = api.trigger("hooked", json!({})).await;
    api.finished(&first).await;
    let want = expected(&api, from).await;
    wait_for("the first run's events", || receiver.ids().len() >= want.len()).await;
    assert!(receiver.seen.lock().unwrap().refused >= 4, "the receiver failed first, and was retried");

    // The receiver fails again; a second run's events wait in the outbox
    // while the sender is killed (-9) and restarted; then it recovers.
    receiver.seen.lock().unwrap().always_fail = true;
    let refused = receiver.seen.lock().unwrap().refused;
    let second = api.trigger("hooked", json!({})).await;
    api.finished(&second).await;
    wait_for("a retried delivery", || receiver.seen.lock().unwrap().refused > refused + 1).await;
    let server = restart(server).await;
    let api = Api::of(&server);
    receiver.seen.lock().unwrap().always_fail = false;
    let third = api.trigger("hooked", json!({})).await;
    api.finished(&third).await;
    let want = expected(&api, from).await;
    wait_for("every event", || {
        let mut ids = receiver.ids();
        ids.dedup();
        ids.len() >= want.len()
    })
    .await;
    let ids = receiver.ids();
    assert!(ids.windows(2).all(|w| w[0] <= w[1]), "in order (a repeat only in place): {ids:?}");
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(unique, want, "every event once at least, nothing else");
    {
        let seen = receiver.seen.lock().unwrap();
        assert!(seen.bad_signatures.is_empty(), "{:?}", seen.bad_signatures);
        let (_, body) = &seen.taken[0];
        assert!(body["type"] == "run.state" || body["type"] == "task.state", "{body}");
        assert_eq!(body["data"]["seq"].as_i64(), Some(unique[0]), "{body}");
    }

    // The delivery log shows the refusals.
    let log = api.get_ok(&format!("/v1/webhooks/{id}/deliveries?limit=1000")).await;
    let log = log.as_array().unwrap();
    assert!(log.iter().any(|d| d["status"] == 500 && d["attempt"].as_i64() > Some(0)), "{log:?}");
    assert!(log.iter().any(|d| d["status"] == 204), "{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batching_webhook_takes_consecutive_events_per_request_and_its_secret_is_stored_sealed() {
    let server = tokio::task::spawn_blocking(|| server_with(&[])).await.unwrap();
    let api = Api::of(&server);
    api.apply(FLOW).await;
    let receiver = Receiver::start(1, false).await;
    for batch in [0, 101] {
        let (status, body) = api.post("/v1/webhooks", json!({"url": receiver.url, "batch": batch})).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["location"], "batch", "{body}");
    }
    let (status, hook) =
        api.post("/v1/webhooks", json!({"url": receiver.url, "kinds": ["run.state", "task.state"], "batch": 4})).await;
    assert_eq!(status, StatusCode::CREATED, "{hook}");
    assert_eq!(hook["batch"], 4, "{hook}");
    let secret = hook["secret"].as_str().unwrap().to_owned();
    *receiver.secret.lock().unwrap() = secret.clone();
    let from = hook["cursor"].as_i64().unwrap();
    for _ in 0..3 {
        let run = api.trigger("hooked", json!({})).await;
        api.finished(&run).await;
    }
    let want = expected(&api, from).await;
    wait_for("every event", || {
        let mut seqs = receiver.seqs();
        seqs.dedup();
        seqs.len() >= want.len()
    })
    .await;
    let seen = receiver.seen.lock().unwrap();
    assert!(seen.bad_signatures.is_empty(), "{:?}", seen.bad_signatures);
    assert!(seen.refused >= 1, "the first request was refused and retried");
    for (id, body) in &seen.taken {
        assert_eq!(body["type"], "batch", "{body}");
        let events = body["data"].as_array().unwrap();
        assert!((1..=4).contains(&events.len()), "{body}");
        let (first, last) =
            (events[0]["data"]["seq"].as_i64().unwrap(), events[events.len() - 1]["data"]["seq"].as_i64().unwrap());
        assert_eq!(id, &format!("evt_{first}-{last}"), "the id names the batch's first and last event");
        assert!(events.iter().all(|e| e["type"] == e["data"]["kind"]), "{body}");
    }
    assert!(seen.taken.iter().any(|(_, b)| b["data"].as_array().unwrap().len() > 1), "events were batched");
    drop(seen);
    let mut seqs = receiver.seqs();
    assert!(seqs.windows(2).all(|w| w[0] <= w[1]), "in order: {seqs:?}");
    seqs.dedup();
    assert_eq!(seqs, want, "every event, nothing else");

    // The signing secret is in the database only sealed.
    for file in ["dagr.db", "dagr.db-wal"] {
        let Ok(bytes) = std::fs::read(server.data_dir().join(file)) else { continue };
        assert!(!bytes.windows(secret.len()).any(|w| w == secret.as_bytes()), "the secret is plain in {file}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_failing_too_long_is_disabled_its_tenant_told_and_enabled_again() {
    let server = tokio::task::spawn_blocking(|| server_with(&[("DAGR_WEBHOOKS__DISABLE_AFTER", "2s")])).await.unwrap();
    let api = Api::of(&server);
    api.apply(FLOW).await;
    let receiver = Receiver::start(0, true).await;
    let (_, hook) = api.post("/v1/webhooks", json!({"url": receiver.url})).await;
    let id = hook["id"].as_str().unwrap().to_owned();
    let run = api.trigger("hooked", json!({})).await;
    api.finished(&run).await;
    let start = std::time::Instant::now();
    let view = loop {
        let view = api.get_ok(&format!("/v1/webhooks/{id}")).await;
        if view["state"] == "disabled" {
            break view;
        }
        assert!(start.elapsed() < PATIENCE, "never disabled: {view}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(view["disabled_reason"].as_str().unwrap().contains("[webhooks] disable_after"), "{view}");
    let told = api.get_ok("/v1/events?kind=webhook.disabled").await;
    assert_eq!(told["events"][0]["data"]["webhook"], id.as_str(), "{told}");
    let refused = receiver.seen.lock().unwrap().refused;
    assert!(refused >= 2, "retried before giving up: {refused}");

    // Enabled again, it resumes where it stopped.
    receiver.seen.lock().unwrap().always_fail = false;
    *receiver.secret.lock().unwrap() = hook["secret"].as_str().unwrap().to_owned();
    let (status, enabled) = api.post(&format!("/v1/webhooks/{id}/enable"), json!(null)).await;
    assert_eq!(status, StatusCode::OK, "{enabled}");
    assert_eq!(enabled["state"], "active");
    wait_for("the missed events", || receiver.ids().len() >= 3).await;

    // The network rule: without the admin's leave, no loopback.
    let strict = tokio::task::spawn_blocking(DagrServer::start).await.unwrap();
    let (status, body) = Api::of(&strict).post("/v1/webhooks", json!({"url": receiver.url})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["location"], "url", "{body}");
    assert!(body["message"].as_str().unwrap().contains("allow_private"), "{body}");
    let (status, body) =
        Api::of(&strict).post("/v1/webhooks", json!({"url": "https://hooks.example.org/x", "kinds": ["a*b"]})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["location"], "kinds", "{body}");
}

// NATS -------------------------------------------------------------------------------------

/// A `nats-server` of the test's own on a free loopback port.
struct Nats {
    child: std::process::Child,
    url: String,
}

impl Nats {
    fn start() -> Nats {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = std::process::Command::new("nats-server")
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("nats-server (Debian's `nats-server`; scripts/test.sh installs it)");
        // Dropped (killed and waited for) on every path from here.
        let nats = Nats { child, url: format!("nats://127.0.0.1:{port}") };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return nats;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("nats-server did not start on port {port}");
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_nats_server_receives_the_event_stream_across_a_kill_9() {
    let nats = tokio::task::spawn_blocking(Nats::start).await.unwrap();
    let listener = async_nats::connect(nats.url.as_str()).await.unwrap();
    let mut messages = listener.subscribe("dagr.default.>").await.unwrap();
    listener.flush().await.unwrap();
    let url = nats.url.clone();
    let server =
        tokio::task::spawn_blocking(move || DagrServer::start_with(&[("DAGR_NATS__URL", &url)])).await.unwrap();
    let api = Api::of(&server);
    api.apply(FLOW).await;
    let first = api.trigger("hooked", json!({})).await;
    api.finished(&first).await;
    let server = restart(server).await;
    let api = Api::of(&server);
    let second = api.trigger("hooked", json!({})).await;
    api.finished(&second).await;

    // Every event since the sink started, in order; a repeat only in place.
    let all = api.get_ok("/v1/events?after=0&limit=10000").await;
    let events = all["events"].as_array().unwrap();
    let ended = |run: &str| {
        events.iter().find(|e| e["kind"] == "run.state" && e["run_id"] == run && e["data"]["to"] == "succeeded")
    };
    let last = ended(&second).unwrap()["seq"].as_i64().unwrap();
    let mut got: Vec<(String, Value)> = Vec::new();
    while got.last().is_none_or(|(_, e)| e["seq"].as_i64().unwrap() < last) {
        let message =
            tokio::time::timeout(PATIENCE, futures::StreamExt::next(&mut messages)).await.expect("no message").unwrap();
        let id = match message.headers.as_ref().and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID)) {
            Some(id) => id.as_str().to_owned(),
            None => panic!("no Nats-Msg-Id on {} ({:?}): {:?}", message.subject, message.headers, message.payload),
        };
        let event: Value = serde_json::from_slice(&message.payload).unwrap();
        assert_eq!(message.subject.as_str(), format!("dagr.default.{}", event["kind"].as_str().unwrap()));
        assert_eq!(id, format!("evt_{}", event["seq"]));
        got.push((id, event));
    }
    let mut seqs: Vec<i64> = got.iter().map(|(_, e)| e["seq"].as_i64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] <= w[1]), "in order: {seqs:?}");
    seqs.dedup();
    let first_seen = seqs[0];
    let want: Vec<i64> =
        events.iter().map(|e| e["seq"].as_i64().unwrap()).filter(|s| (first_seen..=last).contains(s)).collect();
    assert_eq!(seqs, want, "every event, none lost across the kill -9");
    assert!(seqs.contains(&ended(&first).unwrap()["seq"].as_i64().unwrap()), "the first run's end too");
}
