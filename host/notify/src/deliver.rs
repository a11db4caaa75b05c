//! The deliverer: one task per active subscription, each sending the
//! events its subscription wants in log order, one request at a time
//! (one event per request, or a batch of consecutive events).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use dagr_core::events::KindFilter;
use dagr_metrics::{Counter, FAST_SECONDS, Family, Histogram, SLOW_SECONDS, global};
use dagr_protocol::api::EventView;
use dagr_protocol::sealed::SecretKey;
use dagr_store::{
    DeliveryRow, EventRow, EventScope, NewEvent, Store, WebhookRow, WebhookState, WriteBatch, webhook_secret_name,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::dest::{Destinations, with_causes};
use crate::recent::Recorded;
use crate::{SigningKey, WebhookConfig};

/// The most events one request carries.
const MAX_BATCH: i64 = 100;

/// Events read at once for one subscription that takes one per request:
/// its cursor (and its delivery log) is written once per page, while the
/// next page goes out, so a restart repeats at most two pages.
const PAGE: i64 = 100;
/// Requests per page for a batching subscription.
const BATCHES_PER_PAGE: i64 = 10;

/// How many events a subscription reads at once.
fn page_size(batch: i64) -> i64 {
    (batch.max(1) * BATCHES_PER_PAGE).clamp(PAGE, PAGE * BATCHES_PER_PAGE)
}

/// The event as the API shows it.
pub fn event_view(e: &EventRow) -> EventView {
    EventView {
        seq: e.seq,
        at: time(e.at),
        kind: e.kind.clone(),
        tenant: Some(e.tenant.clone()),
        workflow: e.workflow.clone(),
        run_id: e.run_id.clone(),
        task: e.task.clone(),
        data: serde_json::from_str(&e.data).unwrap_or(serde_json::Value::Null),
    }
}

fn time(ms: i64) -> String {
    Utc.timestamp_millis_opt(ms).single().unwrap_or_default().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

struct Metrics {
    deliveries: Arc<Family<Counter>>,
    lag: Arc<Histogram>,
    request: Arc<Histogram>,
}

fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| Metrics {
        deliveries: global().family(
            "dagr_webhook_deliveries_total",
            "Webhook delivery attempts, by outcome (delivered, failed).",
            &["outcome"],
            4,
            Counter::default,
        ),
        lag: global().histogram(
            "dagr_webhook_delivery_lag_seconds",
            "From an event to its successful delivery to a webhook.",
            SLOW_SECONDS,
        ),
        request: global().histogram("dagr_webhook_request_seconds", "How long receivers took to answer.", FAST_SECONDS),
    })
}

/// Delivers every active subscription's events while `active` is true
/// (on one node: always; in a cluster: on the leader).
pub struct Deliverer {
    store: Arc<dyn Store>,
    config: WebhookConfig,
    http: Destinations,
    /// Opens the subscriptions' signing secrets.
    key: SecretKey,
    /// Changes when an engine in this process committed events.
    nudge: Option<watch::Receiver<u64>>,
    /// The newest events, read once for every subscription.
    recent: crate::recent::Recent,
}

/// What a page of events delivered so far.
struct Page {
    failing_since: Option<i64>,
    /// Successful attempts not yet in the log.
    delivered: Vec<DeliveryRow>,
    /// Every wanted event up to here was delivered.
    upto: i64,
}

/// A subscription's signing key, opened from its sealed secret once (not
/// once per request: opening decrypts), or why it does not open.
struct Signer {
    /// The sealed secret it was opened from.
    sealed: String,
    key: Result<SigningKey, String>,
}

impl Signer {
    fn open(key: &SecretKey, hook: &WebhookRow) -> Signer {
        let opened = key
            .open(&hook.tenant, &webhook_secret_name(&hook.id), &hook.secret)
            .map_err(|e| format!("the signing secret does not open with this node's secrets key ([secrets] key): {e}"))
            .and_then(|secret| SigningKey::decode(&secret));
        Signer { sealed: hook.secret.clone(), key: opened }
    }
}

/// Why a subscription's loop stopped.
enum Stop {
    /// Deleted, disabled, or this node stopped delivering.
    Gone,
}

