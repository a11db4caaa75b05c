//! [`ArchiveStore`] on [`SqlStore`]: cold partitions as tables per
//! partition (PostgreSQL) or a database file per partition (SQLite), and
//! the moves between hot and cold (see [`crate::archive`] for why a run is
//! always in one place).

use std::collections::BTreeMap;
use std::path::PathBuf;

use async_trait::async_trait;
use sqlx::any::AnyRow;
use sqlx::{Column, Executor, Row};

use crate::archive::{ArchiveStore, CarryOver, HotCounts, PartitionRow, Period, Restored};
use crate::sql::{Arg, Backend, RUN_COLUMNS, Writer, bind_all, in_list, log_from, run_filter_sql, run_from};
use crate::{Error, EventRow, LogRow, Result, RunFilter, RunRow, RunState, SqlStore};

mod cold;
mod events;
mod sweep;

use cold::ColdConn;

const TASK_COLUMNS: &str =
    "run_id, idx, name, state, attempts, failures, lost, forced, retry_at, error, started_at, finished_at, child_run";
const ATTEMPT_COLUMNS: &str = crate::sql::ATTEMPT_COLUMNS;

/// The tables a run owns that move with it as they are: (table, columns,
/// the column naming the run). Logs and events move too, compressed
/// (`logs`, `event_packs`).
const OWNED: [(&str, &str, &str); 4] = [
    ("tasks", TASK_COLUMNS, "run_id"),
    ("task_outputs", "run_id, idx, output", "run_id"),
    ("attempts", ATTEMPT_COLUMNS, "run_id"),
    ("run_links", "tenant, upstream, downstream", "upstream"),
];

/// Hot rows of a run that go when it moves out and do not come back: its
/// deadline, its waits, its commands (all done: a run with a pending one
/// stays hot).
const DROPPED: [(&str, &str); 3] = [("run_slas", "run_id"), ("run_waits", "run_id"), ("commands", "run_id")];

/// Ids per statement.
const CHUNK: usize = 500;

/// Runs per query of a restore by range, and at most what a dependency
/// check restores at once.
pub const MAX_RESTORE: i64 = 1000;

/// A run's state that lets it move (it has ended).
fn ended_states() -> String {
    [RunState::Succeeded, RunState::Failed, RunState::Killed]
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(",")
}

fn partition_from(r: &AnyRow) -> Result<PartitionRow> {
    Ok(PartitionRow {
        id: r.try_get("id")?,
        tenant: r.try_get("tenant")?,
        period: r.try_get("period")?,
        from_time: r.try_get("from_time")?,
        to_time: r.try_get("to_time")?,
        runs: r.try_get("runs")?,
        min_logical: r.try_get("min_logical")?,
        max_logical: r.try_get("max_logical")?,
        min_created: r.try_get("min_created")?,
        max_created: r.try_get("max_created")?,
        created_at: r.try_get("created_at")?,
        logs_dropped_at: r.try_get("logs_dropped_at")?,
    })
}

/// The creation time (ms) a UUIDv7 run id carries.
fn id_time(id: &str) -> Option<i64> {
    let uuid = uuid::Uuid::parse_str(id).ok()?;
    let (secs, nanos) = uuid.get_timestamp()?.to_unix();
    Some(secs as i64 * 1000 + i64::from(nanos / 1_000_000))
}

/// `?,?,…` for `n` ids, and the ids as arguments.
fn ids_args(ids: &[String]) -> (String, Vec<Arg>) {
    (vec!["?"; ids.len()].join(","), ids.iter().map(|id| Arg::Text(id.clone())).collect())
}

/// An attempt's log lines as stored cold: JSON lines, zstd-compressed.
fn pack_logs(lines: &[LogRow]) -> Result<Vec<u8>> {
    let mut text = Vec::new();
    for line in lines {
        serde_json::to_writer(&mut text, line).map_err(|e| Error::Invalid(format!("cannot encode a log line: {e}")))?;
        text.push(b'\n');
    }
    zstd::encode_all(text.as_slice(), 3).map_err(|e| Error::Invalid(format!("cannot compress logs: {e}")))
}

