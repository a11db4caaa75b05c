//! A cold run's events, packed: one row per run in `{c}event_packs`, its
//! events as JSON lines compressed with zstd, as its logs are. Events were
//! most of a cold run's size (17 of them, as JSON rows, in the 6.4 KB of a
//! five-task run). Partitions written before packing keep theirs as rows
//! in `{c}events`; every read and move takes both.

use serde::{Deserialize, Serialize};
use sqlx::Row;

use super::ColdConn;
use crate::archive::PartitionRow;
use crate::sql::Arg;
use crate::sql_events::event_from;
use crate::{Error, EventRow, Result, SqlStore};

/// An event as packed (the hot table's columns).
#[derive(Serialize, Deserialize)]
struct Packed {
    seq: i64,
    tenant: String,
    at: i64,
    kind: String,
    workflow: Option<String>,
    run_id: Option<String>,
    task: Option<String>,
    data: String,
}

impl From<&EventRow> for Packed {
    fn from(e: &EventRow) -> Packed {
        Packed {
            seq: e.seq,
            tenant: e.tenant.clone(),
            at: e.at,
            kind: e.kind.clone(),
            workflow: e.workflow.clone(),
            run_id: e.run_id.clone(),
            task: e.task.clone(),
            data: e.data.clone(),
        }
    }
}

impl From<Packed> for EventRow {
    fn from(p: Packed) -> EventRow {
        EventRow {
            seq: p.seq,
            tenant: p.tenant,
            at: p.at,
            kind: p.kind,
            workflow: p.workflow,
            run_id: p.run_id,
            task: p.task,
            data: p.data,
        }
    }
}

fn pack(events: &[EventRow]) -> Result<Vec<u8>> {
    let mut text = Vec::new();
    for event in events {
        serde_json::to_writer(&mut text, &Packed::from(event))
            .map_err(|e| Error::Invalid(format!("cannot encode an event: {e}")))?;
        text.push(b'\n');
    }
    zstd::encode_all(text.as_slice(), 3).map_err(|e| Error::Invalid(format!("cannot compress events: {e}")))
}

fn unpack(bytes: &[u8]) -> Result<Vec<EventRow>> {
    let text = zstd::decode_all(bytes).map_err(|e| Error::Invalid(format!("cold events cannot be read: {e}")))?;
    text.split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| {
            serde_json::from_slice::<Packed>(line)
                .map(EventRow::from)
                .map_err(|e| Error::Invalid(format!("a cold event cannot be read: {e}")))
        })
        .collect()
}

/// An event as an export writes it: the hot table's columns.
pub(super) fn event_json(event: &EventRow) -> serde_json::Value {
    serde_json::to_value(Packed::from(event)).unwrap_or_default()
}

impl ColdConn {
    /// Whether the partition has `table` (one made before it existed may not).
    async fn has_table(&mut self, table: &str) -> Result<bool> {
        let rows = if self.alias.is_some() {
            self.fetch(
                "SELECT name FROM {c}sqlite_master WHERE type = 'table' AND name = ?",
                vec![Arg::Text(table.into())],
            )
            .await?
        } else {
            let name = format!("{}{table}", self.cold);
            self.fetch(
                "SELECT tablename::text AS name FROM pg_tables WHERE schemaname = current_schema() AND tablename = ?",
                vec![Arg::Text(name)],
            )
            .await?
        };
        Ok(!rows.is_empty())
    }

    /// Packs the hot events of run `id` into the partition.
    pub(super) async fn pack_events(&mut self, id: &str) -> Result<()> {
        let rows =
            self.fetch("SELECT * FROM {h}events WHERE run_id = ? ORDER BY seq", vec![Arg::Text(id.into())]).await?;
        if rows.is_empty() {
            return Ok(());
        }
        let events: Vec<EventRow> = rows.iter().map(event_from).collect::<Result<_>>()?;
        let bytes = pack(&events)?;
        self.run(
            "INSERT INTO {c}event_packs (run_id, events, bytes) VALUES (?, ?, ?)",
            vec![Arg::Text(id.into()), Arg::I64(events.len() as i64), Arg::Bytes(bytes)],
        )
        .await?;
        Ok(())
    }

    /// The cold events of the runs in `list` (`?,…` for `args`), packed
    /// or as rows, by sequence number.
    pub(super) async fn events_of(&mut self, list: &str, args: &[Arg]) -> Result<Vec<EventRow>> {
        let rows = self
            .fetch(&format!("SELECT * FROM {{c}}events WHERE run_id IN ({list}) ORDER BY seq"), args.to_vec())
            .await?;
        let mut events: Vec<EventRow> = rows.iter().map(event_from).collect::<Result<_>>()?;
        if self.has_table("event_packs").await? {
            let packs = self
                .fetch(&format!("SELECT bytes FROM {{c}}event_packs WHERE run_id IN ({list})"), args.to_vec())
                .await?;
            for row in &packs {
                events.extend(unpack(&row.try_get::<Vec<u8>, _>("bytes")?)?);
            }
        }
        events.sort_by_key(|e| e.seq);
        events.dedup_by_key(|e| e.seq);
        Ok(events)
    }

