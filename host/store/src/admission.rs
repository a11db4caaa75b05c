//! A step's admissions under a limit, checked by the store.
//!
//! Each master counts a workflow's active runs over the runs it holds, and
//! all runs one limit counts are made in one slot, so one master drives
//! them. While a slot moves between masters, two may each believe they
//! hold it for a moment (one froze and has not yet learned that another
//! claimed the slot's runs): the frozen one's count misses the run the
//! other started, and it would admit one more. The store sees every run,
//! so an admission's commit counts them there: the workflow's (and the
//! backfill's) runs active once the step is applied, and an admission
//! that would pass the limit has all its writes of the step dropped, like
//! a fenced run's.
//!
//! The decision is pure ([`over_limit`]); what the store reads for it is
//! each limit's active runs ([`limits`], at most [`Limit::enough`] of
//! them), under a per-workflow lock on PostgreSQL.

use std::collections::{HashMap, HashSet};

use crate::{Admission, RunState, SoleStart, WriteBatch};

/// One limit that an admission of the batch counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Limit {
    pub tenant: String,
    pub workflow: String,
    /// `None`: the workflow's `max_active_runs`; `Some`: the backfill's
    /// parallelism.
    pub backfill: Option<String>,
    pub max: u32,
}

impl Limit {
    /// How many of the limit's stored active runs the decision needs:
    /// with more than `max` left once this batch's own ends are taken
    /// out, the limit is reached whatever the rest are.
    pub fn enough(&self, batch: &WriteBatch) -> i64 {
        i64::from(self.max) + batch.runs.len() as i64 + batch.admissions.len() as i64
    }
}

fn is_active(state: RunState) -> bool {
    matches!(state, RunState::Running | RunState::Paused)
}

/// The admissions to check: those whose run is active once the batch is
/// applied (one that also ended in the step counts against nothing), each
/// run once (a step may admit a run, end it, rerun it and admit it again).
fn checked(batch: &WriteBatch) -> Vec<&Admission> {
    let finals = final_states(batch);
    let mut seen = HashSet::new();
    batch
        .admissions
        .iter()
        .filter(|a| finals.get(a.run_id.as_str()).is_some_and(|s| is_active(*s)))
        .filter(|a| seen.insert(a.run_id.as_str()))
        .collect()
}

fn final_states(batch: &WriteBatch) -> HashMap<&str, RunState> {
    batch.runs.iter().map(|r| (r.id.as_str(), r.state)).collect()
}

fn limits_of(admission: &Admission) -> impl Iterator<Item = Limit> + '_ {
    let workflow = admission.max_active_runs.map(|max| Limit {
        tenant: admission.tenant.clone(),
        workflow: admission.workflow.clone(),
        backfill: None,
        max,
    });
    let backfill = admission.backfill.as_ref().map(|(id, max)| Limit {
        tenant: admission.tenant.clone(),
        workflow: admission.workflow.clone(),
        backfill: Some(id.clone()),
        max: *max,
    });
    workflow.into_iter().chain(backfill)
}

/// Every limit the batch's admissions count against, each once, in order
/// (the order PostgreSQL takes their workflows' locks in).
pub fn limits(batch: &WriteBatch) -> Vec<Limit> {
    let mut limits: Vec<Limit> = checked(batch).into_iter().flat_map(limits_of).collect();
    limits.sort();
    limits.dedup();
    limits
}

/// The admitted runs whose writes must be dropped, given each limit's
/// active runs in the store before the batch (`stored`, as [`limits`]
/// lists them, at most [`Limit::enough`] each). Admissions are taken in
/// the batch's order while their limits have room.
pub fn over_limit(batch: &WriteBatch, stored: &[(Limit, Vec<String>)]) -> HashSet<String> {
    let finals = final_states(batch);
    let admitted: HashSet<&str> = batch.admissions.iter().map(|a| a.run_id.as_str()).collect();
    // Active once the batch applies, but for its admissions: a stored
    // active run the step ends does not count.
    let mut active: HashMap<&Limit, usize> = stored
        .iter()
        .map(|(limit, ids)| {
            let still = ids
                .iter()
                .filter(|id| !admitted.contains(id.as_str()))
                .filter(|id| finals.get(id.as_str()).is_none_or(|s| is_active(*s)))
                .count();
            (limit, still)
        })
        .collect();
    let mut over = HashSet::new();
    for admission in checked(batch) {
        let mine: Vec<Limit> = limits_of(admission).collect();
        let room = mine.iter().all(|l| active.get(l).is_none_or(|n| *n < l.max as usize));
        if room {
            for l in &mine {
                if let Some(n) = active.get_mut(l) {
                    *n += 1;
                }
            }
        } else {
            over.insert(admission.run_id.clone());
        }
    }
    over
}

/// A slot that admissions of the batch need their master to hold alone:
/// (tenant, slot, the admitting master).
pub type Sole = (String, i64, String);

