//! An engine step's writes, committed in one transaction: the runs' fences
//! and the leader's token are checked first, and what they refuse is left
//! out of the rest of the batch.

use std::collections::{HashMap, HashSet};

use sqlx::{Executor, Row};

use crate::sql::*;
use crate::sql_tenancy::{AUDIT_INSERT, audit_args};
use crate::tenancy::NewAudit;
use crate::*;

impl SqlStore {
    /// [`Store::create_runs`] and [`Store::create_runs_audited`]: the runs,
    /// their commands and the audit entry (if any run was created) in one
    /// transaction.
    pub(crate) async fn create_runs_and_audit(
        &self,
        runs: Vec<NewRun>,
        command: Option<EncodedCommand>,
        audit: Option<NewAudit>,
    ) -> Result<Vec<Created>> {
        if runs.iter().all(|new| !one_per_cycle(new.run.kind)) {
            return self.create_runs_scripted(runs, command, audit).await;
        }
        let mut tx = self.write.begin().await?;
        let inserted = insert_run_rows(&mut tx, self.backend, runs.iter()).await?;
        let mut script = Script::new(self.backend);
        let mut out = Vec::with_capacity(runs.len());
        for new in &runs {
            if !inserted.contains(new.run.id.as_str()) {
                out.push(Created::Exists { id: Self::existing_cycle_run(&mut tx, &new.run).await? });
                continue;
            }
            push_run_rows(&mut script, new, command.as_ref());
            out.push(Created::Created { id: new.run.id.clone() });
        }
        if let Some(entry) = audit
            && !inserted.is_empty()
        {
            script.push(AUDIT_INSERT, audit_args(entry));
        }
        script.run(&mut tx).await?;
        tx.commit().await?;
        Ok(out)
    }

    /// Runs no other run can take the place of (manual runs, jobs, child
    /// runs: only a schedule's or a backfill's cycle has one run) need no
    /// read inside their transaction, so it travels as one [`Script`] (on
    /// SQLite one round trip to its thread, not one per statement). A run
    /// whose id exists fails the whole transaction.
    async fn create_runs_scripted(
        &self,
        runs: Vec<NewRun>,
        command: Option<EncodedCommand>,
        audit: Option<NewAudit>,
    ) -> Result<Vec<Created>> {
        let mut script = Script::new(self.backend);
        for new in &runs {
            script.push(
                format!("INSERT INTO runs ({RUN_COLUMNS}) VALUES {}", placeholders(1, RUN_COLUMN_COUNT)),
                run_args(&new.run),
            );
            push_run_rows(&mut script, new, command.as_ref());
        }
        if let Some(entry) = audit
            && !runs.is_empty()
        {
            script.push(AUDIT_INSERT, audit_args(entry));
        }
        script.commit(&self.write).await?;
        Ok(runs.into_iter().map(|new| Created::Created { id: new.run.id }).collect())
    }

    pub(crate) async fn existing_cycle_run(conn: &mut sqlx::AnyConnection, run: &RunRow) -> Result<String> {
        let row = sqlx::query(
            "SELECT id FROM runs WHERE tenant = $1 AND workflow = $2 AND logical_time = $3 \
             AND kind IN ('schedule', 'backfill')",
        )
        .bind(&run.tenant)
        .bind(&run.workflow)
        .bind(run.logical_time)
        .fetch_optional(&mut *conn)
        .await?;
        match row {
            Some(row) => Ok(row.try_get("id")?),
            None => Err(Error::Invalid(format!("run {} conflicts with an existing run", run.id))),
        }
    }

