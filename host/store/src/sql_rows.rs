//! Rows of the store's tables to and from their types: the columns each
//! query reads, and the filter of a page of runs.

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::sql::{Arg, Backend, insert_rows};
use crate::*;

/// The query of a page of runs from `table` (hot or a partition's) as
/// `filter` says, newest first, with anonymous `?` parameters.
pub(crate) fn run_filter_sql(filter: &RunFilter, table: &str) -> (String, Vec<Arg>) {
    let mut sql = format!("SELECT {RUN_COLUMNS} FROM {table} WHERE tenant = ?");
    let mut args = vec![Arg::Text(filter.tenant.clone())];
    let mut push = |clause: &str, arg: Arg| {
        sql.push_str(clause);
        args.push(arg);
    };
    if let Some(w) = &filter.workflow {
        push(" AND workflow = ?", Arg::Text(w.clone()));
    }
    if let Some(s) = &filter.state {
        push(" AND state = ?", Arg::Text(s.clone()));
    }
    if let Some(k) = filter.kind {
        push(" AND kind = ?", Arg::Text(k.as_str().into()));
    }
    if let Some(b) = &filter.backfill_id {
        push(" AND backfill_id = ?", Arg::Text(b.clone()));
    }
    if let Some(from) = filter.logical_from {
        push(" AND logical_time >= ?", Arg::I64(from));
    }
    if let Some(to) = filter.logical_to {
        push(" AND logical_time <= ?", Arg::I64(to));
    }
    if let Some((created, id)) = &filter.before {
        push(" AND (created_at < ?", Arg::I64(*created));
        push(" OR (created_at = ?", Arg::I64(*created));
        push(" AND id < ?))", Arg::Text(id.clone()));
    }
    push(" ORDER BY created_at DESC, id DESC LIMIT ?", Arg::I64(filter.limit.clamp(1, 1000)));
    (sql, args)
}

pub(crate) fn run_from(row: &AnyRow) -> Result<RunRow> {
    let kind: String = row.try_get("kind")?;
    Ok(RunRow {
        id: row.try_get("id")?,
        tenant: row.try_get("tenant")?,
        workflow: row.try_get("workflow")?,
        version: row.try_get("version")?,
        kind: RunKind::parse(&kind)
            .ok_or_else(|| Error::Invalid(format!("unknown run kind `{kind}` in the database")))?,
        state: {
            let state: String = row.try_get("state")?;
            RunState::parse(&state)
                .ok_or_else(|| Error::Invalid(format!("unknown run state `{state}` in the database")))?
        },
        logical_time: row.try_get("logical_time")?,
        params: row.try_get("params")?,
        spec: row.try_get("spec")?,
        backfill_id: row.try_get("backfill_id")?,
        slot: row.try_get("slot")?,
        owner: row.try_get("owner")?,
        epoch: row.try_get("epoch")?,
        created_at: row.try_get("created_at")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
        updated_at: row.try_get("updated_at")?,
        parent_run: row.try_get("parent_run")?,
        parent_task: row.try_get("parent_task")?,
    })
}

pub(crate) const RUN_COLUMNS: &str = "id, tenant, workflow, version, kind, state, logical_time, params, spec, backfill_id, slot, \
                           owner, epoch, created_at, started_at, finished_at, updated_at, parent_run, parent_task";
/// How many columns [`RUN_COLUMNS`] names (and [`run_args`] binds).
pub(crate) const RUN_COLUMN_COUNT: usize = 19;

pub(crate) fn run_args(r: &RunRow) -> Vec<Arg> {
    vec![
        Arg::Text(r.id.clone()),
        Arg::Text(r.tenant.clone()),
        Arg::Text(r.workflow.clone()),
        Arg::OptI64(r.version),
        Arg::Text(r.kind.as_str().to_owned()),
        Arg::Text(r.state.as_str().to_owned()),
        Arg::I64(r.logical_time),
        Arg::Text(r.params.clone()),
        Arg::OptText(r.spec.clone()),
        Arg::OptText(r.backfill_id.clone()),
        Arg::I64(r.slot),
        Arg::OptText(r.owner.clone()),
        Arg::I64(r.epoch),
        Arg::I64(r.created_at),
        Arg::OptI64(r.started_at),
        Arg::OptI64(r.finished_at),
        Arg::I64(r.updated_at),
        Arg::OptText(r.parent_run.clone()),
        Arg::OptI64(r.parent_task),
    ]
}

/// Inserts log lines into `{table_prefix}logs` (the hot table, or a cold
/// partition's), many rows per statement, each message made storable; a
/// line already there is left as it is.
pub(crate) async fn insert_logs(
    conn: &mut sqlx::AnyConnection,
    backend: Backend,
    table_prefix: &str,
    lines: impl IntoIterator<Item = LogRow>,
) -> Result<()> {
    let rows = lines
        .into_iter()
        .map(|l| {
            vec![
                Arg::Text(l.run_id),
                Arg::I64(l.task_idx),
                Arg::I64(l.attempt),
                Arg::I64(l.seq),
                Arg::I64(l.at),
                Arg::Text(l.source),
                Arg::Text(l.level),
                Arg::Text(crate::logs::storable(l.message)),
            ]
        })
        .collect();
    let head = format!("INSERT INTO {table_prefix}logs (run_id, task_idx, attempt, seq, at, source, level, message)");
    insert_rows(conn, backend, &head, "ON CONFLICT DO NOTHING", 8, rows).await
}

