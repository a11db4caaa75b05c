//! Admission by its effects: backfills' parallelism, the slots of the runs
//! one limit counts, and the hold while a dropped run is read again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dagr_protocol::commands::Command;
use dagr_store::RunState;

use crate::engine::Effects;
use crate::engine::effects::{Input, Need};
use crate::engine::testkit::{TestEnv, all_slots, dispatched, dispatched_names, dispatched_runs, lost_and_regained};

/// Two tasks that may run only one at a time.
const NARROW: &str = "name: narrow\nconcurrency: 1\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo}\n";

#[test]
fn backfills_admit_their_runs_each_within_its_parallelism_oldest_first() {
    let mut env = TestEnv::new();
    env.apply("name: many\nmax_active_runs: 3\ntasks:\n- {name: t, plugin: echo}\n");
    env.store.backfills.insert("bf-a".into(), 1);
    env.store.backfills.insert("bf-b".into(), 5);
    // Made in this order: a0 b0 a1 b1 a2 m (a manual run, in no backfill).
    let mut made = Vec::new();
    for (i, backfill) in ["bf-a", "bf-b", "bf-a", "bf-b", "bf-a"].into_iter().enumerate() {
        made.push(env.trigger_at("many", i as i64 * 60_000, Some(backfill)));
    }
    made.push(env.trigger("many"));
    let [a0, b0, a1, b1, a2, m] = made.try_into().unwrap();
    let effects = env.step(vec![]);
    // bf-a takes one at a time; the workflow three: a1 waits for a0, and
    // the next oldest whose backfill has room go first.
    let mut first = dispatched_runs(&effects);
    first.sort();
    let mut expected = vec![a0.clone(), b0.clone(), b1.clone()];
    expected.sort();
    assert_eq!(first, expected);
    // A waiting run that is killed leaves the line.
    env.command(&a1, Command::Kill);
    env.step(vec![]);
    assert_eq!(env.run_state(&a1), RunState::Killed);
    // a0 ends: bf-a has room again, and a2 (older than m) starts.
    let t = env.in_flight_all("t").into_iter().find(|k| k.run_id == a0).unwrap();
    assert_eq!(dispatched_runs(&env.succeed(&t, "{}")), [a2]);
    // b0 ends: m, the last in line.
    let t = env.in_flight_all("t").into_iter().find(|k| k.run_id == b0).unwrap();
    assert_eq!(dispatched_runs(&env.succeed(&t, "{}")), [m]);
    assert!(env.state.waiting.is_empty(), "nobody is left in line");
}

#[test]
fn the_runs_one_limit_counts_are_made_in_one_slot() {
    let mut env = TestEnv::new();
    env.apply("name: limited\nmax_active_runs: 2\ntasks:\n- {name: t, plugin: echo}\n");
    env.apply("name: narrow\nconcurrency: 1\ntasks:\n- {name: t, plugin: echo}\n");
    env.apply("name: free\ntasks:\n- {name: t, plugin: echo}\n");
    let slots = |env: &TestEnv, runs: &[String]| -> std::collections::BTreeSet<i64> {
        runs.iter().map(|r| env.store.runs[r].slot).collect()
    };
    let slot_of_ids = |env: &TestEnv, runs: &[String]| {
        runs.iter().all(|r| env.store.runs[r].slot == dagr_protocol::slot_of(r) as i64)
    };
    // A workflow's runs under its max_active_runs, its backfills' too.
    let mut limited: Vec<String> = (0..6).map(|_| env.trigger("limited")).collect();
    limited.extend((0..3).map(|i| env.trigger_at("limited", i * 60_000, Some("bf-1"))));
    assert_eq!(slots(&env, &limited).len(), 1, "{:?}", slots(&env, &limited));
    // A workflow's runs under its concurrency.
    let narrow: Vec<String> = (0..6).map(|_| env.trigger("narrow")).collect();
    assert_eq!(slots(&env, &narrow).len(), 1);
    // A backfill's runs, for its parallelism.
    let backfill: Vec<String> = (0..6).map(|i| env.trigger_at("free", i * 60_000, Some("bf-2"))).collect();
    assert_eq!(slots(&env, &backfill).len(), 1);
    // Other runs spread over the slots.
    let free: Vec<String> = (0..12).map(|_| env.trigger("free")).collect();
    assert!(slots(&env, &free).len() > 1, "{:?}", slots(&env, &free));
    // And every node still finds a run's slot from its id.
    assert!(slot_of_ids(&env, &limited) && slot_of_ids(&env, &backfill) && slot_of_ids(&env, &free));
}

