//! A step's budget of task changes (`[master] step_task_changes`): a burst
//! past it waits in its run's backlog and is written over the next steps,
//! in order, and a restart that loses the backlog decides it again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use dagr_protocol::commands::Command;
use dagr_store::{RunState, TaskState};

use crate::engine::testkit::{TestEnv, worker};

const BUDGET: usize = 10;

/// A root and `n` tasks that depend on it.
fn fanout(n: usize) -> String {
    let mut yaml = String::from("name: fan\ntasks:\n- {name: root, plugin: echo}\n");
    for i in 0..n {
        yaml.push_str(&format!("- {{name: t{i}, plugin: echo, depends_on: [root]}}\n"));
    }
    yaml
}

fn env(slots: u32) -> TestEnv {
    TestEnv::with(|c| c.step_task_changes = BUDGET, vec![worker("w1", slots)])
}

/// Tasks of `run` stored in `state`.
fn stored(env: &TestEnv, run: &str, state: TaskState) -> usize {
    env.store.tasks[run].iter().filter(|t| t.state == state).count()
}

/// The `task.state` events of one task, in the order they were written:
/// the states it entered.
fn entered(env: &TestEnv, task: &str) -> Vec<String> {
    env.store
        .events
        .iter()
        .filter(|e| e.kind == "task.state" && e.task.as_deref() == Some(task))
        .map(|e| serde_json::from_str::<serde_json::Value>(&e.data).unwrap()["to"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_burst_of_ready_tasks_is_written_a_budget_at_a_time() {
    let mut env = env(4);
    env.apply(&fanout(35));
    let run = env.trigger("fan");
    env.step(vec![]);
    let root = env.in_flight("root");
    let effects = env.succeed(&root, "{}");
    // The root's end, then as many queued tasks as the budget has room
    // for; the four dispatched go on to `running` in the same step (a
    // dispatch is never held back).
    let queued = effects.batch.events.iter().filter(|e| e.data.contains(r#""to":"queued""#)).count();
    assert_eq!(queued, BUDGET - 1, "the root's change counts too");
    assert_eq!(effects.dispatches.len(), 4);
    assert_eq!(stored(&env, &run, TaskState::Pending), 35 - (BUDGET - 1));
    assert!(env.state.has_backlog());
    assert_eq!(env.state.next_wake(env.now), Some(env.now), "the next step comes at once");

    // Each next step writes a budget's worth more, with no input.
    let mut steps = 0;
    while env.state.has_backlog() {
        let effects = env.step(vec![]);
        let changes = effects.batch.tasks.len();
        assert!(changes <= BUDGET, "a step wrote {changes} task changes");
        steps += 1;
        assert!(steps < 10, "the backlog does not drain");
    }
    assert_eq!(steps, 3, "26 changes left: 10, 10, 6");
    assert_eq!(stored(&env, &run, TaskState::Pending), 0);
    assert_eq!(stored(&env, &run, TaskState::Queued) + stored(&env, &run, TaskState::Running), 35);

    // And the run finishes, each task run once.
    let mut attempts: HashMap<String, usize> = HashMap::new();
    for _ in 0..100 {
        let keys: Vec<_> = env.state.in_flight.keys().cloned().collect();
        if keys.is_empty() {
            break;
        }
        for key in keys {
            *attempts.entry(format!("{}", key.task)).or_default() += 1;
            env.succeed(&key, "{}");
        }
    }
    assert_eq!(env.run_state(&run), RunState::Succeeded);
    assert_eq!(attempts.len(), 35);
    assert!(attempts.values().all(|n| *n == 1), "{attempts:?}");
}

#[test]
fn a_kill_carries_out_the_backlog_first_so_each_task_s_changes_stay_in_order() {
    let mut env = env(2);
    env.apply(&fanout(30));
    let run = env.trigger("fan");
    env.step(vec![]);
    let root = env.in_flight("root");
    env.succeed(&root, "{}");
    assert!(env.state.has_backlog());
    assert_eq!(env.task_state(&run, "t29"), TaskState::Pending, "t29 waits in the backlog");
    env.command(&run, Command::Kill);
    env.step(vec![]);
    assert_eq!(env.run_state(&run), RunState::Killed);
    assert!(!env.state.has_backlog());
    assert_eq!(stored(&env, &run, TaskState::Killed), 30, "the kill is written whole, in its command's step");
    // The change that waited is written before the kill's.
    assert_eq!(entered(&env, "t29"), ["queued", "killed"]);
}

#[test]
fn a_task_s_end_in_another_branch_does_not_wait_for_the_backlog() {
    // `other` runs beside the fan-out; its end does not touch the backlog.
    let mut yaml = fanout(30);
    yaml.push_str("- {name: other, plugin: echo}\n");
    let mut env = env(8);
    env.apply(&yaml);
    let run = env.trigger("fan");
    env.step(vec![]);
    let root = env.in_flight("root");
    let other = env.in_flight("other");
    env.succeed(&root, "{}");
    let pending = stored(&env, &run, TaskState::Pending);
    assert!(env.state.has_backlog());
    let effects = env.succeed(&other, "{}");
    assert!(effects.batch.tasks.iter().any(|t| t.name == "other" && t.state == TaskState::Succeeded));
    assert!(
        stored(&env, &run, TaskState::Pending) >= pending - BUDGET,
        "the step went on with the backlog within its budget, not all of it"
    );
}

#[test]
fn a_restart_decides_again_what_waited_in_the_backlog() {
    let mut env = env(4);
    env.apply(&fanout(30));
    let run = env.trigger("fan");
    env.step(vec![]);
    let root = env.in_flight("root");
    env.succeed(&root, "{}");
    assert!(stored(&env, &run, TaskState::Pending) > 0);
    // The master dies with its backlog; a fresh one takes the run over.
    let config = crate::EngineConfig { node_id: "m2".into(), step_task_changes: BUDGET, ..Default::default() };
    env.take_over(config, vec![worker("w1", 4)]);
    for _ in 0..10 {
        env.step(vec![]);
    }
    assert_eq!(stored(&env, &run, TaskState::Pending), 0, "every task the root let go is queued again");
    assert!(!env.state.has_backlog());
}
