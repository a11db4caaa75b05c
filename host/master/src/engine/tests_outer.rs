//! The outer DAG and control nodes in the engine, tested by effects:
//! runs waiting for other workflows' instances, woken by their changes;
//! sub-workflows; conditions, switches, sensors; failure strategies and run
//! timeouts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;

use dagr_protocol::commands::Command;
use dagr_protocol::wire::FailureKind;
use dagr_store::{RunState, TaskState};

use crate::engine::testkit::{TENANT, TestEnv, dispatched_names, worker};

const HOUR: i64 = 3_600_000;
/// 2026-01-10T00:00:00Z.
const DAY: i64 = 1_768_003_200_000;

fn finish_all(env: &mut TestEnv, task: &str) {
    loop {
        let keys = env.in_flight_all(task);
        if keys.is_empty() {
            return;
        }
        for key in keys {
            env.succeed(&key, "{}");
        }
    }
}

fn quarter_daily(env: &mut TestEnv) {
    env.apply("name: loads\nschedule: {cron: \"0 */6 * * *\"}\ntasks:\n- {name: load, plugin: echo}\n");
    env.apply(
        "name: report\nschedule: {cron: \"0 2 * * *\"}\nupstream: [{workflow: loads, cycles: day}]\n\
         tasks:\n- {name: sum, plugin: echo}\n",
    );
}

#[test]
fn a_daily_run_waits_for_every_cycle_of_its_day_and_starts_when_the_last_ends() {
    let mut env = TestEnv::new();
    quarter_daily(&mut env);
    let report = env.trigger_at("report", DAY + 2 * HOUR, None);
    let effects = env.step(vec![]);
    assert!(effects.dispatches.is_empty());
    assert_eq!(env.store.runs[&report].state, RunState::Waiting);
    assert!(!env.state.has_run(&report), "a waiting instance is not kept in memory");
    // Any failure in the day wakes it; a success only at its sentinel, the
    // day's last load (nothing can release it before that one ends).
    assert_eq!(
        env.store.waits[&report],
        vec![
            ("loads".to_owned(), DAY, DAY + 18 * HOUR, true),
            ("loads".to_owned(), DAY + 18 * HOUR, DAY + 18 * HOUR, false)
        ]
    );
    let waiting = env.store.events.iter().rev().find(|e| e.kind == "run.waiting").unwrap();
    assert!(waiting.data.contains("missing"), "it says what it waits for: {}", waiting.data);

    // The four loads of the day (and one of the next day, which does not count).
    let loads: Vec<String> = [0, 6, 12, 18, 24].iter().map(|h| env.trigger_at("loads", DAY + h * HOUR, None)).collect();
    env.step(vec![]);
    let mut keys = env.in_flight_all("load");
    assert_eq!(keys.len(), 5);
    keys.sort_by_key(|k| env.store.runs[&k.run_id].logical_time);
    let wakes =
        |env: &TestEnv| env.store.commands.iter().filter(|(_, run, c)| *run == report && *c == Command::Wake).count();
    for (i, key) in keys.iter().enumerate() {
        let before = wakes(&env);
        let ended = env.succeed(key, "{}");
        // The wake-up is a command the store wrote with the change, and
        // the engine reads it at once (not at its next poll).
        assert!(ended.batch.wake_command.is_some() && ended.read_commands, "load {i}: the wake-up is read next");
        assert_eq!(wakes(&env) - before, usize::from(i == 3), "woken by the sentinel's end only (load {i})");
        let effects = env.step(vec![]);
        let released = dispatched_names(&effects).contains(&"sum".to_owned());
        assert_eq!(released, i == 3, "released by the fourth load of its day only (load {i})");
    }
    assert_eq!(env.run_state(&report), RunState::Running, "released once the day's four loads succeeded");
    assert!(!env.store.waits.contains_key(&report), "its waits are gone");
    let linked: Vec<&String> =
        env.store.links.iter().filter(|(_, _, down)| *down == report).map(|(_, up, _)| up).collect();
    assert_eq!(linked.len(), 4, "released by the four loads of its day: {linked:?}");
    assert!(!linked.contains(&&loads[4]));
}

#[test]
fn yesterday_s_run_and_a_missing_instance_that_is_skipped() {
    let mut env = TestEnv::new();
    env.apply("name: sales\nschedule: {cron: \"0 1 * * *\"}\ntasks:\n- {name: s, plugin: echo}\n");
    env.apply(
        "name: daily\nupstream: [{workflow: sales, offset: -1d}, {workflow: gone, missing: skip}]\n\
         tasks:\n- {name: d, plugin: echo}\n",
    );
    let run = env.trigger_at("daily", DAY + 3 * HOUR, None);
    env.step(vec![]);
    assert_eq!(env.store.runs[&run].state, RunState::Waiting);
    assert_eq!(
        env.store.waits[&run],
        vec![
            ("sales".to_owned(), DAY - 23 * HOUR, DAY - 23 * HOUR, true),
            ("sales".to_owned(), DAY - 23 * HOUR, DAY - 23 * HOUR, false)
        ],
        "yesterday 01:00"
    );
    // Today's sales run does not release it; yesterday's does.
    env.trigger_at("sales", DAY + HOUR, None);
    env.step(vec![]);
    finish_all(&mut env, "s");
    env.step(vec![]);
    assert_eq!(env.store.runs[&run].state, RunState::Waiting);
    env.trigger_at("sales", DAY - 23 * HOUR, None);
    env.step(vec![]);
    finish_all(&mut env, "s");
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["d"]);
}

