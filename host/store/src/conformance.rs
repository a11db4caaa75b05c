//! The store conformance suite: one set of checks that every backend must
//! pass. `dagr-tests` runs it against SQLite and PostgreSQL.

use crate::*;

pub(crate) fn run(id: &str, tenant: &str, workflow: &str, kind: RunKind, logical_time: i64) -> RunRow {
    RunRow {
        id: id.into(),
        tenant: tenant.into(),
        workflow: workflow.into(),
        version: Some(1),
        kind,
        state: RunState::Queued,
        logical_time,
        params: "{}".into(),
        spec: None,
        backfill_id: None,
        slot: 7,
        owner: None,
        epoch: 0,
        created_at: logical_time,
        started_at: None,
        finished_at: None,
        updated_at: logical_time,
        parent_run: None,
        parent_task: None,
    }
}

pub(crate) fn check(cond: bool, what: &str) -> Result<()> {
    if cond { Ok(()) } else { Err(Error::Invalid(format!("conformance: {what}"))) }
}

/// Runs every check against a fresh, empty store. `prefix` keeps ids unique
/// when the backend is shared (PostgreSQL).
pub async fn run_all(store: &dyn Store, prefix: &str) -> Result<()> {
    workflows(store, prefix).await?;
    runs_and_batches(store, prefix).await?;
    cycles_are_unique(store, prefix).await?;
    fencing(store, prefix).await?;
    crate::conformance_admission::admissions(store, prefix).await?;
    crate::conformance_admission::sole_admissions(store, prefix).await?;
    commands_logs_events(store, prefix).await?;
    big_batches(store, prefix).await?;
    many_runs_in_one_batch(store, prefix).await?;
    plugin_registry(store, prefix).await?;
    crate::conformance_tenancy::tenancy(store, prefix).await?;
    crate::conformance_tenancy::audit_retention(store, prefix).await?;
    crate::conformance_tenancy::audited_runs(store, prefix).await?;
    crate::conformance_outer::outer_dag(store, prefix).await?;
    task_reads(store, prefix).await?;
    webhooks(store, prefix).await?;
    crate::conformance_archive::archive(store, prefix).await?;
    crate::conformance_archive::restore_pages(store, prefix).await?;
    Ok(())
}

