//! dagr's logs and traces.
//!
//! [`init`] sets up the process's `tracing` subscriber: logs to stderr
//! (filtered by `DAGR_LOG`) and, when `[telemetry] otlp_endpoint` is set,
//! spans exported over OTLP/HTTP (JSON) in batches from a thread of their
//! own. Without an endpoint no span is recorded for export and every
//! helper here returns at once: tracing costs nothing when it is off.
//!
//! **One trace per run.** A run's id is a UUID; its 16 bytes are the
//! trace id of everything that happens to the run, in every process, and
//! its last 8 bytes the id of the run's root span. So the API that takes
//! a trigger, the master that steps the run and dispatches its tasks, and
//! the worker that runs an attempt all put their spans into the same trace
//! without asking anybody ([`in_run`]); the root span itself is sent when
//! the run ends ([`run_ended`]), from its creation (the UUIDv7's time) to
//! its end. Across processes a span names its parent with a W3C
//! `traceparent`: in each attempt's spec and result (one request carries
//! many attempts) and on internal requests ([`inject`], [`extract`]).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, TraceContextExt as _, TraceFlags, TraceId, TraceState, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{Context, KeyValue, global};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, IdGenerator, RandomIdGenerator, SdkTracerProvider,
};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The log filter when `DAGR_LOG` is not set.
pub const DEFAULT_LOG: &str = "info,sqlx=warn,wasmtime=warn,cranelift=warn";

/// How long the exporter waits to fill a batch of spans.
const EXPORT_DELAY: Duration = Duration::from_millis(500);

/// Whether spans are exported (set once, by [`init`]).
static ON: AtomicBool = AtomicBool::new(false);

/// Where spans go.
#[derive(Debug, Clone)]
pub struct Otlp {
    /// The OTLP/HTTP traces URL, e.g. `http://collector:4318/v1/traces`.
    pub endpoint: String,
    /// The `service.name` of this process's spans (`dagr-serve`,
    /// `dagr-master`, ...).
    pub service: String,
}

/// Keeps the exporter; sends what is left when dropped.
#[derive(Debug)]
#[must_use = "dropping it stops the export of spans"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            // The exporter's client blocks: off any async runtime.
            let _ = std::thread::spawn(move || {
                if let Err(e) = provider.shutdown() {
                    eprintln!("telemetry: the last spans may not have been sent: {e}");
                }
            })
            .join();
        }
    }
}

/// Sets up logging, and the export of spans if `otlp` says where to.
/// Call once per process.
pub fn init(otlp: Option<Otlp>) -> anyhow::Result<Telemetry> {
    init_with(otlp, DEFAULT_LOG)
}

/// As [`init`], with another log filter when `DAGR_LOG` is not set.
pub fn init_with(otlp: Option<Otlp>, default_log: &str) -> anyhow::Result<Telemetry> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DAGR_LOG").unwrap_or_else(|_| default_log.into());
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(filter);
    let provider = otlp.map(provider).transpose()?;
    let spans = provider.as_ref().map(|p| {
        // dagr's own spans; never the HTTP clients' (the exporter's
        // requests would make spans of their own).
        let only = Targets::new()
            .with_default(LevelFilter::INFO)
            .with_target("h2", LevelFilter::OFF)
            .with_target("hyper", LevelFilter::OFF)
            .with_target("hyper_util", LevelFilter::OFF)
            .with_target("reqwest", LevelFilter::OFF)
            .with_target("sqlx", LevelFilter::OFF)
            .with_target("wasmtime", LevelFilter::OFF)
            .with_target("cranelift", LevelFilter::OFF)
            .with_target("opentelemetry", LevelFilter::OFF);
        tracing_opentelemetry::layer().with_tracer(p.tracer("dagr")).with_filter(only)
    });
    tracing_subscriber::registry().with(spans).with(logs).try_init()?;
    if let Some(p) = &provider {
        global::set_text_map_propagator(TraceContextPropagator::new());
        global::set_tracer_provider(p.clone());
        ON.store(true, Ordering::Release);
    }
    Ok(Telemetry { provider })
}

/// Whether spans are exported.
pub fn enabled() -> bool {
    ON.load(Ordering::Acquire)
}

fn provider(otlp: Otlp) -> anyhow::Result<SdkTracerProvider> {
    // reqwest's blocking client may not be made on an async runtime's thread.
    let client = std::thread::spawn(|| reqwest::blocking::Client::builder().timeout(Duration::from_secs(10)).build())
        .join()
        .map_err(|_| anyhow::anyhow!("telemetry: cannot make the OTLP client"))??;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpJson)
        .with_endpoint(otlp.endpoint.clone())
        .with_http_client(Blocking(client))
        .build()
        .map_err(|e| anyhow::anyhow!("telemetry.otlp_endpoint `{}`: {e}", otlp.endpoint))?;
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(BatchConfigBuilder::default().with_scheduled_delay(EXPORT_DELAY).build())
        .build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_id_generator(RunIds::default())
        .with_resource(Resource::builder().with_service_name(otlp.service).build())
        .build())
}