#[test]
fn a_failed_upstream_fails_or_holds_its_dependents_by_policy_and_a_rerun_releases_them() {
    for policy in ["fail", "wait"] {
        let mut env = TestEnv::new();
        env.apply("name: up\ntasks:\n- {name: u, plugin: echo}\n");
        env.apply(&format!(
            "name: down\non_upstream_failure: {policy}\nupstream: [{{workflow: up}}]\ntasks:\n- {{name: d, plugin: echo}}\n"
        ));
        let up = env.trigger_at("up", DAY, None);
        let down = env.trigger_at("down", DAY, None);
        env.step(vec![]);
        let u = env.in_flight("u");
        env.fail(&u, FailureKind::Fatal);
        env.step(vec![]);
        if policy == "fail" {
            assert_eq!(env.store.runs[&down].state, RunState::Failed);
            assert!(
                env.store.events.iter().any(|e| e.kind == "run.upstream_failed" && e.run_id.as_deref() == Some(&down))
            );
            continue;
        }
        assert_eq!(env.store.runs[&down].state, RunState::Waiting, "held: a rerun upstream may fix it");
        env.command(&up, Command::RerunFailed { downstream: false });
        env.step(vec![]);
        let u = env.in_flight("u");
        env.succeed(&u, "{}");
        let effects = env.step(vec![]);
        assert_eq!(dispatched_names(&effects), ["d"], "the rerun released it");
    }
}

#[test]
fn a_run_failed_or_killed_while_it_waited_waits_again_when_rerun() {
    for stop in ["upstream failed", "kill", "mark failed"] {
        let mut env = TestEnv::new();
        env.apply("name: up\ntasks:\n- {name: u, plugin: echo}\n");
        env.apply(
            "name: down\non_upstream_failure: fail\nupstream: [{workflow: up}]\ntasks:\n- {name: d, plugin: echo}\n",
        );
        let up = env.trigger_at("up", DAY, None);
        let down = env.trigger_at("down", DAY, None);
        env.step(vec![]);
        let u = env.in_flight("u");
        match stop {
            "upstream failed" => {
                env.fail(&u, FailureKind::Fatal);
            }
            "kill" => {
                env.command(&down, Command::Kill);
            }
            _ => {
                env.command(&down, Command::MarkFailed);
            }
        }
        env.step(vec![]);
        assert!(env.store.runs[&down].state.is_terminal(), "{stop}: {:?}", env.store.runs[&down].state);
        if stop == "upstream failed" {
            // Rerun while its upstream is still failed, it fails again.
            env.command(&down, Command::RerunFailed { downstream: false });
            let effects = env.step(vec![]);
            assert!(dispatched_names(&effects).is_empty());
            assert_eq!(env.store.runs[&down].state, RunState::Failed);
            env.command(&up, Command::RerunFailed { downstream: false });
            env.step(vec![]);
        }
        env.command(&down, Command::RerunFailed { downstream: false });
        let effects = env.step(vec![]);
        assert!(dispatched_names(&effects).is_empty(), "{stop}: its upstream was never done for it");
        assert_eq!(env.store.runs[&down].state, RunState::Waiting, "{stop}");
        let u = env.in_flight("u");
        env.succeed(&u, "{}");
        let effects = env.step(vec![]);
        assert_eq!(dispatched_names(&effects), ["d"], "{stop}: released by its upstream's end");
    }
}

/// `up` (its definition given) and `down`, which waits for it to end in
/// any state, at `DAY`: `up` fails, which releases `down`, and `down`'s
/// task succeeds. Returns (up, down).
fn released_by_a_failed_upstream(env: &mut TestEnv, up_yaml: &str) -> (String, String) {
    env.apply(up_yaml);
    env.apply("name: down\nupstream: [{workflow: up, require: finished}]\ntasks:\n- {name: d, plugin: echo}\n");
    let up = env.trigger_at("up", DAY, None);
    let down = env.trigger_at("down", DAY, None);
    env.step(vec![]);
    let u = env.in_flight("u");
    env.fail(&u, FailureKind::Fatal);
    env.step(vec![]);
    let d = env.in_flight("d");
    env.succeed(&d, "{}");
    (up, down)
}