/// Subscriptions: per tenant, a cursor that only moves forward, failing
/// and disabled, a delivery log that keeps the newest.
async fn webhooks(store: &dyn Store, p: &str) -> Result<()> {
    let tenant = format!("{p}hooks");
    let row = WebhookRow {
        id: format!("{p}wh1"),
        tenant: tenant.clone(),
        url: "https://example.org/hook".into(),
        kinds: "run.*".into(),
        workflow: Some("wf".into()),
        secret: "whsec_c2VjcmV0".into(),
        batch: 50,
        cursor: 10,
        state: WebhookState::Active,
        failing_since: None,
        disabled_reason: None,
        created_at: 1,
    };
    store.create_webhook(&row).await?;
    check(store.get_webhook(&tenant, &row.id).await? == Some(row.clone()), "a webhook reads back")?;
    check(store.get_webhook("someone-else", &row.id).await?.is_none(), "another tenant's webhook is not found")?;
    store.advance_webhook(&row.id, 12).await?;
    store.advance_webhook(&row.id, 11).await?;
    let read = store.get_webhook(&tenant, &row.id).await?.unwrap_or(row.clone());
    check(read.cursor == 12, "a cursor only moves forward")?;
    check(store.active_webhooks().await?.iter().any(|w| w.id == row.id), "an active webhook is delivered")?;
    let secrets = store.webhook_secrets_page(None, 10_000).await?;
    check(secrets.contains(&(tenant.clone(), row.id.clone(), row.secret.clone())), "webhook secrets are listed")?;
    check(
        store.webhook_secrets_page(Some(&row.id), 10_000).await?.iter().all(|(_, id, _)| *id > row.id),
        "a page of webhook secrets starts after its cursor",
    )?;
    check(store.reseal_webhook_secret(&row.id, &row.secret, "sealed").await?, "a webhook secret re-sealed")?;
    check(!store.reseal_webhook_secret(&row.id, &row.secret, "again").await?, "not over a secret that changed")?;
    let read = store.get_webhook(&tenant, &row.id).await?.unwrap_or(row.clone());
    check(read.secret == "sealed" && read.batch == 50, "the re-sealed secret and the batch read back")?;
    store.set_webhook_failing(&row.id, Some(5)).await?;
    store.set_webhook_disabled(&row.id, Some("failing for 1h")).await?;
    let read = store.get_webhook(&tenant, &row.id).await?.unwrap_or(row.clone());
    check(read.state == WebhookState::Disabled && read.failing_since.is_none(), "disabled, its failure cleared")?;
    check(!store.active_webhooks().await?.iter().any(|w| w.id == row.id), "a disabled webhook is not delivered")?;
    for at in 0..5 {
        let delivery = DeliveryRow {
            webhook_id: row.id.clone(),
            seq: 12,
            attempt: at + 1,
            at: 100 + at,
            status: Some(500),
            error: None,
            duration_ms: 3,
        };
        store.record_deliveries(&[delivery], 3).await?;
    }
    let log = store.deliveries(&row.id, 10).await?;
    check(log.iter().map(|d| d.attempt).collect::<Vec<_>>() == [5, 4, 3], "the newest deliveries, newest first")?;
    // A page's deliveries at once (one of them a failure without a status).
    let page: Vec<DeliveryRow> = (0..4)
        .map(|i| DeliveryRow {
            webhook_id: row.id.clone(),
            seq: 20 + i,
            attempt: 1,
            at: 200 + i,
            status: (i != 2).then_some(200),
            error: (i == 2).then(|| "connection refused".to_owned()),
            duration_ms: i,
        })
        .collect();
    store.record_deliveries(&page, 3).await?;
    let log = store.deliveries(&row.id, 10).await?;
    check(
        log.iter().map(|d| (d.seq, d.status)).collect::<Vec<_>>() == [(23, Some(200)), (22, None), (21, Some(200))]
            && log[1].error.as_deref() == Some("connection refused"),
        &format!("a page of deliveries, trimmed to the newest: {log:?}"),
    )?;
    check(store.list_webhooks(&tenant).await?.len() == 1, "a tenant's webhooks")?;
    check(store.delete_webhook(&tenant, &row.id).await?, "deleted")?;
    check(store.deliveries(&row.id, 10).await?.is_empty(), "with its deliveries")?;
    let sink = format!("{p}nats");
    check(store.sink_cursor(&sink, 7).await? == 7, "a new sink starts where it is told")?;
    store.advance_sink(&sink, 9).await?;
    store.advance_sink(&sink, 8).await?;
    check(store.sink_cursor(&sink, 0).await? == 9, "a sink's cursor only moves forward")?;
    Ok(())
}

/// The API's paged and keyed reads of a run's tasks.
async fn task_reads(store: &dyn Store, p: &str) -> Result<()> {
    let id = format!("{p}paged");
    let names: Vec<String> = (0..25).map(|i| format!("t{i}")).collect();
    let new =
        NewRun { run: run(&id, &format!("{p}t"), "wf", RunKind::Manual, 5000), tasks: names.clone(), sla_at: None };
    store.create_runs(vec![new], None).await?;
    let first = store.run_tasks_page(&id, -1, 10).await?;
    check(first.len() == 10 && first[0].name == "t0" && first[9].idx == 9, "first page")?;
    let last = store.run_tasks_page(&id, 19, 10).await?;
    check(last.len() == 5 && last[0].name == "t20", "last page after index 19")?;
    check(store.run_tasks_page(&id, 24, 10).await?.is_empty(), "nothing after the last")?;
    check(store.run_task_counts(&id).await? == vec![("pending".to_owned(), 25)], "counts by state")?;
    let found = store.run_task(&id, "t17").await?;
    check(found.is_some_and(|t| t.idx == 17 && t.state == TaskState::Pending), "a task by name")?;
    check(store.run_task(&id, "t99").await?.is_none(), "no such task")?;
    check(store.run_task(&format!("{p}nope"), "t1").await?.is_none(), "no such run")?;
    Ok(())
}

