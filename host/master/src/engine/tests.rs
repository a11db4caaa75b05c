//! The engine's state machine, tested by the effects of its steps on a
//! fake clock ([`TestEnv`]). No store, no network, no clock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use dagr_protocol::commands::Command;
use dagr_protocol::tenancy::TenantLimits;
use dagr_protocol::wire::{Ack, FailureKind, Outcome};
use dagr_store::{AttemptState, RunState, TaskState};

use crate::engine::effects::{Accepted, Input, LoadError, Need};
use crate::engine::testkit::{
    TENANT, TestEnv, all_slots, dispatched_names, dispatched_runs, lost_and_regained, worker,
};
use crate::engine::{Effects, WorkerInfo};

pub(crate) const CHAIN: &str = "name: chain\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo, depends_on: [a], \
                     params: {got: \"{{ inputs.a.v }}\"}}\n";
/// A chain whose second task renders nothing from the first.
pub(super) const PLAIN: &str =
    "name: plain\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo, depends_on: [a]}\n";

/// The task names a step dispatched, sorted.
pub(super) fn names(effects: &Effects) -> Vec<String> {
    let mut n = dispatched_names(effects);
    n.sort();
    n
}

#[test]
fn a_run_is_admitted_its_roots_dispatched_and_outputs_flow_downstream() {
    let mut env = TestEnv::new();
    env.apply(CHAIN);
    let run = env.trigger("chain");
    let effects = env.step(vec![]);
    assert!(env.needs_seen.contains(&Need::Claim(vec![run.clone()])), "the run is claimed: {:?}", env.needs_seen);
    assert_eq!(dispatched_names(&effects), ["a"]);
    assert_eq!(env.run_state(&run), RunState::Running);
    // Everything the dispatch depends on is in the same batch: the run's
    // state, the task's, the attempt's row, the consumed command.
    let batch = &effects.batch;
    assert!(batch.runs.iter().any(|r| r.id == run && r.state == RunState::Running));
    assert!(batch.tasks.iter().any(|t| t.name == "a" && t.state == TaskState::Running));
    assert!(batch.attempts.iter().any(|a| a.task == "a" && a.state == AttemptState::Running && a.worker == "w1"));
    assert_eq!(batch.commands_done.len(), 1);
    assert_eq!(effects.replies.len(), 1);
    assert!(batch.fences.iter().any(|(id, epoch)| *id == run && *epoch == 1), "writes are fenced by the claim's epoch");

    let a = env.in_flight("a");
    let effects = env.succeed(&a, r#"{"v": 42}"#);
    assert_eq!(effects.acks, vec![(1, run.clone(), Ack::Applied)]);
    let (spec, _) = &effects.dispatches[0];
    assert_eq!(spec.task_name, "b");
    assert_eq!(spec.inputs, r#"{"a":{"v":42}}"#);
    assert_eq!(spec.params, r#"{"got":42}"#);
    let b = env.in_flight("b");
    let effects = env.succeed(&b, "{}");
    assert_eq!(effects.finished, vec![(run.clone(), RunState::Succeeded)]);
    assert!(!env.state.has_run(&run), "a finished run is forgotten after its step");
    assert_eq!(env.store.runs[&run].state, RunState::Succeeded);
}

#[test]
fn max_active_runs_admits_runs_one_by_one_in_order() {
    let mut env = TestEnv::new();
    env.apply("name: one\nmax_active_runs: 1\ntasks:\n- {name: t, plugin: echo}\n");
    let runs: Vec<String> = (0..3).map(|_| env.trigger("one")).collect();
    let effects = env.step(vec![]);
    assert_eq!(effects.dispatches.len(), 1);
    assert_eq!(effects.dispatches[0].0.key.run_id, runs[0]);
    assert_eq!(env.run_state(&runs[1]), RunState::Queued);
    assert_eq!(env.run_state(&runs[2]), RunState::Queued);
    let t = env.in_flight("t");
    let effects = env.succeed(&t, "{}");
    assert_eq!(effects.dispatches[0].0.key.run_id, runs[1], "the next oldest run starts");
    assert_eq!(env.run_state(&runs[2]), RunState::Queued);
}

#[test]
fn workflow_concurrency_parks_tasks_until_one_ends() {
    let mut env = TestEnv::new();
    env.apply(
        "name: wide\nconcurrency: 2\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo}\n\
         - {name: c, plugin: echo}\n- {name: d, plugin: echo}\n",
    );
    env.trigger("wide");
    let effects = env.step(vec![]);
    assert_eq!(effects.dispatches.len(), 2, "two at a time");
    let first = env.state.in_flight.keys().next().unwrap().clone();
    let effects = env.succeed(&first, "{}");
    assert_eq!(effects.dispatches.len(), 1, "one ended, one more starts");
}

#[test]
fn tenant_caps_hold_back_tasks_and_tenants_take_turns() {
    let mut env = TestEnv::with(|_| {}, vec![worker("w1", 2)]);
    env.apply(
        "name: many\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo}\n- {name: c, plugin: echo}\n\
         - {name: d, plugin: echo}\n",
    );
    env.apply("name: single\ntasks:\n- {name: only, plugin: echo}\n");
    // Tenant `t` queues four tasks before `other` queues one: with two
    // slots, `other` still gets one of the first two.
    env.trigger("many");
    let other = env.trigger_as("other", "single", env.now, None);
    let effects = env.step(vec![]);
    assert_eq!(effects.dispatches.len(), 2);
    assert!(effects.dispatches.iter().any(|(s, _)| s.key.run_id == other), "{:?}", dispatched_names(&effects));

    // `t` may run one attempt at a time.
    let mut env = TestEnv::new();
    env.limits = Some(HashMap::from([(
        TENANT.to_owned(),
        TenantLimits { max_concurrent: Some(1), allow_hosts: vec!["*".into()], ..TenantLimits::default() },
    )]));
    env.apply("name: pair\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo}\n");
    env.trigger("pair");
    let effects = env.step(vec![]);
    assert_eq!(effects.dispatches.len(), 1, "the tenant's max_concurrent");
    let key = env.state.in_flight.keys().next().unwrap().clone();
    let effects = env.succeed(&key, "{}");
    assert_eq!(effects.dispatches.len(), 1, "the held task starts when the first ends");
}

/// A tenant whose `max_concurrent` is 2, with a workflow of four tasks
/// that may all run at once.
fn four_under_a_cap_of_two() -> TestEnv {
    let mut env = TestEnv::new();
    env.limits = Some(HashMap::from([(
        TENANT.to_owned(),
        TenantLimits { max_concurrent: Some(2), allow_hosts: vec!["*".into()], ..TenantLimits::default() },
    )]));
    env.apply("name: four\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo}\n- {name: c, plugin: echo}\n- {name: d, plugin: echo}\n");
    env
}

/// Found by the simulation with a capped tenant (seed 404): a resume
/// queues a paused run's tasks again while their first items wait behind
/// the tenant's cap. Those items went stale once their tasks ran; a place
/// freed later woke one of them instead of a task still waiting behind
/// them, which then stayed queued for good.
#[test]
fn a_place_under_a_tenant_s_cap_wakes_a_task_that_can_take_it() {
    let mut env = four_under_a_cap_of_two();
    let run = env.trigger("four");
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["a", "b"], "c and d wait for the cap");
    env.command(&run, Command::Pause);
    env.step(vec![]);
    env.command(&run, Command::Resume);
    env.step(vec![]);
    // a and b are lost: c and d take their places, a and b wait behind
    // c's and d's first items.
    let effects = env.fail(&env.in_flight("a"), FailureKind::WorkerLost);
    assert_eq!(dispatched_names(&effects), ["c"]);
    let effects = env.fail(&env.in_flight("b"), FailureKind::WorkerLost);
    assert_eq!(dispatched_names(&effects), ["d"]);
    let effects = env.succeed(&env.in_flight("c"), "{}");
    assert_eq!(dispatched_names(&effects), ["a"], "not c's stale item");
    let effects = env.succeed(&env.in_flight("d"), "{}");
    assert_eq!(dispatched_names(&effects), ["b"]);
    env.succeed(&env.in_flight("a"), "{}");
    env.succeed(&env.in_flight("b"), "{}");
    assert_eq!(env.run_state(&run), RunState::Succeeded);
}

/// Seed 5670 of the simulation with a capped tenant: two results free two
/// places and wake two parked tasks of their own run; a kill later in the
/// same step ends that run, so neither takes its place. Another run's
/// tasks, parked behind them, start all the same.
#[test]
fn places_under_a_tenant_s_cap_that_the_tasks_woken_do_not_take_go_to_others() {
    let mut env = four_under_a_cap_of_two();
    let first = env.trigger("four");
    assert_eq!(dispatched_names(&env.step(vec![])), ["a", "b"]);
    let second = env.trigger("four");
    assert!(env.step(vec![]).dispatches.is_empty(), "all behind the cap");
    let succeeded =
        |env: &TestEnv, task: &str| env.result(&env.in_flight(task), Outcome::Succeeded { output: "{}".into() });
    let inputs = vec![succeeded(&env, "a"), succeeded(&env, "b")];
    env.command(&first, Command::Kill);
    let effects = env.step(inputs);
    assert_eq!(env.run_state(&first), RunState::Killed);
    let started = dispatched_runs(&effects);
    assert_eq!(started, [second.clone(), second], "{:?}", dispatched_names(&effects));
}

#[test]
fn priorities_decide_the_order_within_a_tenant() {
    let mut env = TestEnv::with(|_| {}, vec![worker("w1", 1)]);
    env.apply(
        "name: prio\ntasks:\n- {name: low, plugin: echo}\n- {name: high, plugin: echo, priority: 10}\n\
         - {name: mid, plugin: echo, priority: 5}\n",
    );
    env.trigger("prio");
    let mut order = Vec::new();
    let mut effects = env.step(vec![]);
    for _ in 0..3 {
        let name = dispatched_names(&effects).remove(0);
        order.push(name.clone());
        let key = env.in_flight(&name);
        effects = env.succeed(&key, "{}");
    }
    assert_eq!(order, ["high", "mid", "low"]);
}

#[test]
fn retries_wait_out_fixed_and_exponential_backoff() {
    let mut env = TestEnv::new();
    env.apply(
        "name: flaky\ntasks:\n- {name: fixed, plugin: echo, retries: 2, retry_backoff: {kind: fixed, delay: 5s}}\n\
         - {name: expo, plugin: echo, retries: 3, retry_backoff: {kind: exponential, delay: 1s, max: 3s}}\n",
    );
    env.trigger("flaky");
    env.step(vec![]);
    let start = env.now;
    let fixed = env.in_flight("fixed");
    let expo = env.in_flight("expo");
    env.fail(&fixed, FailureKind::Retryable);
    env.fail(&expo, FailureKind::Retryable);
    let retry_at = |env: &TestEnv, task: &str| {
        env.store.tasks.values().flatten().find(|t| t.name == task).and_then(|t| t.retry_at).unwrap()
    };
    assert_eq!(retry_at(&env, "fixed"), start + 5000);
    assert_eq!(retry_at(&env, "expo"), start + 1000);
    assert_eq!(env.state.next_wake(env.now), Some(start + 1000), "the shell wakes for the first retry");
    env.advance(999);
    assert!(env.step(vec![]).dispatches.is_empty(), "not before its time");
    env.advance(1);
    assert_eq!(dispatched_names(&env.step(vec![])), ["expo"]);
    let expo = env.in_flight("expo");
    env.fail(&expo, FailureKind::Timeout);
    assert_eq!(retry_at(&env, "expo"), env.now + 2000, "doubled");
    let expo = expo.clone();
    env.advance(2000);
    env.step(vec![]);
    let again = env.in_flight("expo");
    assert_eq!(again.number, expo.number + 1);
    env.fail(&again, FailureKind::Retryable);
    assert_eq!(retry_at(&env, "expo"), env.now + 3000, "capped at max");
    env.advance(start + 5000 - env.now);
    assert_eq!(dispatched_names(&env.step(vec![])), ["fixed"]);
    // A fatal failure is not retried.
    let fixed = env.in_flight("fixed");
    env.fail(&fixed, FailureKind::Fatal);
    assert_eq!(env.task_state(&fixed.run_id, "fixed"), TaskState::Failed);
}

#[test]
fn the_attempt_deadline_is_the_task_s_capped_by_its_tenant() {
    let mut env = TestEnv::with(|c| c.default_timeout = std::time::Duration::from_secs(600), vec![worker("w1", 8)]);
    env.limits = Some(HashMap::from([(
        TENANT.to_owned(),
        TenantLimits { max_duration_ms: Some(60_000), allow_hosts: vec!["*".into()], ..TenantLimits::default() },
    )]));
    env.apply(
        "name: timed\ntasks:\n- {name: short, plugin: echo, timeout: 30s}\n- {name: default, plugin: echo}\n\
         - {name: greedy, plugin: echo, timeout: 2h}\n",
    );
    let run = env.trigger("timed");
    let effects = env.step(vec![]);
    let deadline =
        |name: &str| effects.dispatches.iter().find(|(s, _)| s.task_name == name).map(|(s, _)| s.deadline_ms);
    assert_eq!(deadline("short"), Some(30_000));
    assert_eq!(deadline("default"), Some(60_000), "the default, capped by the tenant");
    assert_eq!(deadline("greedy"), None, "asking for more than the tenant's limit fails the attempt");
    assert_eq!(env.task_state(&run, "greedy"), TaskState::Failed);
    let error = env.store.tasks[&run].iter().find(|t| t.name == "greedy").unwrap().error.clone().unwrap();
    assert!(error.contains("max_duration_ms = 60000"), "{error}");
    // A timeout is retried like any retryable failure (none left here).
    let short = env.in_flight("short");
    env.fail(&short, FailureKind::Timeout);
    assert_eq!(env.task_state(&run, "short"), TaskState::Failed);
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms).unwrap().to_rfc3339()
}

#[test]
fn the_leader_materialises_cycles_and_catches_up_within_bounds() {
    let mut env = TestEnv::with(|c| c.max_catch_up = 3, vec![worker("w1", 8)]);
    // Every minute since ten minutes ago, catching up.
    let minute = 60_000;
    let start = (env.now / minute - 10) * minute;
    env.apply(&format!(
        "name: cron\nschedule: {{cron: \"* * * * *\", catch_up: true, start: \"{}\"}}\ntasks:\n- {{name: t, plugin: echo}}\n",
        rfc3339(start)
    ));
    let effects = env.step(vec![]);
    assert!(effects.batch.new_runs.is_empty(), "only a leader materialises");
    let effects = env.lead();
    assert_eq!(effects.batch.new_runs.len(), 3, "the newest 3 missed cycles (max_catch_up)");
    assert!(effects.batch.singleton.is_some(), "schedule writes carry the leader's token");
    let newest = (env.now / minute) * minute;
    let times: Vec<i64> = effects.batch.new_runs.iter().map(|r| r.run.logical_time).collect();
    assert_eq!(times, [newest - 2 * minute, newest - minute, newest]);
    let skipped =
        env.store.events.iter().find(|e| e.kind == "schedule.skipped").expect("the skipped cycles are recorded");
    assert!(skipped.data.contains("max_catch_up"), "{}", skipped.data);
    assert!(effects.read_commands, "the new runs' admit commands are read next");
    // Started, each run says how long after its cycle was due (a metric).
    let started = env.step(vec![]);
    let mut delays = started.schedule_delays.clone();
    delays.sort_unstable();
    let late: Vec<i64> = times.iter().rev().map(|t| env.now - t).collect();
    assert_eq!(delays, late, "each started run's delay from its cycle");
    // The next cycle comes from a timer.
    assert_eq!(env.state.next_wake(env.now), Some(newest + minute));
    env.advance(newest + minute - env.now);
    let effects = env.step(vec![]);
    assert_eq!(effects.batch.new_runs.len(), 1);
    assert_eq!(effects.batch.new_runs[0].run.logical_time, newest + minute);
    // Reloading the workflow does not make a second timer chain.
    env.step(vec![Input::WorkflowChanged { tenant: TENANT.into(), name: "cron".into() }]);
    env.advance(minute);
    let effects = env.step(vec![]);
    assert_eq!(effects.batch.new_runs.len(), 1, "one run per cycle");
    // Losing leadership stops materialisation.
    env.step(vec![Input::Leadership(None)]);
    env.advance(minute);
    assert!(env.step(vec![]).batch.new_runs.is_empty());
}

#[test]
fn a_backlog_arrives_at_the_configured_rate() {
    let mut env = TestEnv::with(
        |c| {
            c.max_catch_up = 5;
            c.catch_up_per_second = 2;
        },
        vec![worker("w1", 8)],
    );
    let minute = 60_000;
    let start = (env.now / minute - 10) * minute;
    env.apply(&format!(
        "name: cron\nschedule: {{cron: \"* * * * *\", catch_up: true, start: \"{}\"}}\ntasks:\n- {{name: t, plugin: echo}}\n",
        rfc3339(start)
    ));
    let newest = (env.now / minute) * minute;
    let effects = env.lead();
    let times: Vec<i64> = effects.batch.new_runs.iter().map(|r| r.run.logical_time).collect();
    assert_eq!(times, [newest - 4 * minute, newest - 3 * minute], "the oldest two of the newest five");
    // The rest a second later, two at a time.
    assert_eq!(env.state.next_wake(env.now), Some(env.now + 1000));
    env.advance(1000);
    let times: Vec<i64> = env.step(vec![]).batch.new_runs.iter().map(|r| r.run.logical_time).collect();
    assert_eq!(times, [newest - 2 * minute, newest - minute]);
    env.advance(1000);
    let times: Vec<i64> = env.step(vec![]).batch.new_runs.iter().map(|r| r.run.logical_time).collect();
    assert_eq!(times, [newest], "the backlog is made up; the next cycle comes from its own timer");
}

#[test]
fn rerun_from_failed_and_force_success_come_through_commands() {
    let mut env = TestEnv::new();
    env.apply(PLAIN);
    let run = env.trigger("plain");
    env.step(vec![]);
    let a = env.in_flight("a");
    env.fail(&a, FailureKind::Fatal);
    assert_eq!(env.run_state(&run), RunState::Failed);
    assert_eq!(env.task_state(&run, "b"), TaskState::UpstreamFailed);

    // The finished run is loaded again for the command.
    let rerun = env.command(&run, Command::RerunFailed { downstream: false });
    let effects = env.step(vec![]);
    assert_eq!(env.outcome(rerun).unwrap()["ok"], true);
    assert_eq!(dispatched_names(&effects), ["a"]);
    let a = env.in_flight("a");
    env.fail(&a, FailureKind::Fatal);
    assert_eq!(env.run_state(&run), RunState::Failed);

    let force = env.command(&run, Command::ForceSuccess { task: "a".into() });
    let effects = env.step(vec![]);
    assert_eq!(env.outcome(force).unwrap()["ok"], true);
    assert_eq!(dispatched_names(&effects), ["b"], "the downstream proceeds");
    let unknown = env.command(&run, Command::ForceSuccess { task: "nope".into() });
    env.step(vec![]);
    let outcome = env.outcome(unknown).unwrap();
    assert_eq!(outcome["ok"], false);
    assert!(outcome["message"].as_str().unwrap().contains("no task `nope`"));
}

#[test]
fn commands_for_runs_that_cannot_load_say_why_or_wait_for_the_store() {
    let mut env = TestEnv::new();
    env.apply(CHAIN);
    let gone = env.command("no-such-run", Command::Kill);
    env.step(vec![]);
    assert!(env.outcome(gone).unwrap()["message"].as_str().unwrap().contains("there is no run"));

    let run = env.trigger("chain");
    env.store.unloadable.insert(run.clone(), LoadError::Transient("the database is down".into()));
    let effects = env.step(vec![]);
    assert!(effects.batch.commands_done.is_empty(), "a transient failure keeps the command");
    env.store.unloadable.clear();
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["a"], "the command is applied once the run loads");
}

