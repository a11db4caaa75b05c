//! The engine's state machine in a cluster, by the effects of its steps:
//! slots granted by the resource leader, ownership changing within a step,
//! a run taken over with its attempts running.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dagr_protocol::commands::Command;
use dagr_protocol::tenancy::TenantLimits;
use dagr_protocol::wire::FailureKind;
use dagr_store::{AttemptState, RunState};

use crate::Adoption;
use crate::engine::effects::{Input, Need};
use crate::engine::testkit::{TENANT, TestEnv, all_slots, dispatched_names, worker};
use crate::engine::tests::{CHAIN, names};
use crate::engine::{Effects, WorkerInfo};

#[test]
fn slots_gained_and_lost_in_one_step_are_not_claimed() {
    let mut env = TestEnv::new();
    env.apply("name: one\ntasks:\n- {name: a, plugin: echo}\n");
    let run = env.trigger("one");
    let slot = dagr_core::slots::slot_of(&run);
    let others: std::collections::HashSet<u32> = (0..dagr_protocol::SLOTS).filter(|s| *s != slot).collect();
    env.step(vec![Input::Ownership(others.clone())]);
    assert!(!env.state.owns(slot));
    // Told that it gains the slot, then (before it stepped) that it lost it again.
    let effects = env.step(vec![Input::Ownership(all_slots()), Input::Ownership(others)]);
    assert!(
        !env.needs_seen.iter().any(|n| matches!(n, Need::Slots(s) if s.contains(&slot))),
        "the slot's runs were asked for: {:?}",
        env.needs_seen
    );
    assert!(!env.state.has_run(&run), "a run of a slot it does not own is loaded here");
    assert!(effects.dispatches.is_empty());
    assert_eq!(env.store.runs[&run].epoch, 0, "the run was claimed");
}

#[test]
fn with_a_resource_leader_tasks_wait_for_granted_slots_and_idle_ones_go_back() {
    use dagr_protocol::wire::{GroupWant, ResourceAnswer, WorkerSlots};
    let mut env = TestEnv::with(|c| c.resources = crate::Resources::Leader, vec![worker("w1", 8), worker("w2", 8)]);
    env.apply("name: fan\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo}\n- {name: c, plugin: echo}\n");
    env.trigger("fan");
    let effects = env.step(vec![]);
    assert!(effects.dispatches.is_empty(), "no slot is granted yet");
    let request = effects.resources.expect("the master asks the leader");
    assert_eq!((request.master.as_str(), request.want.clone()), ("m1", vec![GroupWant { group: None, slots: 3 }]));
    let grant = |held: Vec<(&str, u32)>| {
        let held = held.into_iter().map(|(w, slots)| WorkerSlots { worker: w.into(), slots }).collect();
        Input::Granted(Ok(ResourceAnswer { token: 3, held, share: None }))
    };
    let effects = env.step(vec![grant(vec![("w2", 2)])]);
    assert_eq!(names(&effects), ["a", "b"], "two slots granted, on w2");
    assert!(effects.dispatches.iter().all(|(_, w)| w == "w2"));
    let request = effects.resources.expect("c still wants one");
    assert_eq!(request.holding, vec![WorkerSlots { worker: "w2".into(), slots: 2 }]);
    // The leader has nothing more now; a's end frees a slot for c.
    let effects = env.step(vec![grant(vec![("w2", 2)])]);
    assert!(effects.dispatches.is_empty() && effects.resources.is_none());
    let effects = env.succeed(&env.in_flight("a"), "{}");
    assert_eq!(names(&effects), ["c"], "the freed slot is used at once, with no exchange");
    // Nothing waits: b's slot goes back at once, c's is kept.
    let effects = env.succeed(&env.in_flight("b"), "{}");
    let request = effects.resources.expect("the idle slot goes back");
    assert_eq!((request.holding, request.want), (vec![WorkerSlots { worker: "w2".into(), slots: 1 }], vec![]));
    env.step(vec![grant(vec![("w2", 1)])]);
    // While it holds c's slot, it says so every heartbeat.
    env.advance(crate::resources::HEARTBEAT_MS);
    assert!(env.step(vec![]).resources.is_some(), "a heartbeat");
}

