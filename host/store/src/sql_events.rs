//! The event log's reads on [`SqlStore`]: one run's events, and the
//! tenant's (or the installation's) stream.
//!
//! The stream is read by sequence number, and a reader that resumes after
//! number N must never find an event numbered below N appear later. On
//! SQLite one writer commits at a time, so numbers and commits agree. On
//! PostgreSQL several masters commit at once and a sequence hands numbers
//! out before commit; the batch that writes events therefore takes
//! [`EVENT_APPEND_LOCK`] (a transaction-level advisory lock) right before
//! its insert, which it holds until COMMIT: numbers are drawn in commit
//! order, and what a reader sees is always a prefix of the log.

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::{EventRow, EventScope, Result, SqlStore};

/// The advisory lock key that orders event appends on PostgreSQL
/// (ASCII "dagr-evt").
pub(crate) const EVENT_APPEND_LOCK: i64 = 0x6461_6772_2d65_7674;

pub(crate) fn event_from(r: &AnyRow) -> Result<EventRow> {
    Ok(EventRow {
        seq: r.try_get("seq")?,
        tenant: r.try_get("tenant")?,
        at: r.try_get("at")?,
        kind: r.try_get("kind")?,
        workflow: r.try_get("workflow")?,
        run_id: r.try_get("run_id")?,
        task: r.try_get("task")?,
        data: r.try_get("data")?,
    })
}

impl SqlStore {
    pub(crate) async fn read_event_page(
        &self,
        scope: &EventScope,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<EventRow>> {
        let mut sql = String::from("SELECT * FROM events WHERE seq > $1");
        let mut binds: Vec<&str> = Vec::new();
        for (column, value) in [("tenant", &scope.tenant), ("workflow", &scope.workflow), ("run_id", &scope.run_id)] {
            if let Some(value) = value {
                binds.push(value);
                sql.push_str(&format!(" AND {column} = ${}", binds.len() + 1));
            }
        }
        sql.push_str(&format!(" ORDER BY seq LIMIT ${}", binds.len() + 2));
        let mut query = sqlx::query(&sql).bind(after_seq);
        for value in binds {
            query = query.bind(value);
        }
        let rows = query.bind(limit).fetch_all(&self.read).await?;
        rows.iter().map(event_from).collect()
    }

    pub(crate) async fn read_last_event_seq(&self) -> Result<i64> {
        let row = sqlx::query("SELECT COALESCE(MAX(seq), 0) AS seq FROM events").fetch_one(&self.read).await?;
        Ok(row.try_get("seq")?)
    }
}
