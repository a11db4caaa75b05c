//! dagr's outgoing notifications: webhooks, alerts ([`alerts`]: email,
//! Slack, Teams), and the event log on NATS ([`nats`]).
//!
//! A tenant subscribes a URL to its events (all, some kinds, one
//! workflow's). The [`Deliverer`] sends each event the subscription wants,
//! in the order of the event log, one request per event, signed as the
//! [Standard Webhooks](https://www.standardwebhooks.com/) specification
//! says (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,…`,
//! HMAC-SHA256 over `id.timestamp.body`). The event log is the outbox: a
//! subscription's cursor moves past an event once its delivery succeeded
//! (written once a page of deliveries, while the next page goes out), so
//! a `kill -9` at any point repeats at most the last two pages (the
//! `webhook-id`s stay the same for receivers to drop them), and loses
//! nothing. A failing receiver is retried with exponential backoff; one
//! failing for `[webhooks] disable_after` is disabled, and its tenant is
//! told by a `webhook.disabled` event.
//!
//! Destinations obey the plugins' network rule: no loopback, private or
//! otherwise non-public address unless `[webhooks] allow_private`.

pub mod alerts;
mod deliver;
mod dest;
pub mod nats;
mod recent;
mod sign;

use std::net::IpAddr;
use std::time::Duration;

pub use crate::deliver::{Deliverer, event_view};
pub use crate::sign::{SigningKey, new_secret, sign};

/// The longest URL a subscription may have.
pub const MAX_URL_BYTES: usize = 2048;

/// How webhooks are delivered (`[webhooks]`).
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// How often the deliverer looks for new events and subscriptions.
    pub poll: Duration,
    /// The first retry's delay; each next one doubles, up to `max_backoff`.
    pub retry_base: Duration,
    pub max_backoff: Duration,
    /// A subscription whose deliveries all failed for this long is disabled.
    pub disable_after: Duration,
    /// How long a receiver may take to answer.
    pub timeout: Duration,
    /// Whether destinations may be loopback or private addresses.
    pub allow_private: bool,
    /// Delivery attempts kept per subscription.
    pub keep_deliveries: i64,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        WebhookConfig {
            poll: Duration::from_millis(200),
            retry_base: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
            disable_after: Duration::from_secs(24 * 3600),
            timeout: Duration::from_secs(10),
            allow_private: false,
            keep_deliveries: 100,
        }
    }
}

/// Checks a subscription's URL: http or https, with a host, not too long,
/// and (when it is an address) a public one unless `allow_private`.
pub fn check_url(url: &str, allow_private: bool) -> Result<reqwest::Url, String> {
    if url.len() > MAX_URL_BYTES {
        return Err(format!("a webhook URL is at most {MAX_URL_BYTES} bytes"));
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("`{url}` is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("`{url}`: a webhook URL is http:// or https://"));
    }
    let Some(host) = parsed.host_str() else {
        return Err(format!("`{url}` has no host"));
    };
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!("`{url}`: put no credentials in a webhook URL (deliveries are signed)"));
    }
    if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        refuse_address(ip, allow_private)?;
    } else if !allow_private && (host == "localhost" || host.ends_with(".localhost")) {
        return Err(format!("`{host}` is a loopback name; webhooks go to public addresses ([webhooks] allow_private)"));
    }
    Ok(parsed)
}

pub(crate) fn refuse_address(ip: IpAddr, allow_private: bool) -> Result<(), String> {
    if allow_private || dagr_core::net::is_public(ip) {
        Ok(())
    } else {
        Err(format!("{ip} is not a public address; webhooks go to public addresses ([webhooks] allow_private)"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn urls_are_http_with_a_public_host_unless_allowed() {
        assert!(check_url("https://hooks.example.org/dagr?x=1", false).is_ok());
        for (bad, word) in [
            ("ftp://example.org/", "http"),
            ("http://127.0.0.1:9/", "public"),
            ("http://[::1]/", "public"),
            ("http://10.1.2.3/", "public"),
            ("http://localhost:8080/", "loopback"),
            ("https://user:pw@example.org/", "credentials"),
            ("not a url", "not a URL"),
        ] {
            let error = check_url(bad, false).unwrap_err();
            assert!(error.contains(word), "{bad}: {error}");
        }
        assert!(check_url("http://127.0.0.1:9/", true).is_ok(), "an admin may allow loopback");
        assert!(check_url(&format!("https://example.org/{}", "a".repeat(MAX_URL_BYTES)), false).is_err());
    }
}
