//! Conformance: a commit that admits a run under a limit counts the runs
//! the store has active (see [`crate::admission`]).

use crate::conformance::{check, run};
use crate::*;

/// Admissions past `max_active_runs` or a backfill's parallelism are
/// dropped with all their writes; a run the same step ends makes room; the
/// admissions of one step are taken in order.
pub(crate) async fn admissions(store: &dyn Store, p: &str) -> Result<()> {
    let tenant = format!("{p}lim");
    let id = |n: u32| format!("{p}lim{n}");
    let mut runs: Vec<NewRun> = (1..=6)
        .map(|n| NewRun {
            run: run(&id(n), &tenant, "wf", RunKind::Manual, n as i64),
            tasks: vec!["a".into()],
            sla_at: None,
        })
        .collect();
    for new in &mut runs[4..] {
        new.run.backfill_id = Some(format!("{p}bf"));
    }
    store.create_runs(runs, None).await?;
    let admit = |n: u32, max: Option<u32>, backfill: Option<u32>| Admission {
        run_id: id(n),
        tenant: tenant.clone(),
        workflow: "wf".into(),
        max_active_runs: max,
        backfill: backfill.map(|parallel| (format!("{p}bf"), parallel)),
        sole: None,
    };
    let to = |n: u32, state: RunState| RunWrite {
        id: id(n),
        state,
        started_at: Some(10),
        finished_at: None,
        updated_at: 10,
    };
    let step = |writes: Vec<RunWrite>, admissions: Vec<Admission>| {
        let mut fences: Vec<(String, i64)> = writes.iter().map(|w| (w.id.clone(), 0)).collect();
        fences.dedup();
        let events = writes
            .iter()
            .map(|w| NewEvent {
                tenant: tenant.clone(),
                at: 10,
                kind: "run.state".into(),
                run_id: Some(w.id.clone()),
                workflow: Some("wf".into()),
                task: None,
                data: "{}".into(),
            })
            .collect();
        WriteBatch { runs: writes, fences, admissions, events, ..WriteBatch::default() }
    };
    let state = |n: u32| async move { Ok::<_, Error>(store.get_run(&id(n)).await?.map(|r| r.state)) };

    let first = store.commit(step(vec![to(1, RunState::Running)], vec![admit(1, Some(1), None)])).await?;
    check(first.over_limit.is_empty() && state(1).await? == Some(RunState::Running), "an admission within its limit")?;

    let second = store.commit(step(vec![to(2, RunState::Running)], vec![admit(2, Some(1), None)])).await?;
    check(second.over_limit == [id(2)], &format!("an admission past max_active_runs is refused: {second:?}"))?;
    check(state(2).await? == Some(RunState::Queued), "a refused admission's run stays queued")?;
    let events = store.events(&tenant, Some(&id(2)), 0, 10).await?;
    check(events.is_empty(), &format!("nothing of a refused admission is written: {events:?}"))?;

    let ended = store
        .commit(step(vec![to(1, RunState::Succeeded), to(2, RunState::Running)], vec![admit(2, Some(1), None)]))
        .await?;
    check(ended.over_limit.is_empty(), &format!("a run the same step ends makes room: {ended:?}"))?;

    let two = store
        .commit(step(
            vec![to(3, RunState::Running), to(4, RunState::Running)],
            vec![admit(3, Some(2), None), admit(4, Some(2), None)],
        ))
        .await?;
    check(two.over_limit == [id(4)], &format!("admissions of one step are taken in order: {two:?}"))?;
    check(state(3).await? == Some(RunState::Running) && state(4).await? == Some(RunState::Queued), "the first went")?;

    let backfill = store
        .commit(step(
            vec![to(5, RunState::Running), to(6, RunState::Running)],
            vec![admit(5, None, Some(1)), admit(6, None, Some(1))],
        ))
        .await?;
    check(backfill.over_limit == [id(6)], &format!("a backfill's parallelism holds: {backfill:?}"))?;
    Ok(())
}

