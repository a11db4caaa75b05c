//! The schema's migrations, embedded in the binary (by `build.rs`), and the
//! [`MigrationSource`] that hands them to sqlx's migrator.
//!
//! sqlx's `migrate!` macro does the same at compile time, but it needs sqlx's
//! macros, which build sqlx's drivers a second time for the compiler (about
//! two minutes of a cold build). The migrations it makes are the same:
//! version and description from the file name, the checksum (SHA-384 of the
//! text) from [`Migration::new`], so databases migrated by either agree (a
//! unit test compares them with sqlx's own reading of the folders).

use std::borrow::Cow;
use std::pin::Pin;

use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/migrations.rs"));
}

/// One dialect's migrations: (file name, text), in file-name order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Embedded(&'static [(&'static str, &'static str)]);

pub(crate) const SQLITE: Embedded = Embedded(embedded::SQLITE);
pub(crate) const POSTGRES: Embedded = Embedded(embedded::POSTGRES);

impl Embedded {
    /// The migrations as sqlx reads a folder of them: `<VERSION>_<DESCRIPTION>.sql`,
    /// sorted by version.
    fn migrations(self) -> Result<Vec<Migration>, String> {
        let mut migrations = Vec::with_capacity(self.0.len());
        for &(name, sql) in self.0 {
            let Some((version, rest)) = name.split_once('_') else {
                return Err(format!("migration {name}: expected <VERSION>_<DESCRIPTION>.sql"));
            };
            let version: i64 =
                version.parse().map_err(|_| format!("migration {name}: `{version}` is not an integer version"))?;
            let kind = MigrationType::from_filename(rest);
            let description = rest.trim_end_matches(kind.suffix()).replace('_', " ");
            let no_tx = sql.starts_with("-- no-transaction");
            migrations.push(Migration::new(version, Cow::Owned(description), kind, Cow::Borrowed(sql), no_tx));
        }
        migrations.sort_by_key(|m| m.version);
        Ok(migrations)
    }

    /// A migrator of these migrations.
    pub(crate) async fn migrator(self) -> Result<Migrator, sqlx::migrate::MigrateError> {
        Migrator::new(self).await
    }
}

