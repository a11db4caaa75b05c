//! Schedules: while this master leads, every live workflow's cron makes
//! one run per cycle (instance-based scheduling), never two, catching up
//! within bounds after an outage.

use std::sync::Arc;

use chrono::{TimeZone, Utc};
use dagr_core::Workflow;
use dagr_core::schedule::Schedule;
use dagr_protocol::commands::Command;
use dagr_store::{EncodedCommand, NewEvent, NewRun, RunKind, RunOrigin};
use serde_json::json;

use crate::engine::effects::{Effects, Need, ScheduleSource};
use crate::engine::runs::WorkflowKey;
use crate::engine::state::EngineState;
use crate::engine::timers::Timer;

/// A live workflow's schedule.
#[derive(Debug)]
pub(crate) struct ScheduleEntry {
    pub version: i64,
    pub schedule: Schedule,
    pub workflow: Arc<Workflow>,
    pub since: i64,
    /// The last cycle materialised.
    pub cursor: Option<i64>,
    /// When its timer is armed; a timer armed for another time (before a
    /// reload) is stale and ignored when it fires.
    pub next_fire: Option<i64>,
}

impl EngineState {
    /// Starts or stops the singleton duties (cron materialisation). The
    /// token is recorded in the store first ([`Need::Lead`]): only then
    /// does this master materialise, and every schedule write carries it.
    pub(crate) fn set_leadership(&mut self, effects: &mut Effects, token: Option<i64>) {
        if token == self.leader || (token.is_some() && token == self.leading) {
            return;
        }
        self.schedules.clear();
        self.leader = None;
        self.leading = token;
        match token {
            None => tracing::info!("no longer the leader: schedules stop here"),
            Some(token) => effects.need(Need::Lead(token)),
        }
    }

    /// The store's answer to [`Need::Lead`]: `schedules` when this token
    /// holds the duty, `None` when a newer leader does.
    pub(crate) fn lead_answered(
        &mut self,
        effects: &mut Effects,
        token: i64,
        schedules: Option<Vec<ScheduleSource>>,
        now: i64,
    ) {
        if self.leading != Some(token) {
            return;
        }
        self.leading = None;
        let Some(schedules) = schedules else {
            tracing::warn!(token, "a newer leader holds the scheduler; standing by");
            return;
        };
        self.leader = Some(token);
        for source in schedules {
            self.install_schedule(effects, source, now);
        }
        tracing::info!(token, schedules = self.schedules.len(), "leading: schedules run here");
    }

    /// A workflow was applied or deleted: the leader reads its schedule.
    pub(crate) fn workflow_changed(&mut self, effects: &mut Effects, tenant: String, name: String) {
        if self.leader.is_some() {
            effects.need(Need::Schedule { tenant, name });
        }
    }

    /// A workflow's schedule as stored now: (re)installed, and what is due
    /// made.
    pub(crate) fn install_schedule(&mut self, effects: &mut Effects, source: ScheduleSource, now: i64) {
        if self.leader.is_none() {
            return;
        }
        let key = (source.tenant, source.name);
        let Some(current) = source.current else {
            self.schedules.remove(&key);
            return;
        };
        if current.paused {
            tracing::info!(workflow = %key.1, "schedule offline");
            self.schedules.remove(&key);
            return;
        }
        let Some(schedule) = current.workflow.schedule.clone() else {
            self.schedules.remove(&key);
            return;
        };
        let known = self.schedules.get(&key).and_then(|e| e.cursor);
        let cursor = match (current.cursor, known) {
            (Some(a), Some(b)) => a.max(b),
            (Some(c), None) | (None, Some(c)) => c,
            (None, None) => {
                // A new schedule starts now, or at its start when it catches up.
                let initial = match schedule.start {
                    Some(start) if schedule.catch_up && start.timestamp_millis() < now => {
                        start.timestamp_millis() - 1000
                    }
                    _ => now,
                };
                effects.batch.schedule_cursors.push((key.0.clone(), key.1.clone(), initial));
                initial
            }
        };
        let entry = ScheduleEntry {
            version: current.version,
            schedule,
            workflow: current.workflow,
            since: current.since,
            cursor: Some(cursor),
            next_fire: None,
        };
        self.schedules.insert(key.clone(), entry);
        self.materialize(effects, &key, now);
    }

    /// Creates the runs that are due for a schedule and arms its next fire.
    pub(crate) fn materialize(&mut self, effects: &mut Effects, key: &WorkflowKey, now: i64) {
        let max_catch_up = self.settings.max_catch_up as usize;
        let tenant_capped = self.tenant_capped(&key.0);
        let Some(entry) = self.schedules.get_mut(key) else {
            return;
        };
        let to_time = |ms: i64| Utc.timestamp_millis_opt(ms).single().unwrap_or_default();
        let now_time = to_time(now);
        let cursor = entry.cursor.map(to_time);
        let due =
            entry.schedule.due(cursor, to_time(entry.since), now_time, max_catch_up, self.settings.catch_up_per_step);
        if let Some((first, last)) = due.skipped {
            tracing::warn!(workflow = %key.1, %first, %last, max_catch_up, "schedule: skipping missed cycles");
            effects.batch.events.push(NewEvent {
                tenant: key.0.clone(),
                at: now,
                kind: "schedule.skipped".into(),
                workflow: Some(key.1.clone()),
                run_id: None,
                task: None,
                data: json!({
                    "workflow": key.1,
                    "first": first.to_rfc3339(),
                    "last": last.to_rfc3339(),
                    "reason": format!("more than {max_catch_up} missed cycles to catch up (limit [master] max_catch_up)"),
                })
                .to_string(),
            });
        }
        let params = serde_json::to_string(&entry.workflow.spec.params).unwrap_or_else(|_| "{}".into());
        for logical in &due.times {
            let origin = RunOrigin {
                tenant: key.0.clone(),
                version: Some(entry.version),
                kind: RunKind::Schedule,
                logical_time: logical.timestamp_millis(),
                params: params.clone(),
                spec: None,
                backfill_id: None,
                parent: None,
                tenant_capped,
            };
            effects.batch.new_runs.push(NewRun::new(&entry.workflow, origin, now));
        }
        if let Some(last) = due.times.last() {
            entry.cursor = Some(last.timestamp_millis());
            effects.batch.schedule_cursors.push((key.0.clone(), key.1.clone(), last.timestamp_millis()));
            let admit = Command::Admit;
            effects.batch.new_run_command = Some(EncodedCommand::new(admit.kind(), admit.payload()));
            // Admitted once they are committed: their commands are read next.
            effects.read_commands = true;
        }
        let from = entry.cursor.map(to_time).map_or(now_time, |c| c.max(now_time));
        let next = if due.more {
            // The rest of a catch-up, a second later: a backlog arrives at
            // a bounded rate.
            Some(now + 1000)
        } else {
            entry.schedule.next_after(from).map(|t| t.timestamp_millis())
        };
        entry.next_fire = next;
        if let Some(at) = next {
            self.timers.arm(at, Timer::Schedule { tenant: key.0.clone(), name: key.1.clone(), at });
        }
    }

    /// A schedule's timer fired.
    pub(crate) fn schedule_due(&mut self, effects: &mut Effects, key: WorkflowKey, at: i64, now: i64) {
        let current = self.schedules.get(&key).is_some_and(|e| e.next_fire == Some(at));
        if self.leader.is_some() && current {
            self.materialize(effects, &key, now);
        }
    }
}
