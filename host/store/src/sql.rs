//! [`SqlStore`]: the [`Store`] on SQLite or PostgreSQL, through sqlx's `Any`
//! driver, so that one set of queries serves both. Queries use `$N`
//! placeholders, which both backends accept; the schemas differ only where
//! the dialects do (auto-increment keys).
//!
//! The statements' plumbing is in `sql_script`, the rows' mapping in
//! `sql_rows`, an engine step's commit in `sql_commit`; the other parts of
//! the store's API in `sql_*` beside them.

use std::path::Path;
use std::str::FromStr;
use std::sync::Once;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, Executor, Row};

use crate::*;

pub(crate) use crate::sql_rows::*;
pub(crate) use crate::sql_script::*;

/// SQLite's `synchronous` setting for the embedded store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Synchronous {
    /// WAL with `synchronous=NORMAL`: a commit survives a crash of dagr
    /// (kill -9); the last commits may be lost if the machine loses power.
    #[default]
    Normal,
    /// `synchronous=FULL`: every commit is fsynced; survives power loss.
    Full,
}

impl FromStr for Synchronous {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "normal" => Ok(Synchronous::Normal),
            "full" => Ok(Synchronous::Full),
            other => Err(format!("unknown synchronous mode `{other}` (normal or full)")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Sqlite,
    Postgres,
}

/// The SQL store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SqlStore {
    /// SQLite has one writer; all writes go through this pool of one.
    pub(crate) write: AnyPool,
    pub(crate) read: AnyPool,
    pub(crate) backend: Backend,
    /// Where a SQLite store keeps its cold partitions' files (`archive/`
    /// beside the database); `None` on PostgreSQL.
    pub(crate) archive_dir: Option<std::path::PathBuf>,
    /// While a clone of the store lives, its WAL is checkpointed in the
    /// background (SQLite only; see `sql_wal`).
    pub(crate) _checkpoints: Option<std::sync::Arc<()>>,
}

static DRIVERS: Once = Once::new();

/// How long a PostgreSQL session may sit idle inside a transaction when
/// the opener does not say (a cluster's default lease TTL).
pub const DEFAULT_IDLE_IN_TRANSACTION: Duration = Duration::from_secs(10);

/// Most bind parameters in one IN list (SQLite allows 32766).
pub(crate) const MAX_PARAMS: usize = 30_000;

/// Most bind parameters in one multi-row statement.
pub(crate) const MAX_STATEMENT_PARAMS: usize = 4096;

/// Most bind parameters of a statement that a [`Script`] sends on SQLite
/// together with others. The text they make together changes from commit
/// to commit and is parsed again each time, which costs about as much per
/// row as writing it; a bigger statement goes alone and stays prepared,
/// for a round trip to SQLite's thread. At 256, a burst of releases spent
/// a tenth of the writer's time parsing; 64 cut the cascade's CPU by a
/// tenth with no change to a fan-out's or a chain's (docs/BENCHMARKS.md).
pub(crate) const SMALL_STATEMENT_PARAMS: usize = 64;

impl SqlStore {
    /// Opens (creating if needed) the SQLite database at `path` and migrates it.
    pub async fn open_sqlite(path: &Path, sync: Synchronous) -> Result<SqlStore> {
        Self::open_sqlite_with(path, sync, crate::sql_wal::Checkpoints::default()).await
    }

