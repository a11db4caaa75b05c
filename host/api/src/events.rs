//! The event stream: `GET /v1/events`, as Server-Sent Events or as pages
//! of JSON.
//!
//! Every state change the engine commits is an event in the store's log,
//! numbered by a sequence that only grows; the number is the SSE event's
//! `id`, so a client that reconnects with `Last-Event-ID` resumes exactly
//! after the last event it saw, across restarts of the API, the server or
//! a master (the log is in the store, not in any process).
//!
//! One [`EventHub`] per API process reads the log for everyone: every
//! `[api] event_poll` (or as soon as an engine in the process commits) it
//! reads what is new across all tenants, frames each event once and keeps
//! the newest (`[api] event_buffer` bytes of them) in a [`Ring`] shared by
//! every subscriber, so a hundred subscribers cost one query and one
//! serialization per event, not a hundred. A subscriber copies the frames
//! it wants from where it stands in the ring; one that stands before the
//! oldest event kept (it came with an old `Last-Event-ID`, or fell that
//! far behind) reads the store until it reaches the ring. Events are
//! delivered in order, each once: a subscriber only moves forward (the
//! store guarantees that what a reader sees is a prefix of the log; see
//! `dagr_store::Store::event_page`).

mod ring;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use dagr_core::events::KindFilter;
use dagr_protocol::api::{ApiError, EventPage, EventView};
use dagr_protocol::tenancy::ADMIN_TENANT;
use dagr_store::{EventRow, EventScope, Store};
use serde::Deserialize;
use tokio::sync::{OnceCell, watch};

use crate::error::AppError;
use crate::extract::Query;
use crate::{ApiState, Tenant};
use ring::{Lags, Read, Ring, Shared};

/// Events read from the store at once.
const PAGE: i64 = 500;

/// Most bytes of events one write to a stream carries; a stream that is
/// further behind writes several.
const CHUNK: usize = 256 * 1024;
/// An idle stream sends a comment this often, so that proxies and clients
/// see that it lives.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// From an event (the engine's decision) to its frame handed to a
/// stream's connection: how far this server's followers lag, whatever
/// the clients' own speed.
fn stream_lag() -> &'static dagr_metrics::Histogram {
    static LAG: std::sync::OnceLock<Arc<dagr_metrics::Histogram>> = std::sync::OnceLock::new();
    LAG.get_or_init(|| {
        dagr_metrics::global().histogram(
            "dagr_event_stream_lag_seconds",
            "From an event to its frame handed to an event stream's (SSE) connection.",
            dagr_metrics::FAST_SECONDS,
        )
    })
}

/// Registers this module's metrics (so that they are listed before the
/// first stream).
pub(crate) fn register_metrics() {
    stream_lag();
}

/// Reads new events for every subscriber of this process.
pub struct EventHub {
    store: Arc<dyn Store>,
    poll: Duration,
    max_streams: usize,
    /// The newest events, framed.
    ring: RwLock<Ring>,
    /// The highest sequence number read so far (every event up to it is
    /// in the store and visible), sent once its events are in the ring.
    head: watch::Sender<i64>,
    started: OnceCell<()>,
    streams: Arc<AtomicUsize>,
    /// Changes when an engine in this process committed events.
    nudge: std::sync::Mutex<Option<watch::Receiver<u64>>>,
}

impl EventHub {
    /// `buffer`: bytes of the newest events kept for the streams.
    pub fn new(store: Arc<dyn Store>, poll: Duration, max_streams: usize, buffer: usize) -> Arc<EventHub> {
        Arc::new(EventHub {
            store,
            poll,
            max_streams,
            ring: RwLock::new(Ring::new(buffer, 0)),
            head: watch::Sender::new(0),
            started: OnceCell::new(),
            streams: Arc::new(AtomicUsize::new(0)),
            nudge: std::sync::Mutex::new(None),
        })
    }

    /// Reads the log as soon as `committed` changes, not only every
    /// `poll` (for an engine in the same process: `dagr serve`).
    pub fn nudged_by(&self, committed: watch::Receiver<u64>) {
        *self.nudge.lock().unwrap_or_else(|e| e.into_inner()) = Some(committed);
    }

    /// Event streams open now.
    pub fn streams(&self) -> usize {
        self.streams.load(Ordering::Relaxed)
    }

    /// Starts the reader on the first subscription.
    async fn start(self: &Arc<Self>) -> Result<(), AppError> {
        self.started
            .get_or_try_init(|| async {
                let head = self.store.last_event_seq().await?;
                self.ring_mut().clear(head);
                self.head.send_replace(head);
                tokio::spawn(follow(Arc::downgrade(self), head));
                Ok::<(), AppError>(())
            })
            .await
            .map(|_| ())
    }

