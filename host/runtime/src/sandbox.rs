//! What a guest can see: the store's data, the `host` interface, WASI and
//! the outgoing-HTTP hook.

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use crate::bindings::{self, Level};
use crate::limits::AttemptLimiter;
use crate::log::{AttemptLog, LogLevel, LogSource};
use crate::network::NetworkPolicy;
use crate::{AttemptObserver, SecretSource};

/// The data of one attempt's `Store`.
pub(crate) struct StoreState {
    /// The epoch thread ticks while any store is alive.
    pub(crate) _ticking: crate::Ticking,
    pub(crate) wasi: WasiCtx,
    pub(crate) http: WasiHttpCtx,
    pub(crate) table: ResourceTable,
    pub(crate) hooks: HttpPolicyHooks,
    pub(crate) limiter: AttemptLimiter,
    pub(crate) host: HostState,
}

/// State behind the `dagr:plugin/host` imports.
pub(crate) struct HostState {
    pub(crate) log: AttemptLog,
    pub(crate) cancel: CancellationToken,
    pub(crate) secrets: Option<Arc<dyn SecretSource>>,
    pub(crate) observer: Option<Arc<dyn AttemptObserver>>,
    pub(crate) progress: Arc<Mutex<Option<(u8, String)>>>,
    /// The run's workflow's grade.
    pub(crate) grade: u8,
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for StoreState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.hooks }
    }
}

impl bindings::dagr::plugin::types::Host for StoreState {}

impl bindings::dagr::plugin::host::Host for StoreState {
    fn log(&mut self, level: Level, message: String) {
        let level = match level {
            Level::Trace => LogLevel::Trace,
            Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warn,
            Level::Error => LogLevel::Error,
        };
        self.host.log.push(LogSource::Plugin, level, &message);
    }

    fn progress(&mut self, percent: u8, message: String) {
        let percent = percent.min(100);
        let message = self.host.log.redact_text(&message);
        if let Some(observer) = &self.host.observer {
            observer.progress(percent, &message);
        }
        let mut progress = self.host.progress.lock().unwrap_or_else(|e| e.into_inner());
        *progress = Some((percent, message));
    }

    fn cancelled(&mut self) -> bool {
        self.host.cancel.is_cancelled()
    }

    fn secret(&mut self, name: String) -> Option<String> {
        let value = self.host.secrets.as_ref()?.secret(&name)?;
        self.host.log.redact(&value);
        Some(value)
    }

    fn grade(&mut self) -> u8 {
        self.host.grade
    }
}

/// Enforces the attempt's [`NetworkPolicy`] on every outgoing request.
pub(crate) struct HttpPolicyHooks {
    pub(crate) policy: Arc<NetworkPolicy>,
    pub(crate) log: AttemptLog,
    /// While it returns false, no request leaves (see `Execution::keep_going`).
    pub(crate) keep_going: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
    /// The runtime's TLS settings for `https` requests.
    pub(crate) tls: Arc<rustls::ClientConfig>,
}

type ResponseFuture = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<wasmtime_wasi_http::WasiBody>,
                    Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
                ),
                wasmtime_wasi_http::Error,
            >,
        > + Send,
>;

impl WasiHttpHooks for HttpPolicyHooks {
    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> ResponseFuture {
        let policy = self.policy.clone();
        let log = self.log.clone();
        let tls = self.tls.clone();
        let keep_going = self.keep_going.clone();
        let fenced = keep_going.as_ref().is_some_and(|ok| !ok());
        Box::new(async move {
            use wasmtime_wasi_http::Error as HttpError;
            if fenced {
                log.push(
                    LogSource::Dagr,
                    LogLevel::Warn,
                    "outgoing HTTP request refused: the worker may no longer act",
                );
                return Err(HttpError::HttpRequestDenied);
            }
            let uri = request.uri().clone();
            let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
            let Some(host) = uri.host() else {
                return Err(HttpError::HttpRequestUriInvalid);
            };
            let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
            let deny = |reason: String, error: HttpError| {
                log.push(LogSource::Dagr, LogLevel::Warn, &format!("outgoing HTTP request to {uri} denied: {reason}"));
                error
            };
            if let Err(denied) = policy.check_name(host, port) {
                return Err(deny(denied.0, HttpError::HttpRequestDenied));
            }
            let addrs = match policy.resolve(host, port).await {
                Ok(addrs) => addrs,
                Err(denied) => return Err(deny(denied.0, HttpError::DestinationIpProhibited)),
            };
            // Connect to the address we checked, not to whatever a second
            // lookup returns.
            let addr = addrs[0];
            // To the address we checked, not to whatever a second lookup
            // returns (TLS with the name, for SNI and the certificate); each
            // write asks the lease again.
            crate::outgoing::send_to(request, options, host, addr, https.then_some(tls), keep_going).await
        })
    }
}
