use super::*;
use crate::definition::{Format, PluginCatalog, ResolvedPlugin, WorkflowSpec};

struct AnyPlugin;

impl PluginCatalog for AnyPlugin {
    fn resolve(&self, name: &str, _: Option<&str>) -> Result<ResolvedPlugin, String> {
        Ok(ResolvedPlugin { name: name.into(), version: "1.0.0".into(), params_schema: None })
    }
}

/// A validated workflow whose plugins are all taken to exist.
pub(crate) fn workflow(yaml: &str) -> Arc<Workflow> {
    Arc::new(Workflow::validate(WorkflowSpec::parse(yaml, Format::Yaml).unwrap(), &AnyPlugin).unwrap())
}

/// Drives a run like the engine does: dispatch whatever becomes ready.
pub(super) struct Driver {
    pub(super) m: RunMachine,
    pub(super) ready: Vec<usize>,
    pub(super) retries: Vec<usize>,
    pub(super) cancelled: Vec<usize>,
    pub(super) wakes: Vec<(usize, i64)>,
}

impl Driver {
    pub(super) fn new(yaml: &str) -> Self {
        let mut d = Driver {
            m: RunMachine::new(workflow(yaml)),
            ready: vec![],
            retries: vec![],
            cancelled: vec![],
            wakes: vec![],
        };
        d.feed(Input::Start);
        d
    }

    pub(super) fn take(&mut self, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::Dispatch { task } => self.ready.push(task),
                Action::RetryAt { task, .. } => self.retries.push(task),
                Action::Cancel { task, .. } => self.cancelled.push(task),
                Action::WakeAt { task, at_ms } => self.wakes.push((task, at_ms)),
                _ => {}
            }
        }
    }

    pub(super) fn feed(&mut self, input: Input) {
        let actions = self.m.apply(input, 0).unwrap();
        self.take(actions);
    }

    pub(super) fn idx(&self, name: &str) -> usize {
        self.m.workflow().task_index(name).unwrap()
    }

    pub(super) fn start(&mut self, name: &str) -> u32 {
        let t = self.idx(name);
        self.ready.retain(|&r| r != t);
        let (n, actions) = self.m.start_attempt(t).unwrap();
        self.take(actions);
        n
    }

    pub(super) fn ok(&mut self, name: &str) {
        let attempt = self.start(name);
        let task = self.idx(name);
        self.feed(Input::AttemptSucceeded { task, attempt });
    }

    pub(super) fn fail(&mut self, name: &str, retryable: bool) {
        let attempt = self.start(name);
        let task = self.idx(name);
        self.feed(Input::AttemptFailed {
            task,
            attempt,
            class: FailureClass { retryable, charged: true, lost: false },
        });
    }

    pub(super) fn state(&self, name: &str) -> TaskState {
        self.m.task(self.idx(name)).state
    }

    pub(super) fn ready_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.ready.iter().map(|&t| self.m.workflow().tasks[t].name.clone()).collect();
        v.sort();
        v
    }
}

pub(super) const DIAMOND: &str = "name: d\ntasks:\n- {name: a, plugin: p}\n- {name: b, plugin: p, depends_on: [a]}\n\
                       - {name: c, plugin: p, depends_on: [a]}\n- {name: d, plugin: p, depends_on: [b, c]}\n";

#[test]
fn diamond_runs_in_order() {
    let mut d = Driver::new(DIAMOND);
    assert_eq!(d.ready_names(), ["a"]);
    d.ok("a");
    assert_eq!(d.ready_names(), ["b", "c"]);
    d.ok("b");
    assert_eq!(d.ready_names(), ["c"]);
    d.ok("c");
    assert_eq!(d.ready_names(), ["d"]);
    d.ok("d");
    assert_eq!(d.m.state(), RunState::Succeeded);
}