#[test]
fn a_command_answered_by_a_master_that_lost_the_run_stays_for_its_owner() {
    use dagr_protocol::commands::Command;
    let mut env = TestEnv::new();
    env.apply("name: one\ntasks:\n- {name: a, plugin: echo}\n");
    let run = env.trigger("one");
    env.step(vec![]);
    // Another master claimed the run (this one, frozen, does not know yet).
    let epoch = env.store.runs[&run].epoch;
    env.store.runs.get_mut(&run).unwrap().epoch = epoch + 1;
    // A resume of a running run is refused: a reply and nothing else.
    let id = env.command(&run, Command::Resume);
    let effects = env.step(vec![]);
    assert_eq!(effects.replies.len(), 1, "{:?}", effects.replies);
    assert!(effects.batch.fences.contains(&(run.clone(), epoch)), "the answer is fenced: {:?}", effects.batch.fences);
    assert!(env.outcome(id).is_none(), "the command was consumed by a master that no longer owns its run");
    assert!(!env.state.has_run(&run), "the run is dropped once the commit says it is fenced");
}

#[test]
fn commands_waiting_for_a_run_of_a_lost_slot_are_left_to_its_new_owner() {
    use crate::engine::effects::LoadError;
    use dagr_protocol::commands::Command;
    let mut env = TestEnv::new();
    env.apply("name: one\ntasks:\n- {name: a, plugin: echo}\n");
    let run = env.trigger("one");
    // Its run cannot be read yet: the admit command waits for it.
    env.store.unloadable.insert(run.clone(), LoadError::Transient("the store is away".into()));
    env.step(vec![]);
    assert!(env.needs_seen.contains(&Need::Claim(vec![run.clone()])));
    env.command(&run, Command::Kill);
    env.step(vec![]);
    // The slot goes to another master: the run is not asked for again.
    let slot = dagr_core::slots::slot_of(&run);
    env.step(vec![Input::Ownership((0..dagr_protocol::SLOTS).filter(|s| *s != slot).collect())]);
    env.store.unloadable.clear();
    env.step(vec![]);
    assert!(
        !env.needs_seen.iter().any(|n| matches!(n, Need::Claim(runs) if runs.contains(&run))),
        "a run of a lost slot was claimed: {:?}",
        env.needs_seen
    );
    assert!(!env.state.has_run(&run));
}

#[test]
fn a_run_of_a_lost_slot_is_handed_over_without_a_write() {
    let mut env = TestEnv::new();
    env.apply("name: one\ntasks:\n- {name: a, plugin: echo}\n");
    let run = env.trigger("one");
    let effects = env.step(vec![]);
    assert_eq!(names(&effects), ["a"]);
    assert!(env.state.has_run(&run));
    let epoch = env.store.runs[&run].epoch;
    // Its lease lapsed: it owns nothing now.
    let effects = env.step(vec![Input::Ownership(Default::default())]);
    assert!(!env.state.has_run(&run), "the run is dropped at once");
    assert_eq!(env.state.counters().runs_handed_over, 1);
    assert_eq!(env.state.counters().fenced_writes, 0);
    assert!(effects.batch.fences.is_empty(), "nothing is written for it: {:?}", effects.batch.fences);
    assert_eq!(env.store.runs[&run].epoch, epoch, "the run is left to its next owner as it was");
}

/// A run of `CHAIN` whose `a` runs on w1, with the store as the first
/// master left it; a second master takes it over.
fn taken_over(workers: Vec<WorkerInfo>) -> (TestEnv, String) {
    taken_over_from(vec![worker("w1", 8)], workers)
}

/// [`taken_over`], the first master seeing `first` as its workers.
fn taken_over_from(first: Vec<WorkerInfo>, workers: Vec<WorkerInfo>) -> (TestEnv, String) {
    let mut first = TestEnv::with(|_| {}, first);
    first.apply(CHAIN);
    let run = first.trigger("chain");
    first.step(vec![]);
    let mut second = TestEnv::with(|c| c.node_id = "m2".into(), workers);
    // The second master sees the same store.
    second.store = std::mem::take(&mut first.store);
    second.apply(CHAIN);
    (second, run)
}