/// Batches larger than one statement are split correctly.
async fn big_batches(store: &dyn Store, p: &str) -> Result<()> {
    let tenant = format!("{p}t");
    let id = format!("{p}big");
    let names: Vec<String> = (0..1234).map(|i| format!("t{i}")).collect();
    store
        .create_runs(
            vec![NewRun { run: run(&id, &tenant, "wf", RunKind::Manual, 9), tasks: names.clone(), sla_at: None }],
            None,
        )
        .await?;
    let tasks = store.run_tasks(&id).await?;
    check(
        tasks.len() == 1234 && tasks.iter().enumerate().all(|(i, t)| t.idx == i as i64 && t.name == names[i]),
        "1234 tasks created in order",
    )?;
    let writes = (0..1234)
        .map(|i| TaskRow {
            run_id: id.clone(),
            idx: i,
            name: format!("t{i}"),
            state: if i % 2 == 0 { TaskState::Succeeded } else { TaskState::Failed },
            attempts: i,
            failures: 0,
            lost: 0,
            forced: false,
            retry_at: None,
            error: None,
            started_at: Some(i),
            finished_at: Some(i + 1),
            child_run: None,
        })
        .collect();
    let outputs =
        (0..1234).map(|i| OutputWrite::Set { run_id: id.clone(), idx: i, output: format!("{{\"i\":{i}}}") }).collect();
    store.commit(WriteBatch { tasks: writes, outputs, ..Default::default() }).await?;
    let tasks = store.run_tasks(&id).await?;
    check(
        tasks.iter().all(|t| t.attempts == t.idx && (t.state == TaskState::Succeeded) == (t.idx % 2 == 0)),
        "1234 task updates applied",
    )?;
    let all: Vec<i64> = (0..1234).collect();
    let outs = store.outputs(&id, &all).await?;
    check(outs.len() == 1234 && outs.iter().all(|(i, o)| *o == format!("{{\"i\":{i}}}")), "1234 outputs stored")?;
    Ok(())
}

/// A batch that changes many runs and answers many commands (SQLite
/// writes them as multi-row updates): each run ends as its writes one after
/// another leave it, each command is done with its own result.
async fn many_runs_in_one_batch(store: &dyn Store, p: &str) -> Result<()> {
    let tenant = format!("{p}many");
    let ids: Vec<String> = (0..70).map(|i| format!("{p}many-{i}")).collect();
    let new =
        ids.iter().map(|id| NewRun { run: run(id, &tenant, "wf", RunKind::Manual, 5), tasks: vec![], sla_at: None });
    store.create_runs(new.collect(), Some(EncodedCommand::new("admit", "{}".into()))).await?;
    let commands: Vec<crate::CommandRow> =
        store.pending_commands(0, 100_000).await?.into_iter().filter(|c| ids.contains(&c.run_id)).collect();
    check(commands.len() == 70, "a command for each run")?;
    let write = |id: &str, state: RunState, started_at: Option<i64>, finished_at: Option<i64>, updated_at: i64| {
        RunWrite { id: id.to_owned(), state, started_at, finished_at, updated_at }
    };
    let mut runs = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let i = i as i64;
        // Started, then (for every other run) finished in the same batch,
        // the second write naming no start (the first's stays); every
        // fifth run is then reopened and started again (a rerun): the
        // later start wins.
        runs.push(write(id, RunState::Running, Some(100 + i), None, 200 + i));
        if i % 2 == 0 {
            runs.push(write(id, RunState::Succeeded, None, Some(300 + i), 300 + i));
        }
        if i % 10 == 0 {
            runs.push(write(id, RunState::Queued, None, None, 300 + i));
            runs.push(write(id, RunState::Succeeded, Some(999), Some(300 + i), 300 + i));
        }
    }
    let commands_done = commands
        .iter()
        .map(|c| crate::DoneCommand {
            id: c.id,
            run_id: c.run_id.clone(),
            result: format!("{{\"run\":\"{}\"}}", c.run_id),
        })
        .collect();
    store.commit(WriteBatch { runs, commands_done, at: 400, ..Default::default() }).await?;
    for (i, id) in ids.iter().enumerate() {
        let i = i as i64;
        let row = store.get_run(id).await?.ok_or_else(|| Error::Invalid(format!("{id} missing")))?;
        let (state, finished, updated) =
            if i % 2 == 0 { (RunState::Succeeded, Some(300 + i), 300 + i) } else { (RunState::Running, None, 200 + i) };
        let started = if i % 10 == 0 { 999 } else { 100 + i };
        check(
            row.state == state
                && row.started_at == Some(started)
                && row.finished_at == finished
                && row.updated_at == updated,
            &format!("run {id} as its last write left it, started at the last start named: {row:?}"),
        )?;
    }
    let pending = store.pending_commands(0, 100_000).await?;
    check(!pending.iter().any(|c| ids.contains(&c.run_id)), "every command done")?;
    for c in &commands {
        let done = store.get_command(c.id).await?.ok_or_else(|| Error::Invalid("command missing".into()))?;
        check(
            done.done_at == Some(400)
                && done.result.as_deref() == Some(format!("{{\"run\":\"{}\"}}", c.run_id).as_str()),
            &format!("command {} keeps its own result: {:?}", c.id, done.result),
        )?;
    }
    // Many commands for other runs in one batch: each stored, in the
    // batch's order (their ids follow it).
    let last = commands.iter().map(|c| c.id).max().unwrap_or(0);
    let new = ids
        .iter()
        .rev()
        .enumerate()
        .map(|(i, id)| crate::NewCommand {
            tenant: tenant.clone(),
            run_id: id.clone(),
            slot: 7,
            command: EncodedCommand::new("kill", format!("{{\"n\":{i}}}")),
            created_at: 500,
            by: None,
        })
        .collect::<Vec<_>>();
    store.commit(WriteBatch { commands: new.clone(), at: 500, ..Default::default() }).await?;
    let stored: Vec<(String, String)> = store
        .pending_commands(last, 100_000)
        .await?
        .into_iter()
        .filter(|c| ids.contains(&c.run_id))
        .map(|c| (c.run_id, c.command.payload))
        .collect();
    let sent: Vec<(String, String)> = new.into_iter().map(|c| (c.run_id, c.command.payload)).collect();
    check(stored == sent, &format!("70 commands stored in the batch's order: {stored:?}"))?;
    Ok(())
}

