//! Attempts in flight, by the effects of the engine's steps: a dispatch
//! that got no answer, a worker that leaves or comes back under a new
//! lease, a run another master claimed behind this one's back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dagr_protocol::commands::Command;
use dagr_protocol::wire::FailureKind;
use dagr_store::{AttemptState, TaskState};

use crate::Adoption;
use crate::engine::WorkerInfo;
use crate::engine::effects::Input;
use crate::engine::testkit::{TestEnv, worker};
use crate::engine::tests::{PLAIN, names};

/// Found by the chaos soak and the simulation: a worker took an attempt,
/// then the answer to its dispatch was lost (the worker was killed, or
/// frozen past the call's timeout). Recorded as `dispatch-failed` ("never
/// ran"), it went again elsewhere while the first worker ran it too.
#[test]
fn a_dispatch_without_an_answer_stays_in_flight_until_the_worker_says() {
    let mut env = TestEnv::checking(vec![worker("w1", 8)]);
    env.apply("name: two\ntasks:\n- {name: t, plugin: echo, retries: 0}\n- {name: u, plugin: echo, retries: 0}\n");
    let run = env.trigger("two");
    let effects = env.step(vec![]);
    assert_eq!(effects.dispatches.len(), 2);
    let to = "w1".to_owned();
    let specs: Vec<_> = effects.dispatches.iter().map(|(spec, _)| spec.clone()).collect();
    let sent = crate::engine::sent_of(&specs);
    let reason = "error sending request: connection reset".to_owned();
    let answer = Err(crate::DispatchError::NoAnswer { worker: to.clone(), reason });
    let effects = env.answer(&to, &specs, answer);
    assert!(effects.dispatches.is_empty(), "it may run on {to}: it does not go again yet");
    for (key, _, _) in &sent {
        let attempt = &env.store.attempts[&(run.clone(), key.task as i64, key.number as i64)];
        assert_eq!(attempt.state, AttemptState::Running, "{attempt:?}");
    }

    // The worker is asked at the next check, not after a whole period.
    env.advance(1_000);
    let effects = env.step(vec![]);
    let mut asked: Vec<_> = effects.probes.iter().map(|p| (p.key.clone(), p.worker.clone())).collect();
    asked.sort();
    let mut expected: Vec<_> = sent.iter().map(|(key, _, _)| (key.clone(), to.clone())).collect();
    expected.sort();
    assert_eq!(asked, expected);

    // It runs the first: that one stays; it does not know the second: lost
    // (it refuses it from now on), and it goes again, uncharged. ("Unknown"
    // cannot tell one that never arrived from one that ran and whose
    // result was dropped: the simulation, seed 6282 with the leader.)
    let epoch = sent[0].1;
    let (first, second) = (sent[0].0.clone(), sent[1].0.clone());
    let inputs = vec![
        Input::Probed { key: first.clone(), worker: to.clone(), epoch, adoption: Adoption::Running },
        Input::Probed {
            key: second.clone(),
            worker: to.clone(),
            epoch,
            adoption: Adoption::Unknown { never_under: None },
        },
    ];
    let effects = env.step(inputs);
    assert_eq!(effects.dispatches.len(), 1, "the unknown one goes again");
    assert_eq!(effects.dispatches[0].0.key.task, second.task);
    let lost = &env.store.attempts[&(run.clone(), second.task as i64, second.number as i64)];
    assert_eq!(lost.failure_kind, Some(FailureKind::WorkerLost), "{lost:?}");
    let task = &env.store.tasks[&run][second.task as usize];
    assert_eq!((task.failures, task.lost), (0, 1), "uncharged, counted as lost");
    env.succeed(&first, "{}");
    assert_eq!(env.task_state(&run, &sent[0].2), TaskState::Succeeded);
}

/// An unanswered dispatch whose worker then left the membership: it may
/// have run there, so it is lost with the worker (not "never ran").
#[test]
fn a_dispatch_without_an_answer_to_a_worker_that_left_is_lost_with_it() {
    let mut env = TestEnv::checking(vec![worker("w1", 8)]);
    env.apply("name: one\ntasks:\n- {name: t, plugin: echo, retries: 0}\n");
    let run = env.trigger("one");
    let effects = env.step(vec![]);
    let (spec, to) = effects.dispatches[0].clone();
    let answer = Err(crate::DispatchError::NoAnswer { worker: to.clone(), reason: "timed out".into() });
    env.answer(&to, std::slice::from_ref(&spec), answer);
    let gone = Input::Probed { key: spec.key.clone(), worker: to, epoch: spec.epoch, adoption: Adoption::Gone };
    env.advance(10_000); // past the worker's rest after the failed call
    let effects = env.step(vec![gone]);
    assert_eq!(effects.dispatches.len(), 1, "it goes again");
    assert_eq!(env.store.attempts[&(run.clone(), 0, 1)].failure_kind, Some(FailureKind::WorkerLost));
    assert_eq!(env.store.tasks[&run][0].lost, 1);
}