#[test]
fn a_re_flushed_run_stopped_before_its_upstream_ended_again_waits_again_when_rerun() {
    let mut env = TestEnv::new();
    let (up, down) = released_by_a_failed_upstream(&mut env, "name: up\ntasks:\n- {name: u, plugin: echo}\n");
    env.step(vec![]);
    assert_eq!(env.store.runs[&down].state, RunState::Succeeded);
    // The upstream is rerun with what it released: `down` waits again,
    // and is marked failed before the upstream ends.
    env.command(&up, Command::RerunFailed { downstream: true });
    env.step(vec![]);
    env.step(vec![]);
    assert_eq!(env.store.runs[&down].state, RunState::Waiting, "re-flushed");
    env.command(&down, Command::MarkFailed);
    env.step(vec![]);
    assert!(!env.state.has_run(&down), "it ended: read from its rows again when rerun");
    env.command(&down, Command::RerunFailed { downstream: false });
    let effects = env.step(vec![]);
    assert!(dispatched_names(&effects).is_empty(), "its upstream has not ended since it was re-flushed");
    assert_eq!(env.store.runs[&down].state, RunState::Waiting);
    let u = env.in_flight("u");
    env.succeed(&u, "{}");
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["d"]);
}

#[test]
fn among_instances_of_one_cycle_the_sentinel_is_the_one_furthest_from_its_end() {
    let mut env = TestEnv::new();
    env.apply("name: b\ntasks:\n- {name: b, plugin: echo}\n");
    env.apply("name: a\ntasks:\n- {name: a, plugin: echo}\n");
    env.apply("name: down\nupstream: [{workflow: a}, {workflow: b}]\ntasks:\n- {name: d, plugin: echo}\n");
    env.trigger_at("b", DAY, None);
    env.step(vec![]);
    // b runs, a is not even made: a ends last, so a wakes it.
    let down = env.trigger_at("down", DAY, None);
    env.step(vec![]);
    let sentinel: Vec<_> = env.store.waits[&down].iter().filter(|(.., failures_only)| !failures_only).collect();
    assert_eq!(sentinel, [&("a".to_owned(), DAY, DAY, false)]);
}

#[test]
fn a_failure_before_the_sentinel_still_wakes_and_fails_the_dependent() {
    let mut env = TestEnv::new();
    env.apply("name: loads\nschedule: {cron: \"0 */6 * * *\"}\ntasks:\n- {name: load, plugin: echo}\n");
    env.apply(
        "name: report\non_upstream_failure: fail\nupstream: [{workflow: loads, cycles: day}]\n\
         tasks:\n- {name: sum, plugin: echo}\n",
    );
    let report = env.trigger_at("report", DAY + 2 * HOUR, None);
    env.step(vec![]);
    assert_eq!(env.store.runs[&report].state, RunState::Waiting);
    // The day's second load fails while its last (the sentinel) has not
    // even been made: the failure wakes the report, which fails by policy.
    for h in [0, 6] {
        env.trigger_at("loads", DAY + h * HOUR, None);
    }
    env.step(vec![]);
    let mut keys = env.in_flight_all("load");
    keys.sort_by_key(|k| env.store.runs[&k.run_id].logical_time);
    env.succeed(&keys[0], "{}");
    env.step(vec![]);
    assert_eq!(env.store.runs[&report].state, RunState::Waiting, "a success before the sentinel wakes nobody");
    env.fail(&keys[1], FailureKind::Fatal);
    env.step(vec![]);
    assert_eq!(env.store.runs[&report].state, RunState::Failed, "failed by the 06:00 load at once");
}

#[test]
fn a_changed_upstream_schedule_moves_the_sentinel() {
    let mut env = TestEnv::new();
    env.lead();
    quarter_daily(&mut env);
    let report = env.trigger_at("report", DAY + 2 * HOUR, None);
    env.step(vec![]);
    assert_eq!(env.store.waits[&report].last(), Some(&("loads".to_owned(), DAY + 18 * HOUR, DAY + 18 * HOUR, false)));
    // Every eight hours now: no 18:00 load will come. The change wakes the
    // report, which waits for 16:00 instead.
    env.apply("name: loads\nschedule: {cron: \"0 */8 * * *\"}\ntasks:\n- {name: load, plugin: echo}\n");
    env.step(vec![]);
    env.step(vec![]);
    assert_eq!(env.store.waits[&report].last(), Some(&("loads".to_owned(), DAY + 16 * HOUR, DAY + 16 * HOUR, false)));
    for h in [0, 8, 16] {
        env.trigger_at("loads", DAY + h * HOUR, None);
    }
    env.step(vec![]);
    finish_all(&mut env, "load");
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["sum"], "released by the day's three loads");
}

#[test]
fn an_upstream_end_committed_before_the_waits_is_found_by_reading_the_sentinel_again() {
    let mut env = TestEnv::new();
    env.apply("name: up\ntasks:\n- {name: u, plugin: echo}\n");
    env.apply("name: down\nupstream: [{workflow: up}]\ntasks:\n- {name: d, plugin: echo}\n");
    // The upstream run belongs to another master (its slot is not ours).
    let up = env.trigger_at("up", DAY, None);
    let theirs = dagr_protocol::slot_of(&up);
    let mut down = env.trigger_at("down", DAY, None);
    while dagr_protocol::slot_of(&down) == theirs {
        down = env.trigger_at("down", DAY, None);
    }
    let ours = (0..dagr_protocol::SLOTS).filter(|s| *s != theirs).collect();
    let effects = env.step(vec![crate::engine::Input::Ownership(ours)]);
    assert!(effects.read_commands, "the sentinel is read again at once");
    assert_eq!(env.store.runs[&down].state, RunState::Waiting);
    // The other master ends it, and its commit lands between this master's
    // read and its waits: its wake-up found nobody waiting.
    ended_elsewhere(&mut env, &up, RunState::Succeeded);
    env.step(vec![]);
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["d"], "woken by reading its sentinel again");
}

