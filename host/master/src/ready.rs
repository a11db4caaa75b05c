//! The queue of tasks ready to run, across runs and tenants.
//!
//! Fair across tenants: each tenant with ready work has its own queue, and
//! dispatch takes from the tenants in turn (round robin), so a tenant that
//! queued 10,000 tasks delays another tenant's single task by at most one
//! dispatch per other busy tenant.
//!
//! Within a tenant: the workflow's grade first (0–3, Buffalo's grades),
//! with aging — every [`AGING_MS`] a task waits counts as one grade more, so
//! a low grade is never starved — then the task's priority, then first
//! come, first served.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use crate::hash::Map;
use std::sync::Arc;

/// How long a ready task waits to gain one grade.
pub(crate) const AGING_MS: i64 = 10_000;

/// Grades there are (0 to 3).
pub(crate) const GRADES: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadyTask {
    pub priority: i32,
    pub seq: u64,
    pub tenant: Arc<str>,
    pub run: Arc<str>,
    pub task: usize,
    pub grade: u8,
    /// When it became ready (ms).
    pub since: i64,
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

/// One tenant's ready tasks, a heap per grade.
#[derive(Debug, Default)]
struct Graded {
    heaps: [BinaryHeap<ReadyTask>; GRADES],
}

impl Graded {
    fn is_empty(&self) -> bool {
        self.heaps.iter().all(BinaryHeap::is_empty)
    }

    /// The best task: the grade whose head, aged, scores highest.
    fn pop(&mut self, now: i64) -> Option<ReadyTask> {
        let best = (0..GRADES)
            .filter_map(|g| self.heaps[g].peek().map(|t| (g, t)))
            .max_by_key(|(g, t)| (*g as i64 * AGING_MS + (now - t.since).max(0), *g))
            .map(|(g, _)| g)?;
        self.heaps[best].pop()
    }
}

#[derive(Debug, Default)]
pub(crate) struct ReadyQueue {
    tenants: Map<Arc<str>, Graded>,
    /// Tenants with ready work, in the order they get their next turn.
    turn: VecDeque<Arc<str>>,
    seq: u64,
}

impl ReadyQueue {
    pub fn push(&mut self, tenant: Arc<str>, run: Arc<str>, task: usize, priority: i32, grade: u8, now: i64) {
        self.seq += 1;
        let grade = grade.min(GRADES as u8 - 1);
        let item = ReadyTask { priority, seq: self.seq, tenant, run, task, grade, since: now };
        self.restore(item);
    }

    /// Puts back a task that could not start yet, keeping its place in line.
    pub fn restore(&mut self, item: ReadyTask) {
        let graded = self.tenants.entry(item.tenant.clone()).or_default();
        if graded.is_empty() {
            self.turn.push_back(item.tenant.clone());
        }
        graded.heaps[item.grade as usize].push(item);
    }

    pub fn is_empty(&self) -> bool {
        self.turn.is_empty()
    }

    /// Tasks waiting in line.
    /// The ready items of one run (for a person debugging it).
    pub fn count_of(&self, run: &str) -> usize {
        self.tenants.values().flat_map(|g| g.heaps.iter()).flat_map(BinaryHeap::iter).filter(|t| *t.run == *run).count()
    }

    pub fn len(&self) -> usize {
        self.tenants.values().flat_map(|g| g.heaps.iter()).map(BinaryHeap::len).sum()
    }

    /// The next task: the best of the tenant whose turn it is.
    pub fn pop(&mut self, now: i64) -> Option<ReadyTask> {
        let tenant = self.turn.pop_front()?;
        let graded = self.tenants.get_mut(&tenant)?;
        let item = graded.pop(now);
        if graded.is_empty() {
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
        q.push(t.clone(), r.clone(), 1, 0, 0, 0);
        q.push(t.clone(), r.clone(), 2, 5, 0, 0);
        q.push(t.clone(), r.clone(), 3, 0, 0, 0);
        q.push(t.clone(), r.clone(), 4, 5, 0, 0);
        let order: Vec<usize> = std::iter::from_fn(|| q.pop(0)).map(|t| t.task).collect();
        assert_eq!(order, vec![2, 4, 1, 3]);
    }

    #[test]
    fn tenants_take_turns() {
        let mut q = ReadyQueue::default();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let r: Arc<str> = Arc::from("r");
        for i in 0..10_000 {
            q.push(a.clone(), r.clone(), i, 0, 0, 0);
        }
        q.push(b.clone(), r.clone(), 99_999, 0, 0, 0);
        let first_two: Vec<Arc<str>> = (0..2).filter_map(|_| q.pop(0)).map(|t| t.tenant).collect();
        assert!(first_two.contains(&b), "b waited behind a's backlog: {first_two:?}");
    }

    #[test]
    fn higher_grades_go_first_and_low_ones_age_up() {
        let mut q = ReadyQueue::default();
        let t: Arc<str> = Arc::from("t");
        let r: Arc<str> = Arc::from("r");
        // A grade-0 task ready since t=0, high-priority, and grade-3 tasks.
        q.push(t.clone(), r.clone(), 0, 100, 0, 0);
        q.push(t.clone(), r.clone(), 1, 0, 3, 0);
        q.push(t.clone(), r.clone(), 2, 0, 3, 0);
        assert_eq!(q.pop(0).unwrap().grade, 3, "grade beats priority");
        assert_eq!(q.pop(1_000).unwrap().grade, 3);
        // Grade-3 tasks keep arriving; after 3 × AGING_MS of waiting the
        // grade-0 task counts as grade 3, and older, it goes first.
        q.push(t.clone(), r.clone(), 3, 0, 3, 2 * AGING_MS);
        assert_eq!(q.pop(2 * AGING_MS).unwrap().grade, 3, "not aged enough yet");
        q.push(t.clone(), r.clone(), 4, 0, 3, 3 * AGING_MS + 1);
        let next = q.pop(3 * AGING_MS + 1).unwrap();
        assert_eq!((next.grade, next.task), (0, 0), "aged up: not starved");
    }
}
