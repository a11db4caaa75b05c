//! `dagr bench --remote URL --sse N --webhooks N [--scrape]`: the event
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

fn delay_of(event: &Value) -> Option<f64> {
    let at = chrono::DateTime::parse_from_rfc3339(event["at"].as_str()?).ok()?.timestamp_micros() as f64 / 1000.0;
    Some(chrono::Utc::now().timestamp_micros() as f64 / 1000.0 - at)
}

/// Starts the followers, the receiver and the scraper.
pub async fn start(
    api: &Api,
    base: &str,
    token: &str,
    sse: u32,
    webhooks: u32,
    scrape: bool,
) -> anyhow::Result<Watchers> {
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
            while let Some(Ok(chunk)) = body.next().await {
                buffer.extend_from_slice(&chunk);
                while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
                    let frame: Vec<u8> = buffer.drain(..end + 2).collect();
                    let text = String::from_utf8_lossy(&frame);
                    let Some(data) = text.lines().find_map(|l| l.strip_prefix("data: ")) else { continue };
                    let Ok(event) = serde_json::from_str::<Value>(data) else { continue };
                    if event["run_id"].is_string()
                        && let Some(delay) = delay_of(&event)
                    {
                        delays.lock().unwrap_or_else(|e| e.into_inner())[i].push(delay);
                    }
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
                    if let Ok(message) = serde_json::from_slice::<Value>(&body)
                        && message["data"]["run_id"].is_string()
                        && let Some(delay) = delay_of(&message["data"])
                        && let Some(list) = delays.lock().unwrap_or_else(|e| e.into_inner()).get_mut(i)
                    {
                        list.push(delay);
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
                .json(api.post(&["v1", "webhooks"]).json(&json!({"url": format!("http://{addr}/hook/{i}")})))
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