    /// One engine step's writes, in one transaction (see [`Store::commit`]).
    pub(crate) async fn commit_batch(&self, mut batch: WriteBatch) -> Result<Committed> {
        if batch.is_empty() {
            return Ok(Committed::default());
        }
        // The transaction is ours (not sqlx's) so that BEGIN and COMMIT
        // can travel with the statements (see `Script`); a step that
        // must read inside it first (fences, the leader's token, new
        // runs) opens it on its own. Should anything fail or the future
        // be dropped, the connection is closed, which rolls back.
        let mut conn = Writer::acquire(&self.write).await?;
        let tx = conn.get();
        let begin = match self.backend {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres => "BEGIN",
        };
        let mut script = Script::new(self.backend);
        // New runs (a schedule's, a sub-workflow's children) are read back:
        // which of them a cycle already had.
        let creates = !batch.new_runs.is_empty() || !batch.child_runs.is_empty();
        let limited = !batch.admissions.is_empty() || !batch.sole_starts.is_empty();
        if !batch.fences.is_empty() || limited || batch.singleton.is_some() || creates {
            tx.execute(begin).await?;
        } else {
            script.push(begin, Vec::new());
        }
        let mut committed = Committed::default();

        if !batch.fences.is_empty() {
            let held: HashMap<String, i64> = batch.fences.iter().cloned().collect();
            let ids: Vec<String> = held.keys().cloned().collect();
            let lock = if self.backend == Backend::Postgres { " FOR UPDATE" } else { "" };
            let mut stale = HashSet::new();
            let mut found = HashSet::new();
            for chunk in ids.chunks(PADDED_IN_LIST) {
                let mut args = Vec::new();
                let list = padded_in_list(1, chunk.iter().map(|id| Arg::Text(id.clone())), &mut args);
                let sql = format!("SELECT id, epoch FROM runs WHERE id IN ({list}){lock}");
                for row in bind_all(&sql, args).fetch_all(&mut *tx).await? {
                    let id: String = row.try_get("id")?;
                    let epoch: i64 = row.try_get("epoch")?;
                    if held.get(&id) != Some(&epoch) {
                        stale.insert(id.clone());
                    }
                    found.insert(id);
                }
            }
            // A run that is not there (carried over to cold storage) has
            // no owner who may write it.
            stale.extend(ids.iter().filter(|id| !found.contains(*id)).cloned());
            if !stale.is_empty() {
                admission::drop_writes(&mut batch, &stale);
                committed.fenced = stale.into_iter().collect();
                committed.fenced.sort();
            }
        }

        if limited {
            let over = self.over_limit(tx, &batch).await?;
            if !over.is_empty() {
                admission::drop_writes(&mut batch, &over);
                committed.over_limit = over.into_iter().collect();
                committed.over_limit.sort();
            }
        }

        if let Some((name, token)) = &batch.singleton {
            let lock = if self.backend == Backend::Postgres { " FOR UPDATE" } else { "" };
            let current: Option<i64> = sqlx::query(&format!("SELECT token FROM singletons WHERE name = $1{lock}"))
                .bind(name)
                .fetch_optional(&mut *tx)
                .await?
                .map(|r| r.try_get("token"))
                .transpose()?;
            if current.is_some_and(|c| c > *token) {
                batch.new_runs.clear();
                batch.schedule_cursors.clear();
                committed.singleton_fenced = true;
            }
        }

        batch.child_runs.retain(|c| {
            c.run.parent_run.as_ref().is_none_or(|p| !committed.fenced.contains(p) && !committed.over_limit.contains(p))
        });
        let new_runs = batch.new_runs.iter().chain(&batch.child_runs);
        let inserted = insert_run_rows(&mut *tx, self.backend, new_runs.clone()).await?;
        for new in new_runs.filter(|new| inserted.contains(new.run.id.as_str())) {
            push_run_rows(&mut script, new, batch.new_run_command.as_ref());
        }

        // The rest is written in one go. Runs' updates, commands answered
        // and waits cleared go as keyed multi-row statements (see
        // `Script::keyed_updates`): as one-row statements, a step that
        // released or finished hundreds of runs sent hundreds of them —
        // on SQLite joined into one text parsed again at every commit (a
        // fifth of its writer's time in a burst), on PostgreSQL a round
        // trip each.
        script.keyed_updates(
            "runs",
            "id",
            &["state = {}", "started_at = COALESCE({}, started_at)", "finished_at = {}", "updated_at = {}"],
            run_updates(&batch.runs),
        );

        if !batch.tasks.is_empty() {
            // The rows move into the statement (no copies of their text).
            let keep = last_of_each(&batch.tasks, |t| (t.run_id.as_str(), t.idx));
            let rows: Vec<Vec<Arg>> = kept(std::mem::take(&mut batch.tasks), keep)
                .map(|t| {
                    vec![
                        Arg::Text(t.run_id),
                        Arg::I64(t.idx),
                        Arg::Text(t.name),
                        Arg::Text(t.state.as_str().into()),
                        Arg::I64(t.attempts),
                        Arg::I64(t.failures),
                        Arg::I64(t.lost),
                        Arg::I64(t.forced as i64),
                        Arg::OptI64(t.retry_at),
                        Arg::OptText(t.error),
                        Arg::OptI64(t.started_at),
                        Arg::OptI64(t.finished_at),
                        Arg::OptText(t.child_run),
                    ]
                })
                .collect();
            script.rows(
                "INSERT INTO tasks (run_id, idx, name, state, attempts, failures, lost, forced, retry_at, error, started_at, \
                 finished_at, child_run)",
                "ON CONFLICT (run_id, idx) DO UPDATE SET state = excluded.state, attempts = excluded.attempts, \
                 failures = excluded.failures, lost = excluded.lost, forced = excluded.forced, retry_at = excluded.retry_at, \
                 error = excluded.error, started_at = excluded.started_at, finished_at = excluded.finished_at, \
                 child_run = excluded.child_run",
                13,
                rows,
            );
        }

        if !batch.outputs.is_empty() {
            let mut sets: HashMap<(String, i64), String> = HashMap::new();
            for o in batch.outputs {
                match o {
                    OutputWrite::Set { run_id, idx, output } => {
                        sets.insert((run_id, idx), output);
                    }
                    OutputWrite::Clear { run_id, idx } => {
                        sets.remove(&(run_id.clone(), idx));
                        script.push(
                            "DELETE FROM task_outputs WHERE run_id = ? AND idx = ?",
                            vec![Arg::Text(run_id), Arg::I64(idx)],
                        );
                    }
                }
            }
            let rows = sets
                .into_iter()
                .map(|((run_id, idx), output)| vec![Arg::Text(run_id), Arg::I64(idx), Arg::Text(output)])
                .collect();
            script.rows(
                "INSERT INTO task_outputs (run_id, idx, output)",
                "ON CONFLICT (run_id, idx) DO UPDATE SET output = excluded.output",
                3,
                rows,
            );
        }

        if !batch.attempts.is_empty() {
            let keep = last_of_each(&batch.attempts, |a| (a.run_id.as_str(), a.task_idx, a.number));
            let rows = kept(std::mem::take(&mut batch.attempts), keep)
                .map(|a| {
                    vec![
                        Arg::Text(a.run_id),
                        Arg::I64(a.task_idx),
                        Arg::I64(a.number),
                        Arg::Text(a.task),
                        Arg::Text(a.state.as_str().into()),
                        Arg::OptText(a.failure_kind.map(|k| k.as_str().to_owned())),
                        Arg::OptText(a.message),
                        Arg::I64(a.charged as i64),
                        Arg::Text(a.worker),
                        Arg::I64(a.epoch),
                        Arg::I64(a.started_at),
                        Arg::OptI64(a.finished_at),
                        Arg::OptI64(a.lease),
                    ]
                })
                .collect();
            script.rows(
                &format!("INSERT INTO attempts ({ATTEMPT_COLUMNS}, lease)"),
                "ON CONFLICT (run_id, task_idx, number) DO UPDATE SET state = excluded.state, \
                 failure_kind = excluded.failure_kind, message = excluded.message, charged = excluded.charged, \
                 finished_at = excluded.finished_at",
                13,
                rows,
            );
        }

        let keep = last_of_each(&batch.commands_done, |c| c.id);
        let answers = keep
            .into_iter()
            .map(|i| &batch.commands_done[i])
            .map(|done| (Arg::I64(done.id), vec![Arg::I64(batch.at), Arg::Text(done.result.clone())]))
            .collect();
        script.keyed_updates("commands", "id", &["done_at = {}", "result = {}"], answers);

        script.keyed_deletes("run_waits", "run_id", batch.clear_waits.iter().map(|id| Arg::Text(id.clone())).collect());
        if !batch.run_waits.is_empty() {
            let rows = batch
                .run_waits
                .iter()
                .map(|w| {
                    vec![
                        Arg::Text(w.run_id.clone()),
                        Arg::Text(w.tenant.clone()),
                        Arg::Text(w.upstream.clone()),
                        Arg::I64(w.from_time),
                        Arg::I64(w.to_time),
                        Arg::I64(w.slot),
                        Arg::I64(i64::from(w.failures_only)),
                    ]
                })
                .collect();
            script.rows(
                "INSERT INTO run_waits (run_id, tenant, upstream, from_time, to_time, slot, failures_only)",
                "",
                7,
                rows,
            );
        }
        if !batch.links.is_empty() {
            let rows = batch
                .links
                .iter()
                .map(|(tenant, up, down)| {
                    vec![Arg::Text(tenant.clone()), Arg::Text(up.clone()), Arg::Text(down.clone())]
                })
                .collect();
            script.rows("INSERT INTO run_links (tenant, upstream, downstream)", "ON CONFLICT DO NOTHING", 3, rows);
        }
        if let Some(wake) = &batch.wake_command {
            // PostgreSQL: each upstream's wake lock, held to COMMIT, in one
            // order (no two commits wait on each other); a waiter's settled
            // read takes it shared (`OuterStore::runs_in_ranges_settled`).
            if self.backend == Backend::Postgres {
                let mut locks: Vec<i64> = batch
                    .wakes
                    .iter()
                    .map(|w| (w.tenant.as_str(), w.workflow.as_str()))
                    .chain(batch.wake_all.iter().map(|(t, w)| (t.as_str(), w.as_str())))
                    .map(|(tenant, workflow)| crate::sql_outer::wake_lock(tenant, workflow))
                    .collect();
                locks.sort_unstable();
                locks.dedup();
                for lock in locks {
                    script
                        .push("SELECT count(*) FROM (SELECT pg_advisory_xact_lock(?)) AS woken", vec![Arg::I64(lock)]);
                }
            }
            for (tenant, upstream) in &batch.wake_all {
                script.push(
                    "INSERT INTO commands (tenant, run_id, slot, kind, payload, created_at) \
                     SELECT DISTINCT tenant, run_id, slot, ?, ?, ? FROM run_waits WHERE tenant = ? AND upstream = ?",
                    vec![
                        Arg::Text(wake.kind.clone()),
                        Arg::Text(wake.payload.clone()),
                        Arg::I64(batch.at),
                        Arg::Text(tenant.clone()),
                        Arg::Text(upstream.clone()),
                    ],
                );
            }
            if self.backend == Backend::Sqlite && batch.wakes.len() > 1 {
                // The same rows as a statement per wake: each wake's waiting
                // runs once (`n`, its place, keeps two wakes apart).
                let rows = batch
                    .wakes
                    .iter()
                    .enumerate()
                    .map(|(n, w)| {
                        vec![
                            Arg::I64(n as i64),
                            Arg::Text(w.tenant.clone()),
                            Arg::Text(w.workflow.clone()),
                            Arg::I64(w.logical_time),
                            Arg::I64(i64::from(w.failed)),
                            Arg::Text(wake.kind.clone()),
                            Arg::Text(wake.payload.clone()),
                            Arg::I64(batch.at),
                        ]
                    })
                    .collect();
                script.rows(
                    "WITH v (n, tenant, upstream, at, failed, kind, payload, created_at) AS (",
                    ") INSERT INTO commands (tenant, run_id, slot, kind, payload, created_at) \
                     SELECT tenant, run_id, slot, kind, payload, created_at FROM (\
                     SELECT DISTINCT v.n, w.tenant, w.run_id, w.slot, v.kind, v.payload, v.created_at \
                     FROM v JOIN run_waits w ON w.tenant = v.tenant AND w.upstream = v.upstream \
                     AND w.from_time <= v.at AND w.to_time >= v.at AND (w.failures_only = 0 OR v.failed = 1))",
                    8,
                    rows,
                );
            } else {
                for w in &batch.wakes {
                    script.push(
                        "INSERT INTO commands (tenant, run_id, slot, kind, payload, created_at) \
                         SELECT DISTINCT tenant, run_id, slot, ?, ?, ? FROM run_waits \
                         WHERE tenant = ? AND upstream = ? AND from_time <= ? AND to_time >= ? \
                         AND (failures_only = 0 OR ? = 1)",
                        vec![
                            Arg::Text(wake.kind.clone()),
                            Arg::Text(wake.payload.clone()),
                            Arg::I64(batch.at),
                            Arg::Text(w.tenant.clone()),
                            Arg::Text(w.workflow.clone()),
                            Arg::I64(w.logical_time),
                            Arg::I64(w.logical_time),
                            Arg::I64(i64::from(w.failed)),
                        ],
                    );
                }
            }
        }
        for c in &batch.commands {
            script.push(
                "INSERT INTO commands (tenant, run_id, slot, kind, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                vec![
                    Arg::Text(c.tenant.clone()),
                    Arg::Text(c.run_id.clone()),
                    Arg::I64(c.slot),
                    Arg::Text(c.command.kind.clone()),
                    Arg::Text(c.command.payload.clone()),
                    Arg::I64(c.created_at),
                ],
            );
        }

