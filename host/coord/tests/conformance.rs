//! The coordination conformance suite, in-process and on etcd.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dagr_coord::conformance::{self, Cluster};
use dagr_coord::etcd::EtcdCoordinator;
use dagr_coord::local::LocalHub;
use dagr_coord::{Coordinator, Role, SessionConfig};

struct Local(LocalHub);

impl Cluster for Local {
    fn join<'a>(
        &'a self,
        id: &'a str,
        role: Role,
        campaign: bool,
    ) -> conformance_future::Boxed<'a, Arc<dyn Coordinator>> {
        Box::pin(async move {
            let c: Arc<dyn Coordinator> =
                self.0.join(conformance::node(id, role), &SessionConfig { ttl: Duration::from_secs(2), campaign });
            c
        })
    }

    fn expire<'a>(&'a self, node: &'a Arc<dyn Coordinator>) -> conformance_future::Boxed<'a, ()> {
        Box::pin(async move {
            let id = node.node().id.clone();
            self.0.cut(&id);
            let hub = self.0.clone();
            // A real node re-joins once it can reach coordination again.
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                hub.heal(&id);
            });
        })
    }
}

mod conformance_future {
    pub type Boxed<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
}

#[tokio::test]
async fn local_conformance() {
    conformance::run_all(&Local(LocalHub::new()), "").await.unwrap();
}

struct Etcd {
    endpoints: Vec<String>,
    prefix: String,
    nodes: Mutex<HashMap<String, Arc<EtcdCoordinator>>>,
}

impl Cluster for Etcd {
    fn join<'a>(
        &'a self,
        id: &'a str,
        role: Role,
        campaign: bool,
    ) -> conformance_future::Boxed<'a, Arc<dyn Coordinator>> {
        Box::pin(async move {
            let config = SessionConfig { ttl: Duration::from_secs(2), campaign };
            let c = EtcdCoordinator::start(&self.endpoints, &self.prefix, conformance::node(id, role), config)
                .await
                .unwrap();
            self.nodes.lock().unwrap().insert(id.to_owned(), c.clone());
            let c: Arc<dyn Coordinator> = c;
            c
        })
    }

    fn expire<'a>(&'a self, node: &'a Arc<dyn Coordinator>) -> conformance_future::Boxed<'a, ()> {
        Box::pin(async move {
            let c = self.nodes.lock().unwrap().get(&node.node().id).cloned().unwrap();
            // Revoke the node's lease behind its back: its next renewal fails.
            let lease = c.lease_id().unwrap();
            c.client().lease_revoke(lease).await.unwrap();
        })
    }
}

#[tokio::test]
async fn etcd_conformance() {
    let Ok(endpoint) = std::env::var("DAGR_TEST_ETCD") else {
        assert!(std::env::var("CI").is_err(), "CI must set DAGR_TEST_ETCD");
        eprintln!("DAGR_TEST_ETCD is not set; skipping the etcd conformance run");
        return;
    };
    let cluster = Etcd {
        endpoints: vec![endpoint],
        prefix: format!("/dagr-test-{}", std::process::id()),
        nodes: Mutex::new(HashMap::new()),
    };
    conformance::run_all(&cluster, "").await.unwrap();
}
