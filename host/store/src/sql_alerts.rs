//! [`AlertStore`] on [`SqlStore`].

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::alerts::{AlertRow, AlertRuleRow, AlertStore, DueSla, NewAlert};
use crate::{Result, SqlStore};

fn rule_from(r: &AnyRow) -> Result<AlertRuleRow> {
    Ok(AlertRuleRow {
        id: r.try_get("id")?,
        tenant: r.try_get("tenant")?,
        workflow: r.try_get("workflow")?,
        kinds: r.try_get("kinds")?,
        channel: r.try_get("channel")?,
        target: r.try_get("target")?,
        group_ms: r.try_get("group_ms")?,
        quiet: r.try_get("quiet")?,
        wait_ms: r.try_get("wait_ms")?,
        created_at: r.try_get("created_at")?,
    })
}

fn alert_from(r: &AnyRow) -> Result<AlertRow> {
    Ok(AlertRow {
        id: r.try_get("id")?,
        alert: NewAlert {
            rule_id: r.try_get("rule_id")?,
            tenant: r.try_get("tenant")?,
            seq: r.try_get("seq")?,
            kind: r.try_get("kind")?,
            grp: r.try_get("grp")?,
            workflow: r.try_get("workflow")?,
            run_id: r.try_get("run_id")?,
            message: r.try_get("message")?,
            at: r.try_get("at")?,
        },
        sent_at: r.try_get("sent_at")?,
        error: r.try_get("error")?,
    })
}

#[async_trait]
impl AlertStore for SqlStore {
    async fn create_alert_rule(&self, w: &AlertRuleRow) -> Result<()> {
        sqlx::query(
            "INSERT INTO alert_rules (id, tenant, workflow, kinds, channel, target, group_ms, quiet, wait_ms, \
             created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(&w.id)
        .bind(&w.tenant)
        .bind(&w.workflow)
        .bind(&w.kinds)
        .bind(&w.channel)
        .bind(&w.target)
        .bind(w.group_ms)
        .bind(&w.quiet)
        .bind(w.wait_ms)
        .bind(w.created_at)
        .execute(&self.write)
        .await?;
        Ok(())
    }

    async fn list_alert_rules(&self, tenant: &str) -> Result<Vec<AlertRuleRow>> {
        let rows = sqlx::query("SELECT * FROM alert_rules WHERE tenant = $1 ORDER BY created_at, id")
            .bind(tenant)
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(rule_from).collect()
    }

    async fn get_alert_rule(&self, tenant: &str, id: &str) -> Result<Option<AlertRuleRow>> {
        let row = sqlx::query("SELECT * FROM alert_rules WHERE tenant = $1 AND id = $2")
            .bind(tenant)
            .bind(id)
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(rule_from).transpose()
    }

    async fn delete_alert_rule(&self, tenant: &str, id: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM alert_rules WHERE tenant = $1 AND id = $2")
            .bind(tenant)
            .bind(id)
            .execute(&self.write)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn all_alert_rules(&self) -> Result<Vec<AlertRuleRow>> {
        let rows = sqlx::query("SELECT * FROM alert_rules ORDER BY id").fetch_all(&self.read).await?;
        rows.iter().map(rule_from).collect()
    }

    async fn raise_alerts(&self, alerts: &[NewAlert]) -> Result<()> {
        if alerts.is_empty() {
            return Ok(());
        }
        let mut tx = self.write.begin().await?;
        for a in alerts {
            sqlx::query(
                "INSERT INTO alerts (rule_id, tenant, seq, kind, grp, workflow, run_id, message, at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (rule_id, seq) DO NOTHING",
            )
            .bind(&a.rule_id)
            .bind(&a.tenant)
            .bind(a.seq)
            .bind(&a.kind)
            .bind(&a.grp)
            .bind(&a.workflow)
            .bind(&a.run_id)
            .bind(&a.message)
            .bind(a.at)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn unsent_alerts(&self, limit: i64) -> Result<Vec<AlertRow>> {
        let rows = sqlx::query("SELECT * FROM alerts WHERE sent_at IS NULL ORDER BY id LIMIT $1")
            .bind(limit)
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(alert_from).collect()
    }

    async fn last_sent(&self, rule_id: &str, grp: &str) -> Result<Option<i64>> {
        let row = sqlx::query("SELECT MAX(sent_at) AS sent FROM alerts WHERE rule_id = $1 AND grp = $2")
            .bind(rule_id)
            .bind(grp)
            .fetch_one(&self.read)
            .await?;
        Ok(row.try_get("sent")?)
    }

    async fn alerts_sent(&self, ids: &[i64], at: i64, error: Option<&str>) -> Result<()> {
        let mut tx = self.write.begin().await?;
        for id in ids {
            let sql = if error.is_some() {
                "UPDATE alerts SET error = $2 WHERE id = $1"
            } else {
                "UPDATE alerts SET sent_at = $3, error = $2 WHERE id = $1"
            };
            let mut query = sqlx::query(sql).bind(id).bind(error);
            if error.is_none() {
                query = query.bind(at);
            }
            query.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn long_waiting_runs(
        &self,
        tenant: &str,
        workflow: Option<&str>,
        after: i64,
        until: i64,
        limit: i64,
    ) -> Result<Vec<(String, String, i64)>> {
        let mut sql = String::from(
            "SELECT r.id, r.workflow, r.created_at FROM runs r WHERE r.tenant = $1 \
             AND r.created_at > $2 AND r.created_at <= $3 AND r.state = 'waiting'",
        );
        if workflow.is_some() {
            sql.push_str(" AND r.workflow = $5");
        }
        sql.push_str(" ORDER BY r.created_at, r.id LIMIT $4");
        let mut query = sqlx::query(&sql).bind(tenant).bind(after).bind(until).bind(limit);
        if let Some(workflow) = workflow {
            query = query.bind(workflow);
        }
        let rows = query.fetch_all(&self.read).await?;
        rows.iter().map(|r| Ok((r.try_get("id")?, r.try_get("workflow")?, r.try_get("created_at")?))).collect()
    }

    async fn due_slas(&self, now: i64, limit: i64) -> Result<Vec<DueSla>> {
        let rows = sqlx::query(
            "SELECT s.run_id, s.tenant, s.workflow, s.due_at, r.finished_at FROM run_slas s \
             JOIN runs r ON r.id = s.run_id WHERE s.missed_at IS NULL AND s.due_at <= $1 ORDER BY s.due_at LIMIT $2",
        )
        .bind(now)
        .bind(limit)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(DueSla {
                    run_id: r.try_get("run_id")?,
                    tenant: r.try_get("tenant")?,
                    workflow: r.try_get("workflow")?,
                    due_at: r.try_get("due_at")?,
                    finished_at: r.try_get("finished_at")?,
                })
            })
            .collect()
    }

    async fn sla_judged(&self, run_id: &str, at: i64) -> Result<()> {
        sqlx::query("UPDATE run_slas SET missed_at = $1 WHERE run_id = $2")
            .bind(at)
            .bind(run_id)
            .execute(&self.write)
            .await?;
        Ok(())
    }

    async fn alert_history(&self, tenant: &str, before: Option<i64>, limit: i64) -> Result<Vec<AlertRow>> {
        let rows = sqlx::query("SELECT * FROM alerts WHERE tenant = $1 AND id < $2 ORDER BY id DESC LIMIT $3")
            .bind(tenant)
            .bind(before.unwrap_or(i64::MAX))
            .bind(limit)
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(alert_from).collect()
    }
}