        for (tenant, workflow, cursor) in &batch.schedule_cursors {
            script.push(
                "UPDATE workflows SET schedule_cursor = ? WHERE tenant = ? AND name = ?",
                vec![Arg::I64(*cursor), Arg::Text(tenant.clone()), Arg::Text(workflow.clone())],
            );
        }
        // Last, so that the lock that orders appends is held only until
        // COMMIT (see `sql_events`).
        if !batch.events.is_empty() {
            if self.backend == Backend::Postgres {
                script.push(
                    "SELECT count(*) FROM (SELECT pg_advisory_xact_lock(?)) AS ordered",
                    vec![Arg::I64(crate::sql_events::EVENT_APPEND_LOCK)],
                );
            }
            let rows = batch
                .events
                .into_iter()
                .map(|e| {
                    vec![
                        Arg::Text(e.tenant),
                        Arg::I64(e.at),
                        Arg::Text(e.kind),
                        Arg::OptText(e.workflow),
                        Arg::OptText(e.run_id),
                        Arg::OptText(e.task),
                        Arg::Text(e.data),
                    ]
                })
                .collect();
            script.rows("INSERT INTO events (tenant, at, kind, workflow, run_id, task, data)", "", 7, rows);
        }

        script.push("COMMIT", Vec::new());
        script.run(&mut *tx).await?;
        conn.release();
        Ok(committed)
    }
}

