//! Outgoing HTTP policy: which hosts a guest may reach through `wasi:http`.
//!
//! The check runs in wasi-http's `send_request` hook, i.e. on every request,
//! after the guest built it and before any connection is made:
//!
//! 1. The request's host must match an allowlist entry (exact name,
//!    `*.suffix` wildcard, or IP literal; optionally with `:port`).
//! 2. The name is resolved, and every address must be public, unless the
//!    allowlist names that very address: a public name can resolve to
//!    127.0.0.1 or 10.0.0.1, and that must not open the internal network.
//! 3. The connection goes to the address that was checked, so a second DNS
//!    answer cannot swap in another address: for plain `http` the URI is
//!    rewritten (`Host` keeps the name); `https` goes through a sender of
//!    ours (`outgoing.rs`) that connects to the address and does TLS with
//!    the name.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use dagr_core::net::is_public;

use serde::{Deserialize, Serialize};

/// One allowlist entry, e.g. `api.example.org`, `*.example.org:443`,
/// `127.0.0.1:8080` or `[::1]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostPattern {
    host: HostMatch,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum HostMatch {
    Exact(String),
    Suffix(String),
    Ip(IpAddr),
}

impl FromStr for HostPattern {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() {
            return Err("an allowed host cannot be empty".into());
        }
        if s.contains("://") || s.contains('/') {
            return Err(format!("allowed host `{s}` must be a host name, optionally with :port, not a URL"));
        }
        let (host, port) = split_host_port(s).ok_or_else(|| format!("allowed host `{s}` has a bad port"))?;
        let host = host.to_ascii_lowercase();
        let host = if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            HostMatch::Ip(ip)
        } else if let Some(suffix) = host.strip_prefix("*.") {
            check_name(suffix, s)?;
            HostMatch::Suffix(suffix.to_owned())
        } else {
            check_name(&host, s)?;
            HostMatch::Exact(host)
        };
        Ok(HostPattern { host, port })
    }
}

fn split_host_port(s: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let end = rest.find(']')?;
        let host = &s[..end + 2];
        let after = &rest[end + 1..];
        return match after.strip_prefix(':') {
            Some(p) => Some((host, Some(p.parse().ok()?))),
            None if after.is_empty() => Some((host, None)),
            None => None,
        };
    }
    // A bare IPv6 address has several colons and no port.
    if s.matches(':').count() > 1 {
        return Some((s, None));
    }
    match s.rsplit_once(':') {
        Some((h, p)) => Some((h, Some(p.parse().ok()?))),
        None => Some((s, None)),
    }
}

fn check_name(name: &str, whole: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    if ok { Ok(()) } else { Err(format!("allowed host `{whole}` is not a valid host name")) }
}

impl TryFrom<String> for HostPattern {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<HostPattern> for String {
    fn from(p: HostPattern) -> String {
        p.to_string()
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostMatch::Exact(h) => write!(f, "{h}")?,
            HostMatch::Suffix(h) => write!(f, "*.{h}")?,
            HostMatch::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
            HostMatch::Ip(ip) => write!(f, "{ip}")?,
        }
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

impl HostPattern {
    fn matches(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match &self.host {
            HostMatch::Exact(h) => h == host,
            HostMatch::Suffix(suffix) => host.len() > suffix.len() + 1 && host.ends_with(&format!(".{suffix}")),
            HostMatch::Ip(ip) => parse_ip_host(host).is_some_and(|h| h == *ip),
        }
    }
}

pub(crate) fn parse_ip_host(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

/// The hosts an attempt may reach. Empty (the default) means no network.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkPolicy {
    pub allow: Vec<HostPattern>,
}

impl NetworkPolicy {
    pub fn deny_all() -> Self {
        NetworkPolicy::default()
    }

    pub fn allow<I, S>(hosts: I) -> Result<Self, String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let allow = hosts.into_iter().map(|h| h.as_ref().parse()).collect::<Result<_, _>>()?;
        Ok(NetworkPolicy { allow })
    }

