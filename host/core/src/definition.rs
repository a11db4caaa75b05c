//! Workflow definitions: the YAML/JSON schema people write, and its
//! validation into the [`Workflow`] model the engine runs.
//!
//! Parsing is strict (`deny_unknown_fields`) and every problem is reported
//! with the location it was found at, e.g.
//! `tasks[3].depends_on[0]: unknown task "lod"`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::control::{
    FailureStrategy, Sensor, SensorSpec, Switch, SwitchSpec, TaskKind, UpstreamFailure, validate_switch,
};
use crate::document::{self, DocumentError, DocumentLimits};
use crate::outer::{Edge, Upstream, UpstreamSpec};
use crate::schedule::Schedule;
use crate::template::{Template, TemplateScope};
use crate::units;

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

/// One problem in a definition: where, and what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issue {
    /// A path into the document, e.g. `tasks[3].depends_on[0]`; empty for
    /// the document as a whole.
    pub location: String,
    pub message: String,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.location.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.location, self.message)
        }
    }
}

/// Every problem found in a definition; never empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Invalid {
    pub issues: Vec<Issue>,
}

impl Invalid {
    fn one(location: impl Into<String>, message: impl Into<String>) -> Self {
        Invalid { issues: vec![Issue { location: location.into(), message: message.into() }] }
    }

    /// The first problem (the one to show when there is room for only one).
    pub fn first(&self) -> &Issue {
        &self.issues[0]
    }
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, issue) in self.issues.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{issue}")?;
        }
        Ok(())
    }
}

/// The format of a definition document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

impl Format {
    /// JSON if the text starts like a JSON object, else YAML.
    pub fn guess(text: &str) -> Format {
        if text.trim_start().starts_with('{') { Format::Json } else { Format::Yaml }
    }
}

/// Why a tenant's definition was refused: over a limit, or invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefinitionError {
    #[error(transparent)]
    Limit(#[from] DocumentError),
    #[error(transparent)]
    Invalid(#[from] Invalid),
}

impl WorkflowSpec {
    /// Parses a YAML or JSON document. Unknown fields and wrong types are
    /// reported with their path (and, for YAML, line and column).
    pub fn parse(text: &str, format: Format) -> Result<WorkflowSpec, Invalid> {
        match format {
            Format::Json => {
                let mut de = serde_json::Deserializer::from_str(text);
                serde_path_to_error::deserialize(&mut de).map_err(|e| path_error(e.path().to_string(), e.inner()))
            }
            Format::Yaml => {
                let de = serde_yaml::Deserializer::from_str(text);
                serde_path_to_error::deserialize(de).map_err(|e| path_error(e.path().to_string(), e.inner()))
            }
        }
    }

    /// Parses YAML (a superset of JSON, so JSON documents parse too).
    pub fn parse_any(text: &str) -> Result<WorkflowSpec, Invalid> {
        Self::parse(text, Format::guess(text))
    }

    /// Parses a tenant's document (`format: None`: JSON if it looks like
    /// it, else YAML), checking it against `limits` first: a document that
    /// nests too deeply, or whose aliases expand past the size limit, is
    /// refused before a parser recurses into it or expands it.
    pub fn parse_limited(
        text: &str,
        format: Option<Format>,
        limits: &DocumentLimits,
    ) -> Result<WorkflowSpec, DefinitionError> {
        let format = format.unwrap_or_else(|| Format::guess(text));
        match format {
            Format::Json => document::check_json(text.as_bytes(), limits)?,
            Format::Yaml => document::check_yaml(text, limits)?,
        }
        Ok(Self::parse(text, format)?)
    }

    /// The canonical JSON of this spec (sorted keys, defaults omitted):
    /// what is stored, and what identifies a version.
    pub fn canonical_json(&self) -> String {
        // `Value`'s map is ordered, so going through it sorts the keys.
        match serde_json::to_value(self) {
            Ok(value) => value.to_string(),
            Err(_) => unreachable!("a WorkflowSpec always serializes"),
        }
    }

    /// sha256 of the canonical JSON: equal for definitions that mean the same.
    pub fn content_hash(&self) -> String {
        hex::encode(Sha256::digest(self.canonical_json().as_bytes()))
    }
}

fn path_error(path: String, error: &dyn fmt::Display) -> Invalid {
    // serde_path_to_error writes `?` for a segment it could not name (a
    // syntax error inside a mapping): the location stops where it is known.
    let mut location = path.as_str();
    while let Some(known) = location.strip_suffix(".?") {
        location = known;
    }
    let location = if matches!(location, "." | "?") { String::new() } else { location.to_owned() };
    // serde_yaml starts its messages with its own idea of the path; the
    // location already says where, so say it once.
    let mut message = error.to_string();
    if let Some((prefix, rest)) = message.split_once(": ")
        && !prefix.is_empty()
        && (location == prefix
            || location.starts_with(&format!("{prefix}."))
            || location.starts_with(&format!("{prefix}[")))
    {
        message = rest.to_owned();
    }
    Invalid::one(location, message)
}

/// A plugin as the validator needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedPlugin {
    pub name: String,
    pub version: String,
    pub params_schema: Option<Value>,
}