/// Another master ends `run` (its commit found no waits yet).
fn ended_elsewhere(env: &mut TestEnv, run: &str, state: RunState) {
    let now = env.now;
    let row = env.store.runs.get_mut(run).unwrap();
    row.state = state;
    row.finished_at = Some(now);
}

/// A run of `workflow` at `at` in a slot this master will not own, and one
/// of `down` at `DAY` in another; the slots the first is not in.
fn across_masters(env: &mut TestEnv, workflow: &str, at: i64, down: &str) -> (String, String, HashSet<u32>) {
    let up = env.trigger_at(workflow, at, None);
    let theirs = dagr_protocol::slot_of(&up);
    let mut run = env.trigger_at(down, DAY, None);
    while dagr_protocol::slot_of(&run) == theirs {
        run = env.trigger_at(down, DAY, None);
    }
    (up, run, (0..dagr_protocol::SLOTS).filter(|s| *s != theirs).collect())
}

#[test]
fn a_master_that_judged_with_every_slot_still_reads_the_waits_again() {
    // `dagr sim --outer --masters 2 --workers 1 --runs 24 --seed 2300376`:
    // the other master was down when this one judged, so this one owned
    // every slot. Its commit was slow; meanwhile the other came back, took
    // the upstream's slot and ended the upstream run, and its wake-up found
    // no waits yet. Owning every slot at the read says nothing about the
    // commit.
    let mut env = TestEnv::new();
    env.apply("name: up\ntasks:\n- {name: u, plugin: echo}\n");
    env.apply("name: down\nupstream: [{workflow: up, require: finished}]\ntasks:\n- {name: d, plugin: echo}\n");
    let (up, down, ours) = across_masters(&mut env, "up", DAY, "down");
    let every = (0..dagr_protocol::SLOTS).collect();
    let effects = env.step(vec![crate::engine::Input::Ownership(every)]);
    assert!(effects.read_commands, "the waits are read again at once");
    assert_eq!(env.store.runs[&down].state, RunState::Waiting);
    ended_elsewhere(&mut env, &up, RunState::Killed);
    env.step(vec![crate::engine::Input::Ownership(ours)]);
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["d"], "woken by reading its sentinel again");
}

#[test]
fn a_run_made_and_ended_in_an_empty_window_before_the_waits_commit_is_found_by_reading_it_again() {
    let mut env = TestEnv::new();
    // No schedule upstream: the dependent waits for any run of its day,
    // and with none in it yet it has no sentinel.
    env.apply("name: up\ntasks:\n- {name: u, plugin: echo}\n");
    env.apply("name: down\nupstream: [{workflow: up, cycles: day}]\ntasks:\n- {name: d, plugin: echo}\n");
    let (up, down, ours) = across_masters(&mut env, "up", DAY - 2 * 24 * HOUR, "down");
    let effects = env.step(vec![crate::engine::Input::Ownership(ours)]);
    assert!(effects.read_commands, "the waits are read again at once");
    assert_eq!(env.store.runs[&down].state, RunState::Waiting);
    assert!(env.store.waits[&down].iter().all(|(.., failures_only)| !failures_only), "no sentinel");
    // The other master makes and ends a run of that day between this
    // master's read and its commit: its wake-up found nobody waiting.
    env.store.runs.get_mut(&up).unwrap().logical_time = DAY + HOUR;
    ended_elsewhere(&mut env, &up, RunState::Succeeded);
    env.step(vec![]);
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["d"], "woken by reading its window again");
}

#[test]
fn a_failure_beside_the_sentinel_committed_before_the_waits_is_found_by_reading_its_range_again() {
    let mut env = TestEnv::new();
    env.apply("name: loads\nschedule: {cron: \"0 */6 * * *\"}\ntasks:\n- {name: load, plugin: echo}\n");
    env.apply(
        "name: report\non_upstream_failure: fail\nupstream: [{workflow: loads, cycles: day}]\n\
         tasks:\n- {name: sum, plugin: echo}\n",
    );
    // The 06:00 load belongs to another master; the sentinel (18:00) is
    // not made yet.
    let (load, report, ours) = across_masters(&mut env, "loads", DAY + 6 * HOUR, "report");
    env.step(vec![crate::engine::Input::Ownership(ours)]);
    assert_eq!(env.store.runs[&report].state, RunState::Waiting);
    // It fails between this master's read and its commit.
    ended_elsewhere(&mut env, &load, RunState::Failed);
    env.step(vec![]);
    env.step(vec![]);
    assert_eq!(env.store.runs[&report].state, RunState::Failed, "failed by policy, found by reading the day again");
}

