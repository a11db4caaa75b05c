//! The SQLite store's WAL is checkpointed by a task of its own, not by the
//! commits that fill it.

use std::sync::Weak;
use std::time::Duration;

use sqlx::{AnyPool, Row};

/// How often the background checkpointer moves the WAL's pages into the
/// database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// Frames in the WAL (of 4 KiB pages: 16 MiB) past which the checkpointer
/// copies the rest with writes held off, so that the WAL starts over.
const RESTART_AFTER_FRAMES: i64 = 4096;

/// Checkpoints a SQLite store's WAL every [`CHECKPOINT_EVERY`], for as
/// long as `alive` can be upgraded.
///
/// SQLite's own automatic checkpoint runs inside the commit that crosses
/// 1,000 pages of WAL, on the committing connection: the engine's step
/// then waited for the copy and two fsyncs (4-5 ms on this machine's disk,
/// about once in every run of a chain of 40, whose hops take ~0.25 ms). A
/// passive checkpoint on a connection of `read` runs beside the writer,
/// which goes on appending to the WAL meanwhile.
///
/// The WAL starts over from its beginning only when a write begins with
/// every frame copied, which a checkpoint beside a busy writer never
/// leaves it with: the writer appends while it copies (a chain of 40 runs
/// left 140 MB of WAL after 60 runs). So once the WAL holds
/// [`RESTART_AFTER_FRAMES`], the few frames the passive checkpoint left
/// are copied on the connection of `write`, the store's one writer, which
/// holds every write off for that long; the next write starts the WAL over
/// (and `journal_size_limit` cuts its file back).
pub(crate) fn checkpoint_in_background(read: AnyPool, write: AnyPool, alive: Weak<()>) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(CHECKPOINT_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if alive.strong_count() == 0 || read.is_closed() || write.is_closed() {
                return;
            }
            match checkpoint(&read).await {
                Ok(frames) if frames >= RESTART_AFTER_FRAMES => {
                    if let Err(e) = checkpoint(&write).await {
                        tracing::warn!(error = %e, "cannot checkpoint the SQLite WAL; will try again");
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "cannot checkpoint the SQLite WAL; will try again"),
            }
        }
    });
}

/// A passive checkpoint on a connection of `pool`; the frames the WAL held.
async fn checkpoint(pool: &AnyPool) -> Result<i64, sqlx::Error> {
    let row = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").fetch_one(pool).await?;
    // (busy, frames in the WAL, frames copied); -1 when not in WAL mode.
    row.try_get::<i64, _>(1)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use super::CHECKPOINT_EVERY;
    use crate::*;

    /// What a commit appends to the WAL reaches the database file without
    /// any commit checkpointing it (they never do, `wal_autocheckpoint=0`).
    #[tokio::test]
    async fn the_wal_is_checkpointed_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dagr.db");
        let store = SqlStore::open_sqlite(&path, Synchronous::Normal).await.unwrap();
        let before = std::fs::metadata(&path).unwrap().len();
        let events = (0..4000)
            .map(|i| NewEvent {
                tenant: "wal-test".into(),
                at: i,
                kind: "filler".into(),
                workflow: None,
                run_id: None,
                task: None,
                data: format!("{{\"pad\":\"{}\"}}", "x".repeat(500)),
            })
            .collect();
        store.commit(WriteBatch { events, ..WriteBatch::default() }).await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let after = std::fs::metadata(&path).unwrap().len();
            if after > before + (1 << 20) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the database file stayed at {after} bytes (was {before})");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(store.events("wal-test", None, 0, 10_000).await.unwrap().len(), 4000);
    }

    /// A writer that never pauses still sees the WAL start over: after
    /// 96 MB or more written commit after commit, for at least six of the
    /// checkpointer's ticks, the WAL file holds less than half of it
    /// (without starting over, it would hold all of it and more).
    #[tokio::test]
    async fn the_wal_starts_over_under_a_writer_that_never_pauses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dagr.db");
        let store = SqlStore::open_sqlite(&path, Synchronous::Normal).await.unwrap();
        let data = format!("{{\"pad\":\"{}\"}}", "x".repeat(1000));
        let started = std::time::Instant::now();
        let (mut written, mut commit) = (0usize, 0i64);
        while written < 96 << 20 || started.elapsed() < 6 * CHECKPOINT_EVERY {
            let events = (0..1000)
                .map(|i| NewEvent {
                    tenant: "wal-test".into(),
                    at: commit * 1000 + i,
                    kind: "filler".into(),
                    workflow: None,
                    run_id: None,
                    task: None,
                    data: data.clone(),
                })
                .collect();
            store.commit(WriteBatch { events, ..WriteBatch::default() }).await.unwrap();
            written += 1000 * data.len();
            commit += 1;
        }
        let wal = std::fs::metadata(dir.path().join("dagr.db-wal")).unwrap().len() as usize;
        assert!(wal < written / 2, "the WAL file holds {wal} bytes after {written} bytes written");
    }
}