/// Looks plugins up while validating. Implemented by the registry.
pub trait PluginCatalog {
    /// `version: None` means the latest. The error says what is missing.
    fn resolve(&self, name: &str, version: Option<&str>) -> Result<ResolvedPlugin, String>;
}

/// What a task refers to: a plugin name, and a version or "the latest".
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PluginRef {
    pub name: String,
    pub version: Option<String>,
}

impl PluginRef {
    pub fn parse(text: &str) -> Result<PluginRef, String> {
        let (name, version) = match text.split_once('@') {
            Some((n, v)) => (n, Some(v)),
            None => (text, None),
        };
        if !valid_plugin_name(name) {
            return Err(format!(
                "`{text}` is not a plugin reference: expected `name` or `name@version` with a lowercase name"
            ));
        }
        if let Some(v) = version
            && (v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')))
        {
            return Err(format!("`{text}`: bad version `{v}`"));
        }
        Ok(PluginRef { name: name.to_owned(), version: version.map(str::to_owned) })
    }
}

impl fmt::Display for PluginRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.version {
            Some(v) => write!(f, "{}@{v}", self.name),
            None => write!(f, "{}", self.name),
        }
    }
}

fn valid_plugin_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// What [`valid_name`] allows, as its errors say it.
pub const NAME_RULE: &str = "use 1 to 128 letters, digits, `-`, `_` or `.` (not only dots)";

/// A valid name for workflows, tasks, params and worker groups (the rule
/// the schema's `pattern` and [`NAME_RULE`] state).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        // `.` and `..` would vanish from URL paths.
        && name.chars().any(|c| c != '.')
}

/// How long to wait before retry number `failures` (1 = first retry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub kind: BackoffKind,
    pub delay: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { kind: BackoffKind::Exponential, delay: Duration::from_secs(1), max: Duration::from_secs(300) }
    }
}

impl Backoff {
    pub fn delay_for(&self, failures: u32) -> Duration {
        match self.kind {
            BackoffKind::Fixed => self.delay,
            BackoffKind::Exponential => {
                let exp = failures.saturating_sub(1).min(32);
                self.delay.saturating_mul(1u32 << exp.min(31)).min(self.max)
            }
        }
    }
}

/// A validated task, with its dependencies as indices.
#[derive(Debug, Clone)]
pub struct Task {
    pub name: String,
    pub plugin: PluginRef,
    pub params: Template,
    pub deps: Vec<usize>,
    pub dependents: Vec<usize>,
    pub retries: u32,
    pub backoff: Backoff,
    pub timeout: Option<Duration>,
    pub timeout_warn: Option<Duration>,
    pub priority: i32,
    pub trigger_rule: TriggerRule,
    pub allow_hosts: Vec<String>,
    pub memory: Option<u64>,
    pub worker_group: Option<String>,
    /// A plugin task, a child workflow or a switch. For the latter two
    /// `plugin` is empty.
    pub kind: TaskKind,
    /// The condition that must hold for the task to run (boxed, like the
    /// sensor: few tasks have one, and every task would pay for it).
    pub when: Option<Box<Template>>,
    pub enabled: bool,
    /// Instances of other workflows the task waits for.
    pub upstream: Vec<Upstream>,
    pub sensor: Option<Box<Sensor>>,
}