/// Found by the simulation (`dagr sim`, seed 217, once its runs kept to a
/// `max_active_runs`): a running run dropped and claimed again in one step
/// is not driven until the next; a queued run of its workflow read in that
/// step waits until it is, and then until it ends.
#[test]
fn a_run_claimed_again_holds_back_its_workflow_s_admissions_until_it_is_read() {
    let mut env = TestEnv::new();
    env.apply("name: one\nmax_active_runs: 1\ntasks:\n- {name: t, plugin: echo}\n");
    let first = env.trigger("one");
    env.step(vec![]);
    assert_eq!(env.run_state(&first), RunState::Running);
    let second = env.trigger("one");
    let effects = env.step(lost_and_regained());
    assert!(!env.state.has_run(&first), "claimed again at the next step");
    assert!(effects.dispatches.is_empty(), "{:?}", dispatched_names(&effects));
    assert_eq!(env.run_state(&second), RunState::Queued, "the first may be active");
    env.step(vec![]);
    assert!(env.state.has_run(&first));
    assert_eq!(env.run_state(&second), RunState::Queued, "the first is");
    let t = env.in_flight_all("t").into_iter().find(|k| k.run_id == first).unwrap();
    let effects = env.succeed(&t, "{}");
    assert_eq!(env.run_state(&first), RunState::Succeeded);
    assert_eq!(dispatched_runs(&effects), [second]);
}

/// A run of a backfill with a parallelism, dropped and claimed again, holds
/// back its backfill's next runs until it is read (it may be active), and
/// nothing else: runs of its workflow that no limit governs start at once,
/// so do another backfill's. (It held its whole workflow's line before.)
#[test]
fn a_backfill_s_run_claimed_again_holds_back_only_its_backfill() {
    let mut env = TestEnv::new();
    env.apply("name: free\ntasks:\n- {name: t, plugin: echo}\n");
    env.store.backfills.insert("bf".into(), 1);
    env.store.backfills.insert("other".into(), 1);
    let filled = env.trigger_at("free", 0, Some("bf"));
    env.step(vec![]);
    assert_eq!(env.run_state(&filled), RunState::Running);
    let next = env.trigger_at("free", 60_000, Some("bf"));
    let other = env.trigger_at("free", 0, Some("other"));
    let manual = env.trigger("free");
    let effects = env.step(lost_and_regained());
    assert!(!env.state.has_run(&filled), "claimed again at the next step");
    let mut started = dispatched_runs(&effects);
    started.sort();
    let mut expected = vec![other, manual];
    expected.sort();
    assert_eq!(started, expected, "under no limit the run claimed again counts for");
    assert_eq!(env.run_state(&next), RunState::Queued, "its backfill's run claimed again may be active");
    env.step(vec![]);
    assert!(env.state.has_run(&filled));
    assert_eq!(env.run_state(&next), RunState::Queued, "its backfill's run claimed again is active");
    let t = env.in_flight_all("t").into_iter().find(|k| k.run_id == filled).unwrap();
    let effects = env.succeed(&t, "{}");
    assert_eq!(dispatched_runs(&effects), [next]);
}