impl MigrationSource<'static> for Embedded {
    fn resolve(self) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, BoxDynError>> + Send + 'static>> {
        Box::pin(async move { self.migrations().map_err(BoxDynError::from) })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The embedded migrations are what sqlx reads from the folders (and
    /// what its `migrate!` macro embedded before): same versions,
    /// descriptions, kinds, checksums and texts.
    #[tokio::test]
    async fn embedded_migrations_are_sqlx_s_reading_of_the_folders() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        for (dialect, embedded) in [("sqlite", SQLITE), ("postgres", POSTGRES)] {
            let ours = embedded.migrator().await.unwrap();
            let theirs = Migrator::new(root.join(dialect)).await.unwrap();
            let view = |m: &Migrator| {
                m.iter()
                    .map(|m| {
                        (
                            m.version,
                            m.description.to_string(),
                            m.migration_type,
                            m.checksum.to_vec(),
                            m.no_tx,
                            m.sql.to_string(),
                        )
                    })
                    .collect::<Vec<_>>()
            };
            assert!(!view(&theirs).is_empty(), "{dialect}: no migrations found");
            assert_eq!(view(&ours), view(&theirs), "{dialect}");
        }
    }

    /// A database made before tasks and attempts were clustered keeps every
    /// row, column, default and index through the rebuild, and its two
    /// tables are then `WITHOUT ROWID`.
    #[tokio::test]
    async fn tasks_and_attempts_are_rebuilt_clustered_with_their_rows_and_indexes() {
        use sqlx::{Executor, Row};
        sqlx::any::install_default_drivers();
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("old.db").display());
        let pool = sqlx::any::AnyPoolOptions::new().max_connections(1).connect(&url).await.unwrap();
        let mut before = SQLITE.migrator().await.unwrap();
        let all = before.migrations.to_vec();
        before.migrations = all.iter().filter(|m| m.version < 19).cloned().collect::<Vec<_>>().into();
        before.run(&pool).await.unwrap();

        let shape = |pool: sqlx::AnyPool| async move {
            let mut out = Vec::new();
            for table in ["tasks", "attempts"] {
                for row in sqlx::query(&format!(
                    "SELECT name, type, \"notnull\", COALESCE(dflt_value, ''), pk FROM pragma_table_info('{table}') ORDER BY cid"
                ))
                .fetch_all(&pool)
                .await
                .unwrap()
                {
                    out.push(format!(
                        "{table}.{} {} notnull={} default={} pk={}",
                        row.get::<String, _>(0),
                        row.get::<String, _>(1),
                        row.get::<i64, _>(2),
                        row.get::<String, _>(3),
                        row.get::<i64, _>(4)
                    ));
                }
                for row in sqlx::query(&format!(
                    "SELECT sql FROM sqlite_schema WHERE type = 'index' AND tbl_name = '{table}' AND sql IS NOT NULL ORDER BY name"
                ))
                .fetch_all(&pool)
                .await
                .unwrap()
                {
                    out.push(row.get::<String, _>(0));
                }
            }
            out
        };
        let old_shape = shape(pool.clone()).await;
        assert!(old_shape.iter().any(|l| l.contains("tasks_by_name")), "{old_shape:?}");
        assert!(old_shape.iter().any(|l| l.contains("attempts_running")), "{old_shape:?}");

        pool.execute(
            "INSERT INTO tasks (run_id, idx, name, state, attempts, error, lost, child_run) \
             VALUES ('r1', 0, 'extract', 'failed', 2, 'boom', 1, 'c1'), ('r1', 1, 'load', 'pending', 0, NULL, 0, NULL); \
             INSERT INTO tasks (run_id, idx, name, state) VALUES ('r2', 0, 'only', 'queued'); \
             INSERT INTO attempts (run_id, task_idx, number, task, state, failure_kind, message, worker, epoch, started_at) \
             VALUES ('r1', 0, 1, 'extract', 'failed', 'trap', 'boom', 'local', 3, 100), \
                    ('r1', 0, 2, 'extract', 'running', NULL, NULL, 'w2', 3, 200);",
        )
        .await
        .unwrap();
        let rows = |pool: sqlx::AnyPool| async move {
            let mut out = Vec::new();
            for sql in [
                "SELECT run_id || '/' || idx || '/' || name || '/' || state || '/' || attempts || '/' || failures || '/' \
                 || forced || '/' || COALESCE(error, '-') || '/' || lost || '/' || COALESCE(child_run, '-') \
                 FROM tasks ORDER BY run_id, idx",
                "SELECT run_id || '/' || task_idx || '/' || number || '/' || state || '/' || COALESCE(message, '-') \
                 || '/' || charged || '/' || worker || '/' || epoch || '/' || started_at FROM attempts ORDER BY 1",
            ] {
                for row in sqlx::query(sql).fetch_all(&pool).await.unwrap() {
                    out.push(row.get::<String, _>(0));
                }
            }
            out
        };
        let old_rows = rows(pool.clone()).await;
        assert_eq!(old_rows.len(), 5);

        // Through 0019 (a later migration drops `attempts_running`).
        let mut after = SQLITE.migrator().await.unwrap();
        after.migrations = all.iter().filter(|m| m.version <= 19).cloned().collect::<Vec<_>>().into();
        after.run(&pool).await.unwrap();
        assert_eq!(rows(pool.clone()).await, old_rows);
        assert_eq!(shape(pool.clone()).await, old_shape);
        for table in ["tasks", "attempts"] {
            let sql: String =
                sqlx::query(&format!("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = '{table}'"))
                    .fetch_one(&pool)
                    .await
                    .unwrap()
                    .get(0);
            assert!(sql.ends_with("WITHOUT ROWID"), "{table}: {sql}");
        }
        // The rebuilt tables still refuse what they refused.
        let duplicate =
            pool.execute("INSERT INTO tasks (run_id, idx, name, state) VALUES ('r1', 2, 'load', 'pending')").await;
        assert!(duplicate.is_err(), "tasks_by_name is unique");
        let duplicate =
            pool.execute("INSERT INTO tasks (run_id, idx, name, state) VALUES ('r1', 1, 'other', 'pending')").await;
        assert!(duplicate.is_err(), "(run_id, idx) is the key");
    }
}