/// A validated workflow, ready to run. Built only by [`Workflow::validate`].
#[derive(Debug, Clone)]
pub struct Workflow {
    /// The definition's settings. Its `tasks` are empty: the validated
    /// tasks are [`Workflow::tasks`] (and what is stored is the
    /// definition's canonical JSON, taken before validation).
    pub spec: WorkflowSpec,
    pub tasks: Vec<Task>,
    pub schedule: Option<Schedule>,
    /// Instances of other workflows each run waits for.
    pub upstream: Vec<Upstream>,
    /// A run still unfinished this long after it started fails.
    pub timeout: Option<Duration>,
    /// Each run's deadline.
    pub sla: Option<crate::sla::Sla>,
    index: HashMap<String, usize>,
}

impl Workflow {
    pub fn task_index(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The workflows this one needs, as edges of the workflow graph (its
    /// upstream dependencies, its tasks' and its child workflows), for the
    /// loop check at apply time and for lineage.
    pub fn edges(&self) -> Vec<Edge> {
        let from = self.name().to_owned();
        let mut edges: Vec<Edge> = self
            .upstream
            .iter()
            .chain(self.tasks.iter().flat_map(|t| &t.upstream))
            .map(|u| Edge { from: from.clone(), to: u.workflow.clone(), past: u.strictly_past() })
            .collect();
        for task in &self.tasks {
            if let TaskKind::Workflow { name } = &task.kind {
                edges.push(Edge { from: from.clone(), to: name.clone(), past: false });
            }
        }
        edges.sort();
        edges.dedup();
        edges
    }

    /// Whether a run of this workflow starts by waiting on upstream instances.
    pub fn waits_upstream(&self) -> bool {
        !self.upstream.is_empty()
    }

    /// Tasks with no dependencies.
    pub fn roots(&self) -> impl Iterator<Item = usize> + '_ {
        self.tasks.iter().enumerate().filter(|(_, t)| t.deps.is_empty()).map(|(i, _)| i)
    }

    /// Checks a spec, resolving plugins through `catalog`. All problems are
    /// collected, not just the first.
    pub fn validate(spec: WorkflowSpec, catalog: &dyn PluginCatalog) -> Result<Workflow, Invalid> {
        let mut issues = Vec::new();
        let mut push = |location: String, message: String| issues.push(Issue { location, message });

        if !valid_name(&spec.name) {
            push("name".into(), format!("`{}` is not a valid name: {NAME_RULE}", spec.name));
        }
        if spec.tasks.is_empty() {
            push("tasks".into(), "a workflow needs at least one task".into());
        }
        if spec.max_active_runs == Some(0) {
            push("max_active_runs".into(), "must be at least 1".into());
        }
        if spec.concurrency == Some(0) {
            push("concurrency".into(), "must be at least 1".into());
        }
        for name in spec.params.keys() {
            if !valid_name(name) {
                push(format!("params.{name}"), format!("`{name}` is not a valid param name: {NAME_RULE}"));
            }
        }

        let mut index = HashMap::new();
        for (i, task) in spec.tasks.iter().enumerate() {
            if !valid_name(&task.name) {
                push(format!("tasks[{i}].name"), format!("`{}` is not a valid task name: {NAME_RULE}", task.name));
            }
            if let Some(first) = index.insert(task.name.clone(), i) {
                push(
                    format!("tasks[{i}].name"),
                    format!("duplicate task name `{}` (first used by tasks[{first}])", task.name),
                );
                index.insert(task.name.clone(), first);
            }
        }

        let mut tasks = Vec::with_capacity(spec.tasks.len());
        for (i, t) in spec.tasks.iter().enumerate() {
            let at = |field: &str| format!("tasks[{i}].{field}");
            let mut deps = Vec::new();
            let mut seen = HashSet::new();
            for (j, dep) in t.depends_on.iter().enumerate() {
                match index.get(dep) {
                    None => push(at(&format!("depends_on[{j}]")), format!("unknown task `{dep}`")),
                    Some(&d) if d == i => {
                        push(at(&format!("depends_on[{j}]")), "a task cannot depend on itself".into())
                    }
                    Some(&d) => {
                        if seen.insert(d) {
                            deps.push(d);
                        } else {
                            push(at(&format!("depends_on[{j}]")), format!("`{dep}` is listed twice"));
                        }
                    }
                }
            }
            let kinds = [t.plugin.is_some(), t.workflow.is_some(), t.switch.is_some()];
            if kinds.iter().filter(|k| **k).count() != 1 {
                push(format!("tasks[{i}]"), "a task has exactly one of `plugin`, `workflow` and `switch`".into());
            }
            let plugin = match &t.plugin {
                None => None,
                Some(text) => match PluginRef::parse(text) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        push(at("plugin"), e);
                        None
                    }
                },
            };
            let resolved = plugin.as_ref().and_then(|p| match catalog.resolve(&p.name, p.version.as_deref()) {
                Ok(r) => Some(r),
                Err(e) => {
                    push(at("plugin"), e);
                    None
                }
            });
            let dep_names: HashSet<&str> = t.depends_on.iter().map(String::as_str).collect();
            let scope = TemplateScope { params: &spec.params, upstream: &dep_names };
            let params = match Template::parse(&t.params) {
                Ok(tpl) => {
                    for problem in tpl.check(&scope) {
                        push(format!("tasks[{i}].params{}", problem.location), problem.message);
                    }
                    tpl
                }
                Err(problem) => {
                    push(format!("tasks[{i}].params{}", problem.location), problem.message);
                    Template::literal(t.params.clone())
                }
            };
            if let Some(schema) = resolved.as_ref().and_then(|r| r.params_schema.as_ref()) {
                for (location, message) in check_schema(schema, &t.params, &params) {
                    push(format!("tasks[{i}].params{location}"), message);
                }
            }
            for (j, host) in t.allow_hosts.iter().enumerate() {
                if let Some(problem) = check_host_pattern(host) {
                    push(at(&format!("allow_hosts[{j}]")), problem);
                }
            }
            let backoff = match &t.retry_backoff {
                None => Backoff::default(),
                Some(b) => {
                    let max = b.max.map(|m| m.0).unwrap_or(Duration::from_secs(3600));
                    if max < b.delay.0 {
                        push(at("retry_backoff.max"), "must not be shorter than the delay".into());
                    }
                    Backoff { kind: b.kind, delay: b.delay.0, max }
                }
            };
            if t.timeout.is_some_and(|d| d.0.is_zero()) {
                push(at("timeout"), "must be longer than zero".into());
            }
            if let Some(warn) = t.timeout_warn {
                if warn.0.is_zero() {
                    push(at("timeout_warn"), "must be longer than zero".into());
                } else if t.timeout.is_some_and(|d| warn.0 >= d.0) {
                    push(at("timeout_warn"), "must be shorter than the task's `timeout`".into());
                }
            }
            if t.worker_group.as_deref().is_some_and(|g| !valid_name(g)) {
                push(at("worker_group"), format!("not a valid worker group: {NAME_RULE}"));
            }
            if t.memory.is_some_and(|m| m.0 < (1 << 20)) {
                push(at("memory"), "must be at least 1MiB".into());
            }
            let kind = match (&t.workflow, &t.switch) {
                (Some(child), _) => {
                    if !valid_name(child) {
                        push(at("workflow"), format!("`{child}` is not a valid workflow name"));
                    }
                    TaskKind::Workflow { name: child.clone() }
                }
                (None, Some(sw)) => {
                    let depends_on = |d: usize| spec.tasks.get(d).is_some_and(|o| o.depends_on.contains(&t.name));
                    match validate_switch(sw, i, &index, &depends_on) {
                        Ok(Switch { cases, default, .. }) => {
                            let on = match Template::parse(&Value::String(sw.on.clone())) {
                                Ok(tpl) => {
                                    for problem in tpl.check(&scope) {
                                        push(at("switch.on"), problem.message);
                                    }
                                    tpl
                                }
                                Err(problem) => {
                                    push(at("switch.on"), problem.message);
                                    Template::literal(Value::Null)
                                }
                            };
                            TaskKind::Switch(Box::new(Switch { on, cases, default }))
                        }
                        Err(problems) => {
                            for (location, message) in problems {
                                push(at(&format!("switch.{location}")), message);
                            }
                            TaskKind::Plugin
                        }
                    }
                }
                (None, None) => TaskKind::Plugin,
            };
            let when = t.when.as_ref().map(|text| match Template::parse(&Value::String(text.clone())) {
                Ok(tpl) => {
                    for problem in tpl.check(&scope) {
                        push(at("when"), problem.message);
                    }
                    tpl
                }
                Err(problem) => {
                    push(at("when"), problem.message);
                    Template::literal(Value::Bool(true))
                }
            });
            let mut upstream = Vec::new();
            for (j, u) in t.upstream.iter().enumerate() {
                match Upstream::new(u) {
                    Ok(u) => upstream.push(u),
                    Err((field, message)) => push(at(&format!("upstream[{j}].{field}")), message),
                }
            }
            let sensor = match &t.sensor {
                None => None,
                Some(spec_s) => {
                    if t.plugin.is_none() {
                        push(at("sensor"), "only a plugin task can be a sensor".into());
                    }
                    match Sensor::new(spec_s) {
                        Ok(s) => Some(s),
                        Err((field, message)) => {
                            push(at(&format!("sensor.{field}")), message);
                            None
                        }
                    }
                }
            };
            tasks.push(Task {
                name: t.name.clone(),
                plugin: match resolved {
                    Some(r) => PluginRef { name: r.name, version: plugin.and_then(|p| p.version) },
                    None => plugin.unwrap_or(PluginRef { name: t.plugin.clone().unwrap_or_default(), version: None }),
                },
                params,
                deps,
                dependents: Vec::new(),
                retries: t.retries,
                backoff,
                timeout: t.timeout.map(|d| d.0),
                timeout_warn: t.timeout_warn.map(|d| d.0),
                priority: t.priority,
                trigger_rule: t.trigger_rule,
                allow_hosts: t.allow_hosts.clone(),
                memory: t.memory.map(|m| m.0),
                worker_group: t.worker_group.clone(),
                kind,
                when: when.map(Box::new),
                enabled: t.enabled,
                upstream,
                sensor: sensor.map(Box::new),
            });
        }

