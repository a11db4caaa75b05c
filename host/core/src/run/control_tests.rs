//! The run machine's control inputs: disabled tasks, conditions, switches,
//! child runs, sensors, the `stop` failure strategy, runs waiting upstream.

#![allow(clippy::unwrap_used)]

use super::tests::{Driver, workflow};
use super::*;

#[test]
fn a_disabled_task_is_skipped_and_its_skip_propagates() {
    let mut d = Driver::new(
        "name: t\ntasks:\n- {name: a, plugin: p}\n- {name: b, plugin: p, depends_on: [a], enabled: false}\n\
         - {name: c, plugin: p, depends_on: [b]}\n- {name: d, plugin: p, depends_on: [b], trigger_rule: all_done}\n",
    );
    d.ok("a");
    assert_eq!(d.state("b"), TaskState::Skipped);
    assert_eq!(d.state("c"), TaskState::Skipped, "all_success skips after a skip");
    assert_eq!(d.ready_names(), ["d"], "all_done runs anyway");
    d.ok("d");
    assert_eq!(d.m.state(), RunState::Succeeded, "skips are not failures");
}

#[test]
fn a_false_condition_skips_and_a_switch_picks_its_branch() {
    let mut d = Driver::new(
        "name: t\ntasks:\n- {name: sw, switch: {on: \"{{ params.kind }}\", cases: {csv: [csv], json: [json]}}}\n\
         - {name: csv, plugin: p, depends_on: [sw]}\n- {name: json, plugin: p, depends_on: [sw]}\n\
         - {name: after, plugin: p, depends_on: [csv, json], trigger_rule: none_failed}\n\
         params: {kind: csv}\n",
    );
    let sw = d.idx("sw");
    assert_eq!(d.ready_names(), ["sw"]);
    d.ready.clear();
    let json = d.idx("json");
    d.feed(Input::Switched { task: sw, skip: vec![json] });
    assert_eq!(d.state("sw"), TaskState::Succeeded);
    assert_eq!(d.state("json"), TaskState::Skipped);
    assert_eq!(d.ready_names(), ["csv"]);
    let csv = d.idx("csv");
    d.ready.clear();
    d.feed(Input::Skip { task: csv });
    assert_eq!(d.state("csv"), TaskState::Skipped, "its condition was false");
    assert_eq!(d.ready_names(), ["after"], "none_failed: skips are fine");
    assert!(d.m.apply(Input::Skip { task: csv }, 0).is_err(), "only a queued task can be skipped");
}

#[test]
fn a_child_run_s_end_ends_its_task() {
    let mut d =
        Driver::new("name: t\ntasks:\n- {name: child, workflow: other}\n- {name: b, plugin: p, depends_on: [child]}\n");
    let child = d.idx("child");
    d.ready.clear();
    d.feed(Input::Wait { task: child });
    assert_eq!(d.state("child"), TaskState::Waiting);
    assert_eq!(d.m.running(), 0, "waiting holds no worker");
    d.feed(Input::ChildEnded { task: child, succeeded: false });
    assert_eq!(d.state("child"), TaskState::Failed);
    assert_eq!(d.state("b"), TaskState::UpstreamFailed);
    assert_eq!(d.m.state(), RunState::Failed);
    // Rerunning the task makes it ready again (the engine starts a new child).
    d.feed(Input::RerunTask { task: child, downstream: true });
    d.feed(Input::Start);
    assert_eq!(d.ready_names(), ["child"]);
}

#[test]
fn a_sensor_waits_between_checks_and_fails_after_its_last() {
    let mut d = Driver::new("name: t\ntasks:\n- {name: s, plugin: p, sensor: {interval: 30s, timeout: 1m}}\n");
    let s = d.idx("s");
    let attempt = d.start("s");
    d.feed(Input::NotReady { task: s, attempt, at_ms: 30_000, last_check: false });
    assert_eq!(d.state("s"), TaskState::Waiting);
    assert_eq!(d.wakes, [(s, 30_000)]);
    d.feed(Input::Unblock { task: s });
    assert_eq!(d.ready_names(), ["s"]);
    let attempt = d.start("s");
    d.feed(Input::NotReady { task: s, attempt, at_ms: 60_000, last_check: true });
    assert_eq!(d.state("s"), TaskState::Failed);
    assert_eq!(d.m.state(), RunState::Failed);
}