pub(crate) fn log_from(r: &AnyRow) -> Result<LogRow> {
    Ok(LogRow {
        run_id: r.try_get("run_id")?,
        task_idx: r.try_get("task_idx")?,
        attempt: r.try_get("attempt")?,
        seq: r.try_get("seq")?,
        at: r.try_get("at")?,
        source: r.try_get("source")?,
        level: r.try_get("level")?,
        message: r.try_get("message")?,
    })
}

pub(crate) fn task_from(row: &AnyRow) -> Result<TaskRow> {
    Ok(TaskRow {
        run_id: row.try_get("run_id")?,
        idx: row.try_get("idx")?,
        name: row.try_get("name")?,
        state: {
            let state: String = row.try_get("state")?;
            TaskState::parse(&state)
                .ok_or_else(|| Error::Invalid(format!("unknown task state `{state}` in the database")))?
        },
        attempts: row.try_get("attempts")?,
        failures: row.try_get("failures")?,
        lost: row.try_get("lost")?,
        forced: row.try_get::<i64, _>("forced")? != 0,
        retry_at: row.try_get("retry_at")?,
        error: row.try_get("error")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
        child_run: row.try_get("child_run")?,
    })
}

pub(crate) fn attempt_from(row: &AnyRow) -> Result<AttemptRow> {
    Ok(AttemptRow {
        run_id: row.try_get("run_id")?,
        task_idx: row.try_get("task_idx")?,
        number: row.try_get("number")?,
        task: row.try_get("task")?,
        state: {
            let state: String = row.try_get("state")?;
            AttemptState::parse(&state)
                .ok_or_else(|| Error::Invalid(format!("unknown attempt state `{state}` in the database")))?
        },
        failure_kind: match row.try_get::<Option<String>, _>("failure_kind")? {
            Some(kind) => Some(
                FailureKind::parse(&kind)
                    .ok_or_else(|| Error::Invalid(format!("unknown failure kind `{kind}` in the database")))?,
            ),
            None => None,
        },
        message: row.try_get("message")?,
        charged: row.try_get::<i64, _>("charged")? != 0,
        worker: row.try_get("worker")?,
        epoch: row.try_get("epoch")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
        lease: None,
    })
}

/// An attempt's columns as every table of them has them (the cold
/// partitions too); the hot table has `lease` besides.
pub(crate) const ATTEMPT_COLUMNS: &str =
    "run_id, task_idx, number, task, state, failure_kind, message, charged, worker, epoch, started_at, finished_at";

pub(crate) fn workflow_from(row: &AnyRow) -> Result<WorkflowRow> {
    Ok(WorkflowRow {
        tenant: row.try_get("tenant")?,
        name: row.try_get("name")?,
        latest_version: row.try_get("latest_version")?,
        deleted: row.try_get::<i64, _>("deleted")? != 0,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        schedule_cursor: row.try_get("schedule_cursor")?,
        schedule_since: row.try_get("schedule_since")?,
        schedule_paused: row.try_get::<i64, _>("schedule_paused")? != 0,
    })
}

pub(crate) fn version_from(row: &AnyRow) -> Result<VersionRow> {
    Ok(VersionRow {
        tenant: row.try_get("tenant")?,
        name: row.try_get("name")?,
        version: row.try_get("version")?,
        hash: row.try_get("hash")?,
        spec: row.try_get("spec")?,
        created_at: row.try_get("created_at")?,
    })
}

pub(crate) fn command_from(row: &AnyRow) -> Result<CommandRow> {
    Ok(CommandRow {
        id: row.try_get("id")?,
        tenant: row.try_get("tenant")?,
        run_id: row.try_get("run_id")?,
        slot: row.try_get("slot")?,
        command: EncodedCommand { kind: row.try_get("kind")?, payload: row.try_get("payload")? },
        created_at: row.try_get("created_at")?,
        done_at: row.try_get("done_at")?,
        result: row.try_get("result")?,
    })
}

pub(crate) fn backfill_from(row: &AnyRow) -> Result<BackfillRow> {
    Ok(BackfillRow {
        id: row.try_get("id")?,
        tenant: row.try_get("tenant")?,
        workflow: row.try_get("workflow")?,
        from_time: row.try_get("from_time")?,
        to_time: row.try_get("to_time")?,
        parallel: row.try_get("parallel")?,
        total: row.try_get("total")?,
        created_at: row.try_get("created_at")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_row_binds_one_value_per_column_named() {
        let named = RUN_COLUMNS.split(',').count();
        let bound = run_args(&crate::conformance::run("r", "t", "wf", RunKind::Manual, 1)).len();
        assert_eq!((named, bound), (RUN_COLUMN_COUNT, RUN_COLUMN_COUNT));
    }
}