async fn workflows(store: &dyn Store, p: &str) -> Result<()> {
    let tenant = format!("{p}t");
    let a = store.apply_workflow(&tenant, "wf", "h1", "{\"v\":1}", 10).await?;
    check(a == Applied { version: 1, created: true }, "first apply creates version 1")?;
    let same = store.apply_workflow(&tenant, "wf", "h1", "{\"v\":1}", 11).await?;
    check(same == Applied { version: 1, created: false }, "identical apply is a no-op")?;
    let b = store.apply_workflow(&tenant, "wf", "h2", "{\"v\":2}", 12).await?;
    check(b == Applied { version: 2, created: true }, "changed apply creates version 2")?;
    check(store.list_versions(&tenant, "wf").await?.len() == 2, "two versions listed")?;
    check(store.get_version(&tenant, "wf", 1).await?.is_some_and(|v| v.spec == "{\"v\":1}"), "version 1 kept")?;
    check(store.list_workflows(&tenant).await?.len() == 1, "one workflow listed")?;
    check(store.list_workflows("other-tenant").await?.is_empty(), "tenants are separate")?;
    check(store.delete_workflow(&tenant, "wf", 13).await?, "delete")?;
    check(store.list_workflows(&tenant).await?.is_empty(), "deleted workflows are not listed")?;
    let again = store.apply_workflow(&tenant, "wf", "h2", "{\"v\":2}", 14).await?;
    check(again == Applied { version: 3, created: true }, "applying a deleted workflow makes a new version")?;
    Ok(())
}

