//! [`OuterStore`] on [`SqlStore`].

use async_trait::async_trait;

use crate::archive::ArchiveStore;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::outer::{CycleRange, CycleRun, EdgeRow, OuterStore};
use crate::sql::{Arg, Backend, bind_all};
use crate::sql_script::{chunk_of, chunk_rows, numbered, placeholders};
use crate::{Error, Result, RunState, SqlStore, TaskState};

/// The edges of live (not deleted) workflows; callers add the `WHERE`.
const EDGES: &str = "SELECT e.tenant, e.workflow, e.upstream, e.task, e.past, e.kind FROM workflow_edges e \
     JOIN workflows w ON w.tenant = e.tenant AND w.name = e.workflow AND w.deleted = 0";

fn edge_from(r: &AnyRow) -> Result<EdgeRow> {
    Ok(EdgeRow {
        tenant: r.try_get("tenant")?,
        workflow: r.try_get("workflow")?,
        upstream: r.try_get("upstream")?,
        task: r.try_get("task")?,
        past: r.try_get::<i64, _>("past")? != 0,
        kind: r.try_get("kind")?,
    })
}

#[async_trait]
impl OuterStore for SqlStore {
    async fn set_workflow_edges(&self, tenant: &str, workflow: &str, edges: &[EdgeRow]) -> Result<()> {
        let mut tx = self.write.begin().await?;
        sqlx::query("DELETE FROM workflow_edges WHERE tenant = $1 AND workflow = $2")
            .bind(tenant)
            .bind(workflow)
            .execute(&mut *tx)
            .await?;
        for e in edges {
            sqlx::query(
                "INSERT INTO workflow_edges (tenant, workflow, upstream, task, past, kind) VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(tenant)
            .bind(workflow)
            .bind(&e.upstream)
            .bind(&e.task)
            .bind(e.past as i64)
            .bind(&e.kind)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn workflow_edges(&self, tenant: &str) -> Result<Vec<EdgeRow>> {
        let rows = sqlx::query(&format!("{EDGES} WHERE e.tenant = $1 ORDER BY e.workflow, e.upstream"))
            .bind(tenant)
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(edge_from).collect()
    }

    async fn edges_from(&self, tenant: &str, workflows: &[String]) -> Result<Vec<EdgeRow>> {
        let mut out = Vec::new();
        for chunk in workflows.chunks(500) {
            let marks: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 2)).collect();
            let sql = format!("{EDGES} WHERE e.tenant = $1 AND e.workflow IN ({})", marks.join(", "));
            let mut query = sqlx::query(&sql).bind(tenant);
            for w in chunk {
                query = query.bind(w);
            }
            for r in query.fetch_all(&self.read).await? {
                out.push(edge_from(&r)?);
            }
        }
        Ok(out)
    }

    async fn edges_to(&self, tenant: &str, workflow: &str, limit: i64) -> Result<Vec<EdgeRow>> {
        let rows =
            sqlx::query(&format!("{EDGES} WHERE e.tenant = $1 AND e.upstream = $2 ORDER BY e.workflow LIMIT $3"))
                .bind(tenant)
                .bind(workflow)
                .bind(limit)
                .fetch_all(&self.read)
                .await?;
        rows.iter().map(edge_from).collect()
    }

    async fn watched(&self) -> Result<Vec<(String, String, Option<String>)>> {
        let rows = sqlx::query(
            "SELECT DISTINCT e.tenant, e.upstream, e.task FROM workflow_edges e \
             JOIN workflows w ON w.tenant = e.tenant AND w.name = e.workflow AND w.deleted = 0 \
             WHERE e.kind = 'upstream'",
        )
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(|r| Ok((r.try_get("tenant")?, r.try_get("upstream")?, r.try_get("task")?))).collect()
    }

    async fn runs_in_range(
        &self,
        tenant: &str,
        workflow: &str,
        from: i64,
        to: i64,
        task: Option<&str>,
    ) -> Result<Vec<CycleRun>> {
        let range =
            CycleRange { tenant: tenant.into(), workflow: workflow.into(), from, to, task: task.map(Into::into) };
        Ok(self.runs_in_ranges(&[range]).await?.pop().unwrap_or_default())
    }

    async fn runs_in_ranges(&self, ranges: &[CycleRange]) -> Result<Vec<Vec<CycleRun>>> {
        if ranges.is_empty() {
            return Ok(Vec::new());
        }
        // Upstream instances carried over to cold storage come back first
        // (the engine works on hot runs only); the index table, read once
        // per tenant, says whether any partition can hold one.
        let mut tenants: Vec<&str> = ranges.iter().map(|r| r.tenant.as_str()).collect();
        tenants.sort_unstable();
        tenants.dedup();
        for tenant in tenants {
            let cold = self.partitions(Some(tenant)).await?;
            for r in ranges.iter().filter(|r| r.tenant == tenant) {
                if cold.iter().any(|p| p.runs > 0 && p.overlaps_logical(Some(r.from), Some(r.to))) {
                    let now = chrono::Utc::now().timestamp_millis();
                    self.restore_range(tenant, &r.workflow, r.from, r.to, crate::sql_archive::MAX_RESTORE, now).await?;
                }
            }
        }
        if self.backend != Backend::Postgres {
            let mut conn = self.read.acquire().await?;
            return ranges_query(self.backend, &mut conn, ranges).await;
        }
        let mut tx = self.read.begin().await?;
        generic_plans(&mut tx).await?;
        let found = ranges_query(self.backend, &mut tx, ranges).await?;
        tx.commit().await?;
        Ok(found)
    }

    async fn runs_in_ranges_settled(&self, ranges: &[CycleRange]) -> Result<Vec<Vec<CycleRun>>> {
        if self.backend != Backend::Postgres {
            // One writer: every commit has ended before a read begins.
            return self.runs_in_ranges(ranges).await;
        }
        let mut locks: Vec<i64> = ranges.iter().map(|r| wake_lock(&r.tenant, &r.workflow)).collect();
        locks.sort_unstable();
        locks.dedup();
        let mut tx = self.read.begin().await?;
        generic_plans(&mut tx).await?;
        for lock in locks {
            sqlx::query("SELECT count(*) FROM (SELECT pg_advisory_xact_lock_shared($1)) AS settled")
                .bind(lock)
                .fetch_one(&mut *tx)
                .await?;
        }
        let found = ranges_query(self.backend, &mut tx, ranges).await?;
        tx.commit().await?;
        Ok(found)
    }

    async fn released_by(&self, run: &str) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT downstream FROM run_links WHERE upstream = $1 ORDER BY downstream")
            .bind(run)
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(|r| Ok(r.try_get("downstream")?)).collect()
    }

