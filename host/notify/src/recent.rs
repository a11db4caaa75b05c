//! The newest part of the event log, read once for every webhook
//! subscription of this process.
//!
//! Each subscription used to read its events from the store on its own: ten
//! subscriptions following a burst read every event ten times (a quarter
//! of a busy server's CPU went there). The window holds the newest events
//! of every tenant, in order, with no gap: every event numbered in
//! (`from`, `to`] is in it, because it is filled by reading the whole log
//! after `to` (the store's reads see a prefix of the log; see
//! `dagr_store::Store::event_page`). A subscription whose cursor is in the
//! window is answered from it; one further behind reads the store, as
//! before. The window keeps at most [`WINDOW`] events.
//!
//! The window's events are shared, not copied, with every subscription
//! that delivers them, and so is each one's webhook envelope, serialized
//! once ([`Recorded::envelope`]): ten subscriptions used to copy every
//! event's row ten times and serialize it ten times.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use dagr_store::{EventRow, EventScope, Result, Store};
use tokio::sync::Mutex;

/// Most events the window keeps.
pub(crate) const WINDOW: usize = 20_000;
/// Events read from the store at once while filling it.
const FILL: i64 = 1_000;

pub(crate) struct Recent {
    store: Arc<dyn Store>,
    capacity: usize,
    window: Mutex<Window>,
}

/// An event, with its webhook envelope once some subscription needed it.
#[derive(Debug)]
pub(crate) struct Recorded {
    pub(crate) row: EventRow,
    envelope: OnceLock<String>,
}

impl Recorded {
    pub(crate) fn new(row: EventRow) -> Arc<Recorded> {
        Arc::new(Recorded { row, envelope: OnceLock::new() })
    }

    /// The event as a request carries it alone (see `deliver::envelope`).
    pub(crate) fn envelope(&self) -> &str {
        self.envelope.get_or_init(|| crate::deliver::envelope(&self.row))
    }
}

#[derive(Default)]
struct Window {
    /// Every event numbered in (`from`, `to`] is in `events`, in order;
    /// `None`: not started.
    span: Option<(i64, i64)>,
    events: VecDeque<Arc<Recorded>>,
}

/// Whether `scope` covers `e` (as the store's reads by scope do).
fn covers(scope: &EventScope, e: &EventRow) -> bool {
    scope.tenant.as_ref().is_none_or(|t| *t == e.tenant)
        && scope.workflow.as_ref().is_none_or(|w| e.workflow.as_ref() == Some(w))
        && scope.run_id.as_ref().is_none_or(|r| e.run_id.as_ref() == Some(r))
}

impl Window {
    /// Up to `limit` events of `scope` after `after`; `None` if `after` is
    /// before the window.
    fn page(&self, scope: &EventScope, after: i64, limit: usize) -> Option<Vec<Arc<Recorded>>> {
        if !self.holds(after) {
            return None;
        }
        let start = self.events.partition_point(|e| e.row.seq <= after);
        Some(self.events.range(start..).filter(|e| covers(scope, &e.row)).take(limit).cloned().collect())
    }

    /// Whether every event after `after` that the window could have is
    /// in it.
    fn holds(&self, after: i64) -> bool {
        self.span.is_some_and(|(from, _)| after >= from)
    }

    /// Appends what the log has after the window (read as one scope-less
    /// page), dropping the oldest past `capacity`.
    fn extend(&mut self, read: Vec<EventRow>, capacity: usize) {
        let Some((from, to)) = self.span.as_mut() else { return };
        for e in read {
            *to = e.seq;
            self.events.push_back(Recorded::new(e));
        }
        while self.events.len() > capacity {
            if let Some(e) = self.events.pop_front() {
                *from = e.row.seq;
            }
        }
    }
}

impl Recent {
    pub(crate) fn new(store: Arc<dyn Store>, capacity: usize) -> Recent {
        Recent { store, capacity, window: Mutex::new(Window::default()) }
    }