/// Found by the simulation (`dagr sim --resources leader`, seed 404580, when
/// a backfill's run claimed again held its whole workflow's line): a run
/// under its workflow's `max_active_runs`, dropped and claimed again, holds
/// the workflow's line. A run of the workflow made before the limit (in
/// another slot, under no limit) joined the line meanwhile; then the held
/// run's slot went to another master, and the hold went with it — but
/// nothing judged the line again, so the other run stayed queued for good.
#[test]
fn a_line_held_by_a_run_of_a_slot_that_leaves_is_judged_again() {
    let mut env = TestEnv::new();
    env.apply("name: one\nmax_active_runs: 1\ntasks:\n- {name: t, plugin: echo}\n");
    let filled = env.trigger("one");
    env.step(vec![]);
    assert_eq!(env.run_state(&filled), RunState::Running);
    let limited_slot = env.store.runs[&filled].slot as u32;
    // The limit is lifted; a run made now goes to any slot.
    env.apply("name: one\ntasks:\n- {name: t, plugin: echo}\n");
    let free = loop {
        let id = env.trigger("one");
        if env.store.runs[&id].slot as u32 != limited_slot {
            break id;
        }
    };
    // The limited run is dropped and claimed again; the free run is read
    // in the same step, and held.
    env.step(lost_and_regained());
    assert!(!env.state.has_run(&filled), "claimed again at the next step");
    assert_eq!(env.run_state(&free), RunState::Queued, "held");
    // Before it is read again, the limited run's slot leaves.
    let kept: std::collections::HashSet<u32> = all_slots().into_iter().filter(|s| *s != limited_slot).collect();
    let effects = env.step(vec![Input::Ownership(kept)]);
    assert!(!env.state.has_run(&filled));
    assert_eq!(env.run_state(&free), RunState::Running, "judged again once the hold left");
    assert_eq!(dispatched_runs(&effects), [free]);
}

#[test]
fn a_rerun_waits_for_admission_like_a_new_run() {
    let mut env = TestEnv::new();
    env.apply("name: one\nmax_active_runs: 1\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo, depends_on: [a]}\n");
    let first = env.trigger("one");
    env.step(vec![]);
    let a = env.in_flight("a");
    env.fail(&a, dagr_protocol::wire::FailureKind::Fatal);
    assert_eq!(env.run_state(&first), RunState::Failed);
    let second = env.trigger("one");
    env.step(vec![]);
    let a = env.in_flight("a");
    assert_eq!(a.run_id, second);
    // A rerun of the failed run, and a forced success, while the second
    // runs: the first is queued again, and nothing of it is dispatched.
    let rerun = env.command(&first, Command::RerunFailed { downstream: false });
    let effects = env.step(vec![]);
    assert_eq!(env.outcome(rerun).unwrap()["ok"], true);
    assert_eq!(env.run_state(&first), RunState::Queued);
    assert!(dispatched_names(&effects).is_empty(), "over max_active_runs: {:?}", dispatched_names(&effects));
    // The second ends: the first starts, with the task it reruns.
    let effects = env.succeed(&a, "{}");
    assert_eq!(dispatched_names(&effects), ["b"], "the second's b, nothing of the first");
    let b = env.in_flight("b");
    let effects = env.succeed(&b, "{}");
    assert_eq!(env.run_state(&second), RunState::Succeeded);
    assert_eq!(env.run_state(&first), RunState::Running);
    assert_eq!(dispatched_names(&effects), ["a"]);
    let a = env.in_flight("a");
    assert_eq!(a.run_id, first);
    env.fail(&a, dagr_protocol::wire::FailureKind::Fatal);
    // A forced success with the workflow busy waits as well.
    let third = env.trigger("one");
    env.step(vec![]);
    let force = env.command(&first, Command::ForceSuccess { task: "a".into() });
    let effects = env.step(vec![]);
    assert_eq!(env.outcome(force).unwrap()["ok"], true);
    assert_eq!(env.run_state(&first), RunState::Queued);
    assert!(dispatched_names(&effects).is_empty());
    let a = env.in_flight("a");
    assert_eq!(a.run_id, third);
    env.succeed(&a, "{}");
    let b = env.in_flight("b");
    let effects = env.succeed(&b, "{}");
    assert_eq!(env.run_state(&third), RunState::Succeeded);
    assert_eq!(dispatched_names(&effects), ["b"], "the forced run goes on once it is admitted");
    assert_eq!(env.in_flight("b").run_id, first);
}