/// Whether a run of this kind is its cycle's only one (a schedule's or a
/// backfill's: the store refuses a second, see `existing_cycle_run`).
impl SqlStore {
    /// The admissions of `batch` past their limits, and its runs starting
    /// attempts in a slot another master holds a run of (see
    /// [`admission`]):
    /// each limit's active runs are read in the transaction, on PostgreSQL
    /// under a lock per workflow held to its end, so that two masters
    /// admitting runs of one workflow count each other's.
    async fn over_limit(&self, tx: &mut sqlx::AnyConnection, batch: &WriteBatch) -> Result<HashSet<String>> {
        let limits = admission::limits(batch);
        let soles = admission::soles(batch);
        if self.backend == Backend::Postgres {
            let mut workflows: Vec<(&str, &str)> =
                limits.iter().map(|l| (l.tenant.as_str(), l.workflow.as_str())).collect();
            workflows.dedup();
            // Every master takes its locks in one order: the workflows',
            // then the slots', each sorted.
            let mut keys: Vec<String> =
                workflows.into_iter().map(|(tenant, workflow)| format!("dagr.admission/{tenant}/{workflow}")).collect();
            let mut slots: Vec<(&str, i64)> = soles.iter().map(|(tenant, slot, _)| (tenant.as_str(), *slot)).collect();
            slots.dedup();
            keys.extend(slots.into_iter().map(|(tenant, slot)| format!("dagr.admission.slot/{tenant}/{slot}")));
            for key in keys {
                // The lock's `void` is not a type sqlx's `Any` reads.
                sqlx::query("SELECT 1 AS locked FROM (SELECT pg_advisory_xact_lock(hashtextextended($1, 0))) AS l")
                    .bind(key)
                    .fetch_one(&mut *tx)
                    .await?;
            }
        }
        let mut stored = Vec::with_capacity(limits.len());
        for limit in limits {
            // Served by the partial index `runs_running`.
            let active = "SELECT id FROM runs WHERE tenant = $1 AND workflow = $2 AND state IN ('running', 'paused')";
            let mut args = vec![Arg::Text(limit.tenant.clone()), Arg::Text(limit.workflow.clone())];
            let sql = match &limit.backfill {
                None => format!("{active} LIMIT $3"),
                Some(backfill) => {
                    args.push(Arg::Text(backfill.clone()));
                    format!("{active} AND backfill_id = $3 LIMIT $4")
                }
            };
            args.push(Arg::I64(limit.enough(batch)));
            stored.push((limit, run_ids(tx, &sql, args).await?));
        }
        let mut over = admission::over_limit(batch, &stored);
        let mut elsewhere = Vec::with_capacity(soles.len());
        for sole in soles {
            // Served by the partial index `runs_by_slot`.
            let sql = "SELECT id FROM runs WHERE slot = $1 AND state IN ('running', 'paused') AND tenant = $2 \
                       AND owner <> $3 LIMIT $4";
            let (tenant, slot, owner) = &sole;
            let args = vec![
                Arg::I64(*slot),
                Arg::Text(tenant.clone()),
                Arg::Text(owner.clone()),
                Arg::I64(admission::sole_enough(batch)),
            ];
            let ids = run_ids(tx, sql, args).await?;
            elsewhere.push((sole, ids));
        }
        over.extend(admission::held_elsewhere(batch, &elsewhere));
        Ok(over)
    }
}