    async fn set_schedule_paused(&self, tenant: &str, name: &str, paused: bool, cursor: i64) -> Result<bool> {
        let n = if paused {
            sqlx::query("UPDATE workflows SET schedule_paused = 1 WHERE tenant = $1 AND name = $2 AND deleted = 0")
                .bind(tenant)
                .bind(name)
                .execute(&self.write)
                .await?
                .rows_affected()
        } else {
            sqlx::query(
                "UPDATE workflows SET schedule_paused = 0, schedule_cursor = $3 \
                 WHERE tenant = $1 AND name = $2 AND deleted = 0",
            )
            .bind(tenant)
            .bind(name)
            .bind(cursor)
            .execute(&self.write)
            .await?
            .rows_affected()
        };
        Ok(n > 0)
    }

    async fn children_of(&self, run: &str) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT id FROM runs WHERE parent_run = $1 ORDER BY created_at")
            .bind(run)
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(|r| Ok(r.try_get("id")?)).collect()
    }

    async fn waiting_in_slots(&self, slots: &[i64]) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for chunk in slots.chunks(crate::sql::MAX_PARAMS) {
            let sql = format!(
                "SELECT tenant, id FROM runs WHERE state = 'waiting' AND slot IN ({}) ORDER BY created_at, id",
                crate::sql_script::in_list(1, chunk.len())
            );
            let args = chunk.iter().map(|&s| Arg::I64(s)).collect();
            for row in bind_all(&sql, args).fetch_all(&self.read).await? {
                out.push((row.try_get("tenant")?, row.try_get("id")?));
            }
        }
        Ok(out)
    }
}

/// Ranges per statement of [`ranges_query`] on PostgreSQL (six parameters
/// each).
const RANGES_PER_STATEMENT: usize = 64;

/// Makes PostgreSQL plan the range reads of this transaction once per
/// connection and text, for any values. Left to itself it plans a prepared
/// statement for its values again and again, and a `UNION ALL` of up to 64
/// selects takes ~20 ms to plan: in a takeover of Buffalo's waiting
/// instances, 73 % of the range reads' time was planning
/// (docs/BENCHMARKS.md, "A takeover of waiting instances"). Each select
/// is an index lookup whatever its values.
async fn generic_plans(tx: &mut sqlx::Transaction<'_, sqlx::Any>) -> Result<()> {
    sqlx::query("SET LOCAL plan_cache_mode = force_generic_plan").execute(&mut **tx).await?;
    Ok(())
}