/// An unanswered dispatch that never reached its worker: the worker still
/// holds the lease it was sent to and never took the attempt under it, so
/// it goes again as `dispatch-failed`, not counted towards the task's
/// `max_lost_attempts` (a run of timed-out dispatches used to fail a task
/// that never ran). A worker that vouches under another lease (it joined
/// again since) or not at all leaves it lost.
#[test]
fn an_unanswered_dispatch_its_worker_never_received_goes_again_without_counting_as_lost() {
    let leased = WorkerInfo { lease: 7, ..worker("w1", 8) };
    let mut env = TestEnv::checking(vec![leased]);
    env.apply("name: one\ntasks:\n- {name: t, plugin: echo, retries: 0}\n");
    let run = env.trigger("one");
    let mut lost = 0;
    let mut effects = env.step(vec![]);
    for (answer, lost_now) in [(Some(7), false), (Some(6), true), (None, true), (Some(7), false)] {
        assert_eq!(effects.dispatches.len(), 1, "it goes (again)");
        let (spec, to) = effects.dispatches[0].clone();
        assert_eq!(spec.worker_lease, Some(7));
        let number = spec.key.number as i64;
        assert_eq!(env.store.attempts[&(run.clone(), 0, number)].lease, Some(7), "its row keeps the lease");
        let timed_out = Err(crate::DispatchError::NoAnswer { worker: to.clone(), reason: "timed out".into() });
        env.answer(&to, std::slice::from_ref(&spec), timed_out);
        env.advance(10_000); // past the worker's rest after the failed call
        let unknown = Adoption::Unknown { never_under: answer };
        effects =
            env.step(vec![Input::Probed { key: spec.key.clone(), worker: to, epoch: spec.epoch, adoption: unknown }]);
        let row = &env.store.attempts[&(run.clone(), 0, number)];
        let kind = if lost_now { FailureKind::WorkerLost } else { FailureKind::DispatchFailed };
        assert_eq!(row.failure_kind, Some(kind), "{answer:?}: {row:?}");
        lost += u32::from(lost_now);
        let task = &env.store.tasks[&run][0];
        assert_eq!((task.failures, task.lost), (0, i64::from(lost)), "{answer:?}");
    }
    // Two lost of the three allowed: it still goes.
    assert_eq!(effects.dispatches.len(), 1);
    assert_eq!(env.task_state(&run, "t"), TaskState::Running);
}

/// Where workers are never asked about their attempts (no `attempt_check`),
/// an attempt whose dispatch got no answer cannot wait for an answer: it
/// goes again at once, as one refused.
#[test]
fn without_attempt_checks_a_dispatch_without_an_answer_goes_again() {
    let mut env = TestEnv::with(|_| {}, vec![worker("w1", 8), worker("w2", 8)]);
    env.apply("name: one\ntasks:\n- {name: t, plugin: echo, retries: 0}\n");
    let run = env.trigger("one");
    let effects = env.step(vec![]);
    let (spec, to) = effects.dispatches[0].clone();
    let answer = Err(crate::DispatchError::NoAnswer { worker: to.clone(), reason: "timed out".into() });
    let effects = env.answer(&to, &[spec], answer);
    assert_eq!(effects.dispatches.len(), 1);
    assert_eq!(env.store.attempts[&(run, 0, 1)].failure_kind, Some(FailureKind::DispatchFailed));
}

/// A worker that lost its lease and joined again is another worker: what
/// it ran under the old lease is lost (it stopped it), and a dispatch names
/// the lease it was meant for, so that one sent to the old lease and
/// delivered late is refused.
#[test]
fn a_worker_under_a_new_lease_loses_what_ran_under_the_old_one() {
    let leased = |lease| WorkerInfo { lease, ..worker("w1", 8) };
    let mut env = TestEnv::with(|_| {}, vec![leased(7)]);
    env.apply("name: one\ntasks:\n- {name: t, plugin: echo, retries: 0}\n");
    let run = env.trigger("one");
    let effects = env.step(vec![]);
    assert_eq!(effects.dispatches[0].0.worker_lease, Some(7));
    let effects = env.step(vec![Input::Workers(vec![leased(7)])]);
    assert!(effects.dispatches.is_empty(), "the same lease: nothing changed");
    let effects = env.step(vec![Input::Workers(vec![leased(8)])]);
    assert_eq!(effects.dispatches.len(), 1, "lost with the old lease: it goes again");
    assert_eq!(effects.dispatches[0].0.worker_lease, Some(8));
    let lost = &env.store.attempts[&(run.clone(), 0, 1)];
    assert_eq!(lost.failure_kind, Some(FailureKind::WorkerLost), "{lost:?}");
    assert_eq!(env.store.tasks[&run][0].failures, 0, "uncharged");
}

/// Found by the simulation (`dagr sim`, seed 204943): a master slept
/// (SIGSTOP, within its lease) while its slot went to another master and
/// came back. The other claimed its paused run and handed the slot back;
/// this one still held its stale copy, which had nothing to write — so no
/// fence told it — and never took the run over again.
#[test]
fn a_run_claimed_elsewhere_behind_this_masters_back_is_taken_over_again() {
    let mut env = TestEnv::checking(vec![worker("w1", 8)]);
    env.apply(PLAIN);
    let run = env.trigger("plain");
    env.step(vec![]);
    env.command(&run, Command::Pause);
    env.step(vec![]);
    let a = env.in_flight("a");
    env.succeed(&a, "{}");
    assert_eq!(env.store.runs[&run].epoch, 1);
    // Another master claims it while this one sleeps, then lets it go.
    env.store.load(&run, "m2").unwrap();
    assert_eq!(env.store.runs[&run].owner.as_deref(), Some("m2"));
    env.advance(6_000);
    env.step(vec![]);
    env.step(vec![]);
    assert_eq!(env.store.runs[&run].owner.as_deref(), Some("m1"), "taken over again: {:?}", env.needs_seen);
    assert!(env.store.runs[&run].epoch >= 3, "with a claim of its own");
    // And it goes on once resumed.
    env.command(&run, Command::Resume);
    let effects = env.step(vec![]);
    assert_eq!(names(&effects), ["b"]);
}