#[test]
fn a_reruns_timeout_counts_from_its_new_start_also_after_a_takeover() {
    let mut env = TestEnv::new();
    env.apply("name: timed\nmax_active_runs: 1\ntimeout: 10s\ntasks:\n- {name: a, plugin: echo}\n");
    let first = env.trigger("timed");
    env.step(vec![]);
    let started = env.store.runs[&first].started_at.unwrap();
    env.advance(1_000);
    let a = env.in_flight("a");
    env.fail(&a, dagr_protocol::wire::FailureKind::Fatal);
    // Rerun 5 s later, while another run holds the workflow's one place.
    env.advance(4_000);
    let second = env.trigger("timed");
    env.step(vec![]);
    env.command(&first, Command::RerunFailed { downstream: false });
    env.step(vec![]);
    assert_eq!(env.run_state(&first), RunState::Queued);
    assert_eq!(env.store.runs[&first].started_at, Some(started), "the store keeps the last start meanwhile");
    // Taken over by a fresh engine while the rerun waits.
    let config = crate::EngineConfig { node_id: "m2".into(), ..crate::EngineConfig::default() };
    env.take_over(config, vec![crate::engine::testkit::worker("w1", 8)]);
    // The second run ends 7 s after the first's first start: the rerun goes.
    env.advance(2_000);
    let a = env.in_flight("a");
    assert_eq!(a.run_id, second);
    env.succeed(&a, "{}");
    assert_eq!(env.run_state(&first), RunState::Running);
    let restarted = env.store.runs[&first].started_at.unwrap();
    assert_eq!(restarted, started + 7_000, "its start is the new life's");
    // Past the first life's deadline: it goes on.
    env.advance(4_000);
    env.step(vec![]);
    assert_eq!(env.run_state(&first), RunState::Running, "not timed out from its first start");
    // Past its own: it times out.
    env.advance(6_000);
    env.step(vec![]);
    assert_eq!(env.run_state(&first), RunState::Failed);
    assert!(env.store.events.iter().any(|e| e.kind == "run.timeout" && e.run_id.as_deref() == Some(first.as_str())));
}

#[test]
fn a_timer_of_a_runs_earlier_life_does_not_end_its_rerun() {
    let mut env = TestEnv::new();
    env.apply("name: timed\ntimeout: 10s\ntasks:\n- {name: a, plugin: echo}\n");
    let run = env.trigger("timed");
    env.step(vec![]);
    let a = env.in_flight("a");
    env.advance(1_000);
    env.fail(&a, dagr_protocol::wire::FailureKind::Fatal);
    env.advance(4_000);
    env.command(&run, Command::RerunFailed { downstream: false });
    env.step(vec![]);
    assert_eq!(env.run_state(&run), RunState::Running);
    // The first life's timer comes due at 10 s: the rerun started at 5 s.
    env.advance(6_000);
    env.step(vec![]);
    assert_eq!(env.run_state(&run), RunState::Running);
    env.advance(5_000);
    env.step(vec![]);
    assert_eq!(env.run_state(&run), RunState::Failed, "its own timeout, 10 s after its new start");
}