#[test]
fn a_success_beside_the_sentinel_committed_before_the_waits_wakes_nobody() {
    let mut env = TestEnv::new();
    quarter_daily(&mut env);
    let (load, report, ours) = across_masters(&mut env, "loads", DAY + 6 * HOUR, "report");
    env.step(vec![crate::engine::Input::Ownership(ours)]);
    let before = env.store.commands.len();
    ended_elsewhere(&mut env, &load, RunState::Succeeded);
    env.step(vec![]);
    env.step(vec![]);
    assert_eq!(env.store.commands.len(), before, "a success beside the sentinel is no reason to judge again");
    assert_eq!(env.store.runs[&report].state, RunState::Waiting);
}

#[test]
fn a_master_taking_over_judges_again_what_its_predecessor_left_waiting() {
    // A run waiting, and a run whose task waits, for `up`.
    for (down_yaml, gated) in [
        ("name: down\nupstream: [{workflow: up}]\ntasks:\n- {name: d, plugin: echo}\n", "d"),
        ("name: down\ntasks:\n- {name: d, plugin: echo, upstream: [{workflow: up}]}\n", "d"),
    ] {
        let mut env = TestEnv::new();
        env.apply("name: up\ntasks:\n- {name: u, plugin: echo}\n");
        env.apply(down_yaml);
        let (up, down, ours) = across_masters(&mut env, "up", DAY, "down");
        let effects = env.step(vec![crate::engine::Input::Ownership(ours)]);
        assert!(dispatched_names(&effects).is_empty());
        assert!(env.store.waits.contains_key(&down), "{down_yaml}: its waits are recorded");
        // Another master ends the upstream run; its commit found no waits
        // yet. This master dies before it reads the upstream again, and
        // another takes its slots over.
        ended_elsewhere(&mut env, &up, RunState::Succeeded);
        let config = crate::EngineConfig { node_id: "m2".into(), ..crate::EngineConfig::default() };
        let mut dispatched = dispatched_names(&env.take_over(config, vec![worker("w1", 8)]));
        for _ in 0..3 {
            dispatched.extend(dispatched_names(&env.step(vec![])));
        }
        assert_eq!(dispatched, [gated], "{down_yaml}: judged again by the master that took it over");
    }
}

#[test]
fn a_master_taking_over_many_waiting_runs_wakes_them_a_page_a_step() {
    const PAGE: usize = 5; // [master] takeover_wakes_per_step
    let wakes = |effects: &crate::engine::Effects| {
        effects.batch.commands.iter().filter(|c| c.command.kind == Command::Wake.kind()).count()
    };
    let mut env = TestEnv::new();
    env.apply("name: up\ntasks:\n- {name: u, plugin: echo}\n");
    env.apply("name: down\nupstream: [{workflow: up}]\ntasks:\n- {name: d, plugin: echo}\n");
    env.apply("name: free\ntasks:\n- {name: f, plugin: echo}\n");
    let n = PAGE + 4;
    let runs: Vec<String> = (0..n as i64).map(|i| env.trigger_at("down", DAY + i * HOUR, None)).collect();
    env.step(vec![]);
    assert!(runs.iter().all(|r| env.store.runs[r].state == RunState::Waiting));
    // Another master takes every slot over: a page of wakes in its first
    // step, the rest later; a trigger between them is not held behind
    // them all.
    let config =
        crate::EngineConfig { node_id: "m2".into(), takeover_wakes_per_step: PAGE, ..crate::EngineConfig::default() };
    let effects = env.take_over(config, vec![worker("w1", 8)]);
    assert_eq!(wakes(&effects), PAGE);
    assert!(effects.read_commands, "the wakes are read at once");
    env.trigger("free");
    // A slot lost meanwhile is its new owner's to judge.
    let rest = &runs[PAGE..];
    let lost = dagr_protocol::slot_of(&rest[0]);
    let left = rest.iter().filter(|r| dagr_protocol::slot_of(r) != lost).count();
    let ours: HashSet<u32> = (0..dagr_protocol::SLOTS).filter(|s| *s != lost).collect();
    let effects = env.step(vec![crate::engine::Input::Ownership(ours)]);
    assert_eq!(dispatched_names(&effects), ["f"], "the trigger goes on in the next step");
    assert_eq!(wakes(&effects), left);
    assert_eq!(wakes(&env.step(vec![])), 0);
    assert!(runs.iter().all(|r| env.store.runs[r].state == RunState::Waiting), "judged: still waiting");
}

#[test]
fn a_task_waits_for_a_task_of_another_workflow_while_its_run_goes_on() {
    let mut env = TestEnv::new();
    env.apply(
        "name: up\ntasks:\n- {name: extract, plugin: echo}\n- {name: later, plugin: echo, depends_on: [extract]}\n",
    );
    env.apply(
        "name: down\ntasks:\n- {name: free, plugin: echo}\n\
         - {name: gated, plugin: echo, upstream: [{workflow: up, task: extract}]}\n",
    );
    let down = env.trigger_at("down", DAY, None);
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["free"]);
    assert_eq!(env.task_state(&down, "gated"), TaskState::Waiting);
    assert!(env.store.waits.contains_key(&down));
    env.trigger_at("up", DAY, None);
    env.step(vec![]);
    let extract = env.in_flight("extract");
    env.succeed(&extract, "{}");
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["gated"], "released by the upstream task, its run still running");
}