    /// [`SqlStore::open_sqlite`], its WAL checkpointed as `checkpoints` says.
    pub(crate) async fn open_sqlite_with(
        path: &Path,
        sync: Synchronous,
        checkpoints: crate::sql_wal::Checkpoints,
    ) -> Result<SqlStore> {
        DRIVERS.call_once(sqlx::any::install_default_drivers);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::Invalid(format!("cannot create the data directory {}: {e}", dir.display())))?;
        }
        let url = format!("sqlite://{}?mode=rwc", path.display());
        // An 8 MiB page cache per connection holds the pages a run's steps
        // touch. A bigger one costs more than it saves: SQLite walks the
        // cache's whole hash table when a commit trims it and whenever a
        // reader finds the WAL changed, and the table grows with the cache
        // (64 MiB made that walk 1.5 % of the fan-out's CPU; 8 MiB, 0.8 %).
        // The WAL file keeps the size of its busiest moment unless told to
        // shrink when a checkpoint empties it: in the million-run soak it
        // stayed at 162 MB after a burst. No commit checkpoints the WAL
        // itself (`wal_autocheckpoint=0`): see `sql_wal`.
        let pragmas = format!(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous={}; PRAGMA busy_timeout=10000; PRAGMA foreign_keys=OFF; \
             PRAGMA cache_size=-8192; PRAGMA temp_store=MEMORY; PRAGMA journal_size_limit=67108864; \
             PRAGMA wal_autocheckpoint=0;",
            match sync {
                Synchronous::Normal => "NORMAL",
                Synchronous::Full => "FULL",
            }
        );
        let options = quiet(&url)?;
        let connect = |max: u32| {
            let pragmas = pragmas.clone();
            AnyPoolOptions::new()
                .max_connections(max)
                .min_connections(1)
                .acquire_timeout(Duration::from_secs(30))
                // A file on this machine: no ping before each use (on
                // SQLite that is one more round trip to its thread).
                .test_before_acquire(false)
                .after_connect(move |conn, _| {
                    let pragmas = pragmas.clone();
                    Box::pin(async move {
                        conn.execute(pragmas.as_str()).await?;
                        Ok(())
                    })
                })
                .connect_with(options.clone())
        };
        let write = connect(1).await?;
        crate::migrations::SQLITE.migrator().await?.run(&write).await?;
        let read = connect(4).await?;
        let archive_dir = Some(path.parent().unwrap_or(Path::new(".")).join("archive"));
        let alive = std::sync::Arc::new(());
        checkpoints.start(read.clone(), write.clone(), std::sync::Arc::downgrade(&alive));
        Ok(SqlStore { write, read, backend: Backend::Sqlite, archive_dir, _checkpoints: Some(alive) })
    }

    /// Connects to PostgreSQL and migrates the database. Every session
    /// is ended by the server once it sits idle inside a transaction for
    /// `idle_in_transaction` (PostgreSQL's
    /// `idle_in_transaction_session_timeout`), which rolls the transaction
    /// back and frees its locks. Commits of several masters wait on one
    /// another's locks (the event log's append order, an upstream's wake
    /// lock, rows `FOR UPDATE`): without this, a master frozen mid
    /// transaction (SIGSTOP, a paused VM, a long swap) would stall every
    /// other master's commits for as long as it stays frozen. A node sets
    /// it to its lease's TTL: a master frozen that long has lost its lease,
    /// and the writes of that transaction would be refused anyway.
    pub async fn open_postgres(url: &str, max_connections: u32, idle_in_transaction: Duration) -> Result<SqlStore> {
        DRIVERS.call_once(sqlx::any::install_default_drivers);
        let idle_ms = idle_in_transaction.as_millis().clamp(1, i32::MAX as u128);
        let pool = AnyPoolOptions::new()
            .max_connections(max_connections.max(2))
            .acquire_timeout(Duration::from_secs(30))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    conn.execute(format!("SET idle_in_transaction_session_timeout = {idle_ms}").as_str()).await?;
                    Ok(())
                })
            })
            .connect_with(quiet(url)?)
            .await?;
        crate::migrations::POSTGRES.migrator().await?.run(&pool).await?;
        Ok(SqlStore {
            write: pool.clone(),
            read: pool,
            backend: Backend::Postgres,
            archive_dir: None,
            _checkpoints: None,
        })
    }

    /// Opens a store from a URL: `sqlite://PATH` or `postgres://…`, a
    /// PostgreSQL one with [`DEFAULT_IDLE_IN_TRANSACTION`].
    pub async fn open(url: &str, sync: Synchronous) -> Result<SqlStore> {
        Self::open_with(url, sync, DEFAULT_IDLE_IN_TRANSACTION).await
    }

    /// Opens a store from a URL; on PostgreSQL, sessions idle inside a
    /// transaction for `idle_in_transaction` are ended (see
    /// [`SqlStore::open_postgres`]).
    pub async fn open_with(url: &str, sync: Synchronous, idle_in_transaction: Duration) -> Result<SqlStore> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            let path = path.split('?').next().unwrap_or(path);
            Self::open_sqlite(Path::new(path), sync).await
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Self::open_postgres(url, 16, idle_in_transaction).await
        } else {
            Err(Error::Invalid(format!("unsupported database URL `{url}` (sqlite://PATH or postgres://…)")))
        }
    }

    pub fn is_postgres(&self) -> bool {
        self.backend == Backend::Postgres
    }

    /// Closes the pools (waits for connections to be returned).
    pub async fn close(&self) {
        self.write.close().await;
        self.read.close().await;
    }
}

