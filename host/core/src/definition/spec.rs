//! The definition as people write it: the YAML/JSON shape, its serde and
//! its JSON Schema.

use super::*;
/// A workflow as written by people (the versioned, published schema).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowSpec {
    /// Unique within a tenant: 1 to 128 letters, digits, `-`, `_` and `.`,
    /// not only dots.
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.-]*[A-Za-z0-9_-][A-Za-z0-9_.-]*$"), length(min = 1, max = 128))]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Workflow params and their defaults; a trigger may override them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, Value>,
    #[schemars(length(min = 1))]
    pub tasks: Vec<TaskSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleSpec>,
    /// Runs of this workflow that may be active at once; more wait, queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_active_runs: Option<u32>,
    /// Tasks of this workflow that may run at once, over all its runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Instances of other workflows each run of this one waits for before
    /// it starts (the outer DAG): same cycle, an offset, every cycle of a
    /// period.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream: Vec<UpstreamSpec>,
    /// A run whose upstream instance failed keeps waiting (`wait`, the
    /// default: a rerun or a forced success upstream releases it) or fails
    /// (`fail`).
    #[serde(default, skip_serializing_if = "UpstreamFailure::is_default")]
    pub on_upstream_failure: UpstreamFailure,
    /// A failed task lets the other branches go on (`continue`, the
    /// default) or stops the run (`stop`: nothing new starts, running
    /// attempts are cancelled).
    #[serde(default, skip_serializing_if = "FailureStrategy::is_default")]
    pub on_failure: FailureStrategy,
    /// A run still unfinished this long after it started fails (its
    /// running attempts are cancelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
    /// Each run's deadline (`finish_by: "06:00"` with an optional
    /// `timezone`, or `within: 2h` of its cycle): a run unfinished by then
    /// raises a `run.sla_missed` event, for alert rules. It goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla: Option<crate::sla::SlaSpec>,
    /// 0 (the default) to 3: when ready tasks outnumber free worker slots,
    /// higher grades go first within a tenant (lower ones age up so they
    /// never starve). Plugins see it (`host.grade()`).
    #[serde(default, skip_serializing_if = "is_zero_u8")]
    #[schemars(range(max = 3))]
    pub grade: u8,
}

/// One task of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// Unique within the workflow; the same rule as the workflow's name.
    #[schemars(regex(pattern = r"^[A-Za-z0-9_.-]*[A-Za-z0-9_-][A-Za-z0-9_.-]*$"), length(min = 1, max = 128))]
    pub name: String,
    /// `name@version`, or `name` for the latest version. A task has exactly
    /// one of `plugin`, `workflow` and `switch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    /// Runs this workflow (of the same tenant) as a child run with `params`
    /// as its param overrides; the task ends as the child run does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// Picks which of the tasks that depend on this one run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch: Option<SwitchSpec>,
    /// A condition (`{{ … }}` template): false, null, 0, "", [] or {} skip
    /// the task (and what needs it, by trigger rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// `false` skips the task.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub enabled: bool,
    /// Instances of other workflows (or one task of them) this task waits
    /// for before it starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream: Vec<UpstreamSpec>,
    /// Makes the task a sensor: its plugin checks a condition and answers
    /// `{"ready": false}` until it holds; it is checked again every
    /// `interval` (holding no worker slot in between) until `timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensor: Option<SensorSpec>,
    /// The task's params; strings may contain `{{ … }}` templates.
    #[serde(default = "empty_object", skip_serializing_if = "is_empty_object")]
    pub params: Value,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// Extra attempts after a retryable failure.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_backoff: Option<BackoffSpec>,
    /// Deadline of each attempt, e.g. `30s`, `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
    /// An attempt still running this long raises a `task.timeout_warn`
    /// event (for alert rules) and goes on; shorter than `timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_warn: Option<HumanDuration>,
    /// Higher runs first when workers are short.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub priority: i32,
    #[serde(default, skip_serializing_if = "TriggerRule::is_default")]
    pub trigger_rule: TriggerRule,
    /// Hosts this task may reach over HTTP, e.g. `api.example.org:443`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
    /// Linear-memory cap of each attempt, e.g. `256MiB`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<HumanBytes>,
    /// Run only on workers of this group (their `group` label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_group: Option<String>,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