fn unpack_logs(bytes: &[u8]) -> Result<Vec<LogRow>> {
    let text = zstd::decode_all(bytes).map_err(|e| Error::Invalid(format!("a cold log cannot be read: {e}")))?;
    text.split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| {
            serde_json::from_slice(line).map_err(|e| Error::Invalid(format!("a cold log line cannot be read: {e}")))
        })
        .collect()
}

/// A row as a JSON object, whatever its columns (for exports).
fn row_json(row: &AnyRow) -> serde_json::Value {
    let mut object = serde_json::Map::new();
    for (i, column) in row.columns().iter().enumerate() {
        let value = if let Ok(v) = row.try_get::<Option<i64>, _>(i) {
            v.map_or(serde_json::Value::Null, Into::into)
        } else if let Ok(v) = row.try_get::<Option<String>, _>(i) {
            v.map_or(serde_json::Value::Null, Into::into)
        } else {
            serde_json::Value::Null
        };
        object.insert(column.name().to_owned(), value);
    }
    serde_json::Value::Object(object)
}

impl SqlStore {
    /// Where a SQLite partition's file lives.
    fn partition_file(&self, part: &PartitionRow) -> Result<PathBuf> {
        let dir =
            self.archive_dir.as_ref().ok_or_else(|| Error::Invalid("this store has no archive directory".into()))?;
        Ok(dir.join(&part.tenant).join(format!("{}-p{}.db", part.period, part.id)))
    }

    async fn partition(&self, tenant: &str, period: Period, at: i64, now: i64) -> Result<PartitionRow> {
        let (name, from, to) = period.of(at);
        sqlx::query(
            "INSERT INTO archive_partitions (tenant, period, from_time, to_time, runs, created_at) \
             VALUES ($1, $2, $3, $4, 0, $5) ON CONFLICT (tenant, period) DO NOTHING",
        )
        .bind(tenant)
        .bind(&name)
        .bind(from)
        .bind(to)
        .bind(now)
        .execute(&self.write)
        .await?;
        let row = sqlx::query("SELECT * FROM archive_partitions WHERE tenant = $1 AND period = $2")
            .bind(tenant)
            .bind(&name)
            .fetch_one(&self.write)
            .await?;
        partition_from(&row)
    }

    async fn is_hot(&self, id: &str) -> Result<bool> {
        Ok(sqlx::query("SELECT 1 FROM runs WHERE id = $1").bind(id).fetch_optional(&self.read).await?.is_some())
    }

    /// Which of `ids` are hot.
    async fn hot_among(&self, ids: &[String]) -> Result<std::collections::HashSet<String>> {
        let mut hot = std::collections::HashSet::new();
        for chunk in ids.chunks(CHUNK) {
            let sql = format!("SELECT id FROM runs WHERE id IN ({})", in_list(1, chunk.len()));
            let args = chunk.iter().map(|id| Arg::Text(id.clone())).collect();
            for row in bind_all(&sql, args).fetch_all(&self.read).await? {
                hot.insert(row.try_get::<String, _>("id")?);
            }
        }
        Ok(hot)
    }

    /// The partition holding a run that is not hot, if any.
    async fn locate(&self, tenant: Option<&str>, id: &str) -> Result<Option<PartitionRow>> {
        let mut parts: Vec<PartitionRow> = self.partitions(tenant).await?.into_iter().filter(|p| p.runs > 0).collect();
        if let Some(at) = id_time(id) {
            // A run's id is drawn the moment it is made: a minute either
            // side of the partition's creation times is plenty.
            parts.retain(|p| {
                p.min_created.is_some_and(|lo| at >= lo - 60_000) && p.max_created.is_some_and(|hi| at <= hi + 60_000)
            });
        }
        for part in parts.into_iter().rev() {
            let mut cold = ColdConn::open(self, &self.read, &part, false).await?;
            let found = cold.fetch("SELECT id FROM {c}runs WHERE id = ?", vec![Arg::Text(id.into())]).await;
            cold.close().await;
            if !found?.is_empty() {
                return Ok(Some(part));
            }
        }
        Ok(None)
    }