/// A master whose count misses a run another master started (it froze
/// while the runs' slot moved, and has not read the slot's runs since)
/// admits one run too many; the store counts every master's runs and
/// drops the admission's writes. The run stays queued and this master's:
/// nothing of it is dispatched, it is read again, the slot's owners are
/// looked at (which finds the other run), and it starts once that ends.
#[test]
fn an_admission_the_store_finds_over_its_limit_waits_for_the_run_another_master_started() {
    let mut env = TestEnv::new();
    env.apply("name: one\nmax_active_runs: 1\ntasks:\n- {name: t, plugin: echo}\n");
    let elsewhere = env.run_elsewhere("one", "m2");
    let mine = env.trigger("one");
    let slot = env.store.runs[&mine].slot as u32;
    assert_eq!(env.store.runs[&elsewhere].slot as u32, slot, "the runs one limit counts share a slot");
    env.step(vec![]);
    let batch = env.batches.last().unwrap();
    assert_eq!(batch.admissions.iter().map(|a| a.run_id.as_str()).collect::<Vec<_>>(), [mine.as_str()]);
    assert_eq!(env.store.runs[&mine].state, RunState::Queued, "the store took none of its writes");
    assert!(env.store.attempts.keys().all(|(run, ..)| *run != mine));
    assert!(!env.state.has_run(&mine), "dropped until it is read again");
    assert_eq!(env.state.counters().over_limit, 1);

    // The next step takes the slot's runs that are not here over, the
    // other run with this one: it is counted, and this one waits.
    let effects = env.step(vec![]);
    assert!(env.needs_seen.iter().any(|n| matches!(n, Need::Slots(slots) if slots == &[slot])), "{:?}", env.needs_seen);
    assert!(env.state.has_run(&mine) && env.state.has_run(&elsewhere));
    assert_eq!(env.store.runs[&elsewhere].owner.as_deref(), Some("m1"));
    assert_eq!(env.run_state(&mine), RunState::Queued);
    assert!(effects.batch.admissions.is_empty(), "{:?}", effects.batch.admissions);
    assert!(env.in_flight_all("t").iter().all(|k| k.run_id == elsewhere), "only the other run's task goes");

    let t = env.in_flight("t");
    let effects = env.succeed(&t, "{}");
    assert_eq!(env.run_state(&elsewhere), RunState::Succeeded);
    assert_eq!(env.run_state(&mine), RunState::Running);
    assert_eq!(dispatched_runs(&effects), [mine]);
}

/// Found by the simulation with a capped tenant (`dagr sim --seed 2006422
/// --tenant-cap --resources leader`): a master whose view of the members
/// lagged still held a slot another master had taken over, and admitted a
/// new run of it (a fresh run's claim conflicts with nothing); each master
/// counted only its own attempts against a limit counted per slot (the
/// tenant's `max_concurrent` there, a workflow's `concurrency` here), and
/// together they passed it. The store now refuses such an admission while
/// another master holds an active run of the tenant in the slot; the slot
/// is read again and that run taken over, and counted.
#[test]
fn an_admission_under_a_limit_of_its_slot_waits_while_another_master_holds_a_run_there() {
    let mut env = TestEnv::new();
    env.apply("name: narrow\nconcurrency: 1\ntasks:\n- {name: t, plugin: echo}\n");
    let elsewhere = env.run_elsewhere("narrow", "m2");
    let mine = env.trigger("narrow");
    let slot = env.store.runs[&mine].slot;
    assert_eq!(env.store.runs[&elsewhere].slot, slot, "the runs one limit counts share a slot");
    env.step(vec![]);
    let batch = env.batches.last().unwrap();
    let admitted: Vec<_> = batch.admissions.iter().map(|a| (a.run_id.as_str(), a.sole.clone())).collect();
    assert_eq!(admitted, [(mine.as_str(), Some((slot, "m1".to_owned())))]);
    assert_eq!(env.store.runs[&mine].state, RunState::Queued, "the store took none of its writes");
    assert!(env.store.attempts.keys().all(|(run, ..)| *run != mine), "nothing of it was dispatched");
    assert_eq!(env.state.counters().over_limit, 1);

    // The slot is read again: the other run is taken over and counted.
    env.step(vec![]);
    assert_eq!(env.store.runs[&elsewhere].owner.as_deref(), Some("m1"));
    assert!(env.state.has_run(&mine) && env.state.has_run(&elsewhere));
    let t = env.in_flight("t");
    assert_eq!(t.run_id, elsewhere, "one task at once, the other run's");
    let effects = env.succeed(&t, "{}");
    assert_eq!(env.run_state(&mine), RunState::Running);
    assert_eq!(dispatched_runs(&effects), [mine]);
}

