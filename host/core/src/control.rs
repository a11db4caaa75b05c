//! Control nodes and policies: what a workflow does besides running plugin
//! tasks in dependency order.
//!
//! - A task runs a plugin, or another workflow ([`TaskKind::Workflow`], a
//!   run of its own linked to this one), or is a switch
//!   ([`TaskKind::Switch`]) that picks which of its downstream branches run.
//! - `when:` (a template) skips a task whose condition is false; `enabled:
//!   false` skips it always; skips propagate by trigger rules.
//! - A sensor ([`Sensor`]) is a plugin task re-checked on a timer until its
//!   plugin answers ready, without holding a worker slot in between.
//! - A run's [`FailureStrategy`] and what it does when an upstream instance
//!   fails ([`UpstreamFailure`]).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::definition::HumanDuration;
use crate::template::Template;

/// A switch, as written: the value to look at, and which downstream tasks
/// run for which value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SwitchSpec {
    /// A template whose value picks the case, e.g. `{{ inputs.detect.kind }}`.
    pub on: String,
    /// Value → the tasks that run for it (each must depend on the switch).
    pub cases: BTreeMap<String, Vec<String>>,
    /// The tasks that run when no case matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default: Vec<String>,
}

/// A sensor, as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SensorSpec {
    /// Time between two checks.
    pub interval: HumanDuration,
    /// How long to keep checking before the task fails.
    pub timeout: HumanDuration,
}

/// What a failed task does to its run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureStrategy {
    /// The other branches go on; the run fails at the end.
    #[default]
    Continue,
    /// Nothing new starts, running attempts are cancelled, the run fails.
    Stop,
}

impl FailureStrategy {
    pub fn is_default(&self) -> bool {
        *self == FailureStrategy::Continue
    }
}

/// What a run waiting on upstream instances does when one of them failed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamFailure {
    /// Keep waiting: a rerun or a forced success upstream releases it.
    #[default]
    Wait,
    /// Fail the run, naming the upstream instance.
    Fail,
}

impl UpstreamFailure {
    pub fn is_default(&self) -> bool {
        *self == UpstreamFailure::Wait
    }
}

/// What a task is.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskKind {
    /// Runs its plugin on a worker.
    Plugin,
    /// Runs this workflow (of the same tenant) as a child run; the task
    /// ends as the child does. Its params are the child's param overrides.
    Workflow { name: String },
    /// Picks branches; needs no worker.
    /// Boxed: most tasks are plugin tasks, and a switch is ~7 words.
    Switch(Box<Switch>),
}

/// A validated switch.
#[derive(Debug, Clone, PartialEq)]
pub struct Switch {
    pub on: Template,
    /// Value → task indexes.
    pub cases: BTreeMap<String, Vec<usize>>,
    pub default: Vec<usize>,
}

impl Switch {
    /// Every task some case (or the default) names.
    pub fn branches(&self) -> Vec<usize> {
        let mut all: Vec<usize> = self.cases.values().flatten().chain(&self.default).copied().collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// The branch tasks that do not run when the switch's value is `value`.
    pub fn not_chosen(&self, value: &Value) -> Vec<usize> {
        let key = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let chosen = self.cases.get(&key).unwrap_or(&self.default);
        self.branches().into_iter().filter(|t| !chosen.contains(t)).collect()
    }
}

/// A validated sensor: checked every `interval`, at most `max_checks`
/// times (its timeout divided by its interval, at least once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sensor {
    pub interval: Duration,
    pub timeout: Duration,
    pub max_checks: u32,
}

impl Sensor {
    pub fn new(spec: &SensorSpec) -> Result<Sensor, (String, String)> {
        let (interval, timeout) = (spec.interval.0, spec.timeout.0);
        if interval < Duration::from_secs(1) {
            return Err(("interval".into(), "must be at least 1s".into()));
        }
        if timeout < interval {
            return Err(("timeout".into(), "must not be shorter than the interval".into()));
        }
        let checks = (timeout.as_millis() / interval.as_millis()).max(1);
        Ok(Sensor { interval, timeout, max_checks: u32::try_from(checks).unwrap_or(u32::MAX) })
    }