#[test]
fn retries_then_exhaustion() {
    let mut d =
        Driver::new("name: r\ntasks:\n- {name: a, plugin: p, retries: 1}\n- {name: b, plugin: p, depends_on: [a]}\n");
    d.fail("a", true);
    assert_eq!(d.state("a"), TaskState::RetryWait);
    assert_eq!(d.retries, vec![0]);
    let a = d.idx("a");
    d.feed(Input::RetryDue { task: a });
    d.fail("a", true);
    assert_eq!(d.state("a"), TaskState::Failed);
    assert_eq!(d.state("b"), TaskState::UpstreamFailed);
    assert_eq!(d.m.state(), RunState::Failed);
}

#[test]
fn fatal_is_not_retried_and_lost_is_not_charged() {
    let mut d = Driver::new("name: r\ntasks:\n- {name: a, plugin: p, retries: 3}\n");
    let a = d.idx("a");
    let attempt = d.start("a");
    d.feed(Input::AttemptFailed {
        task: a,
        attempt,
        class: FailureClass { retryable: true, charged: false, lost: true },
    });
    assert_eq!(d.state("a"), TaskState::Queued);
    assert_eq!(d.m.task(a).failures, 0);
    d.fail("a", false);
    assert_eq!(d.state("a"), TaskState::Failed);
    assert_eq!(d.m.task(a).attempts, 2);
}

#[test]
fn trigger_rules() {
    let yaml = "name: t\ntasks:\n- {name: ok, plugin: p}\n- {name: bad, plugin: p}\n\
                - {name: all_success, plugin: p, depends_on: [ok, bad]}\n\
                - {name: all_done, plugin: p, depends_on: [ok, bad], trigger_rule: all_done}\n\
                - {name: one_failed, plugin: p, depends_on: [ok, bad], trigger_rule: one_failed}\n\
                - {name: none_failed, plugin: p, depends_on: [ok, bad], trigger_rule: none_failed}\n\
                - {name: after_skip, plugin: p, depends_on: [skipper]}\n\
                - {name: skipper, plugin: p, depends_on: [ok], trigger_rule: one_failed}\n\
                - {name: tolerant, plugin: p, depends_on: [skipper], trigger_rule: none_failed}\n";
    let mut d = Driver::new(yaml);
    d.ok("ok");
    assert_eq!(d.state("skipper"), TaskState::Skipped);
    assert_eq!(d.state("after_skip"), TaskState::Skipped);
    assert_eq!(d.state("tolerant"), TaskState::Queued);
    d.fail("bad", false);
    assert_eq!(d.state("all_success"), TaskState::UpstreamFailed);
    assert_eq!(d.state("all_done"), TaskState::Queued);
    assert_eq!(d.state("one_failed"), TaskState::Queued);
    assert_eq!(d.state("none_failed"), TaskState::UpstreamFailed);
}

#[test]
fn one_failed_fires_before_the_others_finish() {
    let yaml = "name: t\ntasks:\n- {name: slow, plugin: p}\n- {name: bad, plugin: p}\n\
                - {name: alert, plugin: p, depends_on: [slow, bad], trigger_rule: one_failed}\n";
    let mut d = Driver::new(yaml);
    d.fail("bad", false);
    assert_eq!(d.state("alert"), TaskState::Queued);
}

#[test]
fn pause_holds_dispatch_and_resume_releases() {
    let mut d = Driver::new(DIAMOND);
    let attempt = d.start("a");
    d.feed(Input::Pause);
    let a = d.idx("a");
    d.feed(Input::AttemptSucceeded { task: a, attempt });
    assert_eq!(d.state("b"), TaskState::Queued);
    assert!(d.ready.is_empty(), "nothing dispatched while paused");
    assert!(d.m.start_attempt(d.idx("b")).is_err());
    d.feed(Input::Resume);
    assert_eq!(d.ready_names(), ["b", "c"]);
}

#[test]
fn kill_cancels_running_and_stale_results_are_rejected() {
    let mut d = Driver::new(DIAMOND);
    let attempt = d.start("a");
    d.feed(Input::Kill);
    assert_eq!(d.cancelled, vec![0]);
    assert_eq!(d.m.state(), RunState::Killed);
    assert!(d.m.tasks().iter().all(|t| t.state == TaskState::Killed));
    let late = d.m.apply(Input::AttemptSucceeded { task: 0, attempt }, 0);
    assert!(matches!(late, Err(Rejected::Stale(_))));
    assert!(matches!(d.m.apply(Input::Kill, 0), Err(Rejected::NotAllowed(_))));
}

