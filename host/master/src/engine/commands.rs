//! Commands: operators' requests (kill, pause, rerun, …) read from the
//! store, applied to the run they name once that run is loaded here, and
//! answered in the same commit that applies them (consumed exactly once).

use std::sync::Arc;

use dagr_core::run::{Input as RunInput, Rejected};
use dagr_protocol::commands::Command;
use dagr_protocol::control::CommandOutcome;

use crate::engine::effects::{Effects, LoadError, Need, PendingCommand};
use crate::engine::state::EngineState;

fn outcome_json(outcome: &CommandOutcome) -> String {
    serde_json::to_string(outcome).unwrap_or_else(|_| "{\"ok\":false,\"message\":\"\"}".into())
}

/// A command that does no harm carried out a second time (its run
/// admitted or judged again; a child's end for a task no longer waiting
/// for it is refused).
fn harmless_twice(command: &Command) -> bool {
    matches!(command, Command::Admit | Command::Wake | Command::ChildEnded { .. })
}

fn fail(message: impl Into<String>) -> CommandOutcome {
    CommandOutcome { ok: false, message: message.into() }
}

impl EngineState {
    /// A command read from the store: applied if its run is loaded here,
    /// else its run is asked for and the command waits (in order).
    pub(crate) fn apply_command(&mut self, effects: &mut Effects, command: PendingCommand, now: i64) {
        if !self.owned.contains(&command.slot) {
            // Another master's; if this one takes the slot over, it reads
            // pending commands again from the start.
            return;
        }
        if self.deferred_commands.iter().any(|c| c.id == command.id) {
            return;
        }
        let runnable = match &command.command {
            Err(reason) => {
                let outcome = fail(format!("the command cannot be read: {reason}"));
                return self.reply(effects, &command, outcome);
            }
            Ok(_) => self.runs.contains_key(command.run_id.as_str()),
        };
        if runnable && !self.deferred_commands.iter().any(|c| c.run_id == command.run_id) {
            self.execute(effects, command, now);
        } else {
            effects.need(Need::Claim(vec![command.run_id.clone()]));
            self.deferred_commands.push(command);
        }
    }

    /// Commands whose run was being loaded: applied now if it is, answered
    /// with the reason if it cannot be, kept for the next step if the
    /// store failed.
    pub(crate) fn retry_deferred_commands(&mut self, effects: &mut Effects, now: i64) {
        let deferred = std::mem::take(&mut self.deferred_commands);
        // A command read before this master claimed its run may have been
        // carried out since by the master that had the run (its commit
        // landed before the claim, so nothing fenced it): one that must
        // not be carried out twice (a pause, a rerun…) is read again now
        // that the run is claimed, with the run's later commands, in order
        // (in this step: `commands_read_again`).
        let read_again: Vec<String> = deferred
            .iter()
            .filter(|c| self.runs.contains_key(c.run_id.as_str()) && !c.command.as_ref().is_ok_and(harmless_twice))
            .map(|c| c.run_id.clone())
            .collect();
        if !read_again.is_empty() {
            effects.need(Need::Commands);
        }
        let mut waiting_runs: Vec<String> = Vec::new();
        for command in deferred {
            if read_again.contains(&command.run_id) {
                continue;
            }
            let blocked = waiting_runs.contains(&command.run_id);
            if !blocked && self.runs.contains_key(command.run_id.as_str()) {
                self.execute(effects, command, now);
                continue;
            }
            match self.load_failures.get(&command.run_id) {
                Some(LoadError::Gone(message) | LoadError::Invalid(message)) if !blocked => {
                    let outcome = fail(message.clone());
                    self.reply(effects, &command, outcome);
                }
                _ => {
                    // Still loading, or the store failed (asked again at
                    // the next step): later commands of the run wait too.
                    waiting_runs.push(command.run_id.clone());
                    self.deferred_commands.push(command);
                }
            }
        }
    }

    /// The pending commands read again after runs were claimed: those of
    /// this step's answers are skipped (their answers are not committed
    /// yet), the rest applied as commands read at a step's start.
    pub(crate) fn commands_read_again(&mut self, effects: &mut Effects, commands: Vec<PendingCommand>, now: i64) {
        for command in commands {
            if effects.batch.commands_done.iter().any(|c| c.id == command.id) {
                continue;
            }
            self.apply_command(effects, command, now);
        }
    }

    /// A run could not be loaded; its commands learn why.
    pub(crate) fn load_failed(&mut self, _effects: &mut Effects, run: &str, error: LoadError) {
        tracing::warn!(run, error = %error, "cannot load run");
        self.load_failures.insert(run.to_owned(), error);
    }