    /// The partition of a run that is cold: reads of a run fall back to it
    /// when the hot tables have nothing.
    pub(crate) async fn cold_home(&self, run_id: &str) -> Result<Option<PartitionRow>> {
        if self.is_hot(run_id).await? {
            return Ok(None);
        }
        self.locate(None, run_id).await
    }

    /// A run's rows by `sql` (its tables written `{c}tasks`, …, with
    /// anonymous `?` parameters): from the hot tables, or, if they have
    /// none and the run is cold, from its partition. One text for both.
    pub(crate) async fn run_rows(&self, run_id: &str, sql: &str, args: Vec<Arg>) -> Result<Vec<AnyRow>> {
        let hot = crate::sql::numbered_for(self.backend, &sql.replace("{c}", ""));
        let rows = bind_all(&hot, args.clone()).fetch_all(&self.read).await?;
        if !rows.is_empty() {
            return Ok(rows);
        }
        match self.cold_home(run_id).await? {
            Some(part) => self.cold_fetch(&part, sql, args).await,
            None => Ok(rows),
        }
    }

    /// `sql` (its tables written `{c}tasks`, …) run on a partition.
    pub(crate) async fn cold_fetch(&self, part: &PartitionRow, sql: &str, args: Vec<Arg>) -> Result<Vec<AnyRow>> {
        let mut cold = ColdConn::open(self, &self.read, part, false).await?;
        let rows = cold.fetch(sql, args).await;
        cold.close().await;
        rows
    }

    /// A cold run's log lines of one attempt.
    pub(crate) async fn cold_logs(
        &self,
        part: &PartitionRow,
        run_id: &str,
        task: i64,
        attempt: i64,
    ) -> Result<Vec<LogRow>> {
        let args = vec![Arg::Text(run_id.into()), Arg::I64(task), Arg::I64(attempt)];
        let rows =
            self.cold_fetch(part, "SELECT bytes FROM {c}logs WHERE run_id = ? AND task_idx = ? AND attempt = ?", args);
        match rows.await?.first() {
            Some(row) => unpack_logs(&row.try_get::<Vec<u8>, _>("bytes")?),
            None => Ok(Vec::new()),
        }
    }

    /// Copies runs into a partition, replacing stale copies (step 1).
    async fn copy_out(&self, part: &PartitionRow, ids: &[String]) -> Result<()> {
        let mut cold = ColdConn::open(self, &self.read, part, true).await?;
        cold.begin(false).await?;
        let (list, args) = ids_args(ids);
        cold.run(&format!("DELETE FROM {{c}}runs WHERE id IN ({list})"), args.clone()).await?;
        cold.run(&format!("DELETE FROM {{c}}logs WHERE run_id IN ({list})"), args.clone()).await?;
        cold.run(
            &format!("INSERT INTO {{c}}runs ({RUN_COLUMNS}) SELECT {RUN_COLUMNS} FROM {{h}}runs WHERE id IN ({list})"),
            args.clone(),
        )
        .await?;
        for (table, cols, key) in OWNED {
            cold.run(&format!("DELETE FROM {{c}}{table} WHERE {key} IN ({list})"), args.clone()).await?;
            cold.run(
                &format!("INSERT INTO {{c}}{table} ({cols}) SELECT {cols} FROM {{h}}{table} WHERE {key} IN ({list})"),
                args.clone(),
            )
            .await?;
        }
        cold.delete_events(&list, &args).await?;
        // Logs and events, one run at a time (a run's logs are capped; a
        // batch's are not).
        for id in ids {
            cold.pack_events(id).await?;
            let rows = cold
                .fetch(
                    "SELECT * FROM {h}logs WHERE run_id = ? ORDER BY task_idx, attempt, seq",
                    vec![Arg::Text(id.clone())],
                )
                .await?;
            let mut attempts: BTreeMap<(i64, i64), Vec<LogRow>> = BTreeMap::new();
            for row in &rows {
                let line = log_from(row)?;
                attempts.entry((line.task_idx, line.attempt)).or_default().push(line);
            }
            for ((task, attempt), lines) in attempts {
                let bytes = pack_logs(&lines)?;
                cold.run(
                    "INSERT INTO {c}logs (run_id, task_idx, attempt, lines, bytes) VALUES (?, ?, ?, ?, ?)",
                    vec![
                        Arg::Text(id.clone()),
                        Arg::I64(task),
                        Arg::I64(attempt),
                        Arg::I64(lines.len() as i64),
                        Arg::Bytes(bytes),
                    ],
                )
                .await?;
            }
        }
        cold.commit().await?;
        cold.close().await;
        Ok(())
    }