/// The `id` column of what `sql` reads.
async fn run_ids(tx: &mut sqlx::AnyConnection, sql: &str, args: Vec<Arg>) -> Result<Vec<String>> {
    let rows = bind_all(sql, args).fetch_all(&mut *tx).await?;
    Ok(rows.iter().map(|row| row.try_get::<String, _>("id")).collect::<std::result::Result<Vec<_>, _>>()?)
}

fn one_per_cycle(kind: RunKind) -> bool {
    matches!(kind, RunKind::Schedule | RunKind::Backfill)
}

/// Inserts the rows of new runs (not their tasks), a few hundred per
/// statement; the ids of those inserted (a schedule's or backfill's run
/// whose cycle has one already is not).
async fn insert_run_rows<'a>(
    conn: &mut sqlx::AnyConnection,
    backend: Backend,
    runs: impl Iterator<Item = &'a NewRun>,
) -> Result<HashSet<String>> {
    let runs: Vec<&NewRun> = runs.collect();
    let mut inserted = HashSet::with_capacity(runs.len());
    let mut rest = runs.as_slice();
    while !rest.is_empty() {
        let (chunk, next) = rest.split_at(chunk_rows(rest.len(), RUN_COLUMN_COUNT));
        rest = next;
        let sql = format!(
            "INSERT INTO runs ({RUN_COLUMNS}) VALUES {} ON CONFLICT DO NOTHING RETURNING id",
            values(backend, chunk.len(), RUN_COLUMN_COUNT)
        );
        let args = chunk.iter().flat_map(|new| run_args(&new.run)).collect();
        for row in bind_all(&sql, args).fetch_all(&mut *conn).await? {
            inserted.insert(row.try_get("id")?);
        }
    }
    Ok(inserted)
}

