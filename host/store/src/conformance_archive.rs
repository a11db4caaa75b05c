//! The archive's conformance checks (part of [`crate::conformance::run_all`]):
//! carry-over into cold partitions by period, reads that find cold runs,
//! restore, tenants kept apart, retention of logs and of partitions.

use crate::conformance::{check, run};
use crate::*;

/// 2026-10-05 and 2026-11-05, 00:00 UTC: two months, two partitions.
pub(crate) const OCT: i64 = 1_791_158_400_000;
pub(crate) const NOV: i64 = 1_793_836_800_000;

/// A finished run of `tenant` with one task that succeeded, its output,
/// its attempt, two log lines and an event.
pub(crate) async fn finished(store: &dyn Store, tenant: &str, id: &str, at: i64) -> Result<()> {
    let mut row = run(id, tenant, "nightly", RunKind::Schedule, at);
    row.slot = 11;
    store.create_runs(vec![NewRun { run: row, tasks: vec!["load".into()], sla_at: None }], None).await?;
    let task = TaskRow {
        run_id: id.into(),
        idx: 0,
        name: "load".into(),
        state: TaskState::Succeeded,
        attempts: 1,
        failures: 0,
        lost: 0,
        forced: false,
        retry_at: None,
        error: None,
        started_at: Some(at + 1),
        finished_at: Some(at + 2),
        child_run: None,
    };
    let attempt = AttemptRow {
        run_id: id.into(),
        task_idx: 0,
        number: 1,
        task: "load".into(),
        state: AttemptState::Succeeded,
        failure_kind: None,
        message: None,
        charged: true,
        worker: "w1".into(),
        epoch: 0,
        started_at: at + 1,
        finished_at: Some(at + 2),
        lease: None,
    };
    store
        .commit(WriteBatch {
            runs: vec![RunWrite {
                id: id.into(),
                state: RunState::Succeeded,
                started_at: Some(at + 1),
                finished_at: Some(at + 3),
                updated_at: at + 3,
            }],
            tasks: vec![task],
            outputs: vec![OutputWrite::Set { run_id: id.into(), idx: 0, output: r#"{"rows":7}"#.into() }],
            attempts: vec![attempt],
            events: vec![NewEvent {
                tenant: tenant.into(),
                at: at + 3,
                kind: "run.succeeded".into(),
                workflow: Some("nightly".into()),
                run_id: Some(id.into()),
                task: None,
                data: "{}".into(),
            }],
            ..Default::default()
        })
        .await?;
    let line = |seq: i64| LogRow {
        run_id: id.into(),
        task_idx: 0,
        attempt: 1,
        seq,
        at: at + seq,
        source: "plugin".into(),
        level: "info".into(),
        message: format!("loaded part {seq} of {id}"),
    };
    store.append_logs(vec![line(1), line(2)]).await
}

pub(crate) async fn archive(store: &dyn Store, p: &str) -> Result<()> {
    let tenant = format!("{p}arch");
    let other = format!("{p}arch-other");
    let (a, b, busy, open) =
        (format!("{p}arch-a"), format!("{p}arch-b"), format!("{p}arch-busy"), format!("{p}arch-open"));
    finished(store, &tenant, &a, OCT).await?;
    finished(store, &tenant, &b, NOV).await?;
    finished(store, &tenant, &busy, NOV + 10).await?;
    finished(store, &other, &format!("{p}arch-theirs"), OCT).await?;
    store
        .create_runs(
            vec![NewRun { run: run(&open, &tenant, "nightly", RunKind::Manual, NOV), tasks: vec![], sla_at: None }],
            None,
        )
        .await?;
    // A run with a pending command stays hot: its owner is about to act on it.
    store
        .insert_command(NewCommand {
            tenant: tenant.clone(),
            run_id: busy.clone(),
            slot: 11,
            command: EncodedCommand::new("rerun", "{}".into()),
            created_at: NOV + 20,
            by: None,
        })
        .await?;
    let tasks_before = store.run_tasks(&a).await?;
    let logs_before = store.logs(&a, 0, 1, 0, 10).await?;
    let events_before = store.events(&tenant, Some(&a), 0, 10).await?;

    let now = NOV + 86_400_000;
    let moved = store.carry_over(&tenant, now, Period::Month, 100, now).await?;
    check(
        moved.moved == 2 && moved.kept == 0,
        &format!("two finished runs move, not the busy or open one: {moved:?}"),
    )?;
    check(store.get_run(&a).await?.is_none() && store.get_run(&busy).await?.is_some(), "moved out of the hot tables")?;
    check(store.get_run(&open).await?.is_some(), "an unfinished run stays")?;
    check(store.get_run(&format!("{p}arch-theirs")).await?.is_some(), "another tenant's runs stay")?;

    // The index: one partition per month, with the ranges of its runs.
    let parts = store.partitions(Some(&tenant)).await?;
    check(
        parts.iter().map(|p| (p.period.as_str(), p.runs)).collect::<Vec<_>>() == [("2026-10", 1), ("2026-11", 1)],
        &format!("a partition per period: {parts:?}"),
    )?;
    check(parts[0].min_logical == Some(OCT) && parts[1].max_created == Some(NOV), "the index records the ranges")?;
    check(store.partitions(Some(&other)).await?.is_empty(), "none for the other tenant")?;

    // Reads find a cold run, its tasks, output, attempts, logs and events.
    let (cold, part) =
        store.archived_run(&tenant, &a).await?.ok_or(Error::Invalid("conformance: a cold run".into()))?;
    check(cold.state == RunState::Succeeded && part.period == "2026-10", "a cold run reads back with its partition")?;
    check(store.archived_run(&other, &a).await?.is_none(), "not as another tenant's")?;
    check(store.run_tasks(&a).await? == tasks_before, "its tasks")?;
    check(store.outputs(&a, &[0]).await? == vec![(0, r#"{"rows":7}"#.to_owned())], "its output")?;
    check(store.attempts(&a, Some(0)).await?.len() == 1, "its attempts")?;
    check(store.logs(&a, 0, 1, 0, 10).await? == logs_before, "its logs, decompressed")?;
    check(store.logs(&a, 0, 1, 1, 10).await?.len() == 1, "its logs after a sequence number")?;
    check(store.events(&tenant, Some(&a), 0, 10).await? == events_before, "its events")?;
    check(store.run_task_counts(&a).await? == vec![("succeeded".to_owned(), 1)], "its task counts")?;
    check(store.run_task(&a, "load").await?.is_some(), "its task by name")?;
    check(store.last_log_line(&a, 0, 1, "plugin").await?.is_some_and(|l| l.seq == 2), "its last log line")?;
    check(store.run_tasks_page(&a, -1, 10).await? == tasks_before, "a page of its tasks")?;

    // Lists: newest first, by logical time, through the index.
    let filter = RunFilter { tenant: tenant.clone(), limit: 10, ..Default::default() };
    let listed: Vec<String> = store.list_archived_runs(&filter).await?.into_iter().map(|r| r.id).collect();
    check(listed == [b.clone(), a.clone()], &format!("cold runs newest first: {listed:?}"))?;
    let october = RunFilter { logical_from: Some(OCT), logical_to: Some(OCT + 1), ..filter.clone() };
    check(store.list_archived_runs(&october).await?.len() == 1, "by logical time")?;
    let older = RunFilter { before: Some((NOV, b.clone())), ..filter.clone() };
    check(store.list_archived_runs(&older).await?.iter().map(|r| &r.id).collect::<Vec<_>>() == [&a], "by cursor")?;
    let hot = store.list_runs(&filter).await?;
    check(hot.iter().all(|r| r.id != a && r.id != b), "the hot list has only hot runs")?;
    check(store.list_archived_runs(&RunFilter { tenant: other.clone(), ..filter.clone() }).await?.is_empty(), "apart")?;

    // No write reaches a run that is not hot, fenced or not.
    let write =
        RunWrite { id: a.clone(), state: RunState::Running, started_at: None, finished_at: None, updated_at: now };
    let committed =
        store.commit(WriteBatch { runs: vec![write], fences: vec![(a.clone(), 0)], ..Default::default() }).await?;
    check(committed.fenced == vec![a.clone()], "a write for a cold run is fenced")?;

    // Restore: back in the hot tables, whole, touched now; gone from cold.
    check(store.restore_run(&a, now).await? == Restored::Restored, "restored")?;
    let back = store.get_run(&a).await?;
    check(back.as_ref().is_some_and(|r| r.updated_at == now && r.state == RunState::Succeeded), "hot again, touched")?;
    check(store.run_tasks(&a).await? == tasks_before, "with its tasks")?;
    check(store.logs(&a, 0, 1, 0, 10).await? == logs_before, "with its logs")?;
    check(store.events(&tenant, Some(&a), 0, 10).await? == events_before, "with its events")?;
    check(store.archived_run(&tenant, &a).await?.is_none(), "no longer cold")?;
    check(store.partitions(Some(&tenant)).await?[0].runs == 0, "the index counts it out")?;
    check(store.restore_run(&a, now).await? == Restored::Hot, "a hot run is not restored")?;
    check(store.restore_run(&format!("{p}nowhere"), now).await? == Restored::Absent, "nor an unknown one")?;
    // Just restored: it is not carried over again before the cut-off passes it.
    check(store.carry_over(&tenant, now, Period::Month, 100, now).await?.moved == 0, "a restored run stays a while")?;
    check(store.carry_over(&tenant, now + 1, Period::Month, 100, now).await?.moved == 1, "then moves again")?;

    // An upstream instance in cold storage comes back for a dependency.
    let found = store.runs_in_range(&tenant, "nightly", OCT, OCT, None).await?;
    check(found.len() == 1 && found[0].id == a, "a dependency finds a cold upstream instance")?;
    check(store.get_run(&a).await?.is_some(), "restored for it")?;

    // Export, then retention: logs first, then whole periods.
    let export = store.export_page(parts[1].id, "", 10).await?;
    check(
        export.len() == 1
            && export[0]["run"]["id"] == b.as_str()
            && export[0]["logs"].as_array().is_some_and(|l| l.len() == 2),
        &format!("an export of a partition: {export:?}"),
    )?;
    check(store.drop_cold_logs(&tenant, NOV - 86_400_000 * 4, now).await?.is_empty(), "not before a period ends")?;
    let logs_gone = store.drop_cold_logs(&tenant, i64::MAX, now).await?;
    check(logs_gone.iter().map(|p| p.period.as_str()).collect::<Vec<_>>() == ["2026-11"], "logs of ended periods")?;
    check(store.drop_cold_logs(&tenant, i64::MAX, now).await?.is_empty(), "each period's once")?;
    check(
        store.logs(&b, 0, 1, 0, 10).await?.is_empty() && store.run_tasks(&b).await?.len() == 1,
        "runs stay, logs go",
    )?;
    let dropped = store.drop_partitions(&tenant, NOV).await?;
    check(dropped.iter().map(|p| p.period.as_str()).collect::<Vec<_>>() == ["2026-10"], "only whole ended periods")?;
    check(store.archived_run(&tenant, &b).await?.is_some(), "a later period stays")?;
    store.drop_partitions(&tenant, i64::MAX).await?;
    check(store.partitions(Some(&tenant)).await?.is_empty(), "all dropped")?;
    check(store.archived_run(&tenant, &b).await?.is_none() && store.get_run(&b).await?.is_none(), "its runs with it")?;
    check(store.get_run(&a).await?.is_some(), "a restored run is not touched by retention")?;
    Ok(())
}

/// Restoring a range of cold runs pages through their partition: more
/// runs than one page ([`MAX_RESTORE`](crate::sql_archive::MAX_RESTORE))
/// come back, and no more than the limit asks for.
pub(crate) async fn restore_pages(store: &dyn Store, p: &str) -> Result<()> {
    const MINUTE: i64 = 60_000;
    let tenant = format!("{p}pages");
    let n = crate::sql_archive::MAX_RESTORE as usize + 205;
    let id = |i: usize| format!("{p}pages-{i:05}");
    let at = |i: usize| OCT + i as i64 * MINUTE;
    for chunk in (0..n).collect::<Vec<_>>().chunks(200) {
        let runs = chunk
            .iter()
            .map(|&i| NewRun {
                run: run(&id(i), &tenant, "minutely", RunKind::Schedule, at(i)),
                tasks: vec![],
                sla_at: None,
            })
            .collect();
        store.create_runs(runs, None).await?;
        let ended = chunk
            .iter()
            .map(|&i| RunWrite {
                id: id(i),
                state: RunState::Succeeded,
                started_at: Some(at(i)),
                finished_at: Some(at(i) + 1),
                updated_at: at(i) + 1,
            })
            .collect();
        store.commit(WriteBatch { runs: ended, ..Default::default() }).await?;
    }
    let now = NOV;
    let mut moved = 0;
    loop {
        let batch = store.carry_over(&tenant, now, Period::Month, 500, now).await?.moved;
        if batch == 0 {
            break;
        }
        moved += batch;
    }
    check(moved == n, &format!("{n} runs carried over, {moved} moved"))?;
    let (from, to) = (at(0), at(n - 1));
    let restored = store.restore_range(&tenant, "minutely", from, to, n as i64 - 5, now).await?;
    check(restored == n - 5, &format!("a limit past one page is honoured: {restored} of {}", n - 5))?;
    check(store.get_run(&id(n - 6)).await?.is_some(), "restored in logical-time order")?;
    check(store.get_run(&id(n - 1)).await?.is_none(), "the last ones stay cold")?;
    let rest = store.restore_range(&tenant, "minutely", from, to, 10_000, now).await?;
    check(rest == 5, &format!("the rest come back: {rest}"))?;
    check(store.archived_run(&tenant, &id(n - 1)).await?.is_none(), "no longer cold")?;
    check(store.partitions(Some(&tenant)).await?.iter().all(|part| part.runs == 0), "the index counts them out")?;
    Ok(())
}