    /// Deletes from the hot tables the copied runs that may still go, and
    /// counts them into the partition (step 2); the ids that went.
    async fn settle(&self, part: &PartitionRow, ids: &[String], cutoff: i64) -> Result<Vec<String>> {
        let mut conn = Writer::acquire(&self.write).await?;
        let tx = conn.get();
        tx.execute(if self.backend == Backend::Sqlite { "BEGIN IMMEDIATE" } else { "BEGIN" }).await?;
        let (list, mut args) = ids_args(ids);
        args.push(Arg::I64(cutoff));
        args.push(Arg::I64(cutoff));
        let sql = format!(
            "DELETE FROM runs WHERE id IN ({list}) AND finished_at < ? AND updated_at < ? AND state IN ({}) \
             AND NOT EXISTS (SELECT 1 FROM commands c WHERE c.run_id = runs.id AND c.done_at IS NULL) \
             RETURNING id, logical_time, created_at",
            ended_states()
        );
        let sql = crate::sql::numbered_for(self.backend, &sql);
        let gone = bind_all(&sql, args).fetch_all(&mut *tx).await?;
        let mut went = Vec::with_capacity(gone.len());
        let (mut lo_l, mut hi_l, mut lo_c, mut hi_c) = (i64::MAX, i64::MIN, i64::MAX, i64::MIN);
        for row in &gone {
            went.push(row.try_get::<String, _>("id")?);
            let logical: i64 = row.try_get("logical_time")?;
            let created: i64 = row.try_get("created_at")?;
            (lo_l, hi_l, lo_c, hi_c) = (lo_l.min(logical), hi_l.max(logical), lo_c.min(created), hi_c.max(created));
        }
        if !went.is_empty() {
            let tables =
                OWNED.iter().map(|(t, _, k)| (*t, *k)).chain([("logs", "run_id"), ("events", "run_id")]).chain(DROPPED);
            for (table, key) in tables {
                let sql = format!("DELETE FROM {table} WHERE {key} IN ({})", in_list(1, went.len()));
                let args = went.iter().map(|id| Arg::Text(id.clone())).collect();
                bind_all(&sql, args).execute(&mut *tx).await?;
            }
            sqlx::query(
                "UPDATE archive_partitions SET runs = runs + $1, \
                 min_logical = CASE WHEN min_logical IS NULL OR min_logical > $2 THEN $2 ELSE min_logical END, \
                 max_logical = CASE WHEN max_logical IS NULL OR max_logical < $3 THEN $3 ELSE max_logical END, \
                 min_created = CASE WHEN min_created IS NULL OR min_created > $4 THEN $4 ELSE min_created END, \
                 max_created = CASE WHEN max_created IS NULL OR max_created < $5 THEN $5 ELSE max_created END \
                 WHERE id = $6",
            )
            .bind(went.len() as i64)
            .bind(lo_l)
            .bind(hi_l)
            .bind(lo_c)
            .bind(hi_c)
            .bind(part.id)
            .execute(&mut *tx)
            .await?;
        }
        tx.execute("COMMIT").await?;
        conn.release();
        Ok(went)
    }

