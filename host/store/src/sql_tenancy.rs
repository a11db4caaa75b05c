//! [`TenancyStore`] on [`SqlStore`]: small single-row statements with `$N`
//! placeholders, which both backends accept.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::sql_script::{Arg, bind_all, numbered_for};
use crate::tenancy::*;
use crate::{Result, RunKind, SqlStore};

fn tenant_from(row: &AnyRow) -> Result<TenantRow> {
    Ok(TenantRow {
        name: row.try_get("name")?,
        limits: row.try_get("limits")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

fn token_from(row: &AnyRow) -> Result<TokenRow> {
    Ok(TokenRow {
        id: row.try_get("id")?,
        tenant: row.try_get("tenant")?,
        hash: row.try_get("hash")?,
        scopes: row.try_get("scopes")?,
        label: row.try_get("label")?,
        created_at: row.try_get("created_at")?,
        revoked_at: row.try_get("revoked_at")?,
        created_by: row.try_get("created_by")?,
    })
}

fn audit_from(row: &AnyRow) -> Result<AuditRow> {
    Ok(AuditRow {
        seq: row.try_get("seq")?,
        tenant: row.try_get("tenant")?,
        at: row.try_get("at")?,
        token_id: row.try_get("token_id")?,
        action: row.try_get("action")?,
        target: row.try_get("target")?,
        detail: row.try_get("detail")?,
    })
}

const TOKEN_COLUMNS: &str = "id, tenant, hash, scopes, label, created_at, revoked_at, created_by";

#[async_trait]
impl TenancyStore for SqlStore {
    async fn create_tenant(&self, tenant: &TenantRow) -> Result<bool> {
        let n = sqlx::query(
            "INSERT INTO tenants (name, limits, created_at, updated_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .bind(&tenant.name)
        .bind(&tenant.limits)
        .bind(tenant.created_at)
        .bind(tenant.updated_at)
        .execute(&self.write)
        .await?
        .rows_affected();
        Ok(n > 0)
    }

    async fn get_tenant(&self, name: &str) -> Result<Option<TenantRow>> {
        let row = sqlx::query("SELECT name, limits, created_at, updated_at FROM tenants WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(tenant_from).transpose()
    }

    async fn list_tenants(&self) -> Result<Vec<TenantRow>> {
        let rows = sqlx::query("SELECT name, limits, created_at, updated_at FROM tenants ORDER BY name")
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(tenant_from).collect()
    }

    async fn update_tenant(&self, name: &str, limits: &str, now: i64) -> Result<bool> {
        let n = sqlx::query("UPDATE tenants SET limits = $2, updated_at = $3 WHERE name = $1")
            .bind(name)
            .bind(limits)
            .bind(now)
            .execute(&self.write)
            .await?
            .rows_affected();
        Ok(n > 0)
    }

    async fn create_token(&self, token: &TokenRow) -> Result<bool> {
        let n = sqlx::query(&format!(
            "INSERT INTO tokens ({TOKEN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING"
        ))
        .bind(&token.id)
        .bind(&token.tenant)
        .bind(&token.hash)
        .bind(&token.scopes)
        .bind(&token.label)
        .bind(token.created_at)
        .bind(token.revoked_at)
        .bind(token.created_by.clone())
        .execute(&self.write)
        .await?
        .rows_affected();
        Ok(n > 0)
    }

    async fn get_token(&self, id: &str) -> Result<Option<TokenRow>> {
        let row = sqlx::query(&format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(token_from).transpose()
    }

    async fn list_tokens(&self, tenant: &str) -> Result<Vec<TokenRow>> {
        let rows =
            sqlx::query(&format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE tenant = $1 ORDER BY created_at, id"))
                .bind(tenant)
                .fetch_all(&self.read)
                .await?;
        rows.iter().map(token_from).collect()
    }

    async fn revoke_token(&self, tenant: &str, id: &str, now: i64) -> Result<bool> {
        let n = sqlx::query("UPDATE tokens SET revoked_at = $3 WHERE tenant = $1 AND id = $2 AND revoked_at IS NULL")
            .bind(tenant)
            .bind(id)
            .bind(now)
            .execute(&self.write)
            .await?
            .rows_affected();
        Ok(n > 0)
    }

    async fn put_secret(&self, tenant: &str, name: &str, value: &str, now: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO secrets (tenant, name, value, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (tenant, name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        )
        .bind(tenant)
        .bind(name)
        .bind(value)
        .bind(now)
        .execute(&self.write)
        .await?;
        Ok(())
    }

    async fn delete_secret(&self, tenant: &str, name: &str) -> Result<bool> {
        let n = sqlx::query("DELETE FROM secrets WHERE tenant = $1 AND name = $2")
            .bind(tenant)
            .bind(name)
            .execute(&self.write)
            .await?
            .rows_affected();
        Ok(n > 0)
    }

    async fn list_secrets(&self, tenant: &str) -> Result<Vec<SecretMeta>> {
        let rows = sqlx::query("SELECT name, updated_at FROM secrets WHERE tenant = $1 ORDER BY name")
            .bind(tenant)
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(|r| Ok(SecretMeta { name: r.try_get("name")?, updated_at: r.try_get("updated_at")? })).collect()
    }

    async fn tenant_secrets(&self, tenant: &str) -> Result<Vec<(String, String)>> {
        let rows = sqlx::query("SELECT name, value FROM secrets WHERE tenant = $1 ORDER BY name")
            .bind(tenant)
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(|r| Ok((r.try_get("name")?, r.try_get("value")?))).collect()
    }

    async fn secrets_page(&self, after: Option<(&str, &str)>, limit: i64) -> Result<Vec<(String, String, String)>> {
        let rows = match after {
            None => {
                sqlx::query("SELECT tenant, name, value FROM secrets ORDER BY tenant, name LIMIT $1")
                    .bind(limit)
                    .fetch_all(&self.read)
                    .await?
            }
            Some((tenant, name)) => {
                sqlx::query(
                    "SELECT tenant, name, value FROM secrets WHERE tenant > $1 OR (tenant = $1 AND name > $2) \
                     ORDER BY tenant, name LIMIT $3",
                )
                .bind(tenant)
                .bind(name)
                .bind(limit)
                .fetch_all(&self.read)
                .await?
            }
        };
        rows.iter().map(|r| Ok((r.try_get("tenant")?, r.try_get("name")?, r.try_get("value")?))).collect()
    }

    async fn reseal_secret(&self, tenant: &str, name: &str, expected: &str, value: &str) -> Result<bool> {
        let n = sqlx::query("UPDATE secrets SET value = $4 WHERE tenant = $1 AND name = $2 AND value = $3")
            .bind(tenant)
            .bind(name)
            .bind(expected)
            .bind(value)
            .execute(&self.write)
            .await?
            .rows_affected();
        Ok(n > 0)
    }

    async fn append_audit(&self, entry: NewAudit) -> Result<i64> {
        let sql = numbered_for(self.backend, &format!("{AUDIT_INSERT} RETURNING seq"));
        let row = bind_all(&sql, audit_args(entry)).fetch_one(&self.write).await?;
        Ok(row.try_get("seq")?)
    }

    async fn list_audit(&self, tenant: &str, after_seq: i64, limit: i64) -> Result<Vec<AuditRow>> {
        let rows = sqlx::query(
            "SELECT seq, tenant, at, token_id, action, target, detail FROM audit \
             WHERE tenant = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(tenant)
        .bind(after_seq)
        .bind(limit)
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(audit_from).collect()
    }

    async fn drop_audit(&self, before: i64, limit: i64) -> Result<u64> {
        let done =
            sqlx::query("DELETE FROM audit WHERE seq IN (SELECT seq FROM audit WHERE at < $1 ORDER BY at LIMIT $2)")
                .bind(before)
                .bind(limit)
                .execute(&self.write)
                .await?;
        Ok(done.rows_affected())
    }

    async fn count_runs_since(&self, tenant: &str, kinds: &[RunKind], since_ms: i64) -> Result<RecentRuns> {
        if kinds.is_empty() {
            return Ok(RecentRuns::default());
        }
        let kinds_in = (0..kinds.len()).map(|i| format!("${}", i + 3)).collect::<Vec<_>>().join(",");
        let sql = format!(
            "SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM runs \
             WHERE tenant = $1 AND created_at >= $2 AND kind IN ({kinds_in})"
        );
        let mut query = sqlx::query(&sql).bind(tenant).bind(since_ms);
        for kind in kinds {
            query = query.bind(kind.as_str());
        }
        let row = query.fetch_one(&self.read).await?;
        Ok(RecentRuns { count: row.try_get("n")?, oldest: row.try_get("oldest")? })
    }

    async fn count_unfinished_runs(&self, tenant: &str) -> Result<i64> {
        // The predicate as `runs_unfinished` has it, so that the index serves.
        let row = sqlx::query(
            "SELECT COUNT(*) AS n FROM runs WHERE tenant = $1 AND state IN ('queued', 'waiting', 'running', 'paused')",
        )
        .bind(tenant)
        .fetch_one(&self.read)
        .await?;
        Ok(row.try_get("n")?)
    }
}

/// The insert of one audit entry (with `?` placeholders).
pub(crate) const AUDIT_INSERT: &str =
    "INSERT INTO audit (tenant, at, token_id, action, target, detail) VALUES (?, ?, ?, ?, ?, ?)";

pub(crate) fn audit_args(entry: NewAudit) -> Vec<Arg> {
    vec![
        Arg::Text(entry.tenant),
        Arg::I64(entry.at),
        Arg::Text(entry.token_id),
        Arg::Text(entry.action),
        Arg::Text(entry.target),
        Arg::Text(entry.detail),
    ]
}