#[test]
fn the_stop_strategy_ends_the_run_at_the_first_failure() {
    let mut d = Driver::new(
        "name: t\non_failure: stop\ntasks:\n- {name: a, plugin: p}\n- {name: b, plugin: p}\n\
         - {name: c, plugin: p, depends_on: [b]}\n",
    );
    d.start("b");
    d.fail("a", false);
    assert_eq!(d.m.state(), RunState::Failed);
    assert_eq!(d.cancelled, [d.idx("b")], "the running attempt is cancelled");
    assert_eq!(d.state("c"), TaskState::Killed, "nothing new starts");
}

#[test]
fn a_run_waiting_upstream_is_released_then_admitted() {
    let wf = workflow("name: t\nupstream: [{workflow: up}]\ntasks:\n- {name: a, plugin: p}\n");
    let mut m = RunMachine::new(wf);
    assert_eq!(m.state(), RunState::Waiting);
    assert!(m.apply(Input::Start, 0).is_err(), "not before it is released");
    let actions = m.apply(Input::Release, 0).unwrap();
    assert_eq!(actions, [Action::RunChanged { from: RunState::Waiting, to: RunState::Queued }]);
    let actions = m.apply(Input::Start, 0).unwrap();
    assert!(actions.contains(&Action::Dispatch { task: 0 }));
    // Re-flushed once finished, it waits for its upstream again.
    let (attempt, _) = m.start_attempt(0).unwrap();
    m.apply(Input::AttemptSucceeded { task: 0, attempt }, 0).unwrap();
    assert_eq!(m.state(), RunState::Succeeded);
    m.apply(Input::Reflush, 0).unwrap();
    assert_eq!(m.state(), RunState::Waiting);
    assert_eq!(m.task(0).state, TaskState::Pending);
    m.apply(Input::Release, 0).unwrap();
    let actions = m.apply(Input::Start, 0).unwrap();
    assert!(actions.contains(&Action::Dispatch { task: 0 }), "its roots run again");
    // A waiting run can be killed.
    let wf = workflow("name: t\nupstream: [{workflow: up}]\ntasks:\n- {name: a, plugin: p}\n");
    let mut m = RunMachine::new(wf);
    m.apply(Input::Kill, 0).unwrap();
    assert_eq!(m.state(), RunState::Killed);
}

#[test]
fn a_run_stopped_while_it_waited_upstream_waits_again_when_rerun() {
    let wf = workflow("name: t\nupstream: [{workflow: up}]\ntasks:\n- {name: a, plugin: p}\n");
    for stop in [Input::Kill, Input::MarkFailed] {
        let mut m = RunMachine::new(wf.clone());
        m.apply(stop, 0).unwrap();
        let actions = m.apply(Input::RerunFailed, 0).unwrap();
        assert_eq!(m.state(), RunState::Waiting, "its upstream was never done for it");
        assert!(!actions.iter().any(|a| matches!(a, Action::Dispatch { .. })));
        assert!(m.apply(Input::Start, 0).is_err(), "not before it is released");
        m.apply(Input::Release, 0).unwrap();
        let actions = m.apply(Input::Start, 0).unwrap();
        assert!(actions.contains(&Action::Dispatch { task: 0 }));
    }
    // Released once, a rerun goes straight to the queue (a re-flush is
    // what waits again).
    let mut m = RunMachine::new(wf.clone());
    m.apply(Input::Release, 0).unwrap();
    m.apply(Input::Start, 0).unwrap();
    m.apply(Input::MarkFailed, 0).unwrap();
    m.apply(Input::RerunFailed, 0).unwrap();
    assert_eq!(m.state(), RunState::Queued);
    // Restored from rows: what the rows say about its release counts.
    let tasks = vec![TaskProgress::new(TaskState::Killed, 0, 0, false)];
    for (released, after) in [(false, RunState::Waiting), (true, RunState::Queued)] {
        let (m, _) = RunMachine::restore(wf.clone(), RunState::Failed, tasks.clone());
        let mut m = m.with_released(released);
        m.apply(Input::RerunFailed, 0).unwrap();
        assert_eq!(m.state(), after, "released: {released}");
    }
}