fn is_empty_object(v: &Value) -> bool {
    v.as_object().is_some_and(|o| o.is_empty())
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_i32(n: &i32) -> bool {
    *n == 0
}

fn is_zero_u8(n: &u8) -> bool {
    *n == 0
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// When a task may start, given how its upstream tasks ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TriggerRule {
    /// Every upstream task succeeded. A failure upstream makes this task
    /// `upstream_failed`; a skip upstream makes it `skipped`.
    #[default]
    AllSuccess,
    /// Every upstream task finished, however.
    AllDone,
    /// At least one upstream task failed (runs as soon as one does);
    /// skipped if all finished without a failure.
    OneFailed,
    /// No upstream task failed (skipped ones are fine).
    NoneFailed,
}

impl TriggerRule {
    fn is_default(&self) -> bool {
        *self == TriggerRule::AllSuccess
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TriggerRule::AllSuccess => "all_success",
            TriggerRule::AllDone => "all_done",
            TriggerRule::OneFailed => "one_failed",
            TriggerRule::NoneFailed => "none_failed",
        }
    }
}

/// How long to wait before a retry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackoffSpec {
    #[serde(default)]
    pub kind: BackoffKind,
    /// The first delay (`fixed`: every delay).
    pub delay: HumanDuration,
    /// The longest delay (`exponential` only). Default 1h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<HumanDuration>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackoffKind {
    Fixed,
    #[default]
    Exponential,
}

/// A cron schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// 5 fields (minute hour day-of-month month day-of-week) or 6 (with
    /// seconds first); `@daily`-style aliases too.
    pub cron: String,
    /// An IANA time zone, e.g. `Europe/Berlin`. Default UTC.
    #[serde(default = "utc", skip_serializing_if = "is_utc")]
    pub timezone: String,
    /// No run before this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// No run after this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    /// Create the runs missed while dagr was down (or since `start`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub catch_up: bool,
}

fn utc() -> String {
    "UTC".into()
}

fn is_utc(tz: &String) -> bool {
    tz == "UTC"
}

/// A duration written as `30s`, `5m`, `1h30m`, or a number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&units::format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Seconds(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Seconds(s) => Ok(HumanDuration(Duration::from_secs(s))),
            Raw::Text(t) => units::parse_duration(&t).map(HumanDuration).map_err(serde::de::Error::custom),
        }
    }
}

impl schemars::JsonSchema for HumanDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A duration: `30s`, `5m`, `1h30m`, `250ms`, or a number of seconds.",
            "anyOf": [
                {"type": "string", "pattern": "^\\s*([0-9.]+\\s*(ms|s|secs?|m|mins?|h|hrs?|d|days?)?\\s*)+$"},
                {"type": "integer", "minimum": 0}
            ]
        })
    }
}

/// A size written as `64MiB`, `1GiB`, or a number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanBytes(pub u64);

impl Serialize for HumanBytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let b = self.0;
        if b != 0 && b.is_multiple_of(1 << 30) {
            s.serialize_str(&format!("{}GiB", b >> 30))
        } else if b != 0 && b.is_multiple_of(1 << 20) {
            s.serialize_str(&format!("{}MiB", b >> 20))
        } else if b != 0 && b.is_multiple_of(1 << 10) {
            s.serialize_str(&format!("{}KiB", b >> 10))
        } else {
            s.serialize_u64(b)
        }
    }
}

impl<'de> Deserialize<'de> for HumanBytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bytes(b) => Ok(HumanBytes(b)),
            Raw::Text(t) => units::parse_bytes(&t).map(HumanBytes).map_err(serde::de::Error::custom),
        }
    }
}

impl schemars::JsonSchema for HumanBytes {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Size".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A size: `64MiB`, `1GiB`, `512KiB`, `10MB` (units B, KiB, MiB, GiB, KB, MB, GB), or a number of bytes.",
            "anyOf": [
                {"type": "string", "pattern": "^\\s*[0-9.]+\\s*([kKmMgG]([iI]?[bB])?|[bB])?\\s*$"},
                {"type": "integer", "minimum": 0}
            ]
        })
    }
}

/// The published JSON Schema of workflow definitions (YAML or JSON), for
/// editors; `docs/workflow.schema.json` is this, checked by a test. The
/// schema checks the shape; dagr's validation checks the rest (names,
/// dependencies, cycles, plugins, cron expressions, templates).
pub fn json_schema() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(WorkflowSpec)).unwrap_or(Value::Null);
    if let Value::Object(map) = &mut schema {
        map.insert("$id".into(), Value::String("https://dagr.dev/schemas/workflow.schema.json".into()));
        map.insert("title".into(), Value::String("dagr workflow".into()));
    }
    schema
}
