//! A connection to one cold partition (its tables or its attached file).

use sqlx::any::AnyRow;
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyPool, Executor};

use crate::archive::PartitionRow;
use crate::sql::{Arg, Backend, bind_all};
use crate::{Error, LogRow, Result, SqlStore};

/// A connection that sees one cold partition: on SQLite, its file attached
/// as `cold_p<id>` (detached before the connection goes back to the pool;
/// closed instead if that could not happen); on PostgreSQL, its tables by
/// their prefix `cold_p<id>_`.
pub(super) struct ColdConn {
    pub(super) conn: PoolConnection<Any>,
    pub(super) alias: Option<String>,
    /// `{c}` in statements: the partition's tables.
    pub(super) cold: String,
    /// `{h}` in statements: the hot tables.
    hot: &'static str,
    clean: bool,
}

impl ColdConn {
    pub(super) async fn open(store: &SqlStore, pool: &AnyPool, part: &PartitionRow, create: bool) -> Result<ColdConn> {
        let conn = pool.acquire().await?;
        let mut cold = match store.backend {
            Backend::Postgres => {
                ColdConn { conn, alias: None, cold: format!("cold_p{}_", part.id), hot: "", clean: false }
            }
            Backend::Sqlite => {
                let path = store.partition_file(part)?;
                if !create && !path.exists() {
                    return Err(Error::Invalid(format!(
                        "the archive file {} of partition {} ({}) is missing",
                        path.display(),
                        part.period,
                        part.tenant
                    )));
                }
                if let Some(dir) = path.parent().filter(|_| create) {
                    std::fs::create_dir_all(dir).map_err(|e| {
                        Error::Invalid(format!("cannot create the archive directory {}: {e}", dir.display()))
                    })?;
                }
                let alias = format!("cold_p{}", part.id);
                let mut cold = ColdConn {
                    conn,
                    alias: Some(alias.clone()),
                    cold: format!("{alias}."),
                    hot: "main.",
                    clean: false,
                };
                sqlx::query(&format!("ATTACH DATABASE $1 AS {alias}"))
                    .bind(path.display().to_string())
                    .execute(&mut *cold.conn)
                    .await?;
                cold
            }
        };
        if create {
            for ddl in cold.ddl(store.backend) {
                cold.conn.execute(ddl.as_str()).await?;
            }
        }
        Ok(cold)
    }

