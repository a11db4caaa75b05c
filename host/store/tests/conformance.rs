//! The conformance suite on SQLite (PostgreSQL runs it in dagr-tests).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[tokio::test]
async fn sqlite_conformance() {
    let dir = tempfile::tempdir().unwrap();
    let store =
        dagr_store::SqlStore::open_sqlite(&dir.path().join("dagr.db"), dagr_store::Synchronous::Normal).await.unwrap();
    dagr_store::conformance::run_all(&store, "").await.unwrap();
}

/// The same suite on PostgreSQL, when a server is given (CI always gives one).
#[tokio::test]
async fn postgres_conformance() {
    let Ok(url) = std::env::var("DAGR_TEST_POSTGRES_URL") else {
        assert!(std::env::var("CI").is_err(), "CI must set DAGR_TEST_POSTGRES_URL");
        eprintln!("DAGR_TEST_POSTGRES_URL is not set; skipping the PostgreSQL conformance run");
        return;
    };
    let store = dagr_store::SqlStore::open_postgres(&url, 4, dagr_store::DEFAULT_IDLE_IN_TRANSACTION).await.unwrap();
    let prefix = format!("c{}-", std::process::id());
    dagr_store::conformance::run_all(&store, &prefix).await.unwrap();
}
