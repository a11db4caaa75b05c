//! Storage left by a crash: a partition is dropped index row first, then
//! its tables (PostgreSQL) or its file (SQLite), so a process killed
//! between the two leaves storage that nothing lists and nothing reads.
//! The sweep finds it by name and removes it.
//!
//! It lists the storage before it reads the index: a partition's index row
//! commits before its storage is made, so storage seen first belongs to a
//! row the later read sees, unless that row is gone.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use sqlx::Row;

use crate::sql::Backend;
use crate::{Error, Result, SqlStore};

/// The partition id in a PostgreSQL cold table's name (`cold_p<id>_<table>`).
fn table_partition(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("cold_p")?;
    let (id, table) = rest.split_once('_')?;
    (!table.is_empty()).then_some(())?;
    id.parse().ok()
}

/// The partition id in a SQLite archive file's name
/// (`<period>-p<id>.db`, with its `-journal` or `-wal`).
fn file_partition(name: &str) -> Option<i64> {
    let stem = name
        .strip_suffix(".db")
        .or_else(|| name.strip_suffix(".db-journal"))
        .or_else(|| name.strip_suffix(".db-wal"))?;
    let (_, id) = stem.rsplit_once("-p")?;
    id.parse().ok()
}

/// Files under `dir/<tenant>/` that are some partition's, with its id.
fn partition_files(dir: &Path) -> Result<Vec<(PathBuf, i64)>> {
    let read = |dir: &Path| {
        std::fs::read_dir(dir)
            .map_err(|e| Error::Invalid(format!("cannot list the archive directory {}: {e}", dir.display())))
    };
    let mut found = Vec::new();
    if !dir.exists() {
        return Ok(found);
    }
    for tenant in read(dir)? {
        let tenant = tenant.map_err(|e| Error::Invalid(format!("cannot list {}: {e}", dir.display())))?.path();
        if !tenant.is_dir() {
            continue;
        }
        for file in read(&tenant)? {
            let path = file.map_err(|e| Error::Invalid(format!("cannot list {}: {e}", tenant.display())))?.path();
            if let Some(id) = path.file_name().and_then(|n| n.to_str()).and_then(file_partition) {
                found.push((path, id));
            }
        }
    }
    Ok(found)
}

impl SqlStore {
    /// Removes the storage of partitions the index no longer lists; what
    /// went (table names or file paths).
    pub(crate) async fn sweep_orphans(&self) -> Result<Vec<String>> {
        match self.backend {
            Backend::Postgres => {
                let rows = sqlx::query(
                    "SELECT tablename::text AS tablename FROM pg_tables \
                     WHERE schemaname = current_schema() AND tablename LIKE 'cold\\_p%'",
                )
                .fetch_all(&self.write)
                .await?;
                let mut tables: Vec<(String, i64)> = Vec::new();
                for row in &rows {
                    let name: String = row.try_get("tablename")?;
                    if let Some(id) = table_partition(&name) {
                        tables.push((name, id));
                    }
                }
                let listed = self.listed_partitions().await?;
                let mut swept = Vec::new();
                for (table, _) in tables.into_iter().filter(|(_, id)| !listed.contains(id)) {
                    sqlx::query(&format!("DROP TABLE IF EXISTS \"{table}\"")).execute(&self.write).await?;
                    swept.push(table);
                }
                Ok(swept)
            }
            Backend::Sqlite => {
                let Some(dir) = self.archive_dir.as_ref() else { return Ok(Vec::new()) };
                let files = partition_files(dir)?;
                let listed = self.listed_partitions().await?;
                let mut swept = Vec::new();
                for (file, _) in files.into_iter().filter(|(_, id)| !listed.contains(id)) {
                    match std::fs::remove_file(&file) {
                        Ok(()) => swept.push(file.display().to_string()),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(Error::Invalid(format!("cannot remove {}: {e}", file.display()))),
                    }
                }
                Ok(swept)
            }
        }
    }

    async fn listed_partitions(&self) -> Result<BTreeSet<i64>> {
        let rows = sqlx::query("SELECT id FROM archive_partitions").fetch_all(&self.write).await?;
        rows.iter().map(|r| Ok(r.try_get::<i64, _>("id")?)).collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::archive::{ArchiveStore, Period};
    use crate::conformance_archive::{NOV, OCT, finished};

    /// A partition dropped by a process killed between its index row and
    /// its storage: the sweep removes that storage, and nothing else.
    async fn a_partition_left_by_a_crash_is_swept(store: &SqlStore, p: &str) {
        let tenant = format!("{p}sweep");
        let (a, b) = (format!("{p}sweep-a"), format!("{p}sweep-b"));
        finished(store, &tenant, &a, OCT).await.unwrap();
        finished(store, &tenant, &b, NOV).await.unwrap();
        let now = NOV + 86_400_000;
        assert_eq!(store.carry_over(&tenant, now, Period::Month, 100, now).await.unwrap().moved, 2);
        let parts = store.partitions(Some(&tenant)).await.unwrap();
        assert_eq!(parts.len(), 2);
        // The crash: the October partition's index row went, its storage stayed.
        sqlx::query("DELETE FROM archive_partitions WHERE id = $1")
            .bind(parts[0].id)
            .execute(&store.write)
            .await
            .unwrap();
        // The partition a swept table or file was (not a substring of its
        // path: a temporary directory's random name may hold `p2`).
        let of = |swept: &String| {
            let name = Path::new(swept).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            table_partition(&name).or_else(|| file_partition(&name))
        };
        let swept = store.sweep_orphan_partitions().await.unwrap();
        let mine = Some(parts[0].id);
        assert!(!swept.is_empty() && swept.iter().all(|s| of(s) == mine), "its storage went: {swept:?}");
        assert!(store.sweep_orphan_partitions().await.unwrap().iter().all(|s| of(s) != mine), "once");
        let (cold, _) = store.archived_run(&tenant, &b).await.unwrap().expect("the listed partition stays");
        assert_eq!(cold.id, b);
        assert!(store.archived_run(&tenant, &a).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn sqlite_storage_left_by_a_crash_is_swept() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqlStore::open_sqlite(&dir.path().join("dagr.db"), crate::Synchronous::Normal).await.unwrap();
        a_partition_left_by_a_crash_is_swept(&store, "").await;
        let left: Vec<_> = partition_files(&dir.path().join("archive")).unwrap();
        assert_eq!(left.len(), 1, "one partition's file stays: {left:?}");
    }

    #[tokio::test]
    async fn postgres_storage_left_by_a_crash_is_swept() {
        let Some(store) = crate::sql::postgres_for_tests().await else { return };
        a_partition_left_by_a_crash_is_swept(&store, &format!("s{}-", std::process::id())).await;
    }

    #[test]
    fn names_of_partition_storage_give_their_id() {
        assert_eq!(table_partition("cold_p12_runs"), Some(12));
        assert_eq!(table_partition("cold_p12_task_outputs"), Some(12));
        assert_eq!(table_partition("cold_p12_"), None);
        assert_eq!(table_partition("cold_px_runs"), None);
        assert_eq!(table_partition("runs"), None);
        assert_eq!(file_partition("2026-w03-p7.db"), Some(7));
        assert_eq!(file_partition("2026-q1-p70.db-wal"), Some(70));
        assert_eq!(file_partition("2026-q1-p70.db-journal"), Some(70));
        assert_eq!(file_partition("notes.txt"), None);
        assert_eq!(file_partition("x.db"), None);
    }
}