    /// The partition's tables, made if missing.
    fn ddl(&self, backend: Backend) -> Vec<String> {
        let c = &self.cold;
        let blob = if backend == Backend::Postgres { "BYTEA" } else { "BLOB" };
        let index = |name: &str, table: &str, cols: &str| match &self.alias {
            Some(alias) => format!("CREATE INDEX IF NOT EXISTS {alias}.{table}_{name} ON {table} ({cols})"),
            None => format!("CREATE INDEX IF NOT EXISTS {c}{table}_{name} ON {c}{table} ({cols})"),
        };
        vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {c}runs (id TEXT NOT NULL PRIMARY KEY, tenant TEXT NOT NULL, \
                 workflow TEXT NOT NULL, version BIGINT, kind TEXT NOT NULL, state TEXT NOT NULL, \
                 logical_time BIGINT NOT NULL, params TEXT NOT NULL, spec TEXT, backfill_id TEXT, \
                 slot BIGINT NOT NULL, owner TEXT, epoch BIGINT NOT NULL, created_at BIGINT NOT NULL, \
                 started_at BIGINT, finished_at BIGINT, updated_at BIGINT NOT NULL, parent_run TEXT, \
                 parent_task BIGINT)"
            ),
            index("by_created", "runs", "tenant, created_at, id"),
            index("by_cycle", "runs", "tenant, workflow, logical_time"),
            format!(
                "CREATE TABLE IF NOT EXISTS {c}tasks (run_id TEXT NOT NULL, idx BIGINT NOT NULL, name TEXT NOT NULL, \
                 state TEXT NOT NULL, attempts BIGINT NOT NULL, failures BIGINT NOT NULL, lost BIGINT NOT NULL, \
                 forced BIGINT NOT NULL, retry_at BIGINT, error TEXT, started_at BIGINT, finished_at BIGINT, \
                 child_run TEXT, PRIMARY KEY (run_id, idx))"
            ),
            index("by_name", "tasks", "run_id, name"),
            format!(
                "CREATE TABLE IF NOT EXISTS {c}task_outputs (run_id TEXT NOT NULL, idx BIGINT NOT NULL, \
                 output TEXT NOT NULL, PRIMARY KEY (run_id, idx))"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {c}attempts (run_id TEXT NOT NULL, task_idx BIGINT NOT NULL, \
                 number BIGINT NOT NULL, task TEXT NOT NULL, state TEXT NOT NULL, failure_kind TEXT, message TEXT, \
                 charged BIGINT NOT NULL, worker TEXT NOT NULL, epoch BIGINT NOT NULL, started_at BIGINT NOT NULL, \
                 finished_at BIGINT, PRIMARY KEY (run_id, task_idx, number))"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {c}events (seq BIGINT NOT NULL PRIMARY KEY, tenant TEXT NOT NULL, \
                 at BIGINT NOT NULL, kind TEXT NOT NULL, workflow TEXT, run_id TEXT, task TEXT, data TEXT NOT NULL)"
            ),
            index("by_run", "events", "run_id, seq"),
            // Events since packing: one row per run, JSON lines, zstd
            // (`events` keeps what partitions held before).
            format!(
                "CREATE TABLE IF NOT EXISTS {c}event_packs (run_id TEXT NOT NULL PRIMARY KEY, \
                 events BIGINT NOT NULL, bytes {blob} NOT NULL)"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {c}run_links (tenant TEXT NOT NULL, upstream TEXT NOT NULL, \
                 downstream TEXT NOT NULL, PRIMARY KEY (upstream, downstream))"
            ),
            // One row per attempt: its lines as JSON lines, zstd-compressed.
            format!(
                "CREATE TABLE IF NOT EXISTS {c}logs (run_id TEXT NOT NULL, task_idx BIGINT NOT NULL, \
                 attempt BIGINT NOT NULL, lines BIGINT NOT NULL, bytes {blob} NOT NULL, \
                 PRIMARY KEY (run_id, task_idx, attempt))"
            ),
        ]
    }

    /// The database: a partition attached under an alias is SQLite's.
    fn backend(&self) -> Backend {
        if self.alias.is_some() { Backend::Sqlite } else { Backend::Postgres }
    }

    /// `sql` with `{c}` and `{h}` naming the cold and hot tables.
    fn sql(&self, sql: &str) -> String {
        sql.replace("{c}", &self.cold).replace("{h}", self.hot)
    }

    pub(super) async fn run(&mut self, sql: &str, args: Vec<Arg>) -> Result<u64> {
        let sql = crate::sql::numbered_for(self.backend(), &self.sql(sql));
        Ok(bind_all(&sql, args).execute(&mut *self.conn).await?.rows_affected())
    }

    /// Writes log lines back into the hot `logs` table, many rows per
    /// statement (a run's logs can be thousands of lines).
    pub(super) async fn insert_logs(&mut self, lines: impl IntoIterator<Item = LogRow>) -> Result<()> {
        let backend = self.backend();
        crate::sql::insert_logs(&mut self.conn, backend, self.hot, lines).await
    }

    pub(super) async fn fetch(&mut self, sql: &str, args: Vec<Arg>) -> Result<Vec<AnyRow>> {
        let sql = crate::sql::numbered_for(self.backend(), &self.sql(sql));
        Ok(bind_all(&sql, args).fetch_all(&mut *self.conn).await?)
    }

    /// Begins a transaction. On SQLite an immediate one locks every
    /// attached file, the main one too: only the writer's connection may
    /// (a restore); a copy into the partition begins deferred and so
    /// locks only the partition's file when it first writes there.
    pub(super) async fn begin(&mut self, immediate: bool) -> Result<()> {
        let begin = if immediate && self.backend() == Backend::Sqlite { "BEGIN IMMEDIATE" } else { "BEGIN" };
        self.conn.execute(begin).await?;
        Ok(())
    }

    pub(super) async fn commit(&mut self) -> Result<()> {
        self.conn.execute("COMMIT").await?;
        Ok(())
    }

    /// Detaches the partition and gives the connection back.
    pub(super) async fn close(mut self) {
        match &self.alias {
            Some(alias) => {
                let detach = format!("DETACH DATABASE {alias}");
                self.clean = self.conn.execute(detach.as_str()).await.is_ok();
            }
            None => self.clean = true,
        }
    }
}

impl Drop for ColdConn {
    fn drop(&mut self) {
        if !self.clean {
            self.conn.close_on_drop();
        }
    }
}