    /// Step 1: is the host named on the allowlist at all?
    pub(crate) fn check_name(&self, host: &str, port: u16) -> Result<(), Denied> {
        let host = host.to_ascii_lowercase();
        if self.allow.iter().any(|p| p.matches(&host, port)) {
            Ok(())
        } else if self.allow.is_empty() {
            Err(Denied(format!("{host}:{port}: this task has no network access (its allowlist is empty)")))
        } else {
            Err(Denied(format!("{host}:{port} is not on this task's allowlist")))
        }
    }

    /// Step 2: may we connect to this resolved address?
    pub(crate) fn check_address(&self, host: &str, addr: IpAddr) -> Result<(), Denied> {
        if is_public(addr) {
            return Ok(());
        }
        let named = self.allow.iter().any(|p| matches!(&p.host, HostMatch::Ip(ip) if *ip == addr));
        if named {
            Ok(())
        } else {
            Err(Denied(format!(
                "{host} resolves to {addr}, a {} address; only public addresses are allowed unless the allowlist names the address itself",
                classify(addr)
            )))
        }
    }

    /// Resolves `host` and checks every address. Returns the checked addresses.
    pub(crate) async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Denied> {
        let addrs: Vec<SocketAddr> = match parse_ip_host(host) {
            Some(ip) => vec![SocketAddr::new(ip, port)],
            None => tokio::net::lookup_host((host, port))
                .await
                .map_err(|e| Denied(format!("cannot resolve {host}: {e}")))?
                .collect(),
        };
        if addrs.is_empty() {
            return Err(Denied(format!("{host} resolves to no address")));
        }
        for addr in &addrs {
            self.check_address(host, addr.ip())?;
        }
        Ok(addrs)
    }
}

/// Why a request was refused; shown in the attempt's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Denied(pub String);

fn classify(addr: IpAddr) -> &'static str {
    let (loopback, link_local) = match addr {
        IpAddr::V4(ip) => (ip.is_loopback(), ip.is_link_local()),
        IpAddr::V6(ip) => (ip.is_loopback(), (ip.segments()[0] & 0xffc0) == 0xfe80),
    };
    if loopback {
        "loopback"
    } else if link_local {
        "link-local"
    } else {
        "private or reserved"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_parse_and_print() {
        for s in ["example.org", "*.example.org:443", "127.0.0.1:8080", "[::1]", "[::1]:80"] {
            let p: HostPattern = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
        }
        assert!("http://example.org".parse::<HostPattern>().is_err());
        assert!("exa mple.org".parse::<HostPattern>().is_err());
        assert!("example.org:99999".parse::<HostPattern>().is_err());
    }

    #[test]
    fn matching() {
        let policy = NetworkPolicy::allow(["example.org", "*.corp.example:8443", "127.0.0.1"]).unwrap();
        assert!(policy.check_name("example.org", 80).is_ok());
        assert!(policy.check_name("EXAMPLE.org", 443).is_ok());
        assert!(policy.check_name("api.example.org", 80).is_err());
        assert!(policy.check_name("a.corp.example", 8443).is_ok());
        assert!(policy.check_name("a.corp.example", 443).is_err());
        assert!(policy.check_name("corp.example", 8443).is_err());
        assert!(policy.check_name("127.0.0.1", 9).is_ok());
        assert!(NetworkPolicy::deny_all().check_name("example.org", 80).unwrap_err().0.contains("no network access"));
    }

    #[test]
    fn private_addresses_need_explicit_entries() {
        let policy = NetworkPolicy::allow(["localhost", "10.1.2.3"]).unwrap();
        let loopback = policy.check_address("localhost", "127.0.0.1".parse().unwrap()).unwrap_err();
        assert!(loopback.0.contains("loopback"), "{loopback:?}");
        assert!(policy.check_address("x", "10.1.2.3".parse().unwrap()).is_ok());
        assert!(policy.check_address("x", "10.1.2.4".parse().unwrap()).is_err());
        assert!(policy.check_address("x", "169.254.169.254".parse().unwrap()).is_err());
        assert!(policy.check_address("x", "::ffff:127.0.0.1".parse().unwrap()).is_err());
        assert!(policy.check_address("x", "fe80::1".parse().unwrap()).is_err());
        assert!(policy.check_address("x", "93.184.216.34".parse().unwrap()).is_ok());
    }
}