/// What a new run brings besides its row: its tasks, all pending, its
/// SLA's deadline if it has one, and `command` for it if any.
fn push_run_rows(script: &mut Script, new: &NewRun, command: Option<&EncodedCommand>) {
    let tasks = new
        .tasks
        .iter()
        .enumerate()
        .map(|(i, name)| {
            vec![
                Arg::Text(new.run.id.clone()),
                Arg::I64(i as i64),
                Arg::Text(name.clone()),
                Arg::Text(TaskState::Pending.as_str().into()),
            ]
        })
        .collect();
    script.rows("INSERT INTO tasks (run_id, idx, name, state)", "", 4, tasks);
    if let Some(due) = new.sla_at {
        script.push(
            "INSERT INTO run_slas (run_id, tenant, workflow, due_at) VALUES (?, ?, ?, ?)",
            vec![
                Arg::Text(new.run.id.clone()),
                Arg::Text(new.run.tenant.clone()),
                Arg::Text(new.run.workflow.clone()),
                Arg::I64(due),
            ],
        );
    }
    if let Some(command) = command {
        script.push(
            "INSERT INTO commands (tenant, run_id, slot, kind, payload, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            vec![
                Arg::Text(new.run.tenant.clone()),
                Arg::Text(new.run.id.clone()),
                Arg::I64(new.run.slot),
                Arg::Text(command.kind.clone()),
                Arg::Text(command.payload.clone()),
                Arg::I64(new.run.created_at),
            ],
        );
    }
}