impl Deliverer {
    /// Starts delivering. `nudge` (an engine in this process committing
    /// events) makes a subscription that has caught up look again at once
    /// instead of at its next `[webhooks] poll`.
    pub fn start(
        store: Arc<dyn Store>,
        config: WebhookConfig,
        key: SecretKey,
        active: watch::Receiver<bool>,
        nudge: Option<watch::Receiver<u64>>,
    ) -> JoinHandle<()> {
        metrics();
        let http = Destinations::new(config.timeout, config.allow_private);
        let recent = crate::recent::Recent::new(store.clone(), crate::recent::WINDOW);
        let deliverer = Arc::new(Deliverer { store, config, http, key, nudge, recent });
        tokio::spawn(deliverer.supervise(active))
    }

    /// Starts a loop for each active subscription that has none.
    async fn supervise(self: Arc<Self>, active: watch::Receiver<bool>) {
        let mut loops: HashMap<String, JoinHandle<()>> = HashMap::new();
        loop {
            loops.retain(|_, handle| !handle.is_finished());
            if *active.borrow() {
                match self.store.active_webhooks().await {
                    Ok(hooks) => {
                        for hook in hooks {
                            if !loops.contains_key(&hook.id) {
                                let me = self.clone();
                                let id = hook.id.clone();
                                loops.insert(id, tokio::spawn(me.follow(hook, active.clone())));
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot list webhooks; will retry"),
                }
            }
            tokio::time::sleep(self.config.poll).await;
        }
    }

    /// Delivers one subscription's events until it is gone.
    async fn follow(self: Arc<Self>, hook: WebhookRow, active: watch::Receiver<bool>) {
        let span = tracing::info_span!("webhook", id = %hook.id, tenant = %hook.tenant);
        let _ = tracing::Instrument::instrument(self.follow_inner(hook, active), span).await;
    }

    /// Waits for new events: the next poll, or a nudge.
    async fn idle(&self, nudge: &mut Option<watch::Receiver<u64>>) {
        match nudge {
            Some(committed) => {
                tokio::select! {
                    _ = tokio::time::sleep(self.config.poll) => {}
                    changed = committed.changed() => {
                        if changed.is_err() {
                            *nudge = None;
                        }
                    }
                }
            }
            None => tokio::time::sleep(self.config.poll).await,
        }
    }

    async fn follow_inner(&self, hook: WebhookRow, active: watch::Receiver<bool>) -> Result<(), Stop> {
        let mut nudge = self.nudge.clone();
        let kinds = KindFilter::parse(&hook.kinds).unwrap_or_default();
        let scope = EventScope { tenant: Some(hook.tenant.clone()), workflow: hook.workflow.clone(), run_id: None };
        let mut signer: Option<Signer> = None;
        // Where the pages delivered so far end (the stored cursor may not
        // have caught up), and the write of the last one's log and cursor.
        let mut cursor = i64::MIN;
        let mut settling: Option<JoinHandle<()>> = None;
        loop {
            if !*active.borrow() {
                return Err(Stop::Gone);
            }
            // Read again each round: it may have been deleted or disabled.
            let hook = match self.store.get_webhook(&hook.tenant, &hook.id).await {
                Ok(Some(h)) if h.state == WebhookState::Active => h,
                Ok(_) => return Err(Stop::Gone),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the webhook; will retry");
                    tokio::time::sleep(self.config.poll).await;
                    continue;
                }
            };
            let from = hook.cursor.max(cursor);
            let events = match self.recent.page(&scope, from, page_size(hook.batch)).await {
                Ok(events) => events,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read events; will retry");
                    Vec::new()
                }
            };
            let Some(last) = events.last().map(|e| e.row.seq) else {
                self.idle(&mut nudge).await;
                continue;
            };
            // Opened once, and again only if the subscription's secret changed.
            let signer = match signer.take() {
                Some(s) if s.sealed == hook.secret => signer.insert(s),
                _ => signer.insert(Signer::open(&self.key, &hook)),
            };
            let mut page = Page { failing_since: hook.failing_since, delivered: Vec::new(), upto: from };
            // Parsed once a page, not once a request.
            let url = reqwest::Url::parse(&hook.url).map_err(|_| Stop::Gone)?;
            let wanted: Vec<&Recorded> = events.iter().filter(|e| kinds.wants(&e.row.kind)).map(|e| &**e).collect();
            for batch in wanted.chunks(hook.batch.clamp(1, MAX_BATCH) as usize) {
                let outcome = self.deliver(&hook, &url, signer, batch, &mut page, &active).await;
                if outcome.is_err() {
                    // After the previous page's write: one at a time, in order.
                    if let Some(previous) = settling.take() {
                        let _ = previous.await;
                    }
                    self.settle(&hook, &mut page).await;
                    return outcome;
                }
                page.upto = batch.last().map_or(page.upto, |e| e.row.seq);
            }
            // The page's log and cursor in one write each, made while the
            // next page goes out (the single writer of SQLite is shared
            // with the engine: waiting for it held every page up). One
            // such write at a time, in order; a restart repeats at most
            // the last two pages (same webhook-ids, for receivers to drop).
            cursor = last;
            if let Some(previous) = settling.take() {
                let _ = previous.await;
            }
            let (store, keep, poll, id) =
                (self.store.clone(), self.config.keep_deliveries, self.config.poll, hook.id.clone());
            let delivered = std::mem::take(&mut page.delivered);
            settling = Some(tokio::spawn(async move {
                write_page(&*store, keep, poll, &id, &delivered, last).await;
            }));
        }
    }

    /// Writes what a page delivered so far: its log, then its cursor.
    async fn settle(&self, hook: &WebhookRow, page: &mut Page) {
        let keep = self.config.keep_deliveries;
        write_page(&*self.store, keep, self.config.poll, &hook.id, &page.delivered, page.upto).await;
        page.delivered.clear();
    }

    /// Sends one request (one event, or a batch of them) until the
    /// receiver takes it (or the subscription is disabled for failing too
    /// long).
    async fn deliver(
        &self,
        hook: &WebhookRow,
        url: &reqwest::Url,
        signer: &Signer,
        events: &[&Recorded],
        page: &mut Page,
        active: &watch::Receiver<bool>,
    ) -> Result<(), Stop> {
        let m = metrics();
        let (Some(first), Some(last)) = (events.first().map(|e| &e.row), events.last().map(|e| &e.row)) else {
            return Ok(());
        };
        let (id, body) = message(hook.batch > 1, events);
        // Shared by every attempt, not copied.
        let body = bytes::Bytes::from(body);
        let mut attempt = 0i64;
        loop {
            attempt += 1;
            let started = Instant::now();
            let outcome = self.send(url, signer, &id, &body).await;
            let took = started.elapsed();
            m.request.observe_duration(took);
            let row = DeliveryRow {
                webhook_id: hook.id.clone(),
                seq: last.seq,
                attempt,
                at: now_ms(),
                status: outcome.as_ref().ok().copied().or_else(|| outcome.as_ref().err().and_then(|(s, _)| *s)),
                error: outcome.as_ref().err().map(|(_, e)| e.clone()),
                duration_ms: took.as_millis() as i64,
            };
            match outcome {
                Ok(_) => {
                    page.delivered.push(row);
                    m.deliveries.with(&["delivered"]).inc();
                    let now = now_ms();
                    for event in events {
                        m.lag.observe((now - event.row.at).max(0) as f64 / 1000.0);
                    }
                    if page.failing_since.take().is_some() {
                        let _ = self.store.set_webhook_failing(&hook.id, None).await;
                    }
                    return Ok(());
                }
                Err((_, error)) => {
                    m.deliveries.with(&["failed"]).inc();
                    // What the page delivered so far is durable before
                    // the retries (and the failure is logged at once).
                    page.delivered.push(row);
                    self.settle(hook, page).await;
                    let now = now_ms();
                    let since = *page.failing_since.get_or_insert(now);
                    if since == now {
                        let _ = self.store.set_webhook_failing(&hook.id, Some(now)).await;
                    }
                    if now - since >= self.config.disable_after.as_millis() as i64 {
                        self.disable(hook, &error, now - since).await;
                        return Err(Stop::Gone);
                    }
                    tracing::info!(first = first.seq, last = last.seq, attempt, %error, "webhook delivery failed; will retry");
                    let backoff = backoff(&self.config, attempt);
                    tokio::time::sleep(backoff).await;
                    if !*active.borrow() {
                        return Err(Stop::Gone);
                    }
                    match self.store.get_webhook(&hook.tenant, &hook.id).await {
                        Ok(Some(h)) if h.state == WebhookState::Active => {}
                        Ok(_) => return Err(Stop::Gone),
                        Err(_) => {}
                    }
                }
            }
        }
    }

    /// One request: the receiver's status if it took it (2xx), else the
    /// status (if any) and why not.
    async fn send(
        &self,
        url: &reqwest::Url,
        signer: &Signer,
        id: &str,
        body: &bytes::Bytes,
    ) -> Result<i64, (Option<i64>, String)> {
        let request = self.http.post(url.clone()).await.map_err(|e| (None, e))?;
        let timestamp = Utc::now().timestamp();
        let key = signer.key.as_ref().map_err(|e| (None, e.clone()))?;
        let signature = key.sign(id, timestamp, body);
        let response = request
            .header("content-type", "application/json")
            .header("user-agent", "dagr-webhooks")
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body.clone())
            .send()
            .await
            .map_err(|e| (None, with_causes(&e)))?;
        let status = response.status();
        if status.is_success() {
            Ok(status.as_u16() as i64)
        } else {
            Err((Some(status.as_u16() as i64), format!("the receiver answered {status}")))
        }
    }

