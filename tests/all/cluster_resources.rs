//! Buffalo's resource scheduler in a real cluster (`[master] resources =
//! "leader"`): three masters, two workers, etcd and PostgreSQL; the leader
//! grants every master's slots, and a standby takes over when it is
//! killed.

use std::time::Duration;

use crate::cluster::{Cluster, Ledger, audit, exclusive, fan, wait_for};

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// The master that leads and keeps the resource book, with its book.
async fn resource_leader(cluster: &Cluster, masters: &[&str]) -> (String, serde_json::Value) {
    for _ in 0..100 {
        for m in masters {
            let load = cluster.metrics(m).await;
            if load["leader"] == true && load["resources"].is_object() {
                return (m.to_string(), load["resources"].clone());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no master keeps a resource book; logs in {}", cluster.dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_grants_every_master_s_slots_and_a_standby_takes_over_after_a_kill() {
    let _one = exclusive().await;
    let ledger = Ledger::start().await;
    let cluster = Cluster::up_with_env(3, 2, "3s", &[], &[("DAGR_MASTER__RESOURCES", "leader")]).await;
    cluster.apply(&ledger.workflow("fan", &fan(20), 100)).await;
    let mut runs = Vec::new();
    for _ in 0..9 {
        runs.push(cluster.trigger("fan").await);
    }
    let details = cluster.wait_all(&runs, Duration::from_secs(120)).await;
    let audited = audit(&cluster, &ledger, &details, true).await;
    assert_eq!((audited.task_instances, audited.executions), (9 * 22, 9 * 22), "every task ran once");

    let masters = ["m1", "m2", "m3"];
    let (leader, book) = resource_leader(&cluster, &masters).await;
    assert!(book["granted"].as_u64().unwrap_or(0) > 0, "the leader granted nothing: {book}");
    let mut dispatched = 0;
    for m in masters {
        let load = cluster.metrics(m).await;
        dispatched += load["dispatched"].as_u64().unwrap_or(0);
        if m != leader {
            assert!(load["resources"].is_null(), "{m} does not lead but keeps a book: {load}");
        }
        eprintln!("{m}: dispatched {}, refused {}", load["dispatched"], load["dispatch_refused"]);
    }
    assert!(dispatched >= 9 * 22, "the masters dispatched {dispatched} attempts");
    eprintln!("resource leader {leader}: {book}");

    // The leader dies: a standby keeps the book, and a new run's first task
    // starts (how long after the kill is printed, for the benchmarks: the
    // goal is TTL + 2 s; the suite asserts no timing).
    let killed_at = now_ms();
    cluster.kill(&leader);
    let run = cluster.trigger("fan").await;
    let started = wait_for(&ledger, &run, "root", 1, Duration::from_secs(30)).await;
    let delay = started - killed_at;
    eprintln!("resource leader {leader} killed; a new run's first task started {delay} ms later (TTL 3 s)");
    let details = cluster.wait_all(std::slice::from_ref(&run), Duration::from_secs(60)).await;
    audit(&cluster, &ledger, &details, true).await;
    let standbys: Vec<&str> = masters.iter().copied().filter(|m| *m != leader).collect();
    let (next, next_book) = resource_leader(&cluster, &standbys).await;
    assert!(
        next_book["token"].as_i64() > book["token"].as_i64(),
        "the new leader {next}'s token is not above the old one's: {next_book} vs {book}"
    );
}