/// The run's slot is lost and gained again: the run is taken over
/// (claimed, loaded, its running attempts asked about).
fn retake(env: &mut TestEnv, run: &str) -> Effects {
    let slot = env.store.runs[run].slot as u32;
    env.step(vec![Input::Ownership((0..dagr_protocol::SLOTS).filter(|s| *s != slot).collect())]);
    env.step(vec![Input::Ownership(all_slots())])
}

#[test]
fn a_takeover_asks_workers_about_running_attempts_instead_of_restarting_them() {
    let (mut env, run) = taken_over(vec![worker("w1", 8)]);
    let effects = env.step(vec![Input::Ownership(all_slots())]);
    // Nothing happens: ownership did not change. Take the run over by
    // losing and gaining its slot.
    assert!(effects.probes.is_empty());
    let effects = retake(&mut env, &run);
    assert!(effects.dispatches.is_empty(), "a running attempt is not restarted blindly");
    assert_eq!(effects.probes.len(), 1);
    let probe = effects.probes[0].clone();
    assert_eq!(probe.worker, "w1");
    let epoch = env.store.runs[&run].epoch;
    assert_eq!(probe.epoch, epoch, "asked with the new epoch");

    // It still runs: adopted, its row now carries the new epoch.
    let effects = env.step(vec![Input::Probed {
        key: probe.key.clone(),
        worker: "w1".into(),
        epoch,
        adoption: Adoption::Running,
    }]);
    assert!(effects.batch.attempts.iter().any(|a| a.epoch == epoch && a.state == AttemptState::Running));
    assert_eq!(env.state.counters().attempts_adopted, 1);
    // Its result reaches the new owner and is applied.
    let effects = env.succeed(&probe.key, r#"{"v":1}"#);
    assert_eq!(dispatched_names(&effects), ["b"]);
}

#[test]
fn a_takeover_loses_attempts_whose_worker_forgot_them_or_is_gone() {
    let (mut env, run) = taken_over(vec![worker("w1", 8)]);
    let effects = retake(&mut env, &run);
    let probe = effects.probes[0].clone();
    let effects = env.step(vec![Input::Probed {
        key: probe.key.clone(),
        worker: "w1".into(),
        epoch: probe.epoch,
        adoption: Adoption::Unknown { never_under: None },
    }]);
    assert_eq!(dispatched_names(&effects), ["a"], "lost: it goes again");
    let attempt = &env.store.attempts[&(run.clone(), 0, 1)];
    assert_eq!(attempt.failure_kind, Some(FailureKind::WorkerLost));
    assert!(!attempt.charged, "not charged to the retry budget");

    // A worker this master does not know: asked all the same (the
    // transport answers `Gone` for one that is not a member as the
    // membership is now), and lost on that answer.
    let (mut env, run) = taken_over(vec![worker("w2", 8)]);
    let effects = retake(&mut env, &run);
    assert!(effects.dispatches.is_empty(), "not lost on this master's view alone");
    assert_eq!(effects.probes.len(), 1);
    let probe = effects.probes[0].clone();
    assert_eq!(probe.worker, "w1");
    let effects = env.step(vec![Input::Probed {
        key: probe.key.clone(),
        worker: "w1".into(),
        epoch: probe.epoch,
        adoption: Adoption::Gone,
    }]);
    assert_eq!(effects.dispatches.len(), 1);
    assert_eq!(effects.dispatches[0].1, "w2");
}

/// A master that woke from a freeze with a run's slot, whose view of the
/// members does not yet have the worker that joined again meanwhile, does
/// not declare the attempt running there lost (and run the task a second
/// time beside it, as a chaos soak found): it asks, and adopts it.
#[test]
fn a_takeover_with_a_stale_view_of_the_workers_adopts_an_attempt_that_still_runs() {
    let (mut env, run) = taken_over(vec![worker("w2", 8)]);
    let effects = retake(&mut env, &run);
    let probe = effects.probes[0].clone();
    let epoch = env.store.runs[&run].epoch;
    let effects = env.step(vec![Input::Probed {
        key: probe.key.clone(),
        worker: "w1".into(),
        epoch,
        adoption: Adoption::Running,
    }]);
    assert!(effects.dispatches.is_empty(), "{:?}", dispatched_names(&effects));
    assert_eq!(env.state.counters().attempts_adopted, 1);
    assert_eq!(env.state.counters().attempts_lost, 0);
    let effects = env.succeed(&probe.key, r#"{"v":1}"#);
    assert_eq!(dispatched_names(&effects), ["b"]);
}

/// Found by the simulation (`dagr sim`, seed 2709, its masters' view of
/// the members lagging): a master whose view still had a worker under the
/// lease it held before it joined again took a run over and adopted the
/// attempt running there under the new lease; when its view caught up, the
/// lease change declared that attempt lost and the task ran a second time
/// beside it. An attempt taken over is asked about again on a lease change;
/// one dispatched under the old lease is lost (the worker stopped it before
/// it joined again).
#[test]
fn a_lease_change_asks_about_an_adopted_attempt_instead_of_losing_it() {
    let leased = |lease| WorkerInfo { lease, ..worker("w1", 8) };
    let (mut env, run) = taken_over(vec![leased(7)]);
    let effects = retake(&mut env, &run);
    let probe = effects.probes[0].clone();
    let epoch = env.store.runs[&run].epoch;
    let running = |key: &dagr_protocol::wire::AttemptKey| Input::Probed {
        key: key.clone(),
        worker: "w1".into(),
        epoch,
        adoption: Adoption::Running,
    };
    env.step(vec![running(&probe.key)]);
    assert_eq!(env.state.counters().attempts_adopted, 1);

    let effects = env.step(vec![Input::Workers(vec![leased(8)])]);
    assert!(effects.dispatches.is_empty(), "{:?}", dispatched_names(&effects));
    assert_eq!(env.state.counters().attempts_lost, 0);
    assert_eq!(effects.probes.len(), 1, "asked again");
    assert_eq!(effects.probes[0].key, probe.key);
    // It runs under the new lease: it stays, and its result is applied.
    let effects = env.step(vec![running(&probe.key)]);
    assert!(effects.dispatches.is_empty());
    let effects = env.succeed(&probe.key, r#"{"v":1}"#);
    assert_eq!(dispatched_names(&effects), ["b"]);
    let next = effects.dispatches[0].0.key.clone();
    assert_eq!(effects.dispatches[0].0.worker_lease, Some(8));

    // Dispatched under lease 8, it is lost when the worker joins again.
    let effects = env.step(vec![Input::Workers(vec![leased(9)])]);
    assert!(effects.probes.is_empty());
    assert_eq!(effects.dispatches.len(), 1, "lost with lease 8: it goes again");
    assert_eq!(effects.dispatches[0].0.key.task, next.task);
    assert_eq!(env.state.counters().attempts_lost, 1);
}

/// A master that dies between committing an attempt and sending it: the
/// new owner finds it running in the store, with the lease its dispatch
/// was addressed to. A worker that still holds that lease and never took
/// the attempt vouches for it: it never ran, and goes again as
/// `dispatch-failed`, not counted as lost. Taken over under a known lease,
/// an attempt is lost at once when the worker's lease changes (the worker
/// refuses it under any other).
#[test]
fn a_taken_over_attempt_that_never_reached_its_worker_goes_again_without_counting_as_lost() {
    let leased = |lease| WorkerInfo { lease, ..worker("w1", 8) };
    let taken_over_under = |lease| taken_over_from(vec![leased(lease)], vec![leased(lease)]);
    let (mut env, run) = taken_over_under(7);
    assert_eq!(env.store.attempts[&(run.clone(), 0, 1)].lease, Some(7));
    let effects = retake(&mut env, &run);
    let probe = effects.probes[0].clone();
    let effects = env.step(vec![Input::Probed {
        key: probe.key.clone(),
        worker: "w1".into(),
        epoch: probe.epoch,
        adoption: Adoption::Unknown { never_under: Some(7) },
    }]);
    assert_eq!(dispatched_names(&effects), ["a"], "it goes again");
    let attempt = &env.store.attempts[&(run.clone(), 0, 1)];
    assert_eq!(attempt.failure_kind, Some(FailureKind::DispatchFailed), "{attempt:?}");
    assert_eq!(env.store.tasks[&run][0].lost, 0);
    assert_eq!(env.state.counters().attempts_lost, 0);

    // Under the lease it was sent to, kept in its row: a new lease loses
    // it without asking.
    let (mut env, run) = taken_over_under(7);
    retake(&mut env, &run);
    let effects = env.step(vec![Input::Workers(vec![leased(8)])]);
    assert!(effects.probes.is_empty(), "not asked: it cannot run under lease 8");
    assert_eq!(dispatched_names(&effects), ["a"], "lost: it goes again");
    assert_eq!(env.store.tasks[&run][0].lost, 1);
}

/// A tenant's `max_concurrent` is counted by the master that drives its
/// runs, so a capped tenant's runs are all made in one slot: the cycles a
/// schedule makes and the child runs its sub-workflow tasks start (the API
/// does the same for triggers, jobs and backfills).
#[test]
fn a_capped_tenant_s_new_runs_are_made_in_one_slot() {
    let mut env = TestEnv::with(|c| c.max_catch_up = 3, vec![worker("w1", 8)]);
    env.limits = Some(std::collections::HashMap::from([(
        TENANT.to_owned(),
        TenantLimits { max_concurrent: Some(4), allow_hosts: vec!["*".into()], ..TenantLimits::default() },
    )]));
    let tenant_slot = dagr_core::slots::slot_of(&format!("tenant/{TENANT}"));
    let minute = 60_000;
    let start = (env.now / minute - 10) * minute;
    let start = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(start).unwrap().to_rfc3339();
    env.apply(&format!(
        "name: cron\nschedule: {{cron: \"* * * * *\", catch_up: true, start: \"{start}\"}}\ntasks:\n- {{name: t, plugin: echo}}\n"
    ));
    let effects = env.lead();
    assert_eq!(effects.batch.new_runs.len(), 3);
    for new in &effects.batch.new_runs {
        assert_eq!(dagr_core::slots::slot_of(&new.run.id), tenant_slot, "{}", new.run.id);
        assert_eq!(new.run.slot, i64::from(tenant_slot));
    }

    env.apply("name: child\ntasks:\n- {name: c, plugin: echo}\n");
    env.apply("name: parent\ntasks:\n- {name: sub, workflow: child}\n");
    env.trigger("parent");
    let effects = env.step(vec![]);
    assert_eq!(effects.batch.child_runs.len(), 1);
    assert_eq!(dagr_core::slots::slot_of(&effects.batch.child_runs[0].run.id), tenant_slot);
}

#[test]
fn a_command_carried_out_elsewhere_while_its_run_was_being_claimed_is_not_carried_out_again() {
    let mut env = TestEnv::new();
    env.apply("name: w\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo, depends_on: [a]}\n");
    let run = env.run_elsewhere("w", "m2");
    // The operator pauses it; this master reads the command, but the claim
    // of the run fails for now (the store is busy): the command waits.
    env.store.unloadable.insert(run.clone(), crate::engine::LoadError::Transient("busy".into()));
    let pause = env.command(&run, Command::Pause);
    env.step(vec![]);
    assert!(env.outcome(pause).is_none(), "not carried out yet");
    // Meanwhile the master that had the run carries it out, and its
    // commit lands before this master's claim.
    env.store.done.insert(pause, r#"{"ok":true,"message":"pause done"}"#.into());
    env.store.unloadable.remove(&run);
    env.step(vec![]);
    assert!(!env.batches.iter().any(|b| b.commands_done.iter().any(|c| c.id == pause)), "not carried out again");
    assert_eq!(env.run_state(&run), RunState::Running);
    // A command still pending when the run is claimed is carried out in
    // the step of the claim.
    env.store.runs.get_mut(&run).unwrap().owner = Some("m2".into());
    let kill = env.command(&run, Command::Kill);
    env.step(vec![]);
    assert!(env.outcome(kill).is_some_and(|o| o["ok"] == true), "{:?}", env.outcome(kill));
}
