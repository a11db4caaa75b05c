//! The HTTP API of a node that is still starting. The listener is bound
//! first, so `/healthz` answers at once — with `"status": "starting"` and
//! what the node is doing (compiling its built-in plugins on a fresh data
//! directory takes seconds) — and every other request waits until the
//! node's router is ready, then goes to it. Connections opened after that
//! get the router itself; nothing is added to their requests.
//!
//! ```text
//! let (gate, serve) = Gate::new("opening the store");
//! tokio::spawn(axum::serve(listener, serve));
//! gate.doing("compiling built-in plugins");
//! gate.ready(router);
//! ```

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::serve::{IncomingStream, Listener};
use dagr_protocol::api::{ApiError, Health};
use tokio::sync::watch;
use tower::ServiceExt as _;

/// How long a request waits for a starting node before it is answered 503.
const WAIT: Duration = Duration::from_secs(300);

#[derive(Clone)]
enum Phase {
    /// What the node is doing.
    Starting(String),
    Ready(Router),
}

/// The handle the starting node keeps: it says what it does, then hands
/// over its router.
pub struct Gate {
    phase: watch::Sender<Phase>,
}

impl Gate {
    /// A gate, and the make-service to give `axum::serve`.
    pub fn new(doing: impl Into<String>) -> (Gate, GateService) {
        let (phase, seen) = watch::channel(Phase::Starting(doing.into()));
        let waiting = Router::new().fallback(wait).with_state(seen.clone());
        (Gate { phase }, GateService { phase: seen, waiting })
    }

    /// What `/healthz` says the node is doing now.
    pub fn doing(&self, what: impl Into<String>) {
        let what = what.into();
        tracing::info!("starting: {what}");
        self.phase.send_replace(Phase::Starting(what));
    }

    /// The node is ready: waiting requests, and every later one, go to
    /// `router`.
    pub fn ready(&self, router: Router) {
        self.phase.send_replace(Phase::Ready(router));
    }
}

/// Gives each new connection the node's router once it is ready, and the
/// waiting router before.
#[derive(Clone)]
pub struct GateService {
    phase: watch::Receiver<Phase>,
    waiting: Router,
}

impl<'a, L: Listener> tower::Service<IncomingStream<'a, L>> for GateService {
    type Response = Router;
    type Error = Infallible;
    type Future = Ready<Result<Router, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: IncomingStream<'a, L>) -> Self::Future {
        ready(Ok(self.router()))
    }
}

impl GateService {
    /// The router for a new connection: the node's once it is ready.
    fn router(&self) -> Router {
        match &*self.phase.borrow() {
            Phase::Ready(router) => router.clone(),
            Phase::Starting(_) => self.waiting.clone(),
        }
    }
}

/// Every request of a connection opened while the node started.
async fn wait(
    axum::extract::State(mut phase): axum::extract::State<watch::Receiver<Phase>>,
    request: Request,
) -> Response {
    let now = phase.borrow().clone();
    let doing = match now {
        Phase::Ready(router) => return forward(router, request).await,
        Phase::Starting(doing) => doing,
    };
    if request.uri().path() == "/healthz" {
        let health =
            Health { status: "starting".into(), version: env!("CARGO_PKG_VERSION").into(), starting: Some(doing) };
        return axum::Json(health).into_response();
    }
    let ready = tokio::time::timeout(WAIT, phase.wait_for(|p| matches!(p, Phase::Ready(_))))
        .await
        .ok()
        .and_then(Result::ok)
        .and_then(|phase| match &*phase {
            Phase::Ready(router) => Some(router.clone()),
            Phase::Starting(_) => None,
        });
    let Some(router) = ready else {
        // Still starting after WAIT, or the node gave up (its process ends).
        let body = ApiError {
            code: "starting".into(),
            message: format!("the server is still starting (last: {doing}); try again"),
            location: None,
            details: Vec::new(),
        };
        return (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "5")], axum::Json(body)).into_response();
    };
    forward(router, request).await
}

async fn forward(router: Router, request: Request) -> Response {
    match router.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(service: &GateService, path: &str) -> Response {
        forward(service.router(), Request::get(path).body(axum::body::Body::empty()).unwrap()).await
    }

    async fn json(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn healthz_says_what_a_starting_node_does_and_requests_wait_for_the_router() {
        let (gate, service) = Gate::new("opening the store");
        gate.doing("compiling built-in plugins (2 of 7)");
        let health = json(get(&service, "/healthz").await).await;
        assert_eq!(health["status"], "starting");
        assert_eq!(health["starting"], "compiling built-in plugins (2 of 7)");

        let early = tokio::spawn({
            let service = service.clone();
            async move { get(&service, "/v1/runs").await }
        });
        let mut early = early;
        let waited = tokio::time::timeout(Duration::from_millis(50), &mut early).await;
        assert!(waited.is_err(), "a request must wait while the node starts");
        gate.ready(Router::new().route("/v1/runs", axum::routing::get(|| async { "runs" })));
        let response = early.await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        assert_eq!(&body[..], b"runs");
    }
}