    /// Whether a sensor plugin's output says its condition holds: anything
    /// but an object with `"ready": false`.
    pub fn ready(output: &str) -> bool {
        match serde_json::from_str::<Value>(output) {
            Ok(Value::Object(map)) => map.get("ready") != Some(&Value::Bool(false)),
            _ => true,
        }
    }
}

/// Whether a condition's value lets its task run: false, null, 0, "",
/// "false", [] and {} do not.
pub fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty() && s != "false" && s != "0",
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Validates a switch of task `task` against the workflow's task index and
/// its tasks' dependencies; problems are located relative to `switch`.
pub(crate) fn validate_switch(
    spec: &SwitchSpec,
    task: usize,
    index: &HashMap<String, usize>,
    depends_on: &dyn Fn(usize) -> bool,
) -> Result<Switch, Vec<(String, String)>> {
    let mut problems = Vec::new();
    let mut resolve = |location: String, names: &[String]| -> Vec<usize> {
        let mut out = Vec::new();
        for (j, name) in names.iter().enumerate() {
            match index.get(name) {
                None => problems.push((format!("{location}[{j}]"), format!("unknown task `{name}`"))),
                Some(&t) if t == task => {
                    problems.push((format!("{location}[{j}]"), "a switch cannot pick itself".into()))
                }
                Some(&t) if !depends_on(t) => problems
                    .push((format!("{location}[{j}]"), format!("`{name}` must list the switch in its depends_on"))),
                Some(&t) => out.push(t),
            }
        }
        out
    };
    let mut cases = BTreeMap::new();
    for (value, names) in &spec.cases {
        let tasks = resolve(format!("cases.{value}"), names);
        cases.insert(value.clone(), tasks);
    }
    let default = resolve("default".into(), &spec.default);
    if spec.cases.is_empty() {
        problems.push(("cases".into(), "a switch needs at least one case".into()));
    }
    // `on` is parsed by the caller, which knows the template's scope.
    let on = Template::literal(Value::Null);
    if problems.is_empty() { Ok(Switch { on, cases, default }) } else { Err(problems) }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_are_truthy_like_people_expect() {
        for v in [json!(false), json!(null), json!(0), json!(""), json!("false"), json!([]), json!({})] {
            assert!(!truthy(&v), "{v}");
        }
        for v in [json!(true), json!(1), json!("yes"), json!([0]), json!({"a": 1})] {
            assert!(truthy(&v), "{v}");
        }
    }

    #[test]
    fn sensors_count_their_checks_and_read_ready() {
        let spec = SensorSpec {
            interval: HumanDuration(Duration::from_secs(30)),
            timeout: HumanDuration(Duration::from_secs(600)),
        };
        assert_eq!(Sensor::new(&spec).unwrap().max_checks, 20);
        assert!(!Sensor::ready(r#"{"ready": false, "seen": 3}"#));
        assert!(Sensor::ready(r#"{"ready": true}"#));
        assert!(Sensor::ready(r#"{"rows": 10}"#), "an output without `ready` is ready");
        let short = SensorSpec {
            interval: HumanDuration(Duration::from_millis(10)),
            timeout: HumanDuration(Duration::from_secs(1)),
        };
        assert_eq!(Sensor::new(&short).unwrap_err().0, "interval");
    }

    #[test]
    fn a_switch_skips_the_branches_it_does_not_pick() {
        let switch = Switch {
            on: Template::literal(json!("x")),
            cases: BTreeMap::from([("csv".into(), vec![1]), ("json".into(), vec![2, 3])]),
            default: vec![4],
        };
        assert_eq!(switch.not_chosen(&json!("csv")), vec![2, 3, 4]);
        assert_eq!(switch.not_chosen(&json!("json")), vec![1, 4]);
        assert_eq!(switch.not_chosen(&json!("other")), vec![1, 2, 3], "the default runs");
        assert_eq!(switch.not_chosen(&json!(7)), vec![1, 2, 3]);
    }
}