async fn runs_and_batches(store: &dyn Store, p: &str) -> Result<()> {
    let tenant = format!("{p}t");
    let id = format!("{p}run-1");
    let created = store
        .create_runs(
            vec![NewRun {
                run: run(&id, &tenant, "wf", RunKind::Manual, 1000),
                tasks: vec!["a".into(), "b".into()],
                sla_at: None,
            }],
            Some(EncodedCommand::new("admit", "{}".into())),
        )
        .await?;
    check(matches!(created.as_slice(), [Created::Created { .. }]), "run created")?;
    let commands = store.pending_commands(0, 100_000).await?;
    check(commands.iter().any(|c| c.run_id == id && c.command.kind == "admit"), "run created with its command")?;
    let tasks = store.run_tasks(&id).await?;
    check(tasks.len() == 2 && tasks[1].name == "b" && tasks[0].state == TaskState::Pending, "tasks created pending")?;

    let task = |state: TaskState, attempts: i64| TaskRow {
        run_id: id.clone(),
        idx: 0,
        name: "a".into(),
        state,
        attempts,
        failures: 0,
        lost: 0,
        forced: false,
        retry_at: None,
        error: None,
        started_at: Some(1001),
        finished_at: None,
        child_run: None,
    };
    let attempt = |state: AttemptState| AttemptRow {
        run_id: id.clone(),
        task_idx: 0,
        number: 1,
        task: "a".into(),
        state,
        failure_kind: None,
        message: None,
        charged: true,
        worker: "w1".into(),
        epoch: 0,
        started_at: 1001,
        finished_at: None,
        lease: Some(7),
    };
    let mut batch = WriteBatch {
        runs: vec![RunWrite {
            id: id.clone(),
            state: RunState::Running,
            started_at: Some(1001),
            finished_at: None,
            updated_at: 1001,
        }],
        tasks: vec![task(TaskState::Queued, 0), task(TaskState::Running, 1)],
        attempts: vec![attempt(AttemptState::Running)],
        events: vec![NewEvent {
            tenant: tenant.clone(),
            at: 1001,
            kind: "task".into(),
            workflow: None,
            run_id: Some(id.clone()),
            task: Some("a".into()),
            data: "{}".into(),
        }],
        ..Default::default()
    };
    let commands = store.pending_commands(0, 100).await?;
    let command = commands
        .iter()
        .find(|c| c.run_id == id)
        .map(|c| c.id)
        .ok_or_else(|| Error::Invalid("command missing".into()))?;
    batch.commands_done.push(crate::DoneCommand { id: command, run_id: id.clone(), result: "{\"ok\":true}".into() });
    store.commit(batch).await?;
    check(
        store.get_run(&id).await?.is_some_and(|r| r.state == RunState::Running && r.started_at == Some(1001)),
        "run updated",
    )?;
    check(store.run_tasks(&id).await?[0].state == TaskState::Running, "last task write wins")?;
    let together = store.tasks_of_runs(&[format!("{p}no-such-run"), id.clone()]).await?;
    let alone = store.run_tasks(&id).await?;
    check(
        alone.len() == 2 && together == [Vec::new(), alone],
        &format!("tasks of runs read together, in the order asked: {together:?}"),
    )?;
    check(
        store.running_attempts_of(std::slice::from_ref(&id)).await?.iter().any(|a| a.run_id == id),
        "attempt running",
    )?;
    let running = store.running_attempts_of(std::slice::from_ref(&id)).await?;
    check(
        running.iter().all(|a| a.lease == Some(7)),
        &format!("a running attempt is read back with the lease it was sent to: {running:?}"),
    )?;
    check(!store.pending_commands(0, 100).await?.iter().any(|c| c.id == command), "command done")?;
    check(
        store.get_command(command).await?.is_some_and(|c| c.result.as_deref() == Some("{\"ok\":true}")),
        "command result kept",
    )?;

    let mut done = attempt(AttemptState::Succeeded);
    done.finished_at = Some(1002);
    let mut finished = task(TaskState::Succeeded, 1);
    finished.finished_at = Some(1002);
    store
        .commit(WriteBatch {
            tasks: vec![finished],
            attempts: vec![done],
            outputs: vec![OutputWrite::Set { run_id: id.clone(), idx: 0, output: "{\"n\":1}".into() }],
            ..Default::default()
        })
        .await?;
    check(store.outputs(&id, &[0, 1]).await? == vec![(0, "{\"n\":1}".to_owned())], "output stored")?;
    let attempts = store.attempts(&id, Some(0)).await?;
    check(
        attempts.len() == 1 && attempts[0].state == AttemptState::Succeeded && attempts[0].finished_at == Some(1002),
        "attempt finished",
    )?;
    store
        .commit(WriteBatch { outputs: vec![OutputWrite::Clear { run_id: id.clone(), idx: 0 }], ..Default::default() })
        .await?;
    check(store.outputs(&id, &[0]).await?.is_empty(), "output cleared")?;

    let listed = store
        .list_runs(&RunFilter { tenant: tenant.clone(), workflow: Some("wf".into()), limit: 10, ..Default::default() })
        .await?;
    check(listed.iter().any(|r| r.id == id), "run listed")?;
    let none = store
        .list_runs(&RunFilter { tenant: tenant.clone(), state: Some("failed".into()), limit: 10, ..Default::default() })
        .await?;
    check(none.is_empty(), "state filter")?;
    check(store.active_runs().await?.iter().any(|r| r.id == id), "active run")?;
    Ok(())
}