/// Found by the simulation with a workflow's `concurrency` (`dagr sim
/// --seed 118917 --concurrency --resources leader`): a master held a run
/// that another master had claimed since (its view of the members lagged,
/// and it had not written for the run, so no fence told it). Its admission
/// of a new run of the slot was refused, as the other master held an
/// active run there; it read the slot again, but took over only the runs
/// not held here, and kept its stale copy, which counted fewer attempts
/// than the other master was running: both dispatched, past the
/// `concurrency`. The stale copy is now dropped and its run taken over
/// again with the new one.
#[test]
fn a_slot_read_again_after_a_refused_admission_takes_back_a_run_claimed_elsewhere_since() {
    let mut env = TestEnv::new();
    env.apply(NARROW);
    let first = env.trigger("narrow");
    env.step(vec![]);
    assert_eq!(env.in_flight_all("a").len() + env.in_flight_all("b").len(), 1, "one task at once");
    // Another master claims it; this one hears nothing of it.
    let claimed_elsewhere = env.claim_elsewhere(&first, "m2");
    let second = env.trigger("narrow");
    env.step(vec![]);
    assert_eq!(env.store.runs[&second].state, RunState::Queued, "refused: m2 holds a run of the slot");
    assert_eq!(env.state.counters().over_limit, 1);

    assert!(!env.state.has_run(&first), "the slot's runs held here go, to be read afresh");

    // The slot is read again: the run is taken back with the new one (its
    // new epoch fences m2's writes), and its task running is counted.
    let effects = env.step(vec![]);
    assert_eq!(env.store.runs[&first].owner.as_deref(), Some("m1"), "taken back");
    assert!(env.store.runs[&first].epoch > claimed_elsewhere);
    assert!(env.state.has_run(&first) && env.state.has_run(&second));
    assert_eq!(effects.probes.len(), 1, "its running attempt is asked about: {:?}", effects.probes);
    assert!(effects.dispatches.is_empty(), "one task at once: {:?}", dispatched_runs(&effects));
    let probe = effects.probes[0].clone();
    assert_eq!(probe.key.run_id, first);
    let effects = env.step(vec![Input::Probed {
        key: probe.key.clone(),
        worker: probe.worker.clone(),
        epoch: probe.epoch,
        adoption: crate::Adoption::Running,
    }]);
    assert!(effects.dispatches.is_empty(), "adopted, it still runs: {:?}", dispatched_runs(&effects));
    let effects = env.succeed(&probe.key, "{}");
    assert_eq!(effects.dispatches.len(), 1, "the next task, alone: {:?}", dispatched(&effects));
}

/// A run already running that starts an attempt under a limit counted for
/// its slot is held back like an admission while another master holds an
/// active run of its tenant there: this master's count misses that run's
/// attempts. Every write of the step for it is dropped (its result comes
/// again from the worker, which keeps it), and the slot's runs are all
/// taken over and counted before anything of them starts.
#[test]
fn an_attempt_under_a_limit_of_its_slot_waits_while_another_master_holds_a_run_there() {
    let mut env = TestEnv::new();
    env.apply(NARROW);
    let mine = env.trigger("narrow");
    env.step(vec![]);
    let first = env.in_flight_all("a").into_iter().chain(env.in_flight_all("b")).next().expect("one task runs");
    // Meanwhile another master holds a run of the slot (this one froze, or
    // its view of the members lags).
    let elsewhere = env.run_elsewhere("narrow", "m2");
    assert_eq!(env.store.runs[&elsewhere].slot, env.store.runs[&mine].slot);
    let effects = env.succeed(&first, "{}");
    // The step decided to start the next task; the store took none of it
    // (and the shell sends nothing of a run whose writes were dropped).
    let next = 1 - first.task as i64;
    assert_eq!(dispatched(&effects).len(), 1);
    assert!(!env.store.attempts.contains_key(&(mine.clone(), next, 1)), "not started");
    let batch = env.batches.last().unwrap();
    assert_eq!(batch.sole_starts.iter().map(|s| s.run_id.as_str()).collect::<Vec<_>>(), [mine.as_str()]);
    assert_eq!(env.state.counters().over_limit, 1);
    let row = &env.store.attempts[&(mine.clone(), first.task as i64, 1)];
    assert_eq!(row.state, dagr_store::AttemptState::Running, "its result was not taken either");

    // The slot's runs are taken over: the other run is counted here now.
    env.step(vec![]);
    assert_eq!(env.store.runs[&elsewhere].owner.as_deref(), Some("m1"));
    assert!(env.state.has_run(&mine) && env.state.has_run(&elsewhere));
}