#[test]
fn a_stale_epoch_is_refused_and_a_fenced_run_is_dropped() {
    let mut env = TestEnv::new();
    env.apply(CHAIN);
    let run = env.trigger("chain");
    env.step(vec![]);
    let a = env.in_flight("a");
    // A result for an attempt that is not in flight (a duplicate, or an old
    // owner's dispatch) is stale.
    let mut duplicate = a.clone();
    duplicate.number = 7;
    let effects = env.succeed(&duplicate, r#"{"v":1}"#);
    assert_eq!(effects.acks, vec![(1, run.clone(), Ack::Stale)]);
    assert_eq!(env.state.counters().stale_results, 1);

    // Another master claims the run: this one's next write is fenced.
    env.store.runs.get_mut(&run).unwrap().epoch += 1;
    let effects = env.succeed(&a, r#"{"v":1}"#);
    assert!(!env.state.has_run(&run), "dropped once the store fenced its writes");
    assert_eq!(env.task_state(&run, "a"), TaskState::Running, "nothing of the fenced step was written");
    assert!(!effects.dispatches.is_empty(), "the state decided b before the commit; the shell drops fenced dispatches");
    assert!(env.state.in_flight.is_empty(), "the fenced run's attempts are released");
    assert_eq!(env.state.counters().fenced_writes, 1);
}

#[test]
fn a_full_worker_group_does_not_hold_up_other_groups() {
    let gpu = WorkerInfo { id: "gpu1".into(), capacity: 1, group: Some("gpu".into()), any_group: false, lease: 0 };
    let mut env = TestEnv::with(|_| {}, vec![gpu, worker("cpu1", 4)]);
    env.apply(
        "name: mixed\ntasks:\n- {name: g1, plugin: echo, worker_group: gpu, priority: 9}\n\
         - {name: g2, plugin: echo, worker_group: gpu, priority: 9}\n- {name: g3, plugin: echo, worker_group: gpu, priority: 9}\n\
         - {name: c1, plugin: echo}\n",
    );
    env.trigger("mixed");
    let effects = env.step(vec![]);
    let on: Vec<(String, String)> = effects.dispatches.iter().map(|(s, w)| (s.task_name.clone(), w.clone())).collect();
    assert_eq!(on.len(), 2, "{on:?}");
    assert!(on.contains(&("c1".into(), "cpu1".into())), "the cpu task starts though gpu tasks wait: {on:?}");
    assert!(on.iter().any(|(t, w)| t.starts_with('g') && w == "gpu1"));
}

#[test]
fn big_outputs_are_read_back_in_a_second_pass() {
    let mut env = TestEnv::new();
    env.apply(
        "name: join\ntasks:\n- {name: big, plugin: echo}\n- {name: slow, plugin: echo}\n\
         - {name: after, plugin: echo, depends_on: [big, slow]}\n",
    );
    let run = env.trigger("join");
    env.step(vec![]);
    let big_output = format!("{{\"blob\":\"{}\"}}", "x".repeat(100 * 1024));
    let big = env.in_flight("big");
    env.succeed(&big, &big_output);
    let slow = env.in_flight("slow");
    let effects = env.succeed(&slow, "{}");
    assert!(
        env.needs_seen.contains(&Need::Outputs { run: run.clone(), idxs: vec![0] }),
        "the big output was not kept in memory: {:?}",
        env.needs_seen
    );
    assert_eq!(dispatched_names(&effects), ["after"], "dispatched in the same step, after the read");
    assert!(effects.dispatches[0].0.inputs.contains("xxxx"));
}

#[test]
fn a_missing_plugin_is_looked_up_again_before_the_attempt_fails() {
    let mut env = TestEnv::new();
    env.apply("name: p\ntasks:\n- {name: t, plugin: missing-then-published}\n");
    env.plugins.publish_on_refresh.store(true, std::sync::atomic::Ordering::Relaxed);
    env.trigger("p");
    let effects = env.step(vec![]);
    assert!(env.needs_seen.contains(&Need::RefreshPlugins));
    assert_eq!(dispatched_names(&effects), ["t"], "found after the refresh");

    let mut env = TestEnv::new();
    env.apply("name: p\ntasks:\n- {name: t, plugin: missing-for-good}\n");
    let run = env.trigger("p");
    let effects = env.step(vec![]);
    assert!(effects.dispatches.is_empty());
    assert_eq!(env.task_state(&run, "t"), TaskState::Failed);
    assert_eq!(env.store.attempts[&(run, 0, 1)].failure_kind, Some(FailureKind::PluginUnavailable));
}

#[test]
fn a_worker_that_leaves_loses_its_attempts_and_one_lost_too_often_fails() {
    let mut env = TestEnv::with(|c| c.max_lost_attempts = 1, vec![worker("w1", 8), worker("w2", 8)]);
    env.apply("name: one\ntasks:\n- {name: t, plugin: echo, retries: 0}\n");
    let run = env.trigger("one");
    let effects = env.step(vec![]);
    let first = effects.dispatches[0].1.clone();
    let other = if first == "w1" { "w2" } else { "w1" };
    let effects = env.step(vec![Input::Workers(vec![worker(other, 8)])]);
    assert_eq!(effects.dispatches.len(), 1, "lost with its worker: it goes again, uncharged");
    assert_eq!(effects.dispatches[0].1, other);
    let effects = env.step(vec![Input::Workers(vec![worker("w3", 8)])]);
    assert!(effects.dispatches.is_empty(), "the second loss is past max_lost_attempts = 1");
    assert_eq!(env.task_state(&run, "t"), TaskState::Failed);
    let error = env.store.tasks[&run][0].error.clone().unwrap();
    assert!(error.contains("max_lost_attempts = 1"), "{error}");
}

#[test]
fn a_refused_dispatch_goes_again_uncharged_and_rests_the_worker() {
    let mut env = TestEnv::with(|_| {}, vec![worker("w1", 8), worker("w2", 8)]);
    env.apply("name: one\ntasks:\n- {name: t, plugin: echo, retries: 0}\n");
    let run = env.trigger("one");
    let effects = env.step(vec![]);
    let (spec, to) = effects.dispatches[0].clone();
    let effects = env.answer(&to, &[spec], Err(crate::DispatchError::NotMember(to.clone())));
    assert_eq!(effects.dispatches.len(), 1, "the attempt never ran: it goes again");
    assert_ne!(effects.dispatches[0].1, to, "to another worker while the first rests");
    let attempt = &env.store.attempts[&(run.clone(), 0, 1)];
    assert_eq!(attempt.failure_kind, Some(FailureKind::DispatchFailed));
    assert_eq!(env.store.tasks[&run][0].failures, 0);
    assert_eq!(env.store.tasks[&run][0].lost, 0, "a dispatch that never ran is not a loss");
    // An answer that reaches the worker ends its rest.
    let (spec, to2) = effects.dispatches[0].clone();
    let accepted = Accepted { verdicts: vec![Ok(())], running: Some(1) };
    let effects = env.answer(&to2, &[spec], Ok(accepted));
    assert!(effects.dispatches.is_empty());
}

#[test]
fn a_dispatch_answered_after_its_result_does_not_leave_its_worker_full() {
    // A worker's answer says what it ran when it took the attempts; a short
    // attempt's result can overtake it. Found by the simulation with one
    // worker (seed 5000026, `--workers 1`): the master saw its one worker
    // full for good and never dispatched again.
    let mut env = TestEnv::with(|_| {}, vec![worker("w1", 1)]);
    env.apply("name: one\ntasks:\n- {name: t, plugin: echo}\n");
    env.trigger("one");
    let effects = env.step(vec![]);
    let (spec, to) = effects.dispatches[0].clone();
    env.succeed(&env.in_flight("t"), "{}");
    let accepted = Accepted { verdicts: vec![Ok(())], running: Some(1) };
    env.answer(&to, &[spec], Ok(accepted));
    env.trigger("one");
    let effects = env.step(vec![]);
    assert_eq!(dispatched_names(&effects), ["t"], "the slot the ended attempt held is free");
}

#[test]
fn kill_cancels_running_attempts_and_pause_holds_new_ones() {
    let mut env = TestEnv::new();
    env.apply(PLAIN);
    let run = env.trigger("plain");
    env.step(vec![]);
    env.command(&run, Command::Pause);
    env.step(vec![]);
    let a = env.in_flight("a");
    let effects = env.succeed(&a, "{}");
    assert!(effects.dispatches.is_empty(), "paused: b waits");
    env.command(&run, Command::Resume);
    let effects = env.step(vec![]);
    assert_eq!(names(&effects), ["b"]);
    env.command(&run, Command::Kill);
    let effects = env.step(vec![]);
    assert_eq!(effects.cancels.len(), 1, "b's attempt is cancelled");
    assert_eq!(effects.finished, vec![(run, RunState::Killed)]);
}

#[test]
fn params_that_render_past_max_params_fail_the_task_naming_the_limit() {
    // A few bytes of definition that splice an upstream output many times
    // must not render into the master's memory.
    let mut env = TestEnv::with(|c| c.max_params_bytes = 1000, vec![worker("w1", 8)]);
    env.apply(
        "name: amp\ntasks:\n- {name: a, plugin: echo}\n- name: b\n  plugin: echo\n  depends_on: [a]\n  \
         params: {x: \"{{ inputs.a.s }}{{ inputs.a.s }}{{ inputs.a.s }}\"}\n- name: c\n  plugin: echo\n  \
         depends_on: [a]\n  params: {x: \"{{ inputs.a.s }}\"}\n",
    );
    let run = env.trigger("amp");
    env.step(vec![]);
    let a = env.in_flight("a");
    let effects = env.succeed(&a, &format!(r#"{{"s": "{}"}}"#, "y".repeat(400)));
    assert_eq!(names(&effects), ["c"], "within the limit, c runs");
    assert_eq!(env.task_state(&run, "b"), TaskState::Failed);
    let error = env.store.tasks[&run].iter().find(|t| t.name == "b").unwrap().error.clone().unwrap();
    assert!(error.contains("params.x") && error.contains("[limits] max_params"), "{error}");
}

#[test]
fn an_attempt_past_its_timeout_warn_raises_one_event_and_goes_on() {
    let mut env = TestEnv::new();
    env.apply(
        "name: w\ntasks:\n- {name: slow, plugin: echo, timeout_warn: 2s}\n- {name: fast, plugin: echo, timeout_warn: 2s}\n",
    );
    env.trigger("w");
    env.step(vec![]);
    let fast = env.in_flight_all("fast");
    assert_eq!(fast.len(), 1);
    env.succeed(&fast[0], "{}");
    env.advance(2_000);
    let effects = env.step(vec![]);
    let warned: Vec<Option<&str>> =
        effects.batch.events.iter().filter(|e| e.kind == "task.timeout_warn").map(|e| e.task.as_deref()).collect();
    assert_eq!(warned, [Some("slow")], "only the attempt still running");
    assert!(effects.cancels.is_empty(), "the attempt goes on");
    assert_eq!(env.in_flight_all("slow").len(), 1);
    env.advance(60_000);
    let later = env.step(vec![]);
    assert!(!later.batch.events.iter().any(|e| e.kind == "task.timeout_warn"), "once");
}

/// Found by the simulation (`dagr sim`, seed 2): a result applied, then the
/// run's slot lost and gained again in one step (ownership messages that
/// piled up during a slow commit). The write made under the old epoch
/// must not be committed under the new one.
#[test]
fn writes_made_before_a_run_was_dropped_and_claimed_again_in_one_step_are_fenced_off() {
    use dagr_protocol::wire::{AttemptResult, Outcome};
    let mut env = TestEnv::new();
    env.apply(PLAIN);
    let run = env.trigger("plain");
    env.step(vec![]);
    let a = env.in_flight("a");
    let result = AttemptResult {
        key: a,
        epoch: 1,
        task_name: "a".into(),
        worker: "w1".into(),
        started_at: env.now,
        finished_at: env.now,
        outcome: Outcome::Succeeded { output: "{}".into() },
        trace: None,
    };
    let mut inputs = vec![Input::Result { result, ack: Some(1) }];
    inputs.extend(lost_and_regained());
    let effects = env.step(inputs);
    assert!(effects.batch.fences.contains(&(run.clone(), 1)), "fenced by the epoch it was written under");
    assert_eq!(env.store.runs[&run].epoch, 2, "claimed again in the step");
    assert_eq!(env.task_state(&run, "a"), TaskState::Running, "the write made under epoch 1 did not land");
    assert!(!env.state.has_run(&run));
    // The next step takes it over afresh, from the store.
    env.step(vec![]);
    assert!(env.needs_seen.contains(&Need::Claim(vec![run.clone()])), "{:?}", env.needs_seen);
    assert_eq!(env.store.runs[&run].epoch, 3);
    assert!(env.state.has_run(&run));
}

/// Found by the simulation (`dagr sim`, seed 5): a run claimed both as a
/// run of a gained slot and for its command, in one read, was claimed
/// twice; the state kept the first claim's epoch, its writes were fenced
/// off by its own second claim, and the run stayed queued for good.
#[test]
fn a_run_wanted_twice_in_one_read_is_claimed_once() {
    let mut env = TestEnv::new();
    env.apply(PLAIN);
    env.step(vec![Input::Ownership(Default::default())]);
    let run = env.trigger("plain");
    let effects = env.step(vec![Input::Ownership(all_slots())]);
    assert_eq!(env.store.runs[&run].epoch, 1, "claimed once: {:?}", env.needs_seen);
    assert_eq!(env.store.runs[&run].state, RunState::Running, "admitted, not fenced off");
    assert_eq!(dispatched_names(&effects), ["a"]);
}

/// Found by the simulation (`dagr sim`, seed 14, with operators): a run
/// killed with an attempt in flight was retired with the attempt's row
/// still `running`, for good — the worker's late report was stale.
#[test]
fn killing_a_run_ends_its_attempts_in_flight_as_cancelled() {
    let mut env = TestEnv::new();
    env.apply(PLAIN);
    let run = env.trigger("plain");
    env.step(vec![]);
    let a = env.in_flight("a");
    env.command(&run, Command::Kill);
    let effects = env.step(vec![]);
    assert_eq!(effects.cancels.len(), 1, "the worker is told");
    let row = effects.batch.attempts.iter().find(|r| r.number == i64::from(a.number) && r.task == "a").unwrap();
    assert_eq!(row.state, AttemptState::Failed);
    assert_eq!(row.failure_kind, Some(FailureKind::Cancelled));
    assert!(!env.state.in_flight.contains_key(&a), "no longer in flight");
    let stored = &env.store.attempts[&(run.clone(), 0, 1)];
    assert_eq!(stored.state, AttemptState::Failed, "the stored attempt ended with its run");
    // The worker's late report changes nothing.
    let effects = env.succeed(&a, "{}");
    assert_eq!(effects.acks, vec![(1, run.clone(), Ack::Stale)]);
    assert_eq!(env.store.attempts[&(run, 0, 1)].state, AttemptState::Failed);
}

/// A paused run taken over by another master, resumed there: a task that
/// fails afterwards is retried when its backoff ends.
#[test]
fn a_paused_run_taken_over_and_resumed_retries_its_tasks() {
    let flow = "name: chain\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo, depends_on: [a], retries: 2}\n- {name: c, plugin: echo, depends_on: [a]}\n- {name: d, plugin: echo, depends_on: [b, c], retries: 1}\n";
    let mut env = TestEnv::new();
    env.apply(flow);
    let run = env.trigger("chain");
    env.step(vec![]);
    env.command(&run, Command::Pause);
    env.step(vec![]);
    let a = env.in_flight("a");
    env.succeed(&a, "{}");
    // Taken over by a fresh engine.
    let config = crate::EngineConfig { node_id: "m2".into(), ..crate::EngineConfig::default() };
    env.take_over(config, vec![worker("w1", 8)]);
    env.command(&run, Command::Resume);
    env.step(vec![]);
    let b = env.in_flight("b");
    let c = env.in_flight("c");
    env.succeed(&b, "{}");
    env.succeed(&c, "{}");
    let d = env.in_flight("d");
    env.fail(&d, FailureKind::Retryable);
    assert_eq!(env.task_state(&run, "d"), TaskState::RetryWait);
    env.advance(600_000);
    let effects = env.step(vec![]);
    assert_eq!(names(&effects), ["d"], "{:?}", env.task_state(&run, "d"));
}
