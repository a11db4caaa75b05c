//! Where deliveries may go: the HTTP client of webhooks and alerts, which
//! refuses non-public addresses at connect time.
//!
//! A subscription's URL is checked when it is made ([`crate::check_url`]),
//! but a name may point elsewhere by the time of a delivery. Checking the
//! name's addresses before each request and then letting the client look
//! it up again leaves a gap (a name that answers a public address to the
//! check and a private one to the connection), and costs a lookup per
//! request. [`PublicOnly`] is the client's own resolver instead: the
//! addresses it checks are the ones the connection uses.

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::refuse_address;

/// A DNS resolver that fails for a name with any non-public address.
#[derive(Debug, Clone, Copy, Default)]
pub struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|e| format!("cannot resolve `{host}`: {e}"))?
                .collect();
            for addr in &addrs {
                refuse_address(addr.ip(), false).map_err(|e| format!("`{host}` resolves to {e}"))?;
            }
            let addrs: Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

/// The client deliveries are sent with, and how its destinations are checked.
#[derive(Debug, Clone)]
pub struct Destinations {
    http: reqwest::Client,
    allow_private: bool,
    /// The client resolves names through [`PublicOnly`].
    names_checked: bool,
}

impl Destinations {
    /// A client with `timeout`, no redirects, and (unless `allow_private`)
    /// the [`PublicOnly`] resolver.
    pub fn new(timeout: Duration, allow_private: bool) -> Destinations {
        let builder = reqwest::Client::builder().timeout(timeout).redirect(reqwest::redirect::Policy::none());
        let builder = if allow_private { builder } else { builder.dns_resolver(Arc::new(PublicOnly)) };
        match builder.build() {
            Ok(http) => Destinations { http, allow_private, names_checked: !allow_private },
            Err(e) => {
                // Names are then checked before each request instead.
                tracing::error!(error = %e, "cannot build the delivery client; using reqwest's defaults");
                Destinations { http: reqwest::Client::default(), allow_private, names_checked: false }
            }
        }
    }

    /// Refuses a URL whose host is a non-public address (a literal, which
    /// no resolver sees) or, when the client does not check names itself,
    /// a name with one.
    async fn check(&self, url: &reqwest::Url) -> Result<(), String> {
        if self.allow_private {
            return Ok(());
        }
        let host = url.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse() {
            return refuse_address(ip, false);
        }
        if self.names_checked {
            return Ok(());
        }
        let name = Name::from_str(host).map_err(|e| format!("`{host}` is not a host name: {e}"))?;
        PublicOnly.resolve(name).await.map(drop).map_err(|e| e.to_string())
    }

    /// A POST to `url`, once [`Destinations::check`] allows it.
    pub async fn post(&self, url: reqwest::Url) -> Result<reqwest::RequestBuilder, String> {
        self.check(&url).await?;
        Ok(self.http.post(url))
    }
}

/// An error with its causes (reqwest's own message hides why a connection
/// failed, e.g. that the resolver refused the address).
pub(crate) fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_name_of_a_loopback_address_is_refused_by_the_resolver() {
        let error = PublicOnly.resolve(Name::from_str("localhost").unwrap()).await.err().unwrap();
        assert!(error.to_string().contains("`localhost` resolves to"), "{error}");
        assert!(error.to_string().contains("not a public address"), "{error}");
    }

    #[tokio::test]
    async fn a_request_to_such_a_name_fails_before_connecting_and_says_why() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let destinations = Destinations::new(Duration::from_secs(5), false);
        let url = reqwest::Url::parse(&format!("http://localhost:{port}/hook")).unwrap();
        assert!(destinations.check(&url).await.is_ok(), "names are left to the resolver");
        let error = destinations.post(url).await.unwrap().send().await.unwrap_err();
        let text = with_causes(&error);
        assert!(text.contains("not a public address"), "{text}");
        // Nothing connected.
        let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        assert!(accepted.is_err(), "a connection reached the listener");
        let literal = reqwest::Url::parse(&format!("http://127.0.0.1:{port}/hook")).unwrap();
        assert!(destinations.check(&literal).await.unwrap_err().contains("not a public address"));
        assert!(Destinations::new(Duration::from_secs(5), true).check(&literal).await.is_ok());
    }
}
