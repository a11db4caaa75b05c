//! The outer DAG's conformance checks (part of [`crate::conformance::run_all`]):
//! the workflow graph, upstream instances by cycle, waits and the wake-ups
//! that find them, links, children, schedules taken offline.

use crate::conformance::{check, run};
use crate::*;

/// The workflow graph, upstream instances by cycle, waits and wake-ups,
/// links, a schedule taken offline.
pub(crate) async fn outer_dag(store: &dyn Store, p: &str) -> Result<()> {
    let tenant = format!("{p}outer");
    for name in ["hourly", "daily"] {
        store.apply_workflow(&tenant, name, name, "{}", 1).await?;
    }
    let edge = |upstream: &str, task: Option<&str>| EdgeRow {
        tenant: tenant.clone(),
        workflow: "daily".into(),
        upstream: upstream.into(),
        task: task.map(Into::into),
        past: false,
        kind: "upstream".into(),
    };
    store.set_workflow_edges(&tenant, "daily", &[edge("hourly", None), edge("hourly", Some("load"))]).await?;
    store.set_workflow_edges(&tenant, "daily", &[edge("hourly", Some("load"))]).await?;
    check(store.workflow_edges(&tenant).await? == vec![edge("hourly", Some("load"))], "edges are replaced")?;
    check(store.edges_from(&tenant, &["daily".into()]).await? == vec![edge("hourly", Some("load"))], "edges from")?;
    check(store.edges_from(&tenant, &["hourly".into()]).await?.is_empty(), "no edges from hourly")?;
    check(store.edges_to(&tenant, "hourly", 10).await? == vec![edge("hourly", Some("load"))], "edges to hourly")?;
    check(store.edges_to(&tenant, "daily", 10).await?.is_empty(), "nothing needs daily")?;
    let watched = store.watched().await?;
    check(watched.contains(&(tenant.clone(), "hourly".into(), Some("load".into()))), "watched upstream task")?;

    // Two hourly runs, one with its task `load` done.
    let mut hours = Vec::new();
    for (i, at) in [3_600_000_i64, 7_200_000].into_iter().enumerate() {
        let id = format!("{p}hour-{i}");
        let mut row = run(&id, &tenant, "hourly", RunKind::Schedule, at);
        row.slot = 9;
        store.create_runs(vec![NewRun { run: row, tasks: vec!["load".into()], sla_at: None }], None).await?;
        hours.push(id);
    }
    let mut done = TaskRow {
        run_id: hours[0].clone(),
        idx: 0,
        name: "load".into(),
        state: TaskState::Succeeded,
        attempts: 1,
        failures: 0,
        lost: 0,
        forced: false,
        retry_at: None,
        error: None,
        started_at: Some(1),
        finished_at: Some(2),
        child_run: None,
    };
    store.commit(WriteBatch { tasks: vec![done.clone()], ..Default::default() }).await?;
    let found = store.runs_in_range(&tenant, "hourly", 0, 86_400_000, Some("load")).await?;
    check(
        found.len() == 2
            && found[0].task_state == Some(TaskState::Succeeded)
            && found[1].task_state == Some(TaskState::Pending),
        &format!("runs in range with their task: {found:?}"),
    )?;
    check(store.runs_in_range(&tenant, "hourly", 5_000_000, 86_400_000, None).await?.len() == 1, "range bounds")?;
    let range = |from: i64, task: Option<&str>| CycleRange {
        tenant: tenant.clone(),
        workflow: "hourly".into(),
        from,
        to: 86_400_000,
        task: task.map(Into::into),
    };
    let settled = store.runs_in_ranges_settled(&[range(0, Some("load")), range(5_000_000, None)]).await?;
    check(
        settled.len() == 2 && settled[0] == found && settled[1].len() == 1,
        &format!("settled reads read the same, range by range: {settled:?}"),
    )?;
    // Many ranges read together (more than one statement's worth), with
    // and without a task, of two workflows and two tenants, some empty:
    // each answer is the range's own, in order.
    let mut many = Vec::new();
    for i in 0..150_usize {
        let mut r = range([0, 3_600_000, 5_000_000, 7_200_001][i % 4], (i % 3 == 0).then_some("load"));
        if i % 7 == 0 {
            r.workflow = "daily".into();
        }
        if i % 11 == 0 {
            r.tenant = format!("{p}outer-other");
        }
        many.push(r);
    }
    let together = store.runs_in_ranges(&many).await?;
    check(together.len() == many.len(), "one answer per range")?;
    for (r, got) in many.iter().zip(&together) {
        let alone = store.runs_in_range(&r.tenant, &r.workflow, r.from, r.to, r.task.as_deref()).await?;
        check(*got == alone, &format!("{r:?}: read together {got:?}, alone {alone:?}"))?;
    }
    check(together.iter().filter(|runs| runs.len() == 2).count() >= 50, "the ranges found runs")?;
    check(together.iter().any(|runs| runs.is_empty()), "and some found none")?;
    check(store.runs_in_ranges(&[]).await?.is_empty(), "no ranges, no answers")?;

    // The runs waiting upstream, by slot (a master taking slots over wakes
    // them): not those of other slots, nor runs that are not waiting.
    let mut waiting = run(&format!("{p}waiting"), &tenant, "daily", RunKind::Manual, 5);
    (waiting.state, waiting.slot) = (RunState::Waiting, 11);
    let mut queued = run(&format!("{p}queued"), &tenant, "daily", RunKind::Manual, 5);
    queued.slot = 11;
    for row in [waiting.clone(), queued.clone()] {
        store.create_runs(vec![NewRun { run: row, tasks: vec!["r".into()], sla_at: None }], None).await?;
    }
    let mine = |found: Vec<(String, String)>| -> Vec<(String, String)> {
        found.into_iter().filter(|(t, _)| *t == tenant).collect()
    };
    let found = mine(store.waiting_in_slots(&[3, 11]).await?);
    check(found == vec![(tenant.clone(), waiting.id.clone())], &format!("waiting runs of slot 11: {found:?}"))?;
    check(mine(store.waiting_in_slots(&[3, 12]).await?).is_empty(), "none in other slots")?;
    check(mine(store.waiting_in_slots(&[]).await?).is_empty(), "no slots, no runs")?;

    // A waiting daily run; a change of an hourly instance in its range wakes it.
    let daily = format!("{p}day-0");
    store
        .create_runs(
            vec![NewRun {
                run: run(&daily, &tenant, "daily", RunKind::Schedule, 0),
                tasks: vec!["r".into()],
                sla_at: None,
            }],
            None,
        )
        .await?;
    let wait = RunWait {
        run_id: daily.clone(),
        tenant: tenant.clone(),
        upstream: "hourly".into(),
        from_time: 0,
        to_time: 82_800_000,
        slot: 7,
        failures_only: false,
    };
    let wake_command = Some(EncodedCommand::new("wake", "{}".into()));
    store.commit(WriteBatch { run_waits: vec![wait.clone()], ..Default::default() }).await?;
    let wake = |at: i64| Wake { tenant: tenant.clone(), workflow: "hourly".into(), logical_time: at, failed: false };
    async fn wakes_of(store: &dyn Store, run: &str) -> Result<usize> {
        Ok(store
            .pending_commands(0, 10_000)
            .await?
            .iter()
            .filter(|c| c.run_id == run && c.command.kind == "wake")
            .count())
    }
    let before = wakes_of(store, &daily).await?;
    let waking =
        |wakes: Vec<Wake>| WriteBatch { wakes, wake_command: wake_command.clone(), at: 5, ..Default::default() };
    store.commit(waking(vec![wake(99_000_000)])).await?;
    check(wakes_of(store, &daily).await? == before, "a change outside the range wakes nobody")?;
    store.commit(waking(vec![wake(3_600_000)])).await?;
    check(wakes_of(store, &daily).await? == before + 1, "a change in range wakes the waiting run")?;
    // A range that listens for failures only: a success in it wakes
    // nobody, a failure does.
    let failures = RunWait { failures_only: true, ..wait.clone() };
    store
        .commit(WriteBatch { clear_waits: vec![daily.clone()], run_waits: vec![failures], ..Default::default() })
        .await?;
    store.commit(waking(vec![wake(3_600_000)])).await?;
    check(wakes_of(store, &daily).await? == before + 1, "a success wakes no range that listens for failures only")?;
    store.commit(waking(vec![Wake { failed: true, ..wake(3_600_000) }])).await?;
    check(wakes_of(store, &daily).await? == before + 2, "a failure wakes a range that listens for failures")?;
    store.commit(WriteBatch { clear_waits: vec![daily.clone()], ..waking(vec![wake(3_600_000)]) }).await?;
    check(wakes_of(store, &daily).await? == before + 2, "cleared waits wake nobody")?;
    // A changed upstream definition wakes every run waiting on it, whatever
    // the range.
    store.commit(WriteBatch { run_waits: vec![wait.clone()], ..Default::default() }).await?;
    let changed = |workflow: &str| WriteBatch {
        wake_all: vec![(tenant.clone(), workflow.to_owned())],
        wake_command: wake_command.clone(),
        at: 7,
        ..Default::default()
    };
    store.commit(changed("daily")).await?;
    check(wakes_of(store, &daily).await? == before + 2, "a change of another workflow wakes nobody")?;
    store.commit(changed("hourly")).await?;
    check(wakes_of(store, &daily).await? == before + 3, "a changed upstream wakes whoever waits on it")?;
    // A master that lost the run (its epoch is stale) neither clears what
    // the run's owner recorded it waits for nor records waits of its own.
    let stale = vec![(daily.clone(), i64::MAX)];
    let cleared = WriteBatch { fences: stale.clone(), clear_waits: vec![daily.clone()], at: 8, ..Default::default() };
    check(store.commit(cleared).await?.fenced == vec![daily.clone()], "a stale epoch is fenced")?;
    store.commit(waking(vec![wake(3_600_000)])).await?;
    check(wakes_of(store, &daily).await? == before + 4, "the owner's waits outlive a stale master's clearing")?;
    store.commit(WriteBatch { clear_waits: vec![daily.clone()], ..Default::default() }).await?;
    let recorded = WriteBatch { fences: stale, run_waits: vec![wait.clone()], at: 9, ..Default::default() };
    check(store.commit(recorded).await?.fenced == vec![daily.clone()], "a stale epoch is fenced")?;
    store.commit(waking(vec![wake(3_600_000)])).await?;
    check(wakes_of(store, &daily).await? == before + 4, "a stale master records no waits")?;
    // Nor the commands its change of the run wrote for other runs (here:
    // for the run itself); a command no run's change wrote is kept.
    let told = |by: Option<String>| NewCommand {
        tenant: tenant.clone(),
        run_id: daily.clone(),
        slot: 7,
        command: EncodedCommand::new("wake", "{}".into()),
        created_at: 10,
        by,
    };
    let fenced = vec![(daily.clone(), i64::MAX)];
    let stale_told =
        WriteBatch { fences: fenced.clone(), commands: vec![told(Some(daily.clone()))], at: 10, ..Default::default() };
    check(store.commit(stale_told).await?.fenced == vec![daily.clone()], "a stale epoch is fenced")?;
    check(wakes_of(store, &daily).await? == before + 4, "a fenced run's change writes no command")?;
    let kept = WriteBatch { fences: fenced, commands: vec![told(None)], at: 11, ..Default::default() };
    store.commit(kept).await?;
    check(wakes_of(store, &daily).await? == before + 5, "a command no run's change wrote is kept")?;

    // Links and the children of a run.
    let link = (tenant.clone(), hours[0].clone(), daily.clone());
    store.commit(WriteBatch { links: vec![link.clone(), link], ..Default::default() }).await?;
    check(store.released_by(&hours[0]).await? == vec![daily.clone()], "released runs")?;
    let mut child = run(&format!("{p}child"), &tenant, "hourly", RunKind::Manual, 1);
    child.parent_run = Some(daily.clone());
    child.parent_task = Some(0);
    store.create_runs(vec![NewRun { run: child.clone(), tasks: vec!["load".into()], sla_at: None }], None).await?;
    check(store.children_of(&daily).await? == vec![child.id.clone()], "children")?;
    check(store.get_run(&child.id).await?.is_some_and(|r| r.parent_task == Some(0)), "parent kept")?;
    done.child_run = Some(child.id.clone());
    store.commit(WriteBatch { tasks: vec![done], ..Default::default() }).await?;
    check(store.run_tasks(&hours[0]).await?[0].child_run == Some(child.id), "a task's child run kept")?;
    // A step's child runs are written with the rest of it or not at all:
    // a step whose task write fails (a second task of a run under a name
    // it has) leaves no child behind to be admitted on its own.
    let mut orphan = run(&format!("{p}orphan"), &tenant, "hourly", RunKind::Manual, 2);
    orphan.parent_run = Some(daily.clone());
    orphan.parent_task = Some(1);
    let mut clash = store.run_tasks(&hours[0]).await?[0].clone();
    clash.idx = 99;
    let failed = store
        .commit(WriteBatch {
            child_runs: vec![NewRun { run: orphan.clone(), tasks: vec!["load".into()], sla_at: None }],
            new_run_command: Some(EncodedCommand::new("admit", "{}".into())),
            tasks: vec![clash],
            ..Default::default()
        })
        .await;
    check(failed.is_err(), "a second task under a run's task name is refused")?;
    check(store.get_run(&orphan.id).await?.is_none(), "the failed step's child run is not written")?;

    // A schedule taken offline and back.
    check(store.set_schedule_paused(&tenant, "daily", true, 0).await?, "paused")?;
    check(store.get_workflow(&tenant, "daily").await?.is_some_and(|w| w.schedule_paused), "reads paused")?;
    check(store.set_schedule_paused(&tenant, "daily", false, 77).await?, "resumed")?;
    let w = store.get_workflow(&tenant, "daily").await?;
    check(w.is_some_and(|w| !w.schedule_paused && w.schedule_cursor == Some(77)), "resumed from now on")?;
    check(!store.set_schedule_paused(&tenant, "nothing", true, 0).await?, "no such workflow")?;
    Ok(())
}
