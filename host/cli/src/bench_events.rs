//! `dagr bench --remote URL --sse N --webhooks N [--webhook-batch N]
//! [--scrape]`: the event
//! stream and webhooks under load. While the measured runs go, N clients
//! follow `GET /v1/events` (every event) and N webhook subscriptions POST
//! to a receiver in this process; each records, per event of the runs,
//! the delay from the event's time (the engine's decision) to its
//! arrival. `--scrape` also reads `/metrics` every second (the admin
//! token from `DAGR_ADMIN_TOKEN`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{Value, json};

use crate::client::Api;

/// Delays (ms) of the events of the runs being measured, per follower.
type Delays = Arc<Mutex<Vec<Vec<f64>>>>;

pub struct Watchers {
    sse: Delays,
    hooks: Delays,
    webhook_ids: Vec<String>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What is watched during a bench.
#[derive(Debug, Clone, Copy)]
pub struct Watch {
    pub sse: u32,
    pub webhooks: u32,
    /// Events per webhook request (the subscriptions' `batch`).
    pub webhook_batch: u32,
    pub scrape: bool,
}

/// The two fields of an event the bench reads (the rest is skipped, not
/// parsed: the followers share the server's two cores).
#[derive(serde::Deserialize)]
struct Probe<'a> {
    #[serde(borrow)]
    run_id: Option<&'a str>,
    at: &'a str,
}

/// The delay of a run's event, from its time to now; `None` for events
/// of no run.
fn delay_of(event: &Probe<'_>) -> Option<f64> {
    event.run_id?;
    let at = chrono::DateTime::parse_from_rfc3339(event.at).ok()?.timestamp_micros() as f64 / 1000.0;
    Some(chrono::Utc::now().timestamp_micros() as f64 / 1000.0 - at)
}

/// A webhook request's body with one event.
#[derive(serde::Deserialize)]
struct One<'a> {
    #[serde(borrow)]
    data: Probe<'a>,
}

/// A webhook request's body with a batch of events.
#[derive(serde::Deserialize)]
struct Batch<'a> {
    #[serde(borrow)]
    data: Vec<One<'a>>,
}

/// Starts the followers, the receiver and the scraper.
pub async fn start(api: &Api, base: &str, token: &str, watch: Watch) -> anyhow::Result<Watchers> {
    let Watch { sse, webhooks, webhook_batch, scrape } = watch;
    let sse_delays: Delays = Arc::new(Mutex::new(vec![Vec::new(); sse as usize]));
    let hook_delays: Delays = Arc::new(Mutex::new(vec![Vec::new(); webhooks as usize]));
    let mut tasks = Vec::new();
    let http = reqwest::Client::new();
    for i in 0..sse as usize {
        let request = http.get(format!("{base}/v1/events")).bearer_auth(token).header("accept", "text/event-stream");
        let response = request.send().await?.error_for_status()?;
        let delays = sse_delays.clone();
        tasks.push(tokio::spawn(async move {
            let mut body = response.bytes_stream();
            let mut buffer: Vec<u8> = Vec::new();
            let mut mine = Vec::new();
            while let Some(Ok(chunk)) = body.next().await {
                buffer.extend_from_slice(&chunk);
                let mut start = 0;
                while let Some(end) = buffer[start..].windows(2).position(|w| w == b"\n\n") {
                    let frame = &buffer[start..start + end];
                    start += end + 2;
                    let Some(data) = frame.split(|b| *b == b'\n').find_map(|l| l.strip_prefix(b"data: ")) else {
                        continue;
                    };
                    if let Ok(event) = serde_json::from_slice::<Probe<'_>>(data)
                        && let Some(delay) = delay_of(&event)
                    {
                        mine.push(delay);
                    }
                }
                buffer.drain(..start);
                if !mine.is_empty() {
                    delays.lock().unwrap_or_else(|e| e.into_inner())[i].append(&mut mine);
                }
            }
        }));
    }
    let mut webhook_ids = Vec::new();
    if webhooks > 0 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let delays = hook_delays.clone();
        let app = axum::Router::new().route(
            "/hook/{i}",
            axum::routing::post(move |axum::extract::Path(i): axum::extract::Path<usize>, body: axum::body::Bytes| {
                let delays = delays.clone();
                async move {
                    let mut mine = Vec::new();
                    if let Ok(one) = serde_json::from_slice::<One<'_>>(&body) {
                        mine.extend(delay_of(&one.data));
                    } else if let Ok(batch) = serde_json::from_slice::<Batch<'_>>(&body) {
                        mine.extend(batch.data.iter().filter_map(|one| delay_of(&one.data)));
                    }
                    if let Some(list) = delays.lock().unwrap_or_else(|e| e.into_inner()).get_mut(i) {
                        list.append(&mut mine);
                    }
                    axum::http::StatusCode::NO_CONTENT
                }
            }),
        );
        tasks.push(tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        }));
        for i in 0..webhooks {
            let created: Value = api
                .json(api.post(&["v1", "webhooks"]).json(&json!({
                    "url": format!("http://{addr}/hook/{i}"),
                    "batch": webhook_batch.max(1),
                })))
                .await?;
            webhook_ids.push(created["id"].as_str().unwrap_or_default().to_owned());
        }
    }
    if scrape {
        let admin = std::env::var("DAGR_ADMIN_TOKEN").unwrap_or_default();
        let url = format!("{base}/metrics");
        tasks.push(tokio::spawn(async move {
            loop {
                let _ = http.get(&url).bearer_auth(&admin).send().await.map(|r| r.bytes());
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }));
    }
    Ok(Watchers { sse: sse_delays, hooks: hook_delays, webhook_ids, tasks })
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn summary(delays: &[Vec<f64>], expected: usize) -> Value {
    let mut all: Vec<f64> = delays.iter().flatten().copied().collect();
    all.sort_by(f64::total_cmp);
    json!({
        "followers": delays.len(),
        "complete": delays.iter().filter(|d| d.len() >= expected).count(),
        "events": all.len(),
        "p50_ms": (percentile(&all, 0.5) * 10.0).round() / 10.0,
        "p99_ms": (percentile(&all, 0.99) * 10.0).round() / 10.0,
        "max_ms": (all.last().copied().unwrap_or(f64::NAN) * 10.0).round() / 10.0,
    })
}

impl Watchers {
    /// Waits (up to a minute) until every follower has `expected` events of
    /// the runs, then prints the delays and stops.
    pub async fn finish(self, api: &Api, expected: usize) -> anyhow::Result<()> {
        let done = |d: &Delays| d.lock().unwrap_or_else(|e| e.into_inner()).iter().all(|l| l.len() >= expected);
        for _ in 0..600 {
            if done(&self.sse) && done(&self.hooks) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let sse = summary(&self.sse.lock().unwrap_or_else(|e| e.into_inner()), expected);
        let hooks = summary(&self.hooks.lock().unwrap_or_else(|e| e.into_inner()), expected);
        println!("{}", json!({"expected_per_follower": expected, "sse": sse, "webhooks": hooks}));
        for task in &self.tasks {
            task.abort();
        }
        for id in &self.webhook_ids {
            let _ = api.send(api.delete(&["v1", "webhooks", id])).await;
        }
        Ok(())
    }
}