/// The slots, each once and in order, whose active runs of a tenant owned
/// by another master the store reads for the batch's admissions (see
/// [`Admission::sole`]), at most [`sole_enough`] each.
pub fn soles(batch: &WriteBatch) -> Vec<Sole> {
    let mut soles: Vec<Sole> = checked(batch)
        .into_iter()
        .filter_map(|a| a.sole.as_ref().map(|(slot, owner)| (a.tenant.clone(), *slot, owner.clone())))
        .chain(starting(batch).map(|s| (s.tenant.clone(), s.slot, s.owner.clone())))
        .collect();
    soles.sort();
    soles.dedup();
    soles
}

/// How many of a slot's runs owned elsewhere the decision needs: more
/// than the batch writes, and one is left that it does not end.
pub fn sole_enough(batch: &WriteBatch) -> i64 {
    batch.runs.len() as i64 + 1
}

/// The runs already active that start attempts in the batch under a
/// slot's limit and are still active once it applies.
fn starting(batch: &WriteBatch) -> impl Iterator<Item = &SoleStart> {
    let finals = final_states(batch);
    batch.sole_starts.iter().filter(move |s| finals.get(s.run_id.as_str()).is_none_or(|state| is_active(*state)))
}

/// The admitted runs, and the runs starting attempts, whose writes must be
/// dropped because another master holds an active run of their tenant in
/// their slot (`elsewhere`, as [`soles`] lists them): two masters each
/// believe they hold the slot, and each counts only its own runs against a
/// limit of the slot's.
pub fn held_elsewhere(batch: &WriteBatch, elsewhere: &[(Sole, Vec<String>)]) -> HashSet<String> {
    let finals = final_states(batch);
    let shared = |run_tenant: &str, slot: i64, owner: &str| {
        elsewhere.iter().any(|((tenant, s, o), ids)| {
            tenant == run_tenant
                && *s == slot
                && o == owner
                && ids.iter().any(|id| finals.get(id.as_str()).is_none_or(|s| is_active(*s)))
        })
    };
    let admitted = checked(batch)
        .into_iter()
        .filter_map(|a| a.sole.as_ref().map(|(slot, owner)| (&a.run_id, &a.tenant, *slot, owner)));
    let started = starting(batch).map(|s| (&s.run_id, &s.tenant, s.slot, &s.owner));
    admitted
        .chain(started)
        .filter(|(_, tenant, slot, owner)| shared(tenant, *slot, owner))
        .map(|(id, ..)| id.clone())
        .collect()
}