    /// Removes runs' copies from a partition (step 3 of a carry-over for
    /// the runs that stayed hot; step 2 of a restore).
    async fn uncopy(&self, part: &PartitionRow, ids: &[String]) -> Result<()> {
        let mut cold = ColdConn::open(self, &self.read, part, false).await?;
        cold.begin(false).await?;
        let (list, args) = ids_args(ids);
        cold.run(&format!("DELETE FROM {{c}}runs WHERE id IN ({list})"), args.clone()).await?;
        cold.run(&format!("DELETE FROM {{c}}logs WHERE run_id IN ({list})"), args.clone()).await?;
        for (table, _, key) in OWNED {
            cold.run(&format!("DELETE FROM {{c}}{table} WHERE {key} IN ({list})"), args.clone()).await?;
        }
        cold.delete_events(&list, &args).await?;
        cold.commit().await?;
        cold.close().await;
        Ok(())
    }

    /// Brings runs of one partition back into the hot tables; how many.
    async fn restore_from(&self, part: &PartitionRow, ids: &[String], now: i64) -> Result<usize> {
        // Their logs first, decompressed, before the writer is taken.
        let (list, args) = ids_args(ids);
        let mut lines = Vec::new();
        for row in self
            .cold_fetch(part, &format!("SELECT bytes FROM {{c}}logs WHERE run_id IN ({list})"), args.clone())
            .await?
        {
            lines.extend(unpack_logs(&row.try_get::<Vec<u8>, _>("bytes")?)?);
        }
        let mut reader = ColdConn::open(self, &self.read, part, false).await?;
        let events = reader.events_of(&list, &args).await;
        reader.close().await;
        let events = events?;
        let mut cold = ColdConn::open(self, &self.write, part, false).await?;
        cold.begin(true).await?;
        let missing = cold
            .fetch(
                &format!("SELECT id FROM {{c}}runs WHERE id IN ({list}) AND id NOT IN (SELECT id FROM {{h}}runs WHERE id IN ({list}))"),
                args.iter().chain(args.iter()).cloned().collect(),
            )
            .await?;
        let back: Vec<String> = missing.iter().map(|r| r.try_get("id")).collect::<Result<_, _>>()?;
        if !back.is_empty() {
            let (list, args) = ids_args(&back);
            cold.run(
                &format!(
                    "INSERT INTO {{h}}runs ({RUN_COLUMNS}) SELECT {RUN_COLUMNS} FROM {{c}}runs WHERE id IN ({list})"
                ),
                args.clone(),
            )
            .await?;
            let mut touch = vec![Arg::I64(now)];
            touch.extend(args.iter().cloned());
            cold.run(&format!("UPDATE {{h}}runs SET updated_at = ? WHERE id IN ({list})"), touch).await?;
            for (table, cols, key) in OWNED {
                cold.run(
                    &format!(
                        "INSERT INTO {{h}}{table} ({cols}) SELECT {cols} FROM {{c}}{table} WHERE {key} IN ({list}) \
                         ON CONFLICT DO NOTHING"
                    ),
                    args.clone(),
                )
                .await?;
            }
            let events: Vec<EventRow> =
                events.into_iter().filter(|e| e.run_id.as_ref().is_some_and(|r| back.contains(r))).collect();
            cold.insert_events("{h}events", &events).await?;
            cold.insert_logs(lines.into_iter().filter(|l| back.contains(&l.run_id))).await?;
            cold.run(
                "UPDATE {h}archive_partitions SET runs = runs - ? WHERE id = ?",
                vec![Arg::I64(back.len() as i64), Arg::I64(part.id)],
            )
            .await?;
        }
        cold.commit().await?;
        cold.close().await;
        self.uncopy(part, ids).await?;
        Ok(back.len())
    }

