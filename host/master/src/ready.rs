//! The queue of tasks ready to run, across runs: highest priority first,
//! then first come, first served.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadyTask {
    pub priority: i32,
    pub seq: u64,
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
    heap: BinaryHeap<ReadyTask>,
    seq: u64,
}

impl ReadyQueue {
    pub fn push(&mut self, run: Arc<str>, task: usize, priority: i32) {
        self.seq += 1;
        self.heap.push(ReadyTask { priority, seq: self.seq, run, task });
    }

    /// Puts back a task that could not start yet, keeping its place in line.
    pub fn restore(&mut self, item: ReadyTask) {
        self.heap.push(item);
    }

    pub fn pop(&mut self) -> Option<ReadyTask> {
        self.heap.pop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_then_fifo() {
        let mut q = ReadyQueue::default();
        let r: Arc<str> = Arc::from("r");
        q.push(r.clone(), 1, 0);
        q.push(r.clone(), 2, 5);
        q.push(r.clone(), 3, 0);
        q.push(r.clone(), 4, 5);
        let order: Vec<usize> = std::iter::from_fn(|| q.pop()).map(|t| t.task).collect();
        assert_eq!(order, vec![2, 4, 1, 3]);
    }
}