async fn cycles_are_unique(store: &dyn Store, p: &str) -> Result<()> {
    let tenant = format!("{p}t");
    let first = store
        .create_runs(
            vec![NewRun {
                run: run(&format!("{p}s1"), &tenant, "daily", RunKind::Schedule, 86_400_000),
                tasks: vec!["a".into()],
                sla_at: None,
            }],
            None,
        )
        .await?;
    check(matches!(first.as_slice(), [Created::Created { .. }]), "schedule run created")?;
    let dup = store
        .create_runs(
            vec![NewRun {
                run: run(&format!("{p}s2"), &tenant, "daily", RunKind::Backfill, 86_400_000),
                tasks: vec!["a".into()],
                sla_at: None,
            }],
            None,
        )
        .await?;
    check(
        matches!(dup.as_slice(), [Created::Exists { id }] if *id == format!("{p}s1")),
        "second run for a cycle is refused",
    )?;
    let manual = store
        .create_runs(
            vec![NewRun {
                run: run(&format!("{p}m1"), &tenant, "daily", RunKind::Manual, 86_400_000),
                tasks: vec!["a".into()],
                sla_at: None,
            }],
            None,
        )
        .await?;
    check(matches!(manual.as_slice(), [Created::Created { .. }]), "manual runs may share a logical time")?;
    check(store.run_tasks(&format!("{p}s2")).await?.is_empty(), "no orphan tasks")?;
    Ok(())
}

async fn fencing(store: &dyn Store, p: &str) -> Result<()> {
    let tenant = format!("{p}t");
    let id = format!("{p}fenced");
    store
        .create_runs(
            vec![NewRun { run: run(&id, &tenant, "wf", RunKind::Manual, 5), tasks: vec!["a".into()], sla_at: None }],
            None,
        )
        .await?;
    let write = |epoch: i64, state: RunState| WriteBatch {
        runs: vec![RunWrite { id: id.clone(), state, started_at: None, finished_at: None, updated_at: 6 }],
        fences: vec![(id.clone(), epoch)],
        ..Default::default()
    };
    let stale = store.commit(write(41, RunState::Running)).await?;
    check(stale.fenced == vec![id.clone()], "a write with the wrong epoch is fenced")?;
    check(store.get_run(&id).await?.is_some_and(|r| r.state == RunState::Queued), "fenced write not applied")?;
    let fresh = store.commit(write(0, RunState::Running)).await?;
    check(fresh.fenced.is_empty(), "a write with the right epoch applies")?;
    check(store.get_run(&id).await?.is_some_and(|r| r.state == RunState::Running), "fresh write applied")?;

    // A claim answers the run as it is after the claim: new epoch, new
    // owner, and the state the previous owner committed last.
    let claimed = store.claim_run(&id, "m2", 7).await?;
    check(
        claimed
            .as_ref()
            .is_some_and(|r| r.epoch == 1 && r.owner.as_deref() == Some("m2") && r.state == RunState::Running),
        &format!("claim returns the claimed run: {claimed:?}"),
    )?;
    // The previous owner carried out a command for the run: fenced off
    // with its writes, the command stays pending for the new owner.
    let command = store
        .insert_command(NewCommand {
            tenant: tenant.clone(),
            run_id: id.clone(),
            slot: 0,
            command: EncodedCommand::new("resume", "{}".into()),
            created_at: 7,
            by: None,
        })
        .await?;
    let mut late = write(0, RunState::Succeeded);
    late.commands_done.push(crate::DoneCommand { id: command, run_id: id.clone(), result: "{}".into() });
    let old_owner = store.commit(late).await?;
    check(old_owner.fenced == vec![id.clone()], "the previous owner is fenced after a claim")?;
    check(
        store.pending_commands(0, 1000).await?.iter().any(|c| c.id == command),
        "a command of a fenced run stays pending",
    )?;
    check(store.claim_run(&format!("{p}nothing"), "m2", 7).await?.is_none(), "no claim of a missing run")?;
    // Many claims in one: each run's epoch goes up once, a missing one is absent.
    let together = store.claim_runs(&[id.clone(), format!("{p}nothing")], "m3", 8).await?;
    check(
        together.len() == 1 && together[0].epoch == 2 && together[0].owner.as_deref() == Some("m3"),
        &format!("runs claimed together: {together:?}"),
    )?;
    check(store.commit(write(1, RunState::Running)).await?.fenced == vec![id.clone()], "fenced by a claim together")?;
    Ok(())
}