/// Connect options that do not log statements: dagr's batches are big, and
/// one slow one would print thousands of placeholders.
fn quiet(url: &str) -> Result<AnyConnectOptions> {
    use sqlx::ConnectOptions;
    Ok(AnyConnectOptions::from_str(url)?
        .log_statements(log::LevelFilter::Off)
        .log_slow_statements(log::LevelFilter::Off, Duration::from_secs(60)))
}

#[async_trait]
impl Store for SqlStore {
    async fn apply_workflow(&self, tenant: &str, name: &str, hash: &str, spec: &str, now: i64) -> Result<Applied> {
        let mut tx = self.write.begin().await?;
        let lock = if self.backend == Backend::Postgres { " FOR UPDATE" } else { "" };
        let current = sqlx::query(&format!(
            "SELECT latest_version, deleted FROM workflows WHERE tenant = $1 AND name = $2{lock}"
        ))
        .bind(tenant)
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
        let version = match current {
            None => {
                let inserted = sqlx::query(
                    "INSERT INTO workflows (tenant, name, latest_version, deleted, created_at, updated_at, schedule_since) \
                     VALUES ($1, $2, 1, 0, $3, $3, $3) ON CONFLICT DO NOTHING",
                )
                .bind(tenant)
                .bind(name)
                .bind(now)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if inserted == 0 {
                    return Err(Error::Invalid(format!("workflow `{name}` was applied concurrently; try again")));
                }
                1
            }
            Some(row) => {
                let latest: i64 = row.try_get("latest_version")?;
                let deleted = row.try_get::<i64, _>("deleted")? != 0;
                let latest_hash: Option<String> =
                    sqlx::query("SELECT hash FROM workflow_versions WHERE tenant = $1 AND name = $2 AND version = $3")
                        .bind(tenant)
                        .bind(name)
                        .bind(latest)
                        .fetch_optional(&mut *tx)
                        .await?
                        .map(|r| r.try_get("hash"))
                        .transpose()?;
                if !deleted && latest_hash.as_deref() == Some(hash) {
                    return Ok(Applied { version: latest, created: false });
                }
                sqlx::query(
                    "UPDATE workflows SET latest_version = $3, deleted = 0, updated_at = $4 WHERE tenant = $1 AND name = $2",
                )
                .bind(tenant)
                .bind(name)
                .bind(latest + 1)
                .bind(now)
                .execute(&mut *tx)
                .await?;
                latest + 1
            }
        };
        sqlx::query(
            "INSERT INTO workflow_versions (tenant, name, version, hash, spec, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(tenant)
        .bind(name)
        .bind(version)
        .bind(hash)
        .bind(spec)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Applied { version, created: true })
    }

    async fn get_workflow(&self, tenant: &str, name: &str) -> Result<Option<WorkflowRow>> {
        let row = sqlx::query("SELECT * FROM workflows WHERE tenant = $1 AND name = $2")
            .bind(tenant)
            .bind(name)
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(workflow_from).transpose()
    }

    async fn get_version(&self, tenant: &str, name: &str, version: i64) -> Result<Option<VersionRow>> {
        let row = sqlx::query("SELECT * FROM workflow_versions WHERE tenant = $1 AND name = $2 AND version = $3")
            .bind(tenant)
            .bind(name)
            .bind(version)
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(version_from).transpose()
    }

    async fn list_workflows(&self, tenant: &str) -> Result<Vec<WorkflowRow>> {
        let rows = sqlx::query("SELECT * FROM workflows WHERE tenant = $1 AND deleted = 0 ORDER BY name")
            .bind(tenant)
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(workflow_from).collect()
    }

    async fn list_versions(&self, tenant: &str, name: &str) -> Result<Vec<VersionRow>> {
        let rows = sqlx::query("SELECT * FROM workflow_versions WHERE tenant = $1 AND name = $2 ORDER BY version")
            .bind(tenant)
            .bind(name)
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(version_from).collect()
    }