#[test]
fn rerun_from_failed_reruns_exactly_the_failed_part() {
    let yaml = "name: t\ntasks:\n- {name: a, plugin: p}\n- {name: b, plugin: p, depends_on: [a]}\n\
                - {name: c, plugin: p, depends_on: [b]}\n- {name: x, plugin: p, depends_on: [a]}\n";
    let mut d = Driver::new(yaml);
    d.ok("a");
    d.ok("x");
    d.fail("b", false);
    assert_eq!(d.state("c"), TaskState::UpstreamFailed);
    assert_eq!(d.m.state(), RunState::Failed);
    d.ready.clear();
    d.feed(Input::RerunFailed);
    // Back in the queue: nothing goes before it is admitted again.
    assert_eq!(d.m.state(), RunState::Queued);
    assert_eq!(d.state("b"), TaskState::Queued);
    assert_eq!(d.ready_names(), Vec::<String>::new());
    d.feed(Input::Start);
    assert_eq!(d.m.state(), RunState::Running);
    assert_eq!(d.ready_names(), ["b"]);
    assert_eq!(d.state("a"), TaskState::Succeeded);
    assert_eq!(d.state("x"), TaskState::Succeeded);
    assert_eq!(d.state("c"), TaskState::Pending);
    d.ok("b");
    d.ok("c");
    assert_eq!(d.m.state(), RunState::Succeeded);
    assert_eq!(d.m.task(d.idx("b")).attempts, 2);
}

#[test]
fn rerun_one_task_with_and_without_downstream() {
    let yaml = "name: t\ntasks:\n- {name: a, plugin: p}\n- {name: b, plugin: p, depends_on: [a]}\n";
    let mut d = Driver::new(yaml);
    d.ok("a");
    d.ok("b");
    let a = d.idx("a");
    d.feed(Input::RerunTask { task: a, downstream: false });
    assert_eq!(d.m.state(), RunState::Queued);
    d.feed(Input::Start);
    assert_eq!(d.state("b"), TaskState::Succeeded);
    d.ok("a");
    assert_eq!(d.m.state(), RunState::Succeeded);
    assert_eq!(d.ready_names(), Vec::<String>::new(), "b was not rerun");
    d.feed(Input::RerunTask { task: a, downstream: true });
    d.feed(Input::Start);
    assert_eq!(d.state("b"), TaskState::Pending);
    d.ok("a");
    d.ok("b");
    assert_eq!(d.m.task(d.idx("b")).attempts, 2);
    assert_eq!(d.m.state(), RunState::Succeeded);
}

#[test]
fn force_success_lets_downstream_proceed() {
    let yaml = "name: t\ntasks:\n- {name: a, plugin: p}\n- {name: b, plugin: p, depends_on: [a]}\n\
                - {name: c, plugin: p, depends_on: [b]}\n";
    let mut d = Driver::new(yaml);
    d.fail("a", false);
    assert_eq!(d.m.state(), RunState::Failed);
    let a = d.idx("a");
    d.feed(Input::ForceSuccess { task: a });
    assert!(d.m.task(a).forced);
    assert_eq!(d.m.state(), RunState::Queued, "it has tasks to run again: it waits for admission");
    assert_eq!(d.ready_names(), Vec::<String>::new());
    d.feed(Input::Start);
    assert_eq!(d.m.state(), RunState::Running);
    assert_eq!(d.ready_names(), ["b"]);
    assert_eq!(d.state("c"), TaskState::Pending);
    d.ok("b");
    d.ok("c");
    assert_eq!(d.m.state(), RunState::Succeeded);
}

