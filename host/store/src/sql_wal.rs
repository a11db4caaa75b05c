//! The SQLite store's WAL is checkpointed by a task of its own, not by the
//! commits that fill it.

use std::sync::Weak;
use std::time::Duration;

use sqlx::AnyPool;

/// How often the background checkpointer moves the WAL's pages into the
/// database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// Checkpoints a SQLite store's WAL every [`CHECKPOINT_EVERY`] on a
/// connection of `read`, for as long as `alive` can be upgraded.
///
/// SQLite's own automatic checkpoint runs inside the commit that crosses
/// 1,000 pages of WAL, on the committing connection: the engine's step
/// then waited for the copy and two fsyncs (4-5 ms on this machine's disk,
/// about once in every run of a chain of 40, whose hops take ~0.25 ms). A
/// passive checkpoint on another connection runs beside the writer, which
/// goes on appending to the WAL meanwhile.
pub(crate) fn checkpoint_in_background(read: AnyPool, alive: Weak<()>) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(CHECKPOINT_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if alive.strong_count() == 0 || read.is_closed() {
                return;
            }
            if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&read).await {
                tracing::warn!(error = %e, "cannot checkpoint the SQLite WAL; will try again");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

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
}
