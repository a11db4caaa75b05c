//! The simulation's model store checked against PostgreSQL: the writes a
//! simulated cluster made, with every fault, replayed on a real database
//! get the same answers (claims, fences, the scheduler's token) and leave
//! the same rows. (Against SQLite: `dagr_master::sim::model`'s own test.)

use dagr_master::sim::{SimConfig, model, run_journaled};
use dagr_store::{SqlStore, Synchronous};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulations_model_store_answers_as_postgres_does() {
    let mut replayed = 0;
    for seed in 100..104 {
        let prefix = format!("dagr_sim_model_{seed}");
        let Some(url) = crate::hostile_api::fresh_postgres_database(&prefix).await else { return };
        let store = SqlStore::open(&url, Synchronous::Normal).await.unwrap();
        let (outcome, journal) =
            tokio::task::spawn_blocking(move || run_journaled(seed, &SimConfig::default())).await.unwrap();
        outcome.unwrap_or_else(|f| panic!("{f}"));
        replayed += model::check_against(&journal, &store).await.unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        store.close().await;
    }
    assert!(replayed > 300, "only {replayed} operations");
}
