//! Mutual TLS between a cluster's nodes (`tests/local-cluster.sh up
//! --tls`, certificates from `dagr cert`): a workflow runs over it; a
//! plain-HTTP client, a client without a certificate and a node whose
//! certificate another CA signed are refused; a node started with such a
//! certificate says which file is wrong and does not start.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::cluster::{Cluster, exclusive};
use crate::support;

fn dagr(args: &[&str]) -> String {
    let out = Command::new(support::dagr_binary()).args(args).output().unwrap();
    assert!(out.status.success(), "dagr {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A client that trusts `ca` and presents `identity` (a node's name in
/// `dir`), if any.
fn client(ca: &Path, identity: Option<(&Path, &str)>) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(ca).unwrap()).unwrap();
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .timeout(Duration::from_secs(10));
    if let Some((dir, name)) = identity {
        let mut pem = std::fs::read(dir.join(format!("{name}.pem"))).unwrap();
        pem.extend(std::fs::read(dir.join(format!("{name}.key"))).unwrap());
        builder = builder.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    builder.build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_mutual_tls_runs_a_workflow_and_refuses_strangers() {
    let _one = exclusive().await;
    let cluster = Cluster::up_with(1, 2, "3s", &["--tls"]).await;
    let certs = cluster.dir.join("certs");
    let (master, worker) = (cluster.addr("m1"), cluster.addr("w1"));
    assert!(master.starts_with("https://") && worker.starts_with("https://"), "{master} {worker}");

    // API -> master (nudges), master -> worker (dispatch), worker -> master
    // (results): all of it over TLS.
    let tasks: Vec<_> = (0..6)
        .map(|i| {
            let deps: Vec<String> = if i == 0 { vec![] } else { vec![format!("t{}", i - 1)] };
            json!({"name": format!("t{i}"), "plugin": "echo", "params": {"i": i}, "depends_on": deps})
        })
        .collect();
    cluster.apply(&json!({"name": "over-tls", "tasks": tasks})).await;
    let runs = vec![cluster.trigger("over-tls").await, cluster.trigger("over-tls").await];
    for run in cluster.wait_all(&runs, Duration::from_secs(120)).await {
        assert_eq!(run["state"], "succeeded", "{run}");
    }

    // A node of the cluster reaches the internal ports.
    let ca = certs.join("ca.pem");
    let node = client(&ca, Some((&certs, "api")));
    for url in [format!("{master}/healthz"), format!("{worker}/healthz")] {
        assert!(node.get(&url).send().await.unwrap().status().is_success(), "{url}");
    }

    // Plain HTTP on the same port: no answer.
    let plain = master.replacen("https://", "http://", 1);
    let refused = reqwest::Client::new().get(format!("{plain}/healthz")).send().await;
    assert!(refused.is_err(), "plain HTTP must be refused: {refused:?}");
    // TLS without a client certificate.
    let anonymous = client(&ca, None).get(format!("{master}/healthz")).send().await;
    assert!(anonymous.is_err(), "a client without a certificate must be refused: {anonymous:?}");

    // A node whose certificate another CA signed.
    let other = tempfile::tempdir().unwrap();
    let other_dir = other.path().to_str().unwrap();
    dagr(&["cert", "ca", "--out", other_dir]);
    dagr(&["cert", "node", "stranger", "--ip", "127.0.0.1", "--ca", other_dir, "--out", other_dir]);
    let stranger = client(&ca, Some((other.path(), "stranger")));
    for url in [format!("{master}/healthz"), format!("{worker}/internal/attempts")] {
        let answer = stranger.get(&url).send().await;
        assert!(answer.is_err(), "{url}: another CA's node must be refused: {answer:?}");
    }

    // Started with that certificate, a worker names it and stops.
    let out = Command::new(support::dagr_binary())
        .args(["worker", "--node-id", "w9", "--listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(other.path().join("w9"))
        .env("DAGR_CONFIG", cluster.dir.join("dagr.toml"))
        .env("DAGR_CLUSTER__TLS_CERT", other.path().join("stranger.pem"))
        .env("DAGR_CLUSTER__TLS_KEY", other.path().join("stranger.key"))
        .env("DAGR_CLUSTER__TLS_CA", &ca)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a worker with another CA's certificate must not start");
    assert!(stderr.contains("stranger.pem") && stderr.contains("is not signed by the CA"), "{stderr}");

    // The refusals held nothing up.
    let run = cluster.trigger("over-tls").await;
    for run in cluster.wait_all(&[run], Duration::from_secs(60)).await {
        assert_eq!(run["state"], "succeeded", "{run}");
    }
}

#[test]
fn cert_verbs_make_a_ca_and_node_certificates_and_refuse_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let made = dagr(&["cert", "ca", "--out", out]);
    assert!(made.contains("ca.pem") && made.contains("ca.key"), "{made}");
    dagr(&["cert", "node", "m1", "--ip", "127.0.0.1", "--dns", "localhost", "--ca", out, "--out", out]);
    let key = dir.path().join("m1.key");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600, "keys are private");
    assert!(std::fs::read_to_string(dir.path().join("m1.pem")).unwrap().contains("BEGIN CERTIFICATE"));
    let again = Command::new(support::dagr_binary()).args(["cert", "ca", "--out", out]).output().unwrap();
    assert!(!again.status.success(), "an existing CA is not overwritten");
    let none = Command::new(support::dagr_binary()).args(["cert", "node", "m2", "--ca", out, "--out", out]).output();
    assert!(!none.unwrap().status.success(), "a node certificate names an address");
}
