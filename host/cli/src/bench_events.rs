//! `dagr bench --remote URL --sse N --webhooks N [--webhook-batch N]
//! [--scrape]`: the event
//! stream and webhooks under load. While the measured runs go, N clients
//! follow `GET /v1/events` (every event) and N webhook subscriptions POST
//! to a receiver in this process; each records, per event of the runs,
//! the delay from the event's time (the engine's decision) to its
//! arrival. `--scrape` also reads `/metrics` every second (the admin
//! token from `DAGR_ADMIN_TOKEN`).
//!
//! The followers and the receiver share the machine with the server, so
//! their delays include their own wait for a core. With the admin token,
//! the server's side is also shown: its lag histograms
//! (`dagr_event_stream_lag_seconds`: to a frame handed to the stream's
//! connection; `dagr_webhook_delivery_lag_seconds`: to the receiver's
//! answer), read from `/metrics` before and after.

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
    http: reqwest::Client,
    base: String,
    /// The server's lag histograms when the watch began.
    lags_before: Option<Lags>,
}

/// The server's lag histograms: per metric, its cumulative buckets
/// (upper bound in seconds, count).
type Lags = Vec<(&'static str, Vec<(f64, u64)>)>;

const LAG_METRICS: [(&str, &str); 2] =
    [("sse", "dagr_event_stream_lag_seconds"), ("webhooks", "dagr_webhook_delivery_lag_seconds")];

/// Reads the lag histograms from `/metrics` (the admin token from
/// `DAGR_ADMIN_TOKEN`); `None` without it or when the server has none.
async fn read_lags(http: &reqwest::Client, base: &str) -> Option<Lags> {
    let admin = std::env::var("DAGR_ADMIN_TOKEN").ok().filter(|t| !t.is_empty())?;
    let response = http.get(format!("{base}/metrics")).bearer_auth(admin).send().await.ok()?;
    let text = response.error_for_status().ok()?.text().await.ok()?;
    Some(parse_lags(&text))
}

fn parse_lags(text: &str) -> Lags {
    LAG_METRICS
        .iter()
        .map(|(_, name)| {
            let prefix = format!("{name}_bucket{{le=\"");
            let buckets = text
                .lines()
                .filter_map(|line| {
                    let (le, count) = line.strip_prefix(&prefix)?.split_once("\"} ")?;
                    let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
                    Some((le, count.trim().parse().ok()?))
                })
                .collect();
            (*name, buckets)
        })
        .collect()
}

/// What the server's histograms counted between two readings: events,
/// the bucket bounds that hold the median and the 99th percentile, and
/// the share within 100 ms.
fn lag_summary(before: &[(f64, u64)], after: &[(f64, u64)]) -> Value {
    let before = |le: f64| before.iter().find(|(b, _)| *b == le).map_or(0, |(_, n)| *n);
    // Saturating: a server restarted in between counts from zero again.
    let counts: Vec<(f64, u64)> = after.iter().map(|(le, n)| (*le, n.saturating_sub(before(*le)))).collect();
    let total = counts.last().map_or(0, |(_, n)| *n);
    if total == 0 {
        return json!({"events": 0});
    }
    let at_most = |q: f64| {
        let wanted = (total as f64 * q).ceil() as u64;
        counts
            .iter()
            .find(|(_, n)| *n >= wanted)
            .map(|(le, _)| if le.is_finite() { json!(le * 1000.0) } else { json!("+Inf") })
    };
    let within = counts.iter().filter(|(le, _)| *le <= 0.1).map(|(_, n)| *n).max().unwrap_or(0);
    json!({
        "events": total,
        "p50_at_most_ms": at_most(0.5),
        "p99_at_most_ms": at_most(0.99),
        "within_100ms": (within as f64 / total as f64 * 1000.0).round() / 10.0,
    })
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
    Some(now_ms() - at)
}

fn now_ms() -> f64 {
    chrono::Utc::now().timestamp_micros() as f64 / 1000.0
}

/// Reads what [`Probe`] reads from an SSE frame's data without parsing
/// the JSON: a hundred followers get three million frames in a 10,000-task
/// round, and parsing them all took more CPU than the server spent on the
/// fan-out (it is the followers' cost, not the server's, and they share
/// its cores). The data is an `EventView`: its keys come in a fixed order
/// (`seq`, `at`, …, `run_id`, `task`, `data`), and a quote inside a
/// string is escaped, so `"at":"` first found is the event's time and a
/// `"run_id":` before `"data":` is the event's run.
struct FrameProbe {
    data_key: memchr::memmem::Finder<'static>,
    run_key: memchr::memmem::Finder<'static>,
    at_key: memchr::memmem::Finder<'static>,
    /// The last minute seen (`YYYY-MM-DDTHH:MM`) and its time in ms.
    minute: Option<([u8; 16], f64)>,
}

impl FrameProbe {
    fn new() -> FrameProbe {
        FrameProbe {
            data_key: memchr::memmem::Finder::new(b"\"data\":"),
            run_key: memchr::memmem::Finder::new(b"\"run_id\":\""),
            at_key: memchr::memmem::Finder::new(b"\"at\":\""),
            minute: None,
        }
    }

    /// The time of a run's event in ms since the epoch; `None` for an
    /// event of no run (or data that is not an event).
    fn at_ms(&mut self, data: &[u8]) -> Option<f64> {
        let head = &data[..self.data_key.find(data).unwrap_or(data.len())];
        self.run_key.find(head)?;
        let start = self.at_key.find(head)? + b"\"at\":\"".len();
        let end = start + memchr::memchr(b'"', &head[start..])?;
        self.parse_time(&head[start..end])
    }

    /// `2026-12-05T06:28:08.123Z` (the API's form) by its minute, which
    /// rarely changes; any other RFC 3339 time through chrono.
    fn parse_time(&mut self, text: &[u8]) -> Option<f64> {
        let digits = |b: &[u8]| -> Option<f64> {
            b.iter().try_fold(0.0, |n, c| c.is_ascii_digit().then(|| n * 10.0 + f64::from(c - b'0')))
        };
        if text.len() == 24 && text[16] == b':' && text[19] == b'.' && text[23] == b'Z' {
            let minute: [u8; 16] = text[..16].try_into().ok()?;
            let base = match self.minute {
                Some((m, base)) if m == minute => base,
                _ => {
                    let whole = format!("{}:00Z", std::str::from_utf8(&minute).ok()?);
                    let base = chrono::DateTime::parse_from_rfc3339(&whole).ok()?.timestamp_millis() as f64;
                    self.minute = Some((minute, base));
                    base
                }
            };
            return Some(base + digits(&text[17..19])? * 1000.0 + digits(&text[20..23])?);
        }
        let text = std::str::from_utf8(text).ok()?;
        Some(chrono::DateTime::parse_from_rfc3339(text).ok()?.timestamp_micros() as f64 / 1000.0)
    }
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
    let lags_before = read_lags(&http, base).await;
    for i in 0..sse as usize {
        let request = http.get(format!("{base}/v1/events")).bearer_auth(token).header("accept", "text/event-stream");
        let response = request.send().await?.error_for_status()?;
        let delays = sse_delays.clone();
        tasks.push(tokio::spawn(async move {
            let mut body = response.bytes_stream();
            let mut buffer: Vec<u8> = Vec::new();
            let mut mine = Vec::new();
            let frame_end = memchr::memmem::Finder::new(b"\n\n");
            let data_line = memchr::memmem::Finder::new(b"\ndata: ");
            let mut probe = FrameProbe::new();
            while let Some(Ok(chunk)) = body.next().await {
                buffer.extend_from_slice(&chunk);
                let now = now_ms();
                let mut start = 0;
                while let Some(end) = frame_end.find(&buffer[start..]) {
                    let frame = &buffer[start..start + end];
                    start += end + 2;
                    let Some(at) = data_line.find(frame) else { continue };
                    let data = &frame[at + b"\ndata: ".len()..];
                    let data = &data[..memchr::memchr(b'\n', data).unwrap_or(data.len())];
                    if let Some(at) = probe.at_ms(data) {
                        mine.push(now - at);
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
        let http = http.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let _ = http.get(&url).bearer_auth(&admin).send().await.map(|r| r.bytes());
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }));
    }
    Ok(Watchers { sse: sse_delays, hooks: hook_delays, webhook_ids, tasks, http, base: base.to_owned(), lags_before })
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
        let mut line = json!({"expected_per_follower": expected, "sse": sse, "webhooks": hooks});
        if let (Some(before), Some(after)) = (&self.lags_before, read_lags(&self.http, &self.base).await) {
            for ((key, _), ((_, before), (_, after))) in LAG_METRICS.iter().zip(before.iter().zip(&after)) {
                line[*key]["server"] = lag_summary(before, after);
            }
        }
        println!("{line}");
        for task in &self.tasks {
            task.abort();
        }
        for id in &self.webhook_ids {
            let _ = api.send(api.delete(&["v1", "webhooks", id])).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn text(counts: [u64; 4]) -> String {
        format!(
            "# TYPE dagr_event_stream_lag_seconds histogram\n\
             dagr_event_stream_lag_seconds_bucket{{le=\"0.01\"}} {}\n\
             dagr_event_stream_lag_seconds_bucket{{le=\"0.1\"}} {}\n\
             dagr_event_stream_lag_seconds_bucket{{le=\"1\"}} {}\n\
             dagr_event_stream_lag_seconds_bucket{{le=\"+Inf\"}} {}\n\
             dagr_event_stream_lag_seconds_sum 1.5\n",
            counts[0], counts[1], counts[2], counts[3]
        )
    }

    /// What the bench read before [`FrameProbe`]: the JSON parsed.
    fn parsed(data: &str) -> Option<f64> {
        let event: Probe<'_> = serde_json::from_str(data).ok()?;
        event.run_id?;
        Some(chrono::DateTime::parse_from_rfc3339(event.at).ok()?.timestamp_micros() as f64 / 1000.0)
    }

    #[test]
    fn a_frame_s_time_is_read_as_parsing_its_json_would() {
        use dagr_protocol::api::EventView;
        let view = |at: &str, run: Option<&str>, data: Value| {
            serde_json::to_string(&EventView {
                seq: 7,
                at: at.into(),
                kind: "task.state".into(),
                tenant: Some("default".into()),
                workflow: Some("fan".into()),
                run_id: run.map(Into::into),
                task: Some("a".into()),
                data,
            })
            .unwrap()
        };
        let mut probe = FrameProbe::new();
        let cases = [
            view("2026-12-05T06:28:08.123Z", Some("r1"), json!({"from": "queued", "to": "running"})),
            // The same minute again (from the cache), and the next one.
            view("2026-12-05T06:28:59.999Z", Some("r1"), json!({})),
            view("2026-12-05T06:29:00.000Z", Some("r1"), json!({})),
            view("2026-12-31T23:59:01.500Z", Some("r1"), json!({})),
            // No run: the nested keys of its data do not count.
            view("2026-12-05T06:28:08.123Z", None, json!({"run_id": "r9", "at": "2020-01-01T00:00:00.000Z"})),
            // Another form of RFC 3339.
            view("2026-12-05T07:28:08.25+01:00", Some("r1"), json!({})),
        ];
        for data in &cases {
            assert_eq!(probe.at_ms(data.as_bytes()), parsed(data), "{data}");
        }
        assert!(probe.at_ms(cases[0].as_bytes()).is_some());
        assert_eq!(probe.at_ms(cases[4].as_bytes()), None);
        assert_eq!(probe.at_ms(b"not json"), None);
    }

    #[test]
    fn the_server_s_lag_is_what_its_histogram_counted_in_between() {
        let before = parse_lags(&text([5, 5, 5, 5]));
        assert_eq!(before[0].1, vec![(0.01, 5), (0.1, 5), (1.0, 5), (f64::INFINITY, 5)]);
        assert!(before[1].1.is_empty(), "no webhook histogram in this text");
        // 100 more: 60 within 10 ms, 39 more within 100 ms, one within 1 s.
        let after = parse_lags(&text([65, 104, 105, 105]));
        let summary = lag_summary(&before[0].1, &after[0].1);
        assert_eq!(summary["events"], 100);
        assert_eq!(summary["p50_at_most_ms"], 10.0);
        assert_eq!(summary["p99_at_most_ms"], 100.0);
        assert_eq!(summary["within_100ms"], 99.0);
        assert_eq!(lag_summary(&before[1].1, &after[1].1), json!({"events": 0}));
    }
}