/// The runs of each of `ranges` (oldest first, with the task's state if
/// one is asked about), many ranges a statement ([`ranges_sql`]), each
/// tagged with its range's place, so that a step waking many runs costs a
/// few round trips, not one (and a connection from the pool) per range.
async fn ranges_query(
    backend: Backend,
    conn: &mut sqlx::AnyConnection,
    ranges: &[CycleRange],
) -> Result<Vec<Vec<CycleRun>>> {
    let mut found: Vec<Vec<CycleRun>> = vec![Vec::new(); ranges.len()];
    let mut done = 0;
    while done < ranges.len() {
        let n = match backend {
            Backend::Sqlite => chunk_rows(ranges.len() - done, 6),
            Backend::Postgres => chunk_of(ranges.len() - done, RANGES_PER_STATEMENT),
        };
        let mut args = Vec::with_capacity(n * 6);
        for (i, r) in ranges[done..done + n].iter().enumerate() {
            args.extend([
                Arg::I64((done + i) as i64),
                Arg::OptText(r.task.clone()),
                Arg::Text(r.tenant.clone()),
                Arg::Text(r.workflow.clone()),
                Arg::I64(r.from),
                Arg::I64(r.to),
            ]);
        }
        let sql = ranges_sql(backend, n);
        for row in bind_all(&sql, args).fetch_all(&mut *conn).await? {
            let q: i64 = row.try_get("q")?;
            let Some(list) = usize::try_from(q).ok().and_then(|q| found.get_mut(q)) else {
                return Err(Error::Invalid(format!("a range read answered for range {q} of {}", ranges.len())));
            };
            list.push(cycle_run_from(&row)?);
        }
        done += n;
    }
    Ok(found)
}

/// The text that reads `n` ranges, each given by six values (its place,
/// its task or none, tenant, workflow, from, to), every count a power of
/// two so that a few texts serve every read and stay prepared.
///
/// SQLite: the ranges as the rows of a `VALUES` list joined to the runs.
/// PostgreSQL (which may plan such a join as a hash join over every run):
/// a `UNION ALL` of one select per range, every select the same text. A
/// range without a task names none, which no task row matches.
fn ranges_sql(backend: Backend, n: usize) -> String {
    match backend {
        Backend::Sqlite => format!(
            "WITH q (q, task, tenant, workflow, from_time, to_time) AS (VALUES {}) \
             SELECT q.q AS q, r.id AS id, r.logical_time AS logical_time, r.state AS state, \
             r.created_at AS created_at, t.state AS task_state \
             FROM q JOIN runs r ON r.tenant = q.tenant AND r.workflow = q.workflow \
             AND r.logical_time >= q.from_time AND r.logical_time <= q.to_time \
             LEFT JOIN tasks t ON q.task IS NOT NULL AND t.run_id = r.id AND t.name = q.task \
             ORDER BY q.q, r.logical_time, r.created_at",
            placeholders(n, 6)
        ),
        Backend::Postgres => {
            let select = "SELECT CAST(? AS BIGINT) AS q, r.id AS id, r.logical_time AS logical_time, \
                          r.state AS state, r.created_at AS created_at, t.state AS task_state FROM runs r \
                          LEFT JOIN tasks t ON t.run_id = r.id AND t.name = ? \
                          WHERE r.tenant = ? AND r.workflow = ? AND r.logical_time >= ? AND r.logical_time <= ?";
            numbered(&format!("{} ORDER BY q, logical_time, created_at", vec![select; n].join(" UNION ALL ")))
        }
    }
}

fn cycle_run_from(r: &AnyRow) -> Result<CycleRun> {
    let state: String = r.try_get("state")?;
    let task_state: Option<String> = r.try_get("task_state")?;
    Ok(CycleRun {
        id: r.try_get("id")?,
        logical_time: r.try_get("logical_time")?,
        state: RunState::parse(&state)
            .ok_or_else(|| Error::Invalid(format!("unknown run state `{state}` in the database")))?,
        task_state: task_state.as_deref().and_then(TaskState::parse),
    })
}

/// The advisory lock (PostgreSQL) that a commit waking the runs waiting on
/// `workflow` holds from its wake-ups to COMMIT, and a settled read of its
/// runs takes shared: FNV-1a over tenant and workflow.
pub(crate) fn wake_lock(tenant: &str, workflow: &str) -> i64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in tenant.bytes().chain([0]).chain(workflow.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash as i64
}