/// One row per run for a multi-row update, as the one-row updates one after
/// another would leave it: the run's id, then the last write's state, the
/// last start any of the writes names (a write without one keeps the
/// stored start: `COALESCE`), the last write's finish and time.
fn run_updates(runs: &[RunWrite]) -> Vec<(Arg, Vec<Arg>)> {
    let mut last_start: HashMap<&str, i64> = HashMap::new();
    for run in runs {
        if let Some(at) = run.started_at {
            last_start.insert(run.id.as_str(), at);
        }
    }
    last_of_each(runs, |r| r.id.as_str())
        .into_iter()
        .map(|i| &runs[i])
        .map(|run| {
            let values = vec![
                Arg::Text(run.state.as_str().into()),
                Arg::OptI64(last_start.get(run.id.as_str()).copied()),
                Arg::OptI64(run.finished_at),
                Arg::I64(run.updated_at),
            ];
            (Arg::Text(run.id.clone()), values)
        })
        .collect()
}

/// The places of the last item of each key, in order: last write wins
/// within a batch, and one row per key keeps an upsert from touching a row
/// twice in one statement.
fn last_of_each<'a, T, K: std::hash::Hash + Eq>(items: &'a [T], key: impl Fn(&'a T) -> K) -> Vec<usize> {
    let mut last: HashMap<K, usize> = HashMap::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        last.insert(key(item), i);
    }
    let mut keep: Vec<usize> = last.into_values().collect();
    keep.sort_unstable();
    keep
}

/// The items of `items` at the places `keep` names (ascending), moved out.
fn kept<T>(items: Vec<T>, keep: Vec<usize>) -> impl Iterator<Item = T> {
    let mut keep = keep.into_iter().peekable();
    items.into_iter().enumerate().filter_map(move |(i, item)| keep.next_if_eq(&i).map(|_| item))
}