/// A run under a limit counted for its slot, dropped here and claimed again
/// in the same step (the step may hold writes under its old epoch), is read
/// only at the next step; the other runs of its slot dispatch nothing
/// meanwhile, since its attempts are counted nowhere until then (the
/// store's check does not see it: this master owns it there now).
#[test]
fn a_slot_s_runs_under_its_limit_wait_while_a_run_of_it_is_claimed_again() {
    let mut env = TestEnv::checking(vec![crate::engine::testkit::worker("w1", 8)]);
    env.apply(NARROW);
    let mine = env.trigger("narrow");
    env.step(vec![]);
    let running = env.in_flight_all("a").into_iter().chain(env.in_flight_all("b")).next().expect("one task runs");
    // Another master claims it (this one hears nothing of it), and a run
    // of the slot is left to no master that has loaded it.
    env.claim_elsewhere(&mine, "m2");
    let orphan = env.run_elsewhere("narrow", "m3");
    // The sweep of the owned slots finds both: the stale copy is dropped
    // and claimed again (read at the next step), the orphan taken over.
    env.advance(6_000);
    let effects = env.step(vec![]);
    assert!(env.needs_seen.iter().any(|n| matches!(n, Need::Owners(_))), "{:?}", env.needs_seen);
    assert!(env.state.has_run(&orphan), "the orphan is taken over");
    assert_eq!(env.store.runs[&mine].owner.as_deref(), Some("m1"), "claimed again");
    assert!(
        !env.store.attempts.keys().any(|(run, ..)| *run == orphan),
        "the orphan's tasks wait for the run claimed again: {:?}",
        dispatched(&effects)
    );
    // The next step reads it: its running attempt is counted (and asked
    // about), and still nothing else starts.
    let effects = env.step(vec![]);
    assert!(env.state.has_run(&mine));
    assert!(effects.probes.iter().any(|p| p.key == running), "{:?}", effects.probes);
    assert!(!env.store.attempts.keys().any(|(run, ..)| *run == orphan), "{:?}", dispatched(&effects));
}

/// A step that runs out of passes leaves what it still needs for the next,
/// which asks for it first: the shell does not read it (a run claimed for
/// it would be held by this master in the store and loaded nowhere).
#[test]
fn what_a_step_still_needs_after_its_last_pass_is_asked_first_at_the_next() {
    let mut env = TestEnv::new();
    env.apply("name: one\ntasks:\n- {name: t, plugin: echo}\n");
    let elsewhere = env.run_elsewhere("one", "m2");
    let mut effects = Effects::default();
    effects.need(Need::Claim(vec![elsewhere.clone()]));
    let last = crate::engine::MAX_PASSES - 1;
    assert_eq!(env.state.needs_to_read(&mut effects, last), None, "not read at the last pass");
    assert_eq!(env.store.runs[&elsewhere].owner.as_deref(), Some("m2"));
    env.step(vec![]);
    assert_eq!(env.needs_seen.first(), Some(&Need::Claim(vec![elsewhere.clone()])));
    assert!(env.state.has_run(&elsewhere));
    assert_eq!(env.store.runs[&elsewhere].owner.as_deref(), Some("m1"));
}