    /// Up to `limit` events of `scope` after `after`, in order, as
    /// [`Store::event_page`] would read them.
    pub(crate) async fn page(&self, scope: &EventScope, after: i64, limit: i64) -> Result<Vec<Arc<Recorded>>> {
        let want = limit.max(1) as usize;
        let mut window = self.window.lock().await;
        if window.span.is_none() {
            // It starts at the head of the log: readers behind it read the
            // store until they reach it.
            let head = self.store.last_event_seq().await?;
            window.span = Some((head, head));
        }
        if let Some(page) = window.page(scope, after, want)
            && page.len() == want
        {
            return Ok(page);
        }
        if !window.holds(after) {
            drop(window);
            return self.read_store(scope, after, limit).await;
        }
        // Short of a full page: what is new in the log, first. Further
        // behind the head than the window holds, it starts again there.
        let mut filled = 0;
        loop {
            let to = window.span.map_or(after, |(_, to)| to);
            let read = self.store.event_page(&EventScope::default(), to, FILL).await?;
            let full = read.len() as i64 == FILL;
            filled += read.len();
            window.extend(read, self.capacity);
            if !full {
                break;
            }
            if filled >= self.capacity {
                let head = self.store.last_event_seq().await?;
                *window = Window { span: Some((head, head)), events: VecDeque::new() };
                break;
            }
        }
        match window.page(scope, after, want) {
            Some(page) => Ok(page),
            // Filling pushed `after` out of the window.
            None => {
                drop(window);
                self.read_store(scope, after, limit).await
            }
        }
    }

    async fn read_store(&self, scope: &EventScope, after: i64, limit: i64) -> Result<Vec<Arc<Recorded>>> {
        Ok(self.store.event_page(scope, after, limit).await?.into_iter().map(Recorded::new).collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use dagr_store::{NewEvent, WriteBatch};

    async fn write(store: &dyn Store, tenant: &str, workflow: &str, n: usize) {
        let events = (0..n)
            .map(|i| NewEvent {
                tenant: tenant.into(),
                at: i as i64,
                kind: "task.state".into(),
                workflow: Some(workflow.into()),
                run_id: Some(format!("r{i}")),
                task: None,
                data: "{}".into(),
            })
            .collect();
        store.commit(WriteBatch { events, ..Default::default() }).await.unwrap();
    }

    /// Every answer is the store's own, whatever the cursor: in the
    /// window, before it, and after it was filled past its capacity.
    #[tokio::test]
    async fn pages_from_the_window_are_the_store_s() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(
            dagr_store::SqlStore::open_sqlite(&dir.path().join("dagr.db"), dagr_store::Synchronous::Normal)
                .await
                .unwrap(),
        );
        write(&*store, "a", "w1", 30).await;
        let start = store.last_event_seq().await.unwrap();
        let recent = Recent::new(store.clone(), 50);
        let scopes = [
            EventScope { tenant: Some("a".into()), workflow: None, run_id: None },
            EventScope { tenant: Some("b".into()), workflow: Some("w2".into()), run_id: None },
            EventScope::default(),
        ];
        let same = |scope: &EventScope, after: i64, limit: i64| {
            let (recent, store, scope) = (&recent, store.clone(), scope.clone());
            async move {
                let got: Vec<EventRow> =
                    recent.page(&scope, after, limit).await.unwrap().iter().map(|e| e.row.clone()).collect();
                let want = store.event_page(&scope, after, limit).await.unwrap();
                assert_eq!(got, want, "scope {scope:?} after {after} limit {limit}");
                got
            }
        };
        assert!(same(&scopes[0], start, 10).await.is_empty(), "nothing new yet");
        write(&*store, "a", "w1", 20).await;
        write(&*store, "b", "w2", 20).await;
        write(&*store, "b", "w3", 5).await;
        for scope in &scopes {
            for after in [start, start + 7, start + 19, start + 44, start - 3, 0] {
                for limit in [1, 10, 100] {
                    same(scope, after, limit).await;
                }
            }
        }
        // Past its capacity the window drops its oldest; those come from the store.
        write(&*store, "b", "w2", 70).await;
        for scope in &scopes {
            for after in [start, start + 40, start + 100, start + 114] {
                same(scope, after, 30).await;
            }
        }
        assert!(recent.window.lock().await.events.len() <= 50);
    }
}
