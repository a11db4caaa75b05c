#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use dagr_protocol::wire::ClusterSecret;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::certs::{Pem, make_ca, make_node};
use crate::{Internal, Listener, Tls, TlsError, TlsFiles, serve};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn write(dir: &Path, name: &str, pem: &Pem) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
    std::fs::write(&cert, &pem.cert).unwrap();
    std::fs::write(&key, &pem.key).unwrap();
    (cert, key)
}

struct Setup {
    _dir: tempfile::TempDir,
    ca: Pem,
    files: TlsFiles,
    other_ca: Pem,
    other_files: TlsFiles,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let ca = make_ca("test CA", 1).unwrap();
    let (ca_path, _) = write(dir.path(), "ca", &ca);
    let node = make_node(&ca, "n1", &[LOOPBACK], &["localhost".into()], 1).unwrap();
    let (cert, key) = write(dir.path(), "n1", &node);
    let other_ca = make_ca("another CA", 1).unwrap();
    let (other_ca_path, _) = write(dir.path(), "other-ca", &other_ca);
    let stranger = make_node(&other_ca, "stranger", &[LOOPBACK], &[], 1).unwrap();
    let (other_cert, other_key) = write(dir.path(), "stranger", &stranger);
    Setup {
        _dir: dir,
        ca,
        files: TlsFiles { cert, key, ca: ca_path },
        other_ca,
        other_files: TlsFiles { cert: other_cert, key: other_key, ca: other_ca_path },
    }
}

#[test]
fn a_node_certificate_loads_and_every_bad_file_is_named() {
    let s = setup();
    Tls::load(&s.files).unwrap();

    let missing = TlsFiles { cert: s.files.cert.with_file_name("nope.pem"), ..s.files.clone() };
    let e = Tls::load(&missing).unwrap_err();
    assert!(matches!(e, TlsError::Read { key: "cluster.tls_cert", .. }), "{e}");
    assert!(e.to_string().contains("nope.pem"), "{e}");

    let garbage = s.files.cert.with_file_name("garbage.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let e = Tls::load(&TlsFiles { ca: garbage.clone(), ..s.files.clone() }).unwrap_err();
    assert!(e.to_string().contains("garbage.pem") && e.to_string().contains("cluster.tls_ca"), "{e}");
    let e = Tls::load(&TlsFiles { key: garbage, ..s.files.clone() }).unwrap_err();
    assert!(e.to_string().contains("cluster.tls_key"), "{e}");

    // The key of another certificate.
    let e = Tls::load(&TlsFiles { key: s.other_files.key.clone(), ..s.files.clone() }).unwrap_err();
    assert!(e.to_string().contains("cluster.tls_key") && e.to_string().contains("n1.pem"), "{e}");

    // A certificate another CA signed.
    let e = Tls::load(&TlsFiles { ca: s.files.ca.clone(), ..s.other_files.clone() }).unwrap_err();
    assert!(matches!(e, TlsError::NotSignedByCa { .. }), "{e}");
    assert!(e.to_string().contains("stranger.pem") && e.to_string().contains("ca.pem"), "{e}");
}

async fn serve_ping(tls: &Tls) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), Some(tls)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/ping", axum::routing::get(|| async { "pong" }));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, app, async move {
        let _ = stopped.await;
    }));
    (addr, stop)
}

fn secret() -> ClusterSecret {
    ClusterSecret::new("a-cluster-secret-for-tests").unwrap()
}

/// A client that trusts `ca` and presents `cert`/`key` (or nothing).
fn client_with(ca: &Pem, identity: Option<&Pem>) -> reqwest::Client {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.cert.as_bytes()).unwrap()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match identity {
        Some(pem) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(pem.cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(pem.key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    reqwest::Client::builder().use_preconfigured_tls(config).build().unwrap()
}

#[tokio::test]
async fn mutual_tls_admits_the_cas_nodes_only() {
    let s = setup();
    let tls = Tls::load(&s.files).unwrap();
    let (addr, _stop) = serve_ping(&tls).await;
    let url = format!("https://{addr}/ping");

    let internal = Internal::new(secret(), Some(Arc::new(tls)));
    assert_eq!(internal.scheme(), "https");
    let good = internal.client().build().unwrap();
    let answer = good.get(&url).send().await.unwrap();
    assert_eq!(answer.text().await.unwrap(), "pong");

    // A node of another CA: trusts our server, presents its own certificate.
    let stranger = make_node(&s.other_ca, "stranger", &[LOOPBACK], &[], 1).unwrap();
    client_with(&s.ca, Some(&stranger)).get(&url).send().await.unwrap_err();
    // No certificate at all.
    client_with(&s.ca, None).get(&url).send().await.unwrap_err();
    // Plain HTTP.
    reqwest::Client::new().get(format!("http://{addr}/ping")).send().await.unwrap_err();
    // A client that trusts another CA refuses our server.
    client_with(&s.other_ca, Some(&stranger)).get(&url).send().await.unwrap_err();

    // The refused peers held nothing up.
    let answer = good.get(&url).send().await.unwrap();
    assert!(answer.status().is_success());
}

#[tokio::test]
async fn a_plain_listener_serves_plain_http() {
    let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), None).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/ping", axum::routing::get(|| async { "pong" }));
    tokio::spawn(serve(listener, app, std::future::pending()));
    let internal = Internal::new(secret(), None);
    assert_eq!(internal.scheme(), "http");
    let answer = internal.client().build().unwrap().get(format!("http://{addr}/ping")).send().await.unwrap();
    assert_eq!(answer.text().await.unwrap(), "pong");
}
