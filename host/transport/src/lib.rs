//! Internal traffic between dagr's nodes — masters, workers and API nodes:
//! how a node listens for it and how it sends it.
//!
//! # Brief overview
//!
//! - [`TlsFiles`] names the PEM files of `[cluster] tls_cert`, `tls_key`
//!   and `tls_ca`; [`Tls::load`] reads them into the rustls configurations
//!   of mutual TLS: every node presents its own certificate, and accepts
//!   only peers (servers and clients alike) whose certificate the
//!   cluster's CA signed. Every problem names the file and its key.
//! - [`Internal`] is what a node's internal clients need: the cluster's
//!   secret (sent with every request, TLS or not) and the TLS setup, if
//!   any. [`Internal::client`] starts a `reqwest` client builder with both.
//! - [`Listener`] is a node's internal port, TLS or plain; [`serve`] runs an
//!   axum app on it. Over TLS, handshakes happen off the accept loop, and a
//!   peer that fails one (no certificate, another CA's, plain HTTP) is
//!   dropped and logged, never served.
//! - [`certs`] makes a private CA and node certificates signed by it, for
//!   a local cluster (`dagr cert ca`, `dagr cert node`).

pub mod certs;
mod listener;
mod tls;

pub use listener::{Listener, serve};
pub use tls::{Tls, TlsError, TlsFiles};

use std::sync::Arc;

use dagr_protocol::wire::ClusterSecret;

/// The cluster's secret and TLS setup, for internal requests.
#[derive(Clone, Debug)]
pub struct Internal {
    secret: ClusterSecret,
    tls: Option<Arc<Tls>>,
}

impl Internal {
    pub fn new(secret: ClusterSecret, tls: Option<Arc<Tls>>) -> Self {
        Internal { secret, tls }
    }

    /// `https` with TLS, else `http`: the scheme of this node's address.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    pub fn tls(&self) -> Option<&Arc<Tls>> {
        self.tls.as_ref()
    }

    pub fn secret(&self) -> &ClusterSecret {
        &self.secret
    }

    /// A client builder for internal requests: the secret's header on
    /// every request and, with TLS, this node's certificate to present
    /// and the cluster's CA as the only trusted root.
    pub fn client(&self) -> reqwest::ClientBuilder {
        let builder = reqwest::Client::builder().default_headers(self.secret.headers());
        match &self.tls {
            Some(tls) => builder.use_preconfigured_tls(tls.client_config().as_ref().clone()),
            None => builder,
        }
    }
}

#[cfg(test)]
mod tests;