#[test]
fn a_sub_workflow_runs_as_a_child_and_its_end_ends_the_task() {
    let mut env = TestEnv::new();
    env.apply("name: child\nparams: {n: 1}\ntasks:\n- {name: c, plugin: echo, params: {n: \"{{ params.n }}\"}}\n");
    env.apply(
        "name: parent\ntasks:\n- {name: sub, workflow: child, params: {n: 7}}\n- {name: after, plugin: echo, depends_on: [sub]}\n",
    );
    let parent = env.trigger("parent");
    let effects = env.step(vec![]);
    assert!(effects.dispatches.is_empty(), "the sub-workflow task holds no worker");
    assert_eq!(effects.batch.child_runs.len(), 1);
    let child = effects.batch.child_runs[0].run.clone();
    assert_eq!(child.parent_run.as_deref(), Some(parent.as_str()));
    assert_eq!(child.params, r#"{"n":7}"#);
    assert_eq!(env.task_state(&parent, "sub"), TaskState::Waiting);
    // The child is admitted and runs.
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["c"]);
    let c = env.in_flight("c");
    let ended = env.succeed(&c, "{}");
    // Its end reaches the parent as a command, written with the child's
    // end and fenced with it (a master that lost the child tells nobody).
    let told = ended.batch.commands.iter().find(|c| c.run_id == parent).expect("the parent is told");
    assert_eq!(told.by.as_deref(), Some(child.id.as_str()));
    assert!(ended.batch.fences.iter().any(|(id, _)| *id == child.id), "{:?}", ended.batch.fences);
    let effects = env.step(vec![]);
    assert_eq!(env.task_state(&parent, "sub"), TaskState::Succeeded);
    assert_eq!(dispatched_names(&effects), ["after"]);
}

#[test]
fn killing_a_parent_kills_its_child() {
    let mut env = TestEnv::new();
    env.apply("name: child\ntasks:\n- {name: c, plugin: echo}\n");
    env.apply("name: parent\ntasks:\n- {name: sub, workflow: child}\n");
    let parent = env.trigger("parent");
    let effects = env.step(vec![]);
    let child = effects.batch.child_runs[0].run.id.clone();
    env.step(vec![]);
    env.command(&parent, Command::Kill);
    env.step(vec![]);
    assert_eq!(env.store.runs[&parent].state, RunState::Killed);
    let effects = env.step(vec![]);
    assert_eq!(env.store.runs[&child].state, RunState::Killed, "the kill reached the child");
    assert_eq!(effects.cancels.len(), 1, "its running attempt is cancelled");
}

#[test]
fn a_thousand_parents_waiting_on_children_finish_on_two_worker_slots() {
    // The seeds' deadlock: parents filling the worker pool while their
    // children wait for a slot. Waiting parents hold no slot here.
    let mut env = TestEnv::with(|c| c.max_in_flight = 2, vec![worker("w1", 2)]);
    env.apply("name: child\ntasks:\n- {name: c, plugin: echo}\n");
    env.apply("name: parent\ntasks:\n- {name: sub, workflow: child}\n- {name: p, plugin: echo, depends_on: [sub]}\n");
    let parents: Vec<String> = (0..1000).map(|_| env.trigger("parent")).collect();
    let mut steps = 0;
    loop {
        let keys: Vec<_> = env.state.in_flight.keys().cloned().collect();
        assert!(keys.len() <= 2, "never more than the two slots");
        if keys.is_empty() {
            env.step(vec![]);
            if env.state.in_flight.is_empty() && parents.iter().all(|p| env.run_state(p).is_terminal()) {
                break;
            }
        }
        for key in keys {
            env.succeed(&key, "{}");
        }
        steps += 1;
        assert!(steps < 20_000, "the parents did not finish");
    }
    assert!(parents.iter().all(|p| env.store.runs[p].state == RunState::Succeeded));
}

#[test]
fn conditions_switches_and_disabled_tasks_skip_without_a_worker() {
    let mut env = TestEnv::new();
    env.apply(
        "name: ctl\nparams: {kind: json, go: false}\ntasks:\n- {name: detect, plugin: echo}\n\
         - {name: sw, switch: {on: \"{{ params.kind }}\", cases: {csv: [csv], json: [json]}}, depends_on: [detect]}\n\
         - {name: csv, plugin: echo, depends_on: [sw]}\n- {name: json, plugin: echo, depends_on: [sw]}\n\
         - {name: maybe, plugin: echo, when: \"{{ params.go }}\"}\n- {name: off, plugin: echo, enabled: false}\n",
    );
    let run = env.trigger("ctl");
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["detect"], "maybe's condition is false, off is disabled");
    assert_eq!(env.task_state(&run, "maybe"), TaskState::Skipped);
    assert_eq!(env.task_state(&run, "off"), TaskState::Skipped);
    let detect = env.in_flight("detect");
    let effects = env.succeed(&detect, "{}");
    assert_eq!(dispatched_names(&effects), ["json"], "the switch picked json");
    assert_eq!(env.task_state(&run, "csv"), TaskState::Skipped);
    assert_eq!(env.task_state(&run, "sw"), TaskState::Succeeded);
    let json = env.in_flight("json");
    env.succeed(&json, "{}");
    assert_eq!(env.run_state(&run), RunState::Succeeded);
}

