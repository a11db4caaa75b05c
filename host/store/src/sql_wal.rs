//! The SQLite store's WAL is checkpointed by a task of its own, not by the
//! commits that fill it.

use std::sync::Weak;
use std::time::Duration;

use sqlx::{AnyPool, Row};

/// How often the background checkpointer moves the WAL's pages into the
/// database file, and when it makes the WAL start over.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checkpoints {
    /// Between two checkpoints (250 ms).
    pub every: Duration,
    /// Frames in the WAL past which the rest is copied with writes held
    /// off, so that the WAL starts over (4,096: 16 MiB of 4 KiB pages).
    pub restart_after_frames: i64,
}

impl Default for Checkpoints {
    fn default() -> Self {
        Checkpoints { every: Duration::from_millis(250), restart_after_frames: 4096 }
    }
}

impl Checkpoints {
    /// Checkpoints a SQLite store's WAL every [`Checkpoints::every`], for
    /// as long as `alive` can be upgraded.
    ///
    /// SQLite's own automatic checkpoint runs inside the commit that
    /// crosses 1,000 pages of WAL, on the committing connection: the
    /// engine's step then waited for the copy and two fsyncs (4-5 ms on
    /// this machine's disk, about once in every run of a chain of 40, whose
    /// hops take ~0.25 ms). A passive checkpoint on a connection of `read`
    /// runs beside the writer, which goes on appending to the WAL meanwhile.
    ///
    /// The WAL starts over from its beginning only when a write begins with
    /// every frame copied, which a checkpoint beside a busy writer never
    /// leaves it with: the writer appends while it copies (60 runs of a
    /// chain of 40 left 143 MB of WAL). So once the WAL holds
    /// [`Checkpoints::restart_after_frames`], the few frames the passive
    /// checkpoint left are copied on the connection of `write`, the store's
    /// one writer, which holds every write off for that long; the next
    /// write starts the WAL over (and `journal_size_limit` cuts its file
    /// back).
    pub(crate) fn start(self, read: AnyPool, write: AnyPool, alive: Weak<()>) {
        tokio::spawn(async move {
            let mut every = tokio::time::interval(self.every);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                if alive.strong_count() == 0 || read.is_closed() || write.is_closed() {
                    return;
                }
                match checkpoint(&read).await {
                    Ok(frames) if frames >= self.restart_after_frames => {
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

    use super::Checkpoints;
    use crate::*;

    /// An event's data of about `bytes` bytes.
    fn padding(bytes: usize) -> String {
        format!("{{\"pad\":\"{}\"}}", "x".repeat(bytes))
    }

    /// An event that only takes room.
    fn filler(at: i64, data: &str) -> NewEvent {
        NewEvent {
            tenant: "wal-test".into(),
            at,
            kind: "filler".into(),
            workflow: None,
            run_id: None,
            task: None,
            data: data.to_owned(),
        }
    }

    /// What a commit appends to the WAL reaches the database file without
    /// any commit checkpointing it (they never do, `wal_autocheckpoint=0`).
    #[tokio::test]
    async fn the_wal_is_checkpointed_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dagr.db");
        let store = SqlStore::open_sqlite(&path, Synchronous::Normal).await.unwrap();
        let before = std::fs::metadata(&path).unwrap().len();
        let data = padding(500);
        let events = (0..4000).map(|i| filler(i, &data)).collect();
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

    /// The WAL header's checkpoint sequence number, which SQLite counts up
    /// each time the WAL starts over (bytes 12-15, big-endian).
    fn wal_restarts(dir: &std::path::Path) -> u32 {
        use std::io::Read;
        let mut header = [0u8; 16];
        std::fs::File::open(dir.join("dagr.db-wal")).unwrap().read_exact(&mut header).unwrap();
        u32::from_be_bytes([header[12], header[13], header[14], header[15]])
    }

    /// A writer that never pauses still sees the WAL start over: with a
    /// checkpoint every 20 ms and a restart past 256 frames (1 MiB), 16 MB
    /// or more written commit after commit for at least 30 ticks see it
    /// start over again and again (without the copy on the writer's
    /// connection, not once: the WAL grew to twice what was written).
    #[tokio::test]
    async fn the_wal_starts_over_under_a_writer_that_never_pauses() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dagr.db");
        let checkpoints = Checkpoints { every: Duration::from_millis(20), restart_after_frames: 256 };
        let store = SqlStore::open_sqlite_with(&path, Synchronous::Normal, checkpoints).await.unwrap();
        let data = padding(1000);
        let started = std::time::Instant::now();
        let (mut written, mut commit, mut first) = (0usize, 0i64, None);
        while written < 16 << 20 || started.elapsed() < 30 * checkpoints.every {
            let events = (0..100).map(|i| filler(commit * 100 + i, &data)).collect();
            store.commit(WriteBatch { events, ..WriteBatch::default() }).await.unwrap();
            first = first.or_else(|| Some(wal_restarts(dir.path())));
            written += 100 * data.len();
            commit += 1;
        }
        let restarts = wal_restarts(dir.path()) - first.unwrap();
        assert!(restarts >= 3, "the WAL started over {restarts} times while {written} bytes were written");
    }
}