    fn ring_mut(&self) -> std::sync::RwLockWriteGuard<'_, Ring> {
        self.ring.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// The hub's reader: what is new, every `poll` (or when nudged), into the
/// ring for every subscriber.
async fn follow(hub: Weak<EventHub>, mut head: i64) {
    let scope = EventScope::default();
    let mut nudge = hub.upgrade().and_then(|h| h.nudge.lock().unwrap_or_else(|e| e.into_inner()).clone());
    loop {
        let Some(hub) = hub.upgrade() else { return };
        let page = match hub.store.event_page(&scope, head, PAGE).await {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the event log; will retry");
                Vec::new()
            }
        };
        let full = page.len() as i64 == PAGE;
        if let Some(last) = page.last() {
            head = last.seq;
            // Framed once for every subscriber; with none, not at all (one
            // that comes reads the store up to here).
            if hub.streams() > 0 {
                let framed: Vec<Shared> = page.into_iter().map(Shared::new).collect();
                hub.ring_mut().push(framed);
            } else {
                hub.ring_mut().clear(head);
            }
            hub.head.send_replace(head);
        }
        let poll = hub.poll;
        drop(hub);
        if !full {
            match &mut nudge {
                Some(committed) => {
                    tokio::select! {
                        _ = tokio::time::sleep(poll) => {}
                        changed = committed.changed() => {
                            if changed.is_err() {
                                nudge = None;
                            }
                        }
                    }
                }
                None => tokio::time::sleep(poll).await,
            }
        }
    }
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    /// Events after this number (the SSE form also takes the
    /// `Last-Event-ID` header). Default: from the start for pages, from now
    /// for a stream.
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// Only this workflow's events.
    pub workflow: Option<String>,
    /// Only this run's events.
    pub run: Option<String>,
    /// Only these kinds, comma-separated; `run.*` stands for every kind
    /// that starts with `run.`.
    pub kind: Option<String>,
    /// Most events in a page, 1–10000 (default 1000; pages only).
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<i64>,
}

/// What a subscriber wants.
#[derive(Debug, Clone)]
struct Filter {
    scope: EventScope,
    kinds: KindFilter,
}

impl Filter {
    fn from_query(tenant: &Tenant, q: &StreamQuery) -> Result<Filter, AppError> {
        let kinds = KindFilter::parse(q.kind.as_deref().unwrap_or(""))
            .map_err(|message| AppError::bad_at("bad_query", "?kind", message))?;
        let every_tenant = tenant.0 == ADMIN_TENANT;
        Ok(Filter {
            scope: EventScope {
                tenant: (!every_tenant).then(|| tenant.0.clone()),
                workflow: q.workflow.clone(),
                run_id: q.run.clone(),
            },
            kinds,
        })
    }

    fn wants(&self, e: &EventRow) -> bool {
        let scope = &self.scope;
        scope.tenant.as_ref().is_none_or(|t| *t == e.tenant)
            && scope.workflow.as_ref().is_none_or(|w| e.workflow.as_ref() == Some(w))
            && scope.run_id.as_ref().is_none_or(|r| e.run_id.as_ref() == Some(r))
            && self.kinds.wants(&e.kind)
    }
}

pub(crate) fn view(e: EventRow) -> EventView {
    dagr_notify::event_view(&e)
}

/// The tenant's events: every state change of its runs, tasks and
/// schedules, numbered in the order they happened. With `Accept:
/// text/event-stream`, a Server-Sent Events stream (each event's `id` is
/// its number; reconnect with `Last-Event-ID` to resume without a gap or
/// a duplicate); otherwise a page of JSON. The admin token without a
/// tenant header follows every tenant.
#[utoipa::path(
    get, path = "/v1/events", tag = "events", params(StreamQuery),
    responses(
        (status = 200, body = EventPage, description = "a page, or with `Accept: text/event-stream` a stream of `EventView`s"),
        (status = 400, body = ApiError),
        (status = 429, body = ApiError, description = "too many streams open ([api] max_event_streams)")
    )
)]
pub async fn events(
    State(state): State<ApiState>,
    tenant: Tenant,
    headers: HeaderMap,
    Query(q): Query<StreamQuery>,
) -> Result<Response, AppError> {
    let filter = Filter::from_query(&tenant, &q)?;
    if q.after.is_some_and(|a| a < 0) {
        return Err(AppError::bad_at("bad_query", "?after", "must be 0 or more"));
    }
    let wants_stream = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if !wants_stream {
        return page(&state, filter, &q).await;
    }
    if q.limit.is_some() {
        return Err(AppError::bad_at("bad_query", "?limit", "only pages take a limit, not a stream"));
    }
    let resume = match headers.get("last-event-id") {
        None => None,
        Some(v) => match v.to_str().ok().and_then(|v| v.trim().parse::<i64>().ok()).filter(|n| *n >= 0) {
            Some(n) => Some(n),
            None => {
                return Err(AppError::bad_at("bad_header", "Last-Event-ID", "must be an event number (0 or more)"));
            }
        },
    };
    stream(&state, filter, resume.or(q.after)).await
}

