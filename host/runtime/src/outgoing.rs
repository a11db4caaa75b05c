//! Sending a guest's HTTPS request to the address the policy checked.
//!
//! wasmtime-wasi-http's `default_send_request` connects to the request's
//! authority, which means a second name lookup: a name whose first answer
//! was a public address could answer 127.0.0.1 or 169.254.169.254 the second
//! time (DNS rebinding). Plain HTTP is pinned by writing the checked address
//! into the URI (the `Host` header keeps the name); HTTPS cannot be, since
//! TLS needs the name for SNI and the certificate check. So HTTPS requests
//! are sent here: a TCP connection to the checked address, TLS with the
//! request's host name (webpki's roots and any the operator added), then HTTP/1.1 — with the request's
//! connect, first-byte and between-bytes timeouts, as wasi-http's own
//! sender has them.

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio::net::TcpStream;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody};

/// What wasi-http's sender uses when a request sets no timeout.
const NO_TIMEOUT_SET: Duration = Duration::from_secs(600);

type Io = Box<dyn Future<Output = Result<(), Error>> + Send>;

/// Whether the worker may still act (see `Execution::keep_going`).
pub(crate) type KeepGoing = Arc<dyn Fn() -> bool + Send + Sync>;

/// Sends `request` for `host` over a connection to `addr`: TLS with the
/// host's name if `tls` is given, plain HTTP/1.1 otherwise. Every write on
/// the connection first asks `keep_going`: a request that was allowed when
/// it was made, but whose bytes would leave after the worker's lease ran
/// out (a worker frozen in between, say), does not leave.
pub(crate) async fn send_to(
    mut request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
    host: &str,
    addr: SocketAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
    keep_going: Option<KeepGoing>,
) -> Result<(http::Response<WasiBody>, Io), Error> {
    let timeout =
        |pick: fn(&RequestOptions) -> Option<Duration>| options.as_ref().and_then(pick).unwrap_or(NO_TIMEOUT_SET);
    let connect_timeout = timeout(|o| o.connect_timeout);
    let first_byte_timeout = timeout(|o| o.first_byte_timeout);
    let between_bytes_timeout = timeout(|o| o.between_bytes_timeout).max(Duration::from_nanos(1));

    let tcp = match tokio::time::timeout(connect_timeout, TcpStream::connect(addr)).await {
        Ok(stream) => Fenced { inner: stream.map_err(Error::Connect)?, keep_going },
        Err(_) => return Err(Error::ConnectionTimeout),
    };
    // The request line carries only the path; `Host` names the server.
    let path = request.uri().path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_else(|| "/".into());
    *request.uri_mut() = http::Uri::builder().path_and_query(path).build().map_err(|_| Error::HttpRequestUriInvalid)?;
    let timeouts = (connect_timeout, first_byte_timeout, between_bytes_timeout);
    let Some(tls) = tls else {
        return exchange(request, tcp, timeouts).await;
    };
    // An IP address written as the host: TLS checks the certificate for it.
    let name = match crate::network::parse_ip_host(host) {
        Some(ip) => rustls::pki_types::ServerName::from(ip),
        None => rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|_| Error::HttpRequestUriInvalid)?,
    };
    let connector = tokio_rustls::TlsConnector::from(tls);
    let tls = match tokio::time::timeout(connect_timeout, connector.connect(name, tcp)).await {
        Ok(stream) => stream.map_err(Error::Tls)?,
        Err(_) => return Err(Error::ConnectionTimeout),
    };
    exchange(request, tls, timeouts).await
}

/// HTTP/1.1 over `stream`: the request, and the response as it comes.
async fn exchange<S>(
    request: http::Request<WasiBody>,
    stream: S,
    (connect_timeout, first_byte_timeout, between_bytes_timeout): (Duration, Duration, Duration),
) -> Result<(http::Response<WasiBody>, Io), Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, conn) = match tokio::time::timeout(
        connect_timeout,
        hyper::client::conn::http1::handshake(TokioIo::new(stream)),
    )
    .await
    {
        Ok(handshake) => handshake?,
        Err(_) => return Err(Error::ConnectionTimeout),
    };

    // The connection must be driven while the answer is awaited; afterwards
    // wasi-http drives it through the returned future. A server that sends
    // its answer and closes (`Connection: close`) ends the connection in
    // the same moment the answer arrives: the answer is taken first, and a
    // connection that ended is asked for the answer it may have delivered.
    let mut conn = Box::pin(conn);
    let send = tokio::time::timeout(first_byte_timeout, sender.send_request(request));
    tokio::pin!(send);
    let mut ended = false;
    let answered = tokio::select! {
        biased;
        answered = &mut send => answered,
        closed = &mut conn => {
            closed.map_err(Error::from)?;
            ended = true;
            send.await
        }
    };
    let response = match answered {
        Ok(response) => response?,
        Err(_) => return Err(Error::ConnectionReadTimeout),
    };
    let response = response.map(|incoming| Paced::new(incoming, between_bytes_timeout).boxed_unsync());
    let io: Io =
        if ended { Box::new(async { Ok(()) }) } else { Box::new(async move { conn.await.map_err(Error::from) }) };
    Ok((response, io))
}

/// A connection that writes only while the worker may act.
struct Fenced<S> {
    inner: S,
    keep_going: Option<KeepGoing>,
}

impl<S> Fenced<S> {
    fn stopped(&self) -> Option<std::io::Error> {
        self.keep_going.as_ref().is_some_and(|ok| !ok()).then(|| {
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "the worker may no longer act (its lease ran out)",
            )
        })
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Fenced<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Fenced<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        if let Some(e) = self.stopped() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if let Some(e) = self.stopped() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if let Some(e) = self.stopped() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// TLS for plugins' requests: webpki's roots and the certificate
/// authorities of `extra_ca_file` (an operator's own), no client
/// certificate. Built once per runtime; every error names the file.
pub(crate) fn tls_config(extra_ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.into() };
    if let Some(path) = extra_ca_file {
        let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let certs = CertificateDer::pem_slice_iter(&bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{} is not a PEM file of certificates: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!("{} holds no PEM certificate", path.display()));
        }
        for (i, cert) in certs.into_iter().enumerate() {
            roots
                .add(cert)
                .map_err(|e| format!("{}: certificate {} is not a usable authority: {e}", path.display(), i + 1))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("ring does not support the default TLS versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A response body that fails if the next frame takes longer than the
/// between-bytes timeout.
struct Paced {
    incoming: hyper::body::Incoming,
    every: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl Paced {
    fn new(incoming: hyper::body::Incoming, every: Duration) -> Paced {
        Paced { incoming, every, deadline: Box::pin(tokio::time::sleep(every)) }
    }
}

impl Body for Paced {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let next = tokio::time::Instant::now() + self.every;
                self.deadline.as_mut().reset(next);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Error::from(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Error::ConnectionReadTimeout))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}
