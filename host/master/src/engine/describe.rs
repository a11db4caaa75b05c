//! What the engine holds of a run, in words, for a person debugging it
//! (the simulation prints it for a run that got stuck).

use std::collections::VecDeque;

use crate::engine::state::EngineState;
use crate::ready::ReadyTask;

impl EngineState {
    /// What this engine holds of a run, for a person debugging it: its
    /// machine's state and tasks, its attempts in flight, its timers.
    pub fn describe_run(&self, id: &str) -> Option<String> {
        let run = self.runs.get(id)?;
        let tasks: Vec<String> = run
            .machine
            .tasks()
            .iter()
            .enumerate()
            .map(|(i, t)| format!("{}={:?}", run.machine.workflow().tasks[i].name, t.state))
            .collect();
        let flights: Vec<String> = self.in_flight.keys().filter(|k| k.run_id == id).map(|k| k.to_string()).collect();
        let key = run.workflow_key();
        let waiting_for = |queue: &VecDeque<ReadyTask>| queue.iter().filter(|i| *i.run == *id).count();
        let parked = (
            self.ready.count_of(id),
            self.parked.values().map(waiting_for).sum::<usize>(),
            self.parked_by_tenant.values().map(waiting_for).sum::<usize>(),
            self.awaiting.iter().filter(|i| *i.run == *id).count(),
        );
        let admission = if run.machine.state() != dagr_core::RunState::Queued {
            String::new()
        } else {
            let in_line = self.waiting.get(&key).is_some_and(|line| line.has(id));
            let held: Vec<(&String, &Option<String>)> = self
                .reclaiming
                .iter()
                .filter(|(_, hold)| hold.workflow == key)
                .map(|(id, hold)| (id, &hold.lane))
                .collect();
            let backfill =
                run.row.backfill_id.as_ref().map(|bf| (bf, self.active_by_backfill.get(bf).copied().unwrap_or(0)));
            format!(
                "; {} line; active in its workflow {}, in its backfill {backfill:?}; held by runs claimed again {held:?}",
                if in_line { "in" } else { "NOT in" },
                self.active_by_workflow.get(&key).copied().unwrap_or(0),
            )
        };
        let slot = run.row.slot as u32;
        let claiming: Vec<&String> = self.claiming.iter().filter(|(_, (s, _))| *s == slot).map(|(id, _)| id).collect();
        Some(format!(
            "{:?} epoch {}; tasks {}; in flight [{}]; timers {:?}; items ready, parked behind a workflow's \
             concurrency, behind its tenant's cap, awaiting: {parked:?}; its tenant's attempts running {}; runs of \
             its slot under its limits claimed again {claiming:?}{admission}",
            run.machine.state(),
            run.row.epoch,
            tasks.join(" "),
            flights.join(", "),
            self.timers.of_run(id),
            self.running_by_tenant.get(&run.tenant).copied().unwrap_or(0),
        ))
    }
}