async fn page(state: &ApiState, filter: Filter, q: &StreamQuery) -> Result<Response, AppError> {
    let limit = q.limit.unwrap_or(1000);
    if !(1..=10_000).contains(&limit) {
        return Err(AppError::bad_at("bad_query", "?limit", "must be between 1 and 10000"));
    }
    let mut cursor = q.after.unwrap_or(0);
    let rows = state.store.event_page(&filter.scope, cursor, limit).await?;
    if let Some(last) = rows.last() {
        cursor = last.seq;
    }
    let events = rows.into_iter().filter(|e| filter.wants(e)).map(view).collect();
    Ok(axum::Json(EventPage { events, next: cursor }).into_response())
}

/// A subscriber's place in the log.
struct Follower {
    hub: Arc<EventHub>,
    filter: Filter,
    /// Changes when the ring has new events.
    head: watch::Receiver<i64>,
    /// Everything up to here was delivered or passed over.
    cursor: i64,
    /// Read the store up to here before reading the ring.
    catch_up_to: Option<i64>,
    lags: Lags,
    _open: StreamGuard,
}

/// Counts an open stream while it lives.
struct StreamGuard(Arc<AtomicUsize>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn stream(state: &ApiState, filter: Filter, after: Option<i64>) -> Result<Response, AppError> {
    let hub = state.events.clone();
    let open = hub.streams.fetch_add(1, Ordering::Relaxed) + 1;
    let guard = StreamGuard(hub.streams.clone());
    if open > hub.max_streams {
        return Err(AppError::RateLimited {
            message: format!(
                "{} event streams are open, the most this server keeps ([api] max_event_streams)",
                hub.max_streams
            ),
            retry_after: 5,
        });
    }
    hub.start().await?;
    let head = hub.head.subscribe();
    // From now: whatever the ring does not hold any more is read from the
    // store (the ring's floor says where it begins).
    let cursor = after.unwrap_or(*head.borrow());
    let follower = Follower { hub, filter, head, cursor, catch_up_to: None, lags: Lags::default(), _open: guard };
    // Every event that is ready goes out in one write: a hundred streams
    // following a burst make a hundred writes per batch, not one per event
    // and stream.
    let chunks = futures::stream::unfold(follower, |mut f| async move {
        let chunk = match tokio::time::timeout(KEEP_ALIVE, f.next_chunk()).await {
            Ok(chunk) => chunk?,
            Err(_) => Bytes::from_static(b":\n\n"),
        };
        Some((Ok::<_, std::convert::Infallible>(chunk), f))
    });
    let mut response = Body::from_stream(chunks).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}

impl Follower {
    /// The frames of the next events for this subscriber (at least one,
    /// about [`CHUNK`] bytes at most); `None` ends the stream.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            let mut chunk = BytesMut::new();
            if let Some(target) = self.catch_up_to {
                self.read_store(target, &mut chunk).await;
            } else {
                // Marks the head seen before the ring is read: an event
                // pushed after the read changes it again.
                self.head.borrow_and_update();
                let read = {
                    let ring = self.hub.ring.read().unwrap_or_else(|e| e.into_inner());
                    ring.read(&mut self.cursor, &self.filter, CHUNK, &mut chunk, &mut self.lags)
                };
                match read {
                    Read::Behind(floor) => self.catch_up_to = Some(floor),
                    // Events this subscriber does not want: let others run
                    // before looking further.
                    Read::Looked if chunk.is_empty() => tokio::task::yield_now().await,
                    Read::Looked => {}
                    Read::Nothing => {
                        if self.head.changed().await.is_err() {
                            return None;
                        }
                    }
                }
            }
            if !chunk.is_empty() {
                self.lags.observe(stream_lag(), chrono::Utc::now().timestamp_millis());
                return Some(chunk.freeze());
            }
        }
    }

    /// The next page of this subscriber's events from the store, on the
    /// way to `target` (where the ring begins).
    async fn read_store(&mut self, target: i64, chunk: &mut BytesMut) {
        match self.hub.store.event_page(&self.filter.scope, self.cursor, PAGE).await {
            Ok(rows) => {
                let done = rows.len() < PAGE as usize || rows.last().is_some_and(|e| e.seq >= target);
                for row in rows {
                    if row.seq <= self.cursor {
                        continue;
                    }
                    self.cursor = row.seq;
                    if self.filter.wants(&row) {
                        self.lags.push(row.at);
                        chunk.extend_from_slice(&Shared::new(row).frame);
                    }
                }
                if done {
                    // Everything up to the target was visible and read.
                    self.cursor = self.cursor.max(target);
                    self.catch_up_to = None;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "an event stream cannot read the log; will retry");
                tokio::time::sleep(self.hub.poll).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: i64, tenant: &str, kind: &str) -> EventRow {
        EventRow {
            seq,
            tenant: tenant.into(),
            at: 0,
            kind: kind.into(),
            workflow: Some("wf".into()),
            run_id: Some("r1".into()),
            task: None,
            data: "{}".into(),
        }
    }

    #[test]
    fn a_filter_takes_kinds_and_prefixes_of_its_tenant_only() {
        let q = StreamQuery { kind: Some("run.*, task.state".into()), ..Default::default() };
        let filter = Filter::from_query(&Tenant("acme".into()), &q).unwrap();
        assert!(filter.wants(&row(1, "acme", "run.state")));
        assert!(filter.wants(&row(1, "acme", "run.released")));
        assert!(filter.wants(&row(1, "acme", "task.state")));
        assert!(!filter.wants(&row(1, "acme", "task.stateful")));
        assert!(!filter.wants(&row(1, "other", "run.state")), "another tenant's event");
        let admin = Filter::from_query(&Tenant(ADMIN_TENANT.into()), &StreamQuery::default()).unwrap();
        assert!(admin.wants(&row(1, "other", "anything")), "the admin follows every tenant");
        let bad = StreamQuery { kind: Some("r*n".into()), ..Default::default() };
        let error = Filter::from_query(&Tenant("acme".into()), &bad).unwrap_err();
        assert!(format!("{error:?}").contains("r*n"), "{error:?}");
    }

    /// The ids of a stream's frames.
    fn ids(chunk: &[u8]) -> Vec<i64> {
        std::str::from_utf8(chunk).unwrap().lines().filter_map(|l| l.strip_prefix("id: ")?.parse().ok()).collect()
    }

    #[tokio::test]
    async fn a_stream_behind_the_ring_reads_the_store_and_goes_on_with_every_event_once_in_order() {
        use dagr_store::{NewEvent, SqlStore, Synchronous, WriteBatch};
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SqlStore::open_sqlite(&dir.path().join("dagr.db"), Synchronous::Normal).await.unwrap());
        // Every third event is another tenant's; each carries 200 bytes.
        let events = |from: i64, to: i64| WriteBatch {
            events: (from..=to)
                .map(|i| NewEvent {
                    tenant: if i % 3 == 0 { "other".into() } else { "acme".into() },
                    at: i,
                    kind: "task.state".into(),
                    workflow: Some("wf".into()),
                    run_id: Some("r1".into()),
                    task: Some(format!("t{i}")),
                    data: format!(r#"{{"n":{i},"pad":"{}"}}"#, "x".repeat(200)),
                })
                .collect(),
            ..WriteBatch::default()
        };
        store.commit(events(1, 10)).await.unwrap();
        // A ring of 4 KiB: about ten events.
        let hub = EventHub::new(store.clone(), Duration::from_millis(5), 10, 4096);
        hub.streams.fetch_add(1, Ordering::Relaxed);
        hub.start().await.unwrap();
        let filter = Filter::from_query(&Tenant("acme".into()), &StreamQuery::default()).unwrap();
        let head = hub.head.subscribe();
        let mut follower = Follower {
            hub: hub.clone(),
            filter,
            head,
            cursor: 5,
            catch_up_to: None,
            lags: Lags::default(),
            _open: StreamGuard(hub.streams.clone()),
        };
        let mut seen = Vec::new();
        let next = async |follower: &mut Follower| {
            let chunk = tokio::time::timeout(Duration::from_secs(10), follower.next_chunk()).await.unwrap().unwrap();
            ids(&chunk)
        };
        // Resumed after 5, before the ring began: from the store.
        seen.extend(next(&mut follower).await);
        assert_eq!(seen, vec![7, 8, 10]);
        // Sixty more while the stream waits: the ring keeps the last few.
        store.commit(events(11, 70)).await.unwrap();
        while *hub.head.borrow() < 70 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let floor = hub.ring.read().unwrap().floor();
        assert!(floor > 20, "the ring dropped the oldest: it begins after {floor}");
        while seen.last() != Some(&70) {
            seen.extend(next(&mut follower).await);
        }
        let acme: Vec<i64> = (7..=70).filter(|i| i % 3 != 0).collect();
        assert_eq!(seen, acme, "every event of its tenant after 5, once, in order");
    }
}