#[test]
fn a_rerun_with_nothing_left_to_run_ends_without_admission() {
    // Forcing the last task's success leaves nothing to run.
    let yaml = "name: t\ntasks:\n- {name: a, plugin: p}\n- {name: b, plugin: p, depends_on: [a]}\n";
    let mut d = Driver::new(yaml);
    d.ok("a");
    d.fail("b", false);
    let b = d.idx("b");
    let actions = d.m.apply(Input::ForceSuccess { task: b }, 0).unwrap();
    assert_eq!(d.m.state(), RunState::Succeeded);
    assert!(!actions.iter().any(|a| matches!(a, Action::RunChanged { to: RunState::Queued, .. })));
    // Rerunning a disabled task skips it at once: the run ends where it is.
    let yaml = "name: t\ntasks:\n- {name: a, plugin: p}\n- {name: b, plugin: p, depends_on: [a], enabled: false}\n";
    let mut d = Driver::new(yaml);
    d.ok("a");
    assert_eq!(d.m.state(), RunState::Succeeded);
    d.feed(Input::RerunTask { task: d.idx("b"), downstream: false });
    assert_eq!(d.state("b"), TaskState::Skipped);
    assert_eq!(d.m.state(), RunState::Succeeded);
}

#[test]
fn restore_continues_where_it_stopped() {
    let wf = workflow(DIAMOND);
    let tasks = vec![
        TaskProgress::new(TaskState::Succeeded, 1, 0, false),
        TaskProgress::new(TaskState::Running, 1, 0, false),
        TaskProgress::new(TaskState::Queued, 0, 0, false),
        TaskProgress::new(TaskState::Pending, 0, 0, false),
    ];
    let (mut m, actions) = RunMachine::restore(wf, RunState::Running, tasks);
    assert_eq!(actions, vec![Action::Dispatch { task: 2 }]);
    assert_eq!(m.running(), 1);
    let lost = FailureClass { retryable: true, charged: false, lost: true };
    let actions = m.apply(Input::AttemptFailed { task: 1, attempt: 1, class: lost }, 0).unwrap();
    assert!(actions.contains(&Action::Dispatch { task: 1 }));
}

#[test]
fn a_task_lost_with_its_node_too_often_fails_instead_of_going_again() {
    let wf = workflow("name: t\ntasks:\n- {name: a, plugin: p, retries: 5}\n");
    let mut m = RunMachine::new(wf).with_max_lost(2);
    m.apply(Input::Start, 0).unwrap();
    let lost = FailureClass { retryable: true, charged: false, lost: true };
    for round in 1..=2 {
        let (attempt, _) = m.start_attempt(0).unwrap();
        let actions = m.apply(Input::AttemptFailed { task: 0, attempt, class: lost }, 0).unwrap();
        assert!(actions.contains(&Action::Dispatch { task: 0 }), "loss {round} goes again");
        assert_eq!(m.task(0).lost, round);
        assert_eq!(m.task(0).failures, 0, "not charged");
    }
    // A dispatch that never reached a worker is not a loss.
    let (attempt, _) = m.start_attempt(0).unwrap();
    let undelivered = FailureClass { retryable: true, charged: false, lost: false };
    m.apply(Input::AttemptFailed { task: 0, attempt, class: undelivered }, 0).unwrap();
    assert_eq!(m.task(0).lost, 2);
    let (attempt, _) = m.start_attempt(0).unwrap();
    m.apply(Input::AttemptFailed { task: 0, attempt, class: lost }, 0).unwrap();
    assert_eq!(m.task(0).state, TaskState::Failed, "the third loss is past the limit of 2");
    assert_eq!(m.state(), RunState::Failed);
    // A rerun starts counting again.
    m.apply(Input::RerunFailed, 0).unwrap();
    assert_eq!(m.task(0).lost, 0);
}

#[test]
fn long_chain_of_upstream_failures_does_not_recurse() {
    let mut yaml = String::from("name: c\ntasks:\n- {name: t0, plugin: p}\n");
    for i in 1..5000 {
        yaml.push_str(&format!("- {{name: t{i}, plugin: p, depends_on: [t{}]}}\n", i - 1));
    }
    let mut d = Driver::new(&yaml);
    d.fail("t0", false);
    assert_eq!(d.state("t4999"), TaskState::UpstreamFailed);
    assert_eq!(d.m.state(), RunState::Failed);
}
