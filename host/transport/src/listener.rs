//! A node's internal port: plain TCP, or TLS with client certificates.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::Tls;

/// The longest a peer may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections that finished their handshake and wait to be served.
const ACCEPTED_QUEUE: usize = 256;

/// A node's internal port.
pub enum Listener {
    Plain(TcpListener),
    Tls(TlsListener),
}

impl Listener {
    /// Listens on `addr`, over TLS if `tls` is given.
    pub async fn bind(addr: SocketAddr, tls: Option<&Tls>) -> io::Result<Listener> {
        let tcp = TcpListener::bind(addr).await?;
        Ok(match tls {
            None => Listener::Plain(tcp),
            Some(tls) => Listener::Tls(TlsListener::new(tcp, tls.server_config())?),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Listener::Plain(tcp) => tcp.local_addr(),
            Listener::Tls(tls) => Ok(tls.local),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` completes.
pub async fn serve<F>(listener: Listener, app: axum::Router, shutdown: F) -> io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    match listener {
        Listener::Plain(tcp) => axum::serve(tcp, app).with_graceful_shutdown(shutdown).await,
        Listener::Tls(tls) => axum::serve(tls, app).with_graceful_shutdown(shutdown).await,
    }
}

/// Accepts TCP connections and completes their TLS handshakes on tasks of
/// their own, so that a slow or hostile peer holds up no other; the
/// connections that made it wait in a queue for the server.
pub struct TlsListener {
    local: SocketAddr,
    accepted: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    acceptor_task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor_task.abort();
    }
}

impl TlsListener {
    fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, accepted) = mpsc::channel(ACCEPTED_QUEUE);
        let acceptor = TlsAcceptor::from(config);
        let acceptor_task = tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(pair) => pair,
                    Err(e) => {
                        // Out of file descriptors and the like: wait, as axum does.
                        tracing::error!(error = %e, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::warn!(%peer, error = %e, "refused a peer: its TLS handshake failed"),
                        Err(_) => tracing::warn!(%peer, "refused a peer: no TLS handshake in {HANDSHAKE_TIMEOUT:?}"),
                    }
                });
            }
        });
        Ok(TlsListener { local, accepted, acceptor_task })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(pair) => pair,
            // The acceptor task ended (only when the runtime shuts down):
            // nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}
