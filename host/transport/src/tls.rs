//! Mutual TLS between nodes: certificates from PEM files, checked when a
//! node starts.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// The PEM files of a node's TLS setup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// `[cluster] tls_cert`: this node's certificate (and the chain up to
    /// the CA, if there are intermediates).
    pub cert: PathBuf,
    /// `[cluster] tls_key`: its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// `[cluster] tls_ca`: the CA that signs every node's certificate.
    pub ca: PathBuf,
}

/// Why a node's TLS setup was refused. Each names the file and its key.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {} ({key}): {source}", path.display())]
    Read {
        key: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} ({key}) is not valid: {why}", path.display())]
    Invalid { key: &'static str, path: PathBuf, why: String },
    #[error(
        "{} (cluster.tls_cert) is not signed by the CA in {} (cluster.tls_ca): {why}; make node certificates with \
         `dagr cert node` and that CA",
        cert.display(),
        ca.display()
    )]
    NotSignedByCa { cert: PathBuf, ca: PathBuf, why: String },
    #[error("cannot set up TLS: {0}")]
    Setup(String),
}

/// A node's TLS setup: what it serves with and what it connects with.
pub struct Tls {
    files: TlsFiles,
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("files", &self.files).finish_non_exhaustive()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { key, path: path.to_owned(), source })
}

fn certificates(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(key, path)?;
    let invalid = |why: String| TlsError::Invalid { key, path: path.to_owned(), why };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(invalid("it holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into()));
    }
    Ok(certs)
}

impl Tls {
    /// Reads and checks the files: they are PEM, the key is the
    /// certificate's, and the CA signed the certificate.
    pub fn load(files: &TlsFiles) -> Result<Tls, TlsError> {
        let provider = provider();
        let chain = certificates("cluster.tls_cert", &files.cert)?;
        let key_pem = read("cluster.tls_key", &files.key)?;
        let invalid_key = |why: String| TlsError::Invalid { key: "cluster.tls_key", path: files.key.clone(), why };
        let key = PrivateKeyDer::from_pem_slice(&key_pem)
            .map_err(|e| invalid_key(format!("no PEM private key (PKCS#8, PKCS#1 or SEC1) in it: {e}")))?;
        let mut roots = RootCertStore::empty();
        for ca in certificates("cluster.tls_ca", &files.ca)? {
            roots.add(ca).map_err(|e| TlsError::Invalid {
                key: "cluster.tls_ca",
                path: files.ca.clone(),
                why: format!("not a CA certificate: {e}"),
            })?;
        }
        let roots = Arc::new(roots);

        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
            .build()
            .map_err(|e| TlsError::Setup(e.to_string()))?;
        // A node whose own certificate the CA did not sign would be refused
        // by every peer: say so now, naming the files.
        verifier.verify_client_cert(&chain[0], &chain[1..], UnixTime::now()).map_err(|e| TlsError::NotSignedByCa {
            cert: files.cert.clone(),
            ca: files.ca.clone(),
            why: e.to_string(),
        })?;

        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(|e| invalid_key(format!("it is not the key of {}: {e}", files.cert.display())))?;
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| invalid_key(format!("it is not the key of {}: {e}", files.cert.display())))?;
        Ok(Tls { files: files.clone(), server: Arc::new(server), client: Arc::new(client) })
    }

    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// What this node serves its internal port with: its certificate, and
    /// a client certificate signed by the CA required of every peer.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.server.clone()
    }

    /// What this node connects to peers with: its certificate, and the CA
    /// as the only trusted root (a peer's certificate must also name the
    /// address it is reached at).
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.client.clone()
    }
}