    /// A partition's storage goes (its index row went first).
    async fn drop_storage(&self, part: &PartitionRow) -> Result<()> {
        match self.backend {
            Backend::Postgres => {
                for table in ["runs", "tasks", "task_outputs", "attempts", "events", "event_packs", "run_links", "logs"]
                {
                    sqlx::query(&format!("DROP TABLE IF EXISTS cold_p{}_{table}", part.id))
                        .execute(&self.write)
                        .await?;
                }
            }
            Backend::Sqlite => {
                let path = self.partition_file(part)?;
                for file in [path.clone(), path.with_extension("db-journal"), path.with_extension("db-wal")] {
                    match std::fs::remove_file(&file) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => {
                            return Err(Error::Invalid(format!("cannot remove {}: {e}", file.display())));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl ArchiveStore for SqlStore {
    async fn carry_over(&self, tenant: &str, cutoff: i64, period: Period, limit: i64, now: i64) -> Result<CarryOver> {
        // Events a tenant's active webhook has not delivered yet stay hot,
        // and so does their run.
        let cursor: Option<i64> =
            sqlx::query("SELECT MIN(cursor) AS c FROM webhooks WHERE tenant = $1 AND state = 'active'")
                .bind(tenant)
                .fetch_one(&self.read)
                .await?
                .try_get("c")?;
        let rows = sqlx::query(&format!(
            "SELECT id, created_at FROM runs WHERE tenant = $1 AND finished_at < $2 AND updated_at < $2 \
             AND state IN ({}) \
             AND NOT EXISTS (SELECT 1 FROM commands c WHERE c.run_id = runs.id AND c.done_at IS NULL) \
             AND NOT EXISTS (SELECT 1 FROM events e WHERE e.run_id = runs.id AND e.seq > $3) \
             ORDER BY finished_at LIMIT $4",
            ended_states()
        ))
        .bind(tenant)
        .bind(cutoff)
        .bind(cursor.unwrap_or(i64::MAX))
        .bind(limit.clamp(1, 10_000))
        .fetch_all(&self.read)
        .await?;
        let mut outcome = CarryOver { candidates: rows.len(), ..CarryOver::default() };
        let mut by_period: BTreeMap<String, (i64, Vec<String>)> = BTreeMap::new();
        for row in &rows {
            let created: i64 = row.try_get("created_at")?;
            by_period.entry(period.of(created).0).or_insert((created, Vec::new())).1.push(row.try_get("id")?);
        }
        for (_, (at, ids)) in by_period {
            let part = self.partition(tenant, period, at, now).await?;
            for chunk in ids.chunks(CHUNK) {
                self.copy_out(&part, chunk).await?;
                let went = self.settle(&part, chunk, cutoff).await?;
                let kept: Vec<String> = chunk.iter().filter(|id| !went.contains(id)).cloned().collect();
                if !kept.is_empty() {
                    self.uncopy(&part, &kept).await?;
                }
                outcome.moved += went.len();
                outcome.kept += kept.len();
            }
        }
        Ok(outcome)
    }

    async fn restore_run(&self, id: &str, now: i64) -> Result<Restored> {
        if self.is_hot(id).await? {
            return Ok(Restored::Hot);
        }
        let Some(part) = self.locate(None, id).await? else {
            return Ok(Restored::Absent);
        };
        self.restore_from(&part, &[id.to_owned()], now).await?;
        Ok(if self.is_hot(id).await? { Restored::Restored } else { Restored::Absent })
    }

    async fn restore_range(
        &self,
        tenant: &str,
        workflow: &str,
        from: i64,
        to: i64,
        limit: i64,
        now: i64,
    ) -> Result<usize> {
        let mut restored = 0;
        for part in self.partitions(Some(tenant)).await? {
            if part.runs == 0 || !part.overlaps_logical(Some(from), Some(to)) {
                continue;
            }
            // Pages of at most MAX_RESTORE, in (logical time, id) order, until
            // the partition has no more in range or `limit` is reached.
            let mut after = (i64::MIN, String::new());
            while (restored as i64) < limit {
                let page = (limit - restored as i64).min(MAX_RESTORE);
                let rows = self
                    .cold_fetch(
                        &part,
                        "SELECT id, logical_time FROM {c}runs \
                         WHERE tenant = ? AND workflow = ? AND logical_time >= ? AND logical_time <= ? \
                         AND (logical_time > ? OR (logical_time = ? AND id > ?)) \
                         ORDER BY logical_time, id LIMIT ?",
                        vec![
                            Arg::Text(tenant.into()),
                            Arg::Text(workflow.into()),
                            Arg::I64(from),
                            Arg::I64(to),
                            Arg::I64(after.0),
                            Arg::I64(after.0),
                            Arg::Text(after.1.clone()),
                            Arg::I64(page),
                        ],
                    )
                    .await?;
                let ids: Vec<String> = rows.iter().map(|r| r.try_get("id")).collect::<Result<_, _>>()?;
                if let Some(last) = rows.last() {
                    after = (last.try_get("logical_time")?, last.try_get("id")?);
                }
                for chunk in ids.chunks(CHUNK) {
                    restored += self.restore_from(&part, chunk, now).await?;
                }
                if (ids.len() as i64) < page {
                    break;
                }
            }
        }
        Ok(restored)
    }

    async fn archived_run(&self, tenant: &str, id: &str) -> Result<Option<(RunRow, PartitionRow)>> {
        if self.is_hot(id).await? {
            return Ok(None);
        }
        let Some(part) = self.locate(Some(tenant), id).await? else {
            return Ok(None);
        };
        let rows = self
            .cold_fetch(
                &part,
                &format!("SELECT {RUN_COLUMNS} FROM {{c}}runs WHERE id = ? AND tenant = ?"),
                vec![Arg::Text(id.into()), Arg::Text(tenant.into())],
            )
            .await?;
        match rows.first() {
            Some(row) => Ok(Some((run_from(row)?, part))),
            None => Ok(None),
        }
    }

    async fn list_archived_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>> {
        let limit = filter.limit.clamp(1, 1000) as usize;
        let mut out = Vec::new();
        for part in self.partitions(Some(&filter.tenant)).await?.into_iter().rev() {
            if out.len() >= limit {
                break;
            }
            let newer_than_cursor =
                filter.before.as_ref().is_some_and(|(at, _)| part.min_created.is_none_or(|lo| lo > *at));
            if part.runs == 0 || newer_than_cursor || !part.overlaps_logical(filter.logical_from, filter.logical_to) {
                continue;
            }
            let page = RunFilter { limit: (limit - out.len()) as i64, ..filter.clone() };
            let (sql, args) = run_filter_sql(&page, "{c}runs");
            let runs: Vec<RunRow> =
                self.cold_fetch(&part, &sql, args).await?.iter().map(run_from).collect::<Result<_>>()?;
            // A stale copy of a run that is hot again is not listed twice.
            let ids: Vec<String> = runs.iter().map(|r| r.id.clone()).collect();
            let hot = self.hot_among(&ids).await?;
            out.extend(runs.into_iter().filter(|r| !hot.contains(&r.id)));
        }
        out.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
        out.truncate(limit);
        Ok(out)
    }

    async fn partitions(&self, tenant: Option<&str>) -> Result<Vec<PartitionRow>> {
        let rows = match tenant {
            Some(t) => {
                sqlx::query("SELECT * FROM archive_partitions WHERE tenant = $1 ORDER BY from_time, id")
                    .bind(t)
                    .fetch_all(&self.read)
                    .await?
            }
            None => {
                sqlx::query("SELECT * FROM archive_partitions ORDER BY from_time, id").fetch_all(&self.read).await?
            }
        };
        rows.iter().map(partition_from).collect()
    }

    async fn drop_partitions(&self, tenant: &str, before: i64) -> Result<Vec<PartitionRow>> {
        let mut dropped = Vec::new();
        for part in self.partitions(Some(tenant)).await? {
            if part.to_time > before {
                continue;
            }
            // The index row first: a partition is never listed without its
            // storage; storage left by a crash here is only unreachable,
            // and the next sweep removes it (`sweep_orphan_partitions`).
            sqlx::query("DELETE FROM archive_partitions WHERE id = $1").bind(part.id).execute(&self.write).await?;
            self.drop_storage(&part).await?;
            dropped.push(part);
        }
        Ok(dropped)
    }

    async fn drop_cold_logs(&self, tenant: &str, before: i64, now: i64) -> Result<Vec<PartitionRow>> {
        let mut done = Vec::new();
        for part in self.partitions(Some(tenant)).await? {
            if part.to_time > before || part.logs_dropped_at.is_some() || part.runs == 0 {
                continue;
            }
            let mut cold = ColdConn::open(self, &self.read, &part, false).await?;
            let deleted = cold.run("DELETE FROM {c}logs", Vec::new()).await;
            if deleted.is_ok()
                && let Some(alias) = cold.alias.clone()
            {
                // Give the space back: the file shrinks to what stays.
                let _ = cold.conn.execute(format!("VACUUM {alias}").as_str()).await;
            }
            cold.close().await;
            deleted?;
            sqlx::query("UPDATE archive_partitions SET logs_dropped_at = $1 WHERE id = $2")
                .bind(now)
                .bind(part.id)
                .execute(&self.write)
                .await?;
            done.push(PartitionRow { logs_dropped_at: Some(now), ..part });
        }
        Ok(done)
    }

    async fn export_page(&self, partition: i64, after: &str, limit: i64) -> Result<Vec<serde_json::Value>> {
        let row = sqlx::query("SELECT * FROM archive_partitions WHERE id = $1")
            .bind(partition)
            .fetch_optional(&self.read)
            .await?
            .ok_or_else(|| Error::Invalid(format!("there is no archive partition {partition}")))?;
        let part = partition_from(&row)?;
        let mut cold = ColdConn::open(self, &self.read, &part, false).await?;
        let result = async {
            let runs = cold
                .fetch(
                    "SELECT * FROM {c}runs WHERE id > ? ORDER BY id LIMIT ?",
                    vec![Arg::Text(after.into()), Arg::I64(limit.clamp(1, 1000))],
                )
                .await?;
            let mut out = Vec::with_capacity(runs.len());
            for run in &runs {
                let id: String = run.try_get("id")?;
                let mut object = serde_json::Map::new();
                object.insert("run".into(), row_json(run));
                for (table, _, key) in OWNED {
                    let rows = cold
                        .fetch(&format!("SELECT * FROM {{c}}{table} WHERE {key} = ?"), vec![Arg::Text(id.clone())])
                        .await?;
                    object.insert(table.into(), rows.iter().map(row_json).collect());
                }
                let (list, args) = ids_args(std::slice::from_ref(&id));
                let events = cold.events_of(&list, &args).await?;
                object.insert("events".into(), events.iter().map(events::event_json).collect());
                let mut logs = Vec::new();
                for row in cold
                    .fetch(
                        "SELECT bytes FROM {c}logs WHERE run_id = ? ORDER BY task_idx, attempt",
                        vec![Arg::Text(id.clone())],
                    )
                    .await?
                {
                    logs.extend(unpack_logs(&row.try_get::<Vec<u8>, _>("bytes")?)?);
                }
                object.insert("logs".into(), serde_json::to_value(logs).unwrap_or_default());
                out.push(serde_json::Value::Object(object));
            }
            Ok(out)
        }
        .await;
        cold.close().await;
        result
    }

    async fn hot_counts(&self) -> Result<HotCounts> {
        let count = |table: &'static str| async move {
            let row = sqlx::query(&format!("SELECT COUNT(*) AS n FROM {table}")).fetch_one(&self.read).await?;
            Ok::<i64, Error>(row.try_get("n")?)
        };
        Ok(HotCounts {
            runs: count("runs").await?,
            tasks: count("tasks").await?,
            attempts: count("attempts").await?,
            events: count("events").await?,
            logs: count("logs").await?,
            commands: count("commands").await?,
        })
    }

    async fn sweep_orphan_partitions(&self) -> Result<Vec<String>> {
        self.sweep_orphans().await
    }
}
