//! The coordination conformance suite: one set of checks for every
//! implementation (in-process and etcd).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::{Coordinator, Leader, NodeInfo, Role};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the suite needs from an implementation.
pub trait Cluster: Send + Sync {
    /// Joins a node with this id (unique per call), campaigning or not.
    fn join<'a>(&'a self, id: &'a str, role: Role, campaign: bool) -> BoxFuture<'a, Arc<dyn Coordinator>>;
    /// Makes the node lose its lease, as if it could not renew it.
    fn expire<'a>(&'a self, node: &'a Arc<dyn Coordinator>) -> BoxFuture<'a, ()>;
}

pub fn node(id: &str, role: Role) -> NodeInfo {
    NodeInfo {
        id: id.into(),
        role,
        addr: format!("http://127.0.0.1:1/{id}"),
        capacity: 4,
        labels: Default::default(),
        pid: std::process::id(),
        lease: 0,
    }
}

async fn eventually<T: Clone + Send + Sync>(
    rx: &watch::Receiver<T>,
    what: &str,
    pred: impl Fn(&T) -> bool,
) -> Result<T, String> {
    let mut rx = rx.clone();
    let wait = async {
        loop {
            let value = rx.borrow_and_update().clone();
            if pred(&value) {
                return value;
            }
            if rx.changed().await.is_err() {
                return value;
            }
        }
    };
    match tokio::time::timeout(Duration::from_secs(20), wait).await {
        Ok(value) if pred(&value) => Ok(value),
        _ => Err(format!("timed out waiting for: {what}")),
    }
}

/// Runs every check. `prefix` makes node ids unique when a backend is shared.
pub async fn run_all(cluster: &dyn Cluster, prefix: &str) -> Result<(), String> {
    let a_id = format!("{prefix}a");
    let b_id = format!("{prefix}b");
    let w_id = format!("{prefix}w");
    let a = cluster.join(&a_id, Role::Master, true).await;
    let b = cluster.join(&b_id, Role::Master, true).await;
    let w = cluster.join(&w_id, Role::Worker, false).await;

    // Membership: everyone sees everyone, with role and capacity.
    for (who, c) in [("a", &a), ("b", &b), ("w", &w)] {
        eventually(&c.membership(), &format!("{who} sees all three nodes"), |m| {
            m.contains(&a_id) && m.contains(&b_id) && m.contains(&w_id)
        })
        .await?;
    }
    let seen = a.membership().borrow().clone();
    if seen.nodes.get(&w_id).map(|n| (n.role, n.capacity)) != Some((Role::Worker, 4)) {
        return Err("the worker's role and capacity are not in the membership".into());
    }
    if seen.with_role(Role::Master).filter(|n| n.id == a_id || n.id == b_id).count() != 2 {
        return Err("two masters expected".into());
    }

    // Election: exactly one of the two campaigners leads; the worker never does.
    let token = eventually(&a.leadership(), "someone leads", |_| true).await?;
    let leads = |c: &Arc<dyn Coordinator>| c.leadership().borrow().is_some();
    let wait_one_leader = async {
        for _ in 0..200 {
            if leads(&a) ^ leads(&b) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    };
    if !wait_one_leader.await {
        return Err(format!(
            "expected exactly one leader (a: {:?}, b: {:?}, token seen {token:?})",
            a.leadership().borrow(),
            b.leadership().borrow()
        ));
    }
    if leads(&w) {
        return Err("a node that does not campaign became leader".into());
    }
    let (leader, follower) = if leads(&a) { (&a, &b) } else { (&b, &a) };
    let first_token = leader.leadership().borrow().ok_or("leader without token")?;
    // Everyone, the worker too, knows who leads, with its token.
    let first = Leader { id: leader.node().id.clone(), token: first_token };
    for (who, c) in [("a", &a), ("b", &b), ("w", &w)] {
        eventually(&c.leader(), &format!("{who} knows who leads"), |l| l.as_ref() == Some(&first)).await?;
    }

    // Self-fencing: the leader loses its lease → it stops acting at once,
    // the other takes over with a larger token, and the first comes back.
    if !leader.lease_guard().is_safe() {
        return Err("a healthy node's lease guard says it is not safe".into());
    }
    // Its membership entry names the lease it holds (dispatches name it).
    let leader_id = leader.node().id.clone();
    let first_lease = leader.lease().ok_or("a healthy node holds no lease")?;
    eventually(&w.membership(), "the membership names the node's lease", |m| {
        m.nodes.get(&leader_id).map(|n| n.lease) == Some(first_lease)
    })
    .await?;
    cluster.expire(leader).await;
    eventually(&leader.health(), "the expired node self-fences", |h| !*h).await?;
    if leader.lease_guard().is_safe() {
        return Err("a fenced node's lease guard still says safe".into());
    }
    let second = eventually(&follower.leadership(), "the follower takes over", |l| l.is_some()).await?;
    let second_token = second.ok_or("no token")?;
    if second_token <= first_token {
        return Err(format!("the new leader's token {second_token} is not above the old {first_token}"));
    }
    let second = Leader { id: follower.node().id.clone(), token: second_token };
    eventually(&w.leader(), "the worker knows the new leader", |l| l.as_ref() == Some(&second)).await?;
    eventually(&leader.health(), "the expired node re-joins", |h| *h).await?;
    eventually(&w.membership(), "the re-joined node is a member again", |m| m.contains(&leader_id)).await?;
    // Under a new lease, which its entry names.
    let second_lease = leader.lease().ok_or("a re-joined node holds no lease")?;
    if second_lease == first_lease {
        return Err(format!("the node re-joined under its old lease {first_lease}"));
    }
    eventually(&w.membership(), "the membership names the new lease", |m| {
        m.nodes.get(&leader_id).map(|n| n.lease) == Some(second_lease)
    })
    .await?;
    if leader.leadership().borrow().is_some() && follower.leadership().borrow().is_some() {
        return Err("two leaders after re-joining".into());
    }

    // Leaving: the worker leaves and drops out of membership.
    w.leave();
    eventually(&a.membership(), "a node that left is gone", |m| !m.contains(&w_id)).await?;
    a.leave();
    b.leave();
    Ok(())
}