    /// Disables a subscription that failed too long, and tells its tenant.
    async fn disable(&self, hook: &WebhookRow, error: &str, failing_ms: i64) {
        let reason = format!(
            "every delivery failed for {}s (limit [webhooks] disable_after); the last error: {error}",
            failing_ms / 1000
        );
        tracing::warn!(%reason, "webhook disabled");
        if let Err(e) = self.store.set_webhook_disabled(&hook.id, Some(&reason)).await {
            tracing::warn!(error = %e, "cannot disable the webhook");
            return;
        }
        let event = NewEvent {
            tenant: hook.tenant.clone(),
            at: now_ms(),
            kind: "webhook.disabled".into(),
            workflow: None,
            run_id: None,
            task: None,
            data: serde_json::json!({"webhook": hook.id, "url": hook.url, "reason": reason}).to_string(),
        };
        if let Err(e) = self.store.commit(WriteBatch { events: vec![event], ..WriteBatch::default() }).await {
            tracing::warn!(error = %e, "cannot record that the webhook was disabled");
        }
    }
}

/// Writes a page's delivery log, then moves the subscription's cursor
/// (retrying until the store takes it; the cursor only moves forward).
async fn write_page(store: &dyn Store, keep: i64, poll: Duration, id: &str, delivered: &[DeliveryRow], upto: i64) {
    if let Err(e) = store.record_deliveries(delivered, keep).await {
        tracing::warn!(error = %e, "cannot record deliveries");
    }
    let mut delay = poll;
    while let Err(e) = store.advance_webhook(id, upto).await {
        tracing::warn!(error = %e, "cannot move the webhook's cursor; will retry");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// An event as a request carries it (the Standard Webhooks envelope),
/// serialized straight from its row: `data` is the event's stored JSON,
/// checked but not parsed into a tree and printed again (building that
/// tree for every event and subscription was a fifth of a busy server's
/// CPU).
#[derive(serde::Serialize)]
struct Envelope<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    timestamp: String,
    data: View<'a>,
}

/// [`EventView`] borrowed from the row (the same fields, the same JSON).
#[derive(serde::Serialize)]
struct View<'a> {
    seq: i64,
    at: String,
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    workflow: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task: Option<&'a str>,
    /// `null` if the stored text is not JSON (as [`event_view`] has it).
    data: Option<&'a serde_json::value::RawValue>,
}