    async fn delete_workflow(&self, tenant: &str, name: &str, now: i64) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE workflows SET deleted = 1, updated_at = $3 WHERE tenant = $1 AND name = $2 AND deleted = 0",
        )
        .bind(tenant)
        .bind(name)
        .bind(now)
        .execute(&self.write)
        .await?
        .rows_affected();
        Ok(n > 0)
    }

    async fn live_workflows(&self) -> Result<Vec<(WorkflowRow, VersionRow)>> {
        let rows = sqlx::query(
            "SELECT w.tenant, w.name, w.latest_version, w.deleted, w.created_at, w.updated_at, w.schedule_cursor, \
             w.schedule_since, w.schedule_paused, v.version, v.hash, v.spec, v.created_at AS v_created_at \
             FROM workflows w JOIN workflow_versions v \
             ON v.tenant = w.tenant AND v.name = w.name AND v.version = w.latest_version WHERE w.deleted = 0",
        )
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|row| {
                let w = workflow_from(row)?;
                let v = VersionRow {
                    tenant: w.tenant.clone(),
                    name: w.name.clone(),
                    version: row.try_get("version")?,
                    hash: row.try_get("hash")?,
                    spec: row.try_get("spec")?,
                    created_at: row.try_get("v_created_at")?,
                };
                Ok((w, v))
            })
            .collect()
    }

    async fn create_runs(&self, runs: Vec<NewRun>, command: Option<EncodedCommand>) -> Result<Vec<Created>> {
        self.create_runs_and_audit(runs, command, None).await
    }

    async fn create_runs_audited(
        &self,
        runs: Vec<NewRun>,
        command: Option<EncodedCommand>,
        audit: tenancy::NewAudit,
    ) -> Result<Vec<Created>> {
        self.create_runs_and_audit(runs, command, Some(audit)).await
    }

    async fn get_run(&self, id: &str) -> Result<Option<RunRow>> {
        let row = sqlx::query(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(run_from).transpose()
    }

    async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>> {
        let (sql, args) = run_filter_sql(filter, "runs");
        let sql = numbered_for(self.backend, &sql);
        let rows = bind_all(&sql, args).fetch_all(&self.read).await?;
        rows.iter().map(run_from).collect()
    }

    async fn active_runs(&self) -> Result<Vec<RunRow>> {
        let rows = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE state IN ('queued', 'running', 'paused') ORDER BY created_at, id"
        ))
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(run_from).collect()
    }

    async fn run_tasks(&self, run_id: &str) -> Result<Vec<TaskRow>> {
        let sql = "SELECT * FROM {c}tasks WHERE run_id = ? ORDER BY idx";
        let rows = self.run_rows(run_id, sql, vec![Arg::Text(run_id.into())]).await?;
        rows.iter().map(task_from).collect()
    }

    async fn tasks_of_runs(&self, run_ids: &[String]) -> Result<Vec<Vec<TaskRow>>> {
        let place: std::collections::HashMap<&str, usize> =
            run_ids.iter().enumerate().map(|(i, id)| (id.as_str(), i)).collect();
        let mut out = vec![Vec::new(); run_ids.len()];
        for chunk in run_ids.chunks(PADDED_IN_LIST) {
            let mut args = Vec::new();
            let list = padded_in_list(1, chunk.iter().map(|id| Arg::Text(id.clone())), &mut args);
            let sql = format!("SELECT * FROM tasks WHERE run_id IN ({list}) ORDER BY run_id, idx");
            for row in bind_all(&sql, args).fetch_all(&self.read).await? {
                let task = task_from(&row)?;
                if let Some(&i) = place.get(task.run_id.as_str()) {
                    out[i].push(task);
                }
            }
        }
        Ok(out)
    }

    async fn outputs(&self, run_id: &str, idxs: &[i64]) -> Result<Vec<(i64, String)>> {
        let mut out = Vec::new();
        for chunk in idxs.chunks(MAX_PARAMS - 1) {
            let sql = format!(
                "SELECT idx, output FROM task_outputs WHERE run_id = $1 AND idx IN ({})",
                in_list(2, chunk.len())
            );
            let mut args = vec![Arg::Text(run_id.to_owned())];
            args.extend(chunk.iter().map(|&i| Arg::I64(i)));
            for row in bind_all(&sql, args).fetch_all(&self.read).await? {
                out.push((row.try_get("idx")?, row.try_get("output")?));
            }
        }
        if out.is_empty()
            && !idxs.is_empty()
            && let Some(part) = self.cold_home(run_id).await?
        {
            for chunk in idxs.chunks(MAX_PARAMS - 1) {
                let sql = format!(
                    "SELECT idx, output FROM {{c}}task_outputs WHERE run_id = ? AND idx IN ({})",
                    vec!["?"; chunk.len()].join(",")
                );
                let mut args = vec![Arg::Text(run_id.to_owned())];
                args.extend(chunk.iter().map(|&i| Arg::I64(i)));
                for row in self.cold_fetch(&part, &sql, args).await? {
                    out.push((row.try_get("idx")?, row.try_get("output")?));
                }
            }
        }
        Ok(out)
    }

    async fn attempts(&self, run_id: &str, task_idx: Option<i64>) -> Result<Vec<AttemptRow>> {
        let mut args = vec![Arg::Text(run_id.into())];
        args.extend(task_idx.map(Arg::I64));
        let sql = match task_idx {
            Some(_) => {
                format!("SELECT {ATTEMPT_COLUMNS} FROM {{c}}attempts WHERE run_id = ? AND task_idx = ? ORDER BY number")
            }
            None => format!("SELECT {ATTEMPT_COLUMNS} FROM {{c}}attempts WHERE run_id = ? ORDER BY task_idx, number"),
        };
        let rows = self.run_rows(run_id, &sql, args).await?;
        rows.iter().map(attempt_from).collect()
    }

    async fn active_runs_in_slots(&self, slots: &[i64]) -> Result<Vec<RunRow>> {
        let mut out = Vec::new();
        for chunk in slots.chunks(MAX_PARAMS) {
            let sql = format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE state IN ('queued', 'running', 'paused') AND slot IN ({}) \
                 ORDER BY created_at, id",
                in_list(1, chunk.len())
            );
            let args = chunk.iter().map(|&s| Arg::I64(s)).collect();
            for row in bind_all(&sql, args).fetch_all(&self.read).await? {
                out.push(run_from(&row)?);
            }
        }
        Ok(out)
    }

    async fn claim_run(&self, run_id: &str, owner: &str, now: i64) -> Result<Option<RunRow>> {
        let row = sqlx::query(&format!(
            "UPDATE runs SET owner = $2, epoch = epoch + 1, updated_at = $3 WHERE id = $1 RETURNING {RUN_COLUMNS}"
        ))
        .bind(run_id)
        .bind(owner)
        .bind(now)
        .fetch_optional(&self.write)
        .await?;
        row.as_ref().map(run_from).transpose()
    }

    async fn claim_runs(&self, run_ids: &[String], owner: &str, now: i64) -> Result<Vec<RunRow>> {
        let mut out = Vec::with_capacity(run_ids.len());
        for chunk in run_ids.chunks(MAX_STATEMENT_PARAMS / 2) {
            let mut args = vec![Arg::Text(owner.to_owned()), Arg::I64(now)];
            let list = padded_in_list(3, chunk.iter().map(|id| Arg::Text(id.clone())), &mut args);
            let sql = format!(
                "UPDATE runs SET owner = $1, epoch = epoch + 1, updated_at = $2 WHERE id IN ({list}) RETURNING {RUN_COLUMNS}"
            );
            for row in bind_all(&sql, args).fetch_all(&self.write).await? {
                out.push(run_from(&row)?);
            }
        }
        Ok(out)
    }

    async fn acquire_singleton(&self, name: &str, holder: &str, token: i64, now: i64) -> Result<bool> {
        let mut tx = self.write.begin().await?;
        sqlx::query(
            "INSERT INTO singletons (name, holder, token, updated_at) VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO UPDATE \
             SET holder = excluded.holder, token = excluded.token, updated_at = excluded.updated_at \
             WHERE singletons.token <= excluded.token",
        )
        .bind(name)
        .bind(holder)
        .bind(token)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let current: i64 = sqlx::query("SELECT token FROM singletons WHERE name = $1")
            .bind(name)
            .fetch_one(&mut *tx)
            .await?
            .try_get("token")?;
        tx.commit().await?;
        Ok(current == token)
    }

    async fn running_attempts_of(&self, run_ids: &[String]) -> Result<Vec<AttemptRow>> {
        let mut out = Vec::new();
        for chunk in run_ids.chunks(PADDED_IN_LIST) {
            let mut args = Vec::new();
            let list = padded_in_list(1, chunk.iter().map(|id| Arg::Text(id.clone())), &mut args);
            let sql =
                format!("SELECT {ATTEMPT_COLUMNS}, lease FROM attempts WHERE state = 'running' AND run_id IN ({list})");
            for row in bind_all(&sql, args).fetch_all(&self.read).await? {
                out.push(AttemptRow { lease: row.try_get("lease")?, ..attempt_from(&row)? });
            }
        }
        Ok(out)
    }

    async fn report_master_load(&self, master: &str, load: i64, now: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO master_loads (id, load, weight, updated_at) VALUES ($1, $2, 1000, $3) \
             ON CONFLICT (id) DO UPDATE SET load = excluded.load, updated_at = excluded.updated_at",
        )
        .bind(master)
        .bind(load)
        .bind(now)
        .execute(&self.write)
        .await?;
        Ok(())
    }

    async fn master_loads(&self) -> Result<Vec<(String, i64, i64, i64)>> {
        let rows = sqlx::query("SELECT id, load, weight, updated_at FROM master_loads ORDER BY id")
            .fetch_all(&self.read)
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, r.try_get("load")?, r.try_get("weight")?, r.try_get("updated_at")?)))
            .collect()
    }

    async fn set_master_weights(&self, weights: &[(String, i64)]) -> Result<()> {
        let mut tx = self.write.begin().await?;
        for (id, weight) in weights {
            sqlx::query(
                "INSERT INTO master_loads (id, load, weight, updated_at) VALUES ($1, 0, $2, 0) \
                 ON CONFLICT (id) DO UPDATE SET weight = excluded.weight",
            )
            .bind(id)
            .bind(weight)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn run_epoch(&self, run_id: &str) -> Result<Option<i64>> {
        let row = sqlx::query("SELECT epoch FROM runs WHERE id = $1").bind(run_id).fetch_optional(&self.read).await?;
        row.map(|r| r.try_get("epoch")).transpose().map_err(Error::from)
    }

    async fn commit(&self, batch: WriteBatch) -> Result<Committed> {
        self.commit_batch(batch).await
    }

    async fn insert_command(&self, command: NewCommand) -> Result<i64> {
        let row = sqlx::query(
            "INSERT INTO commands (tenant, run_id, slot, kind, payload, created_at) VALUES ($1, $2, $3, $4, $5, $6) \
             RETURNING id",
        )
        .bind(command.tenant)
        .bind(command.run_id)
        .bind(command.slot)
        .bind(command.command.kind)
        .bind(command.command.payload)
        .bind(command.created_at)
        .fetch_one(&self.write)
        .await?;
        Ok(row.try_get("id")?)
    }

    async fn pending_commands(&self, after_id: i64, limit: i64) -> Result<Vec<CommandRow>> {
        let rows = sqlx::query("SELECT * FROM commands WHERE done_at IS NULL AND id > $1 ORDER BY id LIMIT $2")
            .bind(after_id)
            .bind(limit)
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(command_from).collect()
    }

    async fn get_command(&self, id: i64) -> Result<Option<CommandRow>> {
        let row = sqlx::query("SELECT * FROM commands WHERE id = $1").bind(id).fetch_optional(&self.read).await?;
        row.as_ref().map(command_from).transpose()
    }

    async fn append_logs(&self, lines: Vec<LogRow>) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut tx = self.write.begin().await?;
        insert_logs(&mut tx, self.backend, "", lines).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn logs(&self, run_id: &str, task_idx: i64, attempt: i64, after_seq: i64, limit: i64) -> Result<Vec<LogRow>> {
        let rows = sqlx::query(
            "SELECT * FROM logs WHERE run_id = $1 AND task_idx = $2 AND attempt = $3 AND seq > $4 ORDER BY seq LIMIT $5",
        )
        .bind(run_id)
        .bind(task_idx)
        .bind(attempt)
        .bind(after_seq)
        .bind(limit)
        .fetch_all(&self.read)
        .await?;
        if rows.is_empty()
            && let Some(part) = self.cold_home(run_id).await?
        {
            let lines = self.cold_logs(&part, run_id, task_idx, attempt).await?;
            return Ok(lines.into_iter().filter(|l| l.seq > after_seq).take(limit.max(0) as usize).collect());
        }
        rows.iter().map(log_from).collect()
    }

    async fn events(&self, tenant: &str, run_id: Option<&str>, after_seq: i64, limit: i64) -> Result<Vec<EventRow>> {
        let scope = EventScope { tenant: Some(tenant.to_owned()), workflow: None, run_id: run_id.map(str::to_owned) };
        let events = self.read_event_page(&scope, after_seq, limit).await?;
        if events.is_empty()
            && let Some(run_id) = run_id
            && let Some(part) = self.cold_home(run_id).await?
        {
            return self.cold_events(&part, tenant, run_id, after_seq, limit).await;
        }
        Ok(events)
    }

    async fn event_page(&self, scope: &EventScope, after_seq: i64, limit: i64) -> Result<Vec<EventRow>> {
        self.read_event_page(scope, after_seq, limit).await
    }

    async fn last_event_seq(&self) -> Result<i64> {
        self.read_last_event_seq().await
    }

    async fn insert_backfill(&self, b: BackfillRow) -> Result<()> {
        sqlx::query(
            "INSERT INTO backfills (id, tenant, workflow, from_time, to_time, parallel, total, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(b.id)
        .bind(b.tenant)
        .bind(b.workflow)
        .bind(b.from_time)
        .bind(b.to_time)
        .bind(b.parallel)
        .bind(b.total)
        .bind(b.created_at)
        .execute(&self.write)
        .await?;
        Ok(())
    }

    async fn get_backfill(&self, id: &str) -> Result<Option<BackfillRow>> {
        let row = sqlx::query("SELECT * FROM backfills WHERE id = $1").bind(id).fetch_optional(&self.read).await?;
        row.as_ref().map(backfill_from).transpose()
    }

    async fn list_backfills(&self, tenant: &str) -> Result<Vec<BackfillRow>> {
        let rows = sqlx::query("SELECT * FROM backfills WHERE tenant = $1 ORDER BY created_at DESC")
            .bind(tenant)
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(backfill_from).collect()
    }
}

/// The PostgreSQL server of the test run (`DAGR_TEST_POSTGRES_URL`), or
/// none outside CI (where it must be given).
#[cfg(test)]
pub(crate) async fn postgres_for_tests() -> Option<SqlStore> {
    let Ok(url) = std::env::var("DAGR_TEST_POSTGRES_URL") else {
        assert!(std::env::var("CI").is_err(), "CI must set DAGR_TEST_POSTGRES_URL");
        return None;
    };
    Some(SqlStore::open_postgres(&url, 2, DEFAULT_IDLE_IN_TRANSACTION).await.expect("the test PostgreSQL opens"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn event(kind: &str) -> NewEvent {
        NewEvent {
            tenant: "script-test".into(),
            at: 1,
            kind: kind.into(),
            workflow: None,
            run_id: None,
            task: None,
            data: "{}".into(),
        }
    }

    async fn kinds(store: &SqlStore) -> Vec<String> {
        store.events("script-test", None, 0, 1000).await.unwrap().into_iter().map(|e| e.kind).collect()
    }

    /// A hand-made transaction that fails halfway leaves nothing behind,
    /// and the next commit finds a clean connection.
    async fn a_failed_script_rolls_back(store: &SqlStore) {
        let begin = if store.is_postgres() { "BEGIN" } else { "BEGIN IMMEDIATE" };
        let mut writer = Writer::acquire(&store.write).await.unwrap();
        let mut script = Script::new(store.backend);
        script.push(begin, Vec::new());
        script.push(
            "INSERT INTO events (tenant, at, kind, run_id, task, data) VALUES (?, ?, ?, NULL, NULL, '{}')",
            vec![Arg::Text("script-test".into()), Arg::I64(1), Arg::Text("lost".into())],
        );
        script.push("INSERT INTO no_such_table VALUES (?)", vec![Arg::I64(1)]);
        script.push("COMMIT", Vec::new());
        let error = script.run(writer.get()).await.unwrap_err();
        assert!(error.to_string().contains("no_such_table"), "{error}");
        drop(writer);

        let batch = WriteBatch { events: vec![event("kept")], ..WriteBatch::default() };
        store.commit(batch).await.unwrap();
        assert_eq!(kinds(store).await, ["kept"]);
    }

    #[tokio::test]
    async fn a_failed_script_rolls_back_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqlStore::open_sqlite(&dir.path().join("dagr.db"), Synchronous::Normal).await.unwrap();
        a_failed_script_rolls_back(&store).await;
    }

    #[tokio::test]
    async fn a_failed_script_rolls_back_on_postgres() {
        let Some(store) = super::postgres_for_tests().await else { return };
        sqlx::query("DELETE FROM events WHERE tenant = 'script-test'").execute(&store.write).await.unwrap();
        a_failed_script_rolls_back(&store).await;
    }

    /// A master frozen in the middle of a transaction (SIGSTOP) holds its
    /// locks; here, the one that orders event appends, which every commit
    /// with events takes. PostgreSQL ends its session once it has sat idle
    /// in the transaction for the store's limit, so another master's commit
    /// goes through instead of waiting for as long as the first stays
    /// frozen; the frozen one finds its transaction gone when it wakes, and
    /// its next commit works on a fresh session.
    #[tokio::test]
    async fn a_session_frozen_inside_a_transaction_does_not_stall_other_commits() {
        let Ok(url) = std::env::var("DAGR_TEST_POSTGRES_URL") else {
            assert!(std::env::var("CI").is_err(), "CI must set DAGR_TEST_POSTGRES_URL");
            return;
        };
        let frozen = SqlStore::open_postgres(&url, 2, Duration::from_secs(1)).await.unwrap();
        let other = SqlStore::open_postgres(&url, 2, Duration::from_secs(1)).await.unwrap();
        let tenant = "frozen-session-test";
        sqlx::query("DELETE FROM events WHERE tenant = $1").bind(tenant).execute(&other.write).await.unwrap();
        let batch = |kind: &str| WriteBatch {
            events: vec![NewEvent { tenant: tenant.into(), kind: kind.into(), ..event(kind) }],
            ..WriteBatch::default()
        };

        let mut writer = Writer::acquire(&frozen.write).await.unwrap();
        let mut script = Script::new(frozen.backend);
        script.push("BEGIN", Vec::new());
        script.push(
            "SELECT count(*) FROM (SELECT pg_advisory_xact_lock(?)) AS ordered",
            vec![Arg::I64(crate::sql_events::EVENT_APPEND_LOCK)],
        );
        script.run(writer.get()).await.unwrap();
        // Frozen: nothing more is sent on that session.
        let commit = tokio::time::timeout(Duration::from_secs(60), other.commit(batch("while-frozen")));
        commit.await.expect("the other commit waited for the frozen session's lock").unwrap();

        // Awake again: the transaction and its session are gone.
        let mut script = Script::new(frozen.backend);
        script.push("COMMIT", Vec::new());
        assert!(script.run(writer.get()).await.is_err(), "the frozen session's transaction was ended");
        drop(writer);
        frozen.commit(batch("after-waking")).await.unwrap();
        let kinds: Vec<String> =
            other.events(tenant, None, 0, 100).await.unwrap().into_iter().map(|e| e.kind).collect();
        assert_eq!(kinds, ["while-frozen", "after-waking"]);
    }

    /// Statements of one script, small and big mixed, bind their own
    /// arguments in order.
    #[tokio::test]
    async fn a_script_binds_each_statement_s_arguments() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqlStore::open_sqlite(&dir.path().join("dagr.db"), Synchronous::Normal).await.unwrap();
        let many: Vec<NewEvent> = (0..SMALL_STATEMENT_PARAMS).map(|i| event(&format!("big-{i}"))).collect();
        let batch = WriteBatch {
            events: std::iter::once(event("first")).chain(many).collect(),
            commands_done: vec![DoneCommand { id: 12345, run_id: "r".into(), result: "{}".into() }],
            schedule_cursors: vec![("script-test".into(), "nothing".into(), 7)],
            ..WriteBatch::default()
        };
        store.commit(batch).await.unwrap();
        let kinds = kinds(&store).await;
        assert_eq!(kinds.len(), SMALL_STATEMENT_PARAMS + 1);
        assert_eq!(kinds[0], "first");
        assert_eq!(kinds[1], "big-0");
        assert_eq!(kinds[SMALL_STATEMENT_PARAMS], format!("big-{}", SMALL_STATEMENT_PARAMS - 1));
    }
}