#[test]
fn a_sensor_is_checked_again_without_holding_a_worker_until_ready_or_timeout() {
    let mut env = TestEnv::new();
    env.apply("name: s\ntasks:\n- {name: wait, plugin: echo, sensor: {interval: 10s, timeout: 30s}}\n");
    let run = env.trigger("s");
    env.step(vec![]);
    let check = env.in_flight("wait");
    env.succeed(&check, r#"{"ready": false}"#);
    assert_eq!(env.task_state(&run, "wait"), TaskState::Waiting);
    assert!(env.state.in_flight.is_empty(), "no worker between checks");
    env.advance(9_999);
    assert!(env.step(vec![]).dispatches.is_empty());
    env.advance(1);
    assert_eq!(dispatched_names(&env.step(vec![])), ["wait"], "checked again after its interval");
    let check = env.in_flight("wait");
    env.succeed(&check, r#"{"ready": true, "rows": 3}"#);
    assert_eq!(env.run_state(&run), RunState::Succeeded);

    // Never ready: fails after its last check.
    let run = env.trigger("s");
    env.step(vec![]);
    for _ in 0..3 {
        let check = env.in_flight("wait");
        env.succeed(&check, r#"{"ready": false}"#);
        env.advance(10_000);
        env.step(vec![]);
    }
    assert_eq!(env.task_state(&run, "wait"), TaskState::Failed);
    let error = env.store.tasks[&run][0].error.clone().unwrap();
    assert!(error.contains("did not hold within 30s"), "{error}");
}

#[test]
fn stop_strategy_and_run_timeout_end_a_run() {
    let mut env = TestEnv::new();
    env.apply("name: slow\ntimeout: 1m\ntasks:\n- {name: a, plugin: echo}\n");
    let run = env.trigger("slow");
    env.step(vec![]);
    env.advance(60_000);
    let effects = env.step(vec![]);
    assert_eq!(env.store.runs[&run].state, RunState::Failed);
    assert_eq!(effects.cancels.len(), 1, "its running attempt is cancelled");
    assert!(env.store.events.iter().any(|e| e.kind == "run.timeout"));

    let mut env = TestEnv::new();
    env.apply("name: stop\non_failure: stop\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo}\n");
    let run = env.trigger("stop");
    env.step(vec![]);
    let a = env.in_flight("a");
    let effects = env.fail(&a, FailureKind::Fatal);
    assert_eq!(effects.finished, vec![(run, RunState::Failed)]);
    assert_eq!(effects.cancels.len(), 1, "b is cancelled");
}

#[test]
fn a_paused_schedule_makes_no_cycle_until_resumed() {
    let mut env = TestEnv::new();
    env.apply("name: cron\nschedule: {cron: \"* * * * *\"}\ntasks:\n- {name: t, plugin: echo}\n");
    env.lead();
    env.store.paused.insert((TENANT.into(), "cron".into()));
    env.step(vec![crate::engine::Input::WorkflowChanged { tenant: TENANT.into(), name: "cron".into() }]);
    env.advance(5 * 60_000);
    assert!(env.step(vec![]).batch.new_runs.is_empty(), "offline");
    env.store.paused.clear();
    let effects = env.step(vec![crate::engine::Input::WorkflowChanged { tenant: TENANT.into(), name: "cron".into() }]);
    assert!(!effects.batch.new_runs.is_empty(), "online again");
}

/// `up` → `mid` → `down`, each released by the one before, all finished.
fn three_released_runs(env: &mut TestEnv) -> (String, String, String) {
    env.apply("name: up\ntasks:\n- {name: u, plugin: echo}\n");
    env.apply("name: mid\nupstream: [{workflow: up}]\ntasks:\n- {name: m, plugin: echo}\n");
    env.apply("name: down\nupstream: [{workflow: mid}]\ntasks:\n- {name: d, plugin: echo}\n");
    let up = env.trigger_at("up", DAY, None);
    let mid = env.trigger_at("mid", DAY, None);
    let down = env.trigger_at("down", DAY, None);
    env.step(vec![]);
    for task in ["u", "m", "d"] {
        let key = env.in_flight(task);
        env.succeed(&key, "{}");
        env.step(vec![]);
    }
    for run in [&up, &mid, &down] {
        assert_eq!(env.run_state(run), RunState::Succeeded);
    }
    (up, mid, down)
}

#[test]
fn a_re_flush_with_its_downstream_releases_each_run_only_after_its_upstream_ran_again() {
    let mut env = TestEnv::new();
    let (up, mid, down) = three_released_runs(&mut env);
    env.command(&up, Command::Reflush { downstream: true });
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["u"]);
    // The released run's re-flush is written with the upstream's new state,
    // in the same transaction, never beside the upstream's command.
    let written: Vec<&str> = effects.batch.commands.iter().map(|c| c.run_id.as_str()).collect();
    assert_eq!(written, [mid.as_str()], "{:?}", effects.batch.commands);
    let effects = env.step(vec![]);
    assert!(dispatched_names(&effects).is_empty(), "mid waits for up's new run: {:?}", dispatched_names(&effects));
    assert_eq!(env.run_state(&mid), RunState::Waiting);
    env.step(vec![]);
    assert_eq!(env.run_state(&down), RunState::Waiting, "down, re-flushed through mid, waits for it");
    let u = env.in_flight("u");
    env.succeed(&u, "{}");
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["m"], "up ran again: mid goes, down still waits");
    assert_eq!(env.run_state(&down), RunState::Waiting);
    let m = env.in_flight("m");
    env.succeed(&m, "{}");
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["d"]);
    let d = env.in_flight("d");
    env.succeed(&d, "{}");
    for run in [&up, &mid, &down] {
        assert_eq!(env.run_state(run), RunState::Succeeded);
    }
}