impl<'a> Envelope<'a> {
    fn of(e: &'a EventRow) -> Envelope<'a> {
        let at = time(e.at);
        Envelope {
            kind: &e.kind,
            timestamp: at.clone(),
            data: View {
                seq: e.seq,
                at,
                kind: &e.kind,
                tenant: Some(&e.tenant),
                workflow: e.workflow.as_deref(),
                run_id: e.run_id.as_deref(),
                task: e.task.as_deref(),
                data: serde_json::from_str(&e.data).ok(),
            },
        }
    }
}

/// The event as a request carries it alone: its [`Envelope`] as JSON.
pub(crate) fn envelope(e: &EventRow) -> String {
    serde_json::to_string(&Envelope::of(e)).unwrap_or_else(|_| "{}".to_owned())
}

/// A request's `webhook-id` and body: one event as the Standard Webhooks
/// specification has it, or (`batch`) several, consecutive in the log,
/// each as it would be alone: `{"type":"batch","timestamp":…,"data":[…]}`
/// with each event's envelope as made once for every subscription.
fn message(batch: bool, events: &[&Recorded]) -> (String, String) {
    match events {
        [event] if !batch => (format!("evt_{}", event.row.seq), event.envelope().to_owned()),
        _ => {
            let first = events.first().map_or(0, |e| e.row.seq);
            let last = events.last().map_or(0, |e| e.row.seq);
            let at = events.last().map_or(0, |e| e.row.at);
            let size = events.iter().map(|e| e.envelope().len() + 1).sum::<usize>() + 64;
            let mut body = String::with_capacity(size);
            body.push_str(r#"{"type":"batch","timestamp":""#);
            body.push_str(&time(at));
            body.push_str(r#"","data":["#);
            for (i, event) in events.iter().enumerate() {
                if i > 0 {
                    body.push(',');
                }
                body.push_str(event.envelope());
            }
            body.push_str("]}");
            (format!("evt_{first}-{last}"), body)
        }
    }
}

/// The delay before retry `attempt` (1 after the first failure): the base
/// doubled each time, capped, with up to 10 % jitter.
fn backoff(config: &WebhookConfig, attempt: i64) -> Duration {
    let doubled = config.retry_base.saturating_mul(1u32 << attempt.clamp(1, 20).saturating_sub(1) as u32);
    let capped = doubled.min(config.max_backoff);
    capped + capped.mul_f64(rand::random::<f64>() * 0.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64) -> EventRow {
        EventRow {
            seq,
            tenant: "acme".into(),
            at: 1_700_000_000_000 + seq,
            kind: "task.state".into(),
            workflow: Some("wf".into()),
            run_id: Some("r1".into()),
            task: Some("t".into()),
            data: r#"{"state":"running"}"#.into(),
        }
    }

    /// A batch as serde would write it: what [`message`] writes by hand.
    #[derive(serde::Serialize)]
    struct Batch<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        timestamp: String,
        data: Vec<Envelope<'a>>,
    }

    #[test]
    fn a_message_is_one_event_or_a_batch() {
        let (a, b) = (Recorded::new(event(7)), Recorded::new(event(9)));
        let (a, b) = (&*a, &*b);
        let (id, body) = message(false, &[a]);
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(id, "evt_7");
        assert_eq!(body["type"], "task.state");
        assert_eq!(body["data"]["seq"], 7);
        assert_eq!(body["data"]["data"]["state"], "running");
        let (id, text) = message(true, &[a, b]);
        let by_serde =
            Batch { kind: "batch", timestamp: time(b.row.at), data: vec![Envelope::of(&a.row), Envelope::of(&b.row)] };
        assert_eq!(text, serde_json::to_string(&by_serde).unwrap(), "the same bytes as serde's");
        let batch: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(id, "evt_7-9");
        assert_eq!(batch["type"], "batch");
        assert_eq!(batch["data"][0], body, "each event in a batch as it is alone");
        assert_eq!(batch["data"][1]["data"]["seq"], 9);
        let (id, single) = message(true, &[b]);
        assert_eq!(id, "evt_9-9", "a batching subscription always gets batches");
        assert!(single.contains(r#""type":"batch""#));
    }

    #[test]
    fn an_event_is_sent_as_its_view_and_data_that_is_not_json_as_null() {
        let mut quiet = event(3);
        quiet.workflow = None;
        let mut broken = event(4);
        broken.data = "{not json".into();
        for e in [event(2), quiet, broken] {
            let (_, body) = message(false, &[&Recorded::new(e.clone())]);
            let body: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(body["data"], serde_json::to_value(event_view(&e)).unwrap(), "{body}");
            assert_eq!(body["timestamp"], body["data"]["at"]);
        }
    }

    #[test]
    fn a_batching_subscription_reads_ten_requests_at_once() {
        assert_eq!(page_size(1), 100, "one event per request: a page of 100");
        assert_eq!(page_size(20), 200);
        assert_eq!(page_size(100), 1000);
        assert_eq!(page_size(500), 1000, "bounded");
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let config = WebhookConfig {
            retry_base: Duration::from_secs(1),
            max_backoff: Duration::from_secs(10),
            ..WebhookConfig::default()
        };
        let b = |n| backoff(&config, n).as_secs_f64();
        assert!((1.0..1.11).contains(&b(1)) && (2.0..2.21).contains(&b(2)) && (4.0..4.41).contains(&b(3)));
        assert!((10.0..11.01).contains(&b(30)), "capped");
    }
}
