//! [`RegistryStore`] on [`SqlStore`].
//!
//! Every publish and delete first bumps the single row of
//! `plugin_generation`. Besides telling caches that the list changed, that
//! row lock orders publishes and deletes on PostgreSQL: a delete that
//! removes a blob no version uses any more cannot interleave with a publish
//! that is about to use it (the publish then sees the blob gone and says
//! [`PluginInsert::MissingBlob`]). SQLite has one writer, so it is ordered
//! anyway.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::registry::{PluginInsert, PluginRow, RegistryStore};
use crate::sql::SqlStore;
use crate::{Error, Result};

const PLUGIN_COLUMNS: &str = "tenant, name, version, sha256, description, params_schema, size, created_at";

fn plugin_from(row: &AnyRow) -> Result<PluginRow> {
    Ok(PluginRow {
        tenant: row.try_get("tenant")?,
        name: row.try_get("name")?,
        version: row.try_get("version")?,
        sha256: row.try_get("sha256")?,
        description: row.try_get("description")?,
        params_schema: row.try_get("params_schema")?,
        size: row.try_get("size")?,
        created_at: row.try_get("created_at")?,
    })
}

async fn bump_generation(conn: &mut sqlx::AnyConnection) -> Result<()> {
    let n = sqlx::query("UPDATE plugin_generation SET generation = generation + 1 WHERE id = 1")
        .execute(&mut *conn)
        .await?
        .rows_affected();
    if n == 1 { Ok(()) } else { Err(Error::Invalid("the plugin_generation row is missing".into())) }
}

async fn existing_sha256(
    conn: &mut sqlx::AnyConnection,
    tenant: &str,
    name: &str,
    version: &str,
) -> Result<Option<String>> {
    let row = sqlx::query("SELECT sha256 FROM plugins WHERE tenant = $1 AND name = $2 AND version = $3")
        .bind(tenant)
        .bind(name)
        .bind(version)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(row.map(|r| r.try_get("sha256")).transpose()?)
}

fn compare(existing: String, wanted: &str) -> PluginInsert {
    if existing == wanted { PluginInsert::Unchanged } else { PluginInsert::Conflict { sha256: existing } }
}

#[async_trait]
impl RegistryStore for SqlStore {
    async fn put_plugin_blob(&self, sha256: &str, bytes: &[u8], now: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO plugin_blobs (sha256, bytes, size, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        )
        .bind(sha256)
        .bind(bytes.to_vec())
        .bind(bytes.len() as i64)
        .bind(now)
        .execute(&self.write)
        .await?;
        Ok(())
    }

    async fn plugin_blob(&self, sha256: &str) -> Result<Option<Vec<u8>>> {
        let row = sqlx::query("SELECT bytes FROM plugin_blobs WHERE sha256 = $1")
            .bind(sha256)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|r| r.try_get::<Vec<u8>, _>("bytes")).transpose()?)
    }

    async fn insert_plugin(&self, row: &PluginRow) -> Result<PluginInsert> {
        let mut tx = self.write.begin().await?;
        // Published versions never change, so a version that exists needs
        // no lock to be compared.
        if let Some(existing) = existing_sha256(&mut tx, &row.tenant, &row.name, &row.version).await? {
            return Ok(compare(existing, &row.sha256));
        }
        bump_generation(&mut tx).await?;
        let blob = sqlx::query("SELECT 1 AS present FROM plugin_blobs WHERE sha256 = $1")
            .bind(&row.sha256)
            .fetch_optional(&mut *tx)
            .await?;
        if blob.is_none() {
            return Ok(PluginInsert::MissingBlob);
        }
        let inserted = sqlx::query(&format!(
            "INSERT INTO plugins ({PLUGIN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING"
        ))
        .bind(&row.tenant)
        .bind(&row.name)
        .bind(&row.version)
        .bind(&row.sha256)
        .bind(&row.description)
        .bind(row.params_schema.clone())
        .bind(row.size)
        .bind(row.created_at)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if inserted == 0 {
            // Published concurrently, between the check and the insert.
            let existing = existing_sha256(&mut tx, &row.tenant, &row.name, &row.version).await?;
            return Ok(existing.map_or(PluginInsert::MissingBlob, |e| compare(e, &row.sha256)));
        }
        tx.commit().await?;
        Ok(PluginInsert::Created)
    }

    async fn list_plugins(&self) -> Result<Vec<PluginRow>> {
        let rows = sqlx::query(&format!("SELECT {PLUGIN_COLUMNS} FROM plugins ORDER BY tenant, name, version"))
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(plugin_from).collect()
    }

    async fn plugins_generation(&self) -> Result<i64> {
        let row = sqlx::query("SELECT generation FROM plugin_generation WHERE id = 1").fetch_one(&self.read).await?;
        Ok(row.try_get("generation")?)
    }

    async fn delete_plugin(&self, tenant: &str, name: &str, version: &str) -> Result<bool> {
        let mut tx = self.write.begin().await?;
        bump_generation(&mut tx).await?;
        let Some(sha256) = existing_sha256(&mut tx, tenant, name, version).await? else {
            // Nothing changed: roll the generation back with the transaction.
            return Ok(false);
        };
        sqlx::query("DELETE FROM plugins WHERE tenant = $1 AND name = $2 AND version = $3")
            .bind(tenant)
            .bind(name)
            .bind(version)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "DELETE FROM plugin_blobs WHERE sha256 = $1 AND NOT EXISTS (SELECT 1 FROM plugins WHERE sha256 = $1)",
        )
        .bind(&sha256)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }
}