#[test]
fn a_re_flush_written_beside_its_upstream_s_command_would_go_at_once() {
    // Why the engine, not the API, re-flushes the released runs: two
    // commands read in one step are judged against the store as it was
    // before the step, where the upstream still reads as succeeded.
    let mut env = TestEnv::new();
    let (up, mid, _) = three_released_runs(&mut env);
    env.command(&up, Command::Reflush { downstream: false });
    env.command(&mid, Command::Reflush { downstream: false });
    let effects = env.step(vec![]);
    let mut names = dispatched_names(&effects);
    names.sort();
    assert_eq!(names, ["m", "u"], "mid did not wait for up: the race the downstream flag closes");
}

#[test]
fn a_failed_upstream_rerun_with_its_downstream_re_flushes_what_it_released() {
    let mut env = TestEnv::new();
    let (up, down) =
        released_by_a_failed_upstream(&mut env, "name: up\nparams: {}\ntasks:\n- {name: u, plugin: echo}\n");
    assert_eq!(env.run_state(&down), RunState::Succeeded, "any end state was enough");
    env.command(&up, Command::RerunFailed { downstream: true });
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["u"]);
    assert_eq!(effects.batch.commands.len(), 1, "down's re-flush: {:?}", effects.batch.commands);
    env.step(vec![]);
    assert_eq!(env.run_state(&down), RunState::Waiting);
    let u = env.in_flight("u");
    env.succeed(&u, "{}");
    assert_eq!(dispatched_names(&env.step(vec![])), ["d"]);
}

#[test]
fn a_thousand_waiting_sensors_on_two_slots_do_not_hold_up_other_work() {
    let mut env = TestEnv::with(|c| c.max_in_flight = 2, vec![worker("w1", 2)]);
    env.apply("name: sensing\ntasks:\n- {name: wait, plugin: echo, sensor: {interval: 10s, timeout: 1h}}\n");
    env.apply("name: work\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo, depends_on: [a]}\n");
    let sensors: Vec<String> = (0..1000).map(|_| env.trigger("sensing")).collect();
    // Every sensor's first check, two at a time: each answers not ready.
    let mut checks = 0;
    while sensors.iter().any(|s| env.task_state(s, "wait") != TaskState::Waiting) {
        let keys: Vec<_> = env.state.in_flight.keys().cloned().collect();
        assert!(keys.len() <= 2, "never more than the two slots");
        if keys.is_empty() {
            env.step(vec![]);
            continue;
        }
        for key in keys {
            env.succeed(&key, r#"{"ready": false}"#);
            checks += 1;
        }
        assert!(checks <= 1000, "each sensor is checked once before its interval");
    }
    assert!(env.state.in_flight.is_empty(), "1,000 sensors wait holding no slot");
    // Other work goes at once, task after task, while they wait.
    let run = env.trigger("work");
    assert_eq!(dispatched_names(&env.step(vec![])), ["a"]);
    let a = env.in_flight("a");
    assert_eq!(dispatched_names(&env.succeed(&a, "{}")), ["b"]);
    let b = env.in_flight("b");
    env.succeed(&b, "{}");
    assert_eq!(env.run_state(&run), RunState::Succeeded);
    // When their interval is up, the checks come back all at once; work
    // that comes with them waits at most behind that one round of checks
    // (each check holds a slot for one attempt, never until it is ready).
    env.advance(10_000);
    let run = env.trigger("work");
    let mut steps = 0;
    while !env.run_state(&run).is_terminal() {
        let keys: Vec<_> = env.state.in_flight.keys().cloned().collect();
        assert!(keys.len() <= 2);
        if keys.is_empty() {
            env.step(vec![]);
        }
        for key in keys {
            let output = if key.run_id == run { "{}" } else { r#"{"ready": false}"# };
            env.succeed(&key, output);
        }
        steps += 1;
        assert!(steps < 1100, "the work waited behind every sensor's check");
    }
    assert_eq!(env.run_state(&run), RunState::Succeeded);
    assert!(sensors.iter().any(|s| env.run_state(s) == RunState::Running), "the sensors still wait");
}
