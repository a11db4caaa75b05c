//! Activation: what a ready task does before (or instead of) taking a
//! worker. A false condition skips it; upstream instances it needs make it
//! wait; a switch picks branches; a sub-workflow task starts its child run
//! and waits for it. None of these holds a worker slot, so parents waiting
//! for children can never starve the children of slots.

use std::sync::Arc;

use dagr_core::control::{TaskKind, truthy};
use dagr_core::outer::Standing;
use dagr_core::run::{Input as RunInput, TaskState};
use dagr_protocol::commands::Command;
use dagr_store::{EncodedCommand, NewRun, RunKind, RunOrigin};
use serde_json::{Value, json};

use crate::engine::effects::{Effects, Need};
use crate::engine::spec::{render, task_inputs};
use crate::engine::state::EngineState;

/// What activating a ready task came to.
pub(crate) enum Activation {
    /// It runs a plugin: give it a worker.
    Worker,
    /// Handled without a worker (skipped, waiting, switched).
    Done,
    /// It needs data first; try again in the next pass.
    Later,
}

impl EngineState {
    pub(crate) fn activate(&mut self, effects: &mut Effects, run_id: &Arc<str>, task: usize, now: i64) -> Activation {
        let Some(run) = self.runs.get(run_id) else { return Activation::Done };
        let workflow = run.machine.workflow().clone();
        let spec = &workflow.tasks[task];
        let inputs = task_inputs(run, task);

        if let Some(condition) = &spec.when {
            let holds = match render(run, task, condition, &inputs, self.settings.max_params_bytes) {
                Ok(value) => Ok(truthy(&value)),
                Err(problem) => Err(format!("when: {}", problem.message)),
            };
            match holds {
                Ok(true) => {}
                Ok(false) => {
                    self.note(run_id, task, "skipped: its `when` condition is false".into());
                    return self.apply_task(effects, run_id, RunInput::Skip { task }, now);
                }
                Err(message) => return self.abort(effects, run_id, task, message, now),
            }
        }

        if !spec.upstream.is_empty() && !run.extra[task].upstream_ok {
            let (tenant, logical, tz) = (run.row.tenant.clone(), run.row.logical_time, run.timezone);
            let Some(verdict) = self.judge(effects, &tenant, &spec.upstream, logical, tz) else {
                return Activation::Later;
            };
            let policy = workflow.spec.on_upstream_failure;
            match verdict.standing {
                Standing::Satisfied => {
                    for upstream in &verdict.satisfied_by {
                        effects.batch.links.push((tenant.clone(), upstream.clone(), run_id.to_string()));
                    }
                    if let Some(run) = self.runs.get_mut(run_id) {
                        run.extra[task].upstream_ok = true;
                    }
                }
                Standing::Failed if policy == dagr_core::control::UpstreamFailure::Fail => {
                    let message =
                        format!("an upstream instance failed: {}", crate::engine::outer::describe(&verdict.waits));
                    return self.abort(effects, run_id, task, message, now);
                }
                _ => {
                    if let Some(run) = self.runs.get_mut(run_id) {
                        run.extra[task].waiting_upstream = true;
                        let waits = serde_json::to_value(&verdict.waits).unwrap_or_default();
                        effects.batch.events.push(run.event(
                            "task.waiting",
                            Some(task),
                            json!({ "waits": waits }),
                            now,
                        ));
                    }
                    let done = self.apply_task(effects, run_id, RunInput::Wait { task }, now);
                    // Its waits are recorded with every other task's of the run.
                    self.keep_evaluating(run_id);
                    return done;
                }
            }
        }

        match &spec.kind {
            TaskKind::Plugin => Activation::Worker,
            TaskKind::Switch(switch) => {
                let Some(run) = self.runs.get(run_id) else { return Activation::Done };
                match render(run, task, &switch.on, &inputs, self.settings.max_params_bytes) {
                    Ok(value) => {
                        let skip = switch.not_chosen(&value);
                        let chosen = match &value {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        self.note(run_id, task, format!("switch chose `{chosen}`"));
                        self.apply_task(effects, run_id, RunInput::Switched { task, skip }, now)
                    }
                    Err(problem) => self.abort(effects, run_id, task, format!("switch.on: {}", problem.message), now),
                }
            }
            TaskKind::Workflow { name } => self.start_child(effects, run_id, task, name, &inputs, now),
        }
    }

    /// Starts the child run of a sub-workflow task; the task waits for it.
    fn start_child(
        &mut self,
        effects: &mut Effects,
        run_id: &Arc<str>,
        task: usize,
        name: &str,
        inputs: &serde_json::Map<String, Value>,
        now: i64,
    ) -> Activation {
        let Some(run) = self.runs.get(run_id) else { return Activation::Done };
        let tenant = run.row.tenant.clone();
        let key = (tenant.clone(), name.to_owned());
        let Some(definition) = self.definitions.get(&key).cloned() else {
            effects.need(Need::Workflows { tenant, names: vec![name.to_owned()] });
            return Activation::Later;
        };
        let Some((version, child)) = definition else {
            return self.abort(effects, run_id, task, format!("workflow `{name}` does not exist (any more)"), now);
        };
        let spec = &run.machine.workflow().tasks[task];
        let overrides = match render(run, task, &spec.params, inputs, self.settings.max_params_bytes) {
            Ok(Value::Object(map)) => map,
            Ok(other) => {
                return self.abort(
                    effects,
                    run_id,
                    task,
                    format!("params must be an object of the child's params, not {other}"),
                    now,
                );
            }
            Err(p) => return self.abort(effects, run_id, task, format!("params{}: {}", p.location, p.message), now),
        };
        let params = match child.resolve_params(&overrides) {
            Ok(params) => serde_json::to_string(&params).unwrap_or_else(|_| "{}".into()),
            Err(e) => return self.abort(effects, run_id, task, format!("the child's params: {e}"), now),
        };
        let origin = RunOrigin {
            tenant_capped: self.tenant_capped(&tenant),
            tenant,
            version: Some(version),
            kind: RunKind::Child,
            logical_time: run.row.logical_time,
            params,
            spec: None,
            backfill_id: None,
            parent: Some((run_id.to_string(), task as i64)),
        };
        let new = NewRun::new(&child, origin, now);
        let child_id = new.run.id.clone();
        tracing::info!(run = %run_id, task = %spec.name, child = %child_id, workflow = name, "child run started");
        effects.batch.events.push(run.event(
            "task.child",
            Some(task),
            json!({ "child": child_id, "workflow": name }),
            now,
        ));
        effects.batch.child_runs.push(new);
        let admit = Command::Admit;
        effects.batch.new_run_command = Some(EncodedCommand::new(admit.kind(), admit.payload()));
        effects.read_commands = true;
        if let Some(run) = self.runs.get_mut(run_id) {
            run.extra[task].child = Some(child_id);
        }
        self.apply_task(effects, run_id, RunInput::Wait { task }, now)
    }

    /// A child run ended: its task ends the same way.
    pub(crate) fn child_ended(
        &mut self,
        run_id: &Arc<str>,
        task: usize,
        child: &str,
        succeeded: bool,
        effects: &mut Effects,
        now: i64,
    ) -> Result<(), String> {
        let Some(run) = self.runs.get(run_id) else { return Err("the run is not loaded".into()) };
        if task >= run.extra.len() || run.extra[task].child.as_deref() != Some(child) {
            return Err(format!("run {child} is not the current child of task #{task}"));
        }
        if run.machine.task(task).state != TaskState::Waiting {
            return Err(format!("task #{task} is not waiting for its child"));
        }
        if !succeeded {
            self.note(run_id, task, format!("its child run {child} did not succeed"));
        }
        self.apply_task(effects, run_id, RunInput::ChildEnded { task, succeeded }, now);
        Ok(())
    }

    /// Commands for the child runs of a run's waiting sub-workflow tasks.
    pub(crate) fn tell_children(&self, effects: &mut Effects, run_id: &str, command: &Command, now: i64) {
        let Some(run) = self.runs.get(run_id) else { return };
        for (task, extra) in run.extra.iter().enumerate() {
            if let Some(child) = &extra.child
                && run.machine.task(task).state == TaskState::Waiting
            {
                effects.command_for(&run.row.tenant, child, command, Some(run_id), now);
            }
        }
    }

    fn apply_task(&mut self, effects: &mut Effects, run_id: &Arc<str>, input: RunInput, now: i64) -> Activation {
        if let Some(run) = self.runs.get_mut(run_id)
            && let Ok(actions) = run.machine.apply(input, now)
        {
            self.absorb(effects, run_id, actions, now);
        }
        Activation::Done
    }

    /// Fails a task that cannot run (a condition that does not render, a
    /// child workflow that does not exist, an upstream failure).
    fn abort(
        &mut self,
        effects: &mut Effects,
        run_id: &Arc<str>,
        task: usize,
        message: String,
        now: i64,
    ) -> Activation {
        tracing::info!(run = %run_id, task, %message, "task aborted");
        self.note(run_id, task, message);
        self.apply_task(effects, run_id, RunInput::Abort { task }, now)
    }

    fn note(&mut self, run_id: &Arc<str>, task: usize, message: String) {
        if let Some(run) = self.runs.get_mut(run_id) {
            run.extra[task].error = Some(message);
        }
    }
}
