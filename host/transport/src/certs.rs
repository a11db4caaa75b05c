//! A private CA and the node certificates it signs (`dagr cert ca`,
//! `dagr cert node`): enough for a cluster on machines you run, e.g. the
//! local cluster of `tests/local-cluster.sh`. Keys are ECDSA P-256.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A certificate and its private key, PEM.
#[derive(Debug, Clone)]
pub struct Pem {
    pub cert: String,
    pub key: String,
}

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("the CA's {what} is not valid: {why}")]
    BadCa { what: &'static str, why: String },
    #[error("`{0}` is not a DNS name a certificate can hold")]
    BadName(String),
    #[error("cannot make the certificate: {0}")]
    Make(#[from] rcgen::Error),
}

/// Certificate parameters for `name` of organisation dagr.
fn named(name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    dn.push(DnType::OrganizationName, "dagr");
    params.distinguished_name = dn;
    params
}

fn validity(params: &mut CertificateParams, days: u32) {
    let now = time::OffsetDateTime::now_utc();
    // A little slack for clocks that disagree.
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(days.into());
}

/// A new CA named `name`, valid for `days`.
pub fn make_ca(name: &str, days: u32) -> Result<Pem, CertError> {
    let key = KeyPair::generate()?;
    let mut params = named(name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    validity(&mut params, days);
    let cert = params.self_signed(&key)?;
    Ok(Pem { cert: cert.pem(), key: key.serialize_pem() })
}

/// A certificate for node `name`, for both ends of internal connections
/// (server and client), reachable at `ips` and `dns` names (a peer checks
/// that the address it dialled is one of them), signed by `ca`.
pub fn make_node(ca: &Pem, name: &str, ips: &[IpAddr], dns: &[String], days: u32) -> Result<Pem, CertError> {
    let ca_key = KeyPair::from_pem(&ca.key).map_err(|e| CertError::BadCa { what: "key", why: e.to_string() })?;
    let ca_params = CertificateParams::from_ca_cert_pem(&ca.cert)
        .map_err(|e| CertError::BadCa { what: "certificate", why: e.to_string() })?;
    let ca_cert = ca_params.self_signed(&ca_key)?;

    let key = KeyPair::generate()?;
    let mut params = named(name);
    let mut names: Vec<SanType> = ips.iter().map(|ip| SanType::IpAddress(*ip)).collect();
    for d in dns {
        let ia5 = d.as_str().try_into().map_err(|_| CertError::BadName(d.clone()))?;
        names.push(SanType::DnsName(ia5));
    }
    params.subject_alt_names = names;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, days);
    let cert = params.signed_by(&key, &ca_cert, &ca_key)?;
    Ok(Pem { cert: cert.pem(), key: key.serialize_pem() })
}