    /// Asks again for the runs of commands that wait (the store failed).
    pub(crate) fn reclaim_deferred(&mut self, effects: &mut Effects) {
        let mut runs: Vec<String> = self.deferred_commands.iter().map(|c| c.run_id.clone()).collect();
        runs.dedup();
        if !runs.is_empty() {
            effects.need(Need::Claim(runs));
        }
    }

    fn reply(&mut self, effects: &mut Effects, command: &PendingCommand, outcome: CommandOutcome) {
        effects.batch.commands_done.push(dagr_store::DoneCommand {
            id: command.id,
            run_id: command.run_id.clone(),
            result: outcome_json(&outcome),
        });
        effects.replies.push((command.id, outcome));
    }

    fn execute(&mut self, effects: &mut Effects, pending: PendingCommand, now: i64) {
        let Ok(command) = &pending.command else { return };
        let outcome = self.execute_on(effects, &pending.run_id, command, now);
        if let Some((id, _)) = self.runs.get_key_value(pending.run_id.as_str())
            && self.runs[id].machine.state().is_terminal()
        {
            let id: Arc<str> = id.clone();
            self.retiring.push(id);
        }
        self.reply(effects, &pending, outcome);
    }

    fn execute_on(&mut self, effects: &mut Effects, run_id: &str, command: &Command, now: i64) -> CommandOutcome {
        let Some((id, run)) = self.runs.get_key_value(run_id) else {
            return fail(format!("run {run_id} is not loaded"));
        };
        let id = id.clone();
        let span = run.span();
        let _entered = span.enter();
        let task_named = |name: &str| {
            run.machine.workflow().task_index(name).ok_or_else(|| fail(format!("the run has no task `{name}`")))
        };
        let input = match command {
            Command::Admit | Command::Wake => {
                let waits =
                    run.machine.state() == dagr_core::RunState::Waiting || run.extra.iter().any(|e| e.waiting_upstream);
                if waits {
                    self.evaluate_waits(effects, &id, now);
                } else {
                    self.admit_or_wait(effects, &id, now);
                }
                let message = if matches!(command, Command::Admit) { "admitted" } else { "woken" };
                return CommandOutcome { ok: true, message: message.into() };
            }
            Command::ChildEnded { task, child, succeeded } => {
                let task = usize::try_from(*task).unwrap_or(usize::MAX);
                return match self.child_ended(&id, task, child, *succeeded, effects, now) {
                    Ok(()) => CommandOutcome { ok: true, message: "child ended".into() },
                    Err(message) => fail(message),
                };
            }
            Command::Kill => {
                self.tell_children(effects, &id, command, now);
                RunInput::Kill
            }
            Command::Pause => RunInput::Pause,
            Command::Resume => RunInput::Resume,
            Command::MarkFailed => RunInput::MarkFailed,
            Command::RerunFailed { .. } => RunInput::RerunFailed,
            Command::Reflush { .. } => RunInput::Reflush,
            Command::RerunTask { task, downstream } => match task_named(task) {
                Ok(task) => RunInput::RerunTask { task, downstream: *downstream },
                Err(outcome) => return outcome,
            },
            Command::ForceSuccess { task } => match task_named(task) {
                Ok(task) => RunInput::ForceSuccess { task },
                Err(outcome) => return outcome,
            },
        };
        let Some(run) = self.runs.get_mut(&id) else { return fail("the run is gone") };
        match run.machine.apply(input, now) {
            Ok(actions) => {
                tracing::info!(run = %id, command = command.kind(), "command applied");
                self.absorb(effects, &id, actions, now);
                if let Command::Reflush { downstream: true } | Command::RerunFailed { downstream: true } = command
                    && let Some(run) = self.runs.get(&id)
                {
                    let tenant = run.row.tenant.clone();
                    self.reflush_released(effects, &tenant, &id, now);
                }
                match self.runs.get(&id).map(|r| r.machine.state()) {
                    // Re-flushed: it waits for its upstream instances again.
                    Some(dagr_core::RunState::Waiting) => self.evaluate_waits(effects, &id, now),
                    // Rerun: it counts against its workflow's limits again.
                    Some(dagr_core::RunState::Queued) => self.admit_or_wait(effects, &id, now),
                    _ => {}
                }
                CommandOutcome { ok: true, message: format!("{} done", command.kind()) }
            }
            Err(Rejected::NotAllowed(message) | Rejected::Stale(message)) => fail(message),
        }
    }
}