/// Drops every write of `runs` from the batch (they are fenced, or over a
/// limit): their states, tasks, outputs, attempts, events, the commands
/// they answered (which stay pending), what they wait for upstream (a
/// master that lost a run must not delete the waits its new owner
/// recorded: the wake-up they are for would find nobody), the upstream
/// runs recorded as releasing them, and the commands their changes wrote
/// for other runs (a child's end for its parent: the child may not have
/// ended at all).
pub fn drop_writes(batch: &mut WriteBatch, runs: &HashSet<String>) {
    use crate::OutputWrite;
    batch.runs.retain(|r| !runs.contains(&r.id));
    batch.tasks.retain(|t| !runs.contains(&t.run_id));
    batch.outputs.retain(|o| match o {
        OutputWrite::Set { run_id, .. } | OutputWrite::Clear { run_id, .. } => !runs.contains(run_id),
    });
    batch.attempts.retain(|a| !runs.contains(&a.run_id));
    batch.events.retain(|e| e.run_id.as_ref().is_none_or(|r| !runs.contains(r)));
    batch.commands_done.retain(|c| !runs.contains(&c.run_id));
    batch.admissions.retain(|a| !runs.contains(&a.run_id));
    batch.sole_starts.retain(|s| !runs.contains(&s.run_id));
    batch.clear_waits.retain(|id| !runs.contains(id));
    batch.run_waits.retain(|w| !runs.contains(&w.run_id));
    batch.links.retain(|(_, _, released)| !runs.contains(released));
    batch.commands.retain(|c| c.by.as_ref().is_none_or(|by| !runs.contains(by)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RunWrite;

    fn write(id: &str, state: RunState) -> RunWrite {
        RunWrite { id: id.into(), state, started_at: None, finished_at: None, updated_at: 0 }
    }

    fn admit(id: &str, max: Option<u32>, backfill: Option<(&str, u32)>) -> Admission {
        Admission {
            run_id: id.into(),
            tenant: "t".into(),
            workflow: "w".into(),
            max_active_runs: max,
            backfill: backfill.map(|(b, n)| (b.into(), n)),
            sole: None,
        }
    }

    #[test]
    fn an_admission_under_a_slot_s_limit_waits_while_another_master_holds_an_active_run_of_it() {
        let sole = |id: &str| Admission { sole: Some((7, "m2".into())), ..admit(id, None, None) };
        let batch = WriteBatch {
            runs: vec![
                write("new", RunState::Running),
                write("other", RunState::Running),
                write("ended", RunState::Failed),
            ],
            admissions: vec![sole("new"), admit("other", None, None)],
            ..WriteBatch::default()
        };
        assert_eq!(soles(&batch), [("t".to_owned(), 7, "m2".to_owned())]);
        let elsewhere = |ids: &[&str]| [(soles(&batch)[0].clone(), ids.iter().map(|i| i.to_string()).collect())];
        assert_eq!(ids(held_elsewhere(&batch, &elsewhere(&["m3-run"]))), ["new"]);
        assert!(held_elsewhere(&batch, &elsewhere(&[])).is_empty(), "the slot is this master's alone");
        assert!(held_elsewhere(&batch, &elsewhere(&["ended"])).is_empty(), "a run the batch ends does not count");
        // Another tenant's, or another slot's, runs elsewhere are not this
        // admission's concern.
        let other_slot = [(("t".to_owned(), 8, "m2".to_owned()), vec!["m3-run".to_owned()])];
        assert!(held_elsewhere(&batch, &other_slot).is_empty());
    }

    #[test]
    fn a_run_starting_attempts_under_a_slot_s_limit_is_held_back_like_an_admission() {
        let start = |id: &str| SoleStart { run_id: id.into(), tenant: "t".into(), slot: 7, owner: "m2".into() };
        let batch = WriteBatch {
            runs: vec![write("ending", RunState::Succeeded)],
            sole_starts: vec![start("going"), start("ending")],
            ..WriteBatch::default()
        };
        assert_eq!(soles(&batch), [("t".to_owned(), 7, "m2".to_owned())]);
        let elsewhere = [(soles(&batch)[0].clone(), vec!["m3-run".to_owned()])];
        let over = held_elsewhere(&batch, &elsewhere);
        assert_eq!(ids(over.clone()), ["going"], "a run the batch ends is not held back");
        assert!(held_elsewhere(&batch, &[(soles(&batch)[0].clone(), vec![])]).is_empty());
        let mut dropped = batch.clone();
        drop_writes(&mut dropped, &over);
        assert_eq!(dropped.sole_starts, [start("ending")]);
        assert!(limits(&batch).is_empty(), "not an admission: it counts against no workflow's limit");
        assert!(over_limit(&batch, &[]).is_empty());
    }

    fn limit(backfill: Option<&str>, max: u32) -> Limit {
        Limit { tenant: "t".into(), workflow: "w".into(), backfill: backfill.map(Into::into), max }
    }

    fn ids(over: HashSet<String>) -> Vec<String> {
        let mut ids: Vec<String> = over.into_iter().collect();
        ids.sort();
        ids
    }

    #[test]
    fn an_admission_past_a_run_the_store_has_active_is_dropped() {
        let batch = WriteBatch {
            runs: vec![write("b", RunState::Running)],
            admissions: vec![admit("b", Some(1), None)],
            ..WriteBatch::default()
        };
        assert_eq!(limits(&batch), [limit(None, 1)]);
        let over = over_limit(&batch, &[(limit(None, 1), vec!["a".into()])]);
        assert_eq!(ids(over), ["b"]);
        assert!(over_limit(&batch, &[(limit(None, 1), vec![])]).is_empty());
    }

    #[test]
    fn a_run_the_same_step_ends_makes_room_and_admissions_take_it_in_order() {
        let batch = WriteBatch {
            runs: vec![
                write("a", RunState::Succeeded),
                write("b", RunState::Running),
                write("c", RunState::Running),
                write("d", RunState::Running),
            ],
            admissions: vec![admit("b", Some(2), None), admit("c", Some(2), None), admit("d", Some(2), None)],
            ..WriteBatch::default()
        };
        let stored = [(limit(None, 2), vec!["a".into(), "x".into()])];
        assert_eq!(ids(over_limit(&batch, &stored)), ["c", "d"]);
    }

    #[test]
    fn a_backfill_and_its_workflow_both_count_and_a_refused_admission_takes_no_room() {
        let batch = WriteBatch {
            runs: vec![write("b", RunState::Running), write("c", RunState::Running)],
            admissions: vec![admit("b", Some(5), Some(("bf", 1))), admit("c", Some(5), None)],
            ..WriteBatch::default()
        };
        let limits = limits(&batch);
        assert_eq!(limits, [limit(None, 5), limit(Some("bf"), 1)]);
        let stored = [
            (limits[0].clone(), vec!["x".into(), "y".into(), "z".into(), "v".into()]),
            (limits[1].clone(), vec!["z".into()]),
        ];
        // b: the backfill's one run is active; c: the workflow has room
        // (b took none of it).
        assert_eq!(ids(over_limit(&batch, &stored)), ["b"]);
    }

    #[test]
    fn a_run_admitted_twice_in_one_step_counts_once() {
        let batch = WriteBatch {
            runs: vec![write("b", RunState::Running), write("b", RunState::Failed), write("b", RunState::Running)],
            admissions: vec![admit("b", Some(1), None), admit("b", Some(1), None)],
            ..WriteBatch::default()
        };
        assert!(over_limit(&batch, &[(limit(None, 1), vec![])]).is_empty());
    }

    #[test]
    fn an_admission_whose_run_ends_in_the_step_is_not_checked() {
        let batch = WriteBatch {
            runs: vec![write("b", RunState::Running), write("b", RunState::Killed)],
            admissions: vec![admit("b", Some(1), None)],
            ..WriteBatch::default()
        };
        assert!(limits(&batch).is_empty());
        assert!(over_limit(&batch, &[]).is_empty());
    }
}