        if let Some(cycle) = find_cycle(&tasks) {
            let path: Vec<&str> = cycle.iter().map(|&i| tasks[i].name.as_str()).collect();
            push(format!("tasks[{}].depends_on", cycle[0]), format!("dependency cycle: {}", path.join(" -> ")));
        }

        let mut upstream = Vec::new();
        for (j, u) in spec.upstream.iter().enumerate() {
            match Upstream::new(u) {
                Ok(u) => upstream.push(u),
                Err((field, message)) => push(format!("upstream[{j}].{field}"), message),
            }
        }
        if spec.grade > 3 {
            push("grade".into(), format!("{} is not a grade: use 0 (the default) to 3", spec.grade));
        }
        if spec.timeout.is_some_and(|d| d.0.is_zero()) {
            push("timeout".into(), "must be longer than zero".into());
        }
        let schedule = match &spec.schedule {
            None => None,
            Some(s) => match Schedule::new(s) {
                Ok(schedule) => Some(schedule),
                Err(problem) => {
                    push(format!("schedule.{}", problem.location), problem.message);
                    None
                }
            },
        };

        let sla = match &spec.sla {
            None => None,
            Some(s) => match crate::sla::Sla::new(s, schedule.as_ref().map(|s| s.timezone)) {
                Ok(sla) => Some(sla),
                Err((field, message)) => {
                    push(if field.is_empty() { "sla".into() } else { format!("sla.{field}") }, message);
                    None
                }
            },
        };

