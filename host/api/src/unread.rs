//! Closing the connection after a request whose body was left unread.
//!
//! A server that refuses a request before reading its body (a 401 from the
//! token check, a 413 for an upload over the limit) cannot reuse the
//! connection: the unread bytes are still on the wire. hyper then closes it
//! after the answer, but the answer itself did not say so, and a client that
//! had finished sending puts the connection back in its pool; its next
//! request there fails with "connection closed". [`close_if_unread`] adds
//! `Connection: close` to such answers, as nginx does for a 413.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};

/// Middleware: answers to requests whose body the handler did not read to
/// its end carry `Connection: close`.
pub async fn close_if_unread(request: Request, next: Next) -> Response {
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    let finished = Arc::new(AtomicBool::new(false));
    let request = request.map(|inner| Body::new(Watched { inner, finished: finished.clone() }));
    let mut response = next.run(request).await;
    if !finished.load(Ordering::Acquire) {
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// A request body that notes when it has been read to its end.
struct Watched {
    inner: Body,
    finished: Arc<AtomicBool>,
}

impl HttpBody for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.finished.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Bytes;
    use axum::routing::post;
    use tower::ServiceExt;

    use super::*;

    async fn answer(app: Router, body: &'static str) -> Response {
        let request = Request::post("/").body(Body::from(body)).unwrap();
        app.oneshot(request).await.unwrap()
    }

    fn closes(response: &Response) -> bool {
        response.headers().get(header::CONNECTION).is_some_and(|v| v == "close")
    }

    #[tokio::test]
    async fn an_unread_body_closes_the_connection_and_a_read_one_does_not() {
        let refuses = Router::new()
            .route("/", post(|| async { axum::http::StatusCode::UNAUTHORIZED }))
            .layer(axum::middleware::from_fn(close_if_unread));
        assert!(closes(&answer(refuses.clone(), "payload").await));
        assert!(!closes(&answer(refuses, "").await), "an empty body leaves nothing unread");

        let reads = Router::new()
            .route("/", post(|body: Bytes| async move { body.len().to_string() }))
            .layer(axum::middleware::from_fn(close_if_unread));
        assert!(!closes(&answer(reads, "payload").await));
    }
}
