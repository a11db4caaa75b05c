//! [`WebhookStore`] on [`SqlStore`].

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::sql::{Arg, Script};
use crate::webhooks::{DeliveryRow, WebhookRow, WebhookState, WebhookStore};
use crate::{Error, Result, SqlStore};

fn webhook_from(r: &AnyRow) -> Result<WebhookRow> {
    let state: String = r.try_get("state")?;
    Ok(WebhookRow {
        id: r.try_get("id")?,
        tenant: r.try_get("tenant")?,
        url: r.try_get("url")?,
        kinds: r.try_get("kinds")?,
        workflow: r.try_get("workflow")?,
        secret: r.try_get("secret")?,
        batch: r.try_get("batch")?,
        cursor: r.try_get("cursor")?,
        state: WebhookState::parse(&state)
            .ok_or_else(|| Error::Invalid(format!("unknown webhook state `{state}` in the database")))?,
        failing_since: r.try_get("failing_since")?,
        disabled_reason: r.try_get("disabled_reason")?,
        created_at: r.try_get("created_at")?,
    })
}

#[async_trait]
impl WebhookStore for SqlStore {
    async fn create_webhook(&self, w: &WebhookRow) -> Result<()> {
        sqlx::query(
            "INSERT INTO webhooks (id, tenant, url, kinds, workflow, secret, cursor, state, failing_since, \
             disabled_reason, created_at, batch) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(&w.id)
        .bind(&w.tenant)
        .bind(&w.url)
        .bind(&w.kinds)
        .bind(&w.workflow)
        .bind(&w.secret)
        .bind(w.cursor)
        .bind(w.state.as_str())
        .bind(w.failing_since)
        .bind(&w.disabled_reason)
        .bind(w.created_at)
        .bind(w.batch)
        .execute(&self.write)
        .await?;
        Ok(())
    }

    async fn get_webhook(&self, tenant: &str, id: &str) -> Result<Option<WebhookRow>> {
        let row = sqlx::query("SELECT * FROM webhooks WHERE tenant = $1 AND id = $2")
            .bind(tenant)
            .bind(id)
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(webhook_from).transpose()
    }

    async fn list_webhooks(&self, tenant: &str) -> Result<Vec<WebhookRow>> {
        let rows = sqlx::query("SELECT * FROM webhooks WHERE tenant = $1 ORDER BY created_at, id")
            .bind(tenant)
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(webhook_from).collect()
    }

    async fn active_webhooks(&self) -> Result<Vec<WebhookRow>> {
        let rows =
            sqlx::query("SELECT * FROM webhooks WHERE state = 'active' ORDER BY id").fetch_all(&self.read).await?;
        rows.iter().map(webhook_from).collect()
    }

    async fn delete_webhook(&self, tenant: &str, id: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM webhooks WHERE tenant = $1 AND id = $2")
            .bind(tenant)
            .bind(id)
            .execute(&self.write)
            .await?;
        sqlx::query("DELETE FROM webhook_deliveries WHERE webhook_id = $1").bind(id).execute(&self.write).await?;
        Ok(done.rows_affected() > 0)
    }

    async fn advance_webhook(&self, id: &str, cursor: i64) -> Result<()> {
        sqlx::query("UPDATE webhooks SET cursor = $1 WHERE id = $2 AND cursor < $1")
            .bind(cursor)
            .bind(id)
            .execute(&self.write)
            .await?;
        Ok(())
    }

    async fn set_webhook_failing(&self, id: &str, since: Option<i64>) -> Result<()> {
        sqlx::query("UPDATE webhooks SET failing_since = $1 WHERE id = $2")
            .bind(since)
            .bind(id)
            .execute(&self.write)
            .await?;
        Ok(())
    }

    async fn set_webhook_disabled(&self, id: &str, reason: Option<&str>) -> Result<()> {
        let state = if reason.is_some() { WebhookState::Disabled } else { WebhookState::Active };
        sqlx::query("UPDATE webhooks SET state = $1, disabled_reason = $2, failing_since = NULL WHERE id = $3")
            .bind(state.as_str())
            .bind(reason)
            .bind(id)
            .execute(&self.write)
            .await?;
        Ok(())
    }

    async fn record_deliveries(&self, rows: &[DeliveryRow], keep: i64) -> Result<()> {
        let Some(first) = rows.first() else { return Ok(()) };
        // One multi-row insert and the trim in one script: a page of a
        // hundred deliveries was a hundred round trips to the database.
        let mut script = Script::new(self.backend);
        let values = rows
            .iter()
            .map(|d| {
                vec![
                    Arg::Text(d.webhook_id.clone()),
                    Arg::I64(d.seq),
                    Arg::I64(d.attempt),
                    Arg::I64(d.at),
                    Arg::OptI64(d.status),
                    Arg::OptText(d.error.clone()),
                    Arg::I64(d.duration_ms),
                ]
            })
            .collect();
        script.rows(
            "INSERT INTO webhook_deliveries (webhook_id, seq, attempt, at, status, error, duration_ms)",
            "",
            7,
            values,
        );
        // Keep the newest: drop what is older than the keep-th newest.
        script.push(
            "DELETE FROM webhook_deliveries WHERE webhook_id = ? AND at < (SELECT MIN(at) FROM \
             (SELECT at FROM webhook_deliveries WHERE webhook_id = ? ORDER BY at DESC LIMIT ?) AS newest)",
            vec![Arg::Text(first.webhook_id.clone()), Arg::Text(first.webhook_id.clone()), Arg::I64(keep)],
        );
        script.commit(&self.write).await
    }

    async fn webhook_secrets_page(&self, after: Option<&str>, limit: i64) -> Result<Vec<(String, String, String)>> {
        let rows = sqlx::query("SELECT tenant, id, secret FROM webhooks WHERE id > $1 ORDER BY id LIMIT $2")
            .bind(after.unwrap_or(""))
            .bind(limit)
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(|r| Ok((r.try_get("tenant")?, r.try_get("id")?, r.try_get("secret")?))).collect()
    }

    async fn reseal_webhook_secret(&self, id: &str, expected: &str, value: &str) -> Result<bool> {
        let done = sqlx::query("UPDATE webhooks SET secret = $1 WHERE id = $2 AND secret = $3")
            .bind(value)
            .bind(id)
            .bind(expected)
            .execute(&self.write)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn sink_cursor(&self, name: &str, start: i64) -> Result<i64> {
        sqlx::query("INSERT INTO event_sinks (name, cursor) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING")
            .bind(name)
            .bind(start)
            .execute(&self.write)
            .await?;
        let row =
            sqlx::query("SELECT cursor FROM event_sinks WHERE name = $1").bind(name).fetch_one(&self.write).await?;
        Ok(row.try_get("cursor")?)
    }

    async fn advance_sink(&self, name: &str, cursor: i64) -> Result<()> {
        sqlx::query("UPDATE event_sinks SET cursor = $1 WHERE name = $2 AND cursor < $1")
            .bind(cursor)
            .bind(name)
            .execute(&self.write)
            .await?;
        Ok(())
    }

    async fn deliveries(&self, webhook_id: &str, limit: i64) -> Result<Vec<DeliveryRow>> {
        let rows = sqlx::query(
            "SELECT * FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY at DESC, seq DESC, attempt DESC LIMIT $2",
        )
        .bind(webhook_id)
        .bind(limit)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(DeliveryRow {
                    webhook_id: r.try_get("webhook_id")?,
                    seq: r.try_get("seq")?,
                    attempt: r.try_get("attempt")?,
                    at: r.try_get("at")?,
                    status: r.try_get("status")?,
                    error: r.try_get("error")?,
                    duration_ms: r.try_get("duration_ms")?,
                })
            })
            .collect()
    }
}