        if !issues.is_empty() {
            return Err(Invalid { issues });
        }
        for i in 0..tasks.len() {
            for d in tasks[i].deps.clone() {
                tasks[d].dependents.push(i);
            }
        }
        for task in &mut tasks {
            task.dependents.shrink_to_fit();
        }
        let timeout = spec.timeout.map(|d| d.0);
        // The tasks live on validated, in `tasks`; the spec's copies would
        // more than double what a large workflow holds (a validated
        // workflow is kept for as long as its runs go on).
        let mut spec = spec;
        spec.tasks = Vec::new();
        Ok(Workflow { spec, tasks, schedule, upstream, timeout, sla, index })
    }

    /// Merges trigger-time overrides into the workflow's params. Unknown
    /// params are an error (a typo must not silently do nothing).
    pub fn resolve_params(
        &self,
        overrides: &serde_json::Map<String, Value>,
    ) -> Result<BTreeMap<String, Value>, Invalid> {
        let mut params = self.spec.params.clone();
        let mut issues = Vec::new();
        for (name, value) in overrides {
            match params.get_mut(name) {
                Some(slot) => *slot = value.clone(),
                None => issues.push(Issue {
                    location: format!("params.{name}"),
                    message: format!(
                        "unknown param `{name}`; the workflow declares: {}",
                        if self.spec.params.is_empty() {
                            "none".to_owned()
                        } else {
                            self.spec.params.keys().cloned().collect::<Vec<_>>().join(", ")
                        }
                    ),
                }),
            }
        }
        if issues.is_empty() { Ok(params) } else { Err(Invalid { issues }) }
    }
}

