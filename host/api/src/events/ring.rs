//! The newest events of the log, framed once and kept in memory for every
//! event stream of this process: a stream copies the frames it wants from
//! where it stands, under a read lock, without a queue of its own; one
//! that stands before the oldest event kept reads the store instead.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use dagr_store::EventRow;

use super::Filter;

/// Most events one read looks at (a stream whose filter wants few of
/// them does not hold the lock over the whole ring at once).
const SCAN: usize = 4096;

/// An event with its SSE frame (`id`, `event` and `data` lines), made
/// once and shared by every stream. The row keeps what filters look at;
/// its data is in the frame.
pub(crate) struct Shared {
    pub(crate) row: EventRow,
    pub(crate) frame: Bytes,
}

impl Shared {
    pub(crate) fn new(mut row: EventRow) -> Shared {
        let json = serde_json::to_string(&dagr_notify::event_view(&row)).unwrap_or_default();
        let frame = sse_frame(row.seq, &row.kind, &json);
        row.data = String::new();
        row.task = None;
        Shared { row, frame }
    }

    /// About what it holds in memory.
    fn size(&self) -> usize {
        let row = &self.row;
        self.frame.len()
            + row.tenant.len()
            + row.kind.len()
            + row.workflow.as_ref().map_or(0, String::len)
            + row.run_id.as_ref().map_or(0, String::len)
            + std::mem::size_of::<Shared>()
    }
}

/// One Server-Sent Event. Compact JSON has no line breaks, and kinds are
/// the engine's own words; a kind with a line break in it would break the
/// framing, so any is replaced.
pub(crate) fn sse_frame(seq: i64, kind: &str, json: &str) -> Bytes {
    let mut frame = String::with_capacity(json.len() + kind.len() + 32);
    frame.push_str("id: ");
    frame.push_str(&seq.to_string());
    frame.push_str("\nevent: ");
    frame.extend(kind.chars().map(|c| if c == '\n' || c == '\r' { ' ' } else { c }));
    frame.push_str("\ndata: ");
    frame.push_str(json);
    frame.push_str("\n\n");
    Bytes::from(frame)
}

/// The events after `floor`, in the log's order, at most about `limit`
/// bytes: the oldest go first.
pub(crate) struct Ring {
    events: VecDeque<Shared>,
    bytes: usize,
    limit: usize,
    /// Every event of the log after this number is in `events` (the ones
    /// up to it were dropped, or came before the ring began).
    floor: i64,
}

/// What [`Ring::read`] found after a stream's cursor.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// Events were looked at (and those wanted copied); the cursor moved.
    Looked,
    /// Nothing after the cursor yet.
    Nothing,
    /// Events after the cursor were dropped: read the store up to here.
    Behind(i64),
}

impl Ring {
    pub(crate) fn new(limit: usize, floor: i64) -> Ring {
        Ring { events: VecDeque::new(), bytes: 0, limit, floor }
    }

    /// Appends the next events of the log, dropping the oldest beyond the
    /// limit (the newest is always kept).
    pub(crate) fn push(&mut self, events: impl IntoIterator<Item = Shared>) {
        for event in events {
            self.bytes += event.size();
            self.events.push_back(event);
        }
        while self.bytes > self.limit && self.events.len() > 1 {
            let Some(old) = self.events.pop_front() else { break };
            self.bytes -= old.size();
            self.floor = old.row.seq;
        }
    }

    /// Every event after this number is in the ring.
    #[cfg(test)]
    pub(crate) fn floor(&self) -> i64 {
        self.floor
    }

    /// Drops every event: nobody follows. The log up to `head` is passed.
    pub(crate) fn clear(&mut self, head: i64) {
        self.events.clear();
        self.bytes = 0;
        self.floor = head;
    }

    /// Copies into `out` the frames after `cursor` that `filter` wants,
    /// until `out` holds `max` bytes or more, and moves `cursor` past every
    /// event looked at; each copied event's time goes to `lags`.
    pub(crate) fn read(
        &self,
        cursor: &mut i64,
        filter: &Filter,
        max: usize,
        out: &mut BytesMut,
        lags: &mut Lags,
    ) -> Read {
        if *cursor < self.floor {
            return Read::Behind(self.floor);
        }
        let start = self.events.partition_point(|e| e.row.seq <= *cursor);
        if start == self.events.len() {
            return Read::Nothing;
        }
        // The events wanted first, then one allocation of their size.
        let mut picked = Vec::new();
        let mut bytes = out.len();
        for (i, event) in self.events.range(start..).enumerate().take(SCAN) {
            *cursor = event.row.seq;
            if filter.wants(&event.row) {
                picked.push(start + i);
                bytes += event.frame.len();
                if bytes >= max {
                    break;
                }
            }
        }
        out.reserve(bytes - out.len());
        for event in picked.into_iter().filter_map(|i| self.events.get(i)) {
            out.extend_from_slice(&event.frame);
            lags.push(event.row.at);
        }
        Read::Looked
    }
}

/// The times of the events in a write, counted by run of equal times (a
/// commit's events share theirs), so that a chunk of a thousand events
/// makes a few observations, not a thousand.
#[derive(Default)]
pub(crate) struct Lags(Vec<(i64, u64)>);