/// The OTLP exporter's HTTP client: reqwest's blocking one, called from
/// the batch processor's own thread.
#[derive(Debug)]
struct Blocking(reqwest::blocking::Client);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Blocking {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let response = self.0.execute(request.try_into()?)?;
        let (status, headers) = (response.status(), response.headers().clone());
        let mut answer = http::Response::builder().status(status).body(response.bytes()?)?;
        *answer.headers_mut() = headers;
        Ok(answer)
    }
}

thread_local! {
    /// Ids the next span made on this thread takes (a run's root span).
    static FIXED: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// Random ids, except for a run's root span, whose ids are the run's.
#[derive(Debug, Default)]
struct RunIds(RandomIdGenerator);

impl IdGenerator for RunIds {
    fn new_trace_id(&self) -> TraceId {
        FIXED.with(|f| f.get()).map_or_else(|| self.0.new_trace_id(), |(trace, _)| trace)
    }

    fn new_span_id(&self) -> SpanId {
        FIXED.with(|f| f.get()).map_or_else(|| self.0.new_span_id(), |(_, span)| span)
    }
}

/// A run's trace id and the id of its root span, from its UUID.
pub fn run_ids(run_id: &str) -> Option<(TraceId, SpanId)> {
    let uuid = uuid::Uuid::parse_str(run_id).ok()?;
    let bytes = *uuid.as_bytes();
    let mut span = [0u8; 8];
    span.copy_from_slice(&bytes[8..]);
    if span == [0; 8] {
        span[7] = 1;
    }
    Some((TraceId::from_bytes(bytes), SpanId::from_bytes(span)))
}

/// Makes `span` (not yet entered) a child of run `run_id`'s root span.
pub fn in_run(span: &tracing::Span, run_id: &str) {
    if !enabled() {
        return;
    }
    if let Some((trace, root)) = run_ids(run_id) {
        let parent = SpanContext::new(trace, root, TraceFlags::SAMPLED, true, TraceState::default());
        let _ = span.set_parent(Context::new().with_remote_span_context(parent));
    }
}

/// `span`'s W3C `traceparent`, for another process to continue from.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    if !enabled() {
        return None;
    }
    let mut carrier = HashMap::new();
    let context = span.context();
    global::get_text_map_propagator(|p| p.inject_context(&context, &mut carrier));
    carrier.remove("traceparent")
}

/// Makes `span` (not yet entered) a child of the span that `traceparent`
/// (from another process) names.
pub fn follow(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(value) = traceparent.filter(|_| enabled()) else { return };
    let carrier = HashMap::from([("traceparent".to_owned(), value.to_owned())]);
    let parent = global::get_text_map_propagator(|p| p.extract(&carrier));
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// Puts the current span's `traceparent` on a request's headers.
pub fn inject(headers: &mut http::HeaderMap) {
    if let Some(value) = traceparent(&tracing::Span::current())
        && let Ok(value) = http::HeaderValue::from_str(&value)
    {
        headers.insert("traceparent", value);
    }
}

/// Makes `span` a child of the span a request's `traceparent` names.
pub fn extract(span: &tracing::Span, headers: &http::HeaderMap) {
    follow(span, headers.get("traceparent").and_then(|v| v.to_str().ok()));
}

/// Sends run `run_id`'s root span: from the run's creation (its UUIDv7's
/// time) to now, with its end state.
pub fn run_ended(run_id: &str, state: &str) {
    if !enabled() {
        return;
    }
    let Some(ids) = run_ids(run_id) else { return };
    let start = uuid::Uuid::parse_str(run_id)
        .ok()
        .and_then(|u| u.get_timestamp())
        .map(|t| {
            let (secs, nanos) = t.to_unix();
            SystemTime::UNIX_EPOCH + Duration::new(secs, nanos)
        })
        .unwrap_or_else(SystemTime::now);
    let tracer = global::tracer("dagr");
    FIXED.with(|f| f.set(Some(ids)));
    let mut span = tracer
        .span_builder("run")
        .with_kind(SpanKind::Internal)
        .with_start_time(start)
        .with_attributes([KeyValue::new("run_id", run_id.to_owned()), KeyValue::new("state", state.to_owned())])
        .start_with_context(&tracer, &Context::new());
    FIXED.with(|f| f.set(None));
    span.end_with_timestamp(SystemTime::now());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_trace_is_its_uuid() {
        let run = "019ae1b2-3c4d-7e5f-8a6b-7c8d9e0f1a2b";
        let (trace, root) = run_ids(run).unwrap();
        assert_eq!(trace.to_string(), "019ae1b23c4d7e5f8a6b7c8d9e0f1a2b");
        assert_eq!(root.to_string(), "8a6b7c8d9e0f1a2b");
        assert!(run_ids("not a uuid").is_none());
        let (_, zero) = run_ids("019ae1b2-3c4d-7e5f-0000-000000000000").unwrap();
        assert_ne!(zero, SpanId::INVALID, "a root span id is never zero");
    }

    #[test]
    fn off_means_nothing_is_done() {
        let span = tracing::info_span!("x");
        in_run(&span, "019ae1b2-3c4d-7e5f-8a6b-7c8d9e0f1a2b");
        assert_eq!(traceparent(&span), None);
        let mut headers = http::HeaderMap::new();
        inject(&mut headers);
        assert!(headers.is_empty());
    }
}