/// Checks literal params against the plugin's schema. Values that contain
/// templates are only known at run time, so errors inside them are not
/// reported now.
fn check_schema(schema: &Value, raw: &Value, template: &Template) -> Vec<(String, String)> {
    let validator = match jsonschema::validator_for(schema) {
        Ok(v) => v,
        Err(e) => {
            return vec![(String::new(), format!("the plugin's params schema is invalid: {e}"))];
        }
    };
    let templated = template.templated_pointers();
    validator
        .iter_errors(raw)
        .filter_map(|error| {
            let pointer = error.instance_path().as_str().to_owned();
            if templated
                .iter()
                .any(|t| pointer.starts_with(t.as_str()) || t.starts_with(&pointer) && !pointer.is_empty())
            {
                return None;
            }
            Some((pointer_to_location(&pointer), format!("does not match the plugin's schema: {error}")))
        })
        .collect()
}

/// `/a/0/b` → `.a[0].b`
pub(crate) fn pointer_to_location(pointer: &str) -> String {
    let mut out = String::new();
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if segment.parse::<usize>().is_ok() {
            out.push_str(&format!("[{segment}]"));
        } else {
            out.push('.');
            out.push_str(&segment);
        }
    }
    out
}

/// The same rules as the runtime's allowlist parser, kept here so that a
/// definition (or a tenant's limits) is rejected when it is submitted rather
/// than at run time. `None` when `host` is a valid allowlist entry.
pub fn check_host_pattern(host: &str) -> Option<String> {
    let host = host.trim();
    if host.is_empty() {
        return Some("an allowed host cannot be empty".into());
    }
    if host.contains("://") || host.contains('/') {
        return Some(format!("`{host}` must be a host name, optionally with :port, not a URL"));
    }
    let (name, port) = if host.starts_with('[') {
        match host.find(']') {
            Some(end) => (&host[1..end], host[end + 1..].strip_prefix(':')),
            None => return Some(format!("`{host}` has an unclosed `[`")),
        }
    } else if host.matches(':').count() > 1 {
        (host, None)
    } else {
        match host.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host, None),
        }
    };
    if let Some(port) = port
        && port.parse::<u16>().is_err()
    {
        return Some(format!("`{host}` has a bad port `{port}`"));
    }
    if name.parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    let name = name.strip_prefix("*.").unwrap_or(name);
    let ok = !name.is_empty()
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
    if ok { None } else { Some(format!("`{host}` is not a valid host name")) }
}

/// Whether allowlist entry `entry` is within allowlist entry `by`: the same
/// host (or an IP literal), or under `by`'s `*.` wildcard; and `by`'s port,
/// if it names one, is `entry`'s port too. Used to keep a task's
/// `allow_hosts` within its tenant's. `*` covers every entry (a tenant
/// that may reach whatever its tasks list).
pub fn host_covered(entry: &str, by: &str) -> bool {
    fn split(s: &str) -> (String, Option<&str>) {
        let s = s.trim();
        if let Some(rest) = s.strip_prefix('[')
            && let Some(end) = rest.find(']')
        {
            return (rest[..end].to_ascii_lowercase(), rest[end + 1..].strip_prefix(':'));
        }
        if s.matches(':').count() > 1 {
            return (s.to_ascii_lowercase(), None);
        }
        match s.rsplit_once(':') {
            Some((h, p)) => (h.to_ascii_lowercase(), Some(p)),
            None => (s.to_ascii_lowercase(), None),
        }
    }
    if by.trim() == "*" {
        return true;
    }
    let (host, port) = split(entry);
    let (by_host, by_port) = split(by);
    if by_port.is_some() && by_port != port {
        return false;
    }
    if host == by_host {
        return true;
    }
    match by_host.strip_prefix("*.") {
        Some(suffix) => {
            let name = host.strip_prefix("*.").unwrap_or(&host);
            name.len() > suffix.len() && name.ends_with(&format!(".{suffix}"))
        }
        None => false,
    }
}