impl Lags {
    pub(crate) fn push(&mut self, at: i64) {
        match self.0.last_mut() {
            Some((last, n)) if *last == at => *n += 1,
            _ => self.0.push((at, 1)),
        }
    }

    /// Observes every time as a lag until `now_ms`, and forgets them.
    pub(crate) fn observe(&mut self, histogram: &dagr_metrics::Histogram, now_ms: i64) {
        for (at, n) in self.0.drain(..) {
            histogram.observe_many((now_ms - at).max(0) as f64 / 1000.0, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tenant;
    use crate::events::StreamQuery;

    fn event(seq: i64, tenant: &str, at: i64) -> Shared {
        Shared::new(EventRow {
            seq,
            tenant: tenant.into(),
            at,
            kind: "task.state".into(),
            workflow: Some("wf".into()),
            run_id: Some("r1".into()),
            task: Some("t".into()),
            data: r#"{"to":"running"}"#.into(),
        })
    }

    fn filter(tenant: &str) -> Filter {
        Filter::from_query(&Tenant(tenant.into()), &StreamQuery::default()).unwrap()
    }

    fn ids(out: &[u8]) -> Vec<i64> {
        std::str::from_utf8(out)
            .unwrap()
            .lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .map(|n| n.parse().unwrap())
            .collect()
    }

    #[test]
    fn a_stream_reads_what_it_wants_after_its_cursor_and_passes_the_rest() {
        let mut ring = Ring::new(1 << 20, 0);
        ring.push((1..=6).map(|seq| event(seq, if seq % 2 == 0 { "acme" } else { "other" }, 100)));
        let (mut out, mut lags, mut cursor) = (BytesMut::new(), Lags::default(), 1);
        assert_eq!(ring.read(&mut cursor, &filter("acme"), 1 << 20, &mut out, &mut lags), Read::Looked);
        assert_eq!((ids(&out), cursor), (vec![2, 4, 6], 6), "its tenant's only, every event passed");
        assert_eq!(lags.0, vec![(100, 3)], "one run of equal times");
        out.clear();
        assert_eq!(ring.read(&mut cursor, &filter("acme"), 1 << 20, &mut out, &mut lags), Read::Nothing);
        assert!(out.is_empty());
        // A write is cut once it holds enough; the next read goes on.
        let mut cursor = 0;
        ring.read(&mut cursor, &filter("other"), 1, &mut out, &mut lags);
        assert_eq!((ids(&out), cursor), (vec![1], 1));
        ring.read(&mut cursor, &filter("other"), 1, &mut out, &mut lags);
        assert_eq!((ids(&out), cursor), (vec![1, 3], 3));
    }

    #[test]
    fn the_oldest_go_past_the_limit_and_a_stream_behind_them_reads_the_store() {
        let one = event(1, "acme", 0).size();
        let mut ring = Ring::new(3 * one + one / 2, 10);
        ring.push((11..=15).map(|seq| event(seq, "acme", 0)));
        assert_eq!(ring.events.len(), 3);
        assert_eq!(ring.floor, 12, "11 and 12 were dropped");
        let (mut out, mut lags) = (BytesMut::new(), Lags::default());
        let mut cursor = 11;
        assert_eq!(ring.read(&mut cursor, &filter("acme"), 1 << 20, &mut out, &mut lags), Read::Behind(12));
        assert_eq!(cursor, 11, "nothing passed");
        let mut cursor = 12;
        ring.read(&mut cursor, &filter("acme"), 1 << 20, &mut out, &mut lags);
        assert_eq!(ids(&out), vec![13, 14, 15]);
        // Far past the limit in one push, the newest stays.
        let mut small = Ring::new(1, 0);
        small.push((1..=3).map(|seq| event(seq, "acme", 0)));
        assert_eq!((small.events.len(), small.floor), (1, 2));
        small.clear(9);
        let mut cursor = 3;
        assert_eq!(small.read(&mut cursor, &filter("acme"), 1 << 20, &mut out, &mut lags), Read::Behind(9));
    }

    #[test]
    fn a_frame_is_one_server_sent_event_and_the_row_keeps_no_data() {
        // Compact JSON writes a line break in a string as `\n`.
        let frame = sse_frame(42, "task.state", r#"{"a":"x\ny"}"#);
        assert_eq!(
            &frame[..],
            br#"id: 42
event: task.state
data: {"a":"x\ny"}

"#
        );
        let odd = sse_frame(1, "run\nstate", "{}");
        assert_eq!(&odd[..], b"id: 1\nevent: run state\ndata: {}\n\n");
        let shared = event(7, "acme", 0);
        assert!(std::str::from_utf8(&shared.frame).unwrap().contains(r#""data":{"to":"running"}"#));
        assert_eq!((shared.row.data.as_str(), shared.row.task.as_deref()), ("", None));
    }

    #[test]
    fn lags_are_counted_by_run_of_equal_times() {
        let mut lags = Lags::default();
        for at in [5, 5, 5, 7, 5] {
            lags.push(at);
        }
        assert_eq!(lags.0, vec![(5, 3), (7, 1), (5, 1)]);
        let histogram = dagr_metrics::Histogram::new(&[0.001, 1.0]);
        lags.observe(&histogram, 10);
        assert_eq!(histogram.count(), 5);
        assert!(lags.0.is_empty());
    }
}