/// An admission under a limit counted per slot (a capped tenant's, a
/// workflow's `concurrency`) is refused while another master holds an
/// active run of the tenant in the slot (two masters each believe they
/// hold it), and goes once that run has ended.
pub(crate) async fn sole_admissions(store: &dyn Store, p: &str) -> Result<()> {
    let tenant = format!("{p}sole");
    let id = |n: u32| format!("{p}sole{n}");
    let runs: Vec<NewRun> = (1..=3)
        .map(|n| NewRun {
            run: run(&id(n), &tenant, "wf", RunKind::Manual, n as i64),
            tasks: vec!["a".into()],
            sla_at: None,
        })
        .collect();
    let slot = runs[0].run.slot;
    store.create_runs(runs, None).await?;
    let claimed = |n: u32, owner: &'static str| async move {
        store.claim_run(&id(n), owner, 10).await?.ok_or_else(|| Error::Invalid(format!("no run {}", id(n))))
    };
    let to = |row: &RunRow, state: RunState| WriteBatch {
        runs: vec![RunWrite { id: row.id.clone(), state, started_at: Some(10), finished_at: None, updated_at: 10 }],
        fences: vec![(row.id.clone(), row.epoch)],
        ..WriteBatch::default()
    };
    let admitted = |row: &RunRow, owner: &str| WriteBatch {
        admissions: vec![Admission {
            run_id: row.id.clone(),
            tenant: tenant.clone(),
            workflow: "wf".into(),
            max_active_runs: None,
            backfill: None,
            sole: Some((slot, owner.into())),
        }],
        ..to(row, RunState::Running)
    };
    let state = |n: u32| async move { Ok::<_, Error>(store.get_run(&id(n)).await?.map(|r| r.state)) };

    let other = claimed(1, "m2").await?;
    store.commit(to(&other, RunState::Running)).await?;
    let mine = claimed(2, "m1").await?;
    let refused = store.commit(admitted(&mine, "m1")).await?;
    check(
        refused.over_limit == [id(2)],
        &format!("refused while another master holds a run of the slot: {refused:?}"),
    )?;
    check(state(2).await? == Some(RunState::Queued), "a refused admission's run stays queued")?;
    let alone = store.commit(admitted(&other, "m2")).await?;
    check(alone.over_limit.is_empty(), &format!("the other master's own runs do not hold it back: {alone:?}"))?;

    store.commit(to(&other, RunState::Succeeded)).await?;
    let went = store.commit(admitted(&mine, "m1")).await?;
    check(went.over_limit.is_empty(), &format!("admitted once the other run ended: {went:?}"))?;
    check(state(2).await? == Some(RunState::Running), "and running")?;

    // A run already running that starts an attempt is held back the same
    // way while another master holds an active run of the slot.
    let starts = |row: &RunRow, owner: &str| WriteBatch {
        attempts: vec![AttemptRow {
            run_id: row.id.clone(),
            task_idx: 0,
            number: 1,
            task: "a".into(),
            state: AttemptState::Running,
            failure_kind: None,
            message: None,
            charged: false,
            worker: "w1".into(),
            epoch: row.epoch,
            started_at: 20,
            finished_at: None,
            lease: None,
        }],
        sole_starts: vec![SoleStart { run_id: row.id.clone(), tenant: tenant.clone(), slot, owner: owner.into() }],
        fences: vec![(row.id.clone(), row.epoch)],
        ..WriteBatch::default()
    };
    let third = claimed(3, "m2").await?;
    store.commit(to(&third, RunState::Running)).await?;
    let mine = store.get_run(&id(2)).await?.ok_or_else(|| Error::Invalid(format!("no run {}", id(2))))?;
    let held = store.commit(starts(&mine, "m1")).await?;
    check(held.over_limit == [id(2)], &format!("an attempt start refused while m2 holds a run of the slot: {held:?}"))?;
    check(store.attempts(&id(2), None).await?.is_empty(), "and none of its writes taken")?;
    store.commit(to(&third, RunState::Succeeded)).await?;
    let started = store.commit(starts(&mine, "m1")).await?;
    check(started.over_limit.is_empty(), &format!("started once the other run ended: {started:?}"))?;
    check(store.attempts(&id(2), None).await?.len() == 1, "and its attempt written")?;
    Ok(())
}
