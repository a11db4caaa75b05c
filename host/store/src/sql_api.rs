//! [`ReadStore`] on [`SqlStore`].

use async_trait::async_trait;
use sqlx::Row;

use crate::reads::ReadStore;
use crate::sql::{Arg, log_from, task_from};
use crate::{LogRow, Result, SqlStore, TaskRow};

#[async_trait]
impl ReadStore for SqlStore {
    async fn run_tasks_page(&self, run_id: &str, after: i64, limit: i64) -> Result<Vec<TaskRow>> {
        let sql = "SELECT * FROM {c}tasks WHERE run_id = ? AND idx > ? ORDER BY idx LIMIT ?";
        let rows = self.run_rows(run_id, sql, vec![Arg::Text(run_id.into()), Arg::I64(after), Arg::I64(limit)]).await?;
        rows.iter().map(task_from).collect()
    }

    async fn run_task_counts(&self, run_id: &str) -> Result<Vec<(String, i64)>> {
        let sql = "SELECT state, COUNT(*) AS n FROM {c}tasks WHERE run_id = ? GROUP BY state ORDER BY state";
        let rows = self.run_rows(run_id, sql, vec![Arg::Text(run_id.into())]).await?;
        rows.iter().map(|r| Ok((r.try_get("state")?, r.try_get("n")?))).collect()
    }

    async fn run_task(&self, run_id: &str, name: &str) -> Result<Option<TaskRow>> {
        let sql = "SELECT * FROM {c}tasks WHERE run_id = ? AND name = ?";
        let rows = self.run_rows(run_id, sql, vec![Arg::Text(run_id.into()), Arg::Text(name.into())]).await?;
        rows.first().map(task_from).transpose()
    }

    async fn last_log_line(&self, run_id: &str, task_idx: i64, attempt: i64, source: &str) -> Result<Option<LogRow>> {
        let row = sqlx::query(
            "SELECT * FROM logs WHERE run_id = $1 AND task_idx = $2 AND attempt = $3 AND source = $4 \
             ORDER BY seq DESC LIMIT 1",
        )
        .bind(run_id)
        .bind(task_idx)
        .bind(attempt)
        .bind(source)
        .fetch_optional(&self.read)
        .await?;
        if row.is_none()
            && let Some(part) = self.cold_home(run_id).await?
        {
            let lines = self.cold_logs(&part, run_id, task_idx, attempt).await?;
            return Ok(lines.into_iter().filter(|l| l.source == source).max_by_key(|l| l.seq));
        }
        row.as_ref().map(log_from).transpose()
    }
}