async fn commands_logs_events(store: &dyn Store, p: &str) -> Result<()> {
    let tenant = format!("{p}t");
    let run_id = format!("{p}logs");
    let id = store
        .insert_command(NewCommand {
            tenant: tenant.clone(),
            run_id: run_id.clone(),
            slot: 3,
            command: EncodedCommand::new("kill", "{}".into()),
            created_at: 1,
            by: None,
        })
        .await?;
    check(
        store.pending_commands(id - 1, 10).await?.first().is_some_and(|c| c.id == id && c.command.kind == "kill"),
        "command pending",
    )?;
    let line = |seq| LogRow {
        run_id: run_id.clone(),
        task_idx: 0,
        attempt: 1,
        seq,
        at: seq,
        source: "plugin".into(),
        level: "info".into(),
        message: format!("line {seq}"),
    };
    store.append_logs(vec![line(1), line(2), line(3)]).await?;
    store.append_logs(vec![line(3)]).await?;
    let logs = store.logs(&run_id, 0, 1, 1, 10).await?;
    check(logs.len() == 2 && logs[0].message == "line 2", "logs after a sequence number, no duplicates")?;
    store
        .commit(WriteBatch {
            events: (0..3)
                .map(|i| NewEvent {
                    tenant: tenant.clone(),
                    at: i,
                    kind: "e".into(),
                    workflow: Some(if i == 1 { "other".into() } else { "wf".into() }),
                    run_id: Some(run_id.clone()),
                    task: None,
                    data: format!("{{\"i\":{i}}}"),
                })
                .collect(),
            ..Default::default()
        })
        .await?;
    let events = store.events(&tenant, Some(&run_id), 0, 10).await?;
    check(events.len() == 3 && events[0].seq < events[2].seq, "events in order")?;
    // The stream: by workflow, from every tenant, and its head.
    let scope = |tenant: Option<&str>, workflow: Option<&str>| EventScope {
        tenant: tenant.map(str::to_owned),
        workflow: workflow.map(str::to_owned),
        run_id: None,
    };
    let of_wf = store.event_page(&scope(Some(&tenant), Some("wf")), 0, 10).await?;
    check(
        of_wf.iter().map(|e| e.data.as_str()).collect::<Vec<_>>() == [r#"{"i":0}"#, r#"{"i":2}"#],
        "a workflow's events only",
    )?;
    check(of_wf[0].workflow.as_deref() == Some("wf"), "an event names its workflow")?;
    let head = store.last_event_seq().await?;
    check(head >= events[2].seq, "the head is at least the last event's number")?;
    // (Other tests may write events into the same store meanwhile.)
    let everyone = store.event_page(&scope(None, None), events[0].seq, 10_000).await?;
    check(
        everyone.iter().filter(|e| e.tenant == tenant).map(|e| e.seq).collect::<Vec<_>>()
            == [events[1].seq, events[2].seq],
        "every tenant's events after a number",
    )?;
    check(store.event_page(&scope(Some("nobody"), None), 0, 10).await?.is_empty(), "no other tenant's events")?;
    let b = BackfillRow {
        id: format!("{p}bf"),
        tenant: tenant.clone(),
        workflow: "wf".into(),
        from_time: 0,
        to_time: 10,
        parallel: 2,
        total: 3,
        created_at: 1,
    };
    store.insert_backfill(b.clone()).await?;
    check(store.get_backfill(&b.id).await?.as_ref() == Some(&b), "backfill stored")?;
    Ok(())
}

/// Plugin blobs are content-addressed; published versions are immutable,
/// per tenant; deleting the last version that uses a blob removes it.
async fn plugin_registry(store: &dyn Store, p: &str) -> Result<()> {
    let (t1, t2) = (format!("{p}reg-a"), format!("{p}reg-b"));
    let bytes_a: Vec<u8> = (0..=255u8).cycle().take(1 << 20).collect();
    let bytes_b = b"\0asm other bytes".to_vec();
    let (sha_a, sha_b) = (format!("{p}aaaa"), format!("{p}bbbb"));
    check(store.plugin_blob(&sha_a).await?.is_none(), "no blob before it is stored")?;
    store.put_plugin_blob(&sha_a, &bytes_a, 1).await?;
    store.put_plugin_blob(&sha_a, &bytes_a, 2).await?;
    store.put_plugin_blob(&sha_b, &bytes_b, 3).await?;
    check(store.plugin_blob(&sha_a).await?.as_deref() == Some(&bytes_a[..]), "a 1 MiB blob round-trips byte for byte")?;

    let row = |tenant: &str, version: &str, sha256: &str| PluginRow {
        tenant: tenant.into(),
        name: "thing".into(),
        version: version.into(),
        sha256: sha256.into(),
        description: "does a thing".into(),
        params_schema: Some(r#"{"type":"object"}"#.into()),
        size: 42,
        created_at: 7,
    };
    let g0 = store.plugins_generation().await?;
    check(store.insert_plugin(&row(&t1, "1.0.0", &sha_a)).await? == PluginInsert::Created, "a new version is created")?;
    let g1 = store.plugins_generation().await?;
    check(g1 != g0, "publishing changes the generation")?;
    check(
        store.insert_plugin(&row(&t1, "1.0.0", &sha_a)).await? == PluginInsert::Unchanged,
        "the same version with the same bytes is unchanged",
    )?;
    check(store.plugins_generation().await? == g1, "an unchanged publish keeps the generation")?;
    check(
        store.insert_plugin(&row(&t1, "1.0.0", &sha_b)).await? == PluginInsert::Conflict { sha256: sha_a.clone() },
        "the same version with other bytes conflicts, naming the published sha256",
    )?;
    check(
        store.insert_plugin(&row(&t1, "2.0.0", &format!("{p}none"))).await? == PluginInsert::MissingBlob,
        "a version needs its blob",
    )?;
    let mut no_schema = row(&t1, "1.1.0", &sha_b);
    no_schema.params_schema = None;
    check(store.insert_plugin(&no_schema).await? == PluginInsert::Created, "a second version")?;
    check(store.insert_plugin(&row(&t2, "1.0.0", &sha_a)).await? == PluginInsert::Created, "tenants share a blob")?;

    let mine = |rows: Vec<PluginRow>| rows.into_iter().filter(|r| r.tenant == t1 || r.tenant == t2).collect::<Vec<_>>();
    let listed = mine(store.list_plugins().await?);
    check(
        listed == vec![row(&t1, "1.0.0", &sha_a), no_schema.clone(), row(&t2, "1.0.0", &sha_a)],
        "every version is listed with its metadata, by tenant, name and version",
    )?;

    let g2 = store.plugins_generation().await?;
    check(store.delete_plugin(&t1, "thing", "1.0.0").await?, "a version is deleted")?;
    check(store.plugins_generation().await? != g2, "deleting changes the generation")?;
    check(store.plugin_blob(&sha_a).await?.is_some(), "a blob another version uses stays")?;
    let g3 = store.plugins_generation().await?;
    check(!store.delete_plugin(&t1, "thing", "1.0.0").await?, "deleting a missing version says so")?;
    check(store.plugins_generation().await? == g3, "deleting nothing keeps the generation")?;
    check(store.delete_plugin(&t2, "thing", "1.0.0").await?, "the other tenant's version is deleted")?;
    check(store.plugin_blob(&sha_a).await?.is_none(), "a blob no version uses is removed")?;
    check(mine(store.list_plugins().await?) == vec![no_schema], "only the remaining version is listed")?;
    check(
        store.insert_plugin(&row(&t1, "1.0.0", &sha_b)).await? == PluginInsert::Created,
        "a deleted version may be published again",
    )?;
    Ok(())
}
