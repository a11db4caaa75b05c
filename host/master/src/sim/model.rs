//! The model store checked against a real one: a simulation's journal
//! (every write the model took, and what it answered) replayed on a real
//! store ([`dagr_store::SqlStore`] on SQLite or PostgreSQL) must get the
//! same answers — the same epochs from claims, the same runs fenced off,
//! the same scheduler fencing — and leave the same runs, tasks and
//! attempts.

use std::collections::BTreeMap;

use dagr_protocol::commands::Command;
use dagr_store::{EncodedCommand, Store};

use crate::engine::testkit::{FakeStore, StoreOp};

/// Replays `model`'s journal on `real` (an empty store); the number of
/// operations replayed, or the first difference.
pub async fn check_against(model: &FakeStore, real: &dyn Store) -> Result<usize, String> {
    let journal = model.journal.as_ref().ok_or("the simulation kept no journal")?;
    let admit = EncodedCommand::new(Command::Admit.kind(), Command::Admit.payload());
    let fail = |i: usize, what: String| format!("operation {i} of {}: {what}", journal.len());
    for (i, op) in journal.iter().enumerate() {
        match op {
            StoreOp::Create(new) => {
                real.create_runs(vec![new.clone()], Some(admit.clone())).await.map_err(|e| fail(i, e.to_string()))?;
            }
            StoreOp::Claim { id, node, epoch } => {
                let row = real.claim_run(id, node, 0).await.map_err(|e| fail(i, e.to_string()))?;
                let got = row.map(|r| r.epoch);
                if got != Some(*epoch) {
                    return Err(fail(i, format!("claiming run {id}: the model says epoch {epoch}, the store {got:?}")));
                }
            }
            StoreOp::Acquire { name, token, held } => {
                let got = real.acquire_singleton(name, "sim", *token, 0).await.map_err(|e| fail(i, e.to_string()))?;
                if got != *held {
                    return Err(fail(
                        i,
                        format!("duty {name} for token {token}: the model says {held}, the store {got}"),
                    ));
                }
            }
            StoreOp::Commit { batch, fenced, singleton_fenced } => {
                let committed = real.commit(batch.clone()).await.map_err(|e| fail(i, e.to_string()))?;
                let mut got = committed.fenced.clone();
                got.sort();
                if &got != fenced || committed.singleton_fenced != *singleton_fenced {
                    return Err(fail(
                        i,
                        format!(
                            "a commit: the model fenced {fenced:?} (scheduler: {singleton_fenced}), the store {got:?} \
                             (scheduler: {})",
                            committed.singleton_fenced
                        ),
                    ));
                }
            }
        }
    }
    for run in model.runs.values() {
        let id = &run.id;
        let real_run =
            real.get_run(id).await.map_err(|e| e.to_string())?.ok_or(format!("run {id} is not in the store"))?;
        let (model_row, real_row) = (
            (run.state, run.epoch, run.owner.clone(), run.kind, run.logical_time),
            (real_run.state, real_run.epoch, real_run.owner.clone(), real_run.kind, real_run.logical_time),
        );
        if model_row != real_row {
            return Err(format!("run {id}: the model has {model_row:?}, the store {real_row:?}"));
        }
        let tasks: Vec<_> = model.tasks.get(id).into_iter().flatten().map(|t| (t.idx, t.state, t.attempts)).collect();
        let real_tasks: Vec<_> = real
            .run_tasks(id)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|t| (t.idx, t.state, t.attempts))
            .collect();
        if tasks != real_tasks {
            return Err(format!("the tasks of run {id}: the model has {tasks:?}, the store {real_tasks:?}"));
        }
        let attempts: BTreeMap<(i64, i64), _> = model
            .attempts
            .values()
            .filter(|a| &a.run_id == id)
            .map(|a| ((a.task_idx, a.number), (a.state, a.epoch)))
            .collect();
        let real_attempts: BTreeMap<(i64, i64), _> = real
            .attempts(id, None)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|a| ((a.task_idx, a.number), (a.state, a.epoch)))
            .collect();
        if attempts != real_attempts {
            return Err(format!("the attempts of run {id}: the model has {attempts:?}, the store {real_attempts:?}"));
        }
    }
    let real_runs = real.active_runs().await.map_err(|e| e.to_string())?;
    if let Some(extra) = real_runs.iter().find(|r| !model.runs.contains_key(&r.id)) {
        return Err(format!("the store has a run the model has not: {}", extra.id));
    }
    Ok(journal.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{SimConfig, run_journaled};

    #[test]
    fn the_model_store_answers_as_sqlite_does() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut replayed = 0;
        for seed in 0..6 {
            let (outcome, model) = run_journaled(seed, &SimConfig::default());
            outcome.unwrap_or_else(|f| panic!("{f}"));
            let dir = tempfile::tempdir().unwrap();
            let checked = runtime.block_on(async {
                let path = dir.path().join("sim.db");
                let store = dagr_store::SqlStore::open_sqlite(&path, dagr_store::Synchronous::Normal).await.unwrap();
                check_against(&model, &store).await
            });
            replayed += checked.unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        }
        assert!(replayed > 300, "only {replayed} operations");
    }
}
