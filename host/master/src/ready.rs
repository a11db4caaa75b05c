//! The queue of tasks ready to run, across runs and tenants.
//!
//! Fair across tenants: each tenant with ready work has its own queue, and
//! dispatch takes from the tenants in turn (round robin), so a tenant that
//! queued 10,000 tasks delays another tenant's single task by at most one
//! dispatch per other busy tenant. Within a tenant: highest priority first,
//! then first come, first served.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadyTask {
    pub priority: i32,
    pub seq: u64,
    pub tenant: Arc<str>,
    pub run: Arc<str>,
    pub task: usize,
}

impl Ord for ReadyTask {
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority.cmp(&other.priority).then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for ReadyTask {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug, Default)]
pub(crate) struct ReadyQueue {
    tenants: HashMap<Arc<str>, BinaryHeap<ReadyTask>>,
    /// Tenants with ready work, in the order they get their next turn.
    turn: VecDeque<Arc<str>>,
    seq: u64,
}

impl ReadyQueue {
    pub fn push(&mut self, tenant: Arc<str>, run: Arc<str>, task: usize, priority: i32) {
        self.seq += 1;
        let item = ReadyTask { priority, seq: self.seq, tenant, run, task };
        self.restore(item);
    }

    /// Puts back a task that could not start yet, keeping its place in line.
    pub fn restore(&mut self, item: ReadyTask) {
        let heap = self.tenants.entry(item.tenant.clone()).or_default();
        if heap.is_empty() {
            self.turn.push_back(item.tenant.clone());
        }
        heap.push(item);
    }

    pub fn is_empty(&self) -> bool {
        self.turn.is_empty()
    }

    /// The next task: the best of the tenant whose turn it is.
    pub fn pop(&mut self) -> Option<ReadyTask> {
        let tenant = self.turn.pop_front()?;
        let heap = self.tenants.get_mut(&tenant)?;
        let item = heap.pop();
        if heap.is_empty() {
            self.tenants.remove(&tenant);
        } else {
            self.turn.push_back(tenant);
        }
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_then_fifo_within_a_tenant() {
        let mut q = ReadyQueue::default();
        let t: Arc<str> = Arc::from("t");
        let r: Arc<str> = Arc::from("r");
        q.push(t.clone(), r.clone(), 1, 0);
        q.push(t.clone(), r.clone(), 2, 5);
        q.push(t.clone(), r.clone(), 3, 0);
        q.push(t.clone(), r.clone(), 4, 5);
        let order: Vec<usize> = std::iter::from_fn(|| q.pop()).map(|t| t.task).collect();
        assert_eq!(order, vec![2, 4, 1, 3]);
    }

    #[test]
    fn tenants_take_turns() {
        let mut q = ReadyQueue::default();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let r: Arc<str> = Arc::from("r");
        for i in 0..10_000 {
            q.push(a.clone(), r.clone(), i, 0);
        }
        q.push(b.clone(), r.clone(), 99_999, 0);
        let first_two: Vec<Arc<str>> = (0..2).filter_map(|_| q.pop()).map(|t| t.tenant).collect();
        assert!(first_two.contains(&b), "b waited behind a's backlog: {first_two:?}");
    }
}