    /// Removes the cold events of the runs in `list`.
    pub(super) async fn delete_events(&mut self, list: &str, args: &[Arg]) -> Result<()> {
        self.run(&format!("DELETE FROM {{c}}events WHERE run_id IN ({list})"), args.to_vec()).await?;
        if self.has_table("event_packs").await? {
            self.run(&format!("DELETE FROM {{c}}event_packs WHERE run_id IN ({list})"), args.to_vec()).await?;
        }
        Ok(())
    }

    /// Writes `events` into `table` (`{h}events`: a restore), keeping
    /// any there, a multi-row insert per chunk.
    pub(super) async fn insert_events(&mut self, table: &str, events: &[EventRow]) -> Result<()> {
        const COLUMNS: usize = 8;
        for chunk in events.chunks(64) {
            let args = chunk
                .iter()
                .flat_map(|e| {
                    [
                        Arg::I64(e.seq),
                        Arg::Text(e.tenant.clone()),
                        Arg::I64(e.at),
                        Arg::Text(e.kind.clone()),
                        Arg::OptText(e.workflow.clone()),
                        Arg::OptText(e.run_id.clone()),
                        Arg::OptText(e.task.clone()),
                        Arg::Text(e.data.clone()),
                    ]
                })
                .collect();
            let values = crate::sql_script::placeholders(chunk.len(), COLUMNS);
            self.run(
                &format!(
                    "INSERT INTO {table} (seq, tenant, at, kind, workflow, run_id, task, data) VALUES {values} \
                     ON CONFLICT DO NOTHING"
                ),
                args,
            )
            .await?;
        }
        Ok(())
    }
}

impl SqlStore {
    /// A cold run's events after `after_seq` (at most `limit`), if they
    /// are `tenant`'s.
    pub(crate) async fn cold_events(
        &self,
        part: &PartitionRow,
        tenant: &str,
        run_id: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<EventRow>> {
        let mut cold = ColdConn::open(self, &self.read, part, false).await?;
        let events = cold.events_of("?", &[Arg::Text(run_id.into())]).await;
        cold.close().await;
        Ok(events?
            .into_iter()
            .filter(|e| e.tenant == tenant && e.seq > after_seq)
            .take(limit.max(0) as usize)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A partition written before events were packed keeps them as rows,
    /// with no `event_packs` table: reads, exports and restores find them.
    #[tokio::test]
    async fn events_kept_as_rows_by_an_older_partition_are_read_and_restored() {
        use crate::Store;
        use crate::archive::{ArchiveStore, Period, Restored};
        use crate::conformance_archive::{NOV, OCT, finished};

        let dir = tempfile::tempdir().unwrap();
        let store = SqlStore::open_sqlite(&dir.path().join("dagr.db"), crate::Synchronous::Normal).await.unwrap();
        finished(&store, "t", "old-a", OCT).await.unwrap();
        let hot = store.events("t", Some("old-a"), 0, 10).await.unwrap();
        assert!(!hot.is_empty());
        let now = NOV;
        assert_eq!(store.carry_over("t", now, Period::Month, 10, now).await.unwrap().moved, 1);
        assert_eq!(store.events("t", Some("old-a"), 0, 10).await.unwrap(), hot, "packed, read back");
        // Make it look like an older partition: rows, no packs.
        let part = store.partitions(Some("t")).await.unwrap().remove(0);
        let mut cold = ColdConn::open(&store, &store.write, &part, false).await.unwrap();
        cold.insert_events("{c}events", &hot).await.unwrap();
        cold.run("DROP TABLE {c}event_packs", vec![]).await.unwrap();
        assert!(!cold.has_table("event_packs").await.unwrap());
        cold.close().await;
        assert_eq!(store.events("t", Some("old-a"), 0, 10).await.unwrap(), hot, "rows, read");
        assert!(store.events("other", Some("old-a"), 0, 10).await.unwrap().is_empty(), "not another tenant's");
        let export = store.export_page(part.id, "", 10).await.unwrap();
        assert_eq!(export[0]["events"].as_array().map(Vec::len), Some(hot.len()), "exported");
        assert_eq!(store.restore_run("old-a", now).await.unwrap(), Restored::Restored);
        assert_eq!(store.events("t", Some("old-a"), 0, 10).await.unwrap(), hot, "restored into the hot table");
    }

    #[test]
    fn packed_events_read_back_whole() {
        let event = |seq: i64, task: Option<&str>| EventRow {
            seq,
            tenant: "acme".into(),
            at: 1_000 + seq,
            kind: "task.succeeded".into(),
            workflow: Some("nightly".into()),
            run_id: Some("r1".into()),
            task: task.map(Into::into),
            data: r#"{"attempt":1,"note":"line\nbreak"}"#.into(),
        };
        let events = vec![event(1, None), event(2, Some("load")), event(3, Some("a \"quoted\" name"))];
        let bytes = pack(&events).unwrap();
        assert_eq!(unpack(&bytes).unwrap(), events);
        assert!(unpack(b"not zstd").is_err());
        assert_eq!(event_json(&events[1])["task"], "load");
    }
}