/// Finds a dependency cycle, as a path that starts and ends at the same task.
fn find_cycle(tasks: &[Task]) -> Option<Vec<usize>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut mark = vec![Mark::New; tasks.len()];
    for start in 0..tasks.len() {
        if mark[start] != Mark::New {
            continue;
        }
        // Iterative DFS over `deps`; `path` holds (node, next dep to visit).
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        mark[start] = Mark::OnPath;
        while let Some(&mut (node, ref mut next)) = path.last_mut() {
            if let Some(&dep) = tasks[node].deps.get(*next) {
                *next += 1;
                match mark[dep] {
                    Mark::New => {
                        mark[dep] = Mark::OnPath;
                        path.push((dep, 0));
                    }
                    Mark::OnPath => {
                        // `dep` is on the path: the cycle is dep … node → dep.
                        let from = path.iter().position(|&(n, _)| n == dep).unwrap_or(0);
                        let mut cycle: Vec<usize> = path[from..].iter().map(|&(n, _)| n).collect();
                        cycle.push(dep);
                        // Print it in the direction work flows: dep before dependent.
                        cycle.reverse();
                        return Some(cycle);
                    }
                    Mark::Done => {}
                }
            } else {
                mark[node] = Mark::Done;
                path.pop();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) struct Catalog;

    impl PluginCatalog for Catalog {
        fn resolve(&self, name: &str, version: Option<&str>) -> Result<ResolvedPlugin, String> {
            match (name, version) {
                ("echo", None | Some("0.1.0")) => {
                    Ok(ResolvedPlugin { name: "echo".into(), version: "0.1.0".into(), params_schema: None })
                }
                ("sleep", _) => Ok(ResolvedPlugin {
                    name: "sleep".into(),
                    version: "0.1.0".into(),
                    params_schema: Some(serde_json::json!({
                        "type": "object", "required": ["ms"], "additionalProperties": false,
                        "properties": {"ms": {"type": "integer"}}
                    })),
                }),
                (n, Some(v)) => Err(format!("plugin `{n}` has no version {v}")),
                (n, None) => Err(format!("unknown plugin `{n}`")),
            }
        }
    }

    fn validate(yaml: &str) -> Result<Workflow, Invalid> {
        Workflow::validate(WorkflowSpec::parse(yaml, Format::Yaml)?, &Catalog)
    }

    fn first(yaml: &str) -> String {
        validate(yaml).err().map(|e| e.first().to_string()).unwrap_or_default()
    }

    #[test]
    fn a_diamond_validates() {
        let wf = validate(
            "name: d\ntasks:\n- {name: a, plugin: echo}\n- {name: b, plugin: echo, depends_on: [a]}\n\
             - {name: c, plugin: echo, depends_on: [a]}\n- {name: d, plugin: echo, depends_on: [b, c]}\n",
        )
        .unwrap();
        assert_eq!(wf.tasks[3].deps, vec![1, 2]);
        assert_eq!(wf.tasks[0].dependents, vec![1, 2]);
        assert_eq!(wf.roots().collect::<Vec<_>>(), vec![0]);
        // The tasks are kept once, validated; the spec keeps the rest.
        assert!(wf.spec.tasks.is_empty());
        assert_eq!(wf.spec.name, "d");
    }

    #[test]
    fn errors_name_their_location() {
        assert!(first("name: x\ntasks:\n- {name: a, plugin: echo, dependz: []}\n").contains("unknown field `dependz`"));
        assert!(first("name: x\ntasks:\n- {name: a, plugin: echo, dependz: []}\n").starts_with("tasks[0]"));
        assert_eq!(
            first("name: x\ntasks:\n- {name: a, plugin: echo}\n- {name: a, plugin: echo}\n"),
            "tasks[1].name: duplicate task name `a` (first used by tasks[0])"
        );
        assert_eq!(
            first("name: x\ntasks:\n- {name: a, plugin: echo, depends_on: [lod]}\n"),
            "tasks[0].depends_on[0]: unknown task `lod`"
        );
        assert_eq!(first("name: x\ntasks:\n- {name: a, plugin: nope}\n"), "tasks[0].plugin: unknown plugin `nope`");
        assert!(
            first("name: x\ntasks:\n- {name: a, plugin: sleep, params: {ms: soon}}\n")
                .starts_with("tasks[0].params.ms:")
        );
        assert!(first("name: x\ntasks:\n- {name: a, plugin: echo, timeout: 5 parsecs}\n").contains("tasks[0].timeout"));
    }

    #[test]
    fn parse_errors_name_their_location_once() {
        let issue = |yaml: &str| validate(yaml).unwrap_err().first().clone();
        let unknown = issue("name: x\ntasks:\n- {name: a, plugin: echo, dependz: []}\n");
        assert_eq!(unknown.location, "tasks[0].dependz");
        assert!(unknown.message.starts_with("unknown field `dependz`"), "{}", unknown.message);
        let wrong = issue("name: x\ntasks:\n- {name: a, plugin: echo, retries: -1}\n");
        assert_eq!(wrong.location, "tasks[0].retries");
        assert!(wrong.message.starts_with("invalid type: integer `-1`"), "{}", wrong.message);
        let syntax = issue("name: x\ntasks:\n- {name: a, plugin: echo\n");
        assert_eq!(syntax.location, "tasks[0]");
        assert!(syntax.message.contains("line 4 column 1"), "{}", syntax.message);
    }

    #[test]
    fn cycles_print_their_path() {
        let err = first(
            "name: x\ntasks:\n- {name: a, plugin: echo, depends_on: [c]}\n- {name: b, plugin: echo, depends_on: [a]}\n\
             - {name: c, plugin: echo, depends_on: [b]}\n",
        );
        assert!(err.contains("dependency cycle: "), "{err}");
        let path = err.split("cycle: ").nth(1).unwrap();
        let names: Vec<&str> = path.split(" -> ").collect();
        assert_eq!(names.len(), 4);
        assert_eq!(names.first(), names.last());
    }

    #[test]
    fn templated_params_skip_the_schema_check() {
        let wf =
            validate("name: x\nparams: {ms: 5}\ntasks:\n- {name: a, plugin: sleep, params: {ms: '{{ params.ms }}'}}\n");
        assert!(wf.is_ok(), "{wf:?}");
    }

    #[test]
    fn canonical_form_ignores_layout() {
        let a = WorkflowSpec::parse("name: x\ntasks:\n- {name: a, plugin: echo, retries: 0}\n", Format::Yaml).unwrap();
        let b = WorkflowSpec::parse(r#"{"tasks":[{"plugin":"echo","name":"a"}],"name":"x"}"#, Format::Json).unwrap();
        assert_eq!(a.content_hash(), b.content_hash());
    }

    #[test]
    fn host_coverage() {
        assert!(host_covered("api.example.org", "api.example.org"));
        assert!(host_covered("api.example.org:443", "api.example.org"));
        assert!(!host_covered("api.example.org", "api.example.org:443"));
        assert!(host_covered("a.b.example.org", "*.example.org"));
        assert!(host_covered("*.b.example.org", "*.example.org"));
        assert!(!host_covered("example.org", "*.example.org"));
        assert!(!host_covered("evil.org", "*.example.org"));
        assert!(host_covered("127.0.0.1:8080", "127.0.0.1"));
        assert!(!host_covered("127.0.0.2", "127.0.0.1"));
    }

    #[test]
    fn backoff() {
        let b = Backoff { kind: BackoffKind::Exponential, delay: Duration::from_secs(2), max: Duration::from_secs(10) };
        assert_eq!(b.delay_for(1), Duration::from_secs(2));
        assert_eq!(b.delay_for(2), Duration::from_secs(4));
        assert_eq!(b.delay_for(5), Duration::from_secs(10));
    }

    #[test]
    fn the_name_rule_is_the_schema_s_pattern() {
        let schema = json_schema();
        let pattern = schema["properties"]["name"]["pattern"].as_str().unwrap();
        let pattern =
            jsonschema::validator_for(&serde_json::json!({"type": "string", "pattern": pattern, "maxLength": 128}))
                .unwrap();
        let long = "a".repeat(129);
        for name in [
            "daily-sales",
            "Hello",
            "a.b",
            "-x",
            "_",
            "v1.2",
            "..a",
            "ok",
            long.as_str(),
            "",
            ".",
            "..",
            "a b",
            "é",
            "a/b",
        ] {
            let value = serde_json::Value::String(name.into());
            assert_eq!(valid_name(name), pattern.is_valid(&value), "`{name}`");
        }
        assert!(first("name: '..'\ntasks:\n- {name: a, plugin: echo}\n").ends_with(NAME_RULE));
    }

    #[test]
    fn overrides_must_be_declared() {
        let wf = validate("name: x\nparams: {region: eu}\ntasks:\n- {name: a, plugin: echo}\n").unwrap();
        let mut o = serde_json::Map::new();
        o.insert("regoin".into(), "us".into());
        assert!(wf.resolve_params(&o).unwrap_err().first().message.contains("unknown param `regoin`"));
    }
}
